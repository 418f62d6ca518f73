//! The replica's side: a thread that connects to the primary, asks for the log from
//! this node's position, applies what comes (`Store::apply_copied`), and reconnects
//! after anything (a cut link, a restarted primary) with a short backoff. A second
//! thread per connection tells the primary what is on this node's disk.
//!
//! One connection's work is [`session`], which needs only the tables over the store
//! the copies go to ([`Session`]): `kura backup` runs it too, on a store of its own,
//! until the copy holds the log up to the point it wants.
//!
//! Invariants: the store is read-only for as long as a follower exists, so the log
//! grows only by copies; stopping the follower waits for its thread, so nothing is
//! applied after `replicaof no one` has promoted the node.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kura_engine::{Epoch, History, Store};
use kura_protocol::replication::{decode, encode, Frame, Purpose, Replicate, Start};
use kura_tables::Tables;
use parking_lot::Mutex;

use super::{ReplicationError, Socket};
use crate::server::Shared;

/// The primary says where its log is at least once a second; this long without a
/// word, the link is taken for dead.
const SILENT_LIMIT: Duration = Duration::from_secs(5);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How often the replica confirms its position when nothing new reached its disk.
const ACK_EVERY: Duration = Duration::from_secs(1);

const LINK_CONNECTING: u8 = 0;
const LINK_COPYING: u8 = 1;
const LINK_STREAMING: u8 = 2;

/// What `stats replication` shows of the link.
#[derive(Default)]
pub struct LinkState {
    link: AtomicU8,
    /// The primary's log end and synced position, as it last said.
    primary_lsn: AtomicU64,
    primary_synced_lsn: AtomicU64,
    /// A full copy is consistent from here on.
    consistent_lsn: AtomicU64,
    partial_syncs: AtomicU64,
    full_syncs: AtomicU64,
    /// Partial copies that first cut records the primary never had, and how many
    /// bytes of log they cut.
    rewinds: AtomicU64,
    rewound_bytes: AtomicU64,
    /// Whether the copy has been consistent with the primary's history: a partial
    /// copy once it streams (after any cut), a full one once it passed
    /// `consistent_lsn`. It stays so when the link goes down.
    consistent: AtomicBool,
    /// When the primary was last heard from.
    last_heard: Mutex<Option<Instant>>,
    last_error: Mutex<String>,
}

/// The thread following a primary.
pub struct Follower {
    /// Whom it follows: the primary it was started on, or the one that primary
    /// handed over to.
    primary: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    /// The connection in use, so that stopping can cut it at once.
    socket: Arc<Mutex<Option<Socket>>>,
    state: Arc<LinkState>,
    thread: JoinHandle<()>,
}

impl Follower {
    pub fn start(shared: Arc<Shared>, primary: String) -> std::io::Result<Follower> {
        let stop = Arc::new(AtomicBool::new(false));
        let socket = Arc::new(Mutex::new(None));
        let state = Arc::new(LinkState::default());
        let primary = Arc::new(Mutex::new(primary));
        let thread = {
            let (stop, socket, state) =
                (Arc::clone(&stop), Arc::clone(&socket), Arc::clone(&state));
            let primary = Arc::clone(&primary);
            std::thread::Builder::new()
                .name("kura-follower".to_string())
                .spawn(move || follow(&shared, &primary, &stop, &socket, &state))?
        };
        Ok(Follower {
            primary,
            stop,
            socket,
            state,
            thread,
        })
    }

    /// Whom it follows now.
    pub fn primary(&self) -> String {
        self.primary.lock().clone()
    }

