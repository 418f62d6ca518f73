//! Moving a table from one shard to another (issue 42), as etcd holds it: a table
//! lives whole on one shard (`tables/<name>`), and a move gives it to another with the
//! same steps as a ring change's moves: copy, hand-off, flip, purge.
//!
//! Keys, under `/kura/<cluster>/`:
//! - `table_moves/<name>`: `<from> <to> <state>` on its first line, `state` one of
//!   `copying`, `flipped`, `purged`; on its second, once the source's primary has
//!   described the table, the table as a catalog of its own, in hex (the definition
//!   the target takes it in by).
//! - `table_move_progress/<name>`: what the target last said of its copy
//!   ([`MoveProgress`]); for the operator only.
//!
//! Every step is one transaction that compares what it changes: a move begins only
//! while the table is placed on its source and no move of it is recorded; the source
//! describes it only as it was read; the flip puts `tables/<name>` to the target in
//! the same transaction that marks the move `flipped`, made only while the move is
//! `copying` as read, the table on the source, and the source primary's term key
//! exists; a move ends only once `purged`, and is abandoned only before it flipped.

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};

use crate::moves::MoveState;
use crate::{ClusterError, MoveProgress, Observer};

/// A table's move as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMove {
    /// The table's catalog name.
    pub table: String,
    pub from: String,
    pub to: String,
    pub state: MoveState,
    /// The table as the source described it (a catalog of it alone); None until the
    /// source's primary has.
    pub described: Option<Vec<u8>>,
    /// The revision the move was begun at: tells one move of a table from a later one.
    pub id: i64,
    /// The revision its record last changed at.
    revision: i64,
}

impl TableMove {
    fn encode(&self, state: MoveState) -> String {
        let mut text = format!("{} {} {}\n", self.from, self.to, state.word());
        if let Some(d) = &self.described {
            for b in d {
                text.push_str(&format!("{b:02x}"));
            }
        }
        text
    }

    fn decode(table: &str, text: &str, id: i64, revision: i64) -> Option<TableMove> {
        let (head, described) = text.split_once('\n').unwrap_or((text, ""));
        let mut words = head.split_whitespace();
        let (from, to, state) = (words.next()?, words.next()?, words.next()?);
        let described = if described.is_empty() {
            None
        } else {
            let bytes = described.as_bytes();
            if bytes.len() % 2 != 0 {
                return None;
            }
            let hex = |c: u8| (c as char).to_digit(16);
            let mut out = Vec::with_capacity(bytes.len() / 2);
            for pair in bytes.chunks(2) {
                out.push((hex(pair[0])? * 16 + hex(pair[1])?) as u8);
            }
            Some(out)
        };
        Some(TableMove {
            table: table.to_string(),
            from: from.to_string(),
            to: to.to_string(),
            state: MoveState::of(state)?,
            described,
            id,
            revision,
        })
    }
}

fn moves_prefix(cluster: &str) -> String {
    format!("/kura/{cluster}/table_moves/")
}

fn move_key(cluster: &str, table: &str) -> String {
    format!("/kura/{cluster}/table_moves/{table}")
}

fn progress_key(cluster: &str, table: &str) -> String {
    format!("/kura/{cluster}/table_move_progress/{table}")
}

impl Observer {
    /// Every table move recorded.
    pub async fn table_moves(&mut self) -> Result<Vec<TableMove>, ClusterError> {
        let prefix = moves_prefix(&self.cluster);
        let got = self
            .client
            .get(prefix.clone(), Some(GetOptions::new().with_prefix()))
            .await?;
        let mut out = Vec::new();
        for kv in got.kvs() {
            let key = kv.key_str().map_err(ClusterError::Etcd)?;
            let value = kv.value_str().map_err(ClusterError::Etcd)?;
            let table = key.strip_prefix(&prefix).unwrap_or(key);
            let m = TableMove::decode(table, value, kv.create_revision(), kv.mod_revision())
                .ok_or_else(|| ClusterError::Invalid(format!("a table move in etcd: {key}")))?;
            out.push(m);
        }
        Ok(out)
    }

    /// The move of `table`, if one is recorded.
    pub async fn table_move(&mut self, table: &str) -> Result<Option<TableMove>, ClusterError> {
        Ok(self
            .table_moves()
            .await?
            .into_iter()
            .find(|m| m.table == table))
    }

