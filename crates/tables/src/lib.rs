//! Kura's tables: named tables whose rows memcached clients address by key, with
//! unique and ordered secondary indexes kept atomic with the row.
//!
//! This crate owns what a table is and how its rows and index entries become engine
//! records: schemas from MySQL's `CREATE TABLE` ([`schema`]), the catalog that numbers
//! tables and names containers ([`catalog`]), a row's bytes in the log ([`row`]), a
//! row's fields as a memcached value ([`text`]), and values as ordered key bytes
//! ([`keys`]). It knows no sockets and no protocol syntax; memcached's own rules (win
//! tokens, stale items, delayed flush_all) are the server's and never reach tables.

mod autoinc;
mod error;

pub mod batch;
pub mod catalog;
pub mod collation;
pub mod ddl;
pub mod decimal;
mod follow;
pub mod keys;
pub mod ordered;
pub mod read;
pub mod reads;
pub mod row;
pub mod rows;
pub mod schema;
pub mod seal;
pub mod temporal;
pub mod text;
pub mod value;

pub use autoinc::AutoCounters;
pub use batch::{no_upsert, Applied, ApplyError, OnConflict, RowAfter, RowChange, Upsert};
pub use catalog::{database_of, qualified, Catalog, Container, TableDef, Via, DEFAULT_DATABASE};
pub use collation::{Collation, Rule};
pub use ddl::DdlError;
pub use decimal::Decimal;
pub use error::Error;
pub use read::{Entry, PkCursor, RowRead, RowScan};
pub use reads::Reads;
pub use rows::{
    ordered_spaces, CatalogCache, ChangeOutcome, RangeRows, RowItem, Tables, WriteMode,
    WriteOutcome,
};
pub use schema::{
    parse_schema, parse_schema_in, Column, Index, IndexKind, Table, AUTO_KEY_REASON,
    DUPLICATED_MEMBER, INVALID_DEFAULT,
};
pub use seal::Seal;
pub use value::{ColumnType, Value};
