//! Databases through PyMySQL (`tests/sql/databases.py`): a transcript of CREATE
//! DATABASE, USE, tables named with and without their database, SHOW TABLES,
//! information_schema, user variables, table locks and DROP DATABASE answers as a
//! private MariaDB does; memcached reaches a table of another database as
//! `@@database.table.key`; databases and their rows outlast a SIGKILL, and a login
//! may name one.

mod sqlpeer;

#[test]
fn databases_agree_with_mariadb() {
    sqlpeer::against_mariadb("databases.py", Some("agrees"), &[]);
}

#[test]
fn a_database_is_reached_through_memcached_and_outlasts_a_kill() {
    let mut kura = sqlpeer::kura();
    let ports = |k: &kura_testkit::KuraServer| {
        [k.sql_addr().port().to_string(), k.addr().port().to_string()]
    };
    let [sql, memcached] = ports(&kura);
    sqlpeer::script(
        "databases.py",
        &["memcached".into(), sql, memcached],
        &[&kura],
    );
    if let Err(e) = kura.restart() {
        panic!("cannot restart kura: {e}");
    }
    let sql = kura.sql_addr().port().to_string();
    sqlpeer::script("databases.py", &["restarted".into(), sql], &[&kura]);
}
