//! The servers under test: starting them, finding their address, stopping them.
//!
//! kura-bench starts every peer itself, on loopback, with its own port and (for
//! Kura) its own data directory on a real disk, so that one run measures all of
//! them under the same client on the same machine. A server given with `--server`
//! is measured as it is and left alone. A started server is killed when its
//! [`Backend`] is dropped, and by the signal handler if the run is interrupted.
//!
//! This file is what a backend is (its kind, protocol, launch record, lifecycle);
//! `backend/start.rs` starts each kind of server. Kura announces readiness with one
//! stdout line, `kura listening on <addr>`, after `kura sql listening on <addr>` when
//! its SQL port is on, read by `kura_testkit::wait_listening` as Kura's own tests read
//! it, so the two never drift apart.

use std::fmt;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kura_testkit::Log;

use crate::game::Layout;
use crate::proto::Wire;

mod start;

use start::{last_lines, start_kura, start_mariadb, start_memcached, start_redis};

/// Kura's durability modes, as its `--durability` flag spells them: testkit's, so that
/// tests and benchmarks spell them alike.
pub use kura_testkit::Durability;

/// Set once a signal has started the cleanup: errors the dying servers cause after
/// that are the interruption, not findings.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether the run was interrupted (the cleanup is under way or done).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Servers and data directories started by this process, for [`cleanup_on_signal`].
static STARTED: Mutex<Vec<(u32, Option<PathBuf>)>> = Mutex::new(Vec::new());

fn remember(child: &Child, data_dir: Option<&Path>) {
    if let Ok(mut started) = STARTED.lock() {
        started.push((child.id(), data_dir.map(Path::to_path_buf)));
    }
}

fn forget(pid: u32) {
    if let Ok(mut started) = STARTED.lock() {
        started.retain(|(p, _)| *p != pid);
    }
}

/// On SIGINT, SIGTERM or SIGHUP, kills every server still running and removes its
/// data directory and any memory cgroup made for it, then exits: otherwise an interrupted run would leave servers
/// (mariadbd ignores the terminal's SIGINT) and gigabytes of data behind.
pub fn cleanup_on_signal() -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("installing signal handlers")?;
    thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            INTERRUPTED.store(true, Ordering::SeqCst);
            let started = STARTED.lock().map(|s| s.clone()).unwrap_or_default();
            for (pid, dir) in started {
                signal_all(&[pid], "-KILL");
                if let Some(dir) = dir {
                    let _ = std::fs::remove_dir_all(dir);
                }
            }
            crate::cgroup::remove_all();
            eprintln!("kura-bench: interrupted (signal {signal}); stopped the servers it started");
            std::process::exit(128 + signal);
        }
    });
    Ok(())
}

/// The other backends' servers, stopped (`SIGSTOP`) while one is measured and
/// continued when this is dropped. The workloads start every backend of a run at once,
/// so without this a backend's window takes the others' background work: InnoDB
/// flushing the pages its load or its updates dirtied, Kura compacting and
/// checkpointing, the kernel writing back their dirty pages (`sync` waits for those
/// before the window).
pub struct Paused(Vec<u32>);

impl Paused {
    pub fn stop(pids: Vec<u32>) -> Paused {
        signal_all(&pids, "-STOP");
        let _ = Command::new("sync").status();
        Paused(pids)
    }

    /// Every server of `backends` but the `measured`th.
    pub fn all_but(backends: &[Backend], measured: usize) -> Paused {
        Paused::stop(
            backends
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != measured)
                .flat_map(|(_, b)| b.pids.iter().copied())
                .collect(),
        )
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal_all(&self.0, "-CONT");
    }
}

/// Sends `signal` to `pids` with kill(1): std has no kill(2) without unsafe.
fn signal_all(pids: &[u32], signal: &str) {
    if !pids.is_empty() {
        let _ = Command::new("kill")
            .arg(signal)
            .args(pids.iter().map(u32::to_string))
            .status();
    }
}

