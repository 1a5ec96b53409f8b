//! The `server_request` and `rest_body` harnesses: requests through a real [`XdsServer`]'s gRPC
//! routes and REST router, in process, on a current-thread runtime made once.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::OnceLock;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body as _, Frame};
use http_body_util::{BodyExt, StreamBody};
use prost::Message;
use tower::ServiceExt;
use xds_cache::{Snapshot, SnapshotCache};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_proto::pb::envoy::config::listener::v3::Listener;
use xds_proto::pb::envoy::config::route::v3::{RouteConfiguration, VirtualHost};
use xds_proto::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
use xds_proto::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use xds_proto::pb::google::rpc::Status as RpcStatus;
use xds_proto::{ADS_DELTA_METHOD, ADS_SERVICE, ADS_SOTW_METHOD, CustomType, ResourceType};
use xds_server::{Limits, ServerConfig, XdsServer};

/// How long one request may take before the harness calls it a hang.
const DEADLINE: Duration = Duration::from_secs(5);
/// How many response frames are read at most.
const MAX_FRAMES: usize = 64;
/// Node ids: the first two have a snapshot.
const NODES: [&str; 4] = ["n1", "n2", "", "nobody"];
/// A custom type the second server knows (wildcard-capable): a real message that is no xDS
/// resource type.
fn custom() -> String {
    <xds_proto::pb::envoy::config::core::v3::Address as prost::Name>::type_url()
}
/// Names requests carry: the resources' and a few that do not exist.
const NAMES: [&str; 8] = ["c1", "l1", "r1", "s1", "r1/vh", "*", "missing", ""];

/// Two servers over one cache: default limits, and one with small limits that allows
/// anonymous nodes and serves a custom type.
struct Servers {
    cache: SnapshotCache,
    servers: [XdsServer; 2],
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime")
    })
}

fn snapshot(tag: &str) -> Snapshot {
    let mut b = Snapshot::builder();
    let added = b
        .add(&Cluster { name: "c1".into(), alt_stat_name: tag.into(), ..Default::default() })
        .and_then(|b| {
            b.add(&ClusterLoadAssignment { cluster_name: "c1".into(), ..Default::default() })
        })
        .and_then(|b| b.add(&Listener { name: "l1".into(), ..Default::default() }))
        .and_then(|b| b.add(&RouteConfiguration { name: "r1".into(), ..Default::default() }))
        .and_then(|b| b.add(&VirtualHost { name: "r1/vh".into(), ..Default::default() }))
        .and_then(|b| b.add(&Secret { name: "s1".into(), ..Default::default() }))
        .map(|_| ());
    added.expect("the fixed resources encode");
    b.build_unchecked()
}

fn servers() -> &'static Servers {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let cache = SnapshotCache::by_node_id();
        cache.set_snapshot("n1", snapshot("one"));
        cache.set_snapshot("n2", snapshot("two"));
        let quick = ServerConfig::default().fetch_timeout(Duration::from_millis(5));
        let small = quick
            .clone()
            .limits(
                Limits::default()
                    .max_request_bytes(512)
                    .max_names_per_request(4)
                    .max_requests_per_second(5)
                    .request_burst(3),
            )
            .allow_anonymous(true)
            .control_plane_id("fuzz")
            .custom_types(vec![CustomType::new(custom()).wildcard_capable(true)]);
        let servers = [
            XdsServer::builder(cache.clone()).config(quick).build(),
            XdsServer::builder(cache.clone()).config(small).build(),
        ];
        Servers { cache, servers }
    })
}

/// The version the cache serves for a type to `n1`, for requests that claim to be up to date.
fn current_version(type_url: &str) -> String {
    servers().cache.status("n1").and_then(|s| s.versions.get(type_url).cloned()).unwrap_or_default()
}

// ---- structured requests ----

#[derive(Arbitrary, Debug)]
enum Text {
    /// One of a few meaningful values.
    Pick(u8),
    /// Anything.
    Any(String),
}

