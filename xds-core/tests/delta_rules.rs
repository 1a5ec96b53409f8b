//! The delta rules D1–D10, one test (at least) each, named after the rule.

mod util;

use std::collections::BTreeMap;

use util::*;
use xds_core::{DeltaRequest, DeltaResource, DeltaSubStream, RequestKind, Wildcard};

/// Subscribes, takes the first response and ACKs it.
fn started(
    traits: xds_core::TypeTraits,
    sub: &[&str],
    view: &MemView,
    n: &mut xds_core::Nonces,
) -> DeltaSubStream<Res> {
    let mut s = DeltaSubStream::new(traits);
    let _ = s.handle_request(delta(sub, &[], ""));
    if let Some(r) = s.poll_response(view, n) {
        let h = s.handle_request(delta(&[], &[], &r.nonce));
        assert!(matches!(h.kind, RequestKind::Ack { .. }));
    }
    s
}

#[test]
fn d01_every_response_has_a_fresh_nonce_and_is_acked_by_it() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1")]);
    let mut s = DeltaSubStream::new(EDS);
    let h = s.handle_request(delta(&["a"], &[], ""));
    assert_eq!(h.kind, RequestKind::Initial);
    let r1 = s.poll_response(&view, &mut n).unwrap();
    assert!(!r1.nonce.is_empty());
    let h = s.handle_request(delta(&[], &[], &r1.nonce));
    assert_eq!(h.kind, RequestKind::Ack { nonce: r1.nonce.clone(), version: Default::default() });
    view.set("a", "2");
    let r2 = s.poll_response(&view, &mut n).unwrap();
    assert_ne!(r1.nonce, r2.nonce);
    // A NACK names the response it rejects.
    let nack = DeltaRequest {
        response_nonce: r2.nonce.clone(),
        error_detail: Some(xds_core::ErrorDetail { code: 3, message: "no".into() }),
        ..Default::default()
    };
    assert!(matches!(s.handle_request(nack).kind, RequestKind::Nack { .. }));
    // A spontaneous request carries no nonce.
    assert_eq!(s.handle_request(delta(&["b"], &[], "")).kind, RequestKind::Spontaneous);
}

/// A request that names nothing (a synced proxy's ACK, NACK or empty request) changes nothing
/// but the handshake: a legacy wildcard stays one, names stay subscribed, nothing is resent; a
/// first request that names nothing is not one of them: it subscribes to the wildcard.
#[test]
fn d01_a_request_that_names_nothing_answers_the_response_and_changes_no_subscription() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut s = DeltaSubStream::new(CDS);
    assert_eq!(s.handle_request(delta(&[], &[], "")).kind, RequestKind::Initial);
    assert_eq!(s.subscription().wildcard(), Wildcard::Legacy);
    let r = s.poll_response(&view, &mut n).unwrap();
    let h = s.handle_request(delta(&[], &[], &r.nonce));
    assert_eq!(h.kind, RequestKind::Ack { nonce: r.nonce.clone(), version: Default::default() });
    assert!(h.subscribed.is_empty() && h.unsubscribed.is_empty());
    assert_eq!(s.subscription().wildcard(), Wildcard::Legacy, "still the legacy wildcard");
    assert!(s.poll_response(&view, &mut n).is_none(), "nothing resent");
    assert_eq!(s.handle_request(delta(&[], &[], "")).kind, RequestKind::Spontaneous);
    assert_eq!(s.subscription().wildcard(), Wildcard::Legacy);
    view.set("b", "2");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_names(&r), names(&["b"]));
    let nack = DeltaRequest {
        response_nonce: r.nonce.clone(),
        error_detail: Some(xds_core::ErrorDetail { code: 3, message: "no".into() }),
        ..Default::default()
    };
    assert!(matches!(s.handle_request(nack).kind, RequestKind::Nack { .. }));
    assert_eq!(s.subscription().wildcard(), Wildcard::Legacy);

    let mut by_name = started(EDS, &["a"], &view, &mut n);
    view.set("a", "2");
    let r = by_name.poll_response(&view, &mut n).unwrap();
    let _ = by_name.handle_request(delta(&[], &[], &r.nonce));
    assert_eq!(by_name.subscription().names().iter().collect::<Vec<_>>(), ["a"]);
    assert!(by_name.poll_response(&view, &mut n).is_none());
}

