//! TLS on every port, with certificates the `openssl` command line makes
//! (`kura_testkit::tls`).
//!
//! What is shown: pymemcache over TLS 1.2 and 1.3 with a verified certificate gets
//! the same answers from Debian's memcached -Z and from kura -Z, with and without a
//! required client certificate (`tests/clients/tls_client.py`); `openssl s_client`
//! sees the versions `ssl_min_version` allows; a plain client on a TLS port is cut
//! off and counted; SIGHUP and `refresh_certs` swap the certificate for new
//! connections while one already open goes on, and a broken file keeps the old one;
//! the SQL port speaks TLS to PyMySQL and the `mariadb` client, and refuses a client
//! without it (3159); a
//! replica follows its primary over TLS with `--tls-replication`, shows its client
//! certificate, and one without it does not get in; `kura backup` copies that
//! primary over TLS with a client certificate.
#![allow(clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kura_testkit::tls::{self, Certificates, Versions};
use kura_testkit::{kura_bin, Durability, KuraServer, MemcachedServer};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn certificates() -> Certificates {
    Certificates::generate().unwrap_or_else(|e| panic!("making test certificates: {e}"))
}

fn start_kura(args: &[String]) -> KuraServer {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    KuraServer::start(
        kura_bin(env!("CARGO_BIN_EXE_kura")),
        Durability::Fsync,
        &args,
    )
    .unwrap_or_else(|e| panic!("cannot start kura: {e}"))
}

/// Runs a Python client script of tests/clients (in the test virtualenv).
fn python(script: &str, args: &[String]) -> Result<String, String> {
    kura_testkit::python::run_client(script, args, &[])
}

fn connect(addr: SocketAddr, certs: &Certificates) -> tls::TlsStream {
    tls::connect(addr, &certs.path("ca.pem"), None, Versions::Any)
        .unwrap_or_else(|e| panic!("TLS to {addr}: {e}"))
}

fn ask(stream: &mut tls::TlsStream, request: &[u8], end: &[u8]) -> String {
    let reply = tls::request(stream, request, end).unwrap_or_else(|e| panic!("request: {e}"));
    String::from_utf8_lossy(&reply).into_owned()
}

fn stat(stream: &mut tls::TlsStream, name: &str) -> String {
    let stats = ask(stream, b"stats\r\n", b"END\r\n");
    let prefix = format!("STAT {name} ");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
        .to_string()
}

/// pymemcache's checks against memcached -Z first, then kura -Z, both with
/// `settings`.
fn pymemcache_against_both(certs: &Certificates, settings: &[&str], mode: &str) {
    let args = certs.server_args(settings);
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    let dir = certs.path("").display().to_string();
    let memcached = MemcachedServer::start_tls(&args_ref, certs)
        .unwrap_or_else(|e| panic!("cannot start memcached -Z: {e}"));
    let script_args =
        |addr: SocketAddr| vec![addr.port().to_string(), dir.clone(), mode.to_string()];
    if let Err(e) = python("tls_client.py", &script_args(memcached.addr())) {
        panic!(
            "tls_client.py fails against memcached itself (fix the script):\n{e}\n{}",
            memcached.log()
        );
    }
    let kura = start_kura(&args);
    if let Err(e) = python("tls_client.py", &script_args(kura.addr())) {
        panic!(
            "tls_client.py against kura:\n{e}\nkura's log:\n{}",
            kura.log()
        );
    }
}

#[test]
fn pymemcache_over_tls_gets_memcacheds_answers() {
    let certs = certificates();
    pymemcache_against_both(&certs, &[], "plain");
}

#[test]
fn a_required_client_certificate_lets_in_only_its_holders_as_in_memcached() {
    let certs = certificates();
    let ca = format!("ssl_ca_cert={}", certs.path("ca.pem").display());
    pymemcache_against_both(&certs, &["ssl_verify_mode=2", &ca], "client-cert");
}

/// What `openssl s_client` makes of a handshake offering only `version` (a flag such
/// as `-tls1_2`): the protocol it agreed, and whether the server answered `version`.
fn s_client(addr: SocketAddr, ca: &Path, version: &str) -> (Option<String>, bool) {
    let mut child = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &addr.to_string(),
            version,
            "-CAfile",
        ])
        .arg(ca)
        .args(["-verify_return_error", "-brief", "-ign_eof"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"version\r\nquit\r\n");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let output = child.wait_with_output().expect("s_client's output");
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    let protocol = err
        .lines()
        .find_map(|l| l.strip_prefix("Protocol version: "))
        .map(str::to_string);
    (protocol, out.contains("VERSION "))
}

