//! Log recovery under damage: the input describes records (puts and deletes of a few
//! keys) and then how to damage the segment holding them (cut it short, flip a byte).
//! Recovery must never panic, must keep exactly the records that end before the first
//! damaged byte, and must leave a log that a second open finds clean and can append to.

use std::collections::HashMap;
use std::sync::Arc;

use kura_engine::disk::Disk;
use kura_engine::record::{self, Record};
use kura_engine::sim::SimDisk;
use kura_engine::{Access, Change, Durability, ManualClock, NewItem, Options, Store};

const SEGMENT: &str = "0000000000000001.log";

fn open(disk: &SimDisk) -> Option<Store> {
    let options = Options::new(Durability::Fsync, Arc::new(ManualClock::new(1_700_000_000)));
    Store::open(Arc::new(disk.clone()), options).ok()
}

fn key(k: u8) -> Vec<u8> {
    format!("key{}", k % 8).into_bytes()
}

pub fn check_recovery(data: &[u8]) {
    let Some((&op_count, rest)) = data.split_first() else { return };
    let mut input = rest.iter().copied();
    // Build the log: a header, then records, remembering where each one ends.
    let mut log = record::segment_header(1).to_vec();
    let mut ends: Vec<(usize, u8, Option<Vec<u8>>)> = Vec::new();
    let mut cas = 0u64;
    for _ in 0..(op_count % 32) {
        let (Some(kind), Some(k), Some(len)) = (input.next(), input.next(), input.next()) else {
            break;
        };
        let value: Vec<u8> = (&mut input).take(usize::from(len % 64)).collect();
        let key = key(k);
        if kind % 4 == 0 {
            record::encode(&Record::Delete { key: &key }, &mut log);
            ends.push((log.len(), k % 8, None));
        } else {
            cas += 1;
            let put = Record::Put {
                key: &key,
                value: &value,
                client_flags: u32::from(kind),
                exptime: 0,
                time: 1_700_000_000,
                cas,
                item_flags: 0,
            };
            record::encode(&put, &mut log);
            ends.push((log.len(), k % 8, Some(value)));
        }
    }
    // Damage it: cut at some point past the header, and maybe flip one byte.
    let header = record::SEGMENT_HEADER_BYTES;
    let body = log.len() - header;
    let mut intact = log.len();
    if let (Some(a), Some(b)) = (input.next(), input.next()) {
        let cut = header + usize::from(u16::from_le_bytes([a, b])) % (body + 1);
        log.truncate(cut);
        intact = cut;
    }
    if let (Some(a), Some(b), Some(x)) = (input.next(), input.next(), input.next()) {
        if x != 0 && log.len() > header {
            let at = header + usize::from(u16::from_le_bytes([a, b])) % (log.len() - header);
            log[at] ^= x;
            intact = intact.min(at);
        }
    }
    let disk = SimDisk::new();
    let written = disk.create(SEGMENT).and_then(|mut f| {
        f.append(&log)?;
        f.sync()?;
        disk.sync_dir()
    });
    assert!(written.is_ok(), "the simulated disk refused a write");

    // The records that end before the first damaged byte are the whole truth.
    let mut expected: HashMap<u8, Option<Vec<u8>>> = HashMap::new();
    for (end, k, value) in &ends {
        if *end <= intact {
            expected.insert(*k, value.clone());
        }
    }
    let Some(store) = open(&disk) else {
        panic!("recovery refused a log damaged only after its header");
    };
    for k in 0..8u8 {
        let got = match store.peek(&key(k)) {
            Ok(item) => item.map(|item| item.value.to_vec()),
            Err(e) => panic!("key{k} unreadable after recovery: {e}"),
        };
        let want = expected.get(&k).cloned().flatten();
        assert_eq!(got, want, "key{k} after recovery");
    }
    // The cut log takes new records, and a second open finds nothing to cut.
    let appended = store.update(b"after", Access::NoAccess, |_, _| {
        (Change::Put(NewItem::new(b"x".to_vec().into(), 0)), ())
    });
    let Ok(((), Some(written))) = appended else { panic!("append after recovery failed") };
    assert!(store.wait_acked(written.lsn).is_ok());
    let items = store.stats().curr_items;
    store.shutdown();
    drop(store);
    let Some(again) = open(&disk) else { panic!("second open failed") };
    assert_eq!(again.stats().recovery_cut_bytes, 0, "the first recovery left damage behind");
    assert_eq!(again.stats().curr_items, items);
    assert!(
        matches!(again.peek(b"after"), Ok(Some(_))),
        "the record appended after recovery is gone"
    );
}
