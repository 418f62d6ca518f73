//! A move's target: its primary copies the moving keys from the source's primary.
//!
//! T sends `replicate ... move` with its position in S's log (kept in its own store,
//! under [`super::POSITION_SPACE`]), or none: S streams its log from there, or from
//! its oldest segment (which holds every live version: compaction copies them
//! forward), as it does for a replica. T keeps the records of memcached keys whose
//! owner moves from S to T, and applies each as its own change, with the version's
//! CAS, flags and expiry, so T's replicas follow; each batch of them carries T's new
//! position in S's log, so a restart of either side goes on from there. Before a
//! copy from the oldest segment, T deletes what it holds of the moving keys (a copy
//! of an earlier, abandoned move), so that nothing S has since deleted comes back.
//!
//! Once T is close behind S's log end, it asks S to hand off (`source.rs`): S holds
//! changes to the keys and names its log's end; T applies up to there, syncs, and
//! acknowledges it; S flips the move in etcd and says so; T then serves the keys as
//! their owner and the copy ends. What comes of S's log past the hold's LSN waits
//! until the hand-off ends: S changes no moving key there while it holds, but if the
//! move flips S's purge deletes them (possibly before T reads the flip: those T
//! drops), and if S lets the hold go, the changes it then makes are T's to apply.
//!
//! A `flush_all` on S while the keys move deletes what T holds of them; a delayed one
//! (`flush_all <delay>`) is not carried (`docs/cluster.md`).

use std::collections::HashSet;
use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_cluster::{MoveProgress, MoveState, Observer};
use kura_engine::record::{self, Decoded, Record, ITEM_BINARY_KEY, ITEM_EXPLICIT_CAS, ITEM_STALE};
use kura_engine::{Change, Key, NewCas, NewItem, Space};
use kura_protocol::replication::{decode, encode, Frame, HandOffStep, Purpose, Replicate, Start};

use super::{advance, position_key, still};
use crate::server::Shared;

/// How long connecting to the source may take.
const CONNECT_WITHIN: Duration = Duration::from_secs(2);
/// How long a read of the stream waits before the copy does its other duties.
const READ_WAIT: Duration = Duration::from_millis(100);
/// How often the copy acknowledges its position (S cuts a stream silent for 10 s)
/// and records its progress in etcd.
const ACK_EVERY: Duration = Duration::from_millis(500);
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// How close behind S's synced log end T asks for the hand-off: little enough to
/// apply well within the pause.
const CLOSE_BEHIND: u64 = 64 << 10;
/// How long after S let a hand-off go T asks again.
const ASK_AGAIN_AFTER: Duration = Duration::from_millis(500);
/// The most changes one batch applies.
const BATCH: usize = 256;
/// How long the copy waits before it connects again after its stream ended.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// Where T is in S's log: S's history, the epoch (number and tag) the position is
/// in, and the LSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    history_id: u128,
    epoch: u64,
    tag: u64,
    lsn: u64,
}

impl Position {
    fn encode(&self) -> String {
        format!(
            "{:032x} {} {:016x} {}",
            self.history_id, self.epoch, self.tag, self.lsn
        )
    }

    fn decode(text: &[u8]) -> Option<Position> {
        let text = std::str::from_utf8(text).ok()?;
        let mut words = text.split_whitespace();
        Some(Position {
            history_id: u128::from_str_radix(words.next()?, 16).ok()?,
            epoch: words.next()?.parse().ok()?,
            tag: u64::from_str_radix(words.next()?, 16).ok()?,
            lsn: words.next()?.parse().ok()?,
        })
    }
}

/// Runs the copy of the move `from` → `to` (this node's shard) until it flips, the
/// move is no longer copying, or this node is no longer the primary.
pub fn copy(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    from: &str,
    to: &str,
) -> Result<(), String> {
    while still(shared, from, to, MoveState::Copying) {
        match session(shared, runtime, from, to) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => tracing::info!("cluster: copying from {from}: {e}; connecting again"),
        }
        std::thread::sleep(RETRY_AFTER);
    }
    Ok(())
}

