//! MySQL's scalar functions as SQLite functions of the session's connection, where
//! SQLite has none of that name or one that answers otherwise (`length` counts bytes,
//! `upper` and `lower` know every letter, `hex` of a number is the number's,
//! `round` of a DOUBLE rounds half to even, `concat` is NULL when an argument is).
//! Characters are Unicode scalar values (utf8mb4's); a NULL argument gives NULL
//! unless MySQL says otherwise. The syntax SQLite lacks (`POSITION(a IN b)`,
//! `SUBSTRING(s FROM p FOR n)`, `TRIM(LEADING x FROM s)`, `CAST(x AS SIGNED)`,
//! `REGEXP`) is rewritten to these by `translate.rs`.

use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::{Value, ValueRef};
use rusqlite::Connection;

/// An argument as text, as MySQL converts it (numbers in their shortest form).
fn text(v: ValueRef<'_>) -> Option<String> {
    match v {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n.to_string()),
        ValueRef::Real(f) => Some(real_text(f)),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
    }
}

/// A DOUBLE as MySQL writes it: without a trailing `.0`.
fn real_text(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        format!("{}", f as i64)
    } else {
        f.to_string()
    }
}

/// An argument as an integer, as MySQL converts it (a string's leading number).
fn int(v: ValueRef<'_>) -> Option<i64> {
    match v {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n),
        ValueRef::Real(f) => Some(f.round_ties_even() as i64),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(leading_number(t).round_ties_even() as i64),
    }
}

/// An argument as a DOUBLE.
fn real(v: ValueRef<'_>) -> Option<f64> {
    match v {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n as f64),
        ValueRef::Real(f) => Some(f),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(leading_number(t)),
    }
}

/// The number a string starts with, as MySQL reads `'12abc'` (0 for none).
fn leading_number(t: &[u8]) -> f64 {
    let s = String::from_utf8_lossy(t);
    let s = s.trim_start();
    let mut end = 0;
    let bytes = s.as_bytes();
    let mut seen_dot = false;
    let mut seen_e = false;
    while end < bytes.len() {
        let b = bytes[end];
        let ok = b.is_ascii_digit()
            || ((b == b'-' || b == b'+')
                && (end == 0 || (seen_e && matches!(bytes[end - 1], b'e' | b'E'))))
            || (b == b'.' && !seen_dot && !seen_e)
            || ((b == b'e' || b == b'E') && !seen_e && end > 0);
        if !ok {
            break;
        }
        seen_dot |= b == b'.';
        seen_e |= b == b'e' || b == b'E';
        end += 1;
    }
    // Back off an exponent or sign with no digits after it.
    while end > 0 && s[..end].parse::<f64>().is_err() {
        end -= 1;
    }
    s[..end].parse().unwrap_or(0.0)
}

fn chars(s: &str) -> Vec<char> {
    s.chars().collect()
}

type Result<T> = rusqlite::Result<T>;

