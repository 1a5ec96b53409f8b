//! The whole stream on a virtual clock: ordering across types, ACK gating, timers and events.
//!
//! Time is a value these tests move by hand; nothing sleeps.
#![allow(clippy::unwrap_used)]

mod util;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use util::*;
use xds_core::{
    Delta, DeltaResponse, Event, Outgoing, Protocol, Resource, Sotw, SotwNames, SotwResponse,
    Stream, StreamConfig, StreamError, TypeKey, TypeRole, TypeTraits, View, Views,
};

/// The types of these tests, in make-before-break order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum T {
    Cds,
    Eds,
    Lds,
    Rds,
    Vhds,
}

impl TypeKey for T {
    fn type_url(&self) -> &str {
        match self {
            T::Cds => "test.Cluster",
            T::Eds => "test.Endpoints",
            T::Lds => "test.Listener",
            T::Rds => "test.Route",
            T::Vhds => "test.VirtualHost",
        }
    }
    fn traits(&self) -> TypeTraits {
        match self {
            T::Cds => CDS,
            T::Eds => EDS,
            T::Lds => LDS,
            T::Rds => RDS,
            T::Vhds => VHDS,
        }
    }
    fn role(&self) -> TypeRole {
        match self {
            T::Cds | T::Eds => TypeRole::RemovedLast,
            T::Rds => TypeRole::RouteConfiguration,
            T::Vhds => TypeRole::VirtualHost,
            T::Lds => TypeRole::Other,
        }
    }
}

/// The views of every type: what the caches would lend.
#[derive(Default)]
struct World(BTreeMap<T, MemView>);

impl World {
    fn view(&mut self, t: T) -> &mut MemView {
        self.0.entry(t).or_default()
    }
}

impl Views<T> for World {
    type Resource = Res;
    fn read(&mut self, t: &T, f: &mut dyn FnMut(&dyn View<Resource = Res>)) {
        if let Some(view) = self.0.get(t) {
            f(view);
        }
    }
}

/// A stream, its world and a virtual clock.
struct Harness<P: Protocol> {
    stream: Stream<&'static str, T, P, Res>,
    world: World,
    now: Instant,
}

impl<P: Protocol> Harness<P> {
    fn ads() -> Self {
        let now = Instant::now();
        Harness {
            stream: Stream::aggregated(StreamConfig::default(), now),
            world: World::default(),
            now,
        }
    }

    fn per_type(t: T) -> Self {
        let now = Instant::now();
        Harness {
            stream: Stream::per_type(&t, StreamConfig::default(), now),
            world: World::default(),
            now,
        }
    }

    fn request(&mut self, t: T, request: P::Request) {
        let admitted = self.stream.admit(Some("node"), t.type_url(), 0, self.now).unwrap();
        assert_eq!(admitted.type_url, t.type_url());
        self.stream.handle_request(t, request, self.now).unwrap();
    }

    /// Everything the stream owes now, in order.
    fn responses(&mut self) -> Vec<Outgoing<T, P::Response<Res>>> {
        let mut out = Vec::new();
        while let Some(o) = self.stream.poll_response(&mut self.world, self.now) {
            out.push(o);
            assert!(out.len() <= 5, "at most one response per type");
        }
        out
    }

    /// The version and nonce of the latest response of `t`.
    fn last_sent(&self, t: T) -> (String, String) {
        let (_, sub) = self.stream.sub_streams().find(|(k, _)| **k == t).unwrap();
        (sub.last_sent_version().unwrap().to_owned(), sub.last_nonce().unwrap().to_owned())
    }

    fn events(&mut self) -> Vec<Event<T>> {
        std::iter::from_fn(|| self.stream.poll_event()).collect()
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
    }
}

fn types<R>(out: &[Outgoing<T, R>]) -> Vec<T> {
    out.iter().map(|o| o.type_key).collect()
}

fn ttl_world(ttl: Duration) -> World {
    let mut world = World::default();
    let eds = world.view(T::Eds);
    eds.set("a", "1");
    eds.ttls.insert("a".into(), ttl);
    world
}

#[test]
fn s06_heartbeat_due_while_a_response_is_in_flight_goes_after_the_ack_without_spinning() {
    let mut h = Harness::<Sotw>::ads();
    h.world = ttl_world(Duration::from_secs(2));
    h.request(T::Eds, sotw(&["a"], "", ""));
    let first = h.responses();
    assert_eq!(first.len(), 1);
    let r = &first[0].response;
    // The client does not answer; the heartbeat's time (half the TTL) passes.
    h.advance(Duration::from_secs(5));
    // Nothing to wake for: a past due time here is what made the old loop spin.
    assert_eq!(h.stream.poll_timeout(), None);
    h.stream.handle_timeout(h.now);
    assert!(h.responses().is_empty(), "one response in flight per type, heartbeats included");
    assert_eq!(h.stream.poll_timeout(), None);
    // The ACK: the heartbeat is overdue, and goes now.
    let (version, nonce) = (r.version_info.clone(), r.nonce.clone());
    h.request(T::Eds, sotw(&["a"], &version, &nonce));
    let due = h.stream.poll_timeout().expect("a heartbeat is due");
    assert!(due <= h.now);
    h.stream.handle_timeout(h.now);
    assert_eq!(h.stream.poll_timeout(), None, "owed, not due again");
    let hb = h.responses();
    assert_eq!(hb.len(), 1);
    assert!(hb[0].response.heartbeat);
    assert_eq!(sotw_names(&hb[0].response), ["a"]);
    // In flight again: no timer until it is answered, then the next one a half-TTL later.
    assert_eq!(h.stream.poll_timeout(), None);
    let nonce = hb[0].response.nonce.clone();
    h.request(T::Eds, sotw(&["a"], &version, &nonce));
    assert_eq!(h.stream.poll_timeout(), Some(h.now + Duration::from_secs(1)));
    h.stream.handle_timeout(h.now);
    assert!(h.responses().is_empty(), "not due yet");
}

