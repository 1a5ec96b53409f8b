//! Callbacks run with no lock of the stream held: one may call back into the server (here
//! `status()`, which reads every stream) on ACK and on NACK, while other clients keep being served.
#![allow(clippy::unwrap_used)]

mod util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use util::*;
use xds_cache::SnapshotCache;
use xds_proto::TypeUrl;
use xds_server::{Callbacks, Nack, StreamInfo, XdsServer};

/// Reads the whole status on every ACK and NACK, as a "log what this node holds" callback would.
#[derive(Default)]
struct ReadsStatus {
    server: OnceLock<XdsServer>,
    acks: AtomicUsize,
    nacks: AtomicUsize,
}

/// The callbacks handed to the server: the same recorder the test reads.
struct Hooks(Arc<ReadsStatus>);

impl Callbacks for Hooks {
    fn on_ack(&self, stream: &StreamInfo, _: &TypeUrl, _: &str, _: &str) {
        let streams = self.0.server.get().unwrap().status().streams();
        assert!(streams.iter().any(|s| s.stream == stream.id));
        self.0.acks.fetch_add(1, Ordering::SeqCst);
    }

    fn on_nack(&self, _: &StreamInfo, _: &Nack<'_>) {
        let _ = self.0.server.get().unwrap().status().to_json();
        self.0.nacks.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_that_reads_status_on_ack_and_nack_stalls_nothing() {
    let cache = SnapshotCache::by_node_id();
    let nodes: Vec<String> = (0..50).map(|i| format!("n{i}")).collect();
    for node in nodes.iter().chain(std::iter::once(&"reader".to_owned())) {
        cache.set_snapshot(node, snapshot![cluster("a", "1")]);
    }
    let recorder = Arc::new(ReadsStatus::default());
    let server = XdsServer::builder(cache.clone()).callbacks(Hooks(recorder.clone())).build();
    recorder.server.set(server.clone()).map_err(|_| ()).unwrap();
    let t = start(server).await;

    // The client whose ACKs and NACKs call back into the server.
    let mut reader = Sotw::ads(&t, "reader").await;
    reader.subscribe(CDS, &[], None).await;
    let first = reader.recv_type(CDS).await;
    reader.ack(&first).await;
    eventually("the ACK callback returned", || recorder.acks.load(Ordering::SeqCst) == 1).await;

    // 50 other clients connect and get their configuration, then an update each.
    let mut others = connect_all(&t, &nodes).await;
    cache.set_snapshot("reader", snapshot![cluster("a", "2")]);
    let second = reader.recv_type(CDS).await;
    reader.nack(&second, &first.version_info, "rejected").await;
    update_all(&cache, &nodes, &mut others).await;
    eventually("the NACK callback returned", || recorder.nacks.load(Ordering::SeqCst) == 1).await;
    // The reader's first ACK, and two per other client.
    eventually("every ACK callback returned", || recorder.acks.load(Ordering::SeqCst) == 101).await;
}

/// Delta ADS clients for `nodes`, each with its configuration received and ACKed.
async fn connect_all(t: &TestServer, nodes: &[String]) -> Vec<Delta> {
    let mut clients = Vec::new();
    for node in nodes {
        let mut client = Delta::ads(t, node).await;
        client.subscribe(CDS, &[], &[]).await;
        let r = client.recv_type(CDS).await;
        client.ack(&r).await;
        clients.push(client);
    }
    clients
}

/// Updates every node's cluster; each client receives and ACKs the update.
async fn update_all(cache: &SnapshotCache, nodes: &[String], clients: &mut [Delta]) {
    for node in nodes {
        cache.set_snapshot(node, snapshot![cluster("a", "2")]);
    }
    for client in clients {
        let update = client.recv_type(CDS).await;
        assert_eq!(update.resources.len(), 1);
        client.ack(&update).await;
    }
}

/// The authorization policy, too, runs with no lock of the stream held: one that reads
/// `status()` (say, to allow one stream per node) answers instead of deadlocking the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorizer_that_reads_status_stalls_nothing() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cla("a", 1)]);
    let handle: Arc<OnceLock<XdsServer>> = Arc::default();
    let seen = handle.clone();
    let server = XdsServer::builder(cache)
        .authorizer(xds_server::authz::from_fn(move |_: &xds_server::authz::Request<'_>| {
            let _ = seen.get().map(|s| s.status().streams());
            Ok(())
        }))
        .build();
    handle.set(server.clone()).map_err(|_| ()).unwrap();
    let t = start(server).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    let r = ads.recv_type(CDS).await;
    ads.ack(&r).await;
    // A second type on the same stream: authorized while the stream's first type is held.
    ads.subscribe(EDS, &["a"], None).await;
    assert_eq!(ads.recv_type(EDS).await.resources.len(), 1);
}

/// Blocks the ACK callback of node "blocker" until the test lets it go.
struct Gate {
    open: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
    blocked: AtomicUsize,
}

struct BlocksOnAck(Arc<Gate>);

impl Callbacks for BlocksOnAck {
    fn on_ack(&self, stream: &StreamInfo, _: &TypeUrl, _: &str, _: &str) {
        if stream.type_url.is_some() {
            // The blocker uses a per-type stream; everyone else uses ADS.
            self.0.blocked.fetch_add(1, Ordering::SeqCst);
            let mut open = self.0.open.lock().unwrap();
            while !*open {
                open = self.0.opened.wait(open).unwrap();
            }
        }
    }
}

/// A callback may block (a slow log write, an audit call) without stalling other streams: on a
/// multi-thread runtime callbacks run where blocking is allowed. With one worker thread, a
/// callback blocking that worker would otherwise stop every other stream with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_callback_that_blocks_stalls_no_other_stream() {
    let cache = SnapshotCache::by_node_id();
    let nodes: Vec<String> = (0..10).map(|i| format!("n{i}")).collect();
    for node in nodes.iter().chain(std::iter::once(&"blocker".to_owned())) {
        cache.set_snapshot(node, snapshot![cluster("a", "1")]);
    }
    let gate = Arc::new(Gate {
        open: std::sync::Mutex::new(false),
        opened: std::sync::Condvar::new(),
        blocked: AtomicUsize::new(0),
    });
    let server = XdsServer::builder(cache.clone()).callbacks(BlocksOnAck(gate.clone())).build();
    let t = start(server).await;

    let _release = Release(gate.clone());

    // The blocker's ACK callback blocks.
    let mut blocker = Sotw::clusters(&t, "blocker").await;
    blocker.subscribe(CDS, &[], None).await;
    let first = blocker.recv_type(CDS).await;
    blocker.ack(&first).await;
    eventually("the ACK callback blocks", || gate.blocked.load(Ordering::SeqCst) == 1).await;

    // Meanwhile other clients connect, get their configuration, and then an update each.
    let mut others = connect_all(&t, &nodes).await;
    update_all(&cache, &nodes, &mut others).await;

    // Let go: the blocker's stream goes on.
    drop(_release);
    cache.set_snapshot("blocker", snapshot![cluster("a", "2")]);
    let second = blocker.recv_type(CDS).await;
    assert_ne!(second.version_info, first.version_info);
}

/// Opens the gate when dropped, also when the test fails: a callback still blocked would keep
/// the runtime from shutting down.
struct Release(Arc<Gate>);

impl Drop for Release {
    fn drop(&mut self) {
        if let Ok(mut open) = self.0.open.lock() {
            *open = true;
        }
        self.0.opened.notify_all();
    }
}
