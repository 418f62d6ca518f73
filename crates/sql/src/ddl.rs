//! DDL a session runs: CREATE TABLE, DROP TABLE, CREATE [UNIQUE] INDEX, ALTER TABLE
//! ... ADD COLUMN / ADD [UNIQUE] INDEX, each ending an open transaction first as
//! MySQL's implicit commit does. The tables layer makes the change durable
//! ([`kura_tables::ddl`]); this module turns MySQL's statements into its calls and its
//! refusals into MySQL's errors.

use kura_tables::{Collation, DdlError};
use sqlparser::ast::{
    AlterTableOperation, IndexType, ObjectName, ObjectType, SchemaName, Statement,
};

use crate::error::SqlError;
use crate::names;
use crate::result::{Done, Output};
use crate::session::Session;

impl Session {
    /// Runs `statement` if it is DDL; None if it is not.
    pub(crate) fn ddl(
        &mut self,
        statement: &Statement,
        sql: &str,
    ) -> Option<Result<Output, SqlError>> {
        let run = match statement {
            Statement::CreateDatabase {
                db_name,
                if_not_exists,
                default_charset,
                default_collation,
                ..
            } => {
                let chosen = (default_charset.as_deref(), default_collation.as_deref());
                return Some(self.create_database(db_name, *if_not_exists, chosen));
            }
            Statement::CreateSchema {
                schema_name: SchemaName::Simple(name),
                if_not_exists,
                ..
            } => return Some(self.create_database(name, *if_not_exists, (None, None))),
            Statement::Drop {
                object_type: ObjectType::Database | ObjectType::Schema,
                if_exists,
                names,
                ..
            } => return Some(self.drop_database(names, *if_exists)),
            Statement::Truncate(truncate) => {
                let run = |s: &mut Session| -> Result<(), SqlError> {
                    s.implicit_commit()?;
                    for target in &truncate.table_names {
                        let name = s.name_of(&target.name)?;
                        s.shared
                            .tables
                            .truncate_table(&name)
                            .map_err(|e| ddl_error(&name, e))?;
                    }
                    Ok(())
                };
                run(self)
            }
            Statement::RenameTable(renames) => {
                let run = |s: &mut Session| -> Result<(), SqlError> {
                    s.implicit_commit()?;
                    let pairs = renames
                        .iter()
                        .map(|r| Ok((s.name_of(&r.old_name)?, s.name_of(&r.new_name)?)))
                        .collect::<Result<Vec<(String, String)>, SqlError>>()?;
                    s.shared
                        .tables
                        .rename_tables(&pairs)
                        .map_err(|e| ddl_error("", e))
                };
                run(self)
            }
            Statement::CreateTable(create) => match self.name_of(&create.name) {
                Ok(name) => self.create_table(sql, &name, create.if_not_exists),
                Err(e) => Err(e),
            },
            Statement::Drop {
                object_type: ObjectType::Table,
                if_exists,
                names,
                ..
            } => self.drop_tables(names, *if_exists),
            Statement::Drop {
                object_type: ObjectType::Index,
                names,
                table,
                ..
            } => match table {
                Some(table) => self
                    .implicit_commit()
                    .and_then(|()| self.name_of(table))
                    .and_then(|table| {
                        names.iter().try_for_each(|index| {
                            let index = index.0.last().map(names::part).unwrap_or_default();
                            self.drop_index(&table, &index)
                        })
                    }),
                None => Err(SqlError::syntax("DROP INDEX name ON table")),
            },
            Statement::CreateIndex(create) => {
                let Some(name) = create
                    .name
                    .as_ref()
                    .and_then(|n| n.0.last())
                    .map(names::part)
                else {
                    return Some(Err(SqlError::syntax("CREATE INDEX names its index")));
                };
                let [column] = create.columns.as_slice() else {
                    return Some(Err(SqlError::unsupported("an index of several columns")));
                };
                let index = format!(
                    "{}KEY `{name}` ({}){}",
                    if create.unique { "UNIQUE " } else { "" },
                    column.column.expr,
                    match create.using {
                        Some(IndexType::BTree) if create.unique => " USING BTREE",
                        _ => "",
                    }
                );
                self.implicit_commit()
                    .and_then(|()| self.name_of(&create.table_name))
                    .and_then(|table| self.create_index(&table, &index))
            }
            Statement::AlterTable(alter) => {
                match self
                    .implicit_commit()
                    .and_then(|()| self.name_of(&alter.name))
                {
                    Ok(table) => alter
                        .operations
                        .iter()
                        .try_for_each(|op| self.alter(&table, op)),
                    Err(e) => Err(e),
                }
            }
            _ => return None,
        };
        Some(run.map(|()| Output::Done(Done::default())))
    }

