//! MySQL's `LIKE` with its default escape, the backslash, as SQLite's two-argument
//! `like()`; and the range of text a pattern's literal prefix allows, which the virtual
//! tables read from an ordered index instead of the whole table.
//!
//! SQLite offers `x LIKE p` to a virtual table's planner only in this two-argument form
//! (`ESCAPE` makes it a three-argument function call it does not look into), so the
//! escape MySQL implies is this function's, not a rewrite of the statement. Text
//! compares as bytes (`utf8mb4_bin`, docs/sql.md): `%` is any run of characters, `_`
//! one character, `\` makes the next character literal (a `\` at the end is itself, as
//! MySQL reads it). An explicit `ESCAPE` goes to SQLite's own three-argument `like()`
//! (case-sensitive by `PRAGMA case_sensitive_like`).

use kura_tables::Rule;
use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;
use rusqlite::Connection;

/// One element of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// `%`: any run of characters, none included.
    Any,
    /// `_`: one character.
    One,
    Char(char),
}

fn tokens(pattern: &str) -> Vec<Token> {
    tokens_escaped(pattern, '\\')
}

fn tokens_escaped(pattern: &str, escape: char) -> Vec<Token> {
    let mut out = Vec::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        out.push(match c {
            c if c == escape => Token::Char(chars.next().unwrap_or(escape)),
            '%' => Token::Any,
            '_' => Token::One,
            c => Token::Char(c),
        });
    }
    out
}

/// Whether `text` matches `pattern`, character by character as bytes compare.
pub fn matches(pattern: &str, text: &str) -> bool {
    matches_by(&tokens(pattern), text, |a, b| a == b)
}

/// Whether `text` matches `pattern` under a case-insensitive collation: characters
/// compare by their weights (`kura_tables::collation`).
pub fn matches_folded(pattern: &str, text: &str) -> bool {
    matches_by(&tokens(pattern), text, |a, b| {
        a == b || kura_tables::collation::weight(a) == kura_tables::collation::weight(b)
    })
}

