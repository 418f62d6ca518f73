//! MySQL statements that tools and ORMs send beyond SELECT and INSERT, against
//! MariaDB's (`tests/sql/statements.py`): UPDATE and DELETE with ORDER BY and LIMIT,
//! UPDATE of a join and DELETE of one table of a join, RENAME TABLE, TRUNCATE TABLE
//! (AUTO_INCREMENT starting again), SHOW WARNINGS after an error, SHOW TABLE STATUS,
//! SHOW CHARACTER SET, SHOW COLLATION, SHOW CREATE DATABASE; and SQLAlchemy and
//! Alembic as an application uses them.

use std::path::Path;

use kura_testkit::mariadb::Mariadb;
use kura_testkit::python::run_script;
use kura_testkit::{kura_bin, Durability, KuraServer};

#[test]
fn statements_agree_with_mariadb() {
    let mariadb = Mariadb::start(Path::new(env!("CARGO_TARGET_TMPDIR")), &[]);
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    let args = [
        kura.sql_addr().port().to_string(),
        mariadb.port().to_string(),
    ];
    match run_script(Path::new("tests/sql/statements.py"), &args, &[]) {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("statements.py failed: {e}\nkura's log:\n{}", kura.log()),
    }
}

/// SQLAlchemy's reflection and ORM (`with_for_update()` in a transaction) and
/// Alembic's `add_column` and `create_index` against Kura (`tests/sql/orm.py`).
#[test]
fn sqlalchemy_reflects_and_alembic_migrates() {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    let args = [kura.sql_addr().port().to_string()];
    match run_script(Path::new("tests/sql/orm.py"), &args, &[]) {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("orm.py failed: {e}\nkura's log:\n{}", kura.log()),
    }
}
