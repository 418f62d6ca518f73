//! A table moved between shards (issue 42), with a private etcd: shard `a` of two
//! nodes (a primary and a replica) holds `players` (a unique and a plain index), shard
//! `b` one node. `kura cluster move-table` moves it to b while
//! `tests/cluster/table_move.py` writes through both shards' SQL ports and a's
//! memcached port; afterwards every acknowledged write is on b, each email once, the
//! indexes find every row, a duplicate is still refused, and neither a's primary nor
//! its replica holds the table any more.
//!
//! The same with `kill -9` of the target mid-copy (restarted, it goes on from its
//! position) and of the source's primary mid-copy (its replica takes over, seals the
//! table again and hands it off), every target copying at most 5,000 changes a second
//! (and the writers making some 400 a second) so that the kills land mid-copy; then a move back abandoned with `--abort`
//! mid-copy (the table stays, and takes DDL again) and made again to the end.

#![allow(clippy::expect_used)]

mod clusters;
mod replicas;

use std::path::Path;
use std::process::Command;
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

/// The cluster: shard a's two nodes (the primary's index first in `p`) and shard b's
/// one, every node with `extra`, on the ring `a,b`, with `players` of `rows` rows on a.
struct Two {
    etcd: Etcd,
    a: [Node; 2],
    p: usize,
    b: Node,
    /// The rows `players` was filled with.
    rows: usize,
    _users: tempfile::NamedTempFile,
}

