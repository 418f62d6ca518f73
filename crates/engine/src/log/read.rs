//! Reading records back from the log's segments: the window that replay, compaction
//! and scans read a segment through, and the positional reads that bring back values
//! not held in memory, several records to one read where they lie close together.
//!
//! What it is not for: writing (the rest of [`crate::log`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::disk::ReadFile;
use crate::record::{self, FRAME_BYTES};

use super::{segment_name, Log};

/// A sealed segment read a window at a time, for scanning it without holding it all.
pub(crate) struct Window {
    file: Arc<dyn ReadFile>,
    size: u64,
    start: u64,
    buf: Vec<u8>,
    /// How much one read takes, unless a record needs more.
    span: usize,
}

/// How much a window reads at once when it goes through a whole segment.
const WINDOW_BYTES: usize = 1 << 20;

/// How much it reads at once when it visits scattered records.
const SPARSE_WINDOW_BYTES: usize = 64 << 10;

impl Window {
    /// A window for reading a segment from one end to the other.
    pub fn new(file: Arc<dyn ReadFile>, size: u64) -> Window {
        Window {
            file,
            size,
            start: 0,
            buf: Vec::new(),
            span: WINDOW_BYTES,
        }
    }

    /// A window for visiting some of a segment's records, in order.
    pub fn sparse(file: Arc<dyn ReadFile>, size: u64) -> Window {
        Window {
            span: SPARSE_WINDOW_BYTES,
            ..Window::new(file, size)
        }
    }

    /// At least `want` bytes from `pos` (fewer only where the segment ends).
    pub fn at(&mut self, pos: usize, want: usize) -> std::io::Result<&[u8]> {
        let pos = pos as u64;
        let end = (pos + want as u64).min(self.size);
        if pos < self.start || end > self.start + self.buf.len() as u64 {
            let len = (end - pos).max(self.span as u64).min(self.size - pos);
            self.start = pos;
            self.buf.resize(len as usize, 0);
            self.file.read_exact_at(&mut self.buf, pos)?;
        }
        let from = (pos - self.start) as usize;
        Ok(&self.buf[from..])
    }

    /// Whether the bytes from `pos` to the end of the segment are all zeros: space
    /// reserved for records that were never written, not a torn or corrupt one.
    pub fn zeros_from(&mut self, pos: usize) -> std::io::Result<bool> {
        let size = usize::try_from(self.size).unwrap_or(usize::MAX);
        let mut at = pos;
        while at < size {
            let bytes = self.at(at, (size - at).min(self.span))?;
            let span = bytes.len().min(size - at);
            if span == 0 {
                break;
            }
            if bytes[..span].iter().any(|&b| b != 0) {
                return Ok(false);
            }
            at += span;
        }
        Ok(true)
    }

    /// The record at `pos`, decoded.
    pub fn record(&mut self, pos: usize) -> std::io::Result<record::Decoded<'_>> {
        let body = record::body_len(self.at(pos, FRAME_BYTES)?).unwrap_or(0);
        let whole = FRAME_BYTES + body.min(record::BODY_MAX_BYTES);
        Ok(record::decode(self.at(pos, whole)?))
    }
}

thread_local! {
    /// Each reading thread's buffer for [`PlannedReads::read_here`] (up to 68 KiB), kept
    /// between reads rather than allocated and freed for every miss.
    static READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// How far apart (from the first's start to the last's) records may lie and still be
/// read with one positional read.
const RUN_SPAN_BYTES: u64 = 64 << 10;

/// Whether the record at `place` (segment, offset; not before `first`) is read by
/// the positional read [`Log::read_records`] starts at `first`.
pub(crate) fn in_one_read(first: (u64, u32), place: (u64, u32)) -> bool {
    place.0 == first.0 && u64::from(place.1.saturating_sub(first.1)) <= RUN_SPAN_BYTES
}

/// Reads end on a multiple of this: the page and the direct-I/O block size, so a
/// read never fetches part of a block it then has to fetch again.
const READ_BLOCK_BYTES: u64 = 4096;

/// The first guess at a record's length, before any has been read.
pub(super) const FIRST_RECORD_GUESS_BYTES: u32 = 512;

/// The record that starts `bytes`, if they hold all of it (by its frame's length;
/// checksums are the decoder's business).
fn record_in(bytes: &[u8]) -> Option<&[u8]> {
    bytes.get(..FRAME_BYTES + record::body_len(bytes)?)
}

/// The record at `offset` of `file`, of which `prefix` holds the first bytes: one
/// more read if the prefix holds its frame, else two (frame, then body).
fn finish_record(file: &dyn ReadFile, offset: u32, prefix: &[u8]) -> std::io::Result<Vec<u8>> {
    let Some(body) = record::body_len(prefix) else {
        return read_record_from(file, offset);
    };
    if body > record::BODY_MAX_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a record at {offset} claims {body} bytes"),
        ));
    }
    let mut buf = vec![0u8; FRAME_BYTES + body];
    buf[..prefix.len()].copy_from_slice(prefix);
    file.read_exact_at(
        &mut buf[prefix.len()..],
        u64::from(offset) + prefix.len() as u64,
    )?;
    Ok(buf)
}