    /// Stops following and waits for the thread.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Release);
        if let Some(socket) = self.socket.lock().as_ref() {
            socket.shutdown();
        }
        let _ = self.thread.join();
    }

    /// Whether this copy has been consistent with the primary's history.
    pub fn consistent(&self, store: &Store) -> bool {
        let s = &self.state;
        if s.consistent.load(Ordering::Acquire) {
            return true;
        }
        let link = s.link.load(Ordering::Acquire);
        let copied = link == LINK_COPYING
            && store.appended_lsn() >= s.consistent_lsn.load(Ordering::Acquire);
        if copied {
            s.consistent.store(true, Ordering::Release);
        }
        copied
    }

    pub fn write_stats(&self, store: &Store, out: &mut Vec<u8>) {
        let s = &self.state;
        let mut stat = |name: &str, value: String| {
            out.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes());
        };
        stat("primary", self.primary());
        let link = s.link.load(Ordering::Relaxed);
        let applied = store.appended_lsn();
        let copying = link == LINK_COPYING && applied < s.consistent_lsn.load(Ordering::Relaxed);
        stat(
            "primary_link",
            match link {
                LINK_CONNECTING => "down",
                _ if copying => "full_sync",
                _ => "up",
            }
            .to_string(),
        );
        let heard = s
            .last_heard
            .lock()
            .map_or(-1, |t| t.elapsed().as_secs() as i64);
        stat("primary_last_heard_secs", heard.to_string());
        stat(
            "primary_lsn",
            s.primary_lsn.load(Ordering::Relaxed).to_string(),
        );
        stat("applied_lsn", applied.to_string());
        stat(
            "lag_bytes",
            s.primary_synced_lsn
                .load(Ordering::Relaxed)
                .saturating_sub(applied)
                .to_string(),
        );
        stat(
            "partial_syncs",
            s.partial_syncs.load(Ordering::Relaxed).to_string(),
        );
        stat(
            "full_syncs",
            s.full_syncs.load(Ordering::Relaxed).to_string(),
        );
        stat("rewinds", s.rewinds.load(Ordering::Relaxed).to_string());
        stat(
            "rewound_bytes",
            s.rewound_bytes.load(Ordering::Relaxed).to_string(),
        );
        let error = s.last_error.lock().clone();
        if !error.is_empty() {
            stat("primary_last_error", error.replace([' ', '\r', '\n'], "_"));
        }
    }
}

/// Follows `primary` until told to stop: connects, streams, and after any failure
/// waits a little longer each time (up to [`BACKOFF_MAX`]) before connecting again.
fn follow(
    shared: &Arc<Shared>,
    following: &Mutex<String>,
    stop: &AtomicBool,
    socket: &Mutex<Option<Socket>>,
    state: &LinkState,
) {
    let mut backoff = BACKOFF_MIN;
    while !stop.load(Ordering::Acquire) {
        let primary = following.lock().clone();
        let primary = primary.as_str();
        state.link.store(LINK_CONNECTING, Ordering::Relaxed);
        let started = Instant::now();
        let copying = Session {
            tables: &shared.tables,
            login: shared.replication.login.as_deref(),
            tls: shared.replication.tls(),
            purpose: Purpose::Replica,
            until_lsn: None,
        };
        let ended = session(&copying, primary, stop, socket, state);
        *socket.lock() = None;
        state.link.store(LINK_CONNECTING, Ordering::Relaxed);
        if stop.load(Ordering::Acquire) {
            break;
        }
        if let Err(e) = ended {
            if shared.verbosity.load(Ordering::Relaxed) > 0 {
                tracing::warn!("following {primary}: {e}");
            }
            *state.last_error.lock() = e.to_string();
            match e {
                ReplicationError::HandedOver(to) if !is_me(shared, &to) => {
                    // A planned failover: the new primary holds all of the old one's
                    // log, so this node goes on from its position there.
                    tracing::info!("{primary} handed over to {to}; following it");
                    if let Err(e) = shared.replication.remember(Some(&to)) {
                        tracing::warn!("remembering the new primary {to}: {e}");
                    }
                    shared.store.set_read_only(Some(to.clone()));
                    *following.lock() = to;
                    backoff = BACKOFF_MIN;
                    continue;
                }
                _ => {}
            }
        }
        if started.elapsed() > BACKOFF_MAX * 4 {
            backoff = BACKOFF_MIN;
        }
        let until = Instant::now() + backoff;
        while !stop.load(Ordering::Acquire) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Whether `address` names this node (its listening or advertised address).
fn is_me(shared: &Shared, address: &str) -> bool {
    address == shared.listen_addr.to_string() || shared.config.advertise.as_deref() == Some(address)
}

/// What one connection to a primary works with: the tables over the store the copies
/// go to (read-only, a replica's or a backup's), the login it sends first, what it
/// asks the stream for, and where it stops.
pub struct Session<'a> {
    pub tables: &'a Arc<Tables>,
    pub login: Option<&'a [u8]>,
    /// TLS toward the primary (`--tls-replication`), or plain TCP.
    pub tls: Option<&'a crate::tls::Settings>,
    pub purpose: Purpose,
    /// Stop once the store holds the log up to here (and a full copy is consistent);
    /// None: until the link fails or the follower stops.
    pub until_lsn: Option<u64>,
}

impl Session<'_> {
    /// Whether the store holds all the session was asked for (once the primary has
    /// said where the stream starts: before, the store's log is not the primary's).
    fn is_done(&self, state: &LinkState) -> bool {
        self.until_lsn.is_some_and(|until| {
            let wanted = until.max(state.consistent_lsn.load(Ordering::Relaxed));
            self.tables.store().appended_lsn() >= wanted
        })
    }
}

