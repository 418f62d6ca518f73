//! The ordered keyspace in chosen cases, beside the model test's random ones: ranges
//! read in batches across the overlay and the B-tree, a B-tree that never gets ahead
//! of what the log holds durably, a restart that reads only the log after the
//! B-tree's last durable commit, and one that does not read the whole B-tree.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;

use kura_engine::sim::{SimDisk, Tear};
use kura_engine::{
    Access, Change, Durability, Key, ManualClock, NewItem, Options, OrderedSpaces, Space, Store,
};

const ORDERED: Space = Space(2);
const PLAIN: Space = Space(3);

fn options(durability: Durability) -> Options {
    let mut options = Options::new(durability, Arc::new(ManualClock::new(1_700_000_000)));
    options.ordered_spaces = OrderedSpaces::default().with(ORDERED);
    options.ordered_cache_bytes = 1 << 20;
    options.segment_size_bytes = 64 << 10;
    options
}

fn open(disk: &SimDisk, options: Options) -> Store {
    Store::open(Arc::new(disk.clone()), options).unwrap_or_else(|e| panic!("open: {e}"))
}

fn key(n: u32) -> Vec<u8> {
    n.to_be_bytes().to_vec()
}

fn put(store: &Store, space: Space, bytes: &[u8]) -> u64 {
    let done = store.update(Key::new(space, bytes), Access::NoAccess, |_, _| {
        (Change::Put(NewItem::new(b"v".as_slice().into(), 0)), ())
    });
    match done {
        Ok(((), Some(written))) => written.lsn,
        other => panic!("put: {other:?}"),
    }
}

fn delete(store: &Store, bytes: &[u8]) -> Option<u64> {
    let done = store.update(Key::new(ORDERED, bytes), Access::NoAccess, |_, _| {
        (Change::Delete, ())
    });
    match done {
        Ok(((), written)) => written.map(|w| w.lsn),
        Err(e) => panic!("delete: {e}"),
    }
}

fn keys(store: &Store, lower: Bound<&[u8]>, upper: Bound<&[u8]>, reverse: bool) -> Vec<Vec<u8>> {
    let mut range = store.ordered_range(ORDERED, lower, upper, reverse);
    let mut all = Vec::new();
    loop {
        let batch = range
            .next_keys()
            .unwrap_or_else(|e| panic!("ordered range: {e}"));
        if batch.is_empty() {
            return all;
        }
        all.extend(batch);
    }
}

fn all_keys(store: &Store) -> Vec<Vec<u8>> {
    keys(store, Bound::Unbounded, Bound::Unbounded, false)
}

/// Ranges across many batches, with some changes in the B-tree and some in the overlay
/// (deletes of keys the B-tree holds among them), agree with a sorted set; keys of a
/// space not kept in order are not in them.
#[test]
fn ranges_merge_the_btree_and_the_overlay_in_batches() {
    let disk = SimDisk::new();
    let store = open(&disk, options(Durability::None));
    let mut model = BTreeSet::new();
    for n in (0..3000u32).map(|n| n.wrapping_mul(2_654_435_761) % 5000) {
        put(&store, ORDERED, &key(n));
        put(&store, PLAIN, &key(n));
        model.insert(key(n));
    }
    store
        .sync_through(store.appended_lsn())
        .unwrap_or_else(|e| panic!("sync: {e}"));
    store
        .apply_ordered(false)
        .unwrap_or_else(|e| panic!("apply: {e}"));
    assert_eq!(store.stats().ordered_pending, 0);
    // Into the overlay: deletes of B-tree keys, and new keys.
    for n in (0..5000u32).step_by(3) {
        if delete(&store, &key(n)).is_some() {
            model.remove(&key(n));
        }
    }
    for n in 5000..5600u32 {
        put(&store, ORDERED, &key(n));
        model.insert(key(n));
    }
    assert!(
        store.stats().ordered_pending > 256,
        "the overlay spans batches"
    );
    let want: Vec<Vec<u8>> = model.iter().cloned().collect();
    assert_eq!(all_keys(&store), want);
    let mut down = keys(&store, Bound::Unbounded, Bound::Unbounded, true);
    down.reverse();
    assert_eq!(down, want);
    let (low, high) = (key(1234), key(5321));
    let bounded: Vec<Vec<u8>> = model
        .range::<Vec<u8>, _>((Bound::Included(&low), Bound::Excluded(&high)))
        .cloned()
        .collect();
    let got = keys(
        &store,
        Bound::Included(&low[..]),
        Bound::Excluded(&high[..]),
        false,
    );
    assert_eq!(got, bounded);
    // And the same once half of it moved to the B-tree.
    store
        .sync_through(store.appended_lsn())
        .unwrap_or_else(|e| panic!("sync: {e}"));
    store
        .apply_ordered(true)
        .unwrap_or_else(|e| panic!("apply: {e}"));
    assert_eq!(all_keys(&store), want);
}

