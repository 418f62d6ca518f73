//! One SQLite virtual table per Kura table: SQLite plans and runs the statement, and
//! reads and writes rows only through this module.
//!
//! Reads: `xBestIndex` offers SQLite the cheapest of Kura's ways to a row: `=` or `IN`
//! on the primary key, `=` or `IN` on a unique index, a range (`<`, `<=`, `>`, `>=`,
//! `=`, `BETWEEN`) on an ordered index or an ordered primary key (and that column's
//! ascending `ORDER BY`, which it then gives in order, so a `LIMIT` stops the read
//! early), else a scan of the whole table. The plan's `idx_str` names the index, which
//! `EXPLAIN` shows. Rows of a range are read one at a time as SQLite asks.
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
//! the two structs here are. No other unsafe code.
#![allow(unsafe_code)]

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::{c_int, CStr, CString};
use std::ops::Bound;
use std::sync::Arc;

use kura_tables::keys::{self, Position};
use kura_tables::ordered::{Range, RangeCheck};
use kura_tables::{
    Catalog, ColumnType, OnConflict, PkCursor, Reads, RowChange, RowRead, RowScan, TableDef,
    Tables, Value, Via,
};
use parking_lot::Mutex;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::vtab::{
    sqlite3_vtab, sqlite3_vtab_cursor, Context, CreateVTab, Filters, IndexConstraintOp, IndexFlags,
    IndexInfo, Inserts, UpdateVTab, Updates, VTab, VTabConnection, VTabCursor, VTabKind,
};

use crate::convert::{to_bound, to_column, to_key};
use crate::error::SqlError;
use crate::isolation::Keep;
use crate::like;

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
    pub last_insert_id: u64,
    /// Rows the last statement changed (MySQL's ROW_COUNT()).
    pub row_count: i64,
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
            row_count: -1,
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

/// A primary key as the overlay and the CAS map key it.
pub fn pk_key(pk: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    keys::encode(pk, Position::Last, &mut out);
    out
}

/// The `CREATE TABLE` SQLite is told a Kura table has.
pub fn declaration(def: &TableDef) -> String {
    let mut sql = String::from("CREATE TABLE x(");
    for column in &def.table.columns {
        // MySQL's own spelling: SQLite takes the affinity from it, and a result
        // column's declared type tells the client the column's MySQL type.
        let ty = column.ty;
        sql.push_str(&format!("\"{}\" {ty}", column.name.replace('"', "\"\"")));
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

/// How a cursor finds its rows (`idx_num`).
const PLAN_SCAN: c_int = 0;
const PLAN_PK: c_int = 1;
const PLAN_UNIQUE: c_int = 2;
const PLAN_RANGE: c_int = 3;
/// A range of the primary key in descending order.
const PLAN_RANGE_DESC: c_int = 4;

/// A scan plan's `idx_str`: this, then SQLite's mask of the columns used, in hex.
const SCAN_COLUMNS: &str = "cols";

/// How many rows of a range whose keys were read whole are read from the store at a
/// time: enough for their lookups' cache misses to overlap.
const TOGETHER: usize = 16;

/// Constraint kinds a plan's arguments stand for, in `idx_str`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bind {
    Eq,
    In,
    Gt,
    Ge,
    Lt,
    Le,
    /// A `LIKE` pattern: the range its literal prefix allows.
    Like,
}

impl Bind {
    fn code(self) -> &'static str {
        match self {
            Bind::Eq => "eq",
            Bind::In => "in",
            Bind::Gt => "gt",
            Bind::Ge => "ge",
            Bind::Lt => "lt",
            Bind::Le => "le",
            Bind::Like => "like",
        }
    }

    fn parse(code: &str) -> Option<Bind> {
        Some(match code {
            "eq" => Bind::Eq,
            "in" => Bind::In,
            "gt" => Bind::Gt,
            "ge" => Bind::Ge,
            "lt" => Bind::Lt,
            "le" => Bind::Le,
            "like" => Bind::Like,
            _ => return None,
        })
    }
}

