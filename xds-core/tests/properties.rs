//! Property tests: over random request sequences and resource changes, the invariants the rules
//! promise hold.

mod util;

use std::collections::BTreeMap;

use proptest::prelude::*;
use util::*;
use xds_core::{
    DeltaRequest, DeltaResource, DeltaResponse, DeltaSubStream, Nonces, RequestKind, SotwResponse,
    SotwSubStream, TypeTraits, View,
};

const POOL: [&str; 5] = ["a", "b", "c", "d", "e"];

#[derive(Clone, Debug)]
enum Op {
    /// The client changes its subscription (SotW: a new full set; delta: subscribe/unsubscribe).
    Subscribe(Vec<usize>, bool),
    Unsubscribe(Vec<usize>, bool),
    /// A resource is created or updated to this version, or deleted.
    Set(usize, u8),
    Delete(usize),
    /// The client answers the latest response it got (ACK).
    Answer,
    /// The client sends a request with a nonce that is not the latest.
    Stale,
}

fn op() -> impl Strategy<Value = Op> {
    let names = proptest::collection::vec(0..POOL.len(), 0..4);
    prop_oneof![
        (names.clone(), any::<bool>()).prop_map(|(n, w)| Op::Subscribe(n, w)),
        (names, any::<bool>()).prop_map(|(n, w)| Op::Unsubscribe(n, w)),
        (0..POOL.len(), 0u8..3).prop_map(|(i, v)| Op::Set(i, v)),
        (0..POOL.len()).prop_map(Op::Delete),
        Just(Op::Answer),
        Just(Op::Answer),
        Just(Op::Stale),
    ]
}

fn traits() -> impl Strategy<Value = TypeTraits> {
    prop_oneof![Just(CDS), Just(EDS)]
}

fn pick(idx: &[usize], wildcard: bool) -> Vec<String> {
    let mut v: Vec<String> = idx.iter().map(|&i| POOL[i].to_string()).collect();
    if wildcard {
        v.push("*".into());
    }
    v
}

fn assert_unique<'a>(names: impl Iterator<Item = &'a str>) {
    let mut seen = std::collections::BTreeSet::new();
    for n in names {
        assert!(seen.insert(n.to_owned()), "rule S14: {n} twice in one response");
    }
}

/// What a delta client holds after applying responses.
fn apply_delta(client: &mut BTreeMap<String, String>, r: &DeltaResponse<Res>) {
    for e in &r.resources {
        match e {
            DeltaResource::Present { resource, .. } => {
                client.insert(resource.name.clone(), resource.version.clone());
            }
            DeltaResource::Absent { name, .. } => {
                client.remove(name);
            }
        }
    }
    for n in &r.removed_resources {
        client.remove(n);
    }
}

/// What a SotW client holds after applying a response.
fn apply_sotw(client: &mut BTreeMap<String, String>, r: &SotwResponse<Res>, full_state: bool) {
    if full_state {
        client.clear();
    }
    for x in &r.resources {
        client.insert(x.name.clone(), x.version.clone());
    }
}

