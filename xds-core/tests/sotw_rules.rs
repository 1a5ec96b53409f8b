//! The SotW rules S1–S16, one test (at least) each, named after the rule.

mod util;

use util::*;
use xds_core::{NamesDigest, RequestKind, SotwNames, SotwRequest, SotwSubStream, View, Wildcard};

#[test]
fn s01_sub_streams_are_independent() {
    // A NACK of routes says nothing about clusters: each sub-stream has its own state.
    let mut n = nonces();
    let clusters = MemView::with(&[("c", "1")]);
    let routes = MemView::with(&[("r", "1")]);
    let mut cds = SotwSubStream::new(CDS);
    let mut rds = SotwSubStream::new(RDS);
    let _ = cds.handle_request(sotw(&[], "", ""));
    let _ = rds.handle_request(sotw(&["r"], "", ""));
    let c1 = cds.poll_response(&clusters, &mut n).unwrap();
    let r1 = rds.poll_response(&routes, &mut n).unwrap();
    assert_ne!(c1.nonce, r1.nonce);
    let nack = rds.handle_request(sotw_nack(&["r"], "", &r1.nonce, "bad route"));
    assert!(matches!(nack.kind, RequestKind::Nack { .. }));
    let ack = cds.handle_request(sotw(&[], &c1.version_info, &c1.nonce));
    assert!(matches!(ack.kind, RequestKind::Ack { .. }));
    assert_eq!(cds.acked_version(), Some(c1.version_info.as_str()));
    assert_eq!(rds.acked_version(), None);
    // RDS's nonce means nothing to CDS.
    let cross = cds.handle_request(sotw(&[], "", &r1.nonce));
    assert!(matches!(cross.kind, RequestKind::Stale { .. }));
}

#[test]
fn s04_ack_records_the_version() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1")]);
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(sotw(&["a"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert!(s.awaiting_ack());
    let h = s.handle_request(sotw(&["a"], &r.version_info, &r.nonce));
    assert_eq!(
        h.kind,
        RequestKind::Ack { nonce: r.nonce.clone(), version: r.version_info.clone() }
    );
    assert_eq!(s.acked_version(), Some(r.version_info.as_str()));
    assert!(!s.awaiting_ack());
}

#[test]
fn s05_nack_is_recorded_and_the_rejected_version_not_resent() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1")]);
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(sotw(&["a"], "", ""));
    let r1 = s.poll_response(&view, &mut n).unwrap();
    let _ = s.handle_request(sotw(&["a"], &r1.version_info, &r1.nonce));
    view.set("a", "2");
    let r2 = s.poll_response(&view, &mut n).unwrap();
    let h = s.handle_request(sotw_nack(&["a"], &r1.version_info, &r2.nonce, "invalid"));
    match h.kind {
        RequestKind::Nack { version, error, .. } => {
            assert_eq!(version, r1.version_info);
            assert_eq!(error.message, "invalid");
        }
        other => panic!("expected a NACK, got {other:?}"),
    }
    // The client keeps version 1; the acked version does not move.
    assert_eq!(s.acked_version(), Some(r1.version_info.as_str()));
    // Nothing is resent until the resource changes again.
    assert!(s.poll_response(&view, &mut n).is_none());
    view.set("a", "3");
    let r3 = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_items(&r3), [("a".into(), "3".into())]);
}