/// Registers every function on `db`.
pub fn register(db: &Connection) -> Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    let scalar = |name: &str, args: i32, f: fn(&mut Context<'_>) -> Result<Value>| {
        db.create_scalar_function(name, args, flags, f)
    };
    for name in ["char_length", "character_length"] {
        scalar(name, 1, |c| {
            Ok(
                text(c.get_raw(0))
                    .map_or(Value::Null, |s| Value::Integer(s.chars().count() as i64)),
            )
        })?;
    }
    for name in ["length", "octet_length"] {
        scalar(name, 1, |c| {
            Ok(match c.get_raw(0) {
                ValueRef::Blob(b) => Value::Integer(b.len() as i64),
                v => text(v).map_or(Value::Null, |s| Value::Integer(s.len() as i64)),
            })
        })?;
    }
    scalar("left", 2, |c| {
        substring_of(c, |s, n| s.iter().take(n).collect())
    })?;
    scalar("right", 2, |c| {
        substring_of(c, |s, n| s[s.len().saturating_sub(n)..].iter().collect())
    })?;
    scalar("reverse", 1, |c| {
        Ok(text(c.get_raw(0)).map_or(Value::Null, |s| Value::Text(s.chars().rev().collect())))
    })?;
    scalar("lpad", 3, |c| pad(c, true))?;
    scalar("rpad", 3, |c| pad(c, false))?;
    scalar("locate", 2, |c| locate(c, 1))?;
    scalar("locate", 3, |c| match int(c.get_raw(2)) {
        None => Ok(Value::Null),
        Some(from) => locate(c, from),
    })?;
    scalar("mod", 2, |c| arithmetic_mod(c.get_raw(0), c.get_raw(1)))?;
    scalar("greatest", -1, |c| extreme(c, std::cmp::Ordering::Greater))?;
    scalar("least", -1, |c| extreme(c, std::cmp::Ordering::Less))?;
    for (name, f) in [
        ("sqrt", f64::sqrt as fn(f64) -> f64),
        ("exp", f64::exp),
        ("ln", f64::ln),
        ("log", f64::ln),
        ("log10", f64::log10),
        ("log2", f64::log2),
        ("sin", f64::sin),
        ("cos", f64::cos),
        ("tan", f64::tan),
        ("asin", f64::asin),
        ("acos", f64::acos),
        ("atan", f64::atan),
        ("degrees", f64::to_degrees),
        ("radians", f64::to_radians),
    ] {
        db.create_scalar_function(name, 1, flags, move |c| {
            // MySQL answers NULL where the result is not a number (LN(0), SQRT(-1)).
            Ok(real(c.get_raw(0)).map(f).filter(|x| x.is_finite()))
        })?;
    }
    for name in ["pow", "power"] {
        scalar(name, 2, |c| {
            match (real(c.get_raw(0)), real(c.get_raw(1))) {
                (Some(x), Some(y)) => Ok(Some(x.powf(y))
                    .filter(|r| r.is_finite())
                    .map_or(Value::Null, Value::Real)),
                _ => Ok(Value::Null),
            }
        })?;
    }
    scalar("log", 2, |c| {
        match (real(c.get_raw(0)), real(c.get_raw(1))) {
            (Some(b), Some(x)) if b > 0.0 && b != 1.0 && x > 0.0 => {
                Ok(Value::Real(x.ln() / b.ln()))
            }
            _ => Ok(Value::Null),
        }
    })?;
    scalar("pi", 0, |_| Ok(Value::Real(std::f64::consts::PI)))?;
    scalar("mysql_insert", 4, |c| {
        let (Some(s), Some(pos), Some(len), Some(new)) = (
            text(c.get_raw(0)),
            int(c.get_raw(1)),
            int(c.get_raw(2)),
            text(c.get_raw(3)),
        ) else {
            return Ok(Value::Null);
        };
        let s = chars(&s);
        // A position outside the string leaves it as it is.
        if pos < 1 || pos as usize > s.len() {
            return Ok(Value::Text(s.into_iter().collect()));
        }
        let start = pos as usize - 1;
        let end = if len < 0 {
            s.len()
        } else {
            (start + len as usize).min(s.len())
        };
        let mut out: String = s[..start].iter().collect();
        out.push_str(&new);
        out.extend(&s[end..]);
        Ok(Value::Text(out))
    })?;
    scalar("floor", 1, |c| rounded(c.get_raw(0), f64::floor))?;
    for name in ["ceil", "ceiling"] {
        scalar(name, 1, |c| rounded(c.get_raw(0), f64::ceil))?;
    }
    scalar("round", 1, |c| round_to(c.get_raw(0), Some(0), Cut::Round))?;
    scalar("round", 2, |c| {
        round_to(c.get_raw(0), int(c.get_raw(1)), Cut::Round)
    })?;
    scalar("truncate", 2, |c| {
        round_to(c.get_raw(0), int(c.get_raw(1)), Cut::Truncate)
    })?;
    scalar("sign", 1, |c| {
        Ok(real(c.get_raw(0)).map_or(Value::Null, |f| {
            Value::Integer(if f > 0.0 {
                1
            } else if f < 0.0 {
                -1
            } else {
                0
            })
        }))
    })?;
    scalar("mysql_isnull", 1, |c| {
        Ok(Value::Integer(i64::from(c.get_raw(0) == ValueRef::Null)))
    })?;
    for name in ["substring", "substr", "mid"] {
        scalar(name, 2, |c| substring(c, None))?;
        scalar(name, 3, |c| match int(c.get_raw(2)) {
            None => Ok(Value::Null),
            Some(len) => substring(c, Some(len)),
        })?;
    }
    scalar("mysql_trim", 3, |c| {
        let (Some(s), Some(what), Some(mode)) =
            (text(c.get_raw(0)), text(c.get_raw(1)), int(c.get_raw(2)))
        else {
            return Ok(Value::Null);
        };
        let mut s = s.as_str();
        if !what.is_empty() {
            if mode != 2 {
                while let Some(rest) = s.strip_prefix(what.as_str()) {
                    s = rest;
                }
            }
            if mode != 1 {
                while let Some(rest) = s.strip_suffix(what.as_str()) {
                    s = rest;
                }
            }
        }
        Ok(Value::Text(s.to_string()))
    })?;
    scalar("mysql_signed", 1, |c| {
        Ok(int(c.get_raw(0)).map_or(Value::Null, Value::Integer))
    })?;
    scalar("hex", 1, |c| {
        Ok(match c.get_raw(0) {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(n) => Value::Text(format!("{:X}", n as u64)),
            ValueRef::Real(f) => Value::Text(format!("{:X}", f.round_ties_even() as i64 as u64)),
            ValueRef::Text(t) | ValueRef::Blob(t) => {
                Value::Text(t.iter().map(|b| format!("{b:02X}")).collect())
            }
        })
    })?;
    for name in ["upper", "ucase"] {
        scalar(name, 1, |c| {
            Ok(text(c.get_raw(0)).map_or(Value::Null, |s| Value::Text(s.to_uppercase())))
        })?;
    }
    for name in ["lower", "lcase"] {
        scalar(name, 1, |c| {
            Ok(text(c.get_raw(0)).map_or(Value::Null, |s| Value::Text(s.to_lowercase())))
        })?;
    }
    scalar("concat", -1, |c| {
        let mut out = String::new();
        for i in 0..c.len() {
            match text(c.get_raw(i)) {
                Some(s) => out.push_str(&s),
                None => return Ok(Value::Null),
            }
        }
        Ok(Value::Text(out))
    })?;
    scalar("concat_ws", -1, |c| {
        if c.is_empty() {
            return Ok(Value::Null);
        }
        let Some(sep) = text(c.get_raw(0)) else {
            return Ok(Value::Null);
        };
        let parts: Vec<String> = (1..c.len()).filter_map(|i| text(c.get_raw(i))).collect();
        Ok(Value::Text(parts.join(&sep)))
    })?;
    scalar("repeat", 2, |c| {
        match (text(c.get_raw(0)), int(c.get_raw(1))) {
            (Some(s), Some(n)) => Ok(Value::Text(s.repeat(n.clamp(0, 1 << 20) as usize))),
            _ => Ok(Value::Null),
        }
    })?;
    scalar("space", 1, |c| {
        Ok(int(c.get_raw(0)).map_or(Value::Null, |n| {
            Value::Text(" ".repeat(n.clamp(0, 1 << 20) as usize))
        }))
    })?;
    scalar("field", -1, |c| {
        let Some(first) = text(c.get_raw(0)) else {
            return Ok(Value::Integer(0));
        };
        let at = (1..c.len()).find(|&i| text(c.get_raw(i)).as_deref() == Some(first.as_str()));
        Ok(Value::Integer(at.map_or(0, |i| i as i64)))
    })?;
    scalar("elt", -1, |c| {
        let n = int(c.get_raw(0)).unwrap_or(0);
        Ok(match usize::try_from(n) {
            Ok(n) if n >= 1 && n < c.len() => text(c.get_raw(n)).map_or(Value::Null, Value::Text),
            _ => Value::Null,
        })
    })?;
    scalar("strcmp", 2, |c| {
        match (text(c.get_raw(0)), text(c.get_raw(1))) {
            (Some(a), Some(b)) => Ok(Value::Integer(match a.cmp(&b) {
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            })),
            _ => Ok(Value::Null),
        }
    })?;
    for name in ["ascii", "ord"] {
        scalar(name, 1, |c| {
            Ok(match c.get_raw(0) {
                ValueRef::Null => Value::Null,
                v => Value::Integer(text(v).and_then(|s| s.bytes().next()).map_or(0, i64::from)),
            })
        })?;
    }
    scalar("char", -1, |c| {
        let bytes: Vec<u8> = (0..c.len())
            .filter_map(|i| int(c.get_raw(i)))
            .flat_map(|n| {
                let n = n as u32;
                let b = n.to_be_bytes();
                let skip = b.iter().position(|&x| x != 0).unwrap_or(3);
                b[skip..].to_vec()
            })
            .collect();
        Ok(Value::Blob(bytes))
    })?;
    scalar("conv", 3, |c| {
        let (Some(n), Some(from), Some(to)) =
            (text(c.get_raw(0)), int(c.get_raw(1)), int(c.get_raw(2)))
        else {
            return Ok(Value::Null);
        };
        let (Ok(from), Ok(to)) = (u32::try_from(from.abs()), u32::try_from(to.abs())) else {
            return Ok(Value::Null);
        };
        if !(2..=36).contains(&from) || !(2..=36).contains(&to) {
            return Ok(Value::Null);
        }
        let digits: String = n
            .trim()
            .chars()
            .take_while(|ch| ch.is_digit(from))
            .collect();
        let value = u64::from_str_radix(if digits.is_empty() { "0" } else { &digits }, from)
            .unwrap_or(u64::MAX);
        Ok(Value::Text(radix(value, to)))
    })?;
    scalar("bin", 1, |c| {
        Ok(int(c.get_raw(0)).map_or(Value::Null, |n| Value::Text(radix(n as u64, 2))))
    })?;
    scalar("oct", 1, |c| {
        Ok(int(c.get_raw(0)).map_or(Value::Null, |n| Value::Text(radix(n as u64, 8))))
    })?;
    scalar("regexp", 2, |c| {
        let (Some(pattern), Some(s)) = (text(c.get_raw(0)), text(c.get_raw(1))) else {
            return Ok(Value::Null);
        };
        let re = c.get_or_create_aux(0, |_| {
            regex::Regex::new(&pattern).map_err(|e| rusqlite::Error::UserFunctionError(e.into()))
        })?;
        Ok(Value::Integer(i64::from(re.is_match(&s))))
    })?;
    // A case-insensitive column's REGEXP (`crate::collate`).
    scalar("regexp_ci", 2, |c| {
        let (Some(pattern), Some(s)) = (text(c.get_raw(0)), text(c.get_raw(1))) else {
            return Ok(Value::Null);
        };
        let re = c.get_or_create_aux(0, |_| {
            regex::RegexBuilder::new(&pattern)
                .case_insensitive(true)
                .build()
                .map_err(|e| rusqlite::Error::UserFunctionError(e.into()))
        })?;
        Ok(Value::Integer(i64::from(re.is_match(&s))))
    })?;
    db.create_scalar_function("uuid", 0, FunctionFlags::SQLITE_UTF8, |_| {
        let b: [u8; 16] = rand::random();
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        Ok(format!(
            "{}-{}-4{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[13..16],
            &hex[16..20],
            &hex[20..32]
        ))
    })?;
    // A DATE, DATETIME or TIMESTAMP column compares as times (`d = '2024-01-05'`
    // finds a DATETIME at midnight), as MySQL converts the other side to a time; text
    // that names no time compares as bytes.
    db.create_collation("mysql_datetime", |a, b| {
        let as_time =
            |s: &str| kura_tables::temporal::canonical(s, kura_tables::ColumnType::DateTime(6));
        match (as_time(a), as_time(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => a.cmp(b),
        }
    })?;
    let now = |format: &'static str| {
        move |_: &mut Context<'_>| -> Result<String> { Ok(civil_now(format)) }
    };
    // NOW() and its kin, as `translate.rs` names them (SQLite takes
    // CURRENT_TIMESTAMP and the like as keywords, not calls).
    for (name, format) in [
        ("mysql_now", "datetime"),
        ("mysql_curdate", "date"),
        ("mysql_curtime", "time"),
    ] {
        db.create_scalar_function(name, 0, FunctionFlags::SQLITE_UTF8, now(format))?;
    }
    Ok(())
}

