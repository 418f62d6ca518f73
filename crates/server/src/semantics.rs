//! memcached's command semantics on top of the engine: what add, cas, append, incr,
//! touch, the meta commands and their flags do to an item, and the bytes of the reply.
//!
//! Each function takes plain values (no parser types), runs one [`Store::update`] or
//! read, writes the reply into `out`, and returns the LSN the reply depends on. The
//! rules follow memcached 1.6's `proto_text.c` and `do_store_item`/`do_add_delta`;
//! `docs/protocol.md` lists where Kura differs on purpose.

use std::sync::Arc;

use kura_engine::{exptime_to_absolute, Access, Change, ItemRef, NewCas, NewItem, Store, Written};
use kura_protocol::Limits;

use crate::stats::{bump, Counters};

/// The six storage commands, and the modes of `ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// The outcome of a storage command, as memcached names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreResult {
    Stored,
    NotStored,
    Exists,
    NotFound,
    /// Over the memory limit (`-m`).
    NoMemory,
}

/// Why a store was refused before the engine saw it; these replies ignore `noreply`.
pub const NO_MEMORY_REPLY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";
pub const SERVER_ERROR_WRITES_REFUSED: &[u8] =
    b"SERVER_ERROR writes refused: the log could not be written\r\n";

pub struct StoreRequest<'a> {
    pub mode: StoreMode,
    pub key: &'a [u8],
    pub client_flags: u32,
    pub exptime: i64,
    /// The client's CAS for `cas` (and for `ms` with `C`); 0 = none.
    pub compare_cas: u64,
    pub data: &'a [u8],
    /// `ms` with `I`: a CAS mismatch with an older CAS still stores, marked stale.
    pub invalidate: bool,
    /// `ms` with `b`: the key came base64-encoded; replies show it that way.
    pub binary_key: bool,
}

/// Runs a storage command. Returns the result and, when stored, what was written.
pub fn store(
    store: &Store,
    counters: &Counters,
    limits: &Limits,
    request: StoreRequest<'_>,
) -> Result<(StoreResult, Option<Written>), kura_engine::Error> {
    bump(&counters.cmd_set);
    // Values go to disk when memory is short; keys must fit in the index's budget.
    if !store.has_room_for_key(request.key) {
        bump(&counters.store_no_memory);
        return Ok((StoreResult::NoMemory, None));
    }
    let StoreRequest {
        mode,
        key,
        client_flags,
        exptime,
        compare_cas,
        data,
        invalidate,
        binary_key,
    } = request;
    let new_cas = NewCas::Generate;
    let decide = |current: Option<&ItemRef<'_>>, now| {
        let exptime = exptime_to_absolute(exptime, now);
        let fresh = |value: Arc<[u8]>| NewItem {
            value,
            client_flags,
            exptime,
            cas: new_cas,
            stale: false,
            binary_key,
            win_sent: false,
        };
        match (mode, current) {
            (StoreMode::Set, _) => (Change::Put(fresh(data.into())), StoreResult::Stored),
            (StoreMode::Add, Some(_)) => (Change::Keep, StoreResult::NotStored),
            (StoreMode::Add, None) => (Change::Put(fresh(data.into())), StoreResult::Stored),
            (StoreMode::Replace | StoreMode::Append | StoreMode::Prepend, None) => {
                (Change::Keep, StoreResult::NotStored)
            }
            (StoreMode::Cas, None) => (Change::Keep, StoreResult::NotFound),
            (StoreMode::Replace, Some(_)) => (Change::Put(fresh(data.into())), StoreResult::Stored),
            (StoreMode::Append | StoreMode::Prepend, Some(old)) => {
                if compare_cas != 0 && compare_cas != old.cas {
                    return (Change::Keep, StoreResult::Exists);
                }
                // The joined item must fit the item size limit, as memcached counts it.
                if !limits.item_fits(
                    key.len(),
                    old.client_flags,
                    old.value.len() + data.len() + 2,
                ) {
                    return (Change::Keep, StoreResult::NotStored);
                }
                let mut value = Vec::with_capacity(old.value.len() + data.len());
                if mode == StoreMode::Append {
                    value.extend_from_slice(old.value);
                    value.extend_from_slice(data);
                } else {
                    value.extend_from_slice(data);
                    value.extend_from_slice(old.value);
                }
                // The old item's flags and expiry stay; the request's are ignored.
                let item = NewItem {
                    value: value.into(),
                    client_flags: old.client_flags,
                    exptime: old.exptime,
                    cas: new_cas,
                    stale: false,
                    binary_key,
                    win_sent: false,
                };
                (Change::Put(item), StoreResult::Stored)
            }
            (StoreMode::Cas, Some(old)) if old.cas == compare_cas => {
                (Change::Put(fresh(data.into())), StoreResult::Stored)
            }
            (StoreMode::Cas, Some(old)) if invalidate && compare_cas < old.cas => {
                // A stale write: the value goes in, the old expiry and win state stay.
                let item = NewItem {
                    value: data.into(),
                    client_flags,
                    exptime: old.exptime,
                    cas: new_cas,
                    stale: true,
                    binary_key,
                    win_sent: old.win_sent,
                };
                (Change::Put(item), StoreResult::Stored)
            }
            (StoreMode::Cas, Some(_)) => (Change::Keep, StoreResult::Exists),
        }
    };
    let (result, written) = store.update(key, Access::NoAccess, decide)?;
    match (mode, result) {
        (StoreMode::Cas, StoreResult::Stored) => bump(&counters.cas_hits),
        (StoreMode::Cas, StoreResult::Exists) => bump(&counters.cas_badval),
        (StoreMode::Cas, StoreResult::NotFound) => bump(&counters.cas_misses),
        _ => {}
    }
    if result == StoreResult::Stored {
        bump(&counters.total_items);
    }
    Ok((result, written))
}

