//! The whole stream: every sub-stream of one gRPC stream, their order, their timers, and what
//! happened on them.

mod guard;
mod rate;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

pub use guard::{StreamError, StreamGuard};

use crate::digest::NamesDigest;
use crate::error::ErrorDetail;
use crate::message::{AddedNames, DeltaRequest, Handled, RequestKind};
use crate::nonce::Nonces;
use crate::resource::{Resource, TypeTraits, View};
use crate::substream::{Delta, Protocol, Response, Sotw, SubStream};
use crate::text::Text;
pub use rate::TokenBucket;

/// What the whole stream needs to know about a resource type. The server implements it for its
/// type URLs; the core never parses one.
///
/// The order of keys is the make-before-break order (rule O1): a stream's responses go out in it.
pub trait TypeKey: Ord + Clone + std::fmt::Debug {
    /// The type URL, for a per-type stream's check of its requests (rule S3).
    fn type_url(&self) -> &str;
    /// How the protocol treats the type.
    fn traits(&self) -> TypeTraits;
    /// The type's part in the ordering rules.
    fn role(&self) -> TypeRole;
}

/// A type's part in the rules that order one stream's types (O1, D10).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TypeRole {
    /// No ordering rule applies.
    #[default]
    Other,
    /// Rule O1: removals wait until the types that refer to these were updated (Cluster,
    /// ClusterLoadAssignment).
    RemovedLast,
    /// Rule D10: when one is sent, the client drops its virtual hosts (RouteConfiguration).
    RouteConfiguration,
    /// Rule D10: resent after their RouteConfiguration (VirtualHost).
    VirtualHost,
}

/// The limits of one stream, and whether it may leave out its node.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StreamConfig {
    /// Rule S2: whether a first request may come without a node.
    pub allow_anonymous: bool,
    /// How many names one request may carry.
    pub max_names_per_request: usize,
    /// Requests per second a stream may send on average.
    pub max_requests_per_second: u32,
    /// Requests a stream may send at once.
    pub request_burst: u32,
    /// How many names one sub-stream may be subscribed to at once. Delta subscriptions add up
    /// request after request, so without this one client could make the stream hold any number
    /// of names (measured: 30 requests of 60,000 names, 380 MB).
    pub max_subscribed_names: usize,
    /// Whether the caller writes a response's `shared` set
    /// ([`DeltaResponse::shared`](crate::DeltaResponse::shared)): then a response that sends all
    /// of a view's set (a joining client's, or a full-state SotW wildcard client's) carries the
    /// set whole, and so does a response that sends the change of a step many clients take (an
    /// update's, to clients of one shared set: the set is then the change, not the view), which
    /// the caller can encode once for every client it goes to. Off, every response lists each
    /// of its resources, as a caller unaware of `shared` expects.
    pub shared_sets: bool,
}

/// Chainable setters, one per field: the struct is `#[non_exhaustive]` (a new knob is not a
/// breaking change), so code outside this crate builds one from `StreamConfig::default()`.
impl StreamConfig {
    /// Sets `allow_anonymous` (see the field).
    #[must_use]
    pub fn allow_anonymous(mut self, value: bool) -> Self {
        self.allow_anonymous = value;
        self
    }

    /// Sets `max_names_per_request` (see the field).
    #[must_use]
    pub fn max_names_per_request(mut self, value: usize) -> Self {
        self.max_names_per_request = value;
        self
    }

    /// Sets `max_requests_per_second` (see the field).
    #[must_use]
    pub fn max_requests_per_second(mut self, value: u32) -> Self {
        self.max_requests_per_second = value;
        self
    }

    /// Sets `request_burst` (see the field).
    #[must_use]
    pub fn request_burst(mut self, value: u32) -> Self {
        self.request_burst = value;
        self
    }

    /// Sets `max_subscribed_names` (see the field).
    #[must_use]
    pub fn max_subscribed_names(mut self, value: usize) -> Self {
        self.max_subscribed_names = value;
        self
    }

    /// Sets `shared_sets` (see the field).
    #[must_use]
    pub fn shared_sets(mut self, value: bool) -> Self {
        self.shared_sets = value;
        self
    }
}

