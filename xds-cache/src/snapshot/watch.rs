//! A stream's watch of a `SnapshotCache`: bound to the node's group, and moved to another group
//! when [`SnapshotCache::regroup`](super::SnapshotCache::regroup) finds that the node now maps
//! elsewhere.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::SystemTime;

use xds_core::View;
use xds_proto::EncodedResource;
use xds_proto::TypeUrl;
use xds_proto::pb::envoy::config::core::v3::Node;

use super::cache::{Group, Inner, read, write};
use crate::cache::{DynView, Watch};
use crate::signal::Signal;
use crate::table::ResourceTable;
use crate::unready::Unready;
use crate::watchers::Registration;

/// One watch (a stream and a type): what the cache needs to move it to another group.
pub(super) struct Binding {
    /// The stream's node, to ask the grouping function again.
    pub(super) node: Node,
    type_url: TypeUrl,
    signal: Arc<Signal>,
    state: Mutex<BindingState>,
}

struct BindingState {
    group_name: String,
    /// `None` once the watch is dropped.
    group: Option<Arc<Group>>,
    registration: Option<Registration<(String, TypeUrl)>>,
    /// The group to move to at the next read, set by `regroup`.
    moved_to: Option<String>,
    /// The revisions the stream sees are the group table's plus `offset`. Every group's tables
    /// count revisions on their own, so a move starts a new range above any revision the stream
    /// has seen (`floor`); `changed_since` a revision below it answers "cannot tell", and the
    /// protocol core compares the whole subscription with the new group once: the client gets
    /// what the new group has and removals of what it lacks.
    offset: u64,
    floor: u64,
    /// Whether `offset` is set for the current group (it is fixed at the first read after a move).
    fixed: bool,
    /// The highest revision the stream was shown.
    high: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section leaves the state consistent: a panic in one cannot break it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Binding {
    pub(super) fn new(
        node: Node,
        type_url: TypeUrl,
        signal: Arc<Signal>,
        group_name: String,
        group: Arc<Group>,
        registration: Registration<(String, TypeUrl)>,
    ) -> Self {
        let state = BindingState {
            group_name,
            group: Some(group),
            registration: Some(registration),
            moved_to: None,
            offset: 0,
            floor: 0,
            fixed: true,
            high: 0,
        };
        Binding { node, type_url, signal, state: Mutex::new(state) }
    }

    /// Records that the node now maps to `group`; the move happens at the stream's next read.
    /// Raises the stream's signal and returns `true` when that is another group than the one it
    /// is bound to (or about to move to).
    pub(super) fn move_to(&self, group: String) -> bool {
        let mut st = lock(&self.state);
        if st.group.is_none() {
            return false;
        }
        if group == st.group_name {
            // Moved away and back before the stream looked: nothing to do.
            st.moved_to = None;
            return false;
        }
        if st.moved_to.as_ref() == Some(&group) {
            return false;
        }
        st.moved_to = Some(group);
        drop(st);
        self.signal.raise();
        true
    }

    /// Binds the watch to `to`: registers the signal under the new group and forgets the old one.
    fn rebind(&self, st: &mut BindingState, cache: &Inner, to: String) {
        let group = cache.group(&to);
        write(&group.data).last_watch = Some(SystemTime::now());
        let registration =
            cache.watchers.register((to.clone(), self.type_url.clone()), self.signal.clone());
        let old_registration = st.registration.replace(registration);
        let old_group = st.group.replace(group);
        let old_name = std::mem::replace(&mut st.group_name, to);
        st.floor = st.high.saturating_add(1);
        st.fixed = false;
        drop(old_registration);
        drop(old_group);
        cache.release(&old_name);
    }
}

/// A watch of one type for one stream.
pub(super) struct SnapshotWatch {
    pub(super) id: u64,
    pub(super) binding: Arc<Binding>,
    pub(super) cache: Weak<Inner>,
}

impl Watch for SnapshotWatch {
    fn read(&self, f: &mut dyn FnMut(&DynView<'_>)) {
        let mut st = lock(&self.binding.state);
        if let Some(to) = st.moved_to.take()
            && let Some(cache) = self.cache.upgrade()
        {
            self.binding.rebind(&mut st, &cache, to);
        }
        let Some(group) = st.group.clone() else { return f(&Unready) };
        let data = read(&group.data);
        let empty;
        let view: &DynView<'_> = if data.snapshot.is_none() {
            &Unready
        } else if let Some(table) = data.tables.get(&self.binding.type_url) {
            table
        } else {
            empty = ResourceTable::default();
            &empty
        };
        if !st.fixed {
            st.offset = st.floor.wrapping_sub(view.revision());
            st.fixed = true;
        }
        let rebased = Rebased { view, offset: st.offset, floor: st.floor };
        st.high = st.high.max(rebased.revision());
        f(&rebased);
    }

    /// A change of the group's table of the type marks its key before a read can see it (under
    /// the group's lock); a move to another group is marked by `moved_to`, and its new
    /// registration starts marked.
    fn take_change(&self) -> bool {
        let st = lock(&self.binding.state);
        let changed = st.registration.as_ref().is_none_or(Registration::take_change);
        changed || st.moved_to.is_some()
    }
}

impl Drop for SnapshotWatch {
    fn drop(&mut self) {
        let Some(cache) = self.cache.upgrade() else { return };
        cache.unbind(self.id);
        let (registration, group, name) = {
            let mut st = lock(&self.binding.state);
            (st.registration.take(), st.group.take(), std::mem::take(&mut st.group_name))
        };
        // The registration goes first, so that `release` finds the group unwatched.
        drop(registration);
        drop(group);
        cache.release(&name);
    }
}

/// A group's view with the stream's revision range laid over it (see `BindingState::offset`).
struct Rebased<'a, 'b> {
    view: &'a DynView<'b>,
    offset: u64,
    floor: u64,
}

impl View for Rebased<'_, '_> {
    type Resource = EncodedResource;

    fn is_ready(&self) -> bool {
        self.view.is_ready()
    }

    fn revision(&self) -> u64 {
        self.view.revision().wrapping_add(self.offset)
    }

    fn version(&self) -> xds_core::Text {
        self.view.version()
    }

    fn get(&self, name: &str) -> Option<EncodedResource> {
        self.view.get(name)
    }

    fn resolve_alias(&self, alias: &str) -> Option<EncodedResource> {
        self.view.resolve_alias(alias)
    }

    fn resource_error(&self, name: &str) -> Option<xds_core::ErrorDetail> {
        self.view.resource_error(name)
    }

    fn for_each(&self, f: &mut dyn FnMut(&EncodedResource)) {
        self.view.for_each(f);
    }

    fn for_each_member(&self, glob: &str, f: &mut dyn FnMut(&EncodedResource)) {
        self.view.for_each_member(glob, f);
    }

    fn resource_set(&self) -> Option<xds_core::ResourceSet<EncodedResource>> {
        self.view.resource_set()
    }

    fn built_resource_set(&self) -> Option<xds_core::ResourceSet<EncodedResource>> {
        self.view.built_resource_set()
    }

    fn changed_since(&self, revision: u64, f: &mut dyn FnMut(&str)) -> bool {
        // Below the floor is a revision of a group the stream was moved away from.
        revision >= self.floor && self.view.changed_since(revision.wrapping_sub(self.offset), f)
    }
}
