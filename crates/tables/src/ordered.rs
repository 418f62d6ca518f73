//! Ranges: a container's `@>=A@<B` and SQL's bounds on a column, as bounds on the
//! engine keys that hold the column in order. Every index is kept in order by the
//! store: the rows' keys (the primary key), a unique index's entries (the value) and
//! a non-unique index's entries (the value, then the primary key) are in key spaces
//! the store keeps in order ([`crate::rows::ordered_spaces`]), and
//! [`crate::read::PkCursor`] reads them.
//!
//! A NULL is in no index: no range holds it, as no comparison with NULL is true in
//! MySQL.

use std::ops::Bound;

use crate::catalog::{TableDef, Via};
use crate::collation::Rule;
use crate::error::{value_error, Error};
use crate::keys::{self, Position};
use crate::value::Value;

/// The smallest byte string above every string that starts with `prefix`; None when
/// there is none (`prefix` is all 0xFF).
fn successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut next = prefix.to_vec();
    while let Some(last) = next.pop() {
        if last < 0xFF {
            next.push(last + 1);
            return Some(next);
        }
    }
    None
}

/// A range of a container's key column: `@>=A@<B` and friends.
#[derive(Debug, Clone, PartialEq)]
pub struct Range {
    pub lower: Bound<Value>,
    pub upper: Bound<Value>,
    /// The bounds are a folded column's weights already (a `LIKE` prefix's range
    /// under a case-insensitive collation), not values to fold.
    pub folded: bool,
}

impl Range {
    /// Whether `value` is in the range. To test many values, [`Range::check`] encodes
    /// the bounds once.
    pub fn holds(&self, rule: Rule, value: &Value) -> bool {
        self.check(rule).holds(value)
    }

    /// The range with its bounds encoded as the keys that hold them, under the
    /// column's collation `rule`: for testing many values.
    pub fn check(&self, rule: Rule) -> RangeCheck {
        let bound_rule = if self.folded { Rule::Binary } else { rule };
        let key_bytes = |v: &Value| {
            let mut out = Vec::new();
            keys::encode_as(v, bound_rule, Position::Inner, &mut out);
            out
        };
        RangeCheck {
            lower: self.lower.as_ref().map(key_bytes),
            upper: self.upper.as_ref().map(key_bytes),
            rule,
            value: Vec::new(),
        }
    }
}

/// [`Range::holds`] with the bounds encoded once, comparing values in their key order.
#[derive(Debug, Clone)]
pub struct RangeCheck {
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    rule: Rule,
    /// The value under test, encoded (kept for its allocation).
    value: Vec<u8>,
}

impl RangeCheck {
    /// Whether `value` is the one an index entry holds, `entry` as the entry's key
    /// gives it back (a folded text's weights).
    pub fn is_entry(&self, value: &Value, entry: &Value) -> bool {
        *keys::comparable(value, self.rule) == *entry
    }

    /// Whether `value` is in the range.
    pub fn holds(&mut self, value: &Value) -> bool {
        if value.is_null() {
            return false;
        }
        self.value.clear();
        keys::encode_as(value, self.rule, Position::Inner, &mut self.value);
        let v = &self.value[..];
        let above = match &self.lower {
            Bound::Included(b) => v >= &b[..],
            Bound::Excluded(b) => v > &b[..],
            Bound::Unbounded => true,
        };
        above
            && match &self.upper {
                Bound::Included(b) => v <= &b[..],
                Bound::Excluded(b) => v < &b[..],
                Bound::Unbounded => true,
            }
    }
}

/// Whether a container key asks for a range (`@<`, `@<=`, `@>`, `@>=` ...).
pub fn is_range(key: &[u8]) -> bool {
    key.starts_with(b"@<") || key.starts_with(b"@>")
}

/// Parses `@>=A@<B` (InnoDB's range syntax: `@<`, `@<=`, `@>`, `@>=`, one bound or a
/// lower and an upper one) against the column the container is keyed by. A bound runs
/// to the next `@<` or `@>`, so it may hold `@` (an email) but not those two pairs.
pub fn parse_range(def: &TableDef, via: Via, spec: &[u8]) -> Result<Range, Error> {
    let column = match via {
        Via::Primary => def.table.primary_column(),
        Via::Index(i) => &def.table.columns[def.table.indexes[i].column],
    };
    let mut starts: Vec<usize> = (0..spec.len().saturating_sub(1))
        .filter(|&i| spec[i] == b'@' && matches!(spec[i + 1], b'<' | b'>'))
        .collect();
    starts.push(spec.len());
    let mut range = Range {
        lower: Bound::Unbounded,
        upper: Bound::Unbounded,
        folded: false,
    };
    if starts.first() != Some(&0) || starts.len() > 3 {
        return Err(value_error!(
            "a range is one or two bounds: @>=A@<B, with @<, @<=, @>, @>="
        ));
    }
    for pair in starts.windows(2) {
        let part = &spec[pair[0] + 1..pair[1]];
        let (op, text): (&[u8], &[u8]) = if part.len() >= 2 && part[1] == b'=' {
            part.split_at(2)
        } else {
            part.split_at(1)
        };
        let value = column.parse_text(text)?;
        let slot = match op {
            b">" => (&mut range.lower, Bound::Excluded(value)),
            b">=" => (&mut range.lower, Bound::Included(value)),
            b"<" => (&mut range.upper, Bound::Excluded(value)),
            _ => (&mut range.upper, Bound::Included(value)),
        };
        if !matches!(slot.0, Bound::Unbounded) {
            return Err(value_error!("a range has one lower and one upper bound"));
        }
        *slot.0 = slot.1;
    }
    Ok(range)
}

