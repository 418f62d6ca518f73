//! A multi-key get (`get`, `gets`, `gat`, `gats`) whose keys live on several shards:
//! each shard's keys go as a get of their own to that shard's primary (this node's
//! shard's to this node itself, over the same pooled connections, so they take the
//! path any request takes here, a replica's forwarding and a `gat`'s wait for the
//! log included), at once, and the hits are merged in the order the client asked
//! for the keys, then `END`, as one server answers. If any shard's part fails, the
//! client gets that `SERVER_ERROR` alone, as memcached answers a get that fails.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use kura_protocol::{Request, RetrievalCommand};

use super::forward::{frame, start_exchange, Forwarding};
use super::ring::Placement;
use crate::server::Shared;

/// Answers the multi-key get `request` from the shards that own its keys.
pub async fn split_get(
    shared: &Arc<Shared>,
    placement: &Placement,
    request: &Request<'_>,
    out: &mut Vec<u8>,
) {
    let Request::Retrieval {
        command,
        exptime,
        keys,
    } = request
    else {
        out.extend_from_slice(b"SERVER_ERROR only a multi-key get is split\r\n");
        return;
    };
    shared
        .cluster
        .split_gets
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let keys: Vec<&[u8]> = keys.into_iter().collect();
    let mut groups: BTreeMap<usize, Vec<&[u8]>> = BTreeMap::new();
    for key in &keys {
        groups.entry(placement.owner(key)).or_default().push(key);
    }
    let here = super::advertise(shared);
    let mut parts = Vec::with_capacity(groups.len());
    for (shard, group) in &groups {
        let to = if Some(*shard) == placement.mine {
            Ok(here.clone())
        } else {
            placement.primary(*shard)
        };
        let forwarding = match to {
            Ok(primary) => Forwarding::To {
                primary,
                bytes: line(*command, *exptime, group),
            },
            Err(why) => Forwarding::Refused(why),
        };
        // Started at once: the shards answer side by side.
        parts.push(start_exchange(shared, forwarding, false));
    }
    let mut replies = Vec::with_capacity(parts.len());
    for part in parts {
        replies.push(part.await.unwrap_or_else(|e| Err(e.to_string())));
    }
    let mut hits: HashMap<&[u8], VecDeque<&[u8]>> = HashMap::new();
    for reply in &replies {
        match reply {
            Ok(reply) => {
                if let Err(why) = values(reply, &mut hits) {
                    out.extend_from_slice(format!("SERVER_ERROR {why}\r\n").as_bytes());
                    return;
                }
            }
            Err(why) => {
                out.extend_from_slice(format!("SERVER_ERROR {why}\r\n").as_bytes());
                return;
            }
        }
    }
    for key in keys {
        if let Some(value) = hits.get_mut(key).and_then(VecDeque::pop_front) {
            out.extend_from_slice(value);
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// `command [exptime] keys...\r\nmn\r\n`: one shard's part of the get.
fn line(command: RetrievalCommand, exptime: i64, keys: &[&[u8]]) -> Vec<u8> {
    let mut bytes = command.name().to_vec();
    if command.touches() {
        bytes.extend_from_slice(format!(" {exptime}").as_bytes());
    }
    for key in keys {
        bytes.push(b' ');
        bytes.extend_from_slice(key);
    }
    bytes.extend_from_slice(b"\r\nmn\r\n");
    bytes
}

/// The hits of one shard's reply (`VALUE` frames, then `END`), by key.
fn values<'r>(
    reply: &'r [u8],
    hits: &mut HashMap<&'r [u8], VecDeque<&'r [u8]>>,
) -> Result<(), String> {
    let mut at = 0;
    while at < reply.len() {
        let Some(len) = frame(&reply[at..])? else {
            return Err("a shard's reply ended early".into());
        };
        let whole = &reply[at..at + len];
        if let Some(rest) = whole.strip_prefix(b"VALUE ") {
            let key_end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
            hits.entry(&rest[..key_end]).or_default().push_back(whole);
        } else if whole != b"END\r\n" {
            let text = String::from_utf8_lossy(whole);
            return Err(text
                .trim_end()
                .trim_start_matches("SERVER_ERROR ")
                .to_string());
        }
        at += len;
    }
    Ok(())
}
