//! `LOAD DATA LOCAL INFILE` through PyMySQL against a private MariaDB
//! (`tests/sql/load_data.py`): CSV with enclosed fields, escapes, NULLs, a header
//! skipped, duplicates skipped or replaced, CRLF lines; MySQL's default tab format;
//! a column list; 2,500 rows in several batches. The same rows affected and rows in
//! both; a client without local files enabled gets 3948.

use std::path::Path;

use kura_testkit::mariadb::Mariadb;
use kura_testkit::python::run_script;
use kura_testkit::{kura_bin, Durability, KuraServer};

#[test]
fn load_data_local_infile_agrees_with_mariadb() {
    let mariadb = Mariadb::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &[]);
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    let files = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
    let args = [
        kura.sql_addr().port().to_string(),
        mariadb.port().to_string(),
        files.path().display().to_string(),
    ];
    match run_script(Path::new("tests/sql/load_data.py"), &args, &[]) {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("load_data.py failed: {e}\nkura's log:\n{}", kura.log()),
    }
}
