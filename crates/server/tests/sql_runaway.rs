//! Runaway SQL: logins that never complete (connect_timeout), packets over
//! max_allowed_packet, statements bounded by max_execution_time, KILL and SHOW
//! PROCESSLIST, and statements whose client went away. Each case is a function of
//! `tests/sql/runaway.py`, run with PyMySQL in the virtualenv
//! `scripts/install-test-deps.sh` makes, against a Kura started for it.

use std::path::Path;

use kura_testkit::mariadb::Mariadb;
use kura_testkit::python::run_script;
use kura_testkit::{kura_bin, Durability, KuraServer};

fn start(args: &[&str]) -> KuraServer {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    match KuraServer::start(&bin, Durability::Fsync, args) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    }
}

/// Runs `runaway.py CASE SQL_PORT ARGS...`; panics with its output and kura's log
/// when it fails.
fn run_case(kura: &KuraServer, case: &str, args: &[&str]) {
    let mut all = vec![case.to_owned(), kura.sql_addr().port().to_string()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    if let Err(e) = run_script(Path::new("tests/sql/runaway.py"), &all, &[]) {
        panic!(
            "runaway.py {case} failed: {e}
kura's log:
{}",
            kura.log()
        );
    }
}

#[test]
fn logins_that_never_complete_free_their_slot() {
    let kura = start(&["-c", "3", "--sql-connect-timeout-secs", "1"]);
    run_case(&kura, "connect_timeout", &["3"]);
}

#[test]
fn a_packet_over_the_limit_gets_mariadbs_error() {
    let mariadb = Mariadb::start(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &["--max-allowed-packet=64M"],
    );
    let kura = start(&[]);
    let port = mariadb.port().to_string();
    run_case(&kura, "packet_too_large", &[&port]);
}

#[test]
fn max_execution_time_bounds_a_select() {
    let kura = start(&[]);
    run_case(&kura, "max_execution_time", &[]);
}

#[test]
fn kill_stops_a_query_or_a_connection() {
    let mariadb = Mariadb::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &[]);
    let kura = start(&[]);
    let port = mariadb.port().to_string();
    run_case(&kura, "kill", &[&port]);
}

#[test]
fn a_user_kills_only_its_own_connections() {
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => panic!("temporary directory: {e}"),
    };
    let users = dir.path().join("sql-users");
    if let Err(e) = std::fs::write(&users, "root:\nbob:bobs-secret\n") {
        panic!("{}: {e}", users.display());
    }
    let users = users.to_string_lossy().into_owned();
    let kura = start(&["--sql-users", &users]);
    run_case(&kura, "kill_other_user", &["bobs-secret"]);
}

#[test]
fn a_statement_stops_when_its_client_goes_away() {
    let kura = start(&[]);
    run_case(&kura, "client_gone", &[]);
}

#[test]
fn a_big_result_arrives_whole() {
    let kura = start(&[]);
    run_case(&kura, "big_result", &[]);
}

#[test]
fn rows_stream_while_the_statement_runs() {
    let kura = start(&[]);
    run_case(&kura, "streaming", &[]);
}
