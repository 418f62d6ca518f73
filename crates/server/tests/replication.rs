//! Replication between real `kura` processes: a replica follows its primary through a
//! proxy the test controls (so it can cut the link, and point it at a primary that
//! restarted on another port), and the replica's contents are compared with the
//! primary's: every key's value, flags, CAS and expiry.
//!
//! What is shown: a replica converges under a steady writer while its link is cut
//! every two seconds, with partial synchronisations only; a replica stopped while the
//! primary writes and compacts past its position gets one full synchronisation, and
//! deleted keys stay gone; a replica SIGKILLed mid-stream applies nothing twice
//! (appends); a primary SIGKILLed and restarted is followed on from where the replica
//! was; a replica refuses changes, naming its primary, and serves reads; a primary
//! stopped by SIGTERM tells its replica so, though its stream was lingering.

mod replicas;

use std::time::{Duration, Instant};

use replicas::*;

#[test]
fn a_replica_converges_under_a_writer_with_its_link_cut_every_two_seconds() {
    let (pdir, rdir) = (data_dir("repl-primary-"), data_dir("repl-replica-"));
    let primary = options()
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let proxy = Proxy::start(primary.addr());
    let replica = replica_of(&proxy, rdir.path());
    let mut c = client(&primary);
    start_writing(&mut c);
    let mut keys = Vec::new();
    let started = Instant::now();
    let mut cuts = 0;
    let mut round = 0;
    while started.elapsed() < Duration::from_secs(9) {
        write_round(&mut c, round, &mut keys);
        round += 1;
        if started.elapsed() >= Duration::from_secs(2 * (cuts + 1)) {
            proxy.cut();
            cuts += 1;
        }
    }
    caught_up(&primary, &replica);
    assert_eq!(digest(&replica, &keys), digest(&primary, &keys));
    assert!(cuts >= 3, "the link was cut {cuts} times");
    assert_eq!(
        stat(&replica, "full_syncs"),
        1,
        "only the first copy is full"
    );
    assert!(
        stat(&replica, "partial_syncs") >= cuts,
        "{:?}",
        replication_stats(&replica)
    );
    // A replica serves reads and refuses changes, naming its primary.
    let mut r = client(&replica);
    // The last round deleted k{(round - 1) % 50}; k{round % 50} it set (flags = its
    // number) and left.
    let kept = round % 50;
    let got = request(&mut r, format!("get k{kept}\r\n").as_bytes(), b"END\r\n");
    assert!(got.starts_with(&format!("VALUE k{kept} {kept} ")), "{got}");
    let refused = request(&mut r, b"set k1 0 0 1\r\nx\r\n", b"\r\n");
    assert_eq!(
        refused,
        format!(
            "SERVER_ERROR this server is a replica of {}; send changes there\r\n",
            proxy.addr
        )
    );
    let refused = request(&mut r, b"ms k1 1 T0\r\nx\r\n", b"\r\n");
    assert!(
        refused.starts_with("SERVER_ERROR this server is a replica"),
        "{refused}"
    );
    assert_eq!(
        request(&mut r, b"flush_all\r\n", b"\r\n"),
        refused.replace("\r\n", "") + "\r\n"
    );
}

