//! Draining a child's stdout and stderr in background threads, so the child never
//! blocks on a full pipe, while keeping the text for error messages.

use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// Keep at most this much of a child's output; older text is dropped.
const LOG_MAX_BYTES: usize = 256 * 1024;

/// Everything a child printed, stdout and stderr interleaved line by line.
#[derive(Clone, Default)]
pub struct Log {
    text: Arc<Mutex<String>>,
    /// Streams still being drained into this log.
    open: Arc<AtomicUsize>,
}

impl Log {
    pub fn snapshot(&self) -> String {
        self.text
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits up to `timeout` for a line containing `text`: what a child prints
    /// reaches the log through a thread, a moment after the child printed it.
    /// Returns whether it came.
    pub fn wait_for(&self, text: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.snapshot().contains(text) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits up to `timeout` for every stream drained into this log to reach its end
    /// (the child exited and everything it printed is here). Returns whether they did.
    pub fn wait_closed(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.open.load(Ordering::Acquire) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
        true
    }

    fn push(&self, line: &str) {
        let mut text = self.text.lock().unwrap_or_else(PoisonError::into_inner);
        text.push_str(line);
        if text.len() > LOG_MAX_BYTES {
            let mut cut = text.len() - LOG_MAX_BYTES;
            while !text.is_char_boundary(cut) {
                cut += 1;
            }
            text.drain(..cut);
        }
    }
}

/// Reads `stream` line by line into `log` until EOF. Each line is also offered to
/// `lines` (if any) so the caller can watch for a readiness line; a gone receiver
/// is fine. The sender is dropped at EOF, which tells a waiting receiver the child
/// closed its output (usually: it exited).
pub fn drain(
    stream: impl Read + Send + 'static,
    log: Log,
    prefix: &'static str,
    lines: Option<Sender<String>>,
) {
    log.open.fetch_add(1, Ordering::AcqRel);
    thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut raw = Vec::new();
        loop {
            raw.clear();
            match reader.read_until(b'\n', &mut raw) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&raw);
                    log.push(&format!("{prefix}{line}"));
                    if let Some(sender) = &lines {
                        let _ = sender.send(line.trim_end().to_string());
                    }
                }
            }
        }
        log.open.fetch_sub(1, Ordering::AcqRel);
    });
}
