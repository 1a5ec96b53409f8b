//! Streams follow their node when the grouping changes (`SnapshotCache::regroup`): a stream
//! moved to another group gets what that group has and removals of what it lacks, without
//! reconnecting (a proxy whose group changed must not keep serving the old group's routes).
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod util;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use util::*;
use xds_cache::{Snapshot, SnapshotCache};
use xds_proto::pb::envoy::config::core::v3::Node;

/// A cache grouping like the file server: the group named by the node id if it exists, else
/// `default`. The list of groups present is what the test changes.
fn cache_by_present_groups() -> (SnapshotCache, Arc<RwLock<Vec<String>>>) {
    let present = Arc::new(RwLock::new(vec!["default".to_owned()]));
    let names = present.clone();
    let cache = SnapshotCache::new(move |node: &Node| {
        let names = names.read().unwrap();
        if names.contains(&node.id) { node.id.clone() } else { "default".to_owned() }
    });
    (cache, present)
}

fn set_present(present: &RwLock<Vec<String>>, groups: &[&str]) {
    *present.write().unwrap() = names(groups);
}

/// `default`: clusters `backend` and `shared`, and `backend`'s endpoints.
fn default_group() -> Snapshot {
    snapshot_of(&[("backend", "1"), ("shared", "1")], &["backend"])
}

/// `envoy-2`: clusters `own` and `shared` (the same content as in `default`), `own`'s endpoints.
fn envoy2_group() -> Snapshot {
    snapshot_of(&[("own", "1"), ("shared", "1")], &["own"])
}

fn snapshot_of(clusters: &[(&str, &str)], endpoints: &[&str]) -> Snapshot {
    let mut b = Snapshot::builder();
    for (name, tag) in clusters {
        b.add(&cluster(name, tag)).unwrap();
    }
    for name in endpoints {
        b.add(&cla(name, 1)).unwrap();
    }
    b.build_unchecked()
}

/// The three streams of node `envoy-2`: wildcard CDS over SotW and delta, EDS by name over SotW.
struct Streams {
    sotw_cds: SotwClient,
    delta_cds: DeltaClient,
    sotw_eds: SotwClient,
    /// What the delta client holds: name -> version.
    delta_held: BTreeMap<String, String>,
}

impl Streams {
    fn open(cache: &SnapshotCache) -> Streams {
        let n = node("envoy-2");
        let mut sotw_cds = SotwClient::open(cache, &n, CDS);
        let _ = sotw_cds.subscribe(&[], "");
        let mut delta_cds = DeltaClient::open(cache, &n, CDS);
        let _ = delta_cds.request(&[], &[]);
        let mut sotw_eds = SotwClient::open(cache, &n, EDS);
        let _ = sotw_eds.subscribe(&["backend", "own"], "");
        Streams { sotw_cds, delta_cds, sotw_eds, delta_held: BTreeMap::new() }
    }

    fn all_raised(&self) -> bool {
        [&self.sotw_cds.signal, &self.delta_cds.signal, &self.sotw_eds.signal]
            .into_iter()
            .all(|s| take_raised(s))
    }

    fn none_raised(&self) -> bool {
        [&self.sotw_cds.signal, &self.delta_cds.signal, &self.sotw_eds.signal]
            .into_iter()
            .all(|s| !take_raised(s))
    }

    /// The delta response owed, applied to what the client holds.
    fn delta(&mut self) -> xds_core::DeltaResponse<Res> {
        let r = self.delta_cds.expect();
        apply_delta(&mut self.delta_held, &r);
        r
    }
}

fn held(list: &[(&str, &str)]) -> BTreeMap<String, String> {
    list.iter()
        .map(|(n, tag)| (n.to_string(), enc(&cluster(n, tag)).version().to_owned()))
        .collect()
}

#[test]
fn a_group_that_appears_takes_its_streams_with_removals_of_the_old_groups_resources() {
    let (cache, present) = cache_by_present_groups();
    cache.set_snapshot("default", default_group());
    let mut s = Streams::open(&cache);
    assert_eq!(sotw_names(&s.sotw_cds.expect()), names(&["backend", "shared"]));
    s.delta();
    assert_eq!(s.delta_held, held(&[("backend", "1"), ("shared", "1")]));
    assert_eq!(sotw_names(&s.sotw_eds.expect()), names(&["backend"]));
    let _ = s.all_raised();

    // The group appears: its snapshot first, then what the grouping reads, then regroup.
    cache.set_snapshot("envoy-2", envoy2_group());
    assert!(s.none_raised(), "setting a group nobody is in wakes nobody");
    set_present(&present, &["default", "envoy-2"]);
    assert_eq!(cache.regroup(), 3, "the three watches of envoy-2 move");
    assert!(s.all_raised());

    // Delta: the new group's cluster, a removal of the old group's; `shared` is not resent.
    let r = s.delta();
    assert_eq!(delta_names(&r), names(&["own"]));
    assert_eq!(r.removed_resources, names(&["backend"]));
    assert_eq!(s.delta_held, held(&[("own", "1"), ("shared", "1")]));
    // SotW full state: the new group's clusters, `backend` left out (rule S11).
    assert_eq!(sotw_names(&s.sotw_cds.expect()), names(&["own", "shared"]));
    // SotW EDS: the new group's resource (the client drops the cluster, and with it `backend`).
    assert!(sotw_names(&s.sotw_eds.expect()).contains(&"own".to_owned()));
    assert!(s.delta_cds.poll().is_none() && s.sotw_cds.poll().is_none(), "nothing more owed");

    // The moved streams now follow their new group, incrementally, and not the old one.
    cache.set_snapshot("default", snapshot_of(&[("backend", "2"), ("shared", "1")], &["backend"]));
    assert!(s.none_raised(), "the old group's changes no longer concern them");
    let next = snapshot_of(&[("own", "2"), ("shared", "1")], &["own"]);
    cache.set_snapshot("envoy-2", next);
    assert!(take_raised(&s.delta_cds.signal) && take_raised(&s.sotw_cds.signal));
    let r = s.delta();
    assert_eq!(delta_names(&r), names(&["own"]));
    assert!(r.removed_resources.is_empty());
    assert_eq!(s.delta_held, held(&[("own", "2"), ("shared", "1")]));
    let status = cache.status("envoy-2").unwrap();
    assert_eq!(status.watches.values().sum::<usize>(), 3, "the watches are counted in their group");
    let default = cache.status("default").unwrap();
    assert_eq!(default.watches.values().sum::<usize>(), 0);
}

