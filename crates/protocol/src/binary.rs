//! memcached's binary protocol, as 1.6.18's `proto_bin.c` speaks it: a request's
//! header and body to a [`Command`], checked in memcached's order, and the bytes of
//! a response.
//!
//! A request is a 24-byte header (magic `0x80`, opcode, key length, extras length,
//! data type, vbucket, body length, opaque, CAS; big-endian), then the body: extras,
//! key, value. How memcached reads one, and so how [`parse`] does:
//! - It waits for the header and then for the extras and the key (even when the body
//!   length says there are fewer bytes); the value is read afterwards.
//! - A magic other than `0x80` closes the connection without a reply.
//! - A key or key plus extras longer than the body: `Unknown command`, then close.
//! - Under SASL, any opcode but the SASL ones and `VERSION` on a connection not yet
//!   authenticated: `Auth failure.`, then close.
//! - A key longer than 250 bytes, or a header whose lengths the opcode does not
//!   allow: `Invalid arguments`, then close.
//! - An unknown opcode: `Unknown command`; memcached then discards as many bytes as
//!   the body length names, counted from after the key (so a body with extras or a
//!   key eats that many bytes of what follows).
//! - `TOUCH`, `GAT*` and `STAT` do not check the body length against the key: what
//!   lies beyond the key is read as the next request.
//! - A value too large for an item: `Too large.`, and the value is discarded.
//!
//! Invariants: [`parse`] never panics; it returns a request only when all of it is
//! in the buffer, and never waits for a value it will discard, so a hostile body
//! length costs no memory.

use crate::Limits;

pub const REQUEST_MAGIC: u8 = 0x80;
pub const RESPONSE_MAGIC: u8 = 0x81;
pub const HEADER_BYTES: usize = 24;

/// memcached's `MAX_SASL_MECH_LEN`.
const SASL_MECHANISM_MAX_BYTES: usize = 32;

/// The opcodes memcached 1.6.18 answers.
pub mod opcode {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// A response's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Success,
    KeyNotFound,
    KeyExists,
    TooLarge,
    InvalidArguments,
    NotStored,
    DeltaBadValue,
    AuthError,
    AuthContinue,
    UnknownCommand,
    OutOfMemory,
    /// Not memcached's: the later protocol's "not supported" (a table key).
    NotSupported,
    /// Not memcached's: the later protocol's "internal error", for Kura's own server
    /// errors (a failed log, a read-only replica, too few replicas).
    Internal,
}

impl Status {
    pub fn code(self) -> u16 {
        match self {
            Status::Success => 0x00,
            Status::KeyNotFound => 0x01,
            Status::KeyExists => 0x02,
            Status::TooLarge => 0x03,
            Status::InvalidArguments => 0x04,
            Status::NotStored => 0x05,
            Status::DeltaBadValue => 0x06,
            Status::AuthError => 0x20,
            Status::AuthContinue => 0x21,
            Status::UnknownCommand => 0x81,
            Status::OutOfMemory => 0x82,
            Status::NotSupported => 0x83,
            Status::Internal => 0x84,
        }
    }

    /// The body memcached's `write_bin_error` sends with this status.
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::Success | Status::AuthContinue => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::DeltaBadValue => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
            Status::NotSupported => b"Not supported",
            Status::Internal => b"Internal error",
        }
    }
}

/// A request header, in host order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    pub body_len: u32,
    pub opaque: u32,
    pub cas: u64,
}

impl Header {
    /// Reads the header at the start of `buf` (at least [`HEADER_BYTES`] long); the
    /// magic is `buf[0]`, which this does not check.
    fn read(buf: &[u8]) -> Option<Header> {
        let h: &[u8; HEADER_BYTES] = buf.get(..HEADER_BYTES)?.try_into().ok()?;
        Some(Header {
            opcode: h[1],
            key_len: u16::from_be_bytes([h[2], h[3]]),
            extras_len: h[4],
            body_len: u32::from_be_bytes([h[8], h[9], h[10], h[11]]),
            opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
            cas: u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]),
        })
    }

    /// Whether memcached answers this opcode only on failure (`*Q`).
    pub fn quiet(&self) -> bool {
        QUIET_OPCODES.contains(&self.opcode)
    }
}

/// The opcodes memcached answers only on failure.
const QUIET_OPCODES: [u8; 14] = {
    use opcode::*;
    [
        SETQ, ADDQ, REPLACEQ, DELETEQ, INCREMENTQ, DECREMENTQ, QUITQ, FLUSHQ, APPENDQ, PREPENDQ,
        GETQ, GETKQ, GATQ, GATKQ,
    ]
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    Set,
    Add,
    Replace,
}

