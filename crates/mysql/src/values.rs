//! Values on the wire: parameters as a client binds them to a prepared
//! statement ([`Param`]), values as the server hands them over for a result
//! row ([`Value`]), and the text forms MySQL 8 gives numbers and temporal
//! values.
//!
//! Not here: SQL types, coercion between them, or collations; the SQL engine
//! decides what a parameter means in its statement. This module only turns
//! the binary protocol's encodings into the five shapes the server holds and
//! back, the way MySQL 8.0 does.
//!
//! - Parameters: integers of every width become [`Param::Int`], and
//!   [`Param::UInt`] only above `i64::MAX` (mysql-connector-python sends every
//!   non-negative Python int as an *unsigned* type, so "unsigned" on the wire
//!   says nothing about the value); FLOAT widens to [`Param::Double`] (MySQL
//!   does the same: `SELECT ?` with FLOAT 0.1 gives 0.10000000149011612);
//!   DECIMAL, strings, blobs, JSON, ENUM, SET, BIT and GEOMETRY stay bytes;
//!   DATE, DATETIME, TIMESTAMP and TIME become their MySQL text form,
//!   `2024-01-02`, `2024-01-02 03:04:05[.ffffff]`, `-838:59:59[.ffffff]`,
//!   decided by the parameter's type as MySQL does (a DATETIME sent without a
//!   time, as mysql_common-based clients send dates, reads
//!   `2024-01-02 00:00:00`; a DATE drops any time part), with a fraction only
//!   when the microseconds are not zero.
//! - DOUBLE text: MySQL 8 prints a double with `my_gcvt` at full width: the
//!   shortest digits that read back as the same double, in plain notation when
//!   the decimal exponent is in -15..=14 (or digits run past the point, as in
//!   `1234567890123456.8`) and in `e` notation otherwise, with no `+` and no
//!   leading zeros in the exponent: `1e20`, `1e15`, `100000000000000`, `0.1`,
//!   `100`, `0.30000000000000004`, `1e-16`, `1.2345678901234568e20`, `-0` for
//!   negative zero. NaN and infinities, which MySQL never stores, print as `0`
//!   as `my_gcvt` does; the engine should refuse them first (MySQL raises
//!   `ER_DATA_OUT_OF_RANGE`).

use mysql_common::constants::{ColumnFlags, ColumnType};
use mysql_common::io::{BufMutExt, ParseBuf};
use mysql_common::proto::{MyDeserialize, MySerialize};
use mysql_common::value::{BinValue, ValueDeserializer};

use crate::ProtocolError;

/// A parameter of COM_STMT_EXECUTE, as the client sent it.
#[derive(Clone, Debug, PartialEq)]
pub enum Param {
    Null,
    Int(i64),
    /// Only for unsigned values above `i64::MAX`.
    UInt(u64),
    Double(f64),
    /// Strings, blobs, DECIMAL text, temporal values in MySQL's text form,
    /// and values sent with COM_STMT_SEND_LONG_DATA.
    Bytes(Vec<u8>),
}

/// A value of a result row, as the server holds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Null,
    Int(i64),
    UInt(u64),
    Double(f64),
    /// Strings and blobs; for DATE, DATETIME, TIMESTAMP and TIME columns in a
    /// binary result, MySQL's text form of the value (what [`Param`] gives).
    Bytes(&'a [u8]),
}

/// Whether the binary protocol can carry a parameter of this type, and how.
enum ParamKind {
    /// Decoded by mysql_common's binary value reader.
    Decoded,
    /// `MYSQL_TYPE_NULL`: no value bytes at all.
    Null,
}

