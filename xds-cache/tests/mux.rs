//! `MuxCache`: each type from the cache it is routed to.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod util;

use util::*;
use xds_cache::{CacheError, LinearCache, MuxCache, Snapshot, SnapshotCache, Variant};
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;

fn setup() -> (LinearCache, SnapshotCache) {
    let endpoints = LinearCache::of::<ClusterLoadAssignment>();
    endpoints.upsert(&cla("from-linear", 0)).unwrap();
    let snapshots = SnapshotCache::by_node_id();
    let mut b = Snapshot::builder();
    b.add(&cluster("from-snapshot", "1")).unwrap();
    b.add(&cla("shadowed", 0)).unwrap(); // EDS is routed elsewhere: never served from here
    snapshots.set_snapshot("n", b.build_unchecked());
    (endpoints, snapshots)
}

#[test]
fn s03_routes_types_and_refuses_an_unrouted_type_without_fallback() {
    let (endpoints, snapshots) = setup();
    let mux = MuxCache::new().route(EDS, endpoints.clone()).route(CDS, snapshots.clone());

    let mut eds = SotwClient::open(&mux, &node("n"), EDS);
    let _ = eds.subscribe(&["from-linear", "shadowed"], "");
    assert_eq!(sotw_names(&eds.expect()), names(&["from-linear"]));
    assert_eq!(endpoints.watch_count(), 1, "the watch is the linear cache's");
    let mut cds = SotwClient::open(&mux, &node("n"), CDS);
    let _ = cds.subscribe(&[], "");
    assert_eq!(sotw_names(&cds.expect()), names(&["from-snapshot"]));

    // Signals reach the mux's streams from the routed cache.
    endpoints.upsert(&cla("from-linear", 1)).unwrap();
    assert!(take_raised(&eds.signal));
    assert!(!take_raised(&cds.signal));

    for t in [LDS, RDS] {
        assert_eq!(
            open(&mux, &node("n"), &url(t), Variant::Sotw).err(),
            Some(CacheError::UnknownType { type_url: url(t).to_string() })
        );
    }
    // The routed cache's own refusals come through.
    let vhds = MuxCache::new().route(VHDS, snapshots);
    assert!(matches!(
        open(&vhds, &node("n"), &url(VHDS), Variant::Sotw),
        Err(CacheError::UnsupportedVariant { .. })
    ));
}

#[test]
fn unrouted_types_go_to_the_fallback() {
    let (endpoints, snapshots) = setup();
    let mux = MuxCache::new().route(EDS, endpoints).fallback(snapshots);
    let mut lds = SotwClient::open(&mux, &node("n"), LDS);
    let _ = lds.subscribe(&[], "");
    assert!(lds.expect().resources.is_empty(), "the snapshot cache answers: no listeners");
    let mut cds = SotwClient::open(&mux, &node("n"), CDS);
    let _ = cds.subscribe(&[], "");
    assert_eq!(sotw_names(&cds.expect()), names(&["from-snapshot"]));
}
