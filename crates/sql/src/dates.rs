//! MySQL's date and time functions, on the text Kura keeps times as
//! (`kura_tables::temporal`): `DATE`, `YEAR`, `MONTH`, `DAY`/`DAYOFMONTH`, `HOUR`,
//! `MINUTE`, `SECOND`, `DAYOFWEEK`, `WEEKDAY`, `DAYOFYEAR`, `DAYNAME`, `MONTHNAME`,
//! `LAST_DAY`, `DATEDIFF`, `UNIX_TIMESTAMP(t)`, `FROM_UNIXTIME`, `DATE_FORMAT`,
//! `TIMESTAMPDIFF`, and `t + INTERVAL n unit`, `DATE_ADD`, `DATE_SUB` (as
//! `mysql_date_add`, which `translate.rs` writes them as). Times are UTC, the
//! server's time zone. A value that names no time gives NULL, as in MySQL.
//!
//! Units: MICROSECOND, SECOND, MINUTE, HOUR, DAY, WEEK, MONTH, QUARTER, YEAR. A month
//! added to the 31st ends on the month's last day (`2024-01-31 + INTERVAL 1 MONTH`
//! is `2024-02-29`), as MySQL's does.

use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::{Value, ValueRef};
use rusqlite::Connection;

type Result<T> = rusqlite::Result<T>;

/// A time's parts; `micros` below a million.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Civil {
    year: i64,
    month: i64,
    day: i64,
    secs: i64,
    micros: i64,
    /// Whether the text was a date alone.
    date_only: bool,
}

fn text(v: ValueRef<'_>) -> Option<String> {
    match v {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n.to_string()),
        ValueRef::Real(f) => Some(f.to_string()),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
    }
}

fn civil(v: ValueRef<'_>) -> Option<Civil> {
    let t = text(v)?;
    let c = kura_tables::temporal::canonical(&t, kura_tables::ColumnType::DateTime(6))?;
    let n = |a: usize, b: usize| c.get(a..b)?.parse::<i64>().ok();
    Some(Civil {
        year: n(0, 4)?,
        month: n(5, 7)?,
        day: n(8, 10)?,
        secs: n(11, 13)? * 3600 + n(14, 16)? * 60 + n(17, 19)?,
        micros: n(20, 26)?,
        date_only: t.trim().len() <= 10,
    })
}

