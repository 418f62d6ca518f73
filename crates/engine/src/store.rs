//! The store: the index and the log together, recovery at open, and the operations the
//! server builds memcached's commands from.
//!
//! Every change runs under its key's shard write lock: look at the live version, decide
//! (the caller's closure), append the record to the log, change the index. The reply
//! that reports the change may go out once [`Store::acked_lsn`] has reached the LSN
//! returned; [`Options::on_ack`] says when it moves.
//!
//! A key's version is either in memory (in its shard's cache) or only in the log. A
//! request for a key that may be only in the log reads the candidate records first
//! (one read, almost always), without the shard lock, then looks again; see
//! [`Store::unresolved`] for callers that read elsewhere first.
//!
//! Expiry follows memcached: an exptime of 0 never expires, up to 30 days is relative,
//! beyond is absolute Unix time, negative is already expired. Expired and flushed items
//! are dropped when met; the maintenance pass drops those in memory, compaction those
//! only in the log.

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::checkpoint::{self, Checkpoint, ShardImage};
use crate::clock::Clock;
use crate::disk::ReadFile;
use crate::disk::{Disk, OsDisk};
use crate::index::{
    self, Entry, Found, Hashed, Index, Loaded, Shard, Version, KEY_COST_BYTES, SEGMENT_WINDOW,
    SHARDS,
};
use crate::log::{self, Holds, Location, Log, LogConfig, Resume, SegmentUsage};
use crate::record::{
    self, Decoded, Header, Record, ITEM_BINARY_KEY, ITEM_EXPLICIT_CAS, ITEM_STALE,
};
use crate::Error;

/// When a change is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// After fsync. Concurrent writers share one fsync (group commit). Survives power loss.
    Fsync,
    /// Once written to the operating system; fsync every `fsync_interval`. Survives a
    /// killed process; a power loss may take the last interval.
    Interval,
    /// At once. For comparison only: a crash may lose anything not yet written.
    None,
}

/// What the log's acknowledged position says; passed to [`Options::on_ack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// Every record up to this LSN is acknowledged.
    UpTo(u64),
    /// A write or fsync failed: nothing more will be acknowledged.
    Failed,
}

pub struct Options {
    pub durability: Durability,
    pub fsync_interval: Duration,
    pub segment_size_bytes: u64,
    pub clock: Arc<dyn Clock>,
    /// Called (from the flusher thread) whenever the acknowledged LSN moves or the log
    /// fails. Must be quick: it runs on the commit path.
    pub on_ack: Option<Arc<dyn Fn(Ack) + Send + Sync>>,
    /// The memory budget for the index and the values held in memory; 0 = none (every
    /// value stays in memory). See [`Store::set_memory_limit`].
    pub memory_limit_bytes: u64,
    /// For tests only: every key in one index shard with a one-bit fingerprint, so
    /// that keys share fingerprints all the time and every path that tells them apart
    /// by reading their records runs. Slow.
    #[doc(hidden)]
    pub crowded_index: bool,
}

impl Options {
    pub fn new(durability: Durability, clock: Arc<dyn Clock>) -> Options {
        Options {
            durability,
            fsync_interval: Duration::from_secs(1),
            segment_size_bytes: 64 << 20,
            clock,
            on_ack: None,
            memory_limit_bytes: 0,
            crowded_index: false,
        }
    }
}

/// One key's live version: its value and what memcached keeps beside it. The value is
/// `V`: owned in an [`Item`], a snapshot that outlives the lookup, or borrowed from the
/// index in an [`ItemRef`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemOf<V> {
    pub value: V,
    pub client_flags: u32,
    /// Absolute Unix seconds; 0 = never.
    pub exptime: u32,
    pub cas: u64,
    pub lsn: u64,
    pub stale: bool,
    /// The key was stored base64-encoded by a meta command (memcached's binary key).
    pub binary_key: bool,
    /// Whether the item had been fetched before this access.
    pub fetched: bool,
    /// Unix seconds of the last access before this one.
    pub last_access: u32,
    pub win_sent: bool,
}

/// A snapshot of one key's live version.
pub type Item = ItemOf<Arc<[u8]>>;

/// A live version as [`Store::update`]'s closure sees it: borrowed from the index
/// under the key's shard lock, so nothing is copied or counted unless the closure
/// keeps it ([`ItemRef::to_item`]).
pub type ItemRef<'a> = ItemOf<&'a Arc<[u8]>>;

impl<V> ItemOf<V> {
    /// The same version with another hold on its value.
    fn with_value<W>(&self, value: W) -> ItemOf<W> {
        ItemOf {
            value,
            client_flags: self.client_flags,
            exptime: self.exptime,
            cas: self.cas,
            lsn: self.lsn,
            stale: self.stale,
            binary_key: self.binary_key,
            fetched: self.fetched,
            last_access: self.last_access,
            win_sent: self.win_sent,
        }
    }
}

impl<'a> ItemRef<'a> {
    fn of(entry: &'a Entry) -> ItemRef<'a> {
        ItemOf {
            value: &entry.value,
            client_flags: entry.client_flags,
            exptime: entry.exptime,
            cas: entry.cas,
            lsn: entry.lsn,
            stale: entry.stale,
            binary_key: entry.binary_key,
            fetched: entry.fetched.load(Ordering::Relaxed),
            last_access: entry.last_access.load(Ordering::Relaxed),
            win_sent: entry.win_sent.load(Ordering::Relaxed),
        }
    }

    /// The version as an owned [`Item`], holding a reference to the value.
    pub fn to_item(&self) -> Item {
        self.with_value(Arc::clone(self.value))
    }
}

/// A key whose version may be only in the log: the records to read to know. See
/// [`Store::unresolved`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    h: Hashed,
    /// Raw address, segment and offset of each record to read.
    records: Vec<(u64, u64, u32)>,
}

impl Unresolved {
    /// Where its first record lies: segment and offset.
    fn place(&self) -> (u64, u32) {
        self.records
            .first()
            .map_or((0, 0), |&(_, segment, offset)| (segment, offset))
    }
}

/// Where a new version's CAS comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewCas {
    /// The next value of the store's counter.
    Generate,
    /// Chosen by the client (the meta protocol's `E` flag).
    Explicit(u64),
}

#[derive(Debug, Clone)]
pub struct NewItem {
    pub value: Arc<[u8]>,
    pub client_flags: u32,
    /// Absolute Unix seconds; 0 = never. See [`exptime_to_absolute`].
    pub exptime: u32,
    pub cas: NewCas,
    pub stale: bool,
    pub binary_key: bool,
    /// Whether a win token for this version was already handed out (not logged).
    pub win_sent: bool,
}

impl NewItem {
    /// A plain new version: `value` and `client_flags`, no expiry, a fresh CAS.
    pub fn new(value: Arc<[u8]>, client_flags: u32) -> NewItem {
        NewItem {
            value,
            client_flags,
            exptime: 0,
            cas: NewCas::Generate,
            stale: false,
            binary_key: false,
            win_sent: false,
        }
    }
}

/// What an update does to its key.
#[derive(Debug, Clone)]
pub enum Change {
    Keep,
    Put(NewItem),
    Delete,
    /// New expiry (if any), same value and CAS; and whether to remember that a win
    /// token was handed out for this version (volatile, not logged).
    Touch {
        exptime: Option<u32>,
        mark_win_sent: bool,
    },
}

/// What an update wrote to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The reply reporting this change may go out once this LSN is acknowledged.
    pub lsn: u64,
    /// The CAS of the version now stored.
    pub cas: u64,
}

/// Whether an update counts as an access of the item (meta `h`, `l` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Fetch,
    NoAccess,
}

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

