//! A change of the ring in progress, as etcd holds it (issue 42): the next ring and
//! one move for each pair of shards (from, to) between which keys change owner.
//!
//! Keys, under `/kura/<cluster>/`:
//! - `next_ring`: the ring being moved to ([`RingSpec`]'s text, its version one more
//!   than `ring`'s).
//! - `moves/<from>/<to>`: the move's state, `copying`, `flipped` or `purged`.
//! - `move_progress/<from>/<to>`: what the target last said of its copy
//!   ([`MoveProgress`]); for the operator only.
//!
//! A key is owned by its owner in `ring` unless `next_ring` gives it to another shard
//! and the move between the two has flipped. Every step is one etcd transaction that
//! compares what it changes: the change begins only from the ring that was read and
//! with no change in progress; a move flips only while `copying`, and only under the
//! source primary's term (its key still exists); the change ends (`next_ring` becomes
//! `ring`) only when every move is `purged`, and is abandoned only while none has
//! flipped.

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp};

use crate::ring::{ring_key, RingSpec};
use crate::{ClusterError, Observer};

/// Where one move is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MoveState {
    /// The target copies the moving keys; the source owns them.
    Copying,
    /// The target owns them; the source still holds its copies.
    Flipped,
    /// The source deleted its copies.
    Purged,
}

impl MoveState {
    pub(crate) fn word(self) -> &'static str {
        match self {
            MoveState::Copying => "copying",
            MoveState::Flipped => "flipped",
            MoveState::Purged => "purged",
        }
    }

    pub(crate) fn of(word: &str) -> Option<MoveState> {
        match word.trim() {
            "copying" => Some(MoveState::Copying),
            "flipped" => Some(MoveState::Flipped),
            "purged" => Some(MoveState::Purged),
            _ => None,
        }
    }
}

/// The keys one shard gives another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub from: String,
    pub to: String,
    pub state: MoveState,
}

/// What a move's target last said of its copy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoveProgress {
    /// How far into the source's log the target has applied.
    pub applied_lsn: u64,
    /// Where the source's log ended when it last said.
    pub source_lsn: u64,
    /// The moving keys' changes the target has applied.
    pub applied: u64,
}

/// A change of the ring in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingChange {
    pub current: RingSpec,
    pub next: RingSpec,
    pub moves: Vec<Move>,
}

fn next_key(cluster: &str) -> String {
    format!("/kura/{cluster}/next_ring")
}

fn moves_prefix(cluster: &str) -> String {
    format!("/kura/{cluster}/moves/")
}

fn move_key(cluster: &str, from: &str, to: &str) -> String {
    format!("/kura/{cluster}/moves/{from}/{to}")
}

fn progress_prefix(cluster: &str) -> String {
    format!("/kura/{cluster}/move_progress/")
}

fn progress_key(cluster: &str, from: &str, to: &str) -> String {
    format!("/kura/{cluster}/move_progress/{from}/{to}")
}

impl Observer {
    async fn value(&mut self, key: String) -> Result<Option<String>, ClusterError> {
        let got = self.client.get(key, None).await?;
        match got.kvs().first() {
            Some(kv) => Ok(Some(
                kv.value_str().map_err(ClusterError::Etcd)?.to_string(),
            )),
            None => Ok(None),
        }
    }

    /// The change of the ring in progress, if any.
    pub async fn ring_change(&mut self) -> Result<Option<RingChange>, ClusterError> {
        Ok(self.ring_state().await?.1)
    }

    /// The ring and the change of it in progress, read at one revision of etcd's,
    /// so that a change that ends between two reads is seen either whole or ended
    /// (its next ring the ring), never as a ring with no change.
    pub async fn ring_state(
        &mut self,
    ) -> Result<(Option<RingSpec>, Option<RingChange>), ClusterError> {
        let got = self.client.get(ring_key(&self.cluster), None).await?;
        let revision = got.header().map_or(0, |h| h.revision());
        let Some(current) = got.kvs().first() else {
            return Ok((None, None));
        };
        let current = RingSpec::decode(current.value_str().map_err(ClusterError::Etcd)?)?;
        let at = || GetOptions::new().with_revision(revision);
        let got = self.client.get(next_key(&self.cluster), Some(at())).await?;
        let Some(next) = got.kvs().first() else {
            return Ok((Some(current), None));
        };
        let next = RingSpec::decode(next.value_str().map_err(ClusterError::Etcd)?)?;
        let prefix = moves_prefix(&self.cluster);
        let got = self
            .client
            .get(prefix.clone(), Some(at().with_prefix()))
            .await?;
        let mut moves = Vec::new();
        for kv in got.kvs() {
            let key = kv.key_str().map_err(ClusterError::Etcd)?;
            let value = kv.value_str().map_err(ClusterError::Etcd)?;
            let bad = || ClusterError::Invalid(format!("a move in etcd: {key} = {value:?}"));
            let (from, to) = key
                .strip_prefix(&prefix)
                .and_then(|rest| rest.split_once('/'))
                .ok_or_else(bad)?;
            moves.push(Move {
                from: from.to_string(),
                to: to.to_string(),
                state: MoveState::of(value).ok_or_else(bad)?,
            });
        }
        let change = RingChange {
            current: current.clone(),
            next,
            moves,
        };
        Ok((Some(current), Some(change)))
    }

