//! Server-wide counters behind memcached's `stats`, and the registry of open connections
//! behind `stats conns`.
//!
//! Counters are relaxed atomics: they are for people and dashboards, not for correctness.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        #[derive(Debug, Default)]
        pub struct Counters { $(pub $name: AtomicU64,)* }
        impl Counters {
            /// (name, value) of every counter, in declaration order.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Ordering::Relaxed)),)*]
            }
            /// `stats reset`: zero every counter but the gauge of open connections.
            pub fn reset(&self) {
                let open = self.curr_connections.load(Ordering::Relaxed);
                $(self.$name.store(0, Ordering::Relaxed);)*
                self.curr_connections.store(open, Ordering::Relaxed);
            }
        }
    };
}

counters!(
    cmd_get, cmd_set, cmd_flush, cmd_touch, cmd_meta, get_hits, get_misses, get_expired,
    get_flushed, delete_misses, delete_hits, incr_misses, incr_hits, decr_misses, decr_hits,
    cas_misses, cas_hits, cas_badval, touch_hits, touch_misses, store_too_large,
    store_no_memory, auth_cmds, auth_errors, bytes_read, bytes_written, total_items,
    curr_connections, total_connections, rejected_connections, log_wait_batches,
);

pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// What `stats conns` shows of one connection.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub addr: String,
    pub listen_addr: String,
    /// Seconds since the server started, at this connection's last command.
    pub last_cmd_secs: Arc<AtomicU64>,
}

#[derive(Debug, Default)]
pub struct Connections {
    open: Mutex<BTreeMap<u64, ConnInfo>>,
}

impl Connections {
    pub fn register(&self, id: u64, info: ConnInfo) {
        self.open.lock().insert(id, info);
    }

    pub fn unregister(&self, id: u64) {
        self.open.lock().remove(&id);
    }

    pub fn snapshot(&self) -> Vec<(u64, ConnInfo)> {
        self.open.lock().iter().map(|(id, info)| (*id, info.clone())).collect()
    }
}
