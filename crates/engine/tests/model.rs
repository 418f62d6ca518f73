//! The engine against a model: a `HashMap` plus a clock, over random sequences of
//! operations, with clean reopens, kills and power losses (torn tails) in the middle.
//! Half the keys are memcached's, half have the same bytes in a table key space, where
//! flush_all does not reach; atomic batches change several keys of both at once.
//!
//! Acknowledged operations must all survive every kind of crash the durability mode
//! promises to survive. Operations sent without waiting for their acknowledgement may be
//! lost at a power loss, but only from the end: what recovery shows must be the state
//! after some prefix of them. CAS values only ever grow, across restarts too.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kura_engine::sim::{SimDisk, Tear};
use kura_engine::{
    exptime_to_absolute, Access, Change, Durability, FindLive, Key, ManualClock, NewItem, Options,
    Space, Store,
};
use proptest::prelude::*;

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
                // Interval mode promises nothing across a power loss; a kill is its crash.
                let tear = match durability {
                    Durability::Interval => Tear::KeepWritten,
                    _ => Tear::Torn(seed),
                };
                disk.power_loss_after_appends(u64::from(appends), tear);
                let compacted = store.compact_oldest_finding(finding(walk_index));
                disk.disarm();
                // Only the power loss may make it fail.
                assert!(
                    compacted.is_ok() || disk.is_off(),
                    "compaction failed with the power on: {compacted:?}"
                );
                if disk.is_off() {
                    drop(store);
                    disk.revive();
                    store = open_with(&disk, &clock, durability, memory);
                }
            }
            Op::Checkpoint => {
                let written = store.checkpoint();
                assert!(written.is_ok(), "checkpoint failed: {written:?}");
            }
            Op::CheckpointCrash { appends, seed } => {
                let tear = match durability {
                    Durability::Interval => Tear::KeepWritten,
                    _ => Tear::Torn(seed),
                };
                disk.power_loss_after_appends(u64::from(appends), tear);
                let written = store.checkpoint();
                disk.disarm();
                assert!(
                    written.is_ok() || disk.is_off(),
                    "checkpoint failed with the power on: {written:?}"
                );
                if disk.is_off() {
                    drop(store);
                    disk.revive();
                    store = open_with(&disk, &clock, durability, memory);
                }
            }
            Op::PurgeExpired => {
                store.purge_expired();
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
}

/// The Bitcask bug class: a key deleted, its segments compacted, the process crashed and
/// restarted, in every order; it must never come back.
#[test]
fn deleted_keys_stay_deleted_through_compaction_and_crashes() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let mut store = open(&disk, &clock, Durability::Fsync);
    let mut compactions = 0;
    for round in 0..20u8 {
        for key in 0..6u8 {
            let lsn = put(&store, key, &[round; 40], 0);
            assert!(store.wait_acked(lsn).is_ok());
        }
        // Delete the even keys; the odd ones stay, so compaction has live data to copy.
        for key in (0..6u8).step_by(2) {
            let deleted = store.update(&key_bytes(key), Access::NoAccess, |_, _| {
                (Change::Delete, ())
            });
            let Ok(((), Some(written))) = deleted else {
                panic!("delete failed")
            };
            assert!(store.wait_acked(written.lsn).is_ok());
        }
        while let Ok(Some(_)) = store.compact_oldest() {
            compactions += 1;
            if store.stats().log_segments <= 2 {
                break;
            }
        }
        disk.power_loss(if round % 2 == 0 {
            Tear::DropUnsynced
        } else {
            Tear::Torn(u64::from(round))
        });
        drop(store);
        disk.revive();
        store = open(&disk, &clock, Durability::Fsync);
        let visible = store_snapshot(&store);
        let expected: Vec<(u8, Vec<u8>)> =
            (1..6u8).step_by(2).map(|k| (k, vec![round; 40])).collect();
        assert_eq!(
            visible, expected,
            "round {round}: a deleted key came back or a live one was lost"
        );
    }
    assert!(
        compactions > 20,
        "only {compactions} compactions: the test proves little"
    );
}

