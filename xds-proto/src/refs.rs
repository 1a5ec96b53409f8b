//! References between resources: which other resources a resource names.
//!
//! The snapshot cache needs them twice: to report a snapshot that names resources it does not
//! contain (rule O3: listeners naming missing routes, clusters naming missing endpoints,
//! ClusterLoadAssignments naming LEDS collections with no member) and to
//! order an update make-before-break (a referenced resource is sent before what references it,
//! and is removed only once nothing references it).
//!
//! References are best effort. They are read from typed fields and from the `Any`-packed
//! extensions that carry them (HTTP connection manager, TCP proxy, TLS transport sockets,
//! aggregate clusters); an `Any` of another type, or one that fails to decode, is skipped, never
//! an error. Only the bytes of the resource itself are an error in [`references_of_encoded`].

use std::fmt;

use crate::pb::envoy::config::cluster::v3::Cluster;
use crate::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use crate::pb::envoy::config::core::v3::TransportSocket;
use crate::pb::envoy::config::core::v3::transport_socket;
use crate::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, locality_lb_endpoints};
use crate::pb::envoy::config::listener::v3::{FilterChain, Listener, filter};
use crate::pb::envoy::config::route::v3::route_action::{ClusterSpecifier, RequestMirrorPolicy};
use crate::pb::envoy::config::route::v3::{
    Route, RouteConfiguration, ScopedRouteConfiguration, VirtualHost, route,
};
use crate::pb::envoy::extensions::clusters::aggregate::v3::ClusterConfig as AggregateClusterConfig;
use crate::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier, scoped_routes::ConfigSpecifier,
};
use crate::pb::envoy::extensions::filters::network::tcp_proxy::v3::{TcpProxy, tcp_proxy};
use crate::pb::envoy::extensions::transport_sockets::tls::v3::{
    CommonTlsContext, DownstreamTlsContext, SdsSecretConfig, UpstreamTlsContext,
    common_tls_context::ValidationContextType,
};
use crate::pb::google::protobuf::Any;
use crate::{ResourceType, TypeUrl, XdsResource};

/// One resource naming another: the type and name of the resource named.
///
/// Ordered by type, then name, so a sorted list of references follows make-before-break order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Reference {
    /// The type of the resource named.
    pub resource_type: ResourceType,
    /// The name of the resource named.
    pub name: String,
}

impl Reference {
    /// A reference to the resource of type `resource_type` named `name`.
    pub fn new(resource_type: ResourceType, name: impl Into<String>) -> Self {
        Reference { resource_type, name: name.into() }
    }
}

impl fmt::Display for Reference {
    /// `route "r1"`: short enough for a consistency report listing many missing names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.resource_type.label(), self.name)
    }
}

/// The resources `message` refers to, sorted by (type, name) and deduplicated.
///
/// What is found, per type:
/// - Listener: the RDS route configuration of every HTTP connection manager (in filter chains,
///   the default filter chain and the API listener used by gRPC clients), the route
///   configurations named by inline scoped routes, the clusters of inline route configurations
///   and of TCP proxies, and the SDS secrets of filter-chain TLS transport sockets. A scoped-RDS
///   HTTP connection manager subscribes to a whole collection of scoped route configurations,
///   not to names, so it contributes nothing.
/// - RouteConfiguration, VirtualHost: the clusters of route actions (`cluster` and weighted
///   clusters; not `cluster_header` or cluster specifier plugins, which are resolved per
///   request) and of request mirror policies.
/// - ScopedRouteConfiguration: its route configuration, or the clusters of an inline one.
/// - Cluster: its ClusterLoadAssignment when it is an EDS cluster (`eds_cluster_config`'s
///   `service_name`, else the cluster's name), the clusters of an aggregate cluster, and the SDS
///   secrets of its TLS transport sockets.
/// - ClusterLoadAssignment: the LEDS glob collection (type LbEndpoint) each locality with
///   `leds_cluster_locality_config` names, in its normal form (rule C1; kept as written when it
///   does not parse). The reference names a collection, not a resource: it resolves when the
///   collection has a member (`xds_proto::xdstp::is_member`), which is how rule O3 checks it.
/// - Every other type, including custom ones: nothing.
pub fn references<M: XdsResource>(message: &M) -> Vec<Reference> {
    // A downcast rather than a trait bound, so that code generic over `XdsResource` (the cache)
    // can ask any resource, custom types included, without a second trait to carry around.
    let message: &dyn std::any::Any = message;
    let mut refs = Collector::default();
    if let Some(listener) = message.downcast_ref::<Listener>() {
        refs.listener(listener);
    } else if let Some(cluster) = message.downcast_ref::<Cluster>() {
        refs.cluster(cluster);
    } else if let Some(config) = message.downcast_ref::<RouteConfiguration>() {
        refs.route_configuration(config);
    } else if let Some(scoped) = message.downcast_ref::<ScopedRouteConfiguration>() {
        refs.scoped_route_configuration(scoped);
    } else if let Some(host) = message.downcast_ref::<VirtualHost>() {
        refs.virtual_host(host);
    } else if let Some(assignment) = message.downcast_ref::<ClusterLoadAssignment>() {
        refs.cluster_load_assignment(assignment);
    }
    refs.finish()
}