#[test]
fn s06_heartbeat_is_not_sent_before_it_is_due() {
    let mut h = Harness::<Delta>::ads();
    h.world = ttl_world(Duration::from_secs(10));
    h.request(T::Eds, delta(&["a"], &[], ""));
    let r = h.responses().remove(0).response;
    h.request(T::Eds, delta(&[], &[], &r.nonce));
    assert_eq!(h.stream.poll_timeout(), Some(h.now + Duration::from_secs(5)));
    h.advance(Duration::from_secs(4));
    h.stream.handle_timeout(h.now);
    assert!(h.responses().is_empty());
    h.advance(Duration::from_secs(1));
    h.stream.handle_timeout(h.now);
    let hb = h.responses();
    assert!(hb.len() == 1 && hb[0].response.heartbeat);
}

#[test]
fn s04_ack_gating_one_response_in_flight_per_type_latest_wins() {
    let mut h = Harness::<Delta>::ads();
    h.world.view(T::Eds).set("a", "1");
    h.request(T::Eds, delta(&["a"], &[], ""));
    let r1 = h.responses().remove(0).response;
    assert_eq!(delta_items(&r1), [("a".into(), Some("1".into()))]);
    // Two changes while the client has not answered: nothing goes.
    h.world.view(T::Eds).set("a", "2");
    assert!(h.responses().is_empty());
    h.world.view(T::Eds).set("a", "3");
    assert!(h.responses().is_empty());
    // Another type is not held back by it.
    h.world.view(T::Lds).set("l", "1");
    h.request(T::Lds, delta(&["l"], &[], ""));
    assert_eq!(types(&h.responses()), [T::Lds]);
    // The ACK: one response, with the newest version only.
    h.request(T::Eds, delta(&[], &[], &r1.nonce));
    let out = h.responses();
    assert_eq!(types(&out), [T::Eds]);
    assert_eq!(delta_items(&out[0].response), [("a".into(), Some("3".into()))]);
}

#[test]
fn s04_events_report_acks_with_their_latency_nacks_and_sends_in_order() {
    let mut h = Harness::<Sotw>::ads();
    h.world.view(T::Eds).set("a", "1");
    h.request(T::Eds, sotw(&["a"], "", ""));
    let r = h.responses().remove(0).response;
    h.advance(Duration::from_millis(250));
    h.request(T::Eds, sotw_nack(&["a"], "", &r.nonce, "bad"));
    h.world.view(T::Eds).set("a", "2");
    let r2 = h.responses().remove(0).response;
    h.advance(Duration::from_millis(100));
    // An ACK that also subscribes to another name: a `Request`, then the answer. The NACK above
    // changed no name: its answer alone reports it.
    h.request(T::Eds, sotw(&["a", "b"], &r2.version_info, &r2.nonce));
    let request = |subscribed: &[&str]| Event::Request {
        type_key: T::Eds,
        subscribed: names(subscribed).into(),
        unsubscribed: Vec::new(),
    };
    let sent = |r: &SotwResponse<Res>| Event::Sent {
        type_key: T::Eds,
        version: r.version_info.clone(),
        nonce: r.nonce.clone(),
        resources: 1,
        heartbeat: false,
    };
    assert_eq!(
        h.events(),
        [
            request(&["a"]),
            sent(&r),
            Event::Nack {
                type_key: T::Eds,
                rejected_version: r.version_info.clone(),
                kept_version: Default::default(),
                nonce: r.nonce.clone(),
                error: xds_core::ErrorDetail { code: 3, message: "bad".into() },
            },
            sent(&r2),
            request(&["b"]),
            Event::Ack {
                type_key: T::Eds,
                version: r2.version_info.clone(),
                nonce: r2.nonce.clone(),
                latency: Some(Duration::from_millis(100)),
            },
        ]
    );
}

/// A stream's sub-streams are kept in their types' order whatever order the client opened them
/// in (rounds go in that order: rule O1), and each is found by its type.
#[test]
fn o1_sub_streams_are_kept_in_type_order_whatever_order_they_open_in() {
    let mut h = Harness::<Delta>::ads();
    for t in [T::Vhds, T::Eds, T::Lds, T::Cds, T::Rds] {
        assert!(!h.stream.has_type(&t));
        h.request(t, delta(&["x"], &[], ""));
        assert!(h.stream.has_type(&t));
    }
    let order: Vec<T> = h.stream.sub_streams().map(|(t, _)| *t).collect();
    assert_eq!(order, [T::Cds, T::Eds, T::Lds, T::Rds, T::Vhds]);
    // A second request of a type opens nothing new.
    h.request(T::Eds, delta(&["y"], &[], ""));
    let names: Vec<usize> =
        h.stream.sub_streams().map(|(_, s)| s.subscription().names().len()).collect();
    assert_eq!(names, [1, 2, 1, 1, 1]);
}

