//! The operator's side of the binary: `check`, `--version`, log output fit for machines,
//! `/config_dump`, and the flags that set limits and the control plane's identity.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_xds-file-server");

fn shipped_config() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/default.yaml")
}

fn free_addr() -> String {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
}

#[test]
fn check_prints_what_each_group_serves_and_exits_zero() {
    let out = Command::new(BIN).args(["check", "--config"]).arg(shipped_config()).output().unwrap();
    let report = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{report}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(report.lines().next().unwrap().ends_with("ok, 2 group(s), 8 resource(s)"), "{report}");
    assert!(
        report.contains("group (default): 1 cluster, 1 endpoint, 1 listener, 1 route"),
        "{report}"
    );
    assert!(report.contains("group grpc-clients:"), "{report}");
    // Every resource with its content-hash version (16 hex digits).
    let line =
        report.lines().find(|l| l.contains("demo-cluster") && l.contains("cluster")).unwrap();
    assert_eq!(line.split_whitespace().last().unwrap().len(), 16, "{line}");
}

#[test]
fn check_of_a_broken_config_names_the_file_and_field_and_exits_non_zero() {
    let dir = std::env::temp_dir().join(format!("xds-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.yaml");
    std::fs::write(&file, "resources:\n- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n  name: a\n  conect_timeout: 1s\n").unwrap();
    let out = Command::new(BIN).args(["check", "--config"]).arg(&file).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("bad.yaml") && stderr.contains("conect_timeout"), "{stderr}");
    assert!(out.stdout.is_empty(), "no report for a refused config");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn version_names_the_package_and_the_commit() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(line.starts_with("xds-file-server 0.1.0 (commit "), "{line}");
}

/// Starts the server with `extra` flags and returns its stdout lines up to the first one `last`
/// accepts (the server logs at least two lines at start-up, so this never waits for ever).
fn lines_until(extra: &[&str], last: impl Fn(&str) -> bool) -> Vec<String> {
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(shipped_config())
        .args(["--grpc-addr", &free_addr(), "--http-addr", &free_addr()])
        .args(["--admin-addr", &free_addr()])
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let started = Instant::now();
    let mut seen = Vec::new();
    for line in stdout.lines() {
        let line = line.unwrap();
        let done = last(&line);
        seen.push(line);
        if done || started.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    seen
}

#[test]
fn json_logs_are_one_object_per_line_with_no_free_text() {
    let lines = lines_until(&["--log-format", "json", "--log", "info"], |l| l.contains("serving"));
    assert!(lines.len() >= 2, "{lines:?}");
    for line in &lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(value["level"].is_string() && value["fields"].is_object(), "{line}");
    }
}

#[test]
fn text_logs_to_a_pipe_carry_no_colour_codes() {
    let lines = lines_until(&["--log", "info"], |l| l.contains("configuration published"));
    assert!(lines.iter().any(|l| l.contains("INFO")), "{lines:?}");
    assert!(lines.iter().all(|l| !l.contains('\u{1b}')), "{lines:?}");
}

#[tokio::test]
async fn config_dump_shows_the_group_a_node_maps_to_and_what_it_would_get() {
    let server = Running::start(&shipped_config(), &[]).await;
    let (code, body) =
        server.get("/config_dump?node=grpc-client-1&cluster=grpc-clients").await.unwrap();
    assert_eq!(code, 200, "{body}");
    let dump: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(dump["group"], "grpc-clients");
    assert_eq!(dump["resources"]["cluster"][0]["name"], "demo-cluster");
    assert_eq!(dump["resources"]["cluster"][0]["resource"]["name"], "demo-cluster");
    assert_eq!(dump["resources"]["cluster"][0]["version"].as_str().unwrap().len(), 16);

    // Another node lands in the default group.
    let (_, body) = server.get("/config_dump?node=envoy-1").await.unwrap();
    let dump: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(dump["group"], "(default)");
    assert_eq!(dump["resources"]["cluster"][0]["name"], "backend");

    let (code, body) = server.get("/config_dump").await.unwrap();
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("node=ID is required"), "{body}");
}

