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

/// The ring: every member's points, in order.
#[derive(Debug, Clone)]
pub struct Ring {
    members: Vec<Member>,
    /// (value, member index), sorted.
    points: Vec<(u32, u32)>,
}

impl Ring {
    /// libmemcached's weighted ketama over `members`, in the order its clients list
    /// them.
    pub fn ketama_weighted(members: Vec<Member>) -> Result<Ring, RingError> {
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
        Ok(Ring { members, points })
    }

    pub fn members(&self) -> &[Member] {
        &self.members
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
        let hash = key_hash(key);
        let at = self.points.partition_point(|&(value, _)| value < hash);
        let (_, index) = self.points.get(at).copied().unwrap_or(self.points[0]);
        index as usize
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
