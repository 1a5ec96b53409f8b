//! The binary's reloads, end to end, as a clumsy operator meets them: an emptied directory, a
//! file read while still being written, a FIFO among the files, edits to one file of many, and
//! a rejected file. The served state is checked from connected SotW and delta clients.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fail loudly by design

use std::time::{Duration, Instant};

use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use xds_proto::ResourceType;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use xds_proto::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};

mod common;
use common::*;

fn node(id: &str) -> Option<Node> {
    Some(Node { id: id.into(), ..Default::default() })
}

fn cluster_name(bytes: &[u8]) -> String {
    Cluster::decode(bytes).unwrap().name
}

/// A SotW ADS client subscribed to every cluster.
struct Sotw {
    node: String,
    tx: mpsc::Sender<DiscoveryRequest>,
    rx: Streaming<DiscoveryResponse>,
}

impl Sotw {
    async fn open(running: &Running, node_id: &str) -> Sotw {
        let (tx, rx) = mpsc::channel(4);
        let request = DiscoveryRequest {
            node: node(node_id),
            type_url: ResourceType::Cluster.type_url().into(),
            ..Default::default()
        };
        tx.send(request).await.unwrap();
        let rx = AggregatedDiscoveryServiceClient::new(running.channel().await)
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Sotw { node: node_id.into(), tx, rx }
    }

    /// The next response's cluster names (ACKed).
    async fn next(&mut self) -> Vec<String> {
        let response = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("a response in time")
            .unwrap()
            .expect("the stream stays open");
        let ack = DiscoveryRequest {
            node: node(&self.node),
            type_url: ResourceType::Cluster.type_url().into(),
            version_info: response.version_info.clone(),
            response_nonce: response.nonce.clone(),
            ..Default::default()
        };
        self.tx.send(ack).await.unwrap();
        let mut names: Vec<String> =
            response.resources.iter().map(|any| cluster_name(&any.value)).collect();
        names.sort();
        names
    }

    async fn quiet(&mut self) {
        let next = tokio::time::timeout(Duration::from_millis(500), self.rx.message()).await;
        assert!(next.is_err(), "SotW: unexpected message: {next:?}");
    }
}

/// A delta ADS client subscribed to every cluster (wildcard).
struct Delta {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: Streaming<DeltaDiscoveryResponse>,
}

impl Delta {
    async fn open(running: &Running, node_id: &str) -> Delta {
        let (tx, rx) = mpsc::channel(4);
        let request = DeltaDiscoveryRequest {
            node: node(node_id),
            type_url: ResourceType::Cluster.type_url().into(),
            ..Default::default()
        };
        tx.send(request).await.unwrap();
        let rx = AggregatedDiscoveryServiceClient::new(running.channel().await)
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Delta { tx, rx }
    }

    /// The next response's (added or updated, removed) cluster names (ACKed).
    async fn next(&mut self) -> (Vec<String>, Vec<String>) {
        let response = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("a response in time")
            .unwrap()
            .expect("the stream stays open");
        let ack = DeltaDiscoveryRequest {
            type_url: ResourceType::Cluster.type_url().into(),
            response_nonce: response.nonce.clone(),
            ..Default::default()
        };
        self.tx.send(ack).await.unwrap();
        let mut added: Vec<String> = response
            .resources
            .iter()
            .filter_map(|r| r.resource.as_ref())
            .map(|any| cluster_name(&any.value))
            .collect();
        added.sort();
        let mut removed = response.removed_resources.clone();
        removed.sort();
        (added, removed)
    }

    async fn quiet(&mut self) {
        let next = tokio::time::timeout(Duration::from_millis(500), self.rx.message()).await;
        assert!(next.is_err(), "delta: unexpected message: {next:?}");
    }
}

fn clusters(names: &[&str]) -> String {
    let mut text = String::new();
    for c in names {
        text.push_str(&format!(
            "  - \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n    name: {c}\n    type: STATIC\n"
        ));
    }
    text
}

fn config_with(names: &[&str]) -> String {
    format!("resources:\n{}", clusters(names))
}

