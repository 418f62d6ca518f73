//! One SQLite virtual table per Kura table: SQLite plans and runs the statement, and
//! reads and writes rows only through this module.
//!
//! Reads: `xBestIndex` offers SQLite the cheapest of Kura's ways to a row: `=` or `IN`
//! on the primary key, `=` or `IN` on a unique index, a range (`<`, `<=`, `>`, `>=`,
//! `=`, `BETWEEN`) on an ordered index or an ordered primary key (and that column's
//! ascending `ORDER BY`, which it then gives in order, so a `LIMIT` stops the read
//! early), else a scan of the whole table. The plan's `idx_str` names the index, which
//! `EXPLAIN` shows (`plan.rs`). The cursor (`cursor.rs`) reads a range's rows a group
//! at a time as SQLite asks for them, so that a `LIMIT` reads little more than it
//! shows.
//!
//! Writes: `xUpdate` turns each row SQLite inserts, updates or deletes into a
//! [`RowChange`] kept in the session's state; the session applies a statement's (or a
//! transaction's) changes as one batch when it ends. Reads see the changes of the
//! session's open transaction (its overlay), not those of the running statement, so an
//! `UPDATE` never sees the rows it wrote.
//!
//! Columns: the table's, then three hidden ones, `_flags`, `_exptime` and `_cas`: the
//! memcached item's client flags, absolute expiry time and CAS. They are read-only.
//!
//! `unsafe`: rusqlite's `VTab` and `VTabCursor` traits are unsafe to implement; what
//! they ask is that each struct is `#[repr(C)]` with SQLite's base struct first, which
//! the two structs here are. The only other unsafe code is `collate.rs`'s collations.
#![allow(unsafe_code)]

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, CStr, CString};
use std::sync::Arc;

use kura_tables::keys::{self, Position};
use kura_tables::{
    Catalog, ColumnType, OnConflict, Reads, RowChange, TableDef, Tables, Value, Via,
};
use parking_lot::Mutex;
use rusqlite::types::ValueRef;
use rusqlite::vtab::{
    sqlite3_vtab, CreateVTab, IndexConstraintOp, IndexFlags, IndexInfo, Inserts, UpdateVTab,
    Updates, VTab, VTabConnection, VTabKind,
};

use crate::convert::{to_column, to_key};
use crate::error::SqlError;
use crate::isolation::Keep;

mod cursor;
mod plan;

pub use cursor::KuraCursor;
pub(crate) use plan::{parse_plan, Bind};
use plan::{
    plan_str, RangePlan, PLAN_PK, PLAN_RANGE, PLAN_RANGE_DESC, PLAN_SCAN, PLAN_UNIQUE, SCAN_COLUMNS,
};

/// The hidden columns after a table's own.
pub const HIDDEN_COLUMNS: [&str; 3] = ["_flags", "_exptime", "_cas"];

/// What a session shares with its virtual tables.
pub struct Shared {
    pub tables: Arc<Tables>,
    pub state: Mutex<State>,
}

/// Rows read, as MySQL's `Handler_read_*` status counters count them.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadCounters {
    /// Lookups by a key: a primary key, a unique value, the start of a range.
    pub key: u64,
    /// Rows read in an index's order after the first.
    pub next: u64,
    /// Rows read by scanning a table.
    pub rnd_next: u64,
}

/// A row as the session's open transaction left it: its values, or deleted.
pub type Overlay = BTreeMap<(u32, Vec<u8>), Option<Vec<Value>>>;

