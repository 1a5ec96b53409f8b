//! State of the world over the wire: ADS (`StreamAggregatedResources`) against a real server.

mod util;

use std::sync::{Arc, Mutex};

use tonic::{Code, Status};
use xds_cache::{LinearCache, MuxCache, SnapshotCache};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::route::v3::RouteConfiguration;
use xds_proto::pb::envoy::service::discovery::v3::DiscoveryRequest;
use xds_proto::{ResourceType, TypeUrl};
use xds_server::{Callbacks, ServerConfig, StreamInfo, XdsRequest, XdsServer};

use util::*;

// rule S2
#[tokio::test]
async fn s02_first_request_without_node_is_refused() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let t = serve(cache).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.send_raw(DiscoveryRequest { type_url: url(CDS), ..Default::default() }).await;
    let status = ads.recv_err().await;
    assert_status(&status, Code::InvalidArgument, &["node"]);
}

// rule S2
#[tokio::test]
async fn s02_anonymous_served_when_allowed_and_later_requests_need_no_node() {
    let cache = SnapshotCache::by_node_id();
    // An anonymous client has an empty node id: its group is "".
    cache.set_snapshot("", snapshot![cluster("a", "1"), cla("a", 1)]);
    let config = ServerConfig::default().allow_anonymous(true);
    let t = start(XdsServer::builder(cache).config(config).build()).await;
    let mut client = t.ads().await;
    let mut ads = Sotw::open(None, |r| async move { client.stream_aggregated_resources(r).await })
        .await
        .expect("open");
    ads.subscribe(CDS, &[], None).await;
    let cds = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&cds), ["a"]);
    ads.ack(&cds).await;
    ads.subscribe(EDS, &["a"], None).await;
    assert_eq!(sotw_names(&ads.recv_type(EDS).await), ["a"]);

    // On a stream with a node, later requests without one are fine too.
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cla("a", 1)]);
    let t = serve(cache).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await; // carries the node
    let cds = ads.recv_type(CDS).await;
    ads.ack(&cds).await; // no node
    ads.subscribe(EDS, &["a"], None).await; // no node
    assert_eq!(sotw_names(&ads.recv_type(EDS).await), ["a"]);
    assert_eq!(t.server.status().node("n1").len(), 1, "the stream is known by its first node");
}

// rule S3
#[tokio::test]
async fn s03_ads_request_without_type_url_is_refused() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.send(DiscoveryRequest { resource_names: names(&["a"]), ..Default::default() }).await;
    assert_status(&ads.recv_err().await, Code::InvalidArgument, &["type_url"]);
}

// rule S3
#[tokio::test]
async fn s03_unknown_type_on_ads_is_refused_naming_it() {
    let unknown = "type.googleapis.com/acme.example.v1.Widget";
    // A LinearCache serves its own type only.
    let t = serve(LinearCache::of::<Cluster>()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.send(DiscoveryRequest { type_url: unknown.into(), ..Default::default() }).await;
    assert_status(&ads.recv_err().await, Code::InvalidArgument, &[unknown]);

    // A MuxCache without a route or fallback for the type.
    let t = serve(MuxCache::new().route(CDS, LinearCache::of::<Cluster>())).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    let cds = ads.recv_type(CDS).await;
    ads.ack(&cds).await;
    ads.send(DiscoveryRequest { type_url: url(LDS), ..Default::default() }).await;
    assert_status(&ads.recv_err().await, Code::InvalidArgument, &[LDS.type_url()]);
}

// rule S3
#[tokio::test]
async fn s03_vhds_over_sotw_ads_is_unimplemented() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![virtual_host("rc/vh", &["foo.com"])]);
    let t = serve(cache).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(VHDS, &["rc/foo.com"], None).await;
    assert_status(&ads.recv_err().await, Code::Unimplemented, &[VHDS.type_url()]);
}

