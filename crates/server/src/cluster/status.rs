//! `stats cluster`: the node's part in its shard, as its task last saw it.

use std::time::Instant;

use crate::server::Shared;

use super::{advertise, enabled};

/// What `stats cluster` shows of the node's part in its shard, as the task last
/// saw it.
#[derive(Default)]
pub struct Status {
    inner: parking_lot::Mutex<Seen>,
}

#[derive(Default, Clone)]
pub(super) struct Seen {
    pub(super) primary: Option<String>,
    pub(super) term: Option<i64>,
    pub(super) members: usize,
    pub(super) lease_until: Option<Instant>,
}

impl Status {
    pub(super) fn update(&self, change: impl FnOnce(&mut Seen)) {
        change(&mut self.inner.lock());
    }
}

/// `stats cluster`: the node's cluster, shard, role, the primary etcd names, the term
/// this node holds (0: none), the shard's registered members, and how long its lease
/// is certainly alive (ms; -1: none).
pub fn write_stats(shared: &Shared, out: &mut Vec<u8>) {
    let mut stat = |name: &str, value: &dyn std::fmt::Display| {
        out.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes());
    };
    let config = &shared.config;
    if !enabled(config) {
        stat("cluster_mode", &"off");
        out.extend_from_slice(b"END\r\n");
        return;
    }
    let seen = shared.cluster.inner.lock().clone();
    stat("cluster_mode", &"on");
    stat("cluster", &config.cluster.clone().unwrap_or_default());
    stat("shard", &config.shard.clone().unwrap_or_default());
    stat("advertise", &advertise(shared));
    let role = if !shared.store.is_read_only() {
        "primary"
    } else if shared.replication.primary().is_some() {
        "replica"
    } else {
        "candidate"
    };
    stat("role", &role);
    stat("primary", &seen.primary.unwrap_or_else(|| "-".to_string()));
    stat("term", &seen.term.unwrap_or(0));
    stat("members", &seen.members);
    let lease_ms = seen.lease_until.map_or(-1, |until| {
        i64::try_from(until.saturating_duration_since(Instant::now()).as_millis())
            .unwrap_or(i64::MAX)
    });
    stat("lease_ms", &lease_ms);
    stat("serving_reads", &u8::from(shared.read_refusal().is_none()));
    out.extend_from_slice(b"END\r\n");
}
