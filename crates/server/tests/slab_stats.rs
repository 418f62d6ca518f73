//! `stats slabs`' `total_malloced`, which memcached clients' test suites read:
//! memcached's is the slab pages it allocated for items, and replacing expired items
//! with items of the same size leaves it where it was. Kura's is what its index and
//! value cache hold (`docs/protocol.md` says where the two differ): back where it was
//! once the expired items are replaced.
#![allow(clippy::expect_used)]

use std::time::{Duration, Instant};

use kura_testkit::{kura_bin, Client, Durability, KuraServer};

fn request(c: &mut Client, bytes: &[u8], suffix: &[u8]) -> String {
    c.send(bytes).expect("send");
    let reply = c
        .read_reply_until_suffix(suffix, Duration::from_secs(30))
        .expect("reply");
    String::from_utf8_lossy(&reply.bytes).into_owned()
}

fn stat(c: &mut Client, command: &str, name: &str) -> u64 {
    let reply = request(c, format!("{command}\r\n").as_bytes(), b"END\r\n");
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {reply:?}"))
}

/// `total_malloced`, checked against the index and value cache of `stats`.
fn total_malloced(c: &mut Client) -> u64 {
    let total = stat(c, "stats slabs", "total_malloced");
    let held = stat(c, "stats", "index_bytes") + stat(c, "stats", "value_cache_bytes");
    assert_eq!(total, held);
    total
}

#[test]
fn replacing_an_expired_item_with_one_of_its_size_leaves_total_malloced() {
    let server = KuraServer::start(
        kura_bin(env!("CARGO_BIN_EXE_kura")),
        Durability::Interval,
        &[],
    )
    .expect("start kura");
    let mut c = Client::connect(server.addr()).expect("connect");
    for n in 0..100 {
        let set = format!("set k{n} 0 1 10\r\n0123456789\r\n");
        assert_eq!(request(&mut c, set.as_bytes(), b"\r\n"), "STORED\r\n");
    }
    let before = total_malloced(&mut c);
    assert!(before > 0);
    // Wait for the server's clock to pass the items' expiry.
    let deadline = Instant::now() + Duration::from_secs(30);
    while request(&mut c, b"mg k99 v\r\n", b"\r\n") != "EN\r\n" {
        assert!(Instant::now() < deadline, "k99 never expired");
        std::thread::sleep(Duration::from_millis(50));
    }
    for n in 0..100 {
        let set = format!("set k{n} 0 0 10\r\nabcdefghij\r\n");
        assert_eq!(request(&mut c, set.as_bytes(), b"\r\n"), "STORED\r\n");
    }
    assert_eq!(total_malloced(&mut c), before);
}
