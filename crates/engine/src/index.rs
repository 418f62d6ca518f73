//! The in-memory index: key -> where its newest live version is, in eight bytes a key,
//! with no key in memory. Each shard also holds its part of the cache of versions in
//! memory.
//!
//! The index is split in 64 shards, each a `RwLock<Shard>`, so that writers of
//! different keys do not wait on one another and readers never wait on a writer of
//! another shard. The shard is chosen from the top bits of a keyed SipHash of the key,
//! so clients cannot aim every key at one shard.
//!
//! A shard is an open-addressing table of 8-byte slots (linear probing, at most 4/5
//! full, grown by half when it gets there). A slot holds a 25-bit tag, 24 more bits of
//! the key's hash and, lowest, its class (memcached's key space or the tables'; see
//! [`crate::key`]), and either
//! - the address of the key's newest record in the log (segment number modulo 4096
//!   and byte offset: see [`raw_address`]): the key is "cold", nothing else of it is in
//!   memory; or
//! - the place in the shard's slab of an [`Entry`]: the whole version (key, value,
//!   metadata) is in memory, "cached".
//!
//! A slot's home is the fingerprint scaled to the table's size, so the table can be
//! grown, and a slot removed by shifting its neighbours back, from the slots alone. A
//! lookup compares fingerprints; a cached candidate settles it by its key, a cold one
//! only by reading its record. Two keys of one shard share a fingerprint with odds of
//! one in 2^24 for each slot a lookup passes: see [`Found::Unknown`]. The class bit lets an
//! immediate `flush_all` drop memcached's keys and keep the tables' without reading a
//! record.
//!
//! The cache evicts with a second chance, CLOCK style, over the slab: a version read
//! since it came in goes round once more. An evicted version becomes a cold slot again.
//! A version is evicted only once its record has been written to the operating
//! system, so a read of the file finds it.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::key::{Class, Key as EngineKey, OwnedKey, Space};
use crate::log::Location;
use crate::OrderedSpaces;

mod entry;

use entry::{entry_cost, ENTRY_BYTES};
pub(crate) use entry::{Entry, Loaded, Version};

/// 64 shards: enough that two cores and their connections rarely meet on one lock.
const SHARD_BITS: u32 = 6;
pub(crate) const SHARDS: u64 = 1 << SHARD_BITS;

/// Bits of a slot's tag: 24 hash bits beside the shard's, then the key's class.
const FP_BITS: u32 = 25;
/// The tag's lowest bit: set for the tables' key spaces.
const TABLES_CLASS: u64 = 1;
const FP_SHIFT: u32 = 64 - FP_BITS;
/// The slot's kind: set when it names a slab entry, clear when a log address.
const CACHED: u64 = 1 << 38;
const PAYLOAD: u64 = CACHED - 1;

/// Bits of a record's byte offset in its segment: segments are at most 64 MiB.
pub(crate) const OFFSET_BITS: u32 = 26;
pub(crate) const MAX_SEGMENT_BYTES: u64 = 1 << OFFSET_BITS;
/// How many segments a slot's address can tell apart: the log may span at most this
/// many at once (256 GiB at 64 MiB each).
pub(crate) const SEGMENT_WINDOW: u64 = 1 << (38 - OFFSET_BITS);

/// A slot's size.
pub(crate) const SLOT_BYTES: u64 = 8;
/// The most one more key can cost the table: a slot at the lowest load the table has
/// right after it grew (4/5 ÷ 3/2 = 8/15 full), rounded up.
pub(crate) const KEY_COST_BYTES: u64 = 16;

/// A record's address as a cold slot holds it: its segment number modulo
/// [`SEGMENT_WINDOW`] and its byte offset. The live segments are always a run of
/// consecutive numbers shorter than the window (the log refuses to grow past it), so
/// the oldest live segment's number turns it back into a [`Location`]'s segment.
pub(crate) fn raw_address(segment: u64, offset: u32) -> u64 {
    ((segment % SEGMENT_WINDOW) << OFFSET_BITS) | u64::from(offset)
}

/// The segment and offset of a raw address, given the oldest live segment.
pub(crate) fn address_of(raw: u64, oldest_segment: u64) -> (u64, u32) {
    let window_slot = raw >> OFFSET_BITS;
    let back = (window_slot + SEGMENT_WINDOW - oldest_segment % SEGMENT_WINDOW) % SEGMENT_WINDOW;
    (
        oldest_segment + back,
        (raw & ((1 << OFFSET_BITS) - 1)) as u32,
    )
}

