//! Drives one stream: reads requests, waits for cache signals, writes responses.
//!
//! The response stream *is* the loop: tonic polls it, and it polls the request stream and the
//! stream's cache signal in turn. Nothing is spawned; a client that stops reading stops its own
//! loop, and when it reads again it gets the newest state (the cache queues nothing for it).

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use tokio::time::sleep_until;

use futures_util::Stream;
use tonic::{Status, Streaming};
use tracing::Instrument;
use xds_cache::{Signal, Watch, WatchRequest};
use xds_core::{Nonces, RequestKind, StreamGuard};
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{ResourceType, TypeUrl};

use super::protocol::Protocol;
use super::rate::TokenBucket;
use crate::authz::{Access, Entry, Peer};
use crate::callbacks::StreamInfo;
use crate::server::Shared;
use crate::status::{Detail, NackStatus, StreamStatus, lock, now_ms};

/// The node of a client that sent none (when anonymous clients are allowed).
static ANONYMOUS: LazyLock<Node> = LazyLock::new(Node::default);

/// The response stream handed to tonic.
pub(crate) type ResponseStream<W> = Pin<Box<dyn Stream<Item = Result<W, Status>> + Send>>;

struct Slot<P: Protocol> {
    sub: P::Sub,
    watch: Box<dyn Watch>,
    /// When the response in flight was sent, for the ACK latency metric.
    sent_at: Option<Instant>,
    /// When the client last got a response of this type: TTLs run from there.
    refreshed_at: Instant,
}

impl<P: Protocol> Slot<P> {
    /// When a heartbeat is owed: half the shortest held TTL after the last response, so the
    /// client renews well before anything expires.
    ///
    /// None while a response awaits its ACK: no response, heartbeats included, goes out before the
    /// client answered the one in flight. A due time reported then would already be past and never
    /// move on, and the stream's loop would wake for it again at once, spinning a core until the
    /// client ACKs. The ACK wakes the loop, which asks again and sends the heartbeat then.
    fn heartbeat_due(&self) -> Option<Instant> {
        if P::awaiting_ack(&self.sub) {
            return None;
        }
        P::min_ttl(&self.sub).map(|ttl| self.refreshed_at + ttl / 2)
    }
}

/// A stream's sub-streams, readable by status queries.
struct Subs<P: Protocol>(Mutex<BTreeMap<TypeUrl, Slot<P>>>);

impl<P: Protocol> Detail for Subs<P> {
    fn fill(&self, status: &mut StreamStatus) {
        for (t, slot) in lock(&self.0).iter() {
            P::fill_status(&slot.sub, status.types.entry(t.to_string()).or_default());
        }
    }
}

struct Driver<P: Protocol> {
    shared: Arc<Shared>,
    info: StreamInfo,
    /// Who is on the other end, for the authorization point.
    peer: Peer,
    /// The node, from the first request (rule S2).
    guard: StreamGuard<Node>,
    /// Whether the first request was accepted (node authorized).
    started: bool,
    /// The sub-streams, by type in make-before-break order. Behind a mutex (uncontended: only
    /// this stream and status queries take it) so that status pages can read what each client
    /// holds when asked, rather than the stream copying it after every response.
    subs: Arc<Subs<P>>,
    nonces: Nonces,
    signal: Arc<Signal>,
    requests: Streaming<P::Request>,
    outbox: VecDeque<P::Wire>,
    rate: TokenBucket,
    status: Arc<Mutex<StreamStatus>>,
    done: bool,
    /// What the callbacks are told, queued while the stream's locks are held and delivered once
    /// they are released ([`emit`](Driver::emit)): a callback may then call anything on the
    /// server, `status()` included, which takes those same locks.
    events: Vec<Event>,
}

/// A callback owed, with what it is told.
enum Event {
    Ack { type_url: TypeUrl, version: String, nonce: String },
    Nack { type_url: TypeUrl, version: String, nonce: String, error: xds_core::ErrorDetail },
    Response { type_url: TypeUrl, version: String, nonce: String, resources: usize },
}

