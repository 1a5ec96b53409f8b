//! Hooks into the life of streams and requests.

use std::net::SocketAddr;
use std::sync::Arc;

use xds_core::ErrorDetail;
use xds_proto::TypeUrl;
use xds_proto::pb::envoy::config::core::v3::Node;

use xds_cache::Variant;
use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};

/// What the server knows about a stream. Every callback of a stream gets the same one: the node
/// and its group are filled in once the first request named them, and shared, not copied per
/// event.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StreamInfo {
    /// A number unique among the server's streams.
    pub id: u64,
    /// SotW, delta or fetch.
    pub variant: Variant,
    /// The type of a per-type stream; `None` on ADS.
    pub type_url: Option<TypeUrl>,
    /// The client's address, when the transport knows it.
    pub remote_addr: Option<SocketAddr>,
    /// The client's TLS certificate chain (DER), leaf first, when it presented one.
    pub peer_certificates: Option<Arc<Vec<Vec<u8>>>>,
    /// The node the stream's first request named (rule S2), from
    /// [`on_node`](Callbacks::on_node) on, on xDS and reporting (LRS, HDS) streams alike;
    /// `None` before it (in [`on_stream_open`](Callbacks::on_stream_open)).
    pub node: Option<Arc<Node>>,
    /// The group the cache serves the node from ([`Cache::group`](crate::cache::Cache::group):
    /// the snapshot cache's grouping), set with `node` and asked again at each NACK (a regroup
    /// may have moved the stream since), so [`on_nack`](Callbacks::on_nack) names the
    /// configuration the client rejected. `None` when the cache does not group nodes, and on
    /// reporting streams.
    pub group: Option<Arc<str>>,
}

impl StreamInfo {
    /// The node's id, or `""` before the first request (and for an anonymous client).
    pub fn node_id(&self) -> &str {
        self.node.as_deref().map_or("", |n| n.id.as_str())
    }
}

/// A response the client rejected (rules S5, D1), as [`Callbacks::on_nack`] sees it.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Nack<'a> {
    /// The response's type.
    pub type_url: &'a TypeUrl,
    /// The rejected response's version: its SotW `version_info`, or its delta
    /// `system_version_info`. For a TTL heartbeat (which carries no version of its own on
    /// delta), the version of the last full response.
    pub rejected_version: &'a str,
    /// The rejected response's nonce.
    pub nonce: &'a str,
    /// SotW: the version the client keeps, the last one it accepted (the NACK's own
    /// `version_info`; empty before any). Delta: empty (a delta client keeps a version per
    /// resource).
    pub kept_version: &'a str,
    /// The client's reason (`error_detail`).
    pub error: &'a ErrorDetail,
}