#[test]
fn d01_stale_nonce_voids_the_ack_but_applies_the_subscription() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut s = started(EDS, &["a"], &view, &mut n);
    view.set("a", "2");
    let r2 = s.poll_response(&view, &mut n).unwrap();
    let h = s.handle_request(delta(&["b"], &[], "1"));
    assert_eq!(h.kind, RequestKind::Stale { nonce: "1".into() });
    assert_eq!(h.subscribed.to_vec(), names(&["b"]));
    assert!(s.awaiting_ack(), "a stale request does not ACK the response in flight");
    assert!(s.poll_response(&view, &mut n).is_none());
    let _ = s.handle_request(delta(&[], &[], &r2.nonce));
    let r3 = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_names(&r3), names(&["b"]));
}

#[test]
fn d02_subscribed_names_are_resent_even_if_held() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1")]);
    let mut s = started(EDS, &["a"], &view, &mut n);
    // Subscribing again to a name the server thinks the client holds resends it.
    let _ = s.handle_request(delta(&["a"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_items(&r), [("a".into(), Some("1".into()))]);
}

#[test]
fn d03_unsubscribe_removes_and_ignores_unknown_names() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut s = started(EDS, &["a", "b"], &view, &mut n);
    let h = s.handle_request(delta(&[], &["b", "never-subscribed"], ""));
    assert_eq!(h.unsubscribed, names(&["b"]));
    view.set("b", "2");
    assert!(s.poll_response(&view, &mut n).is_none());
    assert!(!s.subscription().has_name("b"));
}

#[test]
fn d04_only_changed_resources_are_sent() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1"), ("b", "1"), ("c", "1")]);
    let mut s = started(EDS, &["a", "b", "c"], &view, &mut n);
    view.set("b", "2");
    view.set("c", "1"); // same version: not a change for the client
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_items(&r), [("b".into(), Some("2".into()))]);
    assert!(r.removed_resources.is_empty());
    assert_eq!(r.system_version_info, xds_core::View::version(&view));
}

#[test]
fn d05_deleted_resources_are_removed() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut named = started(EDS, &["a", "b"], &view, &mut n);
    let mut wild = started(CDS, &[], &view, &mut n);
    assert_eq!(wild.subscription().wildcard(), Wildcard::Legacy);
    view.delete("b");
    for s in [&mut named, &mut wild] {
        let r = s.poll_response(&view, &mut n).unwrap();
        assert_eq!(r.removed_resources, names(&["b"]));
        assert!(r.resources.is_empty());
        let _ = s.handle_request(delta(&[], &[], &r.nonce));
    }
    // Removed once: not again.
    view.set("a", "2");
    let r = named.poll_response(&view, &mut n).unwrap();
    assert!(r.removed_resources.is_empty());
}

#[test]
fn d06_missing_names_are_answered_at_once_and_sent_when_they_appear() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1")]);
    let mut s = DeltaSubStream::new(EDS);
    let _ = s.handle_request(delta(&["a", "ghost"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_items(&r), [("a".into(), Some("1".into())), ("ghost".into(), None)]);
    assert!(matches!(&r.resources[1], DeltaResource::Absent { aliases, .. } if aliases.is_empty()));
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    // Told once; not repeated.
    view.set("a", "2");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_names(&r), names(&["a"]));
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    view.set("ghost", "1");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_items(&r), [("ghost".into(), Some("1".into()))]);
}

#[test]
fn d07_reconnect_sends_only_what_differs_and_removes_what_is_gone() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1"), ("b", "2"), ("c", "1")]);
    let mut s = DeltaSubStream::new(CDS);
    let initial: BTreeMap<String, String> = [("a", "1"), ("b", "1"), ("gone", "1")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let _ =
        s.handle_request(DeltaRequest { initial_resource_versions: initial, ..Default::default() });
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_items(&r), [("b".into(), Some("2".into())), ("c".into(), Some("1".into()))]);
    assert_eq!(r.removed_resources, names(&["gone"]));

    // Named: a subscribed name the client holds at the current version is not resent.
    let mut s = DeltaSubStream::new(EDS);
    let _ = s.handle_request(DeltaRequest {
        subscribe: names(&["a", "c"]),
        initial_resource_versions: [("a".to_string(), "1".to_string())].into_iter().collect(),
        ..Default::default()
    });
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_names(&r), names(&["c"]));

    // Everything held at the current version: only the (empty) first wildcard response.
    let mut s = DeltaSubStream::new(CDS);
    let all = view.resources.clone();
    let _ = s.handle_request(DeltaRequest { initial_resource_versions: all, ..Default::default() });
    let r = s.poll_response(&view, &mut n).unwrap();
    assert!(r.resources.is_empty() && r.removed_resources.is_empty());
}

