//! What a session keeps of the rows a statement read: a scan keeps nothing per row
//! (it would otherwise hold an entry per row of the table). A read-only statement
//! outside a transaction checks nothing; a write that scans, and a transaction that
//! scans, have their batch check the table whole: no other write to it since the scan
//! began. Concurrent scanning writes lose no update.
#![allow(clippy::expect_used)]

use std::sync::Arc;

use kura_sql::{Cell, Session};
use support::*;

mod support;

fn run(session: &mut Session, sql: &str) {
    if let Err(e) = session.query(sql) {
        panic!("{sql}: {e}");
    }
}

#[test]
fn a_read_only_scan_keeps_no_read_set() {
    let shared = tables();
    let mut s = Session::new(Arc::clone(&shared), 1, "root").expect("session");
    run(&mut s, "CREATE TABLE t (id INT PRIMARY KEY, v INT)");
    let values: Vec<String> = (0..500).map(|i| format!("({i}, {})", i % 7)).collect();
    run(
        &mut s,
        &format!("INSERT INTO t VALUES {}", values.join(",")),
    );

    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM t"),
        vec![vec![Cell::Int(500)]]
    );
    assert_eq!(s.read_set_len(), 0, "an autocommit SELECT's read set");
    // A scan keeps only the columns a statement uses; each still reads right.
    let sixes: Vec<Vec<Cell>> = (0..500)
        .filter(|i| i % 7 == 6)
        .map(|i| vec![Cell::Int(i)])
        .collect();
    assert_eq!(
        rows(&mut s, "SELECT id FROM t WHERE v = 6 ORDER BY id"),
        sixes
    );
    let sum: i64 = (0..500).map(|i| i % 7).sum();
    assert_eq!(
        rows(&mut s, "SELECT sum(v), count(*) FROM t"),
        vec![vec![Cell::Int(sum), Cell::Int(500)]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT count(*) FROM t WHERE _cas > 0 AND _exptime = 0"
        ),
        vec![vec![Cell::Int(500)]]
    );

    // A write that scans keeps nothing per row it read: its batch checks the table.
    run(&mut s, "UPDATE t SET v = v + 1 WHERE v = 3");
    assert_eq!(s.read_set_len(), 0, "a scanning UPDATE's read set");
    run(&mut s, "DELETE FROM t WHERE v = 100");
    assert_eq!(s.read_set_len(), 0, "a scanning DELETE's read set");
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM t"),
        vec![vec![Cell::Int(500)]]
    );
    assert_eq!(s.read_set_len(), 0, "the next SELECT's read set");

    // In a transaction, a scan notes the table, not its rows; COMMIT refuses if
    // another writer wrote the table since.
    run(&mut s, "BEGIN");
    assert_eq!(
        rows(&mut s, "SELECT count(*) FROM t"),
        vec![vec![Cell::Int(500)]]
    );
    assert_eq!(s.read_set_len(), 0, "a transaction's scan's read set");
    run(&mut s, "UPDATE t SET v = 0 WHERE id = 1");
    let mut other = Session::new(Arc::clone(&shared), 2, "root").expect("session");
    run(&mut other, "UPDATE t SET v = 9 WHERE id = 2");
    match s.query("COMMIT") {
        Err(e) => assert_eq!(e.code, 1213, "{e}"),
        Ok(_) => panic!("COMMIT after another writer changed the scanned table"),
    }
    assert_eq!(
        rows(&mut s, "SELECT v FROM t WHERE id IN (1, 2) ORDER BY id"),
        vec![vec![Cell::Int(1)], vec![Cell::Int(9)]]
    );
}

/// Autocommit writes that scan the table (every row, `v = v + 1`) and writes by key
/// to its rows, from two threads: every acknowledged update is in the final sum.
#[test]
fn scanning_writes_lose_no_update() {
    const ROWS: i64 = 100;
    let shared = tables();
    let mut s = Session::new(Arc::clone(&shared), 1, "root").expect("session");
    run(
        &mut s,
        "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, w INT NOT NULL)",
    );
    let values: Vec<String> = (0..ROWS).map(|i| format!("({i}, 0, 0)")).collect();
    run(
        &mut s,
        &format!("INSERT INTO t VALUES {}", values.join(",")),
    );
    let acked = |sql: Vec<String>, number: u32| {
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || {
            let mut s = Session::new(shared, number, "root").expect("session");
            let mut acked = 0i64;
            for q in sql {
                match s.query(&q) {
                    Ok(_) => acked += 1,
                    Err(e) if e.code == 1213 => {}
                    Err(e) => panic!("{q}: {e}"),
                }
            }
            acked
        })
    };
    // `w` is on no index: each of these reads the whole table.
    let scans = acked(
        (0..40)
            .map(|_| "UPDATE t SET v = v + 1 WHERE w >= 0".to_string())
            .collect(),
        2,
    );
    let keyed = acked(
        (0..400)
            .map(|i| format!("UPDATE t SET v = v + 1 WHERE id = {}", i % ROWS))
            .collect(),
        3,
    );
    let scans = scans.join().expect("scanning writer");
    let keyed = keyed.join().expect("keyed writer");
    assert!(
        scans > 0 && keyed > 0,
        "{scans} scans, {keyed} keyed writes acknowledged"
    );
    assert_eq!(
        rows(&mut s, "SELECT sum(v) FROM t"),
        vec![vec![Cell::Int(scans * ROWS + keyed)]],
        "{scans} scans and {keyed} keyed writes acknowledged"
    );
}
