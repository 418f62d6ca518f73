//! The listener and the connections: bytes in, requests parsed and executed in order,
//! replies out — after the log has acknowledged every change they report.
//!
//! A connection reads what the socket has, runs every complete request in it (a
//! pipeline is one batch), then waits once for the highest LSN the batch's replies
//! depend on and writes them in one go. That is where group commit comes from: the
//! pipeline of one connection shares an fsync, and so do all connections whose batches
//! wait at the same time. Reads that show a version not yet acknowledged wait too, so
//! no client ever sees a value a crash could take back.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use kura_engine::Store;
use kura_protocol::Limits;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::config::Config;

mod conn;
mod text;

use crate::dispatch::Flow;
use crate::stats::{add, bump, ConnInfo, Connections, CounterSet, PrefixStats};
use conn::{flush, Dialect};
pub(crate) use conn::{Conn, Step};
use text::text_step;

/// What every connection shares.
pub struct Shared {
    /// The users of `-Y` and `--admin-auth-file`: when set, every connection logs in
    /// first (`crate::auth`).
    pub users: Option<crate::auth::Logins>,
    pub store: Arc<Store>,
    /// Tables over the same store: rows reached through `@@container.key`.
    pub tables: Arc<kura_tables::Tables>,
    pub config: Config,
    pub limits: Limits,
    pub counters: CounterSet,
    pub prefixes: PrefixStats,
    pub connections: Connections,
    pub started: Instant,
    /// Connections waiting for the log to acknowledge their changes.
    pub acks: Arc<crate::acks::Acks>,
    pub verbosity: AtomicU64,
    /// Reads values that are not in memory, off the event loops.
    pub reader: crate::reader::ValueReader,
    /// Set once shutdown begins; the maintenance thread watches it.
    pub stopping: std::sync::atomic::AtomicBool,
    pub listen_addr: SocketAddr,
    /// Where the SQL port listens (None: `--sql-port off`).
    pub sql_addr: Option<SocketAddr>,
    /// Whom this node follows, and who follows it.
    pub replication: crate::replication::Replication,
    /// The node's part in its cluster (`--etcd`), as `stats cluster` shows it.
    pub cluster: crate::cluster::Status,
    /// A cluster replica's connections to its primary, for what it forwards.
    pub forwarder: crate::cluster::Forwarder,
    /// `-Z`: every connection to the memcached port begins with a TLS handshake.
    pub tls: Option<crate::tls::Tls>,
    /// `--tls-replication`'s settings, as `stats settings` shows them.
    pub tls_replication: Option<crate::tls::Settings>,
}

impl kura_replication::Node for Shared {
    fn store(&self) -> &Arc<Store> {
        &self.store
    }

    fn tables(&self) -> &Arc<kura_tables::Tables> {
        &self.tables
    }

    fn replication(&self) -> &crate::replication::Replication {
        &self.replication
    }

    fn synced(&self) -> &kura_replication::Synced {
        &self.acks.synced
    }

