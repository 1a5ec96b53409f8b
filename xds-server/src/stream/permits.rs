//! The join gate's permits: the [`Queue`]'s order behind a mutex, and the waking of the stream a
//! permit goes to. Every decision is the queue's (`gate.rs`); this only waits and wakes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::gate::{Lane, Queue, Ticket};
use crate::status::lock;

/// The server-wide join gate (`ServerConfig::join_permits`).
pub(crate) struct Permits {
    inner: Mutex<Inner>,
}

struct Inner {
    queue: Queue,
    next: Ticket,
    /// Who to wake when its ticket is handed a permit.
    waiters: HashMap<Ticket, oneshot::Sender<()>>,
}

/// A permit of the gate; dropping it gives it back.
pub(crate) struct Permit(Arc<Permits>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl Permits {
    pub(crate) fn new(permits: usize) -> Permits {
        Permits {
            inner: Mutex::new(Inner {
                queue: Queue::new(permits),
                next: 0,
                waiters: HashMap::new(),
            }),
        }
    }

    /// Waits for a permit in `lane`. Cancel-safe: a stream that stops waiting (dropped: it
    /// ended, gave up, or the server shuts down) leaves the queue, and gives back a permit it
    /// was handed meanwhile.
    pub(crate) async fn acquire(self: &Arc<Self>, lane: Lane) -> Permit {
        let (ticket, rx) = {
            let mut inner = lock(&self.inner);
            let ticket = inner.next;
            inner.next += 1;
            if inner.queue.request(ticket, lane) {
                return Permit(self.clone());
            }
            let (tx, rx) = oneshot::channel();
            inner.waiters.insert(ticket, tx);
            (ticket, rx)
        };
        let mut waiting = Waiting { permits: self.clone(), ticket, rx: Some(rx) };
        // The sender goes away only once it sent (`release`), while this waits: the result is
        // always `Ok`.
        if let Some(rx) = waiting.rx.as_mut() {
            let _ = rx.await;
        }
        waiting.rx = None;
        Permit(self.clone())
    }

    /// A permit is given back: the next waiter is woken with it, or it is free. A waiter that
    /// went away meanwhile passes it on.
    fn release(&self) {
        loop {
            let tx = {
                let mut inner = lock(&self.inner);
                let Some(ticket) = inner.queue.release() else { return };
                inner.waiters.remove(&ticket)
            };
            if tx.is_some_and(|tx| tx.send(()).is_ok()) {
                return;
            }
        }
    }
}

/// A stream waiting for a permit; dropping it before the permit came cancels the wait.
struct Waiting {
    permits: Arc<Permits>,
    ticket: Ticket,
    /// `None` once the permit was received.
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        let mut inner = lock(&self.permits.inner);
        if inner.queue.cancel(self.ticket) {
            inner.waiters.remove(&self.ticket);
            return;
        }
        drop(inner);
        // Handed the permit already: if it was sent before the channel closes, give it back;
        // if not, the sender finds the channel closed and passes it on itself.
        rx.close();
        if rx.try_recv().is_ok() {
            self.permits.release();
        }
    }
}
