//! Arbitrary text as a config file, against a table of flags like the server's: no
//! panic; what is accepted becomes arguments that name known flags only; a refusal
//! names a line within the text.
#![no_main]

use kura_config::{to_args, Flag, Kind};
use libfuzzer_sys::fuzz_target;

fn flags() -> Vec<Flag> {
    let flag = |key: &str, spelling: &str, kind| Flag {
        key: key.to_string(),
        spelling: spelling.to_string(),
        kind,
    };
    vec![
        flag("port", "--port", Kind::Value),
        flag("listen", "--listen", Kind::Value),
        flag("memory-limit", "--memory-limit", Kind::Value),
        flag("enable-sasl", "--enable-sasl", Kind::Switch),
        flag("verbose", "-v", Kind::Count),
    ]
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let flags = flags();
    match to_args(text, &flags) {
        Ok(settings) => {
            for setting in settings {
                assert!(setting.line >= 1 && setting.line <= text.lines().count().max(1));
                for arg in setting.args {
                    assert!(flags.iter().any(|f| arg == f.spelling
                        || arg.starts_with(&format!("{}=", f.spelling))));
                }
            }
        }
        Err(e) => assert!(e.line <= text.matches('\n').count() + 1),
    }
});
