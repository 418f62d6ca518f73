//! The MySQL-protocol port: a thread per connection (as MySQL's own server runs), each
//! with a [`kura_sql::Session`] over the server's tables.
//!
//! A connection: the greeting, the login (`mysql_native_password`; a client that
//! answers with another plugin is switched to it), then commands until COM_QUIT or the
//! client goes. A reply that shows rows or reports a write goes out only once what it
//! shows is durable under the server's durability mode, as a memcached reply does.
//!
//! Users: `--sql-users FILE` holds `user:password` lines; without it, `root` with no
//! password, which the server accepts only while it listens on loopback.
//!
//! What it is not for: SQL itself (`kura-sql`) and the packet formats (`kura-mysql`).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use kura_mysql::{
    self as my, CapabilityFlags, ColumnFlags, ColumnType, Command, Login, PacketReader,
    StatusFlags, NONCE_BYTES,
};
use kura_sql::{Cell, ColumnInfo, Interrupt, Kind, Output, Param, Processes, Session, SqlError};

use crate::server::Shared;

mod processlist;
mod results;
mod wire;

use crate::cluster::Routed;
use processlist::{ProcessList, Registered};
use results::RowWriter;
use wire::{bound_by, SqlStream, Wire};

/// The largest packet a client may send (MySQL's default max_allowed_packet).
const PACKET_MAX_BYTES: usize = 64 << 20;

/// How long the rest of a packet over [`PACKET_MAX_BYTES`] may take to arrive before
/// the connection ends without its error (MySQL's net_read_timeout, 30 s).
const SKIP_LIMIT: Duration = Duration::from_secs(30);

/// The most bytes one read from a connection takes.
const READ_BYTES: usize = 16 << 10;

/// Who may log in, by user: the stored `mysql_native_password` hash (None: no
/// password).
#[derive(Debug, Clone, Default)]
pub struct Users {
    users: HashMap<String, Option<[u8; NONCE_BYTES]>>,
}

impl Users {
    /// The users of a `--sql-users` file: `user:password` lines; `#` starts a comment.
    pub fn from_file(path: &Path) -> anyhow::Result<Users> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading SQL users from {}", path.display()))?;
        let mut users = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((user, password)) = line.split_once(':') else {
                bail!("{}:{}: want user:password", path.display(), n + 1);
            };
            let hash =
                (!password.is_empty()).then(|| my::native_password_hash(password.as_bytes()));
            users.insert(user.to_string(), hash);
        }
        Ok(Users { users })
    }

    /// `root` without a password.
    pub fn root_only() -> Users {
        Users {
            users: HashMap::from([("root".to_string(), None)]),
        }
    }

    /// Whether `login` answers `nonce` for a user: None if not; else the proof its
    /// answer carries (`SHA1(password)`; None for a user without a password), with
    /// which a cluster node logs in to another shard's primary as the same user.
    fn verify(
        &self,
        login: &Login,
        nonce: &[u8; NONCE_BYTES],
    ) -> Option<Option<[u8; NONCE_BYTES]>> {
        match self.users.get(&login.user)? {
            None => login.auth_response.is_empty().then_some(None),
            Some(stored) => {
                my::client::native_password_proof(nonce, stored, &login.auth_response).map(Some)
            }
        }
    }

    /// Whether anyone may log in without a password.
    pub fn has_passwordless(&self) -> bool {
        self.users.values().any(Option::is_none)
    }
}

