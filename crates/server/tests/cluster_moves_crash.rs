//! A ring change survives crashes (issue 42), with a private etcd: shard `a` of a
//! primary and a replica (`--min-sync-replicas 1`), shards `b` and `c` of one node
//! each, 30,000 keys filled on the ring `a,b`, and writers running through the
//! clients users run (`tests/cluster/grow.py load`) while the ring grows to `a,b,c`
//! with each target copying at most 3,000 changes a second (`--move-copy-rate`), so
//! that the crashes land mid-copy:
//!
//! 1. the `kura cluster ring` process is SIGKILLed once its etcd transaction is
//!    made;
//! 2. the target `c` is SIGKILLed while it copies, and started again: it goes on
//!    from its position;
//! 3. shard `a`'s primary, a source, is SIGKILLed while `c` copies from it: its
//!    replica takes over with the same log, `c` goes on from there, and the old
//!    primary comes back as a replica;
//! 4. etcd is stopped and started again;
//! 5. `kura cluster ring` again follows the change to its end.
//!
//! Afterwards every filled key and every acknowledged change is read back through
//! pylibmc's ketama over the new ring with nothing passed on, the primaries hold each
//! key once, and shard `a`'s replica holds what its primary holds.
//!
//! A change abandoned with `--abort` before any move flipped leaves the ring as it
//! was with every key where it was (`an_abandoned_change_leaves_the_ring_and_its_keys`);
//! a hand-off past its pause, or whose source dies, loses nothing; and a flip with
//! etcd away holds, then refuses the held change, losing nothing.

#![allow(clippy::expect_used)]

mod clusters;
mod replicas;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clusters::*;
use kura_testkit::etcd::Etcd;
use kura_testkit::python::run_script;
use replicas::{client, request};

const FILLED: usize = 30_000;
const RATE: &[&str] = &["--replica-reads", "local", "--move-copy-rate", "3000"];

fn grow_py(nodes: &[&Node], args: &[String], prefix: &str) -> String {
    match run_script(
        Path::new("tests/cluster/grow.py"),
        args,
        &[("GROW_PREFIX", prefix)],
    ) {
        Ok(output) => {
            print!("{output}");
            output
        }
        Err(e) => panic!("grow.py {args:?}: {e}\n{}", moves_log(nodes)),
    }
}

