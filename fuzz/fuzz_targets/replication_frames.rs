//! The replication stream's frames (`kura_protocol::replication`): any bytes decode
//! to a frame, "not yet whole", or an error, never a panic; a frame that decodes
//! encodes back to the same bytes. The same bytes as `replicate`'s arguments parse or
//! not, never a panic, and what parses reads back the same from its own writing.
#![no_main]

use kura_protocol::replication::{decode, encode, Replicate};
use kura_protocol::Tokens;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(replicate) = Replicate::parse(Tokens::new(data)) {
        let again = replicate.arguments();
        assert_eq!(Replicate::parse(Tokens::new(again.as_bytes())), Some(replicate));
    }
    let mut rest = data;
    while let Ok(Some((frame, len))) = decode(rest) {
        let mut again = Vec::new();
        encode(&frame, &mut again);
        assert_eq!(again, &rest[..len]);
        rest = &rest[len..];
    }
});
