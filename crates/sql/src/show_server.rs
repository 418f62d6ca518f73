//! The SHOW statements about the server rather than a table, which tools send on
//! connecting or before a dump, read from the statement's text (sqlparser parses
//! few of them): `SHOW WARNINGS`, `SHOW ERRORS` and their `COUNT(*)` (the last
//! statement's error, as MySQL keeps it), `SHOW TABLE STATUS`, `SHOW ENGINES`,
//! `SHOW CHARACTER SET`, `SHOW COLLATION`, `SHOW CREATE DATABASE`, `SHOW PLUGINS`,
//! and `SHOW MASTER STATUS`, `SHOW SLAVE STATUS`, `SHOW REPLICA STATUS` and `SHOW
//! BINARY LOGS`, which are empty: Kura's replication is its own, not MySQL's binary
//! log (`stats replication` on the memcached port describes it).

use kura_tables::{database_of, Catalog, Collation};

use crate::error::SqlError;
use crate::result::{Cell, Kind, Output, ResultSet};
use crate::session::Session;
use crate::show::like;

/// The words of a statement, upper-case, and the quoted pattern after `LIKE` if any.
fn words(sql: &str) -> (Vec<String>, Option<String>) {
    let sql = sql.trim().trim_end_matches(';');
    let pattern = sql
        .to_ascii_uppercase()
        .find(" LIKE ")
        .map(|at| sql[at + 6..].trim().trim_matches(['\'', '"']).to_string());
    let head = match sql.to_ascii_uppercase().find(" LIKE ") {
        Some(at) => &sql[..at],
        None => sql,
    };
    (
        head.split_whitespace()
            .map(str::to_ascii_uppercase)
            .collect(),
        pattern,
    )
}

/// Whether `sql` starts with the word `word` (any case).
pub(crate) fn starts_with_word(sql: &str, word: &str) -> bool {
    let sql = sql.trim_start();
    sql.get(..word.len())
        .is_some_and(|w| w.eq_ignore_ascii_case(word))
        && sql[word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '_')
}

/// A result of `rows` whose integer columns (those holding integers) say so.
fn typed(names: &[&str], rows: Vec<Vec<Cell>>) -> ResultSet {
    let mut result = ResultSet::text(names, Vec::new());
    for (i, column) in result.columns.iter_mut().enumerate() {
        if rows.iter().any(|r| matches!(r.get(i), Some(Cell::Int(_)))) {
            column.kind = Kind::BigInt;
        }
    }
    result.rows = rows;
    result
}

/// Rows of names that pass `pattern`.
fn filtered(rows: Vec<Vec<Cell>>, pattern: Option<&str>) -> Vec<Vec<Cell>> {
    rows.into_iter()
        .filter(|row| match (pattern, row.first()) {
            (Some(p), Some(Cell::Bytes(name))) => like(p, &String::from_utf8_lossy(name)),
            _ => true,
        })
        .collect()
}