/// A request memcached would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command<'a> {
    /// GET, GETQ, GETK, GETKQ; GAT, GATQ, GATK, GATKQ when `touch` has an exptime.
    Get {
        key: &'a [u8],
        touch: Option<u32>,
        with_key: bool,
    },
    /// TOUCH: the flags and CAS of the item, no value.
    Touch {
        key: &'a [u8],
        exptime: u32,
    },
    /// SET, ADD, REPLACE and their quiet forms. A non-zero header CAS makes any of
    /// them a compare-and-swap.
    Store {
        op: StoreOp,
        key: &'a [u8],
        flags: u32,
        exptime: u32,
        value: &'a [u8],
    },
    /// APPEND, PREPEND and their quiet forms; a non-zero header CAS must match.
    Concat {
        append: bool,
        key: &'a [u8],
        value: &'a [u8],
    },
    Delete {
        key: &'a [u8],
    },
    /// INCREMENT, DECREMENT: on a miss, the counter is created with `initial` unless
    /// `exptime` is `0xffffffff`.
    Arithmetic {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        initial: u64,
        exptime: u32,
    },
    Quit,
    /// FLUSH with its delay (0: now).
    Flush {
        exptime: u32,
    },
    Noop,
    Version,
    /// STAT with its subcommand (the key; empty for all).
    Stat {
        group: &'a [u8],
    },
    SaslListMechs,
    /// SASL_AUTH (`step` false) and SASL_STEP: the mechanism (the key) and its data.
    Sasl {
        step: bool,
        mechanism: &'a [u8],
        data: &'a [u8],
    },
}

/// Where a connection stands with SASL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sasl {
    /// The server has no SASL (memcached without `-S`): SASL opcodes are unknown.
    Off,
    /// SASL is required and this connection has not authenticated.
    Required,
    /// SASL is on and this connection has authenticated.
    Authenticated,
}

/// The outcome of one [`parse`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// Not all of the request is in the buffer yet.
    Incomplete,
    /// Not a request: memcached closes the connection without a word.
    Close,
    /// A request to run; drop `consumed` bytes afterwards.
    Request {
        header: Header,
        command: Command<'a>,
        consumed: usize,
    },
    /// memcached refuses the request. The caller writes [`error`] for `header` and
    /// `status`, deletes `unlink_key` if present (memcached drops the old value of a
    /// `SET` refused as too large), drops `consumed` bytes and then `swallow` more as
    /// they arrive, and closes the connection after the reply if `close`.
    Error {
        header: Header,
        status: Status,
        consumed: usize,
        swallow: usize,
        close: bool,
        unlink_key: Option<&'a [u8]>,
    },
}

