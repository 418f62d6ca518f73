//! memcached's binary protocol on the memcached port: a connection whose first byte is
//! `0x80` speaks it for its whole life, as memcached decides per connection.
//!
//! Each request runs through the same [`crate::semantics`] and store calls as its text
//! twin, and its reply follows `proto_bin.c`: the statuses and their texts, the CAS of
//! the stored version on every success, quiet forms that answer only failures (and a
//! `GETQ`/`GETKQ` miss not at all), and a connection closed after a malformed header.
//! Replies that report a change wait for the log exactly as text replies do.
//!
//! Where it differs from memcached (`docs/protocol.md` has the list): the `VERSION`
//! string; `STAT` groups answer what Kura's `stats` does; keys beginning `@@` (rows
//! of tables) get `Not supported`, since tables are reached through the text and meta
//! protocols; Kura's own server errors (a failed log, a replica's refusal of a change,
//! too few replicas) are status `0x84` with the reason as text.

use std::sync::Arc;

use kura_engine::{exptime_to_absolute, Access, Change};
use kura_protocol::binary::{self, Command, Header, Parsed, ReplyTo, Sasl, Status, StoreOp};
use kura_protocol::Tokens;

use crate::dispatch::{Flow, Outcome};
use crate::semantics::{
    self, ArithRequest, ArithResult, Delta, StoreMode, StoreRequest, StoreResult,
};
use crate::server::{Conn, Shared, Step};
use crate::stats::{bump, PrefixEvent};
use crate::sync_replies as sync;

/// The version a binary `VERSION` answers: memcached's, then Kura's.
const VERSION: &str = concat!("1.6.18-kura-", env!("CARGO_PKG_VERSION"));

/// Parses and runs the first request in `input`, and notes when its reply flushes
/// memcached's pipeline.
pub(crate) async fn step(shared: &Arc<Shared>, conn: &mut Conn, input: &[u8]) -> Step {
    let start = conn.out.len();
    let step = run_step(shared, conn, input).await;
    // An error that discards a body moves memcached to `conn_swallow`, not to a write.
    if conn.swallow_bytes == 0 && flushes_pipeline(conn.out.get(start..).unwrap_or_default()) {
        conn.pushed = conn.out.len();
    }
    step
}

/// Whether memcached writes out every reply so far after these reply packets: an
/// error status (`write_bin_error` moves to `conn_mwrite` when it discards nothing)
/// or a NOOP ("NOOP forces
/// pipeline flush"). Other replies wait in memcached's buffer for more of the read,
/// and are lost when a later header in it closes the connection.
fn flushes_pipeline(replies: &[u8]) -> bool {
    let mut rest = replies;
    while rest.len() >= binary::HEADER_BYTES {
        let opcode = rest[1];
        let status = u16::from_be_bytes([rest[6], rest[7]]);
        if status != 0 || opcode == binary::opcode::NOOP {
            return true;
        }
        let body = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]) as usize;
        rest = rest.get(binary::HEADER_BYTES + body..).unwrap_or_default();
    }
    false
}

