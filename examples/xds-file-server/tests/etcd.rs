//! Replicas fed from a real etcd (started by each test on free ports with a scratch data dir;
//! skipped, saying so, only when no `etcd` binary is installed — `examples/run-all-tests.sh`
//! installs it). Clients are raw SotW and delta ADS streams that count what they are sent.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fail loudly by design

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use xds_cache::{Snapshot, SnapshotBuilder};
use xds_etcd::EtcdClient;
use xds_etcd::publish::{PublishError, plan};
use xds_etcd::wire::{DeleteRangeRequest, PutRequest, RequestOp, TxnRequest, request_op};
use xds_proto::builders::{eds_cluster, endpoints};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use xds_proto::{ResourceType, TypeUrl};

mod common;
use common::*;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

/// A single-member etcd on free loopback ports, killed when dropped.
struct Etcd {
    max_txn_ops: usize,
    child: Option<Child>,
    client: SocketAddr,
    peer: SocketAddr,
    dir: PathBuf,
}

impl Etcd {
    /// Starts etcd, or `None` (with a message) when the binary is not installed.
    async fn start(name: &str) -> Option<Etcd> {
        Etcd::start_with(name, 10_000).await
    }

    /// Starts etcd with `--max-txn-ops max_txn_ops` (etcd's default is 128).
    async fn start_with(name: &str, max_txn_ops: usize) -> Option<Etcd> {
        if Command::new("etcd").arg("--version").output().is_err() {
            eprintln!(
                "SKIPPED: no `etcd` binary (apt-get install -y etcd-server; \
                 examples/run-all-tests.sh installs it)"
            );
            return None;
        }
        let mut etcd = Etcd {
            max_txn_ops,
            child: None,
            client: free_addr(),
            peer: free_addr(),
            dir: temp_dir(&format!("etcd-{name}")),
        };
        etcd.spawn().await;
        Some(etcd)
    }

    fn url(&self) -> String {
        format!("http://{}", self.client)
    }

    async fn spawn(&mut self) {
        let (client, peer) = (format!("http://{}", self.client), format!("http://{}", self.peer));
        let log = std::fs::File::create(self.dir.join("etcd.log")).unwrap();
        let child = Command::new("etcd")
            .args(["--name", "t", "--data-dir"])
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("t={peer}")])
            .args(["--max-txn-ops", &self.max_txn_ops.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let client = self.client();
        let deadline = Instant::now() + Duration::from_secs(20);
        while client.range_prefix(b"/").await.is_err() {
            assert!(Instant::now() < deadline, "etcd did not start; see {}", self.dir.display());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn client(&self) -> EtcdClient {
        EtcdClient::new(&[self.url()]).unwrap()
    }

    /// Writes `value` at `key` in one transaction of its own, behind `publish`'s back.
    async fn put(&self, key: Vec<u8>, value: Vec<u8>) {
        let put =
            RequestOp { request: Some(request_op::Request::RequestPut(PutRequest { key, value })) };
        self.client().txn(TxnRequest { success: vec![put], ..Default::default() }).await.unwrap();
    }

    /// Deletes every key under `prefix`, behind `publish`'s back (as `etcdctl del --prefix`).
    async fn delete_prefix(&self, prefix: &[u8]) {
        let delete = RequestOp {
            request: Some(request_op::Request::RequestDeleteRange(DeleteRangeRequest {
                key: prefix.to_vec(),
                range_end: xds_etcd::wire::prefix_end(prefix),
            })),
        };
        self.client()
            .txn(TxnRequest { success: vec![delete], ..Default::default() })
            .await
            .unwrap();
    }

    /// Every key of the store and its value.
    async fn all_keys(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let read = self.client().range_prefix(b"/").await.unwrap();
        read.kvs.into_iter().map(|kv| (kv.key, kv.value)).collect()
    }

    /// Sends `signal` to etcd (SIGSTOP: it hangs, keeping its connections open).
    fn signal(&self, signal: i32) {
        let pid = self.child.as_ref().unwrap().id();
        // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
        assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
    }

    async fn revision(&self) -> i64 {
        self.client().range_prefix(b"/").await.unwrap().header.unwrap().revision
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TCP proxy in front of etcd that the test can cut (closing every connection and refusing
/// new ones) and restore: one replica loses etcd while the others keep it.
struct Proxy {
    addr: SocketAddr,
    blocked: watch::Sender<bool>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (blocked, watcher) = watch::channel(false);
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else { continue };
                if *watcher.borrow() {
                    continue; // dropped: refused
                }
                let mut cut = watcher.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.wait_for(|b| *b) => {}
                    }
                });
            }
        });
        Proxy { addr, blocked }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn cut(&self, yes: bool) {
        self.blocked.send_replace(yes);
    }
}

