//! Rows changed as one batch: the one path every row write takes, a SQL statement's or
//! transaction's many rows and memcached's storage commands on one row alike. A batch
//! is applied as one engine batch with every index entry it touches, or not at all.
//!
//! The caller has already found the rows and computed their new values (the SQL layer,
//! or [`crate::rows`] for memcached's commands); the batch checks what only the store
//! can tell under its locks (a primary key or a unique value another row holds, a row
//! changed since it was read) and writes. Every row and entry a change touches is
//! locked at once, the changes are decided in order against the versions under the
//! locks (a later change sees an earlier one's rows; [`run`]), and either every record
//! goes to the log as one batch, which replay applies whole, or nothing does. Keys the
//! changes turn out to need that were not locked (the entries of a row being replaced
//! or deleted, a row a REPLACE pushes out) make the attempt start again with them; an
//! unlocked look at the rows' entries before the first attempt makes that rare.
//!
//! SQL's changes are all or nothing: a refusal ([`ApplyError`]) refuses the whole
//! batch. Optimistic concurrency: an update or delete names the CAS of the row as the
//! statement read it; if another writer (SQL or memcached) changed the row since, the
//! batch is refused with [`ApplyError::Conflict`] and the caller may run the statement
//! again. A transaction's batch also carries what it read ([`Reads`]): the keys read
//! are locked with the keys written and the whole read set is checked under those
//! locks before anything is decided. A row's flags and exptime stay what they were
//! through an update.
//!
//! memcached's commands ([`RowChange::Store`], [`RowChange::DeleteItem`],
//! [`RowChange::Touch`]) have memcached's modes and replies instead: each comes to an
//! [`ItemOutcome`] (stored, not stored, exists, not found, a duplicate unique value),
//! and one that is not done changes nothing. A store sets the row's client flags and
//! exptime (which its entries carry too). An update that keeps the row's indexed
//! values and exptime needs none of its entries changed: its first attempt locks the
//! row alone, the fast path of memcached's read-modify-write.
//!
//! Every batch that writes holds the tables' gate shared (DDL takes it exclusively)
//! and is counted under way for the scans of transactions ([`crate::reads`]).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use kura_engine::{Change, ItemRef, Key, Space, Written};

use crate::catalog::Catalog;
use crate::error::{value_error, Error};
use crate::reads::Reads;
use crate::row;
use crate::rows::{
    entry_keys_of, entry_space, row_key, RowItem, Tables, WriteMode, ATTEMPTS, ROW_SPACE,
};
use crate::value::Value;

mod run;

use run::{Pending, Run};

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

/// A column and a value the row a memcached command reached through a unique index
/// must still hold under the batch's locks; else the command comes to
/// [`ItemOutcome::Moved`] and the caller looks the row up again.
pub type Holds = Option<(usize, Value)>;

/// How a memcached storage command writes its row ([`RowChange::Store`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StoreOptions {
    pub mode: WriteMode,
    pub client_flags: u32,
    /// As memcached gives it (relative seconds, absolute Unix seconds, or negative:
    /// expired at once), made absolute against the batch's clock.
    pub exptime: i64,
    pub holds: Holds,
}

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
    /// memcached's set, add, replace or cas (`options.mode`): the row becomes `values`,
    /// with the options' client flags and exptime. Not stored when the mode refuses
    /// the row as it is or another row holds a unique value it wants.
    Store {
        table: u32,
        values: Vec<Value>,
        options: StoreOptions,
    },
    /// memcached's delete of the row whose primary key is `pk`: not found when there
    /// is none, `Exists` when `cas` is given and is not the row's.
    DeleteItem {
        table: u32,
        pk: Value,
        cas: Option<u64>,
        holds: Holds,
    },
    /// memcached's touch: the row whose primary key is `pk` and its entries get a new
    /// exptime (memcached's, as for [`StoreOptions::exptime`]); value and CAS stay.
    Touch {
        table: u32,
        pk: Value,
        exptime: i64,
        holds: Holds,
    },
}

