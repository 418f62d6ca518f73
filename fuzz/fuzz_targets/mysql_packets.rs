//! MySQL protocol (`kura-mysql`): arbitrary bytes as a connection's input go
//! through the packet reader, the login and command parsers, the client side's
//! greeting and reply readers, and COM_STMT_EXECUTE's parameter parser without
//! a panic; framing round-trips; a double's MySQL text reads back as the same double; and row
//! encoding refuses, never panics on, values that do not fit their columns.
#![no_main]

use std::collections::HashMap;

use kura_mysql::{
    binary_row, double_text, is_ssl_request, parse_command, parse_execute, parse_login,
    server_capabilities, text_row, write_packet, CapabilityFlags, ColumnType, Command,
    PacketReader, ProtocolError, Value,
};
use libfuzzer_sys::fuzz_target;

/// A small limit reaches the too-large path; the large one lets whole
/// packets through.
const MAX_PAYLOADS: [usize; 2] = [64, 1 << 20];

fuzz_target!(|data: &[u8]| {
    for max_payload in MAX_PAYLOADS {
        read_stream(data, max_payload);
    }
    // The whole input as one payload, as each parser would see it.
    check_payload(data, &mut HashMap::new());
    round_trip_framing(data);
    check_values(data);
});

/// Feeds `data` in two parts split where its first byte says, taking every
/// packet out after each part, as the server's read loop does.
fn read_stream(data: &[u8], max_payload: usize) {
    let split = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let mut reader = PacketReader::new(max_payload);
    let mut bound = HashMap::new();
    for part in [&data[..split], &data[split..]] {
        reader.buffer().extend_from_slice(part);
        loop {
            let before = reader.pending_bytes();
            match reader.next_packet() {
                Ok(Some((_, payload))) => {
                    assert!(payload.len() <= max_payload);
                    assert!(reader.pending_bytes() < before, "no progress");
                    check_payload(&payload, &mut bound);
                }
                Ok(None) => break,
                // The connection is closed after a framing error.
                Err(ProtocolError::TooLarge { .. } | ProtocolError::PacketsOutOfOrder { .. }) => {
                    return
                }
                Err(other) => panic!("unexpected framing error {other:?}"),
            }
        }
    }
}

/// The parameter types each statement was last executed with, by statement id.
type Bound = HashMap<u32, Vec<(ColumnType, bool)>>;

/// Runs every parser over one payload; `bound` carries each statement's
/// parameter types from one execute to the next, as the server keeps them (per
/// statement: one statement's types say nothing of another's).
fn check_payload(payload: &[u8], bound: &mut Bound) {
    // The client side, as a cluster node reads another primary's replies.
    let _ = kura_mysql::client::parse_greeting(payload);
    for caps in [
        CapabilityFlags::empty(),
        CapabilityFlags::CLIENT_DEPRECATE_EOF,
    ] {
        let mut reply = kura_mysql::client::ReplyEnd::new(caps);
        let _ = reply.step(payload);
        let _ = reply.step(payload);
        let mut copy = payload.to_vec();
        kura_mysql::client::set_more_results(&mut copy, !caps.is_empty(), true);
        assert_eq!(copy.len(), payload.len());
    }
    for over_tls in [false, true] {
        if let Ok(login) = parse_login(payload, over_tls) {
            assert!(server_capabilities().contains(login.capabilities));
            assert_ne!(login.database.as_deref(), Some(""));
        }
    }
    if is_ssl_request(payload) {
        assert_eq!(payload.len(), 32);
    }
    if let Ok(Command::StmtExecute { stmt_id, rest }) = parse_command(payload) {
        // The statement's parameter count comes from the server; take it
        // from the id, with some parameters streamed as long data.
        let num_params = (stmt_id % 300) as usize;
        let mut long_data: Vec<Option<Vec<u8>>> = (0..num_params)
            .map(|i| ((stmt_id >> 8) & 1 == 1 && i % 3 == 0).then(|| vec![i as u8]))
            .collect();
        let bound = bound.entry(stmt_id).or_default();
        if let Ok(execute) = parse_execute(rest, num_params, bound, &mut long_data) {
            assert_eq!(execute.params.len(), num_params);
            assert_eq!(bound.len(), num_params);
            assert!(long_data.iter().all(Option::is_none));
        }
    }
    // The payload straight after a command byte, for any parameter count.
    let num_params = payload.first().map_or(0, |b| usize::from(*b));
    if let Some(rest) = payload.get(1..) {
        let result = parse_execute(rest, num_params, &mut Vec::new(), &mut []);
        if let Ok(execute) = result {
            assert_eq!(execute.params.len(), num_params);
        }
    }
}

/// `write_packet` then `PacketReader` gives back the payload and sequence id.
fn round_trip_framing(data: &[u8]) {
    let mut seq = data.first().copied().unwrap_or(0);
    let first_seq = seq;
    let mut out = Vec::new();
    write_packet(&mut out, &mut seq, data);
    assert_eq!(seq, first_seq.wrapping_add(1));
    let mut reader = PacketReader::new(data.len());
    reader.feed(&out);
    assert_eq!(reader.next_packet(), Ok(Some((first_seq, data.to_vec()))));
    assert_eq!(reader.reply_seq(), seq);
    assert_eq!(reader.next_packet(), Ok(None));
}

/// Row encoding over values and column types taken from the input.
fn check_values(data: &[u8]) {
    for chunk in data.chunks(8) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        let value = f64::from_le_bytes(bytes);
        let text = double_text(value);
        if value.is_finite() {
            let back: f64 = text.parse().unwrap_or(f64::NAN);
            assert_eq!(
                back.to_bits(),
                value.to_bits(),
                "{value:e} printed as {text}"
            );
        } else {
            assert_eq!(text, "0");
        }
    }
    let Some((&ty, rest)) = data.split_first() else {
        return;
    };
    let Ok(ty) = ColumnType::try_from(ty) else {
        return;
    };
    let mut int = [0u8; 8];
    let n = rest.len().min(8);
    int[..n].copy_from_slice(&rest[..n]);
    let values = [
        Value::Bytes(rest),
        Value::Int(i64::from_le_bytes(int)),
        Value::UInt(u64::from_le_bytes(int)),
        Value::Double(f64::from_le_bytes(int)),
        Value::Null,
    ];
    for unsigned in [false, true] {
        for value in values {
            if let Ok(row) = binary_row(&[(ty, unsigned)], &[value]) {
                // Header, a one-byte NULL bitmap, then the value if not NULL.
                assert_eq!(row[0], 0);
                assert_eq!(row.len() == 2, matches!(value, Value::Null));
            }
        }
        let types = vec![(ty, unsigned); values.len()];
        if let Ok(row) = binary_row(&types, &values) {
            // Only the last of the five columns is NULL: bit 4 + 2.
            assert_eq!(row[..2], [0, 1 << 6]);
        }
    }
    let row = text_row(&values);
    assert_eq!(row.last(), Some(&0xfb), "NULL is 0xfb");
}
