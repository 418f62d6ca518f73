//! The log's on-disk format, version 3: a segment header, then records back to back.
//! `docs/format.md` documents the same layout; change both together and bump
//! [`FORMAT_VERSION`]. Older logs are read as they are: version 2 gave meaning to a
//! byte that version 1 always wrote as zero (the key space) and added the batch
//! record, which version 1 never wrote; version 3 records in each segment's header the
//! LSN the log had reached where the segment starts, so that LSNs survive the removal
//! of old segments. Records did not change in version 3.
//!
//! Segment header, 32 bytes (version 3):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `KURALOG\n` |
//! | 8 | 4 | format version, u32 LE (3) |
//! | 12 | 4 | CRC-32C of bytes 0..12 and 16..32 |
//! | 16 | 8 | segment sequence number, u64 LE |
//! | 24 | 8 | start LSN, u64 LE: the LSN of the record before the segment's first |
//!
//! Versions 1 and 2: the version at 8, zero at 12, the sequence at 16, the CRC-32C of
//! bytes 0..24 at 24, zero at 28; no start LSN.
//!
//! Record: an 8-byte frame, then a body of `len` bytes. All integers little-endian.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | CRC-32C of bytes 4..8+len (the length and the body) |
//! | 4 | 4 | len: body length |
//! | 8 | 1 | kind: 1 put, 2 delete, 3 touch, 4 flush_all, 5 CAS floor, 6 batch |
//! | 9 | 1 | key length (0 for flush_all, CAS floor and batch) |
//! | 10 | 1 | item flags: bit 0 stale, bit 1 CAS chosen by the client, bit 2 binary key |
//! | 11 | 1 | key space (0: memcached's keys; see [`crate::Space`]) |
//! | 12 | 8 | CAS |
//! | 20 | .. | kind-specific fields, then the key, then (put) the value |
//!
//! Kind-specific fields: put has client flags u32, exptime u32 (absolute Unix seconds,
//! 0 = never), time u32 (Unix seconds when stored), and the value fills the rest of the
//! body; touch has exptime u32; flush_all has deadline u32 (Unix seconds, 0 = at once)
//! and time u32 (Unix seconds when issued); delete and CAS floor have none; batch has
//! count u32 and bytes u32.
//!
//! A batch record says that the next `count` records, `bytes` long in all, are one
//! change: replay applies all of them or, if any is missing or damaged, none, and cuts
//! the log at the batch record. The records of a batch are ordinary records (never
//! batches), each with its own frame and CRC, so the index can point at any of them.
//!
//! A record is valid only if its whole frame is present and its CRC matches; recovery
//! stops at the first record that is not, and cuts the log there.

use crate::key::{Key, Space, KEY_MAX_BYTES};

pub const MAGIC: &[u8; 8] = b"KURALOG\n";
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format version this build reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;
pub const SEGMENT_HEADER_BYTES: usize = 32;
pub const FRAME_BYTES: usize = 8;
const BODY_FIXED_BYTES: usize = 12;
/// The largest body recovery accepts; anything larger is corruption, not data.
pub const BODY_MAX_BYTES: usize = 1 << 30;

const KIND_PUT: u8 = 1;
const KIND_DELETE: u8 = 2;
const KIND_TOUCH: u8 = 3;
const KIND_FLUSH: u8 = 4;
const KIND_CAS_FLOOR: u8 = 5;
const KIND_BATCH: u8 = 6;

pub const ITEM_STALE: u8 = 1;
pub const ITEM_EXPLICIT_CAS: u8 = 2;
pub const ITEM_BINARY_KEY: u8 = 4;

/// One change, as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record<'a> {
    Put {
        key: Key<'a>,
        value: &'a [u8],
        client_flags: u32,
        exptime: u32,
        time: u32,
        cas: u64,
        item_flags: u8,
    },
    Delete {
        key: Key<'a>,
    },
    Touch {
        key: Key<'a>,
        exptime: u32,
        cas: u64,
    },
    /// The highest CAS handed out so far, written by compaction before it removes
    /// records, so that CAS values stay unique after the records that held them are gone.
    CasFloor {
        cas: u64,
    },
    FlushAll {
        deadline: u32,
        /// Unix seconds when the flush_all was issued; for people reading the log.
        time: u32,
        cas: u64,
    },
    /// The next `count` records, `bytes` long in all, are one atomic change.
    Batch {
        count: u32,
        bytes: u32,
    },
}

