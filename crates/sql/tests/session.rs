//! A session's statements over a store in memory (the simulated disk): reads, writes,
//! transactions, errors, and what the virtual tables' plans read.
#![allow(clippy::expect_used)]

use std::sync::Arc;

use kura_sql::{Cell, Output, Param, Session};
use kura_tables::Tables;
use support::*;

mod support;

fn text(s: &str) -> Cell {
    Cell::Bytes(s.as_bytes().to_vec())
}

fn loaded() -> (Arc<Tables>, Session) {
    let tables = tables();
    let mut s = Session::new(Arc::clone(&tables), 1, "root").expect("session");
    done(&mut s, SCHEMA);
    assert_eq!(
        done(
            &mut s,
            "INSERT INTO players (id, name, email, level) VALUES \
             (1, 'ann', 'ann@x.com', 5), (2, 'bob', 'bob@x.com', 7), (3, 'cy', NULL, 5), \
             (4, 'di', 'di@x.com', 9)"
        ),
        4
    );
    (tables, s)
}

#[test]
fn rows_written_by_sql_read_back_by_every_index() {
    let (_, mut s) = loaded();
    assert_eq!(
        rows(&mut s, "SELECT name FROM players WHERE id = 2"),
        vec![vec![text("bob")]]
    );
    assert_eq!(
        rows(&mut s, "SELECT id FROM players WHERE email = 'di@x.com'"),
        vec![vec![Cell::Int(4)]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT id FROM players WHERE level BETWEEN 5 AND 7 ORDER BY level, id"
        ),
        vec![vec![Cell::Int(1)], vec![Cell::Int(3)], vec![Cell::Int(2)]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT id FROM players WHERE id IN (4, 1, 9) ORDER BY id"
        ),
        vec![vec![Cell::Int(1)], vec![Cell::Int(4)]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT level, COUNT(*), SUM(id) FROM players GROUP BY level ORDER BY level"
        ),
        vec![
            vec![Cell::Int(5), Cell::Int(2), Cell::Int(4)],
            vec![Cell::Int(7), Cell::Int(1), Cell::Int(2)],
            vec![Cell::Int(9), Cell::Int(1), Cell::Int(4)],
        ]
    );
    assert_eq!(
        rows(&mut s, "SELECT level FROM players WHERE id = 3"),
        vec![vec![Cell::Int(5)]]
    );
}

#[test]
fn writes_keep_unique_indexes_and_report_mysql_errors() {
    let (_, mut s) = loaded();
    let e = error(
        &mut s,
        "INSERT INTO players (id, name, email) VALUES (5, 'ed', 'ann@x.com')",
    );
    assert_eq!(e.code, 1062, "{e}");
    assert_eq!(
        e.message,
        "Duplicate entry 'ann@x.com' for key 'players.email'"
    );
    let e = error(&mut s, "INSERT INTO players (id, name) VALUES (1, 'again')");
    assert_eq!(e.code, 1062, "{e}");
    // A statement is atomic: the good row of a failing INSERT is not there.
    let e = error(
        &mut s,
        "INSERT INTO players (id, name, email) VALUES (6, 'fay', 'fay@x.com'), (7, 'gus', 'bob@x.com')",
    );
    assert_eq!(e.code, 1062);
    assert!(rows(&mut s, "SELECT id FROM players WHERE id = 6").is_empty());
    assert_eq!(
        done(
            &mut s,
            "UPDATE players SET email = 'new@x.com' WHERE id = 1"
        ),
        1
    );
    assert_eq!(
        rows(&mut s, "SELECT id FROM players WHERE email = 'new@x.com'"),
        vec![vec![Cell::Int(1)]]
    );
    assert!(rows(&mut s, "SELECT id FROM players WHERE email = 'ann@x.com'").is_empty());
    assert_eq!(
        done(
            &mut s,
            "INSERT INTO players (id, name, email) VALUES (8, 'hal', 'ann@x.com')"
        ),
        1
    );
    assert_eq!(
        done(
            &mut s,
            "UPDATE players SET level = level + 1 WHERE level = 5"
        ),
        2
    );
    assert_eq!(
        rows(&mut s, "SELECT id FROM players WHERE level = 6 ORDER BY id"),
        vec![vec![Cell::Int(1)], vec![Cell::Int(3)]]
    );
    assert_eq!(done(&mut s, "DELETE FROM players WHERE level > 6"), 2);
    assert_eq!(
        rows(&mut s, "SELECT COUNT(*) FROM players"),
        vec![vec![Cell::Int(3)]]
    );
    assert_eq!(
        done(
            &mut s,
            "REPLACE INTO players (id, name, email) VALUES (9, 'ivy', 'new@x.com')"
        ),
        2
    );
    assert!(rows(&mut s, "SELECT id FROM players WHERE id = 1").is_empty());
    assert_eq!(
        done(
            &mut s,
            "INSERT IGNORE INTO players (id, name) VALUES (9, 'x'), (10, 'jo')"
        ),
        1
    );
    let e = error(&mut s, "INSERT INTO players (id, name) VALUES (11, NULL)");
    assert_eq!(e.code, 1048);
    let e = error(
        &mut s,
        "INSERT INTO players (id, name) VALUES (3000000000, 'big')",
    );
    assert_eq!(e.code, 1264);
    let e = error(&mut s, "SELECT * FROM nowhere");
    assert_eq!(e.code, 1146);
    let e = error(&mut s, "SELEC 1");
    assert_eq!(e.code, 1064);
}

