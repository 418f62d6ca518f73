//! The engine against a model: a `HashMap` plus a clock, over random sequences of
//! operations, with clean reopens, kills and power losses (torn tails) in the middle.
//! Half the keys are memcached's, half have the same bytes in a table key space, where
//! flush_all does not reach; atomic batches change several keys of both at once.
//!
//! Acknowledged operations must all survive every kind of crash the durability mode
//! promises to survive. Operations sent without waiting for their acknowledgement may be
//! lost at a power loss, but only from the end: what recovery shows must be the state
//! after some prefix of them. CAS values only ever grow, across restarts too.
//!
//! The table space is also kept in order (the ordered keyspace): after every step its
//! ranges, forward and backward, whole and bounded, show exactly the live keys, and
//! hold no key whose last change was a delete (only keys that may have expired).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kura_engine::sim::{SimDisk, Tear};
use kura_engine::{
    exptime_to_absolute, Access, Change, Durability, FindLive, Key, ManualClock, NewItem, Options,
    OrderedSpaces, Space, Store,
};
use proptest::prelude::*;
use std::ops::Bound;

const START_SECS: u32 = 1_700_000_000;

/// Model keys: 0..6 are memcached's, 6..12 the same bytes in a table space.
const KEYS: u8 = 12;
const MEMCACHED_KEYS: u8 = 6;
const TABLE_SPACE: Space = Space(2);

/// One key's change in a batch: a new value, or None to delete it.
type BatchChange = (u8, Option<Vec<u8>>);

#[derive(Debug, Clone)]
enum Op {
    Set {
        key: u8,
        value: Vec<u8>,
        ttl: i64,
    },
    Delete {
        key: u8,
    },
    Touch {
        key: u8,
        ttl: i64,
    },
    Get {
        key: u8,
    },
    Advance {
        secs: u32,
    },
    Flush {
        delay: i64,
    },
    Reopen,
    Kill,
    PowerLoss {
        seed: u64,
    },
    /// Several keys changed as one atomic batch.
    Batch {
        changes: Vec<BatchChange>,
    },
    /// Changes (a batch each, some of one key) sent without waiting for their
    /// acknowledgement, then a torn power loss: recovery shows the state after some
    /// prefix of them, never part of a batch.
    UnackedThenPowerLoss {
        batches: Vec<Vec<BatchChange>>,
        seed: u64,
    },
    /// Compact the oldest segments: nothing a client can see may change.
    Compact {
        segments: u8,
        walk_index: bool,
    },
    /// Compact with a power loss armed to strike at the n-th write from now.
    CompactCrash {
        appends: u8,
        seed: u64,
        walk_index: bool,
    },
    /// Write the index checkpoint; the next reopen starts from it if no compaction
    /// came between.
    Checkpoint,
    /// Checkpoint with a power loss armed to strike at the n-th write from now.
    CheckpointCrash {
        appends: u8,
        seed: u64,
    },
    PurgeExpired,
    /// Move the ordered keyspace's changes into its B-tree (durably or not).
    ApplyOrdered {
        durable: bool,
    },
    /// A durable one with a power loss armed to strike at the n-th write from now.
    ApplyOrderedCrash {
        appends: u8,
        seed: u64,
    },
}

/// The way an `Op::Compact` or `Op::CompactCrash` finds live records.
fn finding(walk_index: bool) -> FindLive {
    if walk_index {
        FindLive::WalkIndex
    } else {
        FindLive::ReadSegment
    }
}