/// An ADS client holding clusters c1, c2 (with endpoints) and a listener routing to c1 and c2,
/// each response ACKed (the ACKs not yet taken in by a round).
fn ads_with_two_clusters() -> Harness<Delta> {
    let mut h = Harness::<Delta>::ads();
    for (t, names_) in [(T::Cds, ["c1", "c2"]), (T::Eds, ["c1", "c2"])] {
        for n in names_ {
            h.world.view(t).set(n, "1");
        }
    }
    h.world.view(T::Lds).set("l", "1");
    h.request(T::Cds, delta(&["*"], &[], ""));
    h.request(T::Eds, delta(&["c1", "c2"], &[], ""));
    h.request(T::Lds, delta(&["*"], &[], ""));
    let out = h.responses();
    assert_eq!(types(&out), [T::Cds, T::Eds, T::Lds]);
    ack_all(&mut h, &[T::Cds, T::Eds, T::Lds], &out);
    h
}

fn ack_all(h: &mut Harness<Delta>, ts: &[T], responses: &[Outgoing<T, DeltaResponse<Res>>]) {
    for (t, o) in ts.iter().zip(responses) {
        h.request(*t, delta(&[], &[], &o.response.nonce));
    }
}

#[test]
fn o1_removals_wait_until_the_referring_types_are_acked_then_go() {
    let mut h = ads_with_two_clusters();
    // One update: c2 goes, and the listener stops routing to it.
    h.world.view(T::Cds).delete("c2");
    h.world.view(T::Eds).delete("c2");
    h.world.view(T::Lds).set("l", "2");
    let out = h.responses();
    assert_eq!(types(&out), [T::Lds], "clusters and endpoints wait for the listener");
    // Still waiting while the listener is in flight, however often asked.
    assert!(h.responses().is_empty());
    ack_all(&mut h, &[T::Lds], &out);
    let out = h.responses();
    assert_eq!(types(&out), [T::Cds, T::Eds], "then the removals go");
    for o in &out {
        assert_eq!(o.response.removed_resources, ["c2"]);
    }
}

/// One round by hand, as a server drives it: the types read, in order, and the responses.
fn round<P: Protocol>(h: &mut Harness<P>) -> (Vec<T>, Vec<T>) {
    let (read, sent) = round_marked(h);
    (read.into_iter().map(|(t, _)| t).collect(), sent)
}

/// ACKs the response of type `t` in flight.
fn ack(h: &mut Harness<Delta>, t: T) {
    let (_, nonce) = h.last_sent(t);
    h.request(t, delta(&[], &[], &nonce));
}

/// An ADS SotW stream whose Cluster view has `a` and `b`, subscribed to `a` and sent it in one
/// round: the stream, and the response's version and nonce.
fn sotw_sent_a() -> (Harness<Sotw>, String, String) {
    let mut h = Harness::<Sotw>::ads();
    h.world.view(T::Cds).set("a", "1");
    h.world.view(T::Cds).set("b", "1");
    h.request(T::Cds, sotw(&["a"], "", ""));
    assert_eq!(round(&mut h), (vec![T::Cds], vec![T::Cds]));
    let (version, nonce) = h.last_sent(T::Cds);
    (h, version, nonce)
}

/// A SotW ACK of `version` and `nonce` that repeats the client's list, as a server that
/// recognised the list by its bytes hands it to the core.
fn sotw_repeating(version: &str, nonce: &str) -> xds_core::SotwRequest {
    let mut repeated = sotw(&[], version, nonce);
    repeated.resource_names = SotwNames::Repeated;
    repeated
}

/// Woken by a request rather than by its cache, a server says so, and the round reads only the
/// requested type; the next round reads every type again. Rule O1's removals still go when the
/// referring type's ACK makes the other types quiet.
#[test]
fn o1_a_round_after_views_unchanged_reads_only_the_types_requested_since() {
    let mut h = ads_with_two_clusters();
    h.stream.views_unchanged();
    assert_eq!(round(&mut h), (vec![T::Cds, T::Eds, T::Lds], vec![]), "all three were requested");
    // A new name subscribed: that type only.
    h.world.view(T::Eds).set("c3", "1");
    h.request(T::Eds, delta(&["c3"], &[], ""));
    h.stream.views_unchanged();
    assert_eq!(round(&mut h), (vec![T::Eds], vec![T::Eds]));
    ack(&mut h, T::Eds);
    // Said for one round only: the next reads every type.
    assert_eq!(round(&mut h), (vec![T::Cds, T::Eds, T::Lds], vec![]));
    h.stream.views_unchanged();
    assert_eq!(round(&mut h), (vec![], vec![]), "nothing requested since");

    h.world.view(T::Cds).delete("c2");
    h.world.view(T::Eds).delete("c2");
    h.world.view(T::Lds).set("l", "2");
    // The cache changed: every type is read; the removals wait for the listener.
    assert_eq!(round(&mut h), (vec![T::Cds, T::Eds, T::Lds], vec![T::Lds]));
    ack(&mut h, T::Lds);
    h.stream.views_unchanged();
    // The listener's ACK owes nothing of its own (rule S6: it is not read); the removals held
    // back go.
    assert_eq!(round(&mut h), (vec![T::Cds, T::Eds], vec![T::Cds, T::Eds]));
}

