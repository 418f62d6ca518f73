//! The ring as etcd holds it: which shards place keys, in what order, with what
//! weights, under `/kura/<cluster>/ring` (issue 42). The placement itself is
//! `kura-ring`'s; this module only keeps the ring's description and its version, so
//! that every node reads the same one.
//!
//! The value is text, a line each:
//! ```text
//! version 1
//! hash md5
//! hash_tag {}
//! shard a 10.0.0.1:11211 1
//! shard b 10.0.0.2:11211 1
//! ```
//! `hash` is `md5` or `fnv1a_64`; `hash_tag` is optional. A `shard` line names the
//! shard (`--shard`), the `host:port` its clients list for it (its name on the ring)
//! and its weight, in the order the clients list them.

use etcd_client::{Compare, CompareOp, Txn, TxnOp};

use crate::{ClusterError, Observer};

/// One member of the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingShard {
    /// The shard's name (`--shard`).
    pub shard: String,
    /// The `host:port` clients list for the shard: its name on the ring.
    pub address: String,
    pub weight: u32,
}

/// The ring: its version (raised by every change) and members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingSpec {
    pub version: u64,
    /// `md5` or `fnv1a_64`.
    pub hash: String,
    /// nutcracker's `hash_tag`: the two bytes around the part of a key hashed.
    pub hash_tag: Option<String>,
    pub shards: Vec<RingShard>,
}

impl RingSpec {
    pub fn encode(&self) -> String {
        let mut out = format!("version {}\nhash {}\n", self.version, self.hash);
        if let Some(tag) = &self.hash_tag {
            out.push_str(&format!("hash_tag {tag}\n"));
        }
        for s in &self.shards {
            out.push_str(&format!("shard {} {} {}\n", s.shard, s.address, s.weight));
        }
        out
    }

    pub fn decode(text: &str) -> Result<RingSpec, ClusterError> {
        let bad = |line: &str| ClusterError::Invalid(format!("the ring in etcd: {line:?}"));
        let mut spec = RingSpec {
            version: 0,
            hash: "md5".into(),
            hash_tag: None,
            shards: Vec::new(),
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["version", v] => spec.version = v.parse().map_err(|_| bad(line))?,
                ["hash", h @ ("md5" | "fnv1a_64")] => spec.hash = (*h).to_string(),
                ["hash_tag", t] if t.len() == 2 => spec.hash_tag = Some((*t).to_string()),
                ["shard", shard, address, weight] => spec.shards.push(RingShard {
                    shard: (*shard).to_string(),
                    address: (*address).to_string(),
                    weight: weight.parse().map_err(|_| bad(line))?,
                }),
                _ => return Err(bad(line)),
            }
        }
        if spec.version == 0 || spec.shards.is_empty() {
            return Err(bad(text));
        }
        Ok(spec)
    }

    /// Whether `other` places every key as this ring does: the same members, order,
    /// weights and hashing (the version aside).
    pub fn places_as(&self, other: &RingSpec) -> bool {
        self.shards == other.shards && self.hash == other.hash && self.hash_tag == other.hash_tag
    }
}

/// What [`Observer::set_ring`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingSet {
    /// The cluster had no ring: this one, version 1, is it.
    Created(RingSpec),
    /// The cluster's ring already places keys so.
    Unchanged(RingSpec),
    /// The cluster has another ring; changing it moves keys between shards.
    Differs(RingSpec),
}

/// The key of `cluster`'s ring.
pub fn ring_key(cluster: &str) -> String {
    format!("/kura/{cluster}/ring")
}

impl Observer {
    /// The cluster's ring, if one was set.
    pub async fn ring(&mut self) -> Result<Option<RingSpec>, ClusterError> {
        let got = self.client.get(ring_key(&self.cluster), None).await?;
        match got.kvs().first() {
            Some(kv) => Ok(Some(RingSpec::decode(
                kv.value_str().map_err(ClusterError::Etcd)?,
            )?)),
            None => Ok(None),
        }
    }

    /// Sets the cluster's first ring to `spec` (its version is set to 1); one etcd
    /// transaction, so two operators setting rings at once cannot both win.
    pub async fn set_ring(&mut self, mut spec: RingSpec) -> Result<RingSet, ClusterError> {
        let key = ring_key(&self.cluster);
        spec.version = 1;
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), spec.encode(), None)]);
        let reply = self.client.txn(txn).await?;
        if reply.succeeded() {
            return Ok(RingSet::Created(spec));
        }
        let current = self
            .ring()
            .await?
            .ok_or_else(|| ClusterError::Invalid("the ring went as it was set".into()))?;
        if current.places_as(&spec) {
            Ok(RingSet::Unchanged(current))
        } else {
            Ok(RingSet::Differs(current))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_reads_back_as_written() {
        let spec = RingSpec {
            version: 3,
            hash: "fnv1a_64".into(),
            hash_tag: Some("{}".into()),
            shards: vec![
                RingShard {
                    shard: "a".into(),
                    address: "10.0.0.1:11211".into(),
                    weight: 1,
                },
                RingShard {
                    shard: "b".into(),
                    address: "h:22122".into(),
                    weight: 3,
                },
            ],
        };
        assert_eq!(RingSpec::decode(&spec.encode()).ok(), Some(spec.clone()));
        let mut other = spec.clone();
        other.version = 4;
        assert!(spec.places_as(&other));
        other.shards[1].weight = 2;
        assert!(!spec.places_as(&other));
        assert!(RingSpec::decode("version 1\n").is_err());
        assert!(RingSpec::decode("version 1\nhash sha1\nshard a h:1 1\n").is_err());
    }
}
