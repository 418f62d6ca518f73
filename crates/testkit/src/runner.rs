//! Running transcripts against live servers, comparing replies step by step, and
//! keeping memcached's replies as golden files.
//!
//! A transcript runs against a fresh memcached and a fresh candidate at once (two
//! threads, so sleeps overlap). Every step's reply is turned into its "rendering":
//! the reply escaped, one line per wire line, with `<closed>` or `<timeout>` when
//! the connection closed or went quiet, and a fixed text for shape-only steps. The
//! renderings are compared step by step; memcached's are also compared with the
//! golden file `<name>.expected` (rewritten instead when `KURA_BLESS=1`), which
//! catches memcached version drift and keeps the expected bytes reviewable.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::binary;
use crate::client::{Client, Reply, ReplyEnd, REPLY_TIMEOUT};
use crate::escape::escape;
use crate::memcached::MemcachedServer;
use crate::transcript::{Action, Check, Exchange, Shape, Sync, Transcript};

/// The connection a transcript starts on.
const MAIN_CONNECTION: &str = "main";
const MN: &[u8] = b"mn\r\n";
const MN_REPLY: &[u8] = b"MN\r\n";
/// `@await-miss` gives up after this long, and polls this often.
const AWAIT_MISS_TIMEOUT: Duration = Duration::from_secs(10);
const AWAIT_MISS_POLL: Duration = Duration::from_millis(50);
/// The rendering of a step skipped because an earlier one timed out.
const NOT_RUN: &str = "<not run:";
/// Show at most this many mismatching steps per transcript.
const MISMATCHES_SHOWN: usize = 8;

/// The directory holding the corpus: `tests/transcripts` at the workspace root.
pub fn transcripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/transcripts")
}

/// Names (without `.txt`) of every transcript in the corpus, sorted.
pub fn transcript_names() -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(transcripts_dir())? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "txt") {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                names.push(stem.to_string());
            }
        }
    }
    names.sort();
    Ok(names)
}

/// Loads `tests/transcripts/<name>.txt`.
pub fn load(name: &str) -> Result<Transcript, String> {
    let path = transcripts_dir().join(format!("{name}.txt"));
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Transcript::parse(&format!("{name}.txt"), &text)
}

