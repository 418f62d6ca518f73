//! Cold reads on the worker threads, through an io_uring of each worker's own.
//!
//! A request whose keys have versions only in the log reads them before it runs
//! (`reader.rs`). With the reader threads, each such read is handed to another thread
//! and handed back: two wake-ups and two switches of thread per read, on a machine
//! where the workers already keep every core busy. Here the worker puts the reads on
//! its ring's submission queue and goes on with its other connections; the kernel
//! reads, posts a completion and signals the ring's eventfd, which the worker's event
//! loop polls with its sockets. The completion task wakes the connection whose read is
//! done, and that connection cuts its records out of the buffer and puts them in
//! memory, on the worker that asked.
//!
//! Invariants:
//! - A buffer the kernel may still write into is never freed: a read whose connection
//!   went away (its [`Ticket`] dropped) keeps its buffer until its completion is
//!   reaped, and dropping the ring waits for every read in flight.
//! - A read holds its segment's handle, so its file descriptor stays open (and is
//!   never reused for another file) until the read is done.
//! - At most [`IN_FLIGHT_MAX`] reads are in flight on one worker; beyond that a read
//!   is made on the worker itself, which slows that worker but never grows memory.

#![allow(unsafe_code)]

use std::alloc::Layout;
use std::cell::RefCell;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use io_uring::{opcode, types, IoUring};
use kura_engine::disk::ReadFile;
use kura_engine::Unresolved;
use tokio::io::unix::AsyncFd;

use crate::server::Shared;

/// Entries of a worker's submission queue (its completion queue has twice as many).
const RING_ENTRIES: u32 = 256;

/// Most reads in flight on one worker.
const IN_FLIGHT_MAX: usize = 1024;

/// Alignment of a read's memory, offset and length: what a direct read needs on any
/// device (the engine plans reads in such blocks).
const ALIGN: usize = 4096;

/// Buffers of up to this many blocks are kept for the next read, up to
/// [`SPARE_PER_SIZE`] of each size; larger ones (a run of many records) are freed.
/// A buffer freed after every read is churn the allocator keeps as dirty pages until
/// it purges them (up to a second), and `-m` counts those against the cache.
const SPARE_BLOCKS: usize = 4;

/// Buffers kept of each size: at most 16 × (4 + 8 + 12 + 16) KiB, 640 KiB a worker.
const SPARE_PER_SIZE: usize = 16;

thread_local! {
    /// This worker's ring, if it has one.
    static RING: RefCell<Option<Ring>> = const { RefCell::new(None) };
}

