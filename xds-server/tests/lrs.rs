//! Load reporting (LRS) over the wire: the first response, the policy, aggregation across
//! clients, disconnects, and bounded nonsense.
#![allow(clippy::unwrap_used)]

mod util;

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};
use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::config::core::v3::{Locality, Node};
use xds_proto::pb::envoy::config::endpoint::v3::{ClusterStats, UpstreamLocalityStats};
use xds_proto::pb::envoy::service::load_stats::v3::load_reporting_service_client::LoadReportingServiceClient;
use xds_proto::pb::envoy::service::load_stats::v3::{LoadStatsRequest, LoadStatsResponse};
use xds_proto::pb::google::protobuf::Duration as PbDuration;
use xds_server::lrs::{
    LoadReportPolicy, LoadReportingServer, LocalityName, LrsConfig, ReportClusters, ReportRequest,
};
use xds_server::{Callbacks, Refusal, StreamInfo, XdsServer};

use util::*;

/// One LRS stream driven through a channel.
struct Lrs {
    tx: mpsc::Sender<LoadStatsRequest>,
    rx: Streaming<LoadStatsResponse>,
}

impl Lrs {
    async fn open(t: &TestServer) -> Lrs {
        let (tx, rx) = mpsc::channel(16);
        let mut client =
            LoadReportingServiceClient::new(t.channel().await).max_encoding_message_size(64 << 20);
        let response =
            tokio::time::timeout(WAIT, client.stream_load_stats(ReceiverStream::new(rx)))
                .await
                .expect("the stream did not open in time")
                .expect("open LRS");
        Lrs { tx, rx: response.into_inner() }
    }

    async fn send(&self, request: LoadStatsRequest) {
        self.tx.send(request).await.expect("the request stream is closed");
    }

    async fn recv(&mut self) -> Result<LoadStatsResponse, Status> {
        tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("no response in time")
            .map(|m| m.expect("the stream ended"))
    }

    /// Opens a stream for `node_id` and takes the first response.
    async fn start(t: &TestServer, node_id: &str) -> (Lrs, LoadStatsResponse) {
        let mut lrs = Lrs::open(t).await;
        lrs.send(LoadStatsRequest { node: Some(node(node_id)), cluster_stats: vec![] }).await;
        let first = lrs.recv().await.expect("the first response");
        (lrs, first)
    }
}

fn zone(z: &str) -> Option<Locality> {
    Some(Locality { region: "r".into(), zone: z.into(), sub_zone: String::new() })
}

fn locality(z: &str, issued: u64, ok: u64, errors: u64, in_progress: u64) -> UpstreamLocalityStats {
    UpstreamLocalityStats {
        locality: zone(z),
        total_issued_requests: issued,
        total_successful_requests: ok,
        total_error_requests: errors,
        total_requests_in_progress: in_progress,
        ..Default::default()
    }
}

fn cluster(name: &str, dropped: u64, localities: Vec<UpstreamLocalityStats>) -> ClusterStats {
    ClusterStats {
        cluster_name: name.into(),
        upstream_locality_stats: localities,
        total_dropped_requests: dropped,
        load_report_interval: Some(PbDuration { seconds: 1, nanos: 0 }),
        ..Default::default()
    }
}

fn report(clusters: Vec<ClusterStats>) -> LoadStatsRequest {
    LoadStatsRequest { node: None, cluster_stats: clusters }
}

fn name(z: &str) -> LocalityName {
    LocalityName { region: "r".into(), zone: z.into(), sub_zone: String::new() }
}

fn lrs_of(t: &TestServer) -> &LoadReportingServer {
    t.server.load_reporting()
}

#[tokio::test]
async fn first_response_asks_for_all_clusters_every_ten_seconds_by_default() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let (_lrs, first) = Lrs::start(&t, "n1").await;
    assert!(first.send_all_clusters);
    assert!(first.clusters.is_empty());
    assert_eq!(first.load_reporting_interval, Some(PbDuration { seconds: 10, nanos: 0 }));
    eventually("the stream is in the view", || lrs_of(&t).snapshot().nodes.contains_key("n1"))
        .await;
}