    /// Begins moving `table` from shard `from` to shard `to`. False if the table is
    /// not on `from` or a move of it is recorded already.
    pub async fn begin_table_move(
        &mut self,
        table: &str,
        from: &str,
        to: &str,
    ) -> Result<bool, ClusterError> {
        let key = move_key(&self.cluster, table);
        let placed = format!("/kura/{}/tables/{table}", self.cluster);
        let m = TableMove {
            table: table.to_string(),
            from: from.to_string(),
            to: to.to_string(),
            state: MoveState::Copying,
            described: None,
            id: 0,
            revision: 0,
        };
        let txn = Txn::new()
            .when([
                Compare::value(placed, CompareOp::Equal, from),
                Compare::version(key.clone(), CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(key, m.encode(MoveState::Copying), None)]);
        Ok(self.client.txn(txn).await?.succeeded())
    }

    /// Records the source's description of the table `m` moves, if the move is still
    /// as read.
    pub async fn describe_table_move(
        &mut self,
        m: &TableMove,
        described: Vec<u8>,
    ) -> Result<bool, ClusterError> {
        let key = move_key(&self.cluster, &m.table);
        let next = TableMove {
            described: Some(described),
            ..m.clone()
        };
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                m.revision,
            )])
            .and_then([TxnOp::put(key, next.encode(m.state), None)]);
        Ok(self.client.txn(txn).await?.succeeded())
    }

    /// Gives `table` to the move's target: one transaction, made only while the move
    /// (begun at `id`) is `copying` and described, the table on its source, and, if
    /// `fence` is given, that key (the source primary's term) exists. Returns the
    /// move's state after it, or None if the move is gone.
    pub async fn flip_table(
        &mut self,
        table: &str,
        id: i64,
        fence: Option<&[u8]>,
    ) -> Result<Option<MoveState>, ClusterError> {
        loop {
            let Some(m) = self.table_move(table).await?.filter(|m| m.id == id) else {
                return Ok(None);
            };
            if m.state != MoveState::Copying || m.described.is_none() {
                return Ok(Some(m.state));
            }
            let key = move_key(&self.cluster, table);
            let placed = format!("/kura/{}/tables/{table}", self.cluster);
            let mut when = vec![
                Compare::mod_revision(key.clone(), CompareOp::Equal, m.revision),
                Compare::value(placed.clone(), CompareOp::Equal, m.from.as_str()),
            ];
            if let Some(fence) = fence {
                when.push(Compare::version(fence.to_vec(), CompareOp::Greater, 0));
            }
            let txn = Txn::new().when(when).and_then([
                TxnOp::put(placed, m.to.as_str(), None),
                TxnOp::put(key, m.encode(MoveState::Flipped), None),
            ]);
            if self.client.txn(txn).await?.succeeded() {
                return Ok(Some(MoveState::Flipped));
            }
            let now = self.table_move(table).await?;
            if now.as_ref().map(|n| n.revision) == Some(m.revision) {
                // The move is as read: the table is elsewhere or the term is over.
                return Ok(Some(MoveState::Copying));
            }
        }
    }

    /// Moves the move of `table` begun at `id` from `from_state` to `to_state` (or,
    /// with None, deletes it with its progress); whether it was at `from_state`.
    async fn step_table_move(
        &mut self,
        table: &str,
        id: i64,
        from_state: MoveState,
        to_state: Option<MoveState>,
    ) -> Result<bool, ClusterError> {
        let Some(m) = self.table_move(table).await?.filter(|m| m.id == id) else {
            return Ok(false);
        };
        if m.state != from_state {
            return Ok(false);
        }
        let key = move_key(&self.cluster, table);
        let ops = match to_state {
            Some(s) => vec![TxnOp::put(key.clone(), m.encode(s), None)],
            None => vec![
                TxnOp::delete(key.clone(), None),
                TxnOp::delete(progress_key(&self.cluster, table), None),
            ],
        };
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, m.revision)])
            .and_then(ops);
        Ok(self.client.txn(txn).await?.succeeded())
    }

    /// Records that the source dropped its copy of a flipped table.
    pub async fn set_table_purged(&mut self, table: &str, id: i64) -> Result<bool, ClusterError> {
        self.step_table_move(table, id, MoveState::Flipped, Some(MoveState::Purged))
            .await
    }

    /// Ends a purged move of `table`.
    pub async fn end_table_move(&mut self, table: &str, id: i64) -> Result<bool, ClusterError> {
        self.step_table_move(table, id, MoveState::Purged, None)
            .await
    }

    /// Abandons a move of `table` that has not flipped: the table stays where it is.
    pub async fn abort_table_move(&mut self, table: &str, id: i64) -> Result<bool, ClusterError> {
        self.step_table_move(table, id, MoveState::Copying, None)
            .await
    }

    /// Records what a table move's target has copied.
    pub async fn set_table_move_progress(
        &mut self,
        table: &str,
        progress: MoveProgress,
    ) -> Result<(), ClusterError> {
        let key = progress_key(&self.cluster, table);
        self.put_progress(key, progress).await
    }

    /// What a table move's target last recorded of its copy.
    pub async fn table_move_progress(
        &mut self,
        table: &str,
    ) -> Result<Option<MoveProgress>, ClusterError> {
        let key = progress_key(&self.cluster, table);
        self.get_progress(key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_move_reads_back_as_written() {
        let mut m = TableMove {
            table: "d.players".into(),
            from: "a".into(),
            to: "b".into(),
            state: MoveState::Copying,
            described: None,
            id: 7,
            revision: 9,
        };
        let text = m.encode(MoveState::Copying);
        assert_eq!(TableMove::decode("d.players", &text, 7, 9), Some(m.clone()));
        m.described = Some(vec![0, 1, 0xab, 0xff]);
        let text = m.encode(MoveState::Flipped);
        let back = TableMove::decode("d.players", &text, 7, 9).expect("decoded");
        assert_eq!(back.described, m.described);
        assert_eq!(back.state, MoveState::Flipped);
        assert_eq!(TableMove::decode("t", "a b moved\n", 1, 1), None);
        assert_eq!(TableMove::decode("t", "a b copying\nabc", 1, 1), None);
    }
}
