//! Trust boundaries, over the wire: each test sends the request that leaked or hurt
//! before, and shows it refused or bounded while a legitimate client keeps its updates.
#![allow(clippy::unwrap_used)]

mod util;

use std::path::PathBuf;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
use tokio::io::AsyncReadExt;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::discovery::v3::DiscoveryRequest;
use xds_proto::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use xds_proto::pb::envoy::service::secret::v3::secret_discovery_service_client::SecretDiscoveryServiceClient;
use xds_proto::pb::envoy::service::status::v3::ClientStatusRequest;
use xds_proto::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
use xds_server::transport::{Incoming, TransportConfig, tls_config};
use xds_server::{MAX_NACK_TEXT, NodeIdentity, Peer, XdsServer};

use util::*;

/// A CA, a `localhost` server certificate, and client certificates, as PEM files.
struct Pki {
    dir: PathBuf,
    ca: String,
}

impl Pki {
    /// `clients`: (file name, subject alternative names; `spiffe://` ones are URIs).
    fn new(tag: &str, clients: &[(&str, &[&str])]) -> Pki {
        let dir = std::env::temp_dir().join(format!("xds-security-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let localhost: &[&str] = &["localhost"];
        for (file, sans) in std::iter::once(&("localhost", localhost)).chain(clients) {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            for san in *sans {
                params.subject_alt_names.push(if san.starts_with("spiffe://") {
                    SanType::URI((*san).try_into().unwrap())
                } else {
                    SanType::DnsName((*san).try_into().unwrap())
                });
            }
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &issuer).unwrap();
            std::fs::write(dir.join(format!("{file}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.join(format!("{file}.key")), key.serialize_pem()).unwrap();
        }
        Pki { dir, ca: ca_pem }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Serves `server` with mTLS through [`Incoming::tls`]; returns the address.
    async fn start(
        &self,
        server: XdsServer,
    ) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
        let tls = tls_config(
            &self.path("localhost.pem"),
            &self.path("localhost.key"),
            Some(&self.path("ca.pem")),
        )
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = Incoming::tls(listener, TransportConfig::default(), tls);
        let routes = server.routes();
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_routes(routes)
                .serve_with_incoming(incoming)
                .await;
        });
        (addr, task)
    }

    /// A connection presenting `client`'s certificate.
    async fn channel(&self, addr: std::net::SocketAddr, client: &str) -> Channel {
        let read = |ext: &str| std::fs::read(self.dir.join(format!("{client}.{ext}"))).unwrap();
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .domain_name("localhost")
            .identity(Identity::from_pem(read("pem"), read("key")));
        Endpoint::from_shared(format!("https://{addr}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap()
    }
}

/// The file server's grouping: the group named by the id, else by the cluster, else `default`.
fn grouping(groups: &'static [&'static str]) -> impl Fn(&Node) -> String + Clone + Send + Sync {
    move |node: &Node| {
        [&node.id, &node.cluster]
            .into_iter()
            .find(|k| groups.contains(&k.as_str()))
            .cloned()
            .unwrap_or_else(|| "default".to_owned())
    }
}

fn secrets_cache() -> SnapshotCache {
    let groups = grouping(&["envoy-1", "envoy-2"]);
    let cache = SnapshotCache::new(groups);
    cache.set_snapshot("envoy-1", snapshot![cluster("c1", "1"), secret("key-1")]);
    cache.set_snapshot("envoy-2", snapshot![cluster("c2", "1"), secret("key-2")]);
    cache.set_snapshot("default", snapshot![cluster("shared", "1")]);
    cache
}

fn sds_fetch(node: Node, key: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(node),
        type_url: url(SDS),
        resource_names: names(&[key]),
        ..Default::default()
    }
}

async fn ads(channel: Channel, node: Node) -> Sotw {
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    Sotw::open(Some(node), |r| async move { client.stream_aggregated_resources(r).await })
        .await
        .unwrap()
}

/// A REST-JSON POST over an mTLS HTTP/2 connection: status and body.
async fn post(channel: &Channel, path: &str, body: &str) -> (http::StatusCode, String) {
    use http_body_util::BodyExt;
    let request = http::Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .body(tonic::body::Body::new(http_body_util::Full::new(bytes::Bytes::from(
            body.to_owned(),
        ))))
        .unwrap();
    let response = tower::ServiceExt::oneshot(channel.clone(), request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

#[tokio::test]
async fn finding_1_rest_over_mtls_serves_a_node_only_its_own_secrets() {
    let pki = Pki::new("f1", &[("envoy-1", &["envoy-1"])]);
    let server = XdsServer::builder(secrets_cache()).authorizer(NodeIdentity::new()).build();
    let tls = tls_config(
        &pki.path("localhost.pem"),
        &pki.path("localhost.key"),
        Some(&pki.path("ca.pem")),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = Incoming::tls(listener, TransportConfig::default(), tls);
    let app = server.discovery_router().into_make_service_with_connect_info::<Peer>();
    let _task = tokio::spawn(async move {
        let _ = axum::serve(incoming, app).await;
    });
    let channel = pki.channel(addr, "envoy-1").await;

    // envoy-1's certificate asking REST for envoy-2's key.
    let steal = r#"{"node":{"id":"envoy-2"},"resourceNames":["key-2"]}"#;
    let (status, body) = post(&channel, "/v3/discovery:secrets", steal).await;
    assert_eq!(status, http::StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("envoy-2"), "{body}");
    // CSDS is not on the discovery router.
    let (status, _) = post(&channel, "/v3/discovery:client_status", "").await;
    assert_eq!(status, http::StatusCode::NOT_FOUND);
    // Its own key is served: the certificate reached the authorization point.
    let own = r#"{"node":{"id":"envoy-1"},"resourceNames":["key-1"]}"#;
    let (status, body) = post(&channel, "/v3/discovery:secrets", own).await;
    assert_eq!(status, http::StatusCode::OK, "{body}");
    assert!(body.contains("key-1"), "{body}");
}

#[tokio::test]
async fn finding_2_unary_fetch_for_another_node_is_permission_denied() {
    let pki = Pki::new("f2", &[("envoy-1", &["envoy-1"])]);
    let cache = secrets_cache();
    let server = XdsServer::builder(cache.clone()).authorizer(NodeIdentity::new()).build();
    let (addr, _task) = pki.start(server).await;
    let mut sds = SecretDiscoveryServiceClient::new(pki.channel(addr, "envoy-1").await);

    // envoy-1's certificate asking for envoy-2's keys.
    let refused = sds.fetch_secrets(sds_fetch(node("envoy-2"), "key-2")).await.unwrap_err();
    assert_status(&refused, Code::PermissionDenied, &["envoy-2"]);
    // Its own keys are served.
    let own = sds.fetch_secrets(sds_fetch(node("envoy-1"), "key-1")).await.unwrap().into_inner();
    assert_eq!(sotw_names(&own), ["key-1"]);
}

#[tokio::test]
async fn finding_3_a_cluster_naming_another_group_is_permission_denied() {
    let pki = Pki::new("f3", &[("envoy-1", &["envoy-1"]), ("envoy-3", &["envoy-3"])]);
    let cache = secrets_cache();
    let policy = NodeIdentity::new().grouping(grouping(&["envoy-1", "envoy-2"]));
    let server = XdsServer::builder(cache.clone()).authorizer(policy).build();
    let (addr, _task) = pki.start(server).await;

    // envoy-3 has no group of its own: its certificate, its own id, and envoy-2's group
    // through the cluster.
    let claim = Node { id: "envoy-3".into(), cluster: "envoy-2".into(), ..Default::default() };
    let mut stream = ads(pki.channel(addr, "envoy-3").await, claim.clone()).await;
    stream.subscribe(SDS, &["key-2"], None).await;
    assert_status(&stream.recv_err().await, Code::PermissionDenied, &["envoy-3", "envoy-2"]);
    let mut sds = SecretDiscoveryServiceClient::new(pki.channel(addr, "envoy-3").await);
    let refused = sds.fetch_secrets(sds_fetch(claim, "key-2")).await.unwrap_err();
    assert_status(&refused, Code::PermissionDenied, &["envoy-2"]);

    // A node without a group of its own and an unknown cluster gets the default group; envoy-1
    // with its own cluster gets its own; both keep their updates.
    let plain = Node { id: "envoy-3".into(), cluster: "web".into(), ..Default::default() };
    let mut shared = ads(pki.channel(addr, "envoy-3").await, plain).await;
    shared.subscribe(CDS, &[], None).await;
    assert_eq!(sotw_names(&shared.recv().await), ["shared"]);
    let own = Node { id: "envoy-1".into(), cluster: "envoy-1".into(), ..Default::default() };
    let mut legit = ads(pki.channel(addr, "envoy-1").await, own).await;
    legit.subscribe(CDS, &[], None).await;
    let first = legit.recv().await;
    assert_eq!(sotw_names(&first), ["c1"]);
    legit.ack(&first).await;
    cache.set_snapshot("envoy-1", snapshot![cluster("c1", "1"), cluster("c9", "1")]);
    assert_eq!(sotw_names(&legit.recv().await), ["c1", "c9"]);
}

#[tokio::test]
async fn finding_4_a_spiffe_id_of_another_trust_domain_is_permission_denied() {
    let pki = Pki::new(
        "f4",
        &[
            ("evil", &["spiffe://other-domain/ns/evil/sa/envoy-2"]),
            ("good", &["spiffe://mesh.example/ns/default/sa/envoy-2"]),
        ],
    );
    let cache = secrets_cache();
    let server = XdsServer::builder(cache.clone())
        .authorizer(NodeIdentity::new().trust_domain("mesh.example"))
        .build();
    let (addr, _task) = pki.start(server).await;

    let mut evil = ads(pki.channel(addr, "evil").await, node("envoy-2")).await;
    evil.subscribe(SDS, &["key-2"], None).await;
    assert_status(&evil.recv_err().await, Code::PermissionDenied, &["envoy-2"]);

    let mut good = ads(pki.channel(addr, "good").await, node("envoy-2")).await;
    good.subscribe(SDS, &["key-2"], None).await;
    assert_eq!(sotw_names(&good.recv().await), ["key-2"]);

    // CSDS lists every node: not for a client, whatever its certificate.
    let mut csds = ClientStatusDiscoveryServiceClient::new(pki.channel(addr, "good").await);
    let refused = csds.fetch_client_status(ClientStatusRequest::default()).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
}

#[tokio::test]
async fn finding_5_a_type_url_cannot_add_metric_series_or_lines() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let t = serve(cache.clone()).await;
    let mut attackers = Vec::new();
    for i in 0..20 {
        let mut attacker = Sotw::ads(&t, "n2").await;
        attacker
            .send(DiscoveryRequest {
                type_url: format!("type.googleapis.com/evil{i}\"}} 1\nxds_injected_total 1\n#"),
                ..Default::default()
            })
            .await;
        attackers.push(attacker);
    }
    eventually("20 requests of unknown types are counted", || {
        t.metric("xds_requests_total", "sotw", "unknown") == 20.0
    })
    .await;
    let mut legit = Sotw::ads(&t, "n1").await;
    legit.subscribe(CDS, &[], None).await;
    assert_eq!(sotw_names(&legit.recv().await), ["a"]);

    let text = t.metrics();
    assert!(!text.lines().any(|l| l.starts_with("xds_injected_total")), "{text}");
    assert!(!text.contains("evil"), "{text}");
    assert_eq!(t.metric("xds_responses_total", "sotw", "cluster"), 1.0, "{text}");
}

#[tokio::test]
async fn finding_6_a_nack_text_is_kept_truncated_in_status_and_csds() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let t = serve(cache.clone()).await;
    let mut client = Sotw::ads(&t, "n1").await;
    client.subscribe(CDS, &[], None).await;
    let first = client.recv().await;
    // 1 MB of text, with a multi-byte character across the cut.
    let text = format!("{}é{}", "x".repeat(MAX_NACK_TEXT - 1), "y".repeat(1 << 20));
    client.nack(&first, "", &text).await;
    eventually("the NACK is recorded", || {
        type_status(&t.server, "n1", CDS).is_some_and(|s| s.nack.is_some())
    })
    .await;
    let nack = type_status(&t.server, "n1", CDS).unwrap().nack.unwrap();
    assert_eq!(nack.error.len(), MAX_NACK_TEXT - 1, "cut before the split character");
    assert_eq!(nack.error_bytes, text.len());
    let csds = t.server.client_status(&ClientStatusRequest::default()).unwrap();
    let json = xds_proto::to_json(&csds).unwrap().to_string();
    assert!(json.len() < 2 * MAX_NACK_TEXT, "CSDS is {} bytes", json.len());
    assert!(t.server.status().to_json().to_string().len() < 2 * MAX_NACK_TEXT + 4096);

    // The client keeps its updates.
    cache.set_snapshot("n1", snapshot![cluster("a", "2")]);
    assert_eq!(sotw_names(&client.recv().await), ["a"]);
}

#[tokio::test]
async fn finding_7_a_connection_that_never_sends_the_preface_is_closed() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = TransportConfig::default().handshake_timeout(Duration::from_millis(200));
    let incoming = Incoming::plain(listener, config);
    let routes = XdsServer::new(cache).routes();
    let _task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_routes(routes)
            .serve_with_incoming(incoming)
            .await;
    });

