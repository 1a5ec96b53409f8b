//! The gRPC services and methods of xDS, per resource type.

use crate::resource_type::ResourceType;

/// The aggregated discovery service (ADS), which carries every type on one stream.
pub const ADS_SERVICE: &str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
/// ADS, state of the world.
pub const ADS_SOTW_METHOD: &str = "StreamAggregatedResources";
/// ADS, incremental.
pub const ADS_DELTA_METHOD: &str = "DeltaAggregatedResources";
/// The client status discovery service (CSDS).
pub const CSDS_SERVICE: &str = "envoy.service.status.v3.ClientStatusDiscoveryService";

impl ResourceType {
    /// The per-type gRPC service, e.g. `envoy.service.cluster.v3.ClusterDiscoveryService`.
    pub const fn service(self) -> &'static str {
        match self {
            ResourceType::Cluster => "envoy.service.cluster.v3.ClusterDiscoveryService",
            ResourceType::ClusterLoadAssignment => {
                "envoy.service.endpoint.v3.EndpointDiscoveryService"
            }
            ResourceType::LbEndpoint => {
                "envoy.service.endpoint.v3.LocalityEndpointDiscoveryService"
            }
            ResourceType::Listener => "envoy.service.listener.v3.ListenerDiscoveryService",
            ResourceType::RouteConfiguration => "envoy.service.route.v3.RouteDiscoveryService",
            ResourceType::ScopedRouteConfiguration => {
                "envoy.service.route.v3.ScopedRoutesDiscoveryService"
            }
            ResourceType::VirtualHost => "envoy.service.route.v3.VirtualHostDiscoveryService",
            ResourceType::Secret => "envoy.service.secret.v3.SecretDiscoveryService",
            ResourceType::Runtime => "envoy.service.runtime.v3.RuntimeDiscoveryService",
            ResourceType::TypedExtensionConfig => {
                "envoy.service.extension.v3.ExtensionConfigDiscoveryService"
            }
        }
    }

    /// The noun of the per-type methods: `Clusters` in `StreamClusters`, `DeltaClusters`, ...
    const fn method_noun(self) -> &'static str {
        match self {
            ResourceType::Cluster => "Clusters",
            ResourceType::ClusterLoadAssignment => "Endpoints",
            ResourceType::LbEndpoint => "LocalityEndpoints",
            ResourceType::Listener => "Listeners",
            ResourceType::RouteConfiguration => "Routes",
            ResourceType::ScopedRouteConfiguration => "ScopedRoutes",
            ResourceType::VirtualHost => "VirtualHosts",
            ResourceType::Secret => "Secrets",
            ResourceType::Runtime => "Runtime",
            ResourceType::TypedExtensionConfig => "ExtensionConfigs",
        }
    }

    /// The gRPC path of the per-type SotW method (`/…ClusterDiscoveryService/StreamClusters`);
    /// `None` for the delta-only types.
    pub fn sotw_path(self) -> Option<String> {
        (!self.is_delta_only()).then(|| format!("/{}/Stream{}", self.service(), self.method_noun()))
    }

    /// The gRPC path of the per-type delta method (`/…ClusterDiscoveryService/DeltaClusters`).
    pub fn delta_path(self) -> String {
        format!("/{}/Delta{}", self.service(), self.method_noun())
    }

    /// The gRPC path of the per-type unary fetch method (`/…ClusterDiscoveryService/FetchClusters`);
    /// `None` for the delta-only types.
    pub fn fetch_path(self) -> Option<String> {
        (!self.is_delta_only()).then(|| format!("/{}/Fetch{}", self.service(), self.method_noun()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_envoy_services() {
        let t = ResourceType::Cluster;
        assert_eq!(
            t.sotw_path().as_deref(),
            Some("/envoy.service.cluster.v3.ClusterDiscoveryService/StreamClusters")
        );
        assert_eq!(
            t.delta_path(),
            "/envoy.service.cluster.v3.ClusterDiscoveryService/DeltaClusters"
        );
        assert_eq!(
            ResourceType::Runtime.fetch_path().as_deref(),
            Some("/envoy.service.runtime.v3.RuntimeDiscoveryService/FetchRuntime")
        );
        assert_eq!(ResourceType::VirtualHost.sotw_path(), None);
        assert_eq!(
            ResourceType::LbEndpoint.delta_path(),
            "/envoy.service.endpoint.v3.LocalityEndpointDiscoveryService/DeltaLocalityEndpoints"
        );
    }
}
