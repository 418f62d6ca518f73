//! `SUM` as MySQL's: integers add exactly past 64 bits (SQLite's built-in `sum` fails
//! with "integer overflow" where MySQL's DECIMAL sum goes on), and a sum that no
//! longer fits a BIGINT comes back as a DOUBLE (SQLite computes in doubles, a DECIMAL
//! column's values too: the client is told the sum of one is a DECIMAL, and gets the
//! double at its scale, `crate::columns::aggregate_kinds`; `docs/sql.md`).
//! Doubles add with Neumaier's compensation, as SQLite's own `sum` does. Registered
//! as a window function too, so `SUM(x) OVER (...)` works as before.

use rusqlite::functions::{Aggregate, Context, FunctionFlags, WindowAggregate};
use rusqlite::types::{Value, ValueRef};
use rusqlite::Connection;

/// The running sum of the non-NULL values seen.
#[derive(Default)]
pub struct Acc {
    /// Non-NULL values in the sum (a window's inverse takes them out).
    count: u64,
    int: i128,
    /// Set once a value is not an integer: the sum is then `real + compensation`.
    real: Option<(f64, f64)>,
}

impl Acc {
    fn add(&mut self, v: ValueRef<'_>, sign: i8) {
        let number = match v {
            ValueRef::Null => return,
            ValueRef::Integer(n) => Value::Integer(n),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(t) | ValueRef::Blob(t) => {
                let s = std::str::from_utf8(t).unwrap_or("").trim();
                match s.parse::<i64>() {
                    Ok(n) => Value::Integer(n),
                    Err(_) => Value::Real(s.parse::<f64>().unwrap_or(0.0)),
                }
            }
        };
        if sign > 0 {
            self.count += 1;
        } else {
            self.count = self.count.saturating_sub(1);
        }
        match number {
            Value::Integer(n) if self.real.is_none() => {
                self.int += i128::from(sign) * i128::from(n)
            }
            Value::Integer(n) => self.add_real(f64::from(sign) * n as f64),
            Value::Real(f) => {
                if self.real.is_none() {
                    self.real = Some((self.int as f64, 0.0));
                    self.int = 0;
                }
                self.add_real(f64::from(sign) * f);
            }
            _ => {}
        }
    }

    /// Neumaier's compensated addition.
    fn add_real(&mut self, x: f64) {
        let (sum, c) = self.real.get_or_insert((0.0, 0.0));
        let t = *sum + x;
        if sum.abs() >= x.abs() {
            *c += (*sum - t) + x;
        } else {
            *c += (x - t) + *sum;
        }
        *sum = t;
    }

    fn value(&self) -> Value {
        if self.count == 0 {
            return Value::Null;
        }
        match self.real {
            Some((sum, c)) => Value::Real(sum + c),
            None => i64::try_from(self.int).map_or(Value::Real(self.int as f64), Value::Integer),
        }
    }
}

struct Sum;

impl Aggregate<Acc, Value> for Sum {
    fn init(&self, _: &mut Context<'_>) -> rusqlite::Result<Acc> {
        Ok(Acc::default())
    }

    fn step(&self, ctx: &mut Context<'_>, acc: &mut Acc) -> rusqlite::Result<()> {
        acc.add(ctx.get_raw(0), 1);
        Ok(())
    }

    fn finalize(&self, _: &mut Context<'_>, acc: Option<Acc>) -> rusqlite::Result<Value> {
        Ok(acc.map_or(Value::Null, |a| a.value()))
    }
}

impl WindowAggregate<Acc, Value> for Sum {
    fn value(&self, acc: Option<&mut Acc>) -> rusqlite::Result<Value> {
        Ok(acc.map_or(Value::Null, |a| a.value()))
    }

    fn inverse(&self, ctx: &mut Context<'_>, acc: &mut Acc) -> rusqlite::Result<()> {
        acc.add(ctx.get_raw(0), -1);
        Ok(())
    }
}

/// Puts this `sum` in place of SQLite's on `db`.
pub fn register(db: &Connection) -> rusqlite::Result<()> {
    db.create_window_function(
        "sum",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        Sum,
    )
}
