//! Collations in SQL: a text column compares as its collation says
//! (`kura_tables::collation`) in `=`, `<`, `IN`, `ORDER BY`, `GROUP BY`, `DISTINCT`,
//! `MIN`/`MAX` and `LIKE`.
//!
//! SQLite is told each case-insensitive column's collation in the virtual table's
//! declaration ([`sqlite_collation`], registered by [`register`]), so its comparisons
//! of the column follow it. Its `LIKE` knows no collation: a statement's `x LIKE p` on
//! such a column is rewritten to `x MATCH p` ([`fold_likes`]), SQLite's other
//! operator that it offers a virtual table's planner, so the index still reads only
//! the pattern's prefix, as weights; `match()` compares characters by weight.
//!
//! `REGEXP` on such a column becomes `regexp_ci()`, a case-insensitive match.
//!
//! `unsafe`: the collations are SQLite C functions ([`register`]); no other unsafe
//! code.
//!
//! What is not MySQL's: a literal compared with a literal (`'a' = 'A'`), and an
//! expression of a column (`LOWER(name)`), compare as bytes, where MySQL takes the
//! connection's collation or the column's.

#![allow(unsafe_code)]

use std::fmt::Write as _;
use std::ops::ControlFlow;

use kura_tables::Rule;
use rusqlite::{ffi, Connection};
use sqlparser::ast::{visit_expressions_mut, BinaryOperator, Expr, Statement};

use crate::columns::StatementTables;

/// The SQLite collation a column of `rule` is declared with; None: SQLite's own
/// (bytes).
pub fn sqlite_collation(rule: Rule) -> Option<&'static str> {
    match rule {
        Rule::Binary => None,
        Rule::Folded { pad: true } => Some("mysql_ci"),
        Rule::Folded { pad: false } => Some("mysql_ci_nopad"),
    }
}

/// The collation an ENUM column is declared with: its members' places order it, as
/// MySQL orders an ENUM, and `rule` matches text to a member; text that is no member
/// compares as text. The members are in the
/// name (hex, so any text fits), so that every session defines it the first time
/// SQLite meets it ([`register`]'s `collation_needed`), with nothing to keep in step
/// with the catalog.
pub fn enum_collation(members: &[String], rule: Rule) -> String {
    let mut name = String::from(match rule {
        Rule::Binary => ENUM_BIN,
        Rule::Folded { pad: true } => ENUM_CI,
        Rule::Folded { pad: false } => ENUM_CI_NOPAD,
    });
    for (i, member) in members.iter().enumerate() {
        if i > 0 {
            name.push('_');
        }
        for b in member.as_bytes() {
            let _ = write!(name, "{b:02x}");
        }
    }
    name
}

const ENUM_BIN: &str = "kura_enum_bin_";
const ENUM_CI: &str = "kura_enum_ci_";
const ENUM_CI_NOPAD: &str = "kura_enum_cinp_";