async fn run_step(shared: &Arc<Shared>, conn: &mut Conn, input: &[u8]) -> Step {
    let sasl = match (&shared.users, conn.authenticated) {
        (None, _) => Sasl::Off,
        (Some(_), false) => Sasl::Required,
        (Some(_), true) => Sasl::Authenticated,
    };
    let (header, command, consumed) = match binary::parse(input, &shared.limits, sasl) {
        Parsed::Incomplete => return Step::Incomplete,
        Parsed::Close => {
            // memcached closes at once: of this read's earlier replies, only those it
            // already wrote out leave.
            conn.drop_unpushed();
            return Step::Ran {
                consumed: input.len(),
                flow: Flow::Close,
            };
        }
        Parsed::Error {
            header,
            status,
            consumed,
            swallow,
            close,
            unlink_key,
        } => {
            let to = ReplyTo::from(&header);
            binary::error(&mut conn.out, to, status, None);
            if let Some(key) = unlink_key {
                let start = conn.out.len();
                match semantics::drop_on_refused_set(&shared.store, key) {
                    Ok(Some(lsn)) => conn.mark(start, lsn, Some(to), shared),
                    Ok(None) => {}
                    Err(e) => engine_error(&mut conn.out, to, &e),
                }
            }
            conn.swallow_bytes = swallow;
            let flow = if close { Flow::Close } else { Flow::Continue };
            return Step::Ran { consumed, flow };
        }
        Parsed::Request {
            header,
            command,
            consumed,
        } => (header, command, consumed),
    };
    let to = ReplyTo::from(&header);
    match command {
        Command::SaslListMechs => {
            let mechanisms = kura_protocol::auth::SASL_MECHANISMS;
            binary::response(&mut conn.out, to, Status::Success, 0, &[], &[], mechanisms);
            return Step::Ran {
                consumed,
                flow: Flow::Continue,
            };
        }
        Command::Sasl {
            step,
            mechanism,
            data,
        } => {
            let flow = sasl_auth(shared, conn, to, step, mechanism, data).await;
            return Step::Ran { consumed, flow };
        }
        _ => {}
    }
    let key = key_of(&command);
    if key.is_some_and(|key| key.starts_with(b"@@")) {
        binary::error(
            &mut conn.out,
            to,
            Status::NotSupported,
            Some(b"tables are reached through the text and meta protocols"),
        );
        return Step::Ran {
            consumed,
            flow: Flow::Continue,
        };
    }
    // While the ring changes, a change to a key this shard is handing to another
    // waits for the hand-off, and is counted until it is made.
    let _admitted = match key_of(&command).filter(|_| changes(&command)) {
        Some(key) => match crate::cluster::admit(shared, &[key]).await {
            Ok(admitted) => admitted,
            Err(why) => {
                binary::error(&mut conn.out, to, Status::Internal, Some(why.as_bytes()));
                return Step::Ran {
                    consumed,
                    flow: Flow::Continue,
                };
            }
        },
        None => None,
    };
    // In a cluster, a replica passes changes (and reads) on to its primary.
    let read = matches!(command, Command::Get { .. });
    if let Some(forwarding) = crate::cluster::forwarded_binary(
        shared,
        &input[..consumed],
        key_of(&command),
        changes(&command),
        read,
    ) {
        match crate::cluster::forward_binary(shared, forwarding).await {
            Ok(reply) => conn.out.extend_from_slice(&reply),
            Err(why) => binary::error(&mut conn.out, to, Status::Internal, Some(why.as_bytes())),
        }
        return Step::Ran {
            consumed,
            flow: Flow::Continue,
        };
    }
    if changes(&command) {
        // A replica refuses a change before it looks at the data (no EXISTS for a
        // CAS that does not match, no NOT_FOUND for a missing key).
        if let Err(e) = shared.store.check_writable() {
            engine_error(&mut conn.out, to, &e);
            return Step::Ran {
                consumed,
                flow: Flow::Continue,
            };
        }
    }
    let wanted = if changes(&command) {
        sync::wanted_by_default(shared)
    } else {
        None
    };
    if let Some(refusal) = wanted.and_then(|w| sync::refusal(shared, w)) {
        failure(&mut conn.out, Some(to), &refusal);
        return Step::Ran {
            consumed,
            flow: Flow::Continue,
        };
    }
    if let Some(key) = key {
        crate::reader::load_key(shared, key).await;
    }
    let start = conn.out.len();
    let outcome = execute(shared, &header, command, &mut conn.out);
    if let Some(lsn) = outcome.lsn {
        conn.hold(start, lsn, wanted, Some(to), shared);
    }
    Step::Ran {
        consumed,
        flow: outcome.flow,
    }
}

/// SASL_AUTH and SASL_STEP, as memcached with Cyrus SASL answers them. Kura offers
/// PLAIN (its name in any case), which is done in one step: a SASL_STEP has nothing to
/// continue. Once an exchange has succeeded, memcached's SASL connection does not start
/// again: a second SASL_AUTH fails, whatever its password. Every failure logs the
/// connection out, so its next request other than SASL's and `VERSION` gets
/// `Auth failure.` and a close; after a failure a new SASL_AUTH may succeed.
async fn sasl_auth(
    shared: &Arc<Shared>,
    conn: &mut Conn,
    to: ReplyTo,
    step: bool,
    mechanism: &[u8],
    data: &[u8],
) -> Flow {
    let done_before = conn.user.is_some();
    let plain = mechanism.eq_ignore_ascii_case(kura_protocol::auth::SASL_MECHANISMS);
    let login = (!step && !done_before && plain)
        .then(|| kura_protocol::auth::parse_plain(data))
        .flatten();
    let user = match login {
        Some((user, password)) => {
            crate::auth::check(shared, conn.peer, "sasl", user, password).await
        }
        None => {
            let c = shared.counters.local();
            bump(&c.auth_cmds);
            bump(&c.auth_errors);
            None
        }
    };
    if user.is_some() {
        binary::response(
            &mut conn.out,
            to,
            Status::Success,
            0,
            &[],
            &[],
            b"Authenticated",
        );
    } else {
        binary::error(&mut conn.out, to, Status::AuthError, None);
    }
    conn.logged_in(user)
}