/// Reads the whole record at `offset` of `file`: its frame says how long it is.
pub(crate) fn read_record_from(file: &dyn ReadFile, offset: u32) -> std::io::Result<Vec<u8>> {
    let mut frame = [0u8; FRAME_BYTES];
    file.read_exact_at(&mut frame, u64::from(offset))?;
    finish_record(file, offset, &frame)
}

/// The positional reads that fetch some records, planned before any is made
/// ([`Log::plan_reads`]): one read per run of nearby records of one segment. Whoever
/// makes the reads (this thread in [`Log::read_records`], or a caller with a way of
/// its own, such as an io_uring) hands each one's bytes to [`PlannedReads::finish_run`].
pub struct PlannedReads {
    places: Vec<(u64, u32)>,
    /// `places`' indices, in the order of their places.
    order: Vec<usize>,
    runs: Vec<Run>,
    /// Each place's record, once its run is finished.
    out: Vec<Option<std::io::Result<Vec<u8>>>>,
}

/// One read of a plan: `len` bytes of a segment from `offset`, both multiples of the
/// block size.
pub struct Run {
    /// `order[members]` are the places it reads.
    members: std::ops::Range<usize>,
    /// Where its first record starts.
    first: u32,
    /// The segment's read handle, or why it could not be opened.
    file: std::io::Result<Arc<dyn ReadFile>>,
    offset: u64,
    len: usize,
}

impl Run {
    /// The segment to read, if it could be opened.
    pub fn file(&self) -> Option<&Arc<dyn ReadFile>> {
        self.file.as_ref().ok()
    }

    /// Where the read starts in the segment: a multiple of the block size.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// How many bytes to read: a multiple of the block size.
    pub fn span(&self) -> usize {
        self.len
    }
}

impl PlannedReads {
    /// The reads to make.
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// Takes what run `run` read (the bytes from its offset; fewer where the segment
    /// ends) and cuts its records out of them. A record longer than the read is
    /// completed with a positional read on this thread: rare, as reads reach as far
    /// as records have lately been long.
    pub fn finish_run(&mut self, log: &Log, run: usize, read: std::io::Result<&[u8]>) {
        let Run {
            members,
            first,
            file,
            offset,
            ..
        } = &self.runs[run];
        let lead = (u64::from(*first) - offset) as usize;
        let read = match file {
            Ok(file) => read.map(|bytes| (file, bytes)),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        };
        match read {
            Ok((file, bytes)) => {
                let got = bytes.len();
                for &i in &self.order[members.clone()] {
                    let at = self.places[i].1;
                    let from = (lead + (at - first) as usize).min(got);
                    let read = match record_in(&bytes[from..got]) {
                        Some(bytes) => Ok(bytes.to_vec()),
                        None => finish_record(&**file, at, &bytes[from..got]),
                    };
                    if let Ok(bytes) = &read {
                        log.saw_record(bytes.len());
                    }
                    self.out[i] = Some(read);
                }
            }
            Err(e) => {
                for &i in &self.order[members.clone()] {
                    self.out[i] = Some(Err(std::io::Error::new(e.kind(), e.to_string())));
                }
            }
        }
    }

    /// Makes run `run`'s read on this thread, through the thread's read buffer, and
    /// takes what it brought as [`PlannedReads::finish_run`] does.
    pub fn read_here(&mut self, log: &Log, run: usize) {
        READ_BUFFER.with_borrow_mut(|buf| {
            let read = match &self.runs[run].file {
                Ok(file) => {
                    buf.resize(self.runs[run].len, 0);
                    file.read_up_to(buf, self.runs[run].offset)
                        .map(|got| &buf[..got])
                }
                // Nothing read: finish_run reports why the segment could not be opened.
                Err(_) => Ok(&[][..]),
            };
            self.finish_run(log, run, read);
        });
    }