/// The resources an encoded resource of type `resource_type` refers to, as [`references`].
///
/// Only the types that can refer to anything are decoded: for the others (Secret, Runtime,
/// TypedExtensionConfig, LbEndpoint, custom types) this is `Ok(vec![])` without
/// looking at `bytes`, as the cache validates bytes when it encodes them, not here.
///
/// # Errors
///
/// The protobuf decode error when `bytes` are not a valid message of a type that is decoded.
pub fn references_of_encoded(
    resource_type: &TypeUrl,
    bytes: &[u8],
) -> Result<Vec<Reference>, prost::DecodeError> {
    fn decoded<M: XdsResource>(bytes: &[u8]) -> Result<Vec<Reference>, prost::DecodeError> {
        Ok(references(&M::decode(bytes)?))
    }
    match resource_type.builtin() {
        Some(ResourceType::Listener) => decoded::<Listener>(bytes),
        Some(ResourceType::Cluster) => decoded::<Cluster>(bytes),
        Some(ResourceType::RouteConfiguration) => decoded::<RouteConfiguration>(bytes),
        Some(ResourceType::ScopedRouteConfiguration) => decoded::<ScopedRouteConfiguration>(bytes),
        Some(ResourceType::VirtualHost) => decoded::<VirtualHost>(bytes),
        Some(ResourceType::ClusterLoadAssignment) => decoded::<ClusterLoadAssignment>(bytes),
        Some(
            ResourceType::Secret
            | ResourceType::Runtime
            | ResourceType::TypedExtensionConfig
            | ResourceType::LbEndpoint,
        )
        | None => Ok(Vec::new()),
    }
}

/// The message packed in `any`, if it is a `T` and decodes.
///
/// Matches on the message name after the last `/`, as Envoy does, so an `Any` packed with a
/// prefix other than `type.googleapis.com/` still counts.
fn unpack<T: prost::Message + prost::Name + Default>(any: &Any) -> Option<T> {
    let name = any.type_url.rsplit_once('/').map_or(any.type_url.as_str(), |(_, name)| name);
    if name != T::full_name() {
        return None;
    }
    T::decode(any.value.as_slice()).ok()
}

/// Accumulates references while walking one resource.
#[derive(Default)]
struct Collector(Vec<Reference>);

impl Collector {
    /// Records a reference; an empty name refers to nothing (an unset proto3 string).
    fn add(&mut self, resource_type: ResourceType, name: &str) {
        if !name.is_empty() {
            self.0.push(Reference::new(resource_type, name));
        }
    }

    fn finish(mut self) -> Vec<Reference> {
        self.0.sort_unstable();
        self.0.dedup();
        self.0
    }

    fn listener(&mut self, listener: &Listener) {
        for chain in listener.filter_chains.iter().chain(&listener.default_filter_chain) {
            self.filter_chain(chain);
        }
        if let Some(api) = listener.api_listener.as_ref().and_then(|a| a.api_listener.as_ref()) {
            self.network_filter(api);
        }
    }

    fn filter_chain(&mut self, chain: &FilterChain) {
        for f in &chain.filters {
            if let Some(filter::ConfigType::TypedConfig(config)) = &f.config_type {
                self.network_filter(config);
            }
        }
        self.transport_socket(chain.transport_socket.as_ref());
    }

    /// The network filters that name other resources: HTTP connection manager and TCP proxy.
    fn network_filter(&mut self, config: &Any) {
        if let Some(hcm) = unpack::<HttpConnectionManager>(config) {
            self.http_connection_manager(&hcm);
        } else if let Some(proxy) = unpack::<TcpProxy>(config) {
            match &proxy.cluster_specifier {
                Some(tcp_proxy::ClusterSpecifier::Cluster(name)) => {
                    self.add(ResourceType::Cluster, name);
                }
                Some(tcp_proxy::ClusterSpecifier::WeightedClusters(weighted)) => {
                    for c in &weighted.clusters {
                        self.add(ResourceType::Cluster, &c.name);
                    }
                }
                None => {}
            }
        }
    }

    fn http_connection_manager(&mut self, hcm: &HttpConnectionManager) {
        match &hcm.route_specifier {
            Some(RouteSpecifier::Rds(rds)) => {
                self.add(ResourceType::RouteConfiguration, &rds.route_config_name);
            }
            Some(RouteSpecifier::RouteConfig(config)) => self.route_configuration(config),
            Some(RouteSpecifier::ScopedRoutes(scoped)) => match &scoped.config_specifier {
                Some(ConfigSpecifier::ScopedRouteConfigurationsList(list)) => {
                    for s in &list.scoped_route_configurations {
                        self.scoped_route_configuration(s);
                    }
                }
                // SRDS: the listener subscribes to the collection, not to names (see `references`).
                Some(ConfigSpecifier::ScopedRds(_)) | None => {}
            },
            None => {}
        }
    }

