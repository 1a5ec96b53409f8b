//! Who to signal when something changes.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::signal::Signal;

type Registry<K> = Mutex<HashMap<K, HashMap<u64, Arc<Signal>>>>;

/// The signals registered per key (a node group and a type, or just a type).
#[derive(Debug)]
pub(crate) struct Watchers<K> {
    registry: Arc<Registry<K>>,
    next_id: std::sync::atomic::AtomicU64,
}

impl<K> Default for Watchers<K> {
    fn default() -> Self {
        Watchers { registry: Arc::default(), next_id: Default::default() }
    }
}

/// Unregisters its signal when dropped.
#[derive(Debug)]
pub(crate) struct Registration<K: Eq + Hash> {
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
    pub(crate) fn register(&self, key: K, signal: Arc<Signal>) -> Registration<K> {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.registry).entry(key.clone()).or_default().insert(id, signal);
        Registration { registry: Arc::downgrade(&self.registry), key, id }
    }

    /// Raises every signal registered under `key`. Raising never blocks or runs stream code.
    pub(crate) fn notify(&self, key: &K) {
        if let Some(signals) = lock(&self.registry).get(key) {
            for signal in signals.values() {
                signal.raise();
            }
        }
    }

    /// Raises every signal registered under a key `pred` accepts.
    pub(crate) fn notify_where(&self, mut pred: impl FnMut(&K) -> bool) {
        for (key, signals) in lock(&self.registry).iter() {
            if pred(key) {
                signals.values().for_each(|s| s.raise());
            }
        }
    }

    /// The number of signals registered under `key`.
    pub(crate) fn count(&self, key: &K) -> usize {
        lock(&self.registry).get(key).map_or(0, HashMap::len)
    }

    /// The number of signals per key, for status pages.
    pub(crate) fn counts(&self) -> Vec<(K, usize)> {
        lock(&self.registry).iter().map(|(k, v)| (k.clone(), v.len())).collect()
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
