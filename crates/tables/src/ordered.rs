//! Ordered indexes, kept in memory: a `KEY`, and a primary key or `UNIQUE` index
//! declared `USING BTREE`. Each is a sorted set of the indexed value and the primary
//! key (memcomparable, [`crate::keys`]) with the row's exptime, so a range is read in
//! index order without reading the table, and an expired row's entry is skipped and
//! then purged without a look at the row.
//!
//! They are not in the log: a row's record is the truth, and these sets are rebuilt
//! from the rows at start ([`Ordered::rebuild`]). They change under the row's shard
//! lock, in the order the row's records do (see `rows.rs`), so a set never keeps an
//! entry of a version the row has left behind.
//!
//! A NULL is not in an ordered index: no range holds it, as no comparison with NULL
//! is true in MySQL.
//!
//! Memory: an entry is a heap slice of the encoded value and primary key (8 bytes
//! for a number, the bytes and 2 more for text) plus its exptime, in a B-tree:
//! `docs/tables.md` gives the measured bytes an entry (`examples/ordered_memory.rs`).

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use parking_lot::{Mutex, RwLock};

use crate::catalog::{Catalog, TableDef, Via};
use crate::error::{value_error, Error};
use crate::keys::{self, Position};
use crate::value::{parse_text, Value};

/// One ordered index: each entry (value then primary key, memcomparable) with its
/// row's exptime.
type Set = BTreeMap<Box<[u8]>, u32>;

/// The sets of one table: its primary key's (if ordered) and each ordered index's.
#[derive(Debug, Default)]
struct TableSets {
    /// Keyed by what they order: the primary key, or an index by its position.
    sets: Vec<(Via, Set)>,
}

/// Every table's ordered indexes, by table number.
#[derive(Debug, Default)]
pub struct Ordered {
    tables: RwLock<HashMap<u32, Mutex<TableSets>>>,
}

/// Whether a table keeps an ordered index in memory (without building the list). Its
/// primary key is kept in order by the store (`docs/tables.md`), not here.
pub fn keeps_order(def: &TableDef) -> bool {
    def.table.indexes.iter().any(|i| i.kind.is_ordered())
}

/// The indexes a table keeps in order in memory, if any.
pub fn ordered_vias(def: &TableDef) -> Vec<Via> {
    let mut vias = Vec::new();
    for (i, index) in def.table.indexes.iter().enumerate() {
        if index.kind.is_ordered() {
            vias.push(Via::Index(i));
        }
    }
    vias
}

/// The entry of `values` in the set ordered by `via`; None for a NULL value.
fn entry(def: &TableDef, via: Via, values: &[Value]) -> Option<Box<[u8]>> {
    let pk = &values[def.table.primary];
    let mut out = Vec::new();
    match via {
        Via::Primary => keys::encode(pk, Position::Last, &mut out),
        Via::Index(i) => {
            let value = &values[def.table.indexes[i].column];
            if value.is_null() {
                return None;
            }
            keys::encode(value, Position::Inner, &mut out);
            keys::encode(pk, Position::Last, &mut out);
        }
    }
    Some(out.into())
}

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
}

impl Range {
    /// Whether `value` is in the range.
    pub fn holds(&self, value: &Value) -> bool {
        let cmp = |a: &Value, b: &Value| key_bytes(a).cmp(&key_bytes(b));
        if value.is_null() {
            return false;
        }
        let above = match &self.lower {
            Bound::Included(v) => cmp(value, v).is_ge(),
            Bound::Excluded(v) => cmp(value, v).is_gt(),
            Bound::Unbounded => true,
        };
        let below = match &self.upper {
            Bound::Included(v) => cmp(value, v).is_le(),
            Bound::Excluded(v) => cmp(value, v).is_lt(),
            Bound::Unbounded => true,
        };
        above && below
    }
}

