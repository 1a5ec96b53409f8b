//! The resources of one type (for one node group), with revisions: what a stream's view reads.
//! Public as [`ResourceTable`], the building block of a custom cache.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use xds_core::{ErrorDetail, ResourceSet, View};
use xds_proto::EncodedResource;

use crate::version::TypeVersion;
use crate::vhds;

/// Deleted names remembered for `changed_since`, at least this many; beyond that (and beyond the
/// table's size) the oldest are forgotten, and a stream that is that far behind compares its whole
/// subscription instead.
const MIN_TOMBSTONES: usize = 1024;

/// The normal form of a name (rule C1): the key resources are kept under. A name that does not
/// parse as `xdstp://` is kept as given, as it cannot name a resource that was created.
fn normal(name: &str) -> std::borrow::Cow<'_, str> {
    xds_proto::xdstp::normalize(name).unwrap_or(std::borrow::Cow::Borrowed(name))
}

/// Errors attached to names, with the revision that set each (rule C4).
type Errors = BTreeMap<Arc<str>, (ErrorDetail, u64)>;

#[derive(Clone, Debug)]
struct Entry {
    resource: EncodedResource,
    revision: u64,
    /// VHDS: the virtual host's domains, for alias lookups (rule D10).
    domains: Option<Box<[String]>>,
}

/// The resources of one type, by name, with a revision per change: the [`View`] every built-in
/// cache lends its streams, and the building block of a custom one (see [`Tables`](crate::Tables) to keep one
/// per key, with the streams that watch it).
///
/// It keeps what the protocol core needs to send little: the revision that grows with each
/// change, the content-hash type version (rule S16), the names changed since any recent revision
/// with deletions ([`View::changed_since`], so a change costs each stream O(changed), not a
/// comparison of everything it holds), errors attached to names (rule C4) and one shared
/// [`ResourceSet`] per revision (so clients holding the same resources share their state).
///
/// ```
/// use xds_cache::ResourceTable;
/// use xds_core::View;
/// use xds_proto::EncodedResource;
/// use xds_proto::pb::envoy::config::cluster::v3::Cluster;
///
/// let mut table = ResourceTable::new();
/// let web = EncodedResource::new(&Cluster { name: "web".into(), ..Default::default() })?;
/// assert!(table.upsert(web.clone()));
/// assert!(!table.upsert(web), "the same content is not a change");
/// let seen = table.revision();
/// table.delete("web");
/// let mut changed = Vec::new();
/// assert!(table.changed_since(seen, &mut |name| changed.push(name.to_owned())));
/// assert_eq!(changed, ["web"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Every create, update and delete takes the next revision; `changes` indexes the latest
/// revision of each name (deletions included), so "what changed since revision r" costs
/// O(changed), not O(resources). Each operation is O(log n) in the number of resources, deletions
/// included: the oldest deletion to forget is the first of `graves`, never searched for, so
/// removing a group of n resources costs O(n log n).
#[derive(Clone, Debug, Default)]
pub struct ResourceTable {
    /// Names are the resources' own shared strings: indexing a resource copies no name.
    entries: BTreeMap<Arc<str>, Entry>,
    /// The resource the latest [`upsert`](Self::upsert) put in `entries`, while it is there. A
    /// change is read by every stream that holds the resource, one after the other: each finds
    /// it here with one comparison instead of a search of `entries`.
    latest: Option<EncodedResource>,
    /// Latest revision of each name -> the name (live or deleted).
    changes: BTreeMap<u64, Arc<str>>,
    /// Deleted names -> the revision of their deletion.
    tombstones: BTreeMap<Arc<str>, u64>,
    /// The revisions of the deletions in `tombstones`, oldest first (their names are in `changes`).
    graves: BTreeSet<u64>,
    revision: u64,
    /// `changed_since(r)` is exact for every `r >= horizon`.
    horizon: u64,
    /// The order-independent type version of every (name, version) (rule S16).
    version: Version,
    /// Errors attached to names (rule C4), with the revision that set them: few, so
    /// `changed_since` walks them all. Boxed: most tables never have one, and a table is kept
    /// per type and node group.
    errors: Option<Box<Errors>>,
    /// The table's resources as one shared set, built at most once per revision for every
    /// stream that reads this table (see [`View::resource_set`]).
    set: SetCache,
    /// Index entries `collect_tombstones` has looked at: the work a deletion costs, for tests.
    #[cfg(test)]
    scanned: usize,
    /// Index entries `for_each_member` has looked at, for tests.
    #[cfg(test)]
    member_steps: Steps,
}

