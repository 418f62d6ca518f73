//! sysbench's OLTP workloads against Kura's SQL port and MariaDB, side by side, with
//! sysbench's own defaults (database `sbtest`, AUTO_INCREMENT ids): what a MySQL user
//! runs first. `scripts/sysbench.sh` starts both servers (Kura in its `--durability`,
//! MariaDB flushing its log at every commit), prepares the same table in each and
//! runs each test on one server after the other; this workload runs the script
//! `--repeats` times and pools the runs (each test's transactions over the same
//! time), as `docs/figures.md` quotes them.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::chart::{Chart, Kind};
use crate::report::{Csv, Section, Table};
use crate::Common;

#[derive(Args, Debug, Clone)]
pub struct SysbenchArgs {
    #[command(flatten)]
    pub common: Common,
    /// sysbench tests, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "oltp_point_select,oltp_read_only,oltp_read_write,oltp_insert,oltp_update_index"
    )]
    pub tests: Vec<String>,
    /// Rows in the table.
    #[arg(long, default_value_t = 100_000)]
    pub rows: u64,
    /// sysbench's threads.
    #[arg(long, default_value_t = 16)]
    pub threads: u32,
    /// Seconds each test runs on each server.
    #[arg(long, default_value_t = 15)]
    pub seconds: u32,
    /// Runs of the whole script, pooled.
    #[arg(long, default_value_t = 2)]
    pub repeats: u32,
    /// Kura's `-m` in MiB (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub kura_memory_mib: u64,
}

impl SysbenchArgs {
    /// The arguments with `--tiny` applied: 1,000 rows, 4 threads, 1 s, one run.
    fn effective(&self) -> SysbenchArgs {
        let mut args = self.clone();
        if args.common.tiny {
            args.rows = args.rows.min(1_000);
            args.threads = args.threads.min(4);
            args.seconds = args.seconds.min(1);
            args.repeats = 1;
        }
        args
    }
}

/// One line the script prints for a test on a server.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    test: String,
    server: String,
    tps: f64,
    p95_ms: String,
}

/// The script's result lines (`TEST SERVER TPS tps QPS qps p95 MS ms ...`).
fn parse(out: &str) -> Vec<Measured> {
    out.lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() < 8 || words[3] != "tps" || words[6] != "p95" {
                return None;
            }
            Some(Measured {
                test: words[0].to_string(),
                server: words[1].to_string(),
                tps: words[2].parse().ok()?,
                p95_ms: words[7].to_string(),
            })
        })
        .collect()
}

/// `scripts/sysbench.sh`, in the working directory or one above it, or beside the
/// repository this binary was built in (`target/<profile>/kura-bench`).
fn find_script() -> Result<std::path::PathBuf> {
    let relative = Path::new("scripts/sysbench.sh");
    let mut places: Vec<std::path::PathBuf> = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        places.extend(cwd.ancestors().map(Path::to_path_buf));
    }
    if let Ok(exe) = std::env::current_exe() {
        places.extend(exe.ancestors().map(Path::to_path_buf));
    }
    places
        .into_iter()
        .map(|dir| dir.join(relative))
        .find(|p| p.exists())
        .context("no scripts/sysbench.sh here or above: run kura-bench from the repository")
}

/// sysbench's version line, or why there is none.
fn sysbench_version() -> String {
    match Command::new("sysbench").arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Err(e) => format!("sysbench --version: {e}"),
    }
}

