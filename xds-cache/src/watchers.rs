//! Who to signal when something changes: the registry every cache keeps, public so that a cache
//! of your own keeps it the same way.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::signal::Signal;

type Registry<K> = Mutex<HashMap<K, HashMap<u64, Arc<Signal>>>>;

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
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The registry stays consistent even if a holder panicked: every critical section is a
    // single map operation.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K: Eq + Hash + Clone> Watchers<K> {
    /// Registers `signal` under `key` until the returned registration is dropped.
    pub fn register(&self, key: K, signal: Arc<Signal>) -> Registration<K> {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.registry).entry(key.clone()).or_default().insert(id, signal);
        Registration { registry: Arc::downgrade(&self.registry), key, id }
    }

    /// Raises every signal registered under `key`. Raising never blocks or runs stream code.
    pub fn notify(&self, key: &K) {
        if let Some(signals) = lock(&self.registry).get(key) {
            for signal in signals.values() {
                signal.raise();
            }
        }
    }

    /// Raises every signal registered under a key `pred` accepts.
    pub fn notify_where(&self, mut pred: impl FnMut(&K) -> bool) {
        for (key, signals) in lock(&self.registry).iter() {
            if pred(key) {
                signals.values().for_each(|s| s.raise());
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