#[test]
fn a_transaction_is_seen_by_its_session_and_applied_whole_at_commit() {
    let (tables, mut s) = loaded();
    let mut other = Session::new(Arc::clone(&tables), 2, "root").expect("session");
    done(&mut s, "BEGIN");
    done(&mut s, "UPDATE players SET level = 50 WHERE id = 1");
    done(
        &mut s,
        "INSERT INTO players (id, name, email, level) VALUES (20, 'tx', 'tx@x.com', 51)",
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT id FROM players WHERE level >= 50 ORDER BY level"
        ),
        vec![vec![Cell::Int(1)], vec![Cell::Int(20)]]
    );
    assert!(rows(&mut other, "SELECT id FROM players WHERE level >= 50").is_empty());
    done(&mut s, "COMMIT");
    assert_eq!(
        rows(
            &mut other,
            "SELECT id FROM players WHERE level >= 50 ORDER BY level"
        ),
        vec![vec![Cell::Int(1)], vec![Cell::Int(20)]]
    );
    // A row changed under a transaction: COMMIT applies nothing.
    done(&mut s, "BEGIN");
    done(&mut s, "UPDATE players SET level = 60 WHERE id = 2");
    done(&mut s, "INSERT INTO players (id, name) VALUES (21, 'lost')");
    done(&mut other, "UPDATE players SET level = 61 WHERE id = 2");
    assert_eq!(error(&mut s, "COMMIT").code, 1213);
    assert_eq!(
        rows(&mut s, "SELECT level FROM players WHERE id = 2"),
        vec![vec![Cell::Int(61)]]
    );
    assert!(rows(&mut s, "SELECT id FROM players WHERE id = 21").is_empty());
    // ROLLBACK forgets.
    done(&mut s, "BEGIN");
    done(&mut s, "DELETE FROM players");
    assert_eq!(
        rows(&mut s, "SELECT COUNT(*) FROM players"),
        vec![vec![Cell::Int(0)]]
    );
    done(&mut s, "ROLLBACK");
    assert_eq!(
        rows(&mut s, "SELECT COUNT(*) FROM players"),
        vec![vec![Cell::Int(5)]]
    );
}

/// The session's `Handler_read%` counters, in the order SHOW STATUS lists them.
fn handler_reads(s: &mut Session) -> Vec<u64> {
    rows(s, "SHOW SESSION STATUS LIKE 'Handler_read%'")
        .into_iter()
        .map(|r| match &r[1] {
            Cell::Bytes(b) => String::from_utf8_lossy(b).parse().unwrap_or(0),
            _ => 0,
        })
        .collect()
}

#[test]
fn plans_read_about_the_rows_they_return() {
    let (_, mut s) = loaded();
    for id in 100..300 {
        done(
            &mut s,
            &format!("INSERT INTO players (id, name, email, level) VALUES ({id}, 'p{id}', 'p{id}@x.com', {})", id % 50),
        );
    }
    let status = handler_reads;
    let before = status(&mut s);
    let got = rows(
        &mut s,
        "SELECT id FROM players WHERE level BETWEEN 10 AND 20 ORDER BY level LIMIT 5",
    );
    assert_eq!(got.len(), 5);
    let after = status(&mut s);
    let read: u64 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
    assert!(read <= 8, "read {read} rows for 5");
    let plan = rows(
        &mut s,
        "EXPLAIN SELECT id FROM players WHERE level BETWEEN 10 AND 20 ORDER BY level LIMIT 5",
    );
    assert_eq!(plan[0][4], text("range"), "{plan:?}");
    assert_eq!(plan[0][6], text("level"), "{plan:?}");
    let plan = rows(
        &mut s,
        "EXPLAIN SELECT * FROM players WHERE email = 'p150@x.com'",
    );
    assert_eq!(plan[0][4], text("const"), "{plan:?}");
    assert_eq!(plan[0][6], text("email"), "{plan:?}");
    let before = status(&mut s);
    assert_eq!(
        rows(&mut s, "SELECT id FROM players WHERE email = 'p150@x.com'"),
        vec![vec![Cell::Int(150)]]
    );
    let after = status(&mut s);
    let read: u64 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
    assert_eq!(read, 1);
}

