//! Tables against a model: players keyed by id with a unique email, over random
//! sequences of writes (through the table and through the email index), deletes,
//! touches, expiry, purges, compaction, checkpoints, clean reopens, kills and torn
//! power losses. After every step the rows, read by id and by every email, agree with
//! the model: a row is found by its current email and by no other, and an expired or
//! deleted row leaves no entry behind. Ranges through the index on level and through
//! the primary key (both read through the store's ordered keys, whose B-tree a
//! checkpoint step also brings up to date) return exactly the live rows in range, in
//! order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kura_engine::sim::{SimDisk, Tear};
use kura_engine::{Clock, Durability, FindLive, ManualClock, Options, Store};
use kura_tables::{Catalog, ChangeOutcome, Container, Tables, WriteMode, WriteOutcome};
use proptest::prelude::*;

const START_SECS: u32 = 1_700_000_000;
const SCHEMA: &str = "CREATE TABLE players (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, \
     email VARCHAR(40), level INT, UNIQUE KEY email (email), KEY level (level))";
const IDS: u8 = 6;
const EMAILS: u8 = 5;

#[derive(Debug, Clone)]
enum Op {
    /// `set` of a row through the table: name, email (None: NULL), level, ttl.
    Set {
        id: u8,
        email: Option<u8>,
        level: u8,
        ttl: i64,
    },
    Add {
        id: u8,
        email: Option<u8>,
    },
    /// `set` through the email container: updates the row holding the email.
    SetByEmail {
        email: u8,
        id: u8,
        level: u8,
    },
    Delete {
        id: u8,
    },
    DeleteByEmail {
        email: u8,
    },
    Touch {
        id: u8,
        ttl: i64,
    },
    Advance {
        secs: u32,
    },
    Reopen,
    Kill,
    PowerLoss {
        seed: u64,
    },
    /// Sets written to the file but never synced (the sync fails), then a power loss
    /// that keeps a torn prefix of them: whatever survives, each row and its index
    /// entries survive together.
    UnackedThenPowerLoss {
        sets: Vec<(u8, Option<u8>, u8)>,
        seed: u64,
    },
    Compact {
        walk_index: bool,
    },
    Checkpoint,
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0u8..IDS;
    let email = proptest::option::weighted(0.85, 0u8..EMAILS);
    let ttl = prop_oneof![6 => Just(0i64), 2 => 1i64..4];
    prop_oneof![
        30 => (id.clone(), email.clone(), any::<u8>(), ttl.clone())
            .prop_map(|(id, email, level, ttl)| Op::Set { id, email, level, ttl }),
        5 => (id.clone(), email).prop_map(|(id, email)| Op::Add { id, email }),
        8 => (0u8..EMAILS, id.clone(), any::<u8>())
            .prop_map(|(email, id, level)| Op::SetByEmail { email, id, level }),
        6 => id.clone().prop_map(|id| Op::Delete { id }),
        4 => (0u8..EMAILS).prop_map(|email| Op::DeleteByEmail { email }),
        4 => (id, ttl).prop_map(|(id, ttl)| Op::Touch { id, ttl }),
        5 => (1u32..3).prop_map(|secs| Op::Advance { secs }),
        2 => Just(Op::Reopen),
        2 => Just(Op::Kill),
        2 => any::<u64>().prop_map(|seed| Op::PowerLoss { seed }),
        3 => (
            proptest::collection::vec(
                (0u8..IDS, proptest::option::weighted(0.85, 0u8..EMAILS), any::<u8>()),
                1..6,
            ),
            any::<u64>(),
        )
            .prop_map(|(sets, seed)| Op::UnackedThenPowerLoss { sets, seed }),
        3 => any::<bool>().prop_map(|walk_index| Op::Compact { walk_index }),
        2 => Just(Op::Checkpoint),
        1 => Just(Op::Purge),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    email: Option<u8>,
    level: u8,
    exptime: u32,
}

#[derive(Debug, Default, Clone)]
struct Model {
    rows: BTreeMap<u8, Row>,
    /// Rows that expired: each may leave its level entry behind (no read meets a
    /// non-unique entry) until the purge or compaction takes it.
    expired: u64,
}

impl Model {
    fn live(&self, now: u32) -> BTreeMap<u8, Row> {
        self.rows
            .iter()
            .filter(|(_, r)| r.exptime == 0 || r.exptime > now)
            .map(|(id, r)| (*id, r.clone()))
            .collect()
    }

    /// Forgets expired rows, as the engine does once it meets them.
    fn forget_expired(&mut self, now: u32) {
        let live = self.live(now);
        self.expired += (self.rows.len() - live.len()) as u64;
        self.rows = live;
    }

