//! The data-size workload (seed 000 part 1): the game's transaction as the data
//! grows from below to ten times above the memory a server may use.
//!
//! Seed 000 showed MySQL's TPS falling off a cliff once its data left memory, and
//! memcached in front of it making things worse while the cache was smaller than
//! the data. This workload redraws that chart for Kura and the same peers:
//! transactions per second against data size over memory limit.
//!
//! Each backend runs in its own memory cgroup (`cgroup.rs`) with `--mem-limit-mib`
//! (page cache included); it joins the cgroup before its server executes, so all
//! of its memory counts. The data set grows in steps: each backend is loaded to
//! the first size, measured with the game's transaction (`game.rs`, players
//! chosen over all players loaded so far), then loaded further to the next size,
//! and so on, so the largest size is loaded once rather than once per size. A
//! server the kernel's OOM killer kills (its cgroup's `oom_kill` count rose and
//! it died) is reported "OOM (killed)" at that size and not measured at larger
//! ones; a server that refuses stores while loading is reported "refused stores".
//! Any other failure fails the run.
//!
//! Data size is what the client stores, not what the server spends on it: per
//! player, the row (`--row-size` bytes), the key `player:<id>`, the key
//! `email:player<id>@example.com` and its value `<id>`, so
//! `row_size + 31 + 3 × digits(id)` bytes ([`data_bytes`]). Servers' own
//! overhead (hash tables, item headers, InnoDB pages and indexes) comes on top.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;

use crate::backend::{Backend, BackendKind, LaunchConfig, Paused, Protocol};
use crate::cgroup::{Hierarchy, MemoryCgroup};
use crate::game::{self, GameResult, Plan, StoreRefused};
use crate::game_sql;
use crate::keys::{Distribution, KeyChooser};
use crate::progress::Progress;
use crate::proto::Wire;
use crate::report::{opt, Section};
use crate::stats::median;
use crate::{Common, SqlBackends};

mod report;
use report::report;

#[derive(Args, Debug, Clone)]
pub struct DatasizeArgs {
    #[command(flatten)]
    pub common: Common,
    /// Memory limit of each backend's cgroup in MiB, page cache included. The
    /// workload sets MariaDB's buffer pool and the cache-aside memcached's `-m` from
    /// it (--mariadb-buffer-pool-mib and --memcached-mem-mib do not apply).
    #[arg(long, default_value_t = 256)]
    pub mem_limit_mib: u64,
    /// Data sizes to measure, as multiples of the memory limit.
    #[arg(long, value_delimiter = ',', default_value = "0.5,1,2,5,10")]
    pub ratios: Vec<f64>,
    /// Bytes in a player row.
    #[arg(long, default_value_t = 300)]
    pub row_size: usize,
    /// Connections running transactions.
    #[arg(long, default_value_t = 16)]
    pub connections: usize,
    /// Client threads the connections are spread over.
    #[arg(long, default_value_t = 4)]
    pub client_threads: usize,
    /// How players are chosen (over every player loaded so far).
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    pub distribution: Distribution,
    /// Seconds measured per size, backend and repetition.
    #[arg(long, default_value_t = 8.0)]
    pub duration: f64,
    /// Seconds of load before each measurement, not counted.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Repetitions at each size; the median TPS is reported.
    #[arg(long, default_value_t = 2)]
    pub reps: usize,
    /// Connections each load uses (memcached-protocol backends pipeline 32 players
    /// a batch on each; MariaDB takes 4 connections of 500-row INSERTs).
    #[arg(long, default_value_t = 8)]
    pub load_connections: u64,
}

/// The backends measured when `--backends` is not given.
const DEFAULT_BACKENDS: [&str; 4] = [
    "kura-fsync",
    "kura-interval",
    "mariadb",
    "mariadb+memcached",
];

/// Bytes the client stores for players `0..players` with rows of `row_size`:
/// per player, the row, `player:<id>` (7 + d), `email:player<id>@example.com`
/// (24 + d) and the id (d), for d the id's decimal digits.
pub fn data_bytes(players: u64, row_size: usize) -> u64 {
    let mut total = 0;
    let mut low = 0u64;
    let mut digits = 1u64;
    while low < players {
        // Ids low..high all have `digits` digits.
        let high = if low == 0 { 10 } else { low * 10 }.min(players);
        total += (high - low) * (row_size as u64 + 31 + 3 * digits);
        low = high;
        digits += 1;
    }
    total
}

