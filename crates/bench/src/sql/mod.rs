//! The SQL workload: Kura's MySQL-protocol port against MariaDB over the same rows,
//! with the same client, and Kura's SQL point select against a memcached `get` of the
//! same row through Kura.
//!
//! One table, created by the same DDL over SQL on both servers ([`TABLE_DDL`];
//! InnoDB on MariaDB), and the same rows: row `id` (0 to rows - 1) has email
//! `player<id>@example.com`, level `id % levels` with `levels = rows / 20` (so a level
//! holds at least 20 rows, spread over the whole table), name `player<id>`, score 0,
//! and padding that makes its values `--row-size` bytes as text ([`Shape`]). MariaDB
//! is loaded by multi-row `INSERT`s; Kura by `set @@players.<id>` through its
//! memcached port (`--kura-load memcached`, the default: the same table write, index
//! entries and all) or by the same `INSERT`s (`sql`). The default because it loads
//! Kura fastest and holds nothing beyond `-m` while it does (`docs/figures.md`).
//!
//! Seven phases, each measured on its own for a window of `--duration` seconds after
//! `--warmup`, with `--connections` connections of one blocking thread each (the
//! client of `mysql.rs` for SQL, of `client.rs` for memcached), rows chosen uniformly:
//!
//! - `pk`: `SELECT * FROM players WHERE id=<id>`
//! - `email`: `SELECT * FROM players WHERE email='player<id>@example.com'`
//! - `range`: `SELECT * FROM players WHERE level BETWEEN <l> AND <l+1> ORDER BY level
//!   LIMIT 10`: a range of ten by an index (`KEY level`)
//! - `pk-range`: `SELECT * FROM players WHERE id BETWEEN <id> AND <id+9> ORDER BY id`:
//!   a range of ten by primary key
//! - `order-limit`: `SELECT * FROM players WHERE id <= <id> ORDER BY id DESC LIMIT 10`:
//!   ten rows in the primary key's order, backward
//! - `update`: `UPDATE players SET score=score+1 WHERE id=<id>`, autocommitted: Kura
//!   replies once the change is durable under its `--durability` (fsync by default),
//!   MariaDB's InnoDB flushes its log at commit by default. Both durable per statement.
//! - `get`: memcached `get @@players.<id>` through Kura's memcached port (Kura only).
//!
//! Every reply is checked, so that a broken server cannot look fast: a point select
//! must return the one right row whole (id, email, level, name, padding length), a
//! range ten rows of level `l` with consistent fields, an update one affected row, a
//! `get` the row's fields. A wrong reply or an error reply is a failure, counted and
//! reported, and fails the run after its report is written.
//!
//! Two settings, one after the other, each with freshly started servers: `memory`,
//! `--rows` rows with the servers' usual memory (Kura's `-m` 1024, MariaDB's buffer
//! pool `--mariadb-buffer-pool-mib`); and `limit`, each server in a memory cgroup of
//! `--mem-limit-mib` (page cache included) with its caches sized from the limit as the
//! data-size workload sizes them (`datasize::start_limited`), and rows making
//! `--limit-ratio` times the limit. A server the OOM killer kills, or that refuses a
//! row while loading, at the limit is reported so and not measured there.

use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;

use crate::backend::{Backend, BackendKind, KuraSql};
use crate::cgroup::{Hierarchy, MemoryCgroup};
use crate::chart::{Chart, Kind};
use crate::client::Client;
use crate::datasize::{self, mib, ratio_label, rss_bytes, Limited};
use crate::driver;
use crate::game::email;
use crate::load;
use crate::mysql::{quote, Connection, Outcome, Row, ServerError};
use crate::progress::Progress;
use crate::proto::{Expect, Reply, Wire};
use crate::report::{kura_ratios, opt, Better, Csv, Section, Table};
use crate::stats::{self, median};
use crate::window::{sleep_until, Window};
use crate::{Common, SqlBackends};

mod check;
mod report;

use check::*;
use report::*;

