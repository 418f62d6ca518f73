//! Transactions through real clients (`tests/sql/transactions.py`, PyMySQL and
//! SQLAlchemy in the virtualenv `scripts/install-test-deps.sh` makes): a read row
//! changed under a transaction fails its COMMIT (no lost update), locking reads, a
//! model of concurrent read-modify-write transactions (SQL alone, and with memcached
//! `gets`/`cas` on the same rows) whose counters must equal the acknowledged
//! commits, and `CLIENT_FOUND_ROWS` compared with a private MariaDB's answers.
//!
//! The model's seed is random and printed; `KURA_SQL_SEED=n` runs that one again.

use std::path::Path;

use kura_testkit::python::run_script;
use kura_testkit::{kura_bin, Durability, KuraServer};

use kura_testkit::mariadb::Mariadb;

fn start() -> KuraServer {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    }
}

/// Runs one case of `transactions.py` against `kura` (and MariaDB's port, if any).
fn case(name: &str, kura: &KuraServer, mariadb: Option<&Mariadb>) {
    let mut args = vec![
        name.to_owned(),
        kura.sql_addr().port().to_string(),
        kura.addr().port().to_string(),
    ];
    args.extend(mariadb.map(|m| m.port().to_string()));
    if let Ok(seed) = std::env::var("KURA_SQL_SEED") {
        args.extend(["--seed".to_owned(), seed]);
    }
    match run_script(Path::new("tests/sql/transactions.py"), &args, &[]) {
        Ok(output) => print!("{output}"),
        Err(e) => panic!(
            "transactions.py {name} failed: {e}
kura's log:
{}{}",
            kura.log(),
            mariadb.map_or(String::new(), |m| format!(
                "
mariadbd's log:
{}",
                m.log()
            ))
        ),
    }
}

#[test]
fn a_transaction_whose_read_row_changed_fails_its_commit() {
    case("lost_update", &start(), None);
}

#[test]
fn locking_reads_are_accepted_and_checked_at_commit() {
    case("locking_reads", &start(), None);
}

#[test]
fn concurrent_read_modify_write_transactions_lose_no_update() {
    case("model_sql", &start(), None);
}

#[test]
fn transactions_and_memcached_cas_on_the_same_rows_lose_no_update() {
    case("model_mixed", &start(), None);
}

#[test]
fn found_rows_counts_matched_rows_as_mariadb_does() {
    let mariadb = Mariadb::start(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")), &[]);
    case("found_rows", &start(), Some(&mariadb));
}

#[test]
fn the_sqlalchemy_orm_flushes_an_update_that_changes_nothing() {
    case("sqlalchemy", &start(), None);
}
