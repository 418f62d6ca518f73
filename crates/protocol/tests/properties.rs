//! Property tests for the parser, over the public API only:
//! - `parse(encode(r)) == r` for generated requests;
//! - a pipeline of requests split at every byte boundary parses to the same
//!   requests, with `Incomplete` until each one is whole;
//! - arbitrary bytes (alone, or after a command name) never panic, and the
//!   parse loop always makes progress.
//!
//! proptest prints the failing input and its seed, and saves the seed in
//! `tests/properties.regressions`, so a failure replays on the next run
//! (commit that file with the fix). `PROPTEST_CASES=10000` runs longer.

use std::borrow::Cow;

use kura_protocol::{
    parse, ArithmeticCommand, FlagOrder, Limits, MetaFlags, MetaRequest, Parsed, Request,
    RetrievalCommand, ShutdownMode, StorageCommand, Tokens,
};
use proptest::prelude::*;

/// Bytes that may appear in a key or token: anything but the separators
/// (space, `\n`) and NUL, which ends a line for memcached.
fn token_byte() -> impl Strategy<Value = u8> {
    any::<u8>().prop_filter("separator", |byte| !matches!(byte, b' ' | b'\n' | 0))
}

fn token(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(token_byte(), 1..=max)
}

/// A key, short most of the time but sometimes at the 250-byte limit.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![4 => token(12), 1 => token(250)]
}

/// A request with all its bytes owned, to build a borrowing [`Request`] from.
#[derive(Clone, Debug)]
enum Model {
    Storage {
        command: StorageCommand,
        key: Vec<u8>,
        flags: u32,
        exptime: i32,
        cas_unique: u64,
        noreply: bool,
        data: Vec<u8>,
    },
    Retrieval {
        command: RetrievalCommand,
        exptime: i32,
        keys: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
        noreply: bool,
    },
    Arithmetic {
        command: ArithmeticCommand,
        key: Vec<u8>,
        delta: u64,
        noreply: bool,
    },
    Touch {
        key: Vec<u8>,
        exptime: i32,
        noreply: bool,
    },
    FlushAll {
        delay: Option<i32>,
        noreply: bool,
    },
    Version,
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Stats {
        arguments: Vec<u8>,
    },
    Quit,
    Shutdown {
        mode: ShutdownMode,
    },
    Meta {
        command: u8,
        key: Vec<u8>,
        flags: Vec<MetaFlag>,
        data: Vec<u8>,
    },
    MetaNoop,
    MetaDebug {
        key: Vec<u8>,
        base64: bool,
    },
}

#[derive(Clone, Debug)]
enum MetaFlag {
    Bare(u8),
    Base64,
    Opaque(Vec<u8>),
    Ttl(u8, i32),
    Cas(u64),
    ClientFlags(u32),
    Mode(u8),
    Number(u8, u64),
}

impl MetaFlag {
    fn letter(&self) -> u8 {
        match self {
            MetaFlag::Bare(letter) | MetaFlag::Ttl(letter, _) | MetaFlag::Number(letter, _) => {
                *letter
            }
            MetaFlag::Base64 => b'b',
            MetaFlag::Opaque(_) => b'O',
            MetaFlag::Cas(_) => b'C',
            MetaFlag::ClientFlags(_) => b'F',
            MetaFlag::Mode(_) => b'M',
        }
    }
}

fn meta_flag(command: u8) -> impl Strategy<Value = MetaFlag> {
    let mode = match command {
        b's' => prop::sample::select(b"EAPRS".to_vec()).boxed(),
        b'a' => prop::sample::select(b"I+D-".to_vec()).boxed(),
        _ => token_byte().boxed(),
    };
    prop_oneof![
        prop::sample::select(b"cfhklqstvuIPL".to_vec()).prop_map(MetaFlag::Bare),
        Just(MetaFlag::Base64),
        prop::collection::vec(token_byte(), 0..=31).prop_map(MetaFlag::Opaque),
        (prop::sample::select(b"NRT".to_vec()), any::<i32>())
            .prop_map(|(letter, ttl)| MetaFlag::Ttl(letter, ttl)),
        any::<u64>().prop_map(MetaFlag::Cas),
        any::<u32>().prop_map(MetaFlag::ClientFlags),
        mode.prop_map(MetaFlag::Mode),
        (prop::sample::select(b"DJ".to_vec()), any::<u64>())
            .prop_map(|(letter, value)| MetaFlag::Number(letter, value)),
    ]
}

