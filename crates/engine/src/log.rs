//! The log writer: appends records to an in-memory tail under a short lock; whoever
//! writes takes the whole tail, so writes from many connections share one `write(2)`
//! and, in fsync mode, one fsync (group commit). No thread holds the tail lock while
//! doing I/O.
//!
//! Who writes depends on the durability mode:
//! - `Fsync`: one flusher thread writes and fdatasyncs; request threads never block on
//!   the disk, they wait to be told.
//! - `Interval`: the request thread that needs its reply acknowledged writes the tail
//!   itself ([`Log::write_now`]), under the writer lock: an acknowledgement is only a
//!   `write(2)` away and needs no other thread to wake up. A request thread that finds
//!   the lock taken does not wait for it: it leaves a request, and the holder writes
//!   the tail again as it lets go (flat combining). Waiting would stall the thread's
//!   other connections for as long as the holder is preempted, and on a busy machine
//!   that is a time slice. The flusher fsyncs every interval through a second handle,
//!   without holding the writer lock.
//! - `None`: replies do not wait; the flusher writes the tail in the background.
//!
//! Positions: an LSN is the count of record bytes appended since the log was created
//! (segment headers excluded); a record "is at" the LSN of its end. Three watermarks
//! move forward only: appended ≥ written ≥ synced. What counts as acknowledged depends
//! on the mode (see [`Durability`]).
//!
//! Segments: when the active segment would outgrow its size limit the writer starts a new
//! one. The old one is synced before the first byte goes to the new one, in every mode,
//! so only the newest segment can ever have a torn tail.
//!
//! Lock order: writer, then tail.

use std::collections::BTreeMap;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::disk::{Disk, DiskFile, ReadFile};
use crate::index::{MAX_SEGMENT_BYTES, SEGMENT_WINDOW};
use crate::key::Class;
use crate::record::{self, Record, SEGMENT_HEADER_BYTES};
use crate::store::{Ack, Durability};
use crate::Error;

mod copy;
mod cursor;
mod flush;
mod read;

pub(crate) use copy::Copied;
pub use cursor::Cursor;
use read::FIRST_RECORD_GUESS_BYTES;
pub(crate) use read::{in_one_read, read_record_from, Window};
pub use read::{PlannedReads, Run};

/// The file name of segment `sequence`.
pub(crate) fn segment_name(sequence: u64) -> String {
    format!("{sequence:016x}.log")
}

/// The sequence number in a segment's file name, if it is one.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".log")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// Durability none: the tail is handed to the flusher once it holds this much.
const UNDURABLE_BATCH_BYTES: usize = 256 << 10;

/// Interval mode: when the active segment comes within this fraction of its size of
/// the end, the flusher syncs it at once instead of at the interval. A roll syncs the
/// segment it leaves while holding the writer lock, and no request thread can write
/// past a roll, so every write waits for that sync; synced early, it has only the
/// last sixteenth to sync. Measured on the development machine with 64 MiB segments
/// written at ~18 MB/s: the roll's sync took 1.5–15 ms (whatever the interval had left
/// unsynced), and takes ~4 ms (the 220 ms since the early sync).
const EARLY_SYNC_FRACTION: u64 = 16;

/// How many tails in a row a request thread writes for others who asked while it held
/// the writer lock, before it leaves the rest to the flusher and goes back to its own
/// connections.
const COMBINED_WRITES: usize = 4;

/// Where a record sits: its segment, its offset there, and its encoded length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    pub segment: u64,
    pub offset: u32,
    pub len: u32,
}

/// A segment's size and how many of its bytes are records the index still points at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SegmentUsage {
    pub bytes: u64,
    pub live_bytes: u64,
    /// The part of `live_bytes` that holds memcached's keys: what an immediate
    /// `flush_all` frees at once (see [`crate::key`]).
    pub memcached_live_bytes: u64,
}

impl SegmentUsage {
    pub fn add_live(&mut self, class: Class, len: u64) {
        self.live_bytes += len;
        if class == Class::Memcached {
            self.memcached_live_bytes += len;
        }
    }

    pub fn free(&mut self, class: Class, len: u64) {
        self.live_bytes = self.live_bytes.saturating_sub(len);
        if class == Class::Memcached {
            self.memcached_live_bytes = self.memcached_live_bytes.saturating_sub(len);
        }
    }

    /// Every version of memcached's keys is gone: an immediate `flush_all`.
    pub fn free_memcached(&mut self) {
        self.live_bytes = self.live_bytes.saturating_sub(self.memcached_live_bytes);
        self.memcached_live_bytes = 0;
    }
}

