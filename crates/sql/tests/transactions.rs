//! What a transaction read is checked at COMMIT. Under SERIALIZABLE (and REPEATABLE
//! READ) every read: a row read by key, a key looked up and not found, a range of an
//! ordered index and a whole table, each changed by another writer after the read,
//! make a COMMIT that writes answer 1213 and apply nothing. Under READ COMMITTED (the
//! default) what InnoDB would lock: what writing statements and locking reads (`FOR
//! UPDATE`, `LOCK IN SHARE MODE`) read, and every row written, as first read.
#![allow(clippy::expect_used)]

use std::sync::Arc;

use kura_sql::{Cell, Session};
use support::*;

mod support;

/// Two sessions over players 1..=4 (levels 5, 7, 5, 9; table `notes` without an
/// ordered index, for scans).
fn two() -> (Session, Session) {
    let tables = tables();
    let mut a = Session::new(Arc::clone(&tables), 1, "root").expect("session");
    let b = Session::new(Arc::clone(&tables), 2, "root").expect("session");
    done(&mut a, SCHEMA);
    done(
        &mut a,
        "CREATE TABLE notes (id INT PRIMARY KEY, body VARCHAR(32) NOT NULL, n INT NOT NULL)",
    );
    done(
        &mut a,
        "INSERT INTO players (id, name, email, level) VALUES \
         (1, 'ann', 'ann@x.com', 5), (2, 'bob', 'bob@x.com', 7), (3, 'cy', NULL, 5), \
         (4, 'di', 'di@x.com', 9)",
    );
    done(
        &mut a,
        "INSERT INTO notes (id, body, n) VALUES (1, 'a', 1), (2, 'b', 2)",
    );
    (a, b)
}

/// Every read of `s`'s transactions is checked from now on.
fn serializable(s: &mut Session) {
    done(s, "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE");
}

fn level(s: &mut Session, id: i64) -> Vec<Vec<Cell>> {
    rows(s, &format!("SELECT level FROM players WHERE id = {id}"))
}

#[test]
fn a_row_read_then_changed_by_another_writer_fails_the_commit() {
    let (mut a, mut b) = two();
    done(&mut b, "BEGIN");
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(5)]]);
    assert_eq!(
        done(&mut a, "UPDATE players SET level = level + 1 WHERE id = 1"),
        1
    );
    done(&mut b, "UPDATE players SET level = 10 WHERE id = 1");
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    // A's update stays; nothing of B's is applied.
    assert_eq!(level(&mut a, 1), vec![vec![Cell::Int(6)]]);
    // Unchanged reads commit.
    done(&mut b, "BEGIN");
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(6)]]);
    done(&mut b, "UPDATE players SET level = 8 WHERE id = 1");
    done(&mut b, "COMMIT");
    assert_eq!(level(&mut a, 1), vec![vec![Cell::Int(8)]]);
}

#[test]
fn serializable_checks_rows_read_and_not_written() {
    let (mut a, mut b) = two();
    serializable(&mut b);
    done(&mut a, "UPDATE players SET level = 6 WHERE id = 1");
    // The write to another row than the one read.
    done(&mut b, "BEGIN");
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(6)]]);
    done(&mut a, "UPDATE players SET level = 8 WHERE id = 1");
    done(&mut b, "UPDATE players SET level = 6 WHERE id = 2");
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    assert_eq!(level(&mut a, 2), vec![vec![Cell::Int(7)]]);
    // A row read and deleted since.
    done(&mut b, "BEGIN");
    assert_eq!(level(&mut b, 3), vec![vec![Cell::Int(5)]]);
    done(&mut a, "DELETE FROM players WHERE id = 3");
    done(&mut b, "UPDATE players SET level = 6 WHERE id = 2");
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    assert_eq!(level(&mut a, 2), vec![vec![Cell::Int(7)]]);
    // Unchanged reads commit.
    done(&mut b, "BEGIN");
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(8)]]);
    done(&mut b, "UPDATE players SET level = 9 WHERE id = 1");
    done(&mut b, "COMMIT");
    assert_eq!(level(&mut a, 1), vec![vec![Cell::Int(9)]]);
}

#[test]
fn with_autocommit_off_the_transaction_starts_at_its_first_read() {
    let (mut a, mut b) = two();
    done(&mut b, "SET autocommit = 0");
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(5)]]);
    done(&mut a, "UPDATE players SET level = level + 1 WHERE id = 1");
    done(&mut b, "UPDATE players SET level = 10 WHERE id = 1");
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    assert_eq!(level(&mut a, 1), vec![vec![Cell::Int(6)]]);
}