/// Memory a read fills: `len` bytes aligned for a direct read, owned until dropped.
struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the buffer is plain memory owned by this value alone.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    fn new(len: usize) -> Option<AlignedBuf> {
        let layout = Layout::from_size_align(len.max(ALIGN), ALIGN).ok()?;
        // SAFETY: the layout's size is not zero.
        let ptr = NonNull::new(unsafe { std::alloc::alloc(layout) })?;
        Some(AlignedBuf { ptr, layout })
    }

    /// The first `n` bytes, which a completed read filled.
    fn filled(&self, n: usize) -> &[u8] {
        // SAFETY: the kernel wrote `n` bytes (the read's result, at most the buffer's
        // length) from the start of the buffer, which is live while `self` is.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), n.min(self.layout.size())) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A read submitted and not yet reaped, or reaped and not yet taken.
struct Slot {
    buf: AlignedBuf,
    /// Keeps the segment's file descriptor open while the kernel reads it.
    _file: Arc<dyn ReadFile>,
    /// The completion's result: bytes read, or a negated errno.
    result: Option<i32>,
    waker: Option<Waker>,
    /// Its ticket was dropped: free it once reaped.
    abandoned: bool,
}

struct Ring {
    uring: IoUring,
    /// Buffers of 1 to [`SPARE_BLOCKS`] blocks from reads done, by blocks less one.
    spare: [Vec<AlignedBuf>; SPARE_BLOCKS],
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    in_flight: usize,
    /// Slots whose entries were pushed since the kernel last took every entry.
    pending: Vec<usize>,
    /// The kernel kept refusing entries: no more are pushed, and the ring is never
    /// entered again (it would start reads into buffers their tickets took back).
    broken: bool,
}

impl Ring {
    /// Takes every completion the kernel has posted, waking the reads' connections.
    fn reap(&mut self) {
        for cqe in self.uring.completion() {
            let (index, result) = (cqe.user_data() as usize, cqe.result());
            self.in_flight -= 1;
            let Some(slot) = self.slots.get_mut(index).and_then(Option::as_mut) else {
                continue;
            };
            if slot.abandoned {
                self.slots[index] = None;
                self.free.push(index);
                continue;
            }
            slot.result = Some(result);
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        }
    }

    /// Hands every pushed entry to the kernel.
    fn submit(&mut self) -> std::io::Result<()> {
        while !self.uring.submission().is_empty() {
            if self.uring.submit()? == 0 {
                return Err(std::io::ErrorKind::WouldBlock.into());
            }
        }
        self.pending.clear();
        Ok(())
    }

    /// Hands the pushed entries to the kernel, reaping and trying again while it is
    /// busy (completions it could not post yet). If it keeps refusing, the reads it
    /// did not take end with an error (their requests read for themselves) and the
    /// ring is broken: this worker reads with the reader threads from then on.
    fn submit_reaping(&mut self) {
        let mut refused = None;
        for _ in 0..8 {
            match self.submit() {
                Ok(()) => return,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EBUSY | libc::EAGAIN | libc::EINTR)
                    ) || e.kind() == std::io::ErrorKind::WouldBlock =>
                {
                    self.reap();
                    refused = Some(e);
                }
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        let error = refused.map_or_else(String::new, |e| e.to_string());
        tracing::error!(
            "io_uring refused {} reads ({error}); this worker reads with the reader threads now",
            self.pending.len()
        );
        self.broken = true;
        for index in std::mem::take(&mut self.pending) {
            if let Some(slot) = self.slots.get_mut(index).and_then(Option::as_mut) {
                if slot.result.is_none() {
                    slot.result = Some(-libc::EIO);
                    if let Some(waker) = slot.waker.take() {
                        waker.wake();
                    }
                }
            }
        }
    }

    /// Keeps `buf` for a later read of its size, or frees it.
    fn recycle(&mut self, buf: AlignedBuf) {
        let blocks = buf.layout.size() / ALIGN;
        if let Some(spare) = self.spare.get_mut(blocks.wrapping_sub(1)) {
            if spare.len() < SPARE_PER_SIZE {
                spare.push(buf);
            }
        }
    }

    /// Queues a read of `len` bytes of `file` (descriptor `fd`) from `offset`; `None`
    /// if it cannot be queued now (too many in flight, no memory, a full queue).
    fn push(
        &mut self,
        file: &Arc<dyn ReadFile>,
        fd: RawFd,
        offset: u64,
        len: usize,
    ) -> Option<usize> {
        if self.broken || self.in_flight >= IN_FLIGHT_MAX {
            return None;
        }
        let len32 = u32::try_from(len).ok()?;
        let spare = self.spare.get_mut(len.div_ceil(ALIGN).saturating_sub(1));
        let buf = match spare.and_then(Vec::pop) {
            Some(buf) => buf,
            None => AlignedBuf::new(len)?,
        };
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let entry = opcode::Read::new(types::Fd(fd), buf.ptr.as_ptr(), len32)
            .offset(offset)
            .build()
            .user_data(index as u64);
        // SAFETY: the buffer and the file descriptor the entry names stay valid until
        // its completion is reaped: the slot owns the buffer and holds the file's
        // handle, and neither a dropped ticket nor a dropped ring frees a slot whose
        // read is in flight.
        let mut pushed = unsafe { self.uring.submission().push(&entry).is_ok() };
        if !pushed && self.submit().is_ok() {
            // SAFETY: as above.
            pushed = unsafe { self.uring.submission().push(&entry).is_ok() };
        }
        if !pushed {
            self.free.push(index);
            return None;
        }
        self.slots[index] = Some(Slot {
            buf,
            _file: Arc::clone(file),
            result: None,
            waker: None,
            abandoned: false,
        });
        self.in_flight += 1;
        self.pending.push(index);
        Some(index)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // The kernel may still write into the buffers of reads in flight: wait for them
        // before the slots (and their buffers) go. A broken ring is not entered again;
        // its buffers are leaked rather than freed under a read.
        if self.broken {
            std::mem::forget(std::mem::take(&mut self.slots));
            return;
        }
        let _ = self.submit();
        while self.in_flight > 0 {
            match self.uring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // A ring that cannot wait cannot be trusted to have stopped writing:
                    // leak the buffers rather than free memory the kernel may fill.
                    std::mem::forget(std::mem::take(&mut self.slots));
                    return;
                }
            }
            self.reap();
        }
    }
}

