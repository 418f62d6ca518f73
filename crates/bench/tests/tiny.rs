//! Tiny runs of every kura-bench workload, so none of them rot.
//!
//! Each runs the real `kura-bench` binary against a real memcached, which must be
//! installed (`scripts/install-peers.sh`), and the Kura binary beside this one
//! (`target/<profile>/kura`, or `KURA_BIN`): a missing one fails the test rather than
//! skipping it. These tests check that the workloads run and report sane figures,
//! never how fast anything is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

const MEMCACHED: &str = "/usr/bin/memcached";

fn require_memcached() {
    assert!(
        Path::new(MEMCACHED).exists(),
        "{MEMCACHED} is missing: run `scripts/install-peers.sh` (as root) to install the peers"
    );
}

/// The Kura binary: `KURA_BIN`, or the one next to kura-bench (`cargo test
/// --workspace`, the README's test command, builds it there). Without it a tiny run
/// would measure the peers alone and pass having shown nothing of Kura, so its absence
/// fails the test.
fn kura_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("KURA_BIN") {
        return PathBuf::from(path);
    }
    let bench = PathBuf::from(env!("CARGO_BIN_EXE_kura-bench"));
    let path = bench.with_file_name("kura");
    assert!(
        path.exists(),
        "no Kura binary at {}: build it with `cargo build -p kura-server` (or set KURA_BIN)",
        path.display()
    );
    path
}

/// Backends to run: memcached, Redis when installed, and the Kura modes.
fn backends() -> (String, PathBuf) {
    require_memcached();
    let peers = if Path::new("/usr/bin/redis-server").exists() {
        "memcached,redis"
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "NOTE: redis-server not installed: skipping redis (run `scripts/install-peers.sh`)."
        );
        "memcached"
    };
    (
        format!("{peers},kura-fsync,kura-interval,kura-none"),
        kura_bin(),
    )
}

/// Runs `kura-bench <workload> --tiny ...` and returns its stdout and CSV text.
fn run_tiny(workload: &str, extra: &[&str], more_backends: &str) -> (String, String, Vec<String>) {
    let (mut names, kura) = backends();
    if !more_backends.is_empty() {
        names = format!("{names},{more_backends}");
    }
    let (stdout, csv) = run_tiny_on(workload, &names, &kura, extra);
    (stdout, csv, names.split(',').map(str::to_string).collect())
}

/// Runs `kura-bench <workload> --tiny --backends <names> ...` (with `--kura-bin` when
/// given), checks its files and report, and returns its stdout and CSV text.
fn run_tiny_on(workload: &str, names: &str, kura: &Path, extra: &[&str]) -> (String, String) {
    let out_dir = tempfile::tempdir().unwrap();
    let data_root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kura-bench"));
    cmd.arg(workload)
        .arg("--tiny")
        .args(["--backends", names])
        .arg("--out-dir")
        .arg(out_dir.path())
        .arg("--data-root")
        .arg(data_root.path())
        .args(extra)
        .arg("--kura-bin")
        .arg(kura);
    let output = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "kura-bench {workload} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let files: Vec<PathBuf> = std::fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let with = |ext: &str| -> Vec<PathBuf> {
        files
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .cloned()
            .collect()
    };
    let csvs = with("csv");
    assert_eq!(csvs.len(), 1, "expected one CSV, found {files:?}");
    let svgs = with("svg");
    assert_eq!(svgs.len(), 1, "expected one chart, found {files:?}");
    let svg = std::fs::read_to_string(&svgs[0]).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
        "{svg}"
    );
    let pngs = with("png");
    assert_eq!(pngs.len(), 1, "expected one PNG chart, found {files:?}");
    let png = std::fs::read(&pngs[0]).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{:?}", pngs[0]);
    let reports = with("md");
    assert_eq!(reports.len(), 1, "expected one report, found {files:?}");
    let report = std::fs::read_to_string(&reports[0]).unwrap();
    check_report(&report, &pngs);
    let csv = std::fs::read_to_string(&csvs[0]).unwrap();
    (stdout, csv)
}

/// A report names the machine and every server's command, and embeds each PNG by
/// its file name (a relative path, so the directory can move).
fn check_report(report: &str, pngs: &[PathBuf]) {
    for part in [
        "## Machine",
        "| CPU |",
        "| kernel |",
        "| data root |",
        "### Servers",
        "### Parameters",
    ] {
        assert!(
            report.contains(part),
            "no {part:?} in the report:\n{report}"
        );
    }
    for png in pngs {
        let name = png.file_name().unwrap().to_string_lossy();
        assert!(
            report.contains(&format!("]({name})")),
            "{name} not embedded in:\n{report}"
        );
    }
}

