//! SQL writers under a real `kura` process SIGKILLed at random moments, round after
//! round: upserts, deletes and two-row transactions from PyMySQL threads
//! (`tests/sql/crash.py`), each keeping a ledger of what it sent and what was
//! acknowledged. After each restart every acknowledged statement is there, the one
//! statement per thread in flight at the kill either landed whole or not at all, and
//! the unique and ordered indexes lead to exactly the rows the table holds. The data
//! directory is on a real disk under Cargo's target directory. The seed is printed;
//! `KURA_SEED` replays the writers' choices (not the kill's timing).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use kura_testkit::{assert_not_tmpfs, crash_seed, kura_bin, Durability, KuraOptions, KuraServer};
use rand::{Rng, SeedableRng};

const ROUNDS: usize = 5;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python(args: &[&str]) -> Command {
    let python = root().join("target/pyenv/bin/python");
    let mut command = Command::new(python);
    command.arg(root().join("tests/sql/crash.py")).args(args);
    command
}

fn finished(what: &str, output: std::io::Result<Output>, server: &KuraServer) -> String {
    let output = output.unwrap_or_else(|e| {
        panic!("cannot run tests/sql/crash.py (scripts/install-test-deps.sh makes its python): {e}")
    });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{text}\nkura's log:\n{}",
        output.status,
        server.log()
    );
    text
}

fn crash_rounds(durability: Durability) {
    let seed = crash_seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let base = tempfile::Builder::new()
        .prefix("sql-crash-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("temp dir: {e}"));
    assert_not_tmpfs(base.path());
    let ledger = base.path().join("ledger");
    std::fs::create_dir(&ledger).unwrap_or_else(|e| panic!("ledger dir: {e}"));
    let ledger = ledger.to_string_lossy().into_owned();
    let mut server = KuraOptions::new(kura_bin(env!("CARGO_BIN_EXE_kura")), durability)
        .arg("--segment-size-mib")
        .arg("1")
        .start_on(base.path().join("data"))
        .unwrap_or_else(|e| panic!("start kura: {e}"));
    let mut acknowledged = 0u64;
    for round in 0..ROUNDS {
        let port = server.sql_addr().port().to_string();
        let mut writers = python(&["write", &port, &ledger, &(seed ^ round as u64).to_string()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run tests/sql/crash.py: {e}"));
        // The writers say when the table is there and their threads start.
        let Some(stdout) = writers.stdout.take() else {
            panic!("the writers' stdout is not piped")
        };
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        std::thread::sleep(Duration::from_millis(rng.gen_range(600..1500)));
        server.kill().unwrap_or_else(|e| panic!("kill: {e}"));
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        let output = writers.wait_with_output().map(|mut o| {
            o.stdout = format!("{line}{rest}").into_bytes();
            o
        });
        let text = finished("the writers", output, &server);
        assert!(
            text.starts_with("ready"),
            "the writers did not start:\n{text}"
        );
        server
            .restart()
            .unwrap_or_else(|e| panic!("restart: {e}\n{}", server.log()));
        let port = server.sql_addr().port().to_string();
        let text = finished(
            &format!("round {round}'s check (seed {seed})"),
            python(&["check", &port, &ledger]).output(),
            &server,
        );
        print!("round {round}: {text}");
        acknowledged += text
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.trim_end_matches(';').parse::<u64>().ok())
            .unwrap_or(0);
    }
    assert!(
        acknowledged > 50,
        "{acknowledged} statements acknowledged over {ROUNDS} rounds: the test proves little"
    );
}

#[test]
fn sql_statements_survive_sigkill_with_fsync() {
    crash_rounds(Durability::Fsync);
}

#[test]
fn sql_statements_survive_sigkill_with_interval_fsync() {
    crash_rounds(Durability::Interval);
}
