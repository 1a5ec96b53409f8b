//! What differs between SotW and delta streams on the wire. The protocol itself (one sub-stream
//! type for both variants, and the whole stream above them) is `xds_core`'s.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use xds_cache::Variant;
use xds_core::{
    Delta, DeltaRequest, ErrorDetail, NameSet, Sotw, SotwNames, SotwRequest, StreamError, SubStream,
};
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::google::rpc::Status as RpcStatus;
use xds_proto::{EncodedResource, TypeUrl};

use crate::callbacks::XdsRequest;
use crate::codec::decode::{DeltaIncoming, DeltaRead, Incoming, Malformed, SotwIncoming};
use crate::codec::{DeltaWire, Framed, RecentEncodings, SotwWire};
use crate::status::{Listed, TypeStatus, lock};

/// One protocol variant as the server speaks it: its wire messages. Implemented for the core's
/// own variants (`xds_core::Sotw`, `xds_core::Delta`), so that a variant has one name in every
/// crate.
pub(crate) trait WireProtocol: xds_core::Protocol + Send {
    type WireRequest: Incoming + Send + 'static;
    type Wire: Framed;
    const VARIANT: Variant;
    const LABEL: &'static str;

    /// The type URL of a request that only acknowledges a response and was read without being
    /// decoded (a delta ACK: [`DeltaAck`](crate::codec::decode::DeltaAck)); `None` for any
    /// other request, and for every SotW request (a SotW ACK repeats the client's names).
    fn ack_type(request: &Self::WireRequest) -> Option<&str>;
    /// What the core takes of such an ACK (a delta ACK's nonce).
    type Ack: Send;
    /// Such an ACK, taken out of the request; any other request is handed back.
    fn take_ack(request: Self::WireRequest) -> Result<Self::Ack, Self::WireRequest>;
    /// Takes an admitted ACK of `type_url` into `core` (`xds_core::Stream::take_ack`), without
    /// the request it stands for.
    fn take_ack_in(
        core: &mut CoreStream<Self>,
        type_url: &TypeUrl,
        ack: Self::Ack,
        now: Instant,
    ) -> Result<(), StreamError>;
    /// Takes the node and the type URL out of a request.
    fn header(request: &mut Self::WireRequest) -> (Option<Node>, String);
    /// How many names a request carries (subscribed names for delta), for limits.
    fn name_count(request: &Self::WireRequest) -> usize;
    /// Reads the request's names unless they are known: a SotW list that repeats the
    /// sub-stream's last one in `core` is left undecoded, unless the callbacks want repeated
    /// lists; a delta subscription that a live subscription holds is taken as that set
    /// ([`xds_core::NameSet`]), unless the callbacks see requests. `core` is locked for the
    /// check only, not while names are decoded.
    fn read_names(
        request: &mut Self::WireRequest,
        core: &Mutex<CoreStream<Self>>,
        type_url: &TypeUrl,
        wanted: Wanted,
    ) -> Result<(), Malformed>;
    /// Whether a stream's first request resumes: it says what the client already holds (the
    /// join gate lets such a stream in at once).
    fn resumes(request: &Self::WireRequest) -> bool;
    /// The request as callbacks see it (decoded in full, if it was not).
    fn for_callbacks(request: &mut Self::WireRequest) -> XdsRequest<'_>;
    /// The names the request asks for that policy must check: a SotW list that was decoded
    /// (a repeated one was checked when it was listed), a delta request's subscriptions.
    fn requested_names(request: &Self::WireRequest) -> impl Iterator<Item = &str> + Clone;
    /// The request as the core sees it, with the names policy refused (normal form -> reason).
    fn to_core(
        request: Self::WireRequest,
        denied: BTreeMap<String, String>,
    ) -> <Self as xds_core::Protocol>::Request;
    /// The wire form of a core response, with the bytes of resource bodies it carries.
    fn to_wire(
        response: <Self as xds_core::Protocol>::Response<EncodedResource>,
        type_url: &TypeUrl,
        control_plane: Option<&str>,
        recent: &RecentEncodings,
    ) -> (Self::Wire, usize);
}

/// Which names the callbacks want to see in [`Callbacks::on_request`](crate::Callbacks).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wanted {
    /// Every name of every request: the server has callbacks of its own.
    pub(crate) every: bool,
    /// The names of a SotW list that repeats the last one
    /// ([`Callbacks::wants_repeated_names`](crate::Callbacks::wants_repeated_names)).
    pub(crate) repeated: bool,
}

fn error_detail(status: Option<RpcStatus>) -> Option<ErrorDetail> {
    status.map(|s| ErrorDetail { code: s.code, message: s.message })
}

