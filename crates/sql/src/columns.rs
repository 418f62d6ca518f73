//! What a statement's column names refer to: the tables it names (by name or alias)
//! and, for an expression that is a column of one of them, that column. Collations
//! (`collate.rs`) use it to fold `LIKE`; results use it to tell the client the type
//! of an aggregate of a DECIMAL column ([`aggregate_kinds`]), which SQLite computes
//! as a double.

use std::collections::HashMap;
use std::ops::ControlFlow;

use kura_tables::{Catalog, Column, ColumnType, Rule};
use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, SelectItem, SetExpr, Statement,
    TableFactor, Visit, Visitor,
};

use crate::names;
use crate::result::Kind;

/// The tables a statement reads or writes: by the name or alias a column may be
/// qualified with, each table's position in the catalog.
pub(crate) struct StatementTables<'a> {
    catalog: &'a Catalog,
    database: Option<&'a str>,
    by_name: HashMap<String, usize>,
}

impl Visitor for StatementTables<'_> {
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

impl<'a> StatementTables<'a> {
    pub(crate) fn of(
        statement: &Statement,
        catalog: &'a Catalog,
        database: Option<&'a str>,
    ) -> StatementTables<'a> {
        let mut tables = StatementTables {
            catalog,
            database,
            by_name: HashMap::new(),
        };
        let _ = statement.visit(&mut tables);
        tables
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The columns `expr` may name: the one of the table it is qualified with, or,
    /// unqualified, that of each table the statement names that has one so named.
    fn candidates(&self, expr: &Expr) -> Vec<&'a Column> {
        let (qualifier, column) = match expr {
            Expr::Identifier(ident) => (None, &ident.value),
            Expr::CompoundIdentifier(parts) if parts.len() >= 2 => (
                Some(parts[parts.len() - 2].value.to_ascii_lowercase()),
                &parts[parts.len() - 1].value,
            ),
            Expr::Nested(inner) => return self.candidates(inner),
            _ => return Vec::new(),
        };
        let catalog = self.catalog;
        let column_in = |t: usize| {
            let table = &catalog.tables[t].table;
            table.column_index(column).map(|c| &table.columns[c])
        };
        match qualifier {
            Some(q) => self
                .by_name
                .get(&q)
                .and_then(|&t| column_in(t))
                .into_iter()
                .collect(),
            None => self
                .by_name
                .values()
                .filter_map(|&t| column_in(t))
                .collect(),
        }
    }

    /// The rule of the column `expr` names, if it is a column of a table the
    /// statement names (unqualified: of any of them that has it, if they agree).
    pub(crate) fn rule_of(&self, expr: &Expr) -> Option<Rule> {
        let rules: Vec<Rule> = self.candidates(expr).iter().map(|c| c.rule()).collect();
        let first = *rules.first()?;
        rules.iter().all(|&r| r == first).then_some(first)
    }

    /// The type of the column `expr` names, when that is one column.
    fn type_of(&self, expr: &Expr) -> Option<ColumnType> {
        match self.candidates(expr).as_slice() {
            [one] => Some(one.ty),
            _ => None,
        }
    }
}

/// For each result column of a SELECT of tables (no derived table) whose items are
/// all expressions (no `*`): the type MySQL gives `SUM`, `AVG`, `MIN` or `MAX` of a
/// DECIMAL column (SUM: 22 more digits; AVG: 4 more digits, 4 of them after the
/// point; MIN, MAX: the column's), None for anything else. SQLite computes them as doubles: the client is told the
/// DECIMAL and gets the double at its scale.
pub(crate) fn aggregate_kinds(
    statement: &Statement,
    tables: &StatementTables<'_>,
) -> Vec<Option<Kind>> {
    let Statement::Query(query) = statement else {
        return Vec::new();
    };
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Vec::new();
    };
    // Only over tables: a derived table's columns may take a table's names.
    let plain = |f: &TableFactor| matches!(f, TableFactor::Table { .. });
    let over_tables = select
        .from
        .iter()
        .all(|t| plain(&t.relation) && t.joins.iter().all(|j| plain(&j.relation)));
    if !over_tables || tables.is_empty() {
        return Vec::new();
    }
    let mut kinds = Vec::with_capacity(select.projection.len());
    for item in &select.projection {
        let expr = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            // A `*` stands for columns not counted here.
            _ => return Vec::new(),
        };
        kinds.push(aggregate_kind(expr, tables));
    }
    kinds
}

fn aggregate_kind(expr: &Expr, tables: &StatementTables<'_>) -> Option<Kind> {
    let Expr::Function(f) = expr else {
        return None;
    };
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))] = list.args.as_slice() else {
        return None;
    };
    let Some(ColumnType::Decimal(p, s)) = tables.type_of(arg) else {
        return None;
    };
    let name = f.name.to_string().to_ascii_uppercase();
    Some(match name.as_str() {
        "SUM" => Kind::Decimal(p.saturating_add(22).min(65), s),
        "AVG" => Kind::Decimal(p.saturating_add(4).min(65), s.saturating_add(4).min(30)),
        "MIN" | "MAX" => Kind::Decimal(p, s),
        _ => return None,
    })
}
