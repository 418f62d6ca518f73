//! `/metrics` on `--metrics-port`, read by the Prometheus project's own parser
//! (`tests/clients/metrics_check.py`, in the virtualenv `scripts/install-test-deps.sh`
//! makes): the exposition parses, its get counters equal `stats`, and the latency
//! histograms are whole.
#![allow(clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;

use kura_testkit::{kura_bin, Durability, KuraServer};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The metrics address kura printed.
fn metrics_addr(kura: &KuraServer) -> SocketAddr {
    let log = kura.log();
    log.lines()
        .find_map(|line| line.strip_prefix("kura metrics listening on "))
        .and_then(|addr| addr.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metrics line in kura's output:\n{log}"))
}

#[test]
fn metrics_parse_and_agree_with_stats() {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = KuraServer::start(&bin, Durability::Fsync, &["--metrics-port", "0"]).expect("kura");
    let metrics = metrics_addr(&kura);
    assert!(
        metrics.ip().is_loopback(),
        "metrics listen on loopback by default"
    );
    let output = Command::new(root().join("target/pyenv/bin/python"))
        .arg(root().join("tests/clients/metrics_check.py"))
        .arg(kura.addr().port().to_string())
        .arg(metrics.port().to_string())
        .output()
        .expect("run metrics_check.py (scripts/install-test-deps.sh makes the venv)");
    assert!(
        output.status.success(),
        "metrics_check.py:\n{}{}\nkura's log:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        kura.log()
    );

    // Anything but GET /metrics is refused with HTTP's words.
    for (request, status) in [
        ("GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 404"),
        ("POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 405"),
    ] {
        let mut stream = TcpStream::connect(metrics).expect("connect");
        stream.write_all(request.as_bytes()).expect("send");
        let mut reply = String::new();
        stream.read_to_string(&mut reply).expect("read");
        assert!(reply.starts_with(status), "{request:?} got {reply:?}");
    }
}

/// One request to the metrics port with an optional `Authorization` header; the reply.
fn get_metrics(addr: SocketAddr, authorization: Option<&str>) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let header = authorization.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    let request = format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{header}\r\n");
    stream.write_all(request.as_bytes()).expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read");
    reply
}

/// `--metrics-listen` off the loopback follows `-l`'s rule: refused unless the port
/// is protected, here by a bearer token (`--metrics-token-file`) every scrape must
/// show, or unless `--insecure` says the operator means it.
#[test]
fn metrics_off_the_loopback_need_a_bearer_token() {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let open = ["--metrics-port", "0", "--metrics-listen", "0.0.0.0"];
    let error = match KuraServer::start(&bin, Durability::Fsync, &open) {
        Ok(_) => panic!("metrics served on 0.0.0.0 with nothing to protect them"),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("--metrics-token-file"), "{error}");

    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cr3t-t0ken-for-prometheus\n").expect("write");
    let token_file = token_file.to_string_lossy().into_owned();
    let mut args = open.to_vec();
    args.extend(["--metrics-token-file", &token_file]);
    let kura = KuraServer::start(&bin, Durability::Fsync, &args).expect("kura with a token");
    let metrics = SocketAddr::from(([127, 0, 0, 1], metrics_addr(&kura).port()));
    for wrong in [
        None,
        Some("Bearer s3cr3t-t0ken-for-prometheuS"),
        Some("Basic s3cr3t-t0ken-for-prometheus"),
    ] {
        let reply = get_metrics(metrics, wrong);
        assert!(reply.starts_with("HTTP/1.1 401"), "{wrong:?}: {reply}");
        assert!(reply.contains("WWW-Authenticate: Bearer"), "{reply}");
        assert!(!reply.contains("memcached_"), "{reply}");
    }
    let reply = get_metrics(metrics, Some("Bearer s3cr3t-t0ken-for-prometheus"));
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("memcached_current_connections"), "{reply}");

    let mut args = open.to_vec();
    args.push("--insecure");
    let kura = KuraServer::start(&bin, Durability::Fsync, &args).expect("kura --insecure");
    let metrics = SocketAddr::from(([127, 0, 0, 1], metrics_addr(&kura).port()));
    assert!(get_metrics(metrics, None).starts_with("HTTP/1.1 200"));
}
