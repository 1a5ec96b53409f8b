//! The "something changed" signal a cache raises and a stream waits on.

use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use atomic_waker::AtomicWaker;

/// Raised by a cache when something a stream watches changed; awaited by the stream.
///
/// A raise is never lost: one that comes while nobody waits is kept until the next wait, and any
/// number of raises before a wait count as one. The stream then reads the newest state (the cache
/// queues nothing per stream). Runtime-agnostic: it works on any executor.
///
/// One task waits on a signal (its stream): a second task waiting at the same time takes the
/// wake-up from the first.
#[derive(Debug, Default)]
pub struct Signal {
    /// Whether a raise came since the last wait or take: what they read. A take is one atomic
    /// swap.
    raised: AtomicBool,
    /// The waiting task. A wait registers and a raise wakes: a few atomic operations, where a
    /// `tokio::sync::Notify` put each wait on a locked list of waiters and took it off again
    /// (1.4 % of a delta update's instructions, measured).
    waker: AtomicWaker,
}

// As with `Notify` before: a panic cannot leave a signal half-changed (its state is a flag and
// a registered waker, each changed in one atomic step), so a `Signal` shared with code that
// catches panics stays usable. `AtomicWaker` does not say so itself.
impl std::panic::UnwindSafe for Signal {}
impl std::panic::RefUnwindSafe for Signal {}

impl Signal {
    /// A signal nobody has raised.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes the waiter, or lets its next wait return at once.
    pub fn raise(&self) {
        self.raised.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Waits until the signal is raised (returns at once if it was raised since the last wait).
    pub async fn raised(&self) {
        poll_fn(|cx| self.poll_raised(cx)).await
    }

    /// [`raised`](Self::raised) as a poll: ready if a raise came since the last wait or take
    /// (it is consumed); otherwise the task of `cx` is woken by the next raise.
    pub fn poll_raised(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.take() {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        // A raise between the take and the registration woke no one: look again.
        if self.take() { Poll::Ready(()) } else { Poll::Pending }
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
    use std::future::Future;

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

    /// Counts the wakes of a task.
    #[derive(Default)]
    struct Wakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A poll that finds nothing registers its task, and the next raise wakes it once; a raise
    /// is there for the poll after it, also when the future that polled first was dropped
    /// (as `select!` drops the branches it did not take); a taken raise is gone.
    #[test]
    fn a_raise_wakes_the_task_that_polled_and_is_kept_for_the_next_poll() {
        let wakes = std::sync::Arc::new(Wakes::default());
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let woken = || wakes.0.load(Ordering::SeqCst);
        let signal = Signal::new();
        assert!(signal.poll_raised(&mut cx).is_pending());
        assert_eq!(woken(), 0);
        signal.raise();
        assert_eq!(woken(), 1, "the registered task is woken");
        assert!(signal.poll_raised(&mut cx).is_ready());
        assert!(signal.poll_raised(&mut cx).is_pending(), "a raise is taken once");

        let mut wait = Box::pin(signal.raised());
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        drop(wait);
        signal.raise();
        assert_eq!(woken(), 2, "a dropped wait's task is still woken: at worst once too often");
        assert!(Box::pin(signal.raised()).as_mut().poll(&mut cx).is_ready(), "the raise was kept");

        signal.raise();
        assert!(signal.take());
        assert!(signal.poll_raised(&mut cx).is_pending(), "a taken raise is gone");
        signal.raise();
        signal.raise();
        assert_eq!(woken(), 3, "a raise wakes a registration once");
    }

    /// A wait returns for a raise that came before it, and for one that comes while it waits,
    /// on another thread; a wait with nothing raised waits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_returns_for_a_raise_before_it_or_during_it() {
        use std::sync::Arc;
        use std::time::Duration;

        let signal = Arc::new(Signal::new());
        signal.raise();
        signal.raised().await;
        let nothing = tokio::time::timeout(Duration::from_millis(50), signal.raised()).await;
        assert!(nothing.is_err(), "nothing raised since the last wait");
        for _ in 0..1_000 {
            let raiser = signal.clone();
            let raise = tokio::spawn(async move { raiser.raise() });
            let waited = tokio::time::timeout(Duration::from_secs(10), signal.raised()).await;
            assert!(waited.is_ok(), "a raise while waiting wakes the waiter");
            raise.await.unwrap();
            let _ = signal.take();
        }
    }
}
