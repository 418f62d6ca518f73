//! AUTO_INCREMENT through PyMySQL (`tests/sql/auto_increment.py`): one transcript sent
//! to Kura and to a private MariaDB answers alike (rows affected, the OK packet's
//! insert id, LAST_INSERT_ID(), rows, error codes); concurrent connections get ids of
//! their own; a row written through memcached with an explicit id moves the next id
//! past it; after a SIGKILL and a restart the next id follows the highest row.

use std::path::Path;

use kura_testkit::mariadb::Mariadb;
use kura_testkit::python::run_script;
use kura_testkit::{kura_bin, Durability, KuraServer};

fn script(kura: &KuraServer, args: &[String]) {
    match run_script(Path::new("tests/sql/auto_increment.py"), args, &[]) {
        Ok(output) => print!("{output}"),
        Err(e) => panic!(
            "auto_increment.py {args:?} failed: {e}\nkura's log:\n{}",
            kura.log()
        ),
    }
}

#[test]
fn auto_increment_agrees_with_mariadb() {
    let mariadb = Mariadb::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &[]);
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    let sql = kura.sql_addr().port().to_string();
    script(
        &kura,
        &["agrees".to_owned(), sql, mariadb.port().to_string()],
    );
}

#[test]
fn auto_increment_ids_are_distinct_and_follow_the_rows_across_a_restart() {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let mut kura = match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    script(
        &kura,
        &[
            "concurrent".to_owned(),
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
