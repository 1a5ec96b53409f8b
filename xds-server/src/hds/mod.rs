//! Health discovery (HDS): `envoy.service.health.v3.HealthDiscoveryService`.
//!
//! A proxy opens `StreamHealthCheck` and sends a `HealthCheckRequest` with its node; the
//! server answers with the `HealthCheckSpecifier` a [`HealthCheckProvider`] gives for that
//! node (which endpoints to check, how, how often), then takes the proxy's
//! `EndpointHealthResponse`s for the life of the stream. The last response of each stream is
//! the view ([`HealthDiscoveryServer::snapshot`], [`HealthDiscoveryServer::subscribe`]) and
//! the metrics ([`HealthDiscoveryServer::render_metrics`]).

mod store;
mod view;

use std::fmt::Write as _;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use tonic::{Request, Response, Status, Streaming};
use xds_proto::TypeUrl;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::health::v3::health_check_request_or_endpoint_health_response::RequestType;
use xds_proto::pb::envoy::service::health::v3::health_discovery_service_server::{
    HealthDiscoveryService, HealthDiscoveryServiceServer,
};
use xds_proto::pb::envoy::service::health::v3::{
    HealthCheckRequestOrEndpointHealthResponse, HealthCheckSpecifier,
};
use xds_proto::prost::Name;

pub use store::HdsConfig;
pub use view::{EndpointHealthView, HealthSnapshot, HealthWatch};

use crate::authz::Authorizer;
use crate::callbacks::Callbacks;
use crate::lrs::store::Reason;
use crate::reporter::{self, Closed, Hooks, escape_label};
use store::{HealthStore, Registration};

/// Gives the health checks a node is to run. Called once per stream, with no lock held.
/// Implemented for `Fn(&Node) -> HealthCheckSpecifier` closures.
pub trait HealthCheckProvider: Send + Sync + 'static {
    /// What the node is to check.
    fn specifier(&self, node: &Node) -> HealthCheckSpecifier;
}

impl<F> HealthCheckProvider for F
where
    F: Fn(&Node) -> HealthCheckSpecifier + Send + Sync + 'static,
{
    fn specifier(&self, node: &Node) -> HealthCheckSpecifier {
        self(node)
    }
}

/// The HDS service and the health it has received. Cloning is cheap; clones share the view.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use xds_proto::pb::envoy::config::core::v3::Node;
/// use xds_proto::pb::envoy::service::health::v3::HealthCheckSpecifier;
/// use xds_server::hds::HealthDiscoveryServer;
///
/// // Every node checks the same endpoints (fill in cluster_health_checks).
/// let hds = HealthDiscoveryServer::new(|_: &Node| HealthCheckSpecifier::default());
/// let mut view = hds.subscribe();
/// tokio::spawn(async move {
///     loop {
///         let health = view.changed().await;
///         for (cluster, endpoints) in &health.clusters {
///             let down = endpoints.values().filter(|e| !e.is_healthy()).count();
///             println!("{cluster}: {down} endpoints not healthy");
///         }
///     }
/// });
/// tonic::transport::Server::builder()
///     .add_routes(hds.routes())
///     .serve("127.0.0.1:18000".parse()?)
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct HealthDiscoveryServer {
    store: Arc<HealthStore>,
    provider: Arc<dyn HealthCheckProvider>,
    hooks: Hooks,
}

impl std::fmt::Debug for HealthDiscoveryServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthDiscoveryServer").field("config", &self.store.config).finish()
    }
}

impl HealthDiscoveryServer {
    /// A server handing each node what `provider` gives, with default limits, no callbacks.
    pub fn new(provider: impl HealthCheckProvider) -> Self {
        Self {
            store: Arc::new(HealthStore::new(HdsConfig::default())),
            provider: Arc::new(provider),
            hooks: Hooks::default(),
        }
    }

