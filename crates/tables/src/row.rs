//! A row as the log keeps it: the value of the row's engine record. `docs/format.md`
//! documents the same layout; change both together.
//!
//! | size | field |
//! |---|---|
//! | 1 | row format version (1) |
//! | varint | number of columns n |
//! | n × | per column, in table order: a tag, then its payload |
//!
//! Tags: 0 NULL (no payload), 1 signed integer (8 bytes LE), 2 unsigned integer (8
//! bytes LE), 3 DOUBLE (its IEEE 754 bits, 8 bytes LE), 4 bytes (varint length, then
//! the bytes), 5 DECIMAL (its scale, 1 byte, then its units, 16 bytes LE, a two's
//! complement `i128`). Varints are LEB128, at most 10 bytes.
//!
//! A row may hold fewer columns than its table has now: the missing trailing columns
//! take their defaults (a column added after the row was written). A dropped column
//! keeps its place (`Table::dropped`): a row written before the drop holds its old
//! value there, which decoding passes over, and one written since a NULL. Decoding
//! checks every value against its column's type; a row that does not fit is a format
//! error, never a panic.

use crate::error::Error;
use crate::schema::Table;
use crate::value::{Value, ValueRef};

const ROW_FORMAT: u8 = 1;

/// A row's values borrowed from its bytes: on the stack for a table of up to 16
/// columns, as every read decodes one.
pub type Values<'a> = smallvec::SmallVec<[ValueRef<'a>; 16]>;

const TAG_NULL: u8 = 0;
const TAG_INT: u8 = 1;
const TAG_UINT: u8 = 2;
const TAG_DOUBLE: u8 = 3;
const TAG_BYTES: u8 = 4;
const TAG_DECIMAL: u8 = 5;

pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The bytes [`put_varint`] writes for `v`.
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Reads bytes off the front of a slice, failing instead of panicking.
pub struct Reader<'a> {
    pub buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        if self.buf.len() < n {
            return Err(Error::Format("ends early".into()));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }

    pub fn u64_le(&mut self) -> Result<u64, Error> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    pub fn varint(&mut self) -> Result<u64, Error> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::Format("varint longer than 10 bytes".into()))
    }

    /// A varint length, then that many bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], Error> {
        let len = self.varint()?;
        let len = usize::try_from(len).map_err(|_| Error::Format("length overflows".into()))?;
        self.take(len)
    }
}

