//! What differs between SotW and delta streams; everything else is shared by the driver.

use std::collections::BTreeMap;

use xds_cache::{DynView, Variant};
use xds_core::{
    DeltaRequest, DeltaResource, DeltaResponse, DeltaSubStream, ErrorDetail, Handled, Nonces,
    SotwRequest, SotwResponse, SotwSubStream,
};
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use xds_proto::pb::google::rpc::Status as RpcStatus;
use xds_proto::{EncodedResource, TypeUrl};

use crate::callbacks::XdsRequest;
use crate::status::TypeStatus;
use crate::wire::{DeltaWire, Framed, SotwWire};

/// What the driver records about a response it sends.
pub(crate) struct Sent<W> {
    pub(crate) wire: W,
    pub(crate) version: String,
    pub(crate) nonce: String,
    pub(crate) resources: usize,
    pub(crate) bytes: usize,
    /// Names of the RouteConfigurations carried (rule D10: their virtual hosts are resent);
    /// empty for every other type, so responses of 10,000 clusters copy no names.
    pub(crate) names: Vec<String>,
}

/// One protocol variant: its messages and its sub-stream state machine.
pub(crate) trait Protocol: Send + 'static {
    type Request: prost::Message + Default + Send + 'static;
    type Wire: Framed;
    type Sub: Send + 'static;
    const VARIANT: Variant;
    const LABEL: &'static str;

    /// A sub-stream of `type_url`; `resource_errors`: the client declared that it reads
    /// `resource_errors` (rule C4).
    fn new_sub(type_url: &TypeUrl, resource_errors: bool) -> Self::Sub;
    /// Takes the node and the type URL out of a request.
    fn header(request: &mut Self::Request) -> (Option<Node>, String);
    /// The names a request carries (subscribed names for delta), for limits.
    fn names(request: &Self::Request) -> &[String];
    /// The request as callbacks see it.
    fn for_callbacks(request: &Self::Request) -> XdsRequest<'_>;
    fn handle(sub: &mut Self::Sub, request: Self::Request) -> Handled;
    fn poll(
        sub: &mut Self::Sub,
        view: &DynView<'_>,
        nonces: &mut Nonces,
        defer_removals: bool,
        type_url: &TypeUrl,
        control_plane: Option<&str>,
    ) -> Option<Sent<Self::Wire>>;
    /// A heartbeat renewing the resources with a TTL the client holds, if one can go now.
    fn heartbeat(
        sub: &mut Self::Sub,
        nonces: &mut Nonces,
        type_url: &TypeUrl,
        control_plane: Option<&str>,
    ) -> Option<Sent<Self::Wire>>;
    /// The shortest TTL among what the client holds.
    fn min_ttl(sub: &Self::Sub) -> Option<std::time::Duration>;
    fn awaiting_ack(sub: &Self::Sub) -> bool;
    fn has_deferred_removals(sub: &Self::Sub) -> bool;
    /// Rule D10: resend subscribed names under `prefix` (delta VHDS only).
    fn resend_prefixed(sub: &mut Self::Sub, prefix: &str);
    fn fill_status(sub: &Self::Sub, status: &mut TypeStatus);
}

fn error_detail(status: Option<RpcStatus>) -> Option<ErrorDetail> {
    status.map(|s| ErrorDetail { code: s.code, message: s.message })
}

/// State of the world.
pub(crate) struct Sotw;

impl Protocol for Sotw {
    type Request = DiscoveryRequest;
    type Wire = SotwWire;
    type Sub = SotwSubStream<EncodedResource>;
    const VARIANT: Variant = Variant::Sotw;
    const LABEL: &'static str = "sotw";

    fn new_sub(type_url: &TypeUrl, resource_errors: bool) -> Self::Sub {
        let mut sub = SotwSubStream::new(type_url.traits());
        sub.configure_names(Some(type_url.message_name()), resource_errors);
        sub
    }

    fn header(request: &mut DiscoveryRequest) -> (Option<Node>, String) {
        (request.node.take(), std::mem::take(&mut request.type_url))
    }

    fn names(request: &DiscoveryRequest) -> &[String] {
        &request.resource_names
    }

    fn for_callbacks(request: &DiscoveryRequest) -> XdsRequest<'_> {
        XdsRequest::Sotw(request)
    }

    fn handle(sub: &mut Self::Sub, r: DiscoveryRequest) -> Handled {
        sub.handle_request(SotwRequest {
            version_info: r.version_info,
            resource_names: r.resource_names,
            response_nonce: r.response_nonce,
            error_detail: error_detail(r.error_detail),
        })
    }

    fn poll(
        sub: &mut Self::Sub,
        view: &DynView<'_>,
        nonces: &mut Nonces,
        defer_removals: bool,
        type_url: &TypeUrl,
        control_plane: Option<&str>,
    ) -> Option<Sent<SotwWire>> {
        let response = if defer_removals {
            sub.poll_response_deferring_removals(view, nonces)
        } else {
            sub.poll_response(view, nonces)
        }?;
        Some(sotw_sent(response, type_url, control_plane))
    }

    fn heartbeat(
        sub: &mut Self::Sub,
        nonces: &mut Nonces,
        type_url: &TypeUrl,
        control_plane: Option<&str>,
    ) -> Option<Sent<SotwWire>> {
        Some(sotw_sent(sub.poll_heartbeat(nonces)?, type_url, control_plane))
    }

    fn min_ttl(sub: &Self::Sub) -> Option<std::time::Duration> {
        sub.min_ttl()
    }

    fn awaiting_ack(sub: &Self::Sub) -> bool {
        sub.awaiting_ack()
    }

    fn has_deferred_removals(sub: &Self::Sub) -> bool {
        sub.has_deferred_removals()
    }

    fn resend_prefixed(_: &mut Self::Sub, _: &str) {}

    fn fill_status(sub: &Self::Sub, status: &mut TypeStatus) {
        status.wildcard = sub.subscription().is_wildcard();
        status.names = sub.subscription().names().iter().cloned().collect();
        status.acked_version = sub.acked_version().map(str::to_owned);
        status.resources = held(sub.held());
    }
}