// rule S4
#[tokio::test]
async fn s04_ack_records_the_acked_version() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1")]);
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    let r1 = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&r1), ["a", "b"]);
    assert!(!r1.nonce.is_empty() && !r1.version_info.is_empty());
    // The ACK comes a while after the response: the status's last request is the ACK's (an
    // ACK that changes no name is reported without a request event of its own). Long enough
    // for the status's coarse clock (a kernel tick, up to 10 ms) to tell the two apart.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    ads.ack(&r1).await;
    eventually("the ACK in the status", || {
        type_status(&t.server, "n1", CDS).and_then(|s| s.acked_version)
            == Some(r1.version_info.clone().into())
    })
    .await;
    let s = type_status(&t.server, "n1", CDS).expect("status");
    assert!(s.wildcard);
    assert_eq!(s.sent_nonce.as_deref(), Some(r1.nonce.as_str()));
    assert_eq!(s.nack, None);
    assert!(s.last_request_ms >= s.sent_ms + 25, "{} {}", s.last_request_ms, s.sent_ms);
    assert_eq!(t.metric("xds_acks_total", "sotw", "cluster"), 1.0);

    // The next change is sent after the ACK, full state (rule S11).
    cache.set_snapshot("n1", snapshot![cluster("a", "2"), cluster("b", "1")]);
    let r2 = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&r2), ["a", "b"]);
    assert_ne!(r2.version_info, r1.version_info);
    assert_ne!(r2.nonce, r1.nonce);
}

// rules S5, S1
#[tokio::test]
async fn s05_nack_is_recorded_and_not_resent_until_a_change() {
    let cache = SnapshotCache::by_node_id();
    let v1 = snapshot![cluster("a", "1"), rds_listener("l", "r")];
    cache.set_snapshot("n1", v1.clone());
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    ads.subscribe(LDS, &[], None).await;
    let cds = ads.recv_type(CDS).await;
    let lds = ads.recv_type(LDS).await;
    ads.ack(&lds).await;
    ads.nack(&cds, "", "cluster a: bad config").await;
    // No resend of the rejected version.
    ads.expect_quiet().await;
    let s = type_status(&t.server, "n1", CDS).expect("status");
    let nack = s.nack.expect("the NACK is in the status");
    assert_eq!(nack.error, "cluster a: bad config");
    assert_eq!(nack.nonce, cds.nonce);
    assert_eq!(nack.version, "");
    assert_eq!(t.metric("xds_nacks_total", "sotw", "cluster"), 1.0);
    assert_eq!(type_status(&t.server, "n1", LDS).expect("lds").nack, None);

    // Rule S1: the NACK of clusters says nothing about listeners.
    let mut v2 = v1.to_builder();
    v2.add(&rds_listener("l2", "r")).expect("encode");
    cache.set_snapshot("n1", v2.build_unchecked());
    let lds2 = ads.recv_type(LDS).await;
    assert_eq!(sotw_names(&lds2), ["l", "l2"]);
    ads.ack(&lds2).await;
    ads.expect_quiet().await;

    // A change of clusters is sent.
    let mut v3 = v2.clone();
    v3.add(&cluster("a", "2")).expect("encode");
    cache.set_snapshot("n1", v3.build_unchecked());
    let cds2 = ads.recv_type(CDS).await;
    assert_ne!(cds2.version_info, cds.version_info);
    assert_eq!(decode_all::<Cluster>(&cds2)[0].alt_stat_name, "2");
    ads.ack(&cds2).await;
    eventually("the NACK cleared by the ACK", || {
        type_status(&t.server, "n1", CDS).is_some_and(|s| s.nack.is_none())
    })
    .await;
}

// rule S6
#[tokio::test]
async fn s06_no_response_when_nothing_changed() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cla("a", 1)]);
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    let cds = ads.recv_type(CDS).await;
    ads.ack(&cds).await;
    ads.subscribe(EDS, &["a"], None).await;
    let eds = ads.recv_type(EDS).await;
    ads.ack(&eds).await;
    ads.expect_quiet().await;
    // The same request again, at the current version.
    ads.ack(&cds).await;
    ads.ack(&eds).await;
    ads.expect_quiet().await;
    // The same content set again.
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cla("a", 1)]);
    ads.expect_quiet().await;
    // A change of something not subscribed.
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cla("a", 1), cla("zzz", 2)]);
    ads.expect_quiet().await;
    let responses = t.metric("xds_responses_total", "sotw", "cluster")
        + t.metric("xds_responses_total", "sotw", "endpoint");
    assert_eq!(responses, 2.0);
}

