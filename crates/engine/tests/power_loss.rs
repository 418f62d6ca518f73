//! Many writers, group commit, and a power cut at a random moment, round after round:
//! every write whose acknowledgement a writer received is there after recovery, with its
//! value and flags, and CAS values never go backwards.
//!
//! The seed is printed; set `KURA_SEED` to replay a failure.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kura_engine::sim::{SimDisk, Tear};
use kura_engine::{Access, Change, Durability, ManualClock, NewItem, Options, Store};
use rand::{Rng, SeedableRng};

const WRITERS: usize = 8;
const ROUNDS: usize = 12;
const KEYS_PER_WRITER: u32 = 40;

/// What a writer knows: the last acknowledged value of each of its keys, and the one
/// write it may have in flight when the power goes.
#[derive(Default, Clone)]
struct Ledger {
    acked: HashMap<Vec<u8>, (Vec<u8>, u32)>,
    in_flight: Option<(Vec<u8>, Vec<u8>, u32)>,
}

fn open(disk: &SimDisk) -> Store {
    let mut options = Options::new(Durability::Fsync, Arc::new(ManualClock::new(1_700_000_000)));
    options.segment_size_bytes = 16 << 10;
    match Store::open(Arc::new(disk.clone()), options) {
        Ok(store) => store,
        Err(e) => panic!("recovery failed: {e}"),
    }
}

#[test]
fn acknowledged_writes_survive_power_loss_under_concurrent_load() {
    let seed: u64 = std::env::var("KURA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    println!("power_loss seed: {seed} (replay with KURA_SEED={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let disk = SimDisk::new();
    let ledgers: Vec<Arc<Mutex<Ledger>>> = (0..WRITERS)
        .map(|_| Arc::new(Mutex::new(Ledger::default())))
        .collect();
    let mut max_cas_seen = 0u64;
    for round in 0..ROUNDS {
        let store = Arc::new(open(&disk));
        // Everything acknowledged so far is here; an in-flight write may or may not be.
        for ledger in &ledgers {
            let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
            let in_flight = ledger.in_flight.take();
            for (key, (value, flags)) in ledger.acked.clone() {
                let item = store.peek(&key).unwrap_or_else(|e| panic!("peek: {e}"));
                let got = item.as_ref().map(|i| (i.value.to_vec(), i.client_flags));
                let landed = in_flight
                    .as_ref()
                    .filter(|(k, ..)| *k == key)
                    .map(|(_, v, f)| (v.clone(), *f));
                if got.is_some() && got == landed {
                    // The in-flight write reached the disk before the cut: now it counts.
                    ledger
                        .acked
                        .insert(key.clone(), landed.clone().unwrap_or_default());
                } else {
                    assert_eq!(
                        got,
                        Some((value.clone(), flags)),
                        "round {round}: acknowledged write to {:?} lost (seed {seed})",
                        String::from_utf8_lossy(&key)
                    );
                }
                if let Some(item) = item {
                    max_cas_seen = max_cas_seen.max(item.cas);
                }
            }
        }
        assert!(
            store.stats().next_cas > max_cas_seen,
            "CAS would be reused (seed {seed})"
        );
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::new();
        for (w, ledger) in ledgers.iter().enumerate() {
            let store = Arc::clone(&store);
            let ledger = Arc::clone(ledger);
            let stop = Arc::clone(&stop);
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ ((round * 131 + w) as u64));
            handles.push(std::thread::spawn(move || {
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("w{w}-k{}", rng.gen_range(0..KEYS_PER_WRITER)).into_bytes();
                    let value = format!("r{round}-i{i}-{}", rng.gen::<u32>()).into_bytes();
                    let flags = rng.gen::<u32>();
                    ledger.lock().unwrap_or_else(|e| e.into_inner()).in_flight =
                        Some((key.clone(), value.clone(), flags));
                    let new = NewItem::new(value.clone().into(), flags);
                    let result =
                        store.update(&key, Access::NoAccess, |_, _| (Change::Put(new), ()));
                    let Ok(((), Some(written))) = result else {
                        break;
                    };
                    if store.wait_acked(written.lsn).is_err() {
                        break;
                    }
                    let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
                    ledger.acked.insert(key, (value, flags));
                    ledger.in_flight = None;
                    i += 1;
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(5..40)));
        disk.power_loss(Tear::Torn(rng.gen()));
        stop.store(true, Ordering::Relaxed);
        for handle in handles {
            // A writer stops at the first refused write; a panic is a failure.
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
        drop(store);
        disk.revive();
    }
    let acked: usize = ledgers
        .iter()
        .map(|l| l.lock().map(|l| l.acked.len()).unwrap_or(0))
        .sum();
    assert!(
        acked > WRITERS,
        "the writers barely wrote anything ({acked} keys): the test proves nothing"
    );
}

/// Interval durability syncs within the interval of a write, also when the log had
/// been idle: a power loss after that loses nothing. Interval-mode writes do not wake
/// the flusher, so a flusher that slept until woken would leave such a write unsynced
/// until a segment rolled or the server stopped.
#[test]
fn interval_mode_syncs_a_write_within_the_interval() {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let interval = Duration::from_millis(50);
    let open = |disk: &SimDisk| {
        let mut options = Options::new(Durability::Interval, clock.clone());
        options.fsync_interval = interval;
        // The test runs the flusher's turns at the moments it names.
        options.stepped_flusher = true;
        Store::open(Arc::new(disk.clone()), options).unwrap_or_else(|e| panic!("open failed: {e}"))
    };
    let store = open(&disk);
    // Idle for a few intervals first: the flusher has nothing to do.
    for i in 1..=4 {
        assert!(
            !store.step_flusher(interval * i),
            "an idle log gave the flusher work"
        );
    }
    let value: Arc<[u8]> = (&b"durable"[..]).into();
    let written = store.update(b"k", Access::NoAccess, |_, _| {
        (Change::Put(NewItem::new(value, 7)), ())
    });
    let Ok(((), Some(written))) = written else {
        panic!("set failed")
    };
    // As a connection does: write the tail, then wait for the acknowledgement, which
    // says only that the OS has it; the interval's sync makes it durable.
    assert!(store.write_now().is_ok());
    assert!(store.wait_acked(written.lsn).is_ok());
    assert!(store.stats().synced_lsn < written.lsn);
    // Within an interval of the write (it came after the fourth step).
    assert!(
        store.step_flusher(interval * 5),
        "the write left the flusher nothing to do within the interval"
    );
    assert!(
        store.stats().synced_lsn >= written.lsn,
        "{:?}",
        store.stats()
    );
    disk.power_loss(Tear::DropUnsynced);
    drop(store);
    disk.revive();
    let store = open(&disk);
    let item = store
        .peek(b"k")
        .unwrap_or_else(|e| panic!("peek failed: {e}"));
    assert_eq!(
        item.as_ref().map(|i| (&i.value[..], i.client_flags)),
        Some((&b"durable"[..], 7)),
        "a write synced within its interval was lost to a power loss"
    );
}
