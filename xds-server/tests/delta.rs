//! Incremental (delta) xDS over the wire: `DeltaAggregatedResources` against a real server.

mod util;

use std::collections::{BTreeSet, HashMap};

use tonic::Code;
use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::config::route::v3::RouteConfiguration;
use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};
use xds_proto::prost::Message;

use util::*;

fn decode_route(r: &DeltaDiscoveryResponse, name: &str) -> RouteConfiguration {
    let any = delta_resource(r, name).resource.as_ref().expect("a body");
    RouteConfiguration::decode(any.value.as_slice()).expect("a route configuration")
}

fn o1_v1() -> xds_cache::Snapshot {
    snapshot![cluster("A", "1"), cla("A", 1), rds_listener("L", "R"), route_to("R", "A")]
}

fn o1_v2() -> xds_cache::Snapshot {
    snapshot![cluster("B", "1"), cla("B", 1), rds_listener("L", "R"), route_to("R", "B")]
}

// rules O1, D1, D5, D6
#[tokio::test]
async fn o1_make_before_break_on_delta_ads() {
    let cache = SnapshotCache::by_node_id();
    let t = serve(cache.clone()).await;
    let mut ads = Delta::ads(&t, "n1").await;
    let mut nonces = BTreeSet::new();
    ads.subscribe(RDS, &["R"], &[]).await;
    ads.subscribe(LDS, &[], &[]).await;
    ads.subscribe(EDS, &["A", "B"], &[]).await;
    ads.subscribe(CDS, &[], &[]).await;
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
        assert!(nonces.insert(r.nonce.clone()), "rule D1: a fresh nonce");
        if r.type_url == url(EDS) {
            assert_eq!(delta_absent(&r), ["B"], "rule D6: B does not exist yet");
        }
        order.push((r.type_url.clone(), delta_names(&r)));
    }
    let expected =
        [(CDS, "A"), (EDS, "A"), (LDS, "L"), (RDS, "R")].map(|(t, n)| (url(t), vec![n.to_owned()]));
    assert_eq!(order, expected);

    cache.set_snapshot("n1", o1_v2());
    let cds = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&cds), ["B"]);
    assert!(cds.removed_resources.is_empty(), "A is still used by the route");
    ads.ack(&cds).await;
    let eds = ads.recv_type(EDS).await;
    assert_eq!(delta_names(&eds), ["B"]);
    assert!(eds.removed_resources.is_empty());
    ads.ack(&eds).await;
    let rds = ads.recv_type(RDS).await;
    assert_eq!(route_cluster(&decode_route(&rds, "R").clone()), "B");
    ads.expect_quiet().await;
    ads.ack(&rds).await;
    let cds2 = ads.recv_type(CDS).await;
    assert!(cds2.resources.is_empty());
    assert_eq!(cds2.removed_resources, ["A"]);
    ads.ack(&cds2).await;
    let eds2 = ads.recv_type(EDS).await;
    assert_eq!(eds2.removed_resources, ["A"]);
    ads.ack(&eds2).await;
    ads.expect_quiet().await;
    for r in [cds, eds, rds, cds2, eds2] {
        assert!(nonces.insert(r.nonce), "rule D1: a fresh nonce");
    }
}

// rule O2
#[tokio::test]
async fn o2_delta_eds_answered_while_clusters_warm() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("A", "1"), cla("A", 1)]);
    let t = serve(cache).await;
    let mut ads = Delta::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], &[]).await;
    let cds = ads.recv_type(CDS).await;
    ads.subscribe(EDS, &["A"], &[]).await;
    let eds = ads.recv_type(EDS).await;
    assert_eq!(delta_names(&eds), ["A"]);
    ads.ack(&cds).await;
    ads.ack(&eds).await;
    ads.expect_quiet().await;
}