/// The fewest players whose data is at least `bytes`.
pub fn players_for(bytes: u64, row_size: usize) -> u64 {
    let (mut low, mut high) = (0u64, bytes / (row_size as u64 + 31) + 1);
    while low < high {
        let mid = low + (high - low) / 2;
        if data_bytes(mid, row_size) >= bytes {
            high = mid;
        } else {
            low = mid + 1;
        }
    }
    low
}

/// How a backend's memory limit is split between its caches, in MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MemoryPlan {
    pub buffer_pool_mib: u64,
    pub cache_mib: u64,
}

/// MariaDB alone gets half the limit as buffer pool; with memcached in front (both
/// in one cgroup), each cache gets a quarter: the same half in caches either way,
/// the rest for the servers' own memory and the page cache.
pub(crate) fn memory_plan(kind: &BackendKind, limit_mib: u64) -> MemoryPlan {
    match kind {
        BackendKind::MariadbMemcached => MemoryPlan {
            buffer_pool_mib: (limit_mib / 4).max(8),
            cache_mib: (limit_mib / 4).max(8),
        },
        _ => MemoryPlan {
            buffer_pool_mib: (limit_mib / 2).max(8),
            cache_mib: 0,
        },
    }
}

/// mariadbd's caches for tables InnoDB does not use (Aria's page cache and
/// MyISAM's key buffer), cut from their 128 MiB defaults: inside a memory limit
/// they would take memory the buffer pool should have.
const MARIADB_SMALL_CACHES: [&str; 2] = ["--aria-pagecache-buffer-size=8M", "--key-buffer-size=8M"];

/// Kura's arguments in this workload, besides those every started Kura gets (port,
/// address, data directory, durability, threads, `--kura-arg`): its memory budget.
///
/// Kura's `-m` bounds its index and the values it keeps in memory; values beyond it
/// stay on disk. It gets half the limit, as MariaDB gets half as its buffer pool: the
/// other half is the process's own overhead and the page cache. A `-m` given with
/// `--kura-arg` wins.
fn kura_args(limit_mib: u64, extra: &[String]) -> Vec<String> {
    let mut args = Vec::new();
    if !extra.iter().any(|a| a.starts_with("-m")) {
        args.push(format!("-m{}", (limit_mib / 2).max(1)));
    }
    args.extend(extra.iter().cloned());
    args
}

/// What became of one backend at one size.
enum Cell {
    /// Loaded and measured (one result per repetition).
    Measured(Vec<GameResult>),
    /// The OOM killer killed a server of this backend at this size.
    Oom(String),
    /// The server refused stores while loading.
    Refused(String),
    /// Not measured: the backend died or refused at a smaller size.
    NotRun,
}

impl Cell {
    fn tps(&self) -> Option<f64> {
        match self {
            Cell::Measured(reps) => median(
                &reps
                    .iter()
                    .map(|r| r.transactions as f64 / r.window.as_secs_f64())
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        }
    }

    /// The TPS, or what happened instead.
    fn text(&self) -> String {
        match self {
            Cell::Measured(_) => opt(self.tps(), 0),
            Cell::Oom(_) => "OOM (killed)".to_string(),
            Cell::Refused(_) => "refused stores".to_string(),
            Cell::NotRun => "-".to_string(),
        }
    }

    fn outcome(&self) -> &'static str {
        match self {
            Cell::Measured(_) => "measured",
            Cell::Oom(_) => "oom-killed",
            Cell::Refused(_) => "refused-stores",
            Cell::NotRun => "not-run",
        }
    }
}

/// Memory and load figures of one backend at one size.
#[derive(Debug, Default, Clone, Copy)]
struct Footprint {
    load_secs: f64,
    rss_bytes: Option<u64>,
    cgroup_bytes: Option<u64>,
    cgroup_peak_bytes: Option<u64>,
    oom_kills: Option<u64>,
    /// Bytes the server read from storage during the measured windows (what missed
    /// every cache, the page cache included), and the transactions of those windows.
    storage_read_bytes: u64,
    storage_txns: u64,
}

impl Footprint {
    /// KiB read from storage per transaction, over the measured windows.
    fn storage_kib_per_txn(&self) -> Option<f64> {
        (self.storage_txns > 0)
            .then(|| self.storage_read_bytes as f64 / 1024.0 / self.storage_txns as f64)
    }
}

