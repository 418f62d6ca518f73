//! `failover to <host> <port> [timeout ms]` on a standalone primary (Redis's `FAILOVER
//! TO`): a planned handover to one of its replicas that loses nothing.
//!
//! The command answers `OK` at once and the handover runs on a thread of its own, as
//! Redis's does; `stats replication` shows its state (`failover_state`) and how the
//! last one ended (`last_failover`). The primary pauses writes (and reads: a paused
//! primary takes nothing, `Store::set_writable_until`), waits until the target follows
//! its history and has synced the log's end, tells the target `replicaof no one`, and
//! follows it. If the target does not catch up within the timeout (5 s by default),
//! nothing changes and writes resume.
//!
//! The old primary's other replicas are told to follow the target as it becomes a
//! replica (`Frame::Moved`, `primary.rs`), and go on there from their positions: the
//! target holds all of the old primary's log.
//! In cluster mode the command is refused: `kura cluster switchover` does this
//! through etcd, and moves every node.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_protocol::Tokens;
use parking_lot::Mutex;

use super::ReplicationError;
use crate::Node;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest wait for one answer of the target.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);

/// The handover's state, as `stats replication` shows it.
#[derive(Default)]
pub struct State {
    inner: Mutex<(Phase, String)>,
}

#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Phase {
    #[default]
    None,
    /// Writes paused, the target catching up.
    WaitingForSync,
    /// The target is told to take over.
    InProgress,
}

impl State {
    /// `failover_state` (Redis's values) and `last_failover` (`-` before the first).
    pub fn shown(&self) -> (&'static str, String) {
        let inner = self.inner.lock();
        let phase = match inner.0 {
            Phase::None => "no-failover",
            Phase::WaitingForSync => "waiting-for-sync",
            Phase::InProgress => "failover-in-progress",
        };
        let last = if inner.1.is_empty() {
            "-".to_string()
        } else {
            inner.1.clone()
        };
        (phase, last)
    }

    fn set(&self, phase: Phase) {
        self.inner.lock().0 = phase;
    }

    fn end(&self, outcome: String) {
        *self.inner.lock() = (Phase::None, outcome);
    }
}

/// `failover to <host> <port> [timeout ms]`.
pub fn command(shared: &dyn Node, mut arguments: Tokens<'_>, out: &mut Vec<u8>) {
    const USAGE: &[u8] = b"CLIENT_ERROR usage: failover to <host> <port> [timeout ms]\r\n";
    let words: Vec<&[u8]> = arguments.by_ref().collect();
    let (to, host, port, timeout) = match words[..] {
        [to, host, port] => (to, host, port, None),
        [to, host, port, ms] => (to, host, port, Some(ms)),
        _ => return out.extend_from_slice(USAGE),
    };
    let port = std::str::from_utf8(port)
        .ok()
        .and_then(|p| p.parse::<u16>().ok());
    let timeout = match timeout.map(|ms| std::str::from_utf8(ms).ok()?.parse::<u64>().ok()) {
        None => Some(DEFAULT_TIMEOUT),
        Some(Some(ms)) if ms > 0 => Some(Duration::from_millis(ms)),
        Some(_) => None,
    };
    let (true, Ok(host), Some(port), Some(timeout)) = (
        to.eq_ignore_ascii_case(b"to"),
        std::str::from_utf8(host),
        port,
        timeout,
    ) else {
        return out.extend_from_slice(USAGE);
    };
    if shared.replication().settings.in_cluster {
        return out.extend_from_slice(
            b"CLIENT_ERROR in cluster mode use kura cluster switchover, which moves every node\r\n",
        );
    }
    if shared.store().is_read_only() {
        return out.extend_from_slice(b"CLIENT_ERROR failover: this node is not a primary\r\n");
    }
    let replication = &shared.replication();
    let Some(arc) = replication.shared.get().and_then(std::sync::Weak::upgrade) else {
        return out.extend_from_slice(b"SERVER_ERROR the server is stopping\r\n");
    };
    {
        let mut inner = replication.failover.inner.lock();
        if inner.0 != Phase::None {
            return out.extend_from_slice(b"CLIENT_ERROR failover: one is under way\r\n");
        }
        inner.0 = Phase::WaitingForSync;
    }
    // Paused from now on, before the answer: no write is taken after the OK.
    shared.store().set_writable_until(Some(Instant::now()));
    let target = format!("{host}:{port}");
    let started = std::thread::Builder::new()
        .name("kura-failover".to_string())
        .spawn(move || run(&arc, &target, timeout));
    match started {
        Ok(_) => out.extend_from_slice(b"OK\r\n"),
        Err(e) => {
            shared.store().set_writable_until(None);
            replication.failover.end(format!("not started: {e}"));
            out.extend_from_slice(format!("SERVER_ERROR failover: {e}\r\n").as_bytes());
        }
    }
}

