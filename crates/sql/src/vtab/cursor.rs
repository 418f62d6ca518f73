//! The cursor SQLite reads a Kura table's rows through: by key, a range of an ordered
//! index a group of rows at a time, or a scan a batch at a time (see the module
//! above).

use std::collections::VecDeque;
use std::ffi::c_int;
use std::ops::Bound;

use kura_tables::keys::{self, Position};
use kura_tables::ordered::{Range, RangeCheck};
use kura_tables::row::column_used;
use kura_tables::{ColumnType, PkCursor, RowRead, RowScan, Rule, TableDef, Tables, Value};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::vtab::{sqlite3_vtab_cursor, Context, Filters, VTabCursor};

use super::plan::{
    parse_plan, Bind, PLAN_PK, PLAN_RANGE, PLAN_RANGE_DESC, PLAN_UNIQUE, SCAN_COLUMNS,
};
use super::{pk_key, KuraTab};
use crate::convert::{to_bound, to_key};
use crate::isolation::Keep;
use crate::like;

/// How many rows of a range whose keys were read whole are read from the store at a
/// time: enough for their lookups' cache misses to overlap.
const TOGETHER: usize = 16;
/// The most rows a range's first group reads for a `LIMIT` (more come as asked).
const MAX_WANTED: usize = 1024;

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
    /// How many rows the statement's `LIMIT` and `OFFSET` will show at most (0: no
    /// LIMIT): the range's first group, read together.
    wanted: usize,
    /// A range's keys still to read from the store, a batch at a time, and how many
    /// batches it gave.
    pk_stream: Option<(PkCursor, usize)>,
    /// A scan's rows still to read, a batch at a time.
    scan: Option<Scan>,
    current: Option<RowRead>,
}

impl<'vtab> KuraCursor<'vtab> {
    pub(super) fn new(tab: &'vtab KuraTab) -> KuraCursor<'vtab> {
        KuraCursor {
            base: sqlite3_vtab_cursor::default(),
            tab,
            rows: VecDeque::new(),
            pks: VecDeque::new(),
            range: None,
            unseen: 0,
            used: u64::MAX,
            group: 1,
            wanted: 0,
            pk_stream: None,
            scan: None,
            current: None,
        }
    }
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
        let pk = pk_key(self.def(), pk);
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
                        state.read_set.row(def, &pk_key(def, key), None);
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
            let pk = pk_key(self.def(), &row.values[primary]);
            // The overlay may have given the row another value.
            let rule = self.def().table.columns[column].rule();
            if !keys
                .iter()
                .any(|k| rule.same(k.as_ref(), row.values[column].as_ref()))
            {
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
            let pk = pk_key(self.def(), &row.values[primary]);
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

    /// Reads the next group of a range's rows into `rows`, if any is left.
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
            // read one at a time. A LIMIT that SQLite passes on (`wanted`) is read in
            // one group first, no more rows than it shows unless SQLite asks on. Keys read whole before the rows (to be checked at
            // COMMIT) are read a few at a time.
            let group = match self.pk_stream {
                Some(_) if self.wanted > 0 => {
                    let group = self.wanted.min(self.pks.len() + 1);
                    self.wanted -= group;
                    group
                }
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
                        || entry.is_some_and(|v| !check.is_entry(&row.values[*column], &v))
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
        self.wanted = 0;
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
                let rule = col.rule();
                let mut range = Range {
                    lower: Bound::Unbounded,
                    upper: Bound::Unbounded,
                    folded: false,
                };
                let (mut limit, mut offset) = (None, 0usize);
                for (argv, bind) in binds.iter().enumerate() {
                    let v = args[argv].get_raw();
                    if matches!(bind, Bind::Limit | Bind::Offset) {
                        // A negative LIMIT is none; a negative OFFSET, 0.
                        let n = match v {
                            ValueRef::Integer(n) => usize::try_from(n).ok(),
                            _ => None,
                        };
                        if *bind == Bind::Limit {
                            limit = n;
                        } else {
                            offset = n.unwrap_or(0);
                        }
                        continue;
                    }
                    if matches!(v, ValueRef::Null) {
                        // Nothing compares with NULL.
                        return Ok(());
                    }
                    if *bind == Bind::Like {
                        // No literal prefix: every row of the index may match.
                        if let ValueRef::Text(p) = v {
                            let pattern = String::from_utf8_lossy(p);
                            if rule != Rule::Binary {
                                // A case-insensitive column's keys are weights.
                                if let Some((low, high)) = like::prefix_weights(&pattern, rule) {
                                    range.lower = Bound::Included(Value::Bytes(low));
                                    range.upper = high.map_or(Bound::Unbounded, |h| {
                                        Bound::Excluded(Value::Bytes(h))
                                    });
                                    range.folded = true;
                                }
                            } else if let Some((low, high)) = like::prefix_range(&pattern) {
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
                            // Between the two bounds of a number that falls between
                            // the column's values (SQLite checks it again).
                            let upper = to_bound(v, col, false).unwrap_or_else(|| value.clone());
                            range.lower = Bound::Included(value);
                            range.upper = Bound::Included(upper);
                        }
                        Bind::Gt => range.lower = Bound::Excluded(value),
                        Bind::Ge => range.lower = Bound::Included(value),
                        Bind::Lt => range.upper = Bound::Excluded(value),
                        Bind::Le => range.upper = Bound::Included(value),
                        Bind::In | Bind::Like | Bind::Limit | Bind::Offset => {}
                    }
                }
                if let Some(limit) = limit {
                    self.wanted = limit.saturating_add(offset).min(MAX_WANTED);
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
                    self.range = Some((column, range.check(rule)));
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
                    let mut check = range.check(rule);
                    let mut rows: Vec<RowRead> = self
                        .overlaid(rows)
                        .into_iter()
                        .filter(|r| check.holds(&r.values[column]))
                        .collect();
                    let primary = table.primary;
                    let pk_rule = table.columns[primary].rule();
                    rows.sort_by_cached_key(|r| {
                        let mut key = Vec::new();
                        keys::encode_as(&r.values[column], rule, Position::Inner, &mut key);
                        keys::encode_as(&r.values[primary], pk_rule, Position::Last, &mut key);
                        key
                    });
                    if descending {
                        rows.reverse();
                    }
                    self.rows = rows.into();
                } else {
                    self.pks = pks.into_iter().map(|pk| (pk, None)).collect();
                    self.range = Some((column, range.check(rule)));
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
                        .contains_key(&(tab.def.number, pk_key(&tab.def, &row.values[primary])))
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
    let mask = |i: usize| column_used(used, i);
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
            Value::Decimal(d) => match crate::convert::decimal_value(d) {
                rusqlite::types::Value::Integer(n) => ctx.set_result(n),
                v => ctx.set_result(v),
            },
            Value::Bytes(b) if blob => ctx.set_result(b.as_slice()),
            // Every write checked the text for UTF-8, and the record's CRC keeps it.
            Value::Bytes(b) => ctx.set_result(ToSqlOutput::Borrowed(ValueRef::Text(b))),
        }
    }

    fn rowid(&self) -> rusqlite::Result<i64> {
        Ok(0)
    }
}