/// Every primary key is kept in order: a range on it, its ORDER BY either way with a
/// LIMIT, and MIN/MAX read about the rows they return, in a transaction or not, and
/// EXPLAIN names the key.
#[test]
fn primary_key_ranges_read_about_the_rows_they_return() {
    let (_, mut s) = loaded();
    for id in 100..400 {
        done(
            &mut s,
            &format!(
                "INSERT INTO players (id, name, level) VALUES ({id}, 'p{id}', {})",
                id % 50
            ),
        );
    }
    let read = |s: &mut Session, sql: &str| -> (Vec<Vec<Cell>>, u64) {
        let before: u64 = handler_reads(s).iter().sum();
        let got = rows(s, sql);
        (got, handler_reads(s).iter().sum::<u64>() - before)
    };
    let ids = |got: &[Vec<Cell>]| -> Vec<Cell> { got.iter().map(|r| r[0].clone()).collect() };
    for transaction in [false, true] {
        if transaction {
            done(&mut s, "BEGIN");
        }
        let (got, n) = read(
            &mut s,
            "SELECT id FROM players WHERE id BETWEEN 150 AND 159",
        );
        assert_eq!(ids(&got), (150..160).map(Cell::Int).collect::<Vec<_>>());
        assert!(n <= 12, "read {n} rows for 10");
        let (got, n) = read(&mut s, "SELECT id FROM players ORDER BY id DESC LIMIT 3");
        assert_eq!(
            ids(&got),
            vec![Cell::Int(399), Cell::Int(398), Cell::Int(397)]
        );
        if !transaction {
            // A transaction notes the whole range's keys, to check them at COMMIT.
            assert!(n <= 5, "read {n} rows for 3");
            // A LIMIT SQLite passes on is read in one group: its rows and no more
            // (and the range's one look by key).
            let (got, n) = read(&mut s, "SELECT id FROM players ORDER BY id DESC LIMIT 10");
            assert_eq!(
                ids(&got),
                (390..400).rev().map(Cell::Int).collect::<Vec<_>>()
            );
            assert_eq!(n, 11, "read {n} rows for 10");
            let (got, n) = read(
                &mut s,
                "SELECT id FROM players WHERE id >= 100 ORDER BY id LIMIT 5 OFFSET 20",
            );
            assert_eq!(ids(&got), (120..125).map(Cell::Int).collect::<Vec<_>>());
            assert_eq!(n, 26, "read {n} rows for 5 after 20");
            // A row SQLite's own check drops (the bound widened to the column's type)
            // is made up for by reading on.
            let (got, _) = read(
                &mut s,
                "SELECT id FROM players WHERE id > 150.5 AND name <> 'p151' ORDER BY id LIMIT 3",
            );
            assert_eq!(
                ids(&got),
                vec![Cell::Int(152), Cell::Int(153), Cell::Int(154)]
            );
        }
        let (got, _) = read(
            &mut s,
            "SELECT id FROM players WHERE id < 120 ORDER BY id DESC LIMIT 2",
        );
        assert_eq!(ids(&got), vec![Cell::Int(119), Cell::Int(118)]);
        let (got, _) = read(&mut s, "SELECT MIN(id), MAX(id), COUNT(*) FROM players");
        assert_eq!(
            got,
            vec![vec![Cell::Int(1), Cell::Int(399), Cell::Int(304)]]
        );
        if transaction {
            done(&mut s, "COMMIT");
        }
    }
    for sql in [
        "EXPLAIN SELECT * FROM players WHERE id BETWEEN 150 AND 160",
        "EXPLAIN SELECT id FROM players ORDER BY id DESC LIMIT 3",
    ] {
        let plan = rows(&mut s, sql);
        assert_eq!(plan[0][4], text("range"), "{sql}: {plan:?}");
        assert_eq!(plan[0][5], text("PRIMARY"), "{sql}: {plan:?}");
    }
}

