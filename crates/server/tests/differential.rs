//! Byte-for-byte compatibility with memcached: every transcript in
//! `tests/transcripts` runs against a fresh kura and a fresh memcached at once, and
//! every step's reply must match (see `tests/transcripts/README.md`). memcached's
//! replies must also still match the golden `.expected` files.
//!
//! memcached is required: without it these tests fail (never skip) and say to run
//! `scripts/install-test-deps.sh`. Set `KURA_BIN` to test another kura binary.

use kura_testkit::{kura_bin, runner, Durability, KuraServer};

fn differential(name: &str) {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let transcript = runner::load(name).unwrap_or_else(|e| panic!("{e}"));
    // A transcript that logs in: kura reads the same users from its -Y file.
    let users = (!transcript.users.is_empty()).then(|| {
        kura_testkit::auth::Users::new(&transcript.users)
            .unwrap_or_else(|e| panic!("{name}: cannot write the users: {e}"))
    });
    let file = users
        .as_ref()
        .map(|u| u.file().to_string_lossy().into_owned());
    let args: Vec<&str> = match &file {
        Some(file) => vec!["-Y", file],
        None => Vec::new(),
    };
    let kura = match KuraServer::start(&bin, Durability::Interval, &args) {
        Ok(kura) => kura,
        Err(e) => panic!("{name}: cannot start kura: {e}"),
    };
    if let Err(report) = runner::differential(name, "kura", kura.addr()) {
        panic!("{report}\nkura's output:\n{}", kura.log());
    }
}

/// One test per transcript, so each fails on its own. `every_transcript_has_a_test`
/// keeps this list and the directory in step.
macro_rules! transcripts {
    ($($name:ident),* $(,)?) => {
        const LISTED: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                differential(stringify!($name));
            }
        )*
    };
}

transcripts! {
    auth_text,
    binary_values,
    binprot_arith,
    binprot_errors,
    binprot_get,
    binprot_misc,
    binprot_sasl,
    binprot_storage,
    cas,
    connections,
    delete,
    errors,
    expiry,
    flush_all,
    incr_decr,
    keys,
    large_values,
    long_lines,
    meta_arithmetic,
    meta_delete,
    meta_get,
    meta_misc,
    meta_set,
    meta_stale,
    misc,
    multiget,
    noreply,
    pipelining,
    slabs,
    storage,
    touch_gat,
}

#[test]
fn every_transcript_has_a_test() {
    let names = match runner::transcript_names() {
        Ok(names) => names,
        Err(e) => panic!("cannot list {}: {e}", runner::transcripts_dir().display()),
    };
    let unlisted: Vec<&String> = names
        .iter()
        .filter(|n| !LISTED.contains(&n.as_str()))
        .collect();
    let missing: Vec<&&str> = LISTED
        .iter()
        .filter(|l| !names.iter().any(|n| n == *l))
        .collect();
    assert!(
        unlisted.is_empty(),
        "add these transcripts to transcripts! in {}: {unlisted:?}",
        file!()
    );
    assert!(
        missing.is_empty(),
        "listed in {} but no such .txt file: {missing:?}",
        file!()
    );
}
