//! Resources with a time to live: the server renews them with heartbeats (`Resource.ttl`).
#![allow(clippy::unwrap_used)] // helpers outside #[test] fail loudly by design

mod util;

use std::time::Duration;

use prost::{Message, Name};
use util::*;
use xds_cache::LinearCache;
use xds_proto::pb::envoy::service::discovery::v3::Resource;
use xds_proto::{EncodedResource, ResourceType};

fn cache_with_ttl(ttl: Duration) -> LinearCache {
    let cache =
        LinearCache::of::<xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment>();
    let r = EncodedResource::new(&cla("web", 8080)).unwrap().with_ttl(ttl);
    cache.upsert_encoded(r).unwrap();
    cache
}

#[tokio::test]
async fn delta_heartbeats_renew_ttl_resources_without_a_body() {
    let server = serve(cache_with_ttl(Duration::from_millis(400))).await;
    let mut client = Delta::ads(&server, "envoy-1").await;
    client.subscribe(ResourceType::ClusterLoadAssignment, &["web"], &[]).await;
    let first = client.recv().await;
    let sent = &first.resources[0];
    assert!(sent.resource.is_some());
    assert_eq!(sent.ttl.unwrap().nanos, 400_000_000);
    client.ack(&first).await;
    // Within half the TTL after the response, a heartbeat: same name and version, no body.
    let heartbeat = client.recv().await;
    let beat = &heartbeat.resources[0];
    assert_eq!((beat.name.as_str(), beat.version.as_str()), ("web", sent.version.as_str()));
    assert!(beat.resource.is_none());
    assert!(beat.ttl.is_some());
    client.ack(&heartbeat).await;
    // And again, for as long as the client holds it.
    let again = client.recv().await;
    assert!(again.resources[0].resource.is_none());
}

#[tokio::test]
async fn sotw_ttl_resources_are_wrapped_and_renewed() {
    let server = serve(cache_with_ttl(Duration::from_millis(400))).await;
    let mut client = Sotw::ads(&server, "envoy-1").await;
    client.subscribe(ResourceType::ClusterLoadAssignment, &["web"], None).await;
    let first = client.recv().await;
    assert_eq!(first.resources[0].type_url, Resource::type_url());
    let wrapped = Resource::decode(&*first.resources[0].value).unwrap();
    assert!(wrapped.resource.is_some() && wrapped.ttl.is_some());
    client.ack(&first).await;
    let heartbeat = client.recv().await;
    assert_eq!(heartbeat.version_info, first.version_info);
    let beat = Resource::decode(&*heartbeat.resources[0].value).unwrap();
    assert_eq!((beat.name.as_str(), beat.version.as_str()), ("web", wrapped.version.as_str()));
    assert!(beat.resource.is_none());
}

#[tokio::test]
async fn no_heartbeats_without_ttl() {
    let cache =
        LinearCache::of::<xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment>();
    cache.upsert(&cla("web", 8080)).unwrap();
    let server = serve(cache).await;
    let mut client = Delta::ads(&server, "envoy-1").await;
    client.subscribe(ResourceType::ClusterLoadAssignment, &["web"], &[]).await;
    let first = client.recv().await;
    client.ack(&first).await;
    client.expect_quiet().await;
}
