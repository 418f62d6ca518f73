//! `information_schema`: the tables MySQL's tools read to learn a server's databases,
//! tables, columns and keys (mysqldump, SQLAlchemy, GUI clients), as MySQL 8 names
//! their columns.
//!
//! They are SQLite tables in a schema of the session's SQLite attached as
//! `information_schema`, filled from the catalog whenever the session declares its
//! tables again (the catalog or the current database changed), so any SELECT over
//! them (joins, conditions, `DATABASE()`) is SQLite's to run. `SCHEMATA`, `TABLES`,
//! `COLUMNS`, `STATISTICS`, `KEY_COLUMN_USAGE` and `TABLE_CONSTRAINTS` describe the
//! catalog; `FILES`, `TRIGGERS`, `ROUTINES`, `VIEWS`, `REFERENTIAL_CONSTRAINTS`,
//! `PARTITIONS` and `EVENTS` are there and empty, as Kura has none of those.
//!
//! What it is not for: counts and sizes (`TABLE_ROWS`, `DATA_LENGTH` are NULL and 0:
//! counting would read every table at every catalog change).

use kura_tables::{database_of, Catalog, ColumnType, TableDef, Value};
use rusqlite::{params_from_iter, Connection};

/// The schema's name, as statements give it in any case.
pub const NAME: &str = "information_schema";

