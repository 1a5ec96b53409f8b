//! Streams follow their node's group on the wire: when the group a connected node maps to
//! appears or vanishes (`SnapshotCache::regroup`), its SotW and delta streams get the new group's
//! resources and removals of the old group's, without reconnecting.

mod util;

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError, RwLock};

use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::config::core::v3::Node;

use util::*;

/// Groups as the file server makes them: the group named by the node id if it exists, else
/// `default`. The test changes the list of groups present.
fn cache_by_present_groups() -> (SnapshotCache, Arc<RwLock<Vec<String>>>) {
    let present = Arc::new(RwLock::new(vec!["default".to_owned()]));
    let names = present.clone();
    let cache = SnapshotCache::new(move |node: &Node| {
        let names = names.read().unwrap_or_else(PoisonError::into_inner);
        if names.contains(&node.id) { node.id.clone() } else { "default".to_owned() }
    });
    (cache, present)
}

fn set_present(present: &RwLock<Vec<String>>, groups: &[&str]) {
    *present.write().unwrap_or_else(PoisonError::into_inner) = names(groups);
}

/// SotW: receives (and ACKs) until the clusters of a response are `expected`.
async fn sotw_until(client: &mut Sotw, expected: &[&str]) {
    loop {
        let r = client.recv_type(CDS).await;
        client.ack(&r).await;
        if sotw_names(&r) == names(expected) {
            return;
        }
    }
}

/// Delta: receives (and ACKs) until the client holds `expected`; returns every name it was sent
/// and every name removed on the way.
async fn delta_until(
    client: &mut Delta,
    held: &mut BTreeSet<String>,
    expected: &[&str],
) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut sent, mut removed) = (BTreeSet::new(), BTreeSet::new());
    while held.iter().map(String::as_str).collect::<Vec<_>>() != expected {
        let r = client.recv_type(CDS).await;
        client.ack(&r).await;
        for name in delta_names(&r) {
            held.insert(name.clone());
            sent.insert(name);
        }
        for name in &r.removed_resources {
            held.remove(name);
            removed.insert(name.clone());
        }
    }
    (sent, removed)
}

fn set(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn streams_of_a_node_move_when_its_group_appears_and_vanishes() {
    let (cache, present) = cache_by_present_groups();
    cache.set_snapshot("default", snapshot![cluster("backend", "1"), cluster("shared", "1")]);
    let t = serve(cache.clone()).await;
    let mut sotw = Sotw::ads(&t, "envoy-2").await;
    sotw.subscribe(CDS, &[], None).await;
    let mut delta = Delta::ads(&t, "envoy-2").await;
    delta.subscribe(CDS, &[], &[]).await;
    let mut held = BTreeSet::new();
    sotw_until(&mut sotw, &["backend", "shared"]).await;
    delta_until(&mut delta, &mut held, &["backend", "shared"]).await;

    // The node's own group appears (as a reload publishes it): snapshot, grouping, regroup.
    cache.set_snapshot("envoy-2", snapshot![cluster("own", "1"), cluster("shared", "1")]);
    set_present(&present, &["default", "envoy-2"]);
    assert_eq!(cache.regroup(), 2);
    sotw_until(&mut sotw, &["own", "shared"]).await;
    let (sent, removed) = delta_until(&mut delta, &mut held, &["own", "shared"]).await;
    assert_eq!(sent, set(&["own"]), "what the client holds unchanged is not resent");
    assert_eq!(removed, set(&["backend"]));
    sotw.expect_quiet().await;
    delta.expect_quiet().await;

    // The group vanishes: back to the default group, with removals.
    cache.clear_snapshot("envoy-2");
    set_present(&present, &["default"]);
    assert_eq!(cache.regroup(), 2);
    sotw_until(&mut sotw, &["backend", "shared"]).await;
    let (sent, removed) = delta_until(&mut delta, &mut held, &["backend", "shared"]).await;
    assert_eq!(sent, set(&["backend"]));
    assert_eq!(removed, set(&["own"]));
    sotw.expect_quiet().await;
    delta.expect_quiet().await;

    // Still on the wire, the streams follow the default group's changes.
    cache.set_snapshot("default", snapshot![cluster("backend", "2"), cluster("shared", "1")]);
    let r = delta.recv_type(CDS).await;
    assert_eq!(delta_names(&r), names(&["backend"]));
    let r = sotw.recv_type(CDS).await;
    assert_eq!(sotw_names(&r), names(&["backend", "shared"]));
}
