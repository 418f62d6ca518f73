//! Statements a session answers itself, without SQLite: transactions' BEGIN, COMMIT
//! and ROLLBACK, USE, SET, the SHOW family and DESCRIBE, EXPLAIN (from SQLite's query
//! plan, in MySQL's columns) and DDL.

use kura_tables::Catalog;
use sqlparser::ast::{ObjectName, ShowStatementFilter, ShowStatementFilterPosition, Statement};

use crate::error::SqlError;
use crate::isolation::Isolation;
use crate::result::{Cell, Done, Kind, Output, ResultSet};
use crate::session::{sqlite_error, Session};
use crate::show;
use crate::translate::{translate, Literal};
use crate::vtab::{parse_plan, Bind};

impl Session {
    /// Answers a statement SQLite does not run; None for one it does.
    pub(crate) fn local(
        &mut self,
        statement: &Statement,
        sql: &str,
        catalog: &Catalog,
    ) -> Result<Option<Output>, SqlError> {
        let done = || Ok(Some(Output::Done(Done::default())));
        if let Some(result) = self.ddl(statement, sql) {
            return result.map(Some);
        }
        match statement {
            Statement::Query(_)
            | Statement::Insert(_)
            | Statement::Update(_)
            | Statement::Delete(_) => Ok(None),
            Statement::StartTransaction { .. } => {
                self.implicit_commit()?;
                self.begin();
                done()
            }
            Statement::Commit { .. } => {
                self.commit()?;
                done()
            }
            Statement::Rollback { .. } => {
                self.rollback();
                done()
            }
            Statement::Use(u) => {
                let name = u.to_string();
                let name = name
                    .trim_start_matches("USE ")
                    .trim_matches('`')
                    .to_string();
                self.use_database(&name)?;
                done()
            }
            Statement::Set(set) => {
                self.set(set, sql)?;
                done()
            }
            // Kura takes no table locks (docs/sql.md): accepted for the tables that
            // exist, as mysqldump's dumps and their restores send them.
            Statement::LockTables { tables } => {
                for t in tables {
                    let name = ObjectName::from(vec![t.table.clone()]);
                    show::table(catalog, &self.name_of(&name)?)?;
                }
                done()
            }
            Statement::UnlockTables => done(),
            Statement::ShowDatabases { show_options, .. } => {
                Ok(Some(Output::Rows(show::databases(
                    catalog,
                    filter_of(show_options.filter_position.as_ref()).as_deref(),
                ))))
            }
            Statement::ShowTables {
                full, show_options, ..
            } => {
                let database = match show_options
                    .show_in
                    .as_ref()
                    .and_then(|i| i.parent_name.as_ref())
                {
                    Some(name) => crate::names::database(&last_part(name)).to_string(),
                    None => self.database().ok_or_else(crate::names::no_database)?,
                };
                if !catalog.has_database(&database) {
                    return Err(SqlError::no_database(&database));
                }
                Ok(Some(Output::Rows(show::tables(
                    catalog,
                    &database,
                    *full,
                    filter_of(show_options.filter_position.as_ref()).as_deref(),
                ))))
            }
            Statement::ShowColumns {
                full, show_options, ..
            } => {
                let name = show_options
                    .show_in
                    .as_ref()
                    .and_then(|i| i.parent_name.as_ref())
                    .ok_or_else(|| SqlError::syntax("SHOW COLUMNS wants FROM table"))?;
                let def = show::table(catalog, &self.name_of(name)?)?;
                Ok(Some(Output::Rows(show::columns(
                    def,
                    *full,
                    filter_of(show_options.filter_position.as_ref()).as_deref(),
                ))))
            }
            Statement::ExplainTable { table_name, .. } => {
                let def = show::table(catalog, &self.name_of(table_name)?)?;
                Ok(Some(Output::Rows(show::columns(def, false, None))))
            }
            Statement::ShowCreate { obj_name, .. } => {
                let def = show::table(catalog, &self.name_of(obj_name)?)?;
                Ok(Some(Output::Rows(show::create_table(def))))
            }
            Statement::ShowVariables { filter, .. } => {
                let mut vars = self.variables.clone();
                vars.insert(
                    "autocommit".into(),
                    Literal::Text(if self.autocommit { "ON" } else { "OFF" }.into()),
                );
                Ok(Some(Output::Rows(show::variables(
                    &vars,
                    filter_text(filter.as_ref()).as_deref(),
                ))))
            }
            Statement::ShowStatus { filter, .. } => {
                let reads = self.shared.state.lock().reads;
                Ok(Some(Output::Rows(show::status(
                    reads,
                    filter_text(filter.as_ref()).as_deref(),
                ))))
            }
            Statement::Explain { statement, .. } => Ok(Some(self.explain(statement, sql)?)),
            Statement::ShowProcessList { full } => Ok(Some(self.show_processlist(*full)?)),
            Statement::Kill { modifier, id } => Ok(Some(self.kill(*modifier, *id)?)),
            _ => {
                let text = statement.to_string();
                let upper = text.to_ascii_uppercase();
                if upper.starts_with("SHOW INDEX") || upper.starts_with("SHOW KEYS") {
                    // From the statement as sent: `FROM [db.]t` or `FROM t FROM db`
                    // (sqlparser prints `db.t` as `db t`).
                    let words: Vec<&str> = sql.split_whitespace().collect();
                    let after: Vec<&str> = words
                        .iter()
                        .enumerate()
                        .filter(|(_, w)| {
                            w.eq_ignore_ascii_case("FROM") || w.eq_ignore_ascii_case("IN")
                        })
                        .filter_map(|(i, _)| words.get(i + 1).copied())
                        .map(|w| w.trim_end_matches(';'))
                        .collect();
                    let mut parts: Vec<&str> = match after.as_slice() {
                        [table] => table.split('.').collect(),
                        [table, db, ..] => vec![db, table],
                        [] => Vec::new(),
                    };
                    parts.iter_mut().for_each(|p| *p = p.trim_matches('`'));
                    let name = ObjectName::from(
                        parts
                            .into_iter()
                            .map(sqlparser::ast::Ident::new)
                            .collect::<Vec<_>>(),
                    );
                    let def = show::table(catalog, &self.name_of(&name)?)?;
                    return Ok(Some(Output::Rows(show::index(def))));
                }
                Err(SqlError::unsupported(text))
            }
        }
    }

