//! Any node serves any client: in cluster mode a replica forwards the changes it is
//! sent (and its reads, unless `--replica-reads local`) to its shard's primary, and
//! answers with the primary's reply, so a client configured with any node's address
//! keeps working across failovers.
//!
//! The request goes as the client sent it (`Request::write_to`), followed by `mn`
//! (the meta no-op): the reply is everything up to the `MN` that answers it, which
//! frames any command's reply, none for `noreply` and `q` included, without knowing
//! each command's. Values in the reply (`VALUE ... <bytes>`, `VA <bytes> ...`) are
//! skipped by their length, so a value that holds `MN` does not end it early.
//!
//! Connections to the primary are pooled (logged in and over TLS as replication
//! connects); one is used by one request at a time and returned after a whole reply.
//! A connection that fails is dropped. A change whose reply does not come whole may
//! or may not have been made: the client gets `SERVER_ERROR`, never a false `STORED`.
//! A text request's exchange runs on the worker's own runtime, over connections that
//! worker keeps (a connection belongs to the runtime that opened it): the connection
//! awaits it while the worker's other connections go on, and no thread hand-off adds
//! to the hop (`kura-bench cluster` measures what a forwarded request costs).
//!
//! The binary protocol's requests go the same way over connections of their own,
//! each packet followed by a `NOOP` whose response ends the reply, on the runtime's
//! blocking threads (`spawn_blocking`); a connection to a primary with users logs in
//! with SASL PLAIN and `--replication-login`'s user.
//!
//! What it is not for: the SQL port, which a replica answers itself (changes
//! refused, naming the primary).

