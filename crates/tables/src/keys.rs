//! Values as key bytes that sort as the values do ("memcomparable"): the engine keys of
//! rows and unique-index entries, and the entries of ordered indexes in memory.
//!
//! - signed integers: 8 bytes big-endian with the sign bit flipped;
//! - unsigned integers: 8 bytes big-endian;
//! - DOUBLE: its bits big-endian, all of them flipped if negative, else the sign bit;
//! - DECIMAL: its units (`i128`, a column's values all of one scale) as 16 bytes
//!   big-endian with the sign bit flipped;
//! - bytes: as they are when they end the key ([`Position::Last`]); inside a longer
//!   key each 0x00 becomes 0x00 0xFF and 0x00 0x01 ends them, so a shorter value still
//!   sorts first.
//!
//! Strings compare byte by byte, as under MySQL's `_bin` collations, or by their
//! weights under a case-insensitive one ([`encode_as`]).

use crate::collation::Rule;
use crate::error::Error;
use crate::row::Reader;
use crate::value::{ColumnType, Value};

/// Whether an encoded value ends its key or is followed by more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    Last,
    Inner,
}

/// The bytes [`encode`] appends for `value` at `position`.
pub fn encoded_len(value: &Value, position: Position) -> usize {
    match (value, position) {
        (Value::Null, _) => 0,
        (Value::Int(_) | Value::UInt(_) | Value::Double(_), _) => 8,
        (Value::Decimal(_), _) => 16,
        (Value::Bytes(b), Position::Last) => b.len(),
        (Value::Bytes(b), Position::Inner) => {
            b.len() + b.iter().filter(|&&byte| byte == 0).count() + 2
        }
    }
}

/// Appends the memcomparable encoding of `value` (not NULL) to `out`.
pub fn encode(value: &Value, position: Position, out: &mut Vec<u8>) {
    match value {
        Value::Null => debug_assert!(false, "NULL has no key"),
        Value::Int(v) => out.extend_from_slice(&((*v as u64) ^ (1 << 63)).to_be_bytes()),
        Value::UInt(v) => out.extend_from_slice(&v.to_be_bytes()),
        Value::Double(v) => {
            let bits = v.to_bits();
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits ^ (1 << 63)
            };
            out.extend_from_slice(&ordered.to_be_bytes());
        }
        Value::Decimal(v) => {
            out.extend_from_slice(&((v.units as u128) ^ (1 << 127)).to_be_bytes());
        }
        Value::Bytes(b) => match position {
            Position::Last => out.extend_from_slice(b),
            Position::Inner => {
                for &byte in b {
                    out.push(byte);
                    if byte == 0 {
                        out.push(0xff);
                    }
                }
                out.extend_from_slice(&[0, 1]);
            }
        },
    }
}

/// [`encode`] under a collation's rule: a folded text's key is its weights
/// ([`crate::collation`]), so keys compare as the collation compares the values.
pub fn encode_as(value: &Value, rule: Rule, position: Position, out: &mut Vec<u8>) {
    match (value, rule) {
        (Value::Bytes(b), Rule::Folded { .. }) => {
            let mut weights = Vec::with_capacity(b.len() * 2);
            rule.key_bytes(b, &mut weights);
            encode(&Value::Bytes(weights), position, out);
        }
        _ => encode(value, position, out),
    }
}

/// The value as its key compares under `rule`: itself, or a text's weights (what
/// [`decode`] reads back from a key [`encode_as`] made).
pub fn comparable(value: &Value, rule: Rule) -> std::borrow::Cow<'_, Value> {
    match (value, rule) {
        (Value::Bytes(b), Rule::Folded { .. }) => {
            let mut weights = Vec::with_capacity(b.len() * 2);
            rule.key_bytes(b, &mut weights);
            std::borrow::Cow::Owned(Value::Bytes(weights))
        }
        _ => std::borrow::Cow::Borrowed(value),
    }
}

