//! A version in memory (`Entry`: its key inline when short, value, metadata and the
//! cache's bookkeeping), a version read from the log (`Version`), and what each costs.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use super::Hashed;
use crate::key::{Key as EngineKey, Space};
use crate::log::Location;
use crate::record::{ITEM_BINARY_KEY, ITEM_EXPLICIT_CAS, ITEM_STALE};

/// A version read from the log: its put record, owned.
#[derive(Debug, Clone)]
pub(crate) struct Version {
    pub space: Space,
    pub key: Box<[u8]>,
    pub value: Arc<[u8]>,
    pub client_flags: u32,
    pub exptime: u32,
    pub time: u32,
    pub cas: u64,
    pub item_flags: u8,
    pub location: Location,
}

/// Records read from the log during one request, by raw address: what a lookup may
/// use in place of a cold slot's record.
pub(crate) type Loaded = Vec<(u64, Version)>;

/// Keys up to this long are kept in their entry.
const INLINE_KEY_BYTES: usize = 22;

/// A key as its version in memory keeps it: in the entry itself when it is short, so a
/// lookup compares it without following a pointer (a cache miss saved, the largest
/// cost of a lookup after the slot's and the entry's own) and it takes no allocation;
/// on the heap otherwise.
#[derive(Debug, Clone)]
pub(crate) enum Key {
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_BYTES],
    },
    Heap(Box<[u8]>),
}

impl Key {
    fn new(key: &[u8]) -> Key {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE_KEY_BYTES => {
                let mut bytes = [0; INLINE_KEY_BYTES];
                bytes[..key.len()].copy_from_slice(key);
                Key::Inline { len, bytes }
            }
            _ => Key::Heap(key.into()),
        }
    }

    /// What it takes from the allocator beyond its entry.
    fn heap_bytes(&self) -> u64 {
        match self {
            Key::Inline { .. } => 0,
            Key::Heap(key) => alloc_bytes(key.len()),
        }
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Key::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Key::Heap(key) => key,
        }
    }
}

/// A version in memory.
#[derive(Debug)]
pub(crate) struct Entry {
    pub key: Key,
    pub space: Space,
    pub value: Arc<[u8]>,
    pub client_flags: u32,
    /// Absolute Unix seconds; 0 = never.
    pub exptime: u32,
    /// Unix seconds when this version was stored; decides a delayed flush_all.
    pub time: u32,
    pub cas: u64,
    /// The LSN of the record that made this version; a reply that shows it waits until
    /// that LSN is acknowledged. A copy made by compaction keeps the original's LSN: it
    /// is no new write. 0 for versions read from the log.
    pub lsn: u64,
    /// Where the record holding this version sits (moved by compaction).
    pub location: Location,
    pub stale: bool,
    /// Stored through the meta protocol's base64 key flag: replies show it encoded.
    pub binary_key: bool,
    /// The CAS was chosen by the client (meta `E`), not by the store's counter.
    pub explicit_cas: bool,
    /// Volatile access bookkeeping for the meta protocol (not logged; lost when the
    /// version leaves memory).
    pub fetched: AtomicBool,
    pub last_access: AtomicU32,
    pub win_sent: AtomicBool,
    /// Read since it came into memory: the cache's second chance.
    pub referenced: AtomicBool,
    /// Its slot's fingerprint, to find the slot again when it is evicted.
    pub(super) fp: u32,
}

impl Entry {
    /// A version in memory for the key `h` came from.
    pub fn new(h: Hashed, key: EngineKey<'_>, value: Arc<[u8]>, location: Location) -> Entry {
        Entry {
            key: Key::new(key.bytes),
            space: key.space,
            value,
            client_flags: 0,
            exptime: 0,
            time: 0,
            cas: 0,
            lsn: 0,
            location,
            stale: false,
            binary_key: false,
            explicit_cas: false,
            fetched: AtomicBool::new(false),
            last_access: AtomicU32::new(0),
            win_sent: AtomicBool::new(false),
            referenced: AtomicBool::new(false),
            fp: h.fp as u32,
        }
    }

    /// A version read from the log, in memory again.
    pub fn from_version(h: Hashed, v: &Version) -> Entry {
        Entry {
            client_flags: v.client_flags,
            exptime: v.exptime,
            time: v.time,
            cas: v.cas,
            stale: v.item_flags & ITEM_STALE != 0,
            binary_key: v.item_flags & ITEM_BINARY_KEY != 0,
            explicit_cas: v.item_flags & ITEM_EXPLICIT_CAS != 0,
            last_access: AtomicU32::new(v.time),
            ..Entry::new(
                h,
                EngineKey::new(v.space, &v.key),
                Arc::clone(&v.value),
                v.location,
            )
        }
    }

    /// The item flags its record carries.
    pub fn item_flags(&self) -> u8 {
        (if self.stale { ITEM_STALE } else { 0 })
            | (if self.binary_key { ITEM_BINARY_KEY } else { 0 })
            | (if self.explicit_cas {
                ITEM_EXPLICIT_CAS
            } else {
                0
            })
    }

    /// Records an access. Writes only what changed: a hot key read from both cores
    /// would otherwise bounce its cache line on every read.
    pub fn mark_access(&self, now_secs: u32) {
        if !self.fetched.load(Ordering::Relaxed) {
            self.fetched.store(true, Ordering::Relaxed);
        }
        if self.last_access.load(Ordering::Relaxed) != now_secs {
            self.last_access.store(now_secs, Ordering::Relaxed);
        }
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }
}

/// What an allocation of `len` bytes takes from the allocator: its header, rounded up
/// to its 16-byte granule.
fn alloc_bytes(len: usize) -> u64 {
    (len as u64 + 8).div_ceil(16) * 16
}

/// A slab place.
pub(super) const ENTRY_BYTES: u64 = std::mem::size_of::<Option<Entry>>() as u64;

/// What a version in memory costs beyond its slab place: its key if it is not kept in
/// the entry, and its value (with the value's reference counts).
pub(super) fn entry_cost(entry: &Entry) -> u64 {
    entry.key.heap_bytes() + alloc_bytes(16 + entry.value.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_live_in_their_entry_and_long_ones_on_the_heap() {
        for len in [0, 1, 9, INLINE_KEY_BYTES, INLINE_KEY_BYTES + 1, 250] {
            let key: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            let kept = Key::new(&key);
            assert_eq!(*kept, *key, "{len} bytes");
            let inline = matches!(kept, Key::Inline { .. });
            assert_eq!(inline, len <= INLINE_KEY_BYTES, "{len} bytes");
            assert_eq!(kept.heap_bytes() == 0, inline, "{len} bytes");
            assert_eq!(*kept.clone(), *key);
        }
        // A key that is a prefix of another is not equal to it.
        assert_ne!(*Key::new(b"abc"), *Key::new(b"abcd"));
        assert_ne!(*Key::new(b"abc"), b"abc\0"[..]);
    }
}