/// The session's state the virtual tables read and write.
pub struct State {
    pub catalog: Arc<Catalog>,
    /// The running statement's changes, in order.
    pub statement: Vec<RowChange>,
    /// The open transaction's changes before this statement, in order.
    pub transaction: Vec<RowChange>,
    /// The rows those changes affect, find and leave unchanged, and match (MySQL's
    /// "Rows matched"), as their last check counted them.
    pub transaction_affected: (u64, u64, u64),
    /// The rows the open transaction changed, as it left them.
    pub overlay: Overlay,
    /// What an insert of the running statement does on a duplicate.
    pub conflict: OnConflict,
    /// The CAS of each row read (table, encoded primary key), for the writes' check.
    pub read_cas: HashMap<(u32, Vec<u8>), u64>,
    /// What the statement (or the open transaction) read, checked at COMMIT.
    pub read_set: Reads,
    /// Whether the open transaction made a locking read (`FOR UPDATE`, `FOR SHARE`):
    /// its COMMIT checks its reads even when it writes nothing.
    pub locking: bool,
    /// What the running statement notes of the rows it reads: nothing for a
    /// read-only statement outside a transaction, which checks nothing (a scan would
    /// hold an entry per row); see [`Keep`].
    pub keep: Keep,
    /// The first error a write of the running statement met, in MySQL's terms.
    pub error: Option<SqlError>,
    pub reads: ReadCounters,
    /// The highest LSN of a row read: a reply showing it waits until that is durable.
    pub max_lsn: u64,
    /// The LSN of the last change this session applied: a reply reporting it waits
    /// for the replicas `--min-sync-replicas` asks for.
    pub written_lsn: u64,
    /// The session's current database (None: none selected).
    pub database: Option<String>,
    /// MySQL's LAST_INSERT_ID(): the first AUTO_INCREMENT value the last statement
    /// that took one took.
    pub last_insert_id: u64,
    /// The running statement's AUTO_INCREMENT values: the first it took, and the
    /// auto column's value in the last row it inserted (what MySQL's OK packet
    /// reports when the statement took none).
    pub auto_first: Option<u64>,
    pub auto_last: Option<u64>,
    /// `sql_mode` holds NO_AUTO_VALUE_ON_ZERO: an insert of 0 stores 0.
    pub no_auto_value_on_zero: bool,
    /// Rows the last statement changed (MySQL's ROW_COUNT()).
    pub row_count: i64,
    /// Rows the last SELECT returned, or would have without its LIMIT under
    /// `SQL_CALC_FOUND_ROWS` (MySQL's FOUND_ROWS()).
    pub last_found_rows: i64,
    /// The client's `CLIENT_FOUND_ROWS`: rows found and left unchanged count as
    /// affected.
    pub found_rows: bool,
    pub connection_id: u32,
    pub user: String,
}

impl State {
    pub fn new(catalog: Arc<Catalog>) -> State {
        State {
            catalog,
            statement: Vec::new(),
            transaction: Vec::new(),
            transaction_affected: (0, 0, 0),
            overlay: Overlay::new(),
            conflict: OnConflict::Fail,
            read_cas: HashMap::new(),
            read_set: Reads::new(),
            locking: false,
            keep: Keep::All,
            error: None,
            reads: ReadCounters::default(),
            max_lsn: 0,
            written_lsn: 0,
            database: None,
            last_insert_id: 0,
            auto_first: None,
            auto_last: None,
            no_auto_value_on_zero: false,
            row_count: -1,
            last_found_rows: 0,
            found_rows: false,
            connection_id: 0,
            user: String::new(),
        }
    }

    /// Whether the open transaction changed rows of table `number`.
    fn overlays(&self, number: u32) -> bool {
        self.overlay
            .range((number, Vec::new())..)
            .next()
            .is_some_and(|((n, _), _)| *n == number)
    }
}

/// A primary key as the overlay and the CAS map key it: as its row's key holds it
/// (under the column's collation).
pub fn pk_key(def: &TableDef, pk: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    keys::encode_as(
        pk,
        def.table.primary_column().rule(),
        Position::Last,
        &mut out,
    );
    out
}

