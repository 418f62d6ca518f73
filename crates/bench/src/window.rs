//! A measurement window: transactions completing inside it are counted. It runs from
//! `start` to `end`, and past `end` for as long as fewer than `min_transactions` were
//! counted (at most [`GRACE`] longer). Tiny runs ask for one, so that a stalled machine
//! makes a run longer rather than empty: a test then checks what was done, never how
//! fast. Full runs ask for none and end on time.
//!
//! Its length is exactly `end - start` unless it had to wait for its transactions:
//! then it is the time until it had them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a window runs past its end waiting for its first transactions.
const GRACE: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct Window {
    pub start: Instant,
    pub end: Instant,
    min_transactions: u64,
    counted: Arc<AtomicU64>,
}

impl Window {
    /// From `start + warmup`, `duration` long, needing `min_transactions`.
    pub fn new(start: Instant, warmup: f64, duration: f64, min_transactions: u64) -> Window {
        let window_start = start + Duration::from_secs_f64(warmup);
        Window {
            start: window_start,
            end: window_start + Duration::from_secs_f64(duration),
            min_transactions,
            counted: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Still short of its transactions (and within the grace past its end).
    fn wanting(&self) -> bool {
        self.counted.load(Ordering::Acquire) < self.min_transactions
            && Instant::now() < self.end + GRACE
    }

    /// Whether something completing at `t` falls inside the window.
    pub fn contains(&self, t: Instant) -> bool {
        t >= self.start && (t < self.end || self.wanting())
    }

    /// Counts a transaction that completed inside the window. Only until the window
    /// has what it needs: past that (and always, for a window that needs none) client
    /// threads only read the shared counter, so they do not contend for its cache line.
    pub fn count(&self) {
        if self.counted.load(Ordering::Acquire) < self.min_transactions {
            self.counted.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Whether the window is over at `now`.
    pub fn is_over(&self, now: Instant) -> bool {
        now >= self.end && !self.wanting()
    }

    /// Waits until the window is over, and returns how long it ran.
    pub fn wait(&self) -> Duration {
        sleep_until(self.end);
        if !self.wanting() {
            return self.end - self.start;
        }
        while self.wanting() {
            std::thread::sleep(Duration::from_millis(5));
        }
        Instant::now() - self.start
    }
}

/// Sleeps until `t` (not at all if it has passed).
pub fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}
