//! The closed-loop client every multi-connection key-value workload runs on: the
//! throughput ops (`load.rs`) and the game's transactions (`game.rs`), and whatever
//! workload comes next.
//!
//! N connections are spread over T client threads. Each thread owns one epoll (via
//! mio) and its share of the connections, each with exactly one request in flight:
//! when a reply completes, its latency is recorded and the next request is written at
//! once. One thread per connection would cost a context switch per request on a
//! machine where the client and the server share two cores; a few threads each
//! serving many ready connections per `epoll_wait` spend that CPU on requests
//! instead, so the server, not the client, is what saturates first.
//!
//! The driver owns everything but the requests: the sockets (plain or TLS), the poll
//! loop, framing replies (one reply per request, in the backend's [`Wire`]), the
//! clock, the measurement [`Window`] and the tallies. What to send and what a reply
//! means is a [`Script`]'s: a request is a step of a transaction, which the script
//! ends as done, missed or failed. A throughput op is a one-step transaction; the
//! game's is three. Replies completing inside the window are counted: each step's
//! latency, and each transaction's from its first request to its last reply. CPU use
//! of this process and of the servers is sampled at the window's edges so a
//! client-bound result shows as such.
//!
//! Not for workloads whose client blocks (the SQL ones, one thread per connection):
//! they share [`measure`], the window and the CPU sampling, but not the loop.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

use crate::proto::{Expect, Reply, Wire};
use crate::stats::{self, CpuSample, CpuUse};
use crate::tls::BenchTls;
use crate::window::{sleep_until, Window};

/// What one connection sends, and what it makes of each reply: the workload's part of
/// the loop. One script serves all the connections of a client thread (so they share
/// its random numbers); each connection keeps its own [`Script::Conn`].
pub trait Script {
    /// One connection's place in its transaction (the game's player and the email its
    /// row named; nothing for a throughput op).
    type Conn: Default;
    /// Requests in a transaction, at most: one latency histogram each.
    const STEPS: usize;

    /// Writes the first request of a new transaction into `out`; what it expects back.
    fn begin(&mut self, conn: &mut Self::Conn, out: &mut Vec<u8>) -> Expect;

    /// Takes the complete reply to request `step` (from 0) of the transaction:
    /// `reply`, whose bytes are `bytes`. To go on, writes the next request into `out`
    /// and returns [`Next::Send`]; otherwise the transaction ends and the connection's
    /// next one begins. An error is a broken run, not a failed transaction.
    fn reply(
        &mut self,
        conn: &mut Self::Conn,
        step: usize,
        reply: Reply,
        bytes: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Next>;
}

/// What a script makes of a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The transaction goes on with the request written, expecting this.
    Send(Expect),
    /// The transaction is complete.
    Done,
    /// Complete, but what it read was not there (a get that found nothing): counted
    /// as a transaction and as a miss.
    Missed,
    /// Failed (an error reply, a refusal, a wrong answer) and abandoned: counted as a
    /// failure, not as a transaction.
    Failed,
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

/// How a measurement runs, beside its connections and scripts.
#[derive(Clone, Debug)]
pub struct Spec<'a> {
    pub wire: Wire,
    /// Client threads (at most one a connection).
    pub threads: usize,
    pub deal: Deal,
    /// When the threads send their first requests: the warm-up runs from here to
    /// `window.start`.
    pub start: Instant,
    pub window: Window,
    /// The servers whose CPU use is sampled.
    pub server_pids: &'a [u32],
}

/// What the replies inside the window added up to.
#[derive(Clone, Debug)]
pub struct Tally {
    /// Transactions completed ([`Next::Done`] or [`Next::Missed`]).
    pub transactions: u64,
    /// Of those, the ones that missed.
    pub misses: u64,
    /// Transactions that failed.
    pub failures: u64,
    /// Latency of every reply by its step, failed transactions' included.
    pub steps: Vec<Histogram<u64>>,
    /// Latency of completed transactions, first request to last reply.
    pub transaction: Histogram<u64>,
}

impl Tally {
    pub fn new(steps: usize) -> Result<Tally> {
        Ok(Tally {
            transactions: 0,
            misses: 0,
            failures: 0,
            steps: (0..steps)
                .map(|_| stats::new_histogram())
                .collect::<Result<_>>()?,
            transaction: stats::new_histogram()?,
        })
    }

