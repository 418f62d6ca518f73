//! Column types and the values a column holds: checked against the type when they come
//! in (from a memcached value's field, a key, a DDL default), and written out as the
//! text a memcached client reads.
//!
//! The rules are MySQL's in strict mode, where they are simple enough to state: an
//! integer column takes an optional sign and decimal digits within its range; a DOUBLE
//! takes a finite decimal number; VARCHAR(n) and CHAR(n) take UTF-8 text of at most n
//! characters (CHAR drops trailing spaces, as MySQL returns it); TEXT takes UTF-8 and
//! BLOB any bytes, each at most 65,535 bytes. Anything else is refused with a reason,
//! never truncated or converted quietly.

use std::fmt;

use crate::decimal::{Decimal, DecimalError};
use crate::error::{value_error, Error};

/// The largest TEXT or BLOB value, as MySQL's.
pub const LONG_VALUE_MAX_BYTES: usize = 65_535;

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    TinyInt,
    TinyIntUnsigned,
    /// `BOOL`, `BOOLEAN`, `TINYINT(1)`: a TINYINT, shown as `tinyint(1)`.
    Bool,
    SmallInt,
    SmallIntUnsigned,
    MediumInt,
    MediumIntUnsigned,
    Int,
    IntUnsigned,
    BigInt,
    BigIntUnsigned,
    Double,
    /// `DECIMAL(precision, scale)` ([`crate::decimal`]).
    Decimal(u8, u8),
    /// `YYYY-MM-DD` ([`crate::temporal`]).
    Date,
    /// `YYYY-MM-DD HH:MM:SS` and this many fraction digits (0 to 6).
    DateTime(u8),
    /// A DATETIME within TIMESTAMP's range.
    Timestamp(u8),
    /// At most this many characters.
    Varchar(u32),
    /// At most this many characters; trailing spaces are not kept.
    Char(u32),
    Text,
    Blob,
    /// One of a list of strings, the column's `members` (`crate::schema::Column`).
    Enum,
}

impl fmt::Display for ColumnType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnType::TinyInt => f.write_str("TINYINT"),
            ColumnType::TinyIntUnsigned => f.write_str("TINYINT UNSIGNED"),
            ColumnType::Bool => f.write_str("TINYINT(1)"),
            ColumnType::SmallInt => f.write_str("SMALLINT"),
            ColumnType::SmallIntUnsigned => f.write_str("SMALLINT UNSIGNED"),
            ColumnType::MediumInt => f.write_str("MEDIUMINT"),
            ColumnType::MediumIntUnsigned => f.write_str("MEDIUMINT UNSIGNED"),
            ColumnType::Int => f.write_str("INT"),
            ColumnType::IntUnsigned => f.write_str("INT UNSIGNED"),
            ColumnType::BigInt => f.write_str("BIGINT"),
            ColumnType::BigIntUnsigned => f.write_str("BIGINT UNSIGNED"),
            ColumnType::Double => f.write_str("DOUBLE"),
            ColumnType::Decimal(p, s) => write!(f, "DECIMAL({p},{s})"),
            ColumnType::Date => f.write_str("DATE"),
            ColumnType::DateTime(0) => f.write_str("DATETIME"),
            ColumnType::DateTime(p) => write!(f, "DATETIME({p})"),
            ColumnType::Timestamp(0) => f.write_str("TIMESTAMP"),
            ColumnType::Timestamp(p) => write!(f, "TIMESTAMP({p})"),
            ColumnType::Varchar(n) => write!(f, "VARCHAR({n})"),
            ColumnType::Char(n) => write!(f, "CHAR({n})"),
            ColumnType::Text => f.write_str("TEXT"),
            ColumnType::Blob => f.write_str("BLOB"),
            ColumnType::Enum => f.write_str("ENUM"),
        }
    }
}

impl ColumnType {
    /// Whether values of this type are numbers (compared and encoded as numbers).
    pub fn is_numeric(self) -> bool {
        self.integer_range().is_some()
            || matches!(self, ColumnType::Double | ColumnType::Decimal(..))
    }

