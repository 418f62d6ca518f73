//! The replication stream's frames (`kura_protocol::replication`): any bytes decode
//! to a frame, "not yet whole", or an error, never a panic; a frame that decodes
//! encodes back to the same bytes.
#![no_main]

use kura_protocol::replication::{decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok(Some((frame, len))) = decode(rest) {
        let mut again = Vec::new();
        encode(&frame, &mut again);
        assert_eq!(again, &rest[..len]);
        rest = &rest[len..];
    }
});
