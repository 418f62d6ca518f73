//! What a report says about the machine a run was measured on.
//!
//! Figures from a shared two-core machine mean little without the machine beside
//! them: CPU model and cores, memory, kernel, the disk and filesystem under the
//! data root (a durable store's fsync cost lives there), the load when the run
//! ended, and the tree kura-bench was built from. Read from `/proc`, `/sys` and a
//! few standard tools; anything unreadable is reported as unknown, never fatal.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

/// (what, value) pairs, in report order.
pub fn describe(data_root: &Path) -> Vec<(String, String)> {
    let mut facts = Vec::new();
    let mut fact = |what: &str, value: String| facts.push((what.to_string(), value));
    fact("date (UTC)", utc_now());
    fact(
        "CPU",
        first_field("/proc/cpuinfo", "model name").unwrap_or_else(unknown),
    );
    let logical = std::fs::read_to_string("/proc/cpuinfo")
        .map(|t| t.lines().filter(|l| l.starts_with("processor")).count())
        .unwrap_or(0);
    let usable = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    fact(
        "cores",
        format!("{logical} logical CPUs, {usable} usable by this process"),
    );
    fact(
        "memory",
        first_field("/proc/meminfo", "MemTotal")
            .and_then(|kb| kb.trim_end_matches(" kB").trim().parse::<u64>().ok())
            .map(|kb| format!("{:.1} GiB", kb as f64 / (1024.0 * 1024.0)))
            .unwrap_or_else(unknown),
    );
    fact(
        "kernel",
        read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(unknown),
    );
    fact("OS", os_name().unwrap_or_else(unknown));
    fact(
        "load average (1, 5, 15 min) at the end",
        read_trimmed("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(", "))
            .unwrap_or_else(unknown),
    );
    fact("data root", disk(data_root));
    fact("kura-bench tree", git_tree());
    facts
}

fn unknown() -> String {
    "unknown".to_string()
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().to_string())
}

/// The value of the first `key : value` line starting with `key` in `path`.
fn first_field(path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn os_name() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
}

/// A command's stdout, trimmed, if it ran and succeeded.
fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `/var/tmp: /dev/vda, ext4 (rw,relatime), 252 GiB, 74 GiB free, SSD or virtual`.
fn disk(path: &Path) -> String {
    let shown = path.display().to_string();
    let Ok(path) = path.canonicalize() else {
        return format!("{shown}: does not exist");
    };
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return format!("{shown}: mounts unreadable");
    };
    // The longest mount point that holds the path.
    let Some(fields) = mounts
        .lines()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .filter(|f| f.len() >= 4 && path.starts_with(f[1].replace("\\040", " ")))
        .max_by_key(|f| f[1].len())
    else {
        return format!("{shown}: no mount found");
    };
    let (device, fstype, options) = (fields[0], fields[2], fields[3]);
    let sizes = output(
        "df",
        &["-B1", "--output=size,avail", &path.display().to_string()],
    )
    .and_then(|text| {
        let numbers: Vec<u64> = text
            .lines()
            .nth(1)?
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        Some(format!(
            ", {:.0} GiB, {:.0} GiB free",
            gib(*numbers.first()?),
            gib(*numbers.get(1)?)
        ))
    })
    .unwrap_or_default();
    // /dev/vda1 -> vda; /sys/block/<disk>/queue/rotational says spinning or not.
    let disk_name = device
        .trim_start_matches("/dev/")
        .trim_end_matches(|c: char| c.is_ascii_digit());
    let kind = read_trimmed(&format!("/sys/block/{disk_name}/queue/rotational"))
        .map(|r| {
            if r == "1" {
                ", rotational (or a virtual disk that says so)".to_string()
            } else {
                ", non-rotational".to_string()
            }
        })
        .unwrap_or_default();
    format!("{shown}: {device}, {fstype} ({options}){sizes}{kind}")
}

/// The commit kura-bench runs from, and whether the tree had local changes.
fn git_tree() -> String {
    match output("git", &["rev-parse", "--short", "HEAD"]) {
        Some(commit) => {
            let dirty = output("git", &["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{commit} with uncommitted changes")
            } else {
                commit
            }
        }
        None => "not a git checkout".to_string(),
    }
}

/// Now as `2026-11-21 09:58:03`.
pub fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    utc(secs)
}

/// Unix seconds as a UTC date and time (Howard Hinnant's civil-from-days).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rest = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc(1_795_253_883), "2026-11-21 09:38:03");
    }

    #[test]
    fn describes_this_machine() {
        let facts = describe(Path::new("/"));
        let get = |what: &str| {
            facts
                .iter()
                .find(|(w, _)| w == what)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        assert!(get("cores").contains("logical CPUs"), "{facts:?}");
        assert!(get("memory").ends_with("GiB"), "{facts:?}");
        assert!(get("data root").starts_with("/: "), "{facts:?}");
    }
}