fn key_bytes(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    keys::encode(v, Position::Inner, &mut out);
    out
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
        let value = parse_text(text, column.ty, &column.name)?;
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

/// The bounds of the entries of `via` (the primary key's encoding, or an index's value
/// then the primary key) that `range` holds; None when it holds nothing (a range that
/// ends before it starts: `k BETWEEN 5 AND 3`).
pub(crate) fn key_bounds(via: Via, range: &Range) -> Option<Bounds> {
    let encode = |v: &Value| -> Vec<u8> {
        let mut out = Vec::new();
        match via {
            Via::Primary => keys::encode(v, Position::Last, &mut out),
            Via::Index(_) => keys::encode(v, Position::Inner, &mut out),
        }
        out
    };
    // An index's entries are the value then the primary key: every entry of value
    // `v` starts with v's encoding, and all of them sort below its successor.
    let past = |v: &Value| match via {
        Via::Primary => Bound::Excluded(encode(v)),
        Via::Index(_) => successor(&encode(v)).map_or(Bound::Unbounded, Bound::Included),
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

/// `bounds` on a table's primary keys as bounds on its rows' engine keys (the table's
/// number then the key), so that an open end stays within the table.
pub(crate) fn row_key_bounds(table: u32, (lower, upper): Bounds) -> Bounds {
    let prefix = table.to_be_bytes();
    let prefixed = |k: Vec<u8>| [&prefix[..], &k].concat();
    let lower = match lower {
        Bound::Unbounded => Bound::Included(prefix.to_vec()),
        other => other.map(prefixed),
    };
    let upper = match upper {
        Bound::Unbounded => table.checked_add(1).map_or(Bound::Unbounded, |next| {
            Bound::Excluded(next.to_be_bytes().to_vec())
        }),
        other => other.map(prefixed),
    };
    (lower, upper)
}

impl Ordered {
    /// Empty sets for every ordered index of `catalog` that has none yet.
    pub fn add_tables(&self, catalog: &Catalog) {
        let mut tables = self.tables.write();
        for def in &catalog.tables {
            let vias = ordered_vias(def);
            if vias.is_empty() || tables.contains_key(&def.number) {
                continue;
            }
            let sets = vias.into_iter().map(|v| (v, BTreeMap::new())).collect();
            tables.insert(def.number, Mutex::new(TableSets { sets }));
        }
    }

    /// Puts sets for every ordered index of `def`, filled from `rows` (values and
    /// exptime), in place of the table's: a table that gained an index.
    pub fn replace_table(&self, def: &TableDef, rows: &[(Vec<Value>, u32)]) {
        let vias = ordered_vias(def);
        if vias.is_empty() {
            return;
        }
        let mut sets: Vec<(Via, Set)> = vias.into_iter().map(|v| (v, BTreeMap::new())).collect();
        for (values, exptime) in rows {
            for (via, set) in sets.iter_mut() {
                if let Some(e) = entry(def, *via, values) {
                    set.insert(e, *exptime);
                }
            }
        }
        self.tables
            .write()
            .insert(def.number, Mutex::new(TableSets { sets }));
    }

    /// Takes every set `other` holds in place of this one's (a rebuild, swapped in
    /// whole so that no range sees it half done).
    pub fn replace_all(&self, other: Ordered) {
        *self.tables.write() = other.tables.into_inner();
    }

    /// Forgets the sets of table `number`: a dropped table.
    pub fn remove_table(&self, number: u32) {
        self.tables.write().remove(&number);
    }

    /// Whether `def` keeps anything in order.
    pub fn has(&self, def: &TableDef) -> bool {
        self.tables.read().contains_key(&def.number)
    }

    /// A row changed from `old` to `new` (None: absent) with the exptime `exptime`.
    pub fn apply(
        &self,
        def: &TableDef,
        old: Option<&[Value]>,
        new: Option<&[Value]>,
        exptime: u32,
    ) {
        let tables = self.tables.read();
        let Some(sets) = tables.get(&def.number) else {
            return;
        };
        let mut sets = sets.lock();
        for (via, set) in sets.sets.iter_mut() {
            if let Some(old) = old.and_then(|v| entry(def, *via, v)) {
                set.remove(&old);
            }
            if let Some(new) = new.and_then(|v| entry(def, *via, v)) {
                set.insert(new, exptime);
            }
        }
    }

    /// The primary keys (memcomparable) of the live rows whose key in `via` is in
    /// `range`, in index order, at most `limit`; None if `via` is not kept in order.
    pub fn range(
        &self,
        def: &TableDef,
        via: Via,
        range: &Range,
        now: u32,
        limit: usize,
    ) -> Option<Vec<Vec<u8>>> {
        let tables = self.tables.read();
        let sets = tables.get(&def.number)?.lock();
        let set = &sets.sets.iter().find(|(v, _)| *v == via)?.1;
        let live = |exptime: u32| exptime == 0 || exptime > now;
        let pk_of = |entry: &[u8]| -> Vec<u8> {
            match via {
                Via::Primary => entry.to_vec(),
                Via::Index(i) => {
                    let column = &def.table.columns[def.table.indexes[i].column];
                    let mut r = crate::row::Reader { buf: entry };
                    match keys::decode(&mut r, column.ty, Position::Inner) {
                        Ok(_) => r.buf.to_vec(),
                        Err(_) => Vec::new(),
                    }
                }
            }
        };
        let Some((lower, upper)) = key_bounds(via, range) else {
            return Some(Vec::new());
        };
        let bounds = (
            lower.as_ref().map(|k| k.as_slice()),
            upper.as_ref().map(|k| k.as_slice()),
        );
        Some(
            set.range::<[u8], _>(bounds)
                .filter(|(_, &exptime)| live(exptime))
                .take(limit)
                .map(|(entry, _)| pk_of(entry))
                .collect(),
        )
    }

    /// Drops the entries of rows expired by `now`; returns how many went.
    pub fn purge_expired(&self, now: u32) -> u64 {
        let tables = self.tables.read();
        let mut purged = 0;
        for sets in tables.values() {
            let mut sets = sets.lock();
            for (_, set) in sets.sets.iter_mut() {
                let before = set.len();
                set.retain(|_, exptime| *exptime == 0 || *exptime > now);
                purged += (before - set.len()) as u64;
            }
        }
        purged
    }

    /// Entries in every set: for `stats`.
    pub fn entries(&self) -> u64 {
        let tables = self.tables.read();
        tables
            .values()
            .map(|s| {
                s.lock()
                    .sets
                    .iter()
                    .map(|(_, set)| set.len() as u64)
                    .sum::<u64>()
            })
            .sum()
    }
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

    fn row(id: i64, name: &str, lvl: Option<i64>) -> Vec<Value> {
        vec![
            Value::Int(id),
            Value::Bytes(name.as_bytes().to_vec()),
            lvl.map_or(Value::Null, Value::Int),
        ]
    }

    fn ids(pks: Vec<Vec<u8>>) -> Vec<i64> {
        pks.into_iter()
            .map(|pk| {
                let mut r = crate::row::Reader { buf: &pk };
                match keys::decode(&mut r, crate::value::ColumnType::Int, Position::Last) {
                    Ok(Value::Int(id)) => id,
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    }

    #[test]
    fn ranges_come_in_index_order_with_every_bound() {
        let def = def();
        let mut catalog = Catalog::new();
        catalog.tables.push(def.clone());
        let ordered = Ordered::default();
        ordered.add_tables(&catalog);
        for (id, name, lvl) in [
            (1, "d", Some(5)),
            (2, "b", Some(3)),
            (3, "a", Some(5)),
            (4, "c", None),
            (5, "a\0", Some(9)),
        ] {
            ordered.apply(&def, None, Some(&row(id, name, lvl)), 0);
        }
        let lvl = Via::Index(0);
        let by = |spec: &str, via: Via| {
            let range = parse_range(&def, via, spec.as_bytes()).unwrap();
            ids(ordered.range(&def, via, &range, 0, 100).unwrap())
        };
        assert_eq!(by("@>=3", lvl), vec![2, 1, 3, 5]);
        assert_eq!(by("@>3", lvl), vec![1, 3, 5]);
        assert_eq!(by("@<5", lvl), vec![2]);
        assert_eq!(by("@<=5", lvl), vec![2, 1, 3]);
        assert_eq!(by("@>3@<9", lvl), vec![1, 3]);
        assert_eq!(by("@>=5@<=5", lvl), vec![1, 3]);
        // A range that ends before it starts holds nothing.
        for empty in ["@>=5@<3", "@>5@<=5", "@>5@<5", "@>=5@<5", "@>9@<=3"] {
            assert_eq!(by(empty, lvl), Vec::<i64>::new(), "{empty}");
        }
        let name = Via::Index(1);
        assert_eq!(by("@>=a", name), vec![3, 5, 2, 4, 1]);
        assert_eq!(by("@>a@<c", name), vec![5, 2]);
        assert_eq!(by("@<=a", name), vec![3]);
        // A row that changes leaves its old entry behind; one deleted leaves none.
        ordered.apply(
            &def,
            Some(&row(1, "d", Some(5))),
            Some(&row(1, "d", Some(1))),
            0,
        );
        ordered.apply(&def, Some(&row(2, "b", Some(3))), None, 0);
        assert_eq!(by("@>=0", lvl), vec![1, 3, 5]);
        // Expired entries are skipped, then purged.
        ordered.apply(&def, None, Some(&row(6, "e", Some(7))), 100);
        let range = parse_range(&def, lvl, b"@>=7").unwrap();
        assert_eq!(
            ids(ordered.range(&def, lvl, &range, 99, 10).unwrap()),
            vec![6, 5]
        );
        assert_eq!(
            ids(ordered.range(&def, lvl, &range, 100, 10).unwrap()),
            vec![5]
        );
        assert_eq!(ordered.purge_expired(100), 2);
        // The primary key is not ordered here.
        assert!(ordered.range(&def, Via::Primary, &range, 0, 10).is_none());
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
