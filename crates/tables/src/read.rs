//! Rows read as values, for the SQL layer: by primary key, through a unique index, in
//! an ordered index's order, or the whole table. Each row comes with its item's flags,
//! exptime and CAS (the CAS lets a later write check that the row did not change).
//!
//! What it is not for: memcached's reads, which show a row as a container's text
//! ([`Tables::get`], [`Tables::range`]).

use std::sync::atomic::Ordering;

use kura_engine::{Item, Key};

use crate::catalog::{TableDef, Via};
use crate::error::Error;
use crate::ordered::Range;
use crate::row;
use crate::rows::{
    row_key, row_key_of_entry, unique_key, Tables, ATTEMPTS, ROW_SPACE, UNIQUE_SPACE,
};
use crate::value::Value;

/// A row as SQL reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct RowRead {
    pub values: Vec<Value>,
    pub client_flags: u32,
    /// Absolute Unix seconds; 0 = never.
    pub exptime: u32,
    pub cas: u64,
    /// The row's LSN: a reply showing it waits until this is acknowledged.
    pub lsn: u64,
}

impl RowRead {
    fn of(def: &TableDef, item: &Item) -> Result<RowRead, Error> {
        Ok(RowRead {
            values: row::decode(&item.value, &def.table)?,
            client_flags: item.client_flags,
            exptime: item.exptime,
            cas: item.cas,
            lsn: item.lsn,
        })
    }
}

impl Tables {
    /// The row whose primary key is `pk` (a value of the primary key's type).
    pub fn row_by_pk(&self, def: &TableDef, pk: &Value) -> Result<Option<RowRead>, Error> {
        let Ok(rk) = row_key(def, pk) else {
            return Ok(None);
        };
        self.row_at(def, &rk)
    }

    /// The row whose primary key encodes to `pk` (as an ordered index gives it).
    pub fn row_by_pk_bytes(&self, def: &TableDef, pk: &[u8]) -> Result<Option<RowRead>, Error> {
        self.row_at(def, &row_key_of_entry(def, pk))
    }

    fn row_at(&self, def: &TableDef, rk: &[u8]) -> Result<Option<RowRead>, Error> {
        match self.store.get(Key::new(ROW_SPACE, rk))? {
            Some(item) => Ok(Some(RowRead::of(def, &item)?)),
            None => Ok(None),
        }
    }

    /// The row whose column under unique index `index` holds `value`.
    pub fn row_by_unique(
        &self,
        def: &TableDef,
        index: usize,
        value: &Value,
    ) -> Result<Option<RowRead>, Error> {
        let column = def.table.indexes[index].column;
        let Ok(Some(entry_key)) = unique_key(def, index, value) else {
            return Ok(None);
        };
        for _ in 0..ATTEMPTS {
            let Some(entry) = self.store.get(Key::new(UNIQUE_SPACE, &entry_key))? else {
                return Ok(None);
            };
            match self.row_at(def, &row_key_of_entry(def, &entry.value))? {
                Some(row) if row.values[column] == *value => {
                    return Ok(Some(RowRead {
                        lsn: row.lsn.max(entry.lsn),
                        ..row
                    }))
                }
                // A writer changed the row between the two lookups: look again.
                _ => {
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Err(Error::Value(
            "a row kept changing while it was read".to_string(),
        ))
    }

    /// Whether `via` of `def` keeps an ordered copy in memory.
    pub fn is_ordered(&self, def: &TableDef, via: Via) -> bool {
        self.ordered.has(def)
            && match via {
                Via::Primary => def.table.primary_ordered,
                Via::Index(i) => def.table.indexes[i].kind.is_ordered(),
            }
    }

    /// The primary keys (encoded, for [`Tables::row_by_pk_bytes`]) of the rows whose
    /// `via` column is in `range`, in that column's order then the primary key's, at
    /// most `limit`; None when `via` keeps no order.
    pub fn ordered_pks(
        &self,
        def: &TableDef,
        via: Via,
        range: &Range,
        limit: usize,
    ) -> Option<Vec<Vec<u8>>> {
        if !self.is_ordered(def, via) {
            return None;
        }
        self.ordered
            .range(def, via, range, self.store.now_secs(), limit)
    }

    /// Every live row of `def`, in no order. Reads the log (blocks on the disk).
    pub fn scan_rows(&self, def: &TableDef, mut visit: impl FnMut(RowRead)) -> Result<(), Error> {
        let prefix = def.number.to_be_bytes();
        let mut failed = None;
        self.store.scan_space(ROW_SPACE, |key, item| {
            if !key.starts_with(&prefix) {
                return;
            }
            match RowRead::of(def, &item) {
                Ok(row) => visit(row),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        })?;
        failed.map_or(Ok(()), Err)
    }
}