// rule S7
#[tokio::test]
async fn s07_stale_nonce_is_ignored() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cla("a", 1), cla("b", 1)]);
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(EDS, &["a"], None).await;
    let r1 = ads.recv_type(EDS).await;
    assert_eq!(sotw_names(&r1), ["a"]);
    ads.ack(&r1).await;
    cache.set_snapshot("n1", snapshot![cla("a", 2), cla("b", 1)]);
    let r2 = ads.recv_type(EDS).await;
    assert_eq!(sotw_names(&r2), ["a"]);
    // A request answering r1 (no longer the latest) asks for b: ignored entirely.
    ads.subscribe(EDS, &["a", "b"], Some(&r1)).await;
    ads.expect_quiet().await;
    eventually("the stale request counted", || {
        t.metric("xds_stale_requests_total", "sotw", "endpoint") == 1.0
    })
    .await;
    let s = type_status(&t.server, "n1", EDS).expect("status");
    assert_eq!(s.names, ["a"], "a stale request changes no state");
    assert_eq!(s.sent_nonce.as_deref(), Some(r2.nonce.as_str()));
    // The same with the latest nonce is taken: b is newly requested (rule S12).
    ads.subscribe(EDS, &["a", "b"], Some(&r2)).await;
    let r3 = ads.recv_type(EDS).await;
    assert_eq!(sotw_names(&r3), ["b"]);

    // The first request of a sub-stream is never stale, whatever nonce it carries.
    let mut other = Sotw::ads(&t, "n1").await;
    other.subscribe(EDS, &["a"], Some(&r3)).await;
    assert_eq!(sotw_names(&other.recv_type(EDS).await), ["a"]);
}

fn o1_v1() -> xds_cache::Snapshot {
    snapshot![cluster("A", "1"), cla("A", 1), rds_listener("L", "R"), route_to("R", "A")]
}

fn o1_v2() -> xds_cache::Snapshot {
    snapshot![cluster("B", "1"), cla("B", 1), rds_listener("L", "R"), route_to("R", "B")]
}

// rules O1, S11, S13
#[tokio::test]
async fn o1_make_before_break_on_sotw_ads() {
    let cache = SnapshotCache::by_node_id();
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    // Subscribe before the configuration exists, in the reverse order: the order of the answers
    // is the server's. EDS asks for B too, which does not exist yet (rule S13).
    ads.subscribe(RDS, &["R"], None).await;
    ads.subscribe(LDS, &[], None).await;
    ads.subscribe(EDS, &["A", "B"], None).await;
    ads.subscribe(CDS, &[], None).await;
    eventually("four sub-streams", || {
        t.server.status().node("n1").first().is_some_and(|s| s.types.len() == 4)
    })
    .await;
    ads.expect_quiet().await;
    cache.set_snapshot("n1", o1_v1());
    let mut order = Vec::new();
    for _ in 0..4 {
        let r = ads.recv().await;
        ads.ack(&r).await;
        order.push((r.type_url.clone(), sotw_names(&r)));
    }
    let expected =
        [(CDS, "A"), (EDS, "A"), (LDS, "L"), (RDS, "R")].map(|(t, n)| (url(t), vec![n.to_owned()]));
    assert_eq!(order, expected);
    ads.expect_quiet().await;

    // B replaces A; the route moves to B.
    cache.set_snapshot("n1", o1_v2());
    let cds = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&cds), ["A", "B"], "A stays until the route left it");
    ads.ack(&cds).await;
    let eds = ads.recv_type(EDS).await;
    assert_eq!(sotw_names(&eds), ["B"]);
    ads.ack(&eds).await;
    let rds = ads.recv_type(RDS).await;
    assert_eq!(route_cluster(&decode_all::<RouteConfiguration>(&rds)[0]), "B");
    // Until the route update is ACKed, A is not removed.
    ads.expect_quiet().await;
    ads.ack(&rds).await;
    let cds2 = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&cds2), ["B"]);
    // A SotW EDS response cannot remove: A's endpoints are told gone by NOT_FOUND (rule C4),
    // with the removals, after the route left A.
    let eds2 = ads.recv_type(EDS).await;
    assert!(eds2.resources.is_empty());
    assert_eq!(sotw_errors(&eds2), [("A".to_owned(), 5)]);
    ads.ack(&cds2).await;
    ads.ack(&eds2).await;
    ads.expect_quiet().await;
}

