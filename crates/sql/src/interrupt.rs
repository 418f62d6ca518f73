//! Stopping a running statement: MySQL's `max_execution_time` (the session variable
//! and the `/*+ MAX_EXECUTION_TIME(N) */` hint of a SELECT), `KILL QUERY`, `KILL
//! CONNECTION`, and a client that went away while its statement ran.
//!
//! Each session has an [`Interrupt`]; SQLite's progress handler asks it every
//! [`CHECK_OPS`] virtual-machine steps whether to stop ([`Interrupt::should_stop`]),
//! and SQLite then ends the statement with SQLITE_INTERRUPT, which the session turns
//! into MySQL's error for the cause ([`Interrupt::explain`]). Other threads (a `KILL`
//! from another connection) stop it through a shared handle ([`Interrupt::kill`]).
//!
//! What it is not for: who may kill whom, and the list of connections (the
//! server's).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::SqlError;

/// How many SQLite virtual-machine steps run between two checks.
pub const CHECK_OPS: i32 = 1000;

/// How often, at most, a running statement looks whether its client went away.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Why a statement stops (the values of [`Interrupt::stop`]).
const RUN: u8 = 0;
const TIMED_OUT: u8 = 1;
const KILLED_QUERY: u8 = 2;
const CLIENT_GONE: u8 = 3;
const KILLED_CONNECTION: u8 = 4;

/// Whether a connection's client is gone (the server's socket check).
pub type Watch = Box<dyn Fn() -> bool + Send + Sync>;

/// A session's stop signal, shared with whoever may stop it.
pub struct Interrupt {
    base: Instant,
    stop: AtomicU8,
    /// When the running statement's time is up, in nanoseconds since `base` (0:
    /// never).
    deadline: AtomicU64,
    /// When the client is next looked at, in nanoseconds since `base`.
    next_watch: AtomicU64,
    watch: Mutex<Option<Watch>>,
}

impl Default for Interrupt {
    fn default() -> Interrupt {
        Interrupt {
            base: Instant::now(),
            stop: AtomicU8::new(RUN),
            deadline: AtomicU64::new(0),
            next_watch: AtomicU64::new(0),
            watch: Mutex::new(None),
        }
    }
}

impl Interrupt {
    pub fn new() -> Arc<Interrupt> {
        Arc::new(Interrupt::default())
    }

