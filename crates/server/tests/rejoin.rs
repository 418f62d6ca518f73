//! An old primary that comes back after a replica was promoted: the new primary fences
//! it (`fence`), it follows the new primary, cuts the records the new history never
//! had, and converges by a partial synchronisation. Once after a SIGKILL and restart,
//! with writers running through the promotion; once across a network partition,
//! healed, between network namespaces this test creates.
#![allow(clippy::expect_used)]

mod replicas;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_testkit::{Client, KuraServer, NetNamespace, ReplyEnd};
use replicas::{
    caught_up, client, data_dir, digest, options, replication_stats, request, start_writing, stat,
    write_round, Proxy, HUNG_AFTER,
};

/// Waits until `server` is a replica of `primary`.
fn follows(server: &KuraServer, primary: &KuraServer) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stats = replication_stats(server);
        if stats.get("role").map(String::as_str) == Some("replica")
            && stats.get("primary") == Some(&primary.addr().to_string())
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the old primary was never fenced: {stats:?}\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of `key` on `server`, or None.
fn value(server: &KuraServer, key: &str) -> Option<String> {
    let reply = request(
        &mut client(server),
        format!("get {key}\r\n").as_bytes(),
        b"END\r\n",
    );
    let (_, rest) = reply.split_once("\r\n").filter(|_| reply != "END\r\n")?;
    Some(rest.trim_end_matches("\r\nEND\r\n").to_string())
}

/// Writes a round tagged `tag` on its own: an append to `log` and a key of its own.
/// Returns whether the server acknowledged both.
fn tagged_write(c: &mut Client, tag: &str) -> bool {
    let entry = format!("{tag},");
    let appended = request(
        c,
        format!("append log 0 0 {}\r\n{entry}\r\n", entry.len()).as_bytes(),
        b"\r\n",
    );
    let set = request(
        c,
        format!("set only-{tag} 0 0 {}\r\n{tag}\r\n", tag.len()).as_bytes(),
        b"\r\n",
    );
    appended == "STORED\r\n" && set == "STORED\r\n"
}

/// The history both nodes share: five rounds of writes on the primary, which the
/// replica has. Returns the keys written.
fn shared_rounds(primary: &KuraServer, replica: &KuraServer) -> Vec<String> {
    let mut c = client(primary);
    start_writing(&mut c);
    let mut keys = Vec::new();
    for round in 0..5 {
        write_round(&mut c, round, &mut keys);
    }
    caught_up(primary, replica);
    keys
}

/// After the old primary rejoined: it cut its log rather than take a full copy, holds
/// what the new primary holds, and none of what only it had.
fn rejoined(old: &KuraServer, new: &KuraServer, keys: &[String], only_old: &[String]) {
    follows(old, new);
    caught_up(new, old);
    let stats = replication_stats(old);
    assert_eq!(
        stats.get("full_syncs").map(String::as_str),
        Some("0"),
        "{stats:?}"
    );
    assert_eq!(
        stats.get("rewinds").map(String::as_str),
        Some("1"),
        "{stats:?}"
    );
    assert_ne!(stats.get("rewound_bytes").map(String::as_str), Some("0"));
    assert_eq!(digest(old, keys), digest(new, keys));
    for tag in only_old {
        assert_eq!(value(old, &format!("only-{tag}")), None, "{tag} was cut");
        assert_eq!(value(new, &format!("only-{tag}")), None);
        let log = value(old, "log").expect("log");
        assert!(!log.contains(&format!("{tag},")), "{tag} in {log:?}");
    }
    let refused = request(&mut client(old), b"set after 0 0 1\r\nx\r\n", b"\r\n");
    assert_eq!(
        refused,
        format!(
            "SERVER_ERROR this server is a replica of {}; send changes there\r\n",
            new.addr()
        )
    );
    assert_eq!(stat(new, "connected_replicas"), 1);
    assert!(!replication_stats(new).contains_key("fencing"));
}

#[test]
fn an_old_primary_restarted_after_a_promotion_cuts_its_log_and_follows() {
    let (old_dir, new_dir) = (data_dir("rejoin-old-"), data_dir("rejoin-new-"));
    let mut old = options()
        .start_on(old_dir.path())
        .expect("start the primary");
    let link = Proxy::start(old.addr());
    let new = replicas::replica_of(&link, new_dir.path());
    let mut keys = shared_rounds(&old, &new);
    // Writers keep going on the old primary while its replica is cut off and
    // promoted: what they write after the cut is the new history's loss.
    link.point_at("127.0.0.1:1".parse().expect("addr"));
    link.cut();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (addr, stop) = (old.addr(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut c = Client::connect(addr).expect("connect");
                let mut tags = Vec::new();
                for n in 0..10_000 {
                    if stop.load(Ordering::Acquire) && n >= 20 {
                        break;
                    }
                    let tag = format!("w{w}n{n}");
                    assert!(tagged_write(&mut c, &tag), "{tag}");
                    tags.push(tag);
                }
                tags
            })
        })
        .collect();
    assert_eq!(
        request(&mut client(&new), b"replicaof no one\r\n", b"\r\n"),
        "OK\r\n"
    );
    assert_eq!(
        replication_stats(&new).get("fencing"),
        Some(&link.addr.to_string())
    );
    stop.store(true, Ordering::Release);
    let only_old: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().expect("writer"))
        .collect();
    let mut n = client(&new);
    for round in 5..8 {
        write_round(&mut n, round, &mut keys);
    }
    // The old primary dies and comes back on its data, as a primary; the new one
    // reaches it through the same address and fences it.
    old.kill().expect("SIGKILL the old primary");
    old.restart().expect("restart the old primary");
    link.point_at(old.addr());
    rejoined(&old, &new, &keys, &only_old);
    for round in 8..10 {
        write_round(&mut n, round, &mut keys);
    }
    caught_up(&new, &old);
    assert_eq!(digest(&old, &keys), digest(&new, &keys));
}

