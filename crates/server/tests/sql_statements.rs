//! MySQL statements that tools and ORMs send beyond SELECT and INSERT, against
//! MariaDB's (`tests/sql/statements.py`): UPDATE and DELETE with ORDER BY and LIMIT,
//! UPDATE of a join and DELETE of one table of a join, RENAME TABLE, TRUNCATE TABLE
//! (AUTO_INCREMENT starting again), the integer types, ENUM, DECIMAL, SHOW WARNINGS after
//! an error, SHOW ENGINES, SHOW TABLE STATUS, SHOW CHARACTER SET, SHOW COLLATION, SHOW CREATE DATABASE; and
//! SQLAlchemy and Alembic as an application uses them (`tests/sql/orm.py`).

mod sqlpeer;

#[test]
fn statements_agree_with_mariadb() {
    sqlpeer::against_mariadb("statements.py", None, &[]);
}

/// SQLAlchemy's reflection and ORM (`with_for_update()` in a transaction) and
/// Alembic's `add_column` and `create_index` against Kura.
#[test]
fn sqlalchemy_reflects_and_alembic_migrates() {
    let kura = sqlpeer::kura();
    sqlpeer::script("orm.py", &[kura.sql_addr().port().to_string()], &[&kura]);
}
