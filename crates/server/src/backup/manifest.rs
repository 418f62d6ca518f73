//! A backup's `MANIFEST`: what the backup holds and how to tell it is whole. A text
//! file, one fact a line:
//!
//! ```text
//! kura-backup 1
//! history 000102030405060708090a0b0c0d0e0f
//! epoch 3
//! point_lsn 1048576
//! source 10.0.0.5:11211
//! created_unix_secs 1795000000
//! file 0000000000000001.log 1048576 8a3f09c2
//! file history 64 0c1d2e3f
//! crc32c 5e6f7a8b
//! ```
//!
//! `point_lsn` is where the backup's log ends: the backup holds every change the
//! source's log held up to there. Each `file` line names a file of the backup beside
//! the manifest, its size in bytes and its CRC-32C (hex); the last line is the CRC-32C
//! of every byte above it, so a damaged manifest is caught before it vouches for
//! anything.
//!
//! What it is not for: reading the log's records (the engine checks their own CRCs
//! when the restored node opens them).

use std::io::Read;
use std::path::Path;

/// The manifest's name in the backup's directory.
pub const FILE: &str = "MANIFEST";
const FORMAT_LINE: &str = "kura-backup 1";
/// The data directory's lock file: not part of a backup, and made again by whoever
/// opens the directory.
pub const LOCK_FILE: &str = "LOCK";

/// One file of a backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub size_bytes: u64,
    pub crc32c: u32,
}

/// What a backup holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub history_id: u128,
    pub epoch: u64,
    pub point_lsn: u64,
    pub source: String,
    pub created_unix_secs: u64,
    pub files: Vec<Entry>,
}

impl Manifest {
    pub fn encode(&self) -> String {
        let mut text = format!(
            "{FORMAT_LINE}\nhistory {:032x}\nepoch {}\npoint_lsn {}\nsource {}\ncreated_unix_secs {}\n",
            self.history_id, self.epoch, self.point_lsn, self.source, self.created_unix_secs
        );
        for entry in &self.files {
            text.push_str(&format!(
                "file {} {} {:08x}\n",
                entry.name, entry.size_bytes, entry.crc32c
            ));
        }
        let crc = crc32c::crc32c(text.as_bytes());
        text.push_str(&format!("crc32c {crc:08x}\n"));
        text
    }

    /// Reads a manifest, checking its own CRC first.
    pub fn decode(text: &str) -> Result<Manifest, String> {
        let body_len = text
            .strip_suffix('\n')
            .and_then(|t| t.rfind('\n'))
            .map(|i| i + 1)
            .ok_or("the manifest has no checksum line")?;
        let (body, last) = text.split_at(body_len);
        let actual = crc32c::crc32c(body.as_bytes());
        if last != format!("crc32c {actual:08x}\n") {
            return Err(format!(
                "the manifest is damaged: its lines make CRC-32C {actual:08x}, its last line says {:?}",
                last.trim_end()
            ));
        }
        let mut lines = body.lines();
        if lines.next() != Some(FORMAT_LINE) {
            return Err(format!("the manifest does not begin with {FORMAT_LINE:?}"));
        }
        let mut field = |name: &str| -> Result<String, String> {
            lines
                .next()
                .and_then(|l| l.strip_prefix(name))
                .and_then(|l| l.strip_prefix(' '))
                .map(str::to_string)
                .ok_or_else(|| format!("the manifest has no {name} line where it belongs"))
        };
        let number = |name: &str, text: String| {
            text.parse::<u64>()
                .map_err(|_| format!("the manifest's {name} is not a number: {text}"))
        };
        let history_id = u128::from_str_radix(&field("history")?, 16)
            .map_err(|_| "the manifest's history is not hex".to_string())?;
        let epoch = number("epoch", field("epoch")?)?;
        let point_lsn = number("point_lsn", field("point_lsn")?)?;
        let source = field("source")?;
        let created_unix_secs = number("created_unix_secs", field("created_unix_secs")?)?;
        let mut files = Vec::new();
        for line in lines {
            let parts: Vec<&str> = line.split(' ').collect();
            let ["file", name, size, crc] = parts[..] else {
                return Err(format!("the manifest has a line it does not know: {line}"));
            };
            let (Ok(size_bytes), Ok(crc32c)) = (size.parse(), u32::from_str_radix(crc, 16)) else {
                return Err(format!("the manifest's line is malformed: {line}"));
            };
            files.push(Entry {
                name: name.to_string(),
                size_bytes,
                crc32c,
            });
        }
        Ok(Manifest {
            history_id,
            epoch,
            point_lsn,
            source,
            created_unix_secs,
            files,
        })
    }
}

