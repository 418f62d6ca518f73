//! Versions that are not in memory are read without blocking the event loops.
//!
//! Before a request runs, its connection asks the store which of its keys may be only
//! in the log (the index keeps no key in memory, only a slot that points at the key's
//! record), has them read, and awaits the reads; the other connections of its worker
//! go on meanwhile. A worker with an io_uring makes the reads itself (`uring.rs`);
//! otherwise they go to a fixed pool of reader threads (one positional read each),
//! described here. A
//! multi-get's misses are all issued at once, so fifty keys out of memory cost about
//! one read's latency, not fifty; records that lie near each other in the log (keys
//! written together) are fetched with one positional read. Then the request runs as if every version had been in
//! memory. A store of a key the index has never seen reads nothing.
//!
//! The pool is bounded: a fixed number of threads and a bounded queue. When the queue
//! is full the connection reads on its own thread instead of queueing without limit,
//! which slows that worker but never grows memory. A version evicted again between its
//! read and the request is read once more by the store, inline: correct, only slower.

use std::collections::VecDeque;
use std::sync::Arc;

use kura_engine::{Key, Unresolved};
use kura_protocol::Request;
use kura_tables::rows::{row_key_of_entry, ROW_SPACE, UNIQUE_SPACE};
use kura_tables::{Catalog, Tables};
use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

use crate::server::Shared;
use crate::tables::{self, Session};

type Job = Box<dyn FnOnce() + Send>;

pub struct ValueReader {
    queue: Arc<Queue>,
    threads: usize,
}

/// Reads in flight or queued, at most: a multi-get of a hundred keys from each of a
/// few dozen connections.
const QUEUE_DEPTH: usize = 4096;

/// The jobs waiting for a reader. An idle reader sleeps on the condition variable at
/// once: a channel that spins and yields before it sleeps (crossbeam's does) has a
/// dozen idle readers take turns on the CPU that the reads and the event loops need,
/// which on two cores cost a cold multi-get a third of its time.
#[derive(Default)]
struct Queue {
    jobs: Mutex<Jobs>,
    ready: Condvar,
}

#[derive(Default)]
struct Jobs {
    waiting: VecDeque<Job>,
    stopped: bool,
}

impl Queue {
    /// Queues `job`, or gives it back if the queue is full or stopped.
    fn push(&self, job: Job) -> Result<(), Job> {
        let mut jobs = self.jobs.lock();
        if jobs.stopped || jobs.waiting.len() >= QUEUE_DEPTH {
            return Err(job);
        }
        jobs.waiting.push_back(job);
        drop(jobs);
        self.ready.notify_one();
        Ok(())
    }

    /// The next job, waiting for one; `None` once stopped.
    fn pop(&self) -> Option<Job> {
        let mut jobs = self.jobs.lock();
        loop {
            if let Some(job) = jobs.waiting.pop_front() {
                return Some(job);
            }
            if jobs.stopped {
                return None;
            }
            self.ready.wait(&mut jobs);
        }
    }
}

impl ValueReader {
    /// Starts `threads` reader threads. They stop when the reader is dropped, after
    /// the jobs already queued.
    pub fn start(threads: usize) -> std::io::Result<ValueReader> {
        let queue = Arc::new(Queue::default());
        let threads = threads.max(1);
        for n in 0..threads {
            let queue = Arc::clone(&queue);
            std::thread::Builder::new()
                .name(format!("kura-read-{n}"))
                .spawn(move || {
                    while let Some(job) = queue.pop() {
                        job();
                    }
                })?;
        }
        Ok(ValueReader { queue, threads })
    }
}

impl Drop for ValueReader {
    fn drop(&mut self) {
        self.queue.jobs.lock().stopped = true;
        self.queue.ready.notify_all();
    }
}

/// The keys `request` will look up.
pub(crate) fn keys_of<'r>(request: &'r Request<'_>, mut each: impl FnMut(&'r [u8])) {
    match request {
        Request::Retrieval { keys, .. } => {
            for key in *keys {
                each(key);
            }
        }
        Request::Storage { key, .. }
        | Request::Arithmetic { key, .. }
        | Request::Delete { key, .. }
        | Request::Touch { key, .. } => each(key),
        Request::MetaGet(meta) | Request::MetaArithmetic(meta) | Request::MetaDelete(meta) => {
            each(&meta.key)
        }
        Request::MetaSet { request, .. } => each(&request.key),
        _ => {}
    }
}