use std::cell::RefCell;
use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use kura_replication::socket::{connect_stream, log_in_stream, Stream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use kura_protocol::Request;
use parking_lot::Mutex;

use super::ring::{Owner, Placement};
use crate::replication::Socket;
use crate::server::Shared;

/// How long a connection to the primary may take to open.
const CONNECT_WITHIN: Duration = Duration::from_secs(2);
/// Idle connections kept per node.
const POOL: usize = 8;
/// The largest reply taken through (a get of many large values).
const REPLY_MAX: usize = 256 << 20;

/// A request on its way to the primary: the primary's address and the bytes that go,
/// or why it cannot go.
pub enum Forwarding {
    To {
        primary: String,
        bytes: Vec<u8>,
    },
    Refused(String),
    /// A multi-key get whose keys live on several shards (`super::split`).
    Split(Arc<Placement>),
}

/// Where a request whose keys are `keys` goes by the ring: on to the primary of the
/// shard that owns them all, split between shards, or None (this node's shard owns
/// them, or there is no ring: the request is this shard's). A table's row
/// (`@@container.key`) is the shard's that holds the table; any key on a connection
/// with a default container stays on this node's shard.
fn by_owner(
    shared: &Shared,
    in_container: bool,
    keys: &[&[u8]],
    bytes: impl FnOnce() -> Vec<u8>,
) -> Option<Forwarding> {
    if keys.is_empty() || in_container {
        return None;
    }
    let Some(placement) = shared.cluster.placement() else {
        // Until the node has read etcd it cannot know whether a ring places this
        // key on another shard: serving it here could put it where no one looks.
        if super::enabled(&shared.config) && !shared.cluster.has_read_ring() {
            return Some(Forwarding::Refused(
                "this node has not read the cluster's ring from etcd yet, try again".into(),
            ));
        }
        return None;
    };
    let forwarding = match placement.owner_of(keys.iter().copied()) {
        Owner::Here => return None,
        Owner::Split => Forwarding::Split(placement),
        Owner::Shard(n) => match placement.primary(n) {
            Ok(primary) => Forwarding::To {
                primary,
                bytes: bytes(),
            },
            Err(why) => Forwarding::Refused(why),
        },
    };
    shared
        .cluster
        .owner_forwarded
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some(forwarding)
}

/// Whether a request goes to the primary: in cluster mode, on a node that is not its
/// shard's primary, a `change`, or a `read` while reads go to the primary
/// (`--replica-reads primary`, the default). None: it runs here.
fn forwarding(
    shared: &Shared,
    change: bool,
    read: bool,
    bytes: impl FnOnce() -> Vec<u8>,
) -> Option<Forwarding> {
    if !super::enabled(&shared.config) || !shared.store.is_read_only() {
        return None;
    }
    let reads_here = shared.config.replica_reads == crate::config::ReplicaReads::Local;
    if !(change || (read && !reads_here)) {
        return None;
    }
    Some(match shared.replication.primary() {
        Some(primary) => Forwarding::To {
            primary,
            bytes: bytes(),
        },
        None => Forwarding::Refused(super::NO_PRIMARY.to_string()),
    })
}

/// Whether the text or meta `request` goes on: to the shard that owns its keys
/// ([`by_owner`]), else to this shard's primary ([`forwarding`]). What goes is the
/// request as the client sent it, then `mn`. `in_container`: the connection has a
/// default container, so its keys are a table's.
pub fn forwarded(shared: &Shared, in_container: bool, request: &Request<'_>) -> Option<Forwarding> {
    let bytes = || {
        let mut bytes = Vec::new();
        request.write_to(&mut bytes);
        bytes.extend_from_slice(b"mn\r\n");
        bytes
    };
    let mut keys = Vec::new();
    crate::reader::keys_of(request, |k| keys.push(k));
    if let Some(forwarding) = by_owner(shared, in_container, &keys, bytes) {
        // Only a multi-key get is split; any other request has one key.
        return match (forwarding, request) {
            (Forwarding::Split(p), Request::Retrieval { .. }) => Some(Forwarding::Split(p)),
            (Forwarding::Split(_), _) => None,
            (other, _) => Some(other),
        };
    }
    let change = crate::sync_replies::changes(request);
    let read = matches!(request, Request::Retrieval { .. } | Request::MetaGet(_));
    forwarding(shared, change, read, bytes)
}

/// The binary protocol's side of [`forwarded`], for the request packet `packet`: the
/// packet, then a `NOOP`.
pub fn forwarded_binary(
    shared: &Shared,
    packet: &[u8],
    key: Option<&[u8]>,
    change: bool,
    read: bool,
) -> Option<Forwarding> {
    let bytes = || {
        let mut bytes = packet.to_vec();
        bytes.extend_from_slice(&binary_request(NOOP, NOOP_OPAQUE, b"", b""));
        bytes
    };
    if let Some(key) = key {
        if let Some(forwarding) = by_owner(shared, false, &[key], bytes) {
            return Some(forwarding);
        }
    }
    forwarding(shared, change, read, bytes)
}

/// Sends a text request on to the primary and appends its reply (or why none came
/// whole, as `SERVER_ERROR`) to `out`. The exchange runs on the worker's runtime:
/// its other connections go on meanwhile.
pub async fn forward(shared: &Arc<Shared>, forwarding: Forwarding, out: &mut Vec<u8>) {
    // Awaited in place: the connection's own task waits, no other task between.
    match exchange_text(shared, forwarding).await {
        Ok(reply) => out.extend_from_slice(&reply),
        Err(why) => out.extend_from_slice(format!("SERVER_ERROR {why}\r\n").as_bytes()),
    }
}

/// The binary side of [`forward`]: the primary's response packets, or why none came
/// whole.
pub async fn forward_binary(
    shared: &Arc<Shared>,
    forwarding: Forwarding,
) -> Result<Vec<u8>, String> {
    exchange(shared, forwarding, true).await
}

async fn exchange(
    shared: &Arc<Shared>,
    forwarding: Forwarding,
    binary: bool,
) -> Result<Vec<u8>, String> {
    start_exchange(shared, forwarding, binary)
        .await
        .unwrap_or_else(|e| Err(format!("forwarding to the primary failed: {e}; try again")))
}

/// Starts the exchange at once, as a task of its own; the handle gives the reply (or
/// why none came whole). A text request goes over this worker's own connections on
/// its runtime; a binary one on the runtime's blocking threads.
pub(super) fn start_exchange(
    shared: &Arc<Shared>,
    forwarding: Forwarding,
    binary: bool,
) -> tokio::task::JoinHandle<Result<Vec<u8>, String>> {
    let s = Arc::clone(shared);
    if !binary {
        return tokio::spawn(async move { exchange_text(&s, forwarding).await });
    }
    tokio::task::spawn_blocking(move || {
        let (primary, bytes) = match forwarding {
            Forwarding::To { primary, bytes } => (primary, bytes),
            Forwarding::Refused(why) => return Err(why),
            Forwarding::Split(_) => return Err("a split get goes through split_get".into()),
        };
        s.forwarder
            .exchange_binary(&s, &primary, &bytes)
            .map_err(|e| format!("forwarding to the primary {primary} failed: {e}; try again"))
    })
}

thread_local! {
    /// This thread's idle connections to other nodes for text requests, by address:
    /// each worker's runtime keeps its own, as a connection belongs to the runtime
    /// that opened it.
    static IDLE_TEXT: RefCell<Vec<(String, Stream)>> = const { RefCell::new(Vec::new()) };
}

/// Sends a text request (and `mn`) to its node over this thread's connections and
/// reads the reply up to the `MN`, on the runtime: no thread hand-off on the way.
async fn exchange_text(shared: &Shared, forwarding: Forwarding) -> Result<Vec<u8>, String> {
    let (primary, bytes) = match forwarding {
        Forwarding::To { primary, bytes } => (primary, bytes),
        Forwarding::Refused(why) => return Err(why),
        Forwarding::Split(_) => return Err("a split get goes through split_get".into()),
    };
    let mut replies = exchange_run(shared, &primary, &[bytes]).await?;
    replies
        .pop()
        .ok_or_else(|| format!("forwarding to the primary {primary} failed: no reply"))
}

/// Sends `requests` (each a text request and `mn`) to `primary` at once, in order,
/// over one of this thread's connections, and reads their replies, each up to its
/// `MN`: a run of requests for one node costs one hop.
async fn exchange_run(
    shared: &Shared,
    primary: &str,
    requests: &[Vec<u8>],
) -> Result<Vec<Vec<u8>>, String> {
    let failed = |e: String| format!("forwarding to the primary {primary} failed: {e}; try again");
    let idle = IDLE_TEXT.with(|idle| {
        let mut idle = idle.borrow_mut();
        let at = idle.iter().rposition(|(to, _)| to == primary)?;
        Some(idle.remove(at).1)
    });
    let mut stream = match idle {
        Some(stream) => stream,
        None => {
            let replication = &shared.replication;
            let mut stream = connect_stream(primary, replication.tls(), CONNECT_WITHIN)
                .await
                .map_err(|e| failed(e.to_string()))?;
            log_in_stream(&mut stream, replication.login())
                .await
                .map_err(|e| failed(e.to_string()))?;
            stream
        }
    };
    // A reply may wait for the primary's replicas (`--sync-timeout-ms`), then it
    // comes; a primary silent for longer is cut off or gone.
    let limit = Duration::from_millis(shared.config.sync_timeout_ms) + Duration::from_secs(1);
    let exchange = async {
        stream
            .write_all(&requests.concat())
            .await
            .map_err(|e| e.to_string())?;
        let mut reply = Reply::default();
        let mut replies = Vec::with_capacity(requests.len());
        let mut chunk = [0u8; 16 << 10];
        while replies.len() < requests.len() {
            if let Some(whole) = reply.take(text_frame)? {
                replies.push(whole);
                continue;
            }
            let n = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the primary closed the connection".to_string());
            }
            reply.buf.extend_from_slice(&chunk[..n]);
        }
        reply.ended()?;
        Ok(replies)
    };
    let replies = match tokio::time::timeout(limit, exchange).await {
        Ok(Ok(replies)) => replies,
        Ok(Err(e)) => return Err(failed(e)),
        Err(_) => return Err(failed("no reply in time".to_string())),
    };
    IDLE_TEXT.with(|idle| keep(&mut idle.borrow_mut(), primary, stream));
    Ok(replies)
}