/// Rule S6 with the round skipped: after each request a server says the views unchanged and
/// asks whether that round would owe nothing (`views_unchanged_quietly`); a quiet round is the
/// round `views_unchanged` would run that reads nothing and sends nothing, and is skipped. The
/// harness beside it runs every round; both must send the same responses at every step, and
/// the round woken by the cache after a quiet one must read every type (the saying is spent).
#[test]
fn s06_a_round_found_quiet_is_the_round_that_reads_nothing() {
    let (mut quiet, mut every) = (ads_with_two_clusters(), ads_with_two_clusters());
    // Rounds of both after a request: the skipped one's, and the one that ran.
    fn after_request(quiet: &mut Harness<Delta>, every: &mut Harness<Delta>) -> bool {
        let skipped = quiet.stream.views_unchanged_quietly();
        every.stream.views_unchanged();
        let ran = round(every);
        if skipped {
            assert_eq!(ran, (vec![], vec![]), "a quiet round reads and sends nothing");
        } else {
            assert_eq!(round(quiet), ran);
        }
        skipped
    }
    fn both(hs: [&mut Harness<Delta>; 2], f: impl Fn(&mut Harness<Delta>)) {
        for h in hs {
            f(h);
        }
    }
    // The setup's responses were in flight at its last round: each ACK is read once.
    assert!(!after_request(&mut quiet, &mut every));
    // A change, then its ACK: quiet.
    both([&mut quiet, &mut every], |h| h.world.view(T::Lds).set("l", "2"));
    assert_eq!(round(&mut quiet), round(&mut every));
    both([&mut quiet, &mut every], |h| ack(h, T::Lds));
    assert!(after_request(&mut quiet, &mut every), "a synced client's ACK");
    // The cache's next change: every type is read by both, the saying spent by the quiet one.
    both([&mut quiet, &mut every], |h| h.world.view(T::Cds).set("c3", "1"));
    let woken = round(&mut every);
    assert_eq!(woken, (vec![T::Cds, T::Eds, T::Lds], vec![T::Cds]));
    assert_eq!(round(&mut quiet), woken);
    // A change that found the response in flight is owed at the ACK: not quiet.
    both([&mut quiet, &mut every], |h| h.world.view(T::Cds).set("c3", "2"));
    assert_eq!(round(&mut quiet), round(&mut every));
    both([&mut quiet, &mut every], |h| ack(h, T::Cds));
    assert!(!after_request(&mut quiet, &mut every), "owed at the ACK");
    both([&mut quiet, &mut every], |h| ack(h, T::Cds));
    assert!(after_request(&mut quiet, &mut every));
    // A name subscribed: its type is read.
    both([&mut quiet, &mut every], |h| h.request(T::Eds, delta(&["c3"], &[], "")));
    assert!(!after_request(&mut quiet, &mut every), "a subscription changed");
    both([&mut quiet, &mut every], |h| ack(h, T::Eds));
    assert!(after_request(&mut quiet, &mut every));
    // Rule O1: the listener's ACK lets the removals held back go.
    both([&mut quiet, &mut every], |h| {
        h.world.view(T::Cds).delete("c2");
        h.world.view(T::Eds).delete("c2");
        h.world.view(T::Lds).set("l", "3");
    });
    assert_eq!(round(&mut quiet), round(&mut every));
    both([&mut quiet, &mut every], |h| ack(h, T::Lds));
    assert!(!after_request(&mut quiet, &mut every), "the removals fall due");
}

/// Rule S6's quiet round on the other kinds of stream: a per-type delta stream (no rule O1 to
/// wait for), SotW (an ACK that repeats its list), and a TTL heartbeat falling due, which a
/// quiet round must not swallow.
#[test]
fn s06_a_round_found_quiet_on_per_type_and_sotw_streams_and_heartbeats() {
    let mut h = Harness::<Delta>::per_type(T::Eds);
    h.world.view(T::Eds).set("a", "1");
    h.request(T::Eds, delta(&["a"], &[], ""));
    assert_eq!(round(&mut h), (vec![T::Eds], vec![T::Eds]));
    ack(&mut h, T::Eds);
    assert!(h.stream.views_unchanged_quietly(), "a synced client's ACK");
    h.world.view(T::Eds).set("a", "2");
    assert_eq!(round(&mut h), (vec![T::Eds], vec![T::Eds]), "the saying was spent");
    h.world.view(T::Eds).set("a", "3");
    assert_eq!(round(&mut h), (vec![T::Eds], vec![]), "in flight");
    ack(&mut h, T::Eds);
    assert!(!h.stream.views_unchanged_quietly(), "owed at the ACK");
    assert_eq!(round(&mut h), (vec![T::Eds], vec![T::Eds]));

    let (mut h, version, nonce) = sotw_sent_a();
    h.request(T::Cds, sotw_repeating(&version, &nonce));
    assert!(h.stream.views_unchanged_quietly(), "an ACK that repeats its list");
    h.request(T::Cds, sotw(&["a", "b"], &version, &nonce));
    assert!(!h.stream.views_unchanged_quietly(), "a name added");
    assert_eq!(round(&mut h), (vec![T::Cds], vec![T::Cds]));

    let mut h = Harness::<Sotw>::ads();
    h.world = ttl_world(Duration::from_secs(2));
    h.request(T::Eds, sotw(&["a"], "", ""));
    assert_eq!(round(&mut h), (vec![T::Eds], vec![T::Eds]));
    let (version, nonce) = h.last_sent(T::Eds);
    h.request(T::Eds, sotw_repeating(&version, &nonce));
    assert!(h.stream.views_unchanged_quietly(), "the ACK");
    h.advance(Duration::from_secs(5));
    h.stream.handle_timeout(h.now);
    assert!(!h.stream.views_unchanged_quietly(), "a heartbeat due");
    assert_eq!(round(&mut h), (vec![T::Eds], vec![T::Eds]));
}