/// Each table and its columns.
const TABLES: &[(&str, &[&str])] = &[
    (
        "SCHEMATA",
        &[
            "CATALOG_NAME",
            "SCHEMA_NAME",
            "DEFAULT_CHARACTER_SET_NAME",
            "DEFAULT_COLLATION_NAME",
            "SQL_PATH",
            "DEFAULT_ENCRYPTION",
        ],
    ),
    (
        "TABLES",
        &[
            "TABLE_CATALOG",
            "TABLE_SCHEMA",
            "TABLE_NAME",
            "TABLE_TYPE",
            "ENGINE",
            "VERSION",
            "ROW_FORMAT",
            "TABLE_ROWS",
            "AVG_ROW_LENGTH",
            "DATA_LENGTH",
            "MAX_DATA_LENGTH",
            "INDEX_LENGTH",
            "DATA_FREE",
            "AUTO_INCREMENT",
            "CREATE_TIME",
            "UPDATE_TIME",
            "CHECK_TIME",
            "TABLE_COLLATION",
            "CHECKSUM",
            "CREATE_OPTIONS",
            "TABLE_COMMENT",
        ],
    ),
    (
        "COLUMNS",
        &[
            "TABLE_CATALOG",
            "TABLE_SCHEMA",
            "TABLE_NAME",
            "COLUMN_NAME",
            "ORDINAL_POSITION",
            "COLUMN_DEFAULT",
            "IS_NULLABLE",
            "DATA_TYPE",
            "CHARACTER_MAXIMUM_LENGTH",
            "CHARACTER_OCTET_LENGTH",
            "NUMERIC_PRECISION",
            "NUMERIC_SCALE",
            "DATETIME_PRECISION",
            "CHARACTER_SET_NAME",
            "COLLATION_NAME",
            "COLUMN_TYPE",
            "COLUMN_KEY",
            "EXTRA",
            "PRIVILEGES",
            "COLUMN_COMMENT",
            "GENERATION_EXPRESSION",
            "SRS_ID",
        ],
    ),
    (
        "STATISTICS",
        &[
            "TABLE_CATALOG",
            "TABLE_SCHEMA",
            "TABLE_NAME",
            "NON_UNIQUE",
            "INDEX_SCHEMA",
            "INDEX_NAME",
            "SEQ_IN_INDEX",
            "COLUMN_NAME",
            "COLLATION",
            "CARDINALITY",
            "SUB_PART",
            "PACKED",
            "NULLABLE",
            "INDEX_TYPE",
            "COMMENT",
            "INDEX_COMMENT",
            "IS_VISIBLE",
            "EXPRESSION",
        ],
    ),
    (
        "KEY_COLUMN_USAGE",
        &[
            "CONSTRAINT_CATALOG",
            "CONSTRAINT_SCHEMA",
            "CONSTRAINT_NAME",
            "TABLE_CATALOG",
            "TABLE_SCHEMA",
            "TABLE_NAME",
            "COLUMN_NAME",
            "ORDINAL_POSITION",
            "POSITION_IN_UNIQUE_CONSTRAINT",
            "REFERENCED_TABLE_SCHEMA",
            "REFERENCED_TABLE_NAME",
            "REFERENCED_COLUMN_NAME",
        ],
    ),
    (
        "TABLE_CONSTRAINTS",
        &[
            "CONSTRAINT_CATALOG",
            "CONSTRAINT_SCHEMA",
            "CONSTRAINT_NAME",
            "TABLE_SCHEMA",
            "TABLE_NAME",
            "CONSTRAINT_TYPE",
            "ENFORCED",
        ],
    ),
    (
        "FILES",
        &[
            "FILE_ID",
            "FILE_NAME",
            "FILE_TYPE",
            "TABLESPACE_NAME",
            "TABLE_CATALOG",
            "TABLE_SCHEMA",
            "TABLE_NAME",
            "LOGFILE_GROUP_NAME",
            "LOGFILE_GROUP_NUMBER",
            "ENGINE",
            "FULLTEXT_KEYS",
            "DELETED_ROWS",
            "UPDATE_COUNT",
            "FREE_EXTENTS",
            "TOTAL_EXTENTS",
            "EXTENT_SIZE",
            "INITIAL_SIZE",
            "MAXIMUM_SIZE",
            "AUTOEXTEND_SIZE",
            "CREATION_TIME",
            "LAST_UPDATE_TIME",
            "LAST_ACCESS_TIME",
            "RECOVER_TIME",
            "TRANSACTION_COUNTER",
            "VERSION",
            "ROW_FORMAT",
            "TABLE_ROWS",
            "AVG_ROW_LENGTH",
            "DATA_LENGTH",
            "MAX_DATA_LENGTH",
            "INDEX_LENGTH",
            "DATA_FREE",
            "CREATE_TIME",
            "UPDATE_TIME",
            "CHECK_TIME",
            "CHECKSUM",
            "STATUS",
            "EXTRA",
        ],
    ),
    (
        "TRIGGERS",
        &[
            "TRIGGER_CATALOG",
            "TRIGGER_SCHEMA",
            "TRIGGER_NAME",
            "EVENT_MANIPULATION",
            "EVENT_OBJECT_CATALOG",
            "EVENT_OBJECT_SCHEMA",
            "EVENT_OBJECT_TABLE",
            "ACTION_ORDER",
            "ACTION_CONDITION",
            "ACTION_STATEMENT",
            "ACTION_ORIENTATION",
            "ACTION_TIMING",
            "ACTION_REFERENCE_OLD_TABLE",
            "ACTION_REFERENCE_NEW_TABLE",
            "ACTION_REFERENCE_OLD_ROW",
            "ACTION_REFERENCE_NEW_ROW",
            "CREATED",
            "SQL_MODE",
            "DEFINER",
            "CHARACTER_SET_CLIENT",
            "COLLATION_CONNECTION",
            "DATABASE_COLLATION",
        ],
    ),
    (
        "ROUTINES",
        &[
            "SPECIFIC_NAME",
            "ROUTINE_CATALOG",
            "ROUTINE_SCHEMA",
            "ROUTINE_NAME",
            "ROUTINE_TYPE",
            "DATA_TYPE",
            "ROUTINE_BODY",
            "ROUTINE_DEFINITION",
            "IS_DETERMINISTIC",
            "SQL_DATA_ACCESS",
            "SECURITY_TYPE",
            "CREATED",
            "LAST_ALTERED",
            "SQL_MODE",
            "ROUTINE_COMMENT",
            "DEFINER",
        ],
    ),
    (
        "VIEWS",
        &[
            "TABLE_CATALOG",
            "TABLE_SCHEMA",
            "TABLE_NAME",
            "VIEW_DEFINITION",
            "CHECK_OPTION",
            "IS_UPDATABLE",
            "DEFINER",
            "SECURITY_TYPE",
            "CHARACTER_SET_CLIENT",
            "COLLATION_CONNECTION",
        ],
    ),
    (
        "REFERENTIAL_CONSTRAINTS",
        &[
            "CONSTRAINT_CATALOG",
            "CONSTRAINT_SCHEMA",
            "CONSTRAINT_NAME",
            "UNIQUE_CONSTRAINT_CATALOG",
            "UNIQUE_CONSTRAINT_SCHEMA",
            "UNIQUE_CONSTRAINT_NAME",
            "MATCH_OPTION",
            "UPDATE_RULE",
            "DELETE_RULE",
            "TABLE_NAME",
            "REFERENCED_TABLE_NAME",
        ],
    ),
    (
        "PARTITIONS",
        &[
            "TABLE_CATALOG",
            "TABLE_SCHEMA",
            "TABLE_NAME",
            "PARTITION_NAME",
            "SUBPARTITION_NAME",
            "PARTITION_ORDINAL_POSITION",
            "PARTITION_METHOD",
            "PARTITION_EXPRESSION",
            "TABLE_ROWS",
        ],
    ),
    (
        "EVENTS",
        &[
            "EVENT_CATALOG",
            "EVENT_SCHEMA",
            "EVENT_NAME",
            "DEFINER",
            "EVENT_TYPE",
            "STATUS",
        ],
    ),
];

