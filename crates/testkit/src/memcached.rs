//! Spawning the real memcached (Debian's package) on a free loopback port, as the
//! reference that Kura's replies are compared with.
//!
//! memcached cannot be told to pick its own port and report it, so this binds port
//! 0 to find a free one, releases it, starts memcached there and connects until it
//! accepts; if memcached exits (someone took the port meanwhile) it tries again.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::output::{drain, Log};

pub const MEMCACHED_BIN: &str = "/usr/bin/memcached";
const ATTEMPTS: usize = 5;
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(10);
const INSTALL_HINT: &str =
    "run `sudo scripts/install-test-deps.sh` (installs memcached and libmemcached-tools)";

/// A running memcached; dropping it kills the process.
pub struct MemcachedServer {
    child: Child,
    addr: SocketAddr,
    log: Log,
}

impl MemcachedServer {
    /// Starts `/usr/bin/memcached -U 0 -l 127.0.0.1 -p <free port>` with default
    /// settings (64 MiB, `-I 1m`). Fails with an install hint if it is missing.
    pub fn start() -> io::Result<MemcachedServer> {
        Self::start_with(&[])
    }

    /// As `start`, with extra memcached arguments.
    pub fn start_with(extra_args: &[&str]) -> io::Result<MemcachedServer> {
        Self::start_configured(extra_args, &[], None)
    }

    /// As `start`, with extra arguments, environment variables, and the login that
    /// opens a connection (memcached started with `-Y`, or `-S` for the binary
    /// protocol only).
    pub fn start_configured(
        extra_args: &[&str],
        env: &[(&str, &str)],
        login: Option<&Login>,
    ) -> io::Result<MemcachedServer> {
        Self::start_probed(extra_args, env, login, None)
    }

    /// As `start_with`, for a memcached with TLS (`-Z` among `extra_args`) and the
    /// certificates of `certs`: the readiness probe speaks TLS (with the client
    /// certificate, in case memcached requires one).
    pub fn start_tls(
        extra_args: &[&str],
        certs: &crate::tls::Certificates,
    ) -> io::Result<MemcachedServer> {
        Self::start_probed(extra_args, &[], None, Some(certs))
    }

    fn start_probed(
        extra_args: &[&str],
        env: &[(&str, &str)],
        login: Option<&Login>,
        tls: Option<&crate::tls::Certificates>,
    ) -> io::Result<MemcachedServer> {
        if !Path::new(MEMCACHED_BIN).exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{MEMCACHED_BIN} not found: {INSTALL_HINT}"),
            ));
        }
        let mut last_error = String::new();
        for _ in 0..ATTEMPTS {
            match Self::try_start(extra_args, env, login, tls) {
                Ok(server) => return Ok(server),
                Err(e) => last_error = e.to_string(),
            }
        }
        Err(io::Error::other(format!(
            "memcached did not start in {ATTEMPTS} attempts; last: {last_error}"
        )))
    }

    fn try_start(
        extra_args: &[&str],
        env: &[(&str, &str)],
        login: Option<&Login>,
        tls: Option<&crate::tls::Certificates>,
    ) -> io::Result<MemcachedServer> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let mut command = Command::new(MEMCACHED_BIN);
        command.args(["-U", "0", "-l", "127.0.0.1", "-p", &port.to_string()]);
        if is_root() {
            // memcached refuses to run as root without -u; -u is ignored otherwise.
            command.args(["-u", "root"]);
        }
        command
            .args(extra_args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run {MEMCACHED_BIN}: {e}; {INSTALL_HINT}"),
            )
        })?;
        let log = Log::default();
        if let Some(stdout) = child.stdout.take() {
            drain(stdout, log.clone(), "", None);
        }
        if let Some(stderr) = child.stderr.take() {
            drain(stderr, log.clone(), "", None);
        }
        let deadline = Instant::now() + ACCEPT_TIMEOUT;
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "memcached on port {port} exited: {status}; output: {}",
                    log.snapshot()
                )));
            }
            if let Ok(stream) = TcpStream::connect(addr) {
                // Another process may have taken the port between our probe and
                // memcached's bind (then our memcached exits, but a little later):
                // only a server reporting our child's pid is ours.
                let served = match tls {
                    None => served_pid(stream, login),
                    Some(certs) => {
                        drop(stream);
                        served_pid_tls(addr, certs)
                    }
                };
                return match served {
                    Ok(pid) if pid == child.id() => Ok(MemcachedServer { child, addr, log }),
                    answer => {
                        let _ = child.kill();
                        let _ = child.wait();
                        Err(io::Error::other(format!(
                            "port {port} is served by another process ({answer:?}), not memcached pid {}",
                            child.id()
                        )))
                    }
                };
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::other(format!(
                    "memcached on port {port} did not accept within {ACCEPT_TIMEOUT:?}"
                )));
            }
            // Polling the port is the only readiness signal memcached gives.
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Everything memcached printed so far.
    pub fn log(&self) -> String {
        self.log.snapshot()
    }
}

impl Drop for MemcachedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a connection to a memcached with authentication logs in.
#[derive(Debug, Clone)]
pub enum Login {
    /// `-Y`: the text protocol's `set` carrying `user password`.
    Text { user: String, password: String },
    /// `-S -B binary`: SASL PLAIN over the binary protocol.
    Sasl { user: String, password: String },
}

/// The pid a memcached reports in `stats`, after `login`.
fn served_pid(stream: TcpStream, login: Option<&Login>) -> io::Result<u32> {
    let mut client = Client::from_stream(stream)?;
    let text = match login {
        None => String::from_utf8_lossy(&client.request(b"stats\r\n", b"END\r\n")?).into_owned(),
        Some(Login::Text { user, password }) => {
            let token = format!("{user} {password}");
            let request = format!("set login 0 0 {}\r\n{token}\r\n", token.len());
            client.request(request.as_bytes(), b"STORED\r\n")?;
            String::from_utf8_lossy(&client.request(b"stats\r\n", b"END\r\n")?).into_owned()
        }
        Some(Login::Sasl { user, password }) => {
            let plain = format!("\0{user}\0{password}");
            let mut request = crate::binary::compose(&format!(
                "sasl-auth key=PLAIN value={}",
                crate::escape(plain.as_bytes())
            ))
            .map_err(io::Error::other)?;
            request.extend(crate::binary::compose("stat").map_err(io::Error::other)?);
            client.send(&request)?;
            let reply =
                client.read_reply_until(crate::binary::stats_ended, crate::REPLY_TIMEOUT)?;
            crate::binary::stats_as_text(&reply.bytes)
        }
    };
    text.lines()
        .find_map(|line| line.strip_prefix("STAT pid "))
        .and_then(|pid| pid.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("no pid in stats: {text:?}")))
}

/// The pid a memcached with TLS reports in `stats`.
fn served_pid_tls(addr: SocketAddr, certs: &crate::tls::Certificates) -> io::Result<u32> {
    let mut stream = crate::tls::connect(
        addr,
        &certs.path("ca.pem"),
        Some((&certs.path("client.pem"), &certs.path("client.key"))),
        crate::tls::Versions::Any,
    )?;
    let text =
        String::from_utf8_lossy(&crate::tls::request(&mut stream, b"stats\r\n", b"END\r\n")?)
            .into_owned();
    text.lines()
        .find_map(|line| line.strip_prefix("STAT pid "))
        .and_then(|pid| pid.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("no pid in stats: {text:?}")))
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    #[allow(unsafe_code)]
    let euid = unsafe { libc::geteuid() };
    euid == 0
}
