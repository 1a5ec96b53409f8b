//! Drives one stream: reads requests, waits for cache signals and timers, writes responses. Every
//! protocol decision is the core's ([`xds_core::Stream`]); this is its I/O.
//!
//! The response stream *is* the loop: tonic polls it, and it polls the request stream, the
//! stream's cache signal and the core's timer in turn. Nothing is spawned (but, while a stream
//! joins, the keeper of its join-gate permit, below); a client that stops
//! reading stops its own loop, and when it reads again it gets the newest state (the cache queues
//! nothing for it).
//!
//! The join gate: a stream's first request waits for a permit of the server-wide gate
//! (`ServerConfig::join_permits`) before the stream computes anything, and a joining stream
//! holds a permit while its responses with resources are computed and written, giving it back
//! as soon as the transport took them. What the stream does meanwhile (resumes, joins, waits on
//! its client, is synced) and which lane it waits in are decided in `gate.rs`, which says why a
//! permit covers the server's work and not the client's ACK; this loop only awaits the permit
//! and hands it to a task of its own while it is held (a stream blocked on flow control is not
//! polled), which frees it after `ServerConfig::join_timeout` whatever the stream does. A
//! stream waits for a permit for at most `ServerConfig::join_max_wait`, then goes on ungated.
//! A synced stream never waits on the gate again: updates are not queued behind joiners.
//!
//! A stream that *resumes* (its first request says what the client holds: delta
//! `initial_resource_versions`, a SotW `version_info`) is taken in at once, and waits for a permit
//! only before it writes a response that carries resources. A proxy moving to another replica,
//! or reconnecting after a blip, usually holds everything and is sent nothing: it has no place in
//! the queue of proxies that need their whole configuration (behind which it waited seconds when
//! a replica died). When the configuration changed meanwhile, it queues like any joiner.
//!
//! A joiner that was owed nothing with resources (its group has no configuration yet: a
//! restarted control plane still loading it, with every proxy already reconnected) waits for a
//! permit again before its first response with resources: when the configuration arrives, those
//! streams join through the gate rather than all at once.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Instant;

use tokio::sync::oneshot;
use tokio::time::{Sleep, sleep_until};

use futures_util::Stream;
use smallvec::SmallVec;
use tonic::Status;

use crate::codec::decode::Requests;
use xds_cache::{DynView, Signal, Watch, WatchRequest};
use xds_core::Read;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{ResourceType, TypeUrl};

use super::gate::{Join, Lane};
use super::protocol::{CoreStream, Wanted, WireProtocol, fill_status};
use super::report::{deliver, record};
use super::woken::Filtered;
use crate::authz::{Access, Entry, Peer};
use crate::callbacks::StreamInfo;
use crate::metrics::StreamCounters;
use crate::server::Shared;
use crate::status::{Detail, EventLog, Listed, StreamEventKind, StreamStatus, lock, now_ms};

/// The node of a client that sent none (when anonymous clients are allowed).
static ANONYMOUS: LazyLock<Node> = LazyLock::new(Node::default);

/// The response stream handed to tonic (by xDS streams here, and by the reporting services).
pub(crate) type ResponseStream<W> = Pin<Box<dyn Stream<Item = Result<W, Status>> + Send>>;

/// A stream's protocol state and its latest events, readable by status queries. Behind mutexes
/// (uncontended: only this stream and status queries take them) so that status pages read what
/// each client holds when asked, rather than the stream copying it after every response; and so
/// that the summaries of many streams (the operator console's table) copy no history. No user
/// code runs under either.
struct Shareable<P: WireProtocol> {
    core: Mutex<CoreStream<P>>,
    events: Mutex<EventLog>,
    /// The stream's cache signal, raised to wake it at shutdown.
    signal: Arc<Signal>,
}

impl<P: WireProtocol> Detail for Shareable<P> {
    fn fill(&self, status: &mut StreamStatus, limit: Option<usize>) -> BTreeMap<String, Listed> {
        status.events = lock(&self.events).to_vec();
        let mut listed = BTreeMap::new();
        for (t, sub) in lock(&self.core).sub_streams() {
            let all = fill_status(sub, status.types.entry(t), limit);
            listed.insert(t.to_string(), all);
        }
        listed
    }

    fn stop(&self) {
        self.signal.raise();
    }
}

/// The cache watches of a stream's types: the views its core reads.
#[derive(Default)]
struct Watches {
    /// A few types (at most one per type the server serves), looked up in order: a B-tree's
    /// node would reserve room for eleven.
    watches: Vec<(TypeUrl, Box<dyn Watch>)>,
    /// The types whose view was not ready when last read: the cache serves the node nothing of
    /// them yet (its group has no configuration), so the stream waits.
    unready: std::collections::BTreeSet<TypeUrl>,
}

