//! Shared checks for the fuzz targets: drive the protocol parser over a byte
//! stream the way the server does and assert what must hold for any input.
//!
//! Not a test helper for the main workspace: this crate lives outside it and
//! is built only by cargo-fuzz.
//!
//! What is checked, beyond "does not panic":
//! - every step consumes at least one byte and stays inside the buffer, so the
//!   server's read loop always terminates;
//! - a parsed request encodes back to bytes that parse to the same request
//!   (the parser and encoder agree on every request the parser can produce).

pub mod binary;
pub mod recovery;
pub mod tables;

use kura_protocol::{parse, Limits, Parsed};

/// memcached's limits, and tiny ones that reach the too-large paths.
pub(crate) const LIMITS: [Limits; 2] = [
    Limits {
        key_max_bytes: 250,
        item_size_max_bytes: 1024 * 1024,
    },
    Limits {
        key_max_bytes: 8,
        item_size_max_bytes: 160,
    },
];

/// Re-encoded lines can grow a little (`3000000000` reads as `-1294967296`);
/// past this a line could cross memcached's 16 KiB read buffer, so the round
/// trip is not checked.
const ROUND_TRIP_MAX_BYTES: usize = 8192;

/// Parses `data` as one connection's input, with each set of limits.
pub fn check_stream(data: &[u8]) {
    for limits in &LIMITS {
        check_stream_with(data, limits);
    }
}

fn check_stream_with(data: &[u8], limits: &Limits) {
    let mut offset = 0;
    while offset < data.len() {
        let rest = &data[offset..];
        match parse(rest, limits) {
            Parsed::Incomplete => return,
            Parsed::Request { request, consumed } => {
                assert!(
                    consumed >= 1 && consumed <= rest.len(),
                    "consumed {consumed} of {}",
                    rest.len()
                );
                let mut encoded = Vec::new();
                request.write_to(&mut encoded);
                if encoded.len() <= ROUND_TRIP_MAX_BYTES {
                    match parse(&encoded, limits) {
                        Parsed::Request {
                            request: again,
                            consumed: again_consumed,
                        } => {
                            assert_eq!(again, request, "round trip through {encoded:?}");
                            assert_eq!(again_consumed, encoded.len());
                        }
                        other => {
                            panic!("{request:?} encodes to {encoded:?}, which parses as {other:?}")
                        }
                    }
                }
                offset += consumed;
            }
            Parsed::Error {
                error,
                consumed,
                swallow_bytes,
                close,
                ..
            } => {
                assert!(
                    consumed >= 1 && consumed <= rest.len(),
                    "consumed {consumed} of {}",
                    rest.len()
                );
                assert_eq!(close, error.closes_connection());
                if close {
                    return;
                }
                offset += consumed;
                offset = offset.saturating_add(swallow_bytes).min(data.len());
            }
        }
    }
}