/// Runs transcript `name` on a fresh memcached and on `candidate` (a fresh server
/// whose name is `candidate_name`, e.g. "kura"), compares every step, and checks
/// memcached's replies against the golden file (or writes it under `KURA_BLESS=1`).
/// The error is a report meant for a person.
pub fn differential(name: &str, candidate_name: &str, candidate: SocketAddr) -> Result<(), String> {
    let transcript = load(name)?;
    let (memcached, _users) = start_memcached(&transcript)?;
    let (reference, other) = thread::scope(|scope| {
        let reference = scope.spawn(|| run(&transcript, memcached.addr()));
        let other = run(&transcript, candidate);
        (reference.join(), other)
    });
    let reference = reference.map_err(|_| format!("{name}: the memcached runner panicked"))?;
    let mut problems = String::new();
    if let Err(e) = check_golden(&transcript, &reference) {
        problems.push_str(&e);
    }
    if let Err(e) = compare(&transcript, "memcached", &reference, candidate_name, &other) {
        problems.push_str(&e);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Runs every step of `transcript` on a new connection to `addr`; returns one
/// rendering per exchange (see the module comment).
pub fn run(transcript: &Transcript, addr: SocketAddr) -> Vec<String> {
    let mut renderings = Vec::new();
    let mut connections: HashMap<String, Client> = HashMap::new();
    let mut current = MAIN_CONNECTION.to_string();
    let mut stopped = None;
    for step in &transcript.steps {
        let exchange = match &step.action {
            Action::Sleep(duration) => {
                if stopped.is_none() {
                    thread::sleep(*duration);
                }
                continue;
            }
            Action::NewConnection => {
                connections.remove(&current);
                continue;
            }
            Action::UseConnection(name) => {
                current.clone_from(name);
                continue;
            }
            Action::Exchange(exchange) => exchange,
        };
        if let Some(why) = &stopped {
            renderings.push(format!("{NOT_RUN} {why}>"));
            continue;
        }
        let mut client = connections.remove(&current);
        let reply = match exchange_once(&mut client, addr, exchange) {
            Ok(reply) => reply,
            Err(e) => {
                renderings.push(format!("<i/o error: {e}>"));
                continue;
            }
        };
        let Some(reply) = reply else {
            if let Some(client) = client {
                connections.insert(current.clone(), client);
            }
            renderings.push(String::new());
            continue;
        };
        match reply.end {
            ReplyEnd::Suffix => {
                if let Some(client) = client {
                    connections.insert(current.clone(), client);
                }
            }
            // The connection is gone (closed, or useless after a timeout); the
            // next step on this name opens a new one.
            ReplyEnd::Eof => {}
            ReplyEnd::Timeout => {
                // A silent server would make every later step wait too.
                stopped = Some(format!("step on line {} timed out", step.line));
            }
        }
        renderings.push(render(exchange, &reply, transcript.binary));
    }
    renderings
}

fn exchange_once(
    client: &mut Option<Client>,
    addr: SocketAddr,
    exchange: &Exchange,
) -> io::Result<Option<Reply>> {
    let connection = match client {
        Some(connection) => connection,
        None => client.insert(Client::connect(addr)?),
    };
    let mut bytes = exchange.bytes.clone();
    match exchange.sync {
        Sync::Mn => bytes.extend_from_slice(MN),
        Sync::Marker => bytes.extend_from_slice(&binary::marker()),
        _ => {}
    }
    if let Err(e) = connection.send(&bytes) {
        // The server may have closed already; what it said before is the reply.
        if !matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
        ) {
            return Err(e);
        }
    }
    match exchange.sync {
        Sync::Mn => {
            // The step may hold mn commands of its own: wait for all their MNs.
            let wanted = mn_commands(&exchange.bytes) + 1;
            let done = |reply: &[u8]| reply.ends_with(MN_REPLY) && mn_replies(reply) >= wanted;
            connection.read_reply_until(done, REPLY_TIMEOUT).map(Some)
        }
        Sync::Marker => connection
            .read_reply_until(binary::complete, REPLY_TIMEOUT)
            .map(Some),
        Sync::Close => connection.read_reply_to_eof(REPLY_TIMEOUT).map(Some),
        Sync::Lines(lines) => {
            let done = |reply: &[u8]| reply.iter().filter(|&&b| b == b'\n').count() >= lines;
            connection.read_reply_until(done, REPLY_TIMEOUT).map(Some)
        }
        Sync::NoRead => Ok(None),
        Sync::UntilMiss => {
            let deadline = Instant::now() + AWAIT_MISS_TIMEOUT;
            loop {
                let reply = connection.read_reply_until(|r| r.ends_with(b"\r\n"), REPLY_TIMEOUT)?;
                // Done on a miss; an error, a close or the deadline end the wait too,
                // and the last reply then shows what the server said instead.
                if reply.end != ReplyEnd::Suffix
                    || reply.bytes == b"EN\r\n"
                    || Instant::now() > deadline
                {
                    return Ok(Some(reply));
                }
                // Waiting on the server's clock, which ticks once a second.
                thread::sleep(AWAIT_MISS_POLL);
                connection.send(&exchange.bytes)?;
            }
        }
    }
}

/// Lines of `sent` that are an `mn` command (each gets an `MN` reply).
fn mn_commands(sent: &[u8]) -> usize {
    line_starts(sent)
        .filter(|&i| {
            ["mn\r\n", "mn\n", "mn "]
                .iter()
                .any(|p| sent[i..].starts_with(p.as_bytes()))
        })
        .count()
}

/// Lines of `reply` that are exactly `MN\r\n`.
fn mn_replies(reply: &[u8]) -> usize {
    line_starts(reply)
        .filter(|&i| reply[i..].starts_with(MN_REPLY))
        .count()
}

fn line_starts(bytes: &[u8]) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(0)
        .chain(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, &b)| b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .filter(move |&i| i < bytes.len())
}

