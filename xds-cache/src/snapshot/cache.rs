//! `SnapshotCache`: whole-configuration snapshots per node group.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::SystemTime;

use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{EncodedResource, TypeUrl};

use super::Snapshot;
use super::watch::{Binding, SnapshotWatch};
use crate::cache::{Cache, CacheError, Watch, WatchRequest, check_variant};
use crate::signal::Signal;
use crate::table::ResourceTable;
use crate::watchers::Watchers;

type Grouper = dyn Fn(&Node) -> String + Send + Sync;

/// Serves each node group its own [`Snapshot`].
///
/// A function maps each node to its group (by default its id). Setting a group's snapshot
/// compares it with the previous one resource by resource: unchanged resources keep their
/// revision, and only the streams watching a type that changed are signalled. A group without a
/// snapshot serves nothing yet, so a client that connects before its configuration is loaded
/// waits instead of being told that nothing exists.
///
/// # When the grouping changes
///
/// A stream's group is chosen by the grouping function when it starts watching. A function that
/// reads something else than the node (e.g. which groups exist: "the group named by the node id
/// if there is one, else `default`") can map the same node elsewhere later: call
/// [`regroup`](SnapshotCache::regroup) after changing what it reads. Each connected stream
/// whose node now maps to another group moves to it without reconnecting: it is sent what the new
/// group has that it does not hold, and removals of what the new group lacks (delta
/// `removed_resources`; SotW full-state types get the new full state). The cache never calls the
/// function on its own (it cannot know what the function reads), so with a function of the node
/// alone, such as [`by_node_id`](SnapshotCache::by_node_id), there is nothing to call.
///
/// ```
/// use xds_cache::{Snapshot, SnapshotCache};
/// use xds_proto::pb::envoy::config::cluster::v3::Cluster;
///
/// let cache = SnapshotCache::by_node_id();
/// let mut builder = Snapshot::builder();
/// builder.add(&Cluster { name: "backend".into(), ..Default::default() })?;
/// cache.set_snapshot("envoy-1", builder.build()?);
/// assert_eq!(cache.snapshot("envoy-1").map(|s| s.len()), Some(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct SnapshotCache {
    inner: Arc<Inner>,
}

pub(super) struct Inner {
    grouper: Box<Grouper>,
    groups: RwLock<HashMap<String, Arc<Group>>>,
    pub(super) watchers: Watchers<(String, TypeUrl)>,
    /// Every open watch, by id: what `regroup` walks.
    bindings: Mutex<HashMap<u64, Arc<Binding>>>,
    next_binding: AtomicU64,
    /// Moves at each `regroup`: a watch that started meanwhile asks the grouping function again.
    epoch: AtomicU64,
    /// Node ids already warned about waiting on a group with no snapshot (bounded).
    warned: Mutex<HashSet<String>>,
}

/// The most node ids remembered for the "nothing to serve" warning; past it, no more warnings
/// (a fleet of unconfigured nodes must not grow the set, nor flood the log).
const MAX_WARNED_NODES: usize = 10_000;

impl Inner {
    /// Logs, once per node, that its group has no snapshot yet: without it a node whose group is
    /// misnamed would wait in silence.
    fn warn_unserved(&self, node: &str, group: &str) {
        let mut warned = lock(&self.warned);
        if warned.len() >= MAX_WARNED_NODES || warned.contains(node) {
            return;
        }
        warned.insert(node.to_owned());
        drop(warned);
        let node: String = node.chars().take(128).collect();
        let group: String = group.chars().take(128).collect();
        tracing::warn!(
            %node,
            %group,
            "the node's group has no configuration yet: its streams wait until one is set"
        );
    }
}

#[derive(Default)]
pub(super) struct Group {
    pub(super) data: RwLock<GroupData>,
}

#[derive(Default)]
pub(super) struct GroupData {
    pub(super) snapshot: Option<Snapshot>,
    pub(super) tables: BTreeMap<TypeUrl, ResourceTable>,
    pub(super) last_watch: Option<SystemTime>,
}