/// The core's stream for protocol `P`.
/// The node is shared: the stream's callbacks and status hold it too.
pub(crate) type CoreStream<P> = xds_core::Stream<Arc<Node>, TypeUrl, P, EncodedResource>;

/// State of the world.
impl WireProtocol for Sotw {
    type WireRequest = SotwIncoming;
    type Wire = Box<SotwWire>;
    const VARIANT: Variant = Variant::Sotw;
    const LABEL: &'static str = "sotw";

    fn ack_type(_: &SotwIncoming) -> Option<&str> {
        None
    }

    /// A SotW ACK repeats the client's names: every one is read as a request.
    type Ack = std::convert::Infallible;

    fn take_ack(request: SotwIncoming) -> Result<Self::Ack, SotwIncoming> {
        Err(request)
    }

    fn take_ack_in(
        _: &mut CoreStream<Self>,
        _: &TypeUrl,
        ack: Self::Ack,
        _: Instant,
    ) -> Result<(), StreamError> {
        match ack {}
    }

    fn header(r: &mut SotwIncoming) -> (Option<Node>, String) {
        (r.request.node.take(), std::mem::take(&mut r.request.type_url))
    }

    fn name_count(request: &SotwIncoming) -> usize {
        request.digest.count()
    }

    fn read_names(
        request: &mut SotwIncoming,
        core: &Mutex<CoreStream<Self>>,
        type_url: &TypeUrl,
        wanted: Wanted,
    ) -> Result<(), Malformed> {
        request.repeated = lock(core).repeats_names(type_url, &request.digest);
        // A new large list that a live subscription holds (a joining proxy's endpoints) is
        // taken as that set, unless the callbacks look at requests: they see every name.
        if !request.repeated && !wanted.every && request.digest.count() >= NameSet::MIN_LEN {
            request.set = NameSet::find(&request.names_digest()?);
        }
        if request.set.is_none() && (wanted.repeated || !request.repeated) {
            request.request.resource_names = request.names()?;
        }
        Ok(())
    }

    fn resumes(request: &SotwIncoming) -> bool {
        !request.request.version_info.is_empty()
    }

    fn for_callbacks(request: &mut SotwIncoming) -> XdsRequest<'_> {
        if request.repeated && request.request.resource_names.is_empty() {
            XdsRequest::SotwRepeated(&request.request)
        } else {
            XdsRequest::Sotw(&request.request)
        }
    }

    fn requested_names(request: &SotwIncoming) -> impl Iterator<Item = &str> + Clone {
        let listed = request.request.resource_names.iter().map(String::as_str);
        listed.chain(request.set.iter().flat_map(NameSet::iter))
    }

    fn to_core(r: SotwIncoming, denied: BTreeMap<String, String>) -> SotwRequest {
        let resource_names = match r.set {
            _ if r.repeated => SotwNames::Repeated,
            Some(set) => SotwNames::Found(set, r.digest),
            None => SotwNames::Digested(r.request.resource_names, r.digest),
        };
        SotwRequest {
            version_info: r.request.version_info.into(),
            resource_names,
            response_nonce: r.request.response_nonce.into(),
            error_detail: error_detail(r.request.error_detail),
            denied,
        }
    }

    fn to_wire(
        response: xds_core::SotwResponse<EncodedResource>,
        type_url: &TypeUrl,
        cp: Option<&str>,
        recent: &RecentEncodings,
    ) -> (Self::Wire, usize) {
        let wire = Box::new(SotwWire::encode(type_url, response, cp, Some(recent)));
        let bytes = if wire.heartbeat { 0 } else { wire.body_bytes() };
        (wire, bytes)
    }
}

/// Incremental.
impl WireProtocol for Delta {
    type WireRequest = DeltaIncoming;
    type Wire = Box<DeltaWire>;
    const VARIANT: Variant = Variant::Delta;
    const LABEL: &'static str = "delta";

    fn ack_type(request: &DeltaIncoming) -> Option<&str> {
        match request {
            DeltaIncoming::Ack(ack) => Some(ack.type_url.as_str()),
            DeltaIncoming::Read(_) => None,
        }
    }

    /// The nonce the ACK answers: the core takes nothing else of it.
    type Ack = xds_core::Text;

    fn take_ack(request: DeltaIncoming) -> Result<Self::Ack, DeltaIncoming> {
        match request {
            DeltaIncoming::Ack(ack) => Ok(ack.nonce),
            read => Err(read),
        }
    }

    fn take_ack_in(
        core: &mut CoreStream<Self>,
        type_url: &TypeUrl,
        nonce: Self::Ack,
        now: Instant,
    ) -> Result<(), StreamError> {
        core.take_ack(type_url, nonce, now)
    }