fn matches_by(pattern: &[Token], text: &str, same: impl Fn(char, char) -> bool) -> bool {
    let text: Vec<char> = text.chars().collect();
    // The classic wildcard match: on a mismatch, go back to the last `%` and let it
    // take one more character.
    let (mut p, mut t) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(Token::Any) => {
                back = Some((p, t));
                p += 1;
            }
            Some(Token::One) => {
                p += 1;
                t += 1;
            }
            Some(Token::Char(c)) if same(*c, text[t]) => {
                p += 1;
                t += 1;
            }
            _ => match back {
                Some((bp, bt)) => {
                    p = bp + 1;
                    t = bt + 1;
                    back = Some((bp, bt + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|k| *k == Token::Any)
}

/// The literal prefix of `pattern`.
fn literal_prefix(pattern: &str) -> String {
    tokens(pattern)
        .into_iter()
        .map_while(|k| match k {
            Token::Char(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// [`prefix_range`] for a case-insensitive column, whose keys are weights: the
/// weights every match's key lies in (at least the prefix's, below the prefix's with
/// its last weight raised). None when there is no literal prefix.
pub fn prefix_weights(pattern: &str, rule: Rule) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let prefix = literal_prefix(pattern);
    if prefix.is_empty() {
        return None;
    }
    let mut low = Vec::new();
    rule.key_bytes(prefix.as_bytes(), &mut low);
    // Trailing spaces may not count in a key, but they do in a match: the upper
    // bound keeps them.
    let mut high: Vec<u8> = Vec::new();
    Rule::Folded { pad: false }.key_bytes(prefix.as_bytes(), &mut high);
    while let Some(last) = high.pop() {
        if last < 0xFF {
            high.push(last + 1);
            return Some((low, Some(high)));
        }
    }
    Some((low, None))
}

/// The text every match of `pattern` lies in: at least its literal prefix, and below
/// the prefix with its last character raised by one (None: no upper bound, when the
/// prefix is empty or all its characters are the highest). None when there is no
/// literal prefix: every text may match.
pub fn prefix_range(pattern: &str) -> Option<(String, Option<String>)> {
    let prefix = literal_prefix(pattern);
    if prefix.is_empty() {
        return None;
    }
    // UTF-8's byte order is the characters' order, so raising the last character
    // that can be raised bounds every text that starts with the prefix.
    let mut upper: Vec<char> = prefix.chars().collect();
    let above = loop {
        let Some(last) = upper.pop() else {
            break None;
        };
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            upper.push(next);
            break Some(upper.into_iter().collect());
        }
    };
    Some((prefix, above))
}

/// A `like()` argument as the text it is compared as (None: NULL).
fn text_of(v: ValueRef<'_>) -> Option<String> {
    match v {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n.to_string()),
        ValueRef::Real(f) => Some(f.to_string()),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
    }
}

/// Makes `like(pattern, text)` MySQL's on `db`.
pub fn register(db: &Connection) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    db.create_scalar_function("like", 2, flags, |ctx| {
        let (Some(pattern), Some(text)) = (text_of(ctx.get_raw(0)), text_of(ctx.get_raw(1))) else {
            return Ok(None);
        };
        Ok(Some(matches(&pattern, &text)))
    })?;
    // `x MATCH p`, which `crate::collate` makes of a case-insensitive column's
    // `x LIKE p` (SQLite offers MATCH to a virtual table's planner as it does LIKE).
    db.create_scalar_function("match", 2, flags, |ctx| {
        let (Some(pattern), Some(text)) = (text_of(ctx.get_raw(0)), text_of(ctx.get_raw(1))) else {
            return Ok(None);
        };
        Ok(Some(matches_folded(&pattern, &text)))
    })?;
    // With an explicit escape character.
    db.create_scalar_function("mysql_like_ci", 3, flags, |ctx| {
        let (Some(pattern), Some(text), Some(escape)) = (
            text_of(ctx.get_raw(0)),
            text_of(ctx.get_raw(1)),
            text_of(ctx.get_raw(2)),
        ) else {
            return Ok(None);
        };
        let escape = escape.chars().next().unwrap_or('\\');
        let pattern = tokens_escaped(&pattern, escape);
        Ok(Some(matches_by(&pattern, &text, |a, b| {
            a == b || kura_tables::collation::weight(a) == kura_tables::collation::weight(b)
        })))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_mysql_reads_them() {
        let cases: &[(&str, &str, bool)] = &[
            ("abc", "abc", true),
            ("abc", "abd", false),
            ("abc", "ABC", false),
            ("a%", "a", true),
            ("a%", "abc", true),
            ("a%", "ba", false),
            ("%c", "abc", true),
            ("%b%", "abc", true),
            ("%b%", "ac", false),
            ("a_c", "abc", true),
            ("a_c", "ac", false),
            ("_", "é", true),
            ("__", "é", false),
            ("%", "", true),
            ("", "", true),
            ("", "a", false),
            ("a%b%c", "aXbYbZc", true),
            ("a%b%c", "aXbYbZ", false),
            ("a\\%", "a%", true),
            ("a\\%", "ab", false),
            ("a\\_c", "a_c", true),
            ("a\\_c", "abc", false),
            ("a\\\\", "a\\", true),
            ("a\\", "a\\", true),
            ("%%a", "ba", true),
        ];
        for (pattern, text, want) in cases {
            assert_eq!(matches(pattern, text), *want, "{text:?} LIKE {pattern:?}");
        }
    }

    #[test]
    fn a_prefix_bounds_its_matches() {
        assert_eq!(prefix_range("%a"), None);
        assert_eq!(prefix_range("_a"), None);
        assert_eq!(prefix_range(""), None);
        assert_eq!(
            prefix_range("ab%"),
            Some(("ab".to_string(), Some("ac".to_string())))
        );
        assert_eq!(
            prefix_range("ab_d"),
            Some(("ab".to_string(), Some("ac".to_string())))
        );
        assert_eq!(
            prefix_range("a\\%b%"),
            Some(("a%b".to_string(), Some("a%c".to_string())))
        );
        assert_eq!(
            prefix_range("abc"),
            Some(("abc".to_string(), Some("abd".to_string())))
        );
        // Past a surrogate's range, and past the highest character.
        assert_eq!(
            prefix_range("a\u{d7ff}%"),
            Some(("a\u{d7ff}".to_string(), Some("a\u{e000}".to_string())))
        );
        let top = format!("a{}", char::MAX);
        assert_eq!(
            prefix_range(&format!("{top}%")),
            Some((top.clone(), Some("b".to_string())))
        );
        assert_eq!(
            prefix_range(&format!("{}%", char::MAX)),
            Some((char::MAX.to_string(), None))
        );
    }
}