/// A delta ACK read without being decoded is taken in as the request it stands for: the same
/// events (an ACK with its latency, or a stale answer), the same verdict on the round after it
/// (`views_unchanged_quietly`: a change that found the response in flight is owed at the ACK,
/// and must not be found quiet), and the same responses. A type the stream has not opened
/// takes it as that request (its first).
#[test]
fn d01_an_ack_taken_without_its_request_is_the_request_taken() {
    // One answer to `t`'s response of `nonce`, taken by each harness its own way.
    fn answer(
        taken: &mut Harness<Delta>,
        requested: &mut Harness<Delta>,
        t: T,
        nonce: &str,
    ) -> (Vec<Event<T>>, bool) {
        for h in [&mut *taken, &mut *requested] {
            h.advance(Duration::from_millis(3));
        }
        taken.stream.admit(Some("node"), t.type_url(), 0, taken.now).unwrap();
        taken.stream.take_ack(&t, nonce.into(), taken.now).unwrap();
        requested.request(t, delta(&[], &[], nonce));
        let events = taken.events();
        assert_eq!(events, requested.events());
        let quiet = taken.stream.views_unchanged_quietly();
        assert_eq!(quiet, requested.stream.views_unchanged_quietly(), "{t:?} {nonce}");
        assert_eq!(round(taken), round(requested));
        (events, quiet)
    }
    // A change to both, and the round it wakes (one, as a server's cache wakes one): the same
    // responses.
    fn change(taken: &mut Harness<Delta>, requested: &mut Harness<Delta>, f: &dyn Fn(&mut World)) {
        let mut outs = Vec::new();
        for h in [&mut *taken, &mut *requested] {
            f(&mut h.world);
            while let Some(r) = h.stream.next_read() {
                let view = h.world.0.get(&r.type_key).map(|v| v as &dyn View<Resource = Res>);
                h.stream.respond(&r, view, h.now);
            }
            let out: Vec<_> = std::iter::from_fn(|| h.stream.poll_ready()).collect();
            assert_eq!(out.len(), 1, "{out:?}");
            outs.push(format!("{out:?}"));
        }
        assert_eq!(outs[0], outs[1]);
        assert_eq!(taken.events(), requested.events());
    }
    let sent = |h: &Harness<Delta>, t: T| h.last_sent(t).1;
    let (mut taken, mut requested) = (ads_with_two_clusters(), ads_with_two_clusters());
    assert_eq!(round(&mut taken), round(&mut requested));

    change(&mut taken, &mut requested, &|w| w.view(T::Lds).set("l", "2"));
    let nonce = sent(&taken, T::Lds);
    let (acked, quiet) = answer(&mut taken, &mut requested, T::Lds, &nonce);
    let latency = Some(Duration::from_millis(3));
    assert!(
        matches!(&acked[..], [Event::Ack { type_key: T::Lds, latency: l, .. }] if *l == latency),
        "{acked:?}"
    );
    assert!(quiet, "a synced client's ACK");

    change(&mut taken, &mut requested, &|w| w.view(T::Cds).set("c3", "1"));
    let (stale, _) = answer(&mut taken, &mut requested, T::Cds, "1");
    assert!(matches!(&stale[..], [Event::Stale { type_key: T::Cds }]), "{stale:?}");
    let nonce = sent(&taken, T::Cds);
    // The round after the stale answer found the response in flight: its ACK reads the type.
    assert!(!answer(&mut taken, &mut requested, T::Cds, &nonce).1, "answered late");

    // A change that finds the response in flight: owed at the ACK, sent by the round after it.
    change(&mut taken, &mut requested, &|w| w.view(T::Cds).set("c3", "2"));
    taken.world.view(T::Cds).set("c3", "3");
    requested.world.view(T::Cds).set("c3", "3");
    assert_eq!(round(&mut taken), (vec![T::Cds, T::Eds, T::Lds], vec![]), "in flight");
    assert_eq!(round(&mut requested), (vec![T::Cds, T::Eds, T::Lds], vec![]));
    let nonce = sent(&taken, T::Cds);
    let (_, quiet) = answer(&mut taken, &mut requested, T::Cds, &nonce);
    assert!(!quiet, "owed at the ACK");

    // A type not opened: the ACK is its first request (of the routes' type: it names nothing).
    taken.world.view(T::Rds).set("r", "1");
    requested.world.view(T::Rds).set("r", "1");
    answer(&mut taken, &mut requested, T::Rds, "9");
}

/// Rule S6 on SotW: an ACK that repeats its list (a server recognises the list by its bytes)
/// owes nothing, and a round after it that knows the views unchanged reads nothing; an ACK that
/// lists other names is read, and owes what it added.
#[test]
fn s06_a_sotw_ack_that_repeats_its_list_owes_nothing() {
    let (mut h, version, nonce) = sotw_sent_a();
    h.request(T::Cds, sotw_repeating(&version, &nonce));
    h.stream.views_unchanged();
    assert_eq!(round(&mut h), (vec![], vec![]), "an ACK alone");
    h.request(T::Cds, sotw(&["a", "b"], &version, &nonce));
    h.stream.views_unchanged();
    assert_eq!(round(&mut h), (vec![T::Cds], vec![T::Cds]), "a name added");
}

/// [`round`], with whether each read needs a change to owe anything (`Read::needs_change`):
/// every type is read, as a server whose cache cannot tell what changed reads them.
fn round_marked<P: Protocol>(h: &mut Harness<P>) -> (Vec<(T, bool)>, Vec<T>) {
    let mut read = Vec::new();
    while let Some(r) = h.stream.next_read() {
        read.push((r.type_key, r.needs_change()));
        let view = h.world.0.get(&r.type_key).map(|v| v as &dyn View<Resource = Res>);
        h.stream.respond(&r, view, h.now);
    }
    let sent = std::iter::from_fn(|| h.stream.poll_ready()).map(|o| o.type_key).collect();
    (read, sent)
}

