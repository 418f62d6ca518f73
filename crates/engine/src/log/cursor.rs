//! Following the log from a position: its records in order, from any LSN the log
//! still holds, across segments, up to a bound the reader gives (the synced LSN, for a
//! replica: it must never hold a record this node could still lose).
//!
//! A cursor pins the segment it stands in: compaction removes neither it nor any later
//! one while the cursor lives ([`Log::remove_segment`]), so a reader that falls behind
//! holds the log on disk, not in memory. Positions map to places by arithmetic: a
//! segment's records follow its header back to back and the LSN counts their bytes, so
//! LSN `l` in a segment that starts at LSN `s` is at offset `header + (l - s)`.
//!
//! What it is not for: replay at start (`recovery.rs`, which must also judge a torn
//! tail), and the reads of single records for values not in memory (`read.rs`).

use std::sync::Arc;

use crate::record::{self, Decoded, Record, FRAME_BYTES, SEGMENT_HEADER_BYTES};
use crate::Error;

use super::{Location, Log, Shared, Window};

/// A reader of the log from a position; see the module's notes.
pub struct Cursor {
    shared: Arc<Shared>,
    pin: u64,
    segment: u64,
    offset: u64,
    lsn: u64,
    /// The window over `segment`, and how far it reads.
    window: Option<(Window, u64)>,
    /// Where the records of `segment` ended when last asked, and whether it was
    /// sealed then: asked again only on reaching it, so that a long read does not take
    /// the log's tail lock for every record.
    known_end: (u64, bool),
}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("segment", &self.segment)
            .field("offset", &self.offset)
            .field("lsn", &self.lsn)
            .finish()
    }
}

impl Log {
    /// A cursor at `lsn`, or None when the log no longer holds it (compacted away) or
    /// does not hold it yet.
    pub(crate) fn follow(&self, lsn: u64) -> Option<Cursor> {
        let mut tail = self.shared.tail.lock();
        if lsn
            > self
                .shared
                .appended_lsn
                .load(std::sync::atomic::Ordering::Acquire)
        {
            return None;
        }
        let (&segment, &start) = tail.starts.iter().rev().find(|(_, &start)| start <= lsn)?;
        let offset = SEGMENT_HEADER_BYTES as u64 + (lsn - start);
        if offset > tail.usage.get(&segment)?.bytes {
            return None;
        }
        let pin = tail.next_pin;
        tail.next_pin += 1;
        tail.pins.insert(pin, segment);
        Some(Cursor {
            shared: Arc::clone(&self.shared),
            pin,
            segment,
            offset,
            lsn,
            window: None,
            known_end: (0, false),
        })
    }

    /// A cursor at the oldest record the log holds.
    pub(crate) fn follow_oldest(&self) -> Option<Cursor> {
        let start = {
            let tail = self.shared.tail.lock();
            let oldest = *tail.usage.keys().next()?;
            *tail.starts.get(&oldest)?
        };
        self.follow(start)
    }
}

impl Cursor {
    /// The LSN the cursor stands at: the end of the last record it read.
    pub fn lsn(&self) -> u64 {
        self.lsn
    }

    /// The segment the cursor stands in.
    pub fn segment(&self) -> u64 {
        self.segment
    }

    /// Reads records from the cursor's position up to LSN `until` (which must be where a
    /// record ends: a watermark of the log), about `max_bytes` of them, and moves past
    /// them. A batch is read whole once its first record is, so that the reader can
    /// apply it whole. `visit` gets each record's place, the record, its bytes as they
    /// are on disk, and the LSN at its end. Returns the bytes read.
    pub(crate) fn read(
        &mut self,
        log: &Log,
        until: u64,
        max_bytes: u64,
        mut visit: impl FnMut(Location, &Record<'_>, &[u8], u64),
    ) -> Result<u64, Error> {
        let mut read = 0u64;
        // Records of a batch still to read before stopping is allowed.
        let mut in_batch = 0u32;
        while self.lsn < until && (read < max_bytes || in_batch > 0) {
            if self.offset >= self.known_end.0 {
                self.known_end = self.segment_end()?;
                if self.offset >= self.known_end.0 {
                    if !self.known_end.1 {
                        break;
                    }
                    self.next_segment()?;
                    continue;
                }
            }
            let end = self.known_end.0.min(self.offset + (until - self.lsn));
            if self.window.as_ref().is_none_or(|(_, size)| *size < end) {
                self.window = Some((Window::new(log.reader(self.segment)?, end), end));
            }
            let Some((window, _)) = self.window.as_mut() else {
                break;
            };
            let pos = self.offset as usize;
            let body = record::body_len(window.at(pos, FRAME_BYTES)?).unwrap_or(0);
            let len = FRAME_BYTES + body.min(record::BODY_MAX_BYTES);
            let bytes = window.at(pos, len)?;
            let bytes = &bytes[..len.min(bytes.len())];
            let Decoded::Record(rec, len) = record::decode(bytes) else {
                return Err(Error::Format(format!(
                    "segment {} is damaged at {}, LSN {}",
                    self.segment, self.offset, self.lsn
                )));
            };
            let place = Location {
                segment: self.segment,
                offset: u32::try_from(self.offset).unwrap_or(u32::MAX),
                len: u32::try_from(len).unwrap_or(u32::MAX),
            };
            self.offset += len as u64;
            self.lsn += len as u64;
            read += len as u64;
            in_batch = match rec {
                Record::Batch { count, .. } => count,
                _ => in_batch.saturating_sub(1),
            };
            visit(place, &rec, &bytes[..len], self.lsn);
        }
        Ok(read)
    }

    /// The end of the records in the cursor's segment, and whether it is sealed (no
    /// more will come to it).
    fn segment_end(&self) -> Result<(u64, bool), Error> {
        let tail = self.shared.tail.lock();
        let bytes = tail
            .usage
            .get(&self.segment)
            .map(|u| u.bytes)
            .ok_or_else(|| Error::Format(format!("segment {} is gone", self.segment)))?;
        Ok((bytes, self.segment < tail.next_sequence - 1))
    }

    /// Moves the cursor, and its pin, to the start of the next segment.
    fn next_segment(&mut self) -> Result<(), Error> {
        let mut tail = self.shared.tail.lock();
        let next = self.segment + 1;
        match tail.starts.get(&next) {
            Some(&start) if start == self.lsn => {}
            other => {
                return Err(Error::Format(format!(
                    "segment {next} starts at LSN {other:?}, segment {} ends at {}",
                    self.segment, self.lsn
                )))
            }
        }
        tail.pins.insert(self.pin, next);
        self.segment = next;
        self.offset = SEGMENT_HEADER_BYTES as u64;
        self.window = None;
        self.known_end = (0, false);
        Ok(())
    }
}

impl Drop for Cursor {
    fn drop(&mut self) {
        self.shared.tail.lock().pins.remove(&self.pin);
    }
}
