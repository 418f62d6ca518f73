//! Prometheus metrics on `--metrics-port`: `GET /metrics` answers the OpenMetrics text
//! format, written by `prometheus-client` from the same counters `stats` shows, at
//! the moment of the scrape.
//!
//! Names: memcached's counters under the names memcached_exporter gives them
//! (`memcached_commands_total{command,status}`, `memcached_current_connections`, …), so
//! dashboards made for memcached work; Kura's own under `kura_` (the log, fsyncs,
//! compaction, memory, cold reads, logins, replication), and two latency histograms:
//! `kura_fsync_seconds` (every fdatasync of the log and its files) and
//! `kura_batch_seconds` (from a connection's read to its replies written: the latency
//! its clients see, group commit included).
//!
//! The endpoint is a thread with a blocking listener that answers one request per
//! connection (`Connection: close`): scrapes are seconds apart, and a handful of
//! lines of HTTP is less to trust than a web framework.
//!
//! With `--metrics-token-file`, every request must carry `Authorization: Bearer
//! <token>` (Prometheus's `authorization: credentials_file:`); any other gets `401`
//! and nothing else. The tokens are compared in constant time. The server refuses
//! to serve metrics off the loopback without a token, as it refuses `-l` off the
//! loopback without logins (`--insecure` lifts both).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use kura_engine::histogram::HistogramSnapshot;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::server::Shared;

/// The most a request head may take; a scrape's is a few hundred bytes.
const REQUEST_HEAD_MAX_BYTES: usize = 8 * 1024;
const IO_TIMEOUT: Duration = Duration::from_secs(5);
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The bearer token of `--metrics-token-file`: the file's first line.
pub struct Token(Vec<u8>);

impl Token {
    /// Reads the token: the file's first line, at least 16 bytes of visible ASCII
    /// (a header carries it, and a short one is guessed).
    pub fn from_file(path: &std::path::Path) -> anyhow::Result<Token> {
        let text = std::fs::read(path)
            .map_err(|e| anyhow::anyhow!("reading the metrics token {}: {e}", path.display()))?;
        let line = text.split(|&b| b == b'\n').next().unwrap_or(&[]);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() < 16 || !line.iter().all(u8::is_ascii_graphic) {
            anyhow::bail!(
                "{}: the metrics token is the first line, at least 16 visible ASCII characters without spaces",
                path.display()
            );
        }
        Ok(Token(line.to_vec()))
    }

    /// Whether a request head carries `Authorization: Bearer <this token>`.
    fn admits(&self, head: &[u8]) -> bool {
        let shown = head.split(|&b| b == b'\n').skip(1).find_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&b| b == b':')?;
            let (name, value) = (&line[..colon], &line[colon + 1..]);
            name.eq_ignore_ascii_case(b"authorization")
                .then(|| value.trim_ascii())
        });
        let Some(value) = shown else {
            return false;
        };
        let Some(token) = value
            .get(..7)
            .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
            .map(|_| value[7..].trim_ascii())
        else {
            return false;
        };
        token.len() == self.0.len()
            && token
                .iter()
                .zip(&self.0)
                .fold(0u8, |acc, (x, y)| acc | (x ^ y))
                == 0
    }
}

/// Serves `/metrics` on `listener` from a thread of its own; with a token, only to
/// requests that show it.
pub fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    token: Option<Token>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("kura-metrics".to_string())
        .spawn(move || {
            for stream in listener.incoming() {
                if shared.stopping.load(Ordering::Acquire) {
                    break;
                }
                match stream {
                    Ok(stream) => {
                        if let Err(e) = answer(stream, &shared, token.as_ref()) {
                            tracing::warn!("metrics request: {e}");
                        }
                    }
                    Err(e) => {
                        tracing::warn!("metrics accept: {e}");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        })?;
    Ok(())
}

/// Reads one request head and answers it.
fn answer(
    mut stream: TcpStream,
    shared: &Arc<Shared>,
    token: Option<&Token>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
        if head.len() > REQUEST_HEAD_MAX_BYTES {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"",
            );
        }
    }
    if token.is_some_and(|t| !t.admits(&head)) {
        let head = "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\nContent-Type: text/plain\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        stream.write_all(head.as_bytes())?;
        return stream.flush();
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or(&[]);
    let mut words = line.split(|&b| b == b' ');
    let (method, target) = (words.next(), words.next());
    match (method, target) {
        (Some(b"GET"), Some(b"/metrics")) => {
            let body = render(shared);
            respond(&mut stream, "200 OK", CONTENT_TYPE, body.as_bytes())
        }
        (Some(b"GET"), _) => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            b"see /metrics\n",
        ),
        _ => respond(&mut stream, "405 Method Not Allowed", "text/plain", b""),
    }
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    stream.flush()
}

