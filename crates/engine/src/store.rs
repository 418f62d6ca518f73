//! The store's API: [`Store`], its options and counters, and the operations the server
//! builds memcached's commands from: `get`, `peek`, `update`, `flush_all`, and waiting
//! for the log to acknowledge what they wrote.
//!
//! Every change runs under its key's shard write lock: look at the live version, decide
//! (the caller's closure), append the record to the log, change the index. The reply
//! that reports the change may go out once [`Store::acked_lsn`] has reached the LSN
//! returned; [`Options::on_ack`] says when it moves.
//!
//! What it is not for: the rest of `Store`'s methods live beside it, a file per concern.
//! `recovery.rs` opens the store (replay, checkpoint use); `cold.rs` reads versions that
//! are only in the log; `expiry.rs` decides which versions are dead and drops them;
//! `budget.rs` keeps the index and the cache within the memory budget; `compaction.rs`
//! reclaims the log's garbage; `checkpointing.rs` writes the index checkpoint. The
//! item types the API takes and returns are in `item.rs`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::cold::{version_item, MAX_ROUNDS};
use crate::disk::Disk;
use crate::expiry::{entry_liveness, exptime_to_absolute, liveness, Liveness};
use crate::index::{self, Entry, Found, Hashed, Index, Loaded};
use crate::item::{Access, Change, Item, ItemRef, NewCas, Written};
use crate::log::{Holds, Log};
use crate::record::{Record, ITEM_BINARY_KEY, ITEM_EXPLICIT_CAS, ITEM_STALE};
use crate::Error;

/// When a change is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// After fsync. Concurrent writers share one fsync (group commit). Survives power loss.
    Fsync,
    /// Once written to the operating system; fsync every `fsync_interval`. Survives a
    /// killed process; a power loss may take the last interval.
    Interval,
    /// At once. For comparison only: a crash may lose anything not yet written.
    None,
}

/// What the log's acknowledged position says; passed to [`Options::on_ack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// Every record up to this LSN is acknowledged.
    UpTo(u64),
    /// A write or fsync failed: nothing more will be acknowledged.
    Failed,
}

pub struct Options {
    pub durability: Durability,
    pub fsync_interval: Duration,
    pub segment_size_bytes: u64,
    pub clock: Arc<dyn Clock>,
    /// Called (from the flusher thread) whenever the acknowledged LSN moves or the log
    /// fails. Must be quick: it runs on the commit path.
    pub on_ack: Option<Arc<dyn Fn(Ack) + Send + Sync>>,
    /// The memory budget for the index and the values held in memory; 0 = none (every
    /// value stays in memory). See [`Store::set_memory_limit`].
    pub memory_limit_bytes: u64,
    /// For tests only: every key in one index shard with a one-bit fingerprint, so
    /// that keys share fingerprints all the time and every path that tells them apart
    /// by reading their records runs. Slow.
    #[doc(hidden)]
    pub crowded_index: bool,
}

