//! `kura cluster status`, `switchover`, `ring` and `nutcracker`: an operator's
//! commands, which talk to etcd and to the nodes without taking part in the cluster
//! (`move-table` is `cli_tables.rs`'s).

use std::time::{Duration, Instant};

/// `kura cluster status --etcd URLS --cluster NAME`: every shard of the cluster, the
/// primary etcd names and its epoch, and each member as it answers `stats
/// replication` (its role, log position and, for a replica, its lag).
#[derive(Debug, clap::Parser)]
#[command(
    name = "kura cluster status",
    about = "Shows every shard of a Kura cluster: its primary and epoch, each member's role and lag"
)]
struct StatusFlags {
    #[command(flatten)]
    at: Where,
}

/// Where a cluster's state is kept.
#[derive(Debug, clap::Args)]
pub(super) struct Where {
    /// etcd's client URLs (comma-separated).
    #[arg(
        long = "etcd",
        value_name = "URLS",
        value_delimiter = ',',
        required = true
    )]
    pub(super) etcd: Vec<String>,
    /// The cluster's name.
    #[arg(long = "cluster", value_name = "NAME")]
    pub(super) cluster: String,
}

/// `kura cluster switchover`: the shard's primary pauses writes, waits until the
/// target holds all of its log, and hands over; the old primary follows the new one.
#[derive(Debug, clap::Parser)]
#[command(
    name = "kura cluster switchover",
    about = "Moves a shard's primary to another of its nodes, pausing writes briefly and losing none"
)]
struct SwitchoverFlags {
    #[command(flatten)]
    at: Where,
    /// The shard.
    #[arg(long = "shard", value_name = "NAME")]
    shard: String,
    /// The node to hand over to (its advertised HOST:PORT); the furthest replica if
    /// not given.
    #[arg(long = "to", value_name = "HOST:PORT")]
    to: Option<String>,
    /// How long writes may pause while the target catches up; past it nothing
    /// changes and writes resume.
    #[arg(long = "timeout-ms", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(100..=600_000))]
    timeout_ms: u64,
}

/// `kura cluster ring`: sets which shards place keys, as libmemcached's weighted
/// ketama over the addresses clients list for them.
#[derive(Debug, clap::Parser)]
#[command(
    name = "kura cluster ring",
    about = "Sets the shards of a Kura cluster's ketama ring, in the order clients list them"
)]
struct RingFlags {
    #[command(flatten)]
    at: Where,
    /// The shards in the order clients list them, each as SHARD=HOST:PORT: the
    /// shard's name (`--shard`) and the address its clients list for it.
    #[arg(
        long = "shards",
        value_name = "SHARD=HOST:PORT,...",
        value_delimiter = ',',
        required_unless_present = "abort"
    )]
    shards: Vec<String>,
    /// The shards' weights, in the same order (each 1 if not given).
    #[arg(long = "weights", value_name = "N,...", value_delimiter = ',')]
    weights: Vec<u32>,
    /// How a key is hashed: md5 (libmemcached's, pylibmc's and nutcracker's
    /// ketama) or fnv1a_64 (nutcracker's).
    #[arg(long = "hash", default_value = "md5", value_parser = ["md5", "fnv1a_64"])]
    hash: String,
    /// nutcracker's hash_tag: two characters around the part of a key hashed.
    #[arg(long = "hash-tag", value_name = "XY")]
    hash_tag: Option<String>,
    /// Abandons the change of the ring in progress, if none of its moves has
    /// flipped: the cluster stays on its ring, and nothing is lost.
    #[arg(long = "abort", conflicts_with_all = ["shards", "weights"])]
    abort: bool,
}

/// `kura cluster nutcracker`: a nutcracker (twemproxy) pool for the cluster's ring.
#[derive(Debug, clap::Parser)]
#[command(
    name = "kura cluster nutcracker",
    about = "Prints a nutcracker pool that places keys as a Kura cluster's ring does"
)]
struct NutcrackerFlags {
    #[command(flatten)]
    at: Where,
    /// The address nutcracker listens on.
    #[arg(
        long = "listen",
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:22121"
    )]
    listen: String,
}

