//! What the SQL session tests share: the players table, a store on the simulated disk
//! under a manual clock, and statements run with their outcome checked.
#![allow(clippy::expect_used, dead_code)]

use std::sync::Arc;
use std::time::Duration;

use kura_engine::sim::SimDisk;
use kura_engine::{Durability, ManualClock, Options, Store};
use kura_sql::{Cell, Output, Session, SqlError};
use kura_tables::Tables;

pub const SCHEMA: &str = "CREATE TABLE players (
    id INT PRIMARY KEY,
    name VARCHAR(32) NOT NULL,
    email VARCHAR(64),
    level INT NOT NULL DEFAULT 1,
    UNIQUE KEY email (email),
    KEY level (level)
)";

/// Tables over a fresh store on the simulated disk.
pub fn tables() -> Arc<Tables> {
    let clock = Arc::new(ManualClock::new(1_700_000_000));
    let mut options = Options::new(Durability::Fsync, clock);
    options.fsync_interval = Duration::from_millis(1);
    options.ordered_spaces = kura_tables::ordered_spaces();
    let store = Store::open(Arc::new(SimDisk::new()), options).expect("store");
    Arc::new(Tables::open(Arc::new(store)).expect("tables"))
}

/// The rows `sql` returns; anything else fails the test.
pub fn rows(session: &mut Session, sql: &str) -> Vec<Vec<Cell>> {
    match session.query(sql) {
        Ok(Output::Rows(rs)) => rs.rows,
        other => panic!("{sql}: {other:?}"),
    }
}

/// The rows `sql` changed; anything else fails the test.
pub fn done(session: &mut Session, sql: &str) -> u64 {
    match session.query(sql) {
        Ok(Output::Done(d)) => d.affected,
        other => panic!("{sql}: {other:?}"),
    }
}

/// The error `sql` gets; success fails the test.
pub fn error(session: &mut Session, sql: &str) -> SqlError {
    match session.query(sql) {
        Err(e) => e,
        other => panic!("{sql}: wanted an error, got {other:?}"),
    }
}
