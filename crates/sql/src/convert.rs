//! Values between SQLite and Kura's columns: what a statement writes becomes a value of
//! the column's type under MySQL's strict mode (its error codes when it does not fit),
//! and a constraint's value becomes a key to look a row up by.

use kura_tables::decimal::DecimalError;
use kura_tables::{Column, ColumnType, Decimal, Value};
use rusqlite::types::ValueRef;

use crate::error::SqlError;

/// `v` as a value of `column`, as MySQL in strict mode stores it: numbers into text
/// columns as their text, numeric text into number columns, a fraction rounded into an
/// integer column; anything else, or out of range, is MySQL's error. `row` numbers the
/// row in its statement for the message.
pub fn to_column(v: ValueRef<'_>, column: &Column, row: u64) -> Result<Value, SqlError> {
    let name = &column.name;
    match v {
        ValueRef::Null if column.not_null => Err(SqlError::null(name)),
        ValueRef::Null => Ok(Value::Null),
        // A number names an ENUM's member by its place, from 1.
        ValueRef::Integer(n) if column.ty == ColumnType::Enum => column
            .member_at(n)
            .map_err(|_| SqlError::truncated(name, row)),
        ValueRef::Integer(n) => integer(n as i128, column, row),
        ValueRef::Real(f) => match column.ty {
            ColumnType::Double => Ok(double(f)),
            ColumnType::Decimal(p, s) => {
                decimal(Decimal::from_f64(f, p, s), column, row, || shortest(f))
            }
            ty if ty.is_numeric() => {
                if !f.is_finite() {
                    return Err(SqlError::out_of_range(name, row));
                }
                let rounded = f.round();
                if rounded.abs() > 1.9e19 {
                    return Err(SqlError::out_of_range(name, row));
                }
                integer(rounded as i128, column, row)
            }
            _ => text(shortest(f).into_bytes(), column, row),
        },
        ValueRef::Text(t) | ValueRef::Blob(t) => match column.ty {
            ColumnType::Decimal(p, s) => {
                let text = std::str::from_utf8(t).map_err(|_| DecimalError::NotANumber);
                decimal(
                    text.and_then(|t| Decimal::parse(t, p, s)),
                    column,
                    row,
                    || String::from_utf8_lossy(t).into_owned(),
                )
            }
            ColumnType::Double => {
                let s = std::str::from_utf8(t).unwrap_or("").trim();
                match s.parse::<f64>() {
                    Ok(f) if f.is_finite() => Ok(double(f)),
                    _ => Err(SqlError::bad_value(
                        "double",
                        &String::from_utf8_lossy(t),
                        name,
                        row,
                    )),
                }
            }
            ty if ty.is_numeric() => {
                let s = std::str::from_utf8(t).unwrap_or("").trim();
                if let Ok(n) = s.parse::<i128>() {
                    return integer(n, column, row);
                }
                match s.parse::<f64>() {
                    Ok(f) if f.is_finite() && f.round().abs() < 1.9e19 => {
                        integer(f.round() as i128, column, row)
                    }
                    _ => Err(SqlError::bad_value(
                        "integer",
                        &String::from_utf8_lossy(t),
                        name,
                        row,
                    )),
                }
            }
            _ => text(t.to_vec(), column, row),
        },
    }
}

fn double(f: f64) -> Value {
    // MySQL stores no negative zero.
    Value::Double(if f == 0.0 { 0.0 } else { f })
}

/// A DECIMAL made of `text()`, or MySQL's error for it.
fn decimal(
    made: Result<Decimal, DecimalError>,
    column: &Column,
    row: u64,
    text: impl FnOnce() -> String,
) -> Result<Value, SqlError> {
    match made {
        Ok(d) => Ok(Value::Decimal(d)),
        Err(DecimalError::OutOfRange) => Err(SqlError::out_of_range(&column.name, row)),
        Err(DecimalError::NotANumber) => {
            Err(SqlError::bad_value("decimal", &text(), &column.name, row))
        }
    }
}

