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
//!
//! A table's move (`table_source.rs` on S) is copied the same way, by its name
//! `@@<table>`: T first takes the table into its catalog as S described it, under a
//! number of T's own (dropping a stale table of that name first: a copy begins only
//! with no position in S's log), then keeps S's records of the table's rows and index
//! entries (spaces 2 to 4, keyed first by S's number for it), each key given T's
//! number; index numbers stay as they are. A row and its entries come as S wrote
//! them, so T holds exactly S's rows and entries at the hand-off, and every unique
//! index with them.

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_cluster::{MoveProgress, MoveState, Observer};
use kura_engine::record::{self, Decoded, Record, ITEM_BINARY_KEY, ITEM_EXPLICIT_CAS, ITEM_STALE};
use kura_engine::{Change, Key, NewCas, NewItem, Space};
use kura_protocol::replication::{decode, encode, Frame, HandOffStep, Purpose, Replicate, Start};

use super::super::ring::{Placement, TableMoving};
use super::{advance, position_key, still};
use crate::server::Shared;

/// What a copy takes from its source.
#[derive(Clone)]
pub(super) enum Moved {
    /// The ring's keys from shard `from` to shard `to` (their names).
    Keys { from: String, to: String },
    /// A table.
    Table(TableMoving),
}

impl Moved {
    /// The move's name on the stream (its hold, its hand-off frames): the target's
    /// for the ring's keys, `@@<table>` for a table.
    fn name(&self) -> String {
        match self {
            Moved::Keys { to, .. } => to.clone(),
            Moved::Table(m) => m.name(),
        }
    }

    /// The source's name, and its index in `placement`.
    fn source(&self, placement: &Placement) -> Result<(String, usize), String> {
        let index = match self {
            Moved::Keys { from, .. } => placement.shard_index(from).ok_or("no such shard")?,
            Moved::Table(m) => {
                placement
                    .table_moving(&m.table)
                    .filter(|now| now.id == m.id)
                    .ok_or("the move is gone")?
                    .from
            }
        };
        Ok((placement.shards[index].clone(), index))
    }

    /// The key T keeps its position in S's log under, for this move.
    fn position(&self, placement: &Placement) -> Result<String, String> {
        Ok(match self {
            Moved::Keys { from, .. } => from.clone(),
            Moved::Table(m) => format!("{}{}#{}", self.source(placement)?.0, m.name(), m.id),
        })
    }

    /// Whether this node is still the target's primary and the move still copying.
    fn still(&self, shared: &Shared) -> bool {
        match self {
            Moved::Keys { from, to } => still(shared, from, to, MoveState::Copying),
            Moved::Table(m) => {
                !shared.store.is_read_only()
                    && !shared.stopping.load(Ordering::Acquire)
                    && shared.cluster.placement().is_some_and(|p| {
                        p.table_moving(&m.table).is_some_and(|now| {
                            now.id == m.id
                                && now.state == MoveState::Copying
                                && Some(now.to) == p.mine
                        })
                    })
            }
        }
    }

    /// Places the moved keys here, ahead of the next poll of etcd, once S said the
    /// move flipped.
    fn flipped(&self, shared: &Shared) {
        match self {
            Moved::Keys { from, to } => advance(shared, from, to, MoveState::Flipped),
            Moved::Table(m) => {
                super::table_source::advance(shared, &m.table, m.id, MoveState::Flipped)
            }
        }
    }

    /// Records the copy's progress in etcd, for the operator.
    async fn show(&self, observer: &mut Observer, progress: MoveProgress) -> Result<(), String> {
        let shown = match self {
            Moved::Keys { from, to } => observer.set_move_progress(from, to, progress).await,
            Moved::Table(m) => observer.set_table_move_progress(&m.table, progress).await,
        };
        shown.map_err(|e| e.to_string())
    }
}

/// Which of S's records a copy keeps, and the key it gives each.
enum Filter {
    /// The memcached keys whose owner moves from shard `shards.0` to `shards.1` in
    /// `placement`'s change of the ring.
    Keys {
        shards: (usize, usize),
        placement: Arc<Placement>,
    },
    /// A table's rows and entries, keyed first by S's number for it (`theirs`), given
    /// T's (`ours`); entries of indexes other than `indexes` (ones being dropped on
    /// S) are left.
    Table {
        theirs: u32,
        ours: u32,
        indexes: Vec<u16>,
    },
}