/// A cell of a row SQLite stores.
type Cell = rusqlite::types::Value;

fn text(s: impl Into<String>) -> Cell {
    Cell::Text(s.into())
}

fn int(n: i64) -> Cell {
    Cell::Integer(n)
}

const NULL: Cell = Cell::Null;

/// Attaches the schema and creates its tables, empty.
pub fn attach(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch(&format!("ATTACH DATABASE ':memory:' AS {NAME}"))?;
    for (table, columns) in TABLES {
        db.execute_batch(&format!(
            "CREATE TABLE {NAME}.{table} ({})",
            columns.join(", ")
        ))?;
    }
    Ok(())
}

/// Fills the tables from `catalog`, anew.
pub fn fill(db: &Connection, catalog: &Catalog) -> rusqlite::Result<()> {
    let tx = db.unchecked_transaction()?;
    for (table, _) in TABLES {
        tx.execute_batch(&format!("DELETE FROM {NAME}.{table}"))?;
    }
    let mut rows: Vec<(&str, Vec<Cell>)> = Vec::new();
    for schema in catalog.database_names() {
        rows.push((
            "SCHEMATA",
            vec![
                text("def"),
                text(schema.clone()),
                text(catalog.database_collation(&schema).charset()),
                text(catalog.database_collation(&schema).name()),
                NULL,
                text("NO"),
            ],
        ));
    }
    for def in &catalog.tables {
        describe(def, &mut rows);
    }
    for (table, row) in rows {
        let marks = vec!["?"; row.len()].join(", ");
        let mut insert =
            tx.prepare_cached(&format!("INSERT INTO {NAME}.{table} VALUES ({marks})"))?;
        insert.execute(params_from_iter(row))?;
    }
    tx.commit()
}

