//! A SQL session: one client connection's statements, its transaction and its
//! prepared statements, over an in-memory SQLite database whose tables are Kura's.
//!
//! Each statement is parsed with sqlparser (MySQL's dialect). SELECT, INSERT, REPLACE,
//! UPDATE and DELETE are translated ([`crate::translate`]) and run by SQLite over the
//! virtual tables ([`crate::vtab`]); the rest (SHOW, SET, USE, transactions, DDL) is
//! answered here.
//!
//! Writes: a statement's row changes are collected while SQLite runs it, then applied
//! as one atomic batch ([`Tables::commit_changes`]). In autocommit mode that happens at
//! once, with what the statement read: one that read a row, a range or (scanning) a
//! table another writer changed before the batch was written runs again (up to
//! [`STATEMENT_ATTEMPTS`] times). Inside a transaction
//! (`BEGIN`, or `autocommit=0`) the changes are checked against the store (a duplicate
//! fails the statement, as in MySQL) and kept; the session's reads see them; `COMMIT`
//! applies the whole transaction as one batch, or fails with MySQL's deadlock error
//! (1213) if a row it read changed meanwhile, applying nothing.
//!
//! What it is not for: the wire protocol (the server's) and memcached's commands.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kura_tables::{ApplyError, Catalog, CatalogCache, OnConflict, Tables};
use parking_lot::Mutex;
use rusqlite::vtab::Module;
use rusqlite::Connection;
use sqlparser::ast::Statement;
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

use crate::error::SqlError;
use crate::interrupt::Interrupt;
use crate::isolation::{Isolation, Keep};
use crate::processlist::Processes;
use crate::result::{ColumnInfo, Done, Kind, Output, ResultSet};
use crate::shape::{shape, Shape, Shapes, SHAPES_KEPT};
use crate::show::{self, default_variables};
use crate::stream::{self, RowSink, Whole, BATCH_ROWS, STREAM_AFTER_ROWS};
use crate::translate::{translate, Literal, Translated, DATABASE};
use crate::upsert::Upsert;
use crate::vtab::{KuraTab, Shared, State};

/// The virtual-table module: SQLite keeps a pointer to it for the connection's life.
const KURA_MODULE: Module<'static, KuraTab> = Module::<KuraTab>::update_module();

/// Turns off SQLite's count of the memory it holds, once, before the first connection
/// opens (after that SQLite refuses the setting). The count takes one mutex around
/// every allocation of every connection, and the sessions' threads queued on it:
/// under sixteen sysbench connections most of the server's futex calls were there.
/// Kura reads no SQLite memory figure (no `sqlite3_memory_used`, no heap limit).
#[allow(unsafe_code)]
fn configure_sqlite() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: called before SQLite is initialised by this process's first
        // connection (the `Once` orders it before every `Session::new`); if something
        // else initialised it first, SQLite answers SQLITE_MISUSE and changes nothing.
        unsafe {
            rusqlite::ffi::sqlite3_config(rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS, 0);
        }
    });
}

/// The longest statement text kept compiled in the session's cache.
pub(crate) const KEEP_COMPILED_BYTES: usize = 4096;

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
    /// Its `MAX_EXECUTION_TIME` hint, in milliseconds.
    hint_ms: Option<u64>,
}

#[derive(Debug, Clone)]
enum Plan {
    Sqlite(Translated),
    /// Answered by the session: the statement's text, parsed again on execute.
    Local(String),
}

