//! A row's memcached value, its bytes in the log and the catalog's bytes: any input
//! splits, decodes or fails without a panic, and what splits joins back the same.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kura_fuzz::tables::check_values(data);
});
