//! The unary `Fetch*` RPCs over the wire, with long poll.

mod util;

use std::time::{Duration, Instant};

use tonic::Code;
use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::service::discovery::v3::DiscoveryRequest;
use xds_server::{ServerConfig, XdsServer};

use util::*;

async fn server(cache: &SnapshotCache, fetch_timeout: Duration) -> TestServer {
    let config = ServerConfig::default().fetch_timeout(fetch_timeout);
    start(XdsServer::builder(cache.clone()).config(config).build()).await
}

fn request(version: &str, list: &[&str]) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(node("n1")),
        type_url: url(CDS),
        version_info: version.into(),
        resource_names: names(list),
        ..Default::default()
    }
}

// rules R2 (over gRPC), S9
#[tokio::test]
async fn fetch_clusters_at_another_version_answers_at_once() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1")]);
    let t = server(&cache, Duration::from_secs(10)).await;
    let mut cds = t.cds().await;
    let started = Instant::now();
    let all = cds.fetch_clusters(request("", &[])).await.expect("fetch").into_inner();
    assert_eq!(sotw_names(&all), ["a", "b"]);
    assert_eq!(all.type_url, url(CDS));
    assert!(!all.version_info.is_empty());
    let some =
        cds.fetch_clusters(request("old", &["b", "nope"])).await.expect("fetch").into_inner();
    assert_eq!(sotw_names(&some), ["b"]);
    assert_eq!(some.version_info, all.version_info);
    assert!(started.elapsed() < Duration::from_secs(2), "answered without waiting");
}

// rule R2 (over gRPC)
#[tokio::test]
async fn fetch_clusters_at_the_current_version_waits_then_deadline_exceeded() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let timeout = Duration::from_millis(300);
    let t = server(&cache, timeout).await;
    let mut cds = t.cds().await;
    let current = cds.fetch_clusters(request("", &[])).await.expect("fetch").into_inner();
    let started = Instant::now();
    let status =
        cds.fetch_clusters(request(&current.version_info, &[])).await.expect_err("not modified");
    let waited = started.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(waited >= timeout, "answered after {waited:?}, before the fetch timeout");
    assert!(waited < timeout + Duration::from_secs(2), "waited {waited:?}");
}

// rule R2 (over gRPC)
#[tokio::test]
async fn fetch_clusters_at_the_current_version_answers_when_it_changes() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let t = server(&cache, Duration::from_secs(10)).await;
    let mut cds = t.cds().await;
    let current = cds.fetch_clusters(request("", &[])).await.expect("fetch").into_inner();
    let writer = cache.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        writer.set_snapshot("n1", snapshot![cluster("a", "2"), cluster("c", "1")]);
    });
    let started = Instant::now();
    let next = tokio::time::timeout(WAIT, cds.fetch_clusters(request(&current.version_info, &[])))
        .await
        .expect("answered in time")
        .expect("fetch")
        .into_inner();
    assert!(started.elapsed() >= Duration::from_millis(150), "it waited for the change");
    assert_ne!(next.version_info, current.version_info);
    assert_eq!(sotw_names(&next), ["a", "c"]);
}

// rules S2, S3 (over gRPC fetch)
#[tokio::test]
async fn fetch_clusters_refuses_bad_requests() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let t = server(&cache, Duration::from_secs(10)).await;
    let mut cds = t.cds().await;
    let mut anonymous = request("", &[]);
    anonymous.node = None;
    let status = cds.fetch_clusters(anonymous).await.expect_err("no node");
    assert_status(&status, Code::InvalidArgument, &["node"]);
    let mut wrong = request("", &[]);
    wrong.type_url = url(LDS);
    let status = cds.fetch_clusters(wrong).await.expect_err("wrong type");
    assert_status(&status, Code::InvalidArgument, &[LDS.type_url(), CDS.type_url()]);
    // An empty type URL is implied by the service.
    let mut implied = request("", &[]);
    implied.type_url.clear();
    let r = cds.fetch_clusters(implied).await.expect("fetch").into_inner();
    assert_eq!(sotw_names(&r), ["a"]);
}
