//! Whole-configuration snapshots, served per node group.

mod cache;
mod consistency;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use xds_proto::{EncodeError, EncodedResource, Reference, TypeUrl, XdsResource};

pub use cache::{GroupStatus, SnapshotCache};
pub use consistency::{CHECKED_REFERENCES, ConsistencyError, MissingReference};

/// One type's resources by name: a persistent B-tree, so that a snapshot derived with
/// [`Snapshot::to_builder`] shares with its base every node its changes did not touch. One
/// `add` to a derived builder copies O(log n) nodes, not the whole map: a configuration served as
/// one snapshot per node (a thousand groups holding the same ten thousand resources) changes one
/// resource in every group at a cost that does not grow with the resources. Keyed by the
/// resource's own shared name, so a name is never copied.
pub(crate) type Resources = imbl::OrdMap<Arc<str>, EncodedResource>;

/// Snapshot identities: every [`SnapshotBuilder::build`] takes the next one. 0 is the empty
/// `Snapshot::default()`.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// What a builder made with [`Snapshot::to_builder`] changed: the snapshot it started from (its
/// identity) and every name it added or removed, by type.
#[derive(Debug)]
struct Derivation {
    base: u64,
    /// Whether the base passed the consistency check (rule O3): then only what the builder
    /// touched needs checking, as long as it removed nothing.
    base_checked: bool,
    touched: BTreeMap<TypeUrl, BTreeSet<String>>,
}

/// A node group's whole configuration: every resource of every type it is served.
///
/// Immutable and cheap to clone (the resources are shared). Build one with [`Snapshot::builder`],
/// or derive the next from the current with [`Snapshot::to_builder`]: only what you add is encoded,
/// and [`SnapshotCache::set_snapshot`] recognises the untouched resources without comparing bytes.
///
/// A snapshot derived with `to_builder` remembers which names the builder touched, so that setting
/// it over the one it was derived from costs O(touched × log n), not O(resources): a reload that
/// changes one resource of a million compares one resource.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    types: BTreeMap<TypeUrl, Resources>,
    /// This content's identity: clones share it, every `build` takes a new one, and two
    /// snapshots with the same identity hold the same resources (0 is the empty default).
    id: u64,
    /// What changed since the snapshot this one was derived from, if it was.
    derived: Option<Arc<Derivation>>,
    /// Whether this snapshot passed the consistency check ([`SnapshotBuilder::build`]).
    checked: bool,
}

impl Snapshot {
    /// A builder for an empty snapshot.
    pub fn builder() -> SnapshotBuilder {
        SnapshotBuilder::default()
    }

    /// A builder that starts from this snapshot's resources (shared, not re-encoded).
    pub fn to_builder(&self) -> SnapshotBuilder {
        SnapshotBuilder {
            types: self.types.clone(),
            base: Some(Base { id: self.id, checked: self.checked }),
            touched: BTreeMap::new(),
        }
    }

    /// Whether `other` is this very snapshot (a clone of it, or of the same build): then both
    /// hold the same resources. O(1); a snapshot built again with the same content is not the
    /// same.
    pub fn is_same(&self, other: &Snapshot) -> bool {
        self.id == other.id
    }

    /// The number of resources of one type.
    pub fn count(&self, type_url: &TypeUrl) -> usize {
        self.types.get(type_url).map_or(0, |m| m.len())
    }

    /// The names the builder touched for `type_url`, when this snapshot was derived (with
    /// [`to_builder`](Snapshot::to_builder)) from the snapshot whose identity is `base`.
    pub(crate) fn touched_since(
        &self,
        base: &Snapshot,
    ) -> Option<&BTreeMap<TypeUrl, BTreeSet<String>>> {
        self.derived.as_deref().filter(|d| d.base == base.id).map(|d| &d.touched)
    }

    /// The names the builder touched, when this snapshot was derived from a checked one and
    /// every touched name is still here (an add or a replace, never a removal): then every
    /// reference of the untouched resources still resolves, and only the touched resources'
    /// own references need checking.
    fn only_additions_to_checked(&self) -> Option<&BTreeMap<TypeUrl, BTreeSet<String>>> {
        let derived = self.derived.as_deref().filter(|d| d.base_checked)?;
        let all_present = derived.touched.iter().all(|(t, names)| {
            let map = self.types.get(t);
            names.iter().all(|n| map.is_some_and(|m| m.contains_key(n.as_str())))
        });
        all_present.then_some(&derived.touched)
    }

    /// The resources of one type, by name.
    pub fn resources(&self, type_url: &TypeUrl) -> impl Iterator<Item = &EncodedResource> {
        self.types.get(type_url).into_iter().flat_map(|m| m.values())
    }

    /// One resource.
    pub fn get(&self, type_url: &TypeUrl, name: &str) -> Option<&EncodedResource> {
        self.types.get(type_url)?.get(name)
    }

    /// Whether `reference` resolves in this snapshot (rule O3): the resource it names exists,
    /// or, when it names a glob collection (an LEDS collection, rule C2), the collection has at
    /// least one member. O(log n) either way: a member is found by a range over the ordered names.
    pub fn resolves(&self, reference: &Reference) -> bool {
        resolves_in(&self.types, reference)
    }

    /// The types the snapshot holds, in make-before-break order.
    pub fn types(&self) -> impl Iterator<Item = &TypeUrl> {
        self.types.keys()
    }

    /// The number of resources of every type.
    pub fn len(&self) -> usize {
        self.types.values().map(|m| m.len()).sum()
    }

