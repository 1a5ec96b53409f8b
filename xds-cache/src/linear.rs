//! `LinearCache`: one resource type shared by every node, updated resource by resource.

use std::sync::Arc;

use xds_proto::{EncodeError, EncodedResource, TypeUrl, XdsResource};

use crate::cache::{Cache, CacheError, Watch, WatchRequest, check_variant};
use crate::signal::Signal;
use crate::table::ResourceTable;
use crate::tables::Tables;

/// One resource type, the same for every node, updated one resource at a time.
///
/// Each update costs O(log n) in the number of resources plus one signal per watching stream:
/// the resource is encoded once, its version is its content hash (rule S16), and each stream then
/// looks only at what changed since it last looked. This is the cache for endpoints driven by a
/// service registry, or any type that changes often and piecemeal. Delta streams get exactly the
/// changed resources; SotW streams get full state for Listener and Cluster and the changed
/// resources for the other types.
///
/// ```
/// use xds_cache::LinearCache;
/// use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
///
/// let endpoints = LinearCache::of::<ClusterLoadAssignment>();
/// let cla = ClusterLoadAssignment { cluster_name: "backend".into(), ..Default::default() };
/// assert!(endpoints.upsert(&cla)?);
/// assert!(!endpoints.upsert(&cla)?, "the same content is not a change");
/// assert!(endpoints.delete("backend"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct LinearCache {
    type_url: TypeUrl,
    /// One table, under the key `()`, made at creation: a linear cache serves from the start.
    table: Tables<()>,
}

/// An update of a `LinearCache` that did not apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinearError {
    /// The resource could not be encoded (it has no name).
    #[error(transparent)]
    Encode(#[from] EncodeError),
    /// The resource is of another type than the cache's.
    #[error("this cache holds {expected} resources, not {got}")]
    WrongType {
        /// The cache's type.
        expected: String,
        /// The resource's type.
        got: String,
    },
}

impl std::fmt::Debug for LinearCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinearCache")
            .field("type_url", &self.type_url.as_str())
            .field("resources", &self.len())
            .finish()
    }
}

impl LinearCache {
    /// An empty cache for `type_url`.
    pub fn new(type_url: impl Into<TypeUrl>) -> Self {
        let table = Tables::new();
        table.update(&(), |_| ());
        LinearCache { type_url: type_url.into(), table }
    }

    /// An empty cache for the resources of message type `M`.
    pub fn of<M: XdsResource>() -> Self {
        Self::new(TypeUrl::of::<M>())
    }

    /// The cache's type.
    pub fn type_url(&self) -> &TypeUrl {
        &self.type_url
    }

    /// Creates or replaces a resource. Returns whether anything changed (the same content is not
    /// a change, and signals nobody).
    pub fn upsert<M: XdsResource>(&self, resource: &M) -> Result<bool, LinearError> {
        self.upsert_encoded(EncodedResource::new(resource)?)
    }

    /// Creates or replaces an already-encoded resource.
    pub fn upsert_encoded(&self, resource: EncodedResource) -> Result<bool, LinearError> {
        if *resource.type_url() != self.type_url {
            return Err(LinearError::WrongType {
                expected: self.type_url.to_string(),
                got: resource.type_url().to_string(),
            });
        }
        Ok(self.write(|table| table.upsert(resource)))
    }

    /// Deletes a resource. Returns whether it existed.
    pub fn delete(&self, name: &str) -> bool {
        self.write(|table| table.delete(name))
    }

    /// Replaces every resource at once; unchanged ones keep their version and revision. Returns
    /// the number of resources created, changed or deleted.
    pub fn set_all(
        &self,
        resources: impl IntoIterator<Item = EncodedResource>,
    ) -> Result<usize, LinearError> {
        let mut next = Vec::new();
        for r in resources {
            if *r.type_url() != self.type_url {
                return Err(LinearError::WrongType {
                    expected: self.type_url.to_string(),
                    got: r.type_url().to_string(),
                });
            }
            next.push(r);
        }
        Ok(self.write(|table| table.set_all(next)))
    }

    /// Attaches an error to `name`, or clears it with `None` (rule C4). Clients subscribed to
    /// `name` while no resource of that name exists are sent it once in `resource_errors`
    /// (`UNAVAILABLE`: "the inventory behind this name is unreachable"; `PERMISSION_DENIED`,
    /// `NOT_FOUND`: data errors, the client may drop what it holds). `*` stands for wildcard
    /// subscriptions. Upserting the resource supersedes the error for the clients that get it.
    pub fn set_error(&self, name: &str, error: Option<xds_core::ErrorDetail>) -> bool {
        self.write(|table| table.set_error(name, error))
    }

    /// The resource with this name.
    pub fn get(&self, name: &str) -> Option<EncodedResource> {
        self.read(|table| table.get(name).cloned())
    }

    /// Every resource, by name.
    pub fn resources(&self) -> Vec<EncodedResource> {
        self.read(|table| table.iter().cloned().collect())
    }

    /// The number of resources.
    pub fn len(&self) -> usize {
        self.read(ResourceTable::len)
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type version SotW clients are sent (rule S16).
    pub fn version(&self) -> xds_core::Text {
        self.read(xds_core::View::version)
    }

    /// The number of streams watching.
    pub fn watch_count(&self) -> usize {
        self.table.watching(&())
    }

    /// Reads the table (made at creation and never removed, so `None` does not occur, and would
    /// read as empty).
    fn read<R: Default>(&self, f: impl FnOnce(&ResourceTable) -> R) -> R {
        self.table.read(&(), f).unwrap_or_default()
    }

    /// Changes the table; its streams are signalled when the revision moved.
    fn write<R>(&self, f: impl FnOnce(&mut ResourceTable) -> R) -> R {
        self.table.update(&(), f)
    }
}

impl Cache for LinearCache {
    fn watch(
        &self,
        request: WatchRequest<'_>,
        signal: Arc<Signal>,
    ) -> Result<Box<dyn Watch>, CacheError> {
        if *request.type_url != self.type_url {
            return Err(CacheError::UnknownType { type_url: request.type_url.to_string() });
        }
        check_variant(request.type_url, request.variant)?;
        Ok(self.table.watch((), signal))
    }
}
