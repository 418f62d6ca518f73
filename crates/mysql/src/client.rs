//! The client side of a login and of a query's reply, for a server that passes a
//! statement on to another server (a cluster node forwarding to the shard that holds
//! a table) and relays the reply.
//!
//! Login: [`parse_greeting`] reads the other server's greeting, [`login`] writes a
//! HandshakeResponse41 answering `mysql_native_password` with [`answer_with_proof`],
//! from the proof a client's own login left ([`native_password_proof`]), so the
//! forwarding server logs in as its client without knowing the password.
//!
//! Reply: [`ReplyEnd`] follows a COM_QUERY reply packet by packet (OK, ERR, or a
//! result set of column count, definitions, rows and its end, then further results
//! while the server says more exist) and says when it ends.

use mysql_common::constants::{CapabilityFlags, StatusFlags};
use mysql_common::packets::{AuthPlugin, HandshakeResponse};
use mysql_common::proto::MySerialize;
use sha1::{Digest, Sha1};

use crate::{ProtocolError, NONCE_BYTES};

/// What a login needs of a server's greeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    pub nonce: Vec<u8>,
    pub capabilities: CapabilityFlags,
}

/// Reads a server's greeting (an ERR packet in its place is the server's refusal,
/// returned as its message): HandshakeV10, read here rather than by mysql_common,
/// whose reader overflows on some malformed greetings (the `mysql_packets` fuzz
/// target found one).
pub fn parse_greeting(payload: &[u8]) -> Result<Greeting, String> {
    if payload.first() == Some(&0xff) {
        return Err(error_message(payload));
    }
    let bad = || "a greeting that does not parse".to_string();
    if payload.first() != Some(&10) {
        return Err(bad());
    }
    let version_end = payload[1..].iter().position(|&b| b == 0).ok_or_else(bad)? + 1;
    // The connection id (4), the nonce's first 8 bytes, a filler.
    let at = version_end + 1 + 4;
    let first = payload.get(at..at + 8).ok_or_else(bad)?;
    let at = at + 8 + 1;
    let low = payload.get(at..at + 2).ok_or_else(bad)?;
    let mut bits = u32::from(u16::from_le_bytes([low[0], low[1]]));
    let mut nonce = first.to_vec();
    // The collation (1), status (2), the capabilities' upper half, the nonce's
    // length, 10 reserved bytes, then the nonce's rest.
    if let Some(high) = payload.get(at + 5..at + 7) {
        bits |= u32::from(u16::from_le_bytes([high[0], high[1]])) << 16;
        let length = usize::from(*payload.get(at + 7).ok_or_else(bad)?);
        let rest_at = at + 8 + 10;
        let rest_len = length.saturating_sub(8).max(13);
        let rest = payload.get(rest_at..).unwrap_or_default();
        let rest = &rest[..rest.len().min(rest_len)];
        nonce.extend(rest.iter().take_while(|&&b| b != 0));
    }
    Ok(Greeting {
        nonce,
        capabilities: CapabilityFlags::from_bits_truncate(bits),
    })
}

/// An ERR packet's code and message, as text.
pub fn error_message(payload: &[u8]) -> String {
    let code = payload
        .get(1..3)
        .map_or(0, |c| u16::from_le_bytes([c[0], c[1]]));
    let text = payload.get(3..).unwrap_or_default();
    let text = text
        .strip_prefix(b"#")
        .map_or(text, |t| t.get(5..).unwrap_or_default());
    format!("{code}: {}", String::from_utf8_lossy(text))
}

/// A HandshakeResponse41 for `user` with `auth` (the native password answer, empty
/// for no password), asking for `capabilities`.
pub fn login(
    capabilities: CapabilityFlags,
    user: &str,
    auth: &[u8],
    database: Option<&str>,
) -> Vec<u8> {
    let response = HandshakeResponse::new(
        Some(auth),
        (8, 0, 36),
        Some(user.as_bytes()),
        database.map(str::as_bytes),
        Some(AuthPlugin::MysqlNativePassword),
        capabilities,
        None,
        crate::framing::MAX_FRAME_PAYLOAD as u32,
    );
    let mut out = Vec::new();
    response.serialize(&mut out);
    out
}

/// `SHA1(password)`, the proof a client's `mysql_native_password` answer carries for
/// `nonce` when it matches `stored` (`SHA1(SHA1(password))`); None if it does not.
pub fn native_password_proof(
    nonce: &[u8; NONCE_BYTES],
    stored: &[u8; NONCE_BYTES],
    response: &[u8],
) -> Option<[u8; NONCE_BYTES]> {
    let response = <&[u8; NONCE_BYTES]>::try_from(response).ok()?;
    let mask = sha1_of(&[nonce, stored]);
    let mut proof = [0u8; NONCE_BYTES];
    for (out, (r, m)) in proof.iter_mut().zip(response.iter().zip(mask)) {
        *out = r ^ m;
    }
    let diff = sha1_of(&[&proof])
        .iter()
        .zip(stored)
        .fold(0u8, |diff, (a, b)| diff | (a ^ b));
    (diff == 0).then_some(proof)
}