    // An idle connection: the server closes it (EOF or reset), not the test's timeout.
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    // (The server's own SETTINGS frame comes first; then the end.)
    let mut buf = Vec::new();
    let read = tokio::time::timeout(WAIT, idle.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the idle connection stayed open ({} bytes read)", buf.len());

    // A client that speaks is served, past the deadline too.
    let channel = Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut client = ads(channel, node("n1")).await;
    client.subscribe(CDS, &[], None).await;
    let first = client.recv().await;
    assert_eq!(sotw_names(&first), ["a"]);
}

#[tokio::test]
async fn a_long_type_url_is_cut_in_the_status() {
    let long = format!("type.googleapis.com/{}", "w".repeat(10 << 10));
    // Unknown on ADS: the cache's refusal quotes it.
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let t = serve(cache).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.send(DiscoveryRequest {
        type_url: long.clone(),
        resource_names: names(&["x"]),
        ..Default::default()
    })
    .await;
    let status = ads.recv_err().await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().len() < 1024, "{} bytes echoed", status.message().len());
    assert!(status.message().contains("type.googleapis.com/www"), "{}", status.message());
    assert!(status.message().contains(&format!("({} bytes)", long.len())), "{}", status.message());

    // Not the type of a per-type stream: the mismatch quotes it.
    let mut cds = Sotw::clusters(&t, "n1").await;
    cds.send_raw(DiscoveryRequest {
        node: Some(node("n1")),
        type_url: long.clone(),
        ..Default::default()
    })
    .await;
    let status = cds.recv_err().await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().len() < 1024, "{} bytes echoed", status.message().len());
}