    /// Whether the snapshot holds no resource.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether both snapshots hold the very same resources of `type_url` (one was derived from
    /// the other and that type was not touched).
    pub(crate) fn shares(&self, other: &Snapshot, type_url: &TypeUrl) -> bool {
        match (self.types.get(type_url), other.types.get(type_url)) {
            (Some(a), Some(b)) => a.ptr_eq(b),
            _ => false,
        }
    }

    pub(crate) fn map(&self, type_url: &TypeUrl) -> Option<&Resources> {
        self.types.get(type_url)
    }
}

/// What a builder remembers of the snapshot it was derived from.
#[derive(Clone, Copy, Debug)]
struct Base {
    id: u64,
    checked: bool,
}

/// Collects the resources of a [`Snapshot`].
#[derive(Clone, Debug, Default)]
pub struct SnapshotBuilder {
    types: BTreeMap<TypeUrl, Resources>,
    /// The snapshot this builder started from (`to_builder`).
    base: Option<Base>,
    /// The names added or removed since, by type (kept only when there is a base).
    touched: BTreeMap<TypeUrl, BTreeSet<String>>,
}

impl SnapshotBuilder {
    /// Adds (or replaces) a resource of any type, built-in or custom, encoding it once.
    pub fn add<M: XdsResource>(&mut self, resource: &M) -> Result<&mut Self, EncodeError> {
        let encoded = EncodedResource::new(resource)?;
        Ok(self.add_encoded(encoded))
    }

    /// Adds (or replaces) an already-encoded resource.
    pub fn add_encoded(&mut self, resource: EncodedResource) -> &mut Self {
        if self.base.is_some() {
            self.touch(resource.type_url(), resource.name());
        }
        let map = self.types.entry(resource.type_url().clone()).or_default();
        map.insert(resource.shared_name(), resource);
        self
    }

    /// Removes a resource, if present.
    pub fn remove(&mut self, type_url: &TypeUrl, name: &str) -> &mut Self {
        let removed = self.types.get_mut(type_url).is_some_and(|m| m.remove(name).is_some());
        if removed && self.base.is_some() {
            self.touch(type_url, name);
        }
        self
    }

    fn touch(&mut self, type_url: &TypeUrl, name: &str) {
        let names = match self.touched.get_mut(type_url) {
            Some(names) => names,
            None => self.touched.entry(type_url.clone()).or_default(),
        };
        if !names.contains(name) {
            names.insert(name.to_owned());
        }
    }

    /// Whether a resource of this type and name was added.
    pub fn contains(&self, type_url: &TypeUrl, name: &str) -> bool {
        self.types.get(type_url).is_some_and(|m| m.contains_key(name))
    }

    /// Whether `reference` resolves among the resources added so far, as
    /// [`Snapshot::resolves`]: for a checker that validates a change before building.
    pub fn resolves(&self, reference: &Reference) -> bool {
        resolves_in(&self.types, reference)
    }

    /// Declares a type with no resources, so that clients of it get an (empty) answer.
    pub fn declare(&mut self, type_url: impl Into<TypeUrl>) -> &mut Self {
        self.types.entry(type_url.into()).or_default();
        self
    }

    /// The snapshot, if its references are consistent (rule O3): every reference a resource
    /// makes (a listener's route configuration, an EDS cluster's endpoints, ...) resolves in
    /// it. Checked by default, since a dangling reference leaves a client waiting for a
    /// resource that never comes; [`build_unchecked`](Self::build_unchecked) is the escape for a
    /// snapshot meant to be partial.
    ///
    /// A builder derived with [`Snapshot::to_builder`] from a snapshot that was itself built with
    /// `build`, and that only added or replaced resources, checks only those: O(touched), not
    /// O(resources), since nothing it did can break a reference it did not make.
    pub fn build(&self) -> Result<Snapshot, ConsistencyError> {
        let mut snapshot = self.build_unchecked();
        match snapshot.only_additions_to_checked() {
            Some(touched) => snapshot.check_names(touched)?,
            None => snapshot.check_consistency()?,
        }
        snapshot.checked = true;
        Ok(snapshot)
    }

    /// The snapshot, whatever its references: for one meant to be partial (a test, a client
    /// that asks for what it knows to exist, references served by another cache of a
    /// [`MuxCache`](crate::MuxCache)). Prefer [`build`](Self::build).
    pub fn build_unchecked(&self) -> Snapshot {
        Snapshot {
            types: self.types.clone(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            derived: self.base.map(|base| {
                Arc::new(Derivation {
                    base: base.id,
                    base_checked: base.checked,
                    touched: self.touched.clone(),
                })
            }),
            checked: false,
        }
    }

    /// The snapshot, if its references are consistent (rule O3): what [`build`](Self::build)
    /// does now.
    #[deprecated(since = "0.2.0", note = "`build()` checks consistency now; use it")]
    pub fn build_consistent(&self) -> Result<Snapshot, ConsistencyError> {
        self.build()
    }
}

/// [`Snapshot::resolves`] over a snapshot's or a builder's resources.
fn resolves_in(types: &BTreeMap<TypeUrl, Resources>, reference: &Reference) -> bool {
    let Some(map) = types.get(&TypeUrl::Builtin(reference.resource_type)) else { return false };
    let name = reference.name.as_str();
    if !xds_core::xdstp::is_glob_name(name) {
        return map.contains_key(name);
    }
    // Names are keyed by their normal form, so the members sit in one range under the prefix.
    let Some((prefix, _)) = xds_core::xdstp::glob_prefix(name) else { return false };
    map.range::<_, str>((Bound::Included(prefix), Bound::Unbounded))
        .take_while(|(n, _)| n.starts_with(prefix))
        .any(|(n, _)| xds_core::xdstp::is_member(n, name))
}
