//! The SQL port with real clients: Debian's `mariadb` command-line client running a
//! script (its output compared with `tests/sql/script.expected`, rewritten under
//! `KURA_BLESS=1`), and PyMySQL, mysql-connector-python (prepared statements) and
//! pymemcache on the same rows (`tests/sql/clients.py`, in the virtualenv
//! `scripts/install-test-deps.sh` makes).

use std::path::{Path, PathBuf};
use std::process::Command;

use kura_testkit::python::run_script;
use kura_testkit::{kura_bin, Durability, KuraServer};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn start() -> KuraServer {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    match KuraServer::start(&bin, Durability::Fsync, &[]) {
        Ok(kura) => kura,
        Err(e) => panic!("cannot start kura: {e}"),
    }
}

#[test]
fn the_mariadb_client_runs_a_script() {
    let kura = start();
    let script = root().join("tests/sql/script.sql");
    // One stream, so each error shows beside its statement.
    let output = Command::new("bash")
        .arg("-c")
        .arg(r#"mariadb -h 127.0.0.1 -P "$1" -u root -D kura --force --unbuffered --table -vvv < "$2" 2>&1"#)
        .arg("bash")
        .arg(kura.sql_addr().port().to_string())
        .arg(&script)
        .output();
    let output = match output {
        Ok(o) => o,
        Err(e) => panic!("cannot run mariadb (scripts/install-peers.sh installs it): {e}"),
    };
    // Timings vary run to run: "(0.001 sec)" is dropped.
    let text: String = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| match line.find(" (0.") {
            Some(at) if line.ends_with("sec)") => line[..at].to_string(),
            _ => line.to_string(),
        })
        .map(|line| line + "\n")
        .collect();
    let expected = root().join("tests/sql/script.expected");
    if std::env::var_os("KURA_BLESS").is_some() {
        if let Err(e) = std::fs::write(&expected, &text) {
            panic!("{}: {e}", expected.display());
        }
        return;
    }
    let want = std::fs::read_to_string(&expected).unwrap_or_default();
    if want != text {
        panic!(
            "mariadb's output differs from {} (KURA_BLESS=1 rewrites it):\n{text}\nkura's log:\n{}",
            expected.display(),
            kura.log()
        );
    }
}

#[test]
fn drivers_and_memcached_share_the_rows() {
    let kura = start();
    let args = [
        kura.sql_addr().port().to_string(),
        kura.addr().port().to_string(),
    ];
    if let Err(e) = run_script(Path::new("tests/sql/clients.py"), &args, &[]) {
        panic!(
            "clients.py failed: {e}
kura's log:
{}",
            kura.log()
        );
    }
}
