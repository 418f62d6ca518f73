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
    let python = root().join("target/pyenv/bin/python");
    let output = Command::new(&python)
        .arg(root().join("tests/clients").join(script))
        .arg(addr.port().to_string())
        .args(args)
        .env("SASL_PATH", SASL_PLUGINS)
        .output()
        .map_err(|e| {
            format!(
                "cannot run {} (scripts/install-test-deps.sh makes it): {e}",
                python.display()
            )
        })?;
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

#[test]
fn binary_clients_get_memcacheds_answers() {
    let memcached = match MemcachedServer::start() {
        Ok(m) => m,
        Err(e) => panic!("cannot start memcached: {e}"),
    };
    if let Err(e) = run("binary_clients.py", memcached.addr(), &[]) {
        panic!("binary_clients.py fails against memcached itself (fix the script):\n{e}");
    }
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    if let Err(e) = run("binary_clients.py", kura.addr(), &[]) {
        panic!(
            "binary_clients.py against kura:\n{e}\nkura's log:\n{}",
            kura.log()
        );
    }
}

#[test]
fn sasl_clients_log_in_as_with_memcached() {
    let credentials = [("ann".to_string(), "s3cret".to_string())];
    let users = match kura_testkit::auth::Users::new(&credentials) {
        Ok(users) => users,
        Err(e) => panic!("cannot write the users: {e}"),
    };
    let memcached = match users.start_memcached(true) {
        Ok(m) => m,
        Err(e) => panic!("cannot start memcached with SASL: {e}"),
    };
    if let Err(e) = run_node("memjs_check.js", memcached.addr(), &["ann", "s3cret"]) {
        panic!("memjs_check.js fails against memcached itself (fix the script):\n{e}");
    }
    if let Err(e) = run("sasl_clients.py", memcached.addr(), &["ann", "s3cret"]) {
        panic!(
            "sasl_clients.py fails against memcached itself (fix the script):\n{e}\n{}",
            memcached.log()
        );
    }
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let file = users.file().to_string_lossy().into_owned();
    let kura = match KuraServer::start(&bin, Durability::Fsync, &["-Y", &file]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    if let Err(e) = run("sasl_clients.py", kura.addr(), &["ann", "s3cret"]) {
        panic!(
            "sasl_clients.py against kura:\n{e}\nkura's log:\n{}",
            kura.log()
        );
    }
    if let Err(e) = run_node("memjs_check.js", kura.addr(), &["ann", "s3cret"]) {
        panic!(
            "memjs_check.js against kura:\n{e}\nkura's log:\n{}",
            kura.log()
        );
    }
}

#[test]
fn pymemcache_logs_in_with_the_text_login_as_with_memcached() {
    let credentials = [("ann".to_string(), "s3cret".to_string())];
    let users = match kura_testkit::auth::Users::new(&credentials) {
        Ok(users) => users,
        Err(e) => panic!("cannot write the users: {e}"),
    };
    let memcached = match users.start_memcached(false) {
        Ok(m) => m,
        Err(e) => panic!("cannot start memcached with -Y: {e}"),
    };
    if let Err(e) = run("text_auth.py", memcached.addr(), &["ann", "s3cret"]) {
        panic!("text_auth.py fails against memcached itself (fix the script):\n{e}");
    }
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let file = users.file().to_string_lossy().into_owned();
    let kura = match KuraServer::start(&bin, Durability::Fsync, &["-Y", &file]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    };
    if let Err(e) = run("text_auth.py", kura.addr(), &["ann", "s3cret"]) {
        panic!(
            "text_auth.py against kura:\n{e}\nkura's log:\n{}",
            kura.log()
        );
    }
}