/// Gives this worker thread a ring, and spawns on its runtime the task that reaps
/// completions. Call from inside the worker's runtime. An error (a kernel without
/// io_uring, or one that refuses it) leaves the worker reading with the reader threads.
pub fn start() -> std::io::Result<()> {
    let uring = IoUring::new(RING_ENTRIES)?;
    // SAFETY: eventfd takes plain integers; a non-negative result is a new descriptor
    // this process owns and nothing else closes.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
    uring.submitter().register_eventfd(eventfd.as_raw_fd())?;
    // SAFETY: `eventfd` owns its descriptor, which stays open, and the same, for as
    // long as the AsyncFd that takes it.
    let signal = unsafe { AsyncFd::register_with_interest(eventfd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)?;
    RING.with_borrow_mut(|ring| {
        *ring = Some(Ring {
            uring,
            spare: Default::default(),
            slots: Vec::new(),
            free: Vec::new(),
            in_flight: 0,
            pending: Vec::new(),
            broken: false,
        })
    });
    tokio::spawn(reap_completions(signal));
    Ok(())
}

/// Whether this thread has a ring that works.
pub fn on_this_thread() -> bool {
    RING.with_borrow(|ring| ring.as_ref().is_some_and(|ring| !ring.broken))
}

/// Reaps completions whenever the ring's eventfd says some were posted.
async fn reap_completions(signal: AsyncFd<OwnedFd>) {
    loop {
        let Ok(mut ready) = signal.readable().await else {
            return;
        };
        // Reset the count before reaping: a completion posted after this signals again.
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `count`, from a descriptor `signal` owns.
        let _ = unsafe { libc::read(signal.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        ready.clear_ready();
        RING.with_borrow_mut(|ring| {
            if let Some(ring) = ring {
                ring.reap();
            }
        });
    }
}

/// A read in flight on this thread's ring: resolves to its bytes.
struct Ticket {
    index: usize,
    /// Taken once the read is done: the buffer leaves the slot with it.
    taken: bool,
}

impl Future for Ticket {
    type Output = std::io::Result<(AlignedBuf, usize)>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let index = self.index;
        let polled = RING.with_borrow_mut(|ring| {
            let Some(ring) = ring else {
                return Poll::Ready(Err(std::io::Error::other("polled off its worker")));
            };
            ring.reap();
            let Some(slot) = ring.slots.get_mut(index).and_then(Option::as_mut) else {
                return Poll::Ready(Err(std::io::Error::other("a read without its slot")));
            };
            match slot.result {
                None => {
                    slot.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
                Some(result) => {
                    let Some(slot) = ring.slots[index].take() else {
                        return Poll::Ready(Err(std::io::Error::other("a read without its slot")));
                    };
                    ring.free.push(index);
                    Poll::Ready(if result < 0 {
                        Err(std::io::Error::from_raw_os_error(-result))
                    } else {
                        Ok((slot.buf, result as usize))
                    })
                }
            }
        });
        if polled.is_ready() {
            self.taken = true;
        }
        polled
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let index = self.index;
        let _ = RING.try_with(|ring| {
            let mut ring = ring.borrow_mut();
            let Some(ring) = ring.as_mut() else { return };
            match ring.slots.get_mut(index).and_then(Option::as_mut) {
                Some(slot) if slot.result.is_none() => slot.abandoned = true,
                Some(_) => {
                    ring.slots[index] = None;
                    ring.free.push(index);
                }
                None => {}
            }
        });
    }
}

/// Reads `missing` through this thread's ring, all at once, and puts their versions in
/// memory. A read that cannot go through the ring (a file without a descriptor, too
/// many in flight) is made here, as the reader threads make theirs. Errors are left for the request itself to meet, as
/// with the reader threads.
pub async fn resolve(shared: &Arc<Shared>, missing: Vec<Unresolved>) {
    let store = &shared.store;
    let mut reads = store.plan_cold_reads(missing);
    let mut tickets = Vec::with_capacity(reads.runs().len());
    let mut inline = Vec::new();
    RING.with_borrow_mut(|ring| {
        for (run_index, run) in reads.runs().iter().enumerate() {
            let queued = match (ring.as_mut(), run.file()) {
                (Some(ring), Some(file)) => file
                    .raw_fd()
                    .and_then(|fd| ring.push(file, fd, run.offset(), run.span())),
                _ => None,
            };
            match queued {
                Some(index) => tickets.push((
                    run_index,
                    Ticket {
                        index,
                        taken: false,
                    },
                )),
                None => inline.push(run_index),
            }
        }
        // Submitted at once, not after a yield that would let the worker's other ready
        // connections queue theirs for one io_uring_enter: that measured no faster
        // (docs/figures.md) and each read waited a turn longer.
        if let Some(ring) = ring.as_mut() {
            ring.submit_reaping();
        }
    });
    for run_index in inline {
        store.cold_read_here(&mut reads, run_index);
    }
    crate::stats::add(
        &shared.counters.local().io_uring_reads,
        tickets.len() as u64,
    );
    for (run_index, ticket) in tickets {
        let read = ticket.await;
        store.cold_read_done(
            &mut reads,
            run_index,
            read.as_ref()
                .map(|(buf, n)| buf.filled(*n))
                .map_err(clone_error),
        );
        if let Ok((buf, _)) = read {
            RING.with_borrow_mut(|ring| {
                if let Some(ring) = ring.as_mut() {
                    ring.recycle(buf);
                }
            });
        }
    }
    let _ = store.install_cold_reads(reads);
}

fn clone_error(e: &std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), e.to_string())
}
