//! Cluster mode (`--etcd`): the node's role in its shard, as etcd decides it.
//!
//! The node joins its shard through `kura-cluster` (a lease kept alive with etcd) and
//! registers as a member. Then, a poll at a time:
//! - etcd names another node primary: this node follows it (`replicaof`'s path), and
//!   takes back any position it published;
//! - etcd names none: this node stops following (no copy is applied after that), and
//!   publishes where its log ends; it campaigns when `kura_cluster::candidate` says
//!   its log is the furthest of enough members' that it holds every acknowledged
//!   write, and on winning it becomes primary under a new epoch;
//! - it is primary: it takes changes only while its lease is certainly alive by its
//!   own clock (`Store::set_writable_until`, moved on with every keepalive etcd
//!   answers), so it stops before etcd can give the term to another node. A lease
//!   that ends (etcd says so) makes it a replica again, and it joins anew.
//!
//! A node starts read-only and stays so until it wins: it never takes a change that
//! the shard's primary does not. The `replica-of` file of a node outside a cluster
//! plays no part here; etcd says whom to follow.
//!
//! What it is not for: the election itself (`kura-cluster`, etcd's), the stream of the
//! log (`primary.rs`, `replica.rs`), and what the server does with the shard's view
//! (forwarding requests, `stats cluster`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_cluster::{candidate, Candidacy, ClusterError, Member, Position, Switchover, Term};
use parking_lot::Mutex;

use crate::{Node, ReplicationError};

/// What a store without a primary names as the primary in its refusals.
pub const ELECTING: &str = "its shard's next primary (being elected)";

/// The node's view of its shard, as its task last saw it.
#[derive(Default)]
pub struct Shard {
    inner: Mutex<Seen>,
}

/// What the task saw of the shard.
#[derive(Default, Clone)]
pub struct Seen {
    /// Whom etcd names primary.
    pub primary: Option<String>,
    /// The epoch of the term this node holds.
    pub term: Option<i64>,
    /// That term's key in etcd, which lasts as long as the term (a fence for etcd
    /// transactions made as the shard's primary).
    pub term_key: Option<Vec<u8>>,
    /// The shard's registered members.
    pub members: usize,
    /// Until when this node's lease is certainly alive.
    pub lease_until: Option<Instant>,
    /// The SQL address the primary this node follows registered: its advertised
    /// address, then the SQL address (None: it has no SQL port).
    pub primary_sql: Option<(String, Option<String>)>,
    /// SQL connections passed on to the primary.
    pub sql_passed_on: u64,
}

impl Shard {
    pub fn seen(&self) -> Seen {
        self.inner.lock().clone()
    }

    fn update(&self, change: impl FnOnce(&mut Seen)) {
        change(&mut self.inner.lock());
    }

    /// The SQL address `primary` registered, if the task has read it: Some(None)
    /// when it has no SQL port.
    pub fn primary_sql(&self, primary: &str) -> Option<Option<String>> {
        match &self.inner.lock().primary_sql {
            Some((of, sql)) if of == primary => Some(sql.clone()),
            _ => None,
        }
    }

    pub fn count_sql_passed_on(&self) {
        self.inner.lock().sql_passed_on += 1;
    }
}

/// Starts the node's part in its shard on the current runtime; it runs until the
/// process ends.
pub fn start(shared: Arc<dyn Node>, settings: kura_cluster::Config) {
    tokio::spawn(async move {
        loop {
            if shared.stopping() {
                return;
            }
            let poll = poll_every(&settings);
            if let Err(e) = take_part(&shared, &settings).await {
                tracing::warn!("cluster: {e}; joining again");
            }
            // A primary stops taking changes; a replica goes on following.
            if !shared.store().is_read_only() {
                step_down(&shared).await;
            }
            tokio::time::sleep(poll).await;
        }
    });
}

/// How often the node looks at etcd: often enough that a failover takes little more
/// than the lease's TTL.
pub fn poll_every(settings: &kura_cluster::Config) -> Duration {
    (settings.lease_ttl / 15).clamp(Duration::from_millis(50), Duration::from_millis(500))
}