/// Writes `clusters.yaml` in `dir`: one STATIC cluster per (name, connect timeout seconds).
fn write_config(dir: &Path, clusters: &[(&str, u32)]) {
    let mut text = String::from("resources:\n");
    for (name, timeout) in clusters {
        text.push_str(&format!(
            "  - \"@type\": {CDS}\n    name: {name}\n    type: STATIC\n    connect_timeout: {timeout}s\n"
        ));
    }
    std::fs::write(dir.join("clusters.yaml"), text).unwrap();
}

/// Runs `xds-file-server publish`: whether it succeeded, and what it printed.
fn publish(etcd: &str, prefix: &str, dir: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xds-file-server"))
        .args(["publish", "--etcd", etcd, "--prefix", prefix, "--config"])
        .arg(dir)
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

async fn replica(etcd: &str, prefix: &str) -> Running {
    replica_with(etcd, prefix, &[]).await
}

async fn replica_with(etcd: &str, prefix: &str, extra: &[&str]) -> Running {
    let mut args: Vec<String> = ["--etcd", etcd, "--prefix", prefix].map(str::to_owned).into();
    args.extend(extra.iter().map(|a| a.to_string()));
    let running = Running::start_with(&args).await;
    wait_ready(&running, true).await;
    running
}

/// Waits until `/ready` answers 200 (`ready`) or 503 (`!ready`); returns the body.
async fn wait_ready(running: &Running, ready: bool) -> String {
    let want = if ready { 200 } else { 503 };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok((code, body)) = running.get("/ready").await
            && code == want
        {
            return body;
        }
        assert!(Instant::now() < deadline, "/ready never answered {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A SotW ADS client of every cluster, holding what it was sent.
struct Sotw {
    tx: mpsc::Sender<DiscoveryRequest>,
    rx: Streaming<DiscoveryResponse>,
    version: String,
    names: Vec<String>,
    replica: String,
}

impl Sotw {
    /// Opens a stream, presenting `held` (the version and names a client already has) as a
    /// reconnecting client does.
    async fn open(addr: SocketAddr, held: Option<&Sotw>) -> Sotw {
        let (tx, rx) = mpsc::channel(4);
        let request = DiscoveryRequest {
            node: node("sotw"),
            type_url: CDS.into(),
            version_info: held.map(|h| h.version.clone()).unwrap_or_default(),
            ..Default::default()
        };
        tx.send(request).await.unwrap();
        let rx = ads(addr)
            .await
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let (version, names) =
            held.map(|h| (h.version.clone(), h.names.clone())).unwrap_or_default();
        Sotw { tx, rx, version, names, replica: String::new() }
    }

    /// Waits for a response, ACKs it, and returns its cluster names.
    async fn next(&mut self) -> Vec<String> {
        let response = tokio::time::timeout(Duration::from_secs(15), self.rx.message())
            .await
            .expect("a SotW response in time")
            .unwrap()
            .expect("the stream stays open");
        self.tx
            .send(DiscoveryRequest {
                node: node("sotw"),
                type_url: CDS.into(),
                version_info: response.version_info.clone(),
                response_nonce: response.nonce.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        self.version = response.version_info.clone();
        self.replica = response.control_plane.map(|c| c.identifier).unwrap_or_default();
        let mut names: Vec<String> = response
            .resources
            .iter()
            .map(|a| Cluster::decode(&a.value[..]).unwrap().name)
            .collect();
        names.sort();
        self.names = names.clone();
        names
    }

    async fn quiet(&mut self) {
        let next = tokio::time::timeout(Duration::from_millis(700), self.rx.message()).await;
        assert!(next.is_err(), "SotW was sent something: {next:?}");
    }
}

/// A delta ADS client of every cluster, holding each resource's version.
struct Delta {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: Streaming<DeltaDiscoveryResponse>,
    held: BTreeMap<String, String>,
    /// Resources received on this stream.
    received: usize,
}

impl Delta {
    async fn open(addr: SocketAddr, held: BTreeMap<String, String>) -> Delta {
        let (tx, rx) = delta_clusters(addr, "delta", &held).await;
        Delta { tx, rx, held, received: 0 }
    }

    /// Waits for a response, ACKs it, and returns (added or updated, removed) names.
    async fn next(&mut self) -> (Vec<String>, Vec<String>) {
        let response: DeltaDiscoveryResponse =
            tokio::time::timeout(Duration::from_secs(15), self.rx.message())
                .await
                .expect("a delta response in time")
                .unwrap()
                .expect("the stream stays open");
        self.tx
            .send(DeltaDiscoveryRequest {
                type_url: CDS.into(),
                response_nonce: response.nonce.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        let mut added = Vec::new();
        for r in &response.resources {
            self.received += 1;
            self.held.insert(r.name.clone(), r.version.clone());
            added.push(r.name.clone());
        }
        for name in &response.removed_resources {
            self.held.remove(name);
        }
        added.sort();
        let mut removed = response.removed_resources.clone();
        removed.sort();
        (added, removed)
    }

    async fn quiet(&mut self) {
        let next = tokio::time::timeout(Duration::from_millis(700), self.rx.message()).await;
        assert!(next.is_err(), "delta was sent something: {next:?}");
    }

    /// Takes (and ACKs) whatever arrives until the stream has been quiet for a while; the
    /// resources among it are counted in `received`. (A reconnect may be answered with an empty
    /// response: that resends nothing.)
    async fn settle(&mut self) {
        while let Ok(next) =
            tokio::time::timeout(Duration::from_millis(700), self.rx.message()).await
        {
            let response = next.unwrap().expect("the stream stays open");
            self.received += response.resources.len();
            self.tx
                .send(DeltaDiscoveryRequest {
                    type_url: CDS.into(),
                    response_nonce: response.nonce.clone(),
                    ..Default::default()
                })
                .await
                .unwrap();
        }
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_agree_and_a_failed_over_client_is_resent_nothing() {
    let Some(etcd) = Etcd::start("replicas").await else { return };
    let dir = temp_dir("etcd-replicas-config");
    write_config(&dir, &[("a", 1), ("b", 1)]);
    let (ok, out) = publish(&etcd.url(), "/t", &dir);
    assert!(ok, "{out}");
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(replica(&etcd.url(), "/t").await);
    }
    let mut sotw = Vec::new();
    let mut delta = Vec::new();
    for r in &replicas {
        let mut s = Sotw::open(r.grpc, None).await;
        assert_eq!(s.next().await, names(&["a", "b"]));
        sotw.push(s);
        let mut d = Delta::open(r.grpc, BTreeMap::new()).await;
        assert_eq!(d.next().await.0, names(&["a", "b"]));
        delta.push(d);
    }
    // Every replica: identical versions, and its own control_plane.identifier.
    assert!(sotw.iter().all(|s| s.version == sotw[0].version), "SotW versions differ");
    assert!(delta.iter().all(|d| d.held == delta[0].held), "delta versions differ");
    assert!(
        sotw[0].replica.ends_with(&format!(":{}", replicas[0].grpc.port())),
        "{}",
        sotw[0].replica
    );
    assert_ne!(sotw[0].replica, sotw[1].replica, "replicas name themselves");

    // A publish reaches every client on every replica, with identical versions.
    write_config(&dir, &[("a", 1), ("b", 2), ("c", 1)]);
    let (ok, out) = publish(&etcd.url(), "/t", &dir);
    assert!(ok, "{out}");
    assert!(out.contains("2 keys written, 0 deleted, 1 unchanged"), "{out}");
    for (s, d) in sotw.iter_mut().zip(delta.iter_mut()) {
        assert_eq!(s.next().await, names(&["a", "b", "c"]));
        assert_eq!(d.next().await, (names(&["b", "c"]), vec![]), "only what changed");
    }
    assert!(sotw.iter().all(|s| s.version == sotw[0].version), "SotW versions differ");
    assert!(delta.iter().all(|d| d.held == delta[0].held), "delta versions differ");

    // kill -9 replica 0: its clients reconnect to replica 1 presenting what they hold, and are
    // sent nothing (counted: no message at all, then only the next change).
    let mut dead = replicas.remove(0);
    dead.child.kill().unwrap();
    dead.child.wait().unwrap();
    let (old_sotw, old_delta) = (sotw.remove(0), delta.remove(0));
    let mut s = Sotw::open(replicas[0].grpc, Some(&old_sotw)).await;
    let mut d = Delta::open(replicas[0].grpc, old_delta.held.clone()).await;
    s.quiet().await;
    d.settle().await;
    assert_eq!(d.received, 0, "resources resent after failover");
    write_config(&dir, &[("a", 1), ("b", 2), ("c", 3)]);
    let (ok, out) = publish(&etcd.url(), "/t", &dir);
    assert!(ok, "{out}");
    assert_eq!(d.next().await, (names(&["c"]), vec![]), "only the change, nothing held resent");
    assert_eq!(d.received, 1);
    assert_eq!(s.next().await, names(&["a", "b", "c"]));
    assert_eq!(sotw[0].next().await, names(&["a", "b", "c"]));
    assert_eq!(s.version, sotw[0].version, "the failed-over client agrees with the replica's own");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_keep_serving_while_etcd_is_down_and_catch_up_after() {
    let Some(mut etcd) = Etcd::start("outage").await else { return };
    let dir = temp_dir("etcd-outage-config");
    write_config(&dir, &[("a", 1)]);
    assert!(publish(&etcd.url(), "/o", &dir).0);
    // Replica 0 stays in rotation while stale (the default), replica 1 leaves it.
    let replicas = [
        replica(&etcd.url(), "/o").await,
        replica_with(&etcd.url(), "/o", &["--ready-when-stale", "unready"]).await,
    ];
    let mut d = Delta::open(replicas[0].grpc, BTreeMap::new()).await;
    assert_eq!(d.next().await.0, names(&["a"]));

    etcd.kill();
    let down = Instant::now();
    let body = wait_ready(&replicas[1], false).await;
    assert!(body.contains("stale"), "{body}");
    let state = replicas[0].until("stale", |s| !s["stale"].is_null()).await;
    assert!(state["stale_seconds"].as_f64().is_some(), "the age is shown: {state}");
    // Ten seconds without etcd: both replicas serve what they have, to old and new clients.
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(down.elapsed())).await;
    for r in &replicas {
        let mut fresh = Sotw::open(r.grpc, None).await;
        assert_eq!(fresh.next().await, names(&["a"]));
    }
    assert!(replicas[1].get("/ready").await.unwrap().1.contains("stale"));
    assert_eq!(replicas[0].get("/ready").await.unwrap().0, 200, "serve: stale, still ready");
    let state = replicas[0].config_state().await;
    assert!(state["stale_seconds"].as_f64().unwrap() >= 5.0, "{state}");
    let (_, metrics) = replicas[0].get("/metrics").await.unwrap();
    assert!(metrics.contains("xds_etcd_stale 1"), "{metrics}");
    d.quiet().await;

    etcd.spawn().await;
    for r in &replicas {
        wait_ready(r, true).await;
    }
    write_config(&dir, &[("a", 1), ("b", 1)]);
    let (ok, out) = publish(&etcd.url(), "/o", &dir);
    assert!(ok, "{out}");
    assert_eq!(d.next().await, (names(&["b"]), vec![]));
    let mut late = Delta::open(replicas[1].grpc, BTreeMap::new()).await;
    assert_eq!(late.next().await.0, names(&["a", "b"]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_revision_was_compacted_reads_everything_again() {
    let Some(etcd) = Etcd::start("compact").await else { return };
    let proxy = Proxy::start(etcd.client).await;
    let dir = temp_dir("etcd-compact-config");
    write_config(&dir, &[("a", 1), ("gone", 1)]);
    assert!(publish(&etcd.url(), "/c", &dir).0);
    let r = replica_with(&proxy.url(), "/c", &["--ready-when-stale", "unready"]).await;
    let mut d = Delta::open(r.grpc, BTreeMap::new()).await;
    assert_eq!(d.next().await.0, names(&["a", "gone"]));

    proxy.cut(true);
    assert!(wait_ready(&r, false).await.contains("stale"));
    // Two publishes the replica misses, then the history it would resume from is compacted.
    write_config(&dir, &[("a", 2), ("gone", 1)]);
    assert!(publish(&etcd.url(), "/c", &dir).0);
    write_config(&dir, &[("a", 2), ("b", 1)]);
    assert!(publish(&etcd.url(), "/c", &dir).0);
    let revision = etcd.revision().await;
    etcd.client().compact(revision).await.unwrap();

    proxy.cut(false);
    wait_ready(&r, true).await;
    // The full read is applied as one change: the client sees the end state, not the history
    // (the updates, and the removal, which the server may send in a response of its own).
    let (updated, mut removed) = d.next().await;
    assert_eq!(updated, names(&["a", "b"]));
    if removed.is_empty() {
        removed = d.next().await.1;
    }
    assert_eq!(removed, names(&["gone"]));
    assert_eq!(d.held.keys().collect::<Vec<_>>(), ["a", "b"]);
    let state = r.config_state().await;
    assert_eq!(state["revision"], revision, "{state}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_config_is_refused_and_changes_nothing() {
    let Some(etcd) = Etcd::start("invalid").await else { return };
    let dir = temp_dir("etcd-invalid-config");
    write_config(&dir, &[("a", 1)]);
    assert!(publish(&etcd.url(), "/i", &dir).0);
    let r = replica(&etcd.url(), "/i").await;
    let mut s = Sotw::open(r.grpc, None).await;
    assert_eq!(s.next().await, names(&["a"]));

    // `publish` refuses a configuration the loader refuses: nothing is written.
    let before = etcd.revision().await;
    std::fs::write(
        dir.join("bad.yaml"),
        format!("resources:\n  - \"@type\": {CDS}\n    name: x\n    bogus: 1\n"),
    )
    .unwrap();
    let (ok, out) = publish(&etcd.url(), "/i", &dir);
    assert!(!ok && out.contains("refused, nothing published") && out.contains("bogus"), "{out}");
    assert_eq!(etcd.revision().await, before, "etcd unchanged");
    s.quiet().await;

    // A value written behind publish's back that names another resource than its key: the
    // replica rejects that revision and keeps serving the last valid one. That is an alert
    // (/status names the key, xds_config_error), not a reason to leave rotation: every replica
    // rejects the same revision, and a readiness probe would take them all out at once.
    let value =
        xds_proto::EncodedResource::new(&Cluster { name: "y".into(), ..Default::default() })
            .unwrap()
            .to_any()
            .encode_to_vec();
    etcd.put(b"/i//envoy.config.cluster.v3.Cluster/x".to_vec(), value).await;
    let state = r.until("the revision is rejected", |s| !s["error"].is_null()).await;
    let error = state["error"].as_str().unwrap();
    assert!(
        error.contains("/i//envoy.config.cluster.v3.Cluster/x") && error.contains("names \"y\""),
        "{error}"
    );
    let (code, body) = r.get("/ready").await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("rejected"), "{body}");
    let (_, metrics) = r.get("/metrics").await.unwrap();
    assert!(metrics.contains("xds_config_error 1"), "{metrics}");
    // The console's Configuration panel lists the refused revision with its error.
    let (_, body) = r.get("/ui/api/config").await.unwrap();
    let history: serde_json::Value = serde_json::from_str(&body).unwrap();
    let refused = &history["history"][0];
    assert_eq!(refused["outcome"], "refused", "{history}");
    assert!(refused["source"].as_str().unwrap().starts_with("etcd revision "), "{history}");
    assert!(error.ends_with(refused["error"].as_str().unwrap()), "{history}");
    assert_eq!(history["history"][1]["outcome"], "applied", "{history}");
    assert_eq!(history["summary"]["source"], "etcd", "{history}");
    s.quiet().await;
    let mut fresh = Sotw::open(r.grpc, None).await;
    assert_eq!(fresh.next().await, names(&["a"]));

    // The next valid publish (which deletes the stray key) is served.
    std::fs::remove_file(dir.join("bad.yaml")).unwrap();
    write_config(&dir, &[("a", 1), ("b", 1)]);
    let (ok, out) = publish(&etcd.url(), "/i", &dir);
    assert!(ok && out.contains("1 deleted"), "{out}");
    assert_eq!(s.next().await, names(&["a", "b"]));
    r.until("the error clears", |s| s["error"].is_null()).await;

    // Another tool empties the prefix: refused like an emptied directory, the last state serves.
    etcd.delete_prefix(b"/i/").await;
    let state = r.until("the empty prefix is rejected", |s| !s["error"].is_null()).await;
    assert!(state["error"].as_str().unwrap().contains("/i/ is empty"), "{state}");
    assert_eq!(r.get("/ready").await.unwrap().0, 200);
    s.quiet().await;
    let mut fresh = Sotw::open(r.grpc, None).await;
    assert_eq!(fresh.next().await, names(&["a", "b"]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_larger_than_a_grpc_message_is_loaded() {
    // Six 1 MB clusters, each written in its own transaction (etcd takes at most 1.5 MiB per
    // request): the replica's one Range of the prefix is ~6 MB, past tonic's 4 MiB default.
    let Some(etcd) = Etcd::start("large").await else { return };
    for i in 0..6 {
        let cluster = Cluster {
            name: format!("big-{i}"),
            alt_stat_name: "x".repeat(1_000_000),
            ..Default::default()
        };
        let value = xds_proto::EncodedResource::new(&cluster).unwrap().to_any().encode_to_vec();
        etcd.put(format!("/l//envoy.config.cluster.v3.Cluster/big-{i}").into_bytes(), value).await;
    }
    // `replica` waits for /ready: it never came when the Range could not be decoded.
    let r = replica(&etcd.url(), "/l").await;
    let (code, status) = r.get("/status").await.unwrap();
    assert_eq!(code, 200);
    assert!(status.contains("\"cluster\":6"), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_past_etcds_max_txn_ops_is_refused_whole_and_names_the_limit_to_raise() {
    // A publish also writes its two bookkeeping keys: 4 clusters need 6 operations.
    let Some(etcd) = Etcd::start_with("txn-ops", 6).await else { return };
    let dir = temp_dir("etcd-txn-ops-config");
    let many: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    let many: Vec<(&str, u32)> = many.iter().map(|n| (n.as_str(), 1)).collect();
    write_config(&dir, &many);
    let before = etcd.revision().await;
    let (ok, out) = publish(&etcd.url(), "/x", &dir);
    assert!(!ok, "{out}");
    for needed in [
        "12 operations",
        "too many operations in txn request",
        "--max-txn-ops",
        "nothing was written",
    ] {
        assert!(out.contains(needed), "{needed:?} missing from: {out}");
    }
    assert_eq!(etcd.revision().await, before, "nothing written: not even part of it");
    assert!(etcd.client().range_prefix(b"/x/").await.unwrap().kvs.is_empty());
    // Within the limit, the same command publishes.
    write_config(&dir, &many[..4]);
    let (ok, out) = publish(&etcd.url(), "/x", &dir);
    assert!(ok && out.contains("4 keys written"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_group_is_known_to_the_replicas_and_serves_its_nodes_nothing() {
    let Some(etcd) = Etcd::start("empty-group").await else { return };
    let dir = temp_dir("etcd-empty-group-config");
    write_config(&dir, &[("a", 1)]);
    std::fs::write(dir.join("groups.yaml"), "groups:\n  edge:\n    resources: []\n").unwrap();
    let (ok, out) = publish(&etcd.url(), "/e", &dir);
    assert!(ok && out.contains("2 keys written"), "the cluster and the group's marker: {out}");
    let r = replica(&etcd.url(), "/e").await;
    let state = r.config_state().await;
    assert_eq!(state["groups"], serde_json::json!(["", "edge"]), "{state}");

    // A node of the empty group is served its group (nothing), not the default group.
    let (tx, rx) = mpsc::channel(4);
    let request =
        DiscoveryRequest { node: node("edge"), type_url: CDS.into(), ..Default::default() };
    tx.send(request).await.unwrap();
    let mut edge = ads(r.grpc)
        .await
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    if let Ok(next) = tokio::time::timeout(Duration::from_millis(700), edge.message()).await {
        let response = next.unwrap().expect("the stream stays open");
        assert!(response.resources.is_empty(), "the empty group's node was served {response:?}");
    }
    let mut other = Sotw::open(r.grpc, None).await;
    assert_eq!(other.next().await, names(&["a"]));

    // Dropping the group from the configuration deletes its marker: the group is gone.
    std::fs::remove_file(dir.join("groups.yaml")).unwrap();
    let (ok, out) = publish(&etcd.url(), "/e", &dir);
    assert!(ok && out.contains("1 deleted"), "{out}");
    r.until("the group is gone", |s| s["groups"] == serde_json::json!([""])).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Clusters `a` and `b` (EDS) and their endpoints in the default group, changed by `edit`.
fn mesh(edit: impl FnOnce(&mut SnapshotBuilder)) -> BTreeMap<String, Snapshot> {
    let mut builder = Snapshot::builder();
    for name in ["a", "b"] {
        builder.add(&eds_cluster(name)).unwrap();
        builder.add(&endpoints(name, &[("10.0.0.1", 80)])).unwrap();
    }
    edit(&mut builder);
    BTreeMap::from([(String::new(), builder.build().unwrap())])
}

/// Publisher A's configuration: cluster `a` and its endpoints deleted.
fn without_a() -> BTreeMap<String, Snapshot> {
    mesh(|b| {
        b.remove(&TypeUrl::Builtin(ResourceType::Cluster), "a");
        b.remove(&TypeUrl::Builtin(ResourceType::ClusterLoadAssignment), "a");
    })
}

/// Publisher B's configuration: `b`'s endpoints changed.
fn b_moved() -> BTreeMap<String, Snapshot> {
    mesh(|b| {
        b.add(&endpoints("b", &[("10.0.0.2", 80)])).unwrap();
    })
}

/// Publisher B's configuration: a cluster `c` added that uses `a`'s endpoints.
fn c_uses_a() -> BTreeMap<String, Snapshot> {
    mesh(|b| {
        let mut c = eds_cluster("c");
        c.eds_cluster_config.as_mut().unwrap().service_name = "a".into();
        b.add(&c).unwrap();
    })
}

/// Forces the interleaving two concurrent publishes can take: `late` reads the prefix, `early`
/// publishes whole, then `late` commits. `late` must fail, naming `early`'s revision, and the
/// store must hold exactly `early`'s configuration.
async fn race(
    etcd: &Etcd,
    prefix: &str,
    late: &BTreeMap<String, Snapshot>,
    early: &BTreeMap<String, Snapshot>,
) {
    let client = etcd.client();
    xds_etcd::publish(&client, prefix, &mesh(|_| {})).await.unwrap();
    let read = plan(&client, prefix, late).await.unwrap();
    let won = xds_etcd::publish(&client, prefix, early).await.unwrap();
    let lost = read.commit(&client).await;
    let error = match lost {
        Err(e @ PublishError::Conflict { .. }) => e.to_string(),
        other => panic!("{prefix}: the late publish must fail whole, got {other:?}"),
    };
    assert_eq!(
        error,
        format!(
            "another publish changed {prefix}/ at revision {}; nothing was written; publish again",
            won.revision
        )
    );
    assert_eq!(etcd.revision().await, won.revision, "{prefix}: the late publish wrote nothing");
    // The store is `early`'s configuration, whole: publishing it again changes no key.
    let again = xds_etcd::publish(&client, prefix, early).await.unwrap();
    assert_eq!((again.put, again.deleted, again.revision), (0, 0, won.revision), "{prefix}");
}

/// Two publishers that read the same revision: exactly one configuration is stored, whole; the
/// other publish fails and writes nothing. Forced in both orders, for a deletion against a
/// change elsewhere (nothing to compare on the deleted keys: only the publish guard sees it) and
/// for a deletion against a new reference to what is deleted (which would store an invalid
/// configuration every replica refuses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_publishes_never_interleave_either_order_publish_guard() {
    let Some(etcd) = Etcd::start("race").await else { return };
    race(&etcd, "/race-delete-late", &without_a(), &b_moved()).await;
    race(&etcd, "/race-put-late", &b_moved(), &without_a()).await;
    race(&etcd, "/race-delete-late-ref", &without_a(), &c_uses_a()).await;
    race(&etcd, "/race-ref-late", &c_uses_a(), &without_a()).await;

    // The command commits between a plan's read and its commit: the plan fails.
    let dir = temp_dir("etcd-race-config");
    write_config(&dir, &[("x", 1)]);
    let read = plan(&etcd.client(), "/race-cli", &b_moved()).await.unwrap();
    let (ok, out) = publish(&etcd.url(), "/race-cli", &dir);
    assert!(ok, "{out}");
    let error = read.commit(&etcd.client()).await.unwrap_err().to_string();
    assert!(error.starts_with("another publish changed /race-cli/ at revision"), "{error}");
    // A writer that is not a publish (no guard rewritten) is seen by the range compare.
    let read = plan(&etcd.client(), "/race-cli", &b_moved()).await.unwrap();
    let value =
        xds_proto::EncodedResource::new(&eds_cluster("z")).unwrap().to_any().encode_to_vec();
    etcd.put(b"/race-cli//envoy.config.cluster.v3.Cluster/z".to_vec(), value).await;
    let error = read.commit(&etcd.client()).await.unwrap_err().to_string();
    assert!(error.starts_with("another writer changed a key under /race-cli/"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `publish` refuses the whole key space, a prefix inside another deployment's or containing
/// one, and a prefix holding keys it did not write; other applications' keys are never touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_touches_only_its_own_keys() {
    let Some(etcd) = Etcd::start("own-keys").await else { return };
    let dir = temp_dir("etcd-own-keys-config");
    write_config(&dir, &[("a", 1)]);
    for (key, value) in [("/other/app/x", "1"), ("/meshy/k", "2"), ("/mesh-2/k", "3")] {
        etcd.put(key.into(), value.into()).await;
    }
    let others = etcd.all_keys().await;
    let before = etcd.revision().await;
    for prefix in ["/", "", "//"] {
        let (ok, out) = publish(&etcd.url(), prefix, &dir);
        assert!(!ok && out.contains("whole key space"), "{prefix:?}: {out}");
    }
    assert_eq!(etcd.revision().await, before, "nothing written");

    let (ok, out) = publish(&etcd.url(), "/mesh", &dir);
    assert!(ok, "{out}");
    // Nested inside a deployment, or around one: refused, nothing written.
    let before = etcd.revision().await;
    let (ok, out) = publish(&etcd.url(), "/mesh/edge", &dir);
    assert!(!ok && out.contains("/mesh/edge/ is inside the deployment at /mesh/"), "{out}");
    assert_eq!(etcd.revision().await, before, "nothing written");
    let (ok, out) = publish(&etcd.url(), "/fleet/inner", &dir);
    assert!(ok, "{out}");
    let inner = etcd.client().range_prefix(b"/fleet/inner/").await.unwrap().kvs;
    let (ok, out) = publish(&etcd.url(), "/fleet", &dir);
    assert!(!ok && out.contains("/fleet/ contains the deployment at /fleet/inner/"), "{out}");
    assert_eq!(etcd.client().range_prefix(b"/fleet/inner/").await.unwrap().kvs, inner);

    // A key under the prefix that is not in the layout: refused and kept, not deleted.
    etcd.put(b"/mesh/tools/notes.txt".to_vec(), b"keep me".to_vec()).await;
    let before = etcd.revision().await;
    let (ok, out) = publish(&etcd.url(), "/mesh", &dir);
    assert!(
        !ok && out.contains("outside the layout") && out.contains("/mesh/tools/notes.txt"),
        "{out}"
    );
    assert_eq!(etcd.revision().await, before);

    let now = etcd.all_keys().await;
    for (key, value) in &others {
        assert_eq!(now.get(key), Some(value), "{:?} was touched", String::from_utf8_lossy(key));
    }
    assert!(now.contains_key(b"/mesh/tools/notes.txt".as_slice()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A hung etcd (SIGSTOP: connections stay open, nothing answers) shows on /status within 2 s,
/// its recovery within about 1 s; the replica stays ready and keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_etcd_shows_within_two_seconds_and_its_recovery_within_one() {
    let Some(etcd) = Etcd::start("hung").await else { return };
    let dir = temp_dir("etcd-hung-config");
    write_config(&dir, &[("a", 1)]);
    assert!(publish(&etcd.url(), "/h", &dir).0);
    let r = replica(&etcd.url(), "/h").await;
    r.until("the probe answers", |s| s["store_revision"].is_i64()).await;

    etcd.signal(libc::SIGSTOP);
    let hung = Instant::now();
    let state = r.until("stale", |s| !s["stale"].is_null()).await;
    let seen = hung.elapsed();
    etcd.signal(libc::SIGCONT);
    let resumed = Instant::now();
    assert!(seen <= Duration::from_secs(2), "a hung etcd showed after {seen:?}: {state}");
    assert!(state["stale"].as_str().unwrap().contains("probe"), "{state}");
    r.until("recovered", |s| s["stale"].is_null()).await;
    let recovered = resumed.elapsed();
    assert!(recovered <= Duration::from_millis(1500), "recovery showed after {recovered:?}");
    assert_eq!(r.get("/ready").await.unwrap().0, 200);
    let mut fresh = Sotw::open(r.grpc, None).await;
    assert_eq!(fresh.next().await, names(&["a"]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A measurement, not a check (run it alone, with `--ignored --nocapture`): a replica over
/// FLEET_KEYS keys (default 100,000) while one key (and the publish guard) is written per revision at FLEET_RATE
/// revisions per second (default 500) for FLEET_SECONDS (default 10). Prints the replica's own
/// `lag_seconds` (its maximum over samples every 100 ms), the revisions between etcd's newest and
/// the one served, and how long the replica took to catch up once the writes stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: 100,000 keys, 500 one-key revisions per second"]
async fn measure_replica_lag_under_one_key_revisions() {
    let number = |name: &str, default: u64| {
        std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
    };
    let (keys, rate, seconds) =
        (number("FLEET_KEYS", 100_000), number("FLEET_RATE", 500), number("FLEET_SECONDS", 10));
    let Some(etcd) = Etcd::start("lag").await else { return };
    let client = etcd.client();
    let value = |i: u64, timeout: u64| {
        let cluster = Cluster {
            name: format!("c{i}"),
            connect_timeout: Some(xds_proto::pb::google::protobuf::Duration {
                seconds: timeout as i64,
                nanos: 0,
            }),
            ..Default::default()
        };
        xds_proto::EncodedResource::new(&cluster).unwrap().to_any().encode_to_vec()
    };
    let key = |i: u64| format!("/lag//envoy.config.cluster.v3.Cluster/c{i}").into_bytes();
    let put = |key: Vec<u8>, value: Vec<u8>| RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest { key, value })),
    };
    let started = Instant::now();
    for chunk in (0..keys).collect::<Vec<_>>().chunks(5_000) {
        let ops = chunk.iter().map(|&i| put(key(i), value(i, 1))).collect();
        client.txn(TxnRequest { success: ops, ..Default::default() }).await.unwrap();
    }
    let loaded = etcd.revision().await;
    eprintln!("{keys} keys written in {:?}", started.elapsed());
    let args = ["--etcd", &etcd.url(), "--prefix", "/lag"].map(str::to_owned);
    let r = Running::start_with(&args).await;
    let started = Instant::now();
    loop {
        let state = r.config_state().await;
        if state["revision"].as_i64() >= Some(loaded) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(600), "never loaded: {state}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("the replica loaded them in {:?}", started.elapsed());

    let newest = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(loaded));
    let writer = {
        let (client, newest) = (client.clone(), newest.clone());
        tokio::spawn(async move {
            let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(64));
            let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
            for n in 0..rate * seconds {
                tick.tick().await;
                let permit = in_flight.clone().acquire_owned().await.unwrap();
                let (client, newest) = (client.clone(), newest.clone());
                // As `publish` writes (and as its docs ask of any other writer): the key and the
                // publish guard, in one transaction.
                let ops = vec![
                    put(key(n % keys), value(n % keys, 2 + n)),
                    put(
                        xds_etcd::layout::guard_key("/lag/").into_bytes(),
                        n.to_string().into_bytes(),
                    ),
                ];
                tokio::spawn(async move {
                    let done = client.txn(TxnRequest { success: ops, ..Default::default() });
                    if let Ok(answer) = done.await {
                        let revision = answer.header.map_or(0, |h| h.revision);
                        newest.fetch_max(revision, std::sync::atomic::Ordering::Relaxed);
                    }
                    drop(permit);
                });
            }
            let _ = in_flight.acquire_many(64).await;
        })
    };
    let (mut max_lag, mut behinds) = (0.0_f64, Vec::new());
    let writing = Instant::now();
    while !writer.is_finished() {
        let state = r.config_state().await;
        let served = state["revision"].as_i64().unwrap_or(0);
        max_lag = max_lag.max(state["lag_seconds"].as_f64().unwrap_or(0.0));
        behinds.push(newest.load(std::sync::atomic::Ordering::Relaxed) - served);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wrote = writing.elapsed();
    let last = newest.load(std::sync::atomic::Ordering::Relaxed);
    let stopped = Instant::now();
    loop {
        if r.config_state().await["revision"].as_i64() >= Some(last) {
            break;
        }
        assert!(stopped.elapsed() < Duration::from_secs(600), "never caught up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let series = format!("{behinds:?}");
    behinds.sort_unstable();
    let at = |q: f64| behinds[((behinds.len() - 1) as f64 * q) as usize];
    eprintln!(
        "RESULT keys={keys} rate={rate}/s for {wrote:?} ({} revisions): max lag_seconds {max_lag:.3} s; \
         revisions behind etcd over {} samples: p50 {} p90 {} max {}; caught up {:?} after the last \
         write\nbehind, in sample order: {series}",
        last - loaded,
        behinds.len(),
        at(0.5),
        at(0.9),
        at(1.0),
        stopped.elapsed()
    );
}
