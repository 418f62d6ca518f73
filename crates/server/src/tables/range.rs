//! A range read as memcached's clients see it: one item under the key they asked
//! for, whose value holds every row of the range (`docs/tables.md`, Ranges).
//!
//! memcached answers a `get` only with keys that were asked for, and clients rely on
//! it (pymemcache raises on a key it did not ask for, pylibmc and python-memcached keep
//! only the first). So a range is one item, and its rows are framed inside its value
//! by lengths, never by a separator: a row's value may hold any byte, the table's
//! separator and newlines included, and each row's value is byte for byte what a
//! `get` of that row returns, so a client splits the rows without knowing the table
//! and decodes each with the code it uses for one row.
//!
//! ```text
//! ROW <key bytes> <value bytes> <flags> <cas>\r\n
//! <key>\r\n
//! <value>\r\n
//! ... one ROW a row, in the range's order ...
//! END\r\n          (the whole range)   or   CUT\r\n   (the range goes on past its limit)
//! ```
//!
//! The key is the row's table key (`@@players.42`), which a client can write back.
//! The item's client flags are 0 (clients read 0 as plain bytes; the rows' own flags
//! are in their lines) and its CAS is the highest of its rows' (0 for an empty range).
//!
//! What it is not for: reading the rows (`kura_tables::Tables::range`), or the meta
//! `r` form that sends them one by one (`crate::tables`).

use kura_protocol::number::write_u64 as push_u64;
use kura_tables::RangeRows;

/// The item a range read answers with.
pub struct Combined {
    pub value: Vec<u8>,
    /// The highest CAS among the rows; 0 for an empty range.
    pub cas: u64,
    /// The reply may go out once the log has acknowledged this LSN.
    pub lsn: Option<u64>,
}

/// The rows of `range`, each named `@@<table>.<primary key>`, as one item.
pub fn combine(table: &str, range: &RangeRows) -> Combined {
    let mut value = Vec::new();
    let mut cas = 0;
    let mut lsn = None;
    for (pk, row) in &range.rows {
        let key_bytes = 2 + table.len() + 1 + pk.len();
        value.extend_from_slice(b"ROW ");
        push_u64(&mut value, key_bytes as u64);
        value.push(b' ');
        push_u64(&mut value, row.value.len() as u64);
        value.push(b' ');
        push_u64(&mut value, u64::from(row.client_flags));
        value.push(b' ');
        push_u64(&mut value, row.cas);
        value.extend_from_slice(b"\r\n@@");
        value.extend_from_slice(table.as_bytes());
        value.push(b'.');
        value.extend_from_slice(pk);
        value.extend_from_slice(b"\r\n");
        value.extend_from_slice(&row.value);
        value.extend_from_slice(b"\r\n");
        cas = cas.max(row.cas);
        lsn = lsn.max(Some(row.lsn));
    }
    value.extend_from_slice(if range.cut { b"CUT\r\n" } else { b"END\r\n" });
    Combined { value, cas, lsn }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kura_tables::RowItem;

    fn row(pk: &[u8], value: &[u8], cas: u64) -> (Vec<u8>, RowItem) {
        let item = RowItem {
            value: value.to_vec(),
            client_flags: 7,
            exptime: 0,
            cas,
            lsn: cas * 10,
        };
        (pk.to_vec(), item)
    }

    fn check(rows: Vec<(Vec<u8>, RowItem)>, cut: bool, expected: &[u8], cas: u64) {
        let combined = combine("t", &RangeRows { rows, cut });
        assert_eq!(
            String::from_utf8_lossy(&combined.value),
            String::from_utf8_lossy(expected)
        );
        assert_eq!(combined.cas, cas);
    }

    #[test]
    fn rows_are_framed_by_lengths() {
        check(Vec::new(), false, b"END\r\n", 0);
        check(Vec::new(), true, b"CUT\r\n", 0);
        check(
            vec![row(b"1", b"a|b", 3), row(b"22", b"x\r\nEND\r\n|\\|", 2)],
            false,
            b"ROW 5 3 7 3\r\n@@t.1\r\na|b\r\nROW 6 11 7 2\r\n@@t.22\r\nx\r\nEND\r\n|\\|\r\nEND\r\n",
            3,
        );
    }
}
