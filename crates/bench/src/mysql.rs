//! A minimal blocking MySQL/MariaDB client: handshake, `COM_QUERY`, text result sets.
//!
//! Just enough of the client/server protocol to drive a private MariaDB that
//! kura-bench started itself with `--skip-grant-tables`, and Kura's SQL port with
//! its passwordless `root`: no TLS, no password hashing (an empty auth response,
//! which `mysql_native_password` takes as "no password"), no prepared statements
//! (queries are text with quoted literals, as seed 000's Perl client sent them).
//! It avoids pulling a full driver and its TLS stack into the bench's build.
//!
//! Wire format: every packet is a 3-byte little-endian length, a sequence number,
//! then the payload. A query's reply is an OK packet (0x00), an ERR packet (0xFF),
//! or a result set: a column count, column definitions, an EOF packet, rows of
//! length-encoded strings, and an EOF packet.

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};

const CLIENT_LONG_PASSWORD: u32 = 1;
const CLIENT_LONG_FLAG: u32 = 4;
const CLIENT_PROTOCOL_41: u32 = 0x200;
const CLIENT_TRANSACTIONS: u32 = 0x2000;
const CLIENT_SECURE_CONNECTION: u32 = 0x8000;
const CLIENT_MULTI_RESULTS: u32 = 0x20000;
const CLIENT_PLUGIN_AUTH: u32 = 0x80000;

/// An ERR packet in reply to a query: the server refused the statement, and the
/// connection is still usable. Other errors (I/O, framing) are plain `anyhow`
/// errors; callers tell the two apart by downcasting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// MySQL's error code, e.g. 1062 for a duplicate key.
    pub code: u16,
    /// The message, and the statement (abbreviated) it answered.
    pub message: String,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "query failed: error {}: {}", self.code, self.message)
    }
}

impl std::error::Error for ServerError {}

/// One row of a text result set; `None` is SQL NULL.
pub type Row = Vec<Option<Vec<u8>>>;

/// A query's outcome.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A statement without a result set; the number of affected rows.
    Ok { affected_rows: u64 },
    /// A result set.
    Rows(Vec<Row>),
}

/// One connection to a MySQL-protocol server.
pub struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    seq: u8,
    packet: Vec<u8>,
}

impl Connection {
    /// Connects and logs in as `user` with an empty password.
    pub fn connect(addr: SocketAddr, user: &str) -> Result<Connection> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        let writer = stream.try_clone()?;
        let mut conn = Connection {
            reader: BufReader::new(stream),
            writer,
            seq: 0,
            packet: Vec::new(),
        };
        conn.read_packet()
            .context("reading the server's handshake")?;
        if conn.packet.first() == Some(&0xFF) {
            bail!(
                "server refused the connection: {}",
                error_text(&conn.packet)
            );
        }
        let caps = CLIENT_LONG_PASSWORD
            | CLIENT_LONG_FLAG
            | CLIENT_PROTOCOL_41
            | CLIENT_TRANSACTIONS
            | CLIENT_SECURE_CONNECTION
            | CLIENT_MULTI_RESULTS
            | CLIENT_PLUGIN_AUTH;
        let mut reply = Vec::new();
        reply.extend_from_slice(&caps.to_le_bytes());
        reply.extend_from_slice(&(16u32 << 20).to_le_bytes());
        reply.push(33); // utf8_general_ci
        reply.extend_from_slice(&[0; 23]);
        reply.extend_from_slice(user.as_bytes());
        reply.push(0);
        reply.push(0); // an empty auth response
        reply.extend_from_slice(b"mysql_native_password\0");
        conn.write_packet(&reply)?;
        loop {
            conn.read_packet().context("reading the login reply")?;
            match conn.packet.first() {
                Some(0x00) => return Ok(conn),
                Some(0xFF) => bail!("login refused: {}", error_text(&conn.packet)),
                // An auth switch (0xFE) or more auth data: answer with nothing.
                Some(0xFE) | Some(0x01) => conn.write_packet(&[])?,
                _ => bail!("unexpected packet during login"),
            }
        }
    }

    /// Runs one statement and returns its outcome; an ERR packet is an error.
    pub fn query(&mut self, sql: &str) -> Result<Outcome> {
        self.seq = 0;
        let mut command = Vec::with_capacity(sql.len() + 1);
        command.push(0x03);
        command.extend_from_slice(sql.as_bytes());
        self.write_packet(&command)?;
        self.read_packet()?;
        match self.packet.first() {
            Some(0x00) => {
                let (affected_rows, _) = lenenc_int(&self.packet[1..])?;
                Ok(Outcome::Ok { affected_rows })
            }
            Some(0xFF) => Err(ServerError {
                code: error_code(&self.packet),
                message: format!("{}: {}", error_message(&self.packet), abbreviate(sql)),
            }
            .into()),
            _ => {
                let (columns, _) = lenenc_int(&self.packet)?;
                for _ in 0..columns {
                    self.read_packet()?;
                }
                self.read_packet()?;
                if !self.is_eof() {
                    bail!("expected EOF after column definitions");
                }
                let mut rows = Vec::new();
                loop {
                    self.read_packet()?;
                    if self.is_eof() {
                        break;
                    }
                    if self.packet.first() == Some(&0xFF) {
                        bail!("query failed mid-result: {}", error_text(&self.packet));
                    }
                    let mut row = Vec::with_capacity(columns as usize);
                    let mut pos = 0;
                    for _ in 0..columns {
                        if self.packet.get(pos) == Some(&0xFB) {
                            row.push(None);
                            pos += 1;
                            continue;
                        }
                        let (len, used) = lenenc_int(&self.packet[pos..])?;
                        let start = pos + used;
                        let end = start + len as usize;
                        let cell = self.packet.get(start..end).context("short row packet")?;
                        row.push(Some(cell.to_vec()));
                        pos = end;
                    }
                    rows.push(row);
                }
                Ok(Outcome::Rows(rows))
            }
        }
    }

    /// Runs a statement that returns rows.
    pub fn rows(&mut self, sql: &str) -> Result<Vec<Row>> {
        match self.query(sql)? {
            Outcome::Rows(rows) => Ok(rows),
            Outcome::Ok { .. } => bail!("expected rows from {}", abbreviate(sql)),
        }
    }

    fn is_eof(&self) -> bool {
        self.packet.first() == Some(&0xFE) && self.packet.len() < 9
    }

    fn write_packet(&mut self, payload: &[u8]) -> Result<()> {
        if payload.len() >= 0xFF_FFFF {
            bail!("statement too long for one packet");
        }
        let len = payload.len() as u32;
        let mut frame = Vec::with_capacity(payload.len() + 4);
        frame.extend_from_slice(&len.to_le_bytes()[..3]);
        frame.push(self.seq);
        frame.extend_from_slice(payload);
        self.seq = self.seq.wrapping_add(1);
        self.writer
            .write_all(&frame)
            .context("sending to the server")?;
        Ok(())
    }

    fn read_packet(&mut self) -> Result<()> {
        let mut header = [0u8; 4];
        self.reader
            .read_exact(&mut header)
            .context("reading from the server")?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], 0]) as usize;
        self.seq = header[3].wrapping_add(1);
        self.packet.resize(len, 0);
        self.reader
            .read_exact(&mut self.packet)
            .context("reading from the server")?;
        Ok(())
    }
}

