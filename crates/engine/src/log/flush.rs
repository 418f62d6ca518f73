//! The flusher thread: in fsync mode it writes the tail and fdatasyncs, a batch at a
//! time (group commit); in interval and none modes it writes what request threads
//! left and syncs every interval, through a second handle.
//!
//! What it is not for: appending (`log.rs`), or deciding what counts as acknowledged
//! (`Shared::acked_lsn`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::store::Durability;

use super::Shared;

pub(super) fn flusher(shared: Arc<Shared>) {
    let mut last_sync = Instant::now();
    loop {
        let (shutdown, sync_soon) = {
            let mut tail = shared.tail.lock();
            loop {
                if tail.shutdown {
                    break;
                }
                let pending = !tail.buf.is_empty()
                    && (shared.durability == Durability::Fsync || tail.write_wanted);
                if pending || tail.sync_soon {
                    break;
                }
                if shared.durability == Durability::Fsync {
                    shared.flusher_wake.wait(&mut tail);
                    continue;
                }
                // Interval and none: appends do not wake this thread, so it wakes itself
                // when a sync falls due, and at least once an interval to look.
                let unsynced = shared.appended_lsn.load(Ordering::Acquire)
                    > shared.synced_lsn.load(Ordering::Acquire);
                let now = Instant::now();
                let due = if unsynced {
                    last_sync + shared.fsync_interval
                } else {
                    now + shared.fsync_interval
                };
                if now >= due {
                    break;
                }
                let slept = shared.flusher_wake.wait_for(&mut tail, due - now);
                // Durability none: what no request thread wrote is written at least
                // once an interval.
                if slept.timed_out() && !tail.buf.is_empty() {
                    break;
                }
            }
            (tail.shutdown, std::mem::take(&mut tail.sync_soon))
        };
        let result = match shared.durability {
            Durability::Fsync => write_and_sync(&shared),
            Durability::Interval | Durability::None => {
                write_then_sync_aside(&shared, shutdown || sync_soon, &mut last_sync)
            }
        };
        if let Err(e) = result {
            shared.poison(&e);
            return;
        }
        shared.publish();
        if shutdown && shared.tail.lock().buf.is_empty() {
            return;
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

/// Interval and none modes: write what is in the tail, then — when the interval is up,
/// or `now` (at shutdown, or a segment near its end) — fdatasync through a second
/// handle, without the writer lock, so request threads keep writing while the disk
/// syncs.
fn write_then_sync_aside(
    shared: &Shared,
    now: bool,
    last_sync: &mut Instant,
) -> std::io::Result<()> {
    // Decided once: were it asked again after the write, the interval could come up
    // in between, and the clock be reset below without a sync.
    let due = now || last_sync.elapsed() >= shared.fsync_interval;
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
        *last_sync = Instant::now();
    }
    Ok(())
}