/// The most text requests, and bytes of them, a connection queues before it sends
/// them.
const QUEUED_MAX: usize = 64;
const QUEUED_BYTES_MAX: usize = 1 << 20;

/// A connection's text requests for other nodes. A node answers a connection's
/// requests in order, but one request passed on must not hold every one behind it for
/// its hop (nutcracker sends all of a server's traffic over one connection): each is
/// queued with the place in the connection's output its reply goes to, and sent, with
/// the others queued for its node, as soon as the connection has a request of its own
/// to run ([`Queue::launch`]): the hop then runs while this node answers its own. At
/// most one run of requests is in flight to a node at a time, over one connection, so
/// a key's requests keep their order; the nodes go side by side. Before the output
/// leaves, [`Queue::settle`] waits for every reply, and they go in at their places.
#[derive(Default)]
pub struct Queue {
    queued: Vec<Queued>,
    bytes: usize,
    flying: Vec<Flying>,
    /// Replies in hand: each with its place in the output and its order among those
    /// of the same place.
    done: Vec<(usize, u64, Vec<u8>)>,
    seq: u64,
    /// The replies of requests up to this one are not to be written (the output
    /// they would go into was dropped); the requests still go.
    muted: u64,
}

struct Queued {
    primary: String,
    bytes: Vec<u8>,
    noreply: bool,
    /// Where in the connection's output its reply goes, and its order there.
    at: usize,
    seq: u64,
}

