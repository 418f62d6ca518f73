//! What a SQL transaction read, checked when it commits: if another writer (SQL or
//! memcached) changed any of it since, the transaction's batch is refused whole with
//! [`crate::ApplyError::Conflict`] (MySQL's 1213 to the client).
//!
//! A read set holds:
//! - rows read by key (a primary key, a unique value, a row of a range), with the CAS
//!   the row had at its first read, and keys looked up and not found (a row's key, a
//!   unique-index entry's), which must still be absent;
//! - ranges read through an ordered index, with the primary keys the range held: the
//!   range must hold the same ones (a row inserted into the range, deleted from it, or
//!   moved in or out by an update is a change);
//! - tables scanned whole, with the count of writes to the table when the scan began
//!   ([`TableWrites`]): any write to the table since, or under way, is a change.
//!
//! Rows and scans read by a plain SELECT under READ COMMITTED are held apart and
//! checked only for the rows and tables the transaction writes ([`Reads::written`]).
//!
//! The batch locks the keys read with the keys it writes, and checks the read set
//! under those locks before it decides anything, so nothing changes between the check
//! and the write. Ranges and scan counts are looked at under the same locks: a writer
//! changes a row's ordered entries while it holds the row's lock, and is counted under
//! way from before it locks to after it lets go, so a write this check does not see is
//! one that comes after the commit.

use std::collections::HashMap as StdMap;
use std::sync::atomic::{AtomicU64, Ordering};

use kura_engine::Space;

use crate::batch::RowChange;
use crate::catalog::{TableDef, Via};
use crate::ordered::Range;
use crate::rows::{row_key, row_key_of_entry, unique_key, ROW_SPACE, UNIQUE_SPACE};
use crate::value::Value;

/// The read set's maps (see the crate's manifest for the hasher).
type HashMap<K, V> = StdMap<K, V, foldhash::fast::RandomState>;

/// A key of the store: its space and bytes.
pub(crate) type StoreKey = (Space, Vec<u8>);

/// A range read through an ordered index, and the primary keys it held.
#[derive(Debug, Clone)]
struct RangeRead {
    table: u32,
    via: Via,
    range: Range,
    /// The store's ordered keys the range held ([`crate::Tables::range_keys`]).
    keys: Vec<Vec<u8>>,
}

/// What a transaction read (see the module's docs).
#[derive(Debug, Clone, Default)]
pub struct Reads {
    /// Keys read, with the CAS the item had (None: absent).
    keys: HashMap<StoreKey, Option<u64>>,
    ranges: Vec<RangeRead>,
    /// Tables scanned: number, and the table's write count when the first scan began.
    scans: HashMap<u32, u64>,
    /// What reads checked only where the transaction writes (a plain SELECT under
    /// READ COMMITTED) read: rows with their CAS at the first read, checked if the
    /// transaction writes the row, and tables scanned, whose rows are not noted one
    /// by one, checked as scans if it writes the table.
    rows_if_written: HashMap<StoreKey, u64>,
    /// Rows of `rows_if_written` still to be put in it, in the order read: most
    /// transactions that read rows this way write none of them, so a read only notes
    /// the row and the map is built when a write or a checked read needs it.
    pending_if_written: Vec<(StoreKey, u64)>,
    scans_if_written: HashMap<u32, u64>,
}

/// How many rows [`Reads::row_if_written`] notes before it puts them in its map (so
/// a transaction that reads the same rows again and again holds each once).
const PENDING_MAX: usize = 4096;

impl Reads {
    pub fn new() -> Reads {
        Reads::default()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.ranges.is_empty() && self.scans.is_empty()
    }

    pub fn clear(&mut self) {
        self.keys.clear();
        self.ranges.clear();
        self.scans.clear();
        self.rows_if_written.clear();
        self.pending_if_written.clear();
        self.scans_if_written.clear();
    }