/// Parses the first request in `buf`.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits, sasl: Sasl) -> Parsed<'a> {
    let Some(&magic) = buf.first() else {
        return Parsed::Incomplete;
    };
    let Some(header) = Header::read(buf) else {
        return Parsed::Incomplete;
    };
    if magic != REQUEST_MAGIC {
        return Parsed::Close;
    }
    let extras_len = usize::from(header.extras_len);
    let key_len = usize::from(header.key_len);
    let body_len = header.body_len as usize;
    // memcached waits for the extras and the key whatever the body length says.
    let head = HEADER_BYTES + extras_len + key_len;
    if buf.len() < head {
        return Parsed::Incomplete;
    }
    let refuse = |status: Status, swallow: usize, close: bool| Parsed::Error {
        header,
        status,
        consumed: head,
        swallow,
        close,
        unlink_key: None,
    };
    if key_len > body_len || key_len + extras_len > body_len {
        return refuse(Status::UnknownCommand, 0, true);
    }
    if sasl == Sasl::Required
        && !matches!(
            header.opcode,
            opcode::SASL_LIST_MECHS | opcode::SASL_AUTH | opcode::SASL_STEP | opcode::VERSION
        )
    {
        return refuse(Status::AuthError, 0, true);
    }
    if key_len > limits.key_max_bytes {
        return refuse(Status::InvalidArguments, 0, true);
    }
    let extras = &buf[HEADER_BYTES..HEADER_BYTES + extras_len];
    let key = &buf[HEADER_BYTES + extras_len..head];
    // The bytes after the key that the body length names.
    let value_len = body_len - extras_len - key_len;
    let invalid = refuse(Status::InvalidArguments, 0, true);
    let done = |command: Command<'a>, consumed: usize| Parsed::Request {
        header,
        command,
        consumed,
    };
    use opcode::*;
    match header.opcode {
        VERSION | NOOP | QUIT | QUITQ | SASL_LIST_MECHS => {
            if extras_len != 0 || key_len != 0 || body_len != 0 {
                return invalid;
            }
            let command = match header.opcode {
                VERSION => Command::Version,
                NOOP => Command::Noop,
                SASL_LIST_MECHS if sasl == Sasl::Off => {
                    return refuse(Status::UnknownCommand, 0, false);
                }
                SASL_LIST_MECHS => Command::SaslListMechs,
                _ => Command::Quit,
            };
            done(command, head)
        }
        FLUSH | FLUSHQ => {
            if key_len != 0 || body_len != extras_len || !(extras_len == 0 || extras_len == 4) {
                return invalid;
            }
            let exptime = if extras_len == 4 {
                be_u32(extras, 0)
            } else {
                0
            };
            done(Command::Flush { exptime }, head)
        }
        SET | SETQ | ADD | ADDQ | REPLACE | REPLACEQ => {
            if extras_len != 8 || key_len == 0 {
                return invalid;
            }
            let flags = be_u32(extras, 0);
            let exptime = be_u32(extras, 4);
            let op = match header.opcode {
                SET | SETQ => StoreOp::Set,
                ADD | ADDQ => StoreOp::Add,
                _ => StoreOp::Replace,
            };
            if !limits.item_fits(key_len, flags, value_len.saturating_add(2)) {
                return Parsed::Error {
                    header,
                    status: Status::TooLarge,
                    consumed: head,
                    swallow: value_len,
                    close: false,
                    unlink_key: (op == StoreOp::Set).then_some(key),
                };
            }
            let Some(value) = buf.get(head..head + value_len) else {
                return Parsed::Incomplete;
            };
            let command = Command::Store {
                op,
                key,
                flags,
                exptime,
                value,
            };
            done(command, head + value_len)
        }
        APPEND | APPENDQ | PREPEND | PREPENDQ => {
            if key_len == 0 || extras_len != 0 {
                return invalid;
            }
            if !limits.item_fits(key_len, 0, value_len.saturating_add(2)) {
                return refuse(Status::TooLarge, value_len, false);
            }
            let Some(value) = buf.get(head..head + value_len) else {
                return Parsed::Incomplete;
            };
            let append = matches!(header.opcode, APPEND | APPENDQ);
            done(Command::Concat { append, key, value }, head + value_len)
        }
        GET | GETQ | GETK | GETKQ => {
            if extras_len != 0 || body_len != key_len || key_len == 0 {
                return invalid;
            }
            let with_key = matches!(header.opcode, GETK | GETKQ);
            let command = Command::Get {
                key,
                touch: None,
                with_key,
            };
            done(command, head)
        }
        DELETE | DELETEQ => {
            if key_len == 0 || extras_len != 0 || body_len != key_len {
                return invalid;
            }
            done(Command::Delete { key }, head)
        }
        INCREMENT | INCREMENTQ | DECREMENT | DECREMENTQ => {
            if key_len == 0 || extras_len != 20 || body_len != key_len + extras_len {
                return invalid;
            }
            let command = Command::Arithmetic {
                incr: matches!(header.opcode, INCREMENT | INCREMENTQ),
                key,
                delta: be_u64(extras, 0),
                initial: be_u64(extras, 8),
                exptime: be_u32(extras, 16),
            };
            done(command, head)
        }
        STAT => {
            if extras_len != 0 {
                return invalid;
            }
            done(Command::Stat { group: key }, head)
        }
        TOUCH | GAT | GATQ | GATK | GATKQ => {
            if extras_len != 4 || key_len == 0 {
                return invalid;
            }
            let exptime = be_u32(extras, 0);
            let command = match header.opcode {
                TOUCH => Command::Touch { key, exptime },
                _ => Command::Get {
                    key,
                    touch: Some(exptime),
                    with_key: matches!(header.opcode, GATK | GATKQ),
                },
            };
            done(command, head)
        }
        SASL_AUTH | SASL_STEP => {
            if extras_len != 0 || key_len == 0 {
                return invalid;
            }
            if sasl == Sasl::Off {
                return refuse(Status::UnknownCommand, value_len, false);
            }
            if key_len > SASL_MECHANISM_MAX_BYTES {
                return refuse(Status::InvalidArguments, value_len, false);
            }
            if !limits.item_fits(key_len, 0, value_len.saturating_add(2)) {
                return refuse(Status::OutOfMemory, value_len, false);
            }
            let Some(data) = buf.get(head..head + value_len) else {
                return Parsed::Incomplete;
            };
            let command = Command::Sasl {
                step: header.opcode == SASL_STEP,
                mechanism: key,
                data,
            };
            done(command, head + value_len)
        }
        _ => refuse(Status::UnknownCommand, body_len, false),
    }
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    if let Some(b) = bytes.get(at..at + 4) {
        word.copy_from_slice(b);
    }
    u32::from_be_bytes(word)
}

