//! Databases through PyMySQL (`tests/sql/databases.py`): a transcript of CREATE
//! DATABASE, USE, tables named with and without their database, SHOW TABLES and DROP
//! DATABASE answers as a private MariaDB does; memcached reaches a table of another
//! database as `@@database.table.key`; databases and their rows outlast a SIGKILL,
//! and a login may name one.

use std::path::Path;

use kura_testkit::mariadb::Mariadb;
use kura_testkit::python::run_script;
use kura_testkit::{kura_bin, Durability, KuraServer};

fn start() -> KuraServer {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    }
}

fn script(kura: &KuraServer, args: &[String]) {
    match run_script(Path::new("tests/sql/databases.py"), args, &[]) {
        Ok(output) => print!("{output}"),
        Err(e) => panic!(
            "databases.py {args:?} failed: {e}\nkura's log:\n{}",
            kura.log()
        ),
    }
}

#[test]
fn databases_agree_with_mariadb() {
    let mariadb = Mariadb::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &[]);
    let kura = start();
    let sql = kura.sql_addr().port().to_string();
    script(
        &kura,
        &["agrees".to_owned(), sql, mariadb.port().to_string()],
    );
}

#[test]
fn a_database_is_reached_through_memcached_and_outlasts_a_kill() {
    let mut kura = start();
    script(
        &kura,
        &[
            "memcached".to_owned(),
            kura.sql_addr().port().to_string(),
            kura.addr().port().to_string(),
        ],
    );
    if let Err(e) = kura.restart() {
        panic!("cannot restart kura: {e}");
    }
    script(
        &kura,
        &["restarted".to_owned(), kura.sql_addr().port().to_string()],
    );
}
