//! Reply payloads: OK, EOF, ERR, result-set metadata and rows (text and
//! binary protocol), and COM_STMT_PREPARE's answer. The server frames each
//! with [`crate::write_packet`], continuing the command's sequence ids.
//!
//! Not here: which replies a command gets, or in what order beyond what the
//! protocol fixes. The sequences the server writes:
//! - statement without rows: [`ok`];
//! - result set: [`column_count`], one [`column_def`] per column,
//!   [`end_of_columns`] (an EOF, unless `CLIENT_DEPRECATE_EOF`), the rows
//!   ([`text_row`] for COM_QUERY, [`binary_row`] for COM_STMT_EXECUTE), then
//!   [`end_of_rows`] (status with `SERVER_MORE_RESULTS_EXISTS` if another
//!   result follows); an error mid-rows is sent as [`err`] in place of the
//!   end;
//! - COM_STMT_PREPARE: [`stmt_prepare_ok`], then if it has parameters one
//!   [`param_def`] each and [`end_of_columns`], then if it has columns one
//!   [`column_def`] each and [`end_of_columns`];
//! - COM_FIELD_LIST: column definitions, then [`end_of_rows`].
//!
//! Invariants: OK packets carry no session-state data (`CLIENT_SESSION_TRACK`
//! is not offered), so `info` is a length-encoded string present only when
//! non-empty, as MySQL's `net_send_ok` writes it; every packet here matches
//! what mysql_common's client-side readers accept (the tests parse them with
//! those readers).

use mysql_common::constants::{CapabilityFlags, ColumnFlags, ColumnType, StatusFlags};
use mysql_common::io::BufMutExt;
use mysql_common::packets::{ErrPacket, ServerError, SqlState};
use mysql_common::proto::MySerialize;

use crate::values::{push_binary, push_text};
use crate::{ProtocolError, Value};

/// MySQL's `MYSQL_ERRMSG_SIZE` less its NUL: the longest error message a
/// client keeps.
pub const ERROR_MESSAGE_MAX_BYTES: usize = 511;

/// OK packet: header 0x00, affected rows and last insert id (length-encoded),
/// status, warnings, and `info` (e.g. `Rows matched: 1  Changed: 1
/// Warnings: 0`) when not empty.
pub fn ok(
    affected_rows: u64,
    last_insert_id: u64,
    status: StatusFlags,
    warnings: u16,
    info: &str,
) -> Vec<u8> {
    let mut out = vec![0x00];
    out.put_lenenc_int(affected_rows);
    out.put_lenenc_int(last_insert_id);
    out.extend_from_slice(&status.bits().to_le_bytes());
    out.extend_from_slice(&warnings.to_le_bytes());
    if !info.is_empty() {
        out.put_lenenc_str(info.as_bytes());
    }
    out
}

/// The packet that ends a result set's rows: with `CLIENT_DEPRECATE_EOF`, an
/// OK packet with header 0xfe (no affected rows or insert id, 7 bytes, which
/// clients tell from a row by its length); otherwise the old [`eof`].
/// PyMySQL 1.2, mysql-connector-python 26 (pure Python) and the MariaDB 10.11
/// `mariadb` CLI do not set `CLIENT_DEPRECATE_EOF`: the old form is the
/// common one.
pub fn end_of_rows(caps: CapabilityFlags, status: StatusFlags, warnings: u16) -> Vec<u8> {
    if caps.contains(CapabilityFlags::CLIENT_DEPRECATE_EOF) {
        let mut out = vec![0xfe, 0x00, 0x00];
        out.extend_from_slice(&status.bits().to_le_bytes());
        out.extend_from_slice(&warnings.to_le_bytes());
        out
    } else {
        eof(status, warnings)
    }
}