/// Whether `listen` (the `-l` value) is a loopback address.
pub fn is_loopback(listen: &str) -> bool {
    listen == "localhost" || listen.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Accepts SQL connections on `listener` until the process ends, each on a thread of
/// its own.
pub fn serve(listener: TcpListener, shared: Arc<Shared>, users: Arc<Users>) -> io::Result<()> {
    let ids = Arc::new(AtomicU32::new(1));
    let open = Arc::new(AtomicUsize::new(0));
    let processes = Arc::new(ProcessList::default());
    std::thread::Builder::new()
        .name("kura-sql-accept".to_string())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if shared.stopping.load(Ordering::Acquire) {
                    break;
                }
                let id = ids.fetch_add(1, Ordering::Relaxed);
                let shared = Arc::clone(&shared);
                let users = Arc::clone(&users);
                let processes = Arc::clone(&processes);
                if open.fetch_add(1, Ordering::AcqRel) >= shared.config.connections_max {
                    open.fetch_sub(1, Ordering::AcqRel);
                    let _ = refuse(stream);
                    continue;
                }
                let done = Arc::clone(&open);
                let spawned = std::thread::Builder::new()
                    .name(format!("kura-sql-{id}"))
                    .spawn(move || {
                        // In cluster mode a replica passes the connection on to its
                        // shard's primary.
                        if let Some(stream) = crate::cluster::pass_on(&shared, stream) {
                            let _ = Connection::run(stream, &shared, &users, &processes, id);
                        }
                        done.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    // No thread for it: the stream closed as the closure dropped.
                    open.fetch_sub(1, Ordering::AcqRel);
                }
            }
        })?;
    Ok(())
}

/// MySQL's answer to a connection over the limit: 1040 Too many connections.
fn refuse(mut stream: TcpStream) -> io::Result<()> {
    let mut out = Vec::new();
    let mut seq = 0;
    my::write_packet(
        &mut out,
        &mut seq,
        &my::err(1040, b"08004", "Too many connections"),
    );
    stream.write_all(&out)
}

/// A prepared statement's protocol state beside the session's.
#[derive(Default)]
struct Statement {
    bound: Vec<(ColumnType, bool)>,
    long_data: Vec<Option<Vec<u8>>>,
}

/// Gives a new session the connection's stop signal and the server's connections.
fn attach(
    session: &mut Session,
    interrupt: &Arc<Interrupt>,
    processes: &Arc<ProcessList>,
) -> Result<(), SqlError> {
    session.set_interrupt(Arc::clone(interrupt))?;
    session.set_processes(Arc::clone(processes) as Arc<dyn Processes>);
    Ok(())
}

/// MySQL's server status flags for a session.
fn status(session: &Session) -> StatusFlags {
    let (in_transaction, autocommit) = session.status();
    let mut status = StatusFlags::empty();
    if in_transaction {
        status |= StatusFlags::SERVER_STATUS_IN_TRANS;
    }
    if autocommit {
        status |= StatusFlags::SERVER_STATUS_AUTOCOMMIT;
    }
    status
}

struct Connection<'a> {
    wire: Wire,
    session: Session,
    shared: &'a Shared,
    statements: HashMap<u32, Statement>,
    id: u32,
    user: String,
    /// Its place in SHOW PROCESSLIST.
    registered: Registered,
    processes: Arc<ProcessList>,
    interrupt: Arc<Interrupt>,
    /// A multi-statement query's results before its last say more follow.
    more_results: bool,
    /// In cluster mode: the statements that go to other shards (`crate::cluster`).
    shards: Option<crate::cluster::SqlShards>,
    /// Set while a statement of its own may be made again elsewhere: its refusal for
    /// a table being handed to another shard is kept from the client (`moved`).
    may_move: bool,
    moved: bool,
}