/// Waits until `node`'s `stats cluster` satisfies `ready`.
fn until(
    nodes: &[&Node],
    node: &Node,
    what: &str,
    ready: impl Fn(&std::collections::BTreeMap<String, String>) -> bool,
) {
    let deadline = Instant::now() + ELECTED_WITHIN;
    loop {
        if let Ok(stats) = std::panic::catch_unwind(|| stats_of(&node.server, " cluster")) {
            if ready(&stats) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{what}\n{}", moves_log(nodes));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether a node's `stats cluster` shows a move into `to` still copying.
fn copying_into(stats: &std::collections::BTreeMap<String, String>, to: &str) -> bool {
    stats
        .get("ring_moves")
        .is_some_and(|m| m.split(',').any(|m| m.ends_with(&format!(">{to}:copying"))))
}

/// Checks, after a change to `ring`: the filled keys, the writers' log `acks` (if
/// any), and that `primaries` hold the live keys once each and `replica` what
/// `primary_of_replica` holds.
fn settled(
    all: &[&Node],
    ring: &str,
    acks: Option<&Path>,
    primaries: &[&Node],
    (replica, primary_of_replica): (&Node, &Node),
) {
    let forwarded = || -> Vec<u64> {
        all.iter()
            .map(|n| number(&n.server, " cluster", "owner_forwarded"))
            .collect()
    };
    let before = forwarded();
    grow_py(
        all,
        &["filled".into(), addresses(ring), FILLED.to_string()],
        "",
    );
    let mut live = FILLED as u64;
    if let Some(acks) = acks {
        let checked = grow_py(
            all,
            &["check".into(), acks.display().to_string(), addresses(ring)],
            "w/",
        );
        live += checked
            .lines()
            .find_map(|l| l.strip_prefix("live "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .expect("grow.py check says how many keys live");
    }
    assert_eq!(
        forwarded(),
        before,
        "a key read by the ring was not at its owner"
    );
    let items = |n: &Node| number(&n.server, "", "curr_items");
    let each: Vec<u64> = primaries.iter().map(|n| items(n)).collect();
    assert_eq!(
        each.iter().sum::<u64>(),
        live,
        "keys held by the primaries: {each:?}\n{}",
        moves_log(all)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while items(replica) != items(primary_of_replica) {
        assert!(
            Instant::now() < deadline,
            "the replica holds {} keys, its primary {}",
            items(replica),
            items(primary_of_replica)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sets the first ring, `ring`, and fills it.
fn ring_and_fill(etcd: &Etcd, all: &[&Node], ring: &str) {
    let (ok, text) = kura_cluster(etcd, &["ring", "--shards", ring]);
    assert!(ok, "{text}");
    ring_settled(all, 1);
    grow_py(
        all,
        &["fill".into(), addresses(ring), FILLED.to_string()],
        "",
    );
}

/// `grow.py load` for `seconds` over the rings `old` and `new` (keys `w/`), logging
/// to `acks`, on a thread of its own.
fn load(
    acks: &Path,
    seconds: u32,
    old: &str,
    new: &str,
) -> std::thread::JoinHandle<Result<String, String>> {
    let args = vec![
        "load".to_string(),
        acks.display().to_string(),
        seconds.to_string(),
        addresses(old),
        addresses(new),
    ];
    std::thread::spawn(move || {
        run_script(
            Path::new("tests/cluster/grow.py"),
            &args,
            &[("GROW_PREFIX", "w/")],
        )
    })
}

/// `kura cluster ring` to `ring`, running on its own.
fn change_ring(endpoint: &str, ring: &str) -> std::process::Child {
    Command::new(kura_testkit::kura_bin(env!("CARGO_BIN_EXE_kura")))
        .args(["cluster", "ring", "--etcd", endpoint, "--cluster", "test"])
        .args(["--shards", ring])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run kura cluster ring")
}

#[test]
fn a_ring_change_survives_kill_9_of_its_nodes_its_command_and_etcd() {
    let mut etcd = Etcd::start(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let endpoint = etcd.endpoint();
    let shard = |name: &str, shard: &str, sync: u32| {
        node_of_shard(&endpoint, name, shard, sync, "127.0.0.1", None, RATE)
    };
    let mut a = [
        shard("kura-movecrash-a1-", "a", 1),
        shard("kura-movecrash-a2-", "a", 1),
    ];
    let mut c = shard("kura-movecrash-c-", "c", 0);
    let b = shard("kura-movecrash-b-", "b", 0);
    let p = elected(&[&a[0], &a[1]]);
    elected(&[&b]);
    elected(&[&c]);
    let old = format!("a={},b={}", a[p].advertise, b.advertise);
    let new = format!("{old},c={}", c.advertise);
    ring_and_fill(&etcd, &[&a[0], &a[1], &b, &c], &old);
    let out = tempfile::tempdir().expect("tempdir");
    let acks = out.path().join("acks.json");
    let load = load(&acks, 25, &old, &new);

    // 1. The command, killed once its transaction is made.
    let mut command = change_ring(&endpoint, &new);
    {
        let all = [&a[0], &a[1], &b, &c];
        until(&all, &c, "the change never began", |s| {
            s.contains_key("ring_next_version")
        });
    }
    command.kill().expect("SIGKILL kura cluster ring");
    let _ = command.wait();

    // 2. The target, killed mid-copy and started again.
    {
        let all = [&a[0], &a[1], &b, &c];
        until(&all, &c, "c never copied", |s| {
            copying_into(s, "c") && s.get("move_copied").is_some_and(|n| n != "0")
        });
    }
    c.server.kill().expect("SIGKILL c");
    c.server.restart().expect("restart c");
    elected(&[&c]);

    // 3. The source a's primary, killed while c copies from it; its replica takes
    // over and the old primary comes back as a replica.
    {
        let all = [&a[0], &a[1], &b, &c];
        until(&all, &c, "c never copied again", |s| {
            copying_into(s, "c") && s.get("move_copied").is_some_and(|n| n != "0")
        });
    }
    a[p].server.kill().expect("SIGKILL a's primary");
    let q = 1 - p;
    {
        let deadline = Instant::now() + ELECTED_WITHIN;
        while role(&a[q]) != "primary" {
            assert!(Instant::now() < deadline, "a's replica never took over");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    a[p].server.restart().expect("restart a's old primary");

    // 4. etcd, stopped and started again.
    etcd.stop();
    std::thread::sleep(Duration::from_secs(1));
    etcd.restart();

    // 5. The command again: it follows the change to its end.
    let all = [&a[0], &a[1], &b, &c];
    let (ok, text) = kura_cluster(&etcd, &["ring", "--shards", &new]);
    print!("{text}");
    assert!(
        ok && text.contains("set ring v2"),
        "{text}\n{}",
        moves_log(&all)
    );
    match load.join().expect("the load's thread") {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("grow.py load: {e}\n{}", moves_log(&all)),
    }
    ring_settled(&all, 2);
    let p = elected(&[&a[0], &a[1]]);
    settled(
        &all,
        &new,
        Some(&acks),
        &[&a[p], &b, &c],
        (&a[1 - p], &a[p]),
    );
}

#[test]
fn an_abandoned_change_leaves_the_ring_and_its_keys() {
    let etcd = Etcd::start(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let endpoint = etcd.endpoint();
    // A target that copies slowly, so the change is abandoned before it flips.
    let slow = &["--replica-reads", "local", "--move-copy-rate", "500"];
    let shard = |name: &str, shard: &str, sync: u32, extra: &[&str]| {
        node_of_shard(&endpoint, name, shard, sync, "127.0.0.1", None, extra)
    };
    let a = [
        shard("kura-moveabort-a1-", "a", 1, LOCAL),
        shard("kura-moveabort-a2-", "a", 1, LOCAL),
    ];
    let c = shard("kura-moveabort-c-", "c", 0, slow);
    let p = elected(&[&a[0], &a[1]]);
    elected(&[&c]);
    let all = [&a[0], &a[1], &c];
    let old = format!("a={}", a[p].advertise);
    let new = format!("{old},c={}", c.advertise);
    ring_and_fill(&etcd, &all, &old);

    let mut command = change_ring(&endpoint, &new);
    until(&all, &c, "c never copied", |s| {
        copying_into(s, "c") && s.get("move_copied").is_some_and(|n| n != "0")
    });
    let (ok, text) = kura_cluster(&etcd, &["ring", "--abort"]);
    assert!(
        ok && text.contains("abandoned"),
        "{text}\n{}",
        moves_log(&all)
    );
    // The command that began it says the change was abandoned.
    let status = command.wait().expect("kura cluster ring");
    assert!(!status.success());
    ring_settled(&all, 1);
    // Every key where it was: on a, nothing passed on; a's replica holds as much.
    let forwarded = number(&a[p].server, " cluster", "owner_forwarded");
    grow_py(
        &all,
        &["filled".into(), addresses(&old), FILLED.to_string()],
        "",
    );
    assert_eq!(
        number(&a[p].server, " cluster", "owner_forwarded"),
        forwarded
    );
    assert_eq!(number(&a[p].server, "", "curr_items"), FILLED as u64);
    // c's copies stay behind, unreachable: the next change to c deletes them
    // before it copies.
    let (ok, text) = kura_cluster(&etcd, &["ring", "--shards", &new]);
    assert!(
        ok && text.contains("set ring v2"),
        "{text}\n{}",
        moves_log(&all)
    );
    ring_settled(&all, 2);
    settled(&all, &new, None, &[&a[p], &c], (&a[1 - p], &a[p]));
}

/// A hand-off its target does not acknowledge within the source's pause is given up:
/// the held changes are made on the source and the target asks again. A source
/// primary SIGKILLed while it holds changes for a hand-off ends the hold with it (the
/// held requests fail), its replica takes over with the same log, and the move goes
/// on to its end. The target (`KURA_TEST_HAND_OFF_DELAY`) acknowledges its first two
/// hand-offs 3 s late, past the source's 2 s pause.
#[test]
fn a_hand_off_past_its_pause_gives_up_and_one_whose_source_dies_loses_nothing() {
    let etcd = Etcd::start(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let endpoint = etcd.endpoint();
    let source = ["--replica-reads", "local", "--move-pause-ms", "2000"];
    let a_node = |name: &str| node_of_shard(&endpoint, name, "a", 1, "127.0.0.1", None, &source);
    let mut a = [a_node("kura-handoff-a1-"), a_node("kura-handoff-a2-")];
    let b = node_of_shard_env(
        &endpoint,
        "kura-handoff-b-",
        "b",
        0,
        "127.0.0.1",
        None,
        LOCAL,
        &[("KURA_TEST_HAND_OFF_DELAY", "3000x2")],
    );
    let p = elected(&[&a[0], &a[1]]);
    elected(&[&b]);
    let old = format!("a={}", a[p].advertise);
    let new = format!("{old},b={}", b.advertise);
    ring_and_fill(&etcd, &[&a[0], &a[1], &b], &old);
    let out = tempfile::tempdir().expect("tempdir");
    let acks = out.path().join("acks.json");
    let load = load(&acks, 20, &old, &new);
    let mut command = change_ring(&endpoint, &new);

    // 1. The first hand-off runs past the pause: given up, nothing flipped.
    {
        let all = [&a[0], &a[1], &b];
        until(&all, &a[p], "no hand-off was given up", |s| {
            s.get("move_releases").is_some_and(|n| n != "0")
        });
        assert_eq!(number(&a[p].server, " cluster", "move_flips"), 0);
    }

    // 2. The second: a's primary SIGKILLed while it holds changes for it.
    let deadline = Instant::now() + ELECTED_WITHIN;
    while a[p].server.log().matches("holding changes").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "no second hand-off\n{}",
            moves_log(&[&a[0], &a[1], &b])
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    a[p].server.kill().expect("SIGKILL a's primary");
    let q = 1 - p;
    let deadline = Instant::now() + ELECTED_WITHIN;
    while role(&a[q]) != "primary" {
        assert!(Instant::now() < deadline, "a's replica never took over");
        std::thread::sleep(Duration::from_millis(100));
    }
    a[p].server.restart().expect("restart a's old primary");

    // The move goes on from a's new primary to its end.
    let all = [&a[0], &a[1], &b];
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = command.try_wait().expect("kura cluster ring") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the change never ended\n{}",
            moves_log(&all)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{}", moves_log(&all));
    match load.join().expect("the load's thread") {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("grow.py load: {e}\n{}", moves_log(&all)),
    }
    ring_settled(&all, 2);
    let p = elected(&[&a[0], &a[1]]);
    settled(&all, &new, Some(&acks), &[&a[p], &b], (&a[1 - p], &a[p]));
}

/// etcd away while a source flips a move: it cannot know whether the flip was made,
/// so it holds on and asks again, and a change held meanwhile gets `SERVER_ERROR ...
/// etcd has not said whether it was` after the pause and half a second, not made.
/// Once etcd is back (and `kura cluster ring`, which lost it too, is run again) the
/// move ends, the refused change nowhere and nothing lost. The source
/// (`KURA_TEST_FLIP_DELAY=1500x1`) waits 1.5 s before its first flip, inside its 3 s
/// pause, so that etcd can be stopped meanwhile.
#[test]
fn a_flip_with_etcd_away_holds_and_refuses_a_held_change_losing_nothing() {
    let mut etcd = Etcd::start(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let endpoint = etcd.endpoint();
    let source = ["--replica-reads", "local", "--move-pause-ms", "3000"];
    let a = node_of_shard_env(
        &endpoint,
        "kura-etcdflip-a-",
        "a",
        0,
        "127.0.0.1",
        None,
        &source,
        &[("KURA_TEST_FLIP_DELAY", "1500x1")],
    );
    let b = node_of_shard(
        &endpoint,
        "kura-etcdflip-b-",
        "b",
        0,
        "127.0.0.1",
        None,
        LOCAL,
    );
    elected(&[&a]);
    elected(&[&b]);
    let all = [&a, &b];
    let old = format!("a={}", a.advertise);
    let new = format!("{old},b={}", b.advertise);
    ring_and_fill(&etcd, &all, &old);
    // A key the new ring gives b, acknowledged before the change.
    let member = |node: &Node| {
        let (host, port) = node.advertise.rsplit_once(':').expect("HOST:PORT");
        kura_ring::Member::new(host, port.parse().expect("a port"))
    };
    let ring = kura_ring::Ring::ketama_weighted(vec![member(&a), member(&b)]).expect("ring");
    let key = (0..)
        .map(|i| format!("held/{i}"))
        .find(|k| ring.owner(k.as_bytes()) == 1)
        .expect("a key of b's");
    let mut c = client(&a.server);
    assert_eq!(set(&mut c, &key, "before"), "STORED\r\n");
    let mut command = change_ring(&endpoint, &new);
    let deadline = Instant::now() + ELECTED_WITHIN;
    while !a.server.log().contains("KURA_TEST_FLIP_DELAY: waiting") {
        assert!(
            Instant::now() < deadline,
            "no hand-off\n{}\n{:?}",
            moves_log(&all),
            kura_cluster(&etcd, &["status"]),
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    etcd.stop();
    let asked = Instant::now();
    let reply = set(&mut c, &key, "during");
    assert!(
        reply.starts_with("SERVER_ERROR") && reply.contains("etcd has not said"),
        "{reply}\n{}",
        moves_log(&all)
    );
    assert!(
        asked.elapsed() >= Duration::from_millis(2500),
        "refused after {:?}, before the pause ran out",
        asked.elapsed()
    );
    etcd.restart();
    // `kura cluster ring` lost etcd too: run again, it follows the change to its end.
    let _ = command.kill();
    let _ = command.wait();
    let (ok, text) = kura_cluster(&etcd, &["ring", "--shards", &new]);
    assert!(ok, "{text}\n{}", moves_log(&all));
    ring_settled(&all, 2);
    for node in all {
        let got = request(
            &mut client(&node.server),
            format!("get {key}\r\n").as_bytes(),
            b"END\r\n",
        );
        assert_eq!(
            got,
            format!("VALUE {key} 0 6\r\nbefore\r\nEND\r\n"),
            "the refused change is nowhere"
        );
    }
    grow_py(
        &all,
        &["filled".into(), addresses(&new), FILLED.to_string()],
        "",
    );
    let items = |n: &Node| number(&n.server, "", "curr_items");
    assert_eq!(
        items(&a) + items(&b),
        FILLED as u64 + 1,
        "each key held once\n{}",
        moves_log(&all)
    );
}
