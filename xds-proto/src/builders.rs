//! Builders for the resources most control planes serve: an EDS cluster over ADS, endpoints from
//! addresses, a listener with the HTTP connection manager over RDS, a route, a TLS secret.
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
    Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost, route, route_action,
    route_match,
};
use crate::pb::envoy::extensions::filters::http::router::v3::Router;
use crate::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, HttpFilter, Rds, http_connection_manager, http_filter,
};
use crate::pb::envoy::extensions::transport_sockets::tls::v3::{Secret, TlsCertificate, secret};
use crate::pb::google::protobuf::{Any, UInt32Value};
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
