//! The throughput workload: ops/s of `get`, `set` and a get/set mix over many
//! connections, every backend side by side.
//!
//! Each backend is preloaded with the whole key space first, so gets hit. Then, for
//! each repetition, every workload runs against every backend in turn (the
//! backend order rotates each repetition), so slow drift on a shared machine is
//! spread over all of them. Reported: the median over repetitions of ops/s, of p50
//! and p99 latency, and of client and server CPU use; the ratio of each backend's
//! median ops/s to memcached's.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::backend::{Backend, Paused};
use crate::chart::{Chart, Kind};
use crate::driver::Deal;
use crate::keys::{Distribution, KeyChooser};
use crate::load::{self, LoadSpec, OpMix};
use crate::progress::Progress;
use crate::report::{kura_ratios, opt, Better, Csv, Section, Table};
use crate::stats::median;
use crate::Common;

#[derive(Args, Debug, Clone)]
pub struct ThroughputArgs {
    #[command(flatten)]
    pub common: Common,
    /// Client connections, each with one request in flight; a list (`1,8,50`)
    /// measures every workload at each count.
    #[arg(long, value_delimiter = ',', default_value = "50")]
    pub connections: Vec<usize>,
    /// Client threads the connections are spread over (each polls its share).
    #[arg(long, default_value_t = 4)]
    pub client_threads: usize,
    /// How connections are dealt to client threads: `round-robin`, which pairs each
    /// client thread with one server worker (both servers hand connections out
    /// round-robin), or `blocks` (consecutive ones to one thread, so each client thread
    /// meets every worker). Neither is what many client processes would do; see
    /// docs/bench.md for how each behaves on two cores.
    #[arg(long, value_enum, default_value_t = Deal::RoundRobin)]
    pub deal: Deal,
    /// Keys in the key space, all preloaded.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Seconds measured per workload, backend and repetition.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before each measurement, not counted.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Repetitions; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Workloads to run, comma-separated: get, set, mix.
    #[arg(long, value_delimiter = ',', default_value = "get,set,mix")]
    pub workloads: Vec<String>,
    /// Percentage of sets in the mix workload.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub set_percent: u32,
    /// How keys are chosen.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    pub distribution: Distribution,
    /// Measure every repetition on the servers started at the beginning. By default
    /// each server is started anew and preloaded again before each measurement, so
    /// that repetitions are independent: where client and server share the cores, a
    /// running server keeps the placement its threads found, and with it a fast or
    /// slow regime, across repetitions (docs/bench.md, "Lockstep pairs"). Servers
    /// given with `--server` are always measured as they are.
    #[arg(long)]
    pub reuse_servers: bool,
}

impl ThroughputArgs {
    /// Applies `--tiny`: a run of a second or two per backend.
    fn effective(&self) -> ThroughputArgs {
        let mut args = self.clone();
        if args.common.tiny {
            for c in &mut args.connections {
                *c = (*c).min(8);
            }
            args.connections.dedup();
            args.keys = args.keys.min(1_000);
            args.duration = args.duration.min(0.3);
            args.warmup = args.warmup.min(0.1);
            args.reps = 1;
        }
        args
    }
}

/// One workload at one connection count.
struct Case {
    mix: OpMix,
    connections: usize,
    /// The workload's name, with the connection count when several are measured.
    label: String,
}

/// One measurement, as it goes to the CSV.
struct Row {
    workload: String,
    label: String,
    connections: usize,
    backend: String,
    rep: usize,
    ops_per_sec: f64,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    client_cpu: Option<f64>,
    server_cpu: Option<f64>,
    kernel_cpu: Option<f64>,
    others_cpu: Option<f64>,
    misses: u64,
    errors: u64,
}