/// The state of one stream from S.
struct Copying<'a> {
    shared: &'a Shared,
    from: &'a str,
    /// The move's shard indexes in the placement the copy filters by.
    shards: (usize, usize),
    placement: Arc<super::super::ring::Placement>,
    /// S's history and epochs, from its hello.
    history_id: u128,
    epochs: Vec<(u64, u64, u64)>,
    /// How far into S's log T has applied (in memory).
    lsn: u64,
    /// Records past the hold's point, kept unapplied until the hand-off ends: S's
    /// purge deletes them once the move flips (possibly before T reads the flip),
    /// but if S lets the hold go without a flip they are changes T must make. Each
    /// run with the LSN it starts at, back to back from `lsn`.
    stash: Vec<(u64, Vec<u8>)>,
    /// Until where a full copy is not yet consistent.
    consistent_lsn: u64,
    /// S's synced log end, as it last said (None: not yet).
    source_lsn: Option<u64>,
    /// S's hold: the log end T must acknowledge, if S holds.
    held: Option<u64>,
    asked: Option<Instant>,
    acked: u64,
    /// `--move-copy-rate`'s account: when the stream began, and the changes
    /// applied since.
    began: Instant,
    applied: u64,
}

/// One stream from S's primary. Ok(true): the move flipped; Ok(false): the stream
/// ended and the copy goes on with another.
fn session(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    from: &str,
    to: &str,
) -> Result<bool, String> {
    let placement = shared.cluster.placement().ok_or("no ring")?;
    let shards = (
        placement.shard_index(from).ok_or("no such shard")?,
        placement.shard_index(to).ok_or("no such shard")?,
    );
    let primary = placement.primary(shards.0)?;
    let mut socket = shared
        .replication
        .connect(&primary, CONNECT_WITHIN)
        .map_err(|e| format!("connecting to {primary}: {e}"))?;
    socket
        .set_read_timeout(Some(READ_WAIT))
        .map_err(|e| e.to_string())?;
    let position = shared
        .store
        .get(position_key(from))
        .map_err(|e| e.to_string())?
        .and_then(|item| Position::decode(&item.value));
    let request = Replicate {
        history_id: position.map_or(0, |p| p.history_id),
        epoch: position.map_or(0, |p| p.epoch),
        tag: position.map_or(0, |p| p.tag),
        lsn: position.map_or(0, |p| p.lsn),
        floor: position.map_or(0, |p| p.lsn),
        purpose: Purpose::Move,
    };
    socket
        .write_all(request.line().as_bytes())
        .map_err(|e| e.to_string())?;
    let mut observer = runtime
        .block_on(Observer::connect(
            &shared.config.etcd,
            shared.config.cluster.as_deref().unwrap_or_default(),
        ))
        .map_err(|e| e.to_string())?;
    let mut copying = Copying {
        shared,
        from,
        shards,
        placement,
        history_id: 0,
        epochs: Vec::new(),
        lsn: 0,
        stash: Vec::new(),
        consistent_lsn: 0,
        source_lsn: None,
        held: None,
        asked: None,
        acked: 0,
        began: Instant::now(),
        applied: 0,
    };
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut chunk = vec![0u8; 256 << 10];
    let mut out = Vec::new();
    let (mut last_ack, mut last_progress) = (Instant::now(), Instant::now());
    let mut hello = false;
    loop {
        if !still(shared, from, to, MoveState::Copying) {
            return Ok(false);
        }
        match socket.read(&mut chunk) {
            Ok(0) => return Err("the source closed the stream".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e.to_string()),
        }
        let mut used = 0;
        let mut flipped = false;
        while let Some((frame, len)) = decode(&buf[used..]).map_err(|e| e.to_string())? {
            used += len;
            match frame {
                Frame::Hello {
                    history_id,
                    epochs,
                    start,
                } => {
                    copying.history_id = history_id;
                    copying.stash.clear();
                    copying.epochs = epochs;
                    copying.lsn = match start {
                        Start::Partial { lsn } => lsn,
                        Start::Full {
                            start_lsn,
                            consistent_lsn,
                            ..
                        } => {
                            copying.consistent_lsn = consistent_lsn;
                            copying.clear()?;
                            start_lsn
                        }
                    };
                    hello = true;
                }
                Frame::Records {
                    start_lsn, bytes, ..
                } if hello => {
                    if start_lsn != copying.received() {
                        return Err(format!(
                            "records from LSN {start_lsn} where the copy is at {}",
                            copying.received()
                        ));
                    }
                    copying.take(start_lsn, bytes)?;
                }
                Frame::Progress { synced_lsn, .. } => copying.source_lsn = Some(synced_lsn),
                Frame::HandOff { step, lsn, .. } => match step {
                    HandOffStep::Held => copying.held = Some(lsn),
                    HandOffStep::Released => {
                        // S made the held changes itself: they, and what came
                        // after the hold's point, are T's to apply.
                        copying.held = None;
                        copying.asked = Some(Instant::now());
                        for (start, run) in std::mem::take(&mut copying.stash) {
                            debug_assert_eq!(start, copying.lsn);
                            copying.apply(&run)?;
                        }
                    }
                    HandOffStep::Flipped => flipped = true,
                    _ => {}
                },
                Frame::Trim { .. } => {}
                Frame::Bye { reason } => return Err(format!("the source ended: {reason}")),
                Frame::Moved { to } => return Err(format!("the source's primary is now {to}")),
                other => return Err(format!("unexpected {other:?}")),
            }
        }
        buf.drain(..used);
        out.clear();
        if flipped {
            // S made T the owner: serve the keys here before S lets its held changes
            // come.
            advance(shared, from, to, MoveState::Flipped);
            tracing::info!("cluster: keys moving from {from} are this shard's now");
            let done = HandOffStep::Owning;
            encode(
                &Frame::HandOff {
                    step: done,
                    lsn: copying.lsn,
                    shard: to,
                },
                &mut out,
            );
            let _ = socket.write_all(&out);
            let _ = runtime.block_on(observer.set_move_progress(from, to, copying.progress()));
            return Ok(true);
        }
        let hand_off_due = copying
            .held
            .is_some_and(|h| copying.lsn >= h && copying.acked < h);
        if (hand_off_due || last_ack.elapsed() >= ACK_EVERY) && hello {
            if hand_off_due {
                test_hand_off_delay();
            }
            // What T acknowledges is on its disk.
            shared
                .store
                .sync_through(shared.store.appended_lsn())
                .map_err(|e| e.to_string())?;
            encode(
                &Frame::Ack {
                    synced_lsn: copying.lsn,
                },
                &mut out,
            );
            copying.acked = copying.lsn;
            last_ack = Instant::now();
        }
        if copying.should_ask() {
            encode(
                &Frame::HandOff {
                    step: HandOffStep::Ask,
                    lsn: copying.lsn,
                    shard: to,
                },
                &mut out,
            );
            copying.asked = Some(Instant::now());
        }
        if !out.is_empty() {
            socket.write_all(&out).map_err(|e| e.to_string())?;
        }
        if last_progress.elapsed() >= PROGRESS_EVERY && hello {
            // For the operator only: etcd away does not stop the copy.
            let shown = runtime.block_on(observer.set_move_progress(from, to, copying.progress()));
            if let Err(e) = shown {
                tracing::debug!("cluster: recording the copy's progress: {e}");
            }
            last_progress = Instant::now();
        }
    }
}

