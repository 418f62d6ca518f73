//! AUTO_INCREMENT through PyMySQL (`tests/sql/auto_increment.py`): one transcript sent
//! to Kura and to a private MariaDB answers alike (rows affected, the OK packet's
//! insert id, LAST_INSERT_ID(), rows, error codes); concurrent connections get ids of
//! their own; a row written through memcached with an explicit id moves the next id
//! past it; after a SIGKILL and a restart the next id follows the highest row.

mod sqlpeer;

#[test]
fn auto_increment_agrees_with_mariadb() {
    sqlpeer::against_mariadb("auto_increment.py", Some("agrees"), &[]);
}

#[test]
fn auto_increment_ids_are_distinct_and_follow_the_rows_across_a_restart() {
    let mut kura = sqlpeer::kura();
    let args = [
        "concurrent".to_owned(),
        kura.sql_addr().port().to_string(),
        kura.addr().port().to_string(),
    ];
    sqlpeer::script("auto_increment.py", &args, &[&kura]);
    if let Err(e) = kura.restart() {
        panic!("cannot restart kura: {e}");
    }
    let args = ["restarted".to_owned(), kura.sql_addr().port().to_string()];
    sqlpeer::script("auto_increment.py", &args, &[&kura]);
}