    /// The records, in the order of the places planned; a place whose run was not
    /// finished is an error.
    pub fn into_records(self) -> Vec<std::io::Result<Vec<u8>>> {
        self.out
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(std::io::ErrorKind::NotFound.into())))
            .collect()
    }
}

impl Log {
    /// An open read handle on a segment, opened once and shared. A segment no longer
    /// written is read past the page cache (`O_DIRECT`): Kura keeps the values worth
    /// keeping in its own cache, within `-m`, so the kernel's copy would only take
    /// memory from it and cost a page-cache insert and a reclaim for every miss. The
    /// active segment is read through the page cache, where its newest bytes are
    /// (a direct read would first have to write them back).
    pub fn reader(&self, sequence: u64) -> std::io::Result<Arc<dyn ReadFile>> {
        let sealed = sequence < self.shared.active_sequence.load(Ordering::Acquire);
        if let Some((file, direct)) = self.readers.read().get(&sequence) {
            if *direct || !sealed {
                return Ok(Arc::clone(file));
            }
        }
        let name = segment_name(sequence);
        let file = if sealed {
            self.shared.disk.open_read_direct(&name)?
        } else {
            self.shared.disk.open_read(&name)?
        };
        let mut readers = self.readers.write();
        let entry = readers
            .entry(sequence)
            .or_insert((Arc::clone(&file), sealed));
        if sealed && !entry.1 {
            *entry = (file, true);
        }
        Ok(Arc::clone(&entry.0))
    }
    /// The bytes of the records at `places` (segment, offset), in that order, with as
    /// few positional reads as their places allow ([`Log::plan_reads`]), made on the
    /// calling thread.
    pub fn read_records(&self, places: &[(u64, u32)]) -> Vec<std::io::Result<Vec<u8>>> {
        let mut plan = self.plan_reads(places.to_vec());
        for run in 0..plan.runs.len() {
            plan.read_here(self, run);
        }
        plan.into_records()
    }

    /// Plans the reads of the records at `places` (segment, offset): records of one
    /// segment that lie within [`RUN_SPAN_BYTES`] of each other are read together,
    /// through the block where the last one ends if it is as long as records have
    /// lately been, so a run of small records costs one read, and a lone record one
    /// read rather than frame then body. Each read starts and ends on a block
    /// boundary, so it suits a direct read into an aligned buffer as it stands.
    pub fn plan_reads(&self, places: Vec<(u64, u32)>) -> PlannedReads {
        let mut order: Vec<usize> = (0..places.len()).collect();
        order.sort_unstable_by_key(|&i| places[i]);
        let mut runs = Vec::new();
        let mut run_start = 0;
        while run_start < order.len() {
            let (segment, first) = places[order[run_start]];
            let mut run_end = run_start + 1;
            while run_end < order.len() && in_one_read((segment, first), places[order[run_end]]) {
                run_end += 1;
            }
            let last = places[order[run_end - 1]].1;
            let guess = u64::from(self.record_guess.load(Ordering::Relaxed));
            let offset = u64::from(first) - u64::from(first) % READ_BLOCK_BYTES;
            let end = (u64::from(last) + guess).next_multiple_of(READ_BLOCK_BYTES);
            runs.push(Run {
                members: run_start..run_end,
                first,
                file: self.reader(segment),
                offset,
                len: usize::try_from(end - offset).unwrap_or(usize::MAX),
            });
            run_start = run_end;
        }
        let out = std::iter::repeat_with(|| None).take(places.len()).collect();
        PlannedReads {
            places,
            order,
            runs,
            out,
        }
    }

    /// Moves the guess at a record's length towards one just read: up at once, so
    /// the next read of a record that long is one read, and down slowly, so a few
    /// short records among long ones do not undo it.
    fn saw_record(&self, len: usize) {
        let len = u32::try_from(len)
            .unwrap_or(u32::MAX)
            .min(RUN_SPAN_BYTES as u32);
        let guess = self.record_guess.load(Ordering::Relaxed);
        let next = if len > guess {
            len
        } else {
            guess - (guess - len) / 16
        };
        if next != guess {
            self.record_guess.store(next, Ordering::Relaxed);
        }
    }
}
