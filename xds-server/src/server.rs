//! `XdsServer`: every xDS service over one cache.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic::Status;
use tonic::server::{Grpc, UnaryService};
use xds_cache::{Cache, CacheError};
use xds_proto::CustomType;
use xds_proto::pb::envoy::service::discovery::v3::DiscoveryRequest;
use xds_proto::{ADS_DELTA_METHOD, ADS_SERVICE, ADS_SOTW_METHOD, ResourceType, TypeUrl};

use crate::authz::{Access, AllowAll, Authorizer, Entry, Peer, UnauthenticatedSecrets};
use crate::callbacks::{Callbacks, NoCallbacks};
use crate::codec::SotwWire;
use crate::codec::body::StreamBody;
use crate::codec::decode::Requests;
use crate::config::{Limits, ServerConfig};
use crate::hds::HealthDiscoveryServer;
use crate::lrs::LoadReportingServer;
use crate::metrics::Metrics;
use crate::services::fetch::{Fetched, fetch};
use crate::status::StatusRegistry;
use crate::stream;

/// What every stream of a server shares.
pub(crate) struct Shared {
    pub(crate) cache: Arc<dyn Cache>,
    pub(crate) config: ServerConfig,
    pub(crate) callbacks: Arc<dyn Callbacks>,
    /// Whether the user set callbacks: streams then call them where blocking is allowed (see
    /// [`Callbacks`]); the no-op default is called inline.
    pub(crate) custom_callbacks: bool,
    pub(crate) authorizer: Arc<dyn Authorizer>,
    pub(crate) secrets: UnauthenticatedSecrets,
    pub(crate) status: Arc<StatusRegistry>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) shutdown: CancellationToken,
    /// Set once `shutdown` is cancelled, before the streams are woken to see it
    /// ([`watch_shutdown`](Self::watch_shutdown)): what a stream's loop reads, a load where
    /// polling the token's own future took its lock, every turn of every stream's loop.
    stopping: AtomicBool,
    /// Cancelled with `shutdown`, or when this is dropped: ends the task that watches for the
    /// shutdown, started by the first stream.
    watch: CancellationToken,
    watched: AtomicBool,
    pub(crate) next_id: AtomicU64,
    pub(crate) open: AtomicUsize,
    /// The join gate (`ServerConfig::join_permits`); `None` when off.
    pub(crate) join_gate: Option<Arc<crate::stream::Permits>>,
    /// Configured custom types' (type URL, metric label): leaked once at build, a bounded set.
    pub(crate) custom_labels: Vec<(String, &'static str)>,
    pub(crate) lrs: LoadReportingServer,
    pub(crate) hds: Option<HealthDiscoveryServer>,
    /// The whole-set encodings this server used last (see `codec::RecentEncodings`).
    pub(crate) encodings: crate::codec::RecentEncodings,
}

/// Held by the task of [`Shared::watch_shutdown`]: should the task be dropped before the
/// server shuts down (its runtime shut down, the server serving on in another), the next stream
/// starts another.
struct Rewatch(std::sync::Weak<Shared>);

