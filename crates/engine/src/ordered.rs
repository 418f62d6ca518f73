//! The ordered keyspace: the keys of the spaces the store was opened to keep in order
//! ([`Options::ordered_spaces`](crate::Options)), in byte order, read by range, on disk
//! beyond memory, and ready after a restart without reading the whole log.
//!
//! It is derived from the log, as the index is. The keys live in a B-tree file
//! (`ordered.redb`, kept by redb through [`crate::disk::Disk`], so the simulated disk's
//! power losses reach it too), which holds every change to the set of live keys up to
//! an LSN it records in the same commit. Changes after that LSN wait in the overlay, a
//! sorted map in memory of each changed key's states since, which reads merge with the
//! B-tree. [`Store::apply_ordered`] moves the overlay's changes into the B-tree, up to
//! a point both durable in the log and quiescent (no change appended but not yet in the
//! overlay); its durable commits are what a crash leaves. At open the log is read from
//! the B-tree's LSN on, so the keys are again exactly those the log says are live.
//!
//! Which keys: a key enters with a put when the index did not hold it, and leaves with
//! a delete record. A version that expires leaves the index without a record, so its
//! key stays here until a delete; readers look each key up in the index (they want its
//! version anyway), and an expired one is not shown. Compaction removes no segment the
//! B-tree's durable LSN has not passed, so no delete it drops goes unseen by a replay.
//!
//! Held spaces ([`OrderedSpaces::with_held`]: the tables' index entries) go further:
//! their keys have no slot in the index at all, so that a table's indexes cost no
//! memory per entry. The B-tree keeps each held key with the address of its live
//! record, which a lookup reads from the log (and keeps in the cache while it has
//! room: a cached version has a slot until it is evicted, when the slot goes whole).
//! Compaction asks the B-tree whether a held record is live, and copies it by noting
//! its new address. The held records' live bytes in each segment (the log's account,
//! which decides what compaction may drop unread) are kept here too: in memory, and in
//! the B-tree's commits (`ACCOUNT`), from which, with the log after the commit's LSN,
//! an open rebuilds them; the index checkpoint keeps only the rest.
//!
//! What it is not for: values (those are the index's and the log's), and space 0, which
//! memcached's clients never read in order.
//!
//! Lock order: a key's shard lock, then the overlay's; the B-tree's writer lock is
//! taken before the overlay's and never under a shard lock.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use crate::disk::{Disk, PageFile};
use crate::key::{Key, Space};
use crate::log::Location;
use crate::record::Record;
use crate::store::data_len;
use crate::{Error, Store};

mod range;

pub use range::OrderedRange;

/// The B-tree's file in the data directory.
pub const FILE: &str = "ordered.redb";

/// Each key of a space kept in order but not held, as its space's byte then its
/// bytes; no value.
const KEYS: TableDefinition<&[u8], ()> = TableDefinition::new("keys");
/// Each key of a held space, stored as in `KEYS`, with its live record's segment,
/// offset and length, and the bytes of its key and value.
const HELD: TableDefinition<&[u8], (u64, u32, u32, u32)> = TableDefinition::new("held");
/// The bytes of held keys' live records in each segment.
const ACCOUNT: TableDefinition<u64, u64> = TableDefinition::new("account");
/// `lsn`: every change up to it is in `KEYS`, `HELD` and `ACCOUNT`; `held`: the held
/// spaces (a bit each) the B-tree was built for; `held_items` and `held_bytes`: how
/// many keys `HELD` has, and their bytes of key and value.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The most keys read from the B-tree and the overlay per call of [`Ordered::range`].
pub const BATCH: usize = 256;

/// The key spaces kept in order, and of those the held ones (see the module).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrderedSpaces {
    ordered: [u64; 4],
    held: [u64; 4],
}

fn set_bit(bits: &mut [u64; 4], space: Space) {
    bits[usize::from(space.0 / 64)] |= 1 << (space.0 % 64);
}

fn has_bit(bits: &[u64; 4], space: Space) -> bool {
    bits[usize::from(space.0 / 64)] & (1 << (space.0 % 64)) != 0
}

impl OrderedSpaces {
    /// These spaces and `space`.
    pub fn with(mut self, space: Space) -> OrderedSpaces {
        set_bit(&mut self.ordered, space);
        self
    }

