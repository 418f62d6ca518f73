//! What a statement reaches, for a cluster node choosing the shard that runs it
//! (issue 42): the tables it reads or writes by their catalog names, or whether it
//! begins or ends a transaction, sets the session's state or changes its database.
//!
//! What it is not for: where a table lives (the server's, from etcd), or running the
//! statement.

use std::ops::ControlFlow;

use sqlparser::ast::{visit_relations, ObjectName, ObjectType, ShowCreateObject, Statement, Use};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

/// What one statement reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// The tables it names, by catalog name ([`kura_tables::qualified`]); none for a
    /// statement that names no table of Kura's (`SELECT 1`, `SHOW DATABASES`, a
    /// savepoint) or that cannot be parsed.
    Tables(Vec<String>),
    /// BEGIN, START TRANSACTION.
    Begin,
    /// COMMIT, ROLLBACK (of the whole transaction).
    End,
    /// SET: the session's state, which every server the session reaches keeps.
    Set,
    /// USE `db`.
    Use(String),
    /// LOAD DATA into the table (catalog name).
    Load(String),
    /// CREATE TABLE of the table (catalog name); a table it copies (`LIKE`, `AS
    /// SELECT`) must be on the same server.
    Create(String),
    /// DROP TABLE of the tables (catalog names).
    Drop(Vec<String>),
}

/// The databases whose tables are the server's own, on every node alike.
const SYSTEM_DATABASES: [&str; 4] = ["information_schema", "mysql", "performance_schema", "sys"];

