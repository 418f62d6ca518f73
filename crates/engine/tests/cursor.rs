//! Following the log with a cursor (`Store::follow_log`, `Store::read_log`): every
//! record after a position, in order, across segments, a batch never split; positions
//! that outlast a restart; and compaction leaving the segments a cursor still needs.
#![allow(clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use kura_engine::record::{self, Decoded, Record};
use kura_engine::sim::SimDisk;
use kura_engine::{Access, Change, Durability, Key, ManualClock, NewItem, Options, Space, Store};

fn open(disk: &SimDisk) -> Store {
    let mut options = Options::new(Durability::Fsync, Arc::new(ManualClock::new(1_700_000_000)));
    options.segment_size_bytes = 512; // small: a few records a segment
    options.fsync_interval = Duration::from_millis(1);
    Store::open(Arc::new(disk.clone()), options).expect("open")
}

fn put(store: &Store, key: &str, value: &str) -> u64 {
    let (_, written) = store
        .update(
            Key::new(Space::MEMCACHED, key.as_bytes()),
            Access::NoAccess,
            |_, _| (Change::Put(NewItem::new(value.as_bytes().into(), 0)), ()),
        )
        .expect("put");
    let lsn = written.expect("a put writes").lsn;
    store.wait_acked(lsn).expect("acked");
    lsn
}

/// A record as the test compares it: a put's key and value, or its kind.
fn describe(bytes: &[u8]) -> String {
    match record::decode(bytes) {
        Decoded::Record(Record::Put { key, value, .. }, len) => {
            assert_eq!(len, bytes.len());
            format!(
                "{}={}",
                String::from_utf8_lossy(key.bytes),
                String::from_utf8_lossy(value)
            )
        }
        Decoded::Record(Record::Batch { count, .. }, _) => format!("batch of {count}"),
        Decoded::Record(other, _) => format!("{other:?}"),
        bad => panic!("the cursor gave a damaged record: {bad:?}"),
    }
}

/// Everything after `lsn` up to what is synced, with each record's end LSN.
fn read_all(store: &Store, lsn: u64, max_bytes: u64) -> Vec<(String, u64)> {
    let mut cursor = store.follow_log(lsn).expect("the log holds the position");
    let mut seen = Vec::new();
    loop {
        let read = store
            .read_log(
                &mut cursor,
                store.synced_lsn(),
                max_bytes,
                |_, bytes, lsn| {
                    seen.push((describe(bytes), lsn));
                },
            )
            .expect("read");
        if read == 0 {
            break;
        }
    }
    assert_eq!(cursor.lsn(), store.synced_lsn());
    seen
}

#[test]
fn a_cursor_reads_every_record_after_its_position() {
    let disk = SimDisk::new();
    let store = open(&disk);
    // What each acknowledged LSN ends: a put, or a batch of two.
    let mut acked: Vec<(u64, Vec<String>)> = Vec::new();
    for n in 0..40 {
        let (key, value) = (format!("k{}", n % 7), format!("v{n}"));
        acked.push((put(&store, &key, &value), vec![format!("{key}={value}")]));
        if n % 10 == 9 {
            let keys = [format!("a{n}"), format!("b{n}")];
            let (_, written) = store
                .update_batch(
                    &[
                        Key::new(Space(2), keys[0].as_bytes()),
                        Key::new(Space(2), keys[1].as_bytes()),
                    ],
                    |_, _| {
                        (
                            vec![
                                Change::Put(NewItem::new(b"x".as_slice().into(), 0)),
                                Change::Put(NewItem::new(b"y".as_slice().into(), 0)),
                            ],
                            (),
                        )
                    },
                )
                .expect("batch");
            let lsn = written[0].expect("written").lsn;
            store.wait_acked(lsn).expect("acked");
            acked.push((
                lsn,
                vec![
                    "batch of 2".to_string(),
                    format!("{}=x", keys[0]),
                    format!("{}=y", keys[1]),
                ],
            ));
        }
    }
    assert!(store.stats().log_segments >= 4, "{:?}", store.stats());
    // From the start of the log, and from every acknowledged position, a record (or
    // a batch) at a time and all at once: exactly what was written after it.
    let mut from = 0;
    for i in 0..=acked.len() {
        let want: Vec<String> = acked[i..].iter().flat_map(|(_, r)| r.clone()).collect();
        for max_bytes in [1, u64::MAX] {
            let seen = read_all(&store, from, max_bytes);
            let names: Vec<String> = seen.iter().map(|(r, _)| r.clone()).collect();
            assert_eq!(names, want, "from LSN {from}");
            // Every acknowledged LSN after the position is where a record ends.
            for (lsn, _) in &acked[i..] {
                assert!(seen.iter().any(|(_, end)| end == lsn), "LSN {lsn}");
            }
        }
        if let Some((lsn, _)) = acked.get(i) {
            from = *lsn;
        }
    }
    // One step reads a batch whole.
    let (before_batch, _) = acked[9];
    let mut cursor = store.follow_log(before_batch).expect("held");
    store
        .read_log(&mut cursor, store.synced_lsn(), 1, |_, _, _| {})
        .expect("read");
    assert_eq!(cursor.lsn(), acked[10].0);
    // Not yet written: no cursor.
    assert!(store.follow_log(store.appended_lsn() + 1).is_none());
}

#[test]
fn compaction_leaves_what_a_cursor_needs_and_positions_outlast_a_restart() {
    let disk = SimDisk::new();
    let store = open(&disk);
    for round in 0..60 {
        put(
            &store,
            &format!("k{}", round % 3),
            &format!("round {round}"),
        );
    }
    let segments = store.stats().log_segments;
    assert!(segments > 4);
    // A cursor at the log's start holds every segment: nothing is compacted.
    let mut cursor = store.follow_log(0).expect("the start is held");
    assert_eq!(store.compact_oldest().expect("compact"), None);
    assert_eq!(store.stats().log_segments, segments);
    // Once it has read to the end it holds only the segment it stands in.
    while store
        .read_log(&mut cursor, store.synced_lsn(), 4096, |_, _, _| {})
        .expect("read")
        > 0
    {}
    let position = cursor.lsn();
    let mut compacted = 0;
    while store.stats().log_segments > 2 {
        assert!(store.compact_oldest().expect("compact").is_some());
        compacted += 1;
    }
    assert!(compacted > 0);
    assert!(store.follow_log(0).is_none(), "compacted away");
    drop(cursor);
    // What compaction copied forward comes after the position, then a new write; the
    // position is the same after a restart that replays the log, and after one that
    // starts from a checkpoint taken later (the segments it covers are not read).
    let copies = read_all(&store, position, u64::MAX);
    store.shutdown();
    drop(store);
    let store = open(&disk);
    assert_eq!(store.stats().checkpoint_restored_keys, 0);
    assert_eq!(read_all(&store, position, u64::MAX), copies);
    for round in 0..12 {
        put(&store, &format!("k{}", round % 3), &format!("more {round}"));
    }
    assert!(store.checkpoint().expect("checkpoint") > 0);
    let expected = read_all(&store, position, u64::MAX);
    store.shutdown();
    drop(store);
    let store = open(&disk);
    assert!(store.stats().checkpoint_restored_keys > 0);
    assert_eq!(read_all(&store, position, u64::MAX), expected);
    let lsn = put(&store, "new", "after the restart");
    let seen = read_all(&store, position, u64::MAX);
    assert_eq!(
        seen.last(),
        Some(&("new=after the restart".to_string(), lsn))
    );
}