/// Whether an appended record holds a version the index will point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holds {
    /// A put: live until a newer record of its key or a removal frees it.
    Version,
    /// Deletes, touches, flushes, CAS floors: garbage as soon as written, kept only
    /// for replay until compaction drops them.
    Nothing,
}

struct Tail {
    buf: Vec<u8>,
    /// Where in `buf` new segments start.
    rolls: Vec<Roll>,
    /// Bytes in the newest segment, counting what is still in `buf`.
    segment_bytes: u64,
    next_sequence: u64,
    shutdown: bool,
    /// The flusher should write the tail: a request thread left it a segment roll,
    /// or (durability none) the tail has grown. See [`Shared::write_tail`].
    write_wanted: bool,
    /// Interval mode: the active segment is near its end, and the flusher should sync
    /// it now rather than at the interval ([`EARLY_SYNC_FRACTION`]).
    sync_soon: bool,
    /// Every segment on disk or being written, oldest first.
    usage: BTreeMap<u64, SegmentUsage>,
    /// The LSN where each segment starts, where it is known (not in a segment of
    /// format 1 or 2 that replay did not read).
    starts: BTreeMap<u64, u64>,
    /// The segments cursors stand in, by cursor: compaction leaves them and every later
    /// one on disk ([`Log::remove_segment`]).
    pins: BTreeMap<u64, u64>,
    next_pin: u64,
}

impl Tail {
    fn free(&mut self, location: Location, class: Class) {
        if let Some(usage) = self.usage.get_mut(&location.segment) {
            usage.free(class, u64::from(location.len));
        }
    }
}

/// What the writer lock guards: the active segment, and a spare buffer to swap with
/// the tail. (`disk` is also reachable without the lock, through `Shared::disk`.)
struct Writer {
    disk: Arc<dyn Disk>,
    active: Box<dyn DiskFile>,
    spare: Vec<u8>,
}

struct Shared {
    disk: Arc<dyn Disk>,
    tail: Mutex<Tail>,
    writer: Mutex<Writer>,
    flusher_wake: Condvar,
    appended_lsn: AtomicU64,
    written_lsn: AtomicU64,
    synced_lsn: AtomicU64,
    poisoned: AtomicBool,
    /// Interval mode: a request thread found the writer lock taken and left its records
    /// for the holder to write. See [`Shared::write_or_ask`].
    write_requested: AtomicBool,
    ack_lock: Mutex<()>,
    ack_cond: Condvar,
    /// Held by whoever syncs the active segment through a second handle, from taking
    /// the handle until the synced LSN is raised, so that [`Log::restart_at`] never
    /// sees an old segment's sync land after it.
    sync_aside: Mutex<()>,
    durability: Durability,
    fsync_interval: Duration,
    segment_size_bytes: u64,
    /// The oldest segment not yet removed. The index's addresses name a segment by its
    /// number modulo [`SEGMENT_WINDOW`], so the log never spans more than that.
    oldest_sequence: AtomicU64,
    /// The segment being written; those before it are sealed.
    active_sequence: AtomicU64,
    /// The lowest LSN the log may be rewound to (`rewind.rs`): its end when a segment
    /// was last removed.
    rewind_floor: AtomicU64,
    on_ack: Option<Arc<dyn Fn(Ack) + Send + Sync>>,
    on_synced: Option<Arc<dyn Fn(u64) + Send + Sync>>,
}

impl Shared {
    fn acked_lsn(&self) -> u64 {
        match self.durability {
            Durability::Fsync => self.synced_lsn.load(Ordering::Acquire),
            Durability::Interval => self.written_lsn.load(Ordering::Acquire),
            Durability::None => self.appended_lsn.load(Ordering::Acquire),
        }
    }

    fn publish(&self) {
        let ack = if self.poisoned.load(Ordering::Acquire) {
            Ack::Failed
        } else {
            Ack::UpTo(self.acked_lsn())
        };
        {
            let _guard = self.ack_lock.lock();
            self.ack_cond.notify_all();
        }
        if let Some(on_ack) = &self.on_ack {
            on_ack(ack);
        }
        if let Some(on_synced) = &self.on_synced {
            on_synced(self.synced_lsn.load(Ordering::Acquire));
        }
    }

    fn poison(&self, e: &std::io::Error) {
        tracing::error!("log write failed, refusing further writes: {e}");
        self.poisoned.store(true, Ordering::Release);
        self.publish();
    }

