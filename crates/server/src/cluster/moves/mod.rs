//! Moving keys between shards when the ring changes (issue 42), on the nodes: each
//! move (source shard S, target shard T) is copied, handed off, flipped and purged by
//! the two shards' primaries, as `docs/cluster.md` tells.
//!
//! - `target.rs`: T's primary pulls S's log on a `move` stream (from its oldest
//!   segment, or from where it got to), keeps the records of the moving keys and
//!   applies them as its own changes, with its position in S's log in the same batch.
//! - `source.rs`: S's primary, asked by T, holds changes to the moving keys, waits
//!   until T holds S's log up to that point durably, flips the move in etcd, and lets
//!   the held changes go on to T; once flipped, it deletes its copies (the purge).
//! - here: the hold each change to a moving key passes ([`admit`]), and the tasks
//!   each primary runs for the moves its shard is in ([`run_tasks`]).
//!
//! What it is not for: which shard owns a key (`super::ring`), and the etcd
//! transactions (`kura_cluster`'s).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_cluster::MoveState;
use kura_engine::{Access, Change, Key, Space};
use parking_lot::Mutex;

use super::ring::TableMoving;
use crate::server::Shared;

mod source;
mod table_source;
mod target;

pub use source::hand_off;

/// The key space of a target's position in each source's log: one key a source
/// shard, named by it. Spaces 1 to 4 are the tables'.
pub const POSITION_SPACE: Space = Space(16);

/// What a node keeps of the moves its shard is in.
#[derive(Default)]
pub struct Moves {
    /// The hold on the keys moving to each target (by name) from this shard.
    holds: Mutex<HashMap<String, Arc<Hold>>>,
    /// The moves (source, target) this node runs a task for now.
    running: Mutex<HashSet<(String, String)>>,
    /// Changes applied by this node as a move's target, and keys its purges
    /// deleted, for `stats cluster`.
    pub copied: AtomicU64,
    pub purged: AtomicU64,
    /// Hand-offs this node made as a source: flipped, and given up.
    pub flips: AtomicU64,
    pub releases: AtomicU64,
}

/// The hold on the keys one move takes from this shard.
#[derive(Default)]
pub struct Hold {
    /// Set while changes to the keys wait for the hand-off.
    held: AtomicBool,
    /// Changes to the keys admitted and not yet made.
    inflight: AtomicU64,
    /// Told when the hold ends.
    released: tokio::sync::Notify,
    /// Told when the target says it owns the keys.
    owning: tokio::sync::Notify,
}

impl Hold {
    fn release(&self) {
        self.held.store(false, Ordering::SeqCst);
        self.released.notify_waiters();
    }
}

impl Moves {
    fn hold(&self, target: &str) -> Arc<Hold> {
        Arc::clone(self.holds.lock().entry(target.to_string()).or_default())
    }
}

