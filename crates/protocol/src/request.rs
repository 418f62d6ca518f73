//! Requests: what a client asked for, as typed values that borrow from the
//! read buffer, and their encoding back into wire bytes (for clients, benches
//! and the round-trip tests).
//!
//! Not for parsing (see [`crate::parse`]) or replies (see [`crate::response`]).
//!
//! Invariants of a parsed request:
//! - keys are non-empty, contain no space, `\n` or NUL (except base64-decoded
//!   meta keys, which are arbitrary bytes) and are at most
//!   [`crate::Limits::key_max_bytes`] long as sent on the wire;
//! - numbers were read with memcached's rules ([`crate::number`]), so 32-bit
//!   values are already truncated the way memcached truncates them;
//! - `data` is the value without its trailing `\r\n`.

use std::borrow::Cow;
use std::fmt;

use crate::number::{write_i64, write_u64};

/// Which storage command: they share one syntax and differ in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StorageCommand {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    /// `cas`: store only if the item's CAS is still `cas_unique`.
    Cas,
}

impl StorageCommand {
    /// The command's name on the wire.
    pub fn name(&self) -> &'static [u8] {
        match self {
            Self::Set => b"set",
            Self::Add => b"add",
            Self::Replace => b"replace",
            Self::Append => b"append",
            Self::Prepend => b"prepend",
            Self::Cas => b"cas",
        }
    }
}

/// Which retrieval command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetrievalCommand {
    /// `get` (and the ancient `bget`, which memcached serves the same way).
    Get,
    /// `gets`: like get, with the CAS in each `VALUE` line.
    Gets,
    /// `gat <exptime>`: get and touch.
    Gat,
    /// `gats <exptime>`: get and touch, with CAS.
    Gats,
}

impl RetrievalCommand {
    /// The command's name on the wire.
    pub fn name(&self) -> &'static [u8] {
        match self {
            Self::Get => b"get",
            Self::Gets => b"gets",
            Self::Gat => b"gat",
            Self::Gats => b"gats",
        }
    }

    /// Whether `VALUE` lines carry the CAS.
    pub fn returns_cas(&self) -> bool {
        matches!(self, Self::Gets | Self::Gats)
    }

    /// Whether the command also sets a new exptime on every hit.
    pub fn touches(&self) -> bool {
        matches!(self, Self::Gat | Self::Gats)
    }
}

/// `incr` or `decr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArithmeticCommand {
    Incr,
    Decr,
}

/// What `shutdown` asked for. memcached started without `-A` answers every
/// mode with `ERROR: shutdown not enabled`; with it, `Invalid` gets
/// `CLIENT_ERROR invalid shutdown mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShutdownMode {
    /// `shutdown`
    Immediate,
    /// `shutdown graceful`
    Graceful,
    /// Anything else after `shutdown`.
    Invalid,
}

/// Space-separated tokens of a request line, borrowed from the read buffer:
/// the keys of a multi-get, the arguments of `stats`.
///
/// A multi-get has no key limit (memcached re-tokenises long lines in chunks),
/// so this iterates lazily instead of collecting. Equality compares the token
/// sequences.
#[derive(Clone, Copy)]
pub struct Tokens<'a> {
    rest: &'a [u8],
}

impl<'a> Tokens<'a> {
    /// Tokens of `line`, split on spaces only (tabs are part of a token, as in
    /// memcached). Runs of spaces separate; they never make empty tokens.
    pub fn new(line: &'a [u8]) -> Self {
        Self { rest: line }
    }

    /// Whether there is no token left.
    pub fn is_empty(&self) -> bool {
        self.rest.iter().all(|&byte| byte == b' ')
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let start = self.rest.iter().position(|&byte| byte != b' ')?;
        let rest = &self.rest[start..];
        let end = rest
            .iter()
            .position(|&byte| byte == b' ')
            .unwrap_or(rest.len());
        let (token, after) = rest.split_at(end);
        self.rest = after;
        Some(token)
    }
}