/// Asks "fast" nodes for clusters b and a every 2.5 s, others for everything at 0 s (clamped).
struct PerNode;

impl LoadReportPolicy for PerNode {
    fn request(&self, node: &Node) -> ReportRequest {
        if node.id.starts_with("fast") {
            ReportRequest::default()
                .clusters(ReportClusters::Only(vec!["b".into(), "a".into(), "a".into()]))
                .interval(Duration::from_millis(2500))
                .endpoint_granularity(false)
        } else {
            ReportRequest::default().interval(Duration::ZERO)
        }
    }
}

#[tokio::test]
async fn the_policy_chooses_clusters_and_interval_per_node_and_unlisted_clusters_are_rejected() {
    let server = XdsServer::builder(SnapshotCache::by_node_id())
        .load_reporting(LoadReportingServer::new().policy(PerNode))
        .build();
    let t = start(server).await;
    let (fast, first) = Lrs::start(&t, "fast-1").await;
    assert!(!first.send_all_clusters);
    assert_eq!(first.clusters, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(first.load_reporting_interval, Some(PbDuration { seconds: 2, nanos: 500_000_000 }));
    let (_slow, first) = Lrs::start(&t, "slow-1").await;
    assert!(first.send_all_clusters);
    // A zero interval is raised to the floor, 100 ms.
    assert_eq!(first.load_reporting_interval, Some(PbDuration { seconds: 0, nanos: 100_000_000 }));

    fast.send(report(vec![
        cluster("a", 0, vec![locality("z1", 3, 3, 0, 0)]),
        cluster("c", 0, vec![locality("z1", 7, 7, 0, 0)]),
    ]))
    .await;
    eventually("the report is counted", || lrs_of(&t).snapshot().clusters.contains_key("a")).await;
    let view = lrs_of(&t).snapshot();
    assert!(!view.clusters.contains_key("c"), "a cluster the policy did not ask for is dropped");
    assert_eq!(lrs_of(&t).rejected("unknown_cluster"), 1);
}

#[tokio::test]
async fn reports_from_two_clients_add_up_per_cluster_locality_and_node() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let (one, _) = Lrs::start(&t, "n1").await;
    let (two, _) = Lrs::start(&t, "n2").await;
    one.send(report(vec![cluster("a", 1, vec![locality("z1", 10, 8, 2, 4)])])).await;
    one.send(report(vec![cluster("a", 0, vec![locality("z1", 5, 5, 0, 1)])])).await;
    two.send(report(vec![cluster(
        "a",
        2,
        vec![locality("z1", 20, 20, 0, 3), locality("z2", 6, 5, 1, 0)],
    )]))
    .await;
    eventually("three reports", || lrs_of(&t).snapshot().reports == 5).await;

    let view = lrs_of(&t).snapshot();
    assert_eq!(view.streams, 2);
    let a = &view.clusters["a"];
    assert_eq!(a.dropped, 3);
    // In progress is a gauge: n1's last report (1) plus n2's (3).
    let z1 = a.localities[&name("z1")];
    assert_eq!((z1.issued, z1.succeeded, z1.errors, z1.in_progress), (35, 33, 2, 4));
    let z2 = a.localities[&name("z2")];
    assert_eq!((z2.issued, z2.succeeded, z2.errors, z2.in_progress), (6, 5, 1, 0));
    assert_eq!(a.total.issued, 41);
    assert_eq!(view.nodes["n1"].clusters["a"].total.issued, 15);
    assert_eq!(view.nodes["n2"].clusters["a"].total.issued, 26);
    assert_eq!(view.nodes["n2"].clusters["a"].dropped, 2);

    let metrics = lrs_of(&t).render_metrics();
    assert!(metrics.contains("xds_lrs_streams 2"), "{metrics}");
    assert!(metrics.contains("xds_lrs_reports_total 5"), "{metrics}");
    assert!(
        metrics.contains(
            "xds_lrs_window_requests{cluster=\"a\",locality=\"r/z1/\",result=\"issued\"} 35"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("xds_lrs_requests_in_progress{cluster=\"a\",locality=\"r/z1/\"} 4"),
        "{metrics}"
    );
    assert!(metrics.contains("xds_lrs_window_dropped_requests{cluster=\"a\"} 3"), "{metrics}");
}

#[tokio::test]
async fn a_subscriber_sees_the_newest_view_after_a_report() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let mut view = lrs_of(&t).subscribe();
    let (one, _) = Lrs::start(&t, "n1").await;
    one.send(report(vec![cluster("a", 0, vec![locality("z1", 9, 9, 0, 0)])])).await;
    let seen = tokio::time::timeout(WAIT, async {
        loop {
            let v = view.changed().await;
            if let Some(a) = v.clusters.get("a") {
                return a.total.issued;
            }
        }
    })
    .await
    .expect("the subscriber saw the report");
    assert_eq!(seen, 9);
}