/// `n` in base `radix`, upper-case, as CONV writes it.
fn radix(mut n: u64, radix: u32) -> String {
    if n == 0 {
        return "0".into();
    }
    let mut out = Vec::new();
    while n > 0 {
        out.push(std::char::from_digit((n % u64::from(radix)) as u32, radix).unwrap_or('?'));
        n /= u64::from(radix);
    }
    out.iter().rev().collect::<String>().to_uppercase()
}

/// The time now in UTC (the server's `time_zone`), as MySQL writes a DATETIME, DATE
/// or TIME.
fn civil_now(format: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = crate::dates::from_days(days);
    let date = format!("{year:04}-{month:02}-{day:02}");
    let time = format!("{:02}:{:02}:{:02}", rest / 3600, rest / 60 % 60, rest % 60);
    match format {
        "date" => date,
        "time" => time,
        _ => format!("{date} {time}"),
    }
}

/// GREATEST and LEAST: NULL if any argument is; numbers compared as numbers when
/// every argument is one, else as strings.
fn extreme(c: &Context<'_>, keep: std::cmp::Ordering) -> Result<Value> {
    let args: Vec<ValueRef<'_>> = (0..c.len()).map(|i| c.get_raw(i)).collect();
    if args.is_empty() || args.contains(&ValueRef::Null) {
        return Ok(Value::Null);
    }
    let numeric = args
        .iter()
        .all(|a| matches!(a, ValueRef::Integer(_) | ValueRef::Real(_)));
    let mut best = args[0];
    for &a in &args[1..] {
        let order = if numeric {
            let (x, y) = (real(a).unwrap_or(0.0), real(best).unwrap_or(0.0));
            x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal)
        } else {
            text(a).cmp(&text(best))
        };
        if order == keep {
            best = a;
        }
    }
    Ok(match best {
        ValueRef::Integer(n) if args.iter().all(|a| matches!(a, ValueRef::Integer(_))) => {
            Value::Integer(n)
        }
        v if numeric => Value::Real(real(v).unwrap_or(0.0)),
        v => text(v).map_or(Value::Null, Value::Text),
    })
}

