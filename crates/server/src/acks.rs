//! Connections waiting for the log to acknowledge their changes (synced in fsync
//! mode, written in interval mode), each woken once: when the acknowledged LSN reaches
//! the one it needs, or the log fails.
//!
//! A broadcast of every acknowledgement (a watch channel) wakes every waiting
//! connection each time, and under load about half of them go back to sleep: the ones
//! whose records were appended while the sync ran. Here a waiter names its LSN and
//! stays asleep until that LSN is covered.
//!
//! Invariant: a waiter registers, and an acknowledgement is recorded and its waiters
//! taken, under one lock; so a waiter that found its LSN not yet covered is always in
//! the list the next acknowledgement looks through.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use kura_engine::Ack;
use parking_lot::Mutex;

pub struct Acks {
    state: Mutex<State>,
    /// The synced LSN, which can be ahead of or behind the acknowledged one.
    pub synced: kura_replication::Synced,
}

struct State {
    /// The furthest acknowledgement; `Failed` stays.
    acked: Ack,
    waiters: Vec<Waiter>,
    next_id: u64,
}

struct Waiter {
    need: u64,
    id: u64,
    waker: Waker,
}

fn covers(acked: Ack, need: u64) -> bool {
    match acked {
        Ack::UpTo(lsn) => lsn >= need,
        Ack::Failed => true,
    }
}

impl Acks {
    pub fn new() -> Acks {
        Acks {
            state: Mutex::new(State {
                acked: Ack::UpTo(0),
                waiters: Vec::new(),
                next_id: 0,
            }),
            synced: kura_replication::Synced::new(),
        }
    }

    /// Records `ack` (never moving back: the log's threads may publish out of order)
    /// and wakes the waiters it covers.
    pub fn publish(&self, ack: Ack) {
        let mut woken = Vec::new();
        {
            let mut state = self.state.lock();
            state.acked = match (state.acked, ack) {
                (Ack::Failed, _) | (_, Ack::Failed) => Ack::Failed,
                (Ack::UpTo(was), Ack::UpTo(now)) => Ack::UpTo(was.max(now)),
            };
            let acked = state.acked;
            let mut i = 0;
            while i < state.waiters.len() {
                if covers(acked, state.waiters[i].need) {
                    woken.push(state.waiters.swap_remove(i).waker);
                } else {
                    i += 1;
                }
            }
        }
        for waker in woken {
            waker.wake();
        }
    }

    /// Resolves to the acknowledgement once it covers `need` (or says the log failed).
    pub fn wait(&self, need: u64) -> AckWait<'_> {
        AckWait {
            acks: self,
            need,
            id: None,
        }
    }
}

pub struct AckWait<'a> {
    acks: &'a Acks,
    need: u64,
    /// Its place in the waiters, once it has one.
    id: Option<u64>,
}

impl Future for AckWait<'_> {
    type Output = Ack;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ack> {
        let this = &mut *self;
        let mut state = this.acks.state.lock();
        if covers(state.acked, this.need) {
            // A listed waiter was taken out by the acknowledgement that covered it,
            // under this lock, so there is nothing to remove.
            debug_assert!(this
                .id
                .is_none_or(|id| !state.waiters.iter().any(|w| w.id == id)));
            this.id = None;
            return Poll::Ready(state.acked);
        }
        // Still listed (an acknowledgement takes only the waiters it covers, and
        // acknowledgements only rise): the waker may have changed.
        if let Some(w) = this
            .id
            .and_then(|id| state.waiters.iter_mut().find(|w| w.id == id))
        {
            w.waker.clone_from(cx.waker());
            return Poll::Pending;
        }
        let id = state.next_id;
        state.next_id += 1;
        state.waiters.push(Waiter {
            need: this.need,
            id,
            waker: cx.waker().clone(),
        });
        this.id = Some(id);
        Poll::Pending
    }
}

impl Drop for AckWait<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.acks.state.lock().waiters.retain(|w| w.id != id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_waiter_wakes_once_its_lsn_is_acknowledged_and_not_before() {
        let acks = Arc::new(Acks::new());
        let waiting = tokio::spawn({
            let acks = Arc::clone(&acks);
            async move { acks.wait(100).await }
        });
        tokio::task::yield_now().await;
        acks.publish(Ack::UpTo(50));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        assert_eq!(acks.state.lock().waiters.len(), 1);
        acks.publish(Ack::UpTo(100));
        assert!(matches!(waiting.await.unwrap(), Ack::UpTo(100)));
        assert!(acks.state.lock().waiters.is_empty());
    }

    #[tokio::test]
    async fn acknowledgements_never_move_back_and_a_failure_stays() {
        let acks = Acks::new();
        acks.publish(Ack::UpTo(80));
        acks.publish(Ack::UpTo(60));
        assert!(matches!(acks.wait(70).await, Ack::UpTo(80)));
        acks.publish(Ack::Failed);
        acks.publish(Ack::UpTo(200));
        assert!(matches!(acks.wait(500).await, Ack::Failed));
    }

    #[tokio::test]
    async fn a_dropped_wait_leaves_no_waiter() {
        let acks = Acks::new();
        let mut wait = Box::pin(acks.wait(10));
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert_eq!(acks.state.lock().waiters.len(), 1);
        drop(wait);
        assert!(acks.state.lock().waiters.is_empty());
    }
}
