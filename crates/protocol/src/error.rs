//! Protocol errors: every way a request can be refused before it reaches the
//! store, each mapped one-to-one onto memcached 1.6.18's wire reply.
//!
//! Not for errors that depend on stored data (`CLIENT_ERROR cannot increment or
//! decrement non-numeric value`) or on server state (`SERVER_ERROR out of
//! memory…`, `ERROR: shutdown not enabled`): the server writes those with
//! [`crate::response`].
//!
//! Invariant: [`ProtocolError::reply_bytes`] is the exact reply memcached writes,
//! `\r\n` included, and `Display` is the same text without `\r\n`. The two
//! variants that make memcached drop the connection without a reply have an
//! empty reply and a descriptive `Display` for logs.

use std::fmt;

/// A request memcached refuses, named after the reply it gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProtocolError {
    /// `ERROR`: unknown command, empty line, or the wrong number of tokens.
    UnknownCommand,
    /// `CLIENT_ERROR bad command line format`: key too long, a malformed number
    /// in a storage command, a bad meta key, …
    BadCommandLineFormat,
    /// `CLIENT_ERROR bad data chunk`: the data block did not end in `\r\n`.
    BadDataChunk,
    /// `SERVER_ERROR object too large for cache`: the item would exceed
    /// [`crate::Limits::item_size_max_bytes`].
    ObjectTooLarge,
    /// `CLIENT_ERROR invalid exptime argument` (touch, gat, flush_all).
    InvalidExptime,
    /// `CLIENT_ERROR invalid numeric delta argument` (incr, decr).
    InvalidDelta,
    /// `CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]`.
    DeleteUsage,
    /// `CLIENT_ERROR invalid flag`: a meta flag memcached does not know.
    InvalidFlag,
    /// `CLIENT_ERROR duplicate flag`: a meta flag given twice (or a flag byte
    /// of 127 or more).
    DuplicateFlag,
    /// `CLIENT_ERROR bad token in command line format`: a bad number in a
    /// meta `N`, `T`, `R` or `C` flag.
    BadToken,
    /// `CLIENT_ERROR error decoding key`: the `b` flag's key is not base64.
    KeyDecode,
    /// `CLIENT_ERROR incorrect length for M token`.
    ModeTokenLength,
    /// `CLIENT_ERROR invalid numeric initial value` (meta `J`).
    InvalidInitial,
    /// `CLIENT_ERROR invalid numeric delta value` (meta `D`).
    InvalidDeltaValue,
    /// `CLIENT_ERROR opaque token too long`: `O` token longer than 32 bytes,
    /// the `O` included.
    OpaqueTooLong,
    /// `CLIENT_ERROR options flags are too long` (mg's wording).
    MetaGetOptionsTooLong,
    /// `CLIENT_ERROR options flags too long` (ms, md, ma).
    OptionsTooLong,
    /// `CLIENT_ERROR invalid or duplicate flag`: md and ma report every flag
    /// error with this text.
    InvalidOrDuplicateFlag,
    /// `CLIENT_ERROR invalid mode for ms M token`.
    InvalidSetMode,
    /// `CLIENT_ERROR invalid mode for ma M token`.
    InvalidArithmeticMode,
    /// No reply, connection closed: more than 2048 bytes without a newline
    /// (16384 with one) that do not start a `get`/`gets` multi-get.
    LineTooLong,
    /// No reply, connection closed: an unknown command whose last token starts
    /// with `HTTP/`, i.e. someone speaking HTTP to the cache port.
    HttpRequest,
}

