//! Table definitions, read from MySQL's `CREATE TABLE` syntax (parsed by `sqlparser`
//! with its MySQL dialect, never by hand), and written back as canonical DDL.
//!
//! What a table may declare: columns of type `TINYINT SMALLINT MEDIUMINT INT BIGINT
//! [UNSIGNED] BOOL DOUBLE VARCHAR(n) CHAR(n) TEXT BLOB DATE DATETIME(p) TIMESTAMP(p)` with `NOT NULL`, `NULL`, `DEFAULT`, `AUTO_INCREMENT`, `COMMENT`
//! and a character set or collation (the text is kept as UTF-8 and compared by the
//! collation, `crate::collation`); exactly one primary-key column; `UNIQUE [KEY|INDEX]
//! name (col)` and `KEY|INDEX name (col)` on one column each; the table options
//! `[DEFAULT] CHARSET` and `COLLATE` (the default collation of its text columns),
//! `ENGINE`, `AUTO_INCREMENT`, `ROW_FORMAT` (accepted and ignored) and `COMMENT
//! 'separator=X'`, which sets the byte that joins a row's fields in memcached values
//! (`|` by default).
//!
//! Index kinds: every row and index entry is an engine key, so it costs what a
//! memcached key costs and stays on disk beyond memory, and the store keeps all of
//! them in order as well (`crate::rows::ordered_spaces`). `USING BTREE` and `USING
//! HASH` are recorded (`primary_ordered`, [`IndexKind`]) and shown in the canonical
//! DDL, and change nothing else.
//!
//! Invariants of a [`Table`] once built: column names are unique (case-insensitively,
//! as MySQL's), the primary key is a NOT NULL column, every index names an existing
//! column, index names are unique, and no column is indexed twice by the same kind.

use std::fmt::Write as _;

use sqlparser::ast::{
    ColumnOption, CreateTable, DataType, ExactNumberInfo, Expr, IndexColumn, IndexOption,
    IndexType, SqlOption, Statement, UnaryOperator, Value as SqlValue,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;

use crate::collation::{Collation, Rule};
use crate::error::{schema_error, value_error, Error};
use crate::value::{ColumnType, Value};

/// MySQL's reason (error 1075) for a table whose AUTO_INCREMENT column is not a key,
/// or that has two.
pub const AUTO_KEY_REASON: &str =
    "Incorrect table definition; there can be only one auto column and it must be defined as a key";

/// The byte that joins a row's fields when the DDL does not choose one.
pub const DEFAULT_SEPARATOR: u8 = b'|';

/// Names (tables, columns, indexes) are at most this long, as MySQL's identifiers.
pub const NAME_MAX_CHARS: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub ty: ColumnType,
    pub not_null: bool,
    /// None: no DEFAULT clause.
    pub default: Option<Value>,
    pub auto_increment: bool,
    /// `DEFAULT CURRENT_TIMESTAMP` (a DATETIME or TIMESTAMP): an insert that leaves
    /// the column out takes the time of the insert.
    pub default_now: bool,
    /// `ON UPDATE CURRENT_TIMESTAMP`: an update that changes another column of the
    /// row and not this one sets it to the time of the update.
    pub on_update_now: bool,
    /// A text or ENUM column's collation (`crate::collation`); None for other types.
    pub collation: Option<Collation>,
    /// An ENUM's members, in order; empty for other types.
    pub members: Vec<String>,
}

impl Column {
    /// How the column's values compare in its keys and in SQL.
    pub fn rule(&self) -> Rule {
        self.collation.map_or(Rule::Binary, Collation::rule)
    }

    /// Parses one field's text as a value of the column (not NULL: the caller
    /// decides that): [`crate::value::parse_text`], and an ENUM's member.
    pub fn parse_text(&self, text: &[u8]) -> Result<Value, Error> {
        match self.ty {
            ColumnType::Enum => self.member(text),
            ty => crate::value::parse_text(text, ty, &self.name),
        }
    }

    /// [`Column::parse_text`] of a field the caller owns.
    pub fn parse_owned(&self, text: Vec<u8>) -> Result<Value, Error> {
        match self.ty {
            ColumnType::Enum => self.member(&text),
            ty => crate::value::parse_owned(text, ty, &self.name),
        }
    }

    /// The ENUM member `text` names under the column's collation, spelled as the
    /// member is (MySQL's strict mode refuses any other value, the empty string too).
    fn member(&self, text: &[u8]) -> Result<Value, Error> {
        // Until the table's collation is known (a DEFAULT is read before it),
        // members match by the default collation.
        let rule = self.collation.unwrap_or(Collation::DEFAULT).rule();
        self.members
            .iter()
            .find(|m| m.as_bytes() == text || rule.equal(m.as_bytes(), text))
            .map(|m| Value::Bytes(m.as_bytes().to_vec()))
            .ok_or_else(|| value_error!("Data truncated for column '{}' at row 1", self.name))
    }

