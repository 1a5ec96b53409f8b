//! CSDS: the client status discovery service (`envoy.service.status.v3.ClientStatusDiscoveryService`).
//!
//! Answers "what does each client hold, and did it accept it?" from the per-stream
//! [`StatusRegistry`](crate::StatusRegistry): one `ClientConfig` per node id (the streams of one
//! node merged), with one `GenericXdsConfig` per (type, resource name). The status keeps versions
//! and ACK state, not resource bodies, so `xds_config` is left empty.
//!
//! Served three ways: `FetchClientStatus` (unary) and `StreamClientStatus` (every request on the
//! stream is answered with the status at that moment) over gRPC, and
//! `POST /v3/discovery:client_status` as proto3 JSON on the [`rest_router`].
//!
//! [`rest_router`]: crate::XdsServer::rest_router

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::{Future, Ready};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::{Stream, StreamExt};
use tonic::server::{Grpc, StreamingService, UnaryService};
use tonic::{Status, Streaming};
use xds_proto::pb::envoy::admin::v3::{ClientResourceStatus, UpdateFailureState};
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::status::v3::client_config::GenericXdsConfig;
use xds_proto::pb::envoy::service::status::v3::{
    ClientConfig, ClientStatusRequest, ClientStatusResponse, ConfigStatus,
};
use xds_proto::pb::envoy::r#type::matcher::v3::string_matcher::MatchPattern;
use xds_proto::pb::envoy::r#type::matcher::v3::{NodeMatcher, StringMatcher};
use xds_proto::pb::google::protobuf::Timestamp;
use xds_proto::{CSDS_SERVICE, TypeUrl};

use crate::server::XdsServer;
use crate::status::{NackStatus, StreamStatus, TypeStatus};

const STREAM_METHOD: &str = "StreamClientStatus";
const FETCH_METHOD: &str = "FetchClientStatus";

/// Adds the two CSDS methods to the server's gRPC router.
pub(crate) fn add_routes(router: axum::Router, server: XdsServer) -> axum::Router {
    router
        .route_service(
            &format!("/{CSDS_SERVICE}/{STREAM_METHOD}"),
            CsdsMethod { server: server.clone(), streaming: true },
        )
        .route_service(
            &format!("/{CSDS_SERVICE}/{FETCH_METHOD}"),
            CsdsMethod { server, streaming: false },
        )
}

impl XdsServer {
    /// The client status (CSDS) of every connected node that `request.node_matchers` selects:
    /// what `FetchClientStatus` answers, for use from Rust (dashboards, tests, health checks).
    ///
    /// - One `ClientConfig` per node id, with the node of its newest stream. Several streams of
    ///   one node (e.g. per-type streams) are merged; where two report the same resource, the
    ///   newer stream wins. Streams that have not sent a request yet (no node) are left out.
    /// - One `GenericXdsConfig` per (type, name) the client subscribed to or holds, ordered by
    ///   type (make-before-break order) then name. `config_status`: `SYNCED` when the client
    ///   ACKed the latest response of that type, `STALE` while a response awaits its answer,
    ///   `ERROR` when the latest response was NACKed (with `error_state` carrying the client's
    ///   message and the rejected version), `NOT_SENT` before anything was sent. `client_status`:
    ///   `ACKED`, `NACKED` (a NACK rejects a whole response, so every resource of that type the
    ///   stream holds shows it), `REQUESTED` for a subscribed name not answered yet,
    ///   `DOES_NOT_EXIST` for a subscribed name found not to exist (or removed), `UNKNOWN` while the
    ///   response carrying it awaits its ACK. `version_info` is the type version the client
    ///   accepted (SotW) or the resource's own version (delta, rule D4).
    /// - `xds_config` is empty and `exclude_resource_contents` has nothing to exclude: the
    ///   status records versions, not resource bodies, so that it stays small for many clients.
    /// - Delta streams record NACKs but no ACK version: a delta resource delivered and not
    ///   NACKed reads `ACKED`/`SYNCED`.
    ///
    /// Node matchers are ORed, as the CSDS protocol says; an empty list selects every node.
    /// `node_id` takes `exact`, `prefix`, `suffix`, `contains` (with `ignore_case`) and
    /// `safe_regex` (a full match, RE2-like syntax, at most 1 KiB of pattern and 256 KiB compiled).
    /// At most 16 matchers (`INVALID_ARGUMENT` beyond). `node_metadatas` and custom matchers are
    /// refused with `UNIMPLEMENTED` rather than ignored, so a filter is never silently widened.
    ///
    /// The request's `node` field names the *requester* (a debugging tool, say), not the
    /// client to report on, so it does not filter: use `node_matchers` to select nodes.
    pub fn client_status(
        &self,
        request: &ClientStatusRequest,
    ) -> Result<ClientStatusResponse, Status> {
        let matchers = NodeMatchers::new(&request.node_matchers)?;
        Ok(build_response(self.shared.status.streams(), &matchers))
    }
}