#[test]
fn d08_wildcard_subscribe_and_unsubscribe() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut s = started(CDS, &["*"], &view, &mut n);
    assert_eq!(s.subscription().wildcard(), Wildcard::Explicit);
    view.set("c", "1");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_names(&r), names(&["c"]));
    let _ = s.handle_request(delta(&["a"], &["*"], &r.nonce));
    assert_eq!(s.subscription().wildcard(), Wildcard::None);
    // Only `a` is of interest now.
    view.set("b", "2");
    view.set("c", "2");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_names(&r), names(&["a"]), "a was subscribed anew (D2)");
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    assert!(s.poll_response(&view, &mut n).is_none());
    // The first wildcard response is sent even when there is nothing.
    let mut empty = DeltaSubStream::new(CDS);
    let _ = empty.handle_request(delta(&[], &[], ""));
    assert!(empty.poll_response(&MemView::default(), &mut n).is_some());
}

#[test]
fn d09_alias_subscriptions_name_the_resource_and_list_the_alias() {
    let mut n = nonces();
    let mut view = MemView::with(&[("rc/vh1", "1")]);
    view.alias("rc/foo.com", "rc/vh1");
    view.alias("rc/bar.com", "rc/vh1");
    let mut s = DeltaSubStream::new(VHDS);
    let _ = s.handle_request(delta(&["rc/foo.com", "rc/bar.com"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    // One resource (rule S14), both aliases.
    assert_eq!(r.resources.len(), 1);
    match &r.resources[0] {
        DeltaResource::Present { resource, aliases } => {
            assert_eq!(resource.name, "rc/vh1");
            assert_eq!(aliases, &names(&["rc/bar.com", "rc/foo.com"]));
        }
        other => panic!("expected the virtual host, got {other:?}"),
    }
    // A changed resource found under its own name and two aliases, and one whose alias sorts
    // before the other's name: each resource once, in resource name order, with its aliases.
    view.set("rc/vh1", "2");
    view.set("rc/vh9", "1");
    view.alias("rc/aaa.com", "rc/vh9");
    let _ = s.handle_request(delta(&["rc/vh1", "rc/aaa.com"], &[], &r.nonce));
    let r = s.poll_response(&view, &mut n).unwrap();
    let sent: Vec<(&str, &[String])> = r
        .resources
        .iter()
        .map(|e| match e {
            DeltaResource::Present { resource, aliases } => (resource.name.as_str(), &aliases[..]),
            other => panic!("expected resources, got {other:?}"),
        })
        .collect();
    let (foo, aaa) = (names(&["rc/bar.com", "rc/foo.com"]), names(&["rc/aaa.com"]));
    assert_eq!(sent, [("rc/vh1", &foo[..]), ("rc/vh9", &aaa[..])]);
}

#[test]
fn d10_vhds_unknown_host_and_route_configuration_change() {
    let mut n = nonces();
    let mut view = MemView::with(&[("rc/vh1", "1"), ("other/vh", "1")]);
    view.alias("rc/foo.com", "rc/vh1");
    let mut s = DeltaSubStream::new(VHDS);
    let _ = s.handle_request(delta(&["rc/foo.com", "rc/unknown.com", "other/vh"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(r.resources.len(), 3);
    let unknown = r.resources.iter().find(|e| e.name() == "rc/unknown.com").unwrap();
    assert_eq!(
        unknown,
        &DeltaResource::Absent {
            name: "rc/unknown.com".into(),
            aliases: names(&["rc/unknown.com"])
        }
    );
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    assert!(s.poll_response(&view, &mut n).is_none());
    // The client got a new RouteConfiguration `rc`: its `rc/` virtual hosts are all resent.
    s.resend_where(|name| name.starts_with("rc/"));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_names(&r), names(&["rc/unknown.com", "rc/vh1"]));
}

#[test]
fn o1_delta_removals_can_wait_for_the_routes() {
    let mut n = nonces();
    let mut view = MemView::with(&[("keep", "1"), ("old", "1")]);
    let mut s = started(CDS, &[], &view, &mut n);
    view.set("new", "1");
    view.delete("old");
    let r = s.poll_response_deferring_removals(&view, &mut n).unwrap();
    assert_eq!(delta_names(&r), names(&["new"]));
    assert!(r.removed_resources.is_empty());
    assert!(s.has_deferred_removals());
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert!(r.resources.is_empty());
    assert_eq!(r.removed_resources, names(&["old"]));
    assert!(!s.has_deferred_removals());
}

#[test]
fn d07_declared_names_outside_the_subscription_are_not_held() {
    // Found by the `core_delta` fuzz target. A name declared on reconnect but not subscribed to
    // used to stay held; when it was gone, its removal could be put off (rule O1), and when it
    // came back at the declared version the client, which had dropped it, never heard of it.
    let mut n = nonces();
    let mut view = MemView::default();
    let mut s = DeltaSubStream::new(EDS);
    let declared = BTreeMap::from([("a".to_owned(), "0".to_owned())]);
    let _ = s.handle_request(DeltaRequest {
        subscribe: names(&["b"]),
        initial_resource_versions: declared,
        ..Default::default()
    });
    assert_eq!(s.held().count(), 0, "only subscribed names are held");
    let r = s.poll_response_deferring_removals(&view, &mut n).unwrap();
    assert_eq!(delta_items(&r), [("b".to_owned(), None)]);
    assert!(r.removed_resources.is_empty() && !s.has_deferred_removals());
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    // Subscribed later, it is answered (rule D6), and sent once it exists.
    let _ = s.handle_request(delta(&["a"], &[], ""));
    let r = s.poll_response_deferring_removals(&view, &mut n).unwrap();
    assert_eq!(delta_items(&r), [("a".to_owned(), None)]);
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    view.set("a", "0");
    let r = s.poll_response_deferring_removals(&view, &mut n).unwrap();
    assert_eq!(delta_items(&r), [("a".to_owned(), Some("0".to_owned()))]);
}

#[test]
fn o2_a_resubscribe_of_a_held_resource_is_answered_while_removals_wait() {
    // The same with a resource the client got on this stream: it re-subscribes (as Envoy does
    // for the endpoints of an updated cluster) while the deletion of that resource is put off.
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1")]);
    let mut s = started(EDS, &["a"], &view, &mut n);
    view.delete("a");
    assert!(s.poll_response_deferring_removals(&view, &mut n).is_none());
    let _ = s.handle_request(delta(&["a"], &[], ""));
    let r = s.poll_response_deferring_removals(&view, &mut n).unwrap();
    assert_eq!(r.removed_resources, names(&["a"]));
    assert!(!s.has_deferred_removals());
}

/// A subscription given as a live set (`DeltaRequest::subscribe_set`, what the server passes for
/// a large list it recognised) is taken as the names listed: every one sent (rule D2), except
/// what a resuming client declared at the version the server has (rule D7), and a name the
/// policy refuses is left out and reported.
#[test]
fn d02_d07_a_subscription_found_as_a_live_set_is_taken_as_the_names_listed() {
    let listed: Vec<String> = (0..70).map(|i| format!("delta-found-{i:02}")).collect();
    let items: Vec<(&str, &str)> = listed.iter().map(|n| (n.as_str(), "1")).collect();
    let view = MemView::with(&items);
    let strs: Vec<&str> = listed.iter().map(String::as_str).collect();
    let mut n = nonces();
    let mut holder: DeltaSubStream<Res> = DeltaSubStream::new(EDS);
    let _ = holder.handle_request(delta(&strs, &[], ""));
    let found = xds_core::NameSet::find(&xds_core::NamesDigest::of(&listed)).expect("a live set");
    let given = |set: &xds_core::NameSet| DeltaRequest {
        subscribe_set: Some(set.clone()),
        ..delta(&[], &[], "")
    };

    let mut s = DeltaSubStream::new(EDS);
    let h = s.handle_request(given(&found));
    assert_eq!(h.subscribed.to_vec(), listed);
    assert_eq!(delta_names(&s.poll_response(&view, &mut n).unwrap()), listed);

    // Resuming: the declared names at the server's version are not sent again.
    let mut s = DeltaSubStream::new(EDS);
    let declared: BTreeMap<String, String> =
        listed[..60].iter().map(|n| (n.clone(), "1".to_owned())).collect();
    let _ = s.handle_request(DeltaRequest { initial_resource_versions: declared, ..given(&found) });
    assert_eq!(delta_names(&s.poll_response(&view, &mut n).unwrap()), listed[60..]);

    // Refused: that name alone left out, and reported.
    let mut s = DeltaSubStream::new(EDS);
    let denied = [(listed[3].clone(), "not yours".to_owned())].into();
    let h = s.handle_request(DeltaRequest { denied, ..given(&found) });
    assert_eq!(h.subscribed.len(), 69);
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(delta_names(&r).len(), 69);
    assert_eq!(r.resource_errors.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), [&listed[3]]);
}