/// The CSV's rows as maps from column name to cell (no cell holds a comma here).
fn rows(csv: &str) -> Vec<std::collections::HashMap<String, String>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            header
                .iter()
                .map(|h| h.to_string())
                .zip(l.split(',').map(str::to_string))
                .collect()
        })
        .collect()
}

fn number(row: &std::collections::HashMap<String, String>, column: &str) -> f64 {
    row[column]
        .parse()
        .unwrap_or_else(|_| panic!("{column} = {:?} in {row:?}", row[column]))
}

#[test]
fn tiny_throughput_measures_every_backend() {
    let (stdout, csv, names) = run_tiny("throughput", &[], "");
    let rows = rows(&csv);
    for workload in ["get", "set", "mix90/10"] {
        assert!(
            stdout.contains(workload),
            "no {workload} table in:\n{stdout}"
        );
        for name in &names {
            let row = rows
                .iter()
                .find(|r| r["workload"] == workload && &r["backend"] == name)
                .unwrap_or_else(|| panic!("no {workload} row for {name} in:\n{csv}"));
            assert!(number(row, "ops_per_sec") > 100.0, "{row:?}");
            assert_eq!(number(row, "misses"), 0.0, "{row:?}");
            assert_eq!(number(row, "errors"), 0.0, "{row:?}");
            assert!(number(row, "p50_us") <= number(row, "p99_us"), "{row:?}");
        }
    }
    let memcached = rows.iter().find(|r| r["backend"] == "memcached").unwrap();
    assert_eq!(memcached["ratio_to_memcached"], "1.000");
}

#[test]
fn tiny_compaction_measures_every_kura_backend() {
    let (stdout, csv, names) = run_tiny("compaction", &[], "");
    assert!(stdout.contains("write amplification"), "{stdout}");
    let rows = rows(&csv);
    for name in names.iter().filter(|n| n.starts_with("kura")) {
        let mine: Vec<_> = rows.iter().filter(|r| &r["backend"] == name).collect();
        assert_eq!(
            mine.len(),
            2,
            "a compacting and an idle row for {name}:\n{csv}"
        );
        let slices: f64 = mine.iter().map(|r| number(r, "slices")).sum();
        assert_eq!(slices, 3.0, "{csv}");
        assert!(number(mine[0], "write_amplification") >= 1.0, "{csv}");
        assert!(number(mine[0], "data_bytes") > 0.0, "{csv}");
    }
    // memcached has no log to compact: left out, and said so.
    assert!(!rows.iter().any(|r| r["backend"] == "memcached"), "{csv}");
}

#[test]
fn tiny_replication_measures_kura_with_and_without_a_replica() {
    let (stdout, csv) = run_tiny_on("replication", "kura-fsync", &kura_bin(), &[]);
    assert!(
        stdout.contains("Full synchronisation") || stdout.contains("log bytes"),
        "{stdout}"
    );
    let rows = rows(&csv);
    for workload in ["set", "game"] {
        for setup in ["no replica", "async replica", "sync replica"] {
            let row = rows
                .iter()
                .find(|r| r["workload"] == workload && r["setup"] == setup)
                .unwrap_or_else(|| panic!("no {workload} row for {setup} in:\n{csv}"));
            assert!(number(row, "rate_per_sec") > 0.0, "{csv}");
            assert_eq!(number(row, "errors"), 0.0, "{csv}");
        }
    }
}

#[test]
fn tiny_store_fetch_measures_every_backend() {
    let (stdout, csv, names) = run_tiny("store-fetch", &[], sql_backends(Sql::Plain));
    assert!(stdout.contains("store/fetch"), "{stdout}");
    let rows = rows(&csv);
    for operation in ["store", "fetch"] {
        for name in &names {
            let row = rows
                .iter()
                .find(|r| r["operation"] == operation && &r["backend"] == name)
                .unwrap_or_else(|| panic!("no {operation} row for {name} in:\n{csv}"));
            assert_eq!(number(row, "count"), 300.0, "{row:?}");
            assert_eq!(number(row, "failures"), 0.0, "{row:?}");
            assert!(number(row, "min_ms") <= number(row, "mean_ms"), "{row:?}");
            assert!(number(row, "mean_ms") <= number(row, "max_ms"), "{row:?}");
        }
    }
}