/// Defines an [`enum_collation`] SQLite asks for by name.
fn define_enum(db: &Connection, name: &str) -> rusqlite::Result<()> {
    let (rule, hex) = if let Some(hex) = name.strip_prefix(ENUM_BIN) {
        (Rule::Binary, hex)
    } else if let Some(hex) = name.strip_prefix(ENUM_CI) {
        (Rule::Folded { pad: true }, hex)
    } else if let Some(hex) = name.strip_prefix(ENUM_CI_NOPAD) {
        (Rule::Folded { pad: false }, hex)
    } else {
        return Ok(());
    };
    let members: Option<Vec<Vec<u8>>> = hex
        .split('_')
        .map(|h| {
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
                .collect()
        })
        .collect();
    let Some(members) = members else {
        return Ok(());
    };
    let place = move |text: &[u8]| {
        members
            .iter()
            .position(|m| m.as_slice() == text || rule.equal(m, text))
    };
    db.create_collation(name, move |a: &str, b: &str| {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        match (place(a), place(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            // Text that is no member compares as text (MySQL's `e > 'b'`).
            _ => rule.compare(a, b),
        }
    })
}

/// Defines the collations [`sqlite_collation`] names on `db`, and has it define each
/// [`enum_collation`] when it first needs one.
///
/// Through SQLite's C interface rather than rusqlite's `create_collation`, which
/// checks both texts for UTF-8 (and copies what is not) at every comparison: an
/// `ORDER BY` or `DISTINCT` over a case-insensitive column makes thousands of them
/// (sysbench's `oltp_read_only` spent a third more CPU per transaction so), and
/// [`Rule::compare`] reads bytes, UTF-8 or not.
pub fn register(db: &Connection) -> rusqlite::Result<()> {
    for (pad, compare) in [
        (true, compare_folded::<true> as Compare),
        (false, compare_folded::<false> as Compare),
    ] {
        let name = sqlite_collation(Rule::Folded { pad }).unwrap_or("mysql_ci");
        let name = std::ffi::CString::new(name).map_err(|_| rusqlite::Error::InvalidQuery)?;
        // SAFETY: `db.handle()` is the open connection's, used on this thread only
        // while `db` lives; the name is copied by SQLite; the function takes no
        // context (null) and so needs no destructor.
        let rc = unsafe {
            ffi::sqlite3_create_collation_v2(
                db.handle(),
                name.as_ptr(),
                ffi::SQLITE_UTF8,
                std::ptr::null_mut(),
                Some(compare),
                None,
            )
        };
        if rc != ffi::SQLITE_OK {
            return Err(rusqlite::Error::SqliteFailure(ffi::Error::new(rc), None));
        }
    }
    db.collation_needed(define_enum)
}

type Compare = unsafe extern "C" fn(
    *mut std::ffi::c_void,
    std::ffi::c_int,
    *const std::ffi::c_void,
    std::ffi::c_int,
    *const std::ffi::c_void,
) -> std::ffi::c_int;

/// SQLite's comparison of two texts under a folded rule.
///
/// # Safety
/// SQLite calls it with `a` and `b` pointing at `a_len` and `b_len` readable bytes.
unsafe extern "C" fn compare_folded<const PAD: bool>(
    _context: *mut std::ffi::c_void,
    a_len: std::ffi::c_int,
    a: *const std::ffi::c_void,
    b_len: std::ffi::c_int,
    b: *const std::ffi::c_void,
) -> std::ffi::c_int {
    let bytes = |p: *const std::ffi::c_void, len: std::ffi::c_int| -> &[u8] {
        match usize::try_from(len) {
            // SAFETY: the caller's promise, for a pointer that is not null.
            Ok(len) if len > 0 && !p.is_null() => unsafe {
                std::slice::from_raw_parts(p.cast::<u8>(), len)
            },
            _ => &[],
        }
    };
    let rule = Rule::Folded { pad: PAD };
    match rule.compare(bytes(a, a_len), bytes(b, b_len)) {
        std::cmp::Ordering::Less => -1,
        std::cmp::Ordering::Equal => 0,
        std::cmp::Ordering::Greater => 1,
    }
}

/// Rewrites each `x [NOT] LIKE p [ESCAPE e]` of `statement` whose `x` is a
/// case-insensitive column into `x MATCH p` (with an escape, `mysql_like_ci(p, x, e)`),
/// and each `x [NOT] REGEXP p` into `regexp_ci(p, x)`, before the statement's table
/// names are made SQLite's.
pub fn fold_likes(statement: &mut Statement, tables: &StatementTables<'_>) {
    if tables.is_empty() {
        return;
    }
    let _ = visit_expressions_mut(statement, |expr: &mut Expr| {
        if let Expr::RLike {
            negated,
            expr: text,
            pattern,
            ..
        } = expr
        {
            if matches!(tables.rule_of(text), Some(Rule::Folded { .. })) {
                if let Ok(call) = crate::translate::call("regexp_ci", &[pattern, text]) {
                    *expr = negate(*negated, call);
                }
            }
            return ControlFlow::Continue(());
        }
        let Expr::Like {
            negated,
            any: false,
            expr: text,
            pattern,
            escape_char,
        } = expr
        else {
            return ControlFlow::<()>::Continue(());
        };
        if !matches!(tables.rule_of(text), Some(Rule::Folded { .. })) {
            return ControlFlow::Continue(());
        }
        let folded = match escape_char.as_deref() {
            None => Expr::BinaryOp {
                left: text.clone(),
                op: BinaryOperator::Match,
                right: pattern.clone(),
            },
            Some(escape) => {
                match crate::translate::call("mysql_like_ci", &[pattern, text, escape]) {
                    Ok(call) => call,
                    Err(_) => return ControlFlow::Continue(()),
                }
            }
        };
        *expr = negate(*negated, folded);
        ControlFlow::Continue(())
    });
}

/// `NOT (expr)` if `negated`, else `(expr)`.
fn negate(negated: bool, expr: Expr) -> Expr {
    let nested = Expr::Nested(Box::new(expr));
    if negated {
        Expr::UnaryOp {
            op: sqlparser::ast::UnaryOperator::Not,
            expr: Box::new(nested),
        }
    } else {
        nested
    }
}
