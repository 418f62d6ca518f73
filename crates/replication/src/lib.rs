//! Replication: a replica follows its primary's log over a TCP connection to the
//! primary's memcached port. The replica sends `replicate <history> <epoch> <lsn>`;
//! the primary answers with a hello that says where the stream starts (the replica's
//! own position, or a full copy from its oldest segment) and then streams its log's
//! records, never past what is on its own disk, while the replica confirms what is on
//! its disk. The frames are `kura_protocol::replication`'s; what the replica does with
//! the records is the engine's (`Store::apply_copied`): its log is the primary's, byte
//! for byte, so positions mean the same on every node.
//!
//! `primary.rs` serves one replica (an async task on the worker that accepted its
//! connection, reading the log from disk, so a slow replica costs the primary no
//! memory); `replica.rs` is the follower (an async task on the main runtime that
//! connects, applies and reconnects); `fence.rs` tells an old primary
//! that a newer epoch exists, so that it follows; `sync.rs` holds replies until
//! replicas confirm. This file holds the node's role, `replicaof`, and
//! `stats replication`, and the connection to another node ([`connect`], [`log_in`]).
//!
//! What it is not for: deciding what a record does (the engine), or when a change is
//! acknowledged to a client (`server.rs`).

pub mod confirmations;
mod error;
pub mod failover;
pub mod fence;
pub mod primary;
pub mod replica;
pub mod role;
pub mod socket;
mod synced;

pub use error::ReplicationError;
pub use socket::Socket;
pub use synced::{synced_past, Synced};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kura_engine::Store;
use kura_protocol::Tokens;
use kura_tables::Tables;
use parking_lot::Mutex;

/// What replication needs of the node it runs in: the server's shared state.
pub trait Node: Send + Sync + 'static {
    fn store(&self) -> &Arc<Store>;
    fn tables(&self) -> &Arc<Tables>;
    fn replication(&self) -> &Replication;
    /// The store's synced LSN, fed by its `Options::on_synced`.
    fn synced(&self) -> &Synced;
    /// The log's verbosity now (`-v`, the `verbosity` command).
    fn verbosity(&self) -> u64;
    /// Set once the server is stopping and its clients' connections are done.
    fn stopping(&self) -> bool;
    /// Where the memcached port listens.
    fn listen_addr(&self) -> std::net::SocketAddr;
    /// A step of a move's hand-off from the target on the `move` stream `link`
    /// (issue 42). The cluster's side runs the hand-off and answers through
    /// [`primary::Link::send_hand_off`]; a node outside a cluster ends the stream.
    fn hand_off(
        self: Arc<Self>,
        link: Arc<primary::Link>,
        step: HandOffStep,
        lsn: u64,
        shard: &str,
    ) {
        let _ = (lsn, shard, step);
        link.send_hand_off(HandOffStep::Released, 0, "");
    }
}

pub use kura_protocol::replication::HandOffStep;

/// TLS toward other nodes (`--tls-replication`): the client configuration, made
/// anew for each connection (certificates may have been reloaded).
pub trait ClientTls: Send + Sync {
    fn client_config(&self) -> Result<Arc<tokio_rustls::rustls::ClientConfig>, String>;
}

/// The server's settings replication follows.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `--min-sync-replicas`: what every change waits for.
    pub min_sync_replicas: u8,
    /// `--replica-linger-ms`: how long a stream gathers the log before it sends.
    pub replica_linger_ms: u64,
    /// `--replica-backlog-mib`: how far behind a replica may fall before its stream
    /// ends.
    pub replica_backlog_mib: u64,
    /// `--advertise`: the address other nodes reach this one at.
    pub advertise: Option<String>,
    /// Whether the node is in cluster mode (`--etcd`), where etcd moves the roles.
    pub in_cluster: bool,
}

/// The file in the data directory that remembers whom a replica follows, so that a
/// restart without `--replica-of` does not turn it into a second primary.
const ROLE_FILE: &str = "replica-of";

/// How long a connection to another node may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long shutdown waits for the streams to replicas to say `Bye`. A stream sees
/// the stop within 200 ms (its longest wait for the log); one stuck writing to a
/// replica that does not read is left to the process's exit.
const STREAMS_END_WITHIN: Duration = Duration::from_secs(1);

/// Opens a connection to the node at `address` (`host:port`) for a replication
/// stream (a replica's, or `kura backup`'s): over TLS with `tls`, checking the
/// node's certificate, else plain TCP.
pub fn connect(address: &str, tls: Option<&dyn ClientTls>) -> Result<Socket, ReplicationError> {
    Socket::connect(address, tls, CONNECT_TIMEOUT)
}

