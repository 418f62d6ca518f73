//! A replica's tables. Rows, index entries and the catalog arrive as copies of the
//! primary's records (`Store::apply_copied`); this keeps what the tables hold beside
//! the store in step with them: the catalog (which tables exist, what a connection
//! sees) and the ordered indexes, which live in memory only.
//!
//! How: before a run of copies is applied, the current version of each row it touches
//! in a table with ordered indexes is read; after, the new one; the ordered sets move
//! from one to the other, as a write on the primary moves them. A run that changes the
//! catalog (DDL on the primary) is rarer: the catalog is read again and the ordered
//! indexes rebuilt from the rows, then swapped in whole.
//!
//! Invariant: only the follower's thread applies copies, so nothing changes a row
//! between the read before and the read after.

use kura_engine::record::{self, Decoded};
use kura_engine::{History, Key};

use crate::catalog::Catalog;
use crate::ordered::Ordered;
use crate::row;
use crate::rows::{Tables, CATALOG_KEY, CATALOG_SPACE, ROW_SPACE};
use crate::Error;

impl Tables {
    /// Applies `run`, records copied from the primary that start at `start_lsn`
    /// ([`kura_engine::Store::apply_copied`]), and brings the catalog and ordered
    /// indexes along. Returns the LSN the run ends at.
    pub fn apply_copied(&self, run: &[u8], start_lsn: u64) -> Result<u64, Error> {
        let mut catalog_changed = false;
        let mut rows: Vec<Vec<u8>> = Vec::new();
        let mut pos = 0;
        while pos < run.len() {
            // The store below checks every record's CRC and refuses a damaged run
            // whole; this only looks at which keys the run touches.
            let Decoded::Record(record, len) = record::decode_unverified(&run[pos..]) else {
                break;
            };
            match record.key() {
                Some(key) if key.space == CATALOG_SPACE => catalog_changed = true,
                Some(key) if key.space == ROW_SPACE => rows.push(key.bytes.to_vec()),
                _ => {}
            }
            pos += len;
        }
        // Counted under way (for the scans of transactions) until it returns.
        let _writing = self.writes.writing(
            rows.iter()
                .filter_map(|k| k.get(..4))
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])),
        );
        if catalog_changed {
            let end = self.store.apply_copied(run, start_lsn)?;
            self.follow_catalog()?;
            return Ok(end);
        }
        let catalog = self.catalog();
        let mut watched = Vec::new();
        for row_key in &rows {
            let Some(def) = row_key
                .get(..4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                .and_then(|number| catalog.tables.iter().find(|d| d.number == number))
                .filter(|def| self.ordered.has(def))
            else {
                continue;
            };
            let before = self.row_values(def, row_key)?;
            watched.push((def, row_key, before));
        }
        let end = self.store.apply_copied(run, start_lsn)?;
        for (def, row_key, before) in watched {
            let after = self.row_values(def, row_key)?;
            self.ordered.apply(
                def,
                before.as_ref().map(|(v, _)| v.as_slice()),
                after.as_ref().map(|(v, _)| v.as_slice()),
                after.as_ref().map_or(0, |&(_, exptime)| exptime),
            );
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

    /// Reads the catalog the store now holds and rebuilds the ordered indexes for it.
    fn follow_catalog(&self) -> Result<(), Error> {
        let catalog = match self.store.peek(Key::new(CATALOG_SPACE, CATALOG_KEY))? {
            Some(item) => Catalog::decode(&item.value)?,
            None => Catalog::new(),
        };
        self.install_catalog(catalog);
        let rebuilt = Ordered::default();
        self.rebuild_ordered(&rebuilt)?;
        self.ordered.replace_all(rebuilt);
        Ok(())
    }

    /// The live row at `row_key` of table `def`, decoded, with its exptime.
    fn row_values(
        &self,
        def: &crate::TableDef,
        row_key: &[u8],
    ) -> Result<Option<(Vec<crate::Value>, u32)>, Error> {
        match self.store.peek(Key::new(ROW_SPACE, row_key))? {
            Some(item) => Ok(Some((row::decode(&item.value, &def.table)?, item.exptime))),
            None => Ok(None),
        }
    }
}