fn param_kind(ty: ColumnType) -> Option<ParamKind> {
    use ColumnType::*;
    match ty {
        MYSQL_TYPE_NULL => Some(ParamKind::Null),
        MYSQL_TYPE_TINY
        | MYSQL_TYPE_SHORT
        | MYSQL_TYPE_YEAR
        | MYSQL_TYPE_LONG
        | MYSQL_TYPE_INT24
        | MYSQL_TYPE_LONGLONG
        | MYSQL_TYPE_FLOAT
        | MYSQL_TYPE_DOUBLE
        | MYSQL_TYPE_DECIMAL
        | MYSQL_TYPE_NEWDECIMAL
        | MYSQL_TYPE_VARCHAR
        | MYSQL_TYPE_VAR_STRING
        | MYSQL_TYPE_STRING
        | MYSQL_TYPE_TINY_BLOB
        | MYSQL_TYPE_MEDIUM_BLOB
        | MYSQL_TYPE_LONG_BLOB
        | MYSQL_TYPE_BLOB
        | MYSQL_TYPE_ENUM
        | MYSQL_TYPE_SET
        | MYSQL_TYPE_BIT
        | MYSQL_TYPE_GEOMETRY
        | MYSQL_TYPE_JSON
        | MYSQL_TYPE_VECTOR
        | MYSQL_TYPE_DATE
        | MYSQL_TYPE_NEWDATE
        | MYSQL_TYPE_DATETIME
        | MYSQL_TYPE_TIMESTAMP
        | MYSQL_TYPE_TIME => Some(ParamKind::Decoded),
        // Binlog-only and internal types; mysql_common's reader would panic on
        // them, and MySQL refuses them too.
        MYSQL_TYPE_TIMESTAMP2
        | MYSQL_TYPE_DATETIME2
        | MYSQL_TYPE_TIME2
        | MYSQL_TYPE_TYPED_ARRAY
        | MYSQL_TYPE_UNKNOWN => None,
    }
}

/// The parameter type byte pair of COM_STMT_EXECUTE, checked.
pub(crate) fn param_type(ty: u8, flags: u8) -> Result<(ColumnType, bool), ProtocolError> {
    let column_type = ColumnType::try_from(ty).map_err(|_| ProtocolError::UnknownParamType(ty))?;
    if param_kind(column_type).is_none() {
        return Err(ProtocolError::UnknownParamType(ty));
    }
    Ok((column_type, flags & 0x80 != 0))
}

/// Reads one non-NULL parameter value of type `ty` from the front of `buf`.
pub(crate) fn read_param(
    buf: &mut ParseBuf<'_>,
    (ty, unsigned): (ColumnType, bool),
) -> Result<Param, ProtocolError> {
    match param_kind(ty) {
        None => Err(ProtocolError::UnknownParamType(ty as u8)),
        Some(ParamKind::Null) => Ok(Param::Null),
        Some(ParamKind::Decoded) => {
            let flags = if unsigned {
                ColumnFlags::UNSIGNED_FLAG
            } else {
                ColumnFlags::empty()
            };
            let value =
                ValueDeserializer::<BinValue>::deserialize((ty, flags), buf).map_err(|_| {
                    ProtocolError::Truncated {
                        what: "COM_STMT_EXECUTE parameter value",
                    }
                })?;
            Ok(param_from(ty, value.0))
        }
    }
}

fn param_from(ty: ColumnType, value: mysql_common::Value) -> Param {
    use mysql_common::Value as V;
    match value {
        V::NULL => Param::Null,
        V::Int(v) => Param::Int(v),
        V::UInt(v) => match i64::try_from(v) {
            Ok(v) => Param::Int(v),
            Err(_) => Param::UInt(v),
        },
        V::Float(v) => Param::Double(f64::from(v)),
        V::Double(v) => Param::Double(v),
        V::Bytes(bytes) => Param::Bytes(bytes),
        V::Date(year, month, day, hour, minute, second, micros) => {
            let text = if matches!(
                ty,
                ColumnType::MYSQL_TYPE_DATE | ColumnType::MYSQL_TYPE_NEWDATE
            ) {
                format!("{year:04}-{month:02}-{day:02}")
            } else {
                let mut text =
                    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}");
                push_micros(&mut text, micros);
                text
            };
            Param::Bytes(text.into_bytes())
        }
        V::Time(negative, days, hours, minutes, seconds, micros) => {
            let hours = u64::from(days) * 24 + u64::from(hours);
            let sign = if negative { "-" } else { "" };
            let mut text = format!("{sign}{hours:02}:{minutes:02}:{seconds:02}");
            push_micros(&mut text, micros);
            Param::Bytes(text.into_bytes())
        }
    }
}

fn push_micros(text: &mut String, micros: u32) {
    if micros != 0 {
        text.push_str(&format!(".{micros:06}"));
    }
}

/// Appends a double as MySQL 8 prints it (see the module docs).
pub(crate) fn push_double(out: &mut Vec<u8>, value: f64) {
    out.extend_from_slice(double_text(value).as_bytes());
}

