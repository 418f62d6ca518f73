//! Growing a ring from 2 shards to 4 under load (issue 42), with a private etcd:
//! shard `a` of a primary and a replica (`--min-sync-replicas 1`), shards `b`, `c`,
//! `d` of one node each. The ring is `a,b`; writers run through the clients users
//! run (`tests/cluster/grow.py`: pylibmc's ketama over the old ring and over the new,
//! pymemcache's rendezvous `HashClient`, gets/cas, nutcracker with the old ring's
//! pool and then, once the ring has changed, with the new ring's), logging every
//! acknowledgement, while `kura cluster ring` grows the ring to `a,b,c,d` and returns
//! once every move has copied, flipped and purged.
//!
//! Afterwards every acknowledged change is there (`grow.py check`, through pylibmc's
//! ketama over the new ring, which reaches each key's owner with nothing passed on),
//! each key is held once: the shards' primaries hold as many keys as live, no more,
//! and shard `a`'s replica holds what its primary holds.

#![allow(clippy::expect_used)]

mod clusters;
mod replicas;

use std::path::Path;
use std::time::{Duration, Instant};

use clusters::*;
use kura_testkit::etcd::Etcd;
use kura_testkit::python::run_script;

#[test]
fn a_ring_grows_from_two_shards_to_four_under_load_and_loses_nothing() {
    let etcd = Etcd::start(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let endpoint = etcd.endpoint();
    let shard = |name: &str, shard: &str, sync: u32| {
        node_of_shard(&endpoint, name, shard, sync, "127.0.0.1", None, LOCAL)
    };
    let a = [
        shard("kura-grow-a1-", "a", 1),
        shard("kura-grow-a2-", "a", 1),
    ];
    let (b, c, d) = (
        shard("kura-grow-b-", "b", 0),
        shard("kura-grow-c-", "c", 0),
        shard("kura-grow-d-", "d", 0),
    );
    let p = elected(&[&a[0], &a[1]]);
    let (a_primary, a_replica) = (&a[p], &a[1 - p]);
    for n in [&b, &c, &d] {
        elected(&[n]);
    }
    let all = [&a[0], &a[1], &b, &c, &d];
    let old = format!("a={},b={}", a_primary.advertise, b.advertise);
    let new = format!("{old},c={},d={}", c.advertise, d.advertise);
    let (ok, text) = kura_cluster(&etcd, &["ring", "--shards", &old]);
    assert!(ok && text.starts_with("set ring v1"), "{text}");
    ring_settled(&all, 1);

    // Grown from 2 shards to 4, then shrunk back, each under load; the first
    // phase's keys are checked again after the second.
    let mut phases = Vec::new();
    let (two, four) = ([a_primary, &b], [&c, &d]);
    for (phase, (from, to), version) in [(0, (&old, &new), 2), (1, (&new, &old), 3)] {
        let (sources, targets) = if phase == 0 { (two, four) } else { (four, two) };
        let acks = change_under_load(&etcd, &all, phase, (from, to), (&sources, &targets));
        ring_settled(&all, version);
        phases.push(acks);
        let mut live = 0;
        for (p, acks) in phases.iter().enumerate() {
            live += check(&all, p, acks, to);
        }
        // Held once each: the primaries hold the live keys and no more; the
        // replica holds what its primary holds.
        let items = |n: &Node| number(&n.server, "", "curr_items");
        let each: Vec<u64> = [a_primary, &b, &c, &d].iter().map(|n| items(n)).collect();
        assert_eq!(
            each.iter().sum::<u64>(),
            live,
            "keys held by the shards' primaries a, b, c, d: {each:?}\n{}",
            moves_log(&all)
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while items(a_replica) != items(a_primary) {
            assert!(
                Instant::now() < deadline,
                "shard a's replica holds {} keys, its primary {}",
                items(a_replica),
                items(a_primary)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Shrunk: c and d own nothing and hold nothing.
    for n in [&c, &d] {
        assert_eq!(
            number(&n.server, "", "curr_items"),
            0,
            "{}",
            moves_log(&all)
        );
    }
}

/// Changes the ring from `from` to `to` while `grow.py load` runs (keys prefixed by
/// the phase), through nutcracker too with `from`'s pool and then, once the ring has
/// changed, with `to`'s; returns the load's log.
fn change_under_load(
    etcd: &Etcd,
    all: &[&Node],
    phase: usize,
    (from, to): (&str, &str),
    (sources, targets): (&[&Node], &[&Node]),
) -> tempfile::TempDir {
    let listen = kura_testkit::free_port();
    let (ok, pool) = kura_cluster(
        etcd,
        &["nutcracker", "--listen", &format!("127.0.0.1:{listen}")],
    );
    assert!(ok, "{pool}");
    let nutcracker = Nutcracker::start(&pool, listen);
    // nutcracker with the new ring's pool, started once the ring has changed.
    let listen_new = kura_testkit::free_port();
    let counts = |nodes: &[&Node], what: &str| -> Vec<u64> {
        nodes
            .iter()
            .map(|n| number(&n.server, " cluster", what))
            .collect()
    };
    let (copied, flips, purged) = (
        counts(targets, "move_copied"),
        counts(sources, "move_flips"),
        counts(sources, "move_purged"),
    );
    let out = tempfile::tempdir().expect("tempdir");
    let acks = out.path().join("acks.json").display().to_string();
    let load = std::thread::spawn({
        let args = vec![
            "load".to_string(),
            acks,
            "12".into(),
            addresses(from),
            addresses(to),
            format!("127.0.0.1:{listen}"),
            format!("127.0.0.1:{listen_new}"),
        ];
        let prefix = format!("{phase}/");
        move || {
            run_script(
                Path::new("tests/cluster/grow.py"),
                &args,
                &[("GROW_PREFIX", &prefix)],
            )
        }
    });
    std::thread::sleep(Duration::from_secs(3));
    let (ok, text) = kura_cluster(etcd, &["ring", "--shards", to]);
    print!("{text}");
    assert!(
        ok && text.contains("set ring v"),
        "{text}\n{}",
        moves_log(all)
    );
    let (ok, pool_new) = kura_cluster(
        etcd,
        &["nutcracker", "--listen", &format!("127.0.0.1:{listen_new}")],
    );
    assert!(ok && pool_new != pool, "{pool_new}");
    let nutcracker_new = Nutcracker::start(&pool_new, listen_new);
    match load.join().expect("the load's thread") {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("grow.py load: {e}\n{}", moves_log(all)),
    }
    drop((nutcracker, nutcracker_new));
    // Every source handed keys over and purged them; every target copied some.
    let grew = |before: &[u64], now: Vec<u64>| before.iter().zip(&now).all(|(b, n)| n > b);
    assert!(
        grew(&flips, counts(sources, "move_flips")),
        "{}",
        moves_log(all)
    );
    assert!(
        grew(&purged, counts(sources, "move_purged")),
        "{}",
        moves_log(all)
    );
    assert!(
        grew(&copied, counts(targets, "move_copied")),
        "{}",
        moves_log(all)
    );
    out
}

/// `grow.py check` of phase `phase`'s log against ring `ring`, reading each key from
/// its owner with nothing passed on; the number of its keys that live.
fn check(all: &[&Node], phase: usize, acks: &tempfile::TempDir, ring: &str) -> u64 {
    let forwarded = || -> Vec<u64> {
        all.iter()
            .map(|n| number(&n.server, " cluster", "owner_forwarded"))
            .collect()
    };
    let before = forwarded();
    let args = vec![
        "check".to_string(),
        acks.path().join("acks.json").display().to_string(),
        addresses(ring),
    ];
    let prefix = format!("{phase}/");
    let checked = match run_script(
        Path::new("tests/cluster/grow.py"),
        &args,
        &[("GROW_PREFIX", &prefix)],
    ) {
        Ok(output) => output,
        Err(e) => panic!("grow.py check of phase {phase}: {e}\n{}", moves_log(all)),
    };
    print!("{checked}");
    assert_eq!(
        forwarded(),
        before,
        "a key read by the ring was not at its owner"
    );
    checked
        .lines()
        .find_map(|l| l.strip_prefix("live "))
        .and_then(|n| n.trim().parse().ok())
        .expect("grow.py check says how many keys live")
}
