//! Wall-clock time in whole Unix seconds, behind a trait so tests can move time by hand.
//!
//! Expiry follows memcached, which counts in whole seconds; so does the engine.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in Unix seconds.
pub trait Clock: Send + Sync {
    fn now_secs(&self) -> u32;
}

/// The system's real-time clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_secs(&self) -> u32 {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        u32::try_from(secs).unwrap_or(u32::MAX)
    }
}

/// A clock that moves only when told to; for tests.
#[derive(Debug)]
pub struct ManualClock {
    now_secs: AtomicU32,
}

impl ManualClock {
    pub fn new(now_secs: u32) -> ManualClock {
        ManualClock {
            now_secs: AtomicU32::new(now_secs),
        }
    }

    pub fn advance(&self, secs: u32) {
        self.now_secs.fetch_add(secs, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_secs(&self) -> u32 {
        self.now_secs.load(Ordering::SeqCst)
    }
}
