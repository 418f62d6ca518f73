//! A shard driven step by step: three nodes, a private etcd and writers that keep
//! what was acknowledged, and faults applied one at a time at points the test
//! chooses (a node SIGKILLed, restarted, frozen by SIGSTOP past its lease and let run
//! again, etcd stopped and started, a planned switchover). After each fault the shard
//! is let settle (one primary, the others following, writes going on), and at the end
//! every acknowledged write must be on every node. A schedule comes from a seed, so
//! a failing one runs again with `KURA_SEED`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kura_testkit::etcd::Etcd;

use super::*;

/// One fault, or the repair of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL of the primary, or of a replica.
    KillPrimary,
    KillReplica,
    /// The node killed last starts again on its data and port.
    Restart,
    /// The primary frozen (SIGSTOP) for twice its lease, then let run (SIGCONT): it
    /// wakes believing it is primary while another is.
    FreezePrimary,
    /// etcd away for twice the lease, then back on its data and ports.
    StopEtcd,
    /// `kura cluster switchover` to a replica.
    Switchover,
}

/// Acknowledged writes, key to value; each key is written once.
type Acked = Arc<Mutex<BTreeMap<String, String>>>;

pub struct Shard {
    pub etcd: Etcd,
    pub nodes: Vec<Node>,
    /// The node killed and not yet restarted.
    pub down: Option<usize>,
    pub acked: Acked,
    stop: Arc<AtomicBool>,
    writers: Vec<JoinHandle<()>>,
    /// The writers' view of where to write.
    addrs: Arc<Mutex<Vec<(String, SocketAddr)>>>,
}

impl Shard {
    /// Three nodes (`--min-sync-replicas 1`, a 3 s lease), elected, with two writers
    /// going.
    pub fn start(tag: &str) -> Shard {
        let etcd = Etcd::start(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
        let nodes: Vec<Node> = (0..3)
            .map(|i| {
                node_at(
                    &etcd.endpoint(),
                    &format!("kura-{tag}-{i}-"),
                    "127.0.0.1",
                    None,
                    &[],
                )
            })
            .collect();
        elected(&nodes.iter().collect::<Vec<_>>());
        let addrs: Vec<(String, SocketAddr)> = nodes
            .iter()
            .map(|n| (n.advertise.clone(), n.server.addr()))
            .collect();
        let mut shard = Shard {
            etcd,
            nodes,
            down: None,
            acked: Arc::default(),
            stop: Arc::new(AtomicBool::new(false)),
            writers: Vec::new(),
            addrs: Arc::new(Mutex::new(addrs)),
        };
        for w in 0..2 {
            let writer = writer(w, &shard.acked, &shard.stop, &shard.addrs);
            shard.writers.push(writer);
        }
        shard
    }

    /// The nodes that run.
    fn up(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| Some(i) != self.down)
            .collect()
    }

    /// The running node etcd has elected, once the others follow it.
    pub fn primary(&self) -> usize {
        let up = self.up();
        let live: Vec<&Node> = up.iter().map(|&i| &self.nodes[i]).collect();
        up[elected(&live)]
    }

    /// The faults that may come next: one node down at a time (a primary and one
    /// replica keep taking writes with `--min-sync-replicas 1`).
    pub fn possible(&self) -> Vec<Fault> {
        match self.down {
            Some(_) => vec![Fault::Restart],
            None => vec![
                Fault::KillPrimary,
                Fault::KillReplica,
                Fault::FreezePrimary,
                Fault::StopEtcd,
                Fault::Switchover,
            ],
        }
    }

    /// Applies `fault`, then waits until the shard has settled.
    pub fn apply(&mut self, fault: Fault) {
        let lease = Duration::from_millis(3000);
        match fault {
            Fault::KillPrimary | Fault::KillReplica => {
                let p = self.primary();
                let victim = if fault == Fault::KillPrimary {
                    p
                } else {
                    (p + 1) % self.nodes.len()
                };
                self.nodes[victim].server.kill().expect("SIGKILL");
                self.down = Some(victim);
            }
            Fault::Restart => {
                let node = self.down.take().expect("a node down");
                self.nodes[node].server.restart().expect("restart");
            }
            Fault::FreezePrimary => {
                let p = self.primary();
                self.nodes[p].server.pause().expect("SIGSTOP");
                std::thread::sleep(lease * 2);
                self.nodes[p].server.resume().expect("SIGCONT");
            }
            Fault::StopEtcd => {
                self.etcd.stop();
                std::thread::sleep(lease * 2);
                self.etcd.restart();
            }
            Fault::Switchover => {
                let p = self.primary();
                let to = self.nodes[(p + 1) % self.nodes.len()].advertise.clone();
                let text = switchover(&self.etcd, &to)
                    .unwrap_or_else(|e| panic!("switchover to {to}: {e}\n{}", self.logs()));
                assert!(text.contains(&format!("primary {to} (epoch")), "{text}");
            }
        }
        self.settle(fault);
    }