#[test]
fn a_replica_behind_compaction_gets_one_full_copy_and_a_killed_one_applies_nothing_twice() {
    let (pdir, rdir) = (data_dir("repl-primary-"), data_dir("repl-replica-"));
    let primary = options()
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let proxy = Proxy::start(primary.addr());
    let mut replica = replica_of(&proxy, rdir.path());
    let mut c = client(&primary);
    start_writing(&mut c);
    let mut keys = Vec::new();
    for round in 0..20 {
        write_round(&mut c, round, &mut keys);
    }
    caught_up(&primary, &replica);
    let position = stat(&replica, "log_lsn");
    replica.kill().unwrap_or_else(|e| panic!("kill: {e}"));
    // Away: the primary overwrites its keys until compaction has removed the
    // segment the replica's position is in (the log's oldest start is past it).
    let mut round = 20;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for _ in 0..40 {
            write_round(&mut c, round, &mut keys);
            round += 1;
        }
        let stats = request(&mut c, b"stats\r\n", b"END\r\n");
        let compactions: u64 = stats
            .lines()
            .find_map(|l| l.strip_prefix("STAT compactions "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let log_bytes: u64 = stats
            .lines()
            .find_map(|l| l.strip_prefix("STAT log_bytes "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(u64::MAX);
        // The log now holds less than was written since the position: some of it,
        // the position's segment first, was compacted away.
        if compactions > 2 && log_bytes < stat(&primary, "log_lsn") - position {
            break;
        }
        assert!(Instant::now() < deadline, "no compaction: {stats}");
    }
    request(&mut c, b"delete k7\r\n", b"\r\n");
    replica.restart().unwrap_or_else(|e| panic!("restart: {e}"));
    caught_up(&primary, &replica);
    assert_eq!(
        stat(&replica, "full_syncs"),
        1,
        "{:?}",
        replication_stats(&replica)
    );
    assert_eq!(digest(&replica, &keys), digest(&primary, &keys));
    assert_eq!(
        request(&mut client(&replica), b"get k7\r\n", b"END\r\n"),
        "END\r\n"
    );
    // SIGKILLed mid-stream, again and again: appends and increments land once each.
    for _ in 0..3 {
        for _ in 0..20 {
            write_round(&mut c, round, &mut keys);
            round += 1;
        }
        replica.kill().unwrap_or_else(|e| panic!("kill: {e}"));
        replica.restart().unwrap_or_else(|e| panic!("restart: {e}"));
    }
    caught_up(&primary, &replica);
    assert_eq!(digest(&replica, &keys), digest(&primary, &keys));
}

#[test]
fn a_replica_goes_on_from_its_position_after_its_primary_is_killed_and_restarted() {
    let (pdir, rdir) = (data_dir("repl-primary-"), data_dir("repl-replica-"));
    let mut primary = options()
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let proxy = Proxy::start(primary.addr());
    let replica = replica_of(&proxy, rdir.path());
    let mut keys = Vec::new();
    let mut round = 0;
    for kill in 0..3 {
        let mut c = client(&primary);
        if kill == 0 {
            start_writing(&mut c);
        }
        for _ in 0..30 {
            write_round(&mut c, round, &mut keys);
            round += 1;
        }
        primary.kill().unwrap_or_else(|e| panic!("kill: {e}"));
        proxy.cut();
        primary.restart().unwrap_or_else(|e| panic!("restart: {e}"));
        proxy.point_at(primary.addr());
    }
    caught_up(&primary, &replica);
    assert_eq!(digest(&replica, &keys), digest(&primary, &keys));
    assert_eq!(
        stat(&replica, "full_syncs"),
        1,
        "{:?}",
        replication_stats(&replica)
    );
    assert!(stat(&replica, "partial_syncs") >= 1);
}

#[test]
fn a_replica_further_behind_than_the_backlog_is_cut_off_and_gets_a_full_copy() {
    let (pdir, rdir) = (data_dir("backlog-primary-"), data_dir("backlog-replica-"));
    let primary = options()
        .arg("--replica-backlog-mib")
        .arg("1")
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    // A slow link: each 64 KiB it carries is held 50 ms (about 1.3 MB/s).
    let proxy = Proxy::start_with_delay(primary.addr(), Duration::from_millis(50));
    let replica = replica_of(&proxy, rdir.path());
    let mut c = client(&primary);
    start_writing(&mut c);
    caught_up(&primary, &replica);
    assert_eq!(stat(&replica, "full_syncs"), 1);
    let mut keys = Vec::new();
    let value = "b".repeat(16 << 10);
    let deadline = Instant::now() + Duration::from_secs(60);
    // Writes faster than the link carries, until the primary ends the stream.
    for n in 0.. {
        if stat(&primary, "backlog_drops") > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica was never cut off: {:?}",
            replication_stats(&primary)
        );
        for i in 0..50 {
            let key = format!("big{}", (n * 50 + i) % 400);
            request(
                &mut c,
                format!("set {key} {n} 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
                b"STORED\r\n",
            );
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    // It comes back further behind than the backlog: a full copy, not a partial one.
    caught_up(&primary, &replica);
    assert_eq!(digest(&replica, &keys), digest(&primary, &keys));
    assert!(
        stat(&replica, "full_syncs") >= 2,
        "{:?}",
        replication_stats(&replica)
    );
    let settings = request(&mut c, b"stats settings\r\n", b"END\r\n");
    assert!(
        settings.contains("STAT replica_backlog_mib 1\r\n"),
        "{settings}"
    );
}

#[test]
fn a_primary_stopped_while_its_stream_lingers_tells_its_replica_why() {
    let (pdir, rdir) = (data_dir("bye-primary-"), data_dir("bye-replica-"));
    let mut primary = options()
        .arg("--replica-linger-ms")
        .arg("1000")
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let proxy = Proxy::start(primary.addr());
    // `-v`: the replica logs each end of its link with the reason.
    let replica = options()
        .arg("-v")
        .arg("--replica-of")
        .arg(proxy.addr.to_string())
        .start_on(rdir.path())
        .unwrap_or_else(|e| panic!("start the replica: {e}"));
    let mut c = client(&primary);
    let mut keys = Vec::new();
    write_round(&mut c, 0, &mut keys);
    caught_up(&primary, &replica);
    // The stream sends this round and then lingers for a second, into the stop.
    write_round(&mut c, 1, &mut keys);
    drop(c);
    let status = primary
        .terminate()
        .unwrap_or_else(|e| panic!("terminate: {e}"));
    assert!(status.success(), "{status}");
    let log = replica.wait_for_log("following ", HUNG_AFTER);
    let ended = log
        .lines()
        .find(|l| l.contains("following "))
        .unwrap_or_else(|| panic!("the link did not end:\n{log}"));
    assert!(
        ended.ends_with("the primary ended: the primary is shutting down"),
        "{ended}"
    );
}

/// A replica refuses every change before it looks at the data, in every protocol: a
/// `cas` with a stale CAS, an `ms … C`, a delete or touch of a missing key, an `add`
/// of a key it holds all get the replica's refusal, never the `EXISTS`, `EX`,
/// `NOT_FOUND` or `NOT_STORED` the data alone would give (which the primary might not).
#[test]
fn a_replica_refuses_every_change_before_it_looks_at_the_data() {
    let (pdir, rdir) = (data_dir("ro-primary-"), data_dir("ro-replica-"));
    let primary = options()
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let proxy = Proxy::start(primary.addr());
    let replica = replica_of(&proxy, rdir.path());
    let mut p = client(&primary);
    assert_eq!(
        request(&mut p, b"set k 0 0 1\r\nv\r\n", b"\r\n"),
        "STORED\r\n"
    );
    caught_up(&primary, &replica);
    let refusal = format!(
        "SERVER_ERROR this server is a replica of {}; send changes there\r\n",
        proxy.addr
    );
    let mut r = client(&replica);
    for change in [
        "cas k 0 0 1 999\r\nx\r\n",
        "cas missing 0 0 1 1\r\nx\r\n",
        "add k 0 0 1\r\nx\r\n",
        "replace missing 0 0 1\r\nx\r\n",
        "append missing 0 0 1\r\nx\r\n",
        "delete missing\r\n",
        "touch missing 10\r\n",
        "incr missing 1\r\n",
        "gat 10 missing\r\n",
        "ms k 1 C999\r\nx\r\n",
        "ms missing 1 MR\r\nx\r\n",
        "md missing\r\n",
        "md k C999\r\n",
        "ma missing\r\n",
        "mg missing T10 v\r\n",
    ] {
        assert_eq!(
            request(&mut r, change.as_bytes(), b"\r\n"),
            refusal,
            "{change:?}"
        );
    }
    // The data is the primary's, untouched; reads are served.
    assert_eq!(
        request(&mut r, b"get k\r\n", b"END\r\n"),
        "VALUE k 0 1\r\nv\r\nEND\r\n"
    );
    // The binary protocol: status 0x84 with the same reason, for the same changes.
    let reason = refusal
        .trim_start_matches("SERVER_ERROR ")
        .trim_end()
        .to_string();
    for change in [
        "set key=k value=x cas=999",
        "add key=k value=x",
        "replace key=missing value=x",
        "delete key=missing",
        "delete key=k cas=999",
        "incr key=missing exptime=0xffffffff",
        "touch key=missing exptime=10",
        "appendq key=missing value=x",
    ] {
        let packet = kura_testkit::binary::compose(change).unwrap_or_else(|e| panic!("{e}"));
        let mut b = client(&replica);
        b.send(&[packet, kura_testkit::binary::marker()].concat())
            .unwrap_or_else(|e| panic!("{change}: {e}"));
        let reply = b
            .read_reply_until(kura_testkit::binary::complete, HUNG_AFTER)
            .unwrap_or_else(|e| panic!("{change}: {e}"));
        let shown = kura_testkit::binary::render(&reply.bytes);
        assert!(
            shown[0].contains("status=0x84") && shown[0].contains(&reason),
            "{change}: {shown:?}"
        );
    }
}
