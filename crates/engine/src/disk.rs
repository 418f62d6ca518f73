//! The narrow file interface every byte of the engine's I/O goes through.
//!
//! [`OsDisk`] is the real thing: files in one data directory. [`crate::sim::SimDisk`]
//! keeps written and synced bytes apart so tests can simulate a power loss and tear the
//! last write, and can make a write or fsync fail.
//!
//! The interface is deliberately small: list, read whole, read a range, create, append,
//! reserve space, sync, seal, truncate, remove, and sync the directory. Anything the
//! engine needs from a disk must be here, so that the simulation covers it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::histogram::Histogram;

/// A directory of files.
pub trait Disk: Send + Sync {
    /// Names of the files in the directory (no paths), in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// The whole content of a file.
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Opens a file for positional reads of what has been appended to it so far (what
    /// the operating system holds, synced or not). A handle keeps working after the
    /// file is removed, as an open file does on Unix.
    fn open_read(&self, name: &str) -> io::Result<Arc<dyn ReadFile>>;
    /// As [`Disk::open_read`], but the reads bypass the operating system's page cache
    /// where the file system allows it, for a file no longer written whose useful
    /// bytes the caller caches itself. Otherwise the same as `open_read`.
    fn open_read_direct(&self, name: &str) -> io::Result<Arc<dyn ReadFile>> {
        self.open_read(name)
    }
    /// Creates a new empty file (replacing any old one) and opens it for appending.
    fn create(&self, name: &str) -> io::Result<Box<dyn DiskFile>>;
    /// Opens an existing file for appending at its end.
    fn open_append(&self, name: &str) -> io::Result<Box<dyn DiskFile>>;
    /// Cuts a file to `len_bytes` and makes the cut durable.
    fn truncate(&self, name: &str, len_bytes: u64) -> io::Result<()>;
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Renames `from` to `to`, replacing any `to`; durable once the directory is synced.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Makes file creations and removals durable.
    fn sync_dir(&self) -> io::Result<()>;
    /// How long each file sync took, where the disk measures it.
    fn sync_times(&self) -> Option<&Histogram> {
        None
    }
    /// Opens a file written in place by page (the ordered keyspace's B-tree,
    /// `ordered.rs`), creating it empty if it does not exist; its creation is durable
    /// once the directory is synced.
    fn open_pages(&self, name: &str) -> io::Result<Arc<dyn PageFile>>;
}

/// A file read and written at any offset: pages rewritten in place, made durable by
/// [`PageFile::sync`].
#[allow(clippy::len_without_is_empty)]
pub trait PageFile: Send + Sync {
    /// How many bytes the file holds.
    fn len(&self) -> io::Result<u64>;
    /// Fills `buf` from `offset`; an error if the file ends first.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes `buf` at `offset`, growing the file if it ends before.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Cuts or grows the file to `len` bytes; new bytes read as zeros.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes every byte written and the file's length durable (fdatasync).
    fn sync(&self) -> io::Result<()>;
}

/// A file open for appending.
pub trait DiskFile: Send {
    /// Writes `buf` where the last append ended (the file's end when it was opened),
    /// whatever space was reserved past it.
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes every appended byte durable (fdatasync).
    fn sync(&mut self) -> io::Result<()>;
    /// Reserves the file's space up to `len_bytes` (`fallocate(2)`): its size grows to
    /// that, the bytes past the appended ones read as zeros, and appends into the
    /// reserved space neither allocate blocks nor change the file's size, which an
    /// append at the end of a file does every time (ext4 journals each such change).
    /// Where space cannot be reserved (a file system without it, a full disk), the
    /// file is left as it is, or reserved in part.
    fn reserve(&mut self, len_bytes: u64) -> io::Result<()>;
    /// Cuts the file back to its appended bytes, dropping the space reserved past
    /// them, and makes bytes and size durable (fsync).
    fn seal(&mut self) -> io::Result<()>;
    /// A second handle on the same file, so one thread can sync while another appends.
    /// A sync through it covers at least every byte appended before the sync began.
    fn try_clone(&self) -> io::Result<Box<dyn DiskFile>>;
}

/// A file open for positional reads; shared by the threads that read values.
pub trait ReadFile: Send + Sync {
    /// Fills `buf` from `offset`; an error if the file ends first.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Reads from `offset` until `buf` is full or the file ends; returns how many bytes.
    fn read_up_to(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// How many bytes the file holds now.
    fn size(&self) -> io::Result<u64>;
    /// The open file's descriptor, for a caller that reads it its own way (an
    /// io_uring), with reads of whole aligned blocks into aligned memory, which suit
    /// a direct file too; the handle keeps it open. `None` where there is no such
    /// file (the simulated disk).
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

impl ReadFile for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }

