//! A row as a memcached value: its fields joined by the table's separator, split back
//! exactly.
//!
//! The InnoDB memcached plugin split values with `strtok_r`, so empty fields vanished
//! (`a||c` became two fields) and extra ones were dropped without a word. Here a value
//! splits into exactly as many fields as it has separators plus one, and a wrong count
//! is an error. Escapes follow MySQL's `LOAD DATA` and `SELECT … INTO OUTFILE`:
//!
//! - `\N`, as a whole field, is NULL; an empty field is the empty string;
//! - `\\` is a backslash, and a backslash before the separator makes it part of the
//!   field (`\|`);
//! - any other backslash is an error, so no value means two things.
//!
//! Never panics on input (fuzzed): the splitter takes any bytes.

use crate::error::{value_error, Error};

/// One field of a value: NULL, or bytes with their escapes undone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    Null,
    Bytes(Vec<u8>),
}

/// Splits `value` into exactly `expected` fields at unescaped `separator` bytes.
pub fn split(value: &[u8], separator: u8, expected: usize) -> Result<Vec<Field>, Error> {
    // A row with nothing beside its key (a table of one column) is the empty value.
    if expected == 0 {
        return match value {
            [] => Ok(Vec::new()),
            _ => Err(value_error!(
                "the row has no fields beside its key: the value must be empty"
            )),
        };
    }
    let whole_field = || value_error!("\\N must be a whole field");
    let mut fields = Vec::with_capacity(expected);
    let mut rest = value;
    loop {
        // One field: runs of plain bytes copied at once, escapes undone between them.
        let mut current = Vec::new();
        // Whether the field so far is exactly the escape `\N`.
        let mut null = false;
        let at_separator = loop {
            let Some(i) = memchr::memchr2(separator, b'\\', rest) else {
                if null && !rest.is_empty() {
                    return Err(whole_field());
                }
                current.extend_from_slice(rest);
                rest = &[];
                break false;
            };
            if null && !(i == 0 && rest[0] == separator) {
                return Err(whole_field());
            }
            current.extend_from_slice(&rest[..i]);
            if rest[i] == separator {
                rest = &rest[i + 1..];
                break true;
            }
            match rest.get(i + 1) {
                Some(b'\\') => current.push(b'\\'),
                Some(&s) if s == separator => current.push(separator),
                Some(b'N') if current.is_empty() => null = true,
                Some(b'N') => return Err(whole_field()),
                Some(other) => {
                    return Err(value_error!(
                        "bad escape \\{} in a field (\\\\, \\{}, \\N are the escapes)",
                        other.escape_ascii(),
                        separator.escape_ascii()
                    ))
                }
                None => return Err(value_error!("a value may not end in a lone backslash")),
            }
            rest = &rest[i + 2..];
        };
        fields.push(if null {
            Field::Null
        } else {
            Field::Bytes(current)
        });
        if !at_separator {
            break;
        }
        if fields.len() >= expected {
            return Err(value_error!(
                "the value has more than the {expected} fields the row wants"
            ));
        }
    }
    if fields.len() != expected {
        return Err(value_error!(
            "the value has {} fields, the row wants {expected}",
            fields.len()
        ));
    }
    Ok(fields)
}

/// Appends one field to `out`, escaped so that [`split`] reads it back: runs of plain
/// bytes copied at once.
pub fn push_field(out: &mut Vec<u8>, field: Option<&[u8]>, separator: u8) {
    let Some(mut bytes) = field else {
        out.extend_from_slice(b"\\N");
        return;
    };
    while let Some(i) = memchr::memchr2(b'\\', separator, bytes) {
        out.extend_from_slice(&bytes[..i]);
        out.push(b'\\');
        out.push(bytes[i]);
        bytes = &bytes[i + 1..];
    }
    out.extend_from_slice(bytes);
}

/// Joins fields with `separator`, escaping each.
pub fn join<'a>(fields: impl IntoIterator<Item = Option<&'a [u8]>>, separator: u8) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, field) in fields.into_iter().enumerate() {
        if i > 0 {
            out.push(separator);
        }
        push_field(&mut out, field, separator);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn b(s: &str) -> Field {
        Field::Bytes(s.as_bytes().to_vec())
    }

    fn check(value: &str, expected: usize, want: Result<Vec<Field>, &str>) {
        let got = split(value.as_bytes(), b'|', expected);
        match want {
            Ok(fields) => assert_eq!(got, Ok(fields), "{value:?}"),
            Err(why) => match got {
                Err(Error::Value(msg)) => assert!(msg.contains(why), "{value:?}: {msg}"),
                other => panic!("{value:?}: wanted an error, got {other:?}"),
            },
        }
    }

    #[test]
    fn values_split_exactly() {
        check("a|b|c", 3, Ok(vec![b("a"), b("b"), b("c")]));
        check("a||c", 3, Ok(vec![b("a"), b(""), b("c")]));
        check("||", 3, Ok(vec![b(""), b(""), b("")]));
        check("", 1, Ok(vec![b("")]));
        check("", 0, Ok(vec![]));
        check("x", 0, Err("must be empty"));
        check("\\N|x", 2, Ok(vec![Field::Null, b("x")]));
        check("a\\|b|c", 2, Ok(vec![b("a|b"), b("c")]));
        check("a\\\\|c", 2, Ok(vec![b("a\\"), b("c")]));
        check("\\\\N|c", 2, Ok(vec![b("\\N"), b("c")]));
        check("a|b", 3, Err("has 2 fields, the row wants 3"));
        check("a|b|c|d", 3, Err("more than the 3 fields"));
        check("a\\x", 1, Err("bad escape"));
        check("a\\", 1, Err("lone backslash"));
        check("x\\N", 1, Err("whole field"));
        check("\\Nx", 1, Err("whole field"));
    }

    proptest! {
        #[test]
        fn join_then_split_is_the_identity(
            fields in proptest::collection::vec(
                proptest::option::of(proptest::collection::vec(
                    prop_oneof![Just(b'|'), Just(b'\\'), Just(b'N'), any::<u8>()], 0..8)),
                1..6),
            separator in prop_oneof![Just(b'|'), Just(b','), Just(b' ')],
        ) {
            let joined = join(fields.iter().map(|f| f.as_deref()), separator);
            let split = split(&joined, separator, fields.len()).unwrap();
            let want: Vec<Field> = fields
                .into_iter()
                .map(|f| f.map_or(Field::Null, Field::Bytes))
                .collect();
            prop_assert_eq!(split, want);
        }

        #[test]
        fn any_bytes_split_or_fail_without_panicking(
            value in proptest::collection::vec(any::<u8>(), 0..64),
            expected in 0usize..5,
        ) {
            if let Ok(fields) = split(&value, b'|', expected) {
                prop_assert_eq!(fields.len(), expected);
            }
        }
    }
}