#[test]
fn keys_looked_up_and_not_found_fail_the_commit_when_they_appear() {
    let (mut a, mut b) = two();
    serializable(&mut b);
    // By primary key.
    done(&mut b, "BEGIN");
    assert!(rows(&mut b, "SELECT id FROM players WHERE id = 30").is_empty());
    done(&mut a, "INSERT INTO players (id, name) VALUES (30, 'new')");
    done(&mut b, "UPDATE players SET level = 1 WHERE id = 2");
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    assert_eq!(level(&mut a, 2), vec![vec![Cell::Int(7)]]);
    // Through a unique index.
    done(&mut b, "BEGIN");
    assert!(rows(&mut b, "SELECT id FROM players WHERE email = 'eve@x.com'").is_empty());
    done(
        &mut a,
        "INSERT INTO players (id, name, email) VALUES (31, 'eve', 'eve@x.com')",
    );
    done(
        &mut b,
        "INSERT INTO players (id, name, email) VALUES (32, 'eve2', 'eve2@x.com')",
    );
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    assert!(rows(&mut a, "SELECT id FROM players WHERE id = 32").is_empty());
}

#[test]
fn a_range_read_fails_the_commit_when_a_row_enters_or_leaves_it() {
    let (mut a, mut b) = two();
    serializable(&mut b);
    let in_range = "SELECT id FROM players WHERE level BETWEEN 5 AND 7 ORDER BY level, id";
    // A row inserted into the range.
    done(&mut b, "BEGIN");
    assert_eq!(rows(&mut b, in_range).len(), 3);
    done(
        &mut a,
        "INSERT INTO players (id, name, level) VALUES (40, 'in', 6)",
    );
    done(&mut b, "UPDATE players SET name = 'x' WHERE id = 4");
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    // A row deleted from it.
    done(&mut b, "BEGIN");
    assert_eq!(rows(&mut b, in_range).len(), 4);
    done(&mut a, "DELETE FROM players WHERE id = 40");
    done(&mut b, "UPDATE players SET name = 'x' WHERE id = 4");
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    // A row moved into it by an update.
    done(&mut b, "BEGIN");
    assert_eq!(rows(&mut b, in_range).len(), 3);
    done(&mut a, "UPDATE players SET level = 6 WHERE id = 4");
    done(&mut b, "UPDATE players SET name = 'x' WHERE id = 1");
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    assert_eq!(
        rows(&mut a, "SELECT name FROM players WHERE id = 1"),
        vec![vec![Cell::Bytes(b"ann".to_vec())]]
    );
    // A change outside the range does not matter.
    done(&mut b, "BEGIN");
    assert_eq!(rows(&mut b, in_range).len(), 4);
    done(
        &mut a,
        "INSERT INTO players (id, name, level) VALUES (41, 'out', 20)",
    );
    done(&mut b, "UPDATE players SET name = 'y' WHERE id = 1");
    done(&mut b, "COMMIT");
    assert_eq!(
        rows(&mut a, "SELECT name FROM players WHERE id = 1"),
        vec![vec![Cell::Bytes(b"y".to_vec())]]
    );
}

#[test]
fn a_table_scanned_fails_the_commit_when_another_writer_changes_it() {
    let (mut a, mut b) = two();
    serializable(&mut b);
    done(&mut b, "BEGIN");
    assert_eq!(
        rows(&mut b, "SELECT SUM(n) FROM notes"),
        vec![vec![Cell::Int(3)]]
    );
    done(&mut a, "INSERT INTO notes (id, body, n) VALUES (3, 'c', 3)");
    done(
        &mut b,
        "INSERT INTO notes (id, body, n) VALUES (100, 'sum', 3)",
    );
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    assert!(rows(&mut a, "SELECT id FROM notes WHERE id = 100").is_empty());
    // Without the other writer, it commits.
    done(&mut b, "BEGIN");
    assert_eq!(
        rows(&mut b, "SELECT SUM(n) FROM notes"),
        vec![vec![Cell::Int(6)]]
    );
    done(
        &mut b,
        "INSERT INTO notes (id, body, n) VALUES (100, 'sum', 6)",
    );
    done(&mut b, "COMMIT");
    assert_eq!(
        rows(&mut a, "SELECT n FROM notes WHERE id = 100"),
        vec![vec![Cell::Int(6)]]
    );
}