#[test]
fn tiny_multiget_measures_every_count_and_backend() {
    let (stdout, csv, names) = run_tiny("multiget", &[], sql_backends(Sql::Plain));
    assert!(stdout.contains("50 vs 1"), "{stdout}");
    let rows = rows(&csv);
    for n in ["1", "2", "10", "50"] {
        for name in &names {
            let row = rows
                .iter()
                .find(|r| r["keys"] == n && &r["backend"] == name)
                .unwrap_or_else(|| panic!("no row for {n} keys on {name} in:\n{csv}"));
            assert_eq!(number(row, "samples"), 5.0, "{row:?}");
            assert!(number(row, "p50_us") > 0.0, "{row:?}");
        }
    }
}

/// Which SQL backends a workload runs on.
enum Sql {
    Plain,
    WithCacheAside,
}

/// The SQL backends to add when MariaDB is installed (`scripts/install-peers.sh`).
fn sql_backends(which: Sql) -> &'static str {
    if Path::new("/usr/sbin/mariadbd").exists() && Path::new("/usr/bin/mariadb-install-db").exists()
    {
        match which {
            Sql::Plain => "mariadb",
            Sql::WithCacheAside => "mariadb,mariadb+memcached",
        }
    } else {
        let _ = writeln!(
            std::io::stderr(),
            "NOTE: MariaDB not installed: skipping the mariadb backends \
             (run `scripts/install-peers.sh` to include them)."
        );
        ""
    }
}

#[test]
fn tiny_game_measures_every_connection_count_and_backend() {
    // Kura's players table beside its two-key layout.
    let tables = "kura-tables-fsync,kura-tables-interval";
    let more: Vec<&str> = [tables, sql_backends(Sql::WithCacheAside)]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    let (stdout, csv, names) = run_tiny("game", &[], &more.join(","));
    assert!(stdout.contains("get_by_email"), "{stdout}");
    let rows = rows(&csv);
    for connections in ["1", "4"] {
        for name in &names {
            let row = rows
                .iter()
                .find(|r| r["connections"] == connections && &r["backend"] == name)
                .unwrap_or_else(|| {
                    panic!("no row for {connections} connections on {name} in:\n{csv}")
                });
            // Transactions were done; how many a second depends on the machine's load.
            assert!(number(row, "tps_median") > 0.0, "{row:?}");
            assert_eq!(number(row, "failures"), 0.0, "{row:?}");
            for step in ["get_player", "set_player", "get_by_email"] {
                assert!(number(row, &format!("{step}_p50_us")) > 0.0, "{row:?}");
            }
        }
    }
}

/// Why memory cgroups cannot be made here, if they cannot: the data-size workload
/// needs them (and root). CI and the development machine run as root.
fn cgroups_unavailable() -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let root = mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let v1 = f.len() > 3 && f[2] == "cgroup" && f[3].split(',').any(|o| o == "memory");
        let v2 = f.len() > 3
            && f[2] == "cgroup2"
            && std::fs::read_to_string(Path::new(f[1]).join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
        (v1 || v2).then(|| PathBuf::from(f[1]))
    });
    let Some(root) = root else {
        return Some("no memory cgroup controller is mounted".to_string());
    };
    let probe = root.join(format!("kura-bench-probe-{}", std::process::id()));
    match std::fs::create_dir(&probe) {
        Ok(()) => {
            let _ = std::fs::remove_dir(&probe);
            None
        }
        Err(e) => Some(format!(
            "cannot create a cgroup under {}: {e}",
            root.display()
        )),
    }
}

