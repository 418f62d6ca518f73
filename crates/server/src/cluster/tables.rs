//! Tables on shards (issue 42): each table lives whole on one shard, named in etcd
//! (`kura_cluster`'s `tables/<name>`), so a row and its unique-index entries stay one
//! atomic write.
//!
//! A shard's primary places a table on its shard before it creates it (`claim`): the
//! name is taken in etcd first, so two shards never both create it; a name another
//! shard holds goes there instead. It unplaces a table it dropped (`release`), and
//! places, a poll at a time, any table of its catalog that etcd does not name yet
//! (made before the cluster's ring, or while etcd was away: `place_local`).
//!
//! What it is not for: which shard a statement or a `@@table` request goes to
//! (`super::sql_shards`, `super::forward`), or moving a table.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use kura_cluster::{ClusterError, Observer};

use crate::server::Shared;

/// Places the tables of this primary's catalog that etcd does not name, on `shard`;
/// adds each to `placed` with the shard that holds it after.
pub(super) async fn place_local(
    shared: &Shared,
    observer: &mut Observer,
    shard: &str,
    placed: &mut Vec<(String, String)>,
) -> Result<(), ClusterError> {
    if shared.store.is_read_only() {
        return Ok(());
    }
    let known: HashMap<String, String> = placed.iter().cloned().collect();
    let catalog = shared.tables.catalog();
    for def in &catalog.tables {
        let name = &def.table.name;
        if known.contains_key(name) {
            continue;
        }
        let holder = observer.place_table(name, shard).await?;
        if holder == shard {
            tracing::info!("cluster: table {name} placed on shard {shard}");
        } else if shared.cluster.table_conflicts.lock().insert(name.clone()) {
            tracing::warn!(
                "cluster: this shard has a table {name}, which etcd places on shard {holder}: \
                 requests for it go there, and this shard's copy is out of reach"
            );
        }
        placed.push((name.clone(), holder));
    }
    Ok(())
}

/// Runs `f` with an etcd observer on the node's runtime, from a thread outside it.
fn with_observer<T>(
    shared: &Shared,
    f: impl for<'o> FnOnce(
        &'o mut Observer,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<T, ClusterError>> + Send + 'o>,
    >,
) -> Result<T, String> {
    let Some(runtime) = shared.cluster.runtime.get() else {
        return Err("the cluster's task has not started yet, try again".into());
    };
    let config = &shared.config;
    let cluster = config.cluster.clone().unwrap_or_default();
    runtime
        .block_on(async {
            let mut observer = Observer::connect(&config.etcd, &cluster).await?;
            f(&mut observer).await
        })
        .map_err(|e| format!("etcd: {e}"))
}

/// Places `table` on this node's shard, before this primary creates it. Returns the
/// shard that holds it: this one, or the one that did already.
pub fn claim(shared: &Shared, table: &str) -> Result<String, String> {
    let shard = shared.config.shard.clone().unwrap_or_default();
    let name = table.to_string();
    let holder = with_observer(shared, move |o| {
        Box::pin(async move { o.place_table(&name, &shard).await })
    })?;
    shared
        .cluster
        .tables_claimed
        .fetch_add(1, Ordering::Relaxed);
    Ok(holder)
}

/// Unplaces `table` if etcd places it on this node's shard: after this primary
/// dropped it, or failed to create it. A failure is logged: the name stays this
/// shard's, which is harmless (statements for it come here and find no table).
pub fn release(shared: &Shared, table: &str) {
    let shard = shared.config.shard.clone().unwrap_or_default();
    let name = table.to_string();
    let done = with_observer(shared, move |o| {
        Box::pin(async move { o.unplace_table(&name, &shard).await })
    });
    if let Err(e) = done {
        tracing::warn!("cluster: unplacing table {table}: {e}");
    }
}