impl Drop for Rewatch {
    fn drop(&mut self) {
        if let Some(shared) = self.0.upgrade()
            && !shared.is_stopping()
        {
            shared.watched.store(false, Ordering::Release);
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.watch.cancel();
    }
}

impl Shared {
    /// Whether the server is shutting down: a stream that sees it ends with `UNAVAILABLE`.
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Starts, once, the task that wakes every xDS stream when `shutdown` is cancelled (by
    /// [`XdsServer::shutdown`], or by an attached LRS or HDS server's, which share the token).
    /// A stream registers in the status registry before it first reads
    /// [`is_stopping`](Self::is_stopping), and the flag is set before the registry is walked:
    /// each stream is woken or sees the flag. The task holds no reference to the server: it ends
    /// when the server shuts down or is dropped.
    pub(crate) fn watch_shutdown(self: &Arc<Self>) {
        if self.watched.swap(true, Ordering::AcqRel) {
            return;
        }
        let (watch, rewatch) = (self.watch.clone(), Rewatch(Arc::downgrade(self)));
        tokio::spawn(async move {
            watch.cancelled().await;
            if let Some(shared) = rewatch.0.upgrade()
                && shared.shutdown.is_cancelled()
            {
                shared.stopping.store(true, Ordering::Release);
                shared.status.stop_all();
            }
        });
    }

    /// The type for a type URL, with the traits of a configured custom type.
    pub(crate) fn type_url(&self, url: &str) -> TypeUrl {
        let parsed = TypeUrl::parse(url);
        if parsed.builtin().is_some() {
            return parsed;
        }
        self.config
            .custom_types
            .iter()
            .map(|c| TypeUrl::from(c.clone()))
            .find(|t| t.as_str() == url)
            .unwrap_or(parsed)
    }

    /// The metric label of a type: the built-in types' and configured custom types' labels,
    /// `unknown` for anything else, so that a peer cannot add label values (conventions 18).
    pub(crate) fn label(&self, t: &TypeUrl) -> &'static str {
        if let Some(b) = t.builtin() {
            return b.label();
        }
        self.custom_labels
            .iter()
            .find(|(url, _)| url == t.as_str())
            .map_or("unknown", |(_, label)| *label)
    }

    /// The authorization point (see [`crate::authz`]): every entry calls it before reading a
    /// configuration or a client's status.
    pub(crate) fn authorize(
        &self,
        peer: &Peer,
        entry: Entry,
        access: Access<'_>,
    ) -> Result<(), crate::Refusal> {
        let request = crate::authz::Request { peer, entry, access };
        let decided = crate::authz::authorize(&*self.authorizer, self.secrets, &request);
        if let Err(refusal) = &decided {
            self.metrics.refused("unauthorized");
            tracing::info!(?entry, addr = ?peer.remote_addr, reason = %refusal, "request refused");
        }
        decided
    }

    /// The names of `names` (as requested) that the authorizer refuses for `node`, by normal
    /// form (rule C1), with the reason. Empty without asking when no name is requested or the
    /// policy refuses no name on its own ([`Authorizer::checks_resources`]).
    pub(crate) fn denied_names<'a>(
        &self,
        peer: &Peer,
        entry: Entry,
        node: &xds_proto::pb::envoy::config::core::v3::Node,
        type_url: &TypeUrl,
        names: impl IntoIterator<Item = &'a str>,
    ) -> std::collections::BTreeMap<String, String> {
        let mut denied = std::collections::BTreeMap::new();
        let mut names = names.into_iter().peekable();
        if !self.authorizer.checks_resources() || names.peek().is_none() {
            return denied;
        }
        let request =
            crate::authz::Request { peer, entry, access: Access::Resources { node, type_url } };
        for name in names {
            // A malformed name is refused by the core as it is (INVALID_ARGUMENT).
            let Ok(normal) = xds_proto::xdstp::normalize(name) else { continue };
            if let Err(refusal) = self.authorizer.authorize_resource(&request, &normal) {
                self.metrics.refused("unauthorized_resource");
                tracing::debug!(?entry, %type_url, name = %normal, reason = %refusal, "resource refused");
                denied.insert(normal.into_owned(), refusal.0);
            }
        }
        denied
    }
}

/// The gRPC status for a cache's refusal (rule S3).
pub(crate) fn cache_status(e: &CacheError) -> Status {
    match e {
        CacheError::UnknownType { .. } => Status::invalid_argument(e.to_string()),
        CacheError::UnsupportedVariant { .. } => Status::unimplemented(e.to_string()),
        CacheError::Refused { .. } => Status::permission_denied(e.to_string()),
        // A cache error this server does not know yet: the cache could not serve.
        _ => Status::internal(e.to_string()),
    }
}

