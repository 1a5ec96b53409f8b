//! `Tables`: resource tables by key, each with the streams that watch it; what a custom cache
//! needs besides its own data.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::{Arc, PoisonError, RwLock};

use xds_core::{ErrorDetail, View, code};
use xds_proto::EncodedResource;

use crate::cache::{DynView, Watch};
use crate::signal::Signal;
use crate::table::ResourceTable;
use crate::unready::Unready;
use crate::watchers::{Registration, Watchers};

/// [`ResourceTable`]s by key (a resource type, a tenant, a node group: what your cache serves
/// differently), with the streams that watch each.
///
/// A custom [`Cache`](crate::Cache) keeps its resources here and answers
/// [`watch`](crate::Cache::watch) with [`Tables::watch`] of the key the stream reads. Everything
/// the protocol needs is then kept for it: the revision and content-hash type version of each
/// table, what changed since a stream last looked (deletions included), the shared set, and the
/// streams' signals, raised after each change and released when a stream ends.
///
/// A key that has no table yet is *not ready*: its streams are owed nothing and wait, rather than
/// be told that everything was deleted because the data was not loaded yet. The first
/// [`update`](Self::update) of the key creates its table (an update that adds nothing makes an
/// empty, ready one).
///
/// Resources may also be made only when a client asks for them: see [`generated`](Self::generated).
///
/// Clone it freely: clones share the tables.
///
/// ```
/// use xds_cache::Tables;
/// use xds_proto::EncodedResource;
/// use xds_proto::pb::envoy::config::cluster::v3::Cluster;
///
/// let tables: Tables<&'static str> = Tables::new();
/// assert!(!tables.is_ready(&"tenant-a"));
/// let web = EncodedResource::new(&Cluster { name: "web".into(), ..Default::default() })?;
/// assert!(tables.update(&"tenant-a", |table| table.upsert(web)), "created");
/// assert_eq!(tables.read(&"tenant-a", |table| table.len()), Some(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Tables<K> {
    inner: Arc<Inner<K>>,
}

/// What makes a resource when a client first subscribes to its name (see [`Tables::generated`]).
type Generate<K> = dyn Fn(&K, &str) -> Result<Option<EncodedResource>, ErrorDetail> + Send + Sync;

struct Inner<K> {
    tables: RwLock<BTreeMap<K, Arc<RwLock<ResourceTable>>>>,
    generate: Option<Box<Generate<K>>>,
    watchers: Watchers<K>,
    /// The highest revision of any table removed: a table created afterwards starts above it, so
    /// that a stream that read the removed one is never told only the new one's changes.
    removed_up_to: RwLock<u64>,
}

impl<K> Clone for Tables<K> {
    fn clone(&self) -> Self {
        Tables { inner: self.inner.clone() }
    }
}

impl<K: Ord + Hash + Clone + Send + Sync + 'static> Default for Tables<K> {
    fn default() -> Self {
        Self::with(None)
    }
}