/// A slow target, for the tests of a hand-off that runs past its pause or whose
/// source dies in it: with `KURA_TEST_HAND_OFF_DELAY=<ms>x<n>` in its environment, the
/// process's first `n` hand-off acknowledgements each wait `ms` first. Unset (as
/// anywhere but those tests), nothing.
fn test_hand_off_delay() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static DELAY: OnceLock<Option<(Duration, AtomicU64)>> = OnceLock::new();
    let delay = DELAY.get_or_init(|| {
        let text = std::env::var("KURA_TEST_HAND_OFF_DELAY").ok()?;
        let (ms, n) = text.split_once('x')?;
        Some((
            Duration::from_millis(ms.parse().ok()?),
            AtomicU64::new(n.parse().ok()?),
        ))
    });
    if let Some((wait, left)) = delay {
        let taken = left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if taken.is_ok() {
            tracing::info!(
                "cluster: KURA_TEST_HAND_OFF_DELAY: acknowledging the hand-off {wait:?} late"
            );
            std::thread::sleep(*wait);
        }
    }
}

/// A change one record makes to a moving key.
enum Op<'a> {
    Put {
        value: &'a [u8],
        client_flags: u32,
        exptime: u32,
        cas: u64,
        item_flags: u8,
    },
    Delete,
    Touch {
        exptime: u32,
    },
}