#[tokio::test]
async fn removing_every_file_of_the_directory_withdraws_nothing() {
    let dir = temp_dir("emptied");
    let file = dir.join("a.yaml");
    std::fs::write(&file, config_with(&["backend"])).unwrap();
    let server = Running::start(&dir, &[]).await;
    let mut sotw = Sotw::open(&server, "n1").await;
    let mut delta = Delta::open(&server, "n1").await;
    assert_eq!(sotw.next().await, ["backend"]);
    assert_eq!(delta.next().await, (vec!["backend".to_owned()], vec![]));

    std::fs::remove_file(&file).unwrap();
    let state = server.until("the emptied directory is refused", |s| s["error"].is_string()).await;
    let error = state["error"].as_str().unwrap();
    assert!(error.contains("no .yaml"), "{error}");
    sotw.quiet().await;
    delta.quiet().await;
    // Still serving a valid configuration: ready (the refusal is an alert, not unreadiness).
    let (code, body) = server.get("/ready").await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("rejected") && body.contains("no .yaml"), "{body}");

    // A new file is served, and nothing was ever removed.
    std::fs::write(dir.join("b.yaml"), config_with(&["backend", "other"])).unwrap();
    assert_eq!(sotw.next().await, ["backend", "other"]);
    assert_eq!(delta.next().await, (vec!["other".to_owned()], vec![]));
}

#[tokio::test]
async fn a_file_still_being_written_is_not_published() {
    let dir = temp_dir("half");
    let path = dir.join("config.yaml");
    let nested: String = clusters(&["e2"]).lines().map(|l| format!("    {l}\n")).collect();
    let groups = format!("groups:\n  envoy-2:\n    resources:\n{nested}");
    std::fs::write(&path, format!("{}{groups}", config_with(&["backend"]))).unwrap();
    // A long quiet period, so that "still being written" does not depend on machine speed.
    let server = Running::start(&path, &["--reload-quiet-ms", "3000"]).await;
    let mut default = Sotw::open(&server, "envoy-1").await;
    assert_eq!(default.next().await, ["backend"]);
    let loads = server.config_state().await["loads"].as_u64().unwrap();

    // The operator rewrites the file in place, slowly: first everything before `groups:`.
    let mut file = std::fs::File::create(&path).unwrap();
    std::io::Write::write_all(&mut file, config_with(&["backend", "backend2"]).as_bytes()).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Streams opened meanwhile by envoy-2 get its own group, not the default one.
    let mut sotw = Sotw::open(&server, "envoy-2").await;
    let mut delta = Delta::open(&server, "envoy-2").await;
    assert_eq!(sotw.next().await, ["e2"]);
    assert_eq!(delta.next().await, (vec!["e2".to_owned()], vec![]));
    // The rest of the file: published once, whole.
    std::io::Write::write_all(&mut file, groups.as_bytes()).unwrap();
    drop(file);
    assert_eq!(default.next().await, ["backend", "backend2"]);
    let state = server.until("published", |s| s["loads"].as_u64() > Some(loads)).await;
    assert_eq!(state["loads"].as_u64(), Some(loads + 1), "one load of the whole file: {state}");
    assert!(state["error"].is_null(), "{state}");
    sotw.quiet().await;
    delta.quiet().await;
}

