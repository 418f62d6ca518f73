//! The `kura` binary: flags, the store, the listener, signals.

mod acks;
mod auth;
mod backup;
mod binary;
mod cluster;
mod config;
mod dispatch;
mod memory;
mod metrics;
mod reader;
mod semantics;
mod server;
mod slabs;
mod sql;
mod startup;
mod stats;
mod stats_reply;
mod sync_replies;
mod tables;
mod tls;
mod uring;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use kura_engine::{CoarseClock, Durability, Options, Store};
use kura_protocol::Limits;
use kura_replication as replication;
use kura_tables::Tables;
use tokio::sync::watch;

use crate::config::{Config, DurabilityFlag};
use crate::server::Shared;
use crate::stats::{Connections, CounterSet, PrefixStats};

fn main() -> anyhow::Result<()> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "config") && args.get(2).is_some_and(|a| a == "check") {
        let rest: Vec<_> = args
            .iter()
            .take(1)
            .chain(args.iter().skip(3))
            .cloned()
            .collect();
        print!("{}", Config::check(&rest)?);
        // The start's own validation: what start would refuse, check refuses.
        startup::prepare(&Config::load(&rest)?)?;
        return Ok(());
    }
    if let Some(done) = backup::command(&args) {
        return done;
    }
    if let Some(done) = cluster::command(&args) {
        return done;
    }
    let config = Config::load(&args)?;
    start_logging(&config);
    // Before anything is opened: a setting it refuses leaves the data directory alone.
    let prepared = startup::prepare(&config)?;
    // Room for -c connections plus the log, the listener and the runtime's own files.
    raise_open_files_limit(config.connections_max as u64 + 64);
    let durability = match config.durability {
        DurabilityFlag::Fsync => Durability::Fsync,
        DurabilityFlag::Interval => Durability::Interval,
        DurabilityFlag::None => Durability::None,
    };
    let acks = Arc::new(acks::Acks::new());
    let clock = CoarseClock::start().context("starting the clock thread")?;
    let mut options = Options::new(durability, clock);
    options.fsync_interval = config.fsync_interval();
    options.segment_size_bytes = config.segment_size_mib.max(1) << 20;
    options.memory_limit_bytes = config.memory_limit_mib.saturating_mul(1 << 20);
    // The tables' rows are kept in key order too: every primary key is read by range.
    options.ordered_spaces = kura_tables::ordered_spaces();
    // The ordered keyspace's page cache: an eighth of the budget, at most 64 MiB. It
    // is part of what the process holds beyond the index and the values, which the
    // budget measures (`memory.rs`).
    options.ordered_cache_bytes = match options.memory_limit_bytes {
        0 => 64 << 20,
        limit => (limit / 8).clamp(1 << 20, 64 << 20),
    };
    options.on_ack = Some(Arc::new({
        let acks = Arc::clone(&acks);
        move |ack| acks.publish(ack)
    }));
    options.on_synced = Some(Arc::new({
        let acks = Arc::clone(&acks);
        move |lsn| acks.synced.publish(lsn)
    }));
    // A replica stays one across restarts: a second primary of one history would
    // take changes the first never sees.
    let replica_of = match &config.replica_of {
        Some(primary) => Some(primary.clone()),
        // In a cluster etcd says whom to follow (`cluster.rs`).
        None if cluster::enabled(&config) => None,
        None => replication::Replication::remembered_primary(&config.data_dir)
            .with_context(|| format!("reading {}", config.data_dir.display()))?,
    };
    options.read_only = replica_of.clone();
    if cluster::enabled(&config) {
        // Nothing is taken until the node wins its shard's election.
        options.read_only = Some(cluster::ELECTING.to_string());
    }
    let opened = Instant::now();
    let store = Store::open_dir(&config.data_dir, options)
        .with_context(|| format!("opening data directory {}", config.data_dir.display()))?;
    let store = Arc::new(store);
    let tables = Tables::open(Arc::clone(&store)).context("reading the tables' catalog")?;
    if let (Some(path), Some(primary)) = (&config.schema, &replica_of) {
        tracing::info!(
            "not applying {}: a replica takes its tables from its primary {primary}",
            path.display()
        );
    } else if let Some(path) = &config.schema {
        let sql = std::fs::read_to_string(path)
            .with_context(|| format!("reading schema {}", path.display()))?;
        let created = tables
            .apply_schema(&sql)
            .with_context(|| format!("schema {}", path.display()))?;
        for name in created {
            tracing::info!("created table {name}");
        }
    }
    if config.verbose > 0 {
        let stats = store.stats();
        tracing::info!(
            "recovered {} items from {} log records in {:?} ({} bytes cut)",
            stats.curr_items,
            stats.recovered_records,
            opened.elapsed(),
            stats.recovery_cut_bytes
        );
    }
    // This runtime only accepts connections and waits for signals; each worker thread
    // runs its own (see server::serve).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(run(config, prepared, store, tables, acks, replica_of))
}

