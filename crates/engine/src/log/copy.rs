//! A replica's log: a copy of its primary's, byte for byte. Records arrive as the
//! primary's log holds them and are appended unchanged, so every record has the LSN it
//! has on the primary; segments start where the primary's started (same sequence, same
//! LSN), and go when the primary's went. A replica's log is therefore the primary's,
//! cut wherever the replica has got to, and a replica that is promoted goes on with it.
//!
//! What it is not for: deciding what the records do to the index (`follow.rs`), or
//! the records a node writes of its own (`log.rs`).
//!
//! Invariants: a replica appends nothing but copies, so its own appends never roll a
//! segment: [`Log::start_segment`] does, where the primary did.

use std::sync::atomic::Ordering;

use crate::key::Class;
use crate::record::{self, SEGMENT_HEADER_BYTES};
use crate::Error;

use super::{account, segment_name, Appended, Holds, Location, Log, SegmentUsage};

/// One record of a copied run: its encoded length, and what it does to the live-bytes
/// account (see [`Log::append`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Copied {
    pub len: u64,
    pub holds: Holds,
    pub frees: Option<Location>,
    pub class: Class,
}

impl Log {
    /// Appends `bytes`, records copied from the primary's log that end at its LSN
    /// `end_lsn`, to the segment being written. `parts` describes each record, in order.
    /// Every record gets the LSN `end_lsn` (they are one record, or a batch).
    pub fn append_copied(
        &self,
        bytes: &[u8],
        parts: &[Copied],
        end_lsn: u64,
    ) -> Result<Vec<Appended>, Error> {
        if self.shared.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        let len = bytes.len() as u64;
        debug_assert_eq!(parts.iter().map(|p| p.len).sum::<u64>(), len);
        let mut tail = self.shared.tail.lock();
        if tail.shutdown {
            return Err(Error::Poisoned);
        }
        let appended = self.shared.appended_lsn.load(Ordering::Relaxed);
        if appended + len != end_lsn {
            return Err(Error::Format(format!(
                "a copied record ending at LSN {end_lsn} does not follow this log's end at {appended}"
            )));
        }
        if tail.segment_bytes + len > crate::index::MAX_SEGMENT_BYTES {
            return Err(Error::Format(format!(
                "copied records would take a segment past the {} bytes the index addresses",
                crate::index::MAX_SEGMENT_BYTES
            )));
        }
        let before = tail.segment_bytes;
        let segment = tail.next_sequence - 1;
        tail.buf.extend_from_slice(bytes);
        let placed = parts
            .iter()
            .map(|p| {
                account(
                    &mut tail, segment, p.len, p.holds, p.frees, p.class, end_lsn,
                )
            })
            .collect();
        self.appended(tail, before, end_lsn, true);
        Ok(placed)
    }

    /// A run of copies has been appended: in fsync mode, the flusher writes and syncs
    /// it now, once for the run (the acknowledgement to the primary follows the sync).
    pub fn copies_appended(&self) {
        if self.shared.durability == super::Durability::Fsync {
            self.shared.flusher_wake.notify_one();
        }
    }

    /// Starts segment `sequence` at LSN `start_lsn`, where the primary started it: the
    /// next records go there.
    pub fn start_segment(&self, sequence: u64, start_lsn: u64) -> Result<(), Error> {
        let mut tail = self.shared.tail.lock();
        let appended = self.shared.appended_lsn.load(Ordering::Relaxed);
        if start_lsn != appended || sequence != tail.next_sequence {
            return Err(Error::Format(format!(
                "the primary starts segment {sequence} at LSN {start_lsn}; this log is in segment {} at LSN {appended}",
                tail.next_sequence - 1
            )));
        }
        let oldest = self.shared.oldest_sequence.load(Ordering::Acquire);
        if sequence - oldest >= crate::index::SEGMENT_WINDOW {
            return Err(Error::LogFull);
        }
        let at = tail.buf.len();
        tail.rolls.push(super::Roll {
            at,
            sequence,
            start_lsn,
        });
        tail.next_sequence += 1;
        self.shared
            .active_sequence
            .store(sequence, Ordering::Release);
        tail.segment_bytes = SEGMENT_HEADER_BYTES as u64;
        tail.starts.insert(sequence, start_lsn);
        tail.usage.insert(
            sequence,
            SegmentUsage {
                bytes: SEGMENT_HEADER_BYTES as u64,
                ..SegmentUsage::default()
            },
        );
        // Written with the segment's first records, by the flusher (see
        // `Shared::write_tail`).
        Ok(())
    }

