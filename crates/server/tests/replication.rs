//! Replication between real `kura` processes: a replica follows its primary through a
//! proxy the test controls (so it can cut the link, and point it at a primary that
//! restarted on another port), and the replica's contents are compared with the
//! primary's: every key's value, flags, CAS and expiry.
//!
//! What is shown: a replica converges under a steady writer while its link is cut
//! every two seconds, with partial synchronisations only; a replica stopped while the
//! primary writes and compacts past its position gets one full synchronisation, and
//! deleted keys stay gone; a replica SIGKILLed mid-stream applies nothing twice
//! (appends); a primary SIGKILLed and restarted is followed on from where the replica
//! was; a replica refuses changes, naming its primary, and serves reads.

use std::collections::BTreeMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kura_testkit::{
    assert_not_tmpfs, kura_bin, Client, Durability, KuraOptions, KuraServer, ReplyEnd,
};

/// A TCP proxy to whatever address `target` holds; `cut` closes every connection.
struct Proxy {
    addr: SocketAddr,
    target: Arc<Mutex<SocketAddr>>,
    live: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("addr: {e}"));
        let target = Arc::new(Mutex::new(target));
        let live = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, l, s) = (Arc::clone(&target), Arc::clone(&live), Arc::clone(&stop));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = client else { continue };
                let to = *t.lock().unwrap_or_else(|e| e.into_inner());
                let Ok(server) = TcpStream::connect(to) else {
                    continue;
                };
                for (mut from, mut into) in [
                    (client.try_clone(), server.try_clone()),
                    (server.try_clone(), client.try_clone()),
                ]
                .into_iter()
                .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut into);
                        let _ = into.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                }
                let mut live = l.lock().unwrap_or_else(|e| e.into_inner());
                live.push(client);
                live.push(server);
            }
        });
        Proxy {
            addr,
            target,
            live,
            stop,
        }
    }

    fn point_at(&self, target: SocketAddr) {
        *self.target.lock().unwrap_or_else(|e| e.into_inner()) = target;
    }

    fn cut(&self) {
        for stream in self
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.cut();
        let _ = TcpStream::connect(self.addr);
    }
}

fn options() -> KuraOptions {
    KuraOptions::new(kura_bin(env!("CARGO_BIN_EXE_kura")), Durability::Fsync)
        .arg("--segment-size-mib")
        .arg("1")
}

/// A fresh data directory under Cargo's target directory (a real disk).
fn data_dir(name: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("temp dir: {e}"));
    assert_not_tmpfs(dir.path());
    dir
}

fn replica_of(proxy: &Proxy, dir: &std::path::Path) -> KuraServer {
    options()
        .arg("--replica-of")
        .arg(proxy.addr.to_string())
        .start_on(dir)
        .unwrap_or_else(|e| panic!("start the replica: {e}"))
}

fn client(server: &KuraServer) -> Client {
    Client::connect(server.addr()).unwrap_or_else(|e| panic!("connect: {e}"))
}

/// How long a reply may take before the test calls the server hung. Generous: the
/// tests run beside each other, every change waits for an fsync, and the suite's other
/// work shares the disk; a hang, not a slow disk, is what this catches.
const HUNG_AFTER: Duration = Duration::from_secs(60);

fn request(c: &mut Client, bytes: &[u8], suffix: &[u8]) -> String {
    let shown = || String::from_utf8_lossy(&bytes[..bytes.len().min(64)]).into_owned();
    c.send(bytes)
        .unwrap_or_else(|e| panic!("{:?}: {e}", shown()));
    let reply = c
        .read_reply_until_suffix(suffix, HUNG_AFTER)
        .unwrap_or_else(|e| panic!("{:?}: {e}", shown()));
    assert_eq!(
        reply.end,
        ReplyEnd::Suffix,
        "{:?}: got {:?}",
        shown(),
        String::from_utf8_lossy(&reply.bytes)
    );
    String::from_utf8_lossy(&reply.bytes).into_owned()
}