#[derive(Args, Debug, Clone)]
pub struct SqlArgs {
    #[command(flatten)]
    pub common: Common,
    /// Settings to measure, in order: `memory` (--rows rows, the servers' usual
    /// memory) and `limit` (--limit-ratio times --mem-limit-mib of rows, each server
    /// in a memory cgroup of --mem-limit-mib).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "memory,limit"
    )]
    pub settings: Vec<Setting>,
    /// Phases to measure, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "pk,email,range,pk-range,order-limit,update,get"
    )]
    pub phases: Vec<Phase>,
    /// Rows loaded in the `memory` setting (at least 20).
    #[arg(long, default_value_t = 100_000)]
    pub rows: u64,
    /// Bytes of a row's values as text (id, email, level, name, score, padding) in the
    /// `memory` setting; the padding makes up what the others leave.
    #[arg(long, default_value_t = 1000)]
    pub row_size: usize,
    /// Bytes of a row in the `limit` setting. 4000, not 1000: Kura keeps every key's
    /// index slot and the ordered index's entries in memory (about 100 bytes a row of
    /// this table), so at ten times the limit with 1000-byte rows those alone would
    /// take all of its half of the limit.
    #[arg(long, default_value_t = 4000)]
    pub limit_row_size: usize,
    /// The `limit` setting's memory limit per backend in MiB, page cache included.
    /// MariaDB's buffer pool and Kura's `-m` are half of it, as in `datasize`
    /// (--mariadb-buffer-pool-mib does not apply there).
    #[arg(long, default_value_t = 256)]
    pub mem_limit_mib: u64,
    /// The `limit` setting's data size as a multiple of the memory limit.
    #[arg(long, default_value_t = 10.0)]
    pub limit_ratio: f64,
    /// Connections running each phase, one client thread each.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// Seconds measured per phase, backend and repetition.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Seconds of load before each measurement, not counted.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Repetitions; the median ops/s is reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Connections each load uses, each sending INSERTs of 500 rows (or, to Kura
    /// through memcached, pipelined sets 100 rows at a time).
    #[arg(long, default_value_t = 4)]
    pub load_connections: u64,
    /// How Kura is loaded: `memcached` (`set @@players.<id>`, pipelined) or `sql`
    /// (the INSERTs MariaDB gets).
    #[arg(long, value_enum, default_value_t = KuraLoad::Memcached)]
    pub kura_load: KuraLoad,
}

/// How rows reach Kura.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KuraLoad {
    /// `set @@players.<id>` through the memcached port, 100 pipelined per round trip.
    Memcached,
    /// Multi-row INSERTs over SQL, as MariaDB is loaded.
    Sql,
}

/// The backends measured when `--backends` is not given: Kura at its default
/// durability, and MariaDB.
const DEFAULT_BACKENDS: [&str; 2] = ["kura-fsync", "mariadb"];

/// Rows of one level at least: a range of one level then always has its 10.
const ROWS_PER_LEVEL: u64 = 20;

/// Rows per `INSERT` while loading.
const INSERT_ROWS: usize = 500;

/// Rows per pipelined batch of memcached sets while loading Kura.
const SET_ROWS: usize = 100;

/// The table, spelled the same for both servers. `KEY level` is an ordered index on
/// both (InnoDB's B-tree; Kura's ordered index in memory), so the range with its
/// `ORDER BY level LIMIT 10` reads ten entries in order and stops.
const TABLE_DDL: &str = "CREATE TABLE players (id BIGINT NOT NULL, \
     email VARCHAR(64) NOT NULL, level INT NOT NULL, name VARCHAR(32), score BIGINT, \
     padding TEXT NOT NULL, PRIMARY KEY (id), UNIQUE KEY email (email), \
     KEY level (level)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";

/// The database the table lives in: Kura's only one, created on MariaDB.
const DATABASE: &str = "kura";

/// Where the data lives relative to the servers' memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Setting {
    /// `--rows` rows, servers with their usual memory.
    Memory,
    /// `--limit-ratio` times `--mem-limit-mib` of rows, each server in a memory cgroup.
    Limit,
}