    /// Interval mode: writes the tail if the writer lock is free, then writes again
    /// for whoever asked meanwhile. If the lock is taken, asks its holder and returns.
    ///
    /// Why nothing is lost: an asker appends, sets `write_requested`, then tries the
    /// lock. A holder clears the flag before it takes the tail, and looks at it again
    /// after letting go; SeqCst fences on both sides order each flag access against the
    /// lock word. So either the holder's write took the asker's records, or the holder
    /// sees the flag after letting go, or the asker got the lock itself.
    fn write_or_ask(&self) -> std::io::Result<()> {
        for _ in 0..COMBINED_WRITES {
            if self.written_lsn.load(Ordering::Acquire) >= self.appended_lsn.load(Ordering::Acquire)
            {
                return Ok(());
            }
            self.write_requested.store(true, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            let Some(mut writer) = self.writer.try_lock() else {
                return Ok(());
            };
            self.write_requested.store(false, Ordering::SeqCst);
            let written = self.write_tail(&mut writer, false);
            drop(writer);
            written?;
            self.publish();
            fence(Ordering::SeqCst);
            if !self.write_requested.load(Ordering::SeqCst) {
                return Ok(());
            }
        }
        // Others keep asking: the flusher takes over, and this thread goes back to its
        // own connections.
        self.tail.lock().write_wanted = true;
        self.flusher_wake.notify_one();
        Ok(())
    }

    /// Called by a thread other than a request thread right after it let go of the
    /// writer lock: writes what request threads asked for while it held it.
    fn take_requests(&self) -> std::io::Result<()> {
        fence(Ordering::SeqCst);
        if self.write_requested.load(Ordering::SeqCst) {
            self.write_or_ask()?;
        }
        Ok(())
    }

    /// Writes everything in the tail. The caller holds the writer lock, which keeps
    /// batches in order. Returns the LSN written through.
    ///
    /// A request thread passes `rolls: false`: starting a segment syncs the one left
    /// (up to an interval's worth of writes, tens of milliseconds), creates a file and
    /// syncs the directory, all under the writer lock, which would stall its
    /// connections and every other thread's writes. If the tail holds a roll, the
    /// write is left to the flusher, which is woken for it, and nothing is written.
    fn write_tail(&self, writer: &mut Writer, rolls: bool) -> std::io::Result<u64> {
        let (end_lsn, rolls) = {
            let mut tail = self.tail.lock();
            if !rolls && !tail.rolls.is_empty() {
                tail.write_wanted = true;
                drop(tail);
                self.flusher_wake.notify_one();
                return Ok(self.written_lsn.load(Ordering::Acquire));
            }
            tail.write_wanted = false;
            std::mem::swap(&mut tail.buf, &mut writer.spare);
            let rolls = std::mem::take(&mut tail.rolls);
            (self.appended_lsn.load(Ordering::Acquire), rolls)
        };
        let Writer {
            disk,
            active,
            spare,
        } = writer;
        let result = if spare.is_empty() {
            Ok(())
        } else {
            write_batch(&**disk, active, spare, &rolls, self.segment_size_bytes)
        };
        spare.clear();
        if spare.capacity() > (8 << 20) {
            *spare = Vec::with_capacity(1 << 16);
        }
        result?;
        self.written_lsn.fetch_max(end_lsn, Ordering::AcqRel);
        Ok(end_lsn)
    }
}

/// Encodes `record` (`len` bytes) at the end of the tail, in `segment`, and settles
/// the segment's account.
fn push_record(
    tail: &mut Tail,
    segment: u64,
    record: &Record<'_>,
    len: u64,
    holds: Holds,
    frees: Option<Location>,
    lsn: u64,
) -> Appended {
    record::encode(record, &mut tail.buf);
    let class = record.key().map_or(Class::Memcached, |k| k.space.class());
    account(tail, segment, len, holds, frees, class, lsn)
}

/// Settles the account of a record of `len` bytes (a key of `class`) that was just put
/// at the end of the tail, in `segment`: where it sits, the segment's size and live
/// bytes, and the live bytes of the version it frees.
fn account(
    tail: &mut Tail,
    segment: u64,
    len: u64,
    holds: Holds,
    frees: Option<Location>,
    class: Class,
    lsn: u64,
) -> Appended {
    let offset = u32::try_from(tail.segment_bytes).unwrap_or(u32::MAX);
    tail.segment_bytes += len;
    let usage = tail.usage.entry(segment).or_default();
    usage.bytes += len;
    if holds == Holds::Version {
        usage.add_live(class, len);
    }
    if let Some(freed) = frees {
        tail.free(freed, class);
    }
    Appended {
        lsn,
        location: Location {
            segment,
            offset,
            len: u32::try_from(len).unwrap_or(u32::MAX),
        },
    }
}

/// Where the log resumes after recovery.
pub(crate) struct Resume {
    pub active: Box<dyn DiskFile>,
    pub active_sequence: u64,
    pub active_bytes: u64,
    pub lsn: u64,
    /// Every segment's size and live bytes as replay found them, the active one too.
    pub usage: BTreeMap<u64, SegmentUsage>,
    /// The LSN where each segment starts, where replay knows it.
    pub starts: BTreeMap<u64, u64>,
}

/// One record of a batch to append: see [`Log::append`].
#[derive(Debug, Clone)]
pub(crate) struct Append<'a> {
    pub record: Record<'a>,
    pub holds: Holds,
    pub frees: Option<Location>,
}