/// Rules S15, S16, O1 on the wire: the interim CDS answer of a make-before-break update (A kept
/// beside B) has a version of its own, so a client that got it and reconnects with that version
/// is sent the clusters again and drops A; one that got the final answer is sent nothing.
#[tokio::test]
async fn s15_s16_o1_a_reconnect_with_the_interim_cds_version_drops_the_removed_cluster() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", o1_v1());
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    let cds = ads.recv_type(CDS).await;
    ads.ack(&cds).await;
    ads.subscribe(RDS, &["R"], None).await;
    let rds = ads.recv_type(RDS).await;
    ads.ack(&rds).await;
    ads.expect_quiet().await;

    cache.set_snapshot("n1", o1_v2());
    let interim = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&interim), ["A", "B"]);
    ads.ack(&interim).await;
    let rds = ads.recv_type(RDS).await;
    ads.ack(&rds).await;
    let last = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&last), ["B"]);
    ads.ack(&last).await;
    assert_ne!(interim.version_info, last.version_info, "rule S16: two states, two versions");

    let reconnect = |version: &str| DiscoveryRequest {
        type_url: url(CDS),
        version_info: version.to_owned(),
        ..Default::default()
    };
    let mut again = Sotw::ads(&t, "n1").await;
    again.send(reconnect(&interim.version_info)).await;
    let r = again.recv_type(CDS).await;
    assert_eq!(sotw_names(&r), ["B"], "A is gone for the client too");
    assert_eq!(r.version_info, last.version_info);
    let mut resumed = Sotw::ads(&t, "n1").await;
    resumed.send(reconnect(&last.version_info)).await;
    resumed.expect_quiet().await;
}

// rule O2
#[tokio::test]
async fn o2_eds_answered_while_clusters_warm() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("A", "1"), cla("A", 1)]);
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    let cds = ads.recv_type(CDS).await;
    // Cluster A warms: the client asks for its endpoints before ACKing the clusters.
    ads.subscribe(EDS, &["A"], None).await;
    let eds = ads.recv_type(EDS).await;
    assert_eq!(sotw_names(&eds), ["A"]);
    ads.ack(&cds).await;
    ads.ack(&eds).await;

    // The same during an update that also removes A (whose removal is put off, rule O1).
    cache.set_snapshot("n1", snapshot![cluster("B", "1"), cla("B", 1)]);
    let cds2 = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&cds2), ["A", "B"]);
    // Nothing else on this stream refers to clusters, so A's endpoints are told gone at once
    // (NOT_FOUND: a SotW EDS response cannot remove, rule C4).
    let gone = ads.recv_type(EDS).await;
    assert_eq!(sotw_errors(&gone), [("A".to_owned(), 5)]);
    ads.subscribe(EDS, &["A", "B"], Some(&gone)).await;
    let eds2 = ads.recv_type(EDS).await;
    assert_eq!(sotw_names(&eds2), ["B"]);
    ads.ack(&eds2).await;
    ads.ack(&cds2).await;
    let cds3 = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&cds3), ["B"]);
}

// rule S16 (encode once)
#[tokio::test]
async fn s16_streams_get_byte_identical_resources() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1")]);
    let t = serve(cache.clone()).await;
    let mut one = Sotw::ads(&t, "n1").await;
    let mut two = Sotw::clusters(&t, "n1").await;
    one.subscribe(CDS, &[], None).await;
    two.subscribe(CDS, &[], None).await;
    let r1 = one.recv_type(CDS).await;
    let r2 = two.recv_type(CDS).await;
    assert_eq!(r1.resources, r2.resources);
    assert_eq!(r1.version_info, r2.version_info, "versions describe the resources");
    let cached = cache.get("n1", &TypeUrl::from(CDS), "a").expect("a");
    assert_eq!(r1.resources[0].value, cached.value().to_vec());
    one.ack(&r1).await;
    two.ack(&r2).await;
    // Only b changes: a's bytes stay the same.
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "2")]);
    let u1 = one.recv_type(CDS).await;
    let u2 = two.recv_type(CDS).await;
    assert_eq!(u1.resources, u2.resources);
    assert_eq!(u1.resources[0], r1.resources[0]);
    assert_ne!(u1.resources[1], r1.resources[1]);
    assert_eq!(u1.version_info, u2.version_info);
    assert_ne!(u1.version_info, r1.version_info);
}