pub fn run(args: &ThroughputArgs) -> Result<Section> {
    let (mut section, started) = Section::begin("throughput", &args.common.data_root);
    let args = args.effective();
    let mixes: Vec<OpMix> = args
        .workloads
        .iter()
        .map(|w| match w.as_str() {
            "get" => Ok(OpMix::Get),
            "set" => Ok(OpMix::Set),
            "mix" => Ok(OpMix::Mix {
                set_percent: args.set_percent,
            }),
            other => bail!("unknown throughput workload {other:?}: expected get, set or mix"),
        })
        .collect::<Result<_>>()?;
    if args.connections.is_empty() || args.connections.contains(&0) {
        bail!("--connections needs counts of at least 1");
    }
    let several = args.connections.len() > 1;
    let cases: Vec<Case> = args
        .connections
        .iter()
        .flat_map(|&connections| {
            mixes.iter().map(move |&mix| Case {
                mix,
                connections,
                label: if several {
                    format!("{} {connections}c", mix.name())
                } else {
                    mix.name()
                },
            })
        })
        .collect();
    let mut backends = args.common.start_backends(crate::SqlBackends::Refused)?;
    section.servers = backends.iter().flat_map(|b| b.launches.clone()).collect();
    section.parameters = format!("{args:#?}");
    let key_prefix = "kb:";
    let preload_connections = args.connections.iter().copied().max().unwrap_or(1);
    for b in &backends {
        preload(b, key_prefix, &args, preload_connections)?;
    }
    let launch = args.common.launch_config();
    let chooser = KeyChooser::new(args.distribution, args.keys);
    let mut rows: Vec<Row> = Vec::new();
    let total = args.reps * cases.len() * backends.len();
    let mut done = 0;
    let progress = Progress::new("measuring", total as u64, "runs");
    for rep in 0..args.reps {
        for (case_index, case) in cases.iter().enumerate() {
            // Every backend was started for its first measurement; later ones restart it.
            let first = rep == 0 && case_index == 0;
            for i in 0..backends.len() {
                let count = backends.len();
                let _others = Paused::all_but(&backends, (i + rep) % count);
                let b = &mut backends[(i + rep) % count];
                if !args.reuse_servers && !first {
                    b.restart(&launch)?;
                    preload(b, key_prefix, &args, preload_connections)?;
                }
                b.check_alive()?;
                let wire = b
                    .protocol
                    .load_wire()
                    .with_context(|| format!("{} cannot run the throughput workload", b.name))?;
                let spec = LoadSpec {
                    addr: b.addr,
                    wire,
                    connections: case.connections,
                    threads: args.client_threads,
                    deal: args.deal,
                    keys: chooser.clone(),
                    key_prefix: key_prefix.to_string(),
                    value_len: args.value_size,
                    mix: case.mix,
                    warmup: Duration::from_secs_f64(args.warmup),
                    duration: Duration::from_secs_f64(args.duration),
                    seed: args.common.seed.wrapping_add(rep as u64),
                    tls: b.tls.clone(),
                };
                let r = load::run(&spec, &b.pids)?;
                b.check_alive()?;
                done += 1;
                let row = Row {
                    workload: case.mix.name(),
                    label: case.label.clone(),
                    connections: case.connections,
                    backend: b.name.clone(),
                    rep: rep + 1,
                    ops_per_sec: r.ops_per_sec(),
                    p50_us: r.histogram.value_at_quantile(0.50),
                    p99_us: r.histogram.value_at_quantile(0.99),
                    p999_us: r.histogram.value_at_quantile(0.999),
                    client_cpu: r.cpu.client,
                    server_cpu: r.cpu.server,
                    kernel_cpu: r.cpu.kernel,
                    others_cpu: r.cpu.others,
                    misses: r.misses,
                    errors: r.errors,
                };
                progress.println(&format!(
                    "[{done}/{total}] rep {} {:<9} {:<14} {:>10.0} ops/s  p50 {} us  p99 {} us  \
                     cpu: client {}% server {}% kernel {}% others {}%{}",
                    row.rep,
                    row.label,
                    row.backend,
                    row.ops_per_sec,
                    row.p50_us,
                    row.p99_us,
                    opt(row.client_cpu, 0),
                    opt(row.server_cpu, 0),
                    opt(row.kernel_cpu, 0),
                    opt(row.others_cpu, 0),
                    if row.misses + row.errors > 0 {
                        format!("  misses {} errors {}", row.misses, row.errors)
                    } else {
                        String::new()
                    }
                ));
                progress.add(1);
                rows.push(row);
            }
        }
    }
    progress.finish();
    print_summary(
        &args,
        &backends.iter().map(|b| b.name.clone()).collect::<Vec<_>>(),
        &cases,
        &rows,
        &mut section,
    );
    let mut csv = Csv::new(&[
        "workload",
        "backend",
        "rep",
        "ops_per_sec",
        "ratio_to_memcached",
        "p50_us",
        "p99_us",
        "p999_us",
        "client_cpu_percent",
        "server_cpu_percent",
        "kernel_cpu_percent",
        "others_cpu_percent",
        "misses",
        "errors",
        "connections",
        "client_threads",
        "keys",
        "value_size",
        "duration_secs",
    ]);
    for row in &rows {
        let base = median_ops(&rows, &row.label, "memcached");
        csv.push(vec![
            row.workload.clone(),
            row.backend.clone(),
            row.rep.to_string(),
            format!("{:.0}", row.ops_per_sec),
            opt(base.map(|b| row.ops_per_sec / b), 3),
            row.p50_us.to_string(),
            row.p99_us.to_string(),
            row.p999_us.to_string(),
            opt(row.client_cpu, 1),
            opt(row.server_cpu, 1),
            opt(row.kernel_cpu, 1),
            opt(row.others_cpu, 1),
            row.misses.to_string(),
            row.errors.to_string(),
            row.connections.to_string(),
            args.client_threads.to_string(),
            args.keys.to_string(),
            args.value_size.to_string(),
            args.duration.to_string(),
        ]);
    }
    let path = csv.write(&args.common.out_dir, "throughput")?;
    println!("wrote {}", path.display());
    section.csv = path.clone();
    let names: Vec<String> = backends.iter().map(|b| b.name.clone()).collect();
    let chart = Chart {
        title: format!(
            "throughput, {:?} connections, {} keys of {} bytes (median of {})",
            args.connections, args.keys, args.value_size, args.reps
        ),
        x_label: "workload".into(),
        y_label: "ops/s".into(),
        kind: Kind::Bars,
        categories: cases.iter().map(|c| c.label.clone()).collect(),
        series: names
            .iter()
            .map(|n| {
                let values = cases
                    .iter()
                    .map(|c| median_ops(&rows, &c.label, n))
                    .collect();
                (n.clone(), values)
            })
            .collect(),
    };
    let files = chart.write_beside(&path)?;
    println!("wrote {files}");
    section.charts.push(files);
    if let Some(table) = kura_ratios(&chart, Better::Higher, |_| true) {
        section.ratios.push((
            "Kura over its peers, same run: Kura's median ops/s divided by the peer's \
             (above 1: Kura ahead)."
                .to_string(),
            table,
        ));
    }
    let bad: u64 = rows.iter().map(|r| r.misses + r.errors).sum();
    if bad > 0 {
        section.failure = Some(format!(
            "{bad} misses or error replies: see the table; a preloaded key must never miss"
        ));
    }
    section.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(section)
}

