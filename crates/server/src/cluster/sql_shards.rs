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
//! A prepared statement is prepared on the shard its tables are on, known to the
//! client by an id of this connection's (from `REMOTE_STATEMENTS`), and its
//! commands go there. Not passed on (refused with 1235 when it names another
//! shard's table): LOAD DATA. A lost upstream ends its transaction there (as a lost
//! connection ends one in MySQL) and forgets its prepared statements; the statement
//! gets 1105 and may be tried again.
//!
//! What it is not for: where tables live (`super::tables`, etcd) or passing a whole
//! connection to its shard's primary (`super::sql_forward`).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io;
use std::sync::atomic::Ordering;

use kura_mysql::{self as my, CapabilityFlags, StatusFlags, NONCE_BYTES};
use kura_sql::route::Reach;
use kura_sql::{Session, SqlError};

use super::ring::Placement;
use super::sql_upstream::{command, Upstream};
use crate::server::Shared;

/// The `SET` statements kept for new upstreams (the latest, without repeats).
const SETS_KEPT: usize = 64;

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
    /// Statements prepared on other shards: the id the client knows (from
    /// [`REMOTE_STATEMENTS`]) → the shard and the id there.
    prepared: HashMap<u32, (String, u32)>,
    next_statement: u32,
}

/// Where the ids of statements prepared on other shards start: above any this
/// node's sessions give (they count from 1).
const REMOTE_STATEMENTS: u32 = 0x4000_0000;

