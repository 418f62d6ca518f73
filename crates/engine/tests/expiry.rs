//! The maintenance pass's purge of expired versions in memory: every way a version
//! gets an exptime (a new key, a new version of a key that had none, a touch, a
//! restart's replay) leaves it to be purged once it expires, though the pass skips a
//! shard none of whose versions can have expired yet.

use std::sync::Arc;

use kura_engine::sim::SimDisk;
use kura_engine::{
    exptime_to_absolute, Access, Change, Durability, Key, ManualClock, NewItem, Options, Space,
    Store,
};

const SPACE: Space = Space(0);

fn open(disk: &SimDisk, clock: &Arc<ManualClock>) -> Store {
    let options = Options::new(Durability::Fsync, clock.clone());
    Store::open(Arc::new(disk.clone()), options).unwrap_or_else(|e| panic!("open: {e}"))
}

fn set(store: &Store, key: &[u8], ttl: i64) {
    let done = store.update(Key::new(SPACE, key), Access::NoAccess, |_, now| {
        let item = NewItem {
            exptime: exptime_to_absolute(ttl, now),
            ..NewItem::new(b"v".as_slice().into(), 0)
        };
        (Change::Put(item), ())
    });
    match done {
        Ok(((), Some(written))) => assert!(store.wait_acked(written.lsn).is_ok()),
        other => panic!("set: {other:?}"),
    }
}

fn touch(store: &Store, key: &[u8], ttl: i64) {
    let done = store.update(Key::new(SPACE, key), Access::NoAccess, |_, now| {
        let change = Change::Touch {
            exptime: Some(exptime_to_absolute(ttl, now)),
            mark_win_sent: false,
        };
        (change, ())
    });
    match done {
        Ok(((), Some(written))) => assert!(store.wait_acked(written.lsn).is_ok()),
        other => panic!("touch: {other:?}"),
    }
}

fn live(store: &Store, key: &[u8]) -> bool {
    match store.peek(Key::new(SPACE, key)) {
        Ok(item) => item.is_some(),
        Err(e) => panic!("peek: {e}"),
    }
}

#[test]
fn every_exptime_given_is_purged_once_it_comes() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let store = open(&disk, &clock);
    set(&store, b"forever", 0);
    // Nothing can have expired: nothing goes.
    assert_eq!(store.purge_expired(), 0);
    set(&store, b"new", 30);
    set(&store, b"replaced", 0);
    set(&store, b"replaced", 20);
    set(&store, b"touched", 0);
    touch(&store, b"touched", 10);
    for (after, gone) in [(5, 0), (6, 1), (10, 1), (10, 1), (10, 0)] {
        clock.advance(after);
        assert_eq!(store.purge_expired(), gone, "{after} s later");
    }
    assert!(live(&store, b"forever"));
    for key in [b"new".as_slice(), b"replaced", b"touched"] {
        assert!(!live(&store, key));
    }
}

#[test]
fn versions_a_restart_reads_back_are_purged_once_they_expire() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let store = open(&disk, &clock);
    set(&store, b"set", 10);
    set(&store, b"touched", 0);
    touch(&store, b"touched", 20);
    set(&store, b"forever", 0);
    drop(store);
    let store = open(&disk, &clock);
    assert_eq!(store.purge_expired(), 0);
    clock.advance(11);
    assert_eq!(store.purge_expired(), 1);
    clock.advance(10);
    assert_eq!(store.purge_expired(), 1);
    assert_eq!(store.purge_expired(), 0);
    assert!(live(&store, b"forever"));
}