    fn verbosity(&self) -> u64 {
        self.verbosity.load(Ordering::Relaxed)
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    fn listen_addr(&self) -> SocketAddr {
        self.listen_addr
    }

    fn hand_off(
        self: Arc<Self>,
        link: Arc<kura_replication::primary::Link>,
        step: kura_replication::HandOffStep,
        _lsn: u64,
        shard: &str,
    ) {
        crate::cluster::hand_off(self, link, step, shard);
    }
}

impl Shared {
    pub fn uptime_secs(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// In cluster mode, why this node answers no read now (None: it answers): a
    /// primary reads only while its lease holds, a replica once it follows its primary
    /// from a consistent point (after cutting what the primary's history never had),
    /// and a node between primaries not at all, so that no read shows a write the
    /// shard's primary does not have.
    pub fn read_refusal(&self) -> Option<String> {
        if !crate::cluster::enabled(&self.config) {
            return None;
        }
        if !self.store.is_read_only() {
            return self.store.check_writable().err().map(|e| e.to_string());
        }
        match self.replication.consistent() {
            Some(true) => None,
            Some(false) => Some(
                "not serving reads: catching up with the shard's primary, try again".to_string(),
            ),
            None => Some(format!("not serving reads: {}", crate::cluster::NO_PRIMARY)),
        }
    }
}

/// How many ready tasks a worker runs before it asks the kernel for new I/O again.
/// tokio's default (61) lets one worker sit on a long run of connections while new
/// requests wait in the kernel; memcached-like fairness wants a short run.
const EVENT_INTERVAL: u32 = 8;

/// How far past the item size limit a connection's unparsed input may grow (a
/// multi-get of many long keys) before Kura closes it.
const PENDING_SLACK_BYTES: usize = 8 << 20;

/// The least free room the read buffer has before each read.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// A connection handed from the acceptor to a worker.
struct Handoff {
    stream: std::net::TcpStream,
    peer: SocketAddr,
    id: u64,
}

/// Starts `threads` workers, each a single-threaded event loop that owns the
/// connections it is handed (memcached's model: no task ever moves between threads, so
/// a request is read, executed and answered on one core without cross-thread wakeups).
/// Then accepts connections until `shutdown` turns true, handing them out round-robin,
/// and waits (a bounded time) for the workers to finish the batches in hand.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let threads = shared.config.threads.max(1);
    let mut workers = Vec::with_capacity(threads);
    let mut handles = Vec::with_capacity(threads);
    // Each worker drops its sender once its clients' connections have finished (the
    // streams to replicas go on until the server is stopping).
    let (finished, mut all_finished) = tokio::sync::mpsc::channel::<()>(1);
    for n in 0..threads {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Handoff>();
        let shared = Arc::clone(&shared);
        let shutdown = shutdown.clone();
        let finished = finished.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("kura-worker-{n}"))
            .spawn(move || worker(n, rx, shared, shutdown, finished));
        match spawned {
            Ok(handle) => {
                workers.push(tx);
                handles.push(handle);
            }
            Err(e) => tracing::warn!("could not start worker {n}: {e}"),
        }
    }
    let mut next_id: u64 = 1;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let open = shared.counters.total(|c| &c.curr_connections) as usize;
                if open >= shared.config.connections_max || workers.is_empty() {
                    bump(&shared.counters.local().rejected_connections);
                    tokio::spawn(reject(stream));
                    continue;
                }
                // Counted here, not in the worker, so a burst of accepts sees the limit.
                bump(&shared.counters.local().curr_connections);
                bump(&shared.counters.local().total_connections);
                let id = next_id;
                next_id += 1;
                let worker = &workers[(id as usize) % workers.len()];
                let handed = stream
                    .into_std()
                    .map_err(|e| e.to_string())
                    .and_then(|stream| worker.send(Handoff { stream, peer, id }).map_err(|e| e.to_string()));
                if let Err(e) = handed {
                    tracing::warn!("could not hand connection {id} to a worker: {e}");
                    shared.counters.local().curr_connections.fetch_sub(1, Ordering::Relaxed);
                }
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    drop(workers);
    drop(finished);
    let _ = all_finished.recv().await;
    // Every client's connection has finished or been cut off: the streams to the
    // replicas say goodbye and end, and the workers with them.
    shared.stopping.store(true, Ordering::Release);
    // It waits (a bounded time) for the streams' goodbyes: off this runtime.
    let stopping = Arc::clone(&shared);
    let _ = tokio::task::spawn_blocking(move || stopping.replication.shutdown()).await;
    // The workers finish on their own threads; wait for them off this runtime.
    let _ = tokio::task::spawn_blocking(move || {
        for handle in handles {
            let _ = handle.join();
        }
    })
    .await;
}

