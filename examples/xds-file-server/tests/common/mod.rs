//! What the binary's end-to-end tests share: a running `xds-file-server` on free loopback ports
//! (gRPC, REST, admin), plain HTTP requests to it, floods of idle connections, and a scratch
//! directory.
#![allow(dead_code, unreachable_pub)] // each test file uses its own part
#![allow(clippy::unwrap_used)] // helpers fail loudly by design

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
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

/// A CA, a server certificate for `localhost`, and client certificates, as PEM files in a
/// scratch directory.
pub struct Pki {
    pub dir: PathBuf,
    /// The CA's certificate (PEM).
    pub ca: String,
}

impl Pki {
    /// The CA (`ca.pem`), and certificates for `localhost` and for `clients`, each
    /// `<name>.pem` with its key `<name>.key`.
    pub fn new(clients: &[&str]) -> Pki {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let dir = temp_dir(&format!("pki-{}", MADE.fetch_add(1, Ordering::Relaxed)));
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        std::fs::write(dir.join("ca.pem"), &ca_pem).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        for name in std::iter::once(&"localhost").chain(clients) {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(vec![(*name).to_owned()])
                .unwrap()
                .signed_by(&key, &issuer)
                .unwrap();
            std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
        }
        Pki { dir, ca: ca_pem }
    }

    /// The path of one of its files.
    pub fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
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
    /// Starts the binary on free loopback ports and returns at once, for a server whose admin
    /// port a plain request cannot reach (TLS on it): the caller waits in its own way.
    pub fn spawn(config: &Path, extra: &[&str]) -> Running {
        let (grpc, http, admin) = (free_addr(), free_addr(), free_addr());
        let child = Command::new(env!("CARGO_BIN_EXE_xds-file-server"))
            .args(["--config", &config.display().to_string()])
            .args(extra)
            .args(["--grpc-addr", &grpc.to_string(), "--http-addr", &http.to_string()])
            .args(["--admin-addr", &admin.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Running { child, grpc, http, admin }
    }

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
        Running::launch(|| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_xds-file-server"));
            command.args(["--log", "warn"]).args(args);
            command
        })
        .await
    }

    /// Starts the binary under `ulimit -n fds` (soft and hard: it cannot raise it), on free
    /// loopback ports, and waits for `/healthz`.
    pub async fn start_limited(config: &Path, fds: u32, extra: &[&str]) -> Running {
        Running::launch(|| {
            let mut command = Command::new("bash");
            command
                .arg("-c")
                .arg(format!("ulimit -n {fds} && exec \"$0\" \"$@\""))
                .arg(env!("CARGO_BIN_EXE_xds-file-server"))
                .args(["--config", &config.display().to_string(), "--log", "error"])
                .args(extra);
            command
        })
        .await
    }

    /// Runs the command `make` builds (the binary and its flags) on free loopback ports, and
    /// waits until the admin port answers `/healthz` (every port is bound before any answers).
    /// A port found free can be taken before the server binds it (by a concurrent test, or as
    /// the local port of an outgoing connection): a server that exits before it answers is
    /// started again on other ports, up to three times.
    async fn launch(make: impl Fn() -> Command) -> Running {
        for attempt in 1..=3 {
            let (grpc, http, admin) = (free_addr(), free_addr(), free_addr());
            let child = make()
                .args(["--grpc-addr", &grpc.to_string(), "--http-addr", &http.to_string()])
                .args(["--admin-addr", &admin.to_string()])
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            let mut running = Running { child, grpc, http, admin };
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Ok((200, _)) = running.get("/healthz").await {
                    return running;
                }
                if !running.alive() {
                    break;
                }
                assert!(Instant::now() < deadline, "the server did not start");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            eprintln!("the server exited before it answered (attempt {attempt} of 3)");
        }
        panic!("the server exited before it answered, three times");
    }

    /// The file descriptors the server has open now.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).unwrap().count()
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
    let mut stream = TcpStream::connect(addr).await?;
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

/// A TCP connection to `addr` from the local address `source` (on loopback any 127.x.y.z: each
/// is another peer to the server).
pub async fn connect_from(source: IpAddr, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = match source {
        IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(addr).await
}

/// Connections opened all at once to one port and kept open and silent until the flood is
/// released (or dropped); those past the kernel's backlog keep retrying their handshake.
pub struct Flood {
    /// Connections whose handshake completed.
    established: Arc<AtomicUsize>,
    /// Connections the server closed (read end or reset) before the release.
    closed: Arc<AtomicUsize>,
    /// Connections that failed to open: reset by the server before the client saw them open.
    failed: Arc<AtomicUsize>,
    release: tokio::sync::watch::Sender<bool>,
    tasks: tokio::task::JoinSet<()>,
}

impl Flood {
    /// Opens `count` connections to `addr`, the i-th from the local address `source(i)`.
    pub fn open(addr: SocketAddr, count: usize, source: impl Fn(usize) -> IpAddr) -> Flood {
        let counter = || Arc::new(AtomicUsize::new(0));
        let (established, closed, failed) = (counter(), counter(), counter());
        let (release, released) = tokio::sync::watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..count {
            let (from, mut released) = (source(i), released.clone());
            let (established, closed, failed) =
                (established.clone(), closed.clone(), failed.clone());
            tasks.spawn(async move {
                let Ok(mut conn) = connect_from(from, addr).await else {
                    failed.fetch_add(1, Ordering::SeqCst);
                    return;
                };
                established.fetch_add(1, Ordering::SeqCst);
                // Whatever the server sends (an HTTP/2 server its SETTINGS) is read and dropped,
                // until it closes the connection.
                let until_closed = async {
                    let mut buf = [0u8; 256];
                    while matches!(conn.read(&mut buf).await, Ok(n) if n > 0) {}
                };
                tokio::select! {
                    _ = released.wait_for(|r| *r) => {}
                    _ = until_closed => { closed.fetch_add(1, Ordering::SeqCst); }
                }
            });
        }
        Flood { established, closed, failed, release, tasks }
    }

    pub fn established(&self) -> usize {
        self.established.load(Ordering::SeqCst)
    }

    pub fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    pub fn failed(&self) -> usize {
        self.failed.load(Ordering::SeqCst)
    }

    /// The connections open now: established and not closed by the server.
    pub fn open_now(&self) -> usize {
        self.established() - self.closed()
    }

    /// Waits until `done` holds; panics after `within`.
    pub async fn until(&self, what: &str, within: Duration, done: impl Fn(&Flood) -> bool) {
        let deadline = Instant::now() + within;
        while !done(self) {
            let (open, closed, failed) = (self.established(), self.closed(), self.failed());
            assert!(
                Instant::now() < deadline,
                "{what}: {open} established, {closed} closed, {failed} failed"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Closes every connection and stops the ones still trying.
    pub fn release(mut self) {
        let _ = self.release.send(true);
        self.tasks.abort_all();
    }
}
