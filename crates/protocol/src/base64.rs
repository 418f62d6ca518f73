//! Base64 for meta-command keys (the `b` flag), bit-compatible with memcached
//! 1.6.18's `base64.c`.
//!
//! Encoding is standard base64 with `=` padding, the same bytes the `base64`
//! crate's standard engine produces. Decoding is memcached's own, which is more
//! lenient than RFC 4648 and must be reproduced to answer the same requests:
//! - bytes outside the alphabet are skipped, not rejected (`Zm9v!` is `foo`);
//! - `=` counts as an alphabet character worth zero, and the number of
//!   alphabet characters must be a non-zero multiple of four;
//! - decoding stops after the first four-character block that holds padding;
//!   one `=` drops one output byte, two drop two, more is an error;
//! - an empty result is an error (memcached returns length 0 for failure).
//!
//! Not for values: only keys are ever base64 in the protocol.

use base64::Engine as _;

/// Sentinel in [`DECODE`] for bytes outside the alphabet.
const SKIP: u8 = 0x80;

/// memcached's decode table: alphabet value for each byte, `=` is 0.
const DECODE: [u8; 256] = {
    let mut table = [SKIP; 256];
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut index = 0;
    while index < alphabet.len() {
        table[alphabet[index] as usize] = index as u8;
        index += 1;
    }
    table[b'=' as usize] = 0;
    table
};

/// Decodes a key the way memcached does; `None` where memcached fails.
pub fn decode_key(encoded: &[u8]) -> Option<Vec<u8>> {
    let count = encoded
        .iter()
        .filter(|&&byte| DECODE[usize::from(byte)] != SKIP)
        .count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(count / 4 * 3);
    let mut block = [0u8; 4];
    let mut filled = 0;
    let mut pad = 0;
    for &byte in encoded {
        let value = DECODE[usize::from(byte)];
        if value == SKIP {
            continue;
        }
        if byte == b'=' {
            pad += 1;
        }
        block[filled] = value;
        filled += 1;
        if filled == 4 {
            out.push((block[0] << 2) | (block[1] >> 4));
            out.push((block[1] << 4) | (block[2] >> 2));
            out.push((block[2] << 6) | block[3]);
            filled = 0;
            if pad > 0 {
                match pad {
                    1 => {
                        out.pop();
                    }
                    2 => {
                        out.pop();
                        out.pop();
                    }
                    _ => return None,
                }
                break;
            }
        }
    }
    if out.is_empty() {
        return None;
    }
    Some(out)
}

/// Appends the standard padded base64 encoding of `key` to `out`.
pub fn encode_key(key: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + base64::encoded_len(key.len(), true).unwrap_or(0), 0);
    match base64::engine::general_purpose::STANDARD.encode_slice(key, &mut out[start..]) {
        Ok(written) => out.truncate(start + written),
        Err(_) => {
            // Unreachable with a correctly sized buffer; fall back to allocating.
            out.truncate(start);
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(key)
                    .as_bytes(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(encoded: &[u8], expected: Option<&[u8]>) {
        assert_eq!(
            decode_key(encoded).as_deref(),
            expected,
            "decode_key({:?})",
            String::from_utf8_lossy(encoded)
        );
    }

    #[test]
    fn decodes_like_memcached() {
        // Each row was checked against memcached 1.6.18 (`mg <key> b k`).
        check(b"Zm9v", Some(b"foo"));
        check(b"Zm9v!", Some(b"foo"));
        check(b"Zg==", Some(b"f"));
        check(b"Zg=A", Some(b"f\x00"));
        check(b"Z=gA", Some(b"d\x08"));
        check(b"Zm9vZm9v", Some(b"foofoo"));
        check(b"Zm9vZg==Zm9v", Some(b"foof"));
        check(b"enp6", Some(b"zzz"));
        check(b"Zm9", None);
        check(b"foo", None);
        check(b"zz", None);
        check(b"###", None);
        check(b"!!!!", None);
        check(b"====", None);
        check(b"Zm9v=x==", None);
        check(b"", None);
    }

    #[test]
    fn encodes_padded() {
        for (key, encoded) in [
            (&b"f"[..], &b"Zg=="[..]),
            (b"fo", b"Zm8="),
            (b"foo", b"Zm9v"),
            (b"f\x00", b"ZgA="),
            (b"d\x08", b"ZAg="),
        ] {
            let mut out = b"x".to_vec();
            encode_key(key, &mut out);
            assert_eq!(&out[1..], encoded);
        }
    }
}