#[test]
fn a_group_that_vanishes_sends_its_streams_back_to_the_default_group() {
    let (cache, present) = cache_by_present_groups();
    set_present(&present, &["default", "envoy-2"]);
    cache.set_snapshot("default", default_group());
    cache.set_snapshot("envoy-2", envoy2_group());
    let mut s = Streams::open(&cache);
    assert_eq!(sotw_names(&s.sotw_cds.expect()), names(&["own", "shared"]));
    s.delta();
    let _ = s.sotw_eds.expect();
    let _ = s.all_raised();

    // The file loses the group: it is cleared, the grouping no longer names it.
    cache.clear_snapshot("envoy-2");
    assert!(s.delta_cds.poll().is_none(), "a cleared group serves nothing: no removals yet");
    set_present(&present, &["default"]);
    assert_eq!(cache.regroup(), 3);
    assert!(s.all_raised());
    let r = s.delta();
    assert_eq!(delta_names(&r), names(&["backend"]));
    assert_eq!(r.removed_resources, names(&["own"]));
    assert_eq!(s.delta_held, held(&[("backend", "1"), ("shared", "1")]));
    assert_eq!(sotw_names(&s.sotw_cds.expect()), names(&["backend", "shared"]));
    assert!(sotw_names(&s.sotw_eds.expect()).contains(&"backend".to_owned()));
    // Nobody is left in the vanished group: the cache forgets it.
    assert_eq!(cache.groups(), names(&["default"]));
}

#[test]
fn regroup_with_nothing_changed_moves_and_wakes_nobody() {
    let (cache, _present) = cache_by_present_groups();
    cache.set_snapshot("default", default_group());
    let mut s = Streams::open(&cache);
    let _ = s.sotw_cds.expect();
    s.delta();
    let _ = s.sotw_eds.expect();
    let _ = s.all_raised();
    assert_eq!(cache.regroup(), 0);
    assert!(s.none_raised());
    assert!(s.delta_cds.poll().is_none() && s.sotw_cds.poll().is_none());
}

#[test]
fn a_stream_moved_to_a_group_without_a_snapshot_waits_for_it() {
    let (cache, present) = cache_by_present_groups();
    cache.set_snapshot("default", default_group());
    let mut s = Streams::open(&cache);
    s.delta();
    let _ = s.all_raised();
    // The grouping names the group before its snapshot is set (a regroup at the wrong moment).
    set_present(&present, &["default", "envoy-2"]);
    assert_eq!(cache.regroup(), 3);
    assert!(s.delta_cds.poll().is_none(), "nothing is removed while the group has no snapshot");
    cache.set_snapshot("envoy-2", envoy2_group());
    assert!(take_raised(&s.delta_cds.signal));
    let r = s.delta();
    assert_eq!(delta_names(&r), names(&["own"]));
    assert_eq!(r.removed_resources, names(&["backend"]));
}

#[test]
fn a_stream_moved_away_and_back_before_reading_stays_exact() {
    let (cache, present) = cache_by_present_groups();
    cache.set_snapshot("default", default_group());
    cache.set_snapshot("envoy-2", envoy2_group());
    let mut s = Streams::open(&cache);
    s.delta();
    set_present(&present, &["default", "envoy-2"]);
    assert_eq!(cache.regroup(), 3);
    set_present(&present, &["default"]);
    assert_eq!(cache.regroup(), 0, "back where they are: no move");
    assert!(s.delta_cds.poll().is_none(), "nothing changed for the client");
    // Two real moves in a row, read only after the second: exact against the last group.
    set_present(&present, &["default", "envoy-2"]);
    cache.regroup();
    s.delta();
    cache.clear_snapshot("envoy-2");
    set_present(&present, &["default"]);
    cache.regroup();
    cache.set_snapshot("default", snapshot_of(&[("backend", "3")], &[]));
    let r = s.delta();
    assert_eq!(r.removed_resources, names(&["own", "shared"]));
    assert_eq!(s.delta_held, held(&[("backend", "3")]));
}