/// `IN` on an index that is not unique, and `LIKE` with a literal prefix on a text
/// primary key or index, read about the rows they return, in order where asked, and
/// EXPLAIN names the key; a pattern with no prefix, or with an ESCAPE, still answers.
#[test]
fn in_and_prefix_like_read_about_the_rows_they_return() {
    let (_, mut s) = loaded();
    done(
        &mut s,
        "CREATE TABLE items (sku VARCHAR(24) NOT NULL PRIMARY KEY, tag VARCHAR(16), \
         n INT NOT NULL, KEY tag (tag))",
    );
    for id in 100..400 {
        done(
            &mut s,
            &format!(
                "INSERT INTO players (id, name, email, level) VALUES ({id}, 'p{id}', 'p{id}@x.com', {})",
                id % 50
            ),
        );
        let tag = if id % 7 == 0 {
            "NULL".to_string()
        } else {
            format!("'t{}'", id % 40)
        };
        done(
            &mut s,
            &format!("INSERT INTO items VALUES ('s{id}', {tag}, {id})"),
        );
    }
    done(
        &mut s,
        r"INSERT INTO items VALUES ('s1_%', 'x_y', 1), ('s1x', 'xay', 2)",
    );
    let read = |s: &mut Session, sql: &str| -> (Vec<Vec<Cell>>, u64) {
        let before: u64 = handler_reads(s).iter().sum();
        let got = rows(s, sql);
        (got, handler_reads(s).iter().sum::<u64>() - before)
    };
    let ints = |v: &[i64]| -> Vec<Vec<Cell>> { v.iter().map(|&i| vec![Cell::Int(i)]).collect() };
    for transaction in [false, true] {
        if transaction {
            done(&mut s, "BEGIN");
        }
        // IN on `level`, a KEY: one range a value.
        let (got, n) = read(
            &mut s,
            "SELECT id FROM players WHERE level IN (3, 4) ORDER BY id",
        );
        let want: Vec<i64> = (100..400).filter(|i| i % 50 == 3 || i % 50 == 4).collect();
        assert_eq!(got, ints(&want));
        assert!(
            n <= want.len() as u64 + 4,
            "read {n} rows for {}",
            want.len()
        );
        // A prefix on the unique `email`, on the text primary key, on the KEY `tag`.
        let (got, n) = read(
            &mut s,
            "SELECT id FROM players WHERE email LIKE 'p15%' ORDER BY email",
        );
        assert_eq!(got, ints(&(150..160).collect::<Vec<_>>()));
        assert!(n <= 12, "read {n} rows for 10");
        let (got, n) = read(
            &mut s,
            "SELECT n FROM items WHERE sku LIKE 's12_' ORDER BY sku",
        );
        assert_eq!(got, ints(&(120..130).collect::<Vec<_>>()));
        assert!(n <= 12, "read {n} rows for 10");
        let (got, n) = read(
            &mut s,
            "SELECT tag FROM items WHERE tag LIKE 't3%' ORDER BY tag DESC LIMIT 7",
        );
        let mut want = vec![vec![text("t39")]; 6];
        want.push(vec![text("t38")]);
        assert_eq!(got, want);
        assert!(n <= 9, "read {n} rows for a LIMIT 7 of 75");
        // MySQL's escape, the backslash; an ESCAPE of one's own; no prefix at all.
        let (got, _) = read(&mut s, r"SELECT n FROM items WHERE sku LIKE 's1\_\%'");
        assert_eq!(got, ints(&[1]));
        let (got, _) = read(&mut s, r"SELECT n FROM items WHERE tag LIKE 'x\_%'");
        assert_eq!(got, ints(&[1]));
        let (got, _) = read(
            &mut s,
            "SELECT n FROM items WHERE sku LIKE 's1!_%' ESCAPE '!'",
        );
        assert_eq!(got, ints(&[1]));
        let (got, _) = read(&mut s, "SELECT count(*) FROM items WHERE tag LIKE '%1'");
        assert_eq!(
            got,
            ints(&[(100..400)
                .filter(|i| i % 7 != 0 && i % 40 % 10 == 1)
                .count() as i64])
        );
        let (got, _) = read(&mut s, "SELECT count(*) FROM items WHERE tag NOT LIKE 't%'");
        assert_eq!(got, ints(&[2]));
        if transaction {
            done(&mut s, "COMMIT");
        }
    }
    for (sql, key) in [
        (
            "EXPLAIN SELECT id FROM players WHERE level IN (3, 4)",
            "level",
        ),
        (
            "EXPLAIN SELECT id FROM players WHERE email LIKE 'p15%'",
            "email",
        ),
        (
            "EXPLAIN SELECT n FROM items WHERE sku LIKE 's12%'",
            "PRIMARY",
        ),
    ] {
        let plan = rows(&mut s, sql);
        assert_eq!(plan[0][4], text("range"), "{sql}: {plan:?}");
        assert_eq!(plan[0][5], text(key), "{sql}: {plan:?}");
    }
}

#[test]
fn prepared_statements_bind_parameters() {
    let (_, mut s) = loaded();
    let p = s
        .prepare("SELECT name, level FROM players WHERE id = ?")
        .expect("prepare");
    assert_eq!(p.params, 1);
    assert_eq!(p.columns.len(), 2);
    match s.execute(p.id, &[Param::Int(2)]) {
        Ok(Output::Rows(rs)) => assert_eq!(rs.rows, vec![vec![text("bob"), Cell::Int(7)]]),
        other => panic!("{other:?}"),
    }
    let p = s
        .prepare("INSERT INTO players (id, name, email) VALUES (?, ?, ?)")
        .expect("prepare");
    assert_eq!(p.params, 3);
    let r = s.execute(
        p.id,
        &[Param::Int(30), Param::Bytes(b"zed".to_vec()), Param::Null],
    );
    assert!(
        matches!(r, Ok(Output::Done(ref d)) if d.affected == 1),
        "{r:?}"
    );
    assert_eq!(
        rows(&mut s, "SELECT name FROM players WHERE id = 30"),
        vec![vec![text("zed")]]
    );
}

#[test]
fn session_statements_answer_as_mysql() {
    let (_, mut s) = loaded();
    assert_eq!(rows(&mut s, "SELECT DATABASE()"), vec![vec![text("kura")]]);
    assert_eq!(rows(&mut s, "SHOW TABLES"), vec![vec![text("players")]]);
    let cols = rows(&mut s, "DESCRIBE players");
    assert_eq!(cols[0][0], text("id"));
    assert_eq!(cols[0][3], text("PRI"));
    assert_eq!(cols[2][3], text("UNI"));
    assert_eq!(cols[3][3], text("MUL"));
    done(&mut s, "SET NAMES utf8mb4");
    done(&mut s, "SET autocommit = 0");
    assert_eq!(
        rows(&mut s, "SELECT @@autocommit"),
        vec![vec![Cell::Int(0)]]
    );
    done(&mut s, "USE kura");
    assert_eq!(error(&mut s, "USE nope").code, 1049);
    assert!(
        matches!(&rows(&mut s, "SELECT @@version")[0][0], Cell::Bytes(v) if v.starts_with(b"8.0"))
    );
    // Kura's SQL port has no privileges of its own: every user may do everything.
    let all = vec![vec![text("GRANT ALL PRIVILEGES ON *.* TO `root`@`%`")]];
    assert_eq!(rows(&mut s, "SHOW GRANTS"), all);
    assert_eq!(rows(&mut s, "SHOW GRANTS FOR CURRENT_USER()"), all);
    assert_eq!(
        rows(&mut s, "SHOW GRANTS FOR 'App'@'%'"),
        vec![vec![text("GRANT ALL PRIVILEGES ON *.* TO `App`@`%`")]]
    );
}

