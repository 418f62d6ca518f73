//! The ring oracle: Kura's ring places every key where real memcached clients do.
//! Debian's libmemcached (through `tests/ring/placement.py`, `memcached_generate_hash`
//! with `MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED`) for 1 to 32 members of equal weight,
//! rings of unequal weights, members on memcached's default port 11211 and on
//! others, host names and addresses; and pylibmc with `ketama_weighted`, the client
//! users run, setting keys on 3 and 7 real memcached servers; and nutcracker with
//! `ketama` and `md5` in front of 7 memcached servers of unequal weights. Keys
//! include bytes of 0x80 and above.

use std::path::Path;

use kura_ring::{KeyHash, Member, Options, Ring};
use kura_testkit::python::run_script_with_input;
use kura_testkit::MemcachedServer;
use rand::{Rng, SeedableRng};

/// Keys a memcached client accepts: printable ASCII and bytes of 0x80 and above, no
/// space or control characters.
fn keys(n: usize) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(11211);
    let mut keys: Vec<Vec<u8>> = (0..n / 2)
        .map(|i| format!("user:{i}").into_bytes())
        .collect();
    while keys.len() < n {
        let len = rng.gen_range(1..40);
        let key = (0..len)
            .map(|_| {
                if rng.gen_bool(0.5) {
                    rng.gen_range(0x80..=0xff)
                } else {
                    rng.gen_range(0x21..0x7f)
                }
            })
            .collect();
        keys.push(key);
    }
    keys
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where `client` (`libmemcached` or `pylibmc`) places each of `keys` on each ring.
fn placed(client: &str, rings: &[Vec<Member>], keys: &[Vec<u8>]) -> Vec<Vec<usize>> {
    let spec = serde_json::json!({
        "rings": rings
            .iter()
            .map(|ring| ring.iter().map(|m| serde_json::json!([m.host, m.port, m.weight])).collect::<Vec<_>>())
            .collect::<Vec<_>>(),
        "keys": keys.iter().map(|k| hex(k)).collect::<Vec<_>>(),
    });
    let out = run_script_with_input(
        Path::new("tests/ring/placement.py"),
        &[client.to_string()],
        spec.to_string().as_bytes(),
    )
    .unwrap_or_else(|e| panic!("placement.py {client}: {e}"));
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("placement.py {client} printed {out:?}: {e}"))
}

/// Asserts that Kura's ring agrees with `client` on every key of every ring.
fn agrees(client: &str, rings: Vec<Vec<Member>>, keys: &[Vec<u8>]) {
    let theirs = placed(client, &rings, keys);
    assert_eq!(theirs.len(), rings.len());
    for (members, theirs) in rings.into_iter().zip(theirs) {
        let shown = format!("{members:?}");
        let ring = Ring::ketama_weighted(members).unwrap_or_else(|e| panic!("{e}"));
        let ours: Vec<usize> = keys.iter().map(|k| ring.owner(k)).collect();
        let differ = ours.iter().zip(&theirs).filter(|(a, b)| a != b).count();
        assert_eq!(
            differ,
            0,
            "{client} places {differ} of {} keys elsewhere on {shown}",
            keys.len()
        );
    }
}

#[test]
fn libmemcached_places_every_key_where_the_ring_does() {
    let keys = keys(2000);
    let mut rings = Vec::new();
    // 1 to 32 members of equal weight (7 and 25 among them), on the default port and
    // on others.
    for n in 1..=32u16 {
        rings.push(
            (0..n)
                .map(|i| Member::new(format!("10.0.{n}.{i}"), 11211))
                .collect(),
        );
        rings.push(
            (0..n)
                .map(|i| Member::new("127.0.0.1", 40000 + i))
                .collect(),
        );
    }
    // Unequal weights, host names, a mix of ports.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for n in [2usize, 3, 4, 5, 8, 13, 25] {
        let ring = (0..n)
            .map(|i| Member {
                host: format!("cache-{i}.example"),
                port: if i % 3 == 0 { 11211 } else { 20000 + i as u16 },
                weight: rng.gen_range(1..10),
            })
            .collect();
        rings.push(ring);
    }
    agrees("libmemcached", rings, &keys);
}

#[test]
fn pylibmc_sets_every_key_where_the_ring_places_it() {
    let keys = keys(600);
    let servers: Vec<MemcachedServer> = (0..7)
        .map(|_| MemcachedServer::start().unwrap_or_else(|e| panic!("memcached: {e}")))
        .collect();
    let member = |s: &MemcachedServer| Member::new(s.addr().ip().to_string(), s.addr().port());
    let rings = vec![
        servers[..3].iter().map(member).collect(),
        servers.iter().map(member).collect(),
    ];
    agrees("pylibmc", rings, &keys);
}