/// The packet after a result set's (or a prepared statement's) column
/// definitions: an [`eof`] for clients without `CLIENT_DEPRECATE_EOF`,
/// nothing for the others.
pub fn end_of_columns(
    caps: CapabilityFlags,
    status: StatusFlags,
    warnings: u16,
) -> Option<Vec<u8>> {
    if caps.contains(CapabilityFlags::CLIENT_DEPRECATE_EOF) {
        None
    } else {
        Some(eof(status, warnings))
    }
}

/// The old EOF packet: 0xfe, warnings, status (note the order, the reverse of
/// an OK packet's). Most replies that MySQL ends with an EOF (COM_SET_OPTION,
/// COM_DEBUG, COM_FIELD_LIST, result sets) go through [`end_of_rows`], which
/// picks this or the OK form.
pub fn eof(status: StatusFlags, warnings: u16) -> Vec<u8> {
    let mut out = vec![0xfe];
    out.extend_from_slice(&warnings.to_le_bytes());
    out.extend_from_slice(&status.bits().to_le_bytes());
    out
}

/// ERR packet: 0xff, code, `#`, SQLSTATE, message. The message is cut to
/// [`ERROR_MESSAGE_MAX_BYTES`] at a character boundary, as MySQL cuts it.
pub fn err(code: u16, sqlstate: &[u8; 5], message: &str) -> Vec<u8> {
    let mut end = message.len().min(ERROR_MESSAGE_MAX_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let error = ServerError::new(
        code,
        Some(SqlState::new(*sqlstate)),
        &message.as_bytes()[..end],
    );
    let mut out = Vec::new();
    ErrPacket::Error(error).serialize(&mut out);
    out
}

/// The first packet of a result set: its number of columns.
pub fn column_count(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_lenenc_int(n as u64);
    out
}

/// A column of a result set (Protocol::ColumnDefinition41).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnDef<'a> {
    /// Database of the table, `""` for computed columns.
    pub schema: &'a str,
    /// Table alias as written in the query.
    pub table: &'a str,
    /// Table name.
    pub org_table: &'a str,
    /// Column alias (what clients show as the name).
    pub name: &'a str,
    /// Column name in its table.
    pub org_name: &'a str,
    /// 63 = binary (numbers, blobs), 45 = utf8mb4_general_ci (text).
    pub collation: u16,
    /// Display width in bytes: 11 for INT, 20 for BIGINT, 22 for DOUBLE,
    /// chars × 4 for utf8mb4 text.
    pub length: u32,
    pub ty: ColumnType,
    /// `NOT_NULL_FLAG`, `PRI_KEY_FLAG`, `UNSIGNED_FLAG`, `BINARY_FLAG`
    /// (binary collation), `BLOB_FLAG`, `NUM_FLAG`, …
    pub flags: ColumnFlags,
    /// Digits after the point: 0 for integers and strings, 31 (MySQL's "not
    /// fixed") for DOUBLE without a declared scale.
    pub decimals: u8,
}

/// A column definition packet.
///
/// Written here rather than with mysql_common's `Column`, whose serializer
/// (0.38) puts the column length before the character set; its deserializer,
/// which the tests use, reads them in the protocol's order.
pub fn column_def(c: &ColumnDef<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_lenenc_str(b"def");
    for text in [c.schema, c.table, c.org_table, c.name, c.org_name] {
        out.put_lenenc_str(text.as_bytes());
    }
    // Length of the fixed-size fields that follow.
    out.push(0x0c);
    out.extend_from_slice(&c.collation.to_le_bytes());
    out.extend_from_slice(&c.length.to_le_bytes());
    out.push(c.ty as u8);
    out.extend_from_slice(&c.flags.bits().to_le_bytes());
    out.push(c.decimals);
    out.extend_from_slice(&[0, 0]);
    out
}

/// The definition MySQL sends for each `?` of a prepared statement: named
/// `?`, binary VAR_STRING. Clients read it but bind by their own values'
/// types.
pub fn param_def() -> Vec<u8> {
    column_def(&ColumnDef {
        schema: "",
        table: "",
        org_table: "",
        name: "?",
        org_name: "",
        collation: 63,
        length: 0,
        ty: ColumnType::MYSQL_TYPE_VAR_STRING,
        flags: ColumnFlags::BINARY_FLAG,
        decimals: 0,
    })
}