/// One connection to the primary, until it fails, the follower stops, or the store
/// holds what [`Session::until_lsn`] asks for (the only way it returns Ok while
/// `stop` is unset).
pub fn session(
    copying: &Session<'_>,
    primary: &str,
    stop: &AtomicBool,
    socket: &Mutex<Option<Socket>>,
    state: &LinkState,
) -> Result<(), ReplicationError> {
    let tables = copying.tables;
    let store = tables.store();
    let mut stream = super::connect(primary, copying.tls)?;
    stream.set_read_timeout(Some(SILENT_LIMIT))?;
    *socket.lock() = Some(stream.try_clone()?);
    if stop.load(Ordering::Acquire) {
        return Ok(());
    }
    super::log_in(&mut stream, copying.login)?;
    // The position: the epoch this log's end is in (a rewind or a partial copy may
    // have taken a history whose newest epoch begins later), its end, and how far
    // back the log could be cut if the primary's history parted from it earlier.
    let history = store.history();
    let end = store.appended_lsn();
    let epoch = history.epoch_at(end);
    let request = Replicate {
        history_id: history.id,
        epoch: epoch.number,
        tag: epoch.tag,
        lsn: end,
        floor: store.rewind_floor(),
        purpose: copying.purpose,
    };
    stream.write_all(request.line().as_bytes())?;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 256 << 10];
    let mut pending_trims: Vec<(u64, u64)> = Vec::new();
    let mut greeted = false;
    let session_over = Arc::new(AtomicBool::new(false));
    let _end_acks = EndOnDrop(Arc::clone(&session_over));
    loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(ReplicationError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        *state.last_heard.lock() = Some(Instant::now());
        if !greeted && !buf.is_empty() && buf[0] != b'H' {
            // A text reply: the primary refused (or is not Kura).
            if let Some(end) = buf.windows(2).position(|w| w == b"\r\n") {
                let reply = String::from_utf8_lossy(&buf[..end]).into_owned();
                return Err(ReplicationError::Refused(reply));
            }
            if buf.len() > 4096 {
                return Err(ReplicationError::Refused(
                    "the primary answered something else".to_string(),
                ));
            }
            continue;
        }
        let mut used = 0;
        loop {
            let frame = match decode(&buf[used..]) {
                Ok(Some((frame, len))) => {
                    used += len;
                    frame
                }
                Ok(None) => break,
                Err(e) => return Err(e.into()),
            };
            match frame {
                Frame::Hello {
                    history_id,
                    epochs,
                    start,
                } => {
                    let history = History {
                        id: history_id,
                        epochs: epochs
                            .iter()
                            .map(|&(number, start_lsn, tag)| Epoch {
                                number,
                                start_lsn,
                                tag,
                            })
                            .collect(),
                    };
                    begin(tables, state, history, start)?;
                    greeted = true;
                    let acks = stream.try_clone()?;
                    let (store, over) = (Arc::clone(store), Arc::clone(&session_over));
                    std::thread::Builder::new()
                        .name("kura-follower-ack".to_string())
                        .spawn(move || send_acks(acks, &store, &over))?;
                }
                _ if !greeted => {
                    return Err(ReplicationError::Unexpected("a frame before its hello"))
                }
                Frame::Records {
                    segment,
                    start_lsn,
                    bytes,
                } => {
                    if segment != store.active_segment() {
                        store.start_segment(segment, start_lsn)?;
                    }
                    tables.apply_copied(bytes, start_lsn)?;
                }
                Frame::Trim { oldest, after_lsn } => pending_trims.push((oldest, after_lsn)),
                Frame::Progress {
                    appended_lsn,
                    synced_lsn,
                } => {
                    state.primary_lsn.store(appended_lsn, Ordering::Relaxed);
                    state
                        .primary_synced_lsn
                        .store(synced_lsn, Ordering::Relaxed);
                }
                Frame::Bye { reason } => return Err(ReplicationError::Ended(reason.to_string())),
                Frame::Moved { to } => return Err(ReplicationError::HandedOver(to.to_string())),
                Frame::Ack { .. } => {
                    return Err(ReplicationError::Unexpected("an acknowledgement"))
                }
            }
        }
        buf.drain(..used);
        // Segments the primary removed go once this log holds the copies that made
        // their removal possible.
        let applied = store.appended_lsn();
        if let Some(oldest) = pending_trims
            .iter()
            .filter(|&&(_, after)| after <= applied)
            .map(|&(oldest, _)| oldest)
            .max()
        {
            store.trim_log(oldest)?;
            pending_trims.retain(|&(_, after)| after > applied);
        }
        if stop.load(Ordering::Acquire) || (greeted && copying.is_done(state)) {
            return Ok(());
        }
    }
}

