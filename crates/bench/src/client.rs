//! A blocking client over one TCP connection, speaking memcached's text protocol or
//! Redis's RESP (see [`Wire`]).
//!
//! Used where one request at a time is the point (store/fetch, multi-get, the game
//! transaction) and for preloading, where it pipelines a batch of requests and then
//! reads their replies. Not used by the closed-loop driver of the throughput and game
//! workloads, which multiplexes many non-blocking connections per thread (see
//! `driver.rs`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::proto::{Expect, Reply, Wire};

/// A blocking socket, plain or with TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// One blocking connection with its read buffer.
pub struct Client {
    stream: Stream,
    inbuf: Vec<u8>,
    start: usize,
    outbuf: Vec<u8>,
    wire: Wire,
}

impl Client {
    pub fn connect(addr: SocketAddr, wire: Wire) -> Result<Client> {
        Client::connect_tls(addr, wire, None)
    }

    /// As [`Client::connect`], over TLS when `tls` is given.
    pub fn connect_tls(
        addr: SocketAddr,
        wire: Wire,
        tls: Option<&crate::tls::BenchTls>,
    ) -> Result<Client> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        let stream = match tls {
            Some(tls) => {
                let session = tls.handshake(&mut stream)?;
                Stream::Tls(Box::new(rustls::StreamOwned::new(session, stream)))
            }
            None => Stream::Plain(stream),
        };
        Ok(Client {
            stream,
            inbuf: Vec::with_capacity(64 * 1024),
            start: 0,
            outbuf: Vec::new(),
            wire,
        })
    }

    /// Encodes a get of `key`, to be sent by [`Client::flush`] or [`Client::call`].
    pub fn push_get(&mut self, key: &[u8]) {
        self.wire.encode_get(&mut self.outbuf, key);
    }

    /// Encodes one get of all `keys`.
    pub fn push_multi_get(&mut self, keys: &[Vec<u8>]) {
        self.wire.encode_multi_get(&mut self.outbuf, keys);
    }

    /// Encodes a set of `key` to `value`.
    pub fn push_set(&mut self, key: &[u8], value: &[u8]) {
        self.wire.encode_set(&mut self.outbuf, key, value);
    }

    /// Sends everything encoded so far.
    pub fn flush(&mut self) -> Result<()> {
        self.stream
            .write_all(&self.outbuf)
            .and_then(|()| self.stream.flush())
            .context("sending request")?;
        self.outbuf.clear();
        Ok(())
    }

    /// Reads one complete reply.
    pub fn read_reply(&mut self, expect: Expect) -> Result<Reply> {
        self.read_reply_with(expect, |_| {})
    }

    /// `get <key>`: the value, or `None` on a miss.
    pub fn get_value(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.push_get(key);
        self.flush()?;
        let wire = self.wire;
        let mut value = None;
        let mut framing = Ok(());
        let reply = self.read_reply_with(Expect::Values, |bytes| match wire.values(bytes) {
            Ok(values) => value = values.first().map(|v| v.to_vec()),
            Err(e) => framing = Err(e),
        })?;
        framing?;
        match reply {
            Reply::Values { .. } => Ok(value),
            other => bail!("get failed: {other:?}"),
        }
    }

    /// Reads one complete reply, showing its bytes to `inspect` first.
    fn read_reply_with(&mut self, expect: Expect, mut inspect: impl FnMut(&[u8])) -> Result<Reply> {
        loop {
            if let Some((reply, used)) = self.wire.parse_reply(&self.inbuf[self.start..], expect)? {
                inspect(&self.inbuf[self.start..self.start + used]);
                self.start += used;
                if self.start == self.inbuf.len() {
                    self.inbuf.clear();
                    self.start = 0;
                }
                return Ok(reply);
            }
            if self.start > 0 {
                self.inbuf.drain(..self.start);
                self.start = 0;
            }
            let len = self.inbuf.len();
            self.inbuf.resize(len + 64 * 1024, 0);
            let n = self
                .stream
                .read(&mut self.inbuf[len..])
                .context("reading reply")?;
            self.inbuf.truncate(len + n);
            if n == 0 {
                bail!("server closed the connection");
            }
        }
    }

    /// Sends the buffered request and reads its one reply.
    pub fn call(&mut self, expect: Expect) -> Result<Reply> {
        self.flush()?;
        self.read_reply(expect)
    }
}
