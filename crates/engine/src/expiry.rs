//! Expiry and flush_all's deadline: which versions are dead, and dropping them.
//!
//! Expiry follows memcached: an exptime of 0 never expires, up to 30 days is relative,
//! beyond is absolute Unix time, negative is already expired. Expired and flushed items
//! are dropped when met; the maintenance pass ([`Store::purge_expired`]) drops those in
//! memory, compaction those only in the log.
//!
//! What it is not for: setting the deadline (that is [`Store::flush_all`]), or reading a
//! version only in the log to learn whether it is dead (`cold.rs`).
//!
//! Invariants: a version hidden by a delayed flush_all is deleted in the log when it is
//! dropped: a later flush_all that replaces the deadline would show it again otherwise,
//! after a restart but not before. An expired one needs no record; replay finds it
//! expired as well.

use std::sync::atomic::Ordering;

use crate::index::{Entry, Found, Loaded, Shard};
use crate::key::{Class, Key, Space};
use crate::log::{Holds, Location};
use crate::record::Record;
use crate::store::data_len;
use crate::Store;

/// memcached's exptime rule: 0 never; negative already expired; up to 30 days relative
/// to now; beyond, an absolute Unix time (in the past: already expired). Returns absolute
/// Unix seconds, 0 for never and 1 for "already expired".
pub fn exptime_to_absolute(exptime: i64, now_secs: u32) -> u32 {
    const RELATIVE_MAX_SECS: i64 = 60 * 60 * 24 * 30;
    if exptime == 0 {
        0
    } else if exptime < 0 {
        1
    } else if exptime > RELATIVE_MAX_SECS {
        if exptime <= i64::from(now_secs) {
            1
        } else {
            u32::try_from(exptime).unwrap_or(u32::MAX)
        }
    } else {
        u32::try_from(i64::from(now_secs) + exptime).unwrap_or(u32::MAX)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    Live,
    Expired,
    /// Hidden by a delayed flush_all whose deadline has come.
    Flushed,
}

/// Whether a version of a key in `space`, expiring at `exptime` and stored at `time`,
/// is live at `now`. A delayed flush_all's deadline hides only memcached's keys.
pub(crate) fn liveness(
    space: Space,
    exptime: u32,
    time: u32,
    now: u32,
    flush_deadline: u32,
) -> Liveness {
    let flush_deadline = match space.class() {
        Class::Memcached => flush_deadline,
        Class::Tables => 0,
    };
    if exptime != 0 && exptime <= now {
        Liveness::Expired
    } else if flush_deadline != 0 && now >= flush_deadline && time <= flush_deadline {
        Liveness::Flushed
    } else {
        Liveness::Live
    }
}

pub(crate) fn entry_liveness(entry: &Entry, now: u32, flush_deadline: u32) -> Liveness {
    liveness(entry.space, entry.exptime, entry.time, now, flush_deadline)
}

impl Store {
    /// Drops the dead version at slot `pos` (its record at `location`, `data` bytes of
    /// key and value), as memcached unlinks one it meets. A version hidden by a delayed
    /// flush_all is deleted in the log too: a later flush_all that replaces the
    /// deadline would show it again otherwise, after a restart but not before. An
    /// expired one needs no record; replay finds it expired as well. Returns whether
    /// it went.
    pub(crate) fn drop_dead(
        &self,
        shard: &mut Shard,
        pos: usize,
        key: Key<'_>,
        (location, data): (Location, u64),
        state: Liveness,
    ) -> bool {
        let class = key.space.class();
        let held = self.is_held(key);
        match state {
            Liveness::Live => return false,
            // A replica's primary writes the delete; the replica's copy of it finds
            // the key gone.
            Liveness::Flushed if self.is_read_only() => self.log.free(location, class),
            Liveness::Flushed => {
                let delete = Record::Delete { key };
                if self
                    .log
                    .append(&delete, Holds::Nothing, Some(location))
                    .is_err()
                {
                    // A poisoned log: leave the version hidden, not deleted.
                    return false;
                }
            }
            Liveness::Expired => self.log.free(location, class),
        }
        if held {
            // Gone without a record: the ordered keyspace forgets its place, durably
            // before compaction removes the segment it is in.
            let lsn = self.log.appended_lsn();
            self.note_held(key, lsn, Some(crate::apply::place(location, data)), None);
        } else {
            *shard.data_bytes_mut(class) -= data;
        }
        shard.remove(pos);
        self.count_items(class, -1);
        true
    }

    /// Drops the version in memory at slot `pos`, slab place `idx`, if it is dead.
    pub(crate) fn drop_if_dead(
        &self,
        shard: &mut Shard,
        pos: usize,
        idx: usize,
        now: u32,
        deadline: u32,
    ) {
        let entry = shard.entry(idx);
        let state = entry_liveness(entry, now, deadline);
        let held = (entry.location, data_len(&entry.key, &entry.value));
        let (space, key) = (entry.space, entry.key.clone());
        self.drop_dead(shard, pos, Key::new(space, &key), held, state);
    }

    /// Drops every expired version in memory (its disk space becomes garbage for
    /// compaction to reclaim), one shard at a time. Expired versions only in the log
    /// go when a request meets them or compaction reaches their segment. A shard none
    /// of whose versions in memory can have expired yet (its expiry bound) is not read:
    /// with ten million rows and no exptimes, reading them all each second took a
    /// quarter of a core. Returns how many went.
    pub fn purge_expired(&self) -> u64 {
        let mut purged = 0;
        for shard in self.index.shards() {
            if !shard.read().may_have_expired(self.now_secs()) {
                continue;
            }
            let now = self.now_secs();
            let deadline = self.flush_deadline.load(Ordering::Acquire);
            let mut guard = shard.write();
            let expired = guard.expired_keys(now, |e| {
                entry_liveness(e, now, deadline) == Liveness::Expired
            });
            for key in expired {
                let h = self.index.hash(key.as_key());
                if let Found::Cached { pos, idx } = guard.find(key.as_key(), h, &Loaded::new()) {
                    self.drop_if_dead(&mut guard, pos, idx, now, deadline);
                    purged += 1;
                }
            }
        }
        self.expired_purged.fetch_add(purged, Ordering::Relaxed);
        purged
    }
}
