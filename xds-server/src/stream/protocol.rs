//! What differs between SotW and delta streams on the wire. The protocol itself (one sub-stream
//! type for both variants, and the whole stream above them) is `xds_core`'s.

use xds_cache::Variant;
use xds_core::{DeltaRequest, ErrorDetail, SotwRequest, SubStream};
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use xds_proto::pb::google::rpc::Status as RpcStatus;
use xds_proto::{EncodedResource, TypeUrl};

use crate::callbacks::XdsRequest;
use crate::status::TypeStatus;
use crate::wire::{DeltaWire, Framed, SotwWire};

/// One protocol variant as the server speaks it: its wire messages and the core variant.
pub(crate) trait Protocol: Send + 'static {
    type Request: prost::Message + Default + Send + 'static;
    type Wire: Framed;
    type Core: xds_core::Protocol;
    const VARIANT: Variant;
    const LABEL: &'static str;

    /// Takes the node and the type URL out of a request.
    fn header(request: &mut Self::Request) -> (Option<Node>, String);
    /// The names a request carries (subscribed names for delta), for limits.
    fn names(request: &Self::Request) -> &[String];
    /// The request as callbacks see it.
    fn for_callbacks(request: &Self::Request) -> XdsRequest<'_>;
    /// The request as the core sees it.
    fn to_core(request: Self::Request) -> <Self::Core as xds_core::Protocol>::Request;
    /// The wire form of a core response, with the bytes of resource bodies it carries.
    fn to_wire(
        response: <Self::Core as xds_core::Protocol>::Response<EncodedResource>,
        type_url: &TypeUrl,
        control_plane: Option<&str>,
    ) -> (Self::Wire, usize);
}

fn error_detail(status: Option<RpcStatus>) -> Option<ErrorDetail> {
    status.map(|s| ErrorDetail { code: s.code, message: s.message })
}

/// State of the world.
pub(crate) struct Sotw;

impl Protocol for Sotw {
    type Request = DiscoveryRequest;
    type Wire = SotwWire;
    type Core = xds_core::Sotw;
    const VARIANT: Variant = Variant::Sotw;
    const LABEL: &'static str = "sotw";

    fn header(r: &mut DiscoveryRequest) -> (Option<Node>, String) {
        (r.node.take(), std::mem::take(&mut r.type_url))
    }

    fn names(request: &DiscoveryRequest) -> &[String] {
        &request.resource_names
    }

    fn for_callbacks(request: &DiscoveryRequest) -> XdsRequest<'_> {
        XdsRequest::Sotw(request)
    }

    fn to_core(r: DiscoveryRequest) -> SotwRequest {
        SotwRequest {
            version_info: r.version_info,
            resource_names: r.resource_names,
            response_nonce: r.response_nonce,
            error_detail: error_detail(r.error_detail),
        }
    }

    fn to_wire(
        response: xds_core::SotwResponse<EncodedResource>,
        type_url: &TypeUrl,
        cp: Option<&str>,
    ) -> (SotwWire, usize) {
        let wire = SotwWire::new(type_url, response, cp);
        let bytes = if wire.heartbeat { 0 } else { wire.body_bytes() };
        (wire, bytes)
    }
}

/// Incremental.
pub(crate) struct Delta;

impl Protocol for Delta {
    type Request = DeltaDiscoveryRequest;
    type Wire = DeltaWire;
    type Core = xds_core::Delta;
    const VARIANT: Variant = Variant::Delta;
    const LABEL: &'static str = "delta";

    fn header(r: &mut DeltaDiscoveryRequest) -> (Option<Node>, String) {
        (r.node.take(), std::mem::take(&mut r.type_url))
    }

    fn names(request: &DeltaDiscoveryRequest) -> &[String] {
        &request.resource_names_subscribe
    }

    fn for_callbacks(request: &DeltaDiscoveryRequest) -> XdsRequest<'_> {
        XdsRequest::Delta(request)
    }

    fn to_core(r: DeltaDiscoveryRequest) -> DeltaRequest {
        DeltaRequest {
            subscribe: r.resource_names_subscribe,
            unsubscribe: r.resource_names_unsubscribe,
            initial_resource_versions: r.initial_resource_versions.into_iter().collect(),
            response_nonce: r.response_nonce,
            error_detail: error_detail(r.error_detail),
        }
    }

    fn to_wire(
        response: xds_core::DeltaResponse<EncodedResource>,
        type_url: &TypeUrl,
        cp: Option<&str>,
    ) -> (DeltaWire, usize) {
        let wire = DeltaWire::new(type_url, response, cp);
        let bytes = wire.body_bytes();
        (wire, bytes)
    }
}

/// What a status page shows of one sub-stream, SotW or delta alike.
pub(crate) fn fill_status<P: xds_core::Protocol>(
    sub: &SubStream<P, EncodedResource>,
    status: &mut TypeStatus,
) {
    status.wildcard = sub.subscription().is_wildcard();
    // Glob collections (rule C2) are subscribed names too, as far as a status page goes.
    let subscription = sub.subscription();
    status.names = subscription.names().iter().chain(subscription.globs()).cloned().collect();
    if let Some(acked) = sub.acked_version() {
        status.acked_version = Some(crate::status::bounded_owned(acked));
    }
    status.resources = sub.held().map(|(n, v)| (n.to_owned(), v.map(str::to_owned))).collect();
    status.held_exceptions = sub.held_exceptions();
}