/// Opens a stream: admission checks, then the loop as a response stream.
pub(crate) fn open<P: Protocol>(
    shared: Arc<Shared>,
    fixed: Option<ResourceType>,
    request: tonic::Request<Streaming<P::Request>>,
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
    };
    // From here on, dropping the driver undoes the admission.
    let status = shared.status.open(info.id, P::LABEL);
    let driver = Driver::<P> {
        guard: match &info.type_url {
            Some(t) => StreamGuard::per_type(t.as_str(), shared.config.allow_anonymous),
            None => StreamGuard::aggregated(shared.config.allow_anonymous),
        },
        started: false,
        subs: Arc::new(Subs(Mutex::new(BTreeMap::new()))),
        nonces: Nonces::new(),
        signal: Arc::new(Signal::new()),
        requests: request.into_inner(),
        outbox: VecDeque::new(),
        rate: TokenBucket::new(
            shared.config.limits.max_requests_per_second,
            shared.config.limits.request_burst,
            Instant::now(),
        ),
        status,
        done: false,
        events: Vec::new(),
        peer: Peer { remote_addr: info.remote_addr, certificates: info.peer_certificates.clone() },
        info,
        shared,
    };
    let detail: Arc<dyn Detail> = driver.subs.clone();
    driver.shared.status.attach(driver.info.id, Arc::downgrade(&detail));
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
    Ok(Box::pin(futures_util::stream::unfold((driver, span), |(mut d, span)| async move {
        let item = d.next().instrument(span.clone()).await?;
        Some((item, (d, span)))
    })))
}

impl<P: Protocol> Driver<P> {
    async fn next(&mut self) -> Option<Result<P::Wire, Status>> {
        loop {
            if let Some(wire) = self.outbox.pop_front() {
                return Some(Ok(wire));
            }
            if self.done {
                return None;
            }
            let heartbeat = lock(&self.subs.0).values().filter_map(Slot::heartbeat_due).min();
            tokio::select! {
                biased;
                _ = self.shared.shutdown.cancelled() => {
                    self.done = true;
                    return Some(Err(Status::unavailable("the server is shutting down: reconnect")));
                }
                message = self.requests.message() => match message {
                    Ok(Some(request)) => {
                        if let Err(status) = self.on_request(request) {
                            self.done = true;
                            tracing::debug!(stream = self.info.id, %status, "stream refused a request");
                            return Some(Err(status));
                        }
                    }
                    // The client closed its side: nothing left to do.
                    Ok(None) => return None,
                    // A request that did not decode (too large, malformed) or a broken transport:
                    // end the stream and tell the client why (a gone client simply won't hear it).
                    Err(status) => {
                        self.done = true;
                        return Some(Err(self.request_error(status)));
                    }
                },
                _ = self.signal.raised() => {}
                _ = sleep_until(heartbeat.unwrap_or_else(Instant::now).into()), if heartbeat.is_some() => {}
            }
            self.emit();
            self.round();
            self.emit();
        }
    }

