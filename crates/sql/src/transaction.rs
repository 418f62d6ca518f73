//! A session's writes reaching the store: a statement's changes applied as one batch
//! (autocommit) or checked and kept in the open transaction, whose own reads see them
//! through the overlay; COMMIT and ROLLBACK.
//!
//! COMMIT applies them with what the transaction read ([`kura_tables::Reads`], noted by
//! the virtual tables): a row, key, range or table read and changed since by another
//! writer refuses the whole batch (1213).
//!
//! An open transaction's changes are checked again as a whole with each statement
//! ([`Tables::check_changes`]), which says how every row it touches would end up: that
//! is the overlay, exact for REPLACE, INSERT IGNORE and ON DUPLICATE KEY UPDATE too.

use std::sync::Arc;

use kura_tables::{Applied, ApplyError, RowChange, Tables, Value};

use crate::error::SqlError;
use crate::result::Done;
use crate::session::Session;

impl Session {
    /// MySQL's `CLIENT_FOUND_ROWS`, which the client asked for at login: an UPDATE (or
    /// an upsert) reports the rows it found, changed or not, as affected.
    pub fn set_found_rows(&mut self, on: bool) {
        self.shared.state.lock().found_rows = on;
    }

    /// Applies a statement's changes (autocommit), or checks and keeps them (in a
    /// transaction).
    pub(crate) fn commit_statement(&mut self, changes: Vec<RowChange>) -> Result<Done, ApplyError> {
        let (catalog, found_rows) = {
            let state = self.shared.state.lock();
            (state.catalog.clone(), state.found_rows)
        };
        let tables: Arc<Tables> = Arc::clone(&self.shared.tables);
        // The rows affected as the client counts them.
        let count =
            |applied: &Applied| applied.affected + if found_rows { applied.unchanged } else { 0 };
        let applied = if self.in_transaction {
            let (mut all, before) = {
                let state = self.shared.state.lock();
                (state.transaction.clone(), state.transaction_affected)
            };
            all.extend(changes.iter().cloned());
            let (mut applied, after) =
                tables.check_changes(&catalog, &all, &mut |rule, old, new| {
                    self.upsert(rule, old, new)
                })?;
            let mut state = self.shared.state.lock();
            // This statement's rows: the transaction's so far came to `before`.
            state.transaction_affected = (applied.affected, applied.unchanged, applied.matched);
            applied.affected -= before.0.min(applied.affected);
            applied.unchanged -= before.1.min(applied.unchanged);
            applied.matched -= before.2.min(applied.matched);
            state.overlay = after
                .into_iter()
                .map(|(table, pk, values)| ((table, pk), values))
                .collect();
            state.transaction.extend(changes);
            applied
        } else {
            // What the statement read is checked with its writes: a scanned table
            // had no other write since the scan began, a range holds the same rows.
            let reads = std::mem::take(&mut self.shared.state.lock().read_set);
            let applied =
                tables.commit_changes(&catalog, &changes, &reads, &mut |rule, old, new| {
                    self.upsert(rule, old, new)
                })?;
            if let Some(lsn) = applied.lsn {
                let mut state = self.shared.state.lock();
                state.max_lsn = state.max_lsn.max(lsn);
                state.written_lsn = state.written_lsn.max(lsn);
            }
            applied
        };
        let affected = count(&applied);
        // MySQL's OK packet: the first AUTO_INCREMENT value the statement took, else
        // the auto column's value in the last row it inserted.
        let last_insert_id = {
            let mut state = self.shared.state.lock();
            state.row_count = affected as i64;
            match state.auto_first {
                Some(first) => {
                    state.last_insert_id = first;
                    first
                }
                None if applied.affected > 0 => state.auto_last.unwrap_or(0),
                None => 0,
            }
        };
        let info = if applied.matched > 0 {
            format!(
                "Rows matched: {}  Changed: {}  Warnings: 0",
                applied.matched, applied.affected
            )
        } else {
            String::new()
        };
        Ok(Done {
            affected,
            last_insert_id,
            info,
        })
    }

    /// The new values of the row `old` an upsert insert found in its way (rule `rule`
    /// of [`Session::upserts`]); a refusal's reason goes to the state's error.
    fn upsert(&self, rule: u32, old: &[Value], new: &[Value]) -> Result<Vec<Value>, ApplyError> {
        let catalog = self.shared.state.lock().catalog.clone();
        let result = match self.upserts.get(rule as usize) {
            Some(upsert) => match catalog.tables.iter().find(|d| d.number == upsert.table) {
                Some(def) => upsert.evaluate(&self.db, def, old, new),
                None => return Err(ApplyError::NoTable(upsert.table)),
            },
            None => Err(SqlError::internal(
                "an upsert rule the session does not have",
            )),
        };
        result.map_err(|e| {
            self.shared.state.lock().error.get_or_insert(e);
            ApplyError::Upsert
        })
    }