#[test]
fn s06_no_response_at_the_current_version_with_the_same_subscription() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut s = SotwSubStream::new(CDS);
    let _ = s.handle_request(sotw(&[], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    let _ = s.handle_request(sotw(&[], &r.version_info, &r.nonce));
    assert!(s.poll_response(&view, &mut n).is_none());
    // A change to a resource the client did not subscribe to owes it nothing.
    let mut e = SotwSubStream::new(EDS);
    let _ = e.handle_request(sotw(&["a"], "", ""));
    let r = e.poll_response(&view, &mut n).unwrap();
    let _ = e.handle_request(sotw(&["a"], &r.version_info, &r.nonce));
    view.set("b", "2");
    assert!(e.poll_response(&view, &mut n).is_none());
}

#[test]
fn s07_stale_nonce_is_ignored() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut s = SotwSubStream::new(EDS);
    let first = s.handle_request(sotw(&["a"], "", "whatever-from-another-stream"));
    // The first request is never stale.
    assert_eq!(first.kind, RequestKind::Initial);
    let r1 = s.poll_response(&view, &mut n).unwrap();
    let _ = s.handle_request(sotw(&["a"], &r1.version_info, &r1.nonce));
    view.set("a", "2");
    let r2 = s.poll_response(&view, &mut n).unwrap();
    // A request naming the older nonce (or none) is stale: no state change, no response.
    for stale_nonce in [r1.nonce.as_str(), ""] {
        let h = s.handle_request(sotw(&["a", "b"], "", stale_nonce));
        assert!(matches!(h.kind, RequestKind::Stale { .. }));
        assert!(h.subscribed.is_empty());
        assert!(s.poll_response(&view, &mut n).is_none());
        assert!(!s.subscription().has_name("b"));
    }
    let h = s.handle_request(sotw(&["a"], &r2.version_info, &r2.nonce));
    assert!(matches!(h.kind, RequestKind::Ack { .. }));
}

#[test]
fn s08_the_latest_request_supersedes() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1"), ("b", "1"), ("c", "1")]);
    let mut s = SotwSubStream::new(EDS);
    // Two requests before any response: only the latest set counts.
    let _ = s.handle_request(sotw(&["a"], "", ""));
    let h = s.handle_request(sotw(&["b", "c"], "", ""));
    assert_eq!(h.unsubscribed, names(&["a"]));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["b", "c"]));
}

#[test]
fn s09_only_requested_resources_that_exist_are_sent() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1"), ("b", "1"), ("c", "1")]);
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(sotw(&["a", "c", "missing"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["a", "c"]));
    // An empty set means no interest.
    let _ = s.handle_request(sotw(&[], &r.version_info, &r.nonce));
    assert!(s.subscription().is_empty());
    assert!(s.poll_response(&view, &mut n).is_none());
}

#[test]
fn s09_a_list_repeated_by_digest_is_taken_as_the_same_set() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1"), ("b", "1"), ("c", "1")]);
    let mut s = SotwSubStream::new(EDS);
    let digest = |list: &[&str]| NamesDigest::of(list.iter().copied());
    assert!(!s.repeats_names(&digest(&[])), "no list taken in yet");
    let _ = s.handle_request(sotw(&["a", "b"], "", ""));
    // The same names in any order repeat the list; another set, or a duplicate, does not.
    assert!(s.repeats_names(&digest(&["b", "a"])));
    assert!(!s.repeats_names(&digest(&["a"])));
    assert!(!s.repeats_names(&digest(&["a", "b", "b"])));
    let r = s.poll_response(&view, &mut n).unwrap();
    // An ACK passing `Repeated` is an ACK that changes nothing.
    let repeated = |version: &str, nonce: &str| SotwRequest {
        resource_names: SotwNames::Repeated,
        ..sotw(&[], version, nonce)
    };
    let h = s.handle_request(repeated(&r.version_info, &r.nonce));
    assert!(matches!(h.kind, RequestKind::Ack { .. }));
    assert!(!h.subscription_changed());
    assert_eq!(s.subscription().names().len(), 2);
    assert!(s.poll_response(&view, &mut n).is_none());
    // A changed list is listed, and the repeat check follows it.
    let h = s.handle_request(sotw(&["c"], &r.version_info, &r.nonce));
    assert_eq!(h.unsubscribed, names(&["a", "b"]));
    assert!(s.repeats_names(&digest(&["c"])));
    assert!(!s.repeats_names(&digest(&["a", "b"])));
    let r2 = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r2), names(&["c"]));
    // A stale request takes nothing in: its list is not the one to repeat.
    let _ = s.handle_request(sotw(&["a"], "", "stale-nonce"));
    assert!(s.repeats_names(&digest(&["c"])));
}