    /// Sets the limits (starting from no reports).
    #[must_use]
    pub fn config(mut self, config: HdsConfig) -> Self {
        self.store = Arc::new(HealthStore::new(config));
        self
    }

    /// Sets the callbacks that check each stream's node and see it close. An
    /// [`XdsServer`](crate::XdsServer) sets its own.
    #[must_use]
    pub fn callbacks(mut self, callbacks: Arc<dyn Callbacks>) -> Self {
        self.hooks.callbacks = callbacks;
        self
    }

    /// Sets the authorization policy each stream's node must pass, as xDS streams do
    /// ([`Access::Report`](crate::authz::Access::Report)). An [`XdsServer`](crate::XdsServer)
    /// sets its own.
    #[must_use]
    pub fn authorizer(mut self, authorizer: Arc<dyn Authorizer>) -> Self {
        self.hooks.authorizer = authorizer;
        self
    }

    pub(crate) fn attach(mut self, hooks: Hooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// Ends open streams with `UNAVAILABLE` and refuses new ones.
    pub fn shutdown(&self) {
        self.hooks.shutdown.cancel();
    }

    /// The tonic service, with the request size limit.
    pub fn service(&self) -> HealthDiscoveryServiceServer<HealthDiscoveryServer> {
        HealthDiscoveryServiceServer::new(self.clone())
            .max_decoding_message_size(self.hooks.max_request_bytes)
    }

    /// The service alone, for `tonic::transport::Server::add_routes`.
    pub fn routes(&self) -> tonic::service::Routes {
        tonic::service::Routes::new(self.service())
    }

    /// The health the connected clients reported last.
    pub fn snapshot(&self) -> HealthSnapshot {
        self.store.snapshot()
    }

    /// A latest-wins subscription to [`snapshot`](Self::snapshot).
    pub fn subscribe(&self) -> HealthWatch {
        HealthWatch { store: self.store.clone(), rx: self.store.subscribe() }
    }

    /// Streams and parts of responses rejected for `reason` (a label of
    /// `xds_hds_rejected_total`); 0 for an unknown reason.
    pub fn rejected(&self, reason: &str) -> u64 {
        Reason::ALL.iter().find(|r| r.label() == reason).map_or(0, |r| self.store.rejected.get(*r))
    }

    /// The metrics in Prometheus text format: open streams, responses, rejections, and
    /// endpoint reports per cluster (a bounded label set, the rest under `other`) and status.
    pub fn render_metrics(&self) -> String {
        let store = &*self.store;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP xds_hds_streams Open HDS streams.\n# TYPE xds_hds_streams gauge\nxds_hds_streams {}",
            store.snapshot().streams
        );
        let _ = writeln!(
            out,
            "# HELP xds_hds_responses_total Endpoint health responses received.\n# TYPE xds_hds_responses_total counter\nxds_hds_responses_total {}",
            store.responses()
        );
        let _ = writeln!(
            out,
            "# HELP xds_hds_rejected_total HDS streams and parts of responses rejected, by reason.\n# TYPE xds_hds_rejected_total counter"
        );
        for r in [
            Reason::NoNode,
            Reason::Refused,
            Reason::TooManyStreams,
            Reason::NameTooLong,
            Reason::TooManyEndpoints,
        ] {
            let _ = writeln!(
                out,
                "xds_hds_rejected_total{{reason=\"{}\"}} {}",
                r.label(),
                store.rejected.get(r)
            );
        }
        let _ = writeln!(
            out,
            "# HELP xds_hds_endpoints Endpoint reports by cluster and status (an endpoint checked by two nodes counts twice).\n# TYPE xds_hds_endpoints gauge"
        );
        for ((cluster, status), n) in store.by_label() {
            let _ = writeln!(
                out,
                "xds_hds_endpoints{{cluster=\"{}\",status=\"{status}\"}} {n}",
                escape_label(&cluster)
            );
        }
        out
    }

