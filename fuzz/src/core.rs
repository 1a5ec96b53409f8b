//! The `core_sotw` and `core_delta` harnesses: a client and a changing [`MemView`] drive one
//! sub-stream through an arbitrary sequence of operations, and a model of the client checks what
//! the sub-stream answers (the invariants of `xds-core/tests/properties.rs`, and more).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use xds_core::{
    DeltaRequest, DeltaResource, DeltaResponse, DeltaSubStream, ErrorDetail, NamesDigest, Nonces,
    RequestKind, SotwNames, SotwRequest, SotwResponse, SotwSubStream, Subscription, TypeTraits,
    View, WILDCARD,
};

use crate::model::{MemView, POOL, Res};

/// At most this many operations per input: longer sequences add time, not states.
const MAX_OPS: usize = 64;

/// A name a request carries.
#[derive(Arbitrary, Debug, Clone)]
enum Name {
    /// One of the names resources may have.
    Pool(u8),
    /// The wildcard, `*`.
    Star,
    /// A name nothing has (or the empty string).
    Other(String),
}

impl Name {
    fn text(&self) -> String {
        match self {
            Name::Pool(i) => POOL[usize::from(*i) % POOL.len()].to_owned(),
            Name::Star => WILDCARD.to_owned(),
            Name::Other(s) => s.chars().take(8).collect(),
        }
    }
}

fn texts(names: &[Name]) -> Vec<String> {
    names.iter().take(8).map(Name::text).collect()
}

/// The nonce a request carries.
#[derive(Arbitrary, Debug, Clone)]
enum NonceChoice {
    /// The nonce of the latest response the client got (an ACK or NACK of it).
    Latest,
    /// None: a first or spontaneous request.
    Empty,
    /// The nonce of an older response (stale).
    Older(u8),
    /// Anything.
    Other(String),
}

/// The version a SotW request carries.
#[derive(Arbitrary, Debug, Clone)]
enum VersionChoice {
    /// The version of the latest response the client got.
    Latest,
    /// The view's current version (a reconnect that claims to be up to date, rule S15).
    Current,
    /// None.
    Empty,
    /// Anything.
    Other(String),
}

/// One step of a scenario.
#[derive(Arbitrary, Debug, Clone)]
enum Op {
    /// A SotW request (the core_delta target reads it as subscribe-only).
    Sotw { names: Vec<Name>, nonce: NonceChoice, version: VersionChoice, nack: Option<String> },
    /// A delta request.
    Delta { subscribe: Vec<Name>, unsubscribe: Vec<Name>, nonce: NonceChoice, nack: Option<String> },
    /// The client ACKs the latest response with the subscription it last asked for.
    Ack,
    /// The client NACKs the latest response.
    Nack,
    /// A resource is created or updated (to a version out of a few, so versions repeat).
    Set { name: u8, version: u8, ttl: Option<u8> },
    /// A resource is deleted.
    Delete(u8),
    /// The server asks the sub-stream what it owes.
    Poll,
    /// As `Poll`, putting removals off (rule O1).
    PollDeferring,
    /// Time passes; a heartbeat is sent if one is due.
    Advance(u16),
    /// The server asks for a heartbeat whether or not one is due.
    Heartbeat,
    /// Rule D10: resend subscribed names starting with a prefix (delta only).
    Resend(u8),
    /// The view forgets or regains its change log; becomes ready or not.
    Flip { no_history: bool, not_ready: bool },
}

/// Whether to print each step (set `XDS_FUZZ_TRACE` when replaying an input).
fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("XDS_FUZZ_TRACE").is_some())
}

/// Prints a step when tracing.
macro_rules! trace {
    ($($arg:tt)*) => {
        if tracing() {
            eprintln!($($arg)*);
        }
    };
}

/// The sub-stream's type: every combination of the traits that has no aliases.
fn traits(u: &mut Unstructured<'_>) -> arbitrary::Result<TypeTraits> {
    Ok(TypeTraits { wildcard_capable: u.arbitrary()?, full_state: u.arbitrary()?, aliases: false })
}

