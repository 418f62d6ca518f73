//! Replies: typed server answers to the exact bytes memcached 1.6.18 writes.
//!
//! Not for deciding which reply a request gets (that is the server's job, with
//! the store's state), nor for protocol errors' text (see
//! [`crate::ProtocolError::reply_bytes`], which [`Response::Error`] wraps).
//!
//! Everything appends to a caller-owned `Vec<u8>` so one buffer can collect a
//! pipeline's replies; numbers are formatted without allocating.
//!
//! Meta replies are built with [`MetaReply`]: a status (`HD`, `VA <len>`, `EN`,
//! `NF`, `NS`, `EX`), then one call per return flag, in the order the client
//! gave its flags, then `finish`. Which flags memcached 1.6.18 echoes depends on
//! the command and outcome; the `*_RETURN_FLAGS` sets below list them, to be
//! used with [`crate::MetaFlags::returned`]. A `k` echo is the key raw, or
//! base64 followed by ` b` when the key is binary: for a hit that is the stored
//! item's binary mark, otherwise the request's `b` flag. `b` alone is never
//! echoed in 1.6.18. After the flags, mg appends ` Z`, ` X`, ` W` (token sent,
//! stale, won) from the item's state.

use crate::base64::encode_key;
use crate::number::{write_i64, write_u64};
use crate::ProtocolError;

/// Flags echoed by an mg hit (`s t c f l h O k`; `T N R` act but don't echo).
pub const MG_HIT_RETURN_FLAGS: &[u8] = b"stcflhOk";
/// Flags echoed by an mg miss (`EN`).
pub const MG_MISS_RETURN_FLAGS: &[u8] = b"Ok";
/// Flags echoed by ms, whatever its outcome (`c` is the new CAS).
pub const MS_RETURN_FLAGS: &[u8] = b"Okc";
/// Flags echoed by md, whatever its outcome.
pub const MD_RETURN_FLAGS: &[u8] = b"Ok";
/// Flags echoed by ma when the item exists or was vivified (`HD`/`VA`).
pub const MA_HIT_RETURN_FLAGS: &[u8] = b"ctOk";
/// Flags echoed by ma on `NF` or `EX`.
pub const MA_MISS_RETURN_FLAGS: &[u8] = b"Ok";

/// How a key is written back in a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyForm {
    /// The key's bytes as they are.
    Raw,
    /// Base64: the key is binary (stored or requested with the `b` flag).
    Base64,
}