/// Why a `ClientStatusRequest`'s node matchers cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MatcherError {
    /// A matcher this server does not implement: `Unimplemented`.
    #[error("node_matchers[{index}]: {what} is not supported")]
    Unsupported {
        /// The matcher's position in the request.
        index: usize,
        /// Which part of it.
        what: &'static str,
    },
    /// A malformed matcher: `InvalidArgument`.
    #[error("node_matchers[{index}].node_id: {message}")]
    Invalid {
        /// The matcher's position in the request.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

impl From<MatcherError> for Status {
    fn from(e: MatcherError) -> Self {
        match e {
            MatcherError::Unsupported { .. } => Status::unimplemented(e.to_string()),
            MatcherError::Invalid { .. } => Status::invalid_argument(e.to_string()),
        }
    }
}

/// A compiled `NodeMatcher.node_id`.
#[derive(Debug)]
enum IdMatcher {
    Any,
    Exact(String, bool),
    Prefix(String, bool),
    Suffix(String, bool),
    Contains(String, bool),
    Regex(regex::Regex),
}

impl IdMatcher {
    fn new(index: usize, m: Option<&StringMatcher>) -> Result<Self, MatcherError> {
        let Some(m) = m else { return Ok(IdMatcher::Any) };
        // Envoy compares case-insensitively in ASCII only; lower-case the pattern once.
        let fold = |s: &str| if m.ignore_case { s.to_ascii_lowercase() } else { s.to_owned() };
        Ok(match &m.match_pattern {
            None => {
                return Err(MatcherError::Invalid { index, message: "no match pattern".into() });
            }
            Some(MatchPattern::Exact(s)) => IdMatcher::Exact(fold(s), m.ignore_case),
            Some(MatchPattern::Prefix(s)) => IdMatcher::Prefix(fold(s), m.ignore_case),
            Some(MatchPattern::Suffix(s)) => IdMatcher::Suffix(fold(s), m.ignore_case),
            Some(MatchPattern::Contains(s)) => IdMatcher::Contains(fold(s), m.ignore_case),
            Some(MatchPattern::SafeRegex(r)) => {
                // Envoy's safe_regex must match the whole id.
                // A regex is compiled per request, so its cost is bounded like everything else a
                // peer sends: the pattern's length and its compiled size (Envoy's RE2 likewise
                // refuses programs past `re2.max_program_size`). Without the bound, one request of
                // a few hundred `(\w{100}){2}` matchers held a worker for minutes.
                if r.regex.len() > MAX_REGEX_BYTES {
                    return Err(MatcherError::Invalid {
                        index,
                        message: format!("safe_regex is longer than {MAX_REGEX_BYTES} bytes"),
                    });
                }
                let regex = regex::RegexBuilder::new(&format!("^(?:{})$", r.regex))
                    .size_limit(MAX_REGEX_COMPILED_BYTES)
                    .dfa_size_limit(MAX_REGEX_COMPILED_BYTES)
                    .build()
                    .map_err(|e| MatcherError::Invalid { index, message: e.to_string() })?;
                IdMatcher::Regex(regex)
            }
            Some(MatchPattern::Custom(_)) => {
                return Err(MatcherError::Unsupported { index, what: "a custom string matcher" });
            }
        })
    }

    fn matches(&self, id: &str) -> bool {
        let folded = |ignore_case: bool| {
            if ignore_case { id.to_ascii_lowercase() } else { id.to_owned() }
        };
        match self {
            IdMatcher::Any => true,
            IdMatcher::Exact(p, ic) => folded(*ic) == *p,
            IdMatcher::Prefix(p, ic) => folded(*ic).starts_with(p.as_str()),
            IdMatcher::Suffix(p, ic) => folded(*ic).ends_with(p.as_str()),
            IdMatcher::Contains(p, ic) => folded(*ic).contains(p.as_str()),
            IdMatcher::Regex(r) => r.is_match(id),
        }
    }
}

/// The most node matchers one request may carry (`InvalidArgument` beyond): a filter names a
/// few nodes or patterns, and each matcher is compiled and run against every stream.
pub(crate) const MAX_NODE_MATCHERS: usize = 16;
/// The longest `safe_regex` pattern accepted.
const MAX_REGEX_BYTES: usize = 1024;
/// The compiled size one `safe_regex` may reach (the regex crate's default is 10 MiB).
const MAX_REGEX_COMPILED_BYTES: usize = 256 * 1024;

/// The node matchers of one request, ORed; none selects every node.
#[derive(Debug)]
struct NodeMatchers(Vec<IdMatcher>);

impl NodeMatchers {
    fn new(matchers: &[NodeMatcher]) -> Result<Self, MatcherError> {
        if matchers.len() > MAX_NODE_MATCHERS {
            return Err(MatcherError::Invalid {
                index: MAX_NODE_MATCHERS,
                message: format!(
                    "at most {MAX_NODE_MATCHERS} node matchers, this request has {}",
                    matchers.len()
                ),
            });
        }
        matchers
            .iter()
            .enumerate()
            .map(|(index, m)| {
                if !m.node_metadatas.is_empty() {
                    return Err(MatcherError::Unsupported { index, what: "node_metadatas" });
                }
                IdMatcher::new(index, m.node_id.as_ref())
            })
            .collect::<Result<_, _>>()
            .map(NodeMatchers)
    }

    fn matches(&self, node: &Node) -> bool {
        self.0.is_empty() || self.0.iter().any(|m| m.matches(&node.id))
    }
}

/// Builds the response from a copy of the registry (streams in id order: older first).
fn build_response(streams: Vec<StreamStatus>, matchers: &NodeMatchers) -> ClientStatusResponse {
    type Configs = BTreeMap<(TypeUrl, String), GenericXdsConfig>;
    let mut nodes: BTreeMap<String, (Node, Configs)> = BTreeMap::new();
    for stream in &streams {
        let Some(node) = stream.node() else { continue };
        if !matchers.matches(node) {
            continue;
        }
        let (latest, configs) =
            nodes.entry(node.id.clone()).or_insert_with(|| (node.clone(), BTreeMap::new()));
        // The newest stream's node (and resource entries) win: it is what the client is now.
        *latest = node.clone();
        let delta = stream.variant == "delta";
        for (type_url, ts) in &stream.types {
            for config in type_configs(type_url, ts, delta) {
                configs.insert((TypeUrl::parse(type_url), config.name.clone()), config);
            }
        }
    }
    ClientStatusResponse {
        config: nodes
            .into_values()
            .map(|(node, configs)| ClientConfig {
                node: Some(node),
                generic_xds_configs: configs.into_values().collect(),
                ..Default::default()
            })
            .collect(),
    }
}

/// Where one type of one stream stands.
enum Progress<'a> {
    /// Nothing sent yet.
    NotSent,
    /// The latest response awaits its ACK or NACK.
    InFlight,
    /// The client ACKed the latest response.
    Synced,
    /// The client NACKed the latest response.
    Nacked(&'a NackStatus),
}

fn progress(ts: &TypeStatus, delta: bool) -> Progress<'_> {
    let Some(sent) = &ts.sent_version else { return Progress::NotSent };
    // A NACK names the nonce it rejects: only a NACK of the latest response is current.
    if let Some(nack) =
        ts.nack.as_ref().filter(|n| ts.sent_nonce.as_deref() == Some(n.nonce.as_str()))
    {
        return Progress::Nacked(nack);
    }
    if delta || ts.acked_version.as_ref() == Some(sent) {
        Progress::Synced
    } else {
        Progress::InFlight
    }
}

