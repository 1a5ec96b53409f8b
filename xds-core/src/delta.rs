//! The incremental (delta) sub-stream state machine.

use std::collections::BTreeMap;

use crate::flow::Flow;
use crate::message::{DeltaRequest, DeltaResource, DeltaResponse, Handled, RequestKind};
use crate::naming::Naming;
use crate::nonce::Nonces;
use crate::resource::{Resource, TypeTraits, View};
use crate::subscription::{Subscription, WILDCARD};
use crate::tracker::{Held, Removals, Tracker};

/// One type URL on one delta stream (`DeltaAggregatedResources` or a per-type `Delta*` RPC).
///
/// Call in this order, for as long as the stream lives:
/// 1. [`handle_request`](Self::handle_request) for every request of this type; record what the
///    returned [`Handled`] says (ACK, NACK, stale, subscription change).
/// 2. [`poll_response`](Self::poll_response) after a request and whenever the resources of the type
///    may have changed; send what it returns. `None` means nothing is owed now.
///
/// The sub-stream keeps, per subscribed name, the version the client holds, so it sends only what
/// differs (rule D4), removals (D5) and does-not-exist answers (D6). It sends one response and waits
/// for its ACK or NACK before computing the next, which then carries the newest state.
#[derive(Clone, Debug)]
pub struct DeltaSubStream<R> {
    traits: TypeTraits,
    subscription: Subscription,
    tracker: Tracker<R>,
    flow: Flow,
    /// Whether a response was sent: a wildcard's first response is owed even when empty, so the
    /// client knows it has everything.
    responded: bool,
    /// Rules C1, C4: names normalized on the way in, resource errors on the way out.
    naming: Naming,
}

impl<R: Resource> DeltaSubStream<R> {
    /// A sub-stream for a type with these traits.
    pub fn new(traits: TypeTraits) -> Self {
        DeltaSubStream {
            traits,
            subscription: Subscription::default(),
            tracker: Tracker::default(),
            flow: Flow::default(),
            responded: false,
            naming: Naming::default(),
        }
    }

    /// Sets what names and errors depend on (rules C1, C4): the type as a message name (an
    /// `xdstp://` name of another type is refused) and whether the client reads
    /// `resource_errors` (then a name that does not exist is answered `NOT_FOUND` there instead
    /// of with a bodiless resource). Call it before the first request.
    pub fn configure_names(&mut self, resource_type: Option<&str>, resource_errors: bool) {
        self.naming.configure(resource_type, resource_errors);
    }

    /// Takes in one request (rules D1, D2, D3, D7, D8).
    pub fn handle_request(&mut self, mut request: DeltaRequest) -> Handled {
        // Rule C1: every name is normalized once, here; refused names go no further.
        let names = self.naming.admit_delta(
            std::mem::take(&mut request.subscribe),
            std::mem::take(&mut request.unsubscribe),
            std::mem::take(&mut request.initial_resource_versions),
        );
        request.subscribe = names.subscribe;
        request.unsubscribe = names.unsubscribe;
        request.initial_resource_versions = names.initial;
        let kind = self.flow.classify(&request.response_nonce, request.error_detail.as_ref(), "");
        let first = kind == RequestKind::Initial;
        let mut declared_names = Vec::new();
        if first {
            // Rule D7: what the client says it holds is held; it is sent only what differs.
            for (name, version) in request.initial_resource_versions {
                self.tracker.hold(name.as_str().into(), Held::Declared(version.into()));
                declared_names.push(name);
            }
        }
        // Rule D1: a stale nonce voids the ACK meaning, but the subscription changes still apply.
        let change = self.subscription.apply_delta(
            &request.subscribe,
            &request.unsubscribe,
            first,
            self.traits.wildcard_capable,
        );
        if change.added.iter().any(|name| name == WILDCARD) {
            self.tracker.synced = None;
        }
        for name in request.subscribe {
            // Rule D2: every subscribed name is (re)sent, even one the client may hold, except
            // what a reconnecting client declared it holds (rule D7).
            let declared = first && self.tracker.held.contains_key(name.as_str());
            if self.subscription.has_name(&name) && !declared {
                self.tracker.forced.insert(name);
            }
        }
        self.tracker.subscription_shrank(&change.removed, &self.subscription);
        if !self.subscription.is_wildcard() {
            // Rule D7 is about what the client subscribes to: a declared name outside the
            // subscription is forgotten, as the client drops what it does not subscribe to.
            // Kept, a removal of it could be put off (rule O1) and the server would go on
            // believing the client holds it.
            declared_names.retain(|name| !self.subscription.has_name(name));
            self.tracker.subscription_shrank(&declared_names, &self.subscription);
        }
        Handled { kind, subscribed: change.added, unsubscribed: change.removed }
    }

    /// The response owed to the client given the current `view`, if any.
    #[must_use = "a returned response must be sent"]
    pub fn poll_response<V: View<Resource = R> + ?Sized>(
        &mut self,
        view: &V,
        nonces: &mut Nonces,
    ) -> Option<DeltaResponse<R>> {
        self.poll(view, nonces, Removals::Send)
    }