    /// The first message: the node check, the stream's registration, the specifier.
    fn start(
        &self,
        info: crate::StreamInfo,
        first: HealthCheckRequestOrEndpointHealthResponse,
    ) -> Result<(HealthCheckSpecifier, Registration, Closed), Status> {
        let store = &self.store;
        let node = match first.request_type {
            Some(RequestType::HealthCheckRequest(r)) => r.node,
            _ => None,
        };
        let Some(node) = node else {
            store.rejected.add(Reason::NoNode, 1);
            return Err(Status::invalid_argument(
                "the first message must be a HealthCheckRequest with a node",
            ));
        };
        let closed = self.hooks.admit(info, &node).inspect_err(|_| {
            store.rejected.add(Reason::Refused, 1);
        })?;
        let Some(registration) = store.register(closed.info.id, &node) else {
            store.rejected.add(Reason::TooManyStreams, 1);
            return Err(Status::resource_exhausted(format!(
                "too many HDS streams: the server takes at most {}",
                store.config.max_streams
            )));
        };
        Ok((self.provider.specifier(&node), registration, closed))
    }
}

type Messages = Streaming<HealthCheckRequestOrEndpointHealthResponse>;
type ResponseStream = Pin<Box<dyn Stream<Item = Result<HealthCheckSpecifier, Status>> + Send>>;

/// Where a stream is: waiting for its first message, taking health responses, or done.
enum State {
    Start(HealthDiscoveryServer, Messages, crate::StreamInfo),
    Reporting(HealthDiscoveryServer, Messages, Registration, Closed),
    Done,
}

impl State {
    /// The next specifier (only the first message gets one) or the end; requests are read
    /// as the transport polls, so a client that leaves drops its registration.
    async fn next(self) -> Option<(Result<HealthCheckSpecifier, Status>, State)> {
        match self {
            State::Start(server, mut messages, info) => {
                let first = tokio::select! {
                    () = server.hooks.shutdown.cancelled() => return None,
                    m = messages.message() => m.ok().flatten()?,
                };
                match server.start(info, first) {
                    Ok((specifier, registration, closed)) => Some((
                        Ok(specifier),
                        State::Reporting(server, messages, registration, closed),
                    )),
                    Err(status) => Some((Err(status), State::Done)),
                }
            }
            State::Reporting(server, mut messages, registration, closed) => loop {
                tokio::select! {
                    () = server.hooks.shutdown.cancelled() => {
                        return Some((
                            Err(Status::unavailable("the server is shutting down")),
                            State::Done,
                        ));
                    }
                    m = messages.message() => match m {
                        Ok(Some(HealthCheckRequestOrEndpointHealthResponse {
                            request_type: Some(RequestType::EndpointHealthResponse(r)),
                        })) => registration.ingest(&r),
                        // A repeated HealthCheckRequest or an empty message: nothing to do.
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => {
                            drop((registration, closed));
                            return None;
                        }
                    },
                }
            },
            State::Done => None,
        }
    }
}

#[tonic::async_trait]
impl HealthDiscoveryService for HealthDiscoveryServer {
    type StreamHealthCheckStream = ResponseStream;

    async fn stream_health_check(
        &self,
        request: Request<Messages>,
    ) -> Result<Response<ResponseStream>, Status> {
        if self.hooks.shutdown.is_cancelled() {
            return Err(Status::unavailable("the server is shutting down"));
        }
        let info = reporter::stream_info(
            &request,
            TypeUrl::parse(&HealthCheckRequestOrEndpointHealthResponse::type_url()),
        );
        let state = State::Start(self.clone(), request.into_inner(), info);
        Ok(Response::new(Box::pin(futures_util::stream::unfold(state, State::next))))
    }

    async fn fetch_health_check(
        &self,
        _: Request<HealthCheckRequestOrEndpointHealthResponse>,
    ) -> Result<Response<HealthCheckSpecifier>, Status> {
        Err(Status::unimplemented("use StreamHealthCheck"))
    }
}
