//! Thousands of concurrent connections, each served; and `-c` enforced as memcached
//! enforces it.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use kura_testkit::{kura_bin, Durability, KuraServer};

const CONNECTIONS: usize = 2000;

fn line(reader: &mut BufReader<TcpStream>) -> String {
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("read: {e}"));
    line
}

#[test]
fn two_thousand_connections_are_served_at_once() {
    let server = KuraServer::start(
        kura_bin(env!("CARGO_BIN_EXE_kura")),
        Durability::Interval,
        &["-c", "4096"],
    )
    .unwrap_or_else(|e| panic!("start: {e}"));
    let mut conns: Vec<(TcpStream, BufReader<TcpStream>)> = (0..CONNECTIONS)
        .map(|_| {
            let stream =
                TcpStream::connect(server.addr()).unwrap_or_else(|e| panic!("connect: {e}"));
            stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
            let reader =
                BufReader::new(stream.try_clone().unwrap_or_else(|e| panic!("clone: {e}")));
            (stream, reader)
        })
        .collect();
    // Every connection has a request in flight before any reply is read.
    for (i, (stream, _)) in conns.iter_mut().enumerate() {
        let request = format!("set k{i} {i} 0 1\r\nx\r\n");
        stream
            .write_all(request.as_bytes())
            .unwrap_or_else(|e| panic!("send: {e}"));
    }
    for (_, reader) in conns.iter_mut() {
        assert_eq!(line(reader), "STORED\r\n");
    }
    for (i, (stream, reader)) in conns.iter_mut().enumerate().rev() {
        stream
            .write_all(format!("get k{i}\r\n").as_bytes())
            .unwrap_or_else(|e| panic!("send: {e}"));
        assert_eq!(line(reader), format!("VALUE k{i} {i} 1\r\n"));
        assert_eq!(line(reader), "x\r\n");
        assert_eq!(line(reader), "END\r\n");
    }
    let (stream, reader) = &mut conns[0];
    stream
        .write_all(b"stats\r\n")
        .unwrap_or_else(|e| panic!("send: {e}"));
    let mut open = None;
    loop {
        let stat = line(reader);
        if stat == "END\r\n" {
            break;
        }
        if let Some(n) = stat.strip_prefix("STAT curr_connections ") {
            open = n.trim().parse::<usize>().ok();
        }
    }
    assert_eq!(open, Some(CONNECTIONS), "stats curr_connections");
}

#[test]
fn connections_past_the_limit_are_refused_as_memcached_refuses_them() {
    let server = KuraServer::start(
        kura_bin(env!("CARGO_BIN_EXE_kura")),
        Durability::Interval,
        &["-c", "8"],
    )
    .unwrap_or_else(|e| panic!("start: {e}"));
    let mut held = Vec::new();
    for _ in 0..8 {
        let stream = TcpStream::connect(server.addr()).unwrap_or_else(|e| panic!("connect: {e}"));
        stream.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let mut reader =
            BufReader::new(stream.try_clone().unwrap_or_else(|e| panic!("clone: {e}")));
        let mut writer = stream;
        // A round trip proves the connection was accepted and counted.
        writer
            .write_all(b"mn\r\n")
            .unwrap_or_else(|e| panic!("send: {e}"));
        assert_eq!(line(&mut reader), "MN\r\n");
        held.push((writer, reader));
    }
    let extra = TcpStream::connect(server.addr()).unwrap_or_else(|e| panic!("connect: {e}"));
    extra.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut reader = BufReader::new(extra);
    assert_eq!(line(&mut reader), "ERROR Too many open connections\r\n");
    assert_eq!(line(&mut reader), "", "the refused connection stays open");
    // Closing one makes room again, as soon as the server has seen the close.
    drop(held.pop());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let again = TcpStream::connect(server.addr()).unwrap_or_else(|e| panic!("connect: {e}"));
        again.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let mut reader = BufReader::new(again.try_clone().unwrap_or_else(|e| panic!("clone: {e}")));
        let mut writer = again;
        // A refused connection may already be closed: the write can fail.
        let _ = writer.write_all(b"mn\r\n");
        match line(&mut reader).as_str() {
            "MN\r\n" => break,
            "ERROR Too many open connections\r\n" if std::time::Instant::now() < deadline => {
                std::thread::yield_now();
            }
            other => panic!("after a close, a new connection got {other:?}"),
        }
    }
}
