//! MySQL's spelling of a statement made into SQLite's: the statement is parsed with
//! sqlparser's MySQL dialect and printed again after a few rewrites.
//!
//! - `@@name`, `@@session.name`, `@@global.name`: the variable's value.
//! - `"text"`: a string, as MySQL reads it (SQLite would try a column first).
//! - `a / b`: a division that keeps the fraction, as MySQL's does; `a DIV b`: integer.
//! - `db.table`: the table (Kura has the one database).
//! - `INSERT IGNORE`: SQLite's `INSERT OR IGNORE`; `REPLACE` is the same in both.
//! - A result column with no alias is named by its text as written, as MySQL names it
//!   (SQLite would name it by the text sqlparser prints).
//! - `FOR UPDATE`, `FOR SHARE` (with `OF` or `NOWAIT`) and `LOCK IN SHARE MODE` at the
//!   end of a SELECT: dropped, and the statement marked a locking read (Kura holds no
//!   row locks: what a transaction read is checked at its COMMIT). `SKIP LOCKED` is
//!   refused, as no row is ever skipped.
//!
//! What it is not for: statements SQLite does not run (SHOW, SET, USE, DDL), which the
//! session answers itself.

use std::borrow::Cow;
use std::ops::ControlFlow;

use kura_tables::{Catalog, OnConflict};
use sqlparser::ast::{
    visit_expressions_mut, visit_relations_mut, BinaryOperator, CastKind, DataType, Expr, Ident,
    ObjectName, ObjectNamePart, OnInsert, SelectItem, SetExpr, Spanned, Statement, Value,
};
use sqlparser::tokenizer::Location;

use crate::error::SqlError;
use crate::names;
use crate::upsert::Upsert;

/// The default database's name.
pub const DATABASE: &str = kura_tables::DEFAULT_DATABASE;

/// A variable's value, as a literal.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Null,
    Number(String),
    Text(String),
}

/// A statement as SQLite will run it.
#[derive(Debug, Clone)]
pub struct Translated {
    pub sql: String,
    /// What its inserts do on a duplicate.
    pub conflict: OnConflict,
    /// Whether it writes rows (INSERT, REPLACE, UPDATE, DELETE).
    pub writes: bool,
    /// Its ON DUPLICATE KEY UPDATE (its inserts' conflict is then
    /// [`OnConflict::Update`], numbered by the session).
    pub upsert: Option<Upsert>,
    /// Whether it is a locking read (`FOR UPDATE`, `FOR SHARE`, `LOCK IN SHARE MODE`).
    pub locking: bool,
    /// A SELECT with `SQL_CALC_FOUND_ROWS`: the count of its rows without its LIMIT,
    /// which FOUND_ROWS() then gives.
    pub count_sql: Option<String>,
    /// The type of each result column SQLite declares none for but MySQL gives one
    /// (an aggregate of a DECIMAL column: [`crate::columns::aggregate_kinds`]).
    pub kinds: Vec<Option<crate::result::Kind>>,
}

/// MySQL's older `LOCK IN SHARE MODE` at the end of a statement, spelt as MySQL 8's
/// `FOR SHARE`, which the parser knows.
pub fn share_mode(sql: &str) -> Cow<'_, str> {
    let mut rest = sql.trim_end().trim_end_matches(';');
    for word in ["MODE", "SHARE", "IN", "LOCK"] {
        let trimmed = rest.trim_end();
        // After the last white space, which may take more than one byte (U+00A0).
        let last_space = trimmed
            .char_indices()
            .rev()
            .find(|(_, c)| c.is_whitespace());
        let Some(start) = last_space.map(|(i, c)| i + c.len_utf8()) else {
            return Cow::Borrowed(sql);
        };
        if !trimmed[start..].eq_ignore_ascii_case(word) {
            return Cow::Borrowed(sql);
        }
        rest = &trimmed[..start];
    }
    Cow::Owned(format!("{rest}FOR SHARE"))
}

/// A SELECT's `SQL_NO_CACHE` and `SQL_CACHE` (MySQL 5.7's query cache hints, which
/// mysqldump sends as `/*!40001 SQL_NO_CACHE */`) blanked out, the text keeping its
/// length so that offsets into it stay true. Kura has no query cache.
pub fn without_cache_hints(sql: &str) -> Cow<'_, str> {
    let starts_select = sql
        .trim_start()
        .get(..6)
        .is_some_and(|w| w.eq_ignore_ascii_case("SELECT"));
    // Every SELECT passes here: only one that names a hint is copied.
    if !starts_select
        || !sql
            .as_bytes()
            .windows(4)
            .any(|w| w.eq_ignore_ascii_case(b"SQL_"))
    {
        return Cow::Borrowed(sql);
    }
    let upper = sql.to_ascii_uppercase();
    let mut out: Option<String> = None;
    for hint in ["SQL_NO_CACHE", "SQL_CACHE"] {
        let mut from = 0;
        while let Some(at) = upper[from..].find(hint).map(|i| i + from) {
            let end = at + hint.len();
            let word = |i: Option<u8>| i.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
            let alone = !word(at.checked_sub(1).map(|i| upper.as_bytes()[i]))
                && !word(upper.as_bytes().get(end).copied());
            if alone {
                out.get_or_insert_with(|| sql.to_string())
                    .replace_range(at..end, &" ".repeat(hint.len()));
            }
            from = end;
        }
    }
    out.map_or(Cow::Borrowed(sql), Cow::Owned)
}