#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub curr_items: u64,
    pub bytes: u64,
    pub appended_lsn: u64,
    pub acked_lsn: u64,
    pub synced_lsn: u64,
    pub next_cas: u64,
    pub recovered_records: u64,
    pub recovery_cut_bytes: u64,
    /// Bytes of all segments on disk, and of the records in them the index points at.
    pub log_bytes: u64,
    pub log_live_bytes: u64,
    pub log_segments: u64,
    pub compactions: u64,
    /// Whether a compaction is running now.
    pub compaction_running: bool,
    /// Bytes compaction copied forward; with `appended_lsn`, the write amplification.
    pub compaction_copied_bytes: u64,
    pub compaction_reclaimed_bytes: u64,
    pub expired_purged: u64,
    /// Bytes appended to the log since open, copies included.
    pub appended_since_open_bytes: u64,
    /// What the index allocates: its tables at their capacity, and every key.
    pub index_bytes: u64,
    /// What the values in memory cost, and how many values are there.
    pub cache_bytes: u64,
    pub cached_values: u64,
    /// The budget for both (0 = none).
    pub memory_limit_bytes: u64,
    /// What [`Store::set_other_memory`] last reported.
    pub other_memory_bytes: u64,
    /// Values read back from the log because they were not in memory.
    pub value_reads: u64,
    /// Values dropped from memory to stay within the budget.
    pub evictions: u64,
    /// Keys the index was restored with from a checkpoint at open (0: none).
    pub checkpoint_restored_keys: u64,
    /// Checkpoints written since open.
    pub checkpoints: u64,
}

/// memcached's exptime rule: 0 never; negative already expired; up to 30 days relative
/// to now; beyond, an absolute Unix time (in the past: already expired). Returns absolute
/// Unix seconds, 0 for never and 1 for "already expired".
pub fn exptime_to_absolute(exptime: i64, now_secs: u32) -> u32 {
    const RELATIVE_MAX_SECS: i64 = 60 * 60 * 24 * 30;
    if exptime == 0 {
        0
    } else if exptime < 0 {
        1
    } else if exptime > RELATIVE_MAX_SECS {
        if exptime <= i64::from(now_secs) {
            1
        } else {
            u32::try_from(exptime).unwrap_or(u32::MAX)
        }
    } else {
        u32::try_from(i64::from(now_secs) + exptime).unwrap_or(u32::MAX)
    }
}

pub struct Store {
    index: Index,
    log: Log,
    disk: Arc<dyn Disk>,
    /// Keys the index was restored with from a checkpoint at open (0: none).
    restored_keys: u64,
    checkpoints: AtomicU64,
    /// Versions that were in memory when the checkpoint was taken, for
    /// [`Store::warm_cache`] to bring back.
    to_warm: parking_lot::Mutex<Vec<(Hashed, u64)>>,
    clock: Arc<dyn Clock>,
    next_cas: AtomicU64,
    /// A delayed flush_all, as memcached's `oldest_live`: versions stored at or before
    /// this Unix second are dead once it has come. 0 = none.
    flush_deadline: AtomicU32,
    curr_items: AtomicU64,
    recovered_records: u64,
    recovery_cut_bytes: u64,
    /// One compaction at a time.
    compaction: parking_lot::Mutex<()>,
    compactions: AtomicU64,
    /// Set while a compaction runs (for `stats`: what requests ran beside).
    compacting: std::sync::atomic::AtomicBool,
    compaction_copied_bytes: AtomicU64,
    compaction_reclaimed_bytes: AtomicU64,
    expired_purged: AtomicU64,
    /// The LSN replay ended at.
    opened_lsn: u64,
    memory_limit: AtomicU64,
    /// Memory the process holds beyond the index and the cached versions (connection
    /// buffers, the log's tail, threads), as its owner measured it last
    /// ([`Store::set_other_memory`]): the values get what the budget leaves after it.
    other_memory: AtomicU64,
    value_reads: AtomicU64,
    evictions: AtomicU64,
    /// Set once any version has been out of memory (evicted, or left on disk by
    /// replay); until then callers need not ask [`Store::unresolved`].
    values_out: std::sync::atomic::AtomicBool,
}

/// The share of a memory budget kept for what the estimates leave out: connection
/// buffers, the log tail, allocator slack.
fn reserve(limit: u64) -> u64 {
    limit / 8
}

/// Clears its flag when dropped: however the work it marks ends.
struct Flag<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for Flag<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// How many times a request reads records and looks again before it gives up: each
/// round means compaction moved the record between the lookup and the read.
const MAX_ROUNDS: u32 = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    Live,
    Expired,
    /// Hidden by a delayed flush_all whose deadline has come.
    Flushed,
}

fn liveness(exptime: u32, time: u32, now: u32, flush_deadline: u32) -> Liveness {
    if exptime != 0 && exptime <= now {
        Liveness::Expired
    } else if flush_deadline != 0 && now >= flush_deadline && time <= flush_deadline {
        Liveness::Flushed
    } else {
        Liveness::Live
    }
}

fn entry_liveness(entry: &Entry, now: u32, flush_deadline: u32) -> Liveness {
    liveness(entry.exptime, entry.time, now, flush_deadline)
}

/// An owned snapshot of the version in memory `entry`.
fn snapshot(entry: &Entry) -> Item {
    ItemRef::of(entry).to_item()
}

/// A version read from the log, as a reader sees it: never fetched since it came back.
fn version_item(v: &Version) -> Item {
    Item {
        value: Arc::clone(&v.value),
        client_flags: v.client_flags,
        exptime: v.exptime,
        cas: v.cas,
        lsn: 0,
        stale: v.item_flags & ITEM_STALE != 0,
        binary_key: v.item_flags & ITEM_BINARY_KEY != 0,
        fetched: false,
        last_access: v.time,
        win_sent: false,
    }
}

fn data_len(key: &[u8], value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

/// Decodes the put record in `bytes`, read at `segment`/`offset`.
fn decode_version(bytes: &[u8], segment: u64, offset: u32) -> Result<Version, Error> {
    match record::decode(bytes) {
        Decoded::Record(
            Record::Put {
                key,
                value,
                client_flags,
                exptime,
                time,
                cas,
                item_flags,
            },
            len,
        ) => Ok(Version {
            key: key.into(),
            value: value.into(),
            client_flags,
            exptime,
            time,
            cas,
            item_flags,
            location: Location {
                segment,
                offset,
                len: u32::try_from(len).unwrap_or(u32::MAX),
            },
        }),
        _ => Err(Error::Format(format!(
            "the index points at segment {segment} offset {offset}, which holds no version"
        ))),
    }
}

/// The version a lookup found, if any: its slot, where its record is, and its bytes of
/// key and value.
fn found_version(shard: &Shard, found: &Found, loaded: &Loaded) -> Option<(usize, Location, u64)> {
    match *found {
        Found::Cached { pos, idx } => {
            let e = shard.entry(idx);
            Some((pos, e.location, data_len(&e.key, &e.value)))
        }
        Found::Loaded { pos, which } => {
            let v = &loaded[which].1;
            Some((pos, v.location, data_len(&v.key, &v.value)))
        }
        Found::Absent | Found::Unknown(_) => None,
    }
}

/// Reads records the index points at while the log is replayed.
struct ReplayReader<'d> {
    disk: &'d dyn crate::disk::Disk,
    /// Read handles on the segments replayed so far.
    files: std::collections::HashMap<u64, Arc<dyn ReadFile>>,
    /// The first segment: what the index's addresses count from.
    oldest: u64,
}

impl ReplayReader<'_> {
    /// The version at a raw address: in the segment being replayed or an earlier one.
    fn read(&mut self, raw: u64) -> Result<Version, Error> {
        let (segment, offset) = index::address_of(raw, self.oldest);
        let file = match self.files.get(&segment) {
            Some(file) => Arc::clone(file),
            None => {
                let file = self.disk.open_read(&log::segment_name(segment))?;
                self.files.insert(segment, Arc::clone(&file));
                file
            }
        };
        let bytes = log::read_record_from(&*file, offset)?;
        decode_version(&bytes, segment, offset)
    }

    /// Finds `key` in `shard`, reading the records of cold candidates.
    fn find(&mut self, shard: &Shard, key: &[u8], h: Hashed) -> Result<(Found, Loaded), Error> {
        let mut loaded = Loaded::new();
        loop {
            match shard.find(key, h, &loaded) {
                Found::Unknown(raws) => {
                    for raw in raws {
                        let v = self.read(raw)?;
                        loaded.push((raw, v));
                    }
                }
                found => return Ok((found, loaded)),
            }
        }
    }
}