impl Default for StreamConfig {
    /// No limits, and a node required.
    fn default() -> Self {
        StreamConfig {
            allow_anonymous: false,
            max_names_per_request: usize::MAX,
            max_requests_per_second: u32::MAX,
            request_burst: u32::MAX,
            max_subscribed_names: usize::MAX,
            shared_sets: false,
        }
    }
}

/// The current resources of each type a stream serves: the caller's watches.
pub trait Views<K> {
    /// The resource handle.
    type Resource: Resource;
    /// Lends the current view of `type_key` to `f` (not at all when there is none).
    fn read(&mut self, type_key: &K, f: &mut dyn FnMut(&dyn View<Resource = Self::Resource>));
}

/// A view a round of responses needs ([`Stream::next_read`]): the caller lends it to
/// [`Stream::respond`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read<K> {
    /// The type whose view to read.
    pub type_key: K,
    /// Rule O1: removals of this type are held back in this pass (the stream's own business;
    /// hand the `Read` back as it came).
    defer_removals: bool,
    /// Only a change in the view can owe a response ([`Read::needs_change`]).
    needs_change: bool,
}

impl<K> Read<K> {
    /// Whether only a change in the view can owe a response to this read: nothing was
    /// requested since the last round (but a lone ACK, which owes nothing), no heartbeat is
    /// due, and the sub-stream
    /// [waits for changes](crate::SubStream::waits_for_changes). A caller that knows the view
    /// did not change since it last lent it (its cache marks changes) may skip the read: the
    /// comparison [`Stream::respond`] would make finds nothing.
    pub fn needs_change(&self) -> bool {
        self.needs_change
    }
}

/// A round of responses under way; the types it still reads are marked in their slots
/// (`Slot::pending`), so that a round allocates nothing.
#[derive(Debug)]
struct Round {
    /// Rule O1: whether the round ends with the removals held back, if they are owed by then.
    second_pass_owed: bool,
}

/// A request was accepted by [`Stream::admit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted<'a> {
    /// The type the request is for (rule S3: implied on a per-type stream).
    pub type_url: &'a str,
    /// The stream's first request: the node is now known (rule S2).
    pub first: bool,
}

/// A response to send, with its type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outgoing<K, T> {
    /// The response's type.
    pub type_key: K,
    /// The response.
    pub response: T,
}

/// What happened on a stream, for the caller to record and report (status, metrics, callbacks),
/// in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<K> {
    /// A request was taken in; an `Ack`, `Nack` or `Stale` event follows if it answered a response.
    /// A request that answers a response and changes no name is reported by that answer alone,
    /// with no `Request` before it: every request the stream takes (one it refuses ends it) is
    /// a `Request`, an answer, or both.
    Request {
        /// The request's type.
        type_key: K,
        /// Names newly in the subscription (`*` for a wildcard entered).
        subscribed: crate::AddedNames,
        /// Names no longer in the subscription.
        unsubscribed: Vec<String>,
    },
    /// The client accepted a response (rules S4, D1).
    Ack {
        /// The response's type.
        type_key: K,
        /// SotW: the version the client now holds. Delta: empty.
        version: crate::Text,
        /// The accepted response's nonce.
        nonce: crate::Text,
        /// How long the client took to answer, when the response was sent on this stream.
        latency: Option<Duration>,
    },
    /// The client rejected a response (rules S5, D1).
    Nack {
        /// The response's type.
        type_key: K,
        /// The rejected response's version (SotW `version_info`, delta `system_version_info`).
        rejected_version: crate::Text,
        /// SotW: the version the client keeps (its request's `version_info`: the last one it
        /// accepted). Delta: empty.
        kept_version: crate::Text,
        /// The rejected response's nonce.
        nonce: crate::Text,
        /// The client's reason.
        error: ErrorDetail,
    },
    /// A request named a nonce other than the latest (rules S7, D1).
    Stale {
        /// The request's type.
        type_key: K,
    },
    /// A response was handed out by [`poll_response`](Stream::poll_response).
    Sent {
        /// The response's type.
        type_key: K,
        /// Its version: the response's own text, copied without an allocation.
        version: crate::Text,
        /// Its nonce, likewise.
        nonce: crate::Text,
        /// How many resource entries it carries.
        resources: usize,
        /// Whether it is a TTL heartbeat.
        heartbeat: bool,
    },
}