/// A key's hash, split: which shard, and the tag its slot keeps (hash bits and class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hashed {
    shard: usize,
    fp: u64,
}

impl Hashed {
    /// The number of the shard the key is in: shard locks are taken in this order.
    pub fn shard_number(&self) -> usize {
        self.shard
    }
}

/// What a lookup found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// In memory: the slot, and the entry's place in the slab.
    Cached { pos: usize, idx: usize },
    /// Cold, and `loaded[which]` is its record, read for this request.
    Loaded { pos: usize, which: usize },
    /// Not in the index.
    Absent,
    /// Cold slots whose fingerprint matches: the records at these raw addresses must be
    /// read to tell whether one is the key's (usually exactly one, and it is).
    Unknown(Vec<u64>),
}

/// Where a shard's table lies, published so that a lookup can ask for its home
/// slot's cache line while it waits for the shard lock ([`Index::prefetch_home`]).
/// Read without the lock it may be stale or torn, which costs a useless prefetch and
/// nothing else: a prefetch never dereferences its address.
#[derive(Debug, Default)]
struct TableHint {
    base: AtomicUsize,
    len: AtomicUsize,
}

/// A shard's table of `capacity` empty slots. The kernel is asked to back its whole
/// 2 MiB pages with huge pages before they are first written, where transparent huge
/// pages are on for those who ask (`madvise`, as on this machine). A key's home slot
/// is at a random place in a table of tens of MB at ten million keys; with 4 KiB pages
/// nearly every lookup is a TLB miss, a page walk (two-dimensional in a VM) before the
/// cache miss. sysbench `oltp_read_only` at 10,000,000 rows spent 6% of its samples on
/// the instruction after the home slot's prefetch, and ran at 2,237 transactions/s
/// with 4 KiB pages against 2,652 with the tables in huge pages (the slabs of entries
/// as well gave no more). A table's slots are spread evenly, so every page of a table
/// that size is in use: a huge page costs no memory it would not.
fn new_table(capacity: usize) -> Box<[u64]> {
    let slots = vec![0; capacity].into_boxed_slice();
    advise_huge_pages(slots.as_ptr() as usize, capacity * SLOT_BYTES as usize);
    slots
}

fn advise_huge_pages(start: usize, len: usize) {
    const HUGE: usize = 2 << 20;
    let first = start.next_multiple_of(HUGE);
    let end = (start + len) / HUGE * HUGE;
    if end <= first {
        return;
    }
    #[allow(unsafe_code)]
    // SAFETY: advice on memory the shard owns, which changes no byte of it; a kernel
    // without transparent huge pages answers EINVAL, which changes nothing either.
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
}

/// Asks the CPU to bring the cache line at `p` in, without waiting for it.
#[inline]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: a prefetch is a hint that neither dereferences `p` nor faults, whatever
    // the address; SSE, which the intrinsic needs, is part of every x86_64 CPU.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Where a key with fingerprint `fp` starts looking in a table of `len` slots.
fn home_slot(fp: u64, len: usize) -> usize {
    ((fp * len as u64) >> FP_BITS) as usize
}

/// One shard: its part of the index and of the cache.
#[derive(Debug)]
pub(crate) struct Shard {
    /// 0 = empty; otherwise fingerprint, kind and payload, as the module says.
    slots: Box<[u64]>,
    /// Where `slots` is, for lookups not yet holding the lock.
    hint: Arc<TableHint>,
    len: usize,
    /// Versions in memory; slots of kind CACHED point here.
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    /// The CLOCK hand: the next slab place eviction looks at.
    hand: usize,
    /// This shard's table bytes, also added into the index's total.
    index_bytes: u64,
    index_total: Arc<AtomicU64>,
    /// Keys and values in memory, beside the slab's own places.
    entry_bytes: u64,
    pub cached_values: u64,
    /// Bytes of keys and values of every live version, in memory or not, of memcached's
    /// keys (memcached's `bytes`) and of the tables'. The store keeps them, under the
    /// shard lock, rather than in one counter every core would write on every store.
    pub data_bytes: u64,
    pub table_bytes: u64,
    /// No version in memory expires before this (Unix seconds; `u32::MAX`: none
    /// expires): every exptime given to one lowers it, and only a sweep of the shard
    /// ([`Shard::expired_keys`]) raises it again. The maintenance pass skips a shard
    /// whose bound has not come, instead of reading every version it holds.
    soonest_expiry: u32,
}

