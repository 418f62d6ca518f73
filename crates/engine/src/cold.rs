//! Versions only in the log: which records to read for a key, reading them (nearby ones
//! with one read), and putting the versions read back in memory.
//!
//! A key's version is either in memory (in its shard's cache) or only in the log. A
//! request for a key that may be only in the log reads the candidate records first
//! (one read, almost always), without the shard lock, then looks again; see
//! [`Store::unresolved`] for callers that read elsewhere first.
//!
//! What it is not for: deciding which versions leave memory (`budget.rs` and the index's
//! eviction), or whether a version read is dead (`expiry.rs`).
//!
//! Invariants:
//! - A version read goes into memory only if its slot still points at the record read.
//! - A record that cannot be read because compaction moved it meanwhile is skipped: the
//!   next lookup finds where it went. A request gives up with an error after
//!   [`MAX_ROUNDS`] such rounds.
//! - Until any version has been out of memory, [`Store::unresolved`] finds nothing and
//!   callers may skip asking ([`Store::values_may_be_out_of_memory`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::index::{self, Entry, Found, Hashed, Loaded, Version};
use crate::item::Item;
use crate::key::{Key, KEY_MAX_BYTES};
use crate::log::{self, Location};
use crate::record::{self, Decoded, Record, ITEM_BINARY_KEY, ITEM_STALE};
use crate::{Error, Store};

/// A key whose version may be only in the log: the records to read to know. See
/// [`Store::unresolved`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    h: Hashed,
    /// Raw address, segment and offset of each record to read.
    records: Vec<(u64, u64, u32)>,
}

impl Unresolved {
    pub(crate) fn new(h: Hashed, records: Vec<(u64, u64, u32)>) -> Unresolved {
        Unresolved { h, records }
    }

    /// Where its first record lies: segment and offset.
    fn place(&self) -> (u64, u32) {
        self.records
            .first()
            .map_or((0, 0), |&(_, segment, offset)| (segment, offset))
    }
}

/// Every record `missing` names, in order: segment and offset.
fn places_of(missing: &[Unresolved]) -> Vec<(u64, u32)> {
    missing
        .iter()
        .flat_map(|u| {
            u.records
                .iter()
                .map(|&(_, segment, offset)| (segment, offset))
        })
        .collect()
}

/// The reads that bring some keys' versions into memory, planned and not yet made
/// ([`Store::plan_cold_reads`]).
pub struct ColdReads {
    missing: Vec<Unresolved>,
    plan: log::PlannedReads,
}

impl ColdReads {
    /// The positional reads to make, each of a segment's blocks.
    pub fn runs(&self) -> &[log::Run] {
        self.plan.runs()
    }
}

/// How many times a request reads records and looks again before it gives up: each
/// round means compaction moved the record between the lookup and the read.
pub(crate) const MAX_ROUNDS: u32 = 16;

/// A version read from the log, as a reader sees it: never fetched since it came back.
pub(crate) fn version_item(v: &Version) -> Item {
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

/// Decodes the put record in `bytes`, read at `segment`/`offset`.
pub(crate) fn decode_version(bytes: &[u8], segment: u64, offset: u32) -> Result<Version, Error> {
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
            space: key.space,
            key: key.bytes.into(),
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

impl Store {
    pub(crate) fn kept_moving(&self, key: Key<'_>) -> Error {
        Error::Format(format!(
            "the record of key {:?} moved {MAX_ROUNDS} times while being read",
            String::from_utf8_lossy(key.bytes)
        ))
    }

    /// Raw addresses with their segment and offset. Call it under the shard lock the
    /// addresses were found under: their segments are then still on disk.
    pub(crate) fn addresses(&self, raws: &[u64]) -> Vec<(u64, u64, u32)> {
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
    pub fn unresolved<'k>(&self, key: impl Into<Key<'k>>) -> Option<Unresolved> {
        let key = key.into();
        if key.bytes.len() > KEY_MAX_BYTES {
            return None;
        }
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
    /// one positional read ([`Log::read_records`](crate::log::Log::read_records)), and
    /// puts their versions in memory: a multi-get's misses in one pass. Blocks on the
    /// disk. The first error (of a record still in use) is returned after every other
    /// read is done.
    pub fn resolve_many(&self, missing: Vec<Unresolved>) -> Result<(), Error> {
        let read = self.log.read_records(&places_of(&missing));
        self.install_many(missing, read)
    }

    /// Plans the reads that [`Store::resolve_many`] would make for `missing`, for a
    /// caller that makes them its own way (the server's io_uring): it reads each of
    /// [`ColdReads::runs`], hands the bytes to [`Store::cold_read_done`], then calls
    /// [`Store::install_cold_reads`].
    pub fn plan_cold_reads(&self, missing: Vec<Unresolved>) -> ColdReads {
        ColdReads {
            plan: self.log.plan_reads(places_of(&missing)),
            missing,
        }
    }

    /// Takes what run `run` of `reads` read: the bytes from its offset (fewer where
    /// the segment ends), or why the read failed.
    pub fn cold_read_done(&self, reads: &mut ColdReads, run: usize, read: std::io::Result<&[u8]>) {
        reads.plan.finish_run(&self.log, run, read);
    }

    /// Makes run `run` of `reads` on this thread (a positional read that blocks), for a
    /// caller whose own way of reading cannot take it.
    pub fn cold_read_here(&self, reads: &mut ColdReads, run: usize) {
        reads.plan.read_here(&self.log, run);
    }

    /// Puts the versions `reads` fetched in memory, as [`Store::resolve_many`] does
    /// once it has read them.
    pub fn install_cold_reads(&self, reads: ColdReads) -> Result<(), Error> {
        self.install_many(reads.missing, reads.plan.into_records())
    }

    /// Installs what was read for each of `missing`, in order (`read` holds their
    /// records one after the other). The first error of a record still in use is
    /// returned after every other is installed.
    fn install_many(
        &self,
        missing: Vec<Unresolved>,
        read: Vec<std::io::Result<Vec<u8>>>,
    ) -> Result<(), Error> {
        let mut bytes = read.into_iter();
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
    pub(crate) fn load(
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
}
