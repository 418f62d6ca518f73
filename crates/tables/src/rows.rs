//! Tables over the store: the catalog record, and rows read and written through their
//! containers with every index entry changed in the same atomic engine batch.
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
//! A write of a row (memcached's here, SQL's from the SQL layer) goes through the one
//! batch engine ([`crate::batch`]): it reads the row's current version under the locks
//! of the row and of every index entry it will touch, so it knows which entries to
//! delete; if the row holds an indexed value the write did not lock (another writer
//! changed it meanwhile), the write lets go and tries again with that entry's key too.
//!
//! Reads through a unique index look the entry up, then the row, and check that the
//! row still holds the value: a writer between the two lookups makes the read look
//! again, so a read never returns a row under a value it no longer has.
//!
//! What it is not for: memcached's syntax (the server's), and its own rules (win
//! tokens, stale items, flush_all), which never reach tables.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kura_engine::{Access, Item, Key, Space, Store, Written, KEY_MAX_BYTES};
use parking_lot::RwLock;

use crate::catalog::{Catalog, Container, TableDef, Via};
use crate::error::{value_error, Error};
use crate::ordered::parse_range;
use crate::reads::TableWrites;
use crate::schema::parse_schema;
use crate::text::{self, Field};
use crate::value::{Value, ValueRef};
use crate::{keys, row};

// A container's reads (`get.rs`) and memcached's writes, which map onto the batch
// (`write.rs`); the catalog, the keys and a row's text, which both use, are here.
mod get;
mod write;

/// The key spaces tables keep their records in.
pub const CATALOG_SPACE: Space = Space(1);
pub const ROW_SPACE: Space = Space(2);
pub const UNIQUE_SPACE: Space = Space(3);
/// A non-unique index's entries: the table's number, the index's number, the value
/// (encoded to be followed) and the primary key; the value is the primary key too.
pub const INDEX_SPACE: Space = Space(4);

pub(crate) const CATALOG_KEY: &[u8] = b"catalog";

/// The key spaces the store keeps in order for the tables: the rows and every index's
/// entries, so the primary key and every index are read by range
/// ([`kura_engine::Store::ordered_range`]). The entries are held there: they have no
/// slot in the store's index, so a table's indexes cost no memory per entry (a
/// unique entry read by value is found through the B-tree).
pub fn ordered_spaces() -> kura_engine::OrderedSpaces {
    kura_engine::OrderedSpaces::default()
        .with(ROW_SPACE)
        .with_held(UNIQUE_SPACE)
        .with_held(INDEX_SPACE)
}

/// The key space index `index` of `def` keeps its entries in.
pub(crate) fn entry_space(def: &TableDef, index: usize) -> Space {
    if def.table.indexes[index].kind.is_unique() {
        UNIQUE_SPACE
    } else {
        INDEX_SPACE
    }
}

/// The entry of a row in non-unique index `index` of `def`: its value `value` and its
/// primary key `pk` (encoded); None for a NULL, which no index holds.
pub(crate) fn index_key(
    def: &TableDef,
    index: usize,
    value: &Value,
    pk: &[u8],
) -> Result<Option<Vec<u8>>, Error> {
    if value.is_null() {
        return Ok(None);
    }
    let rule = def.table.columns[def.table.indexes[index].column].rule();
    let mut key =
        Vec::with_capacity(6 + keys::encoded_len(value, keys::Position::Inner) + pk.len());
    key.extend_from_slice(&def.number.to_be_bytes());
    key.extend_from_slice(&def.index_numbers[index].to_be_bytes());
    keys::encode_as(value, rule, keys::Position::Inner, &mut key);
    key.extend_from_slice(pk);
    if key.len() > KEY_MAX_BYTES {
        let column = &def.table.columns[def.table.indexes[index].column].name;
        return Err(value_error!(
            "value of column {column} and the primary key are {} bytes, longer than the {} an index entry holds",
            key.len() - 6,
            KEY_MAX_BYTES - 6
        ));
    }
    Ok(Some(key))
}

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

