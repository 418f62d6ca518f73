//! The game workload of seeds 000, 001 and 004 (Percona's "MySQL-Memcached or NOSQL
//! Tokyo Tyrant"): read a player's row by id, update it and store it back, then
//! look a player up by email; TPS by connection count.
//!
//! On a memcached-protocol backend the two tables are two key families:
//! `player:<id>` holds the row (`id|name|email|score|level|last_seen|padding`, a
//! few hundred bytes) and `email:<email>` holds the id. A transaction is three
//! requests in sequence on one connection: `get player:<id>`, `set player:<id>` with
//! score, level and last-seen changed, and `get email:<the row's email>` (whose id
//! must match). Players are chosen uniformly or zipfian.
//!
//! Like the throughput workload, connections are driven by a few polling threads
//! (`driver.rs`), each connection with one request in flight; each connection count
//! is measured on every backend in turn, repetition by repetition. Reported: median
//! TPS over repetitions, and latency percentiles per step and per transaction over
//! all of them.

use std::io::Write;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use clap::Args;
use hdrhistogram::Histogram;

use crate::backend::{Backend, Paused, Protocol};
use crate::chart::{Chart, Kind};
use crate::client::Client;
use crate::driver::{self, Deal, Measured, Next, Script};
use crate::game_sql;
use crate::keys::{Distribution, KeyChooser, Rng};
use crate::load;
use crate::progress::Progress;
use crate::proto::{Expect, Reply, Wire};
use crate::report::{kura_ratios, opt, Better, Csv, Section, Table};
use crate::stats::{self, median};
use crate::window::Window;
use crate::Common;

#[derive(Args, Debug, Clone)]
pub struct GameArgs {
    #[command(flatten)]
    pub common: Common,
    /// Players (rows), all preloaded with their email keys.
    #[arg(long, default_value_t = 100_000)]
    pub players: u64,
    /// Bytes in a player row (padding makes up the rest).
    #[arg(long, default_value_t = 300)]
    pub row_size: usize,
    /// Connection counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
    pub connections: Vec<usize>,
    /// Client threads the connections are spread over.
    #[arg(long, default_value_t = 4)]
    pub client_threads: usize,
    /// How players are chosen.
    #[arg(long, value_enum, default_value_t = Distribution::Uniform)]
    pub distribution: Distribution,
    /// Seconds measured per connection count, backend and repetition.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before each measurement, not counted.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Repetitions; the median TPS is reported.
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
}

/// The three requests of a transaction, in order.
const STEP_NAMES: [&str; 3] = ["get_player", "set_player", "get_by_email"];

pub(crate) fn player_key(id: u64) -> Vec<u8> {
    format!("player:{id}").into_bytes()
}

pub(crate) fn email(id: u64) -> String {
    format!("player{id}@example.com")
}

/// The players table the `kura-tables-*` backends are started with: the game's row as
/// columns, the email a unique index, so one request finds a player by email.
pub(crate) const TABLE_SCHEMA: &str = "CREATE TABLE players (\
     id BIGINT UNSIGNED NOT NULL, name VARCHAR(64) NOT NULL, email VARCHAR(128) NOT NULL, \
     score BIGINT UNSIGNED NOT NULL, level BIGINT UNSIGNED NOT NULL, \
     last_seen BIGINT UNSIGNED NOT NULL, padding TEXT NOT NULL, \
     PRIMARY KEY (id), UNIQUE KEY email (email));\n";

/// How a key-value backend keeps the game's players.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Two plain keys: `player:<id>` holds the row, `email:<email>` the id. The
    /// client keeps them in step (two requests, not atomic).
    TwoKeys,
    /// Kura's players table: `@@players.<id>` is the row, `@@players_by_email.<email>`
    /// finds it by its unique email, kept by the server in the same write.
    Table,
}

impl Layout {
    pub(crate) fn of(protocol: Protocol) -> Layout {
        match protocol {
            Protocol::MemcachedTables => Layout::Table,
            _ => Layout::TwoKeys,
        }
    }

    fn player_key(self, id: u64) -> Vec<u8> {
        match self {
            Layout::TwoKeys => player_key(id),
            Layout::Table => format!("@@players.{id}").into_bytes(),
        }
    }

    fn email_key(self, email: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(match self {
            Layout::TwoKeys => b"email:".as_slice(),
            Layout::Table => b"@@players_by_email.".as_slice(),
        });
        out.extend_from_slice(email);
    }