fn run(shared: &Arc<dyn Node>, target: &str, timeout: Duration) {
    let started = Instant::now();
    let state = &shared.replication().failover;
    match hand_over(shared, target, started + timeout) {
        Ok(()) => {
            let took = started.elapsed();
            tracing::info!("failover: {target} is the primary after {took:?}; following it");
            state.end(format!("to {target} in {} ms", took.as_millis()));
        }
        Err(why) => {
            shared.store().set_writable_until(None);
            tracing::warn!("failover to {target} did not happen, writes resume: {why}");
            state.end(format!("to {target} failed: {why}"));
        }
    }
}

/// Waits until `target` holds this log's end, promotes it and follows it.
fn hand_over(
    shared: &Arc<dyn Node>,
    target: &str,
    deadline: Instant,
) -> Result<(), ReplicationError> {
    let history = shared.store().history();
    let ours = (
        format!("{:032x}", history.id),
        history.current().number.to_string(),
    );
    loop {
        let end = shared.store().appended_lsn();
        let stats = ask(&**shared, target, b"stats replication\r\n", b"END\r\n");
        if let Ok(stats) = stats {
            let stat = |name: &str| {
                stats
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("STAT ")?
                            .strip_prefix(name)?
                            .strip_prefix(' ')
                    })
                    .map(str::to_string)
            };
            let same_history = stat("history_id").as_deref() == Some(ours.0.as_str())
                && stat("epoch").as_deref() == Some(ours.1.as_str());
            let synced = stat("synced_lsn")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            if stat("role").as_deref() == Some("replica") && same_history && synced >= end {
                break;
            }
        }
        if Instant::now() > deadline {
            return Err(ReplicationError::Failover(format!(
                "{target} did not hold this log's end in time"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    shared.replication().failover.set(Phase::InProgress);
    // The streams to this node's other replicas end telling them to follow the
    // target, which holds all of this log, as soon as this node is a replica: the
    // target's fence may make it one before this thread does.
    *shared.replication().moved_to.lock() = Some(target.to_string());
    let promoted = ask(&**shared, target, b"replicaof no one\r\n", b"\r\n").and_then(|answer| {
        if answer == "OK\r\n" {
            Ok(())
        } else {
            Err(ReplicationError::Failover(format!(
                "{target} answered {:?}",
                answer.trim_end()
            )))
        }
    });
    if let Err(why) = promoted {
        *shared.replication().moved_to.lock() = None;
        return Err(why);
    }
    if let Err(e) = shared
        .replication()
        .become_replica(&**shared, target.to_string())
    {
        *shared.replication().moved_to.lock() = None;
        return Err(ReplicationError::Failover(format!(
            "following {target}: {e}"
        )));
    }
    shared.store().set_writable_until(None);
    Ok(())
}

/// Sends `request` to the node at `address` (logged in and over TLS as replication
/// connects) and reads its answer up to `end`.
fn ask(
    shared: &dyn Node,
    address: &str,
    request: &[u8],
    end: &[u8],
) -> Result<String, ReplicationError> {
    let mut socket = shared.replication().connect(address, ANSWER_WITHIN)?;
    socket.set_read_timeout(Some(ANSWER_WITHIN))?;
    socket.write_all(request)?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !answer.ends_with(end) {
        let n = socket.read(&mut chunk)?;
        if n == 0 || answer.len() > 1 << 20 {
            return Err(ReplicationError::Closed);
        }
        answer.extend_from_slice(&chunk[..n]);
        let refused = answer.starts_with(b"SERVER_ERROR") || answer.starts_with(b"CLIENT_ERROR");
        if refused && answer.ends_with(b"\r\n") {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}