// rules D2, D3, D4
#[tokio::test]
async fn d02_d03_subscribe_and_unsubscribe() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cla("a", 1), cla("b", 1)]);
    let t = serve(cache.clone()).await;
    let mut ads = Delta::ads(&t, "n1").await;
    ads.subscribe(EDS, &["a"], &[]).await;
    let r = ads.recv_type(EDS).await;
    assert_eq!(delta_names(&r), ["a"]);
    let a = delta_resource(&r, "a").clone();
    assert!(!a.version.is_empty());
    ads.ack(&r).await;
    ads.subscribe(EDS, &["b"], &[]).await;
    let r = ads.recv_type(EDS).await;
    assert_eq!(delta_names(&r), ["b"], "rule D4: a is not sent again");
    ads.ack(&r).await;
    // Rule D2: a subscribed name is resent even though the client holds it.
    ads.subscribe(EDS, &["a"], &[]).await;
    let r = ads.recv_type(EDS).await;
    assert_eq!(delta_names(&r), ["a"]);
    assert_eq!(delta_resource(&r, "a"), &a);
    ads.ack(&r).await;
    // Rule D3: unsubscribing (an unknown name too) sends nothing and stops updates.
    ads.subscribe(EDS, &[], &["a", "zzz"]).await;
    ads.expect_quiet().await;
    let s = type_status(&t.server, "n1", EDS).expect("status");
    assert_eq!(s.names, ["b"]);
    cache.set_snapshot("n1", snapshot![cla("a", 2), cla("b", 1)]);
    ads.expect_quiet().await;
    cache.set_snapshot("n1", snapshot![cla("a", 2), cla("b", 2)]);
    let r = ads.recv_type(EDS).await;
    assert_eq!(delta_names(&r), ["b"]);
    assert!(r.removed_resources.is_empty());
}

// rules D5, D6
#[tokio::test]
async fn d05_d06_removal_and_does_not_exist() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot(
        "n1",
        snapshot![cla("a", 1), cla("b", 1), cluster("x", "1"), cluster("y", "1")],
    );
    let t = serve(cache.clone()).await;
    let mut ads = Delta::ads(&t, "n1").await;
    ads.subscribe(EDS, &["a", "b", "nope"], &[]).await;
    let r = ads.recv_type(EDS).await;
    assert_eq!(delta_names(&r), ["a", "b"]);
    // Rule D6: answered at once, a resource with the name and no body.
    let nope = delta_resource(&r, "nope");
    assert!(nope.resource.is_none() && nope.aliases.is_empty());
    ads.ack(&r).await;
    ads.subscribe(CDS, &[], &[]).await;
    let c = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&c), ["x", "y"]);
    ads.ack(&c).await;

    // Rule D5: deletions of held resources, named and wildcard.
    cache.set_snapshot("n1", snapshot![cla("a", 1), cluster("x", "1")]);
    let mut got = HashMap::new();
    for _ in 0..2 {
        let r = ads.recv().await;
        ads.ack(&r).await;
        got.insert(r.type_url.clone(), r);
    }
    let (eds, cds) = (&got[&url(EDS)], &got[&url(CDS)]);
    assert!(eds.resources.is_empty() && cds.resources.is_empty());
    assert_eq!(eds.removed_resources, ["b"]);
    assert_eq!(cds.removed_resources, ["y"]);
    ads.expect_quiet().await;

    // Rule D6: a name that did not exist is sent when it appears.
    cache.set_snapshot("n1", snapshot![cla("a", 1), cla("nope", 7), cluster("x", "1")]);
    let r = ads.recv_type(EDS).await;
    assert_eq!(delta_names(&r), ["nope"]);
}

/// The names `first` removed, or else those of the next response (which must remove only).
async fn removed_by_now(ads: &mut Delta, first: &DeltaDiscoveryResponse) -> Vec<String> {
    if !first.removed_resources.is_empty() {
        return first.removed_resources.clone();
    }
    let t = xds_proto::ResourceType::from_type_url(&first.type_url).expect("a built-in type");
    let next = ads.recv_type(t).await;
    assert!(next.resources.is_empty(), "only a removal: {next:?}");
    ads.ack(&next).await;
    next.removed_resources
}