#[test]
fn openssl_s_client_sees_the_versions_ssl_min_version_allows() {
    let certs = certificates();
    let ca = certs.path("ca.pem");
    let kura = start_kura(&certs.server_args(&[]));
    assert_eq!(
        s_client(kura.addr(), &ca, "-tls1_2"),
        (Some("TLSv1.2".to_string()), true)
    );
    assert_eq!(
        s_client(kura.addr(), &ca, "-tls1_3"),
        (Some("TLSv1.3".to_string()), true)
    );
    assert_eq!(s_client(kura.addr(), &ca, "-tls1_1"), (None, false));
    drop(kura);
    let kura = start_kura(&certs.server_args(&["ssl_min_version=3"]));
    assert_eq!(s_client(kura.addr(), &ca, "-tls1_2"), (None, false));
    assert_eq!(
        s_client(kura.addr(), &ca, "-tls1_3"),
        (Some("TLSv1.3".to_string()), true)
    );
    let mut c = connect(kura.addr(), &certs);
    assert_eq!(stat(&mut c, "ssl_handshake_errors"), "1");
    let settings = ask(&mut c, b"stats settings\r\n", b"END\r\n");
    assert!(settings.contains("STAT ssl_enabled yes\r\n"), "{settings}");
    assert!(
        settings.contains("STAT ssl_min_version tlsv1.3\r\n"),
        "{settings}"
    );
}

#[test]
fn a_plain_client_on_a_tls_port_is_cut_off_and_counted() {
    let certs = certificates();
    let kura = start_kura(&certs.server_args(&[]));
    let mut plain = TcpStream::connect(kura.addr()).expect("connect");
    plain
        .set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    plain.write_all(b"version\r\n").expect("write");
    let mut reply = Vec::new();
    let _ = plain.read_to_end(&mut reply);
    assert!(
        !String::from_utf8_lossy(&reply).contains("VERSION"),
        "a plain request was answered: {reply:?}"
    );
    let mut c = connect(kura.addr(), &certs);
    assert_eq!(stat(&mut c, "ssl_handshake_errors"), "1");
    assert_eq!(
        ask(&mut c, b"version\r\n", b"\r\n").split(' ').next(),
        Some("VERSION")
    );
}

#[test]
fn certificates_reload_without_dropping_connections() {
    let certs = certificates();
    // The server reads copies, so that the test can replace them.
    let (chain, key) = (certs.path("live.pem"), certs.path("live.key"));
    std::fs::copy(certs.path("server.pem"), &chain).expect("copy");
    std::fs::copy(certs.path("server.key"), &key).expect("copy");
    let args = vec![
        "-Z".to_string(),
        "--ssl-chain-cert".to_string(),
        chain.display().to_string(),
        "--ssl-key".to_string(),
        key.display().to_string(),
    ];
    let kura = start_kura(&args);
    let mut open = connect(kura.addr(), &certs);
    assert_eq!(
        ask(&mut open, b"set k 0 0 1\r\na\r\n", b"\r\n"),
        "STORED\r\n"
    );
    let shown = |stream: &tls::TlsStream| {
        stream
            .conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
    };
    assert_eq!(shown(&open), Some(certs.der("server.pem").expect("der")));

    // SIGHUP: new connections get the renewed certificate; the open one goes on.
    std::fs::copy(certs.path("renewed.pem"), &chain).expect("copy");
    std::fs::copy(certs.path("renewed.key"), &key).expect("copy");
    let pid = kura.pid().expect("pid");
    let hup = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .expect("kill -HUP");
    assert!(hup.success());
    let renewed = certs.der("renewed.pem").expect("der");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut fresh = connect(kura.addr(), &certs);
    while shown(&fresh) != Some(renewed.clone()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        fresh = connect(kura.addr(), &certs);
    }
    assert_eq!(shown(&fresh), Some(renewed.clone()));
    assert_eq!(
        ask(&mut open, b"get k\r\n", b"END\r\n"),
        "VALUE k 0 1\r\na\r\nEND\r\n"
    );

    // refresh_certs with a broken file: the reason, and the certificate in use stays.
    std::fs::write(&chain, b"not a certificate\n").expect("write");
    let refused = ask(&mut fresh, b"refresh_certs\r\n", b"\r\n");
    assert!(
        refused.contains(&chain.display().to_string()),
        "refresh_certs with a broken chain: {refused}"
    );
    let after = connect(kura.addr(), &certs);
    assert_eq!(shown(&after), Some(renewed));
    std::fs::copy(certs.path("server.pem"), &chain).expect("copy");
    std::fs::copy(certs.path("server.key"), &key).expect("copy");
    assert_eq!(ask(&mut fresh, b"refresh_certs\r\n", b"\r\n"), "OK\r\n");
    let last = connect(kura.addr(), &certs);
    assert_eq!(shown(&last), Some(certs.der("server.pem").expect("der")));
    assert_eq!(
        ask(&mut open, b"get k\r\n", b"END\r\n"),
        "VALUE k 0 1\r\na\r\nEND\r\n"
    );
}

