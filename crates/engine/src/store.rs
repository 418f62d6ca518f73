//! The store: the index and the log together, recovery at open, and the operations the
//! server builds memcached's commands from.
//!
//! Every change runs under its key's shard write lock: look at the live version, decide
//! (the caller's closure), append the record to the log, change the index. The reply
//! that reports the change may go out once [`Store::acked_lsn`] has reached the LSN
//! returned; [`Options::on_ack`] says when it moves.
//!
//! Expiry follows memcached: an exptime of 0 never expires, up to 30 days is relative,
//! beyond is absolute Unix time, negative is already expired. Expired and flushed items
//! are dropped lazily when met; recovery drops them too.

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::disk::{Disk, OsDisk};
use crate::index::{key_cost, Entry, Index, Shard, SHARDS};
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
        }
    }
}

/// A snapshot of one key's live version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub value: Arc<[u8]>,
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

/// A live version whose value is only in the log: where its record is. See
/// [`Store::missing_value`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MissingValue {
    cas: u64,
    location: Location,
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
    /// Values read back from the log because they were not in memory.
    pub value_reads: u64,
    /// Values dropped from memory to stay within the budget.
    pub evictions: u64,
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
    compaction_copied_bytes: AtomicU64,
    compaction_reclaimed_bytes: AtomicU64,
    expired_purged: AtomicU64,
    /// The LSN replay ended at.
    opened_lsn: u64,
    memory_limit: AtomicU64,
    value_reads: AtomicU64,
    evictions: AtomicU64,
    /// Set once any live value has been out of memory (evicted, or left on disk by
    /// replay); until then readers need not ask.
    values_out: std::sync::atomic::AtomicBool,
}

/// Whether an update's closure needs the current value, or only its metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Value,
    Meta,
}

/// The share of a memory budget kept for what the estimates leave out: connection
/// buffers, the log tail, allocator slack.
fn reserve(limit: u64) -> u64 {
    limit / 8
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    Live,
    Expired,
    /// Hidden by a delayed flush_all whose deadline has come.
    Flushed,
}

fn liveness(entry: &Entry, now: u32, flush_deadline: u32) -> Liveness {
    if entry.exptime != 0 && entry.exptime <= now {
        Liveness::Expired
    } else if flush_deadline != 0 && now >= flush_deadline && entry.time <= flush_deadline {
        Liveness::Flushed
    } else {
        Liveness::Live
    }
}

fn is_live(entry: &Entry, now: u32, flush_deadline: u32) -> bool {
    liveness(entry, now, flush_deadline) == Liveness::Live
}

