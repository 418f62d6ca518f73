//! `KuraServer` against a stand-in script that behaves like kura's startup: prints
//! some noise, then `kura listening on <addr>`, then stays up. Checks the port is
//! read from stdout, kill/restart keep the data directory, and a server that exits
//! before listening is reported with its output.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is the failure report.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use kura_testkit::{Durability, KuraServer};

fn script(dir: &tempfile::TempDir, name: &str, body: &str) -> PathBuf {
    let path = dir.path().join(name);
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(format!("#!/bin/sh\n{body}\n").as_bytes())
        .unwrap();
    drop(file);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Runs `start` again while it fails with ETXTBSY: a script just written by this
/// process can be briefly "busy" because another test thread forked while the
/// file was open for writing (the child holds the descriptor until its exec).
fn retry_busy<T>(mut start: impl FnMut() -> std::io::Result<T>) -> std::io::Result<T> {
    for _ in 0..50 {
        match start() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            result => return result,
        }
    }
    start()
}

#[test]
fn reads_the_listening_line_and_keeps_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    // Records its arguments in the data dir (the 6th argument) and claims a port.
    let bin = script(&dir, "kura", "echo \"$@\" >> \"$6/args\"; echo starting; echo 'kura sql listening on 127.0.0.1:4241'; echo 'kura listening on 127.0.0.1:4242'; exec sleep 60");
    let mut server =
        retry_busy(|| KuraServer::start(&bin, Durability::Fsync, &["--extra"])).unwrap();
    assert_eq!(server.addr().port(), 4242);
    assert_eq!(server.sql_addr().port(), 4241);
    let data_dir = server.data_dir().to_path_buf();
    let args = std::fs::read_to_string(data_dir.join("args")).unwrap();
    assert_eq!(
        args.trim(),
        format!(
            "-p 0 -l 127.0.0.1 --data-dir {} --durability fsync --sql-port 0 --extra",
            data_dir.display()
        )
    );
    server.kill().unwrap();
    assert!(data_dir.join("args").exists());
    retry_busy(|| server.restart()).unwrap();
    assert_eq!(
        std::fs::read_to_string(data_dir.join("args"))
            .unwrap()
            .lines()
            .count(),
        2
    );
    let status = server.terminate().unwrap();
    assert!(!status.success(), "sleep killed by SIGTERM: {status}");
    assert!(server.log().contains("starting"));
    drop(server);
    assert!(
        !data_dir.exists(),
        "the temporary data dir goes with the server"
    );
}

#[test]
fn reports_a_server_that_exits_before_listening() {
    let dir = tempfile::tempdir().unwrap();
    let bin = script(&dir, "kura", "echo 'cannot open data dir' >&2; exit 3");
    let error = match retry_busy(|| KuraServer::start(&bin, Durability::Interval, &[])) {
        Ok(_) => panic!("a server that exits must not start"),
        Err(e) => e.to_string(),
    };
    assert!(error.contains("cannot open data dir"), "{error}");
}

#[test]
fn starts_on_an_existing_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let bin = script(
        &dir,
        "kura",
        "echo 'kura listening on 127.0.0.1:4243'; exec sleep 60",
    );
    let data = tempfile::tempdir().unwrap();
    let server =
        retry_busy(|| kura_testkit::KuraOptions::new(&bin, Durability::None).start_on(data.path()))
            .unwrap();
    assert_eq!(server.data_dir(), data.path());
    drop(server);
    assert!(
        data.path().exists(),
        "an existing data dir is left in place"
    );
}
