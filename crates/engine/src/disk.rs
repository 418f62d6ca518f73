//! The narrow file interface every byte of the engine's I/O goes through.
//!
//! [`OsDisk`] is the real thing: files in one data directory. [`crate::sim::SimDisk`]
//! keeps written and synced bytes apart so tests can simulate a power loss and tear the
//! last write, and can make a write or fsync fail.
//!
//! The interface is deliberately small: list, read whole, read a range, create, append,
//! sync, truncate, remove, and sync the directory. Anything the engine needs from a disk must be here, so
//! that the simulation covers it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
}

/// A file open for appending.
pub trait DiskFile: Send {
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes every appended byte durable (fdatasync).
    fn sync(&mut self) -> io::Result<()>;
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
}

/// Files in a directory of the real file system.
#[derive(Debug)]
pub struct OsDisk {
    dir: PathBuf,
    /// Held open for its advisory lock: one process per data directory.
    _lock: File,
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
        })
    }
}

struct OsFile(File);

impl DiskFile for OsFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn try_clone(&self) -> io::Result<Box<dyn DiskFile>> {
        Ok(Box::new(OsFile(self.0.try_clone()?)))
    }
}

impl Disk for OsDisk {
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
        Ok(Box::new(OsFile(file)))
    }

    fn open_append(&self, name: &str) -> io::Result<Box<dyn DiskFile>> {
        let file = OpenOptions::new().append(true).open(self.dir.join(name))?;
        Ok(Box::new(OsFile(file)))
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