impl Setting {
    fn csv_name(self) -> &'static str {
        match self {
            Setting::Memory => "memory",
            Setting::Limit => "limit",
        }
    }
}

/// What a phase measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Phase {
    /// `SELECT * FROM players WHERE id=?`
    Pk,
    /// `SELECT * FROM players WHERE email=?`
    Email,
    /// `SELECT * FROM players WHERE level BETWEEN ? AND ? ORDER BY level LIMIT 10`
    Range,
    /// `SELECT * FROM players WHERE id BETWEEN ? AND ?+9 ORDER BY id`
    PkRange,
    /// `SELECT * FROM players WHERE id <= ? ORDER BY id DESC LIMIT 10`
    OrderLimit,
    /// `UPDATE players SET score=score+1 WHERE id=?`
    Update,
    /// memcached `get @@players.<id>` through Kura.
    Get,
}

impl Phase {
    fn csv_name(self) -> &'static str {
        match self {
            Phase::Pk => "pk_select",
            Phase::Email => "email_select",
            Phase::Range => "range_limit_10",
            Phase::PkRange => "pk_range_10",
            Phase::OrderLimit => "order_desc_limit_10",
            Phase::Update => "update_pk",
            Phase::Get => "memcached_get",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Phase::Pk => "select by pk",
            Phase::Email => "select by email",
            Phase::Range => "range, limit 10",
            Phase::PkRange => "range of 10 by pk",
            Phase::OrderLimit => "order by pk desc, limit 10",
            Phase::Update => "update by pk",
            Phase::Get => "memcached get",
        }
    }

    /// Whether `backend` can run this phase: `get` is Kura's memcached port.
    fn runs_on(self, backend: &Backend) -> bool {
        self != Phase::Get || is_kura(&backend.kind)
    }
}

fn is_kura(kind: &BackendKind) -> bool {
    matches!(kind, BackendKind::Kura(_))
}

/// The rows of one setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    rows: u64,
    levels: u64,
    row_size: usize,
}

impl Shape {
    fn new(rows: u64, row_size: usize) -> Shape {
        Shape {
            rows,
            levels: (rows / ROWS_PER_LEVEL).max(1),
            row_size,
        }
    }

    fn level(&self, id: u64) -> u64 {
        id % self.levels
    }

    /// Bytes of row `id`'s values as text but the padding: id, email, level, name and
    /// the score it is loaded with (0).
    fn fields(&self, id: u64) -> usize {
        digits(id) + email(id).len() + digits(self.level(id)) + name(id).len() + 1
    }

    /// Bytes of padding that make row `id`'s values `row_size` bytes as text (none
    /// if the other fields take that much already).
    fn padding(&self, id: u64) -> usize {
        self.row_size.saturating_sub(self.fields(id))
    }

    /// What the rows hold as text, the data size the report states: `row_size` a
    /// row, or the longest row's fields if they alone are longer.
    fn data_bytes(&self) -> u64 {
        let longest = self.fields(self.rows.saturating_sub(1)).max(self.row_size);
        longest as u64 * self.rows
    }

    /// `email|level|name|0|padding`: the row as `set @@players.<id>` stores it.
    fn memcached_value(&self, id: u64) -> Vec<u8> {
        let mut value = format!("{}|{}|{}|0|", email(id), self.level(id), name(id)).into_bytes();
        value.resize(value.len() + self.padding(id), b'.');
        value
    }

    /// `(id, 'email', level, 'name', 0, 'padding')` for an INSERT.
    fn values(&self, id: u64) -> String {
        format!(
            "({id},{},{},{},0,'{}')",
            quote(email(id).as_bytes()),
            self.level(id),
            quote(name(id).as_bytes()),
            ".".repeat(self.padding(id))
        )
    }
}

fn digits(n: u64) -> usize {
    n.checked_ilog10().unwrap_or(0) as usize + 1
}

fn name(id: u64) -> String {
    format!("player{id}")
}

