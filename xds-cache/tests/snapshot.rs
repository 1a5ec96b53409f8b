//! `SnapshotCache` read the way server streams read it: watch, signal, read, poll, ACK.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod util;

use std::collections::BTreeMap;

use util::*;
use xds_cache::{CacheError, ConsistencyError, MissingReference, Snapshot, SnapshotCache, Variant};
use xds_core::DeltaResource;
use xds_proto::{Reference, ResourceType};

fn clusters(names_: &[&str]) -> Snapshot {
    let mut b = Snapshot::builder();
    for n in names_ {
        b.add(&cluster(n, "1")).unwrap();
    }
    b.build_unchecked()
}

// ---- rule O3 ----

#[test]
fn o3_missing_endpoints_and_routes_are_listed_by_name() {
    let mut b = Snapshot::builder();
    b.add(&eds_cluster("a", "")).unwrap(); // asks EDS for "a"
    b.add(&eds_cluster("b", "b-svc")).unwrap(); // asks EDS for its service name
    b.add(&cluster("static", "1")).unwrap(); // names nothing
    b.add(&cla("b", 0)).unwrap(); // not what "b" asks for
    b.add(&rds_listener("l", "r1")).unwrap();
    b.add(&route_config("r2")).unwrap();
    let expected = ConsistencyError {
        missing: vec![
            MissingReference {
                from_type: ResourceType::Cluster,
                from: "a".into(),
                missing: Reference::new(ResourceType::ClusterLoadAssignment, "a"),
            },
            MissingReference {
                from_type: ResourceType::Cluster,
                from: "b".into(),
                missing: Reference::new(ResourceType::ClusterLoadAssignment, "b-svc"),
            },
            MissingReference {
                from_type: ResourceType::Listener,
                from: "l".into(),
                missing: Reference::new(ResourceType::RouteConfiguration, "r1"),
            },
        ],
    };
    assert_eq!(b.build_unchecked().check_consistency(), Err(expected.clone()));
    assert_eq!(b.build().unwrap_err(), expected, "build refuses");
    #[allow(deprecated)]
    let alias = b.build_consistent();
    assert_eq!(alias.unwrap_err(), expected, "the deprecated build_consistent is build");
    let message = expected.to_string();
    for name in ["\"a\"", "\"b-svc\"", "\"r1\""] {
        assert!(message.contains(name), "{message} names {name}");
    }

    b.add(&cla("a", 0)).unwrap().add(&cla("b-svc", 0)).unwrap().add(&route_config("r1")).unwrap();
    assert_eq!(b.build_unchecked().check_consistency(), Ok(()));
    assert_eq!(b.build().unwrap().len(), 9);
}

/// Rule O3 for LEDS (rule C2): an assignment whose locality names a glob collection with no
/// member in the snapshot is reported with the collection's name; members of another
/// collection, with other context parameters or one segment deeper do not count; one member,
/// whatever the order of the parameters in either name, does.
#[test]
fn o03_an_assignment_naming_an_empty_leds_collection_is_reported() {
    use xds_proto::EncodedResource;
    use xds_proto::pb::envoy::config::endpoint::v3::{
        LbEndpoint, LedsClusterLocalityConfig, LocalityLbEndpoints, locality_lb_endpoints::LbConfig,
    };
    let lb = |rest: &str| format!("xdstp://auth/envoy.config.endpoint.v3.LbEndpoint/{rest}");
    let mut assignment = cla("svc", 0);
    assignment.endpoints.push(LocalityLbEndpoints {
        lb_config: Some(LbConfig::LedsClusterLocalityConfig(LedsClusterLocalityConfig {
            leds_config: None,
            leds_collection_name: lb("svc/zone-a/*?env=prod&b=1"),
        })),
        ..Default::default()
    });
    let member = |name: &str| EncodedResource::named(name, &LbEndpoint::default()).unwrap();
    let mut b = Snapshot::builder();
    b.add(&eds_cluster("svc", "")).unwrap();
    b.add(&assignment).unwrap();
    // Not members of the collection.
    b.add_encoded(member(&lb("svc/zone-b/e1?b=1&env=prod")));
    b.add_encoded(member(&lb("svc/zone-a/e1?env=prod")));
    b.add_encoded(member(&lb("svc/zone-a/deeper/e1?b=1&env=prod")));
    let collection = lb("svc/zone-a/*?b=1&env=prod");
    let expected = ConsistencyError {
        missing: vec![MissingReference {
            from_type: ResourceType::ClusterLoadAssignment,
            from: "svc".into(),
            missing: Reference::new(ResourceType::LbEndpoint, collection.clone()),
        }],
    };
    assert_eq!(b.build_unchecked().check_consistency(), Err(expected.clone()));
    assert!(!b.build_unchecked().resolves(&expected.missing[0].missing));
    assert_eq!(
        expected.to_string(),
        format!(
            "inconsistent snapshot: endpoint \"svc\" references the collection lb_endpoint \"{collection}\", which has no member"
        )
    );
    // One member, its parameters in another order than the assignment's.
    b.add_encoded(member(&lb("svc/zone-a/e1?env=prod&b=1")));
    assert_eq!(b.build_unchecked().check_consistency(), Ok(()));
    assert!(b.resolves(&expected.missing[0].missing));
}