/// Runs `kura cluster ...` if `args` (the whole command line) names it.
pub fn command(args: &[std::ffi::OsString]) -> Option<anyhow::Result<()>> {
    use clap::Parser;
    let word = |i: usize| args.get(i).and_then(|a| a.to_str());
    match (word(1), word(2)) {
        (Some("cluster"), Some("status")) => {
            let flags = StatusFlags::parse_from(named("kura cluster status", args));
            Some(status(&flags).map(|text| print!("{text}")))
        }
        (Some("cluster"), Some("switchover")) => {
            let flags = SwitchoverFlags::parse_from(named("kura cluster switchover", args));
            Some(switchover(&flags).map(|text| print!("{text}")))
        }
        (Some("cluster"), Some("ring")) => {
            let flags = RingFlags::parse_from(named("kura cluster ring", args));
            Some(ring(&flags).map(|text| print!("{text}")))
        }
        (Some("cluster"), Some("nutcracker")) => {
            let flags = NutcrackerFlags::parse_from(named("kura cluster nutcracker", args));
            Some(nutcracker(&flags).map(|text| print!("{text}")))
        }
        (Some("cluster"), Some("move-table")) => {
            let flags = super::cli_tables::MoveTableFlags::parse_from(named(
                "kura cluster move-table",
                args,
            ));
            Some(super::cli_tables::move_table(&flags).map(|text| print!("{text}")))
        }
        (Some("cluster"), _) => Some(Err(anyhow::anyhow!(
            "usage: kura cluster status|switchover|ring|nutcracker|move-table --etcd URLS --cluster NAME ... (--help on each)"
        ))),
        _ => None,
    }
}

/// The command line after `kura cluster <command>`, behind the name clap shows in
/// its usage (it reads the first argument as the program's name).
fn named(name: &str, args: &[std::ffi::OsString]) -> Vec<std::ffi::OsString> {
    std::iter::once(name.into())
        .chain(args.iter().skip(3).cloned())
        .collect()
}

fn status(flags: &StatusFlags) -> anyhow::Result<String> {
    use anyhow::Context;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let (shards, ring, table_moves) = runtime.block_on(async {
        let mut observer =
            kura_cluster::Observer::connect(&flags.at.etcd, &flags.at.cluster).await?;
        let shards = observer.shards().await?;
        let ring = match observer.ring().await? {
            None => None,
            Some(ring) => {
                let change = observer.ring_change().await?;
                let line = match &change {
                    Some(c) => progress_line(&mut observer, c).await?,
                    None => String::new(),
                };
                Some((ring, change, line))
            }
        };
        let mut table_moves = Vec::new();
        for m in observer.table_moves().await? {
            table_moves.push(super::cli_tables::progress_line(&mut observer, &m).await?);
        }
        anyhow::Ok((shards, ring, table_moves))
    })?;
    let mut text = format!("cluster {}\n", flags.at.cluster);
    if let Some((ring, change, line)) = &ring {
        text.push_str(&describe_ring(ring));
        if let Some(change) = change {
            text.push_str(&format!(
                "changing to {}moves: {line}\n",
                describe_ring(&change.next)
            ));
        }
    }
    for line in table_moves {
        text.push_str(&format!("moving {line}\n"));
    }
    if shards.is_empty() {
        text.push_str("no shard has a member\n");
    }
    for shard in shards {
        match &shard.primary {
            Some(p) => text.push_str(&format!(
                "shard {}: primary {} epoch {}\n",
                shard.name, p.advertise, p.epoch
            )),
            None => text.push_str(&format!("shard {}: no primary\n", shard.name)),
        }
        for member in &shard.members {
            text.push_str(&format!("  {member}  {}\n", describe(member)));
        }
    }
    Ok(text)
}

fn switchover(flags: &SwitchoverFlags) -> anyhow::Result<String> {
    use anyhow::Context;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let mut observer = kura_cluster::Observer::connect(&flags.at.etcd, &flags.at.cluster).await?;
        let Some(old) = observer.primary(&flags.shard).await? else {
            anyhow::bail!("shard {} has no primary to hand over from", flags.shard);
        };
        if flags.to.as_deref() == Some(old.advertise.as_str()) {
            return Ok(format!("{} is the primary already\n", old.advertise));
        }
        let timeout = Duration::from_millis(flags.timeout_ms);
        let asked = Instant::now();
        observer
            .request_switchover(&flags.shard, flags.to.as_deref(), timeout)
            .await?;
        // The primary sees the request within a poll; the target takes over within a
        // poll of the hand-over.
        let deadline = asked + timeout + Duration::from_secs(10);
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            // The request gone: handed over, or refused by the primary.
            let ended = observer.switchover(&flags.shard).await?.is_none();
            match observer.primary(&flags.shard).await? {
                Some(new) if new.advertise != old.advertise => {
                    return Ok(format!(
                        "shard {}: primary {} (epoch {}) after {} (epoch {}), in {} ms\n",
                        flags.shard,
                        new.advertise,
                        new.epoch,
                        old.advertise,
                        old.epoch,
                        asked.elapsed().as_millis()
                    ));
                }
                Some(_) if ended => anyhow::bail!(
                    "the switchover did not happen: {} is still the primary and takes writes again (its log says why)",
                    old.advertise
                ),
                _ => {}
            }
            if Instant::now() > deadline {
                anyhow::bail!("no new primary within {:?}", deadline - asked);
            }
        }
    })
}

