//! The ring in a node (issue 42): which shard owns a key, and where that shard's
//! primary is now.
//!
//! A task reads the cluster's ring (`kura cluster ring` sets it in etcd), any change
//! of it in progress, and every shard's primary, a poll at a time, into a
//! [`Placement`] the request path reads. A node then serves a key its own shard owns
//! as before (a replica passing changes on to its primary), and passes a request for
//! another shard's key on to that shard's primary, whole, so a client that hashes
//! differently from the ring, or lists one node only, still reaches every key. A
//! multi-key get whose keys live on several shards is split by owner and the replies
//! merged in the keys' order (`super::forward`).
//!
//! While the ring changes, a key whose owner differs between the ring and the next
//! one stays its old owner's until the move between the two shards flips
//! (`super::moves`). A move's state only goes forward in a node's placement: what a
//! hand-off learns first (its own flip) is not taken back by a poll that read etcd
//! before it.
//!
//! What it is not for: the ring's arithmetic (`kura-ring`), and copying the keys
//! that move (`super::moves`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kura_cluster::{MoveState, RingChange, RingSpec};
use kura_ring::{KeyHash, Member, Options, Ring};

use crate::server::Shared;

/// The ring as a node uses it.
#[derive(Clone)]
pub struct Placement {
    /// The ring's version (the next ring's is one more).
    pub version: u64,
    ring: Ring,
    /// The ring being moved to, if a change is in progress.
    next: Option<Next>,
    /// The shards' names: the ring's, in its order, then the next ring's others.
    pub shards: Vec<String>,
    /// Each shard's primary as etcd last named it.
    pub primaries: Vec<Option<String>>,
    /// This node's shard, if either ring has it.
    pub mine: Option<usize>,
    /// Each placed table's shard (an index into `shards`), by its catalog name.
    pub tables: Arc<HashMap<String, usize>>,
    /// Each shard's primary's SQL address as it registered it (None: not known, or
    /// it has no SQL port).
    pub sql: Vec<Option<String>>,
    /// The tables being moved to another shard.
    pub table_moves: Arc<Vec<TableMoving>>,
}

/// A table's move to another shard, as a node places the table by it: the table is
/// `from`'s until the move flips ([`Placement::tables`] says so then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMoving {
    pub table: String,
    pub from: usize,
    pub to: usize,
    pub state: MoveState,
    /// The table as the source described it (None: not yet).
    pub described: Option<Arc<Vec<u8>>>,
    /// Which move of the table this is (etcd's revision at its start).
    pub id: i64,
}

impl TableMoving {
    /// The name a table move goes by where a key move goes by its target's: its
    /// hold, its hand-off frames and its target's position in the source's log.
    pub fn name(&self) -> String {
        format!("@@{}", self.table)
    }
}

/// A change of the ring in progress, as a node places keys by it.
#[derive(Clone)]
struct Next {
    spec: RingSpec,
    ring: Ring,
    /// Each of the next ring's members as an index into [`Placement::shards`].
    index: Vec<usize>,
    moves: Vec<Moving>,
}

