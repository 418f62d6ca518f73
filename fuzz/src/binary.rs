//! The binary-protocol parser over a byte stream, as the server drives it.
//!
//! What is checked, beyond "does not panic": every step consumes at least a header
//! and stays inside the buffer; a refused value is skipped as the server skips it;
//! and a parsed request encodes back to bytes that parse to the same request.

use kura_protocol::binary::{parse, Parsed, Sasl, HEADER_BYTES};

use crate::LIMITS;

/// Parses `data` as one binary connection's input, under each SASL state and each
/// set of limits.
pub fn check_binary_stream(data: &[u8]) {
    for limits in &LIMITS {
        for sasl in [Sasl::Off, Sasl::Required, Sasl::Authenticated] {
            check_with(data, limits, sasl);
        }
    }
}

fn check_with(data: &[u8], limits: &kura_protocol::Limits, sasl: Sasl) {
    let mut offset = 0;
    while offset < data.len() {
        let rest = &data[offset..];
        match parse(rest, limits, sasl) {
            Parsed::Incomplete | Parsed::Close => return,
            Parsed::Request {
                header,
                command,
                consumed,
            } => {
                assert!(
                    (HEADER_BYTES..=rest.len()).contains(&consumed),
                    "consumed {consumed} of {}",
                    rest.len()
                );
                let mut encoded = Vec::new();
                command.write_to(&mut encoded, header.opcode, header.opaque, header.cas);
                match parse(&encoded, limits, sasl) {
                    Parsed::Request {
                        header: again_header,
                        command: again,
                        consumed: again_consumed,
                    } => {
                        assert_eq!(again, command, "round trip through {encoded:?}");
                        assert_eq!(again_header.opcode, header.opcode);
                        assert_eq!(again_consumed, encoded.len());
                    }
                    other => panic!("{command:?} encodes to {encoded:?}, which parses as {other:?}"),
                }
                offset += consumed;
            }
            Parsed::Error {
                consumed,
                swallow,
                close,
                ..
            } => {
                assert!(
                    (HEADER_BYTES..=rest.len()).contains(&consumed),
                    "consumed {consumed} of {}",
                    rest.len()
                );
                if close {
                    return;
                }
                offset += consumed;
                offset = offset.saturating_add(swallow).min(data.len());
            }
        }
    }
}