    /// The value stored for a player: the row, less its id in a table (the key holds it).
    /// Built as it is sent, so neither layout costs the client a copy the other does not.
    fn row(self, id: u64, score: u64, level: u64, last_seen: u64, size: usize) -> Vec<u8> {
        let mut row = Vec::with_capacity(size.max(96));
        if self == Layout::TwoKeys {
            let _ = write!(row, "{id}|");
        }
        let _ = write!(
            row,
            "player{id}|{}|{score:010}|{level:04}|{last_seen:010}|",
            email(id)
        );
        // Both layouts pad to the same row: the id's bytes count in a table's too.
        let id_bytes = match self {
            Layout::TwoKeys => 0,
            Layout::Table => id.checked_ilog10().unwrap_or(0) as usize + 2,
        };
        let pad = size.saturating_sub(row.len() + id_bytes);
        row.extend(std::iter::repeat_n(b'.', pad));
        row
    }

    /// The id, email, score and level in player `id`'s value, as `get` returned it.
    fn decode(self, id: u64, value: &[u8]) -> Option<(u64, &[u8], u64, u64)> {
        match self {
            Layout::TwoKeys => decode_row(value),
            Layout::Table => {
                decode_after_id(value).map(|(email, score, level)| (id, email, score, level))
            }
        }
    }

    /// Whether the value found by email names player `id`.
    fn email_names(self, id: u64, value: &[u8]) -> bool {
        let id = id.to_string();
        match self {
            Layout::TwoKeys => value == id.as_bytes(),
            Layout::Table => value.starts_with(id.as_bytes()) && value.get(id.len()) == Some(&b'|'),
        }
    }
}

/// A player's row, padded to `size` bytes (longer if the fields need it).
pub(crate) fn encode_row(id: u64, score: u64, level: u64, last_seen: u64, size: usize) -> Vec<u8> {
    Layout::TwoKeys.row(id, score, level, last_seen, size)
}

/// The fields a transaction reads from a row: id, email, score, level.
pub(crate) fn decode_row(row: &[u8]) -> Option<(u64, &[u8], u64, u64)> {
    let bar = row.iter().position(|&b| b == b'|')?;
    let id = number(&row[..bar])?;
    let (email, score, level) = decode_after_id(&row[bar + 1..])?;
    Some((id, email, score, level))
}

/// The email, score and level of a row's fields after its id.
fn decode_after_id(fields: &[u8]) -> Option<(&[u8], u64, u64)> {
    let mut fields = fields.split(|b| *b == b'|');
    let _name = fields.next()?;
    let email = fields.next()?;
    let score = number(fields.next()?)?;
    let level = number(fields.next()?)?;
    Some((email, score, level))
}

fn number(field: &[u8]) -> Option<u64> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A store the server refused (`SERVER_ERROR out of memory`, `NOT_STORED`) while
/// loading: a finding about the server, not a broken run, for workloads that
/// push a server past its memory.
#[derive(Debug)]
pub(crate) struct StoreRefused(pub Reply);

impl std::fmt::Display for StoreRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the server refused a store while loading ({:?})", self.0)
    }
}

impl std::error::Error for StoreRefused {}

/// Stores the rows and email keys of players `ids` over `connections` connections,
/// each pipelining batches of 32 players, counting players stored on `progress`.
pub(crate) fn preload(
    addr: SocketAddr,
    wire: Wire,
    layout: Layout,
    ids: Range<u64>,
    row_size: usize,
    connections: u64,
    progress: &Progress,
) -> Result<()> {
    // A table keeps the email index itself: one set a player.
    let sets_per_player = match layout {
        Layout::TwoKeys => 2,
        Layout::Table => 1,
    };
    load::in_shares(ids, connections, |_, range| {
        let mut client = Client::connect(addr, wire)?;
        let ids: Vec<u64> = range.collect();
        for batch in ids.chunks(32) {
            for &id in batch {
                let row = layout.row(id, id % 1000, 1, unix_now(), row_size);
                client.push_set(&layout.player_key(id), &row);
                if layout == Layout::TwoKeys {
                    client.push_set(
                        format!("email:{}", email(id)).as_bytes(),
                        id.to_string().as_bytes(),
                    );
                }
            }
            client.flush()?;
            let mut refused = None;
            for _ in 0..batch.len() * sets_per_player {
                match client.read_reply(Expect::Status)? {
                    Reply::Ok => {}
                    other => refused = Some(other),
                }
            }
            if let Some(reply) = refused {
                return Err(StoreRefused(reply).into());
            }
            progress.add(batch.len() as u64);
        }
        Ok(())
    })
}

