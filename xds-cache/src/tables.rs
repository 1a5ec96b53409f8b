//! `Tables`: resource tables by key, each with the streams that watch it; what a custom cache
//! needs besides its own data.

use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

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
    map: RwLock<Map<K>>,
    generate: Option<Box<Generate<K>>>,
    watchers: Watchers<K>,
}

impl<K: Ord> Inner<K> {
    /// The table of `key` in the map, if it has one.
    fn slot(&self, key: &K) -> Option<Arc<Slot>> {
        read(&self.map).tables.get(key).cloned()
    }
}

/// The tables by key, and what a table made after a removal must start above.
struct Map<K> {
    tables: BTreeMap<K, Arc<Slot>>,
    /// The highest revision of any table removed: a table created afterwards starts above it, so
    /// that a stream that read the removed one is never told only the new one's changes. Read
    /// and raised under the map's write lock, with the removal itself.
    removed_up_to: u64,
}

/// One key's table, and whether it was removed: an update that got hold of it just before its
/// removal sees that under the table's lock, and goes to the key's new table instead of
/// writing where nobody reads.
struct Slot {
    table: RwLock<ResourceTable>,
    removed: AtomicBool,
}

/// The most errors a generated table keeps (rule C4) for names it was asked for: the names are
/// a peer's, and a generator that answers `Err` for names it cannot parse must not make the
/// table grow with them. Past it, such a name is answered as unknown (`NOT_FOUND`).
pub const MAX_GENERATED_ERRORS: usize = 1024;

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
                map: RwLock::new(Map { tables: BTreeMap::new(), removed_up_to: 0 }),
                generate,
                watchers: Watchers::default(),
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
    /// answer `Ok(None)` for names you do not know, so that nothing is kept for them (a table
    /// keeps at most [`MAX_GENERATED_ERRORS`] errors it was asked for; past them a name is
    /// answered as unknown).
    ///
    /// Only a key that has a table is generated for: make it with an
    /// [`update`](Self::update) once its data is loaded (an empty one will do). Until then its
    /// streams wait, and a subscription makes nothing.
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
    /// tables.update(&"endpoints", |_| ()); // loaded: served from now on
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
    /// not. Encode resources before calling, not inside `f`, and do not call these tables from
    /// `f` (a concurrent [`remove`](Self::remove) would wait for `f` while `f` waits for it).
    /// A change is marked on the key's watches before the lock is released
    /// ([`Watchers::mark`](crate::Watchers::mark)), so that a stream finds the mark no later
    /// than the change; streams are signalled after the lock is released, so a woken stream
    /// reads the new state.
    pub fn update<R>(&self, key: &K, f: impl FnOnce(&mut ResourceTable) -> R) -> R {
        let mut created = false;
        loop {
            let (slot, made) = self.slot_or_create(key);
            created |= made;
            let mut guard = write(&slot.table);
            if slot.removed.load(Ordering::Acquire) {
                continue; // removed since it was looked up: the key's next table
            }
            let before = guard.revision();
            let result = f(&mut guard);
            let moved = guard.revision() != before;
            if moved || created {
                // Marked before the lock that publishes the change is released.
                self.inner.watchers.mark(key);
            }
            drop(guard);
            if moved || created {
                self.inner.watchers.notify(key);
            }
            return result;
        }
    }

    /// [`update`](Self::update) of a key that has a table; `None`, `f` not called, for one
    /// that has none (its streams stay not ready).
    fn update_existing<R>(&self, key: &K, f: impl FnOnce(&mut ResourceTable) -> R) -> Option<R> {
        let slot = self.slot(key)?;
        let mut guard = write(&slot.table);
        if slot.removed.load(Ordering::Acquire) {
            return None;
        }
        let before = guard.revision();
        let result = f(&mut guard);
        let moved = guard.revision() != before;
        if moved {
            self.inner.watchers.mark(key);
        }
        drop(guard);
        if moved {
            self.inner.watchers.notify(key);
        }
        Some(result)
    }

    /// Calls `f` with the table of `key`, if it has one.
    pub fn read<R>(&self, key: &K, f: impl FnOnce(&ResourceTable) -> R) -> Option<R> {
        let slot = self.slot(key)?;
        let guard = read(&slot.table);
        Some(f(&guard))
    }

    /// Whether `key` has a table (its streams are served).
    pub fn is_ready(&self, key: &K) -> bool {
        self.slot(key).is_some()
    }

    /// Removes the table of `key`: its streams are owed nothing again (they keep what they hold
    /// and wait) until the next [`update`](Self::update) of `key`, after which they compare
    /// what they hold with the new table in full. Returns whether there was a table.
    pub fn remove(&self, key: &K) -> bool {
        let mut map = write(&self.inner.map);
        let Some(slot) = map.tables.remove(key) else { return false };
        // Under the map's lock, so that no table of this key is made meanwhile below it, and
        // under the table's, so that no update of it is lost after it.
        let table = write(&slot.table);
        slot.removed.store(true, Ordering::Release);
        map.removed_up_to = map.removed_up_to.max(table.revision());
        self.inner.watchers.mark(key);
        drop(table);
        drop(map);
        self.inner.watchers.notify(key);
        true
    }

    /// The keys that have a table, in order.
    pub fn keys(&self) -> Vec<K> {
        read(&self.inner.map).tables.keys().cloned().collect()
    }

    /// A stream's watch of `key`'s table (the [`Watch`] to return from
    /// [`Cache::watch`](crate::Cache::watch)): `signal` is raised after every change of the key
    /// and released when the stream drops the watch.
    pub fn watch(&self, key: K, signal: Arc<Signal>) -> Box<dyn Watch> {
        let registration = self.inner.watchers.register(key.clone(), signal);
        Box::new(TableWatch {
            inner: self.inner.clone(),
            key,
            registration,
            slot: Mutex::new(None),
        })
    }

    /// How many streams watch `key`.
    pub fn watching(&self, key: &K) -> usize {
        self.inner.watchers.count(key)
    }

    /// How many streams watch any key: back to 0 when every stream has ended.
    pub fn watching_total(&self) -> usize {
        self.inner.watchers.total()
    }

    fn slot(&self, key: &K) -> Option<Arc<Slot>> {
        self.inner.slot(key)
    }

    fn slot_or_create(&self, key: &K) -> (Arc<Slot>, bool) {
        if let Some(slot) = self.slot(key) {
            return (slot, false);
        }
        let mut map = write(&self.inner.map);
        let start = map.removed_up_to;
        let mut created = false;
        let slot = map.tables.entry(key.clone()).or_insert_with(|| {
            created = true;
            // A new table is a change its watches read (ready now, if empty): marked before
            // the map's lock that publishes it is released.
            self.inner.watchers.mark(key);
            let table = if start == 0 { ResourceTable::new() } else { ResourceTable::after(start) };
            Arc::new(Slot { table: RwLock::new(table), removed: AtomicBool::new(false) })
        });
        (slot.clone(), created)
    }
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

