//! Failover driven step by step (`clusters/shard.rs`): a three-node shard with
//! `--min-sync-replicas 1` and two writers goes through a schedule of faults drawn
//! from a seed (SIGKILL of the primary or a replica and its restart, the primary
//! frozen past its lease and let run, etcd away, a planned switchover), settling
//! after each; at the end every node holds every acknowledged write. A failing
//! schedule runs again with the seed it printed (`KURA_SEED`).

#![allow(clippy::expect_used)]

mod clusters;
mod replicas;

use clusters::shard::Shard;
use rand::{Rng, SeedableRng};

/// Faults in one schedule: 15 to 45 s here.
const STEPS: usize = 8;

#[test]
fn a_schedule_of_faults_loses_no_acknowledged_write() {
    let seed = kura_testkit::crash_seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut shard = Shard::start("schedule");
    let mut applied = Vec::new();
    for _ in 0..STEPS {
        let possible = shard.possible();
        let fault = possible[rng.gen_range(0..possible.len())];
        eprintln!("step {}: {fault:?}", applied.len() + 1);
        shard.apply(fault);
        applied.push(fault);
    }
    let acked = shard.finish();
    eprintln!("seed {seed}: {applied:?}; {acked} writes acknowledged, all on every node");
}