/// A complete xDS management server over one [`Cache`]: ADS and every per-type service, SotW
/// and delta, the unary `Fetch*` methods, CSDS, and (through [`XdsServer::rest_router`])
/// REST-JSON.
///
/// Cloning is cheap; clones share streams, status and metrics.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use xds_server::XdsServer;
/// use xds_server::cache::SnapshotCache;
///
/// let cache = SnapshotCache::by_node_id();
/// let server = XdsServer::new(cache.clone());
/// xds_server::tonic::transport::Server::builder()
///     .add_routes(server.routes())
///     .serve("127.0.0.1:18000".parse()?)
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct XdsServer {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for XdsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdsServer").field("streams", &self.shared.status.len()).finish()
    }
}

/// Builds an [`XdsServer`].
pub struct XdsServerBuilder {
    cache: Arc<dyn Cache>,
    config: ServerConfig,
    callbacks: Arc<dyn Callbacks>,
    custom_callbacks: bool,
    authorizer: Arc<dyn Authorizer>,
    secrets: UnauthenticatedSecrets,
    lrs: LoadReportingServer,
    hds: Option<HealthDiscoveryServer>,
}

impl XdsServerBuilder {
    /// Sets the authorization policy every entry asks (default [`AllowAll`]); see
    /// [`crate::authz`] and the ready policy [`NodeIdentity`](crate::NodeIdentity).
    #[must_use]
    pub fn authorizer(mut self, authorizer: impl Authorizer) -> Self {
        self.authorizer = Arc::new(authorizer);
        self
    }

    /// When `Secret` resources may go to a client without a verified certificate (default:
    /// over gRPC only, never over REST).
    #[must_use]
    pub fn unauthenticated_secrets(mut self, secrets: UnauthenticatedSecrets) -> Self {
        self.secrets = secrets;
        self
    }

    /// Sets the load reporting service served by [`XdsServer::routes`] (by default one that
    /// asks for every cluster every 10 seconds). It takes the server's callbacks, shutdown and
    /// request size limit.
    #[must_use]
    pub fn load_reporting(mut self, lrs: LoadReportingServer) -> Self {
        self.lrs = lrs;
        self
    }

    /// Serves health discovery (HDS) in [`XdsServer::routes`] (not served by default: it needs
    /// to know what to health-check). It takes the server's callbacks, shutdown and request
    /// size limit.
    #[must_use]
    pub fn health_discovery(mut self, hds: HealthDiscoveryServer) -> Self {
        self.hds = Some(hds);
        self
    }

    /// Sets the limits and options, all at once (replacing what the setters below set before).
    /// The setters below change one knob each; either way the builder is the one place a
    /// server is configured, and [`XdsServer::config`] reads the result back.
    #[must_use]
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets `ServerConfig::limits` (see [`ServerConfig`]).
    #[must_use]
    pub fn limits(mut self, value: Limits) -> Self {
        self.config.limits = value;
        self
    }

    /// Sets `ServerConfig::allow_anonymous` (see [`ServerConfig`]).
    #[must_use]
    pub fn allow_anonymous(mut self, value: bool) -> Self {
        self.config.allow_anonymous = value;
        self
    }

    /// Sets `ServerConfig::control_plane_id` (see [`ServerConfig`]) to `Some(value)`.
    #[must_use]
    pub fn control_plane_id(mut self, value: impl Into<String>) -> Self {
        self.config.control_plane_id = Some(value.into());
        self
    }

    /// Sets `ServerConfig::custom_types` (see [`ServerConfig`]), replacing the list.
    #[must_use]
    pub fn custom_types(mut self, values: impl IntoIterator<Item = CustomType>) -> Self {
        self.config.custom_types = values.into_iter().collect();
        self
    }

    /// Sets `ServerConfig::fetch_timeout` (see [`ServerConfig`]).
    #[must_use]
    pub fn fetch_timeout(mut self, value: Duration) -> Self {
        self.config.fetch_timeout = value;
        self
    }

