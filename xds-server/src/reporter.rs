//! What the LRS and HDS services share: one reporting stream (first request, node check,
//! answer, then the client's reports for the stream's life), the limits on streams that have
//! not spoken yet, the rejection counters, and the builder methods of both servers.
//!
//! A reporting stream runs as the transport polls its response stream: no task is spawned,
//! and a client that goes away drops the stream, its registration and its callbacks guard.
//!
//! ```text
//! open ──(first request in time, node passes)──> reporting ──(client leaves / shutdown)──> done
//!   │                                              │  ▲
//!   └─(no first request in time, no node, refused) │  └─ policy changed: a new answer is sent
//!                         └──> done                │     when it differs from the last one
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tonic::{Status, Streaming};
use xds_cache::Variant;
use xds_core::TokenBucket;
use xds_proto::TypeUrl;
use xds_proto::pb::envoy::config::core::v3::Node;

use crate::authz::{Access, Authorizer, Entry, Peer, Request};
use crate::callbacks::{Callbacks, StreamInfo};
use crate::stream::ResponseStream;

/// Stream ids of the reporting services; apart from the xDS streams' ids, so they start high
/// to keep the two apart in logs.
static NEXT_ID: AtomicU64 = AtomicU64::new(1 << 48);

/// A new reporting stream id.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// What the server knows about a reporting stream. `variant` is `Sotw` (a bidirectional
/// stream) and `type_url` names the request message, so callbacks can tell LRS and HDS streams
/// from xDS streams.
fn stream_info<T>(request: &tonic::Request<T>, message: TypeUrl) -> StreamInfo {
    StreamInfo {
        id: next_id(),
        variant: Variant::Sotw,
        type_url: Some(message),
        remote_addr: request.remote_addr(),
        peer_certificates: request
            .peer_certs()
            .map(|certs| Arc::new(certs.iter().map(|c| c.as_ref().to_vec()).collect())),
        node: None,
        group: None,
    }
}

/// What a reporting service takes from the xDS server it is served with (or sets itself when
/// served alone): who checks a stream's node, when to stop, how large a request may be.
#[derive(Clone)]
pub(crate) struct Hooks {
    pub(crate) callbacks: Arc<dyn Callbacks>,
    pub(crate) authorizer: Arc<dyn Authorizer>,
    pub(crate) shutdown: tokio_util::sync::CancellationToken,
    pub(crate) max_request_bytes: usize,
}

impl Default for Hooks {
    /// No callbacks, no policy, the default request size limit, a shutdown of its own.
    fn default() -> Self {
        Hooks {
            callbacks: Arc::new(crate::callbacks::NoCallbacks),
            authorizer: Arc::new(crate::authz::AllowAll),
            shutdown: tokio_util::sync::CancellationToken::new(),
            max_request_bytes: crate::Limits::default().max_request_bytes,
        }
    }
}

impl Hooks {
    /// The node check of the reporting services: the server's authorization point (the policy
    /// decides whether this peer may report as this node: [`Access::Report`]), then the same
    /// callbacks as every xDS stream ([`Callbacks::on_stream_open`], [`Callbacks::on_node`]),
    /// so a node refused configuration is refused reporting too. As on xDS streams, once
    /// `on_stream_open` has been called `on_stream_closed` follows when the stream ends,
    /// whether a callback refused it or not: the returned guard (or the error path's) calls it.
    fn admit(&self, info: StreamInfo, node: &Node) -> Result<Closed, Status> {
        let peer =
            Peer { remote_addr: info.remote_addr, certificates: info.peer_certificates.clone() };
        let request =
            Request { peer: &peer, entry: Entry::Stream, access: Access::Report { node } };
        self.authorizer.authorize(&request).map_err(|r| Status::permission_denied(r.0))?;
        let mut closed = Closed { callbacks: self.callbacks.clone(), info };
        self.callbacks.on_stream_open(&closed.info).map_err(|r| Status::permission_denied(r.0))?;
        // As on xDS streams, the node is known from `on_node` on (no group: a reporting stream
        // is served no configuration).
        closed.info.node = Some(Arc::new(node.clone()));
        self.callbacks.on_node(&closed.info, node).map_err(|r| Status::permission_denied(r.0))?;
        Ok(closed)
    }
}