/// The status of one request to `path` with `content_type` over a raw HTTP/2 connection.
async fn raw_h2_status(addr: std::net::SocketAddr, path: &str, content_type: Option<&str>) -> u16 {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let mut request = http::Request::post(format!("http://{addr}{path}")).header("te", "trailers");
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let (response, mut body) = client.send_request(request.body(()).unwrap(), false).unwrap();
    // One empty gRPC message frame, then the end of the stream.
    body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), response).await.unwrap().unwrap();
    driver.abort();
    response.status().as_u16()
}

#[tokio::test]
async fn a_request_that_is_not_grpc_is_refused_with_415() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let t = serve(cache).await;
    let paths = [
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources",
        "/envoy.service.cluster.v3.ClusterDiscoveryService/FetchClusters",
        "/envoy.service.status.v3.ClientStatusDiscoveryService/FetchClientStatus",
        "/envoy.service.load_stats.v3.LoadReportingService/StreamLoadStats",
    ];
    for path in paths {
        for content_type in
            [None, Some("application/json"), Some("text/plain"), Some("application/grpc-web")]
        {
            let status = raw_h2_status(t.addr, path, content_type).await;
            assert_eq!(status, 415, "{path} with content-type {content_type:?}");
        }
        for content_type in ["application/grpc", "application/grpc+proto"] {
            let status = raw_h2_status(t.addr, path, Some(content_type)).await;
            assert_eq!(status, 200, "{path} with content-type {content_type}");
        }
    }
    // A real client is served as before.
    let mut client = Sotw::ads(&t, "n1").await;
    client.subscribe(CDS, &[], None).await;
    assert_eq!(sotw_names(&client.recv().await), ["a"]);
}
