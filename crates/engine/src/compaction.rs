//! Compaction: reclaiming the log's garbage by emptying its oldest sealed segment, the
//! versions the index still points at copied to the head of the log.
//!
//! What it is not for: dropping expired versions in memory (`expiry.rs`'s
//! [`Store::purge_expired`]); compaction drops only the dead versions it meets in the
//! segment it empties.
//!
//! Invariants (see [`Store::compact_oldest`] for the reasons):
//! - One compaction at a time, and only ever of the oldest segment.
//! - A copy is made under the key's shard lock and only if the index still points at
//!   the original; copies keep their CAS, time and LSN.
//! - The index moves to a batch of copies only once they are written to the file.
//! - A CAS-floor record keeps CAS values unique once the records that held the highest
//!   ones are gone; a pending delayed flush_all the segment may have held is said again.

use std::sync::atomic::Ordering;

use crate::apply;
use crate::expiry::{liveness, Liveness};
use crate::held::is_at as held_at;
use crate::index::{self, Hashed};
use crate::key::{Class, Key, Space};
use crate::log::{self, Holds, Location};
use crate::record::{self, Decoded, Header, Record};
use crate::store::data_len;
use crate::{Error, Store};

/// Whether a compaction must restate the pending delayed flush_all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PendingFlush {
    Reassert,
    Untouched,
}

/// How compaction finds the live records of the segment it empties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindLive {
    /// Whichever costs less: the index while it is small beside the segment.
    Cheaper,
    /// Read every record of the segment and ask the index whether it is live.
    ReadSegment,
    /// Ask the index which of its slots point into the segment; read just those.
    WalkIndex,
}

/// What one compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compaction {
    /// The segment removed.
    pub segment: u64,
    /// Its size: the disk space given back.
    pub segment_bytes: u64,
    /// Live records copied to the head of the log.
    pub copied_bytes: u64,
    /// Expired or flushed versions dropped instead of copied.
    pub purged_items: u64,
}

/// Clears its flag when dropped: however the work it marks ends.
struct Flag<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for Flag<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

impl Store {
    /// Compacts the oldest sealed segment: copies the versions the index still points at
    /// to the head of the log, drops everything else in it, syncs the copies, and removes
    /// the segment. Returns None when there is no sealed segment, or when a cursor
    /// ([`Store::follow_log`]) stands in the oldest.
    ///
    /// Only the oldest segment is ever compacted, so nothing older can hold a key it
    /// mentions: its deletes, touches and immediate flushes can simply go, and a deleted
    /// key cannot come back. A copy is made under the key's shard lock and only if the
    /// index still points at the original, so it is ordered after every earlier write of
    /// the key and before every later one; a crash before the original is removed leaves
    /// the same version twice, which replays to the same state. Copies keep their CAS,
    /// time and LSN: they are no new writes. A CAS-floor record keeps CAS values unique
    /// once the records that held the highest ones are gone.
    ///
    /// The index moves to a batch of copies only once they are written to the file, so
    /// a reader that follows it always finds the record there; a key written meanwhile
    /// keeps its newer version, and its copy counts as garbage.
    pub fn compact_oldest(&self) -> Result<Option<Compaction>, Error> {
        self.compact_oldest_finding(FindLive::Cheaper)
    }