pub fn run(args: &SysbenchArgs) -> Result<Section> {
    let (mut section, started) = Section::begin("sysbench", &args.common.data_root);
    let args = &args.effective();
    section.parameters = format!("{args:#?}");
    let script = find_script()?;
    // The script works from the repository's root: the binary by its full path.
    let kura_bin = std::fs::canonicalize(&args.common.kura_bin)
        .with_context(|| format!("no Kura binary at {}", args.common.kura_bin.display()))?;
    // The script starts both servers; its command is what ran.
    section.servers.push(crate::backend::Launch {
        role: "kura and mariadb, started by the script".to_string(),
        command: ["bash", "scripts/sysbench.sh"]
            .into_iter()
            .map(String::from)
            .chain(args.tests.iter().cloned())
            .collect(),
        version: sysbench_version(),
        cgroup: None,
    });
    let mut runs: Vec<Vec<Measured>> = Vec::new();
    for repeat in 0..args.repeats {
        eprintln!("sysbench: run {} of {}", repeat + 1, args.repeats);
        let output = Command::new("bash")
            .arg(&script)
            .args(&args.tests)
            .env("ROWS", args.rows.to_string())
            .env("THREADS", args.threads.to_string())
            .env("SECONDS_EACH", args.seconds.to_string())
            .env("KURA_MEMORY_MIB", args.kura_memory_mib.to_string())
            .env("KURA_BIN", &kura_bin)
            .output()
            .context("running scripts/sysbench.sh")?;
        let out = String::from_utf8_lossy(&output.stdout);
        eprint!("{out}");
        if !output.status.success() {
            bail!(
                "scripts/sysbench.sh failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let measured = parse(&out);
        if measured.len() != 2 * args.tests.len() {
            bail!(
                "scripts/sysbench.sh printed {} results, not {}",
                measured.len(),
                2 * args.tests.len()
            );
        }
        runs.push(measured);
    }
    let mut table = Table::new(&[
        "test",
        "Kura tps",
        "MariaDB tps",
        "Kura / MariaDB",
        "per run",
        "Kura p95 ms",
        "MariaDB p95 ms",
    ]);
    let mut csv = Csv::new(&["run", "test", "server", "tps", "p95_ms"]);
    for (r, run) in runs.iter().enumerate() {
        for m in run {
            csv.push(vec![
                (r + 1).to_string(),
                m.test.clone(),
                m.server.clone(),
                format!("{:.2}", m.tps),
                m.p95_ms.clone(),
            ]);
        }
    }
    let mut ratios = Vec::new();
    for test in &args.tests {
        let of = |server: &str| -> Vec<&Measured> {
            runs.iter()
                .flat_map(|run| run.iter().filter(|m| m.test == *test && m.server == server))
                .collect()
        };
        let (kura, mariadb) = (of("kura"), of("mariadb"));
        // Every run gives each server the same time: pooled, the rate is the mean.
        let mean =
            |ms: &[&Measured]| ms.iter().map(|m| m.tps).sum::<f64>() / ms.len().max(1) as f64;
        let per_run: Vec<String> = kura
            .iter()
            .zip(&mariadb)
            .map(|(k, m)| format!("{:.2}", k.tps / m.tps))
            .collect();
        let p95 = |ms: &[&Measured]| {
            ms.iter()
                .map(|m| m.p95_ms.clone())
                .collect::<Vec<_>>()
                .join(", ")
        };
        ratios.push(Some(mean(&kura) / mean(&mariadb)));
        table.push(vec![
            test.clone(),
            format!("{:.0}", mean(&kura)),
            format!("{:.0}", mean(&mariadb)),
            format!("{:.2}", mean(&kura) / mean(&mariadb)),
            per_run.join(", "),
            p95(&kura),
            p95(&mariadb),
        ]);
    }
    println!("\n{}", table.render());
    section.csv = csv.write(&args.common.out_dir, "sysbench")?;
    println!("wrote {}", section.csv.display());
    let chart = Chart {
        title: "sysbench: Kura's transactions/s over MariaDB's".to_string(),
        x_label: "test".to_string(),
        y_label: "Kura / MariaDB".to_string(),
        kind: Kind::Bars,
        categories: args.tests.clone(),
        series: vec![("Kura / MariaDB".to_string(), ratios)],
    };
    let files = chart.write_beside(&section.csv)?;
    println!("wrote {files}");
    section.charts.push(files);
    section.summary = format!(
        "sysbench 1.0's {} with its defaults (database sbtest, AUTO_INCREMENT ids), {} rows, {} threads, {} s per test and server, {} runs of scripts/sysbench.sh pooled; Kura's -m {} MiB (0: none).",
        args.tests.join(", "),
        args.rows,
        args.threads,
        args.seconds,
        args.repeats,
        args.kura_memory_mib
    );
    section
        .tables
        .push(("Transactions per second".into(), table));
    section.notes.push(
        "The script starts a private MariaDB (innodb_flush_log_at_trx_commit=1, a 1 GiB buffer pool) and Kura in fsync mode, prepares the same table in both and runs each test on one, then the other; it also prints each server's CPU time and the machine's context switches per transaction.".into(),
    );
    section.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_result_lines_are_read_and_the_rest_passed_over() {
        let out = "sysbench.sh: 2026-11-27 commit abc, 100000 rows\n\
            oltp_point_select  kura         97545.12 tps   97545.12 qps  p95     0.35 ms  ignored errors 0  cpu/tx 3 us  switches/tx 2\n\
            oltp_point_select  mariadb      76782.00 tps   76782.00 qps  p95     0.43 ms  ignored errors 0  cpu/tx 6 us  switches/tx 2\n\
            oltp_point_select  kura/mariadb 1.27\n";
        let got = parse(out);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].server, "kura");
        assert_eq!(got[1].tps, 76782.0);
        assert_eq!(got[0].p95_ms, "0.35");
    }
}