/// Which server a backend is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// `memcached`, started by kura-bench. `memcached2` starts a second one (a
    /// stand-in to check that two identical servers measure alike).
    Memcached { name: String },
    /// `kura-fsync`, `kura-interval`, `kura-none`, started by kura-bench.
    Kura(Durability),
    /// `kura-tables-fsync`, `kura-tables-interval`, `kura-tables-none`: Kura started
    /// with the game's players table (`game::TABLE_SCHEMA`), so the game reads rows
    /// through `@@players.<id>` and `@@players_by_email.<email>`.
    KuraTables(Durability),
    /// `mariadb`: a private mariadbd with its own data directory, port and socket,
    /// InnoDB with its defaults (a commit is fsynced), binary log off.
    Mariadb,
    /// `redis` (append-only file, fsync every second, like `kura-interval`) and
    /// `redis-always` (fsync before every reply, like `kura-fsync`).
    Redis(RedisFsync),
    /// `mariadb+memcached`: the seed's cache-aside setup, a private mariadbd with a
    /// memcached in front that the client reads first and fills on a miss.
    MariadbMemcached,
    /// `--server host:port`: already running, not ours to start or stop.
    External { addr: String },
    /// `<backend>-binary` (`memcached-binary`, `kura-interval-binary`, ...): that
    /// server, spoken to in memcached's binary protocol.
    Binary(Box<BackendKind>),
    /// `<backend>-tls` (`memcached-tls`, `kura-fsync-tls`, ...): that server with TLS
    /// on (`-Z`), spoken to over TLS (throughput only).
    Tls(Box<BackendKind>),
}

/// Redis's `appendfsync` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisFsync {
    EverySec,
    Always,
}

/// The protocol a backend speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Memcached,
    /// memcached's binary protocol.
    MemcachedBinary,
    /// memcached's text protocol over TLS: the throughput load and the preload speak
    /// it; the other workloads do not.
    MemcachedTls,
    /// memcached's protocol, and the game's rows in Kura's players table.
    MemcachedTables,
    Mysql,
    /// MySQL at the backend's address, with a memcached cache at `cache`.
    MysqlCacheAside {
        cache: SocketAddr,
    },
    Redis,
}

impl Protocol {
    /// The key-value wire protocol, for backends that have one.
    pub fn wire(self) -> Option<Wire> {
        match self {
            Protocol::Memcached | Protocol::MemcachedTables => Some(Wire::Memcached),
            Protocol::MemcachedBinary => Some(Wire::MemcachedBinary),
            Protocol::Redis => Some(Wire::Redis),
            Protocol::Mysql | Protocol::MysqlCacheAside { .. } | Protocol::MemcachedTls => None,
        }
    }

    /// The wire the throughput load and the preload speak: as [`Protocol::wire`],
    /// and memcached's text protocol inside TLS.
    pub fn load_wire(self) -> Option<Wire> {
        match self {
            Protocol::MemcachedTls => Some(Wire::Memcached),
            other => other.wire(),
        }
    }
}

impl BackendKind {
    /// Parses a `--backends` entry.
    pub fn parse(name: &str) -> Result<BackendKind> {
        if let Some(base) = name.strip_suffix("-tls") {
            let inner = BackendKind::parse(base)?;
            if !matches!(inner, BackendKind::Memcached { .. } | BackendKind::Kura(_)) {
                bail!("{name}: only memcached and kura-<durability> are measured with TLS");
            }
            return Ok(BackendKind::Tls(Box::new(inner)));
        }
        if let Some(base) = name.strip_suffix("-binary") {
            let inner = BackendKind::parse(base)?;
            if !matches!(inner, BackendKind::Memcached { .. } | BackendKind::Kura(_)) {
                bail!(
                    "{name}: only memcached and kura-<durability> speak the binary protocol here"
                );
            }
            return Ok(BackendKind::Binary(Box::new(inner)));
        }
        Ok(match name {
            "memcached" | "memcached2" => BackendKind::Memcached { name: name.to_string() },
            "kura-fsync" => BackendKind::Kura(Durability::Fsync),
            "kura-interval" => BackendKind::Kura(Durability::Interval),
            "kura-none" => BackendKind::Kura(Durability::None),
            "kura-tables-fsync" => BackendKind::KuraTables(Durability::Fsync),
            "kura-tables-interval" => BackendKind::KuraTables(Durability::Interval),
            "kura-tables-none" => BackendKind::KuraTables(Durability::None),
            "mariadb" => BackendKind::Mariadb,
            "mariadb+memcached" => BackendKind::MariadbMemcached,
            "redis" => BackendKind::Redis(RedisFsync::EverySec),
            "redis-always" => BackendKind::Redis(RedisFsync::Always),
            "kura" => bail!("say which durability: kura-fsync, kura-interval or kura-none"),
            other => bail!(
                "unknown backend {other:?}: expected memcached, memcached2, kura-fsync, \
                 kura-interval, kura-none, kura-tables-fsync, kura-tables-interval, \
                 kura-tables-none, mariadb, mariadb+memcached, redis or redis-always (use --server host:port for a running server)"
            ),
        })
    }

