//! What the binary's end-to-end tests share: a running `xds-file-server` on free loopback ports
//! (gRPC, REST, admin), plain HTTP requests to it, and a scratch directory.
#![allow(dead_code, unreachable_pub)] // each test file uses its own part
#![allow(clippy::unwrap_used)] // helpers fail loudly by design

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tonic::transport::{Channel, Endpoint};
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};

/// A fresh scratch directory named for the test and this process.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("xds-file-server-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A loopback address free right now.
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// A running `xds-file-server`, killed when dropped.
pub struct Running {
    pub child: Child,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub admin: SocketAddr,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// Starts the binary on free loopback ports and waits until the admin port answers
    /// `/healthz` (every port is bound before any answers).
    pub async fn start(config: &Path, extra: &[&str]) -> Running {
        let mut args = vec!["--config".to_owned(), config.display().to_string()];
        args.extend(extra.iter().map(|a| a.to_string()));
        Running::start_with(&args).await
    }

    /// Starts the binary with `args` (and free loopback ports) and waits until the admin port
    /// answers `/healthz`.
    pub async fn start_with(args: &[String]) -> Running {
        let (grpc, http, admin) = (free_addr(), free_addr(), free_addr());
        let extra = args;
        let child = Command::new(env!("CARGO_BIN_EXE_xds-file-server"))
            .args(["--grpc-addr", &grpc.to_string(), "--http-addr", &http.to_string()])
            .args(["--admin-addr", &admin.to_string()])
            .args(["--log", "warn"])
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut running = Running { child, grpc, http, admin };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok((200, _)) = running.get("/healthz").await {
                return running;
            }
            assert!(running.alive(), "the server exited");
            assert!(Instant::now() < deadline, "the server did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// A plain HTTP/1.1 GET on the admin port: the status code and the body.
    pub async fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        request(self.admin, &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
            .await
    }

    /// A plain HTTP/1.1 POST of a JSON body to `addr`: the status code and the body.
    pub async fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        request(addr, &head).await.unwrap()
    }

    /// `/status`'s `config` object.
    pub async fn config_state(&self) -> serde_json::Value {
        let (_, body) = self.get("/status").await.unwrap();
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["config"].clone()
    }

    /// Waits until `/status`'s config satisfies `done`, and returns it.
    pub async fn until(
        &self,
        what: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let state = self.config_state().await;
            if done(&state) {
                return state;
            }
            assert!(Instant::now() < deadline, "{what}: {state}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The value of an unlabelled or labelled sample in /metrics.
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics").await.unwrap();
        body.lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
    }

    /// A plaintext gRPC channel to the xDS port.
    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.grpc)).unwrap().connect().await.unwrap()
    }
}

/// Sends `raw` to `addr` and reads the whole HTTP/1.1 response: the status code and the body.
async fn request(addr: SocketAddr, raw: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(raw.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let code = response.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    Ok((code, body))
}

/// An ADS client on a connection of its own.
pub async fn ads(addr: SocketAddr) -> AggregatedDiscoveryServiceClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    AggregatedDiscoveryServiceClient::new(channel)
}

/// The node of a request: just an id.
pub fn node(id: &str) -> Option<Node> {
    Some(Node { id: id.into(), ..Default::default() })
}

/// Opens a delta ADS stream of every cluster for `node_id` on a connection of its own, its
/// first request declaring `held` (rule D7): the sender of later requests and the responses.
pub async fn delta_clusters(
    addr: SocketAddr,
    node_id: &str,
    held: &BTreeMap<String, String>,
) -> (mpsc::Sender<DeltaDiscoveryRequest>, Streaming<DeltaDiscoveryResponse>) {
    let (tx, rx) = mpsc::channel(4);
    let first = DeltaDiscoveryRequest {
        node: node(node_id),
        type_url: xds_proto::ResourceType::Cluster.type_url().into(),
        initial_resource_versions: held.clone().into_iter().collect(),
        ..Default::default()
    };
    tx.send(first).await.unwrap();
    let responses = ads(addr)
        .await
        .delta_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, responses)
}