fn ops(u: &mut Unstructured<'_>) -> arbitrary::Result<Vec<Op>> {
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < MAX_OPS {
        ops.push(u.arbitrary()?);
    }
    Ok(ops)
}

/// What the client holds, by name: version and TTL.
type Held = BTreeMap<String, (String, Option<Duration>)>;

/// The resources of `view` a subscription covers.
fn expected(view: &MemView, sub: &Subscription) -> Held {
    view.resources
        .iter()
        .filter(|(n, _)| sub.is_wildcard() || sub.has_name(n))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

fn assert_unique<'a>(names: impl Iterator<Item = &'a str>) {
    let mut seen = BTreeSet::new();
    for n in names {
        assert!(seen.insert(n), "rule S14: {n:?} twice in one response");
    }
}

/// The client's shared bookkeeping: nonces seen, the latest one, the clock.
#[derive(Default)]
struct Client {
    held: Held,
    /// Every nonce the sub-stream sent, in order (rule D1: unique, never empty).
    nonces: Vec<String>,
    /// The nonce of the response waiting for an answer: at most one in flight.
    in_flight: Option<String>,
    /// Milliseconds since the start, and when the last response was sent (TTLs run from there).
    now: u64,
    refreshed_at: u64,
}

impl Client {
    fn nonce(&self, choice: &NonceChoice) -> String {
        match choice {
            NonceChoice::Latest => self.nonces.last().cloned().unwrap_or_default(),
            NonceChoice::Empty => String::new(),
            NonceChoice::Older(i) if self.nonces.len() > 1 => {
                self.nonces[usize::from(*i) % (self.nonces.len() - 1)].clone()
            }
            NonceChoice::Older(_) => "0".to_owned(),
            NonceChoice::Other(s) => s.chars().take(4).collect(),
        }
    }

    /// Checks and records a response's nonce.
    fn sent(&mut self, nonce: &str) {
        assert!(
            self.in_flight.is_none(),
            "a second response while {:?} is in flight",
            self.in_flight
        );
        assert!(!nonce.is_empty(), "rule D1: an empty nonce");
        assert!(!self.nonces.iter().any(|n| n == nonce), "rule D1: nonce {nonce} repeated");
        self.nonces.push(nonce.to_owned());
        self.in_flight = Some(nonce.to_owned());
        self.refreshed_at = self.now;
    }

    /// Checks how the sub-stream classified a request with `nonce` (rules S4, S5, S7, D1).
    fn answered(&mut self, kind: &RequestKind, first: bool, nonce: &str, nack: bool, sotw: bool) {
        let latest = self.nonces.last().map(String::as_str);
        match kind {
            RequestKind::Initial => assert!(first, "Initial after the first request"),
            RequestKind::Ack { nonce: n, .. } | RequestKind::Nack { nonce: n, .. } => {
                assert!(!first && latest == Some(nonce) && n == nonce, "{kind:?} of {nonce:?}");
                assert_eq!(matches!(kind, RequestKind::Nack { .. }), nack, "ACK/NACK mixed up");
                if self.in_flight.as_deref() == Some(nonce) {
                    self.in_flight = None;
                }
            }
            RequestKind::Stale { .. } => {
                assert!(
                    !first && latest.is_some() && latest != Some(nonce),
                    "{kind:?} of {nonce:?}"
                );
                assert!(sotw || !nonce.is_empty(), "a spontaneous delta request taken as stale");
            }
            RequestKind::Spontaneous => {
                assert!(!first, "the first request classified as spontaneous");
                assert!(latest.is_none() || (!sotw && nonce.is_empty()), "{kind:?} of {nonce:?}");
            }
        }
        // An ACK or NACK frees the sub-stream for the next response; nothing else does.
        if matches!(kind, RequestKind::Ack { .. } | RequestKind::Nack { .. } | RequestKind::Initial)
        {
            self.in_flight = None;
        }
    }

    /// Whether a heartbeat is due: half the shortest TTL after the last response.
    fn heartbeat_due(&self, min_ttl: Option<Duration>) -> bool {
        let half = min_ttl.map(|t| u64::try_from(t.as_millis() / 2).unwrap_or(u64::MAX));
        half.is_some_and(|h| self.now >= self.refreshed_at.saturating_add(h))
    }