// rules S9, S11, S13
#[tokio::test]
async fn s11_full_state_deletion_and_later_existence() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1")]);
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &["a", "c"], None).await;
    let r1 = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&r1), ["a"], "only the named resources that exist");
    ads.ack(&r1).await;
    // c appears: the full state of the subscription is sent.
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1"), cluster("c", "1")]);
    let r2 = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&r2), ["a", "c"]);
    ads.ack(&r2).await;
    // Everything deleted: an empty response deletes all.
    cache.set_snapshot(
        "n1",
        xds_cache::Snapshot::builder().declare(ResourceType::Cluster).build_unchecked(),
    );
    let r3 = ads.recv_type(CDS).await;
    assert!(r3.resources.is_empty());
}

// rule S8
#[tokio::test]
async fn s08_a_newer_request_replaces_the_subscription() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cla("a", 1), cla("b", 1)]);
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(EDS, &["a", "b"], None).await;
    let r1 = ads.recv_type(EDS).await;
    assert_eq!(sotw_names(&r1), ["a", "b"]);
    ads.subscribe(EDS, &["b"], Some(&r1)).await;
    ads.expect_quiet().await;
    cache.set_snapshot("n1", snapshot![cla("a", 2), cla("b", 1)]);
    ads.expect_quiet().await;
    cache.set_snapshot("n1", snapshot![cla("a", 2), cla("b", 2)]);
    assert_eq!(sotw_names(&ads.recv_type(EDS).await), ["b"]);
}

/// What `on_request` saw of one request: whether it came as a repeat, and its names.
type Seen = (bool, Vec<String>);

/// Records what `on_request` saw.
struct SeenRequests {
    seen: Arc<Mutex<Vec<Seen>>>,
    wants_repeated_names: bool,
}

impl Callbacks for SeenRequests {
    fn on_request(&self, _: &StreamInfo, _: &TypeUrl, r: XdsRequest<'_>) -> Result<(), Status> {
        let repeated = matches!(r, XdsRequest::SotwRepeated(_));
        self.seen.lock().expect("lock").push((repeated, r.names().to_vec()));
        Ok(())
    }

    fn wants_repeated_names(&self) -> bool {
        self.wants_repeated_names
    }
}

// rule S9
#[tokio::test]
async fn s09_a_repeated_list_is_recognised_undecoded_and_a_changed_one_is_applied() {
    for wants_repeated_names in [false, true] {
        let cache = SnapshotCache::by_node_id();
        cache.set_snapshot("n1", snapshot![cla("a", 1), cla("b", 1), cla("c", 1)]);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let callbacks = SeenRequests { seen: seen.clone(), wants_repeated_names };
        let t = start(XdsServer::builder(cache.clone()).callbacks(callbacks).build()).await;
        let mut ads = Sotw::ads(&t, "n1").await;
        ads.subscribe(EDS, &["a", "b"], None).await;
        let r1 = ads.recv_type(EDS).await;
        // The ACK repeats the list byte for byte: recognised undecoded. The same names in
        // another order are decoded, and found to be the same set: nothing is sent.
        ads.ack(&r1).await;
        ads.subscribe(EDS, &["b", "a"], Some(&r1)).await;
        ads.expect_quiet().await;
        cache.set_snapshot("n1", snapshot![cla("a", 2), cla("b", 1), cla("c", 1)]);
        let r2 = ads.recv_type(EDS).await;
        assert_eq!(sotw_names(&r2), ["a"]);
        ads.ack(&r2).await;
        // A changed list (one name fewer, one more) is decoded and applied.
        ads.subscribe(EDS, &["a", "c"], Some(&r2)).await;
        assert_eq!(sotw_names(&ads.recv_type(EDS).await), ["c"]);
        cache.set_snapshot("n1", snapshot![cla("a", 2), cla("b", 2), cla("c", 1)]);
        ads.expect_quiet().await;

        let seen = seen.lock().expect("lock").clone();
        let (ab, ba) = (names(&["a", "b"]), names(&["b", "a"]));
        let repeat = |list: &Vec<String>| match wants_repeated_names {
            true => (false, list.clone()),
            false => (true, Vec::new()),
        };
        let expected = [
            (false, ab.clone()),
            repeat(&ab),
            (false, ba.clone()),
            repeat(&ba),
            (false, names(&["a", "c"])),
        ];
        assert_eq!(seen, expected, "wants_repeated_names: {wants_repeated_names}");
    }
}

