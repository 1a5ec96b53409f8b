//! Health discovery (HDS) over the wire: the specifier per node, reported health in the view
//! and the metrics, disconnects, bounds.
#![allow(clippy::unwrap_used)]

mod util;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};
use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::config::core::v3::address::Address as AddressKind;
use xds_proto::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use xds_proto::pb::envoy::config::core::v3::{Address, HealthStatus, Node, SocketAddress};
use xds_proto::pb::envoy::config::endpoint::v3::Endpoint;
use xds_proto::pb::envoy::service::health::v3::health_check_request_or_endpoint_health_response::RequestType;
use xds_proto::pb::envoy::service::health::v3::health_discovery_service_client::HealthDiscoveryServiceClient;
use xds_proto::pb::envoy::service::health::v3::{
    ClusterEndpointsHealth, ClusterHealthCheck, EndpointHealth, EndpointHealthResponse,
    HealthCheckRequest, HealthCheckRequestOrEndpointHealthResponse, HealthCheckSpecifier,
    LocalityEndpoints, LocalityEndpointsHealth,
};
use xds_server::hds::{HdsConfig, HealthCheckProvider, HealthDiscoveryServer};
use xds_server::{Callbacks, Refusal, StreamInfo, XdsServer};

use util::*;

/// Each node checks the cluster named after its id's first letter (no endpoints), and
/// `web`'s endpoints 10.0.0.0 to 10.0.0.9, port 80.
fn spec(node: &Node) -> HealthCheckSpecifier {
    let ips: Vec<String> = (0..10).map(|i| format!("10.0.0.{i}")).collect();
    HealthCheckSpecifier {
        cluster_health_checks: vec![
            ClusterHealthCheck {
                cluster_name: format!("cluster-{}", &node.id[..1]),
                ..Default::default()
            },
            checks("web", &ips.iter().map(String::as_str).collect::<Vec<_>>()),
        ],
        ..Default::default()
    }
}

/// Checks of `cluster`'s endpoints at `ips`, port 80.
fn checks(cluster: &str, ips: &[&str]) -> ClusterHealthCheck {
    ClusterHealthCheck {
        cluster_name: cluster.into(),
        locality_endpoints: vec![LocalityEndpoints {
            locality: None,
            endpoints: ips.iter().map(|ip| endpoint(ip)).collect(),
        }],
        ..Default::default()
    }
}

struct RefuseBad;

impl Callbacks for RefuseBad {
    fn on_node(&self, _: &StreamInfo, node: &Node) -> Result<(), Refusal> {
        if node.id == "bad" { Err(Refusal("not you".into())) } else { Ok(()) }
    }
}

async fn server_with(config: HdsConfig) -> TestServer {
    let hds = HealthDiscoveryServer::new(spec).config(config);
    start(
        XdsServer::builder(SnapshotCache::by_node_id())
            .callbacks(RefuseBad)
            .health_discovery(hds)
            .build(),
    )
    .await
}

struct Hds {
    tx: mpsc::Sender<HealthCheckRequestOrEndpointHealthResponse>,
    rx: Streaming<HealthCheckSpecifier>,
}

impl Hds {
    async fn open(t: &TestServer, node_id: &str) -> Hds {
        let (tx, rx) = mpsc::channel(8);
        let response = HealthDiscoveryServiceClient::new(t.channel().await)
            .stream_health_check(ReceiverStream::new(rx))
            .await
            .expect("open HDS");
        let hds = Hds { tx, rx: response.into_inner() };
        hds.send(RequestType::HealthCheckRequest(HealthCheckRequest {
            node: Some(node(node_id)),
            capability: None,
        }))
        .await;
        hds
    }

    async fn send(&self, r: RequestType) {
        self.tx
            .send(HealthCheckRequestOrEndpointHealthResponse { request_type: Some(r) })
            .await
            .expect("the request stream is closed");
    }

    async fn recv(&mut self) -> Result<HealthCheckSpecifier, Status> {
        tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("no response in time")
            .map(|m| m.expect("the stream ended"))
    }

