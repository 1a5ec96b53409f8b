//! Memory: one encoded copy per resource version however many groups or streams share it, and
//! what a watch costs. Measured with a counting allocator (one test per binary, so nothing else
//! allocates meanwhile).
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use xds_cache::{Cache, LinearCache, Signal, Snapshot, SnapshotCache, Variant, WatchRequest};
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_proto::{ResourceType, TypeUrl};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn cla(i: usize) -> ClusterLoadAssignment {
    // A name like real ones, and a body of a few hundred bytes (named policy overprovisioning
    // stands in for endpoints).
    use xds_proto::pb::envoy::config::endpoint::v3::cluster_load_assignment::Policy;
    use xds_proto::pb::envoy::config::endpoint::v3::cluster_load_assignment::policy::DropOverload;
    let drops = (0..8)
        .map(|j| DropOverload {
            category: format!("category-{i}-{j}-padding-padding"),
            drop_percentage: None,
        })
        .collect();
    ClusterLoadAssignment {
        cluster_name: format!("cluster-{i:05}"),
        policy: Some(Policy { drop_overloads: drops, ..Default::default() }),
        ..Default::default()
    }
}

#[test]
fn shared_resources_and_the_cost_of_a_watch() {
    let cla_type = TypeUrl::from(ResourceType::ClusterLoadAssignment);

    // One snapshot of 1,000 resources served to 100 groups: the groups share the encoded bytes.
    let mut builder = Snapshot::builder();
    for i in 0..1_000 {
        builder.add(&cla(i)).unwrap();
    }
    let snapshot = builder.build_unchecked();
    let cache = SnapshotCache::by_node_id();
    let before = live();
    cache.set_snapshot("group-0", snapshot.clone());
    let one_group = live() - before;
    for g in 1..100 {
        cache.set_snapshot(&format!("group-{g}"), snapshot.clone());
    }
    let hundred_groups = live() - before;
    let body_bytes: usize = snapshot.resources(&cla_type).map(|r| r.value().len()).sum();
    let per_extra_group = (hundred_groups - one_group) / 99;
    println!(
        "bodies: {body_bytes} B; first group: {one_group} B; each further group: {per_extra_group} B"
    );
    // A group's tables index the shared handles (about 145 B per resource: the name-ordered
    // entries, the revision index and the type version, and a handful of empty per-type tables):
    // a group that copied the bodies would cost them on top of that, more than `body_bytes`.
    assert!((per_extra_group as usize) < body_bytes, "groups must not copy resource bodies");

    // Watches: a registered signal and a handle per stream and type.
    let linear = LinearCache::of::<ClusterLoadAssignment>();
    for i in 0..1_000 {
        linear.upsert(&cla(i)).unwrap();
    }
    let node = Node::default();
    let signals: Vec<Arc<Signal>> = (0..1_000).map(|_| Arc::new(Signal::new())).collect();
    let before = live();
    let watches: Vec<_> = signals
        .iter()
        .map(|s| {
            let request =
                WatchRequest { node: &node, type_url: &cla_type, variant: Variant::Delta };
            linear.watch(request, s.clone()).unwrap()
        })
        .collect();
    let per_watch = (live() - before) / 1_000;
    println!("bytes per watch: {per_watch}");
    assert!(per_watch < 256, "a watch costs {per_watch} B");
    drop(watches);
    assert_eq!(linear.watch_count(), 0);
}
