//! Changes acknowledged only once replicas hold them (`--min-sync-replicas`, the meta
//! flag `Y<n>`), between real `kura` processes on a real disk.
//!
//! What is shown: a change is refused, and nothing changes, while fewer replicas are
//! connected than it needs; a `STORED` means the replica already holds the change;
//! a replica that stops answering turns replies into `SERVER_ERROR`, never a false
//! success, and the change arrives once it is back; a replica cut off gets the same;
//! `Y` syncs this node's disk in a mode that would sync later. Then failover: with
//! `--min-sync-replicas 1` and two replicas, the primary is SIGKILLed at random moments
//! under many writers and the most advanced replica promoted, round after round; every
//! acknowledged write is on the new primary, the other replica follows it partially,
//! and the old primary rejoins as a replica.

#![allow(clippy::expect_used)]

mod replicas;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kura_testkit::{crash_seed, Client, KuraServer, ReplyEnd};
use rand::{Rng, SeedableRng};
use replicas::*;

const REFUSED: &str = "SERVER_ERROR not enough replicas";
const TIMED_OUT: &str = "SERVER_ERROR replicas did not confirm in time; the change is made here and may be lost if this server fails\r\n";

fn sync_options(replicas: u8, timeout_ms: u64) -> kura_testkit::KuraOptions {
    options()
        .arg("--min-sync-replicas")
        .arg(replicas.to_string())
        .arg("--sync-timeout-ms")
        .arg(timeout_ms.to_string())
}