/// A SQL connection using the table's database.
fn connect(addr: SocketAddr) -> Result<Connection> {
    let mut conn = Connection::connect(addr, "root")?;
    conn.query(&format!("USE {DATABASE}"))?;
    Ok(conn)
}

/// Creates the table: on MariaDB in a fresh database `kura`, on Kura in its own.
fn create_table(backend: &Backend) -> Result<()> {
    let addr = sql_addr(backend)?;
    let mut admin = Connection::connect(addr, "root")?;
    if !is_kura(&backend.kind) {
        admin.query(&format!("DROP DATABASE IF EXISTS {DATABASE}"))?;
        admin.query(&format!("CREATE DATABASE {DATABASE}"))?;
    }
    admin.query(&format!("USE {DATABASE}"))?;
    admin.query(TABLE_DDL)?;
    Ok(())
}

fn sql_addr(backend: &Backend) -> Result<SocketAddr> {
    backend
        .sql_addr
        .with_context(|| format!("{} has no SQL port", backend.name))
}

/// A store Kura refused while loading through memcached: a finding at the limit.
#[derive(Debug)]
struct SetRefused(String);

impl std::fmt::Display for SetRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kura refused a row: {}", self.0)
    }
}

impl std::error::Error for SetRefused {}

/// Stores rows `ids` in Kura's table through its memcached port at `addr`, over
/// `connections` connections, each pipelining 100 sets at a time; counts rows on
/// `progress`.
fn load_memcached(
    addr: SocketAddr,
    shape: Shape,
    ids: Range<u64>,
    connections: u64,
    progress: &Progress,
) -> Result<()> {
    load::in_shares(ids, connections, |_, range| {
        let mut client = Client::connect(addr, Wire::Memcached)?;
        let ids: Vec<u64> = range.collect();
        for batch in ids.chunks(SET_ROWS) {
            for &id in batch {
                let key = format!("@@players.{id}");
                client.push_set(key.as_bytes(), &shape.memcached_value(id));
            }
            client.flush()?;
            let mut refused = None;
            for &id in batch {
                match client.read_reply(Expect::Status)? {
                    Reply::Ok => {}
                    other => refused = Some(format!("set @@players.{id}: {other:?}")),
                }
            }
            if let Some(why) = refused {
                return Err(SetRefused(why).into());
            }
            progress.add(batch.len() as u64);
        }
        Ok(())
    })
}

/// Inserts rows `ids` over `connections` connections, 500 rows a statement,
/// counting rows on `progress`.
fn load(
    addr: SocketAddr,
    shape: Shape,
    ids: Range<u64>,
    connections: u64,
    progress: &Progress,
) -> Result<()> {
    load::in_shares(ids, connections, |_, range| {
        let mut conn = connect(addr)?;
        let ids: Vec<u64> = range.collect();
        for batch in ids.chunks(INSERT_ROWS) {
            let values: Vec<String> = batch.iter().map(|&id| shape.values(id)).collect();
            let outcome = conn.query(&format!(
                "INSERT INTO players (id,email,level,name,score,padding) VALUES {}",
                values.join(",")
            ))?;
            if outcome
                != (Outcome::Ok {
                    affected_rows: batch.len() as u64,
                })
            {
                bail!("an INSERT of {} rows answered {outcome:?}", batch.len());
            }
            progress.add(batch.len() as u64);
        }
        Ok(())
    })
}

/// What one phase on one backend found.
struct PhaseResult {
    /// Operations completed in the window, right or wrong.
    ops: u64,
    window: Duration,
    latency: Histogram<u64>,
    /// Wrong replies and error replies, in the warm-up or the window.
    failures: u64,
    /// The first of them, for the report.
    first_failure: Option<String>,
    cpu: stats::CpuUse,
    /// Bytes the server read from storage in the window, if `/proc` says.
    storage_read_bytes: Option<u64>,
}

impl PhaseResult {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.window.as_secs_f64()
    }
}

/// One connection of a phase.
enum Link {
    Sql(Connection),
    Memcached(Client),
}

