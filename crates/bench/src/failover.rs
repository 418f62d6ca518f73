//! The failover workload (issue 41): a shard of three Kura nodes in cluster mode
//! (`--etcd`, `--min-sync-replicas 1`) and a private etcd, with writers that write
//! through a node that is not the primary (it forwards their sets). Each round puts
//! the shard through three changes of primary:
//! - a planned switchover (`kura cluster switchover --to`) to the node that runs in a
//!   network namespace of its own;
//! - that primary's link cut (the veth taken down): it loses etcd and its replicas at
//!   once, the others elect one of them; the link back, it rejoins;
//! - the new primary SIGKILLed, and restarted once the shard has another.
//!
//! Measured per change: the longest time between two acknowledged writes across all
//! writers (the time the shard took no write: for a failure, the time without a
//! primary as clients see it; for a switchover, its pause), the writes refused
//! meanwhile (`SERVER_ERROR`, which the writers retry), and the acknowledged writes
//! the primary after it does not hold, which must be 0. Needs root (network
//! namespaces) and Debian's `etcd-server`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use kura_testkit::etcd::Etcd;
use kura_testkit::{free_port, Client, Durability, KuraOptions, KuraServer, NetNamespace};

use crate::chart::{Chart, Kind};
use crate::report::{Csv, Section, Table};
use crate::stats::median;
use crate::Common;

#[derive(Args, Debug, Clone)]
pub struct FailoverArgs {
    #[command(flatten)]
    pub common: Common,
    /// Rounds; each has a switchover, a cut link and a SIGKILL.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// Writer threads, each writing through a node that is not the primary.
    #[arg(long, default_value_t = 4)]
    pub writers: usize,
    /// The nodes' `--lease-ttl-ms` (etcd grants no lease under 1 s with this
    /// workload's etcd).
    #[arg(long, default_value_t = 3000)]
    pub lease_ttl_ms: u64,
    /// Seconds of writes before and after each change.
    #[arg(long, default_value_t = 1.0)]
    pub steady: f64,
}

const SHARD: &str = "s0";
const CLUSTER: &str = "bench";
/// How long the shard may take to settle (one primary, both replicas following).
const SETTLE_WITHIN: Duration = Duration::from_secs(120);

struct Node {
    server: KuraServer,
    advertise: String,
    _dir: tempfile::TempDir,
}

/// What the writers saw.
#[derive(Default)]
struct Seen {
    acked: Mutex<Vec<(Instant, String)>>,
    refused: AtomicU64,
}

/// One change of primary, measured.
struct Outcome {
    scenario: &'static str,
    round: usize,
    longest_gap: Duration,
    acked: usize,
    refused: u64,
    lost: usize,
}

