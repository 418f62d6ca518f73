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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_cluster::{MoveState, Observer};
use kura_replication::primary::Link;
use kura_replication::HandOffStep;

use super::{advance, still};
use crate::server::Shared;

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
    if !still(&shared, &me, &target, MoveState::Copying) {
        link.send_hand_off(HandOffStep::Released, 0, &target);
        return;
    }
    let hold = shared.cluster.moves.hold(&target);
    if hold.held.swap(true, Ordering::SeqCst) {
        // A hand-off of this move runs already.
        return;
    }
    let pause = Duration::from_millis(shared.config.move_pause_ms);
    let deadline = Instant::now() + pause;
    let give_up = |why: &str| {
        tracing::info!("cluster: hand-off to {target} given up: {why}");
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
    match flip(&shared, &me, &target).await {
        Some(MoveState::Flipped | MoveState::Purged) => {}
        Some(MoveState::Copying) => {
            return give_up("etcd did not flip it: this node's term is over")
        }
        None => return give_up("the move is gone from etcd (the ring change was abandoned)"),
    }
    advance(&shared, &me, &target, MoveState::Flipped);
    shared.cluster.moves.flips.fetch_add(1, Ordering::Relaxed);
    tracing::info!("cluster: keys moving to {target} flipped at LSN {held}");
    link.send_hand_off(HandOffStep::Flipped, held, &target);
    let left = deadline.saturating_duration_since(Instant::now());
    let _ =
        tokio::time::timeout(left.max(Duration::from_millis(100)), hold.owning.notified()).await;
    // The held changes go on to the new owner.
    hold.release();
}

/// Flips the move in etcd under this node's term; asks until etcd says what the
/// move's state is after it (None: the move is gone).
async fn flip(shared: &Shared, me: &str, target: &str) -> Option<MoveState> {
    let fence = shared.replication.shard.seen().term_key;
    let config = &shared.config;
    let cluster = config.cluster.clone().unwrap_or_default();
    loop {
        let asked = tokio::time::timeout(ETCD_WITHIN, async {
            let mut observer = Observer::connect(&config.etcd, &cluster).await?;
            observer.flip(me, target, fence.as_deref()).await
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
