//! The catalog: every table, with the numbers its rows and index entries are keyed by,
//! and the memcached containers that reach them.
//!
//! The catalog is one engine record (its own key space, one key), so it is replayed,
//! checkpointed and carried through compaction as any record is, and a change to it is
//! one atomic write. `docs/format.md` documents the value:
//!
//! | size | field |
//! |---|---|
//! | 1 | catalog format version (6; 1 to 5 are still read: 3 says every index has its entries in the log, 4 adds the databases, 5 their collations and says the DDL's collations count (before 5 all text is `utf8mb4_bin`), 6 the places of dropped columns) |
//! | varint | the next table number |
//! | varint | tables n, then n × table |
//! | varint | dropped tables d, then d × varint number (format 2) |
//! | varint | databases b, then b × (varint name length, name) (format 4), each followed in format 5 by (varint length, its default collation's name) |
//! | varint | dropped indexes i, then i × (varint table number, varint index number) (format 4) |
//!
//! A table: varint number, varint indexes m, m × (varint index number, varint name
//! length, name), varint DDL length, the DDL; in format 2 then varint next index
//! number and varint index being built (0: none, else its position + 1); in format 6
//! then varint count of dropped columns and each one's place among a row's values. The DDL is
//! the table's canonical `CREATE TABLE` ([`Table::to_sql`]), read back with the same
//! parser as a schema file, so the catalog needs no second description of a table.
//!
//! Numbers are never reused: a table's rows and index entries are keyed by them. A
//! dropped table's number stays listed until its rows and entries are purged; an index
//! being built is listed with its number so that a build cut short by a crash is
//! finished (or undone) at the next start ([`crate::ddl`]).
//!
//! Containers, as the InnoDB memcached plugin named them: table `t` is the container
//! `t`, keyed by its primary key; index `i` of `t` is the container `t_by_i`, keyed by
//! the indexed column (point lookups through unique indexes; ranges through any).

use crate::collation::Collation;
use crate::error::{schema_error, Error};
use crate::row::{put_varint, Reader};
use crate::schema::{parse_schema, Table};

const CATALOG_FORMAT: u8 = 6;

/// The database every connection starts in, and that tables named alone belong to.
pub const DEFAULT_DATABASE: &str = "kura";

/// A table's name in the catalog: `table` in the default database, else
/// `database.table` (a name holds no '.', so the two never meet).
pub fn qualified(database: &str, table: &str) -> String {
    if database == DEFAULT_DATABASE {
        table.to_string()
    } else {
        format!("{database}.{table}")
    }
}

/// A catalog name's database and table: the inverse of [`qualified`].
pub fn database_of(name: &str) -> (&str, &str) {
    name.split_once('.').unwrap_or((DEFAULT_DATABASE, name))
}

/// Table numbers start here; the engine's key-space byte tells tables apart from
/// plain keys, so the number only tells tables apart from one another.
const FIRST_TABLE_NUMBER: u32 = 1;

/// A table with the numbers its keys use.
#[derive(Debug, Clone, PartialEq)]
pub struct TableDef {
    pub number: u32,
    pub table: Table,
    /// The number of each of `table.indexes`, in the same order.
    pub index_numbers: Vec<u16>,
    /// The number the next index created on the table takes.
    pub next_index: u16,
    /// The position of an index whose entries are being filled (in the stored catalog
    /// only: the catalog in use lists an index once it is whole).
    pub building: Option<usize>,
}

/// What a container name leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The table's primary key.
    Primary,
    /// `table.indexes[i]`.
    Index(usize),
}

/// A container: a table and the key it is read by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Container {
    /// Position of the table in the catalog.
    pub table: usize,
    pub via: Via,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Catalog {
    pub tables: Vec<TableDef>,
    pub(crate) next_table_number: u32,
    /// Tables dropped whose rows and entries are not all purged yet.
    pub dropped: Vec<u32>,
    /// Indexes dropped whose entries are not all purged yet: (table number, index
    /// number).
    pub dropped_indexes: Vec<(u32, u16)>,
    /// The databases made by `CREATE DATABASE`, in order, each with the collation its
    /// tables' text takes by default; [`DEFAULT_DATABASE`] is not among them (it
    /// always exists, with [`Collation::DEFAULT`]).
    pub databases: Vec<(String, Collation)>,
    /// Read from a catalog of format 2 or older, whose non-unique indexes had no
    /// entries in the log (they were kept in memory): a start writes them
    /// ([`crate::Tables::open`]). Not stored.
    pub(crate) index_entries_missing: bool,
}

