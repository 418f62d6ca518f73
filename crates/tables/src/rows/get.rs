//! Rows read through a container: by its key, through a unique index, or as a range of
//! an ordered index, each shown as the container's text.

use super::*;

impl Tables {
    /// The engine key of the row whose primary key is `pk`, or None when no row can have
    /// it (a key that is not a value of the column).
    pub(super) fn row_key_from_text(def: &TableDef, pk: &[u8]) -> Option<Vec<u8>> {
        let column = def.table.primary_column();
        let value = column.parse_text(pk).ok()?;
        row_key(def, &value).ok()
    }

    /// The engine keys a container's key may need read first (for callers that bring
    /// records off disk before they run a request): the row's, or the index entry's.
    pub fn keys_to_read(def: &TableDef, via: Via, key: &[u8]) -> Option<(Space, Vec<u8>)> {
        match via {
            Via::Primary => Some((ROW_SPACE, Self::row_key_from_text(def, key)?)),
            Via::Index(i) => {
                let column = &def.table.columns[def.table.indexes[i].column];
                let value = column.parse_text(key).ok()?;
                Some((UNIQUE_SPACE, unique_key(def, i, &value).ok()??))
            }
        }
    }

    fn get_row(&self, row_key: &[u8], access: Access) -> Result<Option<Item>, Error> {
        let key = Key::new(ROW_SPACE, row_key);
        Ok(match access {
            Access::Fetch => self.store.get(key)?,
            Access::NoAccess => self.store.peek(key)?,
        })
    }

    /// The row `key` names in `container`, as that container shows it.
    pub fn get(
        &self,
        catalog: &Catalog,
        container: Container,
        key: &[u8],
    ) -> Result<Option<RowItem>, Error> {
        let def = &catalog.tables[container.table];
        match container.via {
            Via::Primary => {
                let Some(rk) = Self::row_key_from_text(def, key) else {
                    return Ok(None);
                };
                let Some(item) = self.get_row(&rk, Access::Fetch)? else {
                    return Ok(None);
                };
                let values = row::decode_ref(&item.value, &def.table)?;
                Ok(Some(row_item(render(def, container.via, &values), &item)))
            }
            Via::Index(i) => self.find_by_index(def, i, key),
        }
    }

    /// The row whose unique-indexed column holds `key`'s value, and its primary key's
    /// row key.
    fn find_by_index(
        &self,
        def: &TableDef,
        index: usize,
        key: &[u8],
    ) -> Result<Option<RowItem>, Error> {
        let table = &def.table;
        let column = table.indexes[index].column;
        if !table.indexes[index].kind.is_unique() {
            return Err(value_error!(
                "index {} is not unique: read it by range (@>=, @<)",
                table.indexes[index].name
            ));
        }
        let Ok(value) = table.columns[column].parse_text(key) else {
            return Ok(None);
        };
        let Ok(Some(entry_key)) = unique_key(def, index, &value) else {
            return Ok(None);
        };
        for _ in 0..ATTEMPTS {
            let Some(entry) = self.store.get(Key::new(UNIQUE_SPACE, &entry_key))? else {
                return Ok(None);
            };
            let rk = row_key_of_entry(def, &entry.value);
            if let Some(item) = self.get_row(&rk, Access::Fetch)? {
                let values = row::decode_ref(&item.value, table)?;
                if table.columns[column]
                    .rule()
                    .same(values[column], value.as_ref())
                {
                    // The reply waits for the entry's LSN too (one batch: the same).
                    let lsn = item.lsn.max(entry.lsn);
                    let value = render(def, Via::Index(index), &values);
                    return Ok(Some(RowItem {
                        lsn,
                        ..row_item(value, &item)
                    }));
                }
            }
            // A writer changed the row between the two lookups: look again.
            self.counters.retries.fetch_add(1, Ordering::Relaxed);
        }
        Err(Error::Value(format!(
            "the row of {} kept changing while it was read",
            String::from_utf8_lossy(key)
        )))
    }

