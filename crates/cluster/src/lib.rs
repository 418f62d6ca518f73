//! Who is primary of each shard of a Kura cluster, held through etcd (issue 41's
//! cluster mode; the shards of issue 42 are more names under the same cluster).
//!
//! etcd, an existing and tested consensus engine, decides; Kura keeps no consensus of
//! its own. Each node of a shard is a [`Member`]: it holds an etcd lease, kept alive
//! while the node runs, and campaigns in the shard's election (etcd's election API on
//! the prefix [`Keys::election`]). The candidate whose key is oldest is primary; its
//! term's epoch is that key's create revision, which etcd raises with every write, so
//! a later primary's epoch is always higher (the epoch Kura's replication fences on).
//! When the primary's lease ends (it stopped, crashed, or lost etcd) its key goes and
//! the next candidate is primary.
//!
//! A primary must stop acting as one before etcd can have given the term to another:
//! [`Member::holds`] says whether the lease is still certainly alive by this node's
//! own clock. A keepalive sent at `t` that etcd answers with a TTL of `ttl` keeps the
//! lease alive at etcd until at least `t + ttl` (etcd starts the TTL when it gets the
//! request, after `t`); [`Member::holds`] counts `ttl` less a margin of a tenth of it
//! from `t`, for the two clocks' rates. Without an answer the lease is held only until
//! that moment passes.
//!
//! Who may campaign ([`candidate`]): only a node whose log holds every acknowledged
//! write. A node without a primary stops following, and publishes its log's position
//! (epoch, LSN) under its lease; it campaigns only once it sees the positions of
//! enough of the shard's registered members that one of them must hold every
//! acknowledged write, and its own is the furthest of them.
//!
//! Keys, under `/kura/<cluster>/`:
//! - `shards/<shard>/primary/<lease>`: the election's candidates; the value is the
//!   candidate's advertised address.
//! - `shards/<shard>/members/<advertise>`: every node that ever joined the shard
//!   (no lease: a member that is down still counts, as it may hold writes).
//! - `shards/<shard>/positions/<advertise>`: `<epoch> <lsn>`, under the node's lease,
//!   while it has no primary.
//! - `ring`: the shards that place keys and how ([`RingSpec`], issue 42).
//! - `next_ring`, `moves/<from>/<to>`, `move_progress/<from>/<to>`: a change of the
//!   ring in progress and its moves ([`RingChange`]).
//! - `tables/<name>`: the shard that holds a table (`tables.rs`).
//! - `table_moves/<name>`, `table_move_progress/<name>`: a table's move to another
//!   shard (`table_moves.rs`).
//!
//! What it is not for: replication itself (the server's), and acting on a term.

use std::time::{Duration, Instant};

mod moves;
mod ring;
mod table_moves;
mod tables;

pub use moves::{Move, MoveProgress, MoveState, RingChange};
pub use ring::{ring_key, RingSet, RingShard, RingSpec};
pub use table_moves::TableMove;

use etcd_client::{Client, ConnectOptions, GetOptions, LeaderKey, PutOptions, ResignOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How a node takes part in a cluster.
#[derive(Debug, Clone)]
pub struct Config {
    /// etcd's client URLs (`http://host:port`).
    pub endpoints: Vec<String>,
    pub cluster: String,
    pub shard: String,
    /// The address other nodes and clients reach this node at (`host:port`).
    pub advertise: String,
    /// The address its SQL port is reached at, if it has one: the shard's other nodes
    /// pass SQL connections on to the primary's.
    pub sql: Option<String>,
    /// The lease's time to live; etcd counts whole seconds, so it is rounded up.
    pub lease_ttl: Duration,
}

/// The etcd keys of one shard of one cluster.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(cluster: &str, shard: &str) -> Keys {
        Keys {
            prefix: format!("/kura/{cluster}/shards/{shard}/"),
        }
    }

    /// The shard's election: the prefix its candidates' keys are under.
    pub fn election(&self) -> String {
        format!("{}primary", self.prefix)
    }

    /// The shard's registered members.
    pub fn members(&self) -> String {
        format!("{}members/", self.prefix)
    }

    /// The positions published by nodes without a primary.
    pub fn positions(&self) -> String {
        format!("{}positions/", self.prefix)
    }

    /// A planned switchover's state ([`Switchover`]).
    pub fn switchover(&self) -> String {
        format!("{}switchover", self.prefix)
    }
}

