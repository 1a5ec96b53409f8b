//! The state-of-the-world (SotW) sub-stream state machine.

use std::collections::BTreeMap;

use crate::flow::Flow;
use crate::message::{Handled, RequestKind, SotwRequest, SotwResponse};
use crate::naming::Naming;
use crate::nonce::Nonces;
use crate::resource::{Resource, TypeTraits, View};
use crate::subscription::{Subscription, WILDCARD};
use crate::tracker::{Held, HeldRef, Removals, Tracker};

/// One type URL on one SotW stream (`StreamAggregatedResources` or a per-type `Stream*` RPC).
///
/// Call in this order, for as long as the stream lives:
/// 1. [`handle_request`](Self::handle_request) for every request of this type; record what the
///    returned [`Handled`] says (ACK, NACK, stale, subscription change).
/// 2. [`poll_response`](Self::poll_response) after a request and whenever the resources of the type
///    may have changed; send what it returns. `None` means nothing is owed now.
///
/// Full-state types (Listener, Cluster) get every subscribed resource in each response (rule S11);
/// the others get only what changed and what was newly requested. A response waits for the ACK or
/// NACK of the previous one, and then carries the newest state.
#[derive(Clone, Debug)]
pub struct SotwSubStream<R> {
    traits: TypeTraits,
    subscription: Subscription,
    tracker: Tracker<R>,
    flow: Flow,
    /// Whether a response was sent. A full-state or wildcard sub-stream's first response is owed
    /// even when empty: it tells the client that nothing exists.
    responded: bool,
    /// The `version_info` of a first request, checked against the view at the first poll (S15).
    reconnect_version: Option<String>,
    acked_version: Option<String>,
    last_sent_version: Option<String>,
    /// Rules C1, C4: names normalized on the way in, resource errors on the way out.
    naming: Naming,
}

impl<R: Resource> SotwSubStream<R> {
    /// A sub-stream for a type with these traits.
    pub fn new(traits: TypeTraits) -> Self {
        SotwSubStream {
            traits,
            subscription: Subscription::default(),
            tracker: Tracker::default(),
            flow: Flow::default(),
            responded: false,
            reconnect_version: None,
            acked_version: None,
            last_sent_version: None,
            naming: Naming::default(),
        }
    }

    /// Sets what names and errors depend on (rules C1, C4): the type as a message name (an
    /// `xdstp://` name of another type is refused) and whether the client reads
    /// `resource_errors` (then a subscribed name that does not exist is answered `NOT_FOUND`
    /// there). Call it before the first request.
    pub fn configure_names(&mut self, resource_type: Option<&str>, resource_errors: bool) {
        self.naming.configure(resource_type, resource_errors);
    }

    /// Takes in one request (rules S4, S5, S7, S8, S9, S10, S12, S15).
    pub fn handle_request(&mut self, request: SotwRequest) -> Handled {
        let mut kind = self.flow.classify(
            &request.response_nonce,
            request.error_detail.as_ref(),
            &request.version_info,
        );
        if kind == RequestKind::Spontaneous && self.flow.last_nonce.is_some() {
            // Rule S7: a SotW request always names the latest nonce it saw; one without is stale.
            kind = RequestKind::Stale { nonce: String::new() };
        }
        match &kind {
            // Rule S7: a stale request changes nothing.
            RequestKind::Stale { .. } => {
                return Handled { kind, subscribed: Vec::new(), unsubscribed: Vec::new() };
            }
            RequestKind::Ack { version, .. } => self.acked_version = Some(version.clone()),
            RequestKind::Initial if !request.version_info.is_empty() => {
                self.reconnect_version = Some(request.version_info.clone());
                self.acked_version = Some(request.version_info.clone());
            }
            // Rule S5: after a NACK the client keeps its previous version; nothing is resent
            // until the resources change (the tracker already counts the rejected ones as sent).
            _ => {}
        }
        let first = kind == RequestKind::Initial;
        // Rule C1: every name is normalized once, here; refused names go no further.
        let names = self.naming.admit_sotw(request.resource_names);
        let change = self.subscription.apply_sotw(names, first, self.traits.wildcard_capable);
        for name in &change.added {
            if name == WILDCARD {
                self.tracker.synced = None;
            } else {
                // Rule S12: newly requested names are sent even if sent before.
                self.tracker.forced.insert(name.clone());
            }
        }
        self.tracker.subscription_shrank(&change.removed, &self.subscription);
        Handled { kind, subscribed: change.added, unsubscribed: change.removed }
    }

    /// The response owed to the client given the current `view`, if any.
    #[must_use = "a returned response must be sent"]
    pub fn poll_response<V: View<Resource = R> + ?Sized>(
        &mut self,
        view: &V,
        nonces: &mut Nonces,
    ) -> Option<SotwResponse<R>> {
        self.poll(view, nonces, Removals::Send)
    }