/// One entry per name the stream subscribed to or holds (the wildcard `*` is not a resource).
fn type_configs(type_url: &str, ts: &TypeStatus, delta: bool) -> Vec<GenericXdsConfig> {
    let progress = progress(ts, delta);
    // The type version the client runs with (SotW versions are per type, rule S16).
    let type_version = match &progress {
        Progress::NotSent => None,
        Progress::InFlight => ts.acked_version.as_deref(),
        Progress::Synced => ts.sent_version.as_deref(),
        Progress::Nacked(n) => Some(n.version.as_str()),
    };
    let error_state = match &progress {
        Progress::Nacked(n) => Some(UpdateFailureState {
            failed_configuration: None,
            last_update_attempt: Some(timestamp(n.at_ms)),
            details: n.error.clone(),
            version_info: n.rejected_version.clone(),
        }),
        _ => None,
    };
    let config_status = match &progress {
        Progress::NotSent => ConfigStatus::NotSent,
        Progress::InFlight => ConfigStatus::Stale,
        Progress::Synced => ConfigStatus::Synced,
        Progress::Nacked(_) => ConfigStatus::Error,
    };
    let mut names: Vec<&String> =
        ts.names.iter().chain(ts.resources.keys()).chain(ts.errors.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| n.as_str() != "*")
        .map(|name| {
            let (config_status, client_status, version) = match ts.resources.get(name) {
                // Subscribed, never sent (it may not exist yet, rule S13).
                None => (ConfigStatus::NotSent, ClientResourceStatus::Requested, None),
                Some(None) => (config_status, ClientResourceStatus::DoesNotExist, type_version),
                Some(Some(resource_version)) => {
                    let client_status = match &progress {
                        Progress::NotSent | Progress::InFlight => ClientResourceStatus::Unknown,
                        Progress::Synced => ClientResourceStatus::Acked,
                        Progress::Nacked(_) => ClientResourceStatus::Nacked,
                    };
                    let version =
                        if delta { Some(resource_version.as_str()) } else { type_version };
                    (config_status, client_status, version)
                }
            };
            let mut error_state =
                (config_status == ConfigStatus::Error).then(|| error_state.clone()).flatten();
            let mut client_status = client_status;
            // Rule C4: the server told the client why it does not send this resource.
            if let Some(error) = ts.errors.get(name) {
                client_status = ClientResourceStatus::ReceivedError;
                error_state.get_or_insert_with(|| UpdateFailureState {
                    details: format!("{}: {}", code_name(error.code), error.message),
                    version_info: ts.sent_version.as_deref().unwrap_or_default().to_owned(),
                    ..Default::default()
                });
            }
            GenericXdsConfig {
                type_url: type_url.to_owned(),
                name: name.clone(),
                version_info: version.unwrap_or_default().to_owned(),
                config_status: config_status as i32,
                client_status: client_status as i32,
                error_state,
                ..Default::default()
            }
        })
        .collect()
}

