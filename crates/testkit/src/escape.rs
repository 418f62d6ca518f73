//! The escape syntax shared by transcripts (`>raw` lines) and by every place that
//! shows wire bytes to a person (golden files, mismatch reports).
//!
//! Printable ASCII stands for itself except the backslash. Escapes: `\\`, `\r`,
//! `\n`, `\t`, `\0`, `\xHH`, and `\(U*N)`: the unit `U` (one or more characters or
//! escapes, up to the first `*`) repeated `N` times, so a 1 MiB value stays one short
//! line. A literal `*` inside a unit is written `\x2a`. `escape` followed by
//! `unescape` is the identity on every byte string.

/// Runs at least this long are written as `\(U*N)`.
const RUN_MIN: usize = 16;

/// Renders bytes as one line of text in the escape syntax.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        let run = bytes[i..].iter().take_while(|&&b| b == byte).count();
        if run >= RUN_MIN {
            out.push_str("\\(");
            if byte == b'*' {
                // A literal '*' would end the unit.
                out.push_str("\\x2a");
            } else {
                push_escaped(byte, &mut out);
            }
            out.push('*');
            out.push_str(&run.to_string());
            out.push(')');
            i += run;
        } else {
            push_escaped(byte, &mut out);
            i += 1;
        }
    }
    out
}

fn push_escaped(byte: u8, out: &mut String) {
    match byte {
        b'\\' => out.push_str("\\\\"),
        b'\r' => out.push_str("\\r"),
        b'\n' => out.push_str("\\n"),
        b'\t' => out.push_str("\\t"),
        0x20..=0x7e => out.push(char::from(byte)),
        _ => out.push_str(&format!("\\x{byte:02x}")),
    }
}

/// Parses text in the escape syntax back into bytes.
pub fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && bytes.get(i + 1) == Some(&b'(') {
            i += 2;
            let mut units = Vec::new();
            while bytes.get(i) != Some(&b'*') {
                if i >= bytes.len() {
                    return Err(format!("expected '*' in repeat in {text:?}"));
                }
                let (byte, next) = unit(bytes, i)?;
                units.push(byte);
                i = next;
            }
            if units.is_empty() {
                return Err(format!("empty repeat unit at byte {i} of {text:?}"));
            }
            i += 1;
            let digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
            let count: usize = text[i..i + digits]
                .parse()
                .map_err(|_| format!("bad repeat count at byte {i} of {text:?}"))?;
            i += digits;
            if bytes.get(i) != Some(&b')') {
                return Err(format!(
                    "expected ')' closing repeat at byte {i} of {text:?}"
                ));
            }
            i += 1;
            for _ in 0..count {
                out.extend_from_slice(&units);
            }
        } else {
            let (byte, next) = unit(bytes, i)?;
            out.push(byte);
            i = next;
        }
    }
    Ok(out)
}

/// One character or one escape starting at `i`: the byte and the index after it.
fn unit(bytes: &[u8], i: usize) -> Result<(u8, usize), String> {
    let Some(&first) = bytes.get(i) else {
        return Err("escape ends early".to_string());
    };
    if first != b'\\' {
        return Ok((first, i + 1));
    }
    match bytes.get(i + 1) {
        Some(b'\\') => Ok((b'\\', i + 2)),
        Some(b'r') => Ok((b'\r', i + 2)),
        Some(b'n') => Ok((b'\n', i + 2)),
        Some(b't') => Ok((b'\t', i + 2)),
        Some(b'0') => Ok((0, i + 2)),
        Some(b'x') => {
            let hex = bytes.get(i + 2..i + 4).ok_or("\\x needs two hex digits")?;
            let hex = std::str::from_utf8(hex).map_err(|_| "\\x needs two hex digits")?;
            let byte = u8::from_str_radix(hex, 16).map_err(|_| format!("bad hex \\x{hex}"))?;
            Ok((byte, i + 4))
        }
        other => Err(format!(
            "unknown escape \\{}",
            other.map(|&b| char::from(b)).unwrap_or(' ')
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(bytes: &[u8], text: &str) {
        assert_eq!(escape(bytes), text);
        assert_eq!(unescape(text).as_deref(), Ok(bytes));
    }

    #[test]
    fn table() {
        check(b"STORED\r\n", "STORED\\r\\n");
        check(b"a\\b\t\x00\xff", "a\\\\b\\t\\x00\\xff");
        check(&[b'x'; 16], "\\(x*16)");
        check(&[b'x'; 15], "xxxxxxxxxxxxxxx");
        check(&[0u8; 20], "\\(\\x00*20)");
        check(b"", "");
        check(&[b'*'; 16], "\\(\\x2a*16)");
        assert_eq!(unescape("\\(ab*3)").as_deref(), Ok(&b"ababab"[..]));
        assert_eq!(unescape("\\(\\r\\n*2)x").as_deref(), Ok(&b"\r\n\r\nx"[..]));
        assert!(unescape("\\(*3)").is_err());
        assert_eq!(unescape("\\0\\(\\r*2)").as_deref(), Ok(&b"\0\r\r"[..]));
        assert!(unescape("\\q").is_err());
        assert!(unescape("\\(x*3").is_err());
        assert!(unescape("\\x4").is_err());
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unescape(&escape(&all)), Ok(all));
    }
}