/// LEFT and RIGHT: `take` of the string's characters and the count.
fn substring_of(c: &Context<'_>, take: fn(&[char], usize) -> String) -> Result<Value> {
    match (text(c.get_raw(0)), int(c.get_raw(1))) {
        (Some(s), Some(n)) => Ok(Value::Text(take(&chars(&s), n.max(0) as usize))),
        _ => Ok(Value::Null),
    }
}

/// LPAD and RPAD: to `len` characters, cut from the right when longer; NULL when
/// it must pad with nothing.
fn pad(c: &Context<'_>, left: bool) -> Result<Value> {
    let (Some(s), Some(len), Some(with)) =
        (text(c.get_raw(0)), int(c.get_raw(1)), text(c.get_raw(2)))
    else {
        return Ok(Value::Null);
    };
    let Ok(len) = usize::try_from(len) else {
        return Ok(Value::Null);
    };
    let s = chars(&s);
    if s.len() >= len {
        return Ok(Value::Text(s[..len].iter().collect()));
    }
    let with = chars(&with);
    if with.is_empty() {
        return Ok(Value::Null);
    }
    let fill: String = with.iter().cycle().take(len - s.len()).collect();
    let s: String = s.into_iter().collect();
    Ok(Value::Text(if left { fill + &s } else { s + &fill }))
}