impl Copying<'_> {
    /// Where the next run of records must start: after the applied ones and the
    /// stashed ones.
    fn received(&self) -> u64 {
        self.stash
            .last()
            .map_or(self.lsn, |(start, run)| start + run.len() as u64)
    }

    /// Takes a run of S's records starting at `start`: applies what lies before the
    /// hold's point (all of it with no hold) and stashes the rest.
    fn take(&mut self, start: u64, run: &[u8]) -> Result<(), String> {
        let upto = match self.held {
            Some(held) if self.stash.is_empty() => held.saturating_sub(start),
            Some(_) => 0,
            None => run.len() as u64,
        }
        .min(run.len() as u64) as usize;
        if upto > 0 {
            self.apply(&run[..upto])?;
        }
        if upto < run.len() {
            self.stash.push((start + upto as u64, run[upto..].to_vec()));
        }
        Ok(())
    }

    fn progress(&self) -> MoveProgress {
        MoveProgress {
            applied_lsn: self.lsn,
            source_lsn: self.source_lsn.unwrap_or(0).max(self.lsn),
            applied: self.shared.cluster.moves.copied.load(Ordering::Relaxed),
        }
    }

    /// Whether T is close enough behind S to ask for the hand-off now.
    fn should_ask(&self) -> bool {
        self.held.is_none()
            && self.lsn >= self.consistent_lsn
            && self
                .source_lsn
                .is_some_and(|end| end.saturating_sub(self.lsn) <= CLOSE_BEHIND)
            && self.asked.is_none_or(|at| at.elapsed() >= ASK_AGAIN_AFTER)
    }

    /// Whether `key` is one of the moving keys.
    fn moving(&self, key: Key<'_>) -> bool {
        key.space == Space::MEMCACHED
            && self
                .placement
                .moving(key.bytes)
                .is_some_and(|m| (m.from, m.to) == self.shards)
    }

    /// Deletes every moving key this store holds (before a full copy, or for S's
    /// `flush_all`).
    fn clear(&self) -> Result<(), String> {
        let keys = super::moving_keys(self.shared, &self.placement, self.shards)?;
        for key in &keys {
            super::delete(self.shared, key)?;
        }
        if !keys.is_empty() {
            tracing::info!(
                "cluster: cleared {} keys before copying from {}",
                keys.len(),
                self.from
            );
        }
        Ok(())
    }

    /// The epoch of S's log that LSN `lsn` is in: its number and tag.
    fn epoch_at(&self, lsn: u64) -> (u64, u64) {
        self.epochs
            .iter()
            .rev()
            .find(|&&(_, start, _)| start <= lsn)
            .map_or((0, 0), |&(number, _, tag)| (number, tag))
    }

    /// Applies a run of S's records (whole records and batches) that starts at the
    /// copy's position.
    fn apply(&mut self, run: &[u8]) -> Result<(), String> {
        let mut ops: Vec<(Key<'_>, Op<'_>)> = Vec::new();
        let mut seen: HashSet<&[u8]> = HashSet::new();
        let mut pos = 0;
        while pos < run.len() {
            let Decoded::Record(record, len) = record::decode(&run[pos..]) else {
                return Err("a damaged record in the stream".into());
            };
            pos += len;
            let op = match record {
                Record::Put {
                    key,
                    value,
                    client_flags,
                    exptime,
                    cas,
                    item_flags,
                    ..
                } if self.moving(key) => Some((
                    key,
                    Op::Put {
                        value,
                        client_flags,
                        exptime,
                        cas,
                        item_flags,
                    },
                )),
                Record::Delete { key } if self.moving(key) => Some((key, Op::Delete)),
                Record::Touch { key, exptime, .. } if self.moving(key) => {
                    Some((key, Op::Touch { exptime }))
                }
                Record::FlushAll { deadline, time, .. } => {
                    self.write(&mut ops, self.lsn + pos as u64 - len as u64)?;
                    seen.clear();
                    if deadline == 0 || deadline <= time {
                        self.clear()?;
                    } else {
                        tracing::warn!(
                            "cluster: a delayed flush_all on {} is not carried to the keys moving here",
                            self.from
                        );
                    }
                    None
                }
                _ => None,
            };
            if let Some((key, op)) = op {
                if !seen.insert(key.bytes) || ops.len() >= BATCH {
                    self.write(&mut ops, self.lsn + pos as u64 - len as u64)?;
                    seen.clear();
                    seen.insert(key.bytes);
                }
                ops.push((key, op));
            }
        }
        self.write(&mut ops, self.lsn + run.len() as u64)?;
        self.lsn += run.len() as u64;
        Ok(())
    }

    /// Makes `ops` as one batch with T's position, `lsn` in S's log, and empties it;
    /// then waits as long as `--move-copy-rate` asks.
    fn write(&mut self, ops: &mut Vec<(Key<'_>, Op<'_>)>, lsn: u64) -> Result<(), String> {
        if ops.is_empty() {
            return Ok(());
        }
        let (epoch, tag) = self.epoch_at(lsn);
        let position = Position {
            history_id: self.history_id,
            epoch,
            tag,
            lsn,
        }
        .encode();
        let mut keys: Vec<Key<'_>> = ops.iter().map(|(k, _)| *k).collect();
        keys.push(position_key(self.from));
        let store = &self.shared.store;
        let mut highest = 0;
        store
            .update_batch(&keys, |current, _| {
                let mut changes: Vec<Change> = ops
                    .iter()
                    .zip(current)
                    .map(|((_, op), current)| match *op {
                        Op::Put {
                            value,
                            client_flags,
                            exptime,
                            cas,
                            item_flags,
                        } => {
                            highest = highest.max(cas);
                            Change::Put(NewItem {
                                value: Arc::from(value),
                                client_flags,
                                exptime,
                                cas: NewCas::Copied {
                                    cas,
                                    explicit: item_flags & ITEM_EXPLICIT_CAS != 0,
                                },
                                stale: item_flags & ITEM_STALE != 0,
                                binary_key: item_flags & ITEM_BINARY_KEY != 0,
                                win_sent: false,
                            })
                        }
                        Op::Delete if current.is_some() => Change::Delete,
                        Op::Touch { exptime } if current.is_some() => Change::Touch {
                            exptime: Some(exptime),
                            mark_win_sent: false,
                        },
                        Op::Delete | Op::Touch { .. } => Change::Keep,
                    })
                    .collect();
                changes.push(Change::Put(NewItem::new(Arc::from(position.as_bytes()), 0)));
                (changes, ())
            })
            .map_err(|e| e.to_string())?;
        store.raise_cas_past(highest);
        self.shared
            .cluster
            .moves
            .copied
            .fetch_add(ops.len() as u64, Ordering::Relaxed);
        self.applied += ops.len() as u64;
        ops.clear();
        let rate = self.shared.config.move_copy_rate;
        // A hand-off in progress holds the source's changes: no pause then.
        if rate > 0 && self.held.is_none() {
            let due = Duration::from_secs_f64(self.applied as f64 / rate as f64);
            if let Some(wait) = due.checked_sub(self.began.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_reads_back_as_written() {
        let p = Position {
            history_id: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            epoch: 3,
            tag: 0xfeed,
            lsn: 987_654,
        };
        assert_eq!(Position::decode(p.encode().as_bytes()), Some(p));
        assert_eq!(Position::decode(b"12 3"), None);
    }
}
