//! Reading the ordered keyspace by range: a batch of keys at a time, merged from the
//! overlay and the B-tree (the keys of a held space from its own table).

use std::ops::Bound;

use redb::{ReadableDatabase, TableDefinition};

use super::{btree_error, stored_bound, Ordered, States, BATCH, HELD, KEYS};
use crate::key::Space;
use crate::{Error, Store};

/// One call's worth of a range: keys in order, and whether the range may hold more.
pub struct Keys {
    pub keys: Vec<Vec<u8>>,
    pub more: bool,
}

impl Ordered {
    /// Up to `max` (at most [`BATCH`]) keys of `space` within the bounds, in order
    /// (descending if `reverse`), without the space's byte.
    pub(crate) fn range(
        &self,
        space: Space,
        (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        max: usize,
    ) -> Result<Keys, Error> {
        let max = max.clamp(1, BATCH);
        let lower = match lower {
            Bound::Unbounded => Bound::Included(vec![space.0].into_boxed_slice()),
            other => stored_bound(space, other),
        };
        let upper = match upper {
            Bound::Unbounded => match space.0.checked_add(1) {
                Some(next) => Bound::Excluded(vec![next].into_boxed_slice()),
                None => Bound::Unbounded,
            },
            other => stored_bound(space, other),
        };
        let bounds = (
            lower.as_ref().map(|b| &b[..]),
            upper.as_ref().map(|b| &b[..]),
        );
        // A range that ends before it starts holds nothing (and would make
        // `BTreeMap::range` panic).
        let empty = match bounds {
            (Bound::Included(a), Bound::Included(b)) => a > b,
            (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
            | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
            _ => false,
        };
        if empty {
            return Ok(Keys {
                keys: Vec::new(),
                more: false,
            });
        }
        // The overlay's states in range, as far as the batch can reach; the B-tree's
        // snapshot is taken under the same lock, so a change moved between the two is
        // seen in one or the other.
        let (tx, overlaid, cut) = {
            let overlay = self.overlay.lock();
            let tx = self.db.begin_read().map_err(btree_error)?;
            let in_range = overlay.states.range::<[u8], _>(bounds);
            #[allow(clippy::borrowed_box)]
            let pick = |(k, s): (&Box<[u8]>, &States)| {
                (
                    k[1..].to_vec(),
                    s.last().is_some_and(|&(_, live)| live.is_some()),
                )
            };
            // Keys without their space's byte, as the batch gives them.
            let overlaid: Vec<(Vec<u8>, bool)> = if reverse {
                in_range.rev().take(max + 1).map(pick).collect()
            } else {
                in_range.take(max + 1).map(pick).collect()
            };
            // More states than were taken: the batch stops at the last one taken.
            let cut = (overlaid.len() > max).then(|| overlaid[max - 1].0.clone());
            (tx, overlaid, cut)
        };
        let mut from_tree: TreeKeys = if self.spaces.is_held(space) {
            tree_keys(&tx, HELD, bounds, reverse)?
        } else {
            tree_keys(&tx, KEYS, bounds, reverse)?
        };
        let before = |a: &[u8], b: &[u8]| if reverse { a > b } else { a < b };
        let mut keys = Vec::new();
        let mut overlaid = overlaid.into_iter().peekable();
        let mut tree_next = from_tree.next().transpose()?;
        let mut more = false;
        loop {
            if keys.len() == max {
                more = tree_next.is_some() || overlaid.peek().is_some();
                break;
            }
            let take_tree = match (&tree_next, overlaid.peek()) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(t), Some((o, _))) => before(t, o),
            };
            let (key, live) = if take_tree {
                let Some(key) = tree_next.take() else { break };
                tree_next = from_tree.next().transpose()?;
                (key, true)
            } else {
                let Some((key, live)) = overlaid.next() else {
                    break;
                };
                if tree_next.as_deref() == Some(&key[..]) {
                    tree_next = from_tree.next().transpose()?;
                }
                (key, live)
            };
            if let Some(cut) = &cut {
                if before(cut, &key) {
                    more = true;
                    break;
                }
            }
            if live {
                keys.push(key);
            }
        }
        Ok(Keys { keys, more })
    }
}