    /// Puts the rows noted by [`Reads::row_if_written`] in its map.
    fn fold_pending(&mut self) {
        for (key, cas) in self.pending_if_written.drain(..) {
            if !self.keys.contains_key(&key) {
                self.rows_if_written.entry(key).or_insert(cas);
            }
        }
    }

    /// The row of `def` whose primary key encodes to `pk` was read with CAS `cas`
    /// (None: it was not there). The first read of a row is the one checked.
    pub fn row(&mut self, def: &TableDef, pk: &[u8], cas: Option<u64>) {
        let key = (ROW_SPACE, row_key_of_entry(def, pk));
        self.fold_pending();
        let first = self.rows_if_written.remove(&key).map(Some);
        self.keys.entry(key).or_insert(first.unwrap_or(cas));
    }

    /// No row of `def` held `value` under unique index `index`.
    pub fn no_unique(&mut self, def: &TableDef, index: usize, value: &Value) {
        if let Ok(Some(key)) = unique_key(def, index, value) {
            self.keys.entry((UNIQUE_SPACE, key)).or_insert(None);
        }
    }

    /// The range `range` of `def`'s ordered `via` held the store's ordered keys `keys`
    /// ([`crate::Tables::range_keys`]).
    pub fn range(&mut self, def: &TableDef, via: Via, range: &Range, keys: Vec<Vec<u8>>) {
        self.ranges.push(RangeRead {
            table: def.number,
            via,
            range: range.clone(),
            keys,
        });
    }

    /// `def` was scanned whole from when its write count was `writes`.
    pub fn scan(&mut self, def: &TableDef, writes: u64) {
        self.scans.entry(def.number).or_insert(writes);
    }

    /// As [`Reads::row`] for a row read with CAS `cas`, checked only if the
    /// transaction writes the row ([`Reads::written`]).
    pub fn row_if_written(&mut self, def: &TableDef, pk: &[u8], cas: u64) {
        if self.pending_if_written.len() == PENDING_MAX {
            self.fold_pending();
        }
        self.pending_if_written
            .push(((ROW_SPACE, row_key_of_entry(def, pk)), cas));
    }

    /// As [`Reads::scan`], checked only if the transaction writes `def`
    /// ([`Reads::written`]).
    pub fn scan_if_written(&mut self, def: &TableDef, writes: u64) {
        self.scans_if_written.entry(def.number).or_insert(writes);
    }

    /// The transaction's changes are `changes` (`def`: a table's definition by
    /// number): what was read to be checked only where it writes joins the checked
    /// reads for the rows and tables it writes, and the rest is forgotten.
    pub fn written<'c>(
        &mut self,
        changes: &[RowChange],
        def: impl Fn(u32) -> Option<&'c TableDef>,
    ) {
        if !changes.is_empty() {
            self.fold_pending();
        }
        for change in changes {
            let table = change.table();
            if let Some(since) = self.scans_if_written.remove(&table) {
                let at = self.scans.entry(table).or_insert(since);
                *at = (*at).min(since);
            }
            if self.rows_if_written.is_empty() {
                continue;
            }
            let Some(def) = def(table) else {
                continue;
            };
            let pk = match change {
                RowChange::Update { pk, .. } | RowChange::Delete { pk, .. } => pk,
                RowChange::Insert { values, .. } => &values[def.table.primary],
                _ => continue,
            };
            let Ok(key) = row_key(def, pk) else {
                continue;
            };
            let key = (ROW_SPACE, key);
            if let Some(cas) = self.rows_if_written.remove(&key) {
                self.keys.entry(key).or_insert(Some(cas));
            }
        }
        self.rows_if_written.clear();
        self.pending_if_written.clear();
        self.scans_if_written.clear();
    }

    /// The keys the commit's batch locks to check the read set.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &StoreKey> {
        self.keys.keys()
    }

    /// Whether everything read is as it was. `cas_now` gives a locked key's CAS now
    /// (`Some(None)`: absent; None: the key is not locked, which the caller prevents);
    /// `def` a table's definition by number (None: dropped); `range_now` the primary
    /// keys a range holds now.
    pub(crate) fn unchanged<'c>(
        &self,
        cas_now: impl Fn(&StoreKey) -> Option<Option<u64>>,
        def: impl Fn(u32) -> Option<&'c TableDef>,
        range_now: impl Fn(&TableDef, Via, &Range) -> Option<Vec<Vec<u8>>>,
        writes: &TableWrites,
        own: Option<&Writing<'_>>,
    ) -> bool {
        for (key, cas) in &self.keys {
            if cas_now(key) != Some(*cas) {
                return false;
            }
        }
        for (&table, &since) in &self.scans {
            if !writes.unchanged(table, since, own) {
                return false;
            }
        }
        for read in &self.ranges {
            let Some(def) = def(read.table) else {
                return false;
            };
            match range_now(def, read.via, &read.range) {
                Some(keys) if keys == read.keys => {}
                _ => return false,
            }
        }
        true
    }
}

