//! Logging in on the memcached port with a users file (`-Y`): text and binary on one
//! port with one file, argon2-hashed passwords, the limit on failed logins, the
//! counters, a log that names the user but never the password, and a replica that
//! logs in to its primary (`--replication-login`, an admin of `--admin-auth-file`).
//! (`auth_text` and `binprot_sasl` in the transcripts compare the replies with
//! memcached's.)
#![allow(clippy::expect_used)]

use argon2::password_hash::{PasswordHasher, SaltString};
use kura_testkit::{kura_bin, Client, Durability, KuraOptions, KuraServer};

fn hashed(password: &str) -> String {
    let salt = SaltString::from_b64("a3VyYXRlc3RzYWx0").expect("salt");
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .expect("hash")
        .to_string()
}

#[test]
fn one_users_file_for_text_and_binary_with_hashes_limits_and_counters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    std::fs::write(&users, format!("ann:secret\nbob:{}\n", hashed("hunter2"))).expect("write");
    let users = users.to_string_lossy().into_owned();
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = KuraServer::start(&bin, Durability::Fsync, &["-Y", &users]).expect("kura");

    // Text, with the hashed password.
    let mut text = Client::connect(kura.addr()).expect("connect");
    let reply = text.request(b"get a\r\n", b"\r\n").expect("reply");
    assert_eq!(reply, b"CLIENT_ERROR unauthenticated\r\n");
    let reply = text
        .request(
            b"set x 0 0 11\r\nbob hunter2\r\nset a 0 0 1\r\n1\r\n",
            b"STORED\r\nSTORED\r\n",
        )
        .expect("login");
    assert_eq!(reply, b"STORED\r\nSTORED\r\n");

    // Binary on the same port: SASL PLAIN with the same file.
    let mut binary = Client::connect(kura.addr()).expect("connect");
    binary
        .send(
            &[
                kura_testkit::binary::request(0x21, b"PLAIN", b"\0bob\0hunter2"),
                kura_testkit::binary::request(0x00, b"a", b""),
            ]
            .concat(),
        )
        .expect("send");
    let reply = binary
        .read_reply_until(|r| r.len() >= 24 + 13 + 24 + 5, kura_testkit::REPLY_TIMEOUT)
        .expect("reply")
        .bytes;
    assert_eq!(&reply[24..37], b"Authenticated");
    assert_eq!(
        &reply[37 + 6..37 + 8],
        &[0, 0],
        "get after login: {reply:?}"
    );
    assert_eq!(reply[reply.len() - 1], b'1');

    // Five failed logins on one connection, and it is closed after the fifth reply.
    let mut guesser = Client::connect(kura.addr()).expect("connect");
    let guess = b"set x 0 0 12\r\nbob hunter3!\r\n".repeat(5);
    guesser.send(&guess).expect("send");
    let reply = guesser.read_to_eof().expect("closed");
    assert_eq!(reply, b"CLIENT_ERROR authentication failure\r\n".repeat(5));

    // Counted as memcached counts them, logged with the user only.
    let stats = text.request(b"stats\r\n", b"END\r\n").expect("stats");
    let stats = String::from_utf8_lossy(&stats);
    assert!(stats.contains("STAT auth_cmds 7\r\n"), "{stats}");
    assert!(stats.contains("STAT auth_errors 5\r\n"), "{stats}");
    let log = kura.wait_for_log("after 5 failed logins", kura_testkit::REPLY_TIMEOUT);
    assert!(log.contains("failed text login as \"bob\""), "{log}");
    assert!(log.contains("after 5 failed logins"), "{log}");
    assert!(!log.contains("hunter3"), "the log shows a password: {log}");
}

#[test]
fn sasl_without_a_users_file_refuses_to_start() {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let started = KuraServer::start(&bin, Durability::Fsync, &["-S"]);
    let error = match started {
        Ok(_) => panic!("kura started with -S and no -Y"),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("-Y"), "{error}");
}

