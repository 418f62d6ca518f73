//! kura-bench: the seed posts' benchmarks, run against Kura and its peers side by
//! side, over the network only.
//!
//! Every workload starts the backends it is asked for (memcached, Kura in each
//! durability mode, Redis, MariaDB, MariaDB with memcached in front, or a running
//! `--server`), measures them in one run with the same client, interleaving
//! backends so drift on a shared machine hits each alike, then prints tables and
//! writes a CSV, a chart (SVG and PNG) and a Markdown report recording the
//! machine, every server's command line and version, and Kura's ratios to its
//! peers. `datasize` puts each server in a memory cgroup and grows the data past
//! it; `sql` measures Kura's MySQL-protocol port against MariaDB over the same rows;
//! `full` runs everything and writes one combined report. It never links the
//! server's code: whatever it measures, it measures through a socket. See
//! `docs/bench.md`.

mod backend;
mod cgroup;
mod chart;
mod client;
mod cluster;
mod compaction;
mod datasize;
mod driver;
mod failover;
mod full;
mod game;
mod game_sql;
mod keys;
mod load;
mod machine;
mod multiget;
mod mysql;
mod progress;
mod proto;
mod replication;
mod report;
mod sql;
mod sql_kv;
mod stats;
mod store_fetch;
mod sysbench;
mod throughput;
mod tls;
mod window;

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use crate::backend::{Backend, BackendKind, LaunchConfig};

#[derive(Parser, Debug)]
#[command(
    name = "kura-bench",
    version,
    about = "Kura against its peers, side by side"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) workload: Workload,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Workload {
    /// Ops/s of get, set and a 90/10 mix over many connections.
    Throughput(throughput::ThroughputArgs),
    /// One client: S stores then F fetches, latency per op (seed 002).
    StoreFetch(store_fetch::StoreFetchArgs),
    /// Latency of one `get k1 ... kn` by n (seed 003).
    Multiget(multiget::MultigetArgs),
    /// Player row read, update, lookup by email: TPS by connections (seeds 000/001/004).
    Game(game::GameArgs),
    /// The game's TPS as the data grows past a memory limit put on each server (seed 000).
    Datasize(datasize::DatasizeArgs),
    /// Latency while Kura compacts its log, and the write amplification.
    Compaction(compaction::CompactionArgs),
    /// Kura's SQL port against MariaDB over the same rows: point selects, a range, an
    /// update; in memory and at ten times a memory limit.
    Sql(sql::SqlArgs),
    /// sysbench's OLTP workloads with its defaults against Kura's SQL port and MariaDB
    /// (runs scripts/sysbench.sh, pooling its runs).
    Sysbench(sysbench::SysbenchArgs),
    /// What a replica costs its primary (none, async, sync), its lag, and the time a
    /// full synchronisation takes.
    Replication(replication::ReplicationArgs),
    /// A shard of three Kura nodes in cluster mode through switchovers, cut links and
    /// SIGKILLs: time without a primary, writes refused, acknowledged writes lost.
    Failover(failover::FailoverArgs),
    /// Kura's shards on a ketama ring: 1, 2 and 4 shards straight and through
    /// nutcracker, growing 1 to 2 and 2 to 4 under load, a forwarded request's cost.
    Cluster(cluster::ClusterArgs),
    /// Everything above against every peer, one combined report (takes about an hour).
    Full(full::FullArgs),
}

/// Options every workload shares: which backends, where they live, where output goes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Backends to start, comma-separated: memcached, memcached2, kura-fsync,
    /// kura-interval, kura-none, redis, redis-always, mariadb (not throughput),
    /// mariadb+memcached (game and datasize). Default: memcached and every Kura mode (Kura is
    /// skipped with a note if its binary is absent), or none when --server is given.
    #[arg(long, value_delimiter = ',')]
    pub backends: Option<Vec<String>>,
    /// An already-running memcached-protocol server to measure too (repeatable).
    #[arg(long = "server", value_name = "HOST:PORT")]
    pub servers: Vec<String>,
    /// The Kura server binary.
    #[arg(long, default_value = "target/release/kura")]
    pub kura_bin: PathBuf,
    /// An extra argument for every Kura started, e.g. `--kura-arg=--fsync-interval-ms=10`
    /// (repeatable).
    #[arg(long = "kura-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub kura_args: Vec<String>,
    /// The memcached binary.
    #[arg(long, default_value = "/usr/bin/memcached")]
    pub memcached_bin: PathBuf,
    /// Where Kura's temporary data directories go: a real disk, never tmpfs.
    #[arg(long, default_value = "/var/tmp")]
    pub data_root: PathBuf,
    /// Worker threads for each started server (`-t`).
    #[arg(long, default_value_t = 4)]
    pub server_threads: u32,
    /// memcached's memory limit (`-m`) in MiB, for memcached backends and the cache
    /// in `mariadb+memcached`; set it below the data size to see a cache thrash.
    #[arg(long, default_value_t = 1024)]
    pub memcached_mem_mib: u32,
    /// InnoDB buffer pool for the `mariadb` backend, in MiB.
    #[arg(long, default_value_t = 1024)]
    pub mariadb_buffer_pool_mib: u32,
    /// Directory for the CSV files.
    #[arg(long, default_value = "target/kura-bench")]
    pub out_dir: PathBuf,
    /// A run that finishes in seconds: small key space, short windows, one repetition.
    #[arg(long)]
    pub tiny: bool,
    /// Seed for every random choice.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// Whether a workload can drive SQL backends (MariaDB) as well as memcached ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlBackends {
    Refused,
    Accepted,
}