/// A thread's share of a phase.
struct Part {
    ops: u64,
    latency: Histogram<u64>,
    failures: u64,
    first_failure: Option<String>,
}

/// Runs `phase` on `backend` with `connections` connections.
fn measure(
    backend: &Backend,
    phase: Phase,
    shape: Shape,
    args: &SqlArgs,
    seed: u64,
) -> Result<PhaseResult> {
    let mut links = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        links.push(match phase {
            Phase::Get => Link::Memcached(Client::connect(backend.addr, Wire::Memcached)?),
            _ => Link::Sql(connect(sql_addr(backend)?)?),
        });
    }
    let start = Instant::now() + Duration::from_millis(20);
    let window = Window::new(start, args.warmup, args.duration, 0);
    let workers: Vec<_> = links
        .into_iter()
        .enumerate()
        .map(|(i, link)| {
            let seed = seed.wrapping_add(i as u64 * 104_729);
            let window = &window;
            move || drive(phase, link, shape, start, window, seed)
        })
        .collect();
    let reads = datasize::sample_storage_reads(backend.pids.clone(), window.start, window.end);
    let (parts, length, cpu) = driver::measure(&window, &backend.pids, workers)?;
    let mut result = PhaseResult {
        ops: 0,
        window: length,
        latency: stats::new_histogram()?,
        failures: 0,
        first_failure: None,
        cpu,
        storage_read_bytes: None,
    };
    for part in parts {
        result.ops += part.ops;
        result.failures += part.failures;
        result.latency.add(&part.latency)?;
        if result.first_failure.is_none() {
            result.first_failure = part.first_failure;
        }
    }
    result.storage_read_bytes = reads.join().ok().flatten();
    Ok(result)
}

/// One connection's loop: requests back to back until the window ends.
fn drive(
    phase: Phase,
    mut link: Link,
    shape: Shape,
    start: Instant,
    window: &Window,
    seed: u64,
) -> Result<Part> {
    let mut rng = crate::keys::Rng::new(seed);
    let mut part = Part {
        ops: 0,
        latency: stats::new_histogram()?,
        failures: 0,
        first_failure: None,
    };
    sleep_until(start);
    while !window.is_over(Instant::now()) {
        let began = Instant::now();
        let verdict = request(phase, &mut link, shape, &mut rng);
        let done = Instant::now();
        if window.contains(done) {
            part.ops += 1;
            stats::record(&mut part.latency, done - began);
        }
        // A wrong reply fails the run in the warm-up too.
        match verdict {
            Ok(Verdict::Right) => {}
            Ok(Verdict::Wrong(why)) => note_failure(&mut part, why),
            Err(e) => note_failure(&mut part, server_error(e)?),
        }
    }
    Ok(part)
}

fn note_failure(part: &mut Part, why: String) {
    part.failures += 1;
    if part.first_failure.is_none() {
        part.first_failure = Some(why);
    }
}

/// What became of a backend in a setting.
enum Fate {
    Measured,
    /// The OOM killer killed it (at the limit).
    Oom(String),
    /// It refused a row while loading (at the limit).
    Refused(String),
}

impl Fate {
    fn outcome(&self) -> &'static str {
        match self {
            Fate::Measured => "measured",
            Fate::Oom(_) => "oom-killed",
            Fate::Refused(_) => "refused-rows",
        }
    }

    fn text(&self) -> &'static str {
        match self {
            Fate::Measured => "measured",
            Fate::Oom(_) => "OOM (killed)",
            Fate::Refused(_) => "refused rows",
        }
    }
}

/// A backend in one setting. Field order is drop order: the servers stop before
/// their cgroup is removed.
struct Server {
    backend: Backend,
    cgroup: Option<MemoryCgroup>,
    fate: Fate,
    load_secs: f64,
    rss_bytes: Option<u64>,
    cgroup_bytes: Option<u64>,
    cgroup_peak_bytes: Option<u64>,
}

