//! Rows and their unique index under a real `kura` process SIGKILLed at random moments,
//! round after round, and writers racing for one email.
//!
//! Writers change players' emails (and delete players) over many connections and keep
//! a ledger of every reply. After each restart every acknowledged write is there, the
//! one write per client in flight at the kill may or may not have landed, and every
//! player is found by its current email and by no other. The data directory is on a
//! real disk under Cargo's target directory. The seed is printed; `KURA_SEED` replays.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use kura_testkit::{
    assert_not_tmpfs, crash_seed, kill_under_load, kura_bin, Client, Durability, KuraOptions,
    KuraServer,
};
use rand::{Rng, SeedableRng};

const SCHEMA: &str = "CREATE TABLE players (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, \
     email VARCHAR(40), level INT NOT NULL, UNIQUE KEY email (email));\n";
const CLIENTS: usize = 12;
const ROUNDS: usize = 6;
/// Each client owns this many players and this many emails, which its players trade.
const PLAYERS_PER_CLIENT: usize = 6;
const EMAILS_PER_CLIENT: usize = 8;

/// A player's row as the ledger knows it: its email and level.
type Row = Option<(Option<usize>, u32)>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Set {
        id: usize,
        email: Option<usize>,
        level: u32,
    },
    Delete {
        id: usize,
    },
}

#[derive(Debug, Default)]
struct Ledger {
    /// Each of the client's players, as its last acknowledged write left it.
    rows: HashMap<usize, Row>,
    in_flight: Option<Op>,
    writes: u64,
    refused: u64,
}

fn email(client: usize, n: usize) -> String {
    format!("c{client}e{n}@x.com")
}

fn player_id(client: usize, n: usize) -> usize {
    client * PLAYERS_PER_CLIENT + n
}

fn row_value(id: usize, email: Option<&str>, level: u32) -> String {
    format!("p{id}|{}|{level}", email.unwrap_or("\\N"))
}

