//! What the core needs to know about resources: a handle with a name and a version, and a view
//! of the current resources of one type.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A resource handle as the protocol core sees it.
///
/// The core never looks inside a resource: it compares versions and hands the handle back in the
/// responses it computes. Make the handle cheap to clone (an `Arc`), so that building a response
/// copies pointers, not resources. It is `Send`, as a stream's state (and the responses it has
/// computed) moves between the threads of whatever runtime drives it, and `Sync`, as a view's
/// [`ResourceSet`] is shared by streams on every thread.
pub trait Resource: Clone + Send + Sync {
    /// The resource's name.
    fn name(&self) -> &str;
    /// The resource's version: equal versions mean equal content (rules D4, S16).
    fn version(&self) -> &str;

    /// The name as a shared string. The core keys what each client holds by name; a handle that
    /// already owns its name behind an `Arc` (as the caches' do) lets every stream share it
    /// instead of copying it per client.
    fn shared_name(&self) -> std::sync::Arc<str> {
        std::sync::Arc::from(self.name())
    }

    /// How long a client may keep the resource without hearing of it again (`Resource.ttl`).
    /// A sub-stream holding such resources owes the client a heartbeat before that time runs out
    /// (see `poll_heartbeat`).
    fn ttl(&self) -> Option<std::time::Duration> {
        None
    }
}

/// The current resources of one type, as one stream sees them (its node's group, its type).
///
/// A view is a snapshot in time: the core reads it while computing one response and does not keep
/// it. `revision` and `changed_since` let the core find what changed since it last looked without
/// walking every resource (a view that cannot tell simply returns `false` from `changed_since`, and
/// the core compares the whole subscription instead).
pub trait View {
    /// The resource handle.
    type Resource: Resource;

    /// Whether the view has data to serve. A view that is not ready (a node group whose first
    /// snapshot is not set yet) owes nothing: no response is computed from it, so a client is never
    /// told that everything was deleted because the server had not yet loaded its configuration.
    fn is_ready(&self) -> bool {
        true
    }

    /// A number that grows whenever a resource of the view is created, changed or deleted.
    fn revision(&self) -> u64;

    /// The type's version for SotW responses (`version_info`): the same resources give the same
    /// version (rule S16). A [`Text`](crate::Text): every response carries it, and one of up to
    /// 23 bytes (a digest's hex digits) is kept in place rather than allocated per response.
    fn version(&self) -> crate::Text;

    /// The resource with this name, if it exists.
    fn get(&self, name: &str) -> Option<Self::Resource>;

    /// The resource an alias subscription names (rule D9: VHDS `<route configuration>/<host>`),
    /// if one matches. Views of types without aliases keep the default.
    fn resolve_alias(&self, alias: &str) -> Option<Self::Resource> {
        let _ = alias;
        None
    }

    /// Why the resource `name` cannot be served, if a cache or its user said so (rule C4): sent
    /// once in `resource_errors` to clients subscribed to `name` while it does not exist (for a
    /// wildcard subscription, the error of `*`). An error for a resource that exists is not sent:
    /// the resource is. A view that reports changes should report a name whose error changed in
    /// [`changed_since`](Self::changed_since), so that streams look at it again.
    fn resource_error(&self, name: &str) -> Option<crate::error::ErrorDetail> {
        let _ = name;
        None
    }

    /// Calls `f` with every resource, for wildcard subscriptions.
    fn for_each(&self, f: &mut dyn FnMut(&Self::Resource));

    /// Calls `f` with every member of the glob collection `glob` (rule C2): every resource whose
    /// normal-form name [`is_member`](crate::xdstp::is_member) of the normal-form `glob`.
    ///
    /// The core asks when a client subscribes to a glob (and on full comparisons); a change to
    /// one member reaches its subscribers through [`changed_since`](Self::changed_since) and
    /// never calls this. The default scans [`for_each`](Self::for_each): correct, O(resources)
    /// per call. A view keyed in name order should answer with a range from
    /// [`glob_prefix`](crate::xdstp::glob_prefix) (O(log n + members)), as the caches do.
    fn for_each_member(&self, glob: &str, f: &mut dyn FnMut(&Self::Resource)) {
        self.for_each(&mut |r| {
            if crate::xdstp::is_member(r.name(), glob) {
                f(r);
            }
        });
    }