/// Reads back one value of type `ty` encoded at `position` from the front of `r`.
pub fn decode(r: &mut Reader<'_>, ty: ColumnType, position: Position) -> Result<Value, Error> {
    let fixed = |r: &mut Reader<'_>| -> Result<u64, Error> {
        let mut b = [0u8; 8];
        b.copy_from_slice(r.take(8)?);
        Ok(u64::from_be_bytes(b))
    };
    Ok(match ty {
        ty if ty.is_signed_integer() => Value::Int((fixed(r)? ^ (1 << 63)) as i64),
        ty if ty.is_unsigned_integer() => Value::UInt(fixed(r)?),
        ColumnType::Double => {
            let ordered = fixed(r)?;
            let bits = if ordered >> 63 == 1 {
                ordered ^ (1 << 63)
            } else {
                !ordered
            };
            Value::Double(f64::from_bits(bits))
        }
        ColumnType::Decimal(_, scale) => {
            let mut b = [0u8; 16];
            b.copy_from_slice(r.take(16)?);
            Value::Decimal(crate::Decimal {
                units: (u128::from_be_bytes(b) ^ (1 << 127)) as i128,
                scale,
            })
        }
        _ => match position {
            Position::Last => Value::Bytes(r.take(r.buf.len())?.to_vec()),
            Position::Inner => {
                let mut out = Vec::new();
                loop {
                    match r.u8()? {
                        0 => match r.u8()? {
                            0xff => out.push(0),
                            1 => break,
                            _ => return Err(Error::Format("bad key escape".into())),
                        },
                        b => out.push(b),
                    }
                }
                Value::Bytes(out)
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(v: &Value, position: Position) -> Vec<u8> {
        let mut out = Vec::new();
        encode(v, position, &mut out);
        out
    }

    fn round_trip(v: &Value, ty: ColumnType) {
        for position in [Position::Last, Position::Inner] {
            let bytes = key(v, position);
            let mut r = Reader { buf: &bytes };
            assert_eq!(decode(&mut r, ty, position).as_ref(), Ok(v));
            assert!(r.buf.is_empty());
        }
    }

    proptest! {
        #[test]
        fn signed_keys_sort_as_numbers(a in any::<i64>(), b in any::<i64>()) {
            let (ka, kb) = (key(&Value::Int(a), Position::Last), key(&Value::Int(b), Position::Last));
            prop_assert_eq!(a.cmp(&b), ka.cmp(&kb));
            round_trip(&Value::Int(a), ColumnType::BigInt);
        }

        #[test]
        fn unsigned_keys_sort_as_numbers(a in any::<u64>(), b in any::<u64>()) {
            let (ka, kb) = (key(&Value::UInt(a), Position::Last), key(&Value::UInt(b), Position::Last));
            prop_assert_eq!(a.cmp(&b), ka.cmp(&kb));
            round_trip(&Value::UInt(a), ColumnType::BigIntUnsigned);
        }

        #[test]
        fn double_keys_sort_as_numbers(a in -1e300f64..1e300, b in -1e300f64..1e300) {
            let (ka, kb) = (key(&Value::Double(a), Position::Last), key(&Value::Double(b), Position::Last));
            prop_assert_eq!(a.partial_cmp(&b), Some(ka.cmp(&kb)));
            round_trip(&Value::Double(a), ColumnType::Double);
        }

        #[test]
        fn decimal_keys_sort_as_numbers(a in -(10i128.pow(38) - 1)..10i128.pow(38), b in any::<i64>()) {
            let (da, db) = (crate::Decimal { units: a, scale: 4 }, crate::Decimal { units: b.into(), scale: 4 });
            let (ka, kb) = (key(&Value::Decimal(da), Position::Last), key(&Value::Decimal(db), Position::Inner));
            prop_assert_eq!(a.cmp(&b.into()), ka.cmp(&kb));
            round_trip(&Value::Decimal(da), ColumnType::Decimal(38, 4));
        }

        #[test]
        fn inner_byte_keys_sort_as_their_bytes_whatever_follows(
            a in proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..6),
            b in proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), any::<u8>()], 0..6),
            ta in any::<u8>(), tb in any::<u8>(),
        ) {
            let mut ka = key(&Value::Bytes(a.clone()), Position::Inner);
            let mut kb = key(&Value::Bytes(b.clone()), Position::Inner);
            if a != b {
                ka.push(ta);
                kb.push(tb);
                prop_assert_eq!(a.cmp(&b), ka.cmp(&kb));
            }
            round_trip(&Value::Bytes(a), ColumnType::Blob);
        }
    }
}
