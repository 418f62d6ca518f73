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

/// systemd's `Type=notify`: `READY=1` once Kura listens (after recovery), `STOPPING=1`
/// when SIGTERM arrives, then a clean exit; and `--log-format json` writes one JSON
/// object a line.
#[test]
fn systemd_hears_ready_and_stopping_and_json_logs_parse() {
    use std::os::unix::net::UnixDatagram;
    use std::process::{Command, Stdio};

    let dir = tempfile::Builder::new()
        .prefix("notify-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("temp dir: {e}"));
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap_or_else(|e| panic!("bind: {e}"));
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("timeout: {e}"));
    let mut child = Command::new(kura_bin(env!("CARGO_BIN_EXE_kura")))
        .args([
            "-p",
            "0",
            "--sql-port",
            "off",
            "--log-format",
            "json",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .env("NOTIFY_SOCKET", &socket_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let mut stdout = BufReader::new(child.stdout.take().unwrap_or_else(|| panic!("stdout")));
    let mut line = String::new();
    stdout
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("read: {e}"));
    assert!(line.starts_with("kura listening on "), "{line:?}");
    let mut message = [0u8; 256];
    let n = socket
        .recv(&mut message)
        .unwrap_or_else(|e| panic!("no READY=1: {e}"));
    assert_eq!(String::from_utf8_lossy(&message[..n]).trim(), "READY=1");

    let killed = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap_or_else(|e| panic!("kill: {e}"));
    assert!(killed.success());
    let n = socket
        .recv(&mut message)
        .unwrap_or_else(|e| panic!("no STOPPING=1: {e}"));
    assert_eq!(String::from_utf8_lossy(&message[..n]).trim(), "STOPPING=1");
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("wait: {e}"));
    assert!(output.status.success(), "exit {}", output.status);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"message\":\"shut down cleanly\"")),
        "{stderr}"
    );
    for line in lines {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line: {line:?}: {e}"));
        assert!(event["timestamp"].is_string(), "{line}");
        assert!(event["level"].is_string(), "{line}");
        assert!(event["fields"]["message"].is_string(), "{line}");
    }
}