/// How many slots [`TableWrites`] counts in.
const SLOTS: usize = 64;

/// Writes to each table's rows, counted around the writer's batch: `started` before it
/// takes its locks, `finished` after it lets them go (also when it fails). A scan
/// notes `finished` before it reads; the transaction commits only if, under its
/// batch's locks, `finished` is the same and no other writer is between the two (a
/// row a writer moved while the scan read the log may have been missed by it).
/// Tables share a slot when their numbers are equal modulo 64: a write to one then
/// also refuses a transaction that scanned the other, which is never a lost change.
#[derive(Debug)]
pub struct TableWrites {
    started: [AtomicU64; SLOTS],
    finished: [AtomicU64; SLOTS],
}

impl Default for TableWrites {
    fn default() -> TableWrites {
        TableWrites {
            started: std::array::from_fn(|_| AtomicU64::new(0)),
            finished: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// A batch writing rows of some tables: counted finished when dropped.
pub(crate) struct Writing<'w> {
    writes: &'w TableWrites,
    slots: Vec<usize>,
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        for &slot in &self.slots {
            self.writes.finished[slot].fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Writing<'_> {
    /// How many of the writers now under way on table `number`'s slot are this one.
    fn own(&self, number: u32) -> u64 {
        u64::from(self.slots.contains(&slot(number)))
    }
}

fn slot(number: u32) -> usize {
    number as usize % SLOTS
}

impl TableWrites {
    /// The count of finished writes to table `number` now.
    pub fn of(&self, number: u32) -> u64 {
        self.finished[slot(number)].load(Ordering::SeqCst)
    }

    /// A batch starts writing rows of the tables `numbers`.
    pub(crate) fn writing(&self, numbers: impl IntoIterator<Item = u32>) -> Writing<'_> {
        let mut slots: Vec<usize> = numbers.into_iter().map(slot).collect();
        slots.sort_unstable();
        slots.dedup();
        for &s in &slots {
            self.started[s].fetch_add(1, Ordering::SeqCst);
        }
        Writing {
            writes: self,
            slots,
        }
    }

    /// Whether table `number` had no write finish since `since` and has none under way
    /// but `own`'s.
    fn unchanged(&self, number: u32, since: u64, own: Option<&Writing<'_>>) -> bool {
        let finished = self.finished[slot(number)].load(Ordering::SeqCst);
        let started = self.started[slot(number)].load(Ordering::SeqCst);
        let own = own.map_or(0, |w| w.own(number));
        finished == since && started == finished + own
    }
}

impl crate::rows::Tables {
    /// The count of writes to `def`'s rows now: a scan takes it before it reads, for
    /// [`Reads::scan`].
    pub fn table_writes(&self, def: &TableDef) -> u64 {
        self.writes.of(def.number)
    }
}