impl ProtocolError {
    /// The exact bytes memcached replies with, `\r\n` included; empty for the
    /// errors that close the connection without a reply.
    pub fn reply_bytes(&self) -> &'static [u8] {
        match self {
            Self::UnknownCommand => b"ERROR\r\n",
            Self::BadCommandLineFormat => b"CLIENT_ERROR bad command line format\r\n",
            Self::BadDataChunk => b"CLIENT_ERROR bad data chunk\r\n",
            Self::ObjectTooLarge => b"SERVER_ERROR object too large for cache\r\n",
            Self::InvalidExptime => b"CLIENT_ERROR invalid exptime argument\r\n",
            Self::InvalidDelta => b"CLIENT_ERROR invalid numeric delta argument\r\n",
            Self::DeleteUsage => {
                b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
            }
            Self::InvalidFlag => b"CLIENT_ERROR invalid flag\r\n",
            Self::DuplicateFlag => b"CLIENT_ERROR duplicate flag\r\n",
            Self::BadToken => b"CLIENT_ERROR bad token in command line format\r\n",
            Self::KeyDecode => b"CLIENT_ERROR error decoding key\r\n",
            Self::ModeTokenLength => b"CLIENT_ERROR incorrect length for M token\r\n",
            Self::InvalidInitial => b"CLIENT_ERROR invalid numeric initial value\r\n",
            Self::InvalidDeltaValue => b"CLIENT_ERROR invalid numeric delta value\r\n",
            Self::OpaqueTooLong => b"CLIENT_ERROR opaque token too long\r\n",
            Self::MetaGetOptionsTooLong => b"CLIENT_ERROR options flags are too long\r\n",
            Self::OptionsTooLong => b"CLIENT_ERROR options flags too long\r\n",
            Self::InvalidOrDuplicateFlag => b"CLIENT_ERROR invalid or duplicate flag\r\n",
            Self::InvalidSetMode => b"CLIENT_ERROR invalid mode for ms M token\r\n",
            Self::InvalidArithmeticMode => b"CLIENT_ERROR invalid mode for ma M token\r\n",
            Self::LineTooLong | Self::HttpRequest => b"",
        }
    }

    /// Whether memcached closes the connection instead of replying.
    pub fn closes_connection(&self) -> bool {
        matches!(self, Self::LineTooLong | Self::HttpRequest)
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text: &str = match self {
            Self::LineTooLong => "line too long without a newline (connection closed)",
            Self::HttpRequest => "HTTP request on the memcached port (connection closed)",
            _ => {
                let reply = self.reply_bytes();
                let line = reply.strip_suffix(b"\r\n").unwrap_or(reply);
                // Every reply above is ASCII.
                std::str::from_utf8(line).unwrap_or("ERROR")
            }
        };
        formatter.write_str(text)
    }
}

impl std::error::Error for ProtocolError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(error: ProtocolError, expected: &str) {
        assert_eq!(error.to_string(), expected);
        if error.closes_connection() {
            assert!(error.reply_bytes().is_empty());
        } else {
            assert_eq!(error.reply_bytes(), format!("{expected}\r\n").as_bytes());
        }
    }

    #[test]
    fn display_is_the_wire_text() {
        check(ProtocolError::UnknownCommand, "ERROR");
        check(
            ProtocolError::BadCommandLineFormat,
            "CLIENT_ERROR bad command line format",
        );
        check(ProtocolError::BadDataChunk, "CLIENT_ERROR bad data chunk");
        check(
            ProtocolError::ObjectTooLarge,
            "SERVER_ERROR object too large for cache",
        );
        check(
            ProtocolError::InvalidExptime,
            "CLIENT_ERROR invalid exptime argument",
        );
        check(
            ProtocolError::InvalidDelta,
            "CLIENT_ERROR invalid numeric delta argument",
        );
        check(
            ProtocolError::DeleteUsage,
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]",
        );
        check(ProtocolError::InvalidFlag, "CLIENT_ERROR invalid flag");
        check(ProtocolError::DuplicateFlag, "CLIENT_ERROR duplicate flag");
        check(
            ProtocolError::BadToken,
            "CLIENT_ERROR bad token in command line format",
        );
        check(ProtocolError::KeyDecode, "CLIENT_ERROR error decoding key");
        check(
            ProtocolError::ModeTokenLength,
            "CLIENT_ERROR incorrect length for M token",
        );
        check(
            ProtocolError::InvalidInitial,
            "CLIENT_ERROR invalid numeric initial value",
        );
        check(
            ProtocolError::InvalidDeltaValue,
            "CLIENT_ERROR invalid numeric delta value",
        );
        check(
            ProtocolError::OpaqueTooLong,
            "CLIENT_ERROR opaque token too long",
        );
        check(
            ProtocolError::MetaGetOptionsTooLong,
            "CLIENT_ERROR options flags are too long",
        );
        check(
            ProtocolError::OptionsTooLong,
            "CLIENT_ERROR options flags too long",
        );
        check(
            ProtocolError::InvalidOrDuplicateFlag,
            "CLIENT_ERROR invalid or duplicate flag",
        );
        check(
            ProtocolError::InvalidSetMode,
            "CLIENT_ERROR invalid mode for ms M token",
        );
        check(
            ProtocolError::InvalidArithmeticMode,
            "CLIENT_ERROR invalid mode for ma M token",
        );
        check(
            ProtocolError::LineTooLong,
            "line too long without a newline (connection closed)",
        );
        check(
            ProtocolError::HttpRequest,
            "HTTP request on the memcached port (connection closed)",
        );
    }
}