/// A list the caller found as a live set (`SotwNames::Found`) is taken as that list would be:
/// the same resources sent, the wildcard ended, the ACK that repeats it changing nothing; and
/// with a name the policy refuses, that name alone is left out and reported.
#[test]
fn s09_a_list_found_as_a_live_set_is_taken_as_the_list() {
    let listed: Vec<String> = (0..80).map(|i| format!("sotw-found-{i:02}")).collect();
    let items: Vec<(&str, &str)> = listed.iter().map(|n| (n.as_str(), "1")).collect();
    let view = MemView::with(&items);
    let strs: Vec<&str> = listed.iter().map(String::as_str).collect();
    let mut n = nonces();
    // One sub-stream takes the list as names, and holds its set.
    let mut first = SotwSubStream::new(EDS);
    let _ = first.handle_request(sotw(&strs, "", ""));
    let expected = sotw_names(&first.poll_response(&view, &mut n).unwrap());
    let found = xds_core::NameSet::find(&NamesDigest::of(&listed)).expect("a live set");

    // On a wildcard-capable type, a first list found is names, not the legacy wildcard.
    let encoded = NamesDigest::of_encoded(80, [&b"the caller's own digest"[..]]);
    let mut s: SotwSubStream<Res> = SotwSubStream::new(CDS);
    let h = s.handle_request(SotwRequest {
        resource_names: SotwNames::Found(found.clone(), encoded),
        ..sotw(&[], "", "")
    });
    assert_eq!(h.subscribed.len(), 80);
    assert_eq!(s.subscription().wildcard(), Wildcard::None);
    assert!(s.repeats_names(&encoded), "the caller's digest is kept for the ACKs");

    let mut s = SotwSubStream::new(EDS);
    let h = s.handle_request(SotwRequest {
        resource_names: SotwNames::Found(found.clone(), encoded),
        ..sotw(&[], "", "")
    });
    assert_eq!(h.subscribed.to_vec(), listed);
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), expected);
    let ack =
        SotwRequest { resource_names: SotwNames::Repeated, ..sotw(&[], &r.version_info, &r.nonce) };
    assert!(!s.handle_request(ack).subscription_changed());
    assert!(s.poll_response(&view, &mut n).is_none());

    // With a name refused: every other name taken, that one reported.
    let mut s = SotwSubStream::new(EDS);
    let denied = [(listed[5].clone(), "not yours".to_owned())].into();
    let h = s.handle_request(SotwRequest {
        resource_names: SotwNames::Found(found, encoded),
        denied,
        ..sotw(&[], "", "")
    });
    assert_eq!(h.subscribed.len(), 79);
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r).len(), 79);
    assert_eq!(r.resource_errors.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), [&listed[5]]);
}

#[test]
fn s10_wildcard_legacy_and_explicit() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut legacy = SotwSubStream::new(CDS);
    let _ = legacy.handle_request(sotw(&[], "", ""));
    assert_eq!(legacy.subscription().wildcard(), Wildcard::Legacy);
    let r = legacy.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["a", "b"]));
    // Naming resources without `*` ends the legacy wildcard.
    let _ = legacy.handle_request(sotw(&["a"], &r.version_info, &r.nonce));
    assert_eq!(legacy.subscription().wildcard(), Wildcard::None);

    let mut explicit = SotwSubStream::new(CDS);
    let _ = explicit.handle_request(sotw(&["*", "a"], "", ""));
    assert_eq!(explicit.subscription().wildcard(), Wildcard::Explicit);
    let r = explicit.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["a", "b"]));
    // `*` removed: only `a` now; full state means the next response carries only `a`.
    let _ = explicit.handle_request(sotw(&["a"], &r.version_info, &r.nonce));
    assert_eq!(explicit.subscription().wildcard(), Wildcard::None);
}

