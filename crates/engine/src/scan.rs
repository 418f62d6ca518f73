//! Reading every live version of one key space: the log read from its oldest record
//! (a [`crate::log::Cursor`]), each put of that space kept if the index still points at it and it is live now. For
//! state kept beside the index that must be rebuilt at start (the tables' ordered
//! indexes), and for reading a table whole.
//!
//! What it is not for: recovery (which rebuilds the index itself and must cut a torn
//! tail) or compaction (which copies what it finds). A scan sees every version that was
//! live when it began and is still live when the scan reaches its record; one written
//! while the scan runs may or may not be seen.
//!
//! Invariant: compaction is held off while a scan runs, so no segment it has yet to
//! read goes away; writes go on.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::expiry::{liveness, Liveness};
use crate::index::{self, Shard};
use crate::item::Item;
use crate::key::Space;
use crate::record::{Record, ITEM_BINARY_KEY, ITEM_STALE};
use crate::{Error, Store};

impl Store {
    /// Calls `visit` with the key bytes and the version of every live key of `space`,
    /// in log order. Returns how many it visited. Blocks on the disk.
    pub fn scan_space(
        &self,
        space: Space,
        mut visit: impl FnMut(&[u8], Item),
    ) -> Result<u64, Error> {
        let _no_compaction = self.compaction.lock();
        // The tail's records go to the segment files first, so reading those is enough.
        self.log.force_sync()?;
        let until = self.log.synced_lsn();
        let Some(mut cursor) = self.log.follow_oldest() else {
            return Ok(0);
        };
        let mut visited = 0;
        let mut failed = None;
        cursor.read(&self.log, until, u64::MAX, |here, rec, _, _| {
            let Record::Put {
                key,
                value,
                client_flags,
                exptime,
                time,
                cas,
                item_flags,
            } = *rec
            else {
                return;
            };
            if key.space != space {
                return;
            }
            let raw = index::raw_address(here.segment, here.offset);
            let h = self.index.hash(key);
            // The record's metadata if it is the key's live version: in memory, its
            // entry's; a held key with no version in memory, live here, the record's.
            let meta = |shard: &Shard, found: Option<(usize, Option<usize>)>, place| match found {
                None if crate::held::is_at(place, here).is_some() => {
                    Some((client_flags, exptime, time, cas, 0))
                }
                None => None,
                Some((_, Some(idx))) => {
                    let e = shard.entry(idx);
                    Some((e.client_flags, e.exptime, e.time, e.cas, e.lsn))
                }
                Some((_, None)) => Some((client_flags, exptime, time, cas, 0)),
            };
            let found = if self.is_held(key) {
                match self.lock_record(key, h, raw, here) {
                    Ok((shard, found, place)) => meta(&shard, found, place),
                    Err(e) => {
                        failed.get_or_insert(e);
                        return;
                    }
                }
            } else {
                let shard = self.index.shard(h).read();
                meta(&shard, shard.find_location(h, raw, here), None)
            };
            let now = self.now_secs();
            let deadline = self.flush_deadline.load(Ordering::Acquire);
            let Some((client_flags, exptime, time, cas, lsn)) = found else {
                return;
            };
            if liveness(space, exptime, time, now, deadline) != Liveness::Live {
                return;
            }
            let item = Item {
                value: Arc::from(value),
                client_flags,
                exptime,
                cas,
                lsn,
                stale: item_flags & ITEM_STALE != 0,
                binary_key: item_flags & ITEM_BINARY_KEY != 0,
                fetched: false,
                last_access: time,
                win_sent: false,
            };
            visit(key.bytes, item);
            visited += 1;
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(visited),
        }
    }
}
