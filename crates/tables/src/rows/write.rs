//! memcached's storage commands on a row through a container: set, add, replace, cas,
//! delete and touch. Each is one change of the batch every row write goes through
//! ([`crate::batch`]: [`RowChange::Store`], [`RowChange::DeleteItem`],
//! [`RowChange::Touch`]), which locks the row and its entries, decides and writes.
//! This module is the mapping around it: the row a container's key names (by its
//! primary key, or through a unique index, looked up again when a writer moved the
//! row meanwhile), and what the batch did in memcached's words.

use super::*;
use crate::batch::{ApplyError, Holds, ItemOutcome, RowChange, StoreOptions};

impl Tables {
    /// A storage command on a row: `key` and `value` as the container spells them.
    pub fn write(
        &self,
        catalog: &Catalog,
        container: Container,
        key: &[u8],
        value: &[u8],
        mode: WriteMode,
        (client_flags, exptime): (u32, i64),
    ) -> Result<WriteOutcome, Error> {
        let _gate = self.gate.read();
        let (current, t) = self.current(catalog, container)?;
        let def = &current.tables[t];
        let values = parse_row(def, container.via, key, value)?;
        let store = |values, mode, holds| RowChange::Store {
            table: def.number,
            values,
            options: StoreOptions {
                mode,
                client_flags,
                exptime,
                holds,
            },
        };
        let i = match container.via {
            Via::Primary => {
                let outcome = stored(self.change_item(&current, store(values, mode, None)))?;
                return Ok(outcome.unwrap_or(WriteOutcome::NotStored));
            }
            Via::Index(i) => i,
        };
        if !def.table.indexes[i].kind.is_unique() {
            return Err(value_error!(
                "index {} is not unique: write the row through table {}",
                def.table.indexes[i].name,
                def.table.name
            ));
        }
        // Through a unique index a write updates the row that holds the value; it may
        // not add one, nor give the row another primary key.
        let mode = match mode {
            WriteMode::Add => return Ok(WriteOutcome::NotStored),
            WriteMode::Set => WriteMode::Replace,
            other => other,
        };
        let column = def.table.indexes[i].column;
        for _ in 0..ATTEMPTS {
            let Some((rk, value)) = self.locate(def, i, key)? else {
                return Ok(match mode {
                    WriteMode::Cas(_) => WriteOutcome::NotFound,
                    _ => WriteOutcome::NotStored,
                });
            };
            if row_key(def, &values[def.table.primary])? != rk {
                return Ok(WriteOutcome::NotStored);
            }
            let change = store(values.clone(), mode, Some((column, value)));
            match stored(self.change_item(&current, change))? {
                Some(outcome) => return Ok(outcome),
                // Moved or gone meanwhile: look again.
                None => self.counters.retries.fetch_add(1, Ordering::Relaxed),
            };
        }
        Ok(WriteOutcome::NotStored)
    }

    /// Deletes the row `key` names in `container`, with its index entries. With `cas`,
    /// only if the row's CAS is that.
    pub fn delete(
        &self,
        catalog: &Catalog,
        container: Container,
        key: &[u8],
        cas: Option<u64>,
    ) -> Result<ChangeOutcome, Error> {
        let _gate = self.gate.read();
        let (current, t) = self.current(catalog, container)?;
        let def = &current.tables[t];
        let delete = |pk, holds| RowChange::DeleteItem {
            table: def.number,
            pk,
            cas,
            holds,
        };
        Ok(
            match self.on_located(&current, def, container.via, key, delete)? {
                Some(ItemOutcome::Written(w)) => ChangeOutcome::Done(w),
                Some(ItemOutcome::Exists) => ChangeOutcome::Exists,
                _ => ChangeOutcome::NotFound,
            },
        )
    }

    /// Gives the row `key` names in `container`, and its index entries, a new exptime
    /// (memcached's rule: relative, absolute, or negative for now). Returns the row as
    /// the container shows it, after the touch, with what was written.
    pub fn touch(
        &self,
        catalog: &Catalog,
        container: Container,
        key: &[u8],
        exptime: i64,
    ) -> Result<Option<RowItem>, Error> {
        let _gate = self.gate.read();
        let (current, t) = self.current(catalog, container)?;
        let def = &current.tables[t];
        let touch = |pk, holds| RowChange::Touch {
            table: def.number,
            pk,
            exptime,
            holds,
        };
        Ok(
            match self.on_located(&current, def, container.via, key, touch)? {
                Some(ItemOutcome::Touched(values, item)) => Some(RowItem {
                    value: render(
                        def,
                        container.via,
                        &values.iter().map(Value::as_ref).collect::<Vec<_>>(),
                    ),
                    ..item
                }),
                _ => None,
            },
        )
    }