/// Bytes the processes `pids` have had read from storage (`read_bytes` in
/// `/proc/<pid>/io`): reads that missed the page cache and went to the device.
fn storage_read_bytes(pids: &[u32]) -> Option<u64> {
    let mut total = 0;
    for pid in pids {
        let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
        total += text
            .lines()
            .find_map(|l| l.strip_prefix("read_bytes:"))?
            .trim()
            .parse::<u64>()
            .ok()?;
    }
    Some(total)
}

/// Samples `pids`' storage reads at `start` and at `end` on a thread of its own, so
/// the figure covers the measured window only, not the warm-up.
pub(crate) fn sample_storage_reads(
    pids: Vec<u32>,
    start: Instant,
    end: Instant,
) -> std::thread::JoinHandle<Option<u64>> {
    std::thread::spawn(move || {
        std::thread::sleep(start.saturating_duration_since(Instant::now()));
        let before = storage_read_bytes(&pids)?;
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        Some(storage_read_bytes(&pids)?.saturating_sub(before))
    })
}

/// One backend under test, its cgroup and what it has been through.
struct Subject {
    // Field order is drop order: the servers stop before their cgroup is removed.
    backend: Backend,
    cgroup: MemoryCgroup,
    name: String,
    players: u64,
    alive: bool,
    cells: Vec<Cell>,
    footprints: Vec<Footprint>,
}

impl Subject {
    /// What an error while loading or measuring means: a finding (OOM kill, refused
    /// stores) to report, or a broken run.
    fn classify(&mut self, error: anyhow::Error) -> Result<Cell> {
        if let Some(refused) = error.downcast_ref::<StoreRefused>() {
            return Ok(Cell::Refused(refused.to_string()));
        }
        // The client usually sees the connection break a moment before the kernel
        // has finished with the process.
        match self.backend.exited_within(Duration::from_secs(5)) {
            Some(how) if self.cgroup.oom_kills().unwrap_or(0) > 0 => Ok(Cell::Oom(how)),
            Some(how) => Err(error.context(format!("{how}, and not by the OOM killer"))),
            None => Err(error),
        }
    }

    fn footprint(&self, load_secs: f64) -> Footprint {
        Footprint {
            load_secs,
            rss_bytes: self.backend.pids.iter().map(|&p| rss_bytes(p)).sum(),
            cgroup_bytes: self.cgroup.usage_bytes(),
            cgroup_peak_bytes: self.cgroup.peak_bytes(),
            oom_kills: self.cgroup.oom_kills(),
            storage_read_bytes: 0,
            storage_txns: 0,
        }
    }
}