/// The rows of a range, as [`Tables::range`] reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRows {
    /// Each row's primary key as text, and the row as its table's container shows it.
    pub rows: Vec<(Vec<u8>, RowItem)>,
    /// The range holds more rows than [`RANGE_ROWS_MAX`]: `rows` are its first ones.
    pub cut: bool,
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
    /// Writes to each table's rows, for the scans of transactions ([`crate::reads`]).
    pub(crate) writes: TableWrites,
    pub counters: TableCounters,
    /// AUTO_INCREMENT's counters ([`crate::autoinc`]).
    pub(crate) auto: crate::AutoCounters,
    /// Tables being moved to another server ([`crate::seal`]).
    pub(crate) seals: crate::seal::Seals,
}

/// A connection's copy of the catalog, and the generation it was current at.
pub type CatalogCache = Option<(u64, Arc<Catalog>)>;

/// The most rows one range returns.
pub const RANGE_ROWS_MAX: usize = 1000;

/// A row's engine key.
pub(crate) fn row_key(def: &TableDef, pk: &Value) -> Result<Vec<u8>, Error> {
    let mut key = Vec::with_capacity(4 + keys::encoded_len(pk, keys::Position::Last));
    key.extend_from_slice(&def.number.to_be_bytes());
    keys::encode_as(
        pk,
        def.table.primary_column().rule(),
        keys::Position::Last,
        &mut key,
    );
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
    let rule = def.table.columns[def.table.indexes[index].column].rule();
    let mut key = Vec::with_capacity(6 + keys::encoded_len(value, keys::Position::Last));
    key.extend_from_slice(&def.number.to_be_bytes());
    key.extend_from_slice(&def.index_numbers[index].to_be_bytes());
    keys::encode_as(value, rule, keys::Position::Last, &mut key);
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

/// Every index entry of the row `values` of `def`, unique and not: each index's
/// number and the entry's key, in the space [`entry_space`] gives.
pub(crate) fn entry_keys_of(
    def: &TableDef,
    values: &[Value],
) -> Result<Vec<(usize, Vec<u8>)>, Error> {
    let mut pk = Vec::new();
    let mut out = Vec::new();
    for (i, index) in def.table.indexes.iter().enumerate() {
        let key = if index.kind.is_unique() {
            unique_key(def, i, &values[index.column])?
        } else {
            if pk.is_empty() {
                keys::encode_as(
                    &values[def.table.primary],
                    def.table.primary_column().rule(),
                    keys::Position::Last,
                    &mut pk,
                );
            }
            index_key(def, i, &values[index.column], &pk)?
        };
        if let Some(key) = key {
            out.push((i, key));
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
            column.parse_text(key)?
        } else {
            match fields.next() {
                Some(Field::Null) if column.not_null => {
                    return Err(value_error!("column {} cannot be NULL", column.name))
                }
                Some(Field::Null) | None => Value::Null,
                Some(Field::Bytes(b)) => column.parse_owned(b)?,
            }
        };
        values.push(value);
    }
    Ok(values)
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
            writes: TableWrites::default(),
            counters: TableCounters::default(),
            auto: crate::AutoCounters::default(),
            seals: crate::seal::Seals::default(),
        };
        // A replica's catalog is its primary's: a change left half done there is
        // finished there (or here, on promotion).
        if !tables.store.is_read_only() {
            tables.finish_ddl()?;
        }
        Ok(tables)
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
        self.apply_tables(parse_schema(sql)?)
    }

    /// [`Tables::apply_schema`], its tables in database `database` (which must exist)
    /// whatever database their DDL names.
    pub fn apply_schema_in(&self, sql: &str, database: &str) -> Result<Vec<String>, Error> {
        let default = self.catalog().database_collation(database);
        let mut declared = crate::schema::parse_schema_in(sql, default)?;
        for table in &mut declared {
            let own = crate::catalog::database_of(&table.name).1.to_string();
            table.name = crate::catalog::qualified(database, &own);
        }
        self.apply_tables(declared)
    }

    fn apply_tables(&self, declared: Vec<crate::Table>) -> Result<Vec<String>, Error> {
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
}