pub struct Session {
    pub(crate) shared: Arc<Shared>,
    pub(crate) db: Connection,
    catalog_cache: CatalogCache,
    /// The catalog the virtual tables were declared from, and the database that was
    /// current then (its tables are declared by their own names).
    declared: Option<(Arc<Catalog>, Option<String>)>,
    pub(crate) variables: BTreeMap<String, Literal>,
    /// User variables (`@name`, by their names in lower case); an unset one is NULL.
    pub(crate) user_variables: HashMap<String, Literal>,
    /// The last statement's error, for SHOW WARNINGS and SHOW ERRORS.
    pub(crate) last_error: Option<(u16, String)>,
    pub(crate) autocommit: bool,
    /// Whether a transaction is open (explicitly, or implicitly with autocommit off).
    pub(crate) in_transaction: bool,
    /// The session's isolation level (`transaction_isolation`), the next
    /// transaction's if `SET TRANSACTION ISOLATION LEVEL` named one, and the open
    /// transaction's.
    pub(crate) isolation: Isolation,
    pub(crate) next_isolation: Option<Isolation>,
    transaction_isolation: Isolation,
    /// The ON DUPLICATE KEY UPDATE rules of the running statement or open transaction,
    /// by their number in [`OnConflict::Update`].
    pub(crate) upserts: Vec<Upsert>,
    prepared: HashMap<u32, Prepared>,
    next_statement: u32,
    /// The translations of the statements' shapes met so far.
    shapes: Shapes,
    /// Stops the running statement ([`crate::interrupt`]).
    pub(crate) interrupt: Arc<Interrupt>,
    /// The server's connections, for SHOW PROCESSLIST and KILL.
    pub(crate) processes: Option<Arc<dyn Processes>>,
    /// The running statement's `MAX_EXECUTION_TIME` hint, in milliseconds.
    pub(crate) hint_ms: Option<u64>,
}

pub(crate) fn sqlite_error(e: rusqlite::Error) -> SqlError {
    sqlite_error_in(e, Some(DATABASE))
}

