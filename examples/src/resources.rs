//! Builders for the resources the examples (and benchmarks) serve.

use xds_proto::pb::envoy::config::cluster::v3::{Cluster, cluster};
use xds_proto::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ApiVersion, ConfigSource, SocketAddress, address,
    config_source, socket_address,
};
use xds_proto::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use xds_proto::pb::google::protobuf::UInt32Value;

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
                address: Some(Address {
                    address: Some(address::Address::SocketAddress(SocketAddress {
                        address: (*host).to_owned(),
                        port_specifier: Some(socket_address::PortSpecifier::PortValue(*port)),
                        ..Default::default()
                    })),
                }),
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