/// A SELECT's `SQL_CALC_FOUND_ROWS` taken out; None when it names none.
pub fn without_calc_found_rows(sql: &str) -> Option<String> {
    const HINT: &str = "SQL_CALC_FOUND_ROWS";
    let head = sql.trim_start();
    if !head
        .get(..6)
        .is_some_and(|w| w.eq_ignore_ascii_case("SELECT"))
    {
        return None;
    }
    // Every SELECT of text passes here: found in place, the text copied only then.
    let at = sql
        .as_bytes()
        .windows(HINT.len())
        .position(|w| w.eq_ignore_ascii_case(HINT.as_bytes()))?;
    let mut out = sql.to_string();
    out.replace_range(at..at + HINT.len(), "");
    Some(out)
}

/// `SELECT COUNT(*)` of a translated SELECT's rows with its LIMIT and OFFSET left out.
pub fn count_without_limit(sqlite: &str) -> Option<String> {
    let mut statements =
        sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::SQLiteDialect {}, sqlite).ok()?;
    let Some(Statement::Query(mut query)) = statements.pop() else {
        return None;
    };
    query.limit_clause = None;
    Some(format!("SELECT COUNT(*) FROM ({query})"))
}

/// `ALTER TABLE t DROP KEY k`, which sqlparser does not parse, as the `DROP INDEX k`
/// it means (outside quotes; only in an ALTER statement).
pub fn drop_key_as_index(sql: &str) -> Cow<'_, str> {
    let starts_alter = sql
        .trim_start()
        .get(..5)
        .is_some_and(|w| w.eq_ignore_ascii_case("ALTER"));
    if !starts_alter {
        return Cow::Borrowed(sql);
    }
    let words: Vec<&str> = sql.split_whitespace().collect();
    let found = words
        .windows(2)
        .any(|w| w[0].eq_ignore_ascii_case("DROP") && w[1].eq_ignore_ascii_case("KEY"));
    if !found || sql.contains(['\'', '"']) {
        return Cow::Borrowed(sql);
    }
    let mut out = Vec::with_capacity(words.len());
    let mut previous_drop = false;
    for w in words {
        if previous_drop && w.eq_ignore_ascii_case("KEY") {
            out.push("INDEX");
        } else {
            out.push(w);
        }
        previous_drop = w.eq_ignore_ascii_case("DROP");
    }
    Cow::Owned(out.join(" "))
}

