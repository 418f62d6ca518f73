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

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use kura_engine::{Change, ItemRef, Key, NewItem, Space};

use crate::catalog::{Catalog, TableDef};
use crate::error::{value_error, Error};
use crate::reads::Reads;
use crate::row;
use crate::rows::{
    entry_keys_of, entry_space, pk_bytes, row_key, unique_keys_of, Tables, ATTEMPTS, ROW_SPACE,
    UNIQUE_SPACE,
};
use crate::value::Value;

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

/// The state of one locked key as the batch has decided it so far.
#[derive(Clone)]
enum Staged {
    Absent,
    Row {
        values: Vec<Value>,
        client_flags: u32,
        exptime: u32,
    },
    /// An index entry: the primary key it points at, and the exptime it carries.
    Entry {
        pk: Vec<u8>,
        exptime: u32,
    },
}

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

/// One attempt's decisions, over the versions under the locks.
struct Run<'a, 'c> {
    catalog: &'a Catalog,
    keys: &'a [BatchKey],
    position: HashMap<&'a BatchKey, usize>,
    current: &'a [Option<ItemRef<'c>>],
    /// Decided states, by key position; None: as it was.
    staged: Vec<Option<Staged>>,
    /// Keys the changes need that are not locked.
    missing: Vec<BatchKey>,
    /// The table of each row key decided, by key position.
    row_tables: Vec<Option<u32>>,
}

/// A row as the batch sees it: values, client flags, exptime, and its CAS before the
/// batch (0 when the batch wrote it).
type Seen = (Vec<Value>, u32, u32, u64);

/// Why deciding stopped early.
enum Stop {
    /// A key the attempt needs is not locked: it starts again with the key.
    Unlocked,
    Refused(ApplyError),
}

impl From<ApplyError> for Stop {
    fn from(e: ApplyError) -> Stop {
        Stop::Refused(e)
    }
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Refused(ApplyError::Other(e))
    }
}