fn render(exchange: &Exchange, reply: &Reply, binary_reply: bool) -> String {
    let mut bytes = reply.bytes.as_slice();
    if exchange.sync == Sync::Mn && reply.end == ReplyEnd::Suffix {
        bytes = &bytes[..bytes.len() - MN_REPLY.len()];
    }
    if exchange.sync == Sync::Marker && reply.end == ReplyEnd::Suffix {
        bytes = binary::strip_marker(bytes);
    }
    if let Check::Shape(shape) = exchange.check {
        if reply.end == ReplyEnd::Suffix && shape_matches(shape, bytes) {
            return format!("<shape {}>", shape_name(shape));
        }
    }
    let mut text = String::new();
    if binary_reply {
        for line in binary::render(bytes) {
            text.push_str(&line);
            text.push('\n');
        }
    } else {
        let mut line_start = 0;
        for (i, &byte) in bytes.iter().enumerate() {
            if byte == b'\n' {
                text.push_str(&escape(&bytes[line_start..=i]));
                text.push('\n');
                line_start = i + 1;
            }
        }
        if line_start < bytes.len() {
            text.push_str(&escape(&bytes[line_start..]));
            text.push('\n');
        }
    }
    match reply.end {
        ReplyEnd::Suffix => {}
        ReplyEnd::Eof => text.push_str("<closed>\n"),
        ReplyEnd::Timeout => text.push_str("<timeout>\n"),
    }
    if exchange.sync == Sync::Mn && reply.end != ReplyEnd::Suffix {
        text.push_str("<no MN: the mn sent after this step was not answered>\n");
    }
    if exchange.sync == Sync::Marker && reply.end != ReplyEnd::Suffix {
        text.push_str("<no VERSION: the version sent after this step was not answered>\n");
    }
    text.trim_end_matches('\n').to_string()
}

fn shape_name(shape: Shape) -> &'static str {
    match shape {
        Shape::Version => "VERSION <something>\\r\\n",
        Shape::Stats => "STAT <name> <value>\\r\\n... END\\r\\n",
        Shape::BinaryStats => "binary STAT packets, then the empty one",
        Shape::BinaryVersion => "binary VERSION <something>",
    }
}

fn shape_matches(shape: Shape, bytes: &[u8]) -> bool {
    match shape {
        Shape::BinaryStats => return binary::is_stats(bytes),
        Shape::BinaryVersion => return binary::is_version(bytes),
        _ => {}
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    match shape {
        Shape::Version => text
            .strip_prefix("VERSION ")
            .and_then(|rest| rest.strip_suffix("\r\n"))
            .is_some_and(|v| !v.is_empty() && !v.contains(['\r', '\n'])),
        Shape::BinaryStats | Shape::BinaryVersion => false,
        Shape::Stats => {
            let Some(body) = text.strip_suffix("END\r\n") else {
                return false;
            };
            let lines: Vec<&str> = body.split_terminator("\r\n").collect();
            !lines.is_empty()
                && body.ends_with("\r\n")
                && lines.iter().all(|line| {
                    let mut parts = line.splitn(3, ' ');
                    parts.next() == Some("STAT")
                        && parts.next().is_some_and(|name| !name.is_empty())
                        && parts
                            .next()
                            .is_some_and(|value| !value.is_empty() && !value.contains('\n'))
                })
        }
    }
}

/// Whether two renderings of one step agree under the step's check.
fn agree(check: Check, a: &str, b: &str) -> bool {
    match check {
        Check::Exact | Check::Shape(_) => a == b,
        Check::TolerateTime => agree_but_times(a, b),
    }
}

/// Numbers right after these are times in seconds: TTL (`t`), last access (`l`,
/// `la=`) and expiry (`exp=`) in meta replies.
const TIME_PREFIXES: &[&str] = &[" t", " l", "la=", "exp="];
/// How far two such times may differ. memcached's clock ticks once a second from
/// its main thread; on a loaded machine a tick can come seconds late and then jump
/// (a 5 s jump has been seen here between two commands of one transcript).
const TIME_SLACK_SECS: i128 = 10;

/// Equal, except that a non-negative number after a `TIME_PREFIXES` entry may
/// differ by up to `TIME_SLACK_SECS` (negative ones, like `t-1`, must match).
fn agree_but_times(a: &str, b: &str) -> bool {
    let tokens = |s: &str| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut last_digit = None;
        for c in s.chars() {
            let digit = c.is_ascii_digit();
            match out.last_mut() {
                Some(token) if last_digit == Some(digit) => token.push(c),
                _ => out.push(c.to_string()),
            }
            last_digit = Some(digit);
        }
        out
    };
    let (ta, tb) = (tokens(a), tokens(b));
    if ta.len() != tb.len() {
        return false;
    }
    let mut previous = "";
    for (x, y) in ta.iter().zip(&tb) {
        let timed = TIME_PREFIXES.iter().any(|p| previous.ends_with(p));
        let close = match (x.parse::<i128>(), y.parse::<i128>()) {
            (Ok(x), Ok(y)) if timed => (x - y).abs() <= TIME_SLACK_SECS,
            _ => x == y,
        };
        if !close {
            return false;
        }
        previous = x;
    }
    true
}