/// What a node group looks like now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupStatus {
    /// Whether a snapshot is set.
    pub has_snapshot: bool,
    /// Open watches (one per stream and type), by type.
    pub watches: BTreeMap<String, usize>,
    /// When a stream last started watching.
    pub last_watch: Option<SystemTime>,
    /// The type versions served, by type (rule S16).
    pub versions: BTreeMap<String, String>,
}

pub(super) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

pub(super) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

impl std::fmt::Debug for SnapshotCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotCache").field("groups", &read(&self.inner.groups).len()).finish()
    }
}

impl SnapshotCache {
    /// A cache whose groups are chosen by `grouper` (e.g. by node cluster or by a metadata key).
    pub fn new(grouper: impl Fn(&Node) -> String + Send + Sync + 'static) -> Self {
        SnapshotCache {
            inner: Arc::new(Inner {
                grouper: Box::new(grouper),
                groups: RwLock::default(),
                watchers: Watchers::default(),
                bindings: Mutex::default(),
                next_binding: AtomicU64::new(0),
                epoch: AtomicU64::new(0),
                warned: Mutex::default(),
            }),
        }
    }

    /// A cache with one group per node id.
    pub fn by_node_id() -> Self {
        Self::new(|node| node.id.clone())
    }

    /// A cache with one group per node cluster (`node.cluster`).
    pub fn by_node_cluster() -> Self {
        Self::new(|node| node.cluster.clone())
    }

    /// The group a node belongs to.
    pub fn group_of(&self, node: &Node) -> String {
        (self.inner.grouper)(node)
    }

    /// Serves `snapshot` to `group`, signalling the streams of each type that changed. Returns the
    /// number of resources created, changed or deleted.
    ///
    /// Costs O(resources) compared by pointer, except for a snapshot derived with
    /// [`Snapshot::to_builder`] from the one the group serves: then only the names the builder
    /// added or removed are looked at, O(changes × log n). Setting the snapshot the group
    /// already serves (or a clone) changes nothing and wakes no one.
    pub fn set_snapshot(&self, group: &str, snapshot: Snapshot) -> usize {
        let state = self.inner.group(group);
        let (changed_types, first, count) = {
            let mut data = write(&state.data);
            let first = data.snapshot.is_none();
            let mut types: Vec<TypeUrl> = data.tables.keys().cloned().collect();
            types.extend(snapshot.types().cloned());
            types.sort();
            types.dedup();
            let empty = super::Resources::new();
            let none = BTreeSet::new();
            // Derived (`to_builder`) from the snapshot served now: only the names the builder
            // touched can differ, the tables hold exactly the old snapshot.
            let touched = data.snapshot.as_ref().and_then(|old| snapshot.touched_since(old));
            let mut changed_types = Vec::new();
            let mut count = 0;
            for t in types {
                // A type whose resources the new snapshot shares with the old one (built with
                // `to_builder`) cannot have changed: skip it without looking at its resources.
                if data.snapshot.as_ref().is_some_and(|old| old.shares(&snapshot, &t)) {
                    continue;
                }
                let next = snapshot.map(&t).unwrap_or(&empty);
                let table = data.tables.entry(t.clone()).or_default();
                let n = match touched {
                    Some(touched) => table.apply(next, touched.get(&t).unwrap_or(&none)),
                    None => table.replace_all(next),
                };
                if n > 0 {
                    changed_types.push(t);
                    count += n;
                }
            }
            data.snapshot = Some(snapshot);
            // Every type the snapshot changed is marked before any stream can read one of them
            // (the lock is released below): a stream that reads the new routes finds the new
            // clusters marked, and does not skip them.
            if first {
                self.inner.watchers.mark_where(|(g, _)| g == group);
            } else {
                for t in &changed_types {
                    self.inner.watchers.mark(&(group.to_owned(), t.clone()));
                }
            }
            (changed_types, first, count)
        };
        if first {
            // Every watcher of the group was waiting for data, whatever its type.
            self.inner.watchers.notify_where(|(g, _)| g == group);
        } else {
            for t in changed_types {
                self.inner.watchers.notify(&(group.to_owned(), t));
            }
        }
        count
    }