/// One sub-stream and its clock.
#[derive(Debug)]
struct Slot<P, R> {
    sub: SubStream<P, R>,
    role: TypeRole,
    /// When the response in flight was sent, for the ACK latency.
    sent_at: Option<Instant>,
    /// When the client last got a response of this type: TTLs run from there.
    refreshed_at: Instant,
    /// A heartbeat fell due ([`Stream::handle_timeout`]) and goes with the next poll.
    heartbeat_owed: bool,
    /// Something other than its view may make the type owe a response since the last round
    /// started: a request of it (but a lone ACK of a client that was sent everything: rule S6),
    /// a heartbeat falling due, a sent RouteConfiguration (rule D10). A round after
    /// [`Stream::views_unchanged`] reads only such types.
    touched: bool,
    /// The round under way still reads this type: with whether its removals are held back
    /// (rule O1).
    pending: Option<bool>,
    /// Only a change in the view can owe this round's read a response ([`Read::needs_change`]).
    needs_change: bool,
}

impl<P: Protocol, R: Resource> Slot<P, R> {
    /// Whether only a change in the type's view can owe a response: no heartbeat is owed, and
    /// the sub-stream [waits for changes](SubStream::waits_for_changes).
    fn waits_for_changes(&self) -> bool {
        !self.heartbeat_owed && self.sub.waits_for_changes()
    }

    /// When a heartbeat falls due: half the shortest held TTL after the last response, so the
    /// client renews well before anything expires.
    ///
    /// None while a response awaits its ACK (rule S4: one response in flight, heartbeats
    /// included) and once one is owed: a due time then would be past and never move on, and a
    /// caller sleeping until it would wake at once, again and again, until the client answered.
    /// The ACK makes the time count again, and the heartbeat goes after it.
    fn heartbeat_due(&self) -> Option<Instant> {
        if self.sub.awaiting_ack() || self.heartbeat_owed {
            return None;
        }
        self.refreshed_at.checked_add(self.sub.min_ttl()? / 2)
    }
}

/// One gRPC stream (ADS or per-type, SotW or delta, by `P`): its node, its sub-streams, the order
/// and timing of its responses, and the events the caller reports.
///
/// `N` is the node type, `K` the type key ([`TypeKey`]), `R` the resource handle. Time is always
/// a parameter: the stream reads no clock.
///
/// Per request, in this order:
/// 1. [`admit`](Self::admit): rate limit, size limit, node and type checks (rules S2, S3). An
///    error ends the stream.
/// 2. The caller resolves the type URL to a key and applies its own policy (authorization,
///    callbacks that may refuse); for a type [`has_type`](Self::has_type) does not know, it
///    starts watching that type's resources.
/// 3. [`handle_request`](Self::handle_request).
///
/// After any of these, and whenever a watched view changed:
/// - [`poll_response`](Self::poll_response) until it returns `None`; send each response in turn.
/// - [`poll_event`](Self::poll_event) until `None`; report each (no lock needs to be held).
/// - [`poll_timeout`](Self::poll_timeout): when to call [`handle_timeout`](Self::handle_timeout)
///   (then poll again).
///
/// Responses: at most one per type is in flight; a type's next response is computed when the
/// client has answered, from the newest view ("latest wins"). On an aggregated stream, removals
/// of clusters and endpoints wait until every other type is quiet (rule O1), and a sent
/// RouteConfiguration makes its virtual hosts owed again (rule D10).
pub struct Stream<N, K, P: Protocol, R: Resource> {
    guard: StreamGuard<N>,
    rate: TokenBucket,
    config: StreamConfig,
    /// Boxed: a slot is ~600 bytes, so the list's spare room and an insert's shift move
    /// pointers, not slots (a stream of two types kept ~5 KiB of empty room in a B-tree node's
    /// eleven places: a fifth of what a connected client cost beyond its HTTP/2 connection).
    subs: Slots<K, P, R>,
    nonces: Nonces,
    /// Responses computed by the latest round, in order: at most one per type. Like `events`,
    /// kept to room for one between rounds ([`drained`]).
    ready: VecDeque<Outgoing<K, P::Response<R>>>,
    /// The round of responses under way (see [`next_read`](Self::next_read)); `None` between
    /// rounds.
    round: Option<Round>,
    /// What happened, for [`poll_event`](Self::poll_event). A caller that drains it after every
    /// call keeps it to what one call produced (a few per request, one per response).
    events: VecDeque<Event<K>>,
    /// The caller said no view changed since the last round ([`views_unchanged`]): the next
    /// round reads only the types touched since.
    ///
    /// [`views_unchanged`]: Self::views_unchanged
    views_unchanged: bool,
    /// Rule C4: responses carry `resource_errors` (the default; a server's opt-out turns it off).
    resource_errors: bool,
}