/// One move of a change in progress, by shard index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moving {
    pub from: usize,
    pub to: usize,
    pub state: MoveState,
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
    /// The shard owning `key`: for a table's row (`@@container.key`), the shard
    /// holding the table (this node's for a table etcd does not place).
    pub fn owner(&self, key: &[u8]) -> usize {
        if let Some(rest) = key.strip_prefix(b"@@") {
            if let Some(n) = self.row_shard(rest) {
                return n;
            }
            return self.mine.unwrap_or_else(|| self.ring.owner(key));
        }
        match self.moving(key) {
            None => self.ring.owner(key),
            Some(m) if m.state >= MoveState::Flipped => m.to,
            Some(m) => m.from,
        }
    }

    /// The move `key` is in, if the ring is changing and its owner changes with it
    /// (never a table's row: tables are placed by table).
    pub fn moving(&self, key: &[u8]) -> Option<Moving> {
        let next = self.next.as_ref()?;
        if key.starts_with(b"@@") {
            return None;
        }
        let hash = self.ring.hash_of(key);
        let (from, to) = (
            self.ring.owner_of_hash(hash),
            next.index[next.ring.owner_of_hash(hash)],
        );
        if from == to {
            return None;
        }
        // A pair the change has no move for cannot be (`Ring::moves_to` lists them
        // all); the key stays with its owner in the ring.
        let found = next.moves.iter().find(|m| m.from == from && m.to == to);
        Some(found.copied().unwrap_or(Moving {
            from,
            to,
            state: MoveState::Copying,
        }))
    }

    /// The change's moves, if the ring is changing.
    pub fn moves(&self) -> &[Moving] {
        self.next.as_ref().map_or(&[], |n| &n.moves)
    }

    /// The next ring's version, if the ring is changing.
    pub fn next_version(&self) -> Option<u64> {
        self.next.as_ref().map(|_| self.version + 1)
    }

    /// This placement with the move from `from` to `to` at least at `state`.
    pub fn advanced(&self, from: usize, to: usize, state: MoveState) -> Placement {
        let mut next = self.next.clone();
        if let Some(n) = next.as_mut() {
            for m in n.moves.iter_mut().filter(|m| m.from == from && m.to == to) {
                m.state = m.state.max(state);
            }
        }
        Placement {
            next,
            ..self.clone()
        }
    }

    /// This placement with the move of `table` begun at `id` at least at `state`:
    /// from its flip on, the table is its target's.
    pub fn table_advanced(&self, table: &str, id: i64, state: MoveState) -> Placement {
        let mut moves = (*self.table_moves).clone();
        let mut tables = (*self.tables).clone();
        for m in moves.iter_mut().filter(|m| m.table == table && m.id == id) {
            m.state = m.state.max(state);
            if m.state >= MoveState::Flipped {
                tables.insert(m.table.clone(), m.to);
            }
        }
        Placement {
            tables: Arc::new(tables),
            table_moves: Arc::new(moves),
            ..self.clone()
        }
    }

    /// The move of table `table` (its catalog name), if one is recorded.
    pub fn table_moving(&self, table: &str) -> Option<&TableMoving> {
        self.table_moves.iter().find(|m| m.table == table)
    }

    /// This placement, with each move's state no earlier than in `known` when both
    /// are of the same change.
    pub fn keeping_progress_of(mut self, known: &Placement) -> Placement {
        if self.version != known.version || self.shards != known.shards {
            return self;
        }
        if let (Some(next), Some(k)) = (self.next.as_mut(), known.next.as_ref()) {
            if next.spec == k.spec {
                for m in &mut next.moves {
                    if let Some(before) = k.moves.iter().find(|b| b.from == m.from && b.to == m.to)
                    {
                        m.state = m.state.max(before.state);
                    }
                }
            }
        }
        self
    }

    /// The index of the shard named `name`.
    pub fn shard_index(&self, name: &str) -> Option<usize> {
        self.shards.iter().position(|s| s == name)
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

    /// The shard holding the table named `table` (its catalog name), if placed.
    pub fn table_shard(&self, table: &str) -> Option<usize> {
        self.tables.get(table).copied()
    }

    /// The placed table of the container named `name` (a table, or `table_by_index`).
    fn container_table<'n>(&self, name: &'n str) -> Option<&'n str> {
        if self.tables.contains_key(name) {
            return Some(name);
        }
        name.match_indices("_by_")
            .map(|(at, _)| &name[..at])
            .find(|t| self.tables.contains_key(*t))
    }

    /// The shard holding the row `rest` names (`container.key`, or
    /// `database.container.key`), if its table is placed.
    fn row_shard(&self, rest: &[u8]) -> Option<usize> {
        self.row_table(rest).and_then(|t| self.table_shard(t))
    }

    /// The placed table of the row `rest` names (`container.key`, or
    /// `database.container.key`).
    pub fn row_table<'k>(&self, rest: &'k [u8]) -> Option<&'k str> {
        let name =
            |end: Option<usize>| std::str::from_utf8(&rest[..end.unwrap_or(rest.len())]).ok();
        let mut dots = rest
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'.')
            .map(|(i, _)| i);
        // `@@container` alone makes it the connection's default container, here.
        let first = dots.next()?;
        if let Some(t) = name(Some(first)).and_then(|c| self.container_table(c)) {
            return Some(t);
        }
        // `@@database.table.key` (a table of a database other than the default).
        name(Some(dots.next()?)).and_then(|c| self.container_table(c))
    }

    /// Where shard `n`'s SQL statements go now (its primary's SQL port), or why
    /// none can.
    pub fn primary_sql(&self, n: usize) -> Result<String, String> {
        let primary = self.primary(n)?;
        self.sql.get(n).cloned().flatten().ok_or_else(|| {
            format!(
                "the SQL port of shard {}'s primary {primary} is not known (--sql-port off?), try again",
                self.shards.get(n).map_or("?", String::as_str)
            )
        })
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
            super::moves::run_tasks(&shared);
            tokio::time::sleep(every).await;
        }
    });
}

