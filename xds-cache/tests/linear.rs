//! `LinearCache`: resource-by-resource updates, read by SotW and delta sub-streams.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod util;

use util::*;
use xds_cache::{CacheError, LinearCache, LinearError, Variant};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;

#[test]
fn upsert_delete_set_all_and_get() {
    let cache = LinearCache::of::<Cluster>();
    assert_eq!(*cache.type_url(), url(CDS));
    assert!(cache.is_empty());
    let empty_version = cache.version();

    assert_eq!(cache.upsert(&cluster("b", "1")), Ok(true));
    assert_eq!(cache.upsert(&cluster("a", "1")), Ok(true));
    assert_eq!(cache.upsert(&cluster("a", "1")), Ok(false), "the same content");
    assert_eq!(cache.get("a").unwrap().version(), enc(&cluster("a", "1")).version());
    assert_eq!(cache.len(), 2);
    let v1 = cache.version();
    assert_ne!(v1, empty_version);

    assert_eq!(cache.upsert(&cluster("a", "2")), Ok(true));
    assert_eq!(cache.get("a").unwrap().version(), enc(&cluster("a", "2")).version());
    assert_ne!(cache.version(), v1);
    assert_eq!(cache.upsert(&cluster("a", "1")), Ok(true));
    assert_eq!(cache.version(), v1, "rule S16: back to the same content, back to the same version");

    assert!(cache.delete("b"));
    assert!(!cache.delete("b"));
    assert!(cache.get("b").is_none());

    // set_all: "a" kept (a new allocation of the same content), "c" created, nothing deleted.
    let n = cache.set_all([enc(&cluster("a", "1")), enc(&cluster("c", "1"))]).unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        cache.resources().iter().map(|r| r.name().to_owned()).collect::<Vec<_>>(),
        names(&["a", "c"])
    );
    // set_all that drops "a" and changes "c".
    assert_eq!(cache.set_all([enc(&cluster("c", "2"))]).unwrap(), 2);
    assert_eq!(versions(&cache.resources()), versions([&enc(&cluster("c", "2"))]));
    assert_eq!(cache.set_all([]).unwrap(), 1);
    assert!(cache.is_empty());
    assert_eq!(cache.version(), empty_version);
}

#[test]
fn s06_the_same_content_is_no_change_and_signals_nobody() {
    let cache = LinearCache::of::<ClusterLoadAssignment>();
    let (_watch, signal) = open(&cache, &node("n"), &url(EDS), Variant::Delta).unwrap();
    assert_eq!(cache.watch_count(), 1);
    assert!(!take_raised(&signal));
    assert_eq!(cache.upsert(&cla("a", 0)), Ok(true));
    assert!(take_raised(&signal));
    assert!(!take_raised(&signal), "one raise, taken once");

    assert_eq!(cache.upsert(&cla("a", 0)), Ok(false));
    assert!(!cache.delete("nope"));
    assert_eq!(cache.set_all([enc(&cla("a", 0))]), Ok(0));
    assert!(!take_raised(&signal));

    assert!(cache.delete("a"));
    assert!(take_raised(&signal));
    drop(_watch);
    assert_eq!(cache.watch_count(), 0);
}

#[test]
fn a_resource_of_another_type_is_refused() {
    let cache = LinearCache::of::<ClusterLoadAssignment>();
    let (_watch, signal) = open(&cache, &node("n"), &url(EDS), Variant::Sotw).unwrap();
    let wrong =
        LinearError::WrongType { expected: url(EDS).to_string(), got: url(CDS).to_string() };
    assert_eq!(cache.upsert(&cluster("a", "1")), Err(wrong.clone()));
    assert_eq!(cache.upsert_encoded(enc(&cluster("a", "1"))), Err(wrong.clone()));
    // set_all refuses the whole batch.
    assert_eq!(cache.set_all([enc(&cla("x", 0)), enc(&cluster("a", "1"))]), Err(wrong));
    assert!(cache.is_empty());
    assert!(!take_raised(&signal));

    // And a watch of another type is not this cache's.
    assert_eq!(
        open(&cache, &node("n"), &url(CDS), Variant::Sotw).err(),
        Some(CacheError::UnknownType { type_url: url(CDS).to_string() })
    );
}

#[test]
fn d04_one_upsert_among_many_sends_exactly_that_resource() {
    let cache = LinearCache::of::<ClusterLoadAssignment>();
    let all: Vec<String> = (0..500).map(|i| format!("cla-{i:03}")).collect();
    cache.set_all(all.iter().map(|n| enc(&cla(n, 0)))).unwrap();
    let mut eds = DeltaClient::open(&cache, &node("n"), EDS);
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let _ = eds.request(&refs, &[]);
    assert_eq!(eds.expect().resources.len(), 500);
    assert!(eds.poll().is_none());

    assert_eq!(cache.upsert(&cla("cla-123", 1)), Ok(true));
    assert!(take_raised(&eds.signal));
    let r = eds.expect();
    assert_eq!(
        delta_items(&r),
        vec![("cla-123".into(), Some(enc(&cla("cla-123", 1)).version().into()))]
    );
    assert!(r.resources.iter().all(|e| matches!(e, xds_core::DeltaResource::Present { resource, .. } if resource.ptr_eq(&cache.get("cla-123").unwrap()))));
    assert!(r.removed_resources.is_empty());

    assert!(cache.delete("cla-321"));
    let r = eds.expect();
    assert!(r.resources.is_empty());
    assert_eq!(r.removed_resources, names(&["cla-321"]));
}

