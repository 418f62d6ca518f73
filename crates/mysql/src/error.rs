//! Protocol errors: every way a client's bytes, or a row the server hands in,
//! can be refused by this crate, each mapped onto the MySQL error the server
//! should answer with ([`ProtocolError::code`], [`ProtocolError::sqlstate`],
//! [`ProtocolError::err_packet`]).
//!
//! Not for errors that need server state (unknown statement id, access
//! denied, unknown table): the server writes those with [`crate::err`] and the
//! codes in [`crate::ErrorCode`].
//!
//! Invariant: an error found while reading a packet's framing
//! ([`ProtocolError::TooLarge`], [`ProtocolError::PacketsOutOfOrder`]) leaves
//! the [`crate::PacketReader`] mid-stream; the server answers and closes the
//! connection, as MySQL does. Errors found inside one whole packet leave the
//! connection usable.

use std::fmt;

use crate::codes::ErrorCode;

/// A packet, or a value, this crate refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtocolError {
    /// The packet ended before `what` was complete.
    Truncated { what: &'static str },
    /// `what` is present but not what the protocol allows (a user name that is
    /// not UTF-8, a length that runs past the packet, …).
    Malformed { what: &'static str },
    /// A logical packet (all its frames) is larger than the reader's limit;
    /// `bytes` is what its frame headers announced so far.
    TooLarge { bytes: usize, max_bytes: usize },
    /// A continuation frame did not carry the next sequence id.
    PacketsOutOfOrder { expected: u8, got: u8 },
    /// The client sent an SSLRequest (or set `CLIENT_SSL`): it wants TLS,
    /// which this server does not offer yet.
    TlsRequested,
    /// The client does not speak protocol 4.1 (`CLIENT_PROTOCOL_41` unset);
    /// MySQL 8 refuses such clients too.
    OldClient,
    /// COM_STMT_EXECUTE named a parameter type MySQL clients never send
    /// (or that is not a type at all).
    UnknownParamType(u8),
    /// COM_STMT_EXECUTE said "types as before" but no execution of this
    /// statement has sent them yet.
    MissingParamTypes,
    /// A row's value count differs from its column count.
    ColumnCountMismatch { columns: usize, values: usize },
    /// A row value cannot be sent as its column's type (a string in an
    /// integer column, a number in a DATE column, …).
    ValueTypeMismatch { column: usize },
    /// An integer row value does not fit its column's binary width.
    ValueOutOfRange { column: usize },
    /// A DATE/DATETIME/TIMESTAMP/TIME row value is not in MySQL's text form.
    BadTemporalValue { column: usize },
    /// A column type that never appears in a result set's column definitions
    /// (the binlog-only `TIMESTAMP2`, `DATETIME2`, `TIME2`, …).
    UnsupportedColumnType(u8),
}

impl ProtocolError {
    /// The MySQL error this refusal is answered with.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            Self::Truncated { .. } | Self::Malformed { .. } => ErrorCode::MALFORMED_PACKET,
            Self::TooLarge { .. } => ErrorCode::NET_PACKET_TOO_LARGE,
            Self::PacketsOutOfOrder { .. } => ErrorCode::NET_PACKETS_OUT_OF_ORDER,
            Self::TlsRequested => ErrorCode::HANDSHAKE_ERROR,
            Self::OldClient => ErrorCode::NOT_SUPPORTED_AUTH_MODE,
            Self::UnknownParamType(_) | Self::MissingParamTypes => ErrorCode::WRONG_ARGUMENTS,
            Self::ColumnCountMismatch { .. }
            | Self::ValueTypeMismatch { .. }
            | Self::BadTemporalValue { .. }
            | Self::UnsupportedColumnType(_) => ErrorCode::UNKNOWN_ERROR,
            Self::ValueOutOfRange { .. } => ErrorCode::WARN_DATA_OUT_OF_RANGE,
        }
    }

    /// The MySQL error number, e.g. 1835 for a malformed packet.
    pub fn code(&self) -> u16 {
        self.error_code().code
    }

    /// The five-character SQLSTATE that goes with [`ProtocolError::code`].
    pub fn sqlstate(&self) -> &'static [u8; 5] {
        self.error_code().sqlstate
    }

    /// The ERR packet payload the server sends for this error.
    pub fn err_packet(&self) -> Vec<u8> {
        crate::err(self.code(), self.sqlstate(), &self.to_string())
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { what } => {
                write!(f, "Malformed communication packet: {what} is truncated")
            }
            Self::Malformed { what } => write!(f, "Malformed communication packet: bad {what}"),
            Self::TooLarge { bytes, max_bytes } => write!(
                f,
                "Got a packet bigger than 'max_allowed_packet' bytes ({bytes} > {max_bytes})"
            ),
            Self::PacketsOutOfOrder { expected, got } => write!(
                f,
                "Got packets out of order (sequence id {got}, expected {expected})"
            ),
            Self::TlsRequested => write!(f, "TLS is not supported by this server"),
            Self::OldClient => write!(
                f,
                "Client does not support authentication protocol requested by server; \
                 consider upgrading MySQL client"
            ),
            Self::UnknownParamType(ty) => write!(
                f,
                "Incorrect arguments to mysqld_stmt_execute (unknown parameter type {ty})"
            ),
            Self::MissingParamTypes => write!(
                f,
                "Incorrect arguments to mysqld_stmt_execute (parameter types never sent)"
            ),
            Self::ColumnCountMismatch { columns, values } => {
                write!(f, "row has {values} values for {columns} columns")
            }
            Self::ValueTypeMismatch { column } => {
                write!(
                    f,
                    "value of column {column} does not match the column's type"
                )
            }
            Self::ValueOutOfRange { column } => {
                write!(f, "Out of range value for column {column}")
            }
            Self::BadTemporalValue { column } => write!(
                f,
                "value of column {column} is not a MySQL date, datetime or time"
            ),
            Self::UnsupportedColumnType(ty) => {
                write!(f, "column type {ty} cannot be sent in a result set")
            }
        }
    }
}