/// The statement id of a COM_STMT_* command.
fn statement_id(payload: &[u8]) -> Option<u32> {
    let id = payload.get(1..5)?;
    Some(u32::from_le_bytes([id[0], id[1], id[2], id[3]]))
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
            prepared: HashMap::new(),
            next_statement: REMOTE_STATEMENTS,
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
        self.prepared.clear();
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
                let table = first_table_on(&placement, &reach, other);
                if b.is_some_and(|b| moved_away(&placement, &table, b)) {
                    // Its table went to another shard under it: rolled back there.
                    if let Some(b) = b {
                        if let Some(answered) =
                            self.quietly(&placement, b, db.as_deref(), "ROLLBACK", out)?
                        {
                            return Ok(answered);
                        }
                    }
                    self.bound = None;
                    return refuse(out, &SqlError::moved_table(&table));
                }
                let why = format!(
                    "a transaction over tables of several shards: it runs on shard {bound}, and {table} is on shard {}",
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
            Reach::Tables(ts) => {
                // A statement naming no table (SELECT 1) leaves a transaction free
                // to move to another shard.
                let after = if ts.is_empty() { AfterKind::Nothing } else { AfterKind::Tables };
                (named(&ts), After(after))
            }
            Reach::Drop(ts) => (named(&ts), After(AfterKind::Dropped(ts))),
            Reach::Load(t) => {
                let shards = named(std::slice::from_ref(&t));
                if let Some(&other) = shards.iter().find(|&&s| Some(s) != placement.mine) {
                    return refuse(
                        out,
                        &SqlError::unsupported(format!(
                            "LOAD DATA into a table of another shard: {t} is on shard {}; connect to a node of it",
                            placement.shards[other]
                        )),
                    );
                }
                (shards, After(AfterKind::Tables))
            }
            Reach::Create(t) => match placement.table_shard(&t) {
                Some(s) => (vec![s], After(AfterKind::Tables)),
                None if shared.store.is_read_only() => (Vec::new(), After(AfterKind::Nothing)),
                None => match super::tables::claim(shared, &t) {
                    Ok(holder) if shared.config.shard.as_deref() == Some(holder.as_str()) => {
                        (Vec::new(), After(AfterKind::Created(t)))
                    }
                    Ok(holder) => match placement.shard_index(&holder) {
                        Some(s) => (vec![s], After(AfterKind::Tables)),
                        None => {
                            return refuse(
                                out,
                                &SqlError::internal(format!(
                                    "CREATE TABLE {t}: shard {holder} holds the name, and this node has not read where it is yet; try again"
                                )),
                            )
                        }
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
                let s = *s;
                let table = first_table_on(&placement, &reach_of(sql, db.as_deref()), s);
                if let Some(answered) =
                    self.enter(shared, session, &placement, s, &table, db.as_deref(), out)?
                {
                    return Ok(answered);
                }
                self.forward(shared, &placement, s, db.as_deref(), sql, more, out)
            }
            _ => {
                let reach = reach_of(sql, db.as_deref());
                let why = format!(
                    "a statement over tables of several shards ({})",
                    tables_on(&placement, &reach, &shards)
                );
                self.spanning(shared, &why, out)
            }
        }
    }

    /// Before a statement naming `table`, of shard `s`, goes there outside a
    /// transaction bound there: a transaction here that has named no table moves
    /// there (its BEGIN made there); one that has is refused as spanning shards.
    /// None to go on, or the refusal sent.
    #[allow(clippy::too_many_arguments)]
    fn enter(
        &mut self,
        shared: &Shared,
        session: &mut Session,
        placement: &Placement,
        s: usize,
        table: &str,
        db: Option<&str>,
        out: &mut dyn Replies,
    ) -> io::Result<Option<Routed>> {
        if session.status().0 {
            if self.touched
                && placement
                    .mine
                    .is_some_and(|m| moved_away(placement, table, m))
            {
                // Its table went to another shard under it: rolled back here.
                if let Err(e) = session.query("ROLLBACK") {
                    return refuse(out, &e).map(Some);
                }
                self.touched = false;
                return refuse(out, &SqlError::moved_table(table)).map(Some);
            }
            if self.touched {
                let why = format!(
                    "a transaction over tables of several shards: it runs on this shard, and {table} is on shard {}",
                    placement.shards[s]
                );
                return self.spanning(shared, &why, out).map(Some);
            }
            // The transaction has named no table here: it goes there.
            if let Err(e) = session.query("ROLLBACK") {
                return refuse(out, &e).map(Some);
            }
        }
        match self.begun.take() {
            Some(begin) => self.quietly(placement, s, db, &begin, out),
            None => Ok(None),
        }
    }

    /// A COM_STMT_PREPARE of `sql`: prepared on the one other shard whose tables it
    /// names (or the transaction's), the statement then known to the client by an id
    /// of this connection's; refused if it names several shards' tables. None: it is
    /// prepared here.
    pub fn prepare(
        &mut self,
        shared: &Shared,
        session: &Session,
        sql: &str,
        out: &mut dyn Replies,
    ) -> io::Result<Option<bool>> {
        let Some(placement) = shared.cluster.placement() else {
            return Ok(None);
        };
        let db = session.database();
        let reach = kura_sql::route::reach(sql, db.as_deref());
        let tables: Vec<String> = match &reach {
            Reach::Tables(ts) | Reach::Drop(ts) => ts.clone(),
            Reach::Create(t) | Reach::Load(t) => vec![t.clone()],
            _ => Vec::new(),
        };
        let mut shards: Vec<usize> = tables
            .iter()
            .filter_map(|t| placement.table_shard(t))
            .collect();
        shards.sort_unstable();
        shards.dedup();
        let bound = self.bound.as_deref().and_then(|b| placement.shard_index(b));
        let s = match (bound, shards.as_slice()) {
            (Some(b), named) if named.iter().all(|&n| n == b) => b,
            (None, []) => return Ok(None),
            (None, [s]) if Some(*s) == placement.mine => return Ok(None),
            (None, [s]) => *s,
            _ => {
                let why = format!(
                    "a prepared statement over tables of several shards ({}{})",
                    tables_on(&placement, &reach, &shards),
                    self.bound
                        .as_ref()
                        .map_or(String::new(), |b| format!(", in a transaction on {b}"))
                );
                return self.spanning(shared, &why, out).map(|_| Some(false));
            }
        };
        let shard = placement.shards[s].clone();
        let local = self.next_statement;
        let upstream = match self.upstream(&placement, s, db.as_deref()) {
            Ok(u) => u,
            Err(e) => return refuse(out, &e).map(|_| Some(false)),
        };
        match upstream.relay_prepare(&command(0x16, sql.as_bytes()), local, out) {
            Ok(Some(remote)) => {
                self.next_statement = self.next_statement.wrapping_add(1).max(REMOTE_STATEMENTS);
                self.prepared.insert(local, (shard, remote));
                Ok(Some(true))
            }
            Ok(None) => Ok(Some(false)),
            Err((e, relayed)) => self
                .went_away(&shard, e, relayed, "try again", out)
                .map(|_| Some(false)),
        }
    }

    /// Whether `payload` is a command on a statement prepared on another shard
    /// (execute, send long data, close, reset).
    pub fn owns_statement(&self, payload: &[u8]) -> bool {
        matches!(payload.first(), Some(0x17..=0x1a))
            && statement_id(payload).is_some_and(|id| self.prepared.contains_key(&id))
    }

    /// Passes a command on a statement prepared on another shard there, its id
    /// made that shard's, and relays the reply (execute and reset have one).
    pub fn statement_command(
        &mut self,
        shared: &Shared,
        session: &mut Session,
        payload: &[u8],
        out: &mut dyn Replies,
    ) -> io::Result<()> {
        let Some(id) = statement_id(payload) else {
            return Ok(());
        };
        let Some((shard, remote)) = self.prepared.get(&id).cloned() else {
            return Ok(());
        };
        let mut there = payload.to_vec();
        there[1..5].copy_from_slice(&remote.to_le_bytes());
        let Some(placement) = shared.cluster.placement() else {
            return refuse(
                out,
                &SqlError::internal("this node lost the cluster's placement"),
            )
            .map(|_| ());
        };
        let Some(s) = placement.shard_index(&shard) else {
            return refuse(
                out,
                &SqlError::internal(format!("shard {shard} is no longer known")),
            )
            .map(|_| ());
        };
        let db = session.database();
        match payload[0] {
            // Send long data and close: no reply.
            0x18 | 0x19 => {
                if payload[0] == 0x19 {
                    self.prepared.remove(&id);
                }
                if let Some(upstream) = self.upstreams.get_mut(&shard) {
                    if upstream.send(&there).is_err() {
                        self.lose(&shard);
                    }
                }
                Ok(())
            }
            0x17 if self.bound.as_deref() != Some(shard.as_str()) => {
                if let Some(bound) = self.bound.clone() {
                    let why = format!(
                        "a transaction over tables of several shards: it runs on shard {bound}, and the prepared statement's on shard {shard}"
                    );
                    return self.spanning(shared, &why, out).map(|_| ());
                }
                if self
                    .enter(
                        shared,
                        session,
                        &placement,
                        s,
                        "its table",
                        db.as_deref(),
                        out,
                    )?
                    .is_some()
                {
                    return Ok(());
                }
                self.forward_payload(shared, &placement, s, db.as_deref(), &there, out)
                    .map(|_| ())
            }
            _ => self
                .forward_payload(shared, &placement, s, db.as_deref(), &there, out)
                .map(|_| ()),
        }
    }

    /// A prepared statement ran here: a transaction open here has touched this
    /// shard, and cannot move to another.
    pub fn ran_here(&mut self, session: &Session) {
        if session.status().0 {
            self.touched = true;
            self.begun = None;
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
        // Its statements went with the connection: the client's ids are unknown now.
        self.prepared.retain(|_, (s, _)| s != shard);
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
        self.relay_to(
            shared,
            placement,
            s,
            db,
            &command(0x03, sql.as_bytes()),
            more,
            out,
        )
    }

    /// Passes a command (`payload`) on to shard `s`'s primary and relays its reply.
    fn forward_payload(
        &mut self,
        shared: &Shared,
        placement: &Placement,
        s: usize,
        db: Option<&str>,
        payload: &[u8],
        out: &mut dyn Replies,
    ) -> io::Result<Routed> {
        self.relay_to(shared, placement, s, db, payload, false, out)
    }

    #[allow(clippy::too_many_arguments)]
    fn relay_to(
        &mut self,
        shared: &Shared,
        placement: &Placement,
        s: usize,
        db: Option<&str>,
        payload: &[u8],
        more: bool,
        out: &mut dyn Replies,
    ) -> io::Result<Routed> {
        let shard = placement.shards[s].clone();
        let upstream = match self.upstream(placement, s, db) {
            Ok(u) => u,
            Err(e) => return refuse(out, &e),
        };
        shared.cluster.sql_forwarded.fetch_add(1, Ordering::Relaxed);
        match upstream.relay(payload, more, out) {
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
            Err((e, relayed)) => self.went_away(
                &shard,
                e,
                relayed,
                "the statement may or may not have run there",
                out,
            ),
        }
    }

    /// Shard `shard`'s primary failed mid-exchange: its upstream is dropped; the
    /// client gets 1105 (`then` says what it may do), or, if part of the reply went,
    /// the error that closes its connection (it cannot read on).
    fn went_away(
        &mut self,
        shard: &str,
        e: io::Error,
        relayed: bool,
        then: &str,
        out: &mut dyn Replies,
    ) -> io::Result<Routed> {
        self.lose(shard);
        if relayed {
            return Err(e);
        }
        refuse(
            out,
            &SqlError::internal(format!("shard {shard}'s primary went away: {e}; {then}")),
        )
    }
}

/// The first table `reach` names that shard `s` holds, for an error message.
/// Whether `table` was moved away from shard `from` (its move has flipped).
fn moved_away(placement: &Placement, table: &str, from: usize) -> bool {
    placement
        .table_moving(table)
        .is_some_and(|m| m.from == from && m.state >= kura_cluster::MoveState::Flipped)
}

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

/// `t on a, u on b`: a table `reach` names on each of `shards`.
fn tables_on(placement: &Placement, reach: &Reach, shards: &[usize]) -> String {
    let each: Vec<String> = shards
        .iter()
        .map(|&s| {
            format!(
                "{} on {}",
                first_table_on(placement, reach, s),
                placement.shards[s]
            )
        })
        .collect();
    each.join(", ")
}

fn reach_of(sql: &str, db: Option<&str>) -> Reach {
    kura_sql::route::reach(sql, db)
}

fn refuse(out: &mut dyn Replies, e: &SqlError) -> io::Result<Routed> {
    out.packet(&my::err(e.code, &e.state, &e.message))?;
    Ok(Routed::Answered(false))
}