#[test]
fn tiny_datasize_measures_or_reports_each_backend_past_its_memory_limit() {
    if let Some(why) = cgroups_unavailable() {
        let _ = writeln!(
            std::io::stderr(),
            "NOTE: skipping the tiny datasize run: {why} (it needs root)."
        );
        return;
    }
    let kura = kura_bin();
    let mut names: Vec<&str> = vec![
        "kura-fsync",
        "kura-interval",
        "kura-tables-fsync",
        "kura-tables-interval",
    ];
    let sql = sql_backends(Sql::WithCacheAside);
    names.extend(sql.split(',').filter(|n| !n.is_empty()));
    let out_dir = tempfile::tempdir().unwrap();
    let data_root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kura-bench"));
    cmd.args(["datasize", "--tiny", "--backends", &names.join(",")])
        .arg("--out-dir")
        .arg(out_dir.path())
        .arg("--data-root")
        .arg(data_root.path())
        .arg("--kura-bin")
        .arg(&kura);
    let output = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "kura-bench datasize failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let files: Vec<PathBuf> = std::fs::read_dir(out_dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let one = |ext: &str| -> PathBuf {
        let found: Vec<&PathBuf> = files
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        assert_eq!(found.len(), 1, "expected one .{ext}, found {files:?}");
        found[0].clone()
    };
    let png = one("png");
    assert!(std::fs::read(&png)
        .unwrap()
        .starts_with(b"\x89PNG\r\n\x1a\n"));
    let svg = std::fs::read_to_string(one("svg")).unwrap();
    assert!(svg.contains("transactions per second by data size over memory limit"));
    let report = std::fs::read_to_string(one("md")).unwrap();
    check_report(&report, &[png]);
    assert!(report.contains("**Data size**"), "{report}");
    let csv = std::fs::read_to_string(one("csv")).unwrap();
    let rows = rows(&csv);
    for name in &names {
        for ratio in ["0.5", "2"] {
            let row = rows
                .iter()
                .find(|r| r["ratio"] == ratio && r["backend"] == *name)
                .unwrap_or_else(|| panic!("no {ratio}x row for {name} in:\n{csv}"));
            assert_eq!(row["mem_limit_mib"], "128", "{row:?}");
            // Every backend runs at twice its limit: MariaDB and Kura both keep what
            // does not fit on disk (Kura's compact index keeps a slot a key, its
            // values beyond -m in the log).
            assert_eq!(row["outcome"], "measured", "{row:?}\n{stdout}\n{stderr}");
            // Transactions were done; how many a second depends on the load.
            assert!(number(row, "tps_median") > 0.0, "{row:?}");
            assert_eq!(number(row, "failures"), 0.0, "{row:?}");
        }
    }
    // Every cgroup the report names was removed after the run.
    for line in report.lines().filter(|l| l.contains("in cgroup `")) {
        let path = line
            .split("in cgroup `")
            .nth(1)
            .unwrap()
            .split('`')
            .next()
            .unwrap();
        assert!(!Path::new(path).exists(), "cgroup {path} left behind");
    }
}

#[test]
fn tiny_sql_measures_every_phase_setting_and_backend() {
    let kura = kura_bin();
    let mut names: Vec<&str> = vec!["kura-fsync"];
    names.extend(
        sql_backends(Sql::Plain)
            .split(',')
            .filter(|n| !n.is_empty()),
    );
    // The limit setting puts each server in a memory cgroup, which needs root.
    let settings = match cgroups_unavailable() {
        None => vec!["memory", "limit"],
        Some(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "NOTE: the tiny sql run measures data in memory only: {why} (the limit \
                 setting needs root)."
            );
            vec!["memory"]
        }
    };
    let (stdout, csv) = run_tiny_on(
        "sql",
        &names.join(","),
        &kura,
        &["--settings", &settings.join(",")],
    );
    assert!(stdout.contains("select by email"), "{stdout}");
    let rows = rows(&csv);
    for setting in &settings {
        for phase in [
            "pk_select",
            "email_select",
            "range_limit_10",
            "update_pk",
            "memcached_get",
        ] {
            for name in &names {
                let row = rows.iter().find(|r| {
                    r["setting"] == *setting && r["phase"] == phase && r["backend"] == *name
                });
                // memcached's get is Kura's port: MariaDB has no row for it.
                if phase == "memcached_get" && !name.starts_with("kura") {
                    assert!(row.is_none(), "{row:?}");
                    continue;
                }
                let row =
                    row.unwrap_or_else(|| panic!("no {setting} {phase} row for {name} in:\n{csv}"));
                // Tiny data fits under the tiny limit: every server must run.
                assert_eq!(row["outcome"], "measured", "{row:?}");
                // Operations were done; how many a second depends on the machine's load.
                assert!(number(row, "ops_per_sec") > 0.0, "{row:?}");
                assert_eq!(number(row, "failures"), 0.0, "{row:?}");
                assert!(number(row, "p50_us") <= number(row, "p99_us"), "{row:?}");
            }
        }
    }
}

