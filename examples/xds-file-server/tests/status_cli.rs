//! `xds-file-server status` against a running server: the proxy x type table with a synced, a
//! NACKing and a waiting client, one node's detail, JSON, and the admin token.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use xds_proto::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use xds_proto::pb::google::rpc::Status as RpcStatus;

mod common;
use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_xds-file-server");

fn shipped_config() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/default.yaml")
}

fn cds(node_id: Option<&str>, answering: Option<&DiscoveryResponse>) -> DiscoveryRequest {
    DiscoveryRequest {
        node: node_id.and_then(node),
        type_url: xds_proto::ResourceType::Cluster.type_url().into(),
        version_info: answering.map(|r| r.version_info.clone()).unwrap_or_default(),
        response_nonce: answering.map(|r| r.nonce.clone()).unwrap_or_default(),
        ..Default::default()
    }
}

/// An ADS stream of every cluster for `id`: the request sender and the first response.
async fn client(
    running: &Running,
    id: &str,
) -> (mpsc::Sender<DiscoveryRequest>, tonic::Streaming<DiscoveryResponse>, DiscoveryResponse) {
    let (tx, rx) = mpsc::channel(4);
    tx.send(cds(Some(id), None)).await.unwrap();
    let mut responses = ads(running.grpc)
        .await
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = responses.message().await.unwrap().unwrap();
    (tx, responses, first)
}

fn status(args: &[&str]) -> Output {
    Command::new(BIN).arg("status").args(args).output().unwrap()
}

