//! The parser: bytes from a connection to one [`Request`] at a time, exactly
//! as memcached 1.6.18's `try_read_command_ascii` and `proto_text.c` read them,
//! errors included.
//!
//! Not for I/O, state or replies: the caller owns the buffer, calls [`parse`]
//! again after more bytes arrive, and writes replies with
//! [`crate::response`].
//!
//! How memcached reads a command, and so how this does:
//! - A command is a line ending in `\n`; one `\r` before it is dropped, unless
//!   the line is just `\r\n`. The line ends at its first NUL byte (memcached
//!   treats it as a C string), though the whole line up to `\n` is consumed.
//! - Tokens are separated by spaces only. memcached keeps at most 23 tokens
//!   per pass; the token counts checked below are its `ntokens`, which counts
//!   one terminal token more, so a line with more than 23 tokens has 24.
//! - More than 2048 bytes without a newline close the connection, unless the
//!   line starts (after at most 100 spaces) with `get ` or `gets `. memcached
//!   reads at most 16384 bytes at a time, so a newline beyond that closes too.
//! - A storage command is followed by exactly `<bytes> + 2` bytes of data;
//!   if the last two are not `\r\n` the reply is `CLIENT_ERROR bad data
//!   chunk` and parsing resumes right after those bytes.
//! - Errors found before the data block is due (bad numbers, long keys) leave
//!   the data block unread: the client's data is then parsed as a command,
//!   usually answering `ERROR`. `SERVER_ERROR object too large for cache` and
//!   meta-set flag errors instead swallow the data block.
//! - `noreply` is the last token of a classic command, whatever its position,
//!   and suppresses error replies too. Meta errors are never suppressed.
//!
//! Invariants: [`parse`] never panics and never reads past `buf`; `consumed`
//! is at least 1 and at most `buf.len()` (except on close, where it is
//! `buf.len()`); it returns `Request` only when the whole request, data block
//! included, is in `buf`.

use std::borrow::Cow;

use crate::base64::decode_key;
use crate::number::{strtol_i32, strtoul_u32, strtoull};
use crate::request::{
    ArithmeticCommand, MetaFlags, MetaRequest, Request, RetrievalCommand, ShutdownMode,
    StorageCommand, Tokens,
};
use crate::{Limits, ProtocolError};

/// More bytes than this without a newline close the connection (unless it
/// is a multi-get).
pub const LINE_WITHOUT_NEWLINE_MAX_BYTES: usize = 2048;

/// memcached's read buffer: a command line whose newline lies beyond this is
/// never seen whole, so the connection is closed (unless it is a multi-get).
pub const READ_BUFFER_BYTES: usize = 16384;

/// Tokens memcached keeps per pass (its `MAX_TOKENS` less the terminal one).
const TOKENS_MAX: usize = 23;

/// memcached's `MFLAG_MAX_OPT_LENGTH`: the most `ntokens` a meta command may
/// have (command, key, datalen for ms, flags, terminal).
const META_TOKENS_MAX: usize = 20;