impl TableDef {
    /// The column a container or a cursor reads the table by.
    pub fn key_column(&self, via: Via) -> &crate::schema::Column {
        match via {
            Via::Primary => self.table.primary_column(),
            Via::Index(i) => &self.table.columns[self.table.indexes[i].column],
        }
    }
}

impl Catalog {
    pub fn new() -> Catalog {
        Catalog {
            tables: Vec::new(),
            next_table_number: FIRST_TABLE_NUMBER,
            dropped: Vec::new(),
            dropped_indexes: Vec::new(),
            databases: Vec::new(),
            index_entries_missing: false,
        }
    }

    /// The default collation of database `name` (the default database's is
    /// [`Collation::DEFAULT`]).
    pub fn database_collation(&self, name: &str) -> Collation {
        self.databases
            .iter()
            .find(|(d, _)| d == name)
            .map_or(Collation::DEFAULT, |&(_, collation)| collation)
    }

    /// Whether every text column and database compares as bytes, as every one did
    /// before format 5: a node of an older version reads such a catalog right.
    fn all_binary(&self) -> bool {
        self.databases.iter().all(|(_, c)| *c == Collation::BIN)
            && self.tables.iter().all(|t| {
                t.table.collation == Collation::BIN
                    && t.table
                        .columns
                        .iter()
                        .all(|c| c.collation.is_none_or(|c| c == Collation::BIN))
            })
    }

    /// The table named `name` ([`qualified`] for a database other than the default).
    pub fn table(&self, name: &str) -> Option<usize> {
        self.tables.iter().position(|t| t.table.name == name)
    }

    /// A new table number, never used before.
    pub(crate) fn take_table_number(&mut self) -> Result<u32, Error> {
        let number = self.next_table_number;
        self.next_table_number = number
            .checked_add(1)
            .ok_or_else(|| schema_error!("out of table numbers"))?;
        Ok(number)
    }

    /// Whether database `name` exists: the default one, or one `CREATE DATABASE` made.
    pub fn has_database(&self, name: &str) -> bool {
        name == DEFAULT_DATABASE || self.databases.iter().any(|(d, _)| d == name)
    }

    /// Every database, the default one first.
    pub fn database_names(&self) -> Vec<String> {
        let mut names = vec![DEFAULT_DATABASE.to_string()];
        names.extend(self.databases.iter().map(|(d, _)| d.clone()));
        names
    }

    /// The positions of the tables of database `database`.
    pub fn tables_in<'a>(&'a self, database: &'a str) -> impl Iterator<Item = usize> + 'a {
        self.tables
            .iter()
            .enumerate()
            .filter(move |(_, def)| database_of(&def.table.name).0 == database)
            .map(|(t, _)| t)
    }

    /// The container named `name`: a table, or `table_by_index`.
    pub fn container(&self, name: &str) -> Option<Container> {
        if let Some(table) = self.table(name) {
            return Some(Container {
                table,
                via: Via::Primary,
            });
        }
        self.tables.iter().enumerate().find_map(|(t, def)| {
            let rest = name
                .strip_prefix(def.table.name.as_str())?
                .strip_prefix("_by_")?;
            let index = def.table.index_named(rest)?;
            Some(Container {
                table: t,
                via: Via::Index(index),
            })
        })
    }

    /// Every container name, with what it leads to.
    pub fn containers(&self) -> Vec<(String, Container)> {
        let mut out = Vec::new();
        for (t, def) in self.tables.iter().enumerate() {
            out.push((
                def.table.name.clone(),
                Container {
                    table: t,
                    via: Via::Primary,
                },
            ));
            for (i, index) in def.table.indexes.iter().enumerate() {
                out.push((
                    format!("{}_by_{}", def.table.name, index.name),
                    Container {
                        table: t,
                        via: Via::Index(i),
                    },
                ));
            }
        }
        out
    }