    pub fn name(&self) -> String {
        match self {
            BackendKind::Memcached { name } => name.clone(),
            BackendKind::Kura(d) => format!("kura-{}", d.flag()),
            BackendKind::KuraTables(d) => format!("kura-tables-{}", d.flag()),
            BackendKind::Mariadb => "mariadb".to_string(),
            BackendKind::MariadbMemcached => "mariadb+memcached".to_string(),
            BackendKind::Redis(RedisFsync::EverySec) => "redis".to_string(),
            BackendKind::Redis(RedisFsync::Always) => "redis-always".to_string(),
            BackendKind::External { addr } => format!("server@{addr}"),
            BackendKind::Binary(inner) => format!("{}-binary", inner.name()),
            BackendKind::Tls(inner) => format!("{}-tls", inner.name()),
        }
    }
}

/// Whether a started Kura serves its MySQL-protocol port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KuraSql {
    /// `--sql-port off`: the memcached port alone (every workload but `sql`).
    Off,
    /// `--sql-port 0`: a free port, read from Kura's `kura sql listening on` line.
    AnyPort,
}

/// Where and how to start servers.
#[derive(Clone, Debug)]
pub struct LaunchConfig {
    pub memcached_bin: PathBuf,
    pub kura_bin: PathBuf,
    /// Extra arguments for every Kura started (`--kura-arg`).
    pub kura_args: Vec<String>,
    /// Whether Kura serves SQL too.
    pub kura_sql: KuraSql,
    /// Parent of the per-run data directories; must be a real disk, not tmpfs.
    pub data_root: PathBuf,
    /// Worker threads for each server (`-t`).
    pub server_threads: u32,
    /// memcached's memory limit in MiB (`-m`).
    pub memcached_mem_mib: u32,
    /// The directory holding `mariadbd` and `mariadb-install-db`'s siblings.
    pub mariadbd_bin: PathBuf,
    /// InnoDB's buffer pool in MiB.
    pub mariadb_buffer_pool_mib: u32,
    /// Extra `mariadbd` arguments (the data-size workload shrinks its other caches).
    pub mariadb_args: Vec<String>,
    /// A cgroup every server joins before it executes (its `cgroup.procs` file), so
    /// all of its memory, from the first page, is charged to the cgroup's limit.
    pub cgroup_procs: Option<PathBuf>,
    /// TLS flags memcached and Kura are started with (`<backend>-tls`); empty
    /// otherwise.
    pub tls_server_args: Vec<String>,
}

/// How one server process was started: for reports, which record every command.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The backend (or part of one: `memcached-cache`) this process serves.
    pub role: String,
    /// Program and arguments exactly as executed (without the cgroup wrapper).
    pub command: Vec<String>,
    /// The first line of the program's version output.
    pub version: String,
    /// The cgroup it ran in, if any.
    pub cgroup: Option<PathBuf>,
}

impl Launch {
    /// Records `command` (built by [`server_command`]) before it is spawned;
    /// `version_flag` makes the program print its version.
    fn of(role: &str, command: &Command, config: &LaunchConfig, version_flag: &str) -> Launch {
        let mut words: Vec<String> = std::iter::once(command.get_program())
            .chain(command.get_args())
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        if config.cgroup_procs.is_some() {
            // sh -c SCRIPT PROCS-FILE PROGRAM ARGS...
            words.drain(..WRAPPER_WORDS.min(words.len()));
        }
        let version = words
            .first()
            .map(|program| program_version(Path::new(program), version_flag))
            .unwrap_or_default();
        Launch {
            role: role.to_string(),
            command: words,
            version,
            cgroup: config
                .cgroup_procs
                .as_ref()
                .and_then(|p| p.parent())
                .map(Path::to_path_buf),
        }
    }