impl Common {
    /// Starts every requested backend, in order; the caller owns them.
    pub fn start_backends(&self, sql: SqlBackends) -> Result<Vec<Backend>> {
        let kinds = self.backend_kinds(
            &["memcached", "kura-fsync", "kura-interval", "kura-none"],
            sql,
        )?;
        let config = self.launch_config();
        let mut backends = Vec::new();
        for kind in &kinds {
            let backend = Backend::start(kind, &config)?;
            eprintln!("started {} on {}", backend.name, backend.addr);
            backends.push(backend);
        }
        Ok(backends)
    }

    /// The backends `--backends` and `--server` name, or `defaults` (none when
    /// `--server` is given). Default Kura modes are skipped with a note when the
    /// Kura binary is absent; named ones are an error then, when started.
    pub fn backend_kinds(&self, defaults: &[&str], sql: SqlBackends) -> Result<Vec<BackendKind>> {
        let defaulted = self.backends.is_none();
        let names: Vec<String> = match &self.backends {
            Some(names) => names.clone(),
            None if !self.servers.is_empty() => Vec::new(),
            None => defaults.iter().map(|s| s.to_string()).collect(),
        };
        let mut kinds = Vec::new();
        for name in names.iter().filter(|n| !n.is_empty()) {
            let kind = BackendKind::parse(name)?;
            let is_sql = matches!(kind, BackendKind::Mariadb | BackendKind::MariadbMemcached);
            if is_sql && sql == SqlBackends::Refused {
                anyhow::bail!("the mariadb backend is not supported by this workload, so far");
            }
            let is_kura = matches!(kind, BackendKind::Kura(_) | BackendKind::KuraTables(_));
            if defaulted && is_kura && !self.kura_bin.exists() {
                eprintln!(
                    "note: skipping {name}: Kura binary {} not found (build it with \
                     `cargo build --release -p kura-server`)",
                    self.kura_bin.display()
                );
                continue;
            }
            kinds.push(kind);
        }
        kinds.extend(
            self.servers
                .iter()
                .map(|addr| BackendKind::External { addr: addr.clone() }),
        );
        if kinds.is_empty() {
            anyhow::bail!("no backends to measure");
        }
        Ok(kinds)
    }

    /// How servers are started, from these options.
    pub fn launch_config(&self) -> LaunchConfig {
        LaunchConfig {
            memcached_bin: self.memcached_bin.clone(),
            kura_bin: self.kura_bin.clone(),
            kura_args: self.kura_args.clone(),
            kura_sql: backend::KuraSql::Off,
            data_root: self.data_root.clone(),
            server_threads: self.server_threads,
            memcached_mem_mib: self.memcached_mem_mib,
            mariadbd_bin: PathBuf::from("/usr/sbin/mariadbd"),
            mariadb_buffer_pool_mib: self.mariadb_buffer_pool_mib,
            mariadb_args: Vec::new(),
            cgroup_procs: None,
            tls_server_args: Vec::new(),
        }
    }
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    backend::cleanup_on_signal()?;
    let result = match cli.workload {
        Workload::Throughput(args) => throughput::run(&args).and_then(report::Section::finish),
        Workload::StoreFetch(args) => store_fetch::run(&args).and_then(report::Section::finish),
        Workload::Multiget(args) => multiget::run(&args).and_then(report::Section::finish),
        Workload::Game(args) => game::run(&args).and_then(report::Section::finish),
        Workload::Datasize(args) => datasize::run(&args).and_then(report::Section::finish),
        Workload::Compaction(args) => compaction::run(&args).and_then(report::Section::finish),
        Workload::Sql(args) => sql::run(&args).and_then(report::Section::finish),
        Workload::Sysbench(args) => sysbench::run(&args).and_then(report::Section::finish),
        Workload::Replication(args) => replication::run(&args).and_then(report::Section::finish),
        Workload::Failover(args) => failover::run(&args).and_then(report::Section::finish),
        Workload::Cluster(args) => cluster::run(&args).and_then(report::Section::finish),
        Workload::Full(args) => full::run(&args),
    };
    if result.is_err() && backend::interrupted() {
        // The signal handler is stopping the servers, which broke the run's
        // connections: leave the exit (and its message) to it.
        std::thread::sleep(std::time::Duration::from_secs(30));
    }
    result
}
