//! A latency histogram that many threads record into without a lock: a count per
//! fixed bucket and a sum, all relaxed atomics. For people and dashboards
//! (Prometheus), not for correctness.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The buckets' upper bounds in seconds, from 25 µs (a write(2) that did not wait) to
/// 2.5 s (a disk in trouble); slower falls in the last, unbounded bucket.
pub const BUCKET_BOUNDS_SECS: [f64; 16] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5,
];

#[derive(Debug, Default)]
pub struct Histogram {
    /// One per bound, then the unbounded bucket; not cumulative.
    counts: [AtomicU64; BUCKET_BOUNDS_SECS.len() + 1],
    sum_nanos: AtomicU64,
}

/// What a histogram held at one moment, in Prometheus's terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramSnapshot {
    /// (upper bound in seconds, observations at or below it): cumulative, one per
    /// bound of [`BUCKET_BOUNDS_SECS`]; the count covers the unbounded bucket.
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_secs: f64,
}

impl Histogram {
    pub fn record(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let bucket = BUCKET_BOUNDS_SECS
            .iter()
            .position(|&bound| secs <= bound)
            .unwrap_or(BUCKET_BOUNDS_SECS.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Adds this histogram into `into` (snapshots of several add up).
    pub fn add_to(&self, into: &mut HistogramSnapshot) {
        if into.buckets.is_empty() {
            into.buckets = BUCKET_BOUNDS_SECS.iter().map(|&b| (b, 0)).collect();
        }
        let mut cumulative = 0;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            if let Some(bucket) = into.buckets.get_mut(i) {
                bucket.1 += cumulative;
            }
        }
        into.count += cumulative;
        into.sum_secs += self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut snapshot = HistogramSnapshot::default();
        self.add_to(&mut snapshot);
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_cumulative_buckets() {
        let h = Histogram::default();
        h.record(Duration::from_micros(10));
        h.record(Duration::from_micros(30));
        h.record(Duration::from_millis(3));
        h.record(Duration::from_secs(9));
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets[0], (0.000_025, 1));
        assert_eq!(s.buckets[1], (0.000_05, 2));
        assert_eq!(s.buckets[7], (0.005, 3));
        assert_eq!(s.buckets[15], (2.5, 3));
        assert!((s.sum_secs - 9.003_04).abs() < 1e-9);
        let mut twice = s.clone();
        h.add_to(&mut twice);
        assert_eq!(twice.count, 8);
        assert_eq!(twice.buckets[1].1, 4);
    }
}