impl<N, K: TypeKey, R: Resource> Stream<N, K, Sotw, R> {
    /// Whether a SotW request of `type_key` whose names have `digest` repeats the list its
    /// sub-stream last took in (every ACK does): then the request may carry
    /// [`SotwNames::Repeated`](crate::SotwNames::Repeated) instead of its names, and the caller
    /// need not decode them.
    pub fn repeats_names(&self, type_key: &K, digest: &NamesDigest) -> bool {
        self.subs.get(type_key).is_some_and(|slot| slot.sub.repeats_names(digest))
    }
}

impl<N, K: TypeKey, R: Resource> Stream<N, K, Delta, R> {
    /// Takes in an admitted ([`admit`](Self::admit)) delta ACK of `type_key`: a request that
    /// names nothing but its type and the `nonce` it answers, with no error, which the caller
    /// read without decoding it (a synced client sends one per update). What
    /// [`handle_request`](Self::handle_request) does with the request it stands for, without
    /// the request: the answer classified by its nonce (rules S4, D1) and reported, the type
    /// left untouched when nothing is owed for it. A type the stream has not opened is taken
    /// in as that request.
    pub fn take_ack(
        &mut self,
        type_key: &K,
        mut nonce: Text,
        now: Instant,
    ) -> Result<(), StreamError> {
        let Some(slot) = self.subs.get_mut(type_key).filter(|slot| slot.sub.flow.started()) else {
            let request = DeltaRequest { response_nonce: nonce, ..DeltaRequest::default() };
            return self.handle_request(type_key.clone(), request, now);
        };
        let kind = slot.sub.answer(&mut nonce, None);
        let handled = Handled { kind, subscribed: AddedNames::default(), unsubscribed: Vec::new() };
        Self::take_in(slot, &mut self.events, type_key.clone(), handled, now);
        Ok(())
    }
}

impl<N, K: std::fmt::Debug, P: Protocol, R: Resource> std::fmt::Debug for Stream<N, K, P, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("aggregated", &self.guard.is_aggregated())
            .field("types", &self.subs.0.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("ready", &self.ready.len())
            .field("events", &self.events.len())
            .finish_non_exhaustive()
    }
}

impl<N, K: TypeKey, P: Protocol, R: Resource> Stream<N, K, P, R> {
    /// An aggregated (ADS) stream: every request names its type.
    pub fn aggregated(config: StreamConfig, now: Instant) -> Self {
        Self::with_guard(StreamGuard::aggregated(config.allow_anonymous), config, now)
    }

    /// A per-type stream (`StreamClusters`, `DeltaListeners`, ...) serving `type_key`.
    pub fn per_type(type_key: &K, config: StreamConfig, now: Instant) -> Self {
        let guard = StreamGuard::per_type(type_key.type_url(), config.allow_anonymous);
        Self::with_guard(guard, config, now)
    }

    fn with_guard(guard: StreamGuard<N>, config: StreamConfig, now: Instant) -> Self {
        Stream {
            guard,
            rate: TokenBucket::new(config.max_requests_per_second, config.request_burst, now),
            config,
            subs: Slots(Vec::new()),
            nonces: Nonces::new(),
            ready: VecDeque::new(),
            round: None,
            events: VecDeque::new(),
            views_unchanged: false,
            resource_errors: true,
        }
    }

    /// Rule C4: whether responses carry `resource_errors` (`NOT_FOUND` for a subscribed name
    /// that does not exist, `PERMISSION_DENIED` and `INVALID_ARGUMENT` for refused names, the
    /// caches' own errors). On by default: TP3 has the server send them whatever the client, as
    /// clients that do not know the field skip it. Turn it off only for a client known to break
    /// on it. Applies to sub-streams opened after the call: call it before the first
    /// [`handle_request`](Self::handle_request).
    pub fn set_resource_errors(&mut self, on: bool) {
        self.resource_errors = on;
    }