/// What one measurement found.
pub(crate) struct GameResult {
    pub transactions: u64,
    pub window: Duration,
    pub steps: [Histogram<u64>; 3],
    pub transaction: Histogram<u64>,
    pub failures: u64,
    pub cpu: stats::CpuUse,
}

impl GameResult {
    /// The game's figures from the driver's.
    pub(crate) fn of(measured: Measured) -> Result<GameResult> {
        let tally = measured.tally;
        Ok(GameResult {
            // The game's transactions never miss: a miss fails them.
            transactions: tally.transactions,
            window: measured.window,
            steps: tally
                .steps
                .try_into()
                .map_err(|_| anyhow::anyhow!("a game transaction has three steps"))?,
            transaction: tally.transaction,
            failures: tally.failures,
            cpu: measured.cpu,
        })
    }
}

#[derive(Clone)]
pub(crate) struct Plan {
    /// The key-value protocol (for the polling client; SQL ignores it).
    pub wire: Wire,
    /// How the key-value backend keeps players.
    pub layout: Layout,
    pub chooser: KeyChooser,
    pub row_size: usize,
    pub window: crate::window::Window,
}

/// Runs transactions on `backend` over `connections` connections as `plan` says,
/// in whichever protocol it speaks.
pub(crate) fn measure_backend(
    backend: &Backend,
    connections: usize,
    client_threads: usize,
    plan: &Plan,
    start: Instant,
    seed: u64,
) -> Result<GameResult> {
    let (addr, pids) = (backend.addr, &backend.pids);
    match backend.protocol {
        Protocol::Memcached
        | Protocol::MemcachedBinary
        | Protocol::MemcachedTables
        | Protocol::Redis => measure(addr, connections, client_threads, plan, start, seed, pids),
        Protocol::Mysql => game_sql::measure(addr, None, connections, plan, start, seed, pids),
        Protocol::MemcachedTls => {
            bail!(
                "{}: TLS is measured by the throughput workload only",
                backend.name
            )
        }
        Protocol::MysqlCacheAside { cache } => {
            game_sql::measure(addr, Some(cache), connections, plan, start, seed, pids)
        }
    }
}

/// Runs transactions on a key-value backend: the closed-loop driver's connections,
/// dealt round-robin to the client threads, each thread a [`Transactions`] script.
pub(crate) fn measure(
    addr: SocketAddr,
    connections: usize,
    threads: usize,
    plan: &Plan,
    start: Instant,
    seed: u64,
    server_pids: &[u32],
) -> Result<GameResult> {
    let opened = driver::open(addr, connections, None)?;
    let spec = driver::Spec {
        wire: plan.wire,
        threads,
        deal: Deal::RoundRobin,
        start,
        window: plan.window.clone(),
        server_pids,
    };
    let measured = driver::run(opened, &spec, |t| Transactions {
        plan,
        rng: Rng::new(seed.wrapping_add(t as u64 * 104_729)),
    })?;
    GameResult::of(measured)
}

/// One client thread's game transactions: `get` the player's row, `set` it back
/// changed, `get` the id by the row's email (whose id must match).
struct Transactions<'a> {
    plan: &'a Plan,
    rng: Rng,
}

/// A connection's transaction: the player, and the email key its row named.
#[derive(Default)]
struct Transaction {
    player: u64,
    /// `email:<email>` read from the row in step 0, looked up in step 2.
    email_key: Vec<u8>,
}

