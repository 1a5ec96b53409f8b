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
    let mut s = delta_sub(true);
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
    s.configure_names(Some(CLUSTER), true);
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
    s.configure_names(Some(CLUSTER), true);
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
    let mut d = delta_sub(true);
    let h = d.handle_request(delta(&["a", &listener], &[], ""));
    assert_eq!(h.subscribed.to_vec(), ["a"]);
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
    let mut s = delta_sub(true);
    let mut req = delta(&[&x("svc?b=2&a=1")], &[], "");
    req.initial_resource_versions = BTreeMap::from([(x("svc?b=2&a=1"), "1".to_owned())]);
    let h = s.handle_request(req);
    assert_eq!(h.kind, RequestKind::Initial);
    // Rule D7 through C1: the client holds it, under whatever spelling.
    assert!(s.poll_response(&view, &mut n).is_none());
}

/// Rule C4: no client feature gates `resource_errors` (TP3 has the server send them; gRPC A88
/// reads them whenever present). A subscribed name that does not exist gets `NOT_FOUND` once;
/// on delta beside rule D6's bodiless resource, which clients that skip the field rely on.
#[test]
fn c04_not_found_is_sent_to_every_client_beside_d6_once_and_forgotten_when_the_resource_comes() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1")]);
    let mut s = DeltaSubStream::new(CDS);
    let _ = s.handle_request(delta(&["a", "missing"], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), ["a"], "the other resources are intact");
    assert_eq!(absent(&r), ["missing"], "rule D6 still answers it");
    assert_eq!(errors(&r.resource_errors), [("missing", code::NOT_FOUND)]);
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    view.set("a", "2");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert!(r.resource_errors.is_empty(), "sent once");
    // It appears: sent, and the error is over.
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    view.set("missing", "1");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), ["missing"]);
    assert!(r.resource_errors.is_empty());
    // Gone again: a new NOT_FOUND is owed only once it is subscribed afresh; the removal
    // (rule D5) says it is gone.
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    view.delete("missing");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(r.removed_resources, ["missing"]);

    // SotW: NOT_FOUND, and a full-state response still carries every other resource.
    let mut s = SotwSubStream::new(CDS);
    let _ = s.handle_request(sotw(&["a", "gone"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), ["a"]);
    assert_eq!(errors(&r.resource_errors), [("gone", code::NOT_FOUND)]);
    let _ = s.handle_request(sotw(&["a", "gone"], &r.version_info, &r.nonce));
    view.set("a", "3");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert!(r.resource_errors.is_empty(), "sent once");
    // A non-full-state type too.
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(sotw(&["a", "gone"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(errors(&r.resource_errors), [("gone", code::NOT_FOUND)]);

    // A wildcard names no resource that could be missing: no NOT_FOUND.
    let mut s = SotwSubStream::new(CDS);
    let _ = s.handle_request(sotw(&[], "", ""));
    assert!(s.poll_response(&view, &mut n).unwrap().resource_errors.is_empty());
}

/// Rule C4 where a response cannot remove: a SotW type that is not full-state (rule S11) keeps
/// what it is not sent, so a subscribed resource deleted is told as `NOT_FOUND`, once, and the
/// error is over when it comes back. A full-state response removes it by leaving it out, and
/// delta removes it (rule D5): no error there.
#[test]
fn c04_a_deleted_resource_is_told_not_found_where_sotw_cannot_remove_it() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(sotw(&["a", "b"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), ["a", "b"]);
    assert!(r.resource_errors.is_empty());
    let _ = s.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    view.delete("a");
    let r = s.poll_response(&view, &mut n).expect("the deletion is told");
    assert!(sotw_names(&r).is_empty());
    assert_eq!(errors(&r.resource_errors), [("a", code::NOT_FOUND)]);
    let _ = s.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    view.set("b", "2");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), ["b"]);
    assert!(r.resource_errors.is_empty(), "told once");
    let _ = s.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    view.set("a", "3");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), ["a"], "it came back");
    assert!(r.resource_errors.is_empty());

    // Full-state: the response leaves it out, which removes it.
    let mut s = SotwSubStream::new(CDS);
    let _ = s.handle_request(sotw(&["a", "b"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    let _ = s.handle_request(sotw(&["a", "b"], &r.version_info, &r.nonce));
    view.delete("b");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), ["a"]);
    assert!(r.resource_errors.is_empty());

    // Delta: removed (rule D5), no error.
    let mut d = DeltaSubStream::new(EDS);
    let _ = d.handle_request(delta(&["a"], &[], ""));
    let r = d.poll_response(&view, &mut n).unwrap();
    let _ = d.handle_request(delta(&[], &[], &r.nonce));
    view.delete("a");
    let r = d.poll_response(&view, &mut n).unwrap();
    assert_eq!(r.removed_resources, ["a"]);
    assert!(r.resource_errors.is_empty());
}