/// Compares two runs of `transcript` step by step.
pub fn compare(
    transcript: &Transcript,
    a_name: &str,
    a: &[String],
    b_name: &str,
    b: &[String],
) -> Result<(), String> {
    let mut report = String::new();
    let mut mismatches = 0;
    for (index, ((line, exchange), (x, y))) in
        transcript.exchanges().zip(a.iter().zip(b)).enumerate()
    {
        if agree(exchange.check, x, y) {
            continue;
        }
        mismatches += 1;
        // After a timeout the rest was not run; the timed-out step says it all.
        let not_run = x.starts_with(NOT_RUN) || y.starts_with(NOT_RUN);
        if mismatches <= MISMATCHES_SHOWN && !not_run {
            let _ = write!(
                report,
                "\n--- {} step {} (line {line}) sent: {}\n  {a_name}:\n{}\n  {b_name}:\n{}\n",
                transcript.name,
                index + 1,
                shorten(&escape(&exchange.bytes)),
                indent(x),
                indent(y),
            );
        }
    }
    if a.len() != b.len() {
        let _ = write!(
            report,
            "\n{}: {a_name} ran {} steps, {b_name} {}\n",
            transcript.name,
            a.len(),
            b.len()
        );
    }
    if report.is_empty() {
        return Ok(());
    }
    let hidden = mismatches.saturating_sub(MISMATCHES_SHOWN);
    Err(format!(
        "{}: {mismatches} step(s) differ between {a_name} and {b_name}{}:{report}",
        transcript.name,
        if hidden > 0 {
            format!(" ({hidden} not shown)")
        } else {
            String::new()
        }
    ))
}

