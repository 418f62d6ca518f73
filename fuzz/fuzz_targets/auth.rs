//! Arbitrary bytes as a users file, as a logged-out text connection's input, and as
//! a SASL PLAIN message: no panic, and what parses stays inside its input.
#![no_main]

use kura_protocol::auth::{parse_plain, parse_text_login, parse_users, TextLogin};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(users) = parse_users(data) {
        for user in users {
            assert!(!user.user.is_empty());
            assert!(!user.user.contains(&b':'));
        }
    }
    match parse_text_login(data) {
        TextLogin::Refused { consumed, .. } | TextLogin::Login { consumed, .. } => {
            assert!(consumed >= 1 && consumed <= data.len());
        }
        TextLogin::Incomplete | TextLogin::Close => {}
    }
    if let Some((user, _password)) = parse_plain(data) {
        assert!(!user.is_empty() && !user.contains(&0));
    }
});