#[tokio::test]
async fn a_client_that_disconnects_leaves_the_view() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let (one, _) = Lrs::start(&t, "n1").await;
    let (two, _) = Lrs::start(&t, "n2").await;
    one.send(report(vec![cluster("a", 0, vec![locality("z1", 10, 10, 0, 5)])])).await;
    two.send(report(vec![cluster("a", 0, vec![locality("z1", 1, 1, 0, 1)])])).await;
    eventually("both reports", || {
        lrs_of(&t).snapshot().clusters.get("a").is_some_and(|a| a.total.issued == 11)
    })
    .await;

    drop(one);
    eventually("n1 leaves the view", || !lrs_of(&t).snapshot().nodes.contains_key("n1")).await;
    let view = lrs_of(&t).snapshot();
    assert_eq!(view.streams, 1);
    let a = &view.clusters["a"].total;
    assert_eq!((a.issued, a.in_progress), (1, 1));
    assert!(lrs_of(&t).render_metrics().contains("xds_lrs_streams 1"));
}

struct RefuseBad;

impl Callbacks for RefuseBad {
    fn on_node(&self, _: &StreamInfo, node: &Node) -> Result<(), Refusal> {
        if node.id == "bad" { Err(Refusal("not you".into())) } else { Ok(()) }
    }
}

#[tokio::test]
async fn a_node_the_callbacks_refuse_gets_permission_denied() {
    let server = XdsServer::builder(SnapshotCache::by_node_id()).callbacks(RefuseBad).build();
    let t = start(server).await;
    let mut lrs = Lrs::open(&t).await;
    lrs.send(LoadStatsRequest { node: Some(node("bad")), cluster_stats: vec![] }).await;
    let status = lrs.recv().await.expect_err("refused");
    assert_eq!(status.code(), Code::PermissionDenied);
    assert_eq!(status.message(), "not you");
    assert_eq!(lrs_of(&t).rejected("refused"), 1);
    assert_eq!(lrs_of(&t).snapshot().streams, 0);
    let (_good, first) = Lrs::start(&t, "good").await;
    assert!(first.send_all_clusters);
}

#[tokio::test]
async fn a_first_request_without_a_node_is_invalid() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let mut lrs = Lrs::open(&t).await;
    lrs.send(report(vec![])).await;
    let status = lrs.recv().await.expect_err("no node");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(lrs_of(&t).rejected("no_node"), 1);
}