impl Shard {
    fn new(index_total: Arc<AtomicU64>, hint: Arc<TableHint>) -> Shard {
        Shard {
            slots: Box::new([]),
            hint,
            len: 0,
            entries: Vec::new(),
            free: Vec::new(),
            hand: 0,
            index_bytes: 0,
            index_total,
            entry_bytes: 0,
            cached_values: 0,
            data_bytes: 0,
            table_bytes: 0,
            soonest_expiry: u32::MAX,
        }
    }

    /// How many keys the shard holds.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// How many keys of memcached's space and of the tables' the shard holds.
    pub fn class_counts(&self) -> (u64, u64) {
        let tables = self
            .slots
            .iter()
            .filter(|&&s| s != 0 && Shard::fp_of(s) & TABLES_CLASS != 0)
            .count() as u64;
        (self.len as u64 - tables, tables)
    }

    /// The data-bytes counter of keys of `class`.
    pub fn data_bytes_mut(&mut self, class: Class) -> &mut u64 {
        match class {
            Class::Memcached => &mut self.data_bytes,
            Class::Tables => &mut self.table_bytes,
        }
    }

    /// What the versions in memory cost: their keys, values and slab places.
    pub fn cached_bytes(&self) -> u64 {
        self.entry_bytes + self.entries.capacity() as u64 * ENTRY_BYTES
    }

    fn home(&self, fp: u64) -> usize {
        home_slot(fp, self.slots.len())
    }

    fn next(&self, pos: usize) -> usize {
        if pos + 1 == self.slots.len() {
            0
        } else {
            pos + 1
        }
    }

    /// Asks the CPU for what a lookup of `h` reads after its slot: the slab place of
    /// each version in memory with its fingerprint, or (`deep`, once those are in) that
    /// version's value. A batch that asks for all of its keys' places, then all of
    /// their values, before it reads any waits for those misses side by side, not one
    /// after another ([`Store::get_many`](crate::Store::get_many)).
    pub fn prefetch_version(&self, h: Hashed, deep: bool) {
        if self.slots.is_empty() {
            return;
        }
        let mut pos = self.home(h.fp);
        loop {
            let slot = self.slots[pos];
            if slot == 0 {
                return;
            }
            if slot >> FP_SHIFT == h.fp && slot & CACHED != 0 {
                let idx = (slot & PAYLOAD) as usize;
                if !deep {
                    let place = self.entries.as_ptr().wrapping_add(idx).cast::<u8>();
                    prefetch(place);
                    prefetch(place.wrapping_add(64));
                } else if let Some(Some(entry)) = self.entries.get(idx) {
                    // The count an Arc keeps before its bytes, and the bytes.
                    let value = Arc::as_ptr(&entry.value).cast::<u8>();
                    prefetch(value.wrapping_sub(16));
                }
            }
            pos = self.next(pos);
        }
    }

    /// Finds `key`, using the records in `loaded` for cold slots they cover.
    pub fn find(&self, key: EngineKey<'_>, h: Hashed, loaded: &Loaded) -> Found {
        if self.slots.is_empty() {
            return Found::Absent;
        }
        let mut unknown = Vec::new();
        let mut pos = self.home(h.fp);
        loop {
            let slot = self.slots[pos];
            if slot == 0 {
                break;
            }
            if slot >> FP_SHIFT == h.fp {
                let payload = slot & PAYLOAD;
                if slot & CACHED != 0 {
                    let idx = payload as usize;
                    if self.entries[idx]
                        .as_ref()
                        .is_some_and(|e| e.space == key.space && *e.key == *key.bytes)
                    {
                        return Found::Cached { pos, idx };
                    }
                } else if let Some(which) = loaded.iter().position(|(a, _)| *a == payload) {
                    let v = &loaded[which].1;
                    if v.space == key.space && *v.key == *key.bytes {
                        return Found::Loaded { pos, which };
                    }
                } else {
                    unknown.push(payload);
                }
            }
            pos = self.next(pos);
        }
        if unknown.is_empty() {
            Found::Absent
        } else {
            Found::Unknown(unknown)
        }
    }