async fn run(
    config: Config,
    prepared: startup::Prepared,
    store: Arc<Store>,
    tables: Tables,
    acks: Arc<acks::Acks>,
    replica_of: Option<String>,
) -> anyhow::Result<()> {
    let startup::Prepared {
        users,
        sql_users,
        replication_login,
        tls_settings,
        tls,
        metrics_token,
    } = prepared;
    let sql_listener = match (config.sql_port.0, sql_users) {
        (Some(port), Some(users)) => {
            let addr = format!("{}:{port}", config.listen);
            let listener = std::net::TcpListener::bind(&addr).with_context(|| {
                format!("SQL port: listening on {addr} (--sql-port off serves no SQL)")
            })?;
            Some((listener, users))
        }
        _ => None,
    };
    let addr = format!("{}:{}", config.listen, config.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    let listen_addr: SocketAddr = listener.local_addr()?;
    let sql_addr = match &sql_listener {
        Some((listener, _)) => Some(listener.local_addr()?),
        None => None,
    };
    let limits = Limits {
        key_max_bytes: 250,
        item_size_max_bytes: config.item_size_max_bytes,
    };
    let tls_replication = tls_settings.filter(|_| config.tls_replication);
    let shared = Arc::new(Shared {
        users,
        store,
        tables: Arc::new(tables),
        limits,
        counters: CounterSet::new(config.threads.max(1)),
        prefixes: PrefixStats::default(),
        connections: Connections::default(),
        started: Instant::now(),
        acks,
        verbosity: AtomicU64::new(u64::from(config.verbose)),
        reader: reader::ValueReader::start(config.read_threads).context("starting readers")?,
        stopping: AtomicBool::new(false),
        listen_addr,
        sql_addr,
        replication: replication::Replication::new(
            &config.data_dir,
            replication_login,
            tls_replication
                .clone()
                .map(|t| Box::new(t) as Box<dyn replication::ClientTls>),
            replication::Settings {
                min_sync_replicas: config.min_sync_replicas,
                replica_linger_ms: config.replica_linger_ms,
                replica_backlog_mib: config.replica_backlog_mib,
                advertise: config.advertise.clone(),
                in_cluster: cluster::enabled(&config),
            },
        ),
        tls,
        tls_replication,
        cluster: cluster::Status::default(),
        forwarder: cluster::Forwarder::default(),
        config,
    });
    shared
        .replication
        .bind(&(Arc::clone(&shared) as Arc<dyn replication::Node>));
    if let Some(primary) = replica_of {
        shared
            .replication
            .follow(primary.clone())
            .with_context(|| format!("following {primary}"))?;
        tracing::info!("a replica of {primary}");
    } else if cluster::enabled(&shared.config) {
        cluster::start(Arc::clone(&shared));
    } else if let Some(old_primary) = replication::fence::remembered(&shared.config.data_dir)
        .with_context(|| format!("reading {}", shared.config.data_dir.display()))?
    {
        shared
            .replication
            .start_fencing(old_primary.clone())
            .with_context(|| format!("fencing {old_primary}"))?;
    }
    if let Some((listener, users)) = sql_listener {
        let addr = listener.local_addr()?;
        sql::serve(listener, Arc::clone(&shared), Arc::new(users))?;
        println!("kura sql listening on {addr}");
    }
    if let Some(port) = shared.config.metrics_port {
        let addr = format!("{}:{port}", shared.config.metrics_listen);
        let listener = std::net::TcpListener::bind(&addr)
            .with_context(|| format!("metrics: listening on {addr}"))?;
        let bound = listener.local_addr()?;
        metrics::serve(listener, Arc::clone(&shared), metrics_token)?;
        println!("kura metrics listening on {bound}");
    }
    // The handlers are in place before anyone is told the server is up: a SIGTERM or
    // SIGHUP that arrived before them would end the process by the default action,
    // without the final sync.
    let stop_signals = StopSignals::install();
    let hangups = {
        use tokio::signal::unix::{signal, SignalKind};
        signal(SignalKind::hangup())
    };
    // Tests and scripts read the port from this line (after the SQL port's).
    println!("kura listening on {listen_addr}");
    // systemd (Type=notify): recovered and listening. Nothing happens without
    // NOTIFY_SOCKET.
    notify(sd_notify::NotifyState::Ready);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    tokio::spawn(async move {
        stop_signals.wait().await;
        notify(sd_notify::NotifyState::Stopping);
        tracing::info!("stopping: finishing the replies in hand");
        let _ = shutdown_tx.send(true);
    });
    // SIGHUP: read the users file again (memcached rereads its auth file so), and the
    // certificates (memcached's `refresh_certs`).
    let reloading = Arc::clone(&shared);
    tokio::spawn(async move {
        let Ok(mut hangups) = hangups else {
            return;
        };
        while hangups.recv().await.is_some() {
            if let Some(users) = &reloading.users {
                users.reload();
            }
            if let Some(tls) = &reloading.tls {
                match tls.reload() {
                    Ok(()) => tracing::info!("TLS certificates reloaded"),
                    Err(e) => {
                        tracing::error!("TLS certificates not reloaded, the old ones stay: {e}")
                    }
                }
            }
        }
    });
    let maintenance = server::start_maintenance(Arc::clone(&shared))?;
    // Versions that were in memory at the checkpoint come back while requests are
    // served.
    let warming = Arc::clone(&shared);
    std::thread::Builder::new()
        .name("kura-warm".to_string())
        .spawn(move || {
            let warmed = warming.store.warm_cache();
            if warmed > 0 {
                tracing::info!("{warmed} versions back in memory from the checkpoint");
            }
        })?;
    // Returns once every connection has finished or been cut off, `stopping` set.
    server::serve(listener, Arc::clone(&shared), shutdown_rx).await;
    // Stop maintenance, make the log durable and stop.
    maintenance.thread().unpark();
    let _ = tokio::task::spawn_blocking(move || maintenance.join()).await;
    // The next start reads this instead of the whole log.
    if shared.config.checkpoint_secs > 0 {
        if let Err(e) = shared.store.checkpoint() {
            tracing::error!("checkpoint at shutdown failed: {e}");
        }
    }
    shared.store.shutdown();
    tracing::info!("shut down cleanly");
    Ok(())
}

/// Tells systemd (through `NOTIFY_SOCKET`, when it is set) how the service stands.
fn notify(state: sd_notify::NotifyState<'_>) {
    if let Err(e) = sd_notify::notify(false, &[state]) {
        tracing::warn!("telling systemd: {e}");
    }
}

/// Log lines go to stderr, as text or JSON (`--log-format`); `-v` adds debug lines,
/// `-vv` trace. No line carries a value or a password.
fn start_logging(config: &Config) {
    let level = match config.verbose {
        0 => tracing::Level::INFO,
        1 => tracing::Level::DEBUG,
        _ => tracing::Level::TRACE,
    };
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .with_ansi(false)
        .with_target(false);
    let installed = match config.log_format {
        config::LogFormat::Text => builder.try_init(),
        config::LogFormat::Json => builder.json().try_init(),
    };
    if let Err(e) = installed {
        eprintln!("kura: logging could not start: {e}");
    }
}

/// SIGTERM and SIGINT, which stop the server gracefully.
struct StopSignals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl StopSignals {
    /// Installs the handlers (inside the runtime).
    fn install() -> StopSignals {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => StopSignals(Some((term, int))),
            _ => StopSignals(None),
        }
    }

    /// Until one of them arrives.
    async fn wait(self) {
        let Some((mut term, mut int)) = self.0 else {
            // Without signal handlers the process still dies on SIGTERM, without the
            // final sync.
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}

/// Raises the soft limit on open files to `wanted` (capped by the hard limit), as
/// memcached does for its `-c`: a default of 1024 would refuse connections long before
/// the configured maximum.
#[allow(unsafe_code)]
fn raise_open_files_limit(wanted: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` into a struct this frame owns.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    if limit.rlim_cur >= wanted {
        return;
    }
    let raised = libc::rlimit {
        rlim_cur: wanted.min(limit.rlim_max),
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit reads one `rlimit` from a struct this frame owns.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        tracing::warn!("could not raise the open-files limit to {wanted}");
    }
}
