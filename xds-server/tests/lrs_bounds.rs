//! Load reporting (LRS) bounded in total, not only per stream: the budget every stream's load
//! draws from, the refusal past it, the state given back when streams end, and the per-stream
//! rate limit.
#![allow(clippy::unwrap_used)]

mod util;

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};
use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::config::core::v3::Locality;
use xds_proto::pb::envoy::config::endpoint::v3::{ClusterStats, UpstreamLocalityStats};
use xds_proto::pb::envoy::service::load_stats::v3::load_reporting_service_client::LoadReportingServiceClient;
use xds_proto::pb::envoy::service::load_stats::v3::{LoadStatsRequest, LoadStatsResponse};
use xds_server::XdsServer;
use xds_server::lrs::{LoadReportingServer, LrsConfig};

use util::*;

/// One LRS stream driven through a channel, past its first response.
struct Lrs {
    tx: mpsc::Sender<LoadStatsRequest>,
    rx: Streaming<LoadStatsResponse>,
}

impl Lrs {
    async fn start(t: &TestServer, node_id: &str) -> Lrs {
        let (tx, rx) = mpsc::channel(16);
        let mut client =
            LoadReportingServiceClient::new(t.channel().await).max_encoding_message_size(64 << 20);
        let response =
            tokio::time::timeout(WAIT, client.stream_load_stats(ReceiverStream::new(rx)))
                .await
                .expect("the stream did not open in time")
                .expect("open LRS");
        let mut lrs = Lrs { tx, rx: response.into_inner() };
        lrs.send(LoadStatsRequest { node: Some(node(node_id)), cluster_stats: vec![] }).await;
        tokio::time::timeout(WAIT, lrs.rx.message())
            .await
            .expect("no first response in time")
            .expect("the first response")
            .expect("the stream ended");
        lrs
    }

    async fn send(&self, request: LoadStatsRequest) {
        self.tx.send(request).await.expect("the request stream is closed");
    }

    /// How the stream ended, waiting up to `within`: `None` if it is still open then.
    async fn ended(&mut self, within: Duration) -> Option<Status> {
        match tokio::time::timeout(within, self.rx.message()).await {
            Err(_) => None,
            Ok(Err(status)) => Some(status),
            Ok(Ok(m)) => panic!("an answer instead of the end: {m:?}"),
        }
    }
}

