//! The tables layer's operating errors. Each says what was wrong in words a client can
//! be shown: the server sends a bad value's reason after `CLIENT_ERROR`, and a bad
//! schema's reason when `kura --schema` refuses to start.

use std::fmt;

/// An operating error of the tables layer.
#[derive(Debug)]
pub enum Error {
    /// A schema file or statement that is not a table Kura can keep.
    Schema(String),
    /// A value, field or key that does not fit its table: the client's mistake.
    Value(String),
    /// A table the schema declares exists with another definition.
    Mismatch(String),
    /// Bytes read back from the log that do not decode: corruption or a bug.
    Format(String),
    /// The engine failed (a poisoned log, an I/O error).
    Engine(kura_engine::Error),
    /// The row's table (named) is being handed to another shard: nothing was done.
    Moving(String),
}

impl PartialEq for Error {
    /// Equal if of one kind with one reason; engine errors compare by what they say.
    fn eq(&self, other: &Error) -> bool {
        match (self, other) {
            (Error::Schema(a), Error::Schema(b))
            | (Error::Value(a), Error::Value(b))
            | (Error::Mismatch(a), Error::Mismatch(b))
            | (Error::Format(a), Error::Format(b))
            | (Error::Moving(a), Error::Moving(b)) => a == b,
            (Error::Engine(a), Error::Engine(b)) => a.to_string() == b.to_string(),
            _ => false,
        }
    }
}

impl From<kura_engine::Error> for Error {
    fn from(e: kura_engine::Error) -> Error {
        Error::Engine(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Schema(why) | Error::Value(why) | Error::Mismatch(why) => f.write_str(why),
            Error::Format(why) => write!(f, "undecodable table data: {why}"),
            Error::Engine(e) => e.fmt(f),
            Error::Moving(table) => write!(
                f,
                "table {table} is being handed to another shard; try again"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Shorthand for a [`Error::Value`] with a formatted reason.
macro_rules! value_error {
    ($($arg:tt)*) => { $crate::error::Error::Value(format!($($arg)*)) };
}

/// Shorthand for a [`Error::Schema`] with a formatted reason.
macro_rules! schema_error {
    ($($arg:tt)*) => { $crate::error::Error::Schema(format!($($arg)*)) };
}

pub(crate) use {schema_error, value_error};
