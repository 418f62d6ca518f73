//! An SQL connection's bytes: its socket (plain or TLS), the packets read from it and
//! the replies written to it with their sequence ids, and the login.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use kura_mysql::{self as my, CapabilityFlags, PacketReader, NONCE_BYTES};
use kura_sql::{Session, SqlError};

use super::{status, Users, SKIP_LIMIT};
use crate::server::Shared;

/// An SQL connection's socket: plain, or TLS once the client asked for it.
pub(super) enum SqlStream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>),
    /// While the one becomes the other; a failed switch leaves it so, and it closes.
    Switching,
}

impl Read for SqlStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            SqlStream::Plain(s) => s.read(buf),
            SqlStream::Tls(s) => s.read(buf),
            SqlStream::Switching => Ok(0),
        }
    }
}

impl Write for SqlStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            SqlStream::Plain(s) => s.write(buf),
            SqlStream::Tls(s) => s.write(buf),
            SqlStream::Switching => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            SqlStream::Plain(s) => s.flush(),
            SqlStream::Tls(s) => s.flush(),
            SqlStream::Switching => Ok(()),
        }
    }
}

impl SqlStream {
    /// The TCP socket under the stream.
    pub(super) fn socket(&self) -> Option<&TcpStream> {
        match self {
            SqlStream::Plain(s) => Some(s),
            SqlStream::Tls(s) => Some(&s.sock),
            SqlStream::Switching => None,
        }
    }
}

/// Bounds the socket's next reads and writes by `deadline` (None: unbounded); a
/// deadline already past is MySQL's connect_timeout expiring.
pub(super) fn bound_by(socket: &TcpStream, deadline: Option<Instant>) -> io::Result<()> {
    let left = match deadline {
        None => None,
        Some(at) => match at.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => Some(left),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the login did not complete within --sql-connect-timeout-secs",
                ))
            }
        },
    };
    socket.set_read_timeout(left)?;
    socket.set_write_timeout(left)
}

/// A connection's bytes: the packets read, the replies written, the sequence ids.
pub(super) struct Wire {
    pub(super) stream: SqlStream,
    /// The client's address, for error messages.
    pub(super) peer: String,
    pub(super) reader: PacketReader,
    /// Where reads land before the packet reader takes them.
    pub(super) read_buf: Box<[u8]>,
    pub(super) out: Vec<u8>,
    pub(super) seq: u8,
    pub(super) caps: CapabilityFlags,
    /// Until the login completes: when the connection is dropped (connect_timeout).
    pub(super) deadline: Option<Instant>,
}

impl crate::cluster::Replies for Wire {
    fn packet(&mut self, payload: &[u8]) -> io::Result<()> {
        self.send(payload)?;
        // A long result passed on from another shard goes out as it comes.
        if self.out.len() >= 64 << 10 {
            self.flush()?;
        }
        Ok(())
    }
}

impl Wire {
    /// The next packet, or None at the end of the stream.
    pub(super) fn packet(&mut self) -> io::Result<Option<(u8, Vec<u8>)>> {
        loop {
            match self.reader.next_packet() {
                Ok(Some(p)) => return Ok(Some(p)),
                Ok(None) => {}
                Err(my::ProtocolError::TooLarge { .. }) => {
                    self.refuse_too_large()?;
                    return Ok(None);
                }
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            }
            if self.deadline.is_some() {
                if let Some(socket) = self.stream.socket() {
                    bound_by(socket, self.deadline)?;
                }
            }
            let n = self.stream.read(&mut self.read_buf)?;
            if n == 0 {
                return Ok(None);
            }
            self.reader.feed(&self.read_buf[..n]);
        }
    }

    /// A packet over max_allowed_packet: as MySQL's server, reads the rest of it
    /// (within [`SKIP_LIMIT`], holding none of it), so that the client, done sending,
    /// reads ER_NET_PACKET_TOO_LARGE (1153); the connection then ends.
    pub(super) fn refuse_too_large(&mut self) -> io::Result<()> {
        let mut pending = std::mem::take(self.reader.buffer());
        let mut at = 0;
        // Body bytes of the current frame still to skip; whether it is the last.
        let mut in_frame = 0usize;
        let mut last_frame = false;
        let mut seq = 0u8;
        let deadline = Instant::now() + SKIP_LIMIT;
        loop {
            if in_frame > 0 {
                let n = in_frame.min(pending.len() - at);
                in_frame -= n;
                at += n;
            }
            if in_frame == 0 {
                if last_frame {
                    break;
                }
                if let Some(header) = pending.get(at..at + 4) {
                    in_frame = usize::from(header[0])
                        | usize::from(header[1]) << 8
                        | usize::from(header[2]) << 16;
                    seq = header[3];
                    last_frame = in_frame < my::MAX_FRAME_PAYLOAD;
                    at += 4;
                    continue;
                }
            }
            pending.drain(..at);
            at = 0;
            if let Some(socket) = self.stream.socket() {
                bound_by(socket, Some(deadline))?;
            }
            let n = self.stream.read(&mut self.read_buf)?;
            if n == 0 {
                return Ok(());
            }
            pending.extend_from_slice(&self.read_buf[..n]);
        }
        self.seq = seq.wrapping_add(1);
        self.send(&my::err(
            1153,
            b"08S01",
            "Got a packet bigger than 'max_allowed_packet' bytes",
        ))?;
        self.flush()
    }

