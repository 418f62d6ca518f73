//! MySQL error numbers with their SQLSTATEs, for the errors a Kura server
//! answers with. Clients branch on these (PyMySQL maps 1045 to
//! `OperationalError`, 1062 to `IntegrityError`, 1064 to `ProgrammingError`),
//! so the pair must be MySQL's own, not a close match.
//!
//! Not the message texts: MySQL's are format strings with arguments the
//! server fills in (`Access denied for user 'bob'@'host' (using password:
//! YES)`); the server writes the message and [`ErrorCode::packet`] frames it.
//!
//! Values are from MySQL 8.0's `mysqld_error.h` and `sql_state.h`.

/// A MySQL error number and the SQLSTATE MySQL pairs with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode {
    pub code: u16,
    pub sqlstate: &'static [u8; 5],
}

impl ErrorCode {
    /// `ER_CON_COUNT_ERROR`: "Too many connections".
    pub const CON_COUNT: Self = Self::new(1040, b"08004");
    /// `ER_HANDSHAKE_ERROR`: "Bad handshake".
    pub const HANDSHAKE_ERROR: Self = Self::new(1043, b"08S01");
    /// `ER_DBACCESS_DENIED_ERROR`: "Access denied for user '%s'@'%s' to database '%s'".
    pub const DB_ACCESS_DENIED: Self = Self::new(1044, b"42000");
    /// `ER_ACCESS_DENIED_ERROR`: "Access denied for user '%s'@'%s' (using password: %s)".
    pub const ACCESS_DENIED: Self = Self::new(1045, b"28000");
    /// `ER_NO_DB_ERROR`: "No database selected".
    pub const NO_DB: Self = Self::new(1046, b"3D000");
    /// `ER_UNKNOWN_COM_ERROR`: "Unknown command".
    pub const UNKNOWN_COM: Self = Self::new(1047, b"08S01");
    /// `ER_BAD_NULL_ERROR`: "Column '%s' cannot be null".
    pub const BAD_NULL: Self = Self::new(1048, b"23000");
    /// `ER_BAD_DB_ERROR`: "Unknown database '%s'".
    pub const BAD_DB: Self = Self::new(1049, b"42000");
    /// `ER_TABLE_EXISTS_ERROR`: "Table '%s' already exists".
    pub const TABLE_EXISTS: Self = Self::new(1050, b"42S01");
    /// `ER_BAD_TABLE_ERROR`: "Unknown table '%s'".
    pub const BAD_TABLE: Self = Self::new(1051, b"42S02");
    /// `ER_BAD_FIELD_ERROR`: "Unknown column '%s' in '%s'".
    pub const BAD_FIELD: Self = Self::new(1054, b"42S22");
    /// `ER_DUP_ENTRY`: "Duplicate entry '%s' for key '%s'".
    pub const DUP_ENTRY: Self = Self::new(1062, b"23000");
    /// `ER_PARSE_ERROR`: "%s near '%s' at line %d".
    pub const PARSE_ERROR: Self = Self::new(1064, b"42000");
    /// `ER_EMPTY_QUERY`: "Query was empty".
    pub const EMPTY_QUERY: Self = Self::new(1065, b"42000");
    /// `ER_UNKNOWN_ERROR`: "Unknown error".
    pub const UNKNOWN_ERROR: Self = Self::new(1105, b"HY000");
    /// `ER_WRONG_VALUE_COUNT_ON_ROW`: "Column count doesn't match value count at row %ld".
    pub const WRONG_VALUE_COUNT_ON_ROW: Self = Self::new(1136, b"21S01");
    /// `ER_NO_SUCH_TABLE`: "Table '%s.%s' doesn't exist".
    pub const NO_SUCH_TABLE: Self = Self::new(1146, b"42S02");
    /// `ER_NET_PACKET_TOO_LARGE`: "Got a packet bigger than 'max_allowed_packet' bytes".
    pub const NET_PACKET_TOO_LARGE: Self = Self::new(1153, b"08S01");
    /// `ER_NET_PACKETS_OUT_OF_ORDER`: "Got packets out of order".
    pub const NET_PACKETS_OUT_OF_ORDER: Self = Self::new(1156, b"08S01");
    /// `ER_LOCK_WAIT_TIMEOUT`: "Lock wait timeout exceeded; try restarting transaction".
    pub const LOCK_WAIT_TIMEOUT: Self = Self::new(1205, b"HY000");
    /// `ER_WRONG_ARGUMENTS`: "Incorrect arguments to %s".
    pub const WRONG_ARGUMENTS: Self = Self::new(1210, b"HY000");
    /// `ER_LOCK_DEADLOCK`: "Deadlock found when trying to get lock; try restarting transaction".
    pub const LOCK_DEADLOCK: Self = Self::new(1213, b"40001");
    /// `ER_NOT_SUPPORTED_YET`: "This version of MySQL doesn't yet support '%s'".
    pub const NOT_SUPPORTED_YET: Self = Self::new(1235, b"42000");
    /// `ER_UNKNOWN_STMT_HANDLER`: "Unknown prepared statement handler (%.*s) given to %s".
    pub const UNKNOWN_STMT_HANDLER: Self = Self::new(1243, b"HY000");
    /// `ER_NOT_SUPPORTED_AUTH_MODE`: "Client does not support authentication protocol
    /// requested by server; consider upgrading MySQL client".
    pub const NOT_SUPPORTED_AUTH_MODE: Self = Self::new(1251, b"08004");
    /// `ER_WARN_DATA_OUT_OF_RANGE`: "Out of range value for column '%s' at row %ld".
    pub const WARN_DATA_OUT_OF_RANGE: Self = Self::new(1264, b"22003");
    /// `ER_OPTION_PREVENTS_STATEMENT`: "The MySQL server is running with the %s option
    /// so it cannot execute this statement" (e.g. `--read-only`).
    pub const OPTION_PREVENTS_STATEMENT: Self = Self::new(1290, b"HY000");
    /// `ER_UNSUPPORTED_PS`: "This command is not supported in the prepared statement
    /// protocol yet".
    pub const UNSUPPORTED_PS: Self = Self::new(1295, b"HY000");
    /// `ER_QUERY_INTERRUPTED`: "Query execution was interrupted".
    pub const QUERY_INTERRUPTED: Self = Self::new(1317, b"70100");
    /// `ER_MALFORMED_PACKET`: "Malformed communication packet.".
    pub const MALFORMED_PACKET: Self = Self::new(1835, b"HY000");

    const fn new(code: u16, sqlstate: &'static [u8; 5]) -> Self {
        Self { code, sqlstate }
    }

    /// The ERR packet payload for this error with `message`.
    pub fn packet(&self, message: &str) -> Vec<u8> {
        crate::err(self.code, self.sqlstate, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_carries_code_and_state() {
        let packet = ErrorCode::ACCESS_DENIED.packet("Access denied");
        assert_eq!(packet, b"\xff\x15\x04#28000Access denied");
    }
}