/// Meta flags with distinct letters, as many as memcached accepts.
fn meta_flags(command: u8) -> impl Strategy<Value = Vec<MetaFlag>> {
    let most = if command == b's' { 16 } else { 17 };
    prop::collection::vec(meta_flag(command), 0..=most).prop_map(|flags| {
        let mut seen = Vec::new();
        flags
            .into_iter()
            .filter(|flag| {
                let fresh = !seen.contains(&flag.letter());
                seen.push(flag.letter());
                fresh
            })
            .collect()
    })
}

fn meta() -> impl Strategy<Value = Model> {
    prop::sample::select(b"gsda".to_vec()).prop_flat_map(|command| {
        (
            meta_flags(command),
            key(),
            prop::collection::vec(any::<u8>(), 1..=186),
            prop::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(move |(flags, text_key, binary_key, data)| {
                let base64 = flags.iter().any(|flag| matches!(flag, MetaFlag::Base64));
                Model::Meta {
                    command,
                    key: if base64 { binary_key } else { text_key },
                    flags,
                    data: if command == b's' { data } else { Vec::new() },
                }
            })
    })
}

fn model() -> impl Strategy<Value = Model> {
    let storage_command = prop::sample::select(vec![
        StorageCommand::Set,
        StorageCommand::Add,
        StorageCommand::Replace,
        StorageCommand::Append,
        StorageCommand::Prepend,
        StorageCommand::Cas,
    ]);
    let retrieval_command = prop::sample::select(vec![
        RetrievalCommand::Get,
        RetrievalCommand::Gets,
        RetrievalCommand::Gat,
        RetrievalCommand::Gats,
    ]);
    let arithmetic_command =
        prop::sample::select(vec![ArithmeticCommand::Incr, ArithmeticCommand::Decr]);
    prop_oneof![
        (
            storage_command,
            key(),
            any::<u32>(),
            any::<i32>(),
            any::<u64>(),
            any::<bool>(),
            prop::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(command, key, flags, exptime, cas, noreply, data)| {
                Model::Storage {
                    command,
                    key,
                    flags,
                    exptime,
                    cas_unique: if command == StorageCommand::Cas {
                        cas
                    } else {
                        0
                    },
                    noreply,
                    data,
                }
            }),
        // At most 7 keys keep a gat line under 2048 bytes, so that a partial
        // line is not mistaken for one memcached would close on.
        (
            retrieval_command,
            any::<i32>(),
            prop::collection::vec(key(), 1..=7)
        )
            .prop_map(|(command, exptime, keys)| Model::Retrieval {
                command,
                exptime: if command.touches() { exptime } else { 0 },
                keys: keys.join(&b' '),
            }),
        (key(), any::<bool>()).prop_map(|(key, noreply)| Model::Delete { key, noreply }),
        (arithmetic_command, key(), any::<u64>(), any::<bool>()).prop_map(
            |(command, key, delta, noreply)| Model::Arithmetic {
                command,
                key,
                delta,
                noreply
            }
        ),
        (key(), any::<i32>(), any::<bool>()).prop_map(|(key, exptime, noreply)| Model::Touch {
            key,
            exptime,
            noreply
        }),
        (any::<Option<i32>>(), any::<bool>())
            .prop_map(|(delay, noreply)| Model::FlushAll { delay, noreply }),
        Just(Model::Version),
        (any::<u32>(), any::<bool>())
            .prop_map(|(level, noreply)| Model::Verbosity { level, noreply }),
        prop::collection::vec(token(10), 0..4).prop_map(|arguments| Model::Stats {
            arguments: arguments.join(&b' ')
        }),
        Just(Model::Quit),
        prop::sample::select(vec![
            ShutdownMode::Immediate,
            ShutdownMode::Graceful,
            ShutdownMode::Invalid
        ])
        .prop_map(|mode| Model::Shutdown { mode }),
        meta(),
        meta(),
        Just(Model::MetaNoop),
        (
            key(),
            prop::collection::vec(any::<u8>(), 1..=186),
            any::<bool>()
        )
            .prop_map(|(text_key, binary_key, base64)| Model::MetaDebug {
                key: if base64 { binary_key } else { text_key },
                base64
            }),
    ]
}

fn meta_request<'a>(key: &'a [u8], flags: &'a [MetaFlag]) -> MetaRequest<'a> {
    let mut typed = MetaFlags {
        order: FlagOrder::default(),
        ..MetaFlags::default()
    };
    for flag in flags {
        typed.order.push(flag.letter());
        match flag {
            MetaFlag::Bare(letter) => match letter {
                b'c' => typed.return_cas = true,
                b'f' => typed.return_flags = true,
                b'h' => typed.return_hit = true,
                b'k' => typed.return_key = true,
                b'l' => typed.return_last_access = true,
                b'q' => typed.quiet = true,
                b's' => typed.return_size = true,
                b't' => typed.return_ttl = true,
                b'v' => typed.return_value = true,
                b'u' => typed.no_bump = true,
                b'I' => typed.invalidate = true,
                _ => {}
            },
            MetaFlag::Base64 => typed.base64 = true,
            MetaFlag::Opaque(opaque) => typed.opaque = Some(opaque),
            MetaFlag::Ttl(b'N', ttl) => typed.vivify_ttl = Some(i64::from(*ttl)),
            MetaFlag::Ttl(b'R', ttl) => typed.recache_ttl = Some(i64::from(*ttl)),
            MetaFlag::Ttl(_, ttl) => typed.ttl = Some(i64::from(*ttl)),
            MetaFlag::Cas(cas) => typed.compare_cas = Some(*cas),
            MetaFlag::ClientFlags(client_flags) => typed.client_flags = Some(*client_flags),
            MetaFlag::Mode(mode) => typed.mode = Some(*mode),
            MetaFlag::Number(b'D', delta) => typed.delta = Some(*delta),
            MetaFlag::Number(_, initial) => typed.initial = Some(*initial),
        }
    }
    MetaRequest {
        key: Cow::Borrowed(key),
        flags: typed,
    }
}

impl Model {
    fn request(&self) -> Request<'_> {
        match self {
            Model::Storage {
                command,
                key,
                flags,
                exptime,
                cas_unique,
                noreply,
                data,
            } => Request::Storage {
                command: *command,
                key,
                flags: *flags,
                exptime: i64::from(*exptime),
                cas_unique: *cas_unique,
                noreply: *noreply,
                data,
            },
            Model::Retrieval {
                command,
                exptime,
                keys,
            } => Request::Retrieval {
                command: *command,
                exptime: i64::from(*exptime),
                keys: Tokens::new(keys),
            },
            Model::Delete { key, noreply } => Request::Delete {
                key,
                noreply: *noreply,
            },
            Model::Arithmetic {
                command,
                key,
                delta,
                noreply,
            } => Request::Arithmetic {
                command: *command,
                key,
                delta: *delta,
                noreply: *noreply,
            },
            Model::Touch {
                key,
                exptime,
                noreply,
            } => Request::Touch {
                key,
                exptime: i64::from(*exptime),
                noreply: *noreply,
            },
            Model::FlushAll { delay, noreply } => Request::FlushAll {
                delay: delay.map(i64::from),
                noreply: *noreply,
            },
            Model::Version => Request::Version,
            Model::Verbosity { level, noreply } => Request::Verbosity {
                level: *level,
                noreply: *noreply,
            },
            Model::Stats { arguments } => Request::Stats {
                arguments: Tokens::new(arguments),
            },
            Model::Quit => Request::Quit,
            Model::Shutdown { mode } => Request::Shutdown { mode: *mode },
            Model::Meta {
                command,
                key,
                flags,
                data,
            } => {
                let request = meta_request(key, flags);
                match command {
                    b'g' => Request::MetaGet(request),
                    b's' => Request::MetaSet { request, data },
                    b'd' => Request::MetaDelete(request),
                    _ => Request::MetaArithmetic(request),
                }
            }
            Model::MetaNoop => Request::MetaNoop,
            Model::MetaDebug { key, base64 } => Request::MetaDebug {
                key: Cow::Borrowed(key),
                base64: *base64,
            },
        }
    }
}

