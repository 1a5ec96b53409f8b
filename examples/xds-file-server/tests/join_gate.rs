//! The binary's join gate end to end: 200 clients that take their clusters and never acknowledge
//! them hold up no new proxy (the gate's permits cover the server's writes, not the ACKs).
#![allow(clippy::unwrap_used)] // helpers outside #[test] fail loudly by design

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use xds_proto::pb::envoy::service::discovery::v3::DiscoveryRequest;

mod common;
use common::*;

const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";

fn write_config(dir: &Path) {
    let mut text = String::from("resources:\n");
    for i in 0..50 {
        text.push_str(&format!(
            "  - \"@type\": {CDS}\n    name: c{i}\n    type: STATIC\n    connect_timeout: 1s\n"
        ));
    }
    std::fs::write(dir.join("clusters.yaml"), text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_proxy_is_served_within_a_second_next_to_200_streams_that_never_ack() {
    let dir = temp_dir("join-gate");
    write_config(&dir);
    // The default gate: twice the cores, permits held at most 5 s. Every client comes from one
    // address: its per-peer connection cap (a quarter of the port's by default) is lifted.
    let running = Running::start(&dir, &["--max-connections-per-peer", "100000"]).await;

    // 200 SotW clients ask for every cluster and never acknowledge anything.
    let mut silent = Vec::new();
    for i in 0..200 {
        let (tx, rx) = mpsc::channel(4);
        tx.send(DiscoveryRequest {
            node: node(&format!("silent-{i}")),
            type_url: CDS.into(),
            ..Default::default()
        })
        .await
        .unwrap();
        let responses = ads(running.grpc)
            .await
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        silent.push((tx, responses));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let (_tx, mut proxy) = delta_clusters(running.grpc, "proxy", &Default::default()).await;
    let first = tokio::time::timeout(Duration::from_secs(1), proxy.message())
        .await
        .expect("the proxy's clusters within 1 s")
        .unwrap()
        .unwrap();
    assert_eq!(first.resources.len(), 50);
    let waited = started.elapsed();
    assert!(waited <= Duration::from_secs(1), "the proxy waited {waited:?}");
}