    fn holder_of(&self, email: u8, now: u32) -> Option<u8> {
        self.live(now)
            .into_iter()
            .find(|(_, r)| r.email == Some(email))
            .map(|(id, _)| id)
    }
}

fn email_text(email: Option<u8>) -> String {
    email.map_or_else(|| "\\N".to_string(), |e| format!("p{e}@x.com"))
}

fn name(id: u8) -> String {
    format!("player{id}")
}

struct World {
    disk: SimDisk,
    clock: Arc<ManualClock>,
    /// None only while a crash takes the store down.
    open: Option<Tables>,
}

fn open(disk: &SimDisk, clock: &Arc<ManualClock>) -> Tables {
    let mut options = Options::new(Durability::Fsync, clock.clone());
    options.segment_size_bytes = 1024;
    options.fsync_interval = Duration::from_millis(1);
    options.ordered_spaces = kura_tables::ordered_spaces();
    let store =
        Store::open(Arc::new(disk.clone()), options).unwrap_or_else(|e| panic!("open failed: {e}"));
    let tables = Tables::open(Arc::new(store)).unwrap_or_else(|e| panic!("tables: {e}"));
    tables
        .apply_schema(SCHEMA)
        .unwrap_or_else(|e| panic!("schema: {e}"));
    tables
}

impl World {
    fn tables(&self) -> &Tables {
        match &self.open {
            Some(tables) => tables,
            None => panic!("the store is down"),
        }
    }

    /// Stops the store (cleanly, or by a crash that keeps what `tear` says) and opens
    /// it again on the same disk.
    fn reopen(&mut self, crash: Option<Tear>) {
        match crash {
            None => self.tables().store().shutdown(),
            Some(tear) => self.disk.power_loss(tear),
        }
        // Whatever the dying store still writes goes nowhere while the disk is off.
        drop(self.open.take());
        self.disk.revive();
        self.open = Some(open(&self.disk, &self.clock));
    }

    fn containers(&self) -> (Arc<Catalog>, Container, Container) {
        let Some((catalog, players)) = self.tables().container("players") else {
            panic!("no players table")
        };
        let Some(by_email) = catalog.container("players_by_email") else {
            panic!("no players_by_email container")
        };
        (catalog, players, by_email)
    }