impl<'a> Connection<'a> {
    fn run(
        stream: TcpStream,
        shared: &'a Shared,
        users: &Users,
        processes: &Arc<ProcessList>,
        id: u32,
    ) -> io::Result<()> {
        let accepted = Instant::now();
        stream.set_nodelay(true)?;
        let host = stream
            .peer_addr()
            .map_or_else(|_| "unknown".to_string(), |a| a.to_string());
        let mut nonce = [0u8; NONCE_BYTES];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut nonce)?;
        let nonce = my::nonce_from_random(nonce);
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "unknown".to_string(), |a| a.ip().to_string());
        let mut wire = Wire {
            stream: SqlStream::Plain(stream),
            peer,
            reader: PacketReader::new(PACKET_MAX_BYTES),
            read_buf: vec![0; READ_BYTES].into_boxed_slice(),
            out: Vec::new(),
            seq: 0,
            caps: my::server_capabilities(),
            deadline: Some(accepted + Duration::from_secs(shared.config.sql_connect_timeout_secs)),
        };
        if let Some(socket) = wire.stream.socket() {
            bound_by(socket, wire.deadline)?;
        }
        wire.send(&my::greeting(id, &nonce, shared.tls.is_some()))?;
        wire.flush()?;
        let Some((mut session, proof)) = wire.login(users, &nonce, shared, id)? else {
            return Ok(());
        };
        let interrupt = Interrupt::new();
        let Some(socket) = wire.stream.socket() else {
            return Ok(());
        };
        let registered = ProcessList::register(
            processes,
            id,
            &session.user(),
            host,
            socket,
            Arc::clone(&interrupt),
        )?;
        attach(&mut session, &interrupt, processes).map_err(io::Error::other)?;
        wire.deadline = None;
        if let Some(socket) = wire.stream.socket() {
            bound_by(socket, None)?;
        }
        let user = session.user();
        let wire_caps = wire.caps;
        let mut conn = Connection {
            wire,
            session,
            shared,
            statements: HashMap::new(),
            more_results: false,
            shards: crate::cluster::SqlShards::new(shared, &user, proof, wire_caps),
            may_move: false,
            moved: false,
            id,
            user,
            registered,
            processes: Arc::clone(processes),
            interrupt,
        };
        loop {
            let Some((_, payload)) = conn.wire.packet()? else {
                return Ok(());
            };
            // A reply follows the request's last frame (a request of 16 MiB or more
            // spans several).
            conn.wire.seq = conn.wire.reader.reply_seq();
            let process = Arc::clone(&conn.registered.process);
            let statement = match payload.first() {
                // COM_QUERY: its text is the statement shown.
                Some(0x03) => Some(&payload[1..]),
                _ => None,
            };
            conn.interrupt.command_starts();
            process.busy(statement);
            let going_on = conn.command(&payload);
            process.idle();
            // Killed, or its client went away while the statement ran: no reply.
            if !going_on? || conn.interrupt.connection_ends() {
                return Ok(());
            }
            conn.wire.flush()?;
        }
    }

    fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        self.wire.send(payload)
    }

    fn error(&mut self, e: &SqlError) -> io::Result<()> {
        self.wire.error(e)
    }

    /// In cluster mode, answers a statement with Vitess's kind of error (1105, the
    /// reason, retryable) while this node serves no reads (`Shared::read_refusal`);
    /// whether it did.
    fn refuses_reads(&mut self) -> io::Result<bool> {
        match self.shared.read_refusal() {
            Some(why) => {
                self.error(&SqlError::internal(why))?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn status(&self) -> StatusFlags {
        let mut status = status(&self.session);
        if self.more_results {
            status |= StatusFlags::SERVER_MORE_RESULTS_EXISTS;
        }
        status
    }

    /// Answers one command. Returns false when the connection ends.
    fn command(&mut self, payload: &[u8]) -> io::Result<bool> {
        if let Some(shards) = self.shards.as_mut() {
            // A statement prepared on another shard: its commands go there.
            if shards.owns_statement(payload) {
                shards.statement_command(
                    self.shared,
                    &mut self.session,
                    payload,
                    &mut self.wire,
                )?;
                return Ok(true);
            }
        }
        let command = match my::parse_command(payload) {
            Ok(c) => c,
            Err(e) => {
                self.send(&e.err_packet())?;
                return Ok(true);
            }
        };
        match command {
            Command::Quit => return Ok(false),
            Command::Ping | Command::Debug => {
                let status = self.status();
                self.send(&my::ok(0, 0, status, 0, ""))?;
            }
            Command::InitDb(db) => {
                let db = String::from_utf8_lossy(db).into_owned();
                match self.session.use_database(&db) {
                    Ok(()) => {
                        let status = self.status();
                        self.send(&my::ok(0, 0, status, 0, ""))?;
                    }
                    Err(e) => self.error(&e)?,
                }
            }
            Command::Query(_) | Command::StmtExecute { .. } if self.refuses_reads()? => {}
            Command::Query(sql) => {
                // A string of bytes that are not text (a BLOB's, as mysqldump
                // writes them) goes on as hex.
                let sql = kura_sql::bytes::statement_text(sql);
                // `a; b` from a client that asked for CLIENT_MULTI_STATEMENTS: each
                // statement's result in turn, all but the last saying more follow;
                // the first error ends them.
                let parts = if self
                    .wire
                    .caps
                    .contains(CapabilityFlags::CLIENT_MULTI_STATEMENTS)
                {
                    kura_sql::bytes::statements(&sql)
                } else {
                    vec![&*sql]
                };
                let last = parts.len().saturating_sub(1);
                for (i, part) in parts.iter().enumerate() {
                    self.more_results = i < last;
                    let ok = self.query(part)?;
                    if !ok {
                        break;
                    }
                }
                self.more_results = false;
            }
            Command::StmtPrepare(sql) => {
                let sql = kura_sql::bytes::statement_text(sql).into_owned();
                if let Some(shards) = self.shards.as_mut() {
                    // Prepared on the shard holding its tables, if another.
                    if shards
                        .prepare(self.shared, &self.session, &sql, &mut self.wire)?
                        .is_some()
                    {
                        return Ok(true);
                    }
                }
                match self.session.prepare(&sql) {
                    Ok(p) => {
                        self.statements.insert(
                            p.id,
                            Statement {
                                bound: Vec::new(),
                                long_data: vec![None; p.params],
                            },
                        );
                        self.send(&my::stmt_prepare_ok(
                            p.id,
                            p.columns.len() as u16,
                            p.params as u16,
                            0,
                        ))?;
                        let status = self.status();
                        if p.params > 0 {
                            for _ in 0..p.params {
                                self.send(&my::param_def())?;
                            }
                            if let Some(eof) = my::end_of_columns(self.wire.caps, status, 0) {
                                self.send(&eof)?;
                            }
                        }
                        if !p.columns.is_empty() {
                            for c in &p.columns {
                                self.send(&column_def(c))?;
                            }
                            if let Some(eof) = my::end_of_columns(self.wire.caps, status, 0) {
                                self.send(&eof)?;
                            }
                        }
                    }
                    Err(e) => self.error(&e)?,
                }
            }
            Command::StmtExecute { stmt_id, rest } => {
                let Some(params) = self.session.prepared(stmt_id).map(|p| p.params) else {
                    self.error(&SqlError::unknown_statement(stmt_id, "mysqld_stmt_execute"))?;
                    return Ok(true);
                };
                let state = self.statements.entry(stmt_id).or_default();
                if state.long_data.len() < params {
                    state.long_data.resize(params, None);
                }
                let parsed =
                    my::parse_execute(rest, params, &mut state.bound, &mut state.long_data);
                match parsed {
                    Ok(execute) => {
                        let params: Vec<Param> = execute.params.into_iter().map(param).collect();
                        let mut attempts = 0;
                        let (result, ended, failed) = loop {
                            let status = self.status();
                            let mut writer =
                                RowWriter::new(&mut self.wire, self.shared, true, status);
                            let result = self.session.execute_to(stmt_id, &params, &mut writer);
                            let (ended, failed) = (writer.ended, writer.failed);
                            // Held by a table's hand-off: made again once it ends (here,
                            // if the table stayed; if it went, the refusal is shown).
                            if moving(&result) && !ended && attempts < MOVE_ATTEMPTS {
                                attempts += 1;
                                self.wait_hand_off();
                                continue;
                            }
                            break (result, ended, failed);
                        };
                        if let Some(shards) = self.shards.as_mut() {
                            shards.ran_here(&self.session);
                        }
                        self.finish(result, true, ended, failed)?;
                    }
                    Err(e) => self.send(&e.err_packet())?,
                }
            }
            Command::StmtSendLongData {
                stmt_id,
                param,
                data,
            } => {
                if let Some(state) = self.statements.get_mut(&stmt_id) {
                    let i = usize::from(param);
                    if i >= state.long_data.len() {
                        state.long_data.resize(i + 1, None);
                    }
                    state.long_data[i]
                        .get_or_insert_with(Vec::new)
                        .extend_from_slice(data);
                }
            }
            Command::StmtClose(id) => {
                self.session.close(id);
                self.statements.remove(&id);
            }
            Command::StmtReset(id) => {
                if let Some(state) = self.statements.get_mut(&id) {
                    state.long_data.iter_mut().for_each(|d| *d = None);
                }
                let status = self.status();
                self.send(&my::ok(0, 0, status, 0, ""))?;
            }
            Command::FieldList(table) => {
                let name = table.split(|&b| b == 0).next().unwrap_or(&[]);
                let name = String::from_utf8_lossy(name).into_owned();
                match self.session.table_columns(&name) {
                    Ok(columns) => {
                        for c in &columns {
                            self.send(&column_def(c))?;
                        }
                        let status = self.status();
                        self.send(&my::end_of_rows(self.wire.caps, status, 0))?;
                    }
                    Err(e) => self.error(&e)?,
                }
            }
            Command::SetOption(_) => {
                // MySQL answers with the OK form to a client that deprecates EOF.
                let status = self.status();
                self.send(&my::end_of_rows(self.wire.caps, status, 0))?;
            }
            Command::ResetConnection => {
                let session = Session::new(Arc::clone(&self.shared.tables), self.id, &self.user)
                    .and_then(|mut s| {
                        attach(&mut s, &self.interrupt, &self.processes)?;
                        Ok(s)
                    });
                match session {
                    Ok(mut s) => {
                        let found = CapabilityFlags::CLIENT_FOUND_ROWS;
                        s.set_found_rows(self.wire.caps.contains(found));
                        self.session = s;
                        self.statements.clear();
                        if let Some(shards) = self.shards.as_mut() {
                            shards.reset();
                        }
                        let status = self.status();
                        self.send(&my::ok(0, 0, status, 0, ""))?;
                    }
                    Err(e) => self.error(&e)?,
                }
            }
            Command::Statistics => {
                let uptime = self.shared.uptime_secs();
                self.send(format!("Uptime: {uptime}").as_bytes())?;
            }
            Command::ProcessKill(id) => match self.processes.kill(self.id, id, true) {
                Ok(()) => {
                    let status = self.status();
                    self.send(&my::ok(0, 0, status, 0, ""))?;
                }
                Err(e) => self.error(&e)?,
            },
            Command::StmtFetch { .. } | Command::ChangeUser(_) | Command::Other(_) => {
                self.error(&SqlError::new(1047, b"08S01", "Unknown command"))?;
            }
        }
        Ok(true)
    }

    /// One statement of a COM_QUERY, its result sent; whether it succeeded.
    fn query(&mut self, sql: &str) -> io::Result<bool> {
        let Some(mut shards) = self.shards.take() else {
            return self.query_here(sql);
        };
        let mut attempts = 0;
        let ok = loop {
            let routed = shards.before(
                self.shared,
                &mut self.session,
                sql,
                self.more_results,
                &mut self.wire,
            );
            match routed {
                Ok(Routed::Answered(ok)) => break Ok(ok),
                Ok(Routed::Here(after)) => {
                    self.may_move = attempts < MOVE_ATTEMPTS;
                    let ok = self.query_here(sql);
                    self.may_move = false;
                    let succeeded = ok.as_ref().is_ok_and(|ok| *ok);
                    shards.after(self.shared, &self.session, after, succeeded);
                    if std::mem::take(&mut self.moved) {
                        // Its table was being handed to another shard and nothing was
                        // made: once the hand-off ends, routed again (there, if it went).
                        attempts += 1;
                        self.wait_hand_off();
                        continue;
                    }
                    break ok;
                }
                Err(e) => break Err(e),
            }
        };
        self.shards = Some(shards);
        ok
    }

    /// Waits while a hand-off holds a table's writes, at most the pause and a margin.
    fn wait_hand_off(&self) {
        let pause = Duration::from_millis(self.shared.config.move_pause_ms);
        let deadline = Instant::now() + pause + Duration::from_millis(500);
        while self.shared.tables.holding() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// One statement run on this node.
    fn query_here(&mut self, sql: &str) -> io::Result<bool> {
        if let Some(load) = kura_sql::load_data::parse(sql) {
            return self.load_data(load);
        }
        let status = self.status();
        let mut writer = RowWriter::new(&mut self.wire, self.shared, false, status);
        let result = self.session.query_to(sql, &mut writer);
        let (ended, failed) = (writer.ended, writer.failed);
        if self.may_move && !ended && moving(&result) {
            self.moved = true;
            return Ok(false);
        }
        let ok = result.is_ok() && !ended;
        self.finish(result, false, ended, failed)?;
        Ok(ok)
    }

    /// `LOAD DATA LOCAL INFILE`: asks the client for its file and inserts its rows
    /// a batch at a time as the packets come (`kura_sql::load_data`). An error stops
    /// the inserts but the rest of the file is still read, so the client, done
    /// sending, reads it.
    fn load_data(
        &mut self,
        load: Result<kura_sql::load_data::LoadData, SqlError>,
    ) -> io::Result<bool> {
        use kura_sql::load_data::{RowReader, BATCH};
        let spec = match load {
            Ok(spec) if !spec.local => {
                self.error(&SqlError::new(
                    1235,
                    b"42000",
                    "This version of Kura doesn't yet support 'LOAD DATA INFILE' of the server's own files: use LOAD DATA LOCAL INFILE",
                ))?;
                return Ok(false);
            }
            Ok(spec) => spec,
            Err(e) => {
                self.error(&e)?;
                return Ok(false);
            }
        };
        if !self.wire.caps.contains(CapabilityFlags::CLIENT_LOCAL_FILES) {
            self.error(&SqlError::new(
                3948,
                b"42000",
                "Loading local data is disabled; this must be enabled on both the client and server sides",
            ))?;
            return Ok(false);
        }
        let mut request = vec![0xfb];
        request.extend_from_slice(spec.file.as_bytes());
        self.send(&request)?;
        self.wire.flush()?;
        let mut reader = RowReader::new(&spec);
        let mut pending = Vec::new();
        let (mut records, mut written) = (0u64, 0u64);
        let mut failed: Option<SqlError> = None;
        loop {
            let Some((seq, bytes)) = self.wire.packet()? else {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the client left during LOAD DATA",
                ));
            };
            self.wire.seq = seq.wrapping_add(1);
            let end = bytes.is_empty();
            reader.feed(&bytes);
            pending.extend(reader.rows(end));
            while failed.is_none() && (pending.len() >= BATCH || (end && !pending.is_empty())) {
                let batch: Vec<_> = pending.drain(..pending.len().min(BATCH)).collect();
                records += batch.len() as u64;
                match self.session.load_rows(&spec, &batch) {
                    Ok(n) => written += n,
                    Err(e) => failed = Some(e),
                }
            }
            if failed.is_some() {
                pending.clear();
            }
            if end {
                break;
            }
        }
        let result = match failed {
            Some(e) => Err(e),
            None => Ok(Output::Done(kura_sql::Done {
                affected: written,
                last_insert_id: 0,
                info: format!(
                    "Records: {records}  Deleted: 0  Skipped: {}  Warnings: 0",
                    records.saturating_sub(written)
                ),
            })),
        };
        let ok = result.is_ok();
        self.reply(result, false)?;
        Ok(ok)
    }

    /// Ends a statement whose rows may have streamed: a lost client ends the
    /// connection, a reply that already ended gets nothing more.
    fn finish(
        &mut self,
        result: Result<Output, SqlError>,
        binary: bool,
        ended: bool,
        failed: Option<io::Error>,
    ) -> io::Result<()> {
        if let Some(e) = failed {
            return Err(e);
        }
        if ended {
            // The rows read must still be durable before the error's flush.
            let lsn = self.session.take_read_lsn();
            if lsn > 0 {
                if let Err(e) = self.shared.store.wait_acked(lsn) {
                    tracing::debug!("waiting for the log: {e}");
                }
            }
            return Ok(());
        }
        self.reply(result, binary)
    }

    /// Sends a statement's outcome, once what it shows is durable.
    fn reply(&mut self, result: Result<Output, SqlError>, binary: bool) -> io::Result<()> {
        let lsn = self.session.take_read_lsn();
        if lsn > 0 {
            if let Err(e) = self.shared.store.wait_acked(lsn) {
                return self.error(&SqlError::internal(e));
            }
        }
        let written = self.session.take_written_lsn();
        let replicas = self.shared.config.min_sync_replicas;
        if written > 0 && replicas > 0 && result.is_ok() {
            match crate::sync_replies::settle_blocking(self.shared, written, replicas) {
                Ok(true) => {}
                // MySQL's ER_ERROR_DURING_COMMIT: the change stands here, unconfirmed.
                Ok(false) => {
                    return self.error(&SqlError::new(
                        1180,
                        b"HY000",
                        format!(
                            "Got error during COMMIT: {replicas} replica(s) did not confirm in time; the change is made on this server and may be lost if it fails"
                        ),
                    ))
                }
                Err(e) => return self.error(&SqlError::internal(e)),
            }
        }
        let status = self.status();
        match result {
            Err(e) => self.error(&e),
            Ok(Output::Done(done)) => self.send(&my::ok(
                done.affected,
                done.last_insert_id,
                status,
                0,
                &done.info,
            )),
            Ok(Output::Rows(rs)) => {
                let mut writer = RowWriter::new(&mut self.wire, self.shared, binary, status);
                writer.header(&rs.columns)?;
                writer.body(&rs.rows)?;
                if writer.ended {
                    return Ok(());
                }
                writer.end()
            }
            Ok(Output::Streamed) => {
                RowWriter::new(&mut self.wire, self.shared, binary, status).end()
            }
        }
    }
}

/// How many times a statement refused for a table's hand-off is made again.
const MOVE_ATTEMPTS: u32 = 3;

/// Whether a statement of its own was refused because its table was being handed to
/// another shard (nothing was made).
fn moving<T>(result: &Result<T, SqlError>) -> bool {
    matches!(result, Err(e) if e.is_moving_table())
}

fn param(p: my::Param) -> Param {
    match p {
        my::Param::Null => Param::Null,
        my::Param::Int(n) => Param::Int(n),
        my::Param::UInt(n) => Param::UInt(n),
        my::Param::Double(f) => Param::Double(f),
        my::Param::Bytes(b) => Param::Bytes(b),
    }
}

fn value(c: &Cell) -> my::Value<'_> {
    match c {
        Cell::Null => my::Value::Null,
        Cell::Int(n) => my::Value::Int(*n),
        Cell::UInt(n) => my::Value::UInt(*n),
        Cell::Double(f) => my::Value::Double(*f),
        Cell::Bytes(b) => my::Value::Bytes(b),
    }
}

