//! The log's synced LSN as a watch, for the tasks that wait for it to move.

use std::time::Duration;

/// The log's synced LSN (what is on this node's disk whatever the durability mode),
/// for the tasks that wait for it to move: a primary's streams to its replicas, which
/// send nothing else, and a replica's acknowledgements. Few wait, so each move wakes
/// them all. Fed by the store's `Options::on_synced`.
pub struct Synced(tokio::sync::watch::Sender<u64>);

impl Default for Synced {
    fn default() -> Synced {
        Synced::new()
    }
}

impl Synced {
    pub fn new() -> Synced {
        Synced(tokio::sync::watch::channel(0).0)
    }

    /// Records `lsn` if it is further (the log's threads may report out of order).
    pub fn publish(&self, lsn: u64) {
        self.0.send_if_modified(|was| {
            let further = lsn > *was;
            if further {
                *was = lsn;
            }
            further
        });
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.subscribe()
    }
}

/// Waits until `synced` (a [`Synced::subscribe`]) is past `lsn`, or `most` passes.
pub async fn synced_past(synced: &mut tokio::sync::watch::Receiver<u64>, lsn: u64, most: Duration) {
    let _ = tokio::time::timeout(most, synced.wait_for(|&now| now > lsn)).await;
}

#[cfg(test)]
mod tests {
    use super::{synced_past, Synced};
    use std::time::Duration;

    #[tokio::test]
    async fn the_synced_lsn_only_moves_forward_and_wakes_its_waiters() {
        let synced = Synced::new();
        let mut rx = synced.subscribe();
        synced.publish(10);
        synced.publish(7);
        assert_eq!(*rx.borrow(), 10);
        // Already past: at once. Not yet: woken by the move, well before the limit.
        synced_past(&mut rx, 9, Duration::from_secs(60)).await;
        let waiting = tokio::spawn(async move {
            synced_past(&mut rx, 10, Duration::from_secs(60)).await;
            *rx.borrow()
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        synced.publish(11);
        assert_eq!(waiting.await.ok(), Some(11));
    }
}