/// Translates `statement`, parsed from `original`, over the tables of `catalog`, in a
/// session whose current database is `database`. `variable` gives a system
/// variable's value by its name in lower case.
pub fn translate(
    mut statement: Statement,
    original: &str,
    variable: &dyn Fn(&str) -> Option<Literal>,
    catalog: &Catalog,
    database: Option<&str>,
) -> Result<Translated, SqlError> {
    name_columns(&mut statement, original);
    // The tables the statement names, found once for what follows (neither changes
    // them).
    let tables = crate::columns::StatementTables::of(&statement, catalog, database);
    crate::collate::fold_likes(&mut statement, &tables);
    let kinds = crate::columns::aggregate_kinds(&statement, &tables);
    let mut failed: Option<SqlError> = None;
    // `database.table` as SQLite knows it ([`crate::names`]).
    let _ = visit_relations_mut(&mut statement, |name: &mut ObjectName| {
        if name.0.len() == 2 {
            let db = names::database(&part(&name.0[0])).to_string();
            let table = part(&name.0[1]);
            if db.eq_ignore_ascii_case(crate::information_schema::NAME) {
                // SQLite's attached schema of that name.
            } else if Some(db.as_str()) == database {
                name.0.remove(0);
            } else if catalog.has_database(&db) {
                let sqlite = names::sqlite_name(&kura_tables::qualified(&db, &table), database);
                *name = ObjectName::from(vec![Ident::with_quote('`', sqlite)]);
            } else {
                failed.get_or_insert(SqlError::no_table(&db, &table));
            }
        }
        ControlFlow::<()>::Continue(())
    });
    let _ = visit_expressions_mut(&mut statement, |expr: &mut Expr| {
        if let Err(e) = rewrite(expr, variable) {
            failed.get_or_insert(e);
        }
        ControlFlow::<()>::Continue(())
    });
    if let Some(e) = failed {
        return Err(e);
    }
    let mut conflict = OnConflict::Fail;
    let mut upsert = None;
    let mut locking = false;
    let writes = match &mut statement {
        Statement::Insert(insert) => {
            match insert.on.take() {
                None => {}
                Some(OnInsert::DuplicateKeyUpdate(assignments)) => {
                    let table = insert_table(insert, database)?;
                    let def = &catalog.tables[names::table(catalog, &table)?];
                    let alias = insert.insert_alias.take().map(|a| a.row_alias);
                    upsert = Some(Upsert::plan(def, &assignments, alias.as_ref())?);
                    conflict = OnConflict::Update(0);
                }
                Some(_) => return Err(SqlError::syntax("ON CONFLICT is not MySQL's")),
            }
            if insert.ignore {
                insert.ignore = false;
                insert.or = Some(sqlparser::ast::SqliteOnConflict::Ignore);
                conflict = OnConflict::Ignore;
            }
            if insert.replace_into {
                conflict = OnConflict::Replace;
            }
            default_keywords(insert, catalog, database)?;
            fill_defaults(insert, catalog, database);
            true
        }
        Statement::Update(_) | Statement::Delete(_) => {
            if let Statement::Update(update) = &mut statement {
                on_update_now(update, catalog, database)?;
            }
            if let Some(plain) = crate::dml::as_sqlite(&statement, catalog, database)? {
                statement = plain;
            }
            true
        }
        Statement::Query(query) => {
            let skip = |l: &sqlparser::ast::LockClause| {
                l.nonblock == Some(sqlparser::ast::NonBlock::SkipLocked)
            };
            if query.locks.iter().any(skip) {
                return Err(SqlError::unsupported(
                    "SKIP LOCKED (Kura holds no row locks, so it would skip no row)",
                ));
            }
            locking = !query.locks.is_empty();
            query.locks.clear();
            false
        }
        _ => false,
    };
    Ok(Translated {
        sql: statement.to_string(),
        conflict,
        writes,
        upsert,
        locking,
        count_sql: None,
        kinds,
    })
}

/// `DEFAULT` for a value in an INSERT's VALUES: the column's default, as MySQL reads
/// it (its DEFAULT, the time for `DEFAULT CURRENT_TIMESTAMP`, else NULL, which an
/// AUTO_INCREMENT column fills). SQLite has no such value. A NOT NULL column with
/// no default, given `DEFAULT` or left out of the column list, is MySQL's 1364.
fn default_keywords(
    insert: &mut sqlparser::ast::Insert,
    catalog: &Catalog,
    database: Option<&str>,
) -> Result<(), SqlError> {
    let Ok(table) = insert_table(insert, database) else {
        return Ok(());
    };
    let Some(t) = catalog.table(&table) else {
        return Ok(());
    };
    let columns = &catalog.tables[t].table.columns;
    // A NOT NULL column with no default of any kind: MySQL's 1364 when a statement
    // leaves it to its default, named or left out.
    let no_default = |name: &str| {
        columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(name))
            .filter(|c| c.not_null && c.default.is_none() && !c.default_now && !c.auto_increment)
            .map(|c| {
                SqlError::new(
                    1364,
                    b"HY000",
                    format!("Field '{}' doesn't have a default value", c.name),
                )
            })
    };
    if !insert.columns.is_empty() {
        for c in columns {
            if let Some(refused) =
                no_default(&c.name).filter(|_| !names_column(&insert.columns, &c.name))
            {
                return Err(refused);
            }
        }
    }
    // The columns the values are for, in order.
    let names: Vec<String> = if insert.columns.is_empty() {
        columns.iter().map(|c| c.name.clone()).collect()
    } else {
        insert
            .columns
            .iter()
            .map(|c| c.0.last().map(part).unwrap_or_default())
            .collect()
    };
    let Some(source) = insert.source.as_mut() else {
        return Ok(());
    };
    let SetExpr::Values(values) = source.body.as_mut() else {
        return Ok(());
    };
    if !values.rows.iter().any(|row| row.iter().any(is_default)) {
        return Ok(());
    }
    let defaults = defaults(catalog, &table);
    for row in values.rows.iter_mut() {
        for (i, value) in row.iter_mut().enumerate() {
            if !is_default(value) {
                continue;
            }
            let column = names.get(i).map(String::as_str).unwrap_or_default();
            if let Some(refused) = no_default(column) {
                return Err(refused);
            }
            *value = defaults
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(column))
                .map_or_else(|| Expr::value(Value::Null), |(_, e)| e.clone());
        }
    }
    Ok(())
}

