//! The compaction workload: latency while Kura reclaims its log, and what reclaiming
//! costs in writes.
//!
//! A log-structured store pays for its fast writes later, when it copies the live
//! records out of old segments so their space can be freed. That work must not stall
//! requests, and it multiplies the bytes written. This workload preloads a key space,
//! then overwrites it under a get/set mix long enough for compaction to run several
//! times, measured in one-second slices. Each slice is classed by what Kura's
//! `stats` said around it (`compaction_running` at either end, or `compactions`
//! moving during it): p99 while compaction ran against p99 while it did not, same
//! load, same run. At the end, `stats write_amplification` (bytes the log wrote per
//! byte clients wrote) and the log's size against the live data.
//!
//! Only Kura backends compact; others are left out with a note.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;

use crate::chart::{Chart, Kind};
use crate::driver::Deal;
use crate::keys::{Distribution, KeyChooser};
use crate::load::{self, LoadSpec, OpMix};
use crate::progress::Progress;
use crate::report::{opt, Csv, Section, Table};
use crate::stats::{self, median};
use crate::Common;

#[derive(Args, Debug, Clone)]
pub struct CompactionArgs {
    #[command(flatten)]
    pub common: Common,
    /// Keys in the key space, all preloaded, then overwritten at random. Few enough
    /// that the overwrites soon make the garbage compaction waits for (more than the
    /// live data, and more than a 64 MiB segment).
    #[arg(long, default_value_t = 50_000)]
    pub keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 1000)]
    pub value_size: usize,
    /// Client connections.
    #[arg(long, default_value_t = 50)]
    pub connections: usize,
    /// Client threads the connections are spread over.
    #[arg(long, default_value_t = 4)]
    pub client_threads: usize,
    /// Percentage of sets in the mix: 10, the 90/10 mix of the throughput workload,
    /// so compaction runs some of the time, not all of it, and both classes of slices
    /// fill.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub set_percent: u32,
    /// One-second slices measured per backend.
    #[arg(long, default_value_t = 40)]
    pub slices: usize,
}

impl CompactionArgs {
    /// Applies `--tiny`: a few short slices over a small key space (compaction may
    /// or may not run; the workload's plumbing is what is tested).
    fn effective(&self) -> CompactionArgs {
        let mut args = self.clone();
        if args.common.tiny {
            args.keys = args.keys.min(2_000);
            args.connections = args.connections.min(8);
            args.slices = args.slices.min(3);
        }
        args
    }
}

/// The counters of Kura's `stats` this workload reads.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    compaction_running: bool,
    compactions: u64,
    write_amplification: f64,
    log_bytes: u64,
    bytes: u64,
    compaction_reclaimed_bytes: u64,
}

/// Asks the server at `addr` for `stats`.
fn server_stats(addr: SocketAddr) -> Result<Counters> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(b"stats\r\n")?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 16 << 10];
    while !reply.ends_with(b"END\r\n") {
        let n = stream.read(&mut buf).context("reading stats")?;
        if n == 0 {
            bail!("{addr} closed the connection during stats");
        }
        reply.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&reply);
    let fields: HashMap<&str, &str> = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.strip_prefix("STAT ")?.splitn(2, ' ');
            Some((parts.next()?, parts.next()?))
        })
        .collect();
    let number = |name: &str| -> Result<u64> {
        fields
            .get(name)
            .with_context(|| format!("{addr}'s stats have no {name}: is it Kura?"))?
            .parse::<u64>()
            .with_context(|| format!("stats {name}"))
    };
    Ok(Counters {
        compaction_running: number("compaction_running")? != 0,
        compactions: number("compactions")?,
        write_amplification: fields
            .get("write_amplification")
            .and_then(|w| w.parse().ok())
            .unwrap_or(f64::NAN),
        log_bytes: number("log_bytes")?,
        bytes: number("bytes")?,
        compaction_reclaimed_bytes: number("compaction_reclaimed_bytes")?,
    })
}

/// One slice of load.
struct Slice {
    compacting: bool,
    ops_per_sec: f64,
    histogram: Histogram<u64>,
}

/// What one backend went through.
struct Outcome {
    name: String,
    slices: Vec<Slice>,
    start: Counters,
    end: Counters,
}