impl Server {
    /// What an error at the limit means: a finding (killed, refused) or a broken run.
    fn classify(&mut self, error: anyhow::Error, loading: bool) -> Result<Fate> {
        let Some(cgroup) = &self.cgroup else {
            return Err(error);
        };
        if loading {
            if let Some(refused) = error.downcast_ref::<ServerError>() {
                return Ok(Fate::Refused(refused.to_string()));
            }
            if let Some(refused) = error.downcast_ref::<SetRefused>() {
                return Ok(Fate::Refused(refused.to_string()));
            }
        }
        // The client usually sees the connection break a moment before the kernel
        // has finished with the process.
        match self.backend.exited_within(Duration::from_secs(5)) {
            Some(how) if cgroup.oom_kills().unwrap_or(0) > 0 => Ok(Fate::Oom(how)),
            Some(how) => Err(error.context(format!("{how}, and not by the OOM killer"))),
            None => Err(error),
        }
    }

    fn take_footprint(&mut self) {
        self.rss_bytes = self.backend.pids.iter().map(|&p| rss_bytes(p)).sum();
        self.cgroup_bytes = self.cgroup.as_ref().and_then(MemoryCgroup::usage_bytes);
        self.cgroup_peak_bytes = self.cgroup.as_ref().and_then(MemoryCgroup::peak_bytes);
    }
}

/// One setting's figures, after its servers have stopped.
struct SettingResult {
    setting: Setting,
    shape: Shape,
    /// Short, for tables: `memory`, `10x 256 MiB`.
    label: String,
    /// Shorter, for the chart's categories: `mem`, `10x`.
    tag: String,
    backends: Vec<BackendSummary>,
    /// `[phase][backend]`: one result per repetition.
    results: Vec<Vec<Vec<PhaseResult>>>,
}

struct BackendSummary {
    name: String,
    kura: bool,
    fate: Fate,
    load_secs: f64,
    rss_bytes: Option<u64>,
    cgroup_bytes: Option<u64>,
    cgroup_peak_bytes: Option<u64>,
}

impl SqlArgs {
    /// Applies `--tiny`: few rows, the limit setting at a quarter of a 128 MiB limit
    /// (128 MiB: mariadbd needs about 70 MiB besides its pool), short windows.
    fn effective(&self) -> SqlArgs {
        let mut args = self.clone();
        if args.common.tiny {
            args.rows = args.rows.min(500);
            args.mem_limit_mib = args.mem_limit_mib.min(128);
            args.limit_ratio = args.limit_ratio.min(0.25);
            args.connections = args.connections.min(4);
            args.duration = args.duration.min(0.3);
            args.warmup = args.warmup.min(0.1);
            args.reps = 1;
            args.load_connections = args.load_connections.min(2);
        }
        args
    }

    fn shape(&self, setting: Setting) -> Shape {
        match setting {
            Setting::Memory => Shape::new(self.rows, self.row_size),
            Setting::Limit => {
                let bytes = self.limit_ratio * (self.mem_limit_mib << 20) as f64;
                let rows = (bytes / self.limit_row_size as f64).ceil() as u64;
                Shape::new(rows, self.limit_row_size)
            }
        }
    }

    fn tag(&self, setting: Setting) -> String {
        match setting {
            Setting::Memory => "mem".to_string(),
            Setting::Limit => format!("{}x", ratio_label(self.limit_ratio)),
        }
    }

    fn label(&self, setting: Setting) -> String {
        match setting {
            Setting::Memory => "memory".to_string(),
            Setting::Limit => format!(
                "{}x {} MiB",
                ratio_label(self.limit_ratio),
                self.mem_limit_mib
            ),
        }
    }
}

