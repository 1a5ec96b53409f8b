//! What the LRS and HDS services share: who the stream is, the one node check, the stream's
//! end.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tonic::Status;
use xds_cache::Variant;
use xds_proto::TypeUrl;
use xds_proto::pb::envoy::config::core::v3::Node;

use crate::authz::{Access, Authorizer, Entry, Peer, Request};
use crate::callbacks::{Callbacks, StreamInfo};

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
pub(crate) fn stream_info<T>(request: &tonic::Request<T>, message: TypeUrl) -> StreamInfo {
    StreamInfo {
        id: next_id(),
        variant: Variant::Sotw,
        type_url: Some(message),
        remote_addr: request.remote_addr(),
        peer_certificates: request
            .peer_certs()
            .map(|certs| Arc::new(certs.iter().map(|c| c.as_ref().to_vec()).collect())),
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
    /// Checks a reporting stream's node ([`authorize`]); on success, the guard that tells the
    /// callbacks when the stream ends.
    pub(crate) fn admit(&self, info: StreamInfo, node: &Node) -> Result<Closed, Status> {
        authorize(&*self.callbacks, &*self.authorizer, &info, node)?;
        Ok(Closed { callbacks: self.callbacks.clone(), info })
    }
}

/// The node check of the reporting services: the server's authorization point (the policy
/// decides whether this peer may report as this node: [`Access::Report`]), then the same
/// callbacks as every xDS stream ([`Callbacks::on_stream_open`], [`Callbacks::on_node`]), so a
/// node refused configuration is refused reporting too.
pub(crate) fn authorize(
    callbacks: &dyn Callbacks,
    authorizer: &dyn Authorizer,
    info: &StreamInfo,
    node: &Node,
) -> Result<(), Status> {
    let peer = Peer { remote_addr: info.remote_addr, certificates: info.peer_certificates.clone() };
    let request = Request { peer: &peer, entry: Entry::Stream, access: Access::Report { node } };
    authorizer.authorize(&request).map_err(|r| Status::permission_denied(r.0))?;
    callbacks.on_stream_open(info).map_err(|r| Status::permission_denied(r.0))?;
    callbacks.on_node(info, node).map_err(|r| Status::permission_denied(r.0))
}

/// Calls `on_stream_closed` when a reporting stream that was authorized ends, however it ends
/// (the client left, an error, shutdown).
pub(crate) struct Closed {
    pub(crate) callbacks: Arc<dyn Callbacks>,
    pub(crate) info: StreamInfo,
}

impl Drop for Closed {
    fn drop(&mut self) {
        self.callbacks.on_stream_closed(&self.info);
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
