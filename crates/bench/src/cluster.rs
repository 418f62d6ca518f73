//! The cluster workload (issue 42): Kura's shards on a ketama ring, on loopback.
//!
//! Four Kura nodes in cluster mode, each the one node of its shard, and a private
//! etcd; with `--netns`, shards s3 and s4 run in a network namespace linked to this
//! one by a veth pair, so what passes between them and s1 or s2 crosses a link. The ring starts as the first shard alone, holding every key; then it grows
//! to two shards and to four while a load runs. At 1, 2 and 4 shards:
//! - **ketama**: sets and gets as a pylibmc-style client sends them, each key
//!   straight to the shard the ring names (`kura-ring`, which
//!   `crates/ring/tests/oracle.rs` proves equal to libmemcached's `KETAMA_WEIGHTED`):
//!   each client thread's connections go to one shard and draw their keys from that
//!   shard's;
//! - **nutcracker**: the same through nutcracker with the pool `kura cluster
//!   nutcracker` prints (`distribution: ketama`, `hash: md5`);
//! - the Kura nodes' CPU per request (their user and system time over the window,
//!   over the requests), from which the throughput of shards on machines of their
//!   own can be computed: on this machine every shard shares the same two cores, so
//!   more shards cannot add throughput.
//!
//! - **the game** (seed 000's transaction: get a player's row, set it back, get its
//!   id by email, on `player:<id>` and `email:<email>` keys) through nutcracker and
//!   through the first node alone (which passes on what other shards own).
//!
//! Each grow runs under the game through nutcracker with the old ring's pool
//! (clients that keep the old ring: the keys that move are passed on by their old
//! owner once they flip), in half-second windows: transactions a second, a request's
//! p99 and the longest request before, during and after. And at four shards, one connection's sequential gets through the first
//! node: of keys it owns, of keys another shard owns (passed on, one hop), and its
//! no-op round trip (`mn`): what a forwarded request costs over a direct one; and
//! beside them, the same probes of the peer that makes such a hop, nutcracker in
//! front of memcached (a get direct, a get through nutcracker, `version`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use kura_ring::{Member, Ring};
use kura_testkit::etcd::Etcd;
use kura_testkit::{free_port, KuraServer, NetNamespace};

use crate::chart::{Chart, Kind};
use crate::driver::{self, Deal, Next, Opened, Script};
use crate::game::{self, Layout};
use crate::keys::{key_name, value_bytes, Distribution, KeyChooser, Rng};
use crate::load::OpMix;
use crate::progress::Progress;
use crate::proto::{Expect, Reply, Wire};
use crate::report::{Csv, Section, Table};
use crate::stats;
use crate::window::Window;
use crate::Common;

#[derive(Args, Debug, Clone)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub common: Common,
    /// Keys in the key space, stored before the first measurement.
    #[arg(long, default_value_t = 200_000)]
    pub keys: u64,
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Connections of each load.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Seconds before each measured window.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Seconds of each measured window.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Seconds of load before and after each grow.
    #[arg(long, default_value_t = 3.0)]
    pub steady: f64,
    /// Sequential gets of each kind measuring a forwarded request's cost.
    #[arg(long, default_value_t = 20_000)]
    pub probes: usize,
    /// The game's players (`player:<id>` rows and `email:<email>` keys).
    #[arg(long, default_value_t = 50_000)]
    pub players: u64,
    /// Bytes in a player row.
    #[arg(long, default_value_t = 300)]
    pub row_size: usize,
    /// Shards s3 and s4 in a network namespace of their own, linked to this one by a
    /// veth pair (root): requests passed between s1 or s2 and them cross a link.
    #[arg(long)]
    pub netns: bool,
}

const CLUSTER: &str = "bench";
const SHARDS: usize = 4;
const KEY_PREFIX: &str = "key:";
/// How long a node may take to be its shard's primary, and the ring to reach every node.
const SETTLE_WITHIN: Duration = Duration::from_secs(120);
/// The length of each window of a grow's series.
const SLICE: Duration = Duration::from_millis(500);

struct Node {
    server: KuraServer,
    advertise: String,
    shard: String,
    _dir: tempfile::TempDir,
}