/// The keyword `DEFAULT` where a value goes.
fn is_default(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(i) if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("DEFAULT"))
}

/// Whether an INSERT's column list names `column`.
fn names_column(columns: &[ObjectName], column: &str) -> bool {
    columns.iter().any(|c| {
        c.0.last()
            .is_some_and(|p| part(p).eq_ignore_ascii_case(column))
    })
}

/// Names the columns an INSERT's column list leaves out that have a DEFAULT, with that
/// value in every row of its VALUES: SQLite gives a virtual table NULL for them.
fn fill_defaults(insert: &mut sqlparser::ast::Insert, catalog: &Catalog, database: Option<&str>) {
    if insert.columns.is_empty() {
        return;
    }
    let Ok(table) = insert_table(insert, database) else {
        return;
    };
    let Some(source) = insert.source.as_mut() else {
        return;
    };
    let SetExpr::Values(values) = source.body.as_mut() else {
        return;
    };
    for (column, value) in defaults(catalog, &table) {
        if names_column(&insert.columns, &column) {
            continue;
        }
        insert
            .columns
            .push(ObjectName(vec![ObjectNamePart::Identifier(
                Ident::with_quote('`', column),
            )]));
        for row in values.rows.iter_mut() {
            row.push(value.clone());
        }
    }
}

/// The catalog name of the table an INSERT writes (its name already SQLite's).
fn insert_table(
    insert: &sqlparser::ast::Insert,
    database: Option<&str>,
) -> Result<String, SqlError> {
    match &insert.table {
        sqlparser::ast::TableObject::TableName(name) => match name.0.last() {
            Some(last) => names::from_sqlite(&part(last), database),
            None => Err(SqlError::syntax("INSERT names no table")),
        },
        _ => Err(SqlError::unsupported("INSERT INTO a table function")),
    }
}

/// The columns of table `name` that have a DEFAULT, with it as an expression (the
/// time of the statement, `mysql_now()`, for `DEFAULT CURRENT_TIMESTAMP`).
fn defaults(catalog: &Catalog, name: &str) -> Vec<(String, Expr)> {
    let Some(t) = catalog.table(name) else {
        return Vec::new();
    };
    catalog.tables[t]
        .table
        .columns
        .iter()
        .filter_map(|c| {
            if c.default_now {
                return Some((c.name.clone(), call("mysql_now", &[]).ok()?));
            }
            let value = match c.default.as_ref()? {
                kura_tables::Value::Null => Value::Null,
                kura_tables::Value::Int(n) => Value::Number(n.to_string(), false),
                kura_tables::Value::UInt(n) => Value::Number(n.to_string(), false),
                kura_tables::Value::Double(f) => Value::Number(format!("{f:e}"), false),
                // As text, which the column reads exactly (a number would be a double).
                kura_tables::Value::Decimal(d) => Value::SingleQuotedString(d.to_string()),
                kura_tables::Value::Bytes(b) => {
                    Value::SingleQuotedString(String::from_utf8_lossy(b).into_owned())
                }
            };
            Some((c.name.clone(), Expr::value(value)))
        })
        .collect()
}

/// An UPDATE of one table with `ON UPDATE CURRENT_TIMESTAMP` columns it does not set:
/// each set to the time of the statement in the rows where a column the statement
/// sets changes (`c IS DISTINCT FROM (new)`), as MySQL sets it only on a row that
/// changed.
fn on_update_now(
    update: &mut sqlparser::ast::Update,
    catalog: &Catalog,
    database: Option<&str>,
) -> Result<(), SqlError> {
    use sqlparser::ast::{Assignment, AssignmentTarget, TableFactor};
    if !update.table.joins.is_empty() {
        return Ok(());
    }
    let TableFactor::Table { name, .. } = &update.table.relation else {
        return Ok(());
    };
    let Some(last) = name.0.last() else {
        return Ok(());
    };
    let Some(t) = names::from_sqlite(&part(last), database)
        .ok()
        .and_then(|n| catalog.table(&n))
    else {
        return Ok(());
    };
    let set: Vec<String> = update
        .assignments
        .iter()
        .filter_map(|a| match &a.target {
            AssignmentTarget::ColumnName(c) => c.0.last().map(part),
            _ => None,
        })
        .collect();
    let changed: Vec<String> = update
        .assignments
        .iter()
        .map(|a| format!("({} IS DISTINCT FROM ({}))", a.target, a.value))
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    for c in &catalog.tables[t].table.columns {
        if !c.on_update_now || set.iter().any(|s| s.eq_ignore_ascii_case(&c.name)) {
            continue;
        }
        let column = format!("`{}`", c.name.replace('`', "``"));
        let text = format!(
            "CASE WHEN {} THEN mysql_now() ELSE {column} END",
            changed.join(" OR ")
        );
        let value = expression(&text)?;
        update.assignments.push(Assignment {
            target: AssignmentTarget::ColumnName(ObjectName::from(vec![Ident::with_quote(
                '`',
                c.name.clone(),
            )])),
            value,
        });
    }
    Ok(())
}