pub fn run(args: &SqlArgs) -> Result<Section> {
    let (mut section, started) = Section::begin("sql", &args.common.data_root);
    let args = args.effective();
    if args.rows < ROWS_PER_LEVEL || args.connections == 0 || args.reps == 0 {
        bail!("--rows must be at least {ROWS_PER_LEVEL}, --connections and --reps at least 1");
    }
    if args.settings.is_empty() || args.phases.is_empty() {
        bail!("--settings and --phases need at least one entry each");
    }
    if args.settings.contains(&Setting::Limit)
        && (args.mem_limit_mib < 16 || !(args.limit_ratio > 0.0 && args.limit_ratio.is_finite()))
    {
        bail!("--mem-limit-mib must be at least 16 and --limit-ratio above 0");
    }
    if args.row_size.max(args.limit_row_size) > 60_000 {
        bail!("--row-size and --limit-row-size must be at most 60000 (a TEXT holds 65535 bytes)");
    }
    section.parameters = format!("{args:#?}");
    let kinds = args
        .common
        .backend_kinds(&DEFAULT_BACKENDS, SqlBackends::Accepted)?;
    for kind in &kinds {
        if !matches!(kind, BackendKind::Kura(_) | BackendKind::Mariadb) {
            bail!(
                "{}: the sql workload measures Kura's SQL port (kura-fsync, kura-interval, \
                 kura-none) and mariadb",
                kind.name()
            );
        }
    }
    let hierarchy = if args.settings.contains(&Setting::Limit) {
        Some(Hierarchy::detect()?)
    } else {
        None
    };
    let mut settings = Vec::new();
    for &setting in &args.settings {
        settings.push(run_setting(
            setting,
            &kinds,
            &args,
            hierarchy.as_ref(),
            &mut section,
        )?);
    }
    report(&args, hierarchy.as_ref(), &settings, &mut section)?;
    section.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(section)
}