    /// Checks a heartbeat: only resources with a TTL that the client holds, at that version.
    fn heartbeat<'a>(&self, resources: impl Iterator<Item = &'a Res>) {
        for r in resources {
            assert!(r.ttl.is_some(), "heartbeat for {} without a TTL", r.name);
            let held = self.held.get(&r.name).map(|(v, _)| v);
            assert_eq!(held, Some(&r.version), "heartbeat for {} the client does not hold", r.name);
        }
    }
}

fn set(view: &mut MemView, name: u8, version: u8, ttl: Option<u8>) {
    let ttl = ttl.map(|t| Duration::from_millis(100 * (u64::from(t % 8) + 1)));
    // Equal versions mean equal content (`Resource::version`), the TTL included: a cache that
    // changes only a resource's TTL keeps its version (`EncodedResource::with_ttl`) and the
    // change reaches clients with the next content change.
    let version = match ttl {
        Some(ttl) => format!("{}t{}", version % 4, ttl.as_millis()),
        None => (version % 4).to_string(),
    };
    view.set(POOL[usize::from(name) % POOL.len()], &version, ttl);
}

fn nack_detail(nack: &Option<String>) -> Option<ErrorDetail> {
    nack.as_ref().map(|m| ErrorDetail { code: 3, message: m.clone() })
}

// ---- SotW ----

/// One SotW scenario's state: the sub-stream, the view, the client.
struct SotwRun {
    s: SotwSubStream<Res>,
    view: MemView,
    n: Nonces,
    c: Client,
    /// The latest response, until the client answers it.
    last: Option<SotwResponse<Res>>,
    /// The names of the latest request the sub-stream applied: ACKs repeat them.
    names: Vec<String>,
    /// The version the client last ACKed.
    acked: xds_core::Text,
    first: bool,
    /// Rule S15: the version a first request claims the client holds, until the first poll.
    claimed: Option<xds_core::Text>,
}

impl SotwRun {
    fn request(&mut self, req: SotwRequest) {
        let before = self.s.clone();
        let nonce = req.response_nonce.clone();
        let nack = req.error_detail.is_some();
        let version = req.version_info.clone();
        let wanted = match &req.resource_names {
            SotwNames::Listed(names) | SotwNames::Digested(names, _) => names.clone(),
            SotwNames::Found(set, _) => set.iter().map(str::to_owned).collect(),
            SotwNames::Repeated => self.names.clone(),
        };
        trace!("  request {req:?}");
        // A list the sub-stream recognises as its last one, passed as `Repeated` instead, must
        // come out exactly the same (rule S9: the same set is no change).
        let repeated = match &req.resource_names {
            SotwNames::Listed(_) | SotwNames::Digested(..) | SotwNames::Found(..) => {
                let digest = match &req.resource_names {
                    SotwNames::Digested(_, digest) | SotwNames::Found(_, digest) => *digest,
                    _ => NamesDigest::of(&wanted),
                };
                self.s.repeats_names(&digest).then(|| {
                    let mut twin = self.s.clone();
                    let h = twin.handle_request(SotwRequest {
                        resource_names: SotwNames::Repeated,
                        ..req.clone()
                    });
                    (twin, h)
                })
            }
            SotwNames::Repeated => None,
        };
        let h = self.s.handle_request(req);
        if let Some((twin, twin_handled)) = repeated {
            assert_eq!(h, twin_handled, "rule S9: a repeated list handled differently");
            assert_eq!(twin.subscription(), self.s.subscription());
            let (mut n1, mut n2) = (Nonces::new(), Nonces::new());
            let mut view = self.view.clone();
            view.not_ready = false;
            assert_eq!(
                twin.clone().poll_response(&view, &mut n1),
                self.s.clone().poll_response(&view, &mut n2),
                "rule S9: a repeated list changed what is owed"
            );
        }
        trace!("  -> {h:?}; subscription {:?}", self.s.subscription());
        self.c.answered(&h.kind, self.first, &nonce, nack, true);
        if self.first && !version.is_empty() {
            self.claimed = Some(version);
        }
        self.first = false;
        if let RequestKind::Stale { .. } = h.kind {
            // Rule S7: ignored entirely.
            assert!(!h.subscription_changed());
            assert_eq!(self.s.subscription(), before.subscription());
            let (mut n1, mut n2) = (Nonces::new(), Nonces::new());
            let mut view = self.view.clone();
            view.not_ready = false;
            assert_eq!(
                self.s.clone().poll_response(&view, &mut n1),
                before.clone().poll_response(&view, &mut n2),
                "rule S7: a stale request changed what is owed"
            );
            return;
        }
        self.names = wanted;
        // The client drops what it no longer asks for.
        let sub = self.s.subscription().clone();
        self.c.held.retain(|name, _| sub.is_wildcard() || sub.has_name(name));
    }

