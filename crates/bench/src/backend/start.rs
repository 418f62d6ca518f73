//! Starting each kind of server kura-bench measures: memcached, Kura, Redis and
//! MariaDB, each on loopback with its own port and (but memcached) its own data
//! directory under `--data-root`, on a real disk.
//!
//! Kura picks its own port and says so (kura-testkit's [`wait_listening`] reads it);
//! memcached, Redis and MariaDB are given a free port and polled until they accept
//! (retried when another process took the port meanwhile). Every server runs inside
//! `--data-root`'s cgroup when one is configured ([`server_command`]), is registered
//! for the signal cleanup as soon as it is spawned, and has its output drained into a
//! [`Log`] for as long as it runs.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kura_testkit::{drain, wait_listening, Log};

use super::{
    forget, remember, server_command, Backend, BackendKind, Durability, KuraSql, Launch,
    LaunchConfig, Protocol, RedisFsync,
};
use crate::game::Layout;

/// The last lines a server wrote (its log keeps more), for error messages.
pub(super) fn last_lines(log: &Log) -> String {
    let text = log.snapshot();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a probe socket")?;
    Ok(listener.local_addr()?.port())
}

/// A server that cannot pick its own port and say which, just started.
struct Started {
    child: Child,
    addr: SocketAddr,
    launch: Launch,
    log: Log,
}

impl Started {
    /// The backend this server is; MariaDB's address is its SQL address too.
    fn backend(
        self,
        name: &str,
        kind: BackendKind,
        protocol: Protocol,
        data_dir: Option<tempfile::TempDir>,
    ) -> Backend {
        Backend {
            name: name.to_string(),
            kind,
            addr: self.addr,
            sql_addr: (protocol == Protocol::Mysql).then_some(self.addr),
            pids: vec![self.child.id()],
            launches: vec![self.launch],
            protocol,
            tls: None,
            child: Some(self.child),
            companion: None,
            log: Some(self.log),
            _data_dir: data_dir,
        }
    }
}

/// How such a server is started and told ready.
struct OnFreePort<'a> {
    /// The program, for messages: `memcached`, `redis-server`, `mariadbd`.
    what: &'a str,
    /// The backend it serves, for its launch record.
    role: &'a str,
    /// The flag that makes it print its version.
    version_flag: &'a str,
    /// Its data directory, which the signal cleanup removes.
    data_dir: Option<&'a Path>,
    /// How long it may take to be ready, and how often to ask.
    within: Duration,
    every: Duration,
}

/// Starts the server `command(port)` makes for a free loopback port and waits until
/// `ready(addr)`. The port can be taken between the probe and the server's bind: a
/// server that exits at start is tried again on another port, five times at most.
fn start_on_free_port(
    how: &OnFreePort,
    config: &LaunchConfig,
    command: impl Fn(u16) -> Command,
    ready: impl Fn(SocketAddr) -> bool,
) -> Result<Started> {
    let what = how.what;
    let mut last_error = String::new();
    for _ in 0..5 {
        let port = free_port()?;
        let log = Log::default();
        let mut command = command(port);
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let launch = Launch::of(how.role, &command, config, how.version_flag);
        let program = launch.command.first().cloned().unwrap_or_default();
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {what} ({program})"))?;
        remember(&child, how.data_dir);
        if let Some(out) = child.stdout.take() {
            drain(out, log.clone(), "", None);
        }
        if let Some(err) = child.stderr.take() {
            drain(err, log.clone(), "", None);
        }
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + how.within;
        loop {
            if let Some(status) = child.try_wait()? {
                forget(child.id());
                last_error = format!("{what} exited at start ({status}): {}", last_lines(&log));
                break;
            }
            if ready(addr) {
                return Ok(Started {
                    child,
                    addr,
                    launch,
                    log,
                });
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                forget(child.id());
                bail!(
                    "{what} was not ready on {addr} within {} s: {}",
                    how.within.as_secs(),
                    last_lines(&log)
                );
            }
            thread::sleep(how.every);
        }
    }
    bail!("could not start {what}: {last_error}")
}

/// A fresh data directory under `--data-root`, which must be on a real disk.
fn data_dir(config: &LaunchConfig, prefix: &str) -> Result<tempfile::TempDir> {
    check_real_disk(&config.data_root)?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&config.data_root)
        .with_context(|| {
            format!(
                "creating a data directory under {}",
                config.data_root.display()
            )
        })
}

