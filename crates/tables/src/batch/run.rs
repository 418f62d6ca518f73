//! One attempt of a batch: its changes decided in order over the versions under the
//! locks, each key's new state staged as they go (a later change sees an earlier
//! one's), then one engine change per key.
//!
//! A change that needs a key the attempt did not lock stops the attempt, which starts
//! again with the key; a row's entries are looked for together first, so one restart
//! brings all of them.
//!
//! The invariant the decisions keep and lean on: a row's index entries point at it
//! while it holds their values, and carry its exptime (the row and its entries only
//! ever change together, here). So an entry a row keeps through a write, with the
//! exptime it has, is already right: it is neither changed nor locked. That is how a
//! memcached update that keeps the row's indexed values and exptime locks and writes
//! the row alone.

use std::sync::Arc;

use kura_engine::{exptime_to_absolute, Change, ItemRef, NewItem, Space, Written};

use super::{
    Applied, ApplyError, BatchKey, BatchKeys, Holds, ItemOutcome, OnConflict, RowAfter, RowChange,
    StoreOptions, Upsert,
};
use crate::catalog::{Catalog, TableDef};
use crate::error::{value_error, Error};
use crate::row;
use crate::rows::{
    entry_keys_of, entry_space, pk_bytes, row_key, unique_keys_of, RowItem, WriteMode, ROW_SPACE,
    UNIQUE_SPACE,
};
use crate::value::Value;

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
    /// As it is, with a new exptime (memcached's touch): a row or an entry.
    Touched {
        exptime: u32,
    },
}

/// What one of memcached's commands came to, before the batch is written.
pub(super) enum Pending {
    /// Stored or deleted the row at this position: the outcome is its record.
    Row(usize),
    /// Touched: the row's values and its item, whose LSN becomes the batch's.
    Touched(Vec<Value>, RowItem),
    Refused(ItemOutcome),
}

impl Pending {
    /// The outcome, given what the batch wrote for each key and its LSN.
    pub(super) fn outcome(self, written: &[Option<Written>], lsn: Option<u64>) -> ItemOutcome {
        match self {
            Pending::Row(at) => ItemOutcome::Written(written.get(at).copied().flatten()),
            Pending::Touched(values, item) => ItemOutcome::Touched(
                values,
                RowItem {
                    lsn: lsn.unwrap_or(item.lsn),
                    ..item
                },
            ),
            Pending::Refused(outcome) => outcome,
        }
    }
}

/// One attempt's decisions, over the versions under the locks.
pub(super) struct Run<'a, 'c> {
    catalog: &'a Catalog,
    keys: &'a BatchKeys,
    current: &'a [Option<ItemRef<'c>>],
    /// The batch's clock: memcached's exptimes are made absolute against it.
    now: u32,
    /// Decided states, by key position; None: as it was.
    staged: Vec<Option<Staged>>,
    /// Keys the changes need that are not locked.
    pub(super) missing: Vec<BatchKey>,
    /// The table of each row key decided, by key position.
    row_tables: Vec<Option<u32>>,
    /// What each of memcached's commands came to, in order.
    pub(super) items: Vec<Pending>,
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

/// The positions of the entries a row's write changes ([`Run::entry_changes`]).
struct EntryChanges {
    /// Each entry the row will have: its index, and its position (None: one the row
    /// has already, with the exptime it will have, which stays as it is).
    puts: Vec<(usize, Option<usize>)>,
    /// The entries the row has that it will not.
    gone: Vec<usize>,
}

