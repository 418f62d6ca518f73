//! Many rows changed as one: the writes of a SQL statement or transaction, applied as
//! one engine batch with every unique-index entry they touch, or not at all.
//!
//! The caller (the SQL layer) has already found the rows and computed their new values;
//! this module checks what only the store can tell under its locks (a primary key or a
//! unique value another row holds, a row changed since it was read) and writes. Every
//! row and entry a change touches is locked at once, the changes are decided in order
//! against the versions under the locks (a later change sees an earlier one's rows),
//! and either every record goes to the log as one batch, which replay applies whole,
//! or nothing does. Keys the changes turn out to need that were not locked (the
//! entries of a row being replaced or deleted, a row a REPLACE pushes out) make the
//! attempt start again with them.
//!
//! Optimistic concurrency: an update or delete names the CAS of the row as the
//! statement read it; if another writer (SQL or memcached) changed the row since, the
//! whole batch is refused with [`ApplyError::Conflict`] and the caller may run the
//! statement again. A transaction's batch also carries what it read ([`Reads`]): the
//! keys read are locked with the keys written and the whole read set is checked under
//! those locks before anything is decided. A row's flags and exptime stay what they
//! were through an update.
//!
//! What it is not for: memcached's storage commands, which change one row through
//! [`Tables::write`] with memcached's modes.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use kura_engine::{Change, ItemRef, Key, Space};

use crate::catalog::Catalog;
use crate::error::{value_error, Error};
use crate::reads::Reads;
use crate::row;
use crate::rows::{entry_keys_of, entry_space, row_key, Tables, ATTEMPTS, ROW_SPACE};
use crate::value::Value;

mod run;

use run::Run;

/// What an insert does when its primary key or a unique value is another row's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// The whole batch is refused: [`ApplyError::Duplicate`].
    Fail,
    /// The row is not inserted (MySQL's `INSERT IGNORE`).
    Ignore,
    /// The rows in the way are deleted first (MySQL's `REPLACE`).
    Replace,
    /// The first row in the way (by the primary key, then the unique indexes in order)
    /// is updated instead, to the values the batch's [`Upsert`] gives for rule `n`
    /// (MySQL's `INSERT ... ON DUPLICATE KEY UPDATE`).
    Update(u32),
}

/// Computes an upsert's new row: given the rule, the row in the way and the row the
/// insert proposed, the values the row in the way becomes. Called under the batch's
/// locks, so it must not read or write tables; it may be called again for the same
/// change when an attempt starts over.
pub type Upsert<'u> = dyn FnMut(u32, &[Value], &[Value]) -> Result<Vec<Value>, ApplyError> + 'u;

/// An upsert for batches that have none: refuses.
pub fn no_upsert(_: u32, _: &[Value], _: &[Value]) -> Result<Vec<Value>, ApplyError> {
    Err(ApplyError::Upsert)
}

/// A row as a checked batch leaves it: table number, encoded primary key, and its
/// values (None: deleted). What a transaction's own reads see.
pub type RowAfter = (u32, Vec<u8>, Option<Vec<Value>>);

/// One change to one row of table `table` (its number).
#[derive(Debug, Clone, PartialEq)]
pub enum RowChange {
    Insert {
        table: u32,
        values: Vec<Value>,
        conflict: OnConflict,
    },
    /// The row whose primary key is `pk` becomes `values` (which may change the
    /// primary key). `cas` is the row's CAS when it was read; 0 skips the check (a row
    /// the same batch wrote earlier).
    Update {
        table: u32,
        pk: Value,
        cas: u64,
        values: Vec<Value>,
    },
    Delete {
        table: u32,
        pk: Value,
        cas: u64,
    },
}

impl RowChange {
    pub fn table(&self) -> u32 {
        match self {
            RowChange::Insert { table, .. }
            | RowChange::Update { table, .. }
            | RowChange::Delete { table, .. } => *table,
        }
    }
}

/// What a batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// MySQL's affected rows: inserted, deleted, changed by an update, plus the rows a
    /// REPLACE deleted.
    pub affected: u64,
    /// Rows an update found (changed or not): MySQL's "Rows matched".
    pub matched: u64,
    /// Rows an update or an upsert found and left as they were: what MySQL's
    /// `CLIENT_FOUND_ROWS` counts in the rows affected too.
    pub unchanged: u64,
    /// The batch's LSN: acknowledge after it. None when nothing was written.
    pub lsn: Option<u64>,
}

