//! `XdsServer`: every xDS service over one cache.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::task::{Context, Poll};

use tokio_util::sync::CancellationToken;
use tonic::codec::Codec;
use tonic::server::{Grpc, UnaryService};
use tonic::{Status, Streaming};
use xds_cache::{Cache, CacheError};
use xds_proto::pb::envoy::service::discovery::v3::DiscoveryRequest;
use xds_proto::{ADS_DELTA_METHOD, ADS_SERVICE, ADS_SOTW_METHOD, ResourceType, TypeUrl};

use crate::body::StreamBody;
use crate::callbacks::{Callbacks, NoCallbacks};
use crate::config::ServerConfig;
use crate::fetch::{Fetched, fetch};
use crate::hds::HealthDiscoveryServer;
use crate::lrs::LoadReportingServer;
use crate::metrics::Metrics;
use crate::status::StatusRegistry;
use crate::stream::{self, Delta, Sotw};
use crate::wire::SotwWire;

/// What every stream of a server shares.
pub(crate) struct Shared {
    pub(crate) cache: Arc<dyn Cache>,
    pub(crate) config: ServerConfig,
    pub(crate) callbacks: Arc<dyn Callbacks>,
    pub(crate) status: Arc<StatusRegistry>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) next_id: AtomicU64,
    pub(crate) open: AtomicUsize,
    pub(crate) lrs: LoadReportingServer,
    pub(crate) hds: Option<HealthDiscoveryServer>,
}

impl Shared {
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
}

/// The gRPC status for a cache's refusal (rule S3).
pub(crate) fn cache_status(e: &CacheError) -> Status {
    match e {
        CacheError::UnknownType { .. } => Status::invalid_argument(e.to_string()),
        CacheError::UnsupportedVariant { .. } => Status::unimplemented(e.to_string()),
        CacheError::Refused { .. } => Status::permission_denied(e.to_string()),
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
/// use xds_cache::SnapshotCache;
/// use xds_server::XdsServer;
///
/// let cache = SnapshotCache::by_node_id();
/// let server = XdsServer::new(cache.clone());
/// tonic::transport::Server::builder()
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
    lrs: LoadReportingServer,
    hds: Option<HealthDiscoveryServer>,
}

impl XdsServerBuilder {
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

    /// Sets the limits and options.
    #[must_use]
    pub fn config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the callbacks.
    #[must_use]
    pub fn callbacks(mut self, callbacks: impl Callbacks) -> Self {
        self.callbacks = Arc::new(callbacks);
        self
    }

    /// The server.
    pub fn build(self) -> XdsServer {
        let shutdown = CancellationToken::new();
        let max = self.config.limits.max_request_bytes;
        let lrs = self.lrs.attach(self.callbacks.clone(), shutdown.clone(), max);
        let hds = self.hds.map(|h| h.attach(self.callbacks.clone(), shutdown.clone(), max));
        XdsServer {
            shared: Arc::new(Shared {
                cache: self.cache,
                config: self.config,
                callbacks: self.callbacks,
                status: Arc::default(),
                metrics: Arc::default(),
                shutdown,
                next_id: AtomicU64::new(1),
                open: AtomicUsize::new(0),
                lrs,
                hds,
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
            lrs: LoadReportingServer::new(),
            hds: None,
        }
    }

    /// Every gRPC service, for `tonic::transport::Server::add_routes`: ADS, the per-type
    /// services (SotW, delta and fetch where the protocol has them), CSDS, load reporting
    /// (LRS) and, when set, health discovery (HDS).
    pub fn routes(&self) -> tonic::service::Routes {
        let mut router = axum::Router::new();
        let mut add = |path: String, kind: MethodKind| {
            router = std::mem::take(&mut router)
                .route_service(&path, GrpcMethod { shared: self.shared.clone(), kind });
        };
        add(format!("/{ADS_SERVICE}/{ADS_SOTW_METHOD}"), MethodKind::Sotw(None));
        add(format!("/{ADS_SERVICE}/{ADS_DELTA_METHOD}"), MethodKind::Delta(None));
        for t in ResourceType::ALL {
            if let Some(path) = t.sotw_path() {
                add(path, MethodKind::Sotw(Some(t)));
            }
            add(t.delta_path(), MethodKind::Delta(Some(t)));
            if let Some(path) = t.fetch_path() {
                add(path, MethodKind::Fetch(t));
            }
        }
        let routes = tonic::service::Routes::from(crate::csds::add_routes(router, self.clone()))
            .add_service(self.shared.lrs.service());
        match &self.shared.hds {
            Some(hds) => routes.add_service(hds.service()),
            None => routes,
        }
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
    /// so clients reconnect elsewhere.
    pub fn shutdown(&self) {
        self.shared.shutdown.cancel();
    }

    /// Resolves once [`shutdown`](Self::shutdown) was called.
    pub fn shutting_down(&self) -> impl Future<Output = ()> + Send + 'static {
        self.shared.shutdown.clone().cancelled_owned()
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
                MethodKind::Sotw(fixed) => serve_stream::<Sotw>(shared, fixed, request),
                MethodKind::Delta(fixed) => serve_stream::<Delta>(shared, fixed, request),
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

/// Serves one streaming method. tonic decodes the request stream (with the size limit); the
/// responses go out through [`StreamBody`], which writes each response a chunk at a time from
/// the cached bytes instead of encoding it whole into a buffer the stream keeps.
fn serve_stream<P: stream::Protocol>(
    shared: Arc<Shared>,
    fixed: Option<ResourceType>,
    request: http::Request<axum::body::Body>,
) -> http::Response<tonic::body::Body> {
    if let Some(encoding) = request.headers().get("grpc-encoding")
        && encoding.as_bytes() != b"identity"
    {
        return Status::unimplemented(format!(
            "request compression {encoding:?} is not supported; send uncompressed messages"
        ))
        .into_http();
    }
    let max = shared.config.limits.max_request_bytes;
    let request = tonic::Request::from_http(request.map(|body| {
        let decoder = tonic_prost::ProstCodec::<P::Wire, P::Request>::default().decoder();
        Streaming::new_request(decoder, body, None, Some(max))
    }));
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
            let request = request.into_inner();
            if !request.type_url.is_empty() && request.type_url != type_url.as_str() {
                return Err(Status::invalid_argument(format!(
                    "type_url {} does not match the service's type {type_url}",
                    request.type_url
                )));
            }
            let node = match request.node {
                Some(node) => node,
                None if shared.config.allow_anonymous => Default::default(),
                None => return Err(Status::invalid_argument("a fetch request must carry a node")),
            };
            if request.resource_names.len() > shared.config.limits.max_names_per_request {
                return Err(Status::invalid_argument(format!(
                    "a request may name at most {} resources",
                    shared.config.limits.max_names_per_request
                )));
            }
            match fetch(&shared, &node, &type_url, &request.resource_names, &request.version_info)
                .await
                .map_err(|e| cache_status(&e))?
            {
                Fetched::Current { version, resources } => Ok(tonic::Response::new(SotwWire {
                    version_info: version,
                    resources,
                    type_url: type_url.as_str().to_owned(),
                    nonce: String::new(),
                    control_plane: shared.config.control_plane_id.clone(),
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