    pub(super) fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        my::write_packet(&mut self.out, &mut self.seq, payload);
        Ok(())
    }

    /// Sends the packet `fill` writes in place into the output (a row: no buffer of
    /// its own per row); nothing if it fails.
    pub(super) fn send_with<E>(
        &mut self,
        fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        my::write_packet_with(&mut self.out, &mut self.seq, fill)
    }

    pub(super) fn flush(&mut self) -> io::Result<()> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out)?;
            self.stream.flush()?;
            self.out.clear();
        }
        Ok(())
    }

    pub(super) fn error(&mut self, e: &SqlError) -> io::Result<()> {
        self.send(&my::err(e.code, &e.state, &e.message))
    }

    /// Turns the socket into a TLS session after the client's SSLRequest and
    /// completes the handshake (bounded in time).
    pub(super) fn start_tls(&mut self, tls: &crate::tls::Tls) -> io::Result<()> {
        let SqlStream::Plain(mut socket) =
            std::mem::replace(&mut self.stream, SqlStream::Switching)
        else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        let mut session = rustls::ServerConnection::new(tls.server_config())
            .map_err(|e| io::Error::other(e.to_string()))?;
        // The client may have sent its first TLS bytes right behind the SSLRequest,
        // in the same read: they are the session's.
        let early = std::mem::take(self.reader.buffer());
        let mut early = &early[..];
        while !early.is_empty() {
            session.read_tls(&mut early)?;
            session
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        }
        while session.is_handshaking() {
            bound_by(&socket, self.deadline)?;
            session.complete_io(&mut socket)?;
        }
        self.stream = SqlStream::Tls(Box::new(rustls::StreamOwned::new(session, socket)));
        Ok(())
    }

    /// Reads the login and answers it. Returns the session of a client that is in.
    pub(super) fn login(
        &mut self,
        users: &Users,
        nonce: &[u8; NONCE_BYTES],
        shared: &Shared,
        id: u32,
    ) -> io::Result<Option<(Session, Option<[u8; NONCE_BYTES]>)>> {
        let Some((_, mut payload)) = self.packet()? else {
            return Ok(None);
        };
        let mut over_tls = false;
        if let Some(tls) = &shared.tls {
            // -Z: TLS only, as MySQL's require_secure_transport.
            if !my::is_ssl_request(&payload) {
                self.seq = self.reader.reply_seq();
                self.error(&SqlError::new(
                    3159,
                    b"HY000",
                    "Connections using insecure transport are prohibited while --require_secure_transport=ON.".to_string(),
                ))?;
                self.flush()?;
                return Ok(None);
            }
            if let Err(e) = self.start_tls(tls) {
                tls.handshake_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("TLS handshake with {} failed: {e}", self.peer);
                return Ok(None);
            }
            over_tls = true;
            let Some((_, full)) = self.packet()? else {
                return Ok(None);
            };
            payload = full;
        }
        self.seq = self.reader.reply_seq();
        let mut login = match my::parse_login(&payload, over_tls) {
            Ok(login) => login,
            Err(e) => {
                self.send(&e.err_packet())?;
                self.flush()?;
                return Ok(None);
            }
        };
        self.caps = login.capabilities;
        if !login.uses_native_password() {
            self.send(&my::auth_switch(nonce))?;
            self.flush()?;
            let Some((_, response)) = self.packet()? else {
                return Ok(None);
            };
            self.seq = self.reader.reply_seq();
            login.auth_response = response;
        }
        let Some(proof) = users.verify(&login, nonce) else {
            let using = if login.auth_response.is_empty() {
                "NO"
            } else {
                "YES"
            };
            let peer = self.peer.clone();
            self.error(&SqlError::new(
                1045,
                b"28000",
                format!(
                    "Access denied for user '{}'@'{peer}' (using password: {using})",
                    login.user
                ),
            ))?;
            self.flush()?;
            return Ok(None);
        };
        let mut session = Session::new(Arc::clone(&shared.tables), id, &login.user)
            .map_err(|e| io::Error::other(e.to_string()))?;
        session.set_found_rows(
            login
                .capabilities
                .contains(CapabilityFlags::CLIENT_FOUND_ROWS),
        );
        if let Some(db) = &login.database {
            if let Err(e) = session.use_database(db) {
                self.error(&e)?;
                self.flush()?;
                return Ok(None);
            }
        }
        self.send(&my::ok(0, 0, status(&session), 0, ""))?;
        self.flush()?;
        Ok(Some((session, proof)))
    }
}
