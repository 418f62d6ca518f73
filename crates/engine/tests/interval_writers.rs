//! Interval durability: request threads that find the log's writer lock taken leave
//! their records to its holder and do not wait (see `Log::write_now`). No such request
//! may be dropped: every thread's record is acknowledged without it writing again, and
//! without the flusher, whose interval here is an hour. And a segment near its end is
//! synced at once, not at the interval, so the roll that follows has little to sync.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use kura_engine::sim::SimDisk;
use kura_engine::{Access, Change, Durability, ManualClock, NewItem, Options, Store};

const THREADS: usize = 4;
const ROUNDS: usize = 2000;

#[test]
fn writers_that_find_the_writer_busy_are_written_for() {
    let mut options = Options::new(
        Durability::Interval,
        Arc::new(ManualClock::new(1_700_000_000)),
    );
    options.fsync_interval = Duration::from_secs(3600);
    // Small segments: rolls are frequent, and a roll is written by the flusher, which
    // then holds the writer lock as request threads ask.
    options.segment_size_bytes = 8 << 10;
    let store = Store::open(Arc::new(SimDisk::new()), options)
        .unwrap_or_else(|e| panic!("open failed: {e}"));
    let store = Arc::new(store);
    let barrier = Arc::new(Barrier::new(THREADS));
    // Threads record failures instead of panicking, so that none is left waiting at
    // the barrier for a thread that died.
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let failed = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            let barrier = Arc::clone(&barrier);
            let failures = Arc::clone(&failures);
            let stop = Arc::clone(&failed);
            let failed = Arc::clone(&failed);
            let fail = move |what: String| {
                failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(what);
                failed.store(true, Ordering::SeqCst);
            };
            std::thread::spawn(move || {
                let value: Arc<[u8]> = vec![b'v'; 200].into();
                for round in 0..ROUNDS {
                    // Each round starts together, so appends race other threads'
                    // writes: a record lands in the tail just after a writer took it,
                    // and its thread then finds the writer lock taken.
                    barrier.wait();
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let key = format!("t{t}-r{round}");
                    let put = store.update(key.as_bytes(), Access::NoAccess, |_, _| {
                        (Change::Put(NewItem::new(Arc::clone(&value), 0)), ())
                    });
                    let Ok(((), Some(appended))) = put else {
                        fail(format!("set of {key} failed"));
                        continue;
                    };
                    if let Err(e) = store.write_now() {
                        fail(format!("write_now failed: {e}"));
                        continue;
                    }
                    // Until every thread has seen its record acknowledged (the barrier
                    // at the top of the loop), nobody writes again. The deadline only
                    // ends a wait for a record that was dropped, which would be forever;
                    // a passing round never comes near it, however loaded the machine.
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while store.acked_lsn() < appended.lsn {
                        if Instant::now() > deadline {
                            fail(format!(
                                "round {round}: thread {t}'s record (LSN {}) was never \
                                 written; acknowledged up to {}",
                                appended.lsn,
                                store.acked_lsn()
                            ));
                            break;
                        }
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        if thread.join().is_err() {
            panic!("a writer thread panicked");
        }
    }
    let failures = failures.lock().unwrap_or_else(|e| e.into_inner());
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn a_segment_near_its_end_is_synced_before_the_interval() {
    const SEGMENT: u64 = 64 << 10;
    let mut options = Options::new(
        Durability::Interval,
        Arc::new(ManualClock::new(1_700_000_000)),
    );
    options.fsync_interval = Duration::from_secs(3600);
    options.segment_size_bytes = SEGMENT;
    // The test runs the flusher's turns itself, at moments it names: what the flusher
    // does an hour short of the interval is then exact.
    options.stepped_flusher = true;
    let store = Store::open(Arc::new(SimDisk::new()), options)
        .unwrap_or_else(|e| panic!("open failed: {e}"));
    let value: Arc<[u8]> = vec![b'v'; 1000].into();
    let mut n = 0;
    // Fills the first segment to `upto` bytes, one record at a time, each written as
    // a request thread writes it.
    let mut fill = |upto: u64| {
        while store.stats().log_bytes < upto {
            let key = format!("k{n}");
            n += 1;
            store
                .update(key.as_bytes(), Access::NoAccess, |_, _| {
                    (Change::Put(NewItem::new(Arc::clone(&value), 0)), ())
                })
                .unwrap_or_else(|e| panic!("set failed: {e}"));
            store
                .write_now()
                .unwrap_or_else(|e| panic!("write_now failed: {e}"));
        }
    };
    // Half full: written, not synced (the interval is an hour away).
    fill(SEGMENT / 2);
    assert!(
        !store.step_flusher(Duration::from_secs(60)),
        "the flusher had work a minute in, with an hour's interval: {:?}",
        store.stats()
    );
    let stats = store.stats();
    assert_eq!(
        stats.acked_lsn, stats.appended_lsn,
        "interval mode acknowledges writes"
    );
    assert!(
        stats.synced_lsn < stats.appended_lsn,
        "half a segment was synced long before the interval: {stats:?}"
    );
    // The record that takes the segment past fifteen sixteenths gets it synced now,
    // with everything before it.
    fill(SEGMENT - SEGMENT / 16);
    let stats = store.stats();
    assert_eq!(
        stats.log_segments, 1,
        "the fill should stop short of a roll"
    );
    assert!(
        store.step_flusher(Duration::from_secs(61)),
        "a segment near its end left the flusher nothing to do"
    );
    assert!(
        store.stats().synced_lsn >= stats.appended_lsn,
        "a segment near its end was not synced up to {}: {:?}",
        stats.appended_lsn,
        store.stats()
    );
}