/// Every metric, in the OpenMetrics text format.
pub fn render(shared: &Arc<Shared>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot(Arc::clone(shared))));
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &registry) {
        tracing::warn!("encoding metrics: {e}");
    }
    text
}

/// Reads the server's counters when a scrape encodes it.
struct Snapshot(Arc<Shared>);

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Snapshot")
    }
}

/// A histogram from its snapshot.
struct Histogram(HistogramSnapshot);

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // prometheus-client takes each bucket's own count and sums them itself.
        let mut buckets = Vec::with_capacity(self.0.buckets.len() + 1);
        let mut below = 0;
        for &(bound, cumulative) in &self.0.buckets {
            buckets.push((bound, cumulative - below));
            below = cumulative;
        }
        buckets.push((f64::INFINITY, self.0.count - below));
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.0.sum_secs,
            self.0.count,
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// Writes metrics one after another.
struct Out<'a>(DescriptorEncoder<'a>);

impl Out<'_> {
    fn counter(&mut self, name: &str, help: &str, value: u64) -> Result<(), std::fmt::Error> {
        self.0
            .encode_descriptor(name, help, None, MetricType::Counter)?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&value, None)
    }

    fn counter_f64(&mut self, name: &str, help: &str, value: f64) -> Result<(), std::fmt::Error> {
        self.0
            .encode_descriptor(name, help, None, MetricType::Counter)?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, f64>(&value, None)
    }

    fn gauge(
        &mut self,
        name: &str,
        help: &str,
        value: impl Into<f64>,
    ) -> Result<(), std::fmt::Error> {
        let value: f64 = value.into();
        self.0
            .encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&value)
    }

    fn gauge_u64(&mut self, name: &str, help: &str, value: u64) -> Result<(), std::fmt::Error> {
        self.0
            .encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&value)
    }

    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        snapshot: HistogramSnapshot,
    ) -> Result<(), std::fmt::Error> {
        let encoder = self
            .0
            .encode_descriptor(name, help, None, MetricType::Histogram)?;
        Histogram(snapshot).encode(encoder)
    }
}

impl Collector for Snapshot {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let shared = &self.0;
        let mut out = Out(encoder);
        let counters: std::collections::HashMap<&str, u64> =
            shared.counters.snapshot().into_iter().collect();
        let count = |name: &str| counters.get(name).copied().unwrap_or(0);
        let store = shared.store.stats();
        let (user, system) = crate::stats_reply::rusage();

