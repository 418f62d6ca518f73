//! Who may change what a node is: application users (`-Y`) and administrative users
//! (`--admin-auth-file`). An application user's `replicaof`, `fence`, `failover`, `replicate` and
//! the other administrative commands are refused and change nothing; an admin's run
//! and are logged with the admin's name; replicas and `kura backup` log in as admins.
#![allow(clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use kura_testkit::{kura_bin, Client, Durability, KuraServer};

/// Writes `text` to `dir/name` and returns the path as a string.
fn file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.to_string_lossy().into_owned()
}

/// A connection logged in as `user` with the text login.
fn logged_in(server: &KuraServer, user: &str, password: &str) -> Client {
    let mut client = Client::connect(server.addr()).expect("connect");
    let token = format!("{user} {password}");
    let login = format!("set login 0 0 {}\r\n{token}\r\n", token.len());
    let reply = client.request(login.as_bytes(), b"\r\n").expect("login");
    assert_eq!(reply, b"STORED\r\n", "login as {user}");
    client
}

/// `stats replication` as name and value pairs.
fn replication(client: &mut Client) -> Vec<(String, String)> {
    let reply = client
        .request(b"stats replication\r\n", b"END\r\n")
        .expect("stats replication");
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn stat(stats: &[(String, String)], name: &str) -> String {
    stats
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {name} in {stats:?}"))
}

fn request(client: &mut Client, line: &str) -> String {
    let reply = client
        .request(format!("{line}\r\n").as_bytes(), b"\r\n")
        .expect("reply");
    String::from_utf8_lossy(&reply).into_owned()
}

/// With `-Y` alone every user is an application user: `replicaof` toward an empty
/// node and `fence` with a newer epoch are refused, nothing is copied or fenced, and
/// the data and writes go on.
#[test]
fn an_application_user_can_neither_demote_nor_fence_a_primary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = file(dir.path(), "users", "ann:secret\n");
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let primary = KuraServer::start(&bin, Durability::Fsync, &["-Y", &users]).expect("primary");
    let empty = KuraServer::start(&bin, Durability::Fsync, &[]).expect("empty node");
    let mut ann = logged_in(&primary, "ann", "secret");
    assert_eq!(request(&mut ann, "set k 0 0 5\r\nhello"), "STORED\r\n");
    let stats = replication(&mut ann);
    let history = stat(&stats, "history_id");
    let epoch: u64 = stat(&stats, "epoch").parse().expect("epoch");
    let empty_port = empty.addr().port();

    let refused = [
        format!("replicaof 127.0.0.1 {empty_port}"),
        format!("fence {history} {} 127.0.0.1 {empty_port}", epoch + 5),
        "replicaof no one".to_string(),
        format!("failover to 127.0.0.1 {empty_port} 100"),
        format!("replicate {history} {epoch} 0"),
        "shutdown".to_string(),
        "refresh_certs".to_string(),
        "cache_memlimit 64".to_string(),
        "verbosity 2".to_string(),
    ];
    for line in &refused {
        let reply = request(&mut ann, line);
        assert!(
            reply.starts_with("CLIENT_ERROR ") && reply.contains("administrative"),
            "{line}: {reply:?}"
        );
    }
    let stats = replication(&mut ann);
    assert_eq!(stat(&stats, "role"), "primary", "{stats:?}");
    assert_eq!(stat(&stats, "epoch"), epoch.to_string(), "{stats:?}");
    assert!(
        !stats.iter().any(|(n, _)| n == "fencing" || n == "primary"),
        "{stats:?}"
    );
    assert_eq!(request(&mut ann, "set k2 0 0 2\r\nok"), "STORED\r\n");
    let reply = ann.request(b"get k\r\n", b"END\r\n").expect("get");
    assert_eq!(reply, b"VALUE k 0 5\r\nhello\r\nEND\r\n");
    let log = primary.wait_for_log("refused replicaof", kura_testkit::REPLY_TIMEOUT);
    assert!(
        log.contains("refused replicaof from application user \"ann\""),
        "{log}"
    );

    // Without any users file every client is trusted, as with memcached; what it
    // runs is logged all the same.
    let mut local = Client::connect(empty.addr()).expect("connect");
    assert_eq!(request(&mut local, "verbosity 1"), "OK\r\n");
    let log = empty.wait_for_log("ran verbosity 1", kura_testkit::REPLY_TIMEOUT);
    assert!(
        log.contains("a client from 127.0.0.1:") && log.contains("ran verbosity 1"),
        "{log}"
    );
}