impl std::error::Error for ProtocolError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(error: ProtocolError, code: u16, sqlstate: &[u8; 5], message: &str) {
        assert_eq!(error.code(), code, "{error:?}");
        assert_eq!(error.sqlstate(), sqlstate, "{error:?}");
        assert_eq!(error.to_string(), message);
        let packet = error.err_packet();
        assert_eq!(packet[0], 0xff);
        assert_eq!(u16::from_le_bytes([packet[1], packet[2]]), code);
        assert_eq!(&packet[3..4], b"#");
        assert_eq!(&packet[4..9], sqlstate);
        assert_eq!(&packet[9..], message.as_bytes());
    }

    #[test]
    fn errors_map_to_mysql_codes() {
        check(
            ProtocolError::Truncated {
                what: "COM_STMT_CLOSE",
            },
            1835,
            b"HY000",
            "Malformed communication packet: COM_STMT_CLOSE is truncated",
        );
        check(
            ProtocolError::Malformed { what: "user name" },
            1835,
            b"HY000",
            "Malformed communication packet: bad user name",
        );
        check(
            ProtocolError::TooLarge {
                bytes: 20,
                max_bytes: 10,
            },
            1153,
            b"08S01",
            "Got a packet bigger than 'max_allowed_packet' bytes (20 > 10)",
        );
        check(
            ProtocolError::PacketsOutOfOrder {
                expected: 1,
                got: 5,
            },
            1156,
            b"08S01",
            "Got packets out of order (sequence id 5, expected 1)",
        );
        check(
            ProtocolError::TlsRequested,
            1043,
            b"08S01",
            "TLS is not supported by this server",
        );
        check(
            ProtocolError::OldClient,
            1251,
            b"08004",
            "Client does not support authentication protocol requested by server; \
             consider upgrading MySQL client",
        );
        check(
            ProtocolError::UnknownParamType(17),
            1210,
            b"HY000",
            "Incorrect arguments to mysqld_stmt_execute (unknown parameter type 17)",
        );
        check(
            ProtocolError::MissingParamTypes,
            1210,
            b"HY000",
            "Incorrect arguments to mysqld_stmt_execute (parameter types never sent)",
        );
        check(
            ProtocolError::ColumnCountMismatch {
                columns: 2,
                values: 3,
            },
            1105,
            b"HY000",
            "row has 3 values for 2 columns",
        );
        check(
            ProtocolError::ValueTypeMismatch { column: 1 },
            1105,
            b"HY000",
            "value of column 1 does not match the column's type",
        );
        check(
            ProtocolError::ValueOutOfRange { column: 0 },
            1264,
            b"22003",
            "Out of range value for column 0",
        );
        check(
            ProtocolError::BadTemporalValue { column: 4 },
            1105,
            b"HY000",
            "value of column 4 is not a MySQL date, datetime or time",
        );
        check(
            ProtocolError::UnsupportedColumnType(18),
            1105,
            b"HY000",
            "column type 18 cannot be sent in a result set",
        );
    }
}