    /// An integer type's range, lowest and highest; None for the others.
    pub fn integer_range(self) -> Option<(i128, i128)> {
        Some(match self {
            ColumnType::TinyInt | ColumnType::Bool => (i8::MIN.into(), i8::MAX.into()),
            ColumnType::TinyIntUnsigned => (0, u8::MAX.into()),
            ColumnType::SmallInt => (i16::MIN.into(), i16::MAX.into()),
            ColumnType::SmallIntUnsigned => (0, u16::MAX.into()),
            ColumnType::MediumInt => (-(1 << 23), (1 << 23) - 1),
            ColumnType::MediumIntUnsigned => (0, (1 << 24) - 1),
            ColumnType::Int => (i32::MIN.into(), i32::MAX.into()),
            ColumnType::IntUnsigned => (0, u32::MAX.into()),
            ColumnType::BigInt => (i64::MIN.into(), i64::MAX.into()),
            ColumnType::BigIntUnsigned => (0, u64::MAX.into()),
            _ => return None,
        })
    }

    /// Whether every value a column of this type holds, as stored, is a value of
    /// `wider` with the same bytes in a row and in a key: what `ALTER TABLE ...
    /// MODIFY` may change without rewriting rows (an integer to one of the same
    /// signedness and a range at least as wide, text to longer text).
    pub fn widens_to(self, wider: ColumnType) -> bool {
        use ColumnType as T;
        if self == wider {
            return true;
        }
        if let (Some((lo, hi)), Some((wlo, whi))) = (self.integer_range(), wider.integer_range()) {
            return self.is_signed_integer() == wider.is_signed_integer() && wlo <= lo && hi <= whi;
        }
        match (self, wider) {
            (T::Varchar(n) | T::Char(n), T::Varchar(m)) => n <= m,
            (T::Char(n), T::Char(m)) => n <= m,
            (T::Varchar(_) | T::Char(_), T::Text) => true,
            (T::Timestamp(p), T::DateTime(q)) => p == q,
            (T::Decimal(p, s), T::Decimal(q, t)) => s == t && p <= q,
            _ => false,
        }
    }

    /// Whether this is VARCHAR, CHAR or TEXT: characters, compared by a collation.
    pub fn is_text(self) -> bool {
        matches!(
            self,
            ColumnType::Varchar(_) | ColumnType::Char(_) | ColumnType::Text
        )
    }

    /// Whether the column has a collation: text, and ENUM, whose members are
    /// matched by it.
    pub fn has_collation(self) -> bool {
        self.is_text() || self == ColumnType::Enum
    }

    /// Whether this is DATE, DATETIME or TIMESTAMP (values kept as canonical text).
    pub fn is_temporal(self) -> bool {
        matches!(
            self,
            ColumnType::Date | ColumnType::DateTime(_) | ColumnType::Timestamp(_)
        )
    }

    /// Whether this is a signed integer type (its values are [`Value::Int`]).
    pub fn is_signed_integer(self) -> bool {
        self.integer_range().is_some_and(|(lo, _)| lo < 0)
    }

    /// Whether this is an unsigned integer type (its values are [`Value::UInt`]).
    pub fn is_unsigned_integer(self) -> bool {
        self.integer_range().is_some_and(|(lo, _)| lo == 0)
    }

    /// Whether `v` is within this integer type's range.
    pub fn holds_integer(self, v: i128) -> bool {
        self.integer_range()
            .is_some_and(|(lo, hi)| lo <= v && v <= hi)
    }
}

/// A value a column holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    /// INT and BIGINT.
    Int(i64),
    /// INT UNSIGNED and BIGINT UNSIGNED.
    UInt(u64),
    /// DOUBLE; always finite, and never negative zero (stored as zero, as MySQL does).
    Double(f64),
    /// DECIMAL, at its column's scale.
    Decimal(Decimal),
    /// VARCHAR, CHAR and TEXT (valid UTF-8) and BLOB (any bytes).
    Bytes(Vec<u8>),
}

/// A value borrowed from a row's bytes: what reads that only show a row use, so its
/// text is not copied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    Null,
    Int(i64),
    UInt(u64),
    Double(f64),
    Decimal(Decimal),
    Bytes(&'a [u8]),
}