impl Record<'_> {
    /// The key a put, delete or touch is about.
    pub fn key(&self) -> Option<Key<'_>> {
        match self {
            Record::Put { key, .. } | Record::Delete { key } | Record::Touch { key, .. } => {
                Some(*key)
            }
            Record::CasFloor { .. } | Record::FlushAll { .. } | Record::Batch { .. } => None,
        }
    }
}

/// What [`decode`] found at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A valid record and its encoded length.
    Record(Record<'a>, usize),
    /// The buffer ends inside a record: a torn write.
    Truncated,
    /// The bytes are not a valid record.
    Corrupt,
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn get_u32(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

fn get_u64(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

/// The encoded length of a record, frame included.
pub fn encoded_len(record: &Record<'_>) -> usize {
    FRAME_BYTES
        + BODY_FIXED_BYTES
        + match record {
            Record::Put { key, value, .. } => 12 + key.bytes.len() + value.len(),
            Record::Delete { key } => key.bytes.len(),
            Record::Touch { key, .. } => 4 + key.bytes.len(),
            Record::FlushAll { .. } => 8,
            Record::CasFloor { .. } => 0,
            Record::Batch { .. } => 8,
        }
}

/// Appends the encoding of `record` to `out`.
pub fn encode(record: &Record<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    let body_len = encoded_len(record) - FRAME_BYTES;
    assert!(
        body_len <= BODY_MAX_BYTES,
        "record body of {body_len} bytes"
    );
    let len = u32::try_from(body_len).unwrap_or(u32::MAX);
    put_u32(out, 0); // CRC, filled in below
    put_u32(out, len);
    let none = Key::memcached(&[]);
    let (kind, key, item_flags, cas): (u8, Key<'_>, u8, u64) = match record {
        Record::Put {
            key,
            item_flags,
            cas,
            ..
        } => (KIND_PUT, *key, *item_flags, *cas),
        Record::Delete { key } => (KIND_DELETE, *key, 0, 0),
        Record::Touch { key, cas, .. } => (KIND_TOUCH, *key, 0, *cas),
        Record::FlushAll { cas, .. } => (KIND_FLUSH, none, 0, *cas),
        Record::CasFloor { cas } => (KIND_CAS_FLOOR, none, 0, *cas),
        Record::Batch { .. } => (KIND_BATCH, none, 0, 0),
    };
    // The store refuses longer keys before anything is appended (Error::KeyTooLong).
    assert!(
        key.bytes.len() <= KEY_MAX_BYTES,
        "key of {} bytes",
        key.bytes.len()
    );
    out.push(kind);
    out.push(key.bytes.len() as u8);
    out.push(item_flags);
    out.push(key.space.0);
    out.extend_from_slice(&cas.to_le_bytes());
    match record {
        Record::Put {
            key,
            value,
            client_flags,
            exptime,
            time,
            ..
        } => {
            put_u32(out, *client_flags);
            put_u32(out, *exptime);
            put_u32(out, *time);
            out.extend_from_slice(key.bytes);
            out.extend_from_slice(value);
        }
        Record::Delete { key } => out.extend_from_slice(key.bytes),
        Record::Touch { key, exptime, .. } => {
            put_u32(out, *exptime);
            out.extend_from_slice(key.bytes);
        }
        Record::FlushAll { deadline, time, .. } => {
            put_u32(out, *deadline);
            put_u32(out, *time);
        }
        Record::CasFloor { .. } => {}
        Record::Batch { count, bytes } => {
            put_u32(out, *count);
            put_u32(out, *bytes);
        }
    }
    let crc = crc32c::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    debug_assert_eq!(
        decode(&out[start..]),
        Decoded::Record(record.clone(), out.len() - start)
    );
}

/// The body length the frame at the start of `buf` claims; None if `buf` is shorter
/// than a frame. Unchecked: [`decode`] says whether the record is whole and sound.
pub fn body_len(buf: &[u8]) -> Option<usize> {
    (buf.len() >= FRAME_BYTES).then(|| get_u32(buf, 4) as usize)
}

/// Whether the record at the start of `buf` claims to be a batch record (unchecked:
/// [`decode`] says whether it is one). False if `buf` is too short to say.
pub fn is_batch(buf: &[u8]) -> bool {
    buf.len() > FRAME_BYTES && buf[FRAME_BYTES] == KIND_BATCH
}

/// Decodes the record at the start of `buf`.
pub fn decode(buf: &[u8]) -> Decoded<'_> {
    match decode_unverified(buf) {
        Decoded::Record(_, total) if crc32c::crc32c(&buf[4..total]) != get_u32(buf, 0) => {
            Decoded::Corrupt
        }
        decoded => decoded,
    }
}

/// [`decode`] without the CRC check: for a reader that only looks at what records
/// a run holds before handing the run to something that checks it (a replica's
/// tables, ahead of `Store::apply_copied`).
pub fn decode_unverified(buf: &[u8]) -> Decoded<'_> {
    let Some(len) = body_len(buf) else {
        return Decoded::Truncated;
    };
    if !(BODY_FIXED_BYTES..=BODY_MAX_BYTES).contains(&len) {
        return Decoded::Corrupt;
    }
    let total = FRAME_BYTES + len;
    if buf.len() < total {
        return Decoded::Truncated;
    }
    let body = &buf[FRAME_BYTES..total];
    let kind = body[0];
    let key_len = usize::from(body[1]);
    let item_flags = body[2];
    let space = Space(body[3]);
    let cas = get_u64(body, 4);
    let rest = &body[BODY_FIXED_BYTES..];
    let key = |bytes| Key { space, bytes };
    let keyless = key_len == 0 && space == Space::MEMCACHED;
    let record = match kind {
        KIND_PUT if rest.len() >= 12 + key_len => Record::Put {
            client_flags: get_u32(rest, 0),
            exptime: get_u32(rest, 4),
            time: get_u32(rest, 8),
            key: key(&rest[12..12 + key_len]),
            value: &rest[12 + key_len..],
            cas,
            item_flags,
        },
        KIND_DELETE if rest.len() == key_len => Record::Delete { key: key(rest) },
        KIND_TOUCH if rest.len() == 4 + key_len => Record::Touch {
            exptime: get_u32(rest, 0),
            key: key(&rest[4..]),
            cas,
        },
        KIND_FLUSH if rest.len() == 8 && keyless => Record::FlushAll {
            deadline: get_u32(rest, 0),
            time: get_u32(rest, 4),
            cas,
        },
        KIND_CAS_FLOOR if rest.is_empty() && keyless => Record::CasFloor { cas },
        KIND_BATCH if rest.len() == 8 && keyless && cas == 0 => Record::Batch {
            count: get_u32(rest, 0),
            bytes: get_u32(rest, 4),
        },
        _ => return Decoded::Corrupt,
    };
    Decoded::Record(record, total)
}

/// The header that starts every segment file: its sequence number, and the LSN the
/// log has reached where it starts.
pub fn segment_header(sequence: u64, start_lsn: u64) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut h = [0u8; SEGMENT_HEADER_BYTES];
    h[0..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&sequence.to_le_bytes());
    h[24..32].copy_from_slice(&start_lsn.to_le_bytes());
    let crc = header_crc(&h);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The CRC of a version 3 header: every byte but the CRC's own.
fn header_crc(h: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&h[0..12]), &h[16..SEGMENT_HEADER_BYTES])
}

