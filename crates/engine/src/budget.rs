//! The memory budget: what the index and the versions in memory may take, evicting
//! versions from memory (they stay in their log records) to keep within it, and warming
//! the cache after a restart while there is room.
//!
//! What it is not for: choosing which version leaves (the index's second-chance
//! eviction, `Shard::evict_to`), or reading a version back when a request needs it
//! (`cold.rs`).
//!
//! Invariants:
//! - A share of the budget ([`reserve`]) is kept for what the estimates leave out:
//!   connection buffers, the log tail, allocator slack.
//! - Values never make a store refuse: they live on disk when memory is short; every
//!   key's slot stays in memory ([`Store::has_room_for_key`]).
//! - Each shard's cache keeps to its share of what the budget leaves after the reserve,
//!   the index and the memory the store does not count, split evenly. Writes enforce it
//!   for their own shard as they go; versions whose records are not yet written out
//!   stay until [`Store::trim_to_budget`]'s pass.

use std::sync::atomic::Ordering;

use crate::cold::decode_version;
use crate::index::{self, Entry, Found, Hashed, Loaded, Shard, KEY_COST_BYTES, SHARDS};
use crate::key::Key;
use crate::{Error, Store};

/// The share of a memory budget kept for what the estimates leave out: connection
/// buffers, the log tail, allocator slack.
pub(crate) fn reserve(limit: u64) -> u64 {
    limit / 8
}

impl Store {
    /// The memory budget for the index and the versions in memory; 0 = none.
    pub fn set_memory_limit(&self, bytes: u64) {
        self.memory_limit.store(bytes, Ordering::Relaxed);
        self.trim_to_budget();
    }

    pub fn memory_limit(&self) -> u64 {
        self.memory_limit.load(Ordering::Relaxed)
    }

    /// Tells the store how much memory the process holds beyond the index and the
    /// cached versions ([`Store::accounted_memory`]), measured by whoever can (the
    /// server asks its allocator). The cache shrinks by as much, so the whole process
    /// stays within the budget, not only what the store itself counts.
    pub fn set_other_memory(&self, bytes: u64) {
        self.other_memory.store(bytes, Ordering::Relaxed);
    }

    /// What the store counts against the budget: the index and the cached versions.
    pub fn accounted_memory(&self) -> u64 {
        let cached: u64 = self
            .index
            .shards()
            .iter()
            .map(|shard| shard.read().cached_bytes())
            .sum();
        self.index.bytes() + cached
    }

    /// Whether a store of `key` fits the memory budget: the key may already be in the
    /// index, or the index has room for one more slot. Values never make a store
    /// refuse: they live on disk when memory is short; every key's slot stays in memory.
    pub fn has_room_for_key<'k>(&self, key: impl Into<Key<'k>>) -> bool {
        let key = key.into();
        let limit = self.memory_limit();
        if limit == 0 || self.index.bytes() + KEY_COST_BYTES <= limit - reserve(limit) {
            return true;
        }
        let h = self.index.hash(key);
        self.index.shard(h).read().find(key, h, &Loaded::new()) != Found::Absent
    }

    /// Brings every shard's cache within the memory budget. Writes do this for their
    /// own shard as they go; versions that could not leave then (their record not yet
    /// written) go on this pass. The server's maintenance thread calls it every 100 ms.
    pub fn trim_to_budget(&self) {
        if self.memory_limit() == 0 {
            return;
        }
        for shard in self.index.shards() {
            self.enforce_budget(&mut shard.write());
        }
    }

    /// Evicts versions from `shard` until it is within its share of what the budget
    /// leaves after the index.
    pub(crate) fn enforce_budget(&self, shard: &mut Shard) {
        let limit = self.memory_limit();
        if limit == 0 {
            return;
        }
        let share = self.values_share();
        if shard.cached_bytes() > share {
            let evicted = shard.evict_to(share, self.log.written_lsn(), self.held_spaces());
            if evicted > 0 {
                self.evictions.fetch_add(evicted, Ordering::Relaxed);
                self.values_out.store(true, Ordering::Relaxed);
            }
        }
    }

    /// What one shard's cached versions may take: what the budget leaves after the
    /// reserve, the index and the memory the store does not count, split evenly.
    fn values_share(&self) -> u64 {
        let limit = self.memory_limit();
        (limit - reserve(limit))
            .saturating_sub(self.index.bytes() + self.other_memory.load(Ordering::Relaxed))
            / SHARDS
    }

    /// Whether `shard`'s cache is under its share of the budget.
    fn has_room_in(&self, shard: &Shard) -> bool {
        self.memory_limit() == 0 || shard.cached_bytes() < self.values_share()
    }

    /// Brings back into memory the versions that were there when the checkpoint this
    /// store opened from was taken, while their shards have room in the budget: so the
    /// first reads after a restart find them in memory. Read in address order, a
    /// batch at a time, records near each other with one read
    /// ([`Log::read_records`](crate::log::Log::read_records)); a key changed since is
    /// skipped. Blocks on the disk: the server runs it on a thread of its own after
    /// start. Returns how many came back.
    pub fn warm_cache(&self) -> u64 {
        let mut to_warm = std::mem::take(&mut *self.to_warm.lock());
        to_warm.sort_unstable_by_key(|&(_, raw)| raw);
        let mut warmed = 0;
        for batch in to_warm.chunks(WARM_BATCH) {
            let oldest = self.log.oldest_segment();
            let wanted: Vec<(Hashed, u64, (u64, u32))> = batch
                .iter()
                .filter(|&&(h, raw)| {
                    let shard = self.index.shard(h).read();
                    shard.holds_address(h, raw).is_some() && self.has_room_in(&shard)
                })
                .map(|&(h, raw)| (h, raw, index::address_of(raw, oldest)))
                .collect();
            let places: Vec<(u64, u32)> = wanted.iter().map(|&(_, _, place)| place).collect();
            let read = self.log.read_records(&places);
            for ((h, raw, (segment, offset)), bytes) in wanted.into_iter().zip(read) {
                let Ok(v) = bytes
                    .map_err(Error::from)
                    .and_then(|bytes| decode_version(&bytes, segment, offset))
                else {
                    continue;
                };
                let mut shard = self.index.shard(h).write();
                if let Some(pos) = shard.holds_address(h, raw) {
                    shard.install(pos, Entry::from_version(h, &v));
                    warmed += 1;
                }
            }
        }
        warmed
    }
}

/// How many versions [`Store::warm_cache`] looks up before it reads their records.
const WARM_BATCH: usize = 256;