/// Rule S6: the ACK of a client that was sent everything its view had owes nothing, so a round
/// after it that knows the views unchanged reads no type. A change that found the response in
/// flight is owed at the ACK: that round reads the type, and sends it. A round woken by the
/// cache says of each type whether only a change can owe it anything, so that a server whose
/// cache marks changes reads only the changed types.
#[test]
fn s06_an_ack_owes_nothing_unless_a_change_found_its_response_in_flight() {
    let mut h = ads_with_two_clusters();
    // The setup's last poll found the three responses in flight: each ACK is read.
    h.stream.views_unchanged();
    assert_eq!(round(&mut h), (vec![T::Cds, T::Eds, T::Lds], vec![]));
    let quiet = vec![(T::Cds, true), (T::Eds, true), (T::Lds, true)];
    assert_eq!(round_marked(&mut h), (quiet.clone(), vec![]), "a change alone owes anything");
    h.world.view(T::Lds).set("l", "2");
    assert_eq!(round_marked(&mut h), (quiet.clone(), vec![T::Lds]));
    ack(&mut h, T::Lds);
    h.stream.views_unchanged();
    assert_eq!(round(&mut h), (vec![], vec![]), "the ACK alone owes nothing");

    // A change while the listener is in flight.
    h.world.view(T::Lds).set("l", "3");
    assert_eq!(round_marked(&mut h), (quiet.clone(), vec![T::Lds]));
    h.world.view(T::Lds).set("l", "4");
    assert_eq!(round_marked(&mut h), (quiet, vec![]), "in flight: held back");
    ack(&mut h, T::Lds);
    h.stream.views_unchanged();
    assert_eq!(round_marked(&mut h), (vec![(T::Lds, false)], vec![T::Lds]), "owed at the ACK");

    // Anything else a request asks is owed whatever the view: a name subscribed again is
    // resent (rule D2), and its round reads the type.
    ack(&mut h, T::Lds);
    h.request(T::Eds, delta(&["c1"], &[], ""));
    h.stream.views_unchanged();
    assert_eq!(round_marked(&mut h), (vec![(T::Eds, false)], vec![T::Eds]));
}

#[test]
fn o1_removals_alone_go_at_once() {
    let mut h = ads_with_two_clusters();
    // Nothing refers to c2 any more and nothing else changes: nothing to wait for.
    h.world.view(T::Cds).delete("c2");
    let out = h.responses();
    assert_eq!(types(&out), [T::Cds]);
    assert_eq!(out[0].response.removed_resources, ["c2"]);
}

#[test]
fn d10_virtual_hosts_are_resent_after_a_route_configuration_change() {
    let mut h = Harness::<Delta>::ads();
    h.world.view(T::Rds).set("rc", "1");
    h.world.view(T::Vhds).set("rc/a", "1");
    h.world.view(T::Vhds).set("other/b", "1");
    h.request(T::Rds, delta(&["rc"], &[], ""));
    h.request(T::Vhds, delta(&["rc/a", "other/b"], &[], ""));
    let out = h.responses();
    assert_eq!(types(&out), [T::Rds, T::Vhds]);
    ack_all(&mut h, &[T::Rds, T::Vhds], &out);
    assert!(h.responses().is_empty(), "nothing changed");
    // The route configuration changes; its virtual hosts do not.
    h.world.view(T::Rds).set("rc", "2");
    let out = h.responses();
    assert_eq!(types(&out), [T::Rds, T::Vhds], "the client dropped rc's virtual hosts");
    assert_eq!(delta_names(&out[1].response), ["rc/a"], "only rc's");
}

/// Rule D10 in a round that reads only the requested type: the route configuration's ACK lets
/// its change go, and its virtual hosts are owed in the same round.
#[test]
fn d10_virtual_hosts_are_resent_in_a_round_of_the_route_configuration_alone() {
    let mut h = Harness::<Delta>::ads();
    h.world.view(T::Rds).set("rc", "1");
    h.world.view(T::Vhds).set("rc/a", "1");
    h.request(T::Rds, delta(&["rc"], &[], ""));
    h.request(T::Vhds, delta(&["rc/a"], &[], ""));
    let out = h.responses();
    assert_eq!(types(&out), [T::Rds, T::Vhds]);
    h.request(T::Vhds, delta(&[], &[], &out[1].response.nonce));
    // The route configuration changes while its response awaits the ACK.
    h.world.view(T::Rds).set("rc", "2");
    assert_eq!(round(&mut h), (vec![T::Rds, T::Vhds], vec![]));
    h.request(T::Rds, delta(&[], &[], &out[0].response.nonce));
    h.stream.views_unchanged();
    assert_eq!(round(&mut h), (vec![T::Rds, T::Vhds], vec![T::Rds, T::Vhds]));
}

