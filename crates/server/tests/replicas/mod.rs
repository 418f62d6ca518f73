//! What the replication tests share: servers on real disks, a proxy the test can cut
//! and re-point, requests with a hang deadline, `stats replication`, and a digest of
//! a store's contents to compare nodes by, and statements through the `mariadb` client.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kura_testkit::{
    assert_not_tmpfs, kura_bin, Client, Durability, KuraOptions, KuraServer, ReplyEnd,
};

/// A TCP proxy to whatever address `target` holds; `cut` closes every connection.
pub struct Proxy {
    pub addr: SocketAddr,
    target: Arc<Mutex<SocketAddr>>,
    live: Arc<Mutex<Vec<TcpStream>>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    pub fn start(target: SocketAddr) -> Proxy {
        Proxy::start_with_delay(target, Duration::ZERO)
    }

    /// A proxy that holds every chunk it forwards for `delay`, as a distant link
    /// would: what a replica receives lags what its primary sent.
    pub fn start_with_delay(target: SocketAddr, delay: Duration) -> Proxy {
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
                        let _ = forward(&mut from, &mut into, delay);
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

    pub fn target(&self) -> SocketAddr {
        *self.target.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn point_at(&self, target: SocketAddr) {
        *self.target.lock().unwrap_or_else(|e| e.into_inner()) = target;
    }

    pub fn cut(&self) {
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

/// Copies `from` into `into` until either ends, holding each chunk for `delay`.
fn forward(from: &mut TcpStream, into: &mut TcpStream, delay: Duration) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = from.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        into.write_all(&chunk[..n])?;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.cut();
        let _ = TcpStream::connect(self.addr);
    }
}

pub fn options() -> KuraOptions {
    KuraOptions::new(kura_bin(env!("CARGO_BIN_EXE_kura")), Durability::Fsync)
        .arg("--segment-size-mib")
        .arg("1")
}

/// A fresh data directory under Cargo's target directory (a real disk).
pub fn data_dir(name: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("temp dir: {e}"));
    assert_not_tmpfs(dir.path());
    dir
}

pub fn replica_of(proxy: &Proxy, dir: &std::path::Path) -> KuraServer {
    options()
        .arg("--replica-of")
        .arg(proxy.addr.to_string())
        .start_on(dir)
        .unwrap_or_else(|e| panic!("start the replica: {e}"))
}

pub fn client(server: &KuraServer) -> Client {
    Client::connect(server.addr()).unwrap_or_else(|e| panic!("connect: {e}"))
}

/// How long a reply may take before the test calls the server hung. Generous: the
/// tests run beside each other, every change waits for an fsync, and the suite's other
/// work shares the disk; a hang, not a slow disk, is what this catches.
pub const HUNG_AFTER: Duration = Duration::from_secs(60);

pub fn request(c: &mut Client, bytes: &[u8], suffix: &[u8]) -> String {
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
pub fn replication_stats(server: &KuraServer) -> BTreeMap<String, String> {
    let reply = request(&mut client(server), b"stats replication\r\n", b"END\r\n");
    reply
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn stat(server: &KuraServer, name: &str) -> u64 {
    replication_stats(server)
        .get(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in stats replication"))
}

/// Every key's value, flags, CAS and remaining time to live (`mg … v f c t`), with
/// the time to live rounded to ten seconds (the two reads are not at one instant).
pub fn digest(server: &KuraServer, keys: &[String]) -> BTreeMap<String, String> {
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

/// Waits until `old` (a former primary, now following) has applied everything
/// `primary` holds, then asserts it holds the same `keys` as `primary`.
pub fn old_primary_holds_the_same(primary: &KuraServer, old: &KuraServer, keys: &[String]) {
    caught_up(primary, old);
    assert_eq!(
        digest(old, keys),
        digest(primary, keys),
        "the old primary holds what the new one holds"
    );
}

/// Waits until the replica has applied everything the primary holds.
pub fn caught_up(primary: &KuraServer, replica: &KuraServer) {
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
pub fn write_round(c: &mut Client, round: usize, keys: &mut Vec<String>) {
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

pub fn start_writing(c: &mut Client) {
    request(c, b"set log 0 0 0\r\n\r\n", b"\r\n");
    request(c, b"set counter 0 0 1\r\n0\r\n", b"\r\n");
}

/// [`KuraServer::sql`]: whether `statement` succeeded on `server`, and its output.
pub fn sql(server: &KuraServer, statement: &str) -> (bool, String) {
    server.sql(statement)
}

/// [`KuraServer::sql_ok`].
pub fn sql_ok(server: &KuraServer, statement: &str) -> String {
    server.sql_ok(statement)
}