// ---- rule S11 ----

#[test]
fn s11_wildcard_cds_gets_every_cluster_and_a_removal_omits_it() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n", clusters(&["a", "b", "c"]));
    let mut cds = SotwClient::open(&cache, &node("n"), CDS);
    let _ = cds.subscribe(&[], "");
    assert_eq!(sotw_names(&cds.expect()), names(&["a", "b", "c"]));

    // One cluster changes: the response still carries all of them.
    let next = cache
        .snapshot("n")
        .unwrap()
        .to_builder()
        .add(&cluster("a", "2"))
        .unwrap()
        .build_unchecked();
    cache.set_snapshot("n", next);
    assert!(take_raised(&cds.signal));
    let r = cds.expect();
    assert_eq!(sotw_names(&r), names(&["a", "b", "c"]));
    assert_eq!(r.resources[0].version(), enc(&cluster("a", "2")).version());

    // One is removed: its absence is the removal.
    let next = cache.snapshot("n").unwrap().to_builder().remove(&url(CDS), "b").build_unchecked();
    cache.set_snapshot("n", next);
    assert!(take_raised(&cds.signal));
    assert_eq!(sotw_names(&cds.expect()), names(&["a", "c"]));
    assert!(cds.poll().is_none(), "rule S6: nothing more is owed");
}

// ---- rule S13 ----

#[test]
fn s13_a_name_requested_before_it_exists_is_sent_when_it_appears() {
    let cache = SnapshotCache::by_node_id();
    let mut b = Snapshot::builder();
    b.add(&cla("a", 0)).unwrap();
    cache.set_snapshot("n", b.build_unchecked());
    let mut eds = SotwClient::open(&cache, &node("n"), EDS);
    let _ = eds.subscribe(&["a", "later"], "");
    assert_eq!(sotw_names(&eds.expect()), names(&["a"]));
    assert!(eds.poll().is_none());

    b.add(&cla("later", 0)).unwrap();
    cache.set_snapshot("n", b.build_unchecked());
    assert!(take_raised(&eds.signal));
    assert_eq!(sotw_names(&eds.expect()), names(&["later"]));

    // The same for a named CDS subscription (full state: with what it already had).
    let mut b = Snapshot::builder();
    b.add(&cluster("x", "1")).unwrap();
    cache.set_snapshot("m", b.build_unchecked());
    let mut cds = SotwClient::open(&cache, &node("m"), CDS);
    let _ = cds.subscribe(&["x", "y"], "");
    assert_eq!(sotw_names(&cds.expect()), names(&["x"]));
    b.add(&cluster("y", "1")).unwrap();
    cache.set_snapshot("m", b.build_unchecked());
    assert!(take_raised(&cds.signal));
    assert_eq!(sotw_names(&cds.expect()), names(&["x", "y"]));
}

// ---- rule S15 ----

