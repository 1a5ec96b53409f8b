//! The "something changed" signal a cache raises and a stream waits on.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Raised by a cache when something a stream watches changed; awaited by the stream.
///
/// A raise is never lost: one that comes while nobody waits is kept until the next wait, and any
/// number of raises before a wait count as one. The stream then reads the newest state (the cache
/// queues nothing per stream). Runtime-agnostic: it works on any executor.
#[derive(Debug, Default)]
pub struct Signal {
    /// Whether a raise came since the last wait or take: what they read. A take is then one
    /// atomic swap, not a waiter put on `notify`'s list and taken off it.
    raised: AtomicBool,
    /// Wakes a waiter. It may keep a permit for a raise a take already consumed: the wait that
    /// meets it finds no raise and waits again.
    notify: Notify,
}

impl Signal {
    /// A signal nobody has raised.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes the waiter, or lets its next wait return at once.
    pub fn raise(&self) {
        self.raised.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    /// Waits until the signal is raised (returns at once if it was raised since the last wait).
    pub async fn raised(&self) {
        while !self.take() {
            self.notify.notified().await;
        }
    }

    /// Takes a raise that came since the last wait, without waiting: true if there was one (it
    /// is consumed, as a wait would have consumed it). A stream woken by its client asks this
    /// before it reads only the requested types: a change pending in the cache must be read with
    /// every type, in order, or a route could reach the client before the cluster it names.
    pub fn take(&self) -> bool {
        self.raised.swap(false, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A raise is taken once; a raise after a take is there for the next take or wait.
    #[test]
    fn a_raise_is_taken_once_and_a_later_one_is_kept() {
        let signal = Signal::new();
        assert!(!signal.take(), "nothing raised");
        signal.raise();
        signal.raise();
        assert!(signal.take(), "raised (twice counts as once)");
        assert!(!signal.take(), "taken");
        signal.raise();
        assert!(signal.take());
    }
}