use crate::names::part;

/// A call's plain arguments.
fn function_args(f: &sqlparser::ast::Function) -> Vec<&Expr> {
    use sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    match &f.args {
        FunctionArguments::List(list) => list
            .args
            .iter()
            .filter_map(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `name(args...)` as an expression (the arguments already SQLite's).
pub(crate) fn call(name: &str, args: &[&Expr]) -> Result<Expr, SqlError> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    expression(&format!("{name}({})", args.join(", ")))
}

/// The expression `text` writes, as a statement's select item reads it (sqlparser's
/// `parse_expr` alone reads a `CASE` as a name).
fn expression(text: &str) -> Result<Expr, SqlError> {
    let failed = || SqlError::internal(format!("rewriting {text}"));
    let mut statements = sqlparser::parser::Parser::parse_sql(
        &sqlparser::dialect::MySqlDialect {},
        &format!("SELECT {text}"),
    )
    .map_err(|e| SqlError::internal(format!("rewriting {text}: {e}")))?;
    let Some(Statement::Query(query)) = statements.pop() else {
        return Err(failed());
    };
    let SetExpr::Select(select) = *query.body else {
        return Err(failed());
    };
    match select.projection.into_iter().next() {
        Some(SelectItem::UnnamedExpr(expr)) => Ok(expr),
        _ => Err(failed()),
    }
}

/// The call to one of `functions.rs`'s functions that MySQL's syntax SQLite lacks
/// means; None for any other expression.
fn mysql_call(expr: &Expr) -> Result<Option<Expr>, SqlError> {
    use sqlparser::ast::{TrimWhereField, ValueWithSpan};
    let text = |s: &str| Expr::Value(ValueWithSpan::from(Value::SingleQuotedString(s.into())));
    let number = |n: u8| Expr::value(Value::Number(n.to_string(), false));
    // `t + INTERVAL n unit`, `t - INTERVAL ...`, DATE_ADD(t, INTERVAL ...) and its kin.
    let interval = |t: &Expr, i: &sqlparser::ast::Interval, negate: bool| {
        let Some(unit) = i.leading_field.as_ref() else {
            return Err(SqlError::unsupported("an INTERVAL without a unit"));
        };
        let unit = text(&unit.to_string().to_ascii_uppercase());
        let n = if negate {
            Expr::UnaryOp {
                op: sqlparser::ast::UnaryOperator::Minus,
                expr: Box::new(Expr::Nested(i.value.clone())),
            }
        } else {
            (*i.value).clone()
        };
        call("mysql_date_add", &[t, &n, &unit])
    };
    Ok(Some(match expr {
        Expr::BinaryOp {
            left,
            op: op @ (BinaryOperator::Plus | BinaryOperator::Minus),
            right,
        } if matches!(**right, Expr::Interval(_)) => {
            let Expr::Interval(i) = &**right else {
                return Ok(None);
            };
            interval(left, i, *op == BinaryOperator::Minus)?
        }
        Expr::Function(f)
            if ["date_add", "adddate", "date_sub", "subdate"]
                .contains(&f.name.to_string().to_ascii_lowercase().as_str()) =>
        {
            let name = f.name.to_string().to_ascii_lowercase();
            let args = function_args(f);
            match args.as_slice() {
                [t, Expr::Interval(i)] => {
                    interval(t, i, name.ends_with("sub") || name == "subdate")?
                }
                // ADDDATE(t, n): n days.
                [t, n] => {
                    let day = text("DAY");
                    if name.contains("sub") {
                        let neg = Expr::UnaryOp {
                            op: sqlparser::ast::UnaryOperator::Minus,
                            expr: Box::new(Expr::Nested(Box::new((*n).clone()))),
                        };
                        call("mysql_date_add", &[t, &neg, &day])?
                    } else {
                        call("mysql_date_add", &[t, n, &day])?
                    }
                }
                _ => {
                    return Err(SqlError::syntax(format!(
                        "{name} takes a time and an INTERVAL"
                    )))
                }
            }
        }
        // TIMESTAMPDIFF(MINUTE, a, b): the unit is a word, not a column.
        Expr::Function(f) if f.name.to_string().eq_ignore_ascii_case("timestampdiff") => {
            let args = function_args(f);
            match args.as_slice() {
                [Expr::Identifier(unit), a, b] => {
                    call("timestampdiff", &[&text(&unit.value), a, b])?
                }
                _ => return Ok(None),
            }
        }
        Expr::Position { expr, r#in } => call("locate", &[expr, r#in])?,
        Expr::Substring {
            expr,
            substring_from,
            substring_for,
            ..
        } => {
            let one = number(1);
            let from = substring_from.as_deref().unwrap_or(&one);
            match substring_for {
                Some(n) => call("substring", &[expr, from, n])?,
                None => call("substring", &[expr, from])?,
            }
        }
        Expr::Trim {
            expr,
            trim_where: Some(place),
            trim_what,
            ..
        } => {
            let space = text(" ");
            let what = trim_what.as_deref().unwrap_or(&space);
            let mode = number(match place {
                TrimWhereField::Leading => 1,
                TrimWhereField::Trailing => 2,
                TrimWhereField::Both => 3,
            });
            call("mysql_trim", &[expr, what, &mode])?
        }
        Expr::Cast {
            expr,
            data_type:
                DataType::Signed
                | DataType::SignedInteger
                | DataType::Unsigned
                | DataType::UnsignedInteger,
            ..
        } => call("mysql_signed", &[expr])?,
        Expr::RLike {
            negated,
            expr,
            pattern,
            ..
        } => {
            let matched = call("regexp", &[pattern, expr])?;
            if *negated {
                Expr::UnaryOp {
                    op: sqlparser::ast::UnaryOperator::Not,
                    expr: Box::new(Expr::Nested(Box::new(matched))),
                }
            } else {
                matched
            }
        }
        Expr::Function(f) => {
            let name = f.name.to_string().to_ascii_lowercase();
            // SQLite's keywords, which it does not take as calls.
            let to = match name.as_str() {
                "isnull" => "mysql_isnull",
                "insert" => "mysql_insert",
                "now" | "current_timestamp" | "sysdate" | "localtime" | "localtimestamp"
                | "utc_timestamp" => "mysql_now",
                "curdate" | "current_date" | "utc_date" => "mysql_curdate",
                "curtime" | "current_time" | "utc_time" => "mysql_curtime",
                _ => return Ok(None),
            };
            let mut f = f.clone();
            f.name = ObjectName::from(vec![Ident::new(to)]);
            Expr::Function(f)
        }
        _ => return Ok(None),
    }))
}

/// Rewrites one expression (its children already are).
fn rewrite(expr: &mut Expr, variable: &dyn Fn(&str) -> Option<Literal>) -> Result<(), SqlError> {
    let name = match expr {
        Expr::Identifier(ident) if ident.value.starts_with("@@") => {
            Some(ident.value[2..].to_ascii_lowercase())
        }
        // A user variable: `variable` knows it as `@name`.
        Expr::Identifier(ident) if ident.value.starts_with('@') && ident.quote_style.is_none() => {
            Some(ident.value.to_ascii_lowercase())
        }
        Expr::CompoundIdentifier(parts) if parts.len() == 2 && parts[0].value.starts_with("@@") => {
            let scope = parts[0].value[2..].to_ascii_lowercase();
            if !matches!(scope.as_str(), "session" | "global" | "local") {
                return Err(SqlError::syntax(format!("near '{}'", parts[0].value)));
            }
            Some(parts[1].value.to_ascii_lowercase())
        }
        _ => None,
    };
    if let Some(name) = name {
        let value = variable(&name).ok_or_else(|| SqlError::unknown_variable(&name))?;
        *expr = Expr::value(match value {
            Literal::Null => Value::Null,
            Literal::Number(n) => Value::Number(n, false),
            Literal::Text(t) => Value::SingleQuotedString(t),
        });
        return Ok(());
    }
    if let Some(call) = mysql_call(expr)? {
        *expr = call;
        return Ok(());
    }
    match expr {
        Expr::Value(v) => {
            if let Value::DoubleQuotedString(s) = &v.value {
                v.value = Value::SingleQuotedString(s.clone());
            }
        }
        // `_binary X'7a'`, `_utf8mb4 'x'`: the string (PyMySQL sends bytes so).
        Expr::Prefixed { prefix, value } if prefix.value.starts_with('_') => {
            let value = std::mem::replace(value.as_mut(), Expr::value(Value::Null));
            *expr = value;
        }
        // `a <=> b`: equal, NULL matching NULL.
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Spaceship,
            right,
        } => {
            let l = std::mem::replace(left.as_mut(), Expr::value(Value::Null));
            let r = std::mem::replace(right.as_mut(), Expr::value(Value::Null));
            *expr = Expr::IsNotDistinctFrom(Box::new(l), Box::new(r));
        }
        Expr::BinaryOp { left, op, right } => match op {
            BinaryOperator::Divide => {
                let l = std::mem::replace(left.as_mut(), Expr::value(Value::Null));
                **left = Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(Expr::Nested(Box::new(l))),
                    data_type: DataType::Real,
                    format: None,
                };
            }
            BinaryOperator::MyIntegerDivide => {
                let l = std::mem::replace(left.as_mut(), Expr::value(Value::Null));
                let r = std::mem::replace(right.as_mut(), Expr::value(Value::Null));
                *expr = Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(Expr::BinaryOp {
                        left: Box::new(Expr::Nested(Box::new(l))),
                        op: BinaryOperator::Divide,
                        right: Box::new(Expr::Nested(Box::new(r))),
                    }),
                    data_type: DataType::Integer(None),
                    format: None,
                };
            }
            _ => {}
        },
        _ => {}
    }
    Ok(())
}

/// Gives every unnamed expression of the statement's outer SELECT its text as written
/// for a name. Plain column references keep SQLite's naming (the column's name), as
/// MySQL's.
fn name_columns(statement: &mut Statement, original: &str) {
    let query = match statement {
        Statement::Query(q) => q,
        _ => return,
    };
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    for item in select.projection.iter_mut() {
        let SelectItem::UnnamedExpr(expr) = item else {
            continue;
        };
        // A column keeps its name; a variable (`@@x`, `@x`) becomes a value, named by
        // its text as MySQL names it.
        if matches!(expr, Expr::Identifier(i) if !i.value.starts_with('@'))
            || matches!(expr, Expr::CompoundIdentifier(p) if !p[0].value.starts_with("@@"))
        {
            continue;
        }
        // A string is named by its value, as MySQL names it.
        if let Expr::Value(v) = expr {
            if let Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) = &v.value {
                let alias = Ident::with_quote('`', s.clone());
                let expr = std::mem::replace(expr, Expr::value(Value::Null));
                *item = SelectItem::ExprWithAlias { expr, alias };
                continue;
            }
        }
        // sqlparser's spans of some expressions (a function's) end early: the text
        // runs from the span's start to the end of the select item.
        let Some(mut start) = offset(original, expr.span().start) else {
            // No span (REGEXP's): the expression as sqlparser writes it back, which
            // is how it was written.
            let alias = Ident::with_quote('`', expr.to_string());
            let expr = std::mem::replace(expr, Expr::value(Value::Null));
            *item = SelectItem::ExprWithAlias { expr, alias };
            continue;
        };
        // A unary operator's span starts at its operand: the text starts before it
        // (a binary operation's leftmost operand's too).
        if starts_unary(expr) {
            start = before_unary(original, start);
        }
        // The spans of CAST, TRIM, SUBSTRING, POSITION, FLOOR, CEIL and the like start
        // inside their parentheses: the text starts at their keyword.
        if matches!(
            expr,
            Expr::Cast { .. }
                | Expr::Trim { .. }
                | Expr::Substring { .. }
                | Expr::Position { .. }
                | Expr::Floor { .. }
                | Expr::Ceil { .. }
                | Expr::Extract { .. }
                | Expr::Convert { .. }
                | Expr::Overlay { .. }
        ) {
            start = before_call(original, start);
        }
        let text = item_text(&original[start..]);
        if text.is_empty() {
            continue;
        }
        let expr = std::mem::replace(expr, Expr::value(Value::Null));
        *item = SelectItem::ExprWithAlias {
            expr,
            alias: Ident::with_quote('`', text.trim()),
        };
    }
}

