//! The ring that places keys on a cluster's shards: exactly libmemcached's weighted
//! ketama (`MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED`, pylibmc's `ketama_weighted`), so that
//! a memcached client that hashes that way sends each key to the shard Kura places it
//! on, and nothing is forwarded.
//!
//! How libmemcached builds it (`update_continuum` in its `hosts.cc`), which this
//! follows step by step:
//! - each member gets `floor(w/Σw · 160/4 · n + 1e-10) · 4` points, computed in
//!   single-precision float: 25 equal members get 156 points each (160 in double
//!   precision), 7 equal members 160;
//! - the points of a member are, for `i` from 0, the four little-endian 32-bit words
//!   of the MD5 digest of `host:port-i`, or `host-i` when the port is memcached's
//!   default, 11211;
//! - the points are sorted by value, ties by member order;
//! - a key's hash is the first little-endian word of its MD5 digest, and its owner the
//!   member of the first point at or after it, wrapping to the first point.
//!
//! Options, as nutcracker offers them beside `ketama`: the key hashed with
//! `fnv1a_64` instead of MD5 (nutcracker's `hash: fnv1a_64`: the 64-bit FNV-1a's low
//! 32 bits, each byte taken as a signed char, as its C code does), and a hash tag
//! (`hash_tag: "{}"`: only the part of a key between the first `{` and the next `}`
//! is hashed, if that part is not empty), so that related keys share a shard.
//!
//! What it is not for: where the ring's members and version live (etcd, the cluster
//! crate), and moving keys when it changes.

use md5::{Digest, Md5};

/// The points libmemcached gives a ketama member before weighting.
const POINTS_PER_MEMBER: u32 = 160;
/// Points from one digest.
const POINTS_PER_DIGEST: u32 = 4;
/// memcached's default port, which libmemcached leaves out of a member's name.
const DEFAULT_PORT: u16 = 11211;

/// One member of the ring: a shard, named by the address its clients list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub host: String,
    pub port: u16,
    /// At least 1.
    pub weight: u32,
}

impl Member {
    /// A member of weight 1 at `host:port`.
    pub fn new(host: impl Into<String>, port: u16) -> Member {
        Member {
            host: host.into(),
            port,
            weight: 1,
        }
    }

    /// The member's `i`-th name as libmemcached hashes it.
    fn point_name(&self, i: u32) -> String {
        if self.port == DEFAULT_PORT {
            format!("{}-{i}", self.host)
        } else {
            format!("{}:{}-{i}", self.host, self.port)
        }
    }
}

/// Why a ring cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingError {
    NoMembers,
    /// A member of weight 0 (libmemcached would count it as 1; Kura asks for it).
    ZeroWeight(String),
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RingError::NoMembers => write!(f, "a ring needs at least one member"),
            RingError::ZeroWeight(member) => write!(f, "member {member} has weight 0"),
        }
    }
}

impl std::error::Error for RingError {}

/// How a key is hashed onto the ring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KeyHash {
    /// libmemcached's and nutcracker's `md5`: the first little-endian word of MD5.
    #[default]
    Md5,
    /// nutcracker's `fnv1a_64`.
    Fnv1a64,
}

/// The ring's options beside its members.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub hash: KeyHash,
    /// The two bytes around the part of a key that is hashed (nutcracker's
    /// `hash_tag`).
    pub hash_tag: Option<[u8; 2]>,
}

/// The ring: every member's points, in order.
#[derive(Debug, Clone)]
pub struct Ring {
    members: Vec<Member>,
    options: Options,
    /// (value, member index), sorted.
    points: Vec<(u32, u32)>,
}

impl Ring {
    /// libmemcached's weighted ketama over `members`, in the order its clients list
    /// them.
    pub fn ketama_weighted(members: Vec<Member>) -> Result<Ring, RingError> {
        Ring::with_options(members, Options::default())
    }

