//! A replica's store: it takes no changes from clients and writes nothing of its own
//! (no compaction, no deletes of flushed versions); its log grows only by copies of its
//! primary's records, each applied to the index as it is appended, as replay would
//! apply it. Its log is the primary's byte for byte (`log/copy.rs`), so a position
//! means the same on both, and a promoted replica goes on with the same log.
//!
//! What it is not for: the connection to the primary and the wire format (the server's
//! `replication` module), choosing between a partial and a full copy (the primary's
//! side), or the primary's reads of its log (`log/cursor.rs`).
//!
//! Invariants:
//! - Copies are applied in the primary's log order, one record or one whole batch at a
//!   time, under the shard locks of every key they change: a reader sees a batch whole
//!   or not at all, as on the primary.
//! - A copy is appended before the index changes, as every change is
//!   (`apply.rs`), and every record gets the LSN it has on the primary.
//! - Becoming read-only waits for a running compaction, so no copy of the replica's
//!   own reaches the log after the first copy of the primary's.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::history::History;
use crate::item::{Access, Change, NewCas, NewItem};
use crate::key::{Class, Key};
use crate::log::{Appended, Copied, Holds};
use crate::record::{self, Decoded, Record, ITEM_BINARY_KEY, ITEM_EXPLICIT_CAS, ITEM_STALE};
use crate::store::Locked;
use crate::{Error, Store};

/// What a copied record does, decoded.
struct Part<'a> {
    record: Record<'a>,
    len: u64,
}

/// Splits `unit` (one record, or a batch record and the records it announces) into its
/// records. Refuses anything else: bytes that are not whole sound records, a batch
/// that does not match its header, a batch inside a batch, or a flush in a batch.
fn parts_of(unit: &[u8]) -> Result<Vec<Part<'_>>, Error> {
    let bad = |why: &str| Error::Format(format!("a copied record {why}"));
    let mut parts = Vec::new();
    let mut pos = 0;
    while pos < unit.len() {
        let Decoded::Record(record, len) = record::decode(&unit[pos..]) else {
            return Err(bad("is damaged"));
        };
        parts.push(Part {
            record,
            len: len as u64,
        });
        pos += len;
    }
    match parts.first().map(|p| &p.record) {
        None => return Err(bad("is empty")),
        Some(&Record::Batch { count, bytes }) => {
            let body: u64 = parts[1..].iter().map(|p| p.len).sum();
            if parts.len() - 1 != count as usize || body != u64::from(bytes) {
                return Err(bad("batch does not hold what its header says"));
            }
            if parts[1..].iter().any(|p| p.record.key().is_none()) {
                return Err(bad("batch holds a record of no key"));
            }
        }
        Some(_) if parts.len() > 1 => return Err(bad("run is more than one record")),
        Some(_) => {}
    }
    Ok(parts)
}

