//! A statement's shape: its text with its literal values made numbered parameters
//! (`?1`, `?2`, …), so that statements that differ only in their values (the same
//! point select for another key) share one parse, one translation and one compiled
//! SQLite statement ([`Shapes`]).
//!
//! Only literals whose meaning is their value become parameters:
//!
//! - integers that fit a BIGINT (`-9223372036854775808` stays as written: SQLite reads
//!   that literal as an integer, but minus a parameter of 2^63 as a REAL);
//! - single-quoted strings without a backslash (whose escapes are MySQL's to decode),
//!   not directly after a name (`X'7a'`, `_binary'…'`, `N'…'`) and not after an
//!   introducer (`_binary '…'`).
//!
//! Left as written, so that they stay part of the shape:
//!
//! - the result columns of a statement that starts with SELECT (up to its first FROM):
//!   MySQL names such a column by its text, and `SELECT 1` is not `SELECT ?1`;
//! - everything in `ORDER BY` and `GROUP BY` lists, where an integer is a position;
//! - decimals and exponents (SQLite's reading of the text is the one to keep), double-
//!   quoted strings, names.
//!
//! A statement with a comment, a variable (`@`), a `?` of its own, or that does not
//! start with SELECT, INSERT, REPLACE, UPDATE or DELETE has no shape, and neither has
//! one longer than [`KEEP_COMPILED_BYTES`]: the session takes its usual path for those.
//!
//! What it is not for: deciding that a shape is safe to run with parameters, which the
//! session learns by parsing, translating and compiling the shape the first time it
//! meets it (an upsert, or a shape SQLite or sqlparser refuses, runs as written).

use std::collections::HashMap;
use std::sync::Arc;

use crate::session::{Param, KEEP_COMPILED_BYTES};
use crate::translate::Translated;

/// How many shapes a session keeps; the least recently used goes first.
pub const SHAPES_KEPT: usize = 64;

/// A statement's text with its values as parameters, and the values.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    pub text: String,
    pub params: Vec<Param>,
}

impl Shape {
    /// The statement the shape stands for: its text with each value written back as a
    /// literal (an integer in decimal, a string quoted with its quotes doubled).
    pub fn statement(&self) -> String {
        let bytes = self.text.as_bytes();
        let mut out = String::with_capacity(self.text.len() + 16);
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\'' | b'"' | b'`' => {
                    let end = quoted_end(bytes, i).unwrap_or(bytes.len());
                    out.push_str(&self.text[i..end]);
                    i = end;
                }
                b'?' => {
                    let start = i + 1;
                    i = start;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                    let n: usize = self.text[start..i].parse().unwrap_or(0);
                    match n.checked_sub(1).and_then(|n| self.params.get(n)) {
                        Some(Param::Int(v)) => out.push_str(&v.to_string()),
                        Some(Param::Bytes(b)) => {
                            out.push('\'');
                            out.push_str(&String::from_utf8_lossy(b).replace('\'', "''"));
                            out.push('\'');
                        }
                        _ => out.push_str(&self.text[start - 1..i]),
                    }
                }
                _ => {
                    let c = self.text[i..].chars().next().unwrap_or(' ');
                    out.push(c);
                    i += c.len_utf8();
                }
            }
        }
        out
    }
}

/// Clause words that end a SELECT's result columns or an ORDER BY / GROUP BY list.
const AFTER_BY: [&str; 7] = ["LIMIT", "HAVING", "UNION", "WINDOW", "FOR", "LOCK", "INTO"];

