//! Changes that wait for replicas: `--min-sync-replicas N` for every change, and the
//! meta flag `Y<n>` for one request. A reply that asks for replicas leaves only once
//! this node has the change on its disk and `n` replicas have confirmed theirs hold it
//! (a replica confirms what its own log has synced, and its log is the primary's byte
//! for byte, so "holds LSN x" means it holds every record up to x).
//!
//! Two ways to fail, and what each leaves behind:
//! - fewer replicas connected than asked for: the request is refused before it runs,
//!   nothing changes ([`refusal`]);
//! - the replicas do not confirm within `--sync-timeout-ms`: the change is made and
//!   durable here, and may or may not reach them; the client gets [`TIMED_OUT_REPLY`]
//!   instead of its reply.
//!
//! Invariant: no reply that asked for `n` replicas is sent as a success unless `n`
//! replicas confirmed its LSN.

use std::time::Duration;

use kura_protocol::Request;
use kura_replication::confirmations::holds;

use crate::server::Shared;
use crate::stats::bump;

/// The reply that replaces one whose replicas did not confirm in time.
pub const TIMED_OUT_REPLY: &[u8] =
    b"SERVER_ERROR replicas did not confirm in time; the change is made here and may be lost if this server fails\r\n";

/// How durable a reply must be before it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    /// Replicas that must hold the change (this node's disk comes first in any case).
    pub replicas: u8,
    /// The client asked for no reply (text `noreply`): a refusal or a timeout is
    /// counted in `noreply_errors_dropped`, never sent, as memcached sends nothing for
    /// a failed `noreply` command (the client would read it as its next command's
    /// reply). Quiet meta and binary requests still get their errors.
    pub noreply: bool,
}

/// What `request` asks for beyond the durability mode: its meta `Y` flag, or
/// `--min-sync-replicas` if it changes anything. None: the mode's acknowledgement.
pub fn wanted(shared: &Shared, request: &Request<'_>) -> Option<Wanted> {
    let default = shared.config.min_sync_replicas;
    let flag = match request {
        Request::MetaGet(r)
        | Request::MetaSet { request: r, .. }
        | Request::MetaDelete(r)
        | Request::MetaArithmetic(r) => r.flags.durability,
        _ => None,
    };
    let changes = changes(request);
    let floor = if changes { default } else { 0 };
    let noreply = request.noreply();
    match flag {
        Some(n) => Some(Wanted {
            replicas: n.max(floor),
            noreply,
        }),
        None if floor > 0 => Some(Wanted {
            replicas: floor,
            noreply,
        }),
        None => None,
    }
}

/// Whether `request` is a change: a store, delete, counter, touch (`touch`, `gat`,
/// `mg T`), vivify (`mg N`) or flush. A replica refuses these before it looks at the
/// data.
pub fn changes(request: &Request<'_>) -> bool {
    match request {
        Request::Storage { .. }
        | Request::Delete { .. }
        | Request::Arithmetic { .. }
        | Request::Touch { .. }
        | Request::FlushAll { .. }
        | Request::MetaSet { .. }
        | Request::MetaDelete(_)
        | Request::MetaArithmetic(_) => true,
        Request::Retrieval { command, .. } => command.touches(),
        Request::MetaGet(r) => r.flags.ttl.is_some() || r.flags.vivify_ttl.is_some(),
        _ => false,
    }
}

/// What a change asks for when the request cannot say (the binary protocol):
/// `--min-sync-replicas`, if set.
pub fn wanted_by_default(shared: &Shared) -> Option<Wanted> {
    let replicas = shared.config.min_sync_replicas;
    (replicas > 0).then_some(Wanted {
        replicas,
        noreply: false,
    })
}

/// The reply that refuses a request wanting more replicas than are connected (empty
/// for a `noreply` request, whose refusal is counted instead), or None if it may run.
/// A replica's own refusal (read-only) comes from the store.
pub fn refusal(shared: &Shared, wanted: Wanted) -> Option<Vec<u8>> {
    let connected = shared.replication.confirmations.connected();
    if wanted.replicas == 0
        || connected >= usize::from(wanted.replicas)
        || shared.store.is_read_only()
    {
        return None;
    }
    shared
        .replication
        .sync_refusals
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if wanted.noreply {
        bump(&shared.counters.local().noreply_errors_dropped);
        return Some(Vec::new());
    }
    Some(
        format!(
            "SERVER_ERROR not enough replicas: {connected} connected, {} needed; nothing changed\r\n",
            wanted.replicas
        )
        .into_bytes(),
    )
}