#[test]
fn s15_reconnect_at_the_current_version_gets_nothing_a_stale_one_everything() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n", clusters(&["a", "b"]));
    let version = {
        let mut cds = SotwClient::open(&cache, &node("n"), CDS);
        let _ = cds.subscribe(&[], "");
        cds.expect().version_info
    };
    assert_eq!(cache.status("n").unwrap().versions[url(CDS).as_str()], version);

    let mut again = SotwClient::open(&cache, &node("n"), CDS);
    let _ = again.subscribe(&[], &version);
    assert!(again.poll().is_none(), "the client holds this version");
    // It still hears of later changes.
    let next = cache
        .snapshot("n")
        .unwrap()
        .to_builder()
        .add(&cluster("c", "1"))
        .unwrap()
        .build_unchecked();
    cache.set_snapshot("n", next);
    assert!(take_raised(&again.signal));
    assert_eq!(sotw_names(&again.expect()), names(&["a", "b", "c"]));

    let mut stale = SotwClient::open(&cache, &node("n"), CDS);
    let _ = stale.subscribe(&[], &version);
    assert_eq!(sotw_names(&stale.expect()), names(&["a", "b", "c"]));
}

// ---- rule S16 ----

#[test]
fn s16_same_content_gives_same_versions_whatever_the_order_or_history() {
    let resources = [cluster("a", "1"), cluster("b", "1"), cluster("c", "1")];
    let (one, two) = (SnapshotCache::by_node_id(), SnapshotCache::by_node_id());
    let mut forward = Snapshot::builder();
    for r in &resources {
        forward.add(r).unwrap();
    }
    forward.add(&cla("e", 1)).unwrap();
    let mut backward = Snapshot::builder();
    backward.add(&cla("e", 1)).unwrap();
    for r in resources.iter().rev() {
        backward.add(r).unwrap();
    }
    // The second cache gets there through another snapshot first.
    two.set_snapshot("n", clusters(&["a", "z"]));
    one.set_snapshot("n", forward.build_unchecked());
    two.set_snapshot("n", backward.build_unchecked());

    let (s1, s2) = (one.status("n").unwrap(), two.status("n").unwrap());
    assert_eq!(s1.versions, s2.versions);
    assert_eq!(s1.versions.len(), 2);
    for (t, name) in [(CDS, "a"), (CDS, "b"), (CDS, "c"), (EDS, "e")] {
        let (r1, r2) = (one.get("n", &url(t), name).unwrap(), two.get("n", &url(t), name).unwrap());
        assert_eq!(r1.version(), r2.version());
    }
    // What streams are sent agrees too.
    let mut c1 = SotwClient::open(&one, &node("n"), CDS);
    let mut c2 = SotwClient::open(&two, &node("n"), CDS);
    let _ = (c1.subscribe(&[], ""), c2.subscribe(&[], ""));
    assert_eq!(c1.expect().version_info, c2.expect().version_info);

    two.set_snapshot("n", forward.add(&cluster("c", "2")).unwrap().build_unchecked());
    assert_ne!(one.status("n").unwrap().versions, two.status("n").unwrap().versions);
}

// ---- rules D5, D6, D7 ----

#[test]
fn d05_a_deleted_resource_is_in_removed_resources() {
    let cache = SnapshotCache::by_node_id();
    let mut b = Snapshot::builder();
    b.add(&cluster("a", "1")).unwrap().add(&cluster("b", "1")).unwrap();
    b.add(&cla("x", 0)).unwrap().add(&cla("y", 0)).unwrap();
    cache.set_snapshot("n", b.build_unchecked());
    let mut cds = DeltaClient::open(&cache, &node("n"), CDS);
    let _ = cds.request(&[], &[]);
    assert_eq!(delta_names(&cds.expect()), names(&["a", "b"]));
    let mut eds = DeltaClient::open(&cache, &node("n"), EDS);
    let _ = eds.request(&["x", "y"], &[]);
    assert_eq!(delta_names(&eds.expect()), names(&["x", "y"]));

    b.remove(&url(CDS), "b").remove(&url(EDS), "y");
    cache.set_snapshot("n", b.build_unchecked());
    assert!(take_raised(&cds.signal) && take_raised(&eds.signal));
    let r = cds.expect();
    assert!(r.resources.is_empty());
    assert_eq!(r.removed_resources, names(&["b"]));
    let r = eds.expect();
    assert!(r.resources.is_empty());
    assert_eq!(r.removed_resources, names(&["y"]));

    // Still subscribed: it comes back when it exists again (rule D6's second half).
    b.add(&cla("y", 1)).unwrap();
    cache.set_snapshot("n", b.build_unchecked());
    assert_eq!(
        delta_items(&eds.expect()),
        vec![("y".into(), Some(enc(&cla("y", 1)).version().into()))]
    );
}