/// A planned switchover, as its key in etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Switchover {
    /// An operator asks the primary to hand over, to `to` or to the furthest replica,
    /// pausing writes for at most `timeout` (`kura cluster switchover`).
    Requested {
        to: Option<String>,
        timeout: Duration,
    },
    /// The primary paused its writes, saw `to` hold all of its log, and resigns: `to`
    /// alone campaigns.
    HandingOver { to: String },
}

impl Switchover {
    fn encode(&self) -> String {
        match self {
            Switchover::Requested { to, timeout } => format!(
                "request {} {}",
                to.as_deref().unwrap_or("-"),
                timeout.as_millis()
            ),
            Switchover::HandingOver { to } => format!("handover {to}"),
        }
    }

    fn decode(text: &str) -> Option<Switchover> {
        let words: Vec<&str> = text.split_whitespace().collect();
        match words[..] {
            ["request", to, ms] => Some(Switchover::Requested {
                to: (to != "-").then(|| to.to_string()),
                timeout: Duration::from_millis(ms.parse().ok()?),
            }),
            ["handover", to] => Some(Switchover::HandingOver { to: to.to_string() }),
            _ => None,
        }
    }
}

/// Where a node's log ends: its history's epoch and its LSN. A later epoch's log holds
/// every acknowledged write of the earlier ones, so positions compare by epoch first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Position {
    pub epoch: u64,
    pub lsn: u64,
}

/// What [`candidate`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidacy {
    /// This node's log is the furthest of enough of the members': it campaigns.
    Campaign,
    /// Another node's is further: it is the one to campaign.
    Defer(String),
    /// Too few members have published: `seen` of the `needed`.
    Wait { seen: usize, needed: usize },
}

/// Whether the node `me` at `mine` should campaign for its shard without a primary,
/// given the shard's `members` and the positions `published` by nodes that have none,
/// when each acknowledged write is on the primary and `min_sync_replicas` replicas.
///
/// A write acknowledged is on at least `min_sync_replicas + 1` of the `n` members, so
/// any `n - min_sync_replicas` of them include one that holds it, and the furthest
/// log of those holds every one. Without sync replicas nothing guarantees that, and a
/// majority's furthest is taken.
pub fn candidate(
    me: &str,
    mine: Position,
    members: &[String],
    published: &[(String, Position)],
    min_sync_replicas: usize,
) -> Candidacy {
    let n = members.len().max(1);
    let needed = if min_sync_replicas == 0 {
        n / 2 + 1
    } else {
        n.saturating_sub(min_sync_replicas).max(1)
    };
    let mut seen: Vec<(&str, Position)> = published
        .iter()
        .filter(|(who, _)| who != me && members.contains(who))
        .map(|(who, at)| (who.as_str(), *at))
        .collect();
    seen.push((me, mine));
    if seen.len() < needed {
        return Candidacy::Wait {
            seen: seen.len(),
            needed,
        };
    }
    // The furthest; between equals, the lowest address, so that all agree.
    let best = seen
        .iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
        .map_or(me, |(who, _)| who);
    if best == me {
        Candidacy::Campaign
    } else {
        Candidacy::Defer(best.to_string())
    }
}

/// Why a cluster call failed.
#[derive(Debug)]
pub enum ClusterError {
    /// etcd refused or could not be reached.
    Etcd(etcd_client::Error),
    /// The member's lease ended (etcd answered that it is gone).
    LeaseLost,
    /// A name or address etcd cannot hold as given.
    Invalid(String),
}

impl std::fmt::Display for ClusterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterError::Etcd(e) => write!(f, "etcd: {e}"),
            ClusterError::LeaseLost => write!(f, "the lease with etcd ended"),
            ClusterError::Invalid(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for ClusterError {}

impl From<etcd_client::Error> for ClusterError {
    fn from(e: etcd_client::Error) -> ClusterError {
        ClusterError::Etcd(e)
    }
}

/// A shard's primary as etcd names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Primary {
    /// Its advertised address.
    pub advertise: String,
    /// Its term's epoch: higher for every later primary.
    pub epoch: i64,
}

