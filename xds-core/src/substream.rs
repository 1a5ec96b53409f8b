//! One sub-stream (one type URL on one stream), whatever the protocol variant.
//!
//! The nonce handshake, the subscription, what the client holds, make-before-break deferral and
//! TTL heartbeats are the same for SotW and delta; [`SubStream`] implements them once. What a
//! request means and how a response is shaped differ, and are the [`Protocol`]'s: [`Sotw`] and
//! [`Delta`], whose hooks live in `sotw.rs` and `delta.rs`.

use std::marker::PhantomData;

use crate::digest::NamesDigest;
use crate::error::ResourceError;
use crate::flow::{Flow, Phase};
use crate::message::Handled;
use crate::naming::Naming;
use crate::nonce::Nonces;
use crate::resource::{Resource, TypeTraits, View};
use crate::subscription::Subscription;
use crate::text::Text;
use crate::tracker::{Diff, Removals, Tracker};

pub(crate) mod sealed {
    /// Only the core's two variants implement [`Protocol`](super::Protocol): their hooks reach
    /// into the sub-stream's private state.
    pub trait Sealed {}
}

/// A protocol variant: state of the world ([`Sotw`]) or incremental ([`Delta`]). It says what a request means and how a response looks; everything
/// else is [`SubStream`]'s.
pub trait Protocol: sealed::Sealed + Sized + 'static {
    /// One request for one sub-stream.
    type Request;
    /// One response of one sub-stream.
    type Response<R: Resource>: Response + Send;

    /// Takes in one request (the variant's rules).
    #[doc(hidden)]
    fn handle<R: Resource>(sub: &mut SubStream<Self, R>, request: Self::Request) -> Handled;

    /// The response owed given `view`, if any. Called only when no response is in flight and the
    /// view is ready.
    #[doc(hidden)]
    fn respond<R: Resource, V: View<Resource = R> + ?Sized>(
        sub: &mut SubStream<Self, R>,
        view: &V,
        nonces: &mut Nonces,
        defer_removals: bool,
    ) -> Option<Self::Response<R>>;

    /// A heartbeat renewing `held` (resources with a TTL the client holds), with this nonce.
    #[doc(hidden)]
    fn heartbeat<R: Resource>(
        sub: &SubStream<Self, R>,
        held: Vec<R>,
        nonce: Text,
    ) -> Self::Response<R>;
}

/// State of the world (`StreamAggregatedResources` and the per-type `Stream*` RPCs).
///
/// Full-state types (Listener, Cluster) get every subscribed resource in each response (rule S11);
/// the others get only what changed and what was newly requested.
#[derive(Clone, Copy, Debug)]
pub struct Sotw;

/// Incremental (`DeltaAggregatedResources` and the per-type `Delta*` RPCs).
///
/// The sub-stream keeps, per subscribed name, the version the client holds, so it sends only what
/// differs (rule D4), removals (D5) and does-not-exist answers (D6).
#[derive(Clone, Copy, Debug)]
pub struct Delta;

/// One type URL on one SotW stream.
pub type SotwSubStream<R> = SubStream<Sotw, R>;

/// One type URL on one delta stream.
pub type DeltaSubStream<R> = SubStream<Delta, R>;

impl sealed::Sealed for Sotw {}
impl sealed::Sealed for Delta {}

/// What the whole stream needs to know about a response of either variant.
pub trait Response {
    /// The response's nonce.
    fn nonce(&self) -> &Text;
    /// The type's version (SotW `version_info`, delta `system_version_info`).
    fn version(&self) -> &Text;
    /// How many resource entries the response carries (removals not counted).
    fn len(&self) -> usize;
    /// Whether the response carries no resource entry.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether the response is a TTL heartbeat.
    fn is_heartbeat(&self) -> bool;
    /// Calls `f` with the name of every entry the response carries.
    fn for_each_name(&self, f: &mut dyn FnMut(&str));
    /// The same response with its shared set, if any, listed entry by entry.
    #[must_use]
    fn into_listed(self) -> Self
    where
        Self: Sized;
}