impl PartialEq for Tokens<'_> {
    fn eq(&self, other: &Self) -> bool {
        (*self).eq(*other)
    }
}

impl Eq for Tokens<'_> {}

impl fmt::Debug for Tokens<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_list()
            .entries((*self).map(String::from_utf8_lossy))
            .finish()
    }
}

/// The meta flags of one request in the order the client gave them, one byte
/// (the flag letter) each. memcached writes return flags in request order, so
/// the server walks this to build the reply. At most 20 (memcached refuses a
/// meta line with more than 20 tokens, command and key included).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlagOrder {
    letters: [u8; FlagOrder::CAPACITY],
    len: u8,
}

impl FlagOrder {
    /// More than any meta line memcached accepts can hold.
    pub const CAPACITY: usize = 20;

    /// Appends a flag letter; letters beyond [`Self::CAPACITY`] are dropped
    /// (the parser never gets there).
    pub fn push(&mut self, letter: u8) {
        if let Some(slot) = self.letters.get_mut(usize::from(self.len)) {
            *slot = letter;
            self.len += 1;
        }
    }

    /// The letters in request order.
    pub fn as_slice(&self) -> &[u8] {
        &self.letters[..usize::from(self.len)]
    }

    /// Whether `letter` was given.
    pub fn contains(&self, letter: u8) -> bool {
        self.as_slice().contains(&letter)
    }
}

impl fmt::Debug for FlagOrder {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "FlagOrder({:?})",
            String::from_utf8_lossy(self.as_slice())
        )
    }
}

/// The validated flags of a meta command, as memcached 1.6.18's
/// `_meta_flag_preparse` reads them. Every flag is accepted by every meta
/// command (mg ignores `F`, `C`, `D`, …), except that `M` is checked per
/// command: ms takes `E A P R S`, ma takes `I + D -` (uppercase only in
/// 1.6.18), mg takes any byte.
///
/// 1.6.18 has no `E`, `x` or `S` flags (later versions added them); it replies
/// `CLIENT_ERROR invalid flag`, and so does Kura.
///
/// TTL values are as memcached's `int32_t` sees them: negative means
/// "already expired", over 30 days means a Unix time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MetaFlags<'a> {
    /// `b`: the key was sent base64-encoded (it is decoded in
    /// [`MetaRequest::key`]); echo it encoded, followed by ` b`.
    pub base64: bool,
    /// `c`: return the CAS.
    pub return_cas: bool,
    /// `f`: return the client flags.
    pub return_flags: bool,
    /// `h`: return whether the item was fetched before.
    pub return_hit: bool,
    /// `k`: return the key.
    pub return_key: bool,
    /// `l`: return the seconds since the last access.
    pub return_last_access: bool,
    /// `O<opaque>`: echoed back verbatim; at most 31 bytes after the `O`.
    pub opaque: Option<&'a [u8]>,
    /// `q`: quiet mode: suppress the nominal reply (mg: `EN`; ms, md, ma:
    /// `HD`, and ma's `VA` too).
    pub quiet: bool,
    /// `s`: return the value's size.
    pub return_size: bool,
    /// `t`: return the remaining TTL (`-1` for none).
    pub return_ttl: bool,
    /// `v`: return the value.
    pub return_value: bool,
    /// `u`: don't bump the item in the LRU.
    pub no_bump: bool,
    /// `N<ttl>`: vivify on miss with this TTL.
    pub vivify_ttl: Option<i64>,
    /// `R<ttl>`: win a recache token if the remaining TTL is below this.
    pub recache_ttl: Option<i64>,
    /// `T<ttl>`: set this TTL (mg: touch; ms: the item's TTL; md with `I`).
    pub ttl: Option<i64>,
    /// `I`: invalidate: md marks stale instead of deleting; ms with `C`
    /// stores a stale item.
    pub invalidate: bool,
    /// `C<cas>`: compare this CAS before acting.
    pub compare_cas: Option<u64>,
    /// `F<flags>`: client flags to store (ms).
    pub client_flags: Option<u32>,
    /// `M<mode>`: the mode letter, validated for ms and ma.
    pub mode: Option<u8>,
    /// `D<delta>`: ma's delta (default 1).
    pub delta: Option<u64>,
    /// `J<initial>`: ma's initial value on vivify (default 0).
    pub initial: Option<u64>,
    /// `Y` or `Y<n>` (Kura's own, not memcached's): the reply waits until what it
    /// reports is on this node's disk (`Y`, `Y0`) and on `n` replicas' disks, never
    /// less than the server's default.
    pub durability: Option<u8>,
    /// `r` (Kura's own, mg only): a table range's rows one by one instead of one
    /// item holding them all (`docs/tables.md`).
    pub rows: bool,
    /// Every flag letter in request order, including the ones above and the
    /// accepted-but-ignored proxy flags `P` and `L`.
    pub order: FlagOrder,
}

