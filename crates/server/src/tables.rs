//! Tables through memcached's commands: which keys name rows, and the replies.
//!
//! A key `@@<container>.<key>` names the row `<key>` of a container (a table, keyed by
//! its primary key, or `<table>_by_<index>`, keyed by a unique index), as the InnoDB
//! memcached plugin spelled it; the container name ends at the first `.`. A `get` of
//! `@@<container>` alone makes it the connection's default container: later keys
//! without `@@` name its rows. A connection that never does so sees memcached's plain
//! key space, unchanged.
//!
//! A `get` or `gets` of `@@<container>.@>=A@<B` (the InnoDB plugin's range syntax:
//! `@<`, `@<=`, `@>`, `@>=`, one or two bounds) returns the rows whose key in that
//! container is in the range, in that key's order, each as `@@<table>.<primary key>`
//! with its table's value, at most `RANGE_ROWS_MAX`.
//!
//! On rows: `get gets gat gats touch set add replace cas delete`, and `mg ms md` with
//! the flags that mean something for a row (`v s t c f k O q T` on mg, `F T C c k O q`
//! and the modes S E R on ms, `C k O q` on md). `incr decr append prepend ma`, and
//! memcached's own mechanisms (vivify, recache and win tokens, invalidation, base64
//! keys), get `CLIENT_ERROR`: rows have no counter column, and tables keep memcached's
//! rules out. A value that does not fit its row gets `CLIENT_ERROR <reason>`; under
//! `noreply` it is dropped with every other reply (`dispatch::execute`), as memcached
//! drops a refused store's.
//!
//! What it is not for: what a row is, or how it and its indexes are written
//! (`kura-tables`).

use std::sync::Arc;

use kura_protocol::number::write_u64 as push_u64;
use kura_protocol::response::write_value;
use kura_protocol::{MetaRequest, MetaSetMode, Request, RetrievalCommand, StorageCommand};
use kura_tables::{
    Catalog, CatalogCache, ChangeOutcome, Container, RowItem, WriteMode, WriteOutcome,
};

use crate::dispatch::{write_engine_error, Outcome};
use crate::semantics::NO_MEMORY_REPLY;
use crate::server::Shared;
use crate::stats::bump;

mod range;

/// What a connection remembers between requests.
#[derive(Debug, Default)]
pub struct Session {
    /// The container keys without `@@` name rows of, once `get @@<name>` chose one.
    pub container: Option<String>,
    /// The catalog this connection saw last, kept while it is current.
    catalog: CatalogCache,
}

/// Where a key leads.
pub enum Route<'k> {
    /// memcached's own key space.
    Plain,
    /// A row of a container.
    Row {
        catalog: Arc<Catalog>,
        container: Container,
        key: &'k [u8],
    },
    /// `@@<name>` alone: makes `name` the connection's default container.
    Switch {
        catalog: Arc<Catalog>,
        container: Container,
        name: &'k [u8],
    },
    /// A container no table or index has.
    Unknown { name: Vec<u8> },
}

/// Where `key` leads for a connection in `session`.
pub fn route<'k>(shared: &Shared, session: &mut Session, key: &'k [u8]) -> Route<'k> {
    let catalog = shared.tables.catalog_cached(&mut session.catalog);
    let container = |name: &str| Some((Arc::clone(catalog), catalog.container(name)?));
    if let Some(rest) = key.strip_prefix(b"@@") {
        let split = |at: usize| match rest[at..].iter().position(|&b| b == b'.') {
            Some(dot) => (&rest[..at + dot], Some(&rest[at + dot + 1..])),
            None => (rest, None),
        };
        let (mut name, mut row_key) = split(0);
        let mut found = std::str::from_utf8(name).ok().and_then(container);
        // `@@database.table.key`: a container of the default database wins a name
        // it shares with a database.
        if let (None, Some(after)) = (&found, row_key) {
            let database = std::str::from_utf8(name).ok();
            if database.is_some_and(|d| catalog.has_database(d)) && !after.is_empty() {
                (name, row_key) = split(name.len() + 1);
                found = std::str::from_utf8(name).ok().and_then(container);
            }
        }
        return match (found, row_key) {
            (None, _) => Route::Unknown {
                name: name.to_vec(),
            },
            (Some((catalog, container)), Some(key)) => Route::Row {
                catalog,
                container,
                key,
            },
            (Some((catalog, container)), None) => Route::Switch {
                catalog,
                container,
                name,
            },
        };
    }
    match &session.container {
        None => Route::Plain,
        Some(name) => match container(name) {
            Some((catalog, container)) => Route::Row {
                catalog,
                container,
                key,
            },
            None => Route::Unknown {
                name: name.as_bytes().to_vec(),
            },
        },
    }
}

