//! Differential check against a real memcached: replays fuzz corpus inputs
//! to both Kura's parser and memcached 1.6.18 and compares what can be
//! compared without a store: that both frame the byte stream the same way
//! (a trailing `mn` is answered `MN` by memcached exactly when Kura's parser
//! consumes everything before it), that the first refused request gets the
//! same error reply (or none, under `noreply`), and that both close the
//! connection on the same inputs.
//!
//! Not a fuzz target (it needs a server), and not part of the test suite.
//! Run it after a fuzzing session:
//!
//!   memcached -p 21211 -l 127.0.0.1 -U 0 &
//!   RUSTC_BOOTSTRAP=1 cargo run --example differential -- 127.0.0.1:21211 corpus/parse_text corpus/parse_meta
//!
//! A directory named `parse_meta` is prefixed the way the `parse_meta` target
//! does. Inputs that need a server-side decision (`stats`, `quit`,
//! `shutdown`, `flush_all`) or use memcached's administration commands, which
//! Kura answers with `ERROR`, are skipped. Exits 1 on any mismatch.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use kura_protocol::{parse, Limits, Parsed, Request};

const META_COMMANDS: [&[u8]; 7] = [b"mg ", b"ms ", b"md ", b"ma ", b"me ", b"mn ", b"ms k "];
const UNSUPPORTED: [&[u8]; 13] = [
    b"watch",
    b"lru_crawler",
    b"lru",
    b"slabs",
    b"cache_memlimit",
    b"extstore",
    b"refresh_certs",
    b"stats",
    b"shutdown",
    b"quit",
    b"flush_all",
    b"misbehave",
    b"debugtime",
];

/// What Kura's parser does with one input.
struct Expectation {
    /// The first outcome's error reply, if it is an error: (reply, noreply).
    first_error: Option<(&'static [u8], bool)>,
    closes: bool,
    /// Filler bytes memcached will swallow beyond the input.
    filler: usize,
}

fn expect(input: &[u8]) -> Option<Expectation> {
    let limits = Limits::default();
    let mut offset = 0;
    let mut first_error = None;
    let mut first = true;
    let mut closes = false;
    while offset < input.len() {
        match parse(&input[offset..], &limits) {
            Parsed::Incomplete => return None,
            Parsed::Request { request, consumed } => {
                if matches!(
                    request,
                    Request::Stats { .. }
                        | Request::Quit
                        | Request::Shutdown { .. }
                        | Request::FlushAll { .. }
                ) {
                    return None;
                }
                offset += consumed;
            }
            Parsed::Error {
                error,
                consumed,
                swallow_bytes,
                close,
                noreply,
                ..
            } => {
                if first {
                    first_error = Some((error.reply_bytes(), noreply));
                }
                if close {
                    closes = true;
                    break;
                }
                offset += consumed + swallow_bytes;
            }
        }
        first = false;
    }
    Some(Expectation {
        first_error,
        closes,
        filler: offset.saturating_sub(input.len()),
    })
}

fn uses_unsupported(input: &[u8]) -> bool {
    input.split(|&byte| byte == b'\n').any(|line| {
        let line = line.split(|&byte| byte == 0).next().unwrap_or_default();
        let command = line
            .split(|&byte| byte == b' ')
            .find(|token| !token.is_empty())
            .unwrap_or_default();
        let command = command.strip_suffix(b"\r").unwrap_or(command);
        UNSUPPORTED.contains(&command)
    })
}

/// Sends `bytes` and reads until `MN\r\n`, close, or a 3 s silence.
fn exchange(address: &str, bytes: &[u8]) -> std::io::Result<(Vec<u8>, bool)> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(3)))?;
    stream.write_all(bytes)?;
    let mut reply = Vec::new();
    let mut chunk = [0u8; 65536];
    while !reply.ends_with(b"MN\r\n") {
        match stream.read(&mut chunk) {
            Ok(0) => return Ok((reply, true)),
            Ok(read) => reply.extend_from_slice(&chunk[..read]),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {
                return Ok((reply, true))
            }
            Err(_) => break,
        }
    }
    Ok((reply, false))
}

fn main() -> std::io::Result<()> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let Some((address, directories)) = arguments.split_first() else {
        eprintln!("usage: differential <memcached address> <corpus dir>...");
        std::process::exit(2);
    };
    let (mut checked, mut mismatches) = (0usize, 0usize);
    for directory in directories {
        let meta = Path::new(directory)
            .file_name()
            .is_some_and(|name| name == "parse_meta");
        let mut paths: Vec<_> = std::fs::read_dir(directory)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .collect();
        paths.sort();
        for path in paths {
            let mut input = std::fs::read(&path)?;
            if meta {
                let Some((&selector, rest)) = input.split_first() else {
                    continue;
                };
                let mut prefixed =
                    META_COMMANDS[usize::from(selector) % META_COMMANDS.len()].to_vec();
                prefixed.extend_from_slice(rest);
                input = prefixed;
            }
            if input.is_empty() || uses_unsupported(&input) {
                continue;
            }
            let Some(expectation) = expect(&input) else {
                continue;
            };
            let mut sent = input.clone();
            sent.resize(sent.len() + expectation.filler, b'x');
            sent.extend_from_slice(b"mn\r\n");
            let (reply, closed) = exchange(address, &sent)?;
            let problem = if expectation.closes {
                (!closed || reply.ends_with(b"MN\r\n")).then_some("memcached did not close")
            } else if !reply.ends_with(b"MN\r\n") {
                Some("framing differs: no MN at the end")
            } else {
                match expectation.first_error {
                    Some((error, false)) if !reply.starts_with(error) => {
                        Some("first reply is not the error")
                    }
                    Some((error, true)) if error != b"ERROR\r\n" && reply.starts_with(error) => {
                        Some("error was not suppressed by noreply")
                    }
                    _ => None,
                }
            };
            checked += 1;
            if let Some(problem) = problem {
                mismatches += 1;
                println!(
                    "MISMATCH {}: {problem}\n  input: {:?}\n  memcached: {:?}",
                    path.display(),
                    String::from_utf8_lossy(&input),
                    String::from_utf8_lossy(&reply)
                );
            }
        }
    }
    println!("differential: {checked} inputs checked, {mismatches} mismatches");
    if mismatches > 0 {
        std::process::exit(1);
    }
    Ok(())
}
