//! mysqldump round trips with Debian's `mariadb-dump` and `mariadb` client, as users
//! back up and restore (`tests/sql/dump.py`): a dump of Kura restores into a fresh
//! Kura and into a private MariaDB, and a dump of MariaDB restores into Kura, each
//! reading back the same rows (bytes of every value in a BLOB, quotes, backslashes,
//! non-ASCII text, NULLs, unsigned BIGINTs, AUTO_INCREMENT ids), without `--force`.

mod sqlpeer;

#[test]
fn dumps_restore_between_kura_and_mariadb() {
    let mariadb = sqlpeer::mariadb();
    let (kura, fresh) = (sqlpeer::kura(), sqlpeer::kura());
    let args = [
        kura.sql_addr().port().to_string(),
        fresh.sql_addr().port().to_string(),
        mariadb.port().to_string(),
    ];
    sqlpeer::script("dump.py", &args, &[&kura, &fresh]);
}
