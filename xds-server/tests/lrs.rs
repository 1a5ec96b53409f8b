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
            ReportRequest {
                clusters: ReportClusters::Only(vec!["b".into(), "a".into(), "a".into()]),
                interval: Duration::from_millis(2500),
                endpoint_granularity: false,
            }
        } else {
            ReportRequest { interval: Duration::ZERO, ..Default::default() }
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