pub(super) fn start_memcached(name: &str, config: &LaunchConfig) -> Result<Backend> {
    if !config.memcached_bin.exists() {
        bail!(
            "{} not found: run `scripts/install-peers.sh` as root (installs memcached)",
            config.memcached_bin.display()
        );
    }
    let how = OnFreePort {
        what: "memcached",
        role: name,
        version_flag: "-V",
        data_dir: None,
        within: Duration::from_secs(10),
        every: Duration::from_millis(5),
    };
    // memcached prints nothing when ready: it is once it accepts.
    let started = start_on_free_port(
        &how,
        config,
        |port| {
            let mut command = server_command(&config.memcached_bin, config);
            command
                .args(["-U", "0", "-l", "127.0.0.1", "-p", &port.to_string()])
                .args(["-t", &config.server_threads.to_string()])
                .args(["-m", &config.memcached_mem_mib.to_string()])
                .args(["-c", "4096"])
                // Needed when running as root (as CI does); ignored otherwise.
                .args(["-u", "root"])
                .args(&config.tls_server_args);
            command
        },
        |addr| TcpStream::connect(addr).is_ok(),
    )?;
    let kind = BackendKind::Memcached {
        name: name.to_string(),
    };
    Ok(started.backend(name, kind, Protocol::Memcached, None))
}

pub(super) fn start_kura(
    durability: Durability,
    layout: Layout,
    config: &LaunchConfig,
) -> Result<Backend> {
    if !config.kura_bin.exists() {
        bail!(
            "Kura binary {} not found: build it with `cargo build --release -p kura-server` \
             or point --kura-bin at it",
            config.kura_bin.display()
        );
    }
    let data_dir = data_dir(config, &format!("kura-bench-{}-", durability.flag()))?;
    let tail = Log::default();
    let (kind, protocol) = match layout {
        Layout::TwoKeys => (BackendKind::Kura(durability), Protocol::Memcached),
        Layout::Table => (
            BackendKind::KuraTables(durability),
            Protocol::MemcachedTables,
        ),
    };
    let name = kind.name();
    let mut command = server_command(&config.kura_bin, config);
    command
        .args(["-p", "0", "-l", "127.0.0.1", "--data-dir"])
        .arg(data_dir.path())
        .args(["--durability", durability.flag()])
        .args(["-t", &config.server_threads.to_string()])
        .args([
            "--sql-port",
            match config.kura_sql {
                KuraSql::Off => "off",
                KuraSql::AnyPort => "0",
            },
        ])
        .args(&config.kura_args)
        .args(&config.tls_server_args);
    if layout == Layout::Table {
        // Beside the log in the data directory, which Kura leaves alone.
        let schema = data_dir.path().join("schema.sql");
        std::fs::write(&schema, crate::game::TABLE_SCHEMA)
            .with_context(|| format!("writing {}", schema.display()))?;
        command.arg("--schema").arg(&schema);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let launch = Launch::of(&name, &command, config, "--version");
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {}", config.kura_bin.display()))?;
    remember(&child, Some(data_dir.path()));
    // Reads `kura [sql ]listening on <addr>` as the tests do; on failure the server
    // is killed and reaped already.
    let listening = match wait_listening(&mut child, &tail, Duration::from_secs(60)) {
        Ok(listening) => listening,
        Err(e) => {
            forget(child.id());
            bail!("{name} ({}): {e}", config.kura_bin.display());
        }
    };
    let (addr, sql_addr) = (listening.addr, listening.sql_addr);
    if config.kura_sql == KuraSql::AnyPort && sql_addr.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        forget(child.id());
        bail!(
            "kura was started with --sql-port 0 but printed no `kura sql listening on` line \
             before `kura listening on`: {}",
            last_lines(&tail)
        );
    }
    Ok(Backend {
        name,
        kind,
        addr,
        sql_addr,
        pids: vec![child.id()],
        launches: vec![launch],
        protocol,
        tls: None,
        child: Some(child),
        companion: None,
        log: Some(tail),
        _data_dir: Some(data_dir),
    })
}

