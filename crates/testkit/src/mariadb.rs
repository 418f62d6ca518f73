//! A private MariaDB (Debian's `mariadbd`, which `scripts/install-peers.sh` installs)
//! for tests that compare Kura's SQL port with the real thing: its own data directory,
//! its own loopback port and socket, no grant tables. Dropping it kills it by its pid,
//! then removes its data directory.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::peer::{free_port, private_dir};
use crate::{drain, Log};

const MARIADBD: &str = "/usr/sbin/mariadbd";
const INSTALL_DB: &str = "/usr/bin/mariadb-install-db";
const INSTALL_HINT: &str = "scripts/install-peers.sh installs mariadb-server";
/// How long mariadbd may take from start to accepting logins.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// mariadbd is started on a port found free a moment before; another process may
/// take it meanwhile, then mariadbd exits and is started again on another.
const START_ATTEMPTS: usize = 5;

/// A running private mariadbd.
pub struct Mariadb {
    // Dropped before `_dir`: fields drop in order.
    process: Process,
    port: u16,
    _dir: tempfile::TempDir,
}

struct Process {
    child: Child,
    log: Log,
}

impl Drop for Process {
    fn drop(&mut self) {
        // It may have exited already: killing it is all that matters here.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Mariadb {
    /// Its port on 127.0.0.1; `root` logs in without a password.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// What it printed on stderr.
    pub fn log(&self) -> String {
        self.process.log.snapshot()
    }

    /// A fresh data directory under `dir` (on a real disk, not tmpfs) by
    /// `mariadb-install-db`, then mariadbd on a free loopback port with `args`
    /// besides its defaults, kept small: a 32 MiB buffer pool, an 8 MiB redo log, no
    /// binary log, no performance schema. Panics when it cannot start.
    pub fn start(dir: &Path, args: &[&str]) -> Mariadb {
        for bin in [MARIADBD, INSTALL_DB] {
            assert!(Path::new(bin).exists(), "{bin} not found: {INSTALL_HINT}");
        }
        let dir = private_dir(dir, "kura-test-mariadb-");
        let data = dir.path().join("data");
        // Its own temporary directory: the bootstrap's temporary tables in a shared
        // /tmp were seen to vanish under it while other tests ran.
        let tmp = dir.path().join("tmp");
        if let Err(e) = std::fs::create_dir(&tmp) {
            panic!("{}: {e}", tmp.display());
        }
        let small = [
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=8M",
            "--skip-log-bin",
            "--performance-schema=OFF",
        ];
        let install = Command::new(INSTALL_DB)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .args([
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .args(small)
            .stdin(Stdio::null())
            .output();
        match install {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "{INSTALL_DB} failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => panic!("cannot run {INSTALL_DB}: {e}; {INSTALL_HINT}"),
        }
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let spawned = Command::new(MARIADBD)
                .arg("--no-defaults")
                .arg(format!("--datadir={}", data.display()))
                .arg(format!("--tmpdir={}", tmp.display()))
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
                    "--skip-name-resolve",
                    "--character-set-server=utf8mb4",
                    "--collation-server=utf8mb4_bin",
                    // The reference's durability is not under test.
                    "--innodb-flush-log-at-trx-commit=0",
                ])
                .args(small)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn();
            let mut child = match spawned {
                Ok(child) => child,
                Err(e) => panic!("cannot run {MARIADBD}: {e}; {INSTALL_HINT}"),
            };
            let log = Log::default();
            let (lines_tx, lines_rx) = mpsc::channel();
            if let Some(stderr) = child.stderr.take() {
                drain(stderr, log.clone(), "", Some(lines_tx));
            }
            let process = Process { child, log };
            // mariadbd says "ready for connections." once it accepts logins; one that
            // could not bind its port says why and exits, closing stderr.
            let deadline = Instant::now() + START_TIMEOUT;
            let ready = loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match lines_rx.recv_timeout(left) {
                    Ok(line) if line.contains("ready for connections") => break true,
                    Ok(_) => {}
                    Err(RecvTimeoutError::Disconnected) => break false,
                    Err(RecvTimeoutError::Timeout) => panic!(
                        "mariadbd did not accept logins within {START_TIMEOUT:?}:\n{}",
                        process.log.snapshot()
                    ),
                }
            };
            if !ready {
                failures.push(format!(
                    "mariadbd exited at start:\n{}",
                    process.log.snapshot()
                ));
                continue;
            }
            match greeting(port) {
                Ok(version) if version.contains("MariaDB") => {
                    return Mariadb {
                        process,
                        port,
                        _dir: dir,
                    }
                }
                Ok(version) => failures.push(format!(
                    "port {port} is served by another server ({version})"
                )),
                Err(e) => failures.push(format!("port {port}: {e}:\n{}", process.log.snapshot())),
            }
        }
        panic!(
            "mariadbd did not start in {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        );
    }
}

/// Reads the MySQL protocol's first packet on `port`: the server's greeting, whose
/// payload is the protocol version (10) then the server's version, NUL-terminated.
fn greeting(port: u16) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut header = [0u8; 4];
    stream.read_exact(&mut header)?;
    let len = usize::from(header[0]) | usize::from(header[1]) << 8 | usize::from(header[2]) << 16;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload)?;
    match payload.split_first() {
        Some((10, rest)) => {
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
        }
        _ => Err(std::io::Error::other(format!(
            "not a MySQL greeting: {payload:?}"
        ))),
    }
}
