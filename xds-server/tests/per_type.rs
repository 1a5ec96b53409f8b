//! The per-type services over the wire: `StreamClusters`, `StreamEndpoints`, `DeltaClusters`,
//! `DeltaVirtualHosts`.

mod util;

use tonic::Code;
use xds_cache::{LinearCache, SnapshotCache};
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};

use util::*;

// rules S3, S10, S11
#[tokio::test]
async fn s03_stream_clusters_with_an_empty_type_url_is_served() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1")]);
    let t = serve(cache.clone()).await;
    let mut cds = Sotw::clusters(&t, "n1").await;
    cds.send(DiscoveryRequest::default()).await;
    let r1 = cds.recv_type(CDS).await;
    assert_eq!(sotw_names(&r1), ["a", "b"]);
    cds.ack(&r1).await;
    // A per-type stream has no make-before-break to wait for: a deletion is sent at once.
    cache.set_snapshot("n1", snapshot![cluster("a", "2")]);
    let r2 = cds.recv_type(CDS).await;
    assert_eq!(sotw_names(&r2), ["a"]);
    cds.ack(&r2).await;
    cds.expect_quiet().await;
}

// rule S3
#[tokio::test]
async fn s03_per_type_stream_with_another_type_url_is_refused_naming_both() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let mut cds = Sotw::clusters(&t, "n1").await;
    cds.send(DiscoveryRequest { type_url: url(LDS), ..Default::default() }).await;
    assert_status(&cds.recv_err().await, Code::InvalidArgument, &[LDS.type_url(), CDS.type_url()]);

    let mut delta = Delta::clusters(&t, "n1").await;
    delta.send(DeltaDiscoveryRequest { type_url: url(EDS), ..Default::default() }).await;
    assert_status(
        &delta.recv_err().await,
        Code::InvalidArgument,
        &[EDS.type_url(), CDS.type_url()],
    );
}

// rules S3, S9, S12
#[tokio::test]
async fn stream_endpoints_over_a_linear_cache() {
    let endpoints = LinearCache::of::<ClusterLoadAssignment>();
    endpoints.upsert(&cla("a", 1)).expect("upsert");
    endpoints.upsert(&cla("b", 1)).expect("upsert");
    let t = serve(endpoints.clone()).await;
    let mut eds = Sotw::endpoints(&t, "n1").await;
    eds.send(DiscoveryRequest { resource_names: names(&["a"]), ..Default::default() }).await;
    let r1 = eds.recv_type(EDS).await;
    assert_eq!(sotw_names(&r1), ["a"]);
    eds.ack(&r1).await;
    eds.expect_quiet().await;
    // b changes: not subscribed, nothing sent; a changes: sent.
    endpoints.upsert(&cla("b", 2)).expect("upsert");
    eds.expect_quiet().await;
    endpoints.upsert(&cla("a", 2)).expect("upsert");
    let r2 = eds.recv_type(EDS).await;
    assert_eq!(sotw_names(&r2), ["a"]);
    assert_eq!(r2.version_info, endpoints.version());
    eds.subscribe(EDS, &["a", "b"], Some(&r2)).await;
    let r3 = eds.recv_type(EDS).await;
    assert_eq!(sotw_names(&r3), ["b"], "only the newly requested one (not full state)");
}

// rules D4, D5, D8
#[tokio::test]
async fn delta_clusters_wildcard_updates_and_removals() {
    let clusters = LinearCache::of::<xds_proto::pb::envoy::config::cluster::v3::Cluster>();
    clusters.upsert(&cluster("a", "1")).expect("upsert");
    let t = serve(clusters.clone()).await;
    let mut cds = Delta::clusters(&t, "n1").await;
    // A first request without names and without type URL: a legacy wildcard.
    cds.send(DeltaDiscoveryRequest::default()).await;
    let r = cds.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["a"]);
    cds.ack(&r).await;
    clusters.upsert(&cluster("b", "1")).expect("upsert");
    let r = cds.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["b"]);
    cds.ack(&r).await;
    assert!(clusters.delete("a"));
    let r = cds.recv_type(CDS).await;
    assert_eq!(r.removed_resources, ["a"]);
    assert!(r.resources.is_empty());
    cds.ack(&r).await;
    cds.expect_quiet().await;

    // Rule D8: a wildcard stream that names a resource stays a wildcard only with `*`.
    let mut explicit = Delta::clusters(&t, "n2").await;
    explicit.subscribe(CDS, &["*", "b"], &[]).await;
    let r = explicit.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["b"]);
    explicit.ack(&r).await;
    clusters.upsert(&cluster("c", "1")).expect("upsert");
    let r = explicit.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["c"]);
    explicit.ack(&r).await;
}

// rules D9, D10, D6
#[tokio::test]
async fn delta_virtual_hosts_by_alias() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot(
        "n1",
        snapshot![
            virtual_host("ns/rc/vh1", &["foo.com", "*.foo.com"]),
            virtual_host("ns/rc/vh2", &["*"]),
            virtual_host("other/vh", &["bar.com"]),
        ],
    );
    let t = serve(cache.clone()).await;
    let mut vhds = Delta::virtual_hosts(&t, "n1").await;
    // Aliases are matched right to left: the route configuration is `ns/rc`.
    vhds.send(DeltaDiscoveryRequest {
        resource_names_subscribe: names(&["ns/rc/www.foo.com", "ns/rc/bar.com", "other/baz.com"]),
        ..Default::default()
    })
    .await;
    let r = vhds.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["ns/rc/vh1", "ns/rc/vh2"]);
    assert_eq!(delta_resource(&r, "ns/rc/vh1").aliases, ["ns/rc/www.foo.com"]);
    assert_eq!(delta_resource(&r, "ns/rc/vh2").aliases, ["ns/rc/bar.com"]);
    let unknown = delta_resource(&r, "other/baz.com");
    assert!(unknown.resource.is_none());
    assert_eq!(unknown.aliases, ["other/baz.com"]);
    vhds.ack(&r).await;
    // Subscribing by the resource's own name works too.
    vhds.subscribe(VHDS, &["other/vh"], &[]).await;
    let r = vhds.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["other/vh"]);
    assert!(delta_resource(&r, "other/vh").aliases.is_empty());
}