impl Watches {
    /// Lends the current view of `type_url` to `f`; false (and `f` not called) when the stream
    /// has no watch of it. Runs the cache's code: call it with no lock of the stream held.
    fn read(&mut self, type_url: &TypeUrl, f: &mut dyn FnMut(&DynView<'_>)) -> bool {
        let Some(watch) = self.get(type_url) else { return false };
        let mut ready = true;
        watch.read(&mut |view: &DynView<'_>| {
            ready = view.is_ready();
            f(view);
        });
        if ready {
            self.unready.remove(type_url);
        } else if !self.unready.contains(type_url) {
            self.unready.insert(type_url.clone());
        }
        true
    }

    /// Whether `read` can be skipped: only a change can owe its type a response, and its cache
    /// marked none since the last read (`Watch::take_change`). Most reads of a stream woken by
    /// a change to one of its types are of the others. The mark is taken for every read, so
    /// that one read in a round for another reason is not read again for the same change.
    fn unchanged(&self, read: &Read<TypeUrl>) -> bool {
        let changed = self.get(&read.type_key).is_none_or(|watch| watch.take_change());
        read.needs_change() && !changed
    }

    /// The key of an open type by its URL as a request spells it.
    fn key(&self, type_url: &str) -> Option<TypeUrl> {
        self.watches.iter().find(|(t, _)| t.as_str() == type_url).map(|(t, _)| t.clone())
    }

    fn get(&self, type_url: &TypeUrl) -> Option<&dyn Watch> {
        self.watches.iter().find(|(t, _)| t == type_url).map(|(_, watch)| &**watch)
    }
}

struct Driver<P: WireProtocol> {
    shared: Arc<Shared>,
    info: StreamInfo,
    /// Who is on the other end, for the authorization point.
    peer: Peer,
    /// The protocol state and the event history, shared with status queries.
    state: Arc<Shareable<P>>,
    watches: Watches,
    signal: Arc<Signal>,
    /// The request stream, looked at only when it woke the stream (see [`Filtered`]).
    requests: Filtered<Requests<P::WireRequest>>,
    /// Responses to write, each with whether it carries resources: at most one per type per wake
    /// (the core keeps one in flight per type).
    outbox: VecDeque<(P::Wire, bool)>,
    status: Arc<Mutex<StreamStatus>>,
    done: bool,
    /// Its place in the join gate.
    join: Join<TypeUrl>,
    /// Frees the permit it holds, if any, when dropped (the permit's keeper also frees it after
    /// `join_timeout`).
    permit: Option<oneshot::Sender<()>>,
    /// Since when the cache has served the node nothing of a type it asked for, if it has not.
    unserved_since: Option<Instant>,
    /// A wait for a join permit under way, and what the stream does once it has it.
    waiting: Option<(PermitFuture, AfterPermit<P::WireRequest>)>,
    /// The core's timer (TTL heartbeats), while it names a time.
    timer: Option<Pin<Box<Sleep>>>,
    /// When the core's timer is next due ([`xds_core::Stream::poll_timeout`]), read with the
    /// events: every turn that changes the core (a request, a round, a timeout) ends in
    /// [`report_events`](Self::report_events), and only a change of the core moves the time.
    /// The loop's turns that find nothing to do (most of them) then take no lock for it.
    timeout: Option<Instant>,
    /// The unserved deadline's timer, while there is one.
    give_up: Option<Pin<Box<Sleep>>>,
    /// Its handles on the server's counters of its types, counted without a lock.
    counters: StreamCounters,
}