/// A counter of steps for tests, readable through `&self`.
#[cfg(test)]
#[derive(Debug, Default)]
struct Steps(std::sync::atomic::AtomicUsize);

#[cfg(test)]
impl Clone for Steps {
    fn clone(&self) -> Self {
        Steps::default()
    }
}

#[cfg(test)]
impl Steps {
    fn add(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn get(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The shared set of a table's resources: made at a change when many clients hold the last one
/// ([`SetCache::next`]), else built on first use after it; readers after the first take it
/// without a lock.
#[derive(Default)]
struct SetCache(std::sync::OnceLock<ResourceSet<EncodedResource>>);

impl SetCache {
    /// The cache after a change to one resource: the next set made now, by `change` from this
    /// one, if this one is held by enough clients to pay for it; else none, built on first use.
    ///
    /// A client holds the set of the last revision it compared as its base, and a change it is
    /// sent beside it; with the next set at hand when it compares the change, it moves to that
    /// set instead (`xds_core`'s tracker): no record of the change, no rebase every so many
    /// changes, no exception kept. Making the set copies one handle per resource (about ten
    /// instructions each); moving a client to it saves about a thousand per client and change.
    /// So the set is made when it has more holders than one per 64 resources: a set of 10,000
    /// held by more than 156 clients; a node's own set of one client only while it is small
    /// (its client and a response in flight are two holders: a set of fewer than 128), as
    /// elsewhere each change would cost the whole set for one client, which is why a client
    /// rebases only every so many changes. Holders are the handles to this set (the clients'
    /// bases and the responses not yet sent that carry it) or, if more, the clients whose base
    /// is any set of its lineage ([`ResourceSet::lineage_bases`]): in a burst of changes no
    /// client has moved to the newest set when the next change comes, but every client of an
    /// older set made from it will, and the next set is made for them.
    fn next(
        &self,
        change: impl FnOnce(&ResourceSet<EncodedResource>) -> ResourceSet<EncodedResource>,
    ) -> Self {
        let widely_held = |set: &ResourceSet<EncodedResource>| {
            // The cache's own handle is one of the handles. A set with a TTL is no client's
            // base (the core keeps those per client): the clients of its lineage stay where
            // they are, and count for nothing here.
            let lineage = if set.any_ttl() { 0 } else { set.lineage_bases() };
            let clients = set.holders().saturating_sub(1).max(lineage);
            clients >= 2 && clients > set.len() / 64
        };
        match self.0.get().filter(|set| widely_held(set)) {
            Some(set) => SetCache(std::sync::OnceLock::from(change(set))),
            None => SetCache::default(),
        }
    }
}

impl Clone for SetCache {
    /// A copy of a table builds its own set when asked.
    fn clone(&self) -> Self {
        SetCache::default()
    }
}

impl std::fmt::Debug for SetCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SetCache")
    }
}

/// A table's type version, and its text as the first read after a change made it: every
/// client's response names the version, and a thousand clients of one table wrote the same 16
/// digits a thousand times per change.
#[derive(Clone, Debug, Default)]
struct Version {
    hash: TypeVersion,
    text: OnceLock<xds_core::Text>,
}

impl Version {
    fn insert(&mut self, name: &str, version: &str) {
        self.hash.insert(name, version);
        self.text = OnceLock::new();
    }

    fn remove(&mut self, name: &str, version: &str) {
        self.hash.remove(name, version);
        self.text = OnceLock::new();
    }

    /// The version's text, made by the first read since the last change.
    fn text(&self) -> xds_core::Text {
        self.text.get_or_init(|| self.hash.text()).clone()
    }
}

impl ResourceTable {
    /// An empty table, ready to serve (streams reading it are told there is nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table whose revisions start after `revision`, and which cannot tell changes
    /// since any revision up to it: it replaces a table whose streams read up to `revision`,
    /// and they compare in full once instead of being told only this table's changes.
    pub(crate) fn after(revision: u64) -> Self {
        ResourceTable { revision, horizon: revision + 1, ..Self::default() }
    }