/// A process's resident memory, from `/proc/<pid>/status`.
pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// `0.5`, `1`, `10`.
pub(crate) fn ratio_label(ratio: f64) -> String {
    let text = format!("{ratio:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

pub(crate) fn mib(bytes: Option<u64>) -> String {
    opt(bytes.map(|b| b as f64 / (1u64 << 20) as f64), 0)
}

impl DatasizeArgs {
    /// Applies `--tiny`: a small limit, two sizes, short windows, bigger rows (fewer
    /// players to load for the same bytes). 128 MiB, not less: mariadbd needs about
    /// 70 MiB besides its buffer pool (half the limit), and below that it is killed
    /// before the first size is loaded, leaving nothing of MariaDB's path tested.
    fn effective(&self) -> DatasizeArgs {
        let mut args = self.clone();
        if args.common.tiny {
            args.mem_limit_mib = args.mem_limit_mib.min(128);
            args.ratios = vec![0.5, 2.0];
            args.row_size = args.row_size.max(2000);
            args.connections = args.connections.min(4);
            args.duration = args.duration.min(0.5);
            args.warmup = args.warmup.min(0.2);
            args.reps = 1;
        }
        args.ratios.sort_by(f64::total_cmp);
        args.ratios.dedup();
        args
    }
}

pub fn run(args: &DatasizeArgs) -> Result<Section> {
    let (mut section, started) = Section::begin("datasize", &args.common.data_root);
    let args = args.effective();
    if args.ratios.is_empty() || args.ratios.iter().any(|r| !(*r > 0.0 && r.is_finite())) {
        bail!("--ratios needs sizes above 0, e.g. 0.5,1,2,5,10");
    }
    if args.mem_limit_mib < 16 || args.connections == 0 || args.row_size > 4000 {
        bail!("--mem-limit-mib must be at least 16, --connections at least 1, --row-size at most 4000");
    }
    section.parameters = format!("{args:#?}");
    let kinds = args
        .common
        .backend_kinds(&DEFAULT_BACKENDS, SqlBackends::Accepted)?;
    for kind in &kinds {
        match kind {
            BackendKind::External { addr } => bail!(
                "--server {addr}: the data-size workload must start its servers itself, \
                 to put them in a memory cgroup"
            ),
            BackendKind::Memcached { name } => bail!(
                "{name}: a cache alone evicts data once it is larger than memory, and the \
                 game's transaction must find every player; use mariadb+memcached"
            ),
            _ => {}
        }
    }
    let hierarchy = Hierarchy::detect()?;
    let limit_mib = args.mem_limit_mib;
    let limit_bytes = limit_mib << 20;
    let mut subjects = Vec::new();
    for kind in &kinds {
        subjects.push(start_subject(kind, &args, &hierarchy, limit_bytes)?);
    }
    section.servers = subjects
        .iter()
        .flat_map(|s| s.backend.launches.clone())
        .collect();
    let sizes: Vec<(f64, u64)> = args
        .ratios
        .iter()
        .map(|&r| {
            let players = players_for((r * limit_bytes as f64) as u64, args.row_size).max(1);
            (r, players)
        })
        .collect();
    let measurements = sizes.len() * args.reps * subjects.len();
    let mut failures = 0;
    let mut done = 0;
    for (size, &(ratio, players)) in sizes.iter().enumerate() {
        let label = ratio_label(ratio);
        for subject in subjects.iter_mut() {
            if !subject.alive {
                subject.cells.push(Cell::NotRun);
                subject.footprints.push(Footprint::default());
                continue;
            }
            let loading = Instant::now();
            match grow(subject, players, &args, &label) {
                Ok(()) => {
                    subject.cells.push(Cell::Measured(Vec::new()));
                    subject.footprints.push(Footprint::default());
                }
                Err(e) => {
                    let cell = subject.classify(e)?;
                    eprintln!("{} at {label}x: {}", subject.name, describe(&cell));
                    subject.alive = false;
                    subject.cells.push(cell);
                    subject
                        .footprints
                        .push(subject.footprint(loading.elapsed().as_secs_f64()));
                    continue;
                }
            }
            let footprint = subject.footprint(loading.elapsed().as_secs_f64());
            subject.footprints[size] = footprint;
        }
        let chooser = KeyChooser::new(args.distribution, players);
        let progress = Progress::new(
            format!("measuring at {label}x the limit"),
            (args.reps * subjects.len()) as u64,
            "runs",
        );
        for rep in 0..args.reps {
            let count = subjects.len();
            for i in 0..count {
                let measured = (i + rep) % count;
                done += 1;
                if !subjects[measured].alive {
                    progress.add(1);
                    continue;
                }
                let _others = Paused::stop(
                    subjects
                        .iter()
                        .enumerate()
                        .filter(|&(i, s)| i != measured && s.alive)
                        .flat_map(|(_, s)| s.backend.pids.iter().copied())
                        .collect(),
                );
                let subject = &mut subjects[measured];
                let start = Instant::now() + Duration::from_millis(20);
                let plan = Plan {
                    wire: subject.backend.protocol.wire().unwrap_or(Wire::Memcached),
                    layout: game::Layout::of(subject.backend.protocol),
                    chooser: chooser.clone(),
                    row_size: args.row_size,
                    window: crate::window::Window::new(
                        start,
                        args.warmup,
                        args.duration,
                        u64::from(args.common.tiny),
                    ),
                };
                let seed = args.common.seed.wrapping_add(rep as u64 * 31 + size as u64);
                let sampler = sample_storage_reads(
                    subject.backend.pids.clone(),
                    plan.window.start,
                    plan.window.end,
                );
                let measured = game::measure_backend(
                    &subject.backend,
                    args.connections,
                    args.client_threads,
                    &plan,
                    start,
                    seed,
                );
                let result = match measured {
                    Ok(r) => r,
                    Err(e) => {
                        let cell = subject.classify(e)?;
                        progress.println(&format!(
                            "[{done}/{measurements}] {label}x {:<18} {}",
                            subject.name,
                            describe(&cell)
                        ));
                        progress.add(1);
                        subject.alive = false;
                        subject.cells[size] = cell;
                        subject.footprints[size].oom_kills = subject.cgroup.oom_kills();
                        continue;
                    }
                };
                failures += result.failures;
                let read = sampler.join().ok().flatten();
                let kib_per_txn = read.map(|bytes| {
                    let footprint = &mut subject.footprints[size];
                    footprint.storage_read_bytes += bytes;
                    footprint.storage_txns += result.transactions;
                    bytes as f64 / 1024.0 / result.transactions.max(1) as f64
                });
                progress.println(&format!(
                    "[{done}/{measurements}] {label}x {:<18} {:>8.0} TPS  txn p50 {} us p99 {} us  \
                     disk {} KiB/txn  cgroup {} MiB, server RSS {} MiB{}",
                    subject.name,
                    result.transactions as f64 / result.window.as_secs_f64(),
                    result.transaction.value_at_quantile(0.5),
                    result.transaction.value_at_quantile(0.99),
                    opt(kib_per_txn, 1),
                    mib(subject.cgroup.usage_bytes()),
                    mib(subject.backend.pids.iter().map(|&p| rss_bytes(p)).sum()),
                    if result.failures > 0 {
                        format!("  failures {}", result.failures)
                    } else {
                        String::new()
                    }
                ));
                progress.add(1);
                if let Cell::Measured(reps) = &mut subject.cells[size] {
                    reps.push(result);
                }
            }
        }
        progress.finish();
        for subject in subjects.iter_mut().filter(|s| s.alive) {
            let before = subject.footprints[size];
            subject.footprints[size] = Footprint {
                storage_read_bytes: before.storage_read_bytes,
                storage_txns: before.storage_txns,
                ..subject.footprint(before.load_secs)
            };
        }
    }
    report(&args, &hierarchy, &sizes, &subjects, &mut section)?;
    if failures > 0 {
        section.failure = Some(format!(
            "{failures} transactions failed (a miss, a refused set or a wrong id): a \
             loaded player must always be found"
        ));
    }
    drop(subjects);
    section.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(section)
}

fn describe(cell: &Cell) -> String {
    match cell {
        Cell::Oom(how) => format!("OOM (killed): {how}"),
        Cell::Refused(why) => format!("refused stores: {why}"),
        other => other.text(),
    }
}

/// A backend started inside a memory cgroup of its own. Field order is drop order:
/// the servers stop before their cgroup is removed.
pub(crate) struct Limited {
    pub backend: Backend,
    pub cgroup: MemoryCgroup,
}

/// Creates a memory cgroup of `limit_bytes` for `kind` and starts its servers inside
/// it, from `config` with the caches sized from the limit: Kura's `-m` from
/// [`kura_args`], MariaDB's buffer pool and memcached's `-m` from [`memory_plan`],
/// MariaDB's unused caches cut ([`MARIADB_SMALL_CACHES`]). The `sql` workload's
/// limited setting starts its servers this way too.
pub(crate) fn start_limited(
    kind: &BackendKind,
    mut config: LaunchConfig,
    hierarchy: &Hierarchy,
    limit_bytes: u64,
) -> Result<Limited> {
    let name = kind.name();
    let cgroup_name = format!(
        "kura-bench-{}-{}",
        std::process::id(),
        name.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "-")
    );
    let cgroup = MemoryCgroup::create(hierarchy, &cgroup_name, limit_bytes)?;
    let limit_mib = limit_bytes >> 20;
    let plan = memory_plan(kind, limit_mib);
    config.cgroup_procs = Some(cgroup.procs_file());
    config.kura_args = kura_args(limit_mib, &config.kura_args);
    config.mariadb_buffer_pool_mib = u32::try_from(plan.buffer_pool_mib)?;
    config.mariadb_args = MARIADB_SMALL_CACHES.map(String::from).to_vec();
    config.memcached_mem_mib = u32::try_from(plan.cache_mib.max(1))?;
    let backend = Backend::start(kind, &config)?;
    for &pid in &backend.pids {
        // Each server joined before it executed; check rather than trust.
        if !cgroup.contains(pid) {
            cgroup.add(pid)?;
        }
        assert!(
            cgroup.contains(pid),
            "{name}'s pid {pid} is not in its cgroup"
        );
    }
    Ok(Limited { backend, cgroup })
}

/// Creates the backend's cgroup and starts its servers inside it.
fn start_subject(
    kind: &BackendKind,
    args: &DatasizeArgs,
    hierarchy: &Hierarchy,
    limit_bytes: u64,
) -> Result<Subject> {
    let name = kind.name();
    let limit_mib = limit_bytes >> 20;
    let Limited { backend, cgroup } =
        start_limited(kind, args.common.launch_config(), hierarchy, limit_bytes)?;
    if matches!(
        backend.protocol,
        Protocol::Mysql | Protocol::MysqlCacheAside { .. }
    ) {
        game_sql::create_schema(backend.addr)?;
    }
    eprintln!(
        "started {name} on {} in cgroup {} ({limit_mib} MiB)",
        backend.addr,
        cgroup.path().display()
    );
    Ok(Subject {
        backend,
        cgroup,
        name,
        players: 0,
        alive: true,
        cells: Vec::new(),
        footprints: Vec::new(),
    })
}

/// Loads players `subject.players..players` into the subject.
fn grow(subject: &mut Subject, players: u64, args: &DatasizeArgs, label: &str) -> Result<()> {
    let from = subject.players;
    if players <= from {
        return Ok(());
    }
    let ids = from..players;
    let progress = Progress::new(
        format!(
            "loading {} to {label}x ({} MiB)",
            subject.name,
            data_bytes(players, args.row_size) >> 20
        ),
        players - from,
        "players",
    );
    let b = &subject.backend;
    match b.protocol {
        Protocol::Memcached
        | Protocol::MemcachedBinary
        | Protocol::MemcachedTables
        | Protocol::Redis => game::preload(
            b.addr,
            b.protocol.wire().unwrap_or(Wire::Memcached),
            game::Layout::of(b.protocol),
            ids,
            args.row_size,
            args.load_connections,
            &progress,
        )?,
        Protocol::Mysql => game_sql::insert_players(b.addr, ids, args.row_size, &progress)?,
        Protocol::MemcachedTls => bail!(
            "{}: TLS is measured by the throughput workload only",
            b.name
        ),
        Protocol::MysqlCacheAside { cache } => {
            game_sql::insert_players(b.addr, ids.clone(), args.row_size, &progress)?;
            progress.finish();
            // The cache keeps what it can of the newest rows, as write-through
            // caching of new players would.
            game::preload(
                cache,
                Wire::Memcached,
                game::Layout::TwoKeys,
                ids,
                args.row_size,
                args.load_connections,
                &Progress::new(
                    format!("filling {}'s cache", subject.name),
                    players - from,
                    "players",
                ),
            )?;
        }
    }
    progress.finish();
    subject.players = players;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_size_counts_every_byte_the_client_stores() {
        // Player 7: row + "player:7" (8) + "email:player7@example.com" (25) + "7" (1).
        assert_eq!(data_bytes(1, 300), 300 + 8 + 25 + 1);
        assert_eq!(data_bytes(0, 300), 0);
        // Ids 0-9 have one digit, 10-99 two.
        assert_eq!(data_bytes(10, 100), 10 * (100 + 34));
        assert_eq!(data_bytes(11, 100), 10 * (100 + 34) + (100 + 37));
        for players in [1, 9, 10, 11, 99, 100, 12_345] {
            let len = |id: u64| {
                (game::encode_row(id, 0, 0, 0, 100).len().max(100)
                    + game::player_key(id).len()
                    + format!("email:{}", game::email(id)).len()
                    + id.to_string().len()) as u64
            };
            assert_eq!(data_bytes(players, 100), (0..players).map(len).sum::<u64>());
        }
    }

    #[test]
    fn players_for_is_the_least_that_reaches_the_size() {
        for bytes in [1, 334, 335, 1 << 20, 256 << 20] {
            let n = players_for(bytes, 300);
            assert!(data_bytes(n, 300) >= bytes, "{bytes}");
            assert!(n == 0 || data_bytes(n - 1, 300) < bytes, "{bytes}");
        }
    }

    #[test]
    fn caches_share_half_the_limit() {
        assert_eq!(
            memory_plan(&BackendKind::Mariadb, 256),
            MemoryPlan {
                buffer_pool_mib: 128,
                cache_mib: 0
            }
        );
        assert_eq!(
            memory_plan(&BackendKind::MariadbMemcached, 256),
            MemoryPlan {
                buffer_pool_mib: 64,
                cache_mib: 64
            }
        );
        assert_eq!(ratio_label(0.5), "0.5");
        assert_eq!(ratio_label(10.0), "10");
    }
}
