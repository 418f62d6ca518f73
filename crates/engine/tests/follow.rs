//! A replica's store following a primary's log (`Store::apply_copied` and its kin):
//! the copy holds what the primary holds, byte for byte in its log; it starts again
//! from the primary's oldest segment when its position was compacted away; it goes on
//! after a restart without applying anything twice; and it takes no changes of its own.
#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kura_engine::sim::SimDisk;
use kura_engine::{
    Access, Change, Cursor, Durability, Error, Key, ManualClock, NewCas, NewItem, Options, Space,
    Store,
};

const NOW: u32 = 1_700_000_000;
const TABLE_SPACE: Space = Space(3);

fn open(disk: &SimDisk, read_only: bool) -> Store {
    let mut options = Options::new(Durability::Fsync, Arc::new(ManualClock::new(NOW)));
    options.segment_size_bytes = 1024; // small: many segments
    options.fsync_interval = Duration::from_millis(1);
    options.read_only = read_only.then(|| "the primary".to_string());
    Store::open(Arc::new(disk.clone()), options).expect("open")
}

fn mc(key: &str) -> Key<'_> {
    Key::new(Space::MEMCACHED, key.as_bytes())
}

fn put(store: &Store, key: Key<'_>, value: &str, exptime: u32) {
    let mut item = NewItem::new(value.as_bytes().into(), 7);
    item.exptime = exptime;
    let (_, written) = store
        .update(key, Access::NoAccess, |_, _| (Change::Put(item), ()))
        .expect("put");
    store
        .wait_acked(written.expect("a put writes").lsn)
        .expect("acked");
}

/// Appends `suffix` to `key`'s value, as memcached's `append` does: applied twice, the
/// copy would differ.
fn append(store: &Store, key: &str, suffix: &str) {
    let (_, written) = store
        .update(mc(key), Access::NoAccess, |live, _| {
            let mut value = live.map(|i| i.value.to_vec()).unwrap_or_default();
            value.extend_from_slice(suffix.as_bytes());
            (Change::Put(NewItem::new(value.into(), 0)), ())
        })
        .expect("append");
    store
        .wait_acked(written.expect("writes").lsn)
        .expect("acked");
}

fn delete(store: &Store, key: &str) {
    let (_, written) = store
        .update(mc(key), Access::NoAccess, |_, _| (Change::Delete, ()))
        .expect("delete");
    if let Some(w) = written {
        store.wait_acked(w.lsn).expect("acked");
    }
}

/// Everything the store holds: every key of both spaces with its value and metadata.
fn contents(store: &Store) -> BTreeMap<(u8, Vec<u8>), String> {
    let mut all = BTreeMap::new();
    for space in [Space::MEMCACHED, TABLE_SPACE] {
        store
            .scan_space(space, |key, item| {
                all.insert(
                    (space.0, key.to_vec()),
                    format!(
                        "{} flags={} exptime={} cas={}",
                        String::from_utf8_lossy(&item.value),
                        item.client_flags,
                        item.exptime,
                        item.cas
                    ),
                );
            })
            .expect("scan");
    }
    all
}

/// Ships what the primary has synced past `cursor` to the replica, as the server's
/// replication does: runs of records, a new segment where the primary started one.
fn ship(primary: &Store, cursor: &mut Cursor, replica: &Store) {
    loop {
        let mut runs: Vec<(u64, u64, Vec<u8>)> = Vec::new();
        let read = primary
            .read_log(
                cursor,
                primary.synced_lsn(),
                4096,
                |segment, bytes, lsn| match runs.last_mut() {
                    Some((s, _, run)) if *s == segment => run.extend_from_slice(bytes),
                    _ => runs.push((segment, lsn - bytes.len() as u64, bytes.to_vec())),
                },
            )
            .expect("read");
        for (segment, start, run) in runs {
            if segment != replica.active_segment() {
                assert_eq!(primary.segment_start(segment), Some(start));
                replica.start_segment(segment, start).expect("roll");
            }
            let end = replica.apply_copied(&run, start).expect("apply");
            assert_eq!(end, start + run.len() as u64);
        }
        if read == 0 {
            break;
        }
    }
    assert!(replica.wait_synced(replica.appended_lsn(), Duration::from_secs(10)));
}