#[tokio::test]
async fn config_dump_never_shows_a_private_key() {
    let dir = temp_dir("dump-secret");
    let path = dir.join("config.yaml");
    std::fs::write(
        &path,
        "resources:\n  - \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret\n    name: key\n    tls_certificate: { private_key: { inline_string: PRIVATE-KEY-TEXT } }\n  - \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n    name: tls-backend\n    connect_timeout: 1s\n    transport_socket:\n      name: envoy.transport_sockets.tls\n      typed_config:\n        \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext\n        common_tls_context:\n          tls_certificates:\n            - certificate_chain: { inline_string: CERTIFICATE-TEXT }\n              private_key: { inline_string: CLUSTER-KEY-TEXT }\n",
    )
    .unwrap();
    let server = Running::start(&path, &[]).await;
    let (code, body) = server.get("/config_dump?node=envoy-1").await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains("PRIVATE-KEY-TEXT") && !body.contains("CLUSTER-KEY-TEXT"), "{body}");
    assert!(body.contains("CERTIFICATE-TEXT"), "certificates are public: {body}");
    let dump: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(dump["resources"]["secret"][0]["name"], "key");
    assert_eq!(dump["resources"]["secret"][0]["redacted"], true);
}

/// A listener and a cluster holding the seven secrets a list of field names let through: an
/// inline PKCS#12 bundle, two Redis passwords, an AWS secret key and session token, basic-auth
/// users and API keys.
const SEVEN_SECRETS: &str = r#"
resources:
  - "@type": type.googleapis.com/envoy.config.listener.v3.Listener
    name: edge
    address: { socket_address: { address: 0.0.0.0, port_value: 10000 } }
    filter_chains:
      - transport_socket:
          name: envoy.transport_sockets.tls
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
            common_tls_context:
              tls_certificates: [ { pkcs12: { inline_string: PKCS12-BUNDLE-TEXT } } ]
        filters:
          - name: envoy.filters.network.redis_proxy
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy
              stat_prefix: redis
              settings: { op_timeout: 1s }
              prefix_routes: { catch_all_route: { cluster: redis } }
              downstream_auth_passwords: [ { inline_string: REDIS-DOWNSTREAM-PASSWORD } ]
      - filter_chain_match: { server_names: [ api.example.com ] }
        filters:
          - name: envoy.filters.network.http_connection_manager
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
              stat_prefix: http
              route_config:
                name: local
                virtual_hosts:
                  - name: all
                    domains: ["*"]
                    routes: [ { match: { prefix: / }, route: { cluster: redis } } ]
              http_filters:
                - name: envoy.filters.http.aws_request_signing
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.aws_request_signing.v3.AwsRequestSigning
                    service_name: s3
                    region: us-east-1
                    credential_provider:
                      inline_credential:
                        access_key_id: AKIDPUBLICID
                        secret_access_key: AWS-SECRET-ACCESS-KEY
                        session_token: AWS-SESSION-TOKEN
                - name: envoy.filters.http.basic_auth
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuth
                    users: { inline_string: "admin:{SHA}BASIC-AUTH-USERS" }
                - name: envoy.filters.http.api_key_auth
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth
                    credentials: [ { key: API-KEY-VALUE, client: client-a } ]
                    key_sources: [ { header: x-api-key } ]
                - name: envoy.filters.http.router
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  - "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: redis
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.filters.network.redis_proxy:
        "@type": type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions
        auth_password: { inline_string: REDIS-UPSTREAM-PASSWORD }
"#;

#[tokio::test]
async fn config_dump_hides_every_field_the_api_marks_sensitive() {
    let dir = temp_dir("dump-sensitive");
    let path = dir.join("config.yaml");
    std::fs::write(&path, SEVEN_SECRETS).unwrap();
    let server = Running::start(&path, &[]).await;
    let (code, body) = server.get("/config_dump?node=envoy-1").await.unwrap();
    assert_eq!(code, 200, "{body}");
    for secret in [
        "PKCS12-BUNDLE-TEXT",
        "REDIS-DOWNSTREAM-PASSWORD",
        "REDIS-UPSTREAM-PASSWORD",
        "AWS-SECRET-ACCESS-KEY",
        "AWS-SESSION-TOKEN",
        "BASIC-AUTH-USERS",
        "API-KEY-VALUE",
    ] {
        assert!(!body.contains(secret), "{secret} shown: {body}");
    }
    for public in ["AKIDPUBLICID", "x-api-key", "api.example.com", "[redacted]"] {
        assert!(body.contains(public), "{public} missing: {body}");
    }
}

