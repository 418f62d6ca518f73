//! Tables over the store: the catalog record, and rows read and written through their
//! containers with every unique-index entry changed in the same atomic engine batch.
//!
//! Keys, each in a key space of its own (see `docs/format.md`, Tables):
//! - the catalog: space 1, the key `catalog`, the value [`Catalog::encode`];
//! - a row: space 2, the table's number (4 bytes, big-endian) then its primary key
//!   ([`keys::encode`]); the value is [`row::encode`]; the row's client flags, exptime
//!   and CAS are the item's, as a memcached item's;
//! - a unique-index entry: space 3, the table's number, the index's number (2 bytes,
//!   big-endian), then the indexed value; the value is the row's primary key, encoded
//!   as in the row's key. A NULL has no entry (MySQL's unique indexes allow many).
//!   An entry expires with its row: it carries the row's exptime.
//!
//! A write reads the row's current version under the locks of the row and of every
//! index entry it will touch, so it knows which entries to delete; if the row holds an
//! indexed value the write did not lock (another writer changed it meanwhile), the
//! write lets go and tries again with that entry's key too.
//!
//! Reads through a unique index look the entry up, then the row, and check that the
//! row still holds the value: a writer between the two lookups makes the read look
//! again, so a read never returns a row under a value it no longer has.
//!
//! What it is not for: memcached's syntax (the server's), and its own rules (win
//! tokens, stale items, flush_all), which never reach tables.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kura_engine::{
    exptime_to_absolute, Access, Change, Item, ItemRef, Key, NewItem, Space, Store, Written,
    KEY_MAX_BYTES,
};
use parking_lot::RwLock;

use crate::catalog::{Catalog, Container, TableDef, Via};
use crate::error::{value_error, Error};
use crate::ordered::{keeps_order, parse_range, Ordered};
use crate::schema::parse_schema;
use crate::text::{self, Field};
use crate::value::{parse_owned, parse_text, Value, ValueRef};
use crate::{keys, row};

/// The key spaces tables keep their records in.
pub const CATALOG_SPACE: Space = Space(1);
pub const ROW_SPACE: Space = Space(2);
pub const UNIQUE_SPACE: Space = Space(3);

pub(crate) const CATALOG_KEY: &[u8] = b"catalog";

/// How many times a write or a read through an index starts again when another writer
/// changed the row between its steps, before it reports the row as busy.
pub(crate) const ATTEMPTS: usize = 16;

/// A row as a memcached client sees it through one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowItem {
    /// The row's fields, the container's key column left out, joined and escaped.
    pub value: Vec<u8>,
    pub client_flags: u32,
    /// Absolute Unix seconds; 0 = never.
    pub exptime: u32,
    pub cas: u64,
    /// The reply showing it may go out once this LSN is acknowledged.
    pub lsn: u64,
}

/// The storage commands as they apply to rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    Set,
    Add,
    Replace,
    /// Stores only if the row's CAS is this one.
    Cas(u64),
}

/// What a write did, in memcached's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Stored(Written),
    /// `add` of a row that exists, `replace` of one that does not, or a write through
    /// a unique index that would add a row or change its primary key.
    NotStored,
    /// Another row holds a value this row's unique index wants (also `NOT_STORED` on
    /// the wire, and counted apart).
    Duplicate,
    /// `cas` on a row whose CAS has changed.
    Exists,
    /// `cas` on a row that does not exist.
    NotFound,
    /// The index's slots fill the memory budget (`-m`): no new row fits.
    NoMemory,
}

/// What a delete or touch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOutcome {
    Done(Option<Written>),
    NotFound,
    /// A delete with a CAS that is not the row's.
    Exists,
}

/// Counters for `stats`.
#[derive(Debug, Default)]
pub struct TableCounters {
    /// Writes refused because another row holds a unique value.
    pub unique_refusals: AtomicU64,
    /// Times a write or read started again because a writer changed the row meanwhile.
    pub retries: AtomicU64,
}

pub struct Tables {
    pub(crate) store: Arc<Store>,
    pub(crate) catalog: RwLock<Arc<Catalog>>,
    /// Counts the catalog's changes (from 1, under its lock): a connection keeps the
    /// catalog it last saw while this is unchanged.
    pub(crate) generation: AtomicU64,
    /// Row writes hold it shared, a change of the catalog exclusively ([`crate::ddl`]).
    pub(crate) gate: RwLock<()>,
    /// Ordered indexes (KEY, and USING BTREE), in memory beside the store.
    pub(crate) ordered: Ordered,
    pub counters: TableCounters,
}

/// A connection's copy of the catalog, and the generation it was current at.
pub type CatalogCache = Option<(u64, Arc<Catalog>)>;

/// The most rows one range returns.
pub const RANGE_ROWS_MAX: usize = 1000;

/// A row's engine key.
pub(crate) fn row_key(def: &TableDef, pk: &Value) -> Result<Vec<u8>, Error> {
    let mut key = Vec::with_capacity(4 + keys::encoded_len(pk, keys::Position::Last));
    key.extend_from_slice(&def.number.to_be_bytes());
    keys::encode(pk, keys::Position::Last, &mut key);
    if key.len() > KEY_MAX_BYTES {
        return Err(value_error!(
            "primary key of {} bytes is longer than the {} a key holds",
            key.len() - 4,
            KEY_MAX_BYTES - 4
        ));
    }
    Ok(key)
}