/// Waits until `primary` counts `n` connected replicas.
fn connected(primary: &KuraServer, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while stat(primary, "connected_replicas") != n {
        assert!(
            Instant::now() < deadline,
            "{n} replicas never connected: {:?}",
            replication_stats(primary)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `replica` has lost its primary (and so applies nothing more).
fn link_down(replica: &KuraServer) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while replication_stats(replica)["primary_link"] != "down" {
        assert!(
            Instant::now() < deadline,
            "the replica still hears from its dead primary: {:?}",
            replication_stats(replica)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn set(c: &mut Client, key: &str, value: &str) -> String {
    request(
        c,
        format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
        b"\r\n",
    )
}

fn get(server: &KuraServer, key: &str) -> String {
    request(
        &mut client(server),
        format!("get {key}\r\n").as_bytes(),
        b"END\r\n",
    )
}

fn general_stat(c: &mut Client, name: &str) -> u64 {
    let stats = request(c, b"stats\r\n", b"END\r\n");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
}

#[test]
fn a_change_waits_for_its_replica_and_is_refused_or_fails_without_it() {
    let (pdir, rdir) = (data_dir("sync-primary-"), data_dir("sync-replica-"));
    let primary = sync_options(1, 300)
        .start_on(pdir.path())
        .expect("start the primary");
    let mut c = client(&primary);
    // No replica: refused before anything happens; reads are served.
    let refused = set(&mut c, "a", "1");
    assert_eq!(
        refused,
        "SERVER_ERROR not enough replicas: 0 connected, 1 needed; nothing changed\r\n"
    );
    assert_eq!(request(&mut c, b"mg a v\r\n", b"\r\n"), "EN\r\n");
    // noreply: nothing is sent (the client would take it for its next command's
    // reply, as memcached sends nothing for a failed noreply command); it is counted.
    assert_eq!(
        request(&mut c, b"set b 0 0 1 noreply\r\nx\r\nmn\r\n", b"MN\r\n"),
        "MN\r\n",
        "a refusal under noreply must not be sent"
    );
    assert_eq!(request(&mut c, b"mg b v\r\n", b"\r\n"), "EN\r\n");
    assert_eq!(general_stat(&mut c, "noreply_errors_dropped"), 1);

    let proxy = Proxy::start(primary.addr());
    let replica = replica_of(&proxy, rdir.path());
    connected(&primary, 1);
    // Acknowledged means the replica holds it: a read there finds it at once.
    assert_eq!(set(&mut c, "a", "1"), "STORED\r\n");
    assert_eq!(get(&replica, "a"), "VALUE a 0 1\r\n1\r\nEND\r\n");
    assert_eq!(
        request(&mut c, b"ms q 1 q\r\nz\r\nmn\r\n", b"MN\r\n"),
        "MN\r\n"
    );
    assert_eq!(get(&replica, "q"), "VALUE q 0 1\r\nz\r\nEND\r\n");
    // A request may ask for more than the server's default, never less.
    assert_eq!(
        request(&mut c, b"ms b 1 Y2\r\nx\r\n", b"\r\n"),
        "SERVER_ERROR not enough replicas: 1 connected, 2 needed; nothing changed\r\n"
    );
    assert_eq!(request(&mut c, b"ms b 1 Y0\r\nx\r\n", b"\r\n"), "HD\r\n");
    assert_eq!(get(&replica, "b"), "VALUE b 0 1\r\nx\r\nEND\r\n");

    // A replica that stops answering: the change is made here, the client is told it
    // is unconfirmed (a quiet one too), and it reaches the replica once it is back.
    replica.pause().expect("SIGSTOP the replica");
    assert_eq!(set(&mut c, "c", "2"), TIMED_OUT);
    assert_eq!(
        request(&mut c, b"ms d 1 q\r\ny\r\nmn\r\n", b"MN\r\n"),
        format!("{TIMED_OUT}MN\r\n")
    );
    assert_eq!(
        request(&mut c, b"set dn 0 0 1 noreply\r\nz\r\nmn\r\n", b"MN\r\n"),
        "MN\r\n",
        "a timeout under noreply must not be sent"
    );
    assert_eq!(general_stat(&mut c, "noreply_errors_dropped"), 2);
    assert_eq!(get(&primary, "dn"), "VALUE dn 0 1\r\nz\r\nEND\r\n");
    assert_eq!(get(&primary, "c"), "VALUE c 0 1\r\n2\r\nEND\r\n");
    // The three changes are the replica's lag, counted from the log.
    let link = &replication_stats(&primary)["replica0"];
    assert!(link.ends_with(",lag_records=3"), "{link}");
    replica.resume().expect("SIGCONT the replica");
    caught_up(&primary, &replica);
    assert_eq!(get(&replica, "c"), "VALUE c 0 1\r\n2\r\nEND\r\n");
    assert_eq!(get(&replica, "d"), "VALUE d 0 1\r\ny\r\nEND\r\n");

    // Cut off: every change fails; refused ones change nothing, timed-out ones are
    // made here.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_addr = dead.local_addr().expect("addr");
    drop(dead);
    proxy.point_at(dead_addr);
    proxy.cut();
    let mut outcomes = BTreeMap::new();
    for i in 0..20 {
        let key = format!("cut{i}");
        let reply = set(&mut c, &key, "v");
        assert!(
            reply == TIMED_OUT || reply.starts_with(REFUSED),
            "{key} while cut off: {reply:?}"
        );
        outcomes.insert(key, reply);
    }
    assert!(
        outcomes.values().any(|r| r.starts_with(REFUSED)),
        "the primary never noticed the replica was gone: {outcomes:?}"
    );
    for (key, reply) in &outcomes {
        let found = get(&primary, key) != "END\r\n";
        assert_eq!(found, reply == TIMED_OUT, "{key} after {reply:?}");
    }
    proxy.point_at(primary.addr());
    connected(&primary, 1);
    assert_eq!(set(&mut c, "e", "3"), "STORED\r\n");
    assert_eq!(get(&replica, "e"), "VALUE e 0 1\r\n3\r\nEND\r\n");
    let stats = replication_stats(&primary);
    assert!(stats["sync_refusals"] != "0" && stats["sync_timeouts"] != "0");
}

/// A stream to an asynchronous replica lingers after each send (`--replica-linger-ms`),
/// but not while a request waits for replicas: a `Y1` change right after a plain one,
/// whose send began a linger three times the sync timeout, is confirmed in time.
#[test]
fn a_change_that_waits_for_a_replica_is_not_held_by_the_streams_linger() {
    let (pdir, rdir) = (data_dir("linger-primary-"), data_dir("linger-replica-"));
    let primary = sync_options(0, 300)
        .arg("--replica-linger-ms")
        .arg("1000")
        .start_on(pdir.path())
        .expect("start the primary");
    let proxy = Proxy::start(primary.addr());
    let replica = replica_of(&proxy, rdir.path());
    connected(&primary, 1);
    let mut c = client(&primary);
    let settings = request(&mut c, b"stats settings\r\n", b"END\r\n");
    assert!(
        settings.contains("STAT replica_linger_ms 1000\r\n"),
        "{settings}"
    );
    for round in 0..5 {
        assert_eq!(set(&mut c, &format!("plain{round}"), "p"), "STORED\r\n");
        assert_eq!(
            request(
                &mut c,
                format!("ms waited{round} 1 Y1\r\nw\r\n").as_bytes(),
                b"\r\n"
            ),
            "HD\r\n",
            "round {round}"
        );
        // Confirmed means the replica holds it, and the plain change before it.
        assert_eq!(
            get(&replica, &format!("waited{round}")),
            format!("VALUE waited{round} 0 1\r\nw\r\nEND\r\n")
        );
        assert_eq!(
            get(&replica, &format!("plain{round}")),
            format!("VALUE plain{round} 0 1\r\np\r\nEND\r\n")
        );
    }
}

#[test]
fn the_durability_flag_syncs_a_change_the_mode_would_sync_later() {
    let server = kura_testkit::KuraOptions::new(
        kura_testkit::kura_bin(env!("CARGO_BIN_EXE_kura")),
        kura_testkit::Durability::Interval,
    )
    .arg("--fsync-interval-ms")
    .arg("3600000")
    .start()
    .expect("start");
    let mut c = client(&server);
    assert_eq!(request(&mut c, b"ms a 1\r\nx\r\n", b"\r\n"), "HD\r\n");
    let synced = general_stat(&mut c, "log_synced_lsn");
    assert!(
        synced < general_stat(&mut c, "log_appended_lsn"),
        "interval mode synced a plain change at once"
    );
    assert_eq!(request(&mut c, b"ms b 1 Y\r\ny\r\n", b"\r\n"), "HD\r\n");
    assert_eq!(
        general_stat(&mut c, "log_synced_lsn"),
        general_stat(&mut c, "log_appended_lsn")
    );
    // A read may ask too: the version it shows is synced before the reply.
    assert_eq!(request(&mut c, b"ms a 1\r\nz\r\n", b"\r\n"), "HD\r\n");
    assert_eq!(request(&mut c, b"mg a v Y\r\n", b"z\r\n"), "VA 1\r\nz\r\n");
    assert_eq!(
        general_stat(&mut c, "log_synced_lsn"),
        general_stat(&mut c, "log_appended_lsn")
    );
}

/// Writes unique keys on its own connection until the connection dies or `until`;
/// returns the writes the server acknowledged.
fn writer(addr: std::net::SocketAddr, name: String, until: Instant) -> Vec<(String, String)> {
    let mut acked = Vec::new();
    let Ok(mut c) = Client::connect(addr) else {
        return acked;
    };
    for n in 0.. {
        if Instant::now() >= until {
            break;
        }
        let key = format!("{name}-{n}");
        let value = format!("{n}-{}", "v".repeat(n % 97));
        let sent = c.send(format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes());
        if sent.is_err() {
            break;
        }
        match c.read_reply_until_suffix(b"\r\n", HUNG_AFTER) {
            Ok(reply) if reply.end == ReplyEnd::Suffix => {
                let text = String::from_utf8_lossy(&reply.bytes).into_owned();
                if text == "STORED\r\n" {
                    acked.push((key, value));
                } else {
                    assert!(text.starts_with("SERVER_ERROR "), "{key}: {text:?}");
                }
            }
            Ok(reply) => {
                assert_ne!(reply.end, ReplyEnd::Timeout, "{key}: the primary hung");
                break;
            }
            Err(_) => break,
        }
    }
    acked
}

/// Every write in `acked` is on `server`, with its value.
fn holds_all(server: &KuraServer, acked: &[(String, String)]) {
    let mut c = client(server);
    for chunk in acked.chunks(100) {
        let keys: Vec<&str> = chunk.iter().map(|(k, _)| k.as_str()).collect();
        let reply = request(
            &mut c,
            format!("get {}\r\n", keys.join(" ")).as_bytes(),
            b"END\r\n",
        );
        for (key, value) in chunk {
            let want = format!("VALUE {key} 0 {}\r\n{value}\r\n", value.len());
            assert!(
                reply.contains(&want),
                "an acknowledged write is missing after failover: {key}"
            );
        }
    }
}

#[test]
fn every_acknowledged_write_survives_killing_the_primary_and_promoting_a_replica() {
    let seed = crash_seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dirs = [
        data_dir("failover-a-"),
        data_dir("failover-b-"),
        data_dir("failover-c-"),
    ];
    let mut primary = sync_options(1, 2000)
        .start_on(dirs[0].path())
        .expect("start the primary");
    // Each node follows through a link of its own that lags 20 ms, so a write the
    // primary acknowledged without waiting would still be on its way when it dies.
    let links: Vec<Proxy> = (0..dirs.len())
        .map(|_| Proxy::start_with_delay(primary.addr(), Duration::from_millis(20)))
        .collect();
    let follower = |n: usize| {
        sync_options(1, 2000)
            .arg("--replica-of")
            .arg(links[n].addr.to_string())
            .start_on(dirs[n].path())
            .expect("start a replica")
    };
    let mut replicas = vec![(follower(1), 1), (follower(2), 2)];
    let mut primary_dir = 0;
    let mut acked: Vec<(String, String)> = Vec::new();
    for round in 0..3 {
        connected(&primary, 2);
        let until = Instant::now() + Duration::from_secs(20);
        let results = Arc::new(Mutex::new(Vec::new()));
        let writers = (0..6)
            .map(|w| {
                let (addr, results) = (primary.addr(), Arc::clone(&results));
                std::thread::spawn(move || {
                    let mine = writer(addr, format!("r{round}w{w}"), until);
                    results
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(mine);
                })
            })
            .collect();
        let load = Duration::from_millis(rng.gen_range(300..1500));
        kura_testkit::kill_under_load(&mut primary, load, writers);
        let written = std::mem::take(&mut *results.lock().unwrap_or_else(|e| e.into_inner()));
        assert!(
            !written.is_empty(),
            "round {round}: nothing was acknowledged"
        );
        println!(
            "round {round}: killed after {load:?}, {} writes acknowledged",
            written.len()
        );
        acked.extend(written);
        // Once neither replica receives more, both logs are prefixes of the dead
        // primary's: the longer holds the other.
        for (replica, _) in &replicas {
            link_down(replica);
        }
        replicas.sort_by_key(|(r, _)| std::cmp::Reverse(stat(r, "log_lsn")));
        let (promoted, promoted_dir) = replicas.remove(0);
        assert_eq!(
            request(&mut client(&promoted), b"replicaof no one\r\n", b"\r\n"),
            "OK\r\n"
        );
        holds_all(&promoted, &acked);
        for link in &links {
            link.point_at(promoted.addr());
            link.cut();
        }
        // The other replica goes on from its position; the old primary comes back as
        // a replica of the new one.
        let (other, other_dir) = replicas.remove(0);
        let syncs = (stat(&other, "full_syncs"), stat(&other, "partial_syncs"));
        drop(primary);
        let rejoined = follower(primary_dir);
        connected(&promoted, 2);
        caught_up(&promoted, &other);
        caught_up(&promoted, &rejoined);
        let deadline = Instant::now() + Duration::from_secs(60);
        while stat(&other, "partial_syncs") == syncs.1 {
            assert!(
                Instant::now() < deadline,
                "the other replica never resumed: {:?}",
                replication_stats(&other)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            stat(&other, "full_syncs"),
            syncs.0,
            "{:?}",
            replication_stats(&other)
        );
        holds_all(&other, &acked);
        holds_all(&rejoined, &acked);
        replicas = vec![(other, other_dir), (rejoined, primary_dir)];
        primary = promoted;
        primary_dir = promoted_dir;
    }
    // Both replicas silent: nothing is acknowledged.
    for (replica, _) in &replicas {
        replica.pause().expect("SIGSTOP a replica");
    }
    let mut c = client(&primary);
    for i in 0..3 {
        let reply = set(&mut c, &format!("silent{i}"), "x");
        assert!(reply.starts_with("SERVER_ERROR "), "{reply:?}");
    }
    for (replica, _) in &replicas {
        replica.resume().expect("SIGCONT a replica");
    }
}

/// A quiet change (`ms … q Y1`) whose replica does not confirm: its error goes out
/// when the wait ends, as memcached sends a quiet request's error when it happens,
/// not when the client sends its next request (which a client may never do).
#[test]
fn a_quiet_changes_error_goes_out_without_a_next_request() {
    let (pdir, rdir) = (data_dir("quiet-primary-"), data_dir("quiet-replica-"));
    let primary = sync_options(0, 300)
        .start_on(pdir.path())
        .expect("start the primary");
    let proxy = Proxy::start(primary.addr());
    let replica = replica_of(&proxy, rdir.path());
    connected(&primary, 1);
    let mut c = client(&primary);
    assert_eq!(
        request(&mut c, b"ms k 1 q Y1\r\nx\r\nmn\r\n", b"MN\r\n"),
        "MN\r\n"
    );
    replica.pause().expect("SIGSTOP the replica");
    for quiet in ["ms k 1 q Y1\r\ny\r\n", "md k q Y1\r\n"] {
        c.send(quiet.as_bytes()).expect("send");
        let reply = c
            .read_reply_until_suffix(b"\r\n", HUNG_AFTER)
            .expect("read");
        assert_eq!(
            String::from_utf8_lossy(&reply.bytes),
            TIMED_OUT,
            "{quiet:?}: the error came only with a later request, or never"
        );
        // Said once: the next request gets its own reply alone.
        assert_eq!(request(&mut c, b"mn\r\n", b"MN\r\n"), "MN\r\n");
    }
    replica.resume().expect("SIGCONT the replica");
}
