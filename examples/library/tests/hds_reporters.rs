//! The `hds-to-eds` example takes health only from authorized reporters: one anonymous
//! reporter used to be able to mark every endpoint unhealthy for every client.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use xds_server::cache::LinearCache;
use xds_examples::health::{Reporters, assignment, specifier};
use xds_server::proto::pb::envoy::config::core::v3::{HealthStatus, Node};
use xds_server::proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_server::proto::pb::envoy::service::health::v3::health_check_request_or_endpoint_health_response::RequestType;
use xds_server::proto::pb::envoy::service::health::v3::health_discovery_service_client::HealthDiscoveryServiceClient;
use xds_server::proto::pb::envoy::service::health::v3::{
    ClusterEndpointsHealth, EndpointHealth, EndpointHealthResponse, HealthCheckRequest,
    HealthCheckRequestOrEndpointHealthResponse, LocalityEndpointsHealth,
};
use xds_server::authz::{Access, Entry, Request};
use xds_server::hds::HealthDiscoveryServer;
use xds_server::{Authorizer, Peer, ServerConfig, XdsServer};

const WAIT: Duration = Duration::from_secs(5);

fn node(id: &str) -> Node {
    Node { id: id.into(), ..Default::default() }
}

/// A peer whose (verified, as far as this check goes) certificate names `names`.
fn peer(names: &[&str]) -> Peer {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let der = rcgen::generate_simple_self_signed(names).unwrap().cert.der().to_vec();
    Peer { remote_addr: None, certificates: Some(Arc::new(vec![der])) }
}

fn report(policy: &Reporters, peer: &Peer, id: &str) -> Result<(), String> {
    let node = node(id);
    let request = Request { peer, entry: Entry::Stream, access: Access::Report { node: &node } };
    policy.authorize(&request).map_err(|r| r.0)
}

#[test]
fn only_a_listed_reporter_proven_by_its_certificate_may_report() {
    let policy = Reporters::new(["reporter-1"]);
    assert_eq!(report(&policy, &peer(&["reporter-1"]), "reporter-1"), Ok(()));
    let anonymous = report(&policy, &Peer::default(), "reporter-1").unwrap_err();
    assert!(anonymous.contains("certificate is required"), "{anonymous}");
    let other = report(&policy, &peer(&["envoy-7"]), "reporter-1").unwrap_err();
    assert!(other.contains("does not name it"), "{other}");
    let unlisted = report(&policy, &peer(&["envoy-7"]), "envoy-7").unwrap_err();
    assert!(unlisted.contains("not on the allow list"), "{unlisted}");
    // Reading configuration stays open to anyone, as in the rest of the example.
    let t =
        xds_server::proto::TypeUrl::from(xds_server::proto::ResourceType::ClusterLoadAssignment);
    let n = node("anyone");
    let read = Request {
        peer: &Peer::default(),
        entry: Entry::Stream,
        access: Access::Resources { node: &n, type_url: &t },
    };
    assert!(policy.authorize(&read).is_ok());
}

/// The finding, over the wire: an anonymous stream reports every endpoint unhealthy. It is
/// refused with `PERMISSION_DENIED`, and the assignment every client is served is unchanged.
#[tokio::test]
async fn an_anonymous_reporter_cannot_mark_endpoints_unhealthy() {
    let cla = LinearCache::of::<ClusterLoadAssignment>();
    let server = XdsServer::builder(cla)
        .config(ServerConfig::default().allow_anonymous(true))
        .authorizer(Reporters::new(["reporter-1"]))
        .health_discovery(HealthDiscoveryServer::new(specifier))
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(
        xds_server::tonic::transport::Server::builder()
            .add_routes(server.routes())
            .serve_with_incoming(incoming),
    );
    let channel = xds_server::tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();

    // It claims a listed reporter's id, without the certificate to prove it.
    let (tx, rx) = mpsc::channel(4);
    let mut responses = HealthDiscoveryServiceClient::new(channel)
        .stream_health_check(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let send = |r| HealthCheckRequestOrEndpointHealthResponse { request_type: Some(r) };
    tx.send(send(RequestType::HealthCheckRequest(HealthCheckRequest {
        node: Some(node("reporter-1")),
        capability: None,
    })))
    .await
    .unwrap();
    let checked = specifier(&node("x")).cluster_health_checks[0].locality_endpoints[0].clone();
    let unhealthy = |i: usize| EndpointHealth {
        endpoint: Some(checked.endpoints[i].clone()),
        health_status: HealthStatus::Unhealthy as i32,
        ..Default::default()
    };
    let _ = tx
        .send(send(RequestType::EndpointHealthResponse(EndpointHealthResponse {
            cluster_endpoints_health: vec![ClusterEndpointsHealth {
                cluster_name: "backend".into(),
                locality_endpoints_health: vec![LocalityEndpointsHealth {
                    locality: None,
                    endpoints_health: vec![unhealthy(0), unhealthy(1)],
                }],
            }],
            ..Default::default()
        })))
        .await;
    let status = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("an answer in time")
        .expect_err("the stream is refused");
    assert_eq!(status.code(), xds_server::tonic::Code::PermissionDenied, "{status:?}");

    let hds = server.health_discovery().unwrap();
    assert_eq!(hds.rejected("refused"), 1);
    let view = hds.snapshot();
    assert!(view.clusters.is_empty(), "{view:?}");
    let served = assignment(&view);
    assert!(
        served.endpoints[0]
            .lb_endpoints
            .iter()
            .all(|e| e.health_status != HealthStatus::Unhealthy as i32),
        "{served:?}"
    );
}
