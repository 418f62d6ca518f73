//! Fencing an old primary. A node promoted by `replicaof no one` keeps telling the
//! primary it followed that a newer epoch of their history exists here, until that
//! node answers: an old primary that comes back (restarted, or from the far side of a
//! partition) then stops taking changes and follows the new one, cutting the records
//! the new history never had (`replica.rs`, `kura_engine::Store::rewind_log`).
//!
//! On the wire, on the old primary's memcached port:
//! `fence <history> <epoch> <host> <port>` names the sender's history, its epoch, and
//! where it listens as the receiver can reach it. The receiver follows `host:port`
//! when the history is its own and the epoch newer than its own, and answers `OK` (also
//! when it follows that node already); `SERVER_ERROR fence refused: …` when the fence
//! is not for it (another history, an epoch not newer), which ends the sender's tries.
//!
//! The node being fenced is remembered in the data directory (`fencing`), so a
//! restarted new primary goes on trying.
//!
//! What it is not for: choosing which node becomes primary (the operator's
//! `replicaof no one`), or what a write waits for (`sync.rs`).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kura_protocol::Tokens;

use super::ReplicationError;
use crate::Node;

/// The file in the data directory that names the old primary being fenced.
pub(crate) const FILE: &str = "fencing";

/// How long to wait between tries to reach the old primary.
const RETRY_EVERY: Duration = Duration::from_secs(1);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// The prefix of an answer that ends the tries: the fence is not for that node.
const REFUSED: &str = "SERVER_ERROR fence refused: ";

/// The thread telling an old primary about this node's epoch.
pub struct Fencer {
    pub target: String,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Fencer {
    /// Starts telling `target` (`host:port`) until it answers.
    pub fn start(shared: Arc<dyn Node>, target: String) -> std::io::Result<Fencer> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, target) = (Arc::clone(&stop), target.clone());
            std::thread::Builder::new()
                .name("kura-fencer".to_string())
                .spawn(move || fence_until_heard(&shared, &target, &stop))?
        };
        Ok(Fencer {
            target,
            stop,
            thread,
        })
    }

    /// Whether the old primary has answered (the thread is done).
    pub fn is_done(&self) -> bool {
        self.thread.is_finished()
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.thread.join();
    }
}

/// The old primary this node was fencing when it stopped, if any.
pub fn remembered(data_dir: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(data_dir.join(FILE)) {
        Ok(text) => Ok(Some(text.trim().to_string()).filter(|t| !t.is_empty())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn fence_until_heard(shared: &Arc<dyn Node>, target: &str, stop: &AtomicBool) {
    while !stop.load(Ordering::Acquire) {
        match fence_once(&**shared, target) {
            Ok(reply) => {
                if reply == "OK" {
                    tracing::info!("{target}, the primary this node followed, follows it now");
                } else {
                    tracing::warn!("{target} is not fenced: {reply}");
                }
                if let Err(e) = shared.replication().forget_fencing() {
                    tracing::warn!("forgetting {target}: {e}");
                }
                return;
            }
            Err(e) => {
                if shared.verbosity() > 1 {
                    tracing::warn!("fencing {target}: {e}");
                }
            }
        }
        let until = Instant::now() + RETRY_EVERY;
        while !stop.load(Ordering::Acquire) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One try: the old primary's final answer, or why there was none.
fn fence_once(shared: &dyn Node, target: &str) -> Result<String, ReplicationError> {
    let mut stream = shared.replication().connect(target, CONNECT_TIMEOUT)?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
    // Where this node listens, as the old primary reaches it: the listening address,
    // or, when that is every interface, the one this connection left from.
    let listen = shared.listen_addr();
    let ip = if listen.ip().is_unspecified() {
        stream.local_addr()?.ip()
    } else {
        listen.ip()
    };
    let history = shared.store().history();
    let line = format!(
        "fence {:032x} {} {ip} {}\r\n",
        history.id,
        history.current().number,
        listen.port()
    );
    stream.write_all(line.as_bytes())?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 512];
    while !reply.ends_with(b"\r\n") {
        let n = stream.read(&mut chunk)?;
        if n == 0 || reply.len() > 4096 {
            return Err(ReplicationError::Closed);
        }
        reply.extend_from_slice(&chunk[..n]);
    }
    let reply = String::from_utf8_lossy(&reply[..reply.len() - 2]).into_owned();
    if reply == "OK" || reply.starts_with(REFUSED) {
        Ok(reply)
    } else {
        Err(ReplicationError::Refused(reply))
    }
}

/// `fence <history> <epoch> <host> <port>`, on the node being fenced.
pub fn fence(shared: &dyn Node, mut arguments: Tokens<'_>, out: &mut Vec<u8>) {
    let text = |t: &[u8]| std::str::from_utf8(t).ok().map(str::to_string);
    let mut next = || arguments.next().and_then(text);
    let parsed = (|| {
        let id = next().filter(|id| id.len() == 32)?;
        let id = u128::from_str_radix(&id, 16).ok()?;
        let epoch: u64 = next()?.parse().ok()?;
        let host = next()?;
        let port: u16 = next()?.parse().ok()?;
        next().is_none().then_some((id, epoch, host, port))
    })();
    let Some((id, epoch, host, port)) = parsed else {
        out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
        return;
    };
    let target = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port).to_string(),
        Err(_) => format!("{host}:{port}"),
    };
    let replication = &shared.replication();
    let history = shared.store().history();
    if replication.primary().as_deref() == Some(target.as_str()) {
        out.extend_from_slice(b"OK\r\n");
        return;
    }
    if id != history.id {
        out.extend_from_slice(format!("{REFUSED}another history\r\n").as_bytes());
        return;
    }
    let own = history.current().number;
    if epoch <= own {
        out.extend_from_slice(
            format!("{REFUSED}this node is in epoch {own}, not older than {epoch}\r\n").as_bytes(),
        );
        return;
    }
    tracing::info!(
        "{target} is the primary of epoch {epoch}, newer than this node's {own}: following it"
    );
    match replication.become_replica(shared, target) {
        Ok(()) => out.extend_from_slice(b"OK\r\n"),
        Err(e) => {
            out.extend_from_slice(format!("SERVER_ERROR could not follow: {e}\r\n").as_bytes())
        }
    }
}