impl Script for Transactions<'_> {
    type Conn = Transaction;
    const STEPS: usize = STEP_NAMES.len();

    /// `get player:<id>` for a newly chosen player.
    fn begin(&mut self, t: &mut Transaction, out: &mut Vec<u8>) -> Expect {
        let plan = self.plan;
        t.player = plan.chooser.next(&mut self.rng);
        plan.wire.encode_get(out, &plan.layout.player_key(t.player));
        Expect::Values
    }

    /// A wrong reply (a miss, a refusal, a mismatched id) fails the transaction.
    fn reply(
        &mut self,
        t: &mut Transaction,
        step: usize,
        reply: Reply,
        bytes: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Next> {
        let plan = self.plan;
        match step {
            0 => {
                let values = plan.wire.values(bytes)?;
                let Some((id, row_email, score, level)) = values
                    .first()
                    .and_then(|row| plan.layout.decode(t.player, row))
                else {
                    return Ok(Next::Failed);
                };
                if id != t.player || values.len() != 1 {
                    return Ok(Next::Failed);
                }
                let score = score + 1 + self.rng.below(100);
                let level = level.max(score / 1000);
                let row = plan.layout.row(id, score, level, unix_now(), plan.row_size);
                plan.wire.encode_set(out, &plan.layout.player_key(id), &row);
                plan.layout.email_key(row_email, &mut t.email_key);
                Ok(Next::Send(Expect::Status))
            }
            1 => {
                if reply != Reply::Ok {
                    return Ok(Next::Failed);
                }
                plan.wire.encode_get(out, &t.email_key);
                Ok(Next::Send(Expect::Values))
            }
            _ => {
                let values = plan.wire.values(bytes)?;
                if values.len() != 1 || !plan.layout.email_names(t.player, values[0]) {
                    return Ok(Next::Failed);
                }
                Ok(Next::Done)
            }
        }
    }
}

pub fn run(args: &GameArgs) -> Result<Section> {
    let (mut section, started) = Section::begin("game", &args.common.data_root);
    let mut args = args.clone();
    if args.common.tiny {
        args.players = args.players.min(500);
        args.connections = vec![1, 4];
        args.duration = args.duration.min(0.3);
        args.warmup = args.warmup.min(0.1);
        args.reps = 1;
    }
    if args.players == 0 || args.connections.contains(&0) {
        bail!("--players and every --connections entry must be at least 1");
    }
    let mut backends = args.common.start_backends(crate::SqlBackends::Accepted)?;
    section.servers = backends.iter().flat_map(|b| b.launches.clone()).collect();
    section.parameters = format!("{args:#?}");
    for b in &backends {
        let progress = Progress::new(
            format!("preloading {} ({}-byte rows)", b.name, args.row_size),
            args.players,
            "players",
        );
        let all = 0..args.players;
        match b.protocol {
            Protocol::Memcached
            | Protocol::MemcachedBinary
            | Protocol::MemcachedTables
            | Protocol::Redis => preload(
                b.addr,
                b.protocol.wire().unwrap_or(Wire::Memcached),
                Layout::of(b.protocol),
                all,
                args.row_size,
                8,
                &progress,
            )?,
            Protocol::Mysql => {
                game_sql::create_schema(b.addr)?;
                game_sql::insert_players(b.addr, all, args.row_size, &progress)?;
            }
            Protocol::MemcachedTls => {
                bail!(
                    "{}: TLS is measured by the throughput workload only",
                    b.name
                )
            }
            Protocol::MysqlCacheAside { cache } => {
                game_sql::create_schema(b.addr)?;
                game_sql::insert_players(b.addr, all.clone(), args.row_size, &progress)?;
                progress.finish();
                let progress = Progress::new(
                    format!("preloading {}'s cache", b.name),
                    args.players,
                    "players",
                );
                preload(
                    cache,
                    Wire::Memcached,
                    Layout::TwoKeys,
                    all,
                    args.row_size,
                    8,
                    &progress,
                )?;
            }
        }
    }
    let chooser = KeyChooser::new(args.distribution, args.players);
    let count = backends.len();
    // results[connection index][backend] over repetitions
    let mut results: Vec<Vec<Vec<GameResult>>> = args
        .connections
        .iter()
        .map(|_| (0..count).map(|_| Vec::new()).collect())
        .collect();
    let total = args.reps * args.connections.len() * count;
    let mut done = 0;
    let progress = Progress::new("measuring", total as u64, "runs");
    for rep in 0..args.reps {
        for (ci, &connections) in args.connections.iter().enumerate() {
            for i in 0..count {
                let bi = (i + rep) % count;
                let _others = Paused::all_but(&backends, bi);
                let b = &mut backends[bi];
                b.check_alive()?;
                let start = Instant::now() + Duration::from_millis(20);
                // A tiny run measures at least one transaction, however long it takes.
                let needed = u64::from(args.common.tiny);
                let plan = Plan {
                    wire: b.protocol.wire().unwrap_or(Wire::Memcached),
                    layout: Layout::of(b.protocol),
                    chooser: chooser.clone(),
                    row_size: args.row_size,
                    window: Window::new(start, args.warmup, args.duration, needed),
                };
                let seed = args.common.seed.wrapping_add(rep as u64 * 31 + ci as u64);
                let r = measure_backend(b, connections, args.client_threads, &plan, start, seed)?;
                b.check_alive()?;
                done += 1;
                progress.println(&format!(
                    "[{done}/{total}] rep {} {:>3} conns {:<14} {:>9.0} TPS  txn p50 {} us p99 {} us  \
                     cpu: client {}% server {}% kernel {}% others {}%{}",
                    rep + 1,
                    connections,
                    b.name,
                    r.transactions as f64 / r.window.as_secs_f64(),
                    r.transaction.value_at_quantile(0.5),
                    r.transaction.value_at_quantile(0.99),
                    opt(r.cpu.client, 0),
                    opt(r.cpu.server, 0),
                    opt(r.cpu.kernel, 0),
                    opt(r.cpu.others, 0),
                    if r.failures > 0 { format!("  failures {}", r.failures) } else { String::new() }
                ));
                progress.add(1);
                results[ci][bi].push(r);
            }
        }
    }
    progress.finish();
    report(
        &args,
        &backends.iter().map(|b| b.name.clone()).collect::<Vec<_>>(),
        &results,
        &mut section,
    )?;
    section.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(section)
}