/// Calls `on_stream_closed` when a reporting stream whose `on_stream_open` was called ends,
/// however it ends (refused, the client left, an error, shutdown).
pub(crate) struct Closed {
    callbacks: Arc<dyn Callbacks>,
    pub(crate) info: StreamInfo,
}

impl Drop for Closed {
    fn drop(&mut self) {
        self.callbacks.on_stream_closed(&self.info);
    }
}

/// Why a stream or part of a report was not taken: the `reason` label of
/// `xds_lrs_rejected_total` / `xds_hds_rejected_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    NoNode,
    Refused,
    TooManyStreams,
    TooManyPending,
    FirstRequestTimeout,
    UnknownCluster,
    TooManyClusters,
    TooManyLocalities,
    NameTooLong,
    BadInterval,
    TooManyEndpoints,
    UnknownEndpoint,
    OverBudget,
    RateLimited,
}

impl Reason {
    pub(crate) const ALL: [Reason; 14] = [
        Reason::NoNode,
        Reason::Refused,
        Reason::TooManyStreams,
        Reason::TooManyPending,
        Reason::FirstRequestTimeout,
        Reason::UnknownCluster,
        Reason::TooManyClusters,
        Reason::TooManyLocalities,
        Reason::NameTooLong,
        Reason::BadInterval,
        Reason::TooManyEndpoints,
        Reason::UnknownEndpoint,
        Reason::OverBudget,
        Reason::RateLimited,
    ];

    /// The reasons that concern a stream rather than its content: both services count them.
    pub(crate) const STREAM: [Reason; 7] = [
        Reason::NoNode,
        Reason::Refused,
        Reason::TooManyStreams,
        Reason::TooManyPending,
        Reason::FirstRequestTimeout,
        Reason::OverBudget,
        Reason::RateLimited,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Reason::NoNode => "no_node",
            Reason::Refused => "refused",
            Reason::TooManyStreams => "too_many_streams",
            Reason::TooManyPending => "too_many_pending",
            Reason::FirstRequestTimeout => "first_request_timeout",
            Reason::UnknownCluster => "unknown_cluster",
            Reason::TooManyClusters => "too_many_clusters",
            Reason::TooManyLocalities => "too_many_localities",
            Reason::NameTooLong => "name_too_long",
            Reason::BadInterval => "bad_interval",
            Reason::TooManyEndpoints => "too_many_endpoints",
            Reason::UnknownEndpoint => "unknown_endpoint",
            Reason::OverBudget => "over_budget",
            Reason::RateLimited => "rate_limited",
        }
    }
}

/// Counters by [`Reason`].
#[derive(Debug, Default)]
pub(crate) struct Rejections([AtomicU64; Reason::ALL.len()]);

impl Rejections {
    pub(crate) fn add(&self, reason: Reason, n: u64) {
        self.0[reason as usize].fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn get(&self, reason: Reason) -> u64 {
        self.0[reason as usize].load(Ordering::Relaxed)
    }

    /// The count of the reason labelled `label`; 0 for an unknown label.
    pub(crate) fn by_label(&self, label: &str) -> u64 {
        Reason::ALL.iter().find(|r| r.label() == label).map_or(0, |r| self.get(*r))
    }
}

/// One reporting service's stream limits and counters, and the revision its users bump when
/// the answer open streams were given may have changed.
#[derive(Debug)]
pub(crate) struct ReportLimits {
    pub(crate) rejected: Rejections,
    /// Streams open that have not sent their first request yet.
    pending: AtomicUsize,
    max_pending: usize,
    max_streams: usize,
    first_request_timeout: Duration,
    /// Messages per second one stream may send on average, and at once.
    rate: (u32, u32),
    policy: watch::Sender<u64>,
}

/// A stream counted as pending until this is dropped.
struct Pending(Arc<ReportLimits>);

impl Drop for Pending {
    fn drop(&mut self) {
        self.0.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ReportLimits {
    pub(crate) fn new(
        max_streams: usize,
        max_pending: usize,
        first_request_timeout: Duration,
        rate: (u32, u32),
    ) -> Self {
        Self {
            rejected: Rejections::default(),
            pending: AtomicUsize::new(0),
            max_pending,
            max_streams,
            first_request_timeout,
            rate,
            policy: watch::Sender::new(0),
        }
    }

    /// Streams open that have not sent their first request yet.
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Relaxed)
    }