    /// Checks a request before anything else looks at it: the stream's rate limit, the number of
    /// names (`names`), the node (rule S2) and the type URL (rule S3). Returns the type the request
    /// is for. Changes nothing but the rate limit and, on the first request, the node.
    pub fn admit<'a>(
        &'a mut self,
        node: Option<N>,
        type_url: &'a str,
        names: usize,
        now: Instant,
    ) -> Result<Admitted<'a>, StreamError> {
        if !self.rate.take(now) {
            return Err(StreamError::RateLimited {
                rate: self.config.max_requests_per_second,
                burst: self.config.request_burst,
            });
        }
        if names > self.config.max_names_per_request {
            return Err(StreamError::TooManyNames {
                max: self.config.max_names_per_request,
                got: names,
            });
        }
        let first = !self.guard.is_started();
        let type_url = self.guard.check(node, type_url)?;
        Ok(Admitted { type_url, first })
    }

    /// Whether the stream has a sub-stream of this type.
    pub fn has_type(&self, type_key: &K) -> bool {
        self.subs.get(type_key).is_some()
    }

    /// Takes in one admitted request of `type_key` (opening its sub-stream on first use) and
    /// queues what it meant as events.
    ///
    /// An error (the sub-stream's subscription grew past `max_subscribed_names`) ends the stream:
    /// the sub-stream already took the request in, and no response should follow.
    pub fn handle_request(
        &mut self,
        type_key: K,
        request: P::Request,
        now: Instant,
    ) -> Result<(), StreamError> {
        let resource_errors = self.resource_errors;
        let shared_sets = self.config.shared_sets;
        let slot = self.subs.get_or_insert_with(&type_key, || {
            Box::new(Slot {
                sub: {
                    let mut sub = SubStream::new(type_key.traits());
                    // Rule C1: an xdstp:// name must name this type (by its message name).
                    let message_name = type_key.type_url().rsplit('/').next();
                    sub.configure_names(message_name, resource_errors);
                    sub.share_sets(shared_sets);
                    sub
                },
                role: type_key.role(),
                sent_at: None,
                refreshed_at: now,
                heartbeat_owed: false,
                touched: false,
                pending: None,
                needs_change: false,
            })
        });
        let handled = slot.sub.handle_request(request);
        let subscribed = slot.sub.name_count();
        if subscribed > self.config.max_subscribed_names {
            return Err(StreamError::TooManySubscribed {
                max: self.config.max_subscribed_names,
                got: subscribed,
                type_url: type_key.type_url().to_owned(),
            });
        }
        Self::take_in(slot, &mut self.events, type_key, handled, now);
        Ok(())
    }

    /// What a handled request leaves: whether its type may owe a response for it, and the
    /// events it is reported by.
    fn take_in(
        slot: &mut Slot<P, R>,
        events: &mut VecDeque<Event<K>>,
        type_key: K,
        handled: Handled,
        now: Instant,
    ) {
        // An ACK alone, of a client that was sent all its view had: nothing is owed for it (a
        // change since would have found the response in flight, and is owed), so a round after
        // it that knows the views unchanged need not read this type.
        let acked = matches!(handled.kind, RequestKind::Ack { .. });
        if !(acked && slot.sub.quiet_request && slot.waits_for_changes()) {
            slot.touched = true;
        }
        let answer = match handled.kind {
            RequestKind::Ack { version, nonce } => {
                let latency = slot.sent_at.take().map(|t| now.saturating_duration_since(t));
                Some(Event::Ack { type_key: type_key.clone(), version, nonce, latency })
            }
            RequestKind::Nack { version, nonce, error } => {
                slot.sent_at = None;
                // A NACK names the latest nonce (rule S5): the rejected response is the last sent.
                let rejected_version = slot.sub.last_sent_version.clone().unwrap_or_default();
                Some(Event::Nack {
                    type_key: type_key.clone(),
                    rejected_version,
                    kept_version: version,
                    nonce,
                    error,
                })
            }
            RequestKind::Stale { .. } => Some(Event::Stale { type_key: type_key.clone() }),
            RequestKind::Initial | RequestKind::Spontaneous => None,
        };
        // A request that answers a response and changes no name (every request of a synced
        // client, one per update) is reported by its answer alone: an empty `Request` before
        // it told nothing, and cost every stream an event per update.
        let changed = !handled.subscribed.is_empty() || !handled.unsubscribed.is_empty();
        if changed || answer.is_none() {
            events.push_back(Event::Request {
                type_key,
                subscribed: handled.subscribed,
                unsubscribed: handled.unsubscribed,
            });
        }
        events.extend(answer);
    }

    /// The next response to send, if any, given the current `views`: the rounds of
    /// [`next_read`](Self::next_read) and [`respond`](Self::respond), with `views` lending each
    /// view in turn. For a caller whose views are at hand (tests, a single-threaded server); a
    /// caller that must not run its cache's code under its lock of the stream uses the steps.
    ///
    /// Each type answers in the [`TypeKey`] order, one response in flight per type. On an
    /// aggregated stream, clusters and endpoints that are gone are removed only once every other
    /// type is quiet (rule O1: nothing owed, nothing awaiting its ACK), so the listeners and
    /// routes that used them were updated first. Per-type streams have nothing to order against.
    #[must_use = "a returned response must be sent"]
    pub fn poll_response<V: Views<K, Resource = R> + ?Sized>(
        &mut self,
        views: &mut V,
        now: Instant,
    ) -> Option<Outgoing<K, P::Response<R>>> {
        while let Some(read) = self.next_read() {
            let mut lent = false;
            views.read(&read.type_key, &mut |view| {
                lent = true;
                self.respond(&read, Some(view), now);
            });
            if !lent {
                self.respond(&read, None, now);
            }
        }
        self.poll_ready()
    }

    /// The view the round of responses under way needs next, if any: the caller reads that
    /// type's view and hands it to [`respond`](Self::respond), then asks again, until `None`;
    /// then [`poll_ready`](Self::poll_ready) has the responses. The stream never reads a view
    /// itself: the caller reads its cache with no lock of the stream held, and the stream
    /// computes with the view it is given.
    ///
    /// A round starts when no response is waiting in [`poll_ready`](Self::poll_ready): every
    /// type in the [`TypeKey`] order, then, on an aggregated stream whose other types are quiet,
    /// the removals held back by rule O1.
    pub fn next_read(&mut self) -> Option<Read<K>> {
        if self.round.is_none() {
            // Said for the next round only (and a round that cannot start now is not that one).
            let unchanged = std::mem::take(&mut self.views_unchanged);
            if !self.ready.is_empty() {
                return None;
            }
            let ads = self.guard.is_aggregated();
            for slot in self.subs.values_mut() {
                let touched = std::mem::take(&mut slot.touched);
                let defer = ads && slot.role == TypeRole::RemovedLast;
                slot.pending = (touched || !unchanged).then_some(defer);
                slot.needs_change = slot.pending.is_some() && !touched && slot.waits_for_changes();
            }
            self.round = Some(Round { second_pass_owed: ads });
        }
        if let Some(read) = self.pending_read() {
            return Some(read);
        }
        let round = self.round.as_mut()?;
        if std::mem::take(&mut round.second_pass_owed) && self.owes_held_back_removals() {
            let removals = self.subs.values_mut().filter(|s| s.role == TypeRole::RemovedLast);
            removals.for_each(|slot| {
                slot.pending = Some(false);
                slot.needs_change = false;
            });
            if let Some(read) = self.pending_read() {
                return Some(read);
            }
        }
        self.round = None;
        None
    }

    /// The first type, in order, that the round under way still reads, taken off the round.
    fn pending_read(&mut self) -> Option<Read<K>> {
        let (key, slot) = self.subs.0.iter_mut().find(|(_, s)| s.pending.is_some())?;
        let defer_removals = slot.pending.take().unwrap_or(false);
        let needs_change = std::mem::take(&mut slot.needs_change);
        Some(Read { type_key: key.clone(), defer_removals, needs_change })
    }

    /// Tells the stream that no view it reads changed since its last round: the caller was woken
    /// by a request or a timer, not by its cache. The next round then reads only the types that
    /// may owe a response for another reason: a request of the type since the last round (an
    /// ACK that lets a held-back change go, a subscription changed), a heartbeat fallen due,
    /// rule D10 (and, as always, the removals rule O1 held back once the other types are
    /// quiet). A lone ACK of a client that was sent everything owes nothing (rule S6).
    ///
    /// An ADS stream of five types reads no view for a synced client's ACK, and one for a
    /// request that changes its type's subscription, not five. A caller that cannot tell whether
    /// its views changed does not call this: every round reads every type.
    pub fn views_unchanged(&mut self) {
        self.views_unchanged = true;
    }

    /// [`views_unchanged`](Self::views_unchanged), said by a caller about to start a round:
    /// true when that round would read no view and owe nothing (no response waits, no type was
    /// touched since the last round, no removal held back by rule O1 falls due), as after a
    /// synced client's ACK. That round is then over already: the caller skips it and only takes
    /// the events. False leaves the next round to read the touched types, as
    /// `views_unchanged` does.
    #[must_use = "a quiet round is spent: skip it; otherwise run it"]
    pub fn views_unchanged_quietly(&mut self) -> bool {
        let quiet = self.round.is_none()
            && self.ready.is_empty()
            && self.subs.values().all(|slot| !slot.touched)
            && !(self.guard.is_aggregated() && self.owes_held_back_removals());
        self.views_unchanged = !quiet;
        quiet
    }

    /// Rule O1: removals were held back, and every type that could refer to them is quiet.
    fn owes_held_back_removals(&self) -> bool {
        let pending = self.subs.values().any(|s| s.sub.has_deferred_removals());
        let quiet = self
            .subs
            .values()
            .filter(|s| s.role != TypeRole::RemovedLast)
            .all(|s| !s.sub.awaiting_ack());
        pending && quiet
    }

    /// Computes what `read.type_key` owes from `view` (the caller's read of that type's view,
    /// `None` when it has none: then only a heartbeat can be owed), and queues it for
    /// [`poll_ready`](Self::poll_ready).
    pub fn respond(&mut self, read: &Read<K>, view: Option<&dyn View<Resource = R>>, now: Instant) {
        let type_key = &read.type_key;
        let Some(slot) = self.subs.get_mut(type_key) else { return };
        let nonces = &mut self.nonces;
        let mut response = match view {
            Some(view) if read.defer_removals => {
                slot.sub.poll_response_deferring_removals(view, nonces)
            }
            Some(view) => slot.sub.poll_response(view, nonces),
            None => None,
        };
        if response.is_none() && slot.heartbeat_owed {
            response = slot.sub.poll_heartbeat(nonces);
        }
        let Some(response) = response else { return };
        slot.sent_at = Some(now);
        slot.refreshed_at = now;
        slot.heartbeat_owed = false;
        self.events.push_back(Event::Sent {
            type_key: type_key.clone(),
            version: response.version().clone(),
            nonce: response.nonce().clone(),
            resources: response.len(),
            heartbeat: response.is_heartbeat(),
        });
        if slot.role == TypeRole::RouteConfiguration {
            self.resend_virtual_hosts(&response);
        }
        self.ready.push_back(Outgoing { type_key: type_key.clone(), response });
    }

    /// The next response a round computed, in the order to send them.
    #[must_use = "a returned response must be sent"]
    pub fn poll_ready(&mut self) -> Option<Outgoing<K, P::Response<R>>> {
        drained(&mut self.ready, 1)
    }

    /// Rule D10: a client that got a new RouteConfiguration `rc` drops its virtual hosts, so its
    /// `rc/...` virtual host subscriptions are owed again.
    fn resend_virtual_hosts(&mut self, routes: &P::Response<R>) {
        let Some(vhds) = self.subs.values_mut().find(|s| s.role == TypeRole::VirtualHost) else {
            return;
        };
        vhds.touched = true;
        // In this round, as when every round reads every type (VirtualHost comes after
        // RouteConfiguration): a round that reads only touched types may not have it.
        if self.round.is_some() && vhds.pending.is_none() {
            vhds.pending = Some(false);
        }
        vhds.needs_change = false;
        routes.for_each_name(&mut |name| {
            let prefix = format!("{name}/");
            vhds.sub.resend_where(|alias| alias.starts_with(&prefix));
        });
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next owed a call, if ever: the earliest
    /// TTL heartbeat due on a sub-stream with no response in flight.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.subs.values().filter_map(|slot| slot.heartbeat_due()).min()
    }

    /// Time passed: every heartbeat due by `now` is owed, and goes with the next
    /// [`poll_response`](Self::poll_response) (after nothing else of its type).
    pub fn handle_timeout(&mut self, now: Instant) {
        for slot in self.subs.values_mut() {
            if slot.heartbeat_due().is_some_and(|due| due <= now) {
                slot.heartbeat_owed = true;
                slot.touched = true;
            }
        }
    }

    /// The next thing that happened, oldest first.
    pub fn poll_event(&mut self) -> Option<Event<K>> {
        drained(&mut self.events, 2)
    }

    /// The node of the stream's first request (`None` before it, or for an anonymous client).
    pub fn node(&self) -> Option<&N> {
        self.guard.node()
    }

    /// Whether the stream is aggregated (ADS).
    pub fn is_aggregated(&self) -> bool {
        self.guard.is_aggregated()
    }

    /// Every sub-stream, in order, for status pages.
    pub fn sub_streams(&self) -> impl Iterator<Item = (&K, &SubStream<P, R>)> {
        self.subs.0.iter().map(|(k, s)| (k, &s.sub))
    }
}

