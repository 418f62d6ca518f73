//! Numbers as memcached 1.6.18 reads them (`safe_strtol`, `safe_strtoul`,
//! `safe_strtoull` in its `util.c`), so that Kura accepts and rejects exactly the
//! same tokens.
//!
//! Not a general number parser: the quirks are the point. memcached calls C's
//! `strtol`/`strtoul`/`strtoull` on a NUL-terminated token, so:
//! - leading C whitespace (`\t \n \v \f \r` and space) is skipped, then an
//!   optional `+` or `-`, then at least one decimal digit;
//! - the digits may be followed by the end of the token or by any C whitespace
//!   character, after which anything is ignored (`"5\tjunk"` reads as 5);
//! - a magnitude that does not fit in 64 bits is an error (`ERANGE`);
//! - `strtoul` accepts a minus sign and wraps; memcached then rejects the value
//!   only if it looks negative as a signed number and the text has a `-`;
//! - the 32-bit variants truncate the 64-bit result (`int32_t`/`uint32_t`
//!   stores), so `4294967296` reads as 0. That is what the real server does.
//!
//! Invariant: every function here is total (never panics) on any input.

/// C's `isspace` in the "C" locale.
pub(crate) fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The result of C's `strtoull` scanning: sign, magnitude and where it stopped.
struct Scanned {
    negative: bool,
    magnitude: u64,
    /// Index just past the last digit.
    end: usize,
}

/// Scans like `strto*l`: whitespace, sign, digits. `None` when no digit was
/// found or the magnitude overflows 64 bits (C reports `ERANGE`), or when the
/// digits are followed by something other than whitespace or the token's end.
fn scan(token: &[u8]) -> Option<Scanned> {
    let mut index = 0;
    while index < token.len() && is_c_space(token[index]) {
        index += 1;
    }
    let mut negative = false;
    if let Some(&sign) = token.get(index) {
        if sign == b'+' || sign == b'-' {
            negative = sign == b'-';
            index += 1;
        }
    }
    let digits_start = index;
    let mut magnitude: u64 = 0;
    let mut overflow = false;
    while let Some(&byte) = token.get(index) {
        if !byte.is_ascii_digit() {
            break;
        }
        match magnitude
            .checked_mul(10)
            .and_then(|m| m.checked_add(u64::from(byte - b'0')))
        {
            Some(m) => magnitude = m,
            None => overflow = true,
        }
        index += 1;
    }
    if index == digits_start || overflow {
        return None;
    }
    match token.get(index) {
        None => {}
        Some(&byte) if is_c_space(byte) => {}
        Some(_) => return None,
    }
    Some(Scanned {
        negative,
        magnitude,
        end: index,
    })
}

/// `safe_strtol`: C `strtol` (64-bit `long`), stored into an `int32_t`.
pub(crate) fn strtol_i32(token: &[u8]) -> Option<i32> {
    let scanned = scan(token)?;
    let value: i64 = if scanned.negative {
        // strtol reports ERANGE below LONG_MIN.
        if scanned.magnitude > (i64::MAX as u64) + 1 {
            return None;
        }
        0i64.wrapping_sub_unsigned(scanned.magnitude)
    } else {
        if scanned.magnitude > i64::MAX as u64 {
            return None;
        }
        scanned.magnitude as i64
    };
    // memcached stores the long into an int32_t without a range check.
    Some(value as i32)
}

/// `safe_strtoull`: C `strtoull` with memcached's negative-sign check.
pub(crate) fn strtoull(token: &[u8]) -> Option<u64> {
    let scanned = scan(token)?;
    let value = if scanned.negative {
        0u64.wrapping_sub(scanned.magnitude)
    } else {
        scanned.magnitude
    };
    if (value as i64) < 0 && token[..scanned.end].contains(&b'-') {
        return None;
    }
    Some(value)
}

/// `safe_strtoul`: like [`strtoull`] (unsigned long is 64 bits), stored into a
/// `uint32_t`.
pub fn strtoul_u32(token: &[u8]) -> Option<u32> {
    strtoull(token).map(|value| value as u32)
}

/// Appends the decimal digits of `value` to `out` without allocating.
pub fn write_u64(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
}

/// Appends the decimal digits of `value` (with `-` when negative).
pub fn write_i64(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    write_u64(out, value.unsigned_abs());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row: token, strtol_i32, strtoul_u32, strtoull.
    fn check(token: &[u8], long: Option<i32>, ulong32: Option<u32>, ulonglong: Option<u64>) {
        let shown = String::from_utf8_lossy(token);
        assert_eq!(strtol_i32(token), long, "strtol_i32({shown:?})");
        assert_eq!(strtoul_u32(token), ulong32, "strtoul_u32({shown:?})");
        assert_eq!(strtoull(token), ulonglong, "strtoull({shown:?})");
    }

    #[test]
    fn table() {
        check(b"0", Some(0), Some(0), Some(0));
        check(b"5", Some(5), Some(5), Some(5));
        check(b"+5", Some(5), Some(5), Some(5));
        check(b"-5", Some(-5), None, None);
        check(b"-0", Some(0), Some(0), Some(0));
        check(b"007", Some(7), Some(7), Some(7));
        check(b"\t7", Some(7), Some(7), Some(7));
        check(b"7\t", Some(7), Some(7), Some(7));
        check(b"7\rjunk", Some(7), Some(7), Some(7));
        check(b"7x", None, None, None);
        check(b"x", None, None, None);
        check(b"", None, None, None);
        check(b"-", None, None, None);
        check(b"+", None, None, None);
        check(b"\t", None, None, None);
        check(b"0x10", None, None, None);
        check(b"1.5", None, None, None);
        check(
            b"2147483647",
            Some(i32::MAX),
            Some(2147483647),
            Some(2147483647),
        );
        // Truncation into 32 bits, as memcached does.
        check(b"4294967296", Some(0), Some(0), Some(4294967296));
        check(b"4294967297", Some(1), Some(1), Some(4294967297));
        check(
            b"3000000000",
            Some(-1294967296),
            Some(3000000000),
            Some(3000000000),
        );
        check(b"-3000000000", Some(1294967296), None, None);
        check(
            b"18446744073709551615",
            None,
            Some(u32::MAX),
            Some(u64::MAX),
        );
        check(b"18446744073709551616", None, None, None);
        check(b"99999999999999999999", None, None, None);
        check(
            b"9223372036854775807",
            Some(-1),
            Some(u32::MAX),
            Some(i64::MAX as u64),
        );
        check(b"9223372036854775808", None, Some(0), Some(1 << 63));
        check(b"-9223372036854775808", Some(0), None, None);
        check(
            b"-9223372036854775809",
            None,
            Some(u32::MAX),
            Some(i64::MAX as u64),
        );
    }

    #[test]
    fn writes_numbers() {
        for (value, text) in [
            (0u64, "0"),
            (7, "7"),
            (10, "10"),
            (u64::MAX, "18446744073709551615"),
        ] {
            let mut out = Vec::new();
            write_u64(&mut out, value);
            assert_eq!(out, text.as_bytes());
        }
        for (value, text) in [
            (-1i64, "-1"),
            (i64::MIN, "-9223372036854775808"),
            (42, "42"),
        ] {
            let mut out = Vec::new();
            write_i64(&mut out, value);
            assert_eq!(out, text.as_bytes());
        }
    }
}