    /// Tells open streams to ask the policy again.
    pub(crate) fn policy_changed(&self) {
        self.policy.send_modify(|r| *r = r.wrapping_add(1));
    }

    /// Counts a new stream as pending, unless as many are pending as may be.
    fn enter(&self) -> bool {
        self.pending
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_pending).then_some(n + 1)
            })
            .is_ok()
    }
}

/// What every stream of one reporting service may hold together, in bytes and entries, and
/// what they hold now. Per-stream limits alone let the sum grow with the number of streams
/// (10,000 streams of 64 MiB each is no bound at all); each stream draws its state from this
/// one allowance and gives it back when it ends, so the total is bounded whatever the peers
/// do. Bytes are an estimate of the heap the stored state takes (fixed size per entry plus the
/// names it keeps), not the size of the reports, which are not kept.
#[derive(Debug)]
pub(crate) struct Budget {
    max_bytes: usize,
    max_entries: usize,
    bytes: AtomicUsize,
    entries: AtomicUsize,
}

/// What one stream drew from its service's [`Budget`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Charge {
    pub(crate) bytes: usize,
    pub(crate) entries: usize,
}

impl Budget {
    pub(crate) fn new(max_bytes: usize, max_entries: usize) -> Self {
        Self { max_bytes, max_entries, bytes: AtomicUsize::new(0), entries: AtomicUsize::new(0) }
    }

    /// Takes `charge` if both totals stay within their maximum, else takes nothing.
    pub(crate) fn try_take(&self, charge: Charge) -> bool {
        let take = |used: &AtomicUsize, n: usize, max: usize| {
            used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(n).filter(|t| *t <= max)
            })
            .is_ok()
        };
        if !take(&self.bytes, charge.bytes, self.max_bytes) {
            return false;
        }
        if !take(&self.entries, charge.entries, self.max_entries) {
            self.bytes.fetch_sub(charge.bytes, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Gives back what a stream drew (when it ends, or its state shrinks).
    pub(crate) fn give(&self, charge: Charge) {
        self.bytes.fetch_sub(charge.bytes, Ordering::Relaxed);
        self.entries.fetch_sub(charge.entries, Ordering::Relaxed);
    }

    /// What every stream holds now.
    pub(crate) fn used(&self) -> Charge {
        Charge {
            bytes: self.bytes.load(Ordering::Relaxed),
            entries: self.entries.load(Ordering::Relaxed),
        }
    }

    /// The error of a report that would take the service past this budget.
    pub(crate) fn over(&self, service: &'static str) -> OverBudget {
        OverBudget { service, max_bytes: self.max_bytes, max_entries: self.max_entries }
    }
}

/// A report not taken: with it, the state every stream of the service holds would pass the
/// service's total budget (`max_total_bytes`, `max_total_entries` of
/// [`LrsConfig`](crate::lrs::LrsConfig) or [`HdsConfig`](crate::hds::HdsConfig)). A stream
/// that sends one is ended with `RESOURCE_EXHAUSTED` and this message, and what it held is
/// given back.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{service} reports of all streams would exceed the server's budget of {max_bytes} bytes and {max_entries} entries; the report was not taken"
)]
pub struct OverBudget {
    /// `LRS` or `HDS`.
    pub service: &'static str,
    /// The service's `max_total_bytes`.
    pub max_bytes: usize,
    /// The service's `max_total_entries`.
    pub max_entries: usize,
}

impl From<OverBudget> for Status {
    fn from(e: OverBudget) -> Status {
        Status::resource_exhausted(e.to_string())
    }
}

