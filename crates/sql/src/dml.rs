//! MySQL's forms of UPDATE and DELETE that SQLite lacks, as SQLite's:
//!
//! - `UPDATE t SET ... [WHERE w] ORDER BY o LIMIT n` and `DELETE FROM t [WHERE w]
//!   ORDER BY o LIMIT n`: the rows chosen by primary key,
//!   `... WHERE pk IN (SELECT pk FROM t WHERE w ORDER BY o LIMIT n)`;
//! - `UPDATE a JOIN b ON c SET a.x = b.y [WHERE w]` (inner joins): SQLite's
//!   `UPDATE a SET x = b.y FROM b WHERE c AND w`, one table updated;
//! - `DELETE a FROM a JOIN b ON c [WHERE w]` and `DELETE FROM a USING a JOIN b ...`:
//!   `DELETE FROM a WHERE pk IN (SELECT a.pk FROM a JOIN b ON c WHERE w)`, one
//!   table's rows deleted.
//!
//! The statement's parts are SQLite's already (`translate.rs` rewrote its names and
//! expressions); the new statement is written as text and parsed again.

use kura_tables::Catalog;
use sqlparser::ast::{
    Assignment, AssignmentTarget, Delete, FromTable, JoinConstraint, JoinOperator, ObjectName,
    Statement, TableFactor, TableWithJoins, Update,
};

use crate::error::SqlError;

/// The SQLite form of an UPDATE or DELETE that needs one; None for the others.
pub fn as_sqlite(
    statement: &Statement,
    catalog: &Catalog,
    database: Option<&str>,
) -> Result<Option<Statement>, SqlError> {
    let text = match statement {
        Statement::Update(u) if !u.table.joins.is_empty() => Some(update_join(u)?),
        Statement::Update(u) if !u.order_by.is_empty() || u.limit.is_some() => {
            Some(update_limited(u, catalog, database)?)
        }
        Statement::Delete(d) if !d.tables.is_empty() || d.using.is_some() => {
            Some(delete_join(d, catalog, database)?)
        }
        Statement::Delete(d) if !d.order_by.is_empty() || d.limit.is_some() => {
            Some(delete_limited(d, catalog, database)?)
        }
        _ => None,
    };
    let Some(text) = text else {
        return Ok(None);
    };
    let mut parsed =
        sqlparser::parser::Parser::parse_sql(&sqlparser::dialect::MySqlDialect {}, &text)
            .map_err(|e| SqlError::internal(format!("rewriting {text}: {e}")))?;
    match parsed.len() {
        1 => Ok(parsed.pop()),
        _ => Err(SqlError::internal(format!("rewriting {text}"))),
    }
}

/// A table factor's name (SQLite's) and the name its columns are qualified by.
fn named(factor: &TableFactor) -> Result<(ObjectName, String), SqlError> {
    match factor {
        TableFactor::Table { name, alias, .. } => {
            let refer = alias
                .as_ref()
                .map_or_else(|| name.to_string(), |a| a.name.to_string());
            Ok((name.clone(), refer))
        }
        _ => Err(SqlError::unsupported("UPDATE or DELETE of a derived table")),
    }
}

/// The primary key column of the table SQLite knows as `name`.
fn primary_key(
    name: &ObjectName,
    catalog: &Catalog,
    database: Option<&str>,
) -> Result<String, SqlError> {
    let last = name.0.last().map(crate::names::part).unwrap_or_default();
    let table = crate::names::from_sqlite(&last, database)?;
    let def = &catalog.tables[crate::names::table(catalog, &table)?];
    Ok(format!("`{}`", def.table.columns[def.table.primary].name))
}

/// ` ORDER BY ... LIMIT ...` of a statement, as text.
fn order_limit(
    order_by: &[sqlparser::ast::OrderByExpr],
    limit: Option<&sqlparser::ast::Expr>,
) -> String {
    let mut text = String::new();
    if !order_by.is_empty() {
        let terms: Vec<String> = order_by.iter().map(ToString::to_string).collect();
        text.push_str(&format!(" ORDER BY {}", terms.join(", ")));
    }
    if let Some(limit) = limit {
        text.push_str(&format!(" LIMIT {limit}"));
    }
    text
}

fn where_of(selection: Option<&sqlparser::ast::Expr>) -> String {
    selection.map_or_else(String::new, |w| format!(" WHERE {w}"))
}

fn assignments(list: &[Assignment], unqualify: bool) -> Result<String, SqlError> {
    let mut out = Vec::with_capacity(list.len());
    for a in list {
        let AssignmentTarget::ColumnName(column) = &a.target else {
            return Err(SqlError::unsupported("a tuple of columns in SET"));
        };
        let column = if unqualify {
            column
                .0
                .last()
                .map(|p| format!("`{}`", crate::names::part(p)))
                .unwrap_or_default()
        } else {
            column.to_string()
        };
        out.push(format!("{column} = {}", a.value));
    }
    Ok(out.join(", "))
}

