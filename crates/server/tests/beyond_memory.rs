//! Data larger than `-m`: values that do not fit leave memory and are read back from the
//! log when wanted, by gets, multi-gets, appends and incrs, before and after a restart;
//! the index and the values in memory stay within the budget.

use std::collections::HashMap;

use kura_testkit::{kura_bin, Client, Durability, KuraOptions, KuraServer};

const KEYS: usize = 3000;
const VALUE_BYTES: usize = 4096;
/// 3000 values of 4 KiB are 12 MiB: three times the budget.
const MEMORY_MIB: &str = "4";

fn value_of(i: usize) -> Vec<u8> {
    let mut value = format!("value-{i}-").into_bytes();
    value.resize(VALUE_BYTES, b'a' + (i % 26) as u8);
    value
}

fn stats(client: &mut Client) -> HashMap<String, u64> {
    let reply = client
        .request(b"stats\r\n", b"END\r\n")
        .unwrap_or_else(|e| panic!("stats: {e}"));
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let (_, name, value) = (parts.next()?, parts.next()?, parts.next()?);
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn connect(server: &KuraServer) -> Client {
    Client::connect(server.addr()).unwrap_or_else(|e| panic!("connect: {e}"))
}

/// Stores every key, 100 to a burst.
fn load(client: &mut Client) {
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(100) {
        let mut burst = Vec::new();
        for &i in chunk {
            burst.extend_from_slice(format!("set k{i} {i} 0 {VALUE_BYTES}\r\n").as_bytes());
            burst.extend_from_slice(&value_of(i));
            burst.extend_from_slice(b"\r\n");
        }
        burst.extend_from_slice(b"mn\r\n");
        let reply = client
            .request(&burst, b"MN\r\n")
            .unwrap_or_else(|e| panic!("sets: {e}"));
        let mut expected = b"STORED\r\n".repeat(chunk.len());
        expected.extend_from_slice(b"MN\r\n");
        assert!(reply == expected, "sets refused");
    }
}

/// Every key, fetched 50 to a request, has its value.
fn check_all(client: &mut Client) {
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(50) {
        let mut request = b"get".to_vec();
        for i in chunk {
            request.extend_from_slice(format!(" k{i}").as_bytes());
        }
        request.extend_from_slice(b"\r\n");
        let reply = client
            .request(&request, b"END\r\n")
            .unwrap_or_else(|e| panic!("get: {e}"));
        let mut expected = Vec::new();
        for &i in chunk {
            expected.extend_from_slice(format!("VALUE k{i} {i} {VALUE_BYTES}\r\n").as_bytes());
            expected.extend_from_slice(&value_of(i));
            expected.extend_from_slice(b"\r\n");
        }
        expected.extend_from_slice(b"END\r\n");
        assert!(
            reply == expected,
            "multi-get of k{}..k{} differs",
            chunk[0],
            chunk[chunk.len() - 1]
        );
    }
}

#[test]
fn data_three_times_the_memory_limit_is_served_from_disk() {
    three_times_the_memory_limit("io-uring");
}

/// The same with the reader threads reading in place of the workers' rings.
#[test]
fn data_three_times_the_memory_limit_is_served_by_reader_threads() {
    three_times_the_memory_limit("threads");
}

/// Loads three times `-m`, reads it all back (each value whole and right), changes
/// values that are out of memory, and crash-restarts, with `--cold-reads` as `mode`.
fn three_times_the_memory_limit(mode: &str) {
    let base = tempfile::Builder::new()
        .prefix("beyond-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("temp dir: {e}"));
    let mut server = KuraOptions::new(kura_bin(env!("CARGO_BIN_EXE_kura")), Durability::Fsync)
        .arg("-m")
        .arg(MEMORY_MIB)
        .arg("--cold-reads")
        .arg(mode)
        .start_on(base.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let mut client = connect(&server);
    load(&mut client);
    let before = stats(&mut client);
    let budget = 4u64 << 20;
    assert_eq!(before["limit_maxbytes"], budget);
    assert_eq!(before["curr_items"], KEYS as u64);
    assert!(before["value_evictions"] > 0, "{before:?}");
    assert!(
        before["index_bytes"] + before["value_cache_bytes"] <= budget,
        "over the budget: {before:?}"
    );
    assert!(before["rss_bytes"] > 0);

    check_all(&mut client);
    let after = stats(&mut client);
    assert!(
        after["value_reads"] > 0,
        "nothing was read from disk: {after:?}"
    );
    // Every worker has a ring on this kernel; with the threads none is used.
    if mode == "io-uring" {
        assert!(
            after["io_uring_reads"] > 0,
            "no read went through io_uring: {after:?}"
        );
    } else {
        assert_eq!(after["io_uring_reads"], 0, "{after:?}");
    }
    assert!(
        after["index_bytes"] + after["value_cache_bytes"] <= budget,
        "reads pushed it over the budget: {after:?}"
    );

    // Read-modify-writes of values out of memory: incr and append.
    let reply = client
        .request(b"set n 0 0 2\r\n41\r\n", b"\r\n")
        .unwrap_or_else(|e| panic!("set: {e}"));
    assert_eq!(reply, b"STORED\r\n");
    // Push `n` out of memory by reading everything once more, then increment it.
    check_all(&mut client);
    let reply = client
        .request(b"incr n 1\r\n", b"\r\n")
        .unwrap_or_else(|e| panic!("incr: {e}"));
    assert_eq!(reply, b"42\r\n");
    let reply = client
        .request(b"append k7 0 0 3\r\nxyz\r\nget k7\r\n", b"END\r\n")
        .unwrap_or_else(|e| panic!("append: {e}"));
    let mut expected = b"STORED\r\nVALUE k7 7 4099\r\n".to_vec();
    expected.extend_from_slice(&value_of(7));
    expected.extend_from_slice(b"xyz\r\nEND\r\n");
    assert!(reply == expected, "append to a value on disk");

    // After a crash, replay keeps what fits and leaves the rest on disk.
    server.kill().unwrap_or_else(|e| panic!("kill: {e}"));
    server.restart().unwrap_or_else(|e| panic!("restart: {e}"));
    let mut client = connect(&server);
    let restarted = stats(&mut client);
    assert_eq!(restarted["curr_items"], KEYS as u64 + 1);
    assert!(
        restarted["index_bytes"] + restarted["value_cache_bytes"] <= budget,
        "replay went over the budget: {restarted:?}"
    );
    let reply = client
        .request(b"get k7 n\r\n", b"END\r\n")
        .unwrap_or_else(|e| panic!("get: {e}"));
    let mut expected = b"VALUE k7 7 4099\r\n".to_vec();
    expected.extend_from_slice(&value_of(7));
    expected.extend_from_slice(b"xyz\r\nVALUE n 0 2\r\n42\r\nEND\r\n");
    assert!(reply == expected, "after restart");
}

/// SIGTERM while connections have reads of values out of memory in flight (the whole
/// key space asked for at once on several connections, replies left unread): Kura
/// exits cleanly (its rings wait for the reads the kernel still fills), and every
/// value is there after a restart.
#[test]
fn sigterm_with_cold_reads_in_flight_exits_cleanly() {
    let base = tempfile::Builder::new()
        .prefix("beyond-term-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("temp dir: {e}"));
    let mut server = KuraOptions::new(kura_bin(env!("CARGO_BIN_EXE_kura")), Durability::Fsync)
        .arg("-m")
        .arg(MEMORY_MIB)
        .start_on(base.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let mut client = connect(&server);
    load(&mut client);
    assert!(stats(&mut client)["value_evictions"] > 0);
    let mut readers: Vec<Client> = (0..8).map(|_| connect(&server)).collect();
    for (n, reader) in readers.iter_mut().enumerate() {
        let mut request = Vec::new();
        for chunk in (0..KEYS).collect::<Vec<_>>().chunks(100) {
            request.extend_from_slice(b"get");
            // Each connection starts elsewhere in the key space.
            for i in chunk {
                request.extend_from_slice(format!(" k{}", (i + n * 397) % KEYS).as_bytes());
            }
            request.extend_from_slice(b"\r\n");
        }
        reader
            .send(&request)
            .unwrap_or_else(|e| panic!("send: {e}"));
    }
    let status = server
        .terminate()
        .unwrap_or_else(|e| panic!("terminate: {e}"));
    assert!(
        status.success(),
        "kura exited with {status} after SIGTERM:\n{}",
        server.log()
    );
    drop(readers);
    server.restart().unwrap_or_else(|e| panic!("restart: {e}"));
    let mut client = connect(&server);
    check_all(&mut client);
}

/// Every key keeps a slot in memory: once the slots alone fill `-m`, a store of a new
/// key is refused as memcached -M refuses it, and nothing stored is lost; a store to a
/// key already there still goes in.
#[test]
fn keys_that_fill_the_budget_refuse_new_keys_only() {
    let base = tempfile::Builder::new()
        .prefix("beyond-keys-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap_or_else(|e| panic!("temp dir: {e}"));
    let server = KuraOptions::new(kura_bin(env!("CARGO_BIN_EXE_kura")), Durability::Interval)
        .arg("-m")
        .arg("1")
        .start_on(base.path())
        .unwrap_or_else(|e| panic!("start: {e}"));
    let mut client = connect(&server);
    // Sets in pipelined batches, each closed by a no-op, until one is refused: at 8 to
    // 16 bytes a key, 1 MiB holds tens of thousands.
    const BATCH: usize = 1000;
    let mut stored = 0;
    let refused = 'fill: loop {
        assert!(stored < 400_000, "1 MiB never filled");
        let mut batch = Vec::new();
        for i in stored..stored + BATCH {
            batch.extend_from_slice(format!("set key{i} 0 0 1\r\nx\r\n").as_bytes());
        }
        batch.extend_from_slice(b"mn\r\n");
        let reply = client
            .request(&batch, b"MN\r\n")
            .unwrap_or_else(|e| panic!("set: {e}"));
        for line in reply.split_inclusive(|&b| b == b'\n') {
            if line == b"MN\r\n" {
                break;
            }
            if line != b"STORED\r\n" {
                break 'fill line.to_vec();
            }
            stored += 1;
        }
    };
    assert_eq!(refused, b"SERVER_ERROR out of memory storing object\r\n");
    assert!(stored > 100, "refused after {stored} keys");
    let reply = client
        .request(b"set key0 0 0 3\r\nnew\r\nget key0\r\n", b"END\r\n")
        .unwrap_or_else(|e| panic!("overwrite: {e}"));
    assert_eq!(reply, b"STORED\r\nVALUE key0 0 3\r\nnew\r\nEND\r\n");
    let last = format!("get key{}\r\n", stored - 1);
    let reply = client
        .request(last.as_bytes(), b"END\r\n")
        .unwrap_or_else(|e| panic!("get: {e}"));
    assert!(reply.starts_with(b"VALUE"), "a stored key was lost");
}

/// `--checkpoint-log-mib`: a log that grows by that much gets a checkpoint without
/// waiting for `--checkpoint-secs`, so a restart after a SIGKILL reads the checkpoint
/// and only the log after it, and loses nothing acknowledged.
#[test]
fn log_growth_brings_a_checkpoint_that_a_crash_restart_reads() {
    let mut kura = KuraOptions::new(kura_bin(env!("CARGO_BIN_EXE_kura")), Durability::Fsync)
        .arg("--checkpoint-secs")
        .arg("3600")
        .arg("--checkpoint-log-mib")
        .arg("1")
        .start()
        .unwrap_or_else(|e| panic!("start: {e}"));
    let mut c = connect(&kura);
    // 3000 values of 4 KiB: 12 MiB of log, past the 1 MiB growth many times over.
    for i in 0..KEYS {
        let value = value_of(i);
        let mut request = format!("set k{i} {i} 0 {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        let reply = c
            .request(&request, b"\r\n")
            .unwrap_or_else(|e| panic!("set: {e}"));
        assert_eq!(reply, b"STORED\r\n");
    }
    // The maintenance thread looks once a second; a loaded machine gets a minute.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while stats(&mut c)["checkpoints"] == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint after 12 MiB of log"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    kura.restart()
        .unwrap_or_else(|e| panic!("restart after SIGKILL: {e}"));
    let mut c = connect(&kura);
    assert!(
        stats(&mut c)["checkpoint_restored_keys"] > 0,
        "the restart did not read the checkpoint"
    );
    check_all(&mut c);
}