/// A full copy: the replica starts again at the primary's oldest segment.
fn full_copy(primary: &Store, replica: &Store) -> Cursor {
    let mut cursor = primary
        .follow_log_from_oldest()
        .expect("the oldest is held");
    let oldest = primary.oldest_segment();
    let start = primary.segment_start(oldest).expect("its start is known");
    replica
        .restart_log(oldest, start, primary.history(), primary.appended_lsn())
        .expect("restart");
    ship(primary, &mut cursor, replica);
    cursor
}

/// A mix of everything the log holds: puts with flags and expiry, appends, deletes,
/// an explicit CAS, a table batch, an immediate and a delayed flush_all.
fn write_mix(store: &Store, round: u32) {
    for i in 0..20 {
        put(store, mc(&format!("k{i}")), &format!("v{round}-{i}"), 0);
    }
    put(store, mc("expiring"), "soon", NOW + 100);
    append(store, "counter", &format!("{round},"));
    delete(store, "k3");
    let mut item = NewItem::new(b"chosen".as_slice().into(), 1);
    item.cas = NewCas::Explicit(900_000 + u64::from(round));
    let (_, w) = store
        .update(mc("explicit"), Access::NoAccess, |_, _| {
            (Change::Put(item), ())
        })
        .expect("explicit");
    store.wait_acked(w.expect("writes").lsn).expect("acked");
    let row = format!("row{round}");
    let keys = [
        Key::new(TABLE_SPACE, row.as_bytes()),
        Key::new(TABLE_SPACE, b"index-entry"),
    ];
    let (_, written) = store
        .update_batch(&keys, |_, _| {
            let put = |v: &str| Change::Put(NewItem::new(v.as_bytes().into(), 0));
            (vec![put("fields"), put(&row)], ())
        })
        .expect("batch");
    let lsn = written.iter().flatten().map(|w| w.lsn).max().expect("lsn");
    store.wait_acked(lsn).expect("acked");
}

/// Compacts each segment the primary holds now, once.
fn compact_all(primary: &Store) {
    let segments = primary.active_segment() - primary.oldest_segment();
    for _ in 0..segments {
        primary.compact_oldest().expect("compact");
    }
}

#[test]
fn a_replica_holds_what_its_primary_holds_and_the_same_log() {
    let (pdisk, rdisk) = (SimDisk::new(), SimDisk::new());
    let primary = open(&pdisk, false);
    let replica = open(&rdisk, true);
    let mut cursor = full_copy(&primary, &replica);
    for round in 0..6 {
        write_mix(&primary, round);
        if round == 2 {
            let lsn = primary.flush_all(0).expect("flush");
            primary.wait_acked(lsn).expect("acked");
        }
        if round == 4 {
            let lsn = primary.flush_all(60).expect("delayed flush");
            primary.wait_acked(lsn).expect("acked");
        }
        ship(&primary, &mut cursor, &replica);
        assert_eq!(contents(&replica), contents(&primary), "round {round}");
    }
    assert_eq!(replica.appended_lsn(), primary.appended_lsn());
    assert_eq!(replica.history(), primary.history());
    // The same segments, the same bytes.
    let segments = |disk: &SimDisk| {
        let mut names: Vec<String> = kura_engine::disk::Disk::list(disk)
            .expect("list")
            .into_iter()
            .filter(|n| n.ends_with(".log"))
            .collect();
        names.sort();
        names
    };
    assert_eq!(segments(&rdisk), segments(&pdisk));
    let names = segments(&pdisk);
    assert!(names.len() > 3, "the test spans segments: {names:?}");
    for name in &names[..names.len() - 1] {
        let read = |d: &SimDisk| kura_engine::disk::Disk::read(d, name).expect("read");
        assert_eq!(read(&rdisk), read(&pdisk), "{name}");
    }
}