/// A record appended: its LSN and where it will sit on disk.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Appended {
    pub lsn: u64,
    pub location: Location,
}

pub(crate) struct Log {
    shared: Arc<Shared>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// In place of the flusher thread, for tests (`Options::stepped_flusher`).
    stepped: Option<Mutex<flush::Stepped>>,
    /// Read handles on segments, for values not held in memory.
    readers: parking_lot::RwLock<std::collections::HashMap<u64, SegmentReader>>,
    /// How long a record read back is likely to be (encoded bytes): how far past the
    /// last record's start a read goes. See [`Log::saw_record`].
    record_guess: AtomicU32,
}

/// A read handle on a segment, and whether it reads past the page cache.
type SegmentReader = (Arc<dyn ReadFile>, bool);

pub(crate) struct LogConfig {
    pub durability: Durability,
    pub fsync_interval: Duration,
    pub segment_size_bytes: u64,
    pub on_ack: Option<Arc<dyn Fn(Ack) + Send + Sync>>,
    pub on_synced: Option<Arc<dyn Fn(u64) + Send + Sync>>,
    pub stepped_flusher: bool,
}

thread_local! {
    /// The log whose flusher this thread wakes later ([`Log::wake_later`]), and
    /// whether it is to be woken.
    static WAKE_LATER: std::cell::Cell<Option<(*const Shared, bool)>> =
        const { std::cell::Cell::new(None) };
}

/// [`Log::wake_later`]'s guard: wakes the flusher when it drops, if an append asked.
pub(crate) struct WakeLater<'a> {
    log: &'a Log,
    outer: Option<(*const Shared, bool)>,
}

impl WakeLater<'_> {
    /// Whether this thread postpones waking `shared`'s flusher; if so, notes that it
    /// is wanted.
    fn postpones(shared: &Arc<Shared>) -> bool {
        WAKE_LATER.with(|w| match w.get() {
            Some((log, _)) if std::ptr::eq(log, Arc::as_ptr(shared)) => {
                w.set(Some((log, true)));
                true
            }
            _ => false,
        })
    }
}

impl Drop for WakeLater<'_> {
    fn drop(&mut self) {
        let wanted = WAKE_LATER.with(|w| w.replace(self.outer))
            == Some((Arc::as_ptr(&self.log.shared), true));
        if wanted {
            self.log.shared.flusher_wake.notify_one();
        }
    }
}