    async fn report(&self, cluster: &str, endpoints: &[(&str, HealthStatus)]) {
        let endpoints_health = endpoints
            .iter()
            .map(|(ip, s)| EndpointHealth {
                endpoint: Some(endpoint(ip)),
                health_status: *s as i32,
                ..Default::default()
            })
            .collect();
        self.send(RequestType::EndpointHealthResponse(EndpointHealthResponse {
            cluster_endpoints_health: vec![ClusterEndpointsHealth {
                cluster_name: cluster.into(),
                locality_endpoints_health: vec![LocalityEndpointsHealth {
                    locality: None,
                    endpoints_health,
                }],
            }],
            ..Default::default()
        }))
        .await;
    }
}

fn endpoint(ip: &str) -> Endpoint {
    Endpoint {
        address: Some(Address {
            address: Some(AddressKind::SocketAddress(SocketAddress {
                address: ip.into(),
                port_specifier: Some(PortSpecifier::PortValue(80)),
                ..Default::default()
            })),
        }),
        ..Default::default()
    }
}

fn hds_of(t: &TestServer) -> &HealthDiscoveryServer {
    t.server.health_discovery().expect("HDS is served")
}

#[tokio::test]
async fn each_node_gets_its_specifier_on_its_first_request() {
    let t = server_with(HdsConfig::default()).await;
    let mut a = Hds::open(&t, "a1").await;
    let mut b = Hds::open(&t, "b1").await;
    assert_eq!(a.recv().await.unwrap().cluster_health_checks[0].cluster_name, "cluster-a");
    assert_eq!(b.recv().await.unwrap().cluster_health_checks[0].cluster_name, "cluster-b");
}