    /// Begins changing the ring from `current` (as read) to `next`, with a move for
    /// each of `pairs` (from, to). False if the ring is no longer `current` or a
    /// change is already in progress.
    pub async fn begin_ring_change(
        &mut self,
        current: &RingSpec,
        next: &RingSpec,
        pairs: &[(String, String)],
    ) -> Result<bool, ClusterError> {
        let (ring, next_at) = (ring_key(&self.cluster), next_key(&self.cluster));
        let mut puts = vec![TxnOp::put(next_at.clone(), next.encode(), None)];
        for (from, to) in pairs {
            puts.push(TxnOp::put(
                move_key(&self.cluster, from, to),
                MoveState::Copying.word(),
                None,
            ));
        }
        let txn = Txn::new()
            .when([
                Compare::value(ring, CompareOp::Equal, current.encode()),
                Compare::version(next_at, CompareOp::Equal, 0),
            ])
            .and_then(puts);
        Ok(self.client.txn(txn).await?.succeeded())
    }

    /// Makes the move's target the owner of its keys: one transaction, made only
    /// while the move is `copying` and, if `fence` is given, while that key (the
    /// source primary's term) exists. Returns the move's state after it (`Flipped`
    /// if this or an earlier flip made it so), or None if the move is gone.
    pub async fn flip(
        &mut self,
        from: &str,
        to: &str,
        fence: Option<&[u8]>,
    ) -> Result<Option<MoveState>, ClusterError> {
        let key = move_key(&self.cluster, from, to);
        let mut when = vec![Compare::value(
            key.clone(),
            CompareOp::Equal,
            MoveState::Copying.word(),
        )];
        if let Some(fence) = fence {
            when.push(Compare::version(fence.to_vec(), CompareOp::Greater, 0));
        }
        let txn = Txn::new().when(when).and_then([TxnOp::put(
            key.clone(),
            MoveState::Flipped.word(),
            None,
        )]);
        if self.client.txn(txn).await?.succeeded() {
            return Ok(Some(MoveState::Flipped));
        }
        Ok(self.value(key).await?.as_deref().and_then(MoveState::of))
    }

    /// Records that the source deleted its copies of a flipped move's keys.
    pub async fn set_purged(&mut self, from: &str, to: &str) -> Result<bool, ClusterError> {
        let key = move_key(&self.cluster, from, to);
        let txn = Txn::new()
            .when([Compare::value(
                key.clone(),
                CompareOp::Equal,
                MoveState::Flipped.word(),
            )])
            .and_then([TxnOp::put(key, MoveState::Purged.word(), None)]);
        Ok(self.client.txn(txn).await?.succeeded())
    }

    /// Ends `change` once all its moves are purged: its next ring becomes the ring.
    /// False if anything differs from `change`.
    pub async fn finish_ring_change(&mut self, change: &RingChange) -> Result<bool, ClusterError> {
        self.end_ring_change(change, MoveState::Purged, &change.next)
            .await
    }

    /// Abandons `change` while none of its moves has flipped: the ring stays as it
    /// is. False if anything differs from `change` (a move flipped meanwhile).
    pub async fn abort_ring_change(&mut self, change: &RingChange) -> Result<bool, ClusterError> {
        self.end_ring_change(change, MoveState::Copying, &change.current)
            .await
    }

    async fn end_ring_change(
        &mut self,
        change: &RingChange,
        every: MoveState,
        ring: &RingSpec,
    ) -> Result<bool, ClusterError> {
        let cluster = self.cluster.clone();
        let mut when = vec![
            Compare::value(
                ring_key(&cluster),
                CompareOp::Equal,
                change.current.encode(),
            ),
            Compare::value(next_key(&cluster), CompareOp::Equal, change.next.encode()),
        ];
        for m in &change.moves {
            when.push(Compare::value(
                move_key(&cluster, &m.from, &m.to),
                CompareOp::Equal,
                every.word(),
            ));
        }
        let prefixed = || Some(etcd_client::DeleteOptions::new().with_prefix());
        let txn = Txn::new().when(when).and_then([
            TxnOp::put(ring_key(&cluster), ring.encode(), None),
            TxnOp::delete(next_key(&cluster), None),
            TxnOp::delete(moves_prefix(&cluster), prefixed()),
            TxnOp::delete(progress_prefix(&cluster), prefixed()),
        ]);
        Ok(self.client.txn(txn).await?.succeeded())
    }

    /// Records what a move's target has copied.
    pub async fn set_move_progress(
        &mut self,
        from: &str,
        to: &str,
        progress: MoveProgress,
    ) -> Result<(), ClusterError> {
        let key = progress_key(&self.cluster, from, to);
        self.put_progress(key, progress).await
    }

    pub(crate) async fn put_progress(
        &mut self,
        key: String,
        progress: MoveProgress,
    ) -> Result<(), ClusterError> {
        let text = format!(
            "{} {} {}",
            progress.applied_lsn, progress.source_lsn, progress.applied
        );
        self.client.put(key, text, None).await?;
        Ok(())
    }

    /// What a move's target last recorded of its copy.
    pub async fn move_progress(
        &mut self,
        from: &str,
        to: &str,
    ) -> Result<Option<MoveProgress>, ClusterError> {
        let key = progress_key(&self.cluster, from, to);
        self.get_progress(key).await
    }

    pub(crate) async fn get_progress(
        &mut self,
        key: String,
    ) -> Result<Option<MoveProgress>, ClusterError> {
        let text = self.value(key).await?;
        Ok(text.and_then(|t| {
            let mut n = t.split_whitespace().map(|w| w.parse::<u64>().ok());
            Some(MoveProgress {
                applied_lsn: n.next()??,
                source_lsn: n.next()??,
                applied: n.next()??,
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_read_back_as_written_and_in_order() {
        for s in [MoveState::Copying, MoveState::Flipped, MoveState::Purged] {
            assert_eq!(MoveState::of(s.word()), Some(s));
        }
        assert!(MoveState::Copying < MoveState::Flipped);
        assert!(MoveState::Flipped < MoveState::Purged);
        assert_eq!(MoveState::of("moved"), None);
    }
}