    /// The ENUM member at `n` (1 for the first), as MySQL takes a number for an ENUM.
    pub fn member_at(&self, n: i64) -> Result<Value, Error> {
        usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| self.members.get(i))
            .map(|m| Value::Bytes(m.as_bytes().to_vec()))
            .ok_or_else(|| value_error!("Data truncated for column '{}' at row 1", self.name))
    }

    /// The column's type as DDL: an ENUM with its members.
    pub fn type_sql(&self) -> String {
        match self.ty {
            ColumnType::Enum => {
                let members: Vec<String> = self.members.iter().map(|m| quote_member(m)).collect();
                format!("ENUM({})", members.join(","))
            }
            ty => ty.to_string(),
        }
    }

    /// `CURRENT_TIMESTAMP`, with the column's precision.
    pub fn now_sql(&self) -> String {
        match self.ty {
            ColumnType::DateTime(p) | ColumnType::Timestamp(p) if p > 0 => {
                format!("CURRENT_TIMESTAMP({p})")
            }
            _ => "CURRENT_TIMESTAMP".to_string(),
        }
    }
}

/// Whether `expr` is the time now: `CURRENT_TIMESTAMP[(p)]`, `NOW([p])`,
/// `LOCALTIMESTAMP`, `LOCALTIME`.
fn is_now(expr: &Expr) -> bool {
    let name = match expr {
        Expr::Function(f) => f.name.to_string(),
        Expr::Identifier(i) => i.value.clone(),
        _ => return false,
    };
    ["CURRENT_TIMESTAMP", "NOW", "LOCALTIMESTAMP", "LOCALTIME"]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n))
}

/// What an index was declared as. Every index's entries are engine keys that the
/// store keeps in order (`crate::rows::ordered_spaces`): a unique one's in space 3,
/// a non-unique one's in space 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// `UNIQUE`, without `USING BTREE`.
    UniqueHash,
    /// `UNIQUE ... USING BTREE`.
    UniqueOrdered,
    /// `KEY` (not unique).
    Ordered,
}

impl IndexKind {
    pub fn is_unique(self) -> bool {
        matches!(self, IndexKind::UniqueHash | IndexKind::UniqueOrdered)
    }

    pub fn is_ordered(self) -> bool {
        matches!(self, IndexKind::UniqueOrdered | IndexKind::Ordered)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    pub name: String,
    /// Position of the indexed column in the table.
    pub column: usize,
    pub kind: IndexKind,
}

/// A table as declared: what `CREATE TABLE` said, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub name: String,
    pub columns: Vec<Column>,
    /// Position of the primary-key column.
    pub primary: usize,
    /// Whether the primary key was declared `USING BTREE` (shown in the canonical
    /// DDL; every primary key is kept in order).
    pub primary_ordered: bool,
    pub indexes: Vec<Index>,
    pub separator: u8,
    /// The table's default collation: a text column added without one takes it.
    pub collation: Collation,
    /// Where dropped columns were among the values a row holds (ascending): rows
    /// written before a drop still hold a value there, and rows written since a NULL
    /// (`crate::row`). Kept by the catalog, not by the DDL.
    pub dropped: Vec<usize>,
}

/// Parses a file of `CREATE TABLE` statements; a text column whose table names no
/// collation takes [`Collation::DEFAULT`].
pub fn parse_schema(sql: &str) -> Result<Vec<Table>, Error> {
    parse_schema_in(sql, Collation::DEFAULT)
}

/// [`parse_schema`] in a database whose default collation is `default`.
pub fn parse_schema_in(sql: &str, default: Collation) -> Result<Vec<Table>, Error> {
    let statements = Parser::parse_sql(&MySqlDialect {}, sql)
        .map_err(|e| schema_error!("the schema does not parse: {e}"))?;
    let mut tables: Vec<Table> = Vec::new();
    for statement in statements {
        let Statement::CreateTable(create) = statement else {
            return Err(schema_error!(
                "a schema holds CREATE TABLE statements only, not: {}",
                first_words(&statement.to_string())
            ));
        };
        let table = Table::from_create(&create, default)?;
        if tables.iter().any(|t| t.name == table.name) {
            return Err(schema_error!("table {} is declared twice", table.name));
        }
        tables.push(table);
    }
    Ok(tables)
}

/// [`crate::collation::chosen`], its refusal a schema error.
fn chosen_collation(
    charset: Option<&str>,
    collate: Option<&str>,
) -> Result<Option<Collation>, Error> {
    crate::collation::chosen(charset, collate).map_err(Error::Schema)
}

fn first_words(sql: &str) -> String {
    let words: Vec<&str> = sql.split_whitespace().take(4).collect();
    words.join(" ")
}

pub(crate) fn check_name(what: &str, name: &str) -> Result<(), Error> {
    if name.is_empty() || name.chars().count() > NAME_MAX_CHARS {
        return Err(schema_error!(
            "{what} name {name:?} must be 1 to {NAME_MAX_CHARS} characters"
        ));
    }
    // A container name ends at the first '.', and memcached keys hold no spaces or
    // control characters: a name that breaks either could not be addressed.
    if name
        .chars()
        .any(|c| c == '.' || c == '@' || c.is_whitespace() || c.is_control())
    {
        return Err(schema_error!(
            "{what} name {name:?} may not hold '.', '@', spaces or control characters"
        ));
    }
    Ok(())
}

