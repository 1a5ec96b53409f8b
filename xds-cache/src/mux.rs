//! `MuxCache`: routes each type to the cache that serves it.

use std::collections::BTreeMap;
use std::sync::Arc;

use xds_proto::TypeUrl;
use xds_proto::pb::envoy::config::core::v3::Node;

use crate::cache::{Cache, CacheError, Watch, WatchRequest};
use crate::signal::Signal;

/// Routes each type URL to a cache: e.g. endpoints from a [`LinearCache`](crate::LinearCache)
/// fed by service discovery, everything else from a [`SnapshotCache`](crate::SnapshotCache).
///
/// ```
/// use xds_cache::{LinearCache, MuxCache, SnapshotCache};
/// use xds_proto::ResourceType;
/// use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
///
/// let mux = MuxCache::new()
///     .route(ResourceType::ClusterLoadAssignment, LinearCache::of::<ClusterLoadAssignment>())
///     .fallback(SnapshotCache::by_node_id());
/// ```
#[derive(Clone, Default)]
pub struct MuxCache {
    routes: BTreeMap<TypeUrl, Arc<dyn Cache>>,
    fallback: Option<Arc<dyn Cache>>,
}

impl std::fmt::Debug for MuxCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxCache")
            .field("routes", &self.routes.keys().map(TypeUrl::as_str).collect::<Vec<_>>())
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl MuxCache {
    /// A mux that serves nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `type_url` from `cache`.
    #[must_use]
    pub fn route(mut self, type_url: impl Into<TypeUrl>, cache: impl Cache) -> Self {
        self.routes.insert(type_url.into(), Arc::new(cache));
        self
    }

    /// Serves every type without a route from `cache`.
    #[must_use]
    pub fn fallback(mut self, cache: impl Cache) -> Self {
        self.fallback = Some(Arc::new(cache));
        self
    }
}

impl Cache for MuxCache {
    fn watch(
        &self,
        request: WatchRequest<'_>,
        signal: Arc<Signal>,
    ) -> Result<Box<dyn Watch>, CacheError> {
        match self.routes.get(request.type_url).or(self.fallback.as_ref()) {
            Some(cache) => cache.watch(request, signal),
            None => Err(CacheError::UnknownType { type_url: request.type_url.to_string() }),
        }
    }

    /// The fallback's group for the node, else the first (by type URL) of the routed caches that
    /// groups it.
    fn group(&self, node: &Node) -> Option<String> {
        self.fallback.iter().chain(self.routes.values()).find_map(|cache| cache.group(node))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LinearCache, SnapshotCache};
    use xds_proto::ResourceType;

    /// The group a mux names is the one the cache that groups the node chooses: a linear cache
    /// of endpoints beside a snapshot cache by node cluster groups by the cluster.
    #[test]
    fn a_mux_names_the_group_of_the_cache_that_groups_nodes() {
        let node = Node { id: "n1".into(), cluster: "edge".into(), ..Default::default() };
        let endpoints = TypeUrl::from(ResourceType::ClusterLoadAssignment);
        let linear = MuxCache::new().route(endpoints.clone(), LinearCache::new(endpoints.clone()));
        assert_eq!(linear.group(&node), None, "no cache groups nodes");
        let mux = linear.fallback(SnapshotCache::by_node_cluster());
        assert_eq!(mux.group(&node), Some("edge".to_owned()));
    }
}