pub fn run(args: &CompactionArgs) -> Result<Section> {
    let (mut section, started) = Section::begin("compaction", &args.common.data_root);
    let args = args.effective();
    let mut backends = args.common.start_backends(crate::SqlBackends::Refused)?;
    let skipped: Vec<String> = backends
        .iter()
        .filter(|b| !b.name.starts_with("kura") && !b.name.starts_with("server@"))
        .map(|b| b.name.clone())
        .collect();
    backends.retain(|b| !skipped.contains(&b.name));
    if backends.is_empty() {
        bail!("compaction needs a Kura backend (kura-fsync, kura-interval, kura-none or --server)");
    }
    section.servers = backends.iter().flat_map(|b| b.launches.clone()).collect();
    section.parameters = format!("{args:#?}");
    let key_prefix = "cp:";
    let chooser = KeyChooser::new(Distribution::Uniform, args.keys);
    let mix = OpMix::Mix {
        set_percent: args.set_percent,
    };
    let mut outcomes = Vec::new();
    for b in &mut backends {
        let wire = b
            .protocol
            .wire()
            .with_context(|| format!("{} cannot run the compaction workload", b.name))?;
        load::preload_backend(
            b,
            "compaction",
            key_prefix,
            args.keys,
            args.value_size,
            args.connections,
        )?;
        let start = server_stats(b.addr)?;
        let progress = Progress::new(
            format!("{}: {} slices of 1 s", b.name, args.slices),
            args.slices as u64,
            "slices",
        );
        let mut slices = Vec::new();
        for n in 0..args.slices {
            let before = server_stats(b.addr)?;
            let spec = LoadSpec {
                addr: b.addr,
                wire,
                connections: args.connections,
                threads: args.client_threads,
                deal: Deal::Blocks,
                keys: chooser.clone(),
                key_prefix: key_prefix.to_string(),
                value_len: args.value_size,
                mix,
                warmup: Duration::from_millis(100),
                duration: Duration::from_secs(1),
                seed: args.common.seed.wrapping_add(n as u64),
                tls: None,
            };
            let r = load::run(&spec, &b.pids)?;
            let after = server_stats(b.addr)?;
            if r.misses > 0 || r.errors > 0 {
                section.failure = Some(format!(
                    "{}: {} misses and {} errors under compaction: every preloaded key must \
                     always be found",
                    b.name, r.misses, r.errors
                ));
            }
            slices.push(Slice {
                compacting: before.compaction_running
                    || after.compaction_running
                    || after.compactions != before.compactions,
                ops_per_sec: r.ops_per_sec(),
                histogram: r.histogram,
            });
            progress.add(1);
        }
        progress.finish();
        b.check_alive()?;
        outcomes.push(Outcome {
            name: b.name.clone(),
            slices,
            start,
            end: server_stats(b.addr)?,
        });
    }
    report(&args, &outcomes, &skipped, &mut section)?;
    section.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(section)
}

/// Merged latency and median slice throughput of the slices that were (or were not)
/// compacting.
fn summarize(slices: &[Slice], compacting: bool) -> Result<(usize, Histogram<u64>, Option<f64>)> {
    let mut merged = stats::new_histogram()?;
    let mut rates = Vec::new();
    for s in slices.iter().filter(|s| s.compacting == compacting) {
        merged.add(&s.histogram)?;
        rates.push(s.ops_per_sec);
    }
    Ok((rates.len(), merged, median(&rates)))
}

