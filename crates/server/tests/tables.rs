//! Tables through memcached's commands, as wire transcripts: every command on rows and
//! on unique-index containers, with its errors. memcached has no tables to compare
//! with, so each transcript's golden file (`tests/transcripts/tables/<name>.expected`)
//! is the specification, following the InnoDB memcached plugin's documented behaviour
//! where it has one; `docs/tables.md` says where Kura differs and why.
//!
//! Each transcript runs on a fresh kura started with `tests/transcripts/tables/schema.sql`.

use std::path::PathBuf;

use kura_testkit::{kura_bin, runner, Durability, KuraServer};

fn dir() -> PathBuf {
    runner::transcripts_dir().join("tables")
}

fn transcript(name: &str) {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let schema = dir().join("schema.sql");
    let Some(schema) = schema.to_str() else {
        panic!("schema path {} is not UTF-8", schema.display())
    };
    let kura = match KuraServer::start(&bin, Durability::Fsync, &["--schema", schema]) {
        Ok(kura) => kura,
        Err(e) => panic!("{name}: cannot start kura: {e}"),
    };
    if let Err(report) = runner::against_golden(&dir(), name, "kura", kura.addr()) {
        panic!("{report}\nkura's output:\n{}", kura.log());
    }
}

macro_rules! transcripts {
    ($($name:ident),* $(,)?) => {
        const LISTED: &[&str] = &[$(stringify!($name)),*];
        $(
            #[test]
            fn $name() {
                transcript(stringify!($name));
            }
        )*
    };
}

transcripts! {
    rows,
    index,
    meta,
    session,
    expiry,
    ranges,
    decimals,
}

#[test]
fn every_table_transcript_has_a_test() {
    let mut names: Vec<String> = match std::fs::read_dir(dir()) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "txt"))
            .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(String::from))
            .collect(),
        Err(e) => panic!("cannot list {}: {e}", dir().display()),
    };
    names.sort();
    let mut listed: Vec<String> = LISTED.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(
        names,
        listed,
        "transcripts! in {} and the directory",
        file!()
    );
}
