//! Callbacks run with no lock of the stream held: one may call back into the server (here
//! `status()`, which reads every stream) on ACK and on NACK, while other clients keep being served.
#![allow(clippy::unwrap_used)]

mod util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use util::*;
use xds_cache::SnapshotCache;
use xds_core::ErrorDetail;
use xds_proto::TypeUrl;
use xds_server::{Callbacks, StreamInfo, XdsServer};

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

    fn on_nack(&self, _: &StreamInfo, _: &TypeUrl, _: &str, _: &str, _: &ErrorDetail) {
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
    let mut others = Vec::new();
    for node in &nodes {
        let mut client = Delta::ads(&t, node).await;
        client.subscribe(CDS, &[], &[]).await;
        let r = client.recv_type(CDS).await;
        client.ack(&r).await;
        others.push(client);
    }
    cache.set_snapshot("reader", snapshot![cluster("a", "2")]);
    let second = reader.recv_type(CDS).await;
    reader.nack(&second, &first.version_info, "rejected").await;
    for node in &nodes {
        cache.set_snapshot(node, snapshot![cluster("a", "2")]);
    }
    for client in &mut others {
        let update = client.recv_type(CDS).await;
        assert_eq!(update.resources.len(), 1);
        client.ack(&update).await;
    }
    eventually("the NACK callback returned", || recorder.nacks.load(Ordering::SeqCst) == 1).await;
    // The reader's first ACK, and two per other client.
    eventually("every ACK callback returned", || recorder.acks.load(Ordering::SeqCst) == 101).await;
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
        .authorizer(move |_: &xds_server::authz::Request<'_>| {
            let _ = seen.get().map(|s| s.status().streams());
            Ok(())
        })
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