fn encode(request: &Request<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    request.write_to(&mut out);
    out
}

/// Parses `buf` to its end or the first `Incomplete`, returning the requests
/// and the bytes consumed. Panics on an error, which no valid pipeline has.
fn parse_all(buf: &[u8]) -> (Vec<Request<'_>>, usize) {
    let limits = Limits::default();
    let mut offset = 0;
    let mut requests = Vec::new();
    loop {
        match parse(&buf[offset..], &limits) {
            Parsed::Incomplete => return (requests, offset),
            Parsed::Request { request, consumed } => {
                assert!(consumed > 0 && offset + consumed <= buf.len());
                requests.push(request);
                offset += consumed;
                if offset == buf.len() {
                    return (requests, offset);
                }
            }
            error @ Parsed::Error { .. } => panic!("unexpected {error:?} at offset {offset}"),
        }
    }
}

/// Runs the parse loop the way a server does, over any bytes. Checks that it
/// always makes progress and stays inside the buffer.
fn parse_loop(buf: &[u8]) {
    let limits = Limits::default();
    let mut offset = 0;
    while offset < buf.len() {
        match parse(&buf[offset..], &limits) {
            Parsed::Incomplete => return,
            Parsed::Request { consumed, .. } => {
                assert!(consumed > 0 && consumed <= buf.len() - offset);
                offset += consumed;
            }
            Parsed::Error {
                consumed,
                swallow_bytes,
                close,
                ..
            } => {
                assert!(consumed > 0 && consumed <= buf.len() - offset);
                if close {
                    return;
                }
                offset += consumed;
                offset = offset.saturating_add(swallow_bytes).min(buf.len());
            }
        }
    }
}

