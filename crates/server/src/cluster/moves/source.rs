//! A move's source: the hand-off its target asks for, and the purge after the flip.
//!
//! The hand-off, on S's primary, when T asks on its `move` stream:
//! 1. Changes to the moving keys are held (`super::admit` makes them wait), and the
//!    ones already admitted are waited for, so S's log holds every change to the
//!    keys up to its end, `held`, which S sends T.
//! 2. T applies S's log up to `held`, syncs, and acknowledges it.
//! 3. S flips the move in etcd: one transaction, made only while the move is
//!    `copying` and S's term lasts. S then places the keys with T, tells T, waits
//!    (within the pause) for T to say it owns them, and lets the held changes go:
//!    each goes on to T.
//!
//! If T's acknowledgement does not come within `--move-pause-ms`, or etcd says the
//! flip was not made (the move is gone, or S's term ended), the hold ends and the
//! held changes are made here: nothing changed. If etcd does not answer, S cannot
//! know whether the flip was made, so it holds on and asks again: a held change
//! waits at most the pause and a margin, then gets `SERVER_ERROR` and is not made.
//!
//! A table's move (its name `@@<table>` on the stream) is handed off the same way;
//! its writes are held by the table's seal (`kura_tables::seal`) besides, which
//! every row write passes (SQL's as well as memcached's): `Held` from the hold on,
//! `Gone` from the flip on, back to `Moving` if the hand-off is given up.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_cluster::{MoveState, Observer};
use kura_replication::primary::Link;
use kura_replication::HandOffStep;
use kura_tables::Seal;

use super::{advance, still};
use crate::server::Shared;

/// What a hand-off gives: the ring's keys between this shard and a target (named),
/// or a table (`@@<table>` on the stream) in its move begun at `id`.
enum Handing {
    Keys(String),
    Table { table: String, id: i64 },
}

/// `KURA_TEST_FLIP_DELAY`'s setting, read once (`super::test_delay`).
static FLIP_DELAY: super::TestDelay = std::sync::OnceLock::new();

/// How long one etcd request of a hand-off may take before it is asked again.
const ETCD_WITHIN: Duration = Duration::from_secs(2);

/// A step of a move's hand-off from its target on the stream `link`: an ask starts
/// the hand-off; the target's word that it owns the keys ends it.
pub fn hand_off(shared: Arc<Shared>, link: Arc<Link>, step: HandOffStep, shard: &str) {
    let target = shard.to_string();
    match step {
        HandOffStep::Ask => {
            tokio::spawn(run(shared, link, target));
        }
        HandOffStep::Owning => shared.cluster.moves.hold(&target).owning.notify_one(),
        _ => {}
    }
}