    /// Calls `f` with the name of every resource created, changed or deleted after `revision`,
    /// in any order (a name may be reported that in the end did not change, or twice). Returns
    /// `false`, having called nothing, when the view cannot tell (the revision is too old or from
    /// another source); the core then compares the whole subscription.
    fn changed_since(&self, revision: u64, f: &mut dyn FnMut(&str)) -> bool {
        let _ = (revision, f);
        false
    }

    /// Every resource of the view, as one shared value, if the view can hand one out cheaply.
    ///
    /// What a client holds is, most of the time, exactly what the view holds: a thousand
    /// clients of one view then share one set and each keeps only its exceptions, instead of a
    /// handle per resource per client (20,000 handles per client for 10,000 clusters and their
    /// endpoints). A view should build the set once per revision and hand out clones (a pointer
    /// copy) until its next change. The default, `None`, makes the core keep a handle per
    /// resource per client, which is correct and costs memory.
    fn resource_set(&self) -> Option<ResourceSet<Self::Resource>> {
        None
    }

    /// [`resource_set`](Self::resource_set), but only if the view has it at hand: already
    /// built since its last change, so that handing it out is a pointer copy.
    ///
    /// A client that is up to date needs the set only to rebase its holdings on (see
    /// [`resource_set`](Self::resource_set)); after a change it holds the changed resources as
    /// exceptions until it rebases. When many clients share a view, one builds the set and the
    /// others take it; when each view has its own client (one snapshot per node), building the
    /// set after every change would make each change cost O(resources) per view, so the core
    /// asks with this and builds the set only every so many changes. The default is
    /// [`resource_set`](Self::resource_set): right for a view whose set costs nothing to make.
    fn built_resource_set(&self) -> Option<ResourceSet<Self::Resource>> {
        self.resource_set()
    }
}

/// Every resource of a view at one moment, ordered by name: shared by every client that holds
/// exactly these (see [`View::resource_set`]). Cloning copies a pointer.
#[derive(Debug)]
pub struct ResourceSet<R>(std::sync::Arc<SetInner<R>>);

#[derive(Debug)]
struct SetInner<R> {
    resources: Box<[R]>,
    /// Whether a resource has a TTL: the core indexes those per client, so a set with one is
    /// not shared (TTLs are for the few resources a client must renew).
    any_ttl: bool,
    /// What a transport derives from the whole set, kept with it: see [`ResourceSet::memo`].
    memo: std::sync::OnceLock<Box<dyn std::any::Any + Send + Sync>>,
    /// The last shared subscription found to name exactly the set's resources, with its digest
    /// then ([`ResourceSet::is_named_by`]).
    named_by: Mutex<(Weak<BTreeSet<String>>, u128)>,
    /// Where [`ResourceSet::get_changed`] last found a name by searching. A change to one
    /// resource is looked up in the set of every client that holds it from this base, one after
    /// the other: all but the first find it here with one comparison instead of a search. A
    /// hint only: a wrong or stale one costs that comparison and nothing else.
    hint: Hint,
    /// The comparisons made from this set as a client's base to the view's newest set (a few,
    /// one per subscription), for every other client of the set in the same state (see
    /// [`crate::tracker::StepSlot`]).
    step: crate::tracker::StepSlot<R>,
    /// The sets made from one another by [`ResourceSet::with`] and [`ResourceSet::without`]
    /// share one: see [`ResourceSet::lineage_bases`].
    lineage: Arc<Lineage>,
}

/// How many clients hold a set of one lineage as their base ([`Base`]).
#[derive(Debug, Default)]
struct Lineage {
    bases: AtomicUsize,
}

/// A set held as a client's base: counted in its lineage while held
/// ([`ResourceSet::lineage_bases`]). Reads as the set.
#[derive(Debug)]
pub(crate) struct Base<R>(ResourceSet<R>);

