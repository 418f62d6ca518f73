//! A simulated disk for crash tests: it keeps what was written apart from what was
//! synced, so a test can cut the power and see only what a real disk would keep.
//!
//! Model: each file has `synced` bytes (survive a power loss) and `written` bytes (what a
//! reader sees now). A file's existence is durable once the directory is synced after
//! its creation. On [`SimDisk::power_loss`], every file falls back to its synced bytes,
//! plus — when asked to tear — a random prefix of the unsynced bytes with its last
//! bytes possibly garbled, as a write torn mid-sector would leave. Files created since
//! the last directory sync vanish, removed ones come back. Space reserved for a file
//! reads as zeros past its written bytes; a sync makes the reservation durable too,
//! and a power loss keeps the last synced one, as a file system that persists
//! `fallocate(2)` with the file's data would.
//!
//! Faults: [`SimDisk::fail_syncs_after`] makes the n-th and every later sync fail, as a
//! disk that lost a write would report it.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::disk::{Disk, DiskFile, PageFile, ReadFile};

#[derive(Debug, Clone, Default)]
struct SimFile {
    written: Vec<u8>,
    synced: Vec<u8>,
    /// The size space was reserved up to ([`DiskFile::reserve`]): past `written`,
    /// the file reads as zeros up to it. Kept apart rather than as zeros in `written`,
    /// which stays what was appended.
    reserved: u64,
    /// The reservation as the last sync left it: what a power loss keeps.
    synced_reserved: u64,
    /// A page file ([`Disk::open_pages`]): written in place, so a power loss keeps
    /// its synced bytes only.
    pages: bool,
}

impl SimFile {
    /// How long the file is: its appended bytes, or its reserved space if longer.
    fn len(&self) -> u64 {
        (self.written.len() as u64).max(self.reserved)
    }

    /// Makes what the file holds now, bytes and reservation, what a power loss keeps.
    fn make_durable(&mut self) {
        self.synced = self.written.clone();
        self.synced_reserved = self.reserved;
    }

    /// Drops the space reserved past the written bytes.
    fn cut_reservation(&mut self) {
        self.reserved = 0;
    }
}

#[derive(Debug, Default)]
struct State {
    files: BTreeMap<String, SimFile>,
    /// The directory as of its last sync: names that survive a power loss.
    durable_names: Vec<String>,
    syncs_left_before_failure: Option<u64>,
    /// A power loss armed to strike at the n-th append from now.
    power_loss_after_appends: Option<(u64, Tear)>,
    /// Open read handles, so a removed file's readers keep its bytes.
    readers: Vec<std::sync::Weak<SimReader>>,
    /// Set by a power loss until [`SimDisk::revive`]: the machine is off, so whatever the
    /// old process still tries to write goes nowhere.
    off: bool,
}

/// A disk in memory that can lose power; cheap to clone (clones share the disk).
#[derive(Debug, Clone, Default)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

/// How a power loss treats bytes written but not synced.
#[derive(Debug, Clone, Copy)]
pub enum Tear {
    /// Nothing is lost: the process died but the operating system kept every byte it
    /// was given (what `kill -9` does).
    KeepWritten,
    /// All unsynced bytes are lost.
    DropUnsynced,
    /// A prefix of the unsynced bytes survives, its last bytes garbled; the `u64` seeds
    /// the choice so a failure can be replayed.
    Torn(u64),
}

impl SimDisk {
    pub fn new() -> SimDisk {
        SimDisk::default()
    }

    /// Makes every sync after the next `n` fail.
    pub fn fail_syncs_after(&self, n: u64) {
        self.state.lock().syncs_left_before_failure = Some(n);
    }

    /// Arms a power loss that strikes during the `n`-th append from now (that append
    /// fails; 0 means the next one, as 1 does), to crash a writer at an exact point.
    pub fn power_loss_after_appends(&self, n: u64, tear: Tear) {
        self.state.lock().power_loss_after_appends = Some((n, tear));
    }

    /// Disarms a power loss armed by [`SimDisk::power_loss_after_appends`].
    pub fn disarm(&self) {
        self.state.lock().power_loss_after_appends = None;
    }

    /// Whether the power is off (a power loss happened and no revive yet).
    pub fn is_off(&self) -> bool {
        self.state.lock().off
    }