/// One measured window.
struct Measure {
    /// `load`, or the grow's phase, or the forwarding probe's kind.
    what: String,
    shards: usize,
    route: &'static str,
    op: String,
    ops_per_sec: f64,
    failures: u64,
    histogram: Histogram<u64>,
    /// The Kura nodes' CPU per request, µs.
    cpu_us: Option<f64>,
}

pub fn run(args: &ClusterArgs) -> Result<Section> {
    let mut args = args.clone();
    if args.common.tiny {
        args.keys = 3_000;
        args.warmup = 0.2;
        args.duration = 0.5;
        args.steady = 0.5;
        args.probes = 200;
        args.connections = 8;
        args.players = 1_000;
    }
    let (mut section, started) = Section::begin("cluster", &args.common.data_root);
    section.parameters = format!("{args:#?}");
    let ns = args.netns.then(|| NetNamespace::create("bench-cluster"));
    let etcd = Etcd::start_also_on(
        &args.common.data_root,
        ns.as_ref().map(|n| n.outside.as_str()),
    );
    let url = etcd.endpoint_also().unwrap_or_else(|| etcd.endpoint());
    let nodes = (1..=SHARDS)
        .map(|i| {
            // s1 and s2 on this side of the link, s3 and s4 across it.
            let place = ns.as_ref().map(|n| {
                if i <= 2 {
                    (n.outside.as_str(), None)
                } else {
                    (n.inside.as_str(), Some(n))
                }
            });
            start_node(&args, &url, &format!("s{i}"), place)
        })
        .collect::<Result<Vec<_>>>()?;
    for n in &nodes {
        primary(n)?;
    }
    let pids: Vec<u32> = nodes.iter().filter_map(|n| n.server.pid()).collect();
    set_ring(&args, &etcd, &nodes[..1])?;
    settled(&nodes, 1)?;
    let progress = Progress::new("preloading the first shard", args.keys, "keys");
    crate::load::preload(
        nodes[0].server.addr(),
        Wire::Memcached,
        None,
        KEY_PREFIX,
        args.keys,
        args.value_size,
        8,
        &progress,
    )?;
    progress.finish();
    {
        let nutcracker = Nutcracker::start(&args, &etcd)?;
        let progress = Progress::new("preloading the game's players", args.players, "players");
        game::preload(
            nutcracker.addr,
            Wire::Memcached,
            Layout::TwoKeys,
            0..args.players,
            args.row_size,
            8,
            &progress,
        )?;
        progress.finish();
    }
    let mut measures = Vec::new();
    let mut grows = Vec::new();
    for (version, shards) in [(1u64, 1usize), (2, 2), (3, 4)] {
        if shards > 1 {
            let before = previous(shards);
            let (took, series) = grow(&args, &etcd, &nodes, before, shards, &pids)?;
            settled(&nodes, version)?;
            grows.push((before, shards, took));
            measures.extend(series);
        }
        let nutcracker = Nutcracker::start(&args, &etcd)?;
        for op in [OpMix::Set, OpMix::Get] {
            let ring = ring_of(&nodes[..shards])?;
            measures.push(ketama(&args, &nodes[..shards], &ring, op, &pids)?);
            measures.push(through_nutcracker(&args, &nutcracker, shards, op, &pids)?);
        }
        for (route, addr) in [
            ("nutcracker", nutcracker.addr),
            ("one node", nodes[0].server.addr()),
        ] {
            let (per_sec, failures, histogram, cpu_us) =
                play(&args, addr, args.warmup, args.duration, &pids)?;
            measures.push(Measure {
                what: "load".into(),
                shards,
                route,
                op: "game".into(),
                ops_per_sec: per_sec,
                failures,
                histogram,
                cpu_us,
            });
        }
    }
    measures.extend(forward_cost(&args, &nodes)?);
    report(&args, &mut section, &measures, &grows)?;
    section.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(section)
}

/// The shard count the grow to `shards` starts from.
fn previous(shards: usize) -> usize {
    if shards == 2 {
        1
    } else {
        2
    }
}

/// Starts shard `shard`'s node; `place`: the address it listens on and the
/// namespace it runs in (None: loopback, here).
fn start_node(
    args: &ClusterArgs,
    etcd: &str,
    shard: &str,
    place: Option<(&str, Option<&NetNamespace>)>,
) -> Result<Node> {
    let (server, advertise, dir) = crate::failover::start_cluster_node(
        &args.common,
        "cluster",
        etcd,
        (CLUSTER, shard),
        place.unwrap_or(("127.0.0.1", None)),
        &["--lease-ttl-ms", "3000"],
    )?;
    Ok(Node {
        server,
        advertise,
        shard: shard.to_string(),
        _dir: dir,
    })
}