impl<R> Base<R> {
    pub(crate) fn new(set: ResourceSet<R>) -> Self {
        set.0.lineage.bases.fetch_add(1, Ordering::Relaxed);
        Base(set)
    }

    /// Holds `set` instead: within one lineage (the next set of the same view, an update's
    /// move) the count stays as it is, with no write to it.
    pub(crate) fn replace(&mut self, set: ResourceSet<R>) {
        if Arc::ptr_eq(&self.0.0.lineage, &set.0.lineage) {
            self.0 = set;
        } else {
            *self = Base::new(set);
        }
    }
}

impl<R> std::ops::Deref for Base<R> {
    type Target = ResourceSet<R>;
    fn deref(&self) -> &ResourceSet<R> {
        &self.0
    }
}

impl<R> Clone for Base<R> {
    fn clone(&self) -> Self {
        Base::new(self.0.clone())
    }
}

impl<R> Drop for Base<R> {
    fn drop(&mut self) {
        self.0.0.lineage.bases.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A [`SetInner::hint`] on cache lines of its own: the set is read by every worker thread, and
/// a search that moves the hint must not make the other threads fetch the set's fields again.
/// 128 bytes, as x86 fetches lines in pairs (crossbeam's `CachePadded` pads the same): about
/// 200 bytes more per set, and sets are shared by the clients that hold the same resources.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Hint(AtomicUsize);

/// A [`ResourceSet`] held without keeping it: it names the set while the set lives (no other
/// set can take its address while a weak handle keeps the allocation).
pub(crate) struct WeakSet<R>(Weak<SetInner<R>>);

impl<R> WeakSet<R> {
    /// Whether this is a handle to `set`.
    pub(crate) fn is(&self, set: &ResourceSet<R>) -> bool {
        std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(&set.0))
    }

    /// Whether both are handles to one set.
    pub(crate) fn same_as(&self, other: &WeakSet<R>) -> bool {
        Weak::ptr_eq(&self.0, &other.0)
    }
}

impl<R> Clone for ResourceSet<R> {
    fn clone(&self) -> Self {
        ResourceSet(self.0.clone())
    }
}

/// Two sets are equal when they hold equal resources (the same set, most often).
impl<R: PartialEq> PartialEq for ResourceSet<R> {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.0.resources == other.0.resources
    }
}

impl<R: Eq> Eq for ResourceSet<R> {}

impl<R: Resource> ResourceSet<R> {
    /// A set of `resources`, in any order; of two with one name, the later is kept.
    pub fn new(mut resources: Vec<R>) -> Self {
        // A view's resources usually come in name order already, each name once (a table's
        // B-tree): one look at each pair of neighbours says so, and nothing is moved. (Sorted
        // and deduplicated, that input cost two comparisons per name: a node group's sets are
        // built for its one client, 10,000 names per type and group.)
        if !resources.is_sorted_by(|a, b| a.name() < b.name()) {
            // Stable, so "the later" is well defined.
            resources.sort_by(|a, b| a.name().cmp(b.name()));
            resources.reverse();
            resources.dedup_by(|later, earlier| later.name() == earlier.name());
            resources.reverse();
        }
        let any_ttl = resources.iter().any(|r| r.ttl().is_some());
        Self::sorted(resources, any_ttl, Arc::default())
    }

    /// A new set of this one's resources with `r` in place of the resource of its name (or
    /// added, in order): the set after a view's change to one resource, in one copy of the
    /// handles, without the order check of [`new`](Self::new).
    ///
    /// A view whose set many clients hold hands out the next set at once after a change (see
    /// [`holders`](Self::holders)): each client then moves to it rather than recording the
    /// change beside its base.
    #[must_use]
    pub fn with(&self, r: R) -> Self {
        let all = &self.0.resources;
        let (before, replaced, after) = match all.binary_search_by(|h| h.name().cmp(r.name())) {
            Ok(i) => (&all[..i], Some(&all[i]), &all[i + 1..]),
            Err(i) => (&all[..i], None, &all[i..]),
        };
        let ttl_left = replaced.is_some_and(|old| old.ttl().is_some());
        let ttl_came = r.ttl().is_some();
        let mut resources = Vec::with_capacity(before.len() + 1 + after.len());
        resources.extend_from_slice(before);
        resources.push(r);
        resources.extend_from_slice(after);
        let any_ttl = ttl_came || self.any_ttl_after(ttl_left, &resources);
        Self::sorted(resources, any_ttl, self.0.lineage.clone())
    }