    /// The catalog name of a statement's table ([`crate::names`]).
    pub(crate) fn name_of(&self, name: &ObjectName) -> Result<String, SqlError> {
        names::of_statement(name, self.database().as_deref())
    }

    /// CREATE DATABASE (and CREATE SCHEMA), with the character set and collation its
    /// tables' text takes by default: 1007 if it exists.
    fn create_database(
        &mut self,
        name: &ObjectName,
        if_not_exists: bool,
        (charset, collate): (Option<&str>, Option<&str>),
    ) -> Result<Output, SqlError> {
        self.implicit_commit()?;
        let collation = kura_tables::collation::chosen(charset, collate)
            .map_err(collation_error)?
            .unwrap_or(Collation::DEFAULT);
        let name = names::database(&names::part(
            name.0
                .last()
                .ok_or_else(|| SqlError::syntax("CREATE DATABASE names no database"))?,
        ))
        .to_string();
        match self.shared.tables.create_database(&name, collation) {
            Ok(true) => Ok(Output::Done(Done {
                affected: 1,
                ..Done::default()
            })),
            Ok(false) if if_not_exists => Ok(Output::Done(Done::default())),
            Ok(false) => Err(SqlError::new(
                1007,
                b"HY000",
                format!("Can't create database '{name}'; database exists"),
            )),
            Err(e) => Err(ddl_error(&name, e)),
        }
    }

    /// DROP DATABASE (and DROP SCHEMA): its tables go with it; 1008 if it does not
    /// exist. Rows affected: the tables dropped, as MariaDB counts them.
    fn drop_database(&mut self, names: &[ObjectName], if_exists: bool) -> Result<Output, SqlError> {
        self.implicit_commit()?;
        let [name] = names else {
            return Err(SqlError::syntax("DROP DATABASE names one database"));
        };
        let name = names::database(&names::part(
            name.0
                .last()
                .ok_or_else(|| SqlError::syntax("DROP DATABASE names no database"))?,
        ))
        .to_string();
        let tables = {
            let catalog = self.sync_catalog()?;
            catalog.tables_in(&name).count() as u64
        };
        match self.shared.tables.drop_database(&name) {
            Ok(true) => {
                let mut state = self.shared.state.lock();
                if state.database.as_deref() == Some(name.as_str()) {
                    state.database = None;
                }
                drop(state);
                Ok(Output::Done(Done {
                    affected: tables,
                    ..Done::default()
                }))
            }
            Ok(false) if if_exists => Ok(Output::Done(Done::default())),
            Ok(false) => Err(SqlError::new(
                1008,
                b"HY000",
                format!("Can't drop database '{name}'; database doesn't exist"),
            )),
            Err(e) => Err(ddl_error(&name, e)),
        }
    }

    fn create_table(&mut self, sql: &str, name: &str, if_not_exists: bool) -> Result<(), SqlError> {
        self.implicit_commit()?;
        let catalog = self.sync_catalog()?;
        let database = kura_tables::database_of(name).0;
        if !catalog.has_database(database) {
            return Err(SqlError::no_database(database));
        }
        let exists = catalog.table(name).is_some();
        if exists && if_not_exists {
            return Ok(());
        }
        // The statement names the table alone (the current database's) or with its
        // database: `name` says which.
        match self.shared.tables.apply_schema_in(sql, database) {
            Ok(created) if created.is_empty() => Err(SqlError::table_exists(name)),
            Ok(_) => Ok(()),
            Err(kura_tables::Error::Mismatch(_)) => Err(SqlError::table_exists(name)),
            Err(kura_tables::Error::Schema(why)) => Err(schema_refusal(why)),
            Err(kura_tables::Error::Engine(kura_engine::Error::ReadOnly { primary })) => {
                Err(SqlError::read_only(&primary))
            }
            Err(e) => Err(SqlError::unsupported(e)),
        }
    }