#[test]
fn d06_a_subscribed_name_that_does_not_exist_is_answered_at_once() {
    let cache = SnapshotCache::by_node_id();
    let mut b = Snapshot::builder();
    b.add(&cla("a", 0)).unwrap();
    cache.set_snapshot("n", b.build_unchecked());
    let mut eds = DeltaClient::open(&cache, &node("n"), EDS);
    let _ = eds.request(&["a", "nope"], &[]);
    let r = eds.expect();
    assert_eq!(
        delta_items(&r),
        vec![("a".into(), Some(enc(&cla("a", 0)).version().into())), ("nope".into(), None)]
    );
    assert!(matches!(&r.resources[1], DeltaResource::Absent { aliases, .. } if aliases.is_empty()));
    assert!(eds.poll().is_none(), "told once");

    b.add(&cla("nope", 0)).unwrap();
    cache.set_snapshot("n", b.build_unchecked());
    assert!(take_raised(&eds.signal));
    assert_eq!(delta_names(&eds.expect()), names(&["nope"]));
}

#[test]
fn d07_a_reconnecting_client_gets_only_what_differs_and_removals() {
    let cache = SnapshotCache::by_node_id();
    let mut b = Snapshot::builder();
    b.add(&cluster("same", "1")).unwrap().add(&cluster("changed", "2")).unwrap();
    b.add(&cluster("new", "1")).unwrap();
    cache.set_snapshot("n", b.build_unchecked());
    let mut cds = DeltaClient::open(&cache, &node("n"), CDS);
    let held_same = enc(&cluster("same", "1"));
    let held_changed = enc(&cluster("changed", "1"));
    let _ = cds.reconnect(
        &[],
        &[("same", held_same.version()), ("changed", held_changed.version()), ("gone", "0123")],
    );
    let r = cds.expect();
    assert_eq!(delta_names(&r), names(&["changed", "new"]));
    assert_eq!(r.removed_resources, names(&["gone"]));
    assert!(cds.poll().is_none());
}

// ---- readiness and signals ----

#[test]
fn a_group_without_snapshot_serves_nothing_until_set_snapshot_signals_it() {
    let cache = SnapshotCache::by_node_id();
    let mut cds = SotwClient::open(&cache, &node("n"), CDS);
    let mut lds = SotwClient::open(&cache, &node("n"), LDS);
    let _ = cds.subscribe(&[], "");
    let _ = lds.subscribe(&[], "");
    assert!(cds.poll().is_none(), "not told that nothing exists");
    assert!(lds.poll().is_none());
    assert!(!take_raised(&cds.signal));

    // The first snapshot signals every type of the group, even one it does not hold.
    cache.set_snapshot("n", clusters(&["a"]));
    assert!(take_raised(&cds.signal) && take_raised(&lds.signal));
    assert_eq!(sotw_names(&cds.expect()), names(&["a"]));
    let r = lds.expect();
    assert!(r.resources.is_empty(), "now an empty full state means: no listeners");
}

