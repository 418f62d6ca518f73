//! Who may use the memcached port, and who may change what the node is.
//!
//! Two users files, both in memcached's auth-file format: `-Y` names the application
//! users, `--admin-auth-file` the administrative users. Both log in the same ways: the
//! text protocol's login (memcached's `-Y`) and SASL PLAIN on the binary protocol
//! (memcached's `-S`), which memcached cannot offer both on one port. A user name may
//! be in one file only. An admin may do everything an application user may, and also
//! run the administrative commands ([`administrative`]); each one run is logged with
//! who ran it, and an application user's is refused with `CLIENT_ERROR` and changes
//! nothing. Without either file no one logs in and every client is trusted, as with
//! memcached (the server then listens on loopback only, or with client certificates
//! required, or with `--insecure`).
//!
//! A connection of a server with a users file starts logged out. Text and meta
//! requests get `CLIENT_ERROR unauthenticated` until a login; binary requests other
//! than SASL's and `VERSION` get `Auth failure.` and the connection closes, as in
//! memcached. Passwords are compared in constant time; argon2 hashes are verified on
//! tokio's blocking threads, never on an event loop. SIGHUP reads the files again. A
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
use kura_protocol::Request;

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

/// One users file and the users read from it last; SIGHUP reads it again, as memcached
/// rereads its auth file.
struct UsersFile {
    path: std::path::PathBuf,
    current: parking_lot::RwLock<Arc<Users>>,
}

impl UsersFile {
    fn open(path: &Path) -> anyhow::Result<UsersFile> {
        Ok(UsersFile {
            path: path.to_path_buf(),
            current: parking_lot::RwLock::new(Arc::new(Users::from_file(path)?)),
        })
    }

    fn current(&self) -> Arc<Users> {
        Arc::clone(&self.current.read())
    }
}

/// Who has logged in on a connection.
#[derive(Debug, Clone)]
pub struct User {
    /// The name, fit for a log line.
    pub name: String,
    pub admin: bool,
}

/// The application users (`-Y`) and the administrative users (`--admin-auth-file`):
/// at least one of the two.
pub struct Logins {
    app: Option<UsersFile>,
    admin: Option<UsersFile>,
}

impl Logins {
    /// Reads the files; none when neither is given (every client trusted). A user
    /// in both files is refused: which password and which rights would be unclear.
    pub fn open(app: Option<&Path>, admin: Option<&Path>) -> anyhow::Result<Option<Logins>> {
        if app.is_none() && admin.is_none() {
            return Ok(None);
        }
        let logins = Logins {
            app: app.map(UsersFile::open).transpose()?,
            admin: admin.map(UsersFile::open).transpose()?,
        };
        if let (Some(app), Some(admin)) = (&logins.app, &logins.admin) {
            disjoint(app, &app.current(), admin, &admin.current())?;
        }
        Ok(Some(logins))
    }

    /// Reads the files again. If either no longer reads, or they share a user, the
    /// users stay as they were.
    pub fn reload(&self) {
        let read = |file: &Option<UsersFile>| {
            file.as_ref()
                .map(|f| Users::from_file(&f.path).map(Arc::new))
                .transpose()
        };
        let fresh = read(&self.app).and_then(|app| Ok((app, read(&self.admin)?)));
        let fresh = fresh.and_then(|(app, admin)| {
            if let (Some(f), Some(users), Some(g), Some(admins)) =
                (&self.app, &app, &self.admin, &admin)
            {
                disjoint(f, users, g, admins)?;
            }
            Ok((app, admin))
        });
        match fresh {
            Ok((app, admin)) => {
                for (file, users) in [(&self.app, app), (&self.admin, admin)] {
                    if let (Some(file), Some(users)) = (file, users) {
                        *file.current.write() = users;
                        tracing::info!("reloaded the users of {}", file.path.display());
                    }
                }
            }
            Err(e) => tracing::warn!("kept the users as they were: {e:#}"),
        }
    }

    /// The file that holds `user`, and whether it is the admins'.
    fn holding(&self, user: &[u8]) -> Option<(Arc<Users>, bool)> {
        if let Some(admins) = self.admin.as_ref().map(UsersFile::current) {
            if admins.users.contains_key(user) {
                return Some((admins, true));
            }
        }
        self.app.as_ref().map(|f| (f.current(), false))
    }
}

