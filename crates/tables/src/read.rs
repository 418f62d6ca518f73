//! Rows read as values, for the SQL layer: by primary key, through a unique index, in
//! an ordered index's order, or the whole table. Each row comes with its item's flags,
//! exptime and CAS (the CAS lets a later write check that the row did not change).
//!
//! What it is not for: memcached's reads, which show a row as a container's text
//! ([`Tables::get`], [`Tables::range`]).

use std::ops::Bound;
use std::sync::atomic::Ordering;

use kura_engine::{Item, Key, Space};

use crate::catalog::{TableDef, Via};
use crate::error::Error;
use crate::keys::Position;
use crate::ordered::{key_bounds, prefixed_bounds, Bounds, Range};
use crate::row;
use crate::rows::{
    entry_space, row_key, row_key_of_entry, unique_key, Tables, ATTEMPTS, INDEX_SPACE, ROW_SPACE,
    UNIQUE_SPACE,
};
use crate::value::Value;

/// A row as SQL reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct RowRead {
    pub values: Vec<Value>,
    pub client_flags: u32,
    /// Absolute Unix seconds; 0 = never.
    pub exptime: u32,
    pub cas: u64,
    /// The row's LSN: a reply showing it waits until this is acknowledged.
    pub lsn: u64,
}

impl RowRead {
    fn of(def: &TableDef, item: &Item) -> Result<RowRead, Error> {
        RowRead::of_used(def, item, u64::MAX)
    }

    /// [`RowRead::of`] with only the columns in mask `used` decoded
    /// ([`Tables::rows_by_pk_bytes`]).
    fn of_used(def: &TableDef, item: &Item, used: u64) -> Result<RowRead, Error> {
        Ok(RowRead {
            values: row::decode_used(&item.value, &def.table, used)?,
            client_flags: item.client_flags,
            exptime: item.exptime,
            cas: item.cas,
            lsn: item.lsn,
        })
    }
}

impl Tables {
    /// The row whose primary key is `pk` (a value of the primary key's type).
    pub fn row_by_pk(&self, def: &TableDef, pk: &Value) -> Result<Option<RowRead>, Error> {
        let Ok(rk) = row_key(def, pk) else {
            return Ok(None);
        };
        self.row_at(def, &rk)
    }

    /// The row whose primary key encodes to `pk` (as an ordered index gives it).
    pub fn row_by_pk_bytes(&self, def: &TableDef, pk: &[u8]) -> Result<Option<RowRead>, Error> {
        self.row_at(def, &row_key_of_entry(def, pk))
    }

    /// [`Tables::row_by_pk_bytes`] for each of `pks`, in order: the store looks them
    /// up together ([`kura_engine::Store::get_many`]). Only the columns in `used`
    /// are decoded ([`row::column_used`]); the others are NULL.
    pub fn rows_by_pk_bytes(
        &self,
        def: &TableDef,
        pks: &[Vec<u8>],
        used: u64,
    ) -> Result<Vec<Option<RowRead>>, Error> {
        let rks: Vec<Vec<u8>> = pks.iter().map(|pk| row_key_of_entry(def, pk)).collect();
        let keys: Vec<Key<'_>> = rks.iter().map(|rk| Key::new(ROW_SPACE, rk)).collect();
        self.store
            .get_many(&keys)?
            .into_iter()
            .map(|item| {
                item.map(|item| RowRead::of_used(def, &item, used))
                    .transpose()
            })
            .collect()
    }

    fn row_at(&self, def: &TableDef, rk: &[u8]) -> Result<Option<RowRead>, Error> {
        match self.store.get(Key::new(ROW_SPACE, rk))? {
            Some(item) => Ok(Some(RowRead::of(def, &item)?)),
            None => Ok(None),
        }
    }

