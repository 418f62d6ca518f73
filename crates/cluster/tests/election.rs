//! The shard's election against a private etcd (Debian's `etcd-server`): one primary
//! at a time, a later one with a higher epoch; the next candidate takes over when the
//! primary leaves, resigns, or dies (its lease runs out); a primary that loses etcd
//! stops holding its term within the lease's TTL, by its own clock, and holds it
//! again when etcd comes back before anyone else could be elected.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use kura_cluster::{ClusterError, Config, Member};
use kura_testkit::etcd::Etcd;

const TTL: Duration = Duration::from_secs(2);

fn config(etcd: &Etcd, node: u16) -> Config {
    Config {
        endpoints: vec![etcd.endpoint()],
        cluster: "test".into(),
        shard: "s0".into(),
        advertise: format!("127.0.0.1:{}", 11000 + node),
        sql: Some(format!("127.0.0.1:{}", 13000 + node)),
        lease_ttl: TTL,
    }
}

fn etcd() -> Etcd {
    Etcd::start(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")))
}

/// Campaigns of `members`, each in its own task; the first to win, with its term.
async fn first_elected(
    members: Vec<Member>,
) -> (
    usize,
    kura_cluster::Term,
    Vec<tokio::task::JoinHandle<(Member, Result<kura_cluster::Term, ClusterError>)>>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for (i, mut member) in members.into_iter().enumerate() {
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let term = member.campaign().await;
            if let Ok(term) = &term {
                let _ = tx.send((i, term.clone()));
            }
            (member, term)
        }));
    }
    let (i, term) = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("someone is elected")
        .expect("a term");
    (i, term, tasks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_primary_at_a_time_and_the_next_takes_over() {
    let etcd = etcd();
    let mut observer = Member::join(config(&etcd, 9)).await.expect("join");
    assert_eq!(
        observer.primary().await.expect("primary"),
        None,
        "no primary yet"
    );
    // A member's SQL address is what it registered, and one without a SQL port has
    // none.
    let mut without_sql = Member::join(Config {
        sql: None,
        ..config(&etcd, 8)
    })
    .await
    .expect("join");
    without_sql.register().await.expect("register");
    observer.register().await.expect("register");
    assert_eq!(
        observer.sql_of("127.0.0.1:11009").await.expect("sql_of"),
        Some("127.0.0.1:13009".to_string())
    );
    assert_eq!(
        observer.sql_of("127.0.0.1:11008").await.expect("sql_of"),
        None
    );
    assert_eq!(
        observer.sql_of("127.0.0.1:11007").await.expect("sql_of"),
        None,
        "no such member"
    );
    without_sql.leave().await.expect("leave");

    let mut members = Vec::new();
    for node in 0..3 {
        members.push(Member::join(config(&etcd, node)).await.expect("join"));
    }
    let (first, term, mut tasks) = first_elected(members).await;
    // The others still wait.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = tasks.iter().filter(|t| !t.is_finished()).count();
    assert_eq!(waiting, 2, "one primary at a time");
    let primary = observer
        .primary()
        .await
        .expect("primary")
        .expect("a primary");
    assert_eq!(primary.advertise, format!("127.0.0.1:{}", 11000 + first));
    assert_eq!(primary.epoch, term.epoch);

    // The primary leaves (a clean stop): the next candidate is primary at once, with
    // a higher epoch.
    let (member, _) = tasks.remove(first).await.expect("task");
    let left = Instant::now();
    member.leave().await.expect("leave");
    let mut next = None;
    while next.is_none() {
        assert!(left.elapsed() < Duration::from_secs(5), "no new primary");
        for (i, task) in tasks.iter().enumerate() {
            if task.is_finished() {
                next = Some(i);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (second, second_term) = tasks.remove(next.expect("next")).await.expect("task");
    let second_term = second_term.expect("elected");
    assert!(
        second_term.epoch > term.epoch,
        "{} then {}",
        term.epoch,
        second_term.epoch
    );
    let primary = observer
        .primary()
        .await
        .expect("primary")
        .expect("a primary");
    assert_eq!(primary.epoch, second_term.epoch);

    // The second one dies (its lease is left to run out): the last one takes over
    // within a few TTLs, and not before the dead one, by its own clock, had stopped
    // holding its term.
    let died = Instant::now();
    let held_until = second.holds_until().expect("a live lease");
    drop(second);
    let (last, last_term) = tasks.remove(0).await.expect("task");
    let last_term = last_term.expect("elected");
    let elected = Instant::now();
    assert!(last_term.epoch > second_term.epoch);
    assert!(
        elected >= held_until,
        "elected {:?} before the old primary stopped holding",
        held_until - elected
    );
    assert!(
        died.elapsed() < TTL * 4,
        "the next primary after {:?}",
        died.elapsed()
    );
    assert!(last.holds());

    // A planned switchover: the primary resigns; a new candidate takes over.
    let mut last = last;
    let mut newcomer = Member::join(config(&etcd, 5)).await.expect("join");
    let campaign = tokio::spawn(async move {
        let term = newcomer.campaign().await;
        (newcomer, term)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!campaign.is_finished(), "a primary is in place");
    last.resign(last_term.clone()).await.expect("resign");
    let (_newcomer, term) = tokio::time::timeout(Duration::from_secs(5), campaign)
        .await
        .expect("elected after the resignation")
        .expect("task");
    assert!(term.expect("elected").epoch > last_term.epoch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_loses_etcd_stops_holding_its_term_until_etcd_is_back() {
    let mut etcd = etcd();
    let mut primary = Member::join(config(&etcd, 0)).await.expect("join");
    let term = primary.campaign().await.expect("elected");
    assert!(term.epoch > 0);
    assert!(primary.holds());
    // Keepalives have gone out and come back for a while.
    tokio::time::sleep(TTL).await;
    assert!(primary.holds(), "the lease is kept alive");
    etcd.stop();
    let lost = Instant::now();
    while primary.holds() {
        assert!(
            lost.elapsed() < TTL,
            "still holding {:?} after etcd went",
            lost.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // etcd back (a restarted etcd gives every lease its TTL anew): the primary's
    // keepalives reach it again and it holds the same term; no one else was elected.
    etcd.restart();
    let back = Instant::now();
    while !primary.holds() {
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "the lease is not kept again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut other = Member::join(config(&etcd, 1)).await.expect("join");
    let now = other.primary().await.expect("primary").expect("a primary");
    assert_eq!(now.epoch, term.epoch, "the same term");
    // The primary dies: the other is elected once its lease runs out.
    drop(primary);
    let elected = tokio::time::timeout(Duration::from_secs(20), other.campaign())
        .await
        .expect("a new primary once the old lease ran out")
        .expect("elected");
    assert!(elected.epoch > term.epoch);
}