fn column_type(ty: &DataType, column: &str) -> Result<ColumnType, Error> {
    use sqlparser::ast::CharacterLength;
    let length = |len: &Option<CharacterLength>, default: Option<u64>| -> Result<u32, Error> {
        let n = match len {
            Some(CharacterLength::IntegerLength { length, .. }) => *length,
            Some(CharacterLength::Max) => {
                return Err(schema_error!("column {column}: no MAX length in MySQL"))
            }
            None => default.ok_or_else(|| schema_error!("column {column}: {ty} needs a length"))?,
        };
        // MySQL's limits: VARCHAR up to 65,535 bytes a row (16,383 characters of
        // utf8mb4), CHAR up to 255 characters.
        let max = if matches!(ty, DataType::Char(_) | DataType::Character(_)) {
            255
        } else {
            16_383
        };
        if n > max {
            return Err(schema_error!("column {column}: {ty} is longer than {max}"));
        }
        Ok(n as u32)
    };
    Ok(match ty {
        DataType::TinyInt(Some(1)) | DataType::Bool | DataType::Boolean => ColumnType::Bool,
        DataType::TinyInt(_) => ColumnType::TinyInt,
        DataType::TinyIntUnsigned(_) => ColumnType::TinyIntUnsigned,
        DataType::SmallInt(_) => ColumnType::SmallInt,
        DataType::SmallIntUnsigned(_) => ColumnType::SmallIntUnsigned,
        DataType::MediumInt(_) => ColumnType::MediumInt,
        DataType::MediumIntUnsigned(_) => ColumnType::MediumIntUnsigned,
        DataType::Int(_) | DataType::Integer(_) => ColumnType::Int,
        DataType::IntUnsigned(_) | DataType::IntegerUnsigned(_) => ColumnType::IntUnsigned,
        DataType::BigInt(_) => ColumnType::BigInt,
        DataType::BigIntUnsigned(_) => ColumnType::BigIntUnsigned,
        DataType::Double(_) | DataType::DoublePrecision => ColumnType::Double,
        DataType::Decimal(info) | DataType::Numeric(info) | DataType::Dec(info) => {
            decimal_type(info, column)?
        }
        DataType::Date => ColumnType::Date,
        DataType::Datetime(p) | DataType::Timestamp(p, _) => {
            let precision = u8::try_from(p.unwrap_or(0))
                .ok()
                .filter(|p| *p <= 6)
                .ok_or_else(|| schema_error!("column {column}: a precision of 0 to 6"))?;
            if matches!(ty, DataType::Datetime(_)) {
                ColumnType::DateTime(precision)
            } else {
                ColumnType::Timestamp(precision)
            }
        }
        DataType::Varchar(len) | DataType::CharacterVarying(len) | DataType::CharVarying(len) => {
            ColumnType::Varchar(length(len, None)?)
        }
        DataType::Char(len) | DataType::Character(len) => ColumnType::Char(length(len, Some(1))?),
        DataType::Text => ColumnType::Text,
        DataType::Blob(None) => ColumnType::Blob,
        DataType::Enum(..) => ColumnType::Enum,
        other => {
            return Err(schema_error!(
                "column {column}: type {other} is not supported (the integer types, DOUBLE, DECIMAL, DATE, DATETIME, TIMESTAMP, VARCHAR(n), CHAR(n), TEXT, BLOB and ENUM are)"
            ))
        }
    })
}

/// `DECIMAL[(p[, s])]`: MySQL's defaults (10, 0) and limits, but at most
/// [`crate::decimal::MAX_PRECISION`] digits.
fn decimal_type(info: &ExactNumberInfo, column: &str) -> Result<ColumnType, Error> {
    use crate::decimal::{MAX_PRECISION, MAX_SCALE};
    let (p, s) = match *info {
        ExactNumberInfo::None => (10, 0),
        ExactNumberInfo::Precision(p) => (p, 0),
        ExactNumberInfo::PrecisionAndScale(p, s) => (p, u64::try_from(s).unwrap_or(u64::MAX)),
    };
    // MySQL's words, which SQL answers with its codes (1425, 1426, 1427).
    if p > 65 {
        return Err(schema_error!(
            "Too big precision {p} specified for '{column}'. Maximum is 65."
        ));
    }
    if s > u64::from(MAX_SCALE) {
        return Err(schema_error!(
            "Too big scale {s} specified for '{column}'. Maximum is {MAX_SCALE}."
        ));
    }
    if s > p {
        return Err(schema_error!(
            "For float(M,D), double(M,D) or decimal(M,D), M must be >= D (column '{column}')."
        ));
    }
    if p > u64::from(MAX_PRECISION) {
        return Err(schema_error!(
            "column {column}: Kura keeps a DECIMAL of at most {MAX_PRECISION} digits (SQL computes with it as a double, exact to {MAX_PRECISION}), not {p}"
        ));
    }
    Ok(ColumnType::Decimal(p as u8, s as u8))
}

/// An ENUM's members as declared (none for another type): at least one, at most
/// 65,535 (that none is there twice is checked once the column's collation is
/// known).
fn enum_members(ty: &DataType, column: &str) -> Result<Vec<String>, Error> {
    let DataType::Enum(members, _) = ty else {
        return Ok(Vec::new());
    };
    let mut out: Vec<String> = Vec::with_capacity(members.len());
    for member in members {
        let sqlparser::ast::EnumMember::Name(name) = member else {
            return Err(schema_error!("column {column}: an ENUM member is a string"));
        };
        out.push(name.clone());
    }
    if out.is_empty() || out.len() > usize::from(u16::MAX) {
        return Err(schema_error!(
            "column {column}: an ENUM has 1 to 65535 members"
        ));
    }
    Ok(out)
}

