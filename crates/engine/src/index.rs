//! The in-memory index: key -> newest live version, in shards so that writers of
//! different keys do not wait on one another and readers never wait on a writer of
//! another shard.
//!
//! Each shard is a `RwLock<HashMap>`; the shard is chosen from the top bits of a keyed
//! SipHash of the key, so clients cannot aim every key at one shard. Values live here
//! in full while the whole data set is in memory (the memory budget and disk-resident
//! values arrive with the "beyond memory" work).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::log::Location;

/// 64 shards: enough that two cores and their connections rarely meet on one lock.
const SHARD_BITS: u32 = 6;

/// One key's newest version.
#[derive(Debug)]
pub(crate) struct Entry {
    pub value: Arc<[u8]>,
    pub client_flags: u32,
    /// Absolute Unix seconds; 0 = never.
    pub exptime: u32,
    /// Unix seconds when this version was stored; decides a delayed flush_all.
    pub time: u32,
    pub cas: u64,
    /// The LSN of the record that made this version; a reply that shows it waits until
    /// that LSN is acknowledged. A copy made by compaction keeps the original's LSN: it
    /// is no new write.
    pub lsn: u64,
    /// Where the record holding this version sits (moved by compaction).
    pub location: Location,
    pub stale: bool,
    /// Stored through the meta protocol's base64 key flag: replies show it encoded.
    pub binary_key: bool,
    /// Volatile access bookkeeping for the meta protocol (not logged).
    pub fetched: AtomicBool,
    pub last_access: AtomicU32,
    pub win_sent: AtomicBool,
}

pub(crate) type Shard = HashMap<Box<[u8]>, Entry>;

pub(crate) struct Index {
    shards: Box<[RwLock<Shard>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl Index {
    pub fn new() -> Index {
        let shards = (0..1usize << SHARD_BITS)
            .map(|_| RwLock::new(HashMap::new()))
            .collect();
        Index {
            shards,
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    pub fn shard(&self, key: &[u8]) -> &RwLock<Shard> {
        let hash = self.hasher.hash_one(key);
        &self.shards[(hash >> (64 - SHARD_BITS)) as usize]
    }

    pub fn shards(&self) -> &[RwLock<Shard>] {
        &self.shards
    }
}

impl Entry {
    /// Records an access. Writes only what changed: a hot key read from both cores
    /// would otherwise bounce its cache line on every read.
    pub fn mark_access(&self, now_secs: u32) {
        if !self.fetched.load(Ordering::Relaxed) {
            self.fetched.store(true, Ordering::Relaxed);
        }
        if self.last_access.load(Ordering::Relaxed) != now_secs {
            self.last_access.store(now_secs, Ordering::Relaxed);
        }
    }
}