    fn transport_socket(&mut self, socket: Option<&TransportSocket>) {
        let Some(transport_socket::ConfigType::TypedConfig(config)) =
            socket.and_then(|s| s.config_type.as_ref())
        else {
            return;
        };
        if let Some(tls) = unpack::<UpstreamTlsContext>(config) {
            self.common_tls_context(tls.common_tls_context.as_ref());
        } else if let Some(tls) = unpack::<DownstreamTlsContext>(config) {
            self.common_tls_context(tls.common_tls_context.as_ref());
        }
    }

    /// SDS secrets: certificates and validation contexts. Any named SDS config counts, whatever
    /// its config source, since a name is all the cache can check.
    fn common_tls_context(&mut self, tls: Option<&CommonTlsContext>) {
        let Some(tls) = tls else { return };
        for sds in &tls.tls_certificate_sds_secret_configs {
            self.add(ResourceType::Secret, &sds.name);
        }
        let validation: Option<&SdsSecretConfig> = match &tls.validation_context_type {
            Some(ValidationContextType::ValidationContextSdsSecretConfig(sds)) => Some(sds),
            Some(ValidationContextType::CombinedValidationContext(combined)) => {
                combined.validation_context_sds_secret_config.as_ref()
            }
            _ => None,
        };
        if let Some(sds) = validation {
            self.add(ResourceType::Secret, &sds.name);
        }
    }

    fn scoped_route_configuration(&mut self, scoped: &ScopedRouteConfiguration) {
        self.add(ResourceType::RouteConfiguration, &scoped.route_configuration_name);
        if let Some(config) = &scoped.route_configuration {
            self.route_configuration(config);
        }
    }

    fn route_configuration(&mut self, config: &RouteConfiguration) {
        for host in &config.virtual_hosts {
            self.virtual_host(host);
        }
        self.mirrors(&config.request_mirror_policies);
    }

    fn virtual_host(&mut self, host: &VirtualHost) {
        for r in &host.routes {
            self.route(r);
        }
        self.mirrors(&host.request_mirror_policies);
    }

    fn route(&mut self, r: &Route) {
        let Some(route::Action::Route(action)) = &r.action else {
            return;
        };
        match &action.cluster_specifier {
            Some(ClusterSpecifier::Cluster(name)) => self.add(ResourceType::Cluster, name),
            Some(ClusterSpecifier::WeightedClusters(weighted)) => {
                for c in &weighted.clusters {
                    self.add(ResourceType::Cluster, &c.name);
                }
            }
            // Resolved per request: no name to check or order by.
            _ => {}
        }
        self.mirrors(&action.request_mirror_policies);
    }

    fn mirrors(&mut self, policies: &[RequestMirrorPolicy]) {
        for p in policies {
            self.add(ResourceType::Cluster, &p.cluster);
        }
    }

    /// LEDS: the glob collections the localities take their endpoints from, normalized so that
    /// they compare with the (normal-form) names of the members a cache holds.
    fn cluster_load_assignment(&mut self, assignment: &ClusterLoadAssignment) {
        for locality in &assignment.endpoints {
            if let Some(locality_lb_endpoints::LbConfig::LedsClusterLocalityConfig(leds)) =
                &locality.lb_config
            {
                let name = &leds.leds_collection_name;
                let normal =
                    crate::xdstp::normalize(name).unwrap_or(std::borrow::Cow::Borrowed(name));
                self.add(ResourceType::LbEndpoint, &normal);
            }
        }
    }

    fn cluster(&mut self, cluster: &Cluster) {
        match &cluster.cluster_discovery_type {
            Some(ClusterDiscoveryType::Type(t)) if *t == DiscoveryType::Eds as i32 => {
                // Envoy asks EDS for `service_name` when set, else for the cluster's own name.
                let service = cluster.eds_cluster_config.as_ref().map(|e| e.service_name.as_str());
                let name = service.filter(|s| !s.is_empty()).unwrap_or(&cluster.name);
                self.add(ResourceType::ClusterLoadAssignment, name);
            }
            Some(ClusterDiscoveryType::ClusterType(custom)) => {
                if let Some(aggregate) =
                    custom.typed_config.as_ref().and_then(unpack::<AggregateClusterConfig>)
                {
                    for name in &aggregate.clusters {
                        self.add(ResourceType::Cluster, name);
                    }
                }
            }
            _ => {}
        }
        self.transport_socket(cluster.transport_socket.as_ref());
        for m in &cluster.transport_socket_matches {
            self.transport_socket(m.transport_socket.as_ref());
        }
    }
}