/// Why a request is refused: the client gets `PermissionDenied` (or `403` over REST) with this
/// message. What an [`Authorizer`](crate::Authorizer) returns; a stream callback may return one
/// too (see [`Callbacks`] for which to use).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// Observes streams and requests. Every method has a no-op default.
///
/// **To refuse, use an [`Authorizer`](crate::Authorizer)**, not a callback: the authorizer is
/// asked by every entry (streams, unary and REST fetch, CSDS, load and health reports) and for
/// every resource name, where [`on_stream_open`](Self::on_stream_open) and
/// [`on_node`](Self::on_node) see gRPC streams only and
/// [`on_fetch_request`](Self::on_fetch_request) cannot refuse at all. Their [`Refusal`] keeps
/// working, for what only a stream's life shows (a cap of your own per node, say); a policy of
/// who may read what written there leaves the other entries open.
///
/// Stream callbacks run on the stream's task, in the order things happened, with no lock of the
/// server held: a callback may call anything on the server, `status()` included. On a
/// multi-thread runtime the ones reporting (`on_ack`, `on_nack`, `on_response`) run inside
/// `tokio::task::block_in_place`, so one that blocks for a while holds up its own stream only,
/// not the others. Keep them quick all the same (count, log, record). Use a tower layer or
/// interceptor for per-RPC auth, rate limits and metrics of your own.
pub trait Callbacks: Send + Sync + 'static {
    /// A stream opened. Refusing ends it with `PermissionDenied` before any request is read.
    fn on_stream_open(&self, stream: &StreamInfo) -> Result<(), Refusal> {
        let _ = stream;
        Ok(())
    }

    /// The stream's first request named its node (rule S2). Refusing ends the stream with
    /// `PermissionDenied`. Authorization belongs in an [`Authorizer`](crate::Authorizer), which
    /// every entry (fetch, REST, CSDS) asks too; this hook sees streams only.
    fn on_node(&self, stream: &StreamInfo, node: &Node) -> Result<(), Refusal> {
        let _ = (stream, node);
        Ok(())
    }

    /// A stream closed (the client left, an error, or shutdown).
    fn on_stream_closed(&self, stream: &StreamInfo) {
        let _ = stream;
    }

    /// A request arrived for `type_url` (the type the server resolved: on a per-type stream the
    /// request's own `type_url` may be empty). Its `node` and `type_url` fields have been taken
    /// out; the node came to [`on_node`](Callbacks::on_node) once for the stream.
    ///
    /// Returning an error ends the stream with that status, before the request changes anything
    /// (go-control-plane's `OnStreamRequest` error): refuse a subscription you do not allow, or
    /// throttle with `RESOURCE_EXHAUSTED`.
    fn on_request(
        &self,
        stream: &StreamInfo,
        type_url: &TypeUrl,
        request: XdsRequest<'_>,
    ) -> Result<(), tonic::Status> {
        let _ = (stream, type_url, request);
        Ok(())
    }

    /// Whether [`on_request`](Callbacks::on_request) must see the names of a SotW request that
    /// repeats its stream's last list for the type (every ACK does). By default it does not:
    /// such a request comes as [`XdsRequest::SotwRepeated`] with its names left undecoded, since
    /// decoding 10,000 names from every proxy after every update only to find them unchanged
    /// was most of the server's work per update. The list was seen, and let through, when it
    /// last changed.
    fn wants_repeated_names(&self) -> bool {
        false
    }

    /// A response was sent.
    fn on_response(
        &self,
        stream: &StreamInfo,
        type_url: &TypeUrl,
        version: &str,
        nonce: &str,
        resources: usize,
    ) {
        let _ = (stream, type_url, version, nonce, resources);
    }

    /// The client accepted a response (rules S4, D1).
    fn on_ack(&self, stream: &StreamInfo, type_url: &TypeUrl, version: &str, nonce: &str) {
        let _ = (stream, type_url, version, nonce);
    }

    /// The client rejected a response (rules S5, D1). `stream.node` and `stream.group` say who
    /// and which configuration; `nack` which response, what the client keeps, and why.
    fn on_nack(&self, stream: &StreamInfo, nack: &Nack<'_>) {
        let _ = (stream, nack);
    }

    /// A one-shot fetch (REST or unary gRPC) arrived.
    fn on_fetch_request(&self, node: &Node, type_url: &TypeUrl, names: &[String]) {
        let _ = (node, type_url, names);
    }

    /// A one-shot fetch was answered (`None`: not modified).
    fn on_fetch_response(&self, node: &Node, type_url: &TypeUrl, version: Option<&str>) {
        let _ = (node, type_url, version);
    }
}

