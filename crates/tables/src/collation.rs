//! Collations: how a text column's values compare, in its keys (primary key, unique
//! and ordered indexes, so uniqueness and order follow it) and in SQL.
//!
//! Two rules, as MySQL's collations group:
//! - **binary** (`utf8mb4_bin`, `binary`, ...): bytes compared as bytes, the key is the
//!   value itself;
//! - **folded** (every `_ci` collation): each character compared by its weight,
//!   `utf8mb4_general_ci`'s: a letter of Latin-1 or Latin Extended-A weighs as its
//!   base letter in upper case (`é`, `É` and `E` are equal), any other character of
//!   the Basic Multilingual Plane as its simple upper case, and every character beyond
//!   it as U+FFFD (as `utf8mb4_general_ci` compares them all equal). A PAD SPACE
//!   collation ignores trailing spaces; `_0900_` and `nopad` ones do not. The key of a
//!   folded value is its weights, two bytes each, big-endian.
//!
//! What differs from MySQL: `utf8mb4_unicode_ci`, `utf8mb4_unicode_520_ci`,
//! `utf8mb4_0900_ai_ci` and `uca1400_ai_ci` are the Unicode Collation Algorithm there,
//! which also expands characters (`ß` equals `ss`) and weighs punctuation apart from
//! letters; here they fold as `utf8mb4_general_ci` does (`ß` equals `s`), under their
//! own names. Text is stored as UTF-8 whatever the character set.

use std::cmp::Ordering;

use crate::value::ValueRef;

/// How values of a collation compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Binary,
    /// By weight; `pad`: trailing spaces do not count.
    Folded {
        pad: bool,
    },
}

/// A collation MySQL names, by its place in [`COLLATIONS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Collation(u8);

/// Every collation Kura knows: its name, character set, MySQL's id and rule.
const COLLATIONS: &[(&str, &str, u16, Rule)] = &[
    ("utf8mb4_general_ci", "utf8mb4", 45, FOLDED),
    ("utf8mb4_bin", "utf8mb4", 46, Rule::Binary),
    ("utf8mb4_unicode_ci", "utf8mb4", 224, FOLDED),
    ("utf8mb4_unicode_520_ci", "utf8mb4", 246, FOLDED),
    ("utf8mb4_0900_ai_ci", "utf8mb4", 255, FOLDED_NO_PAD),
    ("utf8mb4_0900_bin", "utf8mb4", 309, Rule::Binary),
    ("utf8mb4_general_nopad_ci", "utf8mb4", 1069, FOLDED_NO_PAD),
    ("utf8mb4_nopad_bin", "utf8mb4", 1070, Rule::Binary),
    ("utf8mb4_uca1400_ai_ci", "utf8mb4", 2304, FOLDED),
    ("utf8mb3_general_ci", "utf8mb3", 33, FOLDED),
    ("utf8mb3_bin", "utf8mb3", 83, Rule::Binary),
    ("utf8mb3_unicode_ci", "utf8mb3", 192, FOLDED),
    ("latin1_swedish_ci", "latin1", 8, FOLDED),
    ("latin1_general_ci", "latin1", 48, FOLDED),
    ("latin1_bin", "latin1", 47, Rule::Binary),
    ("ascii_general_ci", "ascii", 11, FOLDED),
    ("ascii_bin", "ascii", 65, Rule::Binary),
    ("binary", "binary", 63, Rule::Binary),
];

const FOLDED: Rule = Rule::Folded { pad: true };
const FOLDED_NO_PAD: Rule = Rule::Folded { pad: false };

/// Each character set's default collation, as MariaDB's.
const CHARSET_DEFAULTS: &[(&str, &str)] = &[
    ("utf8mb4", "utf8mb4_general_ci"),
    ("utf8mb3", "utf8mb3_general_ci"),
    ("utf8", "utf8mb3_general_ci"),
    ("latin1", "latin1_swedish_ci"),
    ("ascii", "ascii_general_ci"),
    ("binary", "binary"),
];

impl Collation {
    /// `utf8mb4_general_ci`: a text column's collation when nothing chooses one, as
    /// MariaDB's with `utf8mb4`.
    pub const DEFAULT: Collation = Collation(0);
    /// `utf8mb4_bin`: the collation of every text column of a table made before Kura
    /// had collations (their keys are their bytes).
    pub const BIN: Collation = Collation(1);

