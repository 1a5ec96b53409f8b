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
use std::sync::Arc;

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

pub use crate::reporter::OverBudget;
pub use store::HdsConfig;
pub(crate) use store::status_label;
pub use view::{EndpointHealthView, HealthSnapshot, HealthWatch};

use crate::reporter::{self, Hooks, Reason, ReportLimits, Reporting, escape_label};
use crate::stream::ResponseStream;
use store::{Asked, HealthStore, Registration};

/// Gives the health checks a node is to run. Called when a stream opens and, after
/// [`HealthDiscoveryServer::specifiers_changed`], for every open stream; with no lock held.
/// Reports of endpoints the specifier does not list are not taken.
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
/// use xds_server::proto::pb::envoy::config::core::v3::Node;
/// use xds_server::proto::pb::envoy::service::health::v3::HealthCheckSpecifier;
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
/// xds_server::tonic::transport::Server::builder()
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

    /// Tells open streams the [`HealthCheckProvider`]'s answer may have changed: each asks
    /// the provider again for its node and, if the specifier differs from the one it was
    /// sent, sends it (the client replaces its health checks), and from then on takes reports
    /// only of the new specifier's endpoints.
    pub fn specifiers_changed(&self) {
        self.store.gate.policy_changed();
    }

    crate::reporter::reporting_methods!(HealthDiscoveryServiceServer, "hds");

    /// The health the connected clients reported last.
    pub fn snapshot(&self) -> HealthSnapshot {
        self.store.snapshot()
    }

    /// What the last responses of every open stream hold now, in estimated bytes and in
    /// endpoint reports: bounded by [`HdsConfig::max_total_bytes`] and
    /// [`HdsConfig::max_total_entries`], and back to 0 when every stream has ended.
    pub fn held(&self) -> (usize, usize) {
        let used = self.store.budget.used();
        (used.bytes, used.entries)
    }

    /// A latest-wins subscription to [`snapshot`](Self::snapshot).
    pub fn subscribe(&self) -> HealthWatch {
        HealthWatch { store: self.store.clone(), rx: self.store.subscribe() }
    }

    /// The metrics in Prometheus text format: open and pending streams, responses, rejections, and
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
        let (bytes, entries) = self.held();
        let _ = writeln!(
            out,
            "# HELP xds_hds_held_bytes Estimated bytes the last responses of every open HDS stream hold (at most max_total_bytes).\n# TYPE xds_hds_held_bytes gauge\nxds_hds_held_bytes {bytes}\n# HELP xds_hds_held_entries Endpoint reports the open HDS streams hold (at most max_total_entries).\n# TYPE xds_hds_held_entries gauge\nxds_hds_held_entries {entries}"
        );
        reporter::render_stream_metrics(
            &mut out,
            "hds",
            &store.gate,
            &[Reason::NameTooLong, Reason::TooManyEndpoints, Reason::UnknownEndpoint],
        );
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
}

type Message = HealthCheckRequestOrEndpointHealthResponse;

impl Reporting for HealthDiscoveryServer {
    type Request = Message;
    type Response = HealthCheckSpecifier;
    /// The endpoints the specifier lists.
    type Scope = Asked;
    type Registration = Registration;
    const NAME: &'static str = "HDS";
    const NO_NODE: &'static str = "the first message must be a HealthCheckRequest with a node";

    fn parts(&self) -> (&Hooks, &Arc<ReportLimits>) {
        (&self.hooks, &self.store.gate)
    }

    fn node(first: &Message) -> Option<&Node> {
        match &first.request_type {
            Some(RequestType::HealthCheckRequest(r)) => r.node.as_ref(),
            _ => None,
        }
    }

    fn answer(&self, node: &Node) -> (HealthCheckSpecifier, Asked) {
        let specifier = self.provider.specifier(node);
        let asked = Asked::of(&specifier);
        (specifier, asked)
    }

    fn register(&self, id: u64, node: &Node, asked: Asked) -> Option<Registration> {
        self.store.register(id, node, asked)
    }

    fn rescope(registration: &mut Registration, asked: Asked) {
        registration.set_asked(asked);
    }

    fn take(registration: &Registration, message: Message) -> Result<(), Status> {
        // A HealthCheckRequest (the first message, or a repeated one) or an empty message:
        // nothing to do.
        if let Some(RequestType::EndpointHealthResponse(r)) = message.request_type {
            registration.ingest(&r)?;
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl HealthDiscoveryService for HealthDiscoveryServer {
    type StreamHealthCheckStream = ResponseStream<HealthCheckSpecifier>;

    async fn stream_health_check(
        &self,
        request: Request<Streaming<Message>>,
    ) -> Result<Response<Self::StreamHealthCheckStream>, Status> {
        reporter::serve(self, request, TypeUrl::parse(&Message::type_url()))
    }

    async fn fetch_health_check(
        &self,
        _: Request<Message>,
    ) -> Result<Response<HealthCheckSpecifier>, Status> {
        Err(Status::unimplemented("use StreamHealthCheck"))
    }
}