/// Rule C4: the server's opt-out. Off, no response carries `resource_errors`; a missing name
/// gets rule D6 (delta) or silence (SotW), as for a server without TP3.
#[test]
fn c04_the_opt_out_sends_no_resource_errors() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1")]);
    let mut d = delta_sub(false);
    let mut req = delta(&["a", "missing", "secret"], &[], "");
    req.denied = BTreeMap::from([("secret".to_owned(), "not for this node".to_owned())]);
    let _ = d.handle_request(req);
    let r = d.poll_response(&view, &mut n).unwrap();
    assert_eq!(absent(&r), ["missing"]);
    assert!(r.resource_errors.is_empty());
    let mut s = SotwSubStream::new(CDS);
    s.configure_names(Some(CLUSTER), false);
    let _ = s.handle_request(sotw(&["a", "gone"], "", ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), ["a"]);
    assert!(r.resource_errors.is_empty());
}

/// Rule C4: a name is never both a resource and an error in one response. A listed name the
/// policy refuses is still delivered by the wildcard beside it: the resource is the answer.
#[test]
fn c04_a_name_is_never_both_a_resource_and_an_error() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1"), ("b", "1")]);
    let mut s = SotwSubStream::new(CDS);
    let mut req = sotw(&["*", "b", "c"], "", "");
    req.denied = BTreeMap::from([
        ("b".to_owned(), "not for this node".to_owned()),
        ("c".to_owned(), "not for this node".to_owned()),
    ]);
    let _ = s.handle_request(req);
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), ["a", "b"]);
    assert_eq!(errors(&r.resource_errors), [("c", code::PERMISSION_DENIED)]);
}