    /// The collation named `name` (any case; `utf8_` is `utf8mb3_`).
    pub fn named(name: &str) -> Option<Collation> {
        let name = name.trim_matches(|c| c == '`' || c == '\'' || c == '"');
        let lower = name.to_ascii_lowercase();
        let lower = match lower.strip_prefix("utf8_") {
            Some(rest) => format!("utf8mb3_{rest}"),
            None => lower,
        };
        COLLATIONS
            .iter()
            .position(|(n, ..)| *n == lower)
            .map(|i| Collation(i as u8))
    }

    /// The default collation of character set `charset`.
    pub fn of_charset(charset: &str) -> Option<Collation> {
        let charset = charset
            .trim_matches(|c| c == '`' || c == '\'' || c == '"')
            .to_ascii_lowercase();
        let name = CHARSET_DEFAULTS.iter().find(|(c, _)| *c == charset)?.1;
        Collation::named(name)
    }

    /// Whether `collation` belongs to `charset`.
    pub fn of_set(self, charset: &str) -> bool {
        let charset = charset.trim_matches('`').to_ascii_lowercase();
        let charset = if charset == "utf8" {
            "utf8mb3"
        } else {
            charset.as_str()
        };
        self.charset() == charset
    }

    pub fn name(self) -> &'static str {
        COLLATIONS[usize::from(self.0)].0
    }

    pub fn charset(self) -> &'static str {
        COLLATIONS[usize::from(self.0)].1
    }

    /// MySQL's number for it (the protocol's column definitions carry it).
    pub fn id(self) -> u16 {
        COLLATIONS[usize::from(self.0)].2
    }

    pub fn rule(self) -> Rule {
        COLLATIONS[usize::from(self.0)].3
    }

    /// Whether it is its character set's default (`SHOW CREATE TABLE` names it only
    /// when not).
    pub fn is_charset_default(self) -> bool {
        Collation::of_charset(self.charset()) == Some(self)
    }

    /// Every collation: name, character set, id, whether it is the set's default.
    pub fn all() -> impl Iterator<Item = Collation> {
        (0..COLLATIONS.len()).map(|i| Collation(i as u8))
    }
}

impl Rule {
    /// Appends the bytes `text` compares by under this rule: itself, or its weights.
    pub fn key_bytes(self, text: &[u8], out: &mut Vec<u8>) {
        match self {
            Rule::Binary => out.extend_from_slice(text),
            Rule::Folded { pad } => {
                for w in weights(text, pad) {
                    out.extend_from_slice(&w.to_be_bytes());
                }
            }
        }
    }

    /// How `a` and `b` compare under this rule. SQLite calls it for every comparison
    /// of a case-insensitive column (`ORDER BY`, `DISTINCT`): ASCII, whose weight is
    /// its upper case, is compared byte by byte, the rest by weights from the first
    /// byte that is not.
    pub fn compare(self, a: &[u8], b: &[u8]) -> Ordering {
        let pad = match self {
            Rule::Binary => return a.cmp(b),
            Rule::Folded { pad } => pad,
        };
        let trim = |t: &[u8]| -> usize {
            if pad {
                t.iter().rposition(|&c| c != b' ').map_or(0, |p| p + 1)
            } else {
                t.len()
            }
        };
        let (a, b) = (&a[..trim(a)], &b[..trim(b)]);
        // The bytes both share weigh the same: start at the first that differs (at
        // the start of its character).
        let mut i = common_prefix(a, b);
        while i > 0
            && (a.get(i).is_some_and(|&c| c & 0xC0 == 0x80)
                || b.get(i).is_some_and(|&c| c & 0xC0 == 0x80))
        {
            i -= 1;
        }
        while i < a.len() && i < b.len() {
            let (x, y) = (a[i], b[i]);
            if !x.is_ascii() || !y.is_ascii() {
                break;
            }
            match x.to_ascii_uppercase().cmp(&y.to_ascii_uppercase()) {
                Ordering::Equal => i += 1,
                other => return other,
            }
        }
        // Every byte before `i` is ASCII, so `i` starts a character in both.
        weights(&a[i..], false).cmp(weights(&b[i..], false))
    }

