//! MySQL's functions, casts and result column names against MariaDB's
//! (`tests/sql/functions.py`): the same rows in both, SELECTs of string, numeric,
//! conditional, conversion, date and UUID functions on constants and columns; each
//! statement's column names (what dict cursors and ORMs key rows by), rows and error
//! code must be the same.

mod sqlpeer;

#[test]
fn functions_agree_with_mariadb() {
    sqlpeer::against_mariadb("functions.py", None, &[]);
}