/// A reply of the classic text protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Response<'a> {
    /// `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`: one hit of a get;
    /// the get ends with [`Response::End`].
    Value {
        key: &'a [u8],
        flags: u32,
        data: &'a [u8],
        /// Present for gets and gats.
        cas: Option<u64>,
    },
    /// `END`
    End,
    /// `STORED`
    Stored,
    /// `NOT_STORED`
    NotStored,
    /// `EXISTS`
    Exists,
    /// `NOT_FOUND`
    NotFound,
    /// `DELETED`
    Deleted,
    /// `TOUCHED`
    Touched,
    /// `OK` (flush_all, verbosity, stats detail on/off)
    Ok,
    /// `RESET` (stats reset)
    Reset,
    /// The new value after incr/decr, in decimal.
    Number(u64),
    /// `VERSION <version>`
    Version(&'a [u8]),
    /// `STAT <name> <value>`: one line of stats, which end with `END`.
    Stat { name: &'a [u8], value: &'a [u8] },
    /// `MN`: the meta no-op.
    MetaNoop,
    /// `ERROR: shutdown not enabled`: memcached's reply to `shutdown`
    /// without `-A`.
    ShutdownNotEnabled,
    /// `CLIENT_ERROR <message>`: errors that depend on stored data, such as
    /// `cannot increment or decrement non-numeric value`.
    ClientError(&'a [u8]),
    /// `SERVER_ERROR <message>`, such as `out of memory storing object`.
    ServerError(&'a [u8]),
    /// A protocol error's reply (empty for the ones that close).
    Error(ProtocolError),
}

impl Response<'_> {
    /// Appends the reply's bytes, `\r\n` included.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        match self {
            Response::Value {
                key,
                flags,
                data,
                cas,
            } => write_value(out, key, *flags, data, *cas),
            Response::End => out.extend_from_slice(b"END\r\n"),
            Response::Stored => out.extend_from_slice(b"STORED\r\n"),
            Response::NotStored => out.extend_from_slice(b"NOT_STORED\r\n"),
            Response::Exists => out.extend_from_slice(b"EXISTS\r\n"),
            Response::NotFound => out.extend_from_slice(b"NOT_FOUND\r\n"),
            Response::Deleted => out.extend_from_slice(b"DELETED\r\n"),
            Response::Touched => out.extend_from_slice(b"TOUCHED\r\n"),
            Response::Ok => out.extend_from_slice(b"OK\r\n"),
            Response::Reset => out.extend_from_slice(b"RESET\r\n"),
            Response::Number(value) => {
                write_u64(out, *value);
                out.extend_from_slice(b"\r\n");
            }
            Response::Version(version) => {
                out.extend_from_slice(b"VERSION ");
                out.extend_from_slice(version);
                out.extend_from_slice(b"\r\n");
            }
            Response::Stat { name, value } => {
                out.extend_from_slice(b"STAT ");
                out.extend_from_slice(name);
                out.push(b' ');
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
            Response::MetaNoop => out.extend_from_slice(b"MN\r\n"),
            Response::ShutdownNotEnabled => {
                out.extend_from_slice(b"ERROR: shutdown not enabled\r\n")
            }
            Response::ClientError(message) => {
                out.extend_from_slice(b"CLIENT_ERROR ");
                out.extend_from_slice(message);
                out.extend_from_slice(b"\r\n");
            }
            Response::ServerError(message) => {
                out.extend_from_slice(b"SERVER_ERROR ");
                out.extend_from_slice(message);
                out.extend_from_slice(b"\r\n");
            }
            Response::Error(error) => out.extend_from_slice(error.reply_bytes()),
        }
    }
}

/// Appends `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
pub fn write_value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    write_u64(out, u64::from(flags));
    out.push(b' ');
    write_u64(out, data.len() as u64);
    if let Some(cas) = cas {
        out.push(b' ');
        write_u64(out, cas);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends `STAT <name> <value>` for a numeric statistic.
pub fn write_stat_u64(out: &mut Vec<u8>, name: &[u8], value: u64) {
    out.extend_from_slice(b"STAT ");
    out.extend_from_slice(name);
    out.push(b' ');
    write_u64(out, value);
    out.extend_from_slice(b"\r\n");
}

/// The two-letter status of a meta reply without a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetaStatus {
    /// `HD`: success, no value.
    Headers,
    /// `EN`: mg miss.
    Miss,
    /// `NF`: not found (md, ma, ms in replace/append mode with CAS).
    NotFound,
    /// `NS`: not stored (ms).
    NotStored,
    /// `EX`: CAS mismatch.
    Exists,
}

impl MetaStatus {
    fn code(&self) -> &'static [u8] {
        match self {
            Self::Headers => b"HD",
            Self::Miss => b"EN",
            Self::NotFound => b"NF",
            Self::NotStored => b"NS",
            Self::Exists => b"EX",
        }
    }
}

/// Builds one meta reply line in a caller's buffer: status, return flags in
/// request order, `\r\n`, and for `VA` the value block.
#[must_use = "a meta reply is incomplete until finished"]
pub struct MetaReply<'o> {
    out: &'o mut Vec<u8>,
}

impl<'o> MetaReply<'o> {
    /// Starts a reply with a status and no value (`HD`, `EN`, `NF`, `NS`, `EX`).
    pub fn status(out: &'o mut Vec<u8>, status: MetaStatus) -> Self {
        out.extend_from_slice(status.code());
        Self { out }
    }

    /// Starts `VA <length>`; finish it with [`Self::finish_with_data`].
    pub fn value(out: &'o mut Vec<u8>, length: usize) -> Self {
        out.extend_from_slice(b"VA ");
        write_u64(out, length as u64);
        Self { out }
    }