    /// The row whose column under unique index `index` holds `value`.
    pub fn row_by_unique(
        &self,
        def: &TableDef,
        index: usize,
        value: &Value,
    ) -> Result<Option<RowRead>, Error> {
        let column = def.table.indexes[index].column;
        let Ok(Some(entry_key)) = unique_key(def, index, value) else {
            return Ok(None);
        };
        for _ in 0..ATTEMPTS {
            let Some(entry) = self.store.get(Key::new(UNIQUE_SPACE, &entry_key))? else {
                return Ok(None);
            };
            match self.row_at(def, &row_key_of_entry(def, &entry.value))? {
                Some(row)
                    if def.table.columns[column]
                        .rule()
                        .same(row.values[column].as_ref(), value.as_ref()) =>
                {
                    return Ok(Some(RowRead {
                        lsn: row.lsn.max(entry.lsn),
                        ..row
                    }))
                }
                // A writer changed the row between the two lookups: look again.
                _ => {
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Err(Error::Value(
            "a row kept changing while it was read".to_string(),
        ))
    }

    /// Whether `via` of `def` is kept in order: the primary key and every index are,
    /// when the store keeps the tables' key spaces in order ([`crate::ordered_spaces`]).
    pub fn is_ordered(&self, def: &TableDef, via: Via) -> bool {
        match via {
            Via::Primary => self.store.is_ordered(ROW_SPACE),
            Via::Index(i) => self.store.is_ordered(entry_space(def, i)),
        }
    }

    /// The primary keys (encoded, for [`Tables::row_by_pk_bytes`]) of the rows whose
    /// `via` column is in `range`, in that column's order then the primary key's, at
    /// most `limit`; None when `via` keeps no order. A row that expired may be among
    /// them (reading it finds nothing).
    pub fn ordered_pks(
        &self,
        def: &TableDef,
        via: Via,
        range: &Range,
        limit: usize,
    ) -> Result<Option<Vec<Vec<u8>>>, Error> {
        if !self.is_ordered(def, via) {
            return Ok(None);
        }
        let Some(mut keys) = PkCursor::new(def, via, range, false) else {
            return Ok(Some(Vec::new()));
        };
        let mut pks = Vec::new();
        while pks.len() < limit {
            let batch = keys.next_pks(self, def)?;
            if batch.is_empty() {
                break;
            }
            pks.extend(batch);
        }
        pks.truncate(limit);
        Ok(Some(pks))
    }

    /// Brings the rows of `pks` (encoded primary keys of `def`) that are only in the
    /// log into memory, neighbours in the log with one read: before reading a batch
    /// of a range's or a scan's rows one by one, which would read each on its own.
    pub fn prefetch_rows(&self, def: &TableDef, pks: &[Vec<u8>]) -> Result<(), Error> {
        self.prefetch(
            pks.iter()
                .map(|pk| (ROW_SPACE, [&def.number.to_be_bytes()[..], pk].concat())),
        )
    }

    /// [`Tables::prefetch_rows`] for any keys.
    fn prefetch(&self, keys: impl Iterator<Item = (Space, Vec<u8>)>) -> Result<(), Error> {
        if !self.store.values_may_be_out_of_memory() {
            return Ok(());
        }
        let missing: Vec<_> = keys
            .filter_map(|(space, key)| self.store.unresolved(Key::new(space, &key)))
            .collect();
        if !missing.is_empty() {
            self.store.resolve_many(missing)?;
        }
        Ok(())
    }

    /// The store's ordered keys in `range` of `def`'s `via`, as they are, and the
    /// primary keys of the rows they hold, as [`Tables::ordered_pks`] gives them: a
    /// transaction's read of a range notes the keys, to compare at COMMIT under its
    /// batch's locks (so [`Tables::range_keys`] reads no item, whose shard the batch
    /// may hold), and reads the rows.
    pub fn range_keys_and_pks(
        &self,
        def: &TableDef,
        via: Via,
        range: &Range,
    ) -> Result<KeysAndPks, Error> {
        let Some(mut cursor) = PkCursor::new(def, via, range, false) else {
            return Ok((Vec::new(), Vec::new()));
        };
        cursor.batch = kura_engine::ORDERED_BATCH;
        let (mut keys, mut pks) = (Vec::new(), Vec::new());
        loop {
            let batch = cursor.next_keys(self)?;
            if batch.is_empty() {
                return Ok((keys, pks));
            }
            pks.extend(cursor.pks_of(self, def, &batch)?);
            keys.extend(batch);
        }
    }

    /// The store's ordered keys in `range` of `def`'s `via`, as they are (see
    /// [`Tables::range_keys_and_pks`]); reads no item.
    pub fn range_keys(
        &self,
        def: &TableDef,
        via: Via,
        range: &Range,
    ) -> Result<Vec<Vec<u8>>, Error> {
        let Some(mut cursor) = PkCursor::new(def, via, range, false) else {
            return Ok(Vec::new());
        };
        cursor.batch = kura_engine::ORDERED_BATCH;
        let mut keys = Vec::new();
        loop {
            let batch = cursor.next_keys(self)?;
            if batch.is_empty() {
                return Ok(keys);
            }
            keys.extend(batch);
        }
    }

    /// The table's rows from the log, for a store that keeps no order.
    fn scan_rows_in_log(
        &self,
        def: &TableDef,
        mut visit: impl FnMut(RowRead),
    ) -> Result<(), Error> {
        let prefix = def.number.to_be_bytes();
        let mut failed = None;
        self.store.scan_space(ROW_SPACE, |key, item| {
            if !key.starts_with(&prefix) {
                return;
            }
            match RowRead::of(def, &item) {
                Ok(row) => visit(row),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        })?;
        failed.map_or(Ok(()), Err)
    }
}

/// A range's ordered keys and the primary keys of the rows they hold.
pub type KeysAndPks = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// A row's primary key (encoded) as a range names it, with the value its index entry
/// holds (None through the primary key): [`PkCursor::next_entries`].
pub type Entry = (Vec<u8>, Option<Value>);

/// Keys a range reads first ([`PkCursor`]).
const FIRST_BATCH: usize = 16;

/// The primary keys of the rows in a range of a table's primary key or of one of its
/// indexes, in that order or the reverse, read from the store's ordered keys a batch
/// at a time; the cursor keeps its own place, so its owner (a SQL cursor) takes them
/// as it goes.
#[derive(Debug)]
pub struct PkCursor {
    space: Space,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    reverse: bool,
    done: bool,
    /// Where the primary key is: after the prefix, after the value (a non-unique
    /// index's entry), or in the entry's value (a unique index's).
    via: Via,
    /// The indexed column's type, to step over the value in a non-unique entry.
    column: Option<crate::value::ColumnType>,
    prefix_len: usize,
    /// Keys to read next: a few at first, doubling to a full batch, so that a
    /// `LIMIT 10` reads (and brings from the disk) about ten rows, a scan few times.
    batch: usize,
}

impl PkCursor {
    /// None when the range holds nothing.
    pub fn new(def: &TableDef, via: Via, range: &Range, reverse: bool) -> Option<PkCursor> {
        let position = match via {
            Via::Index(i) if entry_space(def, i) == INDEX_SPACE => Position::Inner,
            _ => Position::Last,
        };
        let rule = def.key_column(via).rule();
        Some(PkCursor::with_bounds(
            def,
            via,
            key_bounds(position, rule, range)?,
            reverse,
        ))
    }

    /// A cursor over every row of `def`, in primary-key order, full batches from the
    /// start.
    fn whole_table(def: &TableDef) -> PkCursor {
        PkCursor {
            batch: kura_engine::ORDERED_BATCH,
            ..PkCursor::with_bounds(
                def,
                Via::Primary,
                (Bound::Unbounded, Bound::Unbounded),
                false,
            )
        }
    }

    /// A cursor over the keys of `via` within `bounds` (after the table's prefix).
    fn with_bounds(def: &TableDef, via: Via, bounds: Bounds, reverse: bool) -> PkCursor {
        let mut prefix = def.number.to_be_bytes().to_vec();
        let (space, column) = match via {
            Via::Primary => (ROW_SPACE, None),
            Via::Index(i) => {
                prefix.extend_from_slice(&def.index_numbers[i].to_be_bytes());
                let ty = def.table.columns[def.table.indexes[i].column].ty;
                (entry_space(def, i), Some(ty))
            }
        };
        let (lower, upper) = prefixed_bounds(&prefix, bounds);
        PkCursor {
            space,
            lower,
            upper,
            reverse,
            done: false,
            via,
            column,
            prefix_len: prefix.len(),
            batch: FIRST_BATCH,
        }
    }

    /// The next primary keys (encoded, as [`Tables::row_by_pk_bytes`] takes them);
    /// empty once the range is read through. A row that expired may be among them.
    /// Through an index, each is of a row that holds the entry's value when it is
    /// read here: an entry its row left without deleting it (the row expired, and
    /// was written again with another value) is passed over.
    pub fn next_pks(&mut self, tables: &Tables, def: &TableDef) -> Result<Vec<Vec<u8>>, Error> {
        loop {
            let keys = self.next_keys(tables)?;
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            let pks = self.pks_of(tables, def, &keys)?;
            if !pks.is_empty() {
                return Ok(pks);
            }
        }
    }

    /// The next primary keys, each with the value its index entry holds (None through
    /// the primary key), reading no row: the caller reads each row when it wants it,
    /// and takes it only if it holds that value (a row may have left an entry behind
    /// when it expired and was written again; it is met again under its own entry).
    /// Empty once the range is read through. A unique index's entries are read (they
    /// hold their rows' keys); a non-unique index's keys and the primary key's name
    /// their rows themselves.
    pub fn next_entries(&mut self, tables: &Tables) -> Result<Vec<Entry>, Error> {
        loop {
            let keys = self.next_keys(tables)?;
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            let entries = self.entries_of(tables, &keys)?;
            if !entries.is_empty() {
                return Ok(entries);
            }
        }
    }

    /// The rows `keys` (this cursor's) name, with their entries' values: see
    /// [`PkCursor::next_entries`]. A unique entry that is gone is passed over.
    fn entries_of(&self, tables: &Tables, keys: &[Vec<u8>]) -> Result<Vec<Entry>, Error> {
        let (Via::Index(_), Some(ty)) = (self.via, self.column) else {
            return Ok(keys
                .iter()
                .map(|k| (k[self.prefix_len..].to_vec(), None))
                .collect());
        };
        if self.space == UNIQUE_SPACE {
            // A unique index's entries hold their rows' keys: the batch's with few reads.
            tables.prefetch(keys.iter().map(|k| (self.space, k.clone())))?;
        }
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let mut r = row::Reader {
                buf: &key[self.prefix_len..],
            };
            // A non-unique entry ends with the primary key; a unique one's value is it.
            if self.space == INDEX_SPACE {
                let value = crate::keys::decode(&mut r, ty, Position::Inner)?;
                out.push((r.buf.to_vec(), Some(value)));
            } else if let Some(entry) = tables.store.peek(Key::new(self.space, key))? {
                let value = crate::keys::decode(&mut r, ty, Position::Last)?;
                out.push((entry.value.to_vec(), Some(value)));
            }
        }
        Ok(out)
    }

    /// The next batch of the range's keys as the store has them, reading no item;
    /// empty once the range is read through.
    fn next_keys(&mut self, tables: &Tables) -> Result<Vec<Vec<u8>>, Error> {
        while !self.done {
            let (keys, more) = tables.store.ordered_batch(
                self.space,
                (
                    self.lower.as_ref().map(Vec::as_slice),
                    self.upper.as_ref().map(Vec::as_slice),
                ),
                self.reverse,
                self.batch,
            )?;
            self.batch = (self.batch * 2).min(kura_engine::ORDERED_BATCH);
            self.done = !more;
            let Some(last) = keys.last() else {
                continue;
            };
            let past = Bound::Excluded(last.clone());
            if self.reverse {
                self.upper = past;
            } else {
                self.lower = past;
            }
            return Ok(keys);
        }
        Ok(Vec::new())
    }

    /// The primary keys of the rows `keys` (this cursor's) hold: see
    /// [`PkCursor::next_pks`].
    fn pks_of(
        &self,
        tables: &Tables,
        def: &TableDef,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Vec<u8>>, Error> {
        let entries = self.entries_of(tables, keys)?;
        let Via::Index(i) = self.via else {
            return Ok(entries.into_iter().map(|(pk, _)| pk).collect());
        };
        let pks: Vec<Vec<u8>> = entries.iter().map(|(pk, _)| pk.clone()).collect();
        // The batch's rows with few reads, then each checked for its entry's value.
        tables.prefetch_rows(def, &pks)?;
        let column = def.table.indexes[i].column;
        let mut held = Vec::with_capacity(pks.len());
        for (pk, value) in entries {
            let rk = [&def.number.to_be_bytes()[..], &pk].concat();
            let Some(item) = tables.store.peek(Key::new(ROW_SPACE, &rk))? else {
                continue;
            };
            // An entry's value is as its key holds it: a folded text's weights.
            let rule = def.table.columns[column].rule();
            let values = row::decode(&item.value, &def.table)?;
            let have = values.get(column).map(|v| crate::keys::comparable(v, rule));
            if have.as_deref() == value.as_ref() {
                held.push(pk);
            }
        }
        Ok(held)
    }
}

/// A scan of one table's rows in primary-key order that keeps its own place, so its
/// owner (a SQL cursor) takes the rows a batch at a time.
#[derive(Debug)]
pub struct RowScan {
    keys: PkCursor,
    /// For a store that keeps no order: the log was read.
    read_log: bool,
}

impl RowScan {
    pub fn new(def: &TableDef) -> RowScan {
        RowScan {
            keys: PkCursor::whole_table(def),
            read_log: false,
        }
    }

    /// The next rows (live ones, a batch's worth or fewer); empty once the scan is
    /// through. A row written while the scan runs may or may not be seen.
    pub fn next_rows(&mut self, tables: &Tables, def: &TableDef) -> Result<Vec<RowRead>, Error> {
        if !tables.store.is_ordered(ROW_SPACE) {
            if self.read_log {
                return Ok(Vec::new());
            }
            self.read_log = true;
            let mut rows = Vec::new();
            tables.scan_rows_in_log(def, |row| rows.push(row))?;
            return Ok(rows);
        }
        loop {
            let pks = self.keys.next_pks(tables, def)?;
            if pks.is_empty() {
                return Ok(Vec::new());
            }
            tables.prefetch_rows(def, &pks)?;
            let mut rows = Vec::with_capacity(pks.len());
            for pk in pks {
                let key = [&def.number.to_be_bytes()[..], &pk].concat();
                if let Some(item) = tables.store.peek(Key::new(ROW_SPACE, &key))? {
                    rows.push(RowRead::of(def, &item)?);
                }
            }
            if !rows.is_empty() {
                return Ok(rows);
            }
        }
    }
}
