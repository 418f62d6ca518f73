//! The in-memory index: key -> newest live version, in shards so that writers of
//! different keys do not wait on one another and readers never wait on a writer of
//! another shard. Each shard also holds its part of the value cache.
//!
//! Each shard is a `RwLock<Shard>`; the shard is chosen from the top bits of a keyed
//! SipHash of the key, so clients cannot aim every key at one shard.
//!
//! Every key's metadata (flags, expiry, CAS, where its record is) stays in memory; its
//! value may not. A value in memory is in the cache: the shard remembers the order values
//! came in (a FIFO of key and CAS) and evicts with a second chance, CLOCK style: a value
//! read since it came in goes round once more. An evicted value is read back from its
//! record in the log when next wanted. A value is evicted only once its record has been
//! written to the operating system, so a read of the file finds it.

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::log::Location;

/// 64 shards: enough that two cores and their connections rarely meet on one lock.
const SHARD_BITS: u32 = 6;
pub(crate) const SHARDS: u64 = 1 << SHARD_BITS;

/// One key's newest version.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The value, when it is in memory; otherwise it is read from `location`.
    pub value: Option<Arc<[u8]>>,
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
    /// The length of the value, in memory or not.
    pub value_len: u32,
    pub stale: bool,
    /// Stored through the meta protocol's base64 key flag: replies show it encoded.
    pub binary_key: bool,
    /// Volatile access bookkeeping for the meta protocol (not logged).
    pub fetched: AtomicBool,
    pub last_access: AtomicU32,
    pub win_sent: AtomicBool,
    /// Read since its value came into memory: the cache's second chance.
    pub referenced: AtomicBool,
}

/// A table slot: the key's pointer and the entry, plus the table's control byte.
const SLOT_BYTES: u64 = std::mem::size_of::<(Arc<[u8]>, Entry)>() as u64 + 1;

/// What the allocator hands out for a key: its reference counts, its bytes and the
/// allocator's header, rounded up to its 16-byte granule.
fn key_alloc_bytes(key_len: usize) -> u64 {
    (16 + key_len as u64 + 8).div_ceil(16) * 16
}

/// Bytes a table with room for `capacity` entries allocates (hashbrown keeps an eighth
/// of its buckets free).
fn table_bytes(capacity: usize) -> u64 {
    (capacity as u64 * 8).div_ceil(7) * SLOT_BYTES
}

/// What one more key costs the index at the table's fullest load: a budget check made
/// before a store.
pub(crate) fn key_cost(key_len: usize) -> u64 {
    key_alloc_bytes(key_len) + SLOT_BYTES * 8 / 7
}

/// Memory a value in the cache costs beyond its bytes: its allocation header and its
/// place in the FIFO.
pub(crate) const VALUE_OVERHEAD_BYTES: u64 = 16 + std::mem::size_of::<(Arc<[u8]>, u64)>() as u64;

fn value_cost(value: &[u8]) -> u64 {
    value.len() as u64 + VALUE_OVERHEAD_BYTES
}

/// One shard: its part of the index and of the value cache.
type Map = hashbrown::HashMap<Arc<[u8]>, Entry, RandomState>;

#[derive(Debug)]
pub(crate) struct Shard {
    map: Map,
    /// What this shard's table and keys allocate, also added into the index's total.
    index_bytes: u64,
    index_total: Arc<AtomicU64>,
    /// What the keys' allocations take.
    key_bytes: u64,
    /// Values in memory, in the order they came in: the key and the CAS of the version
    /// whose value it was. Entries whose version has gone are skipped when met.
    fifo: VecDeque<(Arc<[u8]>, u64)>,
    /// Bytes the values in memory cost (see [`VALUE_OVERHEAD_BYTES`]), and how many.
    pub cached_bytes: u64,
    pub cached_values: u64,
    /// Bytes of keys and values of every entry, in memory or not (memcached's
    /// `bytes`). Kept here, under the shard lock, rather than in one counter every
    /// core would write on every store.
    pub data_bytes: u64,
}

fn data_bytes(key: &[u8], entry: &Entry) -> u64 {
    key.len() as u64 + u64::from(entry.value_len)
}

impl Shard {
    fn new(index_total: Arc<AtomicU64>) -> Shard {
        Shard {
            map: Map::default(),
            index_bytes: 0,
            index_total,
            key_bytes: 0,
            fifo: VecDeque::new(),
            cached_bytes: 0,
            cached_values: 0,
            data_bytes: 0,
        }
    }