    /// [`Store::compact_oldest`], finding the segment's live records the way `how`
    /// says (tests run both ways).
    pub fn compact_oldest_finding(&self, how: FindLive) -> Result<Option<Compaction>, Error> {
        let _one_at_a_time = self.compaction.lock();
        if self.is_read_only() {
            // A replica's segments go when its primary's do (`Store::trim_log`).
            return Ok(None);
        }
        self.compacting.store(true, Ordering::Relaxed);
        let _running = Flag(&self.compacting);
        // Write out the tail first: records of a segment that was just left may still
        // be in memory, and the segment read below must be complete.
        self.log.force_sync()?;
        let usage = self.log.usage();
        if usage.len() < 2 {
            return Ok(None);
        }
        let (segment, segment_usage) = usage[0];
        if self.log.is_pinned(segment) {
            // A cursor (a replica catching up) still reads it.
            return Ok(None);
        }
        let floor = self.next_cas.load(Ordering::Acquire).saturating_sub(1);
        self.log
            .append(&Record::CasFloor { cas: floor }, Holds::Nothing, None)?;
        let mut report = Compaction {
            segment,
            segment_bytes: segment_usage.bytes,
            ..Compaction::default()
        };
        if segment_usage.live_bytes == 0 {
            // Nothing in it is live (the account is kept exact at every append, free and
            // purge): no record needs reading or copying.
            return self
                .retire_segment(report, PendingFlush::Reassert)
                .map(Some);
        }
        // The live records are found one of two ways: by reading the whole segment and
        // asking the index about each record, or by asking the index which of its slots
        // point into the segment and reading just those. Asking about a record costs
        // several times what looking at a slot does, so the index is walked while it is
        // small beside the segment: a small set of keys written over and over, whose
        // old segments are nearly all garbage.
        let file = self.log.reader(segment)?;
        // A held key has no slot to walk to unless its version is in memory: the
        // index is walked only for a segment that holds no live held record, as the
        // ordered keyspace's account of it says (a sealed segment gains none, and
        // compaction alone moves them out). Rows rewritten over and over leave such
        // segments behind them; their index entries stay where the rows were made.
        let held_live = self
            .ordered
            .as_ref()
            .map_or(0, |ordered| ordered.held_live_in(segment));
        let walk = held_live == 0
            && match how {
                FindLive::Cheaper => {
                    let live_total: u64 = usage.iter().map(|(_, u)| u.live_bytes).sum();
                    live_total <= WALK_INDEX_RATIO * segment_usage.bytes
                }
                FindLive::ReadSegment => false,
                FindLive::WalkIndex => true,
            };
        // Read in windows, not whole: a segment can be larger than what the memory
        // budget leaves free.
        let mut data = if walk {
            log::Window::sparse(file, segment_usage.bytes)
        } else {
            log::Window::new(file, segment_usage.bytes)
        };
        let header = data.at(0, record::SEGMENT_HEADER_BYTES)?;
        if !matches!(record::parse_segment_header(header), Header::Valid { sequence, .. } if sequence == segment)
        {
            return Err(Error::Format(format!("segment {segment} lost its header")));
        }
        // Walking the index does not see a delayed flush_all's record: say it again.
        let mut saw_delayed_flush = walk;
        let mut live = if walk {
            Some(self.index.offsets_in(segment).into_iter())
        } else {
            None
        };
        let mut moved: Vec<Moved> = Vec::new();
        let mut next = record::SEGMENT_HEADER_BYTES;
        loop {
            let pos = match live.as_mut() {
                Some(offsets) => match offsets.next() {
                    Some(offset) => offset as usize,
                    None => break,
                },
                None if (next as u64) < segment_usage.bytes => next,
                None => break,
            };
            let Decoded::Record(rec, len) = data.record(pos)? else {
                // Recovery cut every bad tail at open; damage since then is corruption at
                // rest. Keep the segment: it may hold versions not yet copied.
                return Err(Error::Format(format!(
                    "segment {segment} is damaged at {pos}"
                )));
            };
            match rec {
                Record::Put {
                    key,
                    value,
                    exptime: rec_exptime,
                    time: rec_time,
                    ..
                } => {
                    let here = Location {
                        segment,
                        offset: u32::try_from(pos).unwrap_or(u32::MAX),
                        len: u32::try_from(len).unwrap_or(u32::MAX),
                    };
                    let raw = index::raw_address(segment, here.offset);
                    let h = self.index.hash(key);
                    let now = self.now_secs();
                    let deadline = self.flush_deadline.load(Ordering::Acquire);
                    let held = self.is_held(key);
                    let (mut shard, found, place) = self.lock_record(key, h, raw, here)?;
                    let data = data_len(key.bytes, value);
                    if found.is_none() && held_at(place, here).is_some() {
                        // A held key with no version in memory, live here.
                        match liveness(key.space, rec_exptime, rec_time, now, deadline) {
                            Liveness::Live => {
                                let appended = self.log.append(&rec, Holds::Version, Some(here))?;
                                report.copied_bytes += u64::from(appended.location.len);
                                moved.push(Moved {
                                    h,
                                    class: key.space.class(),
                                    from: here,
                                    to: appended.location,
                                    held: Some((key.space, key.bytes.into(), data, appended.lsn)),
                                });
                            }
                            _ => {
                                // Expired: gone, as a version in memory would go.
                                let class = key.space.class();
                                self.log.free(here, class);
                                let lsn = self.log.appended_lsn();
                                self.note_held(key, lsn, place, None);
                                self.count_items(class, -1);
                                report.purged_items += 1;
                            }
                        }
                    } else if let Some((slot, idx)) = found {
                        // In memory, the version's metadata is the same as its record's
                        // but for a touch replayed from an older log: use memory's.
                        let copy = match idx {
                            Some(idx) => {
                                let e = shard.entry(idx);
                                Record::Put {
                                    key,
                                    value,
                                    client_flags: e.client_flags,
                                    exptime: e.exptime,
                                    time: e.time,
                                    cas: e.cas,
                                    item_flags: e.item_flags(),
                                }
                            }
                            None => rec.clone(),
                        };
                        let (exptime, time) = match idx {
                            Some(idx) => (shard.entry(idx).exptime, shard.entry(idx).time),
                            None => (rec_exptime, rec_time),
                        };
                        match liveness(key.space, exptime, time, now, deadline) {
                            Liveness::Live => {
                                let appended =
                                    self.log.append(&copy, Holds::Version, Some(here))?;
                                report.copied_bytes += u64::from(appended.location.len);
                                moved.push(Moved {
                                    h,
                                    class: key.space.class(),
                                    from: here,
                                    to: appended.location,
                                    held: held
                                        .then(|| (key.space, key.bytes.into(), data, appended.lsn)),
                                });
                            }
                            state => {
                                if self.drop_dead(&mut shard, slot, key, (here, data), state) {
                                    report.purged_items += 1;
                                }
                            }
                        }
                    }
                    drop(shard);
                    if moved.len() >= MOVE_BATCH {
                        self.repoint(&mut moved)?;
                    }
                }
                Record::FlushAll { deadline, .. } if deadline != 0 => saw_delayed_flush = true,
                _ => {}
            }
            next = pos + len;
        }
        self.repoint(&mut moved)?;
        let flush = if saw_delayed_flush {
            PendingFlush::Reassert
        } else {
            PendingFlush::Untouched
        };
        self.retire_segment(report, flush).map(Some)
    }