#[test]
fn c04_an_attached_error_is_sent_once_for_a_missing_name_and_cleared_by_the_resource() {
    let mut n = nonces();
    let mut view = MemView::with(&[("a", "1")]);
    let mut s = delta_sub(true);
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
    let mut s = delta_sub(true);
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
    let mut s = delta_sub(true);
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
    let mut s = delta_sub(true);
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

// --- Rule C2: glob collections (delta only) ---

const LB: &str = "envoy.config.endpoint.v3.LbEndpoint";

/// An LEDS name: `xdstp://auth/LbEndpoint/{path}`.
fn lb(path: &str) -> String {
    format!("xdstp://auth/{LB}/{path}")
}

fn leds_sub() -> DeltaSubStream<Res> {
    let mut s = DeltaSubStream::new(EDS);
    s.configure_names(Some(LB), true);
    s
}

/// Sends what is owed and ACKs it: (present names, removed names).
fn exchange(
    s: &mut DeltaSubStream<Res>,
    view: &impl xds_core::View<Resource = Res>,
    n: &mut xds_core::Nonces,
) -> (Vec<String>, Vec<String>) {
    let Some(r) = s.poll_response(view, n) else { return (Vec::new(), Vec::new()) };
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    (present(&r), r.removed_resources)
}

/// A view that counts how it is read, over a [`MemView`] without a shared set (so that every
/// read the core makes goes through it).
struct Counted {
    inner: MemView,
    gets: std::cell::Cell<usize>,
    scans: std::cell::Cell<usize>,
}

impl xds_core::View for Counted {
    type Resource = Res;
    fn revision(&self) -> u64 {
        self.inner.revision()
    }
    fn version(&self) -> xds_core::Text {
        xds_core::Text::from("v")
    }
    fn get(&self, name: &str) -> Option<Res> {
        self.gets.set(self.gets.get() + 1);
        self.inner.get(name)
    }
    fn for_each(&self, f: &mut dyn FnMut(&Res)) {
        self.scans.set(self.scans.get() + 1);
        self.inner.for_each(f);
    }
    fn for_each_member(&self, glob: &str, f: &mut dyn FnMut(&Res)) {
        self.scans.set(self.scans.get() + 1);
        self.inner.for_each_member(glob, f);
    }
    fn changed_since(&self, revision: u64, f: &mut dyn FnMut(&str)) -> bool {
        self.inner.changed_since(revision, f)
    }
}

#[test]
fn c02_glob_sends_existing_and_later_members_and_removes_members_that_go() {
    let mut n = nonces();
    let mut view = MemView::with(&[
        (&lb("svc/e1?k=v"), "1"),
        (&lb("svc/e2?k=v"), "1"),
        // Not members: other parameters, a deeper path, another collection.
        (&lb("svc/e3?k=w"), "1"),
        (&lb("svc/deeper/e4?k=v"), "1"),
        (&lb("other/e5?k=v"), "1"),
    ]);
    let mut s = leds_sub();
    // The client spells the glob with its parameters in any order (rule C1).
    let h = s.handle_request(delta(&[&lb("svc/*?k=v")], &[], ""));
    assert_eq!(h.subscribed.to_vec(), [lb("svc/*?k=v")]);
    assert!(s.subscription().has_glob(&lb("svc/*?k=v")) && s.subscription().names().is_empty());
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), [lb("svc/e1?k=v"), lb("svc/e2?k=v")]);
    assert!(absent(&r).is_empty() && r.resource_errors.is_empty(), "a glob is not a name");
    let _ = s.handle_request(delta(&[], &[], &r.nonce));

    // A member that appears later is sent; a change elsewhere is not.
    view.set(&lb("svc/e6?k=v"), "1");
    view.set(&lb("svc/e3?k=w"), "2");
    view.set(&lb("other/e5?k=v"), "2");
    assert_eq!(exchange(&mut s, &view, &mut n), (vec![lb("svc/e6?k=v")], vec![]));
    // A changed member is sent; a member that goes away is removed.
    view.set(&lb("svc/e1?k=v"), "2");
    view.delete(&lb("svc/e2?k=v"));
    view.delete(&lb("other/e5?k=v"));
    assert_eq!(exchange(&mut s, &view, &mut n), (vec![lb("svc/e1?k=v")], vec![lb("svc/e2?k=v")]));
    let held: Vec<_> = s.held().map(|(n, _)| n.to_owned()).collect();
    assert_eq!(held, [lb("svc/e1?k=v"), lb("svc/e6?k=v")]);
    // Rule D2: subscribing the glob again resends every member.
    let _ = s.handle_request(delta(&[&lb("svc/*?k=v")], &[], ""));
    assert_eq!(exchange(&mut s, &view, &mut n).0, [lb("svc/e1?k=v"), lb("svc/e6?k=v")]);
}

#[test]
fn c02_glob_with_no_members_is_answered_at_once() {
    let mut n = nonces();
    let mut view = MemView::with(&[(&lb("other/e1"), "1")]);
    let mut s = leds_sub();
    let _ = s.handle_request(delta(&[&lb("svc/*")], &[], ""));
    // An empty response: the client's collection is empty, it need not wait for a timeout.
    let r = s.poll_response(&view, &mut n).expect("the glob is answered");
    assert!(r.resources.is_empty() && r.removed_resources.is_empty());
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    assert!(s.poll_response(&view, &mut n).is_none(), "answered once");
    view.set(&lb("svc/e1"), "1");
    assert_eq!(exchange(&mut s, &view, &mut n).0, [lb("svc/e1")]);
}