#[test]
fn set_snapshot_signals_only_the_changed_type_and_reencodes_nothing_else() {
    let cache = SnapshotCache::by_node_id();
    let mut b = Snapshot::builder();
    for i in 0..200 {
        b.add(&cluster(&format!("c{i:03}"), "1")).unwrap();
        b.add(&listener(&format!("l{i:03}"), "1")).unwrap();
    }
    cache.set_snapshot("n", b.build_unchecked());
    let mut cds = DeltaClient::open(&cache, &node("n"), CDS);
    let lds = SotwClient::open(&cache, &node("n"), LDS);
    let _ = cds.request(&[], &[]);
    assert_eq!(cds.expect().resources.len(), 200);
    let before: Vec<_> = (0..200)
        .map(|i| cache.get("n", &url(CDS), &format!("c{i:03}")).unwrap())
        .chain((0..200).map(|i| cache.get("n", &url(LDS), &format!("l{i:03}")).unwrap()))
        .collect();

    let mut next = cache.snapshot("n").unwrap().to_builder();
    next.add(&cluster("c042", "2")).unwrap();
    assert_eq!(cache.set_snapshot("n", next.build_unchecked()), 1);
    assert!(take_raised(&cds.signal));
    assert!(!take_raised(&lds.signal), "no listener changed");
    let r = cds.expect();
    assert_eq!(delta_names(&r), names(&["c042"]));
    assert!(r.removed_resources.is_empty());

    let after: Vec<_> = (0..200)
        .map(|i| cache.get("n", &url(CDS), &format!("c{i:03}")).unwrap())
        .chain((0..200).map(|i| cache.get("n", &url(LDS), &format!("l{i:03}")).unwrap()))
        .collect();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(b.ptr_eq(a), i != 42, "{}", a.name());
    }

    // The same snapshot again changes nothing and signals nobody.
    assert_eq!(cache.set_snapshot("n", cache.snapshot("n").unwrap()), 0);
    assert!(!take_raised(&cds.signal));
}

#[test]
fn clear_snapshot_stops_serving() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n", clusters(&["a"]));
    let mut cds = SotwClient::open(&cache, &node("n"), CDS);
    let _ = cds.subscribe(&[], "");
    assert_eq!(sotw_names(&cds.expect()), names(&["a"]));

    cache.clear_snapshot("n");
    assert!(cache.snapshot("n").is_none());
    assert!(!cache.status("n").unwrap().has_snapshot);
    assert!(cds.poll().is_none(), "the client keeps what it has");
    let mut late = SotwClient::open(&cache, &node("n"), CDS);
    let _ = late.subscribe(&[], "");
    assert!(late.poll().is_none());

    cache.set_snapshot("n", clusters(&["b"]));
    assert!(take_raised(&cds.signal) && take_raised(&late.signal));
    assert_eq!(sotw_names(&cds.expect()), names(&["b"]));
    assert_eq!(sotw_names(&late.expect()), names(&["b"]));

    // Without streams, a cleared group is forgotten.
    drop((cds, late));
    cache.clear_snapshot("n");
    assert!(cache.groups().is_empty());
}

#[test]
fn nodes_of_one_group_see_the_same_snapshot() {
    let cache = SnapshotCache::new(|n| n.cluster.clone());
    assert_eq!(cache.group_of(&node_in("envoy-1", "web")), "web");
    let mut one = SotwClient::open(&cache, &node_in("envoy-1", "web"), CDS);
    let mut two = SotwClient::open(&cache, &node_in("envoy-2", "web"), CDS);
    let mut other = SotwClient::open(&cache, &node_in("envoy-3", "db"), CDS);
    for c in [&mut one, &mut two, &mut other] {
        let _ = c.subscribe(&[], "");
    }
    cache.set_snapshot("web", clusters(&["a", "b"]));
    assert!(take_raised(&one.signal) && take_raised(&two.signal));
    assert!(!take_raised(&other.signal));
    let (r1, r2) = (one.expect(), two.expect());
    assert_eq!(sotw_names(&r1), names(&["a", "b"]));
    assert_eq!(r1.version_info, r2.version_info);
    assert_eq!(r1.resources, r2.resources);
    assert!(r1.resources.iter().zip(&r2.resources).all(|(x, y)| x.ptr_eq(y)), "shared, not copied");
    assert!(other.poll().is_none());
    assert_eq!(cache.groups(), names(&["db", "web"]));
}

