//! Whole-configuration snapshots, served per node group.

mod cache;
mod consistency;
mod watch;

use std::collections::BTreeMap;
use std::sync::Arc;

use xds_proto::{EncodeError, EncodedResource, TypeUrl, XdsResource};

pub use cache::{GroupStatus, SnapshotCache};
pub use consistency::{ConsistencyError, MissingReference};

type Resources = Arc<BTreeMap<String, EncodedResource>>;

/// A node group's whole configuration: every resource of every type it is served.
///
/// Immutable and cheap to clone (the resources are shared). Build one with [`Snapshot::builder`],
/// or derive the next from the current with [`Snapshot::to_builder`]: only what you add is encoded,
/// and [`SnapshotCache::set_snapshot`] recognises the untouched resources without comparing bytes.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    types: BTreeMap<TypeUrl, Resources>,
}

impl Snapshot {
    /// A builder for an empty snapshot.
    pub fn builder() -> SnapshotBuilder {
        SnapshotBuilder::default()
    }

    /// A builder that starts from this snapshot's resources (shared, not re-encoded).
    pub fn to_builder(&self) -> SnapshotBuilder {
        SnapshotBuilder { types: self.types.clone() }
    }

    /// The resources of one type, by name.
    pub fn resources(&self, type_url: &TypeUrl) -> impl Iterator<Item = &EncodedResource> {
        self.types.get(type_url).into_iter().flat_map(|m| m.values())
    }

    /// One resource.
    pub fn get(&self, type_url: &TypeUrl, name: &str) -> Option<&EncodedResource> {
        self.types.get(type_url)?.get(name)
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
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    pub(crate) fn map(&self, type_url: &TypeUrl) -> Option<&BTreeMap<String, EncodedResource>> {
        self.types.get(type_url).map(|m| &**m)
    }
}

/// Collects the resources of a [`Snapshot`].
#[derive(Clone, Debug, Default)]
pub struct SnapshotBuilder {
    types: BTreeMap<TypeUrl, Resources>,
}

impl SnapshotBuilder {
    /// Adds (or replaces) a resource of any type, built-in or custom, encoding it once.
    pub fn add<M: XdsResource>(&mut self, resource: &M) -> Result<&mut Self, EncodeError> {
        let encoded = EncodedResource::new(resource)?;
        Ok(self.add_encoded(encoded))
    }

    /// Adds (or replaces) an already-encoded resource.
    pub fn add_encoded(&mut self, resource: EncodedResource) -> &mut Self {
        let map = self.types.entry(resource.type_url().clone()).or_default();
        Arc::make_mut(map).insert(resource.name().to_owned(), resource);
        self
    }

    /// Removes a resource, if present.
    pub fn remove(&mut self, type_url: &TypeUrl, name: &str) -> &mut Self {
        if let Some(map) = self.types.get_mut(type_url) {
            Arc::make_mut(map).remove(name);
        }
        self
    }

    /// Whether a resource of this type and name was added.
    pub fn contains(&self, type_url: &TypeUrl, name: &str) -> bool {
        self.types.get(type_url).is_some_and(|m| m.contains_key(name))
    }

    /// Declares a type with no resources, so that clients of it get an (empty) answer.
    pub fn declare(&mut self, type_url: impl Into<TypeUrl>) -> &mut Self {
        self.types.entry(type_url.into()).or_default();
        self
    }

    /// The snapshot, unchecked.
    pub fn build(&self) -> Snapshot {
        Snapshot { types: self.types.clone() }
    }

    /// The snapshot, if its references are consistent (rule O3).
    pub fn build_consistent(&self) -> Result<Snapshot, ConsistencyError> {
        let snapshot = self.build();
        snapshot.check_consistency()?;
        Ok(snapshot)
    }
}
