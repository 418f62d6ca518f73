//! Any node serves any client (three `kura` processes of one shard and a private
//! etcd): a replica forwards memcached changes and reads (text, meta, binary) to its
//! shard's primary, through a SIGKILL of the primary, logging in where the primary
//! has users, without holding up its worker's other connections while the primary is
//! slow; and it passes each SQL connection on to the primary whole (Debian's
//! `mariadb` client). Changes, transactions and reads made through a replica are the
//! primary's; a session passed on to a primary that stops being the shard's is
//! closed (the client sees the connection lost, 2013), never left answering from the
//! old primary; new connections reach the new primary.

#![allow(clippy::expect_used)]

mod clusters;
mod replicas;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clusters::*;
use kura_testkit::etcd::Etcd;
use kura_testkit::ReplyEnd;
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

/// One binary request (`kura_testkit::binary::compose`'s words) on a connection of
/// its own; the response packets before the marker's.
fn binary(addr: std::net::SocketAddr, line: &str) -> Vec<u8> {
    use kura_testkit::binary as b;
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(HUNG_AFTER))
        .expect("read timeout");
    let mut packet = b::compose(line).expect("a binary request");
    packet.extend_from_slice(&b::marker());
    stream.write_all(&packet).expect("send");
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while !b::complete(&reply) {
        let n = stream.read(&mut chunk).expect("read");
        assert!(n > 0, "closed after {reply:?}");
        reply.extend_from_slice(&chunk[..n]);
    }
    b::strip_marker(&reply).to_vec()
}

/// Any node serves any client: writers and readers connected to a node that is not
/// the primary (replicas forward changes and reads) go on through a SIGKILL of the
/// primary, with clear `SERVER_ERROR`s while there is none and never a false
/// `STORED`; every write acknowledged through the replica is on the new primary and
/// reads back through the same replica.
#[test]
fn writers_through_a_replica_go_on_across_a_failover() {
    let etcd = Etcd::start(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let mut nodes = [
        node_at(&etcd.endpoint(), "kura-cluster-j-", "127.0.0.1", None, &[]),
        node_at(&etcd.endpoint(), "kura-cluster-k-", "127.0.0.1", None, &[]),
        node_at(&etcd.endpoint(), "kura-cluster-l-", "127.0.0.1", None, &[]),
    ];
    let first = elected(&nodes.iter().collect::<Vec<_>>());
    // The writers' node: a replica now, and after the failover whichever it is.
    let via = (first + 1) % 3;
    let via_addr = nodes[via].server.addr();
    // A binary client through the replica too: its set lands on the primary, its get
    // reads the primary's value.
    let stored = binary(via_addr, "set key=bin value=binary-value flags=7");
    assert_eq!(
        &stored[6..8],
        &[0, 0],
        "a binary set through the replica: {stored:?}"
    );
    assert_eq!(
        request(
            &mut client(&nodes[first].server),
            b"get bin\r\n",
            b"END\r\n"
        ),
        "VALUE bin 7 12\r\nbinary-value\r\nEND\r\n"
    );
    let got = binary(via_addr, "get key=bin");
    assert_eq!(
        &got[6..8],
        &[0, 0],
        "a binary get through the replica: {got:?}"
    );
    assert!(got.ends_with(b"binary-value"), "{got:?}");
    let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let refused: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (acked, refused, stop) =
                (Arc::clone(&acked), Arc::clone(&refused), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut c = kura_testkit::Client::connect(via_addr).expect("connect");
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let (key, value) = (format!("r{w}-{i}"), format!("v{i}"));
                    let reply = set(&mut c, &key, &value);
                    if reply == "STORED\r\n" {
                        // Read back through the same node: the primary's answer.
                        let got = request(&mut c, format!("get {key}\r\n").as_bytes(), b"\r\n");
                        if got.starts_with("VALUE") {
                            let want =
                                format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len());
                            assert_eq!(got, want, "read back through the replica");
                        } else {
                            assert!(got.starts_with("SERVER_ERROR"), "{key}: {got:?}");
                        }
                        acked.lock().expect("acked").insert(key, value);
                    } else {
                        assert!(reply.starts_with("SERVER_ERROR"), "{key}: {reply:?}");
                        refused.lock().expect("refused").push(reply);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            })
        })
        .collect();
    until_acked(&acked, 200, "no progress through the replica");
    nodes[first].server.kill().expect("SIGKILL the primary");
    let killed = Instant::now();
    let before = acked.lock().expect("acked").len();
    // Writes go on through the same node once a new primary is elected.
    until_acked(
        &acked,
        before + 200,
        "writes through the replica did not resume",
    );
    let resumed = killed.elapsed();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    let acked = acked.lock().expect("acked").clone();
    let refused = refused.lock().expect("refused").clone();
    eprintln!(
        "writes through a replica resumed {resumed:?} after the SIGKILL; {} acknowledged, {} refused meanwhile (first: {:?})",
        acked.len(),
        refused.len(),
        refused.first()
    );
    let survivors: Vec<usize> = (0..3).filter(|&i| i != first).collect();
    let p = *survivors
        .iter()
        .find(|&&i| role(&nodes[i]) == "primary")
        .expect("a new primary");
    holds_every_acked(&nodes[p].server, &acked);
}

