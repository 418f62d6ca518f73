//! Server-wide counters behind memcached's `stats`, and the registry of open connections
//! behind `stats conns`.
//!
//! Counters are relaxed atomics: they are for people and dashboards, not for correctness.
//! Each thread bumps its own copy ([`CounterSet::local`]), so the hot path never writes a
//! cache line another core is writing; `stats` adds the copies up.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kura_engine::histogram::{Histogram, HistogramSnapshot};
use parking_lot::Mutex;

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// One thread's copy of the counters, on cache lines of its own.
        #[derive(Debug, Default)]
        #[repr(align(128))]
        pub struct Counters { $(pub $name: AtomicU64,)* }
        impl Counters {
            /// Adds this copy into `sums`, in declaration order. Gauges that one thread
            /// raises and another lowers wrap in one copy and come right in the sum.
            fn add_into(&self, sums: &mut Vec<(&'static str, u64)>) {
                let values = [$(self.$name.load(Ordering::Relaxed),)*];
                if sums.is_empty() {
                    *sums = vec![$((stringify!($name), 0),)*];
                }
                for (slot, value) in sums.iter_mut().zip(values) {
                    slot.1 = slot.1.wrapping_add(value);
                }
            }
            /// Zeroes every counter but the gauge of open connections.
            fn reset(&self) {
                let open = self.curr_connections.load(Ordering::Relaxed);
                $(self.$name.store(0, Ordering::Relaxed);)*
                self.curr_connections.store(open, Ordering::Relaxed);
            }
        }
    };
}

thread_local! {
    /// Which copy of the counters this thread bumps; set when a worker starts.
    static SLOT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A copy of the counters per thread (slot 0 for the acceptor and any other thread).
#[derive(Debug)]
pub struct CounterSet {
    slots: Box<[Counters]>,
    /// Per thread as the counters: how long each connection's batch took, from its
    /// read to its replies written.
    batch_times: Box<[Histogram]>,
}

impl CounterSet {
    pub fn new(worker_threads: usize) -> CounterSet {
        CounterSet {
            slots: (0..=worker_threads).map(|_| Counters::default()).collect(),
            batch_times: (0..=worker_threads).map(|_| Histogram::default()).collect(),
        }
    }

    /// Records one batch's time, from its read to its replies written.
    pub fn record_batch(&self, elapsed: std::time::Duration) {
        let slot = SLOT.with(std::cell::Cell::get);
        self.batch_times[slot.min(self.batch_times.len() - 1)].record(elapsed);
    }

    /// The batch times of every thread together.
    pub fn batch_times(&self) -> HistogramSnapshot {
        let mut snapshot = HistogramSnapshot::default();
        for histogram in self.batch_times.iter() {
            histogram.add_to(&mut snapshot);
        }
        snapshot
    }

    /// Makes the calling thread bump copy `1 + worker`.
    pub fn bind_worker(&self, worker: usize) {
        SLOT.with(|slot| slot.set((1 + worker).min(self.slots.len() - 1)));
    }

    /// The calling thread's copy.
    pub fn local(&self) -> &Counters {
        let slot = SLOT.with(std::cell::Cell::get);
        &self.slots[slot.min(self.slots.len() - 1)]
    }

    /// (name, value) of every counter summed over threads, in declaration order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        let mut sums = Vec::new();
        for slot in self.slots.iter() {
            slot.add_into(&mut sums);
        }
        sums
    }

    /// The sum of one counter over threads.
    pub fn total(&self, pick: impl Fn(&Counters) -> &AtomicU64) -> u64 {
        self.slots.iter().fold(0u64, |sum, c| {
            sum.wrapping_add(pick(c).load(Ordering::Relaxed))
        })
    }

    /// `stats reset`: zero every counter but the gauge of open connections.
    pub fn reset(&self) {
        for slot in self.slots.iter() {
            slot.reset();
        }
    }
}

counters!(
    cmd_get,
    cmd_set,
    cmd_flush,
    cmd_touch,
    cmd_meta,
    get_hits,
    get_misses,
    get_expired,
    get_flushed,
    delete_misses,
    delete_hits,
    incr_misses,
    incr_hits,
    decr_misses,
    decr_hits,
    cas_misses,
    cas_hits,
    cas_badval,
    touch_hits,
    touch_misses,
    store_too_large,
    store_no_memory,
    auth_cmds,
    auth_errors,
    bytes_read,
    bytes_written,
    total_items,
    curr_connections,
    total_connections,
    rejected_connections,
    conn_yields,
    idle_kicks,
    log_wait_batches,
    io_uring_reads,
    noreply_errors_dropped,
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
    /// Unix seconds (the store's clock) of this connection's last command.
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
        self.open
            .lock()
            .iter()
            .map(|(id, info)| (*id, info.clone()))
            .collect()
    }
}

/// memcached's `stats detail`: per-prefix counts of get, hit, set and delete for keys
/// with a `:`-delimited prefix, kept only while switched on.
#[derive(Debug, Default)]
pub struct PrefixStats {
    enabled: std::sync::atomic::AtomicBool,
    by_prefix: Mutex<BTreeMap<Vec<u8>, PrefixCounts>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct PrefixCounts {
    get: u64,
    hit: u64,
    set: u64,
    delete: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrefixEvent {
    Get { hit: bool },
    Set,
    Delete,
}

impl PrefixStats {
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Relaxed);
    }

    pub fn record(&self, key: &[u8], event: PrefixEvent) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        let Some(end) = key.iter().position(|&b| b == b':') else {
            return;
        };
        let mut map = self.by_prefix.lock();
        let counts = map.entry(key[..end].to_vec()).or_default();
        match event {
            PrefixEvent::Get { hit } => {
                counts.get += 1;
                counts.hit += u64::from(hit);
            }
            PrefixEvent::Set => counts.set += 1,
            PrefixEvent::Delete => counts.delete += 1,
        }
    }

    /// `stats detail dump`: one `PREFIX` line per prefix, then `END`.
    pub fn dump(&self, out: &mut Vec<u8>) {
        for (prefix, c) in self.by_prefix.lock().iter() {
            out.extend_from_slice(b"PREFIX ");
            out.extend_from_slice(prefix);
            out.extend_from_slice(
                format!(
                    " get {} hit {} set {} del {}\r\n",
                    c.get, c.hit, c.set, c.delete
                )
                .as_bytes(),
            );
        }
        out.extend_from_slice(b"END\r\n");
    }

    pub fn clear(&self) {
        self.by_prefix.lock().clear();
    }
}
