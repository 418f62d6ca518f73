//! The `stats` family: general counters, `settings`, `conns`, `reset`, `detail`, and the
//! slab-allocator views (`items`, `slabs`, `sizes`) that Kura answers as an allocator
//! with no slab classes would. Unknown subcommands get `ERROR`, as in memcached.

use std::sync::atomic::Ordering;

use kura_protocol::Tokens;

use crate::config::DurabilityFlag;
use crate::memory;
use crate::server::Shared;

fn stat(out: &mut Vec<u8>, name: &str, value: impl std::fmt::Display) {
    out.extend_from_slice(format!("STAT {name} {value}\r\n").as_bytes());
}

/// User and system CPU seconds of this process, from /proc/self/stat.
pub(crate) fn rusage() -> (f64, f64) {
    let Ok(text) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0);
    };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let after = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after ')'.
    const TICKS_PER_SEC: f64 = 100.0;
    (ticks(11) / TICKS_PER_SEC, ticks(12) / TICKS_PER_SEC)
}

pub fn write(shared: &Shared, mut arguments: Tokens<'_>, out: &mut Vec<u8>) {
    match arguments.next() {
        None => general(shared, out),
        Some(b"settings") => settings(shared, out),
        Some(b"conns") => conns(shared, out),
        Some(b"replication") => {
            crate::replication::write_stats(shared, out);
            return;
        }
        Some(b"cluster") => {
            crate::cluster::write_stats(shared, out);
            return;
        }
        Some(b"reset") => {
            shared.counters.reset();
            shared.prefixes.clear();
            out.extend_from_slice(b"RESET\r\n");
            return;
        }
        Some(b"detail") => {
            match arguments.next() {
                Some(b"on") => {
                    shared.prefixes.set_enabled(true);
                    out.extend_from_slice(b"OK\r\n");
                }
                Some(b"off") => {
                    shared.prefixes.set_enabled(false);
                    out.extend_from_slice(b"OK\r\n");
                }
                Some(b"dump") => shared.prefixes.dump(out),
                _ => out.extend_from_slice(b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"),
            }
            return;
        }
        Some(b"cachedump") => {
            crate::slabs::cachedump(arguments, out);
            return;
        }
        Some(b"items") => {}
        Some(b"slabs") => {
            stat(out, "active_slabs", 0);
            // memcached's is the slab pages it allocated for items, which it keeps;
            // Kura's, what its index and value cache hold.
            let store = shared.store.stats();
            stat(out, "total_malloced", store.index_bytes + store.cache_bytes);
        }
        Some(b"sizes") => stat(out, "sizes_status", "disabled"),
        Some(_) => {
            out.extend_from_slice(b"ERROR\r\n");
            return;
        }
    }
    out.extend_from_slice(b"END\r\n");
}

fn general(shared: &Shared, out: &mut Vec<u8>) {
    let store = shared.store.stats();
    let (user, system) = rusage();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    stat(out, "pid", std::process::id());
    stat(out, "uptime", shared.uptime_secs());
    stat(out, "time", now);
    stat(
        out,
        "version",
        crate::dispatch::VERSION_REPLY
            .trim_start_matches("VERSION ")
            .trim_end(),
    );
    stat(out, "pointer_size", usize::BITS);
    stat(out, "rusage_user", format!("{user:.6}"));
    stat(out, "rusage_system", format!("{system:.6}"));
    stat(out, "max_connections", shared.config.connections_max);
    for (name, value) in shared.counters.snapshot() {
        stat(out, name, value);
    }
    stat(out, "limit_maxbytes", store.memory_limit_bytes);
    stat(out, "threads", shared.config.threads);
    stat(out, "bytes", store.bytes);
    stat(out, "curr_items", store.curr_items);
    stat(out, "evictions", 0);
    stat(out, "durability", durability_name(shared.config.durability));
    // Tables: their rows, index entries and catalog, apart from memcached's items.
    stat(out, "tables", shared.tables.catalog().tables.len());
    stat(out, "table_items", store.table_items);
    stat(out, "table_bytes", store.table_bytes);
    let counters = &shared.tables.counters;
    stat(
        out,
        "table_unique_refusals",
        counters.unique_refusals.load(Ordering::Relaxed),
    );
    stat(
        out,
        "table_retries",
        counters.retries.load(Ordering::Relaxed),
    );
    stat(out, "log_appended_lsn", store.appended_lsn);
    stat(out, "log_acked_lsn", store.acked_lsn);
    stat(out, "log_synced_lsn", store.synced_lsn);
    stat(out, "recovered_records", store.recovered_records);
    stat(out, "recovery_cut_bytes", store.recovery_cut_bytes);
    stat(out, "log_bytes", store.log_bytes);
    stat(out, "log_live_bytes", store.log_live_bytes);
    stat(out, "log_segments", store.log_segments);
    stat(out, "compactions", store.compactions);
    stat(
        out,
        "compaction_running",
        u8::from(store.compaction_running),
    );
    stat(
        out,
        "compaction_copied_bytes",
        store.compaction_copied_bytes,
    );
    stat(
        out,
        "compaction_reclaimed_bytes",
        store.compaction_reclaimed_bytes,
    );
    // Bytes written to the log per byte clients wrote, since start.
    let client_bytes = store
        .appended_lsn
        .saturating_sub(store.compaction_copied_bytes)
        .max(1);
    let amplification = store.appended_lsn as f64 / client_bytes as f64;
    stat(out, "write_amplification", format!("{amplification:.3}"));
    stat(out, "expired_purged", store.expired_purged);
    // The memory budget (-m): what the index and the values in memory are estimated to
    // take, against what the process really holds.
    stat(out, "index_bytes", store.index_bytes);
    stat(out, "value_cache_bytes", store.cache_bytes);
    stat(out, "values_in_memory", store.cached_values);
    stat(out, "value_reads", store.value_reads);
    stat(out, "value_evictions", store.evictions);
    stat(out, "checkpoints", store.checkpoints);
    stat(
        out,
        "checkpoint_restored_keys",
        store.checkpoint_restored_keys,
    );
    stat(out, "other_memory_bytes", store.other_memory_bytes);
    stat(out, "rss_bytes", memory::resident_bytes());
    let allocator = memory::allocator();
    stat(out, "allocated_bytes", allocator.allocated);
    stat(out, "allocator_active_bytes", allocator.active);
    stat(out, "allocator_metadata_bytes", allocator.metadata);
    stat(out, "allocator_resident_bytes", allocator.resident);
    stat(out, "store_poisoned", u8::from(shared.store.is_poisoned()));
    if let Some(tls) = &shared.tls {
        tls.write_stats(out);
    }
}

fn durability_name(d: DurabilityFlag) -> &'static str {
    match d {
        DurabilityFlag::Fsync => "fsync",
        DurabilityFlag::Interval => "interval",
        DurabilityFlag::None => "none",
    }
}