    /// Runs the command `change` makes of a row (given its primary key, and the value
    /// it must still hold when found through a unique index) on the row a container's
    /// key names: by its primary key, or through a unique index, looking the row up
    /// again if a writer moved it meanwhile. None: no such row.
    fn on_located(
        &self,
        catalog: &Catalog,
        def: &TableDef,
        via: Via,
        key: &[u8],
        change: impl Fn(Value, Holds) -> RowChange,
    ) -> Result<Option<ItemOutcome>, Error> {
        match via {
            Via::Primary => {
                let Some(pk) = pk_from_text(def, key) else {
                    return Ok(None);
                };
                let outcome = self.change_item(catalog, change(pk, None));
                outcome.map(Some).map_err(item_error)
            }
            Via::Index(i) => {
                if !def.table.indexes[i].kind.is_unique() {
                    return Err(value_error!(
                        "index {} is not unique: change the row through table {}",
                        def.table.indexes[i].name,
                        def.table.name
                    ));
                }
                let column = def.table.indexes[i].column;
                for _ in 0..ATTEMPTS {
                    let Ok(Some((rk, value))) = self.locate(def, i, key) else {
                        return Ok(None);
                    };
                    let Some(pk) = self.pk_of_row_key(def, &rk)? else {
                        continue;
                    };
                    let outcome = self.change_item(catalog, change(pk, Some((column, value))));
                    match outcome.map_err(item_error)? {
                        ItemOutcome::Moved => {
                            self.counters.retries.fetch_add(1, Ordering::Relaxed);
                        }
                        other => return Ok(Some(other)),
                    }
                }
                Ok(None)
            }
        }
    }
}

/// What a store came to in memcached's words; None: the row it was found by moved.
fn stored(outcome: Result<ItemOutcome, ApplyError>) -> Result<Option<WriteOutcome>, Error> {
    Ok(Some(match outcome {
        Ok(ItemOutcome::Written(Some(w))) => WriteOutcome::Stored(w),
        Ok(ItemOutcome::Written(None) | ItemOutcome::Touched(..)) => {
            unreachable!("a store that was written has its row's record")
        }
        Ok(ItemOutcome::NotStored) => WriteOutcome::NotStored,
        Ok(ItemOutcome::Duplicate) => WriteOutcome::Duplicate,
        Ok(ItemOutcome::Exists) => WriteOutcome::Exists,
        Ok(ItemOutcome::NotFound) => WriteOutcome::NotFound,
        Ok(ItemOutcome::Moved) => return Ok(None),
        Err(ApplyError::NoMemory) => WriteOutcome::NoMemory,
        Err(e) => return Err(item_error(e)),
    }))
}

/// A batch's refusal of one of memcached's commands, as the tables' error. The gate
/// keeps the table, and these commands have no CAS conflicts, duplicates or upserts
/// of SQL's: what reaches here is the engine's failure, or a row that kept changing.
fn item_error(e: ApplyError) -> Error {
    match e {
        ApplyError::Other(e) => e,
        ApplyError::Moving(table) => Error::Moving(table),
        other => value_error!("the row's change was refused: {other:?}"),
    }
}

/// The primary key a container's key names, or None when no row can have it (a key
/// that is not a value of the column, or too long for a row's key).
fn pk_from_text(def: &TableDef, key: &[u8]) -> Option<Value> {
    let column = def.table.primary_column();
    let value = column.parse_text(key).ok()?;
    row_key(def, &value).ok()?;
    Some(value)
}

/// The primary key of the row at row key `rk` of `def`: read back from the key, or,
/// when the key holds a folded text's weights, from the row (None: it is gone).
impl Tables {
    fn pk_of_row_key(&self, def: &TableDef, rk: &[u8]) -> Result<Option<Value>, Error> {
        let column = def.table.primary_column();
        if column.rule() != crate::collation::Rule::Binary {
            let Some(item) = self.store.peek(kura_engine::Key::new(ROW_SPACE, rk))? else {
                return Ok(None);
            };
            let mut values = row::decode(&item.value, &def.table)?;
            return Ok(Some(values.swap_remove(def.table.primary)));
        }
        let mut reader = row::Reader { buf: pk_bytes(rk) };
        keys::decode(&mut reader, column.ty, keys::Position::Last).map(Some)
    }
}