/// Sends `login` (a `--replication-login`), if any, on a connection to another node
/// and waits for its `STORED`.
pub fn log_in(stream: &mut Socket, login: Option<&[u8]>) -> Result<(), ReplicationError> {
    use std::io::{Read, Write};
    let Some(login) = login else {
        return Ok(());
    };
    stream.write_all(login)?;
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    // Byte by byte: what follows the reply is the stream's, not the login's.
    while !reply.ends_with(b"\r\n") && reply.len() < 4096 {
        if stream.read(&mut byte)? == 0 {
            return Err(ReplicationError::Closed);
        }
        reply.push(byte[0]);
    }
    login_reply(&reply)
}

/// Whether the reply to a login (its line) says it was taken.
fn login_reply(reply: &[u8]) -> Result<(), ReplicationError> {
    if reply == b"STORED\r\n" {
        Ok(())
    } else {
        Err(ReplicationError::LoginRefused(
            String::from_utf8_lossy(reply).trim_end().to_string(),
        ))
    }
}

/// The node's side of replication: whom it follows, and who follows it.
pub struct Replication {
    data_dir: PathBuf,
    /// `--replication-login`: the text login this node sends before `replicate` or
    /// `fence` to a node with a users file.
    login: Option<Vec<u8>>,
    /// `--tls-replication`: how this node speaks TLS to the nodes it connects to.
    tls: Option<Box<dyn ClientTls>>,
    /// The server's settings replication follows.
    pub settings: Settings,
    /// In cluster mode, the shard as the role's task last saw it (`role.rs`).
    pub shard: role::Shard,
    /// What every connection shares, for the threads replication starts
    /// ([`Replication::bind`]).
    shared: std::sync::OnceLock<std::sync::Weak<dyn Node>>,
    /// The runtime the follower runs on: the server's main one.
    runtime: std::sync::OnceLock<tokio::runtime::Handle>,
    /// The primary this node follows, and the task that follows it.
    following: Mutex<Option<replica::Follower>>,
    /// The old primary this node, promoted, is telling about its epoch.
    fencer: Mutex<Option<fence::Fencer>>,
    /// The replicas streaming from this node, by link number.
    links: Mutex<BTreeMap<u64, Arc<primary::Link>>>,
    next_link: AtomicU64,
    /// Streams this node began for replicas, from their position or from its oldest
    /// segment.
    pub partial_syncs: AtomicU64,
    pub full_syncs: AtomicU64,
    /// What the replicas confirmed, for changes that wait for them.
    pub confirmations: confirmations::Confirmations,
    /// Changes refused for want of replicas, and replies that timed out waiting.
    pub sync_refusals: AtomicU64,
    pub sync_timeouts: AtomicU64,
    /// Streams ended because their replica fell more than `--replica-backlog-mib`
    /// behind.
    pub backlog_drops: AtomicU64,
    /// A standalone primary's `failover to` (`failover.rs`).
    pub failover: failover::State,
    /// The node a `failover to` handed this one's role to: the streams to this node's
    /// replicas end telling them to follow it (`Frame::Moved`).
    moved_to: Mutex<Option<String>>,
    /// Held while the node changes role (`become_replica`, `promote`): a `failover
    /// to` and the fence its target sends may both make this node a replica at once.
    role: Mutex<()>,
}

impl Replication {
    /// Connects to another node's memcached port (over TLS with `--tls-replication`)
    /// and logs in with `--replication-login` when there is one.
    pub fn connect(&self, address: &str, limit: Duration) -> Result<Socket, ReplicationError> {
        let mut socket = Socket::connect(address, self.tls(), limit)?;
        log_in(&mut socket, self.login.as_deref())?;
        Ok(socket)
    }

    /// The TLS settings of `--tls-replication`, if given.
    pub fn tls(&self) -> Option<&dyn ClientTls> {
        self.tls.as_deref()
    }

    /// The text login `--replication-login` makes, if given.
    pub fn login(&self) -> Option<&[u8]> {
        self.login.as_deref()
    }

    /// `--replication-login`'s user and password, from the text login it makes.
    pub fn login_parts(&self) -> Option<(&[u8], &[u8])> {
        let login = self.login.as_deref()?;
        let start = login.windows(2).position(|w| w == b"\r\n")? + 2;
        let token = login[start..].strip_suffix(b"\r\n")?;
        let space = token.iter().position(|&b| b == b' ')?;
        Some((&token[..space], &token[space + 1..]))
    }