fn indent(rendering: &str) -> String {
    if rendering.is_empty() {
        return "    (nothing)".to_string();
    }
    rendering
        .lines()
        .map(|l| format!("    {}", shorten(l)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn shorten(text: &str) -> String {
    const MAX: usize = 300;
    if text.len() <= MAX {
        return text.to_string();
    }
    let mut cut = MAX;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}... ({} chars)", &text[..cut], text.len())
}

/// The golden file for `transcript`: memcached's renderings, one section a step.
pub fn golden_path(transcript: &Transcript) -> PathBuf {
    let stem = transcript.name.trim_end_matches(".txt");
    transcripts_dir().join(format!("{stem}.expected"))
}

fn golden_text(transcript: &Transcript, renderings: &[String]) -> String {
    let mut text = format!(
        "# memcached's replies to {}, one section a step, in the escape syntax of README.md.\n\
         # Written by `KURA_BLESS=1 cargo test -p kura-testkit`; do not edit by hand.\n",
        transcript.name
    );
    for (index, ((line, _), rendering)) in transcript.exchanges().zip(renderings).enumerate() {
        let _ = writeln!(text, "## step {} line {line}", index + 1);
        for rendered_line in rendering.lines() {
            let _ = writeln!(text, "| {rendered_line}");
        }
    }
    text
}

fn parse_golden(text: &str) -> Vec<String> {
    let mut steps: Vec<Vec<&str>> = Vec::new();
    for line in text.lines() {
        if line.starts_with("## step ") {
            steps.push(Vec::new());
        } else if let (Some(step), Some(body)) = (steps.last_mut(), line.strip_prefix("| ")) {
            step.push(body);
        }
    }
    steps.into_iter().map(|lines| lines.join("\n")).collect()
}

/// Checks memcached's renderings against the golden file, or rewrites the golden
/// file when `KURA_BLESS` is set. Also rejects a reference run that timed out:
/// that is a mistake in the transcript, not a finding.
pub fn check_golden(transcript: &Transcript, reference: &[String]) -> Result<(), String> {
    for ((line, _), rendering) in transcript.exchanges().zip(reference) {
        if rendering.contains("<timeout>")
            || rendering.contains("<not run")
            || rendering.contains("<i/o error")
        {
            return Err(format!(
                "{}: memcached itself did not complete the step on line {line} (fix the transcript):\n{}\n",
                transcript.name,
                indent(rendering)
            ));
        }
    }
    let path = golden_path(transcript);
    let fresh = golden_text(transcript, reference);
    if std::env::var_os("KURA_BLESS").is_some_and(|v| v == "1") {
        return std::fs::write(&path, fresh).map_err(|e| format!("{}: {e}", path.display()));
    }
    let stored = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "{}: {e}; write it with `KURA_BLESS=1 cargo test -p kura-testkit`\n",
            path.display()
        )
    })?;
    let golden = parse_golden(&stored);
    compare(transcript, "golden file", &golden, "live memcached", reference).map_err(|e| {
        format!("{e}\n(memcached changed, or the transcript did: review, then rerun with KURA_BLESS=1)\n")
    })
}

/// Runs transcript `<dir>/<name>.txt` on `candidate` alone and compares every step
/// with the golden file `<dir>/<name>.expected`, which is the specification itself
/// (for what memcached has no reference for: Kura's tables). Under `KURA_BLESS=1`
/// the golden file is written from the candidate instead, for a person to review.
pub fn against_golden(
    dir: &Path,
    name: &str,
    candidate_name: &str,
    candidate: SocketAddr,
) -> Result<(), String> {
    let path = dir.join(format!("{name}.txt"));
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let transcript = Transcript::parse(&format!("{name}.txt"), &text)?;
    let replies = run(&transcript, candidate);
    let golden_path = dir.join(format!("{name}.expected"));
    if std::env::var_os("KURA_BLESS").is_some_and(|v| v == "1") {
        let header = format!(
            "# The replies {name}.txt must get, one section a step, in the escape syntax of\n\
             # tests/transcripts/README.md. Written by KURA_BLESS=1 from {candidate_name}, then\n\
             # reviewed: this file is the specification.\n"
        );
        let body = golden_text(&transcript, &replies);
        let body = body.lines().skip(2).collect::<Vec<_>>().join("\n");
        return std::fs::write(&golden_path, format!("{header}{body}\n"))
            .map_err(|e| format!("{}: {e}", golden_path.display()));
    }
    let stored = std::fs::read_to_string(&golden_path).map_err(|e| {
        format!(
            "{}: {e}; write it with KURA_BLESS=1 and review it\n",
            golden_path.display()
        )
    })?;
    compare(
        &transcript,
        "golden file",
        &parse_golden(&stored),
        candidate_name,
        &replies,
    )
}

/// A fresh memcached for `transcript`: with its users (`@users`), if it has any, and
/// the files that hold them, which must outlive the server.
fn start_memcached(
    transcript: &Transcript,
) -> Result<(MemcachedServer, Option<crate::auth::Users>), String> {
    let name = &transcript.name;
    let users = match transcript.users.as_slice() {
        [] => None,
        users => Some(
            crate::auth::Users::new(users)
                .map_err(|e| format!("{name}: cannot write the users: {e}"))?,
        ),
    };
    let memcached = match &users {
        None => MemcachedServer::start(),
        Some(users) => users.start_memcached(transcript.binary),
    }
    .map_err(|e| format!("{name}: cannot start memcached: {e}"))?;
    Ok((memcached, users))
}