#[tokio::test]
async fn nonsense_reports_are_bounded_and_counted_and_the_stream_goes_on() {
    let mut config = LrsConfig::default();
    config.max_localities_per_cluster = 4;
    config.max_clusters_per_stream = 3;
    config.max_cluster_labels = 2;
    let server = XdsServer::builder(SnapshotCache::by_node_id())
        .load_reporting(LoadReportingServer::new().config(config))
        .build();
    let t = start(server).await;
    let (lrs, _) = Lrs::start(&t, "n1").await;

    let mut negative = cluster("neg", 0, vec![locality("z1", 1, 1, 0, 0)]);
    negative.load_report_interval = Some(PbDuration { seconds: -5, nanos: 0 });
    let mut huge = cluster("huge", 0, vec![locality("z1", 1, 1, 0, 0)]);
    huge.load_report_interval = Some(PbDuration { seconds: i64::MAX, nanos: 0 });
    let long_name = cluster(&"x".repeat(100_000), 0, vec![locality("z1", 1, 1, 0, 0)]);
    // 200,000 localities in one cluster: 4 are kept.
    let many: Vec<_> = (0..200_000).map(|i| locality(&format!("z{i}"), 1, 1, 0, 0)).collect();
    let crowded = cluster("crowded", 0, many);
    let overflow = cluster("a", u64::MAX, vec![locality("z1", u64::MAX, 0, 0, 0)]);
    lrs.send(report(vec![negative, huge, long_name])).await;
    lrs.send(report(vec![crowded, overflow.clone(), overflow])).await;
    lrs.send(report(vec![cluster("b", 0, vec![]), cluster("c", 0, vec![])])).await;
    lrs.send(report(vec![cluster("d", 0, vec![locality("z1", 1, 1, 0, 0)])])).await;
    eventually("the reports are taken", || lrs_of(&t).snapshot().reports == 5).await;

    let lrs_server = lrs_of(&t);
    assert_eq!(lrs_server.rejected("bad_interval"), 2);
    assert_eq!(lrs_server.rejected("name_too_long"), 1);
    assert_eq!(lrs_server.rejected("too_many_localities"), 200_000 - 4);
    // Three clusters per stream (crowded, a, b): c and d do not fit.
    assert_eq!(lrs_server.rejected("too_many_clusters"), 2);
    let view = lrs_server.snapshot();
    assert_eq!(view.clusters.keys().collect::<Vec<_>>(), vec!["a", "b", "crowded"]);
    assert_eq!(view.clusters["crowded"].localities.len(), 4);
    // Counts saturate instead of wrapping.
    assert_eq!(view.clusters["a"].total.issued, u64::MAX);
    assert_eq!(view.clusters["a"].dropped, u64::MAX);

    let metrics = lrs_server.render_metrics();
    assert!(metrics.contains("xds_lrs_rejected_total{reason=\"too_many_localities\"} 199996"));
    // Two cluster labels: "crowded" and "a" came first, "b" is counted as other.
    assert!(metrics.contains("xds_lrs_window_dropped_requests{cluster=\"other\"} 0"), "{metrics}");
    assert!(!metrics.contains("cluster=\"b\""), "{metrics}");
    assert!(metrics.lines().count() < 60, "bounded metrics: {metrics}");

    // The stream is still open and counting.
    lrs.send(report(vec![cluster("a", 0, vec![locality("z1", 0, 1, 0, 0)])])).await;
    eventually("the stream goes on", || lrs_of(&t).snapshot().reports == 6).await;
    assert_eq!(lrs_of(&t).snapshot().clusters["a"].total.succeeded, 1);
}

#[tokio::test]
async fn the_lrs_service_serves_on_its_own() {
    let lrs = LoadReportingServer::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let routes = lrs.routes();
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_routes(routes)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await;
    });
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(4);
    let mut responses = LoadReportingServiceClient::new(channel)
        .stream_load_stats(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(LoadStatsRequest {
        node: Some(node("solo")),
        cluster_stats: vec![cluster("a", 0, vec![locality("z1", 2, 2, 0, 0)])],
    })
    .await
    .unwrap();
    let first = tokio::time::timeout(WAIT, responses.message()).await.unwrap().unwrap().unwrap();
    assert!(first.send_all_clusters);
    assert_eq!(lrs.snapshot().clusters["a"].total.issued, 2, "the first request's stats count");
    task.abort();
}

/// Opens an LRS stream and sends nothing: the open's result (the server answers the open at
/// once, before any request).
async fn open_silent(
    t: &TestServer,
) -> Result<(mpsc::Sender<LoadStatsRequest>, Streaming<LoadStatsResponse>), Status> {
    let (tx, rx) = mpsc::channel(4);
    let mut client = LoadReportingServiceClient::new(t.channel().await);
    let response = tokio::time::timeout(WAIT, client.stream_load_stats(ReceiverStream::new(rx)))
        .await
        .expect("the open was answered in time")?;
    Ok((tx, response.into_inner()))
}