/// memcached deletes the old item when a `set` is refused as too large, so a client
/// never reads the value it just failed to replace.
pub fn drop_on_refused_set(store: &Store, key: &[u8]) -> Result<Option<u64>, kura_engine::Error> {
    Ok(store
        .update(key, Access::NoAccess, |_, _| (Change::Delete, ()))?
        .1
        .map(|w| w.lsn))
}

/// memcached's `safe_strtoull` on an item's value, which is followed by "\r\n": leading
/// white space is skipped, digits must end at white space or the end, and a minus sign
/// makes any value that would read as negative invalid.
pub fn parse_counter(value: &[u8]) -> Option<u64> {
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let mut i = 0;
    while i < value.len() && is_space(value[i]) {
        i += 1;
    }
    let sign_at = i;
    let negative = matches!(value.get(i), Some(b'-'));
    if matches!(value.get(i), Some(b'-' | b'+')) {
        i += 1;
    }
    let digits_start = i;
    let mut n: u64 = 0;
    while i < value.len() && value[i].is_ascii_digit() {
        n = n.checked_mul(10)?.checked_add(u64::from(value[i] - b'0'))?;
        i += 1;
    }
    if i == digits_start {
        // No digits: strtoull leaves the end at the very start of the string.
        let first = value.first().copied().unwrap_or(b'\r');
        return is_space(first).then_some(0);
    }
    if i < value.len() && !is_space(value[i]) {
        return None;
    }
    let n = if negative { n.wrapping_neg() } else { n };
    if (n as i64) < 0 && value[sign_at..i].contains(&b'-') {
        return None;
    }
    Some(n)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delta {
    Incr(u64),
    Decr(u64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArithResult {
    /// The new value, as digits, the new version's expiry (absolute; 0 = never), and
    /// whether the counter was created by this request (`ma` with `N`).
    Value {
        digits: Vec<u8>,
        exptime: u32,
        created: bool,
    },
    NotFound,
    NonNumeric,
    Exists,
}

/// The new value of a counter after incr or decr, padded as memcached pads a value it
/// rewrites in place: with spaces to the old length when the number got shorter.
pub fn apply_delta(old: &[u8], current: u64, delta: Delta) -> (Vec<u8>, Vec<u8>) {
    let next = match delta {
        Delta::Incr(d) => current.wrapping_add(d),
        Delta::Decr(d) => current.saturating_sub(d),
    };
    let digits = next.to_string().into_bytes();
    let mut stored = digits.clone();
    if stored.len() <= old.len() {
        stored.resize(old.len(), b' ');
    }
    (digits, stored)
}

pub struct ArithRequest<'a> {
    pub key: &'a [u8],
    pub delta: Delta,
    /// `ma` with `C`: only if the CAS matches (0 = no check).
    pub compare_cas: u64,
    /// `ma` with `N`: on a miss, create the counter with this TTL and initial value.
    pub vivify: Option<(i64, u64)>,
    /// `ma` with `T`: the new exptime.
    pub new_exptime: Option<i64>,
}

pub fn arithmetic(
    store: &Store,
    counters: &Counters,
    request: ArithRequest<'_>,
) -> Result<(ArithResult, Option<Written>), kura_engine::Error> {
    let ArithRequest {
        key,
        delta,
        compare_cas,
        vivify,
        new_exptime,
    } = request;
    let (result, written) = store.update(key, Access::NoAccess, |current, now| {
        let Some(old) = current else {
            let Some((ttl, initial)) = vivify else {
                return (Change::Keep, ArithResult::NotFound);
            };
            let digits = initial.to_string().into_bytes();
            let exptime = exptime_to_absolute(ttl, now);
            let item = NewItem {
                value: digits.clone().into(),
                client_flags: 0,
                exptime,
                cas: NewCas::Generate,
                stale: false,
                binary_key: false,
                win_sent: false,
            };
            return (
                Change::Put(item),
                ArithResult::Value {
                    digits,
                    exptime,
                    created: true,
                },
            );
        };
        if old.value.is_empty() {
            return (Change::Keep, ArithResult::NonNumeric);
        }
        if compare_cas != 0 && compare_cas != old.cas {
            return (Change::Keep, ArithResult::Exists);
        }
        let Some(current) = parse_counter(old.value) else {
            return (Change::Keep, ArithResult::NonNumeric);
        };
        let (digits, stored) = apply_delta(old.value, current, delta);
        let exptime = new_exptime.map_or(old.exptime, |t| exptime_to_absolute(t, now));
        let item = NewItem {
            value: stored.into(),
            client_flags: old.client_flags,
            exptime,
            cas: NewCas::Generate,
            stale: old.stale,
            binary_key: old.binary_key,
            win_sent: old.win_sent,
        };
        (
            Change::Put(item),
            ArithResult::Value {
                digits,
                exptime,
                created: false,
            },
        )
    })?;
    match (&result, delta) {
        (ArithResult::Value { .. }, Delta::Incr(_)) => bump(&counters.incr_hits),
        (ArithResult::Value { .. }, Delta::Decr(_)) => bump(&counters.decr_hits),
        (ArithResult::NotFound, Delta::Incr(_)) => bump(&counters.incr_misses),
        (ArithResult::NotFound, Delta::Decr(_)) => bump(&counters.decr_misses),
        _ => {}
    }
    Ok((result, written))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: &[u8], expected: Option<u64>) {
        assert_eq!(
            parse_counter(value),
            expected,
            "{:?}",
            String::from_utf8_lossy(value)
        );
    }

    #[test]
    fn counters_parse_as_memcached_strtoull() {
        check(b"0", Some(0));
        check(b"42", Some(42));
        check(b"  42", Some(42));
        check(b"42  ", Some(42));
        check(b"18446744073709551615", Some(u64::MAX));
        check(b"18446744073709551616", None);
        check(b"12abc", None);
        check(b"abc", None);
        check(b" abc", Some(0));
        check(b"-1", None);
        check(b"-0", Some(0));
        check(b"+7", Some(7));
    }

    #[test]
    fn shorter_results_are_padded_like_memcached_in_place_rewrite() {
        assert_eq!(
            apply_delta(b"100", 100, Delta::Decr(95)),
            (b"5".to_vec(), b"5  ".to_vec())
        );
        assert_eq!(
            apply_delta(b"99", 99, Delta::Incr(1)),
            (b"100".to_vec(), b"100".to_vec())
        );
        assert_eq!(
            apply_delta(b"18446744073709551615", u64::MAX, Delta::Incr(2)),
            (b"1".to_vec(), b"1                   ".to_vec())
        );
        assert_eq!(
            apply_delta(b"3", 3, Delta::Decr(10)),
            (b"0".to_vec(), b"0".to_vec())
        );
    }
}