/// With users (`-Y`, `--admin-auth-file`), a replica's forwarded binary requests log in
/// to the primary with SASL PLAIN as `--replication-login`'s admin: an application
/// user's binary set through a replica lands on the primary.
#[test]
fn forwarding_logs_in_to_a_primary_with_users() {
    let etcd = Etcd::start(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let files = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let path = files.path().join(name);
        std::fs::write(&path, text).expect("write");
        path.to_string_lossy().into_owned()
    };
    let users = write("users", "ann:secret\n");
    let admins = write("admins", "root:rootpw\n");
    let login = write("login", "root:rootpw\n");
    let extra = [
        "-Y",
        users.as_str(),
        "--admin-auth-file",
        admins.as_str(),
        "--replication-login",
        login.as_str(),
    ];
    let nodes = [
        node_at(
            &etcd.endpoint(),
            "kura-cluster-m-",
            "127.0.0.1",
            None,
            &extra,
        ),
        node_at(
            &etcd.endpoint(),
            "kura-cluster-n-",
            "127.0.0.1",
            None,
            &extra,
        ),
    ];
    // The text login of an admin, then `stats replication`, as a map.
    let stats = |node: &Node| -> BTreeMap<String, String> {
        let mut c = client(&node.server);
        let token = "root rootpw";
        let login = format!("set kura-login 0 0 {}\r\n{token}\r\n", token.len());
        assert_eq!(request(&mut c, login.as_bytes(), b"\r\n"), "STORED\r\n");
        request(&mut c, b"stats replication\r\n", b"END\r\n")
            .lines()
            .filter_map(|l| l.strip_prefix("STAT "))
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let deadline = Instant::now() + ELECTED_WITHIN;
    let (primary, replica) = loop {
        let roles: Vec<String> = nodes
            .iter()
            .map(|n| stats(n).get("role").cloned().unwrap_or_default())
            .collect();
        if let Some(p) = roles.iter().position(|r| r == "primary") {
            let r = 1 - p;
            if roles[r] == "replica"
                && stats(&nodes[p])
                    .get("connected_replicas")
                    .map(String::as_str)
                    == Some("1")
            {
                break (p, r);
            }
        }
        assert!(
            Instant::now() < deadline,
            "roles {roles:?}\n{}",
            logs(&nodes.iter().collect::<Vec<_>>())
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // ann's binary SASL login on the replica, then a set forwarded to the primary.
    let packet = [
        kura_testkit::binary::request(0x21, b"PLAIN", b"\0ann\0secret"),
        kura_testkit::binary::compose("set key=users-bin value=through flags=0").expect("set"),
        kura_testkit::binary::marker(),
    ]
    .concat();
    let reply = {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect(nodes[replica].server.addr()).expect("connect");
        stream.set_read_timeout(Some(HUNG_AFTER)).expect("timeout");
        stream.write_all(&packet).expect("send");
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        while !kura_testkit::binary::complete(&reply) {
            let n = stream.read(&mut chunk).expect("read");
            assert!(n > 0, "closed after {reply:?}");
            reply.extend_from_slice(&chunk[..n]);
        }
        kura_testkit::binary::render(kura_testkit::binary::strip_marker(&reply))
    };
    assert_eq!(reply.len(), 2, "{reply:?}");
    assert!(
        reply[0].starts_with("sasl-auth status=0x00 ") && reply[1].starts_with("set status=0x00 "),
        "{reply:?}"
    );
    let mut c = client(&nodes[primary].server);
    let token = "root rootpw";
    let login = format!("set kura-login 0 0 {}\r\n{token}\r\n", token.len());
    assert_eq!(request(&mut c, login.as_bytes(), b"\r\n"), "STORED\r\n");
    assert_eq!(
        request(&mut c, b"get users-bin\r\n", b"END\r\n"),
        "VALUE users-bin 0 7\r\nthrough\r\nEND\r\n"
    );
}

/// A replica's worker is not held by a forward: with one worker thread, a change
/// forwarded to a primary that does not answer (SIGSTOPped) waits, while another
/// connection of the same worker is answered meanwhile; the change's reply comes once
/// the primary runs again.
#[test]
fn a_forward_waiting_for_the_primary_holds_up_no_other_connection() {
    let etcd = Etcd::start(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")));
    let one_worker = ["-t", "1"];
    let nodes = [
        node_at(
            &etcd.endpoint(),
            "kura-cluster-p-",
            "127.0.0.1",
            None,
            &one_worker,
        ),
        node_at(
            &etcd.endpoint(),
            "kura-cluster-q-",
            "127.0.0.1",
            None,
            &one_worker,
        ),
        node_at(
            &etcd.endpoint(),
            "kura-cluster-r-",
            "127.0.0.1",
            None,
            &one_worker,
        ),
    ];
    let first = elected(&nodes.iter().collect::<Vec<_>>());
    let via = (first + 1) % 3;
    let mut waiting = client(&nodes[via].server);
    assert_eq!(set(&mut waiting, "before", "v"), "STORED\r\n");
    nodes[first].server.pause().expect("SIGSTOP the primary");
    waiting.send(b"set during 0 0 1\r\nx\r\n").expect("send");
    std::thread::sleep(Duration::from_millis(300));
    let mut other = client(&nodes[via].server);
    let version = request(&mut other, b"version\r\n", b"\r\n");
    assert!(version.starts_with("VERSION "), "{version:?}");
    // Answered while the forwarded change still waits for the stopped primary.
    let pending = waiting
        .read_reply_until_suffix(b"\r\n", Duration::from_millis(100))
        .expect("read");
    assert_eq!(
        (
            pending.end,
            String::from_utf8_lossy(&pending.bytes).into_owned()
        ),
        (ReplyEnd::Timeout, String::new()),
        "the forwarded change was answered before the other connection"
    );
    nodes[first].server.resume().expect("SIGCONT the primary");
    let reply = waiting
        .read_reply_until_suffix(b"\r\n", HUNG_AFTER)
        .expect("read");
    let reply = String::from_utf8_lossy(&reply.bytes).into_owned();
    assert!(
        reply == "STORED\r\n" || reply.starts_with("SERVER_ERROR "),
        "{reply:?}"
    );
}