/// A reply in a connection's output that waits for more than the mode's
/// acknowledgement: the bytes `start..end`, reporting LSN `lsn`.
#[derive(Debug, Clone, Copy)]
pub struct Wait {
    pub start: usize,
    pub end: usize,
    pub lsn: u64,
    pub wanted: Wanted,
    /// On a binary connection, the request the reply answers.
    pub reply_to: Option<kura_protocol::binary::ReplyTo>,
}

/// Holds the replies of `waits` (in output order) until what each asked for is done:
/// syncs this node's disk if the mode has not, then waits for the replicas. A reply
/// whose replicas did not confirm is replaced by [`TIMED_OUT_REPLY`]. Returns false if
/// the log failed (the replies are then replaced by `log_failed`, and the connection
/// should close).
pub async fn settle(shared: &Shared, out: &mut Vec<u8>, waits: &[Wait], log_failed: &[u8]) -> bool {
    let Some(highest) = waits.iter().map(|w| w.lsn).max() else {
        return true;
    };
    if shared.store.synced_lsn() < highest {
        let store = std::sync::Arc::clone(&shared.store);
        let synced = tokio::task::spawn_blocking(move || store.sync_through(highest)).await;
        if !matches!(synced, Ok(Ok(()))) {
            let synced_lsn = shared.store.synced_lsn();
            replace(out, waits, |w| w.lsn > synced_lsn, log_failed);
            return false;
        }
    }
    let asked: Vec<(u64, u8)> = waits
        .iter()
        .filter(|w| w.wanted.replicas > 0)
        .map(|w| (w.lsn, w.wanted.replicas))
        .collect();
    if asked.is_empty() {
        return true;
    }
    let timeout = Duration::from_millis(shared.config.sync_timeout_ms);
    let held = shared.replication.confirmations.wait(&asked, timeout).await;
    if !asked.iter().all(|&(lsn, n)| holds(&held, n, lsn)) {
        shared
            .replication
            .sync_timeouts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let unconfirmed = |w: &Wait| !holds(&held, w.wanted.replicas, w.lsn);
        for _ in waits.iter().filter(|w| w.wanted.noreply && unconfirmed(w)) {
            bump(&shared.counters.local().noreply_errors_dropped);
        }
        replace(
            out,
            waits,
            |w| !w.wanted.noreply && unconfirmed(w),
            TIMED_OUT_REPLY,
        );
    }
    true
}

/// [`settle`] for one change on a thread of its own (an SQL connection): syncs this
/// node's disk if the mode has not, then waits for `replicas` to hold `lsn`. Ok(false)
/// when they did not in time (counted in `sync_timeouts`).
pub fn settle_blocking(
    shared: &Shared,
    lsn: u64,
    replicas: u8,
) -> Result<bool, kura_engine::Error> {
    shared.store.sync_through(lsn)?;
    let timeout = Duration::from_millis(shared.config.sync_timeout_ms);
    let replication = &shared.replication;
    let held = replication
        .confirmations
        .wait_blocking(lsn, replicas, timeout);
    if !held {
        replication
            .sync_timeouts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(held)
}

/// Replaces the reply of every wait that `failed` picks with `message`.
fn replace(out: &mut Vec<u8>, waits: &[Wait], failed: impl Fn(&Wait) -> bool, message: &[u8]) {
    let mut rebuilt = Vec::with_capacity(out.len());
    let mut at = 0;
    for wait in waits.iter().filter(|w| failed(w)) {
        rebuilt.extend_from_slice(&out[at..wait.start]);
        crate::binary::failure(&mut rebuilt, wait.reply_to, message);
        at = wait.end;
    }
    rebuilt.extend_from_slice(&out[at..]);
    *out = rebuilt;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_replies_are_replaced_in_place() {
        let mut out = b"STORED\r\nEND\r\nSTORED\r\n".to_vec();
        let wanted = Wanted {
            replicas: 1,
            noreply: false,
        };
        let setq = kura_protocol::binary::ReplyTo {
            opcode: kura_protocol::binary::opcode::SETQ,
            opaque: 9,
        };
        let waits = [
            Wait {
                start: 0,
                end: 8,
                lsn: 5,
                wanted,
                reply_to: None,
            },
            Wait {
                start: 13,
                end: 21,
                lsn: 9,
                wanted,
                reply_to: None,
            },
            // A quiet binary set: no reply of its own, but its failure must be told.
            Wait {
                start: 21,
                end: 21,
                lsn: 12,
                wanted,
                reply_to: Some(setq),
            },
        ];
        replace(&mut out, &waits, |w| w.lsn > 5, b"SERVER_ERROR lost\r\n");
        let mut expected = b"STORED\r\nEND\r\nSERVER_ERROR lost\r\n".to_vec();
        kura_protocol::binary::error(
            &mut expected,
            setq,
            kura_protocol::binary::Status::Internal,
            Some(b"lost"),
        );
        assert_eq!(out, expected);
    }
}
