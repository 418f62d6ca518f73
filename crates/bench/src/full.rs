//! `kura-bench full`: the whole comparison in one run, one report.
//!
//! Runs, in order, the in-memory game at connection counts 1 to 128, multi-get at
//! 1 to 50 keys, store/fetch, throughput, compaction (Kura only), the data-size workload up to ten
//! times a memory limit, and SQL over the same rows (Kura's SQL port against MariaDB, in
//! memory and at ten times a limit), each with its own defaults unless told otherwise, against
//! every peer each workload supports. Missing peers are installed first with
//! `scripts/install-peers.sh` (unless `--no-install`). Each workload writes its
//! own CSV, charts and report as usual; `full-<unix time>.md` then gathers them
//! all under one description of the machine. A workload that fails (an error, or
//! wrong answers) does not stop the others: the combined report says what failed
//! and the command exits non-zero at the end.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser};

use crate::report::{write_report, Section};
use crate::{
    compaction, datasize, game, multiget, sql, store_fetch, sysbench, throughput, Cli, Common,
    Workload,
};

#[derive(Args, Debug, Clone)]
pub struct FullArgs {
    /// Options for every workload. `--backends` names the backends of the in-memory
    /// workloads; each leaves out those it cannot drive (throughput: MariaDB;
    /// store-fetch and multiget: mariadb+memcached).
    #[command(flatten)]
    pub common: Common,
    /// Workloads to run, in order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "game,multiget,store-fetch,throughput,compaction,datasize,sql,sysbench"
    )]
    pub workloads: Vec<String>,
    /// Connection counts for the game.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128")]
    pub game_connections: Vec<usize>,
    /// Seconds measured per point of the game and throughput workloads (5 keeps a
    /// full run near half an hour on two cores; their own default is 10).
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Backends of the data-size workload.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "kura-fsync,kura-interval,mariadb,mariadb+memcached"
    )]
    pub datasize_backends: Vec<String>,
    /// The memory limit per backend of the data-size workload and of the SQL workload's
    /// limit setting, MiB.
    #[arg(long, default_value_t = 256)]
    pub mem_limit_mib: u64,
    /// The data-size workload's sizes, as multiples of the limit.
    #[arg(long, value_delimiter = ',', default_value = "0.5,1,2,5,10")]
    pub ratios: Vec<f64>,
    /// The data-size workload's player row, bytes. 1000, not the game's 300: each
    /// player is two keys, and at ten times the limit with 300-byte rows the keys
    /// alone (Kura keeps every key's 8-byte slot in memory, about 13.6 bytes a key
    /// with the table's slack) would take some 80% of the limit.
    #[arg(long, default_value_t = 1000)]
    pub datasize_row_size: usize,
    /// Backends of the SQL workload (Kura modes get their SQL port).
    #[arg(long, value_delimiter = ',', default_value = "kura-fsync,mariadb")]
    pub sql_backends: Vec<String>,
    /// Do not install missing peers; fail instead.
    #[arg(long)]
    pub no_install: bool,
    /// The script that installs the peers (run with bash, as root).
    #[arg(long, default_value = "scripts/install-peers.sh")]
    pub install_script: PathBuf,
}

/// Backends of the in-memory workloads when `--backends` is not given.
const DEFAULT_BACKENDS: [&str; 8] = [
    "memcached",
    "kura-fsync",
    "kura-interval",
    "kura-none",
    "redis",
    "redis-always",
    "mariadb",
    "mariadb+memcached",
];

/// What must be installed for the default full run: (path, what it is).
const PEERS: [(&str, &str); 5] = [
    ("/usr/bin/memcached", "memcached"),
    ("/usr/bin/redis-server", "redis-server"),
    ("/usr/sbin/mariadbd", "mariadb-server"),
    ("/usr/bin/mariadb-install-db", "mariadb-server"),
    (
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "fonts-dejavu-core (for PNG charts)",
    ),
];

/// A workload's own argument defaults, exactly as its subcommand would have them.
fn defaults(workload: &str) -> Result<Workload> {
    Ok(Cli::try_parse_from(["kura-bench", workload])
        .with_context(|| format!("default arguments of {workload}"))?
        .workload)
}

/// The in-memory backends `workload` can drive, of those asked for.
fn backends_for(workload: &str, asked: &[String]) -> Vec<String> {
    asked
        .iter()
        .filter(|name| match workload {
            "throughput" => !name.starts_with("mariadb"),
            "store-fetch" | "multiget" => name.as_str() != "mariadb+memcached",
            "compaction" => name.starts_with("kura"),
            _ => true,
        })
        .cloned()
        .collect()
}

