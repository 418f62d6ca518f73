//! The flusher: in fsync mode it writes the tail and fdatasyncs, a batch at a time
//! (group commit); in interval and none modes it writes what request threads left and
//! syncs every interval, through a second handle.
//!
//! What to do at a given moment is decided by [`next`] and done by [`turn`], both
//! given the time. The flusher thread gives them the time now and sleeps until the
//! next moment that matters; a test that opened the store with a stepped flusher
//! (`Options::stepped_flusher`) runs turns itself at the times it chooses
//! ([`Stepped::step`]), so what the flusher does before and after an interval is
//! exact, not a matter of how soon a thread was scheduled.
//!
//! What it is not for: appending (`log.rs`), or deciding what counts as acknowledged
//! (`Shared::acked_lsn`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::Durability;

use super::{Shared, Tail};

/// What the flusher should do now.
enum Next {
    /// A turn: write, and sync if due (`sync_now`: at once, for a shutdown or a
    /// segment near its end).
    Turn { shutdown: bool, sync_now: bool },
    /// Nothing until woken, or until this moment if there is one.
    Wait(Option<Instant>),
}

/// Decides, at `now`, with the last interval sync at `last_sync`. `waited_out`: the
/// flusher's last wait ran to its end (in none mode, what no request thread wrote is
/// then written, at least once an interval).
fn next(
    shared: &Shared,
    tail: &mut Tail,
    now: Instant,
    last_sync: Instant,
    waited_out: bool,
) -> Next {
    let take_turn = |tail: &mut Tail| Next::Turn {
        shutdown: tail.shutdown,
        sync_now: std::mem::take(&mut tail.sync_soon),
    };
    if tail.shutdown {
        return take_turn(tail);
    }
    let pending =
        !tail.buf.is_empty() && (shared.durability == Durability::Fsync || tail.write_wanted);
    if pending || tail.sync_soon {
        return take_turn(tail);
    }
    if shared.durability == Durability::Fsync {
        return Next::Wait(None);
    }
    // Interval and none: appends do not wake this thread, so it wakes itself when a
    // sync falls due, and at least once an interval to look.
    if waited_out && !tail.buf.is_empty() {
        return take_turn(tail);
    }
    let unsynced =
        shared.appended_lsn.load(Ordering::Acquire) > shared.synced_lsn.load(Ordering::Acquire);
    let due = if unsynced {
        last_sync + shared.fsync_interval
    } else {
        now + shared.fsync_interval
    };
    if now >= due {
        return take_turn(tail);
    }
    Next::Wait(Some(due))
}

/// One turn at `now`: writes, syncs if due, and publishes. False once the flusher is
/// done: shut down with nothing left, or failed (the log is poisoned).
fn turn(
    shared: &Shared,
    shutdown: bool,
    sync_now: bool,
    now: Instant,
    last_sync: &mut Instant,
) -> bool {
    let result = match shared.durability {
        Durability::Fsync => write_and_sync(shared),
        Durability::Interval | Durability::None => {
            write_then_sync_aside(shared, shutdown || sync_now, now, last_sync)
        }
    };
    if let Err(e) = result {
        shared.poison(&e);
        return false;
    }
    shared.publish();
    !(shutdown && shared.tail.lock().buf.is_empty())
}

/// The flusher thread's body.
pub(super) fn flusher(shared: Arc<Shared>) {
    let mut last_sync = Instant::now();
    let mut waited_out = false;
    loop {
        let (shutdown, sync_now) = {
            let mut tail = shared.tail.lock();
            loop {
                match next(&shared, &mut tail, Instant::now(), last_sync, waited_out) {
                    Next::Turn { shutdown, sync_now } => break (shutdown, sync_now),
                    Next::Wait(None) => {
                        shared.flusher_wake.wait(&mut tail);
                        waited_out = false;
                    }
                    Next::Wait(Some(due)) => {
                        waited_out = shared.flusher_wake.wait_until(&mut tail, due).timed_out();
                    }
                }
            }
        };
        waited_out = false;
        if !turn(&shared, shutdown, sync_now, Instant::now(), &mut last_sync) {
            return;
        }
    }
}

/// A flusher without a thread, for tests: each [`Stepped::step`] runs what the thread
/// would do at that moment, measured from when the log started.
pub(super) struct Stepped {
    started: Instant,
    last_sync: Instant,
}

impl Stepped {
    pub fn new() -> Stepped {
        let started = Instant::now();
        Stepped {
            started,
            last_sync: started,
        }
    }

    /// Runs the turn due `since_start` after the log started, if one is (as though
    /// the thread had slept until then). Returns whether it ran one.
    pub fn step(&mut self, shared: &Shared, since_start: Duration) -> bool {
        let now = self.started + since_start;
        let decided = next(shared, &mut shared.tail.lock(), now, self.last_sync, true);
        match decided {
            Next::Turn { shutdown, sync_now } => {
                turn(shared, shutdown, sync_now, now, &mut self.last_sync);
                true
            }
            Next::Wait(_) => false,
        }
    }

    /// What the thread does when the log shuts down: writes and syncs what is left.
    pub fn finish(&mut self, shared: &Shared) {
        let now = self.last_sync.max(Instant::now());
        loop {
            let decided = next(shared, &mut shared.tail.lock(), now, self.last_sync, true);
            let Next::Turn { shutdown, sync_now } = decided else {
                return;
            };
            if !turn(shared, shutdown, sync_now, now, &mut self.last_sync) {
                return;
            }
        }
    }
}

/// Fsync mode: write the tail and fdatasync, holding the writer lock (nobody else
/// writes in this mode).
fn write_and_sync(shared: &Shared) -> std::io::Result<()> {
    let mut writer = shared.writer.lock();
    let end = shared.write_tail(&mut writer, true)?;
    if shared.synced_lsn.load(Ordering::Acquire) < end {
        writer.active.sync()?;
        shared.synced_lsn.fetch_max(end, Ordering::AcqRel);
    }
    Ok(())
}

/// Interval and none modes: write what is in the tail, then — when the interval since
/// `last_sync` is up at `now`, or `sync_now` (at shutdown, or a segment near its end)
/// — fdatasync through a second handle, without the writer lock, so request threads
/// keep writing while the disk syncs. The next interval counts from `now`: the sync
/// covers every byte written before it began.
fn write_then_sync_aside(
    shared: &Shared,
    sync_now: bool,
    now: Instant,
    last_sync: &mut Instant,
) -> std::io::Result<()> {
    // Decided once: were it asked again after the write, the interval could come up
    // in between, and the clock be reset below without a sync.
    let due = sync_now || now.saturating_duration_since(*last_sync) >= shared.fsync_interval;
    let _sync_aside = shared.sync_aside.lock();
    let (end, handle) = {
        let mut writer = shared.writer.lock();
        let end = shared.write_tail(&mut writer, true)?;
        let handle = if due && shared.synced_lsn.load(Ordering::Acquire) < end {
            Some(writer.active.try_clone()?)
        } else {
            None
        };
        (end, handle)
    };
    shared.take_requests()?;
    if let Some(mut handle) = handle {
        // Covers every byte written before this call; a segment rolled meanwhile was
        // synced when it was left.
        handle.sync()?;
        shared.synced_lsn.fetch_max(end, Ordering::AcqRel);
    }
    if due {
        *last_sync = now;
    }
    Ok(())
}