/// The key a command reads or changes.
fn key_of<'a>(command: &Command<'a>) -> Option<&'a [u8]> {
    match command {
        Command::Get { key, .. }
        | Command::Touch { key, .. }
        | Command::Store { key, .. }
        | Command::Concat { key, .. }
        | Command::Delete { key }
        | Command::Arithmetic { key, .. } => Some(key),
        _ => None,
    }
}

/// Whether a command may change the store (and so waits for `--min-sync-replicas`).
fn changes(command: &Command<'_>) -> bool {
    match command {
        Command::Get { touch, .. } => touch.is_some(),
        Command::Touch { .. }
        | Command::Store { .. }
        | Command::Concat { .. }
        | Command::Delete { .. }
        | Command::Arithmetic { .. }
        | Command::Flush { .. } => true,
        _ => false,
    }
}

/// Appends the reply that takes the place of one whose change could not be promised:
/// `text` itself on a text connection; on a binary one, status `0x84` with the text's
/// reason (without `SERVER_ERROR ` and the line end).
pub fn failure(out: &mut Vec<u8>, to: Option<ReplyTo>, text: &[u8]) {
    let Some(to) = to else {
        out.extend_from_slice(text);
        return;
    };
    let reason = text.strip_prefix(b"SERVER_ERROR ").unwrap_or(text);
    let reason = reason.strip_suffix(b"\r\n").unwrap_or(reason);
    binary::error(out, to, Status::Internal, Some(reason));
}

fn engine_error(out: &mut Vec<u8>, to: ReplyTo, e: &kura_engine::Error) {
    let mut text = Vec::new();
    crate::dispatch::write_engine_error(e, &mut text);
    failure(out, Some(to), &text);
}

