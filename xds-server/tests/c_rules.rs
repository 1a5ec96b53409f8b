//! Rules C1 (xdstp names), C3 (on-demand next to a wildcard), C4 (resource errors) and C5
//! (control plane identity) on the wire: raw xDS from a tonic client against a real server.

mod util;

use std::collections::HashMap;

use xds_cache::{LinearCache, SnapshotCache};
use xds_proto::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DiscoveryRequest, DiscoveryResponse,
};
use xds_server::protocol::{ErrorDetail, code};
use xds_server::{ServerConfig, XdsServer};

use util::*;

const CLUSTER_TYPE: &str = "envoy.config.cluster.v3.Cluster";
const CLA_TYPE: &str = "envoy.config.endpoint.v3.ClusterLoadAssignment";

fn xc(rest: &str) -> String {
    format!("xdstp://auth.example/{CLUSTER_TYPE}/{rest}")
}

fn xe(rest: &str) -> String {
    format!("xdstp://auth.example/{CLA_TYPE}/{rest}")
}

fn sotw_request(t: xds_proto::ResourceType, names_: &[String]) -> DiscoveryRequest {
    DiscoveryRequest { type_url: url(t), resource_names: names_.to_vec(), ..Default::default() }
}

#[tokio::test]
async fn c01_delta_reordered_context_params_are_answered_under_the_asked_name() {
    let cache = SnapshotCache::by_node_id();
    // The configuration spells the parameters one way...
    cache.set_snapshot("n1", snapshot![cluster(&xc("svc?zone=a&env=prod"), "1")]);
    let t = serve(cache.clone()).await;
    let mut ads = Delta::ads(&t, "n1").await;
    // ...the client another.
    let asked = xc("svc?env=prod&zone=a");
    ads.subscribe(CDS, &[&asked], &[]).await;
    let r = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&r), std::slice::from_ref(&asked));
    assert!(r.resource_errors.is_empty());
    ads.ack(&r).await;
    // A change of it reaches the client under its spelling too; its removal as well.
    cache.set_snapshot("n1", snapshot![cluster(&xc("svc?env=prod&zone=a"), "2")]);
    let r = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&r), std::slice::from_ref(&asked));
    ads.ack(&r).await;
    cache.set_snapshot("n1", snapshot![cluster("other", "1")]);
    let r = ads.recv_type(CDS).await;
    assert_eq!(r.removed_resources, [asked]);
}

#[tokio::test]
async fn c01_sotw_reordered_context_params_match() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cla(&xe("ep?b=2&a=1"), 80)]);
    let t = serve(cache).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.send(sotw_request(EDS, &[xe("ep?a=1&b=%32")])).await;
    let r = ads.recv_type(EDS).await;
    // The body carries the configuration's name; both spell the same resource (rule C1).
    assert_eq!(sotw_names(&r), [xe("ep?b=2&a=1")]);
    assert!(r.resource_errors.is_empty());
}

#[tokio::test]
async fn c01_an_xdstp_name_of_another_type_is_refused_per_resource() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let t = serve(cache).await;
    let wrong = xe("ep");
    let broken = xc("x%zz");
    // Delta: the rest of the subscription is served; the stream stays up.
    let mut ads = Delta::ads(&t, "n1").await;
    ads.subscribe(CDS, &["a", &wrong, &broken], &[]).await;
    let r = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["a"]);
    assert!(delta_absent(&r).is_empty());
    let mut want =
        vec![(wrong.clone(), code::INVALID_ARGUMENT), (broken.clone(), code::INVALID_ARGUMENT)];
    want.sort();
    assert_eq!(delta_errors(&r), want);
    let message =
        &r.resource_errors.iter().find(|e| e.resource_name.as_ref().unwrap().name == wrong);
    assert!(message.unwrap().error_detail.as_ref().unwrap().message.contains(CLA_TYPE));
    ads.ack(&r).await;
    ads.expect_quiet().await;
    // SotW: the same, once, although every ACK repeats the name.
    let mut sotw = Sotw::ads(&t, "n1").await;
    sotw.subscribe(CDS, &["a", &wrong], None).await;
    let r = sotw.recv_type(CDS).await;
    assert_eq!(sotw_names(&r), ["a"]);
    assert_eq!(sotw_errors(&r), [(wrong, code::INVALID_ARGUMENT)]);
    sotw.ack(&r).await;
    sotw.expect_quiet().await;
}