/// Stores every key of the key space on `b`, so gets hit.
fn preload(b: &Backend, key_prefix: &str, args: &ThroughputArgs, connections: usize) -> Result<()> {
    load::preload_backend(
        b,
        "throughput",
        key_prefix,
        args.keys,
        args.value_size,
        connections,
    )
}

fn median_ops(rows: &[Row], label: &str, backend: &str) -> Option<f64> {
    let values: Vec<f64> = rows
        .iter()
        .filter(|r| r.label == label && r.backend == backend)
        .map(|r| r.ops_per_sec)
        .collect();
    median(&values)
}

/// Each repetition's ops/s of `backend` divided by memcached's in the same
/// repetition: one measurement each, taken minutes apart on a host whose speed drifts,
/// so pairing them cancels the drift that a ratio of medians keeps.
fn paired_ratios(rows: &[Row], label: &str, backend: &str) -> Vec<f64> {
    rows.iter()
        .filter(|r| r.label == label && r.backend == backend)
        .filter_map(|r| {
            rows.iter()
                .find(|m| m.label == label && m.backend == "memcached" && m.rep == r.rep)
                .map(|m| r.ops_per_sec / m.ops_per_sec)
        })
        .filter(|ratio| ratio.is_finite())
        .collect()
}

fn print_summary(
    args: &ThroughputArgs,
    backends: &[String],
    cases: &[Case],
    rows: &[Row],
    section: &mut Section,
) {
    section.summary = format!(
        "{:?} connections over {} client threads (dealt in {}), {} keys of {} bytes, \
         {} s measured after {} s warm-up, median of {} repetition(s){}.",
        args.connections,
        args.client_threads,
        match args.deal {
            Deal::Blocks => "blocks",
            Deal::RoundRobin => "round robin",
        },
        args.keys,
        args.value_size,
        args.duration,
        args.warmup,
        args.reps,
        if args.reuse_servers {
            ", all on the servers started at the beginning"
        } else {
            ", each on a freshly started and preloaded server"
        }
    );
    println!("\nthroughput: {}", section.summary);
    for case in cases {
        let workload = case.label.clone();
        let mut table = Table::new(&[
            &workload,
            "ops/s",
            "vs memcached",
            "paired",
            "reps ahead",
            "p50 us",
            "p99 us",
            "client cpu %",
            "server cpu %",
            "kernel cpu %",
            "others cpu %",
            "misses",
            "errors",
        ]);
        let base = median_ops(rows, &workload, "memcached");
        for backend in backends {
            let mine: Vec<&Row> = rows
                .iter()
                .filter(|r| r.label == workload && &r.backend == backend)
                .collect();
            let pick =
                |f: &dyn Fn(&Row) -> f64| median(&mine.iter().map(|r| f(r)).collect::<Vec<_>>());
            let ops = pick(&|r| r.ops_per_sec);
            // memcached against itself says nothing.
            let paired = if backend == "memcached" {
                Vec::new()
            } else {
                paired_ratios(rows, &workload, backend)
            };
            table.push(vec![
                backend.clone(),
                opt(ops, 0),
                opt(ops.zip(base).map(|(o, b)| o / b), 2),
                opt(median(&paired), 2),
                if paired.is_empty() {
                    "-".to_string()
                } else {
                    let ahead = paired.iter().filter(|&&r| r > 1.0).count();
                    format!("{ahead}/{}", paired.len())
                },
                opt(pick(&|r| r.p50_us as f64), 0),
                opt(pick(&|r| r.p99_us as f64), 0),
                opt(pick(&|r| r.client_cpu.unwrap_or(f64::NAN)), 0),
                opt(pick(&|r| r.server_cpu.unwrap_or(f64::NAN)), 0),
                opt(pick(&|r| r.kernel_cpu.unwrap_or(f64::NAN)), 0),
                opt(pick(&|r| r.others_cpu.unwrap_or(f64::NAN)), 0),
                mine.iter().map(|r| r.misses).sum::<u64>().to_string(),
                mine.iter().map(|r| r.errors).sum::<u64>().to_string(),
            ]);
        }
        println!("\n{}", table.render());
        section.tables.push((
            format!(
                "`{workload}`: median ops/s; against memcached, the ratio of medians, the \
                 median of each repetition's ratio (`paired`) and the repetitions in which \
                 the backend was faster; latency in µs; CPU use (percent of one core):"
            ),
            table,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(backend: &str, rep: usize, ops_per_sec: f64) -> Row {
        Row {
            workload: "set".into(),
            label: "set".into(),
            connections: 50,
            backend: backend.into(),
            rep,
            ops_per_sec,
            p50_us: 0,
            p99_us: 0,
            p999_us: 0,
            client_cpu: None,
            server_cpu: None,
            kernel_cpu: None,
            others_cpu: None,
            misses: 0,
            errors: 0,
        }
    }

    #[test]
    fn each_repetition_is_divided_by_memcached_in_the_same_repetition() {
        let rows = vec![
            row("memcached", 1, 100.0),
            row("kura", 1, 110.0),
            row("memcached", 2, 200.0),
            row("kura", 2, 180.0),
            // No memcached figure in this repetition: nothing to pair with.
            row("kura", 3, 500.0),
        ];
        let ratios = paired_ratios(&rows, "set", "kura");
        assert_eq!(ratios.len(), 2);
        assert!((ratios[0] - 1.1).abs() < 1e-9, "{ratios:?}");
        assert!((ratios[1] - 0.9).abs() < 1e-9, "{ratios:?}");
        assert!(paired_ratios(&rows, "get", "kura").is_empty());
    }
}
