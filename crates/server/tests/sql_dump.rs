//! mysqldump round trips with Debian's `mariadb-dump` and `mariadb` client, as users
//! back up and restore (`tests/sql/dump.py`): a dump of Kura restores into a fresh
//! Kura and into a private MariaDB, and a dump of MariaDB restores into Kura, each
//! reading back the same rows (bytes of every value in a BLOB, quotes, backslashes,
//! non-ASCII text, NULLs, unsigned BIGINTs, AUTO_INCREMENT ids), without `--force`.

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

#[test]
fn dumps_restore_between_kura_and_mariadb() {
    let mariadb = Mariadb::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &[]);
    let (kura, fresh) = (start(), start());
    let args = [
        kura.sql_addr().port().to_string(),
        fresh.sql_addr().port().to_string(),
        mariadb.port().to_string(),
    ];
    match run_script(Path::new("tests/sql/dump.py"), &args, &[]) {
        Ok(output) => print!("{output}"),
        Err(e) => panic!(
            "dump.py failed: {e}\nkura's log:\n{}\nthe fresh kura's log:\n{}",
            kura.log(),
            fresh.log()
        ),
    }
}
