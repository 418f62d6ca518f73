//! MySQL's functions, casts and result column names against MariaDB's
//! (`tests/sql/functions.py`): the same rows in both, SELECTs of string, numeric,
//! conditional, conversion, date and UUID functions on constants and columns; each
//! statement's column names (what dict cursors and ORMs key rows by), rows and error
//! code must be the same.

use std::path::Path;

use kura_testkit::mariadb::Mariadb;
use kura_testkit::python::run_script;
use kura_testkit::{kura_bin, Durability, KuraServer};

#[test]
fn functions_agree_with_mariadb() {
    let mariadb = Mariadb::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &[]);
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    let args = [
        kura.sql_addr().port().to_string(),
        mariadb.port().to_string(),
        "--show".to_owned(),
    ];
    match run_script(Path::new("tests/sql/functions.py"), &args, &[]) {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("functions.py failed: {e}\nkura's log:\n{}", kura.log()),
    }
}