    /// Adds another thread's tally to this one.
    pub fn add(&mut self, other: &Tally) -> Result<()> {
        self.transactions += other.transactions;
        self.misses += other.misses;
        self.failures += other.failures;
        for (mine, theirs) in self.steps.iter_mut().zip(&other.steps) {
            mine.add(theirs)?;
        }
        self.transaction.add(&other.transaction)?;
        Ok(())
    }
}

/// One measurement: the tally, how long the window ran, and the CPU use in it.
#[derive(Clone, Debug)]
pub struct Measured {
    pub tally: Tally,
    pub window: Duration,
    pub cpu: CpuUse,
}

/// A connected socket, and its TLS session when the load speaks TLS.
pub struct Opened {
    stream: StdTcpStream,
    tls: Option<rustls::ClientConnection>,
}

/// Opens `count` connections to `addr` (with their TLS handshakes, so that a
/// measurement times requests on open connections, never their setup).
pub fn open(addr: SocketAddr, count: usize, tls: Option<&BenchTls>) -> Result<Vec<Opened>> {
    let mut opened = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = StdTcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        let tls = match tls {
            Some(tls) => Some(tls.handshake(&mut stream)?),
            None => None,
        };
        stream.set_nonblocking(true)?;
        opened.push(Opened { stream, tls });
    }
    Ok(opened)
}

/// Runs the scripts (`script(t)` makes client thread t's) on `connections` as `spec`
/// says, and measures them.
pub fn run<S: Script + Send>(
    connections: Vec<Opened>,
    spec: &Spec,
    mut script: impl FnMut(usize) -> S,
) -> Result<Measured> {
    let count = connections.len();
    let threads = spec.threads.clamp(1, count.max(1));
    let mut shares: Vec<Vec<Opened>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, c) in connections.into_iter().enumerate() {
        // Servers hand accepted connections to their workers round-robin (memcached
        // and Kura both), so dealing them out round-robin here too pairs each client
        // thread with one server worker for the whole run: lockstep ping-pong pairs,
        // whose throughput on two cores swings from run to run with how the pairs are
        // placed. Dealing in blocks mixes them, and starves some connections instead.
        let thread = match spec.deal {
            Deal::Blocks => i * threads / count,
            Deal::RoundRobin => i % threads,
        };
        shares[thread].push(c);
    }
    let workers: Vec<_> = shares
        .into_iter()
        .enumerate()
        .map(|(t, share)| {
            let script = script(t);
            move || drive(spec, share, script)
        })
        .collect();
    let (tallies, window, cpu) = measure(&spec.window, spec.server_pids, workers)?;
    let mut tally = Tally::new(S::STEPS)?;
    for part in &tallies {
        tally.add(part)?;
    }
    Ok(Measured { tally, window, cpu })
}