fn lrs_config(change: impl FnOnce(&mut LrsConfig)) -> LoadReportingServer {
    let mut config = LrsConfig::default();
    change(&mut config);
    LoadReportingServer::new().config(config)
}

#[tokio::test]
async fn streams_without_a_first_request_are_counted_and_bounded() {
    let lrs = lrs_config(|c| c.max_pending_streams = 2);
    let t =
        start(XdsServer::builder(SnapshotCache::by_node_id()).load_reporting(lrs).build()).await;
    let (first_tx, mut first_rx) = open_silent(&t).await.expect("the first silent stream opens");
    let _second = open_silent(&t).await.expect("the second silent stream opens");
    eventually("two pending streams", || lrs_of(&t).pending_streams() == 2).await;
    assert!(lrs_of(&t).render_metrics().contains("xds_lrs_streams_pending 2"));

    let refused = open_silent(&t).await.expect_err("a third silent stream is refused");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(lrs_of(&t).rejected("too_many_pending"), 1);

    // Once a stream has spoken it no longer counts as pending: there is room again.
    first_tx
        .send(LoadStatsRequest { node: Some(node("n1")), cluster_stats: vec![] })
        .await
        .unwrap();
    tokio::time::timeout(WAIT, first_rx.message()).await.unwrap().unwrap().unwrap();
    assert_eq!(lrs_of(&t).pending_streams(), 1);
    let _third = open_silent(&t).await.expect("a silent stream opens again");
    assert_eq!(lrs_of(&t).snapshot().streams, 1, "pending streams are not in the view");
}

#[tokio::test]
async fn a_stream_that_never_sends_its_first_request_ends_with_deadline_exceeded() {
    let lrs = lrs_config(|c| c.first_request_timeout = Duration::from_millis(200));
    let t =
        start(XdsServer::builder(SnapshotCache::by_node_id()).load_reporting(lrs).build()).await;
    let (_tx, mut rx) = open_silent(&t).await.expect("the stream opens");
    let status = tokio::time::timeout(WAIT, rx.message())
        .await
        .expect("the server ended the stream in time")
        .expect_err("the stream ends with an error");
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(lrs_of(&t).rejected("first_request_timeout"), 1);
    assert_eq!(lrs_of(&t).pending_streams(), 0);
}

/// Counts stream opens and closes.
#[derive(Default)]
struct Counts {
    opened: std::sync::atomic::AtomicUsize,
    closed: std::sync::atomic::AtomicUsize,
}

/// Callbacks that count opens and closes, and refuse node "bad".
struct OpenClose(std::sync::Arc<Counts>);