#[test]
fn read_committed_checks_what_a_write_depends_on() {
    let (mut a, mut b) = two();
    assert_eq!(
        rows(&mut b, "SELECT @@transaction_isolation, @@tx_isolation"),
        vec![vec![
            Cell::Bytes(b"READ-COMMITTED".to_vec()),
            Cell::Bytes(b"READ-COMMITTED".to_vec())
        ]]
    );
    // A row read by a plain SELECT and not written: not checked, as InnoDB's
    // consistent read locks nothing.
    done(&mut b, "BEGIN");
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(5)]]);
    done(&mut a, "UPDATE players SET level = 6 WHERE id = 1");
    done(&mut b, "UPDATE players SET level = 8 WHERE id = 2");
    done(&mut b, "COMMIT");
    assert_eq!(level(&mut a, 2), vec![vec![Cell::Int(8)]]);
    // A key looked up and not found, and a range, by plain SELECTs: not checked.
    done(&mut b, "BEGIN");
    assert!(rows(&mut b, "SELECT id FROM players WHERE id = 30").is_empty());
    let in_range = "SELECT id FROM players WHERE level BETWEEN 5 AND 7 ORDER BY level, id";
    assert_eq!(rows(&mut b, in_range).len(), 2);
    done(
        &mut a,
        "INSERT INTO players (id, name, level) VALUES (30, 'new', 6)",
    );
    done(&mut b, "UPDATE players SET level = 7 WHERE id = 2");
    done(&mut b, "COMMIT");
    // A row of the range read, then written by the transaction: checked as it was
    // first read.
    done(&mut b, "BEGIN");
    assert_eq!(rows(&mut b, in_range).len(), 4);
    done(&mut a, "UPDATE players SET level = 5 WHERE id = 30");
    done(&mut b, "UPDATE players SET name = 'x' WHERE id = 30");
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    // What a writing statement read is checked: here a range, which a row entered.
    done(&mut b, "BEGIN");
    assert_eq!(
        done(
            &mut b,
            "UPDATE players SET name = 'w' WHERE level BETWEEN 5 AND 6"
        ),
        3
    );
    done(
        &mut a,
        "INSERT INTO players (id, name, level) VALUES (31, 'in', 6)",
    );
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    assert_eq!(
        rows(&mut a, "SELECT count(*) FROM players WHERE name = 'w'"),
        vec![vec![Cell::Int(0)]]
    );
    // A table a plain SELECT scanned, then written by the transaction: checked as a
    // scan (its rows are not noted one by one).
    done(&mut b, "BEGIN");
    assert_eq!(
        rows(&mut b, "SELECT SUM(n) FROM notes"),
        vec![vec![Cell::Int(3)]]
    );
    done(&mut a, "UPDATE notes SET n = 10 WHERE id = 1");
    done(&mut b, "UPDATE notes SET n = 3 WHERE id = 2");
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    // Scanned and not written: not checked.
    done(&mut b, "BEGIN");
    assert_eq!(
        rows(&mut b, "SELECT SUM(n) FROM notes"),
        vec![vec![Cell::Int(12)]]
    );
    done(&mut a, "UPDATE notes SET n = 1 WHERE id = 1");
    done(&mut b, "UPDATE players SET level = 1 WHERE id = 4");
    done(&mut b, "COMMIT");
    assert_eq!(level(&mut a, 4), vec![vec![Cell::Int(1)]]);
}

