//! Real memcached clients against kura, each script run against Debian's memcached
//! first so that its expectations are memcached's own: pylibmc in binary mode
//! (libmemcached's binary protocol) and python-binary-memcached, without and with
//! SASL (`tests/clients/*.py`, in the virtualenv `scripts/install-test-deps.sh`
//! makes), Node's memjs with SASL (`tests/clients/memjs_check.js`), and pymemcache
//! with the text protocol's login (`tests/clients/text_auth.py`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use kura_testkit::{kura_bin, Durability, KuraServer, MemcachedServer};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where pylibmc's own libsasl2 finds the PLAIN mechanism (Debian's
/// libsasl2-modules): the wheel's library looks in a path of the machine it was
/// built on.
const SASL_PLUGINS: &str = "/usr/lib/x86_64-linux-gnu/sasl2";

/// Runs `script` against `addr` with `args` after the port; the error is its output.
fn run(script: &str, addr: SocketAddr, args: &[&str]) -> Result<(), String> {
    let args: Vec<String> = std::iter::once(addr.port().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .collect();
    kura_testkit::python::run_client(script, &args, &[("SASL_PATH", SASL_PLUGINS)]).map(|_| ())
}

/// Runs a Node script against `addr`, with the modules `scripts/install-test-deps.sh`
/// puts in target/node.
fn run_node(script: &str, addr: SocketAddr, args: &[&str]) -> Result<(), String> {
    let output = Command::new("node")
        .arg(root().join("tests/clients").join(script))
        .arg(addr.port().to_string())
        .args(args)
        .env("NODE_PATH", root().join("target/node/node_modules"))
        .output()
        .map_err(|e| format!("cannot run node (scripts/install-test-deps.sh): {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// A client script: run by Python (the venv) or by Node.
#[derive(Clone, Copy)]
enum Script {
    Python(&'static str),
    Node(&'static str),
}

impl Script {
    fn run(self, addr: SocketAddr, args: &[&str]) -> Result<(), String> {
        match self {
            Script::Python(name) => run(name, addr, args),
            Script::Node(name) => run_node(name, addr, args),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Script::Python(name) | Script::Node(name) => name,
        }
    }
}

/// How both servers check logins, if they do.
#[derive(Clone, Copy)]
enum Logins {
    None,
    /// memcached -Y against kura -Y.
    Text,
    /// memcached -S -B binary (a sasldb) against kura -Y.
    Sasl,
}

const USER: &str = "ann";
const PASSWORD: &str = "s3cret";

/// Runs every script against memcached first (so its expectations are memcached's
/// own), then against kura, both checking `logins`.
fn against_memcached_then_kura(logins: Logins, scripts: &[Script]) {
    let credentials = [(USER.to_string(), PASSWORD.to_string())];
    let users = kura_testkit::auth::Users::new(&credentials)
        .unwrap_or_else(|e| panic!("cannot write the users: {e}"));
    let (memcached, args) = match logins {
        Logins::None => (MemcachedServer::start(), Vec::new()),
        Logins::Text => (users.start_memcached(false), vec![USER, PASSWORD]),
        Logins::Sasl => (users.start_memcached(true), vec![USER, PASSWORD]),
    };
    let memcached = memcached.unwrap_or_else(|e| panic!("cannot start memcached: {e}"));
    for script in scripts {
        if let Err(e) = script.run(memcached.addr(), &args) {
            panic!(
                "{} fails against memcached itself (fix the script):\n{e}\n{}",
                script.name(),
                memcached.log()
            );
        }
    }
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let file = users.file().to_string_lossy().into_owned();
    let kura_args: Vec<&str> = match logins {
        Logins::None => Vec::new(),
        Logins::Text | Logins::Sasl => vec!["-Y", &file],
    };
    let kura = KuraServer::start(&bin, Durability::Fsync, &kura_args)
        .unwrap_or_else(|e| panic!("cannot start kura: {e}"));
    for script in scripts {
        if let Err(e) = script.run(kura.addr(), &args) {
            panic!(
                "{} against kura:\n{e}\nkura's log:\n{}",
                script.name(),
                kura.log()
            );
        }
    }
}

#[test]
fn binary_clients_get_memcacheds_answers() {
    against_memcached_then_kura(Logins::None, &[Script::Python("binary_clients.py")]);
}

#[test]
fn sasl_clients_log_in_as_with_memcached() {
    against_memcached_then_kura(
        Logins::Sasl,
        &[
            Script::Python("sasl_clients.py"),
            Script::Node("memjs_check.js"),
        ],
    );
}

#[test]
fn pymemcache_logs_in_with_the_text_login_as_with_memcached() {
    against_memcached_then_kura(Logins::Text, &[Script::Python("text_auth.py")]);
}

/// A range read through `get` is one item whose value holds every row: pymemcache,
/// python-memcached and pylibmc read a 300-row range whole and split it back into
/// the rows, alone and in a multi-get with a plain key (`tests/clients/table_ranges.py`).
/// memcached has no tables: the script runs against kura alone.
#[test]
fn common_clients_read_a_table_range_whole() {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let schema = root().join("tests/transcripts/tables/schema.sql");
    let schema = schema.to_string_lossy().into_owned();
    let kura = KuraServer::start(&bin, Durability::Fsync, &["--schema", &schema])
        .unwrap_or_else(|e| panic!("cannot start kura: {e}"));
    if let Err(e) = run("table_ranges.py", kura.addr(), &[]) {
        panic!(
            "table_ranges.py against kura:\n{e}\nkura's log:\n{}",
            kura.log()
        );
    }
}

/// pymemcache sends `set` with `noreply` by default: a row Kura refuses returns as its
/// noreply writes do, its error never lands on the next command, and `stats` counts
/// it (`tests/clients/table_noreply.py`). memcached has no tables: kura alone.
#[test]
fn pymemcache_noreply_row_errors_do_not_reach_the_next_command() {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let schema = root().join("tests/transcripts/tables/schema.sql");
    let schema = schema.to_string_lossy().into_owned();
    let kura = KuraServer::start(&bin, Durability::Fsync, &["--schema", &schema])
        .unwrap_or_else(|e| panic!("cannot start kura: {e}"));
    if let Err(e) = run("table_noreply.py", kura.addr(), &[]) {
        panic!(
            "table_noreply.py against kura:\n{e}\nkura's log:\n{}",
            kura.log()
        );
    }
}