    /// The same ring with `options` for how keys are hashed onto it.
    pub fn with_options(members: Vec<Member>, options: Options) -> Result<Ring, RingError> {
        if members.is_empty() {
            return Err(RingError::NoMembers);
        }
        if let Some(m) = members.iter().find(|m| m.weight == 0) {
            return Err(RingError::ZeroWeight(format!("{}:{}", m.host, m.port)));
        }
        let total: u64 = members.iter().map(|m| u64::from(m.weight)).sum();
        let mut points = Vec::new();
        for (index, member) in members.iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            for i in 0..digests_of(member.weight, total, members.len()) {
                let digest = Md5::digest(member.point_name(i).as_bytes());
                for word in digest.chunks_exact(4) {
                    points.push((
                        u32::from_le_bytes([word[0], word[1], word[2], word[3]]),
                        index,
                    ));
                }
            }
        }
        points.sort_unstable();
        Ok(Ring {
            members,
            options,
            points,
        })
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    pub fn options(&self) -> Options {
        self.options
    }

    /// How many points each member has, in member order.
    pub fn points_per_member(&self) -> Vec<usize> {
        let mut counts = vec![0; self.members.len()];
        for &(_, index) in &self.points {
            counts[index as usize] += 1;
        }
        counts
    }

    /// The index of the member that owns `key`.
    pub fn owner(&self, key: &[u8]) -> usize {
        self.owner_of_hash(self.hash_of(key))
    }

    /// Where `key` falls on the ring, by the ring's hashing options.
    pub fn hash_of(&self, key: &[u8]) -> u32 {
        let key = match self.options.hash_tag {
            Some(tag) => tagged(key, tag),
            None => key,
        };
        match self.options.hash {
            KeyHash::Md5 => key_hash(key),
            KeyHash::Fnv1a64 => fnv1a_64(key),
        }
    }

    /// The index of the member owning the place `hash`: the first point at or after
    /// it, or the ring's first.
    pub fn owner_of_hash(&self, hash: u32) -> usize {
        let at = self.points.partition_point(|&(value, _)| value < hash);
        let (_, index) = self.points.get(at).copied().unwrap_or(self.points[0]);
        index as usize
    }

    /// Every pair (member of this ring, member of `next`) such that some key this
    /// ring gives the first and `next` the second, the two being different; by their
    /// indexes in each ring's members. Both rings must hash keys alike.
    ///
    /// Each ring owns the arc up to and including each of its points by that point's
    /// member, so between two neighbouring points of the two rings together, both
    /// owners are the owners of the upper point: trying every point of both rings
    /// finds every pair.
    pub fn moves_to(
        &self,
        next: &Ring,
        same: impl Fn(usize, usize) -> bool,
    ) -> Vec<(usize, usize)> {
        let mut pairs: Vec<(usize, usize)> = self
            .points
            .iter()
            .chain(&next.points)
            .map(|&(value, _)| (self.owner_of_hash(value), next.owner_of_hash(value)))
            .filter(|&(from, to)| !same(from, to))
            .collect();
        pairs.sort_unstable();
        pairs.dedup();
        pairs
    }
}

/// How many digests (of four points each) a member of `weight` gets among `members`
/// whose weights sum to `total`: libmemcached's formula, in single precision.
fn digests_of(weight: u32, total: u64, members: usize) -> u32 {
    let pct = weight as f32 / total as f32;
    let points = pct * POINTS_PER_MEMBER as f32 / POINTS_PER_DIGEST as f32 * members as f32
        + 0.000_000_000_1_f32;
    // Never negative, and at most 160 · members / 4.
    points.floor() as u32
}

/// A key's place on the ring: the first little-endian word of its MD5 digest.
pub fn key_hash(key: &[u8]) -> u32 {
    let digest = Md5::digest(key);
    u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// nutcracker's `fnv1a_64`: the low 32 bits of the 64-bit FNV-1a, which 32-bit
/// arithmetic with the constants' low halves gives, each byte sign-extended as a C
/// `char`.
pub fn fnv1a_64(key: &[u8]) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET as u32;
    for &byte in key {
        hash ^= byte as i8 as i32 as u32;
        hash = hash.wrapping_mul(PRIME as u32);
    }
    hash
}