    /// A new set of this one's resources without the one named `name` (the same resources if
    /// there is none), as [`with`](Self::with) makes one.
    #[must_use]
    pub fn without(&self, name: &str) -> Self {
        let all = &self.0.resources;
        let Ok(i) = all.binary_search_by(|held| held.name().cmp(name)) else {
            return Self::sorted(all.to_vec(), self.0.any_ttl, self.0.lineage.clone());
        };
        let mut resources = Vec::with_capacity(all.len() - 1);
        resources.extend_from_slice(&all[..i]);
        resources.extend_from_slice(&all[i + 1..]);
        let any_ttl = self.any_ttl_after(all[i].ttl().is_some(), &resources);
        Self::sorted(resources, any_ttl, self.0.lineage.clone())
    }

    /// Whether `resources`, this set's after a change, have a TTL: as this set had, looked for
    /// again only when a resource with one left (a set with one is not shared as a base).
    fn any_ttl_after(&self, ttl_left: bool, resources: &[R]) -> bool {
        self.0.any_ttl && (!ttl_left || resources.iter().any(|r| r.ttl().is_some()))
    }

    /// How many handles to this set exist, the caller's included: a view that keeps its set
    /// learns from it how many clients hold the set as their base (and responses in flight carry
    /// it), so whether making the next set at each change pays (see [`with`](Self::with)).
    pub fn holders(&self) -> usize {
        std::sync::Arc::strong_count(&self.0)
    }

    /// How many clients hold as their base this set or another of its lineage: the sets made
    /// from one another by [`with`](Self::with) and [`without`](Self::without), one per change
    /// of a view that makes its next set at each change.
    ///
    /// What a view learns from [`holders`](Self::holders) is how many clients moved to its
    /// newest set. When changes come faster than its clients are sent them (a burst), none has
    /// moved to the newest when the next change comes, though all of them will: they hold
    /// older sets of the same lineage, and move to the view's newest at their next comparison.
    /// This counts them wherever they are. (Holding a set otherwise, a response in flight that
    /// carries it, is not counted here.)
    pub fn lineage_bases(&self) -> usize {
        self.0.lineage.bases.load(Ordering::Relaxed)
    }

    /// A set of `resources` known to be in name order, each name once, of `lineage`.
    fn sorted(resources: Vec<R>, any_ttl: bool, lineage: Arc<Lineage>) -> Self {
        debug_assert!(resources.is_sorted_by(|a, b| a.name() < b.name()));
        let memo = std::sync::OnceLock::new();
        let named_by = Mutex::new((Weak::new(), 0));
        let hint = Hint::default();
        let step = crate::tracker::StepSlot::default();
        let resources = resources.into();
        let inner = SetInner { resources, any_ttl, memo, named_by, hint, step, lineage };
        ResourceSet(std::sync::Arc::new(inner))
    }

    /// The resource named `name`.
    pub fn get(&self, name: &str) -> Option<&R> {
        let all = &self.0.resources;
        all.binary_search_by(|r| r.name().cmp(name)).ok().map(|i| &all[i])
    }

    /// [`get`](Self::get) for a name that every holder of the set is about to look up (a
    /// change the view reported): the one the last such search found, if that is it, else a
    /// binary search that is remembered. A lookup of this client's alone (a full comparison's
    /// 10,000 names) uses `get`: it would move the hint at every name, a write to memory that
    /// every thread reads.
    pub fn get_changed(&self, name: &str) -> Option<&R> {
        let all = &self.0.resources;
        let hint = self.0.hint.0.load(Ordering::Relaxed);
        if let Some(r) = all.get(hint).filter(|r| r.name() == name) {
            return Some(r);
        }
        let i = all.binary_search_by(|r| r.name().cmp(name)).ok()?;
        self.0.hint.0.store(i, Ordering::Relaxed);
        Some(&all[i])
    }

