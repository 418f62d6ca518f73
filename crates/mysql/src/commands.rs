//! The command phase: one payload from the client, the first byte naming the
//! command ([`parse_command`]), and the parameters of COM_STMT_EXECUTE
//! ([`parse_execute`]), which need the prepared statement's parameter count
//! and the state the server keeps for it.
//!
//! Not here: what a command does, statement ids and their lifetimes, or the
//! replies; COM_CHANGE_USER's payload is left raw (no target client sends it
//! unasked; the server may answer `ErrorCode::NOT_SUPPORTED_YET`).
//!
//! Wire rules followed (MySQL 8.0's `dispatch_command`, `mysqld_stmt_execute`):
//! - Bytes after a command's fixed arguments are ignored, as MySQL does.
//! - COM_QUERY is plain SQL text: `CLIENT_QUERY_ATTRIBUTES` is never offered,
//!   so no client prefixes attributes. For the same reason the
//!   `PARAMETER_COUNT_AVAILABLE` bit (0x08) of COM_STMT_EXECUTE's flags is
//!   ignored, as MySQL ignores it without that capability.
//! - COM_STMT_EXECUTE: flags (1), iteration count (4, always 1, ignored); if
//!   the statement has parameters, a NULL bitmap of `(n + 7) / 8` bytes (bit i
//!   set = parameter i is NULL, no offset), the new-params-bound byte, the
//!   types (2 bytes each: type, 0x80 if unsigned) when that byte is 1, then
//!   each value that is neither NULL nor sent as long data, in its type's
//!   binary form.
//! - A parameter that received COM_STMT_SEND_LONG_DATA takes that data as its
//!   value whatever the NULL bitmap says and has no bytes among the values;
//!   its data is consumed by the execution, as MySQL resets long data after
//!   each execute.

use mysql_common::constants::ColumnType;
use mysql_common::io::ParseBuf;

use crate::values::{param_type, read_param};
use crate::{Param, ProtocolError};

