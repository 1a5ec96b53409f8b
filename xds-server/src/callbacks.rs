//! Hooks into the life of streams and requests.

use std::net::SocketAddr;
use std::sync::Arc;

use xds_core::ErrorDetail;
use xds_proto::TypeUrl;
use xds_proto::pb::envoy::config::core::v3::Node;

use xds_cache::Variant;

/// What the server knows about a stream.
#[derive(Clone, Debug)]
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
}

/// Why a callback refused a stream: the client gets `PermissionDenied` with this message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// Observes (and may refuse) streams and requests. Every method has a no-op default.
///
/// Callbacks run synchronously on the stream's task: keep them quick (count, log, record). Use
/// a tower layer or interceptor for per-RPC auth, rate limits and metrics of your own.
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

    /// A request arrived for `type_url`.
    fn on_request(&self, stream: &StreamInfo, type_url: &TypeUrl, names: &[String]) {
        let _ = (stream, type_url, names);
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

    /// The client rejected a response (rule S5): `error` is its reason.
    fn on_nack(
        &self,
        stream: &StreamInfo,
        type_url: &TypeUrl,
        version: &str,
        nonce: &str,
        error: &ErrorDetail,
    ) {
        let _ = (stream, type_url, version, nonce, error);
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

/// Callbacks that do nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCallbacks;

impl Callbacks for NoCallbacks {}