fn integer(n: i128, column: &Column, row: u64) -> Result<Value, SqlError> {
    let name = &column.name;
    let range = |lo: i128, hi: i128| {
        if n < lo || n > hi {
            Err(SqlError::out_of_range(name, row))
        } else {
            Ok(())
        }
    };
    match column.ty {
        ty if ty.is_signed_integer() => {
            let (lo, hi) = ty.integer_range().unwrap_or((0, 0));
            range(lo, hi).map(|()| Value::Int(n as i64))
        }
        ty if ty.is_unsigned_integer() => {
            let (lo, hi) = ty.integer_range().unwrap_or((0, 0));
            range(lo, hi).map(|()| Value::UInt(n as u64))
        }
        ColumnType::Double => Ok(double(n as f64)),
        ColumnType::Decimal(p, s) => {
            decimal(Decimal::from_i128(n, p, s), column, row, || n.to_string())
        }
        _ => text(n.to_string().into_bytes(), column, row),
    }
}

fn text(bytes: Vec<u8>, column: &Column, row: u64) -> Result<Value, SqlError> {
    let name = &column.name;
    if column.ty == ColumnType::Enum {
        return column
            .parse_owned(bytes)
            .map_err(|_| SqlError::truncated(name, row));
    }
    if column.ty.is_temporal() {
        let text = String::from_utf8_lossy(&bytes);
        return match kura_tables::temporal::canonical(&text, column.ty) {
            Some(t) => Ok(Value::Bytes(t.into_bytes())),
            None => Err(SqlError::new(
                1292,
                b"22007",
                format!(
                    "Incorrect {} value: '{text}' for column '{name}' at row {row}",
                    kura_tables::temporal::kind_name(column.ty)
                ),
            )),
        };
    }
    match kura_tables::value::parse_owned(bytes, column.ty, name) {
        Ok(v) => Ok(v),
        Err(e) => {
            let why = e.to_string();
            if why.contains("longer than") {
                Err(SqlError::too_long(name, row))
            } else {
                Err(SqlError::bad_value("string", &why, name, row))
            }
        }
    }
}

/// A DECIMAL as SQLite computes with it: an integer when it has no fraction digits,
/// else the nearest double, which reads back as the same DECIMAL (a column's 15
/// digits at most are a double's exactly).
pub fn decimal_value(d: &Decimal) -> rusqlite::types::Value {
    match (d.scale == 0).then(|| d.to_i64()).flatten() {
        Some(n) => rusqlite::types::Value::Integer(n),
        None => rusqlite::types::Value::Real(d.to_f64()),
    }
}

/// A double's shortest text that reads back as the same double.
pub fn shortest(f: f64) -> String {
    let mut s = format!("{f}");
    if s.ends_with(".0") {
        s.truncate(s.len() - 2);
    }
    s
}

