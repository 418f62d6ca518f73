//! Tables on shards (issue 42), with a private etcd: shard `a` of two nodes (a primary
//! and a replica) and shard `b` of one, on the ring `a,b`, every node with the same
//! `--sql-users`. A table lives whole on the shard whose node created it, named in
//! etcd; any node's SQL port and memcached port reach it (`tests/cluster/tables.py`):
//! statements and transactions on one shard's tables pass on to its primary, ones over
//! both shards are refused, and memcached's `@@table.key` goes to the table's shard.
//! A table made before its shard's primary knew the cluster's tables is placed as
//! found; DROP TABLE unplaces it; without etcd, CREATE TABLE makes nothing; a
//! transaction passed on to a primary that fails over is lost there (1105).

#![allow(clippy::expect_used)]

mod clusters;
mod replicas;

use std::path::Path;
use std::time::{Duration, Instant};

use clusters::*;
use kura_testkit::etcd::Etcd;
use kura_testkit::python::run_script;

/// Waits until every node places `tables` tables.
fn tables_seen(nodes: &[&Node], tables: u64) {
    let deadline = Instant::now() + ELECTED_WITHIN;
    while !nodes.iter().all(|n| cluster_stat(n, "tables") == tables) {
        assert!(
            Instant::now() < deadline,
            "{tables} tables not seen\n{}",
            logs(nodes)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn sql_of(node: &Node) -> String {
    node.server.sql_addr().to_string()
}

#[test]
fn tables_live_on_one_shard_and_any_node_reaches_them() {
    let mut etcd = Etcd::start(Path::new(env!("CARGO_TARGET_TMPDIR")));
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
        shard("kura-tables-a1-", "a", 1),
        shard("kura-tables-a2-", "a", 1),
    ];
    let b = shard("kura-tables-b1-", "b", 0);
    let p = elected(&[&a[0], &a[1]]);
    let (a_primary, a_replica) = (&a[p], &a[1 - p]);
    elected(&[&b]);
    let all = [&a[0], &a[1], &b];

    // A table made on b before the cluster has a ring: placed once there is one.
    b.server
        .sql_ok("CREATE TABLE scores (id INT PRIMARY KEY, points INT NOT NULL)");
    let ring = format!("a={},b={}", a_primary.advertise, b.advertise);
    let (ok, text) = kura_cluster(&etcd, &["ring", "--shards", &ring]);
    assert!(ok && text.starts_with("set ring v1"), "{text}");
    tables_seen(&all, 1);
    // A table made through a node of a, placed before it is made.
    a_primary.server.sql_ok(
        "CREATE TABLE players (id INT PRIMARY KEY, name VARCHAR(32) NOT NULL, \
         email VARCHAR(64) NOT NULL, UNIQUE KEY email (email))",
    );
    assert_eq!(cluster_stat(a_primary, "tables_claimed"), 1);
    tables_seen(&all, 2);

    let output = run_script(
        Path::new("tests/cluster/tables.py"),
        &[
            "sql".into(),
            sql_of(a_primary),
            sql_of(&b),
            sql_of(a_replica),
            a_primary.advertise.clone(),
            b.advertise.clone(),
        ],
        &[],
    );
    match output {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("tables.py: {e}\n{}", logs(&all)),
    }
    assert!(cluster_stat(&b, "sql_forwarded") > 0);
    assert!(cluster_stat(&b, "sql_spanning") >= 3);
    // Rows live on their table's shard only.
    let count = |n: &Node, t: &str| n.server.sql_ok(&format!("SELECT COUNT(*) FROM {t}"));
    assert_eq!(count(a_primary, "players").trim(), "23");
    assert_eq!(count(&b, "players").trim(), "23", "players through b");
    let local_scores = a_primary
        .server
        .sql_ok("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'scores'");
    assert_eq!(local_scores.trim(), "0", "shard a holds no table scores");
    // a's replica holds what its primary holds.
    let replica = a_replica
        .server
        .sql_ok("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'players'");
    assert_eq!(replica.trim(), "1");

    // DROP TABLE through a node of a: done on b, and unplaced.
    a_primary.server.sql_ok("DROP TABLE scores");
    tables_seen(&all, 1);
    let (ok, text) = b.server.sql("SELECT COUNT(*) FROM scores");
    assert!(!ok && text.contains("1146"), "{text}");

    // Without etcd a table cannot be placed: CREATE TABLE makes nothing.
    etcd.stop();
    let (ok, text) = a_primary.server.sql("CREATE TABLE t2 (id INT PRIMARY KEY)");
    assert!(
        !ok && text.contains("1105") && text.contains("placing the table"),
        "{text}"
    );
    etcd.restart();
    let p = elected(&[&a[0], &a[1]]);
    let made = a[p]
        .server
        .sql_ok("SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 't2'");
    assert_eq!(made.trim(), "0", "t2 made without a place");

    // A transaction through b running on a's primary, which fails over: lost there.
    let flags = tempfile::tempdir().expect("tempdir");
    let lost = std::thread::spawn({
        let args = vec![
            "lost".to_string(),
            sql_of(&b),
            flags.path().display().to_string(),
        ];
        move || run_script(Path::new("tests/cluster/tables.py"), &args, &[])
    });
    let deadline = Instant::now() + ELECTED_WITHIN;
    while !flags.path().join("begun").exists() {
        assert!(Instant::now() < deadline, "the transaction never began");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut a = a;
    a[p].server.kill().expect("SIGKILL a's primary");
    elected(&[&a[1 - p]]);
    std::fs::write(flags.path().join("killed"), "").expect("flag");
    match lost.join().expect("the script's thread") {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("tables.py lost: {e}\n{}", logs(&[&a[1 - p], &b])),
    }
}