#[test]
fn dropped_watches_are_counted_out_and_idle_groups_forgotten() {
    let cache = SnapshotCache::by_node_id();
    let a = SotwClient::open(&cache, &node("idle"), CDS);
    let b = SotwClient::open(&cache, &node("idle"), CDS);
    let c = DeltaClient::open(&cache, &node("idle"), LDS);
    let status = cache.status("idle").unwrap();
    assert!(!status.has_snapshot);
    assert_eq!(
        status.watches,
        BTreeMap::from([(url(CDS).to_string(), 2), (url(LDS).to_string(), 1)])
    );
    assert!(status.last_watch.is_some());
    assert_eq!(cache.groups(), names(&["idle"]));
    drop(a);
    assert_eq!(cache.status("idle").unwrap().watches[url(CDS).as_str()], 1);
    drop((b, c));
    assert!(cache.status("idle").is_none(), "no snapshot, no stream: forgotten");
    assert!(cache.groups().is_empty());

    // A group with a snapshot stays, with no watches.
    cache.set_snapshot("kept", clusters(&["a"]));
    let d = SotwClient::open(&cache, &node("kept"), CDS);
    assert_eq!(cache.status("kept").unwrap().watches.values().sum::<usize>(), 1);
    drop(d);
    let status = cache.status("kept").unwrap();
    assert!(status.watches.is_empty());
    assert!(status.has_snapshot);
    assert_eq!(cache.groups(), names(&["kept"]));
}

#[test]
fn s03_vhds_and_leds_over_sotw_are_refused() {
    let cache = SnapshotCache::by_node_id();
    for t in [ResourceType::VirtualHost, ResourceType::LbEndpoint] {
        for variant in [Variant::Sotw, Variant::Fetch] {
            let err = open(&cache, &node("n"), &url(t), variant).err();
            assert_eq!(
                err,
                Some(CacheError::UnsupportedVariant { type_url: url(t).to_string(), variant })
            );
        }
        assert!(open(&cache, &node("n"), &url(t), Variant::Delta).is_ok());
    }
}

#[test]
fn d09_d10_virtual_hosts_are_found_by_alias() {
    let cache = SnapshotCache::by_node_id();
    let mut b = Snapshot::builder();
    b.add(&virtual_host("rc/vh1", &["foo.com", "*.bar.com"])).unwrap();
    b.add(&virtual_host("other/vh", &["nope.com"])).unwrap(); // another route configuration
    cache.set_snapshot("n", b.build_unchecked());
    let mut vhds = DeltaClient::open(&cache, &node("n"), VHDS);
    let _ = vhds.request(&["rc/foo.com", "rc/x.bar.com", "rc/nope.com"], &[]);
    let r = vhds.expect();
    let vh1 = cache.get("n", &url(VHDS), "rc/vh1").unwrap();
    assert_eq!(
        r.resources,
        vec![
            DeltaResource::Absent { name: "rc/nope.com".into(), aliases: names(&["rc/nope.com"]) },
            DeltaResource::Present {
                resource: vh1,
                aliases: names(&["rc/foo.com", "rc/x.bar.com"])
            },
        ]
    );
    assert!(vhds.poll().is_none());

    // A virtual host for the unknown host appears: it is sent, under its name, with the alias.
    b.add(&virtual_host("rc/vh2", &["nope.com"])).unwrap();
    cache.set_snapshot("n", b.build_unchecked());
    assert!(take_raised(&vhds.signal));
    let r = vhds.expect();
    let vh2 = cache.get("n", &url(VHDS), "rc/vh2").unwrap();
    assert_eq!(
        r.resources,
        vec![DeltaResource::Present { resource: vh2, aliases: names(&["rc/nope.com"]) }]
    );
}