    pub(crate) fn apply_error(&mut self, e: ApplyError) -> SqlError {
        match e {
            ApplyError::Duplicate {
                table,
                index,
                value,
            } => SqlError::duplicate(&value, &table, &index),
            ApplyError::Conflict => {
                // MySQL rolls the whole transaction back after a deadlock.
                self.rollback();
                SqlError::conflict()
            }
            ApplyError::NoTable(_) => SqlError::new(
                1412,
                b"HY000",
                "Table definition has changed, please retry transaction",
            ),
            // A statement of its own: the server makes it again where the table is
            // once the hand-off ends, or shows this. (COMMIT's is `commit`'s.)
            ApplyError::Moving(table) => SqlError::moving_table(&table),
            ApplyError::NoMemory => SqlError::new(
                1041,
                b"HY000",
                "Out of memory; the server's memory limit (-m) holds no more keys",
            ),
            ApplyError::Upsert => self
                .shared
                .state
                .lock()
                .error
                .take()
                .unwrap_or_else(|| SqlError::internal("an upsert was refused")),
            // MySQL's answer on a replica started with --read-only.
            ApplyError::Other(kura_tables::Error::Engine(kura_engine::Error::ReadOnly {
                primary,
            })) => SqlError::read_only(&primary),
            // MySQL's answer to a transaction larger than its binary log's cache.
            ApplyError::Other(kura_tables::Error::Engine(kura_engine::Error::TooLarge {
                bytes,
                limit,
            })) => SqlError::new(
                1197,
                b"HY000",
                format!(
                    "Multi-statement transaction required more than 'max_binlog_cache_size' bytes of storage: its {bytes} bytes are more than the {limit} one log segment holds; split it"
                ),
            ),
            ApplyError::Other(e) => SqlError::internal(e),
        }
    }

    /// COMMIT: the transaction's changes as one batch, if nothing it read changed
    /// since. A transaction that wrote nothing and made no locking read commits
    /// without the check: its reads were answered already, as MySQL's are.
    pub(crate) fn commit(&mut self) -> Result<(), SqlError> {
        let (changes, mut reads, locking) = {
            let mut state = self.shared.state.lock();
            (
                std::mem::take(&mut state.transaction),
                std::mem::take(&mut state.read_set),
                state.locking,
            )
        };
        {
            let catalog = self.shared.state.lock().catalog.clone();
            reads.written(&changes, |n| catalog.tables.iter().find(|d| d.number == n));
        }
        self.in_transaction = false;
        let result = if changes.is_empty() && (!locking || reads.is_empty()) {
            Ok(())
        } else {
            let catalog = self.shared.state.lock().catalog.clone();
            let tables = Arc::clone(&self.shared.tables);
            let applied =
                tables.commit_changes(&catalog, &changes, &reads, &mut |rule, old, new| {
                    self.upsert(rule, old, new)
                });
            match applied {
                Ok(applied) => {
                    if let Some(lsn) = applied.lsn {
                        let mut state = self.shared.state.lock();
                        state.max_lsn = state.max_lsn.max(lsn);
                        state.written_lsn = state.written_lsn.max(lsn);
                    }
                    Ok(())
                }
                // The table is being handed to another shard: the transaction,
                // made here, is rolled back, as after a deadlock, to be run again
                // where the table is. (Never made again as it stands: it read here.)
                Err(ApplyError::Moving(table)) => Err(SqlError::moved_table(&table)),
                Err(e) => Err(self.apply_error(e)),
            }
        };
        self.rollback();
        result
    }

    /// ROLLBACK: forgets the transaction's changes.
    pub(crate) fn rollback(&mut self) {
        let mut state = self.shared.state.lock();
        state.transaction.clear();
        state.transaction_affected = (0, 0, 0);
        state.overlay.clear();
        state.read_cas.clear();
        state.read_set.clear();
        state.locking = false;
        drop(state);
        self.in_transaction = false;
        self.upserts.clear();
    }

    /// Ends an open transaction as MySQL does before DDL and `SET autocommit=1`.
    pub(crate) fn implicit_commit(&mut self) -> Result<(), SqlError> {
        if self.in_transaction {
            self.commit()?;
        }
        Ok(())
    }
}