    /// Cuts the power: only durable state survives (see the module comment), and the
    /// disk refuses all I/O until [`SimDisk::revive`].
    pub fn power_loss(&self, tear: Tear) {
        power_loss_locked(&mut self.state.lock(), tear);
    }

    /// Turns the machine back on after a power loss.
    pub fn revive(&self) {
        self.state.lock().off = false;
    }

    /// The bytes a reader sees now in `name`, for tests that inspect the log.
    pub fn contents(&self, name: &str) -> Option<Vec<u8>> {
        self.state.lock().files.get(name).map(|f| f.written.clone())
    }

    /// Overwrites bytes of a file (written and synced), to model corruption at rest.
    pub fn corrupt(&self, name: &str, offset: usize, bytes: &[u8]) {
        let mut state = self.state.lock();
        if let Some(file) = state.files.get_mut(name) {
            for (i, b) in bytes.iter().enumerate() {
                if let Some(slot) = file.written.get_mut(offset + i) {
                    *slot = *b;
                }
                if let Some(slot) = file.synced.get_mut(offset + i) {
                    *slot = *b;
                }
            }
        }
    }
}

fn power_loss_locked(state: &mut State, tear: Tear) {
    state.off = true;
    let mut rng = match tear {
        Tear::KeepWritten => {
            for file in state.files.values_mut() {
                file.make_durable();
            }
            state.durable_names = state.files.keys().cloned().collect();
            return;
        }
        Tear::DropUnsynced => None,
        Tear::Torn(seed) => Some(seed | 1),
    };
    let durable = state.durable_names.clone();
    state.files.retain(|name, _| durable.contains(name));
    for name in &durable {
        state.files.entry(name.clone()).or_default();
    }
    for file in state.files.values_mut() {
        let mut kept = file.synced.clone();
        if let (Some(seed), false) = (rng.as_mut(), file.pages) {
            // The unsynced tail is only what was appended after the synced prefix.
            if file.written.len() > file.synced.len() && file.written.starts_with(&file.synced) {
                let unsynced = &file.written[file.synced.len()..];
                let keep = (xorshift(seed) as usize) % (unsynced.len() + 1);
                kept.extend_from_slice(&unsynced[..keep]);
                if keep > 0 && xorshift(seed).is_multiple_of(2) {
                    let garble = 1 + (xorshift(seed) as usize) % keep.min(16);
                    let len = kept.len();
                    for b in &mut kept[len - garble..] {
                        *b = xorshift(seed) as u8;
                    }
                }
            }
        }
        file.written = kept.clone();
        file.synced = kept;
        file.reserved = file.synced_reserved;
    }
    state.syncs_left_before_failure = None;
}

fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no file {name}"))
}

fn powered(state: &State) -> io::Result<()> {
    if state.off {
        return Err(io::Error::other("simulated power loss: disk is off"));
    }
    Ok(())
}

/// Counts an append towards an armed power loss; at the one it was armed for, the
/// power goes (the append fails and none of it lands).
fn strike_if_armed(state: &mut State) -> io::Result<()> {
    let Some((left, tear)) = state.power_loss_after_appends.as_mut() else {
        return Ok(());
    };
    if *left > 1 {
        *left -= 1;
        return Ok(());
    }
    let tear = *tear;
    state.power_loss_after_appends = None;
    power_loss_locked(state, tear);
    Err(io::Error::other("simulated power loss during a write"))
}

fn take_sync(state: &mut State) -> io::Result<()> {
    powered(state)?;
    match state.syncs_left_before_failure.as_mut() {
        Some(0) => Err(io::Error::other("simulated fsync failure")),
        Some(n) => {
            *n -= 1;
            Ok(())
        }
        None => Ok(()),
    }
}

struct SimHandle {
    disk: SimDisk,
    name: String,
}

impl SimHandle {
    /// Runs `f` on the file under the disk's lock, once `gate` (the power, an armed
    /// fault) lets the operation through.
    fn on_file<R>(
        &self,
        gate: impl FnOnce(&mut State) -> io::Result<()>,
        f: impl FnOnce(&mut SimFile) -> R,
    ) -> io::Result<R> {
        let mut state = self.disk.state.lock();
        gate(&mut state)?;
        let file = state
            .files
            .get_mut(&self.name)
            .ok_or_else(|| not_found(&self.name))?;
        Ok(f(file))
    }
}

