//! Who may use the memcached port: the users file (`-Y`, memcached's auth file), which
//! both the text protocol's login (memcached's `-Y`) and SASL PLAIN on the binary
//! protocol (memcached's `-S`) check; memcached cannot offer both on one port.
//!
//! A connection of a server with a users file starts logged out. Text and meta
//! requests get `CLIENT_ERROR unauthenticated` until a login; binary requests other
//! than SASL's and `VERSION` get `Auth failure.` and the connection closes, as in
//! memcached. Passwords are compared in constant time; argon2 hashes are verified on
//! tokio's blocking threads, never on an event loop. SIGHUP reads the file again. A
//! failed login is counted
//! (`auth_errors`) and logged with the user and the peer, never the password; after
//! [`FAILED_LOGINS_MAX`] on one connection, it is closed.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use argon2::password_hash::{PasswordHash, PasswordVerifier};
use kura_protocol::auth::{parse_users, Secret};

use crate::server::Shared;
use crate::stats::bump;

/// Failed logins one connection may make; the last one's reply is followed by a close.
pub const FAILED_LOGINS_MAX: u32 = 5;

enum Stored {
    Plain(Vec<u8>),
    /// A PHC string, checked to parse when the file was read.
    Argon2(String),
}

pub struct Users {
    users: HashMap<Vec<u8>, Stored>,
}

/// The `-Y` file and the users read from it last; SIGHUP reads it again, as memcached
/// rereads its auth file.
pub struct UsersFile {
    path: std::path::PathBuf,
    current: parking_lot::RwLock<Arc<Users>>,
}

impl UsersFile {
    pub fn open(path: &Path) -> anyhow::Result<UsersFile> {
        Ok(UsersFile {
            path: path.to_path_buf(),
            current: parking_lot::RwLock::new(Arc::new(Users::from_file(path)?)),
        })
    }

    /// Reads the file again. A file that no longer reads leaves the users as they were.
    pub fn reload(&self) {
        match Users::from_file(&self.path) {
            Ok(users) => {
                *self.current.write() = Arc::new(users);
                tracing::info!("reloaded the users of {}", self.path.display());
            }
            Err(e) => tracing::warn!("kept the users as they were: {e:#}"),
        }
    }

    fn current(&self) -> Arc<Users> {
        Arc::clone(&self.current.read())
    }
}

impl Users {
    /// Reads a users file; errors name the line.
    pub fn from_file(path: &Path) -> anyhow::Result<Users> {
        let text = std::fs::read(path)
            .with_context(|| format!("reading the users file {}", path.display()))?;
        let lines = parse_users(&text)
            .map_err(|e| anyhow::anyhow!("{}, line {}: {}", path.display(), e.line, e.why))?;
        let mut users = HashMap::new();
        for line in lines {
            let stored = match line.secret {
                Secret::Plain(password) => Stored::Plain(password.to_vec()),
                Secret::Argon2(hash) => {
                    PasswordHash::new(hash).map_err(|e| {
                        anyhow::anyhow!(
                            "{}: user {}: not an argon2 hash ({e})",
                            path.display(),
                            String::from_utf8_lossy(line.user)
                        )
                    })?;
                    Stored::Argon2(hash.to_string())
                }
            };
            users.insert(line.user.to_vec(), stored);
        }
        if users.is_empty() {
            anyhow::bail!("{}: no users: nobody could log in", path.display());
        }
        Ok(Users { users })
    }

    /// Whether `password` is `user`'s. For a hashed password this takes tens of
    /// milliseconds on purpose: call it off the event loops ([`check`] does).
    fn verify(&self, user: &[u8], password: &[u8]) -> bool {
        match self.users.get(user) {
            Some(Stored::Plain(expected)) => constant_time_eq(expected, password),
            Some(Stored::Argon2(hash)) => PasswordHash::new(hash).is_ok_and(|hash| {
                argon2::Argon2::default()
                    .verify_password(password, &hash)
                    .is_ok()
            }),
            None => false,
        }
    }