    /// Like [`poll_response`](Self::poll_response), but resources the client holds that are gone
    /// stay in a full-state response for now (rule O1: an ADS stream removes clusters only after
    /// the listeners and routes that used them were updated). A later `poll_response` removes
    /// them; [`has_deferred_removals`](Self::has_deferred_removals) tells when one is owed.
    #[must_use = "a returned response must be sent"]
    pub fn poll_response_deferring_removals<V: View<Resource = R> + ?Sized>(
        &mut self,
        view: &V,
        nonces: &mut Nonces,
    ) -> Option<SotwResponse<R>> {
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
    ) -> Option<SotwResponse<R>> {
        if !self.flow.ready() || !view.is_ready() {
            return None;
        }
        if let Some(version) = self.reconnect_version.take()
            && self.resume(&version, view)
        {
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
        let owed_first =
            !self.responded && (self.traits.full_state || self.subscription.is_wildcard());
        let resources = if self.traits.full_state {
            if diff.is_empty() && resource_errors.is_empty() && !owed_first {
                return None;
            }
            self.full_state(view)
        } else {
            if diff.send.is_empty() && resource_errors.is_empty() && !owed_first {
                return None;
            }
            diff.send.into_values().map(|(resource, _)| resource).collect()
        };
        let version_info = view.version();
        self.last_sent_version = Some(version_info.clone());
        self.responded = true;
        Some(SotwResponse {
            version_info,
            nonce: self.flow.sent(nonces),
            resources,
            heartbeat: false,
            resource_errors,
        })
    }

    /// Rule S15: a client reconnecting with the version the view still has holds its resources.
    ///
    /// Only trusted for a wildcard subscription of a full-state type, where that version's
    /// responses carried every resource. For named subscriptions the client may have asked for a
    /// name on the old stream and lost the answer with it; it is sent everything again.
    fn resume<V: View<Resource = R> + ?Sized>(&mut self, version: &str, view: &V) -> bool {
        let resumable = self.traits.full_state && self.subscription.is_wildcard();
        if !resumable || view.version() != version {
            return false;
        }
        view.for_each(&mut |r| {
            self.tracker.hold(r.shared_name(), Held::Sent(r.clone()));
        });
        self.tracker.forced.clear();
        self.tracker.synced = Some(view.revision());
        self.responded = true;
        true
    }

    /// Every subscribed resource that exists, by name, each once (rules S11, S14).
    fn full_state<V: View<Resource = R> + ?Sized>(&mut self, view: &V) -> Vec<R> {
        let mut all = BTreeMap::new();
        // Removals put off (rule O1) stay in the full state, as the client last got them.
        for name in &self.tracker.deferred {
            if let Some(HeldRef::Sent(r)) = self.tracker.held.get(name.as_str()) {
                all.insert(name.clone(), r.clone());
            }
        }
        if self.subscription.is_wildcard() {
            view.for_each(&mut |r| {
                all.insert(r.name().to_owned(), r.clone());
            });
        }
        for name in self.subscription.names() {
            if !all.contains_key(name)
                && let Some(r) = view.get(name)
            {
                all.insert(name.clone(), r);
            }
        }
        for r in all.values() {
            self.tracker.hold(r.shared_name(), Held::Sent(r.clone()));
        }
        all.into_values().collect()
    }

    /// A heartbeat for the resources with a TTL that the client holds, if any and if no response
    /// is in flight: they go out without their body, at the version the client holds, so that the
    /// client renews them. Call it when [`min_ttl`](Self::min_ttl) says one is due (e.g. at half
    /// the TTL after the last response); the core keeps no time.
    #[must_use = "a returned response must be sent"]
    pub fn poll_heartbeat(&mut self, nonces: &mut Nonces) -> Option<SotwResponse<R>> {
        if !self.flow.ready() {
            return None;
        }
        let resources = self.tracker.held_with_ttl();
        if resources.is_empty() {
            return None;
        }
        let version_info = self.last_sent_version.clone().unwrap_or_default();
        Some(SotwResponse {
            version_info,
            nonce: self.flow.sent(nonces),
            resources,
            heartbeat: true,
            resource_errors: Vec::new(),
        })
    }

    /// The shortest TTL of the resources the client holds: heartbeats are owed within it.
    pub fn min_ttl(&self) -> Option<std::time::Duration> {
        self.tracker.min_ttl()
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

    /// The version the client last ACKed (or, on a reconnect, said it holds).
    pub fn acked_version(&self) -> Option<&str> {
        self.acked_version.as_deref()
    }

    /// The version of the latest response sent.
    pub fn last_sent_version(&self) -> Option<&str> {
        self.last_sent_version.as_deref()
    }

    /// The versions of the resources the client was sent, by name.
    pub fn held(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.tracker.held_versions()
    }

    /// The traits of the sub-stream's type.
    pub fn traits(&self) -> TypeTraits {
        self.traits
    }
}