/// The name of a `google.rpc.Code` a per-resource error carries.
fn code_name(code: i32) -> std::borrow::Cow<'static, str> {
    use xds_core::code;
    match code {
        code::INVALID_ARGUMENT => "INVALID_ARGUMENT".into(),
        code::NOT_FOUND => "NOT_FOUND".into(),
        code::PERMISSION_DENIED => "PERMISSION_DENIED".into(),
        code::UNKNOWN => "UNKNOWN".into(),
        code::INTERNAL => "INTERNAL".into(),
        code::UNAVAILABLE => "UNAVAILABLE".into(),
        other => format!("code {other}").into(),
    }
}

fn timestamp(ms: u64) -> Timestamp {
    Timestamp { seconds: (ms / 1000) as i64, nanos: ((ms % 1000) * 1_000_000) as i32 }
}

/// One CSDS gRPC method.
#[derive(Clone)]
struct CsdsMethod {
    server: XdsServer,
    streaming: bool,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Infallible>> + Send>>;

impl tower::Service<http::Request<axum::body::Body>> for CsdsMethod {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<axum::body::Body>) -> Self::Future {
        let server = self.server.clone();
        let streaming = self.streaming;
        Box::pin(async move {
            let max = Some(server.shared.config.limits.max_request_bytes);
            let mut grpc = Grpc::new(tonic_prost::ProstCodec::default())
                .apply_max_message_size_config(max, None);
            Ok(if streaming {
                grpc.streaming(StreamClientStatus(server), request).await
            } else {
                grpc.unary(FetchClientStatus(server), request).await
            })
        })
    }
}