    /// These spaces and `space`, held: its keys in the B-tree only, with no slot in
    /// the index. Held spaces are numbered below 64.
    pub fn with_held(mut self, space: Space) -> OrderedSpaces {
        assert!(space.0 < 64, "held spaces are numbered below 64");
        set_bit(&mut self.ordered, space);
        set_bit(&mut self.held, space);
        self
    }

    pub fn contains(&self, space: Space) -> bool {
        has_bit(&self.ordered, space)
    }

    /// Whether `space`'s keys live in the B-tree only.
    pub fn is_held(&self, space: Space) -> bool {
        has_bit(&self.held, space)
    }

    pub fn has_held(&self) -> bool {
        self.held != [0; 4]
    }

    pub fn is_empty(&self) -> bool {
        self.ordered == [0; 4]
    }
}

fn btree_error(e: impl fmt::Display) -> Error {
    Error::Io(io::Error::other(format!("ordered keyspace: {e}")))
}

/// redb's storage: a page file of the store's disk.
struct Pages(Arc<dyn PageFile>);

impl fmt::Debug for Pages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Pages")
    }
}

impl redb::StorageBackend for Pages {
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.0.read_at(out, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_at(data, offset)
    }
}

/// Where a held key's live record is, and its bytes of key and value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub location: Location,
    pub data: u32,
}

/// A key's changes not yet in the B-tree, oldest first: the LSN of each and where
/// the key's live record is after it (None: the key is gone). A key of a space that
/// is not held has [`LIVE`] for a live record.
type States = smallvec::SmallVec<[(u64, Option<Place>); 1]>;

/// The place a live key of a space that is not held is noted with.
const LIVE: Place = Place {
    location: Location {
        segment: 0,
        offset: 0,
        len: 0,
    },
    data: 0,
};

fn place_of((segment, offset, len, data): (u64, u32, u32, u32)) -> Place {
    Place {
        location: Location {
            segment,
            offset,
            len,
        },
        data,
    }
}

fn stored_place(p: &Place) -> (u64, u32, u32, u32) {
    (
        p.location.segment,
        p.location.offset,
        p.location.len,
        p.data,
    )
}

/// What waits for the B-tree, under one lock: each changed key's states, and as of
/// the last state noted the held keys' live record bytes by segment, their number and
/// their bytes of key and value.
#[derive(Default)]
struct Overlay {
    states: BTreeMap<Box<[u8]>, States>,
    account: BTreeMap<u64, u64>,
    held: Held,
}

/// How many held keys there are, and their bytes of key and value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Held {
    pub items: u64,
    pub bytes: u64,
}

impl Held {
    /// A key's place changed from `old` to `new`.
    fn moved(&mut self, old: Option<&Place>, new: Option<&Place>) {
        if let Some(old) = old {
            self.items = self.items.saturating_sub(1);
            self.bytes = self.bytes.saturating_sub(u64::from(old.data));
        }
        if let Some(new) = new {
            self.items += 1;
            self.bytes += u64::from(new.data);
        }
    }
}

impl Overlay {
    fn hold(&mut self, location: Location) {
        *self.account.entry(location.segment).or_default() += u64::from(location.len);
    }

    fn free(&mut self, location: Location) {
        if let Some(bytes) = self.account.get_mut(&location.segment) {
            *bytes = bytes.saturating_sub(u64::from(location.len));
            if *bytes == 0 {
                self.account.remove(&location.segment);
            }
        }
    }
}

/// The held spaces below 64 as META's `held` records them.
fn held_bits(spaces: OrderedSpaces) -> u64 {
    spaces.held[0]
}

/// The key as the B-tree and the overlay hold it.
fn stored(key: Key<'_>) -> Box<[u8]> {
    let mut out = Vec::with_capacity(1 + key.bytes.len());
    out.push(key.space.0);
    out.extend_from_slice(key.bytes);
    out.into()
}

/// A bound on a space's keys as a bound on stored keys.
fn stored_bound(space: Space, bound: Bound<&[u8]>) -> Bound<Box<[u8]>> {
    match bound {
        Bound::Included(k) => Bound::Included(stored(Key::new(space, k))),
        Bound::Excluded(k) => Bound::Excluded(stored(Key::new(space, k))),
        Bound::Unbounded => Bound::Unbounded,
    }
}

