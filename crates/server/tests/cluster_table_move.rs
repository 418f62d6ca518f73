//! A table moved between shards while SQL and memcached writers run (issue 42), with a
//! private etcd: shard `a` of two nodes (a primary and a replica) holds `players`
//! (a unique and a plain index), shard `b` one node. `kura cluster move-table` moves
//! it to b while `tests/cluster/table_move.py` writes through both nodes' SQL ports
//! and a's memcached port; afterwards every acknowledged write is on b, each email
//! once, the indexes find every row, a duplicate is still refused, and neither a's
//! primary nor its replica holds the table any more.

#![allow(clippy::expect_used)]

mod clusters;
mod replicas;

use std::path::Path;
use std::time::{Duration, Instant};

use clusters::*;
use kura_testkit::etcd::Etcd;
use kura_testkit::python::run_script;

/// Whether `node` holds a table named `table` in its own catalog.
fn holds(node: &Node, table: &str) -> bool {
    let n = node.server.sql_ok(&format!(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = '{table}'"
    ));
    n.trim() == "1"
}

#[test]
fn a_table_moves_to_another_shard_under_writers_keeping_every_write_and_its_unique_index() {
    let etcd = Etcd::start(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let endpoint = etcd.endpoint();
    let users = tempfile::NamedTempFile::new().expect("users file");
    std::fs::write(users.path(), "root:\napp:secret\n").expect("write users");
    let users = users.path().to_str().expect("a path").to_string();
    let shard = |name: &str, shard: &str, sync: u32| {
        node_of_shard(
            &endpoint,
            name,
            shard,
            sync,
            "127.0.0.1",
            None,
            &["--sql-users", &users],
        )
    };
    let a = [
        shard("kura-tmove-a1-", "a", 1),
        shard("kura-tmove-a2-", "a", 1),
    ];
    let b = shard("kura-tmove-b1-", "b", 0);
    let p = elected(&[&a[0], &a[1]]);
    let (a_primary, a_replica) = (&a[p], &a[1 - p]);
    elected(&[&b]);
    let all = [&a[0], &a[1], &b];
    let ring = format!("a={},b={}", a_primary.advertise, b.advertise);
    let (ok, text) = kura_cluster(&etcd, &["ring", "--shards", &ring]);
    assert!(ok, "{text}");

    a_primary.server.sql_ok(
        "CREATE TABLE players (id INT PRIMARY KEY, name VARCHAR(32) NOT NULL, \
         email VARCHAR(64) NOT NULL, UNIQUE KEY email (email), KEY name (name))",
    );
    let mut insert = String::from("INSERT INTO players (id, name, email) VALUES ");
    for i in 0..2000 {
        if i > 0 {
            insert.push(',');
        }
        insert.push_str(&format!("({i}, 'n{}', '{i}@x')", i % 50));
    }
    a_primary.server.sql_ok(&insert);
    let deadline = Instant::now() + ELECTED_WITHIN;
    while cluster_stat(&b, "tables") != 1 {
        assert!(
            Instant::now() < deadline,
            "players not placed\n{}",
            logs(&all)
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let flags = tempfile::tempdir().expect("tempdir");
    let writers = std::thread::spawn({
        let args = vec![
            a_primary.server.sql_addr().to_string(),
            b.server.sql_addr().to_string(),
            a_primary.advertise.clone(),
            b.advertise.clone(),
            flags.path().display().to_string(),
        ];
        move || run_script(Path::new("tests/cluster/table_move.py"), &args, &[])
    });
    let deadline = Instant::now() + ELECTED_WITHIN;
    while !flags.path().join("started").exists() {
        assert!(
            Instant::now() < deadline && !writers.is_finished(),
            "the writers never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let began = Instant::now();
    let (ok, text) = kura_cluster(&etcd, &["move-table", "--table", "players", "--to", "b"]);
    println!("move-table under writers: {:?}\n{text}", began.elapsed());
    std::fs::write(flags.path().join("moved"), "").expect("flag");
    assert!(
        ok && text.contains("moved table players to shard b"),
        "{text}\n{}",
        logs(&all)
    );
    match writers.join().expect("the writers' thread") {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("table_move.py: {e}\n{}", logs(&all)),
    }

    // The table is b's, in etcd and in every node's placement; a's nodes dropped it.
    let (ok, status) = kura_cluster(&etcd, &["status"]);
    assert!(ok && !status.contains("moving"), "{status}");
    assert!(holds(&b, "players"), "b holds players");
    let deadline = Instant::now() + ELECTED_WITHIN;
    while holds(a_primary, "players") || holds(a_replica, "players") {
        assert!(
            Instant::now() < deadline,
            "a still holds players\n{}",
            logs(&all)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let count = b.server.sql_ok("SELECT COUNT(*) FROM players");
    let through_a = a_primary.server.sql_ok("SELECT COUNT(*) FROM players");
    assert_eq!(count, through_a, "the same rows through a");
    assert!(count.trim().parse::<u64>().expect("a count") >= 2000);

    // Moved again, back to a (whose copy was dropped), with no writer: the rows come
    // back whole, and the unique index with them.
    let (ok, text) = kura_cluster(&etcd, &["move-table", "--table", "players", "--to", "a"]);
    assert!(ok, "{text}\n{}", logs(&all));
    let back = a_primary.server.sql_ok("SELECT COUNT(*) FROM players");
    assert_eq!(back, count, "moved back");
    let (ok, text) = a_primary
        .server
        .sql("INSERT INTO players (id, name, email) VALUES (999999, 'd', '7@x')");
    assert!(!ok && text.contains("1062"), "{text}");
    assert!(holds(a_replica, "players"), "a's replica follows");
}