impl Options {
    pub fn new(durability: Durability, clock: Arc<dyn Clock>) -> Options {
        Options {
            durability,
            fsync_interval: Duration::from_secs(1),
            segment_size_bytes: 64 << 20,
            clock,
            on_ack: None,
            memory_limit_bytes: 0,
            crowded_index: false,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub curr_items: u64,
    pub bytes: u64,
    pub appended_lsn: u64,
    pub acked_lsn: u64,
    pub synced_lsn: u64,
    pub next_cas: u64,
    pub recovered_records: u64,
    pub recovery_cut_bytes: u64,
    /// Bytes of all segments on disk, and of the records in them the index points at.
    pub log_bytes: u64,
    pub log_live_bytes: u64,
    pub log_segments: u64,
    pub compactions: u64,
    /// Whether a compaction is running now.
    pub compaction_running: bool,
    /// Bytes compaction copied forward; with `appended_lsn`, the write amplification.
    pub compaction_copied_bytes: u64,
    pub compaction_reclaimed_bytes: u64,
    pub expired_purged: u64,
    /// Bytes appended to the log since open, copies included.
    pub appended_since_open_bytes: u64,
    /// What the index allocates: its tables at their capacity, and every key.
    pub index_bytes: u64,
    /// What the values in memory cost, and how many values are there.
    pub cache_bytes: u64,
    pub cached_values: u64,
    /// The budget for both (0 = none).
    pub memory_limit_bytes: u64,
    /// What [`Store::set_other_memory`] last reported.
    pub other_memory_bytes: u64,
    /// Values read back from the log because they were not in memory.
    pub value_reads: u64,
    /// Values dropped from memory to stay within the budget.
    pub evictions: u64,
    /// Keys the index was restored with from a checkpoint at open (0: none).
    pub checkpoint_restored_keys: u64,
    /// Checkpoints written since open.
    pub checkpoints: u64,
}

pub struct Store {
    pub(crate) index: Index,
    pub(crate) log: Log,
    pub(crate) disk: Arc<dyn Disk>,
    /// Keys the index was restored with from a checkpoint at open (0: none).
    pub(crate) restored_keys: u64,
    pub(crate) checkpoints: AtomicU64,
    /// Versions that were in memory when the checkpoint was taken, for
    /// [`Store::warm_cache`] to bring back.
    pub(crate) to_warm: parking_lot::Mutex<Vec<(Hashed, u64)>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) next_cas: AtomicU64,
    /// A delayed flush_all, as memcached's `oldest_live`: versions stored at or before
    /// this Unix second are dead once it has come. 0 = none.
    pub(crate) flush_deadline: AtomicU32,
    pub(crate) curr_items: AtomicU64,
    pub(crate) recovered_records: u64,
    pub(crate) recovery_cut_bytes: u64,
    /// One compaction at a time.
    pub(crate) compaction: parking_lot::Mutex<()>,
    pub(crate) compactions: AtomicU64,
    /// Set while a compaction runs (for `stats`: what requests ran beside).
    pub(crate) compacting: std::sync::atomic::AtomicBool,
    pub(crate) compaction_copied_bytes: AtomicU64,
    pub(crate) compaction_reclaimed_bytes: AtomicU64,
    pub(crate) expired_purged: AtomicU64,
    /// The LSN replay ended at.
    pub(crate) opened_lsn: u64,
    pub(crate) memory_limit: AtomicU64,
    /// Memory the process holds beyond the index and the cached versions (connection
    /// buffers, the log's tail, threads), as its owner measured it last
    /// ([`Store::set_other_memory`]): the values get what the budget leaves after it.
    pub(crate) other_memory: AtomicU64,
    pub(crate) value_reads: AtomicU64,
    pub(crate) evictions: AtomicU64,
    /// Set once any version has been out of memory (evicted, or left on disk by
    /// replay); until then callers need not ask [`Store::unresolved`].
    pub(crate) values_out: std::sync::atomic::AtomicBool,
}

/// An owned snapshot of the version in memory `entry`.
fn snapshot(entry: &Entry) -> Item {
    ItemRef::of(entry).to_item()
}

/// Bytes of key and value: what one version adds to its shard's `data_bytes`.
pub(crate) fn data_len(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

impl Store {
    pub fn now_secs(&self) -> u32 {
        self.clock.now_secs()
    }

    /// The live version of `key`, counted as an access. A version only in the log is
    /// read on this thread (see [`Store::unresolved`] to read it elsewhere first).
    pub fn get(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        self.read(key, Access::Fetch)
    }

    /// The live version of `key`, without counting an access.
    pub fn peek(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        self.read(key, Access::NoAccess)
    }

    fn read(&self, key: &[u8], access: Access) -> Result<Option<Item>, Error> {
        let h = self.index.hash(key);
        let shard = self.index.shard(h);
        let mut loaded = Loaded::new();
        for _ in 0..MAX_ROUNDS {
            let now = self.now_secs();
            let deadline = self.flush_deadline.load(Ordering::Acquire);
            let unknown = {
                self.index.prefetch_home(h);
                let guard = shard.read();
                match guard.find(key, h, &loaded) {
                    Found::Absent => return Ok(None),
                    Found::Cached { idx, .. } => {
                        let entry = guard.entry(idx);
                        if entry_liveness(entry, now, deadline) != Liveness::Live {
                            None
                        } else {
                            let item = snapshot(entry);
                            if access == Access::Fetch {
                                entry.mark_access(now);
                            }
                            return Ok(Some(item));
                        }
                    }
                    Found::Loaded { which, .. } => {
                        let v = &loaded[which].1;
                        if liveness(v.exptime, v.time, now, deadline) != Liveness::Live {
                            None
                        } else {
                            return Ok(Some(version_item(v)));
                        }
                    }
                    Found::Unknown(raws) => Some(self.addresses(&raws)),
                }
            };
            match unknown {
                // Dead: drop it now rather than keep it until overwritten.
                None => {
                    self.update(key, Access::NoAccess, |_, _| (Change::Keep, ()))?;
                    return Ok(None);
                }
                Some(records) => self.load(h, records, &mut loaded)?,
            }
        }
        Err(self.kept_moving(key))
    }

    /// Looks at `key`'s live version (None if absent, expired or flushed), lets `decide`
    /// choose a change, and makes it: logged, then applied to the index. Returns the
    /// closure's result and what was written (None when nothing was logged). A version
    /// only in the log is read first, on this thread.
    pub fn update<R>(
        &self,
        key: &[u8],
        access: Access,
        decide: impl FnOnce(Option<&ItemRef<'_>>, u32) -> (Change, R),
    ) -> Result<(R, Option<Written>), Error> {
        if self.log.is_poisoned() {
            return Err(Error::Poisoned);
        }
        let h = self.index.hash(key);
        let shard_lock = self.index.shard(h);
        let mut loaded = Loaded::new();
        let mut rounds = 0;
        let (now, mut shard, at) = loop {
            let now = self.now_secs();
            let deadline = self.flush_deadline.load(Ordering::Acquire);
            self.index.prefetch_home(h);
            let mut shard = shard_lock.write();
            let cached = match shard.find(key, h, &loaded) {
                Found::Cached { pos, idx } => Some((pos, idx)),
                Found::Loaded { pos, which } => {
                    let entry = Entry::from_version(h, &loaded[which].1);
                    Some((pos, shard.install(pos, entry)))
                }
                Found::Absent => None,
                Found::Unknown(raws) => {
                    let records = self.addresses(&raws);
                    drop(shard);
                    rounds += 1;
                    if rounds > MAX_ROUNDS {
                        return Err(self.kept_moving(key));
                    }
                    self.load(h, records, &mut loaded)?;
                    continue;
                }
            };
            match cached {
                Some((pos, idx)) => {
                    let entry = shard.entry(idx);
                    if entry_liveness(entry, now, deadline) == Liveness::Live {
                        // A put drops this value's reference, so the line holding
                        // the counts (just before the bytes, in std's `Arc`) is
                        // fetched while the change is decided and logged.
                        let bytes = Arc::as_ptr(&entry.value).cast::<u8>();
                        index::prefetch(bytes.wrapping_sub(2 * std::mem::size_of::<usize>()));
                        break (now, shard, Some((pos, idx)));
                    }
                    self.drop_if_dead(&mut shard, pos, idx, now, deadline);
                    break (now, shard, None);
                }
                None => break (now, shard, None),
            }
        };
        let current = at.map(|(_, idx)| ItemRef::of(shard.entry(idx)));
        let (change, result) = decide(current.as_ref(), now);
        let written = match (change, at) {
            (Change::Keep, at) => {
                if let (Some((_, idx)), Access::Fetch) = (at, access) {
                    shard.entry(idx).mark_access(now);
                }
                None
            }
            (Change::Touch { .. }, None) | (Change::Delete, None) => None,
            (
                Change::Touch {
                    exptime,
                    mark_win_sent,
                },
                Some((_, idx)),
            ) => {
                let written = match exptime {
                    // The version is written anew with its new expiry, same value, CAS
                    // and time: a record says all there is of a version, so it can
                    // leave memory.
                    Some(exptime) => {
                        let entry = shard.entry(idx);
                        let copy = Record::Put {
                            key,
                            value: &entry.value,
                            client_flags: entry.client_flags,
                            exptime,
                            time: entry.time,
                            cas: entry.cas,
                            item_flags: entry.item_flags(),
                        };
                        let appended =
                            self.log
                                .append(&copy, Holds::Version, Some(entry.location))?;
                        let entry = shard.entry_mut(idx);
                        entry.exptime = exptime;
                        entry.location = appended.location;
                        entry.lsn = appended.lsn;
                        Some(Written {
                            lsn: appended.lsn,
                            cas: entry.cas,
                        })
                    }
                    None => None,
                };
                let entry = shard.entry(idx);
                if mark_win_sent {
                    entry.win_sent.store(true, Ordering::Relaxed);
                }
                if access == Access::Fetch {
                    entry.mark_access(now);
                }
                written
            }
            (Change::Delete, Some((pos, idx))) => {
                let location = shard.entry(idx).location;
                let lsn = self
                    .log
                    .append(&Record::Delete { key }, Holds::Nothing, Some(location))?
                    .lsn;
                let old = shard.remove(pos);
                let cas = old.as_ref().map_or(0, |e| e.cas);
                shard.data_bytes -= old.map_or(0, |e| data_len(&e.key, &e.value));
                self.curr_items.fetch_sub(1, Ordering::Relaxed);
                Some(Written { lsn, cas })
            }
            (Change::Put(new), at) => {
                let (cas, explicit) = match new.cas {
                    NewCas::Generate => (self.next_cas.fetch_add(1, Ordering::Relaxed), 0),
                    NewCas::Explicit(cas) => (cas, ITEM_EXPLICIT_CAS),
                };
                let item_flags = explicit
                    | if new.stale { ITEM_STALE } else { 0 }
                    | if new.binary_key { ITEM_BINARY_KEY } else { 0 };
                let put = Record::Put {
                    key,
                    value: &new.value,
                    client_flags: new.client_flags,
                    exptime: new.exptime,
                    time: now,
                    cas,
                    item_flags,
                };
                let frees = at.map(|(_, idx)| shard.entry(idx).location);
                let appended = self.log.append(&put, Holds::Version, frees)?;
                let lsn = appended.lsn;
                shard.data_bytes += data_len(key, &new.value);
                let fill = |entry: &mut Entry| {
                    entry.client_flags = new.client_flags;
                    entry.exptime = new.exptime;
                    entry.time = now;
                    entry.cas = cas;
                    entry.lsn = lsn;
                    entry.stale = new.stale;
                    entry.binary_key = new.binary_key;
                    entry.explicit_cas = explicit != 0;
                    entry.fetched = Default::default();
                    entry.last_access = AtomicU32::new(now);
                    entry.win_sent = new.win_sent.into();
                    entry.referenced = Default::default();
                };
                match at {
                    Some((_, idx)) => {
                        let old = shard.overwrite(idx, new.value, appended.location, fill);
                        shard.data_bytes -= old;
                    }
                    None => {
                        let mut entry = Entry::new(h, key, new.value, appended.location);
                        fill(&mut entry);
                        shard.insert_cached(h, entry);
                        self.curr_items.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Some(Written { lsn, cas })
            }
        };
        self.enforce_budget(&mut shard);
        Ok((result, written))
    }

    /// memcached's flush_all: with no delay every item goes now; with a delay (relative
    /// or absolute, as an exptime) memcached sets `oldest_live` to one second before
    /// that moment, and every version stored at or before `oldest_live` is dead once it
    /// has come (so `flush_all 1` acts at once). Returns the LSN to wait for.
    pub fn flush_all(&self, delay: i64) -> Result<u64, Error> {
        let now = self.now_secs();
        let deadline = if delay <= 0 {
            0
        } else {
            // An absolute time already past counts as "now": everything goes.
            exptime_to_absolute(delay, now).saturating_sub(1)
        };
        // Hold every shard: no write may land between the record and the clearing, or
        // the live index and a replay of the log would disagree.
        let mut guards: Vec<_> = self.index.shards().iter().map(|s| s.write()).collect();
        // memcached spends a CAS value when the flush takes effect within this second.
        let cas = if deadline <= now {
            self.next_cas.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        };
        let flush = Record::FlushAll {
            deadline,
            time: now,
            cas,
        };
        let lsn = self.log.append(&flush, Holds::Nothing, None)?.lsn;
        // A delayed flush replaces the pending deadline, as memcached's `oldest_live`
        // is one setting; an immediate one removes everything for good.
        if deadline == 0 {
            self.log.free_all();
            for shard in guards.iter_mut() {
                shard.clear();
            }
        }
        self.flush_deadline.store(deadline, Ordering::Release);
        let items: u64 = guards.iter().map(|shard| shard.len() as u64).sum();
        self.curr_items.store(items, Ordering::Relaxed);
        Ok(lsn)
    }

    /// The LSN of the newest record appended.
    pub fn appended_lsn(&self) -> u64 {
        self.log.appended_lsn()
    }

    /// Every change up to this LSN is acknowledged under the store's durability mode.
    pub fn acked_lsn(&self) -> u64 {
        self.log.acked_lsn()
    }

    /// In interval mode, writes the log tail on the calling thread, so everything
    /// appended so far is acknowledged without waiting for another thread; a no-op in
    /// the other modes. Call it before waiting for an LSN.
    pub fn write_now(&self) -> Result<(), Error> {
        self.log.write_now()
    }

    /// Blocks until `lsn` is acknowledged (or the store is poisoned).
    pub fn wait_acked(&self, lsn: u64) -> Result<(), Error> {
        self.log.wait_acked(lsn)
    }

    pub fn is_poisoned(&self) -> bool {
        self.log.is_poisoned()
    }

    pub fn stats(&self) -> Stats {
        let usage = self.log.usage();
        let (mut cache_bytes, mut cached_values, mut bytes) = (0, 0, 0);
        for shard in self.index.shards() {
            let shard = shard.read();
            bytes += shard.data_bytes;
            cache_bytes += shard.cached_bytes();
            cached_values += shard.cached_values;
        }
        Stats {
            index_bytes: self.index.bytes(),
            cache_bytes,
            cached_values,
            memory_limit_bytes: self.memory_limit(),
            other_memory_bytes: self.other_memory.load(Ordering::Relaxed),
            value_reads: self.value_reads.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            checkpoint_restored_keys: self.restored_keys,
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
            log_bytes: usage.iter().map(|(_, u)| u.bytes).sum(),
            log_live_bytes: usage.iter().map(|(_, u)| u.live_bytes).sum(),
            log_segments: usage.len() as u64,
            compactions: self.compactions.load(Ordering::Relaxed),
            compaction_running: self.compacting.load(Ordering::Relaxed),
            compaction_copied_bytes: self.compaction_copied_bytes.load(Ordering::Relaxed),
            compaction_reclaimed_bytes: self.compaction_reclaimed_bytes.load(Ordering::Relaxed),
            expired_purged: self.expired_purged.load(Ordering::Relaxed),
            appended_since_open_bytes: self.log.appended_lsn().saturating_sub(self.opened_lsn),
            curr_items: self.curr_items.load(Ordering::Relaxed),
            bytes,
            appended_lsn: self.log.appended_lsn(),
            acked_lsn: self.log.acked_lsn(),
            synced_lsn: self.log.synced_lsn(),
            next_cas: self.next_cas.load(Ordering::Relaxed),
            recovered_records: self.recovered_records,
            recovery_cut_bytes: self.recovery_cut_bytes,
        }
    }

    /// Writes and syncs everything appended and stops the log writer; later changes are
    /// refused. Dropping the store does the same.
    pub fn shutdown(&self) {
        self.log.shutdown();
    }
}
