//! The log's history (`Store::history`): its id outlasts restarts, a new epoch begins
//! where the log is on disk and outlasts a power loss, and a history taken from
//! elsewhere (a replica's primary's) replaces the store's own.
#![allow(clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use kura_engine::sim::{SimDisk, Tear};
use kura_engine::{
    Access, Change, Durability, Epoch, History, Key, ManualClock, NewItem, Options, Space, Store,
};

fn open(disk: &SimDisk, durability: Durability) -> Store {
    let mut options = Options::new(durability, Arc::new(ManualClock::new(1_700_000_000)));
    options.segment_size_bytes = 512;
    options.fsync_interval = Duration::from_millis(1);
    Store::open(Arc::new(disk.clone()), options).expect("open")
}

fn put(store: &Store, key: &str) {
    store
        .update(
            Key::new(Space::MEMCACHED, key.as_bytes()),
            Access::NoAccess,
            |_, _| (Change::Put(NewItem::new(b"v".as_slice().into(), 0)), ()),
        )
        .expect("put");
}

#[test]
fn epochs_begin_where_the_log_is_on_disk_and_outlast_a_power_loss() {
    let disk = SimDisk::new();
    let store = open(&disk, Durability::Interval);
    let first = store.history();
    assert_eq!(
        first.epochs,
        vec![Epoch {
            number: 1,
            start_lsn: 0,
            tag: first.epochs[0].tag,
        }]
    );
    assert_ne!(
        first.id,
        open(&SimDisk::new(), Durability::Fsync).history().id
    );
    for n in 0..20 {
        put(&store, &format!("k{n}"));
    }
    // Interval mode: nothing needs to be on disk yet; the epoch waits until it is.
    let epoch = store.begin_epoch().expect("epoch");
    assert_eq!(epoch.number, 2);
    assert_eq!(epoch.start_lsn, store.appended_lsn());
    disk.power_loss(Tear::DropUnsynced);
    drop(store);
    disk.revive();
    let store = open(&disk, Durability::Interval);
    let history = store.history();
    assert_eq!(history.id, first.id);
    assert_eq!(history.current(), epoch);
    // The log was not cut below where the epoch begins.
    assert_eq!(store.appended_lsn(), epoch.start_lsn);
    // A primary's history replaces this one's.
    let mut other = History::new();
    other.begin(7);
    store.set_history(other.clone()).expect("set");
    store.shutdown();
    drop(store);
    assert_eq!(open(&disk, Durability::Fsync).history(), other);
}
