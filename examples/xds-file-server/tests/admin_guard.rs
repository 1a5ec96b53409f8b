//! Every port keeps at most its cap of connections open (the rest wait in the kernel's
//! backlog), and the caps fit the open-file limit, so a flood of idle connections to one port
//! never takes the descriptors the others need; one peer holds at most its own cap of a port
//! (the rest are closed at once), so it never keeps another's probe out. The admin port is
//! guarded like the xDS ports: idle and slow connections are closed; and off loopback it needs
//! credentials (`--admin-token-file`, or mTLS).
#![allow(clippy::unwrap_used)] // helpers outside #[test] fail loudly by design

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xds_proto::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;

mod common;
use common::*;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

/// How long a flood may take to get past the server's descriptors: the kernel completes the
/// handshakes only as fast as a loaded two-core machine runs them.
const FLOOD_WAIT: Duration = Duration::from_secs(60);

fn write_config(dir: &Path) {
    write_clusters(dir, &["a", "b"]);
}

fn write_clusters(dir: &Path, names: &[&str]) {
    let mut text = String::from("resources:\n");
    for name in names {
        text.push_str(&format!(
            "  - \"@type\": {CDS}\n    name: {name}\n    type: STATIC\n    connect_timeout: 1s\n"
        ));
    }
    std::fs::write(dir.join("clusters.yaml"), text).unwrap();
}

/// The `i`-th of `peers` loopback addresses, 127.0.`subnet`.1 and up: a flood from many peers
/// meets the port's cap, not only each peer's.
fn peer(subnet: u8, peers: usize, i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, subnet, (i % peers) as u8 + 1))
}

/// REST answers a discovery request within 10 s (a flooded port's neighbours are served, if
/// slower on a machine that the test's own flood keeps busy).
async fn rest_answers(running: &Running) {
    let body = r#"{"node":{"id":"rest"},"type_url":"type.googleapis.com/envoy.config.cluster.v3.Cluster"}"#;
    let (code, _) = tokio::time::timeout(
        Duration::from_secs(10),
        Running::post(running.http, "/v3/discovery:clusters", body),
    )
    .await
    .expect("REST answers in time");
    assert_eq!(code, 200);
}

