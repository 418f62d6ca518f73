use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

fn location(n: u64) -> Location {
    Location {
        segment: 1 + n / 1000,
        offset: 32 + (n % 1000) as u32 * 64,
        len: 64,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, bool),
    Remove(u16),
    Evict(u64),
    ClearMemcached,
}

/// Test key `k`: the same bytes for `k` and `k + 1`, in two spaces.
fn test_key(k: u16) -> OwnedKey {
    OwnedKey {
        space: if k.is_multiple_of(2) {
            Space::MEMCACHED
        } else {
            Space(2)
        },
        bytes: format!("key{}", k / 2).into_bytes().into(),
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u16..600, any::<bool>()).prop_map(|(k, c)| Op::Put(k, c)),
        2 => (0u16..600).prop_map(Op::Remove),
        1 => prop_oneof![Just(0u64), 0u64..20_000].prop_map(Op::Evict),
        1 => Just(Op::ClearMemcached),
    ]
}

/// Resolves a key as the store does: cold candidates are "read" from `log`.
fn lookup(
    shard: &Shard,
    key: EngineKey<'_>,
    h: Hashed,
    log: &HashMap<u64, OwnedKey>,
) -> Option<(usize, Option<usize>)> {
    let mut loaded = Loaded::new();
    loop {
        match shard.find(key, h, &loaded) {
            Found::Cached { pos, idx } => return Some((pos, Some(idx))),
            Found::Loaded { pos, .. } => return Some((pos, None)),
            Found::Absent => return None,
            Found::Unknown(raws) => {
                for raw in raws {
                    let k = log
                        .get(&raw)
                        .unwrap_or_else(|| panic!("no record at {raw}"));
                    loaded.push((
                        raw,
                        Version {
                            space: k.space,
                            key: k.bytes.clone(),
                            value: Arc::from(&[][..]),
                            client_flags: 0,
                            exptime: 0,
                            time: 0,
                            cas: 0,
                            item_flags: 0,
                            location: location(0),
                        },
                    ));
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The table against a map, with fingerprints cut to 3 bits so that strangers
    /// share them often and every path (cold candidates, shifts, growth) runs.
    #[test]
    fn table_matches_a_map(ops in proptest::collection::vec(op(), 1..400)) {
        let index = Index::new(true);
        let mut shard = Shard::new(Arc::new(AtomicU64::new(0)), Arc::default());
        let mut model: HashMap<OwnedKey, u64> = HashMap::new();
        let mut log: HashMap<u64, OwnedKey> = HashMap::new();
        let mut n = 0u64;
        let hashed = |key: EngineKey<'_>| {
            let h = index.hash(key);
            Hashed { shard: 0, fp: h.fp }
        };
        for op in ops {
            match op {
                Op::Put(k, cached) => {
                    let key = test_key(k);
                    let h = hashed(key.as_key());
                    n += 1;
                    let at = location(n);
                    let raw = raw_address(at.segment, at.offset);
                    log.insert(raw, key.clone());
                    let entry = Entry::new(h, key.as_key(), Arc::from(&[][..]), at);
                    match (lookup(&shard, key.as_key(), h, &log), cached) {
                        (Some((pos, _)), true) => { shard.set_cached(pos, entry); }
                        (Some((pos, _)), false) => { shard.set_cold(pos, raw); }
                        (None, true) => { shard.insert_cached(h, entry); }
                        (None, false) => shard.insert_cold(h, raw),
                    }
                    model.insert(key, n);
                }
                Op::Remove(k) => {
                    let key = test_key(k);
                    let h = hashed(key.as_key());
                    if let Some((pos, _)) = lookup(&shard, key.as_key(), h, &log) {
                        shard.remove(pos);
                    }
                    model.remove(&key);
                }
                Op::Evict(budget) => {
                    shard.evict_to(budget, u64::MAX, crate::OrderedSpaces::default());
                    if budget == 0 {
                        prop_assert_eq!(shard.cached_values, 0);
                    }
                }
                Op::ClearMemcached => {
                    let before = model.len();
                    model.retain(|k, _| k.space != Space::MEMCACHED);
                    prop_assert_eq!(shard.clear_memcached(), before - model.len());
                }
            }
            prop_assert_eq!(shard.len(), model.len());
        }
        for k in 0u16..600 {
            let key = test_key(k);
            let h = hashed(key.as_key());
            let found = lookup(&shard, key.as_key(), h, &log);
            prop_assert_eq!(found.is_some(), model.contains_key(&key));
            if let (Some((pos, idx)), Some(&n)) = (found, model.get(&key)) {
                let at = location(n);
                let raw = raw_address(at.segment, at.offset);
                match idx {
                    Some(idx) => prop_assert_eq!(shard.entry(idx).location, at),
                    None => prop_assert_eq!(shard.holds_address(h, raw), Some(pos)),
                }
            }
        }
    }
}

#[test]
fn addresses_round_trip_across_the_window() {
    for oldest in [1, 4095, 4096, 4097, 1_000_000] {
        for segment in [oldest, oldest + 1, oldest + SEGMENT_WINDOW - 1] {
            let raw = raw_address(segment, 12345);
            assert_eq!(address_of(raw, oldest), (segment, 12345));
        }
    }
}
