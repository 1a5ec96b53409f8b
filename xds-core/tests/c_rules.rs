//! Rules C1 (xdstp names), C3 (on-demand next to a wildcard) and C4 (resource errors) in the
//! core: one test (at least) each, named after the rule.

mod util;

use std::collections::BTreeMap;

use util::*;
use xds_core::{DeltaResource, DeltaSubStream, RequestKind, SotwSubStream, code};

const CLUSTER: &str = "envoy.config.cluster.v3.Cluster";

fn x(id_and_params: &str) -> String {
    format!("xdstp://auth/{CLUSTER}/{id_and_params}")
}

fn present(r: &xds_core::DeltaResponse<Res>) -> Vec<String> {
    r.resources
        .iter()
        .filter_map(|e| match e {
            DeltaResource::Present { resource, .. } => Some(resource.name.clone()),
            DeltaResource::Absent { .. } => None,
        })
        .collect()
}

fn absent(r: &xds_core::DeltaResponse<Res>) -> Vec<String> {
    r.resources
        .iter()
        .filter_map(|e| match e {
            DeltaResource::Absent { name, .. } => Some(name.clone()),
            DeltaResource::Present { .. } => None,
        })
        .collect()
}

fn errors(e: &[xds_core::ResourceError]) -> Vec<(&str, i32)> {
    e.iter().map(|e| (e.name.as_str(), e.error.code)).collect()
}

fn delta_sub(resource_errors: bool) -> DeltaSubStream<Res> {
    let mut s = DeltaSubStream::new(CDS);
    s.configure_names(Some(CLUSTER), resource_errors);
    s
}

#[test]
fn c01_delta_reordered_parameters_match_and_are_answered_under_the_asked_name() {
    let mut n = nonces();
    // The cache keys the resource by its normal form (parameters sorted).
    let view = MemView::with(&[(&x("svc?a=1&b=2"), "1")]);
    let mut s = delta_sub(false);
    let asked = x("svc?b=2&a=1");
    let _ = s.handle_request(delta(&[&asked], &[], ""));
    assert!(s.subscription().has_name(&x("svc?a=1&b=2")), "the subscription holds the normal form");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), [x("svc?a=1&b=2")]);
    // ...and the wire names it as the client asked (rule C1).
    assert_eq!(r.spellings.get(&x("svc?a=1&b=2")), Some(&asked));
    assert!(r.resource_errors.is_empty());
    // Unsubscribing in yet another spelling removes it.
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    let h = s.handle_request(delta(&[], &[&x("svc?a=1&b=%32")], ""));
    assert_eq!(h.unsubscribed, [x("svc?a=1&b=2")]);
    assert!(s.subscription().names().is_empty());
}

#[test]
fn c01_sotw_reordered_parameters_match() {
    let mut n = nonces();
    let view = MemView::with(&[(&x("svc?a=1&b=2"), "1"), ("plain", "1")]);
    let mut s = SotwSubStream::new(EDS);
    s.configure_names(Some(CLUSTER), false);
    let _ = s.handle_request(sotw(&[&x("svc?b=2&a=1"), "plain"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    let got: Vec<_> = r.resources.iter().map(|r| r.name.clone()).collect();
    assert_eq!(got, ["plain".to_owned(), x("svc?a=1&b=2")]);
    // The ACK repeats the set in the client's spelling: no change, nothing owed.
    let h = s.handle_request(sotw(&[&x("svc?b=2&a=1"), "plain"], &r.version_info, &r.nonce));
    assert!(!h.subscription_changed());
    assert!(s.poll_response(&view, &mut n).is_none());
}

#[test]
fn c01_a_name_of_another_type_or_malformed_is_refused_once_with_invalid_argument() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1")]);
    let listener = "xdstp://auth/envoy.config.listener.v3.Listener/l1".to_owned();
    let broken = x("bad%zz");
    // SotW: the other names are served; the refused ones are told once, not on every ACK.
    let mut s = SotwSubStream::new(EDS);
    s.configure_names(Some(CLUSTER), false);
    let _ = s.handle_request(sotw(&["a", &listener, &broken], "", ""));
    assert!(!s.subscription().has_name(&listener));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(r.resources.len(), 1);
    let mut want = vec![
        (broken.as_str(), code::INVALID_ARGUMENT),
        (listener.as_str(), code::INVALID_ARGUMENT),
    ];
    want.sort();
    assert_eq!(errors(&r.resource_errors), want);
    assert!(r.resource_errors.iter().any(|e| e.error.message.contains("stream is of type")));
    let _ = s.handle_request(sotw(&["a", &listener, &broken], &r.version_info, &r.nonce));
    assert!(s.poll_response(&view, &mut n).is_none(), "told once");

    // Delta: the same, and an unsubscribe of the refused name is clean (rule D3).
    let mut d = delta_sub(false);
    let h = d.handle_request(delta(&["a", &listener], &[], ""));
    assert_eq!(h.subscribed, ["a"]);
    let r = d.poll_response(&view, &mut n).unwrap();
    assert_eq!(errors(&r.resource_errors), [(listener.as_str(), code::INVALID_ARGUMENT)]);
    assert_eq!(present(&r), ["a"]);
    assert!(absent(&r).is_empty());
    let _ = d.handle_request(delta(&[], &[&listener], &r.nonce));
    assert!(d.poll_response(&view, &mut n).is_none());
}

#[test]
fn c01_reconnect_declared_versions_are_normalized() {
    let mut n = nonces();
    let view = MemView::with(&[(&x("svc?a=1&b=2"), "1")]);
    let mut s = delta_sub(false);
    let mut req = delta(&[&x("svc?b=2&a=1")], &[], "");
    req.initial_resource_versions = BTreeMap::from([(x("svc?b=2&a=1"), "1".to_owned())]);
    let h = s.handle_request(req);
    assert_eq!(h.kind, RequestKind::Initial);
    // Rule D7 through C1: the client holds it, under whatever spelling.
    assert!(s.poll_response(&view, &mut n).is_none());
}

#[test]
fn c04_not_found_only_for_clients_that_declared_resource_errors() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1")]);
    // Without the client feature: rule D6, a bodiless resource, no error.
    let mut old = delta_sub(false);
    let _ = old.handle_request(delta(&["a", "missing"], &[], ""));
    let r = old.poll_response(&view, &mut n).unwrap();
    assert_eq!(absent(&r), ["missing"]);
    assert!(r.resource_errors.is_empty());
    // With it: NOT_FOUND in resource_errors instead, once.
    let mut new = delta_sub(true);
    let _ = new.handle_request(delta(&["a", "missing"], &[], ""));
    let r = new.poll_response(&view, &mut n).unwrap();
    assert!(absent(&r).is_empty());
    assert_eq!(errors(&r.resource_errors), [("missing", code::NOT_FOUND)]);
    let _ = new.handle_request(delta(&[], &[], &r.nonce));
    view.set("a", "2");
    let r = new.poll_response(&view, &mut n).unwrap();
    assert!(r.resource_errors.is_empty(), "sent once");
    // It appears: sent, and the error is over.
    let _ = new.handle_request(delta(&[], &[], &r.nonce));
    view.set("missing", "1");
    let r = new.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), ["missing"]);
    assert!(r.resource_errors.is_empty());

    // SotW: silence without the feature, NOT_FOUND with it; a full-state response still carries
    // every other resource.
    for (feature, want) in [(false, vec![]), (true, vec![("gone", code::NOT_FOUND)])] {
        let mut s = SotwSubStream::new(CDS);
        s.configure_names(Some(CLUSTER), feature);
        let _ = s.handle_request(sotw(&["a", "gone"], "", ""));
        let r = s.poll_response(&view, &mut n).unwrap();
        assert_eq!(r.resources.len(), 1);
        assert_eq!(errors(&r.resource_errors), want);
    }
}

