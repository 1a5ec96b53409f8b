//! REST-JSON: `POST /v3/discovery:<type>` with long poll (rules R1–R3), and CSDS's
//! `POST /v3/discovery:client_status`, as an axum router.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, post};
use futures_util::StreamExt;
use http::{Method, StatusCode, Uri, header};
use serde_json::Value;
use xds_cache::CacheError;
use xds_proto::pb::envoy::config::core::v3::ControlPlane;
use xds_proto::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use xds_proto::pb::envoy::service::status::v3::{ClientStatusRequest, ClientStatusResponse};
use xds_proto::{EncodedResource, JsonError, ResourceType, TypeUrl};

use crate::authz::{Access, Entry, Peer};
use crate::server::{Shared, XdsServer};
use crate::services::fetch::{FetchError, Fetched, admit, fetch};
use xds_core::StreamError;

/// The path of CSDS's REST mapping (the `google.api.http` option of `FetchClientStatus`).
pub(crate) const CLIENT_STATUS_PATH: &str = "/v3/discovery:client_status";

impl XdsServer {
    /// The REST-JSON API (rules R1–R3) as an [`axum::Router`]: serve it on its own port, or
    /// [`merge`](axum::Router::merge) it with your own routes (an admin port, say). Plain
    /// HTTP/1.1 and JSON, for clients and tools that do not speak gRPC (`curl` included).
    ///
    /// Routes:
    /// - `POST /v3/discovery:{listeners,routes,scoped-routes,clusters,endpoints,secrets,runtime,extension_configs}`
    ///   takes a proto3 JSON `DiscoveryRequest` and answers `200` with a JSON
    ///   `DiscoveryResponse` (resources as `Any`s with `@type`; no nonce). A request whose
    ///   `version_info` is the current version is held until the resources change or
    ///   [`ServerConfig::fetch_timeout`](crate::ServerConfig::fetch_timeout) passes, then
    ///   answered `304 Not Modified` with no body (rule R2).
    /// - `POST /v3/discovery:client_status` takes a JSON `ClientStatusRequest` (an empty body
    ///   means "every node") and answers the JSON `ClientStatusResponse` of
    ///   [`client_status`](XdsServer::client_status).
    ///
    /// Errors carry a plain-text body that names the problem, and end only their own request:
    ///
    /// | status | when |
    /// |---|---|
    /// | 400 | malformed JSON or an unknown field (the parse error names the field path); a `type_url` that contradicts the path; no `node` unless anonymous clients are allowed; a node over `max_node_id_bytes` or `max_node_bytes`; more names than `max_names_per_request`; a type the cache does not serve (as gRPC's `InvalidArgument`: the request, not the server, is at fault) |
    /// | 403 | the authorization point (see [`crate::authz`]) or the cache refuses the node |
    /// | 404 | any other path: other types, `/v2/...`, and ADS and delta, which have no REST form (rule R1) |
    /// | 405 | a method other than `POST` |
    /// | 413 | a body larger than `max_request_bytes` |
    /// | 429 | `max_streams` streams and fetches are open (a held long poll counts as one) |
    /// | 501 | the cache does not serve the type over fetch; an unsupported CSDS node matcher |
    /// | 503 | the server is shutting down |
    ///
    /// The router has a fallback (the 404 above). axum cannot merge two routers that both have
    /// one: merge this router into yours, or nest it, if yours has a fallback of its own.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use xds_server::XdsServer;
    /// use xds_server::cache::SnapshotCache;
    ///
    /// let server = XdsServer::new(SnapshotCache::by_node_id());
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:18001").await?;
    /// xds_server::axum::serve(listener, server.rest_router()).await?;
    /// # Ok(()) }
    /// ```
    pub fn rest_router(&self) -> Router {
        let server = self.clone();
        let handler =
            post(move |request: Request| client_status(server.clone(), Entry::Rest, request));
        self.discovery_routes().route(CLIENT_STATUS_PATH, post_only(handler)).fallback(not_found)
    }

    /// The REST-JSON discovery routes of [`rest_router`](Self::rest_router) without CSDS: for
    /// a port that clients reach, with CSDS on the [`admin_router`](Self::admin_router).
    ///
    /// Each request is authorized with the peer found in its extensions ([`Peer::of_http`]):
    /// serve it through [`transport::Incoming`](crate::transport::Incoming) with
    /// `into_make_service_with_connect_info::<Peer>()` so client certificates reach the policy.
    pub fn discovery_router(&self) -> Router {
        self.discovery_routes().fallback(not_found)
    }

    fn discovery_routes(&self) -> Router {
        let mut router = Router::new();
        for t in ResourceType::ALL {
            let Some(segment) = t.rest_path() else { continue };
            let shared = self.shared.clone();
            let handler = post(move |request: Request| discovery(shared.clone(), t, request));
            router = router.route(&format!("/v3/discovery:{segment}"), post_only(handler));
        }
        router
    }
}

