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
