//! Benchmarks of the caches' update paths: what one changed resource costs the writer.
//!
//! - `linear_upsert_one_cla/{100,10000}`: one changed ClusterLoadAssignment upserted into a
//!   `LinearCache` of N assignments (3 endpoints each) watched by 1,000 streams that never read.
//! - `snapshot_set_one_changed_of_10000`: the next snapshot of 5,000 clusters and 5,000
//!   assignments from `to_builder()` with one changed assignment, built and set.
//! - `snapshot_set_snapshot_only_of_10000`: `set_snapshot` alone, alternating two prebuilt
//!   snapshots that differ in one assignment.
//! - `snapshot_clear_group_of_40000`: `clear_snapshot` of a group of 40,000 clusters (each
//!   iteration sets the group up first, untimed).
//! - `snapshot_replace/{N}`: `set_snapshot` alternating two snapshots of N clusters with no name in
//!   common: N deletions and N creations per call. N is 20,000 and 100,000, or the list in
//!   `XDS_BENCH_REPLACE_N` (comma-separated, e.g. `1000000`).
//!
//! Smoke run: `cargo bench -p xds-cache --bench cache -- --test`.
#![allow(clippy::unwrap_used)] // setup failures should abort the benchmark

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BatchSize, BenchmarkId, Criterion};
use xds_cache::{
    Cache, LinearCache, Signal, Snapshot, SnapshotCache, Variant, Watch, WatchRequest,
};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use xds_proto::pb::envoy::config::core::v3::address::Address as AddressKind;
use xds_proto::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use xds_proto::pb::envoy::config::core::v3::{Address, Node, SocketAddress};
use xds_proto::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use xds_proto::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use xds_proto::{ResourceType, TypeUrl};

/// An assignment of three endpoints; `generation` moves their port.
fn cla(name: &str, generation: u32) -> ClusterLoadAssignment {
    let endpoint = |i: u32| LbEndpoint {
        host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
            address: Some(Address {
                address: Some(AddressKind::SocketAddress(SocketAddress {
                    address: format!("10.0.0.{i}"),
                    port_specifier: Some(PortSpecifier::PortValue(8000 + generation)),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        })),
        ..Default::default()
    };
    ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: (1..=3).map(endpoint).collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn eds_cluster(name: &str) -> Cluster {
    Cluster {
        name: name.into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        ..Default::default()
    }
}

fn linear_upsert_one_cla(c: &mut Criterion) {
    let mut group = c.benchmark_group("linear_upsert_one_cla");
    for n in [100usize, 10_000] {
        let cache = LinearCache::of::<ClusterLoadAssignment>();
        for i in 0..n {
            cache.upsert(&cla(&format!("cla-{i:05}"), 0)).unwrap();
        }
        let type_url = TypeUrl::from(ResourceType::ClusterLoadAssignment);
        // 1,000 streams whose signals nobody awaits.
        let watches: Vec<Box<dyn Watch>> = (0..1_000)
            .map(|i| {
                let node = Node { id: format!("node-{i}"), ..Default::default() };
                let request =
                    WatchRequest { node: &node, type_url: &type_url, variant: Variant::Delta };
                cache.watch(request, Arc::new(Signal::new())).unwrap()
            })
            .collect();
        let versions = [cla("cla-00042", 1), cla("cla-00042", 2)];
        let mut flip = 0;
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                flip ^= 1;
                let changed = cache.upsert(black_box(&versions[flip])).unwrap();
                assert!(changed);
            });
        });
        drop(watches);
    }
    group.finish();
}

/// 5,000 EDS clusters and their 5,000 assignments.
fn ten_thousand() -> Snapshot {
    let mut b = Snapshot::builder();
    for i in 0..5_000 {
        let name = format!("service-{i:04}");
        b.add(&eds_cluster(&name)).unwrap();
        b.add(&cla(&name, 0)).unwrap();
    }
    b.build_unchecked()
}

fn snapshot_set_one_changed(c: &mut Criterion) {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("group", ten_thousand());
    let versions = [cla("service-0042", 1), cla("service-0042", 2)];
    let mut flip = 0;
    c.bench_function("snapshot_set_one_changed_of_10000", |b| {
        b.iter(|| {
            flip ^= 1;
            let mut next = cache.snapshot("group").unwrap().to_builder();
            next.add(black_box(&versions[flip])).unwrap();
            let changed = cache.set_snapshot("group", next.build_unchecked());
            assert_eq!(changed, 1);
        });
    });

    let cache = SnapshotCache::by_node_id();
    let first = ten_thousand();
    let second = first.to_builder().add(&versions[1]).unwrap().build_unchecked();
    cache.set_snapshot("group", first.clone());
    let snapshots = [first, second];
    let mut flip = 0;
    c.bench_function("snapshot_set_snapshot_only_of_10000", |b| {
        b.iter(|| {
            flip ^= 1;
            let changed = cache.set_snapshot("group", snapshots[flip].clone());
            assert_eq!(changed, 1);
        });
    });
}

/// `n` STATIC clusters named `{prefix}-{i}`.
fn clusters(prefix: &str, n: usize) -> Snapshot {
    let mut b = Snapshot::builder();
    for i in 0..n {
        b.add(&Cluster { name: format!("{prefix}-{i:07}"), ..Default::default() }).unwrap();
    }
    b.build_unchecked()
}

fn snapshot_clear_and_replace(c: &mut Criterion) {
    let forty = clusters("c", 40_000);
    c.bench_function("snapshot_clear_group_of_40000", |b| {
        b.iter_batched(
            || {
                let cache = SnapshotCache::by_node_id();
                cache.set_snapshot("group", forty.clone());
                cache
            },
            |cache| {
                cache.clear_snapshot("group");
                cache
            },
            BatchSize::PerIteration,
        );
    });
    drop(forty);

    let sizes: Vec<usize> = match std::env::var("XDS_BENCH_REPLACE_N") {
        Ok(list) => list.split(',').map(|n| n.trim().parse().unwrap()).collect(),
        Err(_) => vec![20_000, 100_000],
    };
    let mut group = c.benchmark_group("snapshot_replace");
    for n in sizes {
        let snapshots = [clusters("a", n), clusters("b", n)];
        let cache = SnapshotCache::by_node_id();
        cache.set_snapshot("group", snapshots[0].clone());
        let mut flip = 0;
        group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| {
                flip ^= 1;
                let changed = cache.set_snapshot("group", snapshots[flip].clone());
                assert_eq!(changed, 2 * n);
            });
        });
    }
    group.finish();
}

fn main() {
    // What `criterion_group!`/`criterion_main!` expand to, written out so that the crate has no
    // undocumented public function.
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    linear_upsert_one_cla(&mut c);
    snapshot_set_one_changed(&mut c);
    snapshot_clear_and_replace(&mut c);
    c.final_summary();
}