/// The `CREATE TABLE` SQLite is told a Kura table has.
pub fn declaration(def: &TableDef) -> String {
    let mut sql = String::from("CREATE TABLE x(");
    for column in &def.table.columns {
        // MySQL's own spelling: SQLite takes the affinity from it, and a result
        // column's declared type tells the client the column's MySQL type.
        let ty = column.ty;
        let name = column.name.replace('"', "\"\"");
        if ty == ColumnType::Enum {
            // Text to SQLite, ordered by its members' places (MySQL's ORDER BY).
            sql.push_str(&format!(
                "\"{name}\" {}({}) COLLATE {}",
                crate::result::ENUM_DECL,
                crate::result::enum_length(column),
                crate::collate::enum_collation(&column.members, column.rule())
            ));
        } else {
            sql.push_str(&format!("\"{name}\" {ty}"));
        }
        if ty.is_temporal() {
            sql.push_str(" COLLATE mysql_datetime");
        }
        if let Some(name) = crate::collate::sqlite_collation(column.rule()).filter(|_| ty.is_text())
        {
            sql.push_str(" COLLATE ");
            sql.push_str(name);
        }
        if let Some(default) = &column.default {
            sql.push_str(" DEFAULT ");
            sql.push_str(&literal(default));
        }
        sql.push_str(", ");
    }
    for hidden in HIDDEN_COLUMNS {
        sql.push_str(&format!("{hidden} INTEGER HIDDEN, "));
    }
    let pk = &def.table.columns[def.table.primary].name;
    sql.push_str(&format!(
        "PRIMARY KEY(\"{}\")) WITHOUT ROWID",
        pk.replace('"', "\"\"")
    ));
    sql
}

/// A value as a SQLite literal.
fn literal(v: &Value) -> String {
    match v {
        Value::Null => "NULL".to_string(),
        Value::Int(n) => n.to_string(),
        Value::UInt(n) => n.to_string(),
        Value::Double(f) => format!("{f:e}"),
        Value::Decimal(d) => d.to_string(),
        Value::Bytes(b) => format!("'{}'", String::from_utf8_lossy(b).replace('\'', "''")),
    }
}

#[repr(C)]
pub struct KuraTab {
    /// SQLite's part; must come first.
    base: sqlite3_vtab,
    shared: Arc<Shared>,
    def: TableDef,
}

impl KuraTab {
    /// The way a column is read in order, if it is.
    fn ordered_via(&self, column: usize) -> Option<(Via, &str)> {
        let table = &self.def.table;
        if column == table.primary && self.shared.tables.is_ordered(&self.def, Via::Primary) {
            return Some((Via::Primary, "PRIMARY"));
        }
        table
            .indexes
            .iter()
            .enumerate()
            .find(|(i, ix)| {
                ix.column == column && self.shared.tables.is_ordered(&self.def, Via::Index(*i))
            })
            .map(|(i, ix)| (Via::Index(i), ix.name.as_str()))
    }
}

unsafe impl<'vtab> VTab<'vtab> for KuraTab {
    type Aux = Arc<Shared>;
    type Cursor = KuraCursor<'vtab>;

    fn connect(
        _db: &mut VTabConnection,
        aux: Option<&Arc<Shared>>,
        _module: &[u8],
        _database: &[u8],
        table: &[u8],
        _args: &[&[u8]],
    ) -> rusqlite::Result<(Cow<'static, CStr>, KuraTab)> {
        let shared = aux
            .ok_or_else(|| rusqlite::Error::ModuleError("kura: no session".into()))?
            .clone();
        let name = String::from_utf8_lossy(table).into_owned();
        let def = {
            let state = shared.state.lock();
            let t = crate::names::from_sqlite(&name, state.database.as_deref())
                .ok()
                .and_then(|name| state.catalog.table(&name))
                .ok_or_else(|| rusqlite::Error::ModuleError(format!("no table {name}")))?;
            state.catalog.tables[t].clone()
        };
        let sql = CString::new(declaration(&def))
            .map_err(|_| rusqlite::Error::ModuleError("a name holds a NUL".into()))?;
        Ok((
            Cow::Owned(sql),
            KuraTab {
                base: sqlite3_vtab::default(),
                shared,
                def,
            },
        ))
    }