    /// Recounts this shard's index memory after a change and passes the difference on
    /// to the index's total.
    fn account(&mut self) {
        let now = table_bytes(self.map.capacity()) + self.key_bytes;
        if now >= self.index_bytes {
            self.index_total
                .fetch_add(now - self.index_bytes, Ordering::Relaxed);
        } else {
            self.index_total
                .fetch_sub(self.index_bytes - now, Ordering::Relaxed);
        }
        self.index_bytes = now;
    }

    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.map.get(key)
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.map.get_mut(key)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn iter(&self) -> hashbrown::hash_map::Iter<'_, Arc<[u8]>, Entry> {
        self.map.iter()
    }

    /// Stores `entry` as `key`'s version, returning the one it replaces. A value in
    /// memory goes into the cache.
    pub fn put(&mut self, key: &[u8], entry: Entry) -> Option<Entry> {
        let cas = entry.cas;
        let cached = entry.value.as_deref().map(value_cost);
        self.data_bytes += data_bytes(key, &entry);
        let (key, old) = match self.map.get_key_value_mut(key) {
            // Overwrite in place: one lookup, and the key's allocation stays.
            Some((k, slot)) => (Arc::clone(k), Some(std::mem::replace(slot, entry))),
            None => {
                let k: Arc<[u8]> = key.into();
                self.map.insert(Arc::clone(&k), entry);
                self.key_bytes += key_alloc_bytes(key.len());
                self.account();
                (k, None)
            }
        };
        if let Some(old) = &old {
            self.uncache(old);
            self.data_bytes -= data_bytes(&key, old);
        }
        if let Some(cost) = cached {
            self.cached_bytes += cost;
            self.cached_values += 1;
            self.fifo.push_back((key, cas));
            self.trim_fifo();
        }
        old
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let old = self.map.remove(key)?;
        self.uncache(&old);
        self.data_bytes -= data_bytes(key, &old);
        self.key_bytes -= key_alloc_bytes(key.len());
        self.account();
        Some(old)
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.fifo.clear();
        self.cached_bytes = 0;
        self.cached_values = 0;
        self.data_bytes = 0;
        self.key_bytes = 0;
        self.account();
    }

    /// Keeps the entries `keep` says to, as `HashMap::retain`.
    pub fn retain(&mut self, mut keep: impl FnMut(&Arc<[u8]>, &Entry) -> bool) {
        let (mut freed, mut values, mut dropped, mut keys) = (0, 0, 0, 0);
        self.map.retain(|k, e| {
            let kept = keep(k, e);
            if !kept {
                dropped += data_bytes(k, e);
                keys += key_alloc_bytes(k.len());
            }
            if let (false, Some(value)) = (kept, &e.value) {
                freed += value_cost(value);
                values += 1;
            }
            kept
        });
        self.cached_bytes -= freed;
        self.cached_values -= values;
        self.data_bytes -= dropped;
        self.key_bytes -= keys;
        self.account();
        self.trim_fifo();
    }

    /// Puts a value read from the log back in memory, if `key` is still at the version
    /// with this CAS and its value is not already there. Returns whether it did.
    pub fn install(&mut self, key: &[u8], cas: u64, value: &Arc<[u8]>) -> bool {
        let Some((k, entry)) = self.map.get_key_value_mut(key) else {
            return false;
        };
        if entry.cas != cas || entry.value.is_some() {
            return false;
        }
        entry.value = Some(Arc::clone(value));
        // Wanted just now: it gets a second chance before it can go again.
        entry.referenced.store(true, Ordering::Relaxed);
        let k = Arc::clone(k);
        self.cached_bytes += value_cost(value);
        self.cached_values += 1;
        self.fifo.push_back((k, cas));
        self.trim_fifo();
        true
    }

    /// Evicts values until the cache holds at most `budget` bytes or nothing more can
    /// go. Values of records not yet written out (past `written_lsn`) stay. Returns how
    /// many values went.
    pub fn evict_to(&mut self, budget: u64, written_lsn: u64) -> u64 {
        let mut evicted = 0;
        // Each FIFO entry is looked at at most twice (once more after a second chance).
        let mut steps = self.fifo.len() * 2;
        while self.cached_bytes > budget && steps > 0 {
            steps -= 1;
            let Some((key, cas)) = self.fifo.pop_front() else {
                break;
            };
            let Some(entry) = self.map.get_mut(&*key) else {
                continue;
            };
            if entry.cas != cas || entry.value.is_none() {
                continue;
            }
            if entry.referenced.swap(false, Ordering::Relaxed) || entry.lsn > written_lsn {
                self.fifo.push_back((key, cas));
                continue;
            }
            if let Some(value) = entry.value.take() {
                self.cached_bytes -= value_cost(&value);
                self.cached_values -= 1;
                evicted += 1;
            }
        }
        evicted
    }

    fn uncache(&mut self, old: &Entry) {
        if let Some(value) = &old.value {
            self.cached_bytes -= value_cost(value);
            self.cached_values -= 1;
        }
    }

    /// Drops FIFO entries of versions that have gone, once they outnumber the live ones:
    /// keys overwritten again and again must not grow it without bound.
    fn trim_fifo(&mut self) {
        if self.fifo.len() <= 2 * self.map.len() + 64 {
            return;
        }
        let map = &self.map;
        self.fifo.retain(|(key, cas)| {
            map.get(&**key)
                .is_some_and(|e| e.cas == *cas && e.value.is_some())
        });
    }
}

pub(crate) struct Index {
    shards: Box<[RwLock<Shard>]>,
    hasher: RandomState,
    /// What every shard's table and keys allocate.
    bytes: Arc<AtomicU64>,
}

impl Index {
    pub fn new() -> Index {
        let bytes = Arc::new(AtomicU64::new(0));
        let shards = (0..SHARDS)
            .map(|_| RwLock::new(Shard::new(Arc::clone(&bytes))))
            .collect();
        Index {
            shards,
            hasher: RandomState::new(),
            bytes,
        }
    }

    /// What the index allocates: every shard's table (at its capacity) and keys.
    /// Values in memory are not in it: see `Shard::cached_bytes`.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
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
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }
}