/// Why a batch was refused. Nothing was written.
#[derive(Debug)]
pub enum ApplyError {
    /// A primary key or unique value another row holds: MySQL's 1062.
    Duplicate {
        table: String,
        /// `PRIMARY` or the unique index's name.
        index: String,
        value: String,
    },
    /// A row read by the statement was changed by another writer since.
    Conflict,
    /// A table the batch names is not in the catalog (dropped meanwhile).
    NoTable(u32),
    /// No room for another key under the memory budget.
    NoMemory,
    /// The batch's [`Upsert`] refused a row; it knows why.
    Upsert,
    Other(Error),
}

impl From<Error> for ApplyError {
    fn from(e: Error) -> ApplyError {
        ApplyError::Other(e)
    }
}

impl From<kura_engine::Error> for ApplyError {
    fn from(e: kura_engine::Error) -> ApplyError {
        ApplyError::Other(Error::Engine(e))
    }
}

/// A key of the batch: a row's or an index entry's.
type BatchKey = (Space, Vec<u8>);

/// What deciding an attempt came to.
enum Decided {
    Done(Applied, Vec<RowAfter>),
    Refused(ApplyError),
    NeedKeys(Vec<BatchKey>),
}

impl Tables {
    /// Applies `changes` in order as one atomic batch (see the module's docs).
    /// `upsert` computes the rows of [`OnConflict::Update`] inserts.
    pub fn apply_changes(
        &self,
        catalog: &Catalog,
        changes: &[RowChange],
        upsert: &mut Upsert<'_>,
    ) -> Result<Applied, ApplyError> {
        self.batch(catalog, changes, &Reads::new(), upsert, true)
            .map(|(applied, _)| applied)
    }

    /// Applies a transaction's `changes` as [`Tables::apply_changes`] does, if nothing
    /// in `reads` changed since it was read (else [`ApplyError::Conflict`], nothing
    /// written). With no changes it only checks.
    pub fn commit_changes(
        &self,
        catalog: &Catalog,
        changes: &[RowChange],
        reads: &Reads,
        upsert: &mut Upsert<'_>,
    ) -> Result<Applied, ApplyError> {
        self.batch(catalog, changes, reads, upsert, true)
            .map(|(applied, _)| applied)
    }

    /// Checks `changes` as [`Tables::apply_changes`] would apply them, deciding under
    /// the locks and writing nothing: a transaction's statements, checked before COMMIT
    /// applies them. Returns what it would do and every row it would change, as it
    /// would leave them.
    pub fn check_changes(
        &self,
        catalog: &Catalog,
        changes: &[RowChange],
        upsert: &mut Upsert<'_>,
    ) -> Result<(Applied, Vec<RowAfter>), ApplyError> {
        self.batch(catalog, changes, &Reads::new(), upsert, false)
    }

