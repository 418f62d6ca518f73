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
