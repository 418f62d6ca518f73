//! Changing tables that have rows: DROP TABLE, CREATE [UNIQUE] INDEX (its entries
//! filled from the rows), ALTER TABLE ... ADD COLUMN. Each is durable when it returns
//! and is finished at the next start if a crash cuts it short.
//!
//! A DDL statement takes the write side of the tables' gate, which every row write
//! (SQL batches, memcached's commands) holds the read side of while it runs: while an
//! index is filled, writes to tables wait and reads go on. A write that was planned
//! against a definition the DDL then changed is refused (SQL) or planned again against
//! the new one (memcached), never applied with the old one.
//!
//! - DROP TABLE: the stored catalog loses the table and lists its number as dropped;
//!   from then on nothing can reach its rows. Its rows and unique entries are deleted
//!   (a scan of the log), then the catalog forgets the number. A start that finds a
//!   dropped number purges it first.
//! - CREATE INDEX: the index is added to the stored catalog marked as being built (so
//!   its number is never given again), its entries are written from the rows, then
//!   the catalog in use gets it whole. A value two rows share refuses a unique index: the entries written so
//!   far are deleted and the catalog is as it was. A start that finds an index being
//!   built fills it again (the rows are those it was being filled from: writes waited).
//! - DROP INDEX: the stored catalog loses the index and lists its number as dropped;
//!   its entries are deleted, then the catalog forgets the number (a start that finds
//!   it purges it first).
//! - ADD COLUMN: only the catalog changes. A row stored before it decodes with the
//!   new column's default ([`crate::row::decode`]), so no row is rewritten.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use kura_engine::{Change, Key, NewItem, Space};

use crate::catalog::Catalog;
use crate::catalog::TableDef;
use crate::collation::Collation;
use crate::error::Error;
use crate::read::RowScan;
use crate::rows::{
    entry_space, index_key, unique_key, Tables, CATALOG_KEY, CATALOG_SPACE, INDEX_SPACE, ROW_SPACE,
    UNIQUE_SPACE,
};
use crate::schema::{parse_schema, Table};
use crate::value::{ColumnType, Value};

/// A unique entry to write: its key, the row's primary key, the row's exptime.
type EntryPut = (Vec<u8>, Arc<[u8]>, u32);

/// Keys written or deleted per engine batch while filling or purging.
const CHUNK: usize = 256;

/// Why a DDL statement changed nothing.
#[derive(Debug)]
pub enum DdlError {
    /// No table of that name.
    NoTable(String),
    /// A column of that name exists (MySQL's 1060).
    ColumnExists(String),
    /// An index of that name exists (MySQL's 1061).
    IndexExists(String),
    /// Two rows share `value` in the unique index being created (MySQL's 1062).
    Duplicate {
        index: String,
        value: String,
    },
    /// A change Kura does not make, in words.
    Refused(String),
    /// A table of that name exists (MySQL's 1050).
    TableExists(String),
    /// No index of that name (MySQL's 1091).
    NoIndex(String),
    /// No column of that name (MySQL's 1054).
    NoColumn(String),
    /// A column becomes NOT NULL where a row holds NULL (MySQL's 1138).
    NullInColumn(String),
    Failed(Error),
}

impl From<Error> for DdlError {
    fn from(e: Error) -> DdlError {
        match e {
            Error::Schema(why) | Error::Value(why) | Error::Mismatch(why) => DdlError::Refused(why),
            e => DdlError::Failed(e),
        }
    }
}

impl From<kura_engine::Error> for DdlError {
    fn from(e: kura_engine::Error) -> DdlError {
        DdlError::Failed(Error::Engine(e))
    }
}

impl Tables {
    /// Writes `next` as the stored catalog and waits until it is durable.
    pub(crate) fn store_catalog(&self, next: &Catalog) -> Result<(), Error> {
        let bytes: Arc<[u8]> = next.encode().into();
        let ((), written) = self.store.update(
            Key::new(CATALOG_SPACE, CATALOG_KEY),
            kura_engine::Access::NoAccess,
            |_, _| (Change::Put(NewItem::new(bytes, 0)), ()),
        )?;
        if let Some(w) = written {
            self.store.wait_acked(w.lsn)?;
        }
        Ok(())
    }