/// What one reporting service (LRS, HDS) plugs into the shared stream: where the node is in
/// the first request, the answer for a node (the user's policy) and what it lets the stream
/// report, how a stream is registered in the view and what a later message does to it. The
/// stream keeps the node and the last answer sent, so after a policy change it sends a new
/// answer only when it differs. Called with no lock held.
pub(crate) trait Reporting: Clone + Send + Sync + 'static {
    /// The client's messages.
    type Request: prost::Message + Default + Send + 'static;
    /// The server's answers.
    type Response: Clone + PartialEq + Send + 'static;
    /// What an answer lets a stream report (LRS: the clusters, HDS: the endpoints).
    type Scope: Send + 'static;
    /// A stream's place in the view; dropping it takes the stream's reports out.
    type Registration: Send + 'static;
    /// `LRS` or `HDS`, for error messages.
    const NAME: &'static str;
    /// What a first request without a node is told.
    const NO_NODE: &'static str;

    /// The server's hooks and this service's gate.
    fn parts(&self) -> (&Hooks, &Arc<ReportLimits>);
    fn node(first: &Self::Request) -> Option<&Node>;
    /// The answer for `node` now, and what it lets the stream report.
    fn answer(&self, node: &Node) -> (Self::Response, Self::Scope);
    /// Registers an admitted stream; `None` when the service holds as many streams as it may.
    fn register(&self, id: u64, node: &Node, scope: Self::Scope) -> Option<Self::Registration>;
    /// What the stream may report from now on (after a new answer).
    fn rescope(registration: &mut Self::Registration, scope: Self::Scope);
    /// A message of the stream (the first one too). An error ends the stream with it (the
    /// service's total budget is spent).
    fn take(registration: &Self::Registration, message: Self::Request) -> Result<(), Status>;
}

/// Serves one reporting stream of `service`: refused at once when the server shuts down or
/// [`ReportLimits::max_pending`] streams are waiting for their first request.
pub(crate) fn serve<S: Reporting>(
    service: &S,
    request: tonic::Request<Streaming<S::Request>>,
    message: TypeUrl,
) -> Result<tonic::Response<ResponseStream<S::Response>>, Status> {
    let (hooks, gate) = service.parts();
    if hooks.shutdown.is_cancelled() {
        return Err(Status::unavailable("the server is shutting down"));
    }
    if !gate.enter() {
        gate.rejected.add(Reason::TooManyPending, 1);
        return Err(Status::resource_exhausted(format!(
            "too many {} streams waiting for their first request: at most {}",
            S::NAME,
            gate.max_pending
        )));
    }
    let pending = Pending(gate.clone());
    let info = stream_info(&request, message);
    let state = State::Start(Box::new((service.clone(), request.into_inner(), info, pending)));
    Ok(tonic::Response::new(Box::pin(futures_util::stream::unfold(state, State::next))))
}

/// Where a stream is: waiting for its first request, taking reports, or done.
enum State<S: Reporting> {
    Start(Box<(S, Streaming<S::Request>, StreamInfo, Pending)>),
    Open(Box<Open<S>>),
    Done,
}

/// A stream that was answered.
struct Open<S: Reporting> {
    service: S,
    requests: Streaming<S::Request>,
    registration: S::Registration,
    node: Node,
    sent: S::Response,
    /// `None` once the policy's sender is gone (it lives as long as the service).
    policy: Option<watch::Receiver<u64>>,
    /// The stream's rate limit ([`ReportLimits::rate`]).
    rate: TokenBucket,
    _closed: Closed,
}

