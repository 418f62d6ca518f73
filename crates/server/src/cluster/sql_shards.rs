//! SQL over tables on several shards (issue 42): a shard's primary runs a statement
//! whose tables are its shard's, and passes one whose tables are all another shard's
//! on to that shard's primary, relaying the reply.
//!
//! Each SQL connection keeps, beside its own session, a connection to each other
//! shard's primary it has reached (`Upstream`), logged in as the same user: the
//! client's `mysql_native_password` answer proves `SHA1(password)` to this node, and
//! that proof answers the other primary's nonce, so both ends check the same users
//! (`--sql-users` must list the same ones on every node). The session's state goes
//! along: its current database before each statement (COM_INIT_DB), and every `SET`
//! it made, replayed on each new upstream and repeated on the open ones.
//!
//! Which statement goes where ([`kura_sql::route::reach`]): one naming tables of one
//! other shard goes there; of this shard, or of no placed table, runs here; of
//! several shards, is refused (1235, `sql_spanning`). A transaction runs whole on one
//! shard: BEGIN runs here, and if its first statement names another shard's tables
//! the transaction moves there (BEGIN again there) and every statement goes there
//! until the other primary says it ended (its status no longer in a transaction:
//! COMMIT, ROLLBACK, an implicit commit). A statement in a transaction naming a table
//! of another shard than the transaction's is refused, and the transaction goes on.
//! CREATE TABLE of a name no shard holds places it here first (`super::tables`);
//! DROP TABLE here unplaces it.
//!
//! Not passed on (refused with 1235 when they name another shard's table): LOAD DATA
//! and prepared statements. A lost upstream ends its transaction there (as a lost
//! connection ends one in MySQL); the statement gets 1105 and may be tried again.
//!
//! What it is not for: where tables live (`super::tables`, etcd) or passing a whole
//! connection to its shard's primary (`super::sql_forward`).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::time::Duration;

use kura_mysql::client::{self as upstream_client, ReplyEnd, Step};
use kura_mysql::{self as my, CapabilityFlags, PacketReader, StatusFlags, NONCE_BYTES};
use kura_sql::route::Reach;
use kura_sql::{Session, SqlError};

use super::ring::Placement;
use crate::server::Shared;

/// How long opening and logging in to another primary may take.
const LOGIN_WITHIN: Duration = Duration::from_secs(5);
/// The `SET` statements kept for new upstreams (the latest, without repeats).
const SETS_KEPT: usize = 64;
/// The largest packet taken from another primary.
const PACKET_MAX: usize = 1 << 30;

/// Where a connection's replies go.
pub trait Replies {
    /// Sends one packet of the reply (the connection numbers it).
    fn packet(&mut self, payload: &[u8]) -> io::Result<()>;
}

/// A statement's way, as [`SqlShards::before`] decides it.
pub enum Routed {
    /// It was answered: passed on, or refused. Whether it succeeded.
    Answered(bool),
    /// It runs here; then [`SqlShards::after`] with this.
    Here(After),
}

/// What follows a statement run here.
pub struct After(AfterKind);

enum AfterKind {
    Nothing,
    /// It named tables (or none): a transaction here has touched this shard.
    Tables,
    Begin(String),
    Set(String),
    /// CREATE TABLE of a name placed here just before it.
    Created(String),
    Dropped(Vec<String>),
}

/// A connection's statements on other shards.
pub struct SqlShards {
    user: String,
    /// `SHA1(password)` from the client's login (None: no password).
    proof: Option<[u8; NONCE_BYTES]>,
    /// The client's capabilities: asked of each upstream, so its replies fit.
    caps: CapabilityFlags,
    upstreams: HashMap<String, Upstream>,
    /// The shard the open transaction runs on, when not this one.
    bound: Option<String>,
    /// The BEGIN of a transaction here that has named no table yet.
    begun: Option<String>,
    /// Whether the transaction here has run a statement.
    touched: bool,
    sets: Vec<String>,
}

impl SqlShards {
    /// For a connection of `user`, logged in with `proof`, asking for `caps`; None
    /// outside cluster mode.
    pub fn new(
        shared: &Shared,
        user: &str,
        proof: Option<[u8; NONCE_BYTES]>,
        caps: CapabilityFlags,
    ) -> Option<SqlShards> {
        super::enabled(&shared.config).then(|| SqlShards {
            user: user.to_string(),
            proof,
            caps,
            upstreams: HashMap::new(),
            bound: None,
            begun: None,
            touched: false,
            sets: Vec::new(),
        })
    }

