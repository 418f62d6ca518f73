//! memcached's binary protocol in transcripts: `>bin` lines composed into request
//! packets, replies rendered one packet a line, and the `VERSION` that marks the end
//! of a step's reply.
//!
//! ```text
//! >bin set key=a value=hello flags=5 exptime=0 opaque=1
//! >bin get key=a
//! >bin 0x1b extras=01020304               an opcode memcached does not know
//! >bin get key=abc bodylen=2              a header that lies about its lengths
//! ```
//!
//! Fields: `key=` and `value=` in the escape syntax (`\x20` for a space), `extras=`
//! in hex, `opaque=` and `cas=` as numbers (`0x` for hex), and `flags=`, `exptime=`,
//! `delta=`, `initial=` to build the opcode's extras (set, add, replace: flags and
//! exptime; incr and decr: delta, initial, exptime; touch, gat, flush: exptime).
//! `magic=`, `keylen=`, `extlen=`, `bodylen=`, `datatype=` and `vbucket=` override
//! what the header would say.

use crate::escape::{escape, unescape};

const HEADER_BYTES: usize = 24;
const REQUEST_MAGIC: u8 = 0x80;
const RESPONSE_MAGIC: u8 = 0x81;
/// The runner ends every step with a `VERSION`, the one request memcached answers
/// on a connection that has not logged in (without closing it), with this opaque
/// ("mnmn").
const MARKER_OPCODE: u8 = 0x0b;
const MARKER_OPAQUE: u32 = 0x6d6e_6d6e;

const OPCODES: &[(&str, u8)] = &[
    ("get", 0x00),
    ("set", 0x01),
    ("add", 0x02),
    ("replace", 0x03),
    ("delete", 0x04),
    ("incr", 0x05),
    ("decr", 0x06),
    ("quit", 0x07),
    ("flush", 0x08),
    ("getq", 0x09),
    ("noop", 0x0a),
    ("version", 0x0b),
    ("getk", 0x0c),
    ("getkq", 0x0d),
    ("append", 0x0e),
    ("prepend", 0x0f),
    ("stat", 0x10),
    ("setq", 0x11),
    ("addq", 0x12),
    ("replaceq", 0x13),
    ("deleteq", 0x14),
    ("incrq", 0x15),
    ("decrq", 0x16),
    ("quitq", 0x17),
    ("flushq", 0x18),
    ("appendq", 0x19),
    ("prependq", 0x1a),
    ("touch", 0x1c),
    ("gat", 0x1d),
    ("gatq", 0x1e),
    ("sasl-list-mechs", 0x20),
    ("sasl-auth", 0x21),
    ("sasl-step", 0x22),
    ("gatk", 0x23),
    ("gatkq", 0x24),
];

fn opcode_name(opcode: u8) -> String {
    OPCODES
        .iter()
        .find(|(_, code)| *code == opcode)
        .map_or_else(
            || format!("0x{opcode:02x}"),
            |(name, _)| (*name).to_string(),
        )
}

fn number(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("bad number {text:?}"))
}

fn hex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err(format!("odd hex {text:?}"));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|_| format!("bad hex {text:?}")))
        .collect()
}

