//! `DECIMAL(p, s)`: exact numbers of at most `p` digits, `s` of them after the point,
//! as MySQL keeps them. A value is a whole count of units of 10^-s in an `i128` (which
//! holds every number of 38 digits). A column takes at most 15 digits: SQL computes
//! with a DECIMAL as SQLite's double, which keeps every number of 15 significant
//! digits exactly, so a row SQL reads and writes back keeps its value (MySQL's
//! DECIMAL goes to 65 digits). Text comes in as MySQL reads it into a DECIMAL: an
//! optional sign, digits with an optional point, an optional exponent; digits past
//! the scale are rounded half away from zero (MySQL's rounding of a DECIMAL), and a
//! number that then needs more than `p - s` digits before the point is out of range.
//! A value is written out with exactly `s` digits after the point, as MySQL prints it.

use std::fmt;

/// The most digits a DECIMAL column of Kura's holds: what a double keeps exactly.
pub const MAX_PRECISION: u8 = 15;
/// The most digits a value holds (an `i128`'s): what a DECIMAL made of any number
/// SQL computed may take.
pub const MAX_DIGITS: u8 = 38;
/// The most digits after the point (MySQL's limit).
pub const MAX_SCALE: u8 = 30;

/// An exact number: `units` of 10^-`scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decimal {
    pub units: i128,
    pub scale: u8,
}

/// Why text is not a DECIMAL of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecimalError {
    /// Not a number at all (MySQL's 1366 in strict mode).
    NotANumber,
    /// A number with too many digits before the point (MySQL's 1264).
    OutOfRange,
}

/// 10^n, for n ≤ 38.
fn pow10(n: u32) -> i128 {
    10i128.pow(n)
}

impl Decimal {
    /// `text` as a DECIMAL(`precision`, `scale`), rounded to the scale.
    pub fn parse(text: &str, precision: u8, scale: u8) -> Result<Decimal, DecimalError> {
        let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
        let (negative, t) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        };
        let (mantissa, exponent) = match t.find(['e', 'E']) {
            Some(at) => {
                let e = &t[at + 1..];
                let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(DecimalError::NotANumber);
                }
                // A longer exponent than this makes every number 0 or out of range.
                let e: i64 = e.parse().unwrap_or(if e.starts_with('-') {
                    -1_000_000
                } else {
                    1_000_000
                });
                (&t[..at], e.clamp(-1_000_000, 1_000_000))
            }
            None => (t, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.len() + fraction.len() == 0 || !all_digits(whole) || !all_digits(fraction) {
            return Err(DecimalError::NotANumber);
        }
        // The number is `digits` × 10^`shift` units once scaled.
        let digits: Vec<u8> = whole
            .bytes()
            .chain(fraction.bytes())
            .map(|b| b - b'0')
            .skip_while(|&d| d == 0)
            .collect();
        if digits.is_empty() {
            return Ok(Decimal { units: 0, scale });
        }
        let shift = exponent - fraction.len() as i64 + i64::from(scale);
        let (kept, round_up) = if shift >= 0 {
            (&digits[..], false)
        } else {
            let dropped = usize::try_from(-shift).unwrap_or(usize::MAX);
            if dropped > digits.len() {
                (&digits[..0], false)
            } else {
                let keep = digits.len() - dropped;
                (&digits[..keep], digits.get(keep).is_some_and(|&d| d >= 5))
            }
        };
        let zeros = u32::try_from(shift.max(0)).unwrap_or(u32::MAX);
        if kept.len() as u64 + u64::from(zeros) > u64::from(MAX_DIGITS) {
            return Err(DecimalError::OutOfRange);
        }
        let mut units = kept.iter().fold(0i128, |v, &d| v * 10 + i128::from(d));
        units = units * pow10(zeros) + i128::from(round_up);
        if units >= pow10(u32::from(precision)) {
            return Err(DecimalError::OutOfRange);
        }
        Ok(Decimal {
            units: if negative { -units } else { units },
            scale,
        })
    }

    /// A double as a DECIMAL(`precision`, `scale`): its shortest decimal text, rounded
    /// to the scale (so 1.005 is 1.01, as MySQL rounds the literal).
    pub fn from_f64(f: f64, precision: u8, scale: u8) -> Result<Decimal, DecimalError> {
        if !f.is_finite() {
            return Err(DecimalError::OutOfRange);
        }
        Decimal::parse(&format!("{f:e}"), precision, scale)
    }

    /// An integer as a DECIMAL(`precision`, `scale`).
    pub fn from_i128(n: i128, precision: u8, scale: u8) -> Result<Decimal, DecimalError> {
        let limit = pow10(u32::from(precision - scale.min(precision)));
        if n.unsigned_abs() >= limit.unsigned_abs() {
            return Err(DecimalError::OutOfRange);
        }
        Ok(Decimal {
            units: n * pow10(u32::from(scale)),
            scale,
        })
    }

    /// Whether the value has at most `precision` digits and `scale` after the point.
    pub fn fits(&self, precision: u8, scale: u8) -> bool {
        // Any i128 may come from a row's bytes: no negation that can overflow.
        self.scale == scale
            && self.units.unsigned_abs() < pow10(u32::from(precision)).unsigned_abs()
    }

