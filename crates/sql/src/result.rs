//! What a statement returns: rows with their columns' MySQL types, or what a write did.

use kura_tables::decimal::MAX_DIGITS;
use kura_tables::ColumnType;
use rusqlite::types::ValueRef;

/// A column's type as the client is told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Int,
    BigInt,
    IntUnsigned,
    BigIntUnsigned,
    Double,
    /// DECIMAL(precision, scale).
    Decimal(u8, u8),
    Varchar(u32),
    Char(u32),
    Text,
    Blob,
    Date,
    /// With this many fraction digits.
    DateTime(u8),
    Timestamp(u8),
    /// An ENUM, whose longest member has this many characters.
    Enum(u32),
    /// A column of NULLs only (`SELECT NULL`).
    Null,
}

/// How a virtual table declares an ENUM column to SQLite: with TEXT in the name, so
/// that its affinity is text's, and its longest member's length.
pub const ENUM_DECL: &str = "ENUMTEXT";

/// The characters of an ENUM's longest member.
pub fn enum_length(column: &kura_tables::Column) -> u32 {
    let longest = column.members.iter().map(|m| m.chars().count()).max();
    u32::try_from(longest.unwrap_or(0)).unwrap_or(u32::MAX)
}

impl Kind {
    pub fn of(ty: ColumnType) -> Kind {
        match ty {
            // On the wire as INT: their values are.
            ColumnType::TinyInt
            | ColumnType::Bool
            | ColumnType::SmallInt
            | ColumnType::MediumInt
            | ColumnType::Int => Kind::Int,
            ColumnType::TinyIntUnsigned
            | ColumnType::SmallIntUnsigned
            | ColumnType::MediumIntUnsigned => Kind::IntUnsigned,
            ColumnType::BigInt => Kind::BigInt,
            ColumnType::IntUnsigned => Kind::IntUnsigned,
            ColumnType::BigIntUnsigned => Kind::BigIntUnsigned,
            ColumnType::Double => Kind::Double,
            ColumnType::Decimal(p, s) => Kind::Decimal(p, s),
            ColumnType::Varchar(n) => Kind::Varchar(n),
            ColumnType::Char(n) => Kind::Char(n),
            ColumnType::Text => Kind::Text,
            ColumnType::Blob => Kind::Blob,
            ColumnType::Date => Kind::Date,
            ColumnType::DateTime(p) => Kind::DateTime(p),
            ColumnType::Timestamp(p) => Kind::Timestamp(p),
            // The length is the column's (`Kind::of_column`); a bare type has none.
            ColumnType::Enum => Kind::Enum(0),
        }
    }

    /// The kind of `column`'s values.
    pub fn of_column(column: &kura_tables::Column) -> Kind {
        match column.ty {
            ColumnType::Enum => Kind::Enum(enum_length(column)),
            ty => Kind::of(ty),
        }
    }

    /// The kind a declared type names (as the virtual tables declare them).
    pub fn from_decl(decl: &str) -> Option<Kind> {
        let d = decl.to_ascii_uppercase();
        let size = || -> u32 {
            d.split_once('(')
                .and_then(|(_, rest)| rest.trim_end_matches(')').parse().ok())
                .unwrap_or(255)
        };
        Some(match d.as_str() {
            "INT" | "TINYINT" | "TINYINT(1)" | "SMALLINT" | "MEDIUMINT" => Kind::Int,
            "TINYINT UNSIGNED" | "SMALLINT UNSIGNED" | "MEDIUMINT UNSIGNED" => Kind::IntUnsigned,
            "BIGINT" | "INTEGER" => Kind::BigInt,
            "INT UNSIGNED" => Kind::IntUnsigned,
            "BIGINT UNSIGNED" => Kind::BigIntUnsigned,
            "DOUBLE" => Kind::Double,
            "TEXT" => Kind::Text,
            "BLOB" => Kind::Blob,
            "DATE" => Kind::Date,
            _ if d.starts_with("DATETIME") => {
                Kind::DateTime(size().min(6) as u8 * u8::from(d.contains('(')))
            }
            _ if d.starts_with("TIMESTAMP") => {
                Kind::Timestamp(size().min(6) as u8 * u8::from(d.contains('(')))
            }
            _ if d.starts_with(ENUM_DECL) => Kind::Enum(size()),
            _ if d.starts_with("DECIMAL(") => {
                let (p, s) = d["DECIMAL(".len()..]
                    .trim_end_matches(')')
                    .split_once(',')?;
                Kind::Decimal(p.trim().parse().ok()?, s.trim().parse().ok()?)
            }
            _ if d.starts_with("VARCHAR") => Kind::Varchar(size()),
            _ if d.starts_with("CHAR") => Kind::Char(size()),
            _ => return None,
        })
    }

