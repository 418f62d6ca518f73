//! The requests kura-bench sends and the replies it parses: memcached's text
//! protocol (`get` of one key or many, `set`), its binary protocol (`GET`, a
//! multi-get as libmemcached sends it: `GETKQ` for every key but the last, then
//! `GETK`; `SET`), and the same three requests in Redis's RESP (`GET`, `MGET`,
//! `SET`) so Redis can run the same workloads. [`Wire`] picks one per backend.
//!
//! No I/O here: requests are appended to a buffer and replies are parsed from one.
//! A reply that has not fully arrived parses as `Ok(None)`, never as an error. This
//! is a load generator's parser, not a conformance checker: it checks just enough
//! framing to stay in step with the server and to count misses and error replies.

use std::fmt;

/// What the client expects back for the request it sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// `VALUE ...` blocks then `END`.
    Values,
    /// One status line (`STORED`, `DELETED`, `OK`, ...).
    Status,
}

/// A complete reply, reduced to what the benchmark counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A retrieval reply with this many `VALUE` blocks.
    Values { hits: u32 },
    /// `STORED`, `DELETED`, `OK`, `TOUCHED`.
    Ok,
    /// `NOT_STORED`, `NOT_FOUND`, `EXISTS`: a well-formed refusal.
    Refused,
    /// `ERROR`, `CLIENT_ERROR ...`, `SERVER_ERROR ...`.
    Error,
}

/// The reply stream is not memcached's text protocol: the connection is out of step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramingError(pub String);

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unexpected reply from server: {}", self.0)
    }
}

impl std::error::Error for FramingError {}

/// The protocol a connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Memcached,
    /// memcached's binary protocol.
    MemcachedBinary,
    Redis,
}

impl Wire {
    pub fn encode_get(self, buf: &mut Vec<u8>, key: &[u8]) {
        match self {
            Wire::Memcached => encode_get(buf, key),
            Wire::MemcachedBinary => binary_request(buf, BINARY_GET, &[], key, &[]),
            Wire::Redis => resp_command(buf, &[b"GET", key]),
        }
    }

    pub fn encode_multi_get(self, buf: &mut Vec<u8>, keys: &[Vec<u8>]) {
        match self {
            Wire::Memcached => encode_multi_get(buf, keys.iter().map(|k| k.as_slice())),
            Wire::MemcachedBinary => {
                for (i, key) in keys.iter().enumerate() {
                    let last = i + 1 == keys.len();
                    let opcode = if last { BINARY_GETK } else { BINARY_GETKQ };
                    binary_request(buf, opcode, &[], key, &[]);
                }
            }
            Wire::Redis => {
                let mut parts: Vec<&[u8]> = vec![b"MGET"];
                parts.extend(keys.iter().map(|k| k.as_slice()));
                resp_command(buf, &parts);
            }
        }
    }

    pub fn encode_set(self, buf: &mut Vec<u8>, key: &[u8], value: &[u8]) {
        match self {
            Wire::Memcached => encode_set(buf, key, value),
            Wire::MemcachedBinary => binary_request(buf, BINARY_SET, &[0; 8], key, value),
            Wire::Redis => resp_command(buf, &[b"SET", key, value]),
        }
    }

    /// One complete reply from the front of `buf` and its length, or `None`.
    pub fn parse_reply(
        self,
        buf: &[u8],
        expect: Expect,
    ) -> Result<Option<(Reply, usize)>, FramingError> {
        match self {
            Wire::Memcached => parse_reply(buf, expect),
            Wire::MemcachedBinary => parse_binary(buf, expect),
            Wire::Redis => parse_resp(buf),
        }
    }

    /// The values in a complete retrieval reply (misses left out).
    pub fn values(self, reply: &[u8]) -> Result<Vec<&[u8]>, FramingError> {
        match self {
            Wire::Memcached => values(reply),
            Wire::MemcachedBinary => binary_values(reply),
            Wire::Redis => resp_values(reply),
        }
    }
}