/// The rows that describe table `def`.
fn describe(def: &TableDef, rows: &mut Vec<(&'static str, Vec<Cell>)>) {
    let t = &def.table;
    let (schema, name) = database_of(&t.name);
    let auto = t.columns.iter().any(|c| c.auto_increment);
    rows.push((
        "TABLES",
        vec![
            text("def"),
            text(schema),
            text(name),
            text("BASE TABLE"),
            text("InnoDB"),
            int(10),
            text("Dynamic"),
            NULL,
            int(0),
            int(0),
            int(0),
            int(0),
            int(0),
            if auto { int(1) } else { NULL },
            NULL,
            NULL,
            NULL,
            text(t.collation.name()),
            NULL,
            text(""),
            text(""),
        ],
    ));
    for (i, c) in t.columns.iter().enumerate() {
        let key = if i == t.primary {
            "PRI"
        } else {
            match t.indexes.iter().find(|ix| ix.column == i) {
                Some(ix) if ix.kind.is_unique() => "UNI",
                Some(_) => "MUL",
                None => "",
            }
        };
        let nullable = !c.not_null && i != t.primary;
        let (length, precision, scale, charset) = match c.ty {
            ColumnType::TinyInt | ColumnType::TinyIntUnsigned | ColumnType::Bool => {
                (NULL, int(3), int(0), false)
            }
            ColumnType::SmallInt | ColumnType::SmallIntUnsigned => (NULL, int(5), int(0), false),
            ColumnType::MediumInt => (NULL, int(7), int(0), false),
            ColumnType::MediumIntUnsigned => (NULL, int(8), int(0), false),
            ColumnType::Int => (NULL, int(10), int(0), false),
            ColumnType::IntUnsigned => (NULL, int(10), int(0), false),
            ColumnType::BigInt => (NULL, int(19), int(0), false),
            ColumnType::BigIntUnsigned => (NULL, int(20), int(0), false),
            ColumnType::Double => (NULL, int(22), NULL, false),
            ColumnType::Decimal(p, s) => (NULL, int(p.into()), int(s.into()), false),
            ColumnType::Varchar(n) | ColumnType::Char(n) => (int(i64::from(n)), NULL, NULL, true),
            ColumnType::Text => (int(65535), NULL, NULL, true),
            ColumnType::Blob => (int(65535), NULL, NULL, false),
            ColumnType::Date | ColumnType::DateTime(_) | ColumnType::Timestamp(_) => {
                (NULL, NULL, NULL, false)
            }
            ColumnType::Enum => (
                int(i64::from(crate::result::enum_length(c))),
                NULL,
                NULL,
                true,
            ),
        };
        let datetime_precision = match c.ty {
            ColumnType::DateTime(p) | ColumnType::Timestamp(p) => int(i64::from(p)),
            _ => NULL,
        };
        let octets = match (&length, charset) {
            (Cell::Integer(n), true) => int(n * 4),
            (other, _) => other.clone(),
        };
        let column_type = match c.ty {
            // The members as declared, the type's name as MySQL writes it.
            ColumnType::Enum => format!("enum{}", &c.type_sql()["ENUM".len()..]),
            ty => ty.to_string().to_ascii_lowercase(),
        };
        let data_type = column_type
            .split(['(', ' '])
            .next()
            .unwrap_or_default()
            .to_string();
        let default = match &c.default {
            _ if c.default_now => text(c.now_sql()),
            None | Some(Value::Null) => NULL,
            Some(v) => {
                let mut out = Vec::new();
                v.as_ref().write_text(&mut out);
                text(String::from_utf8_lossy(&out).into_owned())
            }
        };
        rows.push((
            "COLUMNS",
            vec![
                text("def"),
                text(schema),
                text(name),
                text(c.name.clone()),
                int(i as i64 + 1),
                default,
                text(if nullable { "YES" } else { "NO" }),
                text(data_type),
                length,
                octets,
                precision,
                scale,
                datetime_precision,
                match (charset, c.collation) {
                    (true, Some(collation)) => text(collation.charset()),
                    (true, None) => text("binary"),
                    _ => NULL,
                },
                match (charset, c.collation) {
                    (true, Some(collation)) => text(collation.name()),
                    (true, None) => text("binary"),
                    _ => NULL,
                },
                text(column_type),
                text(key),
                text(match (c.auto_increment, c.default_now, c.on_update_now) {
                    (true, ..) => "auto_increment".to_string(),
                    (_, true, true) => format!("DEFAULT_GENERATED on update {}", c.now_sql()),
                    (_, true, false) => "DEFAULT_GENERATED".to_string(),
                    (_, false, true) => format!("on update {}", c.now_sql()),
                    _ => String::new(),
                }),
                text("select,insert,update,references"),
                text(""),
                text(""),
                NULL,
            ],
        ));
    }
    // Every index is kept in order by the store (as SHOW INDEX says).
    let mut index = |index_name: &str, column: usize, unique: bool| {
        let nullable = !t.columns[column].not_null && column != t.primary;
        let column_name = t.columns[column].name.clone();
        rows.push((
            "STATISTICS",
            vec![
                text("def"),
                text(schema),
                text(name),
                int(i64::from(!unique)),
                text(schema),
                text(index_name),
                int(1),
                text(column_name.clone()),
                text("A"),
                NULL,
                NULL,
                NULL,
                text(if nullable { "YES" } else { "" }),
                text("BTREE"),
                text(""),
                text(""),
                text("YES"),
                NULL,
            ],
        ));
        if unique {
            rows.push((
                "KEY_COLUMN_USAGE",
                vec![
                    text("def"),
                    text(schema),
                    text(index_name),
                    text("def"),
                    text(schema),
                    text(name),
                    text(column_name),
                    int(1),
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                ],
            ));
            rows.push((
                "TABLE_CONSTRAINTS",
                vec![
                    text("def"),
                    text(schema),
                    text(index_name),
                    text(schema),
                    text(name),
                    text(if index_name == "PRIMARY" {
                        "PRIMARY KEY"
                    } else {
                        "UNIQUE"
                    }),
                    text("YES"),
                ],
            ));
        }
    };
    index("PRIMARY", t.primary, true);
    for ix in &t.indexes {
        index(&ix.name, ix.column, ix.kind.is_unique());
    }
}