    /// Creates or replaces a resource. Returns `false`, changing nothing, when the same version
    /// is already there.
    pub fn upsert(&mut self, resource: EncodedResource) -> bool {
        let name = resource.shared_name();
        if let Some(old) = self.entries.get(&name) {
            if old.resource.version() == resource.version() && old.resource.ttl() == resource.ttl()
            {
                return false;
            }
            let (old_revision, old_version) = (old.revision, old.resource.version().to_owned());
            self.changes.remove(&old_revision);
            self.version.remove(&name, &old_version);
        } else if let Some(deleted) = self.tombstones.remove(&name) {
            self.changes.remove(&deleted);
            self.graves.remove(&deleted);
        }
        self.revision += 1;
        self.version.insert(&name, resource.version());
        self.changes.insert(self.revision, name.clone());
        let domains = vhds::domains(&resource);
        self.latest = Some(resource.clone());
        self.set = self.set.next(|set| set.with(resource.clone()));
        self.entries.insert(name, Entry { resource, revision: self.revision, domains });
        true
    }

    /// Deletes a resource (by the name it was created with, or any spelling of that `xdstp://`
    /// name, rule C1). Returns `false` when there was none.
    pub fn delete(&mut self, name: &str) -> bool {
        self.delete_normal(&normal(name))
    }

    /// [`delete`](Self::delete) of a name already in normal form.
    pub(crate) fn delete_normal(&mut self, name: &str) -> bool {
        let Some((name, old)) = self.entries.remove_entry(name) else { return false };
        self.latest = None;
        self.set = self.set.next(|set| set.without(&name));
        self.changes.remove(&old.revision);
        self.version.remove(&name, old.resource.version());
        self.revision += 1;
        self.changes.insert(self.revision, name.clone());
        self.tombstones.insert(name, self.revision);
        self.graves.insert(self.revision);
        self.collect_tombstones();
        true
    }

    /// Makes the table hold exactly `resources` (the last of a name wins): unchanged ones keep
    /// their revision, and no stream hears of them. Returns the number of names created, changed
    /// or deleted.
    pub fn set_all(&mut self, resources: impl IntoIterator<Item = EncodedResource>) -> usize {
        let next: BTreeMap<String, EncodedResource> =
            resources.into_iter().map(|r| (r.name().to_owned(), r)).collect();
        self.replace_all(&next)
    }

    /// [`set_all`](Self::set_all) of a map by name.
    pub(crate) fn replace_all(&mut self, resources: &impl ByName) -> usize {
        let gone: Vec<Arc<str>> =
            self.entries.keys().filter(|n| resources.named(n).is_none()).cloned().collect();
        let mut changed = 0;
        for name in gone {
            changed += usize::from(self.delete_normal(&name));
        }
        for resource in resources.all() {
            let same =
                self.entries.get(resource.name()).is_some_and(|e| e.resource.ptr_eq(resource));
            if !same {
                changed += usize::from(self.upsert(resource.clone()));
            }
        }
        changed
    }

    /// Makes the table hold `resources`, looking only at `names`: the caller knows that every
    /// other name is unchanged (the snapshot was derived from the one this table holds). Returns
    /// the number of names created, changed or deleted.
    pub(crate) fn apply(&mut self, resources: &impl ByName, names: &BTreeSet<String>) -> usize {
        let mut changed = 0;
        for name in names {
            match resources.named(name) {
                Some(resource) => {
                    let same = self
                        .entries
                        .get(name.as_str())
                        .is_some_and(|e| e.resource.ptr_eq(resource));
                    if !same {
                        changed += usize::from(self.upsert(resource.clone()));
                    }
                }
                None => changed += usize::from(self.delete_normal(name)),
            }
        }
        changed
    }

    /// Attaches an error to `name` (`None` clears it): sent to clients subscribed to `name`
    /// while no resource of that name exists (rule C4). The name is normalized like resource
    /// names (rule C1); `*` stands for a wildcard subscription. Returns whether anything changed.
    pub fn set_error(&mut self, name: &str, error: Option<ErrorDetail>) -> bool {
        let name: Arc<str> = normal(name).as_ref().into();
        match error {
            Some(error) => {
                let errors = self.errors.get_or_insert_default();
                if errors.get(&name).is_some_and(|(e, _)| *e == error) {
                    return false;
                }
                self.revision += 1;
                errors.insert(name, (error, self.revision));
                true
            }
            // A cleared error needs no telling: the client keeps it until the resource arrives.
            None => self.errors.as_mut().is_some_and(|errors| errors.remove(&name).is_some()),
        }
    }