/// Takes in the table `m` moves: the number this node's catalog keys its rows by,
/// with the filter of S's records that copies them. A copy that has no position in
/// S's log yet starts from nothing: a table of that name here (a copy of an
/// abandoned move, or of an earlier move from here) is dropped first.
fn take_in(shared: &Shared, m: &TableMoving, position: &str) -> Result<Filter, String> {
    let described = m
        .described
        .as_ref()
        .ok_or("the table is not described yet")?;
    let theirs = kura_tables::Catalog::decode(described).map_err(|e| e.to_string())?;
    let def = theirs.tables.first().ok_or("a description with no table")?;
    let has_position = shared
        .store
        .get(position_key(position))
        .map_err(|e| e.to_string())?
        .is_some();
    let catalog = shared.tables.catalog();
    let ours = match catalog.table(&m.table) {
        Some(t) if has_position => catalog.tables[t].number,
        found => {
            if found.is_some() {
                tracing::info!(
                    "cluster: dropping a stale table {} before copying it",
                    m.table
                );
                shared
                    .tables
                    .drop_table(&m.table)
                    .map_err(|e| format!("dropping table {}: {e:?}", m.table))?;
            }
            if has_position {
                super::delete_position(shared, position)?;
            }
            shared
                .tables
                .import_table(described)
                .map_err(|e| format!("taking in table {}: {e:?}", m.table))?
        }
    };
    Ok(Filter::Table {
        theirs: def.number,
        ours,
        indexes: def.index_numbers.clone(),
    })
}

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
/// `KURA_TEST_HAND_OFF_DELAY`'s setting, read once (`super::test_delay`).
static ACK_DELAY: super::TestDelay = std::sync::OnceLock::new();

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

/// Runs the copy of `moved` to this node's shard until it flips, the move is no
/// longer copying, or this node is no longer the primary.
pub(super) fn copy(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    moved: &Moved,
) -> Result<(), String> {
    let mut table = None;
    while moved.still(shared) {
        let ran = match (moved, &table) {
            (Moved::Table(m), None) => shared
                .cluster
                .placement()
                .ok_or_else(|| "no ring".to_string())
                .and_then(|p| moved.position(&p))
                .and_then(|position| take_in(shared, m, &position))
                .map(|filter| {
                    table = Some(filter);
                    false
                }),
            _ => session(shared, runtime, moved, table.as_ref()),
        };
        match ran {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => tracing::info!("cluster: copying {}: {e}; connecting again", moved.name()),
        }
        std::thread::sleep(RETRY_AFTER);
    }
    Ok(())
}

/// The state of one stream from S.
struct Copying<'a> {
    shared: &'a Shared,
    /// The source's name.
    from: &'a str,
    /// The key of T's position in S's log ([`Moved::position`]).
    position: &'a str,
    filter: Filter,
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
    moved: &Moved,
    table: Option<&Filter>,
) -> Result<bool, String> {
    let placement = shared.cluster.placement().ok_or("no ring")?;
    let (from, source) = moved.source(&placement)?;
    let position_name = moved.position(&placement)?;
    let name = moved.name();
    let filter = match (moved, table) {
        (Moved::Keys { to, .. }, _) => Filter::Keys {
            shards: (source, placement.shard_index(to).ok_or("no such shard")?),
            placement: Arc::clone(&placement),
        },
        (
            Moved::Table(_),
            Some(Filter::Table {
                theirs,
                ours,
                indexes,
            }),
        ) => Filter::Table {
            theirs: *theirs,
            ours: *ours,
            indexes: indexes.clone(),
        },
        (Moved::Table(_), _) => return Err("the table is not taken in".into()),
    };
    let primary = placement.primary(source)?;
    let mut socket = shared
        .replication
        .connect(&primary, CONNECT_WITHIN)
        .map_err(|e| format!("connecting to {primary}: {e}"))?;
    socket
        .set_read_timeout(Some(READ_WAIT))
        .map_err(|e| e.to_string())?;
    let position = shared
        .store
        .get(position_key(&position_name))
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
        from: &from,
        position: &position_name,
        filter,
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
        if !moved.still(shared) {
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
            moved.flipped(shared);
            tracing::info!("cluster: {name} from {from} is this shard's now");
            let done = HandOffStep::Owning;
            encode(
                &Frame::HandOff {
                    step: done,
                    lsn: copying.lsn,
                    shard: &name,
                },
                &mut out,
            );
            let _ = socket.write_all(&out);
            let _ = runtime.block_on(moved.show(&mut observer, copying.progress()));
            return Ok(true);
        }
        let hand_off_due = copying
            .held
            .is_some_and(|h| copying.lsn >= h && copying.acked < h);
        if (hand_off_due || last_ack.elapsed() >= ACK_EVERY) && hello {
            if hand_off_due {
                // A slow target, for the tests of a hand-off that runs past its pause
                // or whose source dies in it.
                if let Some(wait) = super::test_delay("KURA_TEST_HAND_OFF_DELAY", &ACK_DELAY) {
                    std::thread::sleep(wait);
                }
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
                    shard: &name,
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
            let shown = runtime.block_on(moved.show(&mut observer, copying.progress()));
            if let Err(e) = shown {
                tracing::debug!("cluster: recording the copy's progress: {e}");
            }
            last_progress = Instant::now();
        }
    }
}