    fn is_hashed(&self, user: &[u8]) -> bool {
        let Some(Stored::Argon2(_)) = self.users.get(user) else {
            return false;
        };
        true
    }
}

/// The text login for `--replication-login`: the file's one `user:password` line as
/// the `set` memcached's `-Y` reads (user and password may not hold spaces).
pub fn login_from_file(path: &Path) -> anyhow::Result<Vec<u8>> {
    let text = std::fs::read(path)
        .with_context(|| format!("reading the replication login {}", path.display()))?;
    let lines = parse_users(&text)
        .map_err(|e| anyhow::anyhow!("{}, line {}: {}", path.display(), e.line, e.why))?;
    let [line] = lines.as_slice() else {
        anyhow::bail!(
            "{}: one user:password line, not {}",
            path.display(),
            lines.len()
        );
    };
    let Secret::Plain(password) = line.secret else {
        anyhow::bail!(
            "{}: the password itself, not a hash: it is sent",
            path.display()
        );
    };
    if password.is_empty() || password.iter().any(|&b| b == b' ' || b == b'\r') {
        anyhow::bail!(
            "{}: a password without spaces (a login is `user password`)",
            path.display()
        );
    }
    let token = [line.user, b" ", password].concat();
    let mut login = format!("set kura-login 0 0 {}\r\n", token.len()).into_bytes();
    login.extend_from_slice(&token);
    login.extend_from_slice(b"\r\n");
    Ok(login)
}

/// Equal bytes, compared without an early exit (the length alone may show).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks a login against the users file, counts it, and logs a failure. `how` names
/// the way it came (`text`, `sasl`).
pub async fn check(
    shared: &Arc<Shared>,
    peer: SocketAddr,
    how: &str,
    user: &[u8],
    password: &[u8],
) -> bool {
    let c = shared.counters.local();
    bump(&c.auth_cmds);
    let Some(file) = &shared.users else {
        return false;
    };
    let users = file.current();
    let ok = if users.is_hashed(user) {
        let (user, password) = (user.to_vec(), password.to_vec());
        tokio::task::spawn_blocking(move || users.verify(&user, &password))
            .await
            .unwrap_or(false)
    } else {
        users.verify(user, password)
    };
    if !ok {
        bump(&shared.counters.local().auth_errors);
        tracing::warn!("failed {how} login as {:?} from {peer}", printable(user));
    }
    ok
}

/// A user name fit for a log line: at most 64 bytes, escaped.
fn printable(user: &[u8]) -> String {
    let shown = &user[..user.len().min(64)];
    let mut text = String::from_utf8_lossy(shown).escape_debug().to_string();
    if user.len() > shown.len() {
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_hashed_passwords() {
        let dir = std::env::temp_dir().join(format!("kura-users-{}", std::process::id()));
        let hash = argon2::password_hash::PasswordHasher::hash_password(
            &argon2::Argon2::default(),
            b"hunter2",
            &argon2::password_hash::SaltString::from_b64("c2FsdHNhbHRzYWx0")
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .to_string();
        let text = format!("ann:secret\nbob:{hash}\n");
        if let Err(e) = std::fs::write(&dir, text) {
            panic!("{e}");
        }
        let users = Users::from_file(&dir).unwrap_or_else(|e| panic!("{e}"));
        let _ = std::fs::remove_file(&dir);
        assert!(users.verify(b"ann", b"secret"));
        assert!(!users.verify(b"ann", b"secreT"));
        assert!(!users.verify(b"ann", b"secre"));
        assert!(users.verify(b"bob", b"hunter2"));
        assert!(!users.verify(b"bob", b"hunter3"));
        assert!(!users.verify(b"cy", b""));
        assert!(users.is_hashed(b"bob") && !users.is_hashed(b"ann"));
    }
}