/// What this node is in its shard now.
enum Role {
    /// Following the named primary (or about to).
    Replica(String),
    /// No primary: published its position.
    Candidate,
    Primary(Term),
}

/// Joins the shard and plays the role etcd gives, until the lease ends or etcd fails.
async fn take_part(
    shared: &Arc<dyn Node>,
    settings: &kura_cluster::Config,
) -> Result<(), ClusterError> {
    let mut member = Member::join(settings.clone()).await?;
    member.register().await?;
    let members = member.members().await?.len();
    shared
        .replication()
        .shard
        .update(|seen| seen.members = members);
    let me = settings.advertise.clone();
    let poll = poll_every(settings);
    let mut validity = member.validity();
    // A replica that joins again (its lease ended) goes on following meanwhile.
    let mut role = match shared.replication().primary() {
        Some(primary) => Role::Replica(primary),
        None => Role::Candidate,
    };
    tracing::info!(
        "cluster {} shard {}: joined as {me}",
        settings.cluster,
        settings.shard
    );
    let mut polls: u64 = 0;
    // After this node handed over in a switchover: until when it waits for the target.
    let mut handed: Option<Instant> = None;
    loop {
        let lease_until = member.holds_until();
        shared
            .replication()
            .shard
            .update(|seen| seen.lease_until = lease_until);
        // The member list, for `stats cluster`, now and then.
        polls += 1;
        if polls % 10 == 2 {
            if let Ok(members) = member.members().await {
                shared
                    .replication()
                    .shard
                    .update(|seen| seen.members = members.len());
            }
        }
        if let Role::Primary(term) = &role {
            // Takes changes until the lease may have ended, as each keepalive says.
            let until = *validity.borrow_and_update();
            match until {
                Some(until) => shared.store().set_writable_until(Some(until)),
                None => return Err(ClusterError::LeaseLost),
            }
            tokio::select! {
                changed = validity.changed() => {
                    if changed.is_err() {
                        return Err(ClusterError::LeaseLost);
                    }
                }
                () = tokio::time::sleep(poll) => {}
            }
            // Still the primary etcd names? (A resignation, or a term that ended while
            // etcd was away, says not.)
            if let Ok(primary) = member.primary().await {
                let ours = primary.as_ref().is_some_and(|p| p.advertise == me);
                if !ours {
                    tracing::warn!(
                        "cluster: term {} is over; etcd names {primary:?}",
                        term.epoch
                    );
                    return Ok(());
                }
            }
            if let Ok(Some(Switchover::Requested { to, timeout })) = member.switchover().await {
                let term = term.clone();
                match hand_over(shared, &mut member, &me, to, timeout).await {
                    Ok(to) => {
                        // Nothing more is taken here; `to` alone campaigns.
                        shared.store().set_read_only(Some(to.clone()));
                        member.resign(term).await?;
                        tracing::info!("cluster: handed over to {to}");
                        handed = Some(Instant::now() + timeout);
                        role = Role::Candidate;
                    }
                    Err(why) => {
                        tracing::warn!("cluster: switchover refused, writes go on: {why}");
                        member.set_switchover(None).await?;
                    }
                }
            }
            continue;
        }
        if member.holds_until().is_none() {
            return Err(ClusterError::LeaseLost);
        }
        // Without etcd nothing changes: a replica goes on following, a candidate
        // waits.
        let named = match member.primary().await {
            Ok(named) => named,
            Err(e) => {
                tracing::debug!("cluster: asking etcd for the primary: {e}");
                tokio::time::sleep(poll).await;
                continue;
            }
        };
        shared.replication().shard.update(|seen| {
            seen.primary = named.as_ref().map(|p| p.advertise.clone());
            seen.term = None;
            seen.term_key = None;
        });
        match named {
            Some(primary) if primary.advertise == me => {
                // A key of this node's from an earlier lease: it goes with that lease.
            }
            Some(primary) => {
                handed = None;
                // Where SQL connections go: the primary's registered SQL address, read
                // once for each primary, again now and then.
                if shared
                    .replication()
                    .shard
                    .primary_sql(&primary.advertise)
                    .is_none()
                    || polls % 10 == 2
                {
                    match member.sql_of(&primary.advertise).await {
                        Ok(sql) => shared.replication().shard.update(|seen| {
                            seen.primary_sql = Some((primary.advertise.clone(), sql));
                        }),
                        Err(e) => tracing::debug!("cluster: reading the primary's SQL port: {e}"),
                    }
                }
                let following = matches!(&role, Role::Replica(p) if *p == primary.advertise);
                if !following {
                    if matches!(role, Role::Candidate) {
                        member.publish(None).await?;
                    }
                    tracing::info!(
                        "cluster: following {} (epoch {})",
                        primary.advertise,
                        primary.epoch
                    );
                    let address = primary.advertise.clone();
                    let s = Arc::clone(shared);
                    let followed = tokio::task::spawn_blocking(move || {
                        s.replication().become_replica(&*s, address)
                    })
                    .await;
                    match followed {
                        Ok(Ok(())) => role = Role::Replica(primary.advertise),
                        Ok(Err(e)) => {
                            tracing::warn!("cluster: following {}: {e}", primary.advertise)
                        }
                        Err(e) => tracing::warn!("cluster: following {}: {e}", primary.advertise),
                    }
                }
            }
            None => {
                // A switchover handing over: its target alone campaigns, at once (the
                // old primary saw it hold all of its log), until the old primary gives
                // up waiting and ends it.
                match member.switchover().await {
                    Ok(Some(Switchover::HandingOver { to })) => {
                        if handed.is_some_and(|until| Instant::now() > until) {
                            tracing::warn!(
                                "cluster: {to} did not take over; ending the switchover"
                            );
                            member.set_switchover(None).await?;
                            handed = None;
                        } else if to == me {
                            step_down(shared).await;
                            let term = member.campaign().await?;
                            member.set_switchover(None).await?;
                            member = serve_term(shared, member, &me, &term).await?;
                            role = Role::Primary(term);
                            continue;
                        } else {
                            tokio::time::sleep(poll).await;
                            continue;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!("cluster: reading the switchover: {e}"),
                }
                if let Role::Replica(old) = &role {
                    tracing::info!("cluster: {old} is no longer primary; stopping to follow it");
                    step_down(shared).await;
                    role = Role::Candidate;
                }
                let mine = position(&**shared);
                member.publish(Some(mine)).await?;
                let members = member.members().await?;
                shared
                    .replication()
                    .shard
                    .update(|seen| seen.members = members.len());
                let published = member.positions().await?;
                let k = usize::from(shared.replication().settings.min_sync_replicas);
                match candidate(&me, mine, &members, &published, k) {
                    Candidacy::Campaign => {
                        if let Ok(won) = tokio::time::timeout(poll * 4, member.campaign()).await {
                            let term = won?;
                            member.publish(None).await?;
                            member = serve_term(shared, member, &me, &term).await?;
                            role = Role::Primary(term);
                            continue;
                        }
                    }
                    Candidacy::Defer(to) => tracing::debug!("cluster: {to} has the furthest log"),
                    Candidacy::Wait { seen, needed } => tracing::debug!(
                        "cluster: {seen} of the {needed} members' positions needed to campaign"
                    ),
                }
            }
        }
        tokio::time::sleep(poll).await;
    }
}

/// A planned switchover on the primary: pauses writes (and reads), waits until `to`
/// (or, with None, the furthest replica) holds all of this node's log, within
/// `timeout`, and marks the switchover as handing over to it. On any failure the
/// caller resumes writes. Returns the target.
async fn hand_over(
    shared: &Arc<dyn Node>,
    member: &mut Member,
    me: &str,
    to: Option<String>,
    timeout: Duration,
) -> Result<String, ReplicationError> {
    let deadline = Instant::now() + timeout;
    shared.store().set_writable_until(Some(Instant::now()));
    let target = match to {
        Some(to) => to,
        None => {
            let members = member.members().await?;
            let others: Vec<String> = members.into_iter().filter(|m| m != me).collect();
            let stats = tokio::task::spawn_blocking(move || {
                others
                    .into_iter()
                    .filter_map(|m| Some((node_stats(&m).ok()?, m)))
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(joined)?;
            stats
                .into_iter()
                .filter(|(s, _)| s.get("role").map(String::as_str) == Some("replica"))
                .max_by_key(|(s, _)| lsn(s, "synced_lsn"))
                .map(|(_, m)| m)
                .ok_or_else(|| ReplicationError::Failover("no replica answers".to_string()))?
        }
    };
    if target == me {
        return Err(ReplicationError::Failover(
            "the target is the primary already".to_string(),
        ));
    }
    loop {
        // Writes that passed the check before the pause may still be appending:
        // the target must hold the log's end as it is now.
        let end = shared.store().appended_lsn();
        let address = target.clone();
        let stats = tokio::task::spawn_blocking(move || node_stats(&address))
            .await
            .map_err(joined)?;
        if let Ok(stats) = stats {
            let follows = stats.get("role").map(String::as_str) == Some("replica")
                && stats.get("primary").map(String::as_str) == Some(me);
            if follows && lsn(&stats, "synced_lsn") >= end {
                member.set_switchover(Some(&target)).await?;
                return Ok(target);
            }
        }
        if Instant::now() > deadline {
            return Err(ReplicationError::Failover(format!(
                "{target} did not hold this log's end within {timeout:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn lsn(stats: &std::collections::BTreeMap<String, String>, name: &str) -> u64 {
    stats.get(name).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Makes this node the primary of the term it won, taking changes until its lease may
/// end, and shows it. On failure it gives the term back at once (leaving the shard)
/// rather than hold it idle.
async fn serve_term(
    shared: &Arc<dyn Node>,
    member: Member,
    me: &str,
    term: &Term,
) -> Result<Member, ClusterError> {
    if let Err(e) = promote(shared, member.holds_until()).await {
        let _ = member.leave().await;
        return Err(ClusterError::Invalid(format!("promotion failed: {e}")));
    }
    tracing::info!("cluster: primary under term {}", term.epoch);
    let (me, epoch, key) = (me.to_string(), term.epoch, term.key().to_vec());
    shared.replication().shard.update(|seen| {
        seen.primary = Some(me);
        seen.term = Some(epoch);
        seen.term_key = Some(key);
    });
    Ok(member)
}

/// Where this node's log ends.
fn position(shared: &dyn Node) -> Position {
    Position {
        epoch: shared.store().history().current().number,
        lsn: shared.store().appended_lsn(),
    }
}

/// Stops taking changes and stops following: the node waits to be told its role.
async fn step_down(shared: &Arc<dyn Node>) {
    let s = Arc::clone(shared);
    let _ = tokio::task::spawn_blocking(move || {
        s.store().set_read_only(Some(ELECTING.to_string()));
        s.replication().stop_following();
    })
    .await;
}

/// Makes this node the shard's primary: a new epoch of its history, taking changes
/// until `until` (its lease).
async fn promote(shared: &Arc<dyn Node>, until: Option<Instant>) -> Result<(), ReplicationError> {
    let s = Arc::clone(shared);
    tokio::task::spawn_blocking(move || s.replication().promote(&*s, until))
        .await
        .map_err(joined)?
}

/// A blocking task that did not finish (it panicked, or the runtime is stopping).
fn joined(e: tokio::task::JoinError) -> ReplicationError {
    ReplicationError::Failover(format!("a blocking task ended: {e}"))
}

/// `stats replication` of the node at `address`, with a bounded wait.
pub fn node_stats(address: &str) -> std::io::Result<std::collections::BTreeMap<String, String>> {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let limit = Duration::from_secs(2);
    let addr = address
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| std::io::Error::other("no address"))?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, limit)?;
    stream.set_read_timeout(Some(limit))?;
    stream.write_all(b"stats replication\r\n")?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while !reply.ends_with(b"END\r\n") {
        let n = stream.read(&mut chunk)?;
        if n == 0 || reply.len() > 1 << 20 {
            break;
        }
        reply.extend_from_slice(&chunk[..n]);
        if reply.starts_with(b"SERVER_ERROR") || reply.starts_with(b"CLIENT_ERROR") {
            let line = String::from_utf8_lossy(&reply).trim_end().to_string();
            return Err(std::io::Error::other(line));
        }
    }
    Ok(String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}
