//! A SQL session: one client connection's statements, its transaction and its
//! prepared statements, over an in-memory SQLite database whose tables are Kura's.
//!
//! Each statement is parsed with sqlparser (MySQL's dialect). SELECT, INSERT, REPLACE,
//! UPDATE and DELETE are translated ([`crate::translate`]) and run by SQLite over the
//! virtual tables ([`crate::vtab`]); the rest (SHOW, SET, USE, transactions, DDL) is
//! answered here.
//!
//! Writes: a statement's row changes are collected while SQLite runs it, then applied
//! as one atomic batch ([`Tables::apply_changes`]). In autocommit mode that happens at
//! once; a statement that read a row another writer changed before the batch was
//! written runs again (up to [`STATEMENT_ATTEMPTS`] times). Inside a transaction
//! (`BEGIN`, or `autocommit=0`) the changes are checked against the store (a duplicate
//! fails the statement, as in MySQL) and kept; the session's reads see them; `COMMIT`
//! applies the whole transaction as one batch, or fails with MySQL's deadlock error
//! (1213) if a row it read changed meanwhile, applying nothing.
//!
//! What it is not for: the wire protocol (the server's) and memcached's commands.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kura_tables::{ApplyError, Catalog, CatalogCache, OnConflict, RowChange, Tables};
use parking_lot::Mutex;
use rusqlite::types::ValueRef;
use rusqlite::vtab::Module;
use rusqlite::Connection;
use sqlparser::ast::{ShowStatementFilter, ShowStatementFilterPosition, Statement};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

use crate::error::SqlError;
use crate::result::{Cell, ColumnInfo, Done, Kind, Output, ResultSet};
use crate::show::{self, default_variables};
use crate::translate::{translate, Literal, Translated, DATABASE};
use crate::vtab::{pk_key, KuraTab, Shared, State};

/// The virtual-table module: SQLite keeps a pointer to it for the connection's life.
const KURA_MODULE: Module<'static, KuraTab> = Module::<KuraTab>::update_module();

/// How many times an autocommit statement runs when rows it read change under it.
pub const STATEMENT_ATTEMPTS: usize = 8;

/// A parameter of a prepared statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Null,
    Int(i64),
    UInt(u64),
    Double(f64),
    Bytes(Vec<u8>),
}

/// A prepared statement, as the client is told of it.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub id: u32,
    pub params: usize,
    pub columns: Vec<ColumnInfo>,
    /// What runs on execute.
    plan: Plan,
}

#[derive(Debug, Clone)]
enum Plan {
    Sqlite(Translated),
    /// Answered by the session: the statement's text, parsed again on execute.
    Local(String),
}

pub struct Session {
    shared: Arc<Shared>,
    db: Connection,
    catalog_cache: CatalogCache,
    /// The catalog the virtual tables were declared from.
    declared: Option<Arc<Catalog>>,
    variables: BTreeMap<String, Literal>,
    autocommit: bool,
    /// Whether a transaction is open (explicitly, or implicitly with autocommit off).
    in_transaction: bool,
    prepared: HashMap<u32, Prepared>,
    next_statement: u32,
}

fn sqlite_error(e: rusqlite::Error) -> SqlError {
    let message = e.to_string();
    if let Some(table) = message.strip_prefix("no such table: ") {
        return SqlError::no_table(DATABASE, table);
    }
    if let Some(column) = message.strip_prefix("no such column: ") {
        return SqlError::no_column(column, "field list");
    }
    if message.contains("syntax error") || message.contains("incomplete input") {
        return SqlError::syntax(message);
    }
    SqlError::internal(message)
}