/// An ENUM member as a quoted SQL string.
fn quote_member(member: &str) -> String {
    format!("'{}'", member.replace('\\', "\\\\").replace('\'', "''"))
}

/// How a refused DEFAULT's reason begins (MySQL's 1067), the column's name after it.
pub const INVALID_DEFAULT: &str = "Invalid default value for '";

/// How a refused ENUM's reason ends (MySQL's 1291).
pub const DUPLICATED_MEMBER: &str = "' in ENUM";

/// A DEFAULT clause's literal as a value of the column.
fn default_value(expr: &Expr, column: &Column) -> Result<Value, Error> {
    let bad = || schema_error!("column {}: invalid DEFAULT {expr}", column.name);
    let (negative, inner) = match expr {
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => (true, &**expr),
        other => (false, other),
    };
    let Expr::Value(v) = inner else {
        return Err(bad());
    };
    let text = match &v.value {
        SqlValue::Null if !negative => {
            if column.not_null {
                return Err(schema_error!(
                    "column {}: NOT NULL with DEFAULT NULL",
                    column.name
                ));
            }
            return Ok(Value::Null);
        }
        SqlValue::Number(n, _) => {
            if negative {
                format!("-{n}")
            } else {
                n.clone()
            }
        }
        SqlValue::SingleQuotedString(s) | SqlValue::DoubleQuotedString(s) if !negative => s.clone(),
        _ => return Err(bad()),
    };
    column
        .parse_text(text.as_bytes())
        .map_err(|e| schema_error!("{}{}' ({e})", INVALID_DEFAULT, column.name))
}

fn index_column(columns: &[IndexColumn], what: &str, table: &Table) -> Result<usize, Error> {
    let [column] = columns else {
        return Err(schema_error!(
            "table {}: {what} must name exactly one column",
            table.name
        ));
    };
    let Expr::Identifier(ident) = &column.column.expr else {
        return Err(schema_error!(
            "table {}: {what} must name a column, not {}",
            table.name,
            column.column.expr
        ));
    };
    table
        .column_index(&ident.value)
        .ok_or_else(|| schema_error!("table {}: {what} names no column {}", table.name, ident))
}

/// Whether an index's clauses ask for `USING BTREE` (true) or `USING HASH` / nothing;
/// the last `USING` counts.
fn wants_btree(index_type: &Option<IndexType>, options: &[IndexOption]) -> bool {
    options
        .iter()
        .filter_map(|o| match o {
            IndexOption::Using(t) => Some(t),
            _ => None,
        })
        .chain(index_type.as_ref())
        .last()
        .is_some_and(|t| matches!(t, IndexType::BTree))
}

impl Table {
    /// The position of the column named `name` (case-insensitive, as MySQL's).
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// The index named `name` (case-insensitive).
    pub fn index_named(&self, name: &str) -> Option<usize> {
        self.indexes
            .iter()
            .position(|i| i.name.eq_ignore_ascii_case(name))
    }

    pub fn primary_column(&self) -> &Column {
        &self.columns[self.primary]
    }