/// A length-encoded integer and the bytes it took.
fn lenenc_int(buf: &[u8]) -> Result<(u64, usize)> {
    let first = *buf.first().context("empty length-encoded integer")?;
    let take = |n: usize| -> Result<u64> {
        let bytes = buf.get(1..1 + n).context("short length-encoded integer")?;
        let mut le = [0u8; 8];
        le[..n].copy_from_slice(bytes);
        Ok(u64::from_le_bytes(le))
    };
    Ok(match first {
        0..=0xFA => (u64::from(first), 1),
        0xFC => (take(2)?, 3),
        0xFD => (take(3)?, 4),
        0xFE => (take(8)?, 9),
        _ => bail!("bad length-encoded integer prefix {first:#x}"),
    })
}

/// The code and message of an ERR packet: `[0xFF][code:2]['#'][state:5][message]`.
fn error_text(packet: &[u8]) -> String {
    format!("error {}: {}", error_code(packet), error_message(packet))
}

fn error_code(packet: &[u8]) -> u16 {
    packet
        .get(1..3)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .unwrap_or(0)
}

fn error_message(packet: &[u8]) -> String {
    let message = if packet.get(3) == Some(&b'#') {
        packet.get(9..)
    } else {
        packet.get(3..)
    };
    String::from_utf8_lossy(message.unwrap_or_default()).into_owned()
}

fn abbreviate(sql: &str) -> String {
    sql.chars().take(120).collect()
}

/// Quotes a string literal for SQL text (backslash and quote escaped).
pub fn quote(text: &[u8]) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for &b in text {
        match b {
            b'\'' => out.push_str("''"),
            b'\\' => out.push_str("\\\\"),
            0 => out.push_str("\\0"),
            _ => out.push(char::from(b)),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lenenc() {
        assert_eq!(lenenc_int(&[5]).unwrap(), (5, 1));
        assert_eq!(lenenc_int(&[0xFC, 0x34, 0x12]).unwrap(), (0x1234, 3));
        assert_eq!(lenenc_int(&[0xFD, 1, 0, 1]).unwrap(), (0x10001, 4));
        assert!(lenenc_int(&[0xFC, 1]).is_err());
        assert!(lenenc_int(&[0xFF]).is_err());
    }

    #[test]
    fn quoting() {
        assert_eq!(quote(b"a'b\\c"), "'a''b\\\\c'");
    }

    #[test]
    fn error_packets() {
        let mut p = vec![0xFF, 0x28, 0x04, b'#'];
        p.extend_from_slice(b"42000bad");
        assert_eq!(error_text(&p), "error 1064: bad");
    }
}
