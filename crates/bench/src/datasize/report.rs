//! The data-size workload's report: its tables, chart and notes, from what `run`
//! measured.

use anyhow::Result;

use super::{data_bytes, memory_plan, mib, ratio_label, Cell, DatasizeArgs, Subject};
use crate::backend::BackendKind;
use crate::cgroup::Hierarchy;
use crate::chart::{Chart, Kind};
use crate::progress::human;
use crate::report::{kura_ratios, opt, Better, Csv, Section, Table};
use crate::stats;

pub(super) fn report(
    args: &DatasizeArgs,
    hierarchy: &Hierarchy,
    sizes: &[(f64, u64)],
    subjects: &[Subject],
    section: &mut Section,
) -> Result<()> {
    let limit = args.mem_limit_mib;
    section.summary = format!(
        "The game's transaction (get player, update, get by email) at {} connections over \
         {} client threads as the data grows from {}x to {}x a memory limit of {limit} MiB \
         per backend (a cgroup; page cache included). {}-byte rows, {:?} keys, {} s \
         measured after {} s warm-up, median TPS of {} repetition(s).",
        args.connections,
        args.client_threads,
        ratio_label(sizes.first().map(|s| s.0).unwrap_or(0.0)),
        ratio_label(sizes.last().map(|s| s.0).unwrap_or(0.0)),
        args.row_size,
        args.distribution,
        args.duration,
        args.warmup,
        args.reps
    );
    println!("\ndatasize: {}", section.summary);
    let mut header = vec![
        "data / limit".to_string(),
        "data MiB".to_string(),
        "players".to_string(),
    ];
    header.extend(subjects.iter().map(|s| format!("{} TPS", s.name)));
    let mut tps_table = Table {
        header,
        rows: Vec::new(),
    };
    let mut details = Table::new(&[
        "data / limit",
        "backend",
        "outcome",
        "TPS",
        "txn p50 us",
        "txn p99 us",
        "load s",
        "load MB/s",
        "server RSS MiB",
        "cgroup MiB",
        "cgroup peak MiB",
        "disk KiB/txn",
        "failures",
    ]);
    let mut csv = Csv::new(&[
        "ratio",
        "data_bytes",
        "players",
        "backend",
        "outcome",
        "reps",
        "tps_median",
        "txn_p50_us",
        "txn_p99_us",
        "get_player_p50_us",
        "set_player_p50_us",
        "get_by_email_p50_us",
        "load_secs",
        "rss_mib",
        "cgroup_usage_mib",
        "cgroup_peak_mib",
        "oom_kills",
        "storage_read_kib_per_txn",
        "failures",
        "mem_limit_mib",
        "row_size",
        "connections",
    ]);
    let mut previous_bytes = 0;
    for (size, &(ratio, players)) in sizes.iter().enumerate() {
        let bytes = data_bytes(players, args.row_size);
        let label = ratio_label(ratio);
        let mut row = vec![
            label.clone(),
            format!("{}", bytes >> 20),
            human(players as f64),
        ];
        for subject in subjects {
            let cell = &subject.cells[size];
            let footprint = subject.footprints[size];
            row.push(cell.text());
            let (mut txn, mut steps) = (stats::new_histogram()?, Vec::new());
            let mut fails = 0;
            if let Cell::Measured(reps) = cell {
                for _ in 0..3 {
                    steps.push(stats::new_histogram()?);
                }
                for r in reps {
                    txn.add(&r.transaction)?;
                    for (mine, theirs) in steps.iter_mut().zip(r.steps.iter()) {
                        mine.add(theirs)?;
                    }
                    fails += r.failures;
                }
            }
            let measured = !txn.is_empty();
            let q = |h: &hdrhistogram::Histogram<u64>, p: f64| {
                if h.is_empty() {
                    "-".to_string()
                } else {
                    h.value_at_quantile(p).to_string()
                }
            };
            let loaded_mb = (bytes - previous_bytes) as f64 / 1e6;
            // A load cut short by a kill did not load all of it.
            let load_rate = (footprint.load_secs > 0.0 && matches!(cell, Cell::Measured(_)))
                .then(|| loaded_mb / footprint.load_secs);
            details.push(vec![
                label.clone(),
                subject.name.clone(),
                cell.outcome().to_string(),
                cell.text(),
                q(&txn, 0.5),
                q(&txn, 0.99),
                opt(
                    (!matches!(cell, Cell::NotRun)).then_some(footprint.load_secs),
                    1,
                ),
                opt(load_rate, 1),
                mib(footprint.rss_bytes),
                mib(footprint.cgroup_bytes),
                mib(footprint.cgroup_peak_bytes),
                opt(footprint.storage_kib_per_txn(), 1),
                if measured {
                    fails.to_string()
                } else {
                    "-".to_string()
                },
            ]);
            let step = |i: usize| steps.get(i).map(|h| q(h, 0.5)).unwrap_or("-".into());
            csv.push(vec![
                label.clone(),
                bytes.to_string(),
                players.to_string(),
                subject.name.clone(),
                cell.outcome().to_string(),
                match cell {
                    Cell::Measured(reps) => reps.len().to_string(),
                    _ => "0".to_string(),
                },
                opt(cell.tps(), 1),
                q(&txn, 0.5),
                q(&txn, 0.99),
                step(0),
                step(1),
                step(2),
                format!("{:.2}", footprint.load_secs),
                mib(footprint.rss_bytes),
                mib(footprint.cgroup_bytes),
                mib(footprint.cgroup_peak_bytes),
                footprint
                    .oom_kills
                    .map_or_else(|| "-".to_string(), |k| k.to_string()),
                opt(footprint.storage_kib_per_txn(), 2),
                fails.to_string(),
                limit.to_string(),
                args.row_size.to_string(),
                args.connections.to_string(),
            ]);
        }
        tps_table.push(row);
        previous_bytes = bytes;
    }
    println!("\n{}\n{}", tps_table.render(), details.render());
    let path = csv.write(&args.common.out_dir, "datasize")?;
    println!("wrote {}", path.display());
    section.csv = path.clone();
    let chart = Chart {
        title: "transactions per second by data size over memory limit".to_string(),
        x_label: format!("data size / memory limit ({limit} MiB per backend, page cache included)"),
        y_label: "transactions/s (median)".into(),
        kind: Kind::Lines,
        categories: sizes.iter().map(|s| ratio_label(s.0)).collect(),
        series: subjects
            .iter()
            .map(|s| (s.name.clone(), s.cells.iter().map(Cell::tps).collect()))
            .collect(),
    };
    // The picture says where a line ends and why; the ratios match plain names.
    let mut drawn = chart.clone();
    for ((name, _), subject) in drawn.series.iter_mut().zip(subjects) {
        let ended = subject.cells.iter().zip(sizes).find_map(|(cell, size)| {
            let why = match cell {
                Cell::Oom(_) => "OOM-killed",
                Cell::Refused(_) => "refused stores",
                _ => return None,
            };
            Some(format!(" ({why} at {}x)", ratio_label(size.0)))
        });
        name.push_str(&ended.unwrap_or_default());
    }
    let files = drawn.write_beside(&path)?;
    println!("wrote {files}");
    section.charts.push(files);
    section.tables.push((
        "Median transactions per second by data size (\"OOM (killed)\": the kernel \
         killed the server for exceeding its cgroup's limit at that size; \"-\": not \
         measured, the server was gone):"
            .to_string(),
        tps_table,
    ));
    section.tables.push((
        "Per size and backend: transaction latency, the time and rate of loading the \
         data added since the previous size, memory after the measurement (server \
         RSS; the cgroup's charge, page cache included, now and at its peak so far), \
         and what the server read from storage per transaction in the measured \
         windows (`read_bytes` of `/proc/<pid>/io`: reads that missed every cache, the \
         page cache included; each transaction reads two rows):"
            .to_string(),
        details,
    ));
    if let Some(mut table) = kura_ratios(&chart, Better::Higher, |_| true) {
        // Say why a ratio is missing: whose server was killed or refused.
        for (column, pair) in table.header.clone().iter().enumerate().skip(1) {
            let names: Vec<&str> = pair.split(" / ").collect();
            for (size, row) in table.rows.iter_mut().enumerate() {
                let gone: Vec<String> = names
                    .iter()
                    .filter_map(|name| subjects.iter().find(|s| s.name == *name))
                    .filter_map(|s| match &s.cells[size] {
                        Cell::Oom(_) => Some(format!("{} OOM", s.name)),
                        Cell::Refused(_) => Some(format!("{} refused", s.name)),
                        _ => None,
                    })
                    .collect();
                if !gone.is_empty() && row[column] == "-" {
                    row[column] = gone.join(", ");
                }
            }
        }
        section.ratios.push((
            "Kura over its peers, same run: Kura's TPS divided by the peer's (above 1: \
             Kura ahead; where there is no ratio, who was killed or refused stores, or \
             \"-\" when a server was already gone)."
                .to_string(),
            table,
        ));
    }
    let plan_alone = memory_plan(&BackendKind::Mariadb, limit);
    let plan_aside = memory_plan(&BackendKind::MariadbMemcached, limit);
    section.notes.push(format!(
        "**Data size** is what the client stores, per player: the row ({} bytes), the \
         keys `player:<id>` and `email:player<id>@example.com` and the id as the email \
         key's value, so `row bytes + 31 + 3 × digits(id)` bytes; data/limit is that sum \
         over all players divided by {limit} MiB. Servers' own per-item overhead (hash \
         tables, item headers, InnoDB pages and secondary structures) comes on top.",
        args.row_size
    ));
    section.notes.push(format!(
        "**Memory.** Each backend ran in its own memory cgroup ({}), limited to {limit} \
         MiB with page cache charged; every server joined the cgroup before it executed \
         (a shell wrote its PID to `cgroup.procs`, then exec'd the server), so none of \
         its memory escaped the limit. `mariadb`: InnoDB buffer pool {} MiB (half the \
         limit); Aria's page cache and MyISAM's key buffer, which InnoDB tables do not \
         use, cut to 8 MiB. `mariadb+memcached`: MariaDB and memcached in one cgroup of \
         {limit} MiB, buffer pool {} MiB and memcached `-m {}` (a quarter each: the same \
         half of the limit in caches as MariaDB alone); the client reads memcached first, \
         fills it from MariaDB on a miss, and writes updated rows through. Kura: {}",
        hierarchy.describe(),
        plan_alone.buffer_pool_mib,
        plan_aside.buffer_pool_mib,
        plan_aside.cache_mib,
        if args.common.kura_args.iter().any(|a| a.starts_with("-m")) {
            "the memory budget given with `--kura-arg` (see its command line below), \
             and nothing else from this workload."
        } else {
            "`-m` of half the limit (`kura_args()` in crates/bench/src/datasize.rs): its \
             index and the values it keeps in memory stay within it, values beyond it stay \
             on disk. Its index still holds every key (at most 16 bytes a key, about 13.6 \
             measured), so once the keys alone fill `-m` it refuses stores."
        }
    ));
    section.notes.push(
        "**How sizes follow each other.** Each backend was loaded to the smallest size, \
         measured, then loaded further to the next, so the largest size is loaded once. \
         Loading is not measured; its time is in the details table. Players are chosen \
         over all players loaded so far, so the working set is the whole data set."
            .to_string(),
    );
    Ok(())
}
