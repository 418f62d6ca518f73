//! A SELECT's rows handed on as SQLite makes them ([`RowSink`]), rather than held
//! whole: the server writes them to the client while the statement runs.
//!
//! The first [`STREAM_AFTER_ROWS`] rows are held, as before, so that a column SQLite
//! computed takes the type of its values ([`infer_kinds`]); a result that ends
//! within them is returned whole ([`crate::Output::Rows`]). Past them the columns
//! and the rows go to the sink in batches of [`BATCH_ROWS`], each with the highest
//! LSN of the rows read so far, and the statement returns
//! [`crate::Output::Streamed`].

use rusqlite::types::Value;

use crate::error::SqlError;
use crate::result::{Cell, ColumnInfo, Kind};

/// Rows held before a result streams.
pub const STREAM_AFTER_ROWS: usize = 1000;

/// Rows handed to the sink at once.
pub const BATCH_ROWS: usize = 256;

/// Where a result's rows go when it streams.
pub trait RowSink {
    /// Whether this sink takes rows as they come (else results are held whole).
    fn streams(&self) -> bool;
    /// The result's columns, before its first rows.
    fn columns(&mut self, columns: &[ColumnInfo]) -> Result<(), SqlError>;
    /// Rows, in order; none may be shown before `read_lsn` (the highest LSN of the
    /// rows read so far) is durable.
    fn rows(&mut self, rows: &[Vec<Cell>], read_lsn: u64) -> Result<(), SqlError>;
}

/// The sink of a caller that takes results whole.
pub struct Whole;

impl RowSink for Whole {
    fn streams(&self) -> bool {
        false
    }

    fn columns(&mut self, _: &[ColumnInfo]) -> Result<(), SqlError> {
        Ok(())
    }

    fn rows(&mut self, _: &[Vec<Cell>], _: u64) -> Result<(), SqlError> {
        Ok(())
    }
}

/// The type of each column SQLite computed (`declared` None), from its values.
pub fn infer_kinds(columns: &mut [ColumnInfo], declared: &[Option<Kind>], raw: &[Vec<Value>]) {
    for (i, column) in columns.iter_mut().enumerate() {
        if declared[i].is_some() {
            continue;
        }
        let mut kind = Kind::Null;
        for row in raw {
            kind = match (kind, &row[i]) {
                (k, Value::Null) => k,
                (Kind::Null | Kind::BigInt, Value::Integer(_)) => Kind::BigInt,
                (Kind::Null | Kind::BigInt | Kind::Double, Value::Real(_)) => Kind::Double,
                (Kind::Double, Value::Integer(_)) => Kind::Double,
                (Kind::Blob, _) | (_, Value::Blob(_)) => Kind::Blob,
                _ => Kind::Varchar(255),
            };
        }
        column.kind = kind;
    }
}

/// SQLite's values as cells of `columns`' types; each row's values are freed as its
/// cells are made.
pub fn cells(columns: &[ColumnInfo], raw: impl Iterator<Item = Vec<Value>>) -> Vec<Vec<Cell>> {
    // Each row's values become its cells in place (the two have one layout), their
    // text moved, not copied.
    raw.map(|row| {
        row.into_iter()
            .enumerate()
            .map(|(i, v)| Cell::from_owned(v, Some(columns[i].kind)))
            .collect()
    })
    .collect()
}