#[test]
fn s11_sotw_cds_gets_full_state_eds_only_the_change() {
    let clusters = LinearCache::of::<Cluster>();
    let endpoints = LinearCache::of::<ClusterLoadAssignment>();
    let ids: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
    for id in &ids {
        clusters.upsert(&cluster(id, "1")).unwrap();
        endpoints.upsert(&cla(id, 0)).unwrap();
    }
    let mut cds = SotwClient::open(&clusters, &node("n"), CDS);
    let mut eds = SotwClient::open(&endpoints, &node("n"), EDS);
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let _ = cds.subscribe(&[], "");
    let _ = eds.subscribe(&refs, "");
    assert_eq!(cds.expect().resources.len(), 10);
    assert_eq!(eds.expect().resources.len(), 10);

    clusters.upsert(&cluster("c3", "2")).unwrap();
    endpoints.upsert(&cla("c3", 1)).unwrap();
    assert!(take_raised(&cds.signal) && take_raised(&eds.signal));
    let r = cds.expect();
    assert_eq!(sotw_names(&r), ids, "full state: every cluster");
    assert_eq!(r.version_info, clusters.version());
    let r = eds.expect();
    assert_eq!(sotw_names(&r), names(&["c3"]), "partial: only the changed assignment");
    assert_eq!(r.version_info, endpoints.version());

    // A deletion: CDS omits it; an EDS response cannot remove (its absence means nothing), so
    // the subscribed name is told NOT_FOUND instead (rule C4), with no resource.
    clusters.delete("c0");
    endpoints.delete("c0");
    assert_eq!(cds.expect().resources.len(), 9);
    let r = eds.expect();
    assert!(r.resources.is_empty());
    let told: Vec<_> = r.resource_errors.iter().map(|e| (e.name.as_str(), e.error.code)).collect();
    assert_eq!(told, [("c0", xds_core::code::NOT_FOUND)]);
}

#[test]
fn s03_vhds_over_sotw_is_refused_by_a_linear_cache_too() {
    let cache = LinearCache::of::<xds_proto::pb::envoy::config::route::v3::VirtualHost>();
    assert_eq!(
        open(&cache, &node("n"), &url(VHDS), Variant::Sotw).err(),
        Some(CacheError::UnsupportedVariant {
            type_url: url(VHDS).to_string(),
            variant: Variant::Sotw
        })
    );
    assert!(open(&cache, &node("n"), &url(VHDS), Variant::Delta).is_ok());
}

#[test]
fn clients_of_a_linear_cache_share_what_they_hold() {
    // A thousand endpoint assignments, three delta clients subscribed to all of them and one
    // SotW client: after their first responses none keeps state per resource (a client costs
    // its exceptions, not a handle per resource: that is what lets one process hold 10,000s).
    let cache = LinearCache::of::<ClusterLoadAssignment>();
    let all: Vec<String> = (0..1_000).map(|i| format!("cluster-{i:04}")).collect();
    for name in &all {
        cache.upsert(&cla(name, 0)).unwrap();
    }
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let mut clients: Vec<DeltaClient> =
        (0..3).map(|_| DeltaClient::open(&cache, &node("n"), EDS)).collect();
    for c in &mut clients {
        let _ = c.request(&all, &[]);
        assert_eq!(c.expect().resources.len(), 1_000);
        assert_eq!(c.sub.held_exceptions(), 0);
    }
    let mut sotw = SotwClient::open(&cache, &node("n"), EDS);
    let _ = sotw.subscribe(&all, "");
    assert_eq!(sotw.expect().resources.len(), 1_000);
    assert_eq!(sotw.sub.held_exceptions(), 0);

    // An update: sent, and each client holds the changed resource on top of the shared set
    // (the set is not rebuilt for every change: with a client per view that would cost
    // O(resources) per change).
    cache.upsert(&cla("cluster-0007", 1)).unwrap();
    for c in &mut clients {
        assert_eq!(c.expect().resources.len(), 1);
        assert_eq!(c.sub.held_exceptions(), 1);
        assert_eq!(c.sub.held().count(), 1_000);
    }
    assert_eq!(sotw.expect().resources.len(), 1);
    assert_eq!(sotw.sub.held_exceptions(), 1);

    // Many updates: a client's exceptions stay bounded, since every so many changes it rebases
    // on a new shared set, and what it holds is always exactly the cache's content.
    let mut most = 0;
    for i in 0..200 {
        cache.upsert(&cla(all[i * 5], 2)).unwrap();
        for c in &mut clients {
            assert_eq!(c.expect().resources.len(), 1);
            most = most.max(c.sub.held_exceptions());
        }
        assert_eq!(sotw.expect().resources.len(), 1);
        most = most.max(sotw.sub.held_exceptions());
    }
    assert!((1..=32).contains(&most), "exceptions bounded by the rebase, found {most}");
    for c in &clients {
        assert_eq!(c.sub.held().count(), 1_000);
        assert!(
            c.sub.held().all(|(name, v)| v == Some(cache.get(name).unwrap().version())),
            "every held version is the cache's"
        );
    }
}
