//! memcached's row writes and SQL's through the one batch path, on what the model test
//! cannot see: which records a write leaves alone (an update that keeps a row's
//! indexed values and exptime writes the row's record only), what each kind of write
//! does to a row's flags and exptime and its entries', and the `stats` counters.
//! (That such an update also locks the row alone is not seen here: the records are
//! the same either way; the table game's speed shows it.)

use std::sync::Arc;

use kura_engine::sim::SimDisk;
use kura_engine::{Durability, Item, Key, ManualClock, Options, Store};
use kura_tables::rows::{ROW_SPACE, UNIQUE_SPACE};
use kura_tables::{
    keys, no_upsert, Catalog, ChangeOutcome, Container, RowChange, Tables, Value, WriteMode,
    WriteOutcome,
};

const NOW: u32 = 1_700_000_000;
const SCHEMA: &str = "CREATE TABLE players (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, \
     email VARCHAR(40), level INT, UNIQUE KEY email (email), KEY level (level))";

fn open() -> Tables {
    let clock = Arc::new(ManualClock::new(NOW));
    let mut options = Options::new(Durability::None, clock);
    options.ordered_spaces = kura_tables::ordered_spaces();
    let store = Store::open(Arc::new(SimDisk::new()), options)
        .unwrap_or_else(|e| panic!("open failed: {e}"));
    let tables = Tables::open(Arc::new(store)).unwrap_or_else(|e| panic!("tables: {e}"));
    tables
        .apply_schema(SCHEMA)
        .unwrap_or_else(|e| panic!("schema: {e}"));
    tables
}

fn players(tables: &Tables) -> (Arc<Catalog>, Container) {
    match tables.container("players") {
        Some(found) => found,
        None => panic!("no players table"),
    }
}

fn set(tables: &Tables, id: &str, value: &str, mode: WriteMode, meta: (u32, i64)) -> WriteOutcome {
    let (catalog, container) = players(tables);
    tables
        .write(
            &catalog,
            container,
            id.as_bytes(),
            value.as_bytes(),
            mode,
            meta,
        )
        .unwrap_or_else(|e| panic!("write {id}: {e}"))
}

/// The row of id `id` as the store holds it.
fn row(tables: &Tables, id: i64) -> Item {
    let (catalog, _) = players(tables);
    let mut key = catalog.tables[0].number.to_be_bytes().to_vec();
    keys::encode(&Value::Int(id), keys::Position::Last, &mut key);
    match tables.store().peek(Key::new(ROW_SPACE, &key)) {
        Ok(Some(item)) => item,
        other => panic!("row {id}: {other:?}"),
    }
}

/// The email index's entry for `email`, if any.
fn email_entry(tables: &Tables, email: &str) -> Option<Item> {
    let (catalog, _) = players(tables);
    let def = &catalog.tables[0];
    let mut key = def.number.to_be_bytes().to_vec();
    let Some(index) = def.table.indexes.iter().position(|i| i.name == "email") else {
        panic!("no email index")
    };
    key.extend_from_slice(&def.index_numbers[index].to_be_bytes());
    // As the column's collation keys it (case-insensitive by default).
    let rule = def.table.columns[def.table.indexes[index].column].rule();
    keys::encode_as(
        &Value::Bytes(email.as_bytes().to_vec()),
        rule,
        keys::Position::Last,
        &mut key,
    );
    tables
        .store()
        .peek(Key::new(UNIQUE_SPACE, &key))
        .unwrap_or_else(|e| panic!("entry {email}: {e}"))
}

fn counters(tables: &Tables) -> (u64, u64) {
    let c = &tables.counters;
    (
        c.retries.load(std::sync::atomic::Ordering::Relaxed),
        c.unique_refusals.load(std::sync::atomic::Ordering::Relaxed),
    )
}

#[test]
fn an_update_that_keeps_indexed_values_and_exptime_writes_the_row_alone() {
    let tables = open();
    let first = set(&tables, "1", "ann|a@x|3", WriteMode::Set, (7, 100));
    assert!(matches!(first, WriteOutcome::Stored(_)), "{first:?}");
    let Some(entry) = email_entry(&tables, "a@x") else {
        panic!("no entry for a@x")
    };
    assert_eq!(
        entry.exptime,
        NOW + 100,
        "an entry carries its row's exptime"
    );

    // Same email and exptime, other name: the entry's record stays as it was.
    let again = set(&tables, "1", "anna|a@x|3", WriteMode::Replace, (8, 100));
    assert!(matches!(again, WriteOutcome::Stored(_)), "{again:?}");
    assert_eq!(email_entry(&tables, "a@x"), Some(entry.clone()));
    let stored = row(&tables, 1);
    assert_eq!((stored.client_flags, stored.exptime), (8, NOW + 100));

    // A new exptime reaches the entry.
    let longer = set(&tables, "1", "anna|a@x|3", WriteMode::Set, (8, 200));
    assert!(matches!(longer, WriteOutcome::Stored(_)), "{longer:?}");
    let Some(moved) = email_entry(&tables, "a@x") else {
        panic!("no entry for a@x after the new exptime")
    };
    assert_eq!(moved.exptime, NOW + 200);

    // A new email: the old entry goes, the new one comes. Needing the entries after
    // a first attempt that locked the row alone is no retry.
    let renamed = set(&tables, "1", "anna|b@x|3", WriteMode::Set, (8, 200));
    assert!(matches!(renamed, WriteOutcome::Stored(_)), "{renamed:?}");
    assert_eq!(email_entry(&tables, "a@x"), None);
    assert!(email_entry(&tables, "b@x").is_some());
    assert_eq!(counters(&tables), (0, 0));
}