#[test]
fn c04_an_attached_error_is_sent_once_for_a_missing_name_and_cleared_by_the_resource() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1")]);
    let mut s = delta_sub(false);
    let _ = s.handle_request(delta(&["a", "b"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(absent(&r), ["b"]);
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    // The cache attaches an error after the client was told the name does not exist.
    view.set_error("b", code::UNAVAILABLE, "inventory unreachable");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(errors(&r.resource_errors), [("b", code::UNAVAILABLE)]);
    assert_eq!(r.resource_errors[0].error.message, "inventory unreachable");
    assert!(!r.resource_errors[0].error.is_data_error());
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    view.set("a", "2");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert!(r.resource_errors.is_empty(), "sent once");
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    view.set("b", "1");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), ["b"]);
    assert!(r.resource_errors.is_empty());
    // A view without change history finds it too (every name compared).
    let mut view = MemView { no_history: true, ..MemView::with(&[("a", "1")]) };
    view.set_error("c", code::PERMISSION_DENIED, "not yours");
    let mut s = delta_sub(false);
    let _ = s.handle_request(delta(&["c"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(errors(&r.resource_errors), [("c", code::PERMISSION_DENIED)]);
    assert!(absent(&r).is_empty(), "the error is the answer");
}

#[test]
fn c04_a_wildcard_error_names_the_wildcard() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1")]);
    view.set_error("*", code::UNAVAILABLE, "partial inventory");
    let mut s = delta_sub(false);
    let _ = s.handle_request(delta(&["*"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), ["a"]);
    assert_eq!(errors(&r.resource_errors), [("*", code::UNAVAILABLE)]);
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    assert!(s.poll_response(&view, &mut n).is_none(), "sent once");
}

#[test]
fn c03_named_resources_next_to_the_wildcard() {
    let mut n = nonces();
    // `od` is outside the wildcard set for this client: the view is the wildcard set plus
    // whatever exists; the core answers named ones as D2/D6 say.
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut s = delta_sub(false);
    let _ = s.handle_request(delta(&["*"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), ["a", "b"]);
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    // On demand: a name that does not exist yet, then one in the wildcard set.
    let _ = s.handle_request(delta(&["od", "a"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), ["a"], "rule D2: a subscribed name is resent");
    assert_eq!(absent(&r), ["od"]);
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    view.set("od", "1");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), ["od"]);
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    // Unsubscribing a name also in the wildcard set keeps it: nothing is removed.
    let _ = s.handle_request(delta(&[], &["a"], ""));
    assert!(s.poll_response(&view, &mut n).is_none());
    // Dropping the wildcard keeps only what is named.
    let _ = s.handle_request(delta(&[], &["*"], ""));
    assert_eq!(s.subscription().names().iter().cloned().collect::<Vec<_>>(), ["od"]);
    view.set("b", "2");
    assert!(s.poll_response(&view, &mut n).is_none(), "b is no longer of interest");
}
