//! One attempt of a batch: its changes decided in order over the versions under the
//! locks, each key's new state staged as they go (a later change sees an earlier
//! one's), then one engine change per key.

use std::collections::HashMap;
use std::sync::Arc;

use kura_engine::{Change, ItemRef, NewItem, Space};

use super::{Applied, ApplyError, BatchKey, OnConflict, RowAfter, RowChange, Upsert};
use crate::catalog::{Catalog, TableDef};
use crate::error::{value_error, Error};
use crate::row;
use crate::rows::{
    entry_keys_of, entry_space, pk_bytes, row_key, unique_keys_of, ROW_SPACE, UNIQUE_SPACE,
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
}

/// One attempt's decisions, over the versions under the locks.
pub(super) struct Run<'a, 'c> {
    catalog: &'a Catalog,
    keys: &'a [BatchKey],
    pub(super) position: HashMap<&'a BatchKey, usize>,
    current: &'a [Option<ItemRef<'c>>],
    /// Decided states, by key position; None: as it was.
    staged: Vec<Option<Staged>>,
    /// Keys the changes need that are not locked.
    pub(super) missing: Vec<BatchKey>,
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
    pub(super) fn new(
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
    pub(super) fn after(&self) -> Vec<RowAfter> {
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
    pub(super) fn finish(&self) -> Result<Vec<Change>, ApplyError> {
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
