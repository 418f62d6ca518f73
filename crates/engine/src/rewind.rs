//! Rewinding a replica's log: cutting the records its new primary never had. A node
//! that was a primary (or a replica ahead of the one promoted) holds records past the
//! point where the new primary's epoch began; to follow the new primary it keeps its
//! log up to that point and drops the rest. The index has no way back to the versions
//! the dropped records replaced, so the kept records are applied again, as a full copy
//! would apply them, but read from this node's own disk: as the log starts again
//! empty, the segments it keeps are set aside under other names
//! (`Log::restart_at`), and their records up to the cut are copied back in
//! ([`SetAside::read_runs`]) before the new primary's stream.
//!
//! The rewind floor: a segment removed by compaction (or by a primary's trim) was
//! made redundant by copies written later, and a rewind that cuts those copies loses
//! the segment's live records. So before a segment is removed, the log's end at that
//! moment is recorded (`rewind-floor`, synced), and a rewind to below it is refused:
//! that node gets a full copy instead.
//!
//! Invariants (crash safety): every step leaves the log a prefix of the log before the
//! rewind, or of the one after it, which are both prefixes of the new primary's; a
//! replica goes on from any such prefix. Segments past the cut are removed newest
//! first, then the kept ones renamed newest first, only once no cursor follows the
//! log; set-aside files left by a crash are removed when the store opens.
//!
//! What it is not for: deciding where to cut (`history.rs`, the primary), or the
//! stream that follows (`follow.rs`).

use std::sync::Arc;

use crate::disk::Disk;
use crate::log::{segment_name, Window};
use crate::record::{Decoded, Record, SEGMENT_HEADER_BYTES};
use crate::{Error, History, Store};

pub(crate) const FLOOR_FILE: &str = "rewind-floor";
const FLOOR_TEMP_FILE: &str = "rewind-floor.tmp";
const FLOOR_MAGIC: &[u8; 8] = b"KURAFLOR";
const FLOOR_VERSION: u32 = 1;
/// Set-aside segments are named `rewind.<segment file name>`.
const ASIDE_PREFIX: &str = "rewind.";

/// About how many bytes of records one run of [`SetAside::read_runs`] holds.
const RUN_BYTES: usize = 256 << 10;

pub(crate) fn aside_name(sequence: u64) -> String {
    format!("{ASIDE_PREFIX}{}", segment_name(sequence))
}

/// The rewind floor stored in `disk`'s directory (0 when there is none).
pub(crate) fn load_floor(disk: &dyn Disk) -> Result<u64, Error> {
    let bytes = match disk.read(FLOOR_FILE) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let bad = |why: &str| Error::Format(format!("{FLOOR_FILE}: {why}"));
    if bytes.len() != 24 || &bytes[..8] != FLOOR_MAGIC {
        return Err(bad("not a Kura rewind floor"));
    }
    let (body, crc) = bytes.split_at(20);
    if crc32c::crc32c(body).to_le_bytes() != crc {
        return Err(bad("checksum mismatch"));
    }
    let version = u32::from_le_bytes([body[8], body[9], body[10], body[11]]);
    if version != FLOOR_VERSION {
        return Err(bad(&format!(
            "version {version}, this Kura reads {FLOOR_VERSION}"
        )));
    }
    let mut lsn = [0u8; 8];
    lsn.copy_from_slice(&body[12..20]);
    Ok(u64::from_le_bytes(lsn))
}

/// Replaces the stored rewind floor, durably.
pub(crate) fn store_floor(disk: &dyn Disk, lsn: u64) -> std::io::Result<()> {
    let mut bytes = Vec::with_capacity(24);
    bytes.extend_from_slice(FLOOR_MAGIC);
    bytes.extend_from_slice(&FLOOR_VERSION.to_le_bytes());
    bytes.extend_from_slice(&lsn.to_le_bytes());
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    let mut file = disk.create(FLOOR_TEMP_FILE)?;
    file.append(&bytes)?;
    file.sync()?;
    disk.rename(FLOOR_TEMP_FILE, FLOOR_FILE)?;
    disk.sync_dir()
}

/// Removes segments a rewind set aside and a crash left behind: the log is a prefix
/// without them.
pub(crate) fn remove_leftovers(disk: &dyn Disk) -> std::io::Result<()> {
    let mut removed = false;
    for name in disk.list()? {
        if name.starts_with(ASIDE_PREFIX) {
            disk.remove(&name)?;
            removed = true;
        }
    }
    if removed {
        disk.sync_dir()?;
    }
    Ok(())
}

/// What a rewind keeps of the log: its segments up to the cut, set aside under other
/// names when the log starts again, to be copied back in.
struct SetAside {
    disk: Arc<dyn Disk>,
    /// Each set-aside segment and the LSN it starts at, oldest first.
    segments: Vec<(u64, u64)>,
    /// Where the log is cut.
    until: u64,
}

impl SetAside {
    /// The oldest set-aside segment and its starting LSN: where the log starts again.
    fn first(&self) -> (u64, u64) {
        self.segments[0]
    }