/// State rebuilt by replaying the log.
struct Replay<'d> {
    index: Index,
    reader: ReplayReader<'d>,
    /// The memory budget for the index and the cache (None: none).
    budget: Option<u64>,
    max_cas: u64,
    flush_deadline: u32,
    records: u64,
    /// Every segment's size and live bytes, kept as records come and go.
    usage: std::collections::BTreeMap<u64, SegmentUsage>,
    /// Keys a touch record (written by Kura before touch wrote whole versions) changed:
    /// held in memory until a new version is written for them after replay.
    touched: Vec<Box<[u8]>>,
}

/// Where in the log replay is: the record being applied and its segment's bytes.
struct At {
    segment: u64,
    offset: usize,
    len: usize,
}

impl Replay<'_> {
    fn unlive(usage: &mut std::collections::BTreeMap<u64, SegmentUsage>, location: Location) {
        let live = &mut usage.entry(location.segment).or_default().live_bytes;
        *live = live.saturating_sub(u64::from(location.len));
    }

    fn apply(&mut self, record: &Record<'_>, at: &At) -> Result<(), Error> {
        match *record {
            Record::Put {
                key,
                value,
                client_flags,
                exptime,
                time,
                cas,
                item_flags,
            } => {
                if item_flags & ITEM_EXPLICIT_CAS == 0 {
                    self.max_cas = self.max_cas.max(cas);
                }
                // Never judge expiry mid-replay: a later touch may have extended this
                // version. The sweep after replay drops what is dead now.
                let h = self.index.hash(key);
                let mut shard = self.index.shard(h).write();
                let (found, loaded) = self.reader.find(&shard, key, h)?;
                let old = found_version(&shard, &found, &loaded);
                if let Some((_, location, data)) = old {
                    Replay::unlive(&mut self.usage, location);
                    shard.data_bytes -= data;
                }
                let offset = u32::try_from(at.offset).unwrap_or(u32::MAX);
                let location = Location {
                    segment: at.segment,
                    offset,
                    len: u32::try_from(at.len).unwrap_or(u32::MAX),
                };
                self.usage.entry(at.segment).or_default().live_bytes += at.len as u64;
                shard.data_bytes += data_len(key, value);
                // Keep versions in memory while the shard's share of what the index
                // leaves of the budget has room.
                let keep = self.budget.is_none_or(|budget| {
                    let share = budget.saturating_sub(self.index.bytes()) / SHARDS;
                    shard.cached_bytes() + data_len(key, value) + 128 <= share
                });
                if keep {
                    let v = Version {
                        key: key.into(),
                        value: value.into(),
                        client_flags,
                        exptime,
                        time,
                        cas,
                        item_flags,
                        location,
                    };
                    let entry = Entry::from_version(h, &v);
                    match old {
                        Some((pos, ..)) => {
                            shard.set_cached(pos, entry);
                        }
                        None => {
                            shard.insert_cached(h, entry);
                        }
                    }
                } else {
                    let raw = index::raw_address(at.segment, offset);
                    match old {
                        Some((pos, ..)) => {
                            shard.set_cold(pos, raw);
                        }
                        None => shard.insert_cold(h, raw),
                    }
                }
            }
            Record::Delete { key } => {
                let h = self.index.hash(key);
                let mut shard = self.index.shard(h).write();
                let (found, loaded) = self.reader.find(&shard, key, h)?;
                if let Some((pos, location, data)) = found_version(&shard, &found, &loaded) {
                    Replay::unlive(&mut self.usage, location);
                    shard.data_bytes -= data;
                    shard.remove(pos);
                }
            }
            Record::Touch { key, exptime, .. } => {
                let h = self.index.hash(key);
                let mut shard = self.index.shard(h).write();
                let (found, loaded) = self.reader.find(&shard, key, h)?;
                let idx = match found {
                    Found::Cached { idx, .. } => Some(idx),
                    Found::Loaded { pos, which } => {
                        Some(shard.install(pos, Entry::from_version(h, &loaded[which].1)))
                    }
                    Found::Absent | Found::Unknown(_) => None,
                };
                if let Some(idx) = idx {
                    let entry = shard.entry_mut(idx);
                    entry.exptime = exptime;
                    // Its record does not say this expiry: it stays in memory (at an LSN
                    // no write reaches) until it is written anew after replay.
                    entry.lsn = u64::MAX;
                    self.touched.push(key.into());
                }
            }
            Record::CasFloor { cas } => self.max_cas = self.max_cas.max(cas),
            Record::FlushAll { deadline, cas, .. } => {
                self.max_cas = self.max_cas.max(cas);
                if deadline == 0 {
                    for shard in self.index.shards() {
                        shard.write().clear();
                    }
                    for usage in self.usage.values_mut() {
                        usage.live_bytes = 0;
                    }
                }
                self.flush_deadline = deadline;
            }
        }
        self.records += 1;
        Ok(())
    }
}

/// The index checkpoint on `disk`, if there is one replay can start from: whole, and
/// written since the last compaction removed a segment (its slots may point into
/// removed segments otherwise), its position still in the log.
fn usable_checkpoint(disk: &dyn Disk, sequences: &[u64]) -> Result<Option<Checkpoint>, Error> {
    let bytes = match disk.read(checkpoint::FILE) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let c = match Checkpoint::decode(&bytes, SHARDS as usize) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("kura: not using the index checkpoint: {why}; replaying the whole log");
            return Ok(None);
        }
    };
    if sequences.first() != Some(&c.oldest_segment) || !sequences.contains(&c.segment) {
        eprintln!("kura: the index checkpoint predates a compaction; replaying the whole log");
        return Ok(None);
    }
    if c.offset > record::SEGMENT_HEADER_BYTES as u64 {
        let file = disk.open_read(&log::segment_name(c.segment))?;
        if file.read_exact_at(&mut [0u8], c.offset - 1).is_err() {
            eprintln!("kura: the log ends before the index checkpoint; replaying the whole log");
            // For good: the log resumes short of its position and reserves space past
            // it, which would read as zeros there and pass this check next time.
            disk.remove(checkpoint::FILE)?;
            disk.sync_dir()?;
            return Ok(None);
        }
    }
    Ok(Some(c))
}

impl Store {
    /// Opens the store in a directory of the real file system.
    pub fn open_dir(dir: &Path, options: Options) -> Result<Store, Error> {
        let disk = Arc::new(OsDisk::open(dir)?);
        Store::open(disk, options)
    }

