//! A node whose group has no configuration used to wait in silence: the stream shows it in its
//! status and in `xds_streams_unserved`, and `ServerConfig::unserved_timeout` ends it with a
//! reason the client and the operator can read.
#![allow(clippy::unwrap_used)]

mod util;

use std::time::Duration;

use xds_cache::SnapshotCache;
use xds_server::{ServerConfig, XdsServer};

use util::*;

/// The status of the streams of `node_id` on `t`.
fn streams_of(t: &TestServer, node_id: &str) -> Vec<serde_json::Value> {
    let page = t.server.status().page_json(Some(node_id), 0, 100);
    page["streams"].as_array().unwrap().clone()
}

fn unserved_gauge(t: &TestServer) -> f64 {
    let text = t.metrics();
    let value = text.lines().find_map(|l| l.strip_prefix("xds_streams_unserved "));
    value.expect("the gauge is rendered").parse().unwrap()
}

#[tokio::test]
async fn a_node_whose_group_has_no_configuration_is_shown_waiting_until_it_gets_one() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("served", snapshot![cluster("a", "1")]);
    let t = serve(cache.clone()).await;
    let mut served = Sotw::ads(&t, "served").await;
    served.subscribe(CDS, &[], None).await;
    served.recv().await;
    let mut waiting = Sotw::ads(&t, "typo-in-node-id").await;
    waiting.subscribe(CDS, &[], None).await;

    eventually("the waiting stream is shown unserved", || {
        let streams = streams_of(&t, "typo-in-node-id");
        streams.len() == 1 && streams[0]["unserved_since_ms"].as_u64().is_some()
    })
    .await;
    let stream = &streams_of(&t, "typo-in-node-id")[0];
    assert_eq!(stream["unserved_types"], serde_json::json!(["cluster"]));
    assert_eq!(stream["group"], "typo-in-node-id");
    assert!(streams_of(&t, "served")[0].get("unserved_since_ms").is_none());
    assert_eq!(unserved_gauge(&t), 1.0);
    waiting.expect_quiet().await;

    // The group gets its configuration: the stream is served, and no longer shown waiting.
    cache.set_snapshot("typo-in-node-id", snapshot![cluster("b", "1")]);
    assert_eq!(waiting.recv().await.resources.len(), 1);
    eventually("the stream is served", || {
        streams_of(&t, "typo-in-node-id")[0].get("unserved_since_ms").is_none()
    })
    .await;
    assert_eq!(unserved_gauge(&t), 0.0);
}

#[tokio::test]
async fn an_unserved_stream_that_ends_leaves_the_gauge() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let mut waiting = Sotw::ads(&t, "nobody").await;
    waiting.subscribe(CDS, &[], None).await;
    eventually("one stream unserved", || unserved_gauge(&t) == 1.0).await;
    drop(waiting);
    eventually("no stream unserved", || unserved_gauge(&t) == 0.0).await;
}

#[tokio::test]
async fn with_a_timeout_an_unserved_stream_ends_failed_precondition_naming_node_and_group() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("served", snapshot![cluster("a", "1")]);
    let server = XdsServer::builder(cache).unserved_timeout(Duration::from_millis(300)).build();
    let t = start(server).await;
    let mut served = Sotw::ads(&t, "served").await;
    served.subscribe(CDS, &[], None).await;
    let first = served.recv().await;
    served.ack(&first).await;
    let mut waiting = Sotw::ads(&t, "nobody").await;
    waiting.subscribe(CDS, &[], None).await;

    let status = waiting.recv_err().await;
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("\"nobody\""), "{}", status.message());
    assert!(status.message().contains("group \"nobody\""), "{}", status.message());
    assert!(status.message().contains("cluster"), "{}", status.message());
    assert!(t.metrics().contains("xds_refused_total{reason=\"unserved\"} 1"));
    eventually("the ended stream leaves the gauge", || unserved_gauge(&t) == 0.0).await;
    // A served stream is not ended, however long it lives.
    served.expect_quiet().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(streams_of(&t, "served").len(), 1);
}

#[tokio::test]
async fn a_timeout_of_zero_refuses_an_unserved_node_at_once() {
    let config = ServerConfig::default().unserved_timeout(Duration::ZERO);
    let t = start(XdsServer::builder(SnapshotCache::by_node_id()).config(config).build()).await;
    let mut waiting = Sotw::ads(&t, "nobody").await;
    waiting.subscribe(CDS, &[], None).await;
    let status = tokio::time::timeout(Duration::from_secs(1), waiting.recv_err()).await.unwrap();
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
}