#[test]
fn s11_full_state_types_carry_everything_others_only_changes() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut cds = SotwSubStream::new(CDS);
    let _ = cds.handle_request(sotw(&[], "", ""));
    let r = cds.poll_response(&view, &mut n).unwrap();
    let _ = cds.handle_request(sotw(&[], &r.version_info, &r.nonce));
    view.set("a", "2");
    let r = cds.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_items(&r), [("a".into(), "2".into()), ("b".into(), "1".into())]);
    let _ = cds.handle_request(sotw(&[], &r.version_info, &r.nonce));
    // A deletion: the next full state omits it.
    view.delete("b");
    let r = cds.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["a"]));
    let _ = cds.handle_request(sotw(&[], &r.version_info, &r.nonce));
    // Everything deleted: an empty response deletes all.
    view.delete("a");
    let r = cds.poll_response(&view, &mut n).unwrap();
    assert!(r.resources.is_empty());

    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut eds = SotwSubStream::new(EDS);
    let _ = eds.handle_request(sotw(&["a", "b"], "", ""));
    let r = eds.poll_response(&view, &mut n).unwrap();
    let _ = eds.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    view.set("a", "2");
    let r = eds.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_items(&r), [("a".into(), "2".into())]);
    let _ = eds.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    // A deletion of a partial-state resource cannot be sent as one (absence means nothing): the
    // response carries no resource, only the name's NOT_FOUND (rule C4).
    let mut quiet = SotwSubStream::new(EDS);
    quiet.configure_names(None, false);
    let _ = quiet.handle_request(sotw(&["a", "b"], "", ""));
    let r = quiet.poll_response(&view, &mut n).unwrap();
    let _ = quiet.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    view.delete("b");
    let r = eds.poll_response(&view, &mut n).unwrap();
    assert!(r.resources.is_empty());
    assert_eq!(r.resource_errors.len(), 1);
    assert_eq!(r.resource_errors[0].name, "b");
    // Without resource errors, nothing at all is sent.
    assert!(quiet.poll_response(&view, &mut n).is_none());
}

#[test]
fn s11_first_full_state_response_is_sent_even_when_empty() {
    let mut n = nonces();
    let view = MemView::default();
    let mut lds = SotwSubStream::new(LDS);
    let _ = lds.handle_request(sotw(&[], "", ""));
    let r = lds.poll_response(&view, &mut n).unwrap();
    assert!(r.resources.is_empty());
    // A named full-state subscription to a missing listener learns it is absent at once.
    let mut lds = SotwSubStream::new(LDS);
    let _ = lds.handle_request(sotw(&["missing"], "", ""));
    assert!(lds.poll_response(&view, &mut n).unwrap().resources.is_empty());
}

#[test]
fn s12_newly_requested_names_are_sent_even_if_unchanged() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(sotw(&["a", "b"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    let _ = s.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    let _ = s.handle_request(sotw(&["a"], &r.version_info, &r.nonce));
    assert!(s.poll_response(&view, &mut n).is_none());
    // `b` again: sent again although the client was sent it before and it did not change.
    let h = s.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    assert_eq!(h.subscribed.to_vec(), names(&["b"]));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["b"]));

    // Full state: growth of the set triggers a full response.
    let mut cds = SotwSubStream::new(CDS);
    let _ = cds.handle_request(sotw(&["a"], "", ""));
    let r = cds.poll_response(&view, &mut n).unwrap();
    let _ = cds.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    let r = cds.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["a", "b"]));
}

#[test]
fn s13_names_that_appear_later_are_sent() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1")]);
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(sotw(&["a", "later"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    let _ = s.handle_request(sotw(&["a", "later"], &r.version_info, &r.nonce));
    assert!(s.poll_response(&view, &mut n).is_none());
    view.set("later", "1");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["later"]));
}

#[test]
fn s14_names_are_unique_in_a_response() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut s = SotwSubStream::new(CDS);
    // Explicit wildcard plus names that the wildcard also covers.
    let _ = s.handle_request(sotw(&["*", "a", "a", "b"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["a", "b"]));
    let mut e = SotwSubStream::new(EDS);
    let _ = e.handle_request(sotw(&["a", "a"], "", ""));
    assert_eq!(sotw_names(&e.poll_response(&view, &mut n).unwrap()), names(&["a"]));
}

#[test]
fn s15_reconnect_at_the_current_version_resends_nothing() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1"), ("b", "1")]);
    let current = view.version();
    let mut s = SotwSubStream::new(CDS);
    let h = s.handle_request(sotw(&[], &current, ""));
    assert_eq!(h.kind, RequestKind::Initial);
    assert!(s.poll_response(&view, &mut n).is_none());
    // It still gets changes.
    let mut view2 = view.clone();
    view2.set("a", "2");
    let r = s.poll_response(&view2, &mut n).unwrap();
    assert_eq!(sotw_items(&r), [("a".into(), "2".into()), ("b".into(), "1".into())]);

    // A version the server no longer has: everything is sent.
    let mut s = SotwSubStream::new(CDS);
    let _ = s.handle_request(sotw(&[], "old", ""));
    assert_eq!(s.poll_response(&view, &mut n).unwrap().resources.len(), 2);

    // A named subscription is resent: the client may have lost an answer with the old stream.
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(sotw(&["a"], &current, ""));
    assert_eq!(sotw_names(&s.poll_response(&view, &mut n).unwrap()), names(&["a"]));
}