#[tokio::test]
async fn a_fifo_among_the_files_is_refused_and_the_server_still_stops() {
    let dir = temp_dir("fifo");
    std::fs::write(dir.join("a.yaml"), config_with(&["backend"])).unwrap();
    let mut server = Running::start(&dir, &[]).await;
    let mut sotw = Sotw::open(&server, "n1").await;
    let mut delta = Delta::open(&server, "n1").await;
    assert_eq!(sotw.next().await, ["backend"]);
    assert_eq!(delta.next().await, (vec!["backend".to_owned()], vec![]));

    let fifo = dir.join("b.yaml");
    let c_path = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0, "mkfifo");
    let state = server.until("the FIFO is refused", |s| s["error"].is_string()).await;
    let error = state["error"].as_str().unwrap();
    assert!(error.contains("b.yaml") && error.contains("FIFO"), "{error}");
    sotw.quiet().await;
    delta.quiet().await;

    // Removing it recovers: the next edit is served.
    std::fs::remove_file(&fifo).unwrap();
    std::fs::write(dir.join("a.yaml"), config_with(&["backend", "other"])).unwrap();
    assert_eq!(sotw.next().await, ["backend", "other"]);
    assert_eq!(delta.next().await, (vec!["other".to_owned()], vec![]));
    server.until("recovered", |s| s["error"].is_null()).await;

    // With a FIFO back in place, SIGTERM still stops the process promptly.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0, "mkfifo");
    server.until("the FIFO is refused again", |s| s["error"].is_string()).await;
    let pid = i32::try_from(server.child.id()).unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "still running 5 s after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_edit_to_one_file_parses_only_that_file() {
    let dir = temp_dir("one-of-many");
    for name in ["a", "b", "c", "d"] {
        std::fs::write(dir.join(format!("{name}.yaml")), config_with(&[name])).unwrap();
    }
    let server = Running::start(&dir, &[]).await;
    assert_eq!(server.metric("xds_config_files_parsed_total").await, Some(4.0));
    let mut delta = Delta::open(&server, "n1").await;
    assert_eq!(delta.next().await.0, ["a", "b", "c", "d"]);
    let loads = server.config_state().await["loads"].as_u64().unwrap();

    std::fs::write(dir.join("c.yaml"), config_with(&["c", "c2"])).unwrap();
    assert_eq!(delta.next().await, (vec!["c2".to_owned()], vec![]));
    server.until("published", |s| s["loads"].as_u64() > Some(loads)).await;
    assert_eq!(server.metric("xds_config_files_parsed_total").await, Some(5.0));
}

#[tokio::test]
async fn ready_and_metrics_say_whether_the_newest_file_is_served() {
    let dir = temp_dir("ready");
    let path = dir.join("config.yaml");
    std::fs::write(&path, config_with(&["c1", "c2"])).unwrap();
    let server = Running::start(&path, &[]).await;
    assert_eq!(server.get("/ready").await.unwrap(), (200, "ready\n".to_owned()));
    assert_eq!(server.metric("xds_config_reloads_total{result=\"ok\"}").await, Some(1.0));
    assert_eq!(server.metric("xds_config_error").await, Some(0.0));
    assert_eq!(server.metric("xds_config_resources{type=\"cluster\"}").await, Some(2.0));
    assert!(server.metric("xds_config_last_success_timestamp_seconds").await.unwrap() > 1.0e9);

    std::fs::write(&path, "resources: [ {").unwrap();
    server.until("rejected", |s| s["error"].is_string()).await;
    // The last good configuration serves: /ready stays 200 (a rejected file on every replica
    // must not take them all out of rotation); the rejection is the alert.
    let (code, body) = server.get("/ready").await.unwrap();
    assert_eq!(code, 200);
    assert!(
        body.contains("rejected") && body.contains("config.yaml") && body.contains("syntax"),
        "{body}"
    );
    assert_eq!(server.get("/healthz").await.unwrap().0, 200, "liveness is not readiness");
    assert_eq!(server.metric("xds_config_error").await, Some(1.0));
    assert_eq!(server.metric("xds_config_reloads_total{result=\"error\"}").await, Some(1.0));
    assert_eq!(server.metric("xds_config_resources{type=\"cluster\"}").await, Some(2.0));

    std::fs::write(&path, config_with(&["c1"])).unwrap();
    server.until("served again", |s| s["error"].is_null()).await;
    assert_eq!(server.get("/ready").await.unwrap().0, 200);
    assert_eq!(server.metric("xds_config_reloads_total{result=\"ok\"}").await, Some(2.0));
    assert_eq!(server.metric("xds_config_resources{type=\"cluster\"}").await, Some(1.0));
}