    fn read_up_to(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut filled = 0;
        while filled < buf.len() {
            match std::os::unix::fs::FileExt::read_at(
                self,
                &mut buf[filled..],
                offset + filled as u64,
            ) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(filled)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }

    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(std::os::fd::AsRawFd::as_raw_fd(self))
    }
}

/// A file opened with `O_DIRECT`: each read goes to the device, in whole aligned
/// blocks, through an aligned buffer of the reading thread's.
struct DirectFile(File);

/// Alignment of a direct read's offset, length and memory: the largest logical block
/// size in use, so it suits every device.
const DIRECT_ALIGN: u64 = 4096;

/// Direct reads up to this size reuse the thread's buffer; larger ones (a replay or a
/// compaction window) get one of their own, so no thread keeps a large one.
const DIRECT_BUFFER_KEPT_BYTES: usize = 128 << 10;

thread_local! {
    static DIRECT_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl DirectFile {
    /// Reads the aligned blocks that cover `len` bytes from `offset` into an aligned
    /// buffer and copies out the part asked for; returns its length (shorter at the
    /// end of the file).
    fn read_blocks(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = offset - offset % DIRECT_ALIGN;
        let end = (offset + buf.len() as u64).next_multiple_of(DIRECT_ALIGN);
        let span = (end - start) as usize;
        let mut read = |scratch: &mut Vec<u8>| -> io::Result<usize> {
            if scratch.len() < span + DIRECT_ALIGN as usize {
                scratch.resize(span + DIRECT_ALIGN as usize, 0);
            }
            let skew = scratch.as_ptr().align_offset(DIRECT_ALIGN as usize);
            let blocks = &mut scratch[skew..skew + span];
            let mut filled = 0;
            while filled < span {
                match std::os::unix::fs::FileExt::read_at(
                    &self.0,
                    &mut blocks[filled..],
                    start + filled as u64,
                ) {
                    Ok(0) => break,
                    Ok(n) => {
                        filled += n;
                        // Only the end of the file makes a read stop off a block.
                        if !(n as u64).is_multiple_of(DIRECT_ALIGN) {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            let lead = (offset - start) as usize;
            let got = filled.saturating_sub(lead).min(buf.len());
            buf[..got].copy_from_slice(&blocks[lead..lead + got]);
            Ok(got)
        };
        if span <= DIRECT_BUFFER_KEPT_BYTES {
            DIRECT_BUFFER.with_borrow_mut(read)
        } else {
            read(&mut Vec::new())
        }
    }
}

impl ReadFile for DirectFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.read_blocks(buf, offset)? < buf.len() {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    fn read_up_to(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_blocks(buf, offset)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(std::os::fd::AsRawFd::as_raw_fd(&self.0))
    }
}

/// Files in a directory of the real file system.
#[derive(Debug)]
pub struct OsDisk {
    dir: PathBuf,
    /// Held open for its advisory lock: one process per data directory.
    _lock: File,
    /// Every fdatasync of its files, timed.
    syncs: Arc<Histogram>,
}

impl OsDisk {
    /// Opens (creating if needed) a data directory and locks it against other processes.
    pub fn open(dir: &Path) -> Result<OsDisk, crate::Error> {
        fs::create_dir_all(dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("LOCK"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(crate::Error::Locked),
            Err(fs::TryLockError::Error(e)) => return Err(e.into()),
        }
        Ok(OsDisk {
            dir: dir.to_path_buf(),
            _lock: lock,
            syncs: Arc::default(),
        })
    }
}

/// A file of the real file system, written at `end` with positional writes (never
/// `O_APPEND`, which would write at the end of the reserved space).
struct OsFile {
    file: File,
    end: u64,
    syncs: Arc<Histogram>,
}

impl DiskFile for OsFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.file, buf, self.end)?;
        self.end += buf.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        let start = std::time::Instant::now();
        let synced = self.file.sync_data();
        self.syncs.record(start.elapsed());
        synced
    }

    fn reserve(&mut self, len_bytes: u64) -> io::Result<()> {
        reserve_space(&self.file, len_bytes)
    }

    fn seal(&mut self) -> io::Result<()> {
        if self.file.metadata()?.len() != self.end {
            self.file.set_len(self.end)?;
        }
        self.file.sync_all()
    }

    fn try_clone(&self) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(OsFile {
            file: self.file.try_clone()?,
            end: self.end,
            syncs: Arc::clone(&self.syncs),
        }))
    }
}

/// `fallocate(2)` of the file's first `len` bytes, growing its size to that. Not
/// supported by the file system (or by the kernel) is not an error, nor is a disk too
/// full for all of it (ext4 may have reserved a part): appends then extend the file
/// as they always can, until they meet the full disk themselves.
#[allow(unsafe_code)]
fn reserve_space(file: &File, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a reservation too long"))?;
    loop {
        // SAFETY: fallocate takes a file descriptor, which `file` keeps open for the
        // call, and plain integers; it touches no memory of ours.
        if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::ENOSPC) => return Ok(()),
            _ => return Err(e),
        }
    }
}