/// The `mysql_native_password` answer for `nonce` from `proof` (`SHA1(password)`):
/// `proof XOR SHA1(nonce ‖ SHA1(proof))`.
pub fn answer_with_proof(nonce: &[u8], proof: &[u8; NONCE_BYTES]) -> [u8; NONCE_BYTES] {
    let stored = sha1_of(&[proof]);
    let mask = sha1_of(&[nonce, &stored]);
    let mut out = [0u8; NONCE_BYTES];
    for (o, (p, m)) in out.iter_mut().zip(proof.iter().zip(mask)) {
        *o = p ^ m;
    }
    out
}

fn sha1_of(parts: &[&[u8]]) -> [u8; NONCE_BYTES] {
    let mut hasher = Sha1::new();
    for p in parts {
        hasher.update(p);
    }
    hasher.finalize().into()
}

/// A length-encoded integer at the start of `bytes`: its value and length.
fn lenenc(bytes: &[u8]) -> Option<(u64, usize)> {
    let (&first, rest) = bytes.split_first()?;
    let take = |n: usize| -> Option<(u64, usize)> {
        let b = rest.get(..n)?;
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(b);
        Some((u64::from_le_bytes(v), n + 1))
    };
    match first {
        0xfc => take(2),
        0xfd => take(3),
        0xfe => take(8),
        0xfb | 0xff => None,
        n => Some((u64::from(n), 1)),
    }
}

/// Where an OK packet's (header 0x00, or 0xfe ending rows under
/// `CLIENT_DEPRECATE_EOF`) status flags are.
fn ok_status_at(payload: &[u8]) -> Option<usize> {
    let (_, a) = lenenc(payload.get(1..)?)?;
    let (_, b) = lenenc(payload.get(1 + a..)?)?;
    let at = 1 + a + b;
    (payload.len() >= at + 2).then_some(at)
}

/// Where an ending packet's status flags are: an OK's, or an old EOF's (0xfe,
/// warnings, status).
fn end_status_at(payload: &[u8], deprecate_eof: bool) -> Option<usize> {
    match payload.first()? {
        0x00 => ok_status_at(payload),
        0xfe if deprecate_eof => ok_status_at(payload),
        0xfe => (payload.len() >= 5).then_some(3),
        _ => None,
    }
}

/// An ending packet's status flags (None: not an ending packet).
pub fn end_status(payload: &[u8], deprecate_eof: bool) -> Option<StatusFlags> {
    let at = end_status_at(payload, deprecate_eof)?;
    Some(StatusFlags::from_bits_truncate(u16::from_le_bytes([
        payload[at],
        payload[at + 1],
    ])))
}

/// Sets or clears `SERVER_MORE_RESULTS_EXISTS` in an ending packet, for a reply
/// that is one of several a multi-statement query gets.
pub fn set_more_results(payload: &mut [u8], deprecate_eof: bool, more: bool) {
    let Some(at) = end_status_at(payload, deprecate_eof) else {
        return;
    };
    let mut status =
        StatusFlags::from_bits_truncate(u16::from_le_bytes([payload[at], payload[at + 1]]));
    status.set(StatusFlags::SERVER_MORE_RESULTS_EXISTS, more);
    payload[at..at + 2].copy_from_slice(&status.bits().to_le_bytes());
}

/// Follows a COM_QUERY reply.
#[derive(Debug, Clone)]
pub struct ReplyEnd {
    deprecate_eof: bool,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Columns(u64),
    ColumnsEof,
    Rows,
}

/// What a reply's packet was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// More packets of this reply follow.
    More,
    /// The reply ended with this packet: its status, or None after an error.
    Ended(Option<StatusFlags>),
    /// The server asks for a local file (LOAD DATA LOCAL), which the reply's reader
    /// must handle.
    LocalFile,
}

impl ReplyEnd {
    pub fn new(capabilities: CapabilityFlags) -> ReplyEnd {
        ReplyEnd {
            deprecate_eof: capabilities.contains(CapabilityFlags::CLIENT_DEPRECATE_EOF),
            state: State::Start,
        }
    }

    /// Whether ending packets are OK packets (`CLIENT_DEPRECATE_EOF`).
    pub fn deprecate_eof(&self) -> bool {
        self.deprecate_eof
    }