/// Sets the follower up for the stream the hello describes.
fn begin(
    tables: &Tables,
    state: &LinkState,
    history: History,
    start: Start,
) -> Result<(), ReplicationError> {
    let store = tables.store();
    match start {
        Start::Full {
            segment,
            start_lsn,
            consistent_lsn,
        } => {
            tables.restart_copy(segment, start_lsn, history, consistent_lsn)?;
            state
                .consistent_lsn
                .store(consistent_lsn, Ordering::Relaxed);
            state
                .primary_lsn
                .fetch_max(consistent_lsn, Ordering::Relaxed);
            state.full_syncs.fetch_add(1, Ordering::Relaxed);
            state.link.store(LINK_COPYING, Ordering::Relaxed);
        }
        Start::Partial { lsn } => {
            let end = store.appended_lsn();
            if lsn < end {
                // This log holds records the primary's history never had: they go.
                tracing::info!("cutting this log from LSN {end} back to {lsn}, where the primary's history parted from it");
                tables.rewind(lsn, history)?;
                state.rewinds.fetch_add(1, Ordering::Relaxed);
                state.rewound_bytes.fetch_add(end - lsn, Ordering::Relaxed);
            } else if lsn != end {
                return Err(ReplicationError::Gap { from: lsn, end });
            } else if store.history() != history {
                store.set_history(history)?;
            }
            state.partial_syncs.fetch_add(1, Ordering::Relaxed);
            state.link.store(LINK_STREAMING, Ordering::Relaxed);
            state.consistent.store(true, Ordering::Release);
        }
    }
    Ok(())
}

/// Sets its flag when dropped: the session's acknowledging thread stops.
struct EndOnDrop(Arc<AtomicBool>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Tells the primary what is on this node's disk: as soon as more is, and at least
/// every [`ACK_EVERY`].
fn send_acks(mut stream: Socket, store: &Store, over: &AtomicBool) {
    let mut sent = u64::MAX;
    let mut last = Instant::now();
    let mut out = Vec::with_capacity(16);
    while !over.load(Ordering::Acquire) {
        let synced = store.synced_lsn();
        if synced != sent || last.elapsed() >= ACK_EVERY {
            out.clear();
            encode(&Frame::Ack { synced_lsn: synced }, &mut out);
            if stream.write_all(&out).is_err() {
                return;
            }
            sent = synced;
            last = Instant::now();
        }
        store.wait_synced(synced.saturating_add(1), Duration::from_millis(100));
    }
}
