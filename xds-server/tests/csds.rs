//! CSDS over gRPC: the status of a real ADS client that ACKs one type and NACKs another.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use xds_cache::{Snapshot, SnapshotCache};
use xds_proto::ResourceType;
use xds_proto::pb::envoy::admin::v3::ClientResourceStatus;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_proto::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use xds_proto::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use xds_proto::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use xds_proto::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
use xds_proto::pb::envoy::service::status::v3::{
    ClientStatusRequest, ClientStatusResponse, ConfigStatus,
};
use xds_proto::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use xds_proto::pb::envoy::r#type::matcher::v3::{NodeMatcher, StringMatcher};
use xds_proto::pb::google::rpc::Status as RpcStatus;
use xds_server::XdsServer;

const NODE: &str = "envoy-1";

/// Serves every gRPC service of `server` on a loopback port.
async fn serve(server: &XdsServer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = futures_util::stream::unfold(listener, |l| async move {
        Some((l.accept().await.map(|(s, _)| s), l))
    });
    let routes = server.routes();
    tokio::spawn(async move {
        tonic::transport::Server::builder().add_routes(routes).serve_with_incoming(incoming).await
    });
    addr
}

async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap()
}

fn request(t: ResourceType, names: &[&str]) -> DiscoveryRequest {
    DiscoveryRequest {
        type_url: t.type_url().into(),
        resource_names: names.iter().map(|n| (*n).to_owned()).collect(),
        ..Default::default()
    }
}

fn answer(
    to: &DiscoveryResponse,
    names: &[&str],
    error: Option<&str>,
    kept: &str,
) -> DiscoveryRequest {
    DiscoveryRequest {
        version_info: kept.to_owned(),
        response_nonce: to.nonce.clone(),
        error_detail: error.map(|m| RpcStatus { code: 3, message: m.into(), details: vec![] }),
        ..request(ResourceType::from_type_url(&to.type_url).unwrap(), names)
    }
}

fn find<'a>(
    r: &'a ClientStatusResponse,
    t: ResourceType,
    name: &str,
) -> Option<&'a GenericXdsConfig> {
    r.config
        .iter()
        .flat_map(|c| &c.generic_xds_configs)
        .find(|g| g.type_url == t.type_url() && g.name == name)
}