/// Rule C4: a SotW and a delta client with no client features are told `NOT_FOUND` for a
/// missing name and `PERMISSION_DENIED` for a refused one, with their other resources intact;
/// on delta the missing name keeps rule D6's bodiless resource beside the error. Once each,
/// and the error is over when the resource comes.
#[tokio::test]
async fn c04_not_found_and_permission_denied_without_any_client_feature() {
    let cache = SnapshotCache::by_node_id();
    let all = snapshot![cluster("a", "1"), cluster("private-b", "1"), cla("a", 1)];
    cache.set_snapshot("n1", all);
    let t = start(XdsServer::builder(cache.clone()).authorizer(NoPrivate).build()).await;

    let mut delta = Delta::ads(&t, "n1").await;
    delta.subscribe(EDS, &["a", "missing", "private-b"], &[]).await;
    let r = delta.recv_type(EDS).await;
    assert_eq!(delta_names(&r), ["a"]);
    assert_eq!(delta_absent(&r), ["missing"], "rule D6 still answers it");
    let mut got = delta_errors(&r);
    got.sort();
    assert_eq!(
        got,
        [
            ("missing".to_owned(), code::NOT_FOUND),
            ("private-b".to_owned(), code::PERMISSION_DENIED)
        ]
    );
    delta.ack(&r).await;
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("private-b", "1"), cla("a", 2)]);
    let r = delta.recv_type(EDS).await;
    assert!(r.resource_errors.is_empty(), "sent once");
    delta.ack(&r).await;
    cache.set_snapshot(
        "n1",
        snapshot![cluster("a", "1"), cluster("private-b", "1"), cla("a", 2), cla("missing", 3)],
    );
    let r = delta.recv_type(EDS).await;
    assert_eq!(delta_names(&r), ["missing"]);
    assert!(r.resource_errors.is_empty());

    // SotW: full-state CDS still carries every other resource.
    let mut sotw = Sotw::ads(&t, "n1").await;
    sotw.subscribe(CDS, &["a", "nope", "private-b"], None).await;
    let r = sotw.recv_type(CDS).await;
    assert_eq!(sotw_names(&r), ["a"]);
    let mut got = sotw_errors(&r);
    got.sort();
    assert_eq!(
        got,
        [("nope".to_owned(), code::NOT_FOUND), ("private-b".to_owned(), code::PERMISSION_DENIED)]
    );
    sotw.ack(&r).await;
    sotw.expect_quiet().await;

    // The status and CSDS show what the client was told, until the resource comes.
    let cds_type = CDS.type_url();
    let streams = t.server.status().node("n1");
    let sotw_status = streams.iter().find(|s| s.variant == "sotw").expect("the SotW stream");
    let errors = &sotw_status.types[cds_type].errors;
    assert_eq!(errors.keys().collect::<Vec<_>>(), ["nope", "private-b"]);
    assert_eq!(errors["nope"].code, code::NOT_FOUND);
    assert!(errors["private-b"].message.contains("not for n1"));
    let csds = t
        .server
        .client_status(&xds_proto::pb::envoy::service::status::v3::ClientStatusRequest::default())
        .expect("csds");
    let entry = |type_url: &str, name: &str| {
        csds.config
            .iter()
            .flat_map(|c| &c.generic_xds_configs)
            .find(|g| g.type_url == type_url && g.name == name)
            .unwrap_or_else(|| panic!("no {name} in {csds:?}"))
            .clone()
    };
    let received_error =
        xds_proto::pb::envoy::admin::v3::ClientResourceStatus::ReceivedError as i32;
    for name in ["nope", "private-b"] {
        let g = entry(cds_type, name);
        assert_eq!(g.client_status, received_error, "{name}");
        let details = g.error_state.expect("error_state").details;
        let want = if name == "nope" { "NOT_FOUND" } else { "PERMISSION_DENIED" };
        assert!(details.starts_with(want), "{details}");
    }
    // The delta client got `missing` since: no error stands for it.
    let g = entry(EDS.type_url(), "missing");
    assert_ne!(g.client_status, received_error);
}

/// Rule C4: `ServerConfig::resource_errors` off sends none, as a server without TP3 would.
#[tokio::test]
async fn c04_the_server_opt_out_sends_no_resource_errors() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cla("a", 1)]);
    let config = ServerConfig::default().resource_errors(false);
    let t = start(XdsServer::builder(cache.clone()).config(config).build()).await;
    let mut delta = Delta::ads(&t, "n1").await;
    delta.subscribe(EDS, &["a", "missing"], &[]).await;
    let r = delta.recv_type(EDS).await;
    assert_eq!(delta_absent(&r), ["missing"]);
    assert!(r.resource_errors.is_empty());
    let mut sotw = Sotw::ads(&t, "n1").await;
    sotw.subscribe(CDS, &["a", "nope"], None).await;
    let r = sotw.recv_type(CDS).await;
    assert_eq!(sotw_names(&r), ["a"]);
    assert!(r.resource_errors.is_empty());
}

#[tokio::test]
async fn c04_an_error_a_cache_attaches_is_sent_once_and_superseded_by_the_resource() {
    let endpoints =
        LinearCache::of::<xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment>();
    endpoints.upsert(&cla("a", 1)).expect("upsert");
    let t =
        serve(xds_cache::MuxCache::new().route(endpoints.type_url().clone(), endpoints.clone()))
            .await;
    let mut ads = Delta::ads(&t, "n1").await;
    ads.subscribe(EDS, &["a", "b"], &[]).await;
    let r = ads.recv_type(EDS).await;
    assert_eq!(delta_absent(&r), ["b"]);
    ads.ack(&r).await;
    // The inventory behind `b` is unreachable: a transient error, the client keeps what it has.
    endpoints.set_error("b", Some(ErrorDetail::new(code::UNAVAILABLE, "inventory unreachable")));
    let r = ads.recv_type(EDS).await;
    assert_eq!(delta_errors(&r), [("b".to_owned(), code::UNAVAILABLE)]);
    assert_eq!(
        r.resource_errors[0].error_detail.as_ref().unwrap().message,
        "inventory unreachable"
    );
    assert!(r.resources.is_empty());
    ads.ack(&r).await;
    ads.expect_quiet().await;
    endpoints.upsert(&cla("b", 2)).expect("upsert");
    let r = ads.recv_type(EDS).await;
    assert_eq!(delta_names(&r), ["b"]);
    assert!(r.resource_errors.is_empty());
}

