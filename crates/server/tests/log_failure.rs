//! A log write that fails reaches clients as a `SERVER_ERROR` and a closed connection,
//! never as a false `STORED`; after it the server refuses changes (what the log holds
//! after a failed write is unknown) and still serves what it had acknowledged.
//!
//! The failure is a full disk: the data directory is a 3 MiB tmpfs mounted for the
//! test (root, as the network-namespace tests). What is tested is the error path, not
//! durability, so a tmpfs, whose fsync does nothing, serves.
#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use kura_testkit::{kura_bin, Client, Durability, KuraOptions};

/// A tmpfs mounted at a directory of its own, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::Builder::new()
            .prefix("kura-full-disk-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("a mount point");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("running mount");
        assert!(status.success(), "mount -t tmpfs needs root");
        SmallDisk { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn reply_line(client: &mut Client) -> String {
    String::from_utf8_lossy(&client.read_until_suffix(b"\r\n").expect("a reply")).into_owned()
}

#[test]
fn a_full_disk_is_a_server_error_and_a_closed_connection_never_a_stored() {
    let disk = SmallDisk::mount("3m");
    let data: PathBuf = disk.path().join("data");
    let kura = KuraOptions::new(kura_bin(env!("CARGO_BIN_EXE_kura")), Durability::Fsync)
        .arg("--segment-size-mib")
        .arg("1")
        .arg("--checkpoint-secs")
        .arg("0")
        .start_on(&data)
        .expect("kura on the small disk");
    let mut c = Client::connect(kura.addr()).expect("connect");
    let value = vec![b'v'; 64 << 10];
    let mut stored = Vec::new();
    let mut refusal = None;
    // 100 values of 64 KiB cannot fit in 3 MiB.
    for i in 0..100 {
        let key = format!("k{i}");
        let mut request = format!("set {key} 7 0 {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        c.send(&request).expect("send");
        let reply = reply_line(&mut c);
        if reply == "STORED\r\n" {
            stored.push(key);
        } else {
            refusal = Some(reply);
            break;
        }
    }
    assert_eq!(
        refusal.as_deref(),
        Some("SERVER_ERROR log write failed; change not stored\r\n"),
        "stored {} values; kura's log:\n{}",
        stored.len(),
        kura.log()
    );
    assert!(!stored.is_empty(), "nothing fitted on the disk");
    assert_eq!(
        c.read_to_eof().expect("the connection closes"),
        b"",
        "nothing follows the error"
    );

    // A new connection: what was acknowledged is served; changes are refused.
    let mut d = Client::connect(kura.addr()).expect("connect");
    let stats =
        String::from_utf8_lossy(&d.request(b"stats\r\n", b"END\r\n").expect("stats")).into_owned();
    assert!(stats.contains("STAT store_poisoned 1\r\n"), "{stats}");
    for key in &stored {
        let reply = d
            .request(format!("mg {key} f s\r\n").as_bytes(), b"\r\n")
            .expect("mg");
        assert_eq!(
            String::from_utf8_lossy(&reply),
            format!("HD f7 s{}\r\n", value.len()),
            "{key}"
        );
    }
    let refused = d
        .request(b"set after 0 0 1\r\nx\r\n", b"\r\n")
        .expect("a reply to a set");
    assert!(
        refused.starts_with(b"SERVER_ERROR "),
        "a change after the failure: {}",
        String::from_utf8_lossy(&refused)
    );
    drop(kura);
}