    /// `ALTER TABLE t DISABLE KEYS` and `ENABLE KEYS`, which mysqldump's files send
    /// around a table's rows (sqlparser parses neither): accepted for a table that
    /// exists, changing nothing, as Kura keeps every index whole. None for any other
    /// statement.
    pub(crate) fn keys_switch(
        &mut self,
        sql: &str,
        catalog: &Catalog,
    ) -> Option<Result<Output, SqlError>> {
        // Every statement passes here: only an ALTER is read further.
        let head = sql.trim_start();
        if !(crate::show_server::starts_with_word(head, "ALTER") || head.starts_with("/*!")) {
            return None;
        }
        let mut sql = sql.trim().trim_end_matches(';').trim_end();
        // As MySQL runs it inside a versioned comment (`/*!40000 ... */`).
        if let Some(inner) = sql.strip_prefix("/*!").and_then(|s| s.strip_suffix("*/")) {
            sql = inner
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .trim();
        }
        let words: Vec<&str> = sql.split_whitespace().collect();
        let is = |w: &str, want: &str| w.eq_ignore_ascii_case(want);
        let [alter, table, name, switch, keys] = words.as_slice() else {
            return None;
        };
        if !(is(alter, "ALTER") && is(table, "TABLE") && is(keys, "KEYS"))
            || !(is(switch, "DISABLE") || is(switch, "ENABLE"))
        {
            return None;
        }
        let parts: Vec<sqlparser::ast::Ident> = name
            .split('.')
            .map(|p| sqlparser::ast::Ident::new(p.trim_matches('`')))
            .collect();
        let checked = self
            .name_of(&ObjectName::from(parts))
            .and_then(|n| show::table(catalog, &n).map(|_| ()));
        Some(checked.map(|()| Output::Done(Done::default())))
    }

