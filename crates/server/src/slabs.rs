//! memcached's slab-allocator administration (`slabs automove`, `slabs reassign`) and
//! `stats cachedump`, answered as memcached answers them, for an allocator with no
//! slab classes: Kura keeps items in its index and log, so there is nothing to move
//! or to list. Clients and their test suites send these; they get memcached's replies
//! and errors, in memcached's order (`process_slabs_automove_command` and the
//! `cachedump` branch of `process_stat` in memcached 1.6's `proto_text.c`).

use kura_protocol::number::strtoul_u32;
use kura_protocol::Tokens;

/// memcached's `MAX_NUMBER_OF_SLAB_CLASSES`: `stats cachedump` refuses class ids from
/// here up.
const SLAB_CLASSES: u32 = 64;

/// `slabs <arguments>`: `automove` is accepted (it tunes nothing here) with
/// memcached's replies; `reassign` and the rest get `ERROR` (`docs/protocol.md`).
pub fn slabs(arguments: Tokens<'_>, out: &mut Vec<u8>) {
    let words: Vec<&[u8]> = arguments.collect();
    // memcached looks at `noreply` in the last token of any command it sets it for.
    let noreply = words.last() == Some(&b"noreply".as_slice());
    let reply: &[u8] = match words.as_slice() {
        [b"automove", b"ratio", ratio, ..] => {
            if strtod(ratio) {
                b"OK\r\n"
            } else {
                b"ERROR\r\n"
            }
        }
        [b"automove", b"ratio"] => b"ERROR\r\n",
        [b"automove", level, ..] => match strtoul_u32(level) {
            None => b"CLIENT_ERROR bad command line format\r\n",
            Some(0..=2) => b"OK\r\n",
            Some(_) => b"ERROR\r\n",
        },
        // `slabs`, `slabs automove`, `slabs reassign …` and anything else: memcached's
        // dispatch refuses the short forms; a reassign has no page to move.
        _ => {
            out.extend_from_slice(b"ERROR\r\n");
            return;
        }
    };
    if !noreply {
        out.extend_from_slice(reply);
    }
}

/// `stats cachedump <class> <limit>`: memcached's checks, then no items (Kura has no
/// slab classes; memcached lists only items its LRU maintainer has moved to a class's
/// cold queue, so a fresh item is not listed there either).
pub fn cachedump(mut arguments: Tokens<'_>, out: &mut Vec<u8>) {
    let (Some(class), Some(limit)) = (arguments.next(), arguments.next()) else {
        out.extend_from_slice(b"CLIENT_ERROR bad command line\r\n");
        return;
    };
    match (strtoul_u32(class), strtoul_u32(limit)) {
        (Some(class), Some(_)) if class >= SLAB_CLASSES => {
            out.extend_from_slice(b"CLIENT_ERROR Illegal slab id\r\n");
        }
        (Some(_), Some(_)) => out.extend_from_slice(b"END\r\n"),
        _ => out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n"),
    }
}

/// memcached's `safe_strtod`: a number C's `strtod` reads through to the end of the
/// token: decimal (with `inf` and `nan`, as Rust reads them) or C's hexadecimal form.
fn strtod(token: &[u8]) -> bool {
    let unsigned = token
        .strip_prefix(b"-")
        .or_else(|| token.strip_prefix(b"+"));
    match unsigned.unwrap_or(token) {
        [b'0', b'x' | b'X', rest @ ..] => hex_float(rest),
        _ => std::str::from_utf8(token).is_ok_and(|t| t.parse::<f64>().is_ok()),
    }
}

/// The part of a C hexadecimal float after `0x`: hex digits with at most one point,
/// at least one digit, then an optional binary exponent `p[+-]digits`.
fn hex_float(rest: &[u8]) -> bool {
    let (mantissa, exponent) = match rest.iter().position(|&b| b == b'p' || b == b'P') {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let digits = mantissa.iter().filter(|b| b.is_ascii_hexdigit()).count();
    let points = mantissa.iter().filter(|&&b| b == b'.').count();
    let mantissa_ok = digits > 0 && points <= 1 && digits + points == mantissa.len();
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e
            .strip_prefix(b"-")
            .or_else(|| e.strip_prefix(b"+"))
            .unwrap_or(e);
        !e.is_empty() && e.iter().all(u8::is_ascii_digit)
    });
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_strtod_reads_whole() {
        for yes in [
            "0.5", "-1", "1e3", "inf", "0x10", "0x1.8p3", "-0X.8", "0x1p-2",
        ] {
            assert!(strtod(yes.as_bytes()), "{yes}");
        }
        for no in ["x", "", "0x", "0x1p", "0xg", "1.5x", "0x1.2.3", "--1"] {
            assert!(!strtod(no.as_bytes()), "{no}");
        }
    }
}
