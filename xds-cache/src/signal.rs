//! The "something changed" signal a cache raises and a stream waits on.

use tokio::sync::Notify;

/// Raised by a cache when something a stream watches changed; awaited by the stream.
///
/// A raise is never lost: one that comes while nobody waits is kept until the next wait, and any
/// number of raises before a wait count as one. The stream then reads the newest state (the cache
/// queues nothing per stream). Runtime-agnostic: it works on any executor.
#[derive(Debug, Default)]
pub struct Signal {
    notify: Notify,
}

impl Signal {
    /// A signal nobody has raised.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes the waiter, or lets its next wait return at once.
    pub fn raise(&self) {
        self.notify.notify_one();
    }

    /// Waits until the signal is raised (returns at once if it was raised since the last wait).
    pub async fn raised(&self) {
        self.notify.notified().await;
    }
}