/// A file's size and CRC-32C, read through once.
pub fn measure(path: &Path) -> std::io::Result<(u64, u32)> {
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut size, mut crc) = (0u64, 0u32);
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok((size, crc));
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        size += n as u64;
    }
}

/// The names of the files in `dir` a backup holds: all but the manifest and the lock,
/// sorted. A directory or a name with a space in it is an error (neither belongs in a
/// data directory).
pub fn backup_files(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().into_string().map_err(|name| {
            std::io::Error::other(format!("a file name that is not UTF-8: {name:?}"))
        })?;
        if name == FILE || name == LOCK_FILE {
            continue;
        }
        if !entry.file_type()?.is_file() || name.contains(char::is_whitespace) {
            return Err(std::io::Error::other(format!(
                "{} is not a file a data directory holds",
                entry.path().display()
            )));
        }
        names.push(name);
    }
    names.sort();
    Ok(names)
}

/// Every file of the backup in `dir`, measured.
pub fn take(dir: &Path) -> std::io::Result<Vec<Entry>> {
    backup_files(dir)?
        .into_iter()
        .map(|name| {
            let (size_bytes, crc32c) = measure(&dir.join(&name))?;
            Ok(Entry {
                name,
                size_bytes,
                crc32c,
            })
        })
        .collect()
}

/// Checks the backup in `dir`: the manifest's own checksum, every listed file's size
/// and CRC-32C, and that no file is there that the manifest does not list. Returns
/// the manifest, or every problem found, each naming its file.
pub fn verify(dir: &Path) -> Result<Manifest, Vec<String>> {
    let path = dir.join(FILE);
    let text =
        std::fs::read_to_string(&path).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    let manifest = Manifest::decode(&text).map_err(|e| vec![format!("{}: {e}", path.display())])?;
    let mut problems = Vec::new();
    for entry in &manifest.files {
        let path = dir.join(&entry.name);
        match measure(&path) {
            Ok((size, _)) if size != entry.size_bytes => problems.push(format!(
                "{}: {size} bytes, the manifest says {}",
                path.display(),
                entry.size_bytes
            )),
            Ok((_, crc)) if crc != entry.crc32c => problems.push(format!(
                "{}: CRC-32C {crc:08x}, the manifest says {:08x}",
                path.display(),
                entry.crc32c
            )),
            Ok(_) => {}
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    match backup_files(dir) {
        Ok(names) => {
            for name in names {
                if !manifest.files.iter().any(|e| e.name == name) {
                    problems.push(format!(
                        "{}: not in the manifest",
                        dir.join(&name).display()
                    ));
                }
            }
        }
        Err(e) => problems.push(format!("{}: {e}", dir.display())),
    }
    if problems.is_empty() {
        Ok(manifest)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::{Entry, Manifest};

    fn manifest() -> Manifest {
        Manifest {
            history_id: 0x0001_0203_0405_0607_0809_0a0b_0c0d_0e0f,
            epoch: 3,
            point_lsn: 1_048_576,
            source: "127.0.0.1:11211".to_string(),
            created_unix_secs: 1_795_000_000,
            files: vec![
                Entry {
                    name: "0000000000000001.log".to_string(),
                    size_bytes: 1_048_576,
                    crc32c: 0x8a3f_09c2,
                },
                Entry {
                    name: "history".to_string(),
                    size_bytes: 64,
                    crc32c: 7,
                },
            ],
        }
    }

    #[test]
    fn a_manifest_reads_back_as_written() {
        let text = manifest().encode();
        assert_eq!(Manifest::decode(&text), Ok(manifest()));
        assert!(text.contains("\nfile history 64 00000007\n"), "{text}");
    }

    #[test]
    fn any_changed_byte_of_a_manifest_is_refused() {
        let text = manifest().encode();
        for i in 0..text.len() {
            let mut bytes = text.clone().into_bytes();
            bytes[i] ^= 0x01;
            let Ok(changed) = String::from_utf8(bytes) else {
                continue;
            };
            assert_ne!(Manifest::decode(&changed), Ok(manifest()), "byte {i}");
        }
    }
}
