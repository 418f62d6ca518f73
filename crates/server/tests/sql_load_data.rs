//! `LOAD DATA LOCAL INFILE` through PyMySQL against a private MariaDB
//! (`tests/sql/load_data.py`): CSV with enclosed fields, escapes, NULLs, a header
//! skipped, duplicates skipped or replaced, CRLF lines; MySQL's default tab format;
//! a column list; 2,500 rows in several batches. The same rows affected and rows in
//! both; a client without local files enabled gets 3948.

mod sqlpeer;

#[test]
fn load_data_local_infile_agrees_with_mariadb() {
    let files = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
    sqlpeer::against_mariadb("load_data.py", None, &[files.path().display().to_string()]);
}