/// Runs one request and appends its reply to `out`.
fn execute(shared: &Shared, header: &Header, command: Command<'_>, out: &mut Vec<u8>) -> Outcome {
    let to = ReplyTo::from(header);
    let quiet = header.quiet();
    let c = shared.counters.local();
    let done = Outcome::after(None);
    if matches!(command, Command::Get { .. }) {
        // In cluster mode, no read from a node that may hold what its shard's primary
        // does not (`Shared::read_refusal`).
        if let Some(why) = shared.read_refusal() {
            binary::error(out, to, Status::Internal, Some(why.as_bytes()));
            return done;
        }
    }
    match command {
        Command::Get {
            key,
            touch,
            with_key,
        } => get(shared, to, quiet, key, touch, with_key, out),
        Command::Touch { key, exptime } => {
            bump(&c.cmd_touch);
            let result = shared.store.update(key, Access::Fetch, |item, now| {
                let change = Change::Touch {
                    exptime: Some(exptime_to_absolute(i64::from(exptime), now)),
                    mark_win_sent: false,
                };
                (change, item.map(|i| (i.client_flags, i.cas)))
            });
            match result {
                Ok((Some((flags, cas)), written)) => {
                    bump(&c.touch_hits);
                    binary::response(
                        out,
                        to,
                        Status::Success,
                        cas,
                        &flags.to_be_bytes(),
                        &[],
                        &[],
                    );
                    Outcome::after(written.map(|w| w.lsn))
                }
                Ok((None, _)) => {
                    bump(&c.touch_misses);
                    binary::error(out, to, Status::KeyNotFound, None);
                    done
                }
                Err(e) => {
                    engine_error(out, to, &e);
                    done
                }
            }
        }
        Command::Store {
            op,
            key,
            flags,
            exptime,
            value,
        } => {
            // A CAS in the header makes any of set, add and replace a compare-and-swap.
            let mode = match op {
                _ if header.cas != 0 => StoreMode::Cas,
                StoreOp::Set => StoreMode::Set,
                StoreOp::Add => StoreMode::Add,
                StoreOp::Replace => StoreMode::Replace,
            };
            shared.prefixes.record(key, PrefixEvent::Set);
            let request = StoreRequest {
                mode,
                key,
                client_flags: flags,
                exptime: i64::from(exptime),
                compare_cas: header.cas,
                data: value,
                invalidate: false,
                binary_key: false,
            };
            stored(shared, to, quiet, mode, request, out)
        }
        Command::Concat { append, key, value } => {
            let mode = if append {
                StoreMode::Append
            } else {
                StoreMode::Prepend
            };
            shared.prefixes.record(key, PrefixEvent::Set);
            let request = StoreRequest {
                mode,
                key,
                client_flags: 0,
                exptime: 0,
                compare_cas: header.cas,
                data: value,
                invalidate: false,
                binary_key: false,
            };
            stored(shared, to, quiet, mode, request, out)
        }
        Command::Delete { key } => {
            shared.prefixes.record(key, PrefixEvent::Delete);
            let compare = header.cas;
            let result = shared
                .store
                .update(key, Access::NoAccess, |item, _| match item {
                    None => (Change::Keep, Status::KeyNotFound),
                    Some(item) if compare != 0 && compare != item.cas => {
                        (Change::Keep, Status::KeyExists)
                    }
                    Some(_) => (Change::Delete, Status::Success),
                });
            match result {
                Ok((status, written)) => {
                    match status {
                        Status::Success => bump(&c.delete_hits),
                        Status::KeyNotFound => bump(&c.delete_misses),
                        _ => {}
                    }
                    if status != Status::Success {
                        binary::error(out, to, status, None);
                    } else if !quiet {
                        binary::response(out, to, Status::Success, 0, &[], &[], &[]);
                    }
                    Outcome::after(written.map(|w| w.lsn))
                }
                Err(e) => {
                    engine_error(out, to, &e);
                    done
                }
            }
        }
        Command::Arithmetic {
            incr,
            key,
            delta,
            initial,
            exptime,
        } => {
            let request = ArithRequest {
                key,
                delta: if incr {
                    Delta::Incr(delta)
                } else {
                    Delta::Decr(delta)
                },
                compare_cas: header.cas,
                // An expiry of all ones means: do not create a missing counter.
                vivify: (exptime != u32::MAX).then_some((i64::from(exptime), initial)),
                new_exptime: None,
            };
            match semantics::arithmetic(&shared.store, c, request) {
                Ok((ArithResult::Value { digits, .. }, written)) => {
                    if !quiet {
                        let value = std::str::from_utf8(&digits)
                            .ok()
                            .and_then(|d| d.parse::<u64>().ok())
                            .unwrap_or(0);
                        let cas = written.as_ref().map_or(0, |w| w.cas);
                        binary::response(
                            out,
                            to,
                            Status::Success,
                            cas,
                            &[],
                            &[],
                            &value.to_be_bytes(),
                        );
                    }
                    Outcome::after(written.map(|w| w.lsn))
                }
                Ok((result, _)) => {
                    let status = match result {
                        ArithResult::NonNumeric => Status::DeltaBadValue,
                        ArithResult::Exists => Status::KeyExists,
                        _ => Status::KeyNotFound,
                    };
                    binary::error(out, to, status, None);
                    done
                }
                Err(e) => {
                    engine_error(out, to, &e);
                    done
                }
            }
        }
        Command::Quit => {
            if !quiet {
                binary::response(out, to, Status::Success, 0, &[], &[], &[]);
            }
            Outcome {
                flow: Flow::Close,
                lsn: None,
            }
        }
        Command::Flush { exptime } => {
            bump(&c.cmd_flush);
            match shared.store.flush_all(i64::from(exptime)) {
                Ok(lsn) => {
                    if !quiet {
                        binary::response(out, to, Status::Success, 0, &[], &[], &[]);
                    }
                    Outcome::after(Some(lsn))
                }
                Err(e) => {
                    engine_error(out, to, &e);
                    done
                }
            }
        }
        Command::Noop => {
            binary::response(out, to, Status::Success, 0, &[], &[], &[]);
            done
        }
        Command::Version => {
            binary::response(out, to, Status::Success, 0, &[], &[], VERSION.as_bytes());
            done
        }
        Command::Stat { group } => {
            stats(shared, to, group, out);
            done
        }
        // Answered by `step` before a request gets here.
        Command::SaslListMechs | Command::Sasl { .. } => {
            binary::error(out, to, Status::AuthError, None);
            done
        }
    }
}