/// Why a REST request failed; each maps to one HTTP status.
#[derive(Debug, thiserror::Error)]
enum RestError {
    #[error("the request body is not a valid {message} in proto3 JSON: {error}")]
    BadJson { message: &'static str, error: JsonError },
    #[error("the request body is not UTF-8: {0}")]
    NotUtf8(std::str::Utf8Error),
    #[error("type_url {} does not match the path's type {want}", xds_core::echo(got))]
    TypeMismatch { got: String, want: TypeUrl },
    #[error("a discovery request must carry a node")]
    MissingNode,
    #[error("{0}")]
    Invalid(String),
    #[error("a request may name at most {max} resources, this one names {got}")]
    TooManyNames { max: usize, got: usize },
    #[error("the request body is larger than the limit of {max} bytes")]
    TooLarge { max: usize },
    #[error("cannot read the request body: {0}")]
    Body(axum::Error),
    #[error(transparent)]
    Cache(CacheError),
    #[error(transparent)]
    Refused(crate::Refusal),
    #[error("{}", .0.message())]
    ClientStatus(tonic::Status),
    #[error("the server is shutting down")]
    ShuttingDown,
    #[error("too many streams: the server serves at most {max} streams and fetches at once")]
    TooMany { max: usize },
    #[error("cannot write the response as JSON: {0}")]
    Render(JsonError),
}

impl RestError {
    fn status(&self) -> StatusCode {
        match self {
            RestError::BadJson { .. }
            | RestError::NotUtf8(_)
            | RestError::TypeMismatch { .. }
            | RestError::MissingNode
            | RestError::Invalid(_)
            | RestError::TooManyNames { .. }
            | RestError::Body(_) => StatusCode::BAD_REQUEST,
            RestError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            RestError::Cache(CacheError::UnknownType { .. }) => StatusCode::BAD_REQUEST,
            RestError::Cache(CacheError::UnsupportedVariant { .. }) => StatusCode::NOT_IMPLEMENTED,
            RestError::Cache(CacheError::Refused { .. }) | RestError::Refused(_) => {
                StatusCode::FORBIDDEN
            }
            // A cache error this server does not know yet: the cache could not serve.
            RestError::Cache(_) => StatusCode::INTERNAL_SERVER_ERROR,
            RestError::ClientStatus(s) => match s.code() {
                tonic::Code::InvalidArgument => StatusCode::BAD_REQUEST,
                tonic::Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            },
            RestError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            // gRPC's RESOURCE_EXHAUSTED, as the HTTP mapping of gRPC statuses gives it.
            RestError::TooMany { .. } => StatusCode::TOO_MANY_REQUESTS,
            RestError::Render(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `refused` metric's reason, for the errors a client causes.
    fn refusal(&self) -> Option<&'static str> {
        match self {
            RestError::BadJson { .. }
            | RestError::NotUtf8(_)
            | RestError::TypeMismatch { .. }
            | RestError::MissingNode
            | RestError::Invalid(_) => Some("invalid_request"),
            RestError::TooManyNames { .. } => Some("max_names"),
            RestError::TooLarge { .. } => Some("max_request_bytes"),
            _ => None,
        }
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        (self.status(), self.to_string()).into_response()
    }
}

/// Answers any method but `POST` with 405 and a body that says so (axum's default has none).
pub(crate) fn post_only(router: MethodRouter) -> MethodRouter {
    router.fallback(|method: Method, uri: Uri| async move {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "POST")],
            format!("{method} is not allowed on {}: use POST", uri.path()),
        )
    })
}

/// 404 for every other path (rule R3), listing the paths that exist.
async fn not_found(uri: Uri) -> (StatusCode, String) {
    let segments: Vec<&str> = ResourceType::ALL.iter().filter_map(|t| t.rest_path()).collect();
    let message = format!(
        "no such path: {}; the xDS REST API serves POST /v3/discovery:{{{}}} and \
         POST {CLIENT_STATUS_PATH} (ADS and delta are gRPC only)",
        uri.path(),
        segments.join(",")
    );
    (StatusCode::NOT_FOUND, message)
}

fn json_response(json: String) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], json).into_response()
}

/// Reads the whole body, refusing it as soon as it passes `max` bytes.
async fn read_body(request: Request, max: usize) -> Result<Bytes, RestError> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > max as u64) {
        return Err(RestError::TooLarge { max });
    }
    let mut chunks = request.into_body().into_data_stream();
    let mut body = Vec::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(RestError::Body)?;
        if body.len() + chunk.len() > max {
            return Err(RestError::TooLarge { max });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.into())
}