#[test]
fn s02_s03_admit_checks_node_type_and_limits() {
    let now = Instant::now();
    let config = StreamConfig::default()
        .max_names_per_request(2)
        .request_burst(3)
        .max_requests_per_second(1);
    let mut cds: Stream<&str, T, Sotw, Res> = Stream::per_type(&T::Cds, config, now);
    assert_eq!(cds.admit(None, "", 0, now), Err(StreamError::MissingNode));
    let admitted = cds.admit(Some("n"), "", 0, now).unwrap();
    assert!(admitted.first && admitted.type_url == "test.Cluster");
    assert_eq!(cds.admit(None, "", 3, now), Err(StreamError::TooManyNames { max: 2, got: 3 }));
    assert_eq!(cds.admit(None, "", 0, now), Err(StreamError::RateLimited { rate: 1, burst: 3 }));
    let later = now + Duration::from_secs(1);
    let admitted = cds.admit(None, "test.Cluster", 0, later).unwrap();
    assert!(!admitted.first);
    assert_eq!(cds.node(), Some(&"n"));
}

#[test]
fn o1_per_type_streams_do_not_defer_removals() {
    // A per-type stream never defers removals: there is nothing to order against.
    let now = Instant::now();
    let mut s: Stream<&str, T, Sotw, Res> = Stream::per_type(&T::Cds, StreamConfig::default(), now);
    let mut world = World::default();
    world.view(T::Cds).set("c1", "1");
    world.view(T::Cds).set("c2", "1");
    let _ = s.admit(Some("n"), "", 0, now).unwrap();
    s.handle_request(T::Cds, sotw(&[], "", ""), now).unwrap();
    let r = s.poll_response(&mut world, now).unwrap().response;
    assert_eq!(r.resources.iter().map(|r| r.name()).collect::<Vec<_>>(), ["c1", "c2"]);
    s.handle_request(T::Cds, sotw(&[], &r.version_info, &r.nonce), now).unwrap();
    world.view(T::Cds).delete("c2");
    let r = s.poll_response(&mut world, now).unwrap().response;
    assert_eq!(sotw_names(&r), ["c1"]);
}

#[test]
fn delta_subscriptions_are_bounded_across_requests() {
    // Each request is small, but delta subscriptions add up: the stream ends when one type's
    // subscription passes the limit, naming it.
    let now = Instant::now();
    let config = StreamConfig::default().max_subscribed_names(3);
    let mut s: Stream<&str, T, Delta, Res> = Stream::aggregated(config, now);
    let eds = T::Eds.type_url();
    let _ = s.admit(Some("n"), eds, 2, now).unwrap();
    s.handle_request(T::Eds, delta(&["a", "b"], &[], ""), now).unwrap();
    // Unsubscribing makes room; the same names again are no growth.
    s.handle_request(T::Eds, delta(&["c"], &["a"], ""), now).unwrap();
    s.handle_request(T::Eds, delta(&["b", "c", "d"], &[], ""), now).unwrap();
    let e = s.handle_request(T::Eds, delta(&["e"], &[], ""), now).unwrap_err();
    assert_eq!(
        e,
        StreamError::TooManySubscribed { max: 3, got: 4, type_url: eds.to_owned() },
        "{e}"
    );
    // Another type has its own count.
    s.handle_request(T::Cds, delta(&["x", "y", "z"], &[], ""), now).unwrap();
}

#[test]
fn c01_refused_names_count_against_the_subscription_bound() {
    // A refused xdstp name never enters the subscription, but the sub-stream remembers it so as
    // to tell of it once: it counts against the bound like a subscribed name.
    let now = Instant::now();
    let config = StreamConfig::default().max_subscribed_names(3);
    let mut s: Stream<&str, T, Delta, Res> = Stream::aggregated(config, now);
    let eds = T::Eds.type_url();
    let _ = s.admit(Some("n"), eds, 2, now).unwrap();
    s.handle_request(T::Eds, delta(&["a", "xdstp://auth/other.Type/x"], &[], ""), now).unwrap();
    let e = s
        .handle_request(T::Eds, delta(&["xdstp://auth/other.Type/y", "b"], &[], ""), now)
        .unwrap_err();
    assert!(matches!(e, StreamError::TooManySubscribed { max: 3, got: 4, .. }), "{e}");
}

/// What a client holds: per type, name -> version, and (SotW) the version of the type.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Held(BTreeMap<T, (BTreeMap<String, String>, String)>);

impl Held {
    fn of_world(world: &World, ts: &[T]) -> BTreeMap<T, BTreeMap<String, String>> {
        ts.iter()
            .map(|t| (*t, world.0.get(t).map(|v| v.resources.clone()).unwrap_or_default()))
            .collect()
    }
    fn resources(&self) -> BTreeMap<T, BTreeMap<String, String>> {
        self.0.iter().map(|(t, (r, _))| (*t, r.clone())).collect()
    }
}

/// Drives a SotW ADS stream of wildcard CDS and LDS until it is quiet: every response applied
/// to `held` (a full-state response replaces what the client had) and ACKed. Returns the
/// client's state after each response, in order.
fn sotw_drive(h: &mut Harness<Sotw>, held: &mut Held) -> Vec<Held> {
    let mut seen = Vec::new();
    loop {
        let out = h.responses();
        if out.is_empty() {
            return seen;
        }
        for o in out {
            let r = o.response.into_listed();
            let items = sotw_items(&r).into_iter().collect();
            held.0.insert(o.type_key, (items, r.version_info.to_string()));
            seen.push(held.clone());
            h.request(o.type_key, sotw(&[], &r.version_info, &r.nonce));
        }
    }
}