/// Starts the backends for `setting`, loads them, measures every phase and stops
/// them.
fn run_setting(
    setting: Setting,
    kinds: &[BackendKind],
    args: &SqlArgs,
    hierarchy: Option<&Hierarchy>,
    section: &mut Section,
) -> Result<SettingResult> {
    let shape = args.shape(setting);
    let label = args.label(setting);
    let mut config = args.common.launch_config();
    config.kura_sql = KuraSql::AnyPort;
    let mut servers = Vec::new();
    for kind in kinds {
        let (backend, cgroup) = match (setting, hierarchy) {
            (Setting::Limit, Some(hierarchy)) => {
                let Limited { backend, cgroup } = datasize::start_limited(
                    kind,
                    config.clone(),
                    hierarchy,
                    args.mem_limit_mib << 20,
                )?;
                (backend, Some(cgroup))
            }
            (Setting::Limit, None) => bail!("the limit setting needs memory cgroups"),
            (Setting::Memory, _) => (Backend::start(kind, &config)?, None),
        };
        eprintln!(
            "started {} ({label}) on {}{}{}",
            backend.name,
            backend.addr,
            backend
                .sql_addr
                .filter(|a| *a != backend.addr)
                .map(|a| format!(", SQL on {a}"))
                .unwrap_or_default(),
            cgroup
                .as_ref()
                .map(|c| format!(" in cgroup {}", c.path().display()))
                .unwrap_or_default()
        );
        for launch in &backend.launches {
            let mut launch = launch.clone();
            launch.role = format!("{} ({label})", launch.role);
            section.servers.push(launch);
        }
        servers.push(Server {
            backend,
            cgroup,
            fate: Fate::Measured,
            load_secs: 0.0,
            rss_bytes: None,
            cgroup_bytes: None,
            cgroup_peak_bytes: None,
        });
    }
    for server in &mut servers {
        let progress = Progress::new(
            format!(
                "loading {} ({label}: {} rows, {} MiB)",
                server.backend.name,
                shape.rows,
                shape.data_bytes() >> 20
            ),
            shape.rows,
            "rows",
        );
        let loading = Instant::now();
        let through_memcached =
            is_kura(&server.backend.kind) && args.kura_load == KuraLoad::Memcached;
        let loaded = create_table(&server.backend).and_then(|()| {
            if through_memcached {
                load_memcached(
                    server.backend.addr,
                    shape,
                    0..shape.rows,
                    args.load_connections,
                    &progress,
                )
            } else {
                load(
                    sql_addr(&server.backend)?,
                    shape,
                    0..shape.rows,
                    args.load_connections,
                    &progress,
                )
            }
        });
        progress.finish();
        server.load_secs = loading.elapsed().as_secs_f64();
        if let Err(e) = loaded {
            let fate = server.classify(e, true)?;
            if let Fate::Oom(why) | Fate::Refused(why) = &fate {
                eprintln!("{} at {label}: {}: {why}", server.backend.name, fate.text());
            }
            server.fate = fate;
        }
        server.take_footprint();
    }
    let count = servers.len();
    let mut results: Vec<Vec<Vec<PhaseResult>>> = args
        .phases
        .iter()
        .map(|_| (0..count).map(|_| Vec::new()).collect())
        .collect();
    let total: usize = args.reps
        * args
            .phases
            .iter()
            .map(|p| servers.iter().filter(|s| p.runs_on(&s.backend)).count())
            .sum::<usize>();
    let progress = Progress::new(format!("measuring ({label})"), total as u64, "runs");
    let mut done = 0;
    for rep in 0..args.reps {
        for (pi, &phase) in args.phases.iter().enumerate() {
            for i in 0..count {
                let bi = (i + rep) % count;
                let server = &mut servers[bi];
                if !phase.runs_on(&server.backend) {
                    continue;
                }
                done += 1;
                if !matches!(server.fate, Fate::Measured) {
                    progress.add(1);
                    continue;
                }
                let seed = args
                    .common
                    .seed
                    .wrapping_add(rep as u64 * 31 + pi as u64 * 7 + setting as u64);
                // A server that died (before or during the phase) is a finding at the
                // limit and a broken run otherwise: `classify` tells.
                let measured = server
                    .backend
                    .check_alive()
                    .and_then(|()| measure(&server.backend, phase, shape, args, seed))
                    .and_then(|r| server.backend.check_alive().map(|()| r));
                let r = match measured {
                    Ok(r) => r,
                    Err(e) => {
                        let fate = server.classify(e, false)?;
                        progress.println(&format!(
                            "[{done}/{total}] {label} {:<15} {:<14} {}",
                            phase.label(),
                            server.backend.name,
                            fate.text()
                        ));
                        server.fate = fate;
                        progress.add(1);
                        continue;
                    }
                };
                progress.println(&format!(
                    "[{done}/{total}] rep {} {label} {:<15} {:<14} {:>8.0} ops/s  p50 {} us \
                     p99 {} us  disk {} KiB/op  cpu: client {}% server {}% others {}%{}",
                    rep + 1,
                    phase.label(),
                    server.backend.name,
                    r.ops_per_sec(),
                    r.latency.value_at_quantile(0.5),
                    r.latency.value_at_quantile(0.99),
                    opt(disk_kib_per_op(std::slice::from_ref(&r)), 1),
                    opt(r.cpu.client, 0),
                    opt(r.cpu.server, 0),
                    opt(r.cpu.others, 0),
                    match &r.first_failure {
                        Some(why) => format!("  failures {} (first: {why})", r.failures),
                        None => String::new(),
                    }
                ));
                progress.add(1);
                results[pi][bi].push(r);
            }
        }
    }
    progress.finish();
    let backends = servers
        .iter_mut()
        .map(|s| {
            if matches!(s.fate, Fate::Measured) {
                s.take_footprint();
            }
            BackendSummary {
                name: s.backend.name.clone(),
                kura: is_kura(&s.backend.kind),
                fate: std::mem::replace(&mut s.fate, Fate::Measured),
                load_secs: s.load_secs,
                rss_bytes: s.rss_bytes,
                cgroup_bytes: s.cgroup_bytes,
                cgroup_peak_bytes: s.cgroup_peak_bytes,
            }
        })
        .collect();
    drop(servers);
    Ok(SettingResult {
        setting,
        shape,
        tag: args.tag(setting),
        label,
        backends,
        results,
    })
}

#[cfg(test)]
mod tests;
