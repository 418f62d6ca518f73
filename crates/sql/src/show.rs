//! What clients ask about the server and its tables, answered as MySQL answers:
//! `SHOW DATABASES/TABLES/COLUMNS/INDEX/CREATE TABLE/VARIABLES/STATUS/WARNINGS`,
//! `DESCRIBE`, and the system variables `SELECT @@name` and `SET` read and change.

use std::collections::BTreeMap;

use kura_tables::{Catalog, ColumnType, TableDef, Value};

use crate::error::SqlError;
use crate::result::{Cell, ColumnInfo, Kind, ResultSet};
use crate::translate::Literal;
use crate::vtab::ReadCounters;

/// The version clients are told: MySQL 8.0's protocol and SQL, served by Kura.
pub const VERSION: &str = "8.0.36-kura";

/// The system variables a session starts with, as MySQL 8.0 names and sets them.
pub fn default_variables() -> BTreeMap<String, Literal> {
    let text = |s: &str| Literal::Text(s.to_string());
    let num = |s: &str| Literal::Number(s.to_string());
    [
        ("auto_increment_increment", num("1")),
        ("auto_increment_offset", num("1")),
        ("autocommit", num("1")),
        ("character_set_client", text("utf8mb4")),
        ("character_set_connection", text("utf8mb4")),
        ("character_set_database", text("utf8mb4")),
        ("character_set_results", text("utf8mb4")),
        ("character_set_server", text("utf8mb4")),
        ("collation_connection", text("utf8mb4_general_ci")),
        ("collation_database", text("utf8mb4_general_ci")),
        ("collation_server", text("utf8mb4_general_ci")),
        ("div_precision_increment", num("4")),
        ("have_ssl", text("DISABLED")),
        ("init_connect", text("")),
        ("interactive_timeout", num("28800")),
        ("license", text("Apache-2.0")),
        ("lower_case_table_names", num("0")),
        ("max_allowed_packet", num("67108864")),
        ("max_execution_time", num("0")),
        ("net_buffer_length", num("16384")),
        // Accepted and shown; they change nothing (Kura has no foreign keys, checks
        // unique keys always, keeps no notes, and quotes names in SHOW CREATE).
        ("foreign_key_checks", num("1")),
        ("unique_checks", num("1")),
        ("sql_notes", num("1")),
        ("sql_quote_show_create", num("1")),
        ("sql_safe_updates", num("0")),
        ("sql_log_bin", num("1")),
        ("optimizer_switch", text("")),
        ("character_set_filesystem", text("binary")),
        ("net_write_timeout", num("60")),
        ("performance_schema", num("0")),
        ("query_cache_size", num("0")),
        ("query_cache_type", text("OFF")),
        ("sql_auto_is_null", num("0")),
        (
            "sql_mode",
            text("STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION"),
        ),
        ("sql_select_limit", num("18446744073709551615")),
        ("system_time_zone", text("UTC")),
        ("time_zone", text("SYSTEM")),
        ("transaction_isolation", text("READ-COMMITTED")),
        ("transaction_read_only", num("0")),
        ("tx_isolation", text("READ-COMMITTED")),
        ("tx_read_only", num("0")),
        ("version", text(VERSION)),
        ("version_comment", text("Kura")),
        ("wait_timeout", num("28800")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// MySQL's LIKE on a name: `%` any run, `_` any one character; no case.
pub fn like(pattern: &str, name: &str) -> bool {
    fn go(p: &[char], n: &[char]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some(('%', rest)) => (0..=n.len()).any(|i| go(rest, &n[i..])),
            Some(('_', rest)) => !n.is_empty() && go(rest, &n[1..]),
            Some(('\\', rest)) if !rest.is_empty() => {
                !n.is_empty() && n[0].eq_ignore_ascii_case(&rest[0]) && go(&rest[1..], &n[1..])
            }
            Some((c, rest)) => !n.is_empty() && n[0].eq_ignore_ascii_case(c) && go(rest, &n[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    go(&p, &n)
}

fn literal_cell(v: &Literal) -> Cell {
    match v {
        Literal::Null => Cell::Null,
        Literal::Number(n) | Literal::Text(n) => Cell::text(n.clone()),
    }
}

pub fn variables(vars: &BTreeMap<String, Literal>, filter: Option<&str>) -> ResultSet {
    let rows = vars
        .iter()
        .filter(|(k, _)| filter.is_none_or(|f| like(f, k)))
        .map(|(k, v)| vec![Cell::text(k.clone()), literal_cell(v)])
        .collect();
    ResultSet::text(&["Variable_name", "Value"], rows)
}

pub fn status(reads: ReadCounters, filter: Option<&str>) -> ResultSet {
    let rows = [
        ("Handler_read_key", reads.key),
        ("Handler_read_next", reads.next),
        ("Handler_read_rnd_next", reads.rnd_next),
    ]
    .into_iter()
    .filter(|(k, _)| filter.is_none_or(|f| like(f, k)))
    .map(|(k, v)| vec![Cell::text(k), Cell::text(v.to_string())])
    .collect();
    ResultSet::text(&["Variable_name", "Value"], rows)
}

pub fn databases(catalog: &Catalog, filter: Option<&str>) -> ResultSet {
    let mut names = vec!["information_schema".to_string()];
    names.extend(catalog.database_names());
    names.sort_unstable();
    let rows = names
        .into_iter()
        .filter(|d| filter.is_none_or(|f| like(f, d)))
        .map(|d| vec![Cell::text(d)])
        .collect();
    ResultSet::text(&["Database"], rows)
}

/// SHOW TABLES of `database`.
pub fn tables(catalog: &Catalog, database: &str, full: bool, filter: Option<&str>) -> ResultSet {
    let name = format!("Tables_in_{database}");
    let mut names: Vec<&str> = catalog
        .tables_in(database)
        .map(|t| kura_tables::database_of(&catalog.tables[t].table.name).1)
        .filter(|n| filter.is_none_or(|f| like(f, n)))
        .collect();
    names.sort_unstable();
    let rows = names
        .into_iter()
        .map(|n| {
            let mut row = vec![Cell::text(n)];
            if full {
                row.push(Cell::text("BASE TABLE"));
            }
            row
        })
        .collect();
    if full {
        ResultSet::text(&[&name, "Table_type"], rows)
    } else {
        ResultSet::text(&[&name], rows)
    }
}

/// A column's type as SHOW COLUMNS spells it.
/// A column's type as MySQL shows it: lower case, an ENUM's members as declared.
fn type_name(column: &kura_tables::Column) -> String {
    match column.ty {
        ColumnType::Enum => format!("enum{}", &column.type_sql()["ENUM".len()..]),
        ty => ty.to_string().to_ascii_lowercase(),
    }
}

fn value_text(v: &Value) -> Cell {
    let mut out = Vec::new();
    match v {
        Value::Null => return Cell::Null,
        v => v.as_ref().write_text(&mut out),
    }
    Cell::Bytes(out)
}

/// SHOW [FULL] COLUMNS and DESCRIBE.
pub fn columns(def: &TableDef, full: bool, filter: Option<&str>) -> ResultSet {
    let table = &def.table;
    let mut rows = Vec::new();
    for (i, column) in table.columns.iter().enumerate() {
        if filter.is_some_and(|f| !like(f, &column.name)) {
            continue;
        }
        let key = if i == table.primary {
            "PRI"
        } else if let Some(ix) = table.indexes.iter().find(|ix| ix.column == i) {
            if ix.kind.is_unique() {
                "UNI"
            } else {
                "MUL"
            }
        } else {
            ""
        };
        let null = if column.not_null || i == table.primary {
            "NO"
        } else {
            "YES"
        };
        let default = column.default.as_ref().map_or(Cell::Null, value_text);
        let extra = if column.auto_increment {
            "auto_increment"
        } else {
            ""
        };
        let mut row = vec![
            Cell::text(column.name.clone()),
            Cell::text(type_name(column)),
        ];
        if full {
            row.push(match column.collation {
                Some(collation) => Cell::text(collation.name()),
                None => Cell::Null,
            });
        }
        row.extend([
            Cell::text(null),
            Cell::text(key),
            default,
            Cell::text(extra),
        ]);
        if full {
            row.extend([
                Cell::text("select,insert,update,references"),
                Cell::text(""),
            ]);
        }
        rows.push(row);
    }
    if full {
        ResultSet::text(
            &[
                "Field",
                "Type",
                "Collation",
                "Null",
                "Key",
                "Default",
                "Extra",
                "Privileges",
                "Comment",
            ],
            rows,
        )
    } else {
        ResultSet::text(&["Field", "Type", "Null", "Key", "Default", "Extra"], rows)
    }
}

/// SHOW INDEX.
pub fn index(def: &TableDef) -> ResultSet {
    let table = &def.table;
    let mut rows = Vec::new();
    let mut push = |name: &str, column: usize, unique: bool, ordered: bool| {
        let null = if table.columns[column].not_null || column == table.primary {
            ""
        } else {
            "YES"
        };
        rows.push(vec![
            Cell::text(kura_tables::database_of(&table.name).1),
            Cell::Int(if unique { 0 } else { 1 }),
            Cell::text(name),
            Cell::Int(1),
            Cell::text(table.columns[column].name.clone()),
            if ordered { Cell::text("A") } else { Cell::Null },
            Cell::Null,
            Cell::Null,
            Cell::Null,
            Cell::text(null),
            Cell::text(if ordered { "BTREE" } else { "HASH" }),
            Cell::text(""),
            Cell::text(""),
            Cell::text("YES"),
            Cell::Null,
        ]);
    };
    // Every primary key is kept in order by the store (the rows' ordered keyspace).
    push("PRIMARY", table.primary, true, true);
    for ix in &table.indexes {
        push(
            &ix.name,
            ix.column,
            ix.kind.is_unique(),
            // Every index is kept in order by the store.
            true,
        );
    }
    let mut result = ResultSet::text(
        &[
            "Table",
            "Non_unique",
            "Key_name",
            "Seq_in_index",
            "Column_name",
            "Collation",
            "Cardinality",
            "Sub_part",
            "Packed",
            "Null",
            "Index_type",
            "Comment",
            "Index_comment",
            "Visible",
            "Expression",
        ],
        rows,
    );
    result.columns[1].kind = Kind::Int;
    result.columns[3].kind = Kind::Int;
    result
}

/// SHOW CREATE TABLE.
pub fn create_table(def: &TableDef) -> ResultSet {
    // Named alone, as MySQL shows a table of any database.
    let table = kura_tables::database_of(&def.table.name).1;
    ResultSet::text(
        &["Table", "Create Table"],
        vec![vec![Cell::text(table), Cell::text(mysql_ddl(def))]],
    )
}

/// A string as a quoted SQL literal.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// The table's `CREATE TABLE` as MySQL 8 prints it (lower-case types, `DEFAULT NULL`
/// for a nullable column without a default, defaults quoted, the engine and
/// character set after it), so that tools which read it (SQLAlchemy's reflection,
/// mysqldump's files restored into MySQL or MariaDB) find what they expect. The
/// engine is said to be InnoDB, which Kura's tables stand in for, so the DDL
/// restores as it is into MySQL or MariaDB; the index kinds (`USING BTREE`) and a
/// field separator (`COMMENT='separator=,'`) are Kura's, so it restores into Kura as
/// the same table.
pub fn mysql_ddl(def: &TableDef) -> String {
    let t = &def.table;
    let name = kura_tables::database_of(&t.name).1;
    let mut lines = Vec::new();
    for (i, c) in t.columns.iter().enumerate() {
        let mut line = format!("  `{}` {}", c.name, type_name(c));
        // A column's character set and collation where they differ from the table's.
        if let Some(collation) = c.collation.filter(|c| *c != t.collation) {
            if collation.charset() != t.collation.charset() {
                line.push_str(&format!(" CHARACTER SET {}", collation.charset()));
            }
            line.push_str(&format!(" COLLATE {}", collation.name()));
        }
        let not_null = c.not_null || i == t.primary;
        if not_null {
            line.push_str(" NOT NULL");
        }
        if c.auto_increment {
            line.push_str(" AUTO_INCREMENT");
        }
        match &c.default {
            _ if c.default_now => line.push_str(&format!(" DEFAULT {}", c.now_sql())),
            Some(Value::Null) => line.push_str(" DEFAULT NULL"),
            Some(v) => {
                let mut out = Vec::new();
                v.as_ref().write_text(&mut out);
                line.push_str(&format!(
                    " DEFAULT {}",
                    quoted(&String::from_utf8_lossy(&out))
                ));
            }
            None if !not_null && !matches!(c.ty, ColumnType::Text | ColumnType::Blob) => {
                line.push_str(" DEFAULT NULL");
            }
            None => {}
        }
        if c.on_update_now {
            line.push_str(&format!(" ON UPDATE {}", c.now_sql()));
        }
        lines.push(line);
    }
    let using = |ordered: bool| if ordered { " USING BTREE" } else { "" };
    lines.push(format!(
        "  PRIMARY KEY (`{}`){}",
        t.columns[t.primary].name,
        using(t.primary_ordered)
    ));
    // Unique keys first, as MySQL lists them.
    let mut indexes: Vec<&kura_tables::Index> = t.indexes.iter().collect();
    indexes.sort_by_key(|ix| !ix.kind.is_unique());
    for ix in indexes {
        let column = &t.columns[ix.column].name;
        lines.push(match ix.kind {
            kura_tables::IndexKind::UniqueHash => {
                format!("  UNIQUE KEY `{}` (`{column}`)", ix.name)
            }
            kura_tables::IndexKind::UniqueOrdered => {
                format!("  UNIQUE KEY `{}` (`{column}`) USING BTREE", ix.name)
            }
            kura_tables::IndexKind::Ordered => format!("  KEY `{}` (`{column}`)", ix.name),
        });
    }
    let mut sql = format!(
        "CREATE TABLE `{name}` (\n{}\n) ENGINE=InnoDB DEFAULT CHARSET={} COLLATE={}",
        lines.join(",\n"),
        t.collation.charset(),
        t.collation.name()
    );
    if t.separator != kura_tables::schema::DEFAULT_SEPARATOR {
        sql.push_str(&format!(
            " COMMENT={}",
            quoted(&format!("separator={}", t.separator as char))
        ));
    }
    sql
}

/// The table `name` (a catalog name) in `catalog`, or MySQL's error.
pub fn table<'c>(catalog: &'c Catalog, name: &str) -> Result<&'c TableDef, SqlError> {
    Ok(&catalog.tables[crate::names::table(catalog, name)?])
}

/// Columns of a table result: the table's own, with their types and keys.
pub fn table_columns(def: &TableDef) -> Vec<ColumnInfo> {
    let table = &def.table;
    table
        .columns
        .iter()
        .enumerate()
        .map(|(i, c)| ColumnInfo {
            name: c.name.clone(),
            table: kura_tables::database_of(&table.name).1.to_string(),
            kind: Kind::of_column(c),
            not_null: c.not_null || i == table.primary,
            primary: i == table.primary,
            unique: table
                .indexes
                .iter()
                .any(|ix| ix.column == i && ix.kind.is_unique()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_matches_as_mysql() {
        assert!(like("version%", "version_comment"));
        assert!(like("%SQL_MODE%", "sql_mode"));
        assert!(like("a_c", "abc"));
        assert!(!like("a_c", "abbc"));
        assert!(like("auto\\_commit", "auto_commit"));
    }
}
