//! Tables moving to another server (issue 42's table moves): what a source shard's
//! primary keeps of each table it is giving away, and the target's side, a table
//! taken in with the numbers its rows are copied under.
//!
//! A table being moved is sealed, in memory, in one of three ways:
//! - [`Seal::Moving`]: its rows are being copied; writes go on, but no DDL changes it
//!   (the target copies its rows by the definition the move began with).
//! - [`Seal::Held`]: the hand-off: no row write is made (each is refused with
//!   [`ApplyError::Moving`] and made again by its caller, on whichever shard holds
//!   the table when the hand-off ends). Taking this seal waits for every row write in
//!   progress (the gate), so the log holds every change to the table up to its end.
//! - [`Seal::Gone`]: the table is the target's now: writes are refused until it is
//!   dropped here.
//!
//! What it is not for: where the table lives or the etcd steps (the server's), or
//! copying the rows (the server's copy reads the source's log).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use crate::batch::{ApplyError, RowChange};
use crate::catalog::{Catalog, TableDef};
use crate::ddl::DdlError;
use crate::error::{value_error, Error};
use crate::rows::{INDEX_SPACE, ROW_SPACE, UNIQUE_SPACE};
use crate::Tables;

/// What a DDL statement's refusal says of a table being moved.
pub const MOVING_DDL: &str = "is being moved to another shard";

/// How a table being moved away is sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    Moving,
    Held,
    Gone,
}

/// The sealed tables, by number.
#[derive(Debug, Default)]
pub struct Seals {
    map: parking_lot::Mutex<HashMap<u32, (String, Seal)>>,
    /// Whether any table is sealed: a row write looks no further when none is.
    any: std::sync::atomic::AtomicBool,
}

impl Seals {
    fn set(&self, number: u32, name: &str, seal: Option<Seal>) {
        let mut map = self.map.lock();
        match seal {
            Some(s) => {
                map.insert(number, (name.to_string(), s));
            }
            None => {
                map.remove(&number);
            }
        }
        self.any.store(!map.is_empty(), Ordering::Release);
    }

    fn of(&self, number: u32) -> Option<(String, Seal)> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.map.lock().get(&number).cloned()
    }
}

impl Tables {
    /// Seals table `name` (its catalog name) as `seal`, and returns its number. A
    /// seal that stops writes waits for those in progress first.
    pub fn seal(&self, name: &str, seal: Seal) -> Result<u32, Error> {
        let _gate = self.gate.write();
        let catalog = self.catalog();
        let t = catalog
            .table(name)
            .ok_or_else(|| value_error!("no table {name} to seal"))?;
        let number = catalog.tables[t].number;
        self.seals.set(number, name, Some(seal));
        Ok(number)
    }

    /// Lifts table `number`'s seal.
    pub fn unseal(&self, number: u32) {
        self.seals.set(number, "", None);
    }

    /// How table `number` is sealed, if it is.
    pub fn seal_of(&self, number: u32) -> Option<Seal> {
        self.seals.of(number).map(|(_, s)| s)
    }

    /// Every sealed table: its number, name and seal.
    pub fn sealed(&self) -> Vec<(u32, String, Seal)> {
        if !self.seals.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        let map = self.seals.map.lock();
        map.iter()
            .map(|(&n, (name, seal))| (n, name.clone(), *seal))
            .collect()
    }

    /// Whether a hand-off holds the writes of any table now.
    pub fn holding(&self) -> bool {
        self.seals.any.load(Ordering::Acquire)
            && self
                .seals
                .map
                .lock()
                .values()
                .any(|(_, s)| *s == Seal::Held)
    }

    /// Refuses a write batch naming a table whose writes are held or gone. The
    /// caller holds the gate.
    pub(crate) fn check_unsealed(&self, changes: &[RowChange]) -> Result<(), ApplyError> {
        if !self.seals.any.load(Ordering::Acquire) {
            return Ok(());
        }
        for change in changes {
            if let Some((name, Seal::Held | Seal::Gone)) = self.seals.of(change.table()) {
                return Err(ApplyError::Moving(name));
            }
        }
        Ok(())
    }

    /// Refuses DDL on a table being moved (the gate is held): [`MOVING_DDL`] says
    /// why.
    pub(crate) fn check_ddl(&self, number: u32) -> Result<(), DdlError> {
        match self.seals.of(number) {
            Some((name, Seal::Moving | Seal::Held)) => Err(DdlError::Refused(format!(
                "table {name} {MOVING_DDL}: change it once the move is done"
            ))),
            _ => Ok(()),
        }
    }