    /// The client answers the latest response: ACK, or NACK keeping the version it had.
    fn answer(&mut self, nack: bool) {
        let Some(r) = self.last.take() else { return };
        if !nack {
            self.acked = r.version_info.clone();
        }
        self.request(SotwRequest {
            version_info: self.acked.clone(),
            resource_names: self.names.clone().into(),
            response_nonce: r.nonce,
            error_detail: nack.then(|| ErrorDetail { code: 3, message: "rejected".into() }),
            denied: Default::default(),
        });
    }

    fn poll(&mut self, defer: bool) {
        if let Some(r) =
            sotw_poll(&mut self.s, &self.view, &mut self.n, &mut self.c, &mut self.claimed, defer)
        {
            self.last = Some(r);
        }
    }

    fn heartbeat(&mut self) {
        if let Some(r) = sotw_heartbeat(&mut self.s, &mut self.n, &mut self.c) {
            self.last = Some(r);
        }
    }
}

/// The SotW scenario; see [`crate::core_sotw`].
pub(crate) fn sotw(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(t) = traits(&mut u) else { return };
    // As the server runs it: responses may carry a whole set (read here as listed).
    let Ok(shared) = u.arbitrary::<bool>() else { return };
    let Ok(ops) = ops(&mut u) else { return };
    let mut s = SotwSubStream::new(t);
    s.share_sets(shared);
    let mut run = SotwRun {
        s,
        view: MemView::default(),
        n: Nonces::new(),
        c: Client::default(),
        last: None,
        names: Vec::new(),
        acked: xds_core::Text::new(),
        first: true,
        claimed: None,
    };
    trace!("sotw {t:?}");
    for op in ops {
        trace!("{op:?}");
        match op {
            Op::Sotw { names, nonce, version, nack } => {
                let version = match version {
                    VersionChoice::Latest => run.acked.clone(),
                    VersionChoice::Current => run.view.version(),
                    VersionChoice::Empty => xds_core::Text::new(),
                    VersionChoice::Other(v) => v.chars().take(8).collect::<String>().into(),
                };
                run.request(SotwRequest {
                    version_info: version,
                    resource_names: texts(&names).into(),
                    response_nonce: run.c.nonce(&nonce).into(),
                    error_detail: nack_detail(&nack),
                    denied: Default::default(),
                });
            }
            Op::Delta { subscribe, .. } => {
                // A subscription change that names the latest nonce and repeats the version.
                run.request(SotwRequest {
                    version_info: run.acked.clone(),
                    resource_names: texts(&subscribe).into(),
                    response_nonce: run.c.nonce(&NonceChoice::Latest).into(),
                    error_detail: None,
                    denied: Default::default(),
                });
            }
            Op::Ack => run.answer(false),
            Op::Nack => run.answer(true),
            Op::Set { name, version, ttl } => set(&mut run.view, name, version, ttl),
            Op::Delete(i) => run.view.delete(POOL[usize::from(i) % POOL.len()]),
            Op::Poll => run.poll(false),
            Op::PollDeferring => run.poll(true),
            Op::Advance(ms) => {
                run.c.now += u64::from(ms % 2000);
                if run.c.heartbeat_due(run.s.min_ttl()) {
                    run.heartbeat();
                }
            }
            Op::Heartbeat => run.heartbeat(),
            Op::Resend(_) => {}
            Op::Flip { no_history, not_ready } => {
                run.view.no_history = no_history;
                run.view.not_ready = not_ready;
            }
        }
    }

    // Quiesce: the view is ready and stops changing; the client ACKs until nothing more is owed.
    run.view.not_ready = false;
    if run.first {
        return;
    }
    trace!("quiesce");
    for _ in 0..6 {
        run.answer(false);
        run.last = None;
        run.poll(false);
    }
    // Rule S6: at the current version with the same subscription, nothing more is sent.
    assert!(run.last.is_none(), "an unchanged state keeps producing responses");
    let want = expected(&run.view, run.s.subscription());
    if t.full_state {
        assert_eq!(run.c.held, want, "the client did not converge to the view (full state)");
    } else {
        // Partial state: deletions are not announced, so the client may keep extras; everything
        // that exists is there at its current version.
        for (name, version) in &want {
            assert_eq!(run.c.held.get(name), Some(version), "the client lacks {name}");
        }
    }
}