/// A constraint's value as a key of `column` for an exact lookup: None when no value of
/// the column can equal it (SQLite compares it with the column's values and finds none).
pub fn to_key(v: ValueRef<'_>, column: &Column) -> Option<Value> {
    match (v, column.ty) {
        (ValueRef::Null, _) => None,
        // An ENUM equals the text of a member (a number compares with it as text,
        // which no member's collation makes equal).
        (ValueRef::Text(t), ColumnType::Enum) => column.parse_text(t).ok(),
        (_, ColumnType::Enum) => None,
        // A time compares as the time it names, in the column's canonical form.
        (ValueRef::Text(t) | ValueRef::Blob(t), ty) if ty.is_temporal() => {
            let text = std::str::from_utf8(t).ok()?;
            kura_tables::temporal::canonical(text, ty).map(|c| Value::Bytes(c.into_bytes()))
        }
        (ValueRef::Integer(n), ty) if ty.is_temporal() => {
            kura_tables::temporal::canonical(&n.to_string(), ty)
                .map(|c| Value::Bytes(c.into_bytes()))
        }
        (ValueRef::Integer(n), ty) if ty.is_signed_integer() => Some(Value::Int(n)),
        (ValueRef::Integer(n), ty) if ty.is_unsigned_integer() => {
            u64::try_from(n).ok().map(Value::UInt)
        }
        // SQLite compares a DECIMAL as the double it reads ([`decimal_value`]): the
        // value equal to a number is the one whose double it is.
        (ValueRef::Integer(n), ColumnType::Decimal(p, s)) => {
            Decimal::from_i128(n.into(), p, s).ok().map(Value::Decimal)
        }
        (ValueRef::Real(f), ColumnType::Decimal(p, s)) => Decimal::from_f64(f, p, s)
            .ok()
            .filter(|d| d.to_f64() == f)
            .map(Value::Decimal),
        (ValueRef::Integer(n), ColumnType::Double) => Some(double(n as f64)),
        (ValueRef::Real(f), ColumnType::Double) => Some(double(f)),
        (ValueRef::Real(f), ty) if ty.is_numeric() => {
            if f.fract() != 0.0 || !f.is_finite() {
                return None;
            }
            to_key(ValueRef::Integer(f as i64), column)
        }
        (ValueRef::Text(t) | ValueRef::Blob(t), ty) if !ty.is_numeric() => {
            Some(Value::Bytes(t.to_vec()))
        }
        // A number column compares numeric text as its number (SQLite's affinity, and
        // MySQL's `id = '2'`).
        (ValueRef::Text(t), _) => to_key(ValueRef::from(&numeric(t)?), column),
        // A text column compares a number with its text.
        (ValueRef::Integer(n), _) => Some(Value::Bytes(n.to_string().into_bytes())),
        (ValueRef::Real(f), _) => Some(Value::Bytes(shortest(f).into_bytes())),
        _ => None,
    }
}

/// A range bound's value as a bound on `column`'s values, widened when it falls between
/// them (SQLite checks the constraint again on every row).
pub fn to_bound(v: ValueRef<'_>, column: &Column, lower: bool) -> Option<Value> {
    match (v, column.ty) {
        // The number rounded to the scale, widened by a unit: a value past it reads
        // as a double past the number (a unit is far more than a double's error over
        // a column's 15 digits at most).
        (ValueRef::Real(f), ColumnType::Decimal(_, s)) => {
            let d = Decimal::from_f64(f, kura_tables::decimal::MAX_DIGITS, s).ok()?;
            let units = if lower { d.units - 1 } else { d.units + 1 };
            Some(Value::Decimal(Decimal { units, scale: s }))
        }
        (ValueRef::Integer(n), ColumnType::Decimal(_, s)) => {
            let units = i128::from(n).checked_mul(10i128.pow(u32::from(s)))?;
            Some(Value::Decimal(Decimal { units, scale: s }))
        }
        (ValueRef::Real(f), ty) if ty.is_numeric() && ty != ColumnType::Double => {
            if !f.is_finite() || f.abs() > 9.0e18 {
                return None;
            }
            let n = if lower { f.floor() } else { f.ceil() };
            to_key(ValueRef::Integer(n as i64), column)
        }
        (ValueRef::Integer(n), ty) if ty.is_unsigned_integer() && n < 0 => {
            if lower {
                Some(Value::UInt(0))
            } else {
                None
            }
        }
        (ValueRef::Text(t), ty) if ty.is_numeric() => match numeric(t) {
            Some(n) => to_bound(ValueRef::from(&n), column, lower),
            None => to_key(v, column),
        },
        _ => to_key(v, column),
    }
}

/// Text that reads as a number, as that number (SQLite's numeric affinity converts
/// it so before comparing it with a number column).
fn numeric(t: &[u8]) -> Option<rusqlite::types::Value> {
    let s = std::str::from_utf8(t).ok()?.trim();
    if let Ok(n) = s.parse::<i64>() {
        return Some(rusqlite::types::Value::Integer(n));
    }
    s.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(rusqlite::types::Value::Real)
}