/// LOCATE(sub, s[, from]): the 1-based character position of `sub` in `s` at or
/// after `from`, 0 if none.
fn locate(c: &Context<'_>, from: i64) -> Result<Value> {
    let (Some(sub), Some(s)) = (text(c.get_raw(0)), text(c.get_raw(1))) else {
        return Ok(Value::Null);
    };
    if from < 1 {
        return Ok(Value::Integer(0));
    }
    let s = chars(&s);
    let sub = chars(&sub);
    let start = (from - 1) as usize;
    if start > s.len() {
        return Ok(Value::Integer(0));
    }
    let found = (start..=s.len().saturating_sub(sub.len()))
        .find(|&i| i + sub.len() <= s.len() && s[i..i + sub.len()] == sub[..]);
    Ok(Value::Integer(found.map_or(0, |i| i as i64 + 1)))
}

/// MOD and `%`: integers stay integers; by zero, NULL.
fn arithmetic_mod(a: ValueRef<'_>, b: ValueRef<'_>) -> Result<Value> {
    match (a, b) {
        (ValueRef::Null, _) | (_, ValueRef::Null) => Ok(Value::Null),
        (ValueRef::Integer(x), ValueRef::Integer(y)) => Ok(if y == 0 {
            Value::Null
        } else {
            Value::Integer(x.wrapping_rem(y))
        }),
        (x, y) => match (real(x), real(y)) {
            (Some(x), Some(y)) if y != 0.0 => Ok(Value::Real(x % y)),
            _ => Ok(Value::Null),
        },
    }
}