#[test]
fn memcached_modes_and_refusals_come_back_per_write() {
    let tables = open();
    assert!(matches!(
        set(&tables, "1", "ann|a@x|3", WriteMode::Replace, (0, 0)),
        WriteOutcome::NotStored
    ));
    assert!(matches!(
        set(&tables, "1", "ann|a@x|3", WriteMode::Cas(5), (0, 0)),
        WriteOutcome::NotFound
    ));
    let WriteOutcome::Stored(w) = set(&tables, "1", "ann|a@x|3", WriteMode::Add, (0, 0)) else {
        panic!("add of a new row")
    };
    assert!(matches!(
        set(&tables, "1", "ann|a@x|3", WriteMode::Add, (0, 0)),
        WriteOutcome::NotStored
    ));
    assert!(matches!(
        set(&tables, "1", "ann|a@x|4", WriteMode::Cas(w.cas + 1), (0, 0)),
        WriteOutcome::Exists
    ));
    assert!(matches!(
        set(&tables, "1", "ann|a@x|4", WriteMode::Cas(w.cas), (0, 0)),
        WriteOutcome::Stored(_)
    ));
    // Another row may not take a@x, and nothing of it is written.
    assert!(matches!(
        set(&tables, "2", "bob|a@x|1", WriteMode::Set, (0, 0)),
        WriteOutcome::Duplicate
    ));
    assert_eq!(counters(&tables), (0, 1));
    let (catalog, container) = players(&tables);
    let gone = tables.get(&catalog, container, b"2");
    assert!(matches!(gone, Ok(None)), "{gone:?}");

    // A delete with another CAS is refused; one of a missing row is not found.
    let cas = row(&tables, 1).cas;
    let delete = |key: &[u8], cas| tables.delete(&catalog, container, key, cas);
    assert!(matches!(
        delete(b"1", Some(cas + 1)),
        Ok(ChangeOutcome::Exists)
    ));
    assert!(matches!(delete(b"2", None), Ok(ChangeOutcome::NotFound)));
    assert!(matches!(
        delete(b"1", Some(cas)),
        Ok(ChangeOutcome::Done(Some(_)))
    ));
    assert_eq!(
        email_entry(&tables, "a@x"),
        None,
        "the entry goes with its row"
    );
}

#[test]
fn a_touch_moves_the_row_and_its_entries_and_keeps_their_cas() {
    let tables = open();
    set(&tables, "1", "ann|a@x|3", WriteMode::Set, (9, 0));
    let before = row(&tables, 1);
    let (catalog, container) = players(&tables);
    let touched = tables
        .touch(&catalog, container, b"1", 50)
        .unwrap_or_else(|e| panic!("touch: {e}"));
    let Some(item) = touched else {
        panic!("touch found no row")
    };
    assert_eq!(
        (
            item.value.as_slice(),
            item.client_flags,
            item.exptime,
            item.cas
        ),
        (b"ann|a@x|3".as_slice(), 9, NOW + 50, before.cas)
    );
    let after = row(&tables, 1);
    assert_eq!((after.cas, after.exptime), (before.cas, NOW + 50));
    let entry = email_entry(&tables, "a@x").map(|e| e.exptime);
    assert_eq!(entry, Some(NOW + 50));
    // The batch's unlocked look at the row found its entries: no second attempt.
    assert_eq!(counters(&tables), (0, 0));
}

#[test]
fn a_sql_update_keeps_the_flags_and_exptime_memcached_set() {
    let tables = open();
    set(&tables, "1", "ann|a@x|3", WriteMode::Set, (42, 300));
    let (catalog, _) = players(&tables);
    let cas = row(&tables, 1).cas;
    let update = RowChange::Update {
        table: catalog.tables[0].number,
        pk: Value::Int(1),
        cas,
        values: vec![
            Value::Int(1),
            Value::Bytes(b"ann".to_vec()),
            Value::Bytes(b"c@x".to_vec()),
            Value::Int(4),
        ],
    };
    let applied = tables
        .apply_changes(&catalog, &[update], &mut no_upsert)
        .unwrap_or_else(|e| panic!("update: {e:?}"));
    assert_eq!(applied.affected, 1);
    let after = row(&tables, 1);
    assert_eq!((after.client_flags, after.exptime), (42, NOW + 300));
    assert_eq!(email_entry(&tables, "a@x"), None);
    let entry = email_entry(&tables, "c@x").map(|e| e.exptime);
    assert_eq!(entry, Some(NOW + 300));
}