impl ValueRef<'_> {
    pub fn is_null(&self) -> bool {
        matches!(self, ValueRef::Null)
    }

    /// Whether the value is of `ty`'s kind: a number of its kind within its range, or
    /// bytes for a text column (not checked for UTF-8 or length). NULL is of every kind.
    pub fn is_kind_of(&self, ty: ColumnType) -> bool {
        match (*self, ty) {
            (ValueRef::Null, _) => true,
            (ValueRef::Int(v), ty) if ty.is_signed_integer() => ty.holds_integer(v.into()),
            (ValueRef::UInt(v), ty) if ty.is_unsigned_integer() => ty.holds_integer(v.into()),
            (ValueRef::Double(v), ColumnType::Double) => v.is_finite(),
            (ValueRef::Decimal(v), ColumnType::Decimal(p, s)) => v.fits(p, s),
            (ValueRef::Bytes(_), ty) => !ty.is_numeric(),
            _ => false,
        }
    }

    pub fn to_value(self) -> Value {
        match self {
            ValueRef::Null => Value::Null,
            ValueRef::Int(v) => Value::Int(v),
            ValueRef::UInt(v) => Value::UInt(v),
            ValueRef::Double(v) => Value::Double(v),
            ValueRef::Decimal(v) => Value::Decimal(v),
            ValueRef::Bytes(b) => Value::Bytes(b.to_vec()),
        }
    }

    /// The value as a memcached client reads it (NULL is the caller's to spell); a
    /// DOUBLE as the shortest decimal that reads back as the same number.
    pub fn write_text(&self, out: &mut Vec<u8>) {
        use std::io::Write as _;
        match self {
            ValueRef::Null => {}
            ValueRef::Int(v) => out.extend_from_slice(itoa::Buffer::new().format(*v).as_bytes()),
            ValueRef::UInt(v) => out.extend_from_slice(itoa::Buffer::new().format(*v).as_bytes()),
            // Writing to a Vec cannot fail.
            ValueRef::Double(v) => {
                let _ = write!(out, "{v}");
            }
            ValueRef::Decimal(v) => {
                let _ = write!(out, "{v}");
            }
            ValueRef::Bytes(b) => out.extend_from_slice(b),
        }
    }
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Int(v) => ValueRef::Int(*v),
            Value::UInt(v) => ValueRef::UInt(*v),
            Value::Double(v) => ValueRef::Double(*v),
            Value::Decimal(v) => ValueRef::Decimal(*v),
            Value::Bytes(b) => ValueRef::Bytes(b),
        }
    }

    /// The value as a memcached client reads it (NULL is the caller's to spell).
    pub fn write_text(&self, out: &mut Vec<u8>) {
        self.as_ref().write_text(out);
    }

    /// Checks that a value suits `ty`: its kind and range, and text's UTF-8 and length.
    pub fn suits(&self, ty: ColumnType) -> bool {
        match self {
            Value::Bytes(b) => check_bytes(b, ty).is_ok(),
            other => other.as_ref().is_kind_of(ty),
        }
    }
}

/// [`parse_text`] of a field the caller owns: text keeps its bytes, uncopied.
pub fn parse_owned(mut text: Vec<u8>, ty: ColumnType, column: &str) -> Result<Value, Error> {
    match ty {
        ColumnType::Varchar(_) | ColumnType::Char(_) | ColumnType::Text | ColumnType::Blob => {
            if let ColumnType::Char(_) = ty {
                let kept = trim_trailing_spaces(&text).len();
                text.truncate(kept);
            }
            check_bytes(&text, ty).map_err(|why| value_error!("column {column}: {why}"))?;
            Ok(Value::Bytes(text))
        }
        _ => parse_text(&text, ty, column),
    }
}