/// The clusters a delta ADS client is sent first, within `within`.
async fn clusters_within(running: &Running, within: Duration) -> usize {
    let started = Instant::now();
    let (_tx, mut rx) =
        tokio::time::timeout(within, delta_clusters(running.grpc, "proxy", &Default::default()))
            .await
            .expect("the ADS stream opens in time");
    let left = within.saturating_sub(started.elapsed());
    let response = tokio::time::timeout(left, rx.message())
        .await
        .expect("a response in time")
        .unwrap()
        .unwrap();
    response.resources.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_and_rest_keep_serving_while_2000_idle_connections_sit_on_the_admin_port() {
    let dir = temp_dir("admin-flood");
    write_config(&dir);
    // 256 descriptors: far fewer than the idle connections offered to the admin port.
    let running = Running::start_limited(&dir, 256, &[]).await;

    // 2,000 connections offered at once from 100 peers, each kept open and silent: the port's
    // cap holds, not only each peer's. Those past the kernel's backlog keep retrying.
    let flood = Flood::open(running.admin, 2000, |i| peer(2, 100, i));
    // Past the 256 descriptors the server has (the rest keep retrying). How many more the
    // kernel completes depends on its backlogs and on how fast a loaded machine runs the
    // handshakes (452 seen in 15 s under a full test run; 360 in 30 s once, and 372 in the gRPC
    // flood below, with the rest of CI's tests running on two cores): past the server's
    // descriptors is what the test needs, not how fast a busy machine gets there.
    flood.until("admin connections established", FLOOD_WAIT, |f| f.established() >= 384).await;

    // A proxy gets its configuration and REST answers, with every idle connection still open.
    assert_eq!(clusters_within(&running, Duration::from_secs(10)).await, 2);
    rest_answers(&running).await;

    // Once they go, the admin port answers again.
    flood.release();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !matches!(running.get("/healthz").await, Ok((200, _))) {
        assert!(Instant::now() < deadline, "the admin port did not recover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_proxy_rest_and_admin_keep_serving_while_idle_connections_flood_the_grpc_port()
{
    let dir = temp_dir("grpc-flood");
    write_config(&dir);
    // 256 descriptors: the caps of the three ports and the reserve share them out.
    let running = Running::start_limited(&dir, 256, &[]).await;
    let (tx, mut proxy) = delta_clusters(running.grpc, "proxy", &Default::default()).await;
    let first = tokio::time::timeout(Duration::from_secs(5), proxy.message()).await;
    let first = first.expect("the proxy is served").unwrap().unwrap();
    assert_eq!(first.resources.len(), 2);
    let ack = DeltaDiscoveryRequest {
        type_url: CDS.into(),
        response_nonce: first.nonce,
        ..Default::default()
    };
    tx.send(ack).await.unwrap();

    // 2,000 connections offered at once from 40 peers, kept open and silent: more than every
    // descriptor of the server, and more than the port's cap however each peer's is set.
    let flood = Flood::open(running.grpc, 2000, |i| peer(1, 40, i));
    flood.until("gRPC connections established", FLOOD_WAIT, |f| f.established() >= 384).await;

    // The server keeps descriptors to spare: the caps (108 + 36 + 48 at this limit) leave 64.
    // (125 seen: 17 of its own and the gRPC port's 108.)
    let (fds, open) = (running.open_fds(), flood.open_now());
    assert!(fds <= 256 - 32, "{fds} descriptors open under a limit of 256, {open} flooding");
    rest_answers(&running).await;
    let ready = tokio::time::timeout(Duration::from_secs(5), running.get("/ready")).await;
    assert_eq!(ready.expect("/ready answers in time").unwrap().0, 200);
    // A reload reads the configuration (descriptors again), and the proxy is sent the change.
    write_clusters(&dir, &["a", "b", "c"]);
    let change = tokio::time::timeout(Duration::from_secs(15), proxy.message()).await;
    let change = change.expect("the proxy is sent the change").unwrap().unwrap();
    assert_eq!(change.resources.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["c"]);

    // Once the flood goes, a new proxy connects and is served.
    flood.release();
    assert_eq!(clusters_within(&running, Duration::from_secs(15)).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_filling_the_admin_port_cannot_keep_another_peers_probe_out() {
    let dir = temp_dir("admin-peer");
    write_config(&dir);
    // The per-peer cap is left to its default, a quarter: 16. Connections that send nothing are
    // kept 30 s, longer than the test.
    let running =
        Running::start(&dir, &["--admin-max-connections", "64", "--handshake-timeout-s", "30"])
            .await;

    // One peer opens far more than the port's 64 and keeps them open and silent (a connection
    // the server resets before its client sees it open counts as failed).
    let flood = Flood::open(running.admin, 200, |_| "127.0.0.2".parse().unwrap());
    let past_the_port = |f: &Flood| f.established() + f.failed() >= 100;
    flood.until("admin connections opened", Duration::from_secs(15), past_the_port).await;

    // Another peer's probe is answered at once, not after the flood's connections time out.
    let ready = tokio::time::timeout(Duration::from_secs(3), running.get("/ready")).await;
    assert_eq!(ready.expect("/ready answers while one peer floods").unwrap().0, 200);
    // The flooding peer holds exactly its cap; the rest were closed as soon as accepted.
    let cap = |f: &Flood| f.established() + f.failed() == 200 && f.open_now() <= 16;
    flood.until("connections past the peer's cap closed", Duration::from_secs(10), cap).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(flood.open_now(), 16);
    flood.release();
}

/// Reads from `conn` until it is closed by the server; how long that took, or `None` if it was
/// still open after `within`.
async fn closed_within(conn: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.checked_sub(started.elapsed())?;
        match tokio::time::timeout(left, conn.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => return None,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slow_admin_connections_are_closed() {
    let dir = temp_dir("admin-idle");
    write_config(&dir);
    let running =
        Running::start(&dir, &["--admin-idle-timeout-s", "1", "--handshake-timeout-s", "2"]).await;

    // A kept-alive connection that asked once and then says nothing.
    let mut kept = TcpStream::connect(running.admin).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let idle = closed_within(&mut kept, Duration::from_secs(5)).await;
    assert!(idle.is_some(), "an idle kept-alive admin connection stays open");

    // A client sending its headers a byte at a time, never finishing them.
    let mut slow = TcpStream::connect(running.admin).await.unwrap();
    slow.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let trickle = async {
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if slow.write_all(b"X").await.is_err() {
                return true;
            }
        }
        false
    };
    let cut = tokio::time::timeout(Duration::from_secs(6), trickle).await;
    assert!(matches!(cut, Ok(true)), "a connection trickling its headers stays open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_is_required_and_checked() {
    let dir = temp_dir("admin-token");
    write_config(&dir);
    let token = dir.join("admin-token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let token_arg = token.display().to_string();
    let running = Running::start(&dir, &["--admin-token-file", &token_arg]).await;

    let ask = |auth: &str| {
        let raw = format!("GET /status HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n");
        let admin = running.admin;
        async move {
            let mut conn = TcpStream::connect(admin).await.unwrap();
            conn.write_all(raw.as_bytes()).await.unwrap();
            let mut response = String::new();
            conn.read_to_string(&mut response).await.unwrap();
            response
        }
    };
    let missing = ask("").await;
    assert!(missing.starts_with("HTTP/1.1 401"), "{missing}");
    assert!(missing.contains("Authorization: Bearer"), "the reason is given: {missing}");
    let wrong = ask("Authorization: Bearer s3cret-tokeN\r\n").await;
    assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
    assert!(wrong.contains("not the admin token"), "{wrong}");
    let right = ask("Authorization: Bearer s3cret-token\r\n").await;
    assert!(right.starts_with("HTTP/1.1 200"), "{right}");
    // The liveness probe needs none (it tells nothing).
    assert_eq!(running.get("/healthz").await.unwrap().0, 200);

    // A refused request closes its kept-alive connection: a peer without the token cannot keep
    // a slot of the admin port's cap by asking now and then.
    let mut conn = TcpStream::connect(running.admin).await.unwrap();
    conn.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut refused = String::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_string(&mut refused))
        .await
        .expect("the server closes the connection after its 401")
        .unwrap();
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");

    // What the token guards is not served on the gRPC port either: CSDS answers there only
    // through the admin port once it asks for credentials.
    use xds_server::proto::pb::envoy::service::status::v3::ClientStatusRequest;
    use xds_server::proto::pb::envoy::service::status::v3::client_status_discovery_service_client::ClientStatusDiscoveryServiceClient;
    let mut csds = ClientStatusDiscoveryServiceClient::connect(format!("http://{}", running.grpc))
        .await
        .unwrap();
    let denied = csds.fetch_client_status(ClientStatusRequest::default()).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("admin port only"), "{denied:?}");
}

#[test]
fn off_loopback_the_admin_port_without_credentials_refuses_to_start() {
    let dir = temp_dir("admin-public");
    write_config(&dir);
    let output = Command::new(env!("CARGO_BIN_EXE_xds-file-server"))
        .args(["--config", &dir.display().to_string()])
        .args(["--grpc-addr", &free_addr().to_string()])
        .args(["--http-addr", &free_addr().to_string()])
        .args(["--admin-addr", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("not a loopback address") && stderr.contains("--admin-token-file"),
        "{stderr}"
    );
}