#[test]
fn c02_unsubscribing_the_glob_drops_its_members_except_those_named() {
    let mut n = nonces();
    let mut view = MemView::with(&[(&lb("svc/a"), "1"), (&lb("svc/b"), "1"), (&lb("svc/c"), "1")]);
    for no_set in [false, true] {
        view.no_set = no_set;
        let mut s = leds_sub();
        let _ = s.handle_request(delta(&[&lb("svc/*"), &lb("svc/b")], &[], ""));
        assert_eq!(exchange(&mut s, &view, &mut n).0, [lb("svc/a"), lb("svc/b"), lb("svc/c")]);
        let h = s.handle_request(delta(&[], &[&lb("svc/*")], ""));
        assert_eq!(h.unsubscribed, [lb("svc/*")]);
        // No removals are sent (the client drops them itself, rule D3); only `b` is still held.
        assert!(s.poll_response(&view, &mut n).is_none());
        assert_eq!(s.held().map(|(n, _)| n.to_owned()).collect::<Vec<_>>(), [lb("svc/b")]);
        let next = if no_set { "3" } else { "2" };
        view.set(&lb("svc/a"), next);
        view.set(&lb("svc/b"), next);
        view.delete(&lb("svc/c"));
        assert_eq!(exchange(&mut s, &view, &mut n), (vec![lb("svc/b")], vec![]), "no_set {no_set}");
        // Subscribed again: every member is sent, though the shared set "had" them.
        let _ = s.handle_request(delta(&[&lb("svc/*")], &[], ""));
        assert_eq!(exchange(&mut s, &view, &mut n).0, [lb("svc/a"), lb("svc/b")]);
        view.set(&lb("svc/c"), "1");
    }
}

#[test]
fn c02_glob_member_change_sends_only_that_member() {
    let mut n = nonces();
    let mut inner = MemView { no_set: true, ..MemView::default() };
    for i in 0..10_000 {
        inner.set(&lb(&format!("big/e{i:05}")), "1");
    }
    let view = Counted { inner, gets: 0.into(), scans: 0.into() };
    let mut s = leds_sub();
    let _ = s.handle_request(delta(&[&lb("big/*")], &[], ""));
    assert_eq!(exchange(&mut s, &view, &mut n).0.len(), 10_000);
    let mut view = view;
    view.inner.set(&lb("big/e04321"), "2");
    let (gets, scans) = (view.gets.get(), view.scans.get());
    assert_eq!(exchange(&mut s, &view, &mut n), (vec![lb("big/e04321")], vec![]));
    // The change was found through the view's change log: one lookup, no walk of the members.
    assert_eq!(view.scans.get() - scans, 0, "no scan of the collection or the view");
    assert!(view.gets.get() - gets <= 2, "{} lookups", view.gets.get() - gets);
}

#[test]
fn c02_a_glob_client_holding_what_the_view_has_keeps_no_per_resource_state() {
    let mut n = nonces();
    let mut view = MemView::default();
    for i in 0..1_000 {
        view.set(&lb(&format!("svc/e{i:04}")), "1");
        view.set(&lb(&format!("other/e{i:04}")), "1");
    }
    let mut s = leds_sub();
    let _ = s.handle_request(delta(&[&lb("svc/*")], &[], ""));
    assert_eq!(exchange(&mut s, &view, &mut n).0.len(), 1_000);
    assert_eq!(s.held_exceptions(), 0, "the shared set stands for every member");
    assert_eq!(s.held().count(), 1_000, "and only for members");
    view.set(&lb("svc/e0007"), "2");
    view.delete(&lb("svc/e0009"));
    assert_eq!(exchange(&mut s, &view, &mut n), (vec![lb("svc/e0007")], vec![lb("svc/e0009")]));
    assert_eq!(s.held_exceptions(), 0);
    // A second glob on a client that already has a base: its members are sent, not assumed held.
    let _ = s.handle_request(delta(&[&lb("other/*")], &[], ""));
    assert_eq!(exchange(&mut s, &view, &mut n).0.len(), 1_000);
    assert_eq!((s.held_exceptions(), s.held().count()), (0, 1_999));
}

#[test]
fn c02_reconnect_declares_members_and_gets_only_what_differs() {
    let mut n = nonces();
    let view = MemView::with(&[(&lb("svc/a"), "1"), (&lb("svc/b"), "2"), (&lb("svc/new"), "1")]);
    let mut s = leds_sub();
    let mut req = delta(&[&lb("svc/*")], &[], "");
    req.initial_resource_versions = BTreeMap::from([
        (lb("svc/a"), "1".to_owned()),
        (lb("svc/b"), "1".to_owned()),
        (lb("svc/gone"), "1".to_owned()),
    ]);
    let _ = s.handle_request(req);
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), [lb("svc/b"), lb("svc/new")], "rule D7 through the glob");
    assert_eq!(r.removed_resources, [lb("svc/gone")]);
}

