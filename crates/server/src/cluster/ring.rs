//! The ring in a node (issue 42): which shard owns a key, and where that shard's
//! primary is now.
//!
//! A task reads the cluster's ring (`kura cluster ring` sets it in etcd) and every
//! shard's primary, a poll at a time, into a [`Placement`] the request path reads. A
//! node then serves a key its own shard owns as before (a replica passing changes on
//! to its primary), and passes a request for another shard's key on to that shard's
//! primary, whole, so a client that hashes differently from the ring, or lists one
//! node only, still reaches every key. A multi-key get whose keys live on several
//! shards is split by owner and the replies merged in the keys' order
//! (`super::forward`).
//!
//! What it is not for: the ring's arithmetic (`kura-ring`), and moving keys when the
//! ring changes (not built: `kura cluster ring` refuses a change).

use std::sync::Arc;
use std::time::Duration;

use kura_cluster::RingSpec;
use kura_ring::{KeyHash, Member, Options, Ring};

use crate::server::Shared;

/// The ring as a node uses it.
pub struct Placement {
    pub version: u64,
    ring: Ring,
    /// The shards' names, in the ring's order.
    pub shards: Vec<String>,
    /// Each shard's primary as etcd last named it.
    pub primaries: Vec<Option<String>>,
    /// This node's shard, if the ring has it.
    pub mine: Option<usize>,
}

/// Where a request's keys live.
pub enum Owner {
    /// This node's shard (or no ring): it runs here, as without shards.
    Here,
    /// Every key is shard `n`'s, another shard.
    Shard(usize),
    /// The keys are spread over several shards.
    Split,
}

impl Placement {
    /// The shard owning `key`.
    pub fn owner(&self, key: &[u8]) -> usize {
        self.ring.owner(key)
    }

    /// Where `keys` live, for a node of shard `mine`.
    pub fn owner_of<'k>(&self, mut keys: impl Iterator<Item = &'k [u8]>) -> Owner {
        let Some(first) = keys.next() else {
            return Owner::Here;
        };
        let owner = self.owner(first);
        if keys.any(|k| self.owner(k) != owner) {
            return Owner::Split;
        }
        if Some(owner) == self.mine {
            Owner::Here
        } else {
            Owner::Shard(owner)
        }
    }

    /// Where shard `n`'s requests go now, or why none can.
    pub fn primary(&self, n: usize) -> Result<String, String> {
        self.primaries.get(n).cloned().flatten().ok_or_else(|| {
            format!(
                "shard {} has no primary (being elected), try again",
                self.shards.get(n).map_or("?", String::as_str)
            )
        })
    }
}

/// The ring `spec` describes, as every node builds it.
pub fn placement_of(spec: &RingSpec) -> Result<Ring, String> {
    let mut members = Vec::with_capacity(spec.shards.len());
    for s in &spec.shards {
        let (host, port) = s
            .address
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| format!("shard {}: {:?} is not HOST:PORT", s.shard, s.address))?;
        let mut member = Member::new(host, port);
        member.weight = s.weight;
        members.push(member);
    }
    let mut names: Vec<&str> = spec.shards.iter().map(|s| s.shard.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err("a shard is named twice".into());
    }
    let hash_tag = match spec.hash_tag.as_deref().map(str::as_bytes) {
        None => None,
        Some(&[open, close]) => Some([open, close]),
        Some(_) => return Err("a hash tag is two characters".into()),
    };
    let options = Options {
        hash: if spec.hash == "fnv1a_64" {
            KeyHash::Fnv1a64
        } else {
            KeyHash::Md5
        },
        hash_tag,
    };
    Ring::with_options(members, options).map_err(|e| e.to_string())
}

/// Starts the task that keeps the node's [`Placement`] current; it runs until the
/// process ends.
pub fn start(shared: Arc<Shared>, every: Duration) {
    tokio::spawn(async move {
        let config = &shared.config;
        let cluster = config.cluster.clone().unwrap_or_default();
        let shard = config.shard.clone().unwrap_or_default();
        let mut observer = None;
        loop {
            if shared.stopping.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
            if observer.is_none() {
                match kura_cluster::Observer::connect(&config.etcd, &cluster).await {
                    Ok(o) => observer = Some(o),
                    Err(e) => tracing::debug!("cluster: reading the ring: {e}"),
                }
            }
            if let Some(o) = observer.as_mut() {
                if let Err(e) = refresh(&shared, o, &shard).await {
                    tracing::debug!("cluster: reading the ring: {e}");
                    observer = None;
                }
            }
            tokio::time::sleep(every).await;
        }
    });
}

/// Reads the ring and its shards' primaries once.
async fn refresh(
    shared: &Shared,
    observer: &mut kura_cluster::Observer,
    shard: &str,
) -> Result<(), kura_cluster::ClusterError> {
    let Some(spec) = observer.ring().await? else {
        return Ok(());
    };
    let mut primaries = Vec::with_capacity(spec.shards.len());
    for s in &spec.shards {
        primaries.push(observer.primary(&s.shard).await?.map(|p| p.advertise));
    }
    let current = shared.cluster.placement();
    let ring = match current.as_ref().filter(|p| p.version == spec.version) {
        Some(p) => p.ring.clone(),
        None => match placement_of(&spec) {
            Ok(ring) => {
                tracing::info!(
                    "cluster: ring v{} of {} shards",
                    spec.version,
                    spec.shards.len()
                );
                ring
            }
            Err(why) => {
                tracing::warn!("cluster: the ring in etcd cannot be built: {why}");
                return Ok(());
            }
        },
    };
    let unchanged = current
        .as_ref()
        .is_some_and(|p| p.version == spec.version && p.primaries == primaries);
    if !unchanged {
        let shards: Vec<String> = spec.shards.iter().map(|s| s.shard.clone()).collect();
        shared.cluster.set_placement(Placement {
            version: spec.version,
            ring,
            mine: shards.iter().position(|s| s == shard),
            shards,
            primaries,
        });
    }
    Ok(())
}