fn be_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    if let Some(b) = bytes.get(at..at + 8) {
        word.copy_from_slice(b);
    }
    u64::from_be_bytes(word)
}

/// Appends a request packet (what a client sends).
pub fn request(
    out: &mut Vec<u8>,
    opcode: u8,
    opaque: u32,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    let start = out.len();
    response(
        out,
        ReplyTo { opcode, opaque },
        Status::Success,
        cas,
        extras,
        key,
        value,
    );
    out[start] = REQUEST_MAGIC;
}

impl Command<'_> {
    /// Appends this command as the request `opcode` (one of the opcodes that parse to
    /// it: quiet or not, with the key or not) with `opaque` and `cas`.
    pub fn write_to(&self, out: &mut Vec<u8>, opcode: u8, opaque: u32, cas: u64) {
        let mut extras = Vec::new();
        let (key, value): (&[u8], &[u8]) = match *self {
            Command::Get { key, touch, .. } => {
                if let Some(exptime) = touch {
                    extras.extend_from_slice(&exptime.to_be_bytes());
                }
                (key, &[])
            }
            Command::Touch { key, exptime } => {
                extras.extend_from_slice(&exptime.to_be_bytes());
                (key, &[])
            }
            Command::Store {
                key,
                flags,
                exptime,
                value,
                ..
            } => {
                extras.extend_from_slice(&flags.to_be_bytes());
                extras.extend_from_slice(&exptime.to_be_bytes());
                (key, value)
            }
            Command::Concat { key, value, .. } => (key, value),
            Command::Delete { key } => (key, &[]),
            Command::Arithmetic {
                key,
                delta,
                initial,
                exptime,
                ..
            } => {
                extras.extend_from_slice(&delta.to_be_bytes());
                extras.extend_from_slice(&initial.to_be_bytes());
                extras.extend_from_slice(&exptime.to_be_bytes());
                (key, &[])
            }
            Command::Flush { exptime } => {
                if exptime != 0 {
                    extras.extend_from_slice(&exptime.to_be_bytes());
                }
                (&[], &[])
            }
            Command::Stat { group } => (group, &[]),
            Command::Sasl {
                mechanism, data, ..
            } => (mechanism, data),
            Command::Quit | Command::Noop | Command::Version | Command::SaslListMechs => (&[], &[]),
        };
        request(out, opcode, opaque, cas, &extras, key, value);
    }
}

/// What a response answers: the request's opcode and opaque.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyTo {
    pub opcode: u8,
    pub opaque: u32,
}

impl From<&Header> for ReplyTo {
    fn from(header: &Header) -> ReplyTo {
        ReplyTo {
            opcode: header.opcode,
            opaque: header.opaque,
        }
    }
}

