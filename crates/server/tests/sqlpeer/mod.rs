//! What the SQL tests that run a script of `tests/sql/` share: a Kura to run it
//! against, a private MariaDB to hold Kura against, and the script's run, its output
//! printed and Kura's log shown when it fails.

#![allow(dead_code)]

use std::path::Path;

use kura_testkit::mariadb::Mariadb;
use kura_testkit::python::run_script;
use kura_testkit::{kura_bin, Durability, KuraServer};

/// A Kura in fsync mode on a data directory of its own.
pub fn kura() -> KuraServer {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    }
}

/// A private MariaDB (Debian's, as `scripts/install-peers.sh` installs it).
pub fn mariadb() -> Mariadb {
    Mariadb::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &[])
}

/// Runs `tests/sql/<name>` with `args`; fails with its output and the logs of `kuras`.
pub fn script(name: &str, args: &[String], kuras: &[&KuraServer]) {
    match run_script(&Path::new("tests/sql").join(name), args, &[]) {
        Ok(output) => print!("{output}"),
        Err(e) => {
            let logs: Vec<String> = kuras.iter().map(|k| k.log()).collect();
            panic!(
                "{name} {args:?} failed: {e}\nkura's log:\n{}",
                logs.join("\n----\n")
            )
        }
    }
}

/// Runs `tests/sql/<name>` with its `case` (if it has cases), a fresh Kura's SQL
/// port, a private MariaDB's port and `more`.
pub fn against_mariadb(name: &str, case: Option<&str>, more: &[String]) {
    let mariadb = mariadb();
    let kura = kura();
    let mut args: Vec<String> = case.into_iter().map(str::to_owned).collect();
    args.extend([
        kura.sql_addr().port().to_string(),
        mariadb.port().to_string(),
    ]);
    args.extend_from_slice(more);
    script(name, &args, &[&kura]);
}
