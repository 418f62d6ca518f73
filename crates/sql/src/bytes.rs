//! A statement's text as its bytes came: MySQL takes any bytes inside a quoted
//! string (mysqldump writes a BLOB's bytes so, escaped), while the parser and SQLite
//! take text, and SQLite's text ends at a NUL. A string literal whose value, its
//! escapes read, is not UTF-8 or holds a NUL is written as the hex literal of its
//! bytes (`X'00ff'`), which means the same bytes to MySQL and to SQLite; the rest of
//! the statement is left as it came.
//!
//! Lexing follows MySQL's: strings in `'` or `"` with `\` escapes and doubled
//! quotes, names in backticks, comments (`-- `, `#`, `/* */`, whose versioned form
//! `/*!` holds code and is read as code).

use std::borrow::Cow;

/// `sql` with every string literal that is not text written in hex, as UTF-8 text
/// (bytes outside strings that are not UTF-8 become U+FFFD, as they did).
pub fn statement_text(sql: &[u8]) -> Cow<'_, str> {
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    let mut copied = 0;
    while i < sql.len() {
        match sql[i] {
            quote @ (b'\'' | b'"') => {
                let (end, value) = string(sql, i, quote);
                if value.contains(&0) || std::str::from_utf8(&value).is_err() {
                    let out = out.get_or_insert_with(Vec::new);
                    out.extend_from_slice(&sql[copied..i]);
                    hex_literal(out, &value);
                    copied = end;
                }
                i = end;
            }
            // A bit literal, `b'1000001'`: its bytes in hex, as the parser has no
            // bit literals.
            b'b' | b'B'
                if sql.get(i + 1) == Some(&b'\'')
                    && (i == 0 || !(sql[i - 1].is_ascii_alphanumeric() || sql[i - 1] == b'_')) =>
            {
                let digits = &sql[i + 2..];
                let len = digits
                    .iter()
                    .take_while(|b| matches!(b, b'0' | b'1'))
                    .count();
                if digits.get(len) != Some(&b'\'') {
                    i += 1;
                    continue;
                }
                let mut value = vec![0u8; len.div_ceil(8)];
                for (k, &d) in digits[..len].iter().rev().enumerate() {
                    if d == b'1' {
                        let at = value.len() - 1 - k / 8;
                        value[at] |= 1 << (k % 8);
                    }
                }
                let out = out.get_or_insert_with(Vec::new);
                out.extend_from_slice(&sql[copied..i]);
                hex_literal(out, &value);
                i += 2 + len + 1;
                copied = i;
            }
            _ => i = past_name_or_comment(sql, i).unwrap_or(i + 1),
        }
    }
    match out {
        None => String::from_utf8_lossy(sql),
        Some(mut out) => {
            out.extend_from_slice(&sql[copied..]);
            Cow::Owned(String::from_utf8_lossy(&out).into_owned())
        }
    }
}

/// The statements of a multi-statement COM_QUERY (`a; b`), split at the `;`s outside
/// strings, names and comments; empty ones left out.
pub fn statements(sql: &str) -> Vec<&str> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < b.len() {
        match b[i] {
            quote @ (b'\'' | b'"') => i = string(b, i, quote).0,
            b';' => {
                out.push(&sql[start..i]);
                i += 1;
                start = i;
            }
            _ => i = past_name_or_comment(b, i).unwrap_or(i + 1),
        }
    }
    out.push(&sql[start..]);
    out.retain(|s| !s.trim().is_empty());
    out
}

/// `X'...'`: `bytes` as a hex literal.
fn hex_literal(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(b"X'");
    for b in bytes {
        out.extend_from_slice(format!("{b:02x}").as_bytes());
    }
    out.push(b'\'');
}

/// Where the name in backticks or the comment (`#`, `-- `, `/* */`, not the
/// versioned `/*!`, which is code) starting at `i` ends; None if none starts there.
fn past_name_or_comment(sql: &[u8], i: usize) -> Option<usize> {
    Some(match sql[i] {
        b'`' => sql[i + 1..]
            .iter()
            .position(|&b| b == b'`')
            .map_or(sql.len(), |p| i + 1 + p + 1),
        b'#' => line_end(sql, i),
        b'-' if sql.get(i + 1) == Some(&b'-')
            && sql.get(i + 2).is_none_or(|b| b.is_ascii_whitespace()) =>
        {
            line_end(sql, i)
        }
        b'/' if sql.get(i + 1) == Some(&b'*') && sql.get(i + 2) != Some(&b'!') => {
            find(sql, i + 2, b"*/").map_or(sql.len(), |p| p + 2)
        }
        _ => return None,
    })
}

fn line_end(sql: &[u8], from: usize) -> usize {
    sql[from..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(sql.len(), |p| from + p + 1)
}

fn find(sql: &[u8], from: usize, what: &[u8]) -> Option<usize> {
    sql.get(from..)?
        .windows(what.len())
        .position(|w| w == what)
        .map(|p| from + p)
}

/// The string starting with `quote` at `start`: where it ends (past its closing
/// quote, or the end of the text) and its value, escapes read as MySQL reads them.
fn string(sql: &[u8], start: usize, quote: u8) -> (usize, Vec<u8>) {
    let mut value = Vec::new();
    let mut i = start + 1;
    while i < sql.len() {
        let b = sql[i];
        if b == b'\\' {
            let Some(&next) = sql.get(i + 1) else {
                break;
            };
            match next {
                b'0' => value.push(0),
                b'b' => value.push(8),
                b'n' => value.push(b'\n'),
                b'r' => value.push(b'\r'),
                b't' => value.push(b'\t'),
                b'Z' => value.push(26),
                // LIKE's wildcards keep their backslash.
                b'%' | b'_' => value.extend_from_slice(&[b'\\', next]),
                other => value.push(other),
            }
            i += 2;
        } else if b == quote {
            if sql.get(i + 1) == Some(&quote) {
                value.push(quote);
                i += 2;
            } else {
                return (i + 1, value);
            }
        } else {
            value.push(b);
            i += 1;
        }
    }
    (sql.len(), value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_splits_at_its_own_semicolons() {
        assert_eq!(
            statements("SELECT 'a;b'; SELECT `c;d` -- e;f\n; /* g;h */ SELECT 1;;"),
            vec![
                "SELECT 'a;b'",
                " SELECT `c;d` -- e;f\n",
                " /* g;h */ SELECT 1"
            ]
        );
        assert_eq!(statements("SELECT 1"), vec!["SELECT 1"]);
        assert_eq!(statements("  ;  "), Vec::<&str>::new());
    }

    #[test]
    fn only_strings_that_are_not_text_change() {
        let same = "SELECT 'it''s', \"a\\\\b\", `x'y` FROM t -- 'é\n";
        assert_eq!(statement_text(same.as_bytes()), same);
        assert_eq!(
            statement_text(b"INSERT INTO b VALUES ('k', '\\0\xff\\'x'), ('\\\\')"),
            "INSERT INTO b VALUES ('k', X'00ff2778'), ('\\\\')"
        );
        assert_eq!(
            statement_text(b"/*!40000 SELECT '\x80' */ # '\x80'"),
            "/*!40000 SELECT X'80' */ # '\u{fffd}'"
        );
        assert_eq!(
            statement_text(b"SELECT b'1000001', B'1', b'', ab'1'"),
            "SELECT X'41', X'01', X'', ab'1'"
        );
        assert_eq!(
            statement_text(b"SELECT 'unterminated \x80"),
            "SELECT X'756e7465726d696e617465642080'"
        );
    }
}