/// Appends a response: header, extras, key, value.
pub fn response(
    out: &mut Vec<u8>,
    to: ReplyTo,
    status: Status,
    cas: u64,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
) {
    // Lengths fit: keys are at most 250 bytes, extras 4, values one item.
    let key_len = u16::try_from(key.len()).unwrap_or(u16::MAX);
    let extras_len = u8::try_from(extras.len()).unwrap_or(u8::MAX);
    let body_len = u32::try_from(extras.len() + key.len() + value.len()).unwrap_or(u32::MAX);
    out.reserve(HEADER_BYTES + body_len as usize);
    out.push(RESPONSE_MAGIC);
    out.push(to.opcode);
    out.extend_from_slice(&key_len.to_be_bytes());
    out.push(extras_len);
    out.push(0);
    out.extend_from_slice(&status.code().to_be_bytes());
    out.extend_from_slice(&body_len.to_be_bytes());
    out.extend_from_slice(&to.opaque.to_be_bytes());
    out.extend_from_slice(&cas.to_be_bytes());
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends memcached's error response: the status and its text (or `message`).
pub fn error(out: &mut Vec<u8>, to: ReplyTo, status: Status, message: Option<&[u8]>) {
    let body = message.unwrap_or(status.message());
    response(out, to, status, 0, &[], &[], body);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = vec![REQUEST_MAGIC, opcode];
        out.extend_from_slice(&(key.len() as u16).to_be_bytes());
        out.push(extras.len() as u8);
        out.extend_from_slice(&[0, 0, 0]);
        let body = (extras.len() + key.len() + value.len()) as u32;
        out.extend_from_slice(&body.to_be_bytes());
        out.extend_from_slice(&7u32.to_be_bytes());
        out.extend_from_slice(&0u64.to_be_bytes());
        out.extend_from_slice(extras);
        out.extend_from_slice(key);
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn a_set_is_whole_only_with_its_value() {
        let limits = Limits::default();
        let bytes = request(opcode::SET, &[0, 0, 0, 5, 0, 0, 0, 0], b"k", b"value");
        for cut in 0..bytes.len() {
            assert_eq!(parse(&bytes[..cut], &limits, Sasl::Off), Parsed::Incomplete);
        }
        match parse(&bytes, &limits, Sasl::Off) {
            Parsed::Request {
                command, consumed, ..
            } => {
                assert_eq!(consumed, bytes.len());
                assert_eq!(
                    command,
                    Command::Store {
                        op: StoreOp::Set,
                        key: b"k",
                        flags: 5,
                        exptime: 0,
                        value: b"value"
                    }
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_huge_value_is_refused_before_it_arrives() {
        let limits = Limits::default();
        let mut bytes = request(opcode::SETQ, &[0; 8], b"k", b"");
        bytes[8..12].copy_from_slice(&0x7fff_0000u32.to_be_bytes());
        match parse(&bytes, &limits, Sasl::Off) {
            Parsed::Error {
                status,
                swallow,
                unlink_key,
                close,
                ..
            } => {
                assert_eq!(status, Status::TooLarge);
                assert_eq!(swallow, 0x7fff_0000 - 9);
                assert_eq!(unlink_key, Some(&b"k"[..]));
                assert!(!close);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lengths_are_checked_in_memcacheds_order() {
        let limits = Limits::default();
        // (status, consumed, swallow, close) of a refusal.
        let refusal = |bytes: &[u8], sasl| match parse(bytes, &limits, sasl) {
            Parsed::Error {
                status,
                consumed,
                swallow,
                close,
                ..
            } => (status, consumed, swallow, close),
            other => panic!("not refused: {other:?}"),
        };
        let mut short_body = request(opcode::GET, &[], b"key", b"");
        short_body[8..12].copy_from_slice(&2u32.to_be_bytes());
        assert_eq!(
            refusal(&short_body, Sasl::Off),
            (Status::UnknownCommand, 27, 0, true)
        );
        let long_key = request(opcode::GET, &[], &[b'a'; 251], b"");
        assert_eq!(
            refusal(&long_key, Sasl::Required),
            (Status::AuthError, 275, 0, true)
        );
        assert_eq!(
            refusal(&long_key, Sasl::Off),
            (Status::InvalidArguments, 275, 0, true)
        );
        let unknown = request(0x1b, &[1, 2, 3, 4], b"", b"");
        assert_eq!(
            refusal(&unknown, Sasl::Off),
            (Status::UnknownCommand, 28, 4, false)
        );
        let mut bad_magic = request(opcode::NOOP, &[], b"", b"");
        bad_magic[0] = 0x81;
        assert_eq!(parse(&bad_magic, &limits, Sasl::Off), Parsed::Close);
    }

    #[test]
    fn responses_carry_lengths_opaque_and_cas() {
        let mut out = Vec::new();
        let to = ReplyTo {
            opcode: opcode::GETK,
            opaque: 0xdead_beef,
        };
        response(
            &mut out,
            to,
            Status::Success,
            9,
            &[0, 0, 0, 1],
            b"ab",
            b"xyz",
        );
        assert_eq!(
            out,
            [
                &[0x81, 0x0c, 0, 2, 4, 0, 0, 0, 0, 0, 0, 9, 0xde, 0xad, 0xbe, 0xef][..],
                &9u64.to_be_bytes(),
                &[0, 0, 0, 1],
                b"ab",
                b"xyz"
            ]
            .concat()
        );
    }
}
