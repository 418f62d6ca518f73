//! Keys and the key spaces they live in.
//!
//! Every key belongs to a space, a byte the log records beside it: the same bytes in two
//! spaces are two keys. Space 0 holds memcached's keys; the tables layer keeps its
//! catalog, rows and index entries in spaces of its own, so no memcached key (whatever
//! bytes a binary key holds) can name a row.
//!
//! memcached's own rules stop at its space: `flush_all`, immediate or delayed, removes
//! only keys of [`Space::MEMCACHED`], and its counters (`curr_items`, `bytes`) count
//! only them. The index tells the two classes apart by a bit in every slot, so an
//! immediate `flush_all` drops memcached's keys without reading a record, and the log
//! counts each segment's live bytes of memcached's keys apart from the rest.

/// A key space. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Space(pub u8);

impl Space {
    /// memcached's keys: what the text and meta protocols reach.
    pub const MEMCACHED: Space = Space(0);

    /// Whether memcached's rules (flush_all, its counters) apply to keys of this space.
    pub fn class(self) -> Class {
        if self == Space::MEMCACHED {
            Class::Memcached
        } else {
            Class::Tables
        }
    }
}

/// The two kinds of key the engine tells apart for memcached's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Memcached,
    Tables,
}

/// The most bytes a key may have: its length is one byte in the log's records.
pub const KEY_MAX_BYTES: usize = 255;

/// A key: its space and its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key<'a> {
    pub space: Space,
    pub bytes: &'a [u8],
}

impl<'a> Key<'a> {
    pub fn new(space: Space, bytes: &'a [u8]) -> Key<'a> {
        Key { space, bytes }
    }

    /// A memcached key.
    pub fn memcached(bytes: &'a [u8]) -> Key<'a> {
        Key {
            space: Space::MEMCACHED,
            bytes,
        }
    }
}

impl<'a> From<&'a [u8]> for Key<'a> {
    fn from(bytes: &'a [u8]) -> Key<'a> {
        Key::memcached(bytes)
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for Key<'a> {
    fn from(bytes: &'a [u8; N]) -> Key<'a> {
        Key::memcached(bytes)
    }
}

impl<'a> From<&'a Vec<u8>> for Key<'a> {
    fn from(bytes: &'a Vec<u8>) -> Key<'a> {
        Key::memcached(bytes)
    }
}

/// A key that owns its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct OwnedKey {
    pub space: Space,
    pub bytes: Box<[u8]>,
}

impl OwnedKey {
    pub fn as_key(&self) -> Key<'_> {
        Key {
            space: self.space,
            bytes: &self.bytes,
        }
    }
}