impl RowChange {
    pub fn table(&self) -> u32 {
        match self {
            RowChange::Insert { table, .. }
            | RowChange::Update { table, .. }
            | RowChange::Delete { table, .. }
            | RowChange::Store { table, .. }
            | RowChange::DeleteItem { table, .. }
            | RowChange::Touch { table, .. } => *table,
        }
    }
}

/// What a batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// MySQL's affected rows: inserted, deleted, changed by an update, plus the rows a
    /// REPLACE deleted; and the rows memcached's commands stored, deleted or touched.
    pub affected: u64,
    /// Rows an update found (changed or not): MySQL's "Rows matched".
    pub matched: u64,
    /// Rows an update or an upsert found and left as they were: what MySQL's
    /// `CLIENT_FOUND_ROWS` counts in the rows affected too.
    pub unchanged: u64,
    /// The batch's LSN: acknowledge after it. None when nothing was written.
    pub lsn: Option<u64>,
}

/// What one of memcached's commands in a batch came to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ItemOutcome {
    /// Stored or deleted: the row's record (None in a batch that only checks).
    Written(Option<Written>),
    /// Touched: the row's values, and its item (the reply waits for its LSN).
    Touched(Vec<Value>, RowItem),
    /// `add` of a row that exists, `replace` of one that does not.
    NotStored,
    /// Another row holds a unique value the row wants.
    Duplicate,
    /// `cas`, or a delete with a CAS, on a row whose CAS is another.
    Exists,
    /// `cas`, a delete or a touch of a row that does not exist.
    NotFound,
    /// The row no longer holds the value of [`Holds`] (or is gone).
    Moved,
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
    /// A table the batch writes is being handed to another server, or was
    /// ([`crate::seal`]): nothing was written; the caller makes it again where the
    /// table is once the hand-off ends.
    Moving(String),
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

/// A list this long or shorter is searched for a key; a longer one keeps a map.
const SEARCHED_KEYS_MAX: usize = 16;

/// The keys a batch locks, each once, in the order the batch came to need them.
#[derive(Default)]
struct BatchKeys {
    list: Vec<BatchKey>,
    /// Each key's position, once the list is longer than [`SEARCHED_KEYS_MAX`]: a
    /// row's few keys are found faster by looking than by hashing.
    positions: HashMap<BatchKey, usize>,
}

impl BatchKeys {
    fn add(&mut self, key: BatchKey) {
        if self.position_of(&key).is_some() {
            return;
        }
        if self.list.len() >= SEARCHED_KEYS_MAX {
            if self.positions.is_empty() {
                self.positions = self.list.iter().cloned().zip(0..).collect();
            }
            self.positions.insert(key.clone(), self.list.len());
        }
        self.list.push(key);
    }

    fn position(&self, space: Space, bytes: &[u8]) -> Option<usize> {
        if self.positions.is_empty() {
            self.list
                .iter()
                .position(|(s, k)| *s == space && k.as_slice() == bytes)
        } else {
            self.positions.get(&(space, bytes.to_vec())).copied()
        }
    }

    /// [`BatchKeys::position`] of a key the caller holds whole.
    fn position_of(&self, key: &BatchKey) -> Option<usize> {
        if self.positions.is_empty() {
            self.list.iter().position(|k| k == key)
        } else {
            self.positions.get(key).copied()
        }
    }
}

/// What a batch did: its counts, the rows as it left them (a batch that only checks),
/// and what each of memcached's commands in it came to, in order.
struct Ran {
    applied: Applied,
    after: Vec<RowAfter>,
    items: Vec<ItemOutcome>,
}

/// What deciding an attempt came to.
enum Decided {
    Done(Applied, Vec<RowAfter>, Vec<Pending>),
    Refused(ApplyError),
    NeedKeys(Vec<BatchKey>),
}