    /// Opens the store on `disk`: replays the log, cuts a torn or corrupt tail at the last
    /// valid record, and starts the log writer.
    pub fn open(disk: Arc<dyn Disk>, options: Options) -> Result<Store, Error> {
        let now = options.clock.now_secs();
        let mut sequences: Vec<u64> = disk
            .list()?
            .iter()
            .filter_map(|n| log::parse_segment_name(n))
            .collect();
        sequences.sort_unstable();
        if let (Some(first), Some(last)) = (sequences.first(), sequences.last()) {
            if last - first >= SEGMENT_WINDOW {
                return Err(Error::Format(format!(
                    "the log spans segments {first} to {last}, more than the {SEGMENT_WINDOW} the index addresses"
                )));
            }
        }
        let checkpoint = usable_checkpoint(&*disk, &sequences)?;
        let mut replay = Replay {
            index: match &checkpoint {
                Some(c) => Index::with_keys(options.crowded_index, c.keys),
                None => Index::new(options.crowded_index),
            },
            reader: ReplayReader {
                disk: &*disk,
                files: Default::default(),
                oldest: sequences.first().copied().unwrap_or(1),
            },
            budget: match options.memory_limit_bytes {
                0 => None,
                limit => Some(limit - reserve(limit)),
            },
            max_cas: 0,
            flush_deadline: 0,
            records: 0,
            usage: Default::default(),
            touched: Vec::new(),
        };
        let mut lsn = 0u64;
        // Replay starts here: at the first segment's first record, or where the
        // checkpoint's index leaves off.
        let mut start = (0u64, record::SEGMENT_HEADER_BYTES);
        let mut restored_keys = 0;
        let mut to_warm = Vec::new();
        if let Some(c) = checkpoint {
            for (n, (shard, image)) in replay.index.shards().iter().zip(&c.shards).enumerate() {
                let were_cached =
                    shard
                        .write()
                        .restore(image.capacity, &image.slots, image.data_bytes);
                to_warm.extend(
                    were_cached
                        .into_iter()
                        .map(|(fp, raw)| (Index::hashed(n, fp), raw)),
                );
                restored_keys += image.slots.len() as u64;
            }
            replay.usage = c.usage;
            replay.max_cas = c.max_cas;
            replay.flush_deadline = c.flush_deadline;
            lsn = c.lsn;
            start = (c.segment, c.offset as usize);
        }
        let mut cut_bytes = 0u64;
        let mut resume: Option<(u64, u64)> = None; // (sequence, length) of the active segment
        for (i, &sequence) in sequences.iter().enumerate() {
            if sequence < start.0 {
                // Covered by the checkpoint: not even read.
                continue;
            }
            let name = log::segment_name(sequence);
            // Read a window at a time, so replay holds a megabyte of the log, not a
            // segment.
            let file = disk.open_read(&name)?;
            let size = file.size()?;
            replay.reader.files.insert(sequence, Arc::clone(&file));
            let mut data = log::Window::new(file, size);
            let is_last = i + 1 == sequences.len();
            let header = data.at(0, record::SEGMENT_HEADER_BYTES)?;
            match record::parse_segment_header(header) {
                Header::Valid { sequence: s } if s == sequence => {}
                Header::Valid { sequence: s } => {
                    return Err(Error::Format(format!("{name} says it is segment {s}")));
                }
                Header::Truncated if is_last => {
                    // Its creation was torn before anything was acknowledged in it.
                    cut_bytes += size;
                    disk.remove(&name)?;
                    disk.sync_dir()?;
                    break;
                }
                Header::Truncated | Header::Invalid(_)
                    if is_last && (size <= 32 || data.zeros_from(0)?) =>
                {
                    cut_bytes += size;
                    disk.remove(&name)?;
                    disk.sync_dir()?;
                    break;
                }
                Header::Truncated => {
                    return Err(Error::Format(format!("{name} is shorter than its header")));
                }
                Header::Invalid(why) => return Err(Error::Format(format!("{name}: {why}"))),
            }
            let size = size as usize;
            let mut pos = if sequence == start.0 {
                start.1
            } else {
                record::SEGMENT_HEADER_BYTES
            };
            let mut cut = false;
            while pos < size {
                match data.record(pos)? {
                    Decoded::Record(rec, len) => {
                        if pos as u64 >= index::MAX_SEGMENT_BYTES {
                            return Err(Error::Format(format!(
                                "{name} has a record at {pos}, past the 64 MiB the index addresses"
                            )));
                        }
                        let at = At {
                            segment: sequence,
                            offset: pos,
                            len,
                        };
                        replay.apply(&rec, &at)?;
                        pos += len;
                        lsn += len as u64;
                    }
                    Decoded::Truncated | Decoded::Corrupt => {
                        // Zeros to the end are the space the newest segment had
                        // reserved (see `DiskFile::reserve`), which the log ends in:
                        // nothing was written there. Anything else is damage.
                        if !(is_last && data.zeros_from(pos)?) {
                            cut = true;
                        }
                        break;
                    }
                }
            }
            if !cut && pos < size {
                // The log resumes at its last record, and reserves the space again.
                disk.truncate(&name, pos as u64)?;
            }
            if cut {
                // Nothing after a bad record can be trusted to follow it in order: cut the
                // segment there and drop every later one.
                cut_bytes += (size - pos) as u64;
                disk.truncate(&name, pos as u64)?;
                for &later in &sequences[i + 1..] {
                    let later_name = log::segment_name(later);
                    cut_bytes += disk
                        .open_read(&later_name)
                        .and_then(|f| f.size())
                        .unwrap_or(0);
                    disk.remove(&later_name)?;
                }
                disk.sync_dir()?;
                eprintln!(
                    "kura: recovery cut {cut_bytes} bytes of torn or corrupt log at {name}:{pos}"
                );
                resume = Some((sequence, pos as u64));
                replay.usage.entry(sequence).or_default().bytes = pos as u64;
                break;
            }
            resume = Some((sequence, pos as u64));
            replay.usage.entry(sequence).or_default().bytes = pos as u64;
        }
        // Drop what is dead now among the versions in memory; those only in the log go
        // when met, or when compaction reaches them.
        let mut flushed: Vec<(Box<[u8]>, Location)> = Vec::new();
        for shard in replay.index.shards() {
            let mut shard = shard.write();
            let dead = shard
                .cached_keys(|e| entry_liveness(e, now, replay.flush_deadline) != Liveness::Live);
            for key in dead {
                let h = replay.index.hash(&key);
                let Found::Cached { pos, idx } = shard.find(&key, h, &Loaded::new()) else {
                    continue;
                };
                let entry = shard.entry(idx);
                let location = entry.location;
                let data = data_len(&entry.key, &entry.value);
                let state = entry_liveness(entry, now, replay.flush_deadline);
                shard.data_bytes -= data;
                match state {
                    // Its delete, appended below, frees its bytes.
                    Liveness::Flushed => flushed.push((key.clone(), location)),
                    _ => Replay::unlive(&mut replay.usage, location),
                }
                shard.remove(pos);
            }
        }
        let usage = std::mem::take(&mut replay.usage);
        let resume = match resume {
            Some((sequence, bytes)) => Resume {
                active: disk.open_append(&log::segment_name(sequence))?,
                active_sequence: sequence,
                active_bytes: bytes,
                lsn,
                usage,
            },
            None => {
                let sequence = sequences.first().copied().unwrap_or(1).max(1);
                let mut active = disk.create(&log::segment_name(sequence))?;
                active.append(&record::segment_header(sequence))?;
                active.sync()?;
                disk.sync_dir()?;
                let header = record::SEGMENT_HEADER_BYTES as u64;
                Resume {
                    active,
                    active_sequence: sequence,
                    active_bytes: header,
                    lsn,
                    usage: [(
                        sequence,
                        SegmentUsage {
                            bytes: header,
                            live_bytes: 0,
                        },
                    )]
                    .into(),
                }
            }
        };
        let log = Log::start(
            Arc::clone(&disk),
            resume,
            LogConfig {
                durability: options.durability,
                fsync_interval: options.fsync_interval,
                segment_size_bytes: options.segment_size_bytes,
                on_ack: options.on_ack,
            },
        )?;
        // Dropping a version hidden by a delayed flush is a deletion and goes in the log
        // (see `drop_dead`); a delete appended before a crash may not have reached it.
        for (key, location) in &flushed {
            log.append(&Record::Delete { key }, Holds::Nothing, Some(*location))?;
        }
        let items: u64 = replay
            .index
            .shards()
            .iter()
            .map(|s| s.read().len() as u64)
            .sum();
        let values_out = replay.index.shards().iter().any(|s| s.read().has_cold());
        let touched = std::mem::take(&mut replay.touched);
        let store = Store {
            index: replay.index,
            log,
            disk: Arc::clone(&disk),
            restored_keys,
            checkpoints: AtomicU64::new(0),
            to_warm: parking_lot::Mutex::new(to_warm),
            clock: options.clock,
            next_cas: AtomicU64::new(replay.max_cas + 1),
            flush_deadline: AtomicU32::new(replay.flush_deadline),
            curr_items: AtomicU64::new(items),
            recovered_records: replay.records,
            recovery_cut_bytes: cut_bytes,
            compaction: parking_lot::Mutex::new(()),
            compactions: AtomicU64::new(0),
            compacting: std::sync::atomic::AtomicBool::new(false),
            compaction_copied_bytes: AtomicU64::new(0),
            compaction_reclaimed_bytes: AtomicU64::new(0),
            expired_purged: AtomicU64::new(0),
            opened_lsn: lsn,
            memory_limit: AtomicU64::new(options.memory_limit_bytes),
            other_memory: AtomicU64::new(0),
            value_reads: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            values_out: std::sync::atomic::AtomicBool::new(values_out),
        };
        // A touch record's expiry becomes a whole version, so the version can leave
        // memory like any other.
        for key in touched {
            store.rewrite_in_memory(&key)?;
        }
        // Replay kept versions while each shard had room; the index's share is known
        // only now.
        for shard in store.index.shards() {
            store.enforce_budget(&mut shard.write());
        }
        Ok(store)
    }

