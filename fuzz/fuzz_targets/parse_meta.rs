//! Arbitrary bytes after a meta command name, so the fuzzer spends its time in
//! flag parsing, base64 keys and ms data blocks rather than finding `mg `.
#![no_main]

use libfuzzer_sys::fuzz_target;

const COMMANDS: [&[u8]; 7] = [b"mg ", b"ms ", b"md ", b"ma ", b"me ", b"mn ", b"ms k "];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let mut input = COMMANDS[usize::from(selector) % COMMANDS.len()].to_vec();
    input.extend_from_slice(rest);
    kura_fuzz::check_stream(&input);
});