/// This member's term as primary.
#[derive(Debug, Clone)]
pub struct Term {
    pub epoch: i64,
    leader: LeaderKey,
}

impl Term {
    /// The term's key in etcd: it exists while the term lasts, so an etcd
    /// transaction that compares it acts only under this term (a fence).
    pub fn key(&self) -> &[u8] {
        self.leader.key()
    }
}

/// Until when this member's lease is certainly alive at etcd (None: it is gone).
type Validity = Option<Instant>;

/// One node of one shard, holding a lease with etcd while it lives.
pub struct Member {
    client: Client,
    config: Config,
    keys: Keys,
    lease: i64,
    valid: watch::Receiver<Validity>,
    keeper: JoinHandle<()>,
}

impl Drop for Member {
    fn drop(&mut self) {
        // The lease is left to run out, as when the node dies.
        self.keeper.abort();
    }
}

/// The lease's TTL in etcd's whole seconds.
fn ttl_secs(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis().div_ceil(1000))
        .unwrap_or(i64::MAX)
        .max(1)
}

/// What a keepalive answered at `sent` with `ttl` seconds allows: `ttl` less a tenth.
fn valid_after(sent: Instant, ttl: i64) -> Validity {
    let ttl = Duration::from_secs(u64::try_from(ttl).ok().filter(|&t| t > 0)?);
    Some(sent + ttl - ttl / 10)
}

impl Member {
    /// Connects to etcd, takes a lease and keeps it alive until the member is dropped
    /// (or [`Member::leave`]s).
    pub async fn join(config: Config) -> Result<Member, ClusterError> {
        for name in [&config.cluster, &config.shard] {
            if name.is_empty() || name.contains('/') {
                return Err(ClusterError::Invalid(format!(
                    "a cluster or shard name must be non-empty without '/': {name:?}"
                )));
            }
        }
        let ttl = ttl_secs(config.lease_ttl);
        // No timeout on requests: a campaign waits as long as another is primary.
        let options = ConnectOptions::new().with_connect_timeout(config.lease_ttl);
        let mut client = Client::connect(&config.endpoints, Some(options)).await?;
        let sent = Instant::now();
        let granted = client.lease_grant(ttl, None).await?;
        let (valid_tx, valid) = watch::channel(valid_after(sent, granted.ttl()));
        let lease = granted.id();
        let keeper = tokio::spawn(keep_alive(client.clone(), lease, granted.ttl(), valid_tx));
        Ok(Member {
            keys: Keys::new(&config.cluster, &config.shard),
            client,
            config,
            lease,
            valid,
            keeper,
        })
    }

    /// Whether this member's lease is certainly alive at etcd now, by this node's
    /// clock: a primary acts as one only while this holds.
    pub fn holds(&self) -> bool {
        self.valid
            .borrow()
            .is_some_and(|until| Instant::now() < until)
    }

    /// Until when [`Member::holds`] holds, as the last keepalive left it (None: the
    /// lease is gone).
    pub fn holds_until(&self) -> Option<Instant> {
        *self.valid.borrow()
    }

    /// [`Member::holds_until`] as each keepalive moves it: changes the moment etcd
    /// answers one.
    pub fn validity(&self) -> watch::Receiver<Option<Instant>> {
        self.valid.clone()
    }

    /// Waits until this member is the shard's primary; its term.
    pub async fn campaign(&mut self) -> Result<Term, ClusterError> {
        let mut valid = self.valid.clone();
        let election = self.keys.election();
        let advertise = self.config.advertise.clone();
        let campaign = self.client.campaign(election, advertise, self.lease);
        tokio::select! {
            won = campaign => {
                let won = won?;
                let leader = won
                    .leader()
                    .cloned()
                    .ok_or_else(|| ClusterError::Invalid("etcd named no leader key".into()))?;
                Ok(Term { epoch: leader.rev(), leader })
            }
            // A campaign on a lease that ended would wait for ever.
            () = lease_gone(&mut valid) => Err(ClusterError::LeaseLost),
        }
    }

    /// The shard's primary now, if it has one.
    pub async fn primary(&mut self) -> Result<Option<Primary>, ClusterError> {
        primary_of(&mut self.client, &self.keys).await
    }

