//! Opening the store: replaying the log into the index (from the index checkpoint's
//! position when there is a usable one), cutting a torn or corrupt tail at the last valid
//! record, dropping what is dead by now, and starting the log writer.
//!
//! What it is not for: the checkpoint's byte layout (`checkpoint.rs`) or writing one
//! (`checkpointing.rs`).
//!
//! Invariants:
//! - A record counts only if it decodes whole with a matching checksum. Replay stops at
//!   the first that does not, cuts its segment there and removes every later one:
//!   nothing after a bad record can be trusted to follow it in order. Zeros to the end
//!   of the newest segment are the space it had reserved, the end of the log, not
//!   damage.
//! - Expiry is never judged mid-replay (a later touch may have extended a version); the
//!   sweep after replay drops what is dead then.
//! - The next CAS is above every CAS the log holds (generated CAS values, CAS floors,
//!   flushes), so CAS values are never reused across restarts.
//! - A checkpoint is used only if it is whole, was written since the last compaction
//!   removed a segment, and its position is still in the log.

use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;

use crate::budget::reserve;
use crate::checkpoint::{self, Checkpoint};
use crate::cold::decode_version;
use crate::disk::{Disk, OsDisk, ReadFile};
use crate::expiry::{entry_liveness, Liveness};
use crate::history::History;
use crate::index::{
    self, Entry, Found, Hashed, Index, Loaded, Shard, Version, SEGMENT_WINDOW, SHARDS,
};
use crate::key::{Class, Key, OwnedKey};
use crate::log::{self, Holds, Location, Log, LogConfig, Resume, SegmentUsage};
use crate::record::{self, Decoded, Header, Record, ITEM_EXPLICIT_CAS};
use crate::store::{data_len, Options};
use crate::{Error, Store};

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
    fn find(&mut self, shard: &Shard, key: Key<'_>, h: Hashed) -> Result<(Found, Loaded), Error> {
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
    /// The spaces kept in order: those held are the ordered keyspace's to replay
    /// (`Store::catch_up_ordered`), slots and account alike.
    held: crate::OrderedSpaces,
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
    touched: Vec<OwnedKey>,
}

/// Where in the log replay is: the record being applied and its segment's bytes.
struct At {
    segment: u64,
    offset: usize,
    len: usize,
}