/// Whether `key` stays in memcached's key space: the common case, decided without a
/// look at the catalog.
pub fn is_plain(session: &Session, key: &[u8]) -> bool {
    session.container.is_none() && !key.starts_with(b"@@")
}

/// Writes `CLIENT_ERROR <why>` on one line.
fn client_error(out: &mut Vec<u8>, why: &str) {
    out.extend_from_slice(b"CLIENT_ERROR ");
    // A reason quotes a client's key or value: keep it to one printable line.
    out.extend(why.bytes().map(|b| {
        if b.is_ascii_graphic() || b == b' ' {
            b
        } else {
            b'?'
        }
    }));
    out.extend_from_slice(b"\r\n");
}

fn write_error(out: &mut Vec<u8>, e: &kura_tables::Error) {
    match e {
        kura_tables::Error::Engine(e) => write_engine_error(e, out),
        kura_tables::Error::Format(_) | kura_tables::Error::Moving(_) => {
            out.extend_from_slice(b"SERVER_ERROR ");
            out.extend_from_slice(e.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        other => client_error(out, &other.to_string()),
    }
}

fn unknown(out: &mut Vec<u8>, name: &[u8]) {
    client_error(
        out,
        &format!(
            "no table or index container {}",
            String::from_utf8_lossy(name)
        ),
    );
}

/// Runs `request` if any of its keys names a row; None if it is memcached's alone
/// (retrievals are routed key by key in `dispatch`).
pub fn execute(
    shared: &Shared,
    session: &mut Session,
    request: &Request<'_>,
    out: &mut Vec<u8>,
) -> Option<Outcome> {
    let key: &[u8] = match request {
        Request::Storage { key, .. }
        | Request::Delete { key, .. }
        | Request::Touch { key, .. }
        | Request::Arithmetic { key, .. } => key,
        Request::MetaGet(m)
        | Request::MetaSet { request: m, .. }
        | Request::MetaDelete(m)
        | Request::MetaArithmetic(m) => &m.key,
        Request::MetaDebug { key, .. } => key,
        _ => return None,
    };
    if is_plain(session, key) {
        return None;
    }
    let (catalog, container, row_key) = match route(shared, session, key) {
        Route::Plain => return None,
        Route::Row {
            catalog,
            container,
            key,
        } => (catalog, container, key),
        Route::Unknown { name } => {
            unknown(out, &name);
            return Some(Outcome::after(None));
        }
        Route::Switch { .. } => {
            // `@@name` without a row key: only `get` switches containers.
            client_error(out, "a row's key is @@<container>.<key>");
            return Some(Outcome::after(None));
        }
    };
    let c = shared.counters.local();
    let tables = &shared.tables;
    if let Request::MetaGet(m) | Request::MetaSet { request: m, .. } | Request::MetaDelete(m) =
        request
    {
        if let Some(letter) = foreign_flag(m) {
            return Some(refuse_flag(out, letter));
        }
    }
    let outcome = match request {
        Request::Storage {
            command,
            flags,
            exptime,
            cas_unique,
            noreply,
            data,
            ..
        } => {
            bump(&c.cmd_set);
            let mode = match command {
                StorageCommand::Set => WriteMode::Set,
                StorageCommand::Add => WriteMode::Add,
                StorageCommand::Replace => WriteMode::Replace,
                StorageCommand::Cas => WriteMode::Cas(*cas_unique),
                StorageCommand::Append | StorageCommand::Prepend => {
                    client_error(out, "append and prepend do not apply to table rows");
                    return Some(Outcome::after(None));
                }
            };
            match tables.write(&catalog, container, row_key, data, mode, (*flags, *exptime)) {
                Ok(result) => {
                    let (reply, lsn): (&[u8], _) = match result {
                        WriteOutcome::NoMemory => {
                            out.extend_from_slice(NO_MEMORY_REPLY);
                            return Some(Outcome::after(None));
                        }
                        WriteOutcome::Stored(w) => (b"STORED\r\n", Some(w.lsn)),
                        WriteOutcome::NotStored | WriteOutcome::Duplicate => {
                            (b"NOT_STORED\r\n", None)
                        }
                        WriteOutcome::Exists => (b"EXISTS\r\n", None),
                        WriteOutcome::NotFound => (b"NOT_FOUND\r\n", None),
                    };
                    if !noreply {
                        out.extend_from_slice(reply);
                    }
                    Outcome::after(lsn)
                }
                Err(e) => {
                    write_error(out, &e);
                    Outcome::after(None)
                }
            }
        }
        Request::Delete { noreply, .. } => {
            let result = tables.delete(&catalog, container, row_key, None);
            change_reply(result, *noreply, [b"DELETED\r\n", b"NOT_FOUND\r\n"], out)
        }
        Request::Touch {
            exptime, noreply, ..
        } => {
            bump(&c.cmd_touch);
            let result = tables.touch(&catalog, container, row_key, *exptime);
            let result = result.map(|item| match item {
                Some(item) => {
                    bump(&c.touch_hits);
                    ChangeOutcome::Done(Some(kura_engine::Written {
                        lsn: item.lsn,
                        cas: item.cas,
                    }))
                }
                None => {
                    bump(&c.touch_misses);
                    ChangeOutcome::NotFound
                }
            });
            change_reply(result, *noreply, [b"TOUCHED\r\n", b"NOT_FOUND\r\n"], out)
        }
        Request::Arithmetic { .. } | Request::MetaArithmetic(_) => {
            client_error(out, "incr and decr do not apply to table rows");
            Outcome::after(None)
        }
        Request::MetaGet(m) => {
            bump(&c.cmd_meta);
            meta_get(shared, &catalog, container, row_key, m, out)
        }
        Request::MetaSet { request: m, data } => {
            bump(&c.cmd_meta);
            bump(&c.cmd_set);
            meta_set(shared, &catalog, container, row_key, m, data, out)
        }
        Request::MetaDelete(m) => {
            bump(&c.cmd_meta);
            meta_delete(shared, &catalog, container, row_key, m, out)
        }
        Request::MetaDebug { .. } => {
            client_error(out, "me does not apply to table rows");
            Outcome::after(None)
        }
        _ => return None,
    };
    Some(outcome)
}

/// The reply to a delete or touch of a row.
fn change_reply(
    result: Result<ChangeOutcome, kura_tables::Error>,
    noreply: bool,
    replies: [&[u8]; 2],
    out: &mut Vec<u8>,
) -> Outcome {
    match result {
        Ok(ChangeOutcome::Done(written)) => {
            if !noreply {
                out.extend_from_slice(replies[0]);
            }
            Outcome::after(written.map(|w| w.lsn))
        }
        Ok(ChangeOutcome::NotFound) => {
            if !noreply {
                out.extend_from_slice(replies[1]);
            }
            Outcome::after(None)
        }
        Ok(ChangeOutcome::Exists) => {
            if !noreply {
                out.extend_from_slice(b"EXISTS\r\n");
            }
            Outcome::after(None)
        }
        Err(e) => {
            write_error(out, &e);
            Outcome::after(None)
        }
    }
}

/// One key of a `get`, `gets`, `gat` or `gats` that does not stay in memcached's key
/// space: writes its `VALUE` (or switches the default container) and returns the LSN
/// the reply waits for. Err once it wrote an error, which ends the command.
pub fn retrieve(
    shared: &Shared,
    session: &mut Session,
    route: Route<'_>,
    (command, exptime): (RetrievalCommand, i64),
    key: &[u8],
    out: &mut Vec<u8>,
) -> Result<Option<u64>, ()> {
    let c = shared.counters.local();
    match route {
        Route::Plain => Ok(None),
        Route::Unknown { name } => {
            unknown(out, &name);
            Err(())
        }
        Route::Switch {
            catalog,
            container,
            name,
        } => {
            // As the InnoDB plugin: the container becomes the default, and its value
            // names the table behind it.
            session.container = Some(String::from_utf8_lossy(name).into_owned());
            let table = &catalog.tables[container.table].table.name;
            let value = format!("kura/{table}");
            write_value(out, key, 0, value.as_bytes(), None);
            Ok(None)
        }
        Route::Row {
            catalog,
            container,
            key: row_key,
        } if kura_tables::ordered::is_range(row_key) => {
            if command.touches() {
                client_error(out, "gat and gats take keys, not ranges");
                return Err(());
            }
            bump(&c.cmd_get);
            match shared.tables.range(&catalog, container, row_key) {
                Ok(rows) => {
                    // One item under the key asked for, holding every row.
                    bump(&c.get_hits);
                    let table = &catalog.tables[container.table].table.name;
                    let combined = range::combine(table, &rows);
                    let cas = command.returns_cas().then_some(combined.cas);
                    write_value(out, key, 0, &combined.value, cas);
                    Ok(combined.lsn)
                }
                Err(e) => {
                    write_error(out, &e);
                    Err(())
                }
            }
        }
        Route::Row {
            catalog,
            container,
            key: row_key,
        } => {
            let tables = &shared.tables;
            let result = if command.touches() {
                bump(&c.cmd_touch);
                tables.touch(&catalog, container, row_key, exptime)
            } else {
                bump(&c.cmd_get);
                tables.get(&catalog, container, row_key)
            };
            match result {
                Ok(Some(item)) => {
                    bump(if command.touches() {
                        &c.touch_hits
                    } else {
                        &c.get_hits
                    });
                    let cas = command.returns_cas().then_some(item.cas);
                    write_value(out, key, item.client_flags, &item.value, cas);
                    Ok(Some(item.lsn))
                }
                Ok(None) => {
                    bump(if command.touches() {
                        &c.touch_misses
                    } else {
                        &c.get_misses
                    });
                    Ok(None)
                }
                Err(e) => {
                    write_error(out, &e);
                    Err(())
                }
            }
        }
    }
}

/// The meta flags a row has no use for, if the request has one.
fn foreign_flag(m: &MetaRequest<'_>) -> Option<char> {
    let f = &m.flags;
    [
        (f.base64, 'b'),
        (f.vivify_ttl.is_some(), 'N'),
        (f.recache_ttl.is_some(), 'R'),
        (f.invalidate, 'I'),
    ]
    .into_iter()
    .find_map(|(present, letter)| present.then_some(letter))
}

fn refuse_flag(out: &mut Vec<u8>, letter: char) -> Outcome {
    client_error(
        out,
        &format!("flag {letter} is memcached's own and does not apply to table rows"),
    );
    Outcome::after(None)
}

/// ` O<opaque>` or ` k<key>` if `letter` is one of them.
fn push_echo_letter(out: &mut Vec<u8>, letter: u8, m: &MetaRequest<'_>) {
    match letter {
        b'O' => {
            out.extend_from_slice(b" O");
            out.extend_from_slice(m.flags.opaque.unwrap_or(b""));
        }
        b'k' => {
            out.extend_from_slice(b" k");
            out.extend_from_slice(&m.key);
        }
        _ => {}
    }
}

/// ` O<opaque>` and ` k<key>` in the order the request gave them.
fn push_echo(out: &mut Vec<u8>, m: &MetaRequest<'_>) {
    for &letter in m.flags.order.as_slice() {
        push_echo_letter(out, letter, m);
    }
}

fn meta_get(
    shared: &Shared,
    catalog: &Catalog,
    container: Container,
    row_key: &[u8],
    m: &MetaRequest<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    if kura_tables::ordered::is_range(row_key) {
        return meta_range(shared, catalog, container, row_key, m, out);
    }
    let c = shared.counters.local();
    let f = &m.flags;
    if f.rows {
        client_error(out, "flag r takes a range");
        return Outcome::after(None);
    }
    let tables = &shared.tables;
    let result = match f.ttl {
        Some(ttl) => {
            bump(&c.cmd_touch);
            tables.touch(catalog, container, row_key, ttl)
        }
        None => {
            bump(&c.cmd_get);
            tables.get(catalog, container, row_key)
        }
    };
    let item: RowItem = match result {
        Ok(Some(item)) => {
            bump(if f.ttl.is_some() {
                &c.touch_hits
            } else {
                &c.get_hits
            });
            item
        }
        Ok(None) => {
            bump(if f.ttl.is_some() {
                &c.touch_misses
            } else {
                &c.get_misses
            });
            if !f.quiet {
                out.extend_from_slice(b"EN");
                push_echo(out, m);
                out.extend_from_slice(b"\r\n");
            }
            return Outcome::after(None);
        }
        Err(e) => {
            write_error(out, &e);
            return Outcome::after(None);
        }
    };
    let now = shared.store.now_secs();
    write_meta_item(out, &item, &m.key, m, now);
    Outcome::after(Some(item.lsn))
}

/// A row, or a range's item, as mg shows it: `VA`/`HD` with the flags asked for, `k`
/// naming it `key`.
fn write_meta_item(out: &mut Vec<u8>, item: &RowItem, key: &[u8], m: &MetaRequest<'_>, now: u32) {
    let f = &m.flags;
    if f.return_value {
        out.extend_from_slice(b"VA ");
        push_u64(out, item.value.len() as u64);
    } else {
        out.extend_from_slice(b"HD");
    }
    for letter in f.order.as_slice() {
        match letter {
            b's' => {
                out.extend_from_slice(b" s");
                push_u64(out, item.value.len() as u64);
            }
            b't' => {
                out.extend_from_slice(b" t");
                if item.exptime == 0 {
                    out.extend_from_slice(b"-1");
                } else {
                    push_u64(out, u64::from(item.exptime.wrapping_sub(now)));
                }
            }
            b'c' => {
                out.extend_from_slice(b" c");
                push_u64(out, item.cas);
            }
            b'f' => {
                out.extend_from_slice(b" f");
                push_u64(out, u64::from(item.client_flags));
            }
            b'k' => {
                out.extend_from_slice(b" k");
                out.extend_from_slice(key);
            }
            &other => push_echo_letter(out, other, m),
        }
    }
    out.extend_from_slice(b"\r\n");
    if f.return_value {
        out.extend_from_slice(&item.value);
        out.extend_from_slice(b"\r\n");
    }
}

/// `mg` of a range: one item holding its rows (as `get`), or with `r` each row as
/// its own `VA`/`HD` line (named by its table key with `k`), then `EN` with `r0` (the
/// whole range) or `r1` (cut at its limit) where the request put `r`.
fn meta_range(
    shared: &Shared,
    catalog: &Catalog,
    container: Container,
    spec: &[u8],
    m: &MetaRequest<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    let c = shared.counters.local();
    let f = &m.flags;
    if f.ttl.is_some() {
        client_error(out, "mg T takes keys, not ranges");
        return Outcome::after(None);
    }
    bump(&c.cmd_get);
    let rows = match shared.tables.range(catalog, container, spec) {
        Ok(rows) => rows,
        Err(e) => {
            write_error(out, &e);
            return Outcome::after(None);
        }
    };
    bump(&c.get_hits);
    let now = shared.store.now_secs();
    let table = &catalog.tables[container.table].table.name;
    if !f.rows {
        let combined = range::combine(table, &rows);
        let item = RowItem {
            value: combined.value,
            client_flags: 0,
            exptime: 0,
            cas: combined.cas,
            lsn: combined.lsn.unwrap_or(0),
        };
        write_meta_item(out, &item, &m.key, m, now);
        return Outcome::after(combined.lsn);
    }
    let mut lsn = None;
    for (pk, item) in &rows.rows {
        let mut key = format!("@@{table}.").into_bytes();
        key.extend_from_slice(pk);
        write_meta_item(out, item, &key, m, now);
        lsn = lsn.max(Some(item.lsn));
    }
    out.extend_from_slice(b"EN");
    for &letter in f.order.as_slice() {
        if letter == b'r' {
            out.extend_from_slice(if rows.cut { b" r1" } else { b" r0" });
        } else {
            push_echo_letter(out, letter, m);
        }
    }
    out.extend_from_slice(b"\r\n");
    Outcome::after(lsn)
}

fn meta_set(
    shared: &Shared,
    catalog: &Catalog,
    container: Container,
    row_key: &[u8],
    m: &MetaRequest<'_>,
    data: &[u8],
    out: &mut Vec<u8>,
) -> Outcome {
    let f = &m.flags;
    let mode = match (m.set_mode(), f.compare_cas) {
        (MetaSetMode::Append | MetaSetMode::Prepend, _) => {
            client_error(out, "append and prepend do not apply to table rows");
            return Outcome::after(None);
        }
        (MetaSetMode::Add, _) => WriteMode::Add,
        (MetaSetMode::Set | MetaSetMode::Replace, Some(cas)) => WriteMode::Cas(cas),
        (MetaSetMode::Replace, None) => WriteMode::Replace,
        (MetaSetMode::Set, None) => WriteMode::Set,
    };
    let result = shared.tables.write(
        catalog,
        container,
        row_key,
        data,
        mode,
        (f.client_flags.unwrap_or(0), f.ttl.unwrap_or(0)),
    );
    let (code, written): (&[u8], _) = match result {
        Ok(WriteOutcome::NoMemory) => {
            out.extend_from_slice(NO_MEMORY_REPLY);
            return Outcome::after(None);
        }
        Ok(WriteOutcome::Stored(w)) => (b"HD", Some(w)),
        Ok(WriteOutcome::NotStored | WriteOutcome::Duplicate) => (b"NS", None),
        Ok(WriteOutcome::Exists) => (b"EX", None),
        Ok(WriteOutcome::NotFound) => (b"NF", None),
        Err(e) => {
            write_error(out, &e);
            return Outcome::after(None);
        }
    };
    let lsn = written.map(|w| w.lsn);
    if written.is_some() && f.quiet {
        return Outcome::after(lsn);
    }
    out.extend_from_slice(code);
    for &letter in f.order.as_slice() {
        if letter == b'c' {
            out.extend_from_slice(b" c");
            push_u64(out, written.map_or(0, |w| w.cas));
        } else {
            push_echo_letter(out, letter, m);
        }
    }
    out.extend_from_slice(b"\r\n");
    Outcome::after(lsn)
}

fn meta_delete(
    shared: &Shared,
    catalog: &Catalog,
    container: Container,
    row_key: &[u8],
    m: &MetaRequest<'_>,
    out: &mut Vec<u8>,
) -> Outcome {
    let c = shared.counters.local();
    let f = &m.flags;
    let result = shared
        .tables
        .delete(catalog, container, row_key, f.compare_cas);
    let (code, lsn): (&[u8], _) = match result {
        Ok(ChangeOutcome::Done(w)) => {
            bump(&c.delete_hits);
            (b"HD", w.map(|w| w.lsn))
        }
        Ok(ChangeOutcome::NotFound) => {
            bump(&c.delete_misses);
            (b"NF", None)
        }
        Ok(ChangeOutcome::Exists) => (b"EX", None),
        Err(e) => {
            write_error(out, &e);
            return Outcome::after(None);
        }
    };
    if lsn.is_some() && f.quiet {
        return Outcome::after(lsn);
    }
    out.extend_from_slice(code);
    push_echo(out, m);
    out.extend_from_slice(b"\r\n");
    Outcome::after(lsn)
}