struct FetchClientStatus(XdsServer);

impl UnaryService<ClientStatusRequest> for FetchClientStatus {
    type Response = ClientStatusResponse;
    type Future = Ready<Result<tonic::Response<ClientStatusResponse>, Status>>;

    fn call(&mut self, request: tonic::Request<ClientStatusRequest>) -> Self::Future {
        std::future::ready(
            authorize(&self.0, &request)
                .and_then(|()| self.0.client_status(request.get_ref()))
                .map(tonic::Response::new),
        )
    }
}

/// The authorization point for gRPC CSDS: every node's status is not for every client.
fn authorize<T>(server: &XdsServer, request: &tonic::Request<T>) -> Result<(), Status> {
    let peer = crate::authz::Peer::of(request);
    server
        .shared
        .authorize(&peer, crate::authz::Entry::Csds, crate::authz::Access::ClientStatus)
        .map_err(|r| Status::permission_denied(r.0))
}

struct StreamClientStatus(XdsServer);

type StatusStream = Pin<Box<dyn Stream<Item = Result<ClientStatusResponse, Status>> + Send>>;

impl StreamingService<ClientStatusRequest> for StreamClientStatus {
    type Response = ClientStatusResponse;
    type ResponseStream = StatusStream;
    type Future = Ready<Result<tonic::Response<StatusStream>, Status>>;