/// A range plan under consideration: its cost, the column, the constraints it binds
/// (constraint position, kind), whether it gives the ORDER BY's order, and whether
/// that order is descending.
type RangePlan = (f64, usize, Vec<(usize, Bind)>, bool, bool);

/// A plan's `idx_str`: the index's name (`PRIMARY` for the primary key), then the
/// argument kinds: `email:eq`, `level:ge,le`.
/// A lookup's or a range's plan for [`KuraCursor::start`]: the index, how the
/// arguments bind, and the columns the statement uses (SQLite's mask: bit 63 stands
/// for every column from the 64th on).
fn plan_str(index: &str, binds: &[Bind], used: u64) -> String {
    let codes: Vec<&str> = binds.iter().map(|b| b.code()).collect();
    format!("{index}:{}:{used:x}", codes.join(","))
}

/// [`plan_str`]'s parts; from the right, as an index's name may hold a colon.
pub(crate) fn parse_plan(plan: &str) -> Option<(&str, Vec<Bind>, u64)> {
    let (rest, used) = plan.rsplit_once(':')?;
    let (index, codes) = rest.rsplit_once(':')?;
    let binds = codes.split(',').filter_map(Bind::parse).collect();
    Some((index, binds, u64::from_str_radix(used, 16).ok()?))
}

