//! The multi-get workload of seed 003 (MySQL Cluster's memcached API): the latency
//! of one `get k1 ... kn` as n grows, one request at a time on one connection.
//!
//! A server that looks keys up one by one shows latency growing with n; one that
//! serves the batch in one pass stays nearly flat. Kura's target is that a get of
//! 50 keys costs at most 3x a get of one, so the table ends with that ratio. Each
//! sample round visits every n and every backend in turn, so drift is shared.
//! On `mariadb` the request is seed 003's other side: `SELECT k, v ... WHERE k IN
//! (...)` over an InnoDB table.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;

use crate::backend::Protocol;
use crate::chart::{Chart, Kind};
use crate::keys::{key_name, Rng};
use crate::load;
use crate::progress::Progress;
use crate::report::{kura_ratios, opt, Better, Csv, Section, Table};
use crate::sql_kv::{self, KvClient};
use crate::{stats, Common};

#[derive(Args, Debug, Clone)]
pub struct MultigetArgs {
    #[command(flatten)]
    pub common: Common,
    /// Key counts per request: a list and/or ranges, e.g. `1-50` or `1,2,5,10,20,50`.
    #[arg(long, default_value = "1-50")]
    pub counts: String,
    /// Requests measured per key count and backend.
    #[arg(long, default_value_t = 200)]
    pub samples: usize,
    /// Keys preloaded; each request reads a random run of consecutive keys.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Value size in bytes (seed 003 stored 10).
    #[arg(long, default_value_t = 10)]
    pub value_size: usize,
    /// Which keys a request names: a run of consecutive keys from a random start (as
    /// seed 003; keys loaded together, so neighbours on a log-structured server's
    /// disk), or keys drawn independently (scattered wherever they were written).
    #[arg(long, value_enum, default_value_t = Pick::Run)]
    pub pick: Pick,
    /// Do not load the keys: a `--server` already holds them from an earlier run
    /// (with the same --keys and --value-size), so this run only reads.
    #[arg(long)]
    pub no_preload: bool,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    Run,
    Scattered,
}

/// The table a SQL backend serves multi-gets from.
const TABLE: &str = "multiget";

/// Parses `1-5,8,10-12` into `[1,2,3,4,5,8,10,11,12]`.
pub fn parse_counts(text: &str) -> Result<Vec<usize>> {
    let mut counts = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parse = |s: &str| {
            s.trim()
                .parse::<usize>()
                .with_context(|| format!("bad count {s:?}"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (parse(a)?, parse(b)?);
                if a > b {
                    bail!("empty range {part:?}");
                }
                counts.extend(a..=b);
            }
            None => counts.push(parse(part)?),
        }
    }
    if counts.is_empty() || counts.contains(&0) {
        bail!("--counts needs key counts of at least 1, got {text:?}");
    }
    Ok(counts)
}