impl DiskFile for SimHandle {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        let gate = |state: &mut State| {
            powered(state)?;
            strike_if_armed(state)
        };
        self.on_file(gate, |file| file.written.extend_from_slice(buf))
    }

    fn sync(&mut self) -> io::Result<()> {
        self.on_file(take_sync, SimFile::make_durable)
    }

    fn reserve(&mut self, len_bytes: u64) -> io::Result<()> {
        self.on_file(
            |state| powered(state),
            |file| file.reserved = file.reserved.max(len_bytes),
        )
    }

    fn seal(&mut self) -> io::Result<()> {
        self.on_file(take_sync, |file| {
            file.cut_reservation();
            file.make_durable();
        })
    }

    fn try_clone(&self) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(SimHandle {
            disk: self.disk.clone(),
            name: self.name.clone(),
        }))
    }
}

/// What a removed file held when it was removed: its bytes and its length (longer
/// when space was reserved past them).
type Removed = Arc<(Vec<u8>, u64)>;

/// A read handle: it sees the file's bytes as they are when read, and keeps seeing the
/// bytes a removed file had when it was removed, as an open file on Unix does.
#[derive(Debug)]
struct SimReader {
    disk: SimDisk,
    name: String,
    removed: Mutex<Option<Removed>>,
}

impl SimReader {
    /// Runs `f` on the bytes the handle sees: those the removed file had, or those
    /// written to it so far.
    /// The bytes are the appended ones; the file is as long as the second argument
    /// says, zeros past them (reserved space).
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8], u64) -> io::Result<R>) -> io::Result<R> {
        let state = self.disk.state.lock();
        powered(&state)?;
        let kept = self.removed.lock().clone();
        match (&kept, state.files.get(&self.name)) {
            (Some(kept), _) => f(&kept.0, kept.1),
            (None, Some(file)) => f(&file.written, file.len()),
            (None, None) => Err(not_found(&self.name)),
        }
    }
}

/// Fills `buf` from `offset` of `bytes`, with zeros past their end.
fn copy_padded(bytes: &[u8], offset: u64, buf: &mut [u8]) {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let n = buf.len().min(bytes.len() - start);
    buf[..n].copy_from_slice(&bytes[start..start + n]);
    buf[n..].fill(0);
}

impl ReadFile for SimReader {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with_bytes(|bytes, len| {
            let end = offset.saturating_add(buf.len() as u64);
            if end > len {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{} ends before {end}", self.name),
                ));
            }
            copy_padded(bytes, offset, buf);
            Ok(())
        })
    }

    fn read_up_to(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.with_bytes(|bytes, len| {
            let n = usize::try_from(len.saturating_sub(offset))
                .unwrap_or(usize::MAX)
                .min(buf.len());
            copy_padded(bytes, offset, &mut buf[..n]);
            Ok(n)
        })
    }

    fn size(&self) -> io::Result<u64> {
        self.with_bytes(|_, len| Ok(len))
    }
}

/// A page file: written in place. A power loss keeps its synced bytes only.
struct SimPages(SimHandle);

impl PageFile for SimPages {
    fn len(&self) -> io::Result<u64> {
        self.0.on_file(|state| powered(state), |file| file.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0
            .on_file(
                |state| powered(state),
                |file| {
                    let end = offset.checked_add(buf.len() as u64);
                    if end.is_none_or(|end| end > file.len()) {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "read past the end of a page file",
                        ));
                    }
                    copy_padded(&file.written, offset, buf);
                    Ok(())
                },
            )
            .and_then(|r| r)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let gate = |state: &mut State| {
            powered(state)?;
            strike_if_armed(state)
        };
        self.0.on_file(gate, |file| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            let end = start.saturating_add(buf.len());
            if file.written.len() < end {
                file.written.resize(end, 0);
            }
            file.written[start..end].copy_from_slice(buf);
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.on_file(
            |state| powered(state),
            |file| {
                file.written
                    .resize(usize::try_from(len).unwrap_or(usize::MAX), 0);
                file.cut_reservation();
            },
        )
    }

    fn sync(&self) -> io::Result<()> {
        self.0.on_file(take_sync, SimFile::make_durable)
    }
}