/// Rules S15, S16 and O1: a make-before-break update reaches a SotW CDS client as an interim
/// answer (old and new clusters) and then the final one. A client that reconnects with any
/// version it was sent during the update (before, interim, final) ends holding exactly the
/// configuration: the interim answer has a version of its own, so a resume at it is not taken
/// for a resume at the final state.
#[test]
fn s15_s16_o1_a_sotw_client_reconnecting_with_any_version_it_saw_ends_with_the_configuration() {
    let ts = [T::Cds, T::Lds];
    let mut h = Harness::<Sotw>::ads();
    h.world.view(T::Cds).set("keep", "1");
    h.world.view(T::Cds).set("old", "1");
    h.world.view(T::Lds).set("l", "1");
    let mut held = Held::default();
    h.request(T::Cds, sotw(&[], "", ""));
    h.request(T::Lds, sotw(&[], "", ""));
    let mut seen = sotw_drive(&mut h, &mut held);
    // One update: `old` is replaced by `new`, and the listener moves to it.
    h.world.view(T::Cds).set("new", "1");
    h.world.view(T::Cds).delete("old");
    h.world.view(T::Lds).set("l", "2");
    let during = sotw_drive(&mut h, &mut held);
    assert_eq!(held.resources(), Held::of_world(&h.world, &ts), "the first stream converges");
    // The update went out make-before-break: an interim CDS answer with `old` still in it,
    // under a version that is not the final one.
    let interim: Vec<&Held> =
        during.iter().filter(|s| s.0[&T::Cds].0.contains_key("old")).collect();
    assert!(!interim.is_empty(), "rule O1: the removal came in a later answer");
    let final_cds = &held.0[&T::Cds].1;
    for state in &interim {
        assert_ne!(
            &state.0[&T::Cds].1,
            final_cds,
            "rule S16: an interim state has its own version"
        );
    }
    seen.extend(during);
    for state in seen {
        let mut h2 = Harness::<Sotw>::ads();
        h2.world = World(h.world.0.clone());
        let mut client = state.clone();
        for t in ts {
            let version = state.0.get(&t).map_or("", |(_, v)| v.as_str());
            h2.request(t, sotw(&[], version, ""));
        }
        let _ = sotw_drive(&mut h2, &mut client);
        assert_eq!(
            client.resources(),
            Held::of_world(&h.world, &ts),
            "reconnected with {:?}",
            state.0.values().map(|(_, v)| v).collect::<Vec<_>>()
        );
    }
    // And a client that got the final answer resumes without being sent anything again.
    let mut h2 = Harness::<Sotw>::ads();
    h2.world = World(h.world.0.clone());
    for t in ts {
        h2.request(t, sotw(&[], &held.0[&t].1, ""));
    }
    assert!(h2.responses().is_empty(), "rule S15: nothing resent at the final version");
}

/// Drives a delta ADS stream until it is quiet, applying every response to `held` (entries
/// added or replaced, removals dropped) and ACKing it. Returns the state after each response.
fn delta_drive(h: &mut Harness<Delta>, held: &mut Held) -> Vec<Held> {
    let mut seen = Vec::new();
    loop {
        let out = h.responses();
        if out.is_empty() {
            return seen;
        }
        for o in out {
            let r = o.response.into_listed();
            let entry = held.0.entry(o.type_key).or_default();
            for (name, version) in delta_items(&r) {
                if let Some(version) = version {
                    entry.0.insert(name, version);
                }
            }
            for name in &r.removed_resources {
                entry.0.remove(name);
            }
            seen.push(held.clone());
            h.request(o.type_key, delta(&[], &[], &r.nonce));
        }
    }
}

/// Rules D7 and O1: the same on delta. A client that reconnects during a make-before-break
/// update, declaring in `initial_resource_versions` what it holds at any point of it, ends
/// holding exactly the configuration.
#[test]
fn d07_o1_a_delta_client_reconnecting_mid_update_ends_with_the_configuration() {
    let ts = [T::Cds, T::Eds, T::Lds];
    let mut h = Harness::<Delta>::ads();
    for n in ["keep", "old"] {
        h.world.view(T::Cds).set(n, "1");
        h.world.view(T::Eds).set(n, "1");
    }
    h.world.view(T::Lds).set("l", "1");
    let mut held = Held::default();
    h.request(T::Cds, delta(&["*"], &[], ""));
    h.request(T::Eds, delta(&["keep", "old", "new"], &[], ""));
    h.request(T::Lds, delta(&["*"], &[], ""));
    let mut seen = delta_drive(&mut h, &mut held);
    for t in [T::Cds, T::Eds] {
        h.world.view(t).set("new", "1");
        h.world.view(t).delete("old");
    }
    h.world.view(T::Lds).set("l", "2");
    let during = delta_drive(&mut h, &mut held);
    assert_eq!(held.resources(), Held::of_world(&h.world, &ts), "the first stream converges");
    assert!(
        during
            .iter()
            .any(|s| s.0[&T::Cds].0.contains_key("old") && s.0[&T::Cds].0.contains_key("new")),
        "rule O1: the removal came in a later answer"
    );
    seen.extend(during);
    for state in seen {
        let mut h2 = Harness::<Delta>::ads();
        h2.world = World(h.world.0.clone());
        let mut client = state.clone();
        for (t, names_) in
            [(T::Cds, vec!["*"]), (T::Eds, vec!["keep", "old", "new"]), (T::Lds, vec!["*"])]
        {
            let mut request = delta(&names_, &[], "");
            request.initial_resource_versions =
                state.0.get(&t).map(|(r, _)| r.clone()).unwrap_or_default();
            h2.request(t, request);
        }
        let _ = delta_drive(&mut h2, &mut client);
        assert_eq!(
            client.resources(),
            Held::of_world(&h.world, &ts),
            "reconnected holding {state:?}"
        );
    }
}