fn sotw_poll(
    s: &mut SotwSubStream<Res>,
    view: &MemView,
    n: &mut Nonces,
    c: &mut Client,
    claimed: &mut Option<xds_core::Text>,
    defer: bool,
) -> Option<SotwResponse<Res>> {
    let awaiting = s.awaiting_ack();
    let t = s.traits();
    if view.is_ready()
        && !awaiting
        && let Some(version) = claimed.take()
        && t.full_state
        && s.subscription().is_wildcard()
        && version == view.version()
    {
        // Rule S15: the client reconnected holding this version's resources.
        c.held = expected(view, s.subscription());
    }
    let r =
        if defer { s.poll_response_deferring_removals(view, n) } else { s.poll_response(view, n) };
    let r = r?.into_listed();
    trace!("  response {r:?} (view {:?})", view.resources);
    assert!(!awaiting, "a response while one waits for its ACK");
    assert!(view.is_ready(), "a response from a view that is not ready");
    c.sent(&r.nonce);
    assert!(s.awaiting_ack() && s.last_nonce() == Some(r.nonce.as_str()));
    assert!(!r.heartbeat);
    // Rule S16: the view's version; a full-state answer that keeps removed resources for now
    // (rule O1) names that other state with a version of its own, derived from the view's.
    if t.full_state && r.resources.iter().any(|x| view.res(&x.name).is_none()) {
        let interim = format!("{}+", view.version());
        assert!(r.version_info.starts_with(&interim), "rule S16: an interim version");
    } else {
        assert_eq!(r.version_info, view.version(), "rule S16: the response's version");
    }
    assert_unique(r.resources.iter().map(|x| x.name.as_str()));
    let sub = s.subscription();
    for x in &r.resources {
        let current = view.res(&x.name);
        if current.as_ref() == Some(x) {
            assert!(
                sub.is_wildcard() || sub.has_name(&x.name),
                "rule S9: {} not subscribed",
                x.name
            );
        } else {
            // Only a removal put off (rule O1) may stay, as the client holds it.
            assert!(defer && t.full_state && current.is_none(), "{x:?} is not the view's");
            let held = c.held.get(&x.name).map(|(v, _)| v);
            assert_eq!(held, Some(&x.version), "a deferred removal the client does not hold");
        }
    }
    if t.full_state {
        // Rule S11: every subscribed resource that exists.
        for name in expected(view, sub).keys() {
            assert!(r.resources.iter().any(|x| &x.name == name), "rule S11: {name} left out");
        }
        c.held.clear();
    }
    for x in &r.resources {
        c.held.insert(x.name.clone(), (x.version.clone(), x.ttl));
    }
    Some(r)
}

fn sotw_heartbeat(
    s: &mut SotwSubStream<Res>,
    n: &mut Nonces,
    c: &mut Client,
) -> Option<SotwResponse<Res>> {
    let awaiting = s.awaiting_ack();
    let r = s.poll_heartbeat(n)?;
    assert!(!awaiting, "a heartbeat while a response waits for its ACK");
    assert!(r.heartbeat && !r.resources.is_empty());
    c.sent(&r.nonce);
    assert_unique(r.resources.iter().map(|x| x.name.as_str()));
    c.heartbeat(r.resources.iter());
    Some(r)
}