/// The shape of `sql`, or None when it has none (see the module's notes).
pub fn shape(sql: &str) -> Option<Shape> {
    if sql.len() > KEEP_COMPILED_BYTES {
        return None;
    }
    let first = sql
        .trim_start()
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()?;
    let select = first.eq_ignore_ascii_case("SELECT");
    if !select
        && !["INSERT", "REPLACE", "UPDATE", "DELETE"]
            .iter()
            .any(|k| first.eq_ignore_ascii_case(k))
    {
        return None;
    }
    let bytes = sql.as_bytes();
    let mut text = String::with_capacity(sql.len() + 8);
    let mut params = Vec::new();
    // Whether the scan is in the first SELECT's result columns.
    let mut projection = select;
    let mut depth = 0usize;
    // The depth of the ORDER BY / GROUP BY list the scan is in.
    let mut by_list: Option<usize> = None;
    // The last word read outside quotes, upper-cased, and whether the token before the
    // current one was a name (so that a quote right after it is part of it).
    let mut last_word = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'#' | b'@' | b'?' => return None,
            b'-' if bytes.get(i + 1) == Some(&b'-') => return None,
            b'/' if bytes.get(i + 1) == Some(&b'*') => return None,
            b'(' => {
                depth += 1;
                text.push('(');
                i += 1;
            }
            b')' => {
                depth = depth.saturating_sub(1);
                if by_list.is_some_and(|d| depth < d) {
                    by_list = None;
                }
                text.push(')');
                i += 1;
            }
            b'\'' => {
                let end = quoted_end(bytes, i)?;
                let literal = &sql[i..end];
                // Touching a name or a number on either side: as written (`X'7a'`,
                // and a marker must not run into the digits after it).
                let after_name = (i > 0 && is_name_byte(bytes[i - 1]))
                    || bytes.get(end).is_some_and(|&c| is_name_byte(c));
                let introduced = last_word.starts_with('_');
                if projection
                    || by_list.is_some()
                    || after_name
                    || introduced
                    || literal.contains('\\')
                {
                    text.push_str(literal);
                } else {
                    let value = literal[1..literal.len() - 1].replace("''", "'");
                    params.push(Param::Bytes(value.into_bytes()));
                    push_param(&mut text, params.len());
                }
                last_word.clear();
                i = end;
            }
            b'"' | b'`' => {
                let end = quoted_end(bytes, i)?;
                text.push_str(&sql[i..end]);
                last_word.clear();
                i = end;
            }
            b'0'..=b'9' => {
                let start = i;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                let after_dot = start > 0 && bytes[start - 1] == b'.';
                let more = bytes.get(i).is_some_and(|&c| c == b'.' || is_name_byte(c));
                if more || after_dot {
                    // A decimal, an exponent, a name that starts with digits (`1e5`,
                    // `0x1F`, `2col`): as written.
                    while i < bytes.len() && (is_name_byte(bytes[i]) || bytes[i] == b'.') {
                        i += 1;
                    }
                    text.push_str(&sql[start..i]);
                    last_word.clear();
                    continue;
                }
                let digits = &sql[start..i];
                match digits.parse::<i64>() {
                    Ok(n) if !projection && by_list.is_none() => {
                        params.push(Param::Int(n));
                        push_param(&mut text, params.len());
                    }
                    _ => text.push_str(digits),
                }
                last_word.clear();
            }
            b if is_name_byte(b) => {
                let start = i;
                while i < bytes.len() && is_name_byte(bytes[i]) {
                    i += 1;
                }
                let word = &sql[start..i];
                text.push_str(word);
                let upper = word.to_ascii_uppercase();
                if upper == "BY" && matches!(last_word.as_str(), "ORDER" | "GROUP") {
                    by_list = Some(depth);
                } else if by_list == Some(depth) && AFTER_BY.contains(&upper.as_str()) {
                    by_list = None;
                }
                if projection && depth == 0 && upper == "FROM" {
                    projection = false;
                }
                last_word = upper;
            }
            _ => {
                // Whitespace, operators, commas: as they are. A character outside
                // ASCII is part of a name (MySQL allows them unquoted).
                let c = sql[i..].chars().next()?;
                text.push(c);
                if !c.is_ascii_whitespace() {
                    last_word.clear();
                }
                i += c.len_utf8();
            }
        }
    }
    Some(Shape { text, params })
}