#[test]
fn a_failed_fsync_poisons_the_store() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let store = open(&disk, &clock, Durability::Fsync);
    let lsn = put(&store, 1, b"kept", 0);
    assert!(store.wait_acked(lsn).is_ok());
    disk.fail_syncs_after(0);
    let lsn = put(&store, 2, b"lost", 0);
    assert!(
        store.wait_acked(lsn).is_err(),
        "a write whose fsync failed was acknowledged"
    );
    assert!(store.is_poisoned());
    let bytes = key_bytes(1);
    let refused = store.update(Key::new(space(1), &bytes), Access::NoAccess, |_, _| {
        (Change::Put(NewItem::new(b"new".as_slice().into(), 7)), ())
    });
    assert!(refused.is_err(), "a poisoned store accepted a change");
    // A look logs nothing: what was acknowledged before the failure is still served.
    let seen = store.update(Key::new(space(1), &bytes), Access::Fetch, |item, _| {
        (Change::Keep, item.map(|i| i.value.to_vec()))
    });
    assert_eq!(
        seen.ok().map(|(value, _)| value),
        Some(Some(b"kept".to_vec()))
    );
}

#[test]
fn corruption_in_the_middle_cuts_the_log_there() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let store = open(&disk, &clock, Durability::Fsync);
    for i in 0..3u8 {
        let lsn = put(&store, i, &[i; 8], 0);
        assert!(store.wait_acked(lsn).is_ok());
    }
    store.shutdown();
    drop(store);
    // Damage the second record of the first segment: recovery keeps only the first.
    let name = "0000000000000001.log";
    let first_len = 8 + 12 + 12 + 4 + 8;
    disk.corrupt(name, 32 + first_len + 20, b"\xff");
    let store = open(&disk, &clock, Durability::Fsync);
    assert_eq!(store_snapshot(&store), vec![(0, vec![0; 8])]);
    assert!(store.stats().recovery_cut_bytes > 0);
}

/// The segment being written has its whole size reserved, so it reads as zeros past
/// its last record. A reopen, clean or after a power loss that keeps only synced bytes,
/// ends the log there: nothing is reported cut, nothing is lost, and the log goes on
/// from there. Segments left behind were cut back to their records as they were left.
#[test]
fn the_reserved_end_of_the_log_is_not_damage() {
    use kura_engine::disk::Disk;
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let segments = |disk: &SimDisk| {
        let mut names = disk.list().unwrap_or_else(|e| panic!("list: {e}"));
        names.retain(|n| n.ends_with(".log"));
        names.sort();
        names
    };
    let size = |disk: &SimDisk, name: &str| {
        disk.open_read(name)
            .and_then(|f| f.size())
            .unwrap_or_else(|e| panic!("size of {name}: {e}"))
    };
    let store = open(&disk, &clock, Durability::Fsync);
    for round in 0..3u8 {
        for i in 0..6u8 {
            let lsn = put(&store, i, &[round * 10 + i; 8], 0);
            assert!(store.wait_acked(lsn).is_ok());
        }
    }
    store.shutdown();
    drop(store);
    let names = segments(&disk);
    assert!(names.len() > 1, "the test wants rolls: {names:?}");
    for name in &names {
        let written = disk.contents(name).map_or(0, |c| c.len() as u64);
        if Some(name) == names.last() {
            assert!(size(&disk, name) > written, "{name} has no reserved space");
        } else {
            assert_eq!(size(&disk, name), written, "{name} was not cut back");
        }
    }
    let store = open(&disk, &clock, Durability::Fsync);
    assert_eq!(store.stats().recovery_cut_bytes, 0);
    let expect = |round: u8| {
        (0..6u8)
            .map(|i| (i, vec![round * 10 + i; 8]))
            .collect::<Vec<_>>()
    };
    assert_eq!(store_snapshot(&store), expect(2));
    for i in 0..6u8 {
        let lsn = put(&store, i, &[30 + i; 8], 0);
        assert!(store.wait_acked(lsn).is_ok());
    }
    disk.power_loss(Tear::DropUnsynced);
    drop(store);
    disk.revive();
    let store = open(&disk, &clock, Durability::Fsync);
    assert_eq!(store.stats().recovery_cut_bytes, 0);
    assert_eq!(store_snapshot(&store), expect(3));
}