#[tokio::test]
async fn c03_on_demand_cds_next_to_the_wildcard_on_delta_ads() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1")]);
    let t = serve(cache.clone()).await;
    let mut ads = Delta::ads(&t, "n1").await;
    ads.subscribe(CDS, &["*"], &[]).await;
    let r = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["a", "b"]);
    ads.ack(&r).await;
    // An on-demand cluster that does not exist yet: answered at once (rule D6)...
    ads.subscribe(CDS, &["od"], &[]).await;
    let r = ads.recv_type(CDS).await;
    assert_eq!(delta_absent(&r), ["od"]);
    ads.ack(&r).await;
    // ...and sent when it appears.
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cluster("b", "1"), cluster("od", "1")]);
    let r = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["od"]);
    ads.ack(&r).await;
    // Subscribing to one in the wildcard set resends it (D2); unsubscribing it keeps it (C3).
    ads.subscribe(CDS, &["a"], &[]).await;
    let r = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["a"]);
    ads.ack(&r).await;
    ads.subscribe(CDS, &[], &["a"]).await;
    ads.expect_quiet().await;
    // Leaving the wildcard: named ones stay, the rest is the client's to drop.
    ads.subscribe(CDS, &[], &["*"]).await;
    ads.expect_quiet().await;
    cache.set_snapshot("n1", snapshot![cluster("a", "2"), cluster("b", "1"), cluster("od", "2")]);
    let r = ads.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["od"]);

    // Reconnect with what the client holds: only what differs is sent (rule D7), the named
    // on-demand cluster included.
    let mut again = Delta::ads(&t, "n1").await;
    let held: HashMap<String, String> = HashMap::from([
        ("a".to_owned(), "stale".to_owned()),
        ("od".to_owned(), delta_resource(&r, "od").version.clone()),
    ]);
    again
        .send(DeltaDiscoveryRequest {
            type_url: url(CDS),
            resource_names_subscribe: names(&["*", "od"]),
            initial_resource_versions: held,
            ..Default::default()
        })
        .await;
    let r = again.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["a", "b"]);
}

#[tokio::test]
async fn c05_control_plane_identifier_on_every_response() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let server = XdsServer::builder(cache.clone())
        .config(ServerConfig::default().control_plane_id("replica-7"))
        .build();
    let t = start(server).await;
    let mut sotw = Sotw::ads(&t, "n1").await;
    sotw.subscribe(CDS, &[], None).await;
    let r = sotw.recv_type(CDS).await;
    assert_eq!(r.control_plane.as_ref().map(|c| c.identifier.as_str()), Some("replica-7"));
    sotw.ack(&r).await;
    let mut delta = Delta::ads(&t, "n1").await;
    delta.subscribe(CDS, &["*", "missing"], &[]).await;
    let d = delta.recv_type(CDS).await;
    assert_eq!(d.control_plane.as_ref().map(|c| c.identifier.as_str()), Some("replica-7"));
    delta.ack(&d).await;
    // Later responses too.
    cache.set_snapshot("n1", snapshot![cluster("a", "2")]);
    let r = sotw.recv_type(CDS).await;
    assert_eq!(r.control_plane.map(|c| c.identifier), Some("replica-7".into()));
    let d = delta.recv_type(CDS).await;
    assert_eq!(d.control_plane.map(|c| c.identifier), Some("replica-7".into()));
}

// --- Rule C2 and LEDS: glob collections of LbEndpoint over delta ADS ---

mod leds {
    use prost::Message;
    use xds_cache::{Snapshot, SnapshotCache};
    use xds_proto::EncodedResource;
    use xds_proto::ResourceType;
    use xds_proto::pb::envoy::config::core::v3::{
        AggregatedConfigSource, ConfigSource, config_source,
    };
    use xds_proto::pb::envoy::config::endpoint::v3::{
        ClusterLoadAssignment, LbEndpoint, LedsClusterLocalityConfig, LocalityLbEndpoints,
        locality_lb_endpoints,
    };

    use super::*;

    pub(super) const LEDS: ResourceType = ResourceType::LbEndpoint;
    const LB_TYPE: &str = "envoy.config.endpoint.v3.LbEndpoint";

    /// A member (or, with `*`, the glob) of the `svc` locality's collection.
    pub(super) fn member(leaf: &str) -> String {
        format!("xdstp://auth.example/{LB_TYPE}/svc/zone-a/{leaf}?env=prod")
    }

