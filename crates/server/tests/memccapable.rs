//! libmemcached's conformance test, `memccapable -a` (ASCII protocol) and
//! `memccapable -b` (binary protocol), against a real kura in fsync durability. It
//! flushes the server, so each run gets its own.
//!
//! memccapable is required: without it this test fails (never skips) and says to
//! run `scripts/install-test-deps.sh`.

use std::path::Path;
use std::process::Command;

use kura_testkit::{kura_bin, Durability, KuraServer};

const MEMCCAPABLE: &str = "/usr/bin/memccapable";

#[test]
fn memccapable_ascii_passes() {
    memccapable("-a");
}

#[test]
fn memccapable_binary_passes() {
    memccapable("-b");
}

fn memccapable(protocol: &str) {
    assert!(
        Path::new(MEMCCAPABLE).exists(),
        "{MEMCCAPABLE} not found: run `sudo scripts/install-test-deps.sh` (installs libmemcached-tools)"
    );
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    let addr = kura.addr();
    // -t: seconds per I/O before memccapable gives up, so a silent server fails
    // the test instead of hanging it.
    let output = match Command::new(MEMCCAPABLE)
        .args([
            "-h",
            &addr.ip().to_string(),
            "-p",
            &addr.port().to_string(),
            protocol,
            "-t",
            "10",
        ])
        .output()
    {
        Ok(output) => output,
        Err(e) => panic!("cannot run {MEMCCAPABLE}: {e}"),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}{stderr}");
    let failed: Vec<&str> = stdout
        .lines()
        .chain(stderr.lines())
        .filter(|l| l.contains("[FAIL]"))
        .collect();
    assert!(
        output.status.success() && failed.is_empty() && stdout.contains("All tests passed"),
        "memccapable {protocol} against kura: {}; failed tests: {failed:?}\nstdout:\n{stdout}\nstderr:\n{stderr}\nkura's output:\n{}",
        output.status,
        kura.log()
    );
}
