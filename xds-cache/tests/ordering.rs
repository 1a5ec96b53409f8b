//! Rules O1 and O2 through the caches' views: the orderings a server builds out of independent
//! sub-streams reading one `SnapshotCache`.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod util;

use util::*;
use xds_cache::{Snapshot, SnapshotCache};

fn cluster_with_endpoints(names_: &[&str], generation: u32) -> Snapshot {
    let mut b = Snapshot::builder();
    for n in names_ {
        b.add(&eds_cluster(n, "")).unwrap().add(&cla(n, generation)).unwrap();
    }
    b.build().unwrap()
}

#[test]
fn o1_a_removed_cluster_stays_until_a_later_response_removes_it() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n", cluster_with_endpoints(&["A"], 0));
    let mut cds = SotwClient::open(&cache, &node("n"), CDS);
    let _ = cds.subscribe(&[], "");
    assert_eq!(sotw_names(&cds.expect()), names(&["A"]));

    // One update adds B and removes A.
    cache.set_snapshot("n", cluster_with_endpoints(&["B"], 0));
    assert!(take_raised(&cds.signal));
    let first = cds.poll_deferring_removals().unwrap();
    assert_eq!(sotw_names(&first), names(&["A", "B"]), "make before break: A is kept for now");
    assert!(cds.sub.has_deferred_removals());
    let _ = cds.ack(&first);

    // Once the listeners and routes were updated, the server polls again: A goes.
    let second = cds.poll().expect("the deferred removal is owed");
    assert_eq!(sotw_names(&second), names(&["B"]));
    assert!(!cds.sub.has_deferred_removals());
    assert_ne!(first.nonce, second.nonce);
    let _ = cds.ack(&second);
    assert!(cds.poll().is_none());
}

#[test]
fn o2_an_unacked_cds_response_does_not_hold_back_eds() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n", cluster_with_endpoints(&["A"], 0));
    // One sub-stream per type, as on an ADS stream.
    let mut cds = SotwClient::open(&cache, &node("n"), CDS);
    let mut eds = SotwClient::open(&cache, &node("n"), EDS);
    let _ = cds.subscribe(&[], "");
    let cds_response = cds.poll().unwrap();
    assert_eq!(sotw_names(&cds_response), names(&["A"]));
    assert!(cds.sub.awaiting_ack(), "the cluster warms: no ACK yet");

    // The warming cluster asks for its endpoints and gets them at once.
    let _ = eds.subscribe(&["A"], "");
    let r = eds.poll().expect("EDS is answered while CDS awaits its ACK");
    assert_eq!(sotw_names(&r), names(&["A"]));
    let _ = eds.ack(&r);

    // An update of both: the unACKed CDS sub-stream waits, EDS answers at once.
    cache.set_snapshot(
        "n",
        cluster_with_endpoints(&["A"], 1)
            .to_builder()
            .add(&cluster("C", "1"))
            .unwrap()
            .build_unchecked(),
    );
    assert!(take_raised(&cds.signal) && take_raised(&eds.signal));
    assert!(cds.poll().is_none(), "one response in flight per sub-stream");
    let r = eds.expect();
    assert_eq!(r.resources[0].version(), enc(&cla("A", 1)).version());

    // CDS's ACK then gets the newest state.
    let _ = cds.ack(&cds_response);
    assert_eq!(sotw_names(&cds.expect()), names(&["A", "C"]));
}