#[test]
fn the_isolation_level_is_set_as_in_mysql() {
    let (mut a, mut b) = two();
    let shown = |s: &mut Session| rows(s, "SELECT @@transaction_isolation");
    let text = |t: &str| vec![vec![Cell::Bytes(t.as_bytes().to_vec())]];
    // Plain reads of row 1, a write to row 2, row 1 changed meanwhile: whether the
    // COMMIT is refused says whether plain reads are checked.
    let checks_plain_reads = |a: &mut Session, b: &mut Session| {
        done(b, "BEGIN");
        level(b, 1);
        done(a, "UPDATE players SET level = level + 1 WHERE id = 1");
        done(b, "UPDATE players SET level = level + 1 WHERE id = 2");
        match b.query("COMMIT") {
            Ok(_) => false,
            Err(e) if e.code == 1213 => true,
            Err(e) => panic!("COMMIT: {e}"),
        }
    };
    assert!(!checks_plain_reads(&mut a, &mut b));
    done(&mut b, "SET transaction_isolation = 'REPEATABLE-READ'");
    assert_eq!(shown(&mut b), text("REPEATABLE-READ"));
    assert!(checks_plain_reads(&mut a, &mut b));
    done(&mut b, "SET SESSION tx_isolation = 'read-uncommitted'");
    assert_eq!(shown(&mut b), text("READ-UNCOMMITTED"));
    assert!(!checks_plain_reads(&mut a, &mut b));
    done(
        &mut b,
        "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE",
    );
    assert_eq!(shown(&mut b), text("SERIALIZABLE"));
    assert!(checks_plain_reads(&mut a, &mut b));
    done(
        &mut b,
        "SET @@session.transaction_isolation = 'READ-COMMITTED'",
    );
    assert!(!checks_plain_reads(&mut a, &mut b));
    // SET TRANSACTION without SESSION: the next transaction only.
    done(&mut b, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE");
    assert_eq!(shown(&mut b), text("READ-COMMITTED"));
    assert!(checks_plain_reads(&mut a, &mut b));
    assert!(!checks_plain_reads(&mut a, &mut b));
    // MySQL's errors: a value that names no level, and a change in a transaction.
    assert_eq!(
        error(&mut b, "SET transaction_isolation = 'SNAPSHOT'").code,
        1231
    );
    done(&mut b, "BEGIN");
    assert_eq!(
        error(&mut b, "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE").code,
        1568
    );
    done(&mut b, "COMMIT");
    assert_eq!(shown(&mut b), text("READ-COMMITTED"));
}

#[test]
fn a_read_only_transaction_commits_whatever_changed() {
    let (mut a, mut b) = two();
    done(&mut b, "BEGIN");
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(5)]]);
    done(&mut a, "UPDATE players SET level = 6 WHERE id = 1");
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(6)]]);
    done(&mut b, "COMMIT");
}

#[test]
fn locking_reads_are_accepted_and_join_the_checked_reads() {
    let (mut a, mut b) = two();
    for suffix in [
        "FOR UPDATE",
        "LOCK IN SHARE MODE",
        "FOR SHARE",
        "FOR UPDATE OF players",
        "FOR UPDATE NOWAIT",
        "FOR SHARE NOWAIT",
    ] {
        done(&mut b, "BEGIN");
        assert_eq!(
            rows(
                &mut b,
                &format!("SELECT level FROM players WHERE id = 2 {suffix}")
            ),
            vec![vec![Cell::Int(7)]],
            "{suffix}"
        );
        done(&mut a, "UPDATE players SET level = level + 1 WHERE id = 2");
        done(&mut b, "UPDATE players SET level = 100 WHERE id = 2");
        assert_eq!(error(&mut b, "COMMIT").code, 1213, "{suffix}");
        done(&mut a, "UPDATE players SET level = 7 WHERE id = 2");
    }
    assert_eq!(level(&mut a, 2), vec![vec![Cell::Int(7)]]);
    // In autocommit mode a locking read is a plain read.
    assert_eq!(
        rows(&mut a, "SELECT level FROM players WHERE id = 2 FOR UPDATE"),
        vec![vec![Cell::Int(7)]]
    );
    // Kura holds no locks, so no row is ever skipped: SKIP LOCKED is refused rather
    // than read as if every worker could take the same row.
    for suffix in ["FOR UPDATE SKIP LOCKED", "FOR SHARE SKIP LOCKED"] {
        let e = error(
            &mut b,
            &format!("SELECT level FROM players WHERE id = 2 {suffix}"),
        );
        assert_eq!(e.code, 1235, "{suffix}: {e:?}");
    }
}

#[test]
fn a_locking_read_is_checked_at_commit_even_without_writes() {
    let (mut a, mut b) = two();
    done(&mut b, "BEGIN");
    assert_eq!(
        rows(&mut b, "SELECT level FROM players WHERE id = 3 FOR UPDATE"),
        vec![vec![Cell::Int(5)]]
    );
    done(&mut a, "UPDATE players SET level = 6 WHERE id = 3");
    assert_eq!(error(&mut b, "COMMIT").code, 1213);
    // Unchanged, it commits.
    done(&mut b, "BEGIN");
    assert_eq!(
        rows(
            &mut b,
            "SELECT level FROM players WHERE id = 3 LOCK IN SHARE MODE"
        ),
        vec![vec![Cell::Int(6)]]
    );
    done(&mut b, "COMMIT");
}