    /// Builds a table from a parsed `CREATE TABLE`, checking everything the module
    /// says a table must be.
    pub fn from_create(create: &CreateTable, default: Collation) -> Result<Table, Error> {
        let unquoted =
            |part: &sqlparser::ast::ObjectNamePart| part.to_string().trim_matches('`').to_string();
        let name = match create.name.0.as_slice() {
            [part] => {
                let name = unquoted(part);
                check_name("table", &name)?;
                name
            }
            [database, part] => {
                let (database, name) = (unquoted(database), unquoted(part));
                check_name("database", &database)?;
                check_name("table", &name)?;
                crate::catalog::qualified(&database, &name)
            }
            _ => {
                return Err(schema_error!(
                    "table {}: name it as table or database.table",
                    create.name
                ))
            }
        };

        if create.query.is_some() || create.like.is_some() || create.clone.is_some() {
            return Err(schema_error!(
                "table {name}: only a list of columns and keys can define it"
            ));
        }
        if create.temporary {
            return Err(schema_error!(
                "table {name}: a TEMPORARY table would not last"
            ));
        }
        let mut table = Table {
            name,
            columns: Vec::new(),
            primary: usize::MAX,
            primary_ordered: false,
            indexes: Vec::new(),
            separator: DEFAULT_SEPARATOR,
            collation: default,
            dropped: Vec::new(),
        };
        // Each column's own collation (or its character set's default), if it names
        // one: the rest take the table's, known once its options are read.
        let mut named: Vec<Option<Collation>> = Vec::new();
        let mut primaries: Vec<(usize, bool)> = Vec::new();
        let mut uniques: Vec<(Option<String>, usize, bool)> = Vec::new();
        for def in &create.columns {
            let column_name = def.name.value.clone();
            check_name("column", &column_name)?;
            if table.column_index(&column_name).is_some() {
                return Err(schema_error!(
                    "table {}: column {column_name} is declared twice",
                    table.name
                ));
            }
            let mut column = Column {
                ty: column_type(&def.data_type, &column_name)?,
                members: enum_members(&def.data_type, &column_name)?,
                name: column_name,
                not_null: false,
                default: None,
                auto_increment: false,
                default_now: false,
                on_update_now: false,
                collation: None,
            };
            let position = table.columns.len();
            let mut default_expr = None;
            let mut charset = None;
            let mut collate = None;
            for option in &def.options {
                match &option.option {
                    ColumnOption::Null => column.not_null = false,
                    ColumnOption::NotNull => column.not_null = true,
                    ColumnOption::Default(expr) if is_now(expr) => column.default_now = true,
                    ColumnOption::Default(expr) => default_expr = Some(expr.clone()),
                    ColumnOption::OnUpdate(expr) if is_now(expr) => column.on_update_now = true,
                    ColumnOption::PrimaryKey(_) => primaries.push((position, false)),
                    ColumnOption::Unique(_) => uniques.push((None, position, false)),
                    ColumnOption::Comment(_) => {}
                    ColumnOption::CharacterSet(name) => charset = Some(name.to_string()),
                    ColumnOption::Collation(name) => collate = Some(name.to_string()),
                    ColumnOption::DialectSpecific(tokens)
                        if tokens.len() == 1
                            && tokens[0].to_string().eq_ignore_ascii_case("AUTO_INCREMENT") =>
                    {
                        column.auto_increment = true;
                    }
                    other => {
                        return Err(schema_error!(
                            "column {}: {other} is not supported",
                            column.name
                        ))
                    }
                }
            }
            if let Some(expr) = default_expr {
                column.default = Some(default_value(&expr, &column)?);
            }
            if (column.default_now || column.on_update_now)
                && !matches!(
                    column.ty,
                    ColumnType::DateTime(_) | ColumnType::Timestamp(_)
                )
            {
                return Err(schema_error!(
                    "column {}: CURRENT_TIMESTAMP is a DATETIME's or TIMESTAMP's default",
                    column.name
                ));
            }
            if column.auto_increment && column.ty.integer_range().is_none() {
                return Err(schema_error!(
                    "column {}: AUTO_INCREMENT needs an integer column",
                    column.name
                ));
            }
            named.push(chosen_collation(charset.as_deref(), collate.as_deref())?);
            table.columns.push(column);
        }
        if table.columns.is_empty() {
            return Err(schema_error!("table {}: no columns", table.name));
        }
        for constraint in &create.constraints {
            use sqlparser::ast::TableConstraint;
            match constraint {
                TableConstraint::PrimaryKey(pk) => {
                    let column = index_column(&pk.columns, "PRIMARY KEY", &table)?;
                    primaries.push((column, wants_btree(&pk.index_type, &pk.index_options)));
                }
                TableConstraint::Unique(u) => {
                    let column = index_column(&u.columns, "UNIQUE KEY", &table)?;
                    let name = u
                        .index_name
                        .as_ref()
                        .or(u.name.as_ref())
                        .map(|n| n.value.clone());
                    uniques.push((name, column, wants_btree(&u.index_type, &u.index_options)));
                }
                TableConstraint::Index(i) => {
                    let column = index_column(&i.columns, "KEY", &table)?;
                    let name = i
                        .name
                        .as_ref()
                        .map_or_else(|| table.columns[column].name.clone(), |n| n.value.clone());
                    table.add_index(name, column, IndexKind::Ordered)?;
                }
                other => {
                    return Err(schema_error!(
                        "table {}: constraint {other} is not supported",
                        table.name
                    ))
                }
            }
        }
        match primaries.as_slice() {
            [(column, ordered)] => {
                table.primary = *column;
                table.primary_ordered = *ordered;
            }
            [] => {
                return Err(schema_error!(
                    "table {}: a primary-key column is required",
                    table.name
                ))
            }
            _ => {
                return Err(schema_error!(
                    "table {}: one primary-key column only",
                    table.name
                ))
            }
        }
        // MySQL makes a primary-key column NOT NULL whatever the column said.
        let primary = &mut table.columns[table.primary];
        if primary.default == Some(Value::Null) {
            return Err(schema_error!(
                "column {}: a primary key cannot default to NULL",
                primary.name
            ));
        }
        primary.not_null = true;
        for (name, column, ordered) in uniques {
            let name = name.unwrap_or_else(|| table.columns[column].name.clone());
            let kind = if ordered {
                IndexKind::UniqueOrdered
            } else {
                IndexKind::UniqueHash
            };
            table.add_index(name, column, kind)?;
        }
        table.apply_options(&create.table_options)?;
        for (column, named) in table.columns.iter_mut().zip(named) {
            if column.ty.has_collation() {
                column.collation = Some(named.unwrap_or(table.collation));
            }
            // Members the same under the column's collation are one (MySQL's 1291).
            let rule = column.rule();
            for (i, member) in column.members.iter().enumerate() {
                let earlier = column.members[..i]
                    .iter()
                    .find(|m| rule.equal(m.as_bytes(), member.as_bytes()));
                if let Some(earlier) = earlier {
                    return Err(schema_error!(
                        "Column '{}' has duplicated value '{earlier}{DUPLICATED_MEMBER}",
                        column.name
                    ));
                }
            }
        }
        Ok(table)
    }

    /// MySQL's rule for a new table: one AUTO_INCREMENT column at most, and it is
    /// the primary key or indexed. (Checked where a table is created, not where the
    /// catalog is read: a table kept before the rule still opens.)
    pub fn check_auto_key(&self) -> Result<(), Error> {
        let autos: Vec<usize> = (0..self.columns.len())
            .filter(|&c| self.columns[c].auto_increment)
            .collect();
        let keyed = |c: usize| c == self.primary || self.indexes.iter().any(|i| i.column == c);
        if autos.len() > 1 || autos.iter().any(|&c| !keyed(c)) {
            return Err(Error::Schema(AUTO_KEY_REASON.to_string()));
        }
        Ok(())
    }