/// One type URL on one stream, SotW ([`SotwSubStream`](crate::SotwSubStream)) or delta
/// ([`DeltaSubStream`](crate::DeltaSubStream)).
///
/// Call in this order, for as long as the stream lives:
/// 1. [`handle_request`](Self::handle_request) for every request of this type; record what the
///    returned [`Handled`] says (ACK, NACK, stale, subscription change).
/// 2. [`poll_response`](Self::poll_response) after a request and whenever the resources of the type
///    may have changed; send what it returns. `None` means nothing is owed now.
/// 3. [`poll_heartbeat`](Self::poll_heartbeat) when a heartbeat falls due (see
///    [`min_ttl`](Self::min_ttl)).
///
/// A response waits for the ACK or NACK of the previous one, and then carries the newest state
/// ("latest wins"). A whole stream's sub-streams, with their timers and ordering, are driven by
/// [`Stream`](crate::Stream).
#[derive(Clone, Debug)]
pub struct SubStream<P, R> {
    pub(crate) traits: TypeTraits,
    pub(crate) subscription: Subscription,
    pub(crate) tracker: Tracker<R>,
    pub(crate) flow: Flow,
    /// Whether a response was sent. A full-state or wildcard sub-stream's first response is owed
    /// even when empty: it tells the client that nothing exists.
    pub(crate) responded: bool,
    /// SotW: the `version_info` of a first request, checked against the view at the first poll
    /// (rule S15).
    pub(crate) reconnect_version: Option<Text>,
    /// SotW: the version the client last ACKed (or, on a reconnect, said it holds).
    pub(crate) acked_version: Option<Text>,
    /// The version of the latest response sent.
    pub(crate) last_sent_version: Option<Text>,
    /// SotW: the digest of the last name list taken in, which a request may repeat without
    /// listing it again ([`SotwNames::Repeated`](crate::SotwNames::Repeated)).
    pub(crate) listed: Option<NamesDigest>,
    /// Rules C1, C4: names normalized on the way in, resource errors on the way out.
    pub(crate) naming: Naming,
    /// Whether responses may carry a shared set whole (see [`Self::share_sets`]).
    shared_sets: bool,
    /// Whether a poll found a response in flight since the last poll that compared: what the
    /// view changed meanwhile is owed once the client answers.
    blocked: bool,
    /// Whether the last request was an ACK or NACK and nothing else, taken in without a look at
    /// names (`Protocol::handle`'s fast paths): it changed nothing a response depends on.
    pub(crate) quiet_request: bool,
    variant: PhantomData<fn() -> P>,
}

impl<P: Protocol, R: Resource> SubStream<P, R> {
    /// A sub-stream for a type with these traits.
    pub fn new(traits: TypeTraits) -> Self {
        SubStream {
            traits,
            subscription: Subscription::default(),
            tracker: Tracker::default(),
            flow: Flow::default(),
            responded: false,
            reconnect_version: None,
            acked_version: None,
            last_sent_version: None,
            listed: None,
            naming: Naming::default(),
            shared_sets: false,
            blocked: false,
            quiet_request: false,
            variant: PhantomData,
        }
    }

    /// What the client is owed against `view` (rules S9–S13, D2–D6, O1 when `defer_removals`),
    /// and the per-resource errors that go with it (rule C4); names found missing that an error
    /// answers are taken out of the diff's absent list (the error is the answer). With
    /// `untold_removals` (the response has no way to remove), a subscribed name the client held
    /// that is gone gets its error too.
    pub(crate) fn diff<V: View<Resource = R> + ?Sized>(
        &mut self,
        view: &V,
        defer_removals: bool,
        untold_removals: bool,
    ) -> (Diff<R>, Vec<ResourceError>) {
        let removals = if defer_removals { Removals::Defer } else { Removals::Send };
        let (mut diff, commit) =
            self.tracker.compare(&self.subscription, self.traits, view, removals);
        self.tracker.commit(commit, &self.subscription);
        let gone: Vec<String> = if untold_removals {
            diff.removed.iter().filter(|name| self.subscription.has_name(name)).cloned().collect()
        } else {
            Vec::new()
        };
        let errors = self.naming.errors(
            view,
            &self.subscription,
            (&mut diff.absent, &gone),
            &diff.recheck,
            diff.whole
                .iter()
                .flat_map(|set| set.iter())
                .chain(diff.send.iter().map(|(r, _)| r))
                .map(|r| r.name()),
        );
        (diff, errors)
    }