pub(super) fn start_redis(name: &str, fsync: RedisFsync, config: &LaunchConfig) -> Result<Backend> {
    let bin = Path::new("/usr/bin/redis-server");
    if !bin.exists() {
        bail!(
            "{} not found: run `scripts/install-peers.sh` as root",
            bin.display()
        );
    }
    let dir = data_dir(config, "kura-bench-redis-")?;
    let appendfsync = match fsync {
        RedisFsync::EverySec => "everysec",
        RedisFsync::Always => "always",
    };
    let how = OnFreePort {
        what: "redis-server",
        role: name,
        version_flag: "--version",
        data_dir: Some(dir.path()),
        within: Duration::from_secs(10),
        every: Duration::from_millis(5),
    };
    let started = start_on_free_port(
        &how,
        config,
        |port| {
            let mut command = server_command(bin, config);
            command
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(dir.path())
                .args([
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    appendfsync,
                    "--save",
                    "",
                ])
                .args([
                    "--daemonize",
                    "no",
                    "--protected-mode",
                    "no",
                    "--maxclients",
                    "4000",
                ]);
            command
        },
        |addr| TcpStream::connect(addr).is_ok(),
    )?;
    let kind = BackendKind::Redis(fsync);
    Ok(started.backend(name, kind, Protocol::Redis, Some(dir)))
}

pub(super) fn start_mariadb(config: &LaunchConfig) -> Result<Backend> {
    let install_db = Path::new("/usr/bin/mariadb-install-db");
    if !config.mariadbd_bin.exists() || !install_db.exists() {
        bail!(
            "{} or {} not found: run `scripts/install-peers.sh` as root (installs mariadb-server)",
            config.mariadbd_bin.display(),
            install_db.display()
        );
    }
    let dir = data_dir(config, "kura-bench-mariadb-")?;
    let datadir = dir.path().join("data");
    // Its own temporary directory: the bootstrap's temporary tables in a shared /tmp
    // were seen to vanish under it while other tests ran ("Could not remove
    // temporary table ... error: 2"), failing the install.
    let tmpdir = dir.path().join("tmp");
    std::fs::create_dir(&tmpdir).with_context(|| format!("creating {}", tmpdir.display()))?;
    let output = Command::new(install_db)
        .arg("--no-defaults")
        .arg(format!("--datadir={}", datadir.display()))
        .arg(format!("--tmpdir={}", tmpdir.display()))
        .args([
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ])
        .stdin(Stdio::null())
        .output()
        .context("running mariadb-install-db")?;
    if !output.status.success() {
        bail!(
            "mariadb-install-db failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let how = OnFreePort {
        what: "mariadbd",
        role: "mariadb",
        version_flag: "--version",
        data_dir: Some(dir.path()),
        within: Duration::from_secs(60),
        every: Duration::from_millis(50),
    };
    // Ready once it takes a login, not merely a connection.
    let started = start_on_free_port(
        &how,
        config,
        |port| {
            let mut command = server_command(&config.mariadbd_bin, config);
            command
                .arg("--no-defaults")
                .arg(format!("--datadir={}", datadir.display()))
                .arg(format!(
                    "--socket={}",
                    dir.path().join("mariadbd.sock").display()
                ))
                .arg(format!(
                    "--pid-file={}",
                    dir.path().join("mariadbd.pid").display()
                ))
                .arg(format!("--port={port}"))
                .args([
                    "--bind-address=127.0.0.1",
                    "--user=root",
                    "--skip-grant-tables",
                ])
                .arg(format!("--tmpdir={}", tmpdir.display()))
                .args([
                    "--skip-log-bin",
                    "--max-connections=1000",
                    "--skip-name-resolve",
                ])
                .arg(format!(
                    "--innodb-buffer-pool-size={}M",
                    config.mariadb_buffer_pool_mib
                ))
                .args(&config.mariadb_args);
            command
        },
        |addr| crate::mysql::Connection::connect(addr, "root").is_ok(),
    )?;
    let kind = BackendKind::Mariadb;
    Ok(started.backend("mariadb", kind, Protocol::Mysql, Some(dir)))
}

/// Refuses a data root on tmpfs or ramfs: a durable store measured on RAM would
/// flatter every fsync.
fn check_real_disk(path: &Path) -> Result<()> {
    let path = path
        .canonicalize()
        .with_context(|| format!("data root {} does not exist", path.display()))?;
    let mounts = std::fs::read_to_string("/proc/mounts").context("reading /proc/mounts")?;
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() < 3 {
            continue;
        }
        let mount_point = fields[1].replace("\\040", " ");
        if path.starts_with(&mount_point)
            && best
                .as_ref()
                .is_none_or(|(len, _)| mount_point.len() >= *len)
        {
            best = Some((mount_point.len(), fields[2].to_string()));
        }
    }
    match best {
        Some((_, fstype)) if fstype == "tmpfs" || fstype == "ramfs" => bail!(
            "data root {} is on {fstype}: durable modes must be measured on a real disk \
             (use --data-root /var/tmp or a directory under the current one)",
            path.display()
        ),
        _ => Ok(()),
    }
}