    /// Attaches an error to the resource `name` of `type_url` for `group`, or clears it with
    /// `None` (rule C4): sent once in `resource_errors` to that group's clients subscribed to
    /// `name` while no such resource exists (`*`: the wildcard). Errors outlive snapshots: set
    /// the resource, or clear the error, to end it. Returns whether anything changed.
    pub fn set_error(
        &self,
        group: &str,
        type_url: &TypeUrl,
        name: &str,
        error: Option<xds_core::ErrorDetail>,
    ) -> bool {
        let state = self.inner.group(group);
        let mut data = write(&state.data);
        let changed = data.tables.entry(type_url.clone()).or_default().set_error(name, error);
        if changed {
            self.inner.watchers.mark(&(group.to_owned(), type_url.clone()));
        }
        drop(data);
        if changed {
            self.inner.watchers.notify(&(group.to_owned(), type_url.clone()));
        }
        changed
    }

    /// The snapshot served to `group`.
    pub fn snapshot(&self, group: &str) -> Option<Snapshot> {
        let state = read(&self.inner.groups).get(group).cloned()?;
        read(&state.data).snapshot.clone()
    }

    /// Asks the grouping function again for every open watch, and moves the streams whose node
    /// now maps to another group (see [When the grouping changes](SnapshotCache#when-the-grouping-changes)).
    /// Returns the number of watches (one per stream and type) that move.
    ///
    /// Call it after changing what the grouping function reads, and after setting the snapshots
    /// of the groups that appeared (a stream moved to a group without a snapshot waits for one).
    /// Costs one call of the function per open watch, made with no lock of the cache held (the
    /// function may call the cache); a moved stream is signalled and moves at its next read.
    pub fn regroup(&self) -> usize {
        // Before the walk: a watch that starts during it checks the epoch again once registered
        // (see `watch`), so none is missed.
        self.inner.epoch.fetch_add(1, Ordering::SeqCst);
        let bindings: Vec<Arc<Binding>> = lock(&self.inner.bindings).values().cloned().collect();
        bindings.iter().filter(|b| b.move_to(self.group_of(&b.node))).count()
    }

    /// Stops serving `group`: its streams keep what they have and get nothing more until a
    /// snapshot is set again (or, if the grouping function now maps them elsewhere, until
    /// [`regroup`](SnapshotCache::regroup) moves them).
    pub fn clear_snapshot(&self, group: &str) {
        let Some(state) = read(&self.inner.groups).get(group).cloned() else { return };
        {
            let mut data = write(&state.data);
            data.snapshot = None;
            // Deleting (not dropping) keeps revisions growing, so streams that come back stay exact.
            let empty = super::Resources::new();
            for table in data.tables.values_mut() {
                table.replace_all(&empty);
            }
            // Its streams are not woken (they keep what they have), but their next look reads
            // it: marked before the lock is released, as every change is.
            self.inner.watchers.mark_where(|(g, _)| g == group);
        }
        drop(state);
        self.inner.release(group);
    }

    /// The groups that have a snapshot or a stream.
    pub fn groups(&self) -> Vec<String> {
        let mut v: Vec<String> = read(&self.inner.groups).keys().cloned().collect();
        v.sort();
        v
    }

