//! The closed-loop load generator behind the throughput workload.
//!
//! N connections are spread over T client threads. Each thread owns one epoll
//! (via mio) and its share of the connections, each with exactly one request in
//! flight: when a reply completes, its latency is recorded and the next request is
//! written at once. One thread per connection would cost a context switch per
//! request on a machine where the client and the server share two cores; a few
//! threads each serving many ready connections per `epoll_wait` spend that CPU on
//! requests instead, so the server, not the client, is what saturates first.
//!
//! Time is split into a warm-up (replies counted nowhere) and a measured window
//! (replies completing inside it are counted and their latencies recorded). CPU
//! use of this process and of the server, when known, is sampled at the window's
//! edges so a client-bound result shows as such.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use crate::backend::Backend;
use crate::client::Client;
use crate::keys::{key_name, value_bytes, KeyChooser, Rng};
use crate::progress::Progress;
use crate::proto::{Expect, Reply, Wire};
use crate::stats;

/// Which requests a load sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpMix {
    Get,
    Set,
    /// Gets, with this percentage of sets mixed in at random.
    Mix {
        set_percent: u32,
    },
}

impl OpMix {
    pub fn name(self) -> String {
        match self {
            OpMix::Get => "get".into(),
            OpMix::Set => "set".into(),
            OpMix::Mix { set_percent } => format!("mix{}/{}", 100 - set_percent, set_percent),
        }
    }
}

/// How the connections are dealt to the client threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Deal {
    /// Consecutive connections to the same thread: each client thread's connections
    /// land on every server worker.
    Blocks,
    /// Connection i to thread i mod T. A server that hands connections to its workers
    /// round-robin (memcached and Kura do) then pairs each client thread with one
    /// worker for the whole run: T lockstep ping-pong pairs.
    RoundRobin,
}

/// One measured load against one server.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    pub wire: Wire,
    pub connections: usize,
    pub threads: usize,
    pub deal: Deal,
    pub keys: KeyChooser,
    pub key_prefix: String,
    pub value_len: usize,
    pub mix: OpMix,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
    /// TLS to the server (`<backend>-tls`), or plain TCP.
    pub tls: Option<std::sync::Arc<crate::tls::BenchTls>>,
}

/// What one load measured.
#[derive(Clone, Debug)]
pub struct LoadResult {
    pub ops: u64,
    pub window: Duration,
    pub histogram: Histogram<u64>,
    /// Gets that found no value (after a preload, a miss means a lost write).
    pub misses: u64,
    /// Error replies, and sets not stored.
    pub errors: u64,
    pub cpu: stats::CpuUse,
}

impl LoadResult {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.window.as_secs_f64()
    }
}

/// Stores every key of the key space on backend `b` over `connections`, with a
/// progress bar: how every workload that starts from a full key space begins.
/// `workload` names it in the error for a backend without a key-value protocol.
pub fn preload_backend(
    b: &Backend,
    workload: &str,
    key_prefix: &str,
    keys: u64,
    value_size: usize,
    connections: usize,
) -> Result<()> {
    let wire = b
        .protocol
        .load_wire()
        .with_context(|| format!("{} cannot run the {workload} workload", b.name))?;
    let progress = Progress::new(
        format!("preloading {} ({value_size}-byte values)", b.name),
        keys,
        "keys",
    );
    preload(
        b.addr,
        wire,
        b.tls.clone(),
        key_prefix,
        keys,
        value_size,
        connections,
        &progress,
    )
}