// ---- delta ----

/// One delta scenario's state: the sub-stream, the view, the client.
struct DeltaRun {
    s: DeltaSubStream<Res>,
    view: MemView,
    n: Nonces,
    c: Client,
    last: Option<DeltaResponse<Res>>,
    first: bool,
    /// Rule D7: what the first request declares the client holds from an earlier stream.
    declared: BTreeMap<String, String>,
}

impl DeltaRun {
    fn request(&mut self, mut req: DeltaRequest) {
        if self.first {
            req.initial_resource_versions = self.declared.clone();
            self.c.held =
                self.declared.iter().map(|(n, v)| (n.clone(), (v.clone(), None))).collect();
        }
        let nonce = req.response_nonce.clone();
        let nack = req.error_detail.is_some();
        trace!("  request {req:?}");
        let h = self.s.handle_request(req);
        trace!("  -> {h:?}; subscription {:?}", self.s.subscription());
        self.c.answered(&h.kind, self.first, &nonce, nack, false);
        self.first = false;
        // Rule D1: even a stale request's subscription changes apply. The client drops what it
        // no longer asks for.
        let sub = self.s.subscription().clone();
        self.c.held.retain(|name, _| sub.is_wildcard() || sub.has_name(name));
    }

    fn answer(&mut self, nack: bool) {
        let Some(r) = self.last.take() else { return };
        self.request(DeltaRequest {
            response_nonce: r.nonce,
            error_detail: nack.then(|| ErrorDetail { code: 3, message: "rejected".into() }),
            ..Default::default()
        });
    }

    fn poll(&mut self, defer: bool) {
        if let Some(r) = delta_poll(&mut self.s, &self.view, &mut self.n, &mut self.c, defer) {
            self.last = Some(r);
        }
    }

    fn heartbeat(&mut self) {
        if let Some(r) = delta_heartbeat(&mut self.s, &mut self.n, &mut self.c) {
            self.last = Some(r);
        }
    }
}

/// The delta scenario; see [`crate::core_delta`].
pub(crate) fn delta(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(t) = traits(&mut u) else { return };
    let Ok(shared) = u.arbitrary::<bool>() else { return };
    let Ok(initial) = u.arbitrary::<Vec<(u8, u8)>>() else { return };
    let Ok(ops) = ops(&mut u) else { return };
    let declared = initial
        .iter()
        .take(6)
        .map(|(i, v)| (POOL[usize::from(*i) % POOL.len()].to_owned(), (v % 4).to_string()))
        .collect();
    let mut s = DeltaSubStream::new(t);
    s.share_sets(shared);
    let mut run = DeltaRun {
        s,
        view: MemView::default(),
        n: Nonces::new(),
        c: Client::default(),
        last: None,
        first: true,
        declared,
    };
    trace!("delta {t:?}, declared {:?}", run.declared);
    for op in ops {
        trace!("{op:?}");
        match op {
            Op::Delta { subscribe, unsubscribe, nonce, nack } => {
                run.request(DeltaRequest {
                    subscribe: texts(&subscribe),
                    unsubscribe: texts(&unsubscribe),
                    response_nonce: run.c.nonce(&nonce).into(),
                    error_detail: nack_detail(&nack),
                    ..Default::default()
                });
            }
            Op::Sotw { names, .. } => {
                run.request(DeltaRequest { subscribe: texts(&names), ..Default::default() });
            }
            Op::Ack => run.answer(false),
            Op::Nack => run.answer(true),
            Op::Set { name, version, ttl } => set(&mut run.view, name, version, ttl),
            Op::Delete(i) => run.view.delete(POOL[usize::from(i) % POOL.len()]),
            Op::Poll => run.poll(false),
            Op::PollDeferring => run.poll(true),
            Op::Advance(ms) => {
                run.c.now += u64::from(ms % 2000);
                if run.c.heartbeat_due(run.s.min_ttl()) {
                    run.heartbeat();
                }
            }
            Op::Heartbeat => run.heartbeat(),
            Op::Resend(i) => {
                let prefix = POOL[usize::from(i) % POOL.len()];
                run.s.resend_where(|name| name.starts_with(prefix));
            }
            Op::Flip { no_history, not_ready } => {
                run.view.no_history = no_history;
                run.view.not_ready = not_ready;
            }
        }
    }

    // Quiesce: the view is ready and stops changing; the client ACKs until nothing more is owed.
    run.view.not_ready = false;
    if run.first {
        return;
    }
    trace!("quiesce");
    for _ in 0..6 {
        run.answer(false);
        run.last = None;
        run.poll(false);
    }
    assert!(run.last.is_none(), "rule S6: an unchanged state keeps producing responses");
    assert_eq!(
        run.c.held,
        expected(&run.view, run.s.subscription()),
        "the client did not converge"
    );
}