    /// The members of the glob collection `glob` (rule C2), in name order: a binary search for
    /// the glob's prefix and a walk over the names that share it.
    pub fn members<'a>(&'a self, glob: &'a str) -> impl Iterator<Item = &'a R> + 'a {
        let all = &self.0.resources;
        let (prefix, start) = match crate::xdstp::glob_prefix(glob) {
            Some((prefix, _)) => (prefix, all.partition_point(|r| r.name() < prefix)),
            None => ("", all.len()),
        };
        all[start..]
            .iter()
            .take_while(move |r| r.name().starts_with(prefix))
            .filter(move |r| crate::xdstp::is_member(r.name(), glob))
    }

    /// The resources, in name order.
    pub fn iter(&self) -> std::slice::Iter<'_, R> {
        self.0.resources.iter()
    }

    /// How many resources.
    pub fn len(&self) -> usize {
        self.0.resources.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.resources.is_empty()
    }

    /// Whether both are the same shared set.
    pub fn ptr_eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }

    /// The comparison kept with this set for the clients that hold it as their base.
    pub(crate) fn step(&self) -> &crate::tracker::StepSlot<R> {
        &self.0.step
    }

    /// A handle to this set that does not keep it.
    pub(crate) fn downgrade(&self) -> WeakSet<R> {
        WeakSet(Arc::downgrade(&self.0))
    }

    /// Whether a resource of the set has a TTL. Such a set is no client's base (the core keeps
    /// the resources with a TTL per client, to owe their heartbeats), so the clients of its
    /// lineage ([`lineage_bases`](Self::lineage_bases)) never move to it.
    pub fn any_ttl(&self) -> bool {
        self.0.any_ttl
    }

    /// Whether `names` (a subscription's set, shared by every subscription of the same names,
    /// whose digest is `digest`) are exactly the names of the set's resources, as the tracker
    /// found before: a thousand proxies subscribing to every cluster's endpoints are compared
    /// with the set once, not 10,000 pairs of names each.
    ///
    /// The same allocation and digest: a set changed in place (a subscription that held it
    /// alone) has another digest. The `Weak` keeps the allocation, so no other set can take its
    /// address while it is remembered.
    pub(crate) fn is_named_by(&self, names: &Arc<BTreeSet<String>>, digest: u128) -> bool {
        let last = self.0.named_by.lock().unwrap_or_else(PoisonError::into_inner);
        std::ptr::eq(last.0.as_ptr(), Arc::as_ptr(names))
            && last.1 == digest
            && names.len() == self.len()
    }

    /// Remembers that `names`, of digest `digest`, are exactly the names of the set's resources.
    pub(crate) fn named_by(&self, names: &Arc<BTreeSet<String>>, digest: u128) {
        let mut last = self.0.named_by.lock().unwrap_or_else(PoisonError::into_inner);
        *last = (Arc::downgrade(names), digest);
    }

    /// A value of type `T` kept with the set, made by `T::default()` the first time it is asked
    /// for, and dropped with the set; `None` when the set already keeps a value of another type.
    ///
    /// A response may carry a whole set (`shared` in [`SotwResponse`](crate::SotwResponse) and
    /// [`DeltaResponse`](crate::DeltaResponse)): in a reconnection storm every joining client of
    /// a view gets the same set, and at an update every client that takes one step (clients
    /// of one shared set and subscription) the same set of what changed. A transport keeps here what it derives from the set for all of
    /// them (the server: its encoding, built once per set instead of once per client). The core
    /// neither reads nor writes it.
    pub fn memo<T: std::any::Any + Send + Sync + Default>(&self) -> Option<&T> {
        self.0.memo.get_or_init(|| Box::new(T::default())).downcast_ref()
    }
}