#[test]
fn insert_on_duplicate_key_update_updates_the_row_in_the_way() {
    let (_, mut s) = loaded();
    // A new row is inserted (1); a row in the way by its primary key is updated
    // (2), with the proposed row's values through VALUES() and the old row's by name.
    assert_eq!(
        done(
            &mut s,
            "INSERT INTO players (id, name, email, level) VALUES (5, 'eve', 'eve@x.com', 1) \
             ON DUPLICATE KEY UPDATE level = level + VALUES(level)"
        ),
        1
    );
    assert_eq!(
        done(
            &mut s,
            "INSERT INTO players (id, name, email, level) VALUES (1, 'zed', 'z@x.com', 3) \
             ON DUPLICATE KEY UPDATE level = level + VALUES(level), name = players.name"
        ),
        2
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT name, email, level FROM players WHERE id = 1"
        ),
        vec![vec![text("ann"), text("ann@x.com"), Cell::Int(8)]]
    );
    // In the way by a unique value: that row is the one updated.
    assert_eq!(
        done(
            &mut s,
            "INSERT INTO players (id, name, email, level) VALUES (9, 'x', 'bob@x.com', 1) \
             ON DUPLICATE KEY UPDATE name = 'bobby'"
        ),
        2
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT id, name FROM players WHERE email = 'bob@x.com'"
        ),
        vec![vec![Cell::Int(2), text("bobby")]]
    );
    assert_eq!(
        rows(&mut s, "SELECT COUNT(*) FROM players WHERE id = 9"),
        vec![vec![Cell::Int(0)]]
    );
    // Unchanged: 0 rows. Two rows of one statement with the same key: the second
    // updates the first. The row alias of MySQL 8 reads the proposed row.
    assert_eq!(
        done(
            &mut s,
            "INSERT INTO players (id, name, level) VALUES (3, 'cy', 5) \
             ON DUPLICATE KEY UPDATE level = level"
        ),
        0
    );
    assert_eq!(
        done(
            &mut s,
            "INSERT INTO players (id, name, level) VALUES (7, 'g', 1), (7, 'g', 10) AS new \
             ON DUPLICATE KEY UPDATE level = players.level + new.level"
        ),
        3
    );
    assert_eq!(
        rows(&mut s, "SELECT level FROM players WHERE id = 7"),
        vec![vec![Cell::Int(11)]]
    );
    // An update that would take another row's unique value is MySQL's 1062, and the
    // statement changes nothing.
    let e = error(
        &mut s,
        "INSERT INTO players (id, name, level) VALUES (8, 'h', 1), (4, 'di', 9) \
         ON DUPLICATE KEY UPDATE email = 'ann@x.com'",
    );
    assert_eq!(e.code, 1062, "{e}");
    assert_eq!(
        rows(&mut s, "SELECT COUNT(*) FROM players WHERE id = 8"),
        vec![vec![Cell::Int(0)]]
    );
    // Strict mode holds for the assignments; unknown columns are 1054.
    assert_eq!(
        error(
            &mut s,
            "INSERT INTO players (id, name) VALUES (1, 'a') ON DUPLICATE KEY UPDATE name = NULL"
        )
        .code,
        1048
    );
    assert_eq!(
        error(
            &mut s,
            "INSERT INTO players (id, name) VALUES (1, 'a') ON DUPLICATE KEY UPDATE nope = 1"
        )
        .code,
        1054
    );
}

#[test]
fn a_transaction_sees_its_own_upserts_and_replaces() {
    let (tables, mut s) = loaded();
    let mut other = Session::new(tables, 2, "root").expect("session");
    done(&mut s, "BEGIN");
    done(
        &mut s,
        "INSERT INTO players (id, name, level) VALUES (1, 'ann', 1) \
         ON DUPLICATE KEY UPDATE level = level * 10",
    );
    done(
        &mut s,
        "REPLACE INTO players (id, name, email, level) VALUES (6, 'fay', 'bob@x.com', 2)",
    );
    assert_eq!(
        rows(&mut s, "SELECT id, level FROM players ORDER BY id"),
        vec![
            vec![Cell::Int(1), Cell::Int(50)],
            vec![Cell::Int(3), Cell::Int(5)],
            vec![Cell::Int(4), Cell::Int(9)],
            vec![Cell::Int(6), Cell::Int(2)],
        ]
    );
    assert_eq!(
        rows(&mut other, "SELECT level FROM players WHERE id = 1"),
        vec![vec![Cell::Int(5)]]
    );
    done(&mut s, "COMMIT");
    assert_eq!(
        rows(
            &mut other,
            "SELECT id FROM players WHERE email = 'bob@x.com'"
        ),
        vec![vec![Cell::Int(6)]]
    );
    assert_eq!(
        rows(&mut other, "SELECT level FROM players WHERE id = 1"),
        vec![vec![Cell::Int(50)]]
    );
}