    fn set(&mut self, set: &sqlparser::ast::Set, sql: &str) -> Result<(), SqlError> {
        use sqlparser::ast::Set as S;
        match set {
            S::SingleAssignment {
                variable, values, ..
            } => self.assign(&last_part(variable), values.first()),
            S::MultipleAssignments { assignments } => {
                for a in assignments {
                    self.assign(&last_part(&a.name), Some(&a.value))?;
                }
                Ok(())
            }
            S::SetTransaction { modes, session, .. } => {
                // sqlparser drops the scope of `SET SESSION TRANSACTION`: read it
                // from the text. GLOBAL is the session's too, as for variables.
                let scope = sql.split_whitespace().nth(1).unwrap_or("");
                let session = *session
                    || ["SESSION", "GLOBAL", "LOCAL"]
                        .iter()
                        .any(|s| scope.eq_ignore_ascii_case(s));
                for mode in modes {
                    let sqlparser::ast::TransactionMode::IsolationLevel(level) = mode else {
                        // READ ONLY / READ WRITE: accepted, as before.
                        continue;
                    };
                    let level = Isolation::of(level)?;
                    if session {
                        self.set_isolation(level);
                    } else if self.in_transaction {
                        return Err(SqlError::new(
                            1568,
                            b"25001",
                            "Transaction characteristics can't be changed while a transaction is in progress",
                        ));
                    } else {
                        self.next_isolation = Some(level);
                    }
                }
                Ok(())
            }
            // SET NAMES and the like: Kura speaks utf8mb4; accepted as MySQL accepts them.
            _ => Ok(()),
        }
    }

    fn assign(&mut self, name: &str, value: Option<&sqlparser::ast::Expr>) -> Result<(), SqlError> {
        if let Some(user) = name.strip_prefix('@').filter(|n| !n.starts_with('@')) {
            let literal = match value {
                Some(expr) => self.evaluate(expr)?,
                None => Literal::Null,
            };
            self.user_variables
                .insert(user.to_ascii_lowercase(), literal);
            return Ok(());
        }
        let name = name.trim_start_matches("@@").to_ascii_lowercase();
        let name = name
            .strip_prefix("session.")
            .or_else(|| name.strip_prefix("global."))
            .unwrap_or(&name)
            .to_string();
        // A variable's value may be another's (`SET x = @saved`, as mysqldump's
        // files restore what they changed); DEFAULT is the value a session starts with.
        let text = match value {
            Some(expr @ sqlparser::ast::Expr::Identifier(ident))
                if ident.value.starts_with('@') =>
            {
                match self.evaluate(expr)? {
                    Literal::Null => String::new(),
                    Literal::Number(n) | Literal::Text(n) => n,
                }
            }
            Some(sqlparser::ast::Expr::Identifier(ident))
                if ident.value.eq_ignore_ascii_case("DEFAULT") =>
            {
                match crate::show::default_variables().remove(&name) {
                    Some(Literal::Number(n) | Literal::Text(n)) => n,
                    Some(Literal::Null) => String::new(),
                    None if name == "autocommit" => "1".to_string(),
                    None => return Err(SqlError::unknown_variable(&name)),
                }
            }
            _ => value
                .map(|v| v.to_string())
                .unwrap_or_default()
                .trim_matches('\'')
                .to_string(),
        };
        if name == "autocommit" {
            let on = matches!(text.to_ascii_uppercase().as_str(), "1" | "ON" | "TRUE");
            if on && !self.autocommit {
                self.implicit_commit()?;
            }
            self.autocommit = on;
            return Ok(());
        }
        if !self.variables.contains_key(&name) {
            return Err(SqlError::unknown_variable(&name));
        }
        if name == "transaction_isolation" || name == "tx_isolation" {
            let level = Isolation::parse(&text).ok_or_else(|| {
                SqlError::new(
                    1231,
                    b"42000",
                    format!("Variable '{name}' can't be set to the value of '{text}'"),
                )
            })?;
            self.set_isolation(level);
            return Ok(());
        }
        if name == "sql_mode" {
            // The one mode Kura acts on: mysqldump's files set it so that a row
            // whose AUTO_INCREMENT column is 0 is restored with 0.
            self.shared.state.lock().no_auto_value_on_zero =
                text.to_ascii_uppercase().contains("NO_AUTO_VALUE_ON_ZERO");
        }
        let literal = if text.parse::<f64>().is_ok() {
            Literal::Number(text)
        } else {
            Literal::Text(text)
        };
        self.variables.insert(name, literal);
        Ok(())
    }

    /// The value of `expr` (variables, literals, any expression SQLite can answer
    /// without a table), as `SELECT expr` gives it.
    fn evaluate(&mut self, expr: &sqlparser::ast::Expr) -> Result<Literal, SqlError> {
        let output = self.query(&format!("SELECT {expr}"))?;
        let cell = match output {
            Output::Rows(rows) => rows
                .rows
                .into_iter()
                .next()
                .and_then(|r| r.into_iter().next()),
            _ => None,
        };
        Ok(match cell {
            None | Some(Cell::Null) => Literal::Null,
            Some(Cell::Int(n)) => Literal::Number(n.to_string()),
            Some(Cell::UInt(n)) => Literal::Number(n.to_string()),
            Some(Cell::Double(f)) => Literal::Number(f.to_string()),
            Some(Cell::Bytes(b)) => Literal::Text(String::from_utf8_lossy(&b).into_owned()),
        })
    }