/// GET, GETK, GAT, GATK and their quiet forms.
fn get(
    shared: &Shared,
    to: ReplyTo,
    quiet: bool,
    key: &[u8],
    touch: Option<u32>,
    with_key: bool,
    out: &mut Vec<u8>,
) -> Outcome {
    let (item, lsn) = match crate::dispatch::fetch(shared, key, touch.map(i64::from)) {
        Ok(found) => found,
        Err(e) => {
            engine_error(out, to, &e);
            return Outcome::after(None);
        }
    };
    let shown_key: &[u8] = if with_key { key } else { &[] };
    match item {
        Some(item) => {
            let flags = item.client_flags.to_be_bytes();
            binary::response(
                out,
                to,
                Status::Success,
                item.cas,
                &flags,
                shown_key,
                &item.value,
            );
            Outcome::after(Some(lsn.map_or(item.lsn, |l: u64| l.max(item.lsn))))
        }
        None if quiet => Outcome::after(lsn),
        // GETK's miss carries the key instead of the text.
        None if with_key => {
            binary::response(out, to, Status::KeyNotFound, 0, &[], key, &[]);
            Outcome::after(lsn)
        }
        None => {
            binary::error(out, to, Status::KeyNotFound, None);
            Outcome::after(lsn)
        }
    }
}

/// Runs a storage request and writes memcached's binary reply to it.
fn stored(
    shared: &Shared,
    to: ReplyTo,
    quiet: bool,
    mode: StoreMode,
    request: StoreRequest<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    let c = shared.counters.local();
    match semantics::store(&shared.store, c, &shared.limits, request) {
        Ok((StoreResult::Stored, written)) => {
            if !quiet {
                let cas = written.as_ref().map_or(0, |w| w.cas);
                binary::response(out, to, Status::Success, cas, &[], &[], &[]);
            }
            Outcome::after(written.map(|w| w.lsn))
        }
        Ok((result, _)) => {
            let status = match result {
                StoreResult::Exists => Status::KeyExists,
                StoreResult::NotFound => Status::KeyNotFound,
                // memcached names a refused add or replace by what was in the way.
                StoreResult::NotStored if mode == StoreMode::Add => Status::KeyExists,
                StoreResult::NotStored if mode == StoreMode::Replace => Status::KeyNotFound,
                StoreResult::NoMemory => {
                    binary::error(
                        out,
                        to,
                        Status::OutOfMemory,
                        Some(b"Out of memory allocating item"),
                    );
                    return Outcome::after(None);
                }
                _ => Status::NotStored,
            };
            binary::error(out, to, status, None);
            Outcome::after(None)
        }
        Err(e) => {
            engine_error(out, to, &e);
            Outcome::after(None)
        }
    }
}

/// STAT: Kura's `stats <group>` as binary packets, one per statistic (key the name,
/// value the value), then an empty packet; a group `stats` refuses is `Not found`.
fn stats(shared: &Shared, to: ReplyTo, group: &[u8], out: &mut Vec<u8>) {
    let mut text = Vec::new();
    crate::stats_reply::write(shared, Tokens::new(group), &mut text);
    let end = |out: &mut Vec<u8>| {
        binary::response(out, to, Status::Success, 0, &[], &[], &[]);
    };
    if group.starts_with(b"detail dump") {
        // memcached sends the whole dump as one statistic named "detailed".
        binary::response(out, to, Status::Success, 0, &[], b"detailed", &text);
        end(out);
        return;
    }
    let mut packets = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(stat) = line.strip_prefix(b"STAT ") {
            let (name, value) = match stat.iter().position(|&b| b == b' ') {
                Some(space) => (&stat[..space], &stat[space + 1..]),
                None => (stat, &[][..]),
            };
            binary::response(&mut packets, to, Status::Success, 0, &[], name, value);
        } else if matches!(line, b"END" | b"RESET" | b"OK") {
            out.extend_from_slice(&packets);
            end(out);
            return;
        } else if !line.is_empty() {
            // ERROR or CLIENT_ERROR: a group memcached does not know.
            break;
        }
    }
    binary::error(out, to, Status::KeyNotFound, None);
}

/// Whether `input` begins a binary-protocol connection.
pub fn starts_binary(input: &[u8]) -> bool {
    input.first() == Some(&binary::REQUEST_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_protocol::binary::opcode;

    #[test]
    fn a_failure_on_a_binary_connection_is_status_0x84_with_the_reason() {
        let mut out = Vec::new();
        let to = ReplyTo {
            opcode: opcode::SETQ,
            opaque: 3,
        };
        failure(&mut out, Some(to), b"SERVER_ERROR log write failed\r\n");
        assert_eq!(&out[..2], &[0x81, opcode::SETQ]);
        assert_eq!(&out[6..8], &[0, 0x84]);
        assert_eq!(&out[24..], b"log write failed");
        let mut text = Vec::new();
        failure(&mut text, None, b"SERVER_ERROR x\r\n");
        assert_eq!(text, b"SERVER_ERROR x\r\n");
    }
}