impl<K: Ord + Hash + Clone + Send + Sync + 'static> Tables<K> {
    fn with(generate: Option<Box<Generate<K>>>) -> Self {
        Tables {
            inner: Arc::new(Inner {
                tables: RwLock::default(),
                generate,
                watchers: Watchers::default(),
                removed_up_to: RwLock::default(),
            }),
        }
    }

    /// No tables: every key is not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tables whose resources are made when a client first subscribes to them by name, rather
    /// than all up front: for large inventories of which each client needs a few (endpoints,
    /// routes, on-demand and collection-based types), only what some client asked for is ever
    /// encoded, once for every client.
    ///
    /// `generate(key, name)` is called with no lock held (of the tables or of any stream) when
    /// a stream of `key` subscribes to a `name` its table does not hold, before the response is
    /// computed. It answers `Ok(Some(resource))` (kept in the table like any other, and sent),
    /// `Ok(None)` (no such resource: the client is told `NOT_FOUND`, and the next subscription
    /// asks again), or `Err(detail)`: the resource exists but cannot be served now, which the
    /// client is told in `resource_errors` (rule C4; `UNAVAILABLE` or `INTERNAL` keep what the
    /// client holds) until the error is cleared or the resource is set. The names are a peer's:
    /// answer `Ok(None)` for names you do not know, so that nothing is kept for them.
    ///
    /// Keep generated resources current as for any table: [`update`](Self::update) them when
    /// your data changes (or delete them: the next subscription makes them again). Wildcard
    /// subscriptions see what the tables hold, generated or set.
    ///
    /// ```
    /// use xds_cache::Tables;
    /// use xds_proto::EncodedResource;
    /// use xds_proto::builders::endpoints;
    ///
    /// let tables = Tables::generated(|_type: &&str, name: &str| {
    ///     // Look `name` up in your inventory; only names it knows become resources.
    ///     let known = name.starts_with("svc-");
    ///     Ok(known.then(|| EncodedResource::new(&endpoints(name, &[("10.0.0.1", 80)]))).transpose()
    ///         .expect("a ClusterLoadAssignment with a name encodes"))
    /// });
    /// # let _ = tables.keys();
    /// ```
    pub fn generated(
        generate: impl Fn(&K, &str) -> Result<Option<EncodedResource>, ErrorDetail>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self::with(Some(Box::new(generate)))
    }

    /// Changes the table of `key` (created empty if it has none) with `f`, then signals the
    /// streams watching `key` if its revision moved. Returns what `f` returns.
    ///
    /// `f` runs under the table's write lock: streams reading this key wait for it, others do
    /// not. Encode resources before calling, not inside `f`. Streams are signalled after the
    /// lock is released, so a woken stream reads the new state.
    pub fn update<R>(&self, key: &K, f: impl FnOnce(&mut ResourceTable) -> R) -> R {
        let (table, created) = self.table_or_create(key);
        let mut guard = table.write().unwrap_or_else(PoisonError::into_inner);
        let before = guard.revision();
        let result = f(&mut guard);
        let moved = guard.revision() != before;
        drop(guard);
        if moved || created {
            self.inner.watchers.notify(key);
        }
        result
    }

    /// Calls `f` with the table of `key`, if it has one.
    pub fn read<R>(&self, key: &K, f: impl FnOnce(&ResourceTable) -> R) -> Option<R> {
        let table = self.table(key)?;
        let guard = table.read().unwrap_or_else(PoisonError::into_inner);
        Some(f(&guard))
    }

    /// Whether `key` has a table (its streams are served).
    pub fn is_ready(&self, key: &K) -> bool {
        self.table(key).is_some()
    }

    /// Removes the table of `key`: its streams are owed nothing again (they keep what they hold
    /// and wait) until the next [`update`](Self::update) of `key`, after which they compare
    /// what they hold with the new table in full. Returns whether there was a table.
    pub fn remove(&self, key: &K) -> bool {
        let removed = self.write_tables().remove(key);
        let Some(table) = removed else { return false };
        let revision = table.read().unwrap_or_else(PoisonError::into_inner).revision();
        let mut up_to = self.inner.removed_up_to.write().unwrap_or_else(PoisonError::into_inner);
        *up_to = (*up_to).max(revision);
        drop(up_to);
        self.inner.watchers.notify(key);
        true
    }

    /// The keys that have a table, in order.
    pub fn keys(&self) -> Vec<K> {
        self.inner.tables.read().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect()
    }

    /// A stream's watch of `key`'s table (the [`Watch`] to return from
    /// [`Cache::watch`](crate::Cache::watch)): `signal` is raised after every change of the key
    /// and released when the stream drops the watch.
    pub fn watch(&self, key: K, signal: Arc<Signal>) -> Box<dyn Watch> {
        let registration = self.inner.watchers.register(key.clone(), signal);
        Box::new(TableWatch { inner: self.inner.clone(), key, _registration: registration })
    }

    /// How many streams watch `key`.
    pub fn watching(&self, key: &K) -> usize {
        self.inner.watchers.count(key)
    }

    /// How many streams watch any key: back to 0 when every stream has ended.
    pub fn watching_total(&self) -> usize {
        self.inner.watchers.total()
    }

    fn table(&self, key: &K) -> Option<Arc<RwLock<ResourceTable>>> {
        self.inner.tables.read().unwrap_or_else(PoisonError::into_inner).get(key).cloned()
    }

    fn table_or_create(&self, key: &K) -> (Arc<RwLock<ResourceTable>>, bool) {
        if let Some(table) = self.table(key) {
            return (table, false);
        }
        let start = *self.inner.removed_up_to.read().unwrap_or_else(PoisonError::into_inner);
        let mut tables = self.write_tables();
        let mut created = false;
        let table = tables.entry(key.clone()).or_insert_with(|| {
            created = true;
            let table = if start == 0 { ResourceTable::new() } else { ResourceTable::after(start) };
            Arc::new(RwLock::new(table))
        });
        (table.clone(), created)
    }

    fn write_tables(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, BTreeMap<K, Arc<RwLock<ResourceTable>>>> {
        self.inner.tables.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: std::fmt::Debug> std::fmt::Debug for Tables<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tables = self.inner.tables.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Tables").field("keys", &tables.keys().collect::<Vec<_>>()).finish()
    }
}

