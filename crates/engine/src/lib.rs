//! Kura's storage engine: an append-only log of checksummed records that is also the
//! write-ahead log, an in-memory index that finds the newest version of every key, group
//! commit, and recovery that replays the log and cuts a torn tail.
//!
//! What it is not: it knows no sockets, no protocol syntax and no async runtime. The
//! server turns requests into calls on [`Store`]; the engine decides what is durable and
//! tells the server when (see [`Store::acked_lsn`] and [`Options::on_ack`]).
//!
//! Invariants:
//! - Every change to the index is first appended to the log, under the key's shard lock,
//!   so the log order of two records for one key is the order in which they changed it.
//! - A record is acknowledged only once the durability mode says so (after fsync, after
//!   the write reached the OS, or at once), and `acked_lsn` never moves backwards.
//! - A failed write or fsync poisons the store: every later change is refused.
//! - CAS values handed out are never reused, across restarts too.
//! - All file I/O goes through [`disk::Disk`], so tests can inject faults and power loss.

mod apply;
mod budget;
mod checkpoint;
mod checkpointing;
pub mod clock;
mod cold;
mod compaction;
pub mod disk;
mod error;
mod expiry;
mod follow;
mod held;
pub mod histogram;
mod history;
mod index;
mod item;
mod key;
mod log;
mod ordered;
pub mod record;
mod recovery;
mod rewind;
mod scan;
pub mod sim;
mod store;

pub use checkpoint::FILE as CHECKPOINT_FILE;
pub use clock::{Clock, CoarseClock, ManualClock, SystemClock};
pub use cold::{ColdReads, Unresolved};
pub use compaction::{Compaction, FindLive};
pub use error::Error;
pub use expiry::exptime_to_absolute;
pub use history::{Epoch, History};
pub use item::{Access, Change, Item, ItemOf, ItemRef, NewCas, NewItem, Written};
pub use key::{Class, Key, Space, KEY_MAX_BYTES};
pub use log::Cursor;
pub use log::Run as ReadRun;
pub use ordered::{OrderedRange, OrderedSpaces, BATCH as ORDERED_BATCH, FILE as ORDERED_FILE};
pub use store::{Ack, Durability, Options, Stats, Store};