/// Encodes a row of `values` (one per column, in table order), with a NULL at each
/// place of `dropped` (the table's dropped columns).
pub fn encode(values: &[Value], dropped: &[usize]) -> Vec<u8> {
    // Exactly the bytes it will hold: a row is copied once, never grown.
    let size: usize = values
        .iter()
        .map(|v| match v {
            Value::Null => 1,
            Value::Bytes(b) => 1 + varint_len(b.len() as u64) + b.len(),
            Value::Decimal(_) => 18,
            _ => 9,
        })
        .sum::<usize>()
        + dropped.len();
    let count = values.len() + dropped.len();
    let mut out = Vec::with_capacity(1 + varint_len(count as u64) + size);
    out.push(ROW_FORMAT);
    put_varint(&mut out, count as u64);
    let mut values = values.iter();
    for place in 0..count {
        if dropped.binary_search(&place).is_ok() {
            out.push(TAG_NULL);
            continue;
        }
        let Some(value) = values.next() else { break };
        match value {
            Value::Null => out.push(TAG_NULL),
            Value::Int(v) => {
                out.push(TAG_INT);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Value::UInt(v) => {
                out.push(TAG_UINT);
                out.extend_from_slice(&v.to_le_bytes());
            }
            Value::Double(v) => {
                out.push(TAG_DOUBLE);
                out.extend_from_slice(&v.to_bits().to_le_bytes());
            }
            Value::Decimal(v) => {
                out.push(TAG_DECIMAL);
                out.push(v.scale);
                out.extend_from_slice(&v.units.to_le_bytes());
            }
            Value::Bytes(b) => {
                out.push(TAG_BYTES);
                put_varint(&mut out, b.len() as u64);
                out.extend_from_slice(b);
            }
        }
    }
    out
}

/// Decodes a row of `table`, filling columns the row predates with their defaults.
pub fn decode(bytes: &[u8], table: &Table) -> Result<Vec<Value>, Error> {
    decode_used(bytes, table, u64::MAX)
}

/// [`decode`], borrowing text from `bytes` (and defaults from `table`) instead of
/// copying it. Each value's kind is checked against its column (a number in range, no
/// NULL where the column forbids it); text is not checked again for UTF-8 and length,
/// which every write checked and the record's CRC keeps.
pub fn decode_ref<'a>(bytes: &'a [u8], table: &'a Table) -> Result<Values<'a>, Error> {
    let mut values = Values::with_capacity(table.columns.len());
    decode_each(bytes, table, |value| values.push(value))?;
    Ok(values)
}

/// [`decode`] with only the columns in `used` decoded ([`column_used`]); the others
/// are NULL. Each value is checked as [`decode_ref`] checks it.
pub fn decode_used(bytes: &[u8], table: &Table, used: u64) -> Result<Vec<Value>, Error> {
    let mut values = Vec::with_capacity(table.columns.len());
    decode_each(bytes, table, |value| {
        values.push(match column_used(used, values.len()) {
            true => value.to_value(),
            false => Value::Null,
        })
    })?;
    Ok(values)
}

/// Whether SQLite's mask of the columns a statement uses, `used`, holds column `i`
/// (bit 63 stands for every column from the 64th on).
pub fn column_used(used: u64, i: usize) -> bool {
    i >= 63 || used & (1 << i) != 0
}

/// Decodes a row of `table` value by value, in column order, into `each` (see
/// [`decode_ref`]).
fn decode_each<'a>(
    bytes: &'a [u8],
    table: &'a Table,
    mut each: impl FnMut(ValueRef<'a>),
) -> Result<(), Error> {
    let mut r = Reader { buf: bytes };
    let version = r.u8()?;
    if version != ROW_FORMAT {
        return Err(Error::Format(format!("row format {version}")));
    }
    let count = r.varint()?;
    let places = table.columns.len() + table.dropped.len();
    if count > places as u64 {
        return Err(Error::Format(format!(
            "a row of {count} columns in table {} of {}",
            table.name, places
        )));
    }
    // The columns in order, and the places of dropped ones, each met in turn.
    let mut columns = table.columns.iter();
    let mut dropped = table.dropped.iter().copied().peekable();
    for place in 0..count as usize {
        let value = match r.u8()? {
            TAG_NULL => ValueRef::Null,
            TAG_INT => ValueRef::Int(r.u64_le()? as i64),
            TAG_UINT => ValueRef::UInt(r.u64_le()?),
            TAG_DOUBLE => ValueRef::Double(f64::from_bits(r.u64_le()?)),
            TAG_BYTES => ValueRef::Bytes(r.bytes()?),
            TAG_DECIMAL => {
                let scale = r.u8()?;
                let mut units = [0u8; 16];
                units.copy_from_slice(r.take(16)?);
                ValueRef::Decimal(crate::Decimal {
                    units: i128::from_le_bytes(units),
                    scale,
                })
            }
            tag => return Err(Error::Format(format!("row value tag {tag}"))),
        };
        if dropped.next_if_eq(&place).is_some() {
            continue;
        }
        let Some(column) = columns.next() else {
            return Err(Error::Format(format!(
                "a row of {count} values in table {}",
                table.name
            )));
        };
        if !value.is_kind_of(column.ty) || (value.is_null() && column.not_null) {
            return Err(Error::Format(format!(
                "column {} of table {} holds {value:?}",
                column.name, table.name
            )));
        }
        each(value);
    }
    if !r.buf.is_empty() {
        return Err(Error::Format(format!(
            "{} bytes after a row of table {}",
            r.buf.len(),
            table.name
        )));
    }
    for column in columns {
        let value = column
            .default
            .as_ref()
            .map_or(ValueRef::Null, Value::as_ref);
        if value.is_null() && column.not_null {
            return Err(Error::Format(format!(
                "a row of table {} without column {}, which has no default",
                table.name, column.name
            )));
        }
        each(value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::parse_schema;

    fn table() -> Table {
        parse_schema(
            "CREATE TABLE t (id INT PRIMARY KEY, u BIGINT UNSIGNED, d DOUBLE, s TEXT, b BLOB DEFAULT 'z')",
        )
        .unwrap()
        .remove(0)
    }

    #[test]
    fn rows_round_trip_and_bad_bytes_are_errors() {
        let t = table();
        let row = vec![
            Value::Int(-3),
            Value::UInt(u64::MAX),
            Value::Double(2.5),
            Value::Bytes(vec![b'x'; 300]),
            Value::Null,
        ];
        let bytes = encode(&row, &[]);
        assert_eq!(bytes.len(), bytes.capacity(), "sized exactly");
        assert_eq!(decode(&bytes, &t), Ok(row));
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut], &t).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer, &t).is_err());
        // A NULL primary key, or a number in a text column, does not fit the table;
        // nor does a row without its primary key.
        assert!(decode(&encode(&[Value::Null], &[]), &t).is_err());
        assert!(decode(&encode(&[], &[]), &t).is_err());
        assert!(decode(&encode(&[Value::Int(1), Value::Int(1)], &[]), &t).is_err());
    }

    #[test]
    fn varint_lengths_are_what_put_varint_writes() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            1 << 35,
            u64::MAX >> 1,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(varint_len(v), out.len(), "{v}");
        }
    }

    #[test]
    fn a_row_older_than_its_columns_gets_their_defaults() {
        let t = table();
        let values = decode(&encode(&[Value::Int(1)], &[]), &t).unwrap();
        assert_eq!(
            values,
            vec![
                Value::Int(1),
                Value::Null,
                Value::Null,
                Value::Null,
                Value::Bytes(b"z".to_vec())
            ]
        );
    }
}