// rule D7
#[tokio::test]
async fn d07_reconnect_gets_only_what_differs() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot(
        "n1",
        snapshot![cluster("a", "1"), cluster("b", "1"), cla("a", 1), cla("b", 1)],
    );
    let t = serve(cache.clone()).await;
    let mut first = Delta::ads(&t, "n1").await;
    first.subscribe(CDS, &[], &[]).await;
    let cds = first.recv_type(CDS).await;
    first.ack(&cds).await;
    first.subscribe(EDS, &["a", "b"], &[]).await;
    let eds = first.recv_type(EDS).await;
    first.ack(&eds).await;
    let held = |r: &DeltaDiscoveryResponse| -> HashMap<String, String> {
        r.resources.iter().map(|x| (x.name.clone(), x.version.clone())).collect()
    };
    let (mut cds_held, mut eds_held) = (held(&cds), held(&eds));
    drop(first);

    // While the client is away: b changes, a cluster c appears, and the client claims to hold a
    // cluster that is gone.
    cache.set_snapshot(
        "n1",
        snapshot![
            cluster("a", "1"),
            cluster("b", "2"),
            cluster("c", "1"),
            cla("a", 1),
            cla("b", 2)
        ],
    );
    cds_held.insert("gone".into(), "0123".into());
    eds_held.insert("gone".into(), "0123".into());
    let mut again = Delta::ads(&t, "n1").await;
    again
        .send(DeltaDiscoveryRequest {
            type_url: url(CDS),
            initial_resource_versions: cds_held,
            ..Default::default()
        })
        .await;
    let cds = again.recv_type(CDS).await;
    assert_eq!(delta_names(&cds), ["b", "c"]);
    again.ack(&cds).await;
    // On ADS a cluster removal may come in a later response (rule O1).
    assert_eq!(removed_by_now(&mut again, &cds).await, ["gone"]);
    again
        .send(DeltaDiscoveryRequest {
            type_url: url(EDS),
            resource_names_subscribe: names(&["a", "b", "gone"]),
            initial_resource_versions: eds_held,
            ..Default::default()
        })
        .await;
    let eds = again.recv_type(EDS).await;
    assert_eq!(delta_names(&eds), ["b"]);
    again.ack(&eds).await;
    assert_eq!(removed_by_now(&mut again, &eds).await, ["gone"]);
    again.expect_quiet().await;
}

// rule D8
#[tokio::test]
async fn d08_explicit_wildcard_subscribed_and_unsubscribed() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1")]);
    let t = serve(cache.clone()).await;
    let mut ads = Delta::ads(&t, "n1").await;
    ads.subscribe(CDS, &["*"], &[]).await;
    let r = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["a", "b"]);
    ads.ack(&r).await;
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1"), cluster("c", "1")]);
    let r = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["c"]);
    ads.ack(&r).await;
    // `*` with a name; then `*` removed: only the name is left.
    ads.subscribe(CDS, &["a"], &["*"]).await;
    let r = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["a"], "rule D2: a newly subscribed name is resent");
    ads.ack(&r).await;
    assert!(!type_status(&t.server, "n1", CDS).expect("status").wildcard);
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "2"), cluster("d", "1")]);
    ads.expect_quiet().await;
    cache.set_snapshot("n1", snapshot![cluster("a", "2"), cluster("b", "2"), cluster("d", "1")]);
    assert_eq!(delta_names(&ads.recv_type(CDS).await), ["a"]);
}