    /// Like [`poll_response`](Self::poll_response), but resources the client holds that are gone
    /// stay with it for now (rule O1: an ADS stream removes clusters and their endpoints only after
    /// the listeners and routes that used them were updated). They are removed by a later
    /// `poll_response`; [`has_deferred_removals`](Self::has_deferred_removals) tells when one is owed.
    #[must_use = "a returned response must be sent"]
    pub fn poll_response_deferring_removals<V: View<Resource = R> + ?Sized>(
        &mut self,
        view: &V,
        nonces: &mut Nonces,
    ) -> Option<DeltaResponse<R>> {
        self.poll(view, nonces, Removals::Defer)
    }

    /// Whether removals were put off by [`poll_response_deferring_removals`](Self::poll_response_deferring_removals).
    pub fn has_deferred_removals(&self) -> bool {
        !self.tracker.deferred.is_empty()
    }

    fn poll<V: View<Resource = R> + ?Sized>(
        &mut self,
        view: &V,
        nonces: &mut Nonces,
        removals: Removals,
    ) -> Option<DeltaResponse<R>> {
        if !self.flow.ready() || !view.is_ready() {
            return None;
        }
        let mut diff = self.tracker.diff(&self.subscription, self.traits, view, removals);
        let resource_errors = self.naming.errors(
            view,
            &self.subscription,
            &mut diff.absent,
            &diff.recheck,
            diff.send.keys().map(String::as_str),
        );
        let first_wildcard = !self.responded && self.subscription.is_wildcard();
        if diff.is_empty() && resource_errors.is_empty() && !first_wildcard {
            return None;
        }
        let mut resources: BTreeMap<String, DeltaResource<R>> = diff
            .send
            .into_iter()
            .map(|(name, (resource, aliases))| {
                (name, DeltaResource::Present { resource, aliases: aliases.into_iter().collect() })
            })
            .collect();
        for (name, alias) in diff.absent {
            let aliases = if alias { vec![name.clone()] } else { Vec::new() };
            // Rule S14: never a name twice; a resource found under the name wins.
            resources.entry(name.clone()).or_insert(DeltaResource::Absent { name, aliases });
        }
        let mut removed_resources = diff.removed;
        removed_resources.sort();
        self.responded = true;
        let spellings = self.naming.spellings_for(
            resources
                .keys()
                .map(String::as_str)
                .chain(removed_resources.iter().map(String::as_str)),
        );
        Some(DeltaResponse {
            system_version_info: view.version(),
            nonce: self.flow.sent(nonces),
            resources: resources.into_values().collect(),
            removed_resources,
            heartbeat: false,
            resource_errors,
            spellings,
        })
    }

    /// A heartbeat for the resources with a TTL that the client holds, if any and if no response
    /// is in flight: each goes out without its body, at the version the client holds, so that the
    /// client renews it. Call it when [`min_ttl`](Self::min_ttl) says one is due; the core keeps
    /// no time.
    #[must_use = "a returned response must be sent"]
    pub fn poll_heartbeat(&mut self, nonces: &mut Nonces) -> Option<DeltaResponse<R>> {
        if !self.flow.ready() {
            return None;
        }
        let held = self.tracker.held_with_ttl();
        if held.is_empty() {
            return None;
        }
        let resources = held
            .into_iter()
            .map(|resource| DeltaResource::Present { resource, aliases: Vec::new() });
        Some(DeltaResponse {
            system_version_info: String::new(),
            nonce: self.flow.sent(nonces),
            resources: resources.collect(),
            removed_resources: Vec::new(),
            heartbeat: true,
            resource_errors: Vec::new(),
            spellings: BTreeMap::new(),
        })
    }

    /// The shortest TTL of the resources the client holds: heartbeats are owed within it.
    pub fn min_ttl(&self) -> Option<std::time::Duration> {
        self.tracker.min_ttl()
    }

    /// Marks every subscribed name that `pred` accepts for resending (rule D10: after a client
    /// receives a changed RouteConfiguration `rc`, resend its `rc/...` virtual hosts).
    pub fn resend_where(&mut self, mut pred: impl FnMut(&str) -> bool) {
        self.tracker.force_where(&self.subscription, &mut pred);
    }

    /// The subscription.
    pub fn subscription(&self) -> &Subscription {
        &self.subscription
    }

    /// The nonce of the latest response sent.
    pub fn last_nonce(&self) -> Option<&str> {
        self.flow.last_nonce.as_deref()
    }

    /// Whether a response is waiting for its ACK or NACK.
    pub fn awaiting_ack(&self) -> bool {
        self.flow.phase == crate::flow::Phase::InFlight
    }

    /// What the client holds, by subscribed name: `Some(version)`, or `None` when it was told the
    /// name does not exist.
    pub fn held(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.tracker.held_versions()
    }

    /// The traits of the sub-stream's type.
    pub fn traits(&self) -> TypeTraits {
        self.traits
    }
}

/// Helps callers name a resource entry.
impl<R: Resource> DeltaResource<R> {
    /// The name the entry goes under on the wire.
    pub fn name(&self) -> &str {
        match self {
            DeltaResource::Present { resource, .. } => resource.name(),
            DeltaResource::Absent { name, .. } => name,
        }
    }
}