/// The request packet a `>bin` line (without the `>bin `) describes.
pub fn compose(line: &str) -> Result<Vec<u8>, String> {
    let mut words = line.split_whitespace();
    let name = words.next().ok_or("`>bin` needs an opcode")?;
    let opcode = match OPCODES.iter().find(|(n, _)| *n == name) {
        Some((_, code)) => *code,
        None => u8::try_from(number(name)?).map_err(|_| format!("bad opcode {name:?}"))?,
    };
    let (mut key, mut value, mut extras) = (Vec::new(), Vec::new(), None);
    let (mut opaque, mut cas) = (0u32, 0u64);
    let (mut flags, mut exptime, mut delta, mut initial) = (0u32, 0u32, 1u64, 0u64);
    let mut overrides: Vec<(&str, u64)> = Vec::new();
    for word in words {
        let (field, text) = word
            .split_once('=')
            .ok_or_else(|| format!("`{word}` is not field=value"))?;
        let small = |bits: u32| -> Result<u64, String> {
            let n = number(text)?;
            if n >> bits != 0 {
                return Err(format!("{field}={text} does not fit {bits} bits"));
            }
            Ok(n)
        };
        match field {
            "key" => key = unescape(text)?,
            "value" => value = unescape(text)?,
            "extras" => extras = Some(hex(text)?),
            "opaque" => opaque = small(32)? as u32,
            "cas" => cas = number(text)?,
            "flags" => flags = small(32)? as u32,
            "exptime" => exptime = small(32)? as u32,
            "delta" => delta = number(text)?,
            "initial" => initial = number(text)?,
            "magic" | "extlen" | "datatype" => overrides.push((field, small(8)?)),
            "keylen" | "vbucket" => overrides.push((field, small(16)?)),
            "bodylen" => overrides.push((field, small(32)?)),
            _ => return Err(format!("unknown field {field:?}")),
        }
    }
    let extras = extras.unwrap_or_else(|| match opcode {
        // set, add, replace and their quiet forms
        0x01..=0x03 | 0x11..=0x13 => [flags.to_be_bytes(), exptime.to_be_bytes()].concat(),
        // incr, decr and their quiet forms
        0x05 | 0x06 | 0x15 | 0x16 => [
            &delta.to_be_bytes()[..],
            &initial.to_be_bytes(),
            &exptime.to_be_bytes(),
        ]
        .concat(),
        0x1c | 0x1d | 0x1e | 0x23 | 0x24 => exptime.to_be_bytes().to_vec(),
        0x08 | 0x18 if exptime != 0 => exptime.to_be_bytes().to_vec(),
        _ => Vec::new(),
    });
    let mut header = [0u8; HEADER_BYTES];
    header[0] = REQUEST_MAGIC;
    header[1] = opcode;
    header[2..4].copy_from_slice(&(key.len() as u16).to_be_bytes());
    header[4] = extras.len() as u8;
    let body = (extras.len() + key.len() + value.len()) as u32;
    header[8..12].copy_from_slice(&body.to_be_bytes());
    header[12..16].copy_from_slice(&opaque.to_be_bytes());
    header[16..24].copy_from_slice(&cas.to_be_bytes());
    for (field, n) in overrides {
        match field {
            "magic" => header[0] = n as u8,
            "keylen" => header[2..4].copy_from_slice(&(n as u16).to_be_bytes()),
            "extlen" => header[4] = n as u8,
            "datatype" => header[5] = n as u8,
            "vbucket" => header[6..8].copy_from_slice(&(n as u16).to_be_bytes()),
            _ => header[8..12].copy_from_slice(&(n as u32).to_be_bytes()),
        }
    }
    Ok([&header[..], &extras, &key, &value].concat())
}

/// The `VERSION` the runner sends after a step's bytes; its reply ends the step.
pub fn marker() -> Vec<u8> {
    let mut packet = vec![0u8; HEADER_BYTES];
    packet[0] = REQUEST_MAGIC;
    packet[1] = MARKER_OPCODE;
    packet[12..16].copy_from_slice(&MARKER_OPAQUE.to_be_bytes());
    packet
}

/// A response packet as received.
struct Packet<'a> {
    header: &'a [u8],
    extras: &'a [u8],
    key: &'a [u8],
    value: &'a [u8],
}

/// Splits `bytes` into whole packets; the rest is what did not make a whole one.
fn packets(bytes: &[u8]) -> (Vec<Packet<'_>>, &[u8]) {
    let mut found = Vec::new();
    let mut rest = bytes;
    while rest.len() >= HEADER_BYTES {
        let key_len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        let extras_len = usize::from(rest[4]);
        let body_len = u32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]) as usize;
        if key_len + extras_len > body_len || rest.len() < HEADER_BYTES + body_len {
            break;
        }
        let body = &rest[HEADER_BYTES..HEADER_BYTES + body_len];
        found.push(Packet {
            header: &rest[..HEADER_BYTES],
            extras: &body[..extras_len],
            key: &body[extras_len..extras_len + key_len],
            value: &body[extras_len + key_len..],
        });
        rest = &rest[HEADER_BYTES + body_len..];
    }
    (found, rest)
}

fn is_marker(packet: &Packet<'_>) -> bool {
    packet.header[0] == RESPONSE_MAGIC
        && packet.header[1] == MARKER_OPCODE
        && packet.header[12..16] == MARKER_OPAQUE.to_be_bytes()
}

/// Whether `reply` holds the answer to the marker `VERSION`.
pub fn complete(reply: &[u8]) -> bool {
    packets(reply).0.iter().any(is_marker)
}

/// The reply without the marker's answer (when it is the last packet).
pub fn strip_marker(reply: &[u8]) -> &[u8] {
    let (found, rest) = packets(reply);
    match found.last() {
        Some(last) if rest.is_empty() && is_marker(last) => {
            &reply[..reply.len()
                - HEADER_BYTES
                - last.extras.len()
                - last.key.len()
                - last.value.len()]
        }
        _ => reply,
    }
}

/// One line per packet: its opcode, status, opaque and CAS, then what it carries;
/// bytes that do not make a whole packet follow escaped.
pub fn render(reply: &[u8]) -> Vec<String> {
    let (found, rest) = packets(reply);
    let mut lines = Vec::new();
    for p in found {
        let h = p.header;
        let mut line = String::new();
        if h[0] != RESPONSE_MAGIC {
            line.push_str(&format!("magic=0x{:02x} ", h[0]));
        }
        let status = u16::from_be_bytes([h[6], h[7]]);
        let opaque = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
        let cas = u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]);
        line.push_str(&format!(
            "{} status=0x{status:02x} opaque=0x{opaque:x} cas={cas}",
            opcode_name(h[1])
        ));
        if h[5] != 0 {
            line.push_str(&format!(" datatype=0x{:02x}", h[5]));
        }
        if !p.extras.is_empty() {
            let hex: String = p.extras.iter().map(|b| format!("{b:02x}")).collect();
            line.push_str(&format!(" extras={hex}"));
        }
        if !p.key.is_empty() {
            line.push_str(&format!(" key={}", escape(p.key)));
        }
        if !p.value.is_empty() {
            line.push_str(&format!(" value={}", escape(p.value)));
        }
        lines.push(line);
    }
    if !rest.is_empty() {
        lines.push(format!("<partial packet> {}", escape(rest)));
    }
    lines
}

