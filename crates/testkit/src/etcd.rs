//! A private etcd (Debian's `etcd-server`, which `scripts/install-peers.sh` installs)
//! for the cluster tests: one member with its own data directory and its own loopback
//! client and peer ports. Dropping it kills it by its pid, then removes its data
//! directory; [`Etcd::stop`] and [`Etcd::restart`] take it away and bring it back on
//! the same ports and data, for tests of a cluster that loses etcd for a while.

use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::peer::{free_port, private_dir};
use crate::{drain, Log};

const ETCD: &str = "/usr/bin/etcd";
const INSTALL_HINT: &str = "scripts/install-peers.sh installs etcd-server";
/// How long etcd may take from start to serving clients.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// etcd is started on ports found free a moment before; another process may take one
/// meanwhile, then etcd exits and is started again on others.
const START_ATTEMPTS: usize = 5;

/// A running (or stopped) private etcd.
pub struct Etcd {
    // Dropped before `dir`: fields drop in order.
    child: Option<Child>,
    log: Log,
    /// Another address than loopback that clients reach it at, if any.
    also: Option<String>,
    client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Etcd {
    /// etcd with a fresh data directory under `dir` (on a real disk, not tmpfs) on
    /// free loopback ports. Panics when it cannot start.
    pub fn start(dir: &Path) -> Etcd {
        Etcd::start_also_on(dir, None)
    }

    /// As [`Etcd::start`], serving clients at the address `also` (an IPv4 address of
    /// this host, such as a veth's end) as well as on loopback.
    pub fn start_also_on(dir: &Path, also: Option<&str>) -> Etcd {
        assert!(Path::new(ETCD).exists(), "{ETCD} not found: {INSTALL_HINT}");
        let dir = private_dir(dir, "kura-test-etcd-");
        let mut etcd = Etcd {
            child: None,
            log: Log::default(),
            also: also.map(str::to_string),
            client_port: 0,
            peer_port: 0,
            dir,
        };
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            etcd.client_port = free_port();
            etcd.peer_port = free_port();
            match etcd.spawn() {
                Ok(()) => return etcd,
                Err(why) => failures.push(why),
            }
        }
        panic!(
            "etcd did not start in {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n")
        );
    }

    /// The URL its clients use: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The URL clients use at the address given to [`Etcd::start_also_on`].
    pub fn endpoint_also(&self) -> Option<String> {
        let also = self.also.as_ref()?;
        Some(format!("http://{also}:{}", self.client_port))
    }

    /// What it printed.
    pub fn log(&self) -> String {
        self.log.snapshot()
    }

    /// Kills it (SIGKILL); its data stays for [`Etcd::restart`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // It may have exited already: killing it is all that matters here.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on its data and ports. Panics when it cannot.
    pub fn restart(&mut self) {
        self.stop();
        if let Err(why) = self.spawn() {
            panic!("etcd did not start again: {why}");
        }
    }

    /// Spawns etcd on the ports chosen and waits until it serves its client port.
    fn spawn(&mut self) -> Result<(), String> {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let listen = match self.endpoint_also() {
            Some(also) => format!("{client},{also}"),
            None => client.clone(),
        };
        let spawned = Command::new(ETCD)
            .arg("--name=kura-test")
            .arg(format!(
                "--data-dir={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--listen-client-urls={listen}"))
            .arg(format!("--advertise-client-urls={listen}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=kura-test={peer}"))
            .arg("--initial-cluster-state=new")
            // Quick elections of its own: one member, on loopback.
            .args(["--heartbeat-interval=50", "--election-timeout=500"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => panic!("cannot run {ETCD}: {e}; {INSTALL_HINT}"),
        };
        if let Some(stderr) = child.stderr.take() {
            drain(stderr, self.log.clone(), "", None);
        }
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("etcd exited at start ({status}):\n{}", self.log()));
                }
            }
            // It answers its health check once it has a leader (itself).
            if health(self.client_port) {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.stop();
                return Err(format!(
                    "etcd did not serve within {START_TIMEOUT:?}:\n{}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether etcd on `port` answers `GET /health` with `"health":"true"`.
fn health(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /health HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply.contains("\"health\":\"true\"")
}
