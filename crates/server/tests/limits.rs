//! Per-connection limits, as memcached's flags set them, with their counters: the
//! idle timeout (`--idle-timeout`, memcached's idle_timeout, `idle_kicks`) and the
//! requests a connection runs from one read before its worker's other connections
//! get a turn (`-R`, `conn_yields`). The connection limit (`-c`,
//! `rejected_connections`) is in `connections.rs`.
#![allow(clippy::expect_used)]

use std::time::{Duration, Instant};

use kura_testkit::{kura_bin, Client, Durability, KuraServer};

fn stat(client: &mut Client, name: &str) -> u64 {
    let stats = client.request(b"stats\r\n", b"END\r\n").expect("stats");
    let stats = String::from_utf8_lossy(&stats).into_owned();
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
}

#[test]
fn a_silent_connection_is_closed_after_the_idle_timeout_and_a_talking_one_is_not() {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = KuraServer::start(&bin, Durability::Fsync, &["--idle-timeout", "3"]).expect("kura");
    let mut silent = Client::connect(kura.addr()).expect("connect");
    let mut talking = Client::connect(kura.addr()).expect("connect");
    // Talking every 100 ms for longer than the timeout: on a loaded machine a gap
    // would have to stretch thirty-fold to look idle.
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(4500) {
        let reply = talking
            .request(b"mn\r\n", b"MN\r\n")
            .expect("a talking connection stays");
        assert_eq!(reply, b"MN\r\n");
        std::thread::sleep(Duration::from_millis(100));
    }
    let closed = silent
        .read_to_eof()
        .expect("the silent connection is closed");
    assert!(closed.is_empty(), "{closed:?}");
    assert!(stat(&mut talking, "idle_kicks") >= 1);
    let settings = talking
        .request(b"stats settings\r\n", b"END\r\n")
        .expect("settings");
    assert!(String::from_utf8_lossy(&settings).contains("STAT idle_timeout 3\r\n"));
}

#[test]
fn a_long_pipeline_yields_to_other_connections_and_loses_nothing() {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    let kura = KuraServer::start(&bin, Durability::Fsync, &["-R", "5"]).expect("kura");
    let mut client = Client::connect(kura.addr()).expect("connect");
    let mut pipeline = Vec::new();
    for i in 0..50 {
        pipeline.extend_from_slice(format!("set k{i} 0 0 1 noreply\r\n{}\r\n", i % 10).as_bytes());
    }
    for i in 0..50 {
        pipeline.extend_from_slice(format!("get k{i}\r\n").as_bytes());
    }
    pipeline.extend_from_slice(b"mn\r\n");
    let reply = client.request(&pipeline, b"MN\r\n").expect("pipeline");
    let mut expected = Vec::new();
    for i in 0..50 {
        expected.extend_from_slice(format!("VALUE k{i} 0 1\r\n{}\r\nEND\r\n", i % 10).as_bytes());
    }
    expected.extend_from_slice(b"MN\r\n");
    assert_eq!(
        String::from_utf8_lossy(&reply),
        String::from_utf8_lossy(&expected)
    );
    // 101 requests at 5 a turn: 20 yields if they arrive in one read, fewer if TCP
    // splits them.
    let yields = stat(&mut client, "conn_yields");
    assert!((1..=20).contains(&yields), "conn_yields {yields}");
}