/// One number of `stats <what>` of `addr` (None: no such stat, or no answer).
fn stat(addr: SocketAddr, what: &str, name: &str) -> Option<String> {
    crate::failover::stats(addr, what)?.remove(name)
}

/// Waits until `node` is its shard's primary.
fn primary(node: &Node) -> Result<()> {
    let deadline = Instant::now() + SETTLE_WITHIN;
    while stat(node.server.addr(), "replication", "role").as_deref() != Some("primary") {
        if Instant::now() > deadline {
            bail!("shard {} elected no primary", node.shard);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Waits until every node places keys by ring `version` with no change in progress.
fn settled(nodes: &[Node], version: u64) -> Result<()> {
    let deadline = Instant::now() + SETTLE_WITHIN;
    loop {
        let done = nodes.iter().all(|n| {
            crate::failover::stats(n.server.addr(), "cluster").is_some_and(|s| {
                s.get("ring_version") == Some(&version.to_string())
                    && !s.contains_key("ring_next_version")
            })
        });
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("ring v{version} did not reach every node");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kura_cluster(args: &ClusterArgs, etcd: &Etcd, rest: &[&str]) -> Result<String> {
    let out = Command::new(&args.common.kura_bin)
        .args(["cluster"])
        .args(rest)
        .args(["--etcd", &etcd.endpoint(), "--cluster", CLUSTER])
        .output()
        .context("run kura cluster")?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("kura cluster {rest:?}: {text}");
    }
    Ok(text)
}

/// Sets the ring to `nodes`' shards (moving the keys), returning once every move is
/// done.
fn set_ring(args: &ClusterArgs, etcd: &Etcd, nodes: &[Node]) -> Result<()> {
    let shards: Vec<String> = nodes
        .iter()
        .map(|n| format!("{}={}", n.shard, n.advertise))
        .collect();
    kura_cluster(args, etcd, &["ring", "--shards", &shards.join(",")]).map(|_| ())
}

/// The ring a ketama client of `nodes` computes.
fn ring_of(nodes: &[Node]) -> Result<Ring> {
    let members = nodes
        .iter()
        .map(|n| {
            let (host, port) = n.advertise.rsplit_once(':').context("host:port")?;
            Ok(Member::new(host, port.parse()?))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Ring::ketama_weighted(members)?)
}

/// Each shard's keys by `ring`: the key ids whose names it owns.
fn owned(ring: &Ring, shards: usize, keys: u64) -> Vec<Arc<Vec<u64>>> {
    let mut owned = vec![Vec::new(); shards];
    let mut name = Vec::new();
    for id in 0..keys {
        key_name(&mut name, KEY_PREFIX, id);
        owned[ring.owner(&name)].push(id);
    }
    owned.into_iter().map(Arc::new).collect()
}

/// One client thread's requests: sets or gets of keys drawn from `ids`.
struct Ops {
    ids: Arc<Vec<u64>>,
    op: OpMix,
    rng: Rng,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Script for Ops {
    type Conn = ();
    const STEPS: usize = 1;

    fn begin(&mut self, _: &mut (), out: &mut Vec<u8>) -> Expect {
        let id = self.ids[self.rng.below(self.ids.len() as u64) as usize];
        key_name(&mut self.key, KEY_PREFIX, id);
        if self.op == OpMix::Set {
            Wire::Memcached.encode_set(out, &self.key, &self.value);
            Expect::Status
        } else {
            Wire::Memcached.encode_get(out, &self.key);
            Expect::Values
        }
    }

    fn reply(
        &mut self,
        _: &mut (),
        _: usize,
        reply: Reply,
        _: &[u8],
        _: &mut Vec<u8>,
    ) -> Result<Next> {
        Ok(crate::load::outcome(reply))
    }
}

/// Runs `op` over `connections`, thread t drawing keys from `ids(t)`, for `warmup`
/// then `duration` seconds.
#[allow(clippy::too_many_arguments)]
fn measure(
    args: &ClusterArgs,
    connections: Vec<Opened>,
    threads: usize,
    ids: impl Fn(usize) -> Arc<Vec<u64>>,
    op: OpMix,
    warmup: f64,
    duration: f64,
    pids: &[u32],
) -> Result<(f64, u64, Histogram<u64>, Option<f64>)> {
    let start = Instant::now() + Duration::from_millis(20);
    let min = u64::from(args.common.tiny);
    let spec = driver::Spec {
        wire: Wire::Memcached,
        threads,
        deal: Deal::Blocks,
        start,
        window: Window::new(start, warmup, duration, min),
        server_pids: pids,
    };
    let measured = driver::run(connections, &spec, |t| Ops {
        ids: ids(t),
        op,
        rng: Rng::new(args.common.seed.wrapping_add(t as u64 * 7919)),
        key: Vec::with_capacity(32),
        value: value_bytes(args.value_size, t as u64),
    })?;
    let tally = measured.tally;
    let ops = tally.transactions + tally.failures;
    let secs = measured.window.as_secs_f64();
    let histogram = tally.steps.into_iter().next().context("one step")?;
    let cpu_us = measured
        .cpu
        .server
        .filter(|_| ops > 0)
        .map(|percent| percent / 100.0 * secs / ops as f64 * 1e6);
    Ok((ops as f64 / secs, tally.failures, histogram, cpu_us))
}

/// The ketama load over `nodes` by `ring`: connections spread evenly over the
/// shards, each client thread's on one shard with that shard's keys.
fn ketama_with(
    args: &ClusterArgs,
    nodes: &[Node],
    ring: &Ring,
    op: OpMix,
    pids: &[u32],
    warmup: f64,
    duration: f64,
) -> Result<(f64, u64, Histogram<u64>, Option<f64>)> {
    let shards = nodes.len();
    let owned = owned(ring, shards, args.keys);
    let per = (args.connections / shards).max(1);
    let mut connections = Vec::with_capacity(per * shards);
    for n in nodes {
        connections.extend(driver::open(n.server.addr(), per, None)?);
    }
    let threads = shards.max(2);
    measure(
        args,
        connections,
        threads,
        |t| Arc::clone(&owned[t * shards / threads]),
        op,
        warmup,
        duration,
        pids,
    )
}

fn ketama(
    args: &ClusterArgs,
    nodes: &[Node],
    ring: &Ring,
    op: OpMix,
    pids: &[u32],
) -> Result<Measure> {
    let (ops_per_sec, failures, histogram, cpu_us) =
        ketama_with(args, nodes, ring, op, pids, args.warmup, args.duration)?;
    Ok(Measure {
        what: "load".into(),
        shards: nodes.len(),
        route: "ketama",
        op: op.name(),
        ops_per_sec,
        failures,
        histogram,
        cpu_us,
    })
}

/// nutcracker with the pool `kura cluster nutcracker` printed when it started, until
/// dropped.
struct Nutcracker {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Nutcracker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nutcracker {
    /// nutcracker with the pool `kura cluster nutcracker` prints for the ring.
    fn start(args: &ClusterArgs, etcd: &Etcd) -> Result<Nutcracker> {
        let listen = format!("127.0.0.1:{}", free_port());
        let pool = kura_cluster(args, etcd, &["nutcracker", "--listen", &listen])?;
        Nutcracker::with_pool(&listen, pool)
    }

    /// nutcracker in front of one memcached, as a ketama pool of one server: the
    /// peer's cost of a hop.
    fn before(memcached: SocketAddr) -> Result<Nutcracker> {
        let listen = format!("127.0.0.1:{}", free_port());
        let pool = format!(
            "peer:\n  listen: {listen}\n  hash: md5\n  distribution: ketama\n  auto_eject_hosts: false\n  servers:\n   - {memcached}:1\n"
        );
        Nutcracker::with_pool(&listen, pool)
    }

    fn with_pool(listen: &str, pool: String) -> Result<Nutcracker> {
        let dir = tempfile::tempdir()?;
        let conf: PathBuf = dir.path().join("pool.yml");
        std::fs::write(&conf, pool)?;
        // A stats port of its own: nutcracker's default (22222) is one for the machine.
        let child = Command::new("nutcracker")
            .arg("-c")
            .arg(&conf)
            .args(["-s", &free_port().to_string()])
            .arg("-o")
            .arg(dir.path().join("nutcracker.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("run nutcracker (scripts/install-peers.sh installs it)")?;
        let nutcracker = Nutcracker {
            child,
            addr: listen.parse()?,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(nutcracker.addr).is_err() {
            if Instant::now() > deadline {
                bail!("nutcracker did not listen on {listen}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(nutcracker)
    }
}

/// The game's transactions through `addr` for `warmup` then `duration` seconds:
/// transactions a second, failures, every request's latency, the Kura nodes' CPU per
/// request.
fn play(
    args: &ClusterArgs,
    addr: SocketAddr,
    warmup: f64,
    duration: f64,
    pids: &[u32],
) -> Result<(f64, u64, Histogram<u64>, Option<f64>)> {
    let start = Instant::now() + Duration::from_millis(20);
    let plan = game::Plan {
        wire: Wire::Memcached,
        layout: Layout::TwoKeys,
        chooser: KeyChooser::new(Distribution::Uniform, args.players),
        row_size: args.row_size,
        window: Window::new(start, warmup, duration, u64::from(args.common.tiny)),
    };
    let result = game::measure(
        addr,
        args.connections,
        2,
        &plan,
        start,
        args.common.seed,
        pids,
    )?;
    let mut requests = stats::new_histogram()?;
    for step in &result.steps {
        requests.add(step)?;
    }
    let secs = result.window.as_secs_f64();
    let done = result.transactions + result.failures;
    let cpu_us = result
        .cpu
        .server
        .filter(|_| done > 0)
        .map(|percent| percent / 100.0 * secs / (done * 3) as f64 * 1e6);
    Ok((
        result.transactions as f64 / secs,
        result.failures,
        requests,
        cpu_us,
    ))
}

fn through_nutcracker(
    args: &ClusterArgs,
    nutcracker: &Nutcracker,
    shards: usize,
    op: OpMix,
    pids: &[u32],
) -> Result<Measure> {
    let addr = nutcracker.addr;
    let all: Arc<Vec<u64>> = Arc::new((0..args.keys).collect());
    let connections = driver::open(addr, args.connections, None)?;
    let (ops_per_sec, failures, histogram, cpu_us) = measure(
        args,
        connections,
        2,
        |_| Arc::clone(&all),
        op,
        args.warmup,
        args.duration,
        pids,
    )?;
    Ok(Measure {
        what: "load".into(),
        shards,
        route: "nutcracker",
        op: op.name(),
        ops_per_sec,
        failures,
        histogram,
        cpu_us,
    })
}

/// Grows the ring from the first `from` shards to the first `to` while the game runs
/// through nutcracker with the old ring's pool: how long the grow took, and the
/// load's half-second windows marked before, during or after it.
fn grow(
    args: &ClusterArgs,
    etcd: &Etcd,
    nodes: &[Node],
    from: usize,
    to: usize,
    pids: &[u32],
) -> Result<(Duration, Vec<Measure>)> {
    // The old ring's pool, kept for the whole grow: clients that keep the old ring.
    let nutcracker = Nutcracker::start(args, etcd)?;
    let done = Arc::new(AtomicBool::new(false));
    let mut series = Vec::new();
    let steady = Duration::from_secs_f64(args.steady);
    let began = Instant::now();
    let mut grow_at = None;
    let mut grow_took = None;
    let mut after_since = None;
    let mut runner: Option<std::thread::JoinHandle<Result<Duration>>> = None;
    loop {
        let now = Instant::now();
        if runner.is_none() && grow_at.is_none() && now - began >= steady {
            let (args, etcd_url, shards, done) = (
                args.clone(),
                etcd.endpoint(),
                nodes[..to]
                    .iter()
                    .map(|n| format!("{}={}", n.shard, n.advertise))
                    .collect::<Vec<_>>()
                    .join(","),
                Arc::clone(&done),
            );
            grow_at = Some(now);
            runner = Some(std::thread::spawn(move || {
                let started = Instant::now();
                let out = Command::new(&args.common.kura_bin)
                    .args(["cluster", "ring", "--shards", &shards])
                    .args(["--etcd", &etcd_url, "--cluster", CLUSTER])
                    .output();
                done.store(true, Ordering::Release);
                let out = out.context("run kura cluster ring")?;
                if !out.status.success() {
                    bail!(
                        "kura cluster ring: {}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                Ok(started.elapsed())
            }));
        }
        let phase = match (grow_at, grow_took) {
            (None, _) => "grow-before",
            (Some(_), None) => "grow-during",
            (Some(_), Some(_)) => "grow-after",
        };
        let (ops_per_sec, failures, histogram, cpu_us) =
            play(args, nutcracker.addr, 0.0, SLICE.as_secs_f64(), pids)?;
        series.push(Measure {
            what: phase.into(),
            shards: to,
            route: "nutcracker",
            op: format!("game {from} to {to}"),
            ops_per_sec,
            failures,
            histogram,
            cpu_us,
        });
        if grow_took.is_none() && done.load(Ordering::Acquire) {
            let took = runner
                .take()
                .context("the grow's thread")?
                .join()
                .map_err(|_| anyhow::anyhow!("the grow's thread panicked"))??;
            grow_took = Some(took);
            after_since = Some(Instant::now());
        }
        if after_since.is_some_and(|t| t.elapsed() >= steady) {
            break;
        }
    }
    Ok((grow_took.context("the grow ended")?, series))
}

/// At four shards, one connection to the first node: sequential gets of keys it owns
/// and of keys another shard owns, and its no-op round trip.
fn forward_cost(args: &ClusterArgs, nodes: &[Node]) -> Result<Vec<Measure>> {
    let ring = ring_of(nodes)?;
    let owned = owned(&ring, nodes.len(), args.keys);
    // Across the link when s3 is in a namespace.
    let other = if args.netns { 2 } else { 1 };
    let (mine, other) = (&owned[0], &owned[other]);
    if mine.is_empty() || other.is_empty() {
        bail!("too few keys to find some of each shard");
    }
    // The peer doing the same work: nutcracker passing a get on to memcached.
    // Started as every other benchmark starts it (`--memcached-bin`, its threads and
    // memory).
    let memcached = crate::backend::Backend::start(
        &crate::backend::BackendKind::Memcached {
            name: "memcached".into(),
        },
        &args.common.launch_config(),
    )?;
    let nutcracker = Nutcracker::before(memcached.addr)?;
    let mut m = kura_testkit::Client::connect(memcached.addr)?;
    let mut value = b"set peer 0 0 ".to_vec();
    value.extend_from_slice(format!("{}\r\n", args.value_size).as_bytes());
    value.extend_from_slice(&value_bytes(args.value_size, 1));
    value.extend_from_slice(b"\r\n");
    m.request(&value, b"\r\n")?;
    let mut through = kura_testkit::Client::connect(nutcracker.addr)?;
    let mut c = kura_testkit::Client::connect(nodes[0].server.addr())?;
    let mut histograms: Vec<Histogram<u64>> = (0..6)
        .map(|_| stats::new_histogram())
        .collect::<Result<_>>()?;
    let mut key = Vec::new();
    for i in 0..args.probes {
        for (h, ids) in [(0, Some(mine)), (1, Some(other)), (2, None)] {
            let request = match ids {
                Some(ids) => {
                    key_name(&mut key, KEY_PREFIX, ids[i % ids.len()]);
                    let mut r = b"get ".to_vec();
                    r.extend_from_slice(&key);
                    r.extend_from_slice(b"\r\n");
                    (r, &b"END\r\n"[..])
                }
                None => (b"mn\r\n".to_vec(), &b"MN\r\n"[..]),
            };
            let sent = Instant::now();
            let reply = c.request(&request.0, request.1)?;
            stats::record(&mut histograms[h], sent.elapsed());
            if ids.is_some() && !reply.starts_with(b"VALUE ") {
                bail!(
                    "a probe found no value: {}",
                    String::from_utf8_lossy(&reply)
                );
            }
        }
        for (h, request, end) in [
            (3, &b"get peer\r\n"[..], &b"END\r\n"[..]),
            (4, b"get peer\r\n", b"END\r\n"),
            (5, b"version\r\n", b"\r\n"),
        ] {
            let client = if h == 4 { &mut through } else { &mut m };
            let sent = Instant::now();
            let reply = client.request(request, end)?;
            stats::record(&mut histograms[h], sent.elapsed());
            if h != 5 && !reply.starts_with(b"VALUE ") {
                bail!(
                    "a peer probe found no value: {}",
                    String::from_utf8_lossy(&reply)
                );
            }
        }
    }
    let [direct, passed, round_trip, peer_direct, peer_passed, peer_round_trip]: [Histogram<u64>;
        6] = histograms
        .try_into()
        .map_err(|_| anyhow::anyhow!("six probes"))?;
    let measure = |what: &str, op: &str, histogram: Histogram<u64>| Measure {
        what: what.into(),
        shards: nodes.len(),
        route: if what == "forward" {
            "one node"
        } else {
            "memcached"
        },
        op: op.into(),
        ops_per_sec: 0.0,
        failures: 0,
        histogram,
        cpu_us: None,
    };
    Ok(vec![
        measure("forward", "get owned here", direct),
        measure("forward", "get passed on", passed),
        measure("forward", "mn round trip", round_trip),
        measure("forward peer", "memcached: get", peer_direct),
        measure(
            "forward peer",
            "memcached: get through nutcracker",
            peer_passed,
        ),
        measure(
            "forward peer",
            "memcached: version round trip",
            peer_round_trip,
        ),
    ])
}

fn report(
    args: &ClusterArgs,
    section: &mut Section,
    measures: &[Measure],
    grows: &[(usize, usize, Duration)],
) -> Result<()> {
    let mut csv = Csv::new(&[
        "measure",
        "shards",
        "route",
        "op",
        "ops_per_sec",
        "failures",
        "p50_us",
        "p99_us",
        "max_us",
        "server_cpu_us_per_op",
    ]);
    for m in measures {
        csv.push(vec![
            m.what.clone(),
            m.shards.to_string(),
            m.route.to_string(),
            m.op.clone(),
            format!("{:.0}", m.ops_per_sec),
            m.failures.to_string(),
            m.histogram.value_at_quantile(0.5).to_string(),
            m.histogram.value_at_quantile(0.99).to_string(),
            m.histogram.max().to_string(),
            m.cpu_us.map_or(String::new(), |c| format!("{c:.1}")),
        ]);
    }
    let mut loads = Table::new(&[
        "shards",
        "route",
        "op",
        "ops/s",
        "p50 µs",
        "p99 µs",
        "Kura CPU µs/op",
    ]);
    for m in measures.iter().filter(|m| m.what == "load") {
        loads.push(vec![
            m.shards.to_string(),
            m.route.to_string(),
            m.op.clone(),
            format!("{:.0}", m.ops_per_sec),
            m.histogram.value_at_quantile(0.5).to_string(),
            m.histogram.value_at_quantile(0.99).to_string(),
            m.cpu_us.map_or("-".into(), |c| format!("{c:.1}")),
        ]);
    }
    println!("{}", loads.render());
    section.tables.push((
        "Sets and gets at 1, 2 and 4 shards, straight to each key's shard (ketama) and through nutcracker, and the game (transactions a second) through nutcracker and through one node".into(),
        loads,
    ));
    let mut growing = Table::new(&[
        "grow",
        "took s",
        "game tx/s before",
        "during",
        "after",
        "during / before",
        "request p99 during ms",
        "longest request during ms",
        "failed",
    ]);
    for (from, to, took) in grows {
        let op = format!("game {from} to {to}");
        let phase = |p: &str| -> Vec<&Measure> {
            measures
                .iter()
                .filter(|m| m.what == p && m.op == op)
                .collect()
        };
        let rate = |ms: &[&Measure]| {
            stats::median(&ms.iter().map(|m| m.ops_per_sec).collect::<Vec<_>>()).unwrap_or(0.0)
        };
        let (before, during, after) = (
            phase("grow-before"),
            phase("grow-during"),
            phase("grow-after"),
        );
        let mut merged = stats::new_histogram()?;
        for m in &during {
            merged.add(&m.histogram)?;
        }
        let failed: u64 = [&before, &during, &after]
            .iter()
            .flat_map(|p| p.iter())
            .map(|m| m.failures)
            .sum();
        growing.push(vec![
            format!("{from} to {to}"),
            format!("{:.1}", took.as_secs_f64()),
            format!("{:.0}", rate(&before)),
            format!("{:.0}", rate(&during)),
            format!("{:.0}", rate(&after)),
            format!("{:.2}", rate(&during) / rate(&before).max(1.0)),
            format!("{:.1}", merged.value_at_quantile(0.99) as f64 / 1e3),
            format!("{:.1}", merged.max() as f64 / 1e3),
            failed.to_string(),
        ]);
    }
    println!("{}", growing.render());
    section.tables.push((
        "Growing the ring under the game through nutcracker with the old ring's pool: transactions a second (median of half-second windows), a request's p99 and the longest request during the grow".into(),
        growing,
    ));
    let mut forward = Table::new(&["request", "p50 µs", "p99 µs"]);
    for m in measures.iter().filter(|m| m.what.starts_with("forward")) {
        forward.push(vec![
            m.op.clone(),
            m.histogram.value_at_quantile(0.5).to_string(),
            m.histogram.value_at_quantile(0.99).to_string(),
        ]);
    }
    println!("{}", forward.render());
    let p50 = |op: &str| {
        measures
            .iter()
            .find(|m| m.what.starts_with("forward") && m.op == op)
            .map(|m| m.histogram.value_at_quantile(0.5) as f64)
    };
    let hops = |direct: &str, passed: &str, round_trip: &str| -> Option<f64> {
        Some((p50(passed)? - p50(direct)?) / p50(round_trip)?.max(1.0))
    };
    if let (Some(kura), Some(peer)) = (
        hops("get owned here", "get passed on", "mn round trip"),
        hops(
            "memcached: get",
            "memcached: get through nutcracker",
            "memcached: version round trip",
        ),
    ) {
        let line = format!(
            "A get passed on costs {kura:.2} round trips (p50) over a direct one through Kura; through nutcracker in front of memcached, {peer:.2}."
        );
        println!("{line}");
        section.notes.push(line);
    }
    section.tables.push((
        if args.netns {
            "What a forwarded request costs: one connection's sequential requests to the first of four shards, passed on across the veth link to s3; and the peer's hop, nutcracker in front of memcached on loopback".into()
        } else {
            "What a forwarded request costs: one connection's sequential requests to the first of four shards; and the peer's hop, nutcracker in front of memcached".into()
        },
        forward,
    ));
    section.summary = format!(
        "Four Kura nodes (cluster mode, --durability fsync), each the one node of its shard, and a private etcd, {}; {} keys of {} bytes and the game's {} players of {} bytes, {} connections per load, {} s windows after {} s of warm-up; the ring grows from 1 shard to 2 and from 2 to 4 under the game through the old ring's nutcracker pool",
        if args.netns { "s3 and s4 in a network namespace linked by a veth pair" } else { "on loopback" },
        args.keys, args.value_size, args.players, args.row_size, args.connections, args.duration, args.warmup
    );
    section.notes.push(
        "Every shard shares this machine's two cores: more shards cannot add throughput here. The Kura CPU per request (the nodes' user and system time over the requests) is what a shard spends per request; on machines of their own, n shards serve about n times one shard's rate for the same per-request cost.".into(),
    );
    let failed: u64 = measures
        .iter()
        .filter(|m| m.what == "load")
        .map(|m| m.failures)
        .sum();
    if failed > 0 {
        section.failure = Some(format!("{failed} requests failed outside a grow"));
    }
    let path = csv.write(&args.common.out_dir, "cluster")?;
    let shard_counts = ["1", "2", "4"];
    let chart = Chart {
        title: "Sets and gets a second by shards (all on one two-core machine)".to_string(),
        x_label: "shards".to_string(),
        y_label: "ops/s".to_string(),
        kind: Kind::Bars,
        categories: shard_counts.iter().map(|s| s.to_string()).collect(),
        series: [
            ("ketama", "set"),
            ("nutcracker", "set"),
            ("ketama", "get"),
            ("nutcracker", "get"),
        ]
        .iter()
        .map(|(route, op)| {
            let values = shard_counts
                .iter()
                .map(|n| {
                    measures
                        .iter()
                        .find(|m| {
                            m.what == "load"
                                && m.shards.to_string() == *n
                                && m.route == *route
                                && m.op == *op
                        })
                        .map(|m| m.ops_per_sec)
                })
                .collect();
            (format!("{route} {op}"), values)
        })
        .collect(),
    };
    let files = chart.write_beside(&path)?;
    println!("wrote {files}");
    section.charts.push(files);
    section.csv = path;
    Ok(())
}