/// The failover workload: three Kura nodes in cluster mode and a private etcd (Debian's
/// `etcd-server`, which `scripts/install-peers.sh` installs; root, for the network
/// namespace), one round of each change of primary, with no acknowledged write lost.
#[test]
fn tiny_failover_changes_primary_three_ways_and_loses_nothing() {
    let (stdout, csv) = run_tiny_on("failover", "kura-fsync", &kura_bin(), &[]);
    assert!(stdout.contains("no write, median ms"), "{stdout}");
    let rows = rows(&csv);
    for scenario in ["switchover", "link cut", "SIGKILL"] {
        let row = rows
            .iter()
            .find(|r| r["scenario"] == scenario)
            .unwrap_or_else(|| panic!("no {scenario} row in:\n{csv}"));
        assert!(number(row, "acked") > 0.0, "{csv}");
        assert_eq!(number(row, "lost"), 0.0, "{csv}");
    }
}

/// The cluster workload: four Kura nodes and a private etcd (`etcd-server`), nutcracker
/// (both from `scripts/install-peers.sh`): loads at 1, 2 and 4 shards straight and
/// through nutcracker, two grows under load, and the forwarding probe, every request
/// answered.
#[test]
fn tiny_cluster_measures_shards_grows_and_a_forwarded_request() {
    check_tiny_cluster(&[]);
}

/// The same with shards s3 and s4 across a veth link (root, for the namespace).
#[test]
fn tiny_cluster_across_a_network_namespace() {
    check_tiny_cluster(&["--netns"]);
}

fn check_tiny_cluster(extra: &[&str]) {
    let (stdout, csv) = run_tiny_on("cluster", "", &kura_bin(), extra);
    assert!(stdout.contains("during / before"), "{stdout}");
    let rows = rows(&csv);
    for shards in ["1", "2", "4"] {
        for route in ["ketama", "nutcracker"] {
            for op in ["set", "get"] {
                let row = rows
                    .iter()
                    .find(|r| {
                        r["measure"] == "load"
                            && r["shards"] == shards
                            && r["route"] == route
                            && r["op"] == op
                    })
                    .unwrap_or_else(|| panic!("no {shards}-shard {route} {op} in:\n{csv}"));
                assert!(number(row, "ops_per_sec") > 0.0, "{row:?}");
                assert_eq!(number(row, "failures"), 0.0, "{row:?}");
            }
        }
    }
    for (shards, route) in [("1", "nutcracker"), ("4", "nutcracker"), ("4", "one node")] {
        let row = rows
            .iter()
            .find(|r| {
                r["measure"] == "load"
                    && r["shards"] == shards
                    && r["route"] == route
                    && r["op"] == "game"
            })
            .unwrap_or_else(|| panic!("no {shards}-shard game through {route} in:\n{csv}"));
        assert!(number(row, "ops_per_sec") > 0.0, "{row:?}");
        assert_eq!(number(row, "failures"), 0.0, "{row:?}");
    }
    for grow in ["game 1 to 2", "game 2 to 4"] {
        for phase in ["grow-before", "grow-during", "grow-after"] {
            assert!(
                rows.iter()
                    .any(|r| r["measure"] == phase && r["op"] == grow),
                "no {phase} of {grow} in:\n{csv}"
            );
        }
    }
    for probe in ["get owned here", "get passed on", "mn round trip"] {
        let row = rows
            .iter()
            .find(|r| r["measure"] == "forward" && r["op"] == probe)
            .unwrap_or_else(|| panic!("no {probe} in:\n{csv}"));
        assert!(number(row, "p50_us") > 0.0, "{row:?}");
    }
}

/// sysbench's five workloads on Kura and MariaDB through the script, one tiny run:
/// every test measured on both servers, with a ratio.
#[test]
fn tiny_sysbench_measures_every_test_on_kura_and_mariadb() {
    let (stdout, csv) = run_tiny_on("sysbench", "", &kura_bin(), &[]);
    let rows = rows(&csv);
    for test in [
        "oltp_point_select",
        "oltp_read_only",
        "oltp_read_write",
        "oltp_insert",
        "oltp_update_index",
    ] {
        for server in ["kura", "mariadb"] {
            let row = rows
                .iter()
                .find(|r| r["test"] == test && r["server"] == server)
                .unwrap_or_else(|| panic!("no {test} on {server} in:\n{csv}"));
            assert!(number(row, "tps") > 0.0, "{row:?}");
        }
        assert!(stdout.contains(test), "{stdout}");
    }
}