    fn drop_tables(&mut self, names: &[ObjectName], if_exists: bool) -> Result<(), SqlError> {
        self.implicit_commit()?;
        let catalog = self.shared.tables.catalog();
        let names = names
            .iter()
            .map(|n| self.name_of(n))
            .collect::<Result<Vec<String>, SqlError>>()?;
        // MySQL drops none when one is missing.
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| catalog.table(n).is_none())
            .collect();
        if !missing.is_empty() && !if_exists {
            let list: Vec<String> = missing
                .iter()
                .map(|n| {
                    let (db, table) = kura_tables::database_of(n);
                    format!("{db}.{table}")
                })
                .collect();
            return Err(SqlError::new(
                1051,
                b"42S02",
                format!("Unknown table '{}'", list.join(",")),
            ));
        }
        for name in names {
            match self.shared.tables.drop_table(&name) {
                Ok(()) | Err(DdlError::NoTable(_)) => {}
                Err(e) => return Err(ddl_error(&name, e)),
            }
        }
        Ok(())
    }

    fn create_index(&mut self, table: &str, index: &str) -> Result<(), SqlError> {
        self.shared
            .tables
            .create_index(table, index)
            .map_err(|e| ddl_error(table, e))
    }

    fn drop_index(&mut self, table: &str, index: &str) -> Result<(), SqlError> {
        self.shared
            .tables
            .drop_index(table, index)
            .map_err(|e| ddl_error(table, e))
    }

    fn alter(&mut self, table: &str, op: &AlterTableOperation) -> Result<(), SqlError> {
        match op {
            AlterTableOperation::AddColumn {
                column_def,
                column_position: None,
                if_not_exists,
                ..
            } => {
                let catalog = self.shared.tables.catalog();
                let exists = catalog.table(table).is_some_and(|t| {
                    catalog.tables[t]
                        .table
                        .column_index(&column_def.name.value)
                        .is_some()
                });
                match exists {
                    true if *if_not_exists => Ok(()),
                    true => Err(ddl_error(
                        table,
                        DdlError::ColumnExists(column_def.name.value.clone()),
                    )),
                    false => self
                        .shared
                        .tables
                        .add_column(table, &column_def.to_string())
                        .map_err(|e| ddl_error(table, e)),
                }
            }
            AlterTableOperation::AddColumn { .. } => Err(SqlError::unsupported(
                "ADD COLUMN ... FIRST or AFTER: a new column comes last",
            )),
            AlterTableOperation::AddConstraint { constraint, .. } => {
                self.create_index(table, &constraint.to_string())
            }
            AlterTableOperation::DropIndex { name } => self.drop_index(table, &name.value),
            AlterTableOperation::DropColumn {
                column_names,
                if_exists,
                ..
            } => {
                for column in column_names {
                    let dropped = self
                        .shared
                        .tables
                        .drop_column(table, &column.value)
                        .map_err(|e| ddl_error(table, e))?;
                    if !dropped && !*if_exists {
                        return Err(SqlError::new(
                            1091,
                            b"42000",
                            format!("Can't DROP COLUMN `{}`; check that it exists", column.value),
                        ));
                    }
                }
                Ok(())
            }
            AlterTableOperation::RenameColumn {
                old_column_name,
                new_column_name,
            } => self
                .shared
                .tables
                .rename_column(table, &old_column_name.value, &new_column_name.value)
                .map_err(|e| ddl_error(table, e)),
            AlterTableOperation::ChangeColumn {
                old_name,
                new_name,
                data_type,
                options,
                column_position: None,
            } => self.change_column(table, &old_name.value, new_name, data_type, options),
            AlterTableOperation::ModifyColumn {
                col_name,
                data_type,
                options,
                column_position: None,
            } => self.change_column(table, &col_name.value, col_name, data_type, options),
            AlterTableOperation::ChangeColumn { .. } | AlterTableOperation::ModifyColumn { .. } => {
                Err(SqlError::unsupported(
                    "CHANGE or MODIFY COLUMN ... FIRST or AFTER: a column keeps its place",
                ))
            }
            other => Err(SqlError::unsupported(format!("ALTER TABLE ... {other}"))),
        }
    }
}