const BINARY_GET: u8 = 0x00;
const BINARY_SET: u8 = 0x01;
const BINARY_GETK: u8 = 0x0c;
const BINARY_GETKQ: u8 = 0x0d;
const BINARY_HEADER_BYTES: usize = 24;

/// Appends a binary request packet (opaque and CAS 0).
fn binary_request(buf: &mut Vec<u8>, opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) {
    let body = (extras.len() + key.len() + value.len()) as u32;
    buf.extend_from_slice(&[0x80, opcode]);
    buf.extend_from_slice(&(key.len() as u16).to_be_bytes());
    buf.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    buf.extend_from_slice(&body.to_be_bytes());
    buf.extend_from_slice(&[0; 12]);
    buf.extend_from_slice(extras);
    buf.extend_from_slice(key);
    buf.extend_from_slice(value);
}

/// The binary response packets at the front of `buf`: (opcode, status, extras
/// length, key length, whole packet), while they are complete.
fn binary_packets(
    buf: &[u8],
) -> impl Iterator<Item = Result<(u8, u16, usize, usize, &[u8]), FramingError>> + '_ {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let rest = &buf[pos..];
        if rest.len() < BINARY_HEADER_BYTES {
            return None;
        }
        if rest[0] != 0x81 {
            pos = buf.len();
            return Some(Err(FramingError(format!("binary magic 0x{:02x}", rest[0]))));
        }
        let body = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]) as usize;
        let total = BINARY_HEADER_BYTES + body;
        let packet = rest.get(..total)?;
        pos += total;
        let key_len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        let status = u16::from_be_bytes([rest[6], rest[7]]);
        Some(Ok((rest[1], status, usize::from(rest[4]), key_len, packet)))
    })
}

/// One complete binary reply: a status packet, or a get's packets (quiet hits, then
/// the answer to the last, non-quiet key).
fn parse_binary(buf: &[u8], expect: Expect) -> Result<Option<(Reply, usize)>, FramingError> {
    let mut used = 0;
    let mut hits = 0;
    for packet in binary_packets(buf) {
        let (opcode, status, _, _, bytes) = packet?;
        used += bytes.len();
        let reply = match (expect, status) {
            (Expect::Values, _) if opcode == BINARY_GETKQ => {
                hits += u32::from(status == 0);
                continue;
            }
            (Expect::Values, 0) => Reply::Values { hits: hits + 1 },
            (Expect::Values, 1) => Reply::Values { hits },
            (Expect::Status, 0) => Reply::Ok,
            // Not found, exists, not stored.
            (Expect::Status, 1 | 2 | 5) => Reply::Refused,
            _ => Reply::Error,
        };
        return Ok(Some((reply, used)));
    }
    Ok(None)
}

/// The values of the hits in a complete binary get reply.
fn binary_values(reply: &[u8]) -> Result<Vec<&[u8]>, FramingError> {
    let mut found = Vec::new();
    for packet in binary_packets(reply) {
        let (_, status, extras, key, bytes) = packet?;
        if status == 0 {
            found.push(&bytes[BINARY_HEADER_BYTES + extras + key..]);
        }
    }
    Ok(found)
}

/// Appends a RESP array of bulk strings: `*<n>\r\n` then `$<len>\r\n<part>\r\n` each.
fn resp_command(buf: &mut Vec<u8>, parts: &[&[u8]]) {
    buf.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for part in parts {
        buf.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        buf.extend_from_slice(part);
        buf.extend_from_slice(b"\r\n");
    }
}

