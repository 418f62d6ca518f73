//! Collations against MariaDB's (`tests/sql/collations.py`): case-insensitive text by
//! default and `utf8mb4_bin` where a column or database asks for it, in primary and
//! unique keys, ranges, order, `LIKE`, `GROUP BY` and `information_schema`; then the
//! same rows through the memcached door, and all of it again after a restart.

mod sqlpeer;

#[test]
fn collations_agree_with_mariadb_and_outlive_a_restart() {
    let mariadb = sqlpeer::mariadb();
    let mut kura = sqlpeer::kura();
    let args = |step: &str, kura: &kura_testkit::KuraServer| {
        vec![
            step.to_string(),
            kura.sql_addr().port().to_string(),
            mariadb.port().to_string(),
            kura.addr().port().to_string(),
        ]
    };
    sqlpeer::script("collations.py", &args("load", &kura), &[&kura]);
    if let Err(e) = kura.restart() {
        panic!("kura did not restart: {e}\n{}", kura.log());
    }
    sqlpeer::script("collations.py", &args("check", &kura), &[&kura]);
}