    fn best_index(&self, info: &mut IndexInfo) -> rusqlite::Result<bool> {
        let table = &self.def.table;
        let columns = table.columns.len() as c_int;
        // (constraint position, column, op) of every usable constraint on a table column.
        let mut usable: Vec<(usize, usize, IndexConstraintOp)> = Vec::new();
        for (i, c) in info.constraints().enumerate() {
            if c.is_usable() && c.column() >= 0 && c.column() < columns {
                usable.push((i, c.column() as usize, c.operator()));
            }
        }
        let eq_on = |column: usize| {
            usable
                .iter()
                .find(|(_, c, op)| {
                    *c == column && *op == IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_EQ
                })
                .map(|(i, ..)| *i)
        };
        // A lookup by the primary key, then by a unique index.
        let lookup = eq_on(table.primary)
            .map(|i| (PLAN_PK, "PRIMARY".to_string(), i))
            .or_else(|| {
                table.indexes.iter().enumerate().find_map(|(x, ix)| {
                    if !ix.kind.is_unique() {
                        return None;
                    }
                    eq_on(ix.column).map(|i| (PLAN_UNIQUE, format!("{x}/{}", ix.name), i))
                })
            });
        if let Some((plan, index, i)) = lookup {
            let is_in = info.is_in_constraint(i)? && info.set_in_constraint(i, true)?;
            let bind = if is_in { Bind::In } else { Bind::Eq };
            let mut usage = info.constraint_usage(i);
            usage.set_argv_index(1);
            usage.set_omit(true);
            info.set_idx_num(plan);
            info.set_idx_str(&plan_str(&index, &[bind], info.col_used()));
            info.set_estimated_cost(if plan == PLAN_PK { 1.0 } else { 2.0 });
            info.set_estimated_rows(1);
            if !is_in {
                info.set_idx_flags(IndexFlags::SQLITE_INDEX_SCAN_UNIQUE);
            }
            return Ok(true);
        }
        // A range of an ordered column, or its order alone.
        let order: Vec<(usize, bool)> = info
            .order_bys()
            .map(|o| (o.column() as usize, o.is_order_by_desc()))
            .collect();
        let mut best: Option<RangePlan> = None;
        for column in 0..table.columns.len() {
            let Some(_) = self.ordered_via(column) else {
                continue;
            };
            let mut binds: Vec<(usize, Bind)> = Vec::new();
            let mut lower = false;
            let mut upper = false;
            // A pattern's prefix is text, which orders as a text column's keys do:
            // bytes for `LIKE` (as `like()` compares), weights for the `MATCH` a
            // case-insensitive column's `LIKE` became (`crate::collate`).
            let text = table.columns[column].ty.is_text();
            let pattern_op = if table.columns[column].rule() == kura_tables::Rule::Binary {
                IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_LIKE
            } else {
                IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_MATCH
            };
            // An IN list SQLite runs as one `=` a filter, the values in its order.
            let mut has_in = false;
            // An ENUM's keys are its members' text in the collation's order, where
            // SQLite orders it by the members' places: only `=` and `IN` read it.
            let is_enum = table.columns[column].ty == ColumnType::Enum;
            for (i, c, op) in &usable {
                if *c != column {
                    continue;
                }
                if is_enum && *op != IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_EQ {
                    continue;
                }
                let bind = match op {
                    op if *op == pattern_op && text && !lower && !upper => {
                        lower = true;
                        upper = true;
                        Bind::Like
                    }
                    IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_EQ if !lower && !upper => {
                        lower = true;
                        upper = true;
                        has_in = info.is_in_constraint(*i)?;
                        Bind::Eq
                    }
                    IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_GT if !lower => {
                        lower = true;
                        Bind::Gt
                    }
                    IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_GE if !lower => {
                        lower = true;
                        Bind::Ge
                    }
                    IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_LT if !upper => {
                        upper = true;
                        Bind::Lt
                    }
                    IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_LE if !upper => {
                        upper = true;
                        Bind::Le
                    }
                    _ => continue,
                };
                binds.push((*i, bind));
            }
            // The store reads an index's keys backward as well as forward.
            let descending = !has_in && !is_enum && order.len() == 1 && order[0] == (column, true);
            let ordered = !has_in
                && !is_enum
                && (descending || (order.len() == 1 && order[0] == (column, false)));
            // An ordered index holds no NULLs: without a bound (which no NULL meets) it
            // would lose a nullable column's NULL rows.
            if binds.is_empty() && (!ordered || !table.columns[column].not_null) {
                continue;
            }
            let like = binds.iter().any(|(_, b)| *b == Bind::Like);
            let cost = match (lower, upper) {
                // A pattern's prefix may be short, or none.
                (true, true) if like => 500.0,
                (true, true) => 50.0,
                (true, false) | (false, true) => 5_000.0,
                (false, false) => 100_000.0,
            } - if ordered { 1.0 } else { 0.0 };
            if best.as_ref().is_none_or(|(c, ..)| cost < *c) {
                best = Some((cost, column, binds, ordered, descending));
            }
        }
        if let Some((cost, column, binds, ordered, descending)) = best {
            let name = self
                .ordered_via(column)
                .map(|(_, n)| n.to_string())
                .unwrap_or_default();
            // SQLite's LIMIT and OFFSET come last, so its other terms keep their
            // arguments' places (it drops them if a term of the WHERE goes unused).
            let mut binds = binds;
            for (i, c) in info.constraints().enumerate() {
                if !c.is_usable() {
                    continue;
                }
                match c.operator() {
                    IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_LIMIT => {
                        binds.push((i, Bind::Limit))
                    }
                    IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_OFFSET => {
                        binds.push((i, Bind::Offset))
                    }
                    _ => {}
                }
            }
            for (argv, (i, _)) in binds.iter().enumerate() {
                let mut usage = info.constraint_usage(*i);
                usage.set_argv_index(argv as c_int + 1);
                // SQLite checks the bound again: a bound is widened to the column's type.
                usage.set_omit(false);
            }
            let kinds: Vec<Bind> = binds.iter().map(|(_, b)| *b).collect();
            info.set_idx_num(if descending {
                PLAN_RANGE_DESC
            } else {
                PLAN_RANGE
            });
            info.set_idx_str(&plan_str(
                &format!("{column}/{name}"),
                &kinds,
                info.col_used(),
            ));
            info.set_order_by_consumed(ordered);
            info.set_estimated_cost(cost);
            info.set_estimated_rows(cost as i64);
            return Ok(true);
        }
        info.set_idx_num(PLAN_SCAN);
        // The columns the statement uses: a scan keeps only those of each row.
        info.set_idx_str(&format!("{SCAN_COLUMNS}:{:x}", info.col_used()));
        info.set_estimated_cost(1_000_000.0);
        info.set_estimated_rows(1_000_000);
        Ok(true)
    }