    /// Gives up `term` (a planned switchover): the next candidate becomes primary.
    pub async fn resign(&mut self, term: Term) -> Result<(), ClusterError> {
        self.client
            .resign(Some(ResignOptions::new().with_leader(term.leader)))
            .await?;
        Ok(())
    }

    /// Ends the lease at once: the member's candidacy (and term) go with it.
    pub async fn leave(mut self) -> Result<(), ClusterError> {
        self.keeper.abort();
        self.client.lease_revoke(self.lease).await?;
        Ok(())
    }

    /// The lease's id at etcd.
    pub fn lease(&self) -> i64 {
        self.lease
    }

    /// This node's advertised address.
    pub fn advertise(&self) -> &str {
        &self.config.advertise
    }

    /// Records this node as a member of its shard, for good ([`candidate`] counts it
    /// even while it is down), with its SQL address as the value (empty: none).
    pub async fn register(&mut self) -> Result<(), ClusterError> {
        let key = format!("{}{}", self.keys.members(), self.config.advertise);
        let sql = self.config.sql.clone().unwrap_or_default();
        self.client.put(key, sql, None).await?;
        Ok(())
    }

    /// The SQL address the member `advertise` registered (None: it has no SQL port,
    /// or is no member).
    pub async fn sql_of(&mut self, advertise: &str) -> Result<Option<String>, ClusterError> {
        sql_of(&mut self.client, &self.keys, advertise).await
    }

    /// The shard's registered members' addresses.
    pub async fn members(&mut self) -> Result<Vec<String>, ClusterError> {
        members_of(&mut self.client, &self.keys).await
    }

    /// Publishes where this node's log ends (None: takes it back, as the node follows
    /// a primary or is one), under its lease.
    pub async fn publish(&mut self, at: Option<Position>) -> Result<(), ClusterError> {
        let key = format!("{}{}", self.keys.positions(), self.config.advertise);
        match at {
            Some(at) => {
                let value = format!("{} {}", at.epoch, at.lsn);
                let options = PutOptions::new().with_lease(self.lease);
                self.client.put(key, value, Some(options)).await?;
            }
            None => {
                self.client.delete(key, None).await?;
            }
        }
        Ok(())
    }

    /// The shard's planned switchover, if one is asked for or under way.
    pub async fn switchover(&mut self) -> Result<Option<Switchover>, ClusterError> {
        let got = self.client.get(self.keys.switchover(), None).await?;
        Ok(got
            .kvs()
            .first()
            .and_then(|kv| Switchover::decode(kv.value_str().ok()?)))
    }

    /// Marks the switchover as handing over to `to`, under this member's lease (it
    /// goes with the lease if this node dies), or, with None, ends it.
    pub async fn set_switchover(&mut self, to: Option<&str>) -> Result<(), ClusterError> {
        let key = self.keys.switchover();
        match to {
            Some(to) => {
                let value = Switchover::HandingOver { to: to.to_string() }.encode();
                let options = PutOptions::new().with_lease(self.lease);
                self.client.put(key, value, Some(options)).await?;
            }
            None => {
                self.client.delete(key, None).await?;
            }
        }
        Ok(())
    }

    /// The positions published by the shard's nodes without a primary.
    pub async fn positions(&mut self) -> Result<Vec<(String, Position)>, ClusterError> {
        let prefix = self.keys.positions();
        let got = self
            .client
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await?;
        Ok(got
            .kvs()
            .iter()
            .filter_map(|kv| {
                let who = kv.key_str().ok()?.strip_prefix(&prefix)?.to_string();
                let (epoch, lsn) = kv.value_str().ok()?.split_once(' ')?;
                let at = Position {
                    epoch: epoch.parse().ok()?,
                    lsn: lsn.parse().ok()?,
                };
                Some((who, at))
            })
            .collect())
    }
}