/// A change the log holds but has not synced stays out of the B-tree: a power loss that
/// takes it from the log leaves no trace of it in the ordered keys, and the restart
/// finds the B-tree where the log ends (a B-tree ahead of the log would be rebuilt
/// from the whole log).
#[test]
fn the_btree_never_holds_what_a_power_loss_takes_from_the_log() {
    let disk = SimDisk::new();
    let mut opts = options(Durability::Interval);
    opts.stepped_flusher = true;
    let store = open(&disk, opts);
    for n in 0..500 {
        put(&store, ORDERED, &key(n));
    }
    let kept = put(&store, ORDERED, b"kept");
    store
        .sync_through(kept)
        .unwrap_or_else(|e| panic!("sync: {e}"));
    store
        .apply_ordered(true)
        .unwrap_or_else(|e| panic!("apply: {e}"));
    let lost = put(&store, ORDERED, b"lost");
    store
        .wait_acked(lost)
        .unwrap_or_else(|e| panic!("ack: {e}"));
    assert!(store.synced_lsn() < lost, "the write is not synced yet");
    store
        .apply_ordered(true)
        .unwrap_or_else(|e| panic!("apply: {e}"));
    assert_eq!(all_keys(&store).len(), 502);
    disk.power_loss(Tear::DropUnsynced);
    drop(store);
    disk.revive();
    let mut opts = options(Durability::Interval);
    opts.stepped_flusher = true;
    let store = open(&disk, opts);
    assert_eq!(
        store.stats().ordered_pending,
        0,
        "the log was read from its end"
    );
    let all = all_keys(&store);
    assert_eq!(all.len(), 501);
    assert!(!all.contains(&b"lost".to_vec()));
}

/// A restart reads the log only from the B-tree's last durable commit: after a clean
/// shutdown nothing, after a kill what came after the commit.
#[test]
fn a_restart_reads_only_the_log_after_the_last_durable_commit() {
    let disk = SimDisk::new();
    let store = open(&disk, options(Durability::Fsync));
    for n in 0..2000 {
        put(&store, ORDERED, &key(n));
    }
    store.shutdown();
    drop(store);
    let store = open(&disk, options(Durability::Fsync));
    assert_eq!(
        store.stats().ordered_pending,
        0,
        "a clean restart reads nothing"
    );
    assert_eq!(all_keys(&store).len(), 2000);
    for n in 2000..2100 {
        let lsn = put(&store, ORDERED, &key(n));
        store.wait_acked(lsn).unwrap_or_else(|e| panic!("ack: {e}"));
    }
    disk.power_loss(Tear::KeepWritten);
    drop(store);
    disk.revive();
    let store = open(&disk, options(Durability::Fsync));
    assert_eq!(
        store.stats().ordered_pending,
        100,
        "the keys written since the commit"
    );
    assert_eq!(all_keys(&store).len(), 2100);
}

