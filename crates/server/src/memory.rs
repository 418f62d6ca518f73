//! The process's memory as the budget (`-m`) sees it: the allocator, and what it and
//! the kernel say the process holds.
//!
//! The store counts what it keeps (the index and the cached versions); everything
//! else the process holds (connection buffers, the log's tail, threads, the
//! allocator's slack) it cannot see. The maintenance thread measures that remainder
//! from the resident set and hands it to the store ([`report_other_memory`]), whose
//! cache shrinks by as much, so the whole process stays within `-m`.

use kura_engine::Store;

/// jemalloc, not the system allocator: glibc's per-thread arenas kept the memory of
/// evicted values resident, so the server's footprint drifted well above `-m`.
/// jemalloc's size classes fragment less, it counts exactly what is allocated, and
/// its background thread returns freed pages to the kernel within about a second
/// (the options are in `.cargo/config.toml`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's counts, in bytes.
#[derive(Debug, Default, Clone, Copy)]
pub struct Allocator {
    /// Handed out to the program and not yet freed.
    pub allocated: u64,
    /// In pages that hold allocations: `allocated` and the free room between them.
    pub active: u64,
    /// jemalloc's own bookkeeping.
    pub metadata: u64,
    /// Held resident for the program: allocated, freed but not yet returned, and
    /// jemalloc's own metadata.
    pub resident: u64,
}

/// jemalloc's counts now; zeros if its statistics cannot be read.
pub fn allocator() -> Allocator {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The statistics are a snapshot, refreshed by advancing the epoch.
    if epoch::advance().is_err() {
        return Allocator::default();
    }
    Allocator {
        allocated: stats::allocated::read().map_or(0, |b| b as u64),
        active: stats::active::read().map_or(0, |b| b as u64),
        metadata: stats::metadata::read().map_or(0, |b| b as u64),
        resident: stats::resident::read().map_or(0, |b| b as u64),
    }
}

/// Tells `store` what the process holds beyond what the store counts: its resident
/// set, which is what `-m` is measured against, less the index and the cached values.
/// That takes in more than allocations: the room between them that the allocator
/// cannot hand back while a neighbour lives (under a churning cache, evicted values
/// leave holes that a third of the cache's size can take), its metadata, freed pages
/// not yet returned, thread stacks and the program's own pages. The cache then
/// shrinks by all of it. Where the resident set cannot be read, allocations alone.
///
/// When the resident set comes within a sixteenth of `-m`, the allocator is first
/// made to hand its freed pages back at once: under a fast load into a small `-m`
/// they are most of the excess, and its background thread would take up to a
/// second, while the cache that shrinks by them may be smaller than they are. The
/// sixteenth is room for what a load adds before the next look.
pub fn report_other_memory(store: &Store) {
    let limit = store.memory_limit();
    let mut resident = resident_bytes();
    if limit > 0 && resident > limit - limit / 16 && purge_freed_pages() {
        resident = resident_bytes();
    }
    let held = resident.max(allocator().allocated);
    if held > 0 {
        store.set_other_memory(held.saturating_sub(store.accounted_memory()));
    }
}

/// Makes jemalloc return every arena's freed pages to the kernel now; false if it
/// would not.
#[allow(unsafe_code)]
fn purge_freed_pages() -> bool {
    // 4096 is MALLCTL_ARENAS_ALL: every arena.
    const PURGE_ALL: &std::ffi::CStr = c"arena.4096.purge";
    // SAFETY: the name is NUL-terminated and static; this control takes no old or new
    // value, so every pointer is null and the length zero, as it requires.
    let done = unsafe {
        tikv_jemalloc_sys::mallctl(
            PURGE_ALL.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    done == 0
}

/// The process's resident set (VmRSS), in bytes; 0 if /proc cannot be read.
pub fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}
