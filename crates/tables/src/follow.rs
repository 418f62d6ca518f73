//! A replica's tables. Rows, index entries and the catalog arrive as copies of the
//! primary's records (`Store::apply_copied`), and every index is entries in the store,
//! so what the tables keep beside the store is the catalog alone (which tables exist,
//! what a connection sees): a run that changes it (DDL on the primary) makes the
//! catalog be read again.

use kura_engine::record::{self, Decoded};
use kura_engine::{History, Key};

use crate::catalog::Catalog;
use crate::rows::{Tables, CATALOG_KEY, CATALOG_SPACE, ROW_SPACE};
use crate::Error;

impl Tables {
    /// Applies `run`, records copied from the primary that start at `start_lsn`
    /// ([`kura_engine::Store::apply_copied`]), and brings the catalog along. Returns
    /// the LSN the run ends at.
    pub fn apply_copied(&self, run: &[u8], start_lsn: u64) -> Result<u64, Error> {
        let mut catalog_changed = false;
        let mut tables: Vec<u32> = Vec::new();
        let mut pos = 0;
        while pos < run.len() {
            // The store below checks every record's CRC and refuses a damaged run
            // whole; this only looks at which keys the run touches.
            let Decoded::Record(record, len) = record::decode_unverified(&run[pos..]) else {
                break;
            };
            match record.key() {
                Some(key) if key.space == CATALOG_SPACE => catalog_changed = true,
                Some(key) if key.space == ROW_SPACE => {
                    if let Some(b) = key.bytes.get(..4) {
                        tables.push(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                    }
                }
                _ => {}
            }
            pos += len;
        }
        // Counted under way (for the scans of transactions) until it returns.
        let _writing = self.writes.writing(tables);
        let end = self.store.apply_copied(run, start_lsn)?;
        if catalog_changed {
            self.follow_catalog()?;
        }
        Ok(end)
    }

    /// Empties the store for a full copy from the primary
    /// ([`kura_engine::Store::restart_log`]), and the tables with it.
    pub fn restart_copy(
        &self,
        sequence: u64,
        start_lsn: u64,
        history: History,
        rewind_floor: u64,
    ) -> Result<(), Error> {
        self.store
            .restart_log(sequence, start_lsn, history, rewind_floor)?;
        self.follow_catalog()
    }

    /// Cuts this replica's log to `lsn`, the records its new primary never had, and
    /// takes the new primary's `history` (`Store::rewind_log`); the tables are read
    /// again from what stays.
    pub fn rewind(&self, lsn: u64, history: History) -> Result<(), Error> {
        let store = &self.store;
        store.rewind_log(lsn, history, |bytes, start_lsn| {
            store.apply_copied(bytes, start_lsn).map(drop)
        })?;
        self.follow_catalog()
    }

    /// This node became a primary: a table change its old primary left half done
    /// (an index being filled, a dropped table's rows) is finished here.
    pub fn promoted(&self) -> Result<(), Error> {
        self.finish_ddl()
    }

    /// Reads the catalog the store now holds.
    fn follow_catalog(&self) -> Result<(), Error> {
        let catalog = match self.store.peek(Key::new(CATALOG_SPACE, CATALOG_KEY))? {
            Some(item) => Catalog::decode(&item.value)?,
            None => Catalog::new(),
        };
        self.install_catalog(catalog);
        Ok(())
    }
}