    /// Takes in a table another server gives this one: `described` is
    /// [`Catalog::describe_table`]'s bytes there. It gets a number of this catalog's,
    /// its indexes keep theirs (the entries' keys name them), and its database is made
    /// if this catalog has none of that name. Returns the number, under which its rows
    /// and entries are then written as they are copied. A table of that name here
    /// already is refused ([`DdlError::TableExists`]).
    pub fn import_table(&self, described: &[u8]) -> Result<u32, DdlError> {
        let theirs = Catalog::decode(described)?;
        let Some(def) = theirs.tables.first() else {
            return Err(DdlError::Refused("a described table with no table".into()));
        };
        let _gate = self.gate.write();
        let mut next = (*self.catalog()).clone();
        if next.table(&def.table.name).is_some() {
            return Err(DdlError::TableExists(def.table.name.clone()));
        }
        let database = crate::catalog::database_of(&def.table.name).0;
        if !next.has_database(database) {
            let collation = theirs.database_collation(database);
            next.databases.push((database.to_string(), collation));
        }
        let number = next.take_table_number()?;
        next.tables.push(TableDef {
            number,
            building: None,
            ..def.clone()
        });
        next.check_containers()?;
        self.store_catalog(&next)?;
        self.install_catalog(next);
        Ok(number)
    }

    /// Deletes every row and index entry of table `number` through the log (a copy
    /// into it that starts again from the beginning).
    pub fn clear_table_keys(&self, number: u32) -> Result<(), Error> {
        let prefix = number.to_be_bytes();
        for space in [ROW_SPACE, UNIQUE_SPACE, INDEX_SPACE] {
            self.delete_keys(space, &prefix)?;
        }
        Ok(())
    }
}

impl Catalog {
    /// Table `name` as a catalog of its own (with its database, if not the default),
    /// in the catalog's format: what a move hands the target, which reads it back
    /// with [`Tables::import_table`]. None if there is no such table, or an index of
    /// it is being built.
    pub fn describe_table(&self, name: &str) -> Option<Vec<u8>> {
        let def = self.tables.get(self.table(name)?)?;
        if def.building.is_some() {
            return None;
        }
        let mut one = Catalog::new();
        let database = crate::catalog::database_of(name).0;
        if let Some(d) = self.databases.iter().find(|(d, _)| d == database) {
            one.databases.push(d.clone());
        }
        one.next_table_number = def.number.saturating_add(1);
        one.tables.push(def.clone());
        Some(one.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tables() -> Tables {
        use kura_engine::sim::SimDisk;
        use kura_engine::{Durability, ManualClock, Options, Store};
        let clock = Arc::new(ManualClock::new(1_700_000_000));
        let mut options = Options::new(Durability::Fsync, clock);
        options.fsync_interval = std::time::Duration::from_millis(1);
        options.ordered_spaces = crate::ordered_spaces();
        let store = Store::open(Arc::new(SimDisk::new()), options).expect("store");
        Tables::open(Arc::new(store)).expect("tables")
    }

    #[test]
    fn a_described_table_is_taken_in_under_a_number_of_its_own_with_its_indexes() {
        let (source, target) = (tables(), tables());
        source
            .apply_schema(
                "CREATE TABLE p (id INT PRIMARY KEY, email VARCHAR(20) NOT NULL, \
                 UNIQUE KEY email (email))",
            )
            .expect("create on source");
        target
            .apply_schema("CREATE TABLE q (id INT PRIMARY KEY)")
            .expect("q");
        let described = source.catalog().describe_table("p").expect("described");
        let number = target.import_table(&described).expect("import");
        let catalog = target.catalog();
        let def = &catalog.tables[catalog.table("p").expect("p there")];
        let theirs = &source.catalog().tables[0];
        assert_eq!(def.number, number);
        assert_ne!(number, theirs.number, "q took the source's number here");
        assert_eq!(def.index_numbers, theirs.index_numbers);
        assert_eq!(def.table, theirs.table);
        assert!(matches!(
            target.import_table(&described),
            Err(DdlError::TableExists(_))
        ));
    }

    #[test]
    fn a_sealed_table_refuses_ddl_and_held_writes() {
        let tables = tables();
        tables
            .apply_schema("CREATE TABLE p (id INT PRIMARY KEY, n INT)")
            .expect("create");
        let number = tables.seal("p", Seal::Moving).expect("seal");
        assert!(matches!(
            tables.add_column("p", "m INT"),
            Err(DdlError::Refused(_))
        ));
        assert!(!tables.holding());
        let insert = |n: i64| RowChange::Insert {
            table: number,
            values: vec![crate::Value::Int(n), crate::Value::Null],
            conflict: crate::OnConflict::Fail,
        };
        let catalog = tables.catalog();
        tables
            .apply_changes(&catalog, &[insert(1)], &mut crate::no_upsert)
            .expect("a moving table is written");
        tables.seal("p", Seal::Held).expect("hold");
        assert!(tables.holding());
        assert!(matches!(
            tables.apply_changes(&catalog, &[insert(2)], &mut crate::no_upsert),
            Err(ApplyError::Moving(name)) if name == "p"
        ));
        tables.unseal(number);
        tables
            .apply_changes(&catalog, &[insert(2)], &mut crate::no_upsert)
            .expect("written once unsealed");
        tables.add_column("p", "m INT").expect("DDL once unsealed");
    }
}
