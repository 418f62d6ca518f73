//! The throughput load: gets, sets or a mix of keys drawn from a preloaded key
//! space, each op a one-request transaction of the closed-loop [`driver`], and the
//! preloading that fills the key space first.
//!
//! Time is split into a warm-up (replies counted nowhere) and a measured window of
//! fixed length (replies completing inside it are counted and their latencies
//! recorded). An error reply or a set not stored still counts as an op, and as an
//! error; a get that finds nothing counts as an op and as a miss.

use std::net::SocketAddr;
use std::ops::Range;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;

use crate::backend::Backend;
use crate::client::Client;
use crate::driver::{self, Deal, Next, Script};
use crate::keys::{key_name, value_bytes, KeyChooser, Rng};
use crate::progress::Progress;
use crate::proto::{Expect, Reply, Wire};
use crate::stats;
use crate::window::Window;

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
    in_shares(0..keys, connections, |c, range| {
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
    })
}

/// Splits `ids` into `shares` runs of consecutive ids (the last may be shorter, or
/// empty) and calls `work(share, run)` for each on a thread of its own: how every
/// workload loads its data over several connections. Waits for all of them; the
/// first error (in share order) is the result.
pub fn in_shares(
    ids: Range<u64>,
    shares: u64,
    work: impl Fn(u64, Range<u64>) -> Result<()> + Sync,
) -> Result<()> {
    let shares = shares.max(1);
    let per = (ids.end - ids.start).div_ceil(shares);
    let work = &work;
    thread::scope(|scope| {
        let handles: Vec<_> = (0..shares)
            .map(|share| {
                let from = (ids.start + share * per).min(ids.end);
                let run = from..(from + per).min(ids.end);
                scope.spawn(move || work(share, run))
            })
            .collect();
        let mut first = Ok(());
        for h in handles {
            let result = h
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a loading thread panicked")));
            if first.is_ok() {
                first = result;
            }
        }
        first
    })
}

/// Runs one load and measures it.
pub fn run(spec: &LoadSpec, server_pids: &[u32]) -> Result<LoadResult> {
    let connections = driver::open(spec.addr, spec.connections, spec.tls.as_deref())?;
    // Threads start together a little after all connections are up.
    let start = Instant::now() + Duration::from_millis(20);
    let window = Window::new(
        start,
        spec.warmup.as_secs_f64(),
        spec.duration.as_secs_f64(),
        0,
    );
    let driven = driver::Spec {
        wire: spec.wire,
        threads: spec.threads,
        deal: spec.deal,
        start,
        window,
        server_pids,
    };
    let measured = driver::run(connections, &driven, |t| {
        let seed = spec.seed.wrapping_add(t as u64 * 7919);
        Ops {
            spec,
            rng: Rng::new(seed),
            key: Vec::with_capacity(64),
            value: value_bytes(spec.value_len, seed),
        }
    })?;
    let tally = measured.tally;
    let histogram = tally
        .steps
        .into_iter()
        .next()
        .context("a load has one step")?;
    Ok(LoadResult {
        // An error reply is an op too: it took the server a request.
        ops: tally.transactions + tally.failures,
        window: measured.window,
        histogram,
        misses: tally.misses,
        errors: tally.failures,
        cpu: measured.cpu,
    })
}

/// One client thread's ops: each a transaction of one request, a get or a set of a
/// key drawn from the key space.
struct Ops<'a> {
    spec: &'a LoadSpec,
    rng: Rng,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl Script for Ops<'_> {
    type Conn = ();
    const STEPS: usize = 1;

    fn begin(&mut self, _: &mut (), out: &mut Vec<u8>) -> Expect {
        let spec = self.spec;
        key_name(
            &mut self.key,
            &spec.key_prefix,
            spec.keys.next(&mut self.rng),
        );
        let set = match spec.mix {
            OpMix::Get => false,
            OpMix::Set => true,
            OpMix::Mix { set_percent } => self.rng.below(100) < u64::from(set_percent),
        };
        if set {
            spec.wire.encode_set(out, &self.key, &self.value);
            Expect::Status
        } else {
            spec.wire.encode_get(out, &self.key);
            Expect::Values
        }
    }

    fn reply(
        &mut self,
        _: &mut (),
        _: usize,
        reply: Reply,
        _: &[u8],
        _: &mut Vec<u8>,
    ) -> Result<Next> {
        Ok(outcome(reply))
    }
}

/// What a get's or a set's reply makes of its op: a miss, done, or failed (a set not
/// stored, an error reply).
pub(crate) fn outcome(reply: Reply) -> Next {
    match reply {
        Reply::Values { hits: 0 } => Next::Missed,
        Reply::Values { .. } | Reply::Ok => Next::Done,
        Reply::Refused | Reply::Error => Next::Failed,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn shares_cover_every_id_once_in_order() {
        for (ids, shares) in [(0..10, 3), (5..6, 4), (0..0, 2), (100..1100, 16), (0..7, 0)] {
            let seen = Mutex::new(Vec::new());
            in_shares(ids.clone(), shares, |share, run| {
                seen.lock().unwrap().push((share, run));
                Ok(())
            })
            .unwrap();
            let mut seen = seen.into_inner().unwrap();
            seen.sort_by_key(|(share, _)| *share);
            assert_eq!(seen.len() as u64, shares.max(1), "{ids:?} in {shares}");
            let all: Vec<u64> = seen.into_iter().flat_map(|(_, run)| run).collect();
            assert_eq!(all, ids.collect::<Vec<_>>());
        }
    }

    #[test]
    fn the_first_share_to_fail_is_the_error() {
        let result = in_shares(0..8, 4, |share, _| {
            if share >= 1 {
                bail!("share {share} failed")
            }
            Ok(())
        });
        assert_eq!(result.unwrap_err().to_string(), "share 1 failed");
    }
}