impl Session {
    /// Answers `sql` if it is one of this module's statements; None if not.
    pub(crate) fn show_server(
        &mut self,
        sql: &str,
        catalog: &Catalog,
    ) -> Option<Result<Output, SqlError>> {
        // Every statement passes here: only a SHOW is read further.
        if !starts_with_word(sql, "SHOW") {
            return None;
        }
        let (words, pattern) = words(sql);
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        let pattern = pattern.as_deref();
        let rows = |names: &[&str], rows| Some(Ok(Output::Rows(typed(names, rows))));
        match w.as_slice() {
            ["SHOW", "WARNINGS" | "ERRORS", ..] => {
                let rows_of = self.last_error.iter().map(|(code, message)| {
                    vec![
                        Cell::text("Error"),
                        Cell::Int(i64::from(*code)),
                        Cell::text(message.clone()),
                    ]
                });
                rows(&["Level", "Code", "Message"], rows_of.collect())
            }
            ["SHOW", "COUNT(*)", "WARNINGS" | "ERRORS"] => {
                let name = format!("@@session.{}_count", w[2].to_ascii_lowercase());
                let count = i64::from(self.last_error.is_some());
                rows(&[&name], vec![vec![Cell::Int(count)]])
            }
            ["SHOW", "TABLE", "STATUS", rest @ ..] => {
                let database = match rest {
                    ["FROM" | "IN", db] => {
                        crate::names::database(db.trim_matches('`')).to_ascii_lowercase()
                    }
                    _ => match self.database() {
                        Some(db) => db,
                        None => return Some(Err(crate::names::no_database())),
                    },
                };
                // The database as named (upper-cased above): find it in the catalog.
                let database = catalog
                    .database_names()
                    .into_iter()
                    .find(|d| d.eq_ignore_ascii_case(&database))
                    .unwrap_or(database);
                let mut tables: Vec<usize> = catalog.tables_in(&database).collect();
                tables.sort_by_key(|&t| database_of(&catalog.tables[t].table.name).1.to_string());
                let mut out = Vec::new();
                for t in tables {
                    let def = &catalog.tables[t];
                    let auto = def.table.columns.iter().any(|c| c.auto_increment);
                    let mut row = vec![
                        Cell::text(database_of(&def.table.name).1),
                        Cell::text("InnoDB"),
                        Cell::Int(10),
                        Cell::text("Dynamic"),
                    ];
                    row.extend([Cell::Null, Cell::Int(0), Cell::Int(0), Cell::Int(0)]);
                    row.extend([Cell::Int(0), Cell::Int(0)]);
                    row.push(if auto { Cell::Int(1) } else { Cell::Null });
                    row.extend([Cell::Null, Cell::Null, Cell::Null]);
                    row.extend([
                        Cell::text(def.table.collation.name()),
                        Cell::Null,
                        Cell::text(""),
                    ]);
                    row.push(Cell::text(""));
                    out.push(row);
                }
                rows(
                    &[
                        "Name",
                        "Engine",
                        "Version",
                        "Row_format",
                        "Rows",
                        "Avg_row_length",
                        "Data_length",
                        "Max_data_length",
                        "Index_length",
                        "Data_free",
                        "Auto_increment",
                        "Create_time",
                        "Update_time",
                        "Check_time",
                        "Collation",
                        "Checksum",
                        "Create_options",
                        "Comment",
                    ],
                    filtered(out, pattern),
                )
            }
            // Kura's SQL port has no privileges of its own: a user who logs in may
            // read and change every table, which is what MySQL's ALL says.
            ["SHOW", "GRANTS", rest @ ..] => {
                let user = match rest {
                    [] | ["FOR", "CURRENT_USER" | "CURRENT_USER()"] => {
                        self.shared.state.lock().user.clone()
                    }
                    ["FOR", _] => {
                        // As written, not upper-cased: `'app'@'%'`.
                        let who = sql.trim().trim_end_matches(';');
                        let who = who.split_whitespace().last().unwrap_or(who);
                        let who = who.split('@').next().unwrap_or(who);
                        who.trim_matches(|c| c == '\'' || c == '`' || c == '"')
                            .to_string()
                    }
                    _ => return Some(Err(SqlError::syntax("SHOW GRANTS [FOR user]"))),
                };
                rows(
                    &[&format!("Grants for {user}@%")],
                    vec![vec![Cell::text(format!(
                        "GRANT ALL PRIVILEGES ON *.* TO `{user}`@`%`"
                    ))]],
                )
            }
            ["SHOW", "ENGINES"] | ["SHOW", "STORAGE", "ENGINES"] => rows(
                &[
                    "Engine",
                    "Support",
                    "Comment",
                    "Transactions",
                    "XA",
                    "Savepoints",
                ],
                vec![vec![
                    Cell::text("InnoDB"),
                    Cell::text("DEFAULT"),
                    Cell::text("Kura's tables: durable, transactional, in primary-key order"),
                    Cell::text("YES"),
                    Cell::text("NO"),
                    Cell::text("NO"),
                ]],
            ),
            ["SHOW", "CHARACTER", "SET"] | ["SHOW", "CHARSET"] => rows(
                &["Charset", "Description", "Default collation", "Maxlen"],
                filtered(
                    Collation::all()
                        .filter(|c| c.is_charset_default())
                        .map(|c| {
                            let (description, maxlen) = match c.charset() {
                                "utf8mb4" => ("UTF-8 Unicode", 4),
                                "utf8mb3" => ("UTF-8 Unicode", 3),
                                "latin1" => ("cp1252 West European", 1),
                                "ascii" => ("US ASCII", 1),
                                _ => ("Binary pseudo charset", 1),
                            };
                            vec![
                                Cell::text(c.charset()),
                                Cell::text(description),
                                Cell::text(c.name()),
                                Cell::Int(maxlen),
                            ]
                        })
                        .collect(),
                    pattern,
                ),
            ),
            // MariaDB's columns (MySQL 8 adds Pad_attribute).
            ["SHOW", "COLLATION"] => rows(
                &[
                    "Collation",
                    "Charset",
                    "Id",
                    "Default",
                    "Compiled",
                    "Sortlen",
                ],
                filtered(
                    Collation::all()
                        .map(|c| {
                            vec![
                                Cell::text(c.name()),
                                Cell::text(c.charset()),
                                Cell::Int(i64::from(c.id())),
                                Cell::text(if c.is_charset_default() { "Yes" } else { "" }),
                                Cell::text("Yes"),
                                Cell::Int(1),
                            ]
                        })
                        .collect(),
                    pattern,
                ),
            ),
            ["SHOW", "CREATE", "DATABASE" | "SCHEMA", rest @ ..] => {
                let Some(given) = rest.last() else {
                    return Some(Err(SqlError::syntax("SHOW CREATE DATABASE names one")));
                };
                let given = given.trim_matches('`');
                let Some(name) = catalog
                    .database_names()
                    .into_iter()
                    .find(|d| d.eq_ignore_ascii_case(given))
                else {
                    return Some(Err(SqlError::no_database(given)));
                };
                let collation = catalog.database_collation(&name);
                let ddl = format!(
                    "CREATE DATABASE `{name}` /*!40100 DEFAULT CHARACTER SET {} COLLATE {} */",
                    collation.charset(),
                    collation.name()
                );
                rows(
                    &["Database", "Create Database"],
                    vec![vec![Cell::text(name), Cell::text(ddl)]],
                )
            }
            ["SHOW", "PLUGINS"] => rows(
                &["Name", "Status", "Type", "Library", "License"],
                vec![
                    vec![
                        Cell::text("mysql_native_password"),
                        Cell::text("ACTIVE"),
                        Cell::text("AUTHENTICATION"),
                        Cell::Null,
                        Cell::text("GPL"),
                    ],
                    vec![
                        Cell::text("InnoDB"),
                        Cell::text("ACTIVE"),
                        Cell::text("STORAGE ENGINE"),
                        Cell::Null,
                        Cell::text("GPL"),
                    ],
                ],
            ),
            ["SHOW", "MASTER" | "BINARY", "STATUS" | "LOGS"] => rows(
                &[
                    "File",
                    "Position",
                    "Binlog_Do_DB",
                    "Binlog_Ignore_DB",
                    "Executed_Gtid_Set",
                ],
                Vec::new(),
            ),
            ["SHOW", "SLAVE" | "REPLICA", "STATUS"] => rows(
                &["Slave_IO_State", "Master_Host", "Master_Port"],
                Vec::new(),
            ),
            _ => None,
        }
    }
}