    /// ` <letter><value>`, e.g. `s3`, `c42`, `f0`.
    pub fn number(&mut self, letter: u8, value: u64) -> &mut Self {
        self.out.push(b' ');
        self.out.push(letter);
        write_u64(self.out, value);
        self
    }

    /// ` <letter><value>` for signed values, e.g. `t-1`.
    pub fn signed(&mut self, letter: u8, value: i64) -> &mut Self {
        self.out.push(b' ');
        self.out.push(letter);
        write_i64(self.out, value);
        self
    }

    /// ` <letter>` alone, e.g. `W`, `X`, `Z`.
    pub fn letter(&mut self, letter: u8) -> &mut Self {
        self.out.push(b' ');
        self.out.push(letter);
        self
    }

    /// ` O<opaque>`: the opaque exactly as the client sent it.
    pub fn opaque(&mut self, opaque: &[u8]) -> &mut Self {
        self.out.extend_from_slice(b" O");
        self.out.extend_from_slice(opaque);
        self
    }

    /// ` k<key>`, or ` k<base64 key> b` for a binary key.
    pub fn key(&mut self, key: &[u8], form: KeyForm) -> &mut Self {
        self.out.extend_from_slice(b" k");
        match form {
            KeyForm::Raw => self.out.extend_from_slice(key),
            KeyForm::Base64 => {
                encode_key(key, self.out);
                self.out.extend_from_slice(b" b");
            }
        }
        self
    }

    /// Ends the line.
    pub fn finish(self) {
        self.out.extend_from_slice(b"\r\n");
    }

    /// Ends the line and appends `<data>\r\n` (for `VA`).
    pub fn finish_with_data(self, data: &[u8]) {
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(data);
        self.out.extend_from_slice(b"\r\n");
    }
}

/// The item fields memcached prints for `me`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaDebug<'a> {
    pub key: &'a [u8],
    /// Base64 when the stored key is binary (no ` b` follows it here).
    pub key_form: KeyForm,
    /// Seconds until expiry, or -1 for none (memcached prints
    /// `current_time - exptime`, so a live item shows a negative number).
    pub exp: i64,
    /// Seconds since the last access.
    pub last_access_secs: u64,
    pub cas: u64,
    pub fetched: bool,
    /// memcached's slab class; Kura has none and may print 1.
    pub class: u32,
    /// The item's total size in memcached's accounting.
    pub size: u64,
}

