//! `stats cluster`: the node's part in its shard, as its task last saw it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::server::Shared;

use super::ring::Placement;
use super::{advertise, enabled};

/// What the server keeps of the cluster beside the node's view of its shard
/// (`kura_replication::role::Shard`): the ring and its counters.
#[derive(Default)]
pub struct Status {
    /// The ring, as the ring task last read it (None: no ring set).
    placement: parking_lot::RwLock<Option<Arc<Placement>>>,
    /// Requests passed on to another shard's primary, and multi-key gets split
    /// between shards.
    pub(super) owner_forwarded: AtomicU64,
    pub(super) split_gets: AtomicU64,
    /// Whether the ring task has read etcd once (whether or not it holds a ring):
    /// until then a node cannot know which keys are its shard's.
    pub(super) ring_read: std::sync::atomic::AtomicBool,
    /// The moves this node's shard is in (`super::moves`).
    pub(super) moves: super::moves::Moves,
    /// The runtime the cluster's tasks run on, for the SQL threads' calls to etcd.
    pub(super) runtime: std::sync::OnceLock<tokio::runtime::Handle>,
    /// Tables of this shard's catalog that etcd places on another shard (warned of).
    pub(super) table_conflicts: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// Tables this node placed in etcd as it created them.
    pub(super) tables_claimed: AtomicU64,
    /// SQL statements passed on to the shard holding their tables.
    pub(super) sql_forwarded: AtomicU64,
    /// SQL statements refused for naming tables of several shards.
    pub(super) sql_spanning: AtomicU64,
}

impl Status {
    /// The ring as the node last read it.
    pub fn placement(&self) -> Option<Arc<Placement>> {
        self.placement.read().clone()
    }

    /// Whether the ring task has read etcd once.
    pub fn has_read_ring(&self) -> bool {
        self.ring_read.load(Ordering::Acquire)
    }

    /// Sets the placement; a move's state stays where the current one has it if
    /// that is further (a hand-off may have learnt of its flip since `placement`
    /// was read from etcd).
    pub(super) fn set_placement(&self, placement: Placement) {
        let mut current = self.placement.write();
        let merged = match current.as_deref() {
            // An older ring never replaces a newer one.
            Some(now) if now.version > placement.version => return,
            Some(now) => placement.keeping_progress_of(now),
            None => placement,
        };
        *current = Some(Arc::new(merged));
    }
}

/// The node's part in its shard now, as `stats cluster` and the metrics show it.
pub struct View {
    pub role: &'static str,
    /// Whom etcd names primary (None: no one).
    pub primary: Option<String>,
    /// The epoch of the term this node holds (0: none).
    pub term: i64,
    pub members: usize,
    /// How long its lease is certainly alive, in ms (-1: none).
    pub lease_ms: i64,
    pub serving_reads: bool,
    /// SQL connections passed on to the primary since the start.
    pub sql_passed_on: u64,
}

/// The node's view of its shard; None outside cluster mode.
pub fn view(shared: &Shared) -> Option<View> {
    if !enabled(&shared.config) {
        return None;
    }
    let seen = shared.replication.shard.seen();
    let role = if !shared.store.is_read_only() {
        "primary"
    } else if shared.replication.primary().is_some() {
        "replica"
    } else {
        "candidate"
    };
    Some(View {
        role,
        primary: seen.primary,
        term: seen.term.unwrap_or(0),
        members: seen.members,
        lease_ms: seen.lease_until.map_or(-1, |until| {
            i64::try_from(until.saturating_duration_since(Instant::now()).as_millis())
                .unwrap_or(i64::MAX)
        }),
        serving_reads: shared.read_refusal().is_none(),
        sql_passed_on: seen.sql_passed_on,
    })
}

/// `stats cluster`: the node's cluster, shard, role, the primary etcd names, the term
/// this node holds (0: none), the shard's registered members, and how long its lease
/// is certainly alive (ms; -1: none), the SQL connections it passed on to the
/// primary, the ring's version (0: none) and shards, and the requests it passed on
/// to another shard's primary and the multi-key gets it split between shards.
pub fn write_stats(shared: &Shared, out: &mut Vec<u8>) {
    let mut stat = |name: &str, value: &dyn std::fmt::Display| {
        out.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes());
    };
    let config = &shared.config;
    let Some(view) = view(shared) else {
        stat("cluster_mode", &"off");
        out.extend_from_slice(b"END\r\n");
        return;
    };
    stat("cluster_mode", &"on");
    stat("cluster", &config.cluster.clone().unwrap_or_default());
    stat("shard", &config.shard.clone().unwrap_or_default());
    stat("advertise", &advertise(shared));
    stat("role", &view.role);
    stat("primary", &view.primary.unwrap_or_else(|| "-".to_string()));
    stat("term", &view.term);
    stat("members", &view.members);
    stat("lease_ms", &view.lease_ms);
    stat("serving_reads", &u8::from(view.serving_reads));
    stat("sql_passed_on", &view.sql_passed_on);
    match shared.cluster.placement() {
        Some(p) => {
            stat("ring_version", &p.version);
            stat("ring_shards", &p.shards.len());
            if let Some(next) = p.next_version() {
                stat("ring_next_version", &next);
                let moves: Vec<String> = p
                    .moves()
                    .iter()
                    .map(|m| {
                        format!(
                            "{}>{}:{}",
                            p.shards[m.from],
                            p.shards[m.to],
                            format!("{:?}", m.state).to_lowercase()
                        )
                    })
                    .collect();
                stat("ring_moves", &moves.join(","));
            }
        }
        None => stat("ring_version", &0),
    }
    let moves = &shared.cluster.moves;
    stat("move_copied", &moves.copied.load(Ordering::Relaxed));
    stat("move_purged", &moves.purged.load(Ordering::Relaxed));
    stat("move_flips", &moves.flips.load(Ordering::Relaxed));
    stat("move_releases", &moves.releases.load(Ordering::Relaxed));
    stat(
        "owner_forwarded",
        &shared.cluster.owner_forwarded.load(Ordering::Relaxed),
    );
    let placed = shared.cluster.placement().map_or(0, |p| p.tables.len());
    stat("tables", &placed);
    let counter = |c: &AtomicU64| c.load(Ordering::Relaxed);
    stat("tables_claimed", &counter(&shared.cluster.tables_claimed));
    stat("sql_forwarded", &counter(&shared.cluster.sql_forwarded));
    stat("sql_spanning", &counter(&shared.cluster.sql_spanning));
    stat(
        "split_gets",
        &shared.cluster.split_gets.load(Ordering::Relaxed),
    );
    out.extend_from_slice(b"END\r\n");
}
