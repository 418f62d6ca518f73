//! A SQL statement's shape (`kura_sql::shape`): any text, as a client's COM_QUERY
//! would bring it, is scanned without a panic; a shape never holds more values than
//! its text has markers for; and writing a shape's values back into its text gives a
//! statement of the same shape, with the same values.
#![no_main]

use kura_sql::shape::shape;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Some(found) = shape(&text) else {
        return;
    };
    assert!(found.text.matches('?').count() >= found.params.len());
    let again = shape(&found.statement());
    assert_eq!(again.as_ref(), Some(&found), "{text:?}");
});