    /// The slot of the version whose record is at `location` (raw address `raw`), and
    /// its slab place if it is in memory; None if no key's newest version is there.
    pub fn find_location(
        &self,
        h: Hashed,
        raw: u64,
        location: Location,
    ) -> Option<(usize, Option<usize>)> {
        if self.slots.is_empty() {
            return None;
        }
        let mut pos = self.home(h.fp);
        loop {
            let slot = self.slots[pos];
            if slot == 0 {
                return None;
            }
            if slot >> FP_SHIFT == h.fp {
                let payload = slot & PAYLOAD;
                if slot & CACHED == 0 {
                    if payload == raw {
                        return Some((pos, None));
                    }
                } else if let Some(entry) = &self.entries[payload as usize] {
                    if entry.location.segment == location.segment
                        && entry.location.offset == location.offset
                    {
                        return Some((pos, Some(payload as usize)));
                    }
                }
            }
            pos = self.next(pos);
        }
    }

    /// Whether a cold slot still holds the raw address `raw`.
    pub fn holds_address(&self, h: Hashed, raw: u64) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mut pos = self.home(h.fp);
        loop {
            let slot = self.slots[pos];
            if slot == 0 {
                return None;
            }
            if slot >> FP_SHIFT == h.fp && slot & CACHED == 0 && slot & PAYLOAD == raw {
                return Some(pos);
            }
            pos = self.next(pos);
        }
    }

    /// The slot that names slab place `idx`, of a key hashed `h`: slots move when
    /// others are removed or the table grows, slab places do not.
    pub fn slot_of_entry(&self, h: Hashed, idx: usize) -> usize {
        let want = (h.fp << FP_SHIFT) | CACHED | idx as u64;
        let mut pos = self.home(h.fp);
        let mut steps = 0;
        while self.slots[pos] != want {
            pos = self.next(pos);
            steps += 1;
            assert!(steps <= self.slots.len(), "slab place {idx} has no slot");
        }
        pos
    }

    pub fn entry(&self, idx: usize) -> &Entry {
        match &self.entries[idx] {
            Some(entry) => entry,
            None => panic!("slab place {idx} is empty but a slot names it"),
        }
    }

    /// The version in memory at slab place `idx`, to change anything but its
    /// exptime ([`Shard::set_exptime`]).
    pub fn entry_mut(&mut self, idx: usize) -> &mut Entry {
        match &mut self.entries[idx] {
            Some(entry) => entry,
            None => panic!("slab place {idx} is empty but a slot names it"),
        }
    }

    /// Gives the version in memory at slab place `idx` a new exptime.
    pub fn set_exptime(&mut self, idx: usize, exptime: u32) {
        self.entry_mut(idx).exptime = exptime;
        self.note_expiry(exptime);
    }

    fn note_expiry(&mut self, exptime: u32) {
        if exptime != 0 {
            self.soonest_expiry = self.soonest_expiry.min(exptime);
        }
    }

    /// Whether a version in memory may have expired by `now`.
    pub fn may_have_expired(&self, now: u32) -> bool {
        self.soonest_expiry <= now
    }

    fn slab_put(&mut self, entry: Entry) -> usize {
        self.note_expiry(entry.exptime);
        self.entry_bytes += entry_cost(&entry);
        self.cached_values += 1;
        match self.free.pop() {
            Some(idx) => {
                self.entries[idx as usize] = Some(entry);
                idx as usize
            }
            None => {
                self.entries.push(Some(entry));
                self.entries.len() - 1
            }
        }
    }

    fn slab_take(&mut self, idx: usize) -> Entry {
        let Some(entry) = self.entries[idx].take() else {
            panic!("slab place {idx} is empty but a slot names it");
        };
        self.entry_bytes -= entry_cost(&entry);
        self.cached_values -= 1;
        self.free.push(idx as u32);
        entry
    }

    fn fp_of(slot: u64) -> u64 {
        slot >> FP_SHIFT
    }

    /// Adds a key that is not in the shard, in memory. Returns its slab place.
    pub fn insert_cached(&mut self, h: Hashed, entry: Entry) -> usize {
        let idx = self.slab_put(entry);
        self.insert_slot((h.fp << FP_SHIFT) | CACHED | idx as u64);
        idx
    }

    /// Adds a key that is not in the shard, cold, its record at `raw`.
    pub fn insert_cold(&mut self, h: Hashed, raw: u64) {
        self.insert_slot((h.fp << FP_SHIFT) | raw);
    }

    fn insert_slot(&mut self, slot: u64) {
        if (self.len + 1) * 5 > self.slots.len() * 4 {
            self.grow();
        }
        let mut pos = self.home(Shard::fp_of(slot));
        while self.slots[pos] != 0 {
            pos = self.next(pos);
        }
        self.slots[pos] = slot;
        self.len += 1;
    }

    /// Makes the table half as large again, placing every slot anew from its
    /// fingerprint: no key is needed.
    fn grow(&mut self) {
        let capacity = (self.slots.len() * 3 / 2).max(16);
        let old = std::mem::replace(&mut self.slots, new_table(capacity));
        for slot in old.iter().copied().filter(|&s| s != 0) {
            let mut pos = self.home(Shard::fp_of(slot));
            while self.slots[pos] != 0 {
                pos = self.next(pos);
            }
            self.slots[pos] = slot;
        }
        self.account();
    }

    /// Recounts this shard's table bytes and passes the difference on to the index's
    /// total; publishes where the table now is (every reallocation comes through here).
    fn account(&mut self) {
        self.hint
            .base
            .store(self.slots.as_ptr() as usize, Ordering::Relaxed);
        self.hint.len.store(self.slots.len(), Ordering::Relaxed);
        let now = self.slots.len() as u64 * SLOT_BYTES;
        if now >= self.index_bytes {
            self.index_total
                .fetch_add(now - self.index_bytes, Ordering::Relaxed);
        } else {
            self.index_total
                .fetch_sub(self.index_bytes - now, Ordering::Relaxed);
        }
        self.index_bytes = now;
    }

    /// Brings the cold version at `pos` into memory as `entry`. Returns its slab place.
    pub fn install(&mut self, pos: usize, entry: Entry) -> usize {
        debug_assert_eq!(self.slots[pos] & CACHED, 0);
        let fp = Shard::fp_of(self.slots[pos]);
        let idx = self.slab_put(entry);
        self.slots[pos] = (fp << FP_SHIFT) | CACHED | idx as u64;
        idx
    }

    /// Makes the key at `pos` the version `entry`, in memory. Returns its slab place
    /// and the version it replaces if that was in memory.
    pub fn set_cached(&mut self, pos: usize, entry: Entry) -> (usize, Option<Entry>) {
        let slot = self.slots[pos];
        if slot & CACHED != 0 {
            let idx = (slot & PAYLOAD) as usize;
            let cost = entry_cost(&entry);
            self.note_expiry(entry.exptime);
            let Some(old) = self.entries[idx].replace(entry) else {
                panic!("slab place {idx} is empty but a slot names it");
            };
            self.entry_bytes = self.entry_bytes + cost - entry_cost(&old);
            (idx, Some(old))
        } else {
            (self.install(pos, entry), None)
        }
    }

    /// Gives the version in memory at slab place `idx` a new value and record; `fill`
    /// sets the rest. Returns the bytes of key and value it had.
    pub fn overwrite(
        &mut self,
        idx: usize,
        value: Arc<[u8]>,
        location: Location,
        fill: impl FnOnce(&mut Entry),
    ) -> u64 {
        let entry = match &mut self.entries[idx] {
            Some(entry) => entry,
            None => panic!("slab place {idx} is empty but a slot names it"),
        };
        let before = entry_cost(entry);
        let old_data = (entry.key.len() + entry.value.len()) as u64;
        entry.value = value;
        entry.location = location;
        fill(entry);
        let (after, exptime) = (entry_cost(entry), entry.exptime);
        self.entry_bytes = self.entry_bytes + after - before;
        self.note_expiry(exptime);
        old_data
    }

    /// Makes the key at `pos` cold, its newest record at `raw`. Returns the version in
    /// memory it replaces, if any.
    pub fn set_cold(&mut self, pos: usize, raw: u64) -> Option<Entry> {
        let slot = self.slots[pos];
        self.slots[pos] = (Shard::fp_of(slot) << FP_SHIFT) | raw;
        (slot & CACHED != 0).then(|| self.slab_take((slot & PAYLOAD) as usize))
    }

    /// Removes the key at `pos`, shifting the slots after it back so that no lookup
    /// stops short. Returns its version if it was in memory.
    pub fn remove(&mut self, pos: usize) -> Option<Entry> {
        let slot = self.slots[pos];
        let old = (slot & CACHED != 0).then(|| self.slab_take((slot & PAYLOAD) as usize));
        let mut hole = pos;
        let mut at = pos;
        loop {
            at = self.next(at);
            let next = self.slots[at];
            if next == 0 {
                break;
            }
            let home = self.home(Shard::fp_of(next));
            // It may fill the hole unless its home lies after the hole, up to `at`
            // (cyclically): then the hole is before its home.
            let stays = if hole <= at {
                hole < home && home <= at
            } else {
                hole < home || home <= at
            };
            if !stays {
                self.slots[hole] = next;
                hole = at;
            }
        }
        self.slots[hole] = 0;
        self.len -= 1;
        old
    }

    /// Forgets every key.
    /// Removes every key of memcached's space (an immediate `flush_all`), keeping the
    /// tables'. Returns how many keys went.
    pub fn clear_memcached(&mut self) -> usize {
        let kept: Vec<u64> = self
            .slots
            .iter()
            .copied()
            .filter(|&s| s != 0 && Shard::fp_of(s) & TABLES_CLASS != 0)
            .collect();
        if kept.is_empty() {
            let gone = self.len;
            self.clear();
            return gone;
        }
        let gone = self.len - kept.len();
        for pos in 0..self.slots.len() {
            let slot = self.slots[pos];
            if slot != 0 && Shard::fp_of(slot) & TABLES_CLASS == 0 && slot & CACHED != 0 {
                self.slab_take((slot & PAYLOAD) as usize);
            }
            self.slots[pos] = 0;
        }
        for slot in kept {
            let mut pos = self.home(Shard::fp_of(slot));
            while self.slots[pos] != 0 {
                pos = self.next(pos);
            }
            self.slots[pos] = slot;
        }
        self.len -= gone;
        self.data_bytes = 0;
        gone
    }

    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = 0);
        self.len = 0;
        self.entries.clear();
        self.free.clear();
        self.hand = 0;
        self.entry_bytes = 0;
        self.cached_values = 0;
        self.data_bytes = 0;
        self.table_bytes = 0;
        self.soonest_expiry = u32::MAX;
    }

    /// Whether any key is cold.
    pub fn has_cold(&self) -> bool {
        self.cached_values < self.len as u64
    }

    /// The keys of the versions in memory that `dead` finds dead at `now`; the
    /// shard's expiry bound becomes the soonest exptime of the others.
    pub fn expired_keys(
        &mut self,
        now: u32,
        mut dead: impl FnMut(&Entry) -> bool,
    ) -> Vec<OwnedKey> {
        let mut soonest = u32::MAX;
        let keys = self.cached_keys(|e| {
            if dead(e) {
                return true;
            }
            if e.exptime > now {
                soonest = soonest.min(e.exptime);
            }
            false
        });
        self.soonest_expiry = soonest;
        keys
    }

    /// The keys of the versions in memory that `pick` chooses.
    pub fn cached_keys(&self, mut pick: impl FnMut(&Entry) -> bool) -> Vec<OwnedKey> {
        self.entries
            .iter()
            .flatten()
            .filter(|e| pick(e))
            .map(|e| OwnedKey {
                space: e.space,
                bytes: Box::from(&*e.key),
            })
            .collect()
    }

    /// Adds to `out` the offsets of the records in `segment` that a slot points at:
    /// the segment's live records, found without reading it.
    pub fn offsets_in(&self, segment: u64, out: &mut Vec<u32>) {
        let window_slot = segment % SEGMENT_WINDOW;
        for &slot in self.slots.iter().filter(|&&s| s != 0) {
            let payload = slot & PAYLOAD;
            if slot & CACHED == 0 {
                if payload >> OFFSET_BITS == window_slot {
                    out.push((payload & ((1 << OFFSET_BITS) - 1)) as u32);
                }
            } else {
                let location = self.entry(payload as usize).location;
                if location.segment == segment {
                    out.push(location.offset);
                }
            }
        }
    }
    /// Evicts versions until the cache holds at most `budget` bytes or nothing more can
    /// go. Versions whose records are not yet written out (past `written_lsn`) stay.
    /// A key of a `held` space loses its slot with its version (the ordered
    /// keyspace's B-tree knows where its record is). Returns how many went.
    pub fn evict_to(&mut self, budget: u64, written_lsn: u64, held: OrderedSpaces) -> u64 {
        let mut evicted = 0;
        // Each place is looked at at most twice (once more after a second chance).
        let mut steps = self.entries.len() * 2;
        while self.cached_bytes() > budget && steps > 0 && self.cached_values > 0 {
            steps -= 1;
            if self.hand >= self.entries.len() {
                self.hand = 0;
            }
            let idx = self.hand;
            self.hand += 1;
            let Some(entry) = &self.entries[idx] else {
                continue;
            };
            if entry.referenced.swap(false, Ordering::Relaxed) || entry.lsn > written_lsn {
                continue;
            }
            let fp = u64::from(entry.fp);
            let raw = raw_address(entry.location.segment, entry.location.offset);
            let want = (fp << FP_SHIFT) | CACHED | idx as u64;
            let held_key = held.is_held(entry.space);
            let mut pos = self.home(fp);
            while self.slots[pos] != want {
                pos = self.next(pos);
            }
            if held_key {
                self.remove(pos);
            } else {
                self.set_cold(pos, raw);
            }
            evicted += 1;
        }
        let places = self.entries.capacity() as u64;
        if places > self.cached_values * 3 / 2 + 16 || (self.cached_values == 0 && places > 0) {
            self.compact_slab();
        }
        evicted
    }
}