fn report(
    args: &CompactionArgs,
    outcomes: &[Outcome],
    skipped: &[String],
    section: &mut Section,
) -> Result<()> {
    section.summary = format!(
        "{} keys of {} bytes preloaded, then overwritten at random by a {}/{} get/set mix \
         over {} connections, measured in {} one-second slices per backend; each slice \
         classed by whether compaction ran during it.",
        args.keys,
        args.value_size,
        100 - args.set_percent,
        args.set_percent,
        args.connections,
        args.slices
    );
    let mut table = Table::new(&[
        "backend",
        "slices compacting",
        "ops/s compacting",
        "p50 us compacting",
        "p99 us compacting",
        "slices idle",
        "ops/s idle",
        "p50 us idle",
        "p99 us idle",
        "compactions",
        "reclaimed MiB",
        "write amplification",
        "log MiB / data MiB",
    ]);
    let mut csv = Csv::new(&[
        "backend",
        "compacting",
        "slices",
        "ops_per_sec_median",
        "p50_us",
        "p99_us",
        "p999_us",
        "max_us",
        "compactions",
        "write_amplification",
        "log_bytes",
        "data_bytes",
    ]);
    let q = |h: &Histogram<u64>, p: f64| {
        if h.is_empty() {
            "-".to_string()
        } else {
            h.value_at_quantile(p).to_string()
        }
    };
    for o in outcomes {
        let (busy_n, busy, busy_rate) = summarize(&o.slices, true)?;
        let (idle_n, idle, idle_rate) = summarize(&o.slices, false)?;
        let compactions = o.end.compactions - o.start.compactions;
        let reclaimed = o.end.compaction_reclaimed_bytes - o.start.compaction_reclaimed_bytes;
        table.push(vec![
            o.name.clone(),
            busy_n.to_string(),
            opt(busy_rate, 0),
            q(&busy, 0.5),
            q(&busy, 0.99),
            idle_n.to_string(),
            opt(idle_rate, 0),
            q(&idle, 0.5),
            q(&idle, 0.99),
            compactions.to_string(),
            format!("{:.0}", reclaimed as f64 / (1u64 << 20) as f64),
            format!("{:.3}", o.end.write_amplification),
            format!("{:.2}", o.end.log_bytes as f64 / o.end.bytes.max(1) as f64),
        ]);
        for (compacting, n, h, rate) in [
            (true, busy_n, &busy, busy_rate),
            (false, idle_n, &idle, idle_rate),
        ] {
            csv.push(vec![
                o.name.clone(),
                compacting.to_string(),
                n.to_string(),
                opt(rate, 1),
                q(h, 0.5),
                q(h, 0.99),
                q(h, 0.999),
                q(h, 1.0),
                compactions.to_string(),
                format!("{:.4}", o.end.write_amplification),
                o.end.log_bytes.to_string(),
                o.end.bytes.to_string(),
            ]);
        }
    }
    println!("\n{}", table.render());
    let path = csv.write(&args.common.out_dir, "compaction")?;
    println!("wrote {}", path.display());
    // Every slice's p99, and again only where compaction ran, so the eye can compare.
    let p99 =
        |s: &Slice| (!s.histogram.is_empty()).then(|| s.histogram.value_at_quantile(0.99) as f64);
    let chart = Chart {
        title: "p99 latency by one-second slice, while compacting and not".to_string(),
        x_label: "slice (seconds into the run)".to_string(),
        y_label: "p99 us".to_string(),
        kind: Kind::Lines,
        categories: (1..=args.slices).map(|n| n.to_string()).collect(),
        series: outcomes
            .iter()
            .flat_map(|o| {
                [
                    (o.name.clone(), o.slices.iter().map(p99).collect()),
                    (
                        format!("{} (compacting)", o.name),
                        o.slices
                            .iter()
                            .map(|s| if s.compacting { p99(s) } else { None })
                            .collect(),
                    ),
                ]
            })
            .collect(),
    };
    let files = chart.write_beside(&path)?;
    println!("wrote {files}");
    section.charts.push(files);
    section.csv = path;
    section.tables.push((
        "Request latency (gets and sets together) in the slices where compaction ran \
         and in those where it did not, median ops/s of those slices; compactions and \
         bytes reclaimed during the run; at the end, bytes the log wrote per byte \
         clients wrote (`stats write_amplification`, since start, preload included) and \
         the log's size over the data it holds (`log_bytes` / `bytes`):"
            .to_string(),
        table,
    ));
    section.notes.push(
        "A slice counts as compacting when `stats compaction_running` was set before or \
         after it, or `stats compactions` moved during it. Compaction starts once the \
         log holds more garbage than live data (and more than a segment), so the log \
         stays under about twice the live data."
            .to_string(),
    );
    if !skipped.is_empty() {
        section.notes.push(format!(
            "Left out (they do not compact a log): {}.",
            skipped.join(", ")
        ));
    }
    Ok(())
}
