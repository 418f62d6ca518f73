//! `INSERT ... ON DUPLICATE KEY UPDATE`: SQLite runs no upsert on a virtual table, so
//! the statement reaches SQLite as a plain INSERT whose rows carry
//! [`OnConflict::Update`](kura_tables::OnConflict::Update), and the tables layer, when
//! a row is in the way under its locks, asks for the row's new values. They come from
//! the assignments, evaluated here by SQLite as one `SELECT` of expressions over
//! parameters: `?1..?n` are the columns of the row in the way (a bare or
//! table-qualified column), `?n+1..?2n` the row the insert proposed (`VALUES(col)`, or
//! `alias.col` after `INSERT ... AS alias`).
//!
//! What it is not for: assignments that read tables (a subquery would need the locks
//! the batch holds); they are refused with 1235.

use std::ops::ControlFlow;

use kura_tables::{ColumnType, TableDef, Value};
use rusqlite::types::ValueRef;
use rusqlite::Connection;
use sqlparser::ast::{
    Assignment, AssignmentTarget, Expr, FunctionArguments, Ident, ObjectName, ObjectNamePart,
    VisitMut, VisitorMut,
};

use crate::convert::to_column;
use crate::error::SqlError;

/// One statement's ON DUPLICATE KEY UPDATE, ready to evaluate.
#[derive(Debug, Clone)]
pub struct Upsert {
    /// The table's number.
    pub table: u32,
    /// `SELECT e1, e2, ...` over the parameters.
    sql: String,
    /// The column each expression sets, by position.
    targets: Vec<usize>,
}

impl Upsert {
    /// Plans `assignments` of an insert into `def`; `alias` is the insert's row alias.
    pub fn plan(
        def: &TableDef,
        assignments: &[Assignment],
        alias: Option<&ObjectName>,
    ) -> Result<Upsert, SqlError> {
        let table = kura_tables::database_of(&def.table.name).1;
        let alias = alias.and_then(|a| a.0.last()).map(part);
        let mut targets = Vec::with_capacity(assignments.len());
        let mut exprs = Vec::with_capacity(assignments.len());
        for a in assignments {
            let AssignmentTarget::ColumnName(name) = &a.target else {
                return Err(SqlError::syntax("a tuple in ON DUPLICATE KEY UPDATE"));
            };
            let name = name.0.last().map(part).unwrap_or_default();
            targets.push(column(def, &name)?);
            let mut expr = a.value.clone();
            let mut resolver = Resolver {
                def,
                table,
                alias: alias.as_deref(),
                failed: None,
            };
            let _ = expr.visit(&mut resolver);
            if let Some(e) = resolver.failed {
                return Err(e);
            }
            exprs.push(expr.to_string());
        }
        Ok(Upsert {
            table: def.number,
            sql: format!("SELECT {}", exprs.join(", ")),
            targets,
        })
    }

    /// The row `old` of `def` becomes, the insert having proposed `new`.
    pub fn evaluate(
        &self,
        db: &Connection,
        def: &TableDef,
        old: &[Value],
        new: &[Value],
    ) -> Result<Vec<Value>, SqlError> {
        let columns = &def.table.columns;
        let mut stmt = db
            .prepare_cached(&self.sql)
            .map_err(crate::session::sqlite_error)?;
        // SQLite knows as many parameters as the highest one the expressions name.
        let count = stmt.parameter_count();
        for (i, v) in old.iter().chain(new).enumerate().take(count) {
            let blob = columns[i % columns.len()].ty == ColumnType::Blob;
            stmt.raw_bind_parameter(i + 1, to_sqlite(v, blob))
                .map_err(crate::session::sqlite_error)?;
        }
        let mut rows = stmt.raw_query();
        let Some(row) = rows.next().map_err(crate::session::sqlite_error)? else {
            return Err(SqlError::internal("an upsert's expressions gave no row"));
        };
        let mut out = old.to_vec();
        for (k, &target) in self.targets.iter().enumerate() {
            let v: ValueRef<'_> = row.get_ref(k).map_err(crate::session::sqlite_error)?;
            out[target] = to_column(v, &columns[target], 1)?;
        }
        Ok(out)
    }
}

/// A Kura value as SQLite sees it in a column (`blob`: of a BLOB column).
pub fn to_sqlite(v: &Value, blob: bool) -> rusqlite::types::Value {
    use rusqlite::types::Value as V;
    match v {
        Value::Null => V::Null,
        Value::Int(n) => V::Integer(*n),
        Value::UInt(n) => i64::try_from(*n).map_or(V::Real(*n as f64), V::Integer),
        Value::Double(f) => V::Real(*f),
        Value::Decimal(d) => crate::convert::decimal_value(d),
        Value::Bytes(b) if blob => V::Blob(b.clone()),
        Value::Bytes(b) => V::Text(String::from_utf8_lossy(b).into_owned()),
    }
}

/// Makes the columns of an assignment's expression parameters, outermost first (so
/// that `VALUES(col)` is seen before the `col` inside it).
struct Resolver<'a> {
    def: &'a TableDef,
    table: &'a str,
    alias: Option<&'a str>,
    failed: Option<SqlError>,
}

impl Resolver<'_> {
    /// The parameter `e` becomes (its position, from 0), if it names a column.
    fn resolve(&self, e: &Expr) -> Result<Option<usize>, SqlError> {
        let n = self.def.table.columns.len();
        match e {
            Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => Err(
                SqlError::unsupported("a subquery in ON DUPLICATE KEY UPDATE"),
            ),
            Expr::Identifier(id) => column(self.def, &id.value).map(Some),
            Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                let qualifier = &parts[0].value;
                let at = column(self.def, &parts[1].value);
                if self
                    .alias
                    .is_some_and(|a| a.eq_ignore_ascii_case(qualifier))
                {
                    at.map(|i| Some(n + i))
                } else if qualifier.eq_ignore_ascii_case(self.table) {
                    at.map(Some)
                } else {
                    Err(SqlError::no_column(
                        &format!("{qualifier}.{}", parts[1].value),
                        "field list",
                    ))
                }
            }
            Expr::Function(f) if is_values(&f.name) => match &f.args {
                FunctionArguments::List(list) if list.args.len() == 1 => {
                    let arg = list.args[0].to_string();
                    let arg = arg.rsplit('.').next().unwrap_or(&arg);
                    column(self.def, arg.trim_matches('`')).map(|i| Some(n + i))
                }
                _ => Err(SqlError::syntax("VALUES() names one column")),
            },
            _ => Ok(None),
        }
    }
}

impl VisitorMut for Resolver<'_> {
    type Break = ();

    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        match self.resolve(e) {
            Ok(Some(i)) => {
                *e = Expr::value(sqlparser::ast::Value::Placeholder(format!("?{}", i + 1)));
                ControlFlow::Continue(())
            }
            Ok(None) => ControlFlow::Continue(()),
            Err(err) => {
                self.failed = Some(err);
                ControlFlow::Break(())
            }
        }
    }
}

/// The position of column `name` of `def`, or MySQL's 1054.
fn column(def: &TableDef, name: &str) -> Result<usize, SqlError> {
    def.table
        .columns
        .iter()
        .position(|c| c.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| SqlError::no_column(name, "field list"))
}

fn is_values(name: &ObjectName) -> bool {
    name.0.len() == 1 && part(&name.0[0]).eq_ignore_ascii_case("values")
}

fn part(p: &ObjectNamePart) -> String {
    match p {
        ObjectNamePart::Identifier(Ident { value, .. }) => value.clone(),
        other => other.to_string(),
    }
}