/// Brings into memory the versions of `request`'s keys that are only in the log,
/// reading them on the reader threads. A row read through a unique index takes two
/// rounds: its index entry, then the row the entry names. Errors are left for the
/// request itself to meet (it reads inline and reports them).
pub async fn load_values(shared: &Arc<Shared>, session: &mut Session, request: &Request<'_>) {
    if !shared.store.values_may_be_out_of_memory() {
        // The common case while the data fits: no lookups beyond the request's own.
        return;
    }
    let mut missing: Vec<Unresolved> = Vec::new();
    // Index entries whose rows the second round reads: the table, the entry's key.
    let mut entries: Vec<(Arc<Catalog>, usize, Vec<u8>)> = Vec::new();
    keys_of(request, |key| {
        if tables::is_plain(session, key) {
            if let Some(at) = shared.store.unresolved(key) {
                missing.push(at);
            }
            return;
        }
        let tables::Route::Row {
            catalog,
            container,
            key,
        } = tables::route(shared, session, key)
        else {
            return;
        };
        let def = &catalog.tables[container.table];
        if let Some((space, engine_key)) = Tables::keys_to_read(def, container.via, key) {
            if let Some(at) = shared.store.unresolved(Key::new(space, &engine_key)) {
                missing.push(at);
            }
            if space == UNIQUE_SPACE {
                entries.push((Arc::clone(&catalog), container.table, engine_key));
            }
        }
    });
    resolve(shared, missing).await;
    // An index entry has no slot while it is only in the log: it is found through
    // the ordered keyspace, on a reader thread, which puts it in memory.
    let held: Vec<Vec<u8>> = entries
        .iter()
        .filter(|(_, _, k)| shared.store.held_out_of_memory(Key::new(UNIQUE_SPACE, k)))
        .map(|(_, _, k)| k.clone())
        .collect();
    read_elsewhere(shared, held).await;
    let mut rows = Vec::new();
    for (catalog, table, entry_key) in entries {
        // In memory now, unless it was evicted again meanwhile (then read inline).
        if let Ok(Some(entry)) = shared.store.peek(Key::new(UNIQUE_SPACE, &entry_key)) {
            let row_key = row_key_of_entry(&catalog.tables[table], &entry.value);
            if let Some(at) = shared.store.unresolved(Key::new(ROW_SPACE, &row_key)) {
                rows.push(at);
            }
        }
    }
    resolve(shared, rows).await;
}

/// Brings into memory the version of one key of memcached's key space, if it is only
/// in the log (a binary-protocol request).
pub async fn load_key(shared: &Arc<Shared>, key: &[u8]) {
    if !shared.store.values_may_be_out_of_memory() {
        return;
    }
    if let Some(at) = shared.store.unresolved(key) {
        resolve(shared, vec![at]).await;
    }
}

/// Looks up the index entries `keys` (of held unique entries, not in memory) on the
/// reader threads, which brings them into memory, and waits for them.
async fn read_elsewhere(shared: &Arc<Shared>, keys: Vec<Vec<u8>>) {
    if keys.is_empty() {
        return;
    }
    let (done, wait) = oneshot::channel::<()>();
    let store_shared = Arc::clone(shared);
    let job: Job = Box::new(move || {
        for key in keys {
            let _ = store_shared.store.peek(Key::new(UNIQUE_SPACE, &key));
        }
        let _ = done.send(());
    });
    match shared.reader.queue.push(job) {
        Ok(()) => {
            let _ = wait.await;
        }
        // Full (or stopped): read here rather than queue without bound.
        Err(job) => job(),
    }
}

/// Reads `missing` on the reader threads and waits for them.
async fn resolve(shared: &Arc<Shared>, missing: Vec<Unresolved>) {
    if missing.is_empty() {
        return;
    }
    if crate::uring::on_this_thread() {
        return crate::uring::resolve(shared, missing).await;
    }
    // No more jobs than threads: more could not run at once anyway, and every job
    // costs a wake-up of a reader and of this worker. Records near each other stay in
    // one job, which reads them with one positional read.
    let batches = shared.store.batch_reads(missing, shared.reader.threads);
    let mut waits = Vec::with_capacity(batches.len());
    for batch in batches {
        let (done, wait) = oneshot::channel::<()>();
        let store_shared = Arc::clone(shared);
        let job: Job = Box::new(move || {
            let _ = store_shared.store.resolve_many(batch);
            let _ = done.send(());
        });
        match shared.reader.queue.push(job) {
            Ok(()) => waits.push(wait),
            // Full (or stopped): read here rather than queue without bound.
            Err(job) => job(),
        }
    }
    for wait in waits {
        let _ = wait.await;
    }
}
