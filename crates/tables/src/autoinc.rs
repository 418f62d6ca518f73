//! AUTO_INCREMENT: the value a table's auto column takes when an insert leaves it
//! NULL or 0, as MySQL gives it.
//!
//! One counter per table, in memory, shared by every session. A new value is the
//! larger of the counter and one past the highest value the table holds now, read
//! from the column's ordered key (its last key), so rows written with explicit
//! values through memcached, by a primary before a failover, or before a restart move
//! the next value on as they would have moved InnoDB's counter. A value once taken is
//! not given again while the server runs, even when the statement that took it fails
//! or its transaction rolls back (InnoDB's gaps). After a restart the next value is
//! one past the highest row: where the highest rows were deleted, their values come
//! back, as in MySQL before 8.0 (MariaDB keeps its counter across a restart).
//!
//! What it is not for: checking that an explicit value is free (the write's
//! uniqueness check does that).

use std::collections::HashMap;
use std::ops::Bound;

use parking_lot::Mutex;

use crate::catalog::{TableDef, Via};
use crate::error::Error;
use crate::ordered::Range;
use crate::read::{PkCursor, RowScan};
use crate::value::{ColumnType, Value};
use crate::Tables;

/// Each table's next value (by table number), once a value was taken or seen.
#[derive(Debug, Default)]
pub struct AutoCounters(Mutex<HashMap<u32, u64>>);

/// The largest value an auto column of `ty` holds.
fn column_max(ty: ColumnType) -> u64 {
    ty.integer_range()
        .map_or(0, |(_, hi)| u64::try_from(hi).unwrap_or(u64::MAX))
}

/// A positive value of an integer column as u64; None for NULL, zero and negatives.
fn positive(value: &Value) -> Option<u64> {
    match *value {
        Value::Int(n) if n > 0 => Some(n as u64),
        Value::UInt(n) if n > 0 => Some(n),
        _ => None,
    }
}

impl Tables {
    /// The position of `def`'s AUTO_INCREMENT column, if it has one.
    pub fn auto_column(def: &TableDef) -> Option<usize> {
        def.table.columns.iter().position(|c| c.auto_increment)
    }

    /// Takes the next value of `def`'s AUTO_INCREMENT column (at `column`), as the
    /// column's value; None when the column's type holds no more (MySQL's 167).
    pub fn take_auto_value(&self, def: &TableDef, column: usize) -> Result<Option<Value>, Error> {
        let ty = def.table.columns[column].ty;
        let mut counters = self.auto.0.lock();
        let held = self.highest_auto_value(def, column, counters.contains_key(&def.number))?;
        let counter = counters.get(&def.number).copied().unwrap_or(1);
        let next = counter.max(held.map_or(1, |h| h.saturating_add(1)));
        if next > column_max(ty) {
            return Ok(None);
        }
        counters.insert(def.number, next + 1);
        Ok(Some(if ty.is_signed_integer() {
            Value::Int(next as i64)
        } else {
            Value::UInt(next)
        }))
    }

    /// Notes an explicit value written to `def`'s auto column: the next value taken
    /// is past it, as MySQL's counter moves past an explicit value.
    pub fn saw_auto_value(&self, def: &TableDef, value: &Value) {
        if let Some(v) = positive(value) {
            let mut counters = self.auto.0.lock();
            let next = counters.entry(def.number).or_insert(1);
            *next = (*next).max(v.saturating_add(1));
        }
    }

    /// The highest value the table's rows hold in `column`: through its ordered key,
    /// the last one; without one, a scan of the table, made only for the first value
    /// taken (`counted`: one was taken already).
    fn highest_auto_value(
        &self,
        def: &TableDef,
        column: usize,
        counted: bool,
    ) -> Result<Option<u64>, Error> {
        let via = if def.table.primary == column {
            Some(Via::Primary)
        } else {
            def.table
                .indexes
                .iter()
                .position(|i| i.column == column)
                .map(Via::Index)
        };
        if let Some(via) = via.filter(|&via| self.is_ordered(def, via)) {
            let all = Range {
                lower: Bound::Unbounded,
                upper: Bound::Unbounded,
                folded: false,
            };
            let Some(mut last) = PkCursor::new(def, via, &all, true) else {
                return Ok(None);
            };
            // The last key's row; an expired one is passed over.
            loop {
                let pks = last.next_pks(self, def)?;
                if pks.is_empty() {
                    return Ok(None);
                }
                for pk in pks {
                    if let Some(row) = self.row_by_pk_bytes(def, &pk)? {
                        if let Some(v) = row.values.get(column) {
                            return Ok(positive(v).or(Some(0)));
                        }
                    }
                }
            }
        }
        if counted {
            return Ok(None);
        }
        let mut scan = RowScan::new(def);
        let mut highest = None;
        loop {
            let rows = scan.next_rows(self, def)?;
            if rows.is_empty() {
                return Ok(highest);
            }
            for row in rows {
                if let Some(v) = row.values.get(column).and_then(positive) {
                    highest = Some(highest.map_or(v, |h: u64| h.max(v)));
                }
            }
        }
    }
}
