//! The custom cache of `xds_examples::inventory`, served by a real `XdsServer` to real streams:
//! it answers, it updates (sending only what changed, deletions included), and a thousand streams
//! coming and going leave no signal registered.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use xds_examples::inventory::Inventory;
use xds_server::proto::pb::envoy::config::core::v3::Node;
use xds_server::proto::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use xds_server::proto::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest,
};
use xds_server::proto::{ResourceType, TypeUrl};

const WAIT: Duration = Duration::from_secs(5);

async fn serve(inventory: Inventory) -> xds_server::tonic::transport::Channel {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        xds_server::tonic::transport::Server::builder()
            .add_routes(xds_server::XdsServer::new(inventory).routes())
            .serve_with_incoming(incoming),
    );
    xds_server::tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn eds_request(name: &str, version: &str, nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(Node { id: "envoy-1".into(), ..Default::default() }),
        type_url: TypeUrl::from(ResourceType::ClusterLoadAssignment).to_string(),
        resource_names: vec![name.into()],
        version_info: version.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

/// Waits until `inventory.watching()` is `expected`, or fails.
async fn watching(inventory: &Inventory, expected: usize) {
    let start = Instant::now();
    while inventory.watching() != expected {
        assert!(start.elapsed() < WAIT, "{} watching, expected {expected}", inventory.watching());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_thousand_streams_come_and_go_and_no_signal_stays_registered() {
    let inventory = Inventory::default();
    inventory.set_service("payments", &[9001, 9002]).unwrap();
    let mut client = AggregatedDiscoveryServiceClient::new(serve(inventory.clone()).await);

    for _ in 0..1_000 {
        let (tx, rx) = mpsc::channel(4);
        tx.send(eds_request("payments", "", "")).await.unwrap();
        let mut responses =
            client.stream_aggregated_resources(ReceiverStream::new(rx)).await.unwrap().into_inner();
        let first =
            tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
        assert_eq!(first.resources.len(), 1);
        drop((tx, responses)); // the client goes away
    }
    watching(&inventory, 0).await;
}

#[tokio::test]
async fn a_change_reaches_an_open_stream_with_a_new_content_hash_version() {
    let inventory = Inventory::default();
    inventory.set_service("payments", &[9001]).unwrap();
    let mut client = AggregatedDiscoveryServiceClient::new(serve(inventory.clone()).await);
    let (tx, rx) = mpsc::channel(4);
    tx.send(eds_request("payments", "", "")).await.unwrap();
    let mut responses =
        client.stream_aggregated_resources(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let first = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
    watching(&inventory, 1).await;
    tx.send(eds_request("payments", &first.version_info, &first.nonce)).await.unwrap();

    inventory.set_service("payments", &[9001, 9002]).unwrap();
    let second = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
    assert_ne!(second.version_info, first.version_info);

    // The same content gives the same version in another process or replica (rule S16).
    let replica = Inventory::default();
    replica.set_service("payments", &[9001, 9002]).unwrap();
    let mut other = AggregatedDiscoveryServiceClient::new(serve(replica).await);
    let (tx2, rx2) = mpsc::channel(4);
    tx2.send(eds_request("payments", "", "")).await.unwrap();
    let mut responses2 =
        other.stream_aggregated_resources(ReceiverStream::new(rx2)).await.unwrap().into_inner();
    let on_replica =
        tokio::time::timeout(WAIT, responses2.message()).await.unwrap().unwrap().unwrap();
    assert_eq!(on_replica.version_info, second.version_info);
}

/// A delta wildcard stream of clusters over ADS, with its first response.
async fn delta_clusters(
    inventory: &Inventory,
) -> (mpsc::Sender<DeltaDiscoveryRequest>, xds_server::tonic::Streaming<DeltaDiscoveryResponse>) {
    let mut client = AggregatedDiscoveryServiceClient::new(serve(inventory.clone()).await);
    let (tx, rx) = mpsc::channel(4);
    let subscribe = DeltaDiscoveryRequest {
        node: Some(Node { id: "envoy-1".into(), ..Default::default() }),
        type_url: TypeUrl::from(ResourceType::Cluster).to_string(),
        ..Default::default()
    };
    tx.send(subscribe).await.unwrap();
    let responses =
        client.delta_aggregated_resources(ReceiverStream::new(rx)).await.unwrap().into_inner();
    (tx, responses)
}

async fn next_delta(
    tx: &mpsc::Sender<DeltaDiscoveryRequest>,
    responses: &mut xds_server::tonic::Streaming<DeltaDiscoveryResponse>,
) -> (Vec<String>, Vec<String>) {
    let response = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
    let ack = DeltaDiscoveryRequest {
        type_url: response.type_url.clone(),
        response_nonce: response.nonce.clone(),
        ..Default::default()
    };
    tx.send(ack).await.unwrap();
    let names = response.resources.iter().map(|r| r.name.clone()).collect();
    (names, response.removed_resources)
}

#[tokio::test]
async fn a_change_sends_only_what_changed_and_a_removal_is_reported_as_one() {
    let inventory = Inventory::default();
    for service in ["payments", "search", "ledger"] {
        inventory.set_service(service, &[9001]).unwrap();
    }
    let (tx, mut responses) = delta_clusters(&inventory).await;
    let (first, _) = next_delta(&tx, &mut responses).await;
    assert_eq!(first, ["ledger", "payments", "search"]);

    inventory.set_service("audit", &[9101]).unwrap();
    assert_eq!(next_delta(&tx, &mut responses).await, (vec!["audit".to_owned()], vec![]));
    // New endpoints of an existing service leave its cluster as it is: nothing is sent.
    inventory.set_service("payments", &[9001, 9002]).unwrap();
    inventory.remove_service("search");
    assert_eq!(next_delta(&tx, &mut responses).await, (vec![], vec!["search".to_owned()]));
}

/// The issue asks for a custom cache with change tracking in at most 30 lines of cache code:
/// the example is that cache, counted without blank lines, comments and `use` lines.
#[test]
fn the_custom_cache_example_is_at_most_30_lines_of_cache_code() {
    let source = include_str!("../src/inventory.rs");
    let code = source
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with("use "));
    let lines = code.count();
    assert!(lines <= 30, "src/inventory.rs has {lines} lines of cache code");
}