    /// The status of one group.
    pub fn status(&self, group: &str) -> Option<GroupStatus> {
        let state = read(&self.inner.groups).get(group).cloned()?;
        let data = read(&state.data);
        let watches = self
            .inner
            .watchers
            .counts()
            .into_iter()
            .filter(|((g, _), _)| g == group)
            .map(|((_, t), n)| (t.to_string(), n))
            .collect();
        let versions = data
            .tables
            .iter()
            .map(|(t, table)| (t.to_string(), xds_core::View::version(table).into()))
            .collect();
        Some(GroupStatus {
            has_snapshot: data.snapshot.is_some(),
            watches,
            last_watch: data.last_watch,
            versions,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    pub(super) fn group(&self, name: &str) -> Arc<Group> {
        if let Some(g) = read(&self.groups).get(name) {
            return g.clone();
        }
        write(&self.groups).entry(name.to_owned()).or_default().clone()
    }

    /// Forgets a group that has neither a snapshot nor a user, so that nodes coming and going
    /// leave nothing behind.
    ///
    /// "No user" is "no other `Arc` of the group": watches hold one, and so does any call between
    /// looking the group up and using it. Checked under the map's write lock, which every lookup
    /// needs too, so a group in use is never forgotten.
    pub(super) fn release(&self, name: &str) {
        let mut groups = write(&self.groups);
        let idle = groups
            .get(name)
            .is_some_and(|g| Arc::strong_count(g) == 1 && read(&g.data).snapshot.is_none());
        if idle {
            groups.remove(name);
        }
    }
}

impl Inner {
    /// Forgets a dropped watch.
    pub(super) fn unbind(&self, id: u64) {
        lock(&self.bindings).remove(&id);
    }
}

impl Cache for SnapshotCache {
    fn group(&self, node: &Node) -> Option<String> {
        Some(self.group_of(node))
    }

    fn watch(
        &self,
        request: WatchRequest<'_>,
        signal: Arc<Signal>,
    ) -> Result<Box<dyn Watch>, CacheError> {
        check_variant(request.type_url, request.variant)?;
        let epoch = self.inner.epoch.load(Ordering::SeqCst);
        let group_name = self.group_of(request.node);
        let group = self.inner.group(&group_name);
        {
            let mut data = write(&group.data);
            // Rule S3: a custom type is served when the group's snapshot holds it; one the
            // snapshot does not know is refused rather than left waiting forever. (Before the
            // group's first snapshot nothing is known yet: the watch waits like any other.)
            let unknown = request.type_url.builtin().is_none()
                && data
                    .snapshot
                    .as_ref()
                    .is_some_and(|s| !s.types().any(|t| t == request.type_url));
            if unknown {
                drop(data);
                drop(group);
                self.inner.release(&group_name);
                return Err(CacheError::UnknownType { type_url: request.type_url.to_string() });
            }
            data.last_watch = Some(SystemTime::now());
            if data.snapshot.is_none() {
                drop(data);
                self.inner.warn_unserved(&request.node.id, &group_name);
            }
        }
        let registration = self
            .inner
            .watchers
            .register((group_name.clone(), request.type_url.clone()), signal.clone());
        let binding = Arc::new(Binding::new(
            request.node.clone(),
            request.type_url.clone(),
            signal,
            group_name,
            group,
            registration,
        ));
        let id = self.inner.next_binding.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.bindings).insert(id, binding.clone());
        if self.inner.epoch.load(Ordering::SeqCst) != epoch {
            // A regroup ran since the function was asked, and its walk may have missed this
            // watch: ask again (any later regroup sees the watch).
            binding.move_to(self.group_of(request.node));
        }
        Ok(Box::new(SnapshotWatch { id, binding, cache: Arc::downgrade(&self.inner) }))
    }
}

/// Lets tests and benchmarks look at a group's resources without a stream.
impl SnapshotCache {
    /// The resource `name` of `type_url` served to `group`.
    pub fn get(&self, group: &str, type_url: &TypeUrl, name: &str) -> Option<EncodedResource> {
        let state = read(&self.inner.groups).get(group).cloned()?;
        let data = read(&state.data);
        data.tables.get(type_url)?.get(name).cloned()
    }
}
