//! The store/fetch workload of seed 002 (the InnoDB memcached plugin post): one
//! client, S `set`s of distinct keys, then F `get`s of them, one request at a time;
//! the latency of each operation.
//!
//! One connection and no concurrency is the point: this is the latency a single
//! application thread sees, where a durable store's commit cost shows in full
//! (seed 002 found stores 4x slower than memcached, fetches 20% slower). On
//! `mariadb` a store is an autocommitted `REPLACE INTO` and a fetch a `SELECT` by
//! primary key (see `sql_kv.rs`).
//!
//! Backends take turns in rounds of a few hundred operations so drift hits each
//! alike, and each round opens a fresh connection: on two shared cores, which
//! server thread a connection lands on, and whether it shares a core with the
//! client, moves a single connection's latency by a factor of three, so one
//! connection per backend for the whole run would measure luck.

use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use hdrhistogram::Histogram;

use crate::backend::Protocol;
use crate::chart::{Chart, Kind};
use crate::keys::{key_name, value_bytes, Rng};
use crate::progress::Progress;
use crate::report::{kura_ratios, opt, Better, Csv, Section, Table};
use crate::sql_kv::{KvClient, SqlKv};
use crate::{stats, Common};

#[derive(Args, Debug, Clone)]
pub struct StoreFetchArgs {
    #[command(flatten)]
    pub common: Common,
    /// Number of stores (distinct keys).
    #[arg(long, default_value_t = 100_000)]
    pub stores: u64,
    /// Number of fetches (of stored keys, in random order).
    #[arg(long, default_value_t = 100_000)]
    pub fetches: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
}

/// The table a SQL backend stores into.
const TABLE: &str = "store_fetch";

/// Operations per backend before the next backend takes its turn.
const ROUND: u64 = 500;

struct Measured {
    histogram: Histogram<u64>,
    total_secs: f64,
    failures: u64,
}

impl Measured {
    fn new() -> Result<Measured> {
        Ok(Measured {
            histogram: stats::new_histogram()?,
            total_secs: 0.0,
            failures: 0,
        })
    }
}