impl MetaDebug<'_> {
    /// Appends `ME <key> exp=… la=… cas=… fetch=yes|no cls=… size=…\r\n`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"ME ");
        match self.key_form {
            KeyForm::Raw => out.extend_from_slice(self.key),
            KeyForm::Base64 => encode_key(self.key, out),
        }
        out.extend_from_slice(b" exp=");
        write_i64(out, self.exp);
        out.extend_from_slice(b" la=");
        write_u64(out, self.last_access_secs);
        out.extend_from_slice(b" cas=");
        write_u64(out, self.cas);
        out.extend_from_slice(if self.fetched {
            b" fetch=yes"
        } else {
            b" fetch=no"
        });
        out.extend_from_slice(b" cls=");
        write_u64(out, u64::from(self.class));
        out.extend_from_slice(b" size=");
        write_u64(out, self.size);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(response: Response<'_>, expected: &[u8]) {
        let mut out = b"prefix|".to_vec();
        response.write_to(&mut out);
        assert_eq!(
            String::from_utf8_lossy(&out[7..]),
            String::from_utf8_lossy(expected),
            "{response:?}"
        );
    }

    #[test]
    fn text_replies() {
        check(
            Response::Value {
                key: b"a",
                flags: 5,
                data: b"xyz",
                cas: None,
            },
            b"VALUE a 5 3\r\nxyz\r\n",
        );
        check(
            Response::Value {
                key: b"a",
                flags: u32::MAX,
                data: b"",
                cas: Some(u64::MAX),
            },
            b"VALUE a 4294967295 0 18446744073709551615\r\n\r\n",
        );
        check(Response::End, b"END\r\n");
        check(Response::Stored, b"STORED\r\n");
        check(Response::NotStored, b"NOT_STORED\r\n");
        check(Response::Exists, b"EXISTS\r\n");
        check(Response::NotFound, b"NOT_FOUND\r\n");
        check(Response::Deleted, b"DELETED\r\n");
        check(Response::Touched, b"TOUCHED\r\n");
        check(Response::Ok, b"OK\r\n");
        check(Response::Reset, b"RESET\r\n");
        check(Response::Number(0), b"0\r\n");
        check(
            Response::Number(18446744073709551615),
            b"18446744073709551615\r\n",
        );
        check(Response::Version(b"1.6.18"), b"VERSION 1.6.18\r\n");
        check(
            Response::Stat {
                name: b"pid",
                value: b"42",
            },
            b"STAT pid 42\r\n",
        );
        check(Response::MetaNoop, b"MN\r\n");
        check(
            Response::ShutdownNotEnabled,
            b"ERROR: shutdown not enabled\r\n",
        );
        check(
            Response::ClientError(b"cannot increment or decrement non-numeric value"),
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        );
        check(
            Response::ServerError(b"out of memory storing object"),
            b"SERVER_ERROR out of memory storing object\r\n",
        );
        check(
            Response::Error(ProtocolError::BadDataChunk),
            b"CLIENT_ERROR bad data chunk\r\n",
        );
        check(Response::Error(ProtocolError::LineTooLong), b"");
    }

    #[test]
    fn stat_numbers() {
        let mut out = Vec::new();
        write_stat_u64(&mut out, b"curr_items", 12);
        assert_eq!(out, b"STAT curr_items 12\r\n");
    }

    /// Each expected line is what memcached 1.6.18 wrote for the request in
    /// the comment.
    #[test]
    fn meta_replies() {
        // mg foo s v t f
        let mut out = Vec::new();
        let mut reply = MetaReply::value(&mut out, 3);
        reply.number(b's', 3).signed(b't', -1).number(b'f', 0);
        reply.finish_with_data(b"bar");
        assert_eq!(out, b"VA 3 s3 t-1 f0\r\nbar\r\n");

        // mg zz Oabc k v s (miss)
        let mut out = Vec::new();
        let mut reply = MetaReply::status(&mut out, MetaStatus::Miss);
        reply.opaque(b"abc").key(b"zz", KeyForm::Raw);
        reply.finish();
        assert_eq!(out, b"EN Oabc kzz\r\n");

        // ms enp6 2 b k c O9 T0 F3
        let mut out = Vec::new();
        let mut reply = MetaReply::status(&mut out, MetaStatus::Headers);
        reply
            .key(b"zzz", KeyForm::Base64)
            .number(b'c', 42)
            .opaque(b"9");
        reply.finish();
        assert_eq!(out, b"HD kenp6 b c42 O9\r\n");

        // mg foo v R30, with a recache token already sent
        let mut out = Vec::new();
        let mut reply = MetaReply::value(&mut out, 0);
        reply.letter(b'Z');
        reply.finish_with_data(b"");
        assert_eq!(out, b"VA 0 Z\r\n\r\n");

        for (status, code) in [
            (MetaStatus::Headers, "HD"),
            (MetaStatus::Miss, "EN"),
            (MetaStatus::NotFound, "NF"),
            (MetaStatus::NotStored, "NS"),
            (MetaStatus::Exists, "EX"),
        ] {
            let mut out = Vec::new();
            MetaReply::status(&mut out, status).finish();
            assert_eq!(out, format!("{code}\r\n").as_bytes());
        }
    }

    #[test]
    fn meta_debug() {
        // me enp6 b, for an item stored with `ms enp6 2 b`
        let mut out = Vec::new();
        MetaDebug {
            key: b"zzz",
            key_form: KeyForm::Base64,
            exp: -1,
            last_access_secs: 0,
            cas: 42,
            fetched: true,
            class: 1,
            size: 68,
        }
        .write_to(&mut out);
        assert_eq!(
            out,
            b"ME enp6 exp=-1 la=0 cas=42 fetch=yes cls=1 size=68\r\n"
        );
    }
}