    /// Sets how the running statement looks whether its client went away.
    pub fn set_watch(&self, watch: Watch) {
        *self.watch.lock() = Some(watch);
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The connection starts a command: a `KILL QUERY` of the command before is
    /// forgotten. Called before the command is shown as running (`SHOW PROCESSLIST`),
    /// so a `KILL QUERY` of what is shown is never forgotten, though it may come
    /// before the statement itself begins.
    pub fn command_starts(&self) {
        let _ = self
            .stop
            .compare_exchange(KILLED_QUERY, RUN, Ordering::AcqRel, Ordering::Acquire);
    }

    /// A statement starts; it may run until `limit` has passed (None: no limit). A
    /// time-out of the statement before is forgotten.
    pub fn begin(&self, limit: Option<Duration>) {
        let _ = self
            .stop
            .compare_exchange(TIMED_OUT, RUN, Ordering::AcqRel, Ordering::Acquire);
        let now = Instant::now();
        let deadline = limit.map_or(0, |l| self.nanos(now + l).max(1));
        self.deadline.store(deadline, Ordering::Release);
        self.next_watch
            .store(self.nanos(now + WATCH_EVERY), Ordering::Release);
    }

    /// The statement ended.
    pub fn end(&self) {
        self.deadline.store(0, Ordering::Release);
    }

    /// Stops the running statement (`KILL QUERY`), or the statement and the
    /// connection (`KILL CONNECTION`).
    pub fn kill(&self, connection: bool) {
        if connection {
            self.stop.store(KILLED_CONNECTION, Ordering::Release);
        } else {
            let _ =
                self.stop
                    .compare_exchange(RUN, KILLED_QUERY, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Whether the connection is to end: it was killed, or its client is gone.
    pub fn connection_ends(&self) -> bool {
        matches!(
            self.stop.load(Ordering::Acquire),
            CLIENT_GONE | KILLED_CONNECTION
        )
    }

    /// SQLite's progress handler: whether the running statement stops now.
    pub fn should_stop(&self) -> bool {
        if self.stop.load(Ordering::Acquire) != RUN {
            return true;
        }
        let now = self.nanos(Instant::now());
        let deadline = self.deadline.load(Ordering::Acquire);
        if deadline != 0 && now >= deadline {
            let _ = self
                .stop
                .compare_exchange(RUN, TIMED_OUT, Ordering::AcqRel, Ordering::Acquire);
            return true;
        }
        if now >= self.next_watch.load(Ordering::Acquire) {
            self.next_watch.store(
                now.saturating_add(WATCH_EVERY.as_nanos() as u64),
                Ordering::Release,
            );
            let gone = self.watch.lock().as_ref().is_some_and(|watch| watch());
            if gone {
                let _ = self.stop.compare_exchange(
                    RUN,
                    CLIENT_GONE,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                return true;
            }
        }
        false
    }

    /// The error a statement that failed with `e` gives: MySQL's for the cause when
    /// it was stopped, `e` otherwise.
    pub fn explain(&self, e: SqlError) -> SqlError {
        match self.stop.load(Ordering::Acquire) {
            TIMED_OUT => SqlError::new(
                3024,
                b"HY000",
                "Query execution was interrupted, maximum statement execution time exceeded",
            ),
            KILLED_QUERY | CLIENT_GONE => interrupted(),
            // MariaDB's ER_CONNECTION_KILLED; the server closes the connection
            // instead of sending it.
            KILLED_CONNECTION => SqlError::new(1927, b"70100", "Connection was killed"),
            _ => e,
        }
    }
}

/// 1317 ER_QUERY_INTERRUPTED.
pub fn interrupted() -> SqlError {
    SqlError::new(1317, b"70100", "Query execution was interrupted")
}

/// The limit of `/*+ MAX_EXECUTION_TIME(N) */` right after a statement's leading
/// SELECT, in milliseconds, as MySQL reads it (only there).
pub fn hint_ms(sql: &str) -> Option<u64> {
    let rest = sql.trim_start();
    let keyword = rest.get(..6)?;
    if !keyword.eq_ignore_ascii_case("select") {
        return None;
    }
    let rest = rest[6..].trim_start().strip_prefix("/*+")?;
    let body = &rest[..rest.find("*/")?];
    let upper = body.to_ascii_uppercase();
    let at = upper.find("MAX_EXECUTION_TIME")?;
    let args = body[at + "MAX_EXECUTION_TIME".len()..]
        .trim_start()
        .strip_prefix('(')?;
    let number = &args[..args.find(')')?];
    number.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_are_read_where_mysql_reads_them() {
        assert_eq!(
            hint_ms("SELECT /*+ MAX_EXECUTION_TIME(150) */ 1"),
            Some(150)
        );
        assert_eq!(
            hint_ms("  select /*+ BKA(t) max_execution_time( 7 ) */ * FROM t"),
            Some(7)
        );
        assert_eq!(hint_ms("SELECT 1 /*+ MAX_EXECUTION_TIME(150) */"), None);
        assert_eq!(
            hint_ms("UPDATE /*+ MAX_EXECUTION_TIME(150) */ t SET a=1"),
            None
        );
        assert_eq!(hint_ms("SELECT /* MAX_EXECUTION_TIME(150) */ 1"), None);
    }

    #[test]
    fn a_kill_query_is_forgotten_by_the_next_command_but_a_kill_connection_is_not() {
        let i = Interrupt::new();
        i.command_starts();
        i.begin(None);
        i.kill(false);
        assert!(i.should_stop());
        assert_eq!(i.explain(SqlError::internal("x")).code, 1317);
        i.end();
        i.command_starts();
        i.begin(None);
        assert!(!i.should_stop());
        // A KILL QUERY between the command's start and its statement's stops it.
        i.end();
        i.command_starts();
        i.kill(false);
        i.begin(None);
        assert!(i.should_stop());
        assert_eq!(i.explain(SqlError::internal("x")).code, 1317);
        i.end();
        i.kill(true);
        i.command_starts();
        i.begin(None);
        assert!(i.should_stop());
        assert!(i.connection_ends());
    }

    #[test]
    fn a_passed_deadline_stops_with_3024() {
        let i = Interrupt::new();
        i.begin(Some(Duration::ZERO));
        assert!(i.should_stop());
        assert_eq!(i.explain(SqlError::internal("x")).code, 3024);
    }
}