/// A report of `clusters` clusters with `localities` localities each, names of about 20 bytes:
/// 1,024 x 64 is what one stream may hold at most, about 3.5 MiB on the wire.
fn big_report(clusters: usize, localities: usize) -> LoadStatsRequest {
    let cluster_stats = (0..clusters)
        .map(|c| ClusterStats {
            cluster_name: format!("cluster-{c:05}-of-the-mesh"),
            upstream_locality_stats: (0..localities)
                .map(|z| UpstreamLocalityStats {
                    locality: Some(Locality {
                        region: "region-1".into(),
                        zone: format!("zone-{z:03}"),
                        sub_zone: String::new(),
                    }),
                    total_issued_requests: 10,
                    total_successful_requests: 9,
                    total_error_requests: 1,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    LoadStatsRequest { node: None, cluster_stats }
}

fn lrs_config(change: impl FnOnce(&mut LrsConfig)) -> LoadReportingServer {
    let mut config = LrsConfig::default();
    change(&mut config);
    LoadReportingServer::new().config(config)
}

async fn server(lrs: LoadReportingServer) -> TestServer {
    start(XdsServer::builder(SnapshotCache::by_node_id()).load_reporting(lrs).build()).await
}

fn lrs_of(t: &TestServer) -> &LoadReportingServer {
    t.server.load_reporting()
}

/// Waits (up to a minute: the reports are large and tests may run unoptimised) until `cond`.
async fn within_a_minute(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The finding: 16 streams each sending the largest load a stream may hold took the server
/// from 88 to 739 MiB, with no total bound. With the default budget, what they hold together
/// stays within it, the streams past it are told so, and all of it comes back when they end.
#[tokio::test]
async fn sixteen_streams_of_the_largest_reports_stay_within_the_default_budget() {
    let t = server(LoadReportingServer::new()).await;
    let config = LrsConfig::default();
    let report = big_report(config.max_clusters_per_stream, config.max_localities_per_cluster);
    let mut streams = Vec::new();
    for i in 0..16 {
        streams.push(Lrs::start(&t, &format!("node-{i}")).await);
    }
    for lrs in &streams {
        lrs.send(report.clone()).await;
    }
    // Each stream's first request counts as a report too.
    within_a_minute("16 reports taken or refused", || lrs_of(&t).snapshot().reports == 32).await;

    let (bytes, entries) = lrs_of(&t).held();
    assert!(bytes <= config.max_total_bytes, "{bytes} bytes held");
    assert!(entries <= config.max_total_entries, "{entries} entries held");
    assert!(bytes > config.max_total_bytes / 2, "the budget is used, not wasted: {bytes}");

    let mut refused = 0;
    for lrs in &mut streams {
        if let Some(status) = lrs.ended(Duration::from_millis(50)).await {
            assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
            assert!(status.message().contains("budget"), "{}", status.message());
            refused += 1;
        }
    }
    assert!(refused >= 1, "some stream must be past the budget");
    assert_eq!(lrs_of(&t).rejected("over_budget"), refused);
    let metrics = lrs_of(&t).render_metrics();
    assert!(
        metrics.contains(&format!("xds_lrs_rejected_total{{reason=\"over_budget\"}} {refused}")),
        "{metrics}"
    );
    assert!(metrics.contains(&format!("xds_lrs_held_bytes {bytes}")), "{metrics}");

    drop(streams);
    within_a_minute("every stream gone", || lrs_of(&t).snapshot().streams == 0).await;
    assert_eq!(lrs_of(&t).held(), (0, 0), "what the streams held is given back");
}

/// A stream whose report would pass the total is ended with `RESOURCE_EXHAUSTED` and the
/// reason; the streams within it go on, and their load stays in the view.
#[tokio::test]
async fn a_stream_past_the_budget_is_refused_and_the_others_go_on() {
    let t = server(lrs_config(|c| c.max_total_entries = 10)).await;
    let a = Lrs::start(&t, "a").await;
    let mut b = Lrs::start(&t, "b").await;
    // 1 cluster and 5 localities: 6 entries each; two do not fit in 10.
    a.send(big_report(1, 5)).await;
    within_a_minute("a's report", || lrs_of(&t).held().1 == 6).await;
    b.send(big_report(1, 5)).await;
    let status = b.ended(WAIT).await.expect("b is ended");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("budget of"), "{}", status.message());
    assert_eq!(lrs_of(&t).rejected("over_budget"), 1);
    within_a_minute("b gone", || lrs_of(&t).snapshot().streams == 1).await;
    assert_eq!(lrs_of(&t).held().1, 6, "b's partial report is given back");

    // a's same clusters again need nothing more from the budget.
    a.send(big_report(1, 5)).await;
    // Two first requests, three reports.
    within_a_minute("a's second report", || lrs_of(&t).snapshot().reports == 5).await;
    let view = lrs_of(&t).snapshot();
    assert_eq!(view.clusters["cluster-00000-of-the-mesh"].total.issued, 100);
    assert_eq!(view.streams, 1);
    drop(a);
    within_a_minute("a gone", || lrs_of(&t).snapshot().streams == 0).await;
    assert_eq!(lrs_of(&t).held(), (0, 0));
}

/// A stream that reports faster than its rate (a client spinning reports to burn the server's
/// CPU) is ended with `RESOURCE_EXHAUSTED`; one within it is not.
#[tokio::test]
async fn a_stream_reporting_faster_than_its_rate_is_ended() {
    let t = server(lrs_config(|c| {
        c.max_reports_per_second = 2;
        c.report_burst = 4;
    }))
    .await;
    let mut calm = Lrs::start(&t, "calm").await;
    calm.send(big_report(1, 1)).await;
    let mut spinning = Lrs::start(&t, "spinning").await;
    for _ in 0..10 {
        spinning.send(big_report(1, 1)).await;
    }
    let status = spinning.ended(WAIT).await.expect("the spinning stream is ended");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("2 per second (burst 4)"), "{}", status.message());
    assert_eq!(lrs_of(&t).rejected("rate_limited"), 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    calm.send(big_report(1, 1)).await;
    assert!(calm.ended(QUIET).await.is_none(), "a stream within its rate goes on");
    assert!(
        lrs_of(&t).render_metrics().contains("xds_lrs_rejected_total{reason=\"rate_limited\"} 1")
    );
}
