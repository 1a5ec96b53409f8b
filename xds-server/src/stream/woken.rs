//! One source of a stream's wakes, polled only when it woke the stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;

/// A source the stream's loop polls (the request stream) only when it woke the task since it
/// last answered `Pending`, rather than at every turn of the loop.
///
/// The loop takes what woke the stream in order at every turn: a request, the cache signal, a
/// timer. Each source polled that has nothing is a look for nothing, and the request stream's
/// is not free: HTTP/2's stream state under the connection's lock, which the connection's
/// task takes too, under three layers of body. A synced client's update turned the loop four
/// times (the cache's wake, the response's, the ACK's, the ACK's taking) and looked at the
/// request stream at each: three of the four found nothing. The source is polled with a waker
/// of its own, which marks it woken before it wakes the task. The source is owned here, so that
/// nothing polls it another way (a poll with the task's own waker would leave it unmarked).
pub(super) struct Filtered<S> {
    source: S,
    woken: Arc<Woken>,
    /// `woken` as a waker, made once.
    waker: Waker,
}

/// Whether the source woke the stream, and the stream's task.
struct Woken {
    flag: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.flag.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<S> Filtered<S> {
    /// `source`, polled at the first turn.
    pub(super) fn new(source: S) -> Self {
        let woken = Arc::new(Woken { flag: AtomicBool::new(true), task: AtomicWaker::new() });
        let waker = Waker::from(woken.clone());
        Filtered { source, woken, waker }
    }

    /// `poll` of the source with its own waker, if the source woke the task since it last
    /// answered `Pending`; else `Pending` at once. A source that answered `Ready` is polled
    /// through at the next turn, as it may have more at hand without a wake.
    ///
    /// Sound because a source that answers `Pending` has arranged a wake of the waker it was
    /// given (the contract of `Pending`): that wake marks it.
    pub(super) fn poll<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(&mut S, &mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        // Registered before the mark is read: a wake between the two wakes this task.
        self.woken.task.register(cx.waker());
        if !self.woken.flag.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let polled = poll(&mut self.source, &mut Context::from_waker(&self.waker));
        if polled.is_ready() {
            self.woken.flag.store(true, Ordering::Release);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    /// A source with a queue: `Pending` when empty, keeping the waker it was given.
    #[derive(Default)]
    struct Source {
        queue: Mutex<Vec<u32>>,
        waker: Mutex<Option<Waker>>,
        polls: AtomicUsize,
    }

    impl Source {
        fn poll(&self, cx: &mut Context<'_>) -> Poll<u32> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            match self.queue.lock().unwrap().pop() {
                Some(item) => Poll::Ready(item),
                None => {
                    *self.waker.lock().unwrap() = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        }

        fn push(&self, item: u32) {
            self.queue.lock().unwrap().push(item);
            if let Some(waker) = self.waker.lock().unwrap().take() {
                waker.wake();
            }
        }
    }

    /// Counts the task's wakes.
    #[derive(Default)]
    struct Task(AtomicUsize);

    impl Wake for Task {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A source that answered `Pending` is not polled again until it wakes the task; then it
    /// is, and after a `Ready` it is polled through once more (it may have more); every item is
    /// taken, and every wake of the source reaches the task.
    #[test]
    fn a_source_is_polled_when_it_woke_the_task_or_had_something() {
        let source = Arc::new(Source::default());
        let task = Arc::new(Task::default());
        let task_waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&task_waker);
        let mut filtered = Filtered::new(source.clone());
        let mut poll = || filtered.poll(&mut cx, |source, cx| source.poll(cx));
        let polls = || source.polls.load(Ordering::Relaxed);

        assert_eq!(poll(), Poll::Pending, "the first turn looks");
        assert_eq!(polls(), 1);
        for _ in 0..3 {
            assert_eq!(poll(), Poll::Pending);
        }
        assert_eq!(polls(), 1, "not woken: not looked at");

        source.push(7);
        assert_eq!(task.0.load(Ordering::Relaxed), 1, "the source's wake reaches the task");
        source.queue.lock().unwrap().push(8);
        assert_eq!(poll(), Poll::Ready(8));
        assert_eq!(poll(), Poll::Ready(7), "after a Ready, looked at again without a wake");
        assert_eq!(poll(), Poll::Pending);
        assert_eq!(polls(), 4);
        assert_eq!(poll(), Poll::Pending);
        assert_eq!(polls(), 4);
        source.push(9);
        assert_eq!(poll(), Poll::Ready(9));
        assert_eq!(task.0.load(Ordering::Relaxed), 2);
    }
}
