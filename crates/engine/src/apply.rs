//! The one place a change becomes a record and then a new state of the index: what a
//! [`Change`] writes to the log for a key, and, once it is appended, what it does to
//! the key's slot, its version in memory and the counters (items, bytes, the
//! segments' live bytes). [`Store::update`] runs it for one key, [`Store::update_batch`]
//! for several at once.
//!
//! What it is not for: finding the live version (`store.rs` does, reading the log when
//! a key is only there), or deciding the change (the caller's closure).
//!
//! Invariants: the caller holds the key's shard write lock from before the record is
//! built until after it is applied, so records of one key are in the log in the order
//! they changed it; the record is appended before the index changes, so the index
//! never shows what the log does not hold.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::index::{Entry, Hashed, Shard};
use crate::item::{Access, Change, NewCas, Written};
use crate::key::{Class, Key};
use crate::log::{Append, Appended, Holds, Location};
use crate::ordered::Place;
use crate::record::{Record, ITEM_BINARY_KEY, ITEM_EXPLICIT_CAS, ITEM_STALE};
use crate::store::data_len;
use crate::Store;

/// A key's live version in memory: its slab place. (Its slot is found again when it
/// is needed: slots move as other keys of the shard come and go, slab places do not.)
pub(crate) type At = Option<usize>;

/// The CAS a change gives its new version, decided before its record is built.
pub(crate) fn new_cas(store: &Store, change: &Change, at: At, shard: &Shard) -> u64 {
    match change {
        Change::Put(new) => match new.cas {
            NewCas::Generate => store.next_cas.fetch_add(1, Ordering::Relaxed),
            NewCas::Explicit(cas) | NewCas::Copied { cas, .. } => cas,
        },
        _ => at.map_or(0, |idx| shard.entry(idx).cas),
    }
}

/// A held key's place: its record's location and its bytes of key and value.
pub(crate) fn place(location: Location, data: u64) -> Place {
    Place {
        location,
        data: u32::try_from(data).unwrap_or(u32::MAX),
    }
}

/// Whether a new version's CAS was chosen by a client.
fn explicit_cas(cas: NewCas) -> bool {
    match cas {
        NewCas::Explicit(_) => true,
        NewCas::Copied { explicit, .. } => explicit,
        NewCas::Generate => false,
    }
}

/// The record `change` writes for `key`, whose live version is `at` in `shard`; None
/// when it writes nothing.
pub(crate) fn record_for<'a>(
    key: Key<'a>,
    change: &'a Change,
    at: At,
    shard: &'a Shard,
    now: u32,
    cas: u64,
) -> Option<Append<'a>> {
    match (change, at) {
        (Change::Keep, _) | (Change::Touch { exptime: None, .. }, _) => None,
        (Change::Touch { .. }, None) | (Change::Delete, None) => None,
        // The version is written anew with its new expiry, same value, CAS and time: a
        // record says all there is of a version, so it can leave memory.
        (
            Change::Touch {
                exptime: Some(exptime),
                ..
            },
            Some(idx),
        ) => {
            let entry = shard.entry(idx);
            Some(Append {
                record: Record::Put {
                    key,
                    value: &entry.value,
                    client_flags: entry.client_flags,
                    exptime: *exptime,
                    time: entry.time,
                    cas: entry.cas,
                    item_flags: entry.item_flags(),
                },
                holds: Holds::Version,
                frees: Some(entry.location),
            })
        }
        (Change::Delete, Some(idx)) => Some(Append {
            record: Record::Delete { key },
            holds: Holds::Nothing,
            frees: Some(shard.entry(idx).location),
        }),
        (Change::Put(new), at) => {
            let explicit = if explicit_cas(new.cas) {
                ITEM_EXPLICIT_CAS
            } else {
                0
            };
            let item_flags = explicit
                | if new.stale { ITEM_STALE } else { 0 }
                | if new.binary_key { ITEM_BINARY_KEY } else { 0 };
            Some(Append {
                record: Record::Put {
                    key,
                    value: &new.value,
                    client_flags: new.client_flags,
                    exptime: new.exptime,
                    time: now,
                    cas,
                    item_flags,
                },
                holds: Holds::Version,
                frees: at.map(|idx| shard.entry(idx).location),
            })
        }
    }
}