/// [`sqlite_error`] in a session whose current database is `database`: a table SQLite
/// does not know is named in it (1046 when there is none).
pub(crate) fn sqlite_error_in(e: rusqlite::Error, database: Option<&str>) -> SqlError {
    let message = e.to_string();
    if let Some(table) = message.strip_prefix("no such table: ") {
        return match crate::names::from_sqlite(table, database) {
            Ok(name) => crate::names::no_table(&name),
            Err(e) => e,
        };
    }
    if let Some(column) = message.strip_prefix("no such column: ") {
        return SqlError::no_column(column, "field list");
    }
    if message.contains("syntax error") || message.contains("incomplete input") {
        return SqlError::syntax(message);
    }
    // SQLite's "table t has 3 columns but 4 values were supplied" and "4 values for 3
    // columns".
    if message.contains("values were supplied") || message.contains(" values for ") {
        return SqlError::new(
            1136,
            b"21S01",
            "Column count doesn't match value count at row 1",
        );
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
        configure_sqlite();
        let db = Connection::open_in_memory().map_err(sqlite_error)?;
        crate::information_schema::attach(&db).map_err(sqlite_error)?;
        db.create_module("kura", &KURA_MODULE, Some(Arc::clone(&shared)))
            .map_err(sqlite_error)?;
        // Text compares as bytes (utf8mb4_bin), in LIKE too: SQLite's with an ESCAPE,
        // and MySQL's (whose escape is a backslash) without, which must come after the
        // pragma, as the pragma defines like() again.
        db.pragma_update(None, "case_sensitive_like", true)
            .map_err(sqlite_error)?;
        crate::like::register(&db).map_err(sqlite_error)?;
        crate::collate::register(&db).map_err(sqlite_error)?;
        let mut session = Session {
            shared,
            db,
            catalog_cache: None,
            declared: None,
            variables: default_variables(),
            user_variables: HashMap::new(),
            last_error: None,
            autocommit: true,
            in_transaction: false,
            isolation: Isolation::default(),
            next_isolation: None,
            transaction_isolation: Isolation::default(),
            upserts: Vec::new(),
            prepared: HashMap::new(),
            next_statement: 1,
            shapes: Shapes::default(),
            interrupt: Interrupt::new(),
            processes: None,
            hint_ms: None,
        };
        session.set_interrupt(Interrupt::new())?;
        // Room for every kept shape's compiled statement, and the others'.
        session
            .db
            .set_prepared_statement_cache_capacity(SHAPES_KEPT + 16);
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
        crate::sum::register(&self.db).map_err(sqlite_error)?;
        crate::functions::register(&self.db).map_err(sqlite_error)?;
        crate::dates::register(&self.db).map_err(sqlite_error)?;
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
        let shared = Arc::clone(&self.shared);
        self.db
            .create_scalar_function("found_rows", 0, flags, move |_| {
                Ok(shared.state.lock().last_found_rows)
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

    /// Opens a transaction, at the level `SET TRANSACTION` named for it or the
    /// session's.
    pub(crate) fn begin(&mut self) {
        self.in_transaction = true;
        self.transaction_isolation = self.next_isolation.take().unwrap_or(self.isolation);
    }

    /// MySQL's server status flags for this session: in a transaction, autocommit.
    pub fn status(&self) -> (bool, bool) {
        (self.in_transaction, self.autocommit)
    }

    /// The LSN a reply must wait for: the highest of the rows shown since the last
    /// reply that waited. Inside a transaction, none: what its statements show waits
    /// for its end, and no COMMIT (or ROLLBACK) is answered before every row the
    /// transaction read is durable.
    pub fn take_read_lsn(&self) -> u64 {
        if self.in_transaction {
            return 0;
        }
        std::mem::take(&mut self.shared.state.lock().max_lsn)
    }

    /// The LSN rows streamed now must wait for: as [`Session::take_read_lsn`], kept
    /// for the statement's reply.
    fn shown_lsn(&self) -> u64 {
        if self.in_transaction {
            return 0;
        }
        self.shared.state.lock().max_lsn
    }

    /// The LSN of the newest change the last statement applied (0: none).
    pub fn take_written_lsn(&self) -> u64 {
        std::mem::take(&mut self.shared.state.lock().written_lsn)
    }

    /// How many rows' CAS the session keeps for its writes' check (its read set).
    pub fn read_set_len(&self) -> usize {
        self.shared.state.lock().read_cas.len()
    }

    /// The user the session runs as.
    pub fn user(&self) -> String {
        self.shared.state.lock().user.clone()
    }

    /// The columns of table `name` (COM_FIELD_LIST), or MySQL's 1146.
    pub fn table_columns(&mut self, name: &str) -> Result<Vec<ColumnInfo>, SqlError> {
        let catalog = self.sync_catalog()?;
        let name = crate::names::from_sqlite(name, self.database().as_deref())?;
        Ok(show::table_columns(show::table(&catalog, &name)?))
    }

    /// COM_INIT_DB and USE.
    pub fn use_database(&mut self, name: &str) -> Result<(), SqlError> {
        let name = crate::names::database(name);
        if !self.sync_catalog()?.has_database(name) {
            return Err(SqlError::no_database(name));
        }
        self.shared.state.lock().database = Some(name.to_string());
        Ok(())
    }

    /// The session's current database (None: none, after its DROP DATABASE).
    pub fn database(&self) -> Option<String> {
        self.shared.state.lock().database.clone()
    }

    /// Declares the catalog's tables to SQLite again if it or the current database
    /// changed: the current database's by their own names, the others' as
    /// `database.table` ([`crate::names`]).
    pub(crate) fn sync_catalog(&mut self) -> Result<Arc<Catalog>, SqlError> {
        let catalog = Arc::clone(self.shared.tables.catalog_cached(&mut self.catalog_cache));
        let current = self.database();
        if self
            .declared
            .as_ref()
            .is_some_and(|(d, db)| Arc::ptr_eq(d, &catalog) && *db == current)
        {
            return Ok(catalog);
        }
        let quoted = |name: String| name.replace('"', "\"\"");
        // information_schema depends on the catalog alone, not on the database in use.
        let catalog_changed = self
            .declared
            .as_ref()
            .is_none_or(|(d, _)| !Arc::ptr_eq(d, &catalog));
        if let Some((old, db)) = self.declared.take() {
            for def in &old.tables {
                let name = crate::names::sqlite_name(&def.table.name, db.as_deref());
                self.db
                    .execute_batch(&format!("DROP TABLE IF EXISTS \"{}\"", quoted(name)))
                    .map_err(sqlite_error)?;
            }
        }
        self.shared.state.lock().catalog = Arc::clone(&catalog);
        for def in &catalog.tables {
            let name = crate::names::sqlite_name(&def.table.name, current.as_deref());
            self.db
                .execute_batch(&format!(
                    "CREATE VIRTUAL TABLE \"{}\" USING kura",
                    quoted(name)
                ))
                .map_err(sqlite_error)?;
        }
        if catalog_changed {
            crate::information_schema::fill(&self.db, &catalog).map_err(sqlite_error)?;
        }
        self.db.flush_prepared_statement_cache();
        self.shapes.clear();
        self.declared = Some((Arc::clone(&catalog), current));
        Ok(catalog)
    }

    fn parse(sql: &str) -> Result<Statement, SqlError> {
        let sql = crate::translate::share_mode(sql);
        let mut statements = Parser::parse_sql(&MySqlDialect {}, &sql).map_err(|e| {
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

    /// A system variable's value by its name in lower case, or a user variable's by
    /// `@name` (NULL when unset, as in MySQL).
    pub(crate) fn variable(&self, name: &str) -> Option<Literal> {
        if let Some(user) = name.strip_prefix('@') {
            return Some(
                self.user_variables
                    .get(user)
                    .cloned()
                    .unwrap_or(Literal::Null),
            );
        }
        if name == "autocommit" {
            return Some(Literal::Number(
                if self.autocommit { "1" } else { "0" }.into(),
            ));
        }
        self.variables.get(name).cloned()
    }

    /// Runs one statement of text (COM_QUERY). A statement whose shape was met before
    /// ([`crate::shape`]) runs its kept translation with its values as parameters,
    /// without being parsed.
    pub fn query(&mut self, sql: &str) -> Result<Output, SqlError> {
        self.query_to(sql, &mut Whole)
    }

    /// [`Session::query`], handing a long result's rows to `sink` as they come
    /// ([`crate::stream`]).
    pub fn query_to(&mut self, sql: &str, sink: &mut dyn RowSink) -> Result<Output, SqlError> {
        let result = self.statement_to(sql, sink);
        // What SHOW WARNINGS shows: the last statement's error (SHOW WARNINGS and
        // SHOW ERRORS leave it).
        let diagnostics = crate::show_server::starts_with_word(sql, "SHOW") && {
            let upper = sql
                .trim_start()
                .get(..40)
                .unwrap_or(sql)
                .to_ascii_uppercase();
            upper.contains("WARNINGS") || upper.contains("ERRORS")
        };
        if !diagnostics {
            self.last_error = result.as_ref().err().map(|e| (e.code, e.message.clone()));
        }
        result
    }

    fn statement_to(&mut self, sql: &str, sink: &mut dyn RowSink) -> Result<Output, SqlError> {
        if let Some(sql) = crate::translate::without_calc_found_rows(sql) {
            // Rare: translated each time, with the count of its rows without LIMIT.
            let catalog = self.sync_catalog()?;
            let statement = Self::parse(&sql)?;
            let mut translated = {
                let vars = |n: &str| self.variable(n);
                translate(statement, &sql, &vars, &catalog, self.database().as_deref())?
            };
            translated.count_sql = crate::translate::count_without_limit(&translated.sql);
            return self.run(&translated, &[], sink);
        }
        let sql = crate::translate::without_cache_hints(sql);
        let sql = &*crate::translate::drop_key_as_index(&sql);
        let catalog = self.sync_catalog()?;
        if let Some(answer) = self.show_server(sql, &catalog) {
            return answer;
        }
        self.hint_ms = crate::interrupt::hint_ms(sql);
        if let Some(shape) = shape(sql) {
            if let Some(t) = self.shaped(&shape, &catalog) {
                return self.run(&t, &shape.params, sink);
            }
        }
        if let Some(done) = self.keys_switch(sql, &catalog) {
            return done;
        }
        let statement = Self::parse(sql)?;
        match self.local(&statement, sql, &catalog)? {
            Some(output) => Ok(output),
            None => {
                let translated = {
                    let vars = |n: &str| self.variable(n);
                    translate(statement, sql, &vars, &catalog, self.database().as_deref())?
                };
                self.run(&translated, &[], sink)
            }
        }
    }

    /// The kept translation of a shape, made the first time the shape is met; None for
    /// a shape that runs as written.
    fn shaped(&mut self, shape: &Shape, catalog: &Catalog) -> Option<Arc<Translated>> {
        if let Some(known) = self.shapes.get(&shape.text) {
            return known;
        }
        let plan = self
            .plan_shape(&shape.text, shape.params.len(), catalog)
            .map(Arc::new);
        self.shapes.insert(shape.text.clone(), plan.clone());
        plan
    }

    /// Parses, translates and compiles a shape. None when any of that fails (the
    /// statement as written then gives the error), for what the session answers
    /// itself, and for an upsert (whose assignments are parameters of their own).
    fn plan_shape(&mut self, text: &str, params: usize, catalog: &Catalog) -> Option<Translated> {
        let statement = Self::parse(text).ok()?;
        if is_local(&statement) {
            return None;
        }
        let translated = {
            let vars = |n: &str| self.variable(n);
            translate(statement, text, &vars, catalog, self.database().as_deref()).ok()?
        };
        if translated.upsert.is_some() {
            return None;
        }
        // Every value must still be there, as it was numbered.
        let stmt = self.db.prepare_cached(&translated.sql).ok()?;
        let whole = stmt.parameter_count() == params
            && (1..=params).all(|n| {
                stmt.parameter_index(&format!("?{n}"))
                    .is_ok_and(|i| i == Some(n))
            });
        whole.then_some(translated)
    }

    /// COM_STMT_PREPARE.
    pub fn prepare(&mut self, sql: &str) -> Result<Prepared, SqlError> {
        let catalog = self.sync_catalog()?;
        let statement = Self::parse(sql)?;
        let id = self.next_statement;
        let prepared = if is_local(&statement) {
            // A statement that only shows something is run to learn its columns;
            // one that changes something (SET, BEGIN, DDL) runs on execute alone.
            let shows = matches!(
                statement,
                Statement::ShowDatabases { .. }
                    | Statement::ShowTables { .. }
                    | Statement::ShowColumns { .. }
                    | Statement::ShowCreate { .. }
                    | Statement::ShowVariables { .. }
                    | Statement::ShowStatus { .. }
                    | Statement::ExplainTable { .. }
                    | Statement::Explain { .. }
            );
            let columns = match shows.then(|| self.local(&statement, sql, &catalog)) {
                Some(Ok(Some(Output::Rows(rs)))) => rs.columns,
                _ => Vec::new(),
            };
            Prepared {
                id,
                params: 0,
                columns,
                plan: Plan::Local(sql.to_string()),
                hint_ms: None,
            }
        } else {
            let translated = {
                let vars = |n: &str| self.variable(n);
                translate(statement, sql, &vars, &catalog, self.database().as_deref())?
            };
            let database = self.database();
            let stmt = self
                .db
                .prepare(&translated.sql)
                .map_err(|e| sqlite_error_in(e, database.as_deref()))?;
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
                hint_ms: crate::interrupt::hint_ms(sql),
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
        self.execute_to(id, params, &mut Whole)
    }

    /// [`Session::execute`], handing a long result's rows to `sink` as they come.
    pub fn execute_to(
        &mut self,
        id: u32,
        params: &[Param],
        sink: &mut dyn RowSink,
    ) -> Result<Output, SqlError> {
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
            Plan::Sqlite(t) => {
                self.hint_ms = prepared.hint_ms;
                self.run(t, params, sink)
            }
            Plan::Local(sql) => self.query_to(sql, sink),
        }
    }

    /// COM_STMT_CLOSE.
    pub fn close(&mut self, id: u32) {
        self.prepared.remove(&id);
    }

    /// Runs a translated statement in SQLite, and applies what it wrote.
    fn run(
        &mut self,
        t: &Translated,
        params: &[Param],
        sink: &mut dyn RowSink,
    ) -> Result<Output, SqlError> {
        // With autocommit off a transaction starts at any statement, a read too.
        if !self.autocommit && !self.in_transaction {
            self.begin();
        }
        if t.locking && self.in_transaction {
            self.shared.state.lock().locking = true;
        }
        let conflict = match &t.upsert {
            Some(upsert) => {
                self.upserts.push(upsert.clone());
                OnConflict::Update(self.upserts.len() as u32 - 1)
            }
            None => t.conflict,
        };
        // max_execution_time bounds a SELECT only, as in MySQL.
        let limit = if t.writes { None } else { self.time_limit() };
        self.interrupt.begin(limit);
        let result = self
            .attempts(t, params, conflict, sink)
            .map_err(|e| self.interrupt.explain(e));
        self.interrupt.end();
        if !self.in_transaction {
            self.upserts.clear();
        }
        result
    }

    /// Runs a statement until it is not refused for a row that changed under it.
    fn attempts(
        &mut self,
        t: &Translated,
        params: &[Param],
        conflict: OnConflict,
        sink: &mut dyn RowSink,
    ) -> Result<Output, SqlError> {
        for _ in 0..STATEMENT_ATTEMPTS {
            {
                let mut state = self.shared.state.lock();
                state.statement.clear();
                state.error = None;
                state.auto_first = None;
                state.auto_last = None;
                state.conflict = conflict;
                // What COMMIT will check: what a writing statement or a locking read
                // read, and a plain SELECT's rows as the level says
                // ([`crate::isolation`]).
                state.keep = if t.writes
                    || (self.in_transaction
                        && (t.locking || self.transaction_isolation.checks_plain_reads()))
                {
                    Keep::All
                } else if self.in_transaction {
                    Keep::Cas
                } else {
                    Keep::Nothing
                };
                if !self.in_transaction {
                    // New maps: cleared ones would keep a big statement's room.
                    state.read_cas = HashMap::new();
                    state.read_set = kura_tables::Reads::new();
                }
            }
            let result = self.step(t, params, sink);
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
                // A DDL statement changed a table meanwhile: plan it again.
                Err(ApplyError::NoTable(_)) if !self.in_transaction => {
                    self.sync_catalog()?;
                    continue;
                }
                Err(e) => return Err(self.apply_error(e)),
            }
        }
        Err(SqlError::conflict())
    }

    /// SQLite's part of a statement: its rows, or nothing for a write.
    fn step(
        &mut self,
        t: &Translated,
        params: &[Param],
        sink: &mut dyn RowSink,
    ) -> Result<Output, SqlError> {
        let database = self.database();
        let mut stmt = self
            .db
            .prepare_cached(&t.sql)
            .map_err(|e| sqlite_error_in(e, database.as_deref()))?;
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
            let executed = stmt.raw_execute().map_err(sqlite_error);
            // A statement is kept compiled for the next of its text; a long one (a
            // many-row INSERT) would hold megabytes outside `-m` for nothing.
            if t.sql.len() > KEEP_COMPILED_BYTES {
                stmt.discard();
            }
            executed?;
            return Ok(Output::Done(Done::default()));
        }
        let mut columns: Vec<ColumnInfo> = stmt
            .columns()
            .enumerate()
            .map(|(i, c)| {
                let mut info = ColumnInfo::new(c.name(), Kind::Null);
                let computed = t.kinds.get(i).copied().flatten();
                if let Some(kind) = c.decl_type().and_then(Kind::from_decl).or(computed) {
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
        let mut streaming = false;
        let mut produced: i64 = 0;
        let mut rows = stmt.raw_query();
        while let Some(row) = rows.next().map_err(sqlite_error)? {
            produced += 1;
            let mut values = Vec::with_capacity(count);
            for i in 0..count {
                values.push(
                    rusqlite::types::Value::try_from(row.get_ref(i).map_err(sqlite_error)?)
                        .map_err(SqlError::internal)?,
                );
            }
            raw.push(values);
            if !streaming && raw.len() >= STREAM_AFTER_ROWS && sink.streams() {
                stream::infer_kinds(&mut columns, &declared, &raw);
                sink.columns(&columns)?;
                streaming = true;
            }
            if streaming && raw.len() >= BATCH_ROWS {
                sink.rows(&stream::cells(&columns, raw.drain(..)), self.shown_lsn())?;
            }
        }
        drop(rows);
        if t.sql.len() > KEEP_COMPILED_BYTES {
            stmt.discard();
        } else {
            drop(stmt);
        }
        // FOUND_ROWS(): what this SELECT returned, or with SQL_CALC_FOUND_ROWS what
        // it would have without its LIMIT.
        let found = match &t.count_sql {
            Some(count) => self
                .db
                .query_row(count, [], |r| r.get::<_, i64>(0))
                .map_err(sqlite_error)?,
            None => produced,
        };
        self.shared.state.lock().last_found_rows = found;
        if streaming {
            let lsn = self.shown_lsn();
            sink.rows(&stream::cells(&columns, raw.into_iter()), lsn)?;
            return Ok(Output::Streamed);
        }
        // A column SQLite computed takes the type of its values.
        stream::infer_kinds(&mut columns, &declared, &raw);
        let rows = stream::cells(&columns, raw.into_iter());
        Ok(Output::Rows(ResultSet { columns, rows }))
    }
}

/// Whether the session answers `statement` itself.
pub(crate) fn is_local(statement: &Statement) -> bool {
    !matches!(
        statement,
        Statement::Query(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)
    )
}