#[test]
fn c02_glob_in_sotw_is_refused_per_resource() {
    let mut n = nonces();
    let view = MemView::with(&[(&lb("svc/a"), "1"), ("plain", "1")]);
    let mut s = SotwSubStream::new(EDS);
    s.configure_names(Some(LB), true);
    let _ = s.handle_request(sotw(&[&lb("svc/*"), "plain"], "", ""));
    assert!(s.subscription().globs().is_empty());
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), ["plain"]);
    assert_eq!(errors(&r.resource_errors), [(lb("svc/*").as_str(), code::INVALID_ARGUMENT)]);
    assert!(r.resource_errors[0].error.message.contains("delta"));
}

#[test]
fn c02_globs_count_against_the_subscription_limit() {
    let mut s = leds_sub();
    let _ = s.handle_request(delta(&[&lb("svc/*"), &lb("x/*"), &lb("svc/a")], &[], ""));
    assert_eq!(s.name_count(), 3);
    let _ = s.handle_request(delta(&[], &[&lb("x/*")], ""));
    assert_eq!(s.name_count(), 2);
}

#[test]
fn c04_an_error_attached_to_a_glob_names_the_glob() {
    let mut n = nonces();
    let mut view = MemView::with(&[(&lb("svc/a"), "1")]);
    view.set_error(&lb("svc/*"), code::UNAVAILABLE, "partial inventory");
    let mut s = leds_sub();
    let _ = s.handle_request(delta(&[&lb("svc/*")], &[], ""));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), [lb("svc/a")], "the members still go out");
    assert_eq!(errors(&r.resource_errors), [(lb("svc/*").as_str(), code::UNAVAILABLE)]);
    let _ = s.handle_request(delta(&[], &[], &r.nonce));
    assert!(s.poll_response(&view, &mut n).is_none(), "sent once");
    // Attached while subscribed: told through the change log.
    view.set_error(&lb("svc/*"), code::INTERNAL, "worse");
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(errors(&r.resource_errors), [(lb("svc/*").as_str(), code::INTERNAL)]);
    assert!(r.resources.is_empty());
}

#[test]
fn c04_names_the_policy_denies_are_refused_with_permission_denied_once() {
    let mut n = nonces();
    let view = MemView::with(&[("a", "1"), ("secret", "1")]);
    let denied = BTreeMap::from([("secret".to_owned(), "not for this node".to_owned())]);
    // SotW: the denied name is not subscribed; the client is told why, once, and gets the rest.
    let mut s = SotwSubStream::new(EDS);
    let _ = s.handle_request(xds_core::SotwRequest {
        denied: denied.clone(),
        ..sotw(&["a", "secret"], "", "")
    });
    assert!(!s.subscription().has_name("secret"));
    let r = s.poll_response(&view, &mut n).unwrap();
    assert_eq!(sotw_names(&r), names(&["a"]));
    assert_eq!(errors(&r.resource_errors), [("secret", code::PERMISSION_DENIED)]);
    assert_eq!(r.resource_errors[0].error.message, "not for this node");
    // Listed again (as every ACK does), denied again: not told again.
    let _ = s.handle_request(xds_core::SotwRequest {
        denied: denied.clone(),
        ..sotw(&["a", "secret"], &r.version_info, &r.nonce)
    });
    assert!(s.poll_response(&view, &mut n).is_none());

    // Delta: the same, and a later subscription the policy allows is served.
    let mut d = delta_sub(true);
    let _ = d.handle_request(xds_core::DeltaRequest {
        denied: denied.clone(),
        ..delta(&["a", "secret"], &[], "")
    });
    let r = d.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), ["a"]);
    assert_eq!(errors(&r.resource_errors), [("secret", code::PERMISSION_DENIED)]);
    assert_eq!(d.name_count(), 2, "a and the refused secret");
    let _ = d.handle_request(delta(&["secret"], &[], &r.nonce));
    let r = d.poll_response(&view, &mut n).unwrap();
    assert_eq!(present(&r), ["secret"]);
    assert_eq!(d.name_count(), 2, "the refusal is forgotten once the name is taken");
}