/// A change admitted past a move's hold: it is counted until it is made (dropped).
pub struct Admitted(Arc<Hold>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How much longer than the pause a change waits for a hold before it is refused:
/// the hand-off ends its hold within the pause unless etcd does not answer.
const HOLD_MARGIN: Duration = Duration::from_millis(500);

/// Lets a change to `keys` go on, once no hand-off holds them. A change to a key
/// this shard is handing to another waits while the hand-off holds it (at most the
/// pause), and is counted while it is made, so the hand-off knows when every change
/// admitted before the hold is in the log. Reads, and keys no move takes from this
/// shard, pass at once. Err: the hold outlasted the pause (etcd did not say whether
/// the move flipped); the change was not made.
pub async fn admit(shared: &Shared, keys: &[&[u8]]) -> Result<Option<Admitted>, String> {
    if !super::enabled(&shared.config) {
        return Ok(None);
    }
    let pause = Duration::from_millis(shared.config.move_pause_ms);
    let deadline = Instant::now() + pause + HOLD_MARGIN;
    loop {
        let Some(placement) = shared.cluster.placement() else {
            return Ok(None);
        };
        let Some(mine) = placement.mine else {
            return Ok(None);
        };
        let copying = |m: &&TableMoving| m.from == mine && m.state == MoveState::Copying;
        if !placement.moves().iter().any(|m| m.from == mine)
            && !placement.table_moves.iter().any(|m| copying(&m))
        {
            return Ok(None);
        }
        // A table's row holds for its table's move; a plain key for the ring's.
        let target = keys.iter().find_map(|k| match k.strip_prefix(b"@@") {
            Some(rest) => placement
                .row_table(rest)
                .and_then(|t| placement.table_moving(t))
                .filter(copying)
                .map(TableMoving::name),
            None => placement
                .moving(k)
                .filter(|m| m.from == mine && m.state == MoveState::Copying)
                .map(|m| placement.shards[m.to].clone()),
        });
        let Some(target) = target else {
            return Ok(None);
        };
        let hold = shared.cluster.moves.hold(&target);
        hold.inflight.fetch_add(1, Ordering::SeqCst);
        if !hold.held.load(Ordering::SeqCst) {
            return Ok(Some(Admitted(hold)));
        }
        hold.inflight.fetch_sub(1, Ordering::SeqCst);
        let released = hold.released.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        if !hold.held.load(Ordering::SeqCst) {
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || tokio::time::timeout(left, released).await.is_err() {
            return Err(format!(
                "the key is being handed over ({target}) and etcd has not said whether it was; try again"
            ));
        }
    }
}

/// The key under which this node's store keeps its position in `source`'s log.
fn position_key(source: &str) -> Key<'_> {
    Key::new(POSITION_SPACE, source.as_bytes())
}

/// Forgets this node's position in a source's log under `name`: a copy under that
/// name starts again from the beginning.
fn delete_position(shared: &Shared, name: &str) -> Result<(), String> {
    delete_key(shared, position_key(name))
}

/// The memcached keys this node's store holds that the move `(from, to)` (shard
/// indexes in `placement`) takes from one shard to the other. Blocks on the disk.
fn moving_keys(
    shared: &Shared,
    placement: &super::ring::Placement,
    (from, to): (usize, usize),
) -> Result<Vec<Vec<u8>>, String> {
    let mut keys = Vec::new();
    shared
        .store
        .scan_space(Space::MEMCACHED, |key, _| {
            if placement
                .moving(key)
                .is_some_and(|m| (m.from, m.to) == (from, to))
            {
                keys.push(key.to_vec());
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(keys)
}

/// Deletes the memcached key `key` through the log, if it is there.
fn delete(shared: &Shared, key: &[u8]) -> Result<(), String> {
    delete_key(shared, Key::memcached(key))
}

/// Deletes `key` through the log, if it is there.
fn delete_key(shared: &Shared, key: Key<'_>) -> Result<(), String> {
    shared
        .store
        .update(key, Access::NoAccess, |current, _| {
            let change = if current.is_some() {
                Change::Delete
            } else {
                Change::Keep
            };
            (change, ())
        })
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Starts the tasks this node runs for the ring's change, if it is its shard's
/// primary: a copy for each move to its shard still copying, a purge for each
/// flipped move from it. Each ends on its own once its part is done or the node is
/// no longer primary.
pub fn run_tasks(shared: &Arc<Shared>) {
    if shared.store.is_read_only() {
        return;
    }
    let Some(placement) = shared.cluster.placement() else {
        return;
    };
    let Some(mine) = placement.mine else {
        return;
    };
    let mut tasks = Vec::new();
    for m in placement.moves() {
        let (from, to) = (
            placement.shards[m.from].clone(),
            placement.shards[m.to].clone(),
        );
        if m.to == mine && m.state == MoveState::Copying {
            tasks.push((
                from.clone(),
                to.clone(),
                Task::Copy(target::Moved::Keys { from, to }),
            ));
        } else if m.from == mine && m.state == MoveState::Flipped {
            tasks.push((from, to, Task::Purge));
        }
    }
    for m in table_source::seal_as_placed(shared, &placement) {
        let from = placement.shards[m.from].clone();
        let task = match m.state {
            MoveState::Copying => Task::Describe(m.clone()),
            _ => Task::PurgeTable(m.clone()),
        };
        tasks.push((from, m.name(), task));
    }
    for m in placement.table_moves.iter() {
        if m.to == mine && m.state == MoveState::Copying && m.described.is_some() {
            let from = placement.shards[m.from].clone();
            tasks.push((from, m.name(), Task::Copy(target::Moved::Table(m.clone()))));
        }
    }
    for (from, to, task) in tasks {
        if !shared
            .cluster
            .moves
            .running
            .lock()
            .insert((from.clone(), to.clone()))
        {
            continue;
        }
        let s = Arc::clone(shared);
        let runtime = tokio::runtime::Handle::current();
        let name = format!("kura-move-{from}-{to}");
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            yield_to_clients();
            let ended = match &task {
                Task::Copy(moved) => target::copy(&s, &runtime, moved),
                Task::Purge => source::purge(&s, &runtime, &from, &to),
                Task::Describe(m) => table_source::describe(&s, &runtime, m),
                Task::PurgeTable(m) => table_source::purge(&s, &runtime, m),
            };
            if let Err(e) = ended {
                tracing::warn!("cluster: move {from} → {to}: {e}");
            }
            s.cluster.moves.running.lock().remove(&(from, to));
        });
        if let Err(e) = spawned {
            tracing::warn!("cluster: starting a move's thread: {e}");
        }
    }
}

/// Lowers this thread's scheduling priority (nice 10): a move's copy and purge read
/// and hash the source's whole log, and on a busy machine the clients' requests go
/// first; the copy takes what they leave. A hand-off's work is a few kilobytes of log,
/// done within the pause all the same.
#[allow(unsafe_code)]
fn yield_to_clients() {
    // SAFETY: gettid and setpriority take and return plain integers; setpriority on
    // this thread's own id changes nothing but its nice value.
    let done = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 10)
    };
    if done != 0 {
        tracing::debug!(
            "cluster: lowering a move's priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// A test knob's setting: how long, and how many times more.
type TestDelay = std::sync::OnceLock<Option<(Duration, AtomicU64)>>;

/// A delay for the tests of hand-offs that run long, from the environment variable
/// `var`, `<ms>x<n>`: the first `n` times each wait `ms` (the caller waits). Unset (as
/// anywhere but those tests), None. `KURA_TEST_HAND_OFF_DELAY` makes a target
/// acknowledge a hand-off late; `KURA_TEST_FLIP_DELAY` a source flip it late.
fn test_delay(var: &str, setting: &'static TestDelay) -> Option<Duration> {
    let (wait, left) = setting
        .get_or_init(|| {
            let text = std::env::var(var).ok()?;
            let (ms, n) = text.split_once('x')?;
            Some((
                Duration::from_millis(ms.parse().ok()?),
                AtomicU64::new(n.parse().ok()?),
            ))
        })
        .as_ref()?;
    left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .ok()?;
    tracing::info!("cluster: {var}: waiting {wait:?}");
    Some(*wait)
}

enum Task {
    /// As a move's target: the ring's keys, or a table.
    Copy(target::Moved),
    /// As a ring move's source, once flipped.
    Purge,
    /// As a table move's source: the table described, then (once flipped) dropped.
    Describe(super::ring::TableMoving),
    PurgeTable(super::ring::TableMoving),
}

/// Whether this node is still the primary of shard `shard` in the move
/// `from` → `to`, and the move still at `state`.
fn still(shared: &Shared, from: &str, to: &str, state: MoveState) -> bool {
    if shared.store.is_read_only() || shared.stopping.load(Ordering::Acquire) {
        return false;
    }
    let Some(p) = shared.cluster.placement() else {
        return false;
    };
    let (Some(f), Some(t)) = (p.shard_index(from), p.shard_index(to)) else {
        return false;
    };
    p.moves()
        .iter()
        .any(|m| m.from == f && m.to == t && m.state == state)
}

/// Marks the move `from` → `to` at least at `state` in this node's placement, ahead
/// of the next poll of etcd.
fn advance(shared: &Shared, from: &str, to: &str, state: MoveState) {
    if let Some(p) = shared.cluster.placement() {
        if let (Some(f), Some(t)) = (p.shard_index(from), p.shard_index(to)) {
            shared.cluster.set_placement(p.advanced(f, t, state));
        }
    }
}