impl<S: Reporting> State<S> {
    /// The next answer (the first request's, or one after a policy change) or the end.
    async fn next(self) -> Option<(Result<S::Response, Status>, Self)> {
        match self {
            State::Start(opening) => {
                let (service, mut requests, info, pending) = *opening;
                let (hooks, gate) = service.parts();
                let (hooks, gate) = (hooks.clone(), gate.clone());
                let first = tokio::select! {
                    () = hooks.shutdown.cancelled() => return None,
                    () = tokio::time::sleep(gate.first_request_timeout) => {
                        gate.rejected.add(Reason::FirstRequestTimeout, 1);
                        return Some((Err(Status::deadline_exceeded(format!(
                            "no first {} request within {:?}", S::NAME, gate.first_request_timeout
                        ))), State::Done));
                    }
                    m = requests.message() => m.ok().flatten()?,
                };
                drop(pending);
                // Subscribed before the policy is asked: a change after this is seen.
                let mut policy = gate.policy.subscribe();
                policy.mark_unchanged();
                match start(&service, info, first) {
                    Ok((response, registration, node, closed)) => {
                        // The core's bucket, which streams' requests are limited by too: a reporting
                        // stream may not spend the server's CPU on decoding and aggregating
                        // reports (a client reports once per interval, 100 ms at the shortest, so
                        // the defaults leave real clients far inside).
                        let (per_second, burst) = gate.rate;
                        let mut rate = TokenBucket::new(per_second, burst, Instant::now());
                        // The first request is a message like the others.
                        rate.take(Instant::now());
                        let open = Open {
                            service,
                            requests,
                            registration,
                            node,
                            sent: response.clone(),
                            policy: Some(policy),
                            rate,
                            _closed: closed,
                        };
                        Some((Ok(response), State::Open(Box::new(open))))
                    }
                    Err(status) => Some((Err(status), State::Done)),
                }
            }
            State::Open(mut open) => loop {
                let changed = async {
                    match &mut open.policy {
                        Some(rx) => rx.changed().await.is_ok(),
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = open.service.parts().0.shutdown.cancelled() => {
                        return Some((Err(Status::unavailable("the server is shutting down")), State::Done));
                    }
                    alive = changed => {
                        if !alive {
                            open.policy = None;
                        } else if let Some(response) = open.recheck() {
                            return Some((Ok(response), State::Open(open)));
                        }
                    }
                    m = open.requests.message() => match m {
                        Ok(Some(message)) => {
                            if let Err(status) = open.admit(message) {
                                return Some((Err(status), State::Done));
                            }
                        }
                        // The client closed its side or the connection failed: the end.
                        Ok(None) | Err(_) => return None,
                    },
                }
            },
            State::Done => None,
        }
    }
}

impl<S: Reporting> Open<S> {
    /// A later message: within the stream's rate, then taken. An error ends the stream (its
    /// registration, and with it the state it holds, goes when the stream is dropped).
    fn admit(&mut self, message: S::Request) -> Result<(), Status> {
        let gate = self.service.parts().1;
        if !self.rate.take(Instant::now()) {
            gate.rejected.add(Reason::RateLimited, 1);
            let (rate, burst) = gate.rate;
            return Err(Status::resource_exhausted(format!(
                "too many {} messages: a stream may send {rate} per second (burst {burst})",
                S::NAME
            )));
        }
        S::take(&self.registration, message).inspect_err(|_| {
            gate.rejected.add(Reason::OverBudget, 1);
        })
    }