/// The text of a select item at the start of `rest`: up to a comma, a closing
/// parenthesis or a clause's keyword at its own depth, outside quotes.
fn item_text(rest: &str) -> &str {
    const ENDS: [&str; 11] = [
        "FROM", "WHERE", "GROUP", "ORDER", "LIMIT", "HAVING", "UNION", "INTO", "FOR", "WINDOW",
        "LOCK",
    ];
    let bytes = rest.as_bytes();
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) => {
                if b == b'\\' && q != b'`' {
                    i += 1;
                } else if b == q {
                    quote = None;
                }
            }
            None => match b {
                b'\'' | b'"' | b'`' => quote = Some(b),
                b'(' => depth += 1,
                b')' if depth == 0 => break,
                b')' => depth -= 1,
                b',' | b';' if depth == 0 => break,
                b if b.is_ascii_whitespace() && depth == 0 => {
                    let word: String = rest[i..]
                        .trim_start()
                        .chars()
                        .take_while(|c| c.is_ascii_alphabetic())
                        .collect();
                    if ENDS.iter().any(|e| e.eq_ignore_ascii_case(&word)) {
                        break;
                    }
                }
                _ => {}
            },
        }
        i += 1;
    }
    rest[..i.min(rest.len())].trim()
}

/// Whether `expr`'s text starts with a unary operator: it is one, or its leftmost
/// operand is.
fn starts_unary(expr: &Expr) -> bool {
    match expr {
        Expr::UnaryOp { .. } => true,
        Expr::BinaryOp { left, .. } => starts_unary(left),
        _ => false,
    }
}