/// Incremental.
pub(crate) struct Delta;

impl Protocol for Delta {
    type Request = DeltaDiscoveryRequest;
    type Wire = DeltaWire;
    type Sub = DeltaSubStream<EncodedResource>;
    const VARIANT: Variant = Variant::Delta;
    const LABEL: &'static str = "delta";

    fn new_sub(type_url: &TypeUrl, resource_errors: bool) -> Self::Sub {
        let mut sub = DeltaSubStream::new(type_url.traits());
        sub.configure_names(Some(type_url.message_name()), resource_errors);
        sub
    }

    fn header(request: &mut DeltaDiscoveryRequest) -> (Option<Node>, String) {
        (request.node.take(), std::mem::take(&mut request.type_url))
    }

    fn names(request: &DeltaDiscoveryRequest) -> &[String] {
        &request.resource_names_subscribe
    }

    fn for_callbacks(request: &DeltaDiscoveryRequest) -> XdsRequest<'_> {
        XdsRequest::Delta(request)
    }

    fn handle(sub: &mut Self::Sub, r: DeltaDiscoveryRequest) -> Handled {
        sub.handle_request(DeltaRequest {
            subscribe: r.resource_names_subscribe,
            unsubscribe: r.resource_names_unsubscribe,
            initial_resource_versions: r.initial_resource_versions.into_iter().collect(),
            response_nonce: r.response_nonce,
            error_detail: error_detail(r.error_detail),
        })
    }

    fn poll(
        sub: &mut Self::Sub,
        view: &DynView<'_>,
        nonces: &mut Nonces,
        defer_removals: bool,
        type_url: &TypeUrl,
        control_plane: Option<&str>,
    ) -> Option<Sent<DeltaWire>> {
        let response = if defer_removals {
            sub.poll_response_deferring_removals(view, nonces)
        } else {
            sub.poll_response(view, nonces)
        }?;
        Some(delta_sent(response, type_url, control_plane))
    }

    fn heartbeat(
        sub: &mut Self::Sub,
        nonces: &mut Nonces,
        type_url: &TypeUrl,
        control_plane: Option<&str>,
    ) -> Option<Sent<DeltaWire>> {
        Some(delta_sent(sub.poll_heartbeat(nonces)?, type_url, control_plane))
    }

    fn min_ttl(sub: &Self::Sub) -> Option<std::time::Duration> {
        sub.min_ttl()
    }

    fn awaiting_ack(sub: &Self::Sub) -> bool {
        sub.awaiting_ack()
    }

    fn has_deferred_removals(sub: &Self::Sub) -> bool {
        sub.has_deferred_removals()
    }

    fn resend_prefixed(sub: &mut Self::Sub, prefix: &str) {
        sub.resend_where(|name| name.starts_with(prefix));
    }

    fn fill_status(sub: &Self::Sub, status: &mut TypeStatus) {
        status.wildcard = sub.subscription().is_wildcard();
        status.names = sub.subscription().names().iter().cloned().collect();
        status.resources = held(sub.held());
    }
}

fn sotw_sent(
    response: SotwResponse<EncodedResource>,
    type_url: &TypeUrl,
    cp: Option<&str>,
) -> Sent<SotwWire> {
    let (version, nonce) = (response.version_info.clone(), response.nonce.clone());
    let names = route_names(type_url, response.resources.iter().map(|r| r.name()));
    let wire = SotwWire::new(type_url, response, cp);
    let bytes = if wire.heartbeat { 0 } else { wire.body_bytes() };
    Sent { version, nonce, resources: wire.resources.len(), bytes, names, wire }
}

fn delta_sent(
    response: DeltaResponse<EncodedResource>,
    type_url: &TypeUrl,
    cp: Option<&str>,
) -> Sent<DeltaWire> {
    let (version, nonce) = (response.system_version_info.clone(), response.nonce.clone());
    let names = route_names(type_url, response.resources.iter().map(|e| e.name()));
    let resources = response.resources.len();
    let bytes = if response.heartbeat {
        0
    } else {
        response
            .resources
            .iter()
            .map(|e| match e {
                DeltaResource::Present { resource, .. } => resource.value().len(),
                DeltaResource::Absent { .. } => 0,
            })
            .sum()
    };
    let wire = DeltaWire::new(type_url, response, cp);
    Sent { version, nonce, resources, bytes, names, wire }
}

/// The names a response carries, if it is of RouteConfigurations (the only type rule D10 needs
/// them for).
fn route_names<'a>(type_url: &TypeUrl, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    if type_url.builtin() == Some(xds_proto::ResourceType::RouteConfiguration) {
        names.map(str::to_owned).collect()
    } else {
        Vec::new()
    }
}

fn held<'a>(
    it: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> BTreeMap<String, Option<String>> {
    it.map(|(n, v)| (n.to_owned(), v.map(str::to_owned))).collect()
}
