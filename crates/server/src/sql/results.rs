//! A result's packets: the columns, then the rows, written to the client as they are
//! encoded (every [`FLUSH_BYTES`]). A long SELECT's rows come here while SQLite still
//! makes them ([`kura_sql::stream`]); each batch goes out only once the rows read so
//! far are durable, as every reply that shows rows.

use std::io;

use kura_mysql::{self as my, ColumnType, StatusFlags};
use kura_sql::{Cell, ColumnInfo, RowSink, SqlError};

use super::{column_def, value, wire_type, Wire};
use crate::server::Shared;

/// Encoded rows held for a connection before they are written.
const FLUSH_BYTES: usize = 64 << 10;

/// Writes a result to a connection.
pub(super) struct RowWriter<'w> {
    wire: &'w mut Wire,
    shared: &'w Shared,
    /// The binary protocol's rows (COM_STMT_EXECUTE), else text.
    binary: bool,
    status: StatusFlags,
    types: Vec<(ColumnType, bool)>,
    /// Whether the reply already ended (with an error packet).
    pub ended: bool,
    /// The write that failed: the connection is lost.
    pub failed: Option<io::Error>,
}

impl<'w> RowWriter<'w> {
    pub fn new(
        wire: &'w mut Wire,
        shared: &'w Shared,
        binary: bool,
        status: StatusFlags,
    ) -> RowWriter<'w> {
        RowWriter {
            wire,
            shared,
            binary,
            status,
            types: Vec::new(),
            ended: false,
            failed: None,
        }
    }

    /// The column count, the columns' definitions and their end.
    pub fn header(&mut self, columns: &[ColumnInfo]) -> io::Result<()> {
        self.wire.send(&my::column_count(columns.len()))?;
        for c in columns {
            self.wire.send(&column_def(c))?;
        }
        if let Some(eof) = my::end_of_columns(self.wire.caps, self.status, 0) {
            self.wire.send(&eof)?;
        }
        self.types = columns
            .iter()
            .map(|c| (wire_type(c.kind), c.kind.is_unsigned()))
            .collect();
        Ok(())
    }

    /// Rows, written as the buffer fills. A value the binary protocol cannot carry
    /// ends the reply with its error.
    pub fn body(&mut self, rows: &[Vec<Cell>]) -> io::Result<()> {
        // Each row is written straight into the output, through one list of values.
        let mut values: Vec<my::Value<'_>> = Vec::with_capacity(self.types.len());
        for row in rows {
            values.clear();
            values.extend(row.iter().map(value));
            if self.binary {
                let types = &self.types;
                let written = self
                    .wire
                    .send_with(|out| my::binary_row_to(out, types, &values));
                if let Err(e) = written {
                    self.ended = true;
                    return self.wire.send(&e.err_packet());
                }
            } else {
                let _ = self.wire.send_with(|out| {
                    my::text_row_to(out, &values);
                    Ok::<(), ()>(())
                });
            }
            if self.wire.out.len() >= FLUSH_BYTES {
                self.wire.flush()?;
            }
        }
        Ok(())
    }

    /// The end of the rows.
    pub fn end(&mut self) -> io::Result<()> {
        self.wire
            .send(&my::end_of_rows(self.wire.caps, self.status, 0))
    }

    fn lost(&mut self, e: io::Error) -> SqlError {
        let error = SqlError::internal(format!("writing the result: {e}"));
        self.failed = Some(e);
        error
    }
}

impl RowSink for RowWriter<'_> {
    fn streams(&self) -> bool {
        true
    }

    fn columns(&mut self, columns: &[ColumnInfo]) -> Result<(), SqlError> {
        self.header(columns).map_err(|e| self.lost(e))
    }

    fn rows(&mut self, rows: &[Vec<Cell>], read_lsn: u64) -> Result<(), SqlError> {
        if self.ended {
            return Err(SqlError::internal("the reply ended"));
        }
        if read_lsn > 0 {
            self.shared
                .store
                .wait_acked(read_lsn)
                .map_err(SqlError::internal)?;
        }
        self.body(rows).map_err(|e| self.lost(e))?;
        if self.ended {
            return Err(SqlError::internal("the reply ended"));
        }
        Ok(())
    }
}