impl<'a, 'c> Run<'a, 'c> {
    fn new(
        catalog: &'a Catalog,
        keys: &'a [BatchKey],
        current: &'a [Option<ItemRef<'c>>],
    ) -> Run<'a, 'c> {
        Run {
            catalog,
            keys,
            position: keys.iter().enumerate().map(|(i, k)| (k, i)).collect(),
            current,
            staged: vec![None; keys.len()],
            missing: Vec::new(),
            row_tables: vec![None; keys.len()],
        }
    }

    fn def(&self, number: u32) -> Result<&'a TableDef, ApplyError> {
        self.catalog
            .tables
            .iter()
            .find(|d| d.number == number)
            .ok_or(ApplyError::NoTable(number))
    }

    /// The position of a key, or a note that it is missing.
    fn at(&mut self, space: Space, key: &[u8]) -> Result<usize, Stop> {
        let key = (space, key.to_vec());
        match self.position.get(&key) {
            Some(&i) => Ok(i),
            None => {
                if !self.missing.contains(&key) {
                    self.missing.push(key);
                }
                Err(Stop::Unlocked)
            }
        }
    }

    /// The row at position `i` as the batch sees it now: its values, flags, exptime and
    /// the CAS it had before the batch (0 when the batch wrote it).
    fn row(&self, def: &TableDef, i: usize) -> Result<Option<Seen>, Stop> {
        match &self.staged[i] {
            Some(Staged::Row {
                values,
                client_flags,
                exptime,
            }) => Ok(Some((values.clone(), *client_flags, *exptime, 0))),
            Some(_) => Ok(None),
            None => match &self.current[i] {
                Some(item) => Ok(Some((
                    row::decode(item.value, &def.table)?,
                    item.client_flags,
                    item.exptime,
                    item.cas,
                ))),
                None => Ok(None),
            },
        }
    }

    /// The primary key an entry at position `i` points at now, if any.
    fn entry(&self, i: usize) -> Option<Vec<u8>> {
        match &self.staged[i] {
            Some(Staged::Entry { pk, .. }) => Some(pk.clone()),
            Some(_) => None,
            None => self.current[i].as_ref().map(|e| e.value.to_vec()),
        }
    }

    /// Decides every change in order. Ok(None): keys are missing.
    fn decide(
        &mut self,
        changes: &[RowChange],
        upsert: &mut Upsert<'_>,
    ) -> Result<Option<Applied>, ApplyError> {
        let mut applied = Applied::default();
        for change in changes {
            match self.one(change, &mut applied, upsert) {
                Ok(()) => {}
                Err(Stop::Unlocked) => return Ok(None),
                Err(Stop::Refused(e)) => return Err(e),
            }
        }
        Ok(Some(applied))
    }

    fn one(
        &mut self,
        change: &RowChange,
        applied: &mut Applied,
        upsert: &mut Upsert<'_>,
    ) -> Result<(), Stop> {
        let def = self.def(change.table())?;
        match change {
            RowChange::Insert {
                values, conflict, ..
            } => {
                let rk = row_key(def, &values[def.table.primary])?;
                let at = self.at(ROW_SPACE, &rk)?;
                // The rows in the way, and the index each is in the way in (None: the
                // primary key).
                let mut in_way: Vec<(usize, Option<usize>)> = Vec::new();
                if self.row(def, at)?.is_some() {
                    in_way.push((at, None));
                }
                for (index, ek) in unique_keys_of(def, values)? {
                    let e = self.at(UNIQUE_SPACE, &ek)?;
                    if let Some(other) = self.entry(e) {
                        if other != pk_bytes(&rk) {
                            let other_rk = [&def.number.to_be_bytes()[..], &other].concat();
                            in_way.push((self.at(ROW_SPACE, &other_rk)?, Some(index)));
                        }
                    }
                }
                if let Some(&(_, index)) = in_way.first() {
                    match conflict {
                        OnConflict::Fail => return Err(duplicate(def, index, values).into()),
                        OnConflict::Ignore => return Ok(()),
                        OnConflict::Replace => {
                            for (o, _) in in_way {
                                if self.delete_row(def, o)? {
                                    applied.affected += 1;
                                }
                            }
                        }
                        OnConflict::Update(rule) => {
                            let o = in_way[0].0;
                            let Some((old, client_flags, exptime, _)) = self.row(def, o)? else {
                                return Err(ApplyError::Conflict.into());
                            };
                            let new = upsert(*rule, &old, values)?;
                            if new.len() != old.len() {
                                return Err(
                                    value_error!("an upsert's row has the wrong width").into()
                                );
                            }
                            // MySQL counts an updated row twice, an unchanged one not at all.
                            if new != old {
                                self.change_row(def, o, old, (client_flags, exptime), new)?;
                                applied.affected += 2;
                            } else {
                                applied.unchanged += 1;
                            }
                            return Ok(());
                        }
                    }
                }
                self.put_row(def, at, &rk, values.clone(), (0, 0), None)?;
                applied.affected += 1;
            }
            RowChange::Update {
                pk, cas, values, ..
            } => {
                let old_rk = row_key(def, pk)?;
                let old_at = self.at(ROW_SPACE, &old_rk)?;
                let Some((old, client_flags, exptime, now_cas)) = self.row(def, old_at)? else {
                    return Err(ApplyError::Conflict.into());
                };
                if *cas != 0 && now_cas != 0 && now_cas != *cas {
                    return Err(ApplyError::Conflict.into());
                }
                applied.matched += 1;
                if old == *values {
                    applied.unchanged += 1;
                    return Ok(());
                }
                self.change_row(def, old_at, old, (client_flags, exptime), values.clone())?;
                applied.affected += 1;
            }
            RowChange::Delete { pk, cas, .. } => {
                let at = self.at(ROW_SPACE, &row_key(def, pk)?)?;
                match self.row(def, at)? {
                    None => {}
                    Some((.., now_cas)) if *cas != 0 && now_cas != 0 && now_cas != *cas => {
                        return Err(ApplyError::Conflict.into())
                    }
                    Some(_) => {
                        self.delete_row(def, at)?;
                        applied.affected += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Changes the row at position `old_at` (now `old`) to `values`, which may move it
    /// to another primary key, keeping its flags and exptime: refused when the new
    /// primary key or a new unique value is another row's.
    fn change_row(
        &mut self,
        def: &TableDef,
        old_at: usize,
        old: Vec<Value>,
        kept: (u32, u32),
        values: Vec<Value>,
    ) -> Result<(), Stop> {
        let old_rk = self.keys[old_at].1.clone();
        let new_rk = row_key(def, &values[def.table.primary])?;
        let new_at = self.at(ROW_SPACE, &new_rk)?;
        if new_at != old_at && self.row(def, new_at)?.is_some() {
            return Err(duplicate(def, None, &values).into());
        }
        for (index, ek) in unique_keys_of(def, &values)? {
            let e = self.at(UNIQUE_SPACE, &ek)?;
            if self
                .entry(e)
                .is_some_and(|other| other != pk_bytes(&old_rk))
            {
                return Err(duplicate(def, Some(index), &values).into());
            }
        }
        if new_at != old_at {
            self.delete_row(def, old_at)?;
            self.put_row(def, new_at, &new_rk, values, kept, None)
        } else {
            self.put_row(def, new_at, &new_rk, values, kept, Some(old))
        }
    }

    /// Every row the attempt decided, as it left them.
    fn after(&self) -> Vec<RowAfter> {
        let mut rows = Vec::new();
        for (i, table) in self.row_tables.iter().enumerate() {
            let Some(table) = table else { continue };
            let values = match &self.staged[i] {
                Some(Staged::Row { values, .. }) => Some(values.clone()),
                _ => None,
            };
            rows.push((*table, pk_bytes(&self.keys[i].1).to_vec(), values));
        }
        rows
    }

    /// Deletes the row at position `at` with the entries that point at it. Returns
    /// whether there was a row.
    fn delete_row(&mut self, def: &TableDef, at: usize) -> Result<bool, Stop> {
        let Some((values, ..)) = self.row(def, at)? else {
            return Ok(false);
        };
        let pk = pk_bytes(&self.keys[at].1).to_vec();
        for (i, ek) in entry_keys_of(def, &values)? {
            let e = self.at(entry_space(def, i), &ek)?;
            if self.entry(e).is_some_and(|p| p == pk) {
                self.staged[e] = Some(Staged::Absent);
            }
        }
        self.staged[at] = Some(Staged::Absent);
        self.row_tables[at] = Some(def.number);
        Ok(true)
    }

    /// Writes `values` at position `at` (row key `rk`) with its entries; `old` is the
    /// row's values there now, whose entries that no longer apply go.
    fn put_row(
        &mut self,
        def: &TableDef,
        at: usize,
        rk: &[u8],
        values: Vec<Value>,
        (client_flags, exptime): (u32, u32),
        old: Option<Vec<Value>>,
    ) -> Result<(), Stop> {
        let pk = pk_bytes(rk).to_vec();
        let new_entries = entry_keys_of(def, &values)?;
        if let Some(old) = old {
            for (i, ek) in entry_keys_of(def, &old)? {
                if new_entries.iter().any(|(j, k)| (*j, k) == (i, &ek)) {
                    continue;
                }
                let e = self.at(entry_space(def, i), &ek)?;
                if self.entry(e).is_some_and(|p| p == pk) {
                    self.staged[e] = Some(Staged::Absent);
                }
            }
        }
        for (i, ek) in new_entries {
            let e = self.at(entry_space(def, i), &ek)?;
            self.staged[e] = Some(Staged::Entry {
                pk: pk.clone(),
                exptime,
            });
        }
        self.staged[at] = Some(Staged::Row {
            values,
            client_flags,
            exptime,
        });
        self.row_tables[at] = Some(def.number);
        Ok(())
    }

    /// The engine change for every key.
    fn finish(&self) -> Result<Vec<Change>, ApplyError> {
        let mut changes = Vec::with_capacity(self.keys.len());
        for (i, staged) in self.staged.iter().enumerate() {
            let current = &self.current[i];
            let change = match staged {
                None => Change::Keep,
                Some(Staged::Absent) if current.is_none() => Change::Keep,
                Some(Staged::Absent) => Change::Delete,
                Some(Staged::Entry { pk, exptime }) => {
                    let same = current
                        .as_ref()
                        .is_some_and(|e| **e.value == **pk && e.exptime == *exptime);
                    if same {
                        Change::Keep
                    } else {
                        Change::Put(NewItem {
                            exptime: *exptime,
                            ..NewItem::new(Arc::from(pk.as_slice()), 0)
                        })
                    }
                }
                Some(Staged::Row {
                    values,
                    client_flags,
                    exptime,
                }) => Change::Put(NewItem {
                    exptime: *exptime,
                    ..NewItem::new(row::encode(values).into(), *client_flags)
                }),
            };
            changes.push(change);
        }
        Ok(changes)
    }
}

/// MySQL's duplicate-key refusal of row `values` of `def` in unique index `index`
/// (None: the primary key).
fn duplicate(def: &TableDef, index: Option<usize>, values: &[Value]) -> ApplyError {
    let (name, column) = match index {
        None => ("PRIMARY", def.table.primary),
        Some(i) => (
            def.table.indexes[i].name.as_str(),
            def.table.indexes[i].column,
        ),
    };
    let mut text = Vec::new();
    values[column].as_ref().write_text(&mut text);
    ApplyError::Duplicate {
        table: def.table.name.clone(),
        index: name.to_string(),
        value: String::from_utf8_lossy(&text).into_owned(),
    }
}