pub fn run(args: &StoreFetchArgs) -> Result<Section> {
    let (mut section, started) = Section::begin("store-fetch", &args.common.data_root);
    let mut args = args.clone();
    if args.common.tiny {
        args.stores = args.stores.min(300);
        args.fetches = args.fetches.min(300);
    }
    if args.stores == 0 {
        bail!("--stores must be at least 1");
    }
    let mut backends = args.common.start_backends(crate::SqlBackends::Accepted)?;
    section.servers = backends.iter().flat_map(|b| b.launches.clone()).collect();
    section.parameters = format!("{args:#?}");
    for b in &backends {
        if b.protocol == Protocol::Mysql {
            SqlKv::create(b.addr, TABLE)?;
        }
    }
    let mut clients: Vec<KvClient> = backends
        .iter()
        .map(|b| KvClient::connect(b, TABLE))
        .collect::<Result<_>>()?;
    let count = backends.len();
    let mut stores: Vec<Measured> = (0..count).map(|_| Measured::new()).collect::<Result<_>>()?;
    let mut fetches: Vec<Measured> = (0..count).map(|_| Measured::new()).collect::<Result<_>>()?;
    let prefix = "sf:";
    let value = value_bytes(args.value_size, args.common.seed);
    let mut key = Vec::new();
    let progress = Progress::new(
        format!(
            "storing {}-byte values into {} backend(s)",
            args.value_size,
            backends.len()
        ),
        args.stores,
        "keys",
    );
    let mut next = 0;
    while next < args.stores {
        let end = (next + ROUND).min(args.stores);
        for (i, client) in clients.iter_mut().enumerate() {
            *client = KvClient::connect(&backends[i], TABLE)?;
            // The first request on a new connection pays for its setup: untimed.
            client.fetch(b"warm-up")?;
            for id in next..end {
                key_name(&mut key, prefix, id);
                let started = Instant::now();
                let stored = client.store(&key, &value)?;
                let spent = started.elapsed();
                stats::record(&mut stores[i].histogram, spent);
                stores[i].total_secs += spent.as_secs_f64();
                if !stored {
                    stores[i].failures += 1;
                }
            }
        }
        progress.add(end - next);
        next = end;
        for b in &mut backends {
            b.check_alive()?;
        }
    }
    progress.finish();
    let progress = Progress::new(
        format!("fetching from {} backend(s)", backends.len()),
        args.fetches,
        "keys",
    );
    let mut next = 0;
    while next < args.fetches {
        let end = (next + ROUND).min(args.fetches);
        for (i, client) in clients.iter_mut().enumerate() {
            *client = KvClient::connect(&backends[i], TABLE)?;
            client.fetch(b"warm-up")?;
            // Each backend fetches the same keys in the same order.
            let mut rng = Rng::new(args.common.seed ^ next);
            for _ in next..end {
                key_name(&mut key, prefix, rng.below(args.stores));
                let started = Instant::now();
                let hit = client.fetch(&key)?;
                let spent = started.elapsed();
                stats::record(&mut fetches[i].histogram, spent);
                fetches[i].total_secs += spent.as_secs_f64();
                if !hit {
                    fetches[i].failures += 1;
                }
            }
        }
        progress.add(end - next);
        next = end;
    }
    progress.finish();
    let names: Vec<String> = backends.iter().map(|b| b.name.clone()).collect();
    let mut csv = Csv::new(&[
        "operation",
        "backend",
        "count",
        "total_ms",
        "min_ms",
        "mean_ms",
        "p50_ms",
        "p99_ms",
        "max_ms",
        "ratio_mean_to_memcached",
        "failures",
    ]);
    section.summary = format!(
        "One client, {} stores then {} fetches, values of {} bytes (ms per op); backends \
         take turns every {ROUND} operations, each turn on a fresh connection.",
        args.stores, args.fetches, args.value_size
    );
    println!("\nstore/fetch: {}", section.summary);
    for (operation, measured) in [("store", &stores), ("fetch", &fetches)] {
        let mut table = Table::new(&[
            operation,
            "total ms",
            "min",
            "mean",
            "p50",
            "p99",
            "max",
            "mean vs memcached",
            "failures",
        ]);
        let base = names
            .iter()
            .position(|n| n == "memcached")
            .map(|i| measured[i].histogram.mean());
        for (name, m) in names.iter().zip(measured.iter()) {
            let h = &m.histogram;
            let ms = |us: f64| format!("{:.3}", us / 1000.0);
            let ratio = base.filter(|b| *b > 0.0).map(|b| h.mean() / b);
            let cells = vec![
                name.clone(),
                format!("{:.0}", m.total_secs * 1000.0),
                ms(h.min() as f64),
                ms(h.mean()),
                ms(h.value_at_quantile(0.5) as f64),
                ms(h.value_at_quantile(0.99) as f64),
                ms(h.max() as f64),
                opt(ratio, 2),
                m.failures.to_string(),
            ];
            table.push(cells.clone());
            let mut row = vec![operation.to_string(), name.clone(), h.len().to_string()];
            row.extend(cells[1..7].iter().cloned());
            row.push(opt(ratio, 3));
            row.push(m.failures.to_string());
            csv.push(row);
        }
        println!("\n{}", table.render());
        section
            .tables
            .push((format!("`{operation}`: milliseconds per operation:"), table));
    }
    let path = csv.write(&args.common.out_dir, "store-fetch")?;
    println!("wrote {}", path.display());
    section.csv = path.clone();
    let chart = Chart {
        title: format!(
            "store/fetch, one client, {} stores then {} fetches: mean latency",
            args.stores, args.fetches
        ),
        x_label: "operation".into(),
        y_label: "ms per operation (mean)".into(),
        kind: Kind::Bars,
        categories: vec!["store".into(), "fetch".into()],
        series: names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mean = |m: &Measured| Some(m.histogram.mean() / 1000.0);
                (n.clone(), vec![mean(&stores[i]), mean(&fetches[i])])
            })
            .collect(),
    };
    let files = chart.write_beside(&path)?;
    println!("wrote {files}");
    section.charts.push(files);
    if let Some(table) = kura_ratios(&chart, Better::Lower, |_| true) {
        section.ratios.push((
            "Kura over its peers, same run: the peer's mean latency divided by Kura's \
             (above 1: Kura faster)."
                .to_string(),
            table,
        ));
    }
    let failures: u64 = stores
        .iter()
        .chain(fetches.iter())
        .map(|m| m.failures)
        .sum();
    if failures > 0 {
        section.failure = Some(format!(
            "{failures} stores refused or fetches missed: see the table"
        ));
    }
    section.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(section)
}