    /// How many names the sub-stream remembers for the client: its subscription (names and glob
    /// collections), and the names it refused (rule C1) and keeps so as to tell of them once.
    /// What a stream limits.
    pub fn name_count(&self) -> usize {
        self.subscription.names().len()
            + self.subscription.globs().len()
            + self.naming.refused_len()
    }

    /// Sets what names and errors depend on (rules C1, C4): the type as a message name (an
    /// `xdstp://` name of another type is refused) and whether responses carry
    /// `resource_errors` (on by default, as TP3 has it: clients that do not read the field skip
    /// it; off, a subscribed name that does not exist gets only silence (SotW) or the bodiless
    /// resource of rule D6 (delta), and refused names no answer). Call it before the first
    /// request.
    pub fn configure_names(&mut self, resource_type: Option<&str>, resource_errors: bool) {
        self.naming.configure(resource_type, resource_errors);
    }

    /// Lets responses that send all of a view's set carry it whole, in their `shared` field
    /// ([`DeltaResponse::shared`](crate::DeltaResponse::shared)), instead of a handle per
    /// resource in `resources`: for a caller that writes `shared` (the server encodes such a set
    /// once for every client it goes to). An update's change that many clients take as one step
    /// comes as a set in `shared` too: `shared` is a set of resources to send, not always the
    /// view's. Off by default.
    pub fn share_sets(&mut self, on: bool) {
        self.shared_sets = on;
    }

    /// Takes in one request. SotW: rules S4, S5, S7, S8, S9, S10, S12, S15; delta: D1, D2, D3, D7,
    /// D8.
    pub fn handle_request(&mut self, request: P::Request) -> Handled {
        self.quiet_request = false;
        P::handle(self, request)
    }

    /// Whether only a change in its view can owe the client a response: the sub-stream
    /// answered before, no poll found a response in flight since its last comparison, and
    /// nothing is marked to be sent or put off. A caller that knows its view did not change
    /// (the cache marked no change since the last read) then need not read it: the comparison
    /// would find nothing.
    pub fn waits_for_changes(&self) -> bool {
        self.responded && !self.blocked && self.tracker.waits_for_changes(self.traits)
    }

    /// The response owed to the client given the current `view`, if any.
    #[must_use = "a returned response must be sent"]
    pub fn poll_response<V: View<Resource = R> + ?Sized>(
        &mut self,
        view: &V,
        nonces: &mut Nonces,
    ) -> Option<P::Response<R>> {
        self.poll(view, nonces, Removals::Send)
    }

    /// Like [`poll_response`](Self::poll_response), but resources the client holds that are gone
    /// stay with it for now (rule O1: an ADS stream removes clusters and their endpoints only after
    /// the listeners and routes that used them were updated). A later `poll_response` removes
    /// them; [`has_deferred_removals`](Self::has_deferred_removals) tells when one is owed.
    #[must_use = "a returned response must be sent"]
    pub fn poll_response_deferring_removals<V: View<Resource = R> + ?Sized>(
        &mut self,
        view: &V,
        nonces: &mut Nonces,
    ) -> Option<P::Response<R>> {
        self.poll(view, nonces, Removals::Defer)
    }

    fn poll<V: View<Resource = R> + ?Sized>(
        &mut self,
        view: &V,
        nonces: &mut Nonces,
        removals: Removals,
    ) -> Option<P::Response<R>> {
        if !self.flow.ready() {
            self.blocked = true;
            return None;
        }
        if !view.is_ready() {
            return None;
        }
        self.blocked = false;
        let response = P::respond(self, view, nonces, removals == Removals::Defer)?;
        let response = if self.shared_sets { response } else { response.into_listed() };
        self.responded = true;
        self.last_sent_version = Some(response.version().clone());
        Some(response)
    }