pub fn run(args: &MultigetArgs) -> Result<Section> {
    let (mut section, started) = Section::begin("multiget", &args.common.data_root);
    let mut args = args.clone();
    if args.common.tiny {
        args.samples = args.samples.min(5);
        args.keys = args.keys.min(1_000);
        if args.counts == "1-50" {
            args.counts = "1,2,10,50".to_string();
        }
    }
    let counts = parse_counts(&args.counts)?;
    let widest = counts.iter().copied().max().unwrap_or(1) as u64;
    if args.keys < widest {
        bail!(
            "--keys ({}) must be at least the largest count ({widest})",
            args.keys
        );
    }
    let mut backends = args.common.start_backends(crate::SqlBackends::Accepted)?;
    section.servers = backends.iter().flat_map(|b| b.launches.clone()).collect();
    section.parameters = format!("{args:#?}");
    let prefix = "mg:";
    for b in backends.iter().filter(|_| !args.no_preload) {
        let progress = Progress::new(
            format!("preloading {} ({}-byte values)", b.name, args.value_size),
            args.keys,
            "keys",
        );
        match b.protocol {
            Protocol::Mysql => {
                sql_kv::preload(b.addr, TABLE, prefix, args.keys, args.value_size, &progress)?
            }
            other => {
                let wire = other
                    .wire()
                    .with_context(|| format!("{} cannot run multi-gets", b.name))?;
                load::preload(
                    b.addr,
                    wire,
                    None,
                    prefix,
                    args.keys,
                    args.value_size,
                    4,
                    &progress,
                )?
            }
        }
    }
    let mut clients: Vec<KvClient> = backends
        .iter()
        .map(|b| KvClient::connect(b, TABLE))
        .collect::<Result<_>>()?;
    // histograms[backend][count index]
    let mut histograms: Vec<Vec<Histogram<u64>>> = Vec::new();
    for _ in &backends {
        histograms.push(
            counts
                .iter()
                .map(|_| stats::new_histogram())
                .collect::<Result<_>>()?,
        );
    }
    let mut failures = 0u64;
    let mut rng = Rng::new(args.common.seed);
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut ids: Vec<u64> = Vec::new();
    let progress = Progress::new(
        format!("sampling {} key counts", counts.len()),
        args.samples as u64,
        "samples",
    );
    for sample in 0..args.samples {
        // Fresh connections now and then, so no backend keeps a lucky (or unlucky)
        // placement of its server thread beside the client for the whole run.
        if sample % 10 == 0 {
            for (client, b) in clients.iter_mut().zip(&backends) {
                *client = KvClient::connect(b, TABLE)?;
                // The first request on a new connection pays for its setup (thread
                // wake-ups, buffers): warm it outside the measurement.
                client.fetch(b"warm-up")?;
            }
        }
        for (c, &n) in counts.iter().enumerate() {
            let first = rng.below(args.keys - n as u64 + 1);
            ids.clear();
            while ids.len() < n {
                let id = match args.pick {
                    Pick::Run => first + ids.len() as u64,
                    // Distinct keys: a SQL `IN (...)` returns a row once however
                    // often it is named.
                    Pick::Scattered => rng.below(args.keys),
                };
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
            keys.resize_with(n, Vec::new);
            for (key, &id) in keys.iter_mut().zip(&ids) {
                key_name(key, prefix, id);
            }
            for (b, client) in clients.iter_mut().enumerate() {
                let started = Instant::now();
                let hits = client.multi_fetch(&keys)?;
                stats::record(&mut histograms[b][c], started.elapsed());
                if hits != n {
                    failures += 1;
                }
            }
        }
        progress.add(1);
        if (sample + 1) % (args.samples / 10).max(1) == 0 {
            for b in &mut backends {
                b.check_alive()?;
            }
        }
    }
    progress.finish();
    let names: Vec<String> = backends.iter().map(|b| b.name.clone()).collect();
    let mut header = vec!["keys".to_string()];
    for name in &names {
        header.push(format!("{name} p50 us"));
        header.push(format!("{name} p99 us"));
    }
    let mut table = Table {
        header,
        rows: Vec::new(),
    };
    let mut csv = Csv::new(&[
        "keys", "backend", "samples", "p50_us", "p99_us", "mean_us", "max_us",
    ]);
    for (c, &n) in counts.iter().enumerate() {
        let mut row = vec![n.to_string()];
        for (b, name) in names.iter().enumerate() {
            let h = &histograms[b][c];
            row.push(h.value_at_quantile(0.5).to_string());
            row.push(h.value_at_quantile(0.99).to_string());
            csv.push(vec![
                n.to_string(),
                name.clone(),
                h.len().to_string(),
                h.value_at_quantile(0.5).to_string(),
                h.value_at_quantile(0.99).to_string(),
                format!("{:.1}", h.mean()),
                h.max().to_string(),
            ]);
        }
        table.push(row);
    }
    // The brief's target: p50 of the widest request over p50 of the narrowest.
    let narrowest = counts.iter().copied().min().unwrap_or(1);
    let (lo, hi) = (
        counts.iter().position(|&n| n == narrowest).unwrap_or(0),
        counts.iter().position(|&n| n as u64 == widest).unwrap_or(0),
    );
    let mut ratio_row = vec![format!("{widest} vs {narrowest}")];
    for hs in &histograms {
        let (a, b) = (
            hs[lo].value_at_quantile(0.5) as f64,
            hs[hi].value_at_quantile(0.5) as f64,
        );
        ratio_row.push(opt((a > 0.0).then(|| b / a), 2));
        ratio_row.push(String::new());
    }
    table.push(ratio_row);
    section.summary = format!(
        "One `get k1 ... kn` at a time on one connection, {} samples per n, values of \
         {} bytes (latency in µs); the last row is the p50 of the widest request over \
         the narrowest's (Kura's target: at most 3).",
        args.samples, args.value_size,
    );
    println!("\nmulti-get: {}\n\n{}", section.summary, table.render());
    let path = csv.write(&args.common.out_dir, "multiget")?;
    println!("wrote {}", path.display());
    section.csv = path.clone();
    section.tables.push((
        "p50 and p99 latency in µs by keys per get:".to_string(),
        table,
    ));
    let chart = Chart {
        title: format!(
            "multi-get latency by key count (p50 of {} samples)",
            args.samples
        ),
        x_label: "keys in one get".into(),
        y_label: "p50 latency, us".into(),
        kind: Kind::Lines,
        categories: counts.iter().map(|n| n.to_string()).collect(),
        series: names
            .iter()
            .zip(&histograms)
            .map(|(n, hs)| {
                (
                    n.clone(),
                    hs.iter()
                        .map(|h| Some(h.value_at_quantile(0.5) as f64))
                        .collect(),
                )
            })
            .collect(),
    };
    let files = chart.write_beside(&path)?;
    println!("wrote {files}");
    section.charts.push(files);
    // A few representative widths; the CSV has every one.
    let shown = |n: &str| {
        ["1", "2", "5", "10", "20", "50", "100"].contains(&n)
            || counts.first().is_some_and(|c| c.to_string() == n)
            || counts.last().is_some_and(|c| c.to_string() == n)
    };
    if let Some(table) = kura_ratios(&chart, Better::Lower, shown) {
        section.ratios.push((
            "Kura over its peers, same run: the peer's p50 latency divided by Kura's \
             (above 1: Kura faster)."
                .to_string(),
            table,
        ));
    }
    if failures > 0 {
        section.failure = Some(format!(
            "{failures} multi-gets returned fewer values than keys asked for"
        ));
    }
    section.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(section)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(parse_counts("1-3,5").unwrap(), vec![1, 2, 3, 5]);
        assert_eq!(parse_counts("50").unwrap(), vec![50]);
        assert!(parse_counts("0").is_err());
        assert!(parse_counts("5-1").is_err());
        assert!(parse_counts("").is_err());
    }
}