impl Store {
    /// Whether this is a replica's store.
    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::Acquire)
    }

    /// Makes this the store of a replica of `primary` (a name for error messages):
    /// clients' changes get [`Error::ReadOnly`] and the store writes nothing of its
    /// own; with None, a primary's again. Waits for a compaction in progress to finish
    /// first.
    pub fn set_read_only(&self, primary: Option<String>) {
        let _no_compaction = self.compaction.lock();
        let read_only = primary.is_some();
        *self.primary.lock() = primary.unwrap_or_default();
        self.read_only.store(read_only, Ordering::Release);
    }

    /// [`Error::ReadOnly`] on a replica's store, [`Error::LeaseEnded`] on a primary
    /// past [`Store::set_writable_until`]: a caller refuses a change with it before it
    /// looks at the data, so that the refusal never depends on what is there.
    pub fn check_writable(&self) -> Result<(), Error> {
        if self.is_read_only() {
            return Err(Error::ReadOnly {
                primary: self.primary.lock().clone(),
            });
        }
        let until = self.lease_until.load(Ordering::Acquire);
        if until != u64::MAX {
            let now = u64::try_from(self.lease_base.elapsed().as_nanos()).unwrap_or(u64::MAX);
            if now >= until {
                return Err(Error::LeaseEnded);
            }
        }
        Ok(())
    }

    /// A cluster's primary takes changes only until `until` (its lease with etcd, by
    /// this node's clock), and none after it unless this is called again with a later
    /// one; None lifts the limit (a node outside a cluster).
    pub fn set_writable_until(&self, until: Option<std::time::Instant>) {
        let nanos = match until {
            None => u64::MAX,
            Some(at) => at
                .checked_duration_since(self.lease_base)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX - 1)),
        };
        self.lease_until.store(nanos, Ordering::Release);
    }

    /// Appends `run`, records copied from the primary's log that start at its LSN
    /// `start_lsn` (whole records and whole batches, as [`Store::read_log`] reads them),
    /// and applies them to the index, one record or one batch at a time. Returns the
    /// LSN at the run's end.
    pub fn apply_copied(&self, run: &[u8], start_lsn: u64) -> Result<u64, Error> {
        let applied = self.apply_units(run, start_lsn);
        self.log.copies_appended();
        applied
    }

    fn apply_units(&self, run: &[u8], start_lsn: u64) -> Result<u64, Error> {
        let mut pos = 0;
        let mut lsn = start_lsn;
        while pos < run.len() {
            let len = match record::decode(&run[pos..]) {
                Decoded::Record(Record::Batch { bytes, .. }, len) => len + bytes as usize,
                Decoded::Record(_, len) => len,
                _ => return Err(Error::Format("a copied record is damaged".to_string())),
            };
            let Some(unit) = run.get(pos..pos + len) else {
                return Err(Error::Format("a copied batch is cut short".to_string()));
            };
            lsn += len as u64;
            self.apply_unit(unit, lsn)?;
            pos += len;
        }
        Ok(lsn)
    }

    /// Appends `unit`, one record or one batch copied from the primary's log that ends
    /// at its LSN `end_lsn`, and applies it to the index.
    fn apply_unit(&self, unit: &[u8], end_lsn: u64) -> Result<(), Error> {
        let parts = parts_of(unit)?;
        let keyed = parts.iter().any(|p| p.record.key().is_some());
        if keyed {
            return self.apply_keyed(unit, &parts, end_lsn);
        }
        let [Part { record, len }] = parts.as_slice() else {
            unreachable!("parts_of gives one record unless it is a batch of keyed ones");
        };
        let part = Copied {
            len: *len,
            holds: Holds::Nothing,
            frees: None,
            class: Class::Memcached,
        };
        match *record {
            Record::FlushAll { deadline, cas, .. } => {
                let mut guards: Vec<_> = self.index.shards().iter().map(|s| s.write()).collect();
                self.log.append_copied(unit, &[part], end_lsn)?;
                self.flushed(&mut guards, deadline);
                self.next_cas.fetch_max(cas + 1, Ordering::AcqRel);
            }
            Record::CasFloor { cas } => {
                self.log.append_copied(unit, &[part], end_lsn)?;
                self.next_cas.fetch_max(cas + 1, Ordering::AcqRel);
            }
            _ => {
                self.log.append_copied(unit, &[part], end_lsn)?;
            }
        }
        Ok(())
    }

    /// [`Store::apply_copied`] for records of keys (a put, a delete, or a batch of
    /// them).
    fn apply_keyed(&self, unit: &[u8], parts: &[Part<'_>], end_lsn: u64) -> Result<(), Error> {
        let keyed: Vec<(usize, Key<'_>)> = parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.record.key().map(|k| (i, k)))
            .collect();
        let keys: Vec<Key<'_>> = keyed.iter().map(|&(_, k)| k).collect();
        for (i, key) in keys.iter().enumerate() {
            if keys[..i].contains(key) {
                return Err(Error::Format(
                    "a copied batch changes one key twice".to_string(),
                ));
            }
        }
        let Locked {
            hashes,
            guard_of,
            mut guards,
            ats,
            ..
        } = self.lock_live(&keys)?;
        let mut copied: Vec<Copied> = parts
            .iter()
            .map(|p| Copied {
                len: p.len,
                holds: Holds::Nothing,
                frees: None,
                class: Class::Memcached,
            })
            .collect();
        for (k, &(i, key)) in keyed.iter().enumerate() {
            let live = ats[k].map(|idx| guards[guard_of[k]].entry(idx).location);
            copied[i].class = key.space.class();
            match parts[i].record {
                Record::Put { .. } => {
                    copied[i].holds = Holds::Version;
                    copied[i].frees = live;
                }
                Record::Delete { .. } => copied[i].frees = live,
                _ => {}
            }
        }
        let appended: Vec<Appended> = self.log.append_copied(unit, &copied, end_lsn)?;
        for (k, &(i, key)) in keyed.iter().enumerate() {
            let shard = &mut guards[guard_of[k]];
            match parts[i].record {
                Record::Put {
                    value,
                    client_flags,
                    exptime,
                    time,
                    cas,
                    item_flags,
                    ..
                } => {
                    let explicit = item_flags & ITEM_EXPLICIT_CAS != 0;
                    if !explicit {
                        self.next_cas.fetch_max(cas + 1, Ordering::AcqRel);
                    }
                    let change = Change::Put(NewItem {
                        value: Arc::from(value),
                        client_flags,
                        exptime,
                        cas: NewCas::Copied { cas, explicit },
                        stale: item_flags & ITEM_STALE != 0,
                        binary_key: item_flags & ITEM_BINARY_KEY != 0,
                        win_sent: false,
                    });
                    let at = ats[k];
                    let copy = Some(appended[i]);
                    self.apply_change(
                        shard,
                        hashes[k],
                        key,
                        change,
                        at,
                        copy,
                        (cas, time, Access::NoAccess),
                    );
                }
                Record::Delete { .. } => {
                    self.apply_change(
                        shard,
                        hashes[k],
                        key,
                        Change::Delete,
                        ats[k],
                        Some(appended[i]),
                        (0, 0, Access::NoAccess),
                    );
                }
                // A touch record (written by Kura before touch wrote whole versions):
                // the new expiry, in memory, as replay takes it.
                Record::Touch { exptime, .. } => {
                    if let Some(idx) = ats[k] {
                        shard.set_exptime(idx, exptime);
                        shard.entry_mut(idx).lsn = u64::MAX;
                    }
                }
                _ => {}
            }
        }
        for shard in guards.iter_mut() {
            self.enforce_budget(shard);
        }
        Ok(())
    }

    /// Starts segment `sequence` at LSN `start_lsn`, where the primary started it.
    pub fn start_segment(&self, sequence: u64, start_lsn: u64) -> Result<(), Error> {
        self.log.start_segment(sequence, start_lsn)
    }

    /// Empties the store and its log, to copy a primary's log from segment `sequence`,
    /// which starts at LSN `start_lsn`, and takes the primary's `history` (a full
    /// synchronisation). `rewind_floor` is the lowest LSN the new log may be rewound to
    /// (`rewind.rs`): for a full copy, the primary's log end when the copy began, since
    /// the segments it removed before were made redundant by records up to there.
    /// Refused unless the store is read-only.
    pub fn restart_log(
        &self,
        sequence: u64,
        start_lsn: u64,
        history: History,
        rewind_floor: u64,
    ) -> Result<(), Error> {
        self.restart_log_keeping(sequence, start_lsn, history, rewind_floor, &[])
    }

    /// [`Store::restart_log`], setting the segments `set_aside` aside for a rewind
    /// (`rewind.rs`) rather than removing them.
    pub(crate) fn restart_log_keeping(
        &self,
        sequence: u64,
        start_lsn: u64,
        history: History,
        rewind_floor: u64,
        set_aside: &[u64],
    ) -> Result<(), Error> {
        if !self.is_read_only() {
            return Err(Error::Format(
                "only a replica's store starts its log again".to_string(),
            ));
        }
        let _no_compaction = self.compaction.lock();
        let mut guards: Vec<_> = self.index.shards().iter().map(|s| s.write()).collect();
        // The checkpoint describes the log that goes.
        match self.disk.remove(crate::checkpoint::FILE) {
            Ok(()) => self.disk.sync_dir()?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        // Whichever log a crash leaves, its floor is not below its own.
        let floor = self.log.rewind_floor();
        self.log.set_rewind_floor(floor.max(rewind_floor))?;
        self.log.restart_at(sequence, start_lsn, set_aside)?;
        self.log.set_rewind_floor(rewind_floor)?;
        for shard in guards.iter_mut() {
            shard.clear();
        }
        if let Some(ordered) = &self.ordered {
            ordered.clear(start_lsn)?;
        }
        self.curr_items.store(0, Ordering::Relaxed);
        self.table_items.store(0, Ordering::Relaxed);
        self.flush_deadline.store(0, Ordering::Release);
        self.to_warm.lock().clear();
        drop(guards);
        self.set_history(history)
    }

    /// Removes the segments before `oldest` (the primary removed its own): their live
    /// records have been copied forward by the primary's compaction, and those copies
    /// are in this log already. Those a cursor stands in stay, for a later trim.
    pub fn trim_log(&self, oldest: u64) -> Result<u64, Error> {
        let _no_compaction = self.compaction.lock();
        let mut removed = 0;
        for (sequence, _) in self.log.usage() {
            let active = self.log.position().0;
            if sequence >= oldest || sequence >= active {
                break;
            }
            self.ordered_durable_through(self.segment_end(sequence))?;
            if !self.log.remove_segment(sequence)? {
                break;
            }
            removed += 1;
        }
        Ok(removed)
    }

    /// The LSN where segment `sequence` starts, if the log holds it.
    /// The LSN segment `sequence` (not the active one) ends at: where the next begins.
    pub(crate) fn segment_end(&self, sequence: u64) -> u64 {
        self.segment_start(sequence + 1)
            .unwrap_or_else(|| self.log.synced_lsn())
    }

    pub fn segment_start(&self, sequence: u64) -> Option<u64> {
        self.log.segment_start(sequence)
    }

    /// The segment the log is writing: where copies go until the primary starts
    /// another.
    pub fn active_segment(&self) -> u64 {
        self.log.position().0
    }

    /// The oldest segment the log holds.
    pub fn oldest_segment(&self) -> u64 {
        self.log.oldest_segment()
    }

    /// A cursor at the oldest record the log holds (what a full copy starts from).
    pub fn follow_log_from_oldest(&self) -> Option<crate::log::Cursor> {
        self.log.follow_oldest()
    }
}
