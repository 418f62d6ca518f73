//! Table names across databases.
//!
//! The catalog names a table of the default database (`kura`) alone and any other
//! database's `database.table` ([`kura_tables::qualified`]). SQLite knows the tables
//! of the session's current database by their own names and every other table by
//! `database.table` (one identifier, `kura.t` too), so a statement that names its
//! tables alone reaches SQLite unchanged; [`crate::translate`] rewrites a name with
//! its database into SQLite's.

use kura_tables::{database_of, qualified, Catalog, DEFAULT_DATABASE};
use sqlparser::ast::{ObjectName, ObjectNamePart};

use crate::error::SqlError;

/// A database name as a statement gives it: `kura` in any case is the default one.
pub fn database(name: &str) -> &str {
    if name.eq_ignore_ascii_case(DEFAULT_DATABASE) {
        DEFAULT_DATABASE
    } else {
        name
    }
}

/// The name SQLite knows the catalog's table `name` by, in a session whose current
/// database is `current`.
pub fn sqlite_name(name: &str, current: Option<&str>) -> String {
    let (db, table) = database_of(name);
    if Some(db) == current {
        table.to_string()
    } else {
        format!("{db}.{table}")
    }
}

/// The catalog's name for the table SQLite knows as `name`.
pub fn from_sqlite(name: &str, current: Option<&str>) -> Result<String, SqlError> {
    match name.split_once('.') {
        Some((db, table)) => Ok(qualified(database(db), table)),
        None => match current {
            Some(db) => Ok(qualified(db, name)),
            None => Err(no_database()),
        },
    }
}

/// The catalog's name for a statement's `table` or `database.table`.
pub fn of_statement(name: &ObjectName, current: Option<&str>) -> Result<String, SqlError> {
    match name.0.as_slice() {
        [table] => {
            let table = part(table);
            let db = current.ok_or_else(no_database)?;
            // No table's own name holds a '.': this one is no table's.
            if table.contains('.') {
                return Err(SqlError::no_table(db, &table));
            }
            Ok(qualified(db, &table))
        }
        [db, table] => Ok(qualified(database(&part(db)), &part(table))),
        _ => Err(SqlError::syntax(format!("{name} names more than a table"))),
    }
}

/// MySQL's 1146 for the catalog name `name`.
pub fn no_table(name: &str) -> SqlError {
    let (db, table) = database_of(name);
    SqlError::no_table(db, table)
}

/// MySQL's 1046.
pub fn no_database() -> SqlError {
    SqlError::new(1046, b"3D000", "No database selected")
}

/// The table `name` (a catalog name) in `catalog`, or MySQL's 1146.
pub fn table(catalog: &Catalog, name: &str) -> Result<usize, SqlError> {
    catalog.table(name).ok_or_else(|| no_table(name))
}

/// One part of a name, unquoted.
pub fn part(p: &ObjectNamePart) -> String {
    match p {
        ObjectNamePart::Identifier(ident) => ident.value.clone(),
        other => other.to_string().trim_matches('`').to_string(),
    }
}