fn wire_type(kind: Kind) -> ColumnType {
    match kind {
        Kind::Int | Kind::IntUnsigned => ColumnType::MYSQL_TYPE_LONG,
        Kind::BigInt | Kind::BigIntUnsigned => ColumnType::MYSQL_TYPE_LONGLONG,
        Kind::Double => ColumnType::MYSQL_TYPE_DOUBLE,
        Kind::Decimal(..) => ColumnType::MYSQL_TYPE_NEWDECIMAL,
        Kind::Varchar(_) => ColumnType::MYSQL_TYPE_VAR_STRING,
        Kind::Char(_) | Kind::Enum(_) => ColumnType::MYSQL_TYPE_STRING,
        Kind::Text | Kind::Blob => ColumnType::MYSQL_TYPE_BLOB,
        Kind::Date => ColumnType::MYSQL_TYPE_DATE,
        Kind::DateTime(_) => ColumnType::MYSQL_TYPE_DATETIME,
        Kind::Timestamp(_) => ColumnType::MYSQL_TYPE_TIMESTAMP,
        Kind::Null => ColumnType::MYSQL_TYPE_NULL,
    }
}

/// A result column's definition, as MySQL describes a column of its type.
fn column_def(c: &ColumnInfo) -> Vec<u8> {
    const BINARY: u16 = 63;
    const UTF8MB4_BIN: u16 = 46;
    let (collation, length, decimals) = match c.kind {
        Kind::Int | Kind::IntUnsigned => (BINARY, 11, 0),
        Kind::BigInt | Kind::BigIntUnsigned => (BINARY, 20, 0),
        Kind::Double => (BINARY, 22, 31),
        // MySQL's length: the digits, the point and the sign.
        Kind::Decimal(p, s) => (BINARY, u32::from(p) + u32::from(s > 0) + 1, s),
        Kind::Varchar(n) | Kind::Char(n) | Kind::Enum(n) => (UTF8MB4_BIN, n.saturating_mul(4), 0),
        Kind::Text => (UTF8MB4_BIN, 262_140, 0),
        Kind::Blob => (BINARY, 65_535, 0),
        Kind::Date => (BINARY, 10, 0),
        Kind::DateTime(p) | Kind::Timestamp(p) => (BINARY, 19 + u32::from(p) + u32::from(p > 0), p),
        Kind::Null => (BINARY, 0, 0),
    };
    let mut flags = ColumnFlags::empty();
    if c.not_null {
        flags |= ColumnFlags::NOT_NULL_FLAG;
    }
    if c.primary {
        flags |= ColumnFlags::PRI_KEY_FLAG;
    }
    if c.unique {
        flags |= ColumnFlags::UNIQUE_KEY_FLAG;
    }
    if c.kind.is_unsigned() {
        flags |= ColumnFlags::UNSIGNED_FLAG;
    }
    if c.kind.is_integer() || matches!(c.kind, Kind::Double | Kind::Decimal(..)) {
        flags |= ColumnFlags::NUM_FLAG;
    }
    if matches!(c.kind, Kind::Text | Kind::Blob) {
        flags |= ColumnFlags::BLOB_FLAG;
    }
    if matches!(c.kind, Kind::Enum(_)) {
        flags |= ColumnFlags::ENUM_FLAG;
    }
    if collation == BINARY && !matches!(c.kind, Kind::Null) {
        flags |= ColumnFlags::BINARY_FLAG;
    }
    let schema = if c.table.is_empty() {
        ""
    } else {
        kura_sql::translate::DATABASE
    };
    my::column_def(&my::ColumnDef {
        schema,
        table: &c.table,
        org_table: &c.table,
        name: &c.name,
        org_name: &c.name,
        collation,
        length,
        ty: wire_type(c.kind),
        flags,
        decimals,
    })
}