/// A member as its `stats replication` shows it, or why it does not answer.
fn describe(address: &str) -> String {
    let stats = match kura_replication::role::node_stats(address) {
        Ok(stats) => stats,
        Err(e) => return format!("unreachable ({e})"),
    };
    let get = |name: &str| stats.get(name).map_or("-", String::as_str);
    let mut line = format!("{}  log_lsn {}", get("role"), get("log_lsn"));
    if get("role") == "replica" {
        line.push_str(&format!(
            "  primary {}  link {}  lag_bytes {}",
            get("primary"),
            get("primary_link"),
            get("lag_bytes")
        ));
    }
    line
}

/// A runtime for one command's calls to etcd.
pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
}

/// The ring `flags` describe, checked as the nodes will build it.
fn ring_spec(flags: &RingFlags) -> anyhow::Result<kura_cluster::RingSpec> {
    if !flags.weights.is_empty() && flags.weights.len() != flags.shards.len() {
        anyhow::bail!(
            "--weights gives {} weights for {} shards",
            flags.weights.len(),
            flags.shards.len()
        );
    }
    let mut shards = Vec::new();
    for (i, given) in flags.shards.iter().enumerate() {
        let Some((shard, address)) = given.split_once('=') else {
            anyhow::bail!("--shards: {given:?} is not SHARD=HOST:PORT");
        };
        shards.push(kura_cluster::RingShard {
            shard: shard.to_string(),
            address: address.to_string(),
            weight: flags.weights.get(i).copied().unwrap_or(1),
        });
    }
    let spec = kura_cluster::RingSpec {
        version: 1,
        hash: flags.hash.clone(),
        hash_tag: flags.hash_tag.clone(),
        shards,
    };
    super::ring::placement_of(&spec).map_err(|why| anyhow::anyhow!("{why}"))?;
    Ok(spec)
}

fn describe_ring(spec: &kura_cluster::RingSpec) -> String {
    let mut text = format!("ring v{} ({}", spec.version, spec.hash);
    if let Some(tag) = &spec.hash_tag {
        text.push_str(&format!(", hash tag {tag}"));
    }
    text.push_str(")\n");
    for s in &spec.shards {
        text.push_str(&format!(
            "  shard {} at {} weight {}\n",
            s.shard, s.address, s.weight
        ));
    }
    text
}

fn ring(flags: &RingFlags) -> anyhow::Result<String> {
    let runtime = runtime()?;
    if flags.abort {
        return runtime.block_on(abort(flags));
    }
    let spec = ring_spec(flags)?;
    runtime.block_on(async {
        let mut observer =
            kura_cluster::Observer::connect(&flags.at.etcd, &flags.at.cluster).await?;
        let current = match observer.set_ring(spec.clone()).await? {
            kura_cluster::RingSet::Created(spec) => {
                return Ok(format!("set {}", describe_ring(&spec)))
            }
            kura_cluster::RingSet::Unchanged(current) => match observer.ring_change().await? {
                // The ring places keys so already; a change away from it goes on.
                Some(change) => anyhow::bail!(
                    "the ring is changing to {}wait for it, or abandon it with --abort",
                    describe_ring(&change.next)
                ),
                None => return Ok(format!("unchanged: {}", describe_ring(&current))),
            },
            kura_cluster::RingSet::Differs(current) => current,
        };
        let change = match observer.ring_change().await? {
            // A change to this ring in progress (begun by a `kura cluster ring` that
            // stopped): it is followed to its end.
            Some(change) if change.next.places_as(&spec) => change,
            Some(change) => anyhow::bail!(
                "the ring is changing to {}wait for it, or abandon it with --abort",
                describe_ring(&change.next)
            ),
            None => begin(&mut observer, &current, spec).await?,
        };
        follow(&mut observer, change).await
    })
}

