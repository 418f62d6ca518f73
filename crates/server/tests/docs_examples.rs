//! The docs' examples that start several nodes on one host must run as written: every
//! `sh` block of `README.md` and `docs/*.md` that starts two or more servers (lines that
//! begin `kura -`) is read through `kura config check`, which resolves each command
//! line with the server's own flag parser and defaults, and no two of the nodes may
//! want the same memcached port, SQL port, metrics port or data directory.
//!
//! Nothing is started: the ports in the docs are the standard ones, which tests must
//! not bind, and a clash is a fact of the settings alone.
#![allow(clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kura_testkit::kura_bin;

/// The command lines in `text`'s `sh` blocks, each block's server starts apart.
fn server_starts(text: &str) -> Vec<Vec<Vec<String>>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<Vec<String>>> = None;
    let mut continued = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            match current.take() {
                Some(block) => blocks.push(block),
                None if trimmed == "```sh" || trimmed == "```bash" => current = Some(Vec::new()),
                None => {}
            }
            continue;
        }
        let Some(block) = current.as_mut() else {
            continue;
        };
        let code = trimmed.split(" #").next().unwrap_or("").trim_end();
        if let Some(head) = code.strip_suffix('\\') {
            continued.push_str(head);
            continued.push(' ');
            continue;
        }
        let whole = format!("{continued}{code}");
        continued.clear();
        let whole = whole.trim().trim_end_matches('&').trim();
        if whole.starts_with("kura -") {
            block.push(
                whole
                    .split_whitespace()
                    .skip(1)
                    .map(str::to_owned)
                    .collect(),
            );
        }
    }
    blocks.into_iter().filter(|b| b.len() >= 2).collect()
}

/// What `kura config check` resolves for `args`: each setting's name and value.
fn settings(args: &[String]) -> HashMap<String, String> {
    let output = Command::new(kura_bin(env!("CARGO_BIN_EXE_kura")))
        .args(["config", "check"])
        .args(args)
        .output()
        .expect("run kura config check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kura config check {args:?} refused the docs' example: {}{}",
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .filter_map(|line| {
            let setting = line.split("  #").next()?;
            let (name, value) = setting.split_once(" = ")?;
            Some((
                name.trim().to_owned(),
                value.trim().trim_matches('"').to_owned(),
            ))
        })
        .collect()
}

fn docs() -> Vec<PathBuf> {
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![top.join("README.md")];
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(top.join("docs"))
        .expect("read docs/")
        .map(|entry| entry.expect("docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    in_docs.sort();
    files.extend(in_docs);
    files
}

/// The listening addresses and directory of one node, as (what, value) pairs.
fn claims(node: &HashMap<String, String>) -> Vec<(&'static str, String)> {
    let get = |name: &str| node.get(name).cloned().unwrap_or_default();
    let listen = get("listen");
    let mut claims = vec![
        ("memcached port", format!("{listen}:{}", get("port"))),
        ("data directory", get("data-dir")),
    ];
    if get("sql-port") != "off" {
        claims.push(("SQL port", get("sql-port")));
    }
    if let Some(port) = node.get("metrics-port") {
        claims.push(("metrics port", port.clone()));
    }
    claims
}

#[test]
fn nodes_started_together_in_the_docs_want_ports_and_directories_of_their_own() {
    let mut examples = 0;
    for file in docs() {
        let text = std::fs::read_to_string(&file).expect("read doc");
        for block in server_starts(&text) {
            examples += 1;
            let mut seen: HashMap<(&str, String), &Vec<String>> = HashMap::new();
            for args in &block {
                let node = settings(args);
                for claim in claims(&node) {
                    if let Some(other) = seen.get(&claim) {
                        panic!(
                            "{}: `kura {}` and `kura {}` both want {} {}",
                            file.display(),
                            other.join(" "),
                            args.join(" "),
                            claim.0,
                            claim.1
                        );
                    }
                    seen.insert(claim, args);
                }
            }
        }
    }
    // docs/replication.md starts a primary and a replica on one host.
    assert!(examples >= 1, "no example in the docs starts two nodes");
}

#[test]
fn the_reader_finds_continued_and_backgrounded_server_starts() {
    let text = "```sh\nkura -p 1 \\\n    --sql-port 2 &   # first\nkura backup verify x\nkura -p 3\n```\n```sh\nkura -p 4\n```\n";
    let blocks = server_starts(text);
    assert_eq!(
        blocks,
        vec![vec![
            vec![
                "-p".to_owned(),
                "1".to_owned(),
                "--sql-port".to_owned(),
                "2".to_owned()
            ],
            vec!["-p".to_owned(), "3".to_owned()],
        ]]
    );
}