    /// Calls `visit(segment, start_lsn, bytes)` with the set-aside records up to the
    /// cut, in order, in runs of whole records and whole batches.
    fn read_runs(
        &self,
        mut visit: impl FnMut(u64, u64, &[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut run = Vec::with_capacity(RUN_BYTES + 4096);
        let mut lsn = self.segments[0].1;
        for &(sequence, start_lsn) in &self.segments {
            if lsn >= self.until {
                break;
            }
            if start_lsn != lsn {
                return Err(Error::Format(format!(
                    "set-aside segment {sequence} starts at LSN {start_lsn}, the one before ends at {lsn}"
                )));
            }
            let file = self.disk.open_read(&aside_name(sequence))?;
            let size = file.size()?;
            let mut data = Window::new(file, size);
            let mut pos = SEGMENT_HEADER_BYTES;
            let mut run_start = lsn;
            while lsn < self.until && (pos as u64) < size {
                let len = match data.record(pos)? {
                    Decoded::Record(Record::Batch { bytes, .. }, len) => len + bytes as usize,
                    Decoded::Record(_, len) => len,
                    // Zeros where the segment had space reserved: its end.
                    Decoded::Truncated | Decoded::Corrupt => break,
                };
                let unit = data.at(pos, len)?;
                if unit.len() < len || lsn + len as u64 > self.until {
                    return Err(Error::Format(format!(
                        "the cut at LSN {} is not at a record's end in segment {sequence}",
                        self.until
                    )));
                }
                run.extend_from_slice(&unit[..len]);
                pos += len;
                lsn += len as u64;
                if run.len() >= RUN_BYTES {
                    visit(sequence, run_start, &run)?;
                    run.clear();
                    run_start = lsn;
                }
            }
            if !run.is_empty() {
                visit(sequence, run_start, &run)?;
                run.clear();
            }
        }
        if lsn != self.until {
            return Err(Error::Format(format!(
                "the set-aside log ends at LSN {lsn}, before the cut at {}",
                self.until
            )));
        }
        Ok(())
    }

    /// Removes the set-aside segments, once their records are back in the log.
    fn finish(self) -> Result<(), Error> {
        for &(sequence, _) in &self.segments {
            match self.disk.remove(&aside_name(sequence)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.disk.sync_dir()?;
        Ok(())
    }
}

impl Store {
    /// The lowest LSN this log can be rewound to: the rewind floor, and above the start
    /// of its oldest segment (a rewind keeps at least one record).
    pub fn rewind_floor(&self) -> u64 {
        let oldest = self.segment_start(self.oldest_segment()).unwrap_or(0);
        self.log.rewind_floor().max(oldest + 1)
    }

    /// What a rewind of this replica's log to `lsn` keeps (see the module's notes),
    /// with everything appended on disk. `lsn` must be a record's end, not below
    /// [`Store::rewind_floor`].
    fn plan_rewind(&self, lsn: u64) -> Result<SetAside, Error> {
        if !self.is_read_only() {
            return Err(Error::Format(
                "only a replica's store rewinds its log".to_string(),
            ));
        }
        let _no_compaction = self.compaction.lock();
        let floor = self.rewind_floor();
        let appended = self.appended_lsn();
        if lsn < floor || lsn > appended {
            return Err(Error::Format(format!(
                "the log can be rewound to LSN {floor} to {appended}, not {lsn}"
            )));
        }
        self.log.force_sync()?;
        let segments: Vec<(u64, u64)> = self
            .log
            .usage()
            .iter()
            .filter_map(|&(sequence, _)| Some((sequence, self.segment_start(sequence)?)))
            .filter(|&(_, start)| start < lsn)
            .collect();
        if segments.is_empty() {
            return Err(Error::Format(format!(
                "the log holds nothing before LSN {lsn} to keep"
            )));
        }
        Ok(SetAside {
            disk: Arc::clone(&self.disk),
            segments,
            until: lsn,
        })
    }

    /// Rewinds this replica's log to `lsn` (a record's end, not below
    /// [`Store::rewind_floor`]) and takes `history`: the log is started again and its
    /// records up to `lsn` applied again through `apply` (the caller's
    /// [`Store::apply_copied`], or one that keeps more in step with it). Until they
    /// are back, reads miss what is not in memory.
    pub fn rewind_log(
        &self,
        lsn: u64,
        history: History,
        mut apply: impl FnMut(&[u8], u64) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let aside = self.plan_rewind(lsn)?;
        let (sequence, start_lsn) = aside.first();
        let floor = self.log.rewind_floor();
        let kept: Vec<u64> = aside.segments.iter().map(|&(s, _)| s).collect();
        self.restart_log_keeping(sequence, start_lsn, history, floor, &kept)?;
        aside.read_runs(|segment, start_lsn, bytes| {
            if segment != self.active_segment() {
                self.start_segment(segment, start_lsn)?;
            }
            apply(bytes, start_lsn)
        })?;
        aside.finish()
    }
}