    /// Writes the version of `key` held in memory as a new record, same CAS and time.
    fn rewrite_in_memory(&self, key: &[u8]) -> Result<(), Error> {
        let h = self.index.hash(key);
        let mut shard = self.index.shard(h).write();
        let Found::Cached { idx, .. } = shard.find(key, h, &Loaded::new()) else {
            return Ok(());
        };
        let entry = shard.entry(idx);
        let copy = Record::Put {
            key,
            value: &entry.value,
            client_flags: entry.client_flags,
            exptime: entry.exptime,
            time: entry.time,
            cas: entry.cas,
            item_flags: entry.item_flags(),
        };
        let appended = self
            .log
            .append(&copy, Holds::Version, Some(entry.location))?;
        let entry = shard.entry_mut(idx);
        entry.location = appended.location;
        entry.lsn = appended.lsn;
        Ok(())
    }

    pub fn now_secs(&self) -> u32 {
        self.clock.now_secs()
    }

    /// Brings back into memory the versions that were there when the checkpoint this
    /// store opened from was taken, while their shards have room in the budget: so the
    /// first reads after a restart find them in memory. Read in address order, a
    /// batch at a time, records near each other with one read ([`Log::read_records`]);
    /// a key changed since is skipped. Blocks on the disk: the server runs it on a
    /// thread of its own after start. Returns how many came back.
    pub fn warm_cache(&self) -> u64 {
        let mut to_warm = std::mem::take(&mut *self.to_warm.lock());
        to_warm.sort_unstable_by_key(|&(_, raw)| raw);
        let mut warmed = 0;
        for batch in to_warm.chunks(WARM_BATCH) {
            let oldest = self.log.oldest_segment();
            let wanted: Vec<(Hashed, u64, (u64, u32))> = batch
                .iter()
                .filter(|&&(h, raw)| {
                    let shard = self.index.shard(h).read();
                    shard.holds_address(h, raw).is_some() && self.has_room_in(&shard)
                })
                .map(|&(h, raw)| (h, raw, index::address_of(raw, oldest)))
                .collect();
            let places: Vec<(u64, u32)> = wanted.iter().map(|&(_, _, place)| place).collect();
            let read = self.log.read_records(&places);
            for ((h, raw, (segment, offset)), bytes) in wanted.into_iter().zip(read) {
                let Ok(v) = bytes
                    .map_err(Error::from)
                    .and_then(|bytes| decode_version(&bytes, segment, offset))
                else {
                    continue;
                };
                let mut shard = self.index.shard(h).write();
                if let Some(pos) = shard.holds_address(h, raw) {
                    shard.install(pos, Entry::from_version(h, &v));
                    warmed += 1;
                }
            }
        }
        warmed
    }

    /// Whether `shard`'s cache is under its share of the budget.
    fn has_room_in(&self, shard: &Shard) -> bool {
        self.memory_limit() == 0 || shard.cached_bytes() < self.values_share()
    }

    /// What one shard's cached versions may take: what the budget leaves after the
    /// reserve, the index and the memory the store does not count, split evenly.
    fn values_share(&self) -> u64 {
        let limit = self.memory_limit();
        (limit - reserve(limit))
            .saturating_sub(self.index.bytes() + self.other_memory.load(Ordering::Relaxed))
            / SHARDS
    }

    /// Writes the index checkpoint: every key's slot as of one position in the log,
    /// with what replay would rebuild (segment accounts, CAS, pending flush), so that a
    /// restart reads it and only the log after that position. Returns the keys it holds.
    ///
    /// The copy is consistent: it is taken with every shard read-locked (writes wait
    /// for it, reads go on; tens of milliseconds at ten million keys), and with
    /// compaction held off. The log is synced up to the position before the file is
    /// written, so everything the slots point at is on disk. The file goes in whole or
    /// not at all: written aside, synced, renamed over the last one.
    pub fn checkpoint(&self) -> Result<u64, Error> {
        let _no_compaction = self.compaction.lock();
        let image = {
            let guards: Vec<_> = self.index.shards().iter().map(|s| s.read()).collect();
            let (segment, offset, lsn) = self.log.position();
            Checkpoint {
                keys: self.index.keys(),
                oldest_segment: self.log.oldest_segment(),
                segment,
                offset,
                lsn,
                max_cas: self.next_cas.load(Ordering::Acquire).saturating_sub(1),
                flush_deadline: self.flush_deadline.load(Ordering::Acquire),
                usage: self.log.usage().into_iter().collect(),
                shards: guards
                    .iter()
                    .map(|g| {
                        let (capacity, slots) = g.snapshot();
                        ShardImage {
                            capacity,
                            data_bytes: g.data_bytes,
                            slots,
                        }
                    })
                    .collect(),
            }
        };
        self.log.force_sync()?;
        let keys = image.shards.iter().map(|s| s.slots.len() as u64).sum();
        let bytes = image.encode();
        drop(image);
        let mut file = self.disk.create(checkpoint::TEMP_FILE)?;
        for chunk in bytes.chunks(1 << 20) {
            file.append(chunk)?;
        }
        file.sync()?;
        self.disk.rename(checkpoint::TEMP_FILE, checkpoint::FILE)?;
        self.disk.sync_dir()?;
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(keys)
    }

    /// The live version of `key`, counted as an access. A version only in the log is
    /// read on this thread (see [`Store::unresolved`] to read it elsewhere first).
    pub fn get(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        self.read(key, Access::Fetch)
    }

    /// The live version of `key`, without counting an access.
    pub fn peek(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        self.read(key, Access::NoAccess)
    }

    fn read(&self, key: &[u8], access: Access) -> Result<Option<Item>, Error> {
        let h = self.index.hash(key);
        let shard = self.index.shard(h);
        let mut loaded = Loaded::new();
        for _ in 0..MAX_ROUNDS {
            let now = self.now_secs();
            let deadline = self.flush_deadline.load(Ordering::Acquire);
            let unknown = {
                self.index.prefetch_home(h);
                let guard = shard.read();
                match guard.find(key, h, &loaded) {
                    Found::Absent => return Ok(None),
                    Found::Cached { idx, .. } => {
                        let entry = guard.entry(idx);
                        if entry_liveness(entry, now, deadline) != Liveness::Live {
                            None
                        } else {
                            let item = snapshot(entry);
                            if access == Access::Fetch {
                                entry.mark_access(now);
                            }
                            return Ok(Some(item));
                        }
                    }
                    Found::Loaded { which, .. } => {
                        let v = &loaded[which].1;
                        if liveness(v.exptime, v.time, now, deadline) != Liveness::Live {
                            None
                        } else {
                            return Ok(Some(version_item(v)));
                        }
                    }
                    Found::Unknown(raws) => Some(self.addresses(&raws)),
                }
            };
            match unknown {
                // Dead: drop it now rather than keep it until overwritten.
                None => {
                    self.update(key, Access::NoAccess, |_, _| (Change::Keep, ()))?;
                    return Ok(None);
                }
                Some(records) => self.load(h, records, &mut loaded)?,
            }
        }
        Err(self.kept_moving(key))
    }