/// The primary of the shard whose keys are `keys`, if it has one.
async fn primary_of(client: &mut Client, keys: &Keys) -> Result<Option<Primary>, ClusterError> {
    match client.leader(keys.election()).await {
        Ok(reply) => Ok(reply.kv().map(|kv| Primary {
            advertise: String::from_utf8_lossy(kv.value()).into_owned(),
            epoch: kv.create_revision(),
        })),
        // etcd answers "election: no leader" as an error.
        Err(etcd_client::Error::GRpcStatus(status)) if status.message().contains("no leader") => {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// The registered members of the shard whose keys are `keys`.
async fn members_of(client: &mut Client, keys: &Keys) -> Result<Vec<String>, ClusterError> {
    let prefix = keys.members();
    let got = client
        .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
        .await?;
    Ok(got
        .kvs()
        .iter()
        .filter_map(|kv| kv.key_str().ok()?.strip_prefix(&prefix).map(str::to_string))
        .collect())
}

/// A shard as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardState {
    pub name: String,
    pub primary: Option<Primary>,
    pub members: Vec<String>,
}

/// Reads a cluster's state from etcd without taking part in it (`kura cluster
/// status`).
pub struct Observer {
    client: Client,
    cluster: String,
}

impl Observer {
    pub async fn connect(endpoints: &[String], cluster: &str) -> Result<Observer, ClusterError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(5));
        Ok(Observer {
            client: Client::connect(endpoints, Some(options)).await?,
            cluster: cluster.to_string(),
        })
    }

    /// The primary of `shard` now, if it has one.
    pub async fn primary(&mut self, shard: &str) -> Result<Option<Primary>, ClusterError> {
        primary_of(&mut self.client, &Keys::new(&self.cluster, shard)).await
    }

    /// The SQL address the member `advertise` of `shard` registered (None: it has
    /// no SQL port, or is no member).
    pub async fn sql_of(
        &mut self,
        shard: &str,
        advertise: &str,
    ) -> Result<Option<String>, ClusterError> {
        sql_of(
            &mut self.client,
            &Keys::new(&self.cluster, shard),
            advertise,
        )
        .await
    }

    /// Asks `shard`'s primary to hand over (to `to`, or the furthest replica),
    /// pausing writes for at most `timeout`; the request ends with a lease a little
    /// longer than that.
    pub async fn request_switchover(
        &mut self,
        shard: &str,
        to: Option<&str>,
        timeout: Duration,
    ) -> Result<(), ClusterError> {
        let keys = Keys::new(&self.cluster, shard);
        let ttl = ttl_secs(timeout) + 2;
        let lease = self.client.lease_grant(ttl, None).await?.id();
        let value = Switchover::Requested {
            to: to.map(str::to_string),
            timeout,
        }
        .encode();
        let options = PutOptions::new().with_lease(lease);
        self.client
            .put(keys.switchover(), value, Some(options))
            .await?;
        Ok(())
    }

    /// `shard`'s planned switchover, if one is asked for or under way.
    pub async fn switchover(&mut self, shard: &str) -> Result<Option<Switchover>, ClusterError> {
        let keys = Keys::new(&self.cluster, shard);
        let got = self.client.get(keys.switchover(), None).await?;
        Ok(got
            .kvs()
            .first()
            .and_then(|kv| Switchover::decode(kv.value_str().ok()?)))
    }

    /// Every shard of the cluster that has a member, by name.
    pub async fn shards(&mut self) -> Result<Vec<ShardState>, ClusterError> {
        let prefix = format!("/kura/{}/shards/", self.cluster);
        let got = self
            .client
            .get(
                prefix.clone(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )
            .await?;
        let mut names: Vec<String> = got
            .kvs()
            .iter()
            .filter_map(|kv| {
                let rest = kv.key_str().ok()?.strip_prefix(&prefix)?;
                let (shard, what) = rest.split_once('/')?;
                what.starts_with("members/").then(|| shard.to_string())
            })
            .collect();
        names.dedup();
        let mut shards = Vec::new();
        for name in names {
            let keys = Keys::new(&self.cluster, &name);
            shards.push(ShardState {
                primary: primary_of(&mut self.client, &keys).await?,
                members: members_of(&mut self.client, &keys).await?,
                name,
            });
        }
        Ok(shards)
    }
}

/// Resolves once `valid` says the lease is gone.
async fn lease_gone(valid: &mut watch::Receiver<Validity>) {
    if valid.wait_for(Option::is_none).await.is_err() {
        // The keeper is gone (the member is being dropped): never resolves.
        std::future::pending::<()>().await;
    }
}

/// Keeps `lease` alive, a third of its TTL apart, and publishes until when it is
/// certainly alive. A failed keepalive is tried again (on a new stream) until the
/// lease's time is up; etcd answering a TTL of 0 means the lease is gone.
/// The SQL address the member `advertise` of the shard of `keys` registered.
async fn sql_of(
    client: &mut Client,
    keys: &Keys,
    advertise: &str,
) -> Result<Option<String>, ClusterError> {
    let key = format!("{}{advertise}", keys.members());
    let got = client.get(key, None).await?;
    Ok(got
        .kvs()
        .first()
        .and_then(|kv| kv.value_str().ok())
        .filter(|sql| !sql.is_empty())
        .map(str::to_string))
}

async fn keep_alive(mut client: Client, lease: i64, ttl: i64, valid: watch::Sender<Validity>) {
    let period = Duration::from_millis(u64::try_from(ttl).unwrap_or(1).max(1) * 1000 / 3);
    loop {
        let stream = client.lease_keep_alive(lease).await;
        let Ok((mut keeper, mut answers)) = stream else {
            tokio::time::sleep(period / 4).await;
            continue;
        };
        loop {
            let sent = Instant::now();
            if keeper.keep_alive().await.is_err() {
                break;
            }
            match answers.message().await {
                Ok(Some(answer)) if answer.ttl() <= 0 => {
                    tracing::warn!(lease, "the lease with etcd ended");
                    let _ = valid.send(None);
                    return;
                }
                Ok(Some(answer)) => {
                    let _ = valid.send(valid_after(sent, answer.ttl()));
                }
                Ok(None) | Err(_) => break,
            }
            tokio::time::sleep(period).await;
        }
        tokio::time::sleep(period / 4).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(epoch: u64, lsn: u64) -> Position {
        Position { epoch, lsn }
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_switchover_reads_back_as_written() {
        for s in [
            Switchover::Requested {
                to: Some("h:1".into()),
                timeout: Duration::from_millis(2500),
            },
            Switchover::Requested {
                to: None,
                timeout: Duration::from_secs(5),
            },
            Switchover::HandingOver { to: "h:2".into() },
        ] {
            assert_eq!(Switchover::decode(&s.encode()), Some(s));
        }
        assert_eq!(Switchover::decode("request h:1"), None);
    }

    #[test]
    fn with_a_sync_replica_both_survivors_of_three_must_be_seen() {
        let members = names(&["a", "b", "c"]);
        // The primary "a" is gone; "b" alone could lack a write only "c" confirmed.
        assert_eq!(
            candidate("b", at(1, 100), &members, &[], 1),
            Candidacy::Wait { seen: 1, needed: 2 }
        );
        let published = vec![("c".to_string(), at(1, 120))];
        assert_eq!(
            candidate("b", at(1, 100), &members, &published, 1),
            Candidacy::Defer("c".into())
        );
        let published = vec![("b".to_string(), at(1, 100))];
        assert_eq!(
            candidate("c", at(1, 120), &members, &published, 1),
            Candidacy::Campaign
        );
    }

    #[test]
    fn a_later_epoch_wins_over_a_longer_log_and_ties_go_to_the_lower_address() {
        let members = names(&["a", "b", "c"]);
        let published = vec![("a".to_string(), at(1, 500))];
        assert_eq!(
            candidate("b", at(2, 10), &members, &published, 1),
            Candidacy::Campaign
        );
        let published = vec![("c".to_string(), at(2, 10))];
        assert_eq!(
            candidate("b", at(2, 10), &members, &published, 1),
            Candidacy::Campaign
        );
        let published = vec![("b".to_string(), at(2, 10))];
        assert_eq!(
            candidate("c", at(2, 10), &members, &published, 1),
            Candidacy::Defer("b".into())
        );
    }

    #[test]
    fn positions_of_strangers_do_not_count_and_without_sync_replicas_a_majority_does() {
        let members = names(&["a", "b", "c"]);
        let published = vec![("z".to_string(), at(9, 9))];
        assert_eq!(
            candidate("b", at(1, 1), &members, &published, 1),
            Candidacy::Wait { seen: 1, needed: 2 }
        );
        let published = vec![("c".to_string(), at(1, 0))];
        assert_eq!(
            candidate("b", at(1, 1), &members, &published, 0),
            Candidacy::Campaign
        );
        // One node alone is its own majority.
        assert_eq!(
            candidate("a", at(0, 0), &names(&["a"]), &[], 1),
            Candidacy::Campaign
        );
    }
}