/// Opens a stream: admission checks, then the loop as a response stream.
pub(crate) fn open<P: WireProtocol>(
    shared: Arc<Shared>,
    fixed: Option<ResourceType>,
    request: tonic::Request<Requests<P::WireRequest>>,
) -> Result<ResponseStream<P::Wire>, Status> {
    if shared.shutdown.is_cancelled() {
        return Err(Status::unavailable("the server is shutting down"));
    }
    let open = shared.open.fetch_add(1, Ordering::SeqCst) + 1;
    let info = StreamInfo {
        id: shared.next_id.fetch_add(1, Ordering::Relaxed),
        variant: P::VARIANT,
        type_url: fixed.map(TypeUrl::from),
        remote_addr: request.remote_addr(),
        peer_certificates: request
            .peer_certs()
            .map(|certs| Arc::new(certs.iter().map(|c| c.as_ref().to_vec()).collect())),
        node: None,
        group: None,
    };
    let limits = &shared.config.limits;
    let config = xds_core::StreamConfig::default()
        .allow_anonymous(shared.config.allow_anonymous)
        .max_names_per_request(limits.max_names_per_request)
        .max_requests_per_second(limits.max_requests_per_second)
        .request_burst(limits.request_burst)
        .max_subscribed_names(limits.max_subscribed_names)
        // The wire encodes a whole set once for every client it goes to (`codec::encodings`).
        .shared_sets(true);
    let now = Instant::now();
    let core = match &info.type_url {
        Some(t) => CoreStream::<P>::per_type(t, config, now),
        None => CoreStream::<P>::aggregated(config, now),
    };
    // From here on, dropping the driver undoes the admission.
    let status = shared.status.open(info.id, P::LABEL);
    let signal = Arc::new(Signal::new());
    let driver = Driver::<P> {
        state: Arc::new(Shareable {
            core: Mutex::new(core),
            events: Mutex::new(EventLog::new(shared.config.stream_events)),
            signal: signal.clone(),
        }),
        watches: Watches::default(),
        signal,
        requests: Filtered::new(request.into_inner()),
        outbox: VecDeque::new(),
        status,
        done: false,
        join: Join::new(shared.join_gate.is_some(), shared.config.join_max_wait),
        permit: None,
        unserved_since: None,
        waiting: None,
        timer: None,
        timeout: None,
        give_up: None,
        counters: StreamCounters::default(),
        peer: Peer { remote_addr: info.remote_addr, certificates: info.peer_certificates.clone() },
        info,
        shared,
    };
    let detail: Arc<dyn Detail> = driver.state.clone();
    driver.shared.status.attach(driver.info.id, Arc::downgrade(&detail));
    // Registered (attached) first, then the watch: a shutdown from here on wakes the stream.
    driver.shared.watch_shutdown();
    if open > driver.shared.config.limits.max_streams {
        driver.shared.metrics.refused("max_streams");
        return Err(Status::resource_exhausted(format!(
            "too many streams: the server serves at most {}",
            driver.shared.config.limits.max_streams
        )));
    }
    if let Err(refusal) = driver.shared.callbacks.on_stream_open(&driver.info) {
        driver.shared.metrics.refused("callback");
        return Err(Status::permission_denied(refusal.0));
    }
    let span = tracing::info_span!(
        "xds_stream",
        id = driver.info.id,
        variant = P::LABEL,
        node = tracing::field::Empty
    );
    tracing::debug!(parent: &span, "stream opened");
    // One allocation for the driver, polled in place until the stream ends.
    Ok(Box::pin(InSpan { items: Items(Some(Box::new(driver))), span }))
}

/// The response stream: the driver's loop, polled by the response body. A hand-made stream
/// rather than an `async` loop under `unfold`: that moved the loop's future into and out of
/// `unfold` for every response, and made a `select!` of four futures at every turn.
///
/// The driver is dropped in the poll that ends the stream, inside the stream's span: its
/// watches, its join permit, its place under `max_streams` and the `on_stream_closed` callback
/// are let go before the transport sends the stream's end, not when the transport drops the
/// body. An error ends the stream too (the body sends it as the trailers' status and polls no
/// more), so it lets the driver go as well: under `unfold`, only a clean end did.
struct Items<P: WireProtocol>(Option<Box<Driver<P>>>);

impl<P: WireProtocol> Stream for Items<P> {
    type Item = Result<P::Wire, Status>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(driver) = this.0.as_mut() else { return Poll::Ready(None) };
        let item = ready!(driver.poll_item(cx));
        if !matches!(item, Some(Ok(_))) {
            this.0 = None;
        }
        Poll::Ready(item)
    }
}

/// What a wait for a join permit came to.
enum PermitWait {
    Granted(super::permits::Permit),
    /// `ServerConfig::join_max_wait` passed: the stream goes on ungated.
    TooLong,
    /// The server shuts down.
    Stopped,
}

/// A wait for a join permit, owning what it waits on (the gate, the shutdown token): it lives
/// in the driver while the driver is polled. Boxed: only a joining stream under the gate waits.
type PermitFuture = Pin<Box<dyn Future<Output = PermitWait> + Send>>;

/// What a stream does once it has its permit.
enum AfterPermit<R> {
    /// Writes the response at the head of its outbox.
    Write,
    /// Takes in its first request.
    Request(Box<R>),
}

/// Polls the timer in `slot` for `at`: set, moved or dropped as `at` says. The `Sleep` is made
/// when a deadline first appears and moved with it after: a stream with a TTL heartbeat keeps
/// one (it made one at every turn of its loop), and the others make none. A deadline that has
/// passed is ready at every poll, as a new `Sleep` for it would be.
fn poll_deadline(
    slot: &mut Option<Pin<Box<Sleep>>>,
    at: Option<Instant>,
    cx: &mut Context<'_>,
) -> Poll<()> {
    let Some(at) = at.map(tokio::time::Instant::from_std) else {
        // Dropped, so that a deadline gone wakes no one. (Most streams never have one: the
        // look costs less than writing `None` over `None`, twice per turn of the loop.)
        if slot.is_some() {
            *slot = None;
        }
        return Poll::Pending;
    };
    match slot {
        Some(sleep) if sleep.deadline() == at => {}
        Some(sleep) => sleep.as_mut().reset(at),
        None => *slot = Some(Box::pin(sleep_until(at))),
    }
    slot.as_mut().map_or(Poll::Pending, |sleep| sleep.as_mut().poll(cx))
}