/// Reads `key` on `server` until it shows `value` (at most 30 s); the replica's
/// stream is asynchronous.
fn eventually_reads(server: &KuraServer, key: &str, value: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut client = Client::connect(server.addr()).expect("connect");
    let want = format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len());
    while std::time::Instant::now() < deadline {
        let reply = client
            .request(format!("get {key}\r\n").as_bytes(), b"END\r\n")
            .expect("get");
        if reply == want.as_bytes() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

#[test]
fn a_replica_logs_in_to_a_primary_with_a_users_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    std::fs::write(&users, "ann:secret\n").expect("write");
    let admins = dir.path().join("admins");
    std::fs::write(&admins, "repl:r3pl\n").expect("write");
    let login = dir.path().join("login");
    std::fs::write(&login, "repl:r3pl\n").expect("write");
    let users = users.to_string_lossy().into_owned();
    let admins = admins.to_string_lossy().into_owned();
    let login = login.to_string_lossy().into_owned();
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let primary = KuraServer::start(
        &bin,
        Durability::Fsync,
        &["-Y", &users, "--admin-auth-file", &admins],
    )
    .expect("primary");
    let primary_addr = primary.addr().to_string();
    let replica = KuraServer::start(
        &bin,
        Durability::Fsync,
        &["--replica-of", &primary_addr, "--replication-login", &login],
    )
    .expect("replica");
    let stranger = KuraServer::start(&bin, Durability::Fsync, &["--replica-of", &primary_addr])
        .expect("stranger");

    let mut writer = Client::connect(primary.addr()).expect("connect");
    let reply = writer
        .request(
            b"set x 0 0 10\r\nann secret\r\nset k 0 0 5\r\nhello\r\n",
            b"STORED\r\nSTORED\r\n",
        )
        .expect("write");
    assert_eq!(reply, b"STORED\r\nSTORED\r\n");
    assert!(
        eventually_reads(&replica, "k", "hello"),
        "the replica with a login never got the write; its log:\n{}",
        replica.log()
    );
    // A replica without a login is refused, and its `stats replication` says so.
    let mut reader = Client::connect(stranger.addr()).expect("connect");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let stats = reader
            .request(b"stats replication\r\n", b"END\r\n")
            .expect("stats");
        let stats = String::from_utf8_lossy(&stats).into_owned();
        if stats.contains("primary_last_error CLIENT_ERROR_unauthenticated") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{stats}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let reply = reader.request(b"get k\r\n", b"END\r\n").expect("get");
    assert_eq!(
        reply, b"END\r\n",
        "a replica that could not log in holds nothing"
    );
}

#[test]
fn an_open_listener_without_users_refuses_to_start_unless_meant() {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let error = match KuraOptions::new(&bin, Durability::Fsync)
        .listen("0.0.0.0")
        .arg("--sql-port")
        .arg("off")
        .start()
    {
        Ok(_) => panic!("kura listened on 0.0.0.0 with no users file"),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("--insecure"), "{error}");
    // TLS that lets anyone in encrypts, but protects nothing: still refused.
    let certs = kura_testkit::tls::Certificates::generate().expect("certificates");
    let mut options = KuraOptions::new(&bin, Durability::Fsync)
        .listen("0.0.0.0")
        .arg("--sql-port")
        .arg("off");
    for arg in certs.server_args(&[]) {
        options = options.arg(arg);
    }
    let error = match options.start() {
        Ok(_) => panic!("kura listened on 0.0.0.0 with TLS but no client certificates"),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("ssl_verify_mode=2"), "{error}");
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    std::fs::write(&users, "ann:secret\n").expect("write");
    let ca = format!("ssl_ca_cert={}", certs.path("ca.pem").display());
    for meant in [
        vec!["--insecure".to_string()],
        vec!["-Y".to_string(), users.to_string_lossy().into_owned()],
        certs.server_args(&["ssl_verify_mode=2", &ca]),
    ] {
        let mut options = KuraOptions::new(&bin, Durability::Fsync)
            .listen("0.0.0.0")
            .arg("--sql-port")
            .arg("off");
        for arg in &meant {
            options = options.arg(arg);
        }
        options.start().unwrap_or_else(|e| panic!("{meant:?}: {e}"));
    }
}

#[test]
fn sighup_reads_the_users_file_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    std::fs::write(&users, "ann:one\n").expect("write");
    let file = users.to_string_lossy().into_owned();
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = KuraServer::start(&bin, Durability::Fsync, &["-Y", &file]).expect("kura");
    let login = |password: &str| -> Vec<u8> {
        let mut client = Client::connect(kura.addr()).expect("connect");
        let token = format!("ann {password}");
        let request = format!("set x 0 0 {}\r\n{token}\r\n", token.len());
        client.request(request.as_bytes(), b"\r\n").expect("login")
    };
    assert_eq!(login("one"), b"STORED\r\n");
    std::fs::write(&users, "ann:two\n").expect("rewrite");
    let hup = std::process::Command::new("kill")
        .arg("-HUP")
        .arg(kura.pid().expect("running").to_string())
        .status()
        .expect("kill -HUP");
    assert!(hup.success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while login("two") != b"STORED\r\n" {
        assert!(std::time::Instant::now() < deadline, "{}", kura.log());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(login("one"), b"CLIENT_ERROR authentication failure\r\n");
    let log = kura.wait_for_log("reloaded the users", kura_testkit::REPLY_TIMEOUT);
    assert!(log.contains("reloaded the users"), "{log}");
}

/// A user with an empty password could log in with no password at all: such a file
/// stops the server at start, naming the line, whichever flag names it.
#[test]
fn an_empty_password_is_refused_at_start_naming_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let users = dir.path().join("users");
    std::fs::write(&users, "# users\nann:secret\nalice:\n").expect("write");
    let users = users.to_string_lossy().into_owned();
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    for flag in ["-Y", "--admin-auth-file"] {
        let error = match KuraServer::start(&bin, Durability::Fsync, &[flag, &users]) {
            Ok(_) => panic!("kura started with {flag} naming a user with an empty password"),
            Err(e) => e.to_string(),
        };
        assert!(
            error.contains(&format!("{users}, line 3")) && error.contains("empty"),
            "{flag}: {error}"
        );
    }
}
