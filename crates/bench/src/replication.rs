//! The replication workload: what a replica costs its primary, and how far behind it
//! falls. Three setups of Kura (fsync mode) run side by side: a primary alone, a
//! primary with one asynchronous replica, and a primary with one replica and
//! `--min-sync-replicas 1`. Each measures sets and the game's transactions; while
//! they run, the primary's `stats replication` is sampled for the replica's lag in
//! bytes, and the primary's and the replica's CPU time is read from `/proc`. Then a
//! full synchronisation: a fresh replica of a primary holding `--full-sync-keys`
//! keys, timed until it has all of the primary's log.
//!
//! Reported: the median ops/s (sets) and TPS (game) of each setup over repetitions,
//! each as a ratio to the primary alone; the primary's CPU time per operation, as a
//! ratio to the primary alone's; the replica's CPU use; the lag's median and maximum;
//! the full synchronisation's seconds and rate. All servers are on this machine, so a
//! replica competes with its primary and the client for the same cores and disk: the
//! throughput ratio is an upper bound on the cost of a replica on a machine of its
//! own, and the replica's CPU use is what it takes from them.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::backend::{Backend, BackendKind, Durability, LaunchConfig};
use crate::chart::{Chart, Kind};
use crate::driver::Deal;
use crate::game::{self, Layout, Plan};
use crate::keys::{Distribution, KeyChooser};
use crate::load::{self, LoadSpec, OpMix};
use crate::progress::Progress;
use crate::proto::Wire;
use crate::report::{Csv, Section, Table};
use crate::stats::{self, median};
use crate::Common;

#[derive(Args, Debug, Clone)]
pub struct ReplicationArgs {
    #[command(flatten)]
    pub common: Common,
    /// Client connections for both workloads.
    #[arg(long, default_value_t = 50)]
    pub connections: usize,
    /// Client threads the connections are spread over.
    #[arg(long, default_value_t = 4)]
    pub client_threads: usize,
    /// Keys for the set workload and players for the game, all preloaded.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Value size of the set workload; the game's rows are 300 bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Seconds measured per workload, setup and repetition.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before each measurement, not counted.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Repetitions; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Keys (100-byte values) on the primary before a fresh replica's full copy is
    /// timed; 0 skips it.
    #[arg(long, default_value_t = 10_000_000)]
    pub full_sync_keys: u64,
    /// An extra argument for the replicas alone (repeatable), after `--kura-arg`s: for
    /// example `--replica-arg=--durability=interval`, a replica that syncs its log
    /// once an interval rather than every batch it applies.
    #[arg(long = "replica-arg", allow_hyphen_values = true)]
    pub replica_args: Vec<String>,
    /// Leaves out the synchronous replica: with a `--replica-arg` that makes replicas
    /// sync seldom, every acknowledged write would wait for that.
    #[arg(long)]
    pub no_sync_replica: bool,
}

/// One primary, with or without a replica.
struct Setup {
    name: &'static str,
    primary: Backend,
    replica: Option<Backend>,
}

fn kura(config: &LaunchConfig, extra: &[String]) -> Result<Backend> {
    let mut config = config.clone();
    config.kura_args.extend(extra.iter().cloned());
    Backend::start(&BackendKind::Kura(Durability::Fsync), &config)
}

impl Setup {
    fn start(name: &'static str, config: &LaunchConfig, replica_args: &[String]) -> Result<Setup> {
        let (replicas, sync) = match name {
            "no replica" => (false, false),
            "async replica" => (true, false),
            _ => (true, true),
        };
        let sync_args: Vec<String> = if sync {
            vec!["--min-sync-replicas=1".into()]
        } else {
            Vec::new()
        };
        let mut primary = kura(config, &sync_args)?;
        primary.name = format!("kura ({name})");
        let replica = if replicas {
            let mut args = vec![format!("--replica-of={}", primary.addr)];
            args.extend(replica_args.iter().cloned());
            let replica = kura(config, &args)?;
            wait_connected(primary.addr, 1)?;
            Some(replica)
        } else {
            None
        };
        Ok(Setup {
            name,
            primary,
            replica,
        })
    }
}