impl Two {
    fn start(tag: &str, extra: &[&str], rows: usize) -> Two {
        let etcd = Etcd::start(Path::new(env!("CARGO_TARGET_TMPDIR")));
        let endpoint = etcd.endpoint();
        let users = tempfile::NamedTempFile::new().expect("users file");
        std::fs::write(users.path(), "root:\napp:secret\n").expect("write users");
        let path = users.path().to_str().expect("a path").to_string();
        let mut args = vec!["--sql-users", &path];
        args.extend_from_slice(extra);
        let shard = |name: &str, shard: &str, sync: u32| {
            node_of_shard(&endpoint, name, shard, sync, "127.0.0.1", None, &args)
        };
        let a = [
            shard(&format!("kura-{tag}-a1-"), "a", 1),
            shard(&format!("kura-{tag}-a2-"), "a", 1),
        ];
        let b = shard(&format!("kura-{tag}-b1-"), "b", 0);
        let p = elected(&[&a[0], &a[1]]);
        elected(&[&b]);
        let two = Two {
            etcd,
            a,
            p,
            b,
            rows,
            _users: users,
        };
        let ring = format!("a={},b={}", two.a[p].advertise, two.b.advertise);
        let (ok, text) = kura_cluster(&two.etcd, &["ring", "--shards", &ring]);
        assert!(ok, "{text}");
        two.a[p].server.sql_ok(
            "CREATE TABLE players (id INT PRIMARY KEY, name VARCHAR(32) NOT NULL, \
             email VARCHAR(64) NOT NULL, UNIQUE KEY email (email), KEY name (name))",
        );
        for chunk in (0..rows).collect::<Vec<_>>().chunks(2000) {
            let values: Vec<String> = chunk
                .iter()
                .map(|i| format!("({i}, 'n{}', '{i}@x')", i % 50))
                .collect();
            two.a[p].server.sql_ok(&format!(
                "INSERT INTO players (id, name, email) VALUES {}",
                values.join(",")
            ));
        }
        let deadline = Instant::now() + ELECTED_WITHIN;
        while cluster_stat(&two.b, "tables") != 1 {
            assert!(
                Instant::now() < deadline,
                "players not placed\n{}",
                two.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        two
    }

    /// What the nodes logged of the cluster, and what `kura cluster status` says.
    fn logs(&self) -> String {
        let (_, status) = kura_cluster(&self.etcd, &["status"]);
        format!(
            "{}\n----\n{status}",
            moves_log(&[&self.a[0], &self.a[1], &self.b])
        )
    }

    /// `tests/cluster/table_move.py` in `mode`, its flags in `flags`: `live` through
    /// a's primary and b; `crash` through a's replica alone, the one node never
    /// killed (it passes SQL and changes on to whichever primary holds the table; a
    /// restarted node's SQL port changes). Returns once its writers run.
    fn writers(&self, flags: &Path, mode: &str) -> std::thread::JoinHandle<Result<String, String>> {
        let crash = mode == "crash";
        let a = &self.a[if crash { 1 - self.p } else { self.p }];
        let b = if crash { a } else { &self.b };
        let args = vec![
            a.server.sql_addr().to_string(),
            b.server.sql_addr().to_string(),
            a.advertise.clone(),
            b.advertise.clone(),
            flags.display().to_string(),
            self.rows.to_string(),
            mode.to_string(),
        ];
        let writers = std::thread::spawn(move || {
            run_script(Path::new("tests/cluster/table_move.py"), &args, &[])
        });
        let deadline = Instant::now() + ELECTED_WITHIN;
        while !flags.join("started").exists() {
            assert!(
                Instant::now() < deadline && !writers.is_finished(),
                "the writers never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        writers
    }

    /// Waits until a's nodes hold no `players` and b does.
    fn moved_to_b(&self) {
        assert!(holds(&self.b, "players"), "b holds players");
        let deadline = Instant::now() + ELECTED_WITHIN;
        while holds(&self.a[0], "players") || holds(&self.a[1], "players") {
            assert!(
                Instant::now() < deadline,
                "a still holds players\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `kura cluster move-table` of `players` with `args`, running on its own.
fn move_table(etcd: &Etcd, args: &[&str]) -> std::process::Child {
    Command::new(kura_testkit::kura_bin(env!("CARGO_BIN_EXE_kura")))
        .args([
            "cluster",
            "move-table",
            "--etcd",
            &etcd.endpoint(),
            "--cluster",
            "test",
        ])
        .args(["--table", "players"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kura cluster move-table")
}

/// Waits until `node` has copied changes into a move since it started.
fn copying(two: &Two, node: &Node) {
    let deadline = Instant::now() + ELECTED_WITHIN;
    loop {
        let copied = std::panic::catch_unwind(|| cluster_stat(node, "move_copied"));
        if copied.is_ok_and(|n| n > 0) {
            return;
        }
        assert!(Instant::now() < deadline, "no copy began\n{}", two.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_table_moves_to_another_shard_under_writers_keeping_every_write_and_its_unique_index() {
    let two = Two::start("tmove", &[], 2000);
    let (a_primary, a_replica, b) = (&two.a[two.p], &two.a[1 - two.p], &two.b);
    let flags = tempfile::tempdir().expect("tempdir");
    let writers = two.writers(flags.path(), "live");
    std::thread::sleep(Duration::from_millis(1500));
    let began = Instant::now();
    let (ok, text) = kura_cluster(
        &two.etcd,
        &["move-table", "--table", "players", "--to", "b"],
    );
    println!("move-table under writers: {:?}\n{text}", began.elapsed());
    std::fs::write(flags.path().join("moved"), "").expect("flag");
    assert!(
        ok && text.contains("moved table players to shard b"),
        "{text}\n{}",
        two.logs()
    );
    match writers.join().expect("the writers' thread") {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("table_move.py: {e}\n{}", two.logs()),
    }

    // The table is b's, in etcd and in every node's placement; a's nodes dropped it.
    let (ok, status) = kura_cluster(&two.etcd, &["status"]);
    assert!(ok && !status.contains("moving"), "{status}");
    two.moved_to_b();
    let count = b.server.sql_ok("SELECT COUNT(*) FROM players");
    let through_a = a_primary.server.sql_ok("SELECT COUNT(*) FROM players");
    assert_eq!(count, through_a, "the same rows through a");
    assert!(count.trim().parse::<u64>().expect("a count") >= 2000);

    // Moved again, back to a (whose copy was dropped), with no writer: the rows come
    // back whole, and the unique index with them.
    let (ok, text) = kura_cluster(
        &two.etcd,
        &["move-table", "--table", "players", "--to", "a"],
    );
    assert!(ok, "{text}\n{}", two.logs());
    let back = a_primary.server.sql_ok("SELECT COUNT(*) FROM players");
    assert_eq!(back, count, "moved back");
    let (ok, text) = a_primary
        .server
        .sql("INSERT INTO players (id, name, email) VALUES (999999, 'd', '7@x')");
    assert!(!ok && text.contains("1062"), "{text}");
    assert!(holds(a_replica, "players"), "a's replica follows");
}

#[test]
fn a_table_move_survives_kill_9_of_its_target_and_source_and_an_abort() {
    let mut two = Two::start("tcrash", &["--move-copy-rate", "5000"], 8000);
    let flags = tempfile::tempdir().expect("tempdir");
    let writers = two.writers(flags.path(), "crash");
    let mut command = move_table(&two.etcd, &["--to", "b"]);

    // The target, killed mid-copy and started again: it goes on from its position.
    copying(&two, &two.b);
    two.b.server.kill().expect("SIGKILL b");
    two.b.server.restart().expect("restart b");
    elected(&[&two.b]);
    // The source's primary, killed while b copies from it: its replica takes over.
    copying(&two, &two.b);
    let p = two.p;
    two.a[p].server.kill().expect("SIGKILL a's primary");
    two.p = elected(&[&two.a[1 - p]]);
    two.p = 1 - p;
    two.a[p].server.restart().expect("restart a's old primary");

    let deadline = Instant::now() + Duration::from_secs(180);
    while command.try_wait().expect("the command").is_none() {
        assert!(
            Instant::now() < deadline,
            "the move never ended\n{}",
            two.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = command.wait_with_output().expect("its output");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    std::fs::write(flags.path().join("moved"), "").expect("flag");
    assert!(
        output.status.success() && text.contains("moved table players to shard b"),
        "{text}\n{}",
        two.logs()
    );
    match writers.join().expect("the writers' thread") {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("table_move.py crash: {e}\n{}", two.logs()),
    }
    two.moved_to_b();
    let count = two.b.server.sql_ok("SELECT COUNT(*) FROM players");

    // Back to a, abandoned mid-copy: the table stays on b and takes DDL again.
    let mut back = move_table(&two.etcd, &["--to", "a"]);
    copying(&two, &two.a[two.p]);
    let (ok, text) = kura_cluster(&two.etcd, &["move-table", "--table", "players", "--abort"]);
    assert!(ok && text.contains("abandoned"), "{text}");
    let _ = back.wait();
    let deadline = Instant::now() + ELECTED_WITHIN;
    loop {
        let (ok, text) = two.b.server.sql("ALTER TABLE players ADD COLUMN x INT");
        if ok {
            break;
        }
        assert!(
            text.contains("1205") && Instant::now() < deadline,
            "{text}\n{}",
            two.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(two.b.server.sql_ok("SELECT COUNT(*) FROM players"), count);
    // And again, to the end: a's copy left by the abandoned move is dropped first.
    let (ok, text) = kura_cluster(
        &two.etcd,
        &["move-table", "--table", "players", "--to", "a"],
    );
    assert!(ok, "{text}\n{}", two.logs());
    let a = &two.a[two.p];
    assert_eq!(a.server.sql_ok("SELECT COUNT(*) FROM players"), count);
    assert_eq!(
        a.server
            .sql_ok("SELECT COUNT(*) FROM players WHERE x IS NULL")
            .trim(),
        count.trim(),
        "the column added on b came along"
    );
    let (ok, text) = a
        .server
        .sql("INSERT INTO players (id, name, email) VALUES (999999, 'd', '7@x')");
    assert!(!ok && text.contains("1062"), "{text}");
}
