//! The log's history: which log this is, and its epochs. A replication position is a
//! history's id, an epoch and an LSN: the id is drawn at random when a log is created
//! (a replica takes its primary's), and an epoch begins each time a node becomes the
//! primary of that history (promotion), at the LSN its log had reached. Two nodes of one
//! history share their logs up to where the first epoch they do not share begins, so a
//! node that comes back knows what to keep and what to cut: [`History::shared_until`].
//! Each epoch also draws a random tag: two nodes promoted from the same epoch (an
//! operator's mistake, or a partition) both begin the next number, and the tags tell
//! their epochs apart.
//!
//! Kept in the data directory as `history` (`docs/format.md`), replaced whole: written
//! to `history.tmp`, synced, renamed over it, the directory synced.
//!
//! What it is not for: the log's records (`record.rs`), or choosing a primary (the
//! operator's `replicaof` does).

use std::hash::BuildHasher;

use crate::disk::Disk;
use crate::Error;

pub(crate) const FILE: &str = "history";
const TEMP_FILE: &str = "history.tmp";
const MAGIC: &[u8; 8] = b"KURAHIST";
const VERSION: u32 = 2;

/// One epoch: its number, the LSN where it begins, and its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    pub number: u64,
    pub start_lsn: u64,
    /// Drawn at random when the epoch begins (0 for epochs kept by a version 1
    /// history file, which had none).
    pub tag: u64,
}

/// 64 random bits: the standard library's hasher keys are drawn from the operating
/// system's random source.
fn random_u64(salt: u8) -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(salt)
}

/// Which log this is, and its epochs; see the module's notes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    /// Drawn at random when the log was created.
    pub id: u128,
    /// Every epoch, oldest first, numbers and starts rising: the first begins at LSN 0.
    pub epochs: Vec<Epoch>,
}

impl History {
    /// A new log's history: a random id, epoch 1 from LSN 0.
    pub fn new() -> History {
        let id = (u128::from(random_u64(1)) << 64) | u128::from(random_u64(2));
        History {
            id,
            epochs: vec![Epoch {
                number: 1,
                start_lsn: 0,
                tag: random_u64(3),
            }],
        }
    }

    /// The epoch being written.
    pub fn current(&self) -> Epoch {
        self.epochs.last().copied().unwrap_or(Epoch {
            number: 1,
            start_lsn: 0,
            tag: 0,
        })
    }

    /// The epoch a log of this history that ends at `lsn` is in: the newest that began
    /// at or before it. A replica names it when it asks to go on from `lsn`.
    pub fn epoch_at(&self, lsn: u64) -> Epoch {
        self.epochs
            .iter()
            .rev()
            .find(|e| e.start_lsn <= lsn)
            .copied()
            .unwrap_or_else(|| self.current())
    }

    /// How far a log that reached `lsn` in the epoch numbered `epoch` with `tag`
    /// shares this history: up to `lsn`, or up to where this history's next epoch
    /// began, whichever is lower. A node of this history keeps its log to there, cuts
    /// the rest, and goes on from there. None when that epoch is not one of this
    /// history's (another tag is another node's epoch of the same number), or `lsn` is
    /// before it began: that log has nothing known in common with this one.
    pub fn shared_until(&self, epoch: u64, tag: u64, lsn: u64) -> Option<u64> {
        let i = self
            .epochs
            .iter()
            .position(|e| e.number == epoch && e.tag == tag)?;
        if lsn < self.epochs[i].start_lsn {
            return None;
        }
        Some(match self.epochs.get(i + 1) {
            Some(next) => lsn.min(next.start_lsn),
            None => lsn,
        })
    }