    fn add_index(&mut self, name: String, column: usize, kind: IndexKind) -> Result<(), Error> {
        check_name("index", &name)?;
        if name.eq_ignore_ascii_case("PRIMARY") || self.index_named(&name).is_some() {
            return Err(schema_error!(
                "table {}: index name {name} is used twice",
                self.name
            ));
        }
        if kind.is_unique() && column == self.primary {
            return Err(schema_error!(
                "table {}: UNIQUE index {name} repeats the primary key",
                self.name
            ));
        }
        if self
            .indexes
            .iter()
            .any(|i| i.column == column && i.kind.is_unique() == kind.is_unique())
        {
            return Err(schema_error!(
                "table {}: column {} is indexed twice",
                self.name,
                self.columns[column].name
            ));
        }
        self.indexes.push(Index { name, column, kind });
        Ok(())
    }

    fn apply_options(&mut self, options: &sqlparser::ast::CreateTableOptions) -> Result<(), Error> {
        use sqlparser::ast::{CommentDef, CreateTableOptions};
        let list: &[SqlOption] = match options {
            CreateTableOptions::None => &[],
            CreateTableOptions::Plain(list)
            | CreateTableOptions::With(list)
            | CreateTableOptions::Options(list)
            | CreateTableOptions::TableProperties(list) => list,
        };
        let mut charset = None;
        let mut collate = None;
        for option in list {
            let key = match option {
                SqlOption::Comment(CommentDef::WithEq(text) | CommentDef::WithoutEq(text)) => {
                    self.separator = separator_from_comment(text, &self.name)?;
                    continue;
                }
                SqlOption::KeyValue { key, value } => {
                    let key = key.value.to_ascii_uppercase();
                    let value = value.to_string();
                    match key.as_str() {
                        "CHARSET"
                        | "DEFAULT CHARSET"
                        | "CHARACTER SET"
                        | "DEFAULT CHARACTER SET" => charset = Some(value),
                        "COLLATE" | "DEFAULT COLLATE" => collate = Some(value),
                        _ => {}
                    }
                    key
                }
                SqlOption::NamedParenthesizedList(list) => list.key.value.to_ascii_uppercase(),
                SqlOption::Ident(ident) => ident.value.to_ascii_uppercase(),
                other => {
                    return Err(schema_error!(
                        "table {}: option {other} is not supported",
                        self.name
                    ))
                }
            };
            let accepted = [
                "ENGINE",
                "CHARSET",
                "DEFAULT CHARSET",
                "CHARACTER SET",
                "DEFAULT CHARACTER SET",
                "COLLATE",
                "DEFAULT COLLATE",
                "AUTO_INCREMENT",
                "ROW_FORMAT",
            ];
            if !accepted.contains(&key.as_str()) {
                return Err(schema_error!(
                    "table {}: option {key} is not supported",
                    self.name
                ));
            }
        }
        if let Some(chosen) = chosen_collation(charset.as_deref(), collate.as_deref())? {
            self.collation = chosen;
        }
        Ok(())
    }

    /// The table as canonical DDL, which [`parse_schema`] reads back as the same table.
    pub fn to_sql(&self) -> String {
        let mut sql = match self.name.split_once('.') {
            Some((database, table)) => format!("CREATE TABLE `{database}`.`{table}` (\n"),
            None => format!("CREATE TABLE `{}` (\n", self.name),
        };
        for (i, c) in self.columns.iter().enumerate() {
            let _ = write!(sql, "  `{}` {}", c.name, c.type_sql());
            if let Some(collation) = c.collation {
                let _ = write!(sql, " COLLATE {}", collation.name());
            }
            if c.not_null {
                sql.push_str(" NOT NULL");
            }
            if c.auto_increment {
                sql.push_str(" AUTO_INCREMENT");
            }
            if let Some(default) = &c.default {
                sql.push_str(" DEFAULT ");
                sql.push_str(&sql_literal(default));
            }
            if c.default_now {
                let _ = write!(sql, " DEFAULT {}", c.now_sql());
            }
            if c.on_update_now {
                let _ = write!(sql, " ON UPDATE {}", c.now_sql());
            }
            let _ = i;
            sql.push_str(",\n");
        }
        let _ = write!(
            sql,
            "  PRIMARY KEY (`{}`){}",
            self.primary_column().name,
            if self.primary_ordered {
                " USING BTREE"
            } else {
                ""
            }
        );
        for index in &self.indexes {
            let column = &self.columns[index.column].name;
            let _ = match index.kind {
                IndexKind::UniqueHash => {
                    write!(sql, ",\n  UNIQUE KEY `{}` (`{column}`)", index.name)
                }
                IndexKind::UniqueOrdered => write!(
                    sql,
                    ",\n  UNIQUE KEY `{}` (`{column}`) USING BTREE",
                    index.name
                ),
                IndexKind::Ordered => write!(sql, ",\n  KEY `{}` (`{column}`)", index.name),
            };
        }
        let _ = write!(
            sql,
            "\n) DEFAULT CHARSET={} COLLATE={}",
            self.collation.charset(),
            self.collation.name()
        );
        if self.separator != DEFAULT_SEPARATOR {
            let _ = write!(
                sql,
                " COMMENT='separator={}'",
                escape_sql_string(&(self.separator as char).to_string())
            );
        }
        sql
    }