impl Shard {
    /// The table as a checkpoint keeps it: its capacity and every slot in table
    /// order, each naming its record's address; the kind bit marks the versions that
    /// were in memory, for a restart to bring back. Keys of `held` spaces (in memory
    /// for now, and in the ordered keyspace for good) are left out.
    pub fn snapshot(&self, held: OrderedSpaces) -> (u64, Vec<u64>) {
        let slots = self
            .slots
            .iter()
            .copied()
            .filter(|&s| s != 0)
            .filter_map(|slot| {
                if slot & CACHED == 0 {
                    return Some(slot);
                }
                let entry = self.entry((slot & PAYLOAD) as usize);
                if held.is_held(entry.space) {
                    return None;
                }
                let raw = raw_address(entry.location.segment, entry.location.offset);
                Some((Shard::fp_of(slot) << FP_SHIFT) | CACHED | raw)
            })
            .collect();
        (self.slots.len() as u64, slots)
    }

    /// Fills an empty shard from a checkpoint's table: cold slots, placed anew. Returns
    /// the keys (fingerprint and raw address) whose versions were in memory.
    pub fn restore(
        &mut self,
        capacity: u64,
        slots: &[u64],
        (data_bytes, table_bytes): (u64, u64),
    ) -> Vec<(u64, u64)> {
        let mut were_cached = Vec::new();
        debug_assert_eq!(self.len, 0);
        let capacity = (capacity as usize).max(slots.len() * 5 / 4 + 1);
        self.slots = new_table(capacity);
        for &slot in slots {
            let mut pos = self.home(Shard::fp_of(slot));
            while self.slots[pos] != 0 {
                pos = self.next(pos);
            }
            self.slots[pos] = slot & !CACHED;
            if slot & CACHED != 0 {
                were_cached.push((Shard::fp_of(slot), slot & PAYLOAD));
            }
        }
        self.len = slots.len();
        self.data_bytes = data_bytes;
        self.table_bytes = table_bytes;
        self.account();
        were_cached
    }

