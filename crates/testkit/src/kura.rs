//! Spawning the real `kura` binary on port 0 with a temporary data directory.
//!
//! The port is read from the one line kura prints on stdout once it accepts
//! connections, `kura listening on 127.0.0.1:<port>`: no sleeps, no port guessing.
//! The data directory outlives `kill` and `restart`, so crash-recovery tests can
//! SIGKILL a server and start a new one on what it left behind.

use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::output::{drain, Log};

/// How long kura may take to print its listening line (recovery included).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long [`KuraServer::terminate`] waits, after the exit, for the rest of kura's
/// output to reach the log.
const OUTPUT_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
const LISTENING_PREFIX: &str = "kura listening on ";
/// kura prints its SQL port's line before the memcached port's.
const SQL_LISTENING_PREFIX: &str = "kura sql listening on ";

/// Kura's durability modes, as its `--durability` flag spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Acknowledge after fsync (group commit).
    Fsync,
    /// Acknowledge once written to the OS; fsync on an interval.
    Interval,
    /// Never fsync.
    None,
}

impl Durability {
    pub fn flag(self) -> &'static str {
        match self {
            Durability::Fsync => "fsync",
            Durability::Interval => "interval",
            Durability::None => "none",
        }
    }
}

/// The kura binary to run: `$KURA_BIN` when set, else `default` (integration tests
/// pass `env!("CARGO_BIN_EXE_kura")`).
pub fn kura_bin(default: &str) -> PathBuf {
    std::env::var_os("KURA_BIN").map_or_else(|| PathBuf::from(default), PathBuf::from)
}

/// How to start kura. `KuraServer::start` covers the common case.
#[derive(Clone, Debug)]
pub struct KuraOptions {
    pub bin: PathBuf,
    pub durability: Durability,
    pub extra_args: Vec<OsString>,
    /// The interface to listen on (`-l`); 127.0.0.1 unless set.
    pub listen: String,
    /// A command kura runs under, with its arguments (`ip netns exec <ns>`).
    pub wrapper: Vec<OsString>,
    /// Environment variables kura starts with, beside this process's.
    pub env: Vec<(OsString, OsString)>,
}

