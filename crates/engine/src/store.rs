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

use crate::apply;
use crate::clock::Clock;
use crate::cold::{version_item, Unresolved, MAX_ROUNDS};
use crate::disk::Disk;
use crate::expiry::{entry_liveness, exptime_to_absolute, liveness, Liveness};
use crate::held::{HeldRead, HeldStep, PlaceRead};
use crate::history::{Epoch, History};
use crate::index::{self, Entry, Found, Hashed, Index, Loaded};
use crate::item::{Access, Change, Item, ItemRef, Written};
use crate::key::{Key, KEY_MAX_BYTES};
use crate::log::{Appended, Holds, Log};
use crate::record::Record;
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
    /// Called with the synced LSN (what is on this node's disk whatever the durability
    /// mode) right after each call of `on_ack`, from the same threads: it may not
    /// have moved. What a primary may stream to replicas, and a replica confirm.
    pub on_synced: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    /// The memory budget for the index and the values held in memory; 0 = none (every
    /// value stays in memory). See [`Store::set_memory_limit`].
    pub memory_limit_bytes: u64,
    /// Open as the store of a replica of this primary ([`Store::set_read_only`]): from
    /// the start, nothing is written but copies of the primary's log.
    pub read_only: Option<String>,
    /// For tests only: every key in one index shard with a one-bit fingerprint, so
    /// that keys share fingerprints all the time and every path that tells them apart
    /// by reading their records runs. Slow.
    #[doc(hidden)]
    pub crowded_index: bool,
    /// For tests only: no flusher thread. The test runs the flusher's turns with
    /// [`Store::step_flusher`] at the moments it names, so what happens before and
    /// after an interval is exact. Interval and none modes: in fsync mode nothing is
    /// acknowledged between steps.
    #[doc(hidden)]
    pub stepped_flusher: bool,
    /// The key spaces kept in order as well (`ordered.rs`): read by range with
    /// [`Store::ordered_range`]. None by default.
    pub ordered_spaces: crate::OrderedSpaces,
    /// The ordered keyspace's page cache, in bytes.
    pub ordered_cache_bytes: u64,
}

impl Options {
    pub fn new(durability: Durability, clock: Arc<dyn Clock>) -> Options {
        Options {
            durability,
            fsync_interval: Duration::from_secs(1),
            segment_size_bytes: 64 << 20,
            clock,
            on_ack: None,
            on_synced: None,
            memory_limit_bytes: 0,
            read_only: None,
            crowded_index: false,
            stepped_flusher: false,
            ordered_spaces: crate::OrderedSpaces::default(),
            ordered_cache_bytes: 16 << 20,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// memcached's keys and their bytes of key and value (memcached's `curr_items`
    /// and `bytes`).
    pub curr_items: u64,
    pub bytes: u64,
    /// The tables' keys (rows, index entries, the catalog) and their bytes.
    pub table_items: u64,
    pub table_bytes: u64,
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
    /// Ordered keys changed and not yet in the ordered keyspace's B-tree, the LSN its
    /// last durable commit holds, and its commits since open.
    pub ordered_pending: u64,
    pub ordered_durable_lsn: u64,
    pub ordered_commits: u64,
    /// Whether the open read the whole B-tree to rebuild its allocator state (a crash
    /// after a durable commit that did not record it).
    pub ordered_repaired: bool,
}

/// Per-key bookkeeping of a batch: a table row's batch has a key or two.
pub(crate) type Small<T> = smallvec::SmallVec<[T; 4]>;

/// The shards of a batch's keys, write-locked, and each key's live version: see
/// [`Store::lock_live`].
pub(crate) struct Locked<'s> {
    pub now: u32,
    pub hashes: Small<Hashed>,
    /// Which of `guards` each key's shard is.
    pub guard_of: Small<usize>,
    pub guards: Small<parking_lot::RwLockWriteGuard<'s, index::Shard>>,
    /// Each key's live version in memory, if any.
    pub ats: Small<apply::At>,
}

pub struct Store {
    pub(crate) index: Index,
    /// Which log this is and its epochs (`history.rs`).
    pub(crate) history: parking_lot::Mutex<History>,
    /// A replica's store: clients' changes are refused and the store writes nothing of
    /// its own; only copies of its primary's log come in (`follow.rs`).
    pub(crate) read_only: std::sync::atomic::AtomicBool,
    /// The primary a read-only store follows, as its refusals name it.
    pub(crate) primary: parking_lot::Mutex<String>,
    /// Until when a cluster's primary may take changes, in nanoseconds after
    /// `lease_base` (u64::MAX: no limit; `follow.rs`).
    pub(crate) lease_base: std::time::Instant,
    pub(crate) lease_until: AtomicU64,
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
    /// Keys of memcached's space, and of the tables'.
    pub(crate) curr_items: AtomicU64,
    pub(crate) table_items: AtomicU64,
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
    /// The ordered keyspace, when the store keeps any space in order.
    pub(crate) ordered: Option<crate::ordered::Ordered>,
}

/// Refuses a key longer than a record can hold.
fn check_key(key: Key<'_>) -> Result<(), Error> {
    if key.bytes.len() > KEY_MAX_BYTES {
        return Err(Error::KeyTooLong {
            len: key.bytes.len(),
        });
    }
    Ok(())
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
    pub fn get<'k>(&self, key: impl Into<Key<'k>>) -> Result<Option<Item>, Error> {
        self.read(key.into(), Access::Fetch)
    }