/// How the protocol treats a resource type: the columns of the resource-type table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TypeTraits {
    /// Clients may subscribe to every resource of the type (rules S10, D8): Listener, Cluster.
    pub wildcard_capable: bool,
    /// SotW responses carry every subscribed resource (rule S11): Listener, Cluster.
    pub full_state: bool,
    /// Clients may subscribe by alias (rule D9): VirtualHost.
    pub aliases: bool,
}

/// A resource of a fixed name and version, for the crate's unit tests.
#[cfg(test)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TestRes(pub(crate) &'static str, pub(crate) &'static str);

#[cfg(test)]
impl Resource for TestRes {
    fn name(&self) -> &str {
        self.0
    }
    fn version(&self) -> &str {
        self.1
    }
}

#[cfg(test)]
mod tests {
    use super::TestRes as Res;
    use super::*;

    fn contents(set: &ResourceSet<Res>) -> Vec<(&str, &str)> {
        set.iter().map(|r| (r.0, r.1)).collect()
    }

    /// The set after a change to one resource is the set a view would build of its resources
    /// then: the resource replaced in place, or added in order, or taken away; the set it came
    /// from is unchanged, and each copy counts as a holder while it lives.
    #[test]
    fn the_next_set_is_this_one_with_one_resource_replaced_added_or_taken_away() {
        let set = ResourceSet::new(vec![Res("b", "1"), Res("d", "1")]);
        assert_eq!(contents(&set.with(Res("b", "2"))), [("b", "2"), ("d", "1")]);
        assert_eq!(contents(&set.with(Res("a", "1"))), [("a", "1"), ("b", "1"), ("d", "1")]);
        assert_eq!(contents(&set.with(Res("c", "1"))), [("b", "1"), ("c", "1"), ("d", "1")]);
        assert_eq!(contents(&set.with(Res("e", "1"))), [("b", "1"), ("d", "1"), ("e", "1")]);
        assert_eq!(contents(&set.without("b")), [("d", "1")]);
        assert_eq!(contents(&set.without("c")), [("b", "1"), ("d", "1")]);
        assert_eq!(contents(&set), [("b", "1"), ("d", "1")], "the set it came from is as it was");
        let next = set.with(Res("b", "2"));
        assert!(!next.ptr_eq(&set) && next.get("b") == Some(&Res("b", "2")));
        assert_eq!(set.holders(), 1);
        let held = [set.clone(), set.clone()];
        assert_eq!(set.holders(), 3);
        drop(held);
        assert_eq!(set.holders(), 1);
    }

    /// A lineage counts the bases held of its sets: a base taken, copied, dropped, or moved to
    /// another set of the lineage (no change) or of another (counted there instead).
    #[test]
    fn a_lineage_counts_the_bases_held_of_any_of_its_sets() {
        let first = ResourceSet::new(vec![Res("a", "1"), Res("b", "1")]);
        let next = first.with(Res("a", "2")).without("b");
        let other = ResourceSet::new(vec![Res("a", "2")]);
        let mut base = Base::new(first.clone());
        let copy = base.clone();
        assert_eq!((first.lineage_bases(), next.lineage_bases()), (2, 2), "one lineage");
        base.replace(next.clone());
        assert!(base.ptr_eq(&next) && next.lineage_bases() == 2, "moved within the lineage");
        drop(copy);
        assert_eq!(first.lineage_bases(), 1);
        base.replace(other.clone());
        assert_eq!((next.lineage_bases(), other.lineage_bases()), (0, 1), "moved to another");
        drop(base);
        assert_eq!(other.lineage_bases(), 0);
        assert_eq!(first.holders(), 1, "a base is a handle, gone with it");
    }