/// FLOOR and CEIL: an integer stays one, a DOUBLE stays a DOUBLE.
fn rounded(v: ValueRef<'_>, f: fn(f64) -> f64) -> Result<Value> {
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => Value::Integer(n),
        v => real(v).map_or(Value::Null, |x| Value::Real(f(x))),
    })
}

/// How ROUND and TRUNCATE cut a number.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// To the nearest: a DOUBLE's half to even, an integer's half away from zero.
    Round,
    /// Toward zero.
    Truncate,
}

/// ROUND and TRUNCATE to `digits` decimals (negative: to tens, hundreds...).
fn round_to(v: ValueRef<'_>, digits: Option<i64>, cut: Cut) -> Result<Value> {
    let Some(digits) = digits else {
        return Ok(Value::Null);
    };
    let scale = 10f64.powi(digits.clamp(-30, 30) as i32);
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) if digits >= 0 => Value::Integer(n),
        ValueRef::Integer(n) => {
            let x = n as f64 * scale;
            let r = match cut {
                Cut::Round => x.round(),
                Cut::Truncate => x.trunc(),
            };
            Value::Integer((r / scale) as i64)
        }
        v => real(v).map_or(Value::Null, |x| {
            let r = match cut {
                Cut::Round => (x * scale).round_ties_even(),
                Cut::Truncate => (x * scale).trunc(),
            };
            Value::Real(r / scale)
        }),
    })
}

/// SUBSTRING(s, pos[, len]): 1-based, a negative `pos` counts from the end, 0 gives
/// the empty string.
fn substring(c: &Context<'_>, len: Option<i64>) -> Result<Value> {
    let (Some(s), Some(pos)) = (text(c.get_raw(0)), int(c.get_raw(1))) else {
        return Ok(Value::Null);
    };
    let s = chars(&s);
    let n = s.len() as i64;
    let start = match pos {
        0 => return Ok(Value::Text(String::new())),
        p if p > 0 => p - 1,
        p => n + p,
    };
    if start < 0 || start >= n {
        return Ok(Value::Text(String::new()));
    }
    let end = match len {
        Some(l) if l <= 0 => return Ok(Value::Text(String::new())),
        Some(l) => (start + l).min(n),
        None => n,
    };
    Ok(Value::Text(
        s[start as usize..end as usize].iter().collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strings_leading_number_is_mysqls() {
        assert_eq!(leading_number(b"12abc"), 12.0);
        assert_eq!(leading_number(b" -1.5e2x"), -150.0);
        assert_eq!(leading_number(b"1e"), 1.0);
        assert_eq!(leading_number(b"abc"), 0.0);
        assert_eq!(radix(255, 16), "FF");
        assert_eq!(civil_now("date").len(), 10);
    }
}