/// A snapshot derived with `to_builder` from the one a group serves is applied by the
/// names the builder touched (no walk over the others), with the same result as a full compare:
/// the changed and removed names reach the stream, nothing else, and setting the same snapshot
/// again changes nothing.
#[test]
fn a_derived_snapshot_is_applied_by_its_touched_names() {
    use xds_proto::pb::envoy::config::cluster::v3::Cluster;
    let cache = SnapshotCache::by_node_id();
    let cluster = |name: &str, stat: &str| Cluster {
        name: name.into(),
        alt_stat_name: stat.into(),
        ..Default::default()
    };
    let mut builder = Snapshot::builder();
    for i in 0..100 {
        builder.add(&cluster(&format!("c{i}"), "1")).unwrap();
    }
    let first = builder.build_unchecked();
    assert_eq!(cache.set_snapshot("g", first.clone()), 100);
    assert_eq!(cache.set_snapshot("g", first.clone()), 0, "the same snapshot again");

    let mut next = first.to_builder();
    next.add(&cluster("c1", "2")).unwrap();
    next.add(&cluster("c2", "1")).unwrap(); // the same content: not a change
    next.remove(&xds_proto::TypeUrl::from(ResourceType::Cluster), "c3");
    next.add(&cluster("new", "1")).unwrap();
    let second = next.build_unchecked();
    assert!(!second.is_same(&first));
    assert_eq!(cache.set_snapshot("g", second.clone()), 3);
    let t = xds_proto::TypeUrl::from(ResourceType::Cluster);
    assert!(cache.get("g", &t, "c3").is_none());
    assert!(cache.get("g", &t, "new").is_some());
    assert_eq!(cache.get("g", &t, "c1").unwrap().decode::<Cluster>().unwrap().alt_stat_name, "2");

    // Derived from a snapshot the group no longer serves: compared in full, still exact.
    let mut stale = first.to_builder();
    stale.add(&cluster("c50", "3")).unwrap();
    assert_eq!(
        cache.set_snapshot("g", stale.build_unchecked()),
        4,
        "c1, c3, new back as in first; c50"
    );
    assert!(cache.get("g", &t, "new").is_none());
    assert!(cache.get("g", &t, "c3").is_some());
}

/// Rule O3 on a derived snapshot: `build` checks only what the builder added when its base was
/// checked and nothing was removed, and still refuses a dangling reference the builder made; a
/// removal, or a base built unchecked, makes it check every resource again.
#[test]
fn o3_a_derived_build_checks_what_it_added_and_everything_after_a_removal() {
    let cla_type = xds_proto::TypeUrl::from(ResourceType::ClusterLoadAssignment);
    let mut b = Snapshot::builder();
    b.add(&eds_cluster("a", "")).unwrap().add(&cla("a", 0)).unwrap();
    let checked = b.build().unwrap();

    // An added cluster naming an assignment that is not there: refused.
    let mut next = checked.to_builder();
    next.add(&eds_cluster("b", "")).unwrap();
    let missing = |from: &str, name: &str| MissingReference {
        from_type: ResourceType::Cluster,
        from: from.into(),
        missing: Reference::new(ResourceType::ClusterLoadAssignment, name),
    };
    assert_eq!(next.build().unwrap_err().missing, vec![missing("b", "b")]);
    // With it: accepted, and the result counts as checked for the next derivation.
    next.add(&cla("b", 0)).unwrap();
    let both = next.build().unwrap();
    assert_eq!(both.len(), 4);

    // Removing what an untouched cluster names: found, though the builder touched only "a".
    let mut removal = both.to_builder();
    removal.remove(&cla_type, "a");
    assert_eq!(removal.build().unwrap_err().missing, vec![missing("a", "a")]);

    // A base built unchecked is checked whole: its dangling "c" is found by a derivation that
    // only adds an unrelated assignment.
    let mut loose = Snapshot::builder();
    loose.add(&eds_cluster("c", "")).unwrap();
    let mut derived = loose.build_unchecked().to_builder();
    derived.add(&cla("other", 0)).unwrap();
    assert_eq!(derived.build().unwrap_err().missing, vec![missing("c", "c")]);
}