/// What a run's task comes to: each request's reply, or why none came.
type RunReplies = Result<Vec<Vec<u8>>, String>;

/// A run of requests sent to one node, its replies to come.
struct Flying {
    primary: String,
    /// Each request's place in the output, its order there, and whether it asked for
    /// no reply.
    requests: Vec<(usize, u64, bool)>,
    replies: tokio::task::JoinHandle<RunReplies>,
}

impl Queue {
    /// Queues a request for `primary` (`bytes`: it and `mn`) whose reply goes at `at`
    /// in the output; whether the queue is full and must be sent before the next.
    pub fn push(&mut self, primary: String, bytes: Vec<u8>, noreply: bool, at: usize) -> bool {
        self.bytes += bytes.len();
        self.seq += 1;
        self.queued.push(Queued {
            primary,
            bytes,
            noreply,
            at,
            seq: self.seq,
        });
        self.queued.len() >= QUEUED_MAX || self.bytes >= QUEUED_BYTES_MAX
    }

    /// Drops the replies of the requests queued so far (sent all the same): the
    /// output they were to go into is gone.
    pub fn mute(&mut self) {
        self.muted = self.seq;
    }

    /// Whether any reply is still to go into the output.
    pub fn pending(&self) -> bool {
        !self.queued.is_empty() || !self.flying.is_empty() || !self.done.is_empty()
    }

    /// Sends what is queued for each node with no run in flight, on tasks of this
    /// worker's runtime (over its own pooled connections); takes in the replies of
    /// runs that have ended.
    pub fn launch(&mut self, shared: &Arc<Shared>) {
        if self.queued.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.flying.len() {
            if self.flying[i].replies.is_finished() {
                let ended = self.flying.swap_remove(i);
                let result = ready(ended.replies);
                self.take_in(shared, ended.requests, result);
            } else {
                i += 1;
            }
        }
        let queued = std::mem::take(&mut self.queued);
        self.bytes = 0;
        let mut runs: Vec<(String, Vec<Queued>)> = Vec::new();
        for q in queued {
            if self.flying.iter().any(|f| f.primary == q.primary) {
                // Behind the run in flight to its node: kept for the next.
                self.bytes += q.bytes.len();
                self.queued.push(q);
                continue;
            }
            match runs.iter_mut().find(|(p, _)| *p == q.primary) {
                Some((_, run)) => run.push(q),
                None => runs.push((q.primary.clone(), vec![q])),
            }
        }
        for (primary, run) in runs {
            let requests = run.iter().map(|q| (q.at, q.seq, q.noreply)).collect();
            let bytes: Vec<Vec<u8>> = run.into_iter().map(|q| q.bytes).collect();
            let (s, to) = (Arc::clone(shared), primary.clone());
            let replies = tokio::spawn(async move { exchange_run(&s, &to, &bytes).await });
            self.flying.push(Flying {
                primary,
                requests,
                replies,
            });
        }
    }