/// Appends a comment line to `path` every 100 ms until `stop` is set.
fn keep_appending(
    path: std::path::PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
            std::io::Write::write_all(&mut file, b"# tick\n").unwrap();
            drop(file);
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

#[tokio::test]
async fn a_file_that_never_settles_is_reported_and_other_edits_are_applied() {
    let dir = temp_dir("never-settles");
    std::fs::write(dir.join("a.yaml"), config_with(&["a"])).unwrap();
    std::fs::write(dir.join("b.yaml"), config_with(&["b"])).unwrap();
    let server = Running::start(&dir, &["--reload-settle-ms", "2000"]).await;
    let mut delta = Delta::open(&server, "n1").await;
    assert_eq!(delta.next().await.0, ["a", "b"]);
    assert_eq!(server.metric("xds_config_unsettled_files").await, Some(0.0));

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = keep_appending(dir.join("a.yaml"), stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // An edit to the other file is applied within the settle limit plus a quiet period or two,
    // while a.yaml is still being appended to.
    let edited = Instant::now();
    std::fs::write(dir.join("b.yaml"), config_with(&["b", "b2"])).unwrap();
    assert_eq!(delta.next().await, (vec!["b2".to_owned()], vec![]));
    let took = edited.elapsed();
    assert!(took < Duration::from_secs(4), "applied after {took:?}");
    let state = server
        .until("a.yaml is named", |s| s["unsettled"].as_array().is_some_and(|a| !a.is_empty()))
        .await;
    let unsettled = state["unsettled"].to_string();
    assert!(unsettled.contains("a.yaml") && !unsettled.contains("b.yaml"), "{state}");
    assert!(state["error"].is_null(), "{state}");
    assert_eq!(server.metric("xds_config_unsettled_files").await, Some(1.0));

    // A second edit while a.yaml still changes: applied after the quiet period alone.
    let edited = Instant::now();
    std::fs::write(dir.join("b.yaml"), config_with(&["b", "b2", "b3"])).unwrap();
    assert_eq!(delta.next().await, (vec!["b3".to_owned()], vec![]));
    assert!(edited.elapsed() < Duration::from_secs(2), "applied after {:?}", edited.elapsed());

    // Once a.yaml settles, it is read again and no longer reported.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    appender.join().unwrap();
    server
        .until("a.yaml has settled", |s| s["unsettled"].as_array().is_some_and(Vec::is_empty))
        .await;
    assert_eq!(server.metric("xds_config_unsettled_files").await, Some(0.0));
    std::fs::write(dir.join("a.yaml"), config_with(&["a", "a2"])).unwrap();
    assert_eq!(delta.next().await, (vec!["a2".to_owned()], vec![]));
}

#[tokio::test]
async fn the_console_lists_the_reloads_with_what_changed_and_a_refused_ones_error() {
    let dir = temp_dir("console-history");
    let path = dir.join("config.yaml");
    std::fs::write(&path, config_with(&["c1"])).unwrap();
    let server = Running::start(&path, &[]).await;
    let history = || async {
        let (code, body) = server.get("/ui/api/config").await.unwrap();
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()
    };
    let first = history().await;
    assert_eq!(first["history"][0]["outcome"], "applied", "{first}");
    assert_eq!(first["history"][0]["source"], "files (initial load)");
    assert_eq!(first["summary"]["source"], "files");

    std::fs::write(&path, config_with(&["c1", "c2"])).unwrap();
    server.until("published", |s| s["reloads_ok"] == 2).await;
    let changed = history().await;
    let entry = &changed["history"][0];
    assert_eq!(entry["source"], "files", "{changed}");
    assert_eq!(
        entry["changes"]["resource_counts"]["cluster"],
        serde_json::json!({"before": 1, "after": 2})
    );
    assert_eq!(entry["changes"]["resources_changed"], 1, "{entry}");

    // The file's own text, with markup in it, comes back as data in the refused entry.
    std::fs::write(&path, "resources: [ {<script>").unwrap();
    server.until("rejected", |s| s["error"].is_string()).await;
    let refused = history().await;
    let entry = &refused["history"][0];
    assert_eq!(entry["outcome"], "refused", "{refused}");
    let error = entry["error"].as_str().unwrap();
    assert!(error.contains("config.yaml"), "{error}");
    assert_eq!(refused["summary"]["current_error"].as_str(), Some(error));
    assert_eq!(refused["summary"]["reloads_refused"], 1);
    assert_eq!(refused["history_total"], 3, "newest first: refused, applied, initial");
    assert_eq!(refused["history"][2]["source"], "files (initial load)");
}