    /// The policy's answer for the stream now, if it differs from the last one sent; the
    /// stream may report what the new answer allows from now on.
    fn recheck(&mut self) -> Option<S::Response> {
        let (response, scope) = self.service.answer(&self.node);
        if response == self.sent {
            return None;
        }
        S::rescope(&mut self.registration, scope);
        self.sent = response.clone();
        Some(response)
    }
}

/// The first request: the node, its check, the service's answer and registration.
fn start<S: Reporting>(
    service: &S,
    info: StreamInfo,
    first: S::Request,
) -> Result<(S::Response, S::Registration, Node, Closed), Status> {
    let (hooks, gate) = service.parts();
    let Some(node) = S::node(&first).cloned() else {
        gate.rejected.add(Reason::NoNode, 1);
        return Err(Status::invalid_argument(S::NO_NODE));
    };
    let closed = hooks.admit(info, &node).inspect_err(|_| {
        gate.rejected.add(Reason::Refused, 1);
    })?;
    let (response, scope) = service.answer(&node);
    let Some(registration) = service.register(closed.info.id, &node, scope) else {
        gate.rejected.add(Reason::TooManyStreams, 1);
        return Err(Status::resource_exhausted(format!(
            "too many {} streams: the server takes at most {}",
            S::NAME,
            gate.max_streams
        )));
    };
    S::take(&registration, first).inspect_err(|_| {
        gate.rejected.add(Reason::OverBudget, 1);
    })?;
    Ok((response, registration, node, closed))
}

/// The builder methods and service plumbing both reporting servers have, for a struct with
/// `hooks: Hooks` and `gate()`.
macro_rules! reporting_methods {
    ($service:ident, $label:literal) => {
        /// Sets the callbacks that check each stream's node (`on_stream_open`, `on_node`) and
        /// see it close. An [`XdsServer`](crate::XdsServer) sets its own.
        #[must_use]
        pub fn callbacks(mut self, callbacks: Arc<dyn crate::Callbacks>) -> Self {
            self.hooks.callbacks = callbacks;
            self
        }

        /// Sets the authorization policy each stream's node must pass, as xDS streams do
        /// ([`Access::Report`](crate::authz::Access::Report)). An
        /// [`XdsServer`](crate::XdsServer) sets its own.
        #[must_use]
        pub fn authorizer(mut self, authorizer: Arc<dyn crate::authz::Authorizer>) -> Self {
            self.hooks.authorizer = authorizer;
            self
        }

        /// Takes the xDS server's callbacks, shutdown and request size limit.
        pub(crate) fn attach(mut self, hooks: crate::reporter::Hooks) -> Self {
            self.hooks = hooks;
            self
        }

        /// Ends open streams with `UNAVAILABLE` and refuses new ones (an
        /// [`XdsServer`](crate::XdsServer)'s shutdown does this for the one it serves).
        pub fn shutdown(&self) {
            self.hooks.shutdown.cancel();
        }

        /// The tonic service, with the request size limit.
        pub fn service(&self) -> $service<Self> {
            $service::new(self.clone()).max_decoding_message_size(self.hooks.max_request_bytes)
        }

        /// The service alone, for `tonic::transport::Server::add_routes`.
        pub fn routes(&self) -> tonic::service::Routes {
            tonic::service::Routes::new(self.service())
        }

        #[doc = concat!("Streams and parts of messages rejected for `reason` (a label of `xds_", $label, "_rejected_total`,")]
        /// e.g. `"first_request_timeout"`); 0 for an unknown reason.
        pub fn rejected(&self, reason: &str) -> u64 {
            crate::reporter::Reporting::parts(self).1.rejected.by_label(reason)
        }

        /// Streams open that have not sent their first request yet (bounded by the config's
        /// `max_pending_streams`, each ended after `first_request_timeout`).
        pub fn pending_streams(&self) -> usize {
            crate::reporter::Reporting::parts(self).1.pending()
        }
    };
}
pub(crate) use reporting_methods;

/// The stream counters both services render: pending streams and rejections by reason.
pub(crate) fn render_stream_metrics(
    out: &mut String,
    label: &str,
    gate: &ReportLimits,
    reasons: &[Reason],
) {
    use std::fmt::Write as _;
    let upper = label.to_uppercase();
    let _ = writeln!(
        out,
        "# HELP xds_{label}_streams_pending {upper} streams open that have not sent their first request.\n# TYPE xds_{label}_streams_pending gauge\nxds_{label}_streams_pending {}",
        gate.pending()
    );
    let _ = writeln!(
        out,
        "# HELP xds_{label}_rejected_total {upper} streams and parts of messages rejected, by reason.\n# TYPE xds_{label}_rejected_total counter"
    );
    for r in Reason::STREAM.iter().chain(reasons) {
        let _ = writeln!(
            out,
            "xds_{label}_rejected_total{{reason=\"{}\"}} {}",
            r.label(),
            gate.rejected.get(*r)
        );
    }
}

/// Escapes a Prometheus label value (backslash, quote, newline).
pub(crate) fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}