impl<K: std::fmt::Debug> std::fmt::Debug for Tables<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let map = read(&self.inner.map);
        f.debug_struct("Tables").field("keys", &map.tables.keys().collect::<Vec<_>>()).finish()
    }
}

/// One stream's watch of one key.
struct TableWatch<K: Eq + Hash> {
    inner: Arc<Inner<K>>,
    key: K,
    registration: Registration<K>,
    /// The key's table as the last read found it, read again while it is not removed. Every
    /// stream of a key found it through the map at each read: the map's lock taken and given
    /// back, the table's handle counted up and down, four atomic writes to lines every stream
    /// on every worker writes, at each client's update (the table's own read lock is still
    /// taken). A removed table is kept here until the watch's next read or its end: a removal
    /// wakes its streams, but a stream that waits for its client to take what it wrote reads
    /// nothing meanwhile. What that keeps beyond the resources themselves (which the stream's
    /// base set holds anyway) is the table's index of names and changes, one table per watch
    /// at most.
    slot: Mutex<Option<Arc<Slot>>>,
}

impl<K: Ord + Hash + Clone + Send + Sync + 'static> Watch for TableWatch<K> {
    fn read(&self, f: &mut dyn FnMut(&DynView<'_>)) {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(kept) = slot.as_ref() {
            let table = read(&kept.table);
            // Seen under the table's lock, which a removal holds as it marks the slot.
            if !kept.removed.load(Ordering::Acquire) {
                return f(&*table);
            }
        }
        *slot = self.inner.slot(&self.key);
        match slot.as_ref() {
            Some(kept) => f(&*read(&kept.table)),
            None => f(&Unready),
        }
    }

    /// Every change to the key's table (its creation and removal included) marks the key
    /// before a read can see it.
    fn take_change(&self) -> bool {
        self.registration.take_change()
    }

    /// Makes the names the table does not hold (when the tables generate resources), with no
    /// lock held while the user's function runs, then applies the answers in one update. A key
    /// with no table is not generated for: its streams wait for the key to be loaded.
    fn subscribed(&self, names: &mut dyn Iterator<Item = &str>) {
        let Some(generate) = &self.inner.generate else { return };
        let tables = Tables { inner: self.inner.clone() };
        if !tables.is_ready(&self.key) {
            return;
        }
        let mut made = Vec::new();
        for name in names {
            if name == xds_core::WILDCARD || xds_core::xdstp::is_glob_name(name) {
                continue;
            }
            // Rule C1: looked up, and asked for, by the normal form the table is keyed by.
            let Ok(name) = xds_core::xdstp::normalize(name) else { continue };
            let held = tables
                .read(&self.key, |t| t.get(&name).is_some() || t.resource_error(&name).is_some());
            if held == Some(false) {
                match generate(&self.key, &name) {
                    Ok(None) => {} // nothing to keep: the client is told NOT_FOUND
                    answer => made.push((name.into_owned(), answer)),
                }
            }
        }
        if made.is_empty() {
            return;
        }
        tables.update_existing(&self.key, |table| {
            for (name, answer) in made {
                let error = match answer {
                    Ok(Some(resource)) if table.is_named(&resource, &name) => {
                        table.upsert(resource);
                        continue;
                    }
                    Ok(Some(resource)) => {
                        let message = format!(
                            "the control plane made a resource named {:?} for this name",
                            xds_core::echo(resource.name()).to_string()
                        );
                        ErrorDetail { code: code::INTERNAL, message }
                    }
                    Ok(None) => continue,
                    Err(error) => error,
                };
                if table.error_count() < MAX_GENERATED_ERRORS {
                    table.set_error(&name, Some(error));
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xds_proto::EncodedResource;
    use xds_proto::pb::envoy::config::cluster::v3::Cluster;

    fn cluster(name: &str, stat: &str) -> EncodedResource {
        let cluster =
            Cluster { name: name.into(), alt_stat_name: stat.into(), ..Default::default() };
        EncodedResource::new(&cluster).unwrap()
    }

    /// Whether `signal` was raised since the last look (without a runtime).
    fn raised(signal: &Signal) -> bool {
        signal.take()
    }

    /// What a stream's watch lends: (ready, revision, names changed since `since` if told).
    fn look(watch: &dyn Watch, since: u64) -> (bool, u64, Option<Vec<String>>) {
        let mut seen = None;
        watch.read(&mut |view| {
            let mut names = Vec::new();
            let told = view.changed_since(since, &mut |n| names.push(n.to_owned()));
            names.sort();
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

    /// A watch keeps the table it read and reads it again while it stands; once it is removed,
    /// the watch finds the key's table anew: the one made since (never the removed one read
    /// again, nor its changes taken for the new one's), or none.
    #[test]
    fn a_watch_reads_the_table_made_after_a_removal_it_did_not_see() {
        let tables: Tables<u8> = Tables::new();
        let watch = tables.watch(1, Arc::new(Signal::new()));
        tables.update(&1, |t| t.upsert(cluster("a", "1")));
        let (_, first, _) = look(&*watch, 0);
        tables.update(&1, |t| t.upsert(cluster("b", "1")));
        let (_, second, told) = look(&*watch, first);
        assert_eq!(told, Some(vec!["b".to_owned()]), "the kept table, changed");
        assert!(tables.remove(&1));
        tables.update(&1, |t| t.upsert(cluster("c", "1")));
        let (ready, revision, told) = look(&*watch, second);
        assert!(ready && revision > second);
        assert_eq!(told, None, "a new table: compared in full");
        let mut held = Vec::new();
        watch.read(&mut |view| {
            held = ["a", "b", "c"].into_iter().filter(|n| view.get(n).is_some()).collect();
        });
        assert_eq!(held, ["c"], "the new table, not the removed one");
        assert!(tables.remove(&1));
        assert!(!look(&*watch, revision).0, "removed, none made since: not ready");
        tables.update(&1, |_| ());
        assert!(look(&*watch, 0).0);
    }

    /// A watch that read its key's table reads it again without the map: a read goes on while
    /// the map's write lock is held (as every stream of every key took the map's lock at each
    /// read, and wrote to its line).
    #[test]
    fn a_watch_reads_the_table_it_read_without_the_map() {
        let tables: Tables<u8> = Tables::new();
        tables.update(&1, |t| t.upsert(cluster("a", "1")));
        let watch = tables.watch(1, Arc::new(Signal::new()));
        let (_, first, _) = look(&*watch, 0);
        let map = write(&tables.inner.map);
        let (done, read) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let seen = look(&*watch, 0).1;
            let _ = done.send(seen);
        });
        let seen = read.recv_timeout(std::time::Duration::from_secs(10));
        drop(map);
        assert_eq!(seen.ok(), Some(first), "read with the map locked");
        assert!(reader.join().is_ok());
    }

    /// A watch says whether its key changed since it last said: a new watch has read nothing
    /// yet; every update that moves the table, its creation and its removal mark it, and an
    /// update that changes nothing does not. A watch of another key is not marked.
    #[test]
    fn a_watch_takes_the_change_its_key_was_notified_of_once() {
        let tables: Tables<u8> = Tables::new();
        let watch = tables.watch(1, Arc::new(Signal::new()));
        let other = tables.watch(2, Arc::new(Signal::new()));
        assert!(watch.take_change(), "read nothing yet");
        assert!(other.take_change());
        assert!(!watch.take_change(), "taken");
        tables.update(&1, |_| ());
        assert!(watch.take_change(), "created");
        tables.update(&1, |t| t.upsert(cluster("a", "1")));
        tables.update(&1, |t| t.upsert(cluster("b", "1")));
        assert!(watch.take_change(), "two changes, taken once");
        assert!(!watch.take_change());
        tables.update(&1, |t| t.upsert(cluster("b", "1")));
        assert!(!watch.take_change(), "the same resource again changes nothing");
        assert!(tables.remove(&1));
        assert!(watch.take_change(), "removed");
        assert!(!other.take_change(), "another key");
    }

    /// A change is marked before any read can see it, so that a stream that found another
    /// view's new state (read first in its round) finds this one's mark too. A reader looks at
    /// the revision, then takes the mark, and reads again only when marked, as a stream does;
    /// a revision it saw before a take that found no mark, newer than it last read after a
    /// mark, is a change a stream would have skipped. (Marked only once the table's lock was
    /// released, the reader meets one within a few thousand updates.)
    #[test]
    fn a_change_is_marked_before_a_read_can_see_it() {
        let tables: Tables<u8> = Tables::new();
        tables.update(&1, |_| ());
        let watch = tables.watch(1, Arc::new(Signal::new()));
        let done = Arc::new(AtomicBool::new(false));
        let reader = {
            let done = done.clone();
            std::thread::spawn(move || {
                let revision = |watch: &dyn Watch| {
                    let mut revision = 0;
                    watch.read(&mut |view| revision = view.revision());
                    revision
                };
                let (mut known, mut skipped) = (0, 0);
                while !done.load(Ordering::Acquire) {
                    let seen = revision(&*watch);
                    if watch.take_change() {
                        known = revision(&*watch);
                    } else if seen > known {
                        skipped += 1;
                    }
                }
                skipped
            })
        };
        for i in 0..50_000 {
            tables.update(&1, |t| t.upsert(cluster("a", &i.to_string())));
        }
        done.store(true, Ordering::Release);
        assert_eq!(reader.join().ok(), Some(0), "no change is seen before it is marked");
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
        watch.subscribed(&mut ["a"].into_iter());
        assert!(calls.lock().unwrap().is_empty(), "a key not loaded yet is not generated for");
        assert!(!tables.is_ready(&1), "and asking does not make it ready");
        tables.update(&1, |_| ());
        assert!(raised(&signal));
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

    #[test]
    fn generated_errors_for_names_a_peer_picks_are_bounded() {
        let tables = Tables::generated(|_: &u8, name: &str| {
            Err(ErrorDetail { code: code::UNAVAILABLE, message: format!("cannot make {name}") })
        });
        tables.update(&1, |_| ());
        let watch = tables.watch(1, Arc::new(Signal::new()));
        let names: Vec<String> = (0..MAX_GENERATED_ERRORS + 500).map(|i| format!("n{i}")).collect();
        watch.subscribed(&mut names.iter().map(String::as_str));
        let kept = tables.read(&1, ResourceTable::error_count);
        assert_eq!(kept, Some(MAX_GENERATED_ERRORS));
    }
}