/// What the start of a segment file says.
#[derive(Debug, PartialEq, Eq)]
pub enum Header {
    Valid {
        sequence: u64,
        /// The LSN where the segment starts; None in a segment of version 1 or 2,
        /// which did not record it.
        start_lsn: Option<u64>,
    },
    /// Shorter than a header: a segment whose creation was torn.
    Truncated,
    /// Not a Kura segment, or a version this build cannot read.
    Invalid(String),
}

pub fn parse_segment_header(buf: &[u8]) -> Header {
    if buf.len() < SEGMENT_HEADER_BYTES {
        return Header::Truncated;
    }
    if &buf[0..8] != MAGIC {
        return Header::Invalid("bad magic".to_string());
    }
    let version = get_u32(buf, 8);
    let (whole, start_lsn) = if version >= 3 {
        (header_crc(buf) == get_u32(buf, 12), Some(get_u64(buf, 24)))
    } else {
        (crc32c::crc32c(&buf[0..24]) == get_u32(buf, 24), None)
    };
    if !whole {
        return Header::Invalid("header checksum mismatch".to_string());
    }
    if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&version) {
        return Header::Invalid(format!(
            "format version {version}, this build reads {OLDEST_READABLE_VERSION} to {FORMAT_VERSION}"
        ));
    }
    Header::Valid {
        sequence: get_u64(buf, 16),
        start_lsn,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(record: Record<'_>, expected_len: usize) {
        let mut out = Vec::new();
        encode(&record, &mut out);
        assert_eq!(out.len(), expected_len);
        assert_eq!(encoded_len(&record), expected_len);
        assert_eq!(decode(&out), Decoded::Record(record.clone(), expected_len));
        for cut in 0..out.len() {
            assert_eq!(decode(&out[..cut]), Decoded::Truncated, "cut at {cut}");
        }
        for i in 0..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 0x40;
            assert_ne!(
                decode(&bad),
                Decoded::Record(record.clone(), expected_len),
                "flip at byte {i} went unnoticed"
            );
        }
    }

    #[test]
    fn records_round_trip_and_damage_is_detected() {
        check(
            Record::Put {
                key: Key::memcached(b"k"),
                value: b"hello",
                client_flags: 7,
                exptime: 0,
                time: 100,
                cas: 1,
                item_flags: 0,
            },
            8 + 12 + 12 + 1 + 5,
        );
        check(
            Record::Put {
                key: Key::new(Space(2), &[b'x'; 255]),
                value: b"",
                client_flags: u32::MAX,
                exptime: u32::MAX,
                time: 0,
                cas: u64::MAX,
                item_flags: ITEM_STALE | ITEM_EXPLICIT_CAS,
            },
            8 + 12 + 12 + 255,
        );
        check(
            Record::Delete {
                key: Key::memcached(b"gone"),
            },
            8 + 12 + 4,
        );
        check(
            Record::Delete {
                key: Key::new(Space(7), b"gone"),
            },
            8 + 12 + 4,
        );
        check(
            Record::Batch {
                count: 3,
                bytes: 999,
            },
            8 + 12 + 8,
        );
        check(Record::CasFloor { cas: 12345 }, 8 + 12);
        check(
            Record::Touch {
                key: Key::new(Space(1), b"t"),
                exptime: 5,
                cas: 9,
            },
            8 + 12 + 4 + 1,
        );
        check(
            Record::FlushAll {
                deadline: 0,
                time: 77,
                cas: 3,
            },
            8 + 12 + 8,
        );
    }

    #[test]
    fn the_same_bytes_in_two_spaces_are_two_keys() {
        let mut a = Vec::new();
        encode(
            &Record::Delete {
                key: Key::memcached(b"k"),
            },
            &mut a,
        );
        let mut b = Vec::new();
        encode(
            &Record::Delete {
                key: Key::new(Space(3), b"k"),
            },
            &mut b,
        );
        assert_ne!(a, b);
        let Decoded::Record(Record::Delete { key }, _) = decode(&b) else {
            panic!("a delete decodes as a delete");
        };
        assert_eq!(key, Key::new(Space(3), b"k"));
    }

    #[test]
    fn older_segments_are_read() {
        for version in [1u32, 2] {
            let mut h = [0u8; SEGMENT_HEADER_BYTES];
            h[0..8].copy_from_slice(MAGIC);
            h[8..12].copy_from_slice(&version.to_le_bytes());
            h[16..24].copy_from_slice(&9u64.to_le_bytes());
            let crc = crc32c::crc32c(&h[0..24]);
            h[24..28].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(
                parse_segment_header(&h),
                Header::Valid {
                    sequence: 9,
                    start_lsn: None
                }
            );
        }
        let mut h = segment_header(9, 0);
        h[8..12].copy_from_slice(&4u32.to_le_bytes());
        let crc = header_crc(&h);
        h[12..16].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(parse_segment_header(&h), Header::Invalid(_)));
    }

    #[test]
    fn segment_header_round_trips() {
        let h = segment_header(42, 1 << 40);
        assert_eq!(
            parse_segment_header(&h),
            Header::Valid {
                sequence: 42,
                start_lsn: Some(1 << 40)
            }
        );
        assert_eq!(parse_segment_header(&h[..10]), Header::Truncated);
        for i in 0..SEGMENT_HEADER_BYTES {
            let mut bad = h;
            bad[i] ^= 1;
            assert!(
                matches!(parse_segment_header(&bad), Header::Invalid(_)),
                "byte {i}"
            );
        }
    }
}