pub(crate) struct Ordered {
    spaces: OrderedSpaces,
    db: redb::Database,
    overlay: Mutex<Overlay>,
    /// Moved on by every commit that takes states out of the overlay: a key's place
    /// read from the B-tree is still its place while no note of it is in the overlay
    /// and this has not moved (see [`Ordered::place_now`]).
    generation: AtomicU64,
    /// The B-tree's writer (one commit at a time).
    writer: Mutex<()>,
    /// The LSN the B-tree's latest commit holds every change through, and its latest
    /// durable one.
    applied: AtomicU64,
    durable: AtomicU64,
    /// Commits made, for `stats`.
    pub(crate) commits: AtomicU64,
    /// Whether the open rebuilt redb's allocator state from the whole tree.
    pub(crate) repaired: bool,
    /// Whether the open found the B-tree built for other held spaces (or none, from
    /// before they existed) and emptied it: the log is read whole to fill it again,
    /// and the index checkpoint, which may have slots of held keys, is not used.
    pub(crate) rebuilt: bool,
}

impl Ordered {
    /// Opens (or creates) the B-tree with a cache of `cache_bytes`.
    pub(crate) fn open(
        disk: &dyn Disk,
        spaces: OrderedSpaces,
        cache_bytes: u64,
    ) -> Result<Ordered, Error> {
        let pages = disk.open_pages(FILE)?;
        disk.sync_dir()?;
        // After a crash redb rebuilds its allocator state by reading every page of the
        // tree, unless its last durable commit recorded that state (quick repair, which
        // every durable commit here asks for). A repair is followed at once by such a
        // commit, so that the next crash's open is quick whether or not anything is
        // written meanwhile.
        let repaired = Arc::new(AtomicBool::new(false));
        let noted = Arc::clone(&repaired);
        let db = redb::Builder::new()
            .set_cache_size(usize::try_from(cache_bytes).unwrap_or(usize::MAX))
            .set_repair_callback(move |_| noted.store(true, Ordering::Relaxed))
            .create_with_backend(Pages(pages))
            .map_err(btree_error)?;
        let repaired = repaired.load(Ordering::Relaxed);
        if repaired {
            let mut tx = db.begin_write().map_err(btree_error)?;
            tx.set_durability(redb::Durability::Immediate)
                .map_err(btree_error)?;
            tx.set_quick_repair(true);
            tx.commit().map_err(btree_error)?;
        }
        let (lsn, held_spaces, held, account) = {
            let tx = db.begin_read().map_err(btree_error)?;
            let (lsn, held_spaces, held) = match tx.open_table(META) {
                Ok(meta) => {
                    let get = |name: &str| -> Result<u64, Error> {
                        Ok(meta
                            .get(name)
                            .map_err(btree_error)?
                            .map_or(0, |v| v.value()))
                    };
                    let held = Held {
                        items: get("held_items")?,
                        bytes: get("held_bytes")?,
                    };
                    (get("lsn")?, get("held")?, held)
                }
                Err(redb::TableError::TableDoesNotExist(_)) => (0, 0, Held::default()),
                Err(e) => return Err(btree_error(e)),
            };
            let mut account = BTreeMap::new();
            match tx.open_table(ACCOUNT) {
                Ok(table) => {
                    for entry in table.iter().map_err(btree_error)? {
                        let (segment, bytes) = entry.map_err(btree_error)?;
                        account.insert(segment.value(), bytes.value());
                    }
                }
                Err(redb::TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(btree_error(e)),
            }
            (lsn, held_spaces, held, account)
        };
        let ordered = Ordered {
            spaces,
            db,
            overlay: Mutex::new(Overlay {
                states: BTreeMap::new(),
                account,
                held,
            }),
            generation: AtomicU64::new(0),
            writer: Mutex::new(()),
            applied: AtomicU64::new(lsn),
            durable: AtomicU64::new(lsn),
            commits: AtomicU64::new(0),
            repaired,
            rebuilt: held_spaces != held_bits(spaces),
        };
        if ordered.rebuilt {
            ordered.clear(0)?;
        }
        Ok(ordered)
    }

    pub(crate) fn spaces(&self) -> OrderedSpaces {
        self.spaces
    }

    /// The LSN every change up to which a crash would leave in the B-tree.
    pub(crate) fn durable_lsn(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Notes that `key`'s live record moved from `old` to `new` (None: none) with the
    /// change at `lsn`; under its shard lock, so a key's states are in the order its
    /// records are. For a space that is not held, only whether it is live counts.
    pub(crate) fn note(&self, key: Key<'_>, lsn: u64, old: Option<Place>, new: Option<Place>) {
        if !self.spaces.contains(key.space) {
            return;
        }
        let held = self.spaces.is_held(key.space);
        let mut overlay = self.overlay.lock();
        if held {
            if let Some(old) = old {
                overlay.free(old.location);
            }
            if let Some(new) = new {
                overlay.hold(new.location);
            }
            overlay.held.moved(old.as_ref(), new.as_ref());
        }
        let states = overlay.states.entry(stored(key)).or_default();
        if !held {
            if states
                .last()
                .is_some_and(|&(_, was)| was.is_some() == new.is_some())
            {
                return;
            }
            states.push((lsn, new.map(|_| LIVE)));
            return;
        }
        states.push((lsn, new));
    }

    /// Where `key`'s live record is (a key of a held space), and the generation the
    /// answer was read at, for [`Ordered::place_now`].
    pub(crate) fn place(&self, key: Key<'_>) -> Result<(Option<Place>, u64), Error> {
        let stored = stored(key);
        let (tx, generation) = {
            let overlay = self.overlay.lock();
            if let Some(&(_, state)) = overlay.states.get(&stored).and_then(|s| s.last()) {
                return Ok((state, self.generation.load(Ordering::Acquire)));
            }
            // Under the overlay's lock: a state moved from it meanwhile is in this
            // snapshot.
            let tx = self.db.begin_read().map_err(btree_error)?;
            (tx, self.generation.load(Ordering::Acquire))
        };
        let table = match tx.open_table(HELD) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok((None, generation)),
            Err(e) => return Err(btree_error(e)),
        };
        let place = table
            .get(&stored[..])
            .map_err(btree_error)?
            .map(|v| place_of(v.value()));
        Ok((place, generation))
    }

    /// `key`'s place now, under its shard lock, given what [`Ordered::place`] read
    /// before the lock: the overlay's last state if it has one, else that read if no
    /// commit took states out of the overlay since. None: read it again.
    pub(crate) fn place_now(
        &self,
        key: Key<'_>,
        (read, generation): (Option<Place>, u64),
    ) -> Option<Option<Place>> {
        let overlay = self.overlay.lock();
        if let Some(&(_, state)) = overlay.states.get(&stored(key)).and_then(|s| s.last()) {
            return Some(state);
        }
        (self.generation.load(Ordering::Acquire) == generation).then_some(read)
    }

    /// How many held keys there are and their bytes of key and value, as noted so far.
    pub(crate) fn held(&self) -> Held {
        self.overlay.lock().held
    }

    /// The held keys' live record bytes by segment, and their number and bytes of key
    /// and value, as noted so far.
    pub(crate) fn held_account(&self) -> (BTreeMap<u64, u64>, Held) {
        let overlay = self.overlay.lock();
        (overlay.account.clone(), overlay.held)
    }

    /// The held keys' live record bytes in `segment`, as noted so far.
    pub(crate) fn held_live_in(&self, segment: u64) -> u64 {
        self.overlay
            .lock()
            .account
            .get(&segment)
            .copied()
            .unwrap_or(0)
    }

    /// Keys changed and not yet in the B-tree.
    pub(crate) fn pending(&self) -> usize {
        self.overlay.lock().states.len()
    }

    /// Moves every change up to `upto` into the B-tree, in one commit (a durable one
    /// if asked) that records `upto`, and forgets the account of segments before
    /// `oldest` (removed). The caller promises that every change up to `upto` has
    /// been noted and is durable in the log.
    pub(crate) fn apply(&self, upto: u64, durable: bool, oldest: u64) -> Result<(), Error> {
        let _writer = self.writer.lock();
        let applied = self.applied.load(Ordering::Acquire);
        let upto = upto.max(applied);
        let changes: Vec<(Box<[u8]>, Option<Place>)> = {
            let mut overlay = self.overlay.lock();
            let gone: Vec<u64> = overlay.account.range(..oldest).map(|(&s, _)| s).collect();
            for segment in gone {
                overlay.account.remove(&segment);
            }
            overlay
                .states
                .iter()
                .filter_map(|(key, states)| {
                    let &(_, state) = states.iter().rev().find(|&&(lsn, _)| lsn <= upto)?;
                    Some((key.clone(), state))
                })
                .collect()
        };
        // Nothing to move: only a durable commit is worth making, to move the LSN a
        // restart reads the log from (other key spaces' writes move it too).
        if changes.is_empty() && (!durable || self.durable_lsn() >= upto) {
            return Ok(());
        }
        let mut tx = self.db.begin_write().map_err(btree_error)?;
        tx.set_durability(if durable {
            redb::Durability::Immediate
        } else {
            redb::Durability::None
        })
        .map_err(btree_error)?;
        // A durable commit records redb's allocator state, so that opening after a
        // crash loads it instead of reading every page of the tree to rebuild it.
        tx.set_quick_repair(durable);
        {
            let mut keys = tx.open_table(KEYS).map_err(btree_error)?;
            let mut held = tx.open_table(HELD).map_err(btree_error)?;
            let mut meta = tx.open_table(META).map_err(btree_error)?;
            // The account moves by what the B-tree's own places say, so a commit's
            // account is exactly its places'.
            let mut deltas: BTreeMap<u64, i64> = BTreeMap::new();
            let mut count = Held::default();
            for (name, to) in [
                ("held_items", &mut count.items),
                ("held_bytes", &mut count.bytes),
            ] {
                *to = meta
                    .get(name)
                    .map_err(btree_error)?
                    .map_or(0, |v| v.value());
            }
            for (key, state) in &changes {
                if !self.spaces.is_held(Space(key[0])) {
                    if state.is_some() {
                        keys.insert(&key[..], ()).map_err(btree_error)?;
                    } else {
                        keys.remove(&key[..]).map_err(btree_error)?;
                    }
                    continue;
                }
                let old = match state {
                    Some(p) => held.insert(&key[..], stored_place(p)),
                    None => held.remove(&key[..]),
                }
                .map_err(btree_error)?
                .map(|v| place_of(v.value()));
                if let Some(old) = &old {
                    *deltas.entry(old.location.segment).or_default() -= i64::from(old.location.len);
                }
                if let Some(new) = state {
                    *deltas.entry(new.location.segment).or_default() += i64::from(new.location.len);
                }
                count.moved(old.as_ref(), state.as_ref());
            }
            let mut account = tx.open_table(ACCOUNT).map_err(btree_error)?;
            for (segment, delta) in deltas {
                let was = account
                    .get(segment)
                    .map_err(btree_error)?
                    .map_or(0, |v| v.value());
                let now = was.saturating_add_signed(delta);
                if now == 0 {
                    account.remove(segment).map_err(btree_error)?;
                } else {
                    account.insert(segment, now).map_err(btree_error)?;
                }
            }
            account
                .retain_in(..oldest, |_, _| false)
                .map_err(btree_error)?;
            meta.insert("held_items", count.items)
                .map_err(btree_error)?;
            meta.insert("held_bytes", count.bytes)
                .map_err(btree_error)?;
            meta.insert("lsn", upto).map_err(btree_error)?;
        }
        tx.commit().map_err(btree_error)?;
        self.commits.fetch_add(1, Ordering::Relaxed);
        {
            let mut overlay = self.overlay.lock();
            for (key, _) in changes {
                if let Some(states) = overlay.states.get_mut(&key) {
                    states.retain(|&mut (lsn, _)| lsn > upto);
                    if states.is_empty() {
                        overlay.states.remove(&key);
                    }
                }
            }
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.applied.store(upto, Ordering::Release);
        if durable {
            self.durable.store(upto, Ordering::Release);
        }
        Ok(())
    }

    /// Forgets every key: the log starts again at `lsn` (a replica's full copy, or a
    /// rewind, which applies the kept records again). Durable before it returns.
    pub(crate) fn clear(&self, lsn: u64) -> Result<(), Error> {
        let _writer = self.writer.lock();
        {
            let mut overlay = self.overlay.lock();
            *overlay = Overlay::default();
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        let mut tx = self.db.begin_write().map_err(btree_error)?;
        tx.set_durability(redb::Durability::Immediate)
            .map_err(btree_error)?;
        tx.set_quick_repair(true);
        for deleted in [
            tx.delete_table(KEYS),
            tx.delete_table(HELD),
            tx.delete_table(ACCOUNT),
        ] {
            match deleted {
                Ok(_) | Err(redb::TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(btree_error(e)),
            }
        }
        {
            let mut meta = tx.open_table(META).map_err(btree_error)?;
            meta.insert("lsn", lsn).map_err(btree_error)?;
            meta.insert("held", held_bits(self.spaces))
                .map_err(btree_error)?;
            meta.insert("held_items", 0).map_err(btree_error)?;
            meta.insert("held_bytes", 0).map_err(btree_error)?;
        }
        tx.commit().map_err(btree_error)?;
        self.applied.store(lsn, Ordering::Release);
        self.durable.store(lsn, Ordering::Release);
        Ok(())
    }
}

impl Store {
    /// Moves the ordered keyspace's changes that the log holds durably into its B-tree;
    /// `durable` makes that commit survive a crash, so a restart reads the log from
    /// there. The server calls it every 100 ms, durably every second and at shutdown.
    pub fn apply_ordered(&self, durable: bool) -> Result<(), Error> {
        let Some(ordered) = self.ordered.as_ref() else {
            return Ok(());
        };
        if !durable && ordered.pending() == 0 {
            // Nothing to move, and only a durable commit moves the LSN alone.
            return Ok(());
        }
        // With every shard read-locked no change is between its append and its note.
        let appended = {
            let _guards: Vec<_> = self.index.shards().iter().map(|s| s.read()).collect();
            self.log.appended_lsn()
        };
        let upto = appended.min(self.log.synced_lsn());
        ordered.apply(upto, durable, self.log.oldest_segment())
    }

    /// Makes the ordered keyspace durable through `lsn` (a segment's end, before the
    /// segment is removed), if it is not yet; with held spaces, through every change
    /// noted so far, since compaction notes held keys it dropped or moved with no
    /// record of their own in the segment.
    pub(crate) fn ordered_durable_through(&self, lsn: u64) -> Result<(), Error> {
        match self.ordered.as_ref() {
            Some(ordered) if ordered.spaces().has_held() || ordered.durable_lsn() < lsn => {
                self.apply_ordered(true)
            }
            _ => Ok(()),
        }
    }

    /// The spaces kept in order (none without an ordered keyspace), the held ones
    /// among them.
    pub(crate) fn held_spaces(&self) -> OrderedSpaces {
        self.ordered
            .as_ref()
            .map_or_else(OrderedSpaces::default, Ordered::spaces)
    }

    /// Whether `key` is of a held space.
    pub(crate) fn is_held(&self, key: Key<'_>) -> bool {
        self.ordered
            .as_ref()
            .is_some_and(|o| o.spaces().is_held(key.space))
    }

    /// Notes in the overlay every change the log holds after the B-tree's LSN: at open.
    pub(crate) fn catch_up_ordered(&self) -> Result<u64, Error> {
        let Some(ordered) = self.ordered.as_ref() else {
            return Ok(0);
        };
        let from = ordered.durable_lsn();
        // The cursor reads the segment files: the tail goes to them first.
        self.log.force_sync()?;
        let end = self.log.synced_lsn();
        let cursor = if from > end {
            // The B-tree is ahead of the log, which only a log put back by hand does.
            ordered.clear(0)?;
            self.log.follow_oldest()
        } else {
            self.log.follow(from).or_else(|| self.log.follow_oldest())
        };
        let Some(mut cursor) = cursor else {
            return Ok(0);
        };
        let mut noted = 0;
        let mut failed = None;
        cursor.read(&self.log, end, u64::MAX, |here, record, _, lsn| {
            let change = match *record {
                Record::Put { key, value, .. } => {
                    let data = data_len(key.bytes, value) as u32;
                    Some((
                        key,
                        Some(Place {
                            location: here,
                            data,
                        }),
                    ))
                }
                Record::Delete { key } => Some((key, None)),
                _ => None,
            };
            let Some((key, new)) = change else { return };
            if !ordered.spaces().contains(key.space) || failed.is_some() {
                return;
            }
            // A held key's record before this one, in the B-tree or noted just now.
            let old = if ordered.spaces().is_held(key.space) {
                match ordered.place(key) {
                    Ok((old, _)) => old,
                    Err(e) => {
                        failed = Some(e);
                        return;
                    }
                }
            } else {
                None
            };
            ordered.note(key, lsn, old, new);
            noted += 1;
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        // The held records' live bytes, which replay of the index left out, and their
        // keys.
        let (account, held) = ordered.held_account();
        for (segment, bytes) in account {
            self.log.hold_bytes(segment, bytes);
        }
        self.count_items(crate::key::Class::Tables, held.items as i64);
        Ok(noted)
    }
}