fn snapshot(entry: &Entry, value: Arc<[u8]>) -> Item {
    Item {
        value,
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

/// A value just read from the log, with the CAS of the version it belongs to.
type Loaded = Option<(u64, Arc<[u8]>)>;

/// `entry`'s value: in memory, or the one `loaded` from the log for this very version;
/// otherwise where to read it.
fn value_at_hand(entry: &Entry, loaded: &Loaded) -> Result<Arc<[u8]>, MissingValue> {
    match (&entry.value, loaded) {
        (Some(value), _) => Ok(Arc::clone(value)),
        (None, Some((cas, value))) if *cas == entry.cas => Ok(Arc::clone(value)),
        (None, _) => Err(MissingValue {
            cas: entry.cas,
            location: entry.location,
        }),
    }
}

fn empty_value() -> Arc<[u8]> {
    Arc::from(&[][..])
}

/// State rebuilt by replaying the log.
struct Replay {
    index: Index,
    /// Each shard's share of the memory budget while replaying (u64::MAX: no budget).
    cache_share: u64,
    /// Whether replay left some value on disk.
    left_values_out: bool,
    max_cas: u64,
    flush_deadline: u32,
    records: u64,
}

/// Where in the log replay is: the record being applied.
struct At {
    segment: u64,
    offset: usize,
    len: usize,
}

impl Replay {
    fn apply(&mut self, record: &Record<'_>, at: At) {
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
                let mut shard = self.index.shard(key).write();
                let keep_value =
                    shard.cached_bytes.saturating_add(value.len() as u64) <= self.cache_share;
                self.left_values_out |= !keep_value;
                shard.put(
                    key,
                    Entry {
                        value: keep_value.then(|| value.into()),
                        value_len: u32::try_from(value.len()).unwrap_or(u32::MAX),
                        client_flags,
                        exptime,
                        time,
                        cas,
                        lsn: 0,
                        location: Location {
                            segment: at.segment,
                            offset: u32::try_from(at.offset).unwrap_or(u32::MAX),
                            len: u32::try_from(at.len).unwrap_or(u32::MAX),
                        },
                        stale: item_flags & ITEM_STALE != 0,
                        binary_key: item_flags & ITEM_BINARY_KEY != 0,
                        fetched: Default::default(),
                        last_access: AtomicU32::new(time),
                        win_sent: Default::default(),
                        referenced: Default::default(),
                    },
                );
            }
            Record::Delete { key } => {
                self.index.shard(key).write().remove(key);
            }
            Record::Touch { key, exptime, .. } => {
                if let Some(entry) = self.index.shard(key).write().get_mut(key) {
                    entry.exptime = exptime;
                }
            }
            Record::CasFloor { cas } => self.max_cas = self.max_cas.max(cas),
            Record::FlushAll { deadline, cas, .. } => {
                self.max_cas = self.max_cas.max(cas);
                if deadline == 0 {
                    for shard in self.index.shards() {
                        shard.write().clear();
                    }
                }
                self.flush_deadline = deadline;
            }
        }
        self.records += 1;
    }
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
        let mut replay = Replay {
            index: Index::new(),
            cache_share: match options.memory_limit_bytes {
                0 => u64::MAX,
                limit => (limit - reserve(limit)) / SHARDS,
            },
            left_values_out: false,
            max_cas: 0,
            flush_deadline: 0,
            records: 0,
        };
        let mut lsn = 0u64;
        let mut cut_bytes = 0u64;
        let mut resume: Option<(u64, u64)> = None; // (sequence, length) of the active segment
        let mut usage: std::collections::BTreeMap<u64, SegmentUsage> = Default::default();
        for (i, &sequence) in sequences.iter().enumerate() {
            let name = log::segment_name(sequence);
            let data = disk.read(&name)?;
            let is_last = i + 1 == sequences.len();
            match record::parse_segment_header(&data) {
                Header::Valid { sequence: s } if s == sequence => {}
                Header::Valid { sequence: s } => {
                    return Err(Error::Format(format!("{name} says it is segment {s}")));
                }
                Header::Truncated if is_last => {
                    // Its creation was torn before anything was acknowledged in it.
                    cut_bytes += data.len() as u64;
                    disk.remove(&name)?;
                    disk.sync_dir()?;
                    break;
                }
                Header::Truncated | Header::Invalid(_) if is_last && data.len() <= 32 => {
                    cut_bytes += data.len() as u64;
                    disk.remove(&name)?;
                    disk.sync_dir()?;
                    break;
                }
                Header::Truncated => {
                    return Err(Error::Format(format!("{name} is shorter than its header")));
                }
                Header::Invalid(why) => return Err(Error::Format(format!("{name}: {why}"))),
            }
            let mut pos = record::SEGMENT_HEADER_BYTES;
            let mut cut = false;
            while pos < data.len() {
                match record::decode(&data[pos..]) {
                    Decoded::Record(rec, len) => {
                        replay.apply(
                            &rec,
                            At {
                                segment: sequence,
                                offset: pos,
                                len,
                            },
                        );
                        pos += len;
                        lsn += len as u64;
                    }
                    Decoded::Truncated | Decoded::Corrupt => {
                        cut = true;
                        break;
                    }
                }
            }
            if cut {
                // Nothing after a bad record can be trusted to follow it in order: cut the
                // segment there and drop every later one.
                cut_bytes += (data.len() - pos) as u64;
                disk.truncate(&name, pos as u64)?;
                for &later in &sequences[i + 1..] {
                    let later_name = log::segment_name(later);
                    cut_bytes += disk.read(&later_name).map(|d| d.len() as u64).unwrap_or(0);
                    disk.remove(&later_name)?;
                }
                disk.sync_dir()?;
                eprintln!(
                    "kura: recovery cut {cut_bytes} bytes of torn or corrupt log at {name}:{pos}"
                );
                resume = Some((sequence, pos as u64));
                usage.entry(sequence).or_default().bytes = pos as u64;
                break;
            }
            resume = Some((sequence, data.len() as u64));
            usage.entry(sequence).or_default().bytes = data.len() as u64;
        }
        // Drop what is dead now; count what is live, segment by segment.
        let mut items = 0u64;
        let mut flushed: Vec<(Arc<[u8]>, Location)> = Vec::new();
        for shard in replay.index.shards() {
            let mut shard = shard.write();
            shard.retain(|key, e| match liveness(e, now, replay.flush_deadline) {
                Liveness::Live => true,
                Liveness::Expired => false,
                Liveness::Flushed => {
                    flushed.push((key.clone(), e.location));
                    false
                }
            });
            items += shard.len() as u64;
            for (_, e) in shard.iter() {
                usage.entry(e.location.segment).or_default().live_bytes +=
                    u64::from(e.location.len);
            }
        }
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
            disk,
            resume,
            LogConfig {
                durability: options.durability,
                fsync_interval: options.fsync_interval,
                segment_size_bytes: options.segment_size_bytes,
                on_ack: options.on_ack,
            },
        )?;
        // Dropping a version hidden by a delayed flush is a deletion and goes in the log
        // (see `remove_if_dead`); a delete appended before a crash may not have reached it.
        for (key, location) in &flushed {
            log.append(&Record::Delete { key }, Holds::Nothing, Some(*location))?;
        }
        let store = Store {
            index: replay.index,
            log,
            clock: options.clock,
            next_cas: AtomicU64::new(replay.max_cas + 1),
            flush_deadline: AtomicU32::new(replay.flush_deadline),
            curr_items: AtomicU64::new(items),
            recovered_records: replay.records,
            recovery_cut_bytes: cut_bytes,
            compaction: parking_lot::Mutex::new(()),
            compactions: AtomicU64::new(0),
            compaction_copied_bytes: AtomicU64::new(0),
            compaction_reclaimed_bytes: AtomicU64::new(0),
            expired_purged: AtomicU64::new(0),
            opened_lsn: lsn,
            memory_limit: AtomicU64::new(options.memory_limit_bytes),
            value_reads: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            values_out: std::sync::atomic::AtomicBool::new(replay.left_values_out),
        };
        // Replay kept values while each shard had room; the index's share is known only
        // now.
        for shard in store.index.shards() {
            store.enforce_budget(&mut shard.write());
        }
        Ok(store)
    }

    pub fn now_secs(&self) -> u32 {
        self.clock.now_secs()
    }

    /// The live version of `key`, counted as an access. A value not in memory is read
    /// from the log on this thread (see [`Store::missing_value`] to read it elsewhere
    /// first).
    pub fn get(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        self.read(key, Access::Fetch)
    }

    /// The live version of `key`, without counting an access.
    pub fn peek(&self, key: &[u8]) -> Result<Option<Item>, Error> {
        self.read(key, Access::NoAccess)
    }

    fn read(&self, key: &[u8], access: Access) -> Result<Option<Item>, Error> {
        let shard = self.index.shard(key);
        let mut loaded: Loaded = None;
        loop {
            let now = self.now_secs();
            let deadline = self.flush_deadline.load(Ordering::Acquire);
            let missing = {
                let guard = shard.read();
                let Some(entry) = guard.get(key) else {
                    return Ok(None);
                };
                if !is_live(entry, now, deadline) {
                    drop(guard);
                    // Dead: drop it now rather than keep its memory until overwritten.
                    let mut guard = shard.write();
                    self.remove_if_dead(&mut guard, key, now, deadline);
                    return Ok(None);
                }
                value_at_hand(entry, &loaded).map(|value| {
                    let item = snapshot(entry, value);
                    if access == Access::Fetch {
                        entry.mark_access(now);
                    }
                    item
                })
            };
            match missing {
                Ok(item) => return Ok(Some(item)),
                Err(missing) => loaded = Some((missing.cas, self.load(key, missing)?)),
            }
        }
    }

    /// False while every value has always been in memory: then
    /// [`Store::missing_value`] would find nothing, and callers may skip asking.
    pub fn values_may_be_out_of_memory(&self) -> bool {
        self.values_out.load(Ordering::Relaxed)
    }

    /// Whether `key`'s live version has its value only in the log; if so, what
    /// [`Store::load_value`] needs to bring it into memory. For a caller that reads
    /// values off its request thread before running a request that needs them.
    pub fn missing_value(&self, key: &[u8]) -> Option<MissingValue> {
        let guard = self.index.shard(key).read();
        let entry = guard.get(key)?;
        let missing = value_at_hand(entry, &None).err()?;
        let live = is_live(
            entry,
            self.now_secs(),
            self.flush_deadline.load(Ordering::Acquire),
        );
        live.then_some(missing)
    }

    /// Reads a value [`Store::missing_value`] reported from the log (one positional
    /// read) and puts it in memory. Blocks on the disk: call it where that is fine.
    pub fn load_value(&self, key: &[u8], missing: MissingValue) -> Result<(), Error> {
        self.load(key, missing).map(|_| ())
    }

    /// Reads `key`'s value at `missing` from the log, installs it in memory if the key
    /// is still at that version, and returns it. If compaction moved the record (its
    /// segment can be gone by the time the read starts) the read follows it.
    fn load(&self, key: &[u8], mut missing: MissingValue) -> Result<Arc<[u8]>, Error> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let read = self.log.read_record(missing.location);
            let failure = read.as_ref().err().map(|e| e.to_string());
            let value = read.ok().and_then(|bytes| match record::decode(&bytes) {
                Decoded::Record(
                    Record::Put {
                        key: k, value, cas, ..
                    },
                    _,
                ) if k == key && cas == missing.cas => Some(Arc::<[u8]>::from(value)),
                _ => None,
            });
            if let Some(value) = value {
                self.value_reads.fetch_add(1, Ordering::Relaxed);
                let mut shard = self.index.shard(key).write();
                if shard.install(key, missing.cas, &value) {
                    self.enforce_budget(&mut shard);
                }
                return Ok(value);
            }
            // Not there: moved by compaction, or damaged. Look again.
            let now_at = {
                let guard = self.index.shard(key).read();
                guard
                    .get(key)
                    .filter(|e| e.cas == missing.cas)
                    .map(|e| e.location)
            };
            match now_at {
                Some(location) if location != missing.location && attempts < 8 => {
                    missing.location = location;
                }
                _ => {
                    return Err(Error::Format(format!(
                        "the record of a value at segment {} offset {} cannot be read: {}",
                        missing.location.segment,
                        missing.location.offset,
                        failure.as_deref().unwrap_or("not the version expected")
                    )));
                }
            }
        }
    }

    /// The memory budget for the index and the values in memory; 0 = none.
    pub fn set_memory_limit(&self, bytes: u64) {
        self.memory_limit.store(bytes, Ordering::Relaxed);
        self.trim_to_budget();
    }

    pub fn memory_limit(&self) -> u64 {
        self.memory_limit.load(Ordering::Relaxed)
    }

    /// Whether a store of `key` fits the memory budget: the key is already in the
    /// index, or the index has room for one more. Values never make a store refuse:
    /// they live on disk when memory is short; keys must stay in memory.
    pub fn has_room_for_key(&self, key: &[u8]) -> bool {
        let limit = self.memory_limit();
        limit == 0
            || self.index.bytes() + key_cost(key.len()) <= limit - reserve(limit)
            || self.index.shard(key).read().get(key).is_some()
    }

    /// Brings every shard's values within the memory budget. Writes do this for their
    /// own shard as they go; values that could not leave then (their record not yet
    /// written) go on this pass. The server's maintenance thread calls it every second.
    pub fn trim_to_budget(&self) {
        if self.memory_limit() == 0 {
            return;
        }
        for shard in self.index.shards() {
            self.enforce_budget(&mut shard.write());
        }
    }

    /// Evicts values from `shard` until it is within its share of what the budget
    /// leaves after the index.
    fn enforce_budget(&self, shard: &mut Shard) {
        let limit = self.memory_limit();
        if limit == 0 {
            return;
        }
        let for_values = (limit - reserve(limit)).saturating_sub(self.index.bytes());
        let share = for_values / SHARDS;
        if shard.cached_bytes > share {
            let evicted = shard.evict_to(share, self.log.written_lsn());
            if evicted > 0 {
                self.evictions.fetch_add(evicted, Ordering::Relaxed);
                self.values_out.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Drops a dead version met by a request, as memcached unlinks one. A version
    /// hidden by a delayed flush_all is deleted in the log too: a later flush_all that
    /// replaces the deadline would show it again otherwise, after a restart but not
    /// before. An expired one needs no record; replay finds it expired as well.
    fn remove_if_dead(&self, shard: &mut Shard, key: &[u8], now: u32, deadline: u32) {
        if let Some(entry) = shard.get(key) {
            let state = liveness(entry, now, deadline);
            match state {
                Liveness::Live => return,
                Liveness::Flushed => {
                    let delete = Record::Delete { key };
                    if self
                        .log
                        .append(&delete, Holds::Nothing, Some(entry.location))
                        .is_err()
                    {
                        // A poisoned log: leave the version hidden, not deleted.
                        return;
                    }
                }
                Liveness::Expired => self.log.free(entry.location),
            }
            if state != Liveness::Live {
                shard.remove(key);
                self.curr_items.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Looks at `key`'s live version (None if absent, expired or flushed), lets `decide`
    /// choose a change, and makes it: logged, then applied to the index. Returns the
    /// closure's result and what was written (None when nothing was logged). A value
    /// not in memory is read from the log first, on this thread.
    pub fn update<R>(
        &self,
        key: &[u8],
        access: Access,
        decide: impl FnOnce(Option<&Item>, u32) -> (Change, R),
    ) -> Result<(R, Option<Written>), Error> {
        self.update_with(key, access, Need::Value, decide)
    }

    /// As [`Store::update`], for a closure that looks only at the current version's
    /// metadata (whether it exists, its CAS, flags, expiry): the item it sees has an
    /// empty `value` when the value is not in memory, and nothing is read from disk.
    /// For set, add, replace, cas, delete and touch.
    pub fn update_meta<R>(
        &self,
        key: &[u8],
        access: Access,
        decide: impl FnOnce(Option<&Item>, u32) -> (Change, R),
    ) -> Result<(R, Option<Written>), Error> {
        self.update_with(key, access, Need::Meta, decide)
    }

    fn update_with<R>(
        &self,
        key: &[u8],
        access: Access,
        need: Need,
        decide: impl FnOnce(Option<&Item>, u32) -> (Change, R),
    ) -> Result<(R, Option<Written>), Error> {
        if self.log.is_poisoned() {
            return Err(Error::Poisoned);
        }
        let shard_lock = self.index.shard(key);
        let mut loaded: Loaded = None;
        let (now, mut shard, current, current_location) = loop {
            let now = self.now_secs();
            let deadline = self.flush_deadline.load(Ordering::Acquire);
            let mut shard = shard_lock.write();
            // One lookup for the common cases; a dead version (rare) is dropped first.
            let missing = match shard.get(key) {
                Some(entry) if is_live(entry, now, deadline) => {
                    let value = match value_at_hand(entry, &loaded) {
                        Err(_) if need == Need::Meta => Ok(empty_value()),
                        other => other,
                    };
                    match value {
                        Ok(value) => {
                            let location = entry.location;
                            let item = snapshot(entry, value);
                            break (now, shard, Some(item), Some(location));
                        }
                        Err(missing) => missing,
                    }
                }
                Some(_) => {
                    self.remove_if_dead(&mut shard, key, now, deadline);
                    break (now, shard, None, None);
                }
                None => break (now, shard, None, None),
            };
            // Read the value without holding the shard, then look again: the key may
            // have changed meanwhile.
            drop(shard);
            loaded = Some((missing.cas, self.load(key, missing)?));
        };
        let (change, result) = decide(current.as_ref(), now);
        let lsn = match change {
            Change::Keep => {
                if let (Some(entry), Access::Fetch) = (shard.get(key), access) {
                    entry.mark_access(now);
                }
                None
            }
            Change::Touch {
                exptime,
                mark_win_sent,
            } => match shard.get_mut(key) {
                Some(entry) => {
                    let lsn = match exptime {
                        Some(exptime) => {
                            let touch = Record::Touch {
                                key,
                                exptime,
                                cas: entry.cas,
                            };
                            let lsn = self.log.append(&touch, Holds::Nothing, None)?.lsn;
                            entry.exptime = exptime;
                            entry.lsn = lsn;
                            Some(Written {
                                lsn,
                                cas: entry.cas,
                            })
                        }
                        None => None,
                    };
                    if mark_win_sent {
                        entry.win_sent.store(true, Ordering::Relaxed);
                    }
                    if access == Access::Fetch {
                        entry.mark_access(now);
                    }
                    lsn
                }
                None => None,
            },
            Change::Delete => {
                if current_location.is_some() {
                    let frees = current_location;
                    let lsn = self
                        .log
                        .append(&Record::Delete { key }, Holds::Nothing, frees)?
                        .lsn;
                    let mut cas = 0;
                    if let Some(old) = shard.remove(key) {
                        cas = old.cas;
                        self.curr_items.fetch_sub(1, Ordering::Relaxed);
                    }
                    Some(Written { lsn, cas })
                } else {
                    None
                }
            }
            Change::Put(new) => {
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
                let appended = self.log.append(&put, Holds::Version, current_location)?;
                let lsn = appended.lsn;
                let entry = Entry {
                    value_len: u32::try_from(new.value.len()).unwrap_or(u32::MAX),
                    value: Some(new.value),
                    client_flags: new.client_flags,
                    exptime: new.exptime,
                    time: now,
                    cas,
                    lsn,
                    location: appended.location,
                    stale: new.stale,
                    binary_key: new.binary_key,
                    fetched: Default::default(),
                    last_access: AtomicU32::new(now),
                    win_sent: new.win_sent.into(),
                    referenced: Default::default(),
                };
                if shard.put(key, entry).is_none() {
                    self.curr_items.fetch_add(1, Ordering::Relaxed);
                }
                self.enforce_budget(&mut shard);
                Some(Written { lsn, cas })
            }
        };
        Ok((result, lsn))
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
            cache_bytes += shard.cached_bytes;
            cached_values += shard.cached_values;
        }
        Stats {
            index_bytes: self.index.bytes(),
            cache_bytes,
            cached_values,
            memory_limit_bytes: self.memory_limit(),
            value_reads: self.value_reads.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            log_bytes: usage.iter().map(|(_, u)| u.bytes).sum(),
            log_live_bytes: usage.iter().map(|(_, u)| u.live_bytes).sum(),
            log_segments: usage.len() as u64,
            compactions: self.compactions.load(Ordering::Relaxed),
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
    pub fn compact_oldest(&self) -> Result<Option<Compaction>, Error> {
        let _one_at_a_time = self.compaction.lock();
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
        if segment_usage.live_bytes == 0 {
            // Nothing in it is live (the account is kept exact at every append, free and
            // purge): no record needs reading or copying.
            let report = Compaction {
                segment,
                segment_bytes: segment_usage.bytes,
                ..Compaction::default()
            };
            return self
                .retire_segment(report, PendingFlush::Reassert)
                .map(Some);
        }
        let data = self.log.read_segment(segment)?;
        if !matches!(record::parse_segment_header(&data), Header::Valid { sequence } if sequence == segment)
        {
            return Err(Error::Format(format!("segment {segment} lost its header")));
        }
        let mut report = Compaction {
            segment,
            segment_bytes: segment_usage.bytes,
            ..Compaction::default()
        };
        let mut saw_delayed_flush = false;
        let mut pos = record::SEGMENT_HEADER_BYTES;
        while pos < data.len() {
            let Decoded::Record(rec, len) = record::decode(&data[pos..]) else {
                // Recovery cut every bad tail at open; damage since then is corruption at
                // rest. Keep the segment: it may hold versions not yet copied.
                return Err(Error::Format(format!(
                    "segment {segment} is damaged at {pos}"
                )));
            };
            match rec {
                Record::Put { key, value, .. } => {
                    let here = Location {
                        segment,
                        offset: u32::try_from(pos).unwrap_or(u32::MAX),
                        len: u32::try_from(len).unwrap_or(u32::MAX),
                    };
                    let now = self.now_secs();
                    let deadline = self.flush_deadline.load(Ordering::Acquire);
                    let mut shard = self.index.shard(key).write();
                    let current = shard
                        .get(key)
                        .map(|e| (e.location == here, is_live(e, now, deadline)));
                    match current {
                        Some((true, true)) => {
                            if let Some(entry) = shard.get_mut(key) {
                                let item_flags = if entry.stale { ITEM_STALE } else { 0 }
                                    | if entry.binary_key { ITEM_BINARY_KEY } else { 0 };
                                let copy = Record::Put {
                                    key,
                                    value,
                                    client_flags: entry.client_flags,
                                    exptime: entry.exptime,
                                    time: entry.time,
                                    cas: entry.cas,
                                    item_flags,
                                };
                                let appended =
                                    self.log.append(&copy, Holds::Version, Some(here))?;
                                entry.location = appended.location;
                                report.copied_bytes += u64::from(appended.location.len);
                            }
                        }
                        Some((true, false)) => {
                            // Expired or flushed: purge instead of copying.
                            self.remove_if_dead(&mut shard, key, now, deadline);
                            report.purged_items += 1;
                        }
                        _ => {}
                    }
                }
                Record::FlushAll { deadline, .. } if deadline != 0 => saw_delayed_flush = true,
                _ => {}
            }
            pos += len;
        }
        let flush = if saw_delayed_flush {
            PendingFlush::Reassert
        } else {
            PendingFlush::Untouched
        };
        self.retire_segment(report, flush).map(Some)
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

    /// Drops every expired version from the index (its disk space becomes garbage for
    /// compaction to reclaim), one shard at a time. Returns how many went.
    pub fn purge_expired(&self) -> u64 {
        let mut purged = 0;
        for shard in self.index.shards() {
            let now = self.now_secs();
            let deadline = self.flush_deadline.load(Ordering::Acquire);
            let mut guard = shard.write();
            let expired: Vec<Arc<[u8]>> = guard
                .iter()
                .filter(|(_, e)| liveness(e, now, deadline) == Liveness::Expired)
                .map(|(k, _)| k.clone())
                .collect();
            for key in expired {
                self.remove_if_dead(&mut guard, &key, now, deadline);
                purged += 1;
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