impl Log {
    pub fn start(disk: Arc<dyn Disk>, resume: Resume, config: LogConfig) -> Result<Log, Error> {
        let segment_size_bytes = config
            .segment_size_bytes
            .clamp(SEGMENT_HEADER_BYTES as u64 + 1, MAX_SEGMENT_BYTES);
        let mut active = resume.active;
        active.reserve(segment_size_bytes)?;
        let oldest = resume
            .usage
            .keys()
            .next()
            .copied()
            .unwrap_or(resume.active_sequence);
        let rewind_floor = crate::rewind::load_floor(&*disk)?;
        let shared = Arc::new(Shared {
            disk: Arc::clone(&disk),
            tail: Mutex::new(Tail {
                buf: Vec::with_capacity(1 << 16),
                rolls: Vec::new(),
                segment_bytes: resume.active_bytes,
                next_sequence: resume.active_sequence + 1,
                shutdown: false,
                write_wanted: false,
                sync_soon: false,
                usage: resume.usage,
                starts: resume.starts,
                pins: BTreeMap::new(),
                next_pin: 0,
            }),
            writer: Mutex::new(Writer {
                disk,
                active,
                spare: Vec::with_capacity(1 << 16),
            }),
            flusher_wake: Condvar::new(),
            appended_lsn: AtomicU64::new(resume.lsn),
            written_lsn: AtomicU64::new(resume.lsn),
            synced_lsn: AtomicU64::new(resume.lsn),
            poisoned: AtomicBool::new(false),
            write_requested: AtomicBool::new(false),
            ack_lock: Mutex::new(()),
            ack_cond: Condvar::new(),
            sync_aside: Mutex::new(()),
            durability: config.durability,
            fsync_interval: config.fsync_interval,
            segment_size_bytes,
            oldest_sequence: AtomicU64::new(oldest),
            active_sequence: AtomicU64::new(resume.active_sequence),
            rewind_floor: AtomicU64::new(rewind_floor),
            on_ack: config.on_ack,
            on_synced: config.on_synced,
        });
        let (handle, stepped) = if config.stepped_flusher {
            (None, Some(Mutex::new(flush::Stepped::new())))
        } else {
            let flusher_shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name("kura-log-flusher".to_string())
                .spawn(move || flush::flusher(flusher_shared))?;
            (Some(handle), None)
        };
        Ok(Log {
            shared,
            flusher: Mutex::new(handle),
            stepped,
            readers: Default::default(),
            record_guess: AtomicU32::new(FIRST_RECORD_GUESS_BYTES),
        })
    }

    /// Appends a record to the tail. `holds` says whether the index will point at it;
    /// `frees` is the record it makes dead, if any (the key's previous version), for the
    /// per-segment live-bytes account. The caller holds the key's shard lock, which is
    /// what orders records of one key.
    pub fn append(
        &self,
        record: &Record<'_>,
        holds: Holds,
        frees: Option<Location>,
    ) -> Result<Appended, Error> {
        if self.shared.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        let len = record::encoded_len(record) as u64;
        let mut tail = self.shared.tail.lock();
        let (segment, before) = self.make_room(&mut tail, len)?;
        let lsn = self.shared.appended_lsn.load(Ordering::Relaxed) + len;
        let appended = push_record(&mut tail, segment, record, len, holds, frees, lsn);
        self.appended(tail, before, lsn, false);
        Ok(appended)
    }

