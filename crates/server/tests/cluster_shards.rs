//! Two shards on a ketama ring (issue 42), with a private etcd: shard `a` of two nodes
//! (a primary and a replica) and shard `b` of one. `kura cluster ring` sets the ring;
//! then any node serves any key (`tests/cluster/shards.py`): pylibmc's
//! `ketama_weighted` sends each key to the node the ring names; a client that lists
//! one node only (pymemcache's text, pylibmc's binary, meta commands) reaches every
//! key through it, the node passing a key another shard owns on to that shard's
//! primary, and a multi-get over both shards comes back whole and in order. Keys so
//! written are held by their owners (pylibmc's ketama reads them there). The pool
//! `kura cluster nutcracker` prints places every key as the ring does: nothing set
//! through nutcracker is passed on. The same ring again changes nothing (a different
//! one moves keys: `cluster_grow.rs`).

#![allow(clippy::expect_used)]

mod clusters;
mod replicas;

use std::path::Path;

use clusters::*;
use kura_testkit::etcd::Etcd;
use kura_testkit::python::run_script;

fn script(nodes: &[&Node], args: &[String]) {
    match run_script(Path::new("tests/cluster/shards.py"), args, &[]) {
        Ok(output) => print!("{output}"),
        Err(e) => panic!("shards.py {args:?}: {e}\n{}", logs(nodes)),
    }
}

#[test]
fn any_node_serves_any_key_of_a_two_shard_ring() {
    let etcd = Etcd::start(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let endpoint = etcd.endpoint();
    let shard = |name: &str, shard: &str, sync: u32| {
        node_of_shard(&endpoint, name, shard, sync, "127.0.0.1", None, &[])
    };
    let a = [
        shard("kura-shards-a1-", "a", 1),
        shard("kura-shards-a2-", "a", 1),
    ];
    let b = shard("kura-shards-b1-", "b", 0);
    let p = elected(&[&a[0], &a[1]]);
    let (a_primary, a_replica) = (&a[p], &a[1 - p]);
    elected(&[&b]);
    let all = [&a[0], &a[1], &b];

    let ring = format!("a={},b={}", a_primary.advertise, b.advertise);
    let (ok, text) = kura_cluster(&etcd, &["ring", "--shards", &ring]);
    assert!(ok && text.starts_with("set ring v1"), "{text}");
    ring_settled(&all, 1);

    script(
        &all,
        &[
            "any_node".into(),
            a_primary.advertise.clone(),
            b.advertise.clone(),
            a_replica.advertise.clone(),
        ],
    );
    assert!(cluster_stat(&b, "owner_forwarded") > 0);
    assert!(cluster_stat(&b, "split_gets") > 0);

    // The same ring again changes nothing.
    let (ok, text) = kura_cluster(&etcd, &["ring", "--shards", &ring]);
    assert!(ok && text.starts_with("unchanged"), "{text}");
    ring_settled(&all, 1);

    // nutcracker with the pool Kura prints: every key goes straight to its owner.
    let listen = kura_testkit::free_port();
    let (ok, pool) = kura_cluster(
        &etcd,
        &["nutcracker", "--listen", &format!("127.0.0.1:{listen}")],
    );
    assert!(ok, "{pool}");
    let forwarded = |n: &Node| cluster_stat(n, "owner_forwarded");
    let before = (forwarded(a_primary), forwarded(&b));
    let nutcracker = Nutcracker::start(&pool, listen);
    script(&all, &["direct".into(), format!("127.0.0.1:{listen}")]);
    drop(nutcracker);
    assert_eq!(
        (forwarded(a_primary), forwarded(&b)),
        before,
        "nutcracker placed a key where the ring does not\n{pool}"
    );
}
