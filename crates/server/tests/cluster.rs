//! Cluster mode (`--etcd`): three `kura` processes of one shard on real disks and a
//! private etcd (Debian's `etcd-server`). They elect one primary, which the others
//! follow; writes through it with `--min-sync-replicas 1` are acknowledged, then it is
//! SIGKILLed: another node becomes primary on its own, with every acknowledged write,
//! and takes writes; the old primary, restarted, comes back as its replica. A node
//! that is not the primary refuses changes with `SERVER_ERROR`. etcd stopped: the
//! primary stops taking writes within its lease. The primary in a network namespace
//! cut from the others and etcd: it stops, the others elect, and healed it follows
//! the new primary and cuts what it wrote alone.

#![allow(clippy::expect_used)]

mod clusters;
mod replicas;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clusters::*;
use kura_testkit::etcd::Etcd;
use kura_testkit::{KuraServer, NetNamespace};
use replicas::*;

/// `stats cluster` on each node and `kura cluster status` name `nodes[primary]` as
/// the primary, and every node in its role (once the nodes have looked at etcd again).
fn shows_the_shard(etcd: &Etcd, nodes: &[Node], primary: usize) {
    let deadline = Instant::now() + ELECTED_WITHIN;
    loop {
        match shown(etcd, nodes, primary) {
            Ok(()) => return,
            Err(why) if Instant::now() > deadline => panic!("{why}"),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn shown(etcd: &Etcd, nodes: &[Node], primary: usize) -> Result<(), String> {
    let check = |ok: bool, what: &str| if ok { Ok(()) } else { Err(what.to_string()) };
    for (i, node) in nodes.iter().enumerate() {
        let stats = cluster_stats(&node.server);
        let stat = |name: &str| stats.get(name).map(String::as_str);
        let role = if i == primary { "primary" } else { "replica" };
        let term: i64 = stat("term").and_then(|t| t.parse().ok()).unwrap_or(-1);
        check(
            stat("role") == Some(role)
                && stat("primary") == Some(nodes[primary].advertise.as_str())
                && stat("shard") == Some("s0")
                && stat("members") == Some("3")
                && stat("serving_reads") == Some("1")
                && (term > 0) == (i == primary),
            &format!("{stats:?}"),
        )?;
    }
    let out = std::process::Command::new(kura_testkit::kura_bin(env!("CARGO_BIN_EXE_kura")))
        .args([
            "cluster",
            "status",
            "--etcd",
            &etcd.endpoint(),
            "--cluster",
            "test",
        ])
        .output()
        .expect("run kura cluster status");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    check(out.status.success(), &text)?;
    let head = format!("shard s0: primary {} epoch ", nodes[primary].advertise);
    check(text.contains(&head), &text)?;
    for (i, node) in nodes.iter().enumerate() {
        let role = if i == primary { "primary" } else { "replica" };
        let line = format!("  {}  {role}  log_lsn ", node.advertise);
        check(text.contains(&line), &text)?;
    }
    Ok(())
}

/// A node's `GET /metrics` (it was started with `--metrics-port 0`).
fn metrics(server: &KuraServer) -> String {
    use std::io::{Read, Write};
    let log = server.log();
    let addr: std::net::SocketAddr = log
        .lines()
        .find_map(|line| line.strip_prefix("kura metrics listening on "))
        .and_then(|addr| addr.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metrics line in kura's output:\n{log}"));
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to metrics");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read metrics");
    reply
}

/// Rounds of SIGKILL in `a_shard_fails_over_on_its_own_and_loses_no_acknowledged_write`.
const ROUNDS: usize = 10;

#[test]
fn a_shard_fails_over_on_its_own_and_loses_no_acknowledged_write() {
    let etcd = Etcd::start(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let mut nodes = [
        node(&etcd, "kura-cluster-a-"),
        node(&etcd, "kura-cluster-b-"),
        node(&etcd, "kura-cluster-c-"),
    ];
    let first = elected(&nodes.iter().collect::<Vec<_>>());
    shows_the_shard(&etcd, &nodes, first);

    // A replica forwards a change to the primary, which holds it.
    let replica = (first + 1) % 3;
    assert_eq!(
        set(&mut client(&nodes[replica].server), "via-replica", "x"),
        "STORED\r\n"
    );
    assert_eq!(
        request(
            &mut client(&nodes[first].server),
            b"get via-replica\r\n",
            b"END\r\n"
        ),
        "VALUE via-replica 0 1\r\nx\r\nEND\r\n"
    );

    // Rounds of writers through the primary until it is SIGKILLed under them.
    let mut all_acked: BTreeMap<String, String> = BTreeMap::new();
    let mut first = first;
    for round in 0..ROUNDS {
        // Writers through the primary until it is SIGKILLed under them.
        let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
        // Writes sent when the primary died: on its disk, perhaps, and not acknowledged.
        let unacked: Arc<Mutex<Vec<String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let primary_addr = nodes[first].server.addr();
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let (acked, unacked, stop) =
                    (Arc::clone(&acked), Arc::clone(&unacked), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let Ok(mut c) = kura_testkit::Client::connect(primary_addr) else {
                        return;
                    };
                    for i in 0..100_000 {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let key = format!("w{round}-{w}-{i}");
                        let value = format!("v{i}");
                        let sent = c.send(
                            format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
                        );
                        let reply =
                            sent.and_then(|()| c.read_reply_until_suffix(b"\r\n", HUNG_AFTER));
                        match reply {
                            Ok(r) if r.bytes == b"STORED\r\n" => {
                                acked.lock().expect("acked").insert(key, value);
                            }
                            // The primary died: no reply is an acknowledgement.
                            _ => {
                                unacked.lock().expect("unacked").push(key);
                                return;
                            }
                        }
                    }
                })
            })
            .collect();
        until_acked(&acked, 300, "the writers made no progress");
        nodes[first].server.kill().expect("SIGKILL the primary");
        let killed = Instant::now();
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().expect("writer");
        }
        let acked = acked.lock().expect("acked").clone();
        all_acked.extend(acked.clone());

        // The two others elect a new primary between them, with every acknowledged write.
        let survivors: Vec<&Node> = (0..3).filter(|&i| i != first).map(|i| &nodes[i]).collect();
        let deadline = Instant::now() + ELECTED_WITHIN;
        let second = loop {
            if let Some(i) = survivors.iter().position(|n| role(n) == "primary") {
                break i;
            }
            assert!(
                Instant::now() < deadline,
                "no new primary\n{}",
                logs(&survivors)
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        eprintln!(
            "round {}: a new primary {:?} after the SIGKILL; {} writes acknowledged",
            round + 1,
            killed.elapsed(),
            acked.len()
        );
        let new_primary = &survivors[second].server;
        let mut c = client(new_primary);
        for (key, value) in &all_acked {
            let got = request(&mut c, format!("get {key}\r\n").as_bytes(), b"END\r\n");
            assert_eq!(
                got,
                format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len()),
                "acknowledged write {key} on the new primary"
            );
        }
        // It takes writes once the other survivor follows it.
        let deadline = Instant::now() + ELECTED_WITHIN;
        while stat(new_primary, "connected_replicas") < 1 {
            assert!(
                Instant::now() < deadline,
                "the other survivor never followed"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let after = format!("after{round}");
        assert_eq!(set(&mut c, &after, "failover"), "STORED\r\n");
        all_acked.insert(after, "failover".to_string());

        // The old primary, restarted, follows the new one and holds what it holds.
        let second_advertise = survivors[second].advertise.clone();
        let new_primary_addr = new_primary.addr();
        nodes[first]
            .server
            .restart()
            .expect("restart the old primary");
        // From its first moment it serves no write the new primary does not have: a read
        // is refused until it follows from a consistent point.
        let unacked = unacked.lock().expect("unacked").clone();
        let mut old = client(&nodes[first].server);
        let mut new = kura_testkit::Client::connect(new_primary_addr).expect("connect");
        let (mut refused_reads, mut served_reads) = (0, 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && served_reads < 20 {
            for key in unacked.iter().chain(acked.keys().take(1)) {
                let got = request(&mut old, format!("get {key}\r\n").as_bytes(), b"\r\n");
                if got.starts_with("SERVER_ERROR") {
                    refused_reads += 1;
                    continue;
                }
                let got = if got.starts_with("VALUE") && !got.ends_with("END\r\n") {
                    let rest = old
                        .read_reply_until_suffix(b"END\r\n", HUNG_AFTER)
                        .expect("the rest of the value");
                    got + &String::from_utf8_lossy(&rest.bytes)
                } else {
                    got
                };
                served_reads += 1;
                let there = request(&mut new, format!("get {key}\r\n").as_bytes(), b"END\r\n");
                assert_eq!(
                    got, there,
                    "{key} on the restarted old primary and the new one"
                );
            }
        }
        eprintln!(
            "the restarted old primary refused {refused_reads} reads, then served {served_reads}"
        );
        let p = elected(&nodes.iter().collect::<Vec<_>>());
        assert_eq!(nodes[p].advertise, second_advertise, "the primary stays");
        let keys: Vec<String> = all_acked.keys().cloned().collect();
        old_primary_holds_the_same(&nodes[p].server, &nodes[first].server, &keys);
        first = p;
    }
    drop(etcd);
}

/// etcd stopped for 20 s, then started again: the primary stops taking writes once its
/// lease may have ended by its own clock (never a `STORED` it cannot stand behind),
/// keeps its term when etcd comes back (etcd renews the leases it kept), and takes
/// writes again; nothing acknowledged is lost.
#[test]
fn a_primary_without_etcd_stops_taking_writes_and_goes_on_when_it_returns() {
    let mut etcd = Etcd::start(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let with_metrics = |name| {
        let extra = ["--replica-reads", "local", "--metrics-port", "0"];
        node_at(&etcd.endpoint(), name, "127.0.0.1", None, &extra)
    };
    let nodes = [
        with_metrics("kura-cluster-d-"),
        with_metrics("kura-cluster-e-"),
        with_metrics("kura-cluster-f-"),
    ];
    let p = elected(&nodes.iter().collect::<Vec<_>>());
    // The metrics say the same as stats cluster, once the nodes have looked again.
    let deadline = Instant::now() + ELECTED_WITHIN;
    for (i, node) in nodes.iter().enumerate() {
        let want = format!("kura_cluster_primary {}", u8::from(i == p));
        loop {
            let text = metrics(&node.server);
            let term_held = text.lines().any(|l| {
                l.strip_prefix("kura_cluster_term ")
                    .and_then(|t| t.parse::<f64>().ok())
                    .is_some_and(|t| t > 0.0)
            });
            if text.contains(&want)
                && text.contains("kura_cluster_members 3")
                && text.contains("kura_cluster_has_primary 1")
                && term_held == (i == p)
            {
                break;
            }
            assert!(Instant::now() < deadline, "node {i}'s metrics:\n{text}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let mut c = client(&nodes[p].server);
    assert_eq!(set(&mut c, "before", "etcd"), "STORED\r\n");

    etcd.stop();
    let stopped = Instant::now();
    let mut acked = Vec::new();
    let refused = loop {
        let key = format!("k{}", acked.len());
        let reply = set(&mut c, &key, "v");
        if reply != "STORED\r\n" {
            break reply;
        }
        acked.push(key);
        assert!(
            stopped.elapsed() < Duration::from_secs(15),
            "the primary took writes {:?} after losing etcd",
            stopped.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        refused.starts_with("SERVER_ERROR") && refused.contains("lease"),
        "{refused:?}"
    );
    let within = stopped.elapsed();
    // No write is taken while etcd is away.
    while stopped.elapsed() < Duration::from_secs(20) {
        let reply = set(&mut c, "during", "v");
        assert!(reply.starts_with("SERVER_ERROR"), "{reply:?} without etcd");
        std::thread::sleep(Duration::from_millis(200));
    }
    etcd.restart();
    let deadline = Instant::now() + ELECTED_WITHIN;
    let p2 = elected(&nodes.iter().collect::<Vec<_>>());
    assert_eq!(p2, p, "the primary keeps its term");
    while set(&mut c, "after", "etcd") != "STORED\r\n" {
        assert!(
            Instant::now() < deadline,
            "the primary never took writes again"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("writes refused {within:?} after etcd stopped");
    let keys: Vec<String> = ["before".to_string(), "after".to_string()]
        .into_iter()
        .chain(acked)
        .collect();
    for key in &keys {
        let got = request(&mut c, format!("get {key}\r\n").as_bytes(), b"END\r\n");
        assert!(got.starts_with(&format!("VALUE {key} ")), "{key}: {got:?}");
    }
}

/// The primary in a network namespace of its own, the other two nodes and etcd
/// outside it, the link cut under a writer inside: the primary stops taking writes
/// (and answering reads) within its lease, the others elect one of them, which has
/// every acknowledged write; the link back, the old primary follows the new one and
/// cuts the writes it made alone, none of which was acknowledged.
#[test]
fn a_primary_cut_off_stops_and_rejoins_without_what_it_wrote_alone() {
    let ns = NetNamespace::create("clus");
    let etcd = Etcd::start_also_on(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")),
        Some(&ns.outside),
    );
    let url = etcd.endpoint_also().expect("etcd outside the namespace");
    // The node inside starts first, alone: it is the primary.
    let inside = node_at(&url, "kura-cluster-in-", &ns.inside, Some(&ns), LOCAL);
    let deadline = Instant::now() + ELECTED_WITHIN;
    while role(&inside) != "primary" {
        assert!(
            Instant::now() < deadline,
            "no primary\n{}",
            inside.server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let nodes = [
        inside,
        node_at(&url, "kura-cluster-out1-", &ns.outside, None, LOCAL),
        node_at(&url, "kura-cluster-out2-", &ns.outside, None, LOCAL),
    ];
    assert_eq!(elected(&nodes.iter().collect::<Vec<_>>()), 0);
    let mut acked = Vec::new();
    {
        let mut c = client(&nodes[0].server);
        for i in 0..50 {
            let key = format!("a{i}");
            assert_eq!(set(&mut c, &key, "acked"), "STORED\r\n");
            acked.push(key);
        }
    }

    ns.link_up(false);
    let cut = Instant::now();
    // A client inside goes on writing to the old primary: nothing is acknowledged (no
    // replica confirms), and once its lease may have ended it takes nothing at all.
    let addr = nodes[0].server.addr();
    let (alone, lease_ended_after, read) = ns.run_inside(move || {
        let mut c = kura_testkit::Client::connect(addr).expect("connect inside");
        let mut alone = Vec::new();
        let started = Instant::now();
        loop {
            let key = format!("alone{}", alone.len());
            let reply = set(&mut c, &key, "unacknowledged");
            assert_ne!(reply, "STORED\r\n", "{key} acknowledged without a replica");
            if reply.contains("lease") {
                let read = request(&mut c, b"get a0\r\n", b"\r\n");
                return (alone, started.elapsed(), read);
            }
            alone.push(key);
            assert!(started.elapsed() < Duration::from_secs(30), "{reply:?}");
        }
    });
    assert!(
        read.starts_with("SERVER_ERROR"),
        "a read from a primary past its lease: {read:?}"
    );
    eprintln!(
        "cut off: {} writes refused unconfirmed, then the lease error {lease_ended_after:?} after the cut",
        alone.len()
    );
    // Outside, the two others elect one of them, with every acknowledged write.
    let outside: Vec<&Node> = nodes[1..].iter().collect();
    let deadline = Instant::now() + ELECTED_WITHIN;
    let second = loop {
        if let Some(i) = outside.iter().position(|n| role(n) == "primary") {
            break i;
        }
        assert!(Instant::now() < deadline, "no new primary outside");
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("a new primary outside {:?} after the cut", cut.elapsed());
    let new_primary = &outside[second].server;
    let mut c = client(new_primary);
    let deadline = Instant::now() + ELECTED_WITHIN;
    while stat(new_primary, "connected_replicas") < 1 {
        assert!(Instant::now() < deadline, "the other node never followed");
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in 0..20 {
        let key = format!("b{i}");
        assert_eq!(set(&mut c, &key, "after"), "STORED\r\n");
        acked.push(key);
    }

    ns.link_up(true);
    let p = elected(&nodes.iter().collect::<Vec<_>>());
    assert_eq!(p, second + 1, "the new primary stays");
    let keys: Vec<String> = acked.iter().chain(&alone).cloned().collect();
    old_primary_holds_the_same(&nodes[p].server, &nodes[0].server, &keys);
    let mut old = client(&nodes[0].server);
    for key in &alone {
        let got = request(&mut old, format!("get {key}\r\n").as_bytes(), b"END\r\n");
        assert_eq!(got, "END\r\n", "{key}, written alone, is cut");
    }
}

/// A planned switchover (`kura cluster switchover --to`) under writers that follow the
/// primary `stats cluster` names: the target becomes primary, every write
/// acknowledged before, during and after is on it, and the old primary follows it
/// with the same contents.
#[test]
fn a_planned_switchover_under_writers_loses_nothing() {
    let etcd = Etcd::start(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let nodes = [
        node(&etcd, "kura-cluster-g-"),
        node(&etcd, "kura-cluster-h-"),
        node(&etcd, "kura-cluster-i-"),
    ];
    let first = elected(&nodes.iter().collect::<Vec<_>>());
    let target = (first + 1) % 3;
    let addrs: Vec<(String, std::net::SocketAddr)> = nodes
        .iter()
        .map(|n| (n.advertise.clone(), n.server.addr()))
        .collect();
    let primary = Arc::new(Mutex::new(nodes[first].server.addr()));
    let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let longest_gap = Arc::new(Mutex::new(Duration::ZERO));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (primary, acked, gap, stop, addrs) = (
                Arc::clone(&primary),
                Arc::clone(&acked),
                Arc::clone(&longest_gap),
                Arc::clone(&stop),
                addrs.clone(),
            );
            std::thread::spawn(move || {
                let mut last_ack = Instant::now();
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let (key, value) = (format!("s{w}-{i}"), format!("v{i}"));
                    let give_up = Instant::now() + Duration::from_secs(30);
                    loop {
                        let at = *primary.lock().expect("primary");
                        let reply = kura_testkit::Client::connect(at)
                            .map(|mut c| set(&mut c, &key, &value))
                            .unwrap_or_default();
                        if reply == "STORED\r\n" {
                            break;
                        }
                        assert!(Instant::now() < give_up, "{key}: {reply:?}");
                        // Ask a node whom etcd names primary now.
                        std::thread::sleep(Duration::from_millis(5));
                        for (_, addr) in &addrs {
                            let Ok(mut c) = kura_testkit::Client::connect(*addr) else {
                                continue;
                            };
                            let stats = request(&mut c, b"stats cluster\r\n", b"END\r\n");
                            let named = stats
                                .lines()
                                .find_map(|l| l.strip_prefix("STAT primary "))
                                .map(str::to_string);
                            if let Some((_, to)) =
                                addrs.iter().find(|(a, _)| Some(a) == named.as_ref())
                            {
                                *primary.lock().expect("primary") = *to;
                                break;
                            }
                        }
                    }
                    let now = Instant::now();
                    let mut longest = gap.lock().expect("gap");
                    *longest = (*longest).max(now - last_ack);
                    last_ack = now;
                    drop(longest);
                    acked.lock().expect("acked").insert(key, value);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    *longest_gap.lock().expect("gap") = Duration::ZERO;
    let text = switchover(&etcd, &nodes[target].advertise)
        .unwrap_or_else(|e| panic!("{e}\n{}", nodes[first].server.log()));
    assert!(
        text.contains(&format!("primary {} (epoch", nodes[target].advertise)),
        "{text}"
    );
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    let acked = acked.lock().expect("acked").clone();
    eprintln!(
        "{} {} writes acknowledged; the longest wait between two: {:?}",
        text.trim_end(),
        acked.len(),
        *longest_gap.lock().expect("gap")
    );
    let p = elected(&nodes.iter().collect::<Vec<_>>());
    assert_eq!(p, target, "the target is primary");
    holds_every_acked(&nodes[target].server, &acked);
    let keys: Vec<String> = acked.keys().cloned().collect();
    old_primary_holds_the_same(&nodes[target].server, &nodes[first].server, &keys);
}