/// 1 to 4 changes of distinct keys.
fn batch() -> impl Strategy<Value = Vec<BatchChange>> {
    let change = (
        0u8..KEYS,
        proptest::option::weighted(0.8, proptest::collection::vec(any::<u8>(), 0..40)),
    );
    proptest::collection::vec(change, 1..5).prop_map(|mut changes| {
        let mut seen = std::collections::HashSet::new();
        changes.retain(|(k, _)| seen.insert(*k));
        changes
    })
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..KEYS;
    let value = proptest::collection::vec(any::<u8>(), 0..40);
    let ttl = prop_oneof![6 => Just(0i64), 2 => 1i64..4, 1 => Just(-1i64)];
    prop_oneof![
        30 => (key.clone(), value.clone(), ttl.clone()).prop_map(|(key, value, ttl)| Op::Set { key, value, ttl }),
        8 => key.clone().prop_map(|key| Op::Delete { key }),
        5 => (key.clone(), ttl).prop_map(|(key, ttl)| Op::Touch { key, ttl }),
        15 => key.clone().prop_map(|key| Op::Get { key }),
        6 => (1u32..3).prop_map(|secs| Op::Advance { secs }),
        2 => prop_oneof![Just(0i64), 1i64..4].prop_map(|delay| Op::Flush { delay }),
        3 => Just(Op::Reopen),
        3 => Just(Op::Kill),
        3 => any::<u64>().prop_map(|seed| Op::PowerLoss { seed }),
        6 => batch().prop_map(|changes| Op::Batch { changes }),
        3 => (proptest::collection::vec(batch(), 1..5), any::<u64>())
            .prop_map(|(batches, seed)| Op::UnackedThenPowerLoss { batches, seed }),
        4 => (1u8..4, any::<bool>()).prop_map(|(segments, walk_index)| Op::Compact { segments, walk_index }),
        3 => (0u8..12, any::<u64>(), any::<bool>())
            .prop_map(|(appends, seed, walk_index)| Op::CompactCrash { appends, seed, walk_index }),
        3 => Just(Op::Checkpoint),
        2 => (0u8..4, any::<u64>()).prop_map(|(appends, seed)| Op::CheckpointCrash { appends, seed }),
        1 => Just(Op::PurgeExpired),
        4 => any::<bool>().prop_map(|durable| Op::ApplyOrdered { durable }),
        2 => (0u8..6, any::<u64>()).prop_map(|(appends, seed)| Op::ApplyOrderedCrash { appends, seed }),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelItem {
    value: Vec<u8>,
    exptime: u32,
    time: u32,
}

#[derive(Debug, Clone, Default)]
struct Model {
    items: HashMap<u8, ModelItem>,
    flush_deadline: u32,
    /// Keys ever given an expiry time: their versions may leave without a record, so
    /// the ordered keyspace may keep them.
    expiring: std::collections::HashSet<u8>,
}

impl Model {
    /// The engine drops a version hidden by a delayed flush when a request meets it (and
    /// logs that); the model does the same, so a later deadline cannot show it again.
    fn meet(&mut self, key: u8, now: u32) {
        if let Some(item) = self.items.get(&key) {
            if !self.is_live(key, item, now) {
                self.items.remove(&key);
            }
        }
    }

    fn meet_all(&mut self, now: u32) {
        for key in 0..KEYS {
            self.meet(key, now);
        }
    }

    /// Expired, or hidden by a delayed flush_all (which reaches memcached's keys only).
    fn is_live(&self, key: u8, item: &ModelItem, now: u32) -> bool {
        let expired = item.exptime != 0 && item.exptime <= now;
        let flushed = space(key) == Space::MEMCACHED
            && self.flush_deadline != 0
            && now >= self.flush_deadline
            && item.time <= self.flush_deadline;
        !expired && !flushed
    }

    fn live(&self, key: u8, now: u32) -> Option<&ModelItem> {
        let item = self.items.get(&key)?;
        self.is_live(key, item, now).then_some(item)
    }

    fn apply_batch(&mut self, changes: &[BatchChange], now: u32) {
        for (key, value) in changes {
            match value {
                Some(value) => self.set(*key, value, 0, now),
                None => {
                    self.items.remove(key);
                }
            }
        }
    }

    /// memcached's `curr_items` and `bytes`, and the same for the table space, once
    /// every key has been met.
    fn counters(&self) -> (u64, u64, u64, u64) {
        let mut c = (0, 0, 0, 0);
        for (&key, item) in &self.items {
            let bytes = (key_bytes(key).len() + item.value.len()) as u64;
            if space(key) == Space::MEMCACHED {
                c.0 += 1;
                c.1 += bytes;
            } else {
                c.2 += 1;
                c.3 += bytes;
            }
        }
        c
    }

    fn set(&mut self, key: u8, value: &[u8], ttl: i64, now: u32) {
        let exptime = exptime_to_absolute(ttl, now);
        if exptime != 0 {
            self.expiring.insert(key);
        }
        self.items.insert(
            key,
            ModelItem {
                value: value.to_vec(),
                exptime,
                time: now,
            },
        );
    }

    /// Keys, values and expiry times: what tells apart two versions of equal value.
    fn snapshot_with_expiry(&self, now: u32) -> Vec<(u8, Vec<u8>, u32)> {
        (0..KEYS)
            .filter_map(|k| self.live(k, now).map(|i| (k, i.value.clone(), i.exptime)))
            .collect()
    }

    fn snapshot(&self, now: u32) -> Vec<(u8, Vec<u8>)> {
        let mut all: Vec<_> = (0..KEYS)
            .filter_map(|k| self.live(k, now).map(|i| (k, i.value.clone())))
            .collect();
        all.sort();
        all
    }
}

/// Keys from `MEMCACHED_KEYS` to `KEYS` have the bytes of the memcached key
/// `MEMCACHED_KEYS` below them, in the table space; any other is memcached's.
fn key_bytes(key: u8) -> Vec<u8> {
    match space(key) {
        Space::MEMCACHED => format!("key{key}").into_bytes(),
        _ => format!("key{}", key - MEMCACHED_KEYS).into_bytes(),
    }
}

fn space(key: u8) -> Space {
    if (MEMCACHED_KEYS..KEYS).contains(&key) {
        TABLE_SPACE
    } else {
        Space::MEMCACHED
    }
}

/// Runs `f` with model key `key` as the engine's key.
fn with_key<R>(key: u8, f: impl FnOnce(Key<'_>) -> R) -> R {
    let bytes = key_bytes(key);
    f(Key::new(space(key), &bytes))
}

/// Sends a batch (a single update for one change) and returns its LSN, if it wrote.
fn send_batch(store: &Store, changes: &[BatchChange]) -> Option<u64> {
    let change = |value: &Option<Vec<u8>>| match value {
        Some(v) => Change::Put(NewItem::new(v.as_slice().into(), 7)),
        None => Change::Delete,
    };
    if let [(key, value)] = changes {
        let result = with_key(*key, |k| {
            store.update(k, Access::NoAccess, |_, _| (change(value), ()))
        });
        let ((), written) = result.unwrap_or_else(|e| panic!("update: {e}"));
        return written.map(|w| w.lsn);
    }
    let bytes: Vec<Vec<u8>> = changes.iter().map(|(k, _)| key_bytes(*k)).collect();
    let keys: Vec<Key<'_>> = changes
        .iter()
        .zip(&bytes)
        .map(|((k, _), b)| Key::new(space(*k), b))
        .collect();
    let result = store.update_batch(&keys, |current, _| {
        assert_eq!(current.len(), changes.len());
        (changes.iter().map(|(_, v)| change(v)).collect(), ())
    });
    let ((), written) = result.unwrap_or_else(|e| panic!("batch: {e}"));
    assert_eq!(written.len(), changes.len());
    // Every record of a batch is acknowledged with the batch.
    let lsns: Vec<u64> = written.iter().flatten().map(|w| w.lsn).collect();
    assert!(lsns.windows(2).all(|w| w[0] == w[1]), "{lsns:?}");
    lsns.first().copied()
}

fn open(disk: &SimDisk, clock: &Arc<ManualClock>, durability: Durability) -> Store {
    open_with(disk, clock, durability, 0)
}

/// A budget so small that every value is dropped from memory as soon as its record is
/// written, so reads and updates go to the log for it.
const TINY_MEMORY: u64 = 2000;

/// A power loss armed to strike after `appends` more appends, during one operation.
#[derive(Clone, Copy)]
struct Crash {
    appends: u8,
    seed: u64,
}

impl Crash {
    /// Runs `operation` with the power loss armed, and disarms it after. Interval
    /// mode promises nothing across a power loss, so its crash keeps what was written
    /// (a kill); in the other modes it tears the unsynced writes.
    fn arm<T>(self, disk: &SimDisk, durability: Durability, operation: impl FnOnce() -> T) -> T {
        let tear = match durability {
            Durability::Interval => Tear::KeepWritten,
            _ => Tear::Torn(self.seed),
        };
        disk.power_loss_after_appends(u64::from(self.appends), tear);
        let outcome = operation();
        disk.disarm();
        outcome
    }

    /// If the power went: drops the store, restores power, and reopens the store on
    /// what the disk kept.
    fn restart_if_off(
        self,
        disk: &SimDisk,
        store: Store,
        clock: &Arc<ManualClock>,
        durability: Durability,
        memory: u64,
    ) -> Store {
        if !disk.is_off() {
            return store;
        }
        drop(store);
        disk.revive();
        open_with(disk, clock, durability, memory)
    }
}

thread_local! {
    /// Whether this thread's runs keep the table space held: its keys in the ordered
    /// keyspace only, with no slot in the index.
    static HELD: Cell<bool> = const { Cell::new(false) };
}

/// [`run`] with the table space held.
fn run_held(ops: Vec<Op>, durability: Durability, memory: u64) {
    HELD.with(|h| h.set(true));
    run(ops, durability, memory);
}

fn open_with(
    disk: &SimDisk,
    clock: &Arc<ManualClock>,
    durability: Durability,
    memory_limit_bytes: u64,
) -> Store {
    let mut options = Options::new(durability, clock.clone());
    options.memory_limit_bytes = memory_limit_bytes;
    // With values on disk, keys also share the index's fingerprints: lookups read
    // strangers' records and must tell them apart.
    options.crowded_index = memory_limit_bytes == TINY_MEMORY;
    options.segment_size_bytes = 512; // small, so runs cross segment boundaries
    options.fsync_interval = Duration::from_millis(1);
    options.ordered_spaces = if HELD.with(Cell::get) {
        OrderedSpaces::default().with_held(TABLE_SPACE)
    } else {
        OrderedSpaces::default().with(TABLE_SPACE)
    };
    options.ordered_cache_bytes = 1 << 20;
    match Store::open(Arc::new(disk.clone()), options) {
        Ok(store) => store,
        Err(e) => panic!("reopen failed: {e}"),
    }
}

fn peek(store: &Store, key: u8) -> Option<kura_engine::Item> {
    with_key(key, |k| store.peek(k)).unwrap_or_else(|e| panic!("peek {key}: {e}"))
}

fn get(store: &Store, key: u8) -> Option<kura_engine::Item> {
    with_key(key, |k| store.get(k)).unwrap_or_else(|e| panic!("get {key}: {e}"))
}

fn store_snapshot_with_expiry(store: &Store) -> Vec<(u8, Vec<u8>, u32)> {
    (0..KEYS)
        .filter_map(|k| peek(store, k).map(|i| (k, i.value.to_vec(), i.exptime)))
        .collect()
}

fn store_snapshot(store: &Store) -> Vec<(u8, Vec<u8>)> {
    (0..KEYS)
        .filter_map(|k| peek(store, k).map(|i| (k, i.value.to_vec())))
        .collect()
}

fn put(store: &Store, key: u8, value: &[u8], ttl: i64) -> u64 {
    let value: Arc<[u8]> = value.into();
    let bytes = key_bytes(key);
    let result = store.update(Key::new(space(key), &bytes), Access::NoAccess, |_, now| {
        let exptime = exptime_to_absolute(ttl, now);
        (
            Change::Put(NewItem {
                exptime,
                ..NewItem::new(value, 7)
            }),
            (),
        )
    });
    match result {
        Ok(((), Some(written))) => written.lsn,
        other => panic!("set failed: {other:?}"),
    }
}

/// Runs `ops`. In interval mode an acknowledged write is only promised to survive a
/// killed process, not a power loss, so power losses become kills there.
fn run(ops: Vec<Op>, durability: Durability, memory: u64) {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let mut store = open_with(&disk, &clock, durability, memory);
    let mut model = Model::default();
    let mut max_cas = 0u64;
    for op in ops {
        let op = match (durability, op) {
            (Durability::Interval, Op::PowerLoss { .. }) => Op::Kill,
            (Durability::Interval, Op::UnackedThenPowerLoss { .. }) => Op::Kill,
            (_, op) => op,
        };
        if memory > 0 {
            // Push every written value out, so the op below finds it on disk.
            store.trim_to_budget();
        }
        let now = clock.now_secs_for_test();
        // LSNs only rise, across compactions and crashes too: what was acknowledged
        // before the op is never past where the log stands after it.
        let acked_before = store.acked_lsn();
        match op {
            Op::Set { key, value, ttl } => {
                let lsn = put(&store, key, &value, ttl);
                assert!(store.wait_acked(lsn).is_ok());
                model.set(key, &value, ttl, now);
                if let Some(item) = peek(&store, key) {
                    assert!(
                        item.cas > max_cas,
                        "CAS went from {max_cas} to {}",
                        item.cas
                    );
                    max_cas = item.cas;
                    assert_eq!(item.client_flags, 7);
                }
            }
            Op::Delete { key } => {
                let result = with_key(key, |k| {
                    store.update(k, Access::NoAccess, |item, _| {
                        (Change::Delete, item.is_some())
                    })
                });
                let (existed, lsn) = result.unwrap_or_else(|e| panic!("delete: {e}"));
                assert_eq!(existed, model.live(key, now).is_some(), "delete of {key}");
                if let Some(written) = lsn {
                    assert!(store.wait_acked(written.lsn).is_ok());
                }
                model.items.remove(&key);
            }
            Op::Touch { key, ttl } => {
                let result = with_key(key, |k| {
                    store.update(k, Access::NoAccess, |item, now| {
                        (
                            Change::Touch {
                                exptime: Some(exptime_to_absolute(ttl, now)),
                                mark_win_sent: false,
                            },
                            item.is_some(),
                        )
                    })
                });
                let (existed, lsn) = result.unwrap_or_else(|e| panic!("touch: {e}"));
                assert_eq!(existed, model.live(key, now).is_some(), "touch of {key}");
                if let Some(written) = lsn {
                    assert!(store.wait_acked(written.lsn).is_ok());
                }
                if model.live(key, now).is_some() {
                    model.expiring.insert(key);
                    if let Some(item) = model.items.get_mut(&key) {
                        item.exptime = exptime_to_absolute(ttl, now);
                    }
                }
            }
            Op::Get { key } => {
                let got = get(&store, key).map(|i| i.value.to_vec());
                assert_eq!(
                    got,
                    model.live(key, now).map(|i| i.value.clone()),
                    "get of {key}"
                );
            }
            Op::Advance { secs } => clock.advance(secs),
            Op::Flush { delay } => {
                let lsn = store
                    .flush_all(delay)
                    .unwrap_or_else(|e| panic!("flush: {e}"));
                assert!(store.wait_acked(lsn).is_ok());
                // memcached's oldest_live: one second before the flush moment.
                let deadline = if delay <= 0 {
                    0
                } else {
                    exptime_to_absolute(delay, now) - 1
                };
                if deadline == 0 {
                    model.items.retain(|&k, _| space(k) != Space::MEMCACHED);
                }
                model.flush_deadline = deadline;
            }
            Op::Reopen => {
                store.shutdown();
                drop(store);
                store = open_with(&disk, &clock, durability, memory);
            }
            Op::Kill => {
                disk.power_loss(Tear::KeepWritten);
                drop(store);
                disk.revive();
                store = open_with(&disk, &clock, durability, memory);
            }
            Op::PowerLoss { seed } => {
                disk.power_loss(Tear::Torn(seed));
                drop(store);
                disk.revive();
                store = open_with(&disk, &clock, durability, memory);
            }
            Op::Compact {
                segments,
                walk_index,
            } => {
                for _ in 0..segments {
                    let compacted = store.compact_oldest_finding(finding(walk_index));
                    assert!(compacted.is_ok(), "compaction failed: {compacted:?}");
                }
            }
            Op::CompactCrash {
                appends,
                seed,
                walk_index,
            } => {
                let crash = Crash { appends, seed };
                let compacted = crash.arm(&disk, durability, || {
                    store.compact_oldest_finding(finding(walk_index))
                });
                // Only the power loss may make it fail.
                assert!(
                    compacted.is_ok() || disk.is_off(),
                    "compaction failed with the power on: {compacted:?}"
                );
                store = crash.restart_if_off(&disk, store, &clock, durability, memory);
            }
            Op::Checkpoint => {
                let written = store.checkpoint();
                assert!(written.is_ok(), "checkpoint failed: {written:?}");
            }
            Op::CheckpointCrash { appends, seed } => {
                let crash = Crash { appends, seed };
                let written = crash.arm(&disk, durability, || store.checkpoint());
                assert!(
                    written.is_ok() || disk.is_off(),
                    "checkpoint failed with the power on: {written:?}"
                );
                store = crash.restart_if_off(&disk, store, &clock, durability, memory);
            }
            Op::PurgeExpired => {
                store.purge_expired();
            }
            Op::ApplyOrdered { durable } => {
                let applied = store.apply_ordered(durable);
                assert!(applied.is_ok(), "apply_ordered: {applied:?}");
            }
            Op::ApplyOrderedCrash { appends, seed } => {
                let crash = Crash { appends, seed };
                let applied = crash.arm(&disk, durability, || store.apply_ordered(true));
                assert!(
                    applied.is_ok() || disk.is_off(),
                    "apply_ordered failed with the power on: {applied:?}"
                );
                store = crash.restart_if_off(&disk, store, &clock, durability, memory);
            }
            Op::Batch { changes } => {
                if let Some(lsn) = send_batch(&store, &changes) {
                    assert!(store.wait_acked(lsn).is_ok());
                }
                model.apply_batch(&changes, now);
            }
            Op::UnackedThenPowerLoss { batches, seed } => {
                // Expiry too: a lost set of the same value as the version before it
                // (an empty one, say) differs from it only there.
                let mut prefixes = vec![model.snapshot_with_expiry(now)];
                let mut after = model.clone();
                for changes in &batches {
                    send_batch(&store, changes);
                    after.apply_batch(changes, now);
                    prefixes.push(after.snapshot_with_expiry(now));
                }
                disk.power_loss(Tear::Torn(seed));
                drop(store);
                disk.revive();
                store = open_with(&disk, &clock, durability, memory);
                let recovered = store_snapshot_with_expiry(&store);
                let which = prefixes.iter().position(|p| *p == recovered);
                let Some(which) = which else {
                    panic!("recovered {recovered:?} is no prefix of {prefixes:?}");
                };
                // The model follows what survived.
                for changes in &batches[..which] {
                    model.apply_batch(changes, now);
                }
            }
        }
        assert!(
            store.appended_lsn() >= acked_before,
            "the log went back from LSN {acked_before} to {}",
            store.appended_lsn()
        );
        let now = clock.now_secs_for_test();
        assert_eq!(store_snapshot(&store), model.snapshot(now));
        // A scan of the table space sees exactly its live keys, each once.
        let mut scanned = Vec::new();
        let scan = store.scan_space(TABLE_SPACE, |key, item| {
            scanned.push((key.to_vec(), item.value.to_vec()));
        });
        assert!(scan.is_ok(), "scan: {scan:?}");
        scanned.sort();
        let mut live_tables: Vec<(Vec<u8>, Vec<u8>)> = model
            .snapshot(now)
            .into_iter()
            .filter(|(k, _)| space(*k) == TABLE_SPACE)
            .map(|(k, v)| (key_bytes(k), v))
            .collect();
        live_tables.sort();
        assert_eq!(scanned, live_tables, "scan of the table space");
        check_ordered(&store, &model, now);
        // The snapshot met every key, in the engine and so in the model.
        model.meet_all(now);
        let stats = store.stats();
        assert_eq!(
            (
                stats.curr_items,
                stats.bytes,
                stats.table_items,
                stats.table_bytes
            ),
            model.counters(),
            "items and bytes of each space"
        );
        // CAS never goes backwards: the next one handed out is above all seen.
        assert!(store.stats().next_cas > max_cas);
    }
}

/// Every key of the table space's ordered range within the bounds, batch by batch.
fn ordered_keys(
    store: &Store,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    reverse: bool,
) -> Vec<Vec<u8>> {
    let mut range = store.ordered_range(TABLE_SPACE, lower, upper, reverse);
    let mut all = Vec::new();
    loop {
        let keys = range
            .next_keys()
            .unwrap_or_else(|e| panic!("ordered range: {e}"));
        if keys.is_empty() {
            return all;
        }
        all.extend(keys);
    }
}

/// The ordered keyspace against the model: see the module comment.
fn check_ordered(store: &Store, model: &Model, now: u32) {
    let table_key = |k: u8| (space(k) == TABLE_SPACE).then(|| key_bytes(k));
    let live: Vec<Vec<u8>> = {
        let mut live: Vec<Vec<u8>> = (0..KEYS)
            .filter(|&k| model.live(k, now).is_some())
            .filter_map(table_key)
            .collect();
        live.sort();
        live
    };
    let all = ordered_keys(store, Bound::Unbounded, Bound::Unbounded, false);
    assert!(all.windows(2).all(|w| w[0] < w[1]), "not in order: {all:?}");
    let mut backward = ordered_keys(store, Bound::Unbounded, Bound::Unbounded, true);
    backward.reverse();
    assert_eq!(backward, all, "backward");
    let live_in = |keys: Vec<Vec<u8>>| -> Vec<Vec<u8>> {
        keys.into_iter()
            .filter(|k| {
                let found = store.peek(Key::new(TABLE_SPACE, k));
                found.unwrap_or_else(|e| panic!("peek: {e}")).is_some()
            })
            .collect()
    };
    assert_eq!(live_in(all.clone()), live, "the ordered keys that are live");
    for key in &all {
        let known = (0..KEYS).find(|&k| table_key(k).as_ref() == Some(key));
        let Some(k) = known else {
            panic!("an ordered key no one wrote: {key:?}");
        };
        assert!(
            model.live(k, now).is_some() || model.expiring.contains(&k),
            "ordered keys hold {key:?}, deleted"
        );
    }
    // A bounded range, both ways.
    let (low, high) = (key_bytes(MEMCACHED_KEYS + 1), key_bytes(MEMCACHED_KEYS + 4));
    let want: Vec<Vec<u8>> = live
        .iter()
        .filter(|k| **k > low && **k <= high)
        .cloned()
        .collect();
    let bounds = (Bound::Excluded(&low[..]), Bound::Included(&high[..]));
    assert_eq!(
        live_in(ordered_keys(store, bounds.0, bounds.1, false)),
        want
    );
    let mut down = live_in(ordered_keys(store, bounds.0, bounds.1, true));
    down.reverse();
    assert_eq!(down, want, "bounded, backward");
}

trait NowForTest {
    fn now_secs_for_test(&self) -> u32;
}

impl NowForTest for ManualClock {
    fn now_secs_for_test(&self) -> u32 {
        kura_engine::Clock::now_secs(self)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_model(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Durability::Fsync, 0);
    }

    /// The same with values out of memory: reads, updates and compaction find them
    /// in the log.
    #[test]
    fn engine_matches_model_with_values_on_disk(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Durability::Fsync, TINY_MEMORY);
    }

    #[test]
    fn engine_matches_model_in_interval_mode(ops in proptest::collection::vec(op(), 1..80)) {
        run(ops, Durability::Interval, 0);
    }

    /// The same three with the table space held: its keys found through the ordered
    /// keyspace, compaction asking it which records are live.
    #[test]
    fn held_keys_match_model(ops in proptest::collection::vec(op(), 1..80)) {
        run_held(ops, Durability::Fsync, 0);
    }

    #[test]
    fn held_keys_match_model_with_values_on_disk(ops in proptest::collection::vec(op(), 1..80)) {
        run_held(ops, Durability::Fsync, TINY_MEMORY);
    }

    #[test]
    fn held_keys_match_model_in_interval_mode(ops in proptest::collection::vec(op(), 1..80)) {
        run_held(ops, Durability::Interval, 0);
    }
}

mod cases;
