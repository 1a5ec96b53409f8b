//! The cost of ingesting one load report of 10 clusters × 3 localities into the LRS view
//! (what the server does for every `LoadStatsRequest` a client sends), and of reading the view
//! back with 100 such clients.

use criterion::Criterion;
use xds_proto::pb::envoy::config::core::v3::{Locality, Node};
use xds_proto::pb::envoy::config::endpoint::v3::{ClusterStats, UpstreamLocalityStats};
use xds_proto::pb::google::protobuf::Duration;
use xds_server::lrs::LoadReportingServer;

fn report() -> Vec<ClusterStats> {
    (0..10)
        .map(|c| ClusterStats {
            cluster_name: format!("cluster-{c}"),
            upstream_locality_stats: (0..3)
                .map(|z| UpstreamLocalityStats {
                    locality: Some(Locality {
                        region: "us-east1".into(),
                        zone: format!("us-east1-{z}"),
                        sub_zone: String::new(),
                    }),
                    total_successful_requests: 950,
                    total_error_requests: 50,
                    total_issued_requests: 1000,
                    total_requests_in_progress: 12,
                    ..Default::default()
                })
                .collect(),
            total_dropped_requests: 3,
            load_report_interval: Some(Duration { seconds: 10, nanos: 0 }),
            ..Default::default()
        })
        .collect()
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let stats = report();
    let lrs = LoadReportingServer::new();
    let node = Node { id: "node-0".into(), ..Default::default() };
    let reporter = lrs.reporter(&node).expect("room for a reporter");
    reporter.report(&stats).expect("within the budget");
    c.bench_function("lrs_ingest_report_10_clusters_x_3_localities", |b| {
        b.iter(|| reporter.report(std::hint::black_box(&stats)))
    });

    let others: Vec<_> = (1..100)
        .map(|i| {
            let node = Node { id: format!("node-{i}"), ..Default::default() };
            let r = lrs.reporter(&node).expect("room for a reporter");
            r.report(&stats).expect("within the budget");
            r
        })
        .collect();
    c.bench_function("lrs_ingest_then_snapshot_100_clients", |b| {
        b.iter(|| {
            reporter.report(&stats).expect("within the budget");
            lrs.snapshot().clusters.len()
        })
    });
    drop(others);
    c.final_summary();
}