impl Replay<'_> {
    fn unlive(
        usage: &mut std::collections::BTreeMap<u64, SegmentUsage>,
        location: Location,
        class: Class,
    ) {
        usage
            .entry(location.segment)
            .or_default()
            .free(class, u64::from(location.len));
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
                if self.held.is_held(key.space) {
                    self.records += 1;
                    return Ok(());
                }
                // Never judge expiry mid-replay: a later touch may have extended this
                // version. The sweep after replay drops what is dead now.
                let class = key.space.class();
                let h = self.index.hash(key);
                let mut shard = self.index.shard(h).write();
                let (found, loaded) = self.reader.find(&shard, key, h)?;
                let old = found_version(&shard, &found, &loaded);
                if let Some((_, location, data)) = old {
                    Replay::unlive(&mut self.usage, location, class);
                    *shard.data_bytes_mut(class) -= data;
                }
                let offset = u32::try_from(at.offset).unwrap_or(u32::MAX);
                let location = Location {
                    segment: at.segment,
                    offset,
                    len: u32::try_from(at.len).unwrap_or(u32::MAX),
                };
                self.usage
                    .entry(at.segment)
                    .or_default()
                    .add_live(class, at.len as u64);
                *shard.data_bytes_mut(class) += data_len(key.bytes, value);
                // Keep versions in memory while the shard's share of what the index
                // leaves of the budget has room.
                let keep = self.budget.is_none_or(|budget| {
                    let share = budget.saturating_sub(self.index.bytes()) / SHARDS;
                    shard.cached_bytes() + data_len(key.bytes, value) + 128 <= share
                });
                if keep {
                    let v = Version {
                        space: key.space,
                        key: key.bytes.into(),
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
            Record::Delete { key } | Record::Touch { key, .. } if self.held.is_held(key.space) => {}
            Record::Delete { key } => {
                let h = self.index.hash(key);
                let mut shard = self.index.shard(h).write();
                let (found, loaded) = self.reader.find(&shard, key, h)?;
                if let Some((pos, location, data)) = found_version(&shard, &found, &loaded) {
                    let class = key.space.class();
                    Replay::unlive(&mut self.usage, location, class);
                    *shard.data_bytes_mut(class) -= data;
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
                    shard.set_exptime(idx, exptime);
                    let entry = shard.entry_mut(idx);
                    // Its record does not say this expiry: it stays in memory (at an LSN
                    // no write reaches) until it is written anew after replay.
                    entry.lsn = u64::MAX;
                    self.touched.push(OwnedKey {
                        space: key.space,
                        bytes: key.bytes.into(),
                    });
                }
            }
            Record::CasFloor { cas } => self.max_cas = self.max_cas.max(cas),
            // Replay checks a batch whole before it applies the records that follow.
            Record::Batch { .. } => {}
            Record::FlushAll { deadline, cas, .. } => {
                self.max_cas = self.max_cas.max(cas);
                if deadline == 0 {
                    for shard in self.index.shards() {
                        shard.write().clear_memcached();
                    }
                    for usage in self.usage.values_mut() {
                        usage.free_memcached();
                    }
                }
                self.flush_deadline = deadline;
            }
        }
        self.records += 1;
        Ok(())
    }

    /// Drops what is dead at `now` among the versions in memory once replay is done.
    /// Returns the versions a delayed flush_all hid, with their records: dropping
    /// them is a deletion, which goes in the log once it runs.
    fn sweep(&mut self, now: u32) -> Vec<(OwnedKey, Location)> {
        let mut flushed: Vec<(OwnedKey, Location)> = Vec::new();
        for shard in self.index.shards() {
            let mut shard = shard.write();
            let dead = shard
                .cached_keys(|e| entry_liveness(e, now, self.flush_deadline) != Liveness::Live);
            for key in dead {
                let h = self.index.hash(key.as_key());
                let Found::Cached { pos, idx } = shard.find(key.as_key(), h, &Loaded::new()) else {
                    continue;
                };
                let entry = shard.entry(idx);
                let location = entry.location;
                let data = data_len(&entry.key, &entry.value);
                let state = entry_liveness(entry, now, self.flush_deadline);
                let class = key.space.class();
                *shard.data_bytes_mut(class) -= data;
                match state {
                    // Its delete, appended to the log once it runs (see `Store::open`), frees
                    // its bytes.
                    Liveness::Flushed => flushed.push((key.clone(), location)),
                    _ => Replay::unlive(&mut self.usage, location, class),
                }
                shard.remove(pos);
            }
        }
        flushed
    }
}

/// If a batch record starts at `pos`: the records it says follow (count and bytes)
/// and its own length. Looks at the kind byte first, so other records are decoded once.
fn batch_at(data: &mut log::Window, pos: usize) -> std::io::Result<Option<(u32, u32, usize)>> {
    if !record::is_batch(data.at(pos, record::FRAME_BYTES + 1)?) {
        return Ok(None);
    }
    Ok(match data.record(pos)? {
        Decoded::Record(Record::Batch { count, bytes }, len) => Some((count, bytes, len)),
        // Damaged: the loop finds out and cuts there.
        _ => None,
    })
}