/// `stats replication` as a map.
fn replication_stats(server: &KuraServer) -> BTreeMap<String, String> {
    let reply = request(&mut client(server), b"stats replication\r\n", b"END\r\n");
    reply
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn stat(server: &KuraServer, name: &str) -> u64 {
    replication_stats(server)
        .get(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in stats replication"))
}

/// Every key's value, flags, CAS and remaining time to live (`mg … v f c t`), with
/// the time to live rounded to ten seconds (the two reads are not at one instant).
fn digest(server: &KuraServer, keys: &[String]) -> BTreeMap<String, String> {
    let mut c = client(server);
    let mut all = BTreeMap::new();
    for key in keys {
        let mut reply = request(&mut c, format!("mg {key} v f c t\r\n").as_bytes(), b"\r\n");
        if reply.starts_with("VA ") && reply.matches("\r\n").count() < 2 {
            let value = c
                .read_reply_until_suffix(b"\r\n", HUNG_AFTER)
                .unwrap_or_else(|e| panic!("value: {e}"));
            assert_eq!(value.end, ReplyEnd::Suffix, "the value of {key}");
            reply.push_str(&String::from_utf8_lossy(&value.bytes));
        }
        let reply = if let Some((header, value)) = reply.split_once("\r\n") {
            let ttl = header
                .split_whitespace()
                .find_map(|f| f.strip_prefix('t'))
                .and_then(|t| t.parse::<i64>().ok())
                .map_or(-1, |t| if t < 0 { t } else { t / 10 });
            let meta: Vec<&str> = header
                .split_whitespace()
                .filter(|f| !f.starts_with('t'))
                .collect();
            format!("{} ttl/10={ttl} {value}", meta.join(" "))
        } else {
            reply
        };
        all.insert(key.clone(), reply);
    }
    all
}

/// Waits until the replica has applied everything the primary holds.
fn caught_up(primary: &KuraServer, replica: &KuraServer) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let target = stat(primary, "synced_lsn");
        if stat(replica, "log_lsn") == target && stat(replica, "synced_lsn") == target {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replica did not catch up: primary {:?}, replica {:?}\n{}",
            replication_stats(primary),
            replication_stats(replica),
            replica.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A writer's work: sets with flags and expiry, appends, deletes, counters.
fn write_round(c: &mut Client, round: usize, keys: &mut Vec<String>) {
    for i in 0..50 {
        let key = format!("k{i}");
        let value = format!("{round}-{i}-{}", "x".repeat(i * 20));
        let exptime = if i % 5 == 0 { 3600 } else { 0 };
        request(
            c,
            format!("set {key} {i} {exptime} {}\r\n{value}\r\n", value.len()).as_bytes(),
            b"\r\n",
        );
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let entry = format!("{round},");
    request(
        c,
        format!("append log 0 0 {}\r\n{entry}\r\n", entry.len()).as_bytes(),
        b"\r\n",
    );
    request(c, b"incr counter 1\r\n", b"\r\n");
    request(c, format!("delete k{}\r\n", round % 50).as_bytes(), b"\r\n");
    for key in ["log", "counter"] {
        if !keys.iter().any(|k| k == key) {
            keys.push(key.to_string());
        }
    }
}

fn start_writing(c: &mut Client) {
    request(c, b"set log 0 0 0\r\n\r\n", b"\r\n");
    request(c, b"set counter 0 0 1\r\n0\r\n", b"\r\n");
}

#[test]
fn a_replica_converges_under_a_writer_with_its_link_cut_every_two_seconds() {
    let (pdir, rdir) = (data_dir("repl-primary-"), data_dir("repl-replica-"));
    let primary = options()
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let proxy = Proxy::start(primary.addr());
    let replica = replica_of(&proxy, rdir.path());
    let mut c = client(&primary);
    start_writing(&mut c);
    let mut keys = Vec::new();
    let started = Instant::now();
    let mut cuts = 0;
    let mut round = 0;
    while started.elapsed() < Duration::from_secs(9) {
        write_round(&mut c, round, &mut keys);
        round += 1;
        if started.elapsed() >= Duration::from_secs(2 * (cuts + 1)) {
            proxy.cut();
            cuts += 1;
        }
    }
    caught_up(&primary, &replica);
    assert_eq!(digest(&replica, &keys), digest(&primary, &keys));
    assert!(cuts >= 3, "the link was cut {cuts} times");
    assert_eq!(
        stat(&replica, "full_syncs"),
        1,
        "only the first copy is full"
    );
    assert!(
        stat(&replica, "partial_syncs") >= cuts,
        "{:?}",
        replication_stats(&replica)
    );
    // A replica serves reads and refuses changes, naming its primary.
    let mut r = client(&replica);
    assert!(request(&mut r, b"get k1\r\n", b"END\r\n").starts_with("VALUE k1 1 "));
    let refused = request(&mut r, b"set k1 0 0 1\r\nx\r\n", b"\r\n");
    assert_eq!(
        refused,
        format!(
            "SERVER_ERROR this server is a replica of {}; send changes there\r\n",
            proxy.addr
        )
    );
    let refused = request(&mut r, b"ms k1 1 T0\r\nx\r\n", b"\r\n");
    assert!(
        refused.starts_with("SERVER_ERROR this server is a replica"),
        "{refused}"
    );
    assert_eq!(
        request(&mut r, b"flush_all\r\n", b"\r\n"),
        refused.replace("\r\n", "") + "\r\n"
    );
}

#[test]
fn a_replica_behind_compaction_gets_one_full_copy_and_a_killed_one_applies_nothing_twice() {
    let (pdir, rdir) = (data_dir("repl-primary-"), data_dir("repl-replica-"));
    let primary = options()
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let proxy = Proxy::start(primary.addr());
    let mut replica = replica_of(&proxy, rdir.path());
    let mut c = client(&primary);
    start_writing(&mut c);
    let mut keys = Vec::new();
    for round in 0..20 {
        write_round(&mut c, round, &mut keys);
    }
    caught_up(&primary, &replica);
    let position = stat(&replica, "log_lsn");
    replica.kill().unwrap_or_else(|e| panic!("kill: {e}"));
    // Away: the primary overwrites its keys until compaction has removed the
    // segment the replica's position is in (the log's oldest start is past it).
    let mut round = 20;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for _ in 0..40 {
            write_round(&mut c, round, &mut keys);
            round += 1;
        }
        let stats = request(&mut c, b"stats\r\n", b"END\r\n");
        let compactions: u64 = stats
            .lines()
            .find_map(|l| l.strip_prefix("STAT compactions "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let log_bytes: u64 = stats
            .lines()
            .find_map(|l| l.strip_prefix("STAT log_bytes "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(u64::MAX);
        // The log now holds less than was written since the position: some of it,
        // the position's segment first, was compacted away.
        if compactions > 2 && log_bytes < stat(&primary, "log_lsn") - position {
            break;
        }
        assert!(Instant::now() < deadline, "no compaction: {stats}");
    }
    request(&mut c, b"delete k7\r\n", b"\r\n");
    replica.restart().unwrap_or_else(|e| panic!("restart: {e}"));
    caught_up(&primary, &replica);
    assert_eq!(
        stat(&replica, "full_syncs"),
        1,
        "{:?}",
        replication_stats(&replica)
    );
    assert_eq!(digest(&replica, &keys), digest(&primary, &keys));
    assert_eq!(
        request(&mut client(&replica), b"get k7\r\n", b"END\r\n"),
        "END\r\n"
    );
    // SIGKILLed mid-stream, again and again: appends and increments land once each.
    for _ in 0..3 {
        for _ in 0..20 {
            write_round(&mut c, round, &mut keys);
            round += 1;
        }
        replica.kill().unwrap_or_else(|e| panic!("kill: {e}"));
        replica.restart().unwrap_or_else(|e| panic!("restart: {e}"));
    }
    caught_up(&primary, &replica);
    assert_eq!(digest(&replica, &keys), digest(&primary, &keys));
}

#[test]
fn a_replica_goes_on_from_its_position_after_its_primary_is_killed_and_restarted() {
    let (pdir, rdir) = (data_dir("repl-primary-"), data_dir("repl-replica-"));
    let mut primary = options()
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let proxy = Proxy::start(primary.addr());
    let replica = replica_of(&proxy, rdir.path());
    let mut keys = Vec::new();
    let mut round = 0;
    for kill in 0..3 {
        let mut c = client(&primary);
        if kill == 0 {
            start_writing(&mut c);
        }
        for _ in 0..30 {
            write_round(&mut c, round, &mut keys);
            round += 1;
        }
        primary.kill().unwrap_or_else(|e| panic!("kill: {e}"));
        proxy.cut();
        primary.restart().unwrap_or_else(|e| panic!("restart: {e}"));
        proxy.point_at(primary.addr());
    }
    caught_up(&primary, &replica);
    assert_eq!(digest(&replica, &keys), digest(&primary, &keys));
    assert_eq!(
        stat(&replica, "full_syncs"),
        1,
        "{:?}",
        replication_stats(&replica)
    );
    assert!(stat(&replica, "partial_syncs") >= 1);
}
