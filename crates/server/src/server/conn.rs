//! A connection's state between batches: the replies it has not sent yet, what each
//! waits for (the log's acknowledgement, replicas), and `flush`, which sends them once
//! they may leave.

use std::net::SocketAddr;
use std::sync::Arc;

use kura_engine::Ack;
use kura_protocol::binary::ReplyTo;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::Shared;
use crate::dispatch::Flow;
use crate::stats::{add, bump};
use crate::sync_replies as sync;

/// Per-connection state that outlives one batch.
pub(crate) struct Conn {
    pub(crate) out: Vec<u8>,
    /// Replies in `out` that report changes not yet acknowledged.
    marks: Vec<Mark>,
    /// Replies in `out` that wait for more than the mode's acknowledgement: a meta `Y`
    /// flag or `--min-sync-replicas`.
    pub(crate) waits: Vec<crate::sync_replies::Wait>,
    /// Bytes still to discard from the stream (the data block of a refused store).
    pub(crate) swallow_bytes: usize,
    /// How much of `out` memcached would have written already: on a binary
    /// connection, through the last reply that flushes its pipeline (an error status,
    /// or NOOP). A request that closes the connection at once leaves these.
    pub(crate) pushed: usize,
    /// What the connection chose with `get @@<container>`.
    pub(super) session: crate::tables::Session,
    /// Which protocol the connection speaks, once its first byte has arrived.
    pub(super) dialect: Dialect,
    /// Whether it may run requests: logged in, or no users file.
    pub(crate) authenticated: bool,
    /// Who logged in (none without a users file).
    pub(crate) user: Option<crate::auth::User>,
    /// Logins refused on this connection.
    pub(crate) failed_logins: u32,
    pub(crate) peer: SocketAddr,
    /// In a cluster, text requests queued for other nodes, whose replies come before
    /// any written after them.
    pub(super) forwards: crate::cluster::Queue,
}

/// A reply in a connection's output that reports a change not yet acknowledged.
struct Mark {
    /// Where the reply starts in `Conn::out`.
    start: usize,
    lsn: u64,
    /// On a binary connection, the request it answers (a failure reply names it).
    reply_to: Option<ReplyTo>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    Undecided,
    /// Text and meta commands.
    Text,
    /// memcached's binary protocol: the first byte was its request magic.
    Binary,
}

impl Conn {
    /// A connection from `peer`, logged in already if `authenticated` (no users file).
    pub(super) fn new(authenticated: bool, peer: SocketAddr) -> Conn {
        Conn {
            out: Vec::with_capacity(16 * 1024),
            marks: Vec::new(),
            waits: Vec::new(),
            swallow_bytes: 0,
            pushed: 0,
            session: crate::tables::Session::default(),
            dialect: Dialect::Undecided,
            authenticated,
            user: None,
            failed_logins: 0,
            peer,
            forwards: crate::cluster::Queue::default(),
        }
    }

    /// Holds the reply `start..` (to the end of the output) of a change at `lsn`: until
    /// the log acknowledges it, and until what `wanted` asks for beyond that.
    pub(crate) fn hold(
        &mut self,
        start: usize,
        lsn: u64,
        wanted: Option<sync::Wanted>,
        reply_to: Option<ReplyTo>,
        shared: &Shared,
    ) {
        self.mark(start, lsn, reply_to, shared);
        if let Some(wanted) = wanted {
            self.waits.push(sync::Wait {
                start,
                end: self.out.len(),
                lsn,
                wanted,
                reply_to,
            });
        }
    }

    /// Notes that the reply starting at `start` may leave only once `lsn` is
    /// acknowledged (nothing to note if it already is).
    pub(crate) fn mark(
        &mut self,
        start: usize,
        lsn: u64,
        reply_to: Option<ReplyTo>,
        shared: &Shared,
    ) {
        if lsn > shared.store.acked_lsn() {
            self.marks.push(Mark {
                start,
                lsn,
                reply_to,
            });
        }
    }

    /// Records a login's outcome; a failed one logs the connection out, as a failed
    /// SASL exchange does in memcached. The flow closes the connection after too many
    /// failures.
    pub(crate) fn logged_in(&mut self, user: Option<crate::auth::User>) -> Flow {
        self.authenticated = user.is_some();
        if let Some(user) = user {
            self.user = Some(user);
            return Flow::Continue;
        }
        self.user = None;
        self.failed_logins += 1;
        if self.failed_logins >= crate::auth::FAILED_LOGINS_MAX {
            tracing::warn!(
                "closing the connection from {} after {} failed logins",
                self.peer,
                self.failed_logins
            );
            Flow::Close
        } else {
            Flow::Continue
        }
    }

    /// Waits for the replies of the requests passed on to other nodes and puts each
    /// where it belongs among this node's own (the marks and waits of those behind
    /// it move with them).
    pub(super) async fn settle_forwards(&mut self, shared: &Arc<Shared>) {
        if !self.forwards.pending() {
            return;
        }
        let inserts = self.forwards.settle(shared).await;
        if inserts.is_empty() {
            return;
        }
        let before = insert(&mut self.out, &inserts);
        for mark in &mut self.marks {
            mark.start += before(mark.start);
        }
        for wait in &mut self.waits {
            let shift = before(wait.start);
            wait.start += shift;
            wait.end += shift;
        }
    }

    /// Forgets the replies not yet sent, as a connection closed at once does.
    pub(crate) fn drop_unsent(&mut self) {
        self.forwards.mute();
        self.out.clear();
        self.marks.clear();
        self.waits.clear();
        self.pushed = 0;
    }