    /// Gives back the slab's free places: moves the versions at its end into the
    /// lowest free places (repointing their slots), then shortens it.
    fn compact_slab(&mut self) {
        let mut holes = std::mem::take(&mut self.free);
        holes.sort_unstable_by(|a, b| b.cmp(a)); // lowest last, for pop
        loop {
            match self.entries.last() {
                None => break,
                Some(None) => {
                    self.entries.pop();
                    continue;
                }
                Some(Some(_)) => {}
            }
            let last = self.entries.len() - 1;
            let Some(&hole) = holes.last() else { break };
            if hole as usize >= last {
                break;
            }
            holes.pop();
            let Some(Some(entry)) = self.entries.pop() else {
                break;
            };
            let fp = u64::from(entry.fp);
            let from = (fp << FP_SHIFT) | CACHED | last as u64;
            let mut pos = self.home(fp);
            while self.slots[pos] != from {
                pos = self.next(pos);
            }
            self.slots[pos] = (fp << FP_SHIFT) | CACHED | u64::from(hole);
            self.entries[hole as usize] = Some(entry);
        }
        let len = self.entries.len() as u32;
        holes.retain(|&h| h < len);
        self.free = holes;
        self.entries.shrink_to_fit();
        if self.hand >= self.entries.len() {
            self.hand = 0;
        }
    }
}

