//! Limits over the wire: each ends only the offending stream, with a status naming the limit.

mod util;

use tonic::Code;
use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use xds_server::{Limits, ServerConfig, XdsServer};

use util::*;

async fn server(cache: &SnapshotCache, limits: Limits) -> TestServer {
    let config = ServerConfig::default().limits(limits);
    start(XdsServer::builder(cache.clone()).config(config).build()).await
}

/// A client on another stream that checks it still gets updates: subscribes to clusters and
/// returns the stream after the first response was ACKed.
async fn bystander(t: &TestServer) -> Sotw {
    let mut s = Sotw::ads(t, "n1").await;
    s.subscribe(CDS, &[], None).await;
    let r = s.recv_type(CDS).await;
    s.ack(&r).await;
    s
}

/// Changes the clusters and checks that `s` hears of it.
async fn still_served(cache: &SnapshotCache, s: &mut Sotw, tag: &str) {
    cache.set_snapshot("n1", snapshot![cluster("a", tag)]);
    let r = s.recv_type(CDS).await;
    assert_eq!(sotw_names(&r), ["a"]);
    s.ack(&r).await;
}

#[tokio::test]
async fn max_names_per_request_is_invalid_argument() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "0")]);
    let t = server(&cache, Limits::default()).await;
    let mut other = bystander(&t).await;

    // The default (262,144) takes an Envoy of 100,000 clusters asking for all their endpoints.
    let hundred_thousand: Vec<String> = (0..100_000).map(|i| format!("c{i}")).collect();
    // (Its first response tells 100,000 names absent: 5 MB, beyond a client's default 4 MiB.)
    let mut client = t.ads().await.max_decoding_message_size(64 << 20);
    let mut large =
        Delta::open(
            Some(node("n1")),
            |r| async move { client.delta_aggregated_resources(r).await },
        )
        .await
        .expect("open delta ADS");
    large
        .send(DeltaDiscoveryRequest {
            type_url: url(EDS),
            resource_names_subscribe: hundred_thousand,
            ..Default::default()
        })
        .await;
    let first = large.recv_type(EDS).await;
    assert_eq!(first.resources.len(), 100_000, "each name answered");
    assert!(first.resources.iter().all(|r| r.resource.is_none()), "none of them exists yet");
    large.ack(&first).await;
    let many: Vec<String> = (0..300_000).map(|i| format!("c{i}")).collect();
    let mut greedy = Sotw::ads(&t, "n1").await;
    greedy
        .send(DiscoveryRequest { type_url: url(CDS), resource_names: many, ..Default::default() })
        .await;
    let status = greedy.recv_err().await;
    assert_status(&status, Code::InvalidArgument, &["262144", "300000"]);
    still_served(&cache, &mut other, "1").await;
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cla("c7", 1)]);
    let r = large.recv_type(EDS).await;
    let sent: Vec<(&str, bool)> =
        r.resources.iter().map(|r| (r.name.as_str(), r.resource.is_some())).collect();
    assert_eq!(sent, [("c7", true)], "the large subscription is served what changed");

    // A limit set lower: exactly at it is fine, beyond is refused.
    let t = server(&cache, Limits::default().max_names_per_request(65_536)).await;
    let mut other = bystander(&t).await;
    let limit: Vec<String> = (0..65_536).map(|i| format!("c{i}")).collect();
    let mut full = Sotw::ads(&t, "n1").await;
    full.send(DiscoveryRequest { type_url: url(CDS), resource_names: limit, ..Default::default() })
        .await;
    let r = full.recv_type(CDS).await;
    assert!(r.resources.is_empty(), "none of the names is a cluster");
    still_served(&cache, &mut other, "2").await;

    // The same on delta (subscribed names) and on a unary fetch.
    let many: Vec<String> = (0..100_000).map(|i| format!("c{i}")).collect();
    let mut delta = Delta::ads(&t, "n1").await;
    delta
        .send(DeltaDiscoveryRequest {
            type_url: url(EDS),
            resource_names_subscribe: many.clone(),
            ..Default::default()
        })
        .await;
    assert_status(&delta.recv_err().await, Code::InvalidArgument, &["65536"]);
    let fetch =
        DiscoveryRequest { node: Some(node("n1")), resource_names: many, ..Default::default() };
    let status = t.cds().await.fetch_clusters(fetch).await.expect_err("too many names");
    assert_status(&status, Code::InvalidArgument, &["65536"]);
    still_served(&cache, &mut other, "3").await;
}

#[tokio::test]
async fn request_rate_beyond_the_limit_is_resource_exhausted() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "0")]);
    let limits = Limits::default().max_requests_per_second(5).request_burst(5);
    let t = server(&cache, limits).await;
    let mut other = bystander(&t).await;
    let mut spinner = Sotw::ads(&t, "n1").await;
    for _ in 0..50 {
        spinner.subscribe(CDS, &[], None).await;
    }
    let status = spinner.recv_err().await;
    assert_status(&status, Code::ResourceExhausted, &["too many requests"]);
    assert!(t.metrics().contains("xds_refused_total{reason=\"rate_limit\"} 1"));
    still_served(&cache, &mut other, "1").await;
}