/// With a budget too small for the values, they leave memory once written and every
/// read and read-modify-write brings them back from the log, through compaction too.
#[test]
fn values_out_of_memory_are_read_back_from_the_log() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let store = open_with(&disk, &clock, Durability::Fsync, TINY_MEMORY);
    for round in 0..4u8 {
        for key in 0..6u8 {
            let lsn = put(&store, key, &[round + key; 30], 0);
            assert!(store.wait_acked(lsn).is_ok());
        }
    }
    // Values whose records were still in the tail when their shard was written leave
    // on the next pass.
    store.trim_to_budget();
    let stats = store.stats();
    assert!(
        stats.cached_values == 0 && stats.cache_bytes == 0,
        "values stayed in memory: {stats:?}"
    );
    while let Ok(Some(_)) = store.compact_oldest() {
        if store.stats().log_segments <= 2 {
            break;
        }
    }
    for key in 0..6u8 {
        let Some(item) = get(&store, key) else {
            panic!("key {key} lost")
        };
        assert_eq!(&*item.value, &[3 + key; 30][..]);
    }
    assert!(store.stats().value_reads > 0);
    // An append needs the old value: it is read from the log under the update.
    let appended = store.update(&key_bytes(5), Access::NoAccess, |item, _| {
        let mut value = item.map(|i| i.value.to_vec()).unwrap_or_default();
        value.push(b'!');
        (Change::Put(NewItem::new(value.into(), 7)), ())
    });
    let Ok(((), Some(written))) = appended else {
        panic!("append failed")
    };
    assert!(store.wait_acked(written.lsn).is_ok());
    let mut expected = vec![8u8; 30];
    expected.push(b'!');
    assert_eq!(get(&store, 5).map(|i| i.value.to_vec()), Some(expected));
    // memcached's `bytes`: keys and values, in memory or not.
    assert_eq!(store.stats().bytes, 6 * (4 + 30) + 1);
}

/// A multi-get's misses are read in one pass: records near each other with one read
/// of the log, a record longer than that read completed by a second; every version
/// comes back whole, however the batches split them.
#[test]
fn a_batch_of_misses_is_read_in_one_pass() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let store = open_with(&disk, &clock, Durability::Fsync, TINY_MEMORY);
    // Small values side by side, and every seventh one longer than a page.
    let value_of = |key: u8| -> Vec<u8> {
        let len = if key % 7 == 3 {
            9000 + usize::from(key)
        } else {
            40
        };
        (0..len).map(|i| (i as u8).wrapping_mul(key | 1)).collect()
    };
    for key in 0..60u8 {
        let lsn = put(&store, key, &value_of(key), 0);
        assert!(store.wait_acked(lsn).is_ok());
    }
    for batches in [1, 4, 64] {
        store.set_memory_limit(TINY_MEMORY);
        assert_eq!(store.stats().cached_values, 0);
        // Room for every value again, so what is read stays.
        store.set_memory_limit(0);
        let keys: Vec<Vec<u8>> = (0..60u8).rev().map(key_bytes).collect();
        let missing: Vec<_> = keys.iter().filter_map(|k| store.unresolved(k)).collect();
        assert_eq!(missing.len(), 60, "every key was out of memory");
        let reads_before = store.stats().value_reads;
        let dealt = store.batch_reads(missing, batches);
        assert!(!dealt.is_empty() && dealt.len() <= batches);
        for batch in dealt {
            assert!(store.resolve_many(batch).is_ok());
        }
        assert!(keys.iter().all(|k| store.unresolved(k).is_none()));
        // Every key's record, and with this test's crowded index (keys share
        // fingerprints) those of keys that looked alike too.
        assert!(store.stats().value_reads >= reads_before + 60);
        for key in 0..60u8 {
            assert_eq!(
                get(&store, key).map(|i| i.value.to_vec()),
                Some(value_of(key))
            );
        }
    }
}