pub(crate) struct Index {
    shards: Box<[RwLock<Shard>]>,
    /// Each shard's table, as it last published it.
    hints: Box<[Arc<TableHint>]>,
    /// SipHash-1-3 keys: random for a new index, the checkpoint's for a restored one.
    keys: (u64, u64),
    /// For tests: every key in shard 0 with a one-bit fingerprint.
    crowded: bool,
    /// What every shard's table allocates.
    bytes: Arc<AtomicU64>,
}

impl Index {
    /// An empty index. A `crowded` one puts every key in one shard with a one-bit
    /// fingerprint, for tests: keys then share fingerprints all the time, and every
    /// path that tells them apart by reading their records runs.
    pub fn new(crowded: bool) -> Index {
        let random = RandomState::new();
        Index::with_keys(crowded, (random.hash_one(1u8), random.hash_one(2u8)))
    }

    /// An empty index hashing with these keys.
    pub fn with_keys(crowded: bool, keys: (u64, u64)) -> Index {
        let bytes = Arc::new(AtomicU64::new(0));
        let hints: Box<[Arc<TableHint>]> = (0..SHARDS).map(|_| Arc::default()).collect();
        let shards = hints
            .iter()
            .map(|hint| RwLock::new(Shard::new(Arc::clone(&bytes), Arc::clone(hint))))
            .collect();
        Index {
            shards,
            hints,
            keys,
            crowded,
            bytes,
        }
    }