    /// Sets `ServerConfig::shutdown_grace` (see [`ServerConfig`]).
    #[must_use]
    pub fn shutdown_grace(mut self, value: Duration) -> Self {
        self.config.shutdown_grace = value;
        self
    }

    /// Sets `ServerConfig::join_permits` (see [`ServerConfig`]).
    #[must_use]
    pub fn join_permits(mut self, value: usize) -> Self {
        self.config.join_permits = value;
        self
    }

    /// Sets `ServerConfig::join_timeout` (see [`ServerConfig`]).
    #[must_use]
    pub fn join_timeout(mut self, value: Duration) -> Self {
        self.config.join_timeout = value;
        self
    }

    /// Sets `ServerConfig::resource_errors` (see [`ServerConfig`]).
    #[must_use]
    pub fn resource_errors(mut self, value: bool) -> Self {
        self.config.resource_errors = value;
        self
    }

    /// Sets `ServerConfig::join_max_wait` (see [`ServerConfig`]).
    #[must_use]
    pub fn join_max_wait(mut self, value: Duration) -> Self {
        self.config.join_max_wait = value;
        self
    }

    /// Sets `ServerConfig::unserved_timeout` (see [`ServerConfig`]).
    #[must_use]
    pub fn unserved_timeout(mut self, value: impl Into<Option<Duration>>) -> Self {
        self.config.unserved_timeout = value.into();
        self
    }

    /// Sets `ServerConfig::stream_events` (see [`ServerConfig`]).
    #[must_use]
    pub fn stream_events(mut self, value: usize) -> Self {
        self.config.stream_events = value;
        self
    }

    /// Sets the callbacks.
    #[must_use]
    pub fn callbacks(mut self, callbacks: impl Callbacks) -> Self {
        self.callbacks = Arc::new(callbacks);
        self.custom_callbacks = true;
        self
    }

    /// The server.
    pub fn build(self) -> XdsServer {
        let custom_labels = self
            .config
            .custom_types
            .iter()
            .map(|c| {
                let t = TypeUrl::from(c.clone());
                let label: &'static str = Box::leak(t.label().to_owned().into_boxed_str());
                (t.as_str().to_owned(), label)
            })
            .collect();
        let shutdown = CancellationToken::new();
        let hooks = crate::reporter::Hooks {
            callbacks: self.callbacks.clone(),
            authorizer: self.authorizer.clone(),
            shutdown: shutdown.clone(),
            max_request_bytes: self.config.limits.max_request_bytes,
        };
        let lrs = self.lrs.attach(hooks.clone());
        let hds = self.hds.map(|h| h.attach(hooks));
        let permits = self.config.join_permits;
        let join_gate = (permits > 0).then(|| Arc::new(crate::stream::Permits::new(permits)));
        XdsServer {
            shared: Arc::new(Shared {
                cache: self.cache,
                config: self.config,
                callbacks: self.callbacks,
                custom_callbacks: self.custom_callbacks,
                authorizer: self.authorizer,
                secrets: self.secrets,
                custom_labels,
                status: Arc::default(),
                metrics: Arc::default(),
                stopping: AtomicBool::new(false),
                watch: shutdown.child_token(),
                watched: AtomicBool::new(false),
                shutdown,
                next_id: AtomicU64::new(1),
                open: AtomicUsize::new(0),
                join_gate,
                lrs,
                hds,
                encodings: Default::default(),
            }),
        }
    }
}

impl XdsServer {
    /// A server over `cache` with default limits and no callbacks.
    pub fn new(cache: impl Cache) -> Self {
        Self::builder(cache).build()
    }

    /// A builder for a server over `cache`.
    pub fn builder(cache: impl Cache) -> XdsServerBuilder {
        XdsServerBuilder {
            cache: Arc::new(cache),
            config: ServerConfig::default(),
            callbacks: Arc::new(NoCallbacks),
            custom_callbacks: false,
            authorizer: Arc::new(AllowAll),
            secrets: UnauthenticatedSecrets::default(),
            lrs: LoadReportingServer::new(),
            hds: None,
        }
    }

