//! Rows written through a container: a set, add, replace or cas, a delete, a touch;
//! the row and every index entry it changes in one atomic engine batch, under the
//! locks of all of them.

use super::*;

/// What one attempt of a write found.
enum Attempt {
    Done(RowResult),
    /// The changes were made: the row's record is what the batch wrote for it.
    Wrote,
    /// The row holds index entries the attempt had not locked: try again with these
    /// (each index's number and the entry's key).
    NeedKeys(Vec<(usize, Vec<u8>)>),
    /// The row no longer holds the value it was found by: look it up again.
    Moved,
}

impl Tables {
    /// A storage command on a row: `key` and `value` as the container spells them.
    pub fn write(
        &self,
        catalog: &Catalog,
        container: Container,
        key: &[u8],
        value: &[u8],
        mode: WriteMode,
        (client_flags, exptime): (u32, i64),
    ) -> Result<WriteOutcome, Error> {
        let _gate = self.gate.read();
        let (current, t) = self.current(catalog, container)?;
        let def = &current.tables[t];
        let values = parse_row(def, container.via, key, value)?;
        let outcome = match container.via {
            Via::Primary => {
                let rk = row_key(def, &values[def.table.primary])?;
                // As for memcached's keys: values go to disk when memory is short, but
                // every key's slot stays in memory, and a new row needs one.
                if !self.store.has_room_for_key(Key::new(ROW_SPACE, &rk)) {
                    return Ok(WriteOutcome::NoMemory);
                }
                self.write_row(def, &rk, values, mode, (client_flags, exptime), None)?
            }
            Via::Index(i) => {
                if !def.table.indexes[i].kind.is_unique() {
                    return Err(value_error!(
                        "index {} is not unique: write the row through table {}",
                        def.table.indexes[i].name,
                        def.table.name
                    ));
                }
                if mode == WriteMode::Add {
                    return Ok(WriteOutcome::NotStored);
                }
                let mut outcome = None;
                for _ in 0..ATTEMPTS {
                    let Some((rk, value)) = self.locate(def, i, key)? else {
                        return Ok(match mode {
                            WriteMode::Cas(_) => WriteOutcome::NotFound,
                            _ => WriteOutcome::NotStored,
                        });
                    };
                    // Through a unique index a write updates the row that holds the
                    // value; it may not give the row another primary key.
                    if row_key(def, &values[def.table.primary])? != rk {
                        return Ok(WriteOutcome::NotStored);
                    }
                    let column = def.table.indexes[i].column;
                    let mode = match mode {
                        WriteMode::Set => WriteMode::Replace,
                        other => other,
                    };
                    match self.write_row(
                        def,
                        &rk,
                        values.clone(),
                        mode,
                        (client_flags, exptime),
                        Some((column, value)),
                    ) {
                        Ok(WriteOutcome::NotFound) | Ok(WriteOutcome::NotStored)
                            if mode != WriteMode::Add =>
                        {
                            // Moved or gone meanwhile: look again.
                            self.counters.retries.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        other => {
                            outcome = Some(other?);
                            break;
                        }
                    }
                }
                outcome.unwrap_or(WriteOutcome::NotStored)
            }
        };
        if outcome == WriteOutcome::Duplicate {
            self.counters
                .unique_refusals
                .fetch_add(1, Ordering::Relaxed);
        }
        Ok(outcome)
    }

    /// Writes the row `values` at `rk` with its index entries, as one batch. With
    /// `holds`, the row must exist and hold that value in that column (a write through
    /// an index), else the outcome is `NotFound`.
    fn write_row(
        &self,
        def: &TableDef,
        rk: &[u8],
        values: Vec<Value>,
        mode: WriteMode,
        (client_flags, exptime): (u32, i64),
        holds: Option<(usize, Value)>,
    ) -> Result<WriteOutcome, Error> {
        let op = RowOp::Write {
            row: row::encode(&values).into(),
            entries: entry_keys_of(def, &values)?,
            mode,
            client_flags,
            exptime,
        };
        Ok(match self.change_row(def, rk, op, holds.as_ref())? {
            RowResult::Outcome(outcome) => outcome,
            RowResult::Written(w) => WriteOutcome::Stored(w),
            RowResult::Moved | RowResult::Missing => WriteOutcome::NotFound,
            RowResult::Touched(..) => unreachable!("a write is no touch"),
        })
    }

    /// Runs `op` on the row at `rk` and every index entry it has or will have, as one
    /// batch: locks them all, looks at the row, decides, writes.
    fn change_row(
        &self,
        def: &TableDef,
        rk: &[u8],
        op: RowOp,
        holds: Option<&(usize, Value)>,
    ) -> Result<RowResult, Error> {
        let pk = pk_bytes(rk);
        let new_entries: &[(usize, Vec<u8>)] = match &op {
            RowOp::Write { entries, .. } => entries,
            _ => &[],
        };
        let mut old_keys: Vec<(usize, Vec<u8>)> = Vec::new();
        // An update that keeps the row's indexed values (and its exptime, which its
        // entries carry) changes the row alone: a first attempt locks the row only, and
        // locks the entries too only if the row shows they change. `add` makes a new
        // row, whose entries are new: it locks them from the start.
        let mut entries_locked =
            !matches!(&op, RowOp::Write { mode, .. } if *mode != WriteMode::Add);
        // Counted under way (for the scans of transactions) until it returns.
        let _writing = self.writes.writing([def.number]);
        for _ in 0..ATTEMPTS {
            let mut engine_keys: Vec<Key<'_>> =
                Vec::with_capacity(1 + new_entries.len() + old_keys.len());
            engine_keys.push(Key::new(ROW_SPACE, rk));
            if entries_locked {
                engine_keys.extend(
                    new_entries
                        .iter()
                        .map(|(i, k)| Key::new(entry_space(def, *i), k)),
                );
            }
            engine_keys.extend(
                old_keys
                    .iter()
                    .map(|(i, k)| Key::new(entry_space(def, *i), k)),
            );
            let old_at = engine_keys.len() - old_keys.len();
            let decide = |current: &[Option<ItemRef<'_>>], now: u32| {
                let keep = || current.iter().map(|_| Change::Keep).collect::<Vec<_>>();
                let decided = decide_row(
                    def,
                    &op,
                    holds,
                    pk,
                    (&engine_keys, old_at, entries_locked),
                    current,
                    now,
                );
                match decided {
                    Ok((Some(changes), attempt)) => (changes, Ok(attempt)),
                    Ok((None, attempt)) => (keep(), Ok(attempt)),
                    Err(e) => (keep(), Err(e)),
                }
            };
            let (attempt, written) = self.store.update_batch(&engine_keys, decide)?;
            match attempt? {
                Attempt::Done(RowResult::Touched(values, item)) => {
                    let lsn = written.iter().flatten().map(|w| w.lsn).max();
                    let item = RowItem {
                        lsn: lsn.unwrap_or(item.lsn),
                        ..item
                    };
                    return Ok(RowResult::Touched(values, item));
                }
                Attempt::Wrote => {
                    let Some(w) = written[0] else {
                        unreachable!("a written or deleted row has its record")
                    };
                    return Ok(RowResult::Written(w));
                }
                Attempt::Done(result) => return Ok(result),
                Attempt::Moved => return Ok(RowResult::Moved),
                Attempt::NeedKeys(keys) => {
                    if entries_locked {
                        // A writer changed the row's entries since it was looked at.
                        self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    }
                    entries_locked = true;
                    old_keys.extend(keys);
                }
            }
        }
        Err(value_error!("the row kept changing while it was written"))
    }

    /// Deletes the row `key` names in `container`, with its index entries. With `cas`,
    /// only if the row's CAS is that.
    pub fn delete(
        &self,
        catalog: &Catalog,
        container: Container,
        key: &[u8],
        cas: Option<u64>,
    ) -> Result<ChangeOutcome, Error> {
        let _gate = self.gate.read();
        let (current, t) = self.current(catalog, container)?;
        let def = &current.tables[t];
        let result = self.on_located(def, container.via, key, RowOp::Delete { cas })?;
        Ok(match result {
            RowResult::Written(w) => ChangeOutcome::Done(Some(w)),
            RowResult::Outcome(WriteOutcome::Exists) => ChangeOutcome::Exists,
            _ => ChangeOutcome::NotFound,
        })
    }

    /// Gives the row `key` names in `container`, and its index entries, a new exptime
    /// (memcached's rule: relative, absolute, or negative for now). Returns the row as
    /// the container shows it, after the touch, with what was written.
    pub fn touch(
        &self,
        catalog: &Catalog,
        container: Container,
        key: &[u8],
        exptime: i64,
    ) -> Result<Option<RowItem>, Error> {
        let _gate = self.gate.read();
        let (current, t) = self.current(catalog, container)?;
        let def = &current.tables[t];
        let result = self.on_located(def, container.via, key, RowOp::Touch { exptime })?;
        Ok(match result {
            RowResult::Touched(values, item) => Some(RowItem {
                value: render(
                    def,
                    container.via,
                    &values.iter().map(Value::as_ref).collect::<Vec<_>>(),
                ),
                ..item
            }),
            _ => None,
        })
    }

    /// Runs `op` on the row a container's key names: by its row key, or through a unique
    /// index (looking the row up again if a writer moved it meanwhile).
    fn on_located(
        &self,
        def: &TableDef,
        via: Via,
        key: &[u8],
        op: RowOp,
    ) -> Result<RowResult, Error> {
        match via {
            Via::Primary => {
                let Some(rk) = Self::row_key_from_text(def, key) else {
                    return Ok(RowResult::Missing);
                };
                self.change_row(def, &rk, op, None)
            }
            Via::Index(i) => {
                if !def.table.indexes[i].kind.is_unique() {
                    return Err(value_error!(
                        "index {} is not unique: change the row through table {}",
                        def.table.indexes[i].name,
                        def.table.name
                    ));
                }
                for _ in 0..ATTEMPTS {
                    let Ok(Some((rk, value))) = self.locate(def, i, key) else {
                        return Ok(RowResult::Missing);
                    };
                    let holds = (def.table.indexes[i].column, value);
                    match self.change_row(def, &rk, op.clone(), Some(&holds))? {
                        RowResult::Moved | RowResult::Missing => {
                            self.counters.retries.fetch_add(1, Ordering::Relaxed);
                        }
                        other => return Ok(other),
                    }
                }
                Ok(RowResult::Missing)
            }
        }
    }
}

/// What to do to a row and its index entries.
#[derive(Debug, Clone)]
enum RowOp {
    Write {
        row: Arc<[u8]>,
        /// The index entries the new row has: each index's number and the entry's key.
        entries: Vec<(usize, Vec<u8>)>,
        mode: WriteMode,
        client_flags: u32,
        exptime: i64,
    },
    Delete {
        cas: Option<u64>,
    },
    Touch {
        exptime: i64,
    },
}

/// What a change to a row came to.
#[derive(Debug)]
enum RowResult {
    /// Written: the row's record.
    Written(Written),
    /// A write's outcome other than stored, or a delete's CAS mismatch (`Exists`).
    Outcome(WriteOutcome),
    /// Touched: the row's values, and its item (the reply waits for the touch's LSN).
    Touched(Vec<Value>, RowItem),
    /// No such row.
    Missing,
    /// The row no longer holds the value it was found by.
    Moved,
}

/// What a write's mode makes of the row being there (its CAS) or not: None to go on.
fn refusal(mode: WriteMode, cas: Option<u64>) -> Option<WriteOutcome> {
    match (mode, cas) {
        (WriteMode::Add, Some(_)) | (WriteMode::Replace, None) => Some(WriteOutcome::NotStored),
        (WriteMode::Cas(_), None) => Some(WriteOutcome::NotFound),
        (WriteMode::Cas(want), Some(cas)) if want != cas => Some(WriteOutcome::Exists),
        _ => None,
    }
}

/// Decides one attempt of `op` on a row, given the current versions of the row and of
/// the entries locked with it (`keys`; entries the row held before start at `old_at`;
/// a write's new entries follow the row if `entries_locked`).
/// Returns the changes (None: none) and what the attempt came to.
fn decide_row(
    def: &TableDef,
    op: &RowOp,
    holds: Option<&(usize, Value)>,
    pk: &[u8],
    (keys, old_at, entries_locked): (&[Key<'_>], usize, bool),
    current: &[Option<ItemRef<'_>>],
    now: u32,
) -> Result<(Option<Vec<Change>>, Attempt), Error> {
    // Under the locks: borrow the row's text rather than copy it; only a touch, which
    // shows the row, needs it owned.
    let shown = current[0]
        .as_ref()
        .map(|item| row::decode_ref(item.value, &def.table))
        .transpose()?;
    let owned = |values: &[ValueRef<'_>]| values.iter().map(|v| v.to_value()).collect::<Vec<_>>();
    let old: Option<Vec<Value>> = match (&shown, op) {
        (Some(values), RowOp::Touch { .. }) => Some(owned(values)),
        _ => None,
    };
    match (holds, &shown) {
        (Some((column, value)), Some(shown)) if shown[*column] != value.as_ref() => {
            return Ok((None, Attempt::Moved))
        }
        (Some(_), None) => return Ok((None, Attempt::Moved)),
        _ => {}
    }
    let row = current[0].as_ref();
    // The index entries the row holds now.
    let old_entries = || match &shown {
        Some(values) => entry_keys_of_ref(def, values),
        None => Ok(Vec::new()),
    };
    if let RowOp::Write {
        row: row_bytes,
        entries,
        mode,
        client_flags,
        exptime,
    } = op
    {
        if let Some(outcome) = refusal(*mode, row.map(|r| r.cas)) {
            return Ok((None, Attempt::Done(RowResult::Outcome(outcome))));
        }
        if !entries_locked {
            // Only the row is locked. Its entries point at it while it holds their
            // values (every change to either is one batch under both locks), so a
            // write that keeps those values and the exptime its entries carry leaves
            // them as they are. Otherwise: lock the entries too and decide again.
            let exptime = exptime_to_absolute(*exptime, now);
            // The row keeps every entry it has (they come in index order).
            let had = old_entries()?;
            let same_values = shown.is_none() || had == *entries;
            if same_values && (entries.is_empty() || row.is_some_and(|r| r.exptime == exptime)) {
                let put = Change::Put(NewItem {
                    exptime,
                    ..NewItem::new(Arc::clone(row_bytes), *client_flags)
                });
                return Ok((Some(vec![put]), Attempt::Wrote));
            }
            let unlocked = had
                .into_iter()
                .filter(|old| !entries.contains(old))
                .collect();
            return Ok((None, Attempt::NeedKeys(unlocked)));
        }
    }
    // The row's current entries, each of which must be locked.
    let missing: Vec<(usize, Vec<u8>)> = old_entries()?
        .into_iter()
        .filter(|(i, k)| {
            let space = entry_space(def, *i);
            !keys
                .iter()
                .any(|e| e.space == space && e.bytes == k.as_slice())
        })
        .collect();
    if !missing.is_empty() {
        return Ok((None, Attempt::NeedKeys(missing)));
    }
    // An entry of the row's (it points at this primary key) at position `at`.
    let ours = |at: usize| current[at].as_ref().is_some_and(|e| **e.value == *pk);
    match op {
        RowOp::Write {
            row: row_bytes,
            entries,
            client_flags,
            exptime,
            ..
        } => {
            // Another row holds a value this row's unique index wants. (A non-unique
            // index's entry holds the primary key: only this row's can be there.)
            if (0..entries.len()).any(|j| current[1 + j].is_some() && !ours(1 + j)) {
                return Ok((
                    None,
                    Attempt::Done(RowResult::Outcome(WriteOutcome::Duplicate)),
                ));
            }
            let exptime = exptime_to_absolute(*exptime, now);
            let mut changes = Vec::with_capacity(current.len());
            changes.push(Change::Put(NewItem {
                exptime,
                ..NewItem::new(Arc::clone(row_bytes), *client_flags)
            }));
            for j in 0..entries.len() {
                let unchanged = ours(1 + j)
                    && current[1 + j]
                        .as_ref()
                        .is_some_and(|e| e.exptime == exptime);
                changes.push(if unchanged {
                    Change::Keep
                } else {
                    Change::Put(NewItem {
                        exptime,
                        ..NewItem::new(Arc::from(pk), 0)
                    })
                });
            }
            // Entries of values the row no longer holds go.
            for at in old_at..current.len() {
                changes.push(if ours(at) {
                    Change::Delete
                } else {
                    Change::Keep
                });
            }
            Ok((Some(changes), Attempt::Wrote))
        }
        RowOp::Delete { cas } => {
            let Some(row) = row else {
                return Ok((None, Attempt::Done(RowResult::Missing)));
            };
            if cas.is_some_and(|cas| cas != row.cas) {
                return Ok((
                    None,
                    Attempt::Done(RowResult::Outcome(WriteOutcome::Exists)),
                ));
            }
            let changes = (0..current.len())
                .map(|at| {
                    if at == 0 || ours(at) {
                        Change::Delete
                    } else {
                        Change::Keep
                    }
                })
                .collect();
            Ok((Some(changes), Attempt::Wrote))
        }
        RowOp::Touch { exptime } => {
            let (Some(row), Some(values)) = (row, old) else {
                return Ok((None, Attempt::Done(RowResult::Missing)));
            };
            let exptime = exptime_to_absolute(*exptime, now);
            let changes = (0..current.len())
                .map(|at| {
                    if at == 0 || ours(at) {
                        Change::Touch {
                            exptime: Some(exptime),
                            mark_win_sent: false,
                        }
                    } else {
                        Change::Keep
                    }
                })
                .collect();
            let item = RowItem {
                value: Vec::new(),
                client_flags: row.client_flags,
                exptime,
                cas: row.cas,
                lsn: row.lsn,
            };
            Ok((
                Some(changes),
                Attempt::Done(RowResult::Touched(values, item)),
            ))
        }
    }
}