// rule D1
#[tokio::test]
async fn d01_nack_and_stale_nonce() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cla("a", 1), cla("b", 1)]);
    let t = serve(cache.clone()).await;
    let mut ads = Delta::ads(&t, "n1").await;
    ads.subscribe(EDS, &["a"], &[]).await;
    let r1 = ads.recv_type(EDS).await;
    ads.nack(&r1, "endpoint a: bad").await;
    ads.expect_quiet().await;
    let nack = type_status(&t.server, "n1", EDS).and_then(|s| s.nack).expect("the NACK");
    assert_eq!((nack.nonce.as_str(), nack.error.as_str()), (r1.nonce.as_str(), "endpoint a: bad"));
    assert_eq!(t.metric("xds_nacks_total", "delta", "endpoint"), 1.0);
    cache.set_snapshot("n1", snapshot![cla("a", 2), cla("b", 1)]);
    let r2 = ads.recv_type(EDS).await;
    assert_eq!(delta_names(&r2), ["a"]);
    assert_ne!(delta_resource(&r2, "a").version, delta_resource(&r1, "a").version);
    // A request naming r1 (stale) still subscribes to b; b comes after r2 is ACKed.
    ads.send(DeltaDiscoveryRequest {
        type_url: url(EDS),
        response_nonce: r1.nonce.clone(),
        resource_names_subscribe: names(&["b"]),
        ..Default::default()
    })
    .await;
    eventually("b subscribed", || {
        type_status(&t.server, "n1", EDS).is_some_and(|s| s.names == ["a", "b"])
    })
    .await;
    assert_eq!(t.metric("xds_stale_requests_total", "delta", "endpoint"), 1.0);
    ads.ack(&r2).await;
    let r3 = ads.recv_type(EDS).await;
    assert_eq!(delta_names(&r3), ["b"]);
}

// rule D1: an ACK is read from its bytes, not decoded (`DeltaAck`), and means what a decoded
// one means: the response accepted, the request counted and under the stream's rate; a nonce
// that is not the latest is stale; one of a type the stream has not opened goes the whole way.
// (A NACK: `d01_nack_and_stale_nonce`; a server with callbacks of its own:
// `callbacks_see_every_delta_ack_as_a_request_then_as_an_ack` in lifecycle.rs.)
#[tokio::test]
async fn d01_an_ack_read_from_its_bytes_is_an_ack() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cla("a", 1)]);
    let limits = xds_server::Limits::default().max_requests_per_second(5).request_burst(5);
    let config = xds_server::ServerConfig::default().limits(limits);
    let t = start(xds_server::XdsServer::builder(cache.clone()).config(config).build()).await;
    let mut ads = Delta::ads(&t, "n1").await;
    ads.subscribe(EDS, &["a"], &[]).await;
    let r1 = ads.recv_type(EDS).await;
    ads.ack(&r1).await;
    eventually("the ACK counted", || t.metric("xds_acks_total", "delta", "endpoint") == 1.0).await;
    assert_eq!(t.metric("xds_requests_total", "delta", "endpoint"), 2.0);
    cache.set_snapshot("n1", snapshot![cla("a", 2)]);
    let r2 = ads.recv_type(EDS).await;
    // The first response's nonce again: stale, and nothing is sent for it.
    ads.ack(&r1).await;
    eventually("the stale ACK seen", || {
        t.metric("xds_stale_requests_total", "delta", "endpoint") == 1.0
    })
    .await;
    ads.expect_quiet().await;
    ads.ack(&r2).await;
    eventually("the second ACK counted", || t.metric("xds_acks_total", "delta", "endpoint") == 2.0)
        .await;
    // An ACK of a type never subscribed is a first request of it: taken in whole.
    ads.send(DeltaDiscoveryRequest {
        type_url: url(CDS),
        response_nonce: r2.nonce.clone(),
        ..Default::default()
    })
    .await;
    eventually("clusters opened", || {
        t.server.status().node("n1").first().is_some_and(|s| s.types.len() == 2)
    })
    .await;
    // Five requests so far, five more allowed by the burst: a client spinning ACKs is ended.
    for _ in 0..50 {
        ads.ack(&r2).await;
    }
    assert_status(&ads.recv_err().await, Code::ResourceExhausted, &["too many requests"]);
}