    /// Every gRPC service, for `tonic::transport::Server::add_routes`: ADS, the per-type
    /// services (SotW, delta and fetch where the protocol has them), CSDS, load reporting
    /// (LRS) and, when set, health discovery (HDS).
    pub fn routes(&self) -> tonic::service::Routes {
        let router = Service::all().fold(axum::Router::new(), |r, s| self.add_service(r, s));
        let routes = tonic::service::Routes::from(router).add_service(self.shared.lrs.service());
        let routes = match &self.shared.hds {
            Some(hds) => routes.add_service(hds.service()),
            None => routes,
        };
        require_grpc_content_type(routes)
    }

    /// One gRPC service alone, so that you can put a layer or an interceptor on it (an auth
    /// layer on CSDS only, a rate limit on ADS) and add the others as they are:
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use xds_server::{Service, XdsServer};
    /// use xds_server::axum::Router;
    ///
    /// let server = XdsServer::new(xds_server::cache::SnapshotCache::by_node_id());
    /// let mut router = Router::new();
    /// for service in Service::all().filter(|s| *s != Service::ClientStatus) {
    ///     router = router.merge(server.service_routes(service).into_axum_router());
    /// }
    /// // CSDS shows every node's configuration: put your own auth layer on it alone.
    /// let csds = server.service_routes(Service::ClientStatus).into_axum_router();
    /// let csds = csds.layer(xds_server::tower::limit::ConcurrencyLimitLayer::new(4));
    /// xds_server::tonic::transport::Server::builder()
    ///     .add_routes(router.merge(csds).into())
    ///     .serve("127.0.0.1:18000".parse()?)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn service_routes(&self, service: Service) -> tonic::service::Routes {
        let routes = tonic::service::Routes::from(self.add_service(axum::Router::new(), service));
        require_grpc_content_type(routes)
    }

    fn add_service(&self, mut router: axum::Router, service: Service) -> axum::Router {
        let mut add = |path: String, kind: MethodKind| {
            router = std::mem::take(&mut router)
                .route_service(&path, GrpcMethod { shared: self.shared.clone(), kind });
        };
        match service {
            Service::Aggregated => {
                add(format!("/{ADS_SERVICE}/{ADS_SOTW_METHOD}"), MethodKind::Sotw(None));
                add(format!("/{ADS_SERVICE}/{ADS_DELTA_METHOD}"), MethodKind::Delta(None));
            }
            Service::Type(t) => {
                if let Some(path) = t.sotw_path() {
                    add(path, MethodKind::Sotw(Some(t)));
                }
                add(t.delta_path(), MethodKind::Delta(Some(t)));
                if let Some(path) = t.fetch_path() {
                    add(path, MethodKind::Fetch(t));
                }
            }
            Service::ClientStatus => {
                return crate::services::csds::add_routes(router, self.clone());
            }
        }
        router
    }

    /// The load reporting service and the load it received.
    pub fn load_reporting(&self) -> &LoadReportingServer {
        &self.shared.lrs
    }

    /// The health discovery service and the health it received, when set.
    pub fn health_discovery(&self) -> Option<&HealthDiscoveryServer> {
        self.shared.hds.as_ref()
    }

    /// The per-node status of every open stream.
    pub fn status(&self) -> &Arc<StatusRegistry> {
        &self.shared.status
    }

    /// The server's counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// The server's configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.shared.config
    }

    /// Starts graceful shutdown: new streams are refused and open ones end with `UNAVAILABLE`,
    /// so clients reconnect elsewhere. [`drain`](Self::drain) waits for them to be gone.
    pub fn shutdown(&self) {
        self.shared.shutdown.cancel();
    }

    /// Shuts down (as [`shutdown`](Self::shutdown)) and resolves once every stream has ended, or
    /// [`ServerConfig::shutdown_grace`] has passed, whichever comes first. Stop the transport
    /// after it: the streams' `UNAVAILABLE` has then been written, so clients reconnect at once
    /// instead of waiting for a broken connection to time out. Returns the number of streams
    /// still open when it gave up (0 on a clean drain).
    pub async fn drain(&self) -> usize {
        self.shutdown();
        let deadline = tokio::time::Instant::now() + self.shared.config.shutdown_grace;
        loop {
            let open = self.shared.open.load(std::sync::atomic::Ordering::SeqCst);
            if open == 0 || tokio::time::Instant::now() >= deadline {
                return open;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Resolves once [`shutdown`](Self::shutdown) was called.
    pub fn shutting_down(&self) -> impl Future<Output = ()> + Send + 'static {
        self.shared.shutdown.clone().cancelled_owned()
    }
}

/// `routes`, answering every request whose `content-type` is not gRPC's with HTTP 415.
///
/// The gRPC over HTTP/2 protocol: "If Content-Type does not begin with `application/grpc`, gRPC
/// servers SHOULD respond with HTTP status of 415 (Unsupported Media Type). This will prevent
/// other HTTP/2 clients from interpreting a gRPC error response, which uses status 200 (OK), as
/// successful." Without the check, a request of any type was decoded as gRPC frames.
fn require_grpc_content_type(routes: tonic::service::Routes) -> tonic::service::Routes {
    let router = routes.into_axum_router().layer(axum::middleware::from_fn(grpc_only));
    tonic::service::Routes::from(router)
}

async fn grpc_only(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let content_type = request.headers().get(http::header::CONTENT_TYPE);
    if content_type.is_some_and(|v| is_grpc_content_type(v.as_bytes())) {
        return next.run(request).await;
    }
    let got = content_type.map_or_else(
        || "none".to_owned(),
        |v| format!("{:?}", xds_core::echo(&String::from_utf8_lossy(v.as_bytes())).to_string()),
    );
    let message = format!(
        "a gRPC request must have content-type application/grpc (or application/grpc+proto), \
         not {got}\n"
    );
    (http::StatusCode::UNSUPPORTED_MEDIA_TYPE, message).into_response()
}

/// Whether a `content-type` is gRPC's: `application/grpc`, optionally followed by `+` and a
/// message format (`+proto`) or by `;` and parameters; the type is compared without case, as
/// media types are.
fn is_grpc_content_type(value: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    value.len() >= GRPC.len()
        && value[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(value.get(GRPC.len()), None | Some(b'+' | b';'))
}

/// One gRPC service of the server, for [`XdsServer::service_routes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// ADS: `envoy.service.discovery.v3.AggregatedDiscoveryService`, SotW and delta.
    Aggregated,
    /// The per-type service of one resource type (CDS, EDS, ...): SotW, delta and fetch where
    /// the protocol has them.
    Type(ResourceType),
    /// CSDS: `envoy.service.status.v3.ClientStatusDiscoveryService`.
    ClientStatus,
}

impl Service {
    /// Every service [`XdsServer::routes`] serves.
    pub fn all() -> impl Iterator<Item = Service> {
        std::iter::once(Service::Aggregated)
            .chain(ResourceType::ALL.into_iter().map(Service::Type))
            .chain(std::iter::once(Service::ClientStatus))
    }
}

#[derive(Clone, Copy, Debug)]
enum MethodKind {
    Sotw(Option<ResourceType>),
    Delta(Option<ResourceType>),
    Fetch(ResourceType),
}

/// One gRPC method of the server.
#[derive(Clone)]
struct GrpcMethod {
    shared: Arc<Shared>,
    kind: MethodKind,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl tower::Service<http::Request<axum::body::Body>> for GrpcMethod {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<axum::body::Body>) -> Self::Future {
        let shared = self.shared.clone();
        let kind = self.kind;
        Box::pin(async move {
            Ok(match kind {
                MethodKind::Sotw(fixed) => serve_stream::<xds_core::Sotw>(shared, fixed, request),
                MethodKind::Delta(fixed) => serve_stream::<xds_core::Delta>(shared, fixed, request),
                MethodKind::Fetch(t) => {
                    let max = Some(shared.config.limits.max_request_bytes);
                    let mut grpc = Grpc::new(tonic_prost::ProstCodec::default())
                        .apply_max_message_size_config(max, None);
                    grpc.unary(FetchMethod { shared, type_url: t }, request).await
                }
            })
        })
    }
}

/// Serves one streaming method. [`Requests`] decodes the request stream (with the size limit)
/// into a buffer per message that it lets go of; the responses go out through [`StreamBody`],
/// which writes each response a chunk at a time from the cached bytes instead of encoding it
/// whole into a buffer the stream keeps.
fn serve_stream<P: stream::WireProtocol>(
    shared: Arc<Shared>,
    fixed: Option<ResourceType>,
    request: http::Request<axum::body::Body>,
) -> http::Response<tonic::body::Body> {
    if let Some(encoding) = request.headers().get("grpc-encoding")
        && encoding.as_bytes() != b"identity"
    {
        let encoding = String::from_utf8_lossy(encoding.as_bytes());
        return Status::unimplemented(format!(
            "request compression {:?} is not supported; send uncompressed messages",
            xds_core::echo(&encoding).to_string()
        ))
        .into_http();
    }
    let max = shared.config.limits.max_request_bytes;
    let request = tonic::Request::from_http(request.map(|body| Requests::new(body, max)));
    match stream::open::<P>(shared, fixed, request) {
        Ok(responses) => {
            let mut response =
                http::Response::new(tonic::body::Body::new(StreamBody::new(responses)));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/grpc"),
            );
            response
        }
        Err(status) => status.into_http(),
    }
}

