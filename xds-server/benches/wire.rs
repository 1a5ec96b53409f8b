//! Benchmarks of the response encoding (see the module text below).
//! The cost of writing one SotW response of 100 ClusterLoadAssignments (3 endpoints each):
//! from the cache's encoded bytes (`SotwWire`, what the server does) against encoding the prost
//! messages for every response (what a server without encode-once does), and for N streams.

use criterion::{BenchmarkId, Criterion, Throughput};
use prost::Message;
use xds_core::SotwResponse;
use xds_proto::pb::envoy::config::core::v3::{Address, SocketAddress, address, socket_address};
use xds_proto::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints, lb_endpoint,
};
use xds_proto::pb::envoy::service::discovery::v3::DiscoveryResponse;
use xds_proto::pb::google::protobuf::Any;
use xds_proto::{EncodedResource, ResourceType, TypeUrl};
use xds_server::SotwWire;

fn cla(i: usize) -> ClusterLoadAssignment {
    let lb_endpoints = (0..3)
        .map(|j| LbEndpoint {
            host_identifier: Some(lb_endpoint::HostIdentifier::Endpoint(Endpoint {
                address: Some(Address {
                    address: Some(address::Address::SocketAddress(SocketAddress {
                        address: format!("10.0.{}.{j}", i % 250),
                        port_specifier: Some(socket_address::PortSpecifier::PortValue(8080)),
                        ..Default::default()
                    })),
                }),
                ..Default::default()
            })),
            ..Default::default()
        })
        .collect();
    ClusterLoadAssignment {
        cluster_name: format!("cluster-{i}"),
        endpoints: vec![LocalityLbEndpoints { lb_endpoints, ..Default::default() }],
        ..Default::default()
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args().sample_size(30);
    let messages: Vec<ClusterLoadAssignment> = (0..100).map(cla).collect();
    let encoded: Vec<EncodedResource> =
        messages.iter().map(|m| EncodedResource::new(m).expect("named")).collect();
    let type_url = TypeUrl::from(ResourceType::ClusterLoadAssignment);

    let mut group = c.benchmark_group("sotw_response_100_cla");
    group.bench_function("from_encoded_bytes", |b| {
        b.iter(|| {
            let response = SotwResponse {
                shared: None,
                version_info: "v1".into(),
                nonce: "1".into(),
                resources: encoded.clone(),
                heartbeat: false,
                resource_errors: Vec::new(),
            };
            SotwWire::new(&type_url, response, None).encode_to_vec()
        })
    });
    group.bench_function("prost_encode_per_response", |b| {
        b.iter(|| {
            DiscoveryResponse {
                version_info: "v1".into(),
                resources: messages
                    .iter()
                    .map(|m| Any { type_url: type_url.as_str().into(), value: m.encode_to_vec() })
                    .collect(),
                type_url: type_url.as_str().into(),
                nonce: "1".into(),
                ..Default::default()
            }
            .encode_to_vec()
        })
    });
    group.finish();

    let mut group = c.benchmark_group("sotw_response_100_cla_to_n_streams");
    for streams in [1usize, 10, 100] {
        group.throughput(Throughput::Elements(streams as u64));
        group.bench_with_input(BenchmarkId::from_parameter(streams), &streams, |b, &n| {
            b.iter(|| {
                (0..n)
                    .map(|_| {
                        let response = SotwResponse {
                            shared: None,
                            version_info: "v1".into(),
                            nonce: "1".into(),
                            resources: encoded.clone(),
                            heartbeat: false,
                            resource_errors: Vec::new(),
                        };
                        SotwWire::new(&type_url, response, None).encode_to_vec().len()
                    })
                    .sum::<usize>()
            })
        });
    }
    group.finish();
    c.final_summary();
}
