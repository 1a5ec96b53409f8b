//! A client that stops reading slows nobody else, and nothing piles up for it on the server.

mod util;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use xds_cache::LinearCache;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::service::discovery::v3::DiscoveryRequest;

use util::*;

const CLIENTS: usize = 20;
const UPDATES: usize = 20;
const RESOURCES: usize = 20;
/// How long every reading client may take to get an update.
const PROMPTLY: Duration = Duration::from_secs(2);

/// A cluster with about 1 KiB of content; `tag` changes it.
fn big_cluster(name: &str, tag: usize) -> Cluster {
    cluster(name, &format!("{tag}-{}", "x".repeat(1024)))
}

/// Waits until every reading client reported `version`, at most [`PROMPTLY`].
async fn wait_for(
    reports: &mut mpsc::Receiver<(usize, String)>,
    latest: &mut HashMap<usize, String>,
    version: String,
) {
    let deadline = tokio::time::Instant::now() + PROMPTLY;
    while latest.len() < CLIENTS - 1 || latest.values().any(|v| *v != version) {
        let (i, v) = tokio::time::timeout_at(deadline, reports.recv())
            .await
            .expect("every reading client gets the update promptly")
            .expect("a reader failed");
        latest.insert(i, v);
    }
}

/// How the stuck client behaves.
#[derive(Clone, Copy, PartialEq)]
enum Stuck {
    /// Never reads, never ACKs.
    Silent,
    /// Never reads, but ACKs blindly (nonces are easy to guess), with a small HTTP/2 window: only
    /// flow control can stop the server from computing responses for it.
    BlindAcks,
}

struct Outcome {
    t: TestServer,
    clusters: LinearCache,
    stuck: Sotw,
}

/// 20 clients on one LinearCache, one of them stuck; 20 updates, each of which every other client
/// must get within [`PROMPTLY`].
async fn scenario(how: Stuck) -> Outcome {
    let clusters = LinearCache::of::<Cluster>();
    for i in 0..RESOURCES {
        clusters.upsert(&big_cluster(&format!("c{i:02}"), 0)).expect("upsert");
    }
    let t = serve(clusters.clone()).await;

    let mut stuck = Sotw::ads_small_windows(&t, "stuck").await;
    stuck.subscribe(CDS, &[], None).await;
    eventually("the stuck client's first response", || {
        type_status(&t.server, "stuck", CDS).is_some_and(|s| s.sent_nonce.is_some())
    })
    .await;

    // The others read and ACK everything, reporting each version they get.
    let (report, mut reports) = mpsc::channel::<(usize, String)>(CLIENTS * 4);
    let mut readers = Vec::new();
    for i in 1..CLIENTS {
        let mut s = Sotw::ads(&t, &format!("client-{i}")).await;
        let report = report.clone();
        readers.push(tokio::spawn(async move {
            s.subscribe(CDS, &[], None).await;
            loop {
                let r = s.recv().await;
                assert_eq!(r.resources.len(), RESOURCES, "full state");
                s.ack(&r).await;
                if report.send((i, r.version_info.clone())).await.is_err() {
                    return;
                }
            }
        }));
    }
    let mut latest: HashMap<usize, String> = HashMap::new();
    wait_for(&mut reports, &mut latest, clusters.version().into()).await;

    let started = Instant::now();
    for k in 1..=UPDATES {
        clusters.upsert(&big_cluster(&format!("c{:02}", k % RESOURCES), k)).expect("upsert");
        wait_for(&mut reports, &mut latest, clusters.version().into()).await;
        if how == Stuck::BlindAcks {
            // The stuck stream's k-th response, had the server computed it, has nonce k.
            stuck
                .send(DiscoveryRequest {
                    type_url: url(CDS),
                    response_nonce: k.to_string(),
                    ..Default::default()
                })
                .await;
        }
    }
    let elapsed = started.elapsed();
    assert!(elapsed < PROMPTLY * 5, "{UPDATES} updates took {elapsed:?}");
    for r in readers {
        r.abort();
    }
    Outcome { t, clusters, stuck }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_silent_stuck_client_does_not_hold_back_the_others() {
    let Outcome { t, clusters, mut stuck } = scenario(Stuck::Silent).await;
    // The stuck stream was sent one response and waits for its ACK: nothing more was computed
    // or queued for it.
    let s = type_status(&t.server, "stuck", CDS).expect("the stuck stream is still open");
    assert_eq!(s.sent_nonce.as_deref(), Some("1"), "one response on that stream");
    assert_eq!(s.acked_version, None);
    assert_eq!(s.resources.len(), RESOURCES);
    // Every response sent: the first of each client, then one per update per reading client.
    let expected = CLIENTS + (CLIENTS - 1) * UPDATES;
    assert_eq!(t.metric("xds_responses_total", "sotw", "cluster"), expected as f64);

    // Once it reads again, it gets the newest state, not the history ("latest wins").
    let r = stuck.recv_type(CDS).await;
    stuck.ack(&r).await;
    let newest = stuck.recv_type(CDS).await;
    assert_eq!(newest.version_info, clusters.version());
    stuck.ack(&newest).await;
    stuck.expect_quiet().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_client_acking_blindly_is_held_by_flow_control() {
    let Outcome { t, .. } = scenario(Stuck::BlindAcks).await;
    // Each response is about 21 KiB and the client's window 64 KiB: once it is full the server
    // stops polling that stream, and so stops reading its ACKs and computing responses for it.
    let s = type_status(&t.server, "stuck", CDS).expect("the stuck stream is still open");
    let sent: usize = s.sent_nonce.as_deref().expect("a response").parse().expect("a number");
    assert!(sent > 1, "the blind ACKs were taken while the window had room");
    assert!(sent <= 8, "{sent} responses computed for a client that reads nothing");
    let total = t.metric("xds_responses_total", "sotw", "cluster") as usize;
    assert_eq!(total, CLIENTS + (CLIENTS - 1) * UPDATES + (sent - 1));
}