/// CHANGE and MODIFY COLUMN change no row: a type that would need the rows rewritten,
/// NOT NULL over a NULL, a key's collation and a column moved are refused, and
/// leave the table as it was.
#[test]
fn columns_change_in_place_or_not_at_all() {
    let (_, mut s) = loaded();
    // Row 3 has no email.
    assert_eq!(
        error(
            &mut s,
            "ALTER TABLE players MODIFY email VARCHAR(64) NOT NULL"
        )
        .code,
        1138
    );
    assert_eq!(
        error(&mut s, "ALTER TABLE players MODIFY level TINYINT").code,
        1235
    );
    assert_eq!(
        error(&mut s, "ALTER TABLE players MODIFY level INT UNSIGNED").code,
        1235
    );
    assert_eq!(
        error(&mut s, "ALTER TABLE players MODIFY level DOUBLE").code,
        1235
    );
    let e = error(
        &mut s,
        "ALTER TABLE players MODIFY email VARCHAR(64) COLLATE utf8mb4_bin",
    );
    assert_eq!(e.code, 1235, "{e}");
    assert_eq!(
        error(&mut s, "ALTER TABLE players MODIFY name VARCHAR(64) FIRST").code,
        1235
    );
    let e = error(
        &mut s,
        "ALTER TABLE players MODIFY name VARCHAR(64) COLLATE klingon_ci",
    );
    assert_eq!(e.code, 1273, "{e}");
    done(&mut s, "ALTER TABLE players ADD COLUMN score INT");
    let e = error(
        &mut s,
        "ALTER TABLE players MODIFY score INT AUTO_INCREMENT",
    );
    assert_eq!(e.code, 1075, "{e}");
    assert_eq!(
        error(&mut s, "ALTER TABLE players MODIFY name VARCHAR(64) UNIQUE").code,
        1235
    );
    done(&mut s, "UPDATE players SET email = 'cy@x.com' WHERE id = 3");
    done(
        &mut s,
        "ALTER TABLE players MODIFY email VARCHAR(64) NOT NULL",
    );
    done(
        &mut s,
        "ALTER TABLE players CHANGE level lvl BIGINT NOT NULL DEFAULT 1",
    );
    assert_eq!(
        rows(&mut s, "SELECT id FROM players WHERE lvl = 5 ORDER BY id"),
        vec![vec![Cell::Int(1)], vec![Cell::Int(3)]]
    );
    let e = error(
        &mut s,
        "INSERT INTO players (id, name, email) VALUES (9, 'x', NULL)",
    );
    assert_eq!(e.code, 1048, "{e}");
}

#[test]
fn ddl_changes_tables_that_have_rows() {
    let (tables, mut s) = loaded();
    let mut other = Session::new(Arc::clone(&tables), 2, "root").expect("session");
    // A unique index over values two rows share is refused and leaves nothing.
    let e = error(&mut s, "CREATE UNIQUE INDEX lv ON players (level)");
    assert_eq!(e.code, 1062, "{e}");
    assert!(e.message.contains("'5'"), "{e}");
    let shown = rows(&mut s, "SHOW INDEX FROM players");
    assert!(shown.iter().all(|r| r[2] != text("lv")), "{shown:?}");
    // One over distinct values is filled from the rows and used at once.
    done(&mut s, "CREATE UNIQUE INDEX nm ON players (name)");
    assert_eq!(
        rows(&mut other, "SELECT id FROM players WHERE name = 'di'"),
        vec![vec![Cell::Int(4)]]
    );
    let plan = rows(
        &mut other,
        "EXPLAIN SELECT id FROM players WHERE name = 'di'",
    );
    assert_eq!(plan[0][5], text("nm"), "{plan:?}");
    assert_eq!(
        error(&mut s, "INSERT INTO players (id, name) VALUES (10, 'di')").code,
        1062
    );
    assert_eq!(
        error(&mut s, "CREATE INDEX nm ON players (level)").code,
        1061
    );
    // An ordered index answers ranges in order.
    done(&mut s, "ALTER TABLE players ADD INDEX nm2 (name)");
    assert_eq!(
        rows(
            &mut other,
            "SELECT name FROM players WHERE name >= 'bob' ORDER BY name LIMIT 2"
        ),
        vec![vec![text("bob")], vec![text("cy")]]
    );
    // A new column: old rows show its default; new rows store it.
    done(
        &mut s,
        "ALTER TABLE players ADD COLUMN score INT NOT NULL DEFAULT 7",
    );
    assert_eq!(
        rows(
            &mut other,
            "SELECT id, score FROM players WHERE id IN (1, 2)"
        ),
        vec![
            vec![Cell::Int(1), Cell::Int(7)],
            vec![Cell::Int(2), Cell::Int(7)]
        ]
    );
    done(&mut other, "UPDATE players SET score = 9 WHERE id = 2");
    assert_eq!(
        rows(&mut s, "SELECT score FROM players WHERE id = 2"),
        vec![vec![Cell::Int(9)]]
    );
    assert_eq!(
        error(&mut s, "ALTER TABLE players ADD COLUMN score INT").code,
        1060
    );
    assert_eq!(
        error(&mut s, "ALTER TABLE players ADD COLUMN x INT NOT NULL").code,
        1235
    );
    // DROP TABLE: gone for every session; a new table of that name starts empty.
    assert_eq!(error(&mut s, "DROP TABLE players, nope").code, 1051);
    done(&mut s, "DROP TABLE players");
    assert_eq!(error(&mut other, "SELECT * FROM players").code, 1146);
    done(&mut s, "DROP TABLE IF EXISTS players");
    done(&mut s, SCHEMA);
    assert_eq!(
        rows(&mut other, "SELECT COUNT(*) FROM players"),
        vec![vec![Cell::Int(0)]]
    );
    done(
        &mut other,
        "INSERT INTO players (id, name, email) VALUES (1, 'a', 'ann@x.com')",
    );
}