/// Stores every key in `0..keys` once, over `connections` connections, pipelining
/// batches of sets on each, counting keys stored on `progress`.
#[allow(clippy::too_many_arguments)]
pub fn preload(
    addr: SocketAddr,
    wire: Wire,
    tls: Option<std::sync::Arc<crate::tls::BenchTls>>,
    key_prefix: &str,
    keys: u64,
    value_len: usize,
    connections: usize,
    progress: &Progress,
) -> Result<()> {
    let connections = connections.clamp(1, 16) as u64;
    let per = keys.div_ceil(connections);
    thread::scope(|scope| {
        let mut workers = Vec::new();
        for c in 0..connections {
            let range = (c * per)..((c + 1) * per).min(keys);
            let tls = tls.clone();
            workers.push(scope.spawn(move || -> Result<()> {
                let mut client = Client::connect_tls(addr, wire, tls.as_deref())?;
                let value = value_bytes(value_len, c);
                let mut key = Vec::new();
                let ids: Vec<u64> = range.collect();
                for batch in ids.chunks(64) {
                    for id in batch {
                        key_name(&mut key, key_prefix, *id);
                        client.push_set(&key, &value);
                    }
                    client.flush()?;
                    for _ in batch {
                        match client.read_reply(Expect::Status)? {
                            Reply::Ok => {}
                            other => bail!("preload set refused: {other:?}"),
                        }
                    }
                    progress.add(batch.len() as u64);
                }
                Ok(())
            }));
        }
        for w in workers {
            w.join()
                .map_err(|_| anyhow::anyhow!("a preload thread panicked"))??;
        }
        Ok(())
    })
}

/// Runs one load and measures it.
pub fn run(spec: &LoadSpec, server_pids: &[u32]) -> Result<LoadResult> {
    let threads = spec.threads.clamp(1, spec.connections.max(1));
    let mut streams: Vec<Vec<Opened>> = (0..threads).map(|_| Vec::new()).collect();
    for i in 0..spec.connections {
        let mut stream = StdTcpStream::connect_timeout(&spec.addr, Duration::from_secs(10))
            .with_context(|| format!("connecting to {}", spec.addr))?;
        stream.set_nodelay(true)?;
        // The handshake happens here, before the clock starts: a load measures
        // requests on open connections.
        let session = match &spec.tls {
            Some(tls) => Some(tls.handshake(&mut stream)?),
            None => None,
        };
        stream.set_nonblocking(true)?;
        // Servers hand accepted connections to their workers round-robin (memcached
        // and Kura both), so dealing them out round-robin here too pairs each client
        // thread with one server worker for the whole run: lockstep ping-pong pairs,
        // whose throughput on two cores swings from run to run with how the pairs are
        // placed. Dealing in blocks mixes them, and starves some connections instead.
        let thread = match spec.deal {
            Deal::Blocks => i * threads / spec.connections,
            Deal::RoundRobin => i % threads,
        };
        streams[thread].push((stream, session));
    }
    // Threads start together a little after all connections are up.
    let start = Instant::now() + Duration::from_millis(20);
    let window_start = start + spec.warmup;
    let window_end = window_start + spec.duration;
    let mut workers = Vec::new();
    for (t, conns) in streams.into_iter().enumerate() {
        let spec = spec.clone();
        workers.push(thread::spawn(move || {
            drive(
                &spec,
                conns,
                spec.seed.wrapping_add(t as u64 * 7919),
                start,
                window_start,
                window_end,
            )
        }));
    }
    sleep_until(window_start);
    let cpu_before = stats::CpuSample::take(server_pids);
    sleep_until(window_end);
    let cpu_after = stats::CpuSample::take(server_pids);
    let mut histogram = stats::new_histogram()?;
    let (mut ops, mut misses, mut errors) = (0, 0, 0);
    for w in workers {
        let part = w
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        ops += part.ops;
        misses += part.misses;
        errors += part.errors;
        histogram.add(&part.histogram)?;
    }
    let window = window_end - window_start;
    Ok(LoadResult {
        ops,
        window,
        histogram,
        misses,
        errors,
        cpu: stats::CpuUse::between(cpu_before, cpu_after, window),
    })
}

pub fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        thread::sleep(t - now);
    }
}

struct ThreadResult {
    ops: u64,
    misses: u64,
    errors: u64,
    histogram: Histogram<u64>,
}

/// A connected socket, and its TLS session when the load speaks TLS.
type Opened = (StdTcpStream, Option<rustls::ClientConnection>);

/// One connection's state: at most one request in flight.
struct Conn {
    stream: TcpStream,
    tls: Option<rustls::ClientConnection>,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    written: usize,
    sent_at: Instant,
    expect: Expect,
}

