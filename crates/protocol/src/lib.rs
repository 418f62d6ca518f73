//! kura-protocol: memcached 1.6's text and meta protocols, bytes to
//! [`Request`]s and replies to bytes (and its binary protocol, in [`binary`]), byte-for-byte as memcached 1.6.18 speaks
//! them, errors included.
//!
//! Not here: sockets, buffers, the store, or any decision that needs stored
//! data. The server owns the connection's read buffer, calls [`parse`] on it,
//! executes the request, and writes replies with [`response`].
//!
//! Invariants: nothing in this crate panics on any input (the fuzz targets in
//! `fuzz/` and the property tests check it); parsed keys and values borrow
//! from the caller's buffer, except base64-decoded meta keys; every reply is
//! exactly what memcached 1.6.18 writes (the tests' expectations were taken
//! from the real server).
//!
//! Where Kura deliberately differs from memcached is listed in
//! `docs/protocol.md`; for this crate: memcached's slab/LRU/log administration
//! commands (`slabs`, `lru`, `lru_crawler`, `watch`, `cache_memlimit`,
//! `extstore`) answer `ERROR`, and errors memcached detects
//! only after acting (an over-long opaque on `ma`, or on an `mg` that vivifies
//! or touches; a long key late in a `gat`) are found before anything runs.

pub mod auth;
pub mod base64;
pub mod binary;
mod error;
pub mod number;
mod parse;
pub mod replication;
mod request;
pub mod response;

pub use error::ProtocolError;
pub use parse::{parse, Parsed, LINE_WITHOUT_NEWLINE_MAX_BYTES, READ_BUFFER_BYTES};
pub use request::{
    ArithmeticCommand, FlagOrder, MetaArithmeticMode, MetaFlags, MetaRequest, MetaSetMode, Request,
    RetrievalCommand, ShutdownMode, StorageCommand, Tokens,
};

/// memcached's `KEY_MAX_LENGTH`.
pub const KEY_MAX_BYTES: usize = 250;

/// memcached's default `-I` (item size max), one MiB.
pub const ITEM_SIZE_MAX_BYTES: usize = 1024 * 1024;

/// memcached's item header on 64-bit builds (`sizeof(item)`), which counts
/// against the item size limit.
const ITEM_HEADER_BYTES: usize = 48;

/// The CAS field memcached adds to every item unless started with `-C`.
const ITEM_CAS_BYTES: usize = 8;

/// Size limits the parser enforces, with memcached's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest key, in bytes as sent (before base64 decoding); memcached: 250.
    pub key_max_bytes: usize,
    /// memcached's `-I`: the largest item, header, key and value included,
    /// as [`Limits::item_fits`] counts it. Default 1 MiB.
    pub item_size_max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            key_max_bytes: KEY_MAX_BYTES,
            item_size_max_bytes: ITEM_SIZE_MAX_BYTES,
        }
    }
}

impl Limits {
    /// Whether memcached would accept an item of this shape
    /// (`item_size_ok`): its header (48 bytes), CAS (8), key and NUL, client
    /// flags (4, only when non-zero) and data with `\r\n` must fit in
    /// `item_size_max_bytes`. With the defaults and a one-byte key, the
    /// largest value is 1048516 bytes, as on the real server.
    pub fn item_fits(&self, key_bytes: usize, flags: u32, data_with_crlf_bytes: usize) -> bool {
        let flags_bytes = if flags == 0 { 0 } else { 4 };
        ITEM_HEADER_BYTES
            .saturating_add(ITEM_CAS_BYTES)
            .saturating_add(key_bytes)
            .saturating_add(1)
            .saturating_add(flags_bytes)
            .saturating_add(data_with_crlf_bytes)
            <= self.item_size_max_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(key_bytes: usize, flags: u32, value_bytes: usize, fits: bool) {
        assert_eq!(
            Limits::default().item_fits(key_bytes, flags, value_bytes + 2),
            fits,
            "key {key_bytes} flags {flags} value {value_bytes}"
        );
    }

    /// Thresholds measured on memcached 1.6.18 with default settings.
    #[test]
    fn item_size_matches_memcached() {
        check(1, 0, 1048516, true);
        check(1, 0, 1048517, false);
        check(1, 5, 1048512, true);
        check(1, 5, 1048513, false);
        check(10, 0, 1048507, true);
        check(10, 0, 1048508, false);
        check(usize::MAX, 0, usize::MAX - 2, false);
    }
}