    /// The catalog with the tables `declared` adds: each that exists must be the same
    /// table (else the error names the difference); each that does not is created.
    /// Returns None when nothing is new.
    pub fn with_schema(&self, declared: Vec<Table>) -> Result<Option<Catalog>, Error> {
        let mut next = self.clone();
        for table in declared {
            match self.table(&table.name) {
                Some(t) => {
                    if let Some(why) = self.tables[t].table.difference(&table) {
                        return Err(Error::Mismatch(format!(
                            "{why} (changing a table comes with SQL's ALTER TABLE)"
                        )));
                    }
                }
                None => {
                    let database = database_of(&table.name).0;
                    if !next.has_database(database) {
                        return Err(schema_error!("Unknown database '{database}'"));
                    }
                    table.check_auto_key()?;
                    let number = next.next_table_number;
                    next.next_table_number = number
                        .checked_add(1)
                        .ok_or_else(|| schema_error!("out of table numbers"))?;
                    let next_index = table.indexes.len() as u16 + 1;
                    let index_numbers = (1..next_index).collect();
                    next.tables.push(TableDef {
                        number,
                        table,
                        index_numbers,
                        next_index,
                        building: None,
                    });
                }
            }
        }
        next.check_containers()?;
        Ok((next != *self).then_some(next))
    }

