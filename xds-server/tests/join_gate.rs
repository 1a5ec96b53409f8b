//! The join gate (`ServerConfig::join_permits`): joining streams are served a few at a time in
//! arrival order, each until its first responses are acknowledged; a client that stops reading
//! holds its place only until `join_timeout`; synced streams never wait on the gate.

mod util;

use std::time::Duration;

use xds_cache::{LinearCache, MuxCache};
use xds_proto::EncodedResource;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_proto::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use xds_server::{ServerConfig, XdsServer};

use util::*;

/// A server whose gate admits one joining stream at a time.
async fn gated(cache: MuxCache, join_timeout: Duration) -> TestServer {
    let config = ServerConfig { join_permits: 1, join_timeout, ..Default::default() };
    start(XdsServer::builder(cache).config(config).build()).await
}

/// Clusters `c0`..`c{n}` and their endpoints, each cluster carrying `pad` bytes.
fn caches(n: usize, pad: usize) -> (MuxCache, LinearCache, LinearCache) {
    let clusters = LinearCache::of::<Cluster>();
    let endpoints = LinearCache::of::<ClusterLoadAssignment>();
    for i in 0..n {
        clusters.upsert(&cluster(&format!("c{i}"), &"x".repeat(pad))).expect("upsert");
        endpoints.upsert(&cla(&format!("c{i}"), 8080)).expect("upsert");
    }
    let mux = MuxCache::new().route(CDS, clusters.clone()).route(EDS, endpoints.clone());
    (mux, clusters, endpoints)
}

