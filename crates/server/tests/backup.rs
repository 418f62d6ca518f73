//! `kura backup`, `kura backup verify` and `kura restore` against a real primary.
//!
//! What is shown: a backup taken while two writers set (random flags, no expiry or a
//! far-off absolute one), overwrite and delete keys, on a primary with 1 MiB
//! segments that compacts meanwhile, and then restored and started, holds every write
//! acknowledged before the backup process was started, with its value, flags, CAS and
//! expiry; a key deleted before then stays deleted; a key changed later holds one of
//! the versions acknowledged for it, never an older one. The restored node is a
//! primary in a new epoch and takes writes; the source never counted the backup as a
//! replica. `verify` passes on a fresh backup and names the file after a byte of a
//! segment is flipped, or the manifest is damaged, or a file is added, or a record is
//! damaged under a manifest made to match it; `restore` refuses such a backup and a
//! target that is not empty. A primary that holds nothing backs up with its history;
//! one with a users file is backed up with `--replication-login` (an admin's), and refuses a
//! backup without it before any directory is made. A table's rows, a deleted row, a
//! unique index and an ordered index's range read the same on the restored node.

#![allow(clippy::expect_used)]

mod replicas;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kura_testkit::{crash_seed, kura_bin, Client, KuraServer, ReplyEnd};
use replicas::{client, data_dir, options, replication_stats, request, HUNG_AFTER};

/// What a key holds after one acknowledged change.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Absent,
    Holds {
        value: String,
        flags: u32,
        cas: u64,
        /// Absolute Unix seconds, or 0 for none.
        exptime: u64,
    },
}

/// One acknowledged change of a key, and when its acknowledgement arrived.
#[derive(Debug, Clone)]
struct Acked {
    state: State,
    at: Instant,
}

/// Every key's acknowledged changes, in order (each key has one writer).
type Journal = BTreeMap<String, Vec<Acked>>;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