struct FetchMethod {
    shared: Arc<Shared>,
    type_url: ResourceType,
}

impl UnaryService<DiscoveryRequest> for FetchMethod {
    type Response = SotwWire;
    type Future = BoxFuture<tonic::Response<SotwWire>, Status>;

    fn call(&mut self, request: tonic::Request<DiscoveryRequest>) -> Self::Future {
        let shared = self.shared.clone();
        let type_url = TypeUrl::from(self.type_url);
        Box::pin(async move {
            let peer = Peer::of(&request);
            let request = request.into_inner();
            let node = match crate::services::fetch::admit(
                &shared,
                &type_url,
                &request.type_url,
                request.node,
                request.resource_names.len(),
            ) {
                Ok(node) => node,
                Err(xds_core::StreamError::MissingNode) => {
                    return Err(Status::invalid_argument("a fetch request must carry a node"));
                }
                Err(e) => return Err(Status::invalid_argument(e.to_string())),
            };
            match fetch(
                &shared,
                &peer,
                Entry::Fetch,
                &node,
                &type_url,
                &request.resource_names,
                &request.version_info,
            )
            .await?
            {
                Fetched::Current { version, resources } => Ok(tonic::Response::new(SotwWire {
                    version_info: version,
                    shared: None,
                    resources,
                    type_url: type_url.to_static_str(),
                    nonce: xds_core::Text::new(),
                    control_plane: shared.config.control_plane_id.clone(),
                    resource_errors: Vec::new(),
                    heartbeat: false,
                })),
                Fetched::NotModified => Err(Status::deadline_exceeded(format!(
                    "not modified: version {} is still current",
                    request.version_info
                ))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::is_grpc_content_type;

    #[test]
    fn grpc_content_types_are_told_apart() {
        for ok in ["application/grpc", "application/grpc+proto", "Application/GRPC; charset=x"] {
            assert!(is_grpc_content_type(ok.as_bytes()), "{ok}");
        }
        for bad in ["", "application/json", "application/grpc-web", "application/grp", "text/grpc"]
        {
            assert!(!is_grpc_content_type(bad.as_bytes()), "{bad}");
        }
    }
}
