//! The slice of memcached's text protocol that kura-bench speaks: `get` (one key or
//! many), `set`, `delete`, `flush_all`, and parsing their replies.
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
    fn encoding() {
        let mut buf = Vec::new();
        encode_set(&mut buf, b"k", b"abc");
        encode_get(&mut buf, b"k");
        encode_multi_get(&mut buf, [&b"a"[..], b"b"]);
        assert_eq!(buf, b"set k 0 0 3\r\nabc\r\nget k\r\nget a b\r\n");
    }
}