/// A stream's sub-streams, in the order of their types: a few (one per type the stream uses),
/// found by a scan. Each round walks all of them a few times (every wake of the stream), which
/// in a B-tree set up a cursor through its node each time, and the node kept room for eleven.
/// Found by the types' order (`Ord`), as the B-tree found them.
struct Slots<K, P, R>(Vec<(K, Box<Slot<P, R>>)>);

impl<K: Ord + Clone, P, R> Slots<K, P, R> {
    fn get(&self, key: &K) -> Option<&Slot<P, R>> {
        self.0.iter().find(|(k, _)| k.cmp(key).is_eq()).map(|(_, slot)| &**slot)
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut Slot<P, R>> {
        self.0.iter_mut().find(|(k, _)| k.cmp(key).is_eq()).map(|(_, slot)| &mut **slot)
    }

    /// The slot of `key`, made by `new` and put in its place in order if there is none.
    fn get_or_insert_with(
        &mut self,
        key: &K,
        new: impl FnOnce() -> Box<Slot<P, R>>,
    ) -> &mut Slot<P, R> {
        let at = match self.0.binary_search_by(|(k, _)| k.cmp(key)) {
            Ok(at) => at,
            Err(at) => {
                self.0.insert(at, (key.clone(), new()));
                at
            }
        };
        &mut self.0[at].1
    }

    fn values(&self) -> impl Iterator<Item = &Slot<P, R>> {
        self.0.iter().map(|(_, slot)| &**slot)
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Slot<P, R>> {
        self.0.iter_mut().map(|(_, slot)| &mut **slot)
    }
}

/// The front of a queue that is drained after every call. Emptied, the queue keeps room for
/// `keep` entries: an update brings a stream one response, and its ACK two events (the request
/// and the ACK), and the room a burst grew (the storm's responses of every type at once) would
/// otherwise stay reserved for the life of the stream, about a kilobyte per connected client.
/// Room for fewer than an update needs would be given back and taken again at every update.
fn drained<T>(queue: &mut VecDeque<T>, keep: usize) -> Option<T> {
    let front = queue.pop_front();
    if front.is_none() && queue.capacity() > keep {
        queue.shrink_to(keep);
    }
    front
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue that a burst grew keeps room for what it is asked to keep once drained, and as
    /// many entries at a time then need no more.
    #[test]
    fn a_drained_queue_keeps_the_room_asked_for() {
        for keep in [1, 2] {
            let mut queue: VecDeque<[u8; 200]> = VecDeque::new();
            queue.extend([[0; 200]; 8]);
            assert!(queue.capacity() >= 8);
            while drained(&mut queue, keep).is_some() {}
            assert_eq!(queue.capacity(), keep);
            queue.extend(std::iter::repeat_n([1; 200], keep));
            while drained(&mut queue, keep).is_some() {}
            assert_eq!(queue.capacity(), keep, "the same room, not given back and taken again");
        }
    }
}