    /// Forgets the session's state, as COM_RESET_CONNECTION does: its upstreams
    /// close (a transaction there rolls back) and its `SET`s are forgotten.
    pub fn reset(&mut self) {
        self.upstreams.clear();
        self.bound = None;
        self.begun = None;
        self.touched = false;
        self.sets.clear();
    }

    /// Decides where `sql` (one statement) runs, and passes it on if elsewhere;
    /// `more`: more results of the same query follow its reply.
    pub fn before(
        &mut self,
        shared: &Shared,
        session: &mut Session,
        sql: &str,
        more: bool,
        out: &mut dyn Replies,
    ) -> io::Result<Routed> {
        let here = Routed::Here(After(AfterKind::Nothing));
        let Some(placement) = shared.cluster.placement() else {
            return Ok(here);
        };
        let creates = sql
            .trim_start()
            .get(..6)
            .is_some_and(|w| w.eq_ignore_ascii_case("create"));
        if placement.tables.is_empty() && self.upstreams.is_empty() && !creates {
            // No table is placed anywhere: every statement is this shard's, save a
            // CREATE TABLE, which places its table.
            return Ok(Routed::Here(After(AfterKind::Tables)));
        }
        let db = session.database();
        let reach = kura_sql::route::reach(sql, db.as_deref());
        if !session.status().0 {
            self.begun = None;
            self.touched = false;
        }
        let named = |tables: &[String]| -> Vec<usize> {
            let mut shards: Vec<usize> = tables
                .iter()
                .filter_map(|t| placement.table_shard(t))
                .collect();
            shards.sort_unstable();
            shards.dedup();
            shards
        };
        if let Some(bound) = self.bound.clone() {
            let b = placement.shard_index(&bound);
            let shards = match &reach {
                Reach::Tables(ts) | Reach::Drop(ts) => named(ts),
                Reach::Create(t) | Reach::Load(t) => named(std::slice::from_ref(t)),
                _ => Vec::new(),
            };
            if let Some(&other) = shards.iter().find(|&&s| Some(s) != b) {
                let why = format!(
                    "a transaction over tables of several shards: it runs on shard {bound}, and {} is on shard {}",
                    first_table_on(&placement, &reach, other),
                    placement.shards[other]
                );
                return self.spanning(shared, &why, out);
            }
            return match reach {
                Reach::Use(_) => Ok(here),
                Reach::Set => Ok(Routed::Here(After(AfterKind::Set(sql.to_string())))),
                Reach::Load(_) => refuse(
                    out,
                    &SqlError::unsupported("LOAD DATA into a table of another shard"),
                ),
                _ => match b {
                    Some(b) => self.forward(shared, &placement, b, db.as_deref(), sql, more, out),
                    None => {
                        self.bound = None;
                        refuse(
                            out,
                            &SqlError::internal(format!(
                                "shard {bound}, which the transaction ran on, is no longer known; the transaction is lost there"
                            )),
                        )
                    }
                },
            };
        }
        let tables = match reach {
            Reach::Set => return Ok(Routed::Here(After(AfterKind::Set(sql.to_string())))),
            Reach::Use(_) | Reach::End => return Ok(here),
            Reach::Begin => return Ok(Routed::Here(After(AfterKind::Begin(sql.to_string())))),
            Reach::Tables(ts) => (named(&ts), After(AfterKind::Tables)),
            Reach::Drop(ts) => (named(&ts), After(AfterKind::Dropped(ts))),
            Reach::Load(t) => {
                let shards = named(std::slice::from_ref(&t));
                if shards.iter().any(|&s| Some(s) != placement.mine) {
                    return refuse(
                        out,
                        &SqlError::unsupported(format!(
                            "LOAD DATA into a table of another shard: {t} is on shard {}; connect to a node of it",
                            placement.shards[shards[0]]
                        )),
                    );
                }
                (shards, After(AfterKind::Tables))
            }
            Reach::Create(t) => match placement.table_shard(&t) {
                Some(s) => (vec![s], After(AfterKind::Tables)),
                None if shared.store.is_read_only() => (Vec::new(), After(AfterKind::Nothing)),
                None => match super::tables::claim(shared, &t) {
                    Ok(holder) => match placement.shard_index(&holder) {
                        Some(s) if Some(s) != placement.mine => (vec![s], After(AfterKind::Tables)),
                        _ => (Vec::new(), After(AfterKind::Created(t))),
                    },
                    Err(why) => {
                        return refuse(
                            out,
                            &SqlError::internal(format!(
                            "CREATE TABLE {t}: placing the table on this shard: {why}; try again"
                        )),
                        )
                    }
                },
            },
        };
        let (shards, after) = tables;
        match shards.as_slice() {
            [] => Ok(Routed::Here(after)),
            [s] if Some(*s) == placement.mine => Ok(Routed::Here(after)),
            [s] => {
                if session.status().0 {
                    if self.touched {
                        let why = format!(
                            "a transaction over tables of several shards: it runs on this shard, and {} is on shard {}",
                            first_table_on(&placement, &reach_of(sql, db.as_deref()), *s),
                            placement.shards[*s]
                        );
                        return self.spanning(shared, &why, out);
                    }
                    // The transaction has named no table here: it goes there.
                    if let Err(e) = session.query("ROLLBACK") {
                        return refuse(out, &e);
                    }
                }
                let s = *s;
                let begin = self.begun.take();
                if let Some(begin) = begin {
                    if let Some(answered) =
                        self.quietly(&placement, s, db.as_deref(), &begin, out)?
                    {
                        return Ok(answered);
                    }
                }
                self.forward(shared, &placement, s, db.as_deref(), sql, more, out)
            }
            _ => {
                let reach = reach_of(sql, db.as_deref());
                let list: Vec<String> = shards
                    .iter()
                    .map(|&s| {
                        format!(
                            "{} on {}",
                            first_table_on(&placement, &reach, s),
                            placement.shards[s]
                        )
                    })
                    .collect();
                let why = format!(
                    "a statement over tables of several shards ({})",
                    list.join(", ")
                );
                self.spanning(shared, &why, out)
            }
        }
    }

