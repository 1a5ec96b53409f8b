//! Who to signal when something changes: the registry every cache keeps, public so that a cache
//! of your own keeps it the same way.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::signal::Signal;

type Registry<K> = Mutex<HashMap<K, HashMap<u64, Watcher>>>;

/// A registered signal, and the mark of a change its watch has not read yet.
#[derive(Debug)]
struct Watcher {
    signal: Arc<Signal>,
    changed: Arc<AtomicBool>,
}

impl Watcher {
    /// Marks the change, then wakes the stream: a stream woken reads the mark set.
    fn notify(&self) {
        self.changed.store(true, Ordering::Release);
        self.signal.raise();
    }
}

/// The signals registered per key (a node group and a type, or just a type): who to wake when
/// something under that key changes.
///
/// A cache registers the stream's [`Signal`] in [`Cache::watch`](crate::Cache::watch) and keeps
/// the returned [`Registration`] inside the [`Watch`](crate::Watch) it hands out. When the stream
/// ends, the server drops the watch, the registration is dropped with it, and the signal leaves the
/// registry: nothing leaks however many streams come and go. On a change, the cache updates its
/// state first and then calls [`notify`](Watchers::notify); raising a signal never blocks and
/// never runs stream code, so it is safe under the cache's own locks.
///
/// ```
/// use std::sync::Arc;
/// use xds_cache::{Signal, Watchers};
///
/// let watchers: Watchers<&str> = Watchers::default();
/// let signal = Arc::new(Signal::new());
/// let registration = watchers.register("endpoints", signal.clone());
/// assert_eq!(watchers.count(&"endpoints"), 1);
/// watchers.notify(&"endpoints");
/// drop(registration); // the stream ended
/// assert_eq!(watchers.count(&"endpoints"), 0);
/// ```
#[derive(Debug)]
pub struct Watchers<K> {
    registry: Arc<Registry<K>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl<K> Default for Watchers<K> {
    fn default() -> Self {
        Watchers { registry: Arc::default(), next_id: Default::default() }
    }
}

/// One signal's place in a [`Watchers`] registry; unregisters the signal when dropped. Keep it
/// in the watch the stream holds.
#[derive(Debug)]
#[must_use = "dropping the registration unregisters the signal at once"]
pub struct Registration<K: Eq + Hash> {
    registry: Weak<Registry<K>>,
    key: K,
    id: u64,
    /// Set by [`Watchers::mark`] and [`Watchers::notify`] of the key, taken by
    /// [`Registration::take_change`].
    changed: Arc<AtomicBool>,
}

impl<K: Eq + Hash> Registration<K> {
    /// Whether the key was marked ([`Watchers::mark`], [`Watchers::notify`]) since the last call
    /// (or since the registration, for the first: a new watch has read nothing yet), and clears
    /// the mark: the answer of [`Watch::take_change`](crate::Watch::take_change) for a watch of
    /// one key. Call it before the read it decides: a change marked after it is there for the
    /// next. Exact when the cache marks a change before any read can see it
    /// ([`Watchers::mark`]).
    pub fn take_change(&self) -> bool {
        self.changed.swap(false, Ordering::AcqRel)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The registry stays consistent even if a holder panicked: every critical section is a
    // single map operation.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K: Eq + Hash + Clone> Watchers<K> {
    /// Registers `signal` under `key` until the returned registration is dropped.
    pub fn register(&self, key: K, signal: Arc<Signal>) -> Registration<K> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let changed = Arc::new(AtomicBool::new(true));
        let watcher = Watcher { signal, changed: changed.clone() };
        lock(&self.registry).entry(key.clone()).or_default().insert(id, watcher);
        Registration { registry: Arc::downgrade(&self.registry), key, id, changed }
    }

    /// Marks a change on every registration under `key`, without raising its signal. For
    /// [`Registration::take_change`] to be exact, call it where no read can see the change yet
    /// (under the write lock that publishes it), then [`notify`](Self::notify) once the lock is
    /// released: a stream that finds no mark must find the view as it was. A change marked only
    /// after it is visible can be skipped by a round that reads another type's new state
    /// (a route read new, the cluster it names skipped).
    pub fn mark(&self, key: &K) {
        if let Some(watchers) = lock(&self.registry).get(key) {
            watchers.values().for_each(|w| w.changed.store(true, Ordering::Release));
        }
    }

    /// Marks a change on every registration under `key` and raises its signal. Raising never
    /// blocks or runs stream code. Call it after the change is published (see
    /// [`mark`](Self::mark) for a change that must be marked before).
    pub fn notify(&self, key: &K) {
        if let Some(watchers) = lock(&self.registry).get(key) {
            watchers.values().for_each(Watcher::notify);
        }
    }

    /// [`notify`](Self::notify) of every key `pred` accepts.
    pub fn notify_where(&self, mut pred: impl FnMut(&K) -> bool) {
        for (key, watchers) in lock(&self.registry).iter() {
            if pred(key) {
                watchers.values().for_each(Watcher::notify);
            }
        }
    }

    /// [`mark`](Self::mark) of every key `pred` accepts.
    pub fn mark_where(&self, mut pred: impl FnMut(&K) -> bool) {
        for (key, watchers) in lock(&self.registry).iter() {
            if pred(key) {
                watchers.values().for_each(|w| w.changed.store(true, Ordering::Release));
            }
        }
    }

    /// The number of signals registered under `key`.
    pub fn count(&self, key: &K) -> usize {
        lock(&self.registry).get(key).map_or(0, HashMap::len)
    }

    /// The number of signals per key, for status pages.
    pub fn counts(&self) -> Vec<(K, usize)> {
        lock(&self.registry).iter().map(|(k, v)| (k.clone(), v.len())).collect()
    }

    /// The number of signals registered under every key: the number of open watches, which
    /// comes back to zero once every stream has ended.
    pub fn total(&self) -> usize {
        lock(&self.registry).values().map(HashMap::len).sum()
    }
}

impl<K: Eq + Hash> Drop for Registration<K> {
    fn drop(&mut self) {
        let Some(registry) = self.registry.upgrade() else { return };
        let mut map = lock(&registry);
        if let Some(signals) = map.get_mut(&self.key) {
            signals.remove(&self.id);
            if signals.is_empty() {
                map.remove(&self.key);
            }
        }
    }
}
