//! SIGTERM shuts Kura down gracefully: it finishes the replies in hand, writes and
//! syncs the log, and exits 0; everything it stored is there after a restart.
//!
//! `--durability none` with a very long fsync interval makes the test mean something:
//! nothing forces the log to disk on the way except the shutdown itself.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use kura_testkit::{kura_bin, Durability, KuraOptions};

const KEYS: usize = 2000;

#[test]
fn sigterm_writes_everything_and_exits_cleanly() {
    let base = tempfile::Builder::new()
        .prefix("shutdown-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("temp dir: {e}"));
    let options = KuraOptions::new(kura_bin(env!("CARGO_BIN_EXE_kura")), Durability::None)
        .arg("--fsync-interval-ms")
        .arg("3600000");
    let mut server = options
        .start_on(base.path())
        .unwrap_or_else(|e| panic!("start: {e}"));

    // One pipelined burst of noreply sets, then mn to know they were all read.
    let stream = TcpStream::connect(server.addr()).unwrap_or_else(|e| panic!("connect: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let mut writer = stream.try_clone().unwrap_or_else(|e| panic!("clone: {e}"));
    let mut reader = BufReader::new(stream);
    let mut burst = Vec::new();
    for i in 0..KEYS {
        let value = format!("value-{i}");
        burst.extend_from_slice(
            format!("set k{i} {i} 0 {} noreply\r\n{value}\r\n", value.len()).as_bytes(),
        );
    }
    burst.extend_from_slice(b"mn\r\n");
    writer
        .write_all(&burst)
        .unwrap_or_else(|e| panic!("send: {e}"));
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert_eq!(line, "MN\r\n");

    let status = server
        .terminate()
        .unwrap_or_else(|e| panic!("terminate: {e}"));
    assert!(
        status.success(),
        "kura exited with {status} after SIGTERM:\n{}",
        server.log()
    );
    assert!(
        server.log().contains("shut down cleanly"),
        "no clean shutdown:\n{}",
        server.log()
    );

    server
        .restart()
        .unwrap_or_else(|e| panic!("restart: {e}\n{}", server.log()));
    let stream = TcpStream::connect(server.addr()).unwrap_or_else(|e| panic!("connect: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let mut writer = stream.try_clone().unwrap_or_else(|e| panic!("clone: {e}"));
    let mut reader = BufReader::new(stream);
    for i in (0..KEYS).step_by(97).chain([KEYS - 1]) {
        writer
            .write_all(format!("get k{i}\r\n").as_bytes())
            .unwrap_or_else(|e| panic!("send: {e}"));
        let mut header = String::new();
        reader
            .read_line(&mut header)
            .unwrap_or_else(|e| panic!("read: {e}"));
        let value = format!("value-{i}");
        assert_eq!(
            header,
            format!("VALUE k{i} {i} {}\r\n", value.len()),
            "k{i} lost by the shutdown"
        );
        let mut data = String::new();
        reader
            .read_line(&mut data)
            .unwrap_or_else(|e| panic!("read: {e}"));
        assert_eq!(data, format!("{value}\r\n"));
        let mut end = String::new();
        reader
            .read_line(&mut end)
            .unwrap_or_else(|e| panic!("read: {e}"));
        assert_eq!(end, "END\r\n");
    }
}