    pub fn is_integer(self) -> bool {
        matches!(
            self,
            Kind::Int | Kind::BigInt | Kind::IntUnsigned | Kind::BigIntUnsigned
        )
    }

    pub fn is_unsigned(self) -> bool {
        matches!(self, Kind::IntUnsigned | Kind::BigIntUnsigned)
    }
}

/// A result column.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnInfo {
    pub name: String,
    /// The table it comes from, when it is a table's column.
    pub table: String,
    pub kind: Kind,
    pub not_null: bool,
    pub primary: bool,
    pub unique: bool,
}

impl ColumnInfo {
    pub fn new(name: &str, kind: Kind) -> ColumnInfo {
        ColumnInfo {
            name: name.to_string(),
            table: String::new(),
            kind,
            not_null: false,
            primary: false,
            unique: false,
        }
    }
}

/// A value in a result row.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    UInt(u64),
    Double(f64),
    /// Text or bytes.
    Bytes(Vec<u8>),
}

impl Cell {
    pub fn text(s: impl Into<String>) -> Cell {
        Cell::Bytes(s.into().into_bytes())
    }

    /// A value SQLite gave for a column of `kind` (None: not known).
    pub fn from_sqlite(v: ValueRef<'_>, kind: Option<Kind>) -> Cell {
        match v {
            ValueRef::Null => Cell::Null,
            ValueRef::Integer(n) => match kind {
                Some(Kind::Decimal(_, s)) => Cell::decimal(
                    kura_tables::Decimal::from_i128(n.into(), MAX_DIGITS, s),
                    || n.to_string(),
                ),
                Some(k) if k.is_unsigned() && n >= 0 => Cell::UInt(n as u64),
                Some(Kind::Double) => Cell::Double(n as f64),
                Some(k) if !k.is_integer() && k != Kind::Null => {
                    Cell::Bytes(n.to_string().into_bytes())
                }
                _ => Cell::Int(n),
            },
            ValueRef::Real(f) => match kind {
                Some(Kind::Decimal(_, s)) => {
                    Cell::decimal(kura_tables::Decimal::from_f64(f, MAX_DIGITS, s), || {
                        f.to_string()
                    })
                }
                Some(k) if k.is_unsigned() && f >= 0.0 => Cell::UInt(f as u64),
                _ => Cell::Double(f),
            },
            ValueRef::Text(t) | ValueRef::Blob(t) => Cell::Bytes(t.to_vec()),
        }
    }

    /// A DECIMAL made of what SQLite computed, with its scale's digits after the
    /// point as MySQL prints it (`text` when it is no number of a DECIMAL's digits).
    fn decimal(
        made: Result<kura_tables::Decimal, kura_tables::decimal::DecimalError>,
        text: impl FnOnce() -> String,
    ) -> Cell {
        Cell::Bytes(made.map_or_else(|_| text(), |d| d.to_string()).into_bytes())
    }

    /// [`Cell::from_sqlite`] for a value already taken out of SQLite: text and bytes
    /// move into the cell rather than being copied.
    pub fn from_owned(v: rusqlite::types::Value, kind: Option<Kind>) -> Cell {
        match v {
            rusqlite::types::Value::Text(t) => Cell::Bytes(t.into_bytes()),
            rusqlite::types::Value::Blob(b) => Cell::Bytes(b),
            other => Cell::from_sqlite(ValueRef::from(&other), kind),
        }
    }
}

/// Rows and their columns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultSet {
    pub columns: Vec<ColumnInfo>,
    pub rows: Vec<Vec<Cell>>,
}

impl ResultSet {
    /// A result of text columns named `names`.
    pub fn text(names: &[&str], rows: Vec<Vec<Cell>>) -> ResultSet {
        ResultSet {
            columns: names
                .iter()
                .map(|n| ColumnInfo::new(n, Kind::Varchar(64)))
                .collect(),
            rows,
        }
    }
}

/// What a statement that returns no rows did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Done {
    pub affected: u64,
    pub last_insert_id: u64,
    /// MySQL's info text (`Rows matched: 1  Changed: 1  Warnings: 0`), or empty.
    pub info: String,
}

/// A statement's outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Rows(ResultSet),
    Done(Done),
    /// A result whose columns and rows went to the statement's [`crate::stream::RowSink`].
    Streamed,
}