fn parse<M: prost::Message + prost::Name + Default>(
    body: &[u8],
    message: &'static str,
) -> Result<M, RestError> {
    let text = std::str::from_utf8(body).map_err(RestError::NotUtf8)?;
    xds_proto::from_json_str(text).map_err(|error| RestError::BadJson { message, error })
}

/// `POST /v3/discovery:<type>` (rules R1, R2).
async fn discovery(shared: Arc<Shared>, t: ResourceType, request: Request) -> Response {
    shared.metrics.request("rest", t.label());
    match discover(&shared, t, request).await {
        Ok(Some(value)) => {
            let json = value.to_string();
            shared.metrics.response("rest", t.label(), json.len());
            json_response(json)
        }
        Ok(None) => StatusCode::NOT_MODIFIED.into_response(),
        Err(e) => {
            if let Some(reason) = e.refusal() {
                shared.metrics.refused(reason);
            }
            tracing::debug!(type_url = %t, error = %e, "REST discovery request refused");
            e.into_response()
        }
    }
}

/// The JSON response to a discovery request, or `None` for "not modified".
async fn discover(
    shared: &Shared,
    t: ResourceType,
    request: Request,
) -> Result<Option<Value>, RestError> {
    if shared.shutdown.is_cancelled() {
        return Err(RestError::ShuttingDown);
    }
    let peer = Peer::of_http(&request);
    let body = read_body(request, shared.config.limits.max_request_bytes).await?;
    let request: DiscoveryRequest = parse(&body, "DiscoveryRequest")?;
    let type_url = TypeUrl::from(t);
    let names = request.resource_names.len();
    let node = match admit(shared, &type_url, &request.type_url, request.node, names) {
        Ok(node) => node,
        Err(StreamError::MissingNode) => return Err(RestError::MissingNode),
        Err(StreamError::TooManyNames { max, got }) => {
            return Err(RestError::TooManyNames { max, got });
        }
        Err(StreamError::TypeUrlMismatch { .. }) => {
            return Err(RestError::TypeMismatch { got: request.type_url, want: type_url });
        }
        Err(e) => return Err(RestError::Invalid(e.to_string())),
    };
    let names = &request.resource_names;
    let fetched =
        fetch(shared, &peer, Entry::Rest, &node, &type_url, names, &request.version_info).await;
    match fetched.map_err(|e| match e {
        FetchError::Refused(r) => RestError::Refused(r),
        FetchError::Cache(e) => RestError::Cache(e),
        FetchError::TooMany { max } => RestError::TooMany { max },
        FetchError::Invalid(m) => RestError::Invalid(m),
    })? {
        Fetched::NotModified => Ok(None),
        Fetched::Current { version, resources } => {
            let response = DiscoveryResponse {
                version_info: version.into(),
                resources: resources.iter().map(EncodedResource::to_any).collect(),
                type_url: type_url.as_str().to_owned(),
                control_plane: shared
                    .config
                    .control_plane_id
                    .clone()
                    .map(|identifier| ControlPlane { identifier }),
                ..Default::default()
            };
            xds_proto::to_json(&response).map(Some).map_err(RestError::Render)
        }
    }
}

/// CSDS as JSON for people and tools: any resource a `ClientConfig` carries (`xds_config`) is
/// shown with its sensitive fields redacted, like `/config_dump` (the status records versions
/// only today, so this is the guard for when it carries more).
fn render_client_status(response: &ClientStatusResponse) -> Result<Value, RestError> {
    xds_proto::to_json_redacted(response).map_err(RestError::Render)
}

