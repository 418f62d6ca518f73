//! The primary's side: one replica's stream. The connection that sent `replicate`
//! becomes the stream, on the same task of the worker that accepted it (TLS or not):
//! it reads the log from disk through a cursor (so a replica that falls behind holds
//! segments on disk, never memory; a read far behind goes to the runtime's blocking
//! threads) and writes frames, and reads the replica's acknowledgements beside.
//!
//! Where the stream starts: from the replica's position when the replica's log is a
//! prefix of this one (same history, an epoch this log shares up to that position)
//! and the log still holds it; otherwise a full copy from the oldest segment, which
//! holds every live version (compaction copies them forward before it removes one).
//!
//! Invariants: only records on this node's disk are sent (`Store::synced_lsn`), so no
//! replica holds a record a crash of the primary could take back; a trim is sent
//! with the LSN by which the replica holds the copies that made it possible.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_protocol::replication::{decode, encode, Frame, HandOffStep, Start};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::Node;

/// About how many bytes of records one read of the log sends.
const READ_BYTES: u64 = 256 << 10;

/// How often a stream with nothing to send says where the log is.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// A replica gone quiet this long (no acknowledgement) is cut off; it reconnects.
const SILENT_LIMIT: Duration = Duration::from_secs(10);

/// The longest a stream with nothing to send waits for the log before it looks
/// again at whether it should end.
const IDLE_WAIT: Duration = Duration::from_millis(200);

/// What a replica (or a backup) asked for: `replicate`'s arguments, which
/// `kura_protocol::replication` reads.
pub use kura_protocol::replication::{Purpose, Replicate as Request};

/// One replica's stream, as `stats replication` shows it.
pub struct Link {
    pub addr: String,
    pub purpose: Purpose,
    /// Whether the stream is a full copy not yet past the log's end when it began.
    pub copying: AtomicBool,
    pub consistent_lsn: AtomicU64,
    /// What the replica confirmed is on its disk.
    pub acked_lsn: AtomicU64,
    /// How far the stream has sent.
    pub sent_lsn: AtomicU64,
    /// Hand-off frames waiting to go (a `move` stream's), encoded.
    outbox: parking_lot::Mutex<Vec<u8>>,
    outbox_ready: tokio::sync::Notify,
    /// Told when the replica's acknowledged position rises.
    pub acked: tokio::sync::Notify,
}

impl Link {
    /// Sends a hand-off frame on the stream, after what it is sending now.
    pub fn send_hand_off(&self, step: HandOffStep, lsn: u64, shard: &str) {
        encode(
            &Frame::HandOff { step, lsn, shard },
            &mut self.outbox.lock(),
        );
        self.outbox_ready.notify_one();
    }

    /// Whether the replica is in a full copy it has not yet confirmed to its end.
    fn is_copying(&self) -> bool {
        self.copying.load(Ordering::Relaxed)
            && self.acked_lsn.load(Ordering::Relaxed) < self.consistent_lsn.load(Ordering::Relaxed)
    }

    /// The link as `stats replication` shows it: the replica's confirmed position,
    /// how far the stream has sent, and the lag behind this node's synced LSN in bytes
    /// and in changes (a record, or a batch of them), counted from the log.
    pub fn describe(&self, store: &kura_engine::Store) -> String {
        let synced = store.synced_lsn();
        let acked = self.acked_lsn.load(Ordering::Relaxed);
        let sent = self.sent_lsn.load(Ordering::Relaxed);
        let copying = self.is_copying();
        let records = match (copying, changes_between(store, acked, synced)) {
            (false, Some((n, true))) => n.to_string(),
            (false, Some((n, false))) => format!(">{n}"),
            (true, _) | (_, None) => "-".to_string(),
        };
        format!(
            "addr={},state={},acked_lsn={acked},sent_lsn={sent},lag_bytes={},lag_records={records}",
            self.addr,
            if copying { "full_sync" } else { "streaming" },
            synced.saturating_sub(acked)
        )
    }
}

/// How much of the log [`changes_between`] reads for one stat line.
const LAG_COUNT_BYTES: u64 = 64 << 20;