#[test]
fn s16_versions_describe_resources_not_streams() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1")]);
    let mut s1 = SotwSubStream::new(CDS);
    let mut s2 = SotwSubStream::new(CDS);
    let _ = s1.handle_request(sotw(&[], "", ""));
    let _ = s2.handle_request(sotw(&[], "", ""));
    let r1 = s1.poll_response(&view, &mut n).unwrap();
    let r2 = s2.poll_response(&view, &mut nonces()).unwrap();
    assert_eq!(r1.version_info, r2.version_info);
    assert_eq!(r1.version_info, view.version());
}

#[test]
fn one_response_in_flight_then_latest_wins() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1")]);
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(sotw(&["a"], "", ""));
    let r1 = s.poll_response(&view, &mut n).unwrap();
    view.set("a", "2");
    view.set("a", "3");
    assert!(s.poll_response(&view, &mut n).is_none(), "waits for the ACK");
    let _ = s.handle_request(sotw(&["a"], &r1.version_info, &r1.nonce));
    let r2 = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_items(&r2), [("a".into(), "3".into())]);
}

#[test]
fn full_comparison_when_the_view_has_no_history() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    view.no_history = true;
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(sotw(&["a", "b"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    let _ = s.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    assert!(s.poll_response(&view, &mut n).is_none());
    view.set("b", "2");
    assert_eq!(sotw_names(&s.poll_response(&view, &mut n).unwrap()), names(&["b"]));
}

#[test]
fn o1_cluster_removal_can_wait_for_the_routes() {
    let mut n = nonces();
    let mut view = MemView::with(&[("keep", "1"), ("old", "1")]);
    let mut cds = SotwSubStream::new(CDS);
    let _ = cds.handle_request(sotw(&[], "", ""));
    let r = cds.poll_response(&view, &mut n).unwrap();
    let _ = cds.handle_request(sotw(&[], &r.version_info, &r.nonce));
    // One update adds `new` and removes `old`: the addition goes now, `old` stays for now.
    view.set("new", "1");
    view.delete("old");
    let r = cds.poll_response_deferring_removals(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["keep", "new", "old"]));
    assert!(cds.has_deferred_removals());
    let _ = cds.handle_request(sotw(&[], &r.version_info, &r.nonce));
    // Still deferring: nothing new to say.
    assert!(cds.poll_response_deferring_removals(&view, &mut n).is_none());
    // Routes updated: now the removal.
    let r = cds.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["keep", "new"]));
    assert!(!cds.has_deferred_removals());
}

#[test]
fn nothing_is_sent_from_a_view_that_is_not_ready() {
    let mut n = nonces();
    let mut view = MemView { not_ready: true, ..MemView::default() };
    let mut cds = SotwSubStream::new(CDS);
    let _ = cds.handle_request(sotw(&[], "", ""));
    // An empty full state would delete every cluster the client has: wait for data.
    assert!(cds.poll_response(&view, &mut n).is_none());
    view.not_ready = false;
    view.set("a", "1");
    assert_eq!(sotw_names(&cds.poll_response(&view, &mut n).unwrap()), names(&["a"]));
}

#[test]
fn s12_a_resource_named_star_of_a_type_without_wildcard_is_an_ordinary_name() {
    // `*` sorts before letters: newly requested, it is sent like any name (rule S12), and the
    // subscription does not become a wildcard.
    let mut n = nonces();
    let view = MemView::with(&[("*", "1"), ("a", "1"), ("b", "1")]);
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(sotw(&["a"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_items(&r), [("a".into(), "1".into())]);
    let _ = s.handle_request(sotw(&["a", "*"], &r.version_info, &r.nonce));
    let r = s.poll_response(&view, &mut n).expect("`*` is owed");
    assert_eq!(sotw_items(&r), [("*".into(), "1".into())]);
    assert!(!s.subscription().is_wildcard());
}