/// A log that ends before the checkpoint's position (synced bytes lost, or a file cut
/// from outside) is replayed whole, and the checkpoint goes for good: the log resumes
/// short of its position with space reserved past it, which reads as zeros there, so
/// the next restart must not take the checkpoint for good again.
/// Reads planned for a caller that makes them its own way (the server's io_uring):
/// each starts and ends on a block boundary; whole reads bring every version back, a
/// read cut short has its records completed by positional reads, and a failed read
/// installs nothing and is an error, after which a lookup reads the record itself.
#[test]
fn planned_reads_made_elsewhere_whole_short_or_failed() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let store = open_with(&disk, &clock, Durability::Fsync, TINY_MEMORY);
    let value_of = |key: u8| -> Vec<u8> {
        let len = if key % 5 == 2 {
            6000
        } else {
            100 + usize::from(key)
        };
        (0..len).map(|i| (i as u8).wrapping_add(key)).collect()
    };
    for key in 0..40u8 {
        let lsn = put(&store, key, &value_of(key), 0);
        assert!(store.wait_acked(lsn).is_ok());
    }
    let keys: Vec<Vec<u8>> = (0..40u8).map(key_bytes).collect();
    for cut in [None, Some(64usize), Some(0)] {
        store.set_memory_limit(TINY_MEMORY);
        store.set_memory_limit(0);
        let missing: Vec<_> = keys.iter().filter_map(|k| store.unresolved(k)).collect();
        assert_eq!(missing.len(), 40, "every key was out of memory");
        let mut reads = store.plan_cold_reads(missing);
        assert!(!reads.runs().is_empty());
        for run in 0..reads.runs().len() {
            let (offset, span) = (reads.runs()[run].offset(), reads.runs()[run].span());
            assert!(offset % 4096 == 0 && span % 4096 == 0, "{offset} {span}");
            let file = reads.runs()[run].file().map(Arc::clone);
            let mut buf = vec![0u8; span];
            let read = match (file, cut) {
                (_, Some(0)) => Err(std::io::Error::other("the read failed")),
                (Some(file), cut) => file.read_up_to(&mut buf, offset).map(|got| {
                    buf.truncate(cut.map_or(got, |cut| got.min(cut)));
                    buf
                }),
                (None, _) => panic!("run {run} has no file"),
            };
            store.cold_read_done(
                &mut reads,
                run,
                read.as_deref()
                    .map_err(|e| std::io::Error::other(e.to_string())),
            );
        }
        let installed = store.install_cold_reads(reads);
        if cut == Some(0) {
            assert!(installed.is_err(), "a failed read is an error");
            assert!(
                keys.iter().all(|k| store.unresolved(k).is_some()),
                "nothing installed"
            );
        } else {
            assert!(installed.is_ok(), "{installed:?}");
            assert!(
                keys.iter().all(|k| store.unresolved(k).is_none()),
                "{cut:?}"
            );
        }
        for key in 0..40u8 {
            assert_eq!(
                get(&store, key).map(|i| i.value.to_vec()),
                Some(value_of(key)),
                "key {key}, reads cut at {cut:?}"
            );
        }
    }
}