// rules D4, S16 (encode once)
#[tokio::test]
async fn d04_streams_share_bytes_and_only_changed_resources_get_new_versions() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1")]);
    let t = serve(cache.clone()).await;
    let mut one = Delta::ads(&t, "n1").await;
    let mut two = Delta::clusters(&t, "n1").await;
    one.subscribe(CDS, &[], &[]).await;
    two.subscribe(CDS, &[], &[]).await;
    let r1 = one.recv_type(CDS).await;
    let r2 = two.recv_type(CDS).await;
    assert_eq!(r1.resources, r2.resources, "the same bytes and versions on both streams");
    one.ack(&r1).await;
    two.ack(&r2).await;
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "2")]);
    let u1 = one.recv_type(CDS).await;
    let u2 = two.recv_type(CDS).await;
    assert_eq!(delta_names(&u1), ["b"], "only the changed resource");
    assert_eq!(u1.resources, u2.resources);
    let (old_b, new_b) = (delta_resource(&r1, "b"), delta_resource(&u1, "b"));
    assert_ne!(old_b.version, new_b.version);
    assert_ne!(old_b.resource, new_b.resource);
}

fn vhds_snapshot(rc_tag: &str) -> xds_cache::Snapshot {
    snapshot![
        vhds_route("rc", rc_tag),
        virtual_host("rc/vh1", &["foo.com"]),
        virtual_host("rc/vh2", &["*.bar.com"]),
    ]
}

/// A delta ADS stream of node `n1` that holds the route configuration `rc` (ACKed): what a
/// client does before it asks for virtual hosts.
async fn with_route_configuration(t: &TestServer) -> Delta {
    let mut ads = Delta::ads(t, "n1").await;
    ads.subscribe(RDS, &["rc"], &[]).await;
    let rds = ads.recv_type(RDS).await;
    ads.ack(&rds).await;
    ads
}

// rules D9, D10, D6
#[tokio::test]
async fn d10_vhds_over_delta_ads() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", vhds_snapshot("1"));
    let t = serve(cache.clone()).await;
    let mut ads = with_route_configuration(&t).await;
    ads.subscribe(VHDS, &["rc/foo.com", "rc/www.bar.com", "rc/nope.org"], &[]).await;
    let r = ads.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["rc/vh1", "rc/vh2"]);
    assert_eq!(delta_resource(&r, "rc/vh1").aliases, ["rc/foo.com"]);
    assert_eq!(delta_resource(&r, "rc/vh2").aliases, ["rc/www.bar.com"]);
    let nope = delta_resource(&r, "rc/nope.org");
    assert!(nope.resource.is_none());
    assert_eq!(nope.aliases, ["rc/nope.org"]);
    ads.ack(&r).await;
    ads.expect_quiet().await;

    // The route configuration changes: every virtual host the client asked for is resent.
    cache.set_snapshot("n1", vhds_snapshot("2"));
    let rds = ads.recv_type(RDS).await;
    ads.ack(&rds).await;
    let r = ads.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["rc/vh1", "rc/vh2"]);
    ads.ack(&r).await;

    // A virtual host for the unknown host appears.
    let mut next = vhds_snapshot("2").to_builder();
    next.add(&virtual_host("rc/vh3", &["nope.org"])).expect("encode");
    cache.set_snapshot("n1", next.build_unchecked());
    let r = ads.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["rc/vh3"]);
    assert_eq!(delta_resource(&r, "rc/vh3").aliases, ["rc/nope.org"]);
}

