//! Builders for the resources most control planes serve: an EDS cluster over ADS, endpoints from
//! addresses, a listener with the HTTP connection manager over RDS, a route or a whole route
//! table ([`RouteTable`]), a TLS secret.
//!
//! Each returns the plain generated message, so a builder is a starting point: set more fields on
//! what it returns. Every reference between them goes over ADS, the way Envoy and gRPC's xDS
//! clients are usually bootstrapped.
//!
//! ```
//! use xds_proto::builders::{eds_cluster, endpoints, http_listener, route_to_cluster};
//! use xds_proto::{Reference, ResourceType, XdsResource, references};
//!
//! let cluster = eds_cluster("backend");
//! let cla = endpoints("backend", &[("10.0.0.1", 8080), ("10.0.0.2", 8080)]);
//! let route = route_to_cluster("local_route", "*", "backend");
//! let listener = http_listener("http", "0.0.0.0", 10000, "local_route");
//! assert_eq!(cla.resource_name(), Some("backend"));
//! // Each one names the next, the way the cache's consistency check follows them.
//! assert_eq!(references(&listener), [Reference::new(ResourceType::RouteConfiguration, "local_route")]);
//! assert_eq!(references(&route), [Reference::new(ResourceType::Cluster, "backend")]);
//! assert_eq!(references(&cluster), [Reference::new(ResourceType::ClusterLoadAssignment, "backend")]);
//! ```

use crate::pb::envoy::config::cluster::v3::{Cluster, cluster};
use crate::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ApiVersion, ConfigSource, SocketAddress, address,
    config_source, socket_address,
};
use crate::pb::envoy::config::core::v3::{DataSource, data_source};
use crate::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use crate::pb::envoy::config::listener::v3::{Filter, FilterChain, Listener, filter};
use crate::pb::envoy::config::route::v3::{
    HeaderMatcher, Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost,
    WeightedCluster, header_matcher, route, route_action, route_match, weighted_cluster,
};
use crate::pb::envoy::extensions::filters::http::router::v3::Router;
use crate::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, HttpFilter, Rds, http_connection_manager, http_filter,
};
use crate::pb::envoy::extensions::transport_sockets::tls::v3::{Secret, TlsCertificate, secret};
use crate::pb::envoy::r#type::matcher::v3::{StringMatcher, string_matcher};
use crate::pb::google::protobuf::{Any, Duration as PbDuration, UInt32Value};
use prost::{Message, Name};

/// A config source that says "over the ADS stream this client already has".
pub fn ads_source() -> ConfigSource {
    ConfigSource {
        config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
            AggregatedConfigSource {},
        )),
        resource_api_version: ApiVersion::V3 as i32,
        ..Default::default()
    }
}

/// An EDS cluster whose endpoints come over ADS under the cluster's own name.
pub fn eds_cluster(name: &str) -> Cluster {
    Cluster {
        name: name.into(),
        cluster_discovery_type: Some(cluster::ClusterDiscoveryType::Type(
            cluster::DiscoveryType::Eds as i32,
        )),
        eds_cluster_config: Some(cluster::EdsClusterConfig {
            eds_config: Some(ads_source()),
            service_name: String::new(),
        }),
        ..Default::default()
    }
}

/// The endpoints of `cluster`: one locality (weight 1, as gRPC clients require) with an endpoint
/// per `(host, port)`.
pub fn endpoints(cluster: &str, hosts: &[(&str, u32)]) -> ClusterLoadAssignment {
    let lb_endpoints = hosts
        .iter()
        .map(|(host, port)| LbEndpoint {
            host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                address: Some(socket_address(host, *port)),
                ..Default::default()
            })),
            ..Default::default()
        })
        .collect();
    ClusterLoadAssignment {
        cluster_name: cluster.into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints,
            load_balancing_weight: Some(UInt32Value { value: 1 }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A socket address with a TCP port.
fn socket_address(host: &str, port: u32) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: host.to_owned(),
            port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    }
}

/// `message` packed into an `Any` under its own type URL.
fn pack<M: Message + Name>(message: &M) -> Any {
    Any { type_url: M::type_url(), value: message.encode_to_vec() }
}