    /// The first way `declared` differs from `self`, in words; None if they are the
    /// same table.
    pub fn difference(&self, declared: &Table) -> Option<String> {
        let name = &self.name;
        if self.columns.len() != declared.columns.len() {
            return Some(format!(
                "table {name} exists with {} columns, the schema declares {}",
                self.columns.len(),
                declared.columns.len()
            ));
        }
        for (have, want) in self.columns.iter().zip(&declared.columns) {
            // A table that exists keeps its collations (its keys are made by them):
            // one made before Kura had them compares as bytes, though the schema
            // that made it names none and now reads as case-insensitive.
            let want = &Column {
                collation: have.collation,
                ..want.clone()
            };
            if have != want {
                return Some(format!(
                    "table {name} exists with column {}, the schema declares {}",
                    column_sql(have),
                    column_sql(want)
                ));
            }
        }
        if self.primary != declared.primary || self.primary_ordered != declared.primary_ordered {
            return Some(format!(
                "table {name} exists with primary key {}, the schema declares {}",
                self.primary_column().name,
                declared.primary_column().name
            ));
        }
        if self.indexes != declared.indexes {
            let list = |t: &Table| {
                t.indexes
                    .iter()
                    .map(|i| format!("{} ({}, {:?})", i.name, t.columns[i.column].name, i.kind))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Some(format!(
                "table {name} exists with indexes [{}], the schema declares [{}]",
                list(self),
                list(declared)
            ));
        }
        if self.separator != declared.separator {
            return Some(format!(
                "table {name} exists with separator {:?}, the schema declares {:?}",
                self.separator as char, declared.separator as char
            ));
        }
        None
    }
}

fn column_sql(c: &Column) -> String {
    let mut s = format!("{} {}", c.name, c.ty);
    if let Some(collation) = c.collation {
        s.push_str(" COLLATE ");
        s.push_str(collation.name());
    }
    if c.not_null {
        s.push_str(" NOT NULL");
    }
    if let Some(d) = &c.default {
        s.push_str(" DEFAULT ");
        s.push_str(&sql_literal(d));
    }
    if c.default_now {
        s.push_str(&format!(" DEFAULT {}", c.now_sql()));
    }
    if c.on_update_now {
        s.push_str(&format!(" ON UPDATE {}", c.now_sql()));
    }
    s
}

fn escape_sql_string(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\'', "\\'")
}