#[tokio::test]
async fn reported_health_from_two_nodes_is_in_the_view_and_the_metrics() {
    let t = server_with(HdsConfig::default()).await;
    let mut a = Hds::open(&t, "a1").await;
    let mut b = Hds::open(&t, "a2").await;
    a.recv().await.unwrap();
    b.recv().await.unwrap();
    a.report("web", &[("10.0.0.1", HealthStatus::Healthy), ("10.0.0.2", HealthStatus::Unhealthy)])
        .await;
    b.report("web", &[("10.0.0.1", HealthStatus::Healthy), ("10.0.0.2", HealthStatus::Healthy)])
        .await;
    eventually("two responses", || hds_of(&t).snapshot().responses == 2).await;
    let view = hds_of(&t).snapshot();
    let web = &view.clusters["web"];
    assert!(web["10.0.0.1:80"].is_healthy());
    assert!(!web["10.0.0.2:80"].is_healthy(), "one node sees it down");
    assert_eq!(web["10.0.0.2:80"].by_node["a1"], HealthStatus::Unhealthy);
    let metrics = hds_of(&t).render_metrics();
    assert!(
        metrics.contains("xds_hds_endpoints{cluster=\"web\",status=\"healthy\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("xds_hds_endpoints{cluster=\"web\",status=\"unhealthy\"} 1"),
        "{metrics}"
    );

    // A newer response replaces the node's last one.
    a.report("web", &[("10.0.0.2", HealthStatus::Healthy)]).await;
    eventually("the newer response", || hds_of(&t).snapshot().responses == 3).await;
    let view = hds_of(&t).snapshot();
    assert!(view.clusters["web"]["10.0.0.2:80"].is_healthy());
    assert_eq!(view.clusters["web"]["10.0.0.1:80"].by_node.len(), 1, "a1 no longer reports .1");
}

#[tokio::test]
async fn a_node_that_disconnects_leaves_the_view() {
    let t = server_with(HdsConfig::default()).await;
    let mut a = Hds::open(&t, "a1").await;
    a.recv().await.unwrap();
    a.report("web", &[("10.0.0.1", HealthStatus::Unhealthy)]).await;
    eventually("the report", || hds_of(&t).snapshot().clusters.contains_key("web")).await;
    drop(a);
    eventually("a1 leaves", || hds_of(&t).snapshot().streams == 0).await;
    assert!(hds_of(&t).snapshot().clusters.is_empty());
}

#[tokio::test]
async fn a_refused_node_gets_permission_denied() {
    let t = server_with(HdsConfig::default()).await;
    let mut bad = Hds::open(&t, "bad").await;
    assert_eq!(bad.recv().await.unwrap_err().code(), Code::PermissionDenied);
    assert_eq!(hds_of(&t).rejected("refused"), 1);
}

#[tokio::test]
async fn too_many_endpoints_are_cut_and_counted() {
    let mut config = HdsConfig::default();
    config.max_endpoints_per_stream = 3;
    let t = server_with(config).await;
    let mut a = Hds::open(&t, "a1").await;
    a.recv().await.unwrap();
    let ips: Vec<String> = (0..10).map(|i| format!("10.0.0.{i}")).collect();
    let list: Vec<_> = ips.iter().map(|ip| (ip.as_str(), HealthStatus::Healthy)).collect();
    a.report("web", &list).await;
    eventually("the report", || hds_of(&t).snapshot().responses == 1).await;
    assert_eq!(hds_of(&t).snapshot().clusters["web"].len(), 3);
    assert_eq!(hds_of(&t).rejected("too_many_endpoints"), 7);
}

#[tokio::test]
async fn reports_of_endpoints_never_asked_about_are_dropped_and_counted() {
    let t = server_with(HdsConfig::default()).await;
    let mut a = Hds::open(&t, "a1").await;
    a.recv().await.unwrap();
    // 10.0.0.1 in web was asked for; 10.9.9.9 in web and anything in "elsewhere" were not.
    a.report("web", &[("10.0.0.1", HealthStatus::Healthy), ("10.9.9.9", HealthStatus::Unhealthy)])
        .await;
    eventually("the report", || hds_of(&t).snapshot().responses == 1).await;
    a.report("elsewhere", &[("10.0.0.1", HealthStatus::Unhealthy)]).await;
    eventually("the second report", || hds_of(&t).snapshot().responses == 2).await;
    let view = hds_of(&t).snapshot();
    assert!(!view.clusters.contains_key("elsewhere"), "{view:?}");
    assert_eq!(hds_of(&t).rejected("unknown_endpoint"), 2);
    assert!(
        hds_of(&t)
            .render_metrics()
            .contains("xds_hds_rejected_total{reason=\"unknown_endpoint\"} 2")
    );
    // The last response replaces the stream's health: it had nothing that was asked for.
    assert!(view.clusters.is_empty(), "{view:?}");
}

/// A provider whose specifier the test changes.
#[derive(Clone)]
struct Changing(std::sync::Arc<std::sync::Mutex<HealthCheckSpecifier>>);

impl HealthCheckProvider for Changing {
    fn specifier(&self, _: &Node) -> HealthCheckSpecifier {
        self.0.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn a_changed_specifier_is_sent_to_open_streams_and_decides_what_they_may_report() {
    let web = |ips: &[&str]| HealthCheckSpecifier {
        cluster_health_checks: vec![checks("web", ips)],
        ..Default::default()
    };
    let provider = Changing(std::sync::Arc::new(std::sync::Mutex::new(web(&["10.0.0.1"]))));
    let hds = HealthDiscoveryServer::new(provider.clone());
    let t =
        start(XdsServer::builder(SnapshotCache::by_node_id()).health_discovery(hds).build()).await;
    let mut a = Hds::open(&t, "a1").await;
    assert_eq!(a.recv().await.unwrap(), web(&["10.0.0.1"]));

    // Unchanged: nothing is sent. Changed: the new specifier is.
    hds_of(&t).specifiers_changed();
    *provider.0.lock().unwrap() = web(&["10.0.0.2"]);
    hds_of(&t).specifiers_changed();
    assert_eq!(a.recv().await.unwrap(), web(&["10.0.0.2"]));

    // From now on only 10.0.0.2 may be reported.
    a.report("web", &[("10.0.0.1", HealthStatus::Healthy), ("10.0.0.2", HealthStatus::Healthy)])
        .await;
    eventually("the report", || hds_of(&t).snapshot().responses == 1).await;
    let view = hds_of(&t).snapshot();
    assert_eq!(view.clusters["web"].keys().collect::<Vec<_>>(), vec!["10.0.0.2:80"]);
    assert_eq!(hds_of(&t).rejected("unknown_endpoint"), 1);
}

#[tokio::test]
async fn an_hds_stream_that_never_sends_its_first_request_ends_with_deadline_exceeded() {
    let mut config = HdsConfig::default();
    config.first_request_timeout = std::time::Duration::from_millis(200);
    let t = server_with(config).await;
    let (_tx, rx) = mpsc::channel::<HealthCheckRequestOrEndpointHealthResponse>(1);
    let mut responses = HealthDiscoveryServiceClient::new(t.channel().await)
        .stream_health_check(ReceiverStream::new(rx))
        .await
        .expect("open HDS")
        .into_inner();
    assert!(hds_of(&t).render_metrics().contains("xds_hds_streams_pending"));
    let status = tokio::time::timeout(WAIT, responses.message())
        .await
        .expect("the server ended the stream in time")
        .expect_err("the stream ends with an error");
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(hds_of(&t).rejected("first_request_timeout"), 1);
    assert_eq!(hds_of(&t).pending_streams(), 0);
}

/// The last responses of every stream share one budget: a stream whose response would pass it
/// is ended with `RESOURCE_EXHAUSTED` and the reason, the others go on, and what every stream
/// held comes back when they end.
#[tokio::test]
async fn a_stream_past_the_total_budget_is_refused_and_its_share_given_back() {
    let mut config = HdsConfig::default();
    config.max_total_entries = 15;
    let t = server_with(config).await;
    let mut a = Hds::open(&t, "a1").await;
    let mut b = Hds::open(&t, "a2").await;
    a.recv().await.unwrap();
    b.recv().await.unwrap();
    let ips: Vec<String> = (0..10).map(|i| format!("10.0.0.{i}")).collect();
    let list: Vec<_> = ips.iter().map(|ip| (ip.as_str(), HealthStatus::Healthy)).collect();
    a.report("web", &list).await;
    eventually("a's report", || hds_of(&t).held().1 == 10).await;
    // A response replaces the stream's last one in the budget too: a's next one fits.
    a.report("web", &list).await;
    eventually("a's second report", || hds_of(&t).snapshot().responses == 2).await;
    assert_eq!(hds_of(&t).held().1, 10);

    b.report("web", &list).await;
    let status = b.recv().await.expect_err("b is ended");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("budget of"), "{}", status.message());
    assert_eq!(hds_of(&t).rejected("over_budget"), 1);
    eventually("b gone", || hds_of(&t).snapshot().streams == 1).await;
    assert_eq!(hds_of(&t).held().1, 10);
    assert_eq!(hds_of(&t).snapshot().clusters["web"]["10.0.0.1:80"].by_node.len(), 1);
    let metrics = hds_of(&t).render_metrics();
    assert!(metrics.contains("xds_hds_held_entries 10"), "{metrics}");

    drop(a);
    eventually("a gone", || hds_of(&t).snapshot().streams == 0).await;
    assert_eq!(hds_of(&t).held(), (0, 0));
}

#[tokio::test]
async fn an_hds_stream_sending_faster_than_its_rate_is_ended() {
    let mut config = HdsConfig::default();
    config.max_reports_per_second = 1;
    config.report_burst = 3;
    let t = server_with(config).await;
    let mut a = Hds::open(&t, "a1").await;
    a.recv().await.unwrap();
    for _ in 0..6 {
        a.report("web", &[("10.0.0.1", HealthStatus::Healthy)]).await;
    }
    let status = a.recv().await.expect_err("the stream is ended");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("1 per second (burst 3)"), "{}", status.message());
    assert_eq!(hds_of(&t).rejected("rate_limited"), 1);
}

#[tokio::test]
async fn the_console_shows_reported_endpoint_health_not_healthy_first() {
    let t = server_with(HdsConfig::default()).await;
    let mut a = Hds::open(&t, "a1").await;
    a.recv().await.unwrap();
    a.report("web", &[("10.0.0.1", HealthStatus::Healthy), ("10.0.0.2", HealthStatus::Unhealthy)])
        .await;
    eventually("a response", || hds_of(&t).snapshot().responses == 1).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = listener.local_addr().unwrap();
    let router = t.server.admin_router();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let reply = util::raw_http::request(admin, "GET", "/ui/api/health", "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let health = reply.json();
    assert_eq!(health["enabled"], true);
    assert_eq!(health["streams"], 1);
    let clusters = health["clusters"].as_array().unwrap();
    let web = clusters.iter().find(|c| c["name"] == "web").expect("web is listed");
    assert_eq!(web["endpoints_total"], 2, "{health}");
    assert_eq!(web["healthy"], 1);
    assert_eq!(web["endpoints"][0]["address"], "10.0.0.2:80", "not healthy first");
    assert_eq!(
        web["endpoints"][0]["nodes"][0],
        serde_json::json!({"node": "a1", "status": "unhealthy"})
    );
    assert_eq!(web["endpoints"][1]["healthy"], true);
}