/// A batch larger than a log segment can address (64 MiB: a slot's offset has 26
/// bits) is refused whole, writing nothing: a batch is one segment's, as replay
/// applies it whole. One larger than the configured segment size (64 KiB here) but
/// within that fills a segment of its own.
#[test]
fn a_batch_larger_than_a_segment_is_refused_whole() {
    let disk = SimDisk::new();
    let store = open(&disk, options(Durability::Fsync));
    let value: std::sync::Arc<[u8]> = vec![7u8; 1 << 20].into();
    let keys: Vec<Vec<u8>> = (0..65u32).map(key).collect();
    let batch = |n: usize| {
        let engine_keys: Vec<Key<'_>> = keys[..n].iter().map(|k| Key::new(PLAIN, k)).collect();
        store.update_batch(&engine_keys, |current, _| {
            let put = || Change::Put(NewItem::new(std::sync::Arc::clone(&value), 0));
            (current.iter().map(|_| put()).collect(), ())
        })
    };
    let before = store.appended_lsn();
    match batch(65) {
        Err(kura_engine::Error::TooLarge { bytes, limit }) => {
            assert!(bytes > limit, "{bytes} > {limit}");
        }
        Err(e) => panic!("a 65 MiB batch: {e}"),
        Ok(_) => panic!("a 65 MiB batch was written"),
    }
    assert_eq!(store.appended_lsn(), before, "nothing of it was appended");
    assert_eq!(store.peek(Key::new(PLAIN, &keys[0])).ok().flatten(), None);
    let ((), written) = batch(3).unwrap_or_else(|e| panic!("a 3 MiB batch: {e}"));
    assert!(written.iter().all(Option::is_some));
    let back = store.peek(Key::new(PLAIN, &keys[2]));
    assert_eq!(
        back.ok().flatten().map(|item| item.value.len()),
        Some(1 << 20)
    );
}

/// A range that ends before it starts, or where it starts but excludes that key,
/// holds nothing, either way.
#[test]
fn an_empty_range_reads_nothing() {
    let disk = SimDisk::new();
    let store = open(&disk, options(Durability::None));
    for n in 0..10 {
        put(&store, ORDERED, &key(n));
    }
    let (five, three) = (key(5), key(3));
    for reverse in [false, true] {
        assert!(keys(
            &store,
            Bound::Included(&five),
            Bound::Included(&three),
            reverse
        )
        .is_empty());
        assert!(keys(
            &store,
            Bound::Excluded(&five),
            Bound::Included(&five),
            reverse
        )
        .is_empty());
        assert!(keys(
            &store,
            Bound::Included(&five),
            Bound::Excluded(&five),
            reverse
        )
        .is_empty());
        assert_eq!(
            keys(
                &store,
                Bound::Included(&five),
                Bound::Included(&five),
                reverse
            ),
            vec![five.clone()]
        );
    }
}

/// After a power loss the B-tree opens from its last durable commit without reading
/// every page (redb's allocator state is recorded with each durable commit), again
/// after an open that wrote nothing.
#[test]
fn a_crash_does_not_make_the_open_read_the_whole_btree() {
    let disk = SimDisk::new();
    let mut store = open(&disk, options(Durability::Fsync));
    assert!(!store.stats().ordered_repaired, "a new B-tree");
    for n in 0..3000 {
        let lsn = put(&store, ORDERED, &key(n));
        store.wait_acked(lsn).unwrap_or_else(|e| panic!("ack: {e}"));
    }
    store
        .apply_ordered(true)
        .unwrap_or_else(|e| panic!("apply: {e}"));
    for round in 0..2 {
        disk.power_loss(Tear::KeepWritten);
        drop(store);
        disk.revive();
        store = open(&disk, options(Durability::Fsync));
        assert!(!store.stats().ordered_repaired, "round {round}");
        let live: Vec<Vec<u8>> = (0..3000u32)
            .map(key)
            .filter(|k| matches!(store.peek(Key::new(ORDERED, k)), Ok(Some(_))))
            .collect();
        assert_eq!(live.len(), 3000, "round {round}: every acknowledged put");
        assert_eq!(all_keys(&store), live, "round {round}");
    }
}