pub fn run(args: &FailoverArgs) -> Result<Section> {
    let mut args = args.clone();
    if args.common.tiny {
        args.rounds = 1;
        args.steady = 0.3;
    }
    let (mut section, started) = Section::begin("failover", &args.common.data_root);
    section.parameters = format!("{args:#?}");
    let ns = NetNamespace::create("bench");
    let etcd = Etcd::start_also_on(&args.common.data_root, Some(&ns.outside));
    let url = etcd
        .endpoint_also()
        .context("etcd on the namespace's link")?;
    // The two outside first, so that the first round begins with a switchover to the
    // node in the namespace.
    let outside = [
        start_node(&args, &url, &ns.outside, None)?,
        start_node(&args, &url, &ns.outside, None)?,
    ];
    settled(&outside)?;
    let [a, b] = outside;
    let mut nodes = vec![start_node(&args, &url, &ns.inside, Some(&ns))?, a, b];
    settled(&nodes)?;
    let seen = Arc::new(Seen::default());
    let via = Arc::new(Mutex::new(nodes[1].server.addr()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..args.writers)
        .map(|w| {
            let (seen, via, stop) = (Arc::clone(&seen), Arc::clone(&via), Arc::clone(&stop));
            std::thread::spawn(move || write(w, &seen, &via, &stop))
        })
        .collect();
    let steady = Duration::from_secs_f64(args.steady);
    let mut outcomes = Vec::new();
    let result = (|| -> Result<()> {
        for round in 0..args.rounds {
            // A planned switchover to the node in the namespace.
            let p = settled(&nodes)?;
            if p != 0 {
                set_via(&via, &nodes, &[0, p]);
                let from = mark(&seen, steady);
                switchover(&args, &etcd, &nodes[0].advertise)?;
                std::thread::sleep(steady);
                let p = settled(&nodes)?;
                outcomes.push(measure("switchover", round, &seen, from, &nodes[p])?);
            }
            // Its link cut, and healed once the others have a primary.
            set_via(&via, &nodes, &[0]);
            let from = mark(&seen, steady);
            ns.link_up(false);
            let deadline = Instant::now() + SETTLE_WITHIN;
            while primary_of(&nodes[1..]).is_none() {
                if Instant::now() > deadline {
                    ns.link_up(true);
                    bail!("no primary outside the cut link");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(steady);
            ns.link_up(true);
            let p = settled(&nodes)?;
            outcomes.push(measure("link cut", round, &seen, from, &nodes[p])?);
            // The primary SIGKILLed, restarted once there is another.
            let victim = settled(&nodes)?;
            set_via(&via, &nodes, &[victim, 0]);
            let from = mark(&seen, steady);
            nodes[victim].server.kill().context("SIGKILL the primary")?;
            let others: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
            let deadline = Instant::now() + SETTLE_WITHIN;
            while !others
                .iter()
                .any(|&i| role(&nodes[i]).as_deref() == Some("primary"))
            {
                if Instant::now() > deadline {
                    bail!("no primary after the SIGKILL");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            std::thread::sleep(steady);
            nodes[victim]
                .server
                .restart()
                .context("restart the old primary")?;
            let p = settled(&nodes)?;
            outcomes.push(measure("SIGKILL", round, &seen, from, &nodes[p])?);
            for o in &outcomes[outcomes.len().saturating_sub(3)..] {
                println!(
                    "round {} {}: no write for {} ms, {} acknowledged, {} refused, {} lost",
                    o.round + 1,
                    o.scenario,
                    o.longest_gap.as_millis(),
                    o.acked,
                    o.refused,
                    o.lost
                );
            }
        }
        Ok(())
    })();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.join();
    }
    result?;
    drop(etcd);
    report(&args, &mut section, &outcomes)?;
    section.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(section)
}

fn start_node(
    args: &FailoverArgs,
    etcd: &str,
    ip: &str,
    ns: Option<&NetNamespace>,
) -> Result<Node> {
    let ttl = args.lease_ttl_ms.to_string();
    let (server, advertise, dir) = start_cluster_node(
        &args.common,
        "failover",
        etcd,
        (CLUSTER, SHARD),
        (ip, ns),
        &["--lease-ttl-ms", &ttl, "--min-sync-replicas", "1"],
    )?;
    Ok(Node {
        server,
        advertise,
        _dir: dir,
    })
}

/// A Kura node of cluster `cluster`'s shard `shard` (fsync, no SQL port, off the
/// loopback with `--insecure`), listening on `ip`, in the namespace `ns` if given,
/// with `extra` arguments: the server, the address it advertises, its data
/// directory (in `--data-root`, named after `workload`).
pub(crate) fn start_cluster_node(
    common: &Common,
    workload: &str,
    etcd: &str,
    (cluster, shard): (&str, &str),
    (ip, ns): (&str, Option<&NetNamespace>),
    extra: &[&str],
) -> Result<(KuraServer, String, tempfile::TempDir)> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("kura-bench-{workload}-"))
        .tempdir_in(&common.data_root)
        .context("a data directory")?;
    let port = free_port();
    let advertise = format!("{ip}:{port}");
    let mut options = KuraOptions::new(&common.kura_bin, Durability::Fsync).listen(ip);
    if let Some(ns) = ns {
        options = options.wrapped_in(&["ip", "netns", "exec", &ns.name]);
    }
    if ip != "127.0.0.1" {
        // Off the loopback, with no users: a bench's private nodes.
        options = options.arg("--insecure");
    }
    let port_text = port.to_string();
    let cluster_args = [
        "-p",
        &port_text,
        "--sql-port",
        "off",
        "--etcd",
        etcd,
        "--cluster",
        cluster,
        "--shard",
        shard,
        "--advertise",
        &advertise,
    ];
    for arg in cluster_args.iter().chain(extra) {
        options = options.arg(arg);
    }
    for arg in &common.kura_args {
        options = options.arg(arg);
    }
    let server = options
        .start_on(dir.path())
        .with_context(|| format!("starting shard {shard}'s node at {advertise}"))?;
    Ok((server, advertise, dir))
}

/// `stats <what>` of `addr` as a map, or None if it does not answer.
pub(crate) fn stats(addr: SocketAddr, what: &str) -> Option<BTreeMap<String, String>> {
    let mut c = Client::connect(addr).ok()?;
    let reply = c
        .request(format!("stats {what}\r\n").as_bytes(), b"END\r\n")
        .ok()?;
    Some(
        String::from_utf8_lossy(&reply)
            .lines()
            .filter_map(|l| l.strip_prefix("STAT "))
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn role(node: &Node) -> Option<String> {
    let addr = node.server.pid().map(|_| node.server.addr())?;
    stats(addr, "replication")?.get("role").cloned()
}

fn primary_of(nodes: &[Node]) -> Option<usize> {
    nodes
        .iter()
        .position(|n| role(n).as_deref() == Some("primary"))
}

/// Waits until one node is primary with the two others following it; which.
fn settled(nodes: &[Node]) -> Result<usize> {
    let deadline = Instant::now() + SETTLE_WITHIN;
    loop {
        if let Some(p) = primary_of(nodes) {
            let connected = stats(nodes[p].server.addr(), "replication")
                .and_then(|s| s.get("connected_replicas")?.parse::<usize>().ok());
            let follow = (0..nodes.len()).filter(|&i| i != p).all(|i| {
                stats(nodes[i].server.addr(), "replication").is_some_and(|s| {
                    s.get("primary") == Some(&nodes[p].advertise)
                        && s.get("primary_link").map(String::as_str) == Some("up")
                })
            });
            if connected == Some(nodes.len() - 1) && follow {
                return Ok(p);
            }
        }
        if Instant::now() > deadline {
            bail!("the shard did not settle within {SETTLE_WITHIN:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Points the writers at a node that is none of `not`.
fn set_via(via: &Mutex<SocketAddr>, nodes: &[Node], not: &[usize]) {
    if let Some(i) = (0..nodes.len()).find(|i| !not.contains(i)) {
        *via.lock().unwrap_or_else(|e| e.into_inner()) = nodes[i].server.addr();
    }
}

/// A writer: sets of its own keys through the node `via` names, until `stop`.
fn write(w: usize, seen: &Seen, via: &Mutex<SocketAddr>, stop: &AtomicBool) {
    let mut connected: Option<(SocketAddr, Client)> = None;
    for i in 0u64.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let at = *via.lock().unwrap_or_else(|e| e.into_inner());
        if connected.as_ref().is_none_or(|(a, _)| *a != at) {
            connected = Client::connect(at).ok().map(|c| (at, c));
        }
        let Some((_, c)) = connected.as_mut() else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let key = format!("w{w}-{i}");
        let value = format!("v{i}");
        let request = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
        match c.request(request.as_bytes(), b"\r\n") {
            Ok(reply) if reply == b"STORED\r\n" => {
                let mut acked = seen.acked.lock().unwrap_or_else(|e| e.into_inner());
                acked.push((Instant::now(), key));
            }
            Ok(_) => {
                seen.refused.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => {
                seen.refused.fetch_add(1, Ordering::Relaxed);
                connected = None;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Where a change's measurement starts: after `steady` of writes, the counts now.
fn mark(seen: &Seen, steady: Duration) -> (usize, u64) {
    std::thread::sleep(steady);
    let acked = seen.acked.lock().unwrap_or_else(|e| e.into_inner()).len();
    (acked, seen.refused.load(Ordering::Relaxed))
}

/// The change since `mark`: the longest time between two acknowledged writes, the
/// writes refused, and the acknowledged ones `primary` does not hold.
fn measure(
    scenario: &'static str,
    round: usize,
    seen: &Seen,
    (from, refused_before): (usize, u64),
    primary: &Node,
) -> Result<Outcome> {
    let acked: Vec<(Instant, String)> = {
        let all = seen.acked.lock().unwrap_or_else(|e| e.into_inner());
        all[from.saturating_sub(1)..].to_vec()
    };
    let mut times: Vec<Instant> = acked.iter().map(|(t, _)| *t).collect();
    times.sort_unstable();
    let longest_gap = times
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    let mut c = Client::connect(primary.server.addr()).context("connect to the primary")?;
    let mut lost = 0;
    for (_, key) in &acked {
        let reply = c
            .request(format!("mg {key} v\r\n").as_bytes(), b"\r\n")
            .context("read back")?;
        if reply.starts_with(b"VA ") {
            if !reply.ends_with(b"\r\n") || reply.iter().filter(|&&b| b == b'\n').count() < 2 {
                c.read_reply_until_suffix(b"\r\n", Duration::from_secs(10))
                    .context("the value")?;
            }
        } else {
            lost += 1;
        }
    }
    Ok(Outcome {
        scenario,
        round,
        longest_gap,
        acked: acked.len(),
        refused: seen.refused.load(Ordering::Relaxed) - refused_before,
        lost,
    })
}

fn switchover(args: &FailoverArgs, etcd: &Etcd, to: &str) -> Result<()> {
    let out = std::process::Command::new(&args.common.kura_bin)
        .args(["cluster", "switchover", "--etcd", &etcd.endpoint()])
        .args(["--cluster", CLUSTER, "--shard", SHARD, "--to", to])
        .output()
        .context("run kura cluster switchover")?;
    if !out.status.success() {
        bail!(
            "kura cluster switchover: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn report(args: &FailoverArgs, section: &mut Section, outcomes: &[Outcome]) -> Result<()> {
    let scenarios = ["switchover", "link cut", "SIGKILL"];
    let mut csv = Csv::new(&[
        "scenario",
        "round",
        "longest_gap_ms",
        "acked",
        "refused",
        "lost",
    ]);
    for o in outcomes {
        csv.push(vec![
            o.scenario.to_string(),
            (o.round + 1).to_string(),
            o.longest_gap.as_millis().to_string(),
            o.acked.to_string(),
            o.refused.to_string(),
            o.lost.to_string(),
        ]);
    }
    let mut table = Table::new(&[
        "change",
        "rounds",
        "no write, median ms",
        "no write, worst ms",
        "refused, median",
        "acknowledged",
        "lost",
    ]);
    for scenario in scenarios {
        let of: Vec<&Outcome> = outcomes.iter().filter(|o| o.scenario == scenario).collect();
        if of.is_empty() {
            continue;
        }
        let gaps: Vec<f64> = of
            .iter()
            .map(|o| o.longest_gap.as_secs_f64() * 1e3)
            .collect();
        let refused: Vec<f64> = of.iter().map(|o| o.refused as f64).collect();
        table.push(vec![
            scenario.to_string(),
            of.len().to_string(),
            format!("{:.0}", median(&gaps).unwrap_or(0.0)),
            format!("{:.0}", gaps.iter().copied().fold(0.0, f64::max)),
            format!("{:.0}", median(&refused).unwrap_or(0.0)),
            of.iter().map(|o| o.acked).sum::<usize>().to_string(),
            of.iter().map(|o| o.lost).sum::<usize>().to_string(),
        ]);
    }
    println!("{}", table.render());
    section.tables.push((
        "Each change of primary: the longest time without an acknowledged write, writes refused meanwhile, acknowledged writes lost".into(),
        table,
    ));
    section.summary = format!(
        "A shard of three Kura nodes (cluster mode, --min-sync-replicas 1, --lease-ttl-ms {}) and a private etcd; {} writers through a node that is not the primary; {} rounds of a planned switchover, the primary's link cut, and the primary SIGKILLed",
        args.lease_ttl_ms, args.writers, args.rounds
    );
    section.notes.push(
        "\"No write\" is the longest time between two acknowledged writes across all writers around the change: for a failure, the time without a primary as clients see it (the old primary's lease running out, the election, the new primary's first write); for a switchover, its pause. Lost counts acknowledged writes the primary after the change does not hold; anything but 0 fails the run.".into(),
    );
    let lost: usize = outcomes.iter().map(|o| o.lost).sum();
    if lost > 0 {
        section.failure = Some(format!("{lost} acknowledged writes lost"));
    }
    let path = csv.write(&args.common.out_dir, "failover")?;
    let rounds: Vec<String> = (1..=args.rounds).map(|r| r.to_string()).collect();
    let chart = Chart {
        title: "Longest time without an acknowledged write, by round".to_string(),
        x_label: "round".to_string(),
        y_label: "ms".to_string(),
        kind: Kind::Lines,
        categories: rounds,
        series: scenarios
            .iter()
            .map(|s| {
                let values = (0..args.rounds)
                    .map(|r| {
                        outcomes
                            .iter()
                            .find(|o| o.scenario == *s && o.round == r)
                            .map(|o| o.longest_gap.as_secs_f64() * 1e3)
                    })
                    .collect();
                (s.to_string(), values)
            })
            .collect(),
    };
    let files = chart.write_beside(&path)?;
    println!("wrote {files}");
    section.charts.push(files);
    section.csv = path;
    Ok(())
}