        // memcached's, under memcached_exporter's names.
        out.gauge("memcached_up", "Whether the server is up.", 1u32)?;
        out.gauge_u64(
            "memcached_uptime_seconds",
            "Seconds since the server started.",
            shared.uptime_secs(),
        )?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        out.gauge_u64(
            "memcached_time_seconds",
            "The server's clock, in Unix seconds.",
            now,
        )?;
        {
            let version = crate::dispatch::VERSION_REPLY
                .trim_start_matches("VERSION ")
                .trim_end();
            let mut family = out.0.encode_descriptor(
                "memcached_version",
                "The version this server reports.",
                None,
                MetricType::Gauge,
            )?;
            family
                .encode_family(&[("version", version)])?
                .encode_gauge(&1u32)?;
        }
        out.counter_f64(
            "memcached_process_user_cpu_seconds",
            "User CPU seconds of the process.",
            user,
        )?;
        out.counter_f64(
            "memcached_process_system_cpu_seconds",
            "System CPU seconds of the process.",
            system,
        )?;
        out.counter(
            "memcached_read_bytes",
            "Bytes read from clients.",
            count("bytes_read"),
        )?;
        out.counter(
            "memcached_written_bytes",
            "Bytes written to clients.",
            count("bytes_written"),
        )?;
        out.gauge_u64(
            "memcached_current_connections",
            "Open client connections.",
            count("curr_connections"),
        )?;
        out.gauge_u64(
            "memcached_max_connections",
            "The connection limit (-c).",
            shared.config.connections_max as u64,
        )?;
        out.counter(
            "memcached_connections",
            "Connections opened since start.",
            count("total_connections"),
        )?;
        out.counter(
            "memcached_connections_rejected",
            "Connections refused at the connection limit.",
            count("rejected_connections"),
        )?;
        out.counter(
            "memcached_connections_yielded",
            "Times a connection let others run after -R requests of one read.",
            count("conn_yields"),
        )?;
        out.counter(
            "kura_idle_kicks",
            "Connections closed for sending nothing for --idle-timeout.",
            count("idle_kicks"),
        )?;
        out.gauge_u64(
            "memcached_current_bytes",
            "Bytes of memcached's items.",
            store.bytes,
        )?;
        out.gauge_u64(
            "memcached_limit_bytes",
            "The memory limit (-m).",
            store.memory_limit_bytes,
        )?;
        out.gauge_u64(
            "memcached_current_items",
            "memcached's items now.",
            store.curr_items,
        )?;
        out.counter(
            "memcached_items",
            "Items stored since start.",
            count("total_items"),
        )?;
        out.counter(
            "memcached_items_evicted",
            "Items dropped for memory: never, in Kura.",
            0,
        )?;
        out.counter(
            "memcached_item_too_large",
            "Stores refused as too large.",
            count("store_too_large"),
        )?;
        out.counter(
            "memcached_item_no_memory",
            "Stores refused for memory.",
            count("store_no_memory"),
        )?;
        out.gauge_u64(
            "memcached_malloced_bytes",
            "What the index and the value cache hold (stats slabs total_malloced).",
            store.index_bytes + store.cache_bytes,
        )?;
        {
            let mut family = out.0.encode_descriptor(
                "memcached_commands",
                "Requests by command and status, as memcached_exporter names them.",
                None,
                MetricType::Counter,
            )?;
            let cas = count("cas_hits") + count("cas_misses") + count("cas_badval");
            let commands = [
                ("get", "hit", count("get_hits")),
                ("get", "miss", count("get_misses")),
                ("delete", "hit", count("delete_hits")),
                ("delete", "miss", count("delete_misses")),
                ("incr", "hit", count("incr_hits")),
                ("incr", "miss", count("incr_misses")),
                ("decr", "hit", count("decr_hits")),
                ("decr", "miss", count("decr_misses")),
                ("cas", "hit", count("cas_hits")),
                ("cas", "miss", count("cas_misses")),
                ("cas", "badval", count("cas_badval")),
                ("touch", "hit", count("touch_hits")),
                ("touch", "miss", count("touch_misses")),
                ("flush", "hit", count("cmd_flush")),
                ("set", "hit", count("cmd_set").saturating_sub(cas)),
            ];
            for (command, status, value) in commands {
                family
                    .encode_family(&[("command", command), ("status", status)])?
                    .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(
                        &value, None,
                    )?;
            }
        }