    fn wait(&self, lsn: u64) {
        assert!(self.tables().store().wait_acked(lsn).is_ok());
    }
}

fn run(ops: Vec<Op>) {
    let disk = SimDisk::new();
    let clock = Arc::new(ManualClock::new(START_SECS));
    let tables = open(&disk, &clock);
    let mut world = World {
        disk,
        clock,
        open: Some(tables),
    };
    let mut model = Model::default();
    for op in ops {
        let now = world.clock.now_secs();
        let (catalog, players, by_email) = world.containers();
        match op {
            Op::Set {
                id,
                email,
                level,
                ttl,
            } => {
                let value = format!("{}|{}|{level}", name(id), email_text(email));
                let outcome = world
                    .tables()
                    .write(
                        &catalog,
                        players,
                        id.to_string().as_bytes(),
                        value.as_bytes(),
                        WriteMode::Set,
                        (0, ttl),
                    )
                    .unwrap_or_else(|e| panic!("set: {e}"));
                let taken = email
                    .and_then(|e| model.holder_of(e, now))
                    .is_some_and(|h| h != id);
                match outcome {
                    WriteOutcome::Stored(w) => {
                        assert!(!taken, "set {id} took email {email:?} from another row");
                        world.wait(w.lsn);
                        let exptime = kura_engine::exptime_to_absolute(ttl, now);
                        model.rows.insert(
                            id,
                            Row {
                                email,
                                level,
                                exptime,
                            },
                        );
                    }
                    WriteOutcome::Duplicate => assert!(taken, "set {id} refused for {email:?}"),
                    other => panic!("set {id}: {other:?}"),
                }
            }
            Op::Add { id, email } => {
                let value = format!("{}|{}|1", name(id), email_text(email));
                let outcome = world
                    .tables()
                    .write(
                        &catalog,
                        players,
                        id.to_string().as_bytes(),
                        value.as_bytes(),
                        WriteMode::Add,
                        (0, 0),
                    )
                    .unwrap_or_else(|e| panic!("add: {e}"));
                let exists = model.live(now).contains_key(&id);
                let taken = email.and_then(|e| model.holder_of(e, now)).is_some();
                match outcome {
                    WriteOutcome::Stored(w) => {
                        assert!(!exists && !taken, "add {id} {email:?}");
                        world.wait(w.lsn);
                        model.rows.insert(
                            id,
                            Row {
                                email,
                                level: 1,
                                exptime: 0,
                            },
                        );
                    }
                    WriteOutcome::NotStored => assert!(exists, "add {id} refused"),
                    WriteOutcome::Duplicate => assert!(!exists && taken, "add {id} duplicate"),
                    other => panic!("add {id}: {other:?}"),
                }
            }
            Op::SetByEmail { email, id, level } => {
                let value = format!("{id}|{}|{level}", name(id));
                let key = email_text(Some(email));
                let outcome = world
                    .tables()
                    .write(
                        &catalog,
                        by_email,
                        key.as_bytes(),
                        value.as_bytes(),
                        WriteMode::Set,
                        (0, 0),
                    )
                    .unwrap_or_else(|e| panic!("set by email: {e}"));
                let holder = model.holder_of(email, now);
                match outcome {
                    WriteOutcome::Stored(w) => {
                        assert_eq!(holder, Some(id), "set through email {email}");
                        world.wait(w.lsn);
                        model.rows.insert(
                            id,
                            Row {
                                email: Some(email),
                                level,
                                exptime: 0,
                            },
                        );
                    }
                    WriteOutcome::NotStored => {
                        assert_ne!(holder, Some(id), "set through email {email} refused")
                    }
                    other => panic!("set by email: {other:?}"),
                }
            }
            Op::Delete { id } => {
                let outcome = world
                    .tables()
                    .delete(&catalog, players, id.to_string().as_bytes(), None)
                    .unwrap_or_else(|e| panic!("delete: {e}"));
                let existed = model.live(now).contains_key(&id);
                match outcome {
                    ChangeOutcome::Done(w) => {
                        assert!(existed, "deleted {id}, which was not there");
                        world.wait(w.map_or(0, |w| w.lsn));
                    }
                    ChangeOutcome::NotFound => assert!(!existed, "delete {id} missed it"),
                    other => panic!("delete {id}: {other:?}"),
                }
                model.rows.remove(&id);
            }
            Op::DeleteByEmail { email } => {
                let key = email_text(Some(email));
                let outcome = world
                    .tables()
                    .delete(&catalog, by_email, key.as_bytes(), None)
                    .unwrap_or_else(|e| panic!("delete by email: {e}"));
                let holder = model.holder_of(email, now);
                match (outcome, holder) {
                    (ChangeOutcome::Done(w), Some(id)) => {
                        world.wait(w.map_or(0, |w| w.lsn));
                        model.rows.remove(&id);
                    }
                    (ChangeOutcome::NotFound, None) => {}
                    other => panic!("delete by email {email}: {other:?}"),
                }
            }
            Op::Touch { id, ttl } => {
                let touched = world
                    .tables()
                    .touch(&catalog, players, id.to_string().as_bytes(), ttl)
                    .unwrap_or_else(|e| panic!("touch: {e}"));
                let exists = model.live(now).contains_key(&id);
                assert_eq!(touched.is_some(), exists, "touch {id}");
                if let Some(item) = touched {
                    world.wait(item.lsn);
                    if let Some(row) = model.rows.get_mut(&id) {
                        row.exptime = kura_engine::exptime_to_absolute(ttl, now);
                    }
                }
            }
            Op::Advance { secs } => world.clock.advance(secs),
            Op::Reopen => world.reopen(None),
            Op::Kill => world.reopen(Some(Tear::KeepWritten)),
            Op::PowerLoss { seed } => world.reopen(Some(Tear::Torn(seed))),
            Op::UnackedThenPowerLoss { sets, seed } => {
                world.disk.fail_syncs_after(0);
                let mut last = None;
                for (id, email, level) in sets {
                    let value = format!("{}|{}|{level}", name(id), email_text(email));
                    let written = world.tables().write(
                        &catalog,
                        players,
                        id.to_string().as_bytes(),
                        value.as_bytes(),
                        WriteMode::Set,
                        (0, 0),
                    );
                    match written {
                        Ok(WriteOutcome::Stored(w)) => last = Some(w.lsn),
                        // Refused once the failed sync poisoned the store.
                        Ok(_) | Err(kura_tables::Error::Engine(_)) => {}
                        Err(e) => panic!("set: {e}"),
                    }
                }
                // The flusher wrote the batches and its sync failed: nothing is
                // acknowledged, and the bytes are in the file but not durable.
                if let Some(lsn) = last {
                    assert!(world.tables().store().wait_acked(lsn).is_err());
                }
                world.reopen(Some(Tear::Torn(seed)));
                // What survived is some prefix of the sets; the model takes the rows as
                // they are, and `check` finds each by its email and by no other.
                let expired = model.expired;
                model = observed(&world, now);
                model.expired = expired;
            }
            Op::Compact { walk_index } => {
                let how = if walk_index {
                    FindLive::WalkIndex
                } else {
                    FindLive::ReadSegment
                };
                let compacted = world.tables().store().compact_oldest_finding(how);
                assert!(compacted.is_ok(), "compaction: {compacted:?}");
            }
            Op::Checkpoint => {
                let applied = world.tables().store().apply_ordered(true);
                assert!(applied.is_ok(), "apply_ordered: {applied:?}");
                let written = world.tables().store().checkpoint();
                assert!(written.is_ok(), "checkpoint: {written:?}");
            }
            Op::Purge => {
                world.tables().store().purge_expired();
            }
        }
        let now = world.clock.now_secs();
        check(&world, &model, now);
        model.forget_expired(now);
    }
}

/// The rows as the store has them (after a crash that may have kept any prefix of
/// the writes in flight).
fn observed(world: &World, now: u32) -> Model {
    let (catalog, players, _) = world.containers();
    let mut model = Model::default();
    for id in 0..IDS {
        let got = world
            .tables()
            .get(&catalog, players, id.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("get {id}: {e}"));
        let Some(item) = got else { continue };
        let text = String::from_utf8_lossy(&item.value).into_owned();
        let fields: Vec<&str> = text.split('|').collect();
        let [row_name, email, level] = fields.as_slice() else {
            panic!("row {id} reads {text}")
        };
        assert_eq!(*row_name, name(id));
        let email = (0..EMAILS).find(|e| email_text(Some(*e)) == *email);
        let level = level.parse().unwrap_or_else(|_| panic!("level {level}"));
        let exptime = item.exptime;
        assert!(exptime == 0 || exptime > now);
        model.rows.insert(
            id,
            Row {
                email,
                level,
                exptime,
            },
        );
    }
    model
}

/// Every id reads as the model says; every email leads to its holder's row or to none.
fn check(world: &World, model: &Model, now: u32) {
    let (catalog, players, by_email) = world.containers();
    let live = model.live(now);
    for id in 0..IDS {
        let got = world
            .tables()
            .get(&catalog, players, id.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("get {id}: {e}"));
        let want = live
            .get(&id)
            .map(|r| format!("{}|{}|{}", name(id), email_text(r.email), r.level));
        assert_eq!(
            got.map(|i| String::from_utf8_lossy(&i.value).into_owned()),
            want,
            "row {id}"
        );
    }
    for email in 0..EMAILS {
        let key = email_text(Some(email));
        let got = world
            .tables()
            .get(&catalog, by_email, key.as_bytes())
            .unwrap_or_else(|e| panic!("get by {key}: {e}"));
        let want = model
            .holder_of(email, now)
            .map(|id| format!("{id}|{}|{}", name(id), live[&id].level));
        assert_eq!(
            got.map(|i| String::from_utf8_lossy(&i.value).into_owned()),
            want,
            "email {key}"
        );
    }
    // Ranges: the ordered index in memory, and the hash primary key read from the log.
    let Some(by_level) = catalog.container("players_by_level") else {
        panic!("no players_by_level container")
    };
    let render = |id: u8| {
        let r = &live[&id];
        format!("{}|{}|{}", name(id), email_text(r.email), r.level)
    };
    for (container, spec, pick) in [
        (by_level, "@>=0", (0u8..IDS).collect::<Vec<_>>()),
        (by_level, "@>100@<=200", (0u8..IDS).collect()),
        (players, "@>=1@<4", (1u8..4).collect()),
    ] {
        let got: Vec<(String, String)> = world
            .tables()
            .range(&catalog, container, spec.as_bytes())
            .unwrap_or_else(|e| panic!("range {spec}: {e}"))
            .rows
            .into_iter()
            .map(|(k, item)| {
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&item.value).into_owned(),
                )
            })
            .collect();
        let in_range = |id: u8| -> bool {
            let level = live[&id].level;
            match spec {
                "@>=0" => true,
                "@>100@<=200" => level > 100 && level <= 200,
                _ => true,
            }
        };
        let mut want: Vec<u8> = pick
            .into_iter()
            .filter(|id| live.contains_key(id) && in_range(*id))
            .collect();
        if container == by_level {
            want.sort_by_key(|id| (live[id].level, *id));
        }
        let want: Vec<(String, String)> = want
            .into_iter()
            .map(|id| (id.to_string(), render(id)))
            .collect();
        assert_eq!(got, want, "range {spec}");
    }
    // One entry for each live row with an email, one for its level, and the row
    // itself: nothing left behind by a delete or a change of email or level, and by
    // an expiry nothing but level entries (no read meets those; the purge and
    // compaction take them).
    let entries = live.values().filter(|r| r.email.is_some()).count() as u64;
    let stats = world.tables().store().stats();
    let want = 1 + 2 * live.len() as u64 + entries;
    let expired = model.expired + (model.rows.len() - live.len()) as u64;
    assert!(
        (want..=want + expired).contains(&stats.table_items),
        "{} items: the catalog, {} rows, their level entries and {entries} email entries, \
         and at most {} level entries of expired rows",
        stats.table_items,
        live.len(),
        expired
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]
    #[test]
    fn rows_and_indexes_agree_with_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops);
    }
}