/// Begins changing the ring from `current` to `spec`: the moves are the pairs of
/// shards between which some key changes owner.
async fn begin(
    observer: &mut kura_cluster::Observer,
    current: &kura_cluster::RingSpec,
    mut spec: kura_cluster::RingSpec,
) -> anyhow::Result<kura_cluster::RingChange> {
    if spec.hash != current.hash || spec.hash_tag != current.hash_tag {
        anyhow::bail!(
            "the ring hashes keys by {} (hash tag {:?}): a change keeps that; give the same --hash and --hash-tag",
            current.hash,
            current.hash_tag
        );
    }
    spec.version = current.version + 1;
    let (old, new) = (
        super::ring::placement_of(current).map_err(|why| anyhow::anyhow!("{why}"))?,
        super::ring::placement_of(&spec).map_err(|why| anyhow::anyhow!("{why}"))?,
    );
    let name_old = |i: usize| current.shards[i].shard.clone();
    let name_new = |i: usize| spec.shards[i].shard.clone();
    let pairs: Vec<(String, String)> = old
        .moves_to(&new, |a, b| name_old(a) == name_new(b))
        .into_iter()
        .map(|(a, b)| (name_old(a), name_new(b)))
        .collect();
    if !observer.begin_ring_change(current, &spec, &pairs).await? {
        anyhow::bail!("the ring changed meanwhile; look again (kura cluster status)");
    }
    eprintln!(
        "changing {}to {}{} moves: {}",
        describe_ring(current),
        describe_ring(&spec),
        pairs.len(),
        pairs
            .iter()
            .map(|(a, b)| format!("{a} → {b}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    observer
        .ring_change()
        .await?
        .ok_or_else(|| anyhow::anyhow!("the change went as it was made"))
}

/// Follows `change` until every move is purged, showing each move's progress, then
/// makes its next ring the ring.
async fn follow(
    observer: &mut kura_cluster::Observer,
    mut change: kura_cluster::RingChange,
) -> anyhow::Result<String> {
    let started = Instant::now();
    let mut shown = String::new();
    loop {
        if change
            .moves
            .iter()
            .all(|m| m.state == kura_cluster::MoveState::Purged)
        {
            if observer.finish_ring_change(&change).await? {
                return Ok(format!(
                    "set {}in {:.1} s\n",
                    describe_ring(&change.next),
                    started.elapsed().as_secs_f64()
                ));
            }
        } else {
            let line = progress_line(observer, &change).await?;
            if line != shown {
                eprintln!("{line}");
                shown = line;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        match observer.ring_change().await? {
            Some(now) if now.next == change.next => change = now,
            // Ended by another: done if the ring is the one this change went to.
            _ => {
                let ring = observer.ring().await?;
                return match ring {
                    Some(ring) if ring.places_as(&change.next) => {
                        Ok(format!("set {}", describe_ring(&ring)))
                    }
                    _ => anyhow::bail!("the change of the ring was abandoned"),
                };
            }
        }
    }
}

/// One line of a change's progress: each move's state, and how much of the source's
/// log its target has applied.
async fn progress_line(
    observer: &mut kura_cluster::Observer,
    change: &kura_cluster::RingChange,
) -> anyhow::Result<String> {
    let mut parts = Vec::new();
    for m in &change.moves {
        let state = match m.state {
            kura_cluster::MoveState::Copying => {
                match observer.move_progress(&m.from, &m.to).await? {
                    Some(p) if p.source_lsn > 0 => format!(
                        "copying {:>3}%",
                        p.applied_lsn.min(p.source_lsn) * 100 / p.source_lsn
                    ),
                    _ => "copying".to_string(),
                }
            }
            kura_cluster::MoveState::Flipped => "flipped, purging".to_string(),
            kura_cluster::MoveState::Purged => "done".to_string(),
        };
        parts.push(format!("{} → {}: {state}", m.from, m.to));
    }
    Ok(parts.join("; "))
}

/// `kura cluster ring --abort`.
async fn abort(flags: &RingFlags) -> anyhow::Result<String> {
    let mut observer = kura_cluster::Observer::connect(&flags.at.etcd, &flags.at.cluster).await?;
    let Some(change) = observer.ring_change().await? else {
        anyhow::bail!("the ring is not changing");
    };
    if change
        .moves
        .iter()
        .any(|m| m.state != kura_cluster::MoveState::Copying)
    {
        anyhow::bail!(
            "a move has flipped: the change cannot be abandoned; let it finish (kura cluster ring with the same shards), then change the ring back"
        );
    }
    if !observer.abort_ring_change(&change).await? {
        anyhow::bail!("the change moved on meanwhile; look again");
    }
    Ok(format!(
        "abandoned the change to {}the ring stays {}",
        describe_ring(&change.next),
        describe_ring(&change.current)
    ))
}

fn nutcracker(flags: &NutcrackerFlags) -> anyhow::Result<String> {
    let spec = runtime()?.block_on(async {
        let mut observer =
            kura_cluster::Observer::connect(&flags.at.etcd, &flags.at.cluster).await?;
        observer.ring().await
    })?;
    let Some(spec) = spec else {
        anyhow::bail!(
            "cluster {} has no ring: set one with kura cluster ring",
            flags.at.cluster
        );
    };
    let mut text = format!(
        "# kura cluster {} ring v{}\n{}:\n  listen: {}\n  hash: {}\n",
        flags.at.cluster, spec.version, flags.at.cluster, flags.listen, spec.hash
    );
    if let Some(tag) = &spec.hash_tag {
        text.push_str(&format!("  hash_tag: \"{tag}\"\n"));
    }
    text.push_str("  distribution: ketama\n  auto_eject_hosts: false\n  servers:\n");
    for s in &spec.shards {
        text.push_str(&format!("   - {}:{}\n", s.address, s.weight));
    }
    Ok(text)
}