    /// Whether `a` and `b` are equal under this rule.
    pub fn equal(self, a: &[u8], b: &[u8]) -> bool {
        self.compare(a, b) == Ordering::Equal
    }

    /// Whether two values of a column with this rule are the same value: texts under
    /// the rule, anything else as it is.
    pub fn same(self, a: ValueRef<'_>, b: ValueRef<'_>) -> bool {
        match (a, b) {
            (ValueRef::Bytes(a), ValueRef::Bytes(b)) => self.equal(a, b),
            (a, b) => a == b,
        }
    }
}

/// How many leading bytes `a` and `b` share, eight at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_ne_bytes(a[i..i + 8].try_into().unwrap_or([0; 8]));
        let y = u64::from_ne_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        if x != y {
            break;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// The collation a `CHARACTER SET` and a `COLLATE` clause choose (a column's, a
/// table's or a database's), if they name one; else MySQL's message for a name it
/// does not know, or a pair that does not go together.
pub fn chosen(charset: Option<&str>, collate: Option<&str>) -> Result<Option<Collation>, String> {
    let unquoted = |s: &str| {
        s.trim_matches(|c| c == '`' || c == '\'' || c == '"')
            .to_string()
    };
    let by_set = match charset {
        Some(set) => Some(
            Collation::of_charset(set)
                .ok_or_else(|| format!("Unknown character set: '{}'", unquoted(set)))?,
        ),
        None => None,
    };
    let Some(name) = collate else {
        return Ok(by_set);
    };
    let collation =
        Collation::named(name).ok_or_else(|| format!("Unknown collation: '{}'", unquoted(name)))?;
    if let Some(set) = charset {
        if !collation.of_set(set) {
            return Err(format!(
                "COLLATION '{}' is not valid for CHARACTER SET '{}'",
                collation.name(),
                unquoted(set)
            ));
        }
    }
    Ok(Some(collation))
}

/// MySQL's error code for a refusal of [`chosen`].
pub fn refusal_code(message: &str) -> Option<u16> {
    if message.starts_with("Unknown collation") {
        Some(1273)
    } else if message.starts_with("Unknown character set") {
        Some(1115)
    } else if message.starts_with("COLLATION '") {
        Some(1253)
    } else {
        None
    }
}

/// The weights of `text`'s characters (bytes that are not UTF-8 weigh as U+FFFD), its
/// trailing spaces left out if `pad`.
fn weights(text: &[u8], pad: bool) -> impl Iterator<Item = u16> + '_ {
    let text = if pad {
        let end = text.iter().rposition(|&b| b != b' ').map_or(0, |p| p + 1);
        &text[..end]
    } else {
        text
    };
    text.utf8_chunks().flat_map(|chunk| {
        let bad = (!chunk.invalid().is_empty()).then_some(0xFFFD);
        chunk.valid().chars().map(weight).chain(bad)
    })
}

/// A character's weight under `utf8mb4_general_ci`.
pub fn weight(c: char) -> u16 {
    let code = c as u32;
    if code < 0x80 {
        // ASCII, most text: its upper case without Unicode's tables.
        return u16::from((code as u8).to_ascii_uppercase());
    }
    if code > 0xFFFF {
        return 0xFFFD;
    }
    if let Some(base) = latin_base(code) {
        return base;
    }
    let mut upper = c.to_uppercase();
    match (upper.next(), upper.next()) {
        (Some(u), None) if (u as u32) <= 0xFFFF => u as u16,
        _ => code as u16,
    }
}

