//! The SQL workload's report: per setting, phase and backend the rates, latencies,
//! disk reads and CPU, Kura over MariaDB, Kura's SQL select over its memcached `get`,
//! the loads, and the chart.

use super::*;

/// KiB read from storage per operation over `reps`, where `/proc` said.
pub(super) fn disk_kib_per_op(reps: &[PhaseResult]) -> Option<f64> {
    let (mut bytes, mut ops) = (0u64, 0u64);
    for r in reps {
        bytes += r.storage_read_bytes?;
        ops += r.ops;
    }
    (ops > 0).then(|| bytes as f64 / 1024.0 / ops as f64)
}

pub(super) fn median_ops(reps: &[PhaseResult]) -> Option<f64> {
    median(
        &reps
            .iter()
            .map(PhaseResult::ops_per_sec)
            .collect::<Vec<_>>(),
    )
}

pub(super) fn report(
    args: &SqlArgs,
    hierarchy: Option<&Hierarchy>,
    settings: &[SettingResult],
    section: &mut Section,
) -> Result<()> {
    section.summary = format!(
        "Kura's SQL port against MariaDB over the same `players` rows, same client, {} \
         connections of one thread each per phase, {} s measured after {} s warm-up, median \
         ops/s of {} repetition(s); latency in µs over all repetitions. Settings: {}.",
        args.connections,
        args.duration,
        args.warmup,
        args.reps,
        settings
            .iter()
            .map(|s| format!(
                "{} ({} rows of {} bytes, {} MiB of data)",
                s.label,
                s.shape.rows,
                s.shape.row_size,
                s.shape.data_bytes() >> 20
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("\nsql: {}", section.summary);
    // Every backend of any setting, in order of first appearance.
    let mut names: Vec<String> = Vec::new();
    let mut kuras: Vec<String> = Vec::new();
    for b in settings.iter().flat_map(|s| &s.backends) {
        if !names.contains(&b.name) {
            names.push(b.name.clone());
            if b.kura {
                kuras.push(b.name.clone());
            }
        }
    }
    let has_mariadb = names.iter().any(|n| n == "mariadb");
    let mut header = vec!["setting".to_string(), "phase".to_string()];
    header.extend(names.iter().map(|n| format!("{n} ops/s")));
    if has_mariadb {
        header.extend(kuras.iter().map(|k| format!("{k} / mariadb")));
    }
    let mut ops_table = Table {
        header,
        rows: Vec::new(),
    };
    let mut details = Table::new(&[
        "setting",
        "phase",
        "backend",
        "ops/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "disk KiB/op",
        "client cpu %",
        "server cpu %",
        "server µs/op",
        "kernel cpu %",
        "others cpu %",
        "failures",
    ]);
    let mut csv = Csv::new(&[
        "setting",
        "phase",
        "backend",
        "outcome",
        "rows",
        "data_bytes",
        "row_size",
        "mem_limit_mib",
        "connections",
        "reps",
        "ops_per_sec",
        "ratio_to_mariadb",
        "p50_us",
        "p99_us",
        "p999_us",
        "disk_kib_per_op",
        "client_cpu_percent",
        "server_cpu_percent",
        "server_cpu_us_per_op",
        "kernel_cpu_percent",
        "others_cpu_percent",
        "failures",
        "load_secs",
        "rss_mib",
        "cgroup_mib",
        "cgroup_peak_mib",
    ]);
    let mut categories = Vec::new();
    let mut series: Vec<(String, Vec<Option<f64>>)> =
        names.iter().map(|n| (n.clone(), Vec::new())).collect();
    let mut failures = 0u64;
    let mut first_failure = None;
    for s in settings {
        let mariadb = s.backends.iter().position(|b| b.name == "mariadb");
        for (pi, &phase) in args.phases.iter().enumerate() {
            let ops: Vec<Option<f64>> = s.results[pi].iter().map(|r| median_ops(r)).collect();
            let of = |name: &str| {
                s.backends
                    .iter()
                    .position(|b| b.name == name)
                    .and_then(|bi| ops[bi])
            };
            let mut row = vec![s.label.clone(), phase.label().to_string()];
            row.extend(
                names
                    .iter()
                    .map(|n| match s.backends.iter().find(|b| &b.name == n) {
                        Some(b) if !matches!(b.fate, Fate::Measured) => b.fate.text().to_string(),
                        _ => opt(of(n), 0),
                    }),
            );
            if has_mariadb {
                let peer = mariadb.and_then(|m| ops[m]);
                row.extend(
                    kuras
                        .iter()
                        .map(|k| opt(of(k).zip(peer).map(|(k, p)| k / p), 2)),
                );
            }
            ops_table.push(row);
            categories.push(format!("{} {}", short(phase), s.tag));
            for (name, values) in &mut series {
                values.push(of(name));
            }
            for (bi, b) in s.backends.iter().enumerate() {
                let reps = &s.results[pi][bi];
                let applies = phase != Phase::Get || b.kura;
                if !applies {
                    continue;
                }
                let latency = merged(reps)?;
                let fails: u64 = reps.iter().map(|r| r.failures).sum();
                failures += fails;
                if first_failure.is_none() {
                    first_failure = reps
                        .iter()
                        .find_map(|r| r.first_failure.clone())
                        .map(|why| format!("{} {} ({}): {why}", b.name, phase.label(), s.label));
                }
                let cpu = |f: &dyn Fn(&PhaseResult) -> Option<f64>| {
                    median(&reps.iter().filter_map(f).collect::<Vec<_>>())
                };
                let q = |p: f64| quantile(&latency, p);
                let ratio = mariadb
                    .and_then(|m| ops[m])
                    .zip(ops[bi])
                    .map(|(p, k)| k / p);
                let disk = disk_kib_per_op(reps);
                let client_cpu = cpu(&|r| r.cpu.client);
                let server_cpu = cpu(&|r| r.cpu.server);
                let kernel_cpu = cpu(&|r| r.cpu.kernel);
                let others_cpu = cpu(&|r| r.cpu.others);
                // CPU time the server spent per operation: what it costs, whoever else
                // was using the machine.
                let server_us = server_cpu.zip(ops[bi]).map(|(c, o)| c * 1e4 / o);
                details.push(vec![
                    s.label.clone(),
                    phase.label().to_string(),
                    b.name.clone(),
                    match b.fate {
                        Fate::Measured => opt(ops[bi], 0),
                        _ => b.fate.text().to_string(),
                    },
                    q(0.5),
                    q(0.99),
                    q(0.999),
                    opt(disk, 1),
                    opt(client_cpu, 0),
                    opt(server_cpu, 0),
                    opt(server_us, 0),
                    opt(kernel_cpu, 0),
                    opt(others_cpu, 0),
                    fails.to_string(),
                ]);
                csv.push(vec![
                    s.setting.csv_name().to_string(),
                    phase.csv_name().to_string(),
                    b.name.clone(),
                    b.fate.outcome().to_string(),
                    s.shape.rows.to_string(),
                    s.shape.data_bytes().to_string(),
                    s.shape.row_size.to_string(),
                    match s.setting {
                        Setting::Memory => "-".to_string(),
                        Setting::Limit => args.mem_limit_mib.to_string(),
                    },
                    args.connections.to_string(),
                    reps.len().to_string(),
                    opt(ops[bi], 1),
                    opt(ratio, 3),
                    q(0.5),
                    q(0.99),
                    q(0.999),
                    opt(disk, 2),
                    opt(client_cpu, 1),
                    opt(server_cpu, 1),
                    opt(server_us, 1),
                    opt(kernel_cpu, 1),
                    opt(others_cpu, 1),
                    fails.to_string(),
                    format!("{:.2}", b.load_secs),
                    mib(b.rss_bytes),
                    mib(b.cgroup_bytes),
                    mib(b.cgroup_peak_bytes),
                ]);
            }
        }
    }
    let loads = loads_table(settings);
    let versus_get = versus_get_table(args, settings)?;
    println!(
        "\n{}\n{}\n{}\n{}",
        ops_table.render(),
        versus_get.render(),
        details.render(),
        loads.render()
    );
    let path = csv.write(&args.common.out_dir, "sql")?;
    println!("wrote {}", path.display());
    section.csv = path.clone();
    let chart = Chart {
        title: format!(
            "SQL over the same rows: Kura and MariaDB ({} connections)",
            args.connections
        ),
        x_label: format!(
            "phase and setting (mem: data in memory; {}x: {} times a {} MiB limit)",
            ratio_label(args.limit_ratio),
            ratio_label(args.limit_ratio),
            args.mem_limit_mib
        ),
        y_label: "operations/s (median)".into(),
        kind: Kind::Bars,
        categories,
        series,
    };
    let files = chart.write_beside(&path)?;
    println!("wrote {files}");
    section.charts.push(files);
    section.tables.push((
        "Median operations per second by setting and phase, and Kura's over MariaDB's \
         (above 1: Kura ahead). `memcached get` is Kura's memcached port, for the ratio \
         below:"
            .to_string(),
        ops_table,
    ));
    section.tables.push((
        "Per setting, phase and backend: latency in µs over all repetitions, what the \
         server read from storage per operation in the measured windows (`read_bytes` of \
         `/proc/<pid>/io`: reads that missed every cache, the page cache included), median \
         CPU use (percent of one core; server µs/op is the server's CPU time per operation, \
         which other tenants of the machine move less than its ops/s) and wrong or error \
         replies:"
            .to_string(),
        details,
    ));
    section.tables.push((
        "Loading (multi-row INSERTs over SQL) and memory after the measurements: the \
         server's RSS and, at the limit, its cgroup's charge (page cache included), now \
         and at its peak:"
            .to_string(),
        loads,
    ));
    if let Some(table) = kura_ratios(&chart, Better::Higher, |c| !c.starts_with("get ")) {
        section.ratios.push((
            "Kura over MariaDB, same run, same client: Kura's operations per second divided \
             by MariaDB's (above 1: Kura ahead)."
                .to_string(),
            table,
        ));
    }
    if !versus_get.rows.is_empty() {
        section.ratios.push((
            "Kura's SQL point select (`SELECT * … WHERE id=`) over its memcached `get` of \
             the same row (`@@players.<id>`), same connections and client threads, same run:"
                .to_string(),
            versus_get,
        ));
    }
    section.notes.push(format!(
        "**The rows.** One table on both servers, created by the same statement: `{TABLE_DDL}`. \
         Row `id` has email `player<id>@example.com`, level `id % levels` with `levels = \
         rows / {ROWS_PER_LEVEL}` (each level's rows spread over the table), name \
         `player<id>`, score 0 and padding that makes its values `row_size` bytes as text \
         (the summary above gives each setting's). MariaDB was loaded by {} connections of \
         {INSERT_ROWS}-row INSERTs; Kura {}.",
        args.load_connections,
        match args.kura_load {
            KuraLoad::Sql => "the same way".to_string(),
            KuraLoad::Memcached => format!(
                "by as many connections of `set @@players.<id>` through its memcached port, \
                 {SET_ROWS} pipelined at a time (`--kura-load memcached`): the same table \
                 write, unique and ordered index entries included"
            ),
        }
    ));
    section.notes.push(
        "**The phases**, each on its own, rows chosen uniformly: `SELECT * FROM players \
         WHERE id=<id>`; `… WHERE email='player<id>@example.com'`; `… WHERE level BETWEEN \
         <l> AND <l+1> ORDER BY level LIMIT 10`; `UPDATE players SET score=score+1 WHERE \
         id=<id>` autocommitted (Kura replies once the change is durable under its \
         durability mode, MariaDB's InnoDB flushes its log at each commit); memcached `get \
         @@players.<id>` through Kura. Every reply is checked: the whole right row, ten \
         rows of level l, one affected row, the row's fields."
            .to_string(),
    );
    if let Some(hierarchy) = hierarchy {
        let plan = datasize::memory_plan(&BackendKind::Mariadb, args.mem_limit_mib);
        section.notes.push(format!(
            "**At the limit** each server ran in its own memory cgroup ({}) of {} MiB, page \
             cache included, joined before it executed: MariaDB with an InnoDB buffer pool \
             of {} MiB and its unused caches cut to 8 MiB, Kura with `-m` half the limit \
             (unless `--kura-arg` gave one), as in the datasize workload. A server the OOM \
             killer killed, or that refused rows while loading, is reported so and not \
             measured.",
            hierarchy.describe(),
            args.mem_limit_mib,
            plan.buffer_pool_mib
        ));
    }
    if failures > 0 {
        section.failure = Some(format!(
            "{failures} replies were wrong or errors (first: {})",
            first_failure.unwrap_or_default()
        ));
    }
    Ok(())
}

/// Every repetition's latencies in one histogram.
pub(super) fn merged(reps: &[PhaseResult]) -> Result<Histogram<u64>> {
    let mut all = stats::new_histogram()?;
    for r in reps {
        all.add(&r.latency)?;
    }
    Ok(all)
}

/// A latency quantile in µs, or `-` when nothing was measured.
pub(super) fn quantile(latency: &Histogram<u64>, q: f64) -> String {
    if latency.is_empty() {
        "-".to_string()
    } else {
        latency.value_at_quantile(q).to_string()
    }
}

/// Per setting and backend: how loading went, and memory after the measurements.
pub(super) fn loads_table(settings: &[SettingResult]) -> Table {
    let mut loads = Table::new(&[
        "setting",
        "backend",
        "outcome",
        "rows",
        "data MiB",
        "load s",
        "rows/s",
        "server RSS MiB",
        "cgroup MiB",
        "cgroup peak MiB",
    ]);
    for s in settings {
        for b in &s.backends {
            let rows_per_sec = (matches!(b.fate, Fate::Measured) && b.load_secs > 0.0)
                .then(|| s.shape.rows as f64 / b.load_secs);
            loads.push(vec![
                s.label.clone(),
                b.name.clone(),
                b.fate.text().to_string(),
                s.shape.rows.to_string(),
                (s.shape.data_bytes() >> 20).to_string(),
                format!("{:.1}", b.load_secs),
                opt(rows_per_sec, 0),
                mib(b.rss_bytes),
                mib(b.cgroup_bytes),
                mib(b.cgroup_peak_bytes),
            ]);
        }
    }
    loads
}

/// Per setting and Kura backend: its SQL point select against its memcached `get`.
pub(super) fn versus_get_table(args: &SqlArgs, settings: &[SettingResult]) -> Result<Table> {
    let mut table = Table::new(&[
        "setting",
        "backend",
        "select by pk ops/s",
        "memcached get ops/s",
        "select / get",
        "select p50 us",
        "get p50 us",
    ]);
    let pk = args.phases.iter().position(|p| *p == Phase::Pk);
    let get = args.phases.iter().position(|p| *p == Phase::Get);
    let (Some(pk), Some(get)) = (pk, get) else {
        return Ok(table);
    };
    for s in settings {
        for (bi, b) in s.backends.iter().enumerate().filter(|(_, b)| b.kura) {
            let (selects, gets) = (&s.results[pk][bi], &s.results[get][bi]);
            let (select, got) = (median_ops(selects), median_ops(gets));
            table.push(vec![
                s.label.clone(),
                b.name.clone(),
                opt(select, 0),
                opt(got, 0),
                opt(select.zip(got).map(|(s, g)| s / g), 2),
                quantile(&merged(selects)?, 0.5),
                quantile(&merged(gets)?, 0.5),
            ]);
        }
    }
    Ok(table)
}

/// A phase's name in chart categories.
pub(super) fn short(phase: Phase) -> &'static str {
    match phase {
        Phase::Pk => "pk",
        Phase::Email => "email",
        Phase::Range => "range",
        Phase::PkRange => "pk-range",
        Phase::OrderLimit => "order",
        Phase::Update => "update",
        Phase::Get => "get",
    }
}