    /// Empties the log and starts it again with segment `sequence` at LSN `start_lsn`:
    /// a replica about to copy its primary's log from there. Every segment file goes,
    /// newest first (a crash leaves a prefix of the log), except those in `set_aside`,
    /// which a rewind renames to copy them back (`rewind.rs`); the watermarks start at
    /// `start_lsn`. Refused, before any file is touched, while a cursor follows this
    /// log.
    pub fn restart_at(
        &self,
        sequence: u64,
        start_lsn: u64,
        set_aside: &[u64],
    ) -> Result<(), Error> {
        if self.is_poisoned() {
            return Err(Error::Poisoned);
        }
        let _sync_aside = self.shared.sync_aside.lock();
        let mut writer = self.shared.writer.lock();
        let mut tail = self.shared.tail.lock();
        if tail.shutdown {
            return Err(Error::Poisoned);
        }
        if !tail.pins.is_empty() {
            return Err(Error::Format(
                "the log cannot start again while a cursor follows it".to_string(),
            ));
        }
        let result = (|| {
            let disk = &self.shared.disk;
            let mut sequences: Vec<u64> = disk
                .list()?
                .iter()
                .filter_map(|name| super::parse_segment_name(name))
                .collect();
            sequences.sort_unstable_by(|a, b| b.cmp(a));
            for old in sequences {
                if set_aside.contains(&old) {
                    disk.rename(&segment_name(old), &crate::rewind::aside_name(old))?;
                } else {
                    disk.remove(&segment_name(old))?;
                }
            }
            disk.sync_dir()?;
            let mut next = disk.create(&segment_name(sequence))?;
            next.append(&record::segment_header(sequence, start_lsn))?;
            next.sync()?;
            next.reserve(self.shared.segment_size_bytes)?;
            disk.sync_dir()?;
            Ok::<_, std::io::Error>(next)
        })();
        let next = match result {
            Ok(next) => next,
            Err(e) => {
                drop(tail);
                drop(writer);
                self.shared.poison(&e);
                return Err(Error::Poisoned);
            }
        };
        writer.active = next;
        writer.spare.clear();
        tail.buf.clear();
        tail.rolls.clear();
        tail.segment_bytes = SEGMENT_HEADER_BYTES as u64;
        tail.next_sequence = sequence + 1;
        tail.write_wanted = false;
        tail.sync_soon = false;
        tail.usage = [(
            sequence,
            SegmentUsage {
                bytes: SEGMENT_HEADER_BYTES as u64,
                ..SegmentUsage::default()
            },
        )]
        .into();
        tail.starts = [(sequence, start_lsn)].into();
        for watermark in [
            &self.shared.appended_lsn,
            &self.shared.written_lsn,
            &self.shared.synced_lsn,
        ] {
            watermark.store(start_lsn, Ordering::Release);
        }
        self.shared
            .oldest_sequence
            .store(sequence, Ordering::Release);
        self.shared
            .active_sequence
            .store(sequence, Ordering::Release);
        drop(tail);
        drop(writer);
        self.readers.write().clear();
        self.shared.publish();
        Ok(())
    }

    /// The LSN where segment `sequence` starts, if the log holds it.
    pub fn segment_start(&self, sequence: u64) -> Option<u64> {
        self.shared.tail.lock().starts.get(&sequence).copied()
    }
}
