//! A plan for a Kura table as SQLite's `xBestIndex` leaves it for `xFilter` and
//! `EXPLAIN`: `idx_num` says how the cursor finds its rows, `idx_str` names the index,
//! how the arguments bind and the columns the statement uses.

use std::ffi::c_int;

/// How a cursor finds its rows (`idx_num`).
pub(super) const PLAN_SCAN: c_int = 0;
pub(super) const PLAN_PK: c_int = 1;
pub(super) const PLAN_UNIQUE: c_int = 2;
pub(super) const PLAN_RANGE: c_int = 3;
/// A range of the primary key in descending order.
pub(super) const PLAN_RANGE_DESC: c_int = 4;

/// A scan plan's `idx_str`: this, then SQLite's mask of the columns used, in hex.
pub(super) const SCAN_COLUMNS: &str = "cols";

/// Constraint kinds a plan's arguments stand for, in `idx_str`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bind {
    Eq,
    In,
    Gt,
    Ge,
    Lt,
    Le,
    /// A `LIKE` pattern: the range its literal prefix allows.
    Like,
    /// The statement's `LIMIT` and `OFFSET` (SQLite passes them to a single table
    /// whose every `WHERE` term it passes too): how many rows the range's first read
    /// asks for at once. SQLite still applies them; the range reads on if asked.
    Limit,
    Offset,
}

impl Bind {
    fn code(self) -> &'static str {
        match self {
            Bind::Eq => "eq",
            Bind::In => "in",
            Bind::Gt => "gt",
            Bind::Ge => "ge",
            Bind::Lt => "lt",
            Bind::Le => "le",
            Bind::Like => "like",
            Bind::Limit => "limit",
            Bind::Offset => "offset",
        }
    }

    fn parse(code: &str) -> Option<Bind> {
        Some(match code {
            "eq" => Bind::Eq,
            "in" => Bind::In,
            "gt" => Bind::Gt,
            "ge" => Bind::Ge,
            "lt" => Bind::Lt,
            "le" => Bind::Le,
            "like" => Bind::Like,
            "limit" => Bind::Limit,
            "offset" => Bind::Offset,
            _ => return None,
        })
    }
}

/// A range plan under consideration: its cost, the column, the constraints it binds
/// (constraint position, kind), whether it gives the ORDER BY's order, and whether
/// that order is descending.
pub(super) type RangePlan = (f64, usize, Vec<(usize, Bind)>, bool, bool);

/// A lookup's or a range's `idx_str`: the index's name (`PRIMARY` for the primary
/// key), the argument kinds and the columns the statement uses (SQLite's mask in hex,
/// see [`kura_tables::row::column_used`]): `email:eq:6`, `level:ge,le:ff`.
pub(super) fn plan_str(index: &str, binds: &[Bind], used: u64) -> String {
    let codes: Vec<&str> = binds.iter().map(|b| b.code()).collect();
    format!("{index}:{}:{used:x}", codes.join(","))
}

/// [`plan_str`]'s parts; from the right, as an index's name may hold a colon.
pub(crate) fn parse_plan(plan: &str) -> Option<(&str, Vec<Bind>, u64)> {
    let (rest, used) = plan.rsplit_once(':')?;
    let (index, codes) = rest.rsplit_once(':')?;
    let binds = codes.split(',').filter_map(Bind::parse).collect();
    Some((index, binds, u64::from_str_radix(used, 16).ok()?))
}