impl<'a> MetaFlags<'a> {
    /// The flags the client gave that appear in `returnable`, in request order:
    /// pass one of the `*_RETURN_FLAGS` sets from [`crate::response`].
    pub fn returned<'s>(&'s self, returnable: &'s [u8]) -> impl Iterator<Item = u8> + 's {
        self.order
            .as_slice()
            .iter()
            .copied()
            .filter(move |letter| returnable.contains(letter))
    }
}

/// The key and flags of a meta command.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MetaRequest<'a> {
    /// The key, base64-decoded when [`MetaFlags::base64`] is set (then owned).
    pub key: Cow<'a, [u8]>,
    pub flags: MetaFlags<'a>,
}

/// The mode of an `ms`, from its `M` flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetaSetMode {
    /// `ME`: add.
    Add,
    /// `MA`: append.
    Append,
    /// `MP`: prepend.
    Prepend,
    /// `MR`: replace.
    Replace,
    /// `MS` or no `M`: set.
    Set,
}

/// The direction of an `ma`, from its `M` flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetaArithmeticMode {
    /// `MI`, `M+` or no `M`.
    Increment,
    /// `MD`, `M-`.
    Decrement,
}

impl MetaRequest<'_> {
    /// ms's mode; only meaningful on a parsed `ms` (the parser rejected any
    /// other letter there).
    pub fn set_mode(&self) -> MetaSetMode {
        match self.flags.mode {
            Some(b'E') => MetaSetMode::Add,
            Some(b'A') => MetaSetMode::Append,
            Some(b'P') => MetaSetMode::Prepend,
            Some(b'R') => MetaSetMode::Replace,
            _ => MetaSetMode::Set,
        }
    }

    /// ma's direction; only meaningful on a parsed `ma`.
    pub fn arithmetic_mode(&self) -> MetaArithmeticMode {
        match self.flags.mode {
            Some(b'D') | Some(b'-') => MetaArithmeticMode::Decrement,
            _ => MetaArithmeticMode::Increment,
        }
    }
}