/// Whether a batch writes what it decides, or only says what it would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    Write,
    Check,
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
        self.batch(catalog, changes, &Reads::new(), upsert, Effect::Write)
            .map(|ran| ran.applied)
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
        self.batch(catalog, changes, reads, upsert, Effect::Write)
            .map(|ran| ran.applied)
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
        self.batch(catalog, changes, &Reads::new(), upsert, Effect::Check)
            .map(|ran| (ran.applied, ran.after))
    }

    /// One of memcached's commands on a row (`change`: [`RowChange::Store`],
    /// [`RowChange::DeleteItem`] or [`RowChange::Touch`]) as a batch of its own, and
    /// what it came to. The caller holds the gate and `catalog` is the one in use.
    pub(crate) fn change_item(
        &self,
        catalog: &Catalog,
        change: RowChange,
    ) -> Result<ItemOutcome, ApplyError> {
        let changes = [change];
        let ran = self.run(
            catalog,
            &changes,
            &Reads::new(),
            &mut no_upsert,
            Effect::Write,
        )?;
        match ran.items.into_iter().next() {
            Some(outcome) => Ok(outcome),
            None => unreachable!("each of memcached's commands comes to an outcome"),
        }
    }

    /// A batch from the SQL layer: checks that the tables it was planned against are
    /// the catalog's in use (which the gate keeps so until it is written), then runs.
    fn batch(
        &self,
        catalog: &Catalog,
        changes: &[RowChange],
        reads: &Reads,
        upsert: &mut Upsert<'_>,
        effect: Effect,
    ) -> Result<Ran, ApplyError> {
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
        self.run(catalog, changes, reads, upsert, effect)
    }

    /// The engine of every row write: locks the keys `changes` need, decides them in
    /// order under the locks, writes, and starts again with keys it found it needed.
    /// The caller holds the gate, and the tables of `catalog` the batch names are the
    /// ones in use.
    fn run(
        &self,
        catalog: &Catalog,
        changes: &[RowChange],
        reads: &Reads,
        upsert: &mut Upsert<'_>,
        effect: Effect,
    ) -> Result<Ran, ApplyError> {
        if effect == Effect::Write {
            self.check_unsealed(changes)?;
        }
        let def_of = |number: u32| {
            catalog
                .tables
                .iter()
                .find(|d| d.number == number)
                .ok_or(ApplyError::NoTable(number))
        };
        let mut keys = BatchKeys::default();
        // Rows whose entries are worth a look before the first attempt.
        let mut guessed: Vec<(u32, Vec<u8>)> = Vec::new();
        // A memcached update's first attempt locks its row alone: needing the row's
        // entries after it is no retry.
        let mut lean = false;
        for change in changes {
            let def = def_of(change.table())?;
            match change {
                RowChange::Insert { values, .. } => {
                    let rk = row_key(def, &values[def.table.primary])?;
                    self.check_room(&rk, effect)?;
                    keys.add((ROW_SPACE, rk.clone()));
                    guessed.push((def.number, rk));
                    for (i, k) in entry_keys_of(def, values)? {
                        keys.add((entry_space(def, i), k));
                    }
                }
                RowChange::Update { pk, values, .. } => {
                    let old_rk = row_key(def, pk)?;
                    let new_rk = row_key(def, &values[def.table.primary])?;
                    keys.add((ROW_SPACE, old_rk.clone()));
                    keys.add((ROW_SPACE, new_rk.clone()));
                    guessed.push((def.number, old_rk));
                    guessed.push((def.number, new_rk));
                    for (i, k) in entry_keys_of(def, values)? {
                        keys.add((entry_space(def, i), k));
                    }
                }
                RowChange::Delete { pk, .. }
                | RowChange::DeleteItem { pk, .. }
                | RowChange::Touch { pk, .. } => {
                    let rk = row_key(def, pk)?;
                    keys.add((ROW_SPACE, rk.clone()));
                    guessed.push((def.number, rk));
                }
                RowChange::Store {
                    values, options, ..
                } => {
                    let rk = row_key(def, &values[def.table.primary])?;
                    // Through a unique index the row exists: it takes no new slot.
                    if options.holds.is_none() {
                        self.check_room(&rk, effect)?;
                    }
                    keys.add((ROW_SPACE, rk));
                    if options.mode == WriteMode::Add {
                        // A new row's entries are new: locked from the start.
                        for (i, k) in entry_keys_of(def, values)? {
                            keys.add((entry_space(def, i), k));
                        }
                    } else {
                        lean = true;
                    }
                }
            }
        }
        // The entries of the rows as they are now: a guess (taken unlocked) that
        // saves most attempts from starting again.
        for (number, rk) in guessed {
            let def = def_of(number)?;
            if let Some(item) = self.store.peek(Key::new(ROW_SPACE, &rk))? {
                let values = row::decode(&item.value, &def.table)?;
                for (i, k) in entry_keys_of(def, &values)? {
                    keys.add((entry_space(def, i), k));
                }
            }
        }
        for key in reads.keys() {
            keys.add(key.clone());
        }
        // Counted under way (for the scans of transactions) until it returns.
        let writing = (effect == Effect::Write)
            .then(|| self.writes.writing(changes.iter().map(RowChange::table)));
        for _ in 0..ATTEMPTS {
            let engine_keys: Vec<Key<'_>> =
                keys.list.iter().map(|(s, k)| Key::new(*s, k)).collect();
            let decide = |current: &[Option<ItemRef<'_>>], now: u32| {
                let keep = || current.iter().map(|_| Change::Keep).collect::<Vec<_>>();
                let cas_now = |key: &BatchKey| {
                    keys.position_of(key)
                        .map(|i| current[i].as_ref().map(|item| item.cas))
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
                let mut run = Run::new(catalog, &keys, current, now);
                let applied = match run.decide(changes, &mut *upsert) {
                    Ok(Some(applied)) => applied,
                    Ok(None) => return (keep(), Decided::NeedKeys(run.missing)),
                    Err(e) => return (keep(), Decided::Refused(e)),
                };
                match effect {
                    Effect::Write => {
                        let engine_changes = run.finish();
                        (
                            engine_changes,
                            Decided::Done(applied, Vec::new(), run.items),
                        )
                    }
                    Effect::Check => match run.after() {
                        Ok(after) => (keep(), Decided::Done(applied, after, run.items)),
                        Err(e) => (keep(), Decided::Refused(e)),
                    },
                }
            };
            let (decided, written) = self.store.update_batch(&engine_keys, decide)?;
            match decided {
                Decided::Done(mut applied, after, pending) => {
                    applied.lsn = written.iter().flatten().map(|w| w.lsn).max();
                    let items: Vec<ItemOutcome> = pending
                        .into_iter()
                        .map(|p| p.outcome(&written, applied.lsn))
                        .collect();
                    let duplicates = items
                        .iter()
                        .filter(|item| **item == ItemOutcome::Duplicate)
                        .count();
                    if duplicates > 0 {
                        self.counters
                            .unique_refusals
                            .fetch_add(duplicates as u64, Ordering::Relaxed);
                    }
                    return Ok(Ran {
                        applied,
                        after,
                        items,
                    });
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
                    if !lean {
                        self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    }
                    lean = false;
                    for key in more {
                        keys.add(key);
                    }
                }
            }
        }
        Err(ApplyError::Other(value_error!(
            "the rows kept changing while they were written"
        )))
    }

    /// As for memcached's keys: values go to disk when memory is short, but every
    /// key's slot stays in memory, and a new row (at `rk`) needs one.
    fn check_room(&self, rk: &[u8], effect: Effect) -> Result<(), ApplyError> {
        if effect == Effect::Write && !self.store.has_room_for_key(Key::new(ROW_SPACE, rk)) {
            return Err(ApplyError::NoMemory);
        }
        Ok(())
    }
}
