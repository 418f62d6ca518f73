//! Users for transcripts and tests that log in: a users file (memcached's `-Y` auth
//! file, which Kura's `-Y` reads too), and the Cyrus SASL setup with which memcached's
//! `-S` checks the same users (a `memcached.conf` offering PLAIN and a sasldb written
//! by `saslpasswd2`, from Debian's sasl2-bin).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::memcached::{Login, MemcachedServer};

pub const SASLPASSWD2: &str = "/usr/sbin/saslpasswd2";

/// A directory holding the users file and memcached's SASL files.
pub struct Users {
    dir: tempfile::TempDir,
    users: Vec<(String, String)>,
}

impl Users {
    /// Writes a users file of `(user, password)` lines.
    pub fn new(users: &[(String, String)]) -> io::Result<Users> {
        let dir = tempfile::Builder::new().prefix("kura-users-").tempdir()?;
        let text: String = users.iter().map(|(u, p)| format!("{u}:{p}\n")).collect();
        std::fs::write(dir.path().join("users"), text)?;
        Ok(Users {
            dir,
            users: users.to_vec(),
        })
    }

    /// The users file.
    pub fn file(&self) -> PathBuf {
        self.dir.path().join("users")
    }

    /// The first user, who opens connections that must log in.
    fn first(&self) -> io::Result<&(String, String)> {
        self.users
            .first()
            .ok_or_else(|| io::Error::other("no users to log in with"))
    }

    /// Starts memcached checking these users: with `-Y` for the text protocol, or
    /// with `-S -B binary` and SASL PLAIN for the binary protocol (memcached offers
    /// one or the other, never both).
    pub fn start_memcached(&self, binary: bool) -> io::Result<MemcachedServer> {
        let (user, password) = self.first()?.clone();
        if !binary {
            let file = self.file();
            let file = file.to_string_lossy();
            let login = Login::Text { user, password };
            return MemcachedServer::start_configured(&["-Y", &file], &[], Some(&login));
        }
        self.write_sasl()?;
        let conf = self.dir.path().to_string_lossy().into_owned();
        let login = Login::Sasl { user, password };
        MemcachedServer::start_configured(
            &["-B", "binary", "-S"],
            &[("SASL_CONF_PATH", &conf)],
            Some(&login),
        )
    }

    /// memcached.conf (PLAIN against a sasldb) and the sasldb with every user.
    fn write_sasl(&self) -> io::Result<()> {
        if !Path::new(SASLPASSWD2).exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{SASLPASSWD2} not found: run `sudo scripts/install-test-deps.sh` (installs sasl2-bin)"),
            ));
        }
        let sasldb = self.dir.path().join("sasldb2");
        std::fs::write(
            self.dir.path().join("memcached.conf"),
            format!("mech_list: plain\nsasldb_path: {}\n", sasldb.display()),
        )?;
        for (user, password) in &self.users {
            let mut child = Command::new(SASLPASSWD2)
                .args(["-a", "memcached", "-c", "-p", "-f"])
                .arg(&sasldb)
                .arg(user)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?;
            if let Some(mut stdin) = child.stdin.take() {
                stdin.write_all(password.as_bytes())?;
            }
            let output = child.wait_with_output()?;
            if !output.status.success() {
                return Err(io::Error::other(format!(
                    "saslpasswd2 for {user}: {}",
                    String::from_utf8_lossy(&output.stderr)
                )));
            }
        }
        Ok(())
    }
}
