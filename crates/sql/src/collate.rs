//! Collations in SQL: a text column compares as its collation says
//! (`kura_tables::collation`) in `=`, `<`, `IN`, `ORDER BY`, `GROUP BY`, `DISTINCT`,
//! `MIN`/`MAX` and `LIKE`.
//!
//! SQLite is told each case-insensitive column's collation in the virtual table's
//! declaration ([`sqlite_collation`], registered by [`register`]), so its comparisons
//! of the column follow it. Its `LIKE` knows no collation: a statement's `x LIKE p` on
//! such a column is rewritten to `x MATCH p` ([`fold_likes`]), SQLite's other
//! operator that it offers a virtual table's planner, so the index still reads only
//! the pattern's prefix, as weights; `match()` compares characters by weight.
//!
//! `REGEXP` on such a column becomes `regexp_ci()`, a case-insensitive match.
//!
//! What is not MySQL's: a literal compared with a literal (`'a' = 'A'`), and an
//! expression of a column (`LOWER(name)`), compare as bytes, where MySQL takes the
//! connection's collation or the column's.

use std::collections::HashMap;
use std::ops::ControlFlow;

use kura_tables::{Catalog, Rule};
use rusqlite::Connection;
use sqlparser::ast::{
    visit_expressions_mut, BinaryOperator, Expr, Statement, TableFactor, Visit, Visitor,
};

use crate::names;

/// The SQLite collation a column of `rule` is declared with; None: SQLite's own
/// (bytes).
pub fn sqlite_collation(rule: Rule) -> Option<&'static str> {
    match rule {
        Rule::Binary => None,
        Rule::Folded { pad: true } => Some("mysql_ci"),
        Rule::Folded { pad: false } => Some("mysql_ci_nopad"),
    }
}

/// Defines the collations [`sqlite_collation`] names on `db`.
pub fn register(db: &Connection) -> rusqlite::Result<()> {
    for pad in [true, false] {
        let rule = Rule::Folded { pad };
        let name = sqlite_collation(rule).unwrap_or("mysql_ci");
        db.create_collation(name, move |a, b| rule.compare(a.as_bytes(), b.as_bytes()))?;
    }
    Ok(())
}

/// The tables a statement reads or writes: by the name or alias a column may be
/// qualified with, each table's position in the catalog.
struct Tables<'a> {
    catalog: &'a Catalog,
    database: Option<&'a str>,
    by_name: HashMap<String, usize>,
}

impl Visitor for Tables<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table { name, alias, .. } = factor {
            let Ok(qualified) = names::of_statement(name, self.database) else {
                return ControlFlow::Continue(());
            };
            if let Some(t) = self.catalog.table(&qualified) {
                let shown = match alias {
                    Some(alias) => alias.name.value.clone(),
                    None => names::part(&name.0[name.0.len() - 1]),
                };
                self.by_name.insert(shown.to_ascii_lowercase(), t);
            }
        }
        ControlFlow::Continue(())
    }
}

impl Tables<'_> {
    /// The rule of the column `expr` names, if it is a column of a table the
    /// statement names (unqualified: of any of them that has it, if they agree).
    fn rule_of(&self, expr: &Expr) -> Option<Rule> {
        let (qualifier, column) = match expr {
            Expr::Identifier(ident) => (None, &ident.value),
            Expr::CompoundIdentifier(parts) if parts.len() >= 2 => (
                Some(parts[parts.len() - 2].value.to_ascii_lowercase()),
                &parts[parts.len() - 1].value,
            ),
            Expr::Nested(inner) => return self.rule_of(inner),
            _ => return None,
        };
        let rule_in = |t: usize| {
            let table = &self.catalog.tables[t].table;
            table.column_index(column).map(|c| table.columns[c].rule())
        };
        match qualifier {
            Some(q) => rule_in(*self.by_name.get(&q)?),
            None => {
                let mut rules = self.by_name.values().filter_map(|&t| rule_in(t));
                let first = rules.next()?;
                rules.all(|r| r == first).then_some(first)
            }
        }
    }
}

/// Rewrites each `x [NOT] LIKE p [ESCAPE e]` of `statement` whose `x` is a
/// case-insensitive column into `x MATCH p` (with an escape, `mysql_like_ci(p, x, e)`),
/// and each `x [NOT] REGEXP p` into `regexp_ci(p, x)`, before the statement's table
/// names are made SQLite's.
pub fn fold_likes(statement: &mut Statement, catalog: &Catalog, database: Option<&str>) {
    let mut tables = Tables {
        catalog,
        database,
        by_name: HashMap::new(),
    };
    let _ = statement.visit(&mut tables);
    if tables.by_name.is_empty() {
        return;
    }
    let _ = visit_expressions_mut(statement, |expr: &mut Expr| {
        if let Expr::RLike {
            negated,
            expr: text,
            pattern,
            ..
        } = expr
        {
            if matches!(tables.rule_of(text), Some(Rule::Folded { .. })) {
                if let Ok(call) = crate::translate::call("regexp_ci", &[pattern, text]) {
                    *expr = negate(*negated, call);
                }
            }
            return ControlFlow::Continue(());
        }
        let Expr::Like {
            negated,
            any: false,
            expr: text,
            pattern,
            escape_char,
        } = expr
        else {
            return ControlFlow::<()>::Continue(());
        };
        if !matches!(tables.rule_of(text), Some(Rule::Folded { .. })) {
            return ControlFlow::Continue(());
        }
        let folded = match escape_char.as_deref() {
            None => Expr::BinaryOp {
                left: text.clone(),
                op: BinaryOperator::Match,
                right: pattern.clone(),
            },
            Some(escape) => {
                match crate::translate::call("mysql_like_ci", &[pattern, text, escape]) {
                    Ok(call) => call,
                    Err(_) => return ControlFlow::Continue(()),
                }
            }
        };
        *expr = negate(*negated, folded);
        ControlFlow::Continue(())
    });
}

/// `NOT (expr)` if `negated`, else `(expr)`.
fn negate(negated: bool, expr: Expr) -> Expr {
    let nested = Expr::Nested(Box::new(expr));
    if negated {
        Expr::UnaryOp {
            op: sqlparser::ast::UnaryOperator::Not,
            expr: Box::new(nested),
        }
    } else {
        nested
    }
}