    /// Delivers the queued callbacks. Called with no lock held.
    fn emit(&mut self) {
        let callbacks = &self.shared.callbacks;
        for event in self.events.drain(..) {
            match event {
                Event::Ack { type_url, version, nonce } => {
                    callbacks.on_ack(&self.info, &type_url, &version, &nonce);
                }
                Event::Nack { type_url, version, nonce, error } => {
                    callbacks.on_nack(&self.info, &type_url, &version, &nonce, &error);
                }
                Event::Response { type_url, version, nonce, resources } => {
                    callbacks.on_response(&self.info, &type_url, &version, &nonce, resources);
                }
            }
        }
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

    fn on_request(&mut self, mut request: P::Request) -> Result<(), Status> {
        let limits = &self.shared.config.limits;
        if !self.rate.take(Instant::now()) {
            self.shared.metrics.refused("rate_limit");
            return Err(Status::resource_exhausted(format!(
                "too many requests: a stream may send {} per second (burst {})",
                limits.max_requests_per_second, limits.request_burst
            )));
        }
        let names = P::names(&request).len();
        if names > limits.max_names_per_request {
            self.shared.metrics.refused("max_names");
            return Err(Status::invalid_argument(format!(
                "a request may name at most {} resources, this one names {names}",
                limits.max_names_per_request
            )));
        }
        let (node, type_url) = P::header(&mut request);
        let first = !self.started;
        let type_url = match self.guard.check(node, &type_url) {
            Ok(t) => self.shared.type_url(t),
            Err(e) => {
                self.shared.metrics.refused("invalid_request");
                return Err(Status::invalid_argument(e.to_string()));
            }
        };
        if first {
            self.start()?;
        }
        if let Err(status) =
            self.shared.callbacks.on_request(&self.info, &type_url, P::for_callbacks(&request))
        {
            self.shared.metrics.refused("callback");
            return Err(status);
        }
        self.shared.metrics.request(P::LABEL, self.shared.label(&type_url));
        // A type the stream has not used yet: authorize it and start watching it first, with no
        // lock held (a policy or a cache may call back into the server, `status()` included).
        // Only this stream's task inserts into `subs`, so the type is still new afterwards.
        let known = lock(&self.subs.0).contains_key(&type_url);
        let new_slot = if known {
            None
        } else {
            let node = self.guard.node().unwrap_or(&ANONYMOUS);
            // The authorization point, once per type the stream subscribes to: the node and the
            // type together decide (a Secret needs a certificate, say).
            self.shared
                .authorize(
                    &self.peer,
                    Entry::Stream,
                    Access::Resources { node, type_url: &type_url },
                )
                .map_err(|r| Status::permission_denied(r.0))?;
            let watch = self
                .shared
                .cache
                .watch(
                    WatchRequest { node, type_url: &type_url, variant: P::VARIANT },
                    self.signal.clone(),
                )
                .map_err(|e| crate::server::cache_status(&e))?;
            self.shared.metrics.stream_opened(P::LABEL, self.shared.label(&type_url));
            Some(Slot {
                sub: P::new_sub(&type_url, crate::naming::reads_resource_errors(node)),
                watch,
                sent_at: None,
                refreshed_at: Instant::now(),
            })
        };
        let mut subs = lock(&self.subs.0);
        let slot = match (subs.entry(type_url.clone()), new_slot) {
            (std::collections::btree_map::Entry::Occupied(o), _) => o.into_mut(),
            (std::collections::btree_map::Entry::Vacant(v), Some(slot)) => v.insert(slot),
            // Unreachable: `known` was false, so a slot was made.
            (std::collections::btree_map::Entry::Vacant(_), None) => return Ok(()),
        };
        let handled = P::handle(&mut slot.sub, request);
        let mut status = lock(&self.status);
        let ts = status.types.entry(type_url.to_string()).or_default();
        ts.last_request_ms = now_ms();
        match &handled.kind {
            RequestKind::Ack { nonce, version } => {
                let latency = slot.sent_at.take().map(|t| t.elapsed());
                self.shared.metrics.ack(P::LABEL, self.shared.label(&type_url), latency);
                self.events.push(Event::Ack {
                    type_url: type_url.clone(),
                    version: version.clone(),
                    nonce: nonce.clone(),
                });
                ts.nack = None;
                // A delta ACK carries no version: it accepts the response it names.
                if !version.is_empty() {
                    ts.acked_version = Some(crate::status::bounded_owned(version));
                } else if ts.sent_nonce.as_deref() == Some(nonce.as_str()) {
                    ts.acked_version = ts.sent_version.clone();
                }
            }
            RequestKind::Nack { nonce, version, error } => {
                slot.sent_at = None;
                self.shared.metrics.nack(P::LABEL, self.shared.label(&type_url));
                self.events.push(Event::Nack {
                    type_url: type_url.clone(),
                    version: version.clone(),
                    nonce: nonce.clone(),
                    error: error.clone(),
                });
                let nack =
                    NackStatus::new(version.clone(), nonce.clone(), &error.message, now_ms());
                tracing::info!(
                    type_url = %type_url,
                    version = %nack.version,
                    error = %nack.error,
                    error_bytes = nack.error_bytes,
                    "NACK"
                );
                ts.nack = Some(nack);
            }
            RequestKind::Stale { .. } => {
                self.shared.metrics.stale(P::LABEL, self.shared.label(&type_url))
            }
            RequestKind::Initial | RequestKind::Spontaneous => {}
        }
        Ok(())
    }

    /// The first request: remember the node (rule S2) and let the callbacks authorize it.
    fn start(&mut self) -> Result<(), Status> {
        let node = self.guard.node().unwrap_or(&ANONYMOUS);
        if let Err(refusal) = self.shared.callbacks.on_node(&self.info, node) {
            self.shared.metrics.refused("callback");
            return Err(Status::permission_denied(refusal.0));
        }
        let mut status = lock(&self.status);
        status.node_id = node.id.clone();
        status.node_cluster = node.cluster.clone();
        status.node = Some(node.clone());
        drop(status);
        tracing::Span::current().record("node", node.id.as_str());
        tracing::debug!(node = %node.id, "stream started");
        self.started = true;
        Ok(())
    }

    /// Asks every sub-stream what it owes, in make-before-break order (rule O1).
    ///
    /// On ADS, clusters and endpoints that are gone are removed only once every other type is
    /// quiet (nothing owed, nothing waiting for an ACK): the listeners and routes that used them
    /// have been updated first. Per-type streams have nothing to order against.
    fn round(&mut self) {
        let ads = self.info.type_url.is_none();
        let all = self.subs.clone();
        let mut subs = lock(&all.0);
        let types: Vec<TypeUrl> = subs.keys().cloned().collect();
        for t in &types {
            self.poll(&mut subs, t, ads && defers_removals(t));
        }
        if ads {
            let pending = types.iter().any(|t| P::has_deferred_removals(&subs[t].sub));
            let quiet = types
                .iter()
                .filter(|t| !defers_removals(t))
                .all(|t| !P::awaiting_ack(&subs[t].sub));
            if pending && quiet {
                for t in types.iter().filter(|t| defers_removals(t)) {
                    self.poll(&mut subs, t, false);
                }
            }
        }
    }

    fn poll(
        &mut self,
        subs: &mut BTreeMap<TypeUrl, Slot<P>>,
        type_url: &TypeUrl,
        defer_removals: bool,
    ) {
        let Some(slot) = subs.get_mut(type_url) else { return };
        let cp = self.shared.config.control_plane_id.as_deref();
        let nonces = &mut self.nonces;
        let sub = &mut slot.sub;
        let mut sent = None;
        slot.watch.read(&mut |view| {
            sent = P::poll(sub, view, nonces, defer_removals, type_url, cp);
        });
        let now = Instant::now();
        if sent.is_none() && slot.heartbeat_due().is_some_and(|due| due <= now) {
            sent = P::heartbeat(&mut slot.sub, nonces, type_url, cp);
        }
        let Some(sent) = sent else { return };
        slot.sent_at = Some(now);
        slot.refreshed_at = now;
        self.shared.metrics.response(P::LABEL, self.shared.label(type_url), sent.bytes);
        self.events.push(Event::Response {
            type_url: type_url.clone(),
            version: sent.version.clone(),
            nonce: sent.nonce.clone(),
            resources: sent.resources,
        });
        {
            let mut status = lock(&self.status);
            let ts = status.types.entry(type_url.to_string()).or_default();
            ts.sent_version = Some(sent.version.clone());
            ts.sent_nonce = Some(sent.nonce.clone());
        }
        // Rule D10: a client that got a new RouteConfiguration drops its virtual hosts.
        if type_url.builtin() == Some(ResourceType::RouteConfiguration)
            && let Some(vhds) = subs.get_mut(&TypeUrl::from(ResourceType::VirtualHost))
        {
            for name in &sent.names {
                P::resend_prefixed(&mut vhds.sub, &format!("{name}/"));
            }
        }
        self.outbox.push_back(sent.wire);
    }
}

/// Types whose removals wait for the types that reference them (rule O1).
fn defers_removals(t: &TypeUrl) -> bool {
    matches!(t.builtin(), Some(ResourceType::Cluster | ResourceType::ClusterLoadAssignment))
}

impl<P: Protocol> Drop for Driver<P> {
    fn drop(&mut self) {
        self.shared.open.fetch_sub(1, Ordering::SeqCst);
        self.shared.status.close(self.info.id);
        for t in lock(&self.subs.0).keys() {
            self.shared.metrics.stream_closed(P::LABEL, self.shared.label(t));
        }
        self.shared.callbacks.on_stream_closed(&self.info);
        tracing::debug!(stream = self.info.id, "stream closed");
    }
}