/// The setups, in the order reported.
const SETUPS: [&str; 3] = ["no replica", "async replica", "sync replica"];

/// `stats replication` of the server at `addr`, as (name, value) pairs.
fn replication_stats(addr: SocketAddr) -> Result<Vec<(String, String)>> {
    let stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    (&stream).write_all(b"stats replication\r\n")?;
    let mut stats = Vec::new();
    for line in BufReader::new(&stream).lines() {
        let line = line?;
        if line == "END" {
            break;
        }
        if let Some((name, value)) = line.strip_prefix("STAT ").and_then(|l| l.split_once(' ')) {
            stats.push((name.to_string(), value.to_string()));
        }
    }
    Ok(stats)
}

fn stat_u64(stats: &[(String, String)], name: &str) -> Option<u64> {
    stats
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.parse().ok())
}

fn wait_connected(primary: SocketAddr, n: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while stat_u64(&replication_stats(primary)?, "connected_replicas") != Some(n) {
        if Instant::now() > deadline {
            bail!("no replica connected to {primary} within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Samples the replica's lag (`lag_bytes` of the primary's first replica) every
/// 100 ms until `stop`.
fn sample_lag(primary: SocketAddr, stop: Arc<AtomicBool>, into: Arc<Mutex<Vec<u64>>>) {
    while !stop.load(Ordering::Relaxed) {
        if let Ok(stats) = replication_stats(primary) {
            let lag = stats
                .iter()
                .find(|(n, _)| n == "replica0")
                .and_then(|(_, v)| v.split(',').find_map(|f| f.strip_prefix("lag_bytes=")))
                .and_then(|v| v.parse().ok());
            if let Some(lag) = lag {
                into.lock().unwrap_or_else(|e| e.into_inner()).push(lag);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One measurement of one setup: ops/s (or TPS) and the lag samples.
struct Measured {
    setup: &'static str,
    workload: &'static str,
    rate: f64,
    p99_us: u64,
    lag: Vec<u64>,
    errors: u64,
    /// The primary's CPU time per operation (or transaction) in the window, µs.
    primary_us_per_op: Option<f64>,
    /// The replica's CPU use over warm-up and window, percent of one core.
    replica_cpu: Option<f64>,
}

pub fn run(args: &ReplicationArgs) -> Result<Section> {
    let (mut section, started) = Section::begin("replication", &args.common.data_root);
    let mut args = args.clone();
    if args.common.tiny {
        args.connections = args.connections.min(8);
        args.keys = args.keys.min(1_000);
        args.duration = args.duration.min(0.3);
        args.warmup = args.warmup.min(0.1);
        args.reps = 1;
        args.full_sync_keys = args.full_sync_keys.min(2_000);
    }
    if args.connections == 0 || args.keys == 0 {
        bail!("--connections and --keys must be at least 1");
    }
    section.parameters = format!("{args:#?}");
    let config = args.common.launch_config();
    let mut setups = Vec::new();
    let names: Vec<&'static str> = SETUPS
        .into_iter()
        .filter(|&name| !(args.no_sync_replica && name == "sync replica"))
        .collect();
    for &name in &names {
        let setup = Setup::start(name, &config, &args.replica_args)?;
        eprintln!("started {} on {}", setup.primary.name, setup.primary.addr);
        let progress = Progress::new(
            format!("preloading {}", setup.primary.name),
            args.keys,
            "keys",
        );
        load::preload(
            setup.primary.addr,
            Wire::Memcached,
            None,
            "kb:",
            args.keys,
            args.value_size,
            8,
            &progress,
        )?;
        progress.finish();
        let progress = Progress::new(
            format!("preloading {}'s players", setup.primary.name),
            args.keys,
            "players",
        );
        game::preload(
            setup.primary.addr,
            Wire::Memcached,
            Layout::TwoKeys,
            0..args.keys,
            300,
            8,
            &progress,
        )?;
        progress.finish();
        section
            .servers
            .extend(setup.primary.launches.iter().cloned());
        if let Some(replica) = &setup.replica {
            section.servers.extend(replica.launches.iter().cloned());
        }
        setups.push(setup);
    }
    let mut measured: Vec<Measured> = Vec::new();
    let total = args.reps * 2 * setups.len();
    let progress = Progress::new("measuring", total as u64, "runs");
    for rep in 0..args.reps {
        for workload in ["set", "game"] {
            for i in 0..setups.len() {
                let n = setups.len();
                let setup = &mut setups[(i + rep) % n];
                setup.primary.check_alive()?;
                let stop = Arc::new(AtomicBool::new(false));
                let lag = Arc::new(Mutex::new(Vec::new()));
                let sampler = setup.replica.as_ref().map(|_| {
                    let (addr, stop, lag) =
                        (setup.primary.addr, Arc::clone(&stop), Arc::clone(&lag));
                    std::thread::spawn(move || sample_lag(addr, stop, lag))
                });
                let seed = args.common.seed.wrapping_add(rep as u64);
                let replica_pids = setup.replica.as_ref().map(|r| r.pids.clone());
                let replica_before = replica_pids.as_deref().and_then(stats::servers_cpu_secs);
                let began = Instant::now();
                let (rate, p99_us, errors, primary_cpu) = match workload {
                    "set" => {
                        let spec = LoadSpec {
                            addr: setup.primary.addr,
                            wire: Wire::Memcached,
                            connections: args.connections,
                            threads: args.client_threads,
                            deal: Deal::RoundRobin,
                            keys: KeyChooser::new(Distribution::Uniform, args.keys),
                            key_prefix: "kb:".to_string(),
                            value_len: args.value_size,
                            mix: OpMix::Set,
                            warmup: Duration::from_secs_f64(args.warmup),
                            duration: Duration::from_secs_f64(args.duration),
                            seed,
                            tls: None,
                        };
                        let r = load::run(&spec, &setup.primary.pids)?;
                        (
                            r.ops_per_sec(),
                            r.histogram.value_at_quantile(0.99),
                            r.errors,
                            r.cpu.server,
                        )
                    }
                    _ => {
                        let start = Instant::now() + Duration::from_millis(20);
                        let plan = Plan {
                            wire: Wire::Memcached,
                            layout: Layout::TwoKeys,
                            chooser: KeyChooser::new(Distribution::Uniform, args.keys),
                            row_size: 300,
                            window: crate::window::Window::new(
                                start,
                                args.warmup,
                                args.duration,
                                u64::from(args.common.tiny),
                            ),
                        };
                        let r = game::measure_backend(
                            &setup.primary,
                            args.connections,
                            args.client_threads,
                            &plan,
                            start,
                            seed,
                        )?;
                        (
                            r.transactions as f64 / r.window.as_secs_f64(),
                            r.transaction.value_at_quantile(0.99),
                            r.failures,
                            r.cpu.server,
                        )
                    }
                };
                let replica_after = replica_pids.as_deref().and_then(stats::servers_cpu_secs);
                let replica_cpu =
                    stats::cpu_percent(replica_before, replica_after, began.elapsed());
                // Percent of a core over operations a second: CPU µs per operation.
                let primary_us_per_op = primary_cpu
                    .filter(|_| rate > 0.0)
                    .map(|pct| pct * 10_000.0 / rate);
                stop.store(true, Ordering::Relaxed);
                if let Some(sampler) = sampler {
                    let _ = sampler.join();
                }
                let lag = std::mem::take(&mut *lag.lock().unwrap_or_else(|e| e.into_inner()));
                progress.println(&format!(
                    "rep {} {workload:<4} {:<14} {rate:>9.0}/s  p99 {p99_us} us  primary {:.1} cpu us/op  replica cpu {:.0}%  lag max {} bytes{}",
                    rep + 1,
                    setup.name,
                    primary_us_per_op.unwrap_or(0.0),
                    replica_cpu.unwrap_or(0.0),
                    lag.iter().max().copied().unwrap_or(0),
                    if errors > 0 { format!("  errors {errors}") } else { String::new() }
                ));
                progress.add(1);
                measured.push(Measured {
                    setup: setup.name,
                    workload,
                    rate,
                    p99_us,
                    lag,
                    errors,
                    primary_us_per_op,
                    replica_cpu,
                });
            }
        }
    }
    progress.finish();
    drop(setups);
    let full_sync = if args.full_sync_keys > 0 {
        Some(time_full_sync(&config, args.full_sync_keys)?)
    } else {
        None
    };
    report(&args, &measured, full_sync, &mut section)?;
    section.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(section)
}

/// What a full synchronisation took: keys, the primary's log bytes, seconds.
struct FullSync {
    keys: u64,
    log_bytes: u64,
    secs: f64,
}

/// Loads `keys` keys on a primary, starts a fresh replica, and times it until its log
/// reaches the primary's synced end.
fn time_full_sync(config: &LaunchConfig, keys: u64) -> Result<FullSync> {
    let mut primary = kura(config, &[])?;
    primary.name = "kura (full sync primary)".into();
    let progress = Progress::new("loading the primary for a full copy", keys, "keys");
    load::preload(
        primary.addr,
        Wire::Memcached,
        None,
        "fs:",
        keys,
        100,
        16,
        &progress,
    )?;
    progress.finish();
    let target = stat_u64(&replication_stats(primary.addr)?, "synced_lsn").unwrap_or(0);
    let began = Instant::now();
    let replica = kura(config, &[format!("--replica-of={}", primary.addr)])?;
    loop {
        let stats = replication_stats(replica.addr)?;
        if stat_u64(&stats, "synced_lsn").is_some_and(|lsn| lsn >= target) {
            break;
        }
        if began.elapsed() > Duration::from_secs(3600) {
            bail!("the full copy took over an hour");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let secs = began.elapsed().as_secs_f64();
    eprintln!("full copy of {keys} keys ({target} log bytes): {secs:.1} s");
    Ok(FullSync {
        keys,
        log_bytes: target,
        secs,
    })
}

fn report(
    args: &ReplicationArgs,
    measured: &[Measured],
    full_sync: Option<FullSync>,
    section: &mut Section,
) -> Result<()> {
    let names: Vec<&str> = SETUPS
        .into_iter()
        .filter(|&name| measured.iter().any(|m| m.setup == name))
        .collect();
    let mut table = Table::new(&[
        "workload",
        "setup",
        "median /s",
        "to no replica",
        "p99 us",
        "primary cpu us/op",
        "cpu/op to no replica",
        "replica cpu %",
        "lag median bytes",
        "lag max bytes",
        "errors",
    ]);
    let mut csv = Csv::new(&[
        "workload",
        "setup",
        "rate_per_sec",
        "p99_us",
        "primary_cpu_us_per_op",
        "replica_cpu_percent",
        "lag_median_bytes",
        "lag_max_bytes",
        "errors",
    ]);
    for m in measured {
        csv.push(vec![
            m.workload.to_string(),
            m.setup.to_string(),
            format!("{:.0}", m.rate),
            m.p99_us.to_string(),
            opt(m.primary_us_per_op, 2),
            opt(m.replica_cpu, 0),
            median_u64(&m.lag).to_string(),
            m.lag.iter().max().copied().unwrap_or(0).to_string(),
            m.errors.to_string(),
        ]);
    }
    let rate = |workload: &str, setup: &str| {
        let rates: Vec<f64> = measured
            .iter()
            .filter(|m| m.workload == workload && m.setup == setup)
            .map(|m| m.rate)
            .collect();
        median(&rates).unwrap_or(0.0)
    };
    let median_of = |workload: &str, setup: &str, f: &dyn Fn(&Measured) -> Option<f64>| {
        let values: Vec<f64> = measured
            .iter()
            .filter(|m| m.workload == workload && m.setup == setup)
            .filter_map(f)
            .collect();
        median(&values)
    };
    for workload in ["set", "game"] {
        let alone = rate(workload, "no replica");
        for &setup in &names {
            let of: Vec<&Measured> = measured
                .iter()
                .filter(|m| m.workload == workload && m.setup == setup)
                .collect();
            let lags: Vec<u64> = of.iter().flat_map(|m| m.lag.iter().copied()).collect();
            let p99: Vec<f64> = of.iter().map(|m| m.p99_us as f64).collect();
            let r = rate(workload, setup);
            let cpu_alone = median_of(workload, "no replica", &|m| m.primary_us_per_op);
            let cpu = median_of(workload, setup, &|m| m.primary_us_per_op);
            table.push(vec![
                workload.to_string(),
                setup.to_string(),
                format!("{r:.0}"),
                if alone > 0.0 {
                    format!("{:.2}", r / alone)
                } else {
                    "-".into()
                },
                format!("{:.0}", median(&p99).unwrap_or(0.0)),
                opt(cpu, 2),
                match (cpu, cpu_alone) {
                    (Some(c), Some(a)) if a > 0.0 => format!("{:.2}", c / a),
                    _ => "-".into(),
                },
                opt(median_of(workload, setup, &|m| m.replica_cpu), 0),
                if setup == "no replica" {
                    "-".into()
                } else {
                    median_u64(&lags).to_string()
                },
                if setup == "no replica" {
                    "-".into()
                } else {
                    lags.iter().max().copied().unwrap_or(0).to_string()
                },
                of.iter().map(|m| m.errors).sum::<u64>().to_string(),
            ]);
        }
    }
    println!("{}", table.render());
    section.tables.push((
        format!(
            "Sets and game transactions on the primary, {} connections, medians of {} repetitions",
            args.connections, args.reps
        ),
        table,
    ));
    if let Some(f) = full_sync {
        let mut t = Table::new(&["keys", "log bytes", "seconds", "MB/s"]);
        t.push(vec![
            f.keys.to_string(),
            f.log_bytes.to_string(),
            format!("{:.1}", f.secs),
            format!("{:.1}", f.log_bytes as f64 / f.secs.max(1e-9) / 1e6),
        ]);
        println!("{}", t.render());
        section
            .tables
            .push(("Full synchronisation of a fresh replica".into(), t));
    }
    section.summary = "What one replica on the same machine costs its primary, and its lag".into();
    let path = csv.write(&args.common.out_dir, "replication")?;
    let chart = Chart {
        title: "The primary's throughput with a replica, as a ratio to none".to_string(),
        x_label: "workload".to_string(),
        y_label: "ratio to no replica".to_string(),
        kind: Kind::Bars,
        categories: vec!["set".to_string(), "game".to_string()],
        series: names
            .iter()
            .map(|setup| {
                let ratios = ["set", "game"]
                    .iter()
                    .map(|w| {
                        let alone = rate(w, "no replica");
                        (alone > 0.0).then(|| rate(w, setup) / alone)
                    })
                    .collect();
                (setup.to_string(), ratios)
            })
            .collect(),
    };
    let files = chart.write_beside(&path)?;
    println!("wrote {files}");
    section.charts.push(files);
    section.csv = path;
    Ok(())
}

fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
}

fn median_u64(values: &[u64]) -> u64 {
    let as_f64: Vec<f64> = values.iter().map(|&v| v as f64).collect();
    median(&as_f64).unwrap_or(0.0) as u64
}