    /// The replicas streaming from this node now (not the backups).
    pub fn links(&self) -> Vec<Arc<primary::Link>> {
        self.streams(primary::Purpose::Replica)
    }

    /// The streams from this node now that serve `purpose`.
    fn streams(&self, purpose: primary::Purpose) -> Vec<Arc<primary::Link>> {
        self.links
            .lock()
            .values()
            .filter(|link| link.purpose == purpose)
            .cloned()
            .collect()
    }

    pub fn new(
        data_dir: &Path,
        login: Option<Vec<u8>>,
        tls: Option<Box<dyn ClientTls>>,
        settings: Settings,
    ) -> Replication {
        Replication {
            data_dir: data_dir.to_path_buf(),
            login,
            tls,
            settings,
            shard: role::Shard::default(),
            shared: std::sync::OnceLock::new(),
            runtime: std::sync::OnceLock::new(),
            following: Mutex::new(None),
            fencer: Mutex::new(None),
            links: Mutex::new(BTreeMap::new()),
            next_link: AtomicU64::new(1),
            partial_syncs: AtomicU64::new(0),
            full_syncs: AtomicU64::new(0),
            confirmations: confirmations::Confirmations::default(),
            sync_refusals: AtomicU64::new(0),
            sync_timeouts: AtomicU64::new(0),
            backlog_drops: AtomicU64::new(0),
            failover: failover::State::default(),
            moved_to: Mutex::new(None),
            role: Mutex::new(()),
        }
    }