async fn run(shared: Arc<Shared>, link: Arc<Link>, target: String) {
    let me = shared.config.shard.clone().unwrap_or_default();
    let handing = match target.strip_prefix("@@") {
        None if still(&shared, &me, &target, MoveState::Copying) => {
            Some(Handing::Keys(target.clone()))
        }
        None => None,
        Some(table) => super::table_source::handing(&shared, table).map(|id| Handing::Table {
            table: table.to_string(),
            id,
        }),
    };
    let Some(handing) = handing else {
        link.send_hand_off(HandOffStep::Released, 0, &target);
        return;
    };
    let hold = shared.cluster.moves.hold(&target);
    if hold.held.swap(true, Ordering::SeqCst) {
        // A hand-off of this move runs already.
        return;
    }
    let pause = Duration::from_millis(shared.config.move_pause_ms);
    let deadline = Instant::now() + pause;
    let sealing = |seal: Seal| {
        let (shared, handing) = (Arc::clone(&shared), &handing);
        let table = match handing {
            Handing::Table { table, .. } => Some(table.clone()),
            Handing::Keys(_) => None,
        };
        async move {
            let Some(table) = table else { return Ok(()) };
            tokio::task::spawn_blocking(move || shared.tables.seal(&table, seal).map(|_| ()))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())
        }
    };
    let give_up = |why: &str| {
        tracing::info!("cluster: hand-off to {target} given up: {why}");
        if let Handing::Table { table, .. } = &handing {
            // Its writes go on here. No write is in progress under the held seal,
            // so the gate is free at once.
            if let Err(e) = shared.tables.seal(table, Seal::Moving) {
                tracing::warn!("cluster: table {table}: {e}");
            }
        }
        shared
            .cluster
            .moves
            .releases
            .fetch_add(1, Ordering::Relaxed);
        hold.release();
        link.send_hand_off(HandOffStep::Released, 0, &target);
    };
    // Every change admitted before the hold is made (in the log) once none is
    // counted.
    while hold.inflight.load(Ordering::SeqCst) > 0 {
        if Instant::now() >= deadline {
            return give_up("changes admitted before the hold did not finish");
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    // A table's writes from SQL (and from a connection's default container) pass no
    // hold: its seal stops them, once those in progress are made.
    if let Err(e) = sealing(Seal::Held).await {
        return give_up(&format!("holding the table's writes: {e}"));
    }
    let held = shared.store.appended_lsn();
    tracing::info!("cluster: holding changes to the keys moving to {target} at LSN {held}");
    link.send_hand_off(HandOffStep::Held, held, &target);
    loop {
        let acked = link.acked.notified();
        tokio::pin!(acked);
        acked.as_mut().enable();
        if link.acked_lsn.load(Ordering::Acquire) >= held {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || tokio::time::timeout(left, acked).await.is_err() {
            return give_up("the target did not confirm the log's end within --move-pause-ms");
        }
    }
    if let Some(wait) = super::test_delay("KURA_TEST_FLIP_DELAY", &FLIP_DELAY) {
        tokio::time::sleep(wait).await;
    }
    match flip(&shared, &me, &handing).await {
        Some(MoveState::Flipped | MoveState::Purged) => {}
        Some(MoveState::Copying) => {
            return give_up("etcd did not flip it: this node's term is over")
        }
        None => return give_up("the move is gone from etcd (abandoned)"),
    }
    match &handing {
        Handing::Keys(_) => advance(&shared, &me, &target, MoveState::Flipped),
        Handing::Table { table, id } => {
            super::table_source::advance(&shared, table, *id, MoveState::Flipped)
        }
    }
    shared.cluster.moves.flips.fetch_add(1, Ordering::Relaxed);
    tracing::info!("cluster: keys moving to {target} flipped at LSN {held}");
    link.send_hand_off(HandOffStep::Flipped, held, &target);
    let left = deadline.saturating_duration_since(Instant::now());
    let _ =
        tokio::time::timeout(left.max(Duration::from_millis(100)), hold.owning.notified()).await;
    // The held changes go on to the new owner: statements refused by the table's
    // seal are made again once it is no longer `Held`, so it turns `Gone` only now,
    // when the target serves the table.
    if let Handing::Table { table, .. } = &handing {
        if let Err(e) = sealing(Seal::Gone).await {
            tracing::warn!("cluster: sealing table {table} after its flip: {e}");
        }
    }
    hold.release();
}

/// Flips the move in etcd under this node's term; asks until etcd says what the
/// move's state is after it (None: the move is gone).
async fn flip(shared: &Shared, me: &str, handing: &Handing) -> Option<MoveState> {
    let target = match handing {
        Handing::Keys(target) => target.as_str(),
        Handing::Table { table, .. } => table.as_str(),
    };
    let fence = shared.replication.shard.seen().term_key;
    let config = &shared.config;
    let cluster = config.cluster.clone().unwrap_or_default();
    loop {
        let asked = tokio::time::timeout(ETCD_WITHIN, async {
            let mut observer = Observer::connect(&config.etcd, &cluster).await?;
            match handing {
                Handing::Keys(target) => observer.flip(me, target, fence.as_deref()).await,
                Handing::Table { table, id } => {
                    observer.flip_table(table, *id, fence.as_deref()).await
                }
            }
        })
        .await;
        match asked {
            Ok(Ok(state)) => return state,
            Ok(Err(e)) => {
                tracing::warn!("cluster: flipping the move to {target}: {e}; asking again")
            }
            Err(_) => tracing::warn!(
                "cluster: flipping the move to {target}: etcd did not answer; asking again"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Deletes moved keys a batch at a time, so their deletes reach the log (and the
/// replicas) at a bounded rate.
const PURGE_BATCH: usize = 512;
/// The most keys a purge deletes a second.
const PURGE_PER_SEC: u64 = 20_000;

/// The purge of a flipped move, on the source's primary: deletes, through its log,
/// every key it holds that the move gave the target, then records the move purged.
pub fn purge(
    shared: &Arc<Shared>,
    runtime: &tokio::runtime::Handle,
    from: &str,
    to: &str,
) -> Result<(), String> {
    let placement = shared.cluster.placement().ok_or("no ring")?;
    let (f, t) = (
        placement.shard_index(from).ok_or("no such shard")?,
        placement.shard_index(to).ok_or("no such shard")?,
    );
    let keys = super::moving_keys(shared, &placement, (f, t))?;
    let started = Instant::now();
    let mut deleted = 0u64;
    for batch in keys.chunks(PURGE_BATCH) {
        if !still(shared, from, to, MoveState::Flipped) {
            return Ok(());
        }
        for key in batch {
            super::delete(shared, key)?;
        }
        deleted += batch.len() as u64;
        shared
            .cluster
            .moves
            .purged
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let due = Duration::from_secs_f64(deleted as f64 / PURGE_PER_SEC as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    shared
        .store
        .sync_through(shared.store.appended_lsn())
        .map_err(|e| e.to_string())?;
    let config = &shared.config;
    let cluster = config.cluster.clone().unwrap_or_default();
    let recorded = runtime.block_on(async {
        let mut observer = Observer::connect(&config.etcd, &cluster).await?;
        observer.set_purged(from, to).await
    });
    match recorded {
        Ok(_) => {
            tracing::info!("cluster: purged {deleted} keys moved to {to}");
            super::advance(shared, from, to, MoveState::Purged);
            Ok(())
        }
        Err(e) => Err(format!("recording the purge: {e}")),
    }
}
