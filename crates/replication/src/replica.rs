//! The replica's side: a task that connects to the primary, asks for the log from
//! this node's position, applies what comes (`Store::apply_copied`), and reconnects
//! after anything (a cut link, a restarted primary) with a short backoff. It runs on
//! the server's main runtime; what it applies is applied on the runtime's blocking
//! threads, and the same task tells the primary what is on this node's disk.
//!
//! One connection's work is [`session`], which needs only the tables over the store
//! the copies go to ([`Session`]): `kura backup` runs it too, on a store of its own,
//! until the copy holds the log up to the point it wants.
//!
//! Invariants: the store is read-only for as long as a follower exists, so the log
//! grows only by copies; stopping the follower waits for a copy being applied and
//! lets no other begin, so nothing is applied after `replicaof no one` has promoted
//! the node.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_engine::{Epoch, History, Store};
use kura_protocol::replication::{decode, encode, Frame, Purpose, Replicate, Start};
use kura_tables::Tables;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::socket;
use super::ReplicationError;
use crate::synced::Synced;
use crate::Node;

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

/// A follower's stop, or a backup's: once told, it waits for a copy being applied and
/// lets no other begin, and wakes the task so that it ends.
pub struct Stop {
    /// Held while a copy is applied; true once stopped.
    stopped: Mutex<bool>,
    told: watch::Sender<bool>,
    /// Taken before a copy is handed to a blocking thread and let go once it is
    /// applied: a session cut off while its last copy is still being applied (its
    /// acknowledgements failed) leaves it to finish, and the next session waits for
    /// it before it reads where the log ends.
    applier: Arc<tokio::sync::Mutex<()>>,
}

