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

/// Whether a meta command takes Kura's `r` flag (mg does; ms, md and ma answer it as
/// memcached answers any flag it does not know).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowsFlag {
    Accepted,
    Refused,
}

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
                b"failover" => self.ok(Request::Failover {
                    arguments: self.line.tokens_after(0),
                }),
                b"version" => self.ok(Request::Version),
                b"refresh_certs" => self.ok(Request::RefreshCerts),
                b"quit" => self.ok(Request::Quit),
                b"verbosity" => self.verbosity(),
                // memcached's slab, LRU and log-watch administration has no
                // meaning for Kura's store; those commands answer ERROR. memcached
                // reads `noreply` on `lru`, `watch` and `extstore` (not on
                // `lru_crawler`) before anything else, and then answers nothing.
                b"lru" | b"watch" | b"extstore" => self.fail_noreply(
                    ProtocolError::UnknownCommand,
                    self.line.last() == b"noreply",
                ),
                b"lru_crawler" => self.fail(ProtocolError::UnknownCommand),
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
    fn meta_flags(
        &self,
        first: usize,
        rows_flag: RowsFlag,
    ) -> Result<(Cow<'a, [u8]>, MetaFlags<'a>), ProtocolError> {
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
                // Kura's own, on mg only: a table range's rows one by one.
                b'r' if rows_flag == RowsFlag::Accepted => flags.rows = true,
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
        match self.meta_flags(2, RowsFlag::Accepted) {
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
        match self.meta_flags(2, RowsFlag::Refused) {
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
        match self.meta_flags(2, RowsFlag::Refused) {
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
        let (key, flags) = match self.meta_flags(3, RowsFlag::Refused) {
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
mod tests;
