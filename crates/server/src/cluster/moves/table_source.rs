//! A table's move, on its source's primary (`kura cluster move-table`): the table is
//! described for the target, sealed against DDL while its rows are copied, handed off
//! as the ring's keys are (`source.rs`, under the name `@@<table>`), and dropped here
//! once the target owns it.
//!
//! 1. **Describe**: the move begins in etcd with no description. S's primary seals
//!    the table `Moving` (no DDL changes it from here on) and records it in etcd as a
//!    catalog of its own: the definition and index numbers the target copies by.
//! 2. The target copies (`target.rs`), and asks for the hand-off, which seals the
//!    table `Held`, then `Gone` once the flip has put the table on the target.
//! 3. **Purge**: S drops the table (its rows and entries deleted through the log, so
//!    S's replicas drop them too) and records the move purged.
//!
//! A seal lives in memory: a node that becomes S's primary (or restarts) seals the
//! table again as the move's state says, at its first read of etcd. An abandoned
//! move's seal is lifted.

use std::sync::Arc;

use kura_cluster::{MoveState, Observer};
use kura_tables::Seal;

use crate::server::Shared;

use super::super::ring::{Placement, TableMoving};

/// The move of `table` this node may hand off now: its id, if this node is its
/// source's primary and the move is described and copying.
pub(super) fn handing(shared: &Shared, table: &str) -> Option<i64> {
    if shared.store.is_read_only() {
        return None;
    }
    let placement = shared.cluster.placement()?;
    let m = placement.table_moving(table)?;
    (Some(m.from) == placement.mine && m.state == MoveState::Copying && m.described.is_some())
        .then_some(m.id)
}

/// Marks the move of `table` begun at `id` at least at `state` in this node's
/// placement, ahead of the next poll of etcd.
pub(super) fn advance(shared: &Shared, table: &str, id: i64, state: MoveState) {
    if let Some(p) = shared.cluster.placement() {
        shared
            .cluster
            .set_placement(p.table_advanced(table, id, state));
    }
}

/// Whether this node is still the primary of the source of the move of `table`
/// begun at `id`, and the move still at `state`.
pub(super) fn still(shared: &Shared, table: &str, id: i64, state: MoveState) -> bool {
    if shared.store.is_read_only() || shared.stopping.load(std::sync::atomic::Ordering::Acquire) {
        return false;
    }
    shared.cluster.placement().is_some_and(|p| {
        p.table_moving(table)
            .is_some_and(|m| m.id == id && m.state == state)
    })
}

/// Seals the tables this primary is giving away as their moves' states say, and
/// lifts the seal of a table whose move is gone. Returns the moves that need a task:
/// a description, or a purge.
pub(super) fn seal_as_placed(shared: &Shared, placement: &Placement) -> Vec<TableMoving> {
    let mine = placement.mine;
    let mut tasks = Vec::new();
    let catalog = shared.tables.catalog();
    let ours: Vec<&TableMoving> = placement
        .table_moves
        .iter()
        .filter(|m| Some(m.from) == mine)
        .collect();
    for m in &ours {
        let Some(t) = catalog.table(&m.table) else {
            if m.state == MoveState::Flipped {
                // Dropped here already: only etcd is left to tell.
                tasks.push((*m).clone());
            }
            continue;
        };
        let number = catalog.tables[t].number;
        let wanted = match m.state {
            MoveState::Copying => Seal::Moving,
            MoveState::Flipped | MoveState::Purged => Seal::Gone,
        };
        let now = shared.tables.seal_of(number);
        // A hand-off in progress holds it; it ends as `Gone` or `Moving` itself. A
        // flip is never undone (a placement read from etcd before it may say
        // `copying` for a moment).
        if now != Some(wanted) && now != Some(Seal::Held) && now != Some(Seal::Gone) {
            if let Err(e) = shared.tables.seal(&m.table, wanted) {
                tracing::warn!("cluster: sealing table {}: {e}", m.table);
            }
        }
        if (m.state == MoveState::Copying && m.described.is_none()) || m.state == MoveState::Flipped
        {
            tasks.push((*m).clone());
        }
    }
    for (number, name, _) in shared.tables.sealed() {
        if !ours.iter().any(|m| m.table == name) {
            tracing::info!("cluster: the move of table {name} is gone: its writes go on here");
            shared.tables.unseal(number);
        }
    }
    tasks
}

/// Describes the table `m` moves for its target, in etcd.
pub(super) fn describe(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    m: &TableMoving,
) -> Result<(), String> {
    shared
        .tables
        .seal(&m.table, Seal::Moving)
        .map_err(|e| e.to_string())?;
    let described = shared
        .tables
        .catalog()
        .describe_table(&m.table)
        .ok_or("an index of it is being built; the move waits")?;
    let config = &shared.config;
    let cluster = config.cluster.clone().unwrap_or_default();
    let done = runtime.block_on(async {
        let mut observer = Observer::connect(&config.etcd, &cluster).await?;
        match observer.table_move(&m.table).await? {
            Some(now) if now.id == m.id && now.described.is_none() => {
                observer.describe_table_move(&now, described).await
            }
            _ => Ok(false),
        }
    });
    match done {
        Ok(true) => {
            tracing::info!("cluster: table {} described for its move", m.table);
            Ok(())
        }
        Ok(false) => Ok(()),
        Err(e) => Err(format!("describing table {}: {e}", m.table)),
    }
}

/// The purge of a flipped table move: drops the table here, then records the move
/// purged.
pub(super) fn purge(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    m: &TableMoving,
) -> Result<(), String> {
    if !still(shared, &m.table, m.id, MoveState::Flipped) {
        return Ok(());
    }
    let catalog = shared.tables.catalog();
    if let Some(t) = catalog.table(&m.table) {
        let number = catalog.tables[t].number;
        shared
            .tables
            .seal(&m.table, Seal::Gone)
            .map_err(|e| e.to_string())?;
        shared
            .tables
            .drop_table(&m.table)
            .map_err(|e| format!("dropping table {}: {e:?}", m.table))?;
        shared.tables.unseal(number);
        tracing::info!("cluster: table {} dropped here after its move", m.table);
    }
    let config = &shared.config;
    let cluster = config.cluster.clone().unwrap_or_default();
    let recorded = runtime.block_on(async {
        let mut observer = Observer::connect(&config.etcd, &cluster).await?;
        observer.set_table_purged(&m.table, m.id).await
    });
    match recorded {
        Ok(_) => {
            advance(shared, &m.table, m.id, MoveState::Purged);
            Ok(())
        }
        Err(e) => Err(format!("recording the purge: {e}")),
    }
}