/// Refuses two files that list one user.
fn disjoint(
    app: &UsersFile,
    users: &Users,
    admin: &UsersFile,
    admins: &Users,
) -> anyhow::Result<()> {
    if let Some(user) = users.users.keys().find(|u| admins.users.contains_key(*u)) {
        anyhow::bail!(
            "user {:?} is in both {} and {}: a user is an application user or an admin, not both",
            printable(user),
            app.path.display(),
            admin.path.display()
        );
    }
    Ok(())
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

/// Checks a login against the users files, counts it, and logs a failure. `how` names
/// the way it came (`text`, `sasl`). The user when the password is right.
pub async fn check(
    shared: &Arc<Shared>,
    peer: SocketAddr,
    how: &str,
    user: &[u8],
    password: &[u8],
) -> Option<User> {
    let c = shared.counters.local();
    bump(&c.auth_cmds);
    let logins = shared.users.as_ref()?;
    let (ok, admin) = match logins.holding(user) {
        Some((users, admin)) if users.is_hashed(user) => {
            let (user, password) = (user.to_vec(), password.to_vec());
            let ok = tokio::task::spawn_blocking(move || users.verify(&user, &password))
                .await
                .unwrap_or(false);
            (ok, admin)
        }
        Some((users, admin)) => (users.verify(user, password), admin),
        None => (false, false),
    };
    if !ok {
        bump(&shared.counters.local().auth_errors);
        tracing::warn!("failed {how} login as {:?} from {peer}", printable(user));
        return None;
    }
    Some(User {
        name: printable(user),
        admin,
    })
}

/// The name of `request`'s command if it changes what the node is rather than its
/// data: whom it follows (`replicaof`, promotion by `replicaof no one`, `fence`), a
/// replication or backup stream taken from it (`replicate`), its certificates, memory
/// limit, log level, or its running at all.
pub fn administrative(request: &Request<'_>) -> Option<&'static str> {
    Some(match request {
        Request::ReplicaOf { .. } => "replicaof",
        Request::Fence { .. } => "fence",
        Request::Failover { .. } => "failover",
        Request::Replicate { .. } => "replicate",
        Request::Shutdown { .. } => "shutdown",
        Request::RefreshCerts => "refresh_certs",
        Request::CacheMemlimit { .. } => "cache_memlimit",
        Request::Verbosity { .. } => "verbosity",
        _ => return None,
    })
}

/// Whether `request` may run for the connection's `user` (none: no users file, or not
/// logged in). An administrative command that runs is logged with who ran it; one an
/// application user sent is logged, refused with `CLIENT_ERROR` (nothing under
/// `noreply`) and changes nothing. `line` is the request's command line, for the log.
pub fn permitted(
    shared: &Shared,
    user: Option<&User>,
    peer: SocketAddr,
    request: &Request<'_>,
    line: &[u8],
    out: &mut Vec<u8>,
) -> bool {
    let Some(command) = administrative(request) else {
        return true;
    };
    let line = printable_line(line);
    match user {
        _ if shared.users.is_none() => {
            tracing::info!(
                "a client from {peer} ran {line} (no users file: every client is trusted)"
            );
            true
        }
        Some(user) if user.admin => {
            tracing::info!("admin {:?} from {peer} ran {line}", user.name);
            true
        }
        _ => {
            let name = user.map_or("", |u| u.name.as_str());
            tracing::warn!(
                "refused {command} from application user {name:?} at {peer}: not an admin"
            );
            let noreply = matches!(
                request,
                Request::CacheMemlimit { noreply: true, .. }
                    | Request::Verbosity { noreply: true, .. }
            );
            if !noreply {
                out.extend_from_slice(
                    format!("CLIENT_ERROR {command} is administrative: log in as a user of --admin-auth-file\r\n")
                        .as_bytes(),
                );
            }
            false
        }
    }
}

/// A command line fit for a log line: at most 200 bytes, escaped, without its end.
fn printable_line(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let shown = &line[..line.len().min(200)];
    let mut text = String::from_utf8_lossy(shown).escape_debug().to_string();
    if line.len() > shown.len() {
        text.push_str("...");
    }
    text
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