/// Whether `count` sound records that are not batches, `bytes` long in all, start at
/// `from`.
fn batch_is_whole(
    data: &mut log::Window,
    from: usize,
    count: u32,
    bytes: u32,
) -> std::io::Result<bool> {
    let end = from + bytes as usize;
    let mut pos = from;
    for _ in 0..count {
        match data.record(pos)? {
            Decoded::Record(Record::Batch { .. }, _) => return Ok(false),
            Decoded::Record(_, len) if pos + len <= end => pos += len,
            _ => return Ok(false),
        }
    }
    Ok(count > 0 && pos == end)
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
            tracing::warn!("not using the index checkpoint: {why}; replaying the whole log");
            return Ok(None);
        }
    };
    if sequences.first() != Some(&c.oldest_segment) || !sequences.contains(&c.segment) {
        tracing::warn!("the index checkpoint predates a compaction; replaying the whole log");
        return Ok(None);
    }
    if c.offset > record::SEGMENT_HEADER_BYTES as u64 {
        let file = disk.open_read(&log::segment_name(c.segment))?;
        if file.read_exact_at(&mut [0u8], c.offset - 1).is_err() {
            tracing::warn!("the log ends before the index checkpoint; replaying the whole log");
            // For good: the log resumes short of its position and reserves space past
            // it, which would read as zeros there and pass this check next time.
            disk.remove(checkpoint::FILE)?;
            disk.sync_dir()?;
            return Ok(None);
        }
    }
    Ok(Some(c))
}

