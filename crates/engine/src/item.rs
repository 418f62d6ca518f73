//! The item types of the store's API: a key's live version as a read or an update's
//! closure sees it ([`ItemOf`], [`Item`], [`ItemRef`]), and what an update asks for and
//! gets back ([`NewItem`], [`NewCas`], [`Change`], [`Written`], [`Access`]).
//!
//! What it is not for: these are plain data. How a change is logged and applied to the
//! index is [`Store::update`](crate::Store::update)'s.
//!
//! Invariants: an [`ItemRef`] borrows its value from the index under the key's shard
//! lock, so nothing is copied or counted unless the closure keeps it
//! ([`ItemRef::to_item`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::index::Entry;

/// One key's live version: its value and what memcached keeps beside it. The value is
/// `V`: owned in an [`Item`], a snapshot that outlives the lookup, or borrowed from the
/// index in an [`ItemRef`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemOf<V> {
    pub value: V,
    pub client_flags: u32,
    /// Absolute Unix seconds; 0 = never.
    pub exptime: u32,
    pub cas: u64,
    pub lsn: u64,
    pub stale: bool,
    /// The key was stored base64-encoded by a meta command (memcached's binary key).
    pub binary_key: bool,
    /// Whether the item had been fetched before this access.
    pub fetched: bool,
    /// Unix seconds of the last access before this one.
    pub last_access: u32,
    pub win_sent: bool,
}

/// A snapshot of one key's live version.
pub type Item = ItemOf<Arc<[u8]>>;

/// A live version as [`Store::update`](crate::Store::update)'s closure sees it:
/// borrowed from the index under the key's shard lock, so nothing is copied or counted
/// unless the closure keeps it ([`ItemRef::to_item`]).
pub type ItemRef<'a> = ItemOf<&'a Arc<[u8]>>;

impl<V> ItemOf<V> {
    /// The same version with another hold on its value.
    fn with_value<W>(&self, value: W) -> ItemOf<W> {
        ItemOf {
            value,
            client_flags: self.client_flags,
            exptime: self.exptime,
            cas: self.cas,
            lsn: self.lsn,
            stale: self.stale,
            binary_key: self.binary_key,
            fetched: self.fetched,
            last_access: self.last_access,
            win_sent: self.win_sent,
        }
    }
}

impl<'a> ItemRef<'a> {
    pub(crate) fn of(entry: &'a Entry) -> ItemRef<'a> {
        ItemOf {
            value: &entry.value,
            client_flags: entry.client_flags,
            exptime: entry.exptime,
            cas: entry.cas,
            lsn: entry.lsn,
            stale: entry.stale,
            binary_key: entry.binary_key,
            fetched: entry.fetched.load(Ordering::Relaxed),
            last_access: entry.last_access.load(Ordering::Relaxed),
            win_sent: entry.win_sent.load(Ordering::Relaxed),
        }
    }

    /// The version as an owned [`Item`], holding a reference to the value.
    pub fn to_item(&self) -> Item {
        self.with_value(Arc::clone(self.value))
    }
}

/// Where a new version's CAS comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewCas {
    /// The next value of the store's counter.
    Generate,
    /// Chosen by the client (the meta protocol's `E` flag).
    Explicit(u64),
    /// A replica's copy of its primary's version: that version's CAS, and whether the
    /// client chose it.
    Copied { cas: u64, explicit: bool },
}

#[derive(Debug, Clone)]
pub struct NewItem {
    pub value: Arc<[u8]>,
    pub client_flags: u32,
    /// Absolute Unix seconds; 0 = never. See
    /// [`exptime_to_absolute`](crate::exptime_to_absolute).
    pub exptime: u32,
    pub cas: NewCas,
    pub stale: bool,
    pub binary_key: bool,
    /// Whether a win token for this version was already handed out (not logged).
    pub win_sent: bool,
}

impl NewItem {
    /// A plain new version: `value` and `client_flags`, no expiry, a fresh CAS.
    pub fn new(value: Arc<[u8]>, client_flags: u32) -> NewItem {
        NewItem {
            value,
            client_flags,
            exptime: 0,
            cas: NewCas::Generate,
            stale: false,
            binary_key: false,
            win_sent: false,
        }
    }
}

/// What an update does to its key.
#[derive(Debug, Clone)]
pub enum Change {
    Keep,
    Put(NewItem),
    Delete,
    /// New expiry (if any), same value and CAS; and whether to remember that a win
    /// token was handed out for this version (volatile, not logged).
    Touch {
        exptime: Option<u32>,
        mark_win_sent: bool,
    },
}

/// What an update wrote to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The reply reporting this change may go out once this LSN is acknowledged.
    pub lsn: u64,
    /// The CAS of the version now stored.
    pub cas: u64,
}

/// Whether an update counts as an access of the item (meta `h`, `l` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Fetch,
    NoAccess,
}