    /// The resource with this name (any spelling of an `xdstp://` name, rule C1).
    pub fn get(&self, name: &str) -> Option<&EncodedResource> {
        self.entries.get(&*normal(name)).map(|e| &e.resource)
    }

    /// Whether `resource` is the one `name` (in any spelling, rule C1) names.
    pub(crate) fn is_named(&self, resource: &EncodedResource, name: &str) -> bool {
        resource.name() == normal(name)
    }

    /// How many names have an error attached.
    pub(crate) fn error_count(&self) -> usize {
        self.errors.as_ref().map_or(0, |errors| errors.len())
    }

    /// The number of resources.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds no resource.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A number that grows with every change (the same as [`View::revision`]).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Every resource, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &EncodedResource> {
        self.entries.values().map(|e| &e.resource)
    }

    /// Forgets the oldest deletions once there are many: `changed_since` then answers "cannot
    /// tell" for revisions before them, and the streams concerned compare in full once.
    ///
    /// O(log n) per deletion forgotten: the oldest is the first of `graves`. (Searching `changes`
    /// for it instead walked every live resource older than it, on every delete: removing a
    /// group of 40,000 resources took 15 s.)
    fn collect_tombstones(&mut self) {
        let limit = MIN_TOMBSTONES.max(self.entries.len());
        while self.tombstones.len() > limit {
            let Some(revision) = self.graves.pop_first() else { break };
            #[cfg(test)]
            {
                self.scanned += 1;
            }
            if let Some(name) = self.changes.remove(&revision) {
                self.tombstones.remove(&name);
            }
            self.horizon = revision;
        }
    }
}

impl View for ResourceTable {
    type Resource = EncodedResource;

    fn revision(&self) -> u64 {
        self.revision
    }

    fn version(&self) -> xds_core::Text {
        self.version.text()
    }

    fn get(&self, name: &str) -> Option<EncodedResource> {
        if let Some(latest) = self.latest.as_ref().filter(|r| r.name() == name) {
            return Some(latest.clone());
        }
        self.entries.get(name).map(|e| e.resource.clone())
    }