/// A command from the client, borrowing from its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// COM_QUIT (0x01): close the connection, no reply.
    Quit,
    /// COM_INIT_DB (0x02): `USE schema`.
    InitDb(&'a [u8]),
    /// COM_QUERY (0x03): SQL text.
    Query(&'a [u8]),
    /// COM_FIELD_LIST (0x04): table name, NUL, column wildcard (raw).
    /// Deprecated; the `mysql`/`mariadb` CLIs still send it for tab
    /// completion unless started with `-A`. Answer with column definitions
    /// and `end_of_rows`, or an error.
    FieldList(&'a [u8]),
    /// COM_PING (0x0e): reply OK.
    Ping,
    /// COM_STATISTICS (0x09): reply with a bare human-readable string (not an
    /// OK packet).
    Statistics,
    /// COM_DEBUG (0x0d): MySQL answers with `end_of_rows` (an EOF), or an
    /// error without privileges.
    Debug,
    /// COM_STMT_PREPARE (0x16): SQL text with `?` placeholders.
    StmtPrepare(&'a [u8]),
    /// COM_STMT_EXECUTE (0x17): `rest` is the payload after the statement id,
    /// for [`parse_execute`] once the server has looked the statement up.
    StmtExecute { stmt_id: u32, rest: &'a [u8] },
    /// COM_STMT_SEND_LONG_DATA (0x18): append `data` to parameter `param`'s
    /// long data. No reply, even on error.
    StmtSendLongData {
        stmt_id: u32,
        param: u16,
        data: &'a [u8],
    },
    /// COM_STMT_CLOSE (0x19): no reply.
    StmtClose(u32),
    /// COM_STMT_RESET (0x1a): drop long data and any open cursor; reply OK.
    /// mysql-connector-python sends one before every execute.
    StmtReset(u32),
    /// COM_STMT_FETCH (0x1c): rows from an open cursor.
    StmtFetch { stmt_id: u32, rows: u32 },
    /// COM_SET_OPTION (0x1b): 0 = multi statements on, 1 = off; MySQL
    /// answers with `end_of_rows` (an EOF).
    SetOption(u16),
    /// COM_RESET_CONNECTION (0x1f): reset session state; reply OK.
    ResetConnection,
    /// COM_CHANGE_USER (0x11): the raw payload after the command byte.
    ChangeUser(&'a [u8]),
    /// COM_PROCESS_KILL (0x0c): kill a connection by id.
    ProcessKill(u32),
    /// Any other command byte (COM_SLEEP, COM_TIME, binlog commands, MariaDB's
    /// COM_STMT_BULK_EXECUTE, …): MySQL answers `ErrorCode::UNKNOWN_COM`.
    Other(u8),
}

fn u16_at(bytes: &[u8], at: usize, what: &'static str) -> Result<u16, ProtocolError> {
    match bytes.get(at..at + 2) {
        Some(&[a, b]) => Ok(u16::from_le_bytes([a, b])),
        _ => Err(ProtocolError::Truncated { what }),
    }
}

fn u32_at(bytes: &[u8], at: usize, what: &'static str) -> Result<u32, ProtocolError> {
    match bytes.get(at..at + 4) {
        Some(&[a, b, c, d]) => Ok(u32::from_le_bytes([a, b, c, d])),
        _ => Err(ProtocolError::Truncated { what }),
    }
}

/// Parses one command-phase payload.
pub fn parse_command(payload: &[u8]) -> Result<Command<'_>, ProtocolError> {
    let Some((&command, rest)) = payload.split_first() else {
        return Err(ProtocolError::Truncated { what: "command" });
    };
    Ok(match command {
        0x01 => Command::Quit,
        0x02 => Command::InitDb(rest),
        0x03 => Command::Query(rest),
        0x04 => Command::FieldList(rest),
        0x09 => Command::Statistics,
        0x0c => Command::ProcessKill(u32_at(rest, 0, "COM_PROCESS_KILL")?),
        0x0d => Command::Debug,
        0x0e => Command::Ping,
        0x11 => Command::ChangeUser(rest),
        0x16 => Command::StmtPrepare(rest),
        0x17 => Command::StmtExecute {
            stmt_id: u32_at(rest, 0, "COM_STMT_EXECUTE")?,
            rest: &rest[4..],
        },
        0x18 => Command::StmtSendLongData {
            stmt_id: u32_at(rest, 0, "COM_STMT_SEND_LONG_DATA")?,
            param: u16_at(rest, 4, "COM_STMT_SEND_LONG_DATA")?,
            data: &rest[6..],
        },
        0x19 => Command::StmtClose(u32_at(rest, 0, "COM_STMT_CLOSE")?),
        0x1a => Command::StmtReset(u32_at(rest, 0, "COM_STMT_RESET")?),
        0x1b => Command::SetOption(u16_at(rest, 0, "COM_SET_OPTION")?),
        0x1c => Command::StmtFetch {
            stmt_id: u32_at(rest, 0, "COM_STMT_FETCH")?,
            rows: u32_at(rest, 4, "COM_STMT_FETCH")?,
        },
        0x1f => Command::ResetConnection,
        other => Command::Other(other),
    })
}

/// The parameters of one COM_STMT_EXECUTE.
#[derive(Clone, Debug, PartialEq)]
pub struct Execute {
    /// The cursor flags: 0 = no cursor, 1 = read-only cursor (rows then come
    /// with COM_STMT_FETCH), 2 = for update, 4 = scrollable.
    pub flags: u8,
    /// One per parameter of the statement, in order.
    pub params: Vec<Param>,
}

/// Parses the rest of a COM_STMT_EXECUTE (after the statement id) for a
/// statement with `num_params` parameters.
///
/// `bound` holds the statement's parameter types (type, unsigned) from the
/// last execution that sent them: replaced when the client sends types, used
/// when it says "as before" (new-params-bound = 0); keep it with the
/// statement, empty at prepare. `long_data` holds each parameter's
/// COM_STMT_SEND_LONG_DATA bytes; on success the entries this execution used
/// are taken (left `None`), on error they are kept. It may be shorter than
/// `num_params`.
pub fn parse_execute(
    rest: &[u8],
    num_params: usize,
    bound: &mut Vec<(ColumnType, bool)>,
    long_data: &mut [Option<Vec<u8>>],
) -> Result<Execute, ProtocolError> {
    const WHAT: &str = "COM_STMT_EXECUTE";
    let Some((&flags, rest)) = rest.split_first() else {
        return Err(ProtocolError::Truncated { what: WHAT });
    };
    // Iteration count: always 1; MySQL does not look at it.
    let Some(rest) = rest.get(4..) else {
        return Err(ProtocolError::Truncated { what: WHAT });
    };
    if num_params == 0 {
        return Ok(Execute {
            flags,
            params: Vec::new(),
        });
    }
    let bitmap_len = num_params.div_ceil(8);
    let Some(bitmap) = rest.get(..bitmap_len) else {
        return Err(ProtocolError::Truncated {
            what: "COM_STMT_EXECUTE NULL bitmap",
        });
    };
    let Some((&new_params_bound, rest)) = rest[bitmap_len..].split_first() else {
        return Err(ProtocolError::Truncated { what: WHAT });
    };
    let mut values = ParseBuf(rest);
    match new_params_bound {
        0 => {
            if bound.len() != num_params {
                return Err(ProtocolError::MissingParamTypes);
            }
        }
        1 => {
            let types_len = num_params.saturating_mul(2);
            let types = values
                .checked_eat(types_len)
                .ok_or(ProtocolError::Truncated {
                    what: "COM_STMT_EXECUTE parameter types",
                })?;
            let types = types
                .chunks_exact(2)
                .map(|pair| param_type(pair[0], pair[1]))
                .collect::<Result<Vec<_>, _>>()?;
            *bound = types;
        }
        _ => {
            return Err(ProtocolError::Malformed {
                what: "COM_STMT_EXECUTE new-params-bound flag",
            })
        }
    }
    let mut params = Vec::with_capacity(bound.len());
    for (i, ty) in bound.iter().enumerate() {
        if long_data.get(i).is_some_and(Option::is_some) {
            // Filled in below, once the whole packet has parsed.
            params.push(Param::Null);
        } else if bitmap[i / 8] & (1 << (i % 8)) != 0 {
            params.push(Param::Null);
        } else {
            params.push(read_param(&mut values, *ty)?);
        }
    }
    for (param, data) in params.iter_mut().zip(long_data.iter_mut()) {
        if let Some(data) = data.take() {
            *param = Param::Bytes(data);
        }
    }
    Ok(Execute { flags, params })
}

#[cfg(test)]
mod tests {
    use mysql_common::packets::{ComStmtExecuteRequestBuilder, ComStmtSendLongData};
    use mysql_common::proto::MySerialize;

    use super::*;

    fn check(payload: &[u8], expected: Command<'_>) {
        assert_eq!(parse_command(payload), Ok(expected), "{payload:?}");
    }

    #[test]
    fn commands() {
        check(b"\x01", Command::Quit);
        check(b"\x02test", Command::InitDb(b"test"));
        check(b"\x03SELECT 1", Command::Query(b"SELECT 1"));
        check(b"\x03", Command::Query(b""));
        check(b"\x04t\x00%", Command::FieldList(b"t\x00%"));
        check(b"\x09", Command::Statistics);
        check(b"\x0c\x07\x00\x00\x00", Command::ProcessKill(7));
        check(b"\x0d", Command::Debug);
        check(b"\x0e", Command::Ping);
        check(b"\x0eextra", Command::Ping);
        check(b"\x11root\x00", Command::ChangeUser(b"root\x00"));
        check(b"\x16SELECT ?", Command::StmtPrepare(b"SELECT ?"));
        check(
            b"\x17\x01\x00\x00\x00\x00\x01\x00\x00\x00",
            Command::StmtExecute {
                stmt_id: 1,
                rest: b"\x00\x01\x00\x00\x00",
            },
        );
        check(
            b"\x18\x02\x00\x00\x00\x01\x00abc",
            Command::StmtSendLongData {
                stmt_id: 2,
                param: 1,
                data: b"abc",
            },
        );
        check(b"\x19\x03\x00\x00\x00", Command::StmtClose(3));
        check(b"\x1a\x04\x00\x00\x00", Command::StmtReset(4));
        check(b"\x1b\x01\x00", Command::SetOption(1));
        check(
            b"\x1c\x05\x00\x00\x00\x10\x00\x00\x00",
            Command::StmtFetch {
                stmt_id: 5,
                rows: 16,
            },
        );
        check(b"\x1f", Command::ResetConnection);
        check(b"\x00", Command::Other(0));
        check(b"\xfa\x01", Command::Other(0xfa));
    }

    #[test]
    fn long_data_round_trips_through_mysql_common() {
        let mut payload = Vec::new();
        ComStmtSendLongData::new(9, 2, &b"chunk"[..]).serialize(&mut payload);
        check(
            &payload,
            Command::StmtSendLongData {
                stmt_id: 9,
                param: 2,
                data: b"chunk",
            },
        );
    }

    #[test]
    fn truncated_commands_are_errors() {
        assert!(parse_command(b"").is_err());
        for full in [
            &b"\x0c\x07\x00\x00\x00"[..],
            b"\x17\x01\x00\x00\x00",
            b"\x18\x02\x00\x00\x00\x01\x00",
            b"\x19\x03\x00\x00\x00",
            b"\x1a\x04\x00\x00\x00",
            b"\x1b\x01\x00",
            b"\x1c\x05\x00\x00\x00\x10\x00\x00\x00",
        ] {
            assert!(parse_command(full).is_ok(), "{full:?}");
            for cut in 1..full.len() {
                assert!(
                    matches!(
                        parse_command(&full[..cut]),
                        Err(ProtocolError::Truncated { .. })
                    ),
                    "{:?}",
                    &full[..cut]
                );
            }
        }
    }

    /// A COM_STMT_EXECUTE built by mysql_common's client code, split as the
    /// server sees it.
    fn client_execute(stmt_id: u32, params: &[mysql_common::Value]) -> Vec<u8> {
        let (request, _) = ComStmtExecuteRequestBuilder::new(stmt_id).build(params);
        let mut payload = Vec::new();
        request.serialize(&mut payload);
        payload
    }

    fn execute_rest(payload: &[u8]) -> (u32, &[u8]) {
        match parse_command(payload) {
            Ok(Command::StmtExecute { stmt_id, rest }) => (stmt_id, rest),
            other => panic!("not an execute: {other:?}"),
        }
    }

    #[test]
    fn execute_round_trips_mysql_common_values() {
        use mysql_common::Value as V;
        let params = [
            V::NULL,
            V::Int(-5),
            V::UInt(7),
            V::UInt(u64::MAX),
            V::Float(0.5),
            V::Double(-2.25),
            V::Bytes(b"hello".to_vec()),
            V::Bytes(Vec::new()),
            V::Date(2024, 1, 2, 0, 0, 0, 0),
            V::Date(2024, 1, 2, 3, 4, 5, 0),
            V::Date(2024, 1, 2, 3, 4, 5, 6),
            V::Date(0, 0, 0, 0, 0, 0, 0),
            V::Time(true, 1, 2, 3, 4, 0),
            V::Time(false, 0, 0, 0, 0, 0),
            V::Time(false, 0, 1, 2, 3, 500),
        ];
        let payload = client_execute(42, &params);
        let (stmt_id, rest) = execute_rest(&payload);
        assert_eq!(stmt_id, 42);
        let mut bound = Vec::new();
        let execute = parse_execute(rest, params.len(), &mut bound, &mut []).unwrap();
        assert_eq!(execute.flags, 0);
        let bytes = |s: &str| Param::Bytes(s.as_bytes().to_vec());
        assert_eq!(
            execute.params,
            vec![
                Param::Null,
                Param::Int(-5),
                Param::Int(7),
                Param::UInt(u64::MAX),
                Param::Double(0.5),
                Param::Double(-2.25),
                bytes("hello"),
                bytes(""),
                bytes("2024-01-02 00:00:00"),
                bytes("2024-01-02 03:04:05"),
                bytes("2024-01-02 03:04:05.000006"),
                bytes("0000-00-00 00:00:00"),
                bytes("-26:03:04"),
                bytes("00:00:00"),
                bytes("01:02:03.000500"),
            ]
        );
        assert_eq!(bound.len(), params.len());
        assert_eq!(bound[3], (ColumnType::MYSQL_TYPE_LONGLONG, true));

        // Re-execution with "types as before" (new-params-bound = 0), as a
        // client does when it keeps its bindings: same bitmap, no types.
        let mut again = rest[..5 + 2 + 1].to_vec();
        again[5 + 2] = 0;
        again.extend_from_slice(&rest[5 + 2 + 1 + 2 * params.len()..]);
        let execute_again = parse_execute(&again, params.len(), &mut bound, &mut []).unwrap();
        assert_eq!(execute_again, execute);
    }

    #[test]
    fn execute_without_params_ignores_the_rest() {
        let payload = client_execute(1, &[]);
        let (_, rest) = execute_rest(&payload);
        assert_eq!(rest, b"\x00\x01\x00\x00\x00");
        let execute = parse_execute(rest, 0, &mut Vec::new(), &mut []).unwrap();
        assert_eq!(
            execute,
            Execute {
                flags: 0,
                params: vec![]
            }
        );
    }

    #[test]
    fn execute_narrow_integer_types() {
        // Types a C client (libmysqlclient, mysql-connector-python) binds:
        // TINY, SHORT, LONG, INT24 and YEAR, signed and unsigned.
        let mut rest = vec![0, 1, 0, 0, 0, 0, 1];
        for (ty, flags) in [
            (1, 0),
            (1, 0x80),
            (2, 0),
            (2, 0x80),
            (3, 0),
            (3, 0x80),
            (13, 0x80),
        ] {
            rest.extend_from_slice(&[ty, flags]);
        }
        rest.extend_from_slice(&[0xff, 0xff, 0xfe, 0xff, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff]);
        rest.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xe8, 0x07]);
        let execute = parse_execute(&rest, 7, &mut Vec::new(), &mut []).unwrap();
        assert_eq!(
            execute.params,
            vec![
                Param::Int(-1),
                Param::Int(255),
                Param::Int(-2),
                Param::Int(65534),
                Param::Int(-1),
                Param::Int(4294967295),
                Param::Int(2024),
            ]
        );
    }

    #[test]
    fn execute_date_type_drops_the_time() {
        // mysql-connector-python sends datetime.date as MYSQL_TYPE_DATE.
        let rest = [0, 1, 0, 0, 0, 0, 1, 10, 0, 4, 0xe8, 0x07, 12, 31];
        let execute = parse_execute(&rest, 1, &mut Vec::new(), &mut []).unwrap();
        assert_eq!(execute.params, vec![Param::Bytes(b"2024-12-31".to_vec())]);
    }

    #[test]
    fn long_data_replaces_the_value_and_is_consumed() {
        use mysql_common::Value as V;
        // What mysql_common sends when it streams a parameter as long data:
        // the type is bound, the bitmap bit is clear, no value bytes.
        let params = [V::Int(1), V::Bytes(b"x".to_vec()), V::Int(3)];
        let payload = client_execute(1, &params);
        let (_, rest) = execute_rest(&payload);
        let mut without_value = rest.to_vec();
        // Drop the lenenc "x" (2 bytes) that sits after the first int.
        let values_at = 5 + 1 + 1 + 2 * params.len();
        without_value.drain(values_at + 8..values_at + 10);
        let mut long_data = vec![None, Some(b"streamed".to_vec()), None];
        let execute = parse_execute(&without_value, 3, &mut Vec::new(), &mut long_data).unwrap();
        assert_eq!(
            execute.params,
            vec![
                Param::Int(1),
                Param::Bytes(b"streamed".to_vec()),
                Param::Int(3)
            ]
        );
        assert_eq!(long_data, vec![None, None, None]);
    }

    #[test]
    fn real_client_executes() {
        // mysql-connector-python 26.10.0 (pure Python), prepared cursor,
        // executing `SELECT ?, …` with (1, -5, 2**63 + 5, 1.5, "héllo",
        // b"\x00\xff", None, date(2024, 1, 2), datetime(2024, 1, 2, 3, 4, 5),
        // datetime(2024, 1, 2, 3, 4, 5, 600), timedelta(days=-1, seconds=5),
        // Decimal("12.50")). Non-negative ints go as unsigned TINY/…/LONGLONG
        // by size, str and bytes as STRING, None as NULL type.
        let rest = [
            0, 1, 0, 0, 0, 64, 0, 1, 1, 128, 1, 0, 8, 128, 5, 0, 254, 0, 254, 0, 6, 0, 10, 0, 12,
            0, 12, 0, 11, 0, 0, 0, 1, 251, 5, 0, 0, 0, 0, 0, 0, 128, 0, 0, 0, 0, 0, 0, 248, 63, 6,
            104, 195, 169, 108, 108, 111, 2, 0, 255, 4, 232, 7, 1, 2, 7, 232, 7, 1, 2, 3, 4, 5, 11,
            232, 7, 1, 2, 3, 4, 5, 88, 2, 0, 0, 8, 1, 1, 0, 0, 0, 0, 0, 5, 5, 49, 50, 46, 53, 48,
        ];
        let mut bound = Vec::new();
        let execute = parse_execute(&rest, 12, &mut bound, &mut []).unwrap();
        let bytes = |s: &str| Param::Bytes(s.as_bytes().to_vec());
        assert_eq!(
            execute.params,
            vec![
                Param::Int(1),
                Param::Int(-5),
                Param::UInt(9223372036854775813),
                Param::Double(1.5),
                bytes("héllo"),
                Param::Bytes(vec![0, 255]),
                Param::Null,
                bytes("2024-01-02"),
                bytes("2024-01-02 03:04:05"),
                bytes("2024-01-02 03:04:05.000600"),
                // The connector writes timedelta(days=-1, seconds=5), which is
                // -23:59:55, as "negative, 1 day, 5 seconds"; read as sent.
                bytes("-24:00:05"),
                bytes("12.50"),
            ]
        );
        // A file-like parameter goes as COM_STMT_SEND_LONG_DATA first; the
        // execute binds it as BLOB with no value bytes.
        let rest = [0, 1, 0, 0, 0, 0, 1, 252, 0, 1, 128, 5];
        let mut long_data = vec![Some(b"streamed-bytes".to_vec()), None];
        let execute = parse_execute(&rest, 2, &mut Vec::new(), &mut long_data).unwrap();
        assert_eq!(execute.params, vec![bytes("streamed-bytes"), Param::Int(5)]);
    }

    #[test]
    fn failed_execute_keeps_long_data() {
        // Two LONGLONG parameters, the first streamed, the second's 8 bytes
        // cut short.
        let rest = [0, 1, 0, 0, 0, 0, 1, 8, 0, 8, 0, 1, 2, 3];
        let mut long_data = vec![Some(b"kept".to_vec()), None];
        assert!(matches!(
            parse_execute(&rest, 2, &mut Vec::new(), &mut long_data),
            Err(ProtocolError::Truncated { .. })
        ));
        assert_eq!(long_data, vec![Some(b"kept".to_vec()), None]);
    }

    #[test]
    fn execute_errors() {
        let mut bound = Vec::new();
        // Types never sent.
        assert_eq!(
            parse_execute(&[0, 1, 0, 0, 0, 0, 0], 1, &mut bound, &mut []),
            Err(ProtocolError::MissingParamTypes)
        );
        // Bad new-params-bound byte.
        assert!(matches!(
            parse_execute(&[0, 1, 0, 0, 0, 0, 2], 1, &mut bound, &mut []),
            Err(ProtocolError::Malformed { .. })
        ));
        // A binlog-only type.
        assert_eq!(
            parse_execute(&[0, 1, 0, 0, 0, 0, 1, 18, 0], 1, &mut bound, &mut []),
            Err(ProtocolError::UnknownParamType(18))
        );
        // Types bound for a different parameter count.
        bound = vec![(ColumnType::MYSQL_TYPE_LONG, false)];
        assert_eq!(
            parse_execute(&[0, 1, 0, 0, 0, 0, 0], 2, &mut bound, &mut []),
            Err(ProtocolError::MissingParamTypes)
        );
    }

    #[test]
    fn truncated_execute_is_an_error_at_every_cut() {
        use mysql_common::Value as V;
        let params = [
            V::Int(1),
            V::Bytes(b"abc".to_vec()),
            V::Double(1.0),
            V::Date(2024, 1, 2, 3, 4, 5, 6),
            V::Time(false, 1, 2, 3, 4, 5),
        ];
        let payload = client_execute(1, &params);
        let (_, rest) = execute_rest(&payload);
        assert!(parse_execute(rest, params.len(), &mut Vec::new(), &mut []).is_ok());
        for cut in 0..rest.len() {
            let result = parse_execute(&rest[..cut], params.len(), &mut Vec::new(), &mut []);
            assert!(
                matches!(result, Err(ProtocolError::Truncated { .. })),
                "cut at {cut}: {result:?}"
            );
        }
    }
}