    /// The row key of the row a unique-index container's `key` names now, with the
    /// value that names it; None when no row holds it.
    pub(super) fn locate(
        &self,
        def: &TableDef,
        index: usize,
        key: &[u8],
    ) -> Result<Option<(Vec<u8>, Value)>, Error> {
        let table = &def.table;
        let column = &table.columns[table.indexes[index].column];
        let value = column.parse_text(key)?;
        let Some(entry_key) = unique_key(def, index, &value)? else {
            return Ok(None);
        };
        let Some(entry) = self.store.peek(Key::new(UNIQUE_SPACE, &entry_key))? else {
            return Ok(None);
        };
        Ok(Some((row_key_of_entry(def, &entry.value), value)))
    }

    /// The rows whose key in `container` is in the range `spec` (`@>=A@<B`: see
    /// [`crate::ordered::parse_range`]), in that key's order (then the primary key's),
    /// at most [`RANGE_ROWS_MAX`]; each with its primary key as text and as its
    /// table's container shows it, and whether the range holds more rows than that.
    /// Through the store's ordered keys for the primary key, or an ordered index in
    /// memory; otherwise from the table's rows in the log, which reads the log.
    pub fn range(
        &self,
        catalog: &Catalog,
        container: Container,
        spec: &[u8],
    ) -> Result<RangeRows, Error> {
        let def = &catalog.tables[container.table];
        let range = parse_range(def, container.via, spec)?;
        let key_col = key_column(def, container.via);
        let rule = def.table.columns[key_col].rule();
        let mut check = range.check(rule);
        let mut rows: Vec<(Vec<Value>, Item)> = Vec::new();
        let cut;
        // One more than the limit tells whether the range goes on past it.
        match self.ordered_pks(def, container.via, &range, RANGE_ROWS_MAX + 1)? {
            Some(mut pks) => {
                cut = pks.len() > RANGE_ROWS_MAX;
                pks.truncate(RANGE_ROWS_MAX);
                for pk in pks {
                    let rk = row_key_of_entry(def, &pk);
                    let Some(item) = self.get_row(&rk, Access::Fetch)? else {
                        continue;
                    };
                    let values = row::decode(&item.value, &def.table)?;
                    // A writer may have changed the row since the index was read.
                    if check.holds(&values[key_col]) {
                        rows.push((values, item));
                    }
                }
            }
            None => {
                let prefix = def.number.to_be_bytes();
                let mut failed = None;
                self.store.scan_space(ROW_SPACE, |key, item| {
                    if !key.starts_with(&prefix) {
                        return;
                    }
                    match row::decode(&item.value, &def.table) {
                        Ok(values) if check.holds(&values[key_col]) => rows.push((values, item)),
                        Ok(_) => {}
                        Err(e) => {
                            failed.get_or_insert(e);
                        }
                    }
                })?;
                if let Some(e) = failed {
                    return Err(e);
                }
                let order = |values: &[Value]| {
                    let mut key = Vec::new();
                    keys::encode_as(&values[key_col], rule, keys::Position::Inner, &mut key);
                    let pk_rule = def.table.primary_column().rule();
                    keys::encode_as(
                        &values[def.table.primary],
                        pk_rule,
                        keys::Position::Last,
                        &mut key,
                    );
                    key
                };
                rows.sort_by_cached_key(|(values, _)| order(values));
                cut = rows.len() > RANGE_ROWS_MAX;
                rows.truncate(RANGE_ROWS_MAX);
            }
        }
        let rows = rows
            .into_iter()
            .map(|(values, item)| {
                let mut key = Vec::new();
                values[def.table.primary].write_text(&mut key);
                let shown: Vec<ValueRef<'_>> = values.iter().map(Value::as_ref).collect();
                let row = RowItem {
                    value: render(def, Via::Primary, &shown),
                    client_flags: item.client_flags,
                    exptime: item.exptime,
                    cas: item.cas,
                    lsn: item.lsn,
                };
                (key, row)
            })
            .collect();
        Ok(RangeRows { rows, cut })
    }
}