    fn resolve_alias(&self, alias: &str) -> Option<EncodedResource> {
        let (route_config, host) = vhds::split_alias(alias)?;
        let prefix = format!("{route_config}/");
        let candidates = self
            .entries
            .range::<str, _>((
                std::ops::Bound::Included(prefix.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(name, _)| name.starts_with(&prefix))
            .filter_map(|(_, e)| e.domains.as_deref().map(|d| (&e.resource, d)));
        vhds::best_match(host, candidates).cloned()
    }

    fn resource_error(&self, name: &str) -> Option<ErrorDetail> {
        self.errors.as_ref()?.get(name).map(|(e, _)| e.clone())
    }

    /// Rule C2: a range over the names that start with the glob's prefix (the table is ordered
    /// by normal-form name), keeping those whose leaf is one segment and whose context
    /// parameters are exactly the glob's: O(log n + names under the prefix), never a scan.
    fn for_each_member(&self, glob: &str, f: &mut dyn FnMut(&EncodedResource)) {
        let under = xds_core::xdstp::under_prefix(&self.entries, glob);
        #[cfg(test)]
        let under = under.inspect(|_| self.member_steps.add());
        for (name, entry) in under {
            if xds_core::xdstp::is_member(name, glob) {
                f(&entry.resource);
            }
        }
    }

    fn for_each(&self, f: &mut dyn FnMut(&EncodedResource)) {
        for entry in self.entries.values() {
            f(&entry.resource);
        }
    }

    /// Made at the change when many clients held the last set (see `SetCache::next`), else built
    /// by the first stream that asks after it (O(n) pointer copies, in name order already), then
    /// shared by every stream of every client of this table until the next one.
    fn resource_set(&self) -> Option<ResourceSet<EncodedResource>> {
        let set = self.set.0.get_or_init(|| {
            ResourceSet::new(self.entries.values().map(|e| e.resource.clone()).collect())
        });
        Some(set.clone())
    }

    fn built_resource_set(&self) -> Option<ResourceSet<EncodedResource>> {
        self.set.0.get().cloned()
    }

    fn changed_since(&self, revision: u64, f: &mut dyn FnMut(&str)) -> bool {
        if revision < self.horizon || revision > self.revision {
            return false;
        }
        if revision == self.revision {
            // Nothing is newer (errors take revisions too): no range to look up, the answer of
            // most comparisons, as a stream compares every type it has at each wake.
            return true;
        }
        // Newest first, from the end of the index: an update's comparison asks for the last
        // change or the last few, which a range found by a search from the root of the index
        // (10,000 names: about 490 instructions per client and update).
        let newer = self.changes.iter().rev();
        for name in newer.map_while(|(r, name)| (*r > revision).then_some(name)) {
            f(name);
        }
        let errors = self.errors.iter().flat_map(|errors| errors.iter());
        for (name, _) in errors.filter(|(_, (_, r))| *r > revision) {
            f(name);
        }
        true
    }
}

/// Resources by name, as a table takes them whole: a snapshot's map of one type, or the map
/// [`ResourceTable::set_all`] collects.
pub(crate) trait ByName {
    /// The resource named `name`.
    fn named(&self, name: &str) -> Option<&EncodedResource>;
    /// Every resource.
    fn all(&self) -> impl Iterator<Item = &EncodedResource>;
}

impl ByName for BTreeMap<String, EncodedResource> {
    fn named(&self, name: &str) -> Option<&EncodedResource> {
        self.get(name)
    }
    fn all(&self) -> impl Iterator<Item = &EncodedResource> {
        self.values()
    }
}

impl ByName for crate::snapshot::Resources {
    fn named(&self, name: &str) -> Option<&EncodedResource> {
        self.get(name)
    }
    fn all(&self) -> impl Iterator<Item = &EncodedResource> {
        self.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xds_proto::pb::envoy::config::cluster::v3::Cluster;

    fn cluster(name: &str, stat: &str) -> EncodedResource {
        EncodedResource::new(&Cluster {
            name: name.into(),
            alt_stat_name: stat.into(),
            ..Default::default()
        })
        .unwrap()
    }

    fn changed(t: &ResourceTable, since: u64) -> Option<Vec<String>> {
        let mut v = Vec::new();
        // Reported newest first; compared as a set.
        let told = t.changed_since(since, &mut |n| v.push(n.to_owned()));
        v.sort();
        told.then_some(v)
    }

    /// A change to a table whose set more clients hold than one per 64 resources makes the
    /// next set at once (each of those clients moves to it rather than recording the change);
    /// one held by fewer is built when first asked for, as before, and a set that nothing holds
    /// (here no handle, and no client's base of its lineage) is not followed.
    #[test]
    fn a_widely_held_set_is_followed_by_the_next_at_each_change() {
        let mut t = ResourceTable::default();
        for i in 0..256 {
            t.upsert(cluster(&format!("c{i:03}"), "1"));
        }
        let first = t.resource_set().unwrap();
        let holders: Vec<_> = (0..4).map(|_| first.clone()).collect();
        t.upsert(cluster("c007", "2"));
        let next = t.built_resource_set().expect("made at the change");
        let fresh = |t: &ResourceTable| {
            ResourceSet::new(t.entries.values().map(|e| e.resource.clone()).collect())
        };
        assert!(!next.ptr_eq(&first));
        assert_eq!(next, fresh(&t), "the set the table would build");
        let seven = next.get("c007").map(|r| r.decode::<Cluster>().unwrap().alt_stat_name);
        assert_eq!(seven.as_deref(), Some("2"));
        assert_eq!(next.len(), 256);
        // No client holds `next` yet: the change after it makes none.
        t.upsert(cluster("c008", "2"));
        assert!(t.built_resource_set().is_none(), "a set no client moved to is not followed");
        let built = t.resource_set().unwrap();
        assert_eq!(built, fresh(&t));
        let moved: Vec<_> = (0..4).map(|_| built.clone()).collect();
        t.delete("c009");
        let after_delete = t.built_resource_set().expect("made at the deletion");
        assert!(after_delete.get("c009").is_none() && after_delete.len() == 255);
        assert_eq!(after_delete, fresh(&t));
        // Three holders (`after_delete` and two more) of 255 resources: not more than one per 64.
        let few: Vec<_> = (0..2).map(|_| after_delete.clone()).collect();
        t.upsert(cluster("c010", "2"));
        assert!(
            t.built_resource_set().is_none(),
            "three holders of 255 resources: built when asked"
        );
        drop((holders, moved, few));
    }

    /// Clients whose base is a set of the table's lineage count for the next set wherever they
    /// are: in a burst of changes none has moved to the newest set when the next change comes,
    /// yet the table goes on making sets, and each client then moves to the newest with every
    /// change it missed, recording none. A set with a TTL (no client's base) is followed by
    /// none, and once too few clients are left, the table stops.
    #[test]
    fn a_burst_goes_on_making_sets_for_the_clients_of_older_ones() {
        use xds_core::{DeltaRequest, DeltaSubStream, Nonces, Response as _, TypeTraits};
        let mut t = ResourceTable::default();
        for i in 0..256 {
            t.upsert(cluster(&format!("c{i:03}"), "1"));
        }
        let traits = TypeTraits { wildcard_capable: true, full_state: true, aliases: false };
        let mut nonces = Nonces::new();
        let ack =
            |s: &mut DeltaSubStream<EncodedResource>, nonces: &mut Nonces, t: &ResourceTable| {
                let r = s.poll_response(t, nonces)?;
                let _ = s.handle_request(DeltaRequest {
                    response_nonce: r.nonce().clone(),
                    ..Default::default()
                });
                Some(r.len())
            };
        let mut clients: Vec<DeltaSubStream<EncodedResource>> = (0..6)
            .map(|_| {
                let mut s = DeltaSubStream::new(traits);
                let _ = s.handle_request(DeltaRequest {
                    subscribe: vec!["*".into()],
                    ..Default::default()
                });
                assert_eq!(ack(&mut s, &mut nonces, &t), Some(256));
                s
            })
            .collect();
        let first = t.built_resource_set().expect("built for the joining clients");
        assert_eq!(first.lineage_bases(), 6);
        for i in 0..5 {
            t.upsert(cluster(&format!("c{i:03}"), "2"));
            let next = t.built_resource_set().expect("made: six clients of the lineage");
            assert_eq!(next.lineage_bases(), 6, "none moved yet");
        }
        for s in &mut clients {
            assert_eq!(ack(s, &mut nonces, &t), Some(5), "every change it missed, at once");
            assert_eq!(s.held_exceptions(), 0, "held through the newest set");
        }
        // The table's handle, the six bases and the handle asked for here.
        assert_eq!(t.built_resource_set().expect("the newest").holders(), 8);
        // A resource with a TTL: the set made at that change has one, and no client moves to
        // a set with one, so the next change makes none for them.
        let timed = cluster("c011", "2").with_ttl(std::time::Duration::from_secs(30));
        t.upsert(timed);
        assert!(t.built_resource_set().expect("made from the newest").any_ttl());
        t.upsert(cluster("c012", "2"));
        assert!(t.built_resource_set().is_none(), "a set with a TTL is followed by none");
        t.delete("c011");
        let built = t.resource_set().expect("built when asked");
        assert!(!built.any_ttl() && built.lineage_bases() == 0, "a lineage of its own");
        drop(built);
        clients.truncate(3);
        let _ = t.resource_set();
        for s in &mut clients {
            assert!(ack(s, &mut nonces, &t).is_some(), "the changes since, and a rebase");
        }
        t.upsert(cluster("c010", "2"));
        assert!(t.built_resource_set().is_none(), "three clients of 255 resources: not made");
        drop(first);
    }

    /// The latest upsert is found without a search, and only while it is what the table holds.
    #[test]
    fn a_lookup_finds_what_the_table_holds_whichever_change_came_last() {
        let mut t = ResourceTable::default();
        let stat = |t: &ResourceTable, name: &str| {
            View::get(t, name).map(|r| r.decode::<Cluster>().unwrap().alt_stat_name)
        };
        t.upsert(cluster("a", "1"));
        t.upsert(cluster("b", "1"));
        assert_eq!(stat(&t, "b").as_deref(), Some("1"), "the latest");
        assert_eq!(stat(&t, "a").as_deref(), Some("1"), "an earlier one");
        assert!(!t.upsert(cluster("a", "1")), "no change");
        assert_eq!(stat(&t, "b").as_deref(), Some("1"));
        t.upsert(cluster("a", "2"));
        assert_eq!(stat(&t, "a").as_deref(), Some("2"));
        t.delete("a");
        assert_eq!(stat(&t, "a"), None, "deleted, though it was the latest");
        assert_eq!(stat(&t, "b").as_deref(), Some("1"));
        t.upsert(cluster("c", "1"));
        t.upsert(cluster("b", "3"));
        t.set_all([cluster("c", "1")]);
        assert_eq!(stat(&t, "b"), None, "deleted by set_all, which upserted nothing after");
        assert_eq!(stat(&t, "c").as_deref(), Some("1"));
        assert_eq!(stat(&t, "d"), None);
    }

    #[test]
    fn changes_since_a_revision_are_exact() {
        let mut t = ResourceTable::default();
        t.upsert(cluster("a", "1"));
        t.upsert(cluster("b", "1"));
        let r = t.revision();
        assert!(!t.upsert(cluster("a", "1")), "same content is not a change");
        assert_eq!(t.revision(), r);
        t.upsert(cluster("a", "2"));
        t.delete("b");
        assert_eq!(changed(&t, r), Some(vec!["a".into(), "b".into()]));
        assert_eq!(changed(&t, t.revision()), Some(vec![]));
        assert_eq!(changed(&t, t.revision() + 1), None, "a revision from the future");
    }

    #[test]
    fn s16_type_version_depends_on_content_only() {
        let mut t1 = ResourceTable::default();
        t1.upsert(cluster("a", "1"));
        t1.upsert(cluster("b", "1"));
        let mut t2 = ResourceTable::default();
        t2.upsert(cluster("b", "0"));
        t2.upsert(cluster("b", "1"));
        t2.upsert(cluster("x", "1"));
        t2.upsert(cluster("a", "1"));
        t2.delete("x");
        assert_eq!(t1.version(), t2.version());
        t2.upsert(cluster("a", "2"));
        assert_ne!(t1.version(), t2.version());
    }

    /// The version's text is made once per change and is the version's: read between changes
    /// (as every client's response reads it), each change shows at the next read, and a change
    /// undone gives the text back; a copy of the table reads its own.
    #[test]
    fn s16_the_version_read_after_a_change_is_the_changed_one() {
        let mut t = ResourceTable::default();
        let empty = t.version();
        t.upsert(cluster("a", "1"));
        let one = t.version();
        assert_ne!(one, empty);
        assert_eq!(t.version(), one, "read again, unchanged");
        t.upsert(cluster("b", "1"));
        let two = t.version();
        assert_ne!(two, one, "an insertion shows");
        let mut copy = t.clone();
        t.delete("b");
        assert_eq!(t.version(), one, "a deletion shows: the version of what remains");
        assert_eq!(copy.version(), two, "a copy keeps its own");
        copy.upsert(cluster("a", "2"));
        assert_ne!(copy.version(), two, "a replacement shows");
        let mut expected = TypeVersion::default();
        expected.insert("a", cluster("a", "1").version());
        assert_eq!(t.version(), expected.text(), "the hash's own text");
    }

    #[test]
    fn old_tombstones_are_forgotten_and_history_says_so() {
        let mut t = ResourceTable::default();
        for i in 0..(MIN_TOMBSTONES + 10) {
            t.upsert(cluster(&format!("c{i}"), "1"));
        }
        for i in 0..(MIN_TOMBSTONES + 10) {
            t.delete(&format!("c{i}"));
        }
        assert!(t.tombstones.len() <= MIN_TOMBSTONES);
        assert_eq!(changed(&t, 0), None);
        assert!(changed(&t, t.revision() - 5).is_some());
    }

    /// Each delete used to search `changes` from its oldest entry for the oldest
    /// deletion, walking past every live resource older than it (`scanned` counted those steps
    /// there): removing n resources cost O(n²), 24 million steps for 10,000. Now each deletion
    /// forgotten is one step.
    #[test]
    fn removing_a_large_group_forgets_each_deletion_in_one_step() {
        for n in [10_000usize, 40_000] {
            let mut t = ResourceTable::default();
            let next: BTreeMap<String, EncodedResource> = (0..n)
                .map(|i| {
                    let name = format!("c{i:05}");
                    (name.clone(), cluster(&name, "1"))
                })
                .collect();
            assert_eq!(t.replace_all(&next), n);
            let before = t.revision();
            assert_eq!(t.replace_all(&BTreeMap::new()), n);
            assert!(t.scanned <= n, "{} index entries looked at to remove {n}", t.scanned);
            // What is remembered is still exact: the newest deletions, and "cannot tell" before.
            assert!(t.tombstones.len() <= MIN_TOMBSTONES);
            assert_eq!(t.graves.len(), t.tombstones.len());
            assert_eq!(changed(&t, before), None);
            let last = changed(&t, t.revision() - 3).expect("recent history is kept");
            assert_eq!(last, names_of(n - 3..n));
        }
    }

    /// The oldest deletion is forgotten first even when names come back and go again.
    #[test]
    fn a_deleted_name_that_comes_back_is_no_longer_a_tombstone() {
        let mut t = ResourceTable::default();
        for i in 0..(MIN_TOMBSTONES + 2) {
            t.upsert(cluster(&format!("c{i:05}"), "1"));
        }
        t.delete("c00000");
        t.upsert(cluster("c00000", "2"));
        assert!(t.graves.is_empty() && t.tombstones.is_empty());
        let r = t.revision();
        for i in 0..(MIN_TOMBSTONES + 2) {
            t.delete(&format!("c{i:05}"));
        }
        assert_eq!(t.graves.len(), t.tombstones.len());
        assert_eq!(t.tombstones.len(), MIN_TOMBSTONES);
        assert_eq!(changed(&t, r), None, "the two oldest deletions are forgotten");
        assert_eq!(changed(&t, r + 2).map(|v| v.len()), Some(MIN_TOMBSTONES));
    }

    fn names_of(range: std::ops::Range<usize>) -> Vec<String> {
        range.map(|i| format!("c{i:05}")).collect()
    }

    #[test]
    fn replace_all_keeps_unchanged_revisions() {
        let mut t = ResourceTable::default();
        let a = cluster("a", "1");
        t.upsert(a.clone());
        t.upsert(cluster("b", "1"));
        let r = t.revision();
        let next: BTreeMap<String, EncodedResource> =
            [("a".to_string(), a), ("c".to_string(), cluster("c", "1"))].into_iter().collect();
        assert_eq!(t.replace_all(&next), 2);
        assert_eq!(changed(&t, r), Some(vec!["b".into(), "c".into()]));
    }

    fn lb(name: &str, port: u32) -> EncodedResource {
        use xds_proto::pb::envoy::config::core::v3::{
            Address, SocketAddress, address, socket_address,
        };
        use xds_proto::pb::envoy::config::endpoint::v3::{Endpoint, LbEndpoint, lb_endpoint};
        let address = Address {
            address: Some(address::Address::SocketAddress(SocketAddress {
                address: "10.0.0.1".into(),
                port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
                ..Default::default()
            })),
        };
        let endpoint = LbEndpoint {
            host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                address: Some(address),
                ..Default::default()
            })),
            ..Default::default()
        };
        EncodedResource::named(name, &endpoint).unwrap()
    }