impl Stop {
    pub fn new() -> Arc<Stop> {
        Arc::new(Stop {
            stopped: Mutex::new(false),
            told: watch::Sender::new(false),
            applier: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// Stops: returns once no copy is being applied, and none will be.
    pub fn stop(&self) {
        *self.stopped.lock() = true;
        self.told.send_replace(true);
    }

    pub fn is_stopped(&self) -> bool {
        *self.told.borrow()
    }

    /// Resolves once stopped.
    async fn stopped(&self) {
        let _ = self.told.subscribe().wait_for(|&stopped| stopped).await;
    }

    /// Resolves once no copy handed to a blocking thread is still to be applied.
    async fn settled(&self) {
        drop(self.applier.lock().await);
    }

    /// Runs `apply` unless stopped, and keeps [`Stop::stop`] waiting until it is done.
    fn applying<R>(&self, apply: impl FnOnce() -> R) -> Option<R> {
        let stopped = self.stopped.lock();
        (!*stopped).then(apply)
    }
}

/// The task following a primary.
pub struct Follower {
    /// Whom it follows: the primary it was started on, or the one that primary
    /// handed over to.
    primary: Arc<Mutex<String>>,
    stop: Arc<Stop>,
    state: Arc<LinkState>,
}

impl Follower {
    /// Starts following `primary` on `runtime`.
    pub fn start(
        shared: Arc<dyn Node>,
        runtime: &tokio::runtime::Handle,
        primary: String,
    ) -> Follower {
        let stop = Stop::new();
        let state = Arc::new(LinkState::default());
        let primary = Arc::new(Mutex::new(primary));
        runtime.spawn({
            let (stop, state, primary) =
                (Arc::clone(&stop), Arc::clone(&state), Arc::clone(&primary));
            async move { follow(&shared, &primary, &stop, &state).await }
        });
        Follower {
            primary,
            stop,
            state,
        }
    }

    /// Whom it follows now.
    pub fn primary(&self) -> String {
        self.primary.lock().clone()
    }

    /// Stops following: once this returns, nothing more is applied. The task ends
    /// on its own, its connection with it.
    pub fn stop(self) {
        self.stop.stop();
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
async fn follow(
    shared: &Arc<dyn Node>,
    following: &Mutex<String>,
    stop: &Arc<Stop>,
    state: &Arc<LinkState>,
) {
    let mut backoff = BACKOFF_MIN;
    while !stop.is_stopped() {
        let primary = following.lock().clone();
        let primary = primary.as_str();
        state.link.store(LINK_CONNECTING, Ordering::Relaxed);
        let started = Instant::now();
        let copying = Session {
            tables: shared.tables(),
            login: shared.replication().login.as_deref(),
            tls: shared.replication().tls(),
            purpose: Purpose::Replica,
            until_lsn: None,
            synced: shared.synced(),
        };
        let ended = tokio::select! {
            ended = session(&copying, primary, stop, state) => ended,
            () = stop.stopped() => Ok(()),
        };
        state.link.store(LINK_CONNECTING, Ordering::Relaxed);
        if stop.is_stopped() {
            break;
        }
        if let Err(e) = ended {
            if shared.verbosity() > 0 {
                tracing::warn!("following {primary}: {e}");
            }
            *state.last_error.lock() = e.to_string();
            match e {
                ReplicationError::HandedOver(to) if !is_me(&**shared, &to) => {
                    // A planned failover: the new primary holds all of the old one's
                    // log, so this node goes on from its position there.
                    tracing::info!("{primary} handed over to {to}; following it");
                    if let Err(e) = shared.replication().remember(Some(&to)) {
                        tracing::warn!("remembering the new primary {to}: {e}");
                    }
                    shared.store().set_read_only(Some(to.clone()));
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
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stop.stopped() => break,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Whether `address` names this node (its listening or advertised address).
fn is_me(shared: &dyn Node, address: &str) -> bool {
    address == shared.listen_addr().to_string()
        || shared.replication().settings.advertise.as_deref() == Some(address)
}

/// What one connection to a primary works with: the tables over the store the copies
/// go to (read-only, a replica's or a backup's), the login it sends first, what it
/// asks the stream for, where it stops, and the store's synced LSN, which it confirms.
pub struct Session<'a> {
    pub tables: &'a Arc<Tables>,
    pub login: Option<&'a [u8]>,
    /// TLS toward the primary (`--tls-replication`), or plain TCP.
    pub tls: Option<&'a dyn crate::ClientTls>,
    pub purpose: Purpose,
    /// Stop once the store holds the log up to here (and a full copy is consistent);
    /// None: until the link fails or the follower stops.
    pub until_lsn: Option<u64>,
    /// Fed by the store's `Options::on_synced`.
    pub synced: &'a Synced,
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

/// One connection to the primary, until it fails, `stop` is told, or the store holds
/// what [`Session::until_lsn`] asks for (the only way it returns Ok unstopped).
pub async fn session(
    copying: &Session<'_>,
    primary: &str,
    stop: &Arc<Stop>,
    state: &Arc<LinkState>,
) -> Result<(), ReplicationError> {
    let store = copying.tables.store();
    // A copy the last session left being applied moves the log's end.
    stop.settled().await;
    let mut stream = socket::connect_stream(primary, copying.tls, super::CONNECT_TIMEOUT).await?;
    socket::log_in_stream(&mut stream, copying.login).await?;
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
    stream.write_all(request.line().as_bytes()).await?;
    let (reader, writer) = tokio::io::split(stream);
    // The acknowledgements begin once the primary has said where the stream starts.
    let greeted = watch::Sender::new(false);
    tokio::select! {
        ended = receive(copying, reader, stop, state, &greeted) => ended,
        ended = send_acks(writer, store, copying.synced, &greeted) => ended,
    }
}

/// Reads the primary's frames and applies them, until the stream ends, fails, or
/// holds what the session wants.
async fn receive(
    copying: &Session<'_>,
    mut reader: impl AsyncRead + Unpin,
    stop: &Arc<Stop>,
    state: &Arc<LinkState>,
    greeted: &watch::Sender<bool>,
) -> Result<(), ReplicationError> {
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 256 << 10];
    let mut applied = Applied::default();
    loop {
        let n = match tokio::time::timeout(SILENT_LIMIT, reader.read(&mut chunk)).await {
            Ok(read) => read?,
            Err(_) => return Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
        };
        if n == 0 {
            return Err(ReplicationError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        *state.last_heard.lock() = Some(Instant::now());
        if !applied.greeted && !buf.is_empty() && buf[0] != b'H' {
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
        // Applying may wait for the disk (a segment's roll, a rewind): it runs on a
        // blocking thread, under the stop's lock.
        let was_greeted = applied.greeted;
        let (tables, stop_, state_) = (
            Arc::clone(copying.tables),
            Arc::clone(stop),
            Arc::clone(state),
        );
        let applier = Arc::clone(&stop.applier).lock_owned().await;
        let ran = tokio::task::spawn_blocking(move || {
            let result = stop_.applying(|| apply_frames(&tables, &state_, &buf, &mut applied));
            drop(applier);
            (buf, applied, result)
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
        let result;
        (buf, applied, result) = ran;
        let Some(used) = result.transpose()? else {
            return Ok(());
        };
        buf.drain(..used);
        if applied.greeted && !was_greeted {
            greeted.send_replace(true);
        }
        if stop.is_stopped() || (applied.greeted && copying.is_done(state)) {
            return Ok(());
        }
    }
}

/// What a session has applied so far beyond the store itself.
#[derive(Default)]
struct Applied {
    greeted: bool,
    /// Segments the primary removed, to go once this log holds the copies that made
    /// their removal possible: (oldest kept, after LSN).
    pending_trims: Vec<(u64, u64)>,
}

/// Applies the whole frames at the start of `buf`; returns the bytes they took.
fn apply_frames(
    tables: &Tables,
    state: &LinkState,
    buf: &[u8],
    applied: &mut Applied,
) -> Result<usize, ReplicationError> {
    let store = tables.store();
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
                applied.greeted = true;
            }
            _ if !applied.greeted => {
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
            Frame::Trim { oldest, after_lsn } => applied.pending_trims.push((oldest, after_lsn)),
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
            Frame::Ack { .. } => return Err(ReplicationError::Unexpected("an acknowledgement")),
            Frame::HandOff { .. } => return Err(ReplicationError::Unexpected("a hand-off")),
        }
    }
    let end = store.appended_lsn();
    if let Some(oldest) = applied
        .pending_trims
        .iter()
        .filter(|&&(_, after)| after <= end)
        .map(|&(oldest, _)| oldest)
        .max()
    {
        store.trim_log(oldest)?;
        applied.pending_trims.retain(|&(_, after)| after > end);
    }
    Ok(used)
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

/// Tells the primary what is on this node's disk, once the stream has begun: as soon
/// as more is, and at least every [`ACK_EVERY`]. Ends only when a write fails.
async fn send_acks(
    mut writer: impl AsyncWrite + Unpin,
    store: &Store,
    synced: &Synced,
    greeted: &watch::Sender<bool>,
) -> Result<(), ReplicationError> {
    let _ = greeted.subscribe().wait_for(|&greeted| greeted).await;
    let mut synced = synced.subscribe();
    let mut sent = u64::MAX;
    let mut last = Instant::now();
    let mut out = Vec::with_capacity(16);
    loop {
        let now = store.synced_lsn();
        if now != sent || last.elapsed() >= ACK_EVERY {
            out.clear();
            encode(&Frame::Ack { synced_lsn: now }, &mut out);
            writer.write_all(&out).await?;
            sent = now;
            last = Instant::now();
        }
        crate::synced::synced_past(&mut synced, now, ACK_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::Stop;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_stopped_follower_applies_nothing_more() {
        let stop = Stop::new();
        assert_eq!(stop.applying(|| 1), Some(1));
        assert!(!stop.is_stopped());
        stop.stop();
        assert!(stop.is_stopped());
        assert_eq!(stop.applying(|| 2), None);
    }

    #[test]
    fn stopping_waits_for_the_copy_being_applied() {
        let stop = Stop::new();
        let (began, applied) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let applying = std::thread::spawn({
            let (stop, began, applied) =
                (Arc::clone(&stop), Arc::clone(&began), Arc::clone(&applied));
            move || {
                stop.applying(|| {
                    began.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(50));
                    applied.store(true, Ordering::SeqCst);
                })
            }
        });
        while !began.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        stop.stop();
        // `stop` returned: the copy under way is applied, and no other begins.
        assert!(applied.load(Ordering::SeqCst));
        assert_eq!(applying.join().ok().flatten(), Some(()));
        assert_eq!(stop.applying(|| ()), None);
    }

    #[tokio::test]
    async fn a_new_session_waits_for_the_copy_the_last_one_left_applying() {
        let stop = Stop::new();
        let applied = Arc::new(AtomicBool::new(false));
        // As `receive` hands a copy over: the applier taken first, let go once applied.
        let applier = Arc::clone(&stop.applier).lock_owned().await;
        let applying = tokio::task::spawn_blocking({
            let applied = Arc::clone(&applied);
            move || {
                std::thread::sleep(Duration::from_millis(50));
                applied.store(true, Ordering::SeqCst);
                drop(applier);
            }
        });
        stop.settled().await;
        assert!(applied.load(Ordering::SeqCst));
        assert!(applying.await.is_ok());
    }
}