/// What `sql` (one statement) reaches in a session whose database is `current`.
pub fn reach(sql: &str, current: Option<&str>) -> Reach {
    if let Some(Ok(load)) = crate::load_data::parse(sql) {
        let name = ObjectName::from(
            load.table
                .iter()
                .map(|p| sqlparser::ast::Ident::new(p.as_str()))
                .collect::<Vec<_>>(),
        );
        return match crate::names::of_statement(&name, current) {
            Ok(table) => Reach::Load(table),
            Err(_) => Reach::Tables(Vec::new()),
        };
    }
    let sql = crate::translate::share_mode(sql);
    let Ok(mut statements) = Parser::parse_sql(&MySqlDialect {}, &sql) else {
        return Reach::Tables(Vec::new());
    };
    if statements.len() != 1 {
        return Reach::Tables(Vec::new());
    }
    let statement = statements.remove(0);
    let mut names: Vec<ObjectName> = Vec::new();
    match &statement {
        Statement::StartTransaction { .. } => return Reach::Begin,
        Statement::Commit { .. } => return Reach::End,
        Statement::Rollback {
            savepoint: None, ..
        } => return Reach::End,
        Statement::Set(_) => return Reach::Set,
        Statement::Use(u) => {
            return match u {
                Use::Object(name) | Use::Database(name) | Use::Schema(name) => Reach::Use(
                    crate::names::database(&name.to_string().replace('`', "")).to_string(),
                ),
                _ => Reach::Tables(Vec::new()),
            }
        }
        Statement::Drop {
            object_type: ObjectType::Table,
            names: dropped,
            ..
        } => {
            let dropped = dropped
                .iter()
                .filter_map(|n| crate::names::of_statement(n, current).ok())
                .collect();
            return Reach::Drop(dropped);
        }
        Statement::CreateTable(create) => {
            return match crate::names::of_statement(&create.name, current) {
                Ok(table) => Reach::Create(table),
                Err(_) => Reach::Tables(Vec::new()),
            };
        }
        Statement::ShowCreate {
            obj_type: ShowCreateObject::Table,
            obj_name,
        } => names.push(obj_name.clone()),
        Statement::ShowColumns { show_options, .. } => {
            names.extend(
                show_options
                    .show_in
                    .iter()
                    .filter_map(|i| i.parent_name.clone()),
            );
        }
        // SHOW TABLES FROM d and the like name a database, not a table.
        _ if statement.to_string().starts_with("SHOW ") => {}
        _ => {
            let _ = visit_relations(&statement, |name: &ObjectName| {
                names.push(name.clone());
                ControlFlow::<()>::Continue(())
            });
        }
    }
    let mut tables: Vec<String> = Vec::new();
    for name in &names {
        let Ok(table) = crate::names::of_statement(name, current) else {
            continue;
        };
        let db = kura_tables::database_of(&table).0;
        if SYSTEM_DATABASES.iter().any(|s| db.eq_ignore_ascii_case(s)) {
            continue;
        }
        if !tables.contains(&table) {
            tables.push(table);
        }
    }
    Reach::Tables(tables)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(sql: &str) -> Vec<String> {
        match reach(sql, Some("kura")) {
            Reach::Tables(t) => t,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn names_every_table_a_statement_reaches() {
        let cases: &[(&str, &[&str])] = &[
            ("SELECT 1", &[]),
            ("SELECT * FROM t WHERE id = 1", &["t"]),
            (
                "select a.x from t a join d.u b on a.id = b.id",
                &["t", "d.u"],
            ),
            (
                "SELECT * FROM t WHERE id IN (SELECT id FROM u)",
                &["t", "u"],
            ),
            ("SELECT * FROM kura.t", &["t"]),
            ("INSERT INTO t (id) VALUES (1)", &["t"]),
            ("INSERT INTO t SELECT * FROM u", &["t", "u"]),
            ("REPLACE INTO t VALUES (1)", &["t"]),
            ("UPDATE t SET v = 2 WHERE id = 1", &["t"]),
            ("DELETE FROM t WHERE id = 1", &["t"]),
            ("ALTER TABLE t ADD COLUMN v INT", &["t"]),
            ("TRUNCATE TABLE t", &["t"]),
            ("CREATE UNIQUE INDEX i ON t (v)", &["t"]),
            ("SHOW CREATE TABLE t", &["t"]),
            ("SHOW COLUMNS FROM t", &["t"]),
            ("DESCRIBE t", &["t"]),
            ("SELECT * FROM information_schema.tables", &[]),
            ("SHOW TABLES", &[]),
            ("SHOW TABLES FROM d", &[]),
            ("SHOW INDEX FROM t", &[]),
            ("SAVEPOINT s", &[]),
            ("ROLLBACK TO SAVEPOINT s", &[]),
            ("SELECT * FROM t FOR SHARE", &["t"]),
            ("not sql at all", &[]),
        ];
        for (sql, want) in cases {
            assert_eq!(tables(sql), *want, "{sql}");
        }
    }

    #[test]
    fn tells_transactions_settings_and_loads_apart() {
        assert_eq!(reach("BEGIN", None), Reach::Begin);
        let k = Some("kura");
        let create = "CREATE TABLE IF NOT EXISTS d.t (id INT PRIMARY KEY)";
        assert_eq!(reach(create, k), Reach::Create("d.t".into()));
        assert_eq!(reach("CREATE TABLE t LIKE u", k), Reach::Create("t".into()));
        assert_eq!(
            reach("DROP TABLE t, d.u", k),
            Reach::Drop(vec!["t".into(), "d.u".into()])
        );
        assert_eq!(
            reach("DROP TABLE IF EXISTS t", k),
            Reach::Drop(vec!["t".into()])
        );
        assert_eq!(reach("start transaction read only", None), Reach::Begin);
        assert_eq!(reach("COMMIT", None), Reach::End);
        assert_eq!(reach("rollback", None), Reach::End);
        assert_eq!(reach("SET autocommit = 0", None), Reach::Set);
        assert_eq!(reach("SET @a = 1", None), Reach::Set);
        assert_eq!(reach("USE d", None), Reach::Use("d".into()));
        assert_eq!(reach("use KURA", None), Reach::Use("kura".into()));
        assert_eq!(
            reach("LOAD DATA LOCAL INFILE 'f' INTO TABLE d.t", Some("kura")),
            Reach::Load("d.t".into())
        );
    }
}