/// A child process killed and waited for when dropped, a failing test's included.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// nutcracker (twemproxy, Debian's) with `distribution: ketama` and `hash: md5` in
/// front of real memcached servers of unequal weights: every key set through it lands
/// on the server Kura's ring names.
#[test]
fn nutcracker_sets_every_key_where_the_ring_places_it() {
    through_nutcracker(&keys(600), "hash: md5", Options::default());
}

/// The ring's options as nutcracker's: `hash: fnv1a_64` (bytes of 0x80 and above
/// included) and `hash_tag: "{}"`, with keys that share a tag, an empty tag and none.
#[test]
fn nutcracker_with_fnv1a_64_and_a_hash_tag_agrees_too() {
    let mut keys = keys(400);
    for i in 0..100 {
        keys.push(format!("{{player:{}}}:field{i}", i % 7).into_bytes());
        keys.push(format!("x{{}}y{i}").into_bytes());
        // A tag of bytes 0x80 and above: "{été...}".
        keys.push(format!("{{\u{e9}t\u{e9}{}}}:{i}", i % 5).into_bytes());
    }
    let options = Options {
        hash: KeyHash::Fnv1a64,
        hash_tag: Some(*b"{}"),
    };
    through_nutcracker(&keys, "hash: fnv1a_64\n  hash_tag: \"{}\"", options);
}

/// Sets `keys` through nutcracker (its pool configured with `settings` beside
/// `distribution: ketama`) in front of seven memcached servers of unequal weights,
/// and checks that each is on exactly the server Kura's ring with `options` names.
fn through_nutcracker(keys: &[Vec<u8>], settings: &str, options: Options) {
    let weights = [1u32, 2, 3, 1, 5, 1, 2];
    let servers: Vec<MemcachedServer> = weights
        .iter()
        .map(|_| MemcachedServer::start().unwrap_or_else(|e| panic!("memcached: {e}")))
        .collect();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let listen = kura_testkit::free_port();
    let stats = kura_testkit::free_port();
    let mut conf = format!(
        "ring:\n  listen: 127.0.0.1:{listen}\n  {settings}\n  distribution: ketama\n  auto_eject_hosts: false\n  servers:\n"
    );
    for (server, weight) in servers.iter().zip(weights) {
        conf.push_str(&format!("   - {}:{weight}\n", server.addr()));
    }
    let conf_path = dir.path().join("nutcracker.yml");
    std::fs::write(&conf_path, conf).unwrap_or_else(|e| panic!("{e}"));
    let nutcracker = std::process::Command::new("nutcracker")
        .arg("-c")
        .arg(&conf_path)
        .args(["-a", "127.0.0.1", "-s", &stats.to_string()])
        .arg("-o")
        .arg(dir.path().join("nutcracker.log"))
        .spawn()
        .unwrap_or_else(|e| panic!("run nutcracker (scripts/install-peers.sh installs it): {e}"));
    let nutcracker = Stopped(nutcracker);
    let proxy: std::net::SocketAddr = ([127, 0, 0, 1], listen).into();
    let mut client = (0..100)
        .find_map(|_| {
            kura_testkit::Client::connect(proxy).ok().or_else(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                None
            })
        })
        .unwrap_or_else(|| panic!("nutcracker does not listen on {proxy}"));
    for (i, key) in keys.iter().enumerate() {
        let value = i.to_string();
        let mut request = b"set ".to_vec();
        request.extend_from_slice(key);
        request.extend_from_slice(format!(" 0 0 {}\r\n{value}\r\n", value.len()).as_bytes());
        let reply = client
            .request(&request, b"\r\n")
            .unwrap_or_else(|e| panic!("set through nutcracker: {e}"));
        assert_eq!(reply, b"STORED\r\n", "key {}", hex(key));
    }
    drop(nutcracker);
    let members = servers
        .iter()
        .zip(weights)
        .map(|(s, weight)| Member {
            weight,
            ..Member::new(s.addr().ip().to_string(), s.addr().port())
        })
        .collect();
    let ring = Ring::with_options(members, options).unwrap_or_else(|e| panic!("{e}"));
    let mut direct: Vec<kura_testkit::Client> = servers
        .iter()
        .map(|s| kura_testkit::Client::connect(s.addr()).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    for key in keys {
        let mut get = b"get ".to_vec();
        get.extend_from_slice(key);
        get.extend_from_slice(b"\r\n");
        let holders: Vec<usize> = (0..servers.len())
            .filter(|&i| {
                let reply = direct[i]
                    .request(&get, b"END\r\n")
                    .unwrap_or_else(|e| panic!("get: {e}"));
                reply.starts_with(b"VALUE")
            })
            .collect();
        assert_eq!(holders, vec![ring.owner(key)], "key {}", hex(key));
    }
}