fn delta_poll(
    s: &mut DeltaSubStream<Res>,
    view: &MemView,
    n: &mut Nonces,
    c: &mut Client,
    defer: bool,
) -> Option<DeltaResponse<Res>> {
    let awaiting = s.awaiting_ack();
    let r =
        if defer { s.poll_response_deferring_removals(view, n) } else { s.poll_response(view, n) }?;
    let r = r.into_listed();
    trace!("  response {r:?} (view {:?})", view.resources);
    assert!(!awaiting, "a response while one waits for its ACK");
    assert!(view.is_ready(), "a response from a view that is not ready");
    c.sent(&r.nonce);
    assert!(s.awaiting_ack() && s.last_nonce() == Some(r.nonce.as_str()));
    assert!(!r.heartbeat);
    assert_unique(
        r.resources
            .iter()
            .map(DeltaResource::name)
            .chain(r.removed_resources.iter().map(String::as_str)),
    );
    let names: Vec<&str> = r.resources.iter().map(DeltaResource::name).collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "resources not sorted by name: {names:?}");
    assert!(r.removed_resources.windows(2).all(|w| w[0] < w[1]), "removals not sorted");
    let sub = s.subscription();
    for e in &r.resources {
        match e {
            DeltaResource::Present { resource, aliases } => {
                assert!(aliases.is_empty(), "aliases for a type without them");
                assert_eq!(view.res(&resource.name).as_ref(), Some(resource), "not the view's");
                assert!(sub.is_wildcard() || sub.has_name(&resource.name), "not subscribed");
            }
            DeltaResource::Absent { name, aliases } => {
                // Rule D6: a subscribed name that does not exist.
                assert!(aliases.is_empty(), "aliases for a type without them");
                assert!(view.res(name).is_none(), "rule D6: {name} exists");
                assert!(sub.has_name(name), "rule D6: {name} is not subscribed by name");
            }
        }
    }
    for name in &r.removed_resources {
        // Rule D5: a removal is of something that is gone, and that the client held.
        assert!(view.res(name).is_none(), "rule D5: {name} removed but exists");
        assert!(c.held.contains_key(name), "rule D5: {name} removed but the client never held it");
    }
    for e in &r.resources {
        match e {
            DeltaResource::Present { resource, .. } => {
                c.held.insert(resource.name.clone(), (resource.version.clone(), resource.ttl));
            }
            DeltaResource::Absent { name, .. } => {
                c.held.remove(name);
            }
        }
    }
    for name in &r.removed_resources {
        c.held.remove(name);
    }
    Some(r)
}

fn delta_heartbeat(
    s: &mut DeltaSubStream<Res>,
    n: &mut Nonces,
    c: &mut Client,
) -> Option<DeltaResponse<Res>> {
    let awaiting = s.awaiting_ack();
    let r = s.poll_heartbeat(n)?;
    assert!(!awaiting, "a heartbeat while a response waits for its ACK");
    assert!(r.heartbeat && !r.resources.is_empty() && r.removed_resources.is_empty());
    c.sent(&r.nonce);
    assert_unique(r.resources.iter().map(DeltaResource::name));
    let mut present = Vec::new();
    for e in &r.resources {
        match e {
            DeltaResource::Present { resource, .. } => present.push(resource),
            DeltaResource::Absent { name, .. } => panic!("heartbeat with an absent {name}"),
        }
    }
    c.heartbeat(present.into_iter());
    Some(r)
}