/// One RESP element at the front of `buf`: its length in bytes and, for bulk
/// strings, whether it held a value; `None` if incomplete.
fn resp_element(buf: &[u8]) -> Result<Option<(Reply, usize)>, FramingError> {
    let Some(end) = line_end(buf) else {
        return Ok(None);
    };
    let line = &buf[..end - 2];
    let number = || -> Result<i64, FramingError> {
        std::str::from_utf8(&line[1..])
            .ok()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| FramingError(String::from_utf8_lossy(line).into_owned()))
    };
    match line.first() {
        Some(b'+') | Some(b':') => Ok(Some((Reply::Ok, end))),
        Some(b'-') => Ok(Some((Reply::Error, end))),
        Some(b'$') => {
            let len = number()?;
            if len < 0 {
                return Ok(Some((Reply::Values { hits: 0 }, end)));
            }
            let total = end + len as usize + 2;
            if buf.len() < total {
                return Ok(None);
            }
            Ok(Some((Reply::Values { hits: 1 }, total)))
        }
        Some(b'*') => {
            let count = number()?;
            let mut pos = end;
            let mut hits = 0;
            for _ in 0..count.max(0) {
                match resp_element(&buf[pos..])? {
                    None => return Ok(None),
                    Some((Reply::Values { hits: h }, used)) => {
                        hits += h;
                        pos += used;
                    }
                    Some((_, used)) => pos += used,
                }
            }
            Ok(Some((Reply::Values { hits }, pos)))
        }
        _ => Err(FramingError(String::from_utf8_lossy(line).into_owned())),
    }
}

fn parse_resp(buf: &[u8]) -> Result<Option<(Reply, usize)>, FramingError> {
    resp_element(buf)
}

/// The non-nil bulk strings of a complete RESP reply (a bulk string or an array).
fn resp_values(reply: &[u8]) -> Result<Vec<&[u8]>, FramingError> {
    let mut found = Vec::new();
    let mut pos = 0;
    let mut remaining = 1i64;
    while remaining > 0 && pos < reply.len() {
        let Some(end) = line_end(&reply[pos..]) else {
            break;
        };
        let line = &reply[pos..pos + end - 2];
        let n: i64 = std::str::from_utf8(&line[1..])
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(-1);
        match line.first() {
            Some(b'*') => {
                remaining += n.max(0);
                pos += end;
            }
            Some(b'$') if n >= 0 => {
                let start = pos + end;
                let stop = start + n as usize;
                found.push(
                    reply
                        .get(start..stop)
                        .ok_or_else(|| FramingError("short bulk".into()))?,
                );
                pos = stop + 2;
            }
            _ => pos += end,
        }
        remaining -= 1;
    }
    Ok(found)
}

/// Appends `get <key>\r\n`.
pub fn encode_get(buf: &mut Vec<u8>, key: &[u8]) {
    buf.extend_from_slice(b"get ");
    buf.extend_from_slice(key);
    buf.extend_from_slice(b"\r\n");
}

/// Appends `get <k1> <k2> ...\r\n`.
pub fn encode_multi_get<'a>(buf: &mut Vec<u8>, keys: impl IntoIterator<Item = &'a [u8]>) {
    buf.extend_from_slice(b"get");
    for key in keys {
        buf.push(b' ');
        buf.extend_from_slice(key);
    }
    buf.extend_from_slice(b"\r\n");
}

/// Appends `set <key> 0 0 <len>\r\n<value>\r\n`.
pub fn encode_set(buf: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    buf.extend_from_slice(b"set ");
    buf.extend_from_slice(key);
    buf.extend_from_slice(b" 0 0 ");
    buf.extend_from_slice(value.len().to_string().as_bytes());
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(value);
    buf.extend_from_slice(b"\r\n");
}

/// Finds the end of the first line: the index just past its `\r\n`.
fn line_end(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n").map(|i| i + 2)
}

/// Parses one status line reply.
fn parse_status(line: &[u8]) -> Result<Reply, FramingError> {
    let line = &line[..line.len() - 2];
    match line {
        b"STORED" | b"DELETED" | b"OK" | b"TOUCHED" => Ok(Reply::Ok),
        b"NOT_STORED" | b"NOT_FOUND" | b"EXISTS" => Ok(Reply::Refused),
        b"ERROR" => Ok(Reply::Error),
        _ if line.starts_with(b"CLIENT_ERROR") || line.starts_with(b"SERVER_ERROR") => {
            Ok(Reply::Error)
        }
        _ => Err(FramingError(String::from_utf8_lossy(line).into_owned())),
    }
}