#[test]
fn the_sql_port_speaks_tls_and_requires_it() {
    let certs = certificates();
    let kura = start_kura(&certs.server_args(&[]));
    let args = vec![
        kura.sql_addr().port().to_string(),
        certs.path("ca.pem").display().to_string(),
    ];
    if let Err(e) = python("sql_tls.py", &args) {
        panic!("sql_tls.py against kura:\n{e}\nkura's log:\n{}", kura.log());
    }
    // MariaDB's own client, verifying the server's certificate for its address.
    let output = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-P", &args[0], "-u", "root", "--batch"])
        .arg(format!("--ssl-ca={}", args[1]))
        .args([
            "--ssl-verify-server-cert",
            "-e",
            "SELECT v FROM tls_t ORDER BY id",
        ])
        .output()
        .expect("the mariadb client (scripts/install-peers.sh installs it)");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "v\none\ntwo\n",
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_replica_follows_over_tls_with_its_certificate() {
    let certs = certificates();
    let ca = format!("ssl_ca_cert={}", certs.path("ca.pem").display());
    // The primary requires client certificates; the replica shows its own chain.
    let primary = start_kura(&certs.server_args(&["ssl_verify_mode=2", &ca]));
    let mut p = tls::connect(
        primary.addr(),
        &certs.path("ca.pem"),
        Some((&certs.path("client.pem"), &certs.path("client.key"))),
        Versions::Any,
    )
    .expect("TLS to the primary with a client certificate");
    for i in 0..100 {
        let request = format!("set k{i} {i} 0 2\r\nv{}\r\n", i % 10);
        assert_eq!(ask(&mut p, request.as_bytes(), b"\r\n"), "STORED\r\n");
    }
    let mut replica_args = certs.server_args(&[&ca]);
    replica_args.extend([
        "--tls-replication".to_string(),
        "--replica-of".to_string(),
        primary.addr().to_string(),
    ]);
    let replica = start_kura(&replica_args);
    let mut r = connect(replica.addr(), &certs);
    let deadline = Instant::now() + Duration::from_secs(30);
    while ask(&mut r, b"get k99\r\n", b"END\r\n") != "VALUE k99 99 2\r\nv9\r\nEND\r\n" {
        assert!(
            Instant::now() < deadline,
            "the replica did not catch up: {}\n{}",
            ask(&mut r, b"stats replication\r\n", b"END\r\n"),
            replica.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        ask(&mut r, b"get k5\r\n", b"END\r\n"),
        "VALUE k5 5 2\r\nv5\r\nEND\r\n"
    );
    // Still streaming over TLS.
    assert_eq!(
        ask(&mut p, b"set late 0 0 1\r\nx\r\n", b"\r\n"),
        "STORED\r\n"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while ask(&mut r, b"get late\r\n", b"END\r\n") != "VALUE late 0 1\r\nx\r\nEND\r\n" {
        assert!(Instant::now() < deadline, "the late write did not arrive");
        std::thread::sleep(Duration::from_millis(50));
    }

    // Without --tls-replication the replica's plain connection never gets a stream.
    let mut plain_args = certs.server_args(&[&ca]);
    plain_args.extend(["--replica-of".to_string(), primary.addr().to_string()]);
    let plain = start_kura(&plain_args);
    let mut q = connect(plain.addr(), &certs);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(ask(&mut q, b"get k5\r\n", b"END\r\n"), "END\r\n");
    let stats = ask(&mut q, b"stats replication\r\n", b"END\r\n");
    assert!(stats.contains("STAT primary_link down\r\n"), "{stats}");

    // kura backup speaks TLS to the same primary, with the client certificate it
    // requires, and the backup checks out.
    let backups = tempfile::Builder::new()
        .prefix("kura-tls-backup-")
        .tempdir_in(root().join("target"))
        .expect("a directory for the backup");
    let dir = backups.path().join("copy");
    let kura = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let backup = Command::new(&kura)
        .args(["backup", "--from", &primary.addr().to_string(), "--to"])
        .arg(&dir)
        .arg("--ssl-ca-cert")
        .arg(certs.path("ca.pem"))
        .arg("--ssl-chain-cert")
        .arg(certs.path("client.pem"))
        .arg("--ssl-key")
        .arg(certs.path("client.key"))
        .output()
        .expect("kura backup");
    assert!(
        backup.status.success(),
        "kura backup over TLS: {}{}",
        String::from_utf8_lossy(&backup.stdout),
        String::from_utf8_lossy(&backup.stderr)
    );
    let verify = Command::new(&kura)
        .args(["backup", "verify"])
        .arg(&dir)
        .output()
        .expect("kura backup verify");
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
}