/// The changes (a record, or a batch as one) in the log between LSNs `from` and
/// `until`, and whether that is all of them: past [`LAG_COUNT_BYTES`] the count
/// stops. None when the log no longer holds `from`.
fn changes_between(store: &kura_engine::Store, from: u64, until: u64) -> Option<(u64, bool)> {
    if from >= until {
        return Some((0, true));
    }
    let mut cursor = store.follow_log(from)?;
    let (mut changes, mut in_batch) = (0u64, 0u32);
    store
        .read_log(&mut cursor, until, LAG_COUNT_BYTES, |_, bytes, _| {
            if in_batch > 0 {
                in_batch -= 1;
                return;
            }
            changes += 1;
            if let kura_engine::record::Decoded::Record(
                kura_engine::record::Record::Batch { count, .. },
                _,
            ) = kura_engine::record::decode_unverified(bytes)
            {
                in_batch = count;
            }
        })
        .ok()?;
    Some((changes, cursor.lsn() >= until))
}

/// `--replica-backlog-mib` in bytes.
fn backlog_bytes(shared: &dyn Node) -> u64 {
    shared
        .replication()
        .settings
        .replica_backlog_mib
        .saturating_mul(1 << 20)
}

/// Serves the replica on `stream` (the connection that sent `request`), on the task
/// that ran that connection, until the stream ends.
pub async fn serve<S: AsyncRead + AsyncWrite + Unpin + Send>(
    shared: Arc<dyn Node>,
    stream: S,
    peer: String,
    request: Request,
) {
    let link = Arc::new(Link {
        addr: peer,
        purpose: request.purpose,
        copying: AtomicBool::new(false),
        consistent_lsn: AtomicU64::new(0),
        // Nothing confirmed until the replica says what is on its disk: the position
        // it asked from may not be synced there yet (its first ack comes at once).
        acked_lsn: AtomicU64::new(0),
        sent_lsn: AtomicU64::new(request.lsn),
        outbox: parking_lot::Mutex::new(Vec::new()),
        outbox_ready: tokio::sync::Notify::new(),
        acked: tokio::sync::Notify::new(),
    });
    let n = shared.replication().add_link(Arc::clone(&link));
    let (reader, writer) = tokio::io::split(stream);
    // The stream ends when either side does: the replica gone quiet or gone, or the
    // stream said goodbye (or failed).
    let ended = tokio::select! {
        ended = stream_log(&shared, writer, request, &link) => ended,
        () = read_acks(reader, &link, &shared) => Ok(()),
    };
    if let Err(e) = ended {
        if shared.verbosity() > 0 {
            tracing::warn!("replica {}: {e}", link.addr);
        }
    }
    shared.replication().remove_link(n);
}

/// Writes `out` whole, or fails once the replica has read nothing for
/// [`SILENT_LIMIT`]: a replica that stops reading is cut off, rather than holding its
/// cursor's segments for ever.
async fn send(stream: &mut (impl AsyncWrite + Unpin), out: &[u8]) -> std::io::Result<()> {
    match tokio::time::timeout(SILENT_LIMIT, stream.write_all(out)).await {
        Ok(written) => written,
        Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut)),
    }
}

/// How far behind the log's synced end a stream reads on its own task: nearer the
/// end the records were written lately and are in the page cache; further back the
/// read goes to the runtime's blocking threads, so that a disk read holds up no
/// connection of the worker.
const READ_IN_PLACE: u64 = 4 << 20;

/// Records of one segment in a row: the segment, the LSN the run starts at, its bytes.
type Run = (u64, u64, Vec<u8>);

/// The records after `cursor` up to `until`, about [`READ_BYTES`] of them, as runs,
/// and the bytes read.
fn read_runs(
    store: &kura_engine::Store,
    cursor: &mut kura_engine::Cursor,
    until: u64,
) -> Result<(u64, Vec<Run>), kura_engine::Error> {
    let mut run: Option<Run> = None;
    let mut runs = Vec::new();
    let read = store.read_log(cursor, until, READ_BYTES, |segment, bytes, lsn| {
        match run.as_mut() {
            Some((s, _, bytes_so_far)) if *s == segment => {
                bytes_so_far.extend_from_slice(bytes);
            }
            _ => {
                runs.extend(run.take());
                run = Some((segment, lsn - bytes.len() as u64, bytes.to_vec()));
            }
        }
    })?;
    runs.extend(run.take());
    Ok((read, runs))
}

