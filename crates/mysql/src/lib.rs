//! kura-mysql: the server side of the MySQL client/server protocol, without
//! I/O. Bytes in: [`PacketReader`] cuts a connection's input into packets,
//! [`parse_login`], [`parse_command`] and [`parse_execute`] read them. Bytes
//! out: [`greeting`], [`ok`], [`err`], result sets ([`column_count`],
//! [`column_def`], [`text_row`], [`binary_row`], [`end_of_rows`]), framed by
//! [`write_packet`].
//!
//! Sequence ids: a command arrives with id 0 (its first frame); the reply
//! continues from [`PacketReader::reply_seq`], one past the command's last
//! frame, and [`write_packet`] advances the id per frame.
//!
//! Not here: sockets, users, statements and their ids, SQL, or any decision
//! that needs server state; `crates/server` owns the connection and its
//! sequence ids, `crates/sql` the meaning of queries. TLS and compression are
//! not offered yet (see [`server_capabilities`]).
//!
//! Built on mysql_common (the codec behind mysql_async) wherever it has the
//! packet right: greeting, handshake response, ERR, the binary value codec,
//! AuthSwitchRequest. Written here: framing on plain `Vec<u8>`, OK/EOF,
//! column definitions (mysql_common 0.38 serializes them with two fields
//! swapped), COM_STMT_PREPARE's OK, server-side COM_STMT_EXECUTE parsing, and
//! MySQL 8's text forms for doubles and temporal values. The tests parse what
//! this crate writes with mysql_common's *client* readers and parse what its
//! client writers produce, so both directions are checked against an
//! independent implementation.
//!
//! Layout, one concern per module: [`framing`] (packet headers, splitting at
//! 0xffffff), `handshake` (greeting, login, `mysql_native_password`),
//! `commands` (command bytes, COM_STMT_EXECUTE), `responses` (OK, EOF, ERR,
//! result sets), `values` (parameter and row value encodings), `codes`
//! (MySQL error numbers), `error` ([`ProtocolError`]).
//!
//! Invariants: nothing here panics on any input (the `mysql_packets` fuzz
//! target drives every parser with arbitrary bytes); every parse returns a
//! `Result`, and an incomplete buffer is `Ok(None)`, not an error. The only
//! assertion is on a programmer error: a nonce with a NUL byte passed to
//! [`greeting`].

pub mod client;
mod codes;
mod commands;
mod error;
pub mod framing;
mod handshake;
mod responses;
mod values;

pub use codes::ErrorCode;
pub use commands::{parse_command, parse_execute, Command, Execute};
pub use error::ProtocolError;
pub use framing::{write_packet, write_packet_with, PacketReader, MAX_FRAME_PAYLOAD};
pub use handshake::{
    auth_switch, greeting, is_ssl_request, native_password_hash, native_password_matches,
    nonce_from_random, parse_login, server_capabilities, Login, DEFAULT_COLLATION,
    NATIVE_PASSWORD_PLUGIN, NONCE_BYTES, SERVER_VERSION,
};
pub use responses::{
    binary_row, binary_row_to, column_count, column_def, end_of_columns, end_of_rows, eof, err, ok,
    param_def, stmt_prepare_ok, text_row, text_row_to, ColumnDef, ERROR_MESSAGE_MAX_BYTES,
};
pub use values::{double_text, Param, Value};

/// The protocol's constants, re-exported so that the server needs no direct
/// dependency on mysql_common.
pub use mysql_common::constants::{CapabilityFlags, ColumnFlags, ColumnType, StatusFlags};