/// The weight of a letter of Latin-1 Supplement or Latin Extended-A: its base letter
/// in upper case, where it has one.
fn latin_base(code: u32) -> Option<u16> {
    let base = match code {
        0xC0..=0xC5 | 0xE0..=0xE5 => b'A',
        0xC7 | 0xE7 => b'C',
        0xC8..=0xCB | 0xE8..=0xEB => b'E',
        0xCC..=0xCF | 0xEC..=0xEF => b'I',
        0xD1 | 0xF1 => b'N',
        0xD2..=0xD6 | 0xF2..=0xF6 => b'O',
        0xD9..=0xDC | 0xF9..=0xFC => b'U',
        0xDD | 0xFD | 0xFF => b'Y',
        0xDF => b'S',
        0xE6 => return Some(0xC6),
        0xF0 => return Some(0xD0),
        0xF8 => return Some(0xD8),
        0xFE => return Some(0xDE),
        0x100..=0x105 => b'A',
        0x106..=0x10D => b'C',
        0x10E..=0x10F => b'D',
        0x112..=0x11B => b'E',
        0x11C..=0x123 => b'G',
        0x124..=0x125 => b'H',
        0x128..=0x131 => b'I',
        0x134..=0x135 => b'J',
        0x136..=0x137 => b'K',
        0x139..=0x13E => b'L',
        0x143..=0x148 => b'N',
        0x14C..=0x151 => b'O',
        0x154..=0x159 => b'R',
        0x15A..=0x161 => b'S',
        0x162..=0x165 => b'T',
        0x168..=0x173 => b'U',
        0x174..=0x175 => b'W',
        0x176..=0x178 => b'Y',
        0x179..=0x17E => b'Z',
        0x17F => b'S',
        _ => return None,
    };
    Some(u16::from(base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_charsets_lead_to_collations() {
        assert_eq!(
            Collation::named("UTF8MB4_GENERAL_CI"),
            Some(Collation::DEFAULT)
        );
        assert_eq!(
            Collation::named("utf8_bin").map(Collation::name),
            Some("utf8mb3_bin")
        );
        assert_eq!(Collation::of_charset("utf8mb4"), Some(Collation::DEFAULT));
        assert_eq!(
            Collation::of_charset("binary").map(Collation::name),
            Some("binary")
        );
        assert!(Collation::named("klingon_ci").is_none());
        assert!(Collation::BIN.of_set("utf8mb4") && !Collation::BIN.of_set("latin1"));
    }

    #[test]
    fn folded_text_ignores_case_accents_and_trailing_spaces() {
        let ci = Collation::DEFAULT.rule();
        assert!(ci.equal(b"Bob@X.com", b"bob@x.COM"));
        assert!(ci.equal("Éclair".as_bytes(), b"eclair"));
        assert!(ci.equal(b"a  ", b"a"));
        assert!(!ci.equal(b"a", b"b"));
        assert_eq!(ci.compare(b"apple", b"Banana"), Ordering::Less);
        let nopad = Collation::named("utf8mb4_0900_ai_ci").unwrap().rule();
        assert!(!nopad.equal(b"a ", b"a"));
        let bin = Collation::BIN.rule();
        assert_eq!(bin.compare(b"apple", b"Banana"), Ordering::Greater);
    }

    #[test]
    fn the_ascii_shortcut_compares_as_the_weights_do() {
        let ci = Collation::DEFAULT.rule();
        let words = [
            "",
            "a",
            "A",
            "a ",
            "ab",
            "aB ",
            "a\u{e9}",
            "A\u{c9}x",
            "[",
            "_",
            "z",
            "\u{ff}",
            "\u{e9}a",
            "\u{e9}B",
            "\u{e8}",
            "\u{e9}",
            "0123456789-abcdefgh",
            "0123456789-ABCDEFGz",
            "0123456789-abcdefgh\u{e9}",
            "0123456789-abcdefgh\u{c9}",
        ];
        for a in words {
            for b in words {
                let want = weights(a.as_bytes(), true).cmp(weights(b.as_bytes(), true));
                assert_eq!(ci.compare(a.as_bytes(), b.as_bytes()), want, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn an_ascii_character_weighs_as_its_unicode_upper_case() {
        for c in (0u8..0x80).map(char::from) {
            let mut upper = c.to_uppercase();
            let want = upper.next().map(|u| u as u16);
            assert_eq!(upper.next(), None);
            assert_eq!(Some(weight(c)), want, "{c:?}");
        }
    }

    #[test]
    fn folded_keys_sort_as_the_text_compares() {
        let ci = Collation::DEFAULT.rule();
        let key = |t: &str| {
            let mut k = Vec::new();
            ci.key_bytes(t.as_bytes(), &mut k);
            k
        };
        let words = ["zeta", "Alpha", "beta", "ALPHA ", "Ärger", "émile", "😀"];
        for a in words {
            for b in words {
                assert_eq!(key(a).cmp(&key(b)), ci.compare(a.as_bytes(), b.as_bytes()));
            }
        }
    }
}
