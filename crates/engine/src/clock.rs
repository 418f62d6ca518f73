//! Wall-clock time in whole Unix seconds, behind a trait so tests can move time by hand.
//!
//! Expiry follows memcached, which counts in whole seconds; so does the engine.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// The system clock as a background thread reads it just after each second turns:
/// reading it is one load, where the system clock costs a `clock_gettime` (a few
/// percent of a request's CPU time when every request reads it). memcached keeps its
/// clock the same way, a second at a time. The thread wakes once a second, not more:
/// an idle server should not wake a core a hundred times a second, and a busy one should
/// not have a thread of its own preempting a worker that often. The thread ends when the
/// clock is dropped.
#[derive(Debug)]
pub struct CoarseClock {
    now_secs: AtomicU32,
}

/// How long after the system clock's second turns [`CoarseClock`] reads it: how far
/// behind it may be, scheduling delay aside.
pub const COARSE_LAG: Duration = Duration::from_millis(1);

impl CoarseClock {
    pub fn start() -> std::io::Result<Arc<CoarseClock>> {
        let clock = Arc::new(CoarseClock {
            now_secs: AtomicU32::new(SystemClock.now_secs()),
        });
        let weak = Arc::downgrade(&clock);
        std::thread::Builder::new()
            .name("kura-clock".to_string())
            .spawn(move || loop {
                std::thread::sleep(until_next_second());
                let Some(clock) = weak.upgrade() else { return };
                clock
                    .now_secs
                    .store(SystemClock.now_secs(), Ordering::Relaxed);
            })?;
        Ok(clock)
    }
}

/// From now to [`COARSE_LAG`] past the system clock's next whole second; never more
/// than a second and the lag, so a clock set forward shows within that.
fn until_next_second() -> Duration {
    let into_second = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    Duration::from_secs(1) - Duration::from_nanos(u64::from(into_second)) + COARSE_LAG
}

impl Clock for CoarseClock {
    fn now_secs(&self) -> u32 {
        self.now_secs.load(Ordering::Relaxed)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_clock_follows_the_system_clock() {
        let coarse = CoarseClock::start().unwrap_or_else(|e| panic!("clock thread: {e}"));
        let before = SystemClock.now_secs();
        // It turns with the next whole second, or soon after on a loaded machine;
        // what the test waits for is the turn, bounded, not a span of time.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let after = loop {
            let now = coarse.now_secs();
            if now > before {
                break now;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "coarse clock still at {now}, system clock was {before} 30 s ago"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(after <= SystemClock.now_secs());
    }
}