#[test]
fn an_old_primary_cut_off_by_a_partition_is_fenced_when_it_heals() {
    let ns = NetNamespace::create("part");
    let (old_dir, new_dir) = (data_dir("partition-old-"), data_dir("partition-new-"));
    // Off the loopback, the SQL port would need passwords and the memcached port a
    // users file (or --insecure); this test needs neither.
    let old = options()
        .arg("--sql-port")
        .arg("off")
        .arg("--insecure")
        .listen(&ns.inside)
        .wrapped_in(&["ip", "netns", "exec", &ns.name])
        .start_on(old_dir.path())
        .expect("start the primary in its namespace");
    let new = options()
        .arg("--sql-port")
        .arg("off")
        .arg("--insecure")
        .listen(&ns.outside)
        .arg("--replica-of")
        .arg(old.addr().to_string())
        .start_on(new_dir.path())
        .expect("start the replica");
    let mut keys = shared_rounds(&old, &new);
    ns.link_up(false);
    // A client on the old primary's side of the partition goes on writing there.
    let addr = old.addr();
    let only_old = ns.run_inside(move || {
        let mut c = Client::connect(addr).expect("connect inside");
        let tags: Vec<String> = (0..30).map(|n| format!("p{n}")).collect();
        for tag in &tags {
            assert!(tagged_write(&mut c, tag), "{tag}");
        }
        tags
    });
    assert_eq!(
        request(&mut client(&new), b"replicaof no one\r\n", b"\r\n"),
        "OK\r\n"
    );
    let mut n = client(&new);
    for round in 5..8 {
        write_round(&mut n, round, &mut keys);
    }
    // The new primary's fencer cannot reach the old one until the link is back.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        replication_stats(&new).get("fencing"),
        Some(&old.addr().to_string())
    );
    ns.link_up(true);
    rejoined(&old, &new, &keys, &only_old);
    let reply = {
        let mut c = client(&old);
        c.send(b"mg k1 v\r\n").expect("send");
        c.read_reply_until_suffix(b"\r\n", HUNG_AFTER)
            .expect("a read on the fenced node")
    };
    assert_eq!(reply.end, ReplyEnd::Suffix, "reads are served");
}

#[test]
fn two_replicas_promoted_from_one_epoch_are_told_apart_by_its_tag() {
    let dirs = [
        data_dir("twins-primary-"),
        data_dir("twins-a-"),
        data_dir("twins-b-"),
    ];
    let mut primary = options()
        .start_on(dirs[0].path())
        .expect("start the primary");
    let start_replica = |dir: &std::path::Path| {
        options()
            .arg("--replica-of")
            .arg(primary.addr().to_string())
            .start_on(dir)
            .expect("start a replica")
    };
    let (a, b) = (start_replica(dirs[1].path()), start_replica(dirs[2].path()));
    let mut keys = shared_rounds(&primary, &a);
    caught_up(&primary, &b);
    // The primary is lost and both replicas are promoted: each begins epoch 2, at the
    // same LSN, and each takes writes of its own.
    primary.kill().expect("SIGKILL the primary");
    for node in [&a, &b] {
        assert_eq!(
            request(&mut client(node), b"replicaof no one\r\n", b"\r\n"),
            "OK\r\n"
        );
        assert_eq!(
            replication_stats(node).get("epoch").map(String::as_str),
            Some("2")
        );
    }
    let mut on_a = client(&a);
    for round in 5..7 {
        write_round(&mut on_a, round, &mut keys);
    }
    let mut on_b = client(&b);
    let only_b: Vec<String> = (0..20).map(|n| format!("b{n}")).collect();
    for tag in &only_b {
        assert!(tagged_write(&mut on_b, tag), "{tag}");
    }
    // b follows a. Same history, same epoch number, but not the same epoch: nothing
    // of b's own epoch can be kept, so b takes a full copy.
    let (host, port) = (a.addr().ip(), a.addr().port());
    assert_eq!(
        request(
            &mut client(&b),
            format!("replicaof {host} {port}\r\n").as_bytes(),
            b"\r\n"
        ),
        "OK\r\n"
    );
    caught_up(&a, &b);
    let stats = replication_stats(&b);
    assert_eq!(
        stats.get("full_syncs").map(String::as_str),
        Some("1"),
        "{stats:?}"
    );
    assert_eq!(
        stats.get("rewinds").map(String::as_str),
        Some("0"),
        "{stats:?}"
    );
    assert_eq!(digest(&b, &keys), digest(&a, &keys));
    for tag in &only_b {
        assert_eq!(
            value(&b, &format!("only-{tag}")),
            None,
            "{tag} was b's alone"
        );
    }
}
