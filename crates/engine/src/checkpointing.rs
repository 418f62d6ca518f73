//! Writing the index checkpoint ([`Store::checkpoint`]): every key's slot as of one
//! position in the log, with what replay would rebuild, so that a restart reads it and
//! only the log after that position.
//!
//! What it is not for: the file's layout, which `checkpoint.rs` (and `docs/format.md`)
//! define without any I/O, or choosing whether to use one at open (`recovery.rs`).
//!
//! Invariants: the copy is consistent (every shard read-locked, compaction held off);
//! the log is synced up to its position before the file is written; the file goes in
//! whole or not at all.

use std::sync::atomic::Ordering;

use crate::checkpoint::{self, Checkpoint, ShardImage};
use crate::{Error, Store};

impl Store {
    /// Writes the index checkpoint: every key's slot as of one position in the log,
    /// with what replay would rebuild (segment accounts, CAS, pending flush), so that a
    /// restart reads it and only the log after that position. Returns the keys it holds.
    ///
    /// The copy is consistent: it is taken with every shard read-locked (writes wait
    /// for it, reads go on; tens of milliseconds at ten million keys), and with
    /// compaction held off. The log is synced up to the position before the file is
    /// written, so everything the slots point at is on disk. The file goes in whole or
    /// not at all: written aside, synced, renamed over the last one.
    pub fn checkpoint(&self) -> Result<u64, Error> {
        let _no_compaction = self.compaction.lock();
        let held = self.held_spaces();
        let image = {
            let guards: Vec<_> = self.index.shards().iter().map(|s| s.read()).collect();
            let (segment, offset, lsn) = self.log.position();
            // The held keys' records are accounted for by the ordered keyspace, which
            // an open reads back (and the shards' slots leave them out).
            let held_account = self
                .ordered
                .as_ref()
                .map(|o| o.held_account().0)
                .unwrap_or_default();
            let mut usage: std::collections::BTreeMap<_, _> =
                self.log.usage().into_iter().collect();
            for (segment, bytes) in held_account {
                if let Some(u) = usage.get_mut(&segment) {
                    u.free(crate::key::Class::Tables, bytes);
                }
            }
            Checkpoint {
                keys: self.index.keys(),
                oldest_segment: self.log.oldest_segment(),
                segment,
                offset,
                lsn,
                max_cas: self.next_cas.load(Ordering::Acquire).saturating_sub(1),
                flush_deadline: self.flush_deadline.load(Ordering::Acquire),
                usage,
                shards: guards
                    .iter()
                    .map(|g| {
                        let (capacity, slots) = g.snapshot(held);
                        ShardImage {
                            capacity,
                            data_bytes: g.data_bytes,
                            table_bytes: g.table_bytes,
                            slots,
                        }
                    })
                    .collect(),
            }
        };
        self.log.force_sync()?;
        let keys = image.shards.iter().map(|s| s.slots.len() as u64).sum();
        let bytes = image.encode();
        drop(image);
        let mut file = self.disk.create(checkpoint::TEMP_FILE)?;
        for chunk in bytes.chunks(1 << 20) {
            file.append(chunk)?;
        }
        file.sync()?;
        self.disk.rename(checkpoint::TEMP_FILE, checkpoint::FILE)?;
        self.disk.sync_dir()?;
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(keys)
    }
}
