//! Errors as MySQL reports them: a code, a SQLSTATE and a message, so a client's error
//! handling (and an ORM's retry on a deadlock) works as it does against MySQL.

use std::fmt;

/// What [`SqlError::moving_table`] says of the table.
const MOVING: &str = "the table is being handed to another shard";

/// A statement's failure, in MySQL's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    pub code: u16,
    pub state: [u8; 5],
    pub message: String,
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ERROR {} ({}): {}",
            self.code,
            String::from_utf8_lossy(&self.state),
            self.message
        )
    }
}

impl std::error::Error for SqlError {}

impl SqlError {
    pub fn new(code: u16, state: &[u8; 5], message: impl Into<String>) -> SqlError {
        SqlError {
            code,
            state: *state,
            message: message.into(),
        }
    }

    /// 1064 ER_PARSE_ERROR.
    pub fn syntax(message: impl fmt::Display) -> SqlError {
        SqlError::new(
            1064,
            b"42000",
            format!("You have an error in your SQL syntax: {message}"),
        )
    }

    /// 1146 ER_NO_SUCH_TABLE.
    pub fn no_table(db: &str, table: &str) -> SqlError {
        SqlError::new(
            1146,
            b"42S02",
            format!("Table '{db}.{table}' doesn't exist"),
        )
    }

    /// 1054 ER_BAD_FIELD_ERROR.
    pub fn no_column(column: &str, place: &str) -> SqlError {
        SqlError::new(
            1054,
            b"42S22",
            format!("Unknown column '{column}' in '{place}'"),
        )
    }

    /// 1062 ER_DUP_ENTRY, as MySQL 8 words it.
    /// 1062 for `table` (a catalog name: the table is named alone, as MySQL names it).
    pub fn duplicate(value: &str, table: &str, index: &str) -> SqlError {
        let table = kura_tables::database_of(table).1;
        SqlError::new(
            1062,
            b"23000",
            format!("Duplicate entry '{value}' for key '{table}.{index}'"),
        )
    }

    /// 1048 ER_BAD_NULL_ERROR.
    pub fn null(column: &str) -> SqlError {
        SqlError::new(1048, b"23000", format!("Column '{column}' cannot be null"))
    }

    /// 1264 ER_WARN_DATA_OUT_OF_RANGE (an error in strict mode).
    pub fn out_of_range(column: &str, row: u64) -> SqlError {
        SqlError::new(
            1264,
            b"22003",
            format!("Out of range value for column '{column}' at row {row}"),
        )
    }

    /// 1406 ER_DATA_TOO_LONG.
    pub fn too_long(column: &str, row: u64) -> SqlError {
        SqlError::new(
            1406,
            b"22001",
            format!("Data too long for column '{column}' at row {row}"),
        )
    }

    /// 1265 WARN_DATA_TRUNCATED, an error in strict mode: a value that is no member
    /// of an ENUM.
    pub fn truncated(column: &str, row: u64) -> SqlError {
        SqlError::new(
            1265,
            b"01000",
            format!("Data truncated for column '{column}' at row {row}"),
        )
    }

    /// 1366 ER_TRUNCATED_WRONG_VALUE_FOR_FIELD.
    pub fn bad_value(kind: &str, value: &str, column: &str, row: u64) -> SqlError {
        SqlError::new(
            1366,
            b"HY000",
            format!("Incorrect {kind} value: '{value}' for column '{column}' at row {row}"),
        )
    }

    /// 1213 ER_LOCK_DEADLOCK: what MySQL says when a transaction lost a race and was
    /// rolled back; drivers and ORMs retry on it.
    /// 1412 ER_TABLE_DEF_CHANGED for a statement of its own whose table was being
    /// handed to another shard (issue 42); nothing was done. A cluster node makes it
    /// again where the table is once the hand-off ends ([`SqlError::is_moving_table`]).
    pub fn moving_table(table: &str) -> SqlError {
        SqlError::new(
            1412,
            b"HY000",
            format!("Table definition has changed, please retry transaction ({MOVING}: {table})"),
        )
    }

    /// 1213 for a transaction whose table was handed to another shard under it: the
    /// transaction is rolled back, as after a deadlock, to be run again where the
    /// table is now.
    pub fn moved_table(table: &str) -> SqlError {
        SqlError::new(
            1213,
            b"40001",
            format!("Deadlock found when trying to get lock; try restarting transaction (table {table} was handed to another shard)"),
        )
    }

    /// Whether this is [`SqlError::moving_table`]'s refusal.
    pub fn is_moving_table(&self) -> bool {
        self.code == 1412 && self.message.contains(MOVING)
    }

    pub fn conflict() -> SqlError {
        SqlError::new(
            1213,
            b"40001",
            "Deadlock found when trying to get lock; try restarting transaction",
        )
    }

    /// 1290 ER_OPTION_PREVENTS_STATEMENT: MySQL's answer to a change (rows or DDL) on
    /// a server started with --read-only; Kura's replicas answer it, naming their
    /// primary.
    pub fn read_only(primary: &str) -> SqlError {
        SqlError::new(
            1290,
            b"HY000",
            format!(
                "The MySQL server is running with the --read-only option so it cannot \
                 execute this statement (a replica of {primary}; send changes there)"
            ),
        )
    }

    /// 1235 ER_NOT_SUPPORTED_YET.
    pub fn unsupported(what: impl fmt::Display) -> SqlError {
        SqlError::new(
            1235,
            b"42000",
            format!("This version of Kura doesn't yet support '{what}'"),
        )
    }

    /// 1049 ER_BAD_DB_ERROR.
    pub fn no_database(db: &str) -> SqlError {
        SqlError::new(1049, b"42000", format!("Unknown database '{db}'"))
    }

    /// 1046 ER_NO_DB_ERROR.
    pub fn no_database_selected() -> SqlError {
        SqlError::new(1046, b"3D000", "No database selected")
    }

    /// 1050 ER_TABLE_EXISTS_ERROR.
    pub fn table_exists(table: &str) -> SqlError {
        SqlError::new(1050, b"42S01", format!("Table '{table}' already exists"))
    }

    /// 1105 ER_UNKNOWN_ERROR: a failure inside Kura (the log, the disk).
    pub fn internal(message: impl fmt::Display) -> SqlError {
        SqlError::new(1105, b"HY000", message.to_string())
    }

    /// 1193 ER_UNKNOWN_SYSTEM_VARIABLE.
    pub fn unknown_variable(name: &str) -> SqlError {
        SqlError::new(1193, b"HY000", format!("Unknown system variable '{name}'"))
    }

    /// 1210 ER_WRONG_ARGUMENTS (a prepared statement's parameters).
    pub fn wrong_arguments(what: &str) -> SqlError {
        SqlError::new(1210, b"HY000", format!("Incorrect arguments to {what}"))
    }

    /// 1243 ER_UNKNOWN_STMT_HANDLER.
    pub fn unknown_statement(id: u32, what: &str) -> SqlError {
        SqlError::new(
            1243,
            b"HY000",
            format!("Unknown prepared statement handler ({id}) given to {what}"),
        )
    }

    /// 1290 ER_OPTION_PREVENTS_STATEMENT, for writes Kura refuses.
    pub fn refused(message: impl Into<String>) -> SqlError {
        SqlError::new(1290, b"HY000", message)
    }
}