/// One stream's watch of one key.
struct TableWatch<K: Eq + Hash> {
    inner: Arc<Inner<K>>,
    key: K,
    _registration: Registration<K>,
}

impl<K: Ord + Hash + Clone + Send + Sync + 'static> Watch for TableWatch<K> {
    fn read(&self, f: &mut dyn FnMut(&DynView<'_>)) {
        let tables = self.inner.tables.read().unwrap_or_else(PoisonError::into_inner);
        let table = tables.get(&self.key).cloned();
        drop(tables);
        match table {
            Some(table) => f(&*table.read().unwrap_or_else(PoisonError::into_inner)),
            None => f(&Unready),
        }
    }

    /// Makes the names the table does not hold (when the tables generate resources), with no
    /// lock held while the user's function runs, then applies every answer in one update.
    fn subscribed(&self, names: &mut dyn Iterator<Item = &str>) {
        let Some(generate) = &self.inner.generate else { return };
        let tables = Tables { inner: self.inner.clone() };
        let mut made = Vec::new();
        for name in names {
            if name == xds_core::WILDCARD || xds_core::xdstp::is_glob_name(name) {
                continue;
            }
            let held = tables
                .read(&self.key, |t| t.get(name).is_some() || t.resource_error(name).is_some());
            if held != Some(true) {
                made.push((name.to_owned(), generate(&self.key, name)));
            }
        }
        if made.is_empty() {
            return;
        }
        tables.update(&self.key, |table| {
            for (name, answer) in made {
                match answer {
                    Ok(Some(resource)) if table.is_named(&resource, &name) => {
                        table.upsert(resource);
                    }
                    Ok(Some(resource)) => {
                        let message = format!(
                            "the control plane made a resource named {:?} for this name",
                            xds_core::echo(resource.name()).to_string()
                        );
                        table.set_error(&name, Some(ErrorDetail { code: code::INTERNAL, message }));
                    }
                    Ok(None) => {}
                    Err(error) => {
                        table.set_error(&name, Some(error));
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use xds_proto::EncodedResource;
    use xds_proto::pb::envoy::config::cluster::v3::Cluster;

    fn cluster(name: &str, stat: &str) -> EncodedResource {
        let cluster =
            Cluster { name: name.into(), alt_stat_name: stat.into(), ..Default::default() };
        EncodedResource::new(&cluster).unwrap()
    }

    /// Whether `signal` was raised since the last look (without a runtime).
    fn raised(signal: &Signal) -> bool {
        let mut wait = std::pin::pin!(signal.raised());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        wait.as_mut().poll(&mut cx).is_ready()
    }

    /// What a stream's watch lends: (ready, revision, names changed since `since` if told).
    fn look(watch: &dyn Watch, since: u64) -> (bool, u64, Option<Vec<String>>) {
        let mut seen = None;
        watch.read(&mut |view| {
            let mut names = Vec::new();
            let told = view.changed_since(since, &mut |n| names.push(n.to_owned()));
            seen = Some((view.is_ready(), view.revision(), told.then_some(names)));
        });
        seen.unwrap()
    }

    #[test]
    fn a_key_without_a_table_is_not_ready_and_its_first_update_signals_its_streams() {
        let tables: Tables<u8> = Tables::new();
        let (signal, other) = (Arc::new(Signal::new()), Arc::new(Signal::new()));
        let watch = tables.watch(1, signal.clone());
        let _other = tables.watch(2, other.clone());
        assert!(!look(&*watch, 0).0, "no table: owed nothing");
        tables.update(&1, |_| ());
        assert!(raised(&signal), "an empty table made ready is news to its streams");
        assert!(!raised(&other), "another key's streams are not woken");
        assert!(look(&*watch, 0).0);
        assert!(!tables.update(&1, |t| t.delete("missing")));
        assert!(!raised(&signal), "nothing changed: nobody is woken");
        tables.update(&1, |t| t.upsert(cluster("a", "1")));
        assert!(raised(&signal));
        assert_eq!(look(&*watch, 0).2, Some(vec!["a".to_owned()]));
    }

    #[test]
    fn a_table_made_again_after_a_removal_cannot_be_mistaken_for_the_old_one() {
        let tables: Tables<u8> = Tables::new();
        let watch = tables.watch(1, Arc::new(Signal::new()));
        tables.update(&1, |t| {
            t.upsert(cluster("a", "1"));
            t.upsert(cluster("b", "1"));
        });
        let (_, read_at, _) = look(&*watch, 0);
        assert!(tables.remove(&1));
        assert!(!look(&*watch, read_at).0, "removed: not ready");
        // The new table's changes alone would hide that `a` and `b` are gone.
        tables.update(&1, |t| {
            for i in 0..5 {
                t.upsert(cluster("c", &i.to_string()));
            }
        });
        let (ready, revision, told) = look(&*watch, read_at);
        assert!(ready && revision > read_at);
        assert_eq!(told, None, "the stream must compare in full");
    }

    #[test]
    fn dropping_a_watch_releases_its_registration() {
        let tables: Tables<&str> = Tables::new();
        let watch = tables.watch("a", Arc::new(Signal::new()));
        assert_eq!((tables.watching(&"a"), tables.watching_total()), (1, 1));
        drop(watch);
        assert_eq!(tables.watching_total(), 0);
    }

    #[test]
    fn a_generated_name_is_made_once_and_a_misnamed_one_is_an_internal_error() {
        let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = calls.clone();
        let tables = Tables::generated(move |_: &u8, name: &str| {
            seen.lock().unwrap().push(name.to_owned());
            match name {
                "a" => Ok(Some(cluster("a", "1"))),
                "wrong" => Ok(Some(cluster("other", "1"))),
                _ => Ok(None),
            }
        });
        let signal = Arc::new(Signal::new());
        let watch = tables.watch(1, signal.clone());
        watch.subscribed(&mut ["a", "wrong", "none", "*"].into_iter());
        assert!(raised(&signal), "the stream looks again");
        assert_eq!(*calls.lock().unwrap(), ["a", "wrong", "none"], "never the wildcard");
        let mut error = None;
        let mut has = (false, false);
        watch.read(&mut |view| {
            has = (view.get("a").is_some(), view.get("other").is_some());
            error = view.resource_error("wrong");
        });
        assert_eq!(has, (true, false), "a misnamed resource is not kept");
        assert_eq!(error.map(|e| e.code), Some(code::INTERNAL));
        watch.subscribed(&mut ["a", "wrong", "none"].into_iter());
        assert_eq!(calls.lock().unwrap().len(), 4, "only the name nothing was kept for");
    }
}