    /// The command as one shell-quoted line.
    pub fn command_line(&self) -> String {
        self.command
            .iter()
            .map(|w| {
                if !w.is_empty()
                    && w.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
                {
                    w.clone()
                } else {
                    format!("'{}'", w.replace('\'', "'\\''"))
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Words `server_command` puts before the program when it wraps it.
const WRAPPER_WORDS: usize = 4;

/// A command for `program` that, with a cgroup configured, joins the cgroup first:
/// `sh -c 'echo $$ > PROCS; exec "$@"' PROCS PROGRAM ...`. The shell writes its
/// own PID, then becomes the server (same PID), so the server never runs outside
/// the cgroup and no memory it touches escapes the limit. (Moving a running server
/// would leave what it had allocated charged to the old cgroup.) Arguments added
/// to the returned command go to `program`.
fn server_command(program: &Path, config: &LaunchConfig) -> Command {
    match &config.cgroup_procs {
        Some(procs) => {
            let mut command = Command::new("sh");
            command
                .arg("-c")
                .arg(r#"echo $$ > "$0" && exec "$@""#)
                .arg(procs)
                .arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// The first line `program flag` prints, or why there is none.
pub fn program_version(program: &Path, flag: &str) -> String {
    match Command::new(program)
        .arg(flag)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => {
            let text = if out.stdout.is_empty() {
                out.stderr
            } else {
                out.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        }
        Err(e) => format!("unknown ({} {flag}: {e})", program.display()),
    }
}

/// A running memcached-protocol server's `version` reply.
fn version_over_wire(addr: SocketAddr) -> String {
    use std::io::Write as _;
    let asked = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).and_then(|mut s| {
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"version\r\n")?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line)?;
        Ok(line)
    });
    match asked {
        Ok(line) => line.trim().to_string(),
        Err(e) => format!("unknown (version: {e})"),
    }
}

/// A running server under test.
pub struct Backend {
    pub name: String,
    /// What was asked for, to start it anew.
    pub kind: BackendKind,
    pub addr: SocketAddr,
    /// The MySQL-protocol address: MariaDB's `addr`, or Kura's SQL port when it
    /// was started with one ([`KuraSql::AnyPort`]).
    pub sql_addr: Option<SocketAddr>,
    /// The server processes kura-bench started (for their CPU use); empty for
    /// `--server`.
    pub pids: Vec<u32>,
    /// How each server process of this backend was started, for reports.
    pub launches: Vec<Launch>,
    pub protocol: Protocol,
    /// The certificates a `<backend>-tls` was started with, which its clients trust.
    pub tls: Option<Arc<crate::tls::BenchTls>>,
    child: Option<Child>,
    /// A second server this backend consists of (the cache in cache-aside).
    companion: Option<Box<Backend>>,
    log: Option<Log>,
    _data_dir: Option<tempfile::TempDir>,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("name", &self.name)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Backend {
    /// Starts (or, for an external server, connects to) the backend.
    pub fn start(kind: &BackendKind, config: &LaunchConfig) -> Result<Backend> {
        match kind {
            BackendKind::Memcached { name } => start_memcached(name, config),
            BackendKind::Kura(durability) => start_kura(*durability, Layout::TwoKeys, config),
            BackendKind::KuraTables(durability) => start_kura(*durability, Layout::Table, config),
            BackendKind::Mariadb => start_mariadb(config),
            BackendKind::Redis(fsync) => start_redis(&kind.name(), *fsync, config),
            BackendKind::Tls(inner) => {
                let tls = crate::tls::BenchTls::shared(&config.data_root)?;
                let mut config = config.clone();
                config.tls_server_args = tls.server_args();
                let mut backend = Backend::start(inner, &config)?;
                backend.name = kind.name();
                backend.kind = kind.clone();
                backend.protocol = Protocol::MemcachedTls;
                backend.tls = Some(tls);
                for launch in &mut backend.launches {
                    launch.role = kind.name();
                }
                Ok(backend)
            }
            BackendKind::Binary(inner) => {
                let mut backend = Backend::start(inner, config)?;
                backend.name = kind.name();
                backend.kind = kind.clone();
                backend.protocol = Protocol::MemcachedBinary;
                for launch in &mut backend.launches {
                    launch.role = kind.name();
                }
                Ok(backend)
            }
            BackendKind::MariadbMemcached => {
                let mut db = start_mariadb(config)?;
                let cache = start_memcached("memcached-cache", config)?;
                db.name = kind.name();
                db.kind = kind.clone();
                db.protocol = Protocol::MysqlCacheAside { cache: cache.addr };
                db.pids.extend(cache.pids.iter().copied());
                db.launches.extend(cache.launches.iter().cloned());
                for (launch, part) in db.launches.iter_mut().zip(["MariaDB", "its cache"]) {
                    launch.role = format!("{}: {part}", kind.name());
                }
                db.companion = Some(Box::new(cache));
                Ok(db)
            }
            BackendKind::External { addr } => {
                let resolved = addr
                    .to_socket_addrs()
                    .with_context(|| format!("resolving {addr}"))?
                    .next()
                    .with_context(|| format!("{addr} resolves to no address"))?;
                TcpStream::connect_timeout(&resolved, Duration::from_secs(5))
                    .with_context(|| format!("connecting to --server {addr}"))?;
                Ok(Backend {
                    name: kind.name(),
                    kind: kind.clone(),
                    addr: resolved,
                    sql_addr: None,
                    pids: Vec::new(),
                    launches: vec![Launch {
                        role: kind.name(),
                        command: vec![format!("(already running at {addr})")],
                        version: version_over_wire(resolved),
                        cgroup: None,
                    }],
                    protocol: Protocol::Memcached,
                    tls: None,
                    child: None,
                    companion: None,
                    log: None,
                    _data_dir: None,
                })
            }
        }
    }

    /// Waits up to `timeout` for a server of this backend to have exited, and says
    /// how it ended; `None` if all are still running. For telling a server killed
    /// under a client (whose connection broke first) from a client error.
    pub fn exited_within(&mut self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(companion) = &mut self.companion {
                if let Some(how) = companion.exited_within(Duration::ZERO) {
                    return Some(how);
                }
            }
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    forget(child.id());
                    return Some(format!("{} {status}", self.name));
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the servers this backend started and starts them anew: a fresh process
    /// with an empty data directory (and a new port), to be loaded again. A server
    /// kura-bench did not start is left as it is.
    pub fn restart(&mut self, config: &LaunchConfig) -> Result<()> {
        if matches!(self.kind, BackendKind::External { .. }) {
            return Ok(());
        }
        self.stop();
        let kind = self.kind.clone();
        *self = Backend::start(&kind, config)?;
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(companion) = &mut self.companion {
            companion.stop();
        }
        if let Some(mut child) = self.child.take() {
            forget(child.id());
            // Errors here mean the process is already gone, which is what we want.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Fails if a server we started has exited: its figures would be meaningless.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(companion) = &mut self.companion {
            companion.check_alive()?;
        }
        if let Some(child) = &mut self.child {
            if let Some(status) = child.try_wait()? {
                forget(child.id());
                let tail = self.log.as_ref().map(last_lines).unwrap_or_default();
                bail!(
                    "{} exited ({status}) during the run; its last output:\n{tail}",
                    self.name
                );
            }
        }
        Ok(())
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_replaces_the_server_process() {
        let config = LaunchConfig {
            memcached_bin: PathBuf::from("/usr/bin/memcached"),
            kura_bin: PathBuf::from("target/release/kura"),
            kura_args: Vec::new(),
            kura_sql: KuraSql::Off,
            data_root: std::env::temp_dir(),
            server_threads: 1,
            memcached_mem_mib: 16,
            mariadbd_bin: PathBuf::from("/usr/sbin/mariadbd"),
            mariadb_buffer_pool_mib: 16,
            mariadb_args: Vec::new(),
            cgroup_procs: None,
            tls_server_args: Vec::new(),
        };
        let kind = BackendKind::parse("memcached").unwrap_or_else(|e| panic!("{e}"));
        let mut backend = Backend::start(&kind, &config)
            .unwrap_or_else(|e| panic!("starting memcached (scripts/install-peers.sh): {e:#}"));
        let old_pid = backend.pids.clone();
        backend
            .restart(&config)
            .unwrap_or_else(|e| panic!("restarting: {e:#}"));
        assert_eq!(backend.kind, kind);
        assert_ne!(backend.pids, old_pid);
        for pid in old_pid {
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "the old server {pid} is still there"
            );
        }
        backend
            .check_alive()
            .unwrap_or_else(|e| panic!("after restart: {e:#}"));
        TcpStream::connect(backend.addr).unwrap_or_else(|e| panic!("connecting: {e}"));
    }
}