/// Whether `b` may be part of an unquoted name (bytes past ASCII are: MySQL allows
/// letters of any script).
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Where the quoted text starting at `start` ends (one past its closing quote), with
/// MySQL's escapes: a doubled quote, and a backslash before any byte (but in names).
fn quoted_end(bytes: &[u8], start: usize) -> Option<usize> {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\\' && quote != b'`' {
            i += 2;
        } else if b == quote {
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
            } else {
                return Some(i + 1);
            }
        } else {
            i += 1;
        }
    }
    None
}

fn push_param(text: &mut String, n: usize) {
    text.push('?');
    text.push_str(&n.to_string());
}

/// A session's shapes: each shape's translation, or None for a shape that runs as
/// written. Emptied when the catalog changes, since a translation depends on it.
#[derive(Default)]
pub struct Shapes {
    kept: HashMap<String, (Option<Arc<Translated>>, u64)>,
    clock: u64,
}

impl Shapes {
    /// What is known of `shape`: Some(translation or None), or None when it is new.
    pub fn get(&mut self, text: &str) -> Option<Option<Arc<Translated>>> {
        self.clock += 1;
        let clock = self.clock;
        self.kept.get_mut(text).map(|(plan, used)| {
            *used = clock;
            plan.clone()
        })
    }

    /// Keeps what `text` is, making room by forgetting the least recently used shape.
    pub fn insert(&mut self, text: String, plan: Option<Arc<Translated>>) {
        if self.kept.len() >= SHAPES_KEPT {
            if let Some(oldest) = self
                .kept
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            {
                self.kept.remove(&oldest);
            }
        }
        self.clock += 1;
        self.kept.insert(text, (plan, self.clock));
    }

    pub fn clear(&mut self) {
        self.kept.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(sql: &str) -> Option<String> {
        shape(sql).map(|s| s.text)
    }

    #[test]
    fn values_become_parameters() {
        let s = shape("SELECT * FROM players WHERE id=42").unwrap_or_else(|| panic!());
        assert_eq!(s.text, "SELECT * FROM players WHERE id=?1");
        assert_eq!(s.params, vec![Param::Int(42)]);
        let s = shape("UPDATE t SET a = 'it''s', b=b+1 WHERE id IN (3, -4)")
            .unwrap_or_else(|| panic!());
        assert_eq!(s.text, "UPDATE t SET a = ?1, b=b+?2 WHERE id IN (?3, -?4)");
        assert_eq!(
            s.params,
            vec![
                Param::Bytes(b"it's".to_vec()),
                Param::Int(1),
                Param::Int(3),
                Param::Int(4)
            ]
        );
        assert_eq!(
            text("insert into t (a, b) values (1, 'x')").as_deref(),
            Some("insert into t (a, b) values (?1, ?2)")
        );
        assert_eq!(
            text("SELECT * FROM t WHERE level BETWEEN 3 AND 4 ORDER BY level LIMIT 10").as_deref(),
            Some("SELECT * FROM t WHERE level BETWEEN ?1 AND ?2 ORDER BY level LIMIT ?3")
        );
    }

    #[test]
    fn a_shape_writes_its_statement_back() {
        for sql in [
            "UPDATE t SET a = 'it''s ?1', b=b+1 WHERE id IN (3, -4) AND c = \"?2\"",
            "SELECT 'x', 5 FROM t WHERE a = 007 ORDER BY 1 LIMIT 3",
        ] {
            let s = shape(sql).unwrap_or_else(|| panic!("{sql}"));
            assert_eq!(shape(&s.statement()), Some(s.clone()), "{sql}");
        }
        assert_eq!(
            shape("SELECT a FROM t WHERE b = 007 AND c = 'x'").map(|s| s.statement()),
            Some("SELECT a FROM t WHERE b = 7 AND c = 'x'".to_string())
        );
    }

    #[test]
    fn what_is_more_than_a_value_stays_as_written() {
        // Result columns, positions, decimals, prefixed and escaped strings.
        assert_eq!(
            text("SELECT 1, 'a', (SELECT 2) FROM t WHERE x = 'b'").as_deref(),
            Some("SELECT 1, 'a', (SELECT 2) FROM t WHERE x = ?1")
        );
        assert_eq!(
            text("SELECT a FROM t GROUP BY 1 ORDER BY 2 DESC, a+1 LIMIT 5").as_deref(),
            Some("SELECT a FROM t GROUP BY 1 ORDER BY 2 DESC, a+1 LIMIT ?1")
        );
        assert_eq!(
            text("SELECT a FROM t WHERE (b IN (SELECT c FROM u ORDER BY 1)) AND d = 2").as_deref(),
            Some("SELECT a FROM t WHERE (b IN (SELECT c FROM u ORDER BY 1)) AND d = ?1")
        );
        assert_eq!(
            text("SELECT a FROM t WHERE b = 1.5 AND c = 1e3 AND d = 0x1F AND t.2c = 3").as_deref(),
            Some("SELECT a FROM t WHERE b = 1.5 AND c = 1e3 AND d = 0x1F AND t.2c = ?1")
        );
        assert_eq!(
            text(r"SELECT a FROM t WHERE b = X'7a' AND c = _binary 'q' AND d = 'a\'b' AND e = _utf8'z'")
                .as_deref(),
            Some(r"SELECT a FROM t WHERE b = X'7a' AND c = _binary 'q' AND d = 'a\'b' AND e = _utf8'z'")
        );
        assert_eq!(
            text("DELETE FROM t WHERE a = 9223372036854775808 AND \"s\" = `c`").as_deref(),
            Some("DELETE FROM t WHERE a = 9223372036854775808 AND \"s\" = `c`")
        );
        assert_eq!(
            text("SELECT a FROM t WHERE b = 'x'2 OR c = 'y'z").as_deref(),
            Some("SELECT a FROM t WHERE b = 'x'?1 OR c = 'y'z")
        );
        assert_eq!(
            text("SELECT naïve FROM t WHERE é = 'ü'").as_deref(),
            Some("SELECT naïve FROM t WHERE é = ?1")
        );
    }

    #[test]
    fn some_statements_have_no_shape() {
        for sql in [
            "SHOW TABLES",
            "SET autocommit=0",
            "SELECT @@version",
            "SELECT a FROM t WHERE b = @x",
            "SELECT a FROM t WHERE b = ?",
            "SELECT a FROM t -- note",
            "SELECT a FROM t # note",
            "SELECT /*+ hint */ a FROM t",
            "SELECT a FROM t WHERE b = 'open",
        ] {
            assert_eq!(shape(sql), None, "{sql}");
        }
        assert_eq!(
            shape(&format!("SELECT '{}'", "x".repeat(KEEP_COMPILED_BYTES))),
            None
        );
        // A question mark or an at sign inside a string is the string's.
        assert!(shape("SELECT a FROM t WHERE b = 'who? me@here'").is_some());
    }

    #[test]
    fn the_least_recently_used_shape_goes_first() {
        let mut shapes = Shapes::default();
        for n in 0..SHAPES_KEPT {
            shapes.insert(format!("s{n}"), None);
        }
        assert!(shapes.get("s0").is_some());
        shapes.insert("new".into(), None);
        assert!(shapes.get("s0").is_some());
        assert!(shapes.get("s1").is_none());
        assert!(shapes.get("new").is_some());
    }
}