        // Kura's own.
        out.counter(
            "kura_auth_commands",
            "Logins tried (text and SASL).",
            count("auth_cmds"),
        )?;
        out.counter("kura_auth_errors", "Logins refused.", count("auth_errors"))?;
        out.counter("kura_meta_commands", "Meta commands.", count("cmd_meta"))?;
        out.counter(
            "kura_log_wait_batches",
            "Reply batches that waited for the log's acknowledgement.",
            count("log_wait_batches"),
        )?;
        out.gauge_u64(
            "kura_log_appended_lsn",
            "Bytes appended to the log since it was created.",
            store.appended_lsn,
        )?;
        out.gauge_u64(
            "kura_log_acked_lsn",
            "How far the log acknowledged (replies may go).",
            store.acked_lsn,
        )?;
        out.gauge_u64(
            "kura_log_synced_lsn",
            "How far the log is on disk.",
            store.synced_lsn,
        )?;
        out.gauge_u64(
            "kura_log_bytes",
            "Bytes of log segments on disk.",
            store.log_bytes,
        )?;
        out.gauge_u64(
            "kura_log_live_bytes",
            "Bytes of live records in the log.",
            store.log_live_bytes,
        )?;
        out.gauge_u64(
            "kura_log_segments",
            "Log segments on disk.",
            store.log_segments,
        )?;
        out.gauge(
            "kura_store_poisoned",
            "1 once a write or fsync failed: changes are refused.",
            u8::from(shared.store.is_poisoned()),
        )?;
        out.counter(
            "kura_compactions",
            "Compactions finished.",
            store.compactions,
        )?;
        out.gauge(
            "kura_compaction_running",
            "1 while a compaction runs.",
            u8::from(store.compaction_running),
        )?;
        out.counter(
            "kura_compaction_copied_bytes",
            "Bytes compaction copied forward.",
            store.compaction_copied_bytes,
        )?;
        out.counter(
            "kura_compaction_reclaimed_bytes",
            "Bytes compaction freed.",
            store.compaction_reclaimed_bytes,
        )?;
        out.counter(
            "kura_checkpoints",
            "Index checkpoints written.",
            store.checkpoints,
        )?;
        out.counter(
            "kura_expired_purged",
            "Expired versions dropped from the index.",
            store.expired_purged,
        )?;
        out.gauge_u64(
            "kura_index_bytes",
            "Memory of the index.",
            store.index_bytes,
        )?;
        out.gauge_u64(
            "kura_value_cache_bytes",
            "Memory of the values held in memory.",
            store.cache_bytes,
        )?;
        out.gauge_u64(
            "kura_values_in_memory",
            "Values held in memory.",
            store.cached_values,
        )?;
        out.gauge_u64(
            "kura_other_memory_bytes",
            "Resident memory beyond the index and the cache.",
            store.other_memory_bytes,
        )?;
        out.gauge_u64(
            "kura_resident_bytes",
            "The process's resident set.",
            crate::memory::resident_bytes(),
        )?;
        out.counter(
            "kura_value_reads",
            "Values read back from the log (cold reads).",
            store.value_reads,
        )?;
        out.counter(
            "kura_io_uring_reads",
            "Positional reads of values made through a worker's io_uring (a read may bring several).",
            count("io_uring_reads"),
        )?;
        out.counter(
            "kura_value_evictions",
            "Values moved out of memory.",
            store.evictions,
        )?;
        out.gauge_u64(
            "kura_table_items",
            "Rows and index entries of tables.",
            store.table_items,
        )?;
        let replication = &shared.replication;
        out.gauge(
            "kura_replica",
            "1 on a replica, 0 on a primary.",
            u8::from(shared.replication.primary().is_some()),
        )?;
        if let Some(view) = crate::cluster::view(shared) {
            out.gauge(
                "kura_cluster_primary",
                "In cluster mode: 1 on the shard's primary, 0 on another node.",
                u8::from(view.role == "primary"),
            )?;
            out.gauge(
                "kura_cluster_has_primary",
                "In cluster mode: 1 while etcd names a primary for the shard.",
                u8::from(view.primary.is_some()),
            )?;
            out.gauge_u64(
                "kura_cluster_term",
                "In cluster mode: the epoch of the term this node holds as primary (0: none).",
                u64::try_from(view.term).unwrap_or(0),
            )?;
            out.gauge_u64(
                "kura_cluster_members",
                "In cluster mode: the shard's registered members.",
                view.members as u64,
            )?;
            out.gauge(
                "kura_cluster_lease_seconds",
                "In cluster mode: how long this node's lease is certainly alive (-1: none).",
                if view.lease_ms < 0 {
                    -1.0
                } else {
                    view.lease_ms as f64 / 1e3
                },
            )?;
            out.gauge(
                "kura_cluster_serving_reads",
                "In cluster mode: 1 while this node answers reads.",
                u8::from(view.serving_reads),
            )?;
        }
        let links = replication.links();
        out.gauge_u64(
            "kura_connected_replicas",
            "Replicas streaming from this node.",
            links.len() as u64,
        )?;
        {
            let synced = store.synced_lsn;
            let mut family = out.0.encode_descriptor(
                "kura_replica_lag_bytes",
                "How far each connected replica's confirmed position is behind this node's synced log.",
                None,
                MetricType::Gauge,
            )?;
            for link in &links {
                let acked = link.acked_lsn.load(Ordering::Relaxed);
                family
                    .encode_family(&[("replica", link.addr.as_str())])?
                    .encode_gauge(&synced.saturating_sub(acked))?;
            }
        }
        out.counter(
            "kura_partial_syncs_served",
            "Replicas that continued from their position.",
            replication.partial_syncs.load(Ordering::Relaxed),
        )?;
        out.counter(
            "kura_full_syncs_served",
            "Replicas that got a full copy.",
            replication.full_syncs.load(Ordering::Relaxed),
        )?;
        out.counter(
            "kura_sync_timeouts",
            "Changes whose replicas did not confirm in time.",
            replication.sync_timeouts.load(Ordering::Relaxed),
        )?;
        out.counter(
            "kura_sync_refusals",
            "Changes refused for too few replicas.",
            replication.sync_refusals.load(Ordering::Relaxed),
        )?;
        if let Some(syncs) = shared.store.sync_times() {
            out.histogram(
                "kura_fsync_seconds",
                "How long each fdatasync of the log and its files took.",
                syncs,
            )?;
        }
        out.histogram(
            "kura_batch_seconds",
            "From a connection's read to its replies written: the latency clients see, waiting for the log included.",
            shared.counters.batch_times(),
        )?;
        Ok(())
    }
}