    fn batch(
        &self,
        catalog: &Catalog,
        changes: &[RowChange],
        reads: &Reads,
        upsert: &mut Upsert<'_>,
        write: bool,
    ) -> Result<(Applied, Vec<RowAfter>), ApplyError> {
        // A table the caller planned against must be as the catalog in use has it,
        // which the gate keeps so until the batch is written.
        let _gate = self.gate.read();
        let current = self.catalog();
        let mut numbers: Vec<u32> = Vec::new();
        if !std::ptr::eq(catalog, &*current) {
            numbers = changes.iter().map(RowChange::table).collect();
            numbers.sort_unstable();
            numbers.dedup();
        }
        for number in numbers {
            let planned = catalog.tables.iter().find(|d| d.number == number);
            let now = current.tables.iter().find(|d| d.number == number);
            if planned.is_none() || planned != now {
                return Err(ApplyError::NoTable(number));
            }
        }
        let def_of = |number: u32| {
            catalog
                .tables
                .iter()
                .find(|d| d.number == number)
                .ok_or(ApplyError::NoTable(number))
        };
        let mut keys: Vec<BatchKey> = Vec::new();
        let mut known: HashSet<BatchKey> = HashSet::new();
        let mut add = |keys: &mut Vec<BatchKey>, key: BatchKey| {
            if known.insert(key.clone()) {
                keys.push(key);
            }
        };
        for change in changes {
            let def = def_of(change.table())?;
            match change {
                RowChange::Insert { values, .. } => {
                    let rk = row_key(def, &values[def.table.primary])?;
                    if write && !self.store.has_room_for_key(Key::new(ROW_SPACE, &rk)) {
                        return Err(ApplyError::NoMemory);
                    }
                    add(&mut keys, (ROW_SPACE, rk));
                    for (i, k) in entry_keys_of(def, values)? {
                        add(&mut keys, (entry_space(def, i), k));
                    }
                }
                RowChange::Update { pk, values, .. } => {
                    add(&mut keys, (ROW_SPACE, row_key(def, pk)?));
                    add(
                        &mut keys,
                        (ROW_SPACE, row_key(def, &values[def.table.primary])?),
                    );
                    for (i, k) in entry_keys_of(def, values)? {
                        add(&mut keys, (entry_space(def, i), k));
                    }
                }
                RowChange::Delete { pk, .. } => add(&mut keys, (ROW_SPACE, row_key(def, pk)?)),
            }
        }
        // The entries of the rows as they are now: a guess (taken unlocked) that
        // saves most attempts from starting again.
        let row_keys: Vec<Vec<u8>> = keys
            .iter()
            .filter(|(space, _)| *space == ROW_SPACE)
            .map(|(_, k)| k.clone())
            .collect();
        for rk in row_keys {
            let Some(def) = def_of(u32::from_be_bytes(table_prefix(&rk))).ok() else {
                continue;
            };
            if let Some(item) = self.store.peek(Key::new(ROW_SPACE, &rk))? {
                let values = row::decode(&item.value, &def.table)?;
                for (i, k) in entry_keys_of(def, &values)? {
                    add(&mut keys, (entry_space(def, i), k));
                }
            }
        }
        for key in reads.keys() {
            add(&mut keys, key.clone());
        }
        // Counted under way (for the scans of transactions) until it returns.
        let writing = write.then(|| self.writes.writing(changes.iter().map(RowChange::table)));
        for _ in 0..ATTEMPTS {
            let engine_keys: Vec<Key<'_>> = keys.iter().map(|(s, k)| Key::new(*s, k)).collect();
            let decide = |current: &[Option<ItemRef<'_>>], _now: u32| {
                let keep = || current.iter().map(|_| Change::Keep).collect::<Vec<_>>();
                let mut run = Run::new(catalog, &keys, current);
                let cas_now = |key: &_| {
                    run.position
                        .get(key)
                        .map(|&i| current[i].as_ref().map(|item| item.cas))
                };
                if !reads.is_empty()
                    && !reads.unchanged(
                        cas_now,
                        |n| def_of(n).ok(),
                        // Under the batch's shard locks: the ordered keys alone, no item.
                        |def, via, range| self.range_keys(def, via, range).ok(),
                        &self.writes,
                        writing.as_ref(),
                    )
                {
                    return (keep(), Decided::Refused(ApplyError::Conflict));
                }
                match run.decide(changes, &mut *upsert) {
                    Ok(Some(applied)) => match run.finish() {
                        Ok(engine_changes) if write => {
                            (engine_changes, Decided::Done(applied, Vec::new()))
                        }
                        Ok(_) => (keep(), Decided::Done(applied, run.after())),
                        Err(e) => (keep(), Decided::Refused(e)),
                    },
                    Ok(None) => (keep(), Decided::NeedKeys(run.missing)),
                    Err(e) => (keep(), Decided::Refused(e)),
                }
            };
            let (decided, written) = self.store.update_batch(&engine_keys, decide)?;
            match decided {
                Decided::Done(mut applied, after) => {
                    applied.lsn = written.iter().flatten().map(|w| w.lsn).max();
                    return Ok((applied, after));
                }
                Decided::Refused(e) => {
                    if matches!(e, ApplyError::Duplicate { .. }) {
                        self.counters
                            .unique_refusals
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(e);
                }
                Decided::NeedKeys(more) => {
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    for key in more {
                        add(&mut keys, key);
                    }
                }
            }
        }
        Err(ApplyError::Other(value_error!(
            "the rows kept changing while they were written"
        )))
    }
}

/// The first four bytes of a row key: its table's number.
fn table_prefix(rk: &[u8]) -> [u8; 4] {
    let mut n = [0; 4];
    n.copy_from_slice(&rk[..4]);
    n
}