/// Parses one complete reply from the front of `buf`, returning it and the number of
/// bytes it took, or `None` if more bytes are needed.
pub fn parse_reply(buf: &[u8], expect: Expect) -> Result<Option<(Reply, usize)>, FramingError> {
    match expect {
        Expect::Status => match line_end(buf) {
            None => Ok(None),
            Some(end) => parse_status(&buf[..end]).map(|r| Some((r, end))),
        },
        Expect::Values => {
            let mut pos = 0;
            let mut hits = 0u32;
            loop {
                let rest = &buf[pos..];
                let Some(end) = line_end(rest) else {
                    return Ok(None);
                };
                let line = &rest[..end];
                if line == b"END\r\n" {
                    return Ok(Some((Reply::Values { hits }, pos + end)));
                }
                if line.starts_with(b"VALUE ") {
                    let bytes = value_len(line)?;
                    let block = end + bytes + 2;
                    if rest.len() < block {
                        return Ok(None);
                    }
                    if &rest[end + bytes..block] != b"\r\n" {
                        return Err(FramingError("data block not ended by \\r\\n".into()));
                    }
                    hits += 1;
                    pos += block;
                    continue;
                }
                // An error reply instead of values ends the reply.
                return match parse_status(line)? {
                    Reply::Error => Ok(Some((Reply::Error, pos + end))),
                    _ => Err(FramingError(
                        String::from_utf8_lossy(&line[..line.len() - 2]).into_owned(),
                    )),
                };
            }
        }
    }
}

/// The data blocks of a complete retrieval reply that [`parse_reply`] accepted
/// (pass it exactly the bytes that reply took).
pub fn values(reply: &[u8]) -> Result<Vec<&[u8]>, FramingError> {
    let mut found = Vec::new();
    let mut pos = 0;
    while let Some(end) = line_end(&reply[pos..]) {
        let line = &reply[pos..pos + end];
        if !line.starts_with(b"VALUE ") {
            break;
        }
        let bytes = value_len(line)?;
        let data = pos + end;
        if reply.len() < data + bytes {
            return Err(FramingError("short data block".into()));
        }
        found.push(&reply[data..data + bytes]);
        pos = data + bytes + 2;
    }
    Ok(found)
}