impl KuraOptions {
    pub fn new(bin: impl Into<PathBuf>, durability: Durability) -> KuraOptions {
        KuraOptions {
            bin: bin.into(),
            durability,
            extra_args: Vec::new(),
            listen: "127.0.0.1".to_string(),
            wrapper: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Starts kura with `key` set to `value` in its environment.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> KuraOptions {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Listens on `ip` rather than 127.0.0.1.
    pub fn listen(mut self, ip: &str) -> KuraOptions {
        self.listen = ip.to_string();
        self
    }

    /// Runs kura under `command` (the first word) and its arguments: for example
    /// `ip netns exec <ns>`, which puts it in a network namespace.
    pub fn wrapped_in(mut self, command: &[&str]) -> KuraOptions {
        self.wrapper = command.iter().map(OsString::from).collect();
        self
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> KuraOptions {
        self.extra_args.push(arg.into());
        self
    }

    /// Starts kura on a fresh temporary data directory, removed on drop.
    pub fn start(self) -> io::Result<KuraServer> {
        let temp = tempfile::Builder::new().prefix("kura-test-").tempdir()?;
        let data_dir = temp.path().to_path_buf();
        let mut server = KuraServer {
            options: self,
            data_dir,
            _temp: Some(temp),
            child: None,
            log: Log::default(),
            addr: None,
            sql_addr: None,
        };
        server.spawn()?;
        Ok(server)
    }

    /// Starts kura on an existing data directory, which is left in place on drop.
    pub fn start_on(self, data_dir: impl Into<PathBuf>) -> io::Result<KuraServer> {
        let mut server = KuraServer {
            options: self,
            data_dir: data_dir.into(),
            _temp: None,
            child: None,
            log: Log::default(),
            addr: None,
            sql_addr: None,
        };
        server.spawn()?;
        Ok(server)
    }
}

/// A running kura process. Dropping it kills the process (SIGKILL) and removes the
/// data directory if this server created it.
pub struct KuraServer {
    options: KuraOptions,
    data_dir: PathBuf,
    // Removed after `Drop::drop` has killed the child, so kura never sees it vanish.
    _temp: Option<tempfile::TempDir>,
    child: Option<Child>,
    log: Log,
    addr: Option<SocketAddr>,
    sql_addr: Option<SocketAddr>,
}

impl KuraServer {
    /// Starts `bin` with `-p 0 -l 127.0.0.1 --data-dir <tempdir> --durability <mode>
    /// --sql-port 0` followed by `extra_args`.
    pub fn start(
        bin: impl Into<PathBuf>,
        durability: Durability,
        extra_args: &[&str],
    ) -> io::Result<KuraServer> {
        let mut options = KuraOptions::new(bin, durability);
        options
            .extra_args
            .extend(extra_args.iter().map(OsString::from));
        options.start()
    }

    /// The address kura reported; panics if the server is stopped.
    pub fn addr(&self) -> SocketAddr {
        match self.addr {
            Some(addr) => addr,
            None => panic!("kura is not running (killed or terminated); call restart()"),
        }
    }

    /// The address of kura's SQL (MySQL-protocol) port; panics if it has none.
    pub fn sql_addr(&self) -> SocketAddr {
        match self.sql_addr {
            Some(addr) => addr,
            None => panic!("kura reported no SQL port (stopped, or --sql-port off)"),
        }
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Runs `statement` with Debian's `mariadb` client on the SQL port, in database
    /// `kura`: whether it succeeded, and its output (tab-separated rows without
    /// headers, or the error).
    pub fn sql(&self, statement: &str) -> (bool, String) {
        let output = Command::new("mariadb")
            .args([
                "-h",
                "127.0.0.1",
                "-u",
                "root",
                "-D",
                "kura",
                "-N",
                "-B",
                "-P",
            ])
            .arg(self.sql_addr().port().to_string())
            .arg("-e")
            .arg(statement)
            .output()
            .unwrap_or_else(|e| panic!("run mariadb (scripts/install-peers.sh installs it): {e}"));
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status.success(), text)
    }

    /// [`KuraServer::sql`], which must succeed: its output.
    pub fn sql_ok(&self, statement: &str) -> String {
        let (ok, text) = self.sql(statement);
        assert!(ok, "{statement}: {text}\n{}", self.log());
        text
    }

    /// Everything kura printed so far (stdout and stderr), for failure messages.
    pub fn log(&self) -> String {
        self.log.snapshot()
    }

    /// Waits up to `timeout` for kura to print a line containing `text` (its output
    /// reaches [`KuraServer::log`] a moment after it is printed); returns the log.
    pub fn wait_for_log(&self, text: &str, timeout: Duration) -> String {
        self.log.wait_for(text, timeout);
        self.log.snapshot()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL and reap; the data directory stays.
    pub fn kill(&mut self) -> io::Result<()> {
        self.addr = None;
        self.sql_addr = None;
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// SIGTERM and wait for a graceful exit; returns the exit status. The data
    /// directory stays.
    pub fn terminate(&mut self) -> io::Result<std::process::ExitStatus> {
        self.addr = None;
        self.sql_addr = None;
        let Some(mut child) = self.child.take() else {
            return Err(io::Error::other("kura is not running"));
        };
        let pid = libc::pid_t::try_from(child.id()).map_err(io::Error::other)?;
        signal(pid, libc::SIGTERM)?;
        let status = child.wait()?;
        // Everything it printed up to its exit, in the log before this returns.
        self.log.wait_closed(OUTPUT_CLOSE_TIMEOUT);
        Ok(status)
    }

    /// Stops the process (SIGSTOP) without killing it: its sockets stay open and
    /// silent, as a hung machine's would, until [`KuraServer::resume`].
    pub fn pause(&self) -> io::Result<()> {
        self.send_signal(libc::SIGSTOP)
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) -> io::Result<()> {
        self.send_signal(libc::SIGCONT)
    }

    fn send_signal(&self, sig: libc::c_int) -> io::Result<()> {
        let Some(child) = self.child.as_ref() else {
            return Err(io::Error::other("kura is not running"));
        };
        signal(
            libc::pid_t::try_from(child.id()).map_err(io::Error::other)?,
            sig,
        )
    }

    /// Starts kura again on the same data directory and options; kills the running
    /// process first if there is one. The address usually changes.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill()?;
        self.log = Log::default();
        self.spawn()
    }

    fn spawn(&mut self) -> io::Result<()> {
        let options = &self.options;
        let mut command = match options.wrapper.split_first() {
            Some((program, arguments)) => {
                let mut command = Command::new(program);
                command.args(arguments).arg(&options.bin);
                command
            }
            None => Command::new(&options.bin),
        };
        command
            .args(["-p", "0", "-l", &options.listen, "--data-dir"])
            .arg(&self.data_dir)
            .args(["--durability", options.durability.flag()])
            .args(["--sql-port", "0"])
            .args(&options.extra_args)
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| {
            io::Error::new(e.kind(), format!("cannot run kura at {}: {e} (build it with `cargo build -p kura-server` or set KURA_BIN)", options.bin.display()))
        })?;
        match wait_listening(&mut child, &self.log, START_TIMEOUT) {
            Ok(listening) => {
                self.child = Some(child);
                self.addr = Some(listening.addr);
                self.sql_addr = listening.sql_addr;
                Ok(())
            }
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("kura {}: {e}", options.bin.display()),
            )),
        }
    }
}

/// What kura announced on stdout once it accepted connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listening {
    /// The memcached port: `kura listening on <addr>`.
    pub addr: SocketAddr,
    /// The SQL port, when kura has one: `kura sql listening on <addr>`, printed before
    /// the memcached port's line.
    pub sql_addr: Option<SocketAddr>,
}

/// Waits up to `timeout` for a just-spawned kura (`child`, its stdout and stderr
/// piped) to print `kura listening on <addr>`, draining both streams into `log`
/// meanwhile and for as long as it runs, so it never blocks on a full pipe.
///
/// A kura that closes stdout (exits) first, prints an address that does not parse,
/// or stays silent too long is killed and reaped, and the error carries its exit
/// status and output. It never panics: kura-bench starts its Kura this way too.
pub fn wait_listening(child: &mut Child, log: &Log, timeout: Duration) -> io::Result<Listening> {
    let (lines_tx, lines_rx) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        drain(stdout, log.clone(), "", Some(lines_tx));
    }
    if let Some(stderr) = child.stderr.take() {
        drain(stderr, log.clone(), "", None);
    }
    let deadline = Instant::now() + timeout;
    let mut sql_addr = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let why = match lines_rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(addr) = line.strip_prefix(SQL_LISTENING_PREFIX) {
                    sql_addr = addr.trim().parse::<SocketAddr>().ok();
                }
                let Some(addr) = line.strip_prefix(LISTENING_PREFIX) else {
                    continue;
                };
                match addr.trim().parse::<SocketAddr>() {
                    Ok(addr) => return Ok(Listening { addr, sql_addr }),
                    Err(e) => format!("bad address in {line:?}: {e}"),
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                format!("no `{LISTENING_PREFIX}<addr>` line within {timeout:?}")
            }
            Err(RecvTimeoutError::Disconnected) => {
                format!("kura closed stdout before printing `{LISTENING_PREFIX}<addr>`")
            }
        };
        let _ = child.kill();
        let status = child
            .wait()
            .map(|s| s.to_string())
            .unwrap_or_else(|e| e.to_string());
        // Give the drain threads a moment to collect the last words.
        std::thread::sleep(Duration::from_millis(50));
        return Err(io::Error::other(format!(
            "{why} ({status}); its output:\n{}",
            log.snapshot()
        )));
    }
}