    /// What the index's tables allocate. Versions in memory are not in it: see
    /// `Shard::cached_bytes`.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn hash(&self, key: EngineKey<'_>) -> Hashed {
        let mut hasher = siphasher::sip::SipHasher13::new_with_keys(self.keys.0, self.keys.1);
        // memcached's keys hash as their bytes alone; another space's key is its space
        // byte first, so equal bytes in two spaces land apart.
        if key.space != Space::MEMCACHED {
            hasher.write_u8(key.space.0);
        }
        hasher.write(key.bytes);
        let hash = hasher.finish();
        let class = match key.space.class() {
            Class::Memcached => 0,
            Class::Tables => TABLES_CLASS,
        };
        if self.crowded {
            return Hashed {
                shard: 0,
                fp: ((hash & 1) << 1) | class,
            };
        }
        let hash_bits = FP_BITS - 1;
        Hashed {
            shard: (hash >> (64 - SHARD_BITS)) as usize,
            fp: (((hash >> (64 - SHARD_BITS - hash_bits)) & ((1 << hash_bits) - 1)) << 1) | class,
        }
    }

    pub fn shard_at(&self, number: usize) -> &RwLock<Shard> {
        &self.shards[number]
    }

    /// The hash of a key in shard `shard` with fingerprint `fp`.
    pub fn hashed(shard: usize, fp: u64) -> Hashed {
        Hashed { shard, fp }
    }

    pub fn keys(&self) -> (u64, u64) {
        self.keys
    }

    /// Asks for the cache line of `h`'s home slot before its shard is locked, so that
    /// the lookup's first miss overlaps the lock's.
    #[inline]
    pub fn prefetch_home(&self, h: Hashed) {
        let hint = &self.hints[h.shard];
        let len = hint.len.load(Ordering::Relaxed);
        let base = hint.base.load(Ordering::Relaxed);
        let pos = home_slot(h.fp, len);
        prefetch(std::ptr::without_provenance(
            base.wrapping_add(pos * SLOT_BYTES as usize),
        ));
    }

    pub fn shard(&self, h: Hashed) -> &RwLock<Shard> {
        &self.shards[h.shard]
    }

    pub fn shards(&self) -> &[RwLock<Shard>] {
        &self.shards
    }

    /// The offsets, in order, of the records in `segment` that some key's slot points
    /// at, each shard read under its lock in turn. A sealed segment only loses live
    /// records (a key never comes to point back into it), so a record missing here
    /// cannot be live later; one listed may be dead by the time it is looked at.
    pub fn offsets_in(&self, segment: u64) -> Vec<u32> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            shard.read().offsets_in(segment, &mut out);
        }
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests;