fn worker(
    n: usize,
    mut handoffs: tokio::sync::mpsc::UnboundedReceiver<Handoff>,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    finished: tokio::sync::mpsc::Sender<()>,
) {
    shared.counters.bind_worker(n);
    let built = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .event_interval(EVENT_INTERVAL)
        .build();
    let runtime = match built {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("worker runtime failed to start: {e}");
            return;
        }
    };
    runtime.block_on(async move {
        if shared.config.cold_reads == crate::config::ColdReadsFlag::IoUring {
            if let Err(e) = crate::uring::start() {
                // Said once: every worker meets the same kernel.
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| tracing::warn!("cold reads go to the reader threads: io_uring: {e}"));
            }
        }
        let mut tasks = tokio::task::JoinSet::new();
        // How many of the tasks are streams to replicas.
        let streams = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        // Connections watch this worker's own channel, not the server-wide one: waiting
        // on a channel registers a waiter on every read, and a channel shared by every
        // thread would make that a contended lock on the hot path.
        let (local_tx, local_rx) = watch::channel(false);
        let mut shutdown = shutdown;
        let forward = async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
            let _ = local_tx.send(true);
            local_tx
        };
        tokio::pin!(forward);
        let mut local_tx = None;
        loop {
            tokio::select! {
                tx = &mut forward, if local_tx.is_none() => local_tx = Some(tx),
                handoff = handoffs.recv() => {
                    let Some(Handoff { stream, peer, id }) = handoff else { break };
                    match TcpStream::from_std(stream) {
                        Ok(stream) => {
                            let shared = Arc::clone(&shared);
                            let streams = Arc::clone(&streams);
                            tasks.spawn(open(stream, peer, id, shared, local_rx.clone(), streams));
                        }
                        Err(e) => {
                            tracing::warn!("connection {id}: {e}");
                            shared.counters.local().curr_connections.fetch_sub(1, Ordering::Relaxed);
                        }
                    }
                }
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        drop(local_tx);
        // Shutting down: connections were told; give them a bounded time to finish.
        let deadline = tokio::time::sleep(Duration::from_secs(5));
        tokio::pin!(deadline);
        while tasks.len() > streams.load(Ordering::Acquire) {
            tokio::select! {
                next = tasks.join_next() => if next.is_none() { break },
                _ = &mut deadline => {
                    tracing::warn!("{} connections did not finish in time", tasks.len());
                    tasks.abort_all();
                    break;
                }
            }
        }
        // Then the streams to replicas, which end once the server is stopping.
        drop(finished);
        let deadline = tokio::time::sleep(STREAMS_END_WITHIN);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                next = tasks.join_next() => if next.is_none() { break },
                _ = &mut deadline => {
                    tasks.abort_all();
                    break;
                }
            }
        }
    });
}

/// How long a worker waits for its streams to replicas to end once the server is
/// stopping (each sees it within its longest wait for the log and says goodbye).
const STREAMS_END_WITHIN: Duration = Duration::from_secs(2);