impl Disk for SimDisk {
    fn open_pages(&self, name: &str) -> io::Result<Arc<dyn PageFile>> {
        let mut state = self.state.lock();
        powered(&state)?;
        state.files.entry(name.to_string()).or_default().pages = true;
        drop(state);
        Ok(Arc::new(SimPages(SimHandle {
            disk: self.clone(),
            name: name.to_string(),
        })))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.state.lock().files.keys().cloned().collect())
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let state = self.state.lock();
        state
            .files
            .get(name)
            .map(|f| f.written.clone())
            .ok_or_else(|| not_found(name))
    }

    fn open_read(&self, name: &str) -> io::Result<Arc<dyn ReadFile>> {
        let mut state = self.state.lock();
        powered(&state)?;
        if !state.files.contains_key(name) {
            return Err(not_found(name));
        }
        let reader = Arc::new(SimReader {
            disk: self.clone(),
            name: name.to_string(),
            removed: Mutex::new(None),
        });
        state.readers.push(Arc::downgrade(&reader));
        Ok(reader)
    }

    fn create(&self, name: &str) -> io::Result<Box<dyn DiskFile>> {
        let mut state = self.state.lock();
        powered(&state)?;
        state.files.insert(name.to_string(), SimFile::default());
        drop(state);
        Ok(Box::new(SimHandle {
            disk: self.clone(),
            name: name.to_string(),
        }))
    }

    fn open_append(&self, name: &str) -> io::Result<Box<dyn DiskFile>> {
        if !self.state.lock().files.contains_key(name) {
            return Err(not_found(name));
        }
        Ok(Box::new(SimHandle {
            disk: self.clone(),
            name: name.to_string(),
        }))
    }

    fn truncate(&self, name: &str, len_bytes: u64) -> io::Result<()> {
        let mut state = self.state.lock();
        take_sync(&mut state)?;
        let file = state.files.get_mut(name).ok_or_else(|| not_found(name))?;
        let len = usize::try_from(len_bytes).unwrap_or(usize::MAX);
        // As ftruncate(2): a file cut to more than its bytes keeps zeros up to there,
        // and reserved space past the written bytes reads as zeros already.
        file.written.resize(len, 0);
        file.cut_reservation();
        file.make_durable();
        Ok(())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut state = self.state.lock();
        powered(&state)?;
        let file = state.files.remove(name).ok_or_else(|| not_found(name))?;
        // Open read handles keep the bytes, as open files do on Unix.
        let len = file.len();
        let bytes = Arc::new((file.written, len));
        state.readers.retain(|weak| match weak.upgrade() {
            Some(reader) => {
                if reader.name == name {
                    reader
                        .removed
                        .lock()
                        .get_or_insert_with(|| Arc::clone(&bytes));
                }
                true
            }
            None => false,
        });
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut state = self.state.lock();
        powered(&state)?;
        let file = state.files.remove(from).ok_or_else(|| not_found(from))?;
        state.files.insert(to.to_string(), file);
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut state = self.state.lock();
        take_sync(&mut state)?;
        state.durable_names = state.files.keys().cloned().collect();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_armed_power_loss_strikes_at_its_append() {
        let disk = SimDisk::new();
        let mut file = disk.create("f").unwrap_or_else(|e| panic!("create: {e}"));
        assert!(disk.sync_dir().is_ok());
        assert!(file.append(b"synced").is_ok());
        assert!(file.sync().is_ok());
        disk.power_loss_after_appends(3, Tear::DropUnsynced);
        assert!(file.append(b" one").is_ok());
        assert!(file.append(b" two").is_ok());
        assert!(!disk.is_off());
        assert!(file.append(b" three").is_err(), "the third append strikes");
        assert!(disk.is_off());
        disk.revive();
        assert_eq!(disk.contents("f").as_deref(), Some(&b"synced"[..]));
        // Struck once, it is disarmed.
        assert!(file.append(b" four").is_ok());
        assert!(!disk.is_off());
    }

    /// A torn write can end a record in zeros that the reservation supplies: cut to
    /// the record's end, the file keeps those zeros, as ftruncate(2) keeps them.
    #[test]
    fn truncating_into_reserved_space_keeps_its_zeros() {
        let disk = SimDisk::new();
        let mut file = disk.create("f").unwrap_or_else(|e| panic!("create: {e}"));
        assert!(file.append(b"abc").is_ok());
        assert!(file.reserve(10).is_ok());
        assert!(disk.truncate("f", 5).is_ok());
        assert_eq!(disk.contents("f").as_deref(), Some(&b"abc\0\0"[..]));
    }
}
