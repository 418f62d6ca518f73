//! A damaged log (cut short, a byte flipped) must recover to exactly the records before
//! the damage, without panicking, and leave a clean log behind.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kura_fuzz::recovery::check_recovery(data);
});