/// `POST /v3/discovery:client_status`: CSDS as JSON.
pub(crate) async fn client_status(server: XdsServer, entry: Entry, request: Request) -> Response {
    let peer = Peer::of_http(&request);
    let answer = async {
        server.shared.authorize(&peer, entry, Access::ClientStatus).map_err(RestError::Refused)?;
        let body = read_body(request, server.shared.config.limits.max_request_bytes).await?;
        // CSDS's REST mapping takes the whole body as the request; none means "everything".
        let request: ClientStatusRequest = if body.iter().all(u8::is_ascii_whitespace) {
            ClientStatusRequest::default()
        } else {
            parse(&body, "ClientStatusRequest")?
        };
        let response = server.client_status(&request).map_err(RestError::ClientStatus)?;
        render_client_status(&response)
    };
    match answer.await {
        Ok(value) => json_response(value.to_string()),
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt;
    use xds_cache::SnapshotCache;

    use crate::config::{Limits, ServerConfig};

    #[test]
    fn client_status_json_never_shows_a_private_key() {
        use prost::{Message, Name};
        use xds_proto::pb::envoy::config::core::v3::{DataSource, data_source::Specifier};
        use xds_proto::pb::envoy::extensions::transport_sockets::tls::v3::{
            Secret, TlsCertificate, secret,
        };
        use xds_proto::pb::envoy::service::status::v3::ClientConfig;
        use xds_proto::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
        use xds_proto::pb::google::protobuf::Any;
        let key = DataSource {
            specifier: Some(Specifier::InlineString("PRIVATE-KEY-TEXT".into())),
            ..Default::default()
        };
        let certificate = TlsCertificate { private_key: Some(key), ..Default::default() };
        let secret = Secret {
            name: "server-cert".into(),
            r#type: Some(secret::Type::TlsCertificate(certificate)),
        };
        let config = GenericXdsConfig {
            name: "server-cert".into(),
            xds_config: Some(Any { type_url: Secret::type_url(), value: secret.encode_to_vec() }),
            ..Default::default()
        };
        let response = ClientStatusResponse {
            config: vec![ClientConfig { generic_xds_configs: vec![config], ..Default::default() }],
        };
        assert!(xds_proto::to_json(&response).unwrap().to_string().contains("PRIVATE-KEY-TEXT"));
        let shown = render_client_status(&response).unwrap().to_string();
        assert!(!shown.contains("PRIVATE-KEY-TEXT"), "{shown}");
        assert!(shown.contains("server-cert"), "{shown}");
    }

    fn router(config: ServerConfig) -> Router {
        XdsServer::builder(SnapshotCache::by_node_id()).config(config).build().rest_router()
    }

    async fn call(router: Router, method: Method, path: &str, body: &str) -> (StatusCode, String) {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .body(Body::from(body.to_owned()))
            .unwrap();
        let response = router.oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn r3_errors_map_to_http_statuses() {
        let config = ServerConfig {
            limits: Limits {
                max_request_bytes: 128,
                max_names_per_request: 2,
                ..Limits::default()
            },
            ..ServerConfig::default()
        };
        let r = router(config);
        let post =
            |path: &'static str, body: &'static str| call(r.clone(), Method::POST, path, body);

        let (s, body) = post("/v3/discovery:clusters", r#"{"node":{"idd":"n"}}"#).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(body.contains("node.idd: unknown field"), "{body}");

        let (s, body) = post("/v3/discovery:clusters", "{").await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(body.contains("syntax error"), "{body}");

        let wrong =
            format!(r#"{{"node":{{"id":"n"}},"typeUrl":"{}"}}"#, ResourceType::Listener.type_url());
        let (s, body) = call(r.clone(), Method::POST, "/v3/discovery:clusters", &wrong).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(body.contains("does not match"), "{body}");

        let (s, body) = post("/v3/discovery:routes", "{}").await;
        assert_eq!(
            (s, body.as_str()),
            (StatusCode::BAD_REQUEST, "a discovery request must carry a node")
        );

        let (s, body) =
            post("/v3/discovery:routes", r#"{"node":{"id":"n"},"resourceNames":["a","b","c"]}"#)
                .await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(body.contains("at most 2"), "{body}");

        let big = format!(r#"{{"node":{{"id":"{}"}}}}"#, "x".repeat(200));
        let (s, body) = call(r.clone(), Method::POST, "/v3/discovery:routes", &big).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(body.contains("128 bytes"), "{body}");

        for path in ["/v3/discovery:nope", "/v2/discovery:clusters", "/v3/discovery:aggregated"] {
            let (s, body) = post(path, "{}").await;
            assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
            assert!(body.contains(path), "{body}");
        }

        let (s, body) = call(r.clone(), Method::GET, "/v3/discovery:clusters", "").await;
        assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
        assert!(body.contains("use POST"), "{body}");
    }

    #[tokio::test]
    async fn unknown_type_and_variant_errors_are_mapped() {
        let status = |e: CacheError| RestError::Cache(e).status();
        assert_eq!(
            status(CacheError::UnknownType { type_url: "t".into() }),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            status(CacheError::UnsupportedVariant {
                type_url: "t".into(),
                variant: xds_cache::Variant::Fetch
            }),
            StatusCode::NOT_IMPLEMENTED
        );
        assert_eq!(status(CacheError::Refused { reason: "no".into() }), StatusCode::FORBIDDEN);
    }

    #[tokio::test]
    async fn client_status_is_served_as_json() {
        let r = router(ServerConfig::default());
        let (s, body) = call(r.clone(), Method::POST, CLIENT_STATUS_PATH, "").await;
        assert_eq!((s, body.as_str()), (StatusCode::OK, "{}"));
        let matcher = r#"{"nodeMatchers":[{"nodeMetadatas":[{}]}]}"#;
        let (s, body) = call(r.clone(), Method::POST, CLIENT_STATUS_PATH, matcher).await;
        assert_eq!(s, StatusCode::NOT_IMPLEMENTED);
        assert!(body.contains("node_metadatas"), "{body}");
        let (s, _) = call(r, Method::POST, CLIENT_STATUS_PATH, r#"{"nodez":1}"#).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
    }
}
