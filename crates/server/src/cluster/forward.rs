//! Any node serves any client: in cluster mode a replica forwards the changes it is
//! sent (and its reads, unless `--replica-reads local`) to its shard's primary, and
//! answers with the primary's reply, so a client configured with any node's address
//! keeps working across failovers.
//!
//! The request goes as the client sent it (`Request::write_to`), followed by `mn`
//! (the meta no-op): the reply is everything up to the `MN` that answers it, which
//! frames any command's reply, none for `noreply` and `q` included, without knowing
//! each command's. Values in the reply (`VALUE ... <bytes>`, `VA <bytes> ...`) are
//! skipped by their length, so a value that holds `MN` does not end it early.
//!
//! Connections to the primary are pooled (logged in and over TLS as replication
//! connects); one is used by one request at a time and returned after a whole reply.
//! A connection that fails is dropped. A change whose reply does not come whole may
//! or may not have been made: the client gets `SERVER_ERROR`, never a false `STORED`.
//! The worker thread waits for the primary's reply, as it would for its own disk.
//!
//! What it is not for: the binary protocol and the SQL port, which a replica answers
//! itself (changes refused, naming the primary).

use std::io::{Read, Write};
use std::time::Duration;

use kura_protocol::Request;
use parking_lot::Mutex;

use crate::replication::Socket;
use crate::server::Shared;

/// How long a connection to the primary may take to open.
const CONNECT_WITHIN: Duration = Duration::from_secs(2);
/// Idle connections kept per node.
const POOL: usize = 8;
/// The largest reply taken through (a get of many large values).
const REPLY_MAX: usize = 256 << 20;

/// In cluster mode on a node that is not its shard's primary: forwards `request` to
/// the primary if it is a change, or a read and reads go to the primary
/// (`--replica-reads primary`, the default), and appends the reply (or why it could
/// not) to `out`. False: the request runs here.
pub fn forwarded(shared: &Shared, request: &Request<'_>, out: &mut Vec<u8>) -> bool {
    if !super::enabled(&shared.config) || !shared.store.is_read_only() {
        return false;
    }
    let change = crate::replication::sync::changes(request);
    let read = matches!(request, Request::Retrieval { .. } | Request::MetaGet(_));
    let reads_here = shared.config.replica_reads == crate::config::ReplicaReads::Local;
    let forwards = change || (read && !reads_here);
    if !forwards {
        return false;
    }
    let Some(primary) = shared.replication.primary() else {
        out.extend_from_slice(
            b"SERVER_ERROR the shard has no primary (being elected), try again\r\n",
        );
        return true;
    };
    if let Err(e) = shared.forwarder.forward(shared, &primary, request, out) {
        out.extend_from_slice(
            format!("SERVER_ERROR forwarding to the primary {primary} failed: {e}; try again\r\n")
                .as_bytes(),
        );
    }
    true
}

/// The pool of connections to the primary.
#[derive(Default)]
pub struct Forwarder {
    idle: Mutex<Vec<(String, Socket)>>,
}

impl Forwarder {
    /// Sends `request` to `primary` and appends its reply to `out`; on failure
    /// appends nothing and says why.
    pub fn forward(
        &self,
        shared: &Shared,
        primary: &str,
        request: &Request<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let mut bytes = Vec::new();
        request.write_to(&mut bytes);
        bytes.extend_from_slice(b"mn\r\n");
        let mut socket = match self.take(primary) {
            Some(socket) => socket,
            None => {
                let socket = shared.replication.connect(primary, CONNECT_WITHIN)?;
                // A reply may wait for the primary's replicas (`--sync-timeout-ms`),
                // then it comes: a primary silent for longer is cut off or gone.
                let limit =
                    Duration::from_millis(shared.config.sync_timeout_ms) + Duration::from_secs(1);
                socket
                    .set_read_timeout(Some(limit))
                    .and_then(|()| socket.set_write_timeout(Some(limit)))
                    .map_err(|e| e.to_string())?;
                socket
            }
        };
        socket.write_all(&bytes).map_err(|e| e.to_string())?;
        let start = out.len();
        match read_reply(&mut socket, out) {
            Ok(()) => {
                self.give_back(primary, socket);
                Ok(())
            }
            Err(e) => {
                out.truncate(start);
                Err(e)
            }
        }
    }

    fn take(&self, primary: &str) -> Option<Socket> {
        let mut idle = self.idle.lock();
        // Connections to a former primary go.
        idle.retain(|(to, _)| to == primary);
        idle.pop().map(|(_, socket)| socket)
    }

    fn give_back(&self, primary: &str, socket: Socket) {
        let mut idle = self.idle.lock();
        if idle.len() < POOL {
            idle.push((primary.to_string(), socket));
        }
    }
}

/// Reads from `socket` up to the `MN` that ends a forwarded request's reply, and
/// appends what comes before it to `out`.
fn read_reply(socket: &mut Socket, out: &mut Vec<u8>) -> Result<(), String> {
    let mut buf: Vec<u8> = Vec::new();
    let mut pos = 0;
    let mut chunk = [0u8; 16 << 10];
    loop {
        // Whole frames from `pos` on.
        while let Some(len) = frame(&buf[pos..])? {
            if &buf[pos..pos + len] == b"MN\r\n" {
                out.extend_from_slice(&buf[..pos]);
                if pos + len != buf.len() {
                    return Err("the primary sent more than the reply".to_string());
                }
                return Ok(());
            }
            pos += len;
        }
        if buf.len() > REPLY_MAX {
            return Err("the primary's reply is too large to forward".to_string());
        }
        let n = socket.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the primary closed the connection".to_string());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The length of the whole reply frame at the start of `bytes` (a line, or a value's
/// header line with its data), or None if it is not all there yet.
fn frame(bytes: &[u8]) -> Result<Option<usize>, String> {
    let Some(eol) = bytes.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = &bytes[..eol];
    let words: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let data = match words.first().copied() {
        Some(b"VALUE") => words.get(3),
        Some(b"VA") => words.get(1),
        _ => return Ok(Some(eol + 2)),
    };
    let data: usize = data
        .and_then(|d| std::str::from_utf8(d).ok()?.parse().ok())
        .ok_or_else(|| {
            format!(
                "an unreadable reply line {:?}",
                String::from_utf8_lossy(line)
            )
        })?;
    let len = eol + 2 + data + 2;
    Ok((bytes.len() >= len).then_some(len))
}

#[cfg(test)]
mod tests {
    use super::frame;

    #[test]
    fn frames_lines_and_values_by_their_length() {
        assert_eq!(frame(b"STORED\r\nMN\r\n"), Ok(Some(8)));
        assert_eq!(frame(b"STORED\r"), Ok(None));
        assert_eq!(frame(b"VALUE k 0 4\r\nMN\r\n\r\nEND\r\n"), Ok(Some(19)));
        assert_eq!(frame(b"VALUE k 0 4 77\r\nMN\r\n\r\nEND\r\n"), Ok(Some(22)));
        assert_eq!(frame(b"VALUE k 0 4\r\nMN"), Ok(None));
        assert_eq!(frame(b"VA 2 f0\r\nMN\r\nMN\r\n"), Ok(Some(13)));
        assert!(frame(b"VALUE k 0 x\r\n").is_err());
    }
}