// rules C3, D9, D10, D7: on-demand VHDS, as Envoy's `envoy.filters.http.on_demand` asks for
// virtual hosts one host at a time, by alias and by name, on one delta stream.
#[tokio::test]
async fn c03_on_demand_vhds_by_alias_and_by_name_in_every_order() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", vhds_snapshot("1"));
    let t = serve(cache.clone()).await;
    let mut ads = with_route_configuration(&t).await;

    // A host by alias, then the same virtual host by its name: both answered, the alias listed.
    ads.subscribe(VHDS, &["rc/foo.com"], &[]).await;
    let r = ads.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["rc/vh1"]);
    assert_eq!(delta_resource(&r, "rc/vh1").aliases, ["rc/foo.com"]);
    ads.ack(&r).await;
    ads.subscribe(VHDS, &["rc/vh1"], &[]).await;
    let r = ads.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["rc/vh1"]);
    ads.ack(&r).await;
    // The other way round: a name first, then an alias of it.
    ads.subscribe(VHDS, &["rc/vh2"], &[]).await;
    let r = ads.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["rc/vh2"]);
    ads.ack(&r).await;
    ads.subscribe(VHDS, &["rc/www.bar.com"], &[]).await;
    let r = ads.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["rc/vh2"]);
    assert_eq!(delta_resource(&r, "rc/vh2").aliases, ["rc/www.bar.com"]);
    ads.ack(&r).await;

    // Unsubscribing the alias of vh1 keeps vh1 (still wanted by name): a change reaches it.
    ads.subscribe(VHDS, &[], &["rc/foo.com"]).await;
    ads.expect_quiet().await;
    let mut next = vhds_snapshot("1").to_builder();
    next.add(&virtual_host("rc/vh1", &["foo.com", "foo.org"])).expect("encode");
    cache.set_snapshot("n1", next.build_unchecked());
    let r = ads.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["rc/vh1"]);
    assert!(delta_resource(&r, "rc/vh1").aliases.is_empty(), "no alias asked for it any more");
    ads.ack(&r).await;
    // Unsubscribing vh2's name keeps vh2 (still wanted by alias); unsubscribing vh1's name
    // leaves it unwanted: its next change is not sent, nor is it listed as removed.
    ads.subscribe(VHDS, &[], &["rc/vh2", "rc/vh1"]).await;
    ads.expect_quiet().await;
    let mut next = vhds_snapshot("1").to_builder();
    next.add(&virtual_host("rc/vh1", &["foo.com"])).expect("encode");
    next.add(&virtual_host("rc/vh2", &["*.bar.com", "bar.com"])).expect("encode");
    cache.set_snapshot("n1", next.build_unchecked());
    let r = ads.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["rc/vh2"]);
    assert_eq!(delta_resource(&r, "rc/vh2").aliases, ["rc/www.bar.com"]);
    assert!(r.removed_resources.is_empty());
    ads.ack(&r).await;
    let vh2_version = delta_resource(&r, "rc/vh2").version.clone();

    // Reconnect (rule D7): the client holds vh2 at its version and asks for it by name, and for
    // a host it does not hold yet by alias. Only what it lacks is sent.
    let mut again = with_route_configuration(&t).await;
    again
        .send(DeltaDiscoveryRequest {
            type_url: url(VHDS),
            resource_names_subscribe: names(&["rc/vh2", "rc/foo.com"]),
            initial_resource_versions: HashMap::from([("rc/vh2".to_owned(), vh2_version)]),
            ..Default::default()
        })
        .await;
    let r = again.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["rc/vh1"]);
    assert_eq!(delta_resource(&r, "rc/vh1").aliases, ["rc/foo.com"]);
    again.ack(&r).await;
    // An alias of a virtual host it holds is answered (rule D2: the alias was not declared
    // held, and the answer is what maps the host to its virtual host).
    again.subscribe(VHDS, &["rc/www.bar.com"], &[]).await;
    let r = again.recv_type(VHDS).await;
    assert_eq!(delta_names(&r), ["rc/vh2"]);
    assert_eq!(delta_resource(&r, "rc/vh2").aliases, ["rc/www.bar.com"]);
}

// rule S2 (delta)
#[tokio::test]
async fn s02_delta_first_request_without_node_is_refused() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let ads = Delta::ads(&t, "n1").await;
    let mut ads = ads;
    ads.send_raw(DeltaDiscoveryRequest { type_url: url(CDS), ..Default::default() }).await;
    assert_status(&ads.recv_err().await, Code::InvalidArgument, &["node"]);
}