/// A text-protocol row (COM_QUERY results): each value as a length-encoded
/// string, NULL as 0xfb; integers in decimal, doubles as MySQL 8 prints them
/// (see [`crate::double_text`]).
pub fn text_row(values: &[Value<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    text_row_to(&mut out, values);
    out
}

/// [`text_row`], appended to `out`.
pub fn text_row_to(out: &mut Vec<u8>, values: &[Value<'_>]) {
    let mut text = Vec::new();
    for value in values {
        if let Value::Null = value {
            out.push(0xfb);
        } else {
            text.clear();
            push_text(&mut text, value);
            out.put_lenenc_str(&text);
        }
    }
}

/// A binary-protocol row (COM_STMT_EXECUTE results): 0x00, the NULL bitmap
/// (offset 2: bit i + 2 for column i), then each non-NULL value in its
/// column's binary form: TINY 1 byte, SHORT/YEAR 2, LONG/INT24 4, LONGLONG 8,
/// FLOAT 4, DOUBLE 8, DATE/DATETIME/TIMESTAMP/TIME as length-prefixed fields
/// parsed from MySQL's text form, everything else length-encoded. `types` are
/// the column definitions' types with their `UNSIGNED_FLAG`.
///
/// Integers must fit their column (else [`ProtocolError::ValueOutOfRange`]);
/// numbers in string-like columns (DECIMAL, VARCHAR, …) are sent as their
/// text; any other mismatch is [`ProtocolError::ValueTypeMismatch`].
pub fn binary_row(
    types: &[(ColumnType, bool)],
    values: &[Value<'_>],
) -> Result<Vec<u8>, ProtocolError> {
    if types.len() != values.len() {
        return Err(ProtocolError::ColumnCountMismatch {
            columns: types.len(),
            values: values.len(),
        });
    }
    let mut out = Vec::new();
    binary_row_to(&mut out, types, values)?;
    Ok(out)
}

/// [`binary_row`], appended to `out` (on an error, some of it may be).
pub fn binary_row_to(
    out: &mut Vec<u8>,
    types: &[(ColumnType, bool)],
    values: &[Value<'_>],
) -> Result<(), ProtocolError> {
    if types.len() != values.len() {
        return Err(ProtocolError::ColumnCountMismatch {
            columns: types.len(),
            values: values.len(),
        });
    }
    let start = out.len();
    let bitmap_len = (values.len() + 9) / 8;
    out.resize(start + 1 + bitmap_len, 0);
    for (i, (ty, value)) in types.iter().zip(values).enumerate() {
        if let Value::Null = value {
            let bit = i + 2;
            out[start + 1 + bit / 8] |= 1 << (bit % 8);
        } else {
            push_binary(out, *ty, value, i)?;
        }
    }
    Ok(())
}

/// COM_STMT_PREPARE's OK: 0x00, statement id, column count, parameter count,
/// a filler byte, warnings.
pub fn stmt_prepare_ok(stmt_id: u32, num_columns: u16, num_params: u16, warnings: u16) -> Vec<u8> {
    let mut out = vec![0x00];
    out.extend_from_slice(&stmt_id.to_le_bytes());
    out.extend_from_slice(&num_columns.to_le_bytes());
    out.extend_from_slice(&num_params.to_le_bytes());
    out.push(0x00);
    out.extend_from_slice(&warnings.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mysql_common::io::ParseBuf;
    use mysql_common::packets::{
        Column, CommonOkPacket, OkPacketDeserializer, OldEofPacket, ResultSetTerminator, StmtPacket,
    };
    use mysql_common::proto::{Binary, MyDeserialize, Text};
    use mysql_common::row::RowDeserializer;
    use mysql_common::value::ServerSide;
    use mysql_common::Value as V;

    use super::*;

    fn status() -> StatusFlags {
        StatusFlags::SERVER_STATUS_AUTOCOMMIT | StatusFlags::SERVER_STATUS_IN_TRANS
    }

    #[test]
    fn ok_parses_as_mysql_common_client_sees_it() {
        for caps in [
            CapabilityFlags::CLIENT_PROTOCOL_41,
            CapabilityFlags::CLIENT_PROTOCOL_41 | CapabilityFlags::CLIENT_DEPRECATE_EOF,
        ] {
            let payload = ok(
                300,
                70000,
                status(),
                2,
                "Rows matched: 1  Changed: 1  Warnings: 0",
            );
            let packet: OkPacketDeserializer<'_, CommonOkPacket> =
                MyDeserialize::deserialize(caps, &mut ParseBuf(&payload)).unwrap();
            let packet = packet.into_inner();
            assert_eq!(packet.affected_rows(), 300);
            assert_eq!(packet.last_insert_id(), Some(70000));
            assert_eq!(packet.status_flags(), status());
            assert_eq!(packet.warnings(), 2);
            assert_eq!(
                packet.info_ref(),
                Some(&b"Rows matched: 1  Changed: 1  Warnings: 0"[..])
            );
        }
    }

    #[test]
    fn ok_bytes() {
        // The OK packet in MySQL's documentation: 0 rows, id 0, autocommit.
        assert_eq!(
            ok(0, 0, StatusFlags::SERVER_STATUS_AUTOCOMMIT, 0, ""),
            b"\x00\x00\x00\x02\x00\x00\x00"
        );
        assert_eq!(
            ok(251, 1 << 16, StatusFlags::empty(), 0, "x"),
            b"\x00\xfc\xfb\x00\xfd\x00\x00\x01\x00\x00\x00\x00\x01x"
        );
    }

    #[test]
    fn end_of_rows_follows_deprecate_eof() {
        let caps = CapabilityFlags::CLIENT_PROTOCOL_41 | CapabilityFlags::CLIENT_DEPRECATE_EOF;
        let payload = end_of_rows(caps, status(), 3);
        assert_eq!(payload, b"\xfe\x00\x00\x03\x00\x03\x00");
        let packet: OkPacketDeserializer<'_, ResultSetTerminator> =
            MyDeserialize::deserialize(caps, &mut ParseBuf(&payload)).unwrap();
        let packet = packet.into_inner();
        assert_eq!(packet.status_flags(), status());
        assert_eq!(packet.warnings(), 3);
        assert_eq!(end_of_columns(caps, status(), 3), None);

        let old = CapabilityFlags::CLIENT_PROTOCOL_41;
        let payload = end_of_rows(old, status(), 3);
        assert_eq!(payload, b"\xfe\x03\x00\x03\x00");
        assert_eq!(end_of_columns(old, status(), 3), Some(payload.clone()));
        let packet: OkPacketDeserializer<'_, OldEofPacket> =
            MyDeserialize::deserialize(old, &mut ParseBuf(&payload)).unwrap();
        let packet = packet.into_inner();
        assert_eq!(packet.status_flags(), status());
        assert_eq!(packet.warnings(), 3);
    }

    #[test]
    fn err_parses_as_mysql_common_client_sees_it() {
        let payload = err(1146, b"42S02", "Table 'shop.nope' doesn't exist");
        let packet: ErrPacket<'_> = MyDeserialize::deserialize(
            CapabilityFlags::CLIENT_PROTOCOL_41,
            &mut ParseBuf(&payload),
        )
        .unwrap();
        let ErrPacket::Error(error) = packet else {
            panic!("progress report");
        };
        assert_eq!(error.error_code(), 1146);
        assert_eq!(error.sql_state_ref().unwrap().as_bytes(), *b"42S02");
        assert_eq!(error.message_ref(), b"Table 'shop.nope' doesn't exist");
    }

    #[test]
    fn err_message_is_cut_at_a_char_boundary() {
        let long = "é".repeat(400);
        let payload = err(1064, b"42000", &long);
        let message = &payload[9..];
        assert_eq!(message.len(), 510);
        assert!(std::str::from_utf8(message).is_ok());
    }

    #[test]
    fn column_count_is_lenenc() {
        assert_eq!(column_count(3), b"\x03");
        assert_eq!(column_count(300), b"\xfc\x2c\x01");
    }

    fn columns() -> Vec<ColumnDef<'static>> {
        let def = |name, ty, flags, collation| ColumnDef {
            schema: "shop",
            table: "t",
            org_table: "items",
            name,
            org_name: name,
            collation,
            length: 20,
            ty,
            flags,
            decimals: 0,
        };
        vec![
            def(
                "id",
                ColumnType::MYSQL_TYPE_LONGLONG,
                ColumnFlags::NOT_NULL_FLAG,
                63,
            ),
            def(
                "n",
                ColumnType::MYSQL_TYPE_LONG,
                ColumnFlags::UNSIGNED_FLAG,
                63,
            ),
            def(
                "price",
                ColumnType::MYSQL_TYPE_DOUBLE,
                ColumnFlags::empty(),
                63,
            ),
            def(
                "name",
                ColumnType::MYSQL_TYPE_VAR_STRING,
                ColumnFlags::empty(),
                45,
            ),
            def("day", ColumnType::MYSQL_TYPE_DATE, ColumnFlags::empty(), 63),
            def(
                "at",
                ColumnType::MYSQL_TYPE_DATETIME,
                ColumnFlags::empty(),
                63,
            ),
            def(
                "big",
                ColumnType::MYSQL_TYPE_LONGLONG,
                ColumnFlags::UNSIGNED_FLAG,
                63,
            ),
            def(
                "gone",
                ColumnType::MYSQL_TYPE_VAR_STRING,
                ColumnFlags::empty(),
                45,
            ),
            def(
                "tiny",
                ColumnType::MYSQL_TYPE_TINY,
                ColumnFlags::empty(),
                63,
            ),
        ]
    }

    fn parsed_columns() -> Arc<[Column]> {
        columns()
            .iter()
            .map(|c| {
                let payload = column_def(c);
                Column::deserialize((), &mut ParseBuf(&payload)).unwrap()
            })
            .collect()
    }

    #[test]
    fn column_def_parses_as_mysql_common_client_sees_it() {
        let payload = column_def(&ColumnDef {
            schema: "shop",
            table: "t",
            org_table: "items",
            name: "price",
            org_name: "cost",
            collation: 63,
            length: 22,
            ty: ColumnType::MYSQL_TYPE_DOUBLE,
            flags: ColumnFlags::NOT_NULL_FLAG | ColumnFlags::NUM_FLAG,
            decimals: 31,
        });
        let column = Column::deserialize((), &mut ParseBuf(&payload)).unwrap();
        assert_eq!(column.schema_ref(), b"shop");
        assert_eq!(column.table_ref(), b"t");
        assert_eq!(column.org_table_ref(), b"items");
        assert_eq!(column.name_ref(), b"price");
        assert_eq!(column.org_name_ref(), b"cost");
        assert_eq!(column.character_set(), 63);
        assert_eq!(column.column_length(), 22);
        assert_eq!(column.column_type(), ColumnType::MYSQL_TYPE_DOUBLE);
        assert_eq!(
            column.flags(),
            ColumnFlags::NOT_NULL_FLAG | ColumnFlags::NUM_FLAG
        );
        assert_eq!(column.decimals(), 31);
        // Catalog "def" first, fixed part 0x0c long, two filler bytes last.
        assert_eq!(&payload[..4], b"\x03def");
        assert_eq!(&payload[payload.len() - 13..payload.len() - 12], b"\x0c");
        assert_eq!(&payload[payload.len() - 2..], b"\x00\x00");
    }

    #[test]
    fn param_def_is_a_question_mark() {
        let payload = param_def();
        let column = Column::deserialize((), &mut ParseBuf(&payload)).unwrap();
        assert_eq!(column.name_ref(), b"?");
        assert_eq!(column.column_type(), ColumnType::MYSQL_TYPE_VAR_STRING);
        assert_eq!(column.character_set(), 63);
    }

    fn row_values() -> Vec<Value<'static>> {
        vec![
            Value::Int(-1),
            Value::Int(4_000_000_000),
            Value::Double(1e20),
            Value::Bytes("naïve".as_bytes()),
            Value::Bytes(b"2024-01-02"),
            Value::Bytes(b"2024-01-02 03:04:05.000600"),
            Value::UInt(u64::MAX),
            Value::Null,
            Value::Int(-128),
        ]
    }

    #[test]
    fn text_row_parses_as_mysql_common_client_sees_it() {
        let payload = text_row(&row_values());
        let row: RowDeserializer<(), Text> =
            MyDeserialize::deserialize(parsed_columns(), &mut ParseBuf(&payload)).unwrap();
        let row = row.into_inner().unwrap();
        let bytes = |s: &str| V::Bytes(s.as_bytes().to_vec());
        assert_eq!(
            row,
            vec![
                bytes("-1"),
                bytes("4000000000"),
                bytes("1e20"),
                bytes("naïve"),
                bytes("2024-01-02"),
                bytes("2024-01-02 03:04:05.000600"),
                bytes("18446744073709551615"),
                V::NULL,
                bytes("-128"),
            ]
        );
    }

    #[test]
    fn binary_row_parses_as_mysql_common_client_sees_it() {
        let types: Vec<_> = columns()
            .iter()
            .map(|c| (c.ty, c.flags.contains(ColumnFlags::UNSIGNED_FLAG)))
            .collect();
        let payload = binary_row(&types, &row_values()).unwrap();
        // Column 7 is NULL: bit 7 + 2 = 9, in the bitmap's second byte.
        assert_eq!(&payload[..3], &[0x00, 0x00, 0x02]);
        let row: RowDeserializer<ServerSide, Binary> =
            MyDeserialize::deserialize(parsed_columns(), &mut ParseBuf(&payload)).unwrap();
        let row = row.into_inner().unwrap();
        assert_eq!(
            row,
            vec![
                V::Int(-1),
                V::Int(4_000_000_000),
                V::Double(1e20),
                V::Bytes("naïve".as_bytes().to_vec()),
                V::Date(2024, 1, 2, 0, 0, 0, 0),
                V::Date(2024, 1, 2, 3, 4, 5, 600),
                V::UInt(u64::MAX),
                V::NULL,
                V::Int(-128),
            ]
        );
    }

    #[test]
    fn binary_row_errors() {
        let types = [(ColumnType::MYSQL_TYPE_LONG, false)];
        assert_eq!(
            binary_row(&types, &[]),
            Err(ProtocolError::ColumnCountMismatch {
                columns: 1,
                values: 0
            })
        );
        assert_eq!(
            binary_row(&types, &[Value::Int(1 << 40)]),
            Err(ProtocolError::ValueOutOfRange { column: 0 })
        );
        assert_eq!(binary_row(&[], &[]), Ok(vec![0x00, 0x00]));
    }

    #[test]
    fn stmt_prepare_ok_parses_as_mysql_common_client_sees_it() {
        let payload = stmt_prepare_ok(7, 3, 2, 1);
        assert_eq!(payload.len(), 12);
        let packet = StmtPacket::deserialize((), &mut ParseBuf(&payload)).unwrap();
        assert_eq!(packet.statement_id(), 7);
        assert_eq!(packet.num_columns(), 3);
        assert_eq!(packet.num_params(), 2);
        assert_eq!(packet.warning_count(), 1);
    }
}