    fn header(request: &mut DeltaIncoming) -> (Option<Node>, String) {
        let r = &mut request.read().request;
        (r.node.take(), std::mem::take(&mut r.type_url))
    }

    fn name_count(request: &DeltaIncoming) -> usize {
        read(request).map_or(0, |read| read.subscribe.count())
    }

    fn read_names(
        request: &mut DeltaIncoming,
        _: &Mutex<CoreStream<Self>>,
        _: &TypeUrl,
        wanted: Wanted,
    ) -> Result<(), Malformed> {
        let request = request.read();
        // A large list that a live subscription holds (a joining proxy's endpoints) is taken
        // as that set, unless the callbacks look at requests: they see every name.
        if !wanted.every {
            request.set = NameSet::find(&request.subscribe);
            // The next proxy that sends this list is not walked (`SharedLists`).
            request.remember_list();
        }
        if request.set.is_none() {
            request.request.resource_names_subscribe = request.names()?;
        }
        Ok(())
    }

    fn resumes(request: &DeltaIncoming) -> bool {
        read(request).is_some_and(|read| !read.request.initial_resource_versions.is_empty())
    }

    fn for_callbacks(request: &mut DeltaIncoming) -> XdsRequest<'_> {
        XdsRequest::Delta(&request.read().request)
    }

    fn requested_names(request: &DeltaIncoming) -> impl Iterator<Item = &str> + Clone {
        read(request).into_iter().flat_map(|read| {
            let listed = read.request.resource_names_subscribe.iter().map(String::as_str);
            listed.chain(read.set.iter().flat_map(NameSet::iter))
        })
    }

    fn to_core(incoming: DeltaIncoming, denied: BTreeMap<String, String>) -> DeltaRequest {
        let (r, set) = match incoming {
            DeltaIncoming::Read(read) => {
                let DeltaRead { request, set, .. } = *read;
                (request, set)
            }
            DeltaIncoming::Ack(ack) => {
                return DeltaRequest { response_nonce: ack.nonce, denied, ..Default::default() };
            }
        };
        DeltaRequest {
            subscribe: r.resource_names_subscribe,
            subscribe_set: set,
            unsubscribe: r.resource_names_unsubscribe,
            initial_resource_versions: r.initial_resource_versions.into_iter().collect(),
            response_nonce: r.response_nonce.into(),
            error_detail: error_detail(r.error_detail),
            denied,
        }
    }

    fn to_wire(
        response: xds_core::DeltaResponse<EncodedResource>,
        type_url: &TypeUrl,
        cp: Option<&str>,
        recent: &RecentEncodings,
    ) -> (Self::Wire, usize) {
        let wire = Box::new(DeltaWire::encode(type_url, response, cp, Some(recent)));
        let bytes = wire.body_bytes();
        (wire, bytes)
    }
}

/// A delta request as decoded; `None` for an ACK that was not ([`DeltaIncoming::Ack`]), which
/// names nothing, declares nothing and carries no node.
fn read(request: &DeltaIncoming) -> Option<&DeltaRead> {
    match request {
        DeltaIncoming::Read(read) => Some(read),
        DeltaIncoming::Ack(_) => None,
    }
}

/// What a status page shows of one sub-stream, SotW or delta alike.
pub(crate) fn fill_status<P: xds_core::Protocol>(
    sub: &SubStream<P, EncodedResource>,
    status: &mut TypeStatus,
    limit: Option<usize>,
) -> Listed {
    let limit = limit.unwrap_or(usize::MAX);
    status.wildcard = sub.subscription().is_wildcard();
    // Glob collections (rule C2) are subscribed names too, as far as a status page goes.
    let subscription = sub.subscription();
    let names = subscription.names().iter().chain(subscription.globs());
    status.names = names.take(limit).cloned().collect();
    if let Some(acked) = sub.acked_version() {
        status.acked_version = Some(crate::status::bounded_owned(acked).into());
    }
    // Copied up to the limit, counted to the end: counting costs no allocation.
    let mut held = sub.held();
    status.resources =
        held.by_ref().take(limit).map(|(n, v)| (n.to_owned(), v.map(str::to_owned))).collect();
    let resources = status.resources.len() + held.count();
    status.held_exceptions = sub.held_exceptions();
    let standing = sub.resource_errors();
    let errors = standing.len();
    status.errors = standing
        .into_iter()
        .take(limit)
        .map(|e| {
            let message = crate::status::bounded_owned(&e.error.message);
            (e.name, crate::status::ResourceErrorStatus { code: e.error.code, message })
        })
        .collect();
    let names = subscription.names().len() + subscription.globs().len();
    Listed { names, resources, errors }
}
