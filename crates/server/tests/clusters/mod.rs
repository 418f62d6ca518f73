//! What the cluster tests share: a node of shard `s0` of cluster `test` started
//! against a private etcd, waiting for an election, and the operator's commands.

#![allow(dead_code, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kura_testkit::etcd::Etcd;
use kura_testkit::{free_port, KuraServer, NetNamespace};

use crate::replicas::*;

pub mod shard;

/// How long an election may take here: a lease of etcd's shortest (3 s), polls, and a
/// machine shared with the rest of the suite.
pub const ELECTED_WITHIN: Duration = Duration::from_secs(60);

/// Replicas answer reads from their own copy.
pub const LOCAL: &[&str] = &["--replica-reads", "local"];

pub struct Node {
    pub server: KuraServer,
    pub advertise: String,
    _dir: tempfile::TempDir,
}

/// A node whose replicas answer reads from their own copy, for tests that compare
/// what each node holds.
pub fn node(etcd: &Etcd, name: &str) -> Node {
    node_at(&etcd.endpoint(), name, "127.0.0.1", None, LOCAL)
}

/// A node listening on `ip`, inside the namespace `ns` if given (off the loopback
/// with `--insecure` and no SQL port, as the test needs no users).
pub fn node_at(
    etcd: &str,
    name: &str,
    ip: &str,
    ns: Option<&NetNamespace>,
    extra: &[&str],
) -> Node {
    node_of_shard(etcd, name, "s0", 1, ip, ns, extra)
}

/// A node of shard `shard` with `--min-sync-replicas sync`, as [`node_at`] starts one.
pub fn node_of_shard(
    etcd: &str,
    name: &str,
    shard: &str,
    sync: u32,
    ip: &str,
    ns: Option<&NetNamespace>,
    extra: &[&str],
) -> Node {
    node_of_shard_env(etcd, name, shard, sync, ip, ns, extra, &[])
}