impl Session {
    /// CHANGE or MODIFY COLUMN `old` to `name type options`.
    fn change_column(
        &mut self,
        table: &str,
        old: &str,
        name: &sqlparser::ast::Ident,
        data_type: &sqlparser::ast::DataType,
        options: &[sqlparser::ast::ColumnOption],
    ) -> Result<(), SqlError> {
        let mut column = format!("{name} {data_type}");
        for option in options {
            column.push(' ');
            column.push_str(&option.to_string());
        }
        self.shared
            .tables
            .change_column(table, old, &column)
            .map_err(|e| ddl_error(table, e))
    }
}

/// A table's definition refused: MySQL's error where it has one for the reason, else
/// 1235 with the reason.
fn schema_refusal(why: String) -> SqlError {
    if why == kura_tables::AUTO_KEY_REASON {
        return SqlError::new(1075, b"42000", why);
    }
    if kura_tables::collation::refusal_code(&why).is_some() {
        return collation_error(why);
    }
    if let Some(rest) = why.strip_prefix(kura_tables::INVALID_DEFAULT) {
        let column = rest.split_once('\'').map_or(rest, |(c, _)| c);
        return SqlError::new(
            1067,
            b"42000",
            format!("Invalid default value for '{column}'"),
        );
    }
    for (start, code) in [
        ("Too big scale ", 1425),
        ("Too big precision ", 1426),
        ("For float(M,D), double(M,D) or decimal(M,D)", 1427),
    ] {
        if why.starts_with(start) {
            return SqlError::new(code, b"42000", why);
        }
    }
    if why.starts_with("Column '") && why.ends_with(kura_tables::DUPLICATED_MEMBER) {
        return SqlError::new(1291, b"HY000", why);
    }
    if why.contains(kura_tables::seal::MOVING_DDL) {
        // The move holds the table as MySQL's metadata lock would.
        return SqlError::new(
            1205,
            b"HY000",
            format!("Lock wait timeout exceeded; try restarting transaction ({why})"),
        );
    }
    SqlError::unsupported(why)
}

/// A collation or character set refused: MySQL's error for it.
fn collation_error(why: String) -> SqlError {
    let code = kura_tables::collation::refusal_code(&why).unwrap_or(1273);
    SqlError::new(code, b"HY000", why)
}

/// The table layer's refusal as MySQL's error.
fn ddl_error(table: &str, e: DdlError) -> SqlError {
    match e {
        DdlError::NoTable(name) => names::no_table(&name),
        DdlError::NoColumn(name) => SqlError::new(
            1054,
            b"42S22",
            format!("Unknown column '{name}' in '{table}'"),
        ),
        DdlError::NullInColumn(_) => SqlError::new(1138, b"22004", "Invalid use of NULL value"),
        DdlError::ColumnExists(name) => {
            SqlError::new(1060, b"42S21", format!("Duplicate column name '{name}'"))
        }
        DdlError::IndexExists(name) => {
            SqlError::new(1061, b"42000", format!("Duplicate key name '{name}'"))
        }
        DdlError::Duplicate { index, value } => SqlError::duplicate(&value, table, &index),
        DdlError::NoIndex(name) => SqlError::new(
            1091,
            b"42000",
            format!("Can't DROP '{name}'; check that column/key exists"),
        ),
        DdlError::TableExists(name) => SqlError::table_exists(kura_tables::database_of(&name).1),
        DdlError::Refused(why) if why.starts_with("Unknown database '") => {
            SqlError::new(1049, b"42000", why)
        }
        DdlError::Refused(why) => schema_refusal(why),
        DdlError::Failed(kura_tables::Error::Engine(kura_engine::Error::ReadOnly { primary })) => {
            SqlError::read_only(&primary)
        }
        DdlError::Failed(e) => SqlError::internal(e),
    }
}