#[test]
fn mysql_comparisons_that_sqlite_spells_otherwise() {
    let (_, mut s) = loaded();
    done(
        &mut s,
        "INSERT INTO players (id, name, level) VALUES (10, 'p%1', 0), (11, 'pa1', 0)",
    );
    // LIKE escapes with a backslash, as MySQL's does.
    assert_eq!(
        rows(&mut s, r"SELECT id FROM players WHERE name LIKE 'p\\%%'"),
        vec![vec![Cell::Int(10)]]
    );
    assert_eq!(
        rows(&mut s, "SELECT COUNT(*) FROM players WHERE name LIKE 'p%1'"),
        vec![vec![Cell::Int(2)]]
    );
    // <=> matches NULL with NULL.
    assert_eq!(
        rows(
            &mut s,
            "SELECT id FROM players WHERE email <=> NULL ORDER BY id"
        ),
        vec![vec![Cell::Int(3)], vec![Cell::Int(10)], vec![Cell::Int(11)]]
    );
    // A quoted number finds a row by its numeric primary key; an introducer is its
    // string.
    assert_eq!(
        rows(
            &mut s,
            "SELECT name FROM players WHERE id = '2' OR id IN ('4')"
        ),
        vec![vec![text("bob")], vec![text("di")]]
    );
    assert_eq!(
        rows(&mut s, "SELECT id FROM players WHERE name = _utf8mb4 'cy'"),
        vec![vec![Cell::Int(3)]]
    );
    // An empty range reads nothing (and does not bring the server down).
    assert_eq!(
        rows(&mut s, "SELECT id FROM players WHERE level BETWEEN 7 AND 5"),
        Vec::<Vec<Cell>>::new()
    );
    // A negated column is named by its text, so ORDER BY the column means the column.
    match s.query("SELECT -id FROM players WHERE id < 3 ORDER BY id") {
        Ok(Output::Rows(rs)) => {
            assert_eq!(rs.columns[0].name, "-id");
            assert_eq!(rs.rows, vec![vec![Cell::Int(-1)], vec![Cell::Int(-2)]]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn order_by_a_nullable_indexed_column_keeps_its_null_rows() {
    let tables = tables();
    let mut s = Session::new(tables, 1, "root").expect("session");
    done(
        &mut s,
        "CREATE TABLE t (id INT PRIMARY KEY, k INT, KEY k (k))",
    );
    done(&mut s, "INSERT INTO t VALUES (1, NULL), (2, NULL), (3, 5)");
    assert_eq!(
        rows(&mut s, "SELECT k FROM t ORDER BY k"),
        vec![vec![Cell::Null], vec![Cell::Null], vec![Cell::Int(5)]]
    );
    assert_eq!(
        rows(&mut s, "SELECT k, COUNT(*) FROM t GROUP BY k"),
        vec![
            vec![Cell::Null, Cell::Int(2)],
            vec![Cell::Int(5), Cell::Int(1)]
        ]
    );
    assert_eq!(
        rows(&mut s, "SELECT DISTINCT k FROM t ORDER BY k"),
        vec![vec![Cell::Null], vec![Cell::Int(5)]]
    );
}

#[test]
fn sum_goes_past_64_bits_as_mysql_does() {
    let tables = tables();
    let mut s = Session::new(tables, 1, "root").expect("session");
    done(
        &mut s,
        "CREATE TABLE t (id INT PRIMARY KEY, b BIGINT, d DOUBLE)",
    );
    done(
        &mut s,
        "INSERT INTO t VALUES (1, 4611686018427387904, 0.1), (2, 4611686018427387904, 0.2), (3, NULL, NULL)",
    );
    assert_eq!(
        rows(&mut s, "SELECT SUM(b), SUM(id), SUM(d) FROM t"),
        vec![vec![
            Cell::Double(9223372036854775808.0),
            Cell::Int(6),
            Cell::Double(0.30000000000000004)
        ]]
    );
    assert_eq!(
        rows(&mut s, "SELECT SUM(b) FROM t WHERE id = 3"),
        vec![vec![Cell::Null]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT id, SUM(id) OVER (ORDER BY id ROWS 1 PRECEDING) FROM t"
        ),
        vec![
            vec![Cell::Int(1), Cell::Int(1)],
            vec![Cell::Int(2), Cell::Int(3)],
            vec![Cell::Int(3), Cell::Int(5)]
        ]
    );
}

fn column_names(session: &mut Session, sql: &str) -> Vec<String> {
    match session.query(sql) {
        Ok(Output::Rows(rs)) => rs.columns.into_iter().map(|c| c.name).collect(),
        other => panic!("{sql}: {other:?}"),
    }
}

/// Statements that differ only in their values share a kept plan (`kura_sql::shape`):
/// each must still answer for its own values, and what is more than a value (a result
/// column, an ORDER BY position) must not be shared.
#[test]
fn statements_of_one_shape_answer_for_their_own_values() {
    let (_, mut s) = loaded();
    for (id, name) in [(1, "ann"), (2, "bob"), (4, "di"), (1, "ann")] {
        assert_eq!(
            rows(&mut s, &format!("SELECT name FROM players WHERE id = {id}")),
            vec![vec![text(name)]]
        );
    }
    for (email, id) in [("bob@x.com", 2), ("it's", 0), ("di@x.com", 4)] {
        let found = rows(
            &mut s,
            &format!(
                "SELECT id FROM players WHERE email = '{}'",
                email.replace('\'', "''")
            ),
        );
        let want: Vec<Vec<Cell>> = if id == 0 {
            vec![]
        } else {
            vec![vec![Cell::Int(id)]]
        };
        assert_eq!(found, want, "{email}");
    }
    // Result columns are named and valued by their text.
    for n in [1, 2] {
        let sql = format!("SELECT {n}, 'v{n}', id FROM players WHERE id = {n}");
        assert_eq!(
            column_names(&mut s, &sql),
            vec![n.to_string(), format!("v{n}"), "id".to_string()]
        );
        assert_eq!(
            rows(&mut s, &sql),
            vec![vec![Cell::Int(n), text(&format!("v{n}")), Cell::Int(n)]]
        );
    }
    // An ORDER BY position is a column, not a value.
    assert_eq!(
        rows(
            &mut s,
            "SELECT id, name FROM players ORDER BY 2 DESC LIMIT 1"
        ),
        vec![vec![Cell::Int(4), text("di")]]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT id, name FROM players ORDER BY 1 DESC LIMIT 2"
        ),
        vec![
            vec![Cell::Int(4), text("di")],
            vec![Cell::Int(3), text("cy")]
        ]
    );
    // Writes of one shape, and a range whose bounds and LIMIT change.
    for id in 10..14 {
        assert_eq!(
            done(
                &mut s,
                &format!("INSERT INTO players (id, name) VALUES ({id}, 'p{id}')")
            ),
            1
        );
        assert_eq!(
            done(
                &mut s,
                &format!("UPDATE players SET level = level + {id} WHERE id = {id}")
            ),
            1
        );
    }
    assert_eq!(
        rows(
            &mut s,
            "SELECT id, level FROM players WHERE level BETWEEN 11 AND 12 ORDER BY level LIMIT 5"
        ),
        vec![
            vec![Cell::Int(10), Cell::Int(11)],
            vec![Cell::Int(11), Cell::Int(12)]
        ]
    );
    assert_eq!(
        rows(
            &mut s,
            "SELECT id, level FROM players WHERE level BETWEEN 13 AND 14 ORDER BY level LIMIT 1"
        ),
        vec![vec![Cell::Int(12), Cell::Int(13)]]
    );
    // Upserts of one shape each update with their own values.
    for n in [100, 200] {
        assert_eq!(
            done(
                &mut s,
                &format!(
                    "INSERT INTO players (id, name) VALUES (10, 'x') \
                     ON DUPLICATE KEY UPDATE level = {n}"
                )
            ),
            2
        );
        assert_eq!(
            rows(&mut s, "SELECT level FROM players WHERE id = 10"),
            vec![vec![Cell::Int(n)]]
        );
    }
    // A shape planned before a table changes is planned again after.
    assert_eq!(
        rows(&mut s, "SELECT * FROM players WHERE id = 1")
            .first()
            .map(Vec::len),
        Some(4)
    );
    done(
        &mut s,
        "ALTER TABLE players ADD COLUMN note VARCHAR(8) DEFAULT 'n'",
    );
    assert_eq!(
        rows(&mut s, "SELECT * FROM players WHERE id = 2")
            .first()
            .and_then(|r| r.last().cloned()),
        Some(text("n"))
    );
    // A shape that fails fails each time with its own text.
    for bad in [
        "SELECT id FROM players WHERE id = 1 AND",
        "SELECT id FROM nope WHERE id = 2",
    ] {
        let first = error(&mut s, bad);
        let again = error(&mut s, bad);
        assert_eq!((first.code, &first.message), (again.code, &again.message));
    }
}