impl Callbacks for OpenClose {
    fn on_stream_open(&self, _: &StreamInfo) -> Result<(), Refusal> {
        self.0.opened.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn on_node(&self, _: &StreamInfo, node: &Node) -> Result<(), Refusal> {
        if node.id == "bad" { Err(Refusal("not you".into())) } else { Ok(()) }
    }

    fn on_stream_closed(&self, _: &StreamInfo) {
        self.0.closed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn on_stream_closed_follows_on_stream_open_when_on_node_refuses() {
    use std::sync::atomic::Ordering::SeqCst;
    let counts = std::sync::Arc::new(Counts::default());
    let server = XdsServer::builder(SnapshotCache::by_node_id())
        .callbacks(OpenClose(counts.clone()))
        .build();
    let t = start(server).await;
    let mut lrs = Lrs::open(&t).await;
    lrs.send(LoadStatsRequest { node: Some(node("bad")), cluster_stats: vec![] }).await;
    assert_eq!(lrs.recv().await.expect_err("refused").code(), Code::PermissionDenied);
    eventually("the refused stream is closed", || counts.closed.load(SeqCst) == 1).await;
    assert_eq!(counts.opened.load(SeqCst), 1);

    // An accepted stream: opened now, closed when the client leaves.
    let (good, _) = Lrs::start(&t, "good").await;
    assert_eq!((counts.opened.load(SeqCst), counts.closed.load(SeqCst)), (2, 1));
    drop(good);
    eventually("the accepted stream is closed", || counts.closed.load(SeqCst) == 2).await;
}

/// A policy whose answer per node the test changes: the interval, and clusters if set.
#[derive(Clone, Default)]
struct Changing(std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, ReportRequest>>>);

impl Changing {
    fn set(&self, node: &str, request: ReportRequest) {
        self.0.lock().unwrap().insert(node.into(), request);
    }
}

impl LoadReportPolicy for Changing {
    fn request(&self, node: &Node) -> ReportRequest {
        self.0.lock().unwrap().get(&node.id).cloned().unwrap_or_default()
    }
}

fn every(ms: u64) -> ReportRequest {
    ReportRequest::default().interval(Duration::from_millis(ms))
}

#[tokio::test]
async fn a_policy_change_is_sent_only_to_streams_whose_answer_changed() {
    let policy = Changing::default();
    let server = XdsServer::builder(SnapshotCache::by_node_id())
        .load_reporting(LoadReportingServer::new().policy(policy.clone()))
        .build();
    let t = start(server).await;
    let (mut a, first_a) = Lrs::start(&t, "a").await;
    let (mut b, first_b) = Lrs::start(&t, "b").await;
    assert_eq!(first_a.load_reporting_interval, Some(PbDuration { seconds: 10, nanos: 0 }));
    assert_eq!(first_b.load_reporting_interval, first_a.load_reporting_interval);

    // Only a's answer changes: a gets a new response.
    policy.set("a", every(2000));
    lrs_of(&t).policy_changed();
    let again = a.recv().await.expect("a new response for a");
    assert_eq!(again.load_reporting_interval, Some(PbDuration { seconds: 2, nanos: 0 }));
    assert!(again.send_all_clusters);

    // Then b's changes, to clusters "a" only: b's next response is this one (it was sent
    // nothing for a's change), and its reports of other clusters are rejected from now on.
    policy.set("b", every(3000).clusters(ReportClusters::Only(vec!["a".into()])));
    lrs_of(&t).policy_changed();
    let next = b.recv().await.expect("a new response for b");
    assert_eq!(next.load_reporting_interval, Some(PbDuration { seconds: 3, nanos: 0 }));
    assert_eq!((next.send_all_clusters, next.clusters), (false, vec!["a".to_string()]));
    b.send(report(vec![
        cluster("a", 0, vec![locality("z1", 1, 1, 0, 0)]),
        cluster("c", 0, vec![locality("z1", 1, 1, 0, 0)]),
    ]))
    .await;
    eventually("b's report", || lrs_of(&t).snapshot().reports == 3).await;
    assert_eq!(lrs_of(&t).rejected("unknown_cluster"), 1);
    assert!(!lrs_of(&t).snapshot().clusters.contains_key("c"));
}

#[tokio::test]
async fn only_known_clusters_get_a_metric_label_of_their_own() {
    let lrs = LoadReportingServer::new().known_clusters(|name: &str| name.starts_with("known-"));
    let t =
        start(XdsServer::builder(SnapshotCache::by_node_id()).load_reporting(lrs).build()).await;
    let (one, _) = Lrs::start(&t, "n1").await;
    // The unknown cluster comes first: it must not take a label slot, whatever the order.
    one.send(report(vec![
        cluster("rogue-1", 0, vec![locality("z1", 4, 4, 0, 0)]),
        cluster("known-a", 0, vec![locality("z1", 2, 2, 0, 0)]),
        cluster("rogue-2", 0, vec![locality("z1", 1, 1, 0, 0)]),
    ]))
    .await;
    eventually("the report", || lrs_of(&t).snapshot().reports == 2).await;
    let metrics = lrs_of(&t).render_metrics();
    assert!(
        metrics.contains(
            "xds_lrs_window_requests{cluster=\"known-a\",locality=\"r/z1/\",result=\"issued\"} 2"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "xds_lrs_window_requests{cluster=\"other\",locality=\"r/z1/\",result=\"issued\"} 5"
        ),
        "{metrics}"
    );
    assert!(!metrics.contains("rogue"), "{metrics}");
    // The view keeps every cluster by name: only the metric labels are bounded.
    assert_eq!(lrs_of(&t).snapshot().clusters["rogue-1"].total.issued, 4);
}