/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`, counting the `O` itself.
const OPAQUE_TOKEN_MAX_BYTES: usize = 32;

/// The outcome of one [`parse`] call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// `buf` holds no complete request yet: append more bytes and call again.
    /// Not an error.
    Incomplete,
    /// A complete request; drop `consumed` bytes from the buffer afterwards.
    Request {
        request: Request<'a>,
        consumed: usize,
    },
    /// memcached refuses the request. The caller:
    /// 1. writes `error.reply_bytes()` unless `noreply` (memcached suppresses
    ///    errors of a classic command that ends in `noreply`);
    /// 2. deletes `unlink_key` if present: memcached drops the old value when
    ///    a `set` or `ms` is refused as too large, so no stale value survives;
    /// 3. drops `consumed` bytes, then the next `swallow_bytes` bytes as they
    ///    arrive (some may already be in the buffer);
    /// 4. if `close`, closes the connection without a reply. memcached drops
    ///    it at once, so replies still queued from the same read are lost too.
    Error {
        error: ProtocolError,
        consumed: usize,
        swallow_bytes: usize,
        close: bool,
        noreply: bool,
        unlink_key: Option<Cow<'a, [u8]>>,
    },
}

/// Parses the first request in `buf`.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Parsed<'a> {
    let newline = buf.iter().position(|&byte| byte == b'\n');
    let too_long = match newline {
        None => buf.len() > LINE_WITHOUT_NEWLINE_MAX_BYTES,
        Some(index) => index >= READ_BUFFER_BYTES,
    };
    if too_long && !starts_multiget(buf) {
        return Parsed::Error {
            error: ProtocolError::LineTooLong,
            consumed: buf.len(),
            swallow_bytes: 0,
            close: true,
            noreply: false,
            unlink_key: None,
        };
    }
    let Some(newline) = newline else {
        return Parsed::Incomplete;
    };
    let mut text = &buf[..newline];
    if newline > 1 && text[newline - 1] == b'\r' {
        text = &text[..newline - 1];
    }
    if let Some(nul) = text.iter().position(|&byte| byte == 0) {
        text = &text[..nul];
    }
    let line = Line::new(text);
    Command {
        buf,
        line_end: newline + 1,
        line,
        limits,
    }
    .dispatch()
}

/// memcached's exemption for long lines: a multi-get may be any length.
fn starts_multiget(buf: &[u8]) -> bool {
    let spaces = buf.iter().take_while(|&&byte| byte == b' ').count();
    if spaces > 100 {
        return false;
    }
    let rest = &buf[spaces..];
    rest.starts_with(b"get ") || rest.starts_with(b"gets ")
}

/// One command line, tokenised the way memcached's `tokenize_command` does.
struct Line<'a> {
    text: &'a [u8],
    tokens: [&'a [u8]; TOKENS_MAX],
    /// Offset in `text` just past each token.
    ends: [usize; TOKENS_MAX],
    count: usize,
}

impl<'a> Line<'a> {
    fn new(text: &'a [u8]) -> Self {
        let mut line = Line {
            text,
            tokens: [&[]; TOKENS_MAX],
            ends: [0; TOKENS_MAX],
            count: 0,
        };
        let mut index = 0;
        while line.count < TOKENS_MAX {
            while index < text.len() && text[index] == b' ' {
                index += 1;
            }
            if index == text.len() {
                break;
            }
            let start = index;
            while index < text.len() && text[index] != b' ' {
                index += 1;
            }
            line.tokens[line.count] = &text[start..index];
            line.ends[line.count] = index;
            line.count += 1;
        }
        line
    }

    /// memcached's `ntokens`: the tokens kept plus the terminal one.
    fn ntokens(&self) -> usize {
        self.count + 1
    }

    /// Token `index`, or empty past the end.
    fn token(&self, index: usize) -> &'a [u8] {
        if index < self.count {
            self.tokens[index]
        } else {
            &[]
        }
    }

    /// memcached's `tokens[ntokens - 2]`: the last token kept.
    fn last(&self) -> &'a [u8] {
        self.token(self.count.saturating_sub(1))
    }

    /// All tokens after token `index`, however many the line holds.
    fn tokens_after(&self, index: usize) -> Tokens<'a> {
        let start = if index < self.count {
            self.ends[index]
        } else {
            self.text.len()
        };
        Tokens::new(&self.text[start..])
    }
}

/// Parsing state for one command line.
struct Command<'a, 'l> {
    buf: &'a [u8],
    /// Offset just past the line's `\n`.
    line_end: usize,
    line: Line<'a>,
    limits: &'l Limits,
}

impl<'a> Command<'a, '_> {
    fn dispatch(&self) -> Parsed<'a> {
        let command = self.line.token(0);
        if command.len() < 2 {
            return self.fail(ProtocolError::UnknownCommand);
        }
        let ntokens = self.line.ntokens();
        if command.len() == 2 && command[0] == b'm' {
            return match command[1] {
                b'g' => self.meta_get(),
                b's' => self.meta_set(),
                b'd' => self.meta_delete(),
                b'a' => self.meta_arithmetic(),
                b'n' => self.ok(Request::MetaNoop),
                b'e' => self.meta_debug(),
                _ => self.fail(ProtocolError::UnknownCommand),
            };
        }
        match command[0] {
            b'g' => {
                if ntokens < 3 {
                    return self.fail(ProtocolError::UnknownCommand);
                }
                match command {
                    b"get" => self.retrieval(RetrievalCommand::Get),
                    b"gets" => self.retrieval(RetrievalCommand::Gets),
                    b"gat" => self.retrieval(RetrievalCommand::Gat),
                    b"gats" => self.retrieval(RetrievalCommand::Gats),
                    _ => self.fail(ProtocolError::UnknownCommand),
                }
            }
            b's' => match command {
                b"set" => self.storage(StorageCommand::Set),
                b"stats" => self.ok(Request::Stats {
                    arguments: self.line.tokens_after(0),
                }),
                b"slabs" => self.ok(Request::Slabs {
                    arguments: self.line.tokens_after(0),
                }),
                b"shutdown" => self.shutdown(),
                _ => self.fail(ProtocolError::UnknownCommand),
            },
            b'a' => match command {
                b"add" => self.storage(StorageCommand::Add),
                b"append" => self.storage(StorageCommand::Append),
                _ => self.fail(ProtocolError::UnknownCommand),
            },
            b'c' => match command {
                b"cas" => self.storage(StorageCommand::Cas),
                b"cache_memlimit" => self.cache_memlimit(),
                _ => self.fail(ProtocolError::UnknownCommand),
            },
            b'i' => match command {
                b"incr" => self.arithmetic(ArithmeticCommand::Incr),
                _ => self.fail(ProtocolError::UnknownCommand),
            },
            b'd' => match command {
                b"delete" => self.delete(),
                b"decr" => self.arithmetic(ArithmeticCommand::Decr),
                _ => self.fail(ProtocolError::UnknownCommand),
            },
            b't' => match command {
                b"touch" => self.touch(),
                _ => self.fail(ProtocolError::UnknownCommand),
            },
            _ => match command {
                b"replace" => self.storage(StorageCommand::Replace),
                b"prepend" => self.storage(StorageCommand::Prepend),
                b"bget" => {
                    if ntokens < 3 {
                        self.fail(ProtocolError::UnknownCommand)
                    } else {
                        self.retrieval(RetrievalCommand::Get)
                    }
                }
                b"flush_all" => self.flush_all(),
                b"replicaof" => self.ok(Request::ReplicaOf {
                    arguments: self.line.tokens_after(0),
                }),
                b"replicate" => self.ok(Request::Replicate {
                    arguments: self.line.tokens_after(0),
                }),
                b"fence" => self.ok(Request::Fence {
                    arguments: self.line.tokens_after(0),
                }),
                b"version" => self.ok(Request::Version),
                b"refresh_certs" => self.ok(Request::RefreshCerts),
                b"quit" => self.ok(Request::Quit),
                b"verbosity" => self.verbosity(),
                // memcached's slab, LRU and log-watch administration has no
                // meaning for Kura's store; those commands answer ERROR.
                b"lru_crawler" | b"watch" | b"lru" | b"extstore" => {
                    self.fail(ProtocolError::UnknownCommand)
                }
                _ if self.line.last().starts_with(b"HTTP/") => Parsed::Error {
                    error: ProtocolError::HttpRequest,
                    consumed: self.buf.len(),
                    swallow_bytes: 0,
                    close: true,
                    noreply: false,
                    unlink_key: None,
                },
                _ => self.fail(ProtocolError::UnknownCommand),
            },
        }
    }

    fn ok(&self, request: Request<'a>) -> Parsed<'a> {
        Parsed::Request {
            request,
            consumed: self.line_end,
        }
    }

    fn fail(&self, error: ProtocolError) -> Parsed<'a> {
        self.fail_noreply(error, false)
    }

    fn fail_noreply(&self, error: ProtocolError, noreply: bool) -> Parsed<'a> {
        Parsed::Error {
            error,
            consumed: self.line_end,
            swallow_bytes: 0,
            close: false,
            noreply,
            unlink_key: None,
        }
    }

    fn fail_swallow(&self, error: ProtocolError, swallow_bytes: usize) -> Parsed<'a> {
        Parsed::Error {
            error,
            consumed: self.line_end,
            swallow_bytes,
            close: false,
            noreply: false,
            unlink_key: None,
        }
    }

    /// memcached's `set_noreply_maybe`: the last token is exactly `noreply`.
    fn noreply(&self) -> bool {
        self.line.last() == b"noreply"
    }

    fn key_too_long(&self, key: &[u8]) -> bool {
        key.len() > self.limits.key_max_bytes
    }

    /// The data block of `block_bytes` (`\r\n` included) after the line, and
    /// where it ends; `Err` holds what to return instead.
    fn data_block(
        &self,
        block_bytes: usize,
        noreply: bool,
    ) -> Result<(&'a [u8], usize), Box<Parsed<'a>>> {
        let Some(end) = self.line_end.checked_add(block_bytes) else {
            return Err(Box::new(Parsed::Incomplete));
        };
        let Some(block) = self.buf.get(self.line_end..end) else {
            return Err(Box::new(Parsed::Incomplete));
        };
        match block.strip_suffix(b"\r\n") {
            Some(data) => Ok((data, end)),
            None => Err(Box::new(Parsed::Error {
                error: ProtocolError::BadDataChunk,
                consumed: end,
                swallow_bytes: 0,
                close: false,
                noreply,
                unlink_key: None,
            })),
        }
    }

    /// `process_update_command`.
    fn storage(&self, command: StorageCommand) -> Parsed<'a> {
        let ntokens = self.line.ntokens();
        let wanted = if command == StorageCommand::Cas { 7 } else { 6 };
        if ntokens != wanted && ntokens != wanted + 1 {
            return self.fail(ProtocolError::UnknownCommand);
        }
        let noreply = self.noreply();
        let key = self.line.token(1);
        if self.key_too_long(key) {
            return self.fail_noreply(ProtocolError::BadCommandLineFormat, noreply);
        }
        let (Some(flags), Some(exptime), Some(length)) = (
            strtoul_u32(self.line.token(2)),
            strtol_i32(self.line.token(3)),
            strtol_i32(self.line.token(4)),
        ) else {
            return self.fail_noreply(ProtocolError::BadCommandLineFormat, noreply);
        };
        let cas_unique = if command == StorageCommand::Cas {
            match strtoull(self.line.token(5)) {
                Some(cas) => cas,
                None => return self.fail_noreply(ProtocolError::BadCommandLineFormat, noreply),
            }
        } else {
            0
        };
        let Some(block_bytes) = data_block_bytes(length) else {
            return self.fail_noreply(ProtocolError::BadCommandLineFormat, noreply);
        };
        if !self.limits.item_fits(key.len(), flags, block_bytes) {
            return Parsed::Error {
                error: ProtocolError::ObjectTooLarge,
                consumed: self.line_end,
                swallow_bytes: block_bytes,
                close: false,
                noreply,
                unlink_key: (command == StorageCommand::Set).then_some(Cow::Borrowed(key)),
            };
        }
        match self.data_block(block_bytes, noreply) {
            Ok((data, consumed)) => Parsed::Request {
                request: Request::Storage {
                    command,
                    key,
                    flags,
                    exptime: i64::from(exptime),
                    cas_unique,
                    noreply,
                    data,
                },
                consumed,
            },
            Err(parsed) => *parsed,
        }
    }

    /// `process_get_command`: the caller checked there are at least 3 tokens.
    fn retrieval(&self, command: RetrievalCommand) -> Parsed<'a> {
        let (exptime, keys) = if command.touches() {
            match strtol_i32(self.line.token(1)) {
                Some(exptime) => (i64::from(exptime), self.line.tokens_after(1)),
                None => return self.fail(ProtocolError::InvalidExptime),
            }
        } else {
            (0, self.line.tokens_after(0))
        };
        // memcached stops at the first long key and replies with the error
        // alone, discarding hits already found.
        let mut scan = keys;
        if scan.any(|key| self.key_too_long(key)) {
            return self.fail(ProtocolError::BadCommandLineFormat);
        }
        self.ok(Request::Retrieval {
            command,
            exptime,
            keys,
        })
    }

    /// `process_delete_command`: `delete <key> [0] [noreply]`.
    fn delete(&self) -> Parsed<'a> {
        let ntokens = self.line.ntokens();
        if !(3..=5).contains(&ntokens) {
            return self.fail(ProtocolError::UnknownCommand);
        }
        let mut noreply = false;
        if ntokens > 3 {
            let hold_is_zero = self.line.token(2) == b"0";
            noreply = self.noreply();
            let valid = (ntokens == 4 && (hold_is_zero || noreply))
                || (ntokens == 5 && hold_is_zero && noreply);
            if !valid {
                return self.fail_noreply(ProtocolError::DeleteUsage, noreply);
            }
        }
        let key = self.line.token(1);
        if self.key_too_long(key) {
            return self.fail_noreply(ProtocolError::BadCommandLineFormat, noreply);
        }
        self.ok(Request::Delete { key, noreply })
    }

    /// `process_arithmetic_command`.
    fn arithmetic(&self, command: ArithmeticCommand) -> Parsed<'a> {
        let ntokens = self.line.ntokens();
        if ntokens != 4 && ntokens != 5 {
            return self.fail(ProtocolError::UnknownCommand);
        }
        let noreply = self.noreply();
        let key = self.line.token(1);
        if self.key_too_long(key) {
            return self.fail_noreply(ProtocolError::BadCommandLineFormat, noreply);
        }
        let Some(delta) = strtoull(self.line.token(2)) else {
            return self.fail_noreply(ProtocolError::InvalidDelta, noreply);
        };
        self.ok(Request::Arithmetic {
            command,
            key,
            delta,
            noreply,
        })
    }

    /// `process_touch_command`.
    fn touch(&self) -> Parsed<'a> {
        let ntokens = self.line.ntokens();
        if ntokens != 4 && ntokens != 5 {
            return self.fail(ProtocolError::UnknownCommand);
        }
        let noreply = self.noreply();
        let key = self.line.token(1);
        if self.key_too_long(key) {
            return self.fail_noreply(ProtocolError::BadCommandLineFormat, noreply);
        }
        let Some(exptime) = strtol_i32(self.line.token(2)) else {
            return self.fail_noreply(ProtocolError::InvalidExptime, noreply);
        };
        self.ok(Request::Touch {
            key,
            exptime: i64::from(exptime),
            noreply,
        })
    }

    /// `process_flush_all_command`.
    fn flush_all(&self) -> Parsed<'a> {
        let ntokens = self.line.ntokens();
        if !(2..=4).contains(&ntokens) {
            return self.fail(ProtocolError::UnknownCommand);
        }
        let noreply = self.noreply();
        let delay = if ntokens != if noreply { 3 } else { 2 } {
            match strtol_i32(self.line.token(1)) {
                Some(delay) => Some(i64::from(delay)),
                None => return self.fail_noreply(ProtocolError::InvalidExptime, noreply),
            }
        } else {
            None
        };
        self.ok(Request::FlushAll { delay, noreply })
    }

    /// `process_memlimit_command`: a number of MiB, else `ERROR` (both obey
    /// `noreply`). Whether the number is acceptable is the server's call.
    fn cache_memlimit(&self) -> Parsed<'a> {
        self.number_request(ProtocolError::UnknownCommand, |megabytes, noreply| {
            Request::CacheMemlimit { megabytes, noreply }
        })
    }

    /// `process_verbosity_command`.
    fn verbosity(&self) -> Parsed<'a> {
        self.number_request(ProtocolError::BadCommandLineFormat, |level, noreply| {
            Request::Verbosity { level, noreply }
        })
    }

    /// `<command> <u32> [noreply]`, as verbosity and cache_memlimit take it: the wrong
    /// token count is `ERROR`; a bad number is `bad_number` (silent under noreply).
    fn number_request(
        &self,
        bad_number: ProtocolError,
        request: impl FnOnce(u32, bool) -> Request<'a>,
    ) -> Parsed<'a> {
        let ntokens = self.line.ntokens();
        if ntokens != 3 && ntokens != 4 {
            return self.fail(ProtocolError::UnknownCommand);
        }
        let noreply = self.noreply();
        match strtoul_u32(self.line.token(1)) {
            Some(number) => self.ok(request(number, noreply)),
            None => self.fail_noreply(bad_number, noreply),
        }
    }

    /// `process_shutdown_command`, minus the enabled check (server policy).
    fn shutdown(&self) -> Parsed<'a> {
        let mode = match self.line.ntokens() {
            2 => ShutdownMode::Immediate,
            3 if self.line.token(1) == b"graceful" => ShutdownMode::Graceful,
            _ => ShutdownMode::Invalid,
        };
        self.ok(Request::Shutdown { mode })
    }

    /// The checks every meta command but mn and me starts with. `Err` holds
    /// the reply to give.
    fn meta_prologue(&self, too_many: ProtocolError) -> Result<(), ProtocolError> {
        if self.line.ntokens() < 3 {
            return Err(ProtocolError::UnknownCommand);
        }
        if self.key_too_long(self.line.token(1)) {
            return Err(ProtocolError::BadCommandLineFormat);
        }
        if self.line.ntokens() > META_TOKENS_MAX {
            return Err(too_many);
        }
        Ok(())
    }

    /// `_meta_flag_preparse` over the tokens from `first`.
    fn meta_flags(&self, first: usize) -> Result<(Cow<'a, [u8]>, MetaFlags<'a>), ProtocolError> {
        let mut key = Cow::Borrowed(self.line.token(1));
        let mut flags = MetaFlags::default();
        let mut seen = [false; 127];
        // memcached keeps going after a bad value and reports the last message
        // set; `F` sets none, leaving the default.
        let mut error: Option<ProtocolError> = None;
        let mut failed = false;
        for index in first..self.line.count {
            let token = self.line.token(index);
            let Some(&letter) = token.first() else {
                continue;
            };
            let seen_slot = seen.get_mut(usize::from(letter));
            match seen_slot {
                Some(slot) if !*slot => *slot = true,
                _ => return Err(ProtocolError::DuplicateFlag),
            }
            let value = &token[1..];
            let mut bad = |message: Option<ProtocolError>| {
                failed = true;
                if message.is_some() {
                    error = message;
                }
            };
            match letter {
                b'b' => {
                    flags.base64 = true;
                    match decode_key(self.line.token(1)) {
                        Some(decoded) => key = Cow::Owned(decoded),
                        None => {
                            key = Cow::Borrowed(&[]);
                            bad(Some(ProtocolError::KeyDecode));
                        }
                    }
                }
                b'N' => match strtol_i32(value) {
                    Some(ttl) => flags.vivify_ttl = Some(i64::from(ttl)),
                    None => bad(Some(ProtocolError::BadToken)),
                },
                b'T' => match strtol_i32(value) {
                    Some(ttl) => flags.ttl = Some(i64::from(ttl)),
                    None => bad(Some(ProtocolError::BadToken)),
                },
                b'R' => match strtol_i32(value) {
                    Some(ttl) => flags.recache_ttl = Some(i64::from(ttl)),
                    None => bad(Some(ProtocolError::BadToken)),
                },
                b'l' => flags.return_last_access = true,
                b'O' => flags.opaque = Some(value),
                b'P' | b'L' => {}
                b'k' => flags.return_key = true,
                b's' => flags.return_size = true,
                b't' => flags.return_ttl = true,
                b'c' => flags.return_cas = true,
                b'f' => flags.return_flags = true,
                b'v' => flags.return_value = true,
                b'h' => flags.return_hit = true,
                b'u' => flags.no_bump = true,
                b'q' => flags.quiet = true,
                b'F' => match strtoul_u32(value) {
                    Some(client_flags) => flags.client_flags = Some(client_flags),
                    None => bad(None),
                },
                b'C' => match strtoull(value) {
                    Some(cas) => flags.compare_cas = Some(cas),
                    None => bad(Some(ProtocolError::BadToken)),
                },
                b'M' => {
                    if token.len() == 2 {
                        flags.mode = Some(token[1]);
                    } else {
                        bad(Some(ProtocolError::ModeTokenLength));
                    }
                }
                b'J' => match strtoull(value) {
                    Some(initial) => flags.initial = Some(initial),
                    None => bad(Some(ProtocolError::InvalidInitial)),
                },
                b'D' => match strtoull(value) {
                    Some(delta) => flags.delta = Some(delta),
                    None => bad(Some(ProtocolError::InvalidDeltaValue)),
                },
                b'I' => flags.invalidate = true,
                // Kura's own: how durable the change must be before the reply.
                b'Y' => match durability_level(value) {
                    Some(level) => flags.durability = Some(level),
                    None => bad(Some(ProtocolError::BadToken)),
                },
                _ => return Err(ProtocolError::InvalidFlag),
            }
            flags.order.push(letter);
        }
        if failed {
            return Err(error.unwrap_or(ProtocolError::BadCommandLineFormat));
        }
        Ok((key, flags))
    }

    /// `process_mget_command`.
    fn meta_get(&self) -> Parsed<'a> {
        if let Err(error) = self.meta_prologue(ProtocolError::MetaGetOptionsTooLong) {
            return self.fail(error);
        }
        match self.meta_flags(2) {
            Err(error) => self.fail(error),
            Ok((_, flags)) if opaque_too_long(&flags) => self.fail(ProtocolError::OpaqueTooLong),
            Ok((key, flags)) => self.ok(Request::MetaGet(MetaRequest { key, flags })),
        }
    }

    /// `process_mdelete_command`.
    fn meta_delete(&self) -> Parsed<'a> {
        if let Err(error) = self.meta_prologue(ProtocolError::OptionsTooLong) {
            return self.fail(error);
        }
        match self.meta_flags(2) {
            Err(_) => self.fail(ProtocolError::InvalidOrDuplicateFlag),
            Ok((_, flags)) if opaque_too_long(&flags) => self.fail(ProtocolError::OpaqueTooLong),
            Ok((key, flags)) => self.ok(Request::MetaDelete(MetaRequest { key, flags })),
        }
    }

    /// `process_marithmetic_command`.
    fn meta_arithmetic(&self) -> Parsed<'a> {
        if let Err(error) = self.meta_prologue(ProtocolError::OptionsTooLong) {
            return self.fail(error);
        }
        match self.meta_flags(2) {
            Err(_) => self.fail(ProtocolError::InvalidOrDuplicateFlag),
            Ok((_, flags)) if !matches!(flags.mode, None | Some(b'I' | b'+' | b'D' | b'-')) => {
                self.fail(ProtocolError::InvalidArithmeticMode)
            }
            Ok((_, flags)) if opaque_too_long(&flags) => self.fail(ProtocolError::OpaqueTooLong),
            Ok((key, flags)) => self.ok(Request::MetaArithmetic(MetaRequest { key, flags })),
        }
    }

    /// `process_mset_command`: `ms <key> <datalen> <flags>*`.
    fn meta_set(&self) -> Parsed<'a> {
        if let Err(error) = self.meta_prologue(ProtocolError::OptionsTooLong) {
            return self.fail(error);
        }
        // memcached checks this before the token count limit; both cannot hold.
        if self.line.ntokens() == 3 {
            return self.fail(ProtocolError::BadCommandLineFormat);
        }
        let Some(block_bytes) = strtol_i32(self.line.token(2)).and_then(data_block_bytes) else {
            return self.fail(ProtocolError::BadCommandLineFormat);
        };
        // From here on memcached swallows the data block after an error.
        let (key, flags) = match self.meta_flags(3) {
            Ok(parsed) => parsed,
            Err(error) => return self.fail_swallow(error, block_bytes),
        };
        if !matches!(flags.mode, None | Some(b'E' | b'A' | b'P' | b'R' | b'S')) {
            return self.fail_swallow(ProtocolError::InvalidSetMode, block_bytes);
        }
        if opaque_too_long(&flags) {
            return self.fail_swallow(ProtocolError::OpaqueTooLong, block_bytes);
        }
        if !self
            .limits
            .item_fits(key.len(), flags.client_flags.unwrap_or(0), block_bytes)
        {
            return Parsed::Error {
                error: ProtocolError::ObjectTooLarge,
                consumed: self.line_end,
                swallow_bytes: block_bytes,
                close: false,
                noreply: false,
                unlink_key: Some(key),
            };
        }
        match self.data_block(block_bytes, false) {
            Ok((data, consumed)) => Parsed::Request {
                request: Request::MetaSet {
                    request: MetaRequest { key, flags },
                    data,
                },
                consumed,
            },
            Err(parsed) => *parsed,
        }
    }

    /// `process_meta_command` (`me`).
    fn meta_debug(&self) -> Parsed<'a> {
        let key = self.line.token(1);
        if self.line.ntokens() < 3 || self.key_too_long(key) {
            return self.fail(ProtocolError::BadCommandLineFormat);
        }
        if self.line.ntokens() >= 4 && self.line.token(2) == b"b" {
            return match decode_key(key) {
                Some(decoded) => self.ok(Request::MetaDebug {
                    key: Cow::Owned(decoded),
                    base64: true,
                }),
                None => self.fail(ProtocolError::BadCommandLineFormat),
            };
        }
        self.ok(Request::MetaDebug {
            key: Cow::Borrowed(key),
            base64: false,
        })
    }
}

/// memcached's data length check: `0 <= bytes <= INT_MAX - 2`, then `+ 2`
/// for the `\r\n`.
fn data_block_bytes(length: i32) -> Option<usize> {
    if !(0..=i32::MAX - 2).contains(&length) {
        return None;
    }
    usize::try_from(length).ok().map(|length| length + 2)
}

/// `Y`'s token: empty (this node's disk) or a count of replicas, 0 to 255.
fn durability_level(token: &[u8]) -> Option<u8> {
    if token.is_empty() {
        return Some(0);
    }
    if token.len() > 3 || !token.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(token).ok()?.parse().ok()
}

fn opaque_too_long(flags: &MetaFlags<'_>) -> bool {
    flags
        .opaque
        .is_some_and(|opaque| opaque.len() + 1 > OPAQUE_TOKEN_MAX_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shows bytes with `\r`, `\n` and non-printable bytes escaped.
    fn escape(bytes: &[u8]) -> String {
        let mut shown = String::new();
        for &byte in bytes {
            match byte {
                b'\r' => shown.push_str(r"\r"),
                b'\n' => shown.push_str(r"\n"),
                b'\t' => shown.push_str(r"\t"),
                0x20..=0x7e => shown.push(char::from(byte)),
                _ => shown.push_str(&format!(r"\x{byte:02x}")),
            }
        }
        shown
    }

    /// One line per outcome: a request as it re-encodes (plus the decoded
    /// key of a base64 meta request), an error as its wire text, then how
    /// much was consumed (`+all` for the whole input) and any extras.
    fn render(input: &[u8], parsed: &Parsed<'_>) -> String {
        let consumed_text = |consumed: usize| {
            if consumed == input.len() {
                "+all".to_string()
            } else {
                format!("+{consumed}")
            }
        };
        match parsed {
            Parsed::Incomplete => "incomplete".to_string(),
            Parsed::Request { request, consumed } => {
                let mut encoded = Vec::new();
                request.write_to(&mut encoded);
                let mut shown = format!("{} {}", escape(&encoded), consumed_text(*consumed));
                let meta = match request {
                    Request::MetaGet(meta)
                    | Request::MetaDelete(meta)
                    | Request::MetaArithmetic(meta)
                    | Request::MetaSet { request: meta, .. } => Some(meta),
                    _ => None,
                };
                if let Some(meta) = meta.filter(|meta| meta.flags.base64) {
                    shown.push_str(&format!(" key={}", escape(&meta.key)));
                }
                if let Request::MetaDebug { key, base64: true } = request {
                    shown.push_str(&format!(" key={}", escape(key)));
                }
                shown
            }
            Parsed::Error {
                error,
                consumed,
                swallow_bytes,
                close,
                noreply,
                unlink_key,
            } => {
                let mut shown = format!("{error} {}", consumed_text(*consumed));
                if *swallow_bytes > 0 {
                    shown.push_str(&format!(" swallow={swallow_bytes}"));
                }
                if *close {
                    shown.push_str(" close");
                }
                if *noreply {
                    shown.push_str(" noreply");
                }
                if let Some(key) = unlink_key {
                    shown.push_str(&format!(" unlink={}", escape(key)));
                }
                shown
            }
        }
    }

    fn check(input: &[u8], expected: &str) {
        let parsed = parse(input, &Limits::default());
        assert_eq!(render(input, &parsed), expected, "input: {}", escape(input));
    }

    fn long(prefix: &str, filler: &str, count: usize, suffix: &str) -> Vec<u8> {
        let mut input = prefix.as_bytes().to_vec();
        for _ in 0..count {
            input.extend_from_slice(filler.as_bytes());
        }
        input.extend_from_slice(suffix.as_bytes());
        input
    }

    // Every expectation below was checked against memcached 1.6.18 (the reply
    // text, and what it did with the bytes that followed).

    #[test]
    fn framing() {
        check(b"", "incomplete");
        check(b"get a", "incomplete");
        check(b"get a\r", "incomplete");
        check(b"\r\n", "ERROR +all");
        check(b"\n", "ERROR +all");
        check(b"x\r\n", "ERROR +all");
        check(b"   \r\n", "ERROR +all");
        check(b"get a\n", r"get a\r\n +all");
        check(b"get a\r\nget b\r\n", r"get a\r\n +7");
        check(b"get  a  b \r\n", r"get a b\r\n +all");
        // One \r is dropped, a second stays in the token.
        check(b"get a\r\r\n", r"get a\r\r\n +all");
        // memcached reads the line as a C string: it ends at a NUL.
        check(b"get a\0 b\r\n", r"get a\r\n +all");
        check(b"set b\0x 0 0 1\r\n1\r\n", "ERROR +15");
        check(b"version\0\r\n", r"version\r\n +all");
    }

    #[test]
    fn long_lines() {
        check(&long("", "x", 2048, ""), "incomplete");
        check(
            &long("", "x", 2049, ""),
            "line too long without a newline (connection closed) +all close",
        );
        check(&long("get ", "x", 3000, ""), "incomplete");
        check(&long("gets ", "a ", 3000, ""), "incomplete");
        check(
            &long("", " ", 100, "get aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa").repeat(20),
            "incomplete",
        );
        check(
            &long("", " ", 101, &"get a ".repeat(400)),
            "line too long without a newline (connection closed) +all close",
        );
        check(
            &long("gat 0 ", "a ", 3000, ""),
            "line too long without a newline (connection closed) +all close",
        );
        // A newline within the first 16 KiB is seen, however long the line.
        check(&long("version ", "x", 3000, "\r\n"), r"version\r\n +all");
        check(
            &long("set ", "x", 3000, " 0 0 1\r\n1\r\n"),
            "CLIENT_ERROR bad command line format +3012",
        );
        check(
            &long("version ", "x", 20000, "\r\n"),
            "line too long without a newline (connection closed) +all close",
        );
        check(
            &long("get ", "x", 30000, "\r\n"),
            "CLIENT_ERROR bad command line format +all",
        );
        // memcached reads a request after a complete one before writing
        // replies, so this closes without a VERSION reply.
        check(&long("version\r\n", "x", 3000, ""), r"version\r\n +9");
    }

    #[test]
    fn http() {
        check(
            b"GET / HTTP/1.1\r\n",
            "HTTP request on the memcached port (connection closed) +all close",
        );
        check(
            b"HTTP/\r\n",
            "HTTP request on the memcached port (connection closed) +all close",
        );
        check(
            b"foo HTTP/\r\n",
            "HTTP request on the memcached port (connection closed) +all close",
        );
        check(b"foo HTTP/1.1 x\r\n", "ERROR +all");
        check(b"get HTTP/\r\n", r"get HTTP/\r\n +all");
        // Commands dispatched on their first letter never reach the check.
        check(b"sx HTTP/1.1\r\n", "ERROR +all");
        check(b"mx HTTP/1.1\r\n", "ERROR +all");
    }

    #[test]
    fn retrieval() {
        check(b"get\r\n", "ERROR +all");
        check(b"getx a\r\n", "ERROR +all");
        check(b"gets a b\r\n", r"gets a b\r\n +all");
        check(b"bget a\r\n", r"get a\r\n +all");
        check(b"gat 10 a b\r\n", r"gat 10 a b\r\n +all");
        check(b"gats -1 a\r\n", r"gats -1 a\r\n +all");
        check(b"gat 10\r\n", r"gat 10\r\n +all");
        check(b"gat\r\n", "ERROR +all");
        check(b"gat x a\r\n", "CLIENT_ERROR invalid exptime argument +all");
        check(b"gat 4294967297 a\r\n", r"gat 1 a\r\n +all");
        let key250 = "k".repeat(250);
        let key251 = "k".repeat(251);
        check(
            format!("get {key250} a\r\n").as_bytes(),
            &format!(r"get {key250} a\r\n +all"),
        );
        for line in [
            format!("get a {key251} b\r\n"),
            format!("get {key251} a b\r\n"),
            format!("gets a b {key251}\r\n"),
            format!("gat 1 a {key251}\r\n"),
            format!("get {} {key251} b\r\n", "a ".repeat(25)),
        ] {
            check(line.as_bytes(), "CLIENT_ERROR bad command line format +all");
        }
        let many = "a ".repeat(30);
        check(
            format!("get {many}\r\n").as_bytes(),
            &format!(r"get {}\r\n +all", many.trim_end()),
        );
    }

    #[test]
    fn storage() {
        check(b"set a 0 0 1\r\n1\r\n", r"set a 0 0 1\r\n1\r\n +all");
        check(
            b"set a 0 0 1\r\n1\r\nget a\r\n",
            r"set a 0 0 1\r\n1\r\n +16",
        );
        check(b"set a 0 0 1\r\n", "incomplete");
        check(b"set a 0 0 1\r\n1\r", "incomplete");
        check(b"set a 0 0 0\r\n\r\n", r"set a 0 0 0\r\n\r\n +all");
        check(b"set a 0 0 1\r\n\n\r\n", r"set a 0 0 1\r\n\n\r\n +all");
        check(b"set a 0 0 1\n1\r\n", r"set a 0 0 1\r\n1\r\n +all");
        check(b"add a 1 2 1\r\n1\r\n", r"add a 1 2 1\r\n1\r\n +all");
        check(
            b"replace a 1 2 1\r\n1\r\n",
            r"replace a 1 2 1\r\n1\r\n +all",
        );
        check(b"append a 1 2 1\r\n1\r\n", r"append a 1 2 1\r\n1\r\n +all");
        check(
            b"prepend a 1 2 1 noreply\r\n1\r\n",
            r"prepend a 1 2 1 noreply\r\n1\r\n +all",
        );
        // The data block is exactly <bytes> + 2 bytes; parsing resumes after it.
        check(b"set a 0 0 1\r\nxyz\r\n", "CLIENT_ERROR bad data chunk +16");
        check(
            b"set a 0 0 3\r\nxyz\nab\r\n",
            "CLIENT_ERROR bad data chunk +18",
        );
        check(
            b"set a 0 0 1 noreply\r\nxyz\r\n",
            "CLIENT_ERROR bad data chunk +24 noreply",
        );
        // noreply is the last token, whatever its position.
        check(
            b"set a 0 0 noreply\r\nfoo\r\n",
            "CLIENT_ERROR bad command line format +19 noreply",
        );
        check(b"set a 0 0 1 2\r\n1\r\n", r"set a 0 0 1\r\n1\r\n +all");
        check(b"set a 0 0 1 noreply 3\r\n1\r\n", "ERROR +23");
        check(b"set a 1 2\r\n", "ERROR +all");
        check(b"set a 0\t0 1\r\n1\r\n", "ERROR +13");
        // Numbers, read as C does and truncated as memcached stores them.
        check(
            b"set a 4294967296 0 1\r\n1\r\n",
            r"set a 0 0 1\r\n1\r\n +all",
        );
        check(
            b"set a 18446744073709551615 0 1\r\n1\r\n",
            r"set a 4294967295 0 1\r\n1\r\n +all",
        );
        check(
            b"set a 18446744073709551616 0 1\r\n1\r\n",
            "CLIENT_ERROR bad command line format +32",
        );
        check(
            b"set a -1 0 1\r\n1\r\n",
            "CLIENT_ERROR bad command line format +14",
        );
        check(b"set a -0 0 1\r\n1\r\n", r"set a 0 0 1\r\n1\r\n +all");
        check(
            b"set a 0 -3000000000 1\r\n1\r\n",
            r"set a 0 1294967296 1\r\n1\r\n +all",
        );
        check(
            b"set a 0 3000000000 1\r\n1\r\n",
            r"set a 0 -1294967296 1\r\n1\r\n +all",
        );
        check(
            b"set a 0 99999999999999999999 1\r\n",
            "CLIENT_ERROR bad command line format +all",
        );
        check(
            b"set a 0 0 4294967297\r\n1\r\n",
            r"set a 0 0 1\r\n1\r\n +all",
        );
        check(
            b"set a 0 0 2147483646\r\n",
            "CLIENT_ERROR bad command line format +all",
        );
        check(
            b"set a 0 0 2147483648\r\n",
            "CLIENT_ERROR bad command line format +all",
        );
        check(
            b"set a 0 0 -1\r\n",
            "CLIENT_ERROR bad command line format +all",
        );
        check(b"set a 0 0 1\t\r\n1\r\n", r"set a 0 0 1\r\n1\r\n +all");
        check(b"set a 0 0 +1\r\n1\r\n", r"set a 0 0 1\r\n1\r\n +all");
        check(b"set a 0 0 01\r\n1\r\n", r"set a 0 0 1\r\n1\r\n +all");
        check(
            b"set a 0 0 1x\r\n1\r\n",
            "CLIENT_ERROR bad command line format +14",
        );
        let key251 = "k".repeat(251);
        check(
            format!("set {key251} 0 0 1\r\n1\r\n").as_bytes(),
            "CLIENT_ERROR bad command line format +263",
        );
        // Too large: memcached swallows the data block and drops the old value
        // (for set only).
        check(
            b"set a 0 0 1048517\r\n",
            "SERVER_ERROR object too large for cache +all swallow=1048519 unlink=a",
        );
        check(b"set a 0 0 1048516\r\n", "incomplete");
        check(
            b"set a 5 0 1048513\r\n",
            "SERVER_ERROR object too large for cache +all swallow=1048515 unlink=a",
        );
        check(
            b"add a 0 0 2000000 noreply\r\n",
            "SERVER_ERROR object too large for cache +all swallow=2000002 noreply",
        );
        check(b"cas a 0 0 1 99\r\n1\r\n", r"cas a 0 0 1 99\r\n1\r\n +all");
        check(b"cas a 0 0 1 99 \r\n1\r\n", r"cas a 0 0 1 99\r\n1\r\n +all");
        check(
            b"cas a 0 0 1 1 noreply\r\n1\r\n",
            r"cas a 0 0 1 1 noreply\r\n1\r\n +all",
        );
        check(b"cas a 0 0 1\r\n1\r\n", "ERROR +13");
        check(
            b"cas a 0 0 1 x\r\n1\r\n",
            "CLIENT_ERROR bad command line format +15",
        );
        check(
            b"cas a 0 0 1 -1\r\n1\r\n",
            "CLIENT_ERROR bad command line format +16",
        );
        check(
            b"cas a 0 0 1 noreply\r\n1\r\n",
            "CLIENT_ERROR bad command line format +21 noreply",
        );
    }

    #[test]
    fn arithmetic_touch_delete() {
        check(b"incr n 5\r\n", r"incr n 5\r\n +all");
        check(b"decr n 5 noreply\r\n", r"decr n 5 noreply\r\n +all");
        check(b"incr n 1 2\r\n", r"incr n 1\r\n +all");
        check(
            b"incr n 18446744073709551615\r\n",
            r"incr n 18446744073709551615\r\n +all",
        );
        check(
            b"incr n 18446744073709551616\r\n",
            "CLIENT_ERROR invalid numeric delta argument +all",
        );
        check(
            b"incr n -1\r\n",
            "CLIENT_ERROR invalid numeric delta argument +all",
        );
        check(
            b"incr n abc noreply\r\n",
            "CLIENT_ERROR invalid numeric delta argument +all noreply",
        );
        check(
            b"incr n noreply\r\n",
            "CLIENT_ERROR invalid numeric delta argument +all noreply",
        );
        check(b"incr n\r\n", "ERROR +all");
        check(b"incr n 1 2 3\r\n", "ERROR +all");
        check(b"touch n 10\r\n", r"touch n 10\r\n +all");
        check(b"touch n 1 2\r\n", r"touch n 1\r\n +all");
        check(b"touch n 1 noreply\r\n", r"touch n 1 noreply\r\n +all");
        check(
            b"touch n x\r\n",
            "CLIENT_ERROR invalid exptime argument +all",
        );
        check(
            b"touch n x noreply\r\n",
            "CLIENT_ERROR invalid exptime argument +all noreply",
        );
        check(b"touch n\r\n", "ERROR +all");
        check(b"delete n\r\n", r"delete n\r\n +all");
        check(b"delete n 0\r\n", r"delete n\r\n +all");
        check(b"delete n noreply\r\n", r"delete n noreply\r\n +all");
        check(b"delete n 0 noreply\r\n", r"delete n noreply\r\n +all");
        check(
            b"delete n 1\r\n",
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply] +all",
        );
        check(
            b"delete n 1 noreply\r\n",
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply] +all noreply",
        );
        check(
            b"delete n x y\r\n",
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply] +all",
        );
        check(
            b"delete n 0 x\r\n",
            "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply] +all",
        );
        check(b"delete\r\n", "ERROR +all");
        check(b"delete a b c d\r\n", "ERROR +all");
        let key251 = "k".repeat(251);
        for line in [
            format!("delete {key251}\r\n"),
            format!("incr {key251} 1\r\n"),
            format!("touch {key251} 1\r\n"),
        ] {
            check(line.as_bytes(), "CLIENT_ERROR bad command line format +all");
        }
        check(
            format!("delete {key251} noreply\r\n").as_bytes(),
            "CLIENT_ERROR bad command line format +all noreply",
        );
    }

    #[test]
    fn other_commands() {
        check(b"flush_all\r\n", r"flush_all\r\n +all");
        check(b"flush_all 0\r\n", r"flush_all 0\r\n +all");
        check(b"flush_all -1\r\n", r"flush_all -1\r\n +all");
        check(b"flush_all noreply\r\n", r"flush_all noreply\r\n +all");
        check(
            b"flush_all 10 noreply\r\n",
            r"flush_all 10 noreply\r\n +all",
        );
        check(b"flush_all 1 2\r\n", r"flush_all 1\r\n +all");
        check(
            b"flush_all x\r\n",
            "CLIENT_ERROR invalid exptime argument +all",
        );
        check(
            b"flush_all x noreply\r\n",
            "CLIENT_ERROR invalid exptime argument +all noreply",
        );
        check(
            b"flush_all noreply 5\r\n",
            "CLIENT_ERROR invalid exptime argument +all",
        );
        check(b"flush_all 1 2 3\r\n", "ERROR +all");
        check(b"verbosity 1\r\n", r"verbosity 1\r\n +all");
        check(b"verbosity 1 2\r\n", r"verbosity 1\r\n +all");
        check(b"verbosity 1 noreply\r\n", r"verbosity 1 noreply\r\n +all");
        check(b"verbosity\r\n", "ERROR +all");
        check(b"verbosity 1 2 3\r\n", "ERROR +all");
        check(
            b"verbosity x\r\n",
            "CLIENT_ERROR bad command line format +all",
        );
        check(
            b"verbosity -1\r\n",
            "CLIENT_ERROR bad command line format +all",
        );
        check(
            b"verbosity noreply\r\n",
            "CLIENT_ERROR bad command line format +all noreply",
        );
        check(b"stats\r\n", r"stats\r\n +all");
        check(b"stats detail on\r\n", r"stats detail on\r\n +all");
        check(b"stats a b c d e f\r\n", r"stats a b c d e f\r\n +all");
        check(b"shutdown\r\n", r"shutdown\r\n +all");
        check(b"shutdown graceful\r\n", r"shutdown graceful\r\n +all");
        check(b"shutdown x y\r\n", r"shutdown now\r\n +all");
        check(b"version\r\n", r"version\r\n +all");
        check(b"version x\r\n", r"version\r\n +all");
        check(b"versionx\r\n", "ERROR +all");
        check(b"VERSION\r\n", "ERROR +all");
        check(b"quit\r\n", r"quit\r\n +all");
        check(b"quit x\r\nversion\r\n", r"quit\r\n +8");
        check(b"slabs automove 1\r\n", r"slabs automove 1\r\n +all");
        for unsupported in ["lru 1", "lru_crawler", "watch", "misbehave"] {
            check(format!("{unsupported}\r\n").as_bytes(), "ERROR +all");
        }
    }

    #[test]
    fn cache_memlimit() {
        check(b"cache_memlimit 100\r\n", r"cache_memlimit 100\r\n +all");
        check(
            b"cache_memlimit 100 noreply\r\n",
            r"cache_memlimit 100 noreply\r\n +all",
        );
        check(b"cache_memlimit\r\n", "ERROR +all");
        check(b"cache_memlimit x\r\n", "ERROR +all");
        check(b"cache_memlimit 1 2 3\r\n", "ERROR +all");
    }

    #[test]
    fn meta_get() {
        check(b"mg foo s v t f\r\n", r"mg foo s v t f\r\n +all");
        check(b"mg foo\r\n", r"mg foo\r\n +all");
        check(b"mg\r\n", "ERROR +all");
        check(b"mn\r\n", r"mn\r\n +all");
        check(b"mn foo bar\r\n", r"mn\r\n +all");
        check(b"mz\r\n", "ERROR +all");
        check(b"m\r\n", "ERROR +all");
        check(
            b"mg foo k v O123 c s t f h l q u\r\n",
            r"mg foo k v O123 c s t f h l q u\r\n +all",
        );
        // Only a flag's first byte matters, except for values.
        check(b"mg foo vxyz kk\r\n", r"mg foo v k\r\n +all");
        check(b"mg foo O\r\n", r"mg foo O\r\n +all");
        check(
            b"mg foo N30 T-1 R0 I P L\r\n",
            r"mg foo N30 T-1 R0 I P L\r\n +all",
        );
        // mg accepts every flag any meta command takes, and any M letter.
        check(
            b"mg foo F1 C2 D3 J4 Mx\r\n",
            r"mg foo F1 C2 D3 J4 Mx\r\n +all",
        );
        check(b"mg foo s s\r\n", "CLIENT_ERROR duplicate flag +all");
        check(b"mg foo \xff\r\n", "CLIENT_ERROR duplicate flag +all");
        check(b"mg foo z\r\n", "CLIENT_ERROR invalid flag +all");
        check(b"mg foo E5\r\n", "CLIENT_ERROR invalid flag +all");
        check(b"mg foo x\r\n", "CLIENT_ERROR invalid flag +all");
        check(b"mg foo S\r\n", "CLIENT_ERROR invalid flag +all");
        check(b"mg foo 1\r\n", "CLIENT_ERROR invalid flag +all");
        check(b"mg foo b ###\r\n", "CLIENT_ERROR invalid flag +all");
        check(
            b"mg foo N\r\n",
            "CLIENT_ERROR bad token in command line format +all",
        );
        check(
            b"mg foo Nx\r\n",
            "CLIENT_ERROR bad token in command line format +all",
        );
        check(
            b"mg foo T\r\n",
            "CLIENT_ERROR bad token in command line format +all",
        );
        check(
            b"mg foo T-\r\n",
            "CLIENT_ERROR bad token in command line format +all",
        );
        check(
            b"mg foo Rx\r\n",
            "CLIENT_ERROR bad token in command line format +all",
        );
        check(
            b"mg foo Cx\r\n",
            "CLIENT_ERROR bad token in command line format +all",
        );
        check(b"mg foo Nx s s\r\n", "CLIENT_ERROR duplicate flag +all");
        check(b"mg foo s s Nx\r\n", "CLIENT_ERROR duplicate flag +all");
        check(b"mg foo Fx z\r\n", "CLIENT_ERROR invalid flag +all");
        check(
            b"mg foo C1 Fx\r\n",
            "CLIENT_ERROR bad command line format +all",
        );
        check(
            b"mg foo Nx Fx\r\n",
            "CLIENT_ERROR bad token in command line format +all",
        );
        check(
            b"mg foo Fx Nx\r\n",
            "CLIENT_ERROR bad token in command line format +all",
        );
        check(
            b"mg foo MSS\r\n",
            "CLIENT_ERROR incorrect length for M token +all",
        );
        check(
            b"mg foo M\r\n",
            "CLIENT_ERROR incorrect length for M token +all",
        );
        check(
            b"mg foo Jx\r\n",
            "CLIENT_ERROR invalid numeric initial value +all",
        );
        check(
            b"mg foo Dx\r\n",
            "CLIENT_ERROR invalid numeric delta value +all",
        );
        check(
            b"mg foo D-1\r\n",
            "CLIENT_ERROR invalid numeric delta value +all",
        );
        let opaque31 = "1".repeat(31);
        check(
            format!("mg foo O{opaque31}\r\n").as_bytes(),
            &format!(r"mg foo O{opaque31}\r\n +all"),
        );
        check(
            format!("mg foo O{opaque31}2\r\n").as_bytes(),
            "CLIENT_ERROR opaque token too long +all",
        );
        check(
            format!("mg foo O{opaque31}2 s s\r\n").as_bytes(),
            "CLIENT_ERROR duplicate flag +all",
        );
        check(
            format!("mg {} v\r\n", "k".repeat(251)).as_bytes(),
            "CLIENT_ERROR bad command line format +all",
        );
        check(
            format!("mg {} z\r\n", "k".repeat(251)).as_bytes(),
            "CLIENT_ERROR bad command line format +all",
        );
        check(
            b"mg foo s t c f l h k v O q u P L I N1 T1 R1\r\n",
            r"mg foo s t c f l h k v O q u P L I N1 T1 R1\r\n +all",
        );
        check(
            b"mg foo s t c f l h k v O q u P L I N1 T1 R1 F1\r\n",
            "CLIENT_ERROR options flags are too long +all",
        );
    }

    #[test]
    fn meta_base64_keys() {
        check(b"mg Zm9v b k v\r\n", r"mg Zm9v b k v\r\n +all key=foo");
        check(b"mg Zm9v! b k\r\n", r"mg Zm9v b k\r\n +all key=foo");
        check(b"mg Zm9v k b O1\r\n", r"mg Zm9v k b O1\r\n +all key=foo");
        check(b"mg Zg== b k\r\n", r"mg Zg== b k\r\n +all key=f");
        check(b"mg Zg=A b k\r\n", r"mg ZgA= b k\r\n +all key=f\x00");
        check(
            b"mg Zm9vZg==Zm9v b k\r\n",
            r"mg Zm9vZg== b k\r\n +all key=foof",
        );
        for key in ["Zm9", "###", "foo", "zz", "====", "Zm9v=x=="] {
            check(
                format!("mg {key} b v\r\n").as_bytes(),
                "CLIENT_ERROR error decoding key +all",
            );
        }
        check(
            b"md !!!! b\r\n",
            "CLIENT_ERROR invalid or duplicate flag +all",
        );
        check(
            b"ms enp6 2 b k c O9 T0 F3\r\nhi\r\n",
            r"ms enp6 2 b k c O9 T0 F3\r\nhi\r\n +all key=zzz",
        );
        check(
            b"ms foo 1 b\r\nx\r\n",
            "CLIENT_ERROR error decoding key +12 swallow=3",
        );
        check(b"me enp6 b\r\n", r"me enp6 b\r\n +all key=zzz");
        check(b"me enp6 b x\r\n", r"me enp6 b\r\n +all key=zzz");
        check(b"me enp6\r\n", r"me enp6\r\n +all");
        check(b"me enp6 x b\r\n", r"me enp6\r\n +all");
        check(
            b"me !!!! b\r\n",
            "CLIENT_ERROR bad command line format +all",
        );
        check(b"me\r\n", "CLIENT_ERROR bad command line format +all");
        check(
            format!("me {}\r\n", "k".repeat(251)).as_bytes(),
            "CLIENT_ERROR bad command line format +all",
        );
    }

    #[test]
    fn meta_set() {
        check(b"ms foo 3\r\nbar\r\n", r"ms foo 3\r\nbar\r\n +all");
        check(b"ms foo 3\r\nbar", "incomplete");
        check(
            b"ms foo 3 T-1 F5 c k O5 q I C9 MR\r\nbar\r\n",
            r"ms foo 3 T-1 F5 c k O5 q I C9 MR\r\nbar\r\n +all",
        );
        for mode in ["E", "A", "P", "R", "S"] {
            check(
                format!("ms foo 1 M{mode}\r\nx\r\n").as_bytes(),
                &format!(r"ms foo 1 M{mode}\r\nx\r\n +all"),
            );
        }
        check(
            b"ms foo\r\nbar\r\n",
            "CLIENT_ERROR bad command line format +8",
        );
        check(
            b"ms foo x\r\nbar\r\n",
            "CLIENT_ERROR bad command line format +10",
        );
        check(
            b"ms foo -1\r\nbar\r\n",
            "CLIENT_ERROR bad command line format +11",
        );
        check(b"ms\r\n", "ERROR +all");
        // ms errors after the length swallow the data block; never noreply.
        check(
            b"ms foo 3 q\r\nbarxx\r\n",
            "CLIENT_ERROR bad data chunk +17",
        );
        check(
            b"ms foo 3 z\r\nbar\r\n",
            "CLIENT_ERROR invalid flag +12 swallow=5",
        );
        check(
            b"ms foo 3 s s\r\nbar\r\n",
            "CLIENT_ERROR duplicate flag +14 swallow=5",
        );
        check(
            b"ms foo 3 MX\r\nbar\r\n",
            "CLIENT_ERROR invalid mode for ms M token +13 swallow=5",
        );
        check(
            b"ms foo 3 Me\r\nbar\r\n",
            "CLIENT_ERROR invalid mode for ms M token +13 swallow=5",
        );
        check(
            b"ms foo 3 Tx\r\nbar\r\n",
            "CLIENT_ERROR bad token in command line format +13 swallow=5",
        );
        check(
            b"ms foo 3 Fx\r\nbar\r\n",
            "CLIENT_ERROR bad command line format +13 swallow=5",
        );
        check(
            b"ms foo 3 F-1\r\nbar\r\n",
            "CLIENT_ERROR bad command line format +14 swallow=5",
        );
        check(
            b"ms foo 3 F4294967296\r\nbar\r\n",
            r"ms foo 3 F0\r\nbar\r\n +all",
        );
        let opaque = "1".repeat(33);
        check(
            format!("ms foo 1 O{opaque}\r\nx\r\n").as_bytes(),
            "CLIENT_ERROR opaque token too long +45 swallow=3",
        );
        // An invalid mode wins over a long opaque.
        check(
            format!("ms foo 1 O{opaque} MX\r\nx\r\n").as_bytes(),
            "CLIENT_ERROR invalid mode for ms M token +48 swallow=3",
        );
        check(
            b"ms foo 2000000 T1\r\n",
            "SERVER_ERROR object too large for cache +all swallow=2000002 unlink=foo",
        );
        // The limit counts the decoded key and the client flags, as memcached
        // does (thresholds measured on 1.6.18).
        check(
            b"ms Zm9v 1048511 b F1\r\n",
            "SERVER_ERROR object too large for cache +all swallow=1048513 unlink=foo",
        );
        check(b"ms Zm9v 1048510 b F1\r\n", "incomplete");
        check(
            b"ms Zm9v 1048515 b\r\n",
            "SERVER_ERROR object too large for cache +all swallow=1048517 unlink=foo",
        );
        check(b"ms Zm9v 1048514 b\r\n", "incomplete");
        check(
            b"ms foo 2000000 z\r\n",
            "CLIENT_ERROR invalid flag +all swallow=2000002",
        );
        // Too many tokens and a long key are refused before the length is read.
        check(
            b"ms foo 1 s t c f l h k v O q u P L I N1 T1 R1\r\nx\r\n",
            "CLIENT_ERROR options flags too long +47",
        );
        check(
            format!("ms {} 1\r\nx\r\n", "k".repeat(251)).as_bytes(),
            "CLIENT_ERROR bad command line format +258",
        );
    }

    #[test]
    fn meta_delete_and_arithmetic() {
        check(b"md s\r\n", r"md s\r\n +all");
        check(
            b"md s q O1 k C5 I T30\r\n",
            r"md s q O1 k C5 I T30\r\n +all",
        );
        check(b"md\r\n", "ERROR +all");
        check(b"md s z\r\n", "CLIENT_ERROR invalid or duplicate flag +all");
        check(
            b"md s s s\r\n",
            "CLIENT_ERROR invalid or duplicate flag +all",
        );
        check(b"md n x\r\n", "CLIENT_ERROR invalid or duplicate flag +all");
        check(
            b"md n Tx\r\n",
            "CLIENT_ERROR invalid or duplicate flag +all",
        );
        check(
            format!("md s O{}\r\n", "1".repeat(33)).as_bytes(),
            "CLIENT_ERROR opaque token too long +all",
        );
        check(
            b"md foo s t c f l h k v O q u P L I N1 T1 R1 F1\r\n",
            "CLIENT_ERROR options flags too long +all",
        );
        check(b"ma n\r\n", r"ma n\r\n +all");
        check(b"ma n v D10 MI\r\n", r"ma n v D10 MI\r\n +all");
        for mode in ["I", "+", "D", "-"] {
            check(
                format!("ma n M{mode}\r\n").as_bytes(),
                &format!(r"ma n M{mode}\r\n +all"),
            );
        }
        check(
            b"ma n N0 J7 v t c k O1\r\n",
            r"ma n N0 J7 v t c k O1\r\n +all",
        );
        check(b"ma\r\n", "ERROR +all");
        check(
            b"ma n v Md\r\n",
            "CLIENT_ERROR invalid mode for ma M token +all",
        );
        check(
            b"ma n v Mx\r\n",
            "CLIENT_ERROR invalid mode for ma M token +all",
        );
        check(
            b"ma n Dx\r\n",
            "CLIENT_ERROR invalid or duplicate flag +all",
        );
        check(
            b"ma n D-1\r\n",
            "CLIENT_ERROR invalid or duplicate flag +all",
        );
        check(
            b"ma n Jx\r\n",
            "CLIENT_ERROR invalid or duplicate flag +all",
        );
        check(
            b"ma n v v\r\n",
            "CLIENT_ERROR invalid or duplicate flag +all",
        );
        check(
            b"ma foo s t c f l h k v O q u P L I N1 T1 R1 F1\r\n",
            "CLIENT_ERROR options flags too long +all",
        );
        check(
            format!("ma {}\r\n", "k".repeat(251)).as_bytes(),
            "CLIENT_ERROR bad command line format +all",
        );
    }

    fn meta_get_flags(input: &[u8]) -> MetaFlags<'_> {
        match parse(input, &Limits::default()) {
            Parsed::Request {
                request: Request::MetaGet(MetaRequest { key, flags }),
                ..
            } => {
                assert_eq!(&*key, b"foo");
                flags
            }
            other => panic!("not a meta get: {}", render(input, &other)),
        }
    }

    #[test]
    fn meta_flags_are_typed() {
        let flags = meta_get_flags(b"mg foo O7 N-5 T30 R4 C9 F3 MR D2 J1 I q u v k c f h\r\n");
        assert_eq!(flags.opaque, Some(&b"7"[..]));
        assert_eq!(flags.vivify_ttl, Some(-5));
        assert_eq!(flags.ttl, Some(30));
        assert_eq!(flags.recache_ttl, Some(4));
        assert_eq!(flags.compare_cas, Some(9));
        assert_eq!(flags.client_flags, Some(3));
        assert_eq!(flags.mode, Some(b'R'));
        assert_eq!(flags.delta, Some(2));
        assert_eq!(flags.initial, Some(1));
        assert!(flags.invalidate && flags.quiet && flags.no_bump && flags.return_value);
        assert!(flags.return_key && flags.return_cas && flags.return_flags && flags.return_hit);
        assert!(!flags.return_last_access && !flags.return_size && !flags.return_ttl);
        assert!(!flags.base64);
        assert_eq!(flags.order.as_slice(), b"ONTRCFMDJIquvkcfh");
        let echoed: Vec<u8> = flags
            .returned(crate::response::MG_HIT_RETURN_FLAGS)
            .collect();
        assert_eq!(echoed, b"Okcfh");

        let flags = meta_get_flags(b"mg foo l s t P L\r\n");
        assert!(flags.return_last_access && flags.return_size && flags.return_ttl);
        assert!(!flags.return_value && flags.opaque.is_none() && flags.mode.is_none());
        assert_eq!(flags.order.as_slice(), b"lstPL");
    }

    #[test]
    fn durability_flag_takes_a_replica_count() {
        assert_eq!(meta_get_flags(b"mg foo v Y\r\n").durability, Some(0));
        assert_eq!(meta_get_flags(b"mg foo Y2 v\r\n").durability, Some(2));
        assert_eq!(meta_get_flags(b"mg foo Y255\r\n").durability, Some(255));
        assert_eq!(meta_get_flags(b"mg foo v\r\n").durability, None);
        // A request written back carries its count (the fuzz targets' round trip).
        check(b"ma k R7 Y5\r\n", r"ma k R7 Y5\r\n +all");
        check(b"ms k 1 Y\r\nx\r\n", r"ms k 1 Y0\r\nx\r\n +all");
        for bad in [
            &b"mg foo Y256\r\n"[..],
            b"mg foo Y-1\r\n",
            b"mg foo Yx\r\n",
            b"mg foo Y0001\r\n",
        ] {
            let parsed = parse(bad, &Limits::default());
            assert!(
                matches!(
                    parsed,
                    Parsed::Error {
                        error: ProtocolError::BadToken,
                        ..
                    }
                ),
                "{}",
                render(bad, &parsed)
            );
        }
    }

    #[test]
    fn limits_are_configurable() {
        let limits = Limits {
            key_max_bytes: 3,
            item_size_max_bytes: 100,
        };
        let parsed = parse(b"get abcd\r\n", &limits);
        assert_eq!(
            render(b"get abcd\r\n", &parsed),
            "CLIENT_ERROR bad command line format +all"
        );
        let parsed = parse(b"set abc 0 0 40\r\n", &limits);
        assert_eq!(
            render(b"set abc 0 0 40\r\n", &parsed),
            "SERVER_ERROR object too large for cache +all swallow=42 unlink=abc"
        );
    }
}