    fn open(&'vtab mut self) -> rusqlite::Result<KuraCursor<'vtab>> {
        Ok(KuraCursor::new(self))
    }
}

impl CreateVTab<'_> for KuraTab {
    const KIND: VTabKind = VTabKind::Default;
}

/// A module error SQLite passes back; the session reports `error` in MySQL's terms.
fn write_error(shared: &Shared, error: SqlError) -> rusqlite::Error {
    let message = error.message.clone();
    shared.state.lock().error.get_or_insert(error);
    rusqlite::Error::ModuleError(message)
}

impl KuraTab {
    /// The row SQLite passes to an insert or update (`args[2..]`) as Kura values.
    /// An insert that leaves the AUTO_INCREMENT column NULL or 0 takes its next value.
    fn new_row(
        &self,
        args: &rusqlite::types::Values<'_>,
        row: u64,
        insert: bool,
    ) -> Result<Vec<Value>, SqlError> {
        let table = &self.def.table;
        let mut values = Vec::with_capacity(table.columns.len());
        for (i, column) in table.columns.iter().enumerate() {
            let raw = args[2 + i].get_raw();
            let value = if insert && column.auto_increment {
                self.auto_value(raw, i, row)?
            } else {
                to_column(raw, column, row)?
            };
            values.push(value);
        }
        Ok(values)
    }