    /// Makes `next` the catalog in use.
    pub(crate) fn install_catalog(&self, next: Catalog) {
        let mut catalog = self.catalog.write();
        *catalog = Arc::new(next);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// CREATE DATABASE `name`: a namespace of tables, whose text columns take
    /// `collation` unless their table chooses one. Whether it was made (false: it
    /// exists).
    pub fn create_database(&self, name: &str, collation: Collation) -> Result<bool, DdlError> {
        crate::schema::check_name("database", name)?;
        let _gate = self.gate.write();
        let current = self.catalog();
        if current.has_database(name) {
            return Ok(false);
        }
        let mut next = (*current).clone();
        next.databases.push((name.to_string(), collation));
        self.store_catalog(&next)?;
        self.install_catalog(next);
        Ok(true)
    }

    /// DROP DATABASE `name`: every table of it, then the name. Whether it existed.
    pub fn drop_database(&self, name: &str) -> Result<bool, DdlError> {
        if name == crate::catalog::DEFAULT_DATABASE {
            return Err(DdlError::Refused(format!(
                "database {name} is the default one and stays"
            )));
        }
        loop {
            let catalog = self.catalog();
            if !catalog.has_database(name) {
                return Ok(false);
            }
            let tables: Vec<String> = catalog
                .tables_in(name)
                .map(|t| catalog.tables[t].table.name.clone())
                .collect();
            for table in &tables {
                match self.drop_table(table) {
                    Ok(()) | Err(DdlError::NoTable(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            let _gate = self.gate.write();
            let current = self.catalog();
            // A table made in it meanwhile goes too.
            if current.tables_in(name).next().is_some() {
                continue;
            }
            let mut next = (*current).clone();
            next.databases.retain(|(d, _)| d != name);
            self.store_catalog(&next)?;
            self.install_catalog(next);
            return Ok(true);
        }
    }

    /// TRUNCATE TABLE `name`: the table as it was declared, empty. It takes a new
    /// number in one change of the catalog (so its AUTO_INCREMENT starts again),
    /// and its rows and entries, keyed by the old one, go as a dropped table's do.
    pub fn truncate_table(&self, name: &str) -> Result<(), DdlError> {
        let old = {
            let _gate = self.gate.write();
            let (mut next, t) = self.to_change(name)?;
            let number = next.take_table_number()?;
            let old = std::mem::replace(&mut next.tables[t].number, number);
            // No row under the new number holds a dropped column's place.
            next.tables[t].table.dropped.clear();
            next.dropped.push(old);
            self.store_catalog(&next)?;
            self.install_catalog(next);
            old
        };
        self.purge_dropped(old)?;
        Ok(())
    }

    /// RENAME TABLE: each `(from, to)` pair (catalog names) in order, in one change
    /// of the catalog. A table's rows are keyed by its number, so none is rewritten;
    /// its containers take the new name.
    pub fn rename_tables(&self, pairs: &[(String, String)]) -> Result<(), DdlError> {
        let _gate = self.gate.write();
        let mut next = (*self.catalog()).clone();
        for (from, to) in pairs {
            let t = next
                .table(from)
                .ok_or_else(|| DdlError::NoTable(from.clone()))?;
            self.check_ddl(next.tables[t].number)?;
            if next.table(to).is_some() {
                return Err(DdlError::TableExists(to.clone()));
            }
            let (database, table) = crate::catalog::database_of(to);
            if !next.has_database(database) {
                return Err(DdlError::Refused(format!("Unknown database '{database}'")));
            }
            crate::schema::check_name("table", table)?;
            next.tables[t].table.name = to.clone();
        }
        next.check_containers()?;
        self.store_catalog(&next)?;
        self.install_catalog(next);
        Ok(())
    }

    /// DROP INDEX `index` ON `table`: the catalog loses it (and lists its number as
    /// dropped, so a crash before its entries are gone purges them at the next
    /// start), then its entries are deleted.
    pub fn drop_index(&self, table: &str, index: &str) -> Result<(), DdlError> {
        let dropped = {
            let _gate = self.gate.write();
            let (mut next, t) = self.to_change(table)?;
            let def = &mut next.tables[t];
            let position = def
                .table
                .index_named(index)
                .ok_or_else(|| DdlError::NoIndex(index.to_string()))?;
            if def.building.is_some() {
                return Err(DdlError::Refused(
                    "an index of the table is being built".into(),
                ));
            }
            def.table.indexes.remove(position);
            let number = def.index_numbers.remove(position);
            let dropped = (def.number, number);
            next.dropped_indexes.push(dropped);
            self.store_catalog(&next)?;
            self.install_catalog(next);
            dropped
        };
        self.purge_dropped_index(dropped)?;
        Ok(())
    }

    /// Deletes the entries of dropped index `(table, index)`, then forgets it.
    fn purge_dropped_index(&self, (table, index): (u32, u16)) -> Result<(), Error> {
        let mut prefix = table.to_be_bytes().to_vec();
        prefix.extend_from_slice(&index.to_be_bytes());
        for space in [UNIQUE_SPACE, INDEX_SPACE] {
            self.delete_keys(space, &prefix)?;
        }
        let _gate = self.gate.write();
        let mut next = (*self.catalog()).clone();
        next.dropped_indexes.retain(|&d| d != (table, index));
        self.store_catalog(&next)?;
        self.install_catalog(next);
        Ok(())
    }

    /// DROP TABLE `name`: its rows and entries go with it.
    pub fn drop_table(&self, name: &str) -> Result<(), DdlError> {
        let number = {
            let _gate = self.gate.write();
            let (mut next, t) = self.to_change(name)?;
            let number = next.tables.remove(t).number;
            next.dropped.push(number);
            self.store_catalog(&next)?;
            self.install_catalog(next);
            number
        };
        self.purge_dropped(number)?;
        Ok(())
    }

    /// Deletes the rows and entries of dropped table `number`, then forgets it.
    fn purge_dropped(&self, number: u32) -> Result<(), Error> {
        let prefix = number.to_be_bytes();
        for space in [ROW_SPACE, UNIQUE_SPACE, INDEX_SPACE] {
            self.delete_keys(space, &prefix)?;
        }
        let _gate = self.gate.write();
        let mut next = (*self.catalog()).clone();
        next.dropped.retain(|&n| n != number);
        self.store_catalog(&next)?;
        self.install_catalog(next);
        Ok(())
    }

    /// Deletes every live key of `space` that starts with `prefix`.
    pub(crate) fn delete_keys(&self, space: Space, prefix: &[u8]) -> Result<(), Error> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        self.store.scan_space(space, |key, _| {
            if key.starts_with(prefix) {
                keys.push(key.to_vec());
            }
        })?;
        for chunk in keys.chunks(CHUNK) {
            let engine_keys: Vec<Key<'_>> = chunk.iter().map(|k| Key::new(space, k)).collect();
            self.store.update_batch(&engine_keys, |current, _| {
                let changes = current
                    .iter()
                    .map(|c| match c {
                        Some(_) => Change::Delete,
                        None => Change::Keep,
                    })
                    .collect();
                (changes, ())
            })?;
        }
        Ok(())
    }

    /// A copy of the catalog in use to change, and the position of `table` in it.
    fn to_change(&self, table: &str) -> Result<(Catalog, usize), DdlError> {
        let next = (*self.catalog()).clone();
        let t = next
            .table(table)
            .ok_or_else(|| DdlError::NoTable(table.to_string()))?;
        self.check_ddl(next.tables[t].number)?;
        Ok((next, t))
    }

    /// ALTER TABLE `table` ADD COLUMN, the column as SQL declares it (`name TYPE ...`).
    pub fn add_column(&self, table: &str, column: &str) -> Result<(), DdlError> {
        let _gate = self.gate.write();
        let (mut next, t) = self.to_change(table)?;
        let def = &next.tables[t];
        let mut changed = changed_table(&def.table, &format!(",\n  {column}"), ",\n  PRIMARY KEY")?;
        let added = changed.columns[changed.columns.len() - 1].clone();
        if def.table.column_index(&added.name).is_some() {
            return Err(DdlError::ColumnExists(added.name));
        }
        if added.default_now {
            // The rows there would need the time of this ALTER, which no row holds.
            return Err(DdlError::Refused(
                "ADD COLUMN ... DEFAULT CURRENT_TIMESTAMP: give it a constant default".into(),
            ));
        }
        if changed.indexes.len() != def.table.indexes.len()
            || changed.primary != def.table.primary
            || keep_positions(&def.table, &mut changed).is_err()
        {
            return Err(DdlError::Refused(
                "ADD COLUMN adds a plain column; make its index with CREATE INDEX".into(),
            ));
        }
        if added.not_null && added.default.is_none() {
            return Err(DdlError::Refused(format!(
                "column {} is NOT NULL: give it a DEFAULT for the rows there now",
                added.name
            )));
        }
        next.tables[t].table = changed;
        self.store_catalog(&next)?;
        self.install_catalog(next);
        Ok(())
    }

    /// ALTER TABLE `table` CHANGE, MODIFY or RENAME COLUMN: column `old` becomes
    /// `column` as SQL declares it (`name TYPE ...`), in its place. Made when no row
    /// needs rewriting: the same type or a wider one (`ColumnType::widens_to`), and an
    /// indexed column's keys the same (its collation too); NOT NULL where a row holds
    /// NULL is 1138, and a default, a comment or AUTO_INCREMENT change freely.
    pub fn change_column(&self, table: &str, old: &str, column: &str) -> Result<(), DdlError> {
        let _gate = self.gate.write();
        let (mut next, t) = self.to_change(table)?;
        let def = &next.tables[t];
        let Some(c) = def.table.column_index(old) else {
            return Err(DdlError::NoColumn(old.to_string()));
        };
        let was = &def.table.columns[c];
        // The DDL with the column under its new name (its indexes name it too), then
        // its line as `column` declares it.
        let mut renamed = def.table.clone();
        let new_name = new_column_name(column);
        if !new_name.eq_ignore_ascii_case(&was.name) && def.table.column_index(&new_name).is_some()
        {
            return Err(DdlError::ColumnExists(new_name));
        }
        renamed.columns[c].name = new_name;
        let mut sql = renamed.to_sql();
        let line = format!("\n  `{}` ", renamed.columns[c].name);
        let (Some(start), Some(pk)) = (sql.find(&line), sql.find("\n  PRIMARY KEY")) else {
            return Err(DdlError::Refused(format!("column {old} is not in the DDL")));
        };
        let end = start + 1 + sql[start + 1..].find('\n').unwrap_or(pk - start - 1);
        sql.replace_range(start + 1..end, &format!("  {column},"));
        let mut changed = parse_one(&sql)?;
        changed.dropped = def.table.dropped.clone();
        if changed.columns.len() != def.table.columns.len()
            || changed.primary != def.table.primary
            || changed.indexes.len() != def.table.indexes.len()
            || keep_positions(&def.table, &mut changed).is_err()
            || changed.indexes != def.table.indexes
        {
            return Err(DdlError::Refused(
                "CHANGE and MODIFY COLUMN keep the column's keys; change indexes with CREATE and DROP INDEX".into(),
            ));
        }
        changed.check_auto_key()?;
        let now = &changed.columns[c];
        let keyed = c == def.table.primary || def.table.indexes.iter().any(|i| i.column == c);
        if !was.ty.widens_to(now.ty) {
            return Err(DdlError::Refused(format!(
                "MODIFY COLUMN from {} to {}: only to a type that holds every value as it is stored (a wider integer of the same sign, longer text), since every row would be rewritten",
                was.ty, now.ty
            )));
        }
        if was.ty == ColumnType::Enum && !now.members.starts_with(&was.members) {
            return Err(DdlError::Refused(format!(
                "MODIFY COLUMN of ENUM {}: its members stay, in their places (new ones go after them)",
                was.name
            )));
        }
        if keyed && was.rule() != now.rule() {
            return Err(DdlError::Refused(format!(
                "column {} is a key: its collation stays, as its keys are made by it",
                was.name
            )));
        }
        if now.not_null && !was.not_null && self.holds_null(def, c)? {
            return Err(DdlError::NullInColumn(now.name.clone()));
        }
        next.tables[t].table = changed;
        self.store_catalog(&next)?;
        self.install_catalog(next);
        Ok(())
    }

    /// ALTER TABLE `table` RENAME COLUMN `old` TO `new`: the column as it is, named
    /// anew (rows hold columns by position and indexes name them by it, so nothing
    /// else changes).
    pub fn rename_column(&self, table: &str, old: &str, new: &str) -> Result<(), DdlError> {
        let _gate = self.gate.write();
        let (mut next, t) = self.to_change(table)?;
        let def = &mut next.tables[t].table;
        let Some(c) = def.column_index(old) else {
            return Err(DdlError::NoColumn(old.to_string()));
        };
        if def.column_index(new).is_some_and(|other| other != c) {
            return Err(DdlError::ColumnExists(new.to_string()));
        }
        crate::schema::check_name("column", new)?;
        def.columns[c].name = new.to_string();
        self.store_catalog(&next)?;
        self.install_catalog(next);
        Ok(())
    }

    /// ALTER TABLE `table` DROP COLUMN `column`: gone at once, with the indexes on it
    /// (their entries deleted after, as DROP INDEX's are); no row is rewritten: its
    /// place among a row's values stays, passed over when a row is read
    /// (`Table::dropped`). The primary key's column is refused. Whether it existed.
    pub fn drop_column(&self, table: &str, column: &str) -> Result<bool, DdlError> {
        let dropped_indexes = {
            let _gate = self.gate.write();
            let (mut next, t) = self.to_change(table)?;
            let def = &mut next.tables[t];
            let Some(c) = def.table.column_index(column) else {
                return Ok(false);
            };
            if c == def.table.primary {
                return Err(DdlError::Refused(format!(
                    "column {column} is the primary key, which a table keeps"
                )));
            }
            if def.building.is_some() {
                return Err(DdlError::Refused(
                    "an index of the table is being built".into(),
                ));
            }
            // Its place among a row's values: past the places dropped before it.
            let mut place = 0;
            let mut logical = 0;
            loop {
                if def.table.dropped.binary_search(&place).is_err() {
                    if logical == c {
                        break;
                    }
                    logical += 1;
                }
                place += 1;
            }
            let mut gone = Vec::new();
            let mut i = 0;
            while i < def.table.indexes.len() {
                if def.table.indexes[i].column == c {
                    def.table.indexes.remove(i);
                    gone.push((def.number, def.index_numbers.remove(i)));
                } else {
                    i += 1;
                }
            }
            let t_def = &mut def.table;
            t_def.columns.remove(c);
            for index in &mut t_def.indexes {
                if index.column > c {
                    index.column -= 1;
                }
            }
            if t_def.primary > c {
                t_def.primary -= 1;
            }
            let at = t_def.dropped.partition_point(|&p| p < place);
            t_def.dropped.insert(at, place);
            next.dropped_indexes.extend(gone.iter().copied());
            next.check_containers()?;
            self.store_catalog(&next)?;
            self.install_catalog(next);
            gone
        };
        for index in dropped_indexes {
            self.purge_dropped_index(index)?;
        }
        Ok(true)
    }

    /// Whether any row of `def` holds NULL in column `c` (the whole table read).
    fn holds_null(&self, def: &TableDef, c: usize) -> Result<bool, Error> {
        let mut scan = RowScan::new(def);
        loop {
            let batch = scan.next_rows(self, def)?;
            if batch.is_empty() {
                return Ok(false);
            }
            if batch.iter().any(|row| row.values[c].is_null()) {
                return Ok(true);
            }
        }
    }

    /// CREATE INDEX on `table`: `index` is the index as a table declares it (`[UNIQUE]
    /// KEY name (column) [USING BTREE]`).
    pub fn create_index(&self, table: &str, index: &str) -> Result<(), DdlError> {
        let _gate = self.gate.write();
        let (mut next, t) = self.to_change(table)?;
        let def = &next.tables[t];
        // The name after KEY or INDEX, if the index has one.
        let named = index
            .split_whitespace()
            .skip_while(|w| !w.eq_ignore_ascii_case("KEY") && !w.eq_ignore_ascii_case("INDEX"))
            .nth(1)
            .map(|w| w.trim_matches('`'))
            .filter(|w| !w.starts_with('('));
        if let Some(name) = named.filter(|n| def.table.index_named(n).is_some()) {
            return Err(DdlError::IndexExists(name.to_string()));
        }
        let mut changed = changed_table(&def.table, &format!(",\n  {index}"), "\n)")?;
        if changed.indexes.len() != def.table.indexes.len() + 1 {
            return Err(DdlError::Refused(
                "CREATE INDEX makes one index of one column".into(),
            ));
        }
        keep_positions(&def.table, &mut changed)?;
        let position = changed.indexes.len() - 1;
        let mut building = def.clone();
        building.table = changed;
        building.index_numbers.push(def.next_index);
        building.next_index = def
            .next_index
            .checked_add(1)
            .ok_or_else(|| DdlError::Refused(format!("table {table} is out of index numbers")))?;
        building.building = Some(position);
        next.tables[t] = building;
        self.store_catalog(&next)?;
        self.fill_index(&mut next, t)
    }

    /// Fills the index table `t` of `next` is building, then makes it whole in the
    /// stored catalog and the one in use; or, when two rows share a unique value,
    /// deletes its entries and restores the catalog without it. The caller holds the
    /// gate.
    fn fill_index(&self, next: &mut Catalog, t: usize) -> Result<(), DdlError> {
        let def = next.tables[t].clone();
        let Some(position) = def.building else {
            return Ok(());
        };
        let index = &def.table.indexes[position];
        if let Some(value) = self.write_entries(&def, position)? {
            // The entries of this index number, from this build or one cut short.
            let mut prefix = def.number.to_be_bytes().to_vec();
            prefix.extend_from_slice(&def.index_numbers[position].to_be_bytes());
            self.delete_keys(UNIQUE_SPACE, &prefix)?;
            let mut undone = def.clone();
            undone.table.indexes.remove(position);
            undone.index_numbers.remove(position);
            undone.building = None;
            next.tables[t] = undone;
            self.store_catalog(next)?;
            return Err(DdlError::Duplicate {
                index: index.name.clone(),
                value,
            });
        }
        next.tables[t].building = None;
        self.store_catalog(next)?;
        self.install_catalog(next.clone());
        Ok(())
    }

    /// Writes the entries of index `position` of `def` for every row the table has;
    /// for a unique index, none when two rows share a value: then that value.
    fn write_entries(&self, def: &TableDef, position: usize) -> Result<Option<String>, Error> {
        let index = &def.table.indexes[position];
        let unique = index.kind.is_unique();
        // Of each row only its primary key and the indexed value are kept: the table
        // may be far larger than memory, its keys are not.
        let mut rows: Vec<(Vec<u8>, Value, u32)> = Vec::new();
        let mut scan = RowScan::new(def);
        loop {
            let batch = scan.next_rows(self, def)?;
            if batch.is_empty() {
                break;
            }
            for row in batch {
                let pk = &row.values[def.table.primary];
                let mut rk = def.number.to_be_bytes().to_vec();
                let rule = def.table.primary_column().rule();
                crate::keys::encode_as(pk, rule, crate::keys::Position::Last, &mut rk);
                let value = row
                    .values
                    .into_iter()
                    .nth(index.column)
                    .unwrap_or(Value::Null);
                rows.push((rk, value, row.exptime));
            }
        }
        let mut entries: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut puts: Vec<EntryPut> = Vec::new();
        for (i, (rk, value, exptime)) in rows.iter().enumerate() {
            let key = if unique {
                unique_key(def, position, value)?
            } else {
                index_key(def, position, value, &rk[4..])?
            };
            let Some(ek) = key else {
                continue;
            };
            if unique && entries.insert(ek.clone(), i).is_some() {
                let mut text = Vec::new();
                value.as_ref().write_text(&mut text);
                return Ok(Some(String::from_utf8_lossy(&text).into_owned()));
            }
            puts.push((ek, Arc::from(&rk[4..]), *exptime));
        }
        self.put_entries(entry_space(def, position), &puts)?;
        Ok(None)
    }

    /// Writes index entries of `space` (key, the row's primary key, its exptime).
    fn put_entries(&self, space: Space, entries: &[EntryPut]) -> Result<(), Error> {
        let mut last = None;
        for chunk in entries.chunks(CHUNK) {
            let keys: Vec<Key<'_>> = chunk.iter().map(|(k, _, _)| Key::new(space, k)).collect();
            let ((), written) = self.store.update_batch(&keys, |_, _| {
                let changes = chunk
                    .iter()
                    .map(|(_, pk, exptime)| {
                        Change::Put(NewItem {
                            exptime: *exptime,
                            ..NewItem::new(Arc::clone(pk), 0)
                        })
                    })
                    .collect();
                (changes, ())
            })?;
            last = written.iter().flatten().map(|w| w.lsn).max().or(last);
        }
        if let Some(lsn) = last {
            self.store.wait_acked(lsn)?;
        }
        Ok(())
    }

    /// Finishes what a crash cut short (see the module's docs): called at open,
    /// before the catalog is in use.
    pub(crate) fn finish_ddl(&self) -> Result<(), Error> {
        let mut next = (*self.catalog()).clone();
        if next.index_entries_missing {
            // A catalog from before every index had entries in the log.
            for def in &next.tables {
                for (position, index) in def.table.indexes.iter().enumerate() {
                    if !index.kind.is_unique() && def.building != Some(position) {
                        self.write_entries(def, position)?;
                    }
                }
            }
            next.index_entries_missing = false;
            self.store_catalog(&next)?;
            self.install_catalog(next.clone());
        }
        if next.dropped.is_empty()
            && next.dropped_indexes.is_empty()
            && next.tables.iter().all(|d| d.building.is_none())
        {
            return Ok(());
        }
        for t in 0..next.tables.len() {
            match self.fill_index(&mut next, t) {
                Ok(()) | Err(DdlError::Duplicate { .. }) => {}
                Err(DdlError::Failed(e)) => return Err(e),
                Err(e) => return Err(Error::Format(format!("finishing an index: {e:?}"))),
            }
        }
        self.install_catalog(next.clone());
        for number in next.dropped.clone() {
            self.purge_dropped(number)?;
        }
        for dropped in next.dropped_indexes.clone() {
            self.purge_dropped_index(dropped)?;
        }
        Ok(())
    }
}

/// `table` with `text` inserted before the last `before` of its canonical DDL.
/// The name a column's SQL (`name TYPE ...`, the name maybe quoted) gives it.
fn new_column_name(column: &str) -> String {
    let column = column.trim_start();
    match column.strip_prefix('`') {
        Some(rest) => {
            // A quoted name ends at a backtick not doubled.
            let mut name = String::new();
            let mut chars = rest.chars().peekable();
            while let Some(ch) = chars.next() {
                if ch == '`' {
                    if chars.peek() == Some(&'`') {
                        chars.next();
                    } else {
                        break;
                    }
                }
                name.push(ch);
            }
            name
        }
        None => column.split_whitespace().next().unwrap_or("").to_string(),
    }
}

fn changed_table(table: &Table, text: &str, before: &str) -> Result<Table, Error> {
    let mut sql = table.to_sql();
    let at = sql.rfind(before).unwrap_or(sql.len());
    sql.insert_str(at, text);
    let mut changed = parse_one(&sql)?;
    // Not in the DDL: the rows' places of dropped columns stay.
    changed.dropped = table.dropped.clone();
    Ok(changed)
}

/// Puts `changed`'s indexes that `old` has at the positions they have there (their
/// entries and ordered sets are keyed by them; DDL read back may list them in another
/// order); any new one comes after them.
fn keep_positions(old: &Table, changed: &mut Table) -> Result<(), DdlError> {
    let mut indexes = Vec::with_capacity(changed.indexes.len());
    for index in &old.indexes {
        match changed.indexes.iter().position(|i| i.name == index.name) {
            Some(i) => indexes.push(changed.indexes.remove(i)),
            None => return Err(DdlError::Refused(format!("index {} went", index.name))),
        }
    }
    indexes.append(&mut changed.indexes);
    changed.indexes = indexes;
    Ok(())
}

fn parse_one(sql: &str) -> Result<Table, Error> {
    let mut tables = parse_schema(sql)?;
    match tables.len() {
        1 => Ok(tables.remove(0)),
        _ => Err(Error::Schema("one table".into())),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kura_engine::sim::{SimDisk, Tear};
    use kura_engine::{Durability, ManualClock, Options, Store};

    use super::*;
    use crate::batch::{no_upsert, OnConflict, RowChange};
    use crate::catalog::{TableDef, Via};

    // Text as bytes, as every table's was before collations (a catalog that an older
    // node reads, rewritten below as an older format).
    const SCHEMA: &str =
        "CREATE TABLE p (id INT PRIMARY KEY, name VARCHAR(9), lvl INT) COLLATE=utf8mb4_bin;
        CREATE TABLE q (k INT PRIMARY KEY, v VARCHAR(9), UNIQUE KEY v (v)) COLLATE=utf8mb4_bin";

    fn open(disk: &SimDisk) -> Tables {
        let clock = Arc::new(ManualClock::new(1_700_000_000));
        let mut options = Options::new(Durability::Fsync, clock);
        options.fsync_interval = Duration::from_millis(1);
        options.ordered_spaces = crate::ordered_spaces();
        let store = Store::open(Arc::new(disk.clone()), options).expect("store");
        Tables::open(Arc::new(store)).expect("tables")
    }

    /// Power off (what was written stays) and start again.
    fn crash(disk: &SimDisk, tables: Tables) -> Tables {
        disk.power_loss(Tear::KeepWritten);
        drop(tables);
        disk.revive();
        open(disk)
    }

    fn def(tables: &Tables, name: &str) -> TableDef {
        let catalog = tables.catalog();
        catalog.tables[catalog.table(name).expect("table")].clone()
    }

    fn load(tables: &Tables) {
        tables.apply_schema(SCHEMA).expect("schema");
        let catalog = tables.catalog();
        let mut changes = Vec::new();
        for i in 0..40 {
            for (t, name) in [(0, format!("n{i}")), (1, format!("v{i}"))] {
                changes.push(RowChange::Insert {
                    table: catalog.tables[t].number,
                    values: vec![
                        Value::Int(i),
                        Value::Bytes(name.into_bytes()),
                        Value::Int(i % 3),
                    ][..if t == 0 { 3 } else { 2 }]
                        .to_vec(),
                    conflict: OnConflict::Fail,
                });
            }
        }
        let applied = tables
            .apply_changes(&catalog, &changes, &mut no_upsert)
            .expect("rows");
        tables
            .store
            .wait_acked(applied.lsn.expect("lsn"))
            .expect("acked");
    }

    fn entries(tables: &Tables, space: Space, prefix: &[u8]) -> usize {
        let mut n = 0;
        tables
            .store
            .scan_space(space, |k, _| n += usize::from(k.starts_with(prefix)))
            .expect("scan");
        n
    }

    /// A dropped column's place stays in the rows written before and after the drop,
    /// its index goes, and all of it outlasts a crash; a column added after takes a
    /// place of its own.
    #[test]
    fn a_dropped_column_keeps_its_place_in_the_rows_through_a_crash() {
        let disk = SimDisk::new();
        let tables = open(&disk);
        load(&tables);
        tables.create_index("p", "KEY name (name)").expect("index");
        let number = def(&tables, "p").number;
        assert!(tables.drop_column("p", "name").expect("drop"));
        assert!(!tables.drop_column("p", "name").expect("again"));
        assert!(matches!(
            tables.drop_column("p", "id"),
            Err(DdlError::Refused(_))
        ));
        assert_eq!(entries(&tables, INDEX_SPACE, &number.to_be_bytes()), 0);
        tables
            .add_column("p", "score INT DEFAULT 5")
            .expect("column");
        let p = def(&tables, "p");
        assert_eq!(p.table.dropped, vec![1]);
        assert!(p.table.indexes.is_empty());
        let change = RowChange::Insert {
            table: p.number,
            values: vec![Value::Int(100), Value::Int(2), Value::Int(9)],
            conflict: OnConflict::Fail,
        };
        let applied = tables
            .commit_changes(
                &tables.catalog(),
                &[change],
                &Default::default(),
                &mut no_upsert,
            )
            .expect("insert");
        // Acknowledged, so durable before the power goes.
        let lsn = applied.lsn.expect("written");
        tables.store.wait_acked(lsn).expect("acked");
        assert_eq!(tables.catalog().encode()[0], 6);
        let tables = crash(&disk, tables);
        let p = def(&tables, "p");
        assert_eq!(p.table.dropped, vec![1]);
        let read = |id: i64| {
            tables
                .row_by_pk(&p, &Value::Int(id))
                .expect("read")
                .unwrap_or_else(|| panic!("no row {id}"))
                .values
        };
        assert_eq!(read(7), vec![Value::Int(7), Value::Int(1), Value::Int(5)]);
        assert_eq!(
            read(100),
            vec![Value::Int(100), Value::Int(2), Value::Int(9)]
        );
    }

    #[test]
    fn ddl_outlasts_a_crash() {
        let disk = SimDisk::new();
        let tables = open(&disk);
        load(&tables);
        let q = def(&tables, "q").number;
        match tables.create_index("p", "UNIQUE KEY lvl (lvl)") {
            Err(DdlError::Duplicate { index, .. }) => assert_eq!(index, "lvl"),
            other => panic!("{other:?}"),
        }
        tables
            .create_index("p", "UNIQUE KEY name (name)")
            .expect("index");
        tables.create_index("p", "KEY lvl (lvl)").expect("index");
        tables
            .add_column("p", "score INT DEFAULT 5")
            .expect("column");
        tables.drop_table("q").expect("drop");
        assert_eq!(entries(&tables, ROW_SPACE, &q.to_be_bytes()), 0);
        assert_eq!(entries(&tables, UNIQUE_SPACE, &q.to_be_bytes()), 0);
        let tables = crash(&disk, tables);
        let p = def(&tables, "p");
        assert!(tables.catalog().table("q").is_none());
        assert!(tables.catalog().dropped.is_empty());
        let name = p.table.index_named("name").expect("name index");
        let row = tables
            .row_by_unique(&p, name, &Value::Bytes(b"n7".to_vec()))
            .expect("read")
            .expect("row");
        assert_eq!(
            row.values,
            vec![
                Value::Int(7),
                Value::Bytes(b"n7".to_vec()),
                Value::Int(1),
                Value::Int(5)
            ]
        );
        let lvl = p.table.index_named("lvl").expect("lvl index");
        assert!(tables.is_ordered(&p, Via::Index(lvl)));
        let all = crate::ordered::Range {
            lower: std::ops::Bound::Unbounded,
            upper: std::ops::Bound::Unbounded,
            folded: false,
        };
        let pks = tables
            .ordered_pks(&p, Via::Index(lvl), &all, 100)
            .ok()
            .flatten();
        assert_eq!(pks.map(|v| v.len()), Some(40));
    }

    /// A catalog of format 2 kept a non-unique index in memory only: a start writes
    /// its entries from the rows, and stores the catalog as format 3 (or 4).
    #[test]
    fn a_start_writes_the_entries_an_older_catalog_kept_in_memory() {
        let disk = SimDisk::new();
        let tables = open(&disk);
        load(&tables);
        let mut next = (*tables.catalog()).clone();
        let p = &mut next.tables[0];
        let sql = p.table.to_sql().replace("\n)", ",\n  KEY lvl (lvl)\n)");
        p.table = parse_one(&sql).expect("ddl");
        p.index_numbers.push(p.next_index);
        p.next_index += 1;
        let mut bytes = next.encode();
        bytes[0] = 2;
        let bytes: Arc<[u8]> = bytes.into();
        let ((), written) = tables
            .store
            .update(
                Key::new(CATALOG_SPACE, CATALOG_KEY),
                kura_engine::Access::NoAccess,
                |_, _| (Change::Put(NewItem::new(bytes, 0)), ()),
            )
            .expect("catalog");
        tables
            .store
            .wait_acked(written.expect("written").lsn)
            .expect("acked");
        let tables = crash(&disk, tables);
        let p = def(&tables, "p");
        assert_eq!(entries(&tables, INDEX_SPACE, &p.number.to_be_bytes()), 40);
        let range = crate::ordered::Range {
            lower: std::ops::Bound::Included(Value::Int(1)),
            upper: std::ops::Bound::Included(Value::Int(1)),
            folded: false,
        };
        let pks = tables
            .ordered_pks(&p, Via::Index(0), &range, 100)
            .expect("range")
            .expect("ordered");
        let ids: Vec<Value> = pks
            .iter()
            .map(|pk| {
                let row = tables.row_by_pk_bytes(&p, pk).expect("row").expect("live");
                row.values[0].clone()
            })
            .collect();
        let want: Vec<Value> = (0..40).filter(|i| i % 3 == 1).map(Value::Int).collect();
        assert_eq!(ids, want);
        let stored = tables
            .store
            .peek(Key::new(CATALOG_SPACE, CATALOG_KEY))
            .expect("peek")
            .expect("catalog");
        assert_eq!(stored.value[0], 3, "stored again as format 3");
    }

    #[test]
    fn a_start_finishes_an_index_build_and_a_purge_a_crash_cut_short() {
        let disk = SimDisk::new();
        let tables = open(&disk);
        load(&tables);
        // The stored catalog as a crash would leave it: an index listed as being built
        // with none of its entries written, and a dropped table whose rows remain.
        let mut next = (*tables.catalog()).clone();
        let q = next.tables.remove(1).number;
        next.dropped.push(q);
        let p = &mut next.tables[0];
        let sql = p
            .table
            .to_sql()
            .replace("\n)", ",\n  UNIQUE KEY name (name)\n)");
        p.table = parse_one(&sql).expect("ddl");
        p.index_numbers.push(p.next_index);
        p.next_index += 1;
        p.building = Some(0);
        tables.store_catalog(&next).expect("catalog");
        let tables = crash(&disk, tables);
        assert_eq!(entries(&tables, ROW_SPACE, &q.to_be_bytes()), 0);
        let p = def(&tables, "p");
        assert_eq!(p.building, None);
        let row = tables
            .row_by_unique(&p, 0, &Value::Bytes(b"n39".to_vec()))
            .expect("read")
            .expect("row");
        assert_eq!(row.values[0], Value::Int(39));
        let stored = tables.catalog();
        assert!(stored.dropped.is_empty() && stored.table("q").is_none());
    }

    #[test]
    fn a_dropped_index_loses_its_entries_now_or_at_the_next_start() {
        let disk = SimDisk::new();
        let tables = open(&disk);
        load(&tables);
        tables
            .create_index("p", "UNIQUE KEY name (name)")
            .expect("index");
        tables.create_index("p", "KEY lvl (lvl)").expect("index");
        let p = def(&tables, "p");
        let prefix = |i: usize| {
            let mut k = p.number.to_be_bytes().to_vec();
            k.extend_from_slice(&p.index_numbers[i].to_be_bytes());
            k
        };
        let (name, lvl) = (prefix(0), prefix(1));
        assert_eq!(entries(&tables, UNIQUE_SPACE, &name), 40);
        assert_eq!(entries(&tables, INDEX_SPACE, &lvl), 40);
        assert!(matches!(
            tables.drop_index("p", "nosuch"),
            Err(DdlError::NoIndex(_))
        ));
        tables.drop_index("p", "name").expect("drop");
        assert_eq!(entries(&tables, UNIQUE_SPACE, &name), 0);
        assert!(def(&tables, "p").table.index_named("name").is_none());
        // As a crash leaves it: the catalog without the index, its entries there.
        let mut next = (*tables.catalog()).clone();
        let t = next.table("p").expect("p");
        let number = next.tables[t].index_numbers.remove(0);
        next.tables[t].table.indexes.remove(0);
        next.dropped_indexes.push((p.number, number));
        tables.store_catalog(&next).expect("catalog");
        let tables = crash(&disk, tables);
        assert_eq!(entries(&tables, INDEX_SPACE, &lvl), 0);
        assert!(tables.catalog().dropped_indexes.is_empty());
        assert!(def(&tables, "p").table.indexes.is_empty());
    }
}