/// Keys read from the B-tree one by one, without their space's byte.
type TreeKeys = Box<dyn Iterator<Item = Result<Vec<u8>, Error>>>;

/// The keys of `table` within `bounds` (stored keys), without their space's byte, in
/// order or the reverse.
fn tree_keys<V: redb::Value + 'static>(
    tx: &redb::ReadTransaction,
    table: TableDefinition<'static, &'static [u8], V>,
    bounds: (Bound<&[u8]>, Bound<&[u8]>),
    reverse: bool,
) -> Result<TreeKeys, Error> {
    let table = match tx.open_table(table) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Box::new(std::iter::empty())),
        Err(e) => return Err(btree_error(e)),
    };
    let range = table.range::<&[u8]>(bounds).map_err(btree_error)?;
    let keys = range.map(|entry| {
        entry
            .map(|(k, _)| k.value()[1..].to_vec())
            .map_err(btree_error)
    });
    Ok(if reverse {
        Box::new(keys.rev())
    } else {
        Box::new(keys)
    })
}

/// A range of one space's keys, read a batch at a time ([`Store::ordered_range`]).
pub struct OrderedRange<'s> {
    store: &'s Store,
    space: Space,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    reverse: bool,
    done: bool,
}

impl OrderedRange<'_> {
    /// The next keys of the range, in order; empty once it is read through. A key
    /// written while the range is read may or may not be in it.
    pub fn next_keys(&mut self) -> Result<Vec<Vec<u8>>, Error> {
        let Some(ordered) = self.store.ordered.as_ref() else {
            return Ok(Vec::new());
        };
        while !self.done {
            let got = ordered.range(
                self.space,
                (
                    self.lower.as_ref().map(|b| &b[..]),
                    self.upper.as_ref().map(|b| &b[..]),
                ),
                self.reverse,
                BATCH,
            )?;
            self.done = !got.more;
            if let Some(last) = got.keys.last() {
                let next = Bound::Excluded(last.clone());
                if self.reverse {
                    self.upper = next;
                } else {
                    self.lower = next;
                }
            } else if got.more {
                // Only deleted keys in this batch: go on past them.
                continue;
            }
            return Ok(got.keys);
        }
        Ok(Vec::new())
    }
}

impl Store {
    /// The keys of `space` (one the store keeps in order) within the bounds, in byte
    /// order, or the reverse. Each is a key whose last record is a put; the caller
    /// reads its version (an expired one is gone).
    pub fn ordered_range(
        &self,
        space: Space,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
    ) -> OrderedRange<'_> {
        OrderedRange {
            store: self,
            space,
            lower: lower.map(<[u8]>::to_vec),
            upper: upper.map(<[u8]>::to_vec),
            reverse,
            done: self.ordered.is_none(),
        }
    }

    /// One batch of [`Store::ordered_range`]: at most `max` keys in order (and at
    /// most [`crate::ORDERED_BATCH`]), and whether the range may hold more past the
    /// last of them. For a reader that keeps its place itself between calls, and
    /// that may want only a few (a `LIMIT`).
    pub fn ordered_batch(
        &self,
        space: Space,
        (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
        reverse: bool,
        max: usize,
    ) -> Result<(Vec<Vec<u8>>, bool), Error> {
        match self.ordered.as_ref() {
            Some(ordered) => {
                let got = ordered.range(space, (lower, upper), reverse, max)?;
                Ok((got.keys, got.more))
            }
            None => Ok((Vec::new(), false)),
        }
    }

    /// Whether the store keeps `space` in order.
    pub fn is_ordered(&self, space: Space) -> bool {
        self.ordered
            .as_ref()
            .is_some_and(|o| o.spaces().contains(space))
    }
}