/// A stream polled inside `span`: the span entered for each poll, as `Instrument` does for a
/// future, without a copy of the span per item (each a reference count the subscriber keeps,
/// taken and dropped per response).
struct InSpan<S> {
    items: S,
    span: tracing::Span,
}

impl<S: Stream + Unpin> Stream for InSpan<S> {
    type Item = S::Item;

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        let this = self.get_mut();
        let _entered = this.span.enter();
        Pin::new(&mut this.items).poll_next(cx)
    }
}

impl<P: WireProtocol> Driver<P> {
    /// The loop: the next response to write, the end of the stream, or `Pending` with the task
    /// registered with every source that can wake it (the request stream, the cache signal, the
    /// core's timer, the unserved deadline, a join permit awaited). Each turn writes what is
    /// owed first, then takes what woke the stream, in order: a request, the cache signal, a
    /// timer; and responds.
    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<P::Wire, Status>>> {
        loop {
            if let Some((wait, _)) = self.waiting.as_mut() {
                let outcome = ready!(wait.as_mut().poll(cx));
                let after = self.waiting.take().map(|(_, after)| after);
                if !self.permitted(outcome) {
                    return Poll::Ready(Some(Err(self.shutting_down())));
                }
                match after {
                    Some(AfterPermit::Request(request)) => {
                        match self.take_request(*request) {
                            Ok(quiet) => self.answer(quiet),
                            Err(status) => return Poll::Ready(Some(Err(status))),
                        }
                        continue;
                    }
                    Some(AfterPermit::Write) | None => return Poll::Ready(self.write()),
                }
            }
            if let Some(&(_, resources)) = self.outbox.front() {
                if let Some(lane) = self.join.before_write(resources)
                    && let Some(wait) = self.permit_wait(lane)
                {
                    self.waiting = Some((wait, AfterPermit::Write));
                    continue;
                }
                return Poll::Ready(self.write());
            }
            if self.done {
                return Poll::Ready(None);
            }
            if self.shared.is_stopping() {
                return Poll::Ready(Some(Err(self.shutting_down())));
            }
            // Everything owed was taken by the transport (this is polled again).
            if self.join.drained() {
                self.permit = None;
            }
            match self.requests.poll(cx, |requests, cx| requests.poll_message(cx)) {
                Poll::Ready(Ok(Some(request))) => {
                    if let Some(lane) = self.join.first_request(P::resumes(&request))
                        && let Some(wait) = self.permit_wait(lane)
                    {
                        self.waiting = Some((wait, AfterPermit::Request(Box::new(request))));
                        continue;
                    }
                    match self.take_request(request) {
                        Ok(quiet) => self.answer(quiet),
                        Err(status) => return Poll::Ready(Some(Err(status))),
                    }
                    continue;
                }
                // The client closed its side: nothing left to do.
                Poll::Ready(Ok(None)) => return Poll::Ready(None),
                // A request that did not decode (too large, malformed) or a broken transport:
                // end the stream and tell the client why (a gone client simply won't hear it).
                Poll::Ready(Err(status)) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(self.request_error(status))));
                }
                Poll::Pending => {}
            }
            // The cache, or the server's shutdown (`Shared::watch_shutdown`).
            if self.signal.poll_raised(cx).is_ready() {
                if self.shared.is_stopping() {
                    return Poll::Ready(Some(Err(self.shutting_down())));
                }
                self.respond();
                continue;
            }
            // The core's timer (TTL heartbeats). It names no time while a response awaits its
            // ACK, so a client that does not answer cannot make this loop spin.
            if poll_deadline(&mut self.timer, self.timeout, cx).is_ready() {
                lock(&self.state.core).handle_timeout(Instant::now());
                let quiet = self.views_unchanged_unless_raised();
                self.answer(quiet);
                continue;
            }
            // `ServerConfig::unserved_timeout`: the node's group serves it nothing.
            let give_up = self.unserved_deadline();
            if poll_deadline(&mut self.give_up, give_up, cx).is_ready() {
                self.done = true;
                return Poll::Ready(Some(Err(self.unserved_status())));
            }
            return Poll::Pending;
        }
    }

    /// Hands the response at the head of the outbox to the transport.
    fn write(&mut self) -> Option<Result<P::Wire, Status>> {
        let (wire, resources) = self.outbox.pop_front()?;
        self.join.wrote(resources);
        if self.outbox.is_empty() {
            // Room for one between rounds, as the core keeps its queues: the room the storm's
            // responses grew would stay reserved for the life of the stream.
            self.outbox.shrink_to(1);
        }
        Some(Ok(wire))
    }

    /// The stream ends as the server shuts down: the client reconnects (to another replica).
    fn shutting_down(&mut self) -> Status {
        self.done = true;
        Status::unavailable("the server is shutting down: reconnect")
    }

    /// Takes in one request ([`on_request`](Self::on_request)); a refused one ends the stream.
    /// True when the round that follows would owe nothing ([`answer`](Self::answer)).
    fn take_request(&mut self, request: P::WireRequest) -> Result<bool, Status> {
        if let Err(status) = self.on_request(request) {
            self.done = true;
            tracing::debug!(stream = self.info.id, %status, "stream refused a request");
            return Err(status);
        }
        Ok(self.views_unchanged_unless_raised())
    }

    /// What follows a request or a timer: the round of responses, unless it would read no view
    /// and owe nothing (`quiet`, as after a synced client's ACK: every request of an update),
    /// when the events are all there is to report.
    fn answer(&mut self, quiet: bool) {
        if quiet {
            self.report_events();
        } else {
            self.respond();
        }
    }

    /// Woken by the client or a timer rather than the cache: the round that follows reads only
    /// the types that may owe a response for that (`Stream::views_unchanged`), unless the cache
    /// raised the signal meanwhile (before the request was taken, while it waited for a permit,
    /// while it was handled). Then the round reads every type, in order, and takes the raise: a
    /// round of the requested types alone would send their new state before the others' (a
    /// route before the cluster it names: rule O1). A raise after this look is kept, and wakes
    /// a full round next; a cache that changes during a round is read part old, part new, as
    /// in any round.
    ///
    /// True when the round would then read no view and owe nothing
    /// (`xds_core::Stream::views_unchanged_quietly`): it need not be run.
    #[must_use = "a quiet round is skipped, not run"]
    fn views_unchanged_unless_raised(&mut self) -> bool {
        !self.signal.take() && lock(&self.state.core).views_unchanged_quietly()
    }

    /// A wait for a permit of the join gate in `lane`, at most until the gate's deadline (then
    /// the stream goes on ungated, see [`permitted`](Self::permitted)); none without a gate. The
    /// permit goes to a task that frees it when the stream gives it back (drops `permit`), ends,
    /// or has held it for `join_timeout`.
    fn permit_wait(&mut self, lane: Lane) -> Option<PermitFuture> {
        let Some(gate) = self.shared.join_gate.clone() else {
            self.join.open();
            return None;
        };
        let deadline = self.join.wait_deadline(Instant::now());
        // The server, not a copy of its shutdown token: a copy takes the token's lock, which
        // every stream shares, when made and again when dropped.
        let shared = self.shared.clone();
        Some(Box::pin(async move {
            tokio::select! {
                biased;
                _ = shared.shutdown.cancelled() => PermitWait::Stopped,
                permit = gate.acquire(lane) => PermitWait::Granted(permit),
                _ = sleep_until(deadline.into()) => PermitWait::TooLong,
            }
        }))
    }

    /// Takes what a wait for a permit came to: false if the server shuts down.
    fn permitted(&mut self, wait: PermitWait) -> bool {
        let permit = match wait {
            PermitWait::Granted(permit) => permit,
            PermitWait::Stopped => return false,
            PermitWait::TooLong => {
                self.join.waited_too_long();
                self.shared.metrics.join_gate_passed();
                tracing::debug!(
                    stream = self.info.id,
                    "waited for a join permit too long: ungated"
                );
                return true;
            }
        };
        self.join.granted();
        let (release, released) = oneshot::channel::<()>();
        let hold = self.shared.config.join_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tokio::time::timeout(hold, released).await;
        });
        self.permit = Some(release);
        true
    }

    /// The server's counters of `type_url` on this stream's variant.
    fn counter(&mut self, type_url: &TypeUrl) -> &crate::metrics::PerType {
        let shared = &self.shared;
        self.counters.of(&shared.metrics, P::LABEL, type_url, || shared.label(type_url))
    }

    /// The status a stream ends with when its request stream fails.
    fn request_error(&self, status: Status) -> Status {
        match status.code() {
            // tonic's "decoded message length too large": the `max_request_bytes` limit.
            tonic::Code::OutOfRange => {
                self.shared.metrics.refused("max_request_bytes");
                Status::resource_exhausted(format!(
                    "request larger than the server accepts ({} bytes): {}",
                    self.shared.config.limits.max_request_bytes,
                    status.message()
                ))
            }
            tonic::Code::Internal | tonic::Code::InvalidArgument => {
                self.shared.metrics.refused("malformed_request");
                Status::invalid_argument(format!("malformed request: {}", status.message()))
            }
            _ => status,
        }
    }

    /// One request: the core admits it, the server's policy (callbacks, authorization) may
    /// refuse it, a new type gets its watch, and the core takes it in. No lock is held while
    /// user code (callbacks, policy, cache) runs.
    fn on_request(&mut self, mut request: P::WireRequest) -> Result<(), Status> {
        if !self.shared.custom_callbacks
            && let Some(type_url) = P::ack_type(&request).and_then(|t| self.watches.key(t))
        {
            match P::take_ack(request) {
                Ok(ack) => return self.on_ack(type_url, ack),
                Err(other) => request = other,
            }
        }
        let names = P::name_count(&request);
        let (node, type_url) = P::header(&mut request);
        if let Some(Err(message)) = node.as_ref().map(|n| self.shared.config.limits.check_node(n)) {
            self.shared.metrics.refused("invalid_request");
            return Err(Status::invalid_argument(message));
        }
        let admitted = lock(&self.state.core)
            // Only a first request's node is kept (rule S2): a later one is not copied.
            .admit(
                node.filter(|_| self.info.node.is_none()).map(Arc::new),
                &type_url,
                names,
                Instant::now(),
            )
            .map(|a| (self.shared.type_url(a.type_url), a.first));
        let (type_url, first) = admitted.map_err(|e| self.refuse(&e))?;
        if first {
            self.start()?;
        }
        let wanted = Wanted {
            every: self.shared.custom_callbacks,
            repeated: self.shared.callbacks.wants_repeated_names(),
        };
        P::read_names(&mut request, &self.state.core, &type_url, wanted).map_err(|e| {
            self.request_error(Status::internal(format!("failed to decode Protobuf message: {e}")))
        })?;
        if let Err(status) =
            self.shared.callbacks.on_request(&self.info, &type_url, P::for_callbacks(&mut request))
        {
            self.shared.metrics.refused("callback");
            return Err(status);
        }
        self.counter(&type_url).request();
        if self.watches.get(&type_url).is_none() {
            self.open_type(&type_url)?;
        }
        // Per-resource policy, asked with no lock held (rule C4: PERMISSION_DENIED per name).
        let node = self.info.node.as_deref().unwrap_or(&ANONYMOUS);
        let denied = {
            let names = P::requested_names(&request);
            let denied =
                self.shared.denied_names(&self.peer, Entry::Stream, node, &type_url, names.clone());
            // A cache that makes resources when asked makes these now, before the response.
            if let Some(watch) = self.watches.get(&type_url) {
                let allowed = |name: &&str| match xds_proto::xdstp::normalize(name) {
                    Ok(normal) => !denied.contains_key(&*normal),
                    Err(_) => false,
                };
                watch.subscribed(&mut names.filter(allowed));
            }
            denied
        };
        let request = P::to_core(request, denied);
        let handled = lock(&self.state.core).handle_request(type_url, request, Instant::now());
        handled.map_err(|e| self.refuse(&e))
    }

    /// An ACK of a type the stream has open, read without being decoded
    /// ([`WireProtocol::ack_type`]), on a server without callbacks of its own: what
    /// [`on_request`](Self::on_request) does with a request that names nothing, carries no
    /// node and opens no type, without the steps that then have nothing to do (the node's
    /// check and the stream's start, names to read, the callbacks, the policy's check of each
    /// name, the watch's opening). The core admits it and takes it in under one lock. A synced
    /// client sends one for every response: most of an update's requests are these.
    fn on_ack(&mut self, type_url: TypeUrl, ack: P::Ack) -> Result<(), Status> {
        let now = Instant::now();
        let (admitted, handled) = {
            let mut core = lock(&self.state.core);
            match core.admit(None, type_url.as_str(), 0, now) {
                Ok(admitted) => {
                    // A type opens only after the stream's first request.
                    debug_assert!(!admitted.first, "an open type on a stream not started");
                    (true, P::take_ack_in(&mut core, &type_url, ack, now))
                }
                Err(refused) => (false, Err(refused)),
            }
        };
        // Counted once admitted, as `on_request` counts a request the core then refuses.
        if admitted {
            self.counter(&type_url).request();
        }
        handled.map_err(|e| self.refuse(&e))
    }

    /// The status a request the core refused ends the stream with.
    fn refuse(&self, error: &xds_core::StreamError) -> Status {
        let (label, status): (_, fn(String) -> Status) = match error {
            xds_core::StreamError::RateLimited { .. } => ("rate_limit", Status::resource_exhausted),
            xds_core::StreamError::TooManyNames { .. } => ("max_names", Status::invalid_argument),
            xds_core::StreamError::TooManySubscribed { .. } => {
                ("max_subscribed_names", Status::resource_exhausted)
            }
            _ => ("invalid_request", Status::invalid_argument),
        };
        self.shared.metrics.refused(label);
        status(error.to_string())
    }

    /// The first request: the node is known (rule S2), and the group the cache serves it from;
    /// the callbacks may refuse it.
    fn start(&mut self) -> Result<(), Status> {
        let node = lock(&self.state.core).node().cloned().unwrap_or_default();
        self.info.node = Some(node.clone());
        self.info.group = self.shared.cache.group(&node).map(Arc::from);
        if let Err(refusal) = self.shared.callbacks.on_node(&self.info, &node) {
            self.shared.metrics.refused("callback");
            return Err(Status::permission_denied(refusal.0));
        }
        // Rule C4: every client is told why a name is not served, unless the server opted out.
        lock(&self.state.core).set_resource_errors(self.shared.config.resource_errors);
        let mut status = lock(&self.status);
        status.node_id = node.id.clone();
        status.node_cluster = node.cluster.clone();
        status.group = self.info.group.as_deref().map(str::to_owned);
        status.node = Some(node.clone());
        drop(status);
        tracing::Span::current().record("node", node.id.as_str());
        tracing::debug!(node = %node.id, group = self.info.group.as_deref(), "stream started");
        Ok(())
    }

    /// Asks the cache again which group serves the node: a regroup (the file server's, when the
    /// set of groups changed) moves live streams, and a NACK must name the configuration the
    /// client rejected, not the one it joined.
    fn refresh_group(&mut self) {
        let Some(node) = &self.info.node else { return };
        let group = self.shared.cache.group(node);
        if group.as_deref() != self.info.group.as_deref() {
            lock(&self.status).group = group.clone();
            let (from, to) = (self.info.group.as_deref(), group.as_deref());
            let what = StreamEventKind::Regrouped {
                from: from.map(crate::status::event_text),
                to: to.map(crate::status::event_text),
            };
            lock(&self.state.events).push(now_ms(), None, what);
            self.info.group = group.map(Arc::from);
        }
    }

    /// A type the stream has not used yet: the authorization point (the node and the type
    /// together decide: a Secret needs a certificate, say), then a watch of its resources.
    fn open_type(&mut self, type_url: &TypeUrl) -> Result<(), Status> {
        let node = self.info.node.as_deref().unwrap_or(&ANONYMOUS);
        self.shared
            .authorize(&self.peer, Entry::Stream, Access::Resources { node, type_url })
            .map_err(|r| Status::permission_denied(r.0))?;
        let watch = self
            .shared
            .cache
            .watch(WatchRequest { node, type_url, variant: P::VARIANT }, self.signal.clone())
            .map_err(|e| crate::server::cache_status(&e))?;
        self.counter(type_url).opened();
        self.watches.watches.push((type_url.clone(), watch));
        Ok(())
    }

    /// When a stream the cache serves nothing ends (`ServerConfig::unserved_timeout`), if it is
    /// unserved and the server gives up on such streams.
    fn unserved_deadline(&self) -> Option<Instant> {
        Some(self.unserved_since? + self.shared.config.unserved_timeout?)
    }

    /// Why a stream served nothing ends: the client retries (on another replica, or once the
    /// group is configured) and the operator sees which node and group had no configuration.
    fn unserved_status(&self) -> Status {
        self.shared.metrics.refused("unserved");
        let node = self.info.node.as_deref().map_or("", |n| n.id.as_str());
        // Quoted and escaped: a node id may hold anything, a newline included.
        let group = match self.info.group.as_deref() {
            Some(group) => format!(" (group {:?})", xds_core::echo(group).to_string()),
            None => String::new(),
        };
        let types: Vec<&str> = self.watches.unready.iter().map(|t| self.shared.label(t)).collect();
        tracing::info!(
            node,
            group = self.info.group.as_deref(),
            ?types,
            "no configuration for this node: stream ended"
        );
        Status::failed_precondition(format!(
            "no configuration is served for node {:?}{group} ({}): the control plane has none for it",
            xds_core::echo(node).to_string(),
            types.join(", "),
        ))
    }

    /// Keeps the stream's status and the server's gauge in step with whether the cache serves
    /// the node everything it asked for. A node whose group has no configuration otherwise
    /// waits in silence: this makes it visible (`/status`, `xds_streams_unserved`).
    fn track_unserved(&mut self, now: Instant) {
        let unserved = !self.watches.unready.is_empty();
        if !unserved && self.unserved_since.is_none() {
            return;
        }
        let mut status = lock(&self.status);
        if unserved {
            if self.unserved_since.is_none() {
                self.unserved_since = Some(now);
                self.shared.metrics.unserved(1);
                let at = now_ms();
                status.unserved_since_ms = Some(at);
                let what = StreamEventKind::Unserved { unserved: true };
                lock(&self.state.events).push(at, None, what);
            }
            let types = self.watches.unready.iter().map(|t| self.shared.label(t).to_owned());
            status.unserved_types = types.collect();
        } else {
            self.unserved_since = None;
            self.shared.metrics.unserved(-1);
            status.unserved_since_ms = None;
            status.unserved_types.clear();
            lock(&self.state.events).push(
                now_ms(),
                None,
                StreamEventKind::Unserved { unserved: false },
            );
        }
    }

    /// Takes every response the core owes into the outbox, then reports what happened: status
    /// and metrics, then the callbacks with no lock held (a callback may call anything on the
    /// server, `status()` included).
    ///
    /// Views in, not callbacks out: the core names the view it needs next, this reads it from
    /// the cache with no lock of the stream held (the cache's code, a custom cache's included,
    /// never runs under it), and hands it to the core, which computes under its lock with the
    /// view it was lent. The responses are encoded after the lock is released.
    fn respond(&mut self) {
        let now = Instant::now();
        let core = &self.state.core;
        loop {
            let read = lock(core).next_read();
            let Some(read) = read else { break };
            if self.watches.unchanged(&read) {
                continue;
            }
            let lent = self.watches.read(&read.type_key, &mut |view| {
                lock(core).respond(&read, Some(view), now);
            });
            if !lent {
                lock(core).respond(&read, None, now);
            }
        }
        // Taken from the core one at a time, each handled with the lock released: a list of
        // them would be an allocation per round, or room kept by every stream.
        let shared = &self.shared;
        let cp = shared.config.control_plane_id.as_deref();
        loop {
            let out = lock(core).poll_ready();
            let Some(out) = out else { break };
            let (wire, bytes) = P::to_wire(out.response, &out.type_key, cp, &shared.encodings);
            let label = || shared.label(&out.type_key);
            self.counters.of(&shared.metrics, P::LABEL, &out.type_key, label).response(bytes);
            self.outbox.push_back((wire, bytes > 0));
        }
        self.track_unserved(now);
        self.report_events();
    }

    /// Reports the core's events: status and metrics, then the callbacks with no lock held.
    /// Also reads when the core's timer is next due: this ends every turn that changed the
    /// core (see [`timeout`](Self::timeout)).
    fn report_events(&mut self) {
        // Taken under one lock: a round brings one event, an ACK one. In place while they are
        // few: a list of them would be an allocation per turn, or room kept by every stream.
        let mut events: SmallVec<[xds_core::Event<TypeUrl>; 2]> = SmallVec::new();
        {
            let mut core = lock(&self.state.core);
            while let Some(event) = core.poll_event() {
                events.push(event);
            }
            self.timeout = core.poll_timeout();
        }
        for event in &events {
            self.report(event);
        }
        // The user's callbacks get the events together, with no lock held.
        deliver(&self.shared, &self.info, &events);
    }

    /// Reports one of the core's events to the join gate, the stream's status and the metrics,
    /// each in its order: a NACK asks for the node's group again, and the history shows that
    /// after what came before it.
    fn report(&mut self, event: &xds_core::Event<TypeUrl>) {
        match event {
            xds_core::Event::Sent { type_key, .. } => self.join.sent(type_key.clone()),
            xds_core::Event::Ack { type_key, .. } => self.join.answered(type_key),
            xds_core::Event::Nack { type_key, .. } => {
                // A NACK names the configuration the client rejected: the node's group now.
                self.refresh_group();
                self.join.answered(type_key);
            }
            _ => {}
        }
        let log = &self.state.events;
        let events = std::slice::from_ref(event);
        record(&self.shared, P::LABEL, &mut self.counters, &self.status, log, events);
    }
}

impl<P: WireProtocol> Drop for Driver<P> {
    fn drop(&mut self) {
        // A wait for a join permit leaves the gate's queue first, as when the loop's future was
        // dropped before the driver.
        self.waiting = None;
        self.shared.open.fetch_sub(1, Ordering::SeqCst);
        self.shared.status.close(self.info.id);
        if self.unserved_since.is_some() {
            self.shared.metrics.unserved(-1);
        }
        for (t, _) in &self.watches.watches {
            self.counters.of(&self.shared.metrics, P::LABEL, t, || self.shared.label(t)).closed();
        }
        self.shared.callbacks.on_stream_closed(&self.info);
        tracing::debug!(stream = self.info.id, "stream closed");
    }
}
