//! Log recovery under damage: the input describes records (puts and deletes of a few
//! keys in two key spaces, alone or in atomic batches) and then how to damage the
//! segment holding them (cut it short, flip a byte). Recovery must never panic, must
//! keep exactly the changes (a batch is one) that end before the first damaged byte,
//! and must leave a log that a second open finds clean and can append to.

use std::collections::HashMap;
use std::sync::Arc;

use kura_engine::disk::Disk;
use kura_engine::record::{self, Record};
use kura_engine::sim::SimDisk;
use kura_engine::{Access, Change, Durability, Key, ManualClock, NewItem, Options, Space, Store};

const SEGMENT: &str = "0000000000000001.log";

fn open(disk: &SimDisk) -> Option<Store> {
    let mut options =
        Options::new(Durability::Fsync, Arc::new(ManualClock::new(1_700_000_000)));
    // Far more than any input's log; small, so that reading the reserved zeros at the
    // end of the segment at each open costs little and the fuzzer runs many inputs.
    options.segment_size_bytes = 64 << 10;
    Store::open(Arc::new(disk.clone()), options).ok()
}

/// Sixteen keys: eight of memcached's, and the same bytes in a table space.
const KEYS: u8 = 16;

fn key_bytes(k: u8) -> Vec<u8> {
    format!("key{}", k % 8).into_bytes()
}

fn space(k: u8) -> Space {
    if k % KEYS < 8 {
        Space::MEMCACHED
    } else {
        Space(2)
    }
}

pub fn check_recovery(data: &[u8]) {
    let Some((&op_count, rest)) = data.split_first() else { return };
    let mut input = rest.iter().copied();
    // Build the log: a header, then records, remembering where each one ends.
    let mut log = record::segment_header(1, 0).to_vec();
    // Each change (a record, or a batch of them) with where it ends.
    let mut ends: Vec<(usize, Vec<(u8, Option<Vec<u8>>)>)> = Vec::new();
    let mut cas = 0u64;
    for _ in 0..(op_count % 32) {
        let Some(kind) = input.next() else { break };
        // kind % 4 == 3: a batch of 2 to 4 records; otherwise one record.
        let records = if kind % 4 == 3 { 2 + usize::from(kind / 4 % 3) } else { 1 };
        let mut changes: Vec<(u8, Option<Vec<u8>>)> = Vec::new();
        for _ in 0..records {
            let (Some(what), Some(k), Some(len)) = (input.next(), input.next(), input.next())
            else {
                break;
            };
            let k = k % KEYS;
            if changes.iter().any(|(seen, _)| *seen == k) {
                continue;
            }
            let value: Vec<u8> = (&mut input).take(usize::from(len % 64)).collect();
            changes.push((k, (what % 3 != 0).then_some(value)));
        }
        if changes.is_empty() {
            break;
        }
        let mut encoded = Vec::new();
        for (k, value) in &changes {
            let bytes = key_bytes(*k);
            let key = Key::new(space(*k), &bytes);
            match value {
                None => record::encode(&Record::Delete { key }, &mut encoded),
                Some(value) => {
                    cas += 1;
                    let put = Record::Put {
                        key,
                        value,
                        client_flags: u32::from(kind),
                        exptime: 0,
                        time: 1_700_000_000,
                        cas,
                        item_flags: 0,
                    };
                    record::encode(&put, &mut encoded);
                }
            }
        }
        if changes.len() > 1 {
            let batch = Record::Batch {
                count: changes.len() as u32,
                bytes: encoded.len() as u32,
            };
            record::encode(&batch, &mut log);
        }
        log.extend_from_slice(&encoded);
        ends.push((log.len(), changes));
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
    for (end, changes) in &ends {
        if *end <= intact {
            for (k, value) in changes {
                expected.insert(*k, value.clone());
            }
        }
    }
    let Some(store) = open(&disk) else {
        panic!("recovery refused a log damaged only after its header");
    };
    for k in 0..KEYS {
        let bytes = key_bytes(k);
        let got = match store.peek(Key::new(space(k), &bytes)) {
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
    let items = (store.stats().curr_items, store.stats().table_items);
    store.shutdown();
    drop(store);
    let Some(again) = open(&disk) else { panic!("second open failed") };
    assert_eq!(again.stats().recovery_cut_bytes, 0, "the first recovery left damage behind");
    assert_eq!((again.stats().curr_items, again.stats().table_items), items);
    assert!(
        matches!(again.peek(b"after"), Ok(Some(_))),
        "the record appended after recovery is gone"
    );
}