async fn reject(mut stream: TcpStream) {
    let _ = stream
        .write_all(b"ERROR Too many open connections\r\n")
        .await;
}

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// Serves one accepted connection: over TLS when `-Z` is on (the handshake runs here,
/// on the worker, bounded in time), and hands it to a replica's stream if it asks.
async fn open(
    stream: TcpStream,
    peer: SocketAddr,
    id: u64,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    streams: Arc<std::sync::atomic::AtomicUsize>,
) {
    let _ = stream.set_nodelay(true);
    let Some(tls) = &shared.tls else {
        let Some((stream, request)) =
            connection(stream, peer, id, Arc::clone(&shared), shutdown).await
        else {
            return;
        };
        stream_to_replica(shared, stream, peer, request, &streams).await;
        return;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
    let stream = match tokio::time::timeout(HANDSHAKE_LIMIT, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        failed => {
            tls.handshake_errors.fetch_add(1, Ordering::Relaxed);
            if let Ok(Err(e)) = failed {
                tracing::debug!("TLS handshake with {peer} failed: {e}");
            }
            leave(&shared, id);
            return;
        }
    };
    let Some((stream, request)) = connection(stream, peer, id, Arc::clone(&shared), shutdown).await
    else {
        return;
    };
    stream_to_replica(shared, stream, peer, request, &streams).await;
}

/// Serves a replica's stream on the connection that asked for it, counted among its
/// worker's streams meanwhile.
async fn stream_to_replica<S: AsyncRead + AsyncWrite + Unpin + Send>(
    shared: Arc<Shared>,
    stream: S,
    peer: SocketAddr,
    request: crate::replication::primary::Request,
    streams: &std::sync::atomic::AtomicUsize,
) {
    streams.fetch_add(1, Ordering::AcqRel);
    crate::replication::primary::serve(shared, stream, peer.to_string(), request).await;
    streams.fetch_sub(1, Ordering::AcqRel);
}

/// Serves a connection until it closes, or returns it with the request of a replica
/// that asked for the log (the connection has left this worker's books by then).
async fn connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    peer: SocketAddr,
    id: u64,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) -> Option<(S, crate::replication::primary::Request)> {
    let last_cmd_secs = Arc::new(AtomicU64::new(u64::from(shared.store.now_secs())));
    shared.connections.register(
        id,
        ConnInfo {
            addr: format!("tcp:{peer}"),
            listen_addr: format!("tcp:{}", shared.listen_addr),
            last_cmd_secs: Arc::clone(&last_cmd_secs),
        },
    );
    let mut input = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut conn = Conn::new(shared.users.is_none(), peer);
    let mut need_read = true;
    let mut batch_started = Instant::now();
    // Created once: a fresh `changed()` future per read would register and unregister
    // a waiter on the channel for every request.
    let stop = shutdown.changed();
    tokio::pin!(stop);
    'serve: loop {
        if need_read {
            // Keep room to read into; on an emptied buffer this reclaims the space.
            input.reserve(READ_CHUNK_BYTES);
            let idle = shared.config.idle_timeout_secs;
            let read = tokio::select! {
                biased;
                read = stream.read_buf(&mut input) => read,
                _ = &mut stop => break 'serve,
                _ = tokio::time::sleep(Duration::from_secs(idle)), if idle > 0 => {
                    // memcached's idle_timeout: a connection silent this long is closed.
                    bump(&shared.counters.local().idle_kicks);
                    break 'serve;
                }
            };
            match read {
                Ok(0) | Err(_) => break 'serve,
                Ok(n) => add(&shared.counters.local().bytes_read, n as u64),
            }
            batch_started = Instant::now();
            last_cmd_secs.store(u64::from(shared.store.now_secs()), Ordering::Relaxed);
        }
        need_read = true;
        let mut flow = Flow::Continue;
        let mut ran: usize = 0;
        loop {
            if conn.swallow_bytes > 0 {
                let n = conn.swallow_bytes.min(input.len());
                input.advance(n);
                conn.swallow_bytes -= n;
                if conn.swallow_bytes > 0 {
                    break;
                }
            }
            if conn.dialect == Dialect::Undecided {
                if input.is_empty() {
                    break;
                }
                conn.dialect = if crate::binary::starts_binary(&input) {
                    Dialect::Binary
                } else {
                    Dialect::Text
                };
            }
            let step = match conn.dialect {
                Dialect::Binary => crate::binary::step(&shared, &mut conn, &input).await,
                _ => text_step(&shared, &mut conn, &input).await,
            };
            match step {
                Step::Incomplete => {
                    // A complete request never needs more than an item and its command
                    // line; only a multi-get line could, and memcached lets that grow
                    // without bound. Kura draws the line here.
                    if input.len() > shared.limits.item_size_max_bytes + PENDING_SLACK_BYTES {
                        flow = Flow::Close;
                    }
                    break;
                }
                Step::Ran {
                    consumed,
                    flow: next,
                } => {
                    input.advance(consumed);
                    flow = next;
                    ran += 1;
                }
            }
            if flow != Flow::Continue {
                break;
            }
            if ran.is_multiple_of(shared.config.reqs_per_event) && !input.is_empty() {
                // memcached's -R: after this many requests of one read, let the worker's
                // other connections run. The replies stay here, to leave with the rest
                // of the read's (and to share its wait for the log).
                bump(&shared.counters.local().conn_yields);
                tokio::task::yield_now().await;
            }
            if conn.out.len() > 256 * 1024 {
                // Send what we have before parsing on; the rest of the input is still here.
                need_read = false;
                break;
            }
        }
        // The replies of requests queued for other nodes, before the output leaves.
        conn.settle_forwards(&shared).await;
        let replied = !conn.out.is_empty();
        let flushed = flush(&mut stream, &mut conn, &shared).await;
        if replied {
            shared.counters.record_batch(batch_started.elapsed());
        }
        if !flushed || flow == Flow::Close {
            break 'serve;
        }
        if let Flow::Replicate(request) = flow {
            // The connection becomes the replica's stream, on this task.
            leave(&shared, id);
            return Some((stream, request));
        }
        // Keep the input buffer from holding on to a huge pipeline's memory.
        if input.is_empty() && input.capacity() > 1 << 20 {
            input = BytesMut::with_capacity(READ_CHUNK_BYTES);
        }
    }
    let _ = stream.shutdown().await;
    leave(&shared, id);
    None
}