impl<'a, 'c> Run<'a, 'c> {
    pub(super) fn new(
        catalog: &'a Catalog,
        keys: &'a BatchKeys,
        current: &'a [Option<ItemRef<'c>>],
        now: u32,
    ) -> Run<'a, 'c> {
        let n = keys.list.len();
        Run {
            catalog,
            keys,
            current,
            now,
            staged: vec![None; n],
            missing: Vec::new(),
            row_tables: vec![None; n],
            items: Vec::new(),
        }
    }

    fn def(&self, number: u32) -> Result<&'a TableDef, ApplyError> {
        self.catalog
            .tables
            .iter()
            .find(|d| d.number == number)
            .ok_or(ApplyError::NoTable(number))
    }

    /// The position of a key; None, noting it missing, when it is not locked.
    fn find(&mut self, space: Space, key: &[u8]) -> Option<usize> {
        let found = self.keys.position(space, key);
        if found.is_none() && !self.missing.iter().any(|(s, k)| *s == space && k == key) {
            self.missing.push((space, key.to_vec()));
        }
        found
    }

    /// The position of a key, or a stop when it is not locked.
    fn at(&mut self, space: Space, key: &[u8]) -> Result<usize, Stop> {
        self.find(space, key).ok_or(Stop::Unlocked)
    }

    /// The row at position `i` as the batch sees it now: its values, flags, exptime and
    /// the CAS it had before the batch (0 when the batch wrote it).
    fn row(&self, def: &TableDef, i: usize) -> Result<Option<Seen>, Error> {
        let current = self.current[i].as_ref();
        match &self.staged[i] {
            Some(Staged::Row {
                values,
                client_flags,
                exptime,
            }) => Ok(Some((values.clone(), *client_flags, *exptime, 0))),
            Some(Staged::Absent | Staged::Entry { .. }) => Ok(None),
            Some(Staged::Touched { exptime }) => current
                .map(|item| {
                    let values = row::decode(item.value, &def.table)?;
                    Ok((values, item.client_flags, *exptime, item.cas))
                })
                .transpose(),
            None => current
                .map(|item| {
                    let values = row::decode(item.value, &def.table)?;
                    Ok((values, item.client_flags, item.exptime, item.cas))
                })
                .transpose(),
        }
    }

    /// The primary key an entry at position `i` points at now, if any.
    fn entry(&self, i: usize) -> Option<Vec<u8>> {
        match &self.staged[i] {
            Some(Staged::Entry { pk, .. }) => Some(pk.clone()),
            Some(Staged::Absent | Staged::Row { .. }) => None,
            Some(Staged::Touched { .. }) | None => {
                self.current[i].as_ref().map(|e| e.value.to_vec())
            }
        }
    }

    /// Decides every change in order. Ok(None): keys are missing.
    pub(super) fn decide(
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
            } => self.insert(def, values, *conflict, applied, upsert)?,
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
            RowChange::Store {
                values, options, ..
            } => {
                let item = self.store(def, values, options, applied)?;
                self.items.push(item);
            }
            RowChange::DeleteItem { pk, cas, holds, .. } => {
                let item = self.delete_item(def, pk, *cas, holds, applied)?;
                self.items.push(item);
            }
            RowChange::Touch {
                pk, exptime, holds, ..
            } => {
                let item = self.touch(def, pk, *exptime, holds, applied)?;
                self.items.push(item);
            }
        }
        Ok(())
    }

    /// A SQL insert of `values`, and what it does when other rows are in the way.
    fn insert(
        &mut self,
        def: &TableDef,
        values: &[Value],
        conflict: OnConflict,
        applied: &mut Applied,
        upsert: &mut Upsert<'_>,
    ) -> Result<(), Stop> {
        let rk = row_key(def, &values[def.table.primary])?;
        let at = self.at(ROW_SPACE, &rk)?;
        // The rows in the way, and the index each is in the way in (None: the primary
        // key).
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
                    let new = upsert(rule, &old, values)?;
                    if new.len() != old.len() {
                        return Err(value_error!("an upsert's row has the wrong width").into());
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
        self.put_row(def, at, &rk, values.to_vec(), (0, 0), None)?;
        applied.affected += 1;
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
        let old_rk = self.keys.list[old_at].1.clone();
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
            self.put_row(def, new_at, &new_rk, values, kept, Some(&old))
        }
    }

    /// memcached's storage command: the row becomes `values` with the options' flags
    /// and exptime, if the mode allows and no other row holds a unique value it wants.
    fn store(
        &mut self,
        def: &TableDef,
        values: &[Value],
        options: &StoreOptions,
        applied: &mut Applied,
    ) -> Result<Pending, Stop> {
        let rk = row_key(def, &values[def.table.primary])?;
        let at = self.at(ROW_SPACE, &rk)?;
        let seen = self.row(def, at)?;
        if !still_holds(def, seen.as_ref(), &options.holds) {
            return Ok(Pending::Refused(ItemOutcome::Moved));
        }
        if let Some(refused) = refusal(options.mode, seen.as_ref().map(|(.., cas)| *cas)) {
            return Ok(Pending::Refused(refused));
        }
        let exptime = exptime_to_absolute(options.exptime, self.now);
        let old = seen
            .as_ref()
            .map(|(old, _, old_exptime, _)| (old.as_slice(), *old_exptime));
        let entries = self.entry_changes(def, values, exptime, old)?;
        // Another row holds a value this row's unique index wants. (A non-unique
        // index's entry holds the primary key: only this row's can be there.)
        let pk = pk_bytes(&rk);
        let taken = entries.puts.iter().any(|&(_, e)| {
            e.and_then(|e| self.entry(e))
                .is_some_and(|other| other != pk)
        });
        if taken {
            return Ok(Pending::Refused(ItemOutcome::Duplicate));
        }
        let flags_and_exptime = (options.client_flags, exptime);
        self.stage_row(def, at, pk, values.to_vec(), flags_and_exptime, entries);
        applied.affected += 1;
        Ok(Pending::Row(at))
    }

    /// memcached's delete of the row `pk` with its entries, if its CAS is `cas` (when
    /// given).
    fn delete_item(
        &mut self,
        def: &TableDef,
        pk: &Value,
        cas: Option<u64>,
        holds: &Holds,
        applied: &mut Applied,
    ) -> Result<Pending, Stop> {
        let at = self.at(ROW_SPACE, &row_key(def, pk)?)?;
        let seen = self.row(def, at)?;
        if !still_holds(def, seen.as_ref(), holds) {
            return Ok(Pending::Refused(ItemOutcome::Moved));
        }
        let Some((.., now_cas)) = seen else {
            return Ok(Pending::Refused(ItemOutcome::NotFound));
        };
        if cas.is_some_and(|cas| cas != now_cas) {
            return Ok(Pending::Refused(ItemOutcome::Exists));
        }
        self.delete_row(def, at)?;
        applied.affected += 1;
        Ok(Pending::Row(at))
    }

    /// memcached's touch: the row `pk` and its entries get a new exptime.
    fn touch(
        &mut self,
        def: &TableDef,
        pk: &Value,
        exptime: i64,
        holds: &Holds,
        applied: &mut Applied,
    ) -> Result<Pending, Stop> {
        let rk = row_key(def, pk)?;
        let at = self.at(ROW_SPACE, &rk)?;
        let seen = self.row(def, at)?;
        if !still_holds(def, seen.as_ref(), holds) {
            return Ok(Pending::Refused(ItemOutcome::Moved));
        }
        let Some((values, client_flags, ..)) = seen else {
            return Ok(Pending::Refused(ItemOutcome::NotFound));
        };
        let exptime = exptime_to_absolute(exptime, self.now);
        let pk = pk_bytes(&rk);
        for e in self.entry_positions(def, &values)? {
            if self.entry(e).is_some_and(|p| p == pk) {
                self.touch_at(e, exptime);
            }
        }
        self.touch_at(at, exptime);
        self.row_tables[at] = Some(def.number);
        applied.affected += 1;
        let (cas, lsn) = self.current[at]
            .as_ref()
            .map_or((0, 0), |item| (item.cas, item.lsn));
        let item = RowItem {
            value: Vec::new(),
            client_flags,
            exptime,
            cas,
            lsn,
        };
        Ok(Pending::Touched(values, item))
    }

    /// Every row the attempt decided, as it left them.
    pub(super) fn after(&self) -> Result<Vec<RowAfter>, ApplyError> {
        let mut rows = Vec::new();
        for (i, table) in self.row_tables.iter().enumerate() {
            let Some(table) = table else { continue };
            let values = match &self.staged[i] {
                Some(Staged::Row { values, .. }) => Some(values.clone()),
                Some(Staged::Touched { .. }) => self.row(self.def(*table)?, i)?.map(|seen| seen.0),
                _ => None,
            };
            rows.push((*table, pk_bytes(&self.keys.list[i].1).to_vec(), values));
        }
        Ok(rows)
    }

    /// The positions of every entry of the row `values`, all of which must be locked.
    fn entry_positions(&mut self, def: &TableDef, values: &[Value]) -> Result<Vec<usize>, Stop> {
        let mut positions = Vec::new();
        let mut unlocked = false;
        for (i, ek) in entry_keys_of(def, values)? {
            match self.find(entry_space(def, i), &ek) {
                Some(e) => positions.push(e),
                None => unlocked = true,
            }
        }
        if unlocked {
            return Err(Stop::Unlocked);
        }
        Ok(positions)
    }

    /// Deletes the row at position `at` with the entries that point at it. Returns
    /// whether there was a row.
    fn delete_row(&mut self, def: &TableDef, at: usize) -> Result<bool, Stop> {
        let Some((values, ..)) = self.row(def, at)? else {
            return Ok(false);
        };
        let keys = self.keys;
        let pk = pk_bytes(&keys.list[at].1);
        for e in self.entry_positions(def, &values)? {
            if self.entry(e).is_some_and(|p| p == pk) {
                self.staged[e] = Some(Staged::Absent);
            }
        }
        self.staged[at] = Some(Staged::Absent);
        self.row_tables[at] = Some(def.number);
        Ok(true)
    }

    /// Writes `values` at position `at` (row key `rk`) with its entries, keeping the
    /// flags and exptime given; `old` is the row's values there now (with the same
    /// exptime), whose entries that no longer apply go.
    fn put_row(
        &mut self,
        def: &TableDef,
        at: usize,
        rk: &[u8],
        values: Vec<Value>,
        (client_flags, exptime): (u32, u32),
        old: Option<&[Value]>,
    ) -> Result<(), Stop> {
        let entries = self.entry_changes(def, &values, exptime, old.map(|o| (o, exptime)))?;
        let pk = pk_bytes(rk);
        self.stage_row(def, at, pk, values, (client_flags, exptime), entries);
        Ok(())
    }

    /// The entries a row of `def` needs changed to become `values` with `exptime`, from
    /// `old` (its values and exptime now, if it exists): see [`EntryChanges`]. Notes
    /// every one that is not locked before it stops.
    fn entry_changes(
        &mut self,
        def: &TableDef,
        values: &[Value],
        exptime: u32,
        old: Option<(&[Value], u32)>,
    ) -> Result<EntryChanges, Stop> {
        let new = entry_keys_of(def, values)?;
        let (had, same_exptime) = match old {
            Some((old, old_exptime)) => (entry_keys_of(def, old)?, old_exptime == exptime),
            None => (Vec::new(), false),
        };
        let mut changes = EntryChanges {
            puts: Vec::with_capacity(new.len()),
            gone: Vec::new(),
        };
        let mut unlocked = false;
        for entry in &new {
            if same_exptime && had.contains(entry) {
                changes.puts.push((entry.0, None));
                continue;
            }
            match self.find(entry_space(def, entry.0), &entry.1) {
                Some(e) => changes.puts.push((entry.0, Some(e))),
                None => unlocked = true,
            }
        }
        for entry in had.iter().filter(|entry| !new.contains(entry)) {
            match self.find(entry_space(def, entry.0), &entry.1) {
                Some(e) => changes.gone.push(e),
                None => unlocked = true,
            }
        }
        if unlocked {
            return Err(Stop::Unlocked);
        }
        Ok(changes)
    }

    /// Stages the row `values` (primary key `pk`) at position `at` with the changes of
    /// its entries: the ones it no longer has go (if they are still its), the new ones
    /// point at it with its exptime.
    fn stage_row(
        &mut self,
        def: &TableDef,
        at: usize,
        pk: &[u8],
        values: Vec<Value>,
        (client_flags, exptime): (u32, u32),
        entries: EntryChanges,
    ) {
        for e in entries.gone {
            if self.entry(e).is_some_and(|p| p == pk) {
                self.staged[e] = Some(Staged::Absent);
            }
        }
        for e in entries.puts.into_iter().filter_map(|(_, e)| e) {
            self.staged[e] = Some(Staged::Entry {
                pk: pk.to_vec(),
                exptime,
            });
        }
        self.staged[at] = Some(Staged::Row {
            values,
            client_flags,
            exptime,
        });
        self.row_tables[at] = Some(def.number);
    }

    /// Gives the row or entry at position `i` a new exptime, as the batch sees it.
    fn touch_at(&mut self, i: usize, new: u32) {
        match &mut self.staged[i] {
            Some(
                Staged::Row { exptime, .. }
                | Staged::Entry { exptime, .. }
                | Staged::Touched { exptime },
            ) => *exptime = new,
            Some(Staged::Absent) => {}
            None => self.staged[i] = Some(Staged::Touched { exptime: new }),
        }
    }

    /// The engine change for every key.
    pub(super) fn finish(&self) -> Vec<Change> {
        let mut changes = Vec::with_capacity(self.keys.list.len());
        for (i, staged) in self.staged.iter().enumerate() {
            let current = &self.current[i];
            let change = match staged {
                None => Change::Keep,
                Some(Staged::Absent) if current.is_none() => Change::Keep,
                Some(Staged::Absent) => Change::Delete,
                Some(Staged::Touched { .. }) if current.is_none() => Change::Keep,
                Some(Staged::Touched { exptime }) => Change::Touch {
                    exptime: Some(*exptime),
                    mark_win_sent: false,
                },
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
                }) => {
                    // The row's table, for the places of its dropped columns.
                    let dropped = self.row_tables[i]
                        .and_then(|n| self.def(n).ok())
                        .map_or(&[][..], |def| &def.table.dropped[..]);
                    Change::Put(NewItem {
                        exptime: *exptime,
                        ..NewItem::new(row::encode(values, dropped).into(), *client_flags)
                    })
                }
            };
            changes.push(change);
        }
        changes
    }
}

/// Whether the row as the batch sees it holds what a command through a unique index
/// found it by (always, for a command that names the row by its primary key).
/// Under the column's collation: a row found by `bob@x.com` holds `Bob@X.com`.
fn still_holds(def: &TableDef, seen: Option<&Seen>, holds: &Holds) -> bool {
    match holds {
        None => true,
        Some((column, value)) => seen.is_some_and(|(values, ..)| {
            let rule = def.table.columns[*column].rule();
            rule.same(values[*column].as_ref(), value.as_ref())
        }),
    }
}

/// What a store's mode makes of the row being there (its CAS) or not: None to go on.
fn refusal(mode: WriteMode, cas: Option<u64>) -> Option<ItemOutcome> {
    match (mode, cas) {
        (WriteMode::Add, Some(_)) | (WriteMode::Replace, None) => Some(ItemOutcome::NotStored),
        (WriteMode::Cas(_), None) => Some(ItemOutcome::NotFound),
        (WriteMode::Cas(want), Some(cas)) if want != cas => Some(ItemOutcome::Exists),
        _ => None,
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