fn sql_literal(v: &Value) -> String {
    match v {
        Value::Null => "NULL".to_string(),
        Value::Int(n) => n.to_string(),
        Value::UInt(n) => n.to_string(),
        Value::Double(_) | Value::Decimal(_) => {
            let mut text = Vec::new();
            v.write_text(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        }
        Value::Bytes(b) => format!("'{}'", escape_sql_string(&String::from_utf8_lossy(b))),
    }
}

/// The separator a table COMMENT chooses: `separator=X`, one byte, not a backslash
/// (which escapes) and not a letter or digit (which fields are made of).
fn separator_from_comment(comment: &str, table: &str) -> Result<u8, Error> {
    let Some(rest) = comment.trim().strip_prefix("separator=") else {
        // Any other comment is the user's own.
        return Ok(DEFAULT_SEPARATOR);
    };
    match rest.as_bytes() {
        [b] if !b.is_ascii_alphanumeric() && *b != b'\\' && b.is_ascii() && !b.is_ascii_control() => Ok(*b),
        _ => Err(schema_error!(
            "table {table}: separator must be one ASCII punctuation or space character other than '\\', not {rest:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAYERS: &str = "CREATE TABLE players (
        id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
        name VARCHAR(64) NOT NULL DEFAULT '',
        email VARCHAR(128),
        level INT DEFAULT 1,
        PRIMARY KEY (id),
        UNIQUE KEY email (email),
        KEY by_level (level)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";

    #[test]
    fn the_seed_games_table_parses() {
        let tables = parse_schema(PLAYERS).unwrap();
        let [t] = tables.as_slice() else { panic!() };
        assert_eq!(t.name, "players");
        assert_eq!(t.primary, 0);
        assert!(t.columns[0].not_null && t.columns[0].auto_increment);
        assert_eq!(t.columns[1].default, Some(Value::Bytes(Vec::new())));
        assert_eq!(t.columns[3].default, Some(Value::Int(1)));
        assert_eq!(
            t.indexes,
            vec![
                Index {
                    name: "by_level".into(),
                    column: 3,
                    kind: IndexKind::Ordered
                },
                Index {
                    name: "email".into(),
                    column: 2,
                    kind: IndexKind::UniqueHash
                },
            ]
        );
        assert_eq!(t.separator, b'|');
    }

    #[test]
    fn canonical_sql_reads_back_as_the_same_table() {
        for sql in [
            PLAYERS,
            "CREATE TABLE t (k VARCHAR(10) PRIMARY KEY, v BLOB, d DOUBLE DEFAULT -1.5, c CHAR(3) NOT NULL DEFAULT 'x''y', UNIQUE KEY u (d) USING BTREE) COMMENT='separator=,'",
            "CREATE TABLE `q` (id INT, PRIMARY KEY (id) USING BTREE)",
            "CREATE TABLE `d`.`i` (id TINYINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, a TINYINT, \
             b SMALLINT UNSIGNED DEFAULT 7, c MEDIUMINT, d MEDIUMINT UNSIGNED, e BOOL, f BOOLEAN, \
             g TINYINT(1) NOT NULL DEFAULT 1, h SMALLINT)",
            "CREATE TABLE e (id INT PRIMARY KEY, d DATE DEFAULT '2024-01-05', \
             at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), \
             ts TIMESTAMP DEFAULT NOW() ON UPDATE CURRENT_TIMESTAMP, KEY at (at))",
        ] {
            let table = parse_schema(sql).unwrap().remove(0);
            let again = parse_schema(&table.to_sql()).unwrap().remove(0);
            assert_eq!(table, again, "{}", table.to_sql());
            assert_eq!(table.difference(&again), None);
        }
    }

    fn refused(sql: &str, why: &str) {
        match parse_schema(sql) {
            Err(Error::Schema(msg)) => assert!(msg.contains(why), "{sql}: {msg}"),
            other => panic!("{sql}: wanted a schema error with {why:?}, got {other:?}"),
        }
    }

    #[test]
    fn what_kura_cannot_keep_is_refused_with_a_reason() {
        refused("CREATE TABLE t (a INT)", "primary-key column is required");
        refused(
            "CREATE TABLE t (a INT, b INT, PRIMARY KEY (a, b))",
            "exactly one column",
        );
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY, b INT PRIMARY KEY)",
            "one primary-key",
        );
        refused("CREATE TABLE t (a TIME PRIMARY KEY)", "not supported");
        refused(
            "CREATE TABLE t (a DATETIME(7) PRIMARY KEY)",
            "precision of 0 to 6",
        );
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY, a INT)",
            "declared twice",
        );
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY, KEY k (zz))",
            "names no column",
        );
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY, b INT NOT NULL DEFAULT NULL)",
            "NOT NULL with DEFAULT NULL",
        );
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY, b INT DEFAULT 'x')",
            "Invalid default value for 'b'",
        );
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY, b VARCHAR(2) DEFAULT 'abc')",
            "Invalid default value for 'b'",
        );
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY) COMMENT='separator=ab'",
            "separator",
        );
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY) COMMENT='separator=\\\\'",
            "separator",
        );
        refused("CREATE TABLE `a.b` (a INT PRIMARY KEY)", "may not hold");
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY, UNIQUE KEY u (a))",
            "repeats the primary key",
        );
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY, b INT, UNIQUE KEY u (b), UNIQUE KEY v (b))",
            "indexed twice",
        );
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY, b INT, KEY u (b), UNIQUE KEY u (b))",
            "used twice",
        );
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY) PARTITION BY HASH(a)",
            "",
        );
        refused("SELECT 1", "CREATE TABLE statements only");
        refused(
            "CREATE TABLE t (a INT PRIMARY KEY); CREATE TABLE t (b INT PRIMARY KEY)",
            "declared twice",
        );
        refused("CREATE TABLE t (a VARCHAR PRIMARY KEY)", "");
    }

    #[test]
    fn a_difference_is_named() {
        let have = parse_schema(PLAYERS).unwrap().remove(0);
        let want = parse_schema(&PLAYERS.replace("level INT", "level BIGINT"))
            .unwrap()
            .remove(0);
        let why = have.difference(&want).unwrap();
        assert!(
            why.contains("level INT DEFAULT 1") && why.contains("level BIGINT"),
            "{why}"
        );
    }

    #[test]
    fn an_enum_keeps_its_members_matches_by_collation_and_reads_back() {
        let sql = "CREATE TABLE t (id INT PRIMARY KEY, \
                   st ENUM('new','it''s','back\\\\slash') NOT NULL DEFAULT 'NEW', \
                   b ENUM('x','X') COLLATE utf8mb4_bin)";
        let t = parse_schema(sql).unwrap().remove(0);
        let st = &t.columns[1];
        assert_eq!(st.ty, ColumnType::Enum);
        assert_eq!(st.members, ["new", "it's", "back\\slash"]);
        assert_eq!(st.default, Some(Value::Bytes(b"new".to_vec())));
        assert_eq!(
            st.parse_text(b"IT'S").ok(),
            Some(Value::Bytes(b"it's".to_vec()))
        );
        assert_eq!(
            st.member_at(3).ok(),
            Some(Value::Bytes(b"back\\slash".to_vec()))
        );
        assert!(st.parse_text(b"").is_err() && st.parse_text(b"old").is_err());
        assert!(st.member_at(0).is_err() && st.member_at(4).is_err());
        // Under a binary collation, case makes two members.
        assert_eq!(
            t.columns[2].parse_text(b"X").ok(),
            Some(Value::Bytes(b"X".to_vec()))
        );
        let again = parse_schema(&t.to_sql()).unwrap().remove(0);
        assert_eq!(again, t);
        refused(
            "CREATE TABLE t (id INT PRIMARY KEY, e ENUM('a','b','A'))",
            "Column 'e' has duplicated value 'a' in ENUM",
        );
        refused(
            "CREATE TABLE t (id INT PRIMARY KEY, e ENUM('a') DEFAULT 'b')",
            "Invalid default value for 'e'",
        );
    }
}