/// The engine key of the entry of unique index `index` (its position in the table)
/// for `value`; None for NULL, which has no entry.
pub(crate) fn unique_key(
    def: &TableDef,
    index: usize,
    value: &Value,
) -> Result<Option<Vec<u8>>, Error> {
    if value.is_null() {
        return Ok(None);
    }
    let mut key = Vec::with_capacity(6 + keys::encoded_len(value, keys::Position::Last));
    key.extend_from_slice(&def.number.to_be_bytes());
    key.extend_from_slice(&def.index_numbers[index].to_be_bytes());
    keys::encode(value, keys::Position::Last, &mut key);
    if key.len() > KEY_MAX_BYTES {
        let column = &def.table.columns[def.table.indexes[index].column].name;
        return Err(value_error!(
            "value of column {column} is {} bytes, longer than the {} its unique index holds",
            key.len() - 6,
            KEY_MAX_BYTES - 6
        ));
    }
    Ok(Some(key))
}

/// The primary key's bytes in a row key or an index entry's value.
pub(crate) fn pk_bytes(row_key: &[u8]) -> &[u8] {
    &row_key[4..]
}

/// The key of the row a unique-index entry of table `def` points at, from the entry's
/// value (the row's primary key).
pub fn row_key_of_entry(def: &TableDef, entry_value: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(4 + entry_value.len());
    key.extend_from_slice(&def.number.to_be_bytes());
    key.extend_from_slice(entry_value);
    key
}

/// The unique-index entries a row has: (index position, key).
pub(crate) fn unique_keys_of(
    def: &TableDef,
    values: &[Value],
) -> Result<Vec<(usize, Vec<u8>)>, Error> {
    let mut out = Vec::new();
    for (i, index) in def.table.indexes.iter().enumerate() {
        if index.kind.is_unique() {
            if let Some(key) = unique_key(def, i, &values[index.column])? {
                out.push((i, key));
            }
        }
    }
    Ok(out)
}

