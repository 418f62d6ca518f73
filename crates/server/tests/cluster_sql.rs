//! Any node serves any SQL client: in cluster mode a replica passes each SQL
//! connection on to its shard's primary whole (Debian's `mariadb` client against
//! three `kura` processes and a private etcd). Changes, transactions and reads made
//! through a replica are the primary's; a session passed on to a primary that stops
//! being the shard's is closed (the client sees the connection lost, 2013), never
//! left answering from the old primary; new connections reach the new primary.

#![allow(clippy::expect_used)]

mod clusters;
mod replicas;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clusters::*;
use kura_testkit::etcd::Etcd;
use replicas::*;

/// How many SQL connections `node` has passed on to a primary.
fn passed_on(node: &Node) -> u64 {
    cluster_stats(&node.server)
        .get("sql_passed_on")
        .and_then(|n| n.parse().ok())
        .expect("stats cluster shows sql_passed_on")
}

/// Runs `statement` through `node` until it succeeds (a node that has not yet seen a
/// new primary passes it on to the old one, which refuses changes); its output.
fn sql_eventually(node: &Node, statement: &str) -> String {
    let deadline = Instant::now() + ELECTED_WITHIN;
    loop {
        let (ok, text) = sql(&node.server, statement);
        if ok {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{statement}: {text}\n{}",
            node.server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sql_through_a_replica_is_the_primarys_across_a_switchover() {
    let etcd = Etcd::start(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let nodes = [
        node_at(
            &etcd.endpoint(),
            "kura-cluster-sql-m-",
            "127.0.0.1",
            None,
            &[],
        ),
        node_at(
            &etcd.endpoint(),
            "kura-cluster-sql-n-",
            "127.0.0.1",
            None,
            &[],
        ),
        node_at(
            &etcd.endpoint(),
            "kura-cluster-sql-o-",
            "127.0.0.1",
            None,
            &[],
        ),
    ];
    let first = elected(&nodes.iter().collect::<Vec<_>>());
    let (via, target) = ((first + 1) % 3, (first + 2) % 3);

    // Changes and a transaction through the replica are made on the primary (a
    // replica serving them itself would refuse them with 1290).
    sql_eventually(
        &nodes[via],
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
    );
    sql_ok(
        &nodes[via].server,
        "INSERT INTO t VALUES (1, 'a'), (2, 'b')",
    );
    sql_ok(
        &nodes[via].server,
        "BEGIN; UPDATE t SET v = 'c' WHERE id = 2; COMMIT",
    );
    let rows = "1\ta\n2\tc\n";
    assert_eq!(
        sql_ok(&nodes[first].server, "SELECT id, v FROM t ORDER BY id"),
        rows
    );
    assert_eq!(
        sql_ok(&nodes[via].server, "SELECT id, v FROM t ORDER BY id"),
        rows
    );
    assert!(passed_on(&nodes[via]) >= 4);
    assert_eq!(passed_on(&nodes[first]), 0, "the primary serves its own");

    // A session held open through the replica, logged in and answering.
    let before = passed_on(&nodes[via]);
    let mut held = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-u", "root", "-D", "kura", "-N", "-B"])
        .args(["--skip-reconnect", "--unbuffered"])
        .arg("-P")
        .arg(nodes[via].server.sql_addr().port().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mariadb (scripts/install-peers.sh installs it)");
    let mut input = held.stdin.take().expect("stdin");
    let mut output = BufReader::new(held.stdout.take().expect("stdout"));
    writeln!(input, "SELECT v FROM t WHERE id = 1;").expect("send");
    input.flush().expect("send");
    let mut line = String::new();
    output.read_line(&mut line).expect("read");
    assert_eq!(line, "a\n", "{}", nodes[via].server.log());
    assert_eq!(passed_on(&nodes[via]), before + 1);

    // The primary hands over to the other replica; the replica follows it and closes
    // the session it passed on to the old primary.
    let text = switchover(&etcd, &nodes[target].advertise)
        .unwrap_or_else(|e| panic!("{e}\n{}", nodes[first].server.log()));
    assert!(
        text.contains(&format!("primary {} (epoch", nodes[target].advertise)),
        "{text}"
    );
    let deadline = Instant::now() + ELECTED_WITHIN;
    while replication_stats(&nodes[via].server).get("primary") != Some(&nodes[target].advertise) {
        assert!(
            Instant::now() < deadline,
            "{} never followed the new primary",
            nodes[via].advertise
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The relay looks at its primary every 200 ms.
    std::thread::sleep(Duration::from_secs(1));
    writeln!(input, "SELECT v FROM t WHERE id = 2;").expect("send");
    drop(input);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut output, &mut rest).expect("read");
    let ended = held.wait_with_output().expect("mariadb ends");
    let errors = String::from_utf8_lossy(&ended.stderr);
    assert!(
        !ended.status.success(),
        "answered after the switchover: {rest:?}"
    );
    assert_eq!(rest, "", "no answer from the old primary");
    assert!(
        errors.contains("2013") || errors.contains("2006"),
        "the session is lost, as a failover loses it: {errors}"
    );

    // New connections through the same node reach the new primary.
    sql_eventually(&nodes[via], "INSERT INTO t VALUES (3, 'd')");
    assert_eq!(
        sql_ok(&nodes[target].server, "SELECT id, v FROM t ORDER BY id"),
        "1\ta\n2\tc\n3\td\n"
    );
    assert_eq!(sql_ok(&nodes[via].server, "SELECT count(*) FROM t"), "3\n");
}