/// Reads the ring, any change of it, and its shards' primaries once.
async fn refresh(
    shared: &Shared,
    observer: &mut kura_cluster::Observer,
    shard: &str,
) -> Result<(), kura_cluster::ClusterError> {
    let (ring, change) = observer.ring_state().await?;
    let Some(spec) = ring else {
        shared
            .cluster
            .ring_read
            .store(true, std::sync::atomic::Ordering::Release);
        return Ok(());
    };
    let change = change.filter(|c| c.current.version == spec.version);
    let mut shards: Vec<String> = spec.shards.iter().map(|s| s.shard.clone()).collect();
    if let Some(c) = &change {
        for s in &c.next.shards {
            if !shards.contains(&s.shard) {
                shards.push(s.shard.clone());
            }
        }
    }
    let mut placed = observer.tables().await?;
    super::tables::place_local(shared, observer, shard, &mut placed).await?;
    let table_moves = observer.table_moves().await?;
    let named = placed.iter().map(|(_, s)| s);
    for s in named.chain(table_moves.iter().flat_map(|m| [&m.from, &m.to])) {
        if !shards.contains(s) {
            shards.push(s.clone());
        }
    }
    let mut primaries = Vec::with_capacity(shards.len());
    let mut sql = Vec::with_capacity(shards.len());
    for s in &shards {
        let primary = observer.primary(s).await?.map(|p| p.advertise);
        sql.push(match &primary {
            Some(p) => observer.sql_of(s, p).await?,
            None => None,
        });
        primaries.push(primary);
    }
    let mut tables: HashMap<String, usize> = placed
        .into_iter()
        .filter_map(|(t, s)| Some((t, shards.iter().position(|n| *n == s)?)))
        .collect();
    let current = shared.cluster.placement();
    let index_of = |name: &str| shards.iter().position(|n| n == name);
    let mut moving_tables = Vec::with_capacity(table_moves.len());
    for m in table_moves {
        let (Some(from), Some(to)) = (index_of(&m.from), index_of(&m.to)) else {
            continue;
        };
        // What a hand-off learned first is not taken back by a read made before it.
        let known = current
            .as_ref()
            .and_then(|p| p.table_moving(&m.table))
            .filter(|k| k.id == m.id)
            .map_or(MoveState::Copying, |k| k.state);
        let state = m.state.max(known);
        if state >= MoveState::Flipped {
            tables.insert(m.table.clone(), to);
        }
        moving_tables.push(TableMoving {
            table: m.table,
            from,
            to,
            state,
            described: m.described.map(Arc::new),
            id: m.id,
        });
    }
    let same_ring = current.as_ref().filter(|p| p.version == spec.version);
    let ring = match same_ring {
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
    let next = match &change {
        None => None,
        Some(c) => match next_of(
            c,
            &shards,
            same_ring
                .and_then(|p| p.next.as_ref())
                .filter(|n| n.spec == c.next),
        ) {
            Ok(next) => Some(next),
            Err(why) => {
                tracing::warn!("cluster: the next ring in etcd cannot be built: {why}");
                return Ok(());
            }
        },
    };
    let unchanged = same_ring.is_some_and(|p| {
        p.primaries == primaries
            && p.shards == shards
            && p.sql == sql
            && *p.tables == tables
            && *p.table_moves == moving_tables
            && p.next.as_ref().map(|n| &n.moves) == next.as_ref().map(|n| &n.moves)
    });
    if !unchanged {
        if let Some(n) = &next {
            if same_ring.and_then(|p| p.next.as_ref()).is_none() {
                tracing::info!(
                    "cluster: the ring changes to v{}: {} moves",
                    spec.version + 1,
                    n.moves.len()
                );
            }
        }
        shared.cluster.set_placement(Placement {
            version: spec.version,
            ring,
            next,
            mine: shards.iter().position(|s| s == shard),
            shards,
            primaries,
            tables: Arc::new(tables),
            sql,
            table_moves: Arc::new(moving_tables),
        });
    }
    shared
        .cluster
        .ring_read
        .store(true, std::sync::atomic::Ordering::Release);
    Ok(())
}

/// The change `change` as a node places keys by it; a move's state no earlier than
/// in `known`, the node's placement so far.
fn next_of(change: &RingChange, shards: &[String], known: Option<&Next>) -> Result<Next, String> {
    let ring = match known {
        Some(k) => k.ring.clone(),
        None => placement_of(&change.next)?,
    };
    let index_of = |name: &str| {
        shards
            .iter()
            .position(|s| s == name)
            .ok_or_else(|| format!("a move names shard {name}, which neither ring has"))
    };
    let index = change
        .next
        .shards
        .iter()
        .map(|s| index_of(&s.shard))
        .collect::<Result<Vec<_>, _>>()?;
    let mut moves = Vec::with_capacity(change.moves.len());
    for m in &change.moves {
        let (from, to) = (index_of(&m.from)?, index_of(&m.to)?);
        let before = known
            .and_then(|k| k.moves.iter().find(|k| k.from == from && k.to == to))
            .map_or(MoveState::Copying, |k| k.state);
        moves.push(Moving {
            from,
            to,
            state: m.state.max(before),
        });
    }
    Ok(Next {
        spec: change.next.clone(),
        ring,
        index,
        moves,
    })
}