/// Runs transcript `name` on two fresh memcached servers at once and compares them
/// with each other and with the golden file: proves the transcript deterministic
/// and the runner sound without Kura.
pub fn memcached_against_itself(name: &str) -> Result<(), String> {
    let transcript = load(name)?;
    let (first, _first_users) = start_memcached(&transcript)?;
    let (second, _second_users) = start_memcached(&transcript)?;
    let (a, b) = thread::scope(|scope| {
        let a = scope.spawn(|| run(&transcript, first.addr()));
        let b = run(&transcript, second.addr());
        (a.join(), b)
    });
    let a = a.map_err(|_| format!("{name}: runner panicked"))?;
    check_golden(&transcript, &a)?;
    compare(&transcript, "memcached", &a, "second memcached", &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_covers_times_only() {
        assert!(agree_but_times("HD t100 c5", "HD t99 c5"));
        assert!(agree_but_times(
            "ME m exp=-1 la=0 cas=7",
            "ME m exp=-1 la=1 cas=7"
        ));
        assert!(agree_but_times("VA 3 l2 f9", "VA 3 l1 f9"));
        assert!(!agree_but_times("HD t100 c5", "HD t100 c6"));
        assert!(agree_but_times("HD t100", "HD t95"));
        assert!(!agree_but_times("HD t100", "HD t89"));
        assert!(!agree_but_times("HD t-1", "HD t1"));
        assert!(!agree_but_times("ME m la=0 size=69", "ME m la=0 size=68"));
        assert!(!agree_but_times("HD t1", "HD t1 X"));
    }

    #[test]
    fn mn_counting() {
        assert_eq!(
            mn_commands(b"mn\r\nget a\r\nmn extra\r\nset mn 0 0 1\r\n"),
            2
        );
        assert_eq!(mn_replies(b"MN\r\nVA 1\r\nx\r\nMN\r\n"), 2);
        assert_eq!(mn_replies(b"VA 4\r\nxMN\r\n"), 0);
    }

    #[test]
    fn shapes() {
        assert!(shape_matches(Shape::Version, b"VERSION 1.6.18\r\n"));
        assert!(shape_matches(Shape::Version, b"VERSION kura 0.1.0\r\n"));
        assert!(!shape_matches(Shape::Version, b"VERSION \r\n"));
        assert!(!shape_matches(
            Shape::Version,
            b"VERSION 1\r\nVERSION 2\r\n"
        ));
        assert!(shape_matches(
            Shape::Stats,
            b"STAT pid 1\r\nSTAT version 1.6.18\r\nEND\r\n"
        ));
        assert!(!shape_matches(Shape::Stats, b"END\r\n"));
        assert!(!shape_matches(Shape::Stats, b"STAT pid\r\nEND\r\n"));
        assert!(!shape_matches(Shape::Stats, b"STAT pid 1\r\n"));
    }

    #[test]
    fn renders_await_miss_replies_whole() {
        let exchange = Exchange {
            bytes: b"mg a\r\n".to_vec(),
            sync: Sync::UntilMiss,
            check: Check::Exact,
        };
        let reply = |bytes: &[u8]| Reply {
            bytes: bytes.to_vec(),
            end: ReplyEnd::Suffix,
        };
        assert_eq!(render(&exchange, &reply(b"EN\r\n"), false), "EN\\r\\n");
        assert_eq!(render(&exchange, &reply(b"HD\r\n"), false), "HD\\r\\n");
        let exchange = Exchange {
            sync: Sync::Mn,
            ..exchange
        };
        assert_eq!(
            render(&exchange, &reply(b"END\r\nMN\r\n"), false),
            "END\\r\\n"
        );
    }

    #[test]
    fn golden_round_trip() {
        let transcript = Transcript::parse("t.txt", "> a\n\n> b\n\n> c\n").unwrap();
        let renderings = vec![
            "VALUE a 0 1\\r\\n\nx\\r\\n".to_string(),
            String::new(),
            "<closed>".to_string(),
        ];
        assert_eq!(
            parse_golden(&golden_text(&transcript, &renderings)),
            renderings
        );
    }
}