// rules S10, S9
#[tokio::test]
async fn s10_legacy_wildcard_ends_when_names_are_given() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1")]);
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    let r1 = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&r1), ["a", "b"]);
    // An empty list again keeps the legacy wildcard.
    ads.subscribe(CDS, &[], Some(&r1)).await;
    ads.expect_quiet().await;
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1"), cluster("c", "1")]);
    let r2 = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&r2), ["a", "b", "c"]);
    // Names without `*`: the wildcard ends; the full state is just those names.
    ads.subscribe(CDS, &["a"], Some(&r2)).await;
    let r3 = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&r3), ["a"]);
    // `*` with a name: everything again.
    ads.subscribe(CDS, &["*", "a"], Some(&r3)).await;
    let r4 = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&r4), ["a", "b", "c"]);
    assert!(type_status(&t.server, "n1", CDS).expect("status").wildcard);
}

// rule S15
#[tokio::test]
async fn s15_reconnect_at_the_current_version_resends_nothing() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let t = serve(cache.clone()).await;
    let mut first = Sotw::ads(&t, "n1").await;
    first.subscribe(CDS, &[], None).await;
    let r1 = first.recv_type(CDS).await;
    first.ack(&r1).await;
    drop(first);

    let mut again = Sotw::ads(&t, "n1").await;
    again
        .send(DiscoveryRequest {
            type_url: url(CDS),
            version_info: r1.version_info.clone(),
            ..Default::default()
        })
        .await;
    again.expect_quiet().await;
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1")]);
    let r2 = again.recv_type(CDS).await;
    assert_eq!(sotw_names(&r2), ["a", "b"], "full state after a change");

    // At another version, the client gets everything at once.
    let mut stale = Sotw::ads(&t, "n1").await;
    stale
        .send(DiscoveryRequest {
            type_url: url(CDS),
            version_info: r1.version_info.clone(),
            ..Default::default()
        })
        .await;
    assert_eq!(sotw_names(&stale.recv_type(CDS).await), ["a", "b"]);
}

/// A custom resource type.
#[derive(Clone, PartialEq, xds_proto::prost::Message)]
struct Widget {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(uint32, tag = "2")]
    size: u32,
}

impl xds_proto::prost::Name for Widget {
    const NAME: &'static str = "Widget";
    const PACKAGE: &'static str = "acme.example.v1";

    fn type_url() -> String {
        "type.googleapis.com/acme.example.v1.Widget".into()
    }
}

impl xds_proto::XdsResource for Widget {
    fn resource_name(&self) -> Option<&str> {
        Some(&self.name)
    }
}

