//! The SQL port's connections, as `SHOW PROCESSLIST` lists them and `KILL` stops
//! them, and the watch that stops a statement whose client went away.
//!
//! Who may see and stop a connection is decided in one place, [`may_manage`].

use std::collections::BTreeMap;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Instant;

use kura_sql::processlist::{no_such_thread, not_owner};
use kura_sql::{Interrupt, ProcessRow, Processes, SqlError};
use parking_lot::Mutex;

/// The most of a statement's text kept for `SHOW FULL PROCESSLIST`.
const INFO_BYTES: usize = 64 << 10;

/// What a connection is doing.
struct Activity {
    /// `Sleep`, or `Query` while a command runs.
    command: &'static str,
    since: Instant,
    info: Option<String>,
}

/// One logged-in connection.
pub struct Process {
    id: u32,
    user: String,
    host: String,
    interrupt: Arc<Interrupt>,
    /// The connection's socket, shut down by `KILL CONNECTION`.
    socket: TcpStream,
    activity: Mutex<Activity>,
}

impl Process {
    /// The connection starts a command; `info` is its statement.
    pub fn busy(&self, info: Option<&[u8]>) {
        let info = info.map(|sql| {
            let mut end = sql.len().min(INFO_BYTES);
            while end > 0 && end < sql.len() && (sql[end] & 0xc0) == 0x80 {
                end -= 1;
            }
            String::from_utf8_lossy(&sql[..end]).into_owned()
        });
        *self.activity.lock() = Activity {
            command: "Query",
            since: Instant::now(),
            info,
        };
    }

    /// The connection waits for its next command.
    pub fn idle(&self) {
        *self.activity.lock() = Activity {
            command: "Sleep",
            since: Instant::now(),
            info: None,
        };
    }
}

/// The SQL port's administrator: MySQL's `root`, whose privileges (`PROCESS`,
/// `CONNECTION_ADMIN`) let it see and stop every connection. Kura has no grant
/// tables, so the name is the privilege, as a fresh MySQL's is.
const ADMIN_USER: &str = "root";

/// Whether the user of connection `actor` may see connection `target` in the
/// process list and stop it: its own user's connections, and `root` every one.
fn may_manage(actor: &Process, target: &Process) -> bool {
    actor.user == target.user || actor.user == ADMIN_USER
}

/// The logged-in connections, by id.
#[derive(Default)]
pub struct ProcessList {
    entries: Mutex<BTreeMap<u32, Arc<Process>>>,
}

/// A connection's place in the list; leaves it when dropped.
pub struct Registered {
    list: Arc<ProcessList>,
    pub process: Arc<Process>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.list.entries.lock().remove(&self.process.id);
    }
}

impl ProcessList {
    /// Adds connection `id` of `user` from `host` over `socket`, whose statements
    /// `interrupt` stops; it watches `socket` for the client's going away.
    pub fn register(
        list: &Arc<ProcessList>,
        id: u32,
        user: &str,
        host: String,
        socket: &TcpStream,
        interrupt: Arc<Interrupt>,
    ) -> std::io::Result<Registered> {
        let watched = socket.try_clone()?;
        interrupt.set_watch(Box::new(move || peer_closed(&watched)));
        let process = Arc::new(Process {
            id,
            user: user.to_string(),
            host,
            interrupt,
            socket: socket.try_clone()?,
            activity: Mutex::new(Activity {
                command: "Sleep",
                since: Instant::now(),
                info: None,
            }),
        });
        list.entries.lock().insert(id, Arc::clone(&process));
        Ok(Registered {
            list: Arc::clone(list),
            process,
        })
    }
}

impl Processes for ProcessList {
    fn list(&self, viewer: u32) -> Vec<ProcessRow> {
        let entries = self.entries.lock();
        let Some(actor) = entries.get(&viewer) else {
            return Vec::new();
        };
        entries
            .values()
            .filter(|p| may_manage(actor, p))
            .map(|p| {
                let activity = p.activity.lock();
                ProcessRow {
                    id: p.id,
                    user: p.user.clone(),
                    host: p.host.clone(),
                    db: Some(kura_sql::translate::DATABASE.to_string()),
                    command: activity.command.to_string(),
                    time_secs: activity.since.elapsed().as_secs(),
                    state: if activity.command == "Query" {
                        "executing".to_string()
                    } else {
                        String::new()
                    },
                    info: activity.info.clone(),
                }
            })
            .collect()
    }

    fn kill(&self, by: u32, id: u32, connection: bool) -> Result<(), SqlError> {
        let (actor, target) = {
            let entries = self.entries.lock();
            (entries.get(&by).cloned(), entries.get(&id).cloned())
        };
        let target = target.ok_or_else(|| no_such_thread(id.into()))?;
        if !actor.is_some_and(|a| may_manage(&a, &target)) {
            return Err(not_owner(id.into()));
        }
        target.interrupt.kill(connection);
        if connection && by != id {
            // Wakes a connection waiting for its client's next command. One that
            // kills itself closes after its reply instead.
            if let Err(e) = target.socket.shutdown(Shutdown::Both) {
                tracing::debug!("shutting down SQL connection {id}: {e}");
            }
        }
        Ok(())
    }
}

/// Whether the client closed its side of `socket` (or it failed), without reading
/// what it may have sent.
#[allow(unsafe_code)]
fn peer_closed(socket: &TcpStream) -> bool {
    let mut poll = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one pollfd, valid for the call; `socket` keeps the descriptor open;
    // a zero timeout never blocks.
    let n = unsafe { libc::poll(&mut poll, 1, 0) };
    n > 0 && poll.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}
