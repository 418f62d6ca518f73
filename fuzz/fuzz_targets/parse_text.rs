//! Arbitrary bytes as a connection's whole input: the parse loop must never
//! panic, never stall, and every request must survive an encode/parse round
//! trip.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kura_fuzz::check_stream(data);
});