/// Whether SQLite's mask `used` holds column `i`.
fn uses(used: u64, i: usize) -> bool {
    i >= 63 || used & (1 << i) != 0
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
            let t = state
                .catalog
                .table(&name)
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
            // A pattern's prefix is text, which orders as a text column's keys do.
            let text = matches!(
                table.columns[column].ty,
                ColumnType::Varchar(_) | ColumnType::Char(_) | ColumnType::Text
            );
            // An IN list SQLite runs as one `=` a filter, the values in its order.
            let mut has_in = false;
            for (i, c, op) in &usable {
                if *c != column {
                    continue;
                }
                let bind = match op {
                    IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_LIKE if text && !lower && !upper => {
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
            let descending = !has_in && order.len() == 1 && order[0] == (column, true);
            let ordered =
                !has_in && (descending || (order.len() == 1 && order[0] == (column, false)));
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
        Ok(KuraCursor {
            base: sqlite3_vtab_cursor::default(),
            tab: self,
            rows: VecDeque::new(),
            pks: VecDeque::new(),
            range: None,
            unseen: 0,
            used: u64::MAX,
            group: 1,
            pk_stream: None,
            scan: None,
            current: None,
        })
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
    fn new_row(
        &self,
        args: &rusqlite::types::Values<'_>,
        row: u64,
    ) -> Result<Vec<Value>, SqlError> {
        let table = &self.def.table;
        let mut values = Vec::with_capacity(table.columns.len());
        for (i, column) in table.columns.iter().enumerate() {
            values.push(to_column(args[2 + i].get_raw(), column, row)?);
        }
        Ok(values)
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
            .get(&(self.def.number, pk_key(pk)))
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
            .new_row(args, row)
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
            .new_row(args, row)
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

#[repr(C)]
pub struct KuraCursor<'vtab> {
    /// SQLite's part; must come first.
    base: sqlite3_vtab_cursor,
    tab: &'vtab KuraTab,
    /// Rows found and not yet shown.
    rows: VecDeque<RowRead>,
    /// Primary keys (encoded) of a range's rows not yet read, in order, each with the
    /// value its index entry holds if that is still to be checked against the row.
    pks: VecDeque<(Vec<u8>, Option<Value>)>,
    /// The range the keys were found in: a row read later must still be in it.
    range: Option<(usize, RangeCheck)>,
    /// How many of `rows` (the first ones) a range read and [`KuraCursor::seen`] is
    /// still to note, as each is shown: a range's rows are read a batch at a time, and
    /// a `LIMIT` may stop before the last.
    unseen: usize,
    /// The columns a range's rows are decoded with (SQLite's mask, see [`uses`]): those
    /// the statement uses, the primary key and the range's column; the others are
    /// NULL.
    used: u64,
    /// How many rows the next group of a range's first batch is (see
    /// [`KuraCursor::read_range_row`]).
    group: usize,
    /// A range's keys still to read from the store, a batch at a time, and how many
    /// batches it gave.
    pk_stream: Option<(PkCursor, usize)>,
    /// A scan's rows still to read, a batch at a time.
    scan: Option<Scan>,
    current: Option<RowRead>,
}

impl KuraCursor<'_> {
    fn def(&self) -> &TableDef {
        &self.tab.def
    }

    fn tables(&self) -> &Tables {
        &self.tab.shared.tables
    }

    /// Notes a row read by key or in a range: its CAS, for a write of the statement,
    /// and in the read set (for `Keep::Cas` only there, checked only if the
    /// transaction writes the row). Nothing for a statement that
    /// keeps no reads. (A scan's rows are not noted: the batch checks the scanned
    /// table whole.)
    fn seen(&self, row: &RowRead) {
        let mut state = self.tab.shared.state.lock();
        state.max_lsn = state.max_lsn.max(row.lsn);
        if state.keep == Keep::Nothing {
            return;
        }
        let Some(pk) = row.values.get(self.def().table.primary) else {
            return;
        };
        let pk = pk_key(pk);
        if state.keep == Keep::Cas {
            // A later write reads the row again, as its statement's own read.
            state.read_set.row_if_written(self.def(), &pk, row.cas);
            return;
        }
        state.read_set.row(self.def(), &pk, Some(row.cas));
        state.read_cas.insert((self.def().number, pk), row.cas);
    }

    /// Rows looked up by exact values of `column` (the primary key's, or unique index
    /// `unique`'s), through the transaction's overlay.
    fn lookup(
        &mut self,
        column: usize,
        unique: Option<usize>,
        keys: Vec<Value>,
    ) -> rusqlite::Result<()> {
        let number = self.def().number;
        let mut out = Vec::new();
        let mut seen_pks: Vec<Vec<u8>> = Vec::new();
        for key in &keys {
            self.tab.shared.state.lock().reads.key += 1;
            let found = match unique {
                None => self.tables().row_by_pk(self.def(), key),
                Some(i) => self.tables().row_by_unique(self.def(), i, key),
            }
            .map_err(|e| rusqlite::Error::ModuleError(e.to_string()))?;
            match (found, unique) {
                (Some(row), _) => {
                    self.seen(&row);
                    out.push(row);
                }
                (None, None) => {
                    let def = self.def();
                    let mut state = self.tab.shared.state.lock();
                    if state.keep == Keep::All {
                        state.read_set.row(def, &pk_key(key), None);
                    }
                }
                (None, Some(i)) => {
                    let def = self.def();
                    let mut state = self.tab.shared.state.lock();
                    if state.keep == Keep::All {
                        state.read_set.no_unique(def, i, key);
                    }
                }
            }
            // The transaction's own rows with this value.
            let state = self.tab.shared.state.lock();
            if state.overlays(number) {
                for ((n, _), values) in state.overlay.range((number, Vec::new())..) {
                    if *n != number {
                        break;
                    }
                    if let Some(values) = values {
                        if values[column] == *key {
                            out.push(RowRead {
                                values: values.clone(),
                                client_flags: 0,
                                exptime: 0,
                                cas: 0,
                                lsn: 0,
                            });
                        }
                    }
                }
            }
        }
        let primary = self.def().table.primary;
        let overlaid = self.overlaid(out);
        for row in overlaid {
            let pk = pk_key(&row.values[primary]);
            // The overlay may have given the row another value.
            if !keys.contains(&row.values[column]) {
                continue;
            }
            if !seen_pks.contains(&pk) {
                seen_pks.push(pk);
                self.rows.push_back(row);
            }
        }
        Ok(())
    }

    /// `rows` with the transaction's changes: rows it changed show as it left them
    /// (once), rows it deleted go, and for a row found in the store and again in the
    /// overlay only the overlay's stays.
    fn overlaid(&self, rows: Vec<RowRead>) -> Vec<RowRead> {
        let state = self.tab.shared.state.lock();
        let number = self.def().number;
        if !state.overlays(number) {
            return rows;
        }
        let primary = self.def().table.primary;
        let mut out: Vec<RowRead> = Vec::with_capacity(rows.len());
        let mut shown: Vec<Vec<u8>> = Vec::new();
        for row in rows {
            let pk = pk_key(&row.values[primary]);
            if shown.contains(&pk) {
                continue;
            }
            match state.overlay.get(&(number, pk.clone())) {
                None => out.push(row),
                Some(Some(values)) => out.push(RowRead {
                    values: values.clone(),
                    ..row
                }),
                Some(None) => {}
            }
            shown.push(pk);
        }
        out
    }

    /// The transaction's inserted or changed rows of this table.
    fn overlay_rows(&self) -> Vec<RowRead> {
        let state = self.tab.shared.state.lock();
        let number = self.def().number;
        state
            .overlay
            .range((number, Vec::new())..)
            .take_while(|((n, _), _)| *n == number)
            .filter_map(|(_, v)| v.clone())
            .map(|values| RowRead {
                values,
                client_flags: 0,
                exptime: 0,
                cas: 0,
                lsn: 0,
            })
            .collect()
    }

    /// Reads the next row of a range into `rows`, if any is left.
    fn read_range_row(&mut self) -> rusqlite::Result<()> {
        while self.rows.is_empty() {
            let Some((pk, entry)) = self.pks.pop_front() else {
                let tab = self.tab;
                let Some((stream, batches)) = self.pk_stream.as_mut() else {
                    return Ok(());
                };
                let entries = stream
                    .next_entries(&tab.shared.tables)
                    .map_err(|e| rusqlite::Error::ModuleError(e.to_string()))?;
                if entries.is_empty() {
                    self.pk_stream = None;
                    return Ok(());
                }
                *batches += 1;
                self.pks.extend(entries);
                continue;
            };
            // Rows are read a group at a time: the store looks a group's keys up
            // together and reads those only in the log in one pass. A range's first
            // batch of keys is read in groups of 1, 2, 4 and 8 rows, so that a LIMIT
            // reads at most twice what it shows, and its next batches whole. Through
            // an index, the first batch's rows (each somewhere else in the log) are
            // read one at a time. Keys read whole before the rows (to be checked at
            // COMMIT) are read a few at a time.
            let group = match self.pk_stream {
                Some((_, batches)) if batches > 1 => self.pks.len() + 1,
                Some(_) if entry.is_none() => {
                    self.group *= 2;
                    self.group / 2
                }
                Some(_) => 1,
                None => TOGETHER,
            };
            let mut batch = vec![(pk, entry)];
            batch.extend(self.pks.drain(..(group - 1).min(self.pks.len())));
            let pks: Vec<Vec<u8>> = batch.iter_mut().map(|(pk, _)| std::mem::take(pk)).collect();
            let rows = self
                .tables()
                .rows_by_pk_bytes(self.def(), &pks, self.used)
                .map_err(|e| rusqlite::Error::ModuleError(e.to_string()))?;
            self.tab.shared.state.lock().reads.next += pks.len() as u64;
            for (row, (_, entry)) in rows.into_iter().zip(batch) {
                let Some(row) = row else { continue };
                // A writer may have changed the row since the index was read, and an
                // entry a row left behind (it expired, and was written again with
                // another value) names a row that no longer holds its value.
                if let Some((column, check)) = &mut self.range {
                    if !check.holds(&row.values[*column])
                        || entry.is_some_and(|v| row.values[*column] != v)
                    {
                        continue;
                    }
                }
                self.rows.push_back(row);
            }
            self.unseen = self.rows.len();
        }
        Ok(())
    }
}

impl KuraCursor<'_> {
    /// Starts reading the rows of plan `plan` (see [`KuraTab::best_index`]).
    fn start(
        &mut self,
        plan: c_int,
        idx_str: Option<&str>,
        args: &Filters<'_>,
    ) -> rusqlite::Result<()> {
        self.rows.clear();
        self.pks.clear();
        self.range = None;
        self.unseen = 0;
        self.used = u64::MAX;
        self.group = 1;
        self.pk_stream = None;
        self.scan = None;
        self.current = None;
        let table = self.def().table.clone();
        let table_number = self.def().number;
        let (index, binds, used) = match idx_str.and_then(parse_plan) {
            Some((index, binds, used)) => (index.to_string(), binds, used),
            None => (String::new(), Vec::new(), u64::MAX),
        };
        match plan {
            PLAN_PK | PLAN_UNIQUE => {
                let (column, unique) = if plan == PLAN_PK {
                    (table.primary, None)
                } else {
                    let x: usize = index
                        .split('/')
                        .next()
                        .and_then(|x| x.parse().ok())
                        .ok_or_else(|| rusqlite::Error::ModuleError("bad plan".into()))?;
                    (table.indexes[x].column, Some(x))
                };
                let col = &table.columns[column];
                let mut keys = Vec::new();
                if binds.first() == Some(&Bind::In) {
                    let mut values = args.in_values(0)?;
                    use fallible_streaming_iterator::FallibleStreamingIterator;
                    while let Some(v) = values.next()? {
                        if let Some(k) = to_key(v.get_raw(), col) {
                            if !keys.contains(&k) {
                                keys.push(k);
                            }
                        }
                    }
                } else if let Some(k) = to_key(args[0].get_raw(), col) {
                    keys.push(k);
                }
                self.lookup(column, unique, keys)?;
            }
            PLAN_RANGE | PLAN_RANGE_DESC => {
                let descending = plan == PLAN_RANGE_DESC;
                let column: usize = index
                    .split('/')
                    .next()
                    .and_then(|x| x.parse().ok())
                    .ok_or_else(|| rusqlite::Error::ModuleError("bad plan".into()))?;
                let Some((via, _)) = self.tab.ordered_via(column) else {
                    return Err(rusqlite::Error::ModuleError("bad plan".into()));
                };
                let col = &table.columns[column];
                let mut range = Range {
                    lower: Bound::Unbounded,
                    upper: Bound::Unbounded,
                };
                for (argv, bind) in binds.iter().enumerate() {
                    let v = args[argv].get_raw();
                    if matches!(v, ValueRef::Null) {
                        // Nothing compares with NULL.
                        return Ok(());
                    }
                    if *bind == Bind::Like {
                        // No literal prefix: every row of the index may match.
                        if let ValueRef::Text(p) = v {
                            if let Some((low, high)) =
                                like::prefix_range(&String::from_utf8_lossy(p))
                            {
                                range.lower = Bound::Included(Value::Bytes(low.into_bytes()));
                                range.upper = high.map_or(Bound::Unbounded, |h| {
                                    Bound::Excluded(Value::Bytes(h.into_bytes()))
                                });
                            }
                        }
                        continue;
                    }
                    let lower = matches!(bind, Bind::Gt | Bind::Ge | Bind::Eq);
                    let Some(value) = to_bound(v, col, lower) else {
                        continue;
                    };
                    match bind {
                        Bind::Eq => {
                            range.lower = Bound::Included(value.clone());
                            range.upper = Bound::Included(value);
                        }
                        Bind::Gt => range.lower = Bound::Excluded(value),
                        Bind::Ge => range.lower = Bound::Included(value),
                        Bind::Lt => range.upper = Bound::Excluded(value),
                        Bind::Le => range.upper = Bound::Included(value),
                        Bind::In | Bind::Like => {}
                    }
                }
                let streams = {
                    let mut state = self.tab.shared.state.lock();
                    state.reads.key += 1;
                    state.keep != Keep::All && !state.overlays(table_number)
                };
                if streams {
                    // Nothing to check later: the keys come from the store as the
                    // rows are asked for, so a LIMIT reads no more than it shows.
                    self.pk_stream =
                        PkCursor::new(self.def(), via, &range, descending).map(|c| (c, 0));
                    self.range = Some((column, range.check()));
                    // Nothing but SQLite reads the other columns of a row it only
                    // shows.
                    let bit = |i: usize| 1u64 << i.min(63);
                    self.used = used | bit(table.primary) | bit(column);
                    return self.advance();
                }
                let def = self.def();
                let (keys, mut pks) = self
                    .tables()
                    .range_keys_and_pks(def, via, &range)
                    .map_err(|e| rusqlite::Error::ModuleError(e.to_string()))?;
                let mut state = self.tab.shared.state.lock();
                if state.keep == Keep::All {
                    state.read_set.range(def, via, &range, keys);
                }
                drop(state);
                if descending {
                    pks.reverse();
                }
                let overlays = self.tab.shared.state.lock().overlays(self.def().number);
                if overlays {
                    // The transaction's rows join the range's, in the range's order.
                    let mut rows = Vec::new();
                    for pk in pks {
                        if let Some(row) = self
                            .tables()
                            .row_by_pk_bytes(self.def(), &pk)
                            .map_err(|e| rusqlite::Error::ModuleError(e.to_string()))?
                        {
                            self.seen(&row);
                            rows.push(row);
                        }
                    }
                    rows.extend(self.overlay_rows());
                    let mut check = range.check();
                    let mut rows: Vec<RowRead> = self
                        .overlaid(rows)
                        .into_iter()
                        .filter(|r| check.holds(&r.values[column]))
                        .collect();
                    let primary = table.primary;
                    rows.sort_by_cached_key(|r| {
                        let mut key = Vec::new();
                        keys::encode(&r.values[column], Position::Inner, &mut key);
                        keys::encode(&r.values[primary], Position::Last, &mut key);
                        key
                    });
                    if descending {
                        rows.reverse();
                    }
                    self.rows = rows.into();
                } else {
                    self.pks = pks.into_iter().map(|pk| (pk, None)).collect();
                    self.range = Some((column, range.check()));
                }
            }
            _ => {
                // A statement that checks nothing of a scan's rows (a read-only
                // one outside a transaction, or a plain SELECT under READ
                // COMMITTED) keeps only the columns it uses of each:
                // none for a count(*).
                let used = idx_str
                    .and_then(|s| s.strip_prefix(SCAN_COLUMNS))
                    .and_then(|s| s.strip_prefix(':'))
                    .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                    .unwrap_or(u64::MAX);
                let (keep, overlay) = {
                    let state = self.tab.shared.state.lock();
                    (state.keep, state.overlays(table_number))
                };
                let keep_reads = keep == Keep::All;
                // The rows come a batch at a time, so the scan holds a batch, whatever
                // the table's size. A statement that writes, or a transaction, has its
                // batch check the table whole: no write to it since the scan began
                // (taken before it reads: a write during it counts as one after it).
                // A plain SELECT under READ COMMITTED notes the table too, checked
                // only if the transaction writes it (its rows are not noted).
                if keep != Keep::Nothing {
                    let writes = self.tables().table_writes(self.def());
                    let def = self.def();
                    let mut state = self.tab.shared.state.lock();
                    if keep_reads {
                        state.read_set.scan(def, writes);
                    } else {
                        state.read_set.scan_if_written(def, writes);
                    }
                }
                self.scan = Some(Scan {
                    rows: RowScan::new(self.def()),
                    used: if keep_reads || overlay {
                        u64::MAX
                    } else {
                        used
                    },
                    overlay,
                });
            }
        }
        self.advance()
    }

    fn advance(&mut self) -> rusqlite::Result<()> {
        if self.rows.is_empty() {
            self.read_range_row()?;
        }
        if self.rows.is_empty() {
            self.read_scan_rows()?;
        }
        self.current = self.rows.pop_front();
        if self.unseen > 0 {
            self.unseen -= 1;
            if let Some(row) = &self.current {
                self.seen(row);
            }
        }
        Ok(())
    }

    /// Reads a scan's next batch of rows into `rows`, if any is left. In a
    /// transaction that changed the table, the rows it changed come last, as it left
    /// them, and the store's versions of them not at all.
    fn read_scan_rows(&mut self) -> rusqlite::Result<()> {
        let tab = self.tab;
        while self.rows.is_empty() {
            let Some(scan) = self.scan.as_mut() else {
                return Ok(());
            };
            let rows = scan
                .rows
                .next_rows(&tab.shared.tables, &tab.def)
                .map_err(|e| rusqlite::Error::ModuleError(e.to_string()))?;
            let (used, overlay) = (scan.used, scan.overlay);
            if rows.is_empty() {
                self.scan = None;
                if overlay {
                    let rows = self.overlay_rows();
                    self.rows.extend(rows);
                }
                return Ok(());
            }
            let primary = tab.def.table.primary;
            let mut state = tab.shared.state.lock();
            state.reads.rnd_next += rows.len() as u64;
            for mut row in rows {
                state.max_lsn = state.max_lsn.max(row.lsn);
                if overlay
                    && state
                        .overlay
                        .contains_key(&(tab.def.number, pk_key(&row.values[primary])))
                {
                    continue;
                }
                keep_used(&mut row.values, used);
                self.rows.push_back(row);
            }
        }
        Ok(())
    }
}

/// A scan under way: its rows still to read, the columns to keep of each, and
/// whether the transaction's changed rows of the table follow it.
struct Scan {
    rows: RowScan,
    used: u64,
    overlay: bool,
}

/// Drops from a row's values those SQLite's `used` mask leaves out (bit 63: every
/// column from the 64th on): those past the last used go, the others become NULL.
fn keep_used(values: &mut Vec<Value>, used: u64) {
    let mask = |i: usize| uses(used, i);
    let Some(last) = (0..values.len()).rev().find(|&i| mask(i)) else {
        *values = Vec::new();
        return;
    };
    values.truncate(last + 1);
    values.shrink_to_fit();
    for (i, v) in values.iter_mut().enumerate() {
        if !mask(i) {
            *v = Value::Null;
        }
    }
}

/// Runs a callback of SQLite's, making a panic (a bug) this statement's error: a
/// panic cannot unwind through SQLite's C frames, and would abort the server.
fn guarded<T>(what: &str, f: impl FnOnce() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(rusqlite::Error::ModuleError(format!(
            "an internal error while {what}"
        )))
    })
}

