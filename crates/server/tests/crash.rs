//! A real `kura` process, SIGKILLed at random moments under load, round after round.
//!
//! Clients write over many connections with fsync durability and keep a ledger of every
//! reply they received. After each restart every acknowledged write is there with its
//! value and flags, every acknowledged delete stays deleted, the one request per client
//! that was in flight at the kill may or may not have landed, and a new write's CAS is
//! above every CAS seen before: CAS never goes backwards.
//!
//! The data directory lives under Cargo's target directory, on a real disk (never
//! tmpfs, where fsync does nothing); the test checks. The seed is printed; set
//! `KURA_SEED` to replay.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kura_testkit::{
    assert_not_tmpfs, crash_seed, kill_under_load, kura_bin, Durability, KuraOptions,
};
use rand::{Rng, SeedableRng};

const CLIENTS: usize = 16;
const ROUNDS: usize = 6;
const KEYS_PER_CLIENT: u32 = 40;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Set {
        key: String,
        value: Vec<u8>,
        flags: u32,
    },
    Delete {
        key: String,
    },
}

#[derive(Debug, Default)]
struct Ledger {
    /// key -> Some((value, flags)) if an acknowledged set is its last word, None if an
    /// acknowledged delete is.
    acked: HashMap<String, Option<(Vec<u8>, u32)>>,
    in_flight: Option<Op>,
    writes: u64,
}

struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(addr: SocketAddr) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Conn {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line)
    }

    fn request(&mut self, bytes: &[u8]) -> std::io::Result<String> {
        self.writer.write_all(bytes)?;
        self.line()
    }

    /// `gets key`: (value, flags, cas) or None.
    fn gets(&mut self, key: &str) -> std::io::Result<Option<(Vec<u8>, u32, u64)>> {
        let header = self.request(format!("gets {key}\r\n").as_bytes())?;
        if header == "END\r\n" {
            return Ok(None);
        }
        let parts: Vec<&str> = header.split_whitespace().collect();
        let [_, _, flags, len, cas] = parts[..] else {
            panic!("bad gets header {header:?}");
        };
        let len: usize = len.parse().unwrap_or(0);
        let mut value = vec![0; len + 2];
        self.reader.read_exact(&mut value)?;
        value.truncate(len);
        assert_eq!(self.line()?, "END\r\n");
        Ok(Some((
            value,
            flags.parse().unwrap_or(0),
            cas.parse().unwrap_or(0),
        )))
    }
}

fn client(addr: SocketAddr, id: usize, ledger: Arc<Mutex<Ledger>>, seed: u64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let Ok(mut conn) = Conn::open(addr) else {
        return;
    };
    loop {
        let key = format!("c{id}-k{}", rng.gen_range(0..KEYS_PER_CLIENT));
        let op = if rng.gen_ratio(1, 8) {
            Op::Delete { key }
        } else {
            let len = rng.gen_range(1..3000);
            let value: Vec<u8> = (0..len).map(|_| rng.gen_range(b'!'..=b'~')).collect();
            Op::Set {
                key,
                value,
                flags: rng.gen(),
            }
        };
        ledger.lock().unwrap_or_else(|e| e.into_inner()).in_flight = Some(op.clone());
        let reply = match &op {
            Op::Set { key, value, flags } => {
                let mut bytes = format!("set {key} {flags} 0 {}\r\n", value.len()).into_bytes();
                bytes.extend_from_slice(value);
                bytes.extend_from_slice(b"\r\n");
                conn.request(&bytes)
            }
            Op::Delete { key } => conn.request(format!("delete {key}\r\n").as_bytes()),
        };
        // A kill ends the loop: the connection closes mid-request.
        let Ok(reply) = reply else { return };
        let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
        match (&op, reply.as_str()) {
            (Op::Set { key, value, flags }, "STORED\r\n") => {
                ledger
                    .acked
                    .insert(key.clone(), Some((value.clone(), *flags)));
            }
            (Op::Delete { key }, "DELETED\r\n" | "NOT_FOUND\r\n") => {
                ledger.acked.insert(key.clone(), None);
            }
            (_, other) => panic!("unexpected reply {other:?} to {op:?}"),
        }
        ledger.in_flight = None;
        ledger.writes += 1;
    }
}

