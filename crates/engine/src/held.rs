//! Keys of held spaces ([`crate::OrderedSpaces::with_held`]): found through the
//! ordered keyspace, which keeps each one's place in the log, instead of a slot.
//!
//! A held key has a slot only while its version is in memory (a lookup that reads it
//! puts it there; eviction takes slot and version away together). A lookup that finds
//! no slot asks the ordered keyspace for the key's place, before taking the shard's
//! lock (the B-tree may read the disk), and then, under the lock, checks that the place
//! still holds ([`Ordered::place_now`](crate::ordered::Ordered)): every change of a
//! key's place is noted under its shard lock, so a place checked there is the key's
//! place until the lock is let go. The record there is read with the lock let go too,
//! as a cold slot's is, and put in memory under the lock if its place still holds.
//!
//! Compaction and a scan of a space meet records in the log and ask whether each is its
//! key's live version ([`Store::lock_record`]): a slot at the record answers for a key
//! in memory, held or not; only for a held key with none is its place read
//! ([`Store::lock_with_place`]).

use std::sync::atomic::Ordering;

use parking_lot::RwLockWriteGuard;

use crate::cold::MAX_ROUNDS;
use crate::index::{self, Entry, Hashed, Loaded, Shard};
use crate::key::Key;
use crate::log::Location;
use crate::ordered::Place;
use crate::{Error, Store};

/// A held key's place as read before the shard lock, and the ordered keyspace's
/// generation then (see [`crate::ordered::Ordered::place`]).
pub(crate) type PlaceRead = Option<(Option<Place>, u64)>;

/// What a lookup that found no slot for a key does next.
pub(crate) enum HeldStep {
    /// The key is absent (or of no held space).
    Absent,
    /// Its version is in memory now, at this slab place.
    Installed(usize),
    /// Let go of the lock and read this, then look again.
    Read(HeldRead),
}

/// What a held key's lookup must read with its shard lock let go.
pub(crate) enum HeldRead {
    /// Its place, from the ordered keyspace.
    Place,
    /// Its record: raw address, segment and offset.
    Record(u64, u64, u32),
}

impl Store {
    /// For `key`, which has no slot in `shard` (locked for writing): if it is of a
    /// held space, its version put in memory from `loaded` if `place` (read before
    /// the lock) still holds, or what to read first.
    pub(crate) fn held_step(
        &self,
        shard: &mut Shard,
        key: Key<'_>,
        h: Hashed,
        place: PlaceRead,
        loaded: &Loaded,
    ) -> HeldStep {
        let Some(ordered) = self.ordered.as_ref() else {
            return HeldStep::Absent;
        };
        if !ordered.spaces().is_held(key.space) {
            return HeldStep::Absent;
        }
        let Some(read) = place else {
            return HeldStep::Read(HeldRead::Place);
        };
        let Some(now) = ordered.place_now(key, read) else {
            return HeldStep::Read(HeldRead::Place);
        };
        let Some(place) = now else {
            return HeldStep::Absent;
        };
        let at = place.location;
        let raw = index::raw_address(at.segment, at.offset);
        let found = loaded.iter().find(|(a, v)| {
            *a == raw && v.location == at && v.space == key.space && *v.key == *key.bytes
        });
        match found {
            Some((_, v)) => {
                let idx = shard.insert_cached(h, Entry::from_version(h, v));
                // Wanted just now: it gets a second chance before it can go again.
                shard.entry(idx).referenced.store(true, Ordering::Relaxed);
                HeldStep::Installed(idx)
            }
            None => HeldStep::Read(HeldRead::Record(raw, at.segment, at.offset)),
        }
    }

    /// Reads what [`Store::held_step`] asked for, with no lock held.
    pub(crate) fn held_read(
        &self,
        key: Key<'_>,
        h: Hashed,
        what: HeldRead,
        place: &mut PlaceRead,
        loaded: &mut Loaded,
    ) -> Result<(), Error> {
        match what {
            HeldRead::Place => {
                if let Some(ordered) = self.ordered.as_ref() {
                    *place = Some(ordered.place(key)?);
                }
                Ok(())
            }
            HeldRead::Record(raw, segment, offset) => {
                self.load(h, vec![(raw, segment, offset)], loaded)?;
                // A record compaction moved meanwhile is not read: the place moved too.
                if !loaded.iter().any(|(a, _)| *a == raw) {
                    *place = None;
                }
                Ok(())
            }
        }
    }

    /// Whether `key` is of a held space and has no version in memory: a lookup of it
    /// reads the ordered keyspace and then the log, which may block on the disk, so a
    /// caller that must not block reads it elsewhere first.
    pub fn held_out_of_memory(&self, key: Key<'_>) -> bool {
        if !self.is_held(key) {
            return false;
        }
        let h = self.index.hash(key);
        let shard = self.index.shard(h).read();
        !matches!(
            shard.find(key, h, &Loaded::new()),
            index::Found::Cached { .. }
        )
    }

    /// `key`'s shard (hashed `h`) locked for writing, and the place of `key`, of a held
    /// space, which holds while the lock does. The place is read before the lock and
    /// checked under it, as a request's is; for compaction and scans, which meet held
    /// keys' records in the log.
    pub(crate) fn lock_with_place(
        &self,
        key: Key<'_>,
        h: Hashed,
    ) -> Result<(RwLockWriteGuard<'_, Shard>, Option<Place>), Error> {
        let Some(ordered) = self.ordered.as_ref() else {
            return Ok((self.index.shard(h).write(), None));
        };
        let mut read = ordered.place(key)?;
        for _ in 0..MAX_ROUNDS {
            let shard = self.index.shard(h).write();
            if let Some(place) = ordered.place_now(key, read) {
                return Ok((shard, place));
            }
            drop(shard);
            read = ordered.place(key)?;
        }
        // The B-tree kept moving: read it under the lock.
        let shard = self.index.shard(h).write();
        let (place, _) = ordered.place(key)?;
        Ok((shard, place))
    }

    /// `key`'s shard (hashed `h`) locked for writing, the slot and slab place of its
    /// version at `here` (raw address `raw`) if the index has it there, and, for a key
    /// of a held space that the index does not have there, its place in the ordered
    /// keyspace, which holds while the lock does. A held key whose version is in memory
    /// has its slot: the B-tree is read only for one that is not.
    pub(crate) fn lock_record(
        &self,
        key: Key<'_>,
        h: Hashed,
        raw: u64,
        here: Location,
    ) -> Result<FoundRecord<'_>, Error> {
        let shard = self.index.shard(h).write();
        let found = shard.find_location(h, raw, here);
        if found.is_some() || !self.is_held(key) {
            return Ok((shard, found, None));
        }
        drop(shard);
        let (shard, place) = self.lock_with_place(key, h)?;
        let found = shard.find_location(h, raw, here);
        Ok((shard, found, place))
    }
}

/// What [`Store::lock_record`] finds: the locked shard, the slot and slab place of the
/// version at a location, and a held key's place.
pub(crate) type FoundRecord<'a> = (
    RwLockWriteGuard<'a, Shard>,
    Option<(usize, Option<usize>)>,
    Option<Place>,
);

/// Whether `place` is the record at `here`.
pub(crate) fn is_at(place: Option<Place>, here: Location) -> Option<Place> {
    place.filter(|p| p.location.segment == here.segment && p.location.offset == here.offset)
}