    /// The nearest double.
    pub fn to_f64(&self) -> f64 {
        self.to_string().parse().unwrap_or(0.0)
    }

    /// The value as an integer when it has no fraction and fits an `i64`.
    pub fn to_i64(&self) -> Option<i64> {
        let unit = 10i128.checked_pow(u32::from(self.scale))?;
        if self.units % unit != 0 {
            return None;
        }
        i64::try_from(self.units / unit).ok()
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.units.unsigned_abs().to_string();
        let scale = usize::from(self.scale);
        let sign = if self.units < 0 { "-" } else { "" };
        if scale == 0 {
            return write!(f, "{sign}{digits}");
        }
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (whole, fraction) = padded.split_at(padded.len() - scale);
        write!(f, "{sign}{whole}.{fraction}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str, p: u8, s: u8) -> Result<String, DecimalError> {
        Decimal::parse(text, p, s).map(|d| d.to_string())
    }

    #[test]
    fn text_reads_as_mysql_reads_it_into_a_decimal() {
        assert_eq!(d("12.5", 10, 2), Ok("12.50".into()));
        assert_eq!(d("-0.05", 10, 2), Ok("-0.05".into()));
        assert_eq!(d("  +7 ", 5, 0), Ok("7".into()));
        assert_eq!(d(".5", 3, 1), Ok("0.5".into()));
        assert_eq!(d("5.", 3, 1), Ok("5.0".into()));
        assert_eq!(d("1.005", 10, 2), Ok("1.01".into()));
        assert_eq!(d("-1.005", 10, 2), Ok("-1.01".into()));
        assert_eq!(d("1.004999", 10, 2), Ok("1.00".into()));
        assert_eq!(d("-0.001", 10, 2), Ok("0.00".into()));
        assert_eq!(d("1.5e3", 10, 2), Ok("1500.00".into()));
        assert_eq!(d("125E-2", 10, 2), Ok("1.25".into()));
        assert_eq!(d("1e-40", 10, 2), Ok("0.00".into()));
        assert_eq!(d("-0e99999", 10, 2), Ok("0.00".into()));
        assert_eq!(d("000123.4500", 5, 2), Ok("123.45".into()));
        assert_eq!(d("999.99", 5, 2), Ok("999.99".into()));
        assert_eq!(d("999.995", 5, 2), Err(DecimalError::OutOfRange));
        assert_eq!(d("1000", 5, 2), Err(DecimalError::OutOfRange));
        assert_eq!(d("1e400", 38, 0), Err(DecimalError::OutOfRange));
        assert_eq!(
            d("99999999999999999999999999999999999999", 38, 0),
            Ok("99999999999999999999999999999999999999".into())
        );
        assert_eq!(
            d("123456789012345678901234567890.12345678", 38, 8),
            Ok("123456789012345678901234567890.12345678".into())
        );
        for bad in [
            "", "-", ".", "abc", "1.2.3", "1e", "1e+", "0x10", "1 2", "--1", "inf",
        ] {
            assert_eq!(d(bad, 10, 2), Err(DecimalError::NotANumber), "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn what_reads_writes_back_as_the_same_number(
            text in "[-+ ]?[0-9]{0,45}(\\.[0-9]{0,40})?([eE][-+]?[0-9]{1,3})? ?",
            p in 1u8..=38,
            s in 0u8..=30,
        ) {
            let s = s.min(p);
            if let Ok(d) = Decimal::parse(&text, p, s) {
                proptest::prop_assert!(d.fits(p, s));
                proptest::prop_assert_eq!(Decimal::parse(&d.to_string(), p, s), Ok(d));
                // Within half a unit of the number the text names.
                let f: f64 = text.trim().parse().unwrap_or(0.0);
                let unit = 10f64.powi(-i32::from(s));
                proptest::prop_assert!((d.to_f64() - f).abs() <= unit / 2.0 + f.abs() * 1e-12);
            }
        }
    }

    #[test]
    fn doubles_and_integers_become_decimals() {
        let f = |x: f64| Decimal::from_f64(x, 10, 2).map(|d| d.to_string());
        assert_eq!(f(1.005), Ok("1.01".into()));
        assert_eq!(f(0.1 + 0.2), Ok("0.30".into()));
        assert_eq!(f(-2.5), Ok("-2.50".into()));
        assert_eq!(f(f64::NAN), Err(DecimalError::OutOfRange));
        assert_eq!(f(1e20), Err(DecimalError::OutOfRange));
        let i = |n: i128| Decimal::from_i128(n, 5, 2).map(|d| d.to_string());
        assert_eq!(i(-999), Ok("-999.00".into()));
        assert_eq!(i(1000), Err(DecimalError::OutOfRange));
        let x = Decimal::parse("12.50", 10, 2).unwrap();
        assert_eq!(x.to_f64(), 12.5);
        assert_eq!(x.to_i64(), None);
        assert_eq!(Decimal::parse("-12", 10, 2).unwrap().to_i64(), Some(-12));
        assert!(x.fits(4, 2) && !x.fits(3, 2) && !x.fits(4, 1));
        let most = Decimal {
            units: i128::MIN,
            scale: 2,
        };
        assert!(!most.fits(38, 2));
        assert!(most
            .to_string()
            .starts_with("-1701411834604692317316873037158841057"));
    }
}