    fn kept_moving(&self, key: &[u8]) -> Error {
        Error::Format(format!(
            "the record of key {:?} moved {MAX_ROUNDS} times while being read",
            String::from_utf8_lossy(key)
        ))
    }

    /// Raw addresses with their segment and offset. Call it under the shard lock the
    /// addresses were found under: their segments are then still on disk.
    fn addresses(&self, raws: &[u64]) -> Vec<(u64, u64, u32)> {
        let oldest = self.log.oldest_segment();
        raws.iter()
            .map(|&raw| {
                let (segment, offset) = index::address_of(raw, oldest);
                (raw, segment, offset)
            })
            .collect()
    }

    /// False while every version has always been in memory: then
    /// [`Store::unresolved`] would find nothing, and callers may skip asking.
    pub fn values_may_be_out_of_memory(&self) -> bool {
        self.values_out.load(Ordering::Relaxed)
    }

    /// Whether `key` may have its version only in the log; if so, what
    /// [`Store::resolve_many`] reads to bring it into memory. For a caller that reads off
    /// its request thread before running a request.
    pub fn unresolved(&self, key: &[u8]) -> Option<Unresolved> {
        let h = self.index.hash(key);
        self.index.prefetch_home(h);
        let guard = self.index.shard(h).read();
        match guard.find(key, h, &Loaded::new()) {
            Found::Unknown(raws) => Some(Unresolved {
                h,
                records: self.addresses(&raws),
            }),
            _ => None,
        }
    }