/// Forgets connection `id`: it closed, or left for a replica's stream.
fn leave(shared: &Shared, id: u64) {
    shared.connections.unregister(id);
    shared
        .counters
        .local()
        .curr_connections
        .fetch_sub(1, Ordering::Relaxed);
}

/// How often the maintenance thread purges expired items and considers compaction.
const MAINTENANCE_PERIOD: Duration = Duration::from_secs(1);
/// How often it measures the memory the store does not count and trims the cache by it.
const MEMORY_PERIOD: Duration = Duration::from_millis(100);

/// Starts the maintenance thread: every second it drops expired items from the index,
/// measures the memory the store does not count and trims the cache by it, and compacts the log while it holds more garbage than live data; every
/// `--checkpoint-secs` it writes the index checkpoint if the log moved, and sooner
/// once the log has grown by `--checkpoint-log-mib` (or by the last checkpoint's size)
/// since the last one, which bounds what a restart after a crash replays. It runs beside
/// the workers and takes each shard lock only briefly, so requests do not stall behind
/// it.
pub fn start_maintenance(shared: Arc<Shared>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("kura-maintenance".to_string())
        .spawn(move || {
            let segment_size_bytes = shared.config.segment_size_mib.max(1) << 20;
            let checkpoint_every = Duration::from_secs(shared.config.checkpoint_secs);
            let mut last_checkpoint = std::time::Instant::now();
            let mut checkpointed = shared.store.appended_lsn();
            let growth_floor = shared.config.checkpoint_log_mib.saturating_mul(1 << 20);
            // The last checkpoint's size: writing one costs about that much, so the log
            // grows at least as much between two (checkpoints add at most as many bytes
            // as the log).
            let checkpoint_bytes = || {
                std::fs::metadata(shared.config.data_dir.join(kura_engine::CHECKPOINT_FILE))
                    .map_or(0, |m| m.len())
            };
            let mut growth_limit = growth_floor.max(checkpoint_bytes());
            let mut next = std::time::Instant::now() + MAINTENANCE_PERIOD;
            let mut next_memory = std::time::Instant::now() + MEMORY_PERIOD;
            loop {
                // Parked until the next period, or until shutdown unparks it.
                let now = std::time::Instant::now();
                if shared.stopping.load(Ordering::Acquire) {
                    break;
                }
                if now >= next_memory && now < next {
                    // Between the periods, only the memory: a fast load fills the cache
                    // within a second, and the budget must know the rest of the process
                    // by then.
                    next_memory = now + MEMORY_PERIOD;
                    crate::memory::report_other_memory(&shared.store);
                    shared.store.trim_to_budget();
                    // The ordered keys' changes go to their B-tree as the log syncs
                    // them, so the overlay in memory stays small.
                    if let Err(e) = shared.store.apply_ordered(false) {
                        tracing::error!("the ordered keyspace's update failed: {e}");
                    }
                    continue;
                }
                if now < next {
                    std::thread::park_timeout(next.min(next_memory) - now);
                    continue;
                }
                next_memory = now + MEMORY_PERIOD;
                next = now + MAINTENANCE_PERIOD;
                shared.store.purge_expired();
                // Once a second durably: a restart reads the log from there.
                if let Err(e) = shared.store.apply_ordered(true) {
                    tracing::error!("the ordered keyspace's update failed: {e}");
                }
                crate::memory::report_other_memory(&shared.store);
                shared.store.trim_to_budget();
                if let Err(e) = shared.store.compact_if_needed(segment_size_bytes) {
                    tracing::error!("compaction failed: {e}");
                }
                let appended = shared.store.appended_lsn();
                let timely = !checkpoint_every.is_zero()
                    && last_checkpoint.elapsed() >= checkpoint_every
                    && appended != checkpointed;
                // --checkpoint-secs 0 means no checkpoints at all.
                let grown = !checkpoint_every.is_zero()
                    && growth_floor > 0
                    && appended.saturating_sub(checkpointed) >= growth_limit;
                if timely || grown {
                    last_checkpoint = std::time::Instant::now();
                    match shared.store.checkpoint() {
                        Ok(_) => {
                            checkpointed = appended;
                            growth_limit = growth_floor.max(checkpoint_bytes());
                        }
                        Err(e) => tracing::error!("checkpoint failed: {e}"),
                    }
                }
            }
        })
}
