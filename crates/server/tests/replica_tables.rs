//! Tables on a replica: rows, the catalog and the ordered indexes follow the primary
//! without a restart, through the memcached protocol and the SQL port (Debian's
//! `mariadb` client). And SQL changes on a primary with `--min-sync-replicas`.
//!
//! What is shown: a replica that started empty serves the tables its primary created
//! after it started, through SQL and `@@` keys; range reads over ordered indexes
//! match the primary's after inserts, updates (rows moving in the order) and deletes;
//! an index created mid-stream is there and filled; a replica made from nothing by a
//! full copy has the tables at once; a primary that needs a replica answers an SQL
//! change with MySQL's 1180 when none confirms, and with OK once one has it.

#![allow(clippy::expect_used)]

mod replicas;

use kura_testkit::KuraServer;
use replicas::*;

fn get(server: &KuraServer, key: &str) -> String {
    // A range is one item whose value ends with its own END line.
    let end: &[u8] = if key.contains(".@") {
        b"END\r\n\r\nEND\r\n"
    } else {
        b"END\r\n"
    };
    request(
        &mut client(server),
        format!("get {key}\r\n").as_bytes(),
        end,
    )
}

const RANGES: [&str; 4] = [
    "@players_by_level.@>=10@<20",
    "@players_by_level.@<5",
    "@players_by_level.@>25",
    "@players_by_name.@>=p1@<p2",
];

/// The same rows, ranges and lookups on both nodes.
fn same_tables(primary: &KuraServer, replica: &KuraServer, with_name_index: bool) {
    let select = "SELECT id, name, email, level FROM players ORDER BY id";
    let rows = sql_ok(primary, select);
    assert!(rows.lines().count() > 100, "{rows}");
    assert_eq!(sql_ok(replica, select), rows);
    let ranges = if with_name_index {
        &RANGES[..]
    } else {
        &RANGES[..3]
    };
    for range in ranges {
        let key = format!("@{range}");
        let shown = get(primary, &key);
        assert!(shown.starts_with("VALUE "), "{key}: {shown}");
        assert_eq!(get(replica, &key), shown, "{key}");
    }
    let by_email = get(primary, "@@players_by_email.p3@x");
    assert!(by_email.starts_with("VALUE "), "{by_email}");
    assert_eq!(get(replica, "@@players_by_email.p3@x"), by_email);
}

#[test]
fn a_replicas_tables_follow_its_primary_without_a_restart() {
    let (pdir, rdir, fresh) = (
        data_dir("tables-primary-"),
        data_dir("tables-replica-"),
        data_dir("tables-fresh-"),
    );
    let primary = options().start_on(pdir.path()).expect("start the primary");
    let proxy = Proxy::start(primary.addr());
    let replica = replica_of(&proxy, rdir.path());
    sql_ok(
        &primary,
        "CREATE TABLE players (id INT NOT NULL, name VARCHAR(32) NOT NULL, \
         email VARCHAR(64), level INT NOT NULL DEFAULT 1, PRIMARY KEY (id), \
         UNIQUE KEY email (email), KEY level (level))",
    );
    let mut c = client(&primary);
    for i in 0..200 {
        let value = format!("p{i}|p{i}@x|{}", i % 30);
        let reply = request(
            &mut c,
            format!("set @@players.{i} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
            b"\r\n",
        );
        assert_eq!(reply, "STORED\r\n");
    }
    sql_ok(
        &primary,
        "UPDATE players SET level = level + 7 WHERE id < 60",
    );
    sql_ok(&primary, "DELETE FROM players WHERE id % 7 = 0");
    caught_up(&primary, &replica);
    same_tables(&primary, &replica, false);

    // An index made while the replica follows: there, and filled.
    sql_ok(&primary, "CREATE INDEX name ON players (name)");
    sql_ok(&primary, "UPDATE players SET name = 'p1x' WHERE id = 2");
    caught_up(&primary, &replica);
    same_tables(&primary, &replica, true);

    // A replica made from nothing by a full copy knows the tables at once.
    let copied = replica_of(&proxy, fresh.path());
    caught_up(&primary, &copied);
    same_tables(&primary, &copied, true);
    assert_eq!(stat(&copied, "full_syncs"), 1);

    // Changes are refused on the SQL port too, naming the primary.
    let (ok, refused) = sql(&replica, "DELETE FROM players WHERE id = 1");
    assert!(!ok && refused.contains("ERROR 1290"), "{refused}");
}

#[test]
fn an_sql_change_waits_for_a_replica_when_the_primary_needs_one() {
    let (pdir, rdir) = (data_dir("sqlsync-primary-"), data_dir("sqlsync-replica-"));
    let primary = options()
        .arg("--min-sync-replicas")
        .arg("1")
        .arg("--sync-timeout-ms")
        .arg("300")
        .start_on(pdir.path())
        .expect("start the primary");
    // Table definitions wait only for this node's disk.
    sql_ok(
        &primary,
        "CREATE TABLE t (id INT NOT NULL, v INT, PRIMARY KEY (id))",
    );
    let (ok, text) = sql(&primary, "INSERT INTO t VALUES (1, 10)");
    assert!(!ok && text.contains("ERROR 1180"), "{text}");
    // The change is made here, as the error says.
    assert_eq!(sql_ok(&primary, "SELECT v FROM t WHERE id = 1"), "10\n");
    let proxy = Proxy::start(primary.addr());
    let replica = replica_of(&proxy, rdir.path());
    let deadline = std::time::Instant::now() + HUNG_AFTER;
    while stat(&primary, "connected_replicas") == 0 {
        assert!(std::time::Instant::now() < deadline, "no replica connected");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    sql_ok(&primary, "INSERT INTO t VALUES (2, 20)");
    // Acknowledged means the replica has it.
    assert_eq!(sql_ok(&replica, "SELECT v FROM t ORDER BY id"), "10\n20\n");
}

#[test]
fn ddl_on_a_replica_is_refused_as_read_only() {
    let (pdir, rdir) = (data_dir("ddl-primary-"), data_dir("ddl-replica-"));
    let primary = options().start_on(pdir.path()).expect("start the primary");
    let proxy = Proxy::start(primary.addr());
    let replica = replica_of(&proxy, rdir.path());
    sql_ok(
        &primary,
        "CREATE TABLE players (id INT PRIMARY KEY, name VARCHAR(32) NOT NULL)",
    );
    caught_up(&primary, &replica);
    // MySQL's answer with read_only: 1290 ER_OPTION_PREVENTS_STATEMENT, for DDL as for
    // the rows' changes.
    for statement in [
        "CREATE TABLE other (id INT PRIMARY KEY)",
        "CREATE INDEX name ON players (name)",
        "ALTER TABLE players ADD COLUMN level INT NULL",
        "ALTER TABLE players ADD INDEX name (name)",
        "DROP TABLE players",
    ] {
        let (ok, refused) = sql(&replica, statement);
        assert!(
            !ok && refused.contains("ERROR 1290") && refused.contains("read-only"),
            "{statement}: {refused}"
        );
    }
    // Nothing changed, there or on the primary.
    let shown = sql_ok(&replica, "SHOW TABLES");
    assert_eq!(shown, "players\n");
    assert_eq!(sql_ok(&primary, "SHOW TABLES"), "players\n");
}
