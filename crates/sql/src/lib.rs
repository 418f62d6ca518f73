//! SQL over Kura's tables: the statements a MySQL client sends, run over the same rows
//! memcached clients read and write.
//!
//! SQLite (bundled) is the query engine: each session has an in-memory SQLite database
//! with one virtual table per Kura table ([`vtab`]), whose index planning hands `=`,
//! `IN`, ranges and `ORDER BY` to Kura's primary key and indexes. A [`Session`] parses
//! each statement with sqlparser, translates MySQL's spellings for SQLite
//! ([`translate`]), answers what SQLite does not run (SHOW, SET, USE, transactions,
//! DDL: [`show`]), and applies the rows a statement writes as one atomic batch through
//! the tables layer, the same path memcached's writes take.
//!
//! What it is not for: the MySQL wire protocol (`kura-mysql`) and the server's
//! sockets; errors leave here as MySQL's codes ([`SqlError`]) for the server to send.

pub mod bytes;
mod collate;
mod columns;
pub mod convert;
mod dates;
mod ddl;
mod dml;
pub mod error;
mod functions;
mod information_schema;
pub mod interrupt;
pub mod isolation;
mod like;
pub mod load_data;
mod local;
pub mod names;
pub mod processlist;
pub mod result;
pub mod route;
pub mod session;
pub mod shape;
pub mod show;
mod show_server;
pub mod stream;
mod sum;
mod transaction;
pub mod translate;
pub mod upsert;
pub mod vtab;

pub use error::SqlError;
pub use interrupt::Interrupt;
pub use processlist::{ProcessRow, Processes};
pub use result::{Cell, ColumnInfo, Done, Kind, Output, ResultSet};
pub use session::{Param, Prepared, Session};
pub use stream::RowSink;