    /// A resource with a TTL or without one, for what a set knows of TTLs.
    #[derive(Clone, Debug, PartialEq, Eq)]
    struct Timed(&'static str, bool);

    impl Resource for Timed {
        fn name(&self) -> &str {
            self.0
        }
        fn version(&self) -> &str {
            "1"
        }
        fn ttl(&self) -> Option<std::time::Duration> {
            self.1.then_some(std::time::Duration::from_secs(30))
        }
    }

    /// The next set knows whether it has a resource with a TTL (such a set is not shared as a
    /// base) as a set built of its resources would: a TTL that comes is seen, and one that
    /// leaves is looked for among the rest.
    #[test]
    fn the_next_set_has_a_ttl_exactly_when_one_of_its_resources_has() {
        let fresh = |set: &ResourceSet<Timed>| ResourceSet::new(set.iter().cloned().collect());
        let plain = ResourceSet::new(vec![Timed("a", false), Timed("c", false)]);
        let one = ResourceSet::new(vec![Timed("a", false), Timed("b", true), Timed("c", false)]);
        let two = ResourceSet::new(vec![Timed("a", true), Timed("b", true)]);
        let next = [
            (plain.with(Timed("b", true)), true),
            (plain.with(Timed("a", false)), false),
            (plain.without("a"), false),
            (one.with(Timed("b", false)), false),
            (one.without("b"), false),
            (one.with(Timed("a", false)), true),
            (one.without("c"), true),
            (one.without("z"), true),
            (two.with(Timed("a", false)), true),
            (two.without("b"), true),
            (two.without("a").without("b"), false),
        ];
        for (i, (set, ttl)) in next.iter().enumerate() {
            assert_eq!(set.any_ttl(), *ttl, "case {i}");
            assert_eq!(set.any_ttl(), fresh(set).any_ttl(), "case {i}, as a set built of it");
        }
    }

    #[test]
    fn a_set_is_in_name_order_with_the_later_of_two_resources_of_one_name() {
        // In order, each name once: taken as it is.
        let set = ResourceSet::new(vec![Res("a", "1"), Res("b", "1"), Res("c", "1")]);
        assert_eq!(contents(&set), [("a", "1"), ("b", "1"), ("c", "1")]);
        // In order but for a repeated name: the later one stays, whether neighbours or not.
        let set =
            ResourceSet::new(vec![Res("a", "1"), Res("b", "1"), Res("b", "2"), Res("c", "1")]);
        assert_eq!(contents(&set), [("a", "1"), ("b", "2"), ("c", "1")]);
        let set =
            ResourceSet::new(vec![Res("c", "1"), Res("a", "1"), Res("c", "2"), Res("b", "1")]);
        assert_eq!(contents(&set), [("a", "1"), ("b", "1"), ("c", "2")]);
        assert_eq!(set.get("c"), Some(&Res("c", "2")));
        assert!(set.get("d").is_none());
        assert!(ResourceSet::<Res>::new(Vec::new()).is_empty());
    }

    /// A found name is remembered, so that the next lookup of it compares one name; a hint is
    /// never taken for another name, whatever it points at.
    #[test]
    fn a_lookup_finds_the_last_found_name_first_and_nothing_else_there() {
        let names = ["a", "b", "c", "d", "e"];
        let set = ResourceSet::new(names.iter().map(|&n| Res(n, "1")).collect());
        let hint = || set.0.hint.0.load(Ordering::Relaxed);
        assert_eq!(set.get_changed("d"), Some(&Res("d", "1")));
        assert_eq!(hint(), 3);
        assert_eq!(set.get_changed("d"), Some(&Res("d", "1")), "found at the hint");
        assert_eq!(set.get("b"), Some(&Res("b", "1")));
        assert_eq!(hint(), 3, "a plain lookup moves no hint");
        for missing in ["", "0", "cc", "d ", "f", "z"] {
            assert!(set.get_changed(missing).is_none(), "{missing:?}");
            assert_eq!(hint(), 3, "a miss moves no hint");
        }
        for &name in names.iter().rev().chain(&names).chain(&["c", "c", "a"]) {
            assert_eq!(set.get_changed(name), Some(&Res(name, "1")));
            assert_eq!(names[hint()], name);
        }
        let empty = ResourceSet::<Res>::new(Vec::new());
        assert!(empty.get_changed("a").is_none() && empty.get_changed("").is_none());
    }
}