fn by_id(matcher: MatchPattern) -> ClientStatusRequest {
    ClientStatusRequest {
        node_matchers: vec![NodeMatcher {
            node_id: Some(StringMatcher { ignore_case: false, match_pattern: Some(matcher) }),
            node_metadatas: vec![],
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn csds_reports_acked_and_nacked_types() {
    let cache = SnapshotCache::by_node_id();
    let mut snapshot = Snapshot::builder();
    snapshot.add(&Cluster { name: "web".into(), ..Default::default() }).unwrap();
    snapshot
        .add(&ClusterLoadAssignment { cluster_name: "web".into(), ..Default::default() })
        .unwrap();
    cache.set_snapshot(NODE, snapshot.build_unchecked());
    let server = XdsServer::new(cache.clone());
    let addr = serve(&server).await;

    // An ADS client: clusters (wildcard) then endpoints for `web` and a name that does not exist.
    let (tx, rx) = mpsc::channel(8);
    let mut ads = AggregatedDiscoveryServiceClient::new(channel(addr).await);
    let first = DiscoveryRequest {
        node: Some(Node { id: NODE.into(), cluster: "edge".into(), ..Default::default() }),
        ..request(ResourceType::Cluster, &[])
    };
    tx.send(first).await.unwrap();
    let mut responses =
        ads.stream_aggregated_resources(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let cds = responses.message().await.unwrap().unwrap();
    assert_eq!(cds.resources.len(), 1);
    tx.send(answer(&cds, &[], None, &cds.version_info)).await.unwrap(); // ACK (rule S4)

    let eds_names = ["web", "not-yet"];
    tx.send(request(ResourceType::ClusterLoadAssignment, &eds_names)).await.unwrap();
    let eds = responses.message().await.unwrap().unwrap();
    assert_eq!(eds.type_url, ResourceType::ClusterLoadAssignment.type_url());
    tx.send(answer(&eds, &eds_names, Some("bad endpoint: no port"), "")).await.unwrap(); // NACK (rule S5)

    // The server handles the ACK and NACK without answering them: poll until the NACK shows.
    let mut csds = ClientStatusDiscoveryServiceClient::new(channel(addr).await);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        let status =
            csds.fetch_client_status(ClientStatusRequest::default()).await.unwrap().into_inner();
        let nacked = find(&status, ResourceType::ClusterLoadAssignment, "web")
            .is_some_and(|g| g.client_status == ClientResourceStatus::Nacked as i32);
        if nacked {
            break status;
        }
        assert!(Instant::now() < deadline, "no NACK in the status: {status:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    assert_eq!(status.config.len(), 1);
    let node = status.config[0].node.as_ref().unwrap();
    assert_eq!((node.id.as_str(), node.cluster.as_str()), (NODE, "edge"));

    let web = find(&status, ResourceType::Cluster, "web").unwrap();
    assert_eq!(web.client_status, ClientResourceStatus::Acked as i32);
    assert_eq!(web.config_status, ConfigStatus::Synced as i32);
    assert_eq!(web.version_info, cds.version_info);
    assert!(web.error_state.is_none());

    let cla = find(&status, ResourceType::ClusterLoadAssignment, "web").unwrap();
    assert_eq!(cla.config_status, ConfigStatus::Error as i32);
    assert_eq!(cla.version_info, "", "the client kept no version");
    let error = cla.error_state.as_ref().unwrap();
    assert_eq!(error.details, "bad endpoint: no port");
    assert_eq!(error.version_info, eds.version_info, "the rejected version");
    assert!(error.last_update_attempt.is_some());

    // Requested, answered, and found not to exist (rules S9, S13): the client was told so with
    // NOT_FOUND in resource_errors (rule C4), which CSDS shows as a received error.
    let missing = find(&status, ResourceType::ClusterLoadAssignment, "not-yet").unwrap();
    assert_eq!(missing.client_status, ClientResourceStatus::ReceivedError as i32);

    // Node matchers select nodes.
    let some =
        csds.fetch_client_status(by_id(MatchPattern::Prefix("envoy-".into()))).await.unwrap();
    assert_eq!(some.into_inner().config.len(), 1);
    let none = csds.fetch_client_status(by_id(MatchPattern::Exact("other".into()))).await.unwrap();
    assert!(none.into_inner().config.is_empty());

    // The same status as JSON, from the registry, with when each type's response was sent.
    let json = server.status().to_json();
    assert_eq!(json["streams"][0]["node_id"], NODE);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let sent_ms =
        json["streams"][0]["types"][ResourceType::ClusterLoadAssignment.type_url()]["sent_ms"]
            .as_u64()
            .unwrap();
    assert!(now_ms - 10_000 < sent_ms && sent_ms <= now_ms, "sent {sent_ms}, now {now_ms}");
    drop(tx);
}

#[tokio::test]
async fn stream_client_status_answers_every_request() {
    let cache = SnapshotCache::by_node_id();
    let server = XdsServer::new(cache);
    let addr = serve(&server).await;
    let mut csds = ClientStatusDiscoveryServiceClient::new(channel(addr).await);

    let (tx, rx) = mpsc::channel(4);
    tx.send(ClientStatusRequest::default()).await.unwrap();
    let mut responses =
        csds.stream_client_status(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let first = responses.message().await.unwrap().unwrap();
    assert!(first.config.is_empty(), "no client yet");

    // A client connects; the next request on the same stream sees it.
    let mut ads = AggregatedDiscoveryServiceClient::new(channel(addr).await);
    let (ads_tx, ads_rx) = mpsc::channel(4);
    ads_tx
        .send(DiscoveryRequest {
            node: Some(Node { id: NODE.into(), ..Default::default() }),
            ..request(ResourceType::Cluster, &[])
        })
        .await
        .unwrap();
    let _ads = ads.stream_aggregated_resources(ReceiverStream::new(ads_rx)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        tx.send(ClientStatusRequest::default()).await.unwrap();
        let status = responses.message().await.unwrap().unwrap();
        if let Some(config) = status.config.first() {
            assert_eq!(config.node.as_ref().unwrap().id, NODE);
            break;
        }
        assert!(Instant::now() < deadline, "the client never showed up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A request the server cannot honour ends this stream with its status.
    let metadata = NodeMatcher { node_id: None, node_metadatas: vec![Default::default()] };
    tx.send(ClientStatusRequest { node_matchers: vec![metadata], ..Default::default() })
        .await
        .unwrap();
    let err = responses.message().await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unimplemented);
    drop(ads_tx);
}