impl Text {
    fn pick(&self, from: &[&str]) -> String {
        match self {
            Text::Pick(i) => from[usize::from(*i) % from.len()].to_owned(),
            Text::Any(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum TypeChoice {
    Builtin(u8),
    Empty,
    Custom,
    Any(String),
}

impl TypeChoice {
    fn url(&self) -> String {
        match self {
            TypeChoice::Builtin(i) => {
                ResourceType::ALL[usize::from(*i) % ResourceType::ALL.len()].type_url().to_owned()
            }
            TypeChoice::Empty => String::new(),
            TypeChoice::Custom => custom(),
            TypeChoice::Any(s) => s.clone(),
        }
    }
}

/// A request as a client might send it, with a few fields left to chance.
#[derive(Arbitrary, Debug)]
struct Fields {
    node: Option<Text>,
    type_url: TypeChoice,
    names: Vec<Text>,
    unsubscribe: Vec<Text>,
    initial: Vec<(Text, Text)>,
    /// `None`: the current version of the type (a poll at the current version).
    version: Option<Text>,
    nonce: Text,
    nack: Option<(i32, String)>,
}

const NONCES: [&str; 5] = ["", "1", "2", "3", "stale"];
const VERSIONS: [&str; 3] = ["", "0", "v"];

impl Fields {
    fn node(&self) -> Option<Node> {
        self.node.as_ref().map(|id| Node { id: id.pick(&NODES), ..Default::default() })
    }

    fn names(list: &[Text]) -> Vec<String> {
        list.iter().take(8).map(|n| n.pick(&NAMES)).collect()
    }

    fn error(&self) -> Option<RpcStatus> {
        self.nack.as_ref().map(|(code, message)| RpcStatus {
            code: *code,
            message: message.clone(),
            details: vec![],
        })
    }

    fn sotw(&self) -> DiscoveryRequest {
        let type_url = self.type_url.url();
        DiscoveryRequest {
            version_info: match &self.version {
                Some(v) => v.pick(&VERSIONS),
                None => current_version(&type_url),
            },
            node: self.node(),
            resource_names: Self::names(&self.names),
            type_url,
            response_nonce: self.nonce.pick(&NONCES),
            error_detail: self.error(),
            ..Default::default()
        }
    }

    fn delta(&self) -> DeltaDiscoveryRequest {
        DeltaDiscoveryRequest {
            node: self.node(),
            type_url: self.type_url.url(),
            resource_names_subscribe: Self::names(&self.names),
            resource_names_unsubscribe: Self::names(&self.unsubscribe),
            initial_resource_versions: self
                .initial
                .iter()
                .take(4)
                .map(|(n, v)| (n.pick(&NAMES), v.pick(&VERSIONS)))
                .collect(),
            response_nonce: self.nonce.pick(&NONCES),
            error_detail: self.error(),
            ..Default::default()
        }
    }
}

// ---- the gRPC request path ----

/// Which method a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    /// `StreamAggregatedResources` or a per-type `Stream*`.
    Sotw,
    /// `DeltaAggregatedResources` or a per-type `Delta*`.
    Delta,
    /// A per-type unary `Fetch*`.
    Fetch,
}

/// The gRPC path for `selector`: ADS, a per-type stream or a fetch method.
fn grpc_path(selector: u8, t: ResourceType) -> (String, Method) {
    match selector % 5 {
        0 => (format!("/{ADS_SERVICE}/{ADS_SOTW_METHOD}"), Method::Sotw),
        1 => (format!("/{ADS_SERVICE}/{ADS_DELTA_METHOD}"), Method::Delta),
        2 => match t.sotw_path() {
            Some(path) => (path, Method::Sotw),
            None => (t.delta_path(), Method::Delta),
        },
        3 => (t.delta_path(), Method::Delta),
        _ => match t.fetch_path() {
            Some(path) => (path, Method::Fetch),
            None => (format!("/{ADS_SERVICE}/{ADS_SOTW_METHOD}"), Method::Sotw),
        },
    }
}

/// One gRPC message frame: uncompressed, with its length.
fn frame(out: &mut Vec<u8>, message: &[u8]) {
    out.push(0);
    out.extend_from_slice(&u32::try_from(message.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(message);
}

/// The request body and its chunking, from the input.
fn grpc_body(u: &mut Unstructured<'_>, method: Method) -> arbitrary::Result<Vec<u8>> {
    let mode: u8 = u.arbitrary()?;
    let mut body = Vec::new();
    match mode % 4 {
        // Well-formed requests with fields left to chance, sometimes cut or with junk after.
        0 | 1 => {
            let count = u.int_in_range(1..=6)?;
            for _ in 0..count {
                let fields: Fields = u.arbitrary()?;
                let mut message = match method {
                    Method::Delta => fields.delta().encode_to_vec(),
                    Method::Sotw | Method::Fetch => fields.sotw().encode_to_vec(),
                };
                match u.arbitrary::<u8>()? {
                    0..=199 => {}
                    200..=227 => message.truncate(usize::from(u.arbitrary::<u8>()?)),
                    _ => message.extend_from_slice(u.arbitrary::<&[u8]>()?),
                }
                frame(&mut body, &message);
            }
        }
        // The input's bytes, framed as messages of lengths the input picks.
        2 => {
            while !u.is_empty() {
                let len = u.int_in_range(0..=u.len())?;
                frame(&mut body, u.bytes(len)?);
            }
        }
        // The input's bytes as they are: frame headers with any flag and length.
        _ => {
            let len = u.len();
            body.extend_from_slice(u.bytes(len)?);
        }
    }
    Ok(body)
}

/// Splits `body` into chunks at points the input picks.
fn chunks(u: &mut Unstructured<'_>, body: Vec<u8>) -> Vec<Result<Frame<Bytes>, Infallible>> {
    let mut body = Bytes::from(body);
    let mut out = Vec::new();
    while !body.is_empty() {
        let at = match u.int_in_range(0..=64usize) {
            Ok(n) if n > 0 && out.len() < 32 => n.min(body.len()),
            _ => body.len(),
        };
        out.push(Ok(Frame::data(body.split_to(at))));
    }
    out
}

/// What a response stream showed.
#[derive(Debug, Default)]
struct Seen {
    messages: usize,
    status: Option<u16>,
}

/// Checks a `grpc-status` value: an integer code of `google.rpc.Code`.
fn check_status(value: &http::HeaderValue) -> u16 {
    let code = value.to_str().ok().and_then(|s| s.parse::<u16>().ok());
    match code {
        Some(code) if code <= 16 => code,
        _ => panic!("invalid grpc-status {value:?}"),
    }
}

/// Checks one response message of a stream or fetch.
fn check_message(method: Method, bytes: &[u8], nonces: &mut BTreeSet<String>) {
    match method {
        Method::Sotw | Method::Fetch => {
            let r = DiscoveryResponse::decode(bytes).expect("a DiscoveryResponse");
            assert!(!r.type_url.is_empty(), "a response without type_url");
            if method == Method::Sotw {
                assert!(!r.nonce.is_empty(), "a stream response without nonce");
                assert!(nonces.insert(r.nonce.clone()), "nonce {} repeated", r.nonce);
            }
            for any in &r.resources {
                assert!(
                    any.type_url == r.type_url
                        || any.type_url.ends_with("envoy.service.discovery.v3.Resource"),
                    "a {} resource in a {} response",
                    any.type_url,
                    r.type_url
                );
            }
        }
        Method::Delta => {
            let r = DeltaDiscoveryResponse::decode(bytes).expect("a DeltaDiscoveryResponse");
            assert!(!r.type_url.is_empty(), "a response without type_url");
            assert!(!r.nonce.is_empty(), "a delta response without nonce");
            assert!(nonces.insert(r.nonce.clone()), "nonce {} repeated", r.nonce);
            let mut names = BTreeSet::new();
            for x in &r.resources {
                assert!(names.insert(x.name.as_str()), "rule S14: {} twice", x.name);
            }
            for name in &r.removed_resources {
                assert!(names.insert(name.as_str()), "{name} both sent and removed");
            }
        }
    }
}

/// Sends one gRPC request to `routes` and checks that the response is well-formed gRPC.
async fn grpc_call(
    server: &XdsServer,
    path: &str,
    method: Method,
    headers: u8,
    body: Vec<Result<Frame<Bytes>, Infallible>>,
) {
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("http://fuzz{path}"))
        .header(
            "content-type",
            if headers % 7 == 3 { "application/grpc+proto" } else { "application/grpc" },
        )
        .header("te", "trailers");
    request = match headers % 7 {
        1 => request.header("grpc-encoding", "gzip"),
        2 => request.header("grpc-timeout", "1m"),
        4 => request.header("grpc-accept-encoding", "gzip, deflate"),
        5 => request.header("grpc-encoding", "identity"),
        _ => request,
    };
    let body = StreamBody::new(futures_util::stream::iter(body));
    let request = request.body(body).expect("a valid request");
    let response = match server.routes().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    assert_eq!(response.status(), http::StatusCode::OK, "gRPC answers HTTP 200");
    let mut seen = Seen::default();
    if let Some(status) = response.headers().get("grpc-status") {
        // Trailers-only: the status in the headers, no messages.
        seen.status = Some(check_status(status));
    }
    let mut body = response.into_body();
    let mut buf = BytesMut::new();
    let mut nonces = BTreeSet::new();
    for _ in 0..MAX_FRAMES {
        let Some(frame) = body.frame().await else { break };
        let frame = frame.unwrap_or_else(|e| panic!("the response body failed: {e}"));
        match frame.into_data() {
            Ok(data) => {
                assert!(seen.status.is_none(), "data after the status");
                buf.extend_from_slice(&data);
                while buf.len() >= 5 {
                    assert_eq!(buf[0], 0, "a compressed response nobody asked for");
                    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                    if buf.len() < 5 + len {
                        break;
                    }
                    buf.advance(5);
                    let message = buf.split_to(len);
                    check_message(method, &message, &mut nonces);
                    seen.messages += 1;
                }
            }
            Err(frame) => {
                let trailers = frame.into_trailers().expect("a frame is data or trailers");
                assert!(seen.status.is_none(), "a second status");
                let status = trailers.get("grpc-status").expect("trailers carry grpc-status");
                seen.status = Some(check_status(status));
                assert!(buf.is_empty(), "a message cut short before the trailers");
            }
        }
        if body.is_end_stream() {
            break;
        }
    }
    if body.is_end_stream() {
        assert!(seen.status.is_some(), "the response ended without a grpc-status");
    }
    if method == Method::Fetch && seen.status == Some(0) {
        assert_eq!(seen.messages, 1, "a successful fetch answers exactly one message");
    }
}

/// The `server_request` harness; see [`crate::server_request`].
pub(crate) fn server_request(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok((which, selector, t, headers)) = u.arbitrary::<(bool, u8, u8, u8)>() else { return };
    let t = ResourceType::ALL[usize::from(t) % ResourceType::ALL.len()];
    let (path, method) = grpc_path(selector, t);
    let Ok(body) = grpc_body(&mut u, method) else { return };
    let body = chunks(&mut u, body);
    let server = &servers().servers[usize::from(which)];
    runtime().block_on(async {
        let call = grpc_call(server, &path, method, headers, body);
        if tokio::time::timeout(DEADLINE, call).await.is_err() {
            panic!("{path}: no complete answer within {DEADLINE:?} after the request ended");
        }
    });
}

// ---- REST ----

const HTTP_METHODS: [&str; 8] =
    ["POST", "GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "FUZZ"];

/// A REST path: a discovery path, the CSDS path, or anything.
fn rest_path(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    Ok(match u.arbitrary::<u8>()? % 6 {
        0..=2 => {
            let t = ResourceType::ALL[u.choose_index(ResourceType::ALL.len())?];
            format!("/v3/discovery:{}", t.rest_path().unwrap_or("virtual_hosts"))
        }
        3 => "/v3/discovery:client_status".to_owned(),
        4 => format!("/v3/discovery:{}", u.arbitrary::<&str>()?),
        _ => format!("/{}", u.arbitrary::<&str>()?),
    })
}

/// A REST body: proto3 JSON of a request with fields left to chance, or the input's bytes.
fn rest_body_bytes(u: &mut Unstructured<'_>, path: &str) -> arbitrary::Result<Vec<u8>> {
    if u.arbitrary::<u8>()? % 3 == 0 {
        return Ok(u.arbitrary::<&[u8]>()?.to_vec());
    }
    let fields: Fields = u.arbitrary()?;
    let mut json = if path.ends_with("client_status") {
        let node = fields.node().map(|n| serde_json::json!({ "id": n.id }));
        serde_json::json!({ "node": node })
    } else {
        let t = path.strip_prefix("/v3/discovery:").and_then(ResourceType::from_rest_path);
        let version = match &fields.version {
            Some(v) => v.pick(&VERSIONS),
            None => t.map(|t| current_version(t.type_url())).unwrap_or_default(),
        };
        let mut json = serde_json::json!({
            "versionInfo": version,
            "resourceNames": Fields::names(&fields.names),
            "typeUrl": fields.type_url.url(),
            "responseNonce": fields.nonce.pick(&NONCES),
        });
        if let Some(node) = fields.node() {
            json["node"] = serde_json::json!({ "id": node.id });
        }
        json
    };
    match u.arbitrary::<u8>()? {
        // An unknown field, a wrong type, an element cut off.
        0..=15 => json["bogus"] = serde_json::json!(1),
        16..=31 => json["resourceNames"] = serde_json::json!(7),
        _ => {}
    }
    let mut text = json.to_string().into_bytes();
    if u.arbitrary::<u8>()? < 24 {
        text.truncate(u.int_in_range(0..=text.len())?);
    }
    Ok(text)
}

/// The statuses the REST API documents (`XdsServer::rest_router`): 2xx, 304, the 4xx of its
/// table, and 501 for what the cache does not serve. 500 and 503 (shutting down) are not expected.
fn documented(status: http::StatusCode) -> bool {
    matches!(status.as_u16(), 200 | 304 | 400 | 403 | 404 | 405 | 413 | 501)
}

async fn rest_call(server: &XdsServer, request: http::Request<axum::body::Body>) {
    let head = request.method() == http::Method::HEAD;
    let response = match server.rest_router().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let status = response.status();
    let body = response.into_body().collect().await.expect("a readable body").to_bytes();
    let text = String::from_utf8_lossy(&body);
    assert!(documented(status), "undocumented status {status}: {text}");
    match status.as_u16() {
        // HEAD answers carry no body, whatever the status.
        _ if head => assert!(body.is_empty(), "a body in answer to HEAD"),
        200 => {
            let json: serde_json::Value = serde_json::from_slice(&body).expect("a JSON body");
            assert!(json.is_object(), "a JSON object: {text}");
        }
        304 => assert!(body.is_empty(), "304 with a body"),
        _ => assert!(!body.is_empty(), "an error without a message ({status})"),
    }
}

/// The `rest_body` harness; see [`crate::rest_body`].
pub(crate) fn rest_body(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok((which, method)) = u.arbitrary::<(bool, u8)>() else { return };
    let method = HTTP_METHODS[usize::from(method) % HTTP_METHODS.len()];
    let Ok(path) = rest_path(&mut u) else { return };
    let Ok(body) = rest_body_bytes(&mut u, &path) else { return };
    let declared = match u.arbitrary::<u8>() {
        Ok(0..=31) => Some(body.len().to_string()),
        Ok(32..=39) => Some("999999999".to_owned()),
        Ok(40..=43) => Some("nope".to_owned()),
        _ => None,
    };
    let mut request = http::Request::builder().method(method).uri(&path);
    if let Some(len) = declared {
        request = request.header("content-length", len);
    }
    if u.arbitrary::<bool>().unwrap_or(false) {
        request = request.header("content-type", "application/json");
    }
    // Paths that are not valid URIs never reach a server.
    let Ok(request) = request.body(axum::body::Body::from(body)) else { return };
    let server = &servers().servers[usize::from(which)];
    runtime().block_on(async {
        if tokio::time::timeout(DEADLINE, rest_call(server, request)).await.is_err() {
            panic!("{method} {path}: no answer within {DEADLINE:?}");
        }
    });
}
