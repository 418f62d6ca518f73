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

mod checkpoint;
pub mod clock;
pub mod disk;
mod error;
mod index;
mod log;
pub mod record;
pub mod sim;
mod store;

pub use clock::{Clock, CoarseClock, ManualClock, SystemClock};
pub use error::Error;
pub use store::{
    exptime_to_absolute, Access, Ack, Change, Compaction, Durability, FindLive, Item, ItemOf,
    ItemRef, NewCas, NewItem, Options, Stats, Store, Unresolved, Written,
};