impl Session {
    pub fn new(tables: Arc<Tables>, connection_id: u32, user: &str) -> Result<Session, SqlError> {
        let catalog = tables.catalog();
        let mut state = State::new(catalog);
        state.connection_id = connection_id;
        state.user = user.to_string();
        state.database = Some(DATABASE.to_string());
        let shared = Arc::new(Shared {
            tables,
            state: Mutex::new(state),
        });
        let db = Connection::open_in_memory().map_err(sqlite_error)?;
        db.create_module("kura", &KURA_MODULE, Some(Arc::clone(&shared)))
            .map_err(sqlite_error)?;
        // Text compares as bytes (utf8mb4_bin), in LIKE too.
        db.pragma_update(None, "case_sensitive_like", true)
            .map_err(sqlite_error)?;
        let mut session = Session {
            shared,
            db,
            catalog_cache: None,
            declared: None,
            variables: default_variables(),
            autocommit: true,
            in_transaction: false,
            prepared: HashMap::new(),
            next_statement: 1,
        };
        session.functions()?;
        Ok(session)
    }

    /// MySQL's functions SQLite lacks, reading the session's state.
    fn functions(&mut self) -> Result<(), SqlError> {
        use rusqlite::functions::FunctionFlags;
        let flags = FunctionFlags::SQLITE_UTF8;
        let shared = Arc::clone(&self.shared);
        self.db
            .create_scalar_function("database", 0, flags, move |_| {
                Ok(shared.state.lock().database.clone())
            })
            .map_err(sqlite_error)?;
        let shared = Arc::clone(&self.shared);
        self.db
            .create_scalar_function("schema", 0, flags, move |_| {
                Ok(shared.state.lock().database.clone())
            })
            .map_err(sqlite_error)?;
        self.db
            .create_scalar_function("version", 0, flags, |_| Ok(show::VERSION))
            .map_err(sqlite_error)?;
        for name in ["user", "current_user", "session_user", "system_user"] {
            let shared = Arc::clone(&self.shared);
            self.db
                .create_scalar_function(name, 0, flags, move |_| {
                    Ok(format!("{}@localhost", shared.state.lock().user))
                })
                .map_err(sqlite_error)?;
        }
        let shared = Arc::clone(&self.shared);
        self.db
            .create_scalar_function("connection_id", 0, flags, move |_| {
                Ok(i64::from(shared.state.lock().connection_id))
            })
            .map_err(sqlite_error)?;
        let shared = Arc::clone(&self.shared);
        self.db
            .create_scalar_function("last_insert_id", 0, flags, move |_| {
                Ok(shared.state.lock().last_insert_id as i64)
            })
            .map_err(sqlite_error)?;
        let shared = Arc::clone(&self.shared);
        self.db
            .create_scalar_function("row_count", 0, flags, move |_| {
                Ok(shared.state.lock().row_count)
            })
            .map_err(sqlite_error)?;
        self.db
            .create_scalar_function("unix_timestamp", 0, flags, |_| {
                Ok(std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64))
            })
            .map_err(sqlite_error)?;
        Ok(())
    }

    /// MySQL's server status flags for this session: in a transaction, autocommit.
    pub fn status(&self) -> (bool, bool) {
        (self.in_transaction, self.autocommit)
    }

    /// The LSN a reply must wait for: the highest of the rows the statement read.
    pub fn take_read_lsn(&self) -> u64 {
        std::mem::take(&mut self.shared.state.lock().max_lsn)
    }

    /// The user the session runs as.
    pub fn user(&self) -> String {
        self.shared.state.lock().user.clone()
    }

    /// The columns of table `name` (COM_FIELD_LIST), or MySQL's 1146.
    pub fn table_columns(&mut self, name: &str) -> Result<Vec<ColumnInfo>, SqlError> {
        let catalog = self.sync_catalog()?;
        Ok(show::table_columns(show::table(&catalog, name)?))
    }

    /// COM_INIT_DB and USE.
    pub fn use_database(&mut self, name: &str) -> Result<(), SqlError> {
        if !name.eq_ignore_ascii_case(DATABASE) {
            return Err(SqlError::no_database(name));
        }
        self.shared.state.lock().database = Some(DATABASE.to_string());
        Ok(())
    }

    /// Declares the catalog's tables to SQLite again if it changed.
    fn sync_catalog(&mut self) -> Result<Arc<Catalog>, SqlError> {
        let catalog = Arc::clone(self.shared.tables.catalog_cached(&mut self.catalog_cache));
        if self
            .declared
            .as_ref()
            .is_some_and(|d| Arc::ptr_eq(d, &catalog))
        {
            return Ok(catalog);
        }
        if let Some(old) = self.declared.take() {
            for def in &old.tables {
                self.db
                    .execute_batch(&format!(
                        "DROP TABLE IF EXISTS \"{}\"",
                        def.table.name.replace('"', "\"\"")
                    ))
                    .map_err(sqlite_error)?;
            }
        }
        self.shared.state.lock().catalog = Arc::clone(&catalog);
        for def in &catalog.tables {
            self.db
                .execute_batch(&format!(
                    "CREATE VIRTUAL TABLE \"{0}\" USING kura",
                    def.table.name.replace('"', "\"\"")
                ))
                .map_err(sqlite_error)?;
        }
        self.db.flush_prepared_statement_cache();
        self.declared = Some(Arc::clone(&catalog));
        Ok(catalog)
    }

    fn parse(sql: &str) -> Result<Statement, SqlError> {
        let mut statements = Parser::parse_sql(&MySqlDialect {}, sql).map_err(|e| {
            SqlError::syntax(format!(
                "{}; check the manual that corresponds to your MySQL server version",
                e.to_string().trim_start_matches("sql parser error: ")
            ))
        })?;
        match statements.len() {
            0 => Err(SqlError::new(1065, b"42000", "Query was empty")),
            1 => Ok(statements.remove(0)),
            _ => Err(SqlError::unsupported("several statements in one query")),
        }
    }

    fn variable(&self, name: &str) -> Option<Literal> {
        if name == "autocommit" {
            return Some(Literal::Number(
                if self.autocommit { "1" } else { "0" }.into(),
            ));
        }
        self.variables.get(name).cloned()
    }

    /// Runs one statement of text (COM_QUERY).
    pub fn query(&mut self, sql: &str) -> Result<Output, SqlError> {
        let catalog = self.sync_catalog()?;
        let statement = Self::parse(sql)?;
        match self.local(&statement, sql, &catalog)? {
            Some(output) => Ok(output),
            None => {
                let translated = {
                    let vars = |n: &str| self.variable(n);
                    translate(statement, sql, &vars, &|t| defaults(&catalog, t))?
                };
                self.run(&translated, &[])
            }
        }
    }

    /// COM_STMT_PREPARE.
    pub fn prepare(&mut self, sql: &str) -> Result<Prepared, SqlError> {
        let catalog = self.sync_catalog()?;
        let statement = Self::parse(sql)?;
        let id = self.next_statement;
        let prepared = if is_local(&statement) {
            let columns = match self.local(&statement, sql, &catalog) {
                Ok(Some(Output::Rows(rs))) => rs.columns,
                _ => Vec::new(),
            };
            Prepared {
                id,
                params: 0,
                columns,
                plan: Plan::Local(sql.to_string()),
            }
        } else {
            let translated = {
                let vars = |n: &str| self.variable(n);
                translate(statement, sql, &vars, &|t| defaults(&catalog, t))?
            };
            let stmt = self.db.prepare(&translated.sql).map_err(sqlite_error)?;
            let columns = stmt
                .columns()
                .map(|c| {
                    ColumnInfo::new(
                        c.name(),
                        c.decl_type()
                            .and_then(Kind::from_decl)
                            .unwrap_or(Kind::Varchar(255)),
                    )
                })
                .collect();
            Prepared {
                id,
                params: stmt.parameter_count(),
                columns,
                plan: Plan::Sqlite(translated),
            }
        };
        self.next_statement = self.next_statement.wrapping_add(1).max(1);
        self.prepared.insert(id, prepared.clone());
        Ok(prepared)
    }

    /// The prepared statement `id`.
    pub fn prepared(&self, id: u32) -> Option<&Prepared> {
        self.prepared.get(&id)
    }

    /// COM_STMT_EXECUTE.
    pub fn execute(&mut self, id: u32, params: &[Param]) -> Result<Output, SqlError> {
        let prepared = self
            .prepared
            .get(&id)
            .cloned()
            .ok_or_else(|| SqlError::unknown_statement(id, "mysqld_stmt_execute"))?;
        if params.len() != prepared.params {
            return Err(SqlError::wrong_arguments("mysqld_stmt_execute"));
        }
        self.sync_catalog()?;
        match &prepared.plan {
            Plan::Sqlite(t) => self.run(t, params),
            Plan::Local(sql) => self.query(sql),
        }
    }

    /// COM_STMT_CLOSE.
    pub fn close(&mut self, id: u32) {
        self.prepared.remove(&id);
    }

    /// Runs a translated statement in SQLite, and applies what it wrote.
    fn run(&mut self, t: &Translated, params: &[Param]) -> Result<Output, SqlError> {
        if t.writes && !self.autocommit && !self.in_transaction {
            self.in_transaction = true;
        }
        for _ in 0..STATEMENT_ATTEMPTS {
            {
                let mut state = self.shared.state.lock();
                state.statement.clear();
                state.error = None;
                state.conflict = t.conflict;
                if !self.in_transaction {
                    state.read_cas.clear();
                }
            }
            let result = self.step(t, params);
            let (changes, error) = {
                let mut state = self.shared.state.lock();
                (std::mem::take(&mut state.statement), state.error.take())
            };
            let output = match (result, error) {
                (_, Some(e)) | (Err(e), None) => return Err(e),
                (Ok(output), None) => output,
            };
            if !t.writes {
                return Ok(output);
            }
            match self.commit_statement(changes) {
                Ok(done) => return Ok(Output::Done(done)),
                Err(ApplyError::Conflict) if !self.in_transaction => continue,
                Err(e) => return Err(self.apply_error(e)),
            }
        }
        Err(SqlError::conflict())
    }

    /// SQLite's part of a statement: its rows, or nothing for a write.
    fn step(&mut self, t: &Translated, params: &[Param]) -> Result<Output, SqlError> {
        let mut stmt = self.db.prepare_cached(&t.sql).map_err(sqlite_error)?;
        for (i, p) in params.iter().enumerate() {
            let v = match p {
                Param::Null => rusqlite::types::Value::Null,
                Param::Int(n) => rusqlite::types::Value::Integer(*n),
                Param::UInt(n) => match i64::try_from(*n) {
                    Ok(n) => rusqlite::types::Value::Integer(n),
                    Err(_) => rusqlite::types::Value::Real(*n as f64),
                },
                Param::Double(f) => rusqlite::types::Value::Real(*f),
                Param::Bytes(b) => match String::from_utf8(b.clone()) {
                    Ok(s) => rusqlite::types::Value::Text(s),
                    Err(_) => rusqlite::types::Value::Blob(b.clone()),
                },
            };
            stmt.raw_bind_parameter(i + 1, v).map_err(sqlite_error)?;
        }
        let count = stmt.column_count();
        if count == 0 {
            stmt.raw_execute().map_err(sqlite_error)?;
            return Ok(Output::Done(Done::default()));
        }
        let mut columns: Vec<ColumnInfo> = stmt
            .columns()
            .map(|c| {
                let mut info = ColumnInfo::new(c.name(), Kind::Null);
                if let Some(kind) = c.decl_type().and_then(Kind::from_decl) {
                    info.kind = kind;
                }
                info
            })
            .collect();
        let declared: Vec<Option<Kind>> = columns
            .iter()
            .map(|c| (c.kind != Kind::Null).then_some(c.kind))
            .collect();
        let mut raw: Vec<Vec<rusqlite::types::Value>> = Vec::new();
        let mut rows = stmt.raw_query();
        while let Some(row) = rows.next().map_err(sqlite_error)? {
            let mut values = Vec::with_capacity(count);
            for i in 0..count {
                values.push(
                    rusqlite::types::Value::try_from(row.get_ref(i).map_err(sqlite_error)?)
                        .map_err(SqlError::internal)?,
                );
            }
            raw.push(values);
        }
        drop(rows);
        // A column SQLite computed takes the type of its values.
        for (i, column) in columns.iter_mut().enumerate() {
            if declared[i].is_some() {
                continue;
            }
            let mut kind = Kind::Null;
            for row in &raw {
                kind = match (kind, &row[i]) {
                    (k, rusqlite::types::Value::Null) => k,
                    (Kind::Null | Kind::BigInt, rusqlite::types::Value::Integer(_)) => Kind::BigInt,
                    (Kind::Null | Kind::BigInt | Kind::Double, rusqlite::types::Value::Real(_)) => {
                        Kind::Double
                    }
                    (Kind::Double, rusqlite::types::Value::Integer(_)) => Kind::Double,
                    (Kind::Blob, _) | (_, rusqlite::types::Value::Blob(_)) => Kind::Blob,
                    _ => Kind::Varchar(255),
                };
            }
            column.kind = kind;
        }
        let rows = raw
            .iter()
            .map(|row| {
                row.iter()
                    .enumerate()
                    .map(|(i, v)| Cell::from_sqlite(ValueRef::from(v), Some(columns[i].kind)))
                    .collect()
            })
            .collect();
        Ok(Output::Rows(ResultSet { columns, rows }))
    }

    /// Applies a statement's changes (autocommit), or checks and keeps them (in a
    /// transaction).
    fn commit_statement(&mut self, changes: Vec<RowChange>) -> Result<Done, ApplyError> {
        let catalog = self.shared.state.lock().catalog.clone();
        let tables = Arc::clone(&self.shared.tables);
        let applied = if self.in_transaction {
            let (mut all, before) = {
                let state = self.shared.state.lock();
                (state.transaction.clone(), state.transaction_affected)
            };
            all.extend(changes.iter().cloned());
            let mut applied = tables.apply_changes(&catalog, &all, false)?;
            let mut state = self.shared.state.lock();
            // This statement's rows: the transaction's so far came to `before`.
            state.transaction_affected = applied.affected;
            applied.affected -= before.min(applied.affected);
            for change in &changes {
                overlay(&mut state, &catalog, change);
            }
            state.transaction.extend(changes);
            applied
        } else {
            let applied = tables.apply_changes(&catalog, &changes, true)?;
            if let Some(lsn) = applied.lsn {
                let mut state = self.shared.state.lock();
                state.max_lsn = state.max_lsn.max(lsn);
            }
            applied
        };
        self.shared.state.lock().row_count = applied.affected as i64;
        let info = if applied.matched > 0 {
            format!(
                "Rows matched: {}  Changed: {}  Warnings: 0",
                applied.matched, applied.affected
            )
        } else {
            String::new()
        };
        Ok(Done {
            affected: applied.affected,
            last_insert_id: 0,
            info,
        })
    }

    fn apply_error(&mut self, e: ApplyError) -> SqlError {
        match e {
            ApplyError::Duplicate {
                table,
                index,
                value,
            } => SqlError::duplicate(&value, &table, &index),
            ApplyError::Conflict => {
                // MySQL rolls the whole transaction back after a deadlock.
                self.rollback();
                SqlError::conflict()
            }
            ApplyError::NoTable(_) => SqlError::new(
                1412,
                b"HY000",
                "Table definition has changed, please retry transaction",
            ),
            ApplyError::NoMemory => SqlError::new(
                1041,
                b"HY000",
                "Out of memory; the server's memory limit (-m) holds no more keys",
            ),
            ApplyError::Other(e) => SqlError::internal(e),
        }
    }

    /// COMMIT: the transaction's changes as one batch.
    fn commit(&mut self) -> Result<(), SqlError> {
        let changes = std::mem::take(&mut self.shared.state.lock().transaction);
        self.in_transaction = false;
        let result = if changes.is_empty() {
            Ok(())
        } else {
            let catalog = self.shared.state.lock().catalog.clone();
            match self.shared.tables.apply_changes(&catalog, &changes, true) {
                Ok(applied) => {
                    if let Some(lsn) = applied.lsn {
                        let mut state = self.shared.state.lock();
                        state.max_lsn = state.max_lsn.max(lsn);
                    }
                    Ok(())
                }
                Err(e) => Err(self.apply_error(e)),
            }
        };
        self.rollback();
        result
    }

    /// ROLLBACK: forgets the transaction's changes.
    fn rollback(&mut self) {
        let mut state = self.shared.state.lock();
        state.transaction.clear();
        state.transaction_affected = 0;
        state.overlay.clear();
        state.read_cas.clear();
        drop(state);
        self.in_transaction = false;
    }

    /// Ends an open transaction as MySQL does before DDL and `SET autocommit=1`.
    fn implicit_commit(&mut self) -> Result<(), SqlError> {
        if self.in_transaction {
            self.commit()?;
        }
        Ok(())
    }

    /// Answers a statement SQLite does not run; None for one it does.
    fn local(
        &mut self,
        statement: &Statement,
        sql: &str,
        catalog: &Catalog,
    ) -> Result<Option<Output>, SqlError> {
        let done = || Ok(Some(Output::Done(Done::default())));
        match statement {
            Statement::Query(_)
            | Statement::Insert(_)
            | Statement::Update(_)
            | Statement::Delete(_) => Ok(None),
            Statement::StartTransaction { .. } => {
                self.implicit_commit()?;
                self.in_transaction = true;
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
                self.set(set)?;
                done()
            }
            Statement::ShowDatabases { show_options, .. } => Ok(Some(Output::Rows(
                show::databases(filter_of(show_options.filter_position.as_ref()).as_deref()),
            ))),
            Statement::ShowTables {
                full, show_options, ..
            } => Ok(Some(Output::Rows(show::tables(
                catalog,
                *full,
                filter_of(show_options.filter_position.as_ref()).as_deref(),
            )))),
            Statement::ShowColumns {
                full, show_options, ..
            } => {
                let name = show_options
                    .show_in
                    .as_ref()
                    .and_then(|i| i.parent_name.as_ref())
                    .map(last_part)
                    .ok_or_else(|| SqlError::syntax("SHOW COLUMNS wants FROM table"))?;
                let def = show::table(catalog, &name)?;
                Ok(Some(Output::Rows(show::columns(
                    def,
                    *full,
                    filter_of(show_options.filter_position.as_ref()).as_deref(),
                ))))
            }
            Statement::ExplainTable { table_name, .. } => {
                let def = show::table(catalog, &last_part(table_name))?;
                Ok(Some(Output::Rows(show::columns(def, false, None))))
            }
            Statement::ShowCreate { obj_name, .. } => {
                let def = show::table(catalog, &last_part(obj_name))?;
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
            Statement::CreateTable(_) => {
                self.implicit_commit()?;
                match self.shared.tables.apply_schema(sql) {
                    Ok(created) if created.is_empty() => {
                        let name = sql
                            .split_whitespace()
                            .nth(2)
                            .unwrap_or("")
                            .trim_matches('`')
                            .to_string();
                        Err(SqlError::table_exists(&name))
                    }
                    Ok(_) => done(),
                    Err(kura_tables::Error::Mismatch(m)) => Err(SqlError::table_exists(&m)),
                    Err(e) => Err(SqlError::unsupported(e)),
                }
            }
            _ => {
                let text = statement.to_string();
                let upper = text.to_ascii_uppercase();
                if upper.starts_with("SHOW INDEX") || upper.starts_with("SHOW KEYS") {
                    let words: Vec<&str> = text.split_whitespace().collect();
                    let at = words.iter().position(|w| {
                        w.eq_ignore_ascii_case("FROM") || w.eq_ignore_ascii_case("IN")
                    });
                    let name = at.and_then(|i| words.get(i + 1)).copied().unwrap_or("");
                    let name = name.rsplit('.').next().unwrap_or(name).trim_matches('`');
                    let def = show::table(catalog, name)?;
                    return Ok(Some(Output::Rows(show::index(def))));
                }
                Err(SqlError::unsupported(text))
            }
        }
    }

    fn set(&mut self, set: &sqlparser::ast::Set) -> Result<(), SqlError> {
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
            // SET NAMES, SET TRANSACTION and the like: Kura speaks utf8mb4 and has one
            // isolation level; accepted as MySQL accepts them.
            _ => Ok(()),
        }
    }

    fn assign(&mut self, name: &str, value: Option<&sqlparser::ast::Expr>) -> Result<(), SqlError> {
        let name = name.trim_start_matches("@@").to_ascii_lowercase();
        let name = name
            .strip_prefix("session.")
            .or_else(|| name.strip_prefix("global."))
            .unwrap_or(&name)
            .to_string();
        if name.starts_with('@') {
            // User variables are not kept.
            return Err(SqlError::unsupported("user variables"));
        }
        let text = value
            .map(|v| v.to_string())
            .unwrap_or_default()
            .trim_matches('\'')
            .to_string();
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
        let literal = if text.parse::<f64>().is_ok() {
            Literal::Number(text)
        } else {
            Literal::Text(text)
        };
        self.variables.insert(name, literal);
        Ok(())
    }

    /// EXPLAIN of a SELECT: MySQL's columns, from SQLite's query plan.
    fn explain(&mut self, statement: &Statement, _sql: &str) -> Result<Output, SqlError> {
        let inner = statement.to_string();
        let translated = {
            let vars = |n: &str| self.variable(n);
            let catalog = self.shared.state.lock().catalog.clone();
            translate(statement.clone(), &inner, &vars, &|t| defaults(&catalog, t))?
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
                    let index = rest.split(':').next().unwrap_or("");
                    let index = index.split_once('/').map_or(index, |(_, n)| n);
                    match num {
                        "1" | "2" if rest.ends_with(":in") => ("range", Some(index.to_string())),
                        "1" | "2" => ("const", Some(index.to_string())),
                        "3" => ("range", Some(index.to_string())),
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

/// The columns of table `name` that have a DEFAULT, with it.
fn defaults(catalog: &Catalog, name: &str) -> Vec<(String, Literal)> {
    let Some(t) = catalog.table(name) else {
        return Vec::new();
    };
    catalog.tables[t]
        .table
        .columns
        .iter()
        .filter_map(|c| {
            let literal = match c.default.as_ref()? {
                kura_tables::Value::Null => Literal::Null,
                kura_tables::Value::Int(n) => Literal::Number(n.to_string()),
                kura_tables::Value::UInt(n) => Literal::Number(n.to_string()),
                kura_tables::Value::Double(f) => Literal::Number(format!("{f:e}")),
                kura_tables::Value::Bytes(b) => {
                    Literal::Text(String::from_utf8_lossy(b).into_owned())
                }
            };
            Some((c.name.clone(), literal))
        })
        .collect()
}

/// Whether the session answers `statement` itself.
fn is_local(statement: &Statement) -> bool {
    !matches!(
        statement,
        Statement::Query(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)
    )
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

/// Records a change of the open transaction in its overlay, so its reads see it.
fn overlay(state: &mut State, catalog: &Catalog, change: &RowChange) {
    let Some(def) = catalog.tables.iter().find(|d| d.number == change.table()) else {
        return;
    };
    let primary = def.table.primary;
    match change {
        RowChange::Insert {
            table,
            values,
            conflict,
        } => {
            let key = (*table, pk_key(&values[primary]));
            if *conflict == OnConflict::Ignore
                && state.overlay.get(&key).is_some_and(Option::is_some)
            {
                return;
            }
            state.overlay.insert(key, Some(values.clone()));
        }
        RowChange::Update {
            table, pk, values, ..
        } => {
            let new = pk_key(&values[primary]);
            let old = pk_key(pk);
            if old != new {
                state.overlay.insert((*table, old), None);
            }
            state.overlay.insert((*table, new), Some(values.clone()));
        }
        RowChange::Delete { table, pk, .. } => {
            state.overlay.insert((*table, pk_key(pk)), None);
        }
    }
}