    /// Appends records as one change: more than one goes behind a batch record, all in
    /// one segment, so that replay applies all or none of them (see [`crate::record`]).
    /// Returns where each went; every one has the LSN of the batch's end, which is what
    /// a reply reporting any of them waits for. The caller holds the shard locks of
    /// every key in `records`.
    pub fn append_batch(&self, records: &[Append<'_>]) -> Result<Vec<Appended>, Error> {
        if let [one] = records {
            return Ok(vec![self.append(&one.record, one.holds, one.frees)?]);
        }
        if self.shared.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned);
        }
        assert!(!records.is_empty(), "an empty batch");
        let lens: Vec<u64> = records
            .iter()
            .map(|a| record::encoded_len(&a.record) as u64)
            .collect();
        let records_len: u64 = lens.iter().sum();
        let header = Record::Batch {
            count: u32::try_from(records.len()).unwrap_or(u32::MAX),
            bytes: u32::try_from(records_len).unwrap_or(u32::MAX),
        };
        let header_len = record::encoded_len(&header) as u64;
        let len = header_len + records_len;
        let mut tail = self.shared.tail.lock();
        let (segment, before) = self.make_room(&mut tail, len)?;
        let lsn = self.shared.appended_lsn.load(Ordering::Relaxed) + len;
        push_record(
            &mut tail,
            segment,
            &header,
            header_len,
            Holds::Nothing,
            None,
            lsn,
        );
        let appended = records
            .iter()
            .zip(&lens)
            .map(|(a, &record_len)| {
                push_record(
                    &mut tail, segment, &a.record, record_len, a.holds, a.frees, lsn,
                )
            })
            .collect();
        self.appended(tail, before, lsn, false);
        Ok(appended)
    }

    /// Makes room for `len` more bytes in the segment being written, starting the next
    /// segment if they would not fit. Returns the segment they go to and its size
    /// before them. A record or batch goes whole into one segment (one larger than the
    /// segment size fills a segment of its own), and more than a segment can address
    /// is refused, as a copy's is (`copy.rs`): a slot's offset has 26 bits.
    fn make_room(&self, tail: &mut Tail, len: u64) -> Result<(u64, u64), Error> {
        if tail.shutdown {
            return Err(Error::Poisoned);
        }
        let limit = MAX_SEGMENT_BYTES - SEGMENT_HEADER_BYTES as u64;
        if len > limit {
            return Err(Error::TooLarge { bytes: len, limit });
        }
        if tail.segment_bytes + len > self.shared.segment_size_bytes
            && tail.segment_bytes > SEGMENT_HEADER_BYTES as u64
        {
            let at = tail.buf.len();
            let sequence = tail.next_sequence;
            let oldest = self.shared.oldest_sequence.load(Ordering::Acquire);
            if sequence - oldest >= SEGMENT_WINDOW {
                return Err(Error::LogFull);
            }
            tail.rolls.push(Roll {
                at,
                sequence,
                start_lsn: self.shared.appended_lsn.load(Ordering::Relaxed),
            });
            tail.next_sequence += 1;
            self.shared
                .active_sequence
                .store(sequence, Ordering::Release);
            tail.segment_bytes = SEGMENT_HEADER_BYTES as u64;
            tail.starts
                .insert(sequence, self.shared.appended_lsn.load(Ordering::Relaxed));
            tail.usage.insert(
                sequence,
                SegmentUsage {
                    bytes: SEGMENT_HEADER_BYTES as u64,
                    ..SegmentUsage::default()
                },
            );
        }
        Ok((tail.next_sequence - 1, tail.segment_bytes))
    }

    /// Publishes what was appended up to `lsn` and wakes the flusher if it is wanted.
    /// `copy`: a record copied from a primary, whose follower wakes the flusher once
    /// for its whole run ([`Log::copies_appended`]) rather than for every record.
    fn appended(
        &self,
        mut tail: parking_lot::MutexGuard<'_, Tail>,
        before: u64,
        lsn: u64,
        copy: bool,
    ) {
        self.shared.appended_lsn.store(lsn, Ordering::Release);
        // In interval mode the request thread writes for itself; waking the flusher
        // for every record would cost two context switches a write. With no
        // durability nobody waits for the write: the flusher writes in batches.
        let wake = match self.shared.durability {
            Durability::Fsync => !copy,
            Durability::Interval => {
                let size = self.shared.segment_size_bytes;
                let near_end = size - size / EARLY_SYNC_FRACTION;
                let crossed = before < near_end && tail.segment_bytes >= near_end;
                tail.sync_soon |= crossed;
                crossed
            }
            Durability::None => {
                let full = tail.buf.len() >= UNDURABLE_BATCH_BYTES && !tail.write_wanted;
                tail.write_wanted |= full;
                full
            }
        };
        drop(tail);
        if wake && !WakeLater::postpones(&self.shared) {
            self.shared.flusher_wake.notify_one();
        }
    }

    /// Postpones waking the flusher for what this thread appends until the returned
    /// guard drops. A writer holding a shard's lock while it appends takes this before
    /// the lock: woken, the flusher may take the writer's core, and on two cores under
    /// sixteen connections the writer then waits milliseconds to run again, every
    /// reader of the shard waiting with it (sysbench's `oltp_read_write`, where a
    /// quarter of the connections' time went waiting for shard locks).
    pub(crate) fn wake_later(&self) -> WakeLater<'_> {
        let outer = WAKE_LATER.with(|w| w.replace(Some((Arc::as_ptr(&self.shared), false))));
        WakeLater { log: self, outer }
    }

    /// Marks every version of memcached's keys dead: an immediate flush_all removed
    /// them all. The caller holds every shard lock, so no put is in flight.
    pub fn free_memcached(&self) {
        for usage in self.shared.tail.lock().usage.values_mut() {
            usage.free_memcached();
        }
    }

    /// Accounts a version of a key of `class` dropped without a record (expired, or
    /// purged by compaction).
    pub fn free(&self, location: Location, class: Class) {
        self.shared.tail.lock().free(location, class);
    }

    /// Counts `bytes` more of segment `segment` live (held keys' records, which the
    /// ordered keyspace accounts for, at open); nothing for a segment no longer here.
    pub fn hold_bytes(&self, segment: u64, bytes: u64) {
        if let Some(usage) = self.shared.tail.lock().usage.get_mut(&segment) {
            usage.add_live(Class::Tables, bytes);
        }
    }

    /// Every segment's usage, oldest first; the last is the one being written.
    pub fn usage(&self) -> Vec<(u64, SegmentUsage)> {
        self.shared
            .tail
            .lock()
            .usage
            .iter()
            .map(|(seq, usage)| (*seq, *usage))
            .collect()
    }

    /// Where the next record will go: the newest segment, the byte offset after its
    /// last record, and the LSN there.
    pub fn position(&self) -> (u64, u64, u64) {
        let tail = self.shared.tail.lock();
        (
            tail.next_sequence - 1,
            tail.segment_bytes,
            self.shared.appended_lsn.load(Ordering::Acquire),
        )
    }

    /// The oldest segment still on disk.
    pub fn oldest_segment(&self) -> u64 {
        self.shared.oldest_sequence.load(Ordering::Acquire)
    }

    /// Whether a cursor stands in segment `sequence` or before it.
    pub fn is_pinned(&self, sequence: u64) -> bool {
        let tail = self.shared.tail.lock();
        tail.pins.values().any(|&pinned| pinned <= sequence)
    }

    /// Removes a segment whose live records have all been copied forward and synced,
    /// unless a cursor stands in it or before it: returns whether it went.
    pub fn remove_segment(&self, sequence: u64) -> Result<bool, Error> {
        // Its live records were copied forward, before the log's end: a rewind must
        // not cut them (`rewind.rs`).
        self.set_rewind_floor(self.shared.appended_lsn.load(Ordering::Acquire))?;
        {
            let mut tail = self.shared.tail.lock();
            let active = tail.next_sequence - 1;
            assert!(
                sequence < active,
                "removing segment {sequence}, active is {active}"
            );
            if tail.pins.values().any(|&pinned| pinned <= sequence) {
                return Ok(false);
            }
            // No cursor can start in it from here on.
            tail.starts.remove(&sequence);
        }
        self.shared.disk.remove(&segment_name(sequence))?;
        self.shared.disk.sync_dir()?;
        {
            let mut tail = self.shared.tail.lock();
            tail.usage.remove(&sequence);
            let oldest = tail.usage.keys().next().copied().unwrap_or(sequence + 1);
            self.shared.oldest_sequence.store(oldest, Ordering::Release);
        }
        // Readers that already hold the handle finish their read on the removed file.
        // The map's lock is let go before the handle: closing the last one evicts the
        // file's pages, which must not hold up readers of other segments.
        let handle = self.readers.write().remove(&sequence);
        drop(handle);
        Ok(true)
    }

    /// The lowest LSN the log may be rewound to.
    pub fn rewind_floor(&self) -> u64 {
        self.shared.rewind_floor.load(Ordering::Acquire)
    }

    /// Records `lsn` as the lowest LSN the log may be rewound to, durably.
    pub fn set_rewind_floor(&self, lsn: u64) -> Result<(), Error> {
        if self.shared.rewind_floor.load(Ordering::Acquire) != lsn {
            crate::rewind::store_floor(&*self.shared.disk, lsn)?;
            self.shared.rewind_floor.store(lsn, Ordering::Release);
        }
        Ok(())
    }

    /// Writes and fsyncs everything appended so far, whatever the durability mode:
    /// compaction must know its copies are on disk before it removes the originals.
    pub fn force_sync(&self) -> Result<(), Error> {
        self.sync_through(u64::MAX)
    }

    /// Makes sure every record up to `lsn` is on disk, whatever the durability mode:
    /// writes and fsyncs now unless it already is (or a sync this call waited behind
    /// covered it). `u64::MAX` syncs everything appended.
    pub fn sync_through(&self, lsn: u64) -> Result<(), Error> {
        if self.is_poisoned() {
            return Err(Error::Poisoned);
        }
        if self.synced_lsn() >= lsn {
            return Ok(());
        }
        let result = (|| {
            let _sync_aside = self.shared.sync_aside.lock();
            if self.synced_lsn() >= lsn {
                return Ok(());
            }
            let (end, mut handle) = {
                let mut writer = self.shared.writer.lock();
                let end = self.shared.write_tail(&mut writer, true)?;
                (end, writer.active.try_clone()?)
            };
            self.shared.take_requests()?;
            handle.sync()?;
            self.shared.synced_lsn.fetch_max(end, Ordering::AcqRel);
            Ok::<(), std::io::Error>(())
        })();
        match result {
            Ok(()) => {
                self.shared.publish();
                Ok(())
            }
            Err(e) => {
                self.shared.poison(&e);
                Err(Error::Poisoned)
            }
        }
    }

    /// Interval mode: has everything appended so far written, on the calling thread if
    /// the writer lock is free; if it is not, the holder writes it (see
    /// [`Shared::write_or_ask`]) and this returns at once. Either way the records are
    /// acknowledged once `acked_lsn` covers them. Other modes leave the writing to the
    /// flusher.
    pub fn write_now(&self) -> Result<(), Error> {
        if self.shared.durability != Durability::Interval {
            return Ok(());
        }
        if self.is_poisoned() {
            return Err(Error::Poisoned);
        }
        self.shared.write_or_ask().map_err(|e| {
            self.shared.poison(&e);
            Error::Poisoned
        })
    }

    pub fn acked_lsn(&self) -> u64 {
        self.shared.acked_lsn()
    }

    pub fn appended_lsn(&self) -> u64 {
        self.shared.appended_lsn.load(Ordering::Acquire)
    }

    /// Every record up to here has been handed to the operating system: a read of its
    /// file finds it.
    pub fn written_lsn(&self) -> u64 {
        self.shared.written_lsn.load(Ordering::Acquire)
    }

    pub fn synced_lsn(&self) -> u64 {
        self.shared.synced_lsn.load(Ordering::Acquire)
    }

    pub fn is_poisoned(&self) -> bool {
        self.shared.poisoned.load(Ordering::Acquire)
    }

    /// Blocks until `lsn` is acknowledged, or the log is poisoned.
    pub fn wait_acked(&self, lsn: u64) -> Result<(), Error> {
        if self.shared.acked_lsn() < lsn {
            self.write_now()?;
        }
        let mut guard = self.shared.ack_lock.lock();
        loop {
            if self.shared.acked_lsn() >= lsn {
                return Ok(());
            }
            if self.is_poisoned() {
                return Err(Error::Poisoned);
            }
            self.shared.ack_cond.wait(&mut guard);
        }
    }

    /// Blocks until `lsn` is on disk (synced, whatever the durability mode), the log
    /// is poisoned, or `timeout` passes. Returns whether it is on disk.
    pub fn wait_synced(&self, lsn: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = self.shared.ack_lock.lock();
        loop {
            if self.synced_lsn() >= lsn {
                return true;
            }
            if self.is_poisoned()
                || self
                    .shared
                    .ack_cond
                    .wait_until(&mut guard, deadline)
                    .timed_out()
            {
                return self.synced_lsn() >= lsn;
            }
        }
    }

    /// Writes and syncs everything appended, then stops the flusher. Idempotent.
    pub fn shutdown(&self) {
        self.shared.tail.lock().shutdown = true;
        self.shared.flusher_wake.notify_one();
        if let Some(handle) = self.flusher.lock().take() {
            let _ = handle.join();
        }
        if let Some(stepped) = &self.stepped {
            stepped.lock().finish(&self.shared);
        }
    }

    /// A log opened with a stepped flusher: runs the flusher's turn due `since_start`
    /// after the log started, if one is. Returns whether it ran one; false, and
    /// nothing done, for a log with a flusher thread.
    pub fn step_flusher(&self, since_start: Duration) -> bool {
        self.stepped
            .as_ref()
            .is_some_and(|stepped| stepped.lock().step(&self.shared, since_start))
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Where the tail's bytes go on to a new segment.
#[derive(Debug, Clone, Copy)]
struct Roll {
    /// The offset in the tail's buffer of the new segment's first byte.
    at: usize,
    sequence: u64,
    /// The LSN the log had reached there, which the new segment's header records.
    start_lsn: u64,
}

/// Writes one batch, starting new segments where the appender marked them. The segment
/// being left is sealed (cut to its records, synced) before the new one is created;
/// the new one has `segment_bytes` reserved.
fn write_batch(
    disk: &dyn Disk,
    active: &mut Box<dyn DiskFile>,
    buf: &[u8],
    rolls: &[Roll],
    segment_bytes: u64,
) -> std::io::Result<()> {
    let mut from = 0;
    for roll in rolls {
        let at = roll.at;
        active.append(&buf[from..at])?;
        active.seal()?;
        let mut next = disk.create(&segment_name(roll.sequence))?;
        next.append(&record::segment_header(roll.sequence, roll.start_lsn))?;
        next.sync()?;
        // After the header is durable: a segment never begins with reserved zeros.
        next.reserve(segment_bytes)?;
        disk.sync_dir()?;
        *active = next;
        from = at;
    }
    active.append(&buf[from..])
}