/// Days since 1970-01-01 (Howard Hinnant's days-from-civil).
fn days(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date `days` after 1970-01-01 (Howard Hinnant's civil-from-days).
pub(crate) fn from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

fn month_days(year: i64, month: i64) -> i64 {
    days(year + i64::from(month == 12), month % 12 + 1, 1) - days(year, month, 1)
}

impl Civil {
    fn epoch_micros(&self) -> i64 {
        (days(self.year, self.month, self.day) * 86_400 + self.secs) * 1_000_000 + self.micros
    }

    fn from_epoch_micros(us: i64, date_only: bool) -> Civil {
        let secs = us.div_euclid(1_000_000);
        let (year, month, day) = from_days(secs.div_euclid(86_400));
        Civil {
            year,
            month,
            day,
            secs: secs.rem_euclid(86_400),
            micros: us.rem_euclid(1_000_000),
            date_only,
        }
    }

    fn date(&self) -> String {
        format!("{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }

    /// As MySQL writes the value: a date alone, or a datetime (its fraction if any).
    fn write(&self) -> Option<String> {
        if !(1..=9999).contains(&self.year) {
            return None;
        }
        if self.date_only {
            return Some(self.date());
        }
        let mut out = format!(
            "{} {:02}:{:02}:{:02}",
            self.date(),
            self.secs / 3600,
            self.secs / 60 % 60,
            self.secs % 60
        );
        if self.micros != 0 {
            out.push_str(&format!(".{:06}", self.micros));
        }
        Some(out)
    }

    /// 1 for Sunday to 7 for Saturday.
    fn day_of_week(&self) -> i64 {
        (days(self.year, self.month, self.day) + 4).rem_euclid(7) + 1
    }
}

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// `c` moved by `n` `unit`s; None past the calendar or for a unit Kura lacks.
fn add(c: Civil, n: i64, unit: &str) -> Option<Civil> {
    let micros = match unit {
        "MICROSECOND" => Some(1),
        "SECOND" => Some(1_000_000),
        "MINUTE" => Some(60_000_000),
        "HOUR" => Some(3_600_000_000),
        "DAY" => Some(86_400_000_000),
        "WEEK" => Some(7 * 86_400_000_000),
        _ => None,
    };
    if let Some(step) = micros {
        let date_only = c.date_only && matches!(unit, "DAY" | "WEEK");
        return Some(Civil::from_epoch_micros(
            c.epoch_micros().checked_add(n.checked_mul(step)?)?,
            date_only,
        ));
    }
    let months = match unit {
        "MONTH" => n,
        "QUARTER" => n.checked_mul(3)?,
        "YEAR" => n.checked_mul(12)?,
        _ => return None,
    };
    let total = c.year.checked_mul(12)? + (c.month - 1) + months;
    let (year, month) = (total.div_euclid(12), total.rem_euclid(12) + 1);
    if !(1..=9999).contains(&year) {
        return None;
    }
    Some(Civil {
        year,
        month,
        day: c.day.min(month_days(year, month)),
        ..c
    })
}

/// DATE_FORMAT's specifiers that applications use.
fn format(c: &Civil, fmt: &str) -> String {
    let mut out = String::new();
    let mut chars = fmt.chars();
    let (h, mi, s) = (c.secs / 3600, c.secs / 60 % 60, c.secs % 60);
    let dow = c.day_of_week();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        let Some(spec) = chars.next() else {
            break;
        };
        let piece = match spec {
            'Y' => format!("{:04}", c.year),
            'y' => format!("{:02}", c.year % 100),
            'm' => format!("{:02}", c.month),
            'c' => c.month.to_string(),
            'M' => MONTHS[(c.month - 1) as usize].to_string(),
            'b' => MONTHS[(c.month - 1) as usize][..3].to_string(),
            'd' => format!("{:02}", c.day),
            'e' => c.day.to_string(),
            'H' => format!("{h:02}"),
            'k' => h.to_string(),
            'h' | 'I' => format!("{:02}", (h + 11) % 12 + 1),
            'l' => ((h + 11) % 12 + 1).to_string(),
            'i' => format!("{mi:02}"),
            's' | 'S' => format!("{s:02}"),
            'f' => format!("{:06}", c.micros),
            'p' => if h < 12 { "AM" } else { "PM" }.to_string(),
            'T' => format!("{h:02}:{mi:02}:{s:02}"),
            'r' => format!(
                "{:02}:{mi:02}:{s:02} {}",
                (h + 11) % 12 + 1,
                if h < 12 { "AM" } else { "PM" }
            ),
            'W' => DAYS[(dow - 1) as usize].to_string(),
            'a' => DAYS[(dow - 1) as usize][..3].to_string(),
            'w' => (dow - 1).to_string(),
            'j' => format!(
                "{:03}",
                days(c.year, c.month, c.day) - days(c.year, 1, 1) + 1
            ),
            other => other.to_string(),
        };
        out.push_str(&piece);
    }
    out
}

fn int_of(c: &Context<'_>, f: fn(&Civil) -> i64) -> Result<Value> {
    Ok(civil(c.get_raw(0)).map_or(Value::Null, |t| Value::Integer(f(&t))))
}

fn text_of(c: &Context<'_>, f: fn(&Civil) -> Option<String>) -> Result<Value> {
    Ok(civil(c.get_raw(0))
        .and_then(|t| f(&t))
        .map_or(Value::Null, Value::Text))
}

/// Registers the functions on `db`.
pub fn register(db: &Connection) -> Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    let scalar = |name: &str, args: i32, f: fn(&mut Context<'_>) -> Result<Value>| {
        db.create_scalar_function(name, args, flags, f)
    };
    scalar("date", 1, |c| text_of(c, |t| Some(t.date())))?;
    scalar("year", 1, |c| int_of(c, |t| t.year))?;
    scalar("month", 1, |c| int_of(c, |t| t.month))?;
    for name in ["day", "dayofmonth"] {
        scalar(name, 1, |c| int_of(c, |t| t.day))?;
    }
    scalar("hour", 1, |c| int_of(c, |t| t.secs / 3600))?;
    scalar("minute", 1, |c| int_of(c, |t| t.secs / 60 % 60))?;
    scalar("second", 1, |c| int_of(c, |t| t.secs % 60))?;
    scalar("microsecond", 1, |c| int_of(c, |t| t.micros))?;
    scalar("dayofweek", 1, |c| int_of(c, Civil::day_of_week))?;
    scalar("weekday", 1, |c| int_of(c, |t| (t.day_of_week() + 5) % 7))?;
    scalar("dayofyear", 1, |c| {
        int_of(c, |t| days(t.year, t.month, t.day) - days(t.year, 1, 1) + 1)
    })?;
    scalar("quarter", 1, |c| int_of(c, |t| (t.month - 1) / 3 + 1))?;
    scalar("dayname", 1, |c| {
        text_of(c, |t| {
            Some(DAYS[(t.day_of_week() - 1) as usize].to_string())
        })
    })?;
    scalar("monthname", 1, |c| {
        text_of(c, |t| Some(MONTHS[(t.month - 1) as usize].to_string()))
    })?;
    scalar("last_day", 1, |c| {
        text_of(c, |t| {
            Some(format!(
                "{:04}-{:02}-{:02}",
                t.year,
                t.month,
                month_days(t.year, t.month)
            ))
        })
    })?;
    scalar("to_days", 1, |c| {
        int_of(c, |t| days(t.year, t.month, t.day) + 719_528)
    })?;
    scalar("datediff", 2, |c| {
        match (civil(c.get_raw(0)), civil(c.get_raw(1))) {
            (Some(a), Some(b)) => Ok(Value::Integer(
                days(a.year, a.month, a.day) - days(b.year, b.month, b.day),
            )),
            _ => Ok(Value::Null),
        }
    })?;
    scalar("unix_timestamp", 1, |c| {
        Ok(civil(c.get_raw(0)).map_or(Value::Null, |t| {
            let us = t.epoch_micros();
            if us < 0 {
                Value::Integer(0)
            } else if t.micros == 0 {
                Value::Integer(us / 1_000_000)
            } else {
                Value::Real(us as f64 / 1e6)
            }
        }))
    })?;
    scalar("from_unixtime", 1, |c| {
        let us = match c.get_raw(0) {
            ValueRef::Integer(n) => n.checked_mul(1_000_000),
            ValueRef::Real(f) if f.is_finite() => Some((f * 1e6).round() as i64),
            _ => None,
        };
        Ok(us
            .filter(|&us| us >= 0)
            .and_then(|us| Civil::from_epoch_micros(us, false).write())
            .map_or(Value::Null, Value::Text))
    })?;
    scalar("date_format", 2, |c| {
        match (civil(c.get_raw(0)), text(c.get_raw(1))) {
            (Some(t), Some(f)) => Ok(Value::Text(format(&t, &f))),
            _ => Ok(Value::Null),
        }
    })?;
    scalar("mysql_date_add", 3, |c| {
        let (Some(t), Some(unit)) = (civil(c.get_raw(0)), text(c.get_raw(2))) else {
            return Ok(Value::Null);
        };
        let n = match c.get_raw(1) {
            ValueRef::Integer(n) => n,
            ValueRef::Real(f) => f.round() as i64,
            v => text(v).and_then(|s| s.trim().parse().ok()).unwrap_or(0),
        };
        Ok(add(t, n, &unit.to_ascii_uppercase())
            .and_then(|t| t.write())
            .map_or(Value::Null, Value::Text))
    })?;
    scalar("timestampdiff", 3, |c| {
        let (Some(unit), Some(a), Some(b)) =
            (text(c.get_raw(0)), civil(c.get_raw(1)), civil(c.get_raw(2)))
        else {
            return Ok(Value::Null);
        };
        let us = b.epoch_micros() - a.epoch_micros();
        let months = || {
            let m = (b.year * 12 + b.month) - (a.year * 12 + a.month);
            // A month counts once its day and time are reached.
            let short = (b.day, b.secs, b.micros) < (a.day, a.secs, a.micros);
            if m > 0 && short {
                m - 1
            } else if m < 0 && (b.day, b.secs, b.micros) > (a.day, a.secs, a.micros) {
                m + 1
            } else {
                m
            }
        };
        Ok(Value::Integer(match unit.to_ascii_uppercase().as_str() {
            "MICROSECOND" => us,
            "SECOND" => us / 1_000_000,
            "MINUTE" => us / 60_000_000,
            "HOUR" => us / 3_600_000_000,
            "DAY" => us / 86_400_000_000,
            "WEEK" => us / (7 * 86_400_000_000),
            "MONTH" => months(),
            "QUARTER" => months() / 3,
            "YEAR" => months() / 12,
            _ => return Ok(Value::Null),
        }))
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Civil {
        civil(ValueRef::Text(s.as_bytes())).expect("a time")
    }

    #[test]
    fn the_calendar_is_mysqls() {
        assert_eq!(from_days(days(2024, 2, 29)), (2024, 2, 29));
        assert_eq!(days(1970, 1, 1), 0);
        assert_eq!(at("2024-01-05").day_of_week(), 6);
        let w = |s: &str, n: i64, u: &str| add(at(s), n, u).and_then(|t| t.write());
        assert_eq!(w("2024-01-31", 1, "MONTH").as_deref(), Some("2024-02-29"));
        assert_eq!(w("2024-01-31", 1, "DAY").as_deref(), Some("2024-02-01"));
        assert_eq!(
            w("2024-03-01 00:00:00", -1, "SECOND").as_deref(),
            Some("2024-02-29 23:59:59")
        );
        assert_eq!(
            w("2024-01-05", 2, "HOUR").as_deref(),
            Some("2024-01-05 02:00:00")
        );
        assert_eq!(
            format(&at("2024-01-05 13:04:09"), "%Y/%m/%d %H:%i:%s %W %b %e %p"),
            "2024/01/05 13:04:09 Friday Jan 5 PM"
        );
    }
}