    fn call(&mut self, request: tonic::Request<Streaming<ClientStatusRequest>>) -> Self::Future {
        if let Err(status) = authorize(&self.0, &request) {
            return std::future::ready(Err(status));
        }
        let server = self.0.clone();
        // Ends with the server, so an idle status stream never holds up graceful shutdown.
        let shutdown = server.shutting_down();
        // Each request is answered at once with the status at that moment; an error (a bad
        // matcher, a broken request stream) ends this stream only.
        let responses = request
            .into_inner()
            .map(move |request| request.and_then(|r| server.client_status(&r)))
            .take_until(shutdown);
        std::future::ready(Ok(tonic::Response::new(Box::pin(responses))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xds_proto::pb::envoy::r#type::matcher::v3::RegexMatcher;
    use xds_proto::{ResourceType, TypeUrl};

    fn node(id: &str) -> Node {
        Node { id: id.into(), ..Default::default() }
    }

    fn stream(id: u64, node_id: &str, types: Vec<(ResourceType, TypeStatus)>) -> StreamStatus {
        StreamStatus {
            stream: id,
            variant: "sotw",
            node_id: node_id.into(),
            node_cluster: String::new(),
            opened_ms: 0,
            types: types.into_iter().map(|(t, s)| (TypeUrl::from(t), s)).collect(),
            group: None,
            unserved_since_ms: None,
            unserved_types: Vec::new(),
            events: Vec::new(),
            node: Some(std::sync::Arc::new(node(node_id))),
        }
    }

    fn held(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        pairs.iter().map(|(n, v)| (n.to_string(), v.map(str::to_owned))).collect()
    }

    fn id_matcher(pattern: MatchPattern, ignore_case: bool) -> NodeMatcher {
        NodeMatcher {
            node_id: Some(StringMatcher { ignore_case, match_pattern: Some(pattern) }),
            node_metadatas: vec![],
        }
    }

    fn all() -> NodeMatchers {
        NodeMatchers::new(&[]).unwrap()
    }

    fn statuses(c: &ClientConfig) -> Vec<(String, i32, i32, String)> {
        c.generic_xds_configs
            .iter()
            .map(|g| (g.name.clone(), g.config_status, g.client_status, g.version_info.clone()))
            .collect()
    }

    #[test]
    fn acked_nacked_requested_and_missing_resources() {
        let acked = TypeStatus {
            sent_version: Some("v2".into()),
            sent_nonce: Some("1".into()),
            acked_version: Some("v2".into()),
            resources: held(&[("a", Some("ra")), ("gone", None)]),
            ..Default::default()
        };
        let nacked = TypeStatus {
            names: vec!["e1".into(), "later".into()],
            sent_version: Some("v9".into()),
            sent_nonce: Some("2".into()),
            acked_version: Some("v8".into()),
            nack: Some(Box::new(NackStatus {
                error_bytes: 0,
                version: "v8".into(),
                rejected_version: "v9".into(),
                nonce: "2".into(),
                error: "bad endpoint".into(),
                at_ms: 1_500,
            })),
            resources: held(&[("e1", Some("re1"))]),
            ..Default::default()
        };
        let s = stream(
            1,
            "n1",
            vec![(ResourceType::Cluster, acked), (ResourceType::ClusterLoadAssignment, nacked)],
        );
        let r = build_response(vec![s], &all());
        assert_eq!(r.config.len(), 1);
        let c = &r.config[0];
        assert_eq!(c.node.as_ref().unwrap().id, "n1");
        let (synced, error, not_sent) =
            (ConfigStatus::Synced as i32, ConfigStatus::Error as i32, ConfigStatus::NotSent as i32);
        assert_eq!(
            statuses(c),
            [
                ("a".into(), synced, ClientResourceStatus::Acked as i32, "v2".into()),
                ("gone".into(), synced, ClientResourceStatus::DoesNotExist as i32, "v2".into()),
                ("e1".into(), error, ClientResourceStatus::Nacked as i32, "v8".into()),
                ("later".into(), not_sent, ClientResourceStatus::Requested as i32, String::new()),
            ]
        );
        let err = c.generic_xds_configs[2].error_state.as_ref().unwrap();
        assert_eq!((err.details.as_str(), err.version_info.as_str()), ("bad endpoint", "v9"));
        assert_eq!(err.last_update_attempt, Some(Timestamp { seconds: 1, nanos: 500_000_000 }));
        assert!(c.generic_xds_configs[0].error_state.is_none());
        assert_eq!(c.generic_xds_configs[0].type_url, ResourceType::Cluster.type_url());
    }

    /// Rule C4: a name the client was sent an error for reads `RECEIVED_ERROR`, with the error
    /// in `error_state`; a collection's error (`*`) is not a resource and gets no entry.
    #[test]
    fn c04_a_resource_error_sent_shows_as_received_error() {
        use crate::status::ResourceErrorStatus;
        let error = |code, message: &str| ResourceErrorStatus { code, message: message.into() };
        let ts = TypeStatus {
            wildcard: true,
            names: vec!["*".into(), "gone".into()],
            sent_version: Some("v2".into()),
            sent_nonce: Some("1".into()),
            acked_version: Some("v2".into()),
            resources: held(&[("a", Some("ra")), ("gone", None)]),
            errors: [
                ("*".to_owned(), error(14, "inventory unreachable")),
                ("gone".to_owned(), error(5, "resource does not exist")),
                ("private".to_owned(), error(7, "not for n1")),
            ]
            .into(),
            ..Default::default()
        };
        let r = build_response(vec![stream(1, "n1", vec![(ResourceType::Cluster, ts)])], &all());
        let c = &r.config[0];
        let received = ClientResourceStatus::ReceivedError as i32;
        let got: Vec<(String, i32)> =
            c.generic_xds_configs.iter().map(|g| (g.name.clone(), g.client_status)).collect();
        assert_eq!(
            got,
            [
                ("a".into(), ClientResourceStatus::Acked as i32),
                ("gone".into(), received),
                ("private".into(), received)
            ]
        );
        let details =
            |i: usize| c.generic_xds_configs[i].error_state.as_ref().unwrap().details.clone();
        assert_eq!(details(1), "NOT_FOUND: resource does not exist");
        assert_eq!(details(2), "PERMISSION_DENIED: not for n1");
        assert!(c.generic_xds_configs[0].error_state.is_none());
    }

    #[test]
    fn a_newer_response_in_flight_after_a_nack_is_stale() {
        let ts = TypeStatus {
            sent_version: Some("v3".into()),
            sent_nonce: Some("5".into()),
            acked_version: Some("v1".into()),
            nack: Some(Box::new(NackStatus {
                error_bytes: 0,
                version: "v1".into(),
                rejected_version: "v2".into(),
                nonce: "4".into(),
                error: "x".into(),
                at_ms: 0,
            })),
            resources: held(&[("a", Some("ra"))]),
            ..Default::default()
        };
        let r = build_response(vec![stream(1, "n", vec![(ResourceType::Cluster, ts)])], &all());
        let g = &r.config[0].generic_xds_configs[0];
        assert_eq!(g.config_status, ConfigStatus::Stale as i32);
        assert_eq!(g.client_status, ClientResourceStatus::Unknown as i32);
        assert_eq!(g.version_info, "v1");
        assert!(g.error_state.is_none());
    }

    #[test]
    fn streams_of_one_node_merge_and_the_newest_wins() {
        let old = TypeStatus {
            sent_version: Some("v1".into()),
            sent_nonce: Some("1".into()),
            acked_version: Some("v1".into()),
            resources: held(&[("a", Some("r1")), ("b", Some("r1"))]),
            ..Default::default()
        };
        let new = TypeStatus {
            sent_version: Some("v2".into()),
            sent_nonce: Some("1".into()),
            acked_version: Some("v2".into()),
            resources: held(&[("a", Some("r2"))]),
            ..Default::default()
        };
        let mut anonymous = stream(3, "", vec![]);
        anonymous.node = None; // no request yet: not reported
        let r = build_response(
            vec![
                stream(1, "n", vec![(ResourceType::Cluster, old)]),
                stream(2, "n", vec![(ResourceType::Cluster, new)]),
                anonymous,
            ],
            &all(),
        );
        assert_eq!(r.config.len(), 1);
        let versions: Vec<_> = r.config[0]
            .generic_xds_configs
            .iter()
            .map(|g| (g.name.as_str(), g.version_info.as_str()))
            .collect();
        assert_eq!(versions, [("a", "v2"), ("b", "v1")]);
    }

    #[test]
    fn node_matchers_are_ored() {
        let streams = || {
            ["envoy-1", "envoy-2", "Gateway"]
                .iter()
                .enumerate()
                .map(|(i, id)| stream(i as u64, id, vec![]))
                .collect::<Vec<_>>()
        };
        let ids = |matchers: &[NodeMatcher]| -> Vec<String> {
            build_response(streams(), &NodeMatchers::new(matchers).unwrap())
                .config
                .iter()
                .map(|c| c.node.as_ref().unwrap().id.clone())
                .collect()
        };
        assert_eq!(ids(&[]), ["Gateway", "envoy-1", "envoy-2"]);
        assert_eq!(ids(&[id_matcher(MatchPattern::Exact("envoy-2".into()), false)]), ["envoy-2"]);
        assert_eq!(
            ids(&[
                id_matcher(MatchPattern::Prefix("ENVOY-1".into()), true),
                id_matcher(MatchPattern::Suffix("way".into()), false),
            ]),
            ["Gateway", "envoy-1"]
        );
        assert_eq!(ids(&[id_matcher(MatchPattern::Contains("voy".into()), false)]).len(), 2);
        let regex = |r: &str| {
            id_matcher(
                MatchPattern::SafeRegex(RegexMatcher { regex: r.into(), engine_type: None }),
                false,
            )
        };
        assert_eq!(ids(&[regex("envoy-[0-9]")]), ["envoy-1", "envoy-2"]);
        // Full match: a regex matching part of the id does not select it.
        assert!(ids(&[regex("envoy")]).is_empty());
        assert_eq!(ids(&[NodeMatcher::default()]).len(), 3);
    }

    #[test]
    fn unsupported_and_invalid_matchers_are_refused() {
        let metadata = NodeMatcher { node_id: None, node_metadatas: vec![Default::default()] };
        let e = NodeMatchers::new(&[NodeMatcher::default(), metadata]).unwrap_err();
        assert_eq!(e, MatcherError::Unsupported { index: 1, what: "node_metadatas" });
        assert_eq!(Status::from(e).code(), tonic::Code::Unimplemented);
        let bad = id_matcher(
            MatchPattern::SafeRegex(RegexMatcher { regex: "(".into(), engine_type: None }),
            false,
        );
        let e = NodeMatchers::new(&[bad]).unwrap_err();
        assert!(matches!(e, MatcherError::Invalid { index: 0, .. }), "{e:?}");
        assert_eq!(Status::from(e).code(), tonic::Code::InvalidArgument);
        let empty = NodeMatcher {
            node_id: Some(StringMatcher { ignore_case: false, match_pattern: None }),
            node_metadatas: vec![],
        };
        assert!(NodeMatchers::new(&[empty]).is_err());
    }

    #[test]
    fn matcher_count_and_regex_cost_are_bounded() {
        let regex = |r: &str| {
            id_matcher(
                MatchPattern::SafeRegex(RegexMatcher { regex: r.into(), engine_type: None }),
                false,
            )
        };
        // One more matcher than allowed is refused before anything is compiled.
        let many = vec![regex("node-.*"); MAX_NODE_MATCHERS + 1];
        let e = NodeMatchers::new(&many).unwrap_err();
        assert!(e.to_string().contains("at most 16 node matchers, this request has 17"), "{e}");
        assert!(NodeMatchers::new(&many[..MAX_NODE_MATCHERS]).is_ok());
        // A pattern whose compiled program is large (this one is several MiB under the regex
        // crate's default limit) is refused, as RE2's program size limit refuses it in Envoy.
        let e = NodeMatchers::new(&[regex(r"(\w{100}){2}")]).unwrap_err();
        assert!(e.to_string().contains("size limit"), "{e}");
        let long = "a".repeat(MAX_REGEX_BYTES + 1);
        let e = NodeMatchers::new(&[regex(&long)]).unwrap_err();
        assert!(e.to_string().contains("longer than 1024 bytes"), "{e}");
        // Everyday patterns still compile.
        let ok = NodeMatchers::new(&[regex(r"sidecar~10\.0\.\d+\.\d+~.*")]).unwrap();
        assert!(ok.matches(&node("sidecar~10.0.3.4~pod.ns~ns.svc.cluster.local")));
    }
}