/// A listener on `host:port` whose only filter is the HTTP connection manager, with its routes
/// from the RouteConfiguration `route_config` over ADS (rule O2: the listener warms until that
/// route arrives) and the router as its only HTTP filter.
pub fn http_listener(name: &str, host: &str, port: u32, route_config: &str) -> Listener {
    let hcm = HttpConnectionManager {
        stat_prefix: name.into(),
        route_specifier: Some(http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: Some(ads_source()),
            route_config_name: route_config.into(),
        })),
        http_filters: vec![HttpFilter {
            name: "envoy.filters.http.router".into(),
            config_type: Some(http_filter::ConfigType::TypedConfig(pack(&Router::default()))),
            ..Default::default()
        }],
        ..Default::default()
    };
    Listener {
        name: name.into(),
        address: Some(socket_address(host, port)),
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: "envoy.filters.network.http_connection_manager".into(),
                config_type: Some(filter::ConfigType::TypedConfig(pack(&hcm))),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A RouteConfiguration with one virtual host for `domain` (`*` for any) whose every request
/// (prefix `/`) goes to `cluster`.
pub fn route_to_cluster(name: &str, domain: &str, cluster: &str) -> RouteConfiguration {
    RouteConfiguration {
        name: name.into(),
        virtual_hosts: vec![VirtualHost {
            name: format!("{name}-vhost"),
            domains: vec![domain.into()],
            routes: vec![Route {
                r#match: Some(RouteMatch {
                    path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
                    ..Default::default()
                }),
                action: Some(route::Action::Route(RouteAction {
                    cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(
                        cluster.into(),
                    )),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A RouteConfiguration built by virtual host and route, without writing its oneofs: routes by
/// path prefix or exact path (and, if wanted, exact header values) to one cluster or to weighted
/// clusters, each with an optional timeout.
///
/// The output is deterministic: virtual hosts, their domains and their routes come out in the
/// order they were added (Envoy matches routes in that order: put the longer prefixes first),
/// so the same table has the same bytes and the same version. A table built from valid names
/// passes [`validate`](crate::validate) (Envoy's `validate.rules`); what Envoy checks beyond
/// them (a domain served by two virtual hosts, weights that add up to zero) is the caller's.
///
/// ```
/// use std::time::Duration;
/// use xds_proto::builders::{RouteRule, RouteTable, To};
/// use xds_proto::{Reference, ResourceType, references};
///
/// let table = RouteTable::new("local_route")
///     .virtual_host("api", ["api.example.com"], |vh| {
///         vh.prefix("/v1/", "api-v1")
///             .weighted_prefix("/v2/", [("api-v2", 90), ("api-v2-canary", 10)])
///             .route(
///                 RouteRule::path("/healthz", To::cluster("health"))
///                     .header("x-probe", "1")
///                     .timeout(Duration::from_secs(1)),
///             )
///     })
///     .virtual_host("any", ["*"], |vh| vh.prefix("/", "web"))
///     .build();
/// assert_eq!(table.virtual_hosts.len(), 2);
/// assert!(xds_proto::validate(&table).is_ok());
/// // The clusters it routes to, as the cache's consistency check follows them.
/// assert!(references(&table).contains(&Reference::new(ResourceType::Cluster, "api-v2-canary")));
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct RouteTable {
    config: RouteConfiguration,
}

impl RouteTable {
    /// An empty table named `name` (the name a listener's RDS asks for).
    pub fn new(name: impl Into<String>) -> Self {
        Self { config: RouteConfiguration { name: name.into(), ..Default::default() } }
    }

    /// Adds a virtual host `name` serving `domains` (`*` for any, `*.example.com`, ...), with the
    /// routes `routes` adds, in order.
    pub fn virtual_host(
        mut self,
        name: impl Into<String>,
        domains: impl IntoIterator<Item = impl Into<String>>,
        routes: impl FnOnce(Routes) -> Routes,
    ) -> Self {
        let routes = routes(Routes::default()).routes;
        self.config.virtual_hosts.push(VirtualHost {
            name: name.into(),
            domains: domains.into_iter().map(Into::into).collect(),
            routes,
            ..Default::default()
        });
        self
    }

    /// The RouteConfiguration (a plain message: set more fields on it if you need to).
    pub fn build(self) -> RouteConfiguration {
        self.config
    }
}

/// The routes of one virtual host of a [`RouteTable`], in the order Envoy tries them.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct Routes {
    routes: Vec<Route>,
}

impl Routes {
    /// Requests whose path starts with `prefix` go to `cluster`.
    pub fn prefix(self, prefix: impl Into<String>, cluster: impl Into<String>) -> Self {
        self.route(RouteRule::prefix(prefix, To::cluster(cluster)))
    }

    /// Requests whose path is `path` (exactly, query string aside) go to `cluster`.
    pub fn path(self, path: impl Into<String>, cluster: impl Into<String>) -> Self {
        self.route(RouteRule::path(path, To::cluster(cluster)))
    }

    /// Requests whose path starts with `prefix` are split between clusters by weight
    /// (`[("v2", 90), ("v2-canary", 10)]`: a share of `weight / sum of the weights`).
    pub fn weighted_prefix(
        self,
        prefix: impl Into<String>,
        clusters: impl IntoIterator<Item = (impl Into<String>, u32)>,
    ) -> Self {
        self.route(RouteRule::prefix(prefix, To::weighted(clusters)))
    }

    /// Adds a route built with [`RouteRule`] (header matches, a timeout).
    pub fn route(mut self, rule: RouteRule) -> Self {
        self.routes.push(rule.route);
        self
    }
}

/// Where a route sends its requests: one cluster, or clusters by weight.
#[derive(Clone, Debug)]
pub struct To(route_action::ClusterSpecifier);

impl To {
    /// Every request to `cluster`.
    pub fn cluster(cluster: impl Into<String>) -> Self {
        To(route_action::ClusterSpecifier::Cluster(cluster.into()))
    }

    /// Requests split between clusters by weight, in the order given.
    pub fn weighted(clusters: impl IntoIterator<Item = (impl Into<String>, u32)>) -> Self {
        let clusters = clusters
            .into_iter()
            .map(|(name, weight)| weighted_cluster::ClusterWeight {
                name: name.into(),
                weight: Some(UInt32Value { value: weight }),
                ..Default::default()
            })
            .collect();
        To(route_action::ClusterSpecifier::WeightedClusters(WeightedCluster {
            clusters,
            ..Default::default()
        }))
    }
}

/// One route: what it matches (a path prefix or an exact path, and exact header values) and
/// where it goes ([`To`]), with an optional timeout. For what this does not cover, build the
/// table and edit the generated [`Route`] it holds.
#[derive(Clone, Debug)]
#[must_use]
pub struct RouteRule {
    route: Route,
}

impl RouteRule {
    /// Requests whose path starts with `prefix`.
    pub fn prefix(prefix: impl Into<String>, to: To) -> Self {
        Self::new(route_match::PathSpecifier::Prefix(prefix.into()), to)
    }

    /// Requests whose path is `path` exactly.
    pub fn path(path: impl Into<String>, to: To) -> Self {
        Self::new(route_match::PathSpecifier::Path(path.into()), to)
    }

    fn new(path: route_match::PathSpecifier, to: To) -> Self {
        RouteRule {
            route: Route {
                r#match: Some(RouteMatch { path_specifier: Some(path), ..Default::default() }),
                action: Some(route::Action::Route(RouteAction {
                    cluster_specifier: Some(to.0),
                    ..Default::default()
                })),
                ..Default::default()
            },
        }
    }

    /// Matches only requests whose header `name` is `value` exactly (every header added must
    /// match).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Some(m) = self.route.r#match.as_mut() {
            m.headers.push(HeaderMatcher {
                name: name.into(),
                header_match_specifier: Some(header_matcher::HeaderMatchSpecifier::StringMatch(
                    StringMatcher {
                        match_pattern: Some(string_matcher::MatchPattern::Exact(value.into())),
                        ..Default::default()
                    },
                )),
                ..Default::default()
            });
        }
        self
    }

    /// How long the upstream has to answer the whole request (Envoy's default is 15 s; zero
    /// turns the timeout off).
    pub fn timeout(mut self, timeout: std::time::Duration) -> Self {
        if let Some(route::Action::Route(action)) = self.route.action.as_mut() {
            action.timeout = Some(PbDuration {
                seconds: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
                nanos: i32::try_from(timeout.subsec_nanos()).unwrap_or(0),
            });
        }
        self
    }
}

/// A TLS certificate secret from PEM text held inline (the key travels in the resource: serve it
/// only to the node it belongs to, see the server's authorization policy).
pub fn tls_secret(name: &str, certificate_chain_pem: &str, private_key_pem: &str) -> Secret {
    let inline = |pem: &str| DataSource {
        specifier: Some(data_source::Specifier::InlineString(pem.into())),
        ..Default::default()
    };
    Secret {
        name: name.into(),
        r#type: Some(secret::Type::TlsCertificate(TlsCertificate {
            certificate_chain: Some(inline(certificate_chain_pem)),
            private_key: Some(inline(private_key_pem)),
            ..Default::default()
        })),
    }
}