async fn stream_log(
    shared: &Arc<dyn Node>,
    mut stream: impl AsyncWrite + Unpin,
    request: Request,
    link: &Arc<Link>,
) -> std::io::Result<()> {
    let store = &shared.store();
    let history = store.history();
    if request.history_id == history.id && request.epoch > history.current().number {
        // The replica has seen a newer epoch of this history: this node is an old
        // primary, and a full copy from it would destroy the newer history's records.
        let refusal = format!(
            "SERVER_ERROR this node is in epoch {} of its history, the replica in a newer one ({}); follow the newer primary\r\n",
            history.current().number,
            request.epoch
        );
        return send(&mut stream, refusal.as_bytes()).await;
    }
    // The replica's log shares this one's history up to `shared_lsn`: all of it (a
    // prefix), or up to where this history's next epoch began, past which the replica
    // holds records this log never had and cuts them (if its floor allows). It goes
    // on from there, if this log still holds that position.
    // A replica further behind than the backlog allows gets a full copy, as if
    // its position were compacted away.
    let backlog = backlog_bytes(&**shared);
    let partial = (request.history_id == history.id)
        .then(|| history.shared_until(request.epoch, request.tag, request.lsn))
        .flatten()
        .filter(|&shared_lsn| {
            let synced = store.synced_lsn();
            (shared_lsn == request.lsn || shared_lsn >= request.floor)
                && shared_lsn <= synced
                && synced - shared_lsn <= backlog
        })
        .and_then(|lsn| store.follow_log(lsn));
    let (cursor, start) = match partial {
        Some(cursor) => {
            let lsn = cursor.lsn();
            shared
                .replication()
                .partial_syncs
                .fetch_add(1, Ordering::Relaxed);
            (cursor, Start::Partial { lsn })
        }
        None => {
            let cursor = store.follow_log_from_oldest().ok_or_else(|| {
                std::io::Error::other("the log's oldest segment has no known start")
            })?;
            let consistent_lsn = store.appended_lsn();
            link.copying.store(true, Ordering::Relaxed);
            link.consistent_lsn.store(consistent_lsn, Ordering::Relaxed);
            link.acked_lsn.store(cursor.lsn(), Ordering::Release);
            shared
                .replication()
                .full_syncs
                .fetch_add(1, Ordering::Relaxed);
            let start = Start::Full {
                segment: cursor.segment(),
                start_lsn: cursor.lsn(),
                consistent_lsn,
            };
            (cursor, start)
        }
    };
    shared.replication().confirm();
    if shared.verbosity() > 0 {
        tracing::info!("replica {} follows from {start:?}", link.addr);
    }
    let mut out = Vec::with_capacity(READ_BYTES as usize + 4096);
    encode(
        &Frame::Hello {
            history_id: history.id,
            epochs: history
                .epochs
                .iter()
                .map(|e| (e.number, e.start_lsn, e.tag))
                .collect(),
            start,
        },
        &mut out,
    );
    send(&mut stream, &out).await?;
    let mut synced = shared.synced().subscribe();
    // The cursor goes to a blocking thread and back for a read far behind.
    let mut cursor = Some(cursor);
    // The replica may hold segments this log removed while it was away.
    let mut trimmed = 0;
    let mut last_progress = Instant::now();
    loop {
        let stopping = shared.stopping();
        if stopping || store.is_read_only() {
            out.clear();
            let moved_to = shared.replication().moved_to().filter(|_| !stopping);
            match &moved_to {
                // A planned failover: the replica follows the new primary.
                Some(to) => encode(&Frame::Moved { to }, &mut out),
                None if stopping => encode(
                    &Frame::Bye {
                        reason: "the primary is shutting down",
                    },
                    &mut out,
                ),
                None => encode(
                    &Frame::Bye {
                        reason: "the primary became a replica",
                    },
                    &mut out,
                ),
            }
            let _ = send(&mut stream, &out).await;
            return Ok(());
        }
        let Some(mut at) = cursor.take() else {
            return Err(std::io::Error::other("the stream lost its cursor"));
        };
        // The oldest segment before the watermark: its removal was synced after the
        // copies that made it possible, so they are below `until`.
        let oldest = store.oldest_segment();
        let until = store.synced_lsn();
        // A replica too far behind holds segments compaction would remove: its stream
        // ends (a full copy in progress is let be).
        if until.saturating_sub(at.lsn()) > backlog && !link.is_copying() {
            shared
                .replication()
                .backlog_drops
                .fetch_add(1, Ordering::Relaxed);
            out.clear();
            let reason = format!(
                "the replica fell more than --replica-backlog-mib {} behind",
                shared.replication().settings.replica_backlog_mib
            );
            encode(&Frame::Bye { reason: &reason }, &mut out);
            let _ = send(&mut stream, &out).await;
            return Ok(());
        }
        let (read, runs) = if until.saturating_sub(at.lsn()) <= READ_IN_PLACE {
            let got = read_runs(store, &mut at, until);
            cursor = Some(at);
            got
        } else {
            let store = Arc::clone(store);
            let (back, got) = tokio::task::spawn_blocking(move || {
                let got = read_runs(&store, &mut at, until);
                (at, got)
            })
            .await
            .map_err(std::io::Error::other)?;
            cursor = Some(back);
            got
        }
        .map_err(std::io::Error::other)?;
        let lsn = cursor.as_ref().map_or(0, |c| c.lsn());
        out.clear();
        for (segment, start_lsn, bytes) in &runs {
            encode(
                &Frame::Records {
                    segment: *segment,
                    start_lsn: *start_lsn,
                    bytes,
                },
                &mut out,
            );
        }
        if oldest > trimmed {
            encode(
                &Frame::Trim {
                    oldest,
                    after_lsn: until,
                },
                &mut out,
            );
            trimmed = oldest;
        }
        out.append(&mut link.outbox.lock());
        if last_progress.elapsed() >= PROGRESS_EVERY {
            encode(
                &Frame::Progress {
                    appended_lsn: store.appended_lsn(),
                    synced_lsn: until,
                },
                &mut out,
            );
            last_progress = Instant::now();
        }
        if !out.is_empty() {
            send(&mut stream, &out).await?;
        }
        link.sent_lsn.store(lsn, Ordering::Relaxed);
        if read == 0 {
            tokio::select! {
                () = crate::synced::synced_past(&mut synced, lsn, IDLE_WAIT) => {}
                () = link.outbox_ready.notified() => {}
            }
        } else if lsn >= until
            && shared.replication().settings.min_sync_replicas == 0
            && shared.replication().settings.replica_linger_ms > 0
        {
            // `--replica-linger-ms`: what an asynchronous replica's lag gives, against
            // a wake-up, a send, and the replica's apply, sync and acknowledgement per
            // group commit (`Confirmations::linger` ends it when a request waits).
            let linger = Duration::from_millis(shared.replication().settings.replica_linger_ms);
            shared.replication().confirmations.linger(linger).await;
        }
    }
}

/// Reads the replica's acknowledgements until it closes, sends something else, or
/// says nothing for [`SILENT_LIMIT`].
async fn read_acks(mut stream: impl AsyncRead + Unpin, link: &Arc<Link>, shared: &Arc<dyn Node>) {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    loop {
        match tokio::time::timeout(SILENT_LIMIT, stream.read(&mut chunk)).await {
            Ok(Ok(0) | Err(_)) | Err(_) => return,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
        loop {
            match decode(&buf) {
                Ok(Some((frame, len))) => {
                    match frame {
                        Frame::Ack { synced_lsn } => {
                            let before = link.acked_lsn.fetch_max(synced_lsn, Ordering::AcqRel);
                            if synced_lsn > before {
                                shared.replication().confirm();
                                link.acked.notify_waiters();
                            }
                        }
                        Frame::HandOff { step, lsn, shard } if link.purpose == Purpose::Move => {
                            Arc::clone(shared).hand_off(Arc::clone(link), step, lsn, shard);
                        }
                        _ => {}
                    }
                    buf.drain(..len);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}