/// [`unique_keys_of`] for a row borrowed from its bytes: only the indexed values are
/// copied.
fn unique_keys_of_ref(
    def: &TableDef,
    values: &[ValueRef<'_>],
) -> Result<Vec<(usize, Vec<u8>)>, Error> {
    let mut out = Vec::new();
    for (i, index) in def.table.indexes.iter().enumerate() {
        if index.kind.is_unique() {
            if let Some(key) = unique_key(def, i, &values[index.column].to_value())? {
                out.push((i, key));
            }
        }
    }
    Ok(out)
}

/// The column a container is keyed by.
fn key_column(def: &TableDef, via: Via) -> usize {
    match via {
        Via::Primary => def.table.primary,
        Via::Index(i) => def.table.indexes[i].column,
    }
}

/// A row's values as the value a container shows: every column but its key column,
/// joined and escaped into one buffer.
fn render(def: &TableDef, via: Via, values: &[ValueRef<'_>]) -> Vec<u8> {
    let skip = key_column(def, via);
    let separator = def.table.separator;
    // Room for every field as it is, a separator each, and a few escapes.
    let room: usize = values
        .iter()
        .map(|v| match v {
            ValueRef::Bytes(b) => b.len() + 1,
            _ => 21,
        })
        .sum();
    let mut out = Vec::with_capacity(room + 8);
    // A number's text, escaped like any field: a separator may be '.', '-' or '+'.
    let mut integer = itoa::Buffer::new();
    let mut double = Vec::new();
    let mut first = true;
    for (i, v) in values.iter().enumerate() {
        if i == skip {
            continue;
        }
        if !first {
            out.push(separator);
        }
        first = false;
        match v {
            ValueRef::Null => text::push_field(&mut out, None, separator),
            ValueRef::Bytes(b) => text::push_field(&mut out, Some(b), separator),
            ValueRef::Int(n) => {
                text::push_field(&mut out, Some(integer.format(*n).as_bytes()), separator)
            }
            ValueRef::UInt(n) => {
                text::push_field(&mut out, Some(integer.format(*n).as_bytes()), separator)
            }
            v => {
                double.clear();
                v.write_text(&mut double);
                text::push_field(&mut out, Some(&double), separator);
            }
        }
    }
    out
}

/// A row as a container shows it: its rendered value and its item's metadata.
fn row_item(value: Vec<u8>, item: &Item) -> RowItem {
    RowItem {
        value,
        client_flags: item.client_flags,
        exptime: item.exptime,
        cas: item.cas,
        lsn: item.lsn,
    }
}

/// A row's values from a container's key and value: the value's fields are every
/// column but the key column, in table order.
fn parse_row(def: &TableDef, via: Via, key: &[u8], value: &[u8]) -> Result<Vec<Value>, Error> {
    let table = &def.table;
    let key_col = key_column(def, via);
    let fields = text::split(value, table.separator, table.columns.len() - 1)?;
    let mut fields = fields.into_iter();
    let mut values = Vec::with_capacity(table.columns.len());
    for (i, column) in table.columns.iter().enumerate() {
        let value = if i == key_col {
            parse_text(key, column.ty, &column.name)?
        } else {
            match fields.next() {
                Some(Field::Null) if column.not_null => {
                    return Err(value_error!("column {} cannot be NULL", column.name))
                }
                Some(Field::Null) | None => Value::Null,
                Some(Field::Bytes(b)) => parse_owned(b, column.ty, &column.name)?,
            }
        };
        values.push(value);
    }
    Ok(values)
}

/// What one attempt of a write found.
enum Attempt {
    Done(RowResult),
    /// The changes were made: the row's record is what the batch wrote for it. The
    /// row's values before (for its ordered indexes), and its exptime now.
    Wrote {
        old: Option<Vec<Value>>,
        exptime: u32,
    },
    /// The row holds index entries the attempt had not locked: try again with these.
    NeedKeys(Vec<Vec<u8>>),
    /// The row no longer holds the value it was found by: look it up again.
    Moved,
}

impl Tables {
    /// Tables over `store`, with the catalog it holds (none yet: an empty one).
    pub fn open(store: Arc<Store>) -> Result<Tables, Error> {
        let catalog = match store.peek(Key::new(CATALOG_SPACE, CATALOG_KEY))? {
            Some(item) => Catalog::decode(&item.value)?,
            None => Catalog::new(),
        };
        let tables = Tables {
            store,
            catalog: RwLock::new(Arc::new(catalog)),
            generation: AtomicU64::new(1),
            gate: RwLock::new(()),
            ordered: Ordered::default(),
            counters: TableCounters::default(),
        };
        // A replica's catalog is its primary's: a change left half done there is
        // finished there (or here, on promotion).
        if !tables.store.is_read_only() {
            tables.finish_ddl()?;
        }
        tables.rebuild_ordered(&tables.ordered)?;
        Ok(tables)
    }

    /// Fills `ordered` (the tables' own, or one to swap in) from the rows in the log.
    /// Returns how many rows it read.
    pub(crate) fn rebuild_ordered(&self, ordered: &Ordered) -> Result<u64, Error> {
        let catalog = self.catalog();
        ordered.add_tables(&catalog);
        let by_number: std::collections::HashMap<u32, &TableDef> = catalog
            .tables
            .iter()
            .filter(|def| ordered.has(def))
            .map(|def| (def.number, def))
            .collect();
        if by_number.is_empty() {
            return Ok(0);
        }
        let mut failed = None;
        self.store.scan_space(ROW_SPACE, |key, item| {
            let Some(number) = key
                .get(..4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            else {
                return;
            };
            let Some(def) = by_number.get(&number) else {
                return;
            };
            match row::decode(&item.value, &def.table) {
                Ok(values) => ordered.apply(def, None, Some(&values), item.exptime),
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        })?;
        failed.map_or(Ok(0), Err)
    }

    /// Drops the ordered indexes' entries of rows expired by now (the rows' own
    /// records go as the store purges them). Returns how many went.
    pub fn purge_expired(&self) -> u64 {
        self.ordered.purge_expired(self.store.now_secs())
    }

    /// Entries in the ordered indexes, for `stats`.
    pub fn ordered_entries(&self) -> u64 {
        self.ordered.entries()
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.catalog.read())
    }

    /// The catalog now, through a connection's `cache` of the one it saw last: taken
    /// again only after a change, so the common request takes no shared lock.
    pub fn catalog_cached<'c>(&self, cache: &'c mut CatalogCache) -> &'c Arc<Catalog> {
        let now = self.generation.load(Ordering::Acquire);
        if cache.as_ref().is_some_and(|(seen, _)| *seen != now) {
            *cache = None;
        }
        &cache
            .get_or_insert_with(|| {
                let guard = self.catalog.read();
                (self.generation.load(Ordering::Acquire), Arc::clone(&guard))
            })
            .1
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Creates the tables a file of `CREATE TABLE` statements declares and the catalog
    /// lacks; a declared table that exists must be the same. Durable when it returns.
    /// Returns the names of the tables created.
    pub fn apply_schema(&self, sql: &str) -> Result<Vec<String>, Error> {
        let declared = parse_schema(sql)?;
        let _gate = self.gate.write();
        let catalog = self.catalog();
        let Some(next) = catalog.with_schema(declared)? else {
            return Ok(Vec::new());
        };
        self.store_catalog(&next)?;
        let created = next
            .tables
            .iter()
            .filter(|t| catalog.table(&t.table.name).is_none())
            .map(|t| t.table.name.clone())
            .collect();
        // New tables have no rows: their ordered indexes start empty.
        self.install_catalog(next);
        Ok(created)
    }

    /// The table `container` names in `catalog` as the catalog in use has it (a DDL
    /// statement may have changed it since the caller looked; with the gate held it
    /// stays so): that catalog, and the table's position in it.
    fn current(
        &self,
        catalog: &Catalog,
        container: Container,
    ) -> Result<(Arc<Catalog>, usize), Error> {
        let old = &catalog.tables[container.table];
        let current = self.catalog();
        let t = current
            .tables
            .iter()
            .position(|d| d.number == old.number)
            .ok_or_else(|| value_error!("table {} was dropped", old.table.name))?;
        Ok((current, t))
    }

    /// The container `name` leads to, and the catalog it is in.
    pub fn container(&self, name: &str) -> Option<(Arc<Catalog>, Container)> {
        let catalog = self.catalog();
        let container = catalog.container(name)?;
        Some((catalog, container))
    }

    /// The engine key of the row whose primary key is `pk`, or None when no row can have
    /// it (a key that is not a value of the column).
    fn row_key_from_text(def: &TableDef, pk: &[u8]) -> Option<Vec<u8>> {
        let column = def.table.primary_column();
        let value = parse_text(pk, column.ty, &column.name).ok()?;
        row_key(def, &value).ok()
    }

    /// The engine keys a container's key may need read first (for callers that bring
    /// records off disk before they run a request): the row's, or the index entry's.
    pub fn keys_to_read(def: &TableDef, via: Via, key: &[u8]) -> Option<(Space, Vec<u8>)> {
        match via {
            Via::Primary => Some((ROW_SPACE, Self::row_key_from_text(def, key)?)),
            Via::Index(i) => {
                let column = &def.table.columns[def.table.indexes[i].column];
                let value = parse_text(key, column.ty, &column.name).ok()?;
                Some((UNIQUE_SPACE, unique_key(def, i, &value).ok()??))
            }
        }
    }

    fn get_row(&self, row_key: &[u8], access: Access) -> Result<Option<Item>, Error> {
        let key = Key::new(ROW_SPACE, row_key);
        Ok(match access {
            Access::Fetch => self.store.get(key)?,
            Access::NoAccess => self.store.peek(key)?,
        })
    }

    /// The row `key` names in `container`, as that container shows it.
    pub fn get(
        &self,
        catalog: &Catalog,
        container: Container,
        key: &[u8],
    ) -> Result<Option<RowItem>, Error> {
        let def = &catalog.tables[container.table];
        match container.via {
            Via::Primary => {
                let Some(rk) = Self::row_key_from_text(def, key) else {
                    return Ok(None);
                };
                let Some(item) = self.get_row(&rk, Access::Fetch)? else {
                    return Ok(None);
                };
                let values = row::decode_ref(&item.value, &def.table)?;
                Ok(Some(row_item(render(def, container.via, &values), &item)))
            }
            Via::Index(i) => self.find_by_index(def, i, key),
        }
    }

    /// The row whose unique-indexed column holds `key`'s value, and its primary key's
    /// row key.
    fn find_by_index(
        &self,
        def: &TableDef,
        index: usize,
        key: &[u8],
    ) -> Result<Option<RowItem>, Error> {
        let table = &def.table;
        let column = table.indexes[index].column;
        if !table.indexes[index].kind.is_unique() {
            return Err(value_error!(
                "index {} is not unique: read it by range (@>=, @<)",
                table.indexes[index].name
            ));
        }
        let Ok(value) = parse_text(key, table.columns[column].ty, &table.columns[column].name)
        else {
            return Ok(None);
        };
        let Ok(Some(entry_key)) = unique_key(def, index, &value) else {
            return Ok(None);
        };
        for _ in 0..ATTEMPTS {
            let Some(entry) = self.store.get(Key::new(UNIQUE_SPACE, &entry_key))? else {
                return Ok(None);
            };
            let rk = row_key_of_entry(def, &entry.value);
            if let Some(item) = self.get_row(&rk, Access::Fetch)? {
                let values = row::decode_ref(&item.value, table)?;
                if values[column] == value.as_ref() {
                    // The reply waits for the entry's LSN too (one batch: the same).
                    let lsn = item.lsn.max(entry.lsn);
                    let value = render(def, Via::Index(index), &values);
                    return Ok(Some(RowItem {
                        lsn,
                        ..row_item(value, &item)
                    }));
                }
            }
            // A writer changed the row between the two lookups: look again.
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
        }
        Err(Error::Value(format!(
            "the row of {} kept changing while it was read",
            String::from_utf8_lossy(key)
        )))
    }

    /// The row key of the row a unique-index container's `key` names now, with the
    /// value that names it; None when no row holds it.
    fn locate(
        &self,
        def: &TableDef,
        index: usize,
        key: &[u8],
    ) -> Result<Option<(Vec<u8>, Value)>, Error> {
        let table = &def.table;
        let column = &table.columns[table.indexes[index].column];
        let value = parse_text(key, column.ty, &column.name)?;
        let Some(entry_key) = unique_key(def, index, &value)? else {
            return Ok(None);
        };
        let Some(entry) = self.store.peek(Key::new(UNIQUE_SPACE, &entry_key))? else {
            return Ok(None);
        };
        Ok(Some((row_key_of_entry(def, &entry.value), value)))
    }

    /// The rows whose key in `container` is in the range `spec` (`@>=A@<B`: see
    /// [`crate::ordered::parse_range`]), in that key's order (then the primary key's),
    /// at most [`RANGE_ROWS_MAX`]; each with its primary key as text and as its
    /// table's container shows it. From the ordered index in memory when the container
    /// keeps one; otherwise from the table's rows in the log, which reads the log.
    pub fn range(
        &self,
        catalog: &Catalog,
        container: Container,
        spec: &[u8],
    ) -> Result<Vec<(Vec<u8>, RowItem)>, Error> {
        let def = &catalog.tables[container.table];
        let range = parse_range(def, container.via, spec)?;
        let key_col = key_column(def, container.via);
        let now = self.store.now_secs();
        let mut rows: Vec<(Vec<Value>, Item)> = Vec::new();
        match self
            .ordered
            .range(def, container.via, &range, now, RANGE_ROWS_MAX)
        {
            Some(pks) => {
                for pk in pks {
                    let rk = row_key_of_entry(def, &pk);
                    let Some(item) = self.get_row(&rk, Access::Fetch)? else {
                        continue;
                    };
                    let values = row::decode(&item.value, &def.table)?;
                    // A writer may have changed the row since the index was read.
                    if range.holds(&values[key_col]) {
                        rows.push((values, item));
                    }
                }
            }
            None => {
                let prefix = def.number.to_be_bytes();
                let mut failed = None;
                self.store.scan_space(ROW_SPACE, |key, item| {
                    if !key.starts_with(&prefix) {
                        return;
                    }
                    match row::decode(&item.value, &def.table) {
                        Ok(values) if range.holds(&values[key_col]) => rows.push((values, item)),
                        Ok(_) => {}
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                })?;
                if let Some(e) = failed {
                    return Err(e);
                }
                let order = |values: &[Value]| {
                    let mut key = Vec::new();
                    keys::encode(&values[key_col], keys::Position::Inner, &mut key);
                    keys::encode(&values[def.table.primary], keys::Position::Last, &mut key);
                    key
                };
                rows.sort_by_cached_key(|(values, _)| order(values));
                rows.truncate(RANGE_ROWS_MAX);
            }
        }
        Ok(rows
            .into_iter()
            .map(|(values, item)| {
                let mut key = Vec::new();
                values[def.table.primary].write_text(&mut key);
                let shown: Vec<ValueRef<'_>> = values.iter().map(Value::as_ref).collect();
                let row = RowItem {
                    value: render(def, Via::Primary, &shown),
                    client_flags: item.client_flags,
                    exptime: item.exptime,
                    cas: item.cas,
                    lsn: item.lsn,
                };
                (key, row)
            })
            .collect())
    }

    /// A storage command on a row: `key` and `value` as the container spells them.
    pub fn write(
        &self,
        catalog: &Catalog,
        container: Container,
        key: &[u8],
        value: &[u8],
        mode: WriteMode,
        (client_flags, exptime): (u32, i64),
    ) -> Result<WriteOutcome, Error> {
        let _gate = self.gate.read();
        let (current, t) = self.current(catalog, container)?;
        let def = &current.tables[t];
        let values = parse_row(def, container.via, key, value)?;
        let outcome = match container.via {
            Via::Primary => {
                let rk = row_key(def, &values[def.table.primary])?;
                // As for memcached's keys: values go to disk when memory is short, but
                // every key's slot stays in memory, and a new row needs one.
                if !self.store.has_room_for_key(Key::new(ROW_SPACE, &rk)) {
                    return Ok(WriteOutcome::NoMemory);
                }
                self.write_row(def, &rk, values, mode, (client_flags, exptime), None)?
            }
            Via::Index(i) => {
                if !def.table.indexes[i].kind.is_unique() {
                    return Err(value_error!(
                        "index {} is not unique: write the row through table {}",
                        def.table.indexes[i].name,
                        def.table.name
                    ));
                }
                if mode == WriteMode::Add {
                    return Ok(WriteOutcome::NotStored);
                }
                let mut outcome = None;
                for _ in 0..ATTEMPTS {
                    let Some((rk, value)) = self.locate(def, i, key)? else {
                        return Ok(match mode {
                            WriteMode::Cas(_) => WriteOutcome::NotFound,
                            _ => WriteOutcome::NotStored,
                        });
                    };
                    // Through a unique index a write updates the row that holds the
                    // value; it may not give the row another primary key.
                    if row_key(def, &values[def.table.primary])? != rk {
                        return Ok(WriteOutcome::NotStored);
                    }
                    let column = def.table.indexes[i].column;
                    let mode = match mode {
                        WriteMode::Set => WriteMode::Replace,
                        other => other,
                    };
                    match self.write_row(
                        def,
                        &rk,
                        values.clone(),
                        mode,
                        (client_flags, exptime),
                        Some((column, value)),
                    ) {
                        Ok(WriteOutcome::NotFound) | Ok(WriteOutcome::NotStored)
                            if mode != WriteMode::Add =>
                        {
                            // Moved or gone meanwhile: look again.
                            self.counters.retries.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        other => {
                            outcome = Some(other?);
                            break;
                        }
                    }
                }
                outcome.unwrap_or(WriteOutcome::NotStored)
            }
        };
        if outcome == WriteOutcome::Duplicate {
            self.counters
                .unique_refusals
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(outcome)
    }

    /// Writes the row `values` at `rk` with its index entries, as one batch. With
    /// `holds`, the row must exist and hold that value in that column (a write through
    /// an index), else the outcome is `NotFound`.
    fn write_row(
        &self,
        def: &TableDef,
        rk: &[u8],
        values: Vec<Value>,
        mode: WriteMode,
        (client_flags, exptime): (u32, i64),
        holds: Option<(usize, Value)>,
    ) -> Result<WriteOutcome, Error> {
        let op = RowOp::Write {
            row: row::encode(&values).into(),
            entries: unique_keys_of(def, &values)?,
            values,
            mode,
            client_flags,
            exptime,
        };
        Ok(match self.change_row(def, rk, op, holds.as_ref())? {
            RowResult::Outcome(outcome) => outcome,
            RowResult::Written(w) => WriteOutcome::Stored(w),
            RowResult::Moved | RowResult::Missing => WriteOutcome::NotFound,
            RowResult::Touched(..) => unreachable!("a write is no touch"),
        })
    }

    /// Runs `op` on the row at `rk` and every unique-index entry it has or will have, as
    /// one batch: locks them all, looks at the row, decides, writes.
    fn change_row(
        &self,
        def: &TableDef,
        rk: &[u8],
        op: RowOp,
        holds: Option<&(usize, Value)>,
    ) -> Result<RowResult, Error> {
        let pk = pk_bytes(rk);
        let new_entries: &[(usize, Vec<u8>)] = match &op {
            RowOp::Write { entries, .. } => entries,
            _ => &[],
        };
        let mut old_keys: Vec<Vec<u8>> = Vec::new();
        // An update that keeps the row's unique values (and its exptime, which its
        // entries carry) changes the row alone: a first attempt locks the row only, and
        // locks the entries too only if the row shows they change. `add` makes a new
        // row, whose entries are new: it locks them from the start.
        let mut entries_locked =
            !matches!(&op, RowOp::Write { mode, .. } if *mode != WriteMode::Add);
        for _ in 0..ATTEMPTS {
            let mut engine_keys: Vec<Key<'_>> =
                Vec::with_capacity(1 + new_entries.len() + old_keys.len());
            engine_keys.push(Key::new(ROW_SPACE, rk));
            if entries_locked {
                engine_keys.extend(new_entries.iter().map(|(_, k)| Key::new(UNIQUE_SPACE, k)));
            }
            engine_keys.extend(old_keys.iter().map(|k| Key::new(UNIQUE_SPACE, k)));
            let old_at = engine_keys.len() - old_keys.len();
            let decide = |current: &[Option<ItemRef<'_>>], now: u32| {
                let keep = || current.iter().map(|_| Change::Keep).collect::<Vec<_>>();
                let decided = decide_row(
                    def,
                    &op,
                    holds,
                    pk,
                    (&engine_keys, old_at, entries_locked),
                    current,
                    now,
                );
                match decided {
                    Ok((Some(changes), attempt)) => (changes, Ok(attempt)),
                    Ok((None, attempt)) => (keep(), Ok(attempt)),
                    Err(e) => (keep(), Err(e)),
                }
            };
            // Ordered indexes change with the row, under its lock, in its order.
            let applied = |attempt: &Result<Attempt, Error>, _: &[Option<Written>]| {
                if !self.ordered.has(def) {
                    return;
                }
                match (attempt, &op) {
                    (Ok(Attempt::Wrote { old, exptime }), RowOp::Write { values, .. }) => self
                        .ordered
                        .apply(def, old.as_deref(), Some(values), *exptime),
                    (Ok(Attempt::Wrote { old, .. }), RowOp::Delete { .. }) => {
                        self.ordered.apply(def, old.as_deref(), None, 0)
                    }
                    (Ok(Attempt::Done(RowResult::Touched(values, item))), _) => {
                        self.ordered
                            .apply(def, Some(values), Some(values), item.exptime)
                    }
                    _ => {}
                }
            };
            let (attempt, written) = self
                .store
                .update_batch_then(&engine_keys, decide, applied)?;
            match attempt? {
                Attempt::Done(RowResult::Touched(values, item)) => {
                    let lsn = written.iter().flatten().map(|w| w.lsn).max();
                    let item = RowItem {
                        lsn: lsn.unwrap_or(item.lsn),
                        ..item
                    };
                    return Ok(RowResult::Touched(values, item));
                }
                Attempt::Wrote { .. } => {
                    let Some(w) = written[0] else {
                        unreachable!("a written or deleted row has its record")
                    };
                    return Ok(RowResult::Written(w));
                }
                Attempt::Done(result) => return Ok(result),
                Attempt::Moved => return Ok(RowResult::Moved),
                Attempt::NeedKeys(keys) => {
                    if entries_locked {
                        // A writer changed the row's entries since it was looked at.
                        self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    }
                    entries_locked = true;
                    old_keys.extend(keys);
                }
            }
        }
        Err(value_error!("the row kept changing while it was written"))
    }

    /// Deletes the row `key` names in `container`, with its index entries. With `cas`,
    /// only if the row's CAS is that.
    pub fn delete(
        &self,
        catalog: &Catalog,
        container: Container,
        key: &[u8],
        cas: Option<u64>,
    ) -> Result<ChangeOutcome, Error> {
        let _gate = self.gate.read();
        let (current, t) = self.current(catalog, container)?;
        let def = &current.tables[t];
        let result = self.on_located(def, container.via, key, RowOp::Delete { cas })?;
        Ok(match result {
            RowResult::Written(w) => ChangeOutcome::Done(Some(w)),
            RowResult::Outcome(WriteOutcome::Exists) => ChangeOutcome::Exists,
            _ => ChangeOutcome::NotFound,
        })
    }

    /// Gives the row `key` names in `container`, and its index entries, a new exptime
    /// (memcached's rule: relative, absolute, or negative for now). Returns the row as
    /// the container shows it, after the touch, with what was written.
    pub fn touch(
        &self,
        catalog: &Catalog,
        container: Container,
        key: &[u8],
        exptime: i64,
    ) -> Result<Option<RowItem>, Error> {
        let _gate = self.gate.read();
        let (current, t) = self.current(catalog, container)?;
        let def = &current.tables[t];
        let result = self.on_located(def, container.via, key, RowOp::Touch { exptime })?;
        Ok(match result {
            RowResult::Touched(values, item) => Some(RowItem {
                value: render(
                    def,
                    container.via,
                    &values.iter().map(Value::as_ref).collect::<Vec<_>>(),
                ),
                ..item
            }),
            _ => None,
        })
    }

    /// Runs `op` on the row a container's key names: by its row key, or through a unique
    /// index (looking the row up again if a writer moved it meanwhile).
    fn on_located(
        &self,
        def: &TableDef,
        via: Via,
        key: &[u8],
        op: RowOp,
    ) -> Result<RowResult, Error> {
        match via {
            Via::Primary => {
                let Some(rk) = Self::row_key_from_text(def, key) else {
                    return Ok(RowResult::Missing);
                };
                self.change_row(def, &rk, op, None)
            }
            Via::Index(i) => {
                if !def.table.indexes[i].kind.is_unique() {
                    return Err(value_error!(
                        "index {} is not unique: change the row through table {}",
                        def.table.indexes[i].name,
                        def.table.name
                    ));
                }
                for _ in 0..ATTEMPTS {
                    let Ok(Some((rk, value))) = self.locate(def, i, key) else {
                        return Ok(RowResult::Missing);
                    };
                    let holds = (def.table.indexes[i].column, value);
                    match self.change_row(def, &rk, op.clone(), Some(&holds))? {
                        RowResult::Moved | RowResult::Missing => {
                            self.counters.retries.fetch_add(1, Ordering::Relaxed);
                        }
                        other => return Ok(other),
                    }
                }
                Ok(RowResult::Missing)
            }
        }
    }
}

/// What to do to a row and its index entries.
#[derive(Debug, Clone)]
enum RowOp {
    Write {
        row: Arc<[u8]>,
        /// The unique-index entries the new row has.
        entries: Vec<(usize, Vec<u8>)>,
        /// The new row's values, for its ordered indexes.
        values: Vec<Value>,
        mode: WriteMode,
        client_flags: u32,
        exptime: i64,
    },
    Delete {
        cas: Option<u64>,
    },
    Touch {
        exptime: i64,
    },
}

/// What a change to a row came to.
#[derive(Debug)]
enum RowResult {
    /// Written: the row's record.
    Written(Written),
    /// A write's outcome other than stored, or a delete's CAS mismatch (`Exists`).
    Outcome(WriteOutcome),
    /// Touched: the row's values, and its item (the reply waits for the touch's LSN).
    Touched(Vec<Value>, RowItem),
    /// No such row.
    Missing,
    /// The row no longer holds the value it was found by.
    Moved,
}

/// What a write's mode makes of the row being there (its CAS) or not: None to go on.
fn refusal(mode: WriteMode, cas: Option<u64>) -> Option<WriteOutcome> {
    match (mode, cas) {
        (WriteMode::Add, Some(_)) | (WriteMode::Replace, None) => Some(WriteOutcome::NotStored),
        (WriteMode::Cas(_), None) => Some(WriteOutcome::NotFound),
        (WriteMode::Cas(want), Some(cas)) if want != cas => Some(WriteOutcome::Exists),
        _ => None,
    }
}

/// Whether a row's values `shown` and `values` agree in every uniquely indexed column.
fn same_unique_values(def: &TableDef, shown: &[ValueRef<'_>], values: &[Value]) -> bool {
    def.table
        .indexes
        .iter()
        .filter(|index| index.kind.is_unique())
        .all(|index| shown[index.column] == values[index.column].as_ref())
}

/// Decides one attempt of `op` on a row, given the current versions of the row and of
/// the entries locked with it (`keys`; entries the row held before start at `old_at`;
/// a write's new entries follow the row if `entries_locked`).
/// Returns the changes (None: none) and what the attempt came to.
fn decide_row(
    def: &TableDef,
    op: &RowOp,
    holds: Option<&(usize, Value)>,
    pk: &[u8],
    (keys, old_at, entries_locked): (&[Key<'_>], usize, bool),
    current: &[Option<ItemRef<'_>>],
    now: u32,
) -> Result<(Option<Vec<Change>>, Attempt), Error> {
    // Under the locks: borrow the row's text rather than copy it; only its ordered
    // indexes (and a touch, which shows the row) need it owned.
    let shown = current[0]
        .as_ref()
        .map(|item| row::decode_ref(item.value, &def.table))
        .transpose()?;
    let owned = |values: &[ValueRef<'_>]| values.iter().map(|v| v.to_value()).collect::<Vec<_>>();
    let old: Option<Vec<Value>> = match (&shown, op) {
        (Some(values), RowOp::Touch { .. }) => Some(owned(values)),
        (Some(values), _) if keeps_order(def) => Some(owned(values)),
        _ => None,
    };
    match (holds, &shown) {
        (Some((column, value)), Some(shown)) if shown[*column] != value.as_ref() => {
            return Ok((None, Attempt::Moved))
        }
        (Some(_), None) => return Ok((None, Attempt::Moved)),
        _ => {}
    }
    let row = current[0].as_ref();
    // The unique-index entries the row holds now.
    let old_entries = || match &shown {
        Some(values) => unique_keys_of_ref(def, values),
        None => Ok(Vec::new()),
    };
    if let RowOp::Write {
        row: row_bytes,
        entries,
        values,
        mode,
        client_flags,
        exptime,
    } = op
    {
        if let Some(outcome) = refusal(*mode, row.map(|r| r.cas)) {
            return Ok((None, Attempt::Done(RowResult::Outcome(outcome))));
        }
        if !entries_locked {
            // Only the row is locked. Its entries point at it while it holds their
            // values (every change to either is one batch under both locks), so a
            // write that keeps those values and the exptime its entries carry leaves
            // them as they are. Otherwise: lock the entries too and decide again.
            let exptime = exptime_to_absolute(*exptime, now);
            let same_values = shown
                .as_ref()
                .is_none_or(|shown| same_unique_values(def, shown, values));
            if same_values && (entries.is_empty() || row.is_some_and(|r| r.exptime == exptime)) {
                let put = Change::Put(NewItem {
                    exptime,
                    ..NewItem::new(Arc::clone(row_bytes), *client_flags)
                });
                return Ok((Some(vec![put]), Attempt::Wrote { old, exptime }));
            }
            let unlocked = old_entries()?
                .into_iter()
                .map(|(_, k)| k)
                .filter(|k| !entries.iter().any(|(_, e)| e == k))
                .collect();
            return Ok((None, Attempt::NeedKeys(unlocked)));
        }
    }
    // The row's current entries, each of which must be locked.
    let missing: Vec<Vec<u8>> = old_entries()?
        .into_iter()
        .map(|(_, k)| k)
        .filter(|k| !keys.iter().any(|e| e.bytes == k.as_slice()))
        .collect();
    if !missing.is_empty() {
        return Ok((None, Attempt::NeedKeys(missing)));
    }
    // An entry of the row's (it points at this primary key) at position `at`.
    let ours = |at: usize| current[at].as_ref().is_some_and(|e| **e.value == *pk);
    match op {
        RowOp::Write {
            row: row_bytes,
            entries,
            client_flags,
            exptime,
            ..
        } => {
            // Another row holds a value this row's unique index wants.
            if (0..entries.len()).any(|j| current[1 + j].is_some() && !ours(1 + j)) {
                return Ok((
                    None,
                    Attempt::Done(RowResult::Outcome(WriteOutcome::Duplicate)),
                ));
            }
            let exptime = exptime_to_absolute(*exptime, now);
            let mut changes = Vec::with_capacity(current.len());
            changes.push(Change::Put(NewItem {
                exptime,
                ..NewItem::new(Arc::clone(row_bytes), *client_flags)
            }));
            for j in 0..entries.len() {
                let unchanged = ours(1 + j)
                    && current[1 + j]
                        .as_ref()
                        .is_some_and(|e| e.exptime == exptime);
                changes.push(if unchanged {
                    Change::Keep
                } else {
                    Change::Put(NewItem {
                        exptime,
                        ..NewItem::new(Arc::from(pk), 0)
                    })
                });
            }
            // Entries of values the row no longer holds go.
            for at in old_at..current.len() {
                changes.push(if ours(at) {
                    Change::Delete
                } else {
                    Change::Keep
                });
            }
            Ok((Some(changes), Attempt::Wrote { old, exptime }))
        }
        RowOp::Delete { cas } => {
            let Some(row) = row else {
                return Ok((None, Attempt::Done(RowResult::Missing)));
            };
            if cas.is_some_and(|cas| cas != row.cas) {
                return Ok((
                    None,
                    Attempt::Done(RowResult::Outcome(WriteOutcome::Exists)),
                ));
            }
            let changes = (0..current.len())
                .map(|at| {
                    if at == 0 || ours(at) {
                        Change::Delete
                    } else {
                        Change::Keep
                    }
                })
                .collect();
            Ok((Some(changes), Attempt::Wrote { old, exptime: 0 }))
        }
        RowOp::Touch { exptime } => {
            let (Some(row), Some(values)) = (row, old) else {
                return Ok((None, Attempt::Done(RowResult::Missing)));
            };
            let exptime = exptime_to_absolute(*exptime, now);
            let changes = (0..current.len())
                .map(|at| {
                    if at == 0 || ours(at) {
                        Change::Touch {
                            exptime: Some(exptime),
                            mark_win_sent: false,
                        }
                    } else {
                        Change::Keep
                    }
                })
                .collect();
            let item = RowItem {
                value: Vec::new(),
                client_flags: row.client_flags,
                exptime,
                cas: row.cas,
                lsn: row.lsn,
            };
            Ok((
                Some(changes),
                Attempt::Done(RowResult::Touched(values, item)),
            ))
        }
    }
}