/// A lower and an upper bound on encoded keys.
pub(crate) type Bounds = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// The bounds of the keys that hold a column's values in order, from the values'
/// bounds in `range`: the encoding ends the key (`Position::Last`: the primary key, a
/// unique index's value) or is followed by more (`Position::Inner`: a non-unique
/// index's value, then the primary key). None when the range holds nothing (one that
/// ends before it starts: `k BETWEEN 5 AND 3`).
pub(crate) fn key_bounds(position: Position, rule: Rule, range: &Range) -> Option<Bounds> {
    let rule = if range.folded { Rule::Binary } else { rule };
    let encode = |v: &Value| -> Vec<u8> {
        let mut out = Vec::new();
        keys::encode_as(v, rule, position, &mut out);
        out
    };
    // An index's entries are the value then the primary key: every entry of value
    // `v` starts with v's encoding, and all of them sort below its successor.
    let past = |v: &Value| match position {
        Position::Last => Bound::Excluded(encode(v)),
        Position::Inner => successor(&encode(v)).map_or(Bound::Unbounded, Bound::Included),
    };
    let lower: Bound<Vec<u8>> = match &range.lower {
        Bound::Included(v) => Bound::Included(encode(v)),
        Bound::Excluded(v) => past(v),
        Bound::Unbounded => Bound::Unbounded,
    };
    let upper: Bound<Vec<u8>> = match &range.upper {
        Bound::Included(v) => match past(v) {
            Bound::Excluded(k) => Bound::Included(k),
            Bound::Included(k) => Bound::Excluded(k),
            Bound::Unbounded => Bound::Unbounded,
        },
        Bound::Excluded(v) => Bound::Excluded(encode(v)),
        Bound::Unbounded => Bound::Unbounded,
    };
    let empty = match (&lower, &upper) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
        _ => false,
    };
    (!empty).then_some((lower, upper))
}

/// `bounds` on keys after `prefix` (a table's number, and an index's) as bounds on
/// whole keys, so that an open end stays within the prefix.
pub(crate) fn prefixed_bounds(prefix: &[u8], (lower, upper): Bounds) -> Bounds {
    let prefixed = |k: Vec<u8>| [prefix, &k].concat();
    let lower = match lower {
        Bound::Unbounded => Bound::Included(prefix.to_vec()),
        other => other.map(prefixed),
    };
    let upper = match upper {
        Bound::Unbounded => successor(prefix).map_or(Bound::Unbounded, Bound::Excluded),
        other => other.map(prefixed),
    };
    (lower, upper)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::parse_schema;

    fn def() -> TableDef {
        let table = parse_schema(
            "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(9), lvl INT, KEY lvl (lvl), KEY name (name))",
        )
        .unwrap()
        .remove(0);
        TableDef {
            number: 1,
            index_numbers: vec![1, 2],
            table,
            next_index: 3,
            building: None,
        }
    }

    /// Keys of an index's entries fall within the bounds exactly when the range holds
    /// their value, with every bound, for integers and for text (a shorter value and
    /// one with a NUL among them), compared as bytes and case-insensitively.
    #[test]
    fn bounds_hold_exactly_the_entries_of_the_range() {
        let def = def();
        let ints: Vec<Value> = [-1, 3, 5, 9].into_iter().map(Value::Int).collect();
        let texts: Vec<Value> = ["a", "a\0", "A", "b", "B ", "c", "d", "\u{e9}", "E"]
            .into_iter()
            .map(|t| Value::Bytes(t.as_bytes().to_vec()))
            .collect();
        let folded = Rule::Folded { pad: true };
        for (via, values, rule) in [
            (Via::Index(0), &ints, Rule::Binary),
            (Via::Index(1), &texts, Rule::Binary),
            (Via::Index(1), &texts, folded),
        ] {
            let entry = |v: &Value, pk: i64| {
                let mut k = Vec::new();
                keys::encode_as(v, rule, Position::Inner, &mut k);
                keys::encode(&Value::Int(pk), Position::Last, &mut k);
                k
            };
            let column = &def.table.columns[def.table.indexes[match via {
                Via::Index(i) => i,
                Via::Primary => 0,
            }]
            .column];
            for spec in [
                "@>=3", "@>3", "@<5", "@<=5", "@>3@<9", "@>=5@<=5", "@>=5@<3", "@>5@<=5", "@>=a",
                "@>a@<c", "@<=a", "@>a", "@<b", "@>=A@<=b", "@>e", "@<=E",
            ] {
                let Ok(range) = parse_range(&def, via, spec.as_bytes()) else {
                    continue;
                };
                let bounds = key_bounds(Position::Inner, rule, &range);
                for (pk, v) in values.iter().enumerate() {
                    let k = entry(v, pk as i64);
                    let inside = bounds.as_ref().is_some_and(|(lower, upper)| {
                        std::ops::RangeBounds::contains(
                            &(
                                lower.as_ref().map(Vec::as_slice),
                                upper.as_ref().map(Vec::as_slice),
                            ),
                            &k[..],
                        )
                    });
                    assert_eq!(
                        inside,
                        range.holds(rule, v),
                        "{} {spec} {v:?} {rule:?}",
                        column.name
                    );
                }
            }
        }
    }

    #[test]
    fn bad_ranges_are_refused() {
        let def = def();
        for spec in ["@>", "@>=x", "@<1@<2", "@>1@<2@<3", "x@<2"] {
            assert!(
                parse_range(&def, Via::Index(0), spec.as_bytes()).is_err(),
                "{spec}"
            );
        }
        let range = parse_range(&def, Via::Index(1), b"@>=a@x.com@<b@y").unwrap();
        assert_eq!(
            range.lower,
            Bound::Included(Value::Bytes(b"a@x.com".to_vec()))
        );
        assert_eq!(range.upper, Bound::Excluded(Value::Bytes(b"b@y".to_vec())));
    }
}