#[test]
fn a_checkpoint_past_the_end_of_the_log_is_dropped() {
    use kura_engine::disk::Disk;
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    // Six small records fit the first of `open`'s 512-byte segments.
    let reopen = || open(&disk, &clock, Durability::Fsync);
    let store = reopen();
    let first = put(&store, 0, b"first", 0);
    assert!(store.wait_acked(first).is_ok());
    for key in 1..6u8 {
        put(&store, key, &[key; 20], 0);
    }
    assert_eq!(store.checkpoint().ok(), Some(6));
    store.shutdown();
    drop(store);
    // Lose everything after the first record.
    let name = "0000000000000001.log";
    let first_len = 8 + 12 + 12 + 4 + 5;
    assert!(disk.truncate(name, 32 + first_len).is_ok());
    let store = reopen();
    assert_eq!(store.stats().checkpoint_restored_keys, 0);
    assert_eq!(store_snapshot(&store), vec![(0, b"first".to_vec())]);
    let names = disk.list().unwrap_or_else(|e| panic!("list: {e}"));
    assert!(
        !names.iter().any(|n| n.starts_with("index.ckpt")),
        "the checkpoint stayed: {names:?}"
    );
    let lsn = put(&store, 1, b"again", 0);
    assert!(store.wait_acked(lsn).is_ok());
    store.shutdown();
    drop(store);
    let store = reopen();
    assert_eq!(store.stats().recovery_cut_bytes, 0);
    assert_eq!(
        store_snapshot(&store),
        vec![(0, b"first".to_vec()), (1, b"again".to_vec())]
    );
}

/// A restart reads the checkpoint and only the log after it, and ends where a whole
/// replay would; a checkpoint older than a compaction is left aside.
#[test]
fn restart_from_a_checkpoint_replays_only_the_tail() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let store = open(&disk, &clock, Durability::Fsync);
    for key in 0..6u8 {
        put(&store, key, &[key; 20], 0);
    }
    assert_eq!(store.checkpoint().ok(), Some(6));
    let lsn = put(&store, 1, b"after", 0);
    let deleted = store.update(&key_bytes(2), Access::NoAccess, |_, _| (Change::Delete, ()));
    assert!(deleted.is_ok());
    assert!(store.wait_acked(lsn).is_ok());
    let expected = store_snapshot(&store);
    // A kill: the checkpoint is on disk, the tail after it in the log.
    disk.power_loss(Tear::KeepWritten);
    drop(store);
    disk.revive();
    let store = open(&disk, &clock, Durability::Fsync);
    let stats = store.stats();
    assert_eq!(stats.checkpoint_restored_keys, 6);
    assert_eq!(stats.recovered_records, 2, "{stats:?}");
    // The four keys the tail did not touch were in memory at the checkpoint: they
    // come back before any read asks for them.
    assert_eq!(store.warm_cache(), 4);
    assert_eq!(store_snapshot(&store), expected);
    assert_eq!(
        store.stats().value_reads,
        0,
        "a read after warming went to disk"
    );
    // Fill segments and compact: the checkpoint may point into a removed segment now.
    for round in 0..40u8 {
        put(&store, round % 6, &[round; 40], 0);
    }
    assert!(matches!(store.compact_oldest(), Ok(Some(_))));
    let expected = store_snapshot(&store);
    store.shutdown();
    drop(store);
    let store = open(&disk, &clock, Durability::Fsync);
    assert_eq!(store.stats().checkpoint_restored_keys, 0);
    assert_eq!(store_snapshot(&store), expected);
}

/// An LSN names one point of the log's history for good: after compaction removed the
/// segments the log began with, a restart that replays the log (no checkpoint) goes on
/// from where it was, not from the bytes that survive.
#[test]
fn lsns_go_on_after_compaction_and_restart() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let store = open(&disk, &clock, Durability::Fsync);
    for round in 0..60u8 {
        let lsn = put(&store, round % 4, &[round; 40], 0);
        assert!(store.wait_acked(lsn).is_ok());
    }
    while store.stats().log_segments > 2 {
        assert!(matches!(store.compact_oldest(), Ok(Some(_))));
    }
    let before = store.appended_lsn();
    let expected = store_snapshot(&store);
    store.shutdown();
    drop(store);
    let store = open(&disk, &clock, Durability::Fsync);
    assert_eq!(store.stats().checkpoint_restored_keys, 0);
    assert_eq!(store.appended_lsn(), before);
    assert_eq!(store_snapshot(&store), expected);
    let lsn = put(&store, 9, b"after", 0);
    assert!(lsn > before);
}