/// Where the log resumes: at the end of the last segment replayed, `resume` (its
/// sequence and length), or in a first segment, created and synced, when there is none.
fn resume_at(
    disk: &dyn Disk,
    resume: Option<(u64, u64)>,
    sequences: &[u64],
    lsn: u64,
    usage: std::collections::BTreeMap<u64, SegmentUsage>,
    mut starts: std::collections::BTreeMap<u64, u64>,
) -> Result<Resume, Error> {
    Ok(match resume {
        Some((sequence, bytes)) => Resume {
            active: disk.open_append(&log::segment_name(sequence))?,
            active_sequence: sequence,
            active_bytes: bytes,
            lsn,
            usage,
            starts,
        },
        None => {
            let sequence = sequences.first().copied().unwrap_or(1).max(1);
            let mut active = disk.create(&log::segment_name(sequence))?;
            active.append(&record::segment_header(sequence, lsn))?;
            active.sync()?;
            disk.sync_dir()?;
            let header = record::SEGMENT_HEADER_BYTES as u64;
            starts.insert(sequence, lsn);
            Resume {
                active,
                active_sequence: sequence,
                active_bytes: header,
                lsn,
                starts,
                usage: [(
                    sequence,
                    SegmentUsage {
                        bytes: header,
                        ..SegmentUsage::default()
                    },
                )]
                .into(),
            }
        }
    })
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
        crate::rewind::remove_leftovers(&*disk)?;
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
        // The ordered keyspace first: one built for other held spaces (or from before
        // there were any) is emptied and filled again from the whole log, and then the
        // index checkpoint, whose slots may be held keys', is not used either.
        let ordered = if options.ordered_spaces.is_empty() {
            None
        } else {
            Some(crate::ordered::Ordered::open(
                &*disk,
                options.ordered_spaces,
                options.ordered_cache_bytes,
            )?)
        };
        let checkpoint = match &ordered {
            Some(o) if o.rebuilt => None,
            _ => usable_checkpoint(&*disk, &sequences)?,
        };
        let mut replay = Replay {
            held: options.ordered_spaces,
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
                let were_cached = shard.write().restore(
                    image.capacity,
                    &image.slots,
                    (image.data_bytes, image.table_bytes),
                );
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
        // The sequence and length of the segment the log resumes in.
        let mut resume: Option<(u64, u64)> = None;
        // Where each segment starts: counted back from the checkpoint over the sizes of
        // the segments it covers (sealed segments hold their records and nothing more),
        // and forward through the ones replayed.
        let mut starts = std::collections::BTreeMap::new();
        if start.0 != 0 {
            let mut at =
                lsn.saturating_sub(start.1.saturating_sub(record::SEGMENT_HEADER_BYTES) as u64);
            starts.insert(start.0, at);
            for &sequence in sequences.iter().rev().filter(|&&s| s < start.0) {
                let size = disk.open_read(&log::segment_name(sequence))?.size()?;
                at = at.saturating_sub(size.saturating_sub(record::SEGMENT_HEADER_BYTES as u64));
                starts.insert(sequence, at);
            }
        }
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
                Header::Valid {
                    sequence: s,
                    start_lsn,
                } if s == sequence => {
                    // The LSN where the segment starts is its header's (version 3):
                    // the log's first surviving segment says where LSNs go on from
                    // after older ones were compacted away. Where the checkpoint
                    // resumes, its own LSN is the one for its offset.
                    if let Some(start_lsn) = start_lsn.filter(|_| sequence != start.0) {
                        if lsn != 0 && lsn != start_lsn {
                            tracing::warn!(
                                "{name} says it starts at LSN {start_lsn}, the log before it ends at {lsn}"
                            );
                        }
                        lsn = lsn.max(start_lsn);
                    }
                    if sequence != start.0 {
                        starts.insert(sequence, lsn);
                    }
                }
                Header::Valid { sequence: s, .. } => {
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
                // A batch counts only if every record in it is there and sound: then its
                // records are applied one by one as the loop goes on; else the log is
                // cut at the batch, as at any damaged record.
                if let Some((count, bytes, len)) = batch_at(&mut data, pos)? {
                    if !batch_is_whole(&mut data, pos + len, count, bytes)? {
                        cut = true;
                        break;
                    }
                }
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
                tracing::warn!(
                    "recovery cut {cut_bytes} bytes of torn or corrupt log at {name}:{pos}"
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
        let flushed = replay.sweep(now);
        let usage = std::mem::take(&mut replay.usage);
        let resume = resume_at(&*disk, resume, &sequences, lsn, usage, starts)?;
        let log = Log::start(
            Arc::clone(&disk),
            resume,
            LogConfig {
                durability: options.durability,
                fsync_interval: options.fsync_interval,
                segment_size_bytes: options.segment_size_bytes,
                on_ack: options.on_ack,
                on_synced: options.on_synced,
                stepped_flusher: options.stepped_flusher,
            },
        )?;
        // Dropping a version hidden by a delayed flush is a deletion and goes in the log
        // (see `drop_dead`); a delete appended before a crash may not have reached it.
        // A replica writes nothing of its own: its primary's log says the same.
        for (key, location) in &flushed {
            if options.read_only.is_some() {
                log.free(*location, key.space.class());
            } else {
                let delete = Record::Delete { key: key.as_key() };
                log.append(&delete, Holds::Nothing, Some(*location))?;
            }
        }
        let (items, table_items) = replay
            .index
            .shards()
            .iter()
            .map(|s| s.read().class_counts())
            .fold((0, 0), |(m, t), (sm, st)| (m + sm, t + st));
        let values_out = replay.index.shards().iter().any(|s| s.read().has_cold());
        let touched = std::mem::take(&mut replay.touched);
        let history = History::load_or_create(&*disk)?;
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
            table_items: AtomicU64::new(table_items),
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
            ordered,
            history: parking_lot::Mutex::new(history),
            read_only: std::sync::atomic::AtomicBool::new(options.read_only.is_some()),
            primary: parking_lot::Mutex::new(options.read_only.clone().unwrap_or_default()),
            lease_base: std::time::Instant::now(),
            lease_until: AtomicU64::new(u64::MAX),
        };
        // A touch record's expiry becomes a whole version, so the version can leave
        // memory like any other.
        if options.read_only.is_none() {
            for key in touched {
                store.rewrite_in_memory(key.as_key())?;
            }
        }
        // Replay kept versions while each shard had room; the index's share is known
        // only now.
        for shard in store.index.shards() {
            store.enforce_budget(&mut shard.write());
        }
        store.catch_up_ordered()?;
        Ok(store)
    }

    /// Writes the version of `key` held in memory as a new record, same CAS and time.
    fn rewrite_in_memory(&self, key: Key<'_>) -> Result<(), Error> {
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
}