/// Where the call whose parenthesis opens just before `start` (`CAST(` ...) begins
/// (`TRIM(LEADING` ...: past a trim's place word too).
fn before_call(text: &str, start: usize) -> usize {
    let mut head = text[..start].trim_end();
    for place in ["LEADING", "TRAILING", "BOTH"] {
        let n = head.len();
        if n >= place.len()
            && head.is_char_boundary(n - place.len())
            && head[n - place.len()..].eq_ignore_ascii_case(place)
        {
            head = head[..n - place.len()].trim_end();
            break;
        }
    }
    let Some(head) = head.strip_suffix('(') else {
        return start;
    };
    let head = head.trim_end();
    let word = head
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    if word == head.len() {
        start
    } else {
        word
    }
}

/// Where the unary operators (`-`, `+`, `~`, `!`, `NOT`) before `start` begin.
fn before_unary(text: &str, mut start: usize) -> usize {
    loop {
        let head = text[..start].trim_end();
        if let Some(rest) = head.strip_suffix(['-', '+', '~', '!']) {
            start = rest.len();
        } else if head.len() >= 3
            && head.is_char_boundary(head.len() - 3)
            && head[head.len() - 3..].eq_ignore_ascii_case("NOT")
            && !head[..head.len() - 3].ends_with(|c: char| c.is_alphanumeric() || c == '_')
        {
            start = head.len() - 3;
        } else {
            return start;
        }
    }
}