/// Whether `node_id`'s stream was sent a response of type `t`.
fn was_sent(t: &TestServer, node_id: &str, ty: xds_proto::ResourceType) -> bool {
    type_status(&t.server, node_id, ty).is_some_and(|s| s.sent_nonce.is_some())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_waits_until_the_one_before_it_acknowledged_its_whole_join() {
    let (cache, _, _) = caches(3, 0);
    let t = gated(cache, Duration::from_secs(60)).await;

    let mut first = Sotw::ads(&t, "first").await;
    first.subscribe(CDS, &[], None).await;
    let clusters = first.recv_type(CDS).await;

    // The second client arrives while the first holds the gate: it is taken in but not served.
    let mut second = Sotw::ads(&t, "second").await;
    second.subscribe(CDS, &[], None).await;
    second.expect_quiet().await;
    assert!(!was_sent(&t, "second", CDS));

    // As Envoy does, the first client asks for the endpoints of its clusters before it ACKs them:
    // its join goes on, with the gate still held.
    first.subscribe(EDS, &["c0", "c1", "c2"], None).await;
    first.ack(&clusters).await;
    let endpoints = first.recv_type(EDS).await;
    assert_eq!(endpoints.resources.len(), 3);
    second.expect_quiet().await;
    assert!(!was_sent(&t, "second", CDS));

    // The first client's last ACK ends its join: the second is served.
    first.ack(&endpoints).await;
    let r = second.recv_type(CDS).await;
    assert_eq!(r.resources.len(), 3);
    second.ack(&r).await;
    first.expect_quiet().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_streams_get_updates_while_a_joiner_holds_the_gate() {
    let (cache, clusters, _) = caches(2, 0);
    let t = gated(cache, Duration::from_secs(60)).await;

    let mut synced = Sotw::ads(&t, "synced").await;
    synced.subscribe(CDS, &[], None).await;
    let r = synced.recv_type(CDS).await;
    synced.ack(&r).await;

    // A joiner that never ACKs holds the only permit; a third client waits behind it.
    let mut holder = Sotw::ads(&t, "holder").await;
    holder.subscribe(CDS, &[], None).await;
    holder.recv_type(CDS).await;
    let mut waiting = Sotw::ads(&t, "waiting").await;
    waiting.subscribe(CDS, &[], None).await;
    waiting.expect_quiet().await;

    // An update reaches the synced stream all the same.
    clusters.upsert(&cluster("c9", "new")).expect("upsert");
    let update = synced.recv_type(CDS).await;
    assert_eq!(update.version_info, clusters.version());
    assert!(sotw_names(&update).contains(&"c9".to_owned()));
    assert!(!was_sent(&t, "waiting", CDS), "the gate is still held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_holds_the_gate_only_until_the_timeout() {
    // About 2 MB of clusters, far more than the stuck client's 64 KiB windows and the server's
    // send buffer: its stream blocks in flow control, mid-response, and is no longer polled.
    let (cache, _, _) = caches(200, 10_000);
    let t = gated(cache, Duration::from_secs(1)).await;

    let mut stuck = Sotw::ads_small_windows(&t, "stuck").await;
    stuck.subscribe(CDS, &[], None).await;
    eventually("the stuck client's first response", || was_sent(&t, "stuck", CDS)).await;

    // The next client gets its configuration once the stuck one's permit timed out (1 s, well
    // inside the 5 s `recv` allows).
    let mut next = Sotw::ads(&t, "next").await;
    next.subscribe(CDS, &[], None).await;
    let r = next.recv_type(CDS).await;
    assert_eq!(r.resources.len(), 200);
    next.ack(&r).await;
    drop(stuck);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_gate_joiners_do_not_wait_for_each_other() {
    let (cache, _, _) = caches(2, 0);
    let config = ServerConfig { join_permits: 0, ..Default::default() };
    let t = start(XdsServer::builder(cache).config(config).build()).await;

    let mut first = Sotw::ads(&t, "first").await;
    first.subscribe(CDS, &[], None).await;
    first.recv_type(CDS).await;
    // The first never ACKs; the second is served all the same.
    let mut second = Sotw::ads(&t, "second").await;
    second.subscribe(CDS, &[], None).await;
    assert_eq!(second.recv_type(CDS).await.resources.len(), 2);
}

/// What a delta client holds after its first wildcard CDS response: name -> version.
async fn held_clusters(t: &TestServer) -> std::collections::HashMap<String, String> {
    let mut probe = Delta::ads(t, "probe").await;
    probe.subscribe(CDS, &["*"], &[]).await;
    let r = probe.recv_type(CDS).await;
    probe.ack(&r).await;
    r.resources.iter().map(|x| (x.name.clone(), x.version.clone())).collect()
}

/// A delta ADS stream for `node_id` whose first request subscribes to every cluster and declares
/// `held` (rule D7).
async fn resume(
    t: &TestServer,
    node_id: &str,
    held: std::collections::HashMap<String, String>,
) -> Delta {
    let mut d = Delta::ads(t, node_id).await;
    d.send(DeltaDiscoveryRequest {
        type_url: url(CDS),
        resource_names_subscribe: names(&["*"]),
        initial_resource_versions: held,
        ..Default::default()
    })
    .await;
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resuming_client_that_holds_everything_does_not_queue_behind_joiners() {
    let (cache, clusters, _) = caches(3, 0);
    let t = gated(cache, Duration::from_secs(60)).await;
    let held = held_clusters(&t).await;

    // A joiner holds the gate (it never ACKs); a fresh client queues behind it.
    let mut first = Sotw::ads(&t, "first").await;
    first.subscribe(CDS, &[], None).await;
    first.recv_type(CDS).await;
    let mut fresh = Delta::ads(&t, "fresh").await;
    fresh.subscribe(CDS, &["*"], &[]).await;

    // A client moving here from another replica holds every cluster: it is owed nothing but
    // the wildcard's first (empty) answer, takes no permit, and is synced once it ACKs that, so
    // the next change reaches it while the gate is held.
    let mut moved = resume(&t, "moved", held.clone()).await;
    let r = moved.recv_type(CDS).await;
    assert!(r.resources.is_empty());
    moved.ack(&r).await;
    // One that holds a stale version is owed a resource: it queues like a joiner.
    let mut stale = held;
    stale.insert("c1".into(), "stale".into());
    let mut behind = resume(&t, "behind", stale).await;
    behind.expect_quiet().await;

    clusters.upsert(&cluster("c0", "changed")).expect("upsert");
    let r = moved.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["c0"]);
    moved.ack(&r).await;
    fresh.expect_quiet().await;
    behind.expect_quiet().await;
    // (The stale one's response is computed, and waits for its permit to be written.)
    assert!(!was_sent(&t, "fresh", CDS));
    drop(first);
    // The gate moves on (FIFO): the fresh client first, then the stale one.
    let r = fresh.recv_type(CDS).await;
    assert_eq!(r.resources.len(), 3);
    fresh.ack(&r).await;
    let r = behind.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["c1"], "computed before c0 changed");
    behind.ack(&r).await;
    assert_eq!(delta_names(&behind.recv_type(CDS).await), ["c0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joiners_owed_nothing_yet_join_through_the_gate_when_the_configuration_arrives() {
    // No clusters yet (a control plane still loading its configuration, every proxy already
    // reconnected): each joiner gets the wildcard's empty first answer and gives its permit back.
    let (cache, clusters, _) = caches(0, 0);
    let t = gated(cache, Duration::from_secs(60)).await;
    let mut a = Sotw::ads(&t, "a").await;
    a.subscribe(CDS, &[], None).await;
    let r = a.recv_type(CDS).await;
    assert!(r.resources.is_empty());
    a.ack(&r).await;
    let mut b = Sotw::ads(&t, "b").await;
    b.subscribe(CDS, &[], None).await;
    let r = b.recv_type(CDS).await;
    assert!(r.resources.is_empty());
    b.ack(&r).await;

    // The configuration arrives (at once): one of them is served, the other waits for its ACK.
    let all = (0..3).map(|i| EncodedResource::new(&cluster(&format!("c{i}"), "")));
    clusters.set_all(all.collect::<Result<Vec<_>, _>>().expect("encode")).expect("set");
    let quiet = Duration::from_millis(500);
    let (ra, rb) = tokio::join!(
        tokio::time::timeout(quiet, a.recv_type(CDS)),
        tokio::time::timeout(quiet, b.recv_type(CDS))
    );
    let (served, waiting, r) = match (ra, rb) {
        (Ok(r), Err(_)) => (&mut a, &mut b, r),
        (Err(_), Ok(r)) => (&mut b, &mut a, r),
        (ra, rb) => panic!("expected one served: a {:?}, b {:?}", ra.is_ok(), rb.is_ok()),
    };
    assert_eq!(r.resources.len(), 3);
    served.ack(&r).await;
    assert_eq!(waiting.recv_type(CDS).await.resources.len(), 3);
}