#[test]
fn a_replica_refuses_changes_and_writes_nothing_of_its_own() {
    let rdisk = SimDisk::new();
    let replica = open(&rdisk, true);
    let before = replica.appended_lsn();
    let refused = replica.update(mc("k"), Access::NoAccess, |_, _| {
        (Change::Put(NewItem::new(b"v".as_slice().into(), 0)), ())
    });
    assert!(
        matches!(refused, Err(Error::ReadOnly { .. })),
        "{refused:?}"
    );
    let refused = replica.update_batch(&[mc("a"), mc("b")], |_, _| {
        (vec![Change::Delete, Change::Delete], ())
    });
    assert!(refused.is_ok(), "deleting what is not there writes nothing");
    assert!(matches!(replica.flush_all(0), Err(Error::ReadOnly { .. })));
    assert_eq!(
        replica
            .compact_oldest()
            .expect("compact")
            .map(|c| c.segment),
        None
    );
    assert_eq!(replica.appended_lsn(), before);
    // Reads go on.
    assert!(replica.get(mc("k")).expect("get").is_none());
}

/// A cluster's primary takes changes only until its lease may have ended
/// (`Store::set_writable_until`), and again once the lease is renewed.
#[test]
fn a_primary_takes_no_change_past_its_lease() {
    let disk = SimDisk::new();
    let store = open(&disk, false);
    let now = std::time::Instant::now();
    store.set_writable_until(Some(now + Duration::from_secs(600)));
    put(&store, mc("a"), "1", 0);
    store.set_writable_until(Some(now));
    let before = store.appended_lsn();
    let refused = store.update(mc("b"), Access::NoAccess, |_, _| {
        (Change::Put(NewItem::new(b"2".as_slice().into(), 0)), ())
    });
    assert!(matches!(refused, Err(Error::LeaseEnded)), "{refused:?}");
    let refused = store.update_batch(&[mc("a"), mc("c")], |_, _| {
        (vec![Change::Delete, Change::Delete], ())
    });
    assert!(matches!(refused, Err(Error::LeaseEnded)), "{refused:?}");
    assert_eq!(store.appended_lsn(), before, "nothing written");
    assert!(store.get(mc("a")).expect("get").is_some(), "reads go on");
    store.set_writable_until(None);
    put(&store, mc("b"), "2", 0);
}

#[test]
fn a_replica_past_compaction_gets_a_full_copy_and_a_restarted_one_goes_on() {
    let (pdisk, rdisk) = (SimDisk::new(), SimDisk::new());
    let primary = open(&pdisk, false);
    let mut replica = open(&rdisk, true);
    let mut cursor = full_copy(&primary, &replica);
    write_mix(&primary, 0);
    ship(&primary, &mut cursor, &replica);
    let position = replica.appended_lsn();
    drop(cursor);
    // The replica is away while the primary writes and compacts past its position.
    for round in 1..8 {
        write_mix(&primary, round);
        delete(&primary, &format!("k{round}"));
    }
    compact_all(&primary);
    assert!(
        primary.follow_log(position).is_none(),
        "compaction removed the replica's position"
    );
    let mut cursor = full_copy(&primary, &replica);
    assert_eq!(contents(&replica), contents(&primary));
    // Deleted last by every round, and by the last round: gone on both.
    for key in ["k3", "k7"] {
        assert!(primary.get(mc(key)).expect("get").is_none());
        assert!(
            replica.get(mc(key)).expect("get").is_none(),
            "{key} stays gone"
        );
    }
    // The primary's removals reach the replica once it has the copies.
    write_mix(&primary, 9);
    compact_all(&primary);
    assert!(
        primary.follow_log(replica.appended_lsn()).is_some(),
        "the cursor holds the replica's position"
    );
    ship(&primary, &mut cursor, &replica);
    let pinned = primary.oldest_segment();
    drop(cursor);
    let mut cursor = primary.follow_log(replica.appended_lsn()).expect("held");
    compact_all(&primary);
    assert!(primary.oldest_segment() > pinned);
    ship(&primary, &mut cursor, &replica);
    replica.trim_log(primary.oldest_segment()).expect("trim");
    assert_eq!(replica.oldest_segment(), primary.oldest_segment());
    assert_eq!(contents(&replica), contents(&primary));
    // Restarted (a crash: what was synced survives), the replica goes on from its
    // own end, and nothing is applied twice.
    drop(cursor);
    rdisk.power_loss(kura_engine::sim::Tear::DropUnsynced);
    drop(replica);
    rdisk.revive();
    replica = open(&rdisk, true);
    for round in 10..13 {
        write_mix(&primary, round);
    }
    let mut cursor = primary.follow_log(replica.appended_lsn()).expect("held");
    ship(&primary, &mut cursor, &replica);
    assert_eq!(contents(&replica), contents(&primary));
    let counter = replica.get(mc("counter")).expect("get").expect("there");
    let expected: String = (0..8).chain(9..13).map(|r| format!("{r},")).collect();
    assert_eq!(String::from_utf8_lossy(&counter.value), expected);
}