    /// Forgets the replies after `pushed`, which memcached would not have written
    /// before a request that closes the connection at once.
    pub(crate) fn drop_unpushed(&mut self) {
        let kept = self.pushed;
        self.out.truncate(kept);
        self.marks.retain(|m| m.start < kept);
        self.waits.retain(|w| w.end <= kept);
    }
}

/// What one request did to the connection's input.
pub(crate) enum Step {
    /// The input holds no complete request yet.
    Incomplete,
    /// A request ran (or was refused): drop `consumed` bytes; `flow` says what next.
    Ran { consumed: usize, flow: Flow },
}

const LOG_FAILED_REPLY: &[u8] = b"SERVER_ERROR log write failed; change not stored\r\n";

/// Puts each of `inserts` (a place in `out` as it is, and bytes; in order of place)
/// into `out`. Returns what the insertions add before a reply that started at a given
/// place: a reply starting where bytes go in came after them.
fn insert(out: &mut Vec<u8>, inserts: &[(usize, Vec<u8>)]) -> impl Fn(usize) -> usize {
    let added: usize = inserts.iter().map(|(_, r)| r.len()).sum();
    let mut spliced = Vec::with_capacity(out.len() + added);
    let mut from = 0;
    let mut shifts = Vec::with_capacity(inserts.len());
    let mut shift = 0;
    for (at, bytes) in inserts {
        // Places only grow and lie within the output; kept so if it ever shrank.
        let at = (*at).clamp(from, out.len());
        spliced.extend_from_slice(&out[from..at]);
        spliced.extend_from_slice(bytes);
        from = at;
        shift += bytes.len();
        shifts.push((at, shift));
    }
    spliced.extend_from_slice(&out[from..]);
    *out = spliced;
    move |p| {
        shifts
            .iter()
            .take_while(|(at, _)| *at <= p)
            .last()
            .map_or(0, |&(_, s)| s)
    }
}

/// Waits until every reply in `conn.out` may be sent, then sends them. If the log has
/// failed, sends only the replies whose changes were acknowledged, then an error, and
/// returns false so the connection closes: no client is told a lost write was stored.
pub(super) async fn flush<S: AsyncWrite + Unpin>(
    stream: &mut S,
    conn: &mut Conn,
    shared: &Shared,
) -> bool {
    // A quiet change that waits for replicas has no reply yet, but may get an error:
    // it goes out when the wait ends, not with the client's next request.
    if conn.out.is_empty() && conn.waits.is_empty() {
        return true;
    }
    let need = conn.marks.iter().map(|m| m.lsn).max().unwrap_or(0);
    let mut healthy = true;
    if need > shared.store.acked_lsn() {
        // Let the other connections this worker has ready run first and append their
        // records: then one write(2) acknowledges them all (group commit within a
        // worker's turn), instead of one write per connection.
        tokio::task::yield_now().await;
    }
    if need > shared.store.acked_lsn() {
        // Interval mode: the write(2) that acknowledges these replies happens here, on
        // this thread; a failure poisons the store and shows up as Ack::Failed below.
        let _ = shared.store.write_now();
    }
    if need > shared.store.acked_lsn() {
        bump(&shared.counters.local().log_wait_batches);
        if shared.acks.wait(need).await == Ack::Failed {
            let acked = shared.store.acked_lsn();
            let first_lost = conn.marks.iter().find(|m| m.lsn > acked);
            let cut = first_lost.map_or(conn.out.len(), |m| m.start);
            let reply_to = first_lost.and_then(|m| m.reply_to);
            conn.out.truncate(cut);
            crate::binary::failure(&mut conn.out, reply_to, LOG_FAILED_REPLY);
            healthy = false;
            conn.waits.retain(|w| w.end <= cut);
        }
    }
    conn.marks.clear();
    if !conn.waits.is_empty() {
        healthy &= sync::settle(shared, &mut conn.out, &conn.waits, LOG_FAILED_REPLY).await;
        conn.waits.clear();
    }
    // A TLS stream holds what it encrypted until flushed; a socket's flush does nothing.
    let written = stream.write_all(&conn.out).await.is_ok() && stream.flush().await.is_ok();
    add(
        &shared.counters.local().bytes_written,
        conn.out.len() as u64,
    );
    conn.out.clear();
    conn.pushed = 0;
    if conn.out.capacity() > 1 << 20 {
        conn.out = Vec::with_capacity(16 * 1024);
    }
    written && healthy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_passed_on_go_in_at_their_places_and_the_rest_move_behind_them() {
        // Own replies A, B, C; forwarded ones F1 (asked before B), F2 and F3 (before
        // C), F4 (after C).
        let mut out = b"A.B..C...".to_vec();
        let inserts = vec![
            (2, b"f1".to_vec()),
            (5, b"f2".to_vec()),
            (5, b"f3-".to_vec()),
            (9, b"f4".to_vec()),
        ];
        let before = insert(&mut out, &inserts);
        assert_eq!(out, b"A.f1B..f2f3-C...f4".to_vec());
        assert_eq!(before(0), 0, "A");
        assert_eq!(before(2), 2, "B starts after f1");
        assert_eq!(before(5), 7, "C after f1, f2, f3");
        assert_eq!(before(9), 9, "an empty reply at the end, after all");
        let mut empty = Vec::new();
        let before = insert(&mut empty, &[(0, b"x".to_vec())]);
        assert_eq!(empty, b"x".to_vec());
        assert_eq!(before(0), 1);
    }
}