    /// Points the index at copies compaction made, once they are on disk: each key
    /// still at its original moves to the copy; for a key written since, the copy is
    /// garbage.
    fn repoint(&self, moved: &mut Vec<Moved>) -> Result<(), Error> {
        if moved.is_empty() {
            return Ok(());
        }
        self.log.force_sync()?;
        for m in moved.drain(..) {
            let raw = index::raw_address(m.from.segment, m.from.offset);
            let key = m
                .held
                .as_ref()
                .map(|(space, key, ..)| Key::new(*space, key));
            let (mut shard, found, place) = match key {
                Some(key) => self.lock_record(key, m.h, raw, m.from)?,
                None => {
                    let shard = self.index.shard(m.h).write();
                    let found = shard.find_location(m.h, raw, m.from);
                    (shard, found, None)
                }
            };
            // A held key's place moves with its copy (its version in memory too).
            let note = |store: &Store| {
                if let Some((space, key, data, lsn)) = &m.held {
                    store.note_held(
                        Key::new(*space, key),
                        *lsn,
                        Some(apply::place(m.from, *data)),
                        Some(apply::place(m.to, *data)),
                    );
                }
            };
            match found {
                Some((slot, None)) => {
                    shard.set_cold(slot, index::raw_address(m.to.segment, m.to.offset));
                }
                Some((_, Some(idx))) => {
                    shard.entry_mut(idx).location = m.to;
                    note(self);
                }
                None if m.held.is_some() && held_at(place, m.from).is_some() => note(self),
                None => self.log.free(m.to, m.class),
            }
        }
        Ok(())
    }

    /// The end of every compaction: say the pending delayed flush_all again if the
    /// segment may have held it (it may live nowhere else), sync the copies, remove the
    /// segment, count it.
    fn retire_segment(&self, report: Compaction, flush: PendingFlush) -> Result<Compaction, Error> {
        let deadline = self.flush_deadline.load(Ordering::Acquire);
        if flush == PendingFlush::Reassert && deadline != 0 {
            let flush = Record::FlushAll {
                deadline,
                time: self.now_secs(),
                cas: 0,
            };
            self.log.append(&flush, Holds::Nothing, None)?;
        }
        self.log.force_sync()?;
        self.ordered_durable_through(self.segment_end(report.segment))?;
        if !self.log.remove_segment(report.segment)? {
            // A cursor came to stand in it meanwhile: it stays, all garbage now, for a
            // later compaction to remove.
            return Ok(Compaction {
                segment_bytes: 0,
                ..report
            });
        }
        self.compactions.fetch_add(1, Ordering::Relaxed);
        self.compaction_copied_bytes
            .fetch_add(report.copied_bytes, Ordering::Relaxed);
        self.compaction_reclaimed_bytes
            .fetch_add(report.segment_bytes, Ordering::Relaxed);
        Ok(report)
    }

    /// Compacts while the log holds more garbage than live data (space amplification
    /// above 2) and more than one segment's worth of it. Returns how many segments went.
    pub fn compact_if_needed(&self, segment_size_bytes: u64) -> Result<u64, Error> {
        let mut done = 0;
        loop {
            let usage = self.log.usage();
            if usage.len() < 2 {
                return Ok(done);
            }
            let total: u64 = usage.iter().map(|(_, u)| u.bytes).sum();
            let live: u64 = usage.iter().map(|(_, u)| u.live_bytes).sum();
            let garbage = total.saturating_sub(live);
            if garbage <= live.max(segment_size_bytes) {
                return Ok(done);
            }
            if self.compact_oldest()?.is_none() {
                return Ok(done);
            }
            done += 1;
        }
    }
}

/// How many copies compaction makes before it writes them out and points the index at
/// them.
const MOVE_BATCH: usize = 4096;

/// Compaction finds a segment's live records through the index, not by reading the
/// segment through, while all live data is at most this many times the segment's size.
const WALK_INDEX_RATIO: u64 = 4;

/// A version compaction copied: from where to where; for a held key, the key, its
/// bytes of key and value, and the copy's LSN.
struct Moved {
    h: Hashed,
    class: Class,
    from: Location,
    to: Location,
    held: Option<(Space, Box<[u8]>, u64, u64)>,
}
