//! The engine's operating errors. Programmer errors are assertions, not variants here.

use std::fmt;
use std::io;

/// An operating error of the engine.
#[derive(Debug)]
pub enum Error {
    /// The operating system refused a file operation.
    Io(io::Error),
    /// An earlier write or fsync failed; changes are refused until restart, because what
    /// the log holds after a failed fsync is unknown.
    Poisoned,
    /// The data directory holds something this version cannot read.
    Format(String),
    /// Another process holds the data directory.
    Locked,
    /// The log spans as many segments as the index can address; compaction must
    /// remove the oldest before more can be written.
    LogFull,
    /// A change sent to a replica: only its primary (named) takes changes.
    ReadOnly { primary: String },
    /// A change sent to a cluster's primary whose lease (its right to take changes)
    /// may have ended by its own clock ([`crate::Store::set_writable_until`]).
    LeaseEnded,
    /// A key longer than a log record can hold (255 bytes).
    KeyTooLong { len: usize },
    /// A change (a batch, with its records) of `bytes`, more than the `limit` one log
    /// segment can address: a batch is written to one segment, whole.
    TooLarge { bytes: u64, limit: u64 },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "I/O error: {e}"),
            Error::Poisoned => write!(f, "store refuses writes after a failed write or fsync"),
            Error::Format(why) => write!(f, "unreadable data directory: {why}"),
            Error::Locked => write!(f, "data directory is locked by another process"),
            Error::ReadOnly { primary } => {
                write!(
                    f,
                    "this server is a replica of {primary}; send changes there"
                )
            }
            Error::LeaseEnded => write!(
                f,
                "not the primary: its lease ended; the shard elects another, try again"
            ),
            Error::LogFull => write!(f, "the log spans the most segments the index addresses"),
            Error::TooLarge { bytes, limit } => write!(
                f,
                "a change of {bytes} bytes is more than the {limit} one log segment holds"
            ),
            Error::KeyTooLong { len } => {
                write!(
                    f,
                    "a key of {len} bytes is longer than the 255 a record holds"
                )
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}
