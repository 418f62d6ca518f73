//! Measuring helpers: process CPU time from `/proc`, latency histograms, medians.
//!
//! CPU time is read from `/proc/<pid>/stat` (utime + stime) rather than through
//! `getrusage`, which would need `unsafe`. Linux reports those fields in USER_HZ
//! ticks, which is 100 on every architecture Linux exposes to user space, so the
//! resolution is 10 ms: fine over measurements of a second or more, coarse in
//! `--tiny` runs.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Linux's USER_HZ: the unit of utime and stime in `/proc/<pid>/stat`.
const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system) used so far by `pid`, or by this process for `None`.
pub fn cpu_secs(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_string(),
    };
    let text = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let after = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    // Fields 14 and 15 overall are 12 and 13 after the name and state.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / USER_HZ)
}

/// CPU seconds used so far by all of `pids` together; `None` if there are none or
/// one cannot be read.
pub fn servers_cpu_secs(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().map(|&p| cpu_secs(Some(p))).sum()
}

/// Busy CPU seconds of the whole machine so far (all cores, from `/proc/stat`):
/// everything but idle and iowait. Softirq time is included because the kernel
/// charges most of it (loopback networking) to the process it interrupted, so the
/// per-process figures include it too.
pub fn machine_busy_secs() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: f64 = ticks.iter().take(8).sum();
    let idle = ticks.get(3)? + ticks.get(4).unwrap_or(&0.0);
    Some((total - idle) / USER_HZ)
}

/// CPU counters at one instant: this process, the servers, the whole machine.
#[derive(Clone, Debug)]
pub struct CpuSample {
    client: Option<f64>,
    servers: Option<f64>,
    /// Each kernel thread's CPU seconds, by pid: kernel threads come and go (a
    /// worker that exits takes its count with it), so the window's use is summed
    /// thread by thread, never as a difference of two totals.
    kernel: Option<std::collections::HashMap<u32, f64>>,
    machine: Option<f64>,
}

impl CpuSample {
    pub fn take(server_pids: &[u32]) -> CpuSample {
        CpuSample {
            client: cpu_secs(None),
            servers: servers_cpu_secs(server_pids),
            kernel: kernel_threads_cpu_secs(),
            machine: machine_busy_secs(),
        }
    }
}

/// CPU seconds used so far by each kernel thread (kthreadd and its children), by pid:
/// journal commits, writeback and deferred softirqs, much of it done for a server's
/// fsyncs.
pub fn kernel_threads_cpu_secs() -> Option<std::collections::HashMap<u32, f64>> {
    let mut threads = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = text.rfind(')') else {
            continue;
        };
        let fields: Vec<&str> = text[close + 2..].split(' ').collect();
        let is_kernel = pid == 2 || fields.get(1) == Some(&"2");
        if !is_kernel {
            continue;
        }
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        threads.insert(pid, (ticks(11) + ticks(12)) / USER_HZ);
    }
    Some(threads)
}

/// CPU seconds kernel threads used between two readings: each thread's growth (a
/// thread that began meanwhile counts from zero; one that ended counts nothing).
fn kernel_secs_between(
    before: Option<&std::collections::HashMap<u32, f64>>,
    after: Option<&std::collections::HashMap<u32, f64>>,
) -> Option<f64> {
    let (before, after) = (before?, after?);
    Some(
        after
            .iter()
            .map(|(pid, secs)| (secs - before.get(pid).copied().unwrap_or(0.0)).max(0.0))
            .sum(),
    )
}

/// CPU use over a window, in percent of one core: the client (this process), the
/// servers under test, kernel threads, and every other process on the machine
/// (other tenants of a shared machine, and kura-bench's own idle backends).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUse {
    pub client: Option<f64>,
    pub server: Option<f64>,
    pub kernel: Option<f64>,
    pub others: Option<f64>,
}

impl CpuUse {
    pub fn between(before: CpuSample, after: CpuSample, wall: Duration) -> CpuUse {
        let client = cpu_percent(before.client, after.client, wall);
        let server = cpu_percent(before.servers, after.servers, wall);
        let kernel = kernel_secs_between(before.kernel.as_ref(), after.kernel.as_ref())
            .and_then(|used| cpu_percent(Some(0.0), Some(used), wall));
        let machine = cpu_percent(before.machine, after.machine, wall);
        let others = machine.map(|m| {
            let accounted = client.unwrap_or(0.0) + server.unwrap_or(0.0) + kernel.unwrap_or(0.0);
            (m - accounted).max(0.0)
        });
        CpuUse {
            client,
            server,
            kernel,
            others,
        }
    }
}

/// CPU use over a window, as a percentage of one core (200% = two cores busy).
pub fn cpu_percent(before: Option<f64>, after: Option<f64>, wall: Duration) -> Option<f64> {
    let secs = wall.as_secs_f64();
    match (before, after) {
        (Some(b), Some(a)) if secs > 0.0 => Some((a - b) / secs * 100.0),
        _ => None,
    }
}

/// A latency histogram in microseconds, 1 µs to 100 s, 3 significant digits.
pub fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 100_000_000, 3)?)
}

/// Records a latency, clamping to the histogram's range.
pub fn record(histogram: &mut Histogram<u64>, latency: Duration) {
    let micros = latency.as_micros().clamp(1, 100_000_000) as u64;
    histogram.saturating_record(micros);
}

/// The median of `values` (the lower middle for an even count); `None` if empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    Some(sorted[(sorted.len() - 1) / 2])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.0));
    }

    #[test]
    fn own_cpu_is_readable() {
        let spent = cpu_secs(None);
        assert!(spent.is_some_and(|s| s >= 0.0));
        assert!(machine_busy_secs().is_some_and(|s| s > 0.0));
        let threads = kernel_threads_cpu_secs().expect("reading /proc");
        assert!(threads.contains_key(&2), "kthreadd is missing: {threads:?}");
        assert!(threads.values().all(|&s| s >= 0.0));
    }

    /// A kernel thread that ends in the window takes its count with it; one that
    /// begins counts from zero. Neither makes the window's use negative.
    #[test]
    fn kernel_use_is_summed_thread_by_thread() {
        let before = [(10, 5.0), (11, 300.0)].into_iter().collect();
        let after = [(10, 5.5), (12, 0.25)].into_iter().collect();
        assert_eq!(kernel_secs_between(Some(&before), Some(&after)), Some(0.75));
    }

    #[test]
    fn histogram_clamps() {
        let mut h = new_histogram().unwrap();
        record(&mut h, Duration::from_nanos(10));
        record(&mut h, Duration::from_secs(1000));
        assert_eq!(h.len(), 2);
    }
}