/// The one-line reply to `request`.
fn request(conn: &mut Client, bytes: &[u8]) -> std::io::Result<String> {
    let reply = conn.request(bytes, b"\r\n")?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// The value of `key`, or None.
fn get(conn: &mut Client, key: &str) -> Option<String> {
    let reply = conn
        .request(format!("get {key}\r\n").as_bytes(), b"END\r\n")
        .unwrap_or_else(|e| panic!("get {key}: {e}"));
    let text = String::from_utf8_lossy(&reply).into_owned();
    if text == "END\r\n" {
        return None;
    }
    let mut lines = text.split("\r\n");
    let header = lines.next().unwrap_or_default();
    assert!(header.starts_with("VALUE "), "get {key}: {text:?}");
    lines.next().map(str::to_string)
}

fn client(addr: SocketAddr, id: usize, ledger: Arc<Mutex<Ledger>>, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let Ok(mut conn) = Client::connect(addr) else {
        return;
    };
    loop {
        let player = player_id(id, rng.gen_range(0..PLAYERS_PER_CLIENT));
        let op = if rng.gen_ratio(1, 10) {
            Op::Delete { id: player }
        } else {
            Op::Set {
                id: player,
                email: (!rng.gen_ratio(1, 8)).then(|| rng.gen_range(0..EMAILS_PER_CLIENT)),
                level: rng.gen_range(0..1000),
            }
        };
        ledger.lock().unwrap_or_else(|e| e.into_inner()).in_flight = Some(op.clone());
        let reply = match &op {
            Op::Set {
                id: player,
                email: e,
                level,
            } => {
                let value = row_value(*player, e.map(|e| email(id, e)).as_deref(), *level);
                let bytes = format!("set @@players.{player} 0 0 {}\r\n{value}\r\n", value.len());
                request(&mut conn, bytes.as_bytes())
            }
            Op::Delete { id: player } => request(
                &mut conn,
                format!("delete @@players.{player}\r\n").as_bytes(),
            ),
        };
        // A kill ends the loop: the connection closes mid-request.
        let Ok(reply) = reply else { return };
        let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
        match (&op, reply.as_str()) {
            (
                Op::Set {
                    id: player,
                    email,
                    level,
                },
                "STORED\r\n",
            ) => {
                ledger.rows.insert(*player, Some((*email, *level)));
            }
            // Another of this client's players holds the email.
            (Op::Set { email: Some(e), .. }, "NOT_STORED\r\n") => {
                let holder = ledger
                    .rows
                    .values()
                    .any(|row| matches!(row, Some((Some(held), _)) if held == e));
                assert!(holder, "NOT_STORED for {op:?}, whose email no row held");
                ledger.refused += 1;
            }
            (Op::Delete { id: player }, "DELETED\r\n" | "NOT_FOUND\r\n") => {
                ledger.rows.insert(*player, None);
            }
            (_, other) => panic!("unexpected reply {other:?} to {op:?}"),
        }
        ledger.in_flight = None;
        ledger.writes += 1;
    }
}

/// After a restart: each player is as acknowledged (or as its client's in-flight write
/// left it), and each email leads to the player holding it, or to none.
fn check(server: &KuraServer, ledgers: &[Arc<Mutex<Ledger>>], round: usize, seed: u64) {
    let mut conn = Client::connect(server.addr()).unwrap_or_else(|e| panic!("connect: {e}"));
    for (client, ledger) in ledgers.iter().enumerate() {
        let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
        let in_flight = ledger.in_flight.take();
        for n in 0..PLAYERS_PER_CLIENT {
            let id = player_id(client, n);
            let expected: Row = ledger.rows.get(&id).cloned().unwrap_or(None);
            let render = |row: &Row| {
                row.map(|(e, level)| row_value(id, e.map(|e| email(client, e)).as_deref(), level))
            };
            let got = get(&mut conn, &format!("@@players.{id}"));
            let landed: Option<Row> = match &in_flight {
                Some(Op::Set {
                    id: i,
                    email,
                    level,
                }) if *i == id => Some(Some((*email, *level))),
                Some(Op::Delete { id: i }) if *i == id => Some(None),
                _ => None,
            };
            if let Some(landed) = landed {
                if got == render(&landed) {
                    ledger.rows.insert(id, landed);
                    continue;
                }
            }
            assert_eq!(
                got,
                render(&expected),
                "round {round}, seed {seed}: player {id}"
            );
        }
        for e in 0..EMAILS_PER_CLIENT {
            let holder = (0..PLAYERS_PER_CLIENT).map(|n| player_id(client, n)).find(
                |id| matches!(ledger.rows.get(id), Some(Some((Some(held), _))) if *held == e),
            );
            let got = get(
                &mut conn,
                &format!("@@players_by_email.{}", email(client, e)),
            );
            let want = holder.map(|id| {
                let Some(Some((_, level))) = ledger.rows.get(&id) else {
                    unreachable!("the holder has a row")
                };
                format!("{id}|p{id}|{level}")
            });
            assert_eq!(
                got,
                want,
                "round {round}, seed {seed}: email {}",
                email(client, e)
            );
        }
    }
}

fn start(durability: Durability) -> (tempfile::TempDir, KuraServer) {
    let base = tempfile::Builder::new()
        .prefix("tables-crash-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("temp dir: {e}"));
    assert_not_tmpfs(base.path());
    let schema = base.path().join("schema.sql");
    std::fs::write(&schema, SCHEMA).unwrap_or_else(|e| panic!("schema: {e}"));
    let data = base.path().join("data");
    let server = KuraOptions::new(kura_bin(env!("CARGO_BIN_EXE_kura")), durability)
        .arg("--segment-size-mib")
        .arg("1")
        .arg("--schema")
        .arg(&schema)
        .start_on(&data)
        .unwrap_or_else(|e| panic!("start kura: {e}"));
    (base, server)
}

fn crash_rounds(durability: Durability) {
    let seed = crash_seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (_base, mut server) = start(durability);
    let ledgers: Vec<Arc<Mutex<Ledger>>> = (0..CLIENTS)
        .map(|_| Arc::new(Mutex::new(Ledger::default())))
        .collect();
    for round in 0..ROUNDS {
        if round > 0 {
            server
                .restart()
                .unwrap_or_else(|e| panic!("restart: {e}\n{}", server.log()));
        }
        check(&server, &ledgers, round, seed);
        let addr = server.addr();
        let handles: Vec<_> = ledgers
            .iter()
            .enumerate()
            .map(|(id, ledger)| {
                let ledger = Arc::clone(ledger);
                let client_seed = seed ^ ((round * 1009 + id) as u64);
                std::thread::spawn(move || client(addr, id, ledger, client_seed))
            })
            .collect();
        let load = Duration::from_millis(rng.gen_range(150..700));
        kill_under_load(&mut server, load, handles);
    }
    server
        .restart()
        .unwrap_or_else(|e| panic!("restart: {e}\n{}", server.log()));
    check(&server, &ledgers, ROUNDS, seed);
    let (writes, refused) = ledgers.iter().fold((0, 0), |(w, r), l| {
        let l = l.lock().unwrap_or_else(|e| e.into_inner());
        (w + l.writes, r + l.refused)
    });
    println!("{writes} acknowledged writes ({refused} refused as duplicates) over {ROUNDS} kills");
    assert!(
        writes > 100 && refused > 0,
        "{writes} writes, {refused} duplicates refused: the test proves little"
    );
}

#[test]
fn rows_and_emails_survive_sigkill_under_load_with_fsync() {
    crash_rounds(Durability::Fsync);
}

#[test]
fn rows_and_emails_survive_sigkill_under_load_with_interval_fsync() {
    crash_rounds(Durability::Interval);
}

/// Writers on many connections set their own players to one email at the same moment:
/// exactly one is stored, every round, and the email then leads to that player.
#[test]
fn of_writers_racing_for_one_email_exactly_one_wins() {
    const RACERS: usize = 8;
    const RACES: usize = 40;
    let (_base, server) = start(Durability::Fsync);
    let addr = server.addr();
    for race in 0..RACES {
        let barrier = Arc::new(Barrier::new(RACERS));
        let contested = format!("race{race}@x.com");
        let handles: Vec<_> = (0..RACERS)
            .map(|racer| {
                let barrier = Arc::clone(&barrier);
                let contested = contested.clone();
                std::thread::spawn(move || {
                    let mut conn = Client::connect(addr).unwrap_or_else(|e| panic!("{e}"));
                    let id = race * RACERS + racer;
                    let value = row_value(id, Some(&contested), 1);
                    let bytes = format!("set @@players.{id} 0 0 {}\r\n{value}\r\n", value.len());
                    barrier.wait();
                    let reply =
                        request(&mut conn, bytes.as_bytes()).unwrap_or_else(|e| panic!("set: {e}"));
                    (id, reply)
                })
            })
            .collect();
        let replies: Vec<(usize, String)> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        let winners: Vec<usize> = replies
            .iter()
            .filter(|(_, r)| r == "STORED\r\n")
            .map(|(id, _)| *id)
            .collect();
        assert!(
            replies
                .iter()
                .all(|(_, r)| r == "STORED\r\n" || r == "NOT_STORED\r\n"),
            "{replies:?}"
        );
        let [winner] = winners[..] else {
            panic!("race {race}: {} winners: {replies:?}", winners.len())
        };
        let mut conn = Client::connect(addr).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            get(&mut conn, &format!("@@players_by_email.{contested}")),
            Some(format!("{winner}|p{winner}|1")),
            "race {race}"
        );
        for (id, _) in replies.iter().filter(|(id, _)| *id != winner) {
            assert_eq!(get(&mut conn, &format!("@@players.{id}")), None);
        }
    }
}
