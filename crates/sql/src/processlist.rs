//! `SHOW [FULL] PROCESSLIST` and `KILL [QUERY | CONNECTION] id`: a session asks the
//! server's list of connections ([`Processes`]), which decides who may see and stop
//! whom.

use std::sync::Arc;
use std::time::Duration;

use sqlparser::ast::KillType;

use crate::error::SqlError;
use crate::interrupt::{Interrupt, CHECK_OPS};
use crate::result::{Cell, Done, Kind, Output, ResultSet};
use crate::session::{sqlite_error, Session};

/// How much of a statement `SHOW PROCESSLIST` shows without FULL, as MySQL.
const INFO_CHARS: usize = 100;

/// One connection as `SHOW PROCESSLIST` shows it.
#[derive(Debug, Clone)]
pub struct ProcessRow {
    pub id: u32,
    pub user: String,
    /// `address:port` of the client.
    pub host: String,
    pub db: Option<String>,
    /// `Query` while it runs a command, `Sleep` otherwise.
    pub command: String,
    /// Seconds in that command.
    pub time_secs: u64,
    pub state: String,
    /// The statement it runs.
    pub info: Option<String>,
}

/// The server's connections, as a session sees them.
pub trait Processes: Send + Sync {
    /// The connections connection `viewer` may see.
    fn list(&self, viewer: u32) -> Vec<ProcessRow>;
    /// Stops connection `id`'s statement, or (`connection`) the connection, on behalf
    /// of connection `by`: MySQL's 1094 for an unknown id, 1095 for one `by` may not
    /// stop.
    fn kill(&self, by: u32, id: u32, connection: bool) -> Result<(), SqlError>;
}

/// 1094 ER_NO_SUCH_THREAD.
pub fn no_such_thread(id: u64) -> SqlError {
    SqlError::new(1094, b"HY000", format!("Unknown thread id: {id}"))
}

/// 1095 ER_KILL_DENIED_ERROR.
pub fn not_owner(id: u64) -> SqlError {
    SqlError::new(1095, b"HY000", format!("You are not owner of thread {id}"))
}

impl Session {
    /// The server's list of connections, for SHOW PROCESSLIST and KILL.
    pub fn set_processes(&mut self, processes: Arc<dyn Processes>) {
        self.processes = Some(processes);
    }

    /// Makes `interrupt` the one that stops this session's statements (a server
    /// keeps one per connection, across COM_RESET_CONNECTION).
    pub fn set_interrupt(&mut self, interrupt: Arc<Interrupt>) -> Result<(), SqlError> {
        let check = Arc::clone(&interrupt);
        self.db
            .progress_handler(CHECK_OPS, Some(move || check.should_stop()))
            .map_err(sqlite_error)?;
        self.interrupt = interrupt;
        Ok(())
    }

    /// This session's stop signal.
    pub fn interrupt(&self) -> Arc<Interrupt> {
        Arc::clone(&self.interrupt)
    }

    /// How long the running SELECT may take: its hint, else `max_execution_time`
    /// (milliseconds; 0, none).
    pub(crate) fn time_limit(&self) -> Option<Duration> {
        let ms = match self.hint_ms {
            Some(ms) => ms,
            None => match self.variables.get("max_execution_time") {
                Some(crate::translate::Literal::Number(n)) => n.parse().unwrap_or(0),
                _ => 0,
            },
        };
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    pub(crate) fn show_processlist(&self, full: bool) -> Result<Output, SqlError> {
        let Some(processes) = &self.processes else {
            return Err(SqlError::unsupported("SHOW PROCESSLIST without a server"));
        };
        let viewer = self.shared.state.lock().connection_id;
        let text = |s: String| Cell::text(s);
        let rows = processes
            .list(viewer)
            .into_iter()
            .map(|p| {
                let info = p.info.map(|i| {
                    if full {
                        i
                    } else {
                        i.chars().take(INFO_CHARS).collect()
                    }
                });
                vec![
                    Cell::UInt(u64::from(p.id)),
                    text(p.user),
                    text(p.host),
                    p.db.map_or(Cell::Null, text),
                    text(p.command),
                    Cell::Int(i64::try_from(p.time_secs).unwrap_or(i64::MAX)),
                    text(p.state),
                    info.map_or(Cell::Null, text),
                ]
            })
            .collect();
        let mut result = ResultSet::text(
            &[
                "Id", "User", "Host", "db", "Command", "Time", "State", "Info",
            ],
            rows,
        );
        result.columns[0].kind = Kind::BigIntUnsigned;
        result.columns[5].kind = Kind::Int;
        Ok(Output::Rows(result))
    }

    pub(crate) fn kill(&self, modifier: Option<KillType>, id: u64) -> Result<Output, SqlError> {
        let Some(processes) = &self.processes else {
            return Err(SqlError::unsupported("KILL without a server"));
        };
        let connection = match modifier {
            None | Some(KillType::Connection) => true,
            Some(KillType::Query) => false,
            Some(KillType::Mutation) => return Err(SqlError::unsupported("KILL MUTATION")),
        };
        let by = self.shared.state.lock().connection_id;
        let id = u32::try_from(id).map_err(|_| no_such_thread(id))?;
        processes.kill(by, id, connection)?;
        Ok(Output::Done(Done::default()))
    }
}