/// An admin's `replicaof` and `verbosity` run, and the log names the admin; the admin
/// may also do what application users do.
#[test]
fn an_admin_user_runs_administrative_commands_and_is_logged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = file(dir.path(), "users", "ann:secret\n");
    let admins = file(dir.path(), "admins", "root:t0ps3cret\n");
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let node = KuraServer::start(
        &bin,
        Durability::Fsync,
        &["-Y", &users, "--admin-auth-file", &admins],
    )
    .expect("node");
    let other = KuraServer::start(&bin, Durability::Fsync, &[]).expect("other primary");
    let mut ann = logged_in(&node, "ann", "secret");
    assert!(request(&mut ann, "verbosity 1").starts_with("CLIENT_ERROR "));
    let mut root = logged_in(&node, "root", "t0ps3cret");
    assert_eq!(request(&mut root, "set k 0 0 1\r\n1"), "STORED\r\n");
    assert_eq!(request(&mut root, "verbosity 1"), "OK\r\n");
    let other_addr = other.addr();
    assert_eq!(
        request(
            &mut root,
            &format!("replicaof {} {}", other_addr.ip(), other_addr.port())
        ),
        "OK\r\n"
    );
    let stats = replication(&mut root);
    assert_eq!(stat(&stats, "role"), "replica", "{stats:?}");
    let log = node.wait_for_log("replicaof", kura_testkit::REPLY_TIMEOUT);
    assert!(
        log.contains("admin \"root\" from 127.0.0.1:")
            && log.contains(&format!(
                "ran replicaof {} {}",
                other_addr.ip(),
                other_addr.port()
            )),
        "{log}"
    );
    assert!(log.contains("ran verbosity 1"), "{log}");

    // Admins log in over SASL too, and SIGHUP reads the admins' file again.
    let sasl = |password: &str| -> u8 {
        let mut binary = Client::connect(node.addr()).expect("connect");
        let message = format!("\0root\0{password}");
        binary
            .send(&kura_testkit::binary::request(
                0x21,
                b"PLAIN",
                message.as_bytes(),
            ))
            .expect("send");
        let reply = binary
            .read_reply_until(|r| r.len() >= 24, kura_testkit::REPLY_TIMEOUT)
            .expect("reply")
            .bytes;
        reply[7]
    };
    assert_eq!(sasl("t0ps3cret"), 0x00);
    std::fs::write(&admins, "root:n3wpass\n").expect("rewrite");
    let hup = std::process::Command::new("kill")
        .arg("-HUP")
        .arg(node.pid().expect("running").to_string())
        .status()
        .expect("kill -HUP");
    assert!(hup.success());
    let reloaded = format!("reloaded the users of {admins}");
    let log = node.wait_for_log(&reloaded, kura_testkit::REPLY_TIMEOUT);
    assert!(log.contains(&reloaded), "{log}");
    assert_eq!(sasl("n3wpass"), 0x00);
    assert_eq!(sasl("t0ps3cret"), 0x20);
}

/// Reads `key` on `server` until it shows `value` (at most 30 s); the replica's
/// stream is asynchronous.
fn eventually_reads(server: &KuraServer, key: &str, value: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut client = Client::connect(server.addr()).expect("connect");
    let want = format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len());
    while Instant::now() < deadline {
        let reply = client
            .request(format!("get {key}\r\n").as_bytes(), b"END\r\n")
            .expect("get");
        if reply == want.as_bytes() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A replica that logs in as an application user is refused and holds nothing; one
/// that logs in as an admin follows. `kura backup` likewise.
#[test]
fn replicas_and_backups_log_in_as_admins() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = file(dir.path(), "users", "ann:secret\n");
    let admins = file(dir.path(), "admins", "repl:r3pl\n");
    let app_login = file(dir.path(), "app-login", "ann:secret\n");
    let admin_login = file(dir.path(), "admin-login", "repl:r3pl\n");
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let primary = KuraServer::start(
        &bin,
        Durability::Fsync,
        &["-Y", &users, "--admin-auth-file", &admins],
    )
    .expect("primary");
    let from = primary.addr().to_string();
    let mut ann = logged_in(&primary, "ann", "secret");
    assert_eq!(request(&mut ann, "set k 0 0 5\r\nhello"), "STORED\r\n");

    let intruder = KuraServer::start(
        &bin,
        Durability::Fsync,
        &["--replica-of", &from, "--replication-login", &app_login],
    )
    .expect("replica with an application login");
    let replica = KuraServer::start(
        &bin,
        Durability::Fsync,
        &["--replica-of", &from, "--replication-login", &admin_login],
    )
    .expect("replica with an admin login");
    assert!(
        eventually_reads(&replica, "k", "hello"),
        "the replica with an admin login never got the write; its log:\n{}",
        replica.log()
    );
    let mut reader = Client::connect(intruder.addr()).expect("connect");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = replication(&mut reader);
        let error = stats
            .iter()
            .find(|(n, _)| n == "primary_last_error")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        if error.starts_with("CLIENT_ERROR") && error.contains("administrative") {
            break;
        }
        assert!(Instant::now() < deadline, "{stats:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        reader.request(b"get k\r\n", b"END\r\n").expect("get"),
        b"END\r\n",
        "a replica refused by its primary holds nothing"
    );

    // kura backup: refused with the application login, done with the admin's.
    let run = |login: &str, to: &Path| {
        std::process::Command::new(&bin)
            .args(["backup", "--from", &from, "--to"])
            .arg(to)
            .args(["--replication-login", login])
            .output()
            .expect("run kura backup")
    };
    let refused = run(&app_login, &dir.path().join("backup-app"));
    assert!(
        !refused.status.success(),
        "a backup with an application login: {}",
        String::from_utf8_lossy(&refused.stdout)
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("administrative"), "{stderr}");
    let done = run(&admin_login, &dir.path().join("backup-admin"));
    assert!(
        done.status.success(),
        "{}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
    let log = primary.wait_for_log("ran replicate", kura_testkit::REPLY_TIMEOUT);
    assert!(log.contains("admin \"repl\""), "{log}");
}