#[tokio::test]
async fn max_streams_is_resource_exhausted() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "0")]);
    let t = server(&cache, Limits::default().max_streams(2)).await;
    let mut one = bystander(&t).await;
    let two = Sotw::clusters(&t, "n1").await;
    let mut client = t.ads().await;
    let refused = Sotw::open(None, |r| async move { client.stream_aggregated_resources(r).await })
        .await
        .err()
        .expect("a third stream is refused");
    assert_status(&refused, Code::ResourceExhausted, &["2"]);
    still_served(&cache, &mut one, "1").await;
    // A closed stream makes room.
    drop(two);
    eventually("the stream closed", || t.server.status().len() == 1).await;
    let mut three = bystander(&t).await;
    still_served(&cache, &mut three, "2").await;
}

#[tokio::test]
async fn max_request_bytes_ends_only_the_offending_stream() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "0")]);
    let t = server(&cache, Limits::default().max_request_bytes(16 << 10)).await;
    let mut other = bystander(&t).await;
    let mut big = Sotw::ads(&t, "n1").await;
    big.subscribe(CDS, &[&"x".repeat(32 << 10)], None).await;
    // The stream ends (see the next test for the status it should end with).
    let _ = big.recv_end().await;
    still_served(&cache, &mut other, "1").await;
    // A request just under the limit is served.
    let mut fits = Sotw::ads(&t, "n1").await;
    fits.subscribe(CDS, &[&"x".repeat(15 << 10)], None).await;
    assert!(fits.recv_type(CDS).await.resources.is_empty());
}

#[tokio::test]
async fn max_request_bytes_is_resource_exhausted() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "0")]);
    let t = server(&cache, Limits::default().max_request_bytes(16 << 10)).await;
    let mut big = Sotw::ads(&t, "n1").await;
    big.subscribe(CDS, &[&"x".repeat(32 << 10)], None).await;
    let status = big.recv_end().await.expect("the stream ends with an error status");
    assert!(
        matches!(status.code(), Code::ResourceExhausted | Code::OutOfRange),
        "refused with {status:?}"
    );
}

#[tokio::test]
async fn a_compressed_request_stream_is_unimplemented_with_the_reason() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let server = XdsServer::new(SnapshotCache::by_node_id());
    let request = http::Request::post(
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
    )
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .header("grpc-encoding", "gzip")
    .body(axum::body::Body::empty())
    .unwrap();
    let response =
        server.routes().into_axum_router().oneshot(request).await.expect("routing is infallible");
    // Trailers-only: the status is in the headers.
    assert_eq!(response.headers()["grpc-status"], "12", "UNIMPLEMENTED");
    let message = response.headers()["grpc-message"].to_str().unwrap().to_owned();
    assert!(message.contains("gzip"), "{message}");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert!(body.is_empty());
}

/// A SotW request whose names are read lazily (digested first, decoded only when they changed)
/// is still refused when a name is not UTF-8: INVALID_ARGUMENT saying why, as prost's decoding
/// refused it before.
#[tokio::test]
async fn a_sotw_name_that_is_not_utf8_is_invalid_argument() {
    use http_body_util::BodyExt;
    use prost::Message;
    use tower::ServiceExt;

    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let server = XdsServer::new(cache);
    let mut message = DiscoveryRequest {
        node: Some(node("n1")),
        type_url: url(EDS),
        resource_names: names(&["a"]),
        ..Default::default()
    }
    .encode_to_vec();
    // One more name: the bytes C3 28 are not UTF-8.
    message.extend([0x1a, 2, 0xc3, 0x28]);
    let mut frame = vec![0];
    frame.extend((message.len() as u32).to_be_bytes());
    frame.extend(message);
    let request = http::Request::post(
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
    )
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(axum::body::Body::from(frame))
    .unwrap();
    let response =
        server.routes().into_axum_router().oneshot(request).await.expect("routing is infallible");
    let trailers = response.into_body().collect().await.unwrap().trailers().cloned();
    let trailers = trailers.expect("the stream ends with a status");
    assert_eq!(trailers["grpc-status"], "3", "INVALID_ARGUMENT");
    let message = trailers["grpc-message"].to_str().unwrap().to_owned();
    assert!(message.contains("malformed") && message.contains("UTF-8"), "{message}");
}

#[tokio::test]
async fn delta_subscriptions_past_max_subscribed_names_are_resource_exhausted() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "0")]);
    let limits = Limits::default().max_subscribed_names(1_000);
    let t = server(&cache, limits).await;
    let mut other = bystander(&t).await;

    // Each request is well under max_names_per_request; together they pass the bound.
    let mut greedy = Delta::ads(&t, "n1").await;
    for batch in 0..3 {
        let names: Vec<String> = (0..400).map(|i| format!("c{batch}-{i}")).collect();
        greedy
            .send(DeltaDiscoveryRequest {
                type_url: url(EDS),
                resource_names_subscribe: names,
                ..Default::default()
            })
            .await;
    }
    let status = greedy.recv_err().await;
    assert_status(&status, Code::ResourceExhausted, &["at most 1000 names", "1200"]);
    assert!(t.metrics().contains("xds_refused_total{reason=\"max_subscribed_names\"} 1"));
    still_served(&cache, &mut other, "1").await;
}

#[tokio::test]
async fn an_oversized_node_ends_the_stream_naming_the_limit() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "0")]);
    let t = server(&cache, Limits::default()).await;
    let mut other = bystander(&t).await;

    let mut s = Sotw::ads(&t, &"n".repeat(5_000)).await;
    s.subscribe(CDS, &[], None).await;
    assert_status(&s.recv_err().await, Code::InvalidArgument, &["node.id is 5000 bytes", "4096"]);
    still_served(&cache, &mut other, "1").await;
}