/// The part of `key` a hash tag selects: between the first `tag[0]` and the next
/// `tag[1]`, if that is not empty; else the whole key.
fn tagged(key: &[u8], tag: [u8; 2]) -> &[u8] {
    let Some(start) = key.iter().position(|&b| b == tag[0]) else {
        return key;
    };
    match key[start + 1..].iter().position(|&b| b == tag[1]) {
        Some(len) if len > 0 => &key[start + 1..start + 1 + len],
        _ => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn equal(n: usize, port: u16) -> Ring {
        let members = (0..n)
            .map(|i| Member::new(format!("10.0.0.{i}"), port))
            .collect();
        Ring::ketama_weighted(members).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn points_are_counted_in_single_precision_as_libmemcached_does() {
        assert_eq!(equal(1, 11211).points_per_member(), vec![160]);
        assert_eq!(equal(7, 11212).points_per_member(), vec![160; 7]);
        // 1/25 · 160/4 · 25 is 39.999996 in f32 (40 in f64): 39 digests, 156 points.
        assert_eq!(equal(25, 11212).points_per_member(), vec![156; 25]);
        let weighted = Ring::ketama_weighted(vec![
            Member {
                weight: 1,
                ..Member::new("a", 1)
            },
            Member {
                weight: 3,
                ..Member::new("b", 1)
            },
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(weighted.points_per_member(), vec![80, 240]);
    }

    #[test]
    fn names_leave_out_the_default_port() {
        assert_eq!(Member::new("h", 11211).point_name(3), "h-3");
        assert_eq!(Member::new("h", 11212).point_name(0), "h:11212-0");
    }

    #[test]
    fn a_key_goes_to_the_first_point_at_or_after_its_hash() {
        let ring = equal(3, 40000);
        for key in [&b"a"[..], b"user:1", b"\xff\x80", b""] {
            let hash = key_hash(key);
            let want = ring
                .points
                .iter()
                .find(|&&(value, _)| value >= hash)
                .unwrap_or(&ring.points[0])
                .1 as usize;
            assert_eq!(ring.owner(key), want);
        }
    }

    #[test]
    fn the_pairs_a_ring_change_moves_are_those_its_keys_take() {
        let two = equal(2, 40000);
        let four = equal(4, 40000);
        // Members 0 and 1 are the same hosts in both rings.
        let pairs = two.moves_to(&four, |a, b| a == b);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..20_000u32 {
            let key = format!("key:{i}");
            let (from, to) = (two.owner(key.as_bytes()), four.owner(key.as_bytes()));
            if from != to {
                seen.insert((from, to));
            }
        }
        assert_eq!(pairs, seen.into_iter().collect::<Vec<_>>());
        assert!(pairs.iter().all(|&(from, to)| from < 2 && to >= 2));
        assert!(two.moves_to(&two, |a, b| a == b).is_empty());
    }

    #[test]
    fn a_hash_tag_selects_the_part_between_its_bytes() {
        let tag = *b"{}";
        assert_eq!(tagged(b"{user1}:name", tag), b"user1");
        assert_eq!(tagged(b"a{b}c{d}", tag), b"b");
        assert_eq!(tagged(b"x{}y", tag), b"x{}y");
        assert_eq!(tagged(b"no tag", tag), b"no tag");
        assert_eq!(tagged(b"{open", tag), b"{open");
    }

    #[test]
    fn fnv1a_64_is_the_64_bit_hash_truncated() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c.
        assert_eq!(fnv1a_64(b"a"), 0x8601_ec8c);
        assert_eq!(fnv1a_64(b""), 0x8422_2325);
    }

    #[test]
    fn an_empty_ring_or_a_weightless_member_is_refused() {
        assert_eq!(
            Ring::ketama_weighted(Vec::new()).err(),
            Some(RingError::NoMembers)
        );
        let zero = Member {
            weight: 0,
            ..Member::new("h", 1)
        };
        assert!(Ring::ketama_weighted(vec![zero]).is_err());
    }
}