    /// The replies of a run that ended, into `done`: an error for each request if it
    /// failed.
    fn take_in(
        &mut self,
        shared: &Shared,
        requests: Vec<(usize, u64, bool)>,
        result: Option<Result<RunReplies, tokio::task::JoinError>>,
    ) {
        let result = match result {
            Some(Ok(replies)) => replies,
            Some(Err(e)) => Err(format!("the forwarded request's task failed: {e}")),
            None => Err("the forwarded request's task did not end".to_string()),
        };
        let mut replies = result.map(|r| r.into_iter());
        for (at, seq, noreply) in requests {
            let mut out = Vec::new();
            match replies.as_mut().map(Iterator::next) {
                Ok(Some(reply)) => out = reply,
                Ok(None) => {
                    out.extend_from_slice(b"SERVER_ERROR the forwarded request got no reply\r\n")
                }
                Err(why) => out.extend_from_slice(format!("SERVER_ERROR {why}\r\n").as_bytes()),
            }
            crate::dispatch::drop_noreply_reply(shared, noreply, 0, &mut out);
            self.done.push((at, seq, out));
        }
    }

    /// Sends whatever is queued, waits for every reply, and returns them with their
    /// places in the output, in order (of place, then of request).
    pub async fn settle(&mut self, shared: &Arc<Shared>) -> Vec<(usize, Vec<u8>)> {
        // The common case, nothing in flight and one node asked: its run goes on this
        // task, with no task of its own to hand it to.
        let one_node = self
            .queued
            .first()
            .is_some_and(|first| self.queued.iter().all(|q| q.primary == first.primary));
        if self.flying.is_empty() && one_node {
            let queued = std::mem::take(&mut self.queued);
            self.bytes = 0;
            let primary = queued[0].primary.clone();
            let (requests, bytes): (Vec<_>, Vec<_>) = queued
                .into_iter()
                .map(|q| ((q.at, q.seq, q.noreply), q.bytes))
                .unzip();
            let result = exchange_run(shared, &primary, &bytes).await;
            self.take_in(shared, requests, Some(Ok(result)));
        }
        loop {
            self.launch(shared);
            let Some(flying) = self.flying.pop() else {
                break;
            };
            let result = flying.replies.await;
            self.take_in(shared, flying.requests, Some(result));
        }
        let mut done = std::mem::take(&mut self.done);
        done.retain(|&(_, seq, _)| seq > self.muted);
        done.sort_by_key(|&(at, seq, _)| (at, seq));
        done.into_iter().map(|(at, _, reply)| (at, reply)).collect()
    }
}

