//! Resources with a time to live: heartbeats renew what the client holds.

mod util;

use std::time::Duration;

use util::*;
use xds_core::{DeltaResource, DeltaSubStream, SotwSubStream};

fn view_with_ttl() -> MemView {
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    view.ttls.insert("a".into(), Duration::from_secs(10));
    view
}

#[test]
fn sotw_heartbeat_lists_held_ttl_resources_at_their_version() {
    let mut n = nonces();
    let view = view_with_ttl();
    let mut s = SotwSubStream::new(EDS);
    assert!(s.poll_heartbeat(&mut n).is_none(), "nothing held, nothing to renew");
    let _ = s.handle_request(sotw(&["a", "b"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert!(!r.heartbeat);
    assert_eq!(s.min_ttl(), Some(Duration::from_secs(10)));
    assert!(s.poll_heartbeat(&mut n).is_none(), "waits for the ACK like any response");
    let _ = s.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    let hb = s.poll_heartbeat(&mut n).unwrap();
    assert!(hb.heartbeat);
    assert_eq!(sotw_items(&hb), [("a".into(), "1".into())]);
    assert_eq!(hb.version_info, r.version_info);
    // A heartbeat is a response like others: it is ACKed by its nonce.
    let h = s.handle_request(sotw(&["a", "b"], &hb.version_info, &hb.nonce));
    assert!(matches!(h.kind, xds_core::RequestKind::Ack { .. }));
    assert!(s.poll_response(&view, &mut n).is_none(), "a heartbeat changes nothing");
}

#[test]
fn delta_heartbeat_renews_without_resending() {
    let mut n = nonces();
    let view = view_with_ttl();
    let mut s = DeltaSubStream::new(EDS);
    let _ = s.handle_request(delta(&["a", "b"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    let hb = s.poll_heartbeat(&mut n).unwrap();
    assert!(hb.heartbeat && hb.removed_resources.is_empty());
    assert!(
        matches!(&hb.resources[..], [DeltaResource::Present { resource, .. }] if resource.name == "a")
    );
    let _ = s.handle_request(delta(&[], &[], &hb.nonce));
    assert!(s.poll_response(&view, &mut n).is_none());
    // Without TTL resources there is no heartbeat.
    let _ = s.handle_request(delta(&[], &["a"], ""));
    assert_eq!(s.min_ttl(), None);
    assert!(s.poll_heartbeat(&mut n).is_none());
}

#[test]
fn heartbeats_go_on_for_the_ttl_the_client_holds_when_only_the_views_ttl_changes() {
    // The TTL is not part of the version: a resource republished without its TTL is not resent,
    // so the client's copy still expires by the TTL it got, and heartbeats must go on for it
    // (whatever the stream shares with other clients of the view).
    let mut n = nonces();
    let mut view = view_with_ttl();
    let mut s = DeltaSubStream::new(EDS);
    let _ = s.handle_request(delta(&["a", "b"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    view.ttls.clear();
    view.set("a", "1");
    assert!(s.poll_response(&view, &mut n).is_none(), "the same version: nothing to send");
    let hb = s.poll_heartbeat(&mut n).expect("the client still holds `a` with a TTL");
    assert!(hb.heartbeat);
}