/// [`node_of_shard`], started with `env` in its environment.
#[allow(clippy::too_many_arguments)]
pub fn node_of_shard_env(
    etcd: &str,
    name: &str,
    shard: &str,
    sync: u32,
    ip: &str,
    ns: Option<&NetNamespace>,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Node {
    let dir = data_dir(name);
    let port = free_port();
    let advertise = format!("{ip}:{port}");
    let mut options = options().listen(ip);
    if ip != "127.0.0.1" {
        options = options.arg("--insecure").arg("--sql-port").arg("off");
    }
    if let Some(ns) = ns {
        options = options.wrapped_in(&["ip", "netns", "exec", &ns.name]);
    }
    for arg in extra {
        options = options.arg(arg);
    }
    for (key, value) in env {
        options = options.env(key, value);
    }
    let server = options
        .arg("-p")
        .arg(port.to_string())
        .arg("--etcd")
        .arg(etcd)
        .arg("--cluster")
        .arg("test")
        .arg("--shard")
        .arg(shard)
        .arg("--advertise")
        .arg(&advertise)
        .arg("--lease-ttl-ms")
        .arg("3000")
        .arg("--min-sync-replicas")
        .arg(sync.to_string())
        .arg("-v")
        .start_on(dir.path())
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
    Node {
        server,
        advertise,
        _dir: dir,
    }
}

pub fn role(node: &Node) -> String {
    replication_stats(&node.server)
        .get("role")
        .cloned()
        .unwrap_or_default()
}

/// Waits until one of `nodes` is primary with the others following it; its index.
pub fn elected(nodes: &[&Node]) -> usize {
    let deadline = Instant::now() + ELECTED_WITHIN;
    loop {
        let roles: Vec<String> = nodes.iter().map(|n| role(n)).collect();
        let primaries: Vec<usize> = (0..nodes.len())
            .filter(|&i| roles[i] == "primary")
            .collect();
        if let [p] = primaries[..] {
            let others_follow = (0..nodes.len()).filter(|&i| i != p).all(|i| {
                let stats = replication_stats(&nodes[i].server);
                stats.get("role").map(String::as_str) == Some("replica")
                    && stats.get("primary").map(String::as_str) == Some(&nodes[p].advertise)
            });
            if others_follow
                && stat(&nodes[p].server, "connected_replicas") == (nodes.len() - 1) as u64
            {
                return p;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no primary with its replicas: roles {roles:?}\n{}",
            logs(nodes)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the writers have `n` acknowledged writes in `acked`; `what` if they do
/// not within a minute.
pub fn until_acked(acked: &Mutex<BTreeMap<String, String>>, n: usize, what: &str) {
    let deadline = Instant::now() + ELECTED_WITHIN;
    while acked.lock().expect("acked").len() < n {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What `nodes` printed, one after the other.
pub fn logs(nodes: &[&Node]) -> String {
    let logs: Vec<String> = nodes.iter().map(|n| n.server.log()).collect();
    logs.join("\n----\n")
}

/// `kura cluster switchover` of shard `s0` to the node advertised as `to`: what it
/// printed, or why it failed.
pub fn switchover(etcd: &Etcd, to: &str) -> Result<String, String> {
    let out = std::process::Command::new(kura_testkit::kura_bin(env!("CARGO_BIN_EXE_kura")))
        .args(["cluster", "switchover", "--etcd", &etcd.endpoint()])
        .args(["--cluster", "test", "--shard", "s0", "--to", to])
        .output()
        .expect("run kura cluster switchover");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// `kura cluster <args>` against `etcd`'s cluster `test`: whether it succeeded, and
/// what it printed.
pub fn kura_cluster(etcd: &Etcd, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(kura_testkit::kura_bin(env!("CARGO_BIN_EXE_kura")))
        .arg("cluster")
        .arg(args[0])
        .args(["--etcd", &etcd.endpoint(), "--cluster", "test"])
        .args(&args[1..])
        .output()
        .expect("run kura cluster");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// nutcracker with `pool`, listening on `listen`; killed when dropped.
pub struct Nutcracker(std::process::Child, #[allow(dead_code)] tempfile::TempDir);

impl Nutcracker {
    pub fn start(pool: &str, listen: u16) -> Nutcracker {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("pool.yml"), pool).expect("write pool");
        let child = std::process::Command::new("nutcracker")
            .arg("-c")
            .arg(dir.path().join("pool.yml"))
            .args(["-s", &kura_testkit::free_port().to_string()])
            .arg("-o")
            .arg(dir.path().join("nutcracker.log"))
            .spawn()
            .expect("run nutcracker (scripts/install-peers.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err() {
            assert!(Instant::now() < deadline, "nutcracker does not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Nutcracker(child, dir)
    }
}

impl Drop for Nutcracker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A node's `stats<which>` (`""`, `" cluster"`, ...) as a map.
pub fn stats_of(server: &KuraServer, which: &str) -> BTreeMap<String, String> {
    request(
        &mut client(server),
        format!("stats{which}\r\n").as_bytes(),
        b"END\r\n",
    )
    .lines()
    .filter_map(|l| l.strip_prefix("STAT "))
    .filter_map(|l| l.split_once(' '))
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// A number of a node's `stats<which>`.
pub fn number(server: &KuraServer, which: &str, name: &str) -> u64 {
    stats_of(server, which)
        .get(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("stats{which} shows no {name}"))
}

/// What `nodes` logged of the cluster (their `-v` logs hold etcd's client's debug
/// lines too), one after the other.
pub fn moves_log(nodes: &[&Node]) -> String {
    let logs: Vec<String> = nodes
        .iter()
        .map(|n| {
            let log = n.server.log();
            let lines: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("cluster") || l.contains("WARN") || l.contains("ERROR"))
                .collect();
            format!("{}:\n{}", n.advertise, lines.join("\n"))
        })
        .collect();
    logs.join("\n----\n")
}

/// The addresses of a ring given as `SHARD=ADDRESS,...`.
pub fn addresses(ring: &str) -> String {
    ring.split(',')
        .map(|s| s.split_once('=').expect("SHARD=ADDRESS").1)
        .collect::<Vec<_>>()
        .join(",")
}

/// Waits until every node has read ring `version` with no change in progress.
pub fn ring_settled(nodes: &[&Node], version: u64) {
    let deadline = Instant::now() + ELECTED_WITHIN;
    while !nodes.iter().all(|n| {
        let s = stats_of(&n.server, " cluster");
        s.get("ring_version").map(String::as_str) == Some(&version.to_string())
            && !s.contains_key("ring_next_version")
    }) {
        assert!(
            Instant::now() < deadline,
            "ring v{version} not seen\n{}",
            moves_log(nodes)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One number of a node's `stats cluster`.
pub fn cluster_stat(node: &Node, name: &str) -> u64 {
    cluster_stats(&node.server)
        .get(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("stats cluster shows no {name}"))
}

/// A node's `stats cluster`.
pub fn cluster_stats(server: &KuraServer) -> BTreeMap<String, String> {
    request(&mut client(server), b"stats cluster\r\n", b"END\r\n")
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A `set` of `key` to `value` on `c`; its reply.
pub fn set(c: &mut kura_testkit::Client, key: &str, value: &str) -> String {
    request(
        c,
        format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
        b"\r\n",
    )
}

/// Asserts that `server` answers every acknowledged write in `acked` with its value.
pub fn holds_every_acked(server: &KuraServer, acked: &BTreeMap<String, String>) {
    let mut c = client(server);
    for (key, value) in acked {
        let got = request(&mut c, format!("get {key}\r\n").as_bytes(), b"END\r\n");
        assert_eq!(
            got,
            format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len()),
            "acknowledged write {key} on the new primary"
        );
    }
}