    /// The value an insert writes to the AUTO_INCREMENT column at `i`, given `raw`.
    fn auto_value(&self, raw: ValueRef<'_>, i: usize, row: u64) -> Result<Value, SqlError> {
        let column = &self.def.table.columns[i];
        let tables = &self.shared.tables;
        let zero_given = self.shared.state.lock().no_auto_value_on_zero;
        let generate = match raw {
            ValueRef::Null => true,
            ValueRef::Integer(0) => !zero_given,
            _ => false,
        };
        let (value, taken) = if generate {
            match tables.take_auto_value(&self.def, i) {
                Ok(Some(value)) => (value, true),
                Ok(None) => {
                    return Err(SqlError::new(
                        167,
                        b"22003",
                        format!(
                            "Out of range value for column '{}' at row {row}",
                            column.name
                        ),
                    ))
                }
                Err(e) => return Err(SqlError::internal(e)),
            }
        } else {
            let value = to_column(raw, column, row)?;
            tables.saw_auto_value(&self.def, &value);
            (value, false)
        };
        let n = match value {
            Value::Int(n) => n as u64,
            Value::UInt(n) => n,
            _ => 0,
        };
        let mut state = self.shared.state.lock();
        if taken && state.auto_first.is_none() {
            state.auto_first = Some(n);
        }
        state.auto_last = Some(n);
        Ok(value)
    }

    fn old_pk(&self, v: ValueRef<'_>) -> Result<Value, SqlError> {
        let column = &self.def.table.columns[self.def.table.primary];
        to_key(v, column).ok_or_else(|| SqlError::internal("a row's primary key did not read back"))
    }

    fn push(&self, change: RowChange) {
        self.shared.state.lock().statement.push(change);
    }

    fn cas_of(&self, pk: &Value) -> u64 {
        let state = self.shared.state.lock();
        state
            .read_cas
            .get(&(self.def.number, pk_key(&self.def, pk)))
            .copied()
            .unwrap_or(0)
    }

    fn rows_so_far(&self) -> u64 {
        self.shared.state.lock().statement.len() as u64 + 1
    }
}

impl UpdateVTab<'_> for KuraTab {
    fn delete(&mut self, arg: ValueRef<'_>) -> rusqlite::Result<()> {
        let pk = self.old_pk(arg).map_err(|e| write_error(&self.shared, e))?;
        let cas = self.cas_of(&pk);
        self.push(RowChange::Delete {
            table: self.def.number,
            pk,
            cas,
        });
        Ok(())
    }

    fn insert(&mut self, args: &Inserts<'_>) -> rusqlite::Result<i64> {
        let row = self.rows_so_far();
        let values = self
            .new_row(args, row, true)
            .map_err(|e| write_error(&self.shared, e))?;
        let conflict = self.shared.state.lock().conflict;
        self.push(RowChange::Insert {
            table: self.def.number,
            values,
            conflict,
        });
        Ok(0)
    }

    fn update(&mut self, args: &Updates<'_>) -> rusqlite::Result<()> {
        let row = self.rows_so_far();
        let pk = self
            .old_pk(args[0].get_raw())
            .map_err(|e| write_error(&self.shared, e))?;
        let values = self
            .new_row(args, row, false)
            .map_err(|e| write_error(&self.shared, e))?;
        let cas = self.cas_of(&pk);
        self.push(RowChange::Update {
            table: self.def.number,
            pk,
            cas,
            values,
        });
        Ok(())
    }
}
