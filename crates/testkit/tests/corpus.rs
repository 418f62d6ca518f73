//! The transcript corpus against memcached itself: two fresh memcached servers run
//! every transcript at once and must agree with each other and with the golden
//! files. This proves the corpus deterministic and the runner sound without Kura;
//! `KURA_BLESS=1` rewrites the golden files from memcached's replies.
//!
//! Set `KURA_TRANSCRIPT=<name>` to run one transcript.

use std::thread;

use kura_testkit::runner;

#[test]
fn corpus_is_deterministic_on_memcached() {
    let only = std::env::var("KURA_TRANSCRIPT").ok();
    let names = match runner::transcript_names() {
        Ok(names) => names,
        Err(e) => panic!("cannot list {}: {e}", runner::transcripts_dir().display()),
    };
    assert!(
        !names.is_empty(),
        "no transcripts in {}",
        runner::transcripts_dir().display()
    );
    let names: Vec<String> = names
        .into_iter()
        .filter(|n| only.as_ref().is_none_or(|o| o == n))
        .collect();
    // All at once: most of the time is sleeping, so the sleeps overlap.
    let results: Vec<(String, Result<(), String>)> = thread::scope(|scope| {
        let handles: Vec<_> = names
            .iter()
            .map(|name| {
                (
                    name.clone(),
                    scope.spawn(move || runner::memcached_against_itself(name)),
                )
            })
            .collect();
        handles
            .into_iter()
            .map(|(name, handle)| {
                let result = handle
                    .join()
                    .unwrap_or_else(|_| Err(format!("{name}: panicked")));
                (name, result)
            })
            .collect()
    });
    let mut failures = Vec::new();
    for (name, result) in &results {
        match result {
            Ok(()) => println!("ok   {name}"),
            Err(report) => {
                println!("FAIL {name}");
                failures.push(report.clone());
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} transcripts failed:\n{}",
        failures.len(),
        results.len(),
        failures.join("\n")
    );
}

/// The runner must notice a server that differs: memcached with a 2 MiB item limit
/// stores what the reference refuses in `large_values`.
#[test]
fn differential_reports_a_different_server() {
    let candidate = match kura_testkit::MemcachedServer::start_with(&["-I", "2m"]) {
        Ok(server) => server,
        Err(e) => panic!("cannot start memcached: {e}"),
    };
    let report = match runner::differential("large_values", "memcached -I 2m", candidate.addr()) {
        Ok(()) => panic!("a server with another item limit must not pass large_values"),
        Err(report) => report,
    };
    assert!(report.contains("large_values.txt"), "{report}");
    assert!(report.contains("memcached -I 2m:"), "{report}");
    assert!(
        report.contains("SERVER_ERROR object too large for cache"),
        "{report}"
    );
    assert!(
        !report.contains("golden file"),
        "the reference itself still matches: {report}"
    );
}