/// A transaction larger than one log segment (64 MiB) holds is refused at COMMIT
/// with MySQL's 1197, and nothing of it is written; the session goes on.
#[test]
fn a_transaction_larger_than_a_segment_is_refused_whole() {
    let tables = support::tables();
    let mut s = kura_sql::Session::new(tables, 1, "root").expect("session");
    support::done(&mut s, "CREATE TABLE big (id INT PRIMARY KEY, b BLOB)");
    support::done(&mut s, "BEGIN");
    let blob = "ab".repeat(30_000);
    for id in 0..1_150 {
        support::done(&mut s, &format!("INSERT INTO big VALUES ({id}, '{blob}')"));
    }
    match s.query("COMMIT") {
        Err(e) => assert_eq!(e.code, 1197, "{e}"),
        Ok(_) => panic!("a 69 MB transaction was committed"),
    }
    assert_eq!(
        support::rows(&mut s, "SELECT count(*) FROM big"),
        vec![vec![kura_sql::Cell::Int(0)]]
    );
    support::done(&mut s, "INSERT INTO big VALUES (1, 'x')");
    assert_eq!(
        support::rows(&mut s, "SELECT count(*) FROM big"),
        vec![vec![kura_sql::Cell::Int(1)]]
    );
}

/// A reply waits until the rows it shows are durable (the LSN `take_read_lsn`
/// gives the server to wait for). Inside a transaction the statements' replies do
/// not wait: the COMMIT (or ROLLBACK) waits for every row the transaction read.
#[test]
fn a_transaction_waits_for_what_it_read_at_its_end() {
    let (mut a, mut b) = two();
    b.take_read_lsn();
    done(&mut a, "UPDATE players SET level = 6 WHERE id = 1");
    let first = a.take_written_lsn();
    assert!(first > 0);
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(6)]]);
    assert_eq!(b.take_read_lsn(), first, "outside a transaction");

    done(&mut b, "BEGIN");
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(6)]]);
    assert_eq!(b.take_read_lsn(), 0, "a statement in a transaction");
    done(&mut a, "UPDATE players SET level = 7 WHERE id = 1");
    let second = a.take_written_lsn();
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(7)]]);
    assert_eq!(b.take_read_lsn(), 0);
    done(&mut b, "COMMIT");
    assert_eq!(b.take_read_lsn(), second, "the COMMIT waits for both reads");

    done(&mut b, "BEGIN");
    assert_eq!(level(&mut b, 1), vec![vec![Cell::Int(7)]]);
    done(&mut b, "ROLLBACK");
    assert_eq!(b.take_read_lsn(), second, "so does a ROLLBACK");
}

/// A table being handed to another shard (issue 42; its seal is the server's to set):
/// a statement of its own is refused with the marked 1412 the server makes again
/// elsewhere, a COMMIT writing it gets 1213 and is rolled back, DDL gets 1205; none
/// of them changes anything. Once the seal is lifted they go through.
#[test]
fn a_table_being_handed_off_refuses_its_writes_and_ddl_changing_nothing() {
    let tables = tables();
    let mut a = Session::new(Arc::clone(&tables), 1, "root").expect("session");
    let mut b = Session::new(Arc::clone(&tables), 2, "root").expect("session");
    done(&mut a, SCHEMA);
    done(
        &mut a,
        "INSERT INTO players (id, name, email, level) VALUES (1, 'ann', 'ann@x.com', 5), \
         (2, 'bob', 'bob@x.com', 7)",
    );
    done(&mut b, "BEGIN");
    done(&mut b, "UPDATE players SET level = 11 WHERE id = 2");
    let number = tables
        .seal("players", kura_tables::Seal::Held)
        .expect("sealed");
    let e = error(&mut a, "UPDATE players SET level = 12 WHERE id = 1");
    assert!(e.is_moving_table(), "{e}");
    let e = error(&mut b, "COMMIT");
    assert_eq!(e.code, 1213, "{e}");
    assert!(e.message.contains("handed to another shard"), "{e}");
    tables
        .seal("players", kura_tables::Seal::Moving)
        .expect("moving");
    let e = error(&mut a, "ALTER TABLE players ADD COLUMN x INT");
    assert_eq!(e.code, 1205, "{e}");
    assert_eq!(level(&mut a, 1), vec![vec![Cell::Int(5)]]);
    assert_eq!(
        level(&mut a, 2),
        vec![vec![Cell::Int(7)]],
        "the COMMIT made nothing"
    );
    // Writes go on while the rows are copied, before the hand-off.
    done(&mut a, "UPDATE players SET level = 12 WHERE id = 1");
    tables.unseal(number);
    done(&mut a, "ALTER TABLE players ADD COLUMN x INT");
    done(&mut b, "UPDATE players SET level = 11 WHERE id = 2");
    assert_eq!(level(&mut b, 2), vec![vec![Cell::Int(11)]]);
}
