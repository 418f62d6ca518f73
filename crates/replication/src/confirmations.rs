//! What the connected replicas confirmed is on their disks, for the changes that wait
//! for replicas (`--min-sync-replicas`, a meta `Y<n>`): a watch channel for the event
//! loops, a condvar for SQL threads, and the count of requests waiting, which ends
//! the streams' lingering.
//!
//! What it is not for: holding a connection's replies until their replicas confirm
//! (the server's `sync_replies.rs`).

use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

/// What each connected replica confirmed is on its disk.
pub struct Confirmations {
    /// The confirmed LSN of every connected replica, highest first.
    held: watch::Sender<Vec<u64>>,
    /// Wakes the threads that wait without a runtime (SQL connections).
    lock: Mutex<()>,
    cond: Condvar,
    /// How many requests are waiting for replicas now, and one more for good once
    /// the server stops; the streams to the replicas [`Confirmations::linger`] only
    /// while this is 0, and a request that begins to wait ends their lingering.
    waiting: watch::Sender<usize>,
}

impl Default for Confirmations {
    fn default() -> Confirmations {
        Confirmations {
            held: watch::Sender::new(Vec::new()),
            lock: Mutex::new(()),
            cond: Condvar::new(),
            waiting: watch::Sender::new(0),
        }
    }
}

/// Whether `n` replicas of `held` (highest first) hold `lsn`.
pub fn holds(held: &[u64], n: u8, lsn: u64) -> bool {
    n == 0 || held.get(usize::from(n) - 1).is_some_and(|&l| l >= lsn)
}

impl Confirmations {
    /// Replaces what the replicas confirmed (one LSN per connected replica).
    pub fn publish(&self, mut held: Vec<u64>) {
        held.sort_unstable_by(|a, b| b.cmp(a));
        self.held.send_if_modified(|current| {
            let changed = *current != held;
            *current = held;
            changed
        });
        let _guard = self.lock.lock();
        self.cond.notify_all();
    }

    /// Waits up to `most` for more of the log to gather before a stream sends it, so
    /// that a busy primary wakes its streams, and its replicas sync and acknowledge,
    /// once a `most` rather than once per group commit. Returns at once, or as soon
    /// as one does, while a request waits for replicas.
    pub async fn linger(&self, most: Duration) {
        let mut waiting = self.waiting.subscribe();
        let _ = tokio::time::timeout(most, waiting.wait_for(|&n| n > 0)).await;
    }

    /// Ends every stream's [`Confirmations::linger`] for good, at shutdown, so that
    /// each sees at once that the server is stopping.
    pub fn stop_lingering(&self) {
        self.waiting.send_modify(|n| *n += 1);
    }

    /// Counts a request as waiting for replicas until the guard drops, and ends any
    /// stream's [`Confirmations::linger`].
    fn waiter(&self) -> Waiter<'_> {
        self.waiting.send_modify(|n| *n += 1);
        Waiter(self)
    }

    pub fn connected(&self) -> usize {
        self.held.borrow().len()
    }

    /// Waits until every `(lsn, n)` is held by `n` replicas, one of them can no longer
    /// be (fewer than `n` connected), or `timeout` passes. Returns what the replicas
    /// held at the end.
    pub async fn wait(&self, waits: &[(u64, u8)], timeout: Duration) -> Vec<u64> {
        let settled = |held: &Vec<u64>| {
            waits.iter().all(|&(lsn, n)| holds(held, n, lsn))
                || waits.iter().any(|&(_, n)| held.len() < usize::from(n))
        };
        let _waiter = self.waiter();
        let mut rx = self.held.subscribe();
        let _ = tokio::time::timeout(timeout, rx.wait_for(settled)).await;
        let held = rx.borrow().clone();
        held
    }

    /// [`Confirmations::wait`] for one LSN, blocking the calling thread.
    pub fn wait_blocking(&self, lsn: u64, n: u8, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let _waiter = self.waiter();
        let mut guard = self.lock.lock();
        loop {
            {
                let held = self.held.borrow();
                if holds(&held, n, lsn) {
                    return true;
                }
                if held.len() < usize::from(n) {
                    return false;
                }
            }
            if self.cond.wait_until(&mut guard, deadline).timed_out() {
                return holds(&self.held.borrow(), n, lsn);
            }
        }
    }
}

/// A request waiting for replicas; see [`Confirmations::waiter`].
struct Waiter<'a>(&'a Confirmations);

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        // No stream needs waking for this: they linger only while none wait.
        self.0.waiting.send_if_modified(|n| {
            *n -= 1;
            false
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_of_replicas_holds_what_the_nth_highest_confirmed() {
        let held = [30, 20, 10];
        assert!(holds(&held, 0, 99));
        assert!(holds(&held, 1, 30) && !holds(&held, 1, 31));
        assert!(holds(&held, 3, 10) && !holds(&held, 3, 11));
        assert!(!holds(&held, 4, 1));
    }

    #[test]
    fn a_blocking_wait_ends_when_replicas_confirm_or_leave() {
        let c = std::sync::Arc::new(Confirmations::default());
        c.publish(vec![5, 7]);
        assert!(c.wait_blocking(7, 1, Duration::from_millis(1)));
        assert!(!c.wait_blocking(8, 1, Duration::from_millis(1)));
        let publisher = std::sync::Arc::clone(&c);
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            publisher.publish(vec![9, 8]);
        });
        assert!(c.wait_blocking(8, 2, Duration::from_secs(10)));
        thread
            .join()
            .map_err(|_| "publisher panicked")
            .unwrap_or(());
        c.publish(vec![9]);
        assert!(!c.wait_blocking(9, 2, Duration::from_secs(10)));
    }
}
