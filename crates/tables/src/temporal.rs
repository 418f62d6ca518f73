//! DATE, DATETIME and TIMESTAMP values: kept as text in one canonical form,
//! `YYYY-MM-DD` and `YYYY-MM-DD HH:MM:SS[.f...]` (as many fraction digits as the
//! column's precision), so that their bytes sort as the times do and a key of them
//! is ordered by time.
//!
//! What is read, as MySQL reads it: `YYYY-MM-DD`, with a time after a space or `T`
//! (`HH:MM:SS`, `HH:MM`, a fraction), and the digit strings `YYYYMMDD` and
//! `YYYYMMDDHHMMSS`. A date a calendar lacks (February 30th) or a field out of range
//! is refused, and so is the zero date (`0000-00-00`, as MySQL 8's strict mode
//! refuses it). A DATE given a time keeps the date; a DATETIME given a date alone is
//! at midnight; a fraction past the column's precision is cut (as MariaDB does).
//! A TIMESTAMP is within 1970-01-01 00:00:01 and 2038-01-19 03:14:07 (UTC, the
//! server's time zone).

use crate::value::ColumnType;

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        _ => 28,
    }
}

/// The parts of a date and time read from `text`: year, month, day, hour, minute,
/// second, and the fraction's digits.
fn parts(text: &str) -> Option<([u32; 6], String)> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        let n = |a: usize, b: usize| text.get(a..b)?.parse::<u32>().ok();
        return match text.len() {
            8 => Some(([n(0, 4)?, n(4, 6)?, n(6, 8)?, 0, 0, 0], String::new())),
            14 => Some((
                [
                    n(0, 4)?,
                    n(4, 6)?,
                    n(6, 8)?,
                    n(8, 10)?,
                    n(10, 12)?,
                    n(12, 14)?,
                ],
                String::new(),
            )),
            _ => None,
        };
    }
    let (date, time) = match text.find([' ', 'T']) {
        Some(at) => (&text[..at], Some(text[at + 1..].trim())),
        None => (text, None),
    };
    let mut d = date.split('-');
    let year = d.next()?.parse().ok()?;
    let month = d.next()?.parse().ok()?;
    let day = d.next()?.parse().ok()?;
    if d.next().is_some() {
        return None;
    }
    let (mut hms, mut fraction) = ([0u32; 3], String::new());
    if let Some(time) = time.filter(|t| !t.is_empty()) {
        let (clock, frac) = match time.split_once('.') {
            Some((c, f)) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => {
                (c, f.to_string())
            }
            Some(_) => return None,
            None => (time, String::new()),
        };
        let fields: Vec<&str> = clock.split(':').collect();
        if !(2..=3).contains(&fields.len()) {
            return None;
        }
        for (i, f) in fields.iter().enumerate() {
            hms[i] = f.parse().ok()?;
        }
        fraction = frac;
    }
    Some(([year, month, day, hms[0], hms[1], hms[2]], fraction))
}

/// `text` as a value of the temporal column type `ty`, in the canonical form; None
/// if it is not one (or `ty` is not temporal).
pub fn canonical(text: &str, ty: ColumnType) -> Option<String> {
    let ([year, month, day, hour, minute, second], fraction) = parts(text)?;
    if !(1..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let date = format!("{year:04}-{month:02}-{day:02}");
    let precision = match ty {
        ColumnType::Date => return Some(date),
        ColumnType::DateTime(p) | ColumnType::Timestamp(p) => usize::from(p),
        _ => return None,
    };
    let mut out = format!("{date} {hour:02}:{minute:02}:{second:02}");
    if precision > 0 {
        let mut digits: String = fraction.chars().take(precision).collect();
        while digits.len() < precision {
            digits.push('0');
        }
        out.push('.');
        out.push_str(&digits);
    }
    if matches!(ty, ColumnType::Timestamp(_))
        && (out.as_str() < "1970-01-01 00:00:01" || out.as_str() >= "2038-01-19 03:14:08")
    {
        return None;
    }
    Some(out)
}

/// What a refusal calls a value of `ty`: `date` or `datetime`.
pub fn kind_name(ty: ColumnType) -> &'static str {
    match ty {
        ColumnType::Date => "date",
        _ => "datetime",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_mysql_reads_them() {
        let dt = ColumnType::DateTime(0);
        let dt3 = ColumnType::DateTime(3);
        let d = ColumnType::Date;
        let ts = ColumnType::Timestamp(0);
        for (text, ty, want) in [
            ("2024-02-29", d, Some("2024-02-29")),
            ("2023-02-29", d, None),
            ("2024-1-5", d, Some("2024-01-05")),
            ("2024-01-05 10:20:30", d, Some("2024-01-05")),
            ("20240105", d, Some("2024-01-05")),
            ("2024-01-05", dt, Some("2024-01-05 00:00:00")),
            ("2024-01-05T10:20", dt, Some("2024-01-05 10:20:00")),
            (
                "2024-01-05 10:20:30.123456",
                dt3,
                Some("2024-01-05 10:20:30.123"),
            ),
            ("2024-01-05 10:20:30", dt3, Some("2024-01-05 10:20:30.000")),
            ("20240105102030", dt, Some("2024-01-05 10:20:30")),
            ("2024-01-05 24:00:00", dt, None),
            ("0000-00-00 00:00:00", dt, None),
            ("2024-13-01", dt, None),
            ("yesterday", dt, None),
            ("1969-12-31 23:59:59", ts, None),
            ("2038-01-19 03:14:07", ts, Some("2038-01-19 03:14:07")),
            ("2038-01-19 03:14:08", ts, None),
        ] {
            assert_eq!(canonical(text, ty).as_deref(), want, "{text} as {ty}");
        }
    }
}
