//! Cluster mode (`--etcd`) in the server: its flags, and what the server does with
//! the cluster: requests and SQL connections passed on to a primary (`forward.rs`,
//! `sql_forward.rs`, `split.rs`), the ring (`ring.rs`), `stats cluster`
//! (`status.rs`) and `kura cluster` (`cli.rs`).
//!
//! What it is not for: the node's role in its shard, which etcd decides
//! (`kura_replication::role`), and the election itself (`kura-cluster`).

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::server::Shared;

mod cli;
mod cli_tables;
mod forward;
mod moves;
mod ring;
mod split;
mod sql_forward;
mod sql_shards;
mod sql_upstream;
mod status;
mod tables;

pub use cli::command;
pub use forward::{
    forward, forward_binary, forwarded, forwarded_binary, Forwarder, Forwarding, Queue,
};
pub use moves::{admit, hand_off};
pub use split::split_get;
pub use sql_forward::pass_on;
pub use sql_shards::{Replies, Routed, SqlShards};
pub use status::{view, write_stats, Status};

/// The address this node is known by in its shard.
pub(crate) fn advertise(shared: &Shared) -> String {
    shared
        .config
        .advertise
        .clone()
        .unwrap_or_else(|| shared.listen_addr.to_string())
}

/// Why a request that needs the shard's primary is refused while there is none.
pub const NO_PRIMARY: &str = "the shard has no primary (being elected), try again";

/// What a store without a primary names as the primary in its refusals.
pub use kura_replication::role::ELECTING;

/// Refuses cluster settings that cannot work, before anything is opened.
pub fn check(config: &Config) -> anyhow::Result<()> {
    let named = config.cluster.is_some() || config.shard.is_some();
    if config.etcd.is_empty() {
        if named || config.advertise.is_some() {
            anyhow::bail!(
                "--cluster, --shard and --advertise are for cluster mode: give --etcd URLS"
            );
        }
        return Ok(());
    }
    if config.cluster.is_none() || config.shard.is_none() {
        anyhow::bail!("cluster mode (--etcd) needs --cluster NAME and --shard NAME");
    }
    if config.replica_of.is_some() {
        anyhow::bail!("--replica-of is not for cluster mode: etcd says whom each node follows");
    }
    for url in &config.etcd {
        if !url.starts_with("http://") && !url.starts_with("https://") {
            anyhow::bail!("--etcd: {url:?} is not an http:// or https:// URL");
        }
    }
    Ok(())
}

/// Whether this node runs in cluster mode.
pub fn enabled(config: &Config) -> bool {
    !config.etcd.is_empty()
}

/// Starts the node's part in its shard, and the ring's task, on the current runtime;
/// they run until the process ends.
pub fn start(shared: Arc<Shared>) {
    let _ = shared
        .cluster
        .runtime
        .set(tokio::runtime::Handle::current());
    let config = &shared.config;
    let advertise = advertise(&shared);
    let settings = kura_cluster::Config {
        endpoints: config.etcd.clone(),
        cluster: config.cluster.clone().unwrap_or_default(),
        shard: config.shard.clone().unwrap_or_default(),
        sql: shared.sql_addr.map(|sql| {
            // The advertised host with this node's SQL port.
            let host = advertise
                .rsplit_once(':')
                .map_or(&advertise[..], |(h, _)| h);
            format!("{host}:{}", sql.port())
        }),
        advertise,
        lease_ttl: Duration::from_millis(config.lease_ttl_ms),
    };
    ring::start(
        Arc::clone(&shared),
        kura_replication::role::poll_every(&settings),
    );
    kura_replication::role::start(shared, settings);
}