fn drive(
    spec: &LoadSpec,
    conns: Vec<Opened>,
    seed: u64,
    start: Instant,
    window_start: Instant,
    window_end: Instant,
) -> Result<ThreadResult> {
    let mut poll = Poll::new()?;
    let mut conns: Vec<Conn> = conns
        .into_iter()
        .map(|(s, tls)| Conn {
            stream: TcpStream::from_std(s),
            tls,
            inbuf: Vec::with_capacity(4096),
            outbuf: Vec::with_capacity(4096),
            written: 0,
            sent_at: start,
            expect: Expect::Status,
        })
        .collect();
    for (i, c) in conns.iter_mut().enumerate() {
        poll.registry().register(
            &mut c.stream,
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
    }
    let mut rng = Rng::new(seed);
    let value = value_bytes(spec.value_len, seed);
    let mut key = Vec::with_capacity(64);
    let mut result = ThreadResult {
        ops: 0,
        misses: 0,
        errors: 0,
        histogram: stats::new_histogram()?,
    };
    sleep_until(start);
    for c in conns.iter_mut() {
        next_request(spec, c, &mut rng, &mut key, &value);
        flush(c)?;
    }
    let mut events = Events::with_capacity(1024);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let now = Instant::now();
        if now >= window_end {
            break;
        }
        poll.poll(
            &mut events,
            Some((window_end - now).min(Duration::from_millis(100))),
        )
        .or_else(|e| {
            if e.kind() == ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            }
        })?;
        for event in events.iter() {
            let c = &mut conns[event.token().0];
            if event.is_writable() {
                flush(c)?;
            }
            if !event.is_readable() {
                continue;
            }
            // Edge-triggered: read until the socket is empty.
            if let Some(session) = &mut c.tls {
                let open = crate::tls::receive(session, &mut c.stream, &mut c.inbuf, &mut chunk)
                    .context("reading a reply over TLS")?;
                if !open {
                    bail!("server closed a connection");
                }
                crate::tls::send(session, &mut c.stream).context("TLS")?;
            } else {
                loop {
                    match c.stream.read(&mut chunk) {
                        Ok(0) => bail!("server closed a connection"),
                        Ok(n) => c.inbuf.extend_from_slice(&chunk[..n]),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => return Err(e).context("reading a reply"),
                    }
                }
            }
            let Some((reply, used)) = spec.wire.parse_reply(&c.inbuf, c.expect)? else {
                continue;
            };
            if used != c.inbuf.len() {
                bail!("server sent more than one reply to one request");
            }
            c.inbuf.clear();
            let done = Instant::now();
            if done >= window_start && done < window_end {
                result.ops += 1;
                stats::record(&mut result.histogram, done - c.sent_at);
                match reply {
                    Reply::Values { hits: 0 } => result.misses += 1,
                    Reply::Values { .. } | Reply::Ok => {}
                    Reply::Refused | Reply::Error => result.errors += 1,
                }
            }
            next_request(spec, c, &mut rng, &mut key, &value);
            flush(c)?;
        }
    }
    Ok(result)
}

fn next_request(spec: &LoadSpec, c: &mut Conn, rng: &mut Rng, key: &mut Vec<u8>, value: &[u8]) {
    key_name(key, &spec.key_prefix, spec.keys.next(rng));
    let set = match spec.mix {
        OpMix::Get => false,
        OpMix::Set => true,
        OpMix::Mix { set_percent } => rng.below(100) < u64::from(set_percent),
    };
    c.outbuf.clear();
    c.written = 0;
    if set {
        spec.wire.encode_set(&mut c.outbuf, key, value);
        c.expect = Expect::Status;
    } else {
        spec.wire.encode_get(&mut c.outbuf, key);
        c.expect = Expect::Values;
    }
    c.sent_at = Instant::now();
}

/// Writes what the socket takes; the rest goes out on the next writable event.
fn flush(c: &mut Conn) -> Result<()> {
    if let Some(session) = &mut c.tls {
        // The session takes the whole request (encrypted when written); what the
        // socket does not take waits in it for the next writable event.
        if c.written < c.outbuf.len() {
            session
                .writer()
                .write_all(&c.outbuf[c.written..])
                .context("encrypting a request")?;
            c.written = c.outbuf.len();
        }
        return crate::tls::send(session, &mut c.stream).context("sending a request");
    }
    while c.written < c.outbuf.len() {
        match c.stream.write(&c.outbuf[c.written..]) {
            Ok(n) => c.written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("sending a request"),
        }
    }
    Ok(())
}