fn update_limited(
    u: &Update,
    catalog: &Catalog,
    database: Option<&str>,
) -> Result<String, SqlError> {
    let (name, refer) = named(&u.table.relation)?;
    let pk = primary_key(&name, catalog, database)?;
    Ok(format!(
        "UPDATE {} SET {} WHERE {refer}.{pk} IN (SELECT {refer}.{pk} FROM {}{}{})",
        u.table.relation,
        assignments(&u.assignments, false)?,
        u.table.relation,
        where_of(u.selection.as_ref()),
        order_limit(&u.order_by, u.limit.as_ref()),
    ))
}

/// The ON conditions of `joins` (inner joins only) and the joined tables.
fn inner_joins(joins: &[sqlparser::ast::Join]) -> Result<(Vec<String>, Vec<String>), SqlError> {
    let (mut tables, mut conditions) = (Vec::new(), Vec::new());
    for j in joins {
        let constraint = match &j.join_operator {
            JoinOperator::Join(c) | JoinOperator::Inner(c) | JoinOperator::CrossJoin(c) => c,
            _ => return Err(SqlError::unsupported("UPDATE with other than inner joins")),
        };
        match constraint {
            JoinConstraint::On(on) => conditions.push(format!("({on})")),
            JoinConstraint::None => {}
            _ => return Err(SqlError::unsupported("UPDATE joined with USING or NATURAL")),
        }
        tables.push(j.relation.to_string());
    }
    Ok((tables, conditions))
}

fn update_join(u: &Update) -> Result<String, SqlError> {
    let (_, refer) = named(&u.table.relation)?;
    // Every column set must be the first table's.
    for a in &u.assignments {
        if let AssignmentTarget::ColumnName(column) = &a.target {
            if column.0.len() == 2 && crate::names::part(&column.0[0]) != refer.trim_matches('`') {
                return Err(SqlError::unsupported(
                    "an UPDATE of several tables at once (set one table's columns)",
                ));
            }
        }
    }
    let (tables, mut conditions) = inner_joins(&u.table.joins)?;
    conditions.extend(u.selection.as_ref().map(|w| format!("({w})")));
    let mut text = format!(
        "UPDATE {} SET {} FROM {}",
        u.table.relation,
        assignments(&u.assignments, true)?,
        tables.join(", ")
    );
    if !conditions.is_empty() {
        text.push_str(&format!(" WHERE {}", conditions.join(" AND ")));
    }
    Ok(text)
}

fn delete_limited(
    d: &Delete,
    catalog: &Catalog,
    database: Option<&str>,
) -> Result<String, SqlError> {
    let from = match &d.from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    let [table] = from.as_slice() else {
        return Err(SqlError::unsupported(
            "DELETE ... LIMIT from several tables",
        ));
    };
    let (name, refer) = named(&table.relation)?;
    let pk = primary_key(&name, catalog, database)?;
    Ok(format!(
        "DELETE FROM {} WHERE {refer}.{pk} IN (SELECT {refer}.{pk} FROM {}{}{})",
        table.relation,
        table.relation,
        where_of(d.selection.as_ref()),
        order_limit(&d.order_by, d.limit.as_ref()),
    ))
}

fn delete_join(d: &Delete, catalog: &Catalog, database: Option<&str>) -> Result<String, SqlError> {
    let listed = match &d.from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    // `DELETE a FROM a JOIN b ...`, or `DELETE FROM a USING a JOIN b ...`.
    let (targets, from): (Vec<String>, &Vec<TableWithJoins>) = match &d.using {
        Some(using) => (
            listed.iter().map(|t| t.relation.to_string()).collect(),
            using,
        ),
        None => (d.tables.iter().map(ToString::to_string).collect(), listed),
    };
    let [target] = targets.as_slice() else {
        return Err(SqlError::unsupported(
            "a DELETE from several tables at once (name one)",
        ));
    };
    let sources: Vec<String> = from.iter().map(ToString::to_string).collect();
    // The target is a table of the join, by its name or its alias.
    let target_name = target.clone();
    let mut table = None;
    for t in from {
        for factor in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            let (name, refer) = named(factor)?;
            if refer == target_name || name.to_string() == target_name {
                table = Some((name, refer));
            }
        }
    }
    let Some((name, refer)) = table else {
        return Err(SqlError::unsupported(format!(
            "DELETE {target_name}: the table is not among those joined"
        )));
    };
    let pk = primary_key(&name, catalog, database)?;
    Ok(format!(
        "DELETE FROM {name} WHERE {pk} IN (SELECT {refer}.{pk} FROM {}{})",
        sources.join(", "),
        where_of(d.selection.as_ref()),
    ))
}