// rule S3: a cache may serve custom types
#[tokio::test]
async fn s03_custom_types_are_served_on_ads() {
    use xds_proto::prost::{Message, Name};
    let cache = SnapshotCache::by_node_id();
    let w = |name: &str, size| Widget { name: name.into(), size };
    cache.set_snapshot("n1", snapshot![w("w1", 1), w("w2", 2)]);
    let config = ServerConfig::default()
        .custom_types(vec![xds_proto::CustomType::of::<Widget>().wildcard_capable(true)])
        .control_plane_id("cp-test");
    let t = start(XdsServer::builder(cache.clone()).config(config).build()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.send(DiscoveryRequest { type_url: Widget::type_url(), ..Default::default() }).await;
    let r = ads.recv().await;
    assert_eq!(r.type_url, Widget::type_url());
    assert_eq!(r.control_plane.as_ref().map(|c| c.identifier.as_str()), Some("cp-test"));
    let got: Vec<Widget> =
        r.resources.iter().map(|a| Widget::decode(a.value.as_slice()).expect("a widget")).collect();
    assert_eq!(got, [w("w1", 1), w("w2", 2)]);
    ads.ack(&r).await;
    cache.set_snapshot("n1", snapshot![w("w1", 1), w("w2", 3)]);
    let r2 = ads.recv().await;
    // Not full state: only the changed widget.
    assert_eq!(r2.resources.len(), 1);
    assert_eq!(Widget::decode(r2.resources[0].value.as_slice()).expect("a widget"), w("w2", 3));
}

/// A cluster whose upstream TLS certificate comes from SDS secret `secret` over ADS.
fn tls_cluster(name: &str, secret: &str) -> Cluster {
    use xds_proto::pb::envoy::config::core::v3::{
        AggregatedConfigSource, ConfigSource, TransportSocket, config_source, transport_socket,
    };
    use xds_proto::pb::envoy::extensions::transport_sockets::tls::v3::{
        CommonTlsContext, SdsSecretConfig, UpstreamTlsContext,
    };
    let tls = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_sds_secret_configs: vec![SdsSecretConfig {
                name: secret.into(),
                sds_config: Some(ConfigSource {
                    config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
                        AggregatedConfigSource::default(),
                    )),
                    ..Default::default()
                }),
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    Cluster {
        transport_socket: Some(TransportSocket {
            name: "envoy.transport_sockets.tls".into(),
            config_type: Some(transport_socket::ConfigType::TypedConfig(pack(&tls))),
        }),
        ..cluster(name, "1")
    }
}

// rule O1: secrets come before whatever references them
#[tokio::test]
async fn o1_secrets_come_before_the_clusters_that_use_them() {
    let cache = SnapshotCache::by_node_id();
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    ads.subscribe(SDS, &["s1"], None).await;
    eventually("two sub-streams", || {
        t.server.status().node("n1").first().is_some_and(|s| s.types.len() == 2)
    })
    .await;
    cache.set_snapshot("n1", snapshot![tls_cluster("c", "s1"), secret("s1")]);
    let first = ads.recv().await;
    assert_eq!(first.type_url, url(SDS), "the secret first, then the cluster that uses it");
    ads.ack(&first).await;
    let second = ads.recv_type(CDS).await;
    ads.ack(&second).await;
}

// rule O2: a listener warms until its route configuration arrives
#[tokio::test]
async fn o2_rds_answered_while_listeners_warm() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![rds_listener("L", "R"), route_to("R", "A")]);
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(LDS, &[], None).await;
    let lds = ads.recv_type(LDS).await;
    ads.subscribe(RDS, &["R"], None).await;
    let rds = ads.recv_type(RDS).await;
    assert_eq!(sotw_names(&rds), ["R"]);
    ads.ack(&lds).await;
    ads.ack(&rds).await;
    ads.expect_quiet().await;
}

// rule O1: a removal waits for the ACKs of the route update and of the clusters response
#[tokio::test]
async fn o1_cluster_removal_waits_for_the_cluster_ack_too() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", o1_v1());
    let t = serve(cache.clone()).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    let cds = ads.recv_type(CDS).await;
    ads.ack(&cds).await;
    ads.subscribe(EDS, &["A", "B"], None).await;
    let eds = ads.recv_type(EDS).await;
    ads.ack(&eds).await;
    ads.subscribe(LDS, &[], None).await;
    let lds = ads.recv_type(LDS).await;
    ads.ack(&lds).await;
    ads.subscribe(RDS, &["R"], None).await;
    let rds = ads.recv_type(RDS).await;
    ads.ack(&rds).await;

    cache.set_snapshot("n1", o1_v2());
    let cds = ads.recv_type(CDS).await;
    assert_eq!(sotw_names(&cds), ["A", "B"]);
    let eds = ads.recv_type(EDS).await;
    ads.ack(&eds).await;
    let rds = ads.recv_type(RDS).await;
    ads.ack(&rds).await;
    // The route left A: A's endpoints are told gone (NOT_FOUND: a SotW EDS response cannot
    // remove, rule C4). The clusters response is not ACKed yet: A's removal waits.
    let gone = ads.recv_type(EDS).await;
    assert_eq!(sotw_errors(&gone), [("A".to_owned(), 5)]);
    ads.ack(&gone).await;
    ads.expect_quiet().await;
    ads.ack(&cds).await;
    assert_eq!(sotw_names(&ads.recv_type(CDS).await), ["B"]);
}

// rule S3: "the built-in caches answer InvalidArgument / Unimplemented with the type URL"
#[tokio::test]
async fn s03_unknown_type_on_ads_over_a_snapshot_cache_is_refused() {
    let unknown = "type.googleapis.com/acme.example.v1.Nothing";
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let t = serve(cache).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.send(DiscoveryRequest {
        type_url: unknown.into(),
        resource_names: names(&["x"]),
        ..Default::default()
    })
    .await;
    assert_status(&ads.recv_err().await, Code::InvalidArgument, &[unknown]);
}