impl Store {
    /// Notes in the ordered keyspace that `key`'s live record moved from `old` to
    /// `new`, if `key` is of a held space (whose B-tree keeps every key's place; a
    /// space only kept in order notes a key coming and going, which the caller does).
    pub(crate) fn note_held(&self, key: Key<'_>, lsn: u64, old: Option<Place>, new: Option<Place>) {
        if let Some(ordered) = &self.ordered {
            if ordered.spaces().is_held(key.space) {
                ordered.note(key, lsn, old, new);
            }
        }
    }

    /// Counts a key of `class` coming (+1) or going (-1).
    pub(crate) fn count_items(&self, class: Class, delta: i64) {
        let counter = match class {
            Class::Memcached => &self.curr_items,
            Class::Tables => &self.table_items,
        };
        if delta >= 0 {
            counter.fetch_add(delta as u64, Ordering::Relaxed);
        } else {
            counter.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
        }
    }

    /// Applies `change` to `key` (hash `h`, live version `at`) in `shard`, once its
    /// record (if any) is `appended`. Returns what was written, for the reply.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply_change(
        &self,
        shard: &mut Shard,
        h: Hashed,
        key: Key<'_>,
        change: Change,
        at: At,
        appended: Option<Appended>,
        (cas, now, access): (u64, u32, Access),
    ) -> Option<Written> {
        let class = key.space.class();
        // A held key's bytes are counted by the ordered keyspace, not the shard.
        let held = self.is_held(key);
        let written = appended.map(|a| Written { lsn: a.lsn, cas });
        match (change, at) {
            (Change::Keep, at) => {
                if let (Some(idx), Access::Fetch) = (at, access) {
                    shard.entry(idx).mark_access(now);
                }
            }
            (Change::Touch { .. }, None) | (Change::Delete, None) => {}
            (
                Change::Touch {
                    exptime,
                    mark_win_sent,
                },
                Some(idx),
            ) => {
                if let (Some(exptime), Some(appended)) = (exptime, appended) {
                    shard.set_exptime(idx, exptime);
                    let entry = shard.entry_mut(idx);
                    let data = data_len(&entry.key, &entry.value);
                    let old = entry.location;
                    entry.location = appended.location;
                    entry.lsn = appended.lsn;
                    self.note_held(
                        key,
                        appended.lsn,
                        Some(place(old, data)),
                        Some(place(appended.location, data)),
                    );
                }
                let entry = shard.entry(idx);
                if mark_win_sent {
                    entry.win_sent.store(true, Ordering::Relaxed);
                }
                if access == Access::Fetch {
                    entry.mark_access(now);
                }
            }
            (Change::Delete, Some(idx)) => {
                let entry = shard.entry(idx);
                let data = data_len(&entry.key, &entry.value);
                if let (Some(ordered), Some(appended)) = (&self.ordered, appended) {
                    ordered.note(key, appended.lsn, Some(place(entry.location, data)), None);
                }
                shard.remove(shard.slot_of_entry(h, idx));
                if !held {
                    *shard.data_bytes_mut(class) -= data;
                }
                self.count_items(class, -1);
            }
            (Change::Put(new), at) => {
                let Some(appended) = appended else {
                    unreachable!("a put always writes a record");
                };
                let lsn = appended.lsn;
                let data = data_len(key.bytes, &new.value);
                if !held {
                    *shard.data_bytes_mut(class) += data;
                }
                let explicit = explicit_cas(new.cas);
                let fill = |entry: &mut Entry| {
                    entry.client_flags = new.client_flags;
                    entry.exptime = new.exptime;
                    entry.time = now;
                    entry.cas = cas;
                    entry.lsn = lsn;
                    entry.stale = new.stale;
                    entry.binary_key = new.binary_key;
                    entry.explicit_cas = explicit;
                    entry.fetched = Default::default();
                    entry.last_access = AtomicU32::new(now);
                    entry.win_sent = new.win_sent.into();
                    entry.referenced = Default::default();
                };
                match at {
                    Some(idx) => {
                        let was = shard.entry(idx);
                        let was = place(was.location, data_len(&was.key, &was.value));
                        self.note_held(key, lsn, Some(was), Some(place(appended.location, data)));
                        let old = shard.overwrite(idx, new.value, appended.location, fill);
                        if !held {
                            *shard.data_bytes_mut(class) -= old;
                        }
                    }
                    None => {
                        if let Some(ordered) = &self.ordered {
                            ordered.note(key, lsn, None, Some(place(appended.location, data)));
                        }
                        let mut entry = Entry::new(h, key, new.value, appended.location);
                        fill(&mut entry);
                        shard.insert_cached(h, entry);
                        self.count_items(class, 1);
                    }
                }
            }
        }
        written
    }
}