impl Drop for KuraServer {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

fn signal(pid: libc::pid_t, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: kill(2) has no memory-safety preconditions; `pid` is our own child,
    // not yet reaped, so the pid cannot have been reused.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(pid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A crash test's seed: `KURA_SEED` if set, else a fresh one; printed with how to
/// replay it.
pub fn crash_seed() -> u64 {
    let seed = std::env::var("KURA_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            now ^ u64::from(std::process::id()).rotate_left(32)
        });
    println!("crash seed: {seed} (replay with KURA_SEED={seed})");
    seed
}

/// Panics if `dir` is on tmpfs, where fsync does nothing and a crash test proves
/// nothing. Crash tests keep their data under Cargo's target directory, on a real disk.
pub fn assert_not_tmpfs(dir: &Path) {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mut best: (usize, String) = (0, String::new());
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let [_, mount_point, fstype, ..] = fields[..] {
            if dir.starts_with(mount_point) && mount_point.len() >= best.0 {
                best = (mount_point.len(), fstype.to_string());
            }
        }
    }
    assert_ne!(
        best.1,
        "tmpfs",
        "{} is on tmpfs, where fsync proves nothing",
        dir.display()
    );
}

/// Lets `clients` run against `server` for `load`, then SIGKILLs the server and joins
/// the clients (whose connections end with it), passing on the first one's panic: one
/// round of a crash test.
pub fn kill_under_load(
    server: &mut KuraServer,
    load: Duration,
    clients: Vec<std::thread::JoinHandle<()>>,
) {
    std::thread::sleep(load);
    if let Err(e) = server.kill() {
        panic!("kill: {e}");
    }
    for client in clients {
        if let Err(panic) = client.join() {
            std::panic::resume_unwind(panic);
        }
    }
}