    /// What follows a statement that ran here, `ok` or not.
    pub fn after(&mut self, shared: &Shared, session: &Session, after: After, ok: bool) {
        match after.0 {
            AfterKind::Nothing => {}
            AfterKind::Tables => {
                if session.status().0 {
                    self.touched = true;
                    self.begun = None;
                }
            }
            AfterKind::Begin(sql) => {
                if ok {
                    self.begun = Some(sql);
                    self.touched = false;
                }
            }
            AfterKind::Set(sql) => {
                if ok {
                    self.remember_set(&sql);
                }
            }
            AfterKind::Created(table) => {
                if !ok && shared.tables.catalog().table(&table).is_none() {
                    super::tables::release(shared, &table);
                }
            }
            AfterKind::Dropped(tables) => {
                let catalog = shared.tables.catalog();
                for t in tables {
                    if catalog.table(&t).is_none() {
                        super::tables::release(shared, &t);
                    }
                }
            }
        }
    }

    /// Whether `sql`, a prepared statement's text, names a table of another shard:
    /// the refusal, if so (prepared statements run here only).
    pub fn prepare_refusal(
        &self,
        shared: &Shared,
        session: &Session,
        sql: &str,
    ) -> Option<SqlError> {
        let placement = shared.cluster.placement()?;
        let tables = match kura_sql::route::reach(sql, session.database().as_deref()) {
            Reach::Tables(ts) | Reach::Drop(ts) => ts,
            Reach::Create(t) | Reach::Load(t) => vec![t],
            _ => Vec::new(),
        };
        let other = tables.iter().find_map(|t| {
            let s = placement.table_shard(t)?;
            (Some(s) != placement.mine).then(|| (t, &placement.shards[s]))
        });
        if self.bound.is_some() || other.is_some() {
            let (t, s) = other.map_or(("a table", "the transaction's"), |(t, s)| (t, s));
            return Some(SqlError::unsupported(format!(
                "prepared statements on another shard's tables ({t} is on shard {s}): use a text statement, or connect to a node of that shard"
            )));
        }
        None
    }

    fn remember_set(&mut self, sql: &str) {
        self.sets.retain(|s| s != sql);
        self.sets.push(sql.to_string());
        if self.sets.len() > SETS_KEPT {
            self.sets.remove(0);
        }
        let mut lost = Vec::new();
        for (shard, upstream) in &mut self.upstreams {
            match upstream.quiet(&command(0x03, sql.as_bytes())) {
                Ok(Ok(status)) => {
                    if self.bound.as_deref() == Some(shard.as_str())
                        && !status.contains(StatusFlags::SERVER_STATUS_IN_TRANS)
                    {
                        self.bound = None;
                    }
                }
                Ok(Err(why)) => tracing::debug!("SET on shard {shard}: {why}"),
                Err(_) => lost.push(shard.clone()),
            }
        }
        for shard in lost {
            self.lose(&shard);
        }
    }

