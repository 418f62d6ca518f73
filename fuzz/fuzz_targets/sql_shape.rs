//! What a SQL statement's text is scanned for before it is parsed: its string
//! literals that are not text (`kura_sql::bytes`, which makes the text of a
//! COM_QUERY's bytes), its query-cache hints (blanked, the length kept), its shape
//! (`kura_sql::shape`) and its `MAX_EXECUTION_TIME` hint
//! (`kura_sql::interrupt::hint_ms`), and the tables it reaches
//! (`kura_sql::route::reach`). Any bytes, as a client's COM_QUERY would bring
//! them, are scanned without a panic; a shape never holds more values than its text
//! has markers for; and writing a shape's values back into its text gives a
//! statement of the same shape, with the same values.
#![no_main]

use kura_sql::interrupt::hint_ms;
use kura_sql::shape::shape;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = kura_sql::bytes::statement_text(data);
    // Which tables it reaches, as a cluster node routes it.
    let _ = kura_sql::route::reach(&text, Some("kura"));
    let unhinted = kura_sql::translate::without_cache_hints(&text);
    assert_eq!(unhinted.len(), text.len(), "{text:?}");
    if let Some(ms) = hint_ms(&text) {
        assert!(text.contains(&ms.to_string()), "{text:?}");
    }
    let Some(found) = shape(&text) else {
        return;
    };
    assert!(found.text.matches('?').count() >= found.params.len());
    let again = shape(&found.statement());
    assert_eq!(again.as_ref(), Some(&found), "{text:?}");
});