proptest! {
    // Failing cases are saved beside this file and replayed first next time.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("regressions"),
        )),
        ..ProptestConfig::default()
    })]

    #[test]
    fn parse_of_encode_is_identity(model in model()) {
        let request = model.request();
        let bytes = encode(&request);
        match parse(&bytes, &Limits::default()) {
            Parsed::Request { request: parsed, consumed } => {
                prop_assert_eq!(&parsed, &request);
                prop_assert_eq!(consumed, bytes.len());
            }
            other => prop_assert!(false, "{:?} parsed as {:?}", String::from_utf8_lossy(&bytes), other),
        }
    }

    #[test]
    fn pipeline_split_anywhere_parses_the_same(models in prop::collection::vec(model(), 1..5)) {
        let requests: Vec<Request<'_>> = models.iter().map(Model::request).collect();
        let mut pipeline = Vec::new();
        let mut ends = Vec::new();
        for request in &requests {
            request.write_to(&mut pipeline);
            ends.push(pipeline.len());
        }
        for split in 0..=pipeline.len() {
            let (parsed, consumed) = parse_all(&pipeline[..split]);
            // Exactly the requests wholly inside the prefix come out.
            let whole = ends.iter().filter(|&&end| end <= split).count();
            prop_assert_eq!(parsed.len(), whole, "split at {}", split);
            prop_assert_eq!(&parsed[..], &requests[..whole]);
            prop_assert_eq!(consumed, if whole == 0 { 0 } else { ends[whole - 1] });
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        parse_loop(&bytes);
    }

    #[test]
    fn arbitrary_arguments_never_panic(
        command in prop::sample::select(vec![
            "get ", "gets ", "gat ", "gats ", "set ", "add ", "cas ", "append ", "incr ",
            "decr ", "delete ", "touch ", "flush_all ", "verbosity ", "stats ", "shutdown ",
            "mg ", "ms ", "md ", "ma ", "me ", "mn ", "mg foo ", "ms foo 2 ", "ma foo ",
        ]),
        arguments in prop::collection::vec(
            prop_oneof![
                4 => prop::sample::select(b" \r\nbOkvqNTRCFMDJIsScft0123456789-+=noreply".to_vec()),
                1 => any::<u8>(),
            ],
            0..256,
        ),
    ) {
        let mut bytes = command.as_bytes().to_vec();
        bytes.extend_from_slice(&arguments);
        parse_loop(&bytes);
    }
}
