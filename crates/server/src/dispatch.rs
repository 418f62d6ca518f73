//! From a parsed request to reply bytes: runs the command through [`crate::semantics`]
//! and the store, writes memcached's reply, and reports the LSN the reply depends on so
//! the connection can hold it until the log has acknowledged that far.
//!
//! Reply syntax follows memcached 1.6.18 byte for byte (`docs/protocol.md` lists the
//! deliberate differences: `version`, parts of `stats` and `me`).

use std::sync::atomic::Ordering;

use kura_engine::{exptime_to_absolute, Access, Change, ItemRef, NewCas, NewItem};
use kura_protocol::{
    ArithmeticCommand, MetaArithmeticMode, MetaFlags, MetaRequest, MetaSetMode, ProtocolError,
    Request, RetrievalCommand, StorageCommand, Tokens,
};

use kura_protocol::response::{write_value, KeyForm, MetaDebug};

use crate::semantics::{
    self, ArithRequest, ArithResult, Delta, StoreMode, StoreRequest, StoreResult, NO_MEMORY_REPLY,
    SERVER_ERROR_WRITES_REFUSED,
};
use crate::server::Shared;
use crate::stats::{bump, PrefixEvent};
use crate::tables::{self, Session};

/// The protocol version Kura answers `version` with: memcached's, then Kura's own, so
/// clients that parse the number see the memcached release whose behaviour Kura follows.
pub const VERSION_REPLY: &str = concat!("VERSION 1.6.18-kura-", env!("CARGO_PKG_VERSION"), "\r\n");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Send what is pending, then close (quit, or a request memcached closes on).
    Close,
    /// Send what is pending, then hand the connection to a replica's stream.
    Replicate(crate::replication::primary::Request),
}

/// What one request produced besides its reply bytes.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub flow: Flow,
    /// The reply may go out only once the log has acknowledged this LSN.
    pub lsn: Option<u64>,
}

impl Outcome {
    fn done() -> Outcome {
        Outcome {
            flow: Flow::Continue,
            lsn: None,
        }
    }

    pub(crate) fn after(lsn: Option<u64>) -> Outcome {
        Outcome {
            flow: Flow::Continue,
            lsn,
        }
    }
}

pub fn write_error(error: &ProtocolError, out: &mut Vec<u8>) {
    out.extend_from_slice(error.reply_bytes());
}

use kura_protocol::number::write_u64 as push_u64;

