//! Schema DDL (`kura --schema`): any text parses to tables or to an error, never a
//! panic; a table that parses reads back from its canonical DDL as the same table,
//! and a catalog holding it survives its own encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kura_fuzz::tables::check_ddl(data);
});