/// Whether `reply` is a binary `STAT` answer: statistics with names, then the
/// empty packet that ends them, all successes.
pub fn is_stats(reply: &[u8]) -> bool {
    let (found, rest) = packets(reply);
    let Some((last, stats)) = found.split_last() else {
        return false;
    };
    let stat_ok = |p: &Packet<'_>| p.header[1] == 0x10 && p.header[6..8] == [0, 0];
    rest.is_empty()
        && !stats.is_empty()
        && stats.iter().all(|p| stat_ok(p) && !p.key.is_empty())
        && stat_ok(last)
        && last.key.is_empty()
        && last.value.is_empty()
}

/// Whether `reply` holds an empty `STAT` packet (the end of a statistics answer).
pub fn stats_ended(reply: &[u8]) -> bool {
    packets(reply)
        .0
        .iter()
        .any(|p| p.header[1] == 0x10 && p.key.is_empty() && p.value.is_empty())
}

/// The `STAT` packets of `reply` as text `STAT <name> <value>` lines.
pub fn stats_as_text(reply: &[u8]) -> String {
    packets(reply)
        .0
        .iter()
        .filter(|p| p.header[1] == 0x10 && !p.key.is_empty())
        .map(|p| {
            format!(
                "STAT {} {}\r\n",
                String::from_utf8_lossy(p.key),
                String::from_utf8_lossy(p.value)
            )
        })
        .collect()
}

/// Whether `reply` is one successful binary `VERSION` answer with a printable
/// version.
pub fn is_version(reply: &[u8]) -> bool {
    let (found, rest) = packets(reply);
    match found.as_slice() {
        [p] => {
            rest.is_empty()
                && p.header[1] == 0x0b
                && p.header[6..8] == [0, 0]
                && p.extras.is_empty()
                && p.key.is_empty()
                && !p.value.is_empty()
                && p.value.iter().all(|b| b.is_ascii_graphic())
        }
        _ => false,
    }
}

/// A binary request packet with no extras: `opcode`, `key` and `value`, opaque and
/// CAS zero (a SASL exchange's, for one).
pub fn request(opcode: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![0x80, opcode];
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&((key.len() + value.len()) as u32).to_be_bytes());
    out.extend_from_slice(&[0; 12]);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composes_requests_with_their_extras_and_overrides() {
        let packet = compose("set key=a value=xy flags=5 opaque=0x10 cas=3").unwrap();
        assert_eq!(packet.len(), 24 + 8 + 1 + 2);
        assert_eq!(&packet[..12], &[0x80, 1, 0, 1, 8, 0, 0, 0, 0, 0, 0, 11]);
        assert_eq!(&packet[12..16], &[0, 0, 0, 0x10]);
        assert_eq!(packet[23], 3);
        assert_eq!(&packet[24..28], &[0, 0, 0, 5]);
        let lying = compose("get key=abc bodylen=2 magic=0x81").unwrap();
        assert_eq!(lying[0], 0x81);
        assert_eq!(&lying[8..12], &[0, 0, 0, 2]);
        assert_eq!(compose("0x1b extras=0102").unwrap()[4], 2);
        assert!(compose("frob").is_err());
        assert!(compose("get key").is_err());
    }

    #[test]
    fn renders_packets_and_finds_the_marker() {
        let mut reply = vec![0x81, 0x0c, 0, 1, 4, 0, 0, 1, 0, 0, 0, 6];
        reply.extend_from_slice(&[0, 0, 0, 9]);
        reply.extend_from_slice(&7u64.to_be_bytes());
        reply.extend_from_slice(&[0, 0, 0, 0, b'k', b'v']);
        assert!(!complete(&reply));
        let mut marker_reply = marker();
        marker_reply[0] = RESPONSE_MAGIC;
        marker_reply[11] = 6;
        marker_reply.extend_from_slice(b"1.6.18");
        let whole = [reply.clone(), marker_reply].concat();
        assert!(complete(&whole));
        assert_eq!(strip_marker(&whole), &reply[..]);
        assert_eq!(
            render(&reply),
            ["getk status=0x01 opaque=0x9 cas=7 extras=00000000 key=k value=v"]
        );
        assert_eq!(
            render(&reply[..5]),
            ["<partial packet> \\x81\\x0c\\x00\\x01\\x04"]
        );
    }
}