fn kura(args: &[&str]) -> Output {
    let bin = kura_bin(env!("CARGO_BIN_EXE_kura"));
    Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", bin.display()))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs kura with `args` and expects it to succeed; returns its stdout.
fn kura_ok(args: &[&str]) -> String {
    let out = kura(args);
    assert!(
        out.status.success(),
        "kura {args:?}: {}\nstdout: {}\nstderr: {}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Runs kura with `args` and expects it to fail; returns its stderr.
fn kura_fails(args: &[&str]) -> String {
    let out = kura(args);
    assert!(
        !out.status.success(),
        "kura {args:?} succeeded\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

/// Sets `key` with a meta set that returns the CAS, or deletes it; returns the state
/// the server acknowledged.
fn change(c: &mut Client, rng: &mut Rng, key: &str, round: u64) -> State {
    if rng.below(5) == 0 {
        let reply = request(c, format!("md {key}\r\n").as_bytes(), b"\r\n");
        assert!(
            reply == "HD\r\n" || reply == "NF\r\n",
            "md {key}: {reply:?}"
        );
        return State::Absent;
    }
    let value = format!("{key}-{round}-{}", "v".repeat(rng.below(3000) as usize));
    let flags = rng.next() as u32;
    let exptime = match rng.below(2) {
        0 => 0,
        // Absolute (past memcached's 30 days), a day or more away.
        _ => unix_now() + 86_400 + rng.below(100_000),
    };
    let reply = request(
        c,
        format!(
            "ms {key} {} F{flags} T{exptime} c\r\n{value}\r\n",
            value.len()
        )
        .as_bytes(),
        b"\r\n",
    );
    let cas = reply
        .strip_prefix("HD c")
        .and_then(|r| r.strip_suffix("\r\n"))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("ms {key}: {reply:?}"));
    State::Holds {
        value,
        flags,
        cas,
        exptime,
    }
}

/// Changes keys `w<writer>-0..200` until `stop`, journalling each acknowledged change.
fn writer(addr: std::net::SocketAddr, writer: u64, seed: u64, stop: &AtomicBool) -> Journal {
    let mut c = Client::connect(addr).expect("connect");
    let mut rng = Rng(seed ^ (writer + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut journal = Journal::new();
    let mut round = 0;
    while !stop.load(Ordering::Acquire) {
        let key = format!("w{writer}-{}", rng.below(200));
        let state = change(&mut c, &mut rng, &key, round);
        journal.entry(key).or_default().push(Acked {
            state,
            at: Instant::now(),
        });
        round += 1;
    }
    journal
}

/// What `key` holds on the server (`mg key v f c t`), with its expiry made absolute
/// against the interval around the request.
fn read_back(c: &mut Client, key: &str) -> (State, std::ops::RangeInclusive<u64>) {
    let before = unix_now();
    c.send(format!("mg {key} v f c t\r\n").as_bytes())
        .expect("send");
    let mut reply = c
        .read_reply_until_suffix(b"\r\n", HUNG_AFTER)
        .expect("read");
    assert_eq!(reply.end, ReplyEnd::Suffix, "mg {key}");
    let mut bytes = text(&reply.bytes);
    if bytes.starts_with("VA ") && bytes.matches("\r\n").count() < 2 {
        reply = c
            .read_reply_until_suffix(b"\r\n", HUNG_AFTER)
            .expect("read");
        bytes.push_str(&text(&reply.bytes));
    }
    let after = unix_now();
    if bytes == "EN\r\n" {
        return (State::Absent, 0..=0);
    }
    let (header, value) = bytes
        .strip_suffix("\r\n")
        .and_then(|b| b.split_once("\r\n"))
        .unwrap_or_else(|| panic!("mg {key}: {bytes:?}"));
    let field = |c: char| {
        header
            .split(' ')
            .find_map(|f| f.strip_prefix(c))
            .unwrap_or_else(|| panic!("mg {key}: no {c} in {header:?}"))
    };
    let ttl: i64 = field('t').parse().expect("t");
    let state = State::Holds {
        value: value.to_string(),
        flags: field('f').parse().expect("f"),
        cas: field('c').parse().expect("c"),
        exptime: 0,
    };
    // The server's clock reads whole seconds: allow one either side.
    let expiry = if ttl < 0 {
        0..=0
    } else {
        (before + ttl as u64 - 1)..=(after + ttl as u64 + 1)
    };
    (state, expiry)
}

/// Whether what the server holds is `expected`, expiry within `expiry`.
fn is(held: &State, expiry: &std::ops::RangeInclusive<u64>, expected: &State) -> bool {
    match (held, expected) {
        (State::Absent, State::Absent) => true,
        (
            State::Holds {
                value, flags, cas, ..
            },
            State::Holds {
                value: v,
                flags: f,
                cas: c,
                exptime,
            },
        ) => {
            (value, flags, cas) == (v, f, c)
                && if *exptime == 0 {
                    *expiry == (0..=0)
                } else {
                    expiry.contains(exptime)
                }
        }
        _ => false,
    }
}

#[test]
fn a_backup_under_writes_restores_every_write_acknowledged_before_it_began() {
    let seed = crash_seed();
    let (pdir, work) = (data_dir("backup-primary-"), data_dir("backup-work-"));
    let primary = options()
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (addr, stop) = (primary.addr(), Arc::clone(&stop));
            std::thread::spawn(move || writer(addr, w, seed, &stop))
        })
        .collect();
    // Several segments' worth of writes first, so the log has rolled and compaction
    // has had garbage to take.
    let deadline = Instant::now() + HUNG_AFTER;
    while replicas::stat(&primary, "log_lsn") < 4 << 20
        || general_stat(&primary, "compactions") == 0
    {
        assert!(
            Instant::now() < deadline,
            "the writers wrote too little, or nothing was compacted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let backup = work.path().join("backup");
    let backup_arg = backup.to_str().expect("path");
    let began = Instant::now();
    let out = kura_ok(&[
        "backup",
        "--from",
        &primary.addr().to_string(),
        "--to",
        backup_arg,
    ]);
    let ended = Instant::now();
    stop.store(true, Ordering::Release);
    let mut journal = Journal::new();
    for w in writers {
        journal.extend(w.join().expect("a writer panicked"));
    }
    let point: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("backup point "))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no point in {out:?}"));
    let during = journal
        .values()
        .flatten()
        .filter(|a| a.at > began && a.at < ended)
        .count();
    assert!(during > 0, "no write was acknowledged while the backup ran");
    let source = replication_stats(&primary);
    assert_eq!(source["connected_replicas"], "0", "{source:?}");
    assert!(source["full_syncs_served"] != "0", "{source:?}");
    println!(
        "backup point {point}; {during} writes acknowledged while it ran; {} compactions",
        general_stat(&primary, "compactions")
    );

    kura_ok(&["backup", "verify", backup_arg]);
    let restored = work.path().join("restored");
    let restored_arg = restored.to_str().expect("path");
    kura_ok(&["restore", "--from", backup_arg, "--to", restored_arg]);
    let node = options()
        .start_on(&restored)
        .unwrap_or_else(|e| panic!("start the restored node: {e}"));
    let mut c = client(&node);
    let mut checked = 0;
    for (key, changes) in &journal {
        let (held, expiry) = read_back(&mut c, key);
        // The last change acknowledged before the backup began, and every later one,
        // may be what the backup holds; nothing older.
        let first = changes.iter().rposition(|a| a.at < began);
        let mut allowed: Vec<&State> = changes[first.unwrap_or(0)..]
            .iter()
            .map(|a| &a.state)
            .collect();
        if first.is_none() {
            allowed.push(&State::Absent);
        }
        assert!(
            allowed.iter().any(|s| is(&held, &expiry, s)),
            "{key} holds {held:?} (expiry in {expiry:?}); acknowledged before the backup: {:?}; allowed: {allowed:#?}",
            first.map(|i| &changes[i].state)
        );
        checked += usize::from(first.is_some());
    }
    assert!(
        checked > 100,
        "only {checked} keys were written before the backup"
    );

    // The restored node is a primary in a new epoch, and takes writes.
    let stats = replication_stats(&node);
    let original = replication_stats(&primary);
    assert_eq!(stats["role"], "primary", "{stats:?}");
    assert_eq!(stats["history_id"], original["history_id"]);
    assert!(
        stats["epoch"].parse::<u64>().expect("epoch")
            > original["epoch"].parse::<u64>().expect("epoch"),
        "restored {stats:?}, original {original:?}"
    );
    assert_eq!(
        request(&mut c, b"ms after-restore 2 T0\r\nok\r\n", b"\r\n"),
        "HD\r\n"
    );
    assert_eq!(
        request(&mut c, b"mg after-restore v\r\n", b"ok\r\n"),
        "VA 2\r\nok\r\n"
    );
}

/// A number from `stats`.
fn general_stat(server: &KuraServer, name: &str) -> u64 {
    let stats = request(&mut client(server), b"stats\r\n", b"END\r\n");
    stats
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in stats"))
}

/// Flips one bit of the file at `path`, at `offset`.
fn flip(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[offset as usize] ^= 0x10;
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn verify_names_a_damaged_file_and_restore_refuses_damage_and_a_full_target() {
    let (pdir, work) = (data_dir("backup-primary-"), data_dir("backup-work-"));
    let primary: KuraServer = options()
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let mut c = client(&primary);
    for i in 0..100 {
        let value = format!("value-{i}");
        request(
            &mut c,
            format!("set k{i} {i} 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
            b"STORED\r\n",
        );
    }
    let backup = work.path().join("backup");
    let b = backup.to_str().expect("path");
    let from = primary.addr().to_string();
    kura_ok(&["backup", "--from", &from, "--to", b]);
    let verified = kura_ok(&["backup", "verify", b]);
    assert!(verified.contains("is whole"), "{verified}");
    // A backup goes only into an empty directory.
    let refused = kura_fails(&["backup", "--from", &from, "--to", b]);
    assert!(refused.contains("is not empty"), "{refused}");

    // A restore goes only into an empty directory, and leaves it as it was.
    let full = work.path().join("full");
    std::fs::create_dir(&full).expect("mkdir");
    std::fs::write(full.join("something"), b"x").expect("write");
    let refused = kura_fails(&["restore", "--from", b, "--to", full.to_str().expect("path")]);
    assert!(refused.contains("is not empty"), "{refused}");
    assert_eq!(
        std::fs::read_dir(&full).expect("read").count(),
        1,
        "the full target was changed"
    );

    // One flipped bit in a segment: verify names the segment, restore refuses.
    let segment = std::fs::read_dir(&backup)
        .expect("read")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .expect("a segment in the backup");
    let size = std::fs::metadata(&segment).expect("stat").len();
    flip(&segment, size.min(4096) / 2);
    let named = segment.file_name().and_then(|n| n.to_str()).expect("name");
    let damaged = kura_fails(&["backup", "verify", b]);
    assert!(
        damaged.contains(named) && damaged.contains("CRC-32C"),
        "{damaged}"
    );
    let target = work.path().join("restored");
    let t = target.to_str().expect("path");
    let refused = kura_fails(&["restore", "--from", b, "--to", t]);
    assert!(
        refused.contains(named) && refused.contains("not restoring"),
        "{refused}"
    );
    assert!(!target.exists(), "a refused restore made {t}");
    flip(&segment, size.min(4096) / 2);
    kura_ok(&["backup", "verify", b]);

    // A damaged record in a manifest made to match it: the record walk names it.
    let manifest_text = std::fs::read_to_string(backup.join("MANIFEST")).expect("manifest");
    flip(&segment, 40);
    let (size, crc) = {
        let bytes = std::fs::read(&segment).expect("read");
        (bytes.len(), crc32c::crc32c(&bytes))
    };
    let mut forged: String = manifest_text
        .lines()
        .filter(|l| !l.starts_with("crc32c "))
        .map(|l| {
            if l.starts_with(&format!("file {named} ")) {
                format!("file {named} {size} {crc:08x}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    forged.push_str(&format!(
        "crc32c {:08x}\n",
        crc32c::crc32c(forged.as_bytes())
    ));
    assert_ne!(forged, manifest_text);
    std::fs::write(backup.join("MANIFEST"), &forged).expect("write");
    let damaged = kura_fails(&["backup", "verify", b]);
    assert!(
        damaged.contains(named) && damaged.contains("the record at offset 32 is damaged"),
        "{damaged}"
    );
    flip(&segment, 40);
    std::fs::write(backup.join("MANIFEST"), &manifest_text).expect("write");
    kura_ok(&["backup", "verify", b]);

    // A file the manifest does not list, and a damaged manifest.
    std::fs::write(backup.join("0000000000000fff.log"), b"stray").expect("write");
    let stray = kura_fails(&["backup", "verify", b]);
    assert!(
        stray.contains("0000000000000fff.log: not in the manifest"),
        "{stray}"
    );
    std::fs::remove_file(backup.join("0000000000000fff.log")).expect("remove");
    flip(&backup.join("MANIFEST"), 30);
    let manifest = kura_fails(&["backup", "verify", b]);
    assert!(
        manifest.contains("MANIFEST") && manifest.contains("damaged"),
        "{manifest}"
    );
}

#[test]
fn a_primary_that_holds_nothing_yet_backs_up_and_restores_to_an_empty_primary() {
    let (pdir, work) = (data_dir("backup-primary-"), data_dir("backup-work-"));
    let primary = options()
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let backup = work.path().join("backup");
    let b = backup.to_str().expect("path");
    let out = kura_ok(&["backup", "--from", &primary.addr().to_string(), "--to", b]);
    assert!(out.starts_with("backup point 0\n"), "{out}");
    let manifest = std::fs::read_to_string(backup.join("MANIFEST")).expect("manifest");
    let original = replication_stats(&primary);
    assert!(
        manifest.contains(&format!("\nhistory {}\n", original["history_id"])),
        "{manifest}"
    );
    let restored = work.path().join("restored");
    kura_ok(&[
        "restore",
        "--from",
        b,
        "--to",
        restored.to_str().expect("path"),
    ]);
    let node = options()
        .start_on(&restored)
        .unwrap_or_else(|e| panic!("start the restored node: {e}"));
    let mut c = client(&node);
    assert_eq!(request(&mut c, b"mg anything v\r\n", b"\r\n"), "EN\r\n");
    assert_eq!(request(&mut c, b"ms k 1 T0\r\nv\r\n", b"\r\n"), "HD\r\n");
    assert_eq!(replication_stats(&node)["epoch"], "2");
}

#[test]
fn a_backup_logs_in_to_a_primary_with_a_users_file() {
    let work = data_dir("backup-work-");
    let users = work.path().join("users");
    std::fs::write(&users, "ann:secret\n").expect("write");
    let admins = work.path().join("admins");
    std::fs::write(&admins, "repl:r3pl\n").expect("write");
    let login = work.path().join("login");
    std::fs::write(&login, "repl:r3pl\n").expect("write");
    let primary = options()
        .arg("-Y")
        .arg(&users)
        .arg("--admin-auth-file")
        .arg(&admins)
        .start()
        .unwrap_or_else(|e| panic!("start: {e}"));
    let mut c = client(&primary);
    assert_eq!(
        request(&mut c, b"set x 0 0 10\r\nann secret\r\n", b"\r\n"),
        "STORED\r\n"
    );
    assert_eq!(
        request(&mut c, b"set k 0 0 5\r\nhello\r\n", b"\r\n"),
        "STORED\r\n"
    );
    let from = primary.addr().to_string();
    let without = work.path().join("without");
    let refused = kura_fails(&[
        "backup",
        "--from",
        &from,
        "--to",
        without.to_str().expect("path"),
    ]);
    assert!(refused.contains("unauthenticated"), "{refused}");
    assert!(!without.exists(), "a refused backup made its directory");
    let backup = work.path().join("backup");
    let b = backup.to_str().expect("path");
    let login = login.to_str().expect("path");
    kura_ok(&[
        "backup",
        "--from",
        &from,
        "--to",
        b,
        "--replication-login",
        login,
    ]);
    let restored = work.path().join("restored");
    kura_ok(&[
        "restore",
        "--from",
        b,
        "--to",
        restored.to_str().expect("path"),
    ]);
    let node = options()
        .start_on(&restored)
        .unwrap_or_else(|e| panic!("start the restored node: {e}"));
    assert_eq!(
        request(&mut client(&node), b"mg k v\r\n", b"hello\r\n"),
        "VA 5\r\nhello\r\n"
    );
}

#[test]
fn a_backup_holds_the_tables_rows_and_their_indexes() {
    let (pdir, work) = (data_dir("backup-primary-"), data_dir("backup-work-"));
    let schema = work.path().join("schema.sql");
    std::fs::write(
        &schema,
        "CREATE TABLE players (id INT NOT NULL, name VARCHAR(32) NOT NULL, \
         level INT NOT NULL, PRIMARY KEY (id), UNIQUE KEY name (name), KEY level (level));\n",
    )
    .expect("write");
    let primary = options()
        .arg("--schema")
        .arg(&schema)
        .start_on(pdir.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let mut c = client(&primary);
    for i in 0..100 {
        let value = format!("p{i}|{}", i % 30);
        let reply = request(
            &mut c,
            format!("set @@players.{i} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes(),
            b"\r\n",
        );
        assert_eq!(reply, "STORED\r\n");
    }
    assert_eq!(
        request(&mut c, b"delete @@players.7\r\n", b"\r\n"),
        "DELETED\r\n"
    );
    let backup = work.path().join("backup");
    let b = backup.to_str().expect("path");
    kura_ok(&["backup", "--from", &primary.addr().to_string(), "--to", b]);
    let restored = work.path().join("restored");
    kura_ok(&[
        "restore",
        "--from",
        b,
        "--to",
        restored.to_str().expect("path"),
    ]);
    let node = options()
        .start_on(&restored)
        .unwrap_or_else(|e| panic!("start the restored node: {e}"));
    let mut r = client(&node);
    for key in [
        "@@players.3",
        "@@players.7",
        "@@players_by_name.p42",
        "@@players_by_level.@>=10@<20",
    ] {
        let get = format!("get {key}\r\n");
        // A range is one item whose value ends with its own END line.
        let end: &[u8] = if key.contains(".@") {
            b"END\r\n\r\nEND\r\n"
        } else {
            b"END\r\n"
        };
        let shown = request(&mut c, get.as_bytes(), end);
        assert_eq!(request(&mut r, get.as_bytes(), end), shown, "{key}");
    }
    let range = request(
        &mut r,
        b"get @@players_by_level.@>=10@<20\r\n",
        b"END\r\n\r\nEND\r\n",
    );
    assert_eq!(range.matches("\r\nROW ").count(), 30, "{range}");
}