    /// Reads the records every [`Unresolved`] in `missing` reported, nearby ones with
    /// one positional read ([`Log::read_records`]), and puts their versions in memory:
    /// a multi-get's misses in one pass. Blocks on the disk. The first error (of a
    /// record still in use) is returned after every other read is done.
    pub fn resolve_many(&self, missing: Vec<Unresolved>) -> Result<(), Error> {
        let places: Vec<(u64, u32)> = missing
            .iter()
            .flat_map(|u| {
                u.records
                    .iter()
                    .map(|&(_, segment, offset)| (segment, offset))
            })
            .collect();
        let mut bytes = self.log.read_records(&places).into_iter();
        let mut first_error = None;
        for u in missing {
            let read: Vec<_> = bytes.by_ref().take(u.records.len()).collect();
            if let Err(e) = self.install_read(u.h, &u.records, read) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Orders `missing` by where their records lie and deals them into at most
    /// `batches` batches for [`Store::resolve_many`], keeping records that one read
    /// can fetch together in one batch: so reader threads read in parallel, and
    /// neighbours with one read.
    pub fn batch_reads(
        &self,
        mut missing: Vec<Unresolved>,
        batches: usize,
    ) -> Vec<Vec<Unresolved>> {
        missing.sort_unstable_by_key(Unresolved::place);
        // Runs of records near each other (as Log::read_records would read them).
        let mut runs: Vec<Vec<Unresolved>> = Vec::new();
        let mut run_first: Option<(u64, u32)> = None;
        for u in missing {
            let place = u.place();
            match (run_first, runs.last_mut()) {
                (Some(first), Some(run)) if log::in_one_read(first, place) => run.push(u),
                _ => {
                    run_first = Some(place);
                    runs.push(vec![u]);
                }
            }
        }
        let batches = batches.max(1);
        if runs.len() <= batches {
            return runs;
        }
        let mut dealt: Vec<Vec<Unresolved>> = (0..batches).map(|_| Vec::new()).collect();
        for (i, run) in runs.into_iter().enumerate() {
            dealt[i % batches].extend(run);
        }
        dealt
    }

    /// Reads the records at `records` (raw address, segment, offset) and keeps them in
    /// `loaded`; each whose slot still points at it also goes into memory.
    fn load(
        &self,
        h: Hashed,
        records: Vec<(u64, u64, u32)>,
        loaded: &mut Loaded,
    ) -> Result<(), Error> {
        let places: Vec<(u64, u32)> = records.iter().map(|&(_, s, o)| (s, o)).collect();
        let read = self.log.read_records(&places);
        let fresh = self.install_read(h, &records, read)?;
        loaded.extend(fresh);
        Ok(())
    }

    /// Decodes what was read for `records` (raw address, segment, offset) and puts each
    /// version whose slot still points at it in memory; returns the versions. A record
    /// that cannot be read because compaction moved it meanwhile is skipped: the next
    /// lookup finds where it went.
    fn install_read(
        &self,
        h: Hashed,
        records: &[(u64, u64, u32)],
        read: Vec<std::io::Result<Vec<u8>>>,
    ) -> Result<Vec<(u64, Version)>, Error> {
        let mut fresh = Vec::with_capacity(records.len());
        for (&(raw, segment, offset), bytes) in records.iter().zip(read) {
            let version = bytes
                .map_err(Error::from)
                .and_then(|bytes| decode_version(&bytes, segment, offset));
            match version {
                Ok(v) => fresh.push((raw, v)),
                Err(e) => {
                    if self.index.shard(h).read().holds_address(h, raw).is_some() {
                        return Err(e);
                    }
                }
            }
        }
        self.value_reads
            .fetch_add(fresh.len() as u64, Ordering::Relaxed);
        let mut shard = self.index.shard(h).write();
        for (raw, v) in &fresh {
            if let Some(pos) = shard.holds_address(h, *raw) {
                let idx = shard.install(pos, Entry::from_version(h, v));
                // Wanted just now: it gets a second chance before it can go again.
                shard.entry(idx).referenced.store(true, Ordering::Relaxed);
            }
        }
        self.enforce_budget(&mut shard);
        Ok(fresh)
    }

    /// The memory budget for the index and the versions in memory; 0 = none.
    pub fn set_memory_limit(&self, bytes: u64) {
        self.memory_limit.store(bytes, Ordering::Relaxed);
        self.trim_to_budget();
    }

    pub fn memory_limit(&self) -> u64 {
        self.memory_limit.load(Ordering::Relaxed)
    }

    /// Tells the store how much memory the process holds beyond the index and the
    /// cached versions ([`Store::accounted_memory`]), measured by whoever can (the
    /// server asks its allocator). The cache shrinks by as much, so the whole process
    /// stays within the budget, not only what the store itself counts.
    pub fn set_other_memory(&self, bytes: u64) {
        self.other_memory.store(bytes, Ordering::Relaxed);
    }

    /// What the store counts against the budget: the index and the cached versions.
    pub fn accounted_memory(&self) -> u64 {
        let cached: u64 = self
            .index
            .shards()
            .iter()
            .map(|shard| shard.read().cached_bytes())
            .sum();
        self.index.bytes() + cached
    }

    /// Whether a store of `key` fits the memory budget: the key may already be in the
    /// index, or the index has room for one more slot. Values never make a store
    /// refuse: they live on disk when memory is short; every key's slot stays in memory.
    pub fn has_room_for_key(&self, key: &[u8]) -> bool {
        let limit = self.memory_limit();
        if limit == 0 || self.index.bytes() + KEY_COST_BYTES <= limit - reserve(limit) {
            return true;
        }
        let h = self.index.hash(key);
        self.index.shard(h).read().find(key, h, &Loaded::new()) != Found::Absent
    }

    /// Brings every shard's cache within the memory budget. Writes do this for their
    /// own shard as they go; versions that could not leave then (their record not yet
    /// written) go on this pass. The server's maintenance thread calls it every second.
    pub fn trim_to_budget(&self) {
        if self.memory_limit() == 0 {
            return;
        }
        for shard in self.index.shards() {
            self.enforce_budget(&mut shard.write());
        }
    }

    /// Evicts versions from `shard` until it is within its share of what the budget
    /// leaves after the index.
    fn enforce_budget(&self, shard: &mut Shard) {
        let limit = self.memory_limit();
        if limit == 0 {
            return;
        }
        let share = self.values_share();
        if shard.cached_bytes() > share {
            let evicted = shard.evict_to(share, self.log.written_lsn());
            if evicted > 0 {
                self.evictions.fetch_add(evicted, Ordering::Relaxed);
                self.values_out.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Drops the dead version at slot `pos` (its record at `location`, `data` bytes of
    /// key and value), as memcached unlinks one it meets. A version hidden by a delayed
    /// flush_all is deleted in the log too: a later flush_all that replaces the
    /// deadline would show it again otherwise, after a restart but not before. An
    /// expired one needs no record; replay finds it expired as well. Returns whether
    /// it went.
    fn drop_dead(
        &self,
        shard: &mut Shard,
        pos: usize,
        key: &[u8],
        (location, data): (Location, u64),
        state: Liveness,
    ) -> bool {
        match state {
            Liveness::Live => return false,
            Liveness::Flushed => {
                let delete = Record::Delete { key };
                if self
                    .log
                    .append(&delete, Holds::Nothing, Some(location))
                    .is_err()
                {
                    // A poisoned log: leave the version hidden, not deleted.
                    return false;
                }
            }
            Liveness::Expired => self.log.free(location),
        }
        shard.remove(pos);
        shard.data_bytes -= data;
        self.curr_items.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Drops the version in memory at slot `pos`, slab place `idx`, if it is dead.
    fn drop_if_dead(&self, shard: &mut Shard, pos: usize, idx: usize, now: u32, deadline: u32) {
        let entry = shard.entry(idx);
        let state = entry_liveness(entry, now, deadline);
        let held = (entry.location, data_len(&entry.key, &entry.value));
        let key = entry.key.clone();
        self.drop_dead(shard, pos, &key, held, state);
    }

    /// Looks at `key`'s live version (None if absent, expired or flushed), lets `decide`
    /// choose a change, and makes it: logged, then applied to the index. Returns the
    /// closure's result and what was written (None when nothing was logged). A version
    /// only in the log is read first, on this thread.
    pub fn update<R>(
        &self,
        key: &[u8],
        access: Access,
        decide: impl FnOnce(Option<&ItemRef<'_>>, u32) -> (Change, R),
    ) -> Result<(R, Option<Written>), Error> {
        if self.log.is_poisoned() {
            return Err(Error::Poisoned);
        }
        let h = self.index.hash(key);
        let shard_lock = self.index.shard(h);
        let mut loaded = Loaded::new();
        let mut rounds = 0;
        let (now, mut shard, at) = loop {
            let now = self.now_secs();
            let deadline = self.flush_deadline.load(Ordering::Acquire);
            self.index.prefetch_home(h);
            let mut shard = shard_lock.write();
            let cached = match shard.find(key, h, &loaded) {
                Found::Cached { pos, idx } => Some((pos, idx)),
                Found::Loaded { pos, which } => {
                    let entry = Entry::from_version(h, &loaded[which].1);
                    Some((pos, shard.install(pos, entry)))
                }
                Found::Absent => None,
                Found::Unknown(raws) => {
                    let records = self.addresses(&raws);
                    drop(shard);
                    rounds += 1;
                    if rounds > MAX_ROUNDS {
                        return Err(self.kept_moving(key));
                    }
                    self.load(h, records, &mut loaded)?;
                    continue;
                }
            };
            match cached {
                Some((pos, idx)) => {
                    let entry = shard.entry(idx);
                    if entry_liveness(entry, now, deadline) == Liveness::Live {
                        // A put drops this value's reference, so the line holding
                        // the counts (just before the bytes, in std's `Arc`) is
                        // fetched while the change is decided and logged.
                        let bytes = Arc::as_ptr(&entry.value).cast::<u8>();
                        index::prefetch(bytes.wrapping_sub(2 * std::mem::size_of::<usize>()));
                        break (now, shard, Some((pos, idx)));
                    }
                    self.drop_if_dead(&mut shard, pos, idx, now, deadline);
                    break (now, shard, None);
                }
                None => break (now, shard, None),
            }
        };
        let current = at.map(|(_, idx)| ItemRef::of(shard.entry(idx)));
        let (change, result) = decide(current.as_ref(), now);
        let written = match (change, at) {
            (Change::Keep, at) => {
                if let (Some((_, idx)), Access::Fetch) = (at, access) {
                    shard.entry(idx).mark_access(now);
                }
                None
            }
            (Change::Touch { .. }, None) | (Change::Delete, None) => None,
            (
                Change::Touch {
                    exptime,
                    mark_win_sent,
                },
                Some((_, idx)),
            ) => {
                let written = match exptime {
                    // The version is written anew with its new expiry, same value, CAS
                    // and time: a record says all there is of a version, so it can
                    // leave memory.
                    Some(exptime) => {
                        let entry = shard.entry(idx);
                        let copy = Record::Put {
                            key,
                            value: &entry.value,
                            client_flags: entry.client_flags,
                            exptime,
                            time: entry.time,
                            cas: entry.cas,
                            item_flags: entry.item_flags(),
                        };
                        let appended =
                            self.log
                                .append(&copy, Holds::Version, Some(entry.location))?;
                        let entry = shard.entry_mut(idx);
                        entry.exptime = exptime;
                        entry.location = appended.location;
                        entry.lsn = appended.lsn;
                        Some(Written {
                            lsn: appended.lsn,
                            cas: entry.cas,
                        })
                    }
                    None => None,
                };
                let entry = shard.entry(idx);
                if mark_win_sent {
                    entry.win_sent.store(true, Ordering::Relaxed);
                }
                if access == Access::Fetch {
                    entry.mark_access(now);
                }
                written
            }
            (Change::Delete, Some((pos, idx))) => {
                let location = shard.entry(idx).location;
                let lsn = self
                    .log
                    .append(&Record::Delete { key }, Holds::Nothing, Some(location))?
                    .lsn;
                let old = shard.remove(pos);
                let cas = old.as_ref().map_or(0, |e| e.cas);
                shard.data_bytes -= old.map_or(0, |e| data_len(&e.key, &e.value));
                self.curr_items.fetch_sub(1, Ordering::Relaxed);
                Some(Written { lsn, cas })
            }
            (Change::Put(new), at) => {
                let (cas, explicit) = match new.cas {
                    NewCas::Generate => (self.next_cas.fetch_add(1, Ordering::Relaxed), 0),
                    NewCas::Explicit(cas) => (cas, ITEM_EXPLICIT_CAS),
                };
                let item_flags = explicit
                    | if new.stale { ITEM_STALE } else { 0 }
                    | if new.binary_key { ITEM_BINARY_KEY } else { 0 };
                let put = Record::Put {
                    key,
                    value: &new.value,
                    client_flags: new.client_flags,
                    exptime: new.exptime,
                    time: now,
                    cas,
                    item_flags,
                };
                let frees = at.map(|(_, idx)| shard.entry(idx).location);
                let appended = self.log.append(&put, Holds::Version, frees)?;
                let lsn = appended.lsn;
                shard.data_bytes += data_len(key, &new.value);
                let fill = |entry: &mut Entry| {
                    entry.client_flags = new.client_flags;
                    entry.exptime = new.exptime;
                    entry.time = now;
                    entry.cas = cas;
                    entry.lsn = lsn;
                    entry.stale = new.stale;
                    entry.binary_key = new.binary_key;
                    entry.explicit_cas = explicit != 0;
                    entry.fetched = Default::default();
                    entry.last_access = AtomicU32::new(now);
                    entry.win_sent = new.win_sent.into();
                    entry.referenced = Default::default();
                };
                match at {
                    Some((_, idx)) => {
                        let old = shard.overwrite(idx, new.value, appended.location, fill);
                        shard.data_bytes -= old;
                    }
                    None => {
                        let mut entry = Entry::new(h, key, new.value, appended.location);
                        fill(&mut entry);
                        shard.insert_cached(h, entry);
                        self.curr_items.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Some(Written { lsn, cas })
            }
        };
        self.enforce_budget(&mut shard);
        Ok((result, written))
    }

    /// memcached's flush_all: with no delay every item goes now; with a delay (relative
    /// or absolute, as an exptime) memcached sets `oldest_live` to one second before
    /// that moment, and every version stored at or before `oldest_live` is dead once it
    /// has come (so `flush_all 1` acts at once). Returns the LSN to wait for.
    pub fn flush_all(&self, delay: i64) -> Result<u64, Error> {
        let now = self.now_secs();
        let deadline = if delay <= 0 {
            0
        } else {
            // An absolute time already past counts as "now": everything goes.
            exptime_to_absolute(delay, now).saturating_sub(1)
        };
        // Hold every shard: no write may land between the record and the clearing, or
        // the live index and a replay of the log would disagree.
        let mut guards: Vec<_> = self.index.shards().iter().map(|s| s.write()).collect();
        // memcached spends a CAS value when the flush takes effect within this second.
        let cas = if deadline <= now {
            self.next_cas.fetch_add(1, Ordering::Relaxed)
        } else {
            0
        };
        let flush = Record::FlushAll {
            deadline,
            time: now,
            cas,
        };
        let lsn = self.log.append(&flush, Holds::Nothing, None)?.lsn;
        // A delayed flush replaces the pending deadline, as memcached's `oldest_live`
        // is one setting; an immediate one removes everything for good.
        if deadline == 0 {
            self.log.free_all();
            for shard in guards.iter_mut() {
                shard.clear();
            }
        }
        self.flush_deadline.store(deadline, Ordering::Release);
        let items: u64 = guards.iter().map(|shard| shard.len() as u64).sum();
        self.curr_items.store(items, Ordering::Relaxed);
        Ok(lsn)
    }

    /// The LSN of the newest record appended.
    pub fn appended_lsn(&self) -> u64 {
        self.log.appended_lsn()
    }

    /// Every change up to this LSN is acknowledged under the store's durability mode.
    pub fn acked_lsn(&self) -> u64 {
        self.log.acked_lsn()
    }

    /// In interval mode, writes the log tail on the calling thread, so everything
    /// appended so far is acknowledged without waiting for another thread; a no-op in
    /// the other modes. Call it before waiting for an LSN.
    pub fn write_now(&self) -> Result<(), Error> {
        self.log.write_now()
    }

    /// Blocks until `lsn` is acknowledged (or the store is poisoned).
    pub fn wait_acked(&self, lsn: u64) -> Result<(), Error> {
        self.log.wait_acked(lsn)
    }

    pub fn is_poisoned(&self) -> bool {
        self.log.is_poisoned()
    }

    pub fn stats(&self) -> Stats {
        let usage = self.log.usage();
        let (mut cache_bytes, mut cached_values, mut bytes) = (0, 0, 0);
        for shard in self.index.shards() {
            let shard = shard.read();
            bytes += shard.data_bytes;
            cache_bytes += shard.cached_bytes();
            cached_values += shard.cached_values;
        }
        Stats {
            index_bytes: self.index.bytes(),
            cache_bytes,
            cached_values,
            memory_limit_bytes: self.memory_limit(),
            other_memory_bytes: self.other_memory.load(Ordering::Relaxed),
            value_reads: self.value_reads.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            checkpoint_restored_keys: self.restored_keys,
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
            log_bytes: usage.iter().map(|(_, u)| u.bytes).sum(),
            log_live_bytes: usage.iter().map(|(_, u)| u.live_bytes).sum(),
            log_segments: usage.len() as u64,
            compactions: self.compactions.load(Ordering::Relaxed),
            compaction_running: self.compacting.load(Ordering::Relaxed),
            compaction_copied_bytes: self.compaction_copied_bytes.load(Ordering::Relaxed),
            compaction_reclaimed_bytes: self.compaction_reclaimed_bytes.load(Ordering::Relaxed),
            expired_purged: self.expired_purged.load(Ordering::Relaxed),
            appended_since_open_bytes: self.log.appended_lsn().saturating_sub(self.opened_lsn),
            curr_items: self.curr_items.load(Ordering::Relaxed),
            bytes,
            appended_lsn: self.log.appended_lsn(),
            acked_lsn: self.log.acked_lsn(),
            synced_lsn: self.log.synced_lsn(),
            next_cas: self.next_cas.load(Ordering::Relaxed),
            recovered_records: self.recovered_records,
            recovery_cut_bytes: self.recovery_cut_bytes,
        }
    }

    /// Compacts the oldest sealed segment: copies the versions the index still points at
    /// to the head of the log, drops everything else in it, syncs the copies, and removes
    /// the segment. Returns None when there is no sealed segment.
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
        let walk = match how {
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
        if !matches!(record::parse_segment_header(header), Header::Valid { sequence } if sequence == segment)
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
                    let mut shard = self.index.shard(h).write();
                    if let Some((slot, idx)) = shard.find_location(h, raw, here) {
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
                        match liveness(exptime, time, now, deadline) {
                            Liveness::Live => {
                                let appended =
                                    self.log.append(&copy, Holds::Version, Some(here))?;
                                report.copied_bytes += u64::from(appended.location.len);
                                moved.push(Moved {
                                    h,
                                    from: here,
                                    to: appended.location,
                                });
                            }
                            state => {
                                let held = (here, data_len(key, value));
                                if self.drop_dead(&mut shard, slot, key, held, state) {
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
            let mut shard = self.index.shard(m.h).write();
            match shard.find_location(m.h, raw, m.from) {
                Some((slot, None)) => {
                    shard.set_cold(slot, index::raw_address(m.to.segment, m.to.offset));
                }
                Some((_, Some(idx))) => shard.entry_mut(idx).location = m.to,
                None => self.log.free(m.to),
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
        self.log.remove_segment(report.segment)?;
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

    /// Drops every expired version in memory (its disk space becomes garbage for
    /// compaction to reclaim), one shard at a time. Expired versions only in the log
    /// go when a request meets them or compaction reaches their segment. Returns how
    /// many went.
    pub fn purge_expired(&self) -> u64 {
        let mut purged = 0;
        for shard in self.index.shards() {
            let now = self.now_secs();
            let deadline = self.flush_deadline.load(Ordering::Acquire);
            let mut guard = shard.write();
            let expired =
                guard.cached_keys(|e| entry_liveness(e, now, deadline) == Liveness::Expired);
            for key in expired {
                let h = self.index.hash(&key);
                if let Found::Cached { pos, idx } = guard.find(&key, h, &Loaded::new()) {
                    self.drop_if_dead(&mut guard, pos, idx, now, deadline);
                    purged += 1;
                }
            }
        }
        self.expired_purged.fetch_add(purged, Ordering::Relaxed);
        purged
    }

    /// Writes and syncs everything appended and stops the log writer; later changes are
    /// refused. Dropping the store does the same.
    pub fn shutdown(&self) {
        self.log.shutdown();
    }
}

/// How many copies compaction makes before it writes them out and points the index at
/// them.
const MOVE_BATCH: usize = 4096;

/// How many versions [`Store::warm_cache`] looks up before it reads their records.
const WARM_BATCH: usize = 256;

/// Compaction finds a segment's live records through the index, not by reading the
/// segment through, while all live data is at most this many times the segment's size.
const WALK_INDEX_RATIO: u64 = 4;

/// A version compaction copied: from where to where.
struct Moved {
    h: Hashed,
    from: Location,
    to: Location,
}