    /// The session's isolation level, and the variables that show it.
    fn set_isolation(&mut self, level: Isolation) {
        self.isolation = level;
        for name in ["transaction_isolation", "tx_isolation"] {
            let value = Literal::Text(level.name().to_string());
            self.variables.insert(name.to_string(), value);
        }
    }

    /// EXPLAIN of a SELECT: MySQL's columns, from SQLite's query plan.
    fn explain(&mut self, statement: &Statement, _sql: &str) -> Result<Output, SqlError> {
        let inner = statement.to_string();
        let translated = {
            let vars = |n: &str| self.variable(n);
            let catalog = self.shared.state.lock().catalog.clone();
            translate(
                statement.clone(),
                &inner,
                &vars,
                &catalog,
                self.database().as_deref(),
            )?
        };
        let mut stmt = self
            .db
            .prepare(&format!("EXPLAIN QUERY PLAN {}", translated.sql))
            .map_err(sqlite_error)?;
        let details: Vec<String> = stmt
            .query_map([], |row| row.get::<_, String>(3))
            .map_err(sqlite_error)?
            .collect::<Result<_, _>>()
            .map_err(sqlite_error)?;
        let mut rows: Vec<Vec<Cell>> = Vec::new();
        for detail in details {
            if detail.starts_with("USE TEMP B-TREE") {
                if let Some(last) = rows.last_mut() {
                    last[11] = Cell::text("Using filesort");
                }
                continue;
            }
            let words: Vec<&str> = detail.split_whitespace().collect();
            let table = words.get(1).copied().unwrap_or("").to_string();
            let (access, key) = match detail.split_once("INDEX ") {
                Some((_, plan)) => {
                    let (num, rest) = plan.split_once(':').unwrap_or((plan, ""));
                    let (index, binds) = parse_plan(rest).map_or(("", vec![]), |(i, b, _)| (i, b));
                    let index = index.split_once('/').map_or(index, |(_, n)| n);
                    match num {
                        "1" | "2" if binds == [Bind::In] => ("range", Some(index.to_string())),
                        "1" | "2" => ("const", Some(index.to_string())),
                        "3" | "4" => ("range", Some(index.to_string())),
                        _ => ("ALL", None),
                    }
                }
                None => ("ALL", None),
            };
            let key_cell = key.clone().map_or(Cell::Null, Cell::text);
            rows.push(vec![
                Cell::Int(1),
                Cell::text("SIMPLE"),
                Cell::text(table),
                Cell::Null,
                Cell::text(access),
                key_cell.clone(),
                key_cell,
                Cell::Null,
                Cell::Null,
                Cell::Null,
                Cell::Double(100.0),
                if key.is_some() {
                    Cell::text("Using where")
                } else {
                    Cell::Null
                },
            ]);
        }
        let mut result = ResultSet::text(
            &[
                "id",
                "select_type",
                "table",
                "partitions",
                "type",
                "possible_keys",
                "key",
                "key_len",
                "ref",
                "rows",
                "filtered",
                "Extra",
            ],
            rows,
        );
        result.columns[0].kind = Kind::BigInt;
        result.columns[9].kind = Kind::BigInt;
        result.columns[10].kind = Kind::Double;
        Ok(Output::Rows(result))
    }
}

fn last_part(name: &sqlparser::ast::ObjectName) -> String {
    name.0
        .last()
        .map(|p| match p {
            sqlparser::ast::ObjectNamePart::Identifier(i) => i.value.clone(),
            other => other.to_string(),
        })
        .unwrap_or_default()
}

fn filter_text(filter: Option<&ShowStatementFilter>) -> Option<String> {
    match filter? {
        ShowStatementFilter::Like(s) | ShowStatementFilter::NoKeyword(s) => Some(s.clone()),
        _ => None,
    }
}

fn filter_of(position: Option<&ShowStatementFilterPosition>) -> Option<String> {
    match position? {
        ShowStatementFilterPosition::Infix(f) | ShowStatementFilterPosition::Suffix(f) => {
            filter_text(Some(f))
        }
    }
}