/// A moving key as T writes it, and the change one record of S's makes to it.
type Moving<'a> = ((Space, Cow<'a, [u8]>), Op<'a>);

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

    /// The key T writes for S's `key`, if it is one of the moving keys.
    fn moving<'k>(&self, key: Key<'k>) -> Option<(Space, Cow<'k, [u8]>)> {
        match &self.filter {
            Filter::Keys { shards, placement } => (key.space == Space::MEMCACHED
                && placement
                    .moving(key.bytes)
                    .is_some_and(|m| (m.from, m.to) == *shards))
            .then_some((key.space, Cow::Borrowed(key.bytes))),
            Filter::Table {
                theirs,
                ours,
                indexes,
            } => {
                let bytes = key.bytes;
                let ours_too = match key.space {
                    kura_tables::rows::ROW_SPACE => bytes.len() >= 4,
                    kura_tables::rows::UNIQUE_SPACE | kura_tables::rows::INDEX_SPACE => {
                        bytes.len() >= 6
                            && indexes.contains(&u16::from_be_bytes([bytes[4], bytes[5]]))
                    }
                    _ => false,
                };
                if !ours_too || bytes[..4] != theirs.to_be_bytes() {
                    return None;
                }
                let mut renumbered = bytes.to_vec();
                renumbered[..4].copy_from_slice(&ours.to_be_bytes());
                Some((key.space, Cow::Owned(renumbered)))
            }
        }
    }

    /// Deletes every moving key this store holds (before a full copy, or for S's
    /// `flush_all`).
    fn clear(&self) -> Result<(), String> {
        let (shards, placement) = match &self.filter {
            Filter::Keys { shards, placement } => (*shards, placement),
            Filter::Table { ours, .. } => {
                return self
                    .shared
                    .tables
                    .clear_table_keys(*ours)
                    .map_err(|e| e.to_string())
            }
        };
        let keys = super::moving_keys(self.shared, placement, shards)?;
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
        let mut ops: Vec<Moving<'_>> = Vec::new();
        let mut seen: HashSet<(Space, Vec<u8>)> = HashSet::new();
        let mut pos = 0;
        // Where S's batch being read ends: T's batches end between S's, so that T's
        // position in S's log is never inside one.
        let mut batch_end = 0;
        while pos < run.len() {
            let Decoded::Record(record, len) = record::decode(&run[pos..]) else {
                return Err("a damaged record in the stream".into());
            };
            let start = pos;
            pos += len;
            let op = match record {
                Record::Batch { bytes, .. } => {
                    if ops.len() >= BATCH {
                        self.write(&mut ops, self.lsn + start as u64)?;
                        seen.clear();
                    }
                    batch_end = pos + bytes as usize;
                    None
                }
                Record::Put {
                    key,
                    value,
                    client_flags,
                    exptime,
                    cas,
                    item_flags,
                    ..
                } => self.moving(key).map(|key| {
                    (
                        key,
                        Op::Put {
                            value,
                            client_flags,
                            exptime,
                            cas,
                            item_flags,
                        },
                    )
                }),
                Record::Delete { key } => self.moving(key).map(|key| (key, Op::Delete)),
                Record::Touch { key, exptime, .. } => {
                    self.moving(key).map(|key| (key, Op::Touch { exptime }))
                }
                Record::FlushAll { deadline, time, .. }
                    if matches!(self.filter, Filter::Keys { .. }) =>
                {
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
                let again = !seen.insert((key.0, key.1.to_vec()));
                if again || (ops.len() >= BATCH && start >= batch_end) {
                    self.write(&mut ops, self.lsn + start as u64)?;
                    seen.clear();
                    seen.insert((key.0, key.1.to_vec()));
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
    fn write(&mut self, ops: &mut Vec<Moving<'_>>, lsn: u64) -> Result<(), String> {
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
        let mut keys: Vec<Key<'_>> = ops
            .iter()
            .map(|((space, bytes), _)| Key::new(*space, bytes))
            .collect();
        keys.push(position_key(self.position));
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