    /// Gives replication what every connection shares, once it exists, and the
    /// runtime it is called on (the server's main one) for the follower.
    pub fn bind(&self, shared: &Arc<dyn Node>) {
        let _ = self.shared.set(Arc::downgrade(shared));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let _ = self.runtime.set(runtime);
        }
    }

    /// Whom the node followed when it stopped, if it was a replica.
    pub fn remembered_primary(data_dir: &Path) -> std::io::Result<Option<String>> {
        match std::fs::read_to_string(data_dir.join(ROLE_FILE)) {
            Ok(text) => Ok(Some(text.trim().to_string()).filter(|p| !p.is_empty())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes (or, with None, removes) the role file, durably.
    fn remember(&self, primary: Option<&str>) -> std::io::Result<()> {
        self.write_file(ROLE_FILE, primary)
    }

    /// Writes `address` to the data directory's file `name` (or, with None, removes
    /// it), durably.
    fn write_file(&self, name: &str, address: Option<&str>) -> std::io::Result<()> {
        let path = self.data_dir.join(name);
        match address {
            Some(address) => {
                let temp = self.data_dir.join(format!("{name}.tmp"));
                let mut file = std::fs::File::create(&temp)?;
                std::io::Write::write_all(&mut file, format!("{address}\n").as_bytes())?;
                file.sync_all()?;
                std::fs::rename(&temp, &path)?;
            }
            None => match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            },
        }
        std::fs::File::open(&self.data_dir)?.sync_all()
    }

    /// Whether this replica's copy is consistent with its primary's history (it
    /// reached a point the primary streamed from); None when it follows no one.
    pub fn consistent(&self) -> Option<bool> {
        let shared = self.shared.get()?.upgrade()?;
        let store = shared.store();
        self.following
            .lock()
            .as_ref()
            .map(|follower| follower.consistent(store))
    }

    /// Where this node's replicas are told to go as its streams end: the node a
    /// `failover to` handed its role to.
    pub(crate) fn moved_to(&self) -> Option<String> {
        self.moved_to.lock().clone()
    }

    /// The primary this node follows, if it is a replica.
    pub fn primary(&self) -> Option<String> {
        self.following
            .lock()
            .as_ref()
            .map(replica::Follower::primary)
    }

    /// Starts following `primary` (`host:port`); the store must already be read-only.
    pub fn follow(&self, primary: String) -> std::io::Result<()> {
        let shared = self
            .shared
            .get()
            .and_then(std::sync::Weak::upgrade)
            .ok_or_else(|| std::io::Error::other("the server is stopping"))?;
        let runtime = self
            .runtime
            .get()
            .ok_or_else(|| std::io::Error::other("replication has no runtime"))?;
        self.remember(Some(&primary))?;
        let follower = replica::Follower::start(shared, runtime, primary);
        *self.following.lock() = Some(follower);
        Ok(())
    }

    /// Makes this node a replica of `primary`: it stops following anyone else and
    /// fencing anyone, refuses changes, and follows. Nothing to do if it follows
    /// `primary` already.
    pub fn become_replica(&self, shared: &dyn Node, primary: String) -> std::io::Result<()> {
        let _role = self.role.lock();
        if shared.store().is_read_only() && self.primary().as_deref() == Some(primary.as_str()) {
            return Ok(());
        }
        self.stop_following();
        self.stop_fencing();
        self.forget_fencing()?;
        shared.store().set_read_only(Some(primary.clone()));
        self.follow(primary)
    }

    /// Starts telling `old_primary` about this node's epoch (`fence.rs`), and
    /// remembers to go on after a restart.
    pub fn start_fencing(&self, old_primary: String) -> std::io::Result<()> {
        let shared = self
            .shared
            .get()
            .and_then(std::sync::Weak::upgrade)
            .ok_or_else(|| std::io::Error::other("the server is stopping"))?;
        self.stop_fencing();
        self.write_file(fence::FILE, Some(&old_primary))?;
        *self.fencer.lock() = Some(fence::Fencer::start(shared, old_primary)?);
        Ok(())
    }

    fn stop_fencing(&self) {
        let fencer = self.fencer.lock().take();
        if let Some(fencer) = fencer {
            fencer.stop();
        }
    }

    /// Forgets the old primary being fenced: it answered, or this node follows
    /// another.
    pub(crate) fn forget_fencing(&self) -> std::io::Result<()> {
        self.write_file(fence::FILE, None)
    }

    /// Stops following: no copy is applied after this returns.
    pub fn stop_following(&self) {
        let follower = self.following.lock().take();
        if let Some(follower) = follower {
            follower.stop();
        }
    }

    pub(crate) fn add_link(&self, link: Arc<primary::Link>) -> u64 {
        let n = self.next_link.fetch_add(1, Ordering::Relaxed);
        self.links.lock().insert(n, link);
        self.confirm();
        n
    }

    pub(crate) fn remove_link(&self, n: u64) {
        self.links.lock().remove(&n);
        self.confirm();
    }

    /// Publishes what the connected replicas confirmed, after a link came, went, or
    /// acknowledged more. A backup's copy is not a replica: it counts for no change
    /// that waits for replicas.
    pub(crate) fn confirm(&self) {
        let links = self.links.lock();
        let held = links
            .values()
            .filter(|link| link.purpose == primary::Purpose::Replica)
            .map(|link| link.acked_lsn.load(Ordering::Acquire))
            .collect();
        // Under the links' lock, so two publishers cannot overtake each other.
        self.confirmations.publish(held);
    }

    /// At shutdown, once the node's `stopping` is set: stops the follower and the
    /// fencer, and waits up to [`STREAMS_END_WITHIN`] for the streams to replicas and
    /// backups to tell their peers that this node is stopping (a `Bye`, which a
    /// replica logs and shows as its `primary_last_error`).
    pub fn shutdown(&self) {
        self.stop_following();
        self.stop_fencing();
        self.confirmations.stop_lingering();
        let deadline = std::time::Instant::now() + STREAMS_END_WITHIN;
        while !self.links.lock().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Replication {
    /// Makes this node a primary under a new epoch of its history (`replicaof no
    /// one`, a cluster's election): it stops following, and takes changes, until
    /// `until` if given (a cluster primary's lease).
    pub fn promote(
        &self,
        shared: &dyn Node,
        until: Option<std::time::Instant>,
    ) -> Result<(), ReplicationError> {
        let _role = self.role.lock();
        self.stop_following();
        *self.moved_to.lock() = None;
        // A new epoch: the other replicas of the old primary follow this node from
        // their positions, and the old primary, coming back, finds it is behind.
        shared.store().begin_epoch()?;
        self.remember(None)?;
        shared.store().set_writable_until(until);
        shared.store().set_read_only(None);
        if let Err(e) = shared.tables().promoted() {
            tracing::warn!("finishing a table change after promotion: {e}");
        }
        tracing::info!(
            "now a primary (epoch {})",
            shared.store().history().current().number
        );
        Ok(())
    }
}

/// `replicaof <host> <port>` or `replicaof no one`.
pub fn replicaof(shared: &dyn Node, mut arguments: Tokens<'_>, out: &mut Vec<u8>) {
    let (Some(first), Some(second), None) = (arguments.next(), arguments.next(), arguments.next())
    else {
        out.extend_from_slice(
            b"CLIENT_ERROR usage: replicaof <host> <port> | replicaof no one\r\n",
        );
        return;
    };
    let replication = &shared.replication();
    if first.eq_ignore_ascii_case(b"no") && second.eq_ignore_ascii_case(b"one") {
        let Some(old_primary) = replication.primary() else {
            out.extend_from_slice(b"OK\r\n");
            return;
        };
        match replication.promote(shared, None) {
            Ok(()) => {
                // The old primary, wherever it is, learns of the new epoch once it
                // can be reached, and follows.
                if let Err(e) = replication.start_fencing(old_primary.clone()) {
                    tracing::warn!("cannot fence {old_primary}: {e}");
                }
                out.extend_from_slice(b"OK\r\n");
            }
            Err(e) => {
                out.extend_from_slice(format!("SERVER_ERROR promotion failed: {e}\r\n").as_bytes());
            }
        }
        return;
    }
    let port = std::str::from_utf8(second)
        .ok()
        .and_then(|p| p.parse::<u16>().ok());
    let (Ok(host), Some(port)) = (std::str::from_utf8(first), port) else {
        out.extend_from_slice(b"CLIENT_ERROR bad host or port\r\n");
        return;
    };
    let primary = format!("{host}:{port}");
    if replication.primary().as_deref() == Some(primary.as_str()) {
        out.extend_from_slice(b"OK\r\n");
        return;
    }
    match replication.become_replica(shared, primary) {
        Ok(()) => out.extend_from_slice(b"OK\r\n"),
        Err(e) => out.extend_from_slice(format!("SERVER_ERROR {e}\r\n").as_bytes()),
    }
}

/// `stats replication`: the node's role and position, and each link's.
pub fn write_stats(shared: &dyn Node, out: &mut Vec<u8>) {
    let store = &shared.store();
    let stat = |out: &mut Vec<u8>, name: &str, value: &dyn std::fmt::Display| {
        out.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes());
    };
    let replication = &shared.replication();
    let history = store.history();
    let following = replication.following.lock();
    stat(
        out,
        "role",
        &if following.is_some() {
            "replica"
        } else if store.is_read_only() {
            // A cluster's node between primaries: neither follows nor takes changes.
            "candidate"
        } else {
            "primary"
        },
    );
    stat(out, "history_id", &format!("{:032x}", history.id));
    stat(out, "epoch", &history.current().number);
    stat(out, "log_lsn", &store.appended_lsn());
    stat(out, "synced_lsn", &store.synced_lsn());
    if let Some(follower) = following.as_ref() {
        follower.write_stats(store, out);
    }
    drop(following);
    if let Some(fencer) = replication.fencer.lock().as_ref() {
        if !fencer.is_done() {
            stat(out, "fencing", &fencer.target);
        }
    }
    // Counting a link's lag reads the log: not under the lock changes wait on.
    let links = replication.links();
    stat(out, "connected_replicas", &links.len());
    for (i, link) in links.iter().enumerate() {
        stat(out, &format!("replica{i}"), &link.describe(store));
    }
    let backups = replication.streams(primary::Purpose::Backup);
    stat(out, "backups_copying", &backups.len());
    for (i, link) in backups.iter().enumerate() {
        stat(out, &format!("backup{i}"), &link.describe(store));
    }
    let counted = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let settings = &replication.settings;
    for (name, value) in [
        ("partial_syncs_served", counted(&replication.partial_syncs)),
        ("full_syncs_served", counted(&replication.full_syncs)),
        ("min_sync_replicas", u64::from(settings.min_sync_replicas)),
        ("sync_refusals", counted(&replication.sync_refusals)),
        ("sync_timeouts", counted(&replication.sync_timeouts)),
        ("replica_backlog_mib", settings.replica_backlog_mib),
        ("replica_linger_ms", settings.replica_linger_ms),
        ("backlog_drops", counted(&replication.backlog_drops)),
    ] {
        stat(out, name, &value);
    }
    let (failover_state, last_failover) = replication.failover.shown();
    stat(out, "failover_state", &failover_state);
    stat(out, "last_failover", &last_failover);
    out.extend_from_slice(b"END\r\n");
}

#[cfg(test)]
mod tests {
    use super::{Replication, Settings};

    #[test]
    fn the_login_parts_are_those_of_the_text_login() {
        let login = b"set kura-login 0 0 12\r\nann secret!x\r\n".to_vec();
        let replication = Replication::new(
            std::path::Path::new("."),
            Some(login),
            None,
            Settings::default(),
        );
        assert_eq!(
            replication.login_parts(),
            Some((&b"ann"[..], &b"secret!x"[..]))
        );
        let none = Replication::new(std::path::Path::new("."), None, None, Settings::default());
        assert_eq!(none.login_parts(), None);
    }
}