fn settings(shared: &Shared, out: &mut Vec<u8>) {
    let config = &shared.config;
    stat(out, "maxbytes", shared.store.memory_limit());
    stat(out, "maxconns", config.connections_max);
    stat(out, "reqs_per_event", config.reqs_per_event);
    stat(out, "idle_timeout", config.idle_timeout_secs);
    stat(out, "tcpport", shared.listen_addr.port());
    stat(out, "udpport", 0);
    stat(out, "inter", config.listen.as_str());
    stat(out, "verbosity", shared.verbosity.load(Ordering::Relaxed));
    stat(out, "evictions", "off");
    stat(out, "num_threads", config.threads);
    stat(out, "cas_enabled", "yes");
    stat(out, "binding_protocol", "auto-negotiate");
    let auth_file = config
        .auth_file
        .as_ref()
        .or(config.admin_auth_file.as_ref())
        .map(|f| f.display().to_string());
    stat(
        out,
        "auth_enabled_sasl",
        if shared.users.is_some() { "yes" } else { "no" },
    );
    stat(
        out,
        "auth_enabled_ascii",
        auth_file.as_deref().unwrap_or("no"),
    );
    stat(out, "item_size_max", config.item_size_max_bytes);
    stat(out, "data_dir", config.data_dir.display());
    stat(out, "durability", durability_name(config.durability));
    stat(out, "fsync_interval_ms", config.fsync_interval_ms);
    stat(out, "segment_size_mib", config.segment_size_mib);
    stat(out, "min_sync_replicas", config.min_sync_replicas);
    stat(out, "sync_timeout_ms", config.sync_timeout_ms);
    stat(out, "replica_backlog_mib", config.replica_backlog_mib);
    stat(out, "replica_linger_ms", config.replica_linger_ms);
    // The settings as the server took them at start: those of -Z, else those of
    // --tls-replication.
    let tls = shared.tls.as_ref().map(|t| &t.settings);
    match tls.or(shared.tls_replication.as_ref()) {
        Some(settings) => settings.write_settings(shared.tls.is_some(), out),
        None => stat(out, "ssl_enabled", "no"),
    }
}

fn conns(shared: &Shared, out: &mut Vec<u8>) {
    let now = u64::from(shared.store.now_secs());
    for (id, info) in shared.connections.snapshot() {
        stat(out, &format!("{id}:addr"), &info.addr);
        stat(out, &format!("{id}:listen_addr"), &info.listen_addr);
        stat(out, &format!("{id}:state"), "conn_parse_cmd");
        let last = info.last_cmd_secs.load(Ordering::Relaxed);
        stat(
            out,
            &format!("{id}:secs_since_last_cmd"),
            now.saturating_sub(last),
        );
    }
}