    fn spanning(
        &mut self,
        shared: &Shared,
        why: &str,
        out: &mut dyn Replies,
    ) -> io::Result<Routed> {
        shared.cluster.sql_spanning.fetch_add(1, Ordering::Relaxed);
        refuse(
            out,
            &SqlError::unsupported(format!("{why}; run it on each shard apart")),
        )
    }

    /// Drops the upstream to `shard`; a transaction there is lost with it.
    fn lose(&mut self, shard: &str) {
        self.upstreams.remove(shard);
        if self.bound.as_deref() == Some(shard) {
            self.bound = None;
        }
    }

    /// The upstream to shard `s`'s primary, opened if need be; or the reply to send.
    fn upstream(
        &mut self,
        placement: &Placement,
        s: usize,
        db: Option<&str>,
    ) -> Result<&mut Upstream, SqlError> {
        let shard = placement.shards[s].clone();
        let addr = placement.primary_sql(s).map_err(SqlError::internal)?;
        if self.upstreams.get(&shard).is_some_and(|u| u.addr != addr) {
            // The shard's primary changed: a transaction on the old one is its own.
            let had_transaction = self.bound.as_deref() == Some(shard.as_str());
            self.lose(&shard);
            if had_transaction {
                return Err(SqlError::internal(format!(
                    "shard {shard}'s primary changed during the transaction; it is rolled back there, try again"
                )));
            }
        }
        if let Entry::Vacant(empty) = self.upstreams.entry(shard.clone()) {
            let mut upstream = Upstream::open(&addr, &self.user, self.proof.as_ref(), self.caps)
                .map_err(|why| {
                    SqlError::internal(format!(
                        "passing the statement on to shard {shard}'s primary ({addr}): {why}; try again"
                    ))
                })?;
            for set in &self.sets {
                if let Ok(Err(why)) | Err(why) = upstream
                    .quiet(&command(0x03, set.as_bytes()))
                    .map_err(|e| e.to_string())
                {
                    tracing::debug!("replaying {set:?} on shard {shard}: {why}");
                }
            }
            empty.insert(upstream);
        }
        let gone = || SqlError::internal(format!("shard {shard}'s connection is gone, try again"));
        let upstream = self.upstreams.get_mut(&shard).ok_or_else(gone)?;
        if let Some(db) = db.filter(|db| upstream.db.as_deref() != Some(*db)) {
            match upstream.quiet(&command(0x02, db.as_bytes())) {
                Ok(Ok(_)) => upstream.db = Some(db.to_string()),
                Ok(Err(why)) => {
                    return Err(SqlError::internal(format!(
                        "shard {shard} has no database {db} ({why}): create it there"
                    )))
                }
                Err(e) => {
                    self.lose(&shard);
                    return Err(SqlError::internal(format!(
                        "shard {shard}'s primary ({addr}): {e}; try again"
                    )));
                }
            }
        }
        self.upstreams.get_mut(&shard).ok_or_else(gone)
    }

    /// Runs `sql` on shard `s` without showing its reply; None if it succeeded, or
    /// the refusal sent in its place.
    fn quietly(
        &mut self,
        placement: &Placement,
        s: usize,
        db: Option<&str>,
        sql: &str,
        out: &mut dyn Replies,
    ) -> io::Result<Option<Routed>> {
        let shard = placement.shards[s].clone();
        let upstream = match self.upstream(placement, s, db) {
            Ok(u) => u,
            Err(e) => return refuse(out, &e).map(Some),
        };
        match upstream.quiet(&command(0x03, sql.as_bytes())) {
            Ok(Ok(status)) => {
                if status.contains(StatusFlags::SERVER_STATUS_IN_TRANS) {
                    self.bound = Some(shard);
                }
                Ok(None)
            }
            Ok(Err(why)) => {
                refuse(out, &SqlError::internal(format!("shard {shard}: {why}"))).map(Some)
            }
            Err(e) => {
                self.lose(&shard);
                refuse(
                    out,
                    &SqlError::internal(format!("shard {shard}'s primary: {e}; try again")),
                )
                .map(Some)
            }
        }
    }