    /// Takes the reply's next packet.
    pub fn step(&mut self, payload: &[u8]) -> Result<Step, ProtocolError> {
        let bad = || ProtocolError::Malformed {
            what: "a reply packet out of place",
        };
        let first = *payload.first().ok_or_else(bad)?;
        let ended = |this: &mut ReplyEnd, status: Option<StatusFlags>| {
            this.state = State::Start;
            match status {
                Some(s) if s.contains(StatusFlags::SERVER_MORE_RESULTS_EXISTS) => Step::More,
                s => Step::Ended(s),
            }
        };
        Ok(match self.state {
            State::Start => match first {
                0x00 => {
                    let status = end_status(payload, self.deprecate_eof).ok_or_else(bad)?;
                    ended(self, Some(status))
                }
                0xff => ended(self, None),
                0xfb => Step::LocalFile,
                _ => {
                    let (n, _) = lenenc(payload).ok_or_else(bad)?;
                    self.state = State::Columns(n);
                    Step::More
                }
            },
            State::Columns(n) => {
                self.state = match n.saturating_sub(1) {
                    0 if self.deprecate_eof => State::Rows,
                    0 => State::ColumnsEof,
                    left => State::Columns(left),
                };
                Step::More
            }
            State::ColumnsEof => {
                self.state = State::Rows;
                Step::More
            }
            State::Rows => match first {
                0xfe if payload.len() < 9 => {
                    let status = end_status(payload, self.deprecate_eof).ok_or_else(bad)?;
                    ended(self, Some(status))
                }
                0xff => ended(self, None),
                _ => Step::More,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{column_count, column_def, end_of_columns, end_of_rows, err, ok, text_row};
    use crate::{native_password_hash, ColumnDef, Value};

    #[test]
    fn a_proof_logs_in_again_for_another_nonce() {
        let stored = native_password_hash(b"secret");
        let first = *b"abcdefgh0123456789AB";
        let answer =
            mysql_common::auth::plugins::mysql_native_password::scramble_native(&first, b"secret")
                .unwrap();
        let proof = native_password_proof(&first, &stored, &answer).unwrap();
        assert!(native_password_proof(&first, &stored, &[0; 20]).is_none());
        let second = *b"ZYXWVUTS9876543210zy";
        let again = answer_with_proof(&second, &proof);
        assert!(crate::native_password_matches(
            &second,
            Some(&stored),
            &again
        ));
    }

    #[test]
    fn greeting_and_login_read_as_the_server_reads_them() {
        let nonce = *b"abcdefgh0123456789AB";
        let g = parse_greeting(&crate::greeting(5, &nonce, false)).unwrap();
        assert_eq!(g.nonce, nonce.to_vec());
        assert_eq!(g.capabilities, crate::server_capabilities());
        let tls = parse_greeting(&crate::greeting(5, &nonce, true)).unwrap();
        assert!(tls.capabilities.contains(CapabilityFlags::CLIENT_SSL));
        // Cut before the capabilities' lower half ends (a greeting may end there).
        for cut in 0..1 + crate::SERVER_VERSION.len() + 1 + 4 + 8 + 1 + 2 {
            assert!(parse_greeting(&crate::greeting(5, &nonce, false)[..cut]).is_err());
        }
        let caps = crate::server_capabilities();
        let payload = login(caps, "app", &[7; 20], Some("d"));
        let parsed = crate::parse_login(&payload, false).unwrap();
        assert_eq!(parsed.user, "app");
        assert_eq!(parsed.auth_response, vec![7; 20]);
        assert_eq!(parsed.database.as_deref(), Some("d"));
        let refused = err(1105, b"HY000", "no primary");
        assert_eq!(parse_greeting(&refused).unwrap_err(), "1105: no primary");
    }

    #[test]
    fn follows_every_kind_of_reply_to_its_end() {
        for deprecate in [false, true] {
            let caps = if deprecate {
                CapabilityFlags::CLIENT_DEPRECATE_EOF
            } else {
                CapabilityFlags::empty()
            };
            let more = StatusFlags::SERVER_MORE_RESULTS_EXISTS;
            let none = StatusFlags::empty();
            let column = column_def(&ColumnDef {
                schema: "",
                table: "",
                org_table: "",
                name: "a",
                org_name: "",
                collation: 63,
                length: 1,
                ty: crate::ColumnType::MYSQL_TYPE_BLOB,
                flags: crate::ColumnFlags::empty(),
                decimals: 0,
            });
            let mut packets = vec![column_count(1), column];
            packets.extend(end_of_columns(caps, none, 0));
            packets.push(text_row(&[Value::Bytes(b"\xfe\x00")]));
            packets.push(end_of_rows(caps, more, 0));
            packets.push(ok(1, 0, more, 0, ""));
            packets.push(ok(1, 0, none, 0, ""));
            let mut reply = ReplyEnd::new(caps);
            let steps: Vec<Step> = packets.iter().map(|p| reply.step(p).unwrap()).collect();
            let last = steps.len() - 1;
            assert!(steps[..last].iter().all(|s| *s == Step::More), "{steps:?}");
            assert_eq!(steps[last], Step::Ended(Some(none)));
            let mut end = end_of_rows(caps, none, 0);
            set_more_results(&mut end, deprecate, true);
            assert_eq!(end_status(&end, deprecate), Some(more));
            let mut reply = ReplyEnd::new(caps);
            assert_eq!(
                reply.step(&err(1146, b"42S02", "no table")).unwrap(),
                Step::Ended(None)
            );
        }
    }
}