    /// Begins the next epoch at `lsn` (not before the current one began).
    pub fn begin(&mut self, lsn: u64) -> Epoch {
        let current = self.current();
        let epoch = Epoch {
            number: current.number + 1,
            start_lsn: lsn.max(current.start_lsn),
            tag: random_u64(4),
        };
        self.epochs.push(epoch);
        epoch
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(36 + self.epochs.len() * 24);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.epochs.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.id.to_le_bytes());
        for e in &self.epochs {
            out.extend_from_slice(&e.number.to_le_bytes());
            out.extend_from_slice(&e.start_lsn.to_le_bytes());
            out.extend_from_slice(&e.tag.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<History, String> {
        let fixed = 8 + 4 + 4 + 16;
        if bytes.len() < fixed + 4 || &bytes[..8] != MAGIC {
            return Err("not a Kura history".into());
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body).to_le_bytes() != crc {
            return Err("checksum mismatch".into());
        }
        let u32_at =
            |at: usize| u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&body[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let version = u32_at(8);
        // Version 1 kept no tags.
        let entry = match version {
            1 => 16,
            VERSION => 24,
            _ => {
                return Err(format!(
                    "version {version}, this Kura reads 1 and {VERSION}"
                ))
            }
        };
        let count = u32_at(12) as usize;
        if body.len() != fixed + count * entry || count == 0 {
            return Err("length does not match its epochs".into());
        }
        let mut id = [0u8; 16];
        id.copy_from_slice(&body[16..32]);
        let epochs: Vec<Epoch> = (0..count)
            .map(|i| {
                let at = fixed + i * entry;
                Epoch {
                    number: u64_at(at),
                    start_lsn: u64_at(at + 8),
                    tag: if entry == 24 { u64_at(at + 16) } else { 0 },
                }
            })
            .collect();
        let rising = epochs
            .windows(2)
            .all(|w| w[0].number < w[1].number && w[0].start_lsn <= w[1].start_lsn);
        if !rising {
            return Err("epochs out of order".into());
        }
        Ok(History {
            id: u128::from_le_bytes(id),
            epochs,
        })
    }

    /// The history in `disk`'s directory; a new one, written there, when there is none
    /// (a new log, or one from before histories were kept).
    pub(crate) fn load_or_create(disk: &dyn Disk) -> Result<History, Error> {
        match disk.read(FILE) {
            Ok(bytes) => {
                History::decode(&bytes).map_err(|why| Error::Format(format!("{FILE}: {why}")))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let history = History::new();
                history.store(disk)?;
                Ok(history)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the stored history with this one, durably.
    pub(crate) fn store(&self, disk: &dyn Disk) -> Result<(), Error> {
        let mut file = disk.create(TEMP_FILE)?;
        file.append(&self.encode())?;
        file.sync()?;
        disk.rename(TEMP_FILE, FILE)?;
        disk.sync_dir()?;
        Ok(())
    }
}

impl Default for History {
    fn default() -> History {
        History::new()
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_history_round_trips_and_damage_is_found() {
        let mut h = History::new();
        h.begin(500);
        h.begin(900);
        let bytes = h.encode();
        assert_eq!(History::decode(&bytes), Ok(h.clone()));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(History::decode(&bad).is_err(), "byte {i}");
        }
        assert!(History::decode(&bytes[..bytes.len() - 1]).is_err());
        assert_ne!(History::new().id, History::new().id);
    }

    #[test]
    fn a_version_1_history_is_read_with_untagged_epochs() {
        let mut v1 = Vec::new();
        v1.extend_from_slice(MAGIC);
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&2u32.to_le_bytes());
        v1.extend_from_slice(&7u128.to_le_bytes());
        for (number, start) in [(1u64, 0u64), (2, 500)] {
            v1.extend_from_slice(&number.to_le_bytes());
            v1.extend_from_slice(&start.to_le_bytes());
        }
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        let h = History::decode(&v1).expect("a version 1 history");
        assert_eq!(h.id, 7);
        assert_eq!(
            h.epochs,
            vec![
                Epoch {
                    number: 1,
                    start_lsn: 0,
                    tag: 0
                },
                Epoch {
                    number: 2,
                    start_lsn: 500,
                    tag: 0
                }
            ]
        );
        // Written back as version 2, tags and all.
        assert_eq!(History::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn two_nodes_promoted_from_one_epoch_share_only_what_came_before() {
        let base = History::new();
        let (mut a, mut b) = (base.clone(), base.clone());
        let ea = a.begin(1000);
        let eb = b.begin(1000);
        assert_eq!(ea.number, eb.number);
        assert_ne!(ea.tag, eb.tag);
        // b's log in its own epoch 2 is not a's epoch 2, though number and start agree.
        assert_eq!(a.shared_until(eb.number, eb.tag, 1500), None);
        assert_eq!(a.shared_until(ea.number, ea.tag, 1500), Some(1500));
        let first = base.current();
        assert_eq!(a.shared_until(first.number, first.tag, 1200), Some(1000));
    }

    #[test]
    fn nodes_share_a_history_up_to_the_first_epoch_they_do_not_share() {
        let mut h = History::new();
        let second = h.begin(1000);
        assert_eq!((second.number, second.start_lsn), (2, 1000));
        let third = h.begin(1500);
        let tag = |n: usize| h.epochs[n].tag;
        // A node still in epoch 1 at 1200 wrote 200 bytes the others never had.
        assert_eq!(h.shared_until(1, tag(0), 1200), Some(1000));
        assert_eq!(h.shared_until(1, tag(0), 800), Some(800));
        assert_eq!(h.shared_until(2, tag(1), 1700), Some(1500));
        assert_eq!(h.shared_until(3, third.tag, 1700), Some(1700));
        assert_eq!(h.shared_until(4, third.tag, 1700), None);
        assert_eq!(h.shared_until(3, third.tag, 1400), None);
        assert_eq!(h.epoch_at(1700).number, 3);
        assert_eq!(h.epoch_at(1200).number, 2);
        assert_eq!(h.epoch_at(1000).number, 2);
        assert_eq!(h.epoch_at(999).number, 1);
        // An epoch never begins before the one it follows.
        assert_eq!(h.begin(10).start_lsn, 1500);
    }
}
