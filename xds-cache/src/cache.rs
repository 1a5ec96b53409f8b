//! The traits a cache implements, and the errors it answers with.

use std::sync::Arc;

use xds_core::View;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{EncodedResource, TypeUrl};

use crate::signal::Signal;

/// The view a watch lends: the current resources of one type for one stream.
pub type DynView<'a> = dyn View<Resource = EncodedResource> + 'a;

/// The protocol variant a stream speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// State of the world: `StreamAggregatedResources`, `Stream*`.
    Sotw,
    /// Incremental: `DeltaAggregatedResources`, `Delta*`.
    Delta,
    /// One-shot: REST-JSON `POST /v3/discovery:*`, unary `Fetch*`.
    Fetch,
}

/// What a stream asks a cache to watch.
#[derive(Clone, Copy, Debug)]
pub struct WatchRequest<'a> {
    /// The client (from the stream's first request; empty for an anonymous client).
    pub node: &'a Node,
    /// The type of the sub-stream.
    pub type_url: &'a TypeUrl,
    /// The protocol variant of the stream.
    pub variant: Variant,
}

/// A source of resources that streams watch: the one trait a cache must implement.
///
/// Notify-then-pull: [`watch`](Cache::watch) registers a stream's [`Signal`]; the cache raises it
/// whenever what the stream sees may have changed, and never sends to, waits for or queues for a
/// stream. The stream then [`read`](Watch::read)s the newest view and lets the protocol core decide
/// what to send. A cache that does not serve a type or a variant says so with a [`CacheError`].
pub trait Cache: Send + Sync + 'static {
    /// Starts watching `request.type_url` for `request.node`. Dropping the returned [`Watch`] stops
    /// it.
    fn watch(
        &self,
        request: WatchRequest<'_>,
        signal: Arc<Signal>,
    ) -> Result<Box<dyn Watch>, CacheError>;

    /// The group `node` is served from, for a cache that serves nodes by group (the
    /// [`SnapshotCache`](crate::SnapshotCache)'s grouping function): the server hands it to
    /// callbacks with the node, so a NACK or a refusal can name the configuration it concerns.
    /// `None` (the default): the cache does not group nodes.
    fn group(&self, node: &Node) -> Option<String> {
        let _ = node;
        None
    }
}

/// A stream's registration with a cache.
pub trait Watch: Send + Sync {
    /// Lends the current view to `f`. Keep `f` short and synchronous: a cache may hold a read lock
    /// while it runs (writers wait, other readers do not).
    fn read(&self, f: &mut dyn FnMut(&DynView<'_>));

    /// Whether what [`read`](Self::read) lends may have changed since the last call of this
    /// (or ever, for the first), and clears that mark. The server asks it before each read, and
    /// skips the read of a type whose client is owed nothing but changes when the answer is
    /// `false`: most types of a stream woken by a change to one.
    ///
    /// The default, `true`, is always right. A cache that answers `false` must be sure: every
    /// change to the view (a resource, an error, a revision, a move to another group) is marked
    /// before any read can see it, and so before the stream's signal is raised. A stream that
    /// finds no mark skips the read, and must lose nothing by it: a change marked only once
    /// visible could be skipped by a round that reads another type's new state (a route that
    /// names a new cluster sent, the cluster skipped). A watch of one
    /// [`Watchers`](crate::Watchers) key answers
    /// [`Registration::take_change`](crate::Registration::take_change), with its changes marked
    /// by [`Watchers::mark`](crate::Watchers::mark) under the lock that publishes them.
    fn take_change(&self) -> bool {
        true
    }

    /// The stream's client subscribed to `names` (each authorized; the server calls this before
    /// it computes the response to the request, with no lock of the stream held). A cache that
    /// makes resources only when a client asks for them ([`Tables::generated`](crate::Tables::generated))
    /// makes them now, so that the response has them; every other cache keeps the default,
    /// which does nothing and never looks at `names`.
    ///
    /// The names are what a peer sent (bounded by the server's limits): look them up, never
    /// keep per-name state for names you do not know.
    fn subscribed(&self, names: &mut dyn Iterator<Item = &str>) {
        let _ = names;
    }
}

impl<C: Cache + ?Sized> Cache for Arc<C> {
    fn watch(
        &self,
        request: WatchRequest<'_>,
        signal: Arc<Signal>,
    ) -> Result<Box<dyn Watch>, CacheError> {
        (**self).watch(request, signal)
    }

    fn group(&self, node: &Node) -> Option<String> {
        (**self).group(node)
    }
}

/// Why a cache cannot serve a watch. The server maps each to a gRPC status (or HTTP code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// The cache serves no resources of this type (rule S3): `InvalidArgument`.
    #[error("unknown resource type {}", xds_core::echo(type_url))]
    UnknownType {
        /// The requested type URL.
        type_url: String,
    },
    /// The type is served, but not over this variant (e.g. VHDS over SotW): `Unimplemented`.
    #[error("{} is not served over {variant:?}", xds_core::echo(type_url))]
    UnsupportedVariant {
        /// The requested type URL.
        type_url: String,
        /// The variant asked for.
        variant: Variant,
    },
    /// The cache refuses this node: `PermissionDenied`.
    #[error("node refused: {reason}")]
    Refused {
        /// Why.
        reason: String,
    },
}

/// The check every built-in cache makes: delta-only types (VHDS, LEDS) are not served over SotW
/// or fetch.
pub(crate) fn check_variant(type_url: &TypeUrl, variant: Variant) -> Result<(), CacheError> {
    if type_url.is_delta_only() && variant != Variant::Delta {
        return Err(CacheError::UnsupportedVariant { type_url: type_url.to_string(), variant });
    }
    Ok(())
}