/// One client request. Borrowed from the read buffer it was parsed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// `set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]`
    /// and `cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]`,
    /// followed by the data block.
    Storage {
        command: StorageCommand,
        key: &'a [u8],
        flags: u32,
        /// memcached's `int32_t` exptime: 0 never expires, negative is already
        /// expired, over 30 days (2592000) is a Unix time.
        exptime: i64,
        /// 0 unless `command` is [`StorageCommand::Cas`].
        cas_unique: u64,
        noreply: bool,
        data: &'a [u8],
    },
    /// `get|gets <key>*` and `gat|gats <exptime> <key>*`. Every key is at most
    /// the key limit (memcached answers a multi-get with any longer key with
    /// the error alone, dropping the hits before it). There may be no keys at
    /// all (`gat 10`): memcached then replies `END`.
    Retrieval {
        command: RetrievalCommand,
        /// The new exptime for gat/gats; 0 for get/gets.
        exptime: i64,
        keys: Tokens<'a>,
    },
    /// `delete <key> [0] [noreply]`
    Delete { key: &'a [u8], noreply: bool },
    /// `incr|decr <key> <delta> [noreply]`
    Arithmetic {
        command: ArithmeticCommand,
        key: &'a [u8],
        delta: u64,
        noreply: bool,
    },
    /// `touch <key> <exptime> [noreply]`
    Touch {
        key: &'a [u8],
        exptime: i64,
        noreply: bool,
    },
    /// `flush_all [delay] [noreply]`. memcached treats a delay of 0 or less
    /// like no delay.
    FlushAll { delay: Option<i64>, noreply: bool },
    /// `version`
    Version,
    /// `refresh_certs`: read the TLS certificates again; `ERROR` without TLS.
    RefreshCerts,
    /// `cache_memlimit <megabytes> [noreply]`: set the memory limit (`-m`).
    CacheMemlimit { megabytes: u32, noreply: bool },
    /// `verbosity <level> [noreply]`; memcached replies `OK`.
    Verbosity { level: u32, noreply: bool },
    /// `stats [arguments…]`, arguments raw (`reset`, `settings`, `items`,
    /// `slabs`, `detail on`, `cachedump 1 1`, …): the server decides.
    Stats { arguments: Tokens<'a> },
    /// `slabs [arguments…]`, arguments raw (`automove 1`, `reassign 1 2`): memcached's
    /// slab-allocator administration; the server answers as memcached would with no
    /// slab to move.
    Slabs { arguments: Tokens<'a> },
    /// `replicaof <host> <port>` or `replicaof no one` (Redis's words): Kura's own, to
    /// follow a primary or stop following; arguments raw, the server decides.
    ReplicaOf { arguments: Tokens<'a> },
    /// `replicate <history> <epoch> <lsn>`: Kura's own, a replica asking for the log
    /// from its position; the connection then carries the log (see the server's
    /// `replication` module). Arguments raw.
    Replicate { arguments: Tokens<'a> },
    /// `fence <history> <epoch> <port>`: Kura's own, sent by a node that became the
    /// primary of a newer epoch to the primary it followed, which then follows it
    /// (see the server's `replication` module). Arguments raw.
    Fence { arguments: Tokens<'a> },
    /// `failover to <host> <port> [timeout ms]` (Redis's `FAILOVER TO`): Kura's own,
    /// a standalone primary handing over to one of its replicas. Arguments raw.
    Failover { arguments: Tokens<'a> },
    /// `quit`: close the connection after flushing earlier replies.
    Quit,
    /// `shutdown [graceful]`
    Shutdown { mode: ShutdownMode },
    /// `mg <key> <flags>*`
    MetaGet(MetaRequest<'a>),
    /// `ms <key> <datalen> <flags>*` and its data block.
    MetaSet {
        request: MetaRequest<'a>,
        data: &'a [u8],
    },
    /// `md <key> <flags>*`
    MetaDelete(MetaRequest<'a>),
    /// `ma <key> <flags>*`
    MetaArithmetic(MetaRequest<'a>),
    /// `mn`: reply `MN` and flush.
    MetaNoop,
    /// `me <key> [b]`: the debug dump of one item.
    MetaDebug {
        /// Decoded when `base64` is set.
        key: Cow<'a, [u8]>,
        base64: bool,
    },
}

impl Request<'_> {
    /// Whether the client asked for no reply (`noreply`, the classic commands only).
    pub fn noreply(&self) -> bool {
        match self {
            Request::Storage { noreply, .. }
            | Request::Delete { noreply, .. }
            | Request::Arithmetic { noreply, .. }
            | Request::Touch { noreply, .. }
            | Request::FlushAll { noreply, .. }
            | Request::CacheMemlimit { noreply, .. }
            | Request::Verbosity { noreply, .. } => *noreply,
            _ => false,
        }
    }

    /// Appends the request as a client would send it (data block included).
    /// `parse` of these bytes gives back an equal request, for requests that
    /// satisfy the invariants in the module docs.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        match self {
            Request::Storage {
                command,
                key,
                flags,
                exptime,
                cas_unique,
                noreply,
                data,
            } => {
                out.extend_from_slice(command.name());
                out.push(b' ');
                out.extend_from_slice(key);
                out.push(b' ');
                write_u64(out, u64::from(*flags));
                out.push(b' ');
                write_i64(out, *exptime);
                out.push(b' ');
                write_u64(out, data.len() as u64);
                if *command == StorageCommand::Cas {
                    out.push(b' ');
                    write_u64(out, *cas_unique);
                }
                write_noreply(out, *noreply);
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
            Request::Retrieval {
                command,
                exptime,
                keys,
            } => {
                out.extend_from_slice(command.name());
                if command.touches() {
                    out.push(b' ');
                    write_i64(out, *exptime);
                }
                for key in *keys {
                    out.push(b' ');
                    out.extend_from_slice(key);
                }
                out.extend_from_slice(b"\r\n");
            }
            Request::Delete { key, noreply } => {
                out.extend_from_slice(b"delete ");
                out.extend_from_slice(key);
                write_noreply(out, *noreply);
                out.extend_from_slice(b"\r\n");
            }
            Request::Arithmetic {
                command,
                key,
                delta,
                noreply,
            } => {
                out.extend_from_slice(match command {
                    ArithmeticCommand::Incr => b"incr ",
                    ArithmeticCommand::Decr => b"decr ",
                });
                out.extend_from_slice(key);
                out.push(b' ');
                write_u64(out, *delta);
                write_noreply(out, *noreply);
                out.extend_from_slice(b"\r\n");
            }
            Request::Touch {
                key,
                exptime,
                noreply,
            } => {
                out.extend_from_slice(b"touch ");
                out.extend_from_slice(key);
                out.push(b' ');
                write_i64(out, *exptime);
                write_noreply(out, *noreply);
                out.extend_from_slice(b"\r\n");
            }
            Request::FlushAll { delay, noreply } => {
                out.extend_from_slice(b"flush_all");
                if let Some(delay) = delay {
                    out.push(b' ');
                    write_i64(out, *delay);
                }
                write_noreply(out, *noreply);
                out.extend_from_slice(b"\r\n");
            }
            Request::Version => out.extend_from_slice(b"version\r\n"),
            Request::RefreshCerts => out.extend_from_slice(b"refresh_certs\r\n"),
            Request::CacheMemlimit { megabytes, noreply } => {
                out.extend_from_slice(b"cache_memlimit ");
                write_u64(out, u64::from(*megabytes));
                write_noreply(out, *noreply);
                out.extend_from_slice(b"\r\n");
            }
            Request::Verbosity { level, noreply } => {
                out.extend_from_slice(b"verbosity ");
                write_u64(out, u64::from(*level));
                write_noreply(out, *noreply);
                out.extend_from_slice(b"\r\n");
            }
            Request::Stats { arguments } => {
                out.extend_from_slice(b"stats");
                for argument in *arguments {
                    out.push(b' ');
                    out.extend_from_slice(argument);
                }
                out.extend_from_slice(b"\r\n");
            }
            Request::ReplicaOf { arguments }
            | Request::Replicate { arguments }
            | Request::Fence { arguments }
            | Request::Failover { arguments }
            | Request::Slabs { arguments } => {
                out.extend_from_slice(match self {
                    Request::ReplicaOf { .. } => b"replicaof",
                    Request::Fence { .. } => b"fence",
                    Request::Failover { .. } => b"failover",
                    Request::Slabs { .. } => b"slabs",
                    _ => b"replicate",
                });
                for argument in *arguments {
                    out.push(b' ');
                    out.extend_from_slice(argument);
                }
                out.extend_from_slice(b"\r\n");
            }
            Request::Quit => out.extend_from_slice(b"quit\r\n"),
            Request::Shutdown { mode } => out.extend_from_slice(match mode {
                ShutdownMode::Immediate => b"shutdown\r\n",
                ShutdownMode::Graceful => b"shutdown graceful\r\n",
                ShutdownMode::Invalid => b"shutdown now\r\n",
            }),
            Request::MetaGet(request) => write_meta(out, b"mg", request, None),
            Request::MetaSet { request, data } => {
                write_meta(out, b"ms", request, Some(data.len()));
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
            Request::MetaDelete(request) => write_meta(out, b"md", request, None),
            Request::MetaArithmetic(request) => write_meta(out, b"ma", request, None),
            Request::MetaNoop => out.extend_from_slice(b"mn\r\n"),
            Request::MetaDebug { key, base64 } => {
                out.extend_from_slice(b"me ");
                if *base64 {
                    crate::base64::encode_key(key, out);
                    out.extend_from_slice(b" b");
                } else {
                    out.extend_from_slice(key);
                }
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

fn write_noreply(out: &mut Vec<u8>, noreply: bool) {
    if noreply {
        out.extend_from_slice(b" noreply");
    }
}

fn write_meta(
    out: &mut Vec<u8>,
    command: &[u8],
    request: &MetaRequest<'_>,
    datalen: Option<usize>,
) {
    let flags = &request.flags;
    out.extend_from_slice(command);
    out.push(b' ');
    if flags.base64 {
        crate::base64::encode_key(&request.key, out);
    } else {
        out.extend_from_slice(&request.key);
    }
    if let Some(datalen) = datalen {
        out.push(b' ');
        write_u64(out, datalen as u64);
    }
    for &letter in flags.order.as_slice() {
        out.push(b' ');
        out.push(letter);
        match letter {
            b'O' => out.extend_from_slice(flags.opaque.unwrap_or_default()),
            b'N' => write_i64(out, flags.vivify_ttl.unwrap_or_default()),
            b'R' => write_i64(out, flags.recache_ttl.unwrap_or_default()),
            b'T' => write_i64(out, flags.ttl.unwrap_or_default()),
            b'C' => write_u64(out, flags.compare_cas.unwrap_or_default()),
            b'F' => write_u64(out, u64::from(flags.client_flags.unwrap_or_default())),
            b'M' => out.push(flags.mode.unwrap_or(b'S')),
            b'D' => write_u64(out, flags.delta.unwrap_or(1)),
            b'J' => write_u64(out, flags.initial.unwrap_or_default()),
            b'Y' => write_u64(out, u64::from(flags.durability.unwrap_or_default())),
            _ => {}
        }
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &[u8], expected: &[&str]) {
        let tokens: Vec<String> = Tokens::new(line)
            .map(|token| String::from_utf8_lossy(token).into_owned())
            .collect();
        assert_eq!(
            tokens,
            expected,
            "Tokens::new({:?})",
            String::from_utf8_lossy(line)
        );
        assert_eq!(Tokens::new(line).is_empty(), expected.is_empty());
    }

    #[test]
    fn tokens_split_on_spaces_only() {
        check(b"", &[]);
        check(b"   ", &[]);
        check(b"a", &["a"]);
        check(b"  a  b ", &["a", "b"]);
        check(b"a\tb c", &["a\tb", "c"]);
        check(b"a\rb", &["a\rb"]);
    }

    #[test]
    fn flag_order_keeps_order_and_caps() {
        let mut order = FlagOrder::default();
        for letter in b"svtf" {
            order.push(*letter);
        }
        assert_eq!(order.as_slice(), b"svtf");
        assert!(order.contains(b't'));
        assert!(!order.contains(b'k'));
        for _ in 0..30 {
            order.push(b'x');
        }
        assert_eq!(order.as_slice().len(), FlagOrder::CAPACITY);
    }

    #[test]
    fn returned_filters_in_request_order() {
        let mut flags = MetaFlags::default();
        for letter in b"vksOt" {
            flags.order.push(*letter);
        }
        let returned: Vec<u8> = flags.returned(b"stcflhOk").collect();
        assert_eq!(returned, b"ksOt");
    }
}