#[test]
fn an_old_primary_rewinds_to_where_the_new_one_began_and_follows_it() {
    let (pdisk, rdisk) = (SimDisk::new(), SimDisk::new());
    let mut old = open(&pdisk, false);
    let new = open(&rdisk, true);
    let mut cursor = full_copy(&old, &new);
    for round in 0..3 {
        write_mix(&old, round);
    }
    compact_all(&old);
    ship(&old, &mut cursor, &new);
    drop(cursor);
    // The replica is promoted; the old primary, cut off, goes on writing.
    new.set_read_only(None);
    new.begin_epoch().expect("epoch");
    for round in 3..6 {
        write_mix(&old, round);
        delete(&old, "k1");
    }
    for round in 10..12 {
        write_mix(&new, round);
    }
    // It comes back as a replica of the new primary and cuts what that never had.
    old.set_read_only(Some("the new primary".to_string()));
    let ended = old.appended_lsn();
    let epoch = old.history().epoch_at(ended);
    let cut = new
        .history()
        .shared_until(epoch.number, epoch.tag, ended)
        .expect("one history");
    assert!(cut < ended, "the old primary wrote past the fork");
    assert!(cut >= old.rewind_floor(), "no removal since the fork");
    // Not while a cursor follows the log (a stream to a replica of its own that has
    // not ended yet): refused before a file is touched.
    let before = contents(&old);
    let follower = old.follow_log(old.appended_lsn()).expect("held");
    let refused = old.rewind_log(cut, new.history(), |bytes, start| {
        old.apply_copied(bytes, start).map(drop)
    });
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(contents(&old), before);
    assert_eq!(old.appended_lsn(), ended);
    drop(follower);
    old.rewind_log(cut, new.history(), |bytes, start| {
        old.apply_copied(bytes, start).map(drop)
    })
    .expect("rewind");
    assert_eq!(old.appended_lsn(), cut);
    let mut cursor = new.follow_log(cut).expect("held");
    ship(&new, &mut cursor, &old);
    assert_eq!(contents(&old), contents(&new));
    let counter = old.get(mc("counter")).expect("get").expect("there");
    assert_eq!(String::from_utf8_lossy(&counter.value), "0,1,2,10,11,");
    assert!(
        old.get(mc("k1")).expect("get").is_some(),
        "its delete is cut"
    );
    // Restarted after a power loss, it holds the same, and no set-aside file.
    drop(cursor);
    pdisk.power_loss(kura_engine::sim::Tear::DropUnsynced);
    drop(old);
    pdisk.revive();
    old = open(&pdisk, true);
    assert_eq!(contents(&old), contents(&new));
    assert_eq!(old.history(), new.history());
    let names = kura_engine::disk::Disk::list(&pdisk).expect("list");
    assert!(!names.iter().any(|n| n.starts_with("rewind.")), "{names:?}");
}

#[test]
fn a_log_compacted_past_the_fork_is_not_rewound() {
    let (pdisk, rdisk) = (SimDisk::new(), SimDisk::new());
    let old = open(&pdisk, false);
    let new = open(&rdisk, true);
    let mut cursor = full_copy(&old, &new);
    write_mix(&old, 0);
    ship(&old, &mut cursor, &new);
    drop(cursor);
    new.set_read_only(None);
    new.begin_epoch().expect("epoch");
    for round in 1..4 {
        write_mix(&old, round);
    }
    // Compaction removes segments whose live records it copied past the fork.
    compact_all(&old);
    old.set_read_only(Some("the new primary".to_string()));
    let first = old.history().epochs[0];
    let cut = new
        .history()
        .shared_until(first.number, first.tag, old.appended_lsn())
        .expect("one history");
    assert!(old.rewind_floor() > cut);
    let refused = old.rewind_log(cut, new.history(), |_, _| Ok(()));
    assert!(refused.is_err(), "a rewind would lose live records");
    // Refused before anything moved: the log is whole.
    let before = contents(&old);
    drop(old);
    let old = open(&pdisk, true);
    assert_eq!(contents(&old), before);
}