    /// A ClusterLoadAssignment whose one locality takes its endpoints from the LEDS glob
    /// collection `glob`, over ADS; `tag` changes its content.
    pub(super) fn leds_cla(cluster: &str, glob: &str, tag: u32) -> ClusterLoadAssignment {
        let ads = ConfigSource {
            config_source_specifier: Some(config_source::ConfigSourceSpecifier::Ads(
                AggregatedConfigSource::default(),
            )),
            ..Default::default()
        };
        ClusterLoadAssignment {
            cluster_name: cluster.into(),
            endpoints: vec![LocalityLbEndpoints {
                priority: tag,
                lb_config: Some(locality_lb_endpoints::LbConfig::LedsClusterLocalityConfig(
                    LedsClusterLocalityConfig {
                        leds_config: Some(ads),
                        leds_collection_name: glob.into(),
                    },
                )),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// The one endpoint of [`cla`] on `port`, as an LEDS resource.
    pub(super) fn endpoint(port: u32) -> LbEndpoint {
        cla("x", port).endpoints.remove(0).lb_endpoints.remove(0)
    }

    /// A snapshot with cluster `svc`, its LEDS assignment, the members `leaves` (with their
    /// ports) and one resource of another collection.
    pub(super) fn leds_snapshot(cla_tag: u32, leaves: &[(&str, u32)]) -> Snapshot {
        let mut b = Snapshot::builder();
        b.add(&cluster("svc", "1")).expect("cluster");
        // A listener whose route changes with the assignment, for the ordering test.
        b.add(&rds_listener("l1", &format!("route-{cla_tag}"))).expect("listener");
        b.add(&leds_cla("svc", &member("*"), cla_tag)).expect("cla");
        for (leaf, port) in leaves {
            b.add_encoded(EncodedResource::named(&member(leaf), &endpoint(*port)).expect("lb"));
        }
        let other = format!("xdstp://auth.example/{LB_TYPE}/other/zone-a/e1?env=prod");
        b.add_encoded(EncodedResource::named(&other, &endpoint(9)).expect("lb"));
        b.build_unchecked()
    }

    /// Subscribes CDS, then EDS, then the LEDS glob the assignment names, as Envoy does, and
    /// returns the stream with everything ACKed and the glob.
    pub(super) async fn subscribe_all(t: &TestServer) -> (Delta, String) {
        let mut ads = Delta::ads(t, "n1").await;
        ads.subscribe(CDS, &[], &[]).await;
        let r = ads.recv_type(CDS).await;
        assert_eq!(delta_names(&r), ["svc"]);
        ads.ack(&r).await;
        ads.subscribe(EDS, &["svc"], &[]).await;
        let r = ads.recv_type(EDS).await;
        ads.ack(&r).await;
        let body = r.resources[0].resource.as_ref().expect("a body");
        let assignment = ClusterLoadAssignment::decode(body.value.as_slice()).expect("cla");
        let glob = match &assignment.endpoints[0].lb_config {
            Some(locality_lb_endpoints::LbConfig::LedsClusterLocalityConfig(c)) => {
                c.leds_collection_name.clone()
            }
            other => panic!("no LEDS config: {other:?}"),
        };
        assert_eq!(glob, member("*"));
        (ads, glob)
    }

    pub(super) fn new_cache(leaves: &[(&str, u32)]) -> SnapshotCache {
        let cache = SnapshotCache::by_node_id();
        cache.set_snapshot("n1", leds_snapshot(0, leaves));
        cache
    }
}

use leds::*;

#[tokio::test]
async fn c02_leds_glob_over_delta_ads_members_added_removed_and_unsubscribed() {
    let cache = new_cache(&[("e1", 81), ("e2", 82)]);
    let t = serve(cache.clone()).await;
    let (mut ads, glob) = subscribe_all(&t).await;
    ads.subscribe(LEDS, &[&glob], &[]).await;
    let r = ads.recv_type(LEDS).await;
    // Exactly the members: not the other collection's endpoint, not the glob itself.
    assert_eq!(delta_names(&r), [member("e1"), member("e2")]);
    assert!(delta_absent(&r).is_empty() && r.resource_errors.is_empty());
    ads.ack(&r).await;

    // A member that appears is sent, alone.
    cache.set_snapshot("n1", leds_snapshot(0, &[("e1", 81), ("e2", 82), ("e3", 83)]));
    let r = ads.recv_type(LEDS).await;
    assert_eq!((delta_names(&r), r.removed_resources.clone()), (vec![member("e3")], vec![]));
    ads.ack(&r).await;
    // A member that goes away is removed.
    cache.set_snapshot("n1", leds_snapshot(0, &[("e2", 82), ("e3", 83)]));
    let r = ads.recv_type(LEDS).await;
    assert!(delta_names(&r).is_empty());
    assert_eq!(r.removed_resources, [member("e1")]);
    ads.ack(&r).await;

    // Unsubscribed: no member is of interest any more.
    ads.subscribe(LEDS, &[], &[&glob]).await;
    ads.expect_quiet().await;
    cache.set_snapshot("n1", leds_snapshot(0, &[("e2", 92), ("e4", 84)]));
    ads.expect_quiet().await;
}

#[tokio::test]
async fn c02_leds_glob_on_sotw_is_refused_per_resource() {
    let cache = new_cache(&[("e1", 81)]);
    let t = serve(cache).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.send(sotw_request(EDS, &["svc".to_owned(), member("*")])).await;
    let r = ads.recv_type(EDS).await;
    assert_eq!(sotw_names(&r), ["svc"]);
    assert_eq!(sotw_errors(&r), [(member("*"), code::INVALID_ARGUMENT)]);
}

/// Rule O1 for LEDS: on ADS, one update that changes a ClusterLoadAssignment, members of the
/// collection it names and a listener sends the assignment first, then the members, then the
/// listener (endpoints before what routes traffic to them); a member that goes away is removed
/// in the same round (it is an endpoint leaving its locality, not a cluster leaving).
#[tokio::test]
async fn o01_leds_members_follow_the_assignment_that_names_their_collection() {
    let cache = new_cache(&[("e1", 81), ("e2", 82)]);
    let t = serve(cache.clone()).await;
    let (mut ads, glob) = subscribe_all(&t).await;
    ads.subscribe(LEDS, &[&glob], &[]).await;
    let r = ads.recv_type(LEDS).await;
    ads.ack(&r).await;
    ads.subscribe(LDS, &[], &[]).await;
    let r = ads.recv_type(LDS).await;
    ads.ack(&r).await;

    cache.set_snapshot("n1", leds_snapshot(1, &[("e1", 91), ("e3", 83)]));
    let mut order = Vec::new();
    for _ in 0..3 {
        let r = ads.recv().await;
        ads.ack(&r).await;
        order.push(r.type_url.clone());
        if r.type_url == url(LEDS) {
            assert_eq!(delta_names(&r), [member("e1"), member("e3")]);
            assert_eq!(r.removed_resources, [member("e2")]);
        }
    }
    assert_eq!(order, [url(EDS), url(LEDS), url(LDS)], "assignment, members, listener");
}

/// Rule C2 through a `LinearCache` behind a `MuxCache`: 10,000 members in one collection, and a
/// change of one of them sends exactly that one.
#[tokio::test]
async fn c02_leds_from_a_linear_cache_one_member_of_ten_thousand_changes() {
    use xds_proto::EncodedResource;
    let snapshots = SnapshotCache::by_node_id();
    let mut b = xds_cache::Snapshot::builder();
    b.add(&cluster("svc", "1")).expect("cluster");
    b.add(&leds_cla("svc", &member("*"), 0)).expect("cla");
    snapshots.set_snapshot("n1", b.build_unchecked());
    let members = LinearCache::new(LEDS);
    for i in 0..10_000u32 {
        let r = EncodedResource::named(&member(&format!("e{i:05}")), &endpoint(1000 + i % 50_000));
        members.upsert_encoded(r.expect("encode")).expect("upsert");
    }
    let other = "xdstp://auth.example/envoy.config.endpoint.v3.LbEndpoint/other/zone-a/e1?env=prod";
    members
        .upsert_encoded(EncodedResource::named(other, &endpoint(7)).expect("lb"))
        .expect("upsert");
    let mux = xds_cache::MuxCache::new().route(LEDS, members.clone()).fallback(snapshots);
    let t = serve(mux).await;
    let (mut ads, glob) = subscribe_all(&t).await;
    ads.subscribe(LEDS, &[&glob], &[]).await;
    let r = ads.recv_type(LEDS).await;
    assert_eq!(r.resources.len(), 10_000);
    assert!(r.resources.iter().all(|x| x.name != other));
    ads.ack(&r).await;
    let changed = member("e04321");
    members
        .upsert_encoded(EncodedResource::named(&changed, &endpoint(9)).expect("lb"))
        .expect("upsert");
    let r = ads.recv_type(LEDS).await;
    assert_eq!(delta_names(&r), std::slice::from_ref(&changed));
    ads.ack(&r).await;
    assert!(members.delete(&changed));
    let r = ads.recv_type(LEDS).await;
    assert_eq!(r.removed_resources, [changed]);
}

/// A `DeltaLocalityEndpoints` stream (the per-type LEDS service) for `node_id`.
async fn delta_leds(t: &TestServer, node_id: &str) -> Delta {
    use xds_proto::pb::envoy::service::endpoint::v3::locality_endpoint_discovery_service_client::LocalityEndpointDiscoveryServiceClient;
    let mut client = LocalityEndpointDiscoveryServiceClient::new(t.channel().await);
    Delta::open(Some(node(node_id)), |r| async move { client.delta_locality_endpoints(r).await })
        .await
        .expect("open DeltaLocalityEndpoints")
}

/// A request of the per-type LEDS stream: no type URL, it is implied by the service (rule S3).
fn leds_request(subscribe: &[&str], unsubscribe: &[&str]) -> DeltaDiscoveryRequest {
    DeltaDiscoveryRequest {
        resource_names_subscribe: names(subscribe),
        resource_names_unsubscribe: names(unsubscribe),
        ..Default::default()
    }
}

/// Rule C2 on the per-type LEDS service (`LocalityEndpointDiscoveryService.DeltaLocalityEndpoints`,
/// how an Envoy whose `leds_config` is not ADS asks): exactly the members, then only what
/// changed, removals, a member named both ways kept when the glob goes, and a glob of an empty
/// collection answered at once.
#[tokio::test]
async fn c02_leds_glob_on_the_per_type_delta_service() {
    let cache = new_cache(&[("e1", 81), ("e2", 82)]);
    let t = serve(cache.clone()).await;
    let mut leds = delta_leds(&t, "n1").await;
    leds.send(leds_request(&[&member("*")], &[])).await;
    let r = leds.recv_type(LEDS).await;
    // Exactly the members: not the other collection's endpoint, not the glob itself.
    assert_eq!(delta_names(&r), [member("e1"), member("e2")]);
    assert!(r.removed_resources.is_empty() && r.resource_errors.is_empty());
    let body = r.resources[0].resource.as_ref().expect("a body");
    assert_eq!(body.type_url, url(LEDS));
    let got = <xds_proto::pb::envoy::config::endpoint::v3::LbEndpoint as prost::Message>::decode(
        body.value.as_slice(),
    )
    .expect("an LbEndpoint");
    assert_eq!(got, endpoint(81));
    leds.ack(&r).await;
    leds.expect_quiet().await;

    // One member changes: only it is sent, with a new version.
    let before = r.resources[1].version.clone();
    cache.set_snapshot("n1", leds_snapshot(0, &[("e1", 81), ("e2", 92)]));
    let r = leds.recv_type(LEDS).await;
    assert_eq!((delta_names(&r), r.removed_resources.clone()), (vec![member("e2")], vec![]));
    assert_ne!(r.resources[0].version, before);
    leds.ack(&r).await;
    // A change outside the collection (the other collection's endpoint, the assignment) is
    // not sent on this stream.
    let mut b = xds_cache::Snapshot::builder();
    b.add(&cluster("svc", "1")).expect("cluster");
    b.add(&leds_cla("svc", &member("*"), 7)).expect("cla");
    for (leaf, port) in [("e1", 81), ("e2", 92)] {
        b.add_encoded(
            xds_proto::EncodedResource::named(&member(leaf), &endpoint(port)).expect("lb"),
        );
    }
    let other = "xdstp://auth.example/envoy.config.endpoint.v3.LbEndpoint/other/zone-a/e1?env=prod";
    b.add_encoded(xds_proto::EncodedResource::named(other, &endpoint(10)).expect("lb"));
    cache.set_snapshot("n1", b.build_unchecked());
    leds.expect_quiet().await;

    // A member leaves, another appears: one response with both.
    cache.set_snapshot("n1", leds_snapshot(0, &[("e2", 92), ("e3", 83)]));
    let r = leds.recv_type(LEDS).await;
    assert_eq!(delta_names(&r), [member("e3")]);
    assert_eq!(r.removed_resources, [member("e1")]);
    leds.ack(&r).await;

    // `e3` also named: unsubscribing the glob keeps it alone (rule C2); a change of `e2` is
    // no longer of interest, a change of `e3` is.
    leds.send(leds_request(&[&member("e3")], &[])).await;
    let r = leds.recv_type(LEDS).await;
    assert_eq!(delta_names(&r), [member("e3")], "rule D2: a subscribed name is resent");
    leds.ack(&r).await;
    leds.send(leds_request(&[], &[&member("*")])).await;
    leds.expect_quiet().await;
    cache.set_snapshot("n1", leds_snapshot(0, &[("e2", 82), ("e3", 93), ("e4", 84)]));
    let r = leds.recv_type(LEDS).await;
    assert_eq!((delta_names(&r), r.removed_resources.clone()), (vec![member("e3")], vec![]));
    leds.ack(&r).await;

    // A glob whose collection has no member is answered at once, with nothing (rule D6 for a
    // collection): the client need not wait for its timeout. A member that appears is sent.
    let empty = member("*").replace("/zone-a/", "/zone-b/");
    leds.send(leds_request(&[&empty], &[])).await;
    let r = leds.recv_type(LEDS).await;
    assert!(r.resources.is_empty() && r.removed_resources.is_empty(), "{r:?}");
    leds.ack(&r).await;
    let late = empty.replace("/*", "/late");
    let mut b = xds_cache::Snapshot::builder();
    b.add(&cluster("svc", "1")).expect("cluster");
    b.add(&leds_cla("svc", &member("*"), 0)).expect("cla");
    for (leaf, port) in [("e2", 82), ("e3", 93), ("e4", 84)] {
        b.add_encoded(
            xds_proto::EncodedResource::named(&member(leaf), &endpoint(port)).expect("lb"),
        );
    }
    b.add_encoded(xds_proto::EncodedResource::named(&late, &endpoint(85)).expect("lb"));
    cache.set_snapshot("n1", b.build_unchecked());
    let r = leds.recv_type(LEDS).await;
    assert_eq!(delta_names(&r), [late]);
}

/// Rule C2 on the per-type LEDS service served by a `LinearCache` of members alone (an LEDS
/// server apart from the one serving clusters): a reconnecting client declares the members it
/// holds and gets only what differs (rule D7 through the glob), and a glob of another type on
/// this stream is refused for itself while the rest is served (rule C1).
#[tokio::test]
async fn c02_leds_per_type_service_over_a_linear_cache_reconnects_and_refuses_other_types() {
    use xds_proto::EncodedResource;
    let members = LinearCache::new(LEDS);
    for (leaf, port) in [("a", 1), ("b", 2), ("new", 3)] {
        let r = EncodedResource::named(&member(leaf), &endpoint(port)).expect("encode");
        members.upsert_encoded(r).expect("upsert");
    }
    let t = serve(members.clone()).await;
    // The versions the server gives today, as a client that held `a` and `b` would have them.
    let mut first = delta_leds(&t, "n1").await;
    first.send(leds_request(&[&member("*")], &[])).await;
    let r = first.recv_type(LEDS).await;
    let versions: HashMap<String, String> =
        r.resources.iter().map(|x| (x.name.clone(), x.version.clone())).collect();
    drop(first);

    let b2 = EncodedResource::named(&member("b"), &endpoint(22)).expect("encode");
    members.upsert_encoded(b2).expect("upsert");
    let mut leds = delta_leds(&t, "n1").await;
    let mut req = leds_request(&[&member("*"), &xc("svc/*")], &[]);
    req.initial_resource_versions = [
        (member("a"), versions[&member("a")].clone()),
        (member("b"), versions[&member("b")].clone()),
        (member("gone"), "1".to_owned()),
    ]
    .into_iter()
    .collect();
    leds.send(req).await;
    let r = leds.recv_type(LEDS).await;
    assert_eq!(delta_names(&r), [member("b"), member("new")], "a is held at its version");
    assert_eq!(r.removed_resources, [member("gone")]);
    let refused: Vec<_> = delta_errors(&r).into_iter().map(|(n, _)| n).collect();
    assert_eq!(refused, [xc("svc/*")], "a Cluster glob on the LEDS stream is refused");
    leds.ack(&r).await;
    leds.expect_quiet().await;
}

/// Rule C2, "glob collections are delta-only", for LEDS: the LEDS service has no SotW method
/// (`UNIMPLEMENTED`, as gRPC answers an unknown method), a SotW ADS stream asking for
/// `LbEndpoint` is refused naming the type, and a glob over SotW of another type is refused
/// per resource while the stream goes on (see `c02_leds_glob_on_sotw_is_refused_per_resource`).
#[tokio::test]
async fn c02_leds_is_not_offered_over_sotw() {
    let t = serve(new_cache(&[("e1", 81)])).await;
    let mut grpc = tonic::client::Grpc::new(t.channel().await);
    grpc.ready().await.expect("ready");
    let path =
        "/envoy.service.endpoint.v3.LocalityEndpointDiscoveryService/StreamLocalityEndpoints";
    let request = DiscoveryRequest {
        node: Some(node("n1")),
        resource_names: vec![member("*")],
        ..Default::default()
    };
    let codec = tonic_prost::ProstCodec::<DiscoveryRequest, DiscoveryResponse>::default();
    let outcome = grpc
        .streaming(
            tonic::Request::new(tokio_stream::iter([request])),
            http::uri::PathAndQuery::from_static(path),
            codec,
        )
        .await;
    let status = match outcome {
        Err(status) => status,
        Ok(response) => {
            let mut body = response.into_inner();
            match body.message().await {
                Err(status) => status,
                Ok(got) => panic!("a SotW LEDS method answered: {got:?}"),
            }
        }
    };
    assert_eq!(status.code(), tonic::Code::Unimplemented, "{status:?}");

    let mut ads = Sotw::ads(&t, "n1").await;
    ads.send(sotw_request(LEDS, &[member("*")])).await;
    assert_status(&ads.recv_err().await, tonic::Code::Unimplemented, &[LEDS.type_url()]);
}

/// Serves node `n1` everything but the resources named `private-*`.
struct NoPrivate;

impl xds_server::Authorizer for NoPrivate {
    fn authorize(&self, _: &xds_server::authz::Request<'_>) -> Result<(), xds_server::Refusal> {
        Ok(())
    }

    fn authorize_resource(
        &self,
        request: &xds_server::authz::Request<'_>,
        name: &str,
    ) -> Result<(), xds_server::Refusal> {
        match request.node().map(|n| n.id.as_str()) {
            Some("n1") if name.starts_with("private-") => {
                Err(xds_server::Refusal(format!("{name} is not for n1")))
            }
            _ => Ok(()),
        }
    }
}

fn as_strs(names: &[String]) -> Vec<&str> {
    names.iter().map(String::as_str).collect()
}

/// A joining proxy's large subscription is recognised as the set another proxy's subscription
/// holds, without its names being decoded; the policy is still asked about each name for this
/// node: n2 gets all 100 clusters, n1, listing the same names in another order, is refused the
/// private one, and a third node listing them in a third order gets all 100 again; delta and
/// SotW alike.
#[tokio::test]
async fn c04_a_large_subscription_taken_as_another_streams_set_is_authorized_for_its_own_node() {
    let cache = SnapshotCache::by_node_id();
    let mut listed: Vec<String> = (0..99).map(|i| format!("shared-{i:02}")).collect();
    listed.push("private-b".into());
    let snapshot = || {
        let mut b = xds_cache::Snapshot::builder();
        for name in &listed {
            b.add(&cluster(name, "1")).expect("encode");
        }
        b.build_unchecked()
    };
    for n in ["n1", "n2", "n3"] {
        cache.set_snapshot(n, snapshot());
    }
    let t = start(XdsServer::builder(cache.clone()).authorizer(NoPrivate).build()).await;

    let mut n2 = Delta::ads(&t, "n2").await;
    n2.subscribe(CDS, &as_strs(&listed), &[]).await;
    assert_eq!(delta_names(&n2.recv_type(CDS).await).len(), 100);
    let mut reversed = listed.clone();
    reversed.reverse();
    assert!(
        xds_core::NameSet::find(&xds_core::NamesDigest::of(&reversed)).is_some(),
        "n2's subscription is a set another stream can be given"
    );

    let mut n1 = Delta::ads(&t, "n1").await;
    n1.subscribe(CDS, &as_strs(&reversed), &[]).await;
    let r = n1.recv_type(CDS).await;
    assert_eq!(delta_names(&r).len(), 99);
    assert!(!delta_names(&r).contains(&"private-b".to_owned()));
    assert_eq!(delta_errors(&r), [("private-b".to_owned(), code::PERMISSION_DENIED)]);

    let mut rotated = listed.clone();
    rotated.rotate_left(37);
    let mut n3 = Delta::ads(&t, "n3").await;
    n3.subscribe(CDS, &as_strs(&rotated), &[]).await;
    let r = n3.recv_type(CDS).await;
    assert_eq!(delta_names(&r), {
        let mut sorted = listed.clone();
        sorted.sort();
        sorted
    });
    assert!(delta_errors(&r).is_empty());

    // SotW alike: a first list taken as the set, the policy asked for this node, and the ACK
    // that repeats the list changes nothing.
    let mut sotw = Sotw::ads(&t, "n1").await;
    sotw.subscribe(CDS, &as_strs(&rotated), None).await;
    let r = sotw.recv_type(CDS).await;
    assert_eq!(sotw_names(&r).len(), 99);
    assert_eq!(sotw_errors(&r), [("private-b".to_owned(), code::PERMISSION_DENIED)]);
    let mut sotw = Sotw::ads(&t, "n3").await;
    sotw.subscribe(CDS, &as_strs(&reversed), None).await;
    let r = sotw.recv_type(CDS).await;
    assert_eq!(sotw_names(&r).len(), 100);
    assert!(sotw_errors(&r).is_empty());
    sotw.ack(&r).await;
    sotw.expect_quiet().await;
}

#[tokio::test]
async fn c04_a_resource_the_authorizer_refuses_is_permission_denied_on_every_way_in() {
    let cache = SnapshotCache::by_node_id();
    let all =
        snapshot![cluster("a", "1"), cluster("private-b", "1"), cla("a", 1), cla("private-b", 1)];
    cache.set_snapshot("n1", all.clone());
    cache.set_snapshot("n2", all);
    let t = start(XdsServer::builder(cache.clone()).authorizer(NoPrivate).build()).await;

    // SotW: the refused name is answered with PERMISSION_DENIED, the others are served, and
    // the stream goes on; repeating the list (every ACK) does not repeat the error.
    let mut sotw = Sotw::ads(&t, "n1").await;
    sotw.subscribe(EDS, &["a", "private-b"], None).await;
    let r = sotw.recv_type(EDS).await;
    assert_eq!(sotw_names(&r), ["a"]);
    assert_eq!(sotw_errors(&r), [("private-b".to_owned(), code::PERMISSION_DENIED)]);
    let why = &r.resource_errors[0].error_detail.as_ref().unwrap().message;
    assert!(why.contains("not for n1"), "{why}");
    sotw.ack(&r).await;
    sotw.expect_quiet().await;

    // Delta: the same for a subscription.
    let mut delta = Delta::ads(&t, "n1").await;
    delta.subscribe(CDS, &["a", "private-b"], &[]).await;
    let r = delta.recv_type(CDS).await;
    assert_eq!(delta_names(&r), ["a"]);
    assert_eq!(delta_errors(&r), [("private-b".to_owned(), code::PERMISSION_DENIED)]);

    // A fetch leaves it out.
    let mut cds = t.cds().await;
    let fetched = cds
        .fetch_clusters(DiscoveryRequest {
            node: Some(node("n1")),
            resource_names: names(&["a", "private-b"]),
            ..Default::default()
        })
        .await
        .expect("fetch")
        .into_inner();
    assert_eq!(sotw_names(&fetched), ["a"]);

    // Another node may have it.
    let mut other = Delta::ads(&t, "n2").await;
    other.subscribe(CDS, &["private-b"], &[]).await;
    assert_eq!(delta_names(&other.recv_type(CDS).await), ["private-b"]);
}