/// The byte offset of a location (1-based line and column, counted in characters).
fn offset(text: &str, at: Location) -> Option<usize> {
    if at.line == 0 || at.column == 0 {
        return None;
    }
    let mut line = 1;
    let mut column = 1;
    for (i, c) in text.char_indices() {
        if line == at.line && column == at.column {
            return Some(i);
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line == at.line && column == at.column).then_some(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::MySqlDialect;
    use sqlparser::parser::Parser;

    fn run(sql: &str) -> String {
        let mut statements = Parser::parse_sql(&MySqlDialect {}, sql).unwrap_or_default();
        let statement = statements.remove(0);
        let vars = |name: &str| match name {
            "version" => Some(Literal::Text("8.0.36".into())),
            "autocommit" => Some(Literal::Number("1".into())),
            _ => None,
        };
        match translate(statement, sql, &vars, &Catalog::new(), Some(DATABASE)) {
            Ok(t) => t.sql,
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn share_mode_reads_past_white_space_of_several_bytes() {
        // U+00A0 before the last word: the `sql_shape` fuzz
        // target's find, a panic before.
        assert_eq!(
            share_mode("\u{a0}+\u{a4}\u{14}\u{14}"),
            "\u{a0}+\u{a4}\u{14}\u{14}"
        );
        assert_eq!(
            share_mode("SELECT 1\u{a0}LOCK IN SHARE\u{a0}MODE"),
            "SELECT 1\u{a0}FOR SHARE"
        );
    }

    #[test]
    fn mysql_spellings_become_sqlites() {
        assert_eq!(
            run("SELECT @@version, @@session.autocommit"),
            "SELECT '8.0.36' AS `@@version`, 1 AS `@@session.autocommit`"
        );
        assert_eq!(
            run("select count(*), a/2 from kura.t where b = \"x\""),
            "SELECT count(*) AS `count(*)`, CAST((a) AS REAL) / 2 AS `a/2` FROM t WHERE b = 'x'"
        );
        assert_eq!(
            run("SELECT 7 DIV 2"),
            "SELECT CAST((7) / (2) AS INTEGER) AS `7 DIV 2`"
        );
        assert_eq!(
            run("INSERT IGNORE INTO t (a) VALUES (1)"),
            "INSERT OR IGNORE INTO t (a) VALUES (1)"
        );
        assert_eq!(
            run("SELECT -id, NOT a FROM t WHERE a <=> NULL AND y = _binary X'7a'"),
            "SELECT -id AS `-id`, NOT a AS `NOT a` FROM t WHERE a IS NOT DISTINCT FROM NULL AND y = X'7a'"
        );
        assert_eq!(
            run(r"SELECT a FROM t WHERE s LIKE 'p\\%' AND s NOT LIKE 'x|%' ESCAPE '|'"),
            r"SELECT a FROM t WHERE s LIKE 'p\%' AND s NOT LIKE 'x|%' ESCAPE '|'"
        );
        assert_eq!(
            run("SELECT 'it''s', \"a`b\", 'x' AS y"),
            "SELECT 'it''s' AS `it's`, 'a`b' AS `a``b`, 'x' AS y"
        );
        assert!(run("SELECT * FROM other.t").contains("1146"));
        assert!(run("SELECT @@nope").contains("1193"));
    }
}