#[tokio::test]
async fn control_plane_id_and_limits_come_from_flags() {
    use xds_proto::pb::envoy::service::discovery::v3::DiscoveryRequest;
    use xds_proto::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;

    let extra = ["--control-plane-id", "replica-7", "--max-request-bytes", "2048"];
    let server = Running::start(&shipped_config(), &extra).await;
    let mut client = AggregatedDiscoveryServiceClient::new(server.channel().await);
    let request = |names: Vec<String>| DiscoveryRequest {
        node: Some(xds_proto::pb::envoy::config::core::v3::Node {
            id: "envoy-1".into(),
            ..Default::default()
        }),
        type_url: xds_proto::ResourceType::Cluster.type_url().into(),
        resource_names: names,
        ..Default::default()
    };
    let mut responses = client
        .stream_aggregated_resources(tokio_stream::iter(vec![request(Vec::new())]))
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(10), responses.message()).await.unwrap();
    let first = first.unwrap().unwrap();
    assert_eq!(first.control_plane.unwrap().identifier, "replica-7");

    // A request over --max-request-bytes ends its stream with RESOURCE_EXHAUSTED.
    let big = request(vec!["x".repeat(4096)]);
    let mut refused = client
        .stream_aggregated_resources(tokio_stream::iter(vec![big]))
        .await
        .unwrap()
        .into_inner();
    let status = tokio::time::timeout(Duration::from_secs(10), refused.message())
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status}");
}

#[tokio::test]
async fn metrics_carry_build_info_and_status_shows_groups_and_readable_times() {
    let server = Running::start(&shipped_config(), &[]).await;
    let (code, metrics) = server.get("/metrics").await.unwrap();
    assert_eq!(code, 200);
    let info = metrics.lines().find(|l| l.starts_with("xds_build_info{")).unwrap();
    assert!(
        info.starts_with("xds_build_info{version=\"0.1.0\",commit=\"") && info.ends_with("} 1"),
        "{info}"
    );
    assert!(metrics.contains("# TYPE xds_ack_latency_seconds histogram"), "{metrics}");

    // A connected client of the grpc-clients group shows up with its group and RFC 3339 times.
    use xds_proto::pb::envoy::service::discovery::v3::DiscoveryRequest;
    use xds_proto::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(DiscoveryRequest {
        node: Some(xds_proto::pb::envoy::config::core::v3::Node {
            id: "grpc-client-1".into(),
            cluster: "grpc-clients".into(),
            ..Default::default()
        }),
        type_url: xds_proto::ResourceType::Cluster.type_url().into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut client = AggregatedDiscoveryServiceClient::new(server.channel().await);
    let mut responses = client
        .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tokio::time::timeout(Duration::from_secs(10), responses.message()).await.unwrap().unwrap();
    let (_, body) = server.get("/status?node=grpc-client-1").await.unwrap();
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let stream = &status["streams"][0];
    assert_eq!(stream["group"], "grpc-clients", "{body}");
    let opened = stream["opened"].as_str().unwrap();
    assert!(
        opened.len() == 24 && opened.ends_with('Z') && opened.as_bytes()[10] == b'T',
        "{opened}"
    );
    drop(tx);
}

/// `--keepalive-interval-s` and `--keepalive-timeout-s` reach the gRPC port: an idle connection
/// is pinged after the interval, and one that never answers is closed after the timeout. The
/// client here speaks HTTP/2 by hand so that it can stay silent (every HTTP/2 library answers
/// pings by itself).
#[tokio::test]
async fn keepalive_flags_ping_an_idle_connection_and_close_a_silent_one() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let extra = ["--keepalive-interval-s", "1", "--keepalive-timeout-s", "1"];
    let server = Running::start(&shipped_config(), &extra).await;
    let mut tcp = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    // The client preface, then an empty SETTINGS frame (length 0, type 4, no flags, stream 0).
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.unwrap();
    tcp.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();

    let opened = std::time::Instant::now();
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let mut pinged_after = None;
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => return opened.elapsed(),
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
            }
            // Frame headers: 3 bytes length, 1 type, 1 flags, 4 stream id.
            let mut at = 0;
            while bytes.len() >= at + 9 {
                let len = usize::from(bytes[at]) << 16
                    | usize::from(bytes[at + 1]) << 8
                    | usize::from(bytes[at + 2]);
                let (kind, flags) = (bytes[at + 3], bytes[at + 4]);
                if kind == 6 && flags & 1 == 0 && pinged_after.is_none() {
                    pinged_after = Some(opened.elapsed());
                }
                at += 9 + len;
            }
        }
    })
    .await
    .expect("a connection that never answers a PING is closed");
    let pinged_after = pinged_after.expect("an idle connection is pinged");
    assert!(pinged_after < Duration::from_secs(5), "pinged after {pinged_after:?}, not ~1 s");
    assert!(closed < Duration::from_secs(10), "closed after {closed:?}, not ~2 s");
}