/// The `<bytes>` field of `VALUE <key> <flags> <bytes> [<cas>]\r\n`.
fn value_len(line: &[u8]) -> Result<usize, FramingError> {
    let text = std::str::from_utf8(&line[..line.len() - 2])
        .map_err(|_| FramingError("VALUE line is not UTF-8".into()))?;
    text.split(' ')
        .nth(3)
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| FramingError(format!("bad VALUE line {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expect: Expect, expected: Result<Option<(Reply, usize)>, ()>) {
        let got = parse_reply(input.as_bytes(), expect).map_err(|_| ());
        assert_eq!(got, expected, "input {input:?}");
    }

    #[test]
    fn replies() {
        use Expect::*;
        check("STORED\r\n", Status, Ok(Some((Reply::Ok, 8))));
        check("STORED\r", Status, Ok(None));
        check("NOT_STORED\r\nX", Status, Ok(Some((Reply::Refused, 12))));
        check(
            "SERVER_ERROR out of memory\r\n",
            Status,
            Ok(Some((Reply::Error, 28))),
        );
        check("VALUE\r\n", Status, Err(()));
        check("END\r\n", Values, Ok(Some((Reply::Values { hits: 0 }, 5))));
        check(
            "VALUE k 0 3\r\nabc\r\nEND\r\n",
            Values,
            Ok(Some((Reply::Values { hits: 1 }, 23))),
        );
        check("VALUE k 0 3\r\nabc\r\nEN", Values, Ok(None));
        check("VALUE k 0 3\r\nab", Values, Ok(None));
        check("VALUE k 0 3\r\nabcd\r\nEND\r\n", Values, Err(()));
        check(
            "VALUE a 0 1\r\nx\r\nVALUE b 5 2 77\r\nyz\r\nEND\r\n",
            Values,
            Ok(Some((Reply::Values { hits: 2 }, 41))),
        );
        check("ERROR\r\n", Values, Ok(Some((Reply::Error, 7))));
        check("STORED\r\n", Values, Err(()));
    }

    #[test]
    fn data_blocks() {
        let reply = b"VALUE a 0 1\r\nx\r\nVALUE b 5 2 77\r\nyz\r\nEND\r\n";
        assert_eq!(values(reply), Ok(vec![&b"x"[..], b"yz"]));
        assert_eq!(values(b"END\r\n"), Ok(vec![]));
    }

    #[test]
    fn resp() {
        let r = Wire::Redis;
        let check = |input: &str, expected: Option<(Reply, usize)>| {
            assert_eq!(
                r.parse_reply(input.as_bytes(), Expect::Values),
                Ok(expected),
                "{input:?}"
            );
        };
        check("+OK\r\n", Some((Reply::Ok, 5)));
        check("-ERR x\r\n", Some((Reply::Error, 8)));
        check("$-1\r\n", Some((Reply::Values { hits: 0 }, 5)));
        check("$3\r\nabc\r\n", Some((Reply::Values { hits: 1 }, 9)));
        check("$3\r\nab", None);
        check(
            "*3\r\n$1\r\na\r\n$-1\r\n$2\r\nbc\r\n",
            Some((Reply::Values { hits: 2 }, 24)),
        );
        check("*2\r\n$1\r\na\r\n", None);
        assert!(r.parse_reply(b"?\r\n", Expect::Status).is_err());
        assert_eq!(
            r.values(b"*3\r\n$1\r\na\r\n$-1\r\n$2\r\nbc\r\n"),
            Ok(vec![&b"a"[..], b"bc"])
        );
        assert_eq!(r.values(b"$3\r\nabc\r\n"), Ok(vec![&b"abc"[..]]));
        let mut buf = Vec::new();
        r.encode_set(&mut buf, b"k", b"vv");
        r.encode_multi_get(&mut buf, &[b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(
            buf,
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n*3\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
    }

    /// A response packet as memcached sends it.
    fn packet(opcode: u8, status: u16, key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        binary_request(&mut out, opcode, &[0, 0, 0, 0], key, value);
        out[0] = 0x81;
        out[6..8].copy_from_slice(&status.to_be_bytes());
        out
    }

    #[test]
    fn binary() {
        let wire = Wire::MemcachedBinary;
        let mut request = Vec::new();
        wire.encode_multi_get(&mut request, &[b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(
            (request[1], request[24 + 1 + 1]),
            (BINARY_GETKQ, BINARY_GETK)
        );
        let hit_a = packet(BINARY_GETKQ, 0, b"a", b"va");
        let miss_b = packet(BINARY_GETK, 1, b"b", b"");
        let reply = [hit_a.clone(), miss_b].concat();
        for cut in 0..reply.len() {
            assert_eq!(wire.parse_reply(&reply[..cut], Expect::Values), Ok(None));
        }
        assert_eq!(
            wire.parse_reply(&reply, Expect::Values),
            Ok(Some((Reply::Values { hits: 1 }, reply.len())))
        );
        assert_eq!(wire.values(&reply), Ok(vec![&b"va"[..]]));
        let stored = packet(BINARY_SET, 0, b"", b"");
        assert_eq!(
            wire.parse_reply(&stored, Expect::Status),
            Ok(Some((Reply::Ok, 24 + 4)))
        );
        let too_large = packet(BINARY_SET, 3, b"", b"Too large.");
        assert_eq!(
            wire.parse_reply(&too_large, Expect::Status),
            Ok(Some((Reply::Error, too_large.len())))
        );
        assert!(wire
            .parse_reply(b"END\r\n and more to make 24", Expect::Status)
            .is_err());
    }

    #[test]
    fn encoding() {
        let mut buf = Vec::new();
        encode_set(&mut buf, b"k", b"abc");
        encode_get(&mut buf, b"k");
        encode_multi_get(&mut buf, [&b"a"[..], b"b"]);
        assert_eq!(buf, b"set k 0 0 3\r\nabc\r\nget k\r\nget a b\r\n");
    }
}