/// Parses one field's text as a value of `ty` (not NULL: the caller decides that).
/// `column` names the column in the error.
pub fn parse_text(text: &[u8], ty: ColumnType, column: &str) -> Result<Value, Error> {
    match ty {
        // Its members are the column's: `Column::parse_text`.
        ColumnType::Enum => Err(value_error!(
            "column {column}: an ENUM's value is one of its members"
        )),
        ty if ty.is_signed_integer() => {
            let v = parse_signed(text)
                .ok_or_else(|| value_error!("column {column} wants an integer"))?;
            if !ty.holds_integer(v.into()) {
                return Err(value_error!(
                    "value out of range for column {column} ({ty})"
                ));
            }
            Ok(Value::Int(v))
        }
        ty if ty.is_unsigned_integer() => {
            let v = parse_unsigned(text)
                .ok_or_else(|| value_error!("column {column} wants an unsigned integer"))?;
            if !ty.holds_integer(v.into()) {
                return Err(value_error!(
                    "value out of range for column {column} ({ty})"
                ));
            }
            Ok(Value::UInt(v))
        }
        ColumnType::Double => {
            let v =
                parse_double(text).ok_or_else(|| value_error!("column {column} wants a number"))?;
            Ok(Value::Double(v))
        }
        ColumnType::Decimal(p, s) => std::str::from_utf8(text)
            .map_err(|_| DecimalError::NotANumber)
            .and_then(|t| Decimal::parse(t, p, s))
            .map(Value::Decimal)
            .map_err(|e| match e {
                DecimalError::NotANumber => value_error!("column {column} wants a number"),
                DecimalError::OutOfRange => {
                    value_error!("value out of range for column {column} ({ty})")
                }
            }),
        ty if ty.is_temporal() => std::str::from_utf8(text)
            .ok()
            .and_then(|t| crate::temporal::canonical(t, ty))
            .map(|t| Value::Bytes(t.into_bytes()))
            .ok_or_else(|| {
                value_error!(
                    "Incorrect {} value: '{}' for column {column}",
                    crate::temporal::kind_name(ty),
                    String::from_utf8_lossy(text)
                )
            }),
        _ => {
            let text = match ty {
                ColumnType::Char(_) => trim_trailing_spaces(text),
                _ => text,
            };
            check_bytes(text, ty).map_err(|why| value_error!("column {column}: {why}"))?;
            Ok(Value::Bytes(text.to_vec()))
        }
    }
}

fn trim_trailing_spaces(text: &[u8]) -> &[u8] {
    let end = text.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    &text[..end]
}

/// Whether `bytes` may be stored in a string column of type `ty`.
fn check_bytes(bytes: &[u8], ty: ColumnType) -> Result<(), String> {
    let chars_max = match ty {
        ColumnType::Varchar(n) | ColumnType::Char(n) => Some(n as usize),
        ColumnType::Text | ColumnType::Blob | ColumnType::Enum => None,
        _ => return Err(format!("{ty} holds no text")),
    };
    if bytes.len() > LONG_VALUE_MAX_BYTES {
        return Err(format!("longer than {LONG_VALUE_MAX_BYTES} bytes"));
    }
    if ty == ColumnType::Blob {
        return Ok(());
    }
    let text = std::str::from_utf8(bytes).map_err(|_| "not valid UTF-8".to_string())?;
    if let Some(max) = chars_max {
        // Counting stops past the limit: a long value costs no more than a short one.
        if text.chars().take(max + 1).count() > max {
            return Err(format!("longer than {max} characters"));
        }
    }
    Ok(())
}

