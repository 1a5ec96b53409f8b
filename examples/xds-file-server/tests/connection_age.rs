//! `--max-connection-age-s` end to end: the binary closes each gRPC connection once it has lived
//! its maximum age (varied by the jitter), and a client that reconnects presenting what it holds
//! is resent nothing (delta: `initial_resource_versions`, rule D7; SotW: `version_info`, rule
//! S15), so closing connections to rebalance replicas costs a reconnect and nothing more.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fail loudly by design

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use xds_proto::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};

mod common;
use common::*;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// The maximum age given to the binary, and its jitter: each connection lives 1 to 3 s.
const AGE_S: u64 = 2;
const JITTER: f64 = 0.5;
/// Beyond the jittered maximum: connecting, and noticing the close, on a busy machine.
const SLACK: Duration = Duration::from_millis(1500);

fn write_config(dir: &Path) {
    let mut text = String::from("resources:\n");
    for name in ["a", "b"] {
        text.push_str(&format!(
            "  - \"@type\": {CDS}\n    name: {name}\n    type: STATIC\n    connect_timeout: 1s\n"
        ));
    }
    std::fs::write(dir.join("clusters.yaml"), text).unwrap();
}

/// A delta ADS client of every cluster on a connection of its own.
struct Delta {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: Streaming<DeltaDiscoveryResponse>,
    held: BTreeMap<String, String>,
    /// When its connection was started (before connecting: the connection is younger).
    opened: Instant,
}

impl Delta {
    async fn open(addr: std::net::SocketAddr, held: BTreeMap<String, String>) -> Delta {
        let opened = Instant::now();
        let (tx, rx) = delta_clusters(addr, "aged", &held).await;
        Delta { tx, rx, held, opened }
    }

    /// Reads (and ACKs) responses until the stream ends or `quiet` passes without one; the
    /// resources received. Panics past the connection's maximum age (plus slack).
    async fn read(&mut self, quiet: Option<Duration>) -> (usize, bool) {
        let deadline = self.opened + Duration::from_secs_f64(AGE_S as f64 * (1.0 + JITTER)) + SLACK;
        let mut received = 0;
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            let next = tokio::time::timeout(quiet.unwrap_or(wait).min(wait), self.rx.message());
            let response = match next.await {
                Ok(Ok(Some(r))) => r,
                // The server closed the connection: the stream ends (an error or its end).
                Ok(Ok(None) | Err(_)) => return (received, true),
                Err(_) if quiet.is_some() && Instant::now() < deadline => return (received, false),
                Err(_) => panic!(
                    "the connection outlived its maximum age: open {:?}",
                    self.opened.elapsed()
                ),
            };
            received += response.resources.len();
            for r in &response.resources {
                self.held.insert(r.name.clone(), r.version.clone());
            }
            let ack = DeltaDiscoveryRequest {
                type_url: CDS.into(),
                response_nonce: response.nonce.clone(),
                ..Default::default()
            };
            if self.tx.send(ack).await.is_err() {
                return (received, true);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_close_at_their_jittered_age_and_a_reconnecting_client_is_resent_nothing() {
    let dir = temp_dir("connection-age");
    write_config(&dir);
    let age = AGE_S.to_string();
    let jitter = JITTER.to_string();
    let args = ["--max-connection-age-s", &age, "--max-connection-age-jitter", &jitter];
    let running = Running::start(&dir, &args).await;

    // Six clients, each on its own connection, opened together; each gets the clusters, then
    // its connection is closed between 1 and 3 s after it was opened (2 s ± 50 %).
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(Delta::open(running.grpc, BTreeMap::new()).await);
    }
    let mut tasks = Vec::new();
    for mut c in clients {
        tasks.push(tokio::spawn(async move {
            let (received, ended) = c.read(None).await;
            assert!(ended);
            (c, received, Instant::now())
        }));
    }
    let mut lifetimes = Vec::new();
    let mut ended = Vec::new();
    for t in tasks {
        let (c, received, closed) = t.await.unwrap();
        assert_eq!(received, 2, "the clusters arrive before the connection closes");
        let lifetime = closed - c.opened;
        // The connection is younger than `lifetime` (it was opened after `c.opened`): a close
        // before the jitter's lower bound would show here.
        assert!(
            lifetime >= Duration::from_secs_f64(AGE_S as f64 * (1.0 - JITTER)),
            "closed after {lifetime:?}, before the lower bound of its age"
        );
        lifetimes.push(lifetime);
        ended.push(c);
    }
    let (min, max) = (lifetimes.iter().min().unwrap(), lifetimes.iter().max().unwrap());
    assert!(
        *max - *min > Duration::from_millis(100),
        "connections opened together all closed together: {lifetimes:?}"
    );

    // Delta: reconnecting with what it holds, the client is resent nothing (at most an empty
    // first response), until the connection closes again.
    let held = ended[0].held.clone();
    assert_eq!(held.keys().collect::<Vec<_>>(), ["a", "b"]);
    let mut again = Delta::open(running.grpc, held).await;
    let (received, _) = again.read(Some(Duration::from_millis(400))).await;
    assert_eq!(received, 0, "resources resent after a connection reached its maximum age");
    let (received, ended_again) = again.read(None).await;
    assert_eq!(received, 0);
    assert!(ended_again, "the new connection is closed at its age too");

    // SotW: re-requesting with the last version, the wildcard Cluster sub-stream resumes (rule
    // S15): no response.
    let (tx, rx) = mpsc::channel(4);
    let request = |version: &str, nonce: &str| DiscoveryRequest {
        node: node("aged"),
        type_url: CDS.into(),
        version_info: version.into(),
        response_nonce: nonce.into(),
        ..Default::default()
    };
    tx.send(request("", "")).await.unwrap();
    let mut sotw: Streaming<DiscoveryResponse> = ads(running.grpc)
        .await
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = sotw.message().await.unwrap().unwrap();
    assert_eq!(first.resources.len(), 2);
    tx.send(request(&first.version_info, &first.nonce)).await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(3) + SLACK, async {
        while let Ok(Some(_)) = sotw.message().await {}
    })
    .await;
    assert!(closed.is_ok(), "the SotW connection outlived its maximum age");
    let (tx, rx) = mpsc::channel(4);
    tx.send(request(&first.version_info, "")).await.unwrap();
    let mut resumed = ads(running.grpc)
        .await
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let next = tokio::time::timeout(Duration::from_millis(400), resumed.message()).await;
    assert!(next.is_err(), "SotW was resent what it holds: {next:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