fn stdout(out: &Output) -> String {
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// Runs `status` until `done` accepts its output (the server records an ACK a moment after it).
async fn status_until(args: &[&str], done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = stdout(&status(args));
        if done(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn status_prints_the_table_a_node_and_json() {
    let running = Running::start(&shipped_config(), &[]).await;
    let admin = format!("http://{}", running.admin);

    let (synced_tx, _synced_rx, first) = client(&running, "envoy-synced").await;
    synced_tx.send(cds(None, Some(&first))).await.unwrap();
    let (nack_tx, _nack_rx, first) = client(&running, "envoy-\u{1b}[31mnacker").await;
    let mut nack = cds(None, Some(&first));
    nack.version_info = String::new();
    nack.error_detail = Some(RpcStatus { code: 3, message: "no\nthanks".into(), details: vec![] });
    nack_tx.send(nack).await.unwrap();
    let (_waiting_tx, _waiting_rx, _) = client(&running, "envoy-waiting").await;

    let table = status_until(&["--admin", &admin], |t| {
        t.lines().any(|l| l.starts_with("envoy-synced") && l.contains("SYNCED"))
            && t.contains("NACKED")
    })
    .await;
    let lines: Vec<&str> = table.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["NODE", "GROUP", "VARIANT", "CONNECTED", "CLUSTER"], "{table}");
    // Sorted by node id; the escape sequence in a node id is printed as text.
    assert!(lines[1].starts_with("envoy-\\u{1b}[31mnacker "), "{table}");
    assert!(lines[1].contains("(default)") && lines[1].contains("NACKED "), "{table}");
    assert!(lines[2].starts_with("envoy-synced ") && lines[2].ends_with("SYNCED"), "{table}");
    assert!(lines[3].starts_with("envoy-waiting ") && lines[3].contains("PENDING "), "{table}");
    assert!(
        table.contains("NACKs:\n  envoy-\\u{1b}[31mnacker cluster: no\\u{a}thanks\n"),
        "{table}"
    );
    assert!(!table.contains('\u{1b}'), "no raw escape reaches the terminal");

    let nacked = stdout(&status(&["--admin", &admin, "--state", "nacked"]));
    assert_eq!(nacked.lines().filter(|l| l.starts_with("envoy-")).count(), 1, "{nacked}");

    let one = stdout(&status(&["--admin", &admin, "--node", "envoy-synced"]));
    assert!(one.starts_with("node envoy-synced  stream "), "{one}");
    assert!(one.contains("group (default)"), "{one}");
    let row = one.lines().find(|l| l.trim_start().starts_with("cluster")).unwrap();
    assert!(row.contains("SYNCED"), "{one}");

    let json: serde_json::Value =
        serde_json::from_str(&stdout(&status(&["--admin", &admin, "-o", "json"]))).unwrap();
    assert_eq!(json["total"], 3);
    assert!(json["control_plane_id"].is_string(), "which replica answered: {json}");
    assert!(table.contains("(connected to control plane "), "{table}");
    assert_eq!(json["rows"].as_array().unwrap().len(), 3);
    assert_eq!(json["rows"][0]["node_id"], "envoy-\u{1b}[31mnacker");
    assert_eq!(json["rows"][0]["cells"]["cluster"]["error"], "no\nthanks");

    let bad = status(&["--admin", &admin, "--state", "happy"]);
    assert!(!bad.status.success());
    let stderr = String::from_utf8(bad.stderr).unwrap();
    assert!(stderr.contains("answered 400: state must be one of"), "{stderr}");
}

#[tokio::test]
async fn status_sends_the_admin_token() {
    let dir = temp_dir("status-token");
    let token = dir.join("token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let flag = token.display().to_string();
    let running = Running::start(&shipped_config(), &["--admin-token-file", &flag]).await;
    let admin = format!("http://{}", running.admin);
    // The console is on the admin router, behind the same token.
    for path in ["/ui", "/ui/console.js", "/ui/api/proxies", "/ui/api/proxy?node=a"] {
        assert_eq!(running.get(path).await.unwrap().0, 401, "{path}");
    }
    let refused = status(&["--admin", &admin]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert!(stderr.contains("answered 401"), "{stderr}");
    let table = stdout(&status(&["--admin", &admin, "--admin-token-file", &flag]));
    assert!(table.starts_with("NODE"), "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn status_reads_an_admin_port_with_tls_and_client_certificates() {
    let pki = Pki::new(&["operator"]);
    let (cert, key, ca) =
        (pki.file("localhost.pem"), pki.file("localhost.key"), pki.file("ca.pem"));
    // --admin-client-ca: the admin port takes TLS with a client certificate, even on loopback.
    let running = Running::spawn(
        &shipped_config(),
        &["--tls-cert", &cert, "--tls-key", &key, "--admin-client-ca", &ca],
    );
    let admin = format!("https://localhost:{}", running.admin.port());
    let (operator, operator_key) = (pki.file("operator.pem"), pki.file("operator.key"));
    let with_cert = ["--admin", &admin, "--admin-ca", &ca, "--admin-cert", &operator];
    let with_cert = [&with_cert[..], &["--admin-key", &operator_key]].concat();
    let deadline = Instant::now() + Duration::from_secs(30);
    let table = loop {
        let out = status(&with_cert);
        if out.status.success() {
            break String::from_utf8(out.stdout).unwrap();
        }
        assert!(Instant::now() < deadline, "{}", String::from_utf8_lossy(&out.stderr));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(table.starts_with("NODE"), "{table}");

    // Without a client certificate the port refuses the handshake; without the CA, or over
    // plain HTTP, the CLI says what is missing.
    let refused = status(&["--admin", &admin, "--admin-ca", &ca]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert!(stderr.contains("xds-file-server status:"), "{stderr}");
    let no_ca = status(&["--admin", &admin]);
    let stderr = String::from_utf8(no_ca.stderr).unwrap();
    assert!(!no_ca.status.success() && stderr.contains("needs --admin-ca"), "{stderr}");
    // A certificate of another CA is not the admin port's.
    let other = Pki::new(&[]);
    let other_ca = other.file("ca.pem");
    let wrong_ca = status(&[
        "--admin",
        &admin,
        "--admin-ca",
        &other_ca,
        "--admin-cert",
        &operator,
        "--admin-key",
        &operator_key,
    ]);
    let stderr = String::from_utf8(wrong_ca.stderr).unwrap();
    assert!(!wrong_ca.status.success() && stderr.contains("TLS handshake"), "{stderr}");
    let _ = std::fs::remove_dir_all(&pki.dir);
    let _ = std::fs::remove_dir_all(&other.dir);
}