    /// Passes `sql` on to shard `s`'s primary and relays its reply.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &mut self,
        shared: &Shared,
        placement: &Placement,
        s: usize,
        db: Option<&str>,
        sql: &str,
        more: bool,
        out: &mut dyn Replies,
    ) -> io::Result<Routed> {
        let shard = placement.shards[s].clone();
        let upstream = match self.upstream(placement, s, db) {
            Ok(u) => u,
            Err(e) => return refuse(out, &e),
        };
        shared.cluster.sql_forwarded.fetch_add(1, Ordering::Relaxed);
        match upstream.relay(sql, more, out) {
            Ok(status) => {
                let in_transaction =
                    status.is_some_and(|s| s.contains(StatusFlags::SERVER_STATUS_IN_TRANS));
                if in_transaction {
                    self.bound = Some(shard);
                } else if status.is_some() {
                    self.bound = None;
                }
                Ok(Routed::Answered(status.is_some()))
            }
            Err((e, relayed)) => {
                self.lose(&shard);
                if relayed {
                    // Part of the reply went: the client cannot read on.
                    return Err(e);
                }
                refuse(
                    out,
                    &SqlError::internal(format!(
                        "shard {shard}'s primary went away: {e}; the statement may or may not have run there"
                    )),
                )
            }
        }
    }
}

/// The first table `reach` names that shard `s` holds, for an error message.
fn first_table_on(placement: &Placement, reach: &Reach, s: usize) -> String {
    let tables: &[String] = match reach {
        Reach::Tables(ts) | Reach::Drop(ts) => ts,
        Reach::Create(t) | Reach::Load(t) => std::slice::from_ref(t),
        _ => &[],
    };
    tables
        .iter()
        .find(|t| placement.table_shard(t) == Some(s))
        .cloned()
        .unwrap_or_else(|| "a table".to_string())
}

fn reach_of(sql: &str, db: Option<&str>) -> Reach {
    kura_sql::route::reach(sql, db)
}

fn refuse(out: &mut dyn Replies, e: &SqlError) -> io::Result<Routed> {
    out.packet(&my::err(e.code, &e.state, &e.message))?;
    Ok(Routed::Answered(false))
}

/// A command packet's payload: its byte, then `body`.
fn command(byte: u8, body: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(body.len() + 1);
    payload.push(byte);
    payload.extend_from_slice(body);
    payload
}

/// A logged-in connection to another shard's primary.
struct Upstream {
    addr: String,
    stream: TcpStream,
    reader: PacketReader,
    buf: Box<[u8]>,
    caps: CapabilityFlags,
    db: Option<String>,
}

