//! A small blocking client for talking to a server byte by byte in tests.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long a read waits for a reply before giving up.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Client {
    stream: TcpStream,
}

/// What a read returned and why it stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub bytes: Vec<u8>,
    pub end: ReplyEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyEnd {
    /// The bytes end with the suffix that was asked for.
    Suffix,
    /// The server closed the connection (a reset counts as a close).
    Eof,
    /// Nothing more arrived before the deadline.
    Timeout,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> io::Result<Client> {
        Client::from_stream(TcpStream::connect(addr)?)
    }

    pub fn from_stream(stream: TcpStream) -> io::Result<Client> {
        stream.set_nodelay(true)?;
        Ok(Client { stream })
    }

    /// Writes all of `bytes` in one call.
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Reads until the bytes received end with `suffix`; an error on close or timeout.
    pub fn read_until_suffix(&mut self, suffix: &[u8]) -> io::Result<Vec<u8>> {
        let reply = self.read_reply_until_suffix(suffix, REPLY_TIMEOUT)?;
        match reply.end {
            ReplyEnd::Suffix => Ok(reply.bytes),
            end => Err(io::Error::other(format!(
                "{end:?} before {:?}; got {:?}",
                crate::escape(suffix),
                crate::escape(&reply.bytes)
            ))),
        }
    }

    /// Reads until the server closes the connection; an error on timeout.
    pub fn read_to_eof(&mut self) -> io::Result<Vec<u8>> {
        let reply = self.read_reply_to_eof(REPLY_TIMEOUT)?;
        match reply.end {
            ReplyEnd::Eof => Ok(reply.bytes),
            end => Err(io::Error::other(format!(
                "{end:?} waiting for close; got {:?}",
                crate::escape(&reply.bytes)
            ))),
        }
    }

    /// Sends `request` and reads until the reply ends with `suffix`.
    pub fn request(&mut self, request: &[u8], suffix: &[u8]) -> io::Result<Vec<u8>> {
        self.send(request)?;
        self.read_until_suffix(suffix)
    }

    pub fn read_reply_until_suffix(
        &mut self,
        suffix: &[u8],
        timeout: Duration,
    ) -> io::Result<Reply> {
        self.read_reply_until(|bytes| bytes.ends_with(suffix), timeout)
    }

    pub fn read_reply_to_eof(&mut self, timeout: Duration) -> io::Result<Reply> {
        self.read_reply_until(|_| false, timeout)
    }

    /// Reads until `done(bytes received so far)` holds (`ReplyEnd::Suffix`), the
    /// server closes, or `timeout` passes.
    pub fn read_reply_until(
        &mut self,
        done: impl Fn(&[u8]) -> bool,
        timeout: Duration,
    ) -> io::Result<Reply> {
        let deadline = Instant::now() + timeout;
        let mut bytes = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if done(&bytes) {
                return Ok(Reply {
                    bytes,
                    end: ReplyEnd::Suffix,
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Reply {
                    bytes,
                    end: ReplyEnd::Timeout,
                });
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Ok(Reply {
                        bytes,
                        end: ReplyEnd::Eof,
                    })
                }
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(Reply {
                        bytes,
                        end: ReplyEnd::Timeout,
                    });
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                    ) =>
                {
                    return Ok(Reply {
                        bytes,
                        end: ReplyEnd::Eof,
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }
}