    /// The live version of `key`, without counting an access.
    pub fn peek<'k>(&self, key: impl Into<Key<'k>>) -> Result<Option<Item>, Error> {
        self.read(key.into(), Access::NoAccess)
    }

    /// The live versions of `keys`, as [`Store::get`] gives each, in order. The index
    /// slots of all of them are asked for from memory before the first is looked at,
    /// so that their cache misses overlap rather than follow one another, and the
    /// versions only in the log are read in one pass ([`Store::resolve_many`]): a
    /// range's rows, read by key.
    pub fn get_many(&self, keys: &[Key<'_>]) -> Result<Vec<Option<Item>>, Error> {
        let mut hashes = Vec::with_capacity(keys.len());
        for &key in keys {
            check_key(key)?;
            let h = self.index.hash(key);
            self.index.prefetch_home(h);
            hashes.push(h);
        }
        for deep in [false, true] {
            for &h in &hashes {
                self.index.shard(h).read().prefetch_version(h, deep);
            }
        }
        let (mut out, mut later, mut cold) = (Vec::with_capacity(keys.len()), vec![], vec![]);
        let none = Loaded::new();
        for (i, (&key, &h)) in keys.iter().zip(&hashes).enumerate() {
            match self.look(key, h, &none, Access::Fetch) {
                Look::Found(None) if self.is_held(key) => {
                    out.push(None);
                    later.push(i);
                }
                Look::Found(item) => out.push(item),
                Look::Dead => {
                    out.push(None);
                    later.push(i);
                }
                Look::Unknown(records) => {
                    out.push(None);
                    later.push(i);
                    cold.push(Unresolved::new(h, records));
                }
            }
        }
        if !cold.is_empty() {
            self.resolve_many(cold)?;
        }
        for i in later {
            out[i] = self.read_hashed(keys[i], hashes[i], Access::Fetch)?;
        }
        Ok(out)
    }

    fn read(&self, key: Key<'_>, access: Access) -> Result<Option<Item>, Error> {
        check_key(key)?;
        self.read_hashed(key, self.index.hash(key), access)
    }

    fn read_hashed(&self, key: Key<'_>, h: Hashed, access: Access) -> Result<Option<Item>, Error> {
        let mut loaded = Loaded::new();
        let mut place: PlaceRead = None;
        for _ in 0..MAX_ROUNDS {
            match self.look(key, h, &loaded, access) {
                // No slot: a held key may be in the ordered keyspace.
                Look::Found(None) if self.is_held(key) => {
                    let mut shard = self.index.shard(h).write();
                    if !matches!(shard.find(key, h, &loaded), Found::Absent) {
                        continue;
                    }
                    match self.held_step(&mut shard, key, h, place, &loaded) {
                        HeldStep::Absent => return Ok(None),
                        HeldStep::Installed(idx) => {
                            // Read now: the budget may send it out again at once.
                            let entry = shard.entry(idx);
                            let now = self.now_secs();
                            let deadline = self.flush_deadline.load(Ordering::Acquire);
                            let live = entry_liveness(entry, now, deadline) == Liveness::Live;
                            let item = live.then(|| snapshot(entry));
                            if !live {
                                // Met dead: it goes, as any version a read meets dead.
                                let pos = shard.slot_of_entry(h, idx);
                                self.drop_if_dead(&mut shard, pos, idx, now, deadline);
                            }
                            self.enforce_budget(&mut shard);
                            return Ok(item);
                        }
                        HeldStep::Read(what) => {
                            drop(shard);
                            self.held_read(key, h, what, &mut place, &mut loaded)?;
                        }
                    }
                }
                Look::Found(item) => return Ok(item),
                // Dead: drop it now rather than keep it until overwritten.
                Look::Dead => {
                    self.update(key, Access::NoAccess, |_, _| (Change::Keep, ()))?;
                    return Ok(None);
                }
                Look::Unknown(records) => self.load(h, records, &mut loaded)?,
            }
        }
        Err(self.kept_moving(key))
    }

    /// One look at `key` (hashed to `h`) under its shard's lock, with the versions
    /// `loaded` read from the log so far.
    fn look(&self, key: Key<'_>, h: Hashed, loaded: &Loaded, access: Access) -> Look {
        let now = self.now_secs();
        let deadline = self.flush_deadline.load(Ordering::Acquire);
        self.index.prefetch_home(h);
        let guard = self.index.shard(h).read();
        match guard.find(key, h, loaded) {
            Found::Absent => Look::Found(None),
            Found::Cached { idx, .. } => {
                let entry = guard.entry(idx);
                if entry_liveness(entry, now, deadline) != Liveness::Live {
                    return Look::Dead;
                }
                let item = snapshot(entry);
                if access == Access::Fetch {
                    entry.mark_access(now);
                }
                Look::Found(Some(item))
            }
            Found::Loaded { which, .. } => {
                let v = &loaded[which].1;
                if liveness(v.space, v.exptime, v.time, now, deadline) != Liveness::Live {
                    return Look::Dead;
                }
                Look::Found(Some(version_item(v)))
            }
            Found::Unknown(raws) => Look::Unknown(self.addresses(&raws)),
        }
    }

    /// Looks at `key`'s live version (None if absent, expired or flushed), lets `decide`
    /// choose a change, and makes it: logged, then applied to the index. Returns the
    /// closure's result and what was written (None when nothing was logged). A version
    /// only in the log is read first, on this thread.
    pub fn update<'k, R>(
        &self,
        key: impl Into<Key<'k>>,
        access: Access,
        decide: impl FnOnce(Option<&ItemRef<'_>>, u32) -> (Change, R),
    ) -> Result<(R, Option<Written>), Error> {
        let key = key.into();
        check_key(key)?;
        // A poisoned log refuses what would be logged (`Log::append`), not a look
        // (`Change::Keep`): what it acknowledged before it failed is still served.
        let h = self.index.hash(key);
        let shard_lock = self.index.shard(h);
        let mut loaded = Loaded::new();
        let mut place: PlaceRead = None;
        let mut rounds = 0;
        // Declared before the lock, so it drops after it (see `Log::wake_later`).
        let _wake = self.log.wake_later();
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
                Found::Absent => match self.held_step(&mut shard, key, h, place, &loaded) {
                    HeldStep::Absent => None,
                    HeldStep::Installed(idx) => Some((shard.slot_of_entry(h, idx), idx)),
                    HeldStep::Read(what) => {
                        drop(shard);
                        rounds += 1;
                        if rounds > MAX_ROUNDS {
                            return Err(self.kept_moving(key));
                        }
                        self.held_read(key, h, what, &mut place, &mut loaded)?;
                        continue;
                    }
                },
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
                        break (now, shard, Some(idx));
                    }
                    self.drop_if_dead(&mut shard, pos, idx, now, deadline);
                    break (now, shard, None);
                }
                None => break (now, shard, None),
            }
        };
        let current = at.map(|idx| ItemRef::of(shard.entry(idx)));
        let (change, result) = decide(current.as_ref(), now);
        let cas = apply::new_cas(self, &change, at, &shard);
        let appended = match apply::record_for(key, &change, at, &shard, now, cas) {
            Some(a) => {
                self.check_writable()?;
                Some(self.log.append(&a.record, a.holds, a.frees)?)
            }
            None => None,
        };
        let written =
            self.apply_change(&mut shard, h, key, change, at, appended, (cas, now, access));
        self.enforce_budget(&mut shard);
        Ok((result, written))
    }

    /// [`Store::update`] for several keys at once, as one atomic change: every key's
    /// shard is locked (in shard order, so two batches cannot deadlock), `decide` sees
    /// every key's live version and returns one change for each, in the order of
    /// `keys`, and the records go to the log as one batch, which replay applies whole
    /// or not at all. Returns the closure's result and what was written for each key;
    /// every record written has the batch's LSN. Keys must be distinct. A change is
    /// counted as no access (tables have no use for memcached's access bookkeeping).
    pub fn update_batch<R>(
        &self,
        keys: &[Key<'_>],
        decide: impl FnOnce(&[Option<ItemRef<'_>>], u32) -> (Vec<Change>, R),
    ) -> Result<(R, Vec<Option<Written>>), Error> {
        self.update_batch_then(keys, decide, |_, _| {})
    }

    /// [`Store::update_batch`], then `applied` with what the batch decided and wrote,
    /// while every key's shard is still locked: for state kept beside the index
    /// (ordered indexes in memory) that must change in the same order as the keys.
    /// Not called when the batch fails.
    pub fn update_batch_then<R>(
        &self,
        keys: &[Key<'_>],
        decide: impl FnOnce(&[Option<ItemRef<'_>>], u32) -> (Vec<Change>, R),
        applied: impl FnOnce(&R, &[Option<Written>]),
    ) -> Result<(R, Vec<Option<Written>>), Error> {
        for key in keys {
            check_key(*key)?;
        }
        // A row's batch has a few keys; a SQL statement's may have thousands.
        if keys.len() <= 16 {
            for (i, key) in keys.iter().enumerate() {
                assert!(!keys[..i].contains(key), "a key twice in one batch");
            }
        } else {
            let mut seen = std::collections::HashSet::with_capacity(keys.len());
            assert!(
                keys.iter().all(|key| seen.insert(*key)),
                "a key twice in one batch"
            );
        }
        if self.log.is_poisoned() {
            return Err(Error::Poisoned);
        }
        // Declared before the locks, so it drops after them.
        let _wake = self.log.wake_later();
        let Locked {
            now,
            hashes,
            guard_of,
            mut guards,
            ats,
        } = self.lock_live(keys)?;
        let current: Small<Option<ItemRef<'_>>> = ats
            .iter()
            .enumerate()
            .map(|(i, at)| at.map(|idx| ItemRef::of(guards[guard_of[i]].entry(idx))))
            .collect();
        let (changes, result) = decide(&current, now);
        drop(current);
        assert_eq!(
            changes.len(),
            keys.len(),
            "one change for every key of a batch"
        );
        let cases: Small<u64> = (0..keys.len())
            .map(|i| apply::new_cas(self, &changes[i], ats[i], &guards[guard_of[i]]))
            .collect();
        let mut appended: Small<Option<Appended>> = smallvec::smallvec![None; keys.len()];
        {
            let mut appends: Small<_> = Small::new();
            let mut whose: Small<usize> = Small::new();
            for i in 0..keys.len() {
                let shard = &guards[guard_of[i]];
                if let Some(a) =
                    apply::record_for(keys[i], &changes[i], ats[i], shard, now, cases[i])
                {
                    appends.push(a);
                    whose.push(i);
                }
            }
            if !appends.is_empty() {
                self.check_writable()?;
                for (i, a) in whose.into_iter().zip(self.log.append_batch(&appends)?) {
                    appended[i] = Some(a);
                }
            }
        }
        let mut written = Vec::with_capacity(keys.len());
        for (i, change) in changes.into_iter().enumerate() {
            let shard = &mut guards[guard_of[i]];
            written.push(self.apply_change(
                shard,
                hashes[i],
                keys[i],
                change,
                ats[i],
                appended[i],
                (cases[i], now, Access::NoAccess),
            ));
        }
        applied(&result, &written);
        for shard in guards.iter_mut() {
            self.enforce_budget(shard);
        }
        Ok((result, written))
    }

    /// Locks the shards of `keys` (in shard order, so two batches cannot deadlock) and
    /// finds each key's live version, reading the records of keys only in the log
    /// first; dead versions met are dropped.
    pub(crate) fn lock_live(&self, keys: &[Key<'_>]) -> Result<Locked<'_>, Error> {
        let hashes: Small<Hashed> = keys.iter().map(|&k| self.index.hash(k)).collect();
        let mut shard_numbers: Small<usize> = hashes.iter().map(Hashed::shard_number).collect();
        shard_numbers.sort_unstable();
        shard_numbers.dedup();
        // Which of the locked shards each key is in.
        let guard_of: Small<usize> = hashes
            .iter()
            .map(|h| shard_numbers.partition_point(|&n| n < h.shard_number()))
            .collect();
        let mut loaded: Small<Loaded> = keys.iter().map(|_| Loaded::new()).collect();
        let mut places: Small<PlaceRead> = keys.iter().map(|_| None).collect();
        let mut rounds = 0;
        let (now, guards, ats) = 'locked: loop {
            let now = self.now_secs();
            let deadline = self.flush_deadline.load(Ordering::Acquire);
            let mut guards: Small<_> = shard_numbers
                .iter()
                .map(|&n| self.index.shard_at(n).write())
                .collect();
            let mut ats: Small<apply::At> = Small::new();
            let mut missing: Small<_> = Small::new();
            let mut held_reads: Small<(usize, HeldRead)> = Small::new();
            for (i, &key) in keys.iter().enumerate() {
                let shard = &mut guards[guard_of[i]];
                let at = match shard.find(key, hashes[i], &loaded[i]) {
                    Found::Cached { idx, .. } => Some(idx),
                    Found::Loaded { pos, which } => {
                        let entry = Entry::from_version(hashes[i], &loaded[i][which].1);
                        Some(shard.install(pos, entry))
                    }
                    Found::Absent => {
                        match self.held_step(shard, key, hashes[i], places[i], &loaded[i]) {
                            HeldStep::Absent => None,
                            HeldStep::Installed(idx) => Some(idx),
                            HeldStep::Read(what) => {
                                held_reads.push((i, what));
                                None
                            }
                        }
                    }
                    Found::Unknown(raws) => {
                        missing.push((i, self.addresses(&raws)));
                        None
                    }
                };
                ats.push(at);
            }
            if missing.is_empty() && held_reads.is_empty() {
                for (i, at) in ats.iter_mut().enumerate() {
                    let Some(idx) = *at else { continue };
                    let shard = &mut guards[guard_of[i]];
                    if entry_liveness(shard.entry(idx), now, deadline) != Liveness::Live {
                        let pos = shard.slot_of_entry(hashes[i], idx);
                        self.drop_if_dead(shard, pos, idx, now, deadline);
                        *at = None;
                    }
                }
                break 'locked (now, guards, ats);
            }
            drop(guards);
            rounds += 1;
            if rounds > MAX_ROUNDS {
                let first = missing.first().map_or_else(|| held_reads[0].0, |m| m.0);
                return Err(self.kept_moving(keys[first]));
            }
            for (i, records) in missing {
                self.load(hashes[i], records, &mut loaded[i])?;
            }
            for (i, what) in held_reads {
                self.held_read(keys[i], hashes[i], what, &mut places[i], &mut loaded[i])?;
            }
        };
        Ok(Locked {
            now,
            hashes,
            guard_of,
            guards,
            ats,
        })
    }

    /// memcached's flush_all, on memcached's keys only: with no delay every item goes now; with a delay (relative
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
        self.check_writable()?;
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
        self.flushed(&mut guards, deadline);
        Ok(lsn)
    }

    /// What a flush_all record with `deadline` does once it is in the log; `guards`
    /// hold every shard. A delayed flush replaces the pending deadline, as memcached's
    /// `oldest_live` is one setting; an immediate one removes memcached's keys for
    /// good. Neither touches the tables' keys.
    pub(crate) fn flushed(
        &self,
        guards: &mut [parking_lot::RwLockWriteGuard<'_, index::Shard>],
        deadline: u32,
    ) {
        if deadline == 0 {
            self.log.free_memcached();
            for shard in guards.iter_mut() {
                shard.clear_memcached();
            }
            self.curr_items.store(0, Ordering::Relaxed);
        }
        self.flush_deadline.store(deadline, Ordering::Release);
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

    /// The highest LSN on this node's disk whatever the durability mode: what a
    /// replica may be sent.
    pub fn synced_lsn(&self) -> u64 {
        self.log.synced_lsn()
    }

    /// A cursor at `lsn` (where a record ends), or None when the log no longer holds
    /// that position (compaction removed it) or does not hold it yet. While the cursor
    /// lives, compaction leaves the segment it stands in, and every later one, on disk.
    pub fn follow_log(&self, lsn: u64) -> Option<crate::log::Cursor> {
        self.log.follow(lsn)
    }

    /// Reads the records after `cursor` up to LSN `until` (a watermark: synced,
    /// acknowledged, appended), about `max_bytes` of them and never part of a batch,
    /// and moves it past them. `visit` gets each record's segment, its bytes as the log
    /// holds them (`record::decode` reads them) and the LSN at its end. Returns the
    /// bytes read.
    pub fn read_log(
        &self,
        cursor: &mut crate::log::Cursor,
        until: u64,
        max_bytes: u64,
        mut visit: impl FnMut(u64, &[u8], u64),
    ) -> Result<u64, Error> {
        cursor.read(&self.log, until, max_bytes, |place, _, bytes, lsn| {
            visit(place.segment, bytes, lsn);
        })
    }

    /// Which log this is, and its epochs.
    pub fn history(&self) -> History {
        self.history.lock().clone()
    }

    /// Begins a new epoch (a promotion): at the LSN the log has reached, once all of
    /// it is on disk, so that no crash can cut the log below where the epoch begins.
    pub fn begin_epoch(&self) -> Result<Epoch, Error> {
        self.log.force_sync()?;
        let mut history = self.history.lock();
        let mut next = history.clone();
        let epoch = next.begin(self.log.synced_lsn());
        next.store(&*self.disk)?;
        *history = next;
        Ok(epoch)
    }

    /// Takes `history` for this log's (a replica takes its primary's), durably.
    pub fn set_history(&self, history: History) -> Result<(), Error> {
        let mut current = self.history.lock();
        history.store(&*self.disk)?;
        *current = history;
        Ok(())
    }

    /// Blocks until `lsn` is on this node's disk whatever the durability mode, the
    /// store is poisoned, or `timeout` passes; returns whether it is on disk. (What a
    /// replica confirms to its primary.)
    pub fn wait_synced(&self, lsn: u64, timeout: Duration) -> bool {
        self.log.wait_synced(lsn, timeout)
    }

    /// A store opened with `Options::stepped_flusher`: runs the flusher's turn due
    /// `since_open` after the log started (writes what request threads left, syncs if
    /// the interval since the last sync is up), as the thread would had it slept until
    /// then. Returns whether a turn was due.
    #[doc(hidden)]
    pub fn step_flusher(&self, since_open: Duration) -> bool {
        self.log.step_flusher(since_open)
    }

    /// Blocks until `lsn` is on this node's disk whatever the durability mode, syncing
    /// now if the mode would sync later: for a change that asks for more than the
    /// mode gives.
    /// Makes every CAS this store hands out from now on greater than `cas`: for
    /// versions copied in from another store with their CAS (a shard's keys moving
    /// to this one), so that no later change of such a key can be given the CAS a
    /// client already holds for it.
    pub fn raise_cas_past(&self, cas: u64) {
        self.next_cas
            .fetch_max(cas.saturating_add(1), Ordering::AcqRel);
    }

    pub fn sync_through(&self, lsn: u64) -> Result<(), Error> {
        self.log.sync_through(lsn)
    }

    /// Blocks until `lsn` is acknowledged (or the store is poisoned).
    pub fn wait_acked(&self, lsn: u64) -> Result<(), Error> {
        self.log.wait_acked(lsn)
    }

    pub fn is_poisoned(&self) -> bool {
        self.log.is_poisoned()
    }

    /// How long each fdatasync of the log and its files took (None on a simulated
    /// disk).
    pub fn sync_times(&self) -> Option<crate::histogram::HistogramSnapshot> {
        self.disk.sync_times().map(|h| h.snapshot())
    }

    pub fn stats(&self) -> Stats {
        let usage = self.log.usage();
        let (mut cache_bytes, mut cached_values, mut bytes, mut table_bytes) = (0, 0, 0, 0);
        for shard in self.index.shards() {
            let shard = shard.read();
            bytes += shard.data_bytes;
            table_bytes += shard.table_bytes;
            cache_bytes += shard.cached_bytes();
            cached_values += shard.cached_values;
        }
        // Held keys' bytes are the ordered keyspace's count.
        if let Some(ordered) = &self.ordered {
            table_bytes += ordered.held().bytes;
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
            ordered_pending: self.ordered.as_ref().map_or(0, |o| o.pending() as u64),
            ordered_durable_lsn: self.ordered.as_ref().map_or(0, |o| o.durable_lsn()),
            ordered_commits: self
                .ordered
                .as_ref()
                .map_or(0, |o| o.commits.load(Ordering::Relaxed)),
            ordered_repaired: self.ordered.as_ref().is_some_and(|o| o.repaired),
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
            table_items: self.table_items.load(Ordering::Relaxed),
            table_bytes,
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
        let saved = if self.ordered.is_some() {
            self.log
                .force_sync()
                .and_then(|()| self.apply_ordered(true))
        } else {
            Ok(())
        };
        if let Err(e) = saved {
            tracing::warn!(error = %e, "the ordered keyspace was not saved at shutdown; the next start reads more of the log");
        }
        self.log.shutdown();
    }
}

/// What one look at a key under its shard's lock found ([`Store::look`]).
enum Look {
    /// The answer: the live version, or none.
    Found(Option<Item>),
    /// A version no longer live, to drop.
    Dead,
    /// Versions only in the log: each record's raw address, segment and offset.
    Unknown(Vec<(u64, u64, u32)>),
}
