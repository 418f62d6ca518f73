//! Arbitrary bytes after a well-formed request magic as a binary connection's whole
//! input: the parse loop must never panic or stall, and every request must survive
//! an encode/parse round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = vec![kura_protocol::binary::REQUEST_MAGIC];
    input.extend_from_slice(data);
    kura_fuzz::binary::check_binary_stream(&input);
});