/// Runs each of `workers` on a thread of its own while `window` runs, sampling the
/// CPU use of this process and of `server_pids` at the window's edges. Returns what
/// the workers returned (in order, once all have ended), how long the window ran, and
/// the CPU use in it. The workers themselves wait for their start and stop when the
/// window is over.
pub fn measure<T: Send, F: FnOnce() -> Result<T> + Send>(
    window: &Window,
    server_pids: &[u32],
    workers: Vec<F>,
) -> Result<(Vec<T>, Duration, CpuUse)> {
    thread::scope(|scope| {
        let handles: Vec<_> = workers.into_iter().map(|w| scope.spawn(w)).collect();
        sleep_until(window.start);
        let before = CpuSample::take(server_pids);
        let length = window.wait();
        let after = CpuSample::take(server_pids);
        let mut results = Vec::with_capacity(handles.len());
        let mut error = None;
        for h in handles {
            match h.join() {
                Ok(Ok(part)) => results.push(part),
                Ok(Err(e)) => error = error.or(Some(e)),
                Err(_) => error = error.or(Some(anyhow::anyhow!("a client thread panicked"))),
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok((results, length, CpuUse::between(before, after, length))),
        }
    })
}

/// One connection's state: at most one request in flight.
struct Conn<C> {
    stream: TcpStream,
    tls: Option<rustls::ClientConnection>,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    written: usize,
    expect: Expect,
    /// The request in flight's step in its transaction.
    step: usize,
    sent_at: Instant,
    /// When the transaction's first request was written.
    began_at: Instant,
    script: C,
}

impl<C> Conn<C> {
    /// Makes what the script just wrote the request in flight.
    fn sent(&mut self, expect: Expect) {
        self.written = 0;
        self.expect = expect;
        self.sent_at = Instant::now();
    }
}

/// One client thread: its connections, until the window is over.
fn drive<S: Script>(spec: &Spec, share: Vec<Opened>, mut script: S) -> Result<Tally> {
    let mut poll = Poll::new()?;
    let mut conns: Vec<Conn<S::Conn>> = share
        .into_iter()
        .map(|o| Conn {
            stream: TcpStream::from_std(o.stream),
            tls: o.tls,
            inbuf: Vec::with_capacity(4096),
            outbuf: Vec::with_capacity(4096),
            written: 0,
            expect: Expect::Status,
            step: 0,
            sent_at: spec.start,
            began_at: spec.start,
            script: S::Conn::default(),
        })
        .collect();
    for (i, c) in conns.iter_mut().enumerate() {
        poll.registry().register(
            &mut c.stream,
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
    }
    let window = &spec.window;
    let mut tally = Tally::new(S::STEPS)?;
    sleep_until(spec.start);
    for c in conns.iter_mut() {
        begin(&mut script, c);
        flush(c)?;
    }
    let mut events = Events::with_capacity(1024);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let now = Instant::now();
        if window.is_over(now) {
            break;
        }
        // At least a millisecond: a window waiting past its end for its first
        // transactions must not spin.
        let timeout = window
            .end
            .saturating_duration_since(now)
            .clamp(Duration::from_millis(1), Duration::from_millis(100));
        poll.poll(&mut events, Some(timeout)).or_else(|e| {
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
            receive(c, &mut chunk)?;
            let Some((reply, used)) = spec.wire.parse_reply(&c.inbuf, c.expect)? else {
                continue;
            };
            if used != c.inbuf.len() {
                bail!("server sent more than one reply to one request");
            }
            let done = Instant::now();
            let counted = window.contains(done);
            if counted {
                let histogram = tally
                    .steps
                    .get_mut(c.step)
                    .context("a script sent more steps than it declared")?;
                stats::record(histogram, done - c.sent_at);
            }
            c.outbuf.clear();
            let next = script.reply(&mut c.script, c.step, reply, &c.inbuf, &mut c.outbuf)?;
            c.inbuf.clear();
            match next {
                Next::Send(expect) => {
                    c.step += 1;
                    c.sent(expect);
                }
                Next::Done | Next::Missed | Next::Failed => {
                    if counted {
                        if next == Next::Failed {
                            tally.failures += 1;
                        } else {
                            window.count();
                            tally.transactions += 1;
                            tally.misses += u64::from(next == Next::Missed);
                            stats::record(&mut tally.transaction, done - c.began_at);
                        }
                    }
                    begin(&mut script, c);
                }
            }
            flush(c)?;
        }
    }
    Ok(tally)
}

/// Writes the first request of `c`'s next transaction.
fn begin<S: Script>(script: &mut S, c: &mut Conn<S::Conn>) {
    c.outbuf.clear();
    let expect = script.begin(&mut c.script, &mut c.outbuf);
    c.step = 0;
    c.sent(expect);
    c.began_at = c.sent_at;
}

/// Reads all the socket holds (it is edge-triggered) into `c.inbuf`.
fn receive<C>(c: &mut Conn<C>, chunk: &mut [u8]) -> Result<()> {
    if let Some(session) = &mut c.tls {
        let open = crate::tls::receive(session, &mut c.stream, &mut c.inbuf, chunk)
            .context("reading a reply over TLS")?;
        if !open {
            bail!("server closed a connection");
        }
        return crate::tls::send(session, &mut c.stream).context("TLS");
    }
    loop {
        match c.stream.read(chunk) {
            Ok(0) => bail!("server closed a connection"),
            Ok(n) => c.inbuf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("reading a reply"),
        }
    }
}

/// Writes what the socket takes; the rest goes out on the next writable event.
fn flush<C>(c: &mut Conn<C>) -> Result<()> {
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;

    use super::*;

    /// A memcached stand-in whose replies follow the key: `get k<n>` misses when
    /// n % 3 == 1, `set k<n>` is refused when n % 3 == 2. Serves `connections`
    /// connections, each until the client closes it.
    fn serve(listener: TcpListener, connections: usize) -> std::io::Result<()> {
        thread::scope(|scope| {
            let mut handles = Vec::new();
            for _ in 0..connections {
                let (stream, _) = listener.accept()?;
                handles.push(scope.spawn(move || match answer(&stream) {
                    // The client closes its connections with a request in flight.
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(()),
                    Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
                    other => other,
                }));
            }
            for h in handles {
                h.join().unwrap()?;
            }
            Ok(())
        })
    }

    /// Answers one connection's requests until the client closes it.
    fn answer(stream: &std::net::TcpStream) -> std::io::Result<()> {
        let number = |key: &str| -> u64 { key[1..].parse().unwrap() };
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        while reader.read_line(&mut line)? > 0 {
            let words: Vec<&str> = line.split_whitespace().collect();
            let reply = match words[..] {
                ["get", key] if number(key) % 3 == 1 => "END\r\n".to_string(),
                ["get", key] => format!("VALUE {key} 0 1\r\nv\r\nEND\r\n"),
                ["set", key, ..] => {
                    let mut data = String::new();
                    reader.read_line(&mut data)?;
                    if number(key) % 3 == 2 {
                        "NOT_STORED\r\n".to_string()
                    } else {
                        "STORED\r\n".to_string()
                    }
                }
                _ => panic!("unexpected request {line:?}"),
            };
            (&*stream).write_all(reply.as_bytes())?;
            line.clear();
        }
        Ok(())
    }

    /// Get `k<n>`, then set it: missed when the get finds nothing, failed when the
    /// set is refused.
    struct GetThenSet {
        next: u64,
    }

    impl Script for GetThenSet {
        type Conn = u64;
        const STEPS: usize = 2;

        fn begin(&mut self, n: &mut u64, out: &mut Vec<u8>) -> Expect {
            *n = self.next;
            self.next += 1;
            Wire::Memcached.encode_get(out, format!("k{n}").as_bytes());
            Expect::Values
        }

        fn reply(
            &mut self,
            n: &mut u64,
            step: usize,
            reply: Reply,
            _: &[u8],
            out: &mut Vec<u8>,
        ) -> Result<Next> {
            Ok(match (step, reply) {
                (0, Reply::Values { hits: 0 }) => Next::Missed,
                (0, _) => {
                    Wire::Memcached.encode_set(out, format!("k{n}").as_bytes(), b"v");
                    Next::Send(Expect::Status)
                }
                (_, Reply::Ok) => Next::Done,
                _ => Next::Failed,
            })
        }
    }

    #[test]
    fn every_counted_reply_is_tallied_once() {
        for deal in [Deal::Blocks, Deal::RoundRobin] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let server = thread::spawn(move || serve(listener, 3));
            let start = Instant::now() + Duration::from_millis(20);
            let spec = Spec {
                wire: Wire::Memcached,
                threads: 2,
                deal,
                start,
                window: Window::new(start, 0.05, 0.2, 10),
                server_pids: &[],
            };
            let connections = open(addr, 3, None).unwrap();
            let m = run(connections, &spec, |t| GetThenSet {
                next: t as u64 * 1_000_000,
            })
            .unwrap();
            server.join().unwrap().unwrap();
            let t = &m.tally;
            assert!(t.transactions >= 10, "{t:?}");
            assert!(
                t.misses > 0 && t.failures > 0 && t.misses < t.transactions,
                "{t:?}"
            );
            assert_eq!(t.transaction.len(), t.transactions);
            // A counted reply to the set ends its transaction inside the window too.
            assert_eq!(t.steps[1].len(), t.transactions - t.misses + t.failures);
            // Its get was counted too, unless it came back in the warm-up: at most
            // one such transaction a connection.
            assert!(t.steps[0].len() + 3 >= t.misses + t.steps[1].len(), "{t:?}");
            assert!(m.window >= Duration::from_millis(200));
        }
    }

    #[test]
    fn measure_returns_every_worker_or_the_first_error() {
        let start = Instant::now();
        let window = Window::new(start, 0.0, 0.01, 0);
        let workers: Vec<_> = (0..3).map(|i| move || Ok(i * 10)).collect();
        let (results, length, _) = measure(&window, &[], workers).unwrap();
        assert_eq!(results, vec![0, 10, 20]);
        assert_eq!(length, Duration::from_millis(10));
        let workers: Vec<_> = (0..3)
            .map(|i| {
                move || {
                    if i == 1 {
                        bail!("worker {i} broke")
                    } else {
                        Ok(i)
                    }
                }
            })
            .collect();
        let error = measure(&window, &[], workers).unwrap_err();
        assert_eq!(error.to_string(), "worker 1 broke");
    }
}