    /// Waits until one running node is primary with the others following it and the
    /// writers have had 50 more writes acknowledged.
    fn settle(&mut self, after: Fault) {
        let p = self.primary();
        let addrs: Vec<(String, SocketAddr)> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|&(i, _)| Some(i) != self.down)
            .map(|(_, n)| (n.advertise.clone(), n.server.addr()))
            .collect();
        *self.addrs.lock().expect("addrs") = addrs;
        let before = self.acked.lock().expect("acked").len();
        let deadline = Instant::now() + ELECTED_WITHIN;
        while self.acked.lock().expect("acked").len() < before + 50 {
            assert!(
                Instant::now() < deadline,
                "no writes after {after:?} (primary {})\n{}",
                self.nodes[p].advertise,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the writers, brings every node up, and checks that each holds every
    /// acknowledged write; the number of them.
    pub fn finish(mut self) -> usize {
        if self.down.is_some() {
            self.apply(Fault::Restart);
        }
        self.stop.store(true, Ordering::Relaxed);
        for w in self.writers.drain(..) {
            w.join().expect("writer");
        }
        let p = self.primary();
        let acked = self.acked.lock().expect("acked").clone();
        let keys: Vec<String> = acked.keys().cloned().collect();
        let on_primary = digest(&self.nodes[p].server, &keys);
        for (key, value) in &acked {
            assert!(
                on_primary[key].ends_with(&format!(" {value}\r\n")),
                "acknowledged {key} = {value} on the primary: {:?}\n{}",
                on_primary[key],
                self.logs()
            );
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if i != p {
                caught_up(&self.nodes[p].server, &node.server);
                assert_eq!(
                    digest(&node.server, &keys),
                    on_primary,
                    "{} holds what the primary holds",
                    node.advertise
                );
            }
        }
        acked.len()
    }

    fn logs(&self) -> String {
        logs(&self.nodes.iter().collect::<Vec<_>>())
    }
}

/// A writer: sets of keys of its own, each to the node `stats cluster` names primary
/// (asked again after a refusal), noting what was acknowledged.
fn writer(
    w: usize,
    acked: &Acked,
    stop: &Arc<AtomicBool>,
    addrs: &Arc<Mutex<Vec<(String, SocketAddr)>>>,
) -> JoinHandle<()> {
    let (acked, stop, addrs) = (Arc::clone(acked), Arc::clone(stop), Arc::clone(addrs));
    std::thread::spawn(move || {
        let mut at = addrs.lock().expect("addrs")[0].1;
        for i in 0.. {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let (key, value) = (format!("w{w}-{i}"), format!("v{i}"));
            let line = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
            let reply = ask(at, &line, "\r\n");
            if reply == "STORED\r\n" {
                acked.lock().expect("acked").insert(key, value);
                continue;
            }
            // Refused, cut off or a node down: this key may or may not have been
            // made; the writer goes on with the next, asking whom to write to.
            assert!(
                reply.is_empty() || reply.starts_with("SERVER_ERROR"),
                "{key}: {reply:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
            let known = addrs.lock().expect("addrs").clone();
            for (_, addr) in &known {
                let stats = ask(*addr, "stats cluster\r\n", "END\r\n");
                let named = stats
                    .lines()
                    .find_map(|l| l.strip_prefix("STAT primary "))
                    .map(str::to_string);
                if let Some((_, to)) = known.iter().find(|(a, _)| Some(a) == named.as_ref()) {
                    at = *to;
                    break;
                }
            }
        }
    })
}

/// `line` sent to `addr` on a connection of its own: the reply up to `end`, or
/// nothing if the node is down, closes, or does not answer in time.
fn ask(addr: SocketAddr, line: &str, end: &str) -> String {
    let Ok(mut c) = kura_testkit::Client::connect(addr) else {
        return String::new();
    };
    if c.send(line.as_bytes()).is_err() {
        return String::new();
    }
    match c.read_reply_until_suffix(end.as_bytes(), HUNG_AFTER) {
        Ok(reply) if reply.end == kura_testkit::ReplyEnd::Suffix => {
            String::from_utf8_lossy(&reply.bytes).into_owned()
        }
        _ => String::new(),
    }
}