fn install_missing(args: &FullArgs) -> Result<()> {
    let missing: Vec<&str> = PEERS
        .iter()
        .filter(|(path, _)| !Path::new(path).exists())
        .map(|(_, what)| *what)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if args.no_install {
        bail!(
            "missing: {} (run {} as root, or drop --no-install)",
            missing.join(", "),
            args.install_script.display()
        );
    }
    if !args.install_script.exists() {
        bail!(
            "missing: {}; and {} is not here to install them (run from the repository root, \
             or give --install-script)",
            missing.join(", "),
            args.install_script.display()
        );
    }
    eprintln!(
        "installing missing peers ({}) with {}",
        missing.join(", "),
        args.install_script.display()
    );
    let status = Command::new("bash")
        .arg(&args.install_script)
        .status()
        .with_context(|| format!("running {}", args.install_script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", args.install_script.display());
    }
    Ok(())
}

pub fn run(args: &FullArgs) -> Result<()> {
    install_missing(args)?;
    if !args.common.kura_bin.exists() {
        bail!(
            "Kura binary {} not found: build it with `cargo build --release -p kura-server` \
             or point --kura-bin at it",
            args.common.kura_bin.display()
        );
    }
    let asked: Vec<String> = args
        .common
        .backends
        .clone()
        .unwrap_or_else(|| DEFAULT_BACKENDS.map(String::from).to_vec());
    let mut sections: Vec<Section> = Vec::new();
    for workload in &args.workloads {
        eprintln!("\n=== kura-bench full: {workload}");
        let mut common = args.common.clone();
        common.backends = Some(backends_for(workload, &asked));
        let outcome = match (workload.as_str(), defaults(workload)?) {
            ("game", Workload::Game(mut a)) => {
                a.common = common;
                a.connections = args.game_connections.clone();
                a.duration = args.duration;
                game::run(&a)
            }
            ("multiget", Workload::Multiget(mut a)) => {
                a.common = common;
                multiget::run(&a)
            }
            ("store-fetch", Workload::StoreFetch(mut a)) => {
                a.common = common;
                store_fetch::run(&a)
            }
            ("compaction", Workload::Compaction(mut a)) => {
                a.common = common;
                compaction::run(&a)
            }
            ("throughput", Workload::Throughput(mut a)) => {
                a.common = common;
                a.duration = args.duration;
                throughput::run(&a)
            }
            ("datasize", Workload::Datasize(mut a)) => {
                common.backends = Some(args.datasize_backends.clone());
                a.common = common;
                a.mem_limit_mib = args.mem_limit_mib;
                a.ratios = args.ratios.clone();
                a.row_size = args.datasize_row_size;
                datasize::run(&a)
            }
            ("sql", Workload::Sql(mut a)) => {
                common.backends = Some(args.sql_backends.clone());
                a.common = common;
                a.mem_limit_mib = args.mem_limit_mib;
                sql::run(&a)
            }
            ("sysbench", Workload::Sysbench(mut a)) => {
                a.common = common;
                sysbench::run(&a)
            }
            (other, _) => bail!(
                "unknown workload {other:?} for full: expected game, multiget, store-fetch, \
                 throughput, compaction, datasize, sql or sysbench"
            ),
        };
        let section = match outcome {
            Ok(section) => {
                let own = section.csv.with_extension("md");
                write_report(&own, &section.workload, std::slice::from_ref(&section))?;
                println!("wrote {}", own.display());
                section
            }
            Err(e) if crate::backend::interrupted() => return Err(e),
            Err(e) => {
                eprintln!("kura-bench full: {workload} failed: {e:#}");
                let (mut failed, _) = Section::begin(workload, &args.common.data_root);
                failed.summary = "Did not complete.".to_string();
                failed.failure = Some(format!("{e:#}"));
                failed
            }
        };
        sections.push(section);
    }
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    std::fs::create_dir_all(&args.common.out_dir)
        .with_context(|| format!("creating {}", args.common.out_dir.display()))?;
    let path = args.common.out_dir.join(format!("full-{stamp}.md"));
    write_report(&path, "full comparison", &sections)?;
    println!("\nwrote {}", path.display());
    let failed: Vec<String> = sections
        .iter()
        .filter_map(|s| s.failure.as_ref().map(|f| format!("{}: {f}", s.workload)))
        .collect();
    if !failed.is_empty() {
        bail!(
            "{} workload(s) failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn each_workload_gets_the_backends_it_can_drive() {
        let all: Vec<String> = DEFAULT_BACKENDS.map(String::from).to_vec();
        assert_eq!(backends_for("game", &all), all);
        let throughput = backends_for("throughput", &all);
        assert!(throughput.iter().all(|b| !b.starts_with("mariadb")));
        assert!(throughput.contains(&"kura-fsync".to_string()));
        let multiget = backends_for("multiget", &all);
        assert!(multiget.contains(&"mariadb".to_string()));
        assert!(!multiget.contains(&"mariadb+memcached".to_string()));
    }

    #[test]
    fn defaults_are_the_subcommands_own() {
        let Workload::Game(game) = defaults("game").unwrap() else {
            panic!("not the game's arguments");
        };
        assert_eq!(game.players, 100_000);
        assert!(defaults("nonsense").is_err());
    }
}