    /// Rule C2: a glob's members come from a range over the ordered index, and only the names
    /// under the glob's prefix are looked at, not the table.
    #[test]
    fn c02_glob_members_are_a_range_lookup_not_a_scan() {
        const T: &str = "envoy.config.endpoint.v3.LbEndpoint";
        let mut t = ResourceTable::default();
        for i in 0..5_000 {
            t.upsert(lb(&format!("xdstp://a/{T}/other/e{i:05}?k=v"), 1));
        }
        for i in 0..10 {
            t.upsert(lb(&format!("xdstp://a/{T}/svc/e{i}?k=v"), 1));
        }
        t.upsert(lb(&format!("xdstp://a/{T}/svc/e0?k=w"), 1));
        t.upsert(lb(&format!("xdstp://a/{T}/svc/deeper/e0?k=v"), 1));
        let mut got = Vec::new();
        t.for_each_member(&format!("xdstp://a/{T}/svc/*?k=v"), &mut |r| {
            got.push(r.name().to_owned())
        });
        let want: Vec<String> = (0..10).map(|i| format!("xdstp://a/{T}/svc/e{i}?k=v")).collect();
        assert_eq!(got, want, "exact parameters, one segment");
        assert!(t.member_steps.get() <= 12, "{} entries looked at", t.member_steps.get());
    }
}
