//! A SQL connection's connection to another shard's primary (`super::sql_shards`):
//! opened and logged in as the client's user with the proof its login left, then one
//! command at a time, its reply read through or relayed as it comes.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use kura_mysql::client::{self as upstream_client, ReplyEnd, Step};
use kura_mysql::{self as my, CapabilityFlags, PacketReader, StatusFlags, NONCE_BYTES};

use super::sql_shards::Replies;

/// How long opening and logging in to another primary may take.
const LOGIN_WITHIN: Duration = Duration::from_secs(5);
/// The largest packet taken from another primary.
const PACKET_MAX: usize = 1 << 30;

/// A command packet's payload: its byte, then `body`.
pub(super) fn command(byte: u8, body: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(body.len() + 1);
    payload.push(byte);
    payload.extend_from_slice(body);
    payload
}

/// A logged-in connection to another shard's primary.
pub(super) struct Upstream {
    pub(super) addr: String,
    stream: TcpStream,
    reader: PacketReader,
    buf: Box<[u8]>,
    pub(super) caps: CapabilityFlags,
    pub(super) db: Option<String>,
}

impl Upstream {
    pub(super) fn open(
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
    pub(super) fn packet(&mut self) -> io::Result<(u8, Vec<u8>)> {
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

    pub(super) fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        let mut seq = 0u8;
        let mut out = Vec::with_capacity(payload.len() + 4);
        my::write_packet(&mut out, &mut seq, payload);
        self.stream.write_all(&out)
    }

    /// Sends a command and reads its reply through: its final status, or the
    /// other primary's error as text.
    pub(super) fn quiet(&mut self, payload: &[u8]) -> io::Result<Result<StatusFlags, String>> {
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
    pub(super) fn relay(
        &mut self,
        payload: &[u8],
        more: bool,
        out: &mut dyn Replies,
    ) -> Result<Option<StatusFlags>, (io::Error, bool)> {
        self.send(payload).map_err(|e| (e, false))?;
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

    /// Sends a COM_STMT_PREPARE (`payload`) and relays its reply with the statement's
    /// id made `local`: the id on the other primary, or None if it refused (its
    /// error relayed); or the failure and whether part of the reply went.
    pub(super) fn relay_prepare(
        &mut self,
        payload: &[u8],
        local: u32,
        out: &mut dyn Replies,
    ) -> Result<Option<u32>, (io::Error, bool)> {
        self.send(payload).map_err(|e| (e, false))?;
        let (_, mut first) = self.packet().map_err(|e| (e, false))?;
        let bad = || io::Error::new(io::ErrorKind::InvalidData, "a prepare's reply out of place");
        if first.first() == Some(&0xff) {
            out.packet(&first).map_err(|e| (e, true))?;
            return Ok(None);
        }
        if first.first() != Some(&0x00) || first.len() < 9 {
            return Err((bad(), false));
        }
        let remote = u32::from_le_bytes([first[1], first[2], first[3], first[4]]);
        let columns = usize::from(u16::from_le_bytes([first[5], first[6]]));
        let params = usize::from(u16::from_le_bytes([first[7], first[8]]));
        first[1..5].copy_from_slice(&local.to_le_bytes());
        out.packet(&first).map_err(|e| (e, true))?;
        let eof = usize::from(!self.caps.contains(CapabilityFlags::CLIENT_DEPRECATE_EOF));
        let follow = |n: usize| if n > 0 { n + eof } else { 0 };
        for _ in 0..follow(params) + follow(columns) {
            let (_, p) = self.packet().map_err(|e| (e, true))?;
            out.packet(&p).map_err(|e| (e, true))?;
        }
        Ok(Some(remote))
    }
}