/// A page file of the real file system.
struct OsPages {
    file: File,
    syncs: Arc<Histogram>,
}

impl PageFile for OsPages {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.file, buf, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync(&self) -> io::Result<()> {
        let start = std::time::Instant::now();
        let synced = self.file.sync_data();
        self.syncs.record(start.elapsed());
        synced
    }
}

impl Disk for OsDisk {
    fn sync_times(&self) -> Option<&Histogram> {
        Some(&self.syncs)
    }

    fn open_pages(&self, name: &str) -> io::Result<Arc<dyn PageFile>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(self.dir.join(name))?;
        Ok(Arc::new(OsPages {
            file,
            syncs: Arc::clone(&self.syncs),
        }))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        File::open(self.dir.join(name))?.read_to_end(&mut buf)?;
        Ok(buf)
    }

    fn open_read(&self, name: &str) -> io::Result<Arc<dyn ReadFile>> {
        Ok(Arc::new(File::open(self.dir.join(name))?))
    }

    fn open_read_direct(&self, name: &str) -> io::Result<Arc<dyn ReadFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(self.dir.join(name))
        {
            Ok(file) => Ok(Arc::new(DirectFile(file))),
            // A file system without O_DIRECT (tmpfs before Linux 6.6, some FUSE ones).
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.open_read(name),
            Err(e) => Err(e),
        }
    }

    fn create(&self, name: &str) -> io::Result<Box<dyn DiskFile>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(self.dir.join(name))?;
        Ok(Box::new(OsFile {
            file,
            end: 0,
            syncs: Arc::clone(&self.syncs),
        }))
    }

    fn open_append(&self, name: &str) -> io::Result<Box<dyn DiskFile>> {
        let file = OpenOptions::new().write(true).open(self.dir.join(name))?;
        let end = file.metadata()?.len();
        Ok(Box::new(OsFile {
            file,
            end,
            syncs: Arc::clone(&self.syncs),
        }))
    }

    fn truncate(&self, name: &str, len_bytes: u64) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(self.dir.join(name))?;
        file.set_len(len_bytes)?;
        file.sync_all()
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.dir.join(from), self.dir.join(to))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.dir.join(name))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends land where the last one ended, not at the end of reserved space; a seal
    /// cuts the reservation off, and a file opened again appends at its end.
    #[test]
    fn appends_fill_reserved_space_and_a_seal_cuts_the_rest() {
        // Under the crate: on the disk the code is built on, not a tmpfs /tmp.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or_else(|e| panic!("tempdir: {e}"));
        let disk = OsDisk::open(dir.path()).unwrap_or_else(|e| panic!("open: {e}"));
        let ok = |r: io::Result<()>| r.unwrap_or_else(|e| panic!("{e}"));
        let size = || {
            disk.open_read("f")
                .and_then(|f| f.size())
                .unwrap_or_else(|e| panic!("size: {e}"))
        };
        let mut file = disk.create("f").unwrap_or_else(|e| panic!("create: {e}"));
        ok(file.append(b"abc"));
        ok(file.reserve(8192));
        // ext4, the file system this is built and run on, reserves.
        assert_eq!(size(), 8192);
        ok(file.append(b"def"));
        let mut head = [1u8; 16];
        let read = disk.open_read("f").unwrap_or_else(|e| panic!("open: {e}"));
        read.read_exact_at(&mut head, 0)
            .unwrap_or_else(|e| panic!("read: {e}"));
        assert_eq!(&head, b"abcdef\0\0\0\0\0\0\0\0\0\0");
        ok(file.seal());
        assert_eq!(size(), 6);
        drop(file);
        let mut file = disk
            .open_append("f")
            .unwrap_or_else(|e| panic!("reopen: {e}"));
        ok(file.append(b"g"));
        ok(file.sync());
        assert_eq!(disk.read("f").ok().as_deref(), Some(&b"abcdefg"[..]));
    }

    /// A direct read returns the same bytes as a buffered one at any offset and
    /// length, including across blocks, at the end of the file and past it.
    #[test]
    fn direct_reads_match_buffered_reads() {
        // Under the crate: on the disk the code is built on, not a tmpfs /tmp.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or_else(|e| panic!("tempdir: {e}"));
        let disk = OsDisk::open(dir.path()).unwrap_or_else(|e| panic!("open: {e}"));
        let len = 300_000usize;
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
        let mut file = disk.create("f").unwrap_or_else(|e| panic!("create: {e}"));
        file.append(&bytes)
            .unwrap_or_else(|e| panic!("append: {e}"));
        file.sync().unwrap_or_else(|e| panic!("sync: {e}"));
        let direct = disk
            .open_read_direct("f")
            .unwrap_or_else(|e| panic!("open direct: {e}"));
        assert_eq!(direct.size().ok(), Some(len as u64));
        for (offset, want) in [
            (0usize, 1usize),
            (0, 4096),
            (1, 4096),
            (4095, 2),
            (5000, 1000),
            (8191, 10_000),
            (len - 10, 10),
            (len - 10, 4096),
            (len, 100),
            (len + 5000, 100),
            (17, 200_000),
        ] {
            let mut got = vec![0u8; want];
            let n = direct
                .read_up_to(&mut got, offset as u64)
                .unwrap_or_else(|e| panic!("read {offset}+{want}: {e}"));
            let expect = &bytes[offset.min(len)..(offset + want).min(len)];
            assert_eq!(&got[..n], expect, "read {offset}+{want}");
            let mut exact = vec![0u8; want];
            let whole = direct.read_exact_at(&mut exact, offset as u64);
            assert_eq!(whole.is_ok(), offset + want <= len, "exact {offset}+{want}");
            if whole.is_ok() {
                assert_eq!(&exact[..], expect);
            }
        }
    }
}