/// A batch cut at any byte (a torn write, a power loss) comes back whole or not at all,
/// and the log goes on after it.
#[test]
fn a_batch_cut_anywhere_is_all_or_nothing() {
    use kura_engine::disk::Disk;
    let clock = Arc::new(ManualClock::new(START_SECS));
    let name = "0000000000000001.log";
    let disk = SimDisk::new();
    let store = open(&disk, &clock, Durability::Fsync);
    let lsn = put(&store, 0, b"before", 0);
    assert!(store.wait_acked(lsn).is_ok());
    let before = store_snapshot(&store);
    let written_before = disk.contents(name).map_or(0, |c| c.len());
    let changes: Vec<BatchChange> = vec![
        (1, Some(b"one".to_vec())),
        (7, Some(b"seven".to_vec())),
        (0, None),
    ];
    let lsn = send_batch(&store, &changes);
    assert!(store.wait_acked(lsn.unwrap_or(0)).is_ok());
    let after = store_snapshot(&store);
    assert_ne!(before, after);
    store.shutdown();
    drop(store);
    let Some(log) = disk.contents(name) else {
        panic!("no segment {name}")
    };
    assert!(
        log.len() > written_before + 3 * 20,
        "the batch is in the first segment"
    );
    for cut in written_before..=log.len() {
        let disk = SimDisk::new();
        let copy = || -> std::io::Result<()> {
            let mut file = disk.create(name)?;
            file.append(&log[..cut])?;
            file.sync()?;
            disk.sync_dir()
        };
        assert!(copy().is_ok());
        let store = open(&disk, &clock, Durability::Fsync);
        let seen = store_snapshot(&store);
        let whole = cut == log.len();
        assert_eq!(
            seen,
            if whole { after.clone() } else { before.clone() },
            "cut at {cut}"
        );
        assert_eq!(
            store.stats().recovery_cut_bytes > 0,
            !whole && cut > written_before,
            "cut at {cut}"
        );
        // The log goes on from where recovery left it.
        let lsn = put(&store, 2, b"later", 0);
        assert!(store.wait_acked(lsn).is_ok());
        store.shutdown();
        drop(store);
        let store = open(&disk, &clock, Durability::Fsync);
        assert_eq!(
            get(&store, 2).map(|i| i.value.to_vec()),
            Some(b"later".to_vec())
        );
    }
}

/// flush_all, immediate or delayed, removes memcached's keys and leaves the tables'
/// keys of the same bytes, before a restart and after.
#[test]
fn flush_all_leaves_other_key_spaces_alone() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let store = open_with(&disk, &clock, Durability::Fsync, TINY_MEMORY);
    for key in 0..KEYS {
        let lsn = put(&store, key, &[key; 10], 0);
        assert!(store.wait_acked(lsn).is_ok());
    }
    store.trim_to_budget();
    let tables: Vec<(u8, Vec<u8>)> = (MEMCACHED_KEYS..KEYS).map(|k| (k, vec![k; 10])).collect();
    for delay in [0, 1] {
        let lsn = store
            .flush_all(delay)
            .unwrap_or_else(|e| panic!("flush: {e}"));
        assert!(store.wait_acked(lsn).is_ok());
        clock.advance(2);
        assert_eq!(store_snapshot(&store), tables, "flush_all {delay}");
    }
    let stats = store.stats();
    assert_eq!((stats.curr_items, stats.table_items), (0, 6));
    store.shutdown();
    drop(store);
    let store = open(&disk, &clock, Durability::Fsync);
    assert_eq!(store_snapshot(&store), tables);
}