/// A derived snapshot shares its base's resources, yet neither sees the other's changes: the
/// base keeps what it held, whatever the derivation adds, replaces or removes.
#[test]
fn a_derivation_never_changes_its_base() {
    let t = xds_proto::TypeUrl::from(ResourceType::Cluster);
    let mut b = Snapshot::builder();
    for i in 0..500 {
        b.add(&cluster(&format!("c{i:03}"), "1")).unwrap();
    }
    let base = b.build_unchecked();
    let mut next = base.to_builder();
    next.add(&cluster("c007", "2")).unwrap().add(&cluster("new", "1")).unwrap();
    next.remove(&t, "c100");
    let derived = next.build_unchecked();

    assert_eq!((base.count(&t), derived.count(&t)), (500, 500));
    assert!(base.get(&t, "c100").is_some() && derived.get(&t, "c100").is_none());
    assert!(base.get(&t, "new").is_none() && derived.get(&t, "new").is_some());
    let version = |s: &Snapshot| s.get(&t, "c007").unwrap().version().to_owned();
    assert_ne!(version(&base), version(&derived));
    // Untouched resources are the same encodings, and both iterate in name order.
    assert!(base.get(&t, "c499").unwrap().ptr_eq(derived.get(&t, "c499").unwrap()));
    let names: Vec<&str> = derived.resources(&t).map(|r| r.name()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
}

/// A watch says whether its type's view changed since it last said (`Watch::take_change`), so
/// that a stream woken by a change to one type reads only that one: a snapshot marks the types
/// it changed, not those it shares; clearing the snapshot marks every type without waking the
/// streams; a move to another group marks the watch.
#[test]
fn a_watch_is_marked_by_the_changes_of_its_type_and_group_alone() {
    let cache = SnapshotCache::by_node_id();
    let n = node("envoy-1");
    let (cds, cds_signal) = open(&cache, &n, &url(ResourceType::Cluster), Variant::Delta).unwrap();
    let (eds, _) =
        open(&cache, &n, &url(ResourceType::ClusterLoadAssignment), Variant::Delta).unwrap();
    assert!(cds.take_change() && eds.take_change(), "read nothing yet");
    assert!(!cds.take_change() && !eds.take_change(), "taken");
    let mut b = Snapshot::builder();
    b.add(&cluster("a", "1")).unwrap();
    b.add(&cla("a", 1)).unwrap();
    cache.set_snapshot("envoy-1", b.build_unchecked());
    assert!(cds.take_change() && eds.take_change(), "the first snapshot: every type");
    let mut b = Snapshot::builder();
    b.add(&cluster("a", "2")).unwrap();
    b.add(&cla("a", 1)).unwrap();
    cache.set_snapshot("envoy-1", b.build_unchecked());
    assert_eq!((cds.take_change(), eds.take_change()), (true, false), "the clusters alone");
    cache.set_snapshot("other", clusters(&["x"]));
    assert!(!cds.take_change(), "another group");
    take_raised(&cds_signal);
    cache.clear_snapshot("envoy-1");
    assert!(!take_raised(&cds_signal), "not woken");
    assert!(cds.take_change() && eds.take_change(), "but read at the next look");
}

/// Every type a snapshot changes is marked before a stream can read any of them: a stream that
/// reads the new listeners finds the clusters of the same snapshot marked, and does not skip
/// them (a listener sent, the clusters it needs skipped, would break rule O1's order). A reader
/// reads the listeners' revision, then takes the clusters' mark, and reads the clusters only when
/// marked, as a stream does; each snapshot moves both revisions by one.
#[test]
fn o1_the_types_of_one_snapshot_are_marked_before_any_of_them_is_read() {
    let cache = SnapshotCache::by_node_id();
    let snapshot = |i: usize| {
        let mut b = Snapshot::builder();
        b.add(&cluster("c", &i.to_string())).unwrap();
        b.add(&listener("l", &i.to_string())).unwrap();
        b.build_unchecked()
    };
    cache.set_snapshot("envoy-1", snapshot(0));
    let n = node("envoy-1");
    let (cds, _) = open(&cache, &n, &url(ResourceType::Cluster), Variant::Delta).unwrap();
    let (lds, _) = open(&cache, &n, &url(ResourceType::Listener), Variant::Delta).unwrap();
    let revision = |watch: &dyn xds_cache::Watch| {
        let mut revision = 0;
        watch.read(&mut |view| revision = xds_core::View::revision(view));
        revision
    };
    let (lds_base, cds_base) = (revision(&*lds), revision(&*cds));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let done = done.clone();
        std::thread::spawn(move || {
            let (mut known, mut skipped) = (0, 0);
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                let seen = revision(&*lds) - lds_base;
                if cds.take_change() {
                    known = revision(&*cds) - cds_base;
                } else if seen > known {
                    skipped += 1;
                }
            }
            skipped
        })
    };
    for i in 1..20_000 {
        cache.set_snapshot("envoy-1", snapshot(i));
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    assert_eq!(reader.join().ok(), Some(0), "new listeners seen, their clusters' change unmarked");
}
