//! The join gate (`ServerConfig::join_permits`): joining streams are computed and written a few
//! at a time, started joins before new ones, new ones in arrival order; a permit is given back
//! once the stream's responses were written, not when they are acknowledged, so clients that
//! never ACK hold nobody up; a client that stops reading holds its permit only until
//! `join_timeout`, and nobody waits for one longer than `join_max_wait`; synced streams never
//! wait on the gate.

mod util;

use std::time::{Duration, Instant};

use xds_cache::{LinearCache, MuxCache};
use xds_proto::EncodedResource;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_proto::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use xds_server::{ServerConfig, XdsServer};

use util::*;

/// A server whose gate admits one joining stream at a time.
async fn gated(cache: MuxCache, join_timeout: Duration) -> TestServer {
    let config = ServerConfig::default().join_permits(1).join_timeout(join_timeout);
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

/// A client on a connection with 64 KiB windows that subscribes to every cluster and never
/// reads: with clusters much larger than its windows, its stream blocks mid-write, holding its
/// permit until `join_timeout`. Returns once its response is being written.
async fn stuck(t: &TestServer, node_id: &str) -> Sotw {
    let mut stuck = Sotw::ads_small_windows(t, node_id).await;
    stuck.subscribe(CDS, &[], None).await;
    eventually("the stuck client's first response", || was_sent(t, node_id, CDS)).await;
    stuck
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_proxy_is_served_within_a_second_next_to_200_streams_that_never_ack() {
    let (cache, _, _) = caches(50, 100);
    // The default timings (a permit held at most 5 s), four permits as on two cores.
    let config = ServerConfig::default().join_permits(4);
    let t = start(XdsServer::builder(cache).config(config).build()).await;

    // 200 clients ask for every cluster and never acknowledge anything.
    let mut silent = Vec::new();
    for i in 0..200 {
        let mut s = Sotw::ads(&t, &format!("silent-{i}")).await;
        s.subscribe(CDS, &[], None).await;
        silent.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    // A proxy arriving after them gets its clusters, then (its join going on) their endpoints.
    let started = Instant::now();
    let mut proxy = Delta::ads(&t, "proxy").await;
    proxy.subscribe(CDS, &["*"], &[]).await;
    let clusters = tokio::time::timeout(Duration::from_secs(1), proxy.recv_type(CDS))
        .await
        .expect("the proxy's clusters within 1 s");
    assert_eq!(clusters.resources.len(), 50);
    let names: Vec<String> = (0..50).map(|i| format!("c{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    proxy.subscribe(EDS, &names, &[]).await;
    proxy.ack(&clusters).await;
    let endpoints = tokio::time::timeout(Duration::from_secs(1), proxy.recv_type(EDS))
        .await
        .expect("the proxy's endpoints within 1 s");
    assert_eq!(endpoints.resources.len(), 50);
    let waited = started.elapsed();
    assert!(waited <= Duration::from_secs(1), "the proxy waited {waited:?}");
    // The silent ones were served too (each had its turn), though none acknowledged.
    eventually("every silent client served", || {
        (0..200).all(|i| was_sent(&t, &format!("silent-{i}"), CDS))
    })
    .await;
    assert!(t.metrics().contains("xds_join_gate_passed_total 0"), "nobody waited too long");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_join_goes_on_before_new_joiners_behind_a_client_that_stops_reading() {
    // About 2 MB of clusters, far more than a stuck client's 64 KiB windows.
    let (cache, _, _) = caches(200, 10_000);
    let t = gated(cache, Duration::from_secs(1)).await;

    // The first client's clusters were written: the permit is back before it acknowledges
    // them, and a second client is served meanwhile.
    let mut first = Sotw::ads(&t, "first").await;
    first.subscribe(CDS, &[], None).await;
    let clusters = first.recv_type(CDS).await;
    let mut second = Sotw::ads(&t, "second").await;
    second.subscribe(CDS, &[], None).await;
    assert_eq!(second.recv_type(CDS).await.resources.len(), 200);

    // A client that stops reading holds the only permit; a new client waits, and so does the
    // first one's next step (the endpoints of its clusters, asked before its ACK as Envoy does).
    let _stuck = stuck(&t, "stuck").await;
    let mut third = Sotw::ads(&t, "third").await;
    third.subscribe(CDS, &[], None).await;
    first.subscribe(EDS, &["c0", "c1", "c2"], None).await;
    first.ack(&clusters).await;
    third.expect_quiet().await;
    first.expect_quiet().await;
    assert!(!was_sent(&t, "third", CDS));

    // The stuck client's permit times out (1 s): both are served.
    let endpoints = first.recv_type(EDS).await;
    assert_eq!(endpoints.resources.len(), 3);
    first.ack(&endpoints).await;
    assert_eq!(third.recv_type(CDS).await.resources.len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_waits_for_a_permit_longer_than_the_longest_wait() {
    let (cache, _, _) = caches(200, 10_000);
    // Permits held up to a minute by clients that stop reading, waits of at most 1 s.
    let config = ServerConfig::default()
        .join_permits(1)
        .join_timeout(Duration::from_secs(60))
        .join_max_wait(Duration::from_secs(1));
    let t = start(XdsServer::builder(cache).config(config).build()).await;
    let _stuck = stuck(&t, "stuck").await;
    let mut next = Sotw::ads(&t, "next").await;
    next.subscribe(CDS, &[], None).await;
    next.expect_quiet().await;
    let r = next.recv_type(CDS).await;
    assert_eq!(r.resources.len(), 200);
    assert!(t.metrics().contains("xds_join_gate_passed_total 1"), "{}", t.metrics());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synced_streams_get_updates_while_a_joiner_holds_the_gate() {
    let (cache, clusters, _) = caches(200, 10_000);
    let t = gated(cache, Duration::from_secs(60)).await;

    let mut synced = Sotw::ads(&t, "synced").await;
    synced.subscribe(CDS, &[], None).await;
    let r = synced.recv_type(CDS).await;
    synced.ack(&r).await;

    // A joiner that stops reading holds the only permit; a third client waits behind it.
    let _holder = stuck(&t, "holder").await;
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
    let config = ServerConfig::default().join_permits(0);
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
    let (cache, clusters, _) = caches(200, 10_000);
    let t = gated(cache, Duration::from_secs(60)).await;
    let held = held_clusters(&t).await;

    // A joiner holds the gate (it stopped reading); a fresh client queues behind it.
    let holder = stuck(&t, "holder").await;
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
    drop(holder);
    // The gate moves on (FIFO): the fresh client first, then the stale one.
    let r = fresh.recv_type(CDS).await;
    assert_eq!(r.resources.len(), 200);
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
    let (cache, clusters, endpoints) = caches(0, 0);
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

    // A third client asks for endpoints far larger than its windows and stops reading: it
    // holds the only permit.
    let mut big = cla("big", 1);
    let endpoint = big.endpoints[0].lb_endpoints[0].clone();
    big.endpoints[0].lb_endpoints = vec![endpoint; 80_000];
    endpoints.upsert(&big).expect("upsert");
    let mut holder = Sotw::ads_small_windows(&t, "holder").await;
    holder.subscribe(EDS, &["big"], None).await;
    eventually("the holder's endpoints", || was_sent(&t, "holder", EDS)).await;

    // The configuration arrives: a and b, owed it now, wait for the gate.
    let all = (0..3).map(|i| EncodedResource::new(&cluster(&format!("c{i}"), "")));
    clusters.set_all(all.collect::<Result<Vec<_>, _>>().expect("encode")).expect("set");
    a.expect_quiet().await;
    b.expect_quiet().await;
    drop(holder);
    assert_eq!(a.recv_type(CDS).await.resources.len(), 3);
    assert_eq!(b.recv_type(CDS).await.resources.len(), 3);
}