impl Upstream {
    fn open(
        addr: &str,
        user: &str,
        proof: Option<&[u8; NONCE_BYTES]>,
        client: CapabilityFlags,
    ) -> Result<Upstream, String> {
        let mut last = format!("{addr} resolves to no address");
        let mut stream = None;
        for a in addr.to_socket_addrs().map_err(|e| e.to_string())? {
            match TcpStream::connect_timeout(&a, LOGIN_WITHIN) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e.to_string(),
            }
        }
        let stream = stream.ok_or(last)?;
        let io = |e: io::Error| e.to_string();
        stream.set_nodelay(true).map_err(io)?;
        stream.set_read_timeout(Some(LOGIN_WITHIN)).map_err(io)?;
        stream.set_write_timeout(Some(LOGIN_WITHIN)).map_err(io)?;
        let mut upstream = Upstream {
            addr: addr.to_string(),
            stream,
            reader: PacketReader::new(PACKET_MAX),
            buf: vec![0; 64 << 10].into_boxed_slice(),
            caps: CapabilityFlags::empty(),
            db: None,
        };
        let (_, greeting) = upstream.packet().map_err(io)?;
        let greeting = upstream_client::parse_greeting(&greeting)?;
        let wanted = CapabilityFlags::CLIENT_PROTOCOL_41
            | CapabilityFlags::CLIENT_SECURE_CONNECTION
            | CapabilityFlags::CLIENT_PLUGIN_AUTH
            | CapabilityFlags::CLIENT_TRANSACTIONS
            | CapabilityFlags::CLIENT_LONG_PASSWORD;
        let passed = client
            & (CapabilityFlags::CLIENT_FOUND_ROWS
                | CapabilityFlags::CLIENT_DEPRECATE_EOF
                | CapabilityFlags::CLIENT_MULTI_RESULTS
                | CapabilityFlags::CLIENT_PS_MULTI_RESULTS
                | CapabilityFlags::CLIENT_LONG_FLAG
                | CapabilityFlags::CLIENT_IGNORE_SPACE
                | CapabilityFlags::CLIENT_SESSION_TRACK);
        let caps = (wanted | passed) & greeting.capabilities;
        upstream.caps = caps;
        let answer = |nonce: &[u8]| {
            proof.map_or_else(Vec::new, |p| {
                upstream_client::answer_with_proof(nonce, p).to_vec()
            })
        };
        let mut seq = 1u8;
        let mut out = Vec::new();
        my::write_packet(
            &mut out,
            &mut seq,
            &upstream_client::login(caps, user, &answer(&greeting.nonce), None),
        );
        upstream.stream.write_all(&out).map_err(io)?;
        loop {
            let (at, reply) = upstream.packet().map_err(io)?;
            match reply.first() {
                Some(0x00) => break,
                Some(0xfe) => {
                    // AuthSwitchRequest: the plugin's name, then its nonce.
                    let rest = &reply[1..];
                    let name_end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                    let mut nonce = rest.get(name_end + 1..).unwrap_or_default().to_vec();
                    if nonce.last() == Some(&0) {
                        nonce.pop();
                    }
                    let mut seq = at.wrapping_add(1);
                    let mut out = Vec::new();
                    my::write_packet(&mut out, &mut seq, &answer(&nonce));
                    upstream.stream.write_all(&out).map_err(io)?;
                }
                _ => return Err(upstream_client::error_message(&reply)),
            }
        }
        upstream.stream.set_read_timeout(None).map_err(io)?;
        upstream.stream.set_write_timeout(None).map_err(io)?;
        Ok(upstream)
    }

    /// The next packet from the other primary.
    fn packet(&mut self) -> io::Result<(u8, Vec<u8>)> {
        loop {
            match self.reader.next_packet() {
                Ok(Some(p)) => return Ok(p),
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            }
            let n = self.stream.read(&mut self.buf)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.reader.feed(&self.buf[..n]);
        }
    }

    fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        let mut seq = 0u8;
        let mut out = Vec::with_capacity(payload.len() + 4);
        my::write_packet(&mut out, &mut seq, payload);
        self.stream.write_all(&out)
    }

    /// Sends a command and reads its reply through: its final status, or the
    /// other primary's error as text.
    fn quiet(&mut self, payload: &[u8]) -> io::Result<Result<StatusFlags, String>> {
        self.send(payload)?;
        let mut reply = ReplyEnd::new(self.caps);
        let mut error = None;
        loop {
            let (_, p) = self.packet()?;
            if p.first() == Some(&0xff) {
                error = Some(upstream_client::error_message(&p));
            }
            match reply
                .step(&p)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
            {
                Step::More => {}
                Step::Ended(Some(status)) => return Ok(Ok(status)),
                Step::Ended(None) => return Ok(Err(error.unwrap_or_default())),
                Step::LocalFile => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "the other primary asked for a local file",
                    ))
                }
            }
        }
    }

    /// Sends `sql` and relays the reply to `out`: its final status (None: it ended
    /// in an error), or the failure and whether part of the reply went.
    fn relay(
        &mut self,
        sql: &str,
        more: bool,
        out: &mut dyn Replies,
    ) -> Result<Option<StatusFlags>, (io::Error, bool)> {
        self.send(&command(0x03, sql.as_bytes()))
            .map_err(|e| (e, false))?;
        let mut reply = ReplyEnd::new(self.caps);
        let mut relayed = false;
        loop {
            let (_, mut p) = self.packet().map_err(|e| (e, relayed))?;
            let step = reply.step(&p).map_err(|e| {
                (
                    io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
                    relayed,
                )
            })?;
            let ended = match step {
                Step::More => None,
                Step::Ended(status) => Some(status),
                Step::LocalFile => {
                    return Err((
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            "the other primary asked for a local file",
                        ),
                        relayed,
                    ))
                }
            };
            if let Some(Some(_)) = ended {
                upstream_client::set_more_results(&mut p, reply.deprecate_eof(), more);
            }
            out.packet(&p).map_err(|e| (e, true))?;
            relayed = true;
            if let Some(status) = ended {
                return Ok(status);
            }
        }
    }
}