    /// Whether removals were put off by
    /// [`poll_response_deferring_removals`](Self::poll_response_deferring_removals).
    pub fn has_deferred_removals(&self) -> bool {
        !self.tracker.deferred().is_empty()
    }

    /// A heartbeat for the resources with a TTL that the client holds, if any and if no response
    /// is in flight: they go out without their body, at the version the client holds, so that the
    /// client renews them. Call it when [`min_ttl`](Self::min_ttl) says one is due (e.g. at half
    /// the TTL after the last response); the core keeps no time.
    #[must_use = "a returned response must be sent"]
    pub fn poll_heartbeat(&mut self, nonces: &mut Nonces) -> Option<P::Response<R>> {
        if !self.flow.ready() {
            return None;
        }
        let held = self.tracker.held_with_ttl();
        if held.is_empty() {
            return None;
        }
        let nonce = self.flow.sent(nonces);
        Some(P::heartbeat(self, held, nonce))
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
        self.flow.phase == Phase::InFlight
    }

    /// SotW: the version the client last ACKed (or, on a reconnect, said it holds). Delta ACKs
    /// carry no version: always `None`.
    pub fn acked_version(&self) -> Option<&str> {
        self.acked_version.as_deref()
    }

    /// The version of the latest response sent (heartbeats aside).
    pub fn last_sent_version(&self) -> Option<&str> {
        self.last_sent_version.as_deref()
    }

    /// What the client holds, by name: `Some(version)`, or `None` when it was told (delta) that
    /// the name does not exist.
    pub fn held(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.tracker.held_versions(&self.subscription)
    }

    /// Rule C4: the per-resource errors the client was sent that still stand (the resource has
    /// not come since, and the name is still subscribed or was refused), sorted by name as the
    /// client wrote it: what a status page shows it holds besides its resources.
    pub fn resource_errors(&self) -> Vec<ResourceError> {
        self.naming.standing(&self.subscription)
    }

    /// How many names the sub-stream keeps state for beyond the view's shared set (see
    /// [`View::resource_set`]): what its client costs per resource. Near zero for a client that
    /// holds what the view has; every held resource for a view without a shared set.
    pub fn held_exceptions(&self) -> usize {
        self.tracker.exceptions()
    }

    /// The traits of the sub-stream's type.
    pub fn traits(&self) -> TypeTraits {
        self.traits
    }
}

impl<R: Resource> SubStream<Sotw, R> {
    /// Whether a list with `digest` repeats the last one this sub-stream took in: a request that
    /// carries it may pass [`SotwNames::Repeated`](crate::SotwNames::Repeated) instead.
    pub fn repeats_names(&self, digest: &NamesDigest) -> bool {
        self.listed.as_ref() == Some(digest)
    }
}

/// Implements [`Response`] for a response type whose version field is `$version`.
macro_rules! impl_response {
    ($response:ident, $version:ident) => {
        impl<R: Resource> Response for crate::message::$response<R> {
            fn nonce(&self) -> &Text {
                &self.nonce
            }
            fn version(&self) -> &Text {
                &self.$version
            }
            fn len(&self) -> usize {
                self.resources.len() + self.shared.as_ref().map_or(0, |set| set.len())
            }
            fn is_heartbeat(&self) -> bool {
                self.heartbeat
            }
            fn for_each_name(&self, f: &mut dyn FnMut(&str)) {
                if let Some(set) = &self.shared {
                    set.iter().for_each(|r| f(r.name()));
                }
                self.resources.iter().for_each(|entry| f(entry.name()));
            }
            fn into_listed(self) -> Self {
                crate::message::$response::into_listed(self)
            }
        }
    };
}

impl_response!(SotwResponse, version_info);
impl_response!(DeltaResponse, system_version_info);