/// A stream's request as [`Callbacks::on_request`] sees it.
#[derive(Clone, Copy, Debug)]
pub enum XdsRequest<'a> {
    /// A state-of-the-world request.
    Sotw(&'a DiscoveryRequest),
    /// A state-of-the-world request whose names repeat the stream's last list for the type
    /// (every ACK does): its `resource_names` were not decoded and are empty here (see
    /// [`Callbacks::wants_repeated_names`]).
    SotwRepeated(&'a DiscoveryRequest),
    /// An incremental (delta) request.
    Delta(&'a DeltaDiscoveryRequest),
}

impl XdsRequest<'_> {
    /// The names the request asks for: `resource_names` (SotW, the whole desired set) or
    /// `resource_names_subscribe` (delta, the names added). Empty for
    /// [`SotwRepeated`](XdsRequest::SotwRepeated).
    pub fn names(&self) -> &[String] {
        match self {
            XdsRequest::Sotw(r) | XdsRequest::SotwRepeated(r) => &r.resource_names,
            XdsRequest::Delta(r) => &r.resource_names_subscribe,
        }
    }

    /// The nonce of the response the request answers (empty on a first or spontaneous request).
    pub fn response_nonce(&self) -> &str {
        match self {
            XdsRequest::Sotw(r) | XdsRequest::SotwRepeated(r) => &r.response_nonce,
            XdsRequest::Delta(r) => &r.response_nonce,
        }
    }

    /// Whether the request rejects the response it answers (a NACK, rules S5 and D1).
    pub fn is_nack(&self) -> bool {
        match self {
            XdsRequest::Sotw(r) | XdsRequest::SotwRepeated(r) => r.error_detail.is_some(),
            XdsRequest::Delta(r) => r.error_detail.is_some(),
        }
    }
}

/// Callbacks that do nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCallbacks;

impl Callbacks for NoCallbacks {}

/// Shared callbacks: a handler that also serves metrics or a test keeps an `Arc` of it and hands
/// the server a clone.
impl<T: Callbacks + ?Sized> Callbacks for Arc<T> {
    fn on_stream_open(&self, stream: &StreamInfo) -> Result<(), Refusal> {
        (**self).on_stream_open(stream)
    }

    fn on_node(&self, stream: &StreamInfo, node: &Node) -> Result<(), Refusal> {
        (**self).on_node(stream, node)
    }

    fn on_stream_closed(&self, stream: &StreamInfo) {
        (**self).on_stream_closed(stream)
    }

    fn on_request(
        &self,
        stream: &StreamInfo,
        type_url: &TypeUrl,
        request: XdsRequest<'_>,
    ) -> Result<(), tonic::Status> {
        (**self).on_request(stream, type_url, request)
    }

    fn wants_repeated_names(&self) -> bool {
        (**self).wants_repeated_names()
    }

    fn on_response(
        &self,
        stream: &StreamInfo,
        type_url: &TypeUrl,
        version: &str,
        nonce: &str,
        resources: usize,
    ) {
        (**self).on_response(stream, type_url, version, nonce, resources)
    }

    fn on_ack(&self, stream: &StreamInfo, type_url: &TypeUrl, version: &str, nonce: &str) {
        (**self).on_ack(stream, type_url, version, nonce)
    }

    fn on_nack(&self, stream: &StreamInfo, nack: &Nack<'_>) {
        (**self).on_nack(stream, nack)
    }

    fn on_fetch_request(&self, node: &Node, type_url: &TypeUrl, names: &[String]) {
        (**self).on_fetch_request(node, type_url, names)
    }

    fn on_fetch_response(&self, node: &Node, type_url: &TypeUrl, version: Option<&str>) {
        (**self).on_fetch_response(node, type_url, version)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts the fetches it sees and wants repeated names.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Callbacks for Counting {
        fn on_fetch_request(&self, _: &Node, _: &TypeUrl, _: &[String]) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }

        fn wants_repeated_names(&self) -> bool {
            true
        }
    }

    fn as_callbacks(callbacks: impl Callbacks) -> Box<dyn Callbacks> {
        Box::new(callbacks)
    }

    #[test]
    fn an_arc_of_callbacks_is_callbacks_and_every_call_reaches_the_shared_one() {
        let shared = Arc::new(Counting::default());
        let given = as_callbacks(shared.clone());
        let cluster = TypeUrl::from(xds_proto::ResourceType::Cluster);
        given.on_fetch_request(&Node::default(), &cluster, &[]);
        given.on_fetch_request(&Node::default(), &cluster, &[]);
        assert_eq!(shared.0.load(Ordering::Relaxed), 2);
        // Methods with a result or a default are forwarded too, not left at the trait's default.
        assert!(given.wants_repeated_names());
    }
}
