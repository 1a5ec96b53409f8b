//! The `xds-file-server` binary end to end: broken config files never replace the served one, and
//! mTLS with `--verify-node-id` serves a client only as the node its certificate names.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fail loudly by design

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Streaming};
use xds_proto::ResourceType;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use xds_proto::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};

mod common;
use common::*;

/// A SotW ADS client subscribed to every cluster.
struct Clusters {
    tx: mpsc::Sender<DiscoveryRequest>,
    rx: Streaming<DiscoveryResponse>,
}

fn cds(node: &str, version: &str, nonce: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(Node { id: node.into(), ..Default::default() }),
        type_url: ResourceType::Cluster.type_url().into(),
        version_info: version.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

impl Clusters {
    async fn open(channel: Channel, node: &str) -> Result<Clusters, tonic::Status> {
        Clusters::open_in(channel, node, "").await
    }

    /// Opens as node `node` of cluster `cluster` (the first request carries both, rule S2).
    async fn open_in(
        channel: Channel,
        node: &str,
        cluster: &str,
    ) -> Result<Clusters, tonic::Status> {
        let (tx, rx) = mpsc::channel(4);
        let mut first = cds(node, "", "");
        if let Some(n) = first.node.as_mut() {
            n.cluster = cluster.into();
        }
        tx.send(first).await.unwrap();
        let rx = AggregatedDiscoveryServiceClient::new(channel)
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await?
            .into_inner();
        Ok(Clusters { tx, rx })
    }

    /// The next response's cluster names (ACKed), or the stream's error.
    async fn next(&mut self, node: &str) -> Result<Vec<String>, tonic::Status> {
        let response = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("a response in time")?
            .expect("the stream stays open");
        self.tx.send(cds(node, &response.version_info, &response.nonce)).await.unwrap();
        let mut names: Vec<String> = response
            .resources
            .iter()
            .map(|any| {
                use prost::Message;
                xds_proto::pb::envoy::config::cluster::v3::Cluster::decode(&any.value[..])
                    .unwrap()
                    .name
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// Nothing arrives for a while.
    async fn quiet(&mut self) {
        let next = tokio::time::timeout(Duration::from_millis(400), self.rx.message()).await;
        assert!(next.is_err(), "unexpected message: {next:?}");
    }
}

fn config_with(clusters: &[&str]) -> String {
    let mut text = String::from("resources:\n");
    for c in clusters {
        text.push_str(&format!(
            "  - \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n    name: {c}\n    type: STATIC\n"
        ));
    }
    text
}

async fn plain(running: &Running) -> Channel {
    Endpoint::from_shared(format!("http://{}", running.grpc)).unwrap().connect().await.unwrap()
}

#[tokio::test]
async fn every_kind_of_broken_file_leaves_the_last_good_config_serving() {
    let dir = temp_dir("broken");
    let path = dir.join("config.yaml");
    std::fs::write(&path, config_with(&["c1"])).unwrap();
    // A small size limit, so that the "huge" file needs only a few kilobytes.
    let mut server = Running::start(&path, &["--max-config-bytes", "4096"]).await;
    let mut watching = Clusters::open(plain(&server).await, "n1").await.unwrap();
    assert_eq!(watching.next("n1").await.unwrap(), ["c1"]);

    let huge = format!("{}# {}\n", config_with(&["c1", "c2"]), "x".repeat(8192));
    let unknown_field = config_with(&["c1"]).replace("type: STATIC", "no_such_field: 1");
    let broken: [(&str, &[u8], &str); 7] = [
        ("syntax", b"resources: [ { \"@type\": ", "syntax"),
        ("unknown field", unknown_field.as_bytes(), "no_such_field"),
        ("unknown @type", b"resources:\n  - \"@type\": type.googleapis.com/acme.Nope\n    name: x\n", "acme.Nope"),
        ("inconsistent references", b"resources:\n  - \"@type\": type.googleapis.com/envoy.config.listener.v3.Listener\n    name: l1\n    api_listener:\n      api_listener:\n        \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n        stat_prefix: l1\n        rds: { route_config_name: missing_route, config_source: { ads: {} } }\n", "missing_route"),
        ("empty", b"", "empty"),
        ("huge", huge.as_bytes(), "4096"),
        ("not UTF-8", b"\xff\xfe\x00resources", "UTF-8"),
    ];
    let mut loads = server.config_state().await["loads"].as_u64().unwrap();
    for (kind, contents, expected) in broken {
        std::fs::write(&path, contents).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let error = loop {
            let state = server.config_state().await;
            if let Some(e) = state["error"].as_str().filter(|e| e.contains(expected)) {
                assert_eq!(state["loads"].as_u64().unwrap(), loads, "{kind}: not published");
                break e.to_owned();
            }
            assert!(Instant::now() < deadline, "{kind}: no error naming {expected:?}: {state}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(error.contains("config.yaml"), "{kind}: the error names the file: {error}");
        assert!(server.alive(), "{kind}: the server exited");
        // The connected client hears nothing; a new one gets the last good config.
        watching.quiet().await;
        let mut newcomer = Clusters::open(plain(&server).await, "n2").await.unwrap();
        assert_eq!(newcomer.next("n2").await.unwrap(), ["c1"], "{kind}");
    }

    // A good file is published again, and the error is cleared.
    std::fs::write(&path, config_with(&["c1", "c2"])).unwrap();
    assert_eq!(watching.next("n1").await.unwrap(), ["c1", "c2"]);
    let state = server.config_state().await;
    assert!(state["error"].is_null(), "{state}");
    loads += 1;
    assert_eq!(state["loads"].as_u64().unwrap(), loads);
}

impl Pki {
    /// Starts the server with mTLS and `--verify-node-id` on a config of cluster `c1` for
    /// everyone, in a fresh directory named `name`: the config's path and the server.
    async fn serve(&self, name: &str) -> (PathBuf, Running) {
        let path = temp_dir(name).join("config.yaml");
        std::fs::write(&path, config_with(&["c1"])).unwrap();
        let (cert, key, ca) =
            (self.file("localhost.pem"), self.file("localhost.key"), self.file("ca.pem"));
        let flags =
            ["--tls-cert", &cert, "--tls-key", &key, "--client-ca", &ca, "--verify-node-id"];
        let server = Running::start(&path, &flags).await;
        (path, server)
    }

    async fn channel(&self, server: &Running, client: Option<&str>) -> Option<Channel> {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .domain_name("localhost");
        if let Some(name) = client {
            let read = |ext: &str| std::fs::read(self.dir.join(format!("{name}.{ext}"))).unwrap();
            tls = tls.identity(Identity::from_pem(read("pem"), read("key")));
        }
        Endpoint::from_shared(format!("https://{}", server.grpc))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .ok()
    }
}

#[tokio::test]
async fn mtls_serves_a_client_only_as_the_node_its_certificate_names() {
    let pki = Pki::new(&["envoy-1"]);
    let (_, server) = pki.serve("mtls").await;

    let channel = pki.channel(&server, Some("envoy-1")).await.expect("a good client connects");
    let mut served = Clusters::open(channel, "envoy-1").await.unwrap();
    assert_eq!(served.next("envoy-1").await.unwrap(), ["c1"]);

    // The right certificate, claiming another node: PermissionDenied, naming both.
    let channel = pki.channel(&server, Some("envoy-1")).await.unwrap();
    let refused = match Clusters::open(channel, "envoy-2").await {
        Ok(mut stream) => stream.next("envoy-2").await.unwrap_err(),
        Err(status) => status,
    };
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("envoy-2"), "{}", refused.message());

    // No client certificate: the handshake fails, at connect or at the first RPC.
    let outcome = match pki.channel(&server, None).await {
        None => None,
        Some(channel) => Some(match Clusters::open(channel, "envoy-1").await {
            Ok(mut stream) => stream.next("envoy-1").await,
            Err(status) => Err(status),
        }),
    };
    assert!(!matches!(outcome, Some(Ok(_))), "served without a certificate: {outcome:?}");
}

/// A group named by a node's cluster that appears after the node connected: under
/// `--verify-node-id` the reload must not move the verified stream into it (the cluster is the
/// client's claim, and `regroup` does not ask the policy again).
#[tokio::test]
async fn a_verified_node_never_reaches_a_group_its_cluster_names_even_one_added_later() {
    let pki = Pki::new(&["attacker"]);
    let (path, server) = pki.serve("regroup-claim").await;
    let dir = path.parent().unwrap().to_owned();
    let channel = pki.channel(&server, Some("attacker")).await.expect("a verified client");
    let mut stream = Clusters::open_in(channel, "attacker", "envoy-1").await.unwrap();
    assert_eq!(stream.next("attacker").await.unwrap(), ["c1"]);

    // Group envoy-1 appears; a reload regroups every open stream.
    let with_group = format!(
        "{}groups:\n  envoy-1:\n    resources:\n      - \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n        name: envoy-1-only\n        type: STATIC\n",
        config_with(&["c1"])
    );
    let next = dir.join(".config.yaml.next");
    std::fs::write(&next, with_group).unwrap();
    std::fs::rename(&next, &path).unwrap();
    server.until("the new group is served", |c| c["loads"] == 2).await;
    stream.quiet().await;
    // And a new stream making the same claim is served the default group too.
    let channel = pki.channel(&server, Some("attacker")).await.unwrap();
    let mut again = Clusters::open_in(channel, "attacker", "envoy-1").await.unwrap();
    assert_eq!(again.next("attacker").await.unwrap(), ["c1"]);
}

// ---- trust boundaries ----

/// A config with a Secret (a private key) in group `envoy-2` and a cluster for everyone.
fn config_with_secret() -> String {
    format!(
        "{}groups:\n  envoy-2:\n    resources:\n      - \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret\n        name: envoy-2-key\n        tls_certificate: {{ private_key: {{ inline_string: PRIVATE-KEY-OF-ENVOY-2 }} }}\n",
        config_with(&["c1"])
    )
}

#[tokio::test]
async fn finding_1_plain_rest_serves_no_secrets_and_no_status() {
    let dir = temp_dir("finding-1");
    let path = dir.join("config.yaml");
    std::fs::write(&path, config_with_secret()).unwrap();
    let server = Running::start(&path, &[]).await;

    // The request that returned envoy-2's private key to anyone.
    let steal = r#"{"node":{"id":"envoy-2"},"resourceNames":["envoy-2-key"]}"#;
    let (code, body) = Running::post(server.http, "/v3/discovery:secrets", steal).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("envoy-2") && !body.contains("PRIVATE-KEY"), "{body}");
    // Status, metrics and CSDS are not on the REST port any more ...
    for path in ["/status", "/metrics", "/healthz"] {
        let (code, body) = Running::post(server.http, path, "").await;
        assert!(code == 404 || code == 405, "{path} on the REST port: {code} {body}");
    }
    let (code, _) = Running::post(server.http, "/v3/discovery:client_status", "").await;
    assert_eq!(code, 404);
    // ... but on the admin port.
    let (code, body) = Running::post(server.admin, "/v3/discovery:client_status", "").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(server.get("/healthz").await.unwrap().0, 200);

    // A legitimate REST client keeps getting its clusters.
    let (code, body) =
        Running::post(server.http, "/v3/discovery:clusters", r#"{"node":{"id":"envoy-1"}}"#).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"c1\""), "{body}");
}

#[tokio::test]
async fn finding_1_status_is_filtered_by_node_and_paged() {
    let dir = temp_dir("finding-1-status");
    let path = dir.join("config.yaml");
    std::fs::write(&path, config_with(&["c1"])).unwrap();
    let server = Running::start(&path, &[]).await;
    let mut streams = Vec::new();
    for n in ["n1", "n2", "n3"] {
        let mut s = Clusters::open(plain(&server).await, n).await.unwrap();
        assert_eq!(s.next(n).await.unwrap(), ["c1"]);
        streams.push(s);
    }
    let page = |body: String| serde_json::from_str::<serde_json::Value>(&body).unwrap();
    let one = page(server.get("/status?node=n2").await.unwrap().1);
    assert_eq!(one["total"], 1, "{one}");
    assert_eq!(one["streams"][0]["node_id"], "n2", "{one}");
    let first = page(server.get("/status?limit=2").await.unwrap().1);
    assert_eq!((first["total"].as_u64(), first["streams"].as_array().unwrap().len()), (Some(3), 2));
    assert_eq!(first["next_offset"], 2, "{first}");
}

#[tokio::test]
async fn finding_8_an_instance_that_cannot_bind_writes_nothing() {
    let dir = temp_dir("finding-8");
    let path = dir.join("config.yaml");
    std::fs::write(&path, config_with(&["c1"])).unwrap();
    let first = Running::start(&path, &[]).await;
    let out = dir.join("out");
    // A second instance on the first one's gRPC port, with a --write-dir.
    let status = Command::new(env!("CARGO_BIN_EXE_xds-file-server"))
        .arg("--config")
        .arg(&path)
        .args(["--grpc-addr", &first.grpc.to_string(), "--http-addr", &free_addr().to_string()])
        .args(["--admin-addr", &free_addr().to_string(), "--log", "error"])
        .arg("--write-dir")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success());
    assert!(!out.exists(), "the instance that failed to bind wrote {}", out.display());
}

#[tokio::test]
async fn finding_7_the_grpc_port_limits_streams_and_closes_silent_connections() {
    let dir = temp_dir("finding-7");
    let path = dir.join("config.yaml");
    std::fs::write(&path, config_with(&["c1"])).unwrap();
    let server =
        Running::start(&path, &["--handshake-timeout-s", "1", "--max-concurrent-streams", "7"])
            .await;

    // A client that speaks: the server's SETTINGS advertise MAX_CONCURRENT_STREAMS (0x3) = 7.
    let mut speaker = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    speaker.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").await.unwrap();
    let mut header = [0u8; 9];
    speaker.read_exact(&mut header).await.unwrap();
    assert_eq!(header[3], 0x4, "the server's first frame is SETTINGS");
    let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let mut payload = vec![0u8; len];
    speaker.read_exact(&mut payload).await.unwrap();
    let settings: Vec<(u16, u32)> = payload
        .chunks(6)
        .map(|c| (u16::from_be_bytes([c[0], c[1]]), u32::from_be_bytes([c[2], c[3], c[4], c[5]])))
        .collect();
    assert!(settings.contains(&(0x3, 7)), "{settings:?}");

    // A connection that never sends the preface is closed by the server.
    let mut silent = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), silent.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the silent connection stayed open");

    // A real client is served throughout.
    let mut client = Clusters::open(plain(&server).await, "n1").await.unwrap();
    assert_eq!(client.next("n1").await.unwrap(), ["c1"]);
}

#[tokio::test]
async fn load_reports_show_in_status_and_metrics_labelled_only_for_served_clusters() {
    use xds_proto::pb::envoy::config::core::v3::Locality;
    use xds_proto::pb::envoy::config::endpoint::v3::{ClusterStats, UpstreamLocalityStats};
    use xds_proto::pb::envoy::service::load_stats::v3::LoadStatsRequest;
    use xds_proto::pb::envoy::service::load_stats::v3::load_reporting_service_client::LoadReportingServiceClient;

    let dir = temp_dir("lrs");
    let config = dir.join("config.yaml");
    // A gRPC client reports a cluster's load where its `lrs_server` says; `self` is this server.
    std::fs::write(
        &config,
        "resources:\n  - \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n    \
         name: served\n    type: STATIC\n    lrs_server: { self: {} }\n",
    )
    .unwrap();
    let running = Running::start(&config, &["--lrs-interval-ms", "1500"]).await;
    let state = running.config_state().await;
    assert_eq!(state["error"], serde_json::Value::Null, "{state}");

    let stats = |cluster: &str, issued: u64| ClusterStats {
        cluster_name: cluster.into(),
        upstream_locality_stats: vec![UpstreamLocalityStats {
            locality: Some(Locality { region: "r".into(), zone: "z".into(), sub_zone: "".into() }),
            total_issued_requests: issued,
            total_successful_requests: issued,
            ..Default::default()
        }],
        ..Default::default()
    };
    let (tx, rx) = mpsc::channel(4);
    let mut responses = LoadReportingServiceClient::new(running.channel().await)
        .stream_load_stats(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(LoadStatsRequest {
        node: Some(Node { id: "reporter".into(), ..Default::default() }),
        cluster_stats: vec![],
    })
    .await
    .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), responses.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(first.send_all_clusters);
    let interval = first.load_reporting_interval.unwrap();
    assert_eq!((interval.seconds, interval.nanos), (1, 500_000_000));
    tx.send(LoadStatsRequest {
        node: None,
        cluster_stats: vec![stats("rogue", 5), stats("served", 3)],
    })
    .await
    .unwrap();

    let served = "xds_lrs_window_requests{cluster=\"served\",locality=\"r/z/\",result=\"issued\"}";
    let deadline = Instant::now() + Duration::from_secs(10);
    while running.metric(served).await != Some(3.0) {
        assert!(Instant::now() < deadline, "no {served} 3 in /metrics");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let other = "xds_lrs_window_requests{cluster=\"other\",locality=\"r/z/\",result=\"issued\"}";
    assert_eq!(running.metric(other).await, Some(5.0), "a cluster not served is under other");
    let (_, metrics) = running.get("/metrics").await.unwrap();
    assert!(!metrics.contains("rogue"), "{metrics}");
    assert_eq!(running.metric("xds_lrs_streams").await, Some(1.0));

    let (_, status) = running.get("/status").await.unwrap();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let load = &status["load"];
    assert_eq!(load["clusters"]["served"]["issued"], 3, "{load}");
    assert_eq!(load["clusters"]["rogue"]["issued"], 5, "the view names every cluster: {load}");
    assert_eq!(load["nodes"], 1, "{load}");
    assert_eq!(load["clusters_total"], 2, "{load}");
}

/// The LEDS configuration of `docs/guide.md`: an EDS cluster whose assignment takes its endpoints
/// from a glob collection, and the members `leaves`.
fn leds_config(leaves: &[&str]) -> String {
    let lb = "xdstp://cp.example/envoy.config.endpoint.v3.LbEndpoint/backend/zone-a";
    let mut text = format!(
        r#"resources:
  - "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: backend
    type: EDS
    eds_cluster_config: {{ eds_config: {{ ads: {{}} }} }}
  - "@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
    cluster_name: backend
    endpoints:
      - leds_cluster_locality_config:
          leds_config: {{ ads: {{}} }}
          leds_collection_name: "{lb}/*"
"#
    );
    for (i, leaf) in leaves.iter().enumerate() {
        text.push_str(&format!(
            r#"  - "@type": type.googleapis.com/envoy.service.discovery.v3.Resource
    name: "{lb}/{leaf}"
    resource:
      "@type": type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint
      endpoint: {{ address: {{ socket_address: {{ address: 10.0.0.{i}, port_value: 8080 }} }} }}
"#
        ));
    }
    text
}

/// Rule C2 through the product: LEDS members written in the configuration file are served to a
/// delta ADS client subscribed to their glob, and a member added to the file arrives alone.
#[tokio::test]
async fn c02_leds_members_from_the_config_file_over_delta_ads() {
    use xds_proto::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryRequest, DeltaDiscoveryResponse,
    };
    let dir = temp_dir("leds-e2e");
    let file = dir.join("config.yaml");
    std::fs::write(&file, leds_config(&["e1", "e2"])).unwrap();
    let running = Running::start(&file, &["--reload-quiet-ms", "50"]).await;
    let glob = "xdstp://cp.example/envoy.config.endpoint.v3.LbEndpoint/backend/zone-a/*";
    let member = |leaf: &str| glob.replace('*', leaf);
    let leds = ResourceType::LbEndpoint.type_url().to_owned();
    let (tx, rx) = mpsc::channel(4);
    tx.send(DeltaDiscoveryRequest {
        node: Some(Node { id: "edge-1".into(), ..Default::default() }),
        type_url: leds.clone(),
        resource_names_subscribe: vec![glob.to_owned()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut stream = AggregatedDiscoveryServiceClient::new(plain(&running).await)
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut next = async || -> DeltaDiscoveryResponse {
        let r = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("a response in time")
            .unwrap()
            .expect("the stream stays open");
        let ack = DeltaDiscoveryRequest {
            type_url: leds.clone(),
            response_nonce: r.nonce.clone(),
            ..Default::default()
        };
        tx.send(ack).await.unwrap();
        r
    };
    let names = |r: &DeltaDiscoveryResponse| -> Vec<String> {
        r.resources.iter().map(|x| x.name.clone()).collect()
    };
    let r = next().await;
    assert_eq!(names(&r), [member("e1"), member("e2")]);
    // The file gains a member (written beside and renamed, as the guide says).
    let tmp = dir.join(".config.yaml.tmp");
    std::fs::write(&tmp, leds_config(&["e1", "e2", "e3"])).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    let r = next().await;
    assert_eq!(names(&r), [member("e3")]);
    assert!(r.removed_resources.is_empty());
}