fn max_lsn(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

pub fn write_engine_error(e: &kura_engine::Error, out: &mut Vec<u8>) {
    match e {
        kura_engine::Error::Poisoned => out.extend_from_slice(SERVER_ERROR_WRITES_REFUSED),
        other => {
            out.extend_from_slice(b"SERVER_ERROR ");
            out.extend_from_slice(other.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Runs one request and appends its reply to `out`. A `noreply` request leaves
/// nothing there, its errors included: memcached sends nothing for it, and a client
/// that asked for no reply reads the next one as its next command's (counted in
/// `stats` as `noreply_errors_dropped`).
pub fn execute(
    shared: &Shared,
    session: &mut Session,
    request: Request<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    let noreply = request.noreply();
    let start = out.len();
    let outcome = execute_request(shared, session, request, out);
    drop_noreply_reply(shared, noreply, start, out);
    outcome
}

/// A noreply command writes nothing when it succeeds, so anything after `start`
/// reports a failure, which memcached does not send either.
pub fn drop_noreply_reply(shared: &Shared, noreply: bool, start: usize, out: &mut Vec<u8>) {
    if noreply && out.len() > start {
        out.truncate(start);
        bump(&shared.counters.local().noreply_errors_dropped);
    }
}

fn execute_request(
    shared: &Shared,
    session: &mut Session,
    request: Request<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    // A replica refuses a change before it looks at the data: a cas must not answer
    // EXISTS, nor a delete NOT_FOUND, where the primary might answer otherwise.
    if crate::sync_replies::changes(&request) {
        if let Err(e) = shared.store.check_writable() {
            write_engine_error(&e, out);
            return Outcome::done();
        }
    }
    if matches!(
        request,
        Request::Retrieval { .. } | Request::MetaGet(_) | Request::MetaDebug { .. }
    ) {
        if let Some(why) = shared.read_refusal() {
            out.extend_from_slice(format!("SERVER_ERROR {why}\r\n").as_bytes());
            return Outcome::done();
        }
    }
    if let Some(outcome) = tables::execute(shared, session, &request, out) {
        return outcome;
    }
    let c = shared.counters.local();
    match request {
        Request::Storage {
            command,
            key,
            flags,
            exptime,
            cas_unique,
            noreply,
            data,
        } => {
            let mode = match command {
                StorageCommand::Set => StoreMode::Set,
                StorageCommand::Add => StoreMode::Add,
                StorageCommand::Replace => StoreMode::Replace,
                StorageCommand::Append => StoreMode::Append,
                StorageCommand::Prepend => StoreMode::Prepend,
                StorageCommand::Cas => StoreMode::Cas,
            };
            let request = StoreRequest {
                mode,
                key,
                client_flags: flags,
                exptime,
                compare_cas: cas_unique,
                data,
                invalidate: false,
                binary_key: false,
            };
            shared.prefixes.record(key, PrefixEvent::Set);
            match semantics::store(&shared.store, c, &shared.limits, request) {
                Ok((result, written)) => {
                    if !noreply || result == StoreResult::NoMemory {
                        out.extend_from_slice(match result {
                            StoreResult::Stored => b"STORED\r\n",
                            StoreResult::NotStored => b"NOT_STORED\r\n",
                            StoreResult::Exists => b"EXISTS\r\n",
                            StoreResult::NotFound => b"NOT_FOUND\r\n",
                            StoreResult::NoMemory => NO_MEMORY_REPLY,
                        });
                    }
                    Outcome::after(written.map(|w| w.lsn))
                }
                Err(e) => {
                    write_engine_error(&e, out);
                    Outcome::done()
                }
            }
        }
        Request::Retrieval {
            command,
            exptime,
            keys,
        } => retrieve(shared, session, command, exptime, keys, out),
        Request::Delete { key, noreply } => {
            shared.prefixes.record(key, PrefixEvent::Delete);
            let result = shared.store.update(key, Access::NoAccess, |item, _| {
                (Change::Delete, item.is_some())
            });
            let replies: [&[u8]; 2] = [b"DELETED\r\n", b"NOT_FOUND\r\n"];
            found_or_not(
                result,
                noreply,
                replies,
                [&c.delete_hits, &c.delete_misses],
                out,
            )
        }
        Request::Arithmetic {
            command,
            key,
            delta,
            noreply,
        } => {
            let delta = match command {
                ArithmeticCommand::Incr => Delta::Incr(delta),
                ArithmeticCommand::Decr => Delta::Decr(delta),
            };
            let request = ArithRequest {
                key,
                delta,
                compare_cas: 0,
                vivify: None,
                new_exptime: None,
            };
            match semantics::arithmetic(&shared.store, c, request) {
                Ok((result, written)) => {
                    if !noreply {
                        match result {
                            ArithResult::Value { digits, .. } => {
                                out.extend_from_slice(&digits);
                                out.extend_from_slice(b"\r\n");
                            }
                            ArithResult::NotFound | ArithResult::Exists => {
                                out.extend_from_slice(b"NOT_FOUND\r\n")
                            }
                            ArithResult::NonNumeric => out.extend_from_slice(
                                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
                            ),
                        }
                    }
                    Outcome::after(written.map(|w| w.lsn))
                }
                Err(e) => {
                    write_engine_error(&e, out);
                    Outcome::done()
                }
            }
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            bump(&c.cmd_touch);
            let result = shared.store.update(key, Access::Fetch, |item, now| {
                let change = Change::Touch {
                    exptime: Some(exptime_to_absolute(exptime, now)),
                    mark_win_sent: false,
                };
                (change, item.is_some())
            });
            let replies: [&[u8]; 2] = [b"TOUCHED\r\n", b"NOT_FOUND\r\n"];
            found_or_not(
                result,
                noreply,
                replies,
                [&c.touch_hits, &c.touch_misses],
                out,
            )
        }
        Request::FlushAll { delay, noreply } => {
            bump(&c.cmd_flush);
            match shared.store.flush_all(delay.unwrap_or(0)) {
                Ok(lsn) => {
                    if !noreply {
                        out.extend_from_slice(b"OK\r\n");
                    }
                    Outcome::after(Some(lsn))
                }
                Err(e) => {
                    write_engine_error(&e, out);
                    Outcome::done()
                }
            }
        }
        Request::Version => {
            out.extend_from_slice(VERSION_REPLY.as_bytes());
            Outcome::done()
        }
        Request::RefreshCerts => {
            // memcached's reply: OK, or the reason on a line of its own.
            match &shared.tls {
                None => out.extend_from_slice(b"ERROR\r\n"),
                Some(tls) => match tls.reload() {
                    Ok(()) => out.extend_from_slice(b"OK\r\n"),
                    Err(e) => {
                        tracing::error!("refresh_certs: {e}");
                        out.extend_from_slice(
                            format!("{}\r\n", e.replace(['\r', '\n'], " ")).as_bytes(),
                        );
                    }
                },
            }
            Outcome::done()
        }
        Request::CacheMemlimit { megabytes, noreply } => {
            // memcached's bounds and words; the limit is Kura's -m.
            let reply: &[u8] = if megabytes < 8 {
                b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n"
            } else if megabytes > 1_000_000_000 {
                b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n"
            } else {
                let bytes = u64::from(megabytes) << 20;
                shared.store.set_memory_limit(bytes);
                b"OK\r\n"
            };
            if !noreply {
                out.extend_from_slice(reply);
            }
            Outcome::done()
        }
        Request::Verbosity { level, noreply } => {
            shared
                .verbosity
                .store(u64::from(level.min(2)), Ordering::Relaxed);
            if !noreply {
                out.extend_from_slice(b"OK\r\n");
            }
            Outcome::done()
        }
        Request::Stats { arguments } => {
            crate::stats_reply::write(shared, arguments, out);
            Outcome::done()
        }
        Request::Slabs { arguments } => {
            crate::slabs::slabs(arguments, out);
            Outcome::done()
        }
        Request::ReplicaOf { arguments } => {
            crate::replication::replicaof(shared, arguments, out);
            Outcome::done()
        }
        Request::Fence { arguments } => {
            crate::replication::fence::fence(shared, arguments, out);
            Outcome::done()
        }
        Request::Failover { arguments } => {
            crate::replication::failover::command(shared, arguments, out);
            Outcome::done()
        }
        Request::Replicate { arguments } => {
            if let Some(primary) = shared.replication.primary() {
                out.extend_from_slice(
                    format!("SERVER_ERROR this server is a replica; replicate from its primary {primary}\r\n")
                        .as_bytes(),
                );
                return Outcome::done();
            }
            match crate::replication::primary::Request::parse(arguments) {
                Some(request) => Outcome {
                    flow: Flow::Replicate(request),
                    lsn: None,
                },
                None => {
                    out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                    Outcome::done()
                }
            }
        }
        Request::Quit => Outcome {
            flow: Flow::Close,
            lsn: None,
        },
        Request::Shutdown { mode: _ } => {
            // As memcached started without -A: shutdown is by signal only.
            out.extend_from_slice(b"ERROR: shutdown not enabled\r\n");
            Outcome::done()
        }
        Request::MetaGet(request) if request.flags.rows => {
            // Kura's `r` is for table ranges: memcached's keys refuse it as memcached does.
            write_error(&ProtocolError::InvalidFlag, out);
            Outcome::done()
        }
        Request::MetaGet(request) => {
            bump(&c.cmd_meta);
            meta_get(shared, &request, out)
        }
        Request::MetaSet { request, data } => {
            bump(&c.cmd_meta);
            meta_set(shared, &request, data, out)
        }
        Request::MetaDelete(request) => {
            bump(&c.cmd_meta);
            meta_delete(shared, &request, out)
        }
        Request::MetaArithmetic(request) => {
            bump(&c.cmd_meta);
            meta_arithmetic(shared, &request, out)
        }
        Request::MetaNoop => {
            out.extend_from_slice(b"MN\r\n");
            Outcome::done()
        }
        Request::MetaDebug { key, base64: _ } => {
            bump(&c.cmd_meta);
            meta_debug(shared, &key, out);
            Outcome::done()
        }
    }
}

/// The reply to a command that either found its key or not (delete, touch): counts
/// the hit or miss, writes `replies[0]` or `replies[1]` unless `noreply`.
fn found_or_not(
    result: Result<(bool, Option<kura_engine::Written>), kura_engine::Error>,
    noreply: bool,
    replies: [&[u8]; 2],
    counters: [&std::sync::atomic::AtomicU64; 2],
    out: &mut Vec<u8>,
) -> Outcome {
    match result {
        Ok((found, written)) => {
            let which = usize::from(!found);
            bump(counters[which]);
            if !noreply {
                out.extend_from_slice(replies[which]);
            }
            Outcome::after(written.map(|w| w.lsn))
        }
        Err(e) => {
            write_engine_error(&e, out);
            Outcome::done()
        }
    }
}

fn retrieve(
    shared: &Shared,
    session: &mut Session,
    command: RetrievalCommand,
    exptime: i64,
    keys: Tokens<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    let touch = command.touches();
    let mut lsn = None;
    for key in keys {
        if !tables::is_plain(session, key) {
            let route = tables::route(shared, session, key);
            if !matches!(route, tables::Route::Plain) {
                match tables::retrieve(shared, session, route, (command, exptime), key, out) {
                    Ok(shown) => lsn = max_lsn(lsn, shown),
                    Err(()) => return Outcome::after(lsn),
                }
                continue;
            }
        }
        let (item, touched) = match fetch(shared, key, touch.then_some(exptime)) {
            Ok(found) => found,
            Err(e) => {
                write_engine_error(&e, out);
                return Outcome::after(lsn);
            }
        };
        lsn = max_lsn(lsn, touched);
        if let Some(item) = item {
            lsn = max_lsn(lsn, Some(item.lsn));
            let cas = command.returns_cas().then_some(item.cas);
            write_value(out, key, item.client_flags, &item.value, cas);
        }
    }
    out.extend_from_slice(b"END\r\n");
    Outcome::after(lsn)
}

/// A get of one key of memcached's space, or with `touch` a gat (the new exptime):
/// the item, and the LSN of the touch it made. Counts the hit or miss (and a get in
/// `stats detail`) as memcached does.
pub fn fetch(
    shared: &Shared,
    key: &[u8],
    touch: Option<i64>,
) -> Result<(Option<kura_engine::Item>, Option<u64>), kura_engine::Error> {
    let c = shared.counters.local();
    let Some(exptime) = touch else {
        bump(&c.cmd_get);
        let item = shared.store.get(key)?;
        bump(if item.is_some() {
            &c.get_hits
        } else {
            &c.get_misses
        });
        let hit = item.is_some();
        shared.prefixes.record(key, PrefixEvent::Get { hit });
        return Ok((item, None));
    };
    bump(&c.cmd_touch);
    let (item, written) = shared.store.update(key, Access::Fetch, |item, now| {
        let change = Change::Touch {
            exptime: Some(exptime_to_absolute(exptime, now)),
            mark_win_sent: false,
        };
        (change, item.map(ItemRef::to_item))
    })?;
    bump(if item.is_some() {
        &c.touch_hits
    } else {
        &c.touch_misses
    });
    Ok((item, written.map(|w| w.lsn)))
}

/// Appends ` k<key>` (base64 and ` b` when the request used `b`).
fn push_key(out: &mut Vec<u8>, key: &[u8], base64: bool) {
    out.extend_from_slice(b" k");
    if base64 {
        kura_protocol::base64::encode_key(key, out);
        out.extend_from_slice(b" b");
    } else {
        out.extend_from_slice(key);
    }
}

fn push_opaque(out: &mut Vec<u8>, opaque: Option<&[u8]>) {
    out.extend_from_slice(b" O");
    out.extend_from_slice(opaque.unwrap_or(b""));
}

/// The flags every meta reply echoes, miss or hit: opaque and key.
fn push_echo_flags(out: &mut Vec<u8>, key: &[u8], flags: &MetaFlags<'_>) {
    for letter in flags.order.as_slice() {
        match letter {
            b'O' => push_opaque(out, flags.opaque),
            b'k' => push_key(out, key, flags.base64),
            _ => {}
        }
    }
}

fn meta_get(shared: &Shared, request: &MetaRequest<'_>, out: &mut Vec<u8>) -> Outcome {
    let c = shared.counters.local();
    let f = &request.flags;
    let key: &[u8] = &request.key;
    let access = if f.no_bump {
        Access::NoAccess
    } else {
        Access::Fetch
    };
    let mut lsn = None;
    let mut created = false;
    if let Some(ttl) = f.vivify_ttl {
        // Vivify on miss: an empty item that this client wins the right to fill.
        let result = shared.store.update(key, Access::NoAccess, |item, now| {
            if item.is_some() {
                return (Change::Keep, false);
            }
            let new = NewItem {
                value: Vec::new().into(),
                client_flags: 0,
                exptime: exptime_to_absolute(ttl, now),
                cas: NewCas::Generate,
                stale: false,
                binary_key: f.base64,
                win_sent: false,
            };
            (Change::Put(new), true)
        });
        match result {
            Ok((made, written)) => {
                created = made;
                lsn = written.map(|w| w.lsn);
            }
            Err(e) => {
                write_engine_error(&e, out);
                return Outcome::done();
            }
        }
    }
    let result = shared.store.update(key, access, |item, now| {
        let Some(item) = item else {
            return (Change::Keep, None);
        };
        let mut header = Vec::with_capacity(64);
        if f.return_value {
            header.extend_from_slice(b"VA ");
            push_u64(&mut header, item.value.len() as u64);
        } else {
            header.extend_from_slice(b"HD");
        }
        let mut exptime = item.exptime;
        let mut touched = None;
        let mut won = false;
        for letter in f.order.as_slice() {
            match letter {
                b'T' => {
                    exptime = exptime_to_absolute(f.ttl.unwrap_or(0), now);
                    touched = Some(exptime);
                }
                b'N' => won |= created,
                b'R' => {
                    let recache = exptime_to_absolute(f.recache_ttl.unwrap_or(0), now);
                    won |= !item.win_sent && !created && exptime != 0 && exptime < recache;
                }
                b's' => {
                    header.extend_from_slice(b" s");
                    push_u64(&mut header, item.value.len() as u64);
                }
                b't' => {
                    header.extend_from_slice(b" t");
                    if exptime == 0 {
                        header.extend_from_slice(b"-1");
                    } else {
                        push_u64(&mut header, u64::from(exptime.wrapping_sub(now)));
                    }
                }
                b'c' => {
                    header.extend_from_slice(b" c");
                    push_u64(&mut header, item.cas);
                }
                b'f' => {
                    header.extend_from_slice(b" f");
                    push_u64(&mut header, u64::from(item.client_flags));
                }
                b'l' => {
                    header.extend_from_slice(b" l");
                    push_u64(&mut header, u64::from(now.saturating_sub(item.last_access)));
                }
                b'h' => header.extend_from_slice(if item.fetched { b" h1" } else { b" h0" }),
                b'O' => push_opaque(&mut header, f.opaque),
                b'k' => push_key(&mut header, key, item.binary_key),
                _ => {}
            }
        }
        if item.win_sent {
            header.extend_from_slice(b" Z");
        }
        if item.stale {
            header.extend_from_slice(b" X");
            won |= !item.win_sent;
        }
        if won {
            header.extend_from_slice(b" W");
        }
        header.extend_from_slice(b"\r\n");
        let change = if touched.is_some() || won {
            Change::Touch {
                exptime: touched,
                mark_win_sent: won,
            }
        } else {
            Change::Keep
        };
        (change, Some((header, item.to_item(), touched.is_some())))
    });
    match result {
        Ok((Some((header, item, touched)), written)) => {
            bump(if touched { &c.touch_hits } else { &c.get_hits });
            bump(if touched { &c.cmd_touch } else { &c.cmd_get });
            lsn = max_lsn(max_lsn(lsn, Some(item.lsn)), written.map(|w| w.lsn));
            out.extend_from_slice(&header);
            if f.return_value {
                out.extend_from_slice(&item.value);
                out.extend_from_slice(b"\r\n");
            }
        }
        Ok((None, _)) => {
            bump(if f.ttl.is_some() {
                &c.touch_misses
            } else {
                &c.get_misses
            });
            bump(if f.ttl.is_some() {
                &c.cmd_touch
            } else {
                &c.cmd_get
            });
            if !f.quiet {
                out.extend_from_slice(b"EN");
                push_echo_flags(out, key, f);
                out.extend_from_slice(b"\r\n");
            }
        }
        Err(e) => write_engine_error(&e, out),
    }
    Outcome::after(lsn)
}

fn meta_set(shared: &Shared, request: &MetaRequest<'_>, data: &[u8], out: &mut Vec<u8>) -> Outcome {
    let f = &request.flags;
    let key: &[u8] = &request.key;
    let mut mode = match request.set_mode() {
        MetaSetMode::Add => StoreMode::Add,
        MetaSetMode::Append => StoreMode::Append,
        MetaSetMode::Prepend => StoreMode::Prepend,
        MetaSetMode::Replace => StoreMode::Replace,
        MetaSetMode::Set => StoreMode::Set,
    };
    if f.compare_cas.is_some() && matches!(mode, StoreMode::Set | StoreMode::Replace) {
        mode = StoreMode::Cas;
    }
    let store_request = StoreRequest {
        mode,
        key,
        client_flags: f.client_flags.unwrap_or(0),
        exptime: f.ttl.unwrap_or(0),
        compare_cas: f.compare_cas.unwrap_or(0),
        data,
        invalidate: f.invalidate,
        binary_key: f.base64,
    };
    match semantics::store(
        &shared.store,
        shared.counters.local(),
        &shared.limits,
        store_request,
    ) {
        Ok((StoreResult::NoMemory, _)) => {
            out.extend_from_slice(NO_MEMORY_REPLY);
            Outcome::done()
        }
        Ok((result, written)) => {
            if result == StoreResult::Stored && f.quiet {
                return Outcome::after(written.map(|w| w.lsn));
            }
            out.extend_from_slice(match result {
                StoreResult::Stored => b"HD",
                StoreResult::NotStored => b"NS",
                StoreResult::Exists => b"EX",
                StoreResult::NotFound | StoreResult::NoMemory => b"NF",
            });
            for letter in f.order.as_slice() {
                match letter {
                    b'O' => push_opaque(out, f.opaque),
                    b'k' => push_key(out, key, f.base64),
                    b'c' => {
                        out.extend_from_slice(b" c");
                        push_u64(out, written.map_or(0, |w| w.cas));
                    }
                    _ => {}
                }
            }
            out.extend_from_slice(b"\r\n");
            Outcome::after(written.map(|w| w.lsn))
        }
        Err(e) => {
            write_engine_error(&e, out);
            Outcome::done()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MetaDeleteResult {
    Deleted,
    NotFound,
    Exists,
}

fn meta_delete(shared: &Shared, request: &MetaRequest<'_>, out: &mut Vec<u8>) -> Outcome {
    let c = shared.counters.local();
    let f = &request.flags;
    let key: &[u8] = &request.key;
    let decide = |item: Option<&ItemRef<'_>>, now| {
        let Some(item) = item else {
            return (Change::Keep, MetaDeleteResult::NotFound);
        };
        if f.compare_cas.is_some_and(|cas| cas != item.cas) {
            return (Change::Keep, MetaDeleteResult::Exists);
        }
        if f.invalidate {
            // Mark stale instead of deleting: the next reader wins the right to refill.
            let new = NewItem {
                value: item.value.clone(),
                client_flags: item.client_flags,
                exptime: f.ttl.map_or(item.exptime, |t| exptime_to_absolute(t, now)),
                cas: NewCas::Generate,
                stale: true,
                binary_key: item.binary_key,
                win_sent: false,
            };
            return (Change::Put(new), MetaDeleteResult::Deleted);
        }
        (Change::Delete, MetaDeleteResult::Deleted)
    };
    match shared.store.update(key, Access::NoAccess, decide) {
        Ok((result, written)) => {
            bump(if result == MetaDeleteResult::Deleted {
                &c.delete_hits
            } else {
                &c.delete_misses
            });
            if result == MetaDeleteResult::Deleted && f.quiet {
                return Outcome::after(written.map(|w| w.lsn));
            }
            out.extend_from_slice(match result {
                MetaDeleteResult::Deleted => b"HD",
                MetaDeleteResult::NotFound => b"NF",
                MetaDeleteResult::Exists => b"EX",
            });
            push_echo_flags(out, key, f);
            out.extend_from_slice(b"\r\n");
            Outcome::after(written.map(|w| w.lsn))
        }
        Err(e) => {
            write_engine_error(&e, out);
            Outcome::done()
        }
    }
}

fn meta_arithmetic(shared: &Shared, request: &MetaRequest<'_>, out: &mut Vec<u8>) -> Outcome {
    let f = &request.flags;
    let key: &[u8] = &request.key;
    let amount = f.delta.unwrap_or(1);
    let delta = match request.arithmetic_mode() {
        MetaArithmeticMode::Increment => Delta::Incr(amount),
        MetaArithmeticMode::Decrement => Delta::Decr(amount),
    };
    let arith = ArithRequest {
        key,
        delta,
        compare_cas: f.compare_cas.unwrap_or(0),
        vivify: f.vivify_ttl.map(|ttl| (ttl, f.initial.unwrap_or(0))),
        new_exptime: f.ttl,
    };
    let now = shared.store.now_secs();
    match semantics::arithmetic(&shared.store, shared.counters.local(), arith) {
        Ok((
            ArithResult::Value {
                digits,
                exptime,
                created,
            },
            written,
        )) => {
            let lsn = written.map(|w| w.lsn);
            if f.quiet && !created {
                return Outcome::after(lsn);
            }
            if f.return_value {
                out.extend_from_slice(b"VA ");
                push_u64(out, digits.len() as u64);
            } else {
                out.extend_from_slice(b"HD");
            }
            for letter in f.order.as_slice() {
                match letter {
                    b'c' => {
                        out.extend_from_slice(b" c");
                        push_u64(out, written.map_or(0, |w| w.cas));
                    }
                    b't' => {
                        out.extend_from_slice(b" t");
                        if exptime == 0 {
                            out.extend_from_slice(b"-1");
                        } else {
                            push_u64(out, u64::from(exptime.wrapping_sub(now)));
                        }
                    }
                    b'O' => push_opaque(out, f.opaque),
                    b'k' => push_key(out, key, f.base64),
                    _ => {}
                }
            }
            if f.return_value {
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&digits);
            }
            out.extend_from_slice(b"\r\n");
            Outcome::after(lsn)
        }
        Ok((ArithResult::NonNumeric, _)) => {
            out.extend_from_slice(
                b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            );
            Outcome::done()
        }
        Ok((result, _)) => {
            out.extend_from_slice(if result == ArithResult::Exists {
                b"EX"
            } else {
                b"NF"
            });
            push_echo_flags(out, key, f);
            out.extend_from_slice(b"\r\n");
            Outcome::done()
        }
        Err(e) => {
            write_engine_error(&e, out);
            Outcome::done()
        }
    }
}

/// memcached's item dump. `cls` is memcached's slab class, which Kura does not have:
/// always 1. `size` is what memcached would count for the item.
fn meta_debug(shared: &Shared, key: &[u8], out: &mut Vec<u8>) {
    let item = match shared.store.peek(key) {
        Ok(Some(item)) => item,
        Ok(None) => {
            out.extend_from_slice(b"EN\r\n");
            return;
        }
        Err(e) => {
            write_engine_error(&e, out);
            return;
        }
    };
    let now = shared.store.now_secs();
    // memcached's ITEM_ntotal: header, CAS, key and NUL, flags when non-zero, data.
    let flags_bytes = if item.client_flags == 0 { 0 } else { 4 };
    MetaDebug {
        key,
        // memcached shows the key as stored: encoded only if it was stored as binary.
        key_form: if item.binary_key {
            KeyForm::Base64
        } else {
            KeyForm::Raw
        },
        exp: if item.exptime == 0 {
            -1
        } else {
            i64::from(now) - i64::from(item.exptime)
        },
        last_access_secs: u64::from(now.saturating_sub(item.last_access)),
        cas: item.cas,
        fetched: item.fetched,
        class: 1,
        size: (48 + 8 + key.len() + 1 + flags_bytes + item.value.len() + 2) as u64,
    }
    .write_to(out);
}
