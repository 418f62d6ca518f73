//! `failover to <host> <port> [timeout ms]` on a standalone primary (Redis's `FAILOVER
//! TO`), between real `kura` processes: under writers, the target becomes primary
//! with every acknowledged write, the old primary follows it, and so does the old
//! primary's other replica, told to by the old primary; a target that cannot catch
//! up leaves everything as it was, and writes resume.

#![allow(clippy::expect_used)]

mod replicas;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kura_testkit::KuraServer;
use replicas::*;

fn set(c: &mut kura_testkit::Client, key: &str, value: &str) -> String {
    request(
        c,
        format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
        b"\r\n",
    )
}

/// Waits until `server`'s last failover has ended; how it ended.
fn failover_ended(server: &KuraServer) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stats = replication_stats(server);
        if stats.get("failover_state").map(String::as_str) == Some("no-failover") {
            if let Some(last) = stats.get("last_failover").filter(|l| *l != "-") {
                return last.clone();
            }
        }
        assert!(Instant::now() < deadline, "no end: {stats:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_primary_hands_over_to_its_replica_under_writers_and_loses_nothing() {
    let (pdir, rdir, odir) = (
        data_dir("failover-p-"),
        data_dir("failover-r-"),
        data_dir("failover-o-"),
    );
    let sync = |o: kura_testkit::KuraOptions| o.arg("--min-sync-replicas").arg("1");
    let primary = sync(options()).start_on(pdir.path()).expect("primary");
    let replica = sync(options())
        .arg("--replica-of")
        .arg(primary.addr().to_string())
        .start_on(rdir.path())
        .expect("replica");
    // Another replica of the primary, which the handover moves to the target.
    let other = options()
        .arg("--replica-of")
        .arg(primary.addr().to_string())
        .start_on(odir.path())
        .expect("other replica");
    caught_up(&primary, &replica);
    caught_up(&primary, &other);

    // A target that is not there: nothing changes, and writes resume.
    let mut c = client(&primary);
    assert_eq!(
        request(&mut c, b"failover to 127.0.0.1 1 300\r\n", b"\r\n"),
        "OK\r\n"
    );
    let ended = failover_ended(&primary);
    assert!(ended.contains("failed"), "{ended}");
    assert_eq!(set(&mut c, "after-failed", "v"), "STORED\r\n");
    assert_eq!(
        request(&mut c, b"failover to 127.0.0.1\r\n", b"\r\n"),
        "CLIENT_ERROR usage: failover to <host> <port> [timeout ms]\r\n"
    );

    // Writers that, refused, write to whomever the node they used names primary.
    let addrs = [primary.addr(), replica.addr()];
    let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (acked, stop) = (Arc::clone(&acked), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut at = addrs[0];
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let (key, value) = (format!("f{w}-{i}"), format!("v{i}"));
                    let give_up = Instant::now() + Duration::from_secs(30);
                    loop {
                        let mut c = kura_testkit::Client::connect(at).expect("connect");
                        let reply = set(&mut c, &key, &value);
                        if reply == "STORED\r\n" {
                            break;
                        }
                        assert!(Instant::now() < give_up, "{key}: {reply:?}");
                        std::thread::sleep(Duration::from_millis(5));
                        let stats = request(&mut c, b"stats replication\r\n", b"END\r\n");
                        let named = stats
                            .lines()
                            .find_map(|l| l.strip_prefix("STAT primary "))
                            .and_then(|a| a.parse().ok());
                        if let Some(named) = named.filter(|a| addrs.contains(a)) {
                            at = named;
                        }
                    }
                    acked.lock().expect("acked").insert(key, value);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    // The other replica streams by now (its first copy was a full one).
    let streaming = replication_stats(&other);
    assert_eq!(
        streaming.get("primary_link").map(String::as_str),
        Some("up")
    );
    let full_syncs = streaming.get("full_syncs").cloned();
    let target = replica.addr();
    let command = format!("failover to {} {} 5000\r\n", target.ip(), target.port());
    assert_eq!(request(&mut c, command.as_bytes(), b"\r\n"), "OK\r\n");
    let ended = failover_ended(&primary);
    assert!(
        ended.starts_with(&format!("to {target} in ")),
        "{ended}\n{}\n----\n{}",
        primary.log(),
        replica.log()
    );
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    let acked = acked.lock().expect("acked").clone();
    eprintln!("failover {ended}; {} writes acknowledged", acked.len());
    assert_eq!(
        replication_stats(&replica).get("role").map(String::as_str),
        Some("primary")
    );
    let stats = replication_stats(&primary);
    assert_eq!(stats.get("role").map(String::as_str), Some("replica"));
    assert_eq!(stats.get("primary"), Some(&target.to_string()));
    caught_up(&replica, &primary);
    let mut keys: Vec<String> = acked.keys().cloned().collect();
    keys.push("after-failed".to_string());
    let on_new = digest(&replica, &keys);
    for (key, value) in &acked {
        assert!(
            on_new[key].ends_with(&format!(" {value}\r\n")),
            "acknowledged {key} on the new primary: {:?}",
            on_new[key]
        );
    }
    assert_eq!(
        digest(&primary, &keys),
        on_new,
        "the old primary holds the same"
    );
    // The other replica was told to follow the target, goes on from its position
    // there, and remembers it for a restart.
    let stats = replication_stats(&other);
    assert_eq!(
        stats.get("primary"),
        Some(&target.to_string()),
        "{}",
        other.log()
    );
    assert_eq!(stats.get("full_syncs"), full_syncs.as_ref(), "no full copy");
    caught_up(&replica, &other);
    assert_eq!(
        digest(&other, &keys),
        on_new,
        "the other replica holds the same"
    );
    let remembered = std::fs::read_to_string(other.data_dir().join("replica-of"))
        .expect("the other replica's replica-of file");
    assert_eq!(
        remembered.trim(),
        target.to_string(),
        "remembered for a restart"
    );
}