/// The resources of `view` the sub-stream is subscribed to.
fn expected(view: &MemView, sub: &xds_core::Subscription) -> BTreeMap<String, String> {
    view.resources
        .iter()
        .filter(|(n, _)| sub.is_wildcard() || sub.has_name(n))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

/// A SotW list as the server passes it: `Repeated` when the sub-stream recognises it as its last
/// one (rule S9: the same set again), else the names.
fn as_server_sends(s: &SotwSubStream<Res>, names: &[String]) -> xds_core::SotwNames {
    if s.repeats_names(&xds_core::NamesDigest::of(names)) {
        xds_core::SotwNames::Repeated
    } else {
        names.to_vec().into()
    }
}

proptest! {
    // 256 cases by default; PROPTEST_CASES=100000 for a longer search.

    #[test]
    fn delta_client_converges_to_the_servers_view(t in traits(), no_set in any::<bool>(), shared in any::<bool>(), ops in proptest::collection::vec(op(), 1..40)) {
        let mut view = MemView { no_set, ..MemView::default() };
        let mut s = DeltaSubStream::new(t);
        // A response may carry the view's set whole; read as listed, it is the same.
        s.share_sets(shared);
        let mut n = Nonces::new();
        let mut client = BTreeMap::new();
        let mut last: Option<String> = None;
        let _ = s.handle_request(DeltaRequest::default());
        for op in ops {
            match op {
                Op::Subscribe(idx, w) => {
                    let _ = s.handle_request(DeltaRequest { subscribe: pick(&idx, w), ..Default::default() });
                    // Naming resources ends a legacy wildcard: the client drops the rest itself.
                    let sub = s.subscription().clone();
                    client.retain(|name: &String, _| sub.is_wildcard() || sub.has_name(name));
                }
                Op::Unsubscribe(idx, w) => {
                    let gone = pick(&idx, w);
                    let _ = s.handle_request(DeltaRequest { unsubscribe: gone.clone(), ..Default::default() });
                    // The client drops what it no longer wants.
                    let sub = s.subscription().clone();
                    client.retain(|name: &String, _| sub.is_wildcard() || sub.has_name(name));
                }
                Op::Set(i, v) => view.set(POOL[i], &v.to_string()),
                Op::Delete(i) => view.delete(POOL[i]),
                Op::Answer => if let Some(nonce) = last.take() {
                    let h = s.handle_request(delta(&[], &[], &nonce));
                    prop_assert!(matches!(h.kind, RequestKind::Ack { .. }), "expected an ACK");
                },
                Op::Stale => {
                    let before = s.clone();
                    let h = s.handle_request(delta(&[], &[], "stale-nonce"));
                    if s.last_nonce().is_some() {
                        prop_assert!(matches!(h.kind, RequestKind::Stale { .. }), "expected stale");
                    }
                    // Rule S7/D1: a stale request with no subscription change changes nothing.
                    let mut n1 = n.clone();
                    let mut n2 = n.clone();
                    prop_assert_eq!(s.clone().poll_response(&view, &mut n1), before.clone().poll_response(&view, &mut n2));
                }
            }
            if let Some(r) = s.poll_response(&view, &mut n).map(|r| r.into_listed()) {
                assert_unique(r.resources.iter().map(|e| e.name()).chain(r.removed_resources.iter().map(|s| s.as_str())));
                apply_delta(&mut client, &r);
                last = Some(r.nonce.to_string());
            }
        }
        // Quiesce: the client answers until nothing more is owed.
        for _ in 0..4 {
            if let Some(nonce) = last.take() {
                let _ = s.handle_request(delta(&[], &[], &nonce));
            }
            if let Some(r) = s.poll_response(&view, &mut n).map(|r| r.into_listed()) {
                apply_delta(&mut client, &r);
                last = Some(r.nonce.to_string());
            }
        }
        prop_assert!(last.is_none(), "rule S6: an unchanged state keeps producing responses");
        prop_assert_eq!(client, expected(&view, s.subscription()));
    }

    #[test]
    fn sotw_client_converges_and_unchanged_state_sends_nothing(t in traits(), no_set in any::<bool>(), shared in any::<bool>(), ops in proptest::collection::vec(op(), 1..40)) {
        let mut view = MemView { no_set, ..MemView::default() };
        let mut s = SotwSubStream::new(t);
        s.share_sets(shared);
        let mut n = Nonces::new();
        let mut client = BTreeMap::new();
        let mut names: Vec<String> = Vec::new();
        let mut last: Option<SotwResponse<Res>> = None;
        let mut acked = String::new();
        let _ = s.handle_request(sotw(&[], "", ""));
        for op in ops {
            let nonce = |last: &Option<SotwResponse<Res>>| last.as_ref().map(|r| r.nonce.clone()).unwrap_or_default();
            match op {
                Op::Subscribe(idx, w) => {
                    names = pick(&idx, w);
                    let _ = s.handle_request(xds_core::SotwRequest { version_info: acked.clone().into(), resource_names: names.clone().into(), response_nonce: s.last_nonce().unwrap_or_default().to_owned().into(), error_detail: None, denied: Default::default() });
                    let sub = s.subscription().clone();
                    client.retain(|name: &String, _| sub.is_wildcard() || sub.has_name(name));
                }
                Op::Unsubscribe(..) => {}
                Op::Set(i, v) => view.set(POOL[i], &v.to_string()),
                Op::Delete(i) => view.delete(POOL[i]),
                Op::Answer => if let Some(r) = last.take() {
                    acked = r.version_info.to_string();
                    // As the server does: a list the sub-stream recognises goes as `Repeated`.
                    let resource_names = as_server_sends(&s, &names);
                    let h = s.handle_request(xds_core::SotwRequest { version_info: acked.clone().into(), resource_names, response_nonce: nonce(&Some(r)), error_detail: None, denied: Default::default() });
                    prop_assert!(matches!(h.kind, RequestKind::Ack { .. }), "expected an ACK");
                },
                Op::Stale => {
                    let before = s.clone();
                    let h = s.handle_request(sotw(&["a"], "", "stale-nonce"));
                    if s.last_nonce().is_some() {
                        prop_assert!(matches!(h.kind, RequestKind::Stale { .. }), "expected stale");
                        // Rule S7: ignored entirely.
                        let mut n1 = n.clone();
                        let mut n2 = n.clone();
                        prop_assert_eq!(s.clone().poll_response(&view, &mut n1), before.clone().poll_response(&view, &mut n2));
                    } else {
                        // Nothing sent yet: nothing can be stale; the request stands.
                        names = vec!["a".into()];
                        let sub = s.subscription().clone();
                        client.retain(|name: &String, _| sub.is_wildcard() || sub.has_name(name));
                    }
                }
            }
            if let Some(r) = s.poll_response(&view, &mut n).map(|r| r.into_listed()) {
                assert_unique(r.resources.iter().map(|x| x.name.as_str()));
                apply_sotw(&mut client, &r, t.full_state);
                last = Some(r);
            }
        }
        for _ in 0..4 {
            if let Some(r) = last.take() {
                acked = r.version_info.to_string();
                let resource_names = as_server_sends(&s, &names);
                let _ = s.handle_request(xds_core::SotwRequest { version_info: acked.clone().into(), resource_names, response_nonce: r.nonce.clone(), error_detail: None, denied: Default::default() });
            }
            if let Some(r) = s.poll_response(&view, &mut n).map(|r| r.into_listed()) {
                apply_sotw(&mut client, &r, t.full_state);
                last = Some(r);
            }
        }
        // Rule S6: at the current version with the same subscription, nothing more is sent.
        prop_assert!(last.is_none());
        let want = expected(&view, s.subscription());
        if t.full_state {
            prop_assert_eq!(client, want);
        } else {
            // Partial state: deletions are not announced, so the client may keep stale extras;
            // everything that exists is there at its current version.
            for (name, version) in &want {
                prop_assert_eq!(client.get(name), Some(version));
            }
        }
        let _ = acked;
        let _ = View::version(&view);
    }
}

proptest! {
    #[test]
    fn d07_reconnect_resends_nothing_the_client_holds(
        t in traits(),
        before in proptest::collection::vec((0..POOL.len(), 0u8..3), 0..6),
        after in proptest::collection::vec((0..POOL.len(), proptest::option::of(0u8..3)), 0..4),
        sub in proptest::collection::vec(0..POOL.len(), 0..4),
    ) {
        // A client converges on one stream, the stream breaks, resources change, it reconnects
        // declaring what it holds (rule D7).
        let mut view = MemView::default();
        for (i, v) in before {
            view.set(POOL[i], &v.to_string());
        }
        let names: Vec<&str> = sub.iter().map(|&i| POOL[i]).collect();
        let mut n = Nonces::new();
        let mut s = DeltaSubStream::new(t);
        let mut client = BTreeMap::new();
        let _ = s.handle_request(delta(&names, &[], ""));
        while let Some(r) = s.poll_response(&view, &mut n) {
            apply_delta(&mut client, &r);
            let _ = s.handle_request(delta(&[], &[], &r.nonce));
        }
        for (i, v) in after {
            match v {
                Some(v) => view.set(POOL[i], &v.to_string()),
                None => view.delete(POOL[i]),
            }
        }
        let mut s = DeltaSubStream::new(t);
        let _ = s.handle_request(DeltaRequest {
            subscribe: names.iter().map(|s| s.to_string()).collect(),
            initial_resource_versions: client.clone(),
            ..Default::default()
        });
        while let Some(r) = s.poll_response(&view, &mut n) {
            for e in &r.resources {
                if let DeltaResource::Present { resource, .. } = e {
                    prop_assert_ne!(client.get(&resource.name), Some(&resource.version), "resent a held resource");
                }
            }
            apply_delta(&mut client, &r);
            let _ = s.handle_request(delta(&[], &[], &r.nonce));
        }
        prop_assert_eq!(client, expected(&view, s.subscription()));
    }
}