unsafe impl VTabCursor for KuraCursor<'_> {
    fn filter(
        &mut self,
        plan: c_int,
        idx_str: Option<&str>,
        args: &Filters<'_>,
    ) -> rusqlite::Result<()> {
        guarded("reading rows", || self.start(plan, idx_str, args))
    }

    fn next(&mut self) -> rusqlite::Result<()> {
        guarded("reading rows", || self.advance())
    }

    fn eof(&self) -> bool {
        self.current.is_none()
    }

    fn column(&self, ctx: &mut Context, i: c_int) -> rusqlite::Result<()> {
        let Some(row) = &self.current else {
            return ctx.set_result(rusqlite::types::Null);
        };
        let i = i as usize;
        let n = self.def().table.columns.len();
        if i >= n {
            let meta = match i - n {
                0 => u64::from(row.client_flags),
                1 => u64::from(row.exptime),
                _ => row.cas,
            };
            return ctx.set_result(i64::try_from(meta).unwrap_or(i64::MAX));
        }
        let blob = self.def().table.columns[i].ty == ColumnType::Blob;
        // A column the statement does not use may have been dropped from the row.
        match row.values.get(i).unwrap_or(&Value::Null) {
            Value::Null => ctx.set_result(rusqlite::types::Null),
            Value::Int(v) => ctx.set_result(*v),
            Value::UInt(v) => match i64::try_from(*v) {
                Ok(v) => ctx.set_result(v),
                Err(_) => ctx.set_result(*v as f64),
            },
            Value::Double(v) => ctx.set_result(*v),
            Value::Bytes(b) if blob => ctx.set_result(b.as_slice()),
            // Every write checked the text for UTF-8, and the record's CRC keeps it.
            Value::Bytes(b) => ctx.set_result(ToSqlOutput::Borrowed(ValueRef::Text(b))),
        }
    }

    fn rowid(&self) -> rusqlite::Result<i64> {
        Ok(0)
    }
}