/// A short form of a ledger entry for failure messages.
fn describe(entry: &Option<(Vec<u8>, u32)>) -> String {
    match entry {
        None => "absent".to_string(),
        Some((value, flags)) => {
            let head = String::from_utf8_lossy(&value[..value.len().min(24)]).into_owned();
            format!("{} bytes {head:?}… flags {flags}", value.len())
        }
    }
}

#[test]
fn acknowledged_writes_survive_sigkill_under_load_with_fsync() {
    crash_rounds(Durability::Fsync);
}

/// Interval mode promises to survive a killed process (not a power loss): a reply goes
/// out once the write reached the operating system, which keeps it when the process dies.
#[test]
fn acknowledged_writes_survive_sigkill_under_load_with_interval_fsync() {
    crash_rounds(Durability::Interval);
}

fn crash_rounds(durability: Durability) {
    let seed = crash_seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let base = tempfile::Builder::new()
        .prefix("crash-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("temp dir: {e}"));
    assert_not_tmpfs(base.path());
    let options = KuraOptions::new(kura_bin(env!("CARGO_BIN_EXE_kura")), durability)
        .arg("--segment-size-mib")
        .arg("1");
    let mut server = options
        .start_on(base.path())
        .unwrap_or_else(|e| panic!("start kura: {e}"));
    let ledgers: Vec<Arc<Mutex<Ledger>>> = (0..CLIENTS)
        .map(|_| Arc::new(Mutex::new(Ledger::default())))
        .collect();
    // The highest CAS any client has seen, and each key's, from `gets` at each check.
    let mut cas_seen = 0u64;
    let mut cas_by_key: HashMap<String, u64> = HashMap::new();
    for round in 0..ROUNDS {
        if round > 0 {
            server
                .restart()
                .unwrap_or_else(|e| panic!("restart: {e}\n{}", server.log()));
        }
        let addr = server.addr();
        let mut check = Conn::open(addr).unwrap_or_else(|e| panic!("connect: {e}"));
        for ledger in &ledgers {
            let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
            let in_flight = ledger.in_flight.take();
            for (key, expected) in ledger.acked.clone() {
                let got = check.gets(&key).unwrap_or_else(|e| panic!("gets: {e}"));
                let got_pair = got.as_ref().map(|(v, f, _)| (v.clone(), *f));
                if let Some((_, _, cas)) = got {
                    let before = cas_by_key.insert(key.clone(), cas).unwrap_or(0);
                    assert!(
                        cas >= before,
                        "round {round}, seed {seed}: {key}'s CAS went from {before} to {cas}"
                    );
                    cas_seen = cas_seen.max(cas);
                }
                let landed = match &in_flight {
                    Some(Op::Set {
                        key: k,
                        value,
                        flags,
                    }) if *k == key => Some(Some((value.clone(), *flags))),
                    Some(Op::Delete { key: k }) if *k == key => Some(None),
                    _ => None,
                };
                if landed.as_ref() == Some(&got_pair) {
                    ledger.acked.insert(key.clone(), got_pair);
                    continue;
                }
                assert!(
                    got_pair == expected,
                    "round {round}, seed {seed}: {key} is {}, acknowledged {}",
                    describe(&got_pair),
                    describe(&expected),
                );
            }
        }
        // CAS never goes backwards: a fresh write gets a CAS above all seen before.
        let probe = check
            .request(b"set cas-probe 0 0 1\r\nx\r\n")
            .unwrap_or_default();
        assert_eq!(probe, "STORED\r\n");
        let (_, _, probe_cas) = check.gets("cas-probe").ok().flatten().unwrap_or_default();
        assert!(
            probe_cas > cas_seen,
            "round {round}: CAS {probe_cas} after {cas_seen} (seed {seed})"
        );
        cas_seen = probe_cas;
        drop(check);

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
    let writes: u64 = ledgers
        .iter()
        .map(|l| l.lock().map(|l| l.writes).unwrap_or(0))
        .sum();
    println!("{writes} acknowledged writes over {ROUNDS} kills");
    assert!(
        writes > 100,
        "only {writes} writes were acknowledged: the test proves little"
    );
}
