//! One-shot fetches (REST-JSON and the unary `Fetch*` RPCs), with long poll (rule R2).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::time::Instant;
use xds_cache::{CacheError, Signal, Variant, WatchRequest};
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{EncodedResource, TypeUrl};

use crate::authz::{Access, Entry, Peer};
use crate::server::{Shared, cache_status};

/// Why a fetch was not answered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    /// The authorization point refused it.
    #[error(transparent)]
    Refused(crate::Refusal),
    /// The cache refused it.
    #[error(transparent)]
    Cache(CacheError),
    /// The request is malformed (its node is over a limit, say).
    #[error("{0}")]
    Invalid(String),
    /// As many streams and fetches as `Limits::max_streams` allows are open.
    #[error("too many streams: the server serves at most {max} streams and fetches at once")]
    TooMany {
        /// The limit.
        max: usize,
    },
}

impl From<FetchError> for tonic::Status {
    fn from(e: FetchError) -> Self {
        match e {
            FetchError::Refused(r) => tonic::Status::permission_denied(r.0),
            FetchError::Cache(e) => cache_status(&e),
            FetchError::Invalid(m) => tonic::Status::invalid_argument(m),
            FetchError::TooMany { .. } => tonic::Status::resource_exhausted(e.to_string()),
        }
    }
}

/// The answer to a fetch.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// The current version and the requested resources (all of them for a wildcard fetch).
    Current { version: xds_core::Text, resources: Vec<EncodedResource> },
    /// The requested version is still current after the long-poll timeout.
    NotModified,
}

/// Answers a fetch for `names` of `type_url`. When `version` is the current version, waits for a
/// change until the fetch timeout (rule R2): a poll at an unchanged version never gets the same
/// resources again.
pub(crate) async fn fetch(
    shared: &Shared,
    peer: &Peer,
    entry: Entry,
    node: &Node,
    type_url: &TypeUrl,
    names: &[String],
    version: &str,
) -> Result<Fetched, FetchError> {
    shared.config.limits.check_node(node).map_err(FetchError::Invalid)?;
    let _admitted = Admission::new(shared)?;
    shared
        .authorize(peer, entry, Access::Resources { node, type_url })
        .map_err(FetchError::Refused)?;
    shared.callbacks.on_fetch_request(node, type_url, names);
    let signal = Arc::new(Signal::new());
    let watch = shared
        .cache
        .watch(WatchRequest { node, type_url, variant: Variant::Fetch }, signal.clone())
        .map_err(FetchError::Cache)?;
    let deadline = Instant::now() + shared.config.fetch_timeout;
    let wildcard = names.is_empty() && type_url.is_wildcard_capable();
    // Rule C1: `xdstp://` names are looked up by their normal form; a malformed one matches
    // nothing, nor does one the authorizer refuses.
    let denied = shared.denied_names(peer, entry, node, type_url, names.iter().map(String::as_str));
    let mut wanted: Vec<String> = names
        .iter()
        .filter_map(|n| xds_proto::xdstp::normalize(n).ok().map(|n| n.into_owned()))
        .filter(|n| !denied.contains_key(n))
        .collect();
    wanted.sort();
    wanted.dedup();
    // A cache that makes resources when asked makes these now.
    watch.subscribed(&mut wanted.iter().map(String::as_str));
    loop {
        let mut current = None;
        watch.read(&mut |view| {
            if !view.is_ready() {
                return;
            }
            let v = view.version();
            if v == version {
                return;
            }
            let mut resources = Vec::new();
            if wildcard {
                view.for_each(&mut |r| resources.push(r.clone()));
            } else {
                resources.extend(wanted.iter().filter_map(|n| view.get(n)));
            }
            current = Some((v, resources));
        });
        if let Some((version, resources)) = current {
            shared.callbacks.on_fetch_response(node, type_url, Some(&version));
            return Ok(Fetched::Current { version, resources });
        }
        tokio::select! {
            _ = signal.raised() => {}
            _ = tokio::time::sleep_until(deadline) => break,
            _ = shared.shutdown.cancelled() => break,
        }
    }
    shared.callbacks.on_fetch_response(node, type_url, None);
    Ok(Fetched::NotModified)
}

/// The checks of a fetch's request before anything else (rules S2, S3), made by the core's
/// [`StreamGuard`](xds_core::StreamGuard) as for a per-type stream's first request, so that a
/// fetch and a stream decide alike: a node is required unless anonymous clients are allowed (then
/// a missing one is the default node), the request's `type_url` is empty or the one served, and it
/// names at most `max_names_per_request` resources.
pub(crate) fn admit(
    shared: &Shared,
    type_url: &TypeUrl,
    request_type: &str,
    node: Option<Node>,
    names: usize,
) -> Result<Node, xds_core::StreamError> {
    let mut guard =
        xds_core::StreamGuard::per_type(type_url.as_str(), shared.config.allow_anonymous);
    guard.check(node, request_type)?;
    let max = shared.config.limits.max_names_per_request;
    if names > max {
        return Err(xds_core::StreamError::TooManyNames { max, got: names });
    }
    Ok(guard.into_node().unwrap_or_default())
}

/// A fetch counted against `Limits::max_streams` while it runs: a long poll held for the fetch
/// timeout costs a task and a connection as a stream does, so one bound covers both and a flood
/// of long polls cannot outgrow it.
struct Admission<'a>(&'a Shared);

impl<'a> Admission<'a> {
    fn new(shared: &'a Shared) -> Result<Self, FetchError> {
        let admitted = Admission(shared);
        let max = shared.config.limits.max_streams;
        if shared.open.fetch_add(1, Ordering::SeqCst) + 1 > max {
            shared.metrics.refused("max_streams");
            return Err(FetchError::TooMany { max });
        }
        Ok(admitted)
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}