/// A finished task's output, taken without waiting.
fn ready<T>(mut task: tokio::task::JoinHandle<T>) -> Option<Result<T, tokio::task::JoinError>> {
    use std::future::Future;
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::Pin::new(&mut task).poll(&mut cx) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// The pool of binary-protocol connections to other nodes (text requests go over
/// each worker's own, `IDLE_TEXT`).
#[derive(Default)]
pub struct Forwarder {
    idle_binary: Mutex<Vec<(String, Socket)>>,
}

impl Forwarder {
    /// Sends `bytes` (a binary request packet and a `NOOP`) to `primary`; its response
    /// packets before the `NOOP`'s.
    fn exchange_binary(
        &self,
        shared: &Shared,
        primary: &str,
        bytes: &[u8],
    ) -> Result<Vec<u8>, String> {
        let mut socket = match take(&self.idle_binary, primary) {
            Some(socket) => socket,
            None => binary_connection(shared, primary)?,
        };
        socket.write_all(bytes).map_err(|e| e.to_string())?;
        let reply = read_binary_reply(&mut socket)?;
        give_back(&self.idle_binary, primary, socket);
        Ok(reply)
    }
}

fn take(pool: &Mutex<Vec<(String, Socket)>>, primary: &str) -> Option<Socket> {
    let mut idle = pool.lock();
    let at = idle.iter().rposition(|(to, _)| to == primary)?;
    Some(idle.remove(at).1)
}

fn give_back(pool: &Mutex<Vec<(String, Socket)>>, primary: &str, socket: Socket) {
    keep(&mut pool.lock(), primary, socket);
}

/// Keeps `connection` in `idle` for the next request to `primary`. The oldest idle
/// connection goes past [`POOL`] a node for the four nodes used most lately
/// (connections to a former primary, which nothing asks for, are the first to go).
fn keep<C>(idle: &mut Vec<(String, C)>, primary: &str, connection: C) {
    if idle.iter().filter(|(to, _)| to == primary).count() < POOL {
        idle.push((primary.to_string(), connection));
    }
    if idle.len() > POOL * 4 {
        idle.remove(0);
    }
}

/// The binary protocol's no-op, which ends a forwarded request's reply, and the
/// opaque its response carries back.
const NOOP: u8 = 0x0a;
const NOOP_OPAQUE: u32 = 0x4b55_5241;
const SASL_AUTH: u8 = 0x21;
const HEADER: usize = 24;

/// A binary request packet without extras.
fn binary_request(opcode: u8, opaque: u32, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![0x80, opcode];
    out.extend_from_slice(&u16::try_from(key.len()).unwrap_or(u16::MAX).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    let body = u32::try_from(key.len() + value.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&body.to_be_bytes());
    out.extend_from_slice(&opaque.to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

/// A binary connection to `primary`, logged in with SASL PLAIN as
/// `--replication-login`'s user when this node has one.
fn binary_connection(shared: &Shared, primary: &str) -> Result<Socket, String> {
    let connected = crate::replication::connect(primary, shared.replication.tls())
        .map_err(|e| e.to_string())?;
    let mut socket = bounded(shared, connected)?;
    if let Some((user, password)) = shared.replication.login_parts() {
        let plain = [&b"\0"[..], user, b"\0", password].concat();
        socket
            .write_all(&binary_request(SASL_AUTH, 0, b"PLAIN", &plain))
            .map_err(|e| e.to_string())?;
        let mut header = [0u8; HEADER];
        socket.read_exact(&mut header).map_err(|e| e.to_string())?;
        let body = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
        let mut rest = vec![0u8; body];
        socket.read_exact(&mut rest).map_err(|e| e.to_string())?;
        if header[6..8] != [0, 0] {
            return Err("the primary refused the replication login".to_string());
        }
    }
    Ok(socket)
}

/// `socket` with its reads and writes bounded: a reply may wait for the primary's
/// replicas (`--sync-timeout-ms`), then it comes; a primary silent for longer is cut
/// off or gone.
fn bounded(shared: &Shared, socket: Socket) -> Result<Socket, String> {
    let limit = Duration::from_millis(shared.config.sync_timeout_ms) + Duration::from_secs(1);
    socket
        .set_read_timeout(Some(limit))
        .and_then(|()| socket.set_write_timeout(Some(limit)))
        .map_err(|e| e.to_string())?;
    Ok(socket)
}

/// Reads response packets up to the no-op's; the packets before it.
fn read_binary_reply(socket: &mut Socket) -> Result<Vec<u8>, String> {
    let mut reply = Reply::default();
    let mut chunk = [0u8; 16 << 10];
    loop {
        if let Some(whole) = reply.take(binary_frame)? {
            reply.ended()?;
            return Ok(whole);
        }
        let n = socket.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the primary closed the connection".to_string());
        }
        reply.buf.extend_from_slice(&chunk[..n]);
    }
}

/// A binary response packet's length at the start of `bytes`, and whether it is the
/// no-op's that ends a forwarded request's reply; None until it is all there.
fn binary_frame(bytes: &[u8]) -> Result<Option<(usize, bool)>, String> {
    let Some(h) = bytes.get(..HEADER) else {
        return Ok(None);
    };
    let len = HEADER + u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let ends = h[0] == 0x81 && h[1] == NOOP && h[12..16] == NOOP_OPAQUE.to_be_bytes();
    Ok((bytes.len() >= len).then_some((len, ends)))
}

/// A text reply frame's length at the start of `bytes`, and whether it is the `MN`
/// that ends a forwarded request's reply.
fn text_frame(bytes: &[u8]) -> Result<Option<(usize, bool)>, String> {
    Ok(frame(bytes)?.map(|len| (len, &bytes[..len] == b"MN\r\n")))
}

/// A reply read so far from another node.
#[derive(Default)]
struct Reply {
    buf: Vec<u8>,
    /// Where the first frame not yet looked at starts.
    pos: usize,
}

impl Reply {
    /// Looks at the whole frames read (`frame` gives the length of the one a buffer
    /// starts with, and whether it ends the reply; None until it is all there): the
    /// frames before the one that ends the reply, taken out with it (what follows is
    /// the next reply's), or None while it has not come.
    fn take(
        &mut self,
        frame: impl Fn(&[u8]) -> Result<Option<(usize, bool)>, String>,
    ) -> Result<Option<Vec<u8>>, String> {
        while let Some((len, ends)) = frame(&self.buf[self.pos..])? {
            if ends {
                let whole = self.buf[..self.pos].to_vec();
                self.buf.drain(..self.pos + len);
                self.pos = 0;
                return Ok(Some(whole));
            }
            self.pos += len;
        }
        if self.buf.len() > REPLY_MAX {
            return Err("the primary's reply is too large to forward".to_string());
        }
        Ok(None)
    }

    /// Checks that nothing came past the last reply taken.
    fn ended(&self) -> Result<(), String> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err("the primary sent more than the reply".to_string())
        }
    }
}

/// The length of the whole reply frame at the start of `bytes` (a line, or a value's
/// header line with its data), or None if it is not all there yet.
pub(super) fn frame(bytes: &[u8]) -> Result<Option<usize>, String> {
    let Some(eol) = bytes.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = &bytes[..eol];
    let words: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let data = match words.first().copied() {
        Some(b"VALUE") => words.get(3),
        Some(b"VA") => words.get(1),
        _ => return Ok(Some(eol + 2)),
    };
    let data: usize = data
        .and_then(|d| std::str::from_utf8(d).ok()?.parse().ok())
        .ok_or_else(|| {
            format!(
                "an unreadable reply line {:?}",
                String::from_utf8_lossy(line)
            )
        })?;
    let len = eol + 2 + data + 2;
    Ok((bytes.len() >= len).then_some(len))
}

#[cfg(test)]
mod tests {
    use super::frame;

    #[test]
    fn frames_lines_and_values_by_their_length() {
        assert_eq!(frame(b"STORED\r\nMN\r\n"), Ok(Some(8)));
        assert_eq!(frame(b"STORED\r"), Ok(None));
        assert_eq!(frame(b"VALUE k 0 4\r\nMN\r\n\r\nEND\r\n"), Ok(Some(19)));
        assert_eq!(frame(b"VALUE k 0 4 77\r\nMN\r\n\r\nEND\r\n"), Ok(Some(22)));
        assert_eq!(frame(b"VALUE k 0 4\r\nMN"), Ok(None));
        assert_eq!(frame(b"VA 2 f0\r\nMN\r\nMN\r\n"), Ok(Some(13)));
        assert!(frame(b"VALUE k 0 x\r\n").is_err());
    }
}