    /// Every container name leads to one place: a table `a_by_b` beside a table `a`
    /// with an index `b` would make `@@a_by_b` mean two things.
    pub(crate) fn check_containers(&self) -> Result<(), Error> {
        let mut names: Vec<String> = self
            .containers()
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(schema_error!(
                "container name {} would mean two things: rename a table or an index",
                pair[0]
            ));
        }
        Ok(())
    }

    pub fn encode(&self) -> Vec<u8> {
        // Format 3 while no database was made, so that a node of the version before
        // reads it (a rolling upgrade's replicas).
        let format = if self.tables.iter().any(|t| !t.table.dropped.is_empty()) {
            CATALOG_FORMAT
        } else if !self.all_binary() {
            5
        } else if self.databases.is_empty() && self.dropped_indexes.is_empty() {
            3
        } else {
            4
        };
        let mut out = vec![format];
        put_varint(&mut out, u64::from(self.next_table_number));
        put_varint(&mut out, self.tables.len() as u64);
        for def in &self.tables {
            put_varint(&mut out, u64::from(def.number));
            put_varint(&mut out, def.index_numbers.len() as u64);
            for (number, index) in def.index_numbers.iter().zip(&def.table.indexes) {
                put_varint(&mut out, u64::from(*number));
                put_varint(&mut out, index.name.len() as u64);
                out.extend_from_slice(index.name.as_bytes());
            }
            let sql = def.table.to_sql();
            put_varint(&mut out, sql.len() as u64);
            out.extend_from_slice(sql.as_bytes());
            put_varint(&mut out, u64::from(def.next_index));
            put_varint(&mut out, def.building.map_or(0, |b| b as u64 + 1));
            if format >= 6 {
                put_varint(&mut out, def.table.dropped.len() as u64);
                for &place in &def.table.dropped {
                    put_varint(&mut out, place as u64);
                }
            }
        }
        put_varint(&mut out, self.dropped.len() as u64);
        for number in &self.dropped {
            put_varint(&mut out, u64::from(*number));
        }
        if format >= 4 {
            put_varint(&mut out, self.databases.len() as u64);
            for (name, collation) in &self.databases {
                put_varint(&mut out, name.len() as u64);
                out.extend_from_slice(name.as_bytes());
                if format >= 5 {
                    put_varint(&mut out, collation.name().len() as u64);
                    out.extend_from_slice(collation.name().as_bytes());
                }
            }
            put_varint(&mut out, self.dropped_indexes.len() as u64);
            for (table, index) in &self.dropped_indexes {
                put_varint(&mut out, u64::from(*table));
                put_varint(&mut out, u64::from(*index));
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Catalog, Error> {
        let bad = |why: String| Error::Format(format!("catalog: {why}"));
        let mut r = Reader { buf: bytes };
        let version = r.u8()?;
        if !(1..=CATALOG_FORMAT).contains(&version) {
            return Err(bad(format!("format version {version}")));
        }
        let number = |v: u64| u32::try_from(v).map_err(|_| bad(format!("number {v}")));
        let next_table_number = number(r.varint()?)?;
        let count = r.varint()?;
        let mut tables = Vec::new();
        for _ in 0..count {
            let table_number = number(r.varint()?)?;
            let indexes = r.varint()?;
            let mut named = Vec::new();
            for _ in 0..indexes {
                let n = u16::try_from(r.varint()?).map_err(|_| bad("index number".into()))?;
                let name = std::str::from_utf8(r.bytes()?)
                    .map_err(|_| bad("index name".into()))?
                    .to_string();
                named.push((n, name));
            }
            let sql = std::str::from_utf8(r.bytes()?).map_err(|_| bad("DDL".into()))?;
            let table = match parse_schema(sql) {
                Ok(mut t) if t.len() == 1 && version >= 5 => t.remove(0),
                // Text compared as bytes before format 5, whatever the DDL said.
                Ok(mut t) if t.len() == 1 => {
                    let mut table = t.remove(0);
                    table.collation = Collation::BIN;
                    for column in &mut table.columns {
                        if column.collation.is_some() {
                            column.collation = Some(Collation::BIN);
                        }
                    }
                    table
                }
                Ok(_) => return Err(bad("DDL of other than one table".into())),
                Err(e) => return Err(bad(format!("DDL: {e}"))),
            };
            let index_numbers = table
                .indexes
                .iter()
                .map(|index| {
                    named
                        .iter()
                        .find(|(_, name)| *name == index.name)
                        .map(|(n, _)| *n)
                        .ok_or_else(|| bad(format!("no number for index {}", index.name)))
                })
                .collect::<Result<Vec<u16>, Error>>()?;
            let first_free = index_numbers.iter().max().map_or(1, |n| n + 1);
            let (next_index, building) = if version == 1 {
                (first_free, None)
            } else {
                let next = u16::try_from(r.varint()?).map_err(|_| bad("index number".into()))?;
                let building = match r.varint()? {
                    0 => None,
                    b if b <= index_numbers.len() as u64 => Some(b as usize - 1),
                    b => return Err(bad(format!("index {b} being built"))),
                };
                (next, building)
            };
            let mut table = table;
            if version >= 6 {
                for _ in 0..r.varint()? {
                    let place = usize::try_from(r.varint()?).map_err(|_| bad("place".into()))?;
                    if table.dropped.last().is_some_and(|&last| last >= place) {
                        return Err(bad(format!("table {} dropped columns", table.name)));
                    }
                    table.dropped.push(place);
                }
            }
            if named.len() != index_numbers.len()
                || table_number >= next_table_number
                || next_index < first_free
            {
                return Err(bad(format!("table {} numbers", table.name)));
            }
            tables.push(TableDef {
                number: table_number,
                table,
                index_numbers,
                next_index,
                building,
            });
        }
        let mut dropped = Vec::new();
        if version >= 2 {
            for _ in 0..r.varint()? {
                dropped.push(number(r.varint()?)?);
            }
        }
        let mut databases = Vec::new();
        let mut dropped_indexes = Vec::new();
        if version >= 4 {
            for _ in 0..r.varint()? {
                let name = std::str::from_utf8(r.bytes()?).map_err(|_| bad("database".into()))?;
                let collation = if version >= 5 {
                    let name = std::str::from_utf8(r.bytes()?).unwrap_or("");
                    Collation::named(name).ok_or_else(|| bad(format!("collation {name}")))?
                } else {
                    Collation::BIN
                };
                databases.push((name.to_string(), collation));
            }
            for _ in 0..r.varint()? {
                let table = number(r.varint()?)?;
                let index = u16::try_from(r.varint()?).map_err(|_| bad("index number".into()))?;
                dropped_indexes.push((table, index));
            }
        }
        if !r.buf.is_empty() {
            return Err(bad("bytes after the last table".into()));
        }
        let catalog = Catalog {
            tables,
            next_table_number,
            dropped,
            dropped_indexes,
            databases,
            index_entries_missing: version < 3,
        };
        catalog.check_containers().map_err(|e| bad(e.to_string()))?;
        Ok(catalog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = "
        CREATE TABLE players (id INT PRIMARY KEY, name VARCHAR(20), email VARCHAR(50),
            level INT, UNIQUE KEY email (email), KEY level (level));
        CREATE TABLE items (sku CHAR(8) PRIMARY KEY, price DOUBLE) COMMENT 'separator=,';";

    #[test]
    fn a_schema_creates_tables_once_and_the_catalog_round_trips() {
        let declared = parse_schema(SCHEMA).unwrap();
        let catalog = Catalog::new()
            .with_schema(declared.clone())
            .unwrap()
            .unwrap();
        assert_eq!(catalog.tables.len(), 2);
        assert_eq!(catalog.tables[0].number, 1);
        assert_eq!(catalog.tables[1].number, 2);
        assert_eq!(Catalog::decode(&catalog.encode()), Ok(catalog.clone()));
        // The same schema again changes nothing.
        assert_eq!(catalog.with_schema(declared), Ok(None));
        // Damage is an error, never a panic.
        let bytes = catalog.encode();
        for cut in 0..bytes.len() {
            assert!(Catalog::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_database_holds_tables_of_its_own_and_round_trips() {
        let binary = crate::schema::parse_schema_in(SCHEMA, Collation::BIN).unwrap();
        let catalog = Catalog::new().with_schema(binary).unwrap().unwrap();
        // Format 3 while there is no database of its own and all text is binary: an
        // older node reads it.
        assert_eq!(catalog.encode()[0], 3);
        let other = crate::schema::parse_schema_in(
            "CREATE TABLE `d`.`players` (id INT PRIMARY KEY, level INT, KEY level (level))",
            Collation::BIN,
        )
        .unwrap();
        assert!(
            catalog.with_schema(other.clone()).is_err(),
            "no database d yet"
        );
        let mut with_d = catalog.clone();
        with_d.databases.push(("d".into(), Collation::BIN));
        let next = with_d.with_schema(other).unwrap().unwrap();
        assert_eq!(next.encode()[0], 4);
        assert_eq!(Catalog::decode(&next.encode()), Ok(next.clone()));
        // A case-insensitive table, or database, needs format 5, which keeps them.
        let mut ci = next.clone();
        ci.databases.push(("e".into(), Collation::DEFAULT));
        assert_eq!(ci.encode()[0], 5);
        assert_eq!(Catalog::decode(&ci.encode()), Ok(ci.clone()));
        let ci =
            next.with_schema(parse_schema("CREATE TABLE t (s VARCHAR(3) PRIMARY KEY)").unwrap());
        let ci = ci.unwrap().unwrap();
        assert_eq!(ci.encode()[0], 5);
        assert_eq!(Catalog::decode(&ci.encode()), Ok(ci.clone()));
        // A format 4 catalog's text is binary whatever its DDL says (without databases,
        // format 5 has format 4's layout).
        let alone = Catalog::new()
            .with_schema(parse_schema("CREATE TABLE t (s VARCHAR(3) PRIMARY KEY)").unwrap())
            .unwrap()
            .unwrap();
        let mut old = alone.encode();
        old[0] = 4;
        let read = Catalog::decode(&old).unwrap();
        let t = &read.tables[read.table("t").unwrap()].table;
        assert_eq!(t.columns[0].collation, Some(Collation::BIN));
        // The schema that made it still declares it: it is the same table.
        let again = parse_schema("CREATE TABLE t (s VARCHAR(3) PRIMARY KEY)").unwrap();
        assert_eq!(read.with_schema(again), Ok(None));
        let (kura, d) = (
            next.table("players").unwrap(),
            next.table("d.players").unwrap(),
        );
        assert_ne!(next.tables[kura].number, next.tables[d].number);
        assert_eq!(next.tables_in("d").collect::<Vec<_>>(), vec![d]);
        assert_eq!(next.tables_in(DEFAULT_DATABASE).count(), 2);
        assert_eq!(
            next.container("d.players_by_level"),
            Some(Container {
                table: d,
                via: Via::Index(0)
            })
        );
        assert_eq!(database_of("d.players"), ("d", "players"));
        assert_eq!(qualified(DEFAULT_DATABASE, "players"), "players");
        let bytes = next.encode();
        for cut in 0..bytes.len() {
            assert!(Catalog::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn containers_are_tables_and_their_indexes() {
        let catalog = Catalog::new()
            .with_schema(parse_schema(SCHEMA).unwrap())
            .unwrap()
            .unwrap();
        let players = Container {
            table: 0,
            via: Via::Primary,
        };
        assert_eq!(catalog.container("players"), Some(players));
        let email = catalog.tables[0].table.index_named("email").unwrap();
        assert_eq!(
            catalog.container("players_by_email"),
            Some(Container {
                table: 0,
                via: Via::Index(email)
            })
        );
        assert_eq!(catalog.container("players_by_name"), None);
        assert_eq!(catalog.container("player"), None);
        assert_eq!(catalog.containers().len(), 4);
    }

    #[test]
    fn a_changed_table_or_an_ambiguous_container_is_refused() {
        let catalog = Catalog::new()
            .with_schema(parse_schema(SCHEMA).unwrap())
            .unwrap()
            .unwrap();
        let changed = parse_schema(&SCHEMA.replace("price DOUBLE", "price INT")).unwrap();
        match catalog.with_schema(changed) {
            Err(Error::Mismatch(why)) => assert!(why.contains("price"), "{why}"),
            other => panic!("{other:?}"),
        }
        let clash = parse_schema("CREATE TABLE players_by_email (x INT PRIMARY KEY)").unwrap();
        match catalog.with_schema(clash) {
            Err(Error::Schema(why)) => assert!(why.contains("two things"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