fn parse_unsigned(text: &[u8]) -> Option<u64> {
    let digits = text.strip_prefix(b"+").unwrap_or(text);
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    digits.iter().try_fold(0u64, |v, &d| {
        v.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

fn parse_signed(text: &[u8]) -> Option<i64> {
    match text.strip_prefix(b"-") {
        Some(digits) if !digits.starts_with(b"+") => {
            let magnitude = parse_unsigned(digits)?;
            0i64.checked_sub_unsigned(magnitude)
        }
        _ => i64::try_from(parse_unsigned(text)?).ok(),
    }
}

/// A finite decimal number: sign, digits, an optional fraction and exponent. Rust's
/// own parser also takes `inf`, `NaN` and `infinity`, which MySQL refuses.
fn parse_double(text: &[u8]) -> Option<f64> {
    let valid = !text.is_empty()
        && text
            .iter()
            .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E'))
        && text.iter().any(u8::is_ascii_digit);
    if !valid {
        return None;
    }
    let v: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    // Negative zero is stored as zero, so that equal numbers have one encoding.
    v.is_finite().then_some(if v == 0.0 { 0.0 } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, ty: ColumnType, expected: Result<Value, &str>) {
        let got = parse_text(text.as_bytes(), ty, "c");
        match expected {
            Ok(v) => {
                assert_eq!(got, Ok(v.clone()), "{text:?} as {ty}");
                assert!(v.suits(ty), "{v:?} suits {ty}");
            }
            Err(why) => match got {
                Err(Error::Value(msg)) => assert!(msg.contains(why), "{text:?} as {ty}: {msg}"),
                other => panic!("{text:?} as {ty}: wanted an error, got {other:?}"),
            },
        }
    }

    #[test]
    fn fields_parse_as_mysql_strict_mode_takes_them() {
        use ColumnType::*;
        check("42", Int, Ok(Value::Int(42)));
        check("-2147483648", Int, Ok(Value::Int(-2147483648)));
        check("2147483648", Int, Err("out of range"));
        check("+7", Int, Ok(Value::Int(7)));
        check("-+7", Int, Err("wants an integer"));
        check("", Int, Err("wants an integer"));
        check("4 2", Int, Err("wants an integer"));
        check("12abc", BigInt, Err("wants an integer"));
        check("-9223372036854775808", BigInt, Ok(Value::Int(i64::MIN)));
        check("9223372036854775808", BigInt, Err("wants an integer"));
        check("-1", IntUnsigned, Err("wants an unsigned"));
        check("4294967295", IntUnsigned, Ok(Value::UInt(4294967295)));
        check("4294967296", IntUnsigned, Err("out of range"));
        check(
            "18446744073709551615",
            BigIntUnsigned,
            Ok(Value::UInt(u64::MAX)),
        );
        check(
            "18446744073709551616",
            BigIntUnsigned,
            Err("wants an unsigned"),
        );
        check("1.5e3", Double, Ok(Value::Double(1500.0)));
        check("-0", Double, Ok(Value::Double(0.0)));
        check("inf", Double, Err("wants a number"));
        check("NaN", Double, Err("wants a number"));
        check("1e999", Double, Err("wants a number"));
        check(".", Double, Err("wants a number"));
        check(
            "12.345",
            Decimal(5, 2),
            Ok(Value::Decimal(crate::Decimal {
                units: 1235,
                scale: 2,
            })),
        );
        check("1000", Decimal(5, 2), Err("out of range"));
        check("1,5", Decimal(5, 2), Err("wants a number"));
        check("héllo", Varchar(5), Ok(Value::Bytes("héllo".into())));
        check("héllo!", Varchar(5), Err("longer than 5 characters"));
        check("ab  ", Char(2), Ok(Value::Bytes(b"ab".to_vec())));
        check("", Varchar(0), Ok(Value::Bytes(Vec::new())));
        check("\u{1F600}", Char(1), Ok(Value::Bytes("\u{1F600}".into())));
    }

    #[test]
    fn text_must_be_utf8_and_blobs_need_not() {
        let bad = [0xff, 0xfe];
        assert!(parse_text(&bad, ColumnType::Text, "c").is_err());
        assert!(parse_text(&bad, ColumnType::Varchar(9), "c").is_err());
        assert_eq!(
            parse_text(&bad, ColumnType::Blob, "c"),
            Ok(Value::Bytes(bad.to_vec()))
        );
        let long = vec![b'x'; LONG_VALUE_MAX_BYTES + 1];
        assert!(parse_text(&long, ColumnType::Blob, "c").is_err());
        assert!(parse_text(&long[1..], ColumnType::Text, "c").is_ok());
    }

    #[test]
    fn values_are_written_as_they_are_read() {
        for (v, text) in [
            (Value::Int(-5), "-5"),
            (Value::UInt(5), "5"),
            (Value::Double(1500.0), "1500"),
            (Value::Double(0.25), "0.25"),
            (
                Value::Decimal(crate::Decimal {
                    units: -5,
                    scale: 2,
                }),
                "-0.05",
            ),
            (Value::Bytes(b"a|b".to_vec()), "a|b"),
        ] {
            let mut out = Vec::new();
            v.write_text(&mut out);
            assert_eq!(out, text.as_bytes());
        }
    }
}
