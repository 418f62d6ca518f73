//! The index checkpoint file, `index.ckpt`: the index's slots and what else replay would
//! rebuild, as of one position in the log, so that a restart reads this file and only
//! the log after that position. `docs/format.md` documents the same layout.
//!
//! All integers little-endian:
//!
//! | size | field |
//! |---|---|
//! | 8 | magic `KURAIDX\n` |
//! | 4 | version (2) |
//! | 4 | shards (64) |
//! | 16 | the index's two SipHash-1-3 keys |
//! | 8 | the oldest segment when it was written |
//! | 8, 8 | the log position it covers: segment, byte offset |
//! | 8 | the LSN at that position |
//! | 8 | the highest CAS handed out |
//! | 4, 4 | the pending delayed flush_all deadline (0 = none), zero |
//! | 8 | segments n, then n × (segment, bytes, live bytes, live bytes of memcached's keys), 32 bytes each |
//! | per shard | table capacity, key and value bytes of memcached's keys, of the tables' keys, slots m (8 each), then m slots |
//! | 4 | CRC-32C of everything before it |
//!
//! Version 1 (before key spaces) is not read: its slots' tags were 25 hash bits where
//! version 2's are 24 and a class bit, so the first start of a newer Kura replays the
//! whole log once.
//!
//! It is written to `index.ckpt.tmp`, synced, and renamed over `index.ckpt`, so the file
//! is always a whole checkpoint or the one before; one that fails its CRC is ignored and
//! the whole log replayed.

use std::collections::BTreeMap;

use crate::log::SegmentUsage;

pub const FILE: &str = "index.ckpt";
pub(crate) const TEMP_FILE: &str = "index.ckpt.tmp";
const MAGIC: &[u8; 8] = b"KURAIDX\n";
const VERSION: u32 = 2;

/// One shard's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShardImage {
    pub capacity: u64,
    pub data_bytes: u64,
    pub table_bytes: u64,
    pub slots: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    pub keys: (u64, u64),
    pub oldest_segment: u64,
    pub segment: u64,
    pub offset: u64,
    pub lsn: u64,
    pub max_cas: u64,
    pub flush_deadline: u32,
    pub usage: BTreeMap<u64, SegmentUsage>,
    pub shards: Vec<ShardImage>,
}

fn put(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

impl Checkpoint {
    pub fn encode(&self) -> Vec<u8> {
        let slots: usize = self.shards.iter().map(|s| s.slots.len()).sum();
        let mut out = Vec::with_capacity(128 + self.usage.len() * 32 + slots * 8);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.shards.len() as u32).to_le_bytes());
        put(&mut out, self.keys.0);
        put(&mut out, self.keys.1);
        put(&mut out, self.oldest_segment);
        put(&mut out, self.segment);
        put(&mut out, self.offset);
        put(&mut out, self.lsn);
        put(&mut out, self.max_cas);
        out.extend_from_slice(&self.flush_deadline.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        put(&mut out, self.usage.len() as u64);
        for (segment, usage) in &self.usage {
            put(&mut out, *segment);
            put(&mut out, usage.bytes);
            put(&mut out, usage.live_bytes);
            put(&mut out, usage.memcached_live_bytes);
        }
        for shard in &self.shards {
            put(&mut out, shard.capacity);
            put(&mut out, shard.data_bytes);
            put(&mut out, shard.table_bytes);
            put(&mut out, shard.slots.len() as u64);
            for &slot in &shard.slots {
                put(&mut out, slot);
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The checkpoint in `bytes`, or why it cannot be used.
    pub fn decode(bytes: &[u8], shards: usize) -> Result<Checkpoint, String> {
        if bytes.len() < 4 + MAGIC.len() {
            return Err("too short".into());
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body).to_le_bytes() != crc {
            return Err("its checksum does not match".into());
        }
        let mut r = Reader { buf: body, at: 0 };
        if r.take(8)? != MAGIC {
            return Err("not a Kura index checkpoint".into());
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(format!("version {version}, this Kura reads {VERSION}"));
        }
        let n = r.u32()? as usize;
        if n != shards {
            return Err(format!("{n} shards, this Kura has {shards}"));
        }
        let keys = (r.u64()?, r.u64()?);
        let oldest_segment = r.u64()?;
        let segment = r.u64()?;
        let offset = r.u64()?;
        let lsn = r.u64()?;
        let max_cas = r.u64()?;
        let flush_deadline = r.u32()?;
        r.u32()?;
        let segments = r.u64()?;
        let mut usage = BTreeMap::new();
        for _ in 0..segments {
            let segment = r.u64()?;
            let bytes = r.u64()?;
            let live_bytes = r.u64()?;
            let memcached_live_bytes = r.u64()?;
            usage.insert(
                segment,
                SegmentUsage {
                    bytes,
                    live_bytes,
                    memcached_live_bytes,
                },
            );
        }
        let mut images = Vec::with_capacity(n);
        for _ in 0..n {
            let capacity = r.u64()?;
            let data_bytes = r.u64()?;
            let table_bytes = r.u64()?;
            let count = r.u64()? as usize;
            let raw = r.take(count.checked_mul(8).ok_or("slot count overflows")?)?;
            let slots = raw
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect();
            images.push(ShardImage {
                capacity,
                data_bytes,
                table_bytes,
                slots,
            });
        }
        if r.at != body.len() {
            return Err("trailing bytes".into());
        }
        Ok(Checkpoint {
            keys,
            oldest_segment,
            segment,
            offset,
            lsn,
            max_cas,
            flush_deadline,
            usage,
            shards: images,
        })
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).ok_or("length overflows")?;
        let bytes = self.buf.get(self.at..end).ok_or("ends early")?;
        self.at = end;
        Ok(bytes)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_round_trip_and_damage_is_refused() {
        let checkpoint = Checkpoint {
            keys: (1, 2),
            oldest_segment: 3,
            segment: 5,
            offset: 4096,
            lsn: 99_999,
            max_cas: 77,
            flush_deadline: 0,
            usage: [(
                3,
                SegmentUsage {
                    bytes: 10,
                    live_bytes: 5,
                    memcached_live_bytes: 4,
                },
            )]
            .into(),
            shards: vec![
                ShardImage {
                    capacity: 16,
                    data_bytes: 30,
                    table_bytes: 9,
                    slots: vec![1 << 40, 7],
                },
                ShardImage {
                    capacity: 0,
                    data_bytes: 0,
                    table_bytes: 0,
                    slots: vec![],
                },
            ],
        };
        let bytes = checkpoint.encode();
        assert_eq!(Checkpoint::decode(&bytes, 2), Ok(checkpoint));
        for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
            assert!(
                Checkpoint::decode(&bytes[..cut], 2).is_err(),
                "cut at {cut}"
            );
        }
        let mut damaged = bytes.clone();
        damaged[40] ^= 1;
        assert!(Checkpoint::decode(&damaged, 2).is_err());
        assert!(Checkpoint::decode(&bytes, 64).is_err());
    }
}