/// MySQL 8's text for a double: `my_gcvt(value, MY_GCVT_ARG_DOUBLE, 341)`.
pub fn double_text(value: f64) -> String {
    if !value.is_finite() {
        return "0".to_string();
    }
    // Rust's `{:e}` gives the shortest digits that round-trip, like dtoa's
    // mode 0, as `d[.ddd]e[-]x`.
    let scientific = format!("{:e}", value.abs());
    let (mantissa, exponent) = match scientific.split_once('e') {
        Some(parts) => parts,
        None => return format!("{value}"),
    };
    let Ok(exponent) = exponent.parse::<i32>() else {
        return format!("{value}");
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let len = digits.len() as i32;
    // dtoa's decpt: the decimal point sits after `decpt` digits.
    let decpt = exponent + 1;
    let mut text = String::new();
    if value.is_sign_negative() {
        text.push('-');
    }
    // my_gcvt keeps 'f' format for -14 <= decpt <= 15 (DBL_DIG), or when
    // digits follow the point; width 341 always has room for them.
    if decpt >= -14 && (decpt <= 15 || len > decpt) {
        if decpt <= 0 {
            text.push_str("0.");
            for _ in decpt..0 {
                text.push('0');
            }
            text.push_str(&digits);
        } else if decpt < len {
            let (int, frac) = digits.split_at(decpt as usize);
            text.push_str(int);
            text.push('.');
            text.push_str(frac);
        } else {
            text.push_str(&digits);
            for _ in len..decpt {
                text.push('0');
            }
        }
    } else {
        let (first, rest) = digits.split_at(1);
        text.push_str(first);
        if !rest.is_empty() {
            text.push('.');
            text.push_str(rest);
        }
        text.push('e');
        text.push_str(&(decpt - 1).to_string());
    }
    text
}

/// Appends the text-protocol form of `value` (without its length prefix).
pub(crate) fn push_text(out: &mut Vec<u8>, value: &Value<'_>) {
    match value {
        Value::Null => {}
        Value::Int(v) => out.extend_from_slice(v.to_string().as_bytes()),
        Value::UInt(v) => out.extend_from_slice(v.to_string().as_bytes()),
        Value::Double(v) => push_double(out, *v),
        Value::Bytes(bytes) => out.extend_from_slice(bytes),
    }
}

/// Appends the binary-protocol form of non-NULL `value` for a column of
/// type `ty`; `column` numbers the errors.
pub(crate) fn push_binary(
    out: &mut Vec<u8>,
    (ty, unsigned): (ColumnType, bool),
    value: &Value<'_>,
    column: usize,
) -> Result<(), ProtocolError> {
    use ColumnType::*;
    let mismatch = ProtocolError::ValueTypeMismatch { column };
    let out_of_range = ProtocolError::ValueOutOfRange { column };
    match ty {
        MYSQL_TYPE_TINY | MYSQL_TYPE_SHORT | MYSQL_TYPE_YEAR | MYSQL_TYPE_LONG
        | MYSQL_TYPE_INT24 | MYSQL_TYPE_LONGLONG => {
            let wide: i128 = match value {
                Value::Int(v) => i128::from(*v),
                Value::UInt(v) => i128::from(*v),
                _ => return Err(mismatch),
            };
            let bytes = match ty {
                MYSQL_TYPE_TINY => 1,
                MYSQL_TYPE_SHORT | MYSQL_TYPE_YEAR => 2,
                MYSQL_TYPE_LONG | MYSQL_TYPE_INT24 => 4,
                _ => 8,
            };
            let bits = bytes * 8;
            let (min, max) = if unsigned {
                (0, (1i128 << bits) - 1)
            } else {
                (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
            };
            if wide < min || wide > max {
                return Err(out_of_range);
            }
            out.extend_from_slice(&wide.to_le_bytes()[..bytes]);
        }
        MYSQL_TYPE_FLOAT => match value {
            Value::Double(v) => out.extend_from_slice(&(*v as f32).to_le_bytes()),
            Value::Int(v) => out.extend_from_slice(&(*v as f32).to_le_bytes()),
            Value::UInt(v) => out.extend_from_slice(&(*v as f32).to_le_bytes()),
            _ => return Err(mismatch),
        },
        MYSQL_TYPE_DOUBLE => match value {
            Value::Double(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Int(v) => out.extend_from_slice(&(*v as f64).to_le_bytes()),
            Value::UInt(v) => out.extend_from_slice(&(*v as f64).to_le_bytes()),
            _ => return Err(mismatch),
        },
        MYSQL_TYPE_DECIMAL
        | MYSQL_TYPE_NEWDECIMAL
        | MYSQL_TYPE_VARCHAR
        | MYSQL_TYPE_VAR_STRING
        | MYSQL_TYPE_STRING
        | MYSQL_TYPE_TINY_BLOB
        | MYSQL_TYPE_MEDIUM_BLOB
        | MYSQL_TYPE_LONG_BLOB
        | MYSQL_TYPE_BLOB
        | MYSQL_TYPE_ENUM
        | MYSQL_TYPE_SET
        | MYSQL_TYPE_BIT
        | MYSQL_TYPE_GEOMETRY
        | MYSQL_TYPE_JSON
        | MYSQL_TYPE_VECTOR => match value {
            Value::Bytes(bytes) => out.put_lenenc_str(bytes),
            Value::Null => return Err(mismatch),
            number => {
                let mut text = Vec::new();
                push_text(&mut text, number);
                out.put_lenenc_str(&text);
            }
        },
        MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE | MYSQL_TYPE_DATETIME | MYSQL_TYPE_TIMESTAMP => {
            let Value::Bytes(text) = value else {
                return Err(mismatch);
            };
            let (year, month, day, hour, minute, second, micros) =
                parse_datetime(text).ok_or(ProtocolError::BadTemporalValue { column })?;
            let date = if matches!(ty, MYSQL_TYPE_DATE | MYSQL_TYPE_NEWDATE) {
                mysql_common::Value::Date(year, month, day, 0, 0, 0, 0)
            } else {
                mysql_common::Value::Date(year, month, day, hour, minute, second, micros)
            };
            date.serialize(out);
        }
        MYSQL_TYPE_TIME => {
            let Value::Bytes(text) = value else {
                return Err(mismatch);
            };
            let (negative, hours, minutes, seconds, micros) =
                parse_time(text).ok_or(ProtocolError::BadTemporalValue { column })?;
            let days = u32::try_from(hours / 24)
                .map_err(|_| ProtocolError::BadTemporalValue { column })?;
            let time = mysql_common::Value::Time(
                negative,
                days,
                (hours % 24) as u8,
                minutes,
                seconds,
                micros,
            );
            time.serialize(out);
        }
        MYSQL_TYPE_NULL => return Err(mismatch),
        MYSQL_TYPE_TIMESTAMP2
        | MYSQL_TYPE_DATETIME2
        | MYSQL_TYPE_TIME2
        | MYSQL_TYPE_TYPED_ARRAY
        | MYSQL_TYPE_UNKNOWN => return Err(ProtocolError::UnsupportedColumnType(ty as u8)),
    }
    Ok(())
}

/// Parses a non-empty run of ASCII digits.
fn digits(text: &[u8]) -> Option<u32> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    text.iter().try_fold(0u32, |n, d| {
        n.checked_mul(10)?.checked_add(u32::from(d - b'0'))
    })
}

/// `.f` to `.ffffff`, as microseconds.
fn fraction(text: &[u8]) -> Option<u32> {
    if text.len() > 6 {
        return None;
    }
    let value = digits(text)?;
    Some(value * 10u32.pow(6 - text.len() as u32))
}

/// `hh:mm:ss[.f…]` with two-digit minutes and seconds; hours of any width.
fn parse_clock(text: &[u8]) -> Option<(u64, u8, u8, u32)> {
    let (clock, micros) = match text.iter().position(|b| *b == b'.') {
        Some(dot) => (&text[..dot], fraction(&text[dot + 1..])?),
        None => (text, 0),
    };
    let mut parts = clock.split(|b| *b == b':');
    let hours = parts.next()?;
    let minutes = parts.next()?;
    let seconds = parts.next()?;
    if parts.next().is_some() || minutes.len() != 2 || seconds.len() != 2 || hours.len() > 9 {
        return None;
    }
    let (minutes, seconds) = (digits(minutes)?, digits(seconds)?);
    if minutes > 59 || seconds > 59 {
        return None;
    }
    Some((
        u64::from(digits(hours)?),
        minutes as u8,
        seconds as u8,
        micros,
    ))
}

type DateTime = (u16, u8, u8, u8, u8, u8, u32);

/// `YYYY-MM-DD[ hh:mm:ss[.f…]]`, as MySQL prints DATE and DATETIME values.
pub(crate) fn parse_datetime(text: &[u8]) -> Option<DateTime> {
    let (date, clock) = match text.len() {
        10 => (text, None),
        len if len >= 19 && text[10] == b' ' => (&text[..10], Some(&text[11..])),
        _ => return None,
    };
    if date[4] != b'-' || date[7] != b'-' {
        return None;
    }
    let year = digits(&date[..4])? as u16;
    let month = digits(&date[5..7])? as u8;
    let day = digits(&date[8..10])? as u8;
    let (hour, minute, second, micros) = match clock {
        None => (0, 0, 0, 0),
        Some(clock) => {
            if clock.len() < 8 || clock[2] != b':' {
                return None;
            }
            let (hours, minutes, seconds, micros) = parse_clock(clock)?;
            if hours > 23 {
                return None;
            }
            (hours as u8, minutes, seconds, micros)
        }
    };
    Some((year, month, day, hour, minute, second, micros))
}

/// `[-]h…h:mm:ss[.f…]`, as MySQL prints TIME values.
pub(crate) fn parse_time(text: &[u8]) -> Option<(bool, u64, u8, u8, u32)> {
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (hours, minutes, seconds, micros) = parse_clock(text)?;
    Some((negative, hours, minutes, seconds, micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_mysql_8() {
        // Expected texts follow my_gcvt(x, MY_GCVT_ARG_DOUBLE, 341) as
        // String::set_real calls it for DOUBLE results.
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (100.0, "100"),
            (0.1, "0.1"),
            (-1.5, "-1.5"),
            (123.456, "123.456"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e14, "100000000000000"),
            (1e15, "1e15"),
            (1e20, "1e20"),
            (-1e20, "-1e20"),
            (123456789012345680000.0, "1.2345678901234568e20"),
            (1234567890123456.7, "1234567890123456.8"),
            (0.001, "0.001"),
            (1.5e-7, "0.00000015"),
            (1e-15, "0.000000000000001"),
            (1e-16, "1e-16"),
            (2.5e-300, "2.5e-300"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e308"),
            (f64::NAN, "0"),
            (f64::INFINITY, "0"),
        ];
        for (value, expected) in cases {
            assert_eq!(double_text(*value), *expected, "{value:e}");
        }
    }

    #[test]
    fn datetimes_parse() {
        assert_eq!(
            parse_datetime(b"2024-01-02"),
            Some((2024, 1, 2, 0, 0, 0, 0))
        );
        assert_eq!(
            parse_datetime(b"2024-01-02 03:04:05"),
            Some((2024, 1, 2, 3, 4, 5, 0))
        );
        assert_eq!(
            parse_datetime(b"2024-01-02 03:04:05.5"),
            Some((2024, 1, 2, 3, 4, 5, 500_000))
        );
        assert_eq!(
            parse_datetime(b"0000-00-00 00:00:00.000001"),
            Some((0, 0, 0, 0, 0, 0, 1))
        );
        for bad in [
            &b""[..],
            b"2024-1-02",
            b"2024/01/02",
            b"2024-01-02T03:04:05",
            b"2024-01-02 3:04:05",
            b"2024-01-02 24:00:00",
            b"2024-01-02 03:04:05.1234567",
            b"2024-01-02 03:04:05.",
            b"2024-01-02 03:04",
            b"2024-01-0x",
            b"+024-01-02",
        ] {
            assert_eq!(
                parse_datetime(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn times_parse() {
        assert_eq!(parse_time(b"00:00:00"), Some((false, 0, 0, 0, 0)));
        assert_eq!(parse_time(b"-838:59:59"), Some((true, 838, 59, 59, 0)));
        assert_eq!(
            parse_time(b"12:34:56.000789"),
            Some((false, 12, 34, 56, 789))
        );
        for bad in [
            &b""[..],
            b"1:2:3",
            b"12:60:00",
            b"12:00",
            b"--1:00:00",
            b"a:00:00",
        ] {
            assert_eq!(parse_time(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn binary(ty: ColumnType, unsigned: bool, value: Value<'_>) -> Result<Vec<u8>, ProtocolError> {
        let mut out = Vec::new();
        push_binary(&mut out, (ty, unsigned), &value, 0).map(|()| out)
    }

    #[test]
    fn integers_are_range_checked_per_width() {
        use ColumnType::*;
        assert_eq!(
            binary(MYSQL_TYPE_TINY, false, Value::Int(-128)),
            Ok(vec![0x80])
        );
        assert_eq!(
            binary(MYSQL_TYPE_TINY, true, Value::Int(255)),
            Ok(vec![0xff])
        );
        assert_eq!(
            binary(MYSQL_TYPE_TINY, false, Value::Int(128)),
            Err(ProtocolError::ValueOutOfRange { column: 0 })
        );
        assert_eq!(
            binary(MYSQL_TYPE_LONG, true, Value::Int(-1)),
            Err(ProtocolError::ValueOutOfRange { column: 0 })
        );
        assert_eq!(
            binary(MYSQL_TYPE_LONGLONG, true, Value::UInt(u64::MAX)),
            Ok(vec![0xff; 8])
        );
        assert_eq!(
            binary(MYSQL_TYPE_LONGLONG, false, Value::UInt(u64::MAX)),
            Err(ProtocolError::ValueOutOfRange { column: 0 })
        );
        assert_eq!(
            binary(MYSQL_TYPE_SHORT, false, Value::Int(-2)),
            Ok(vec![0xfe, 0xff])
        );
        assert_eq!(
            binary(MYSQL_TYPE_LONG, false, Value::Bytes(b"1")),
            Err(ProtocolError::ValueTypeMismatch { column: 0 })
        );
    }

    #[test]
    fn numbers_in_string_columns_use_their_text() {
        assert_eq!(
            binary(
                ColumnType::MYSQL_TYPE_NEWDECIMAL,
                false,
                Value::Double(12.5)
            ),
            Ok(b"\x0412.5".to_vec())
        );
        assert_eq!(
            binary(ColumnType::MYSQL_TYPE_VAR_STRING, false, Value::Int(-7)),
            Ok(b"\x02-7".to_vec())
        );
    }

    #[test]
    fn temporal_values_use_the_shortest_binary_form() {
        use ColumnType::*;
        let cases: &[(ColumnType, &[u8], &[u8])] = &[
            (MYSQL_TYPE_DATE, b"0000-00-00", b"\x00"),
            (MYSQL_TYPE_DATE, b"2024-01-02", b"\x04\xe8\x07\x01\x02"),
            (
                MYSQL_TYPE_DATE,
                b"2024-01-02 03:04:05",
                b"\x04\xe8\x07\x01\x02",
            ),
            (MYSQL_TYPE_DATETIME, b"2024-01-02", b"\x04\xe8\x07\x01\x02"),
            (
                MYSQL_TYPE_DATETIME,
                b"2024-01-02 03:04:05",
                b"\x07\xe8\x07\x01\x02\x03\x04\x05",
            ),
            (
                MYSQL_TYPE_TIMESTAMP,
                b"2024-01-02 03:04:05.000006",
                b"\x0b\xe8\x07\x01\x02\x03\x04\x05\x06\x00\x00\x00",
            ),
            (MYSQL_TYPE_TIME, b"00:00:00", b"\x00"),
            (
                MYSQL_TYPE_TIME,
                b"-838:59:59",
                b"\x08\x01\x22\x00\x00\x00\x16\x3b\x3b",
            ),
            (
                MYSQL_TYPE_TIME,
                b"01:02:03.5",
                b"\x0c\x00\x00\x00\x00\x00\x01\x02\x03\x20\xa1\x07\x00",
            ),
        ];
        for (ty, text, expected) in cases {
            assert_eq!(
                binary(*ty, false, Value::Bytes(text)).as_deref(),
                Ok(*expected),
                "{ty:?} {:?}",
                String::from_utf8_lossy(text)
            );
        }
        assert_eq!(
            binary(MYSQL_TYPE_DATE, false, Value::Bytes(b"yesterday")),
            Err(ProtocolError::BadTemporalValue { column: 0 })
        );
        assert_eq!(
            binary(MYSQL_TYPE_TIME, false, Value::Int(5)),
            Err(ProtocolError::ValueTypeMismatch { column: 0 })
        );
    }

    #[test]
    fn internal_types_are_refused() {
        assert_eq!(
            binary(ColumnType::MYSQL_TYPE_DATETIME2, false, Value::Bytes(b"x")),
            Err(ProtocolError::UnsupportedColumnType(18))
        );
        assert_eq!(param_type(18, 0), Err(ProtocolError::UnknownParamType(18)));
        assert_eq!(param_type(30, 0), Err(ProtocolError::UnknownParamType(30)));
        assert_eq!(
            param_type(8, 0x80),
            Ok((ColumnType::MYSQL_TYPE_LONGLONG, true))
        );
    }
}
