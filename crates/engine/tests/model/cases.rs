//! The engine in chosen cases, beside the model's random ones: deletes through
//! compaction and crashes, a failed fsync, damage in the log and its reserved end,
//! values read back from disk alone and in batches, checkpoints, LSNs across
//! compaction, batches cut anywhere, and flush_all across key spaces.

use super::*;

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