fn report(
    args: &GameArgs,
    names: &[String],
    results: &[Vec<Vec<GameResult>>],
    section: &mut Section,
) -> Result<()> {
    section.summary = format!(
        "{} players, {}-byte rows, {:?} keys, {} s measured after {} s warm-up, \
         median TPS of {} repetition(s); latency in us over all repetitions. A \
         transaction: get the player's row, set it back with score, level and \
         last-seen changed, get the id by the row's email.",
        args.players, args.row_size, args.distribution, args.duration, args.warmup, args.reps
    );
    println!("\ngame: {}", section.summary);
    let mut header = vec!["connections".to_string()];
    header.extend(names.iter().map(|n| format!("{n} TPS")));
    header.extend(names.iter().skip(1).map(|n| format!("{n} vs {}", names[0])));
    let mut tps_table = Table {
        header,
        rows: Vec::new(),
    };
    let mut latency_table = Table::new(&[
        "connections",
        "backend",
        "txn p50",
        "txn p99",
        "get p50",
        "get p99",
        "set p50",
        "set p99",
        "by-email p50",
        "by-email p99",
        "client cpu %",
        "server cpu %",
        "kernel cpu %",
        "others cpu %",
        "failures",
    ]);
    let mut csv = Csv::new(&[
        "connections",
        "backend",
        "reps",
        "tps_median",
        "ratio_to_first",
        "txn_p50_us",
        "txn_p99_us",
        "get_player_p50_us",
        "get_player_p99_us",
        "set_player_p50_us",
        "set_player_p99_us",
        "get_by_email_p50_us",
        "get_by_email_p99_us",
        "client_cpu_percent",
        "server_cpu_percent",
        "kernel_cpu_percent",
        "others_cpu_percent",
        "failures",
    ]);
    let mut failures = 0;
    let mut tps_series: Vec<Vec<Option<f64>>> = names.iter().map(|_| Vec::new()).collect();
    for (ci, &connections) in args.connections.iter().enumerate() {
        let tps: Vec<Option<f64>> = results[ci]
            .iter()
            .map(|reps| {
                median(
                    &reps
                        .iter()
                        .map(|r| r.transactions as f64 / r.window.as_secs_f64())
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        for (series, t) in tps_series.iter_mut().zip(&tps) {
            series.push(*t);
        }
        let mut row = vec![connections.to_string()];
        row.extend(tps.iter().map(|t| opt(*t, 0)));
        let first = tps.first().copied().flatten();
        row.extend(
            tps.iter()
                .skip(1)
                .map(|t| opt(t.zip(first).map(|(a, b)| a / b), 2)),
        );
        tps_table.push(row);
        for (bi, name) in names.iter().enumerate() {
            let reps = &results[ci][bi];
            let mut steps = [
                stats::new_histogram()?,
                stats::new_histogram()?,
                stats::new_histogram()?,
            ];
            let mut txn = stats::new_histogram()?;
            for r in reps {
                for (mine, theirs) in steps.iter_mut().zip(r.steps.iter()) {
                    mine.add(theirs)?;
                }
                txn.add(&r.transaction)?;
            }
            let fails: u64 = reps.iter().map(|r| r.failures).sum();
            failures += fails;
            let cpu = |f: &dyn Fn(&GameResult) -> Option<f64>| {
                median(&reps.iter().filter_map(f).collect::<Vec<_>>())
            };
            let client_cpu = cpu(&|r| r.cpu.client);
            let server_cpu = cpu(&|r| r.cpu.server);
            let kernel_cpu = cpu(&|r| r.cpu.kernel);
            let others_cpu = cpu(&|r| r.cpu.others);
            let q = |h: &Histogram<u64>, p: f64| h.value_at_quantile(p).to_string();
            latency_table.push(vec![
                connections.to_string(),
                name.clone(),
                q(&txn, 0.5),
                q(&txn, 0.99),
                q(&steps[0], 0.5),
                q(&steps[0], 0.99),
                q(&steps[1], 0.5),
                q(&steps[1], 0.99),
                q(&steps[2], 0.5),
                q(&steps[2], 0.99),
                opt(client_cpu, 0),
                opt(server_cpu, 0),
                opt(kernel_cpu, 0),
                opt(others_cpu, 0),
                fails.to_string(),
            ]);
            csv.push(vec![
                connections.to_string(),
                name.clone(),
                reps.len().to_string(),
                opt(tps[bi], 1),
                opt(tps[bi].zip(first).map(|(a, b)| a / b), 3),
                q(&txn, 0.5),
                q(&txn, 0.99),
                q(&steps[0], 0.5),
                q(&steps[0], 0.99),
                q(&steps[1], 0.5),
                q(&steps[1], 0.99),
                q(&steps[2], 0.5),
                q(&steps[2], 0.99),
                opt(client_cpu, 1),
                opt(server_cpu, 1),
                opt(kernel_cpu, 1),
                opt(others_cpu, 1),
                fails.to_string(),
            ]);
        }
    }
    println!("\n{}\n{}", tps_table.render(), latency_table.render());
    println!("steps: {}", STEP_NAMES.join(", "));
    let path = csv.write(&args.common.out_dir, "game")?;
    println!("wrote {}", path.display());
    section.csv = path.clone();
    let chart = Chart {
        title: format!(
            "game: get player, update, get by email ({} players, {:?})",
            args.players, args.distribution
        ),
        x_label: "connections".into(),
        y_label: "transactions/s (median)".into(),
        kind: Kind::Lines,
        categories: args.connections.iter().map(|c| c.to_string()).collect(),
        series: names.iter().cloned().zip(tps_series).collect(),
    };
    let files = chart.write_beside(&path)?;
    println!("wrote {files}");
    section.charts.push(files);
    section.tables.push((
        format!(
            "Median transactions per second, and the ratio of each backend's to {}'s:",
            names[0]
        ),
        tps_table,
    ));
    section.tables.push((
        format!(
            "Latency in µs over all repetitions (steps: {}) and median CPU use \
             (percent of one core):",
            STEP_NAMES.join(", ")
        ),
        latency_table,
    ));
    if let Some(table) = kura_ratios(&chart, Better::Higher, |_| true) {
        section.ratios.push((
            "Kura over its peers, same run: Kura's TPS divided by the peer's \
             (above 1: Kura ahead)."
                .to_string(),
            table,
        ));
    }
    if failures > 0 {
        section.failure = Some(format!(
            "{failures} transactions failed (a miss, a refused set or a wrong id)"
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip() {
        let row = encode_row(42, 1234, 1, 1_700_000_000, 300);
        assert_eq!(row.len(), 300);
        let (id, email, score, level) = decode_row(&row).unwrap();
        assert_eq!(
            (id, email, score, level),
            (42, &b"player42@example.com"[..], 1234, 1)
        );
        assert!(decode_row(b"garbage").is_none());
    }

    #[test]
    fn both_layouts_store_the_same_row() {
        for (id, size) in [(7, 300), (42, 300), (123_456, 1000), (9, 10)] {
            let whole = encode_row(id, 1234, 1, 1_700_000_000, size);
            assert_eq!(Layout::TwoKeys.row(id, 1234, 1, 1_700_000_000, size), whole);
            let table = Layout::Table.row(id, 1234, 1, 1_700_000_000, size);
            assert_eq!(whole, [format!("{id}|").as_bytes(), &table].concat());
            assert_eq!(
                Layout::Table.decode(id, &table),
                Some((id, email(id).as_bytes(), 1234, 1))
            );
        }
    }
}
