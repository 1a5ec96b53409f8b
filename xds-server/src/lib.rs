//! A complete xDS management server: tonic services for ADS and every per-type service, SotW
//! and delta, unary fetch, REST-JSON, CSDS, load reporting ([`lrs`]), health discovery
//! ([`hds`]), per-node status, metrics and callbacks.
//!
//! # Start here
//!
//! This is the one crate a control plane depends on (with `tokio`): it re-exports the crates it
//! is built from ([`proto`], [`cache`], [`protocol`]) and [`tonic`], and [`prelude`] brings in
//! what most control planes use.
//!
//! ```toml
//! [dependencies]
//! xds-server = "0.1"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread", "signal"] }
//! ```
//!
//! A complete control plane: node `envoy-1` gets a listener on port 10000 routing to cluster
//! `backend`, whose endpoints come over EDS; everything goes over ADS, and changing a snapshot
//! reaches every connected client.
//!
//! ```no_run
//! use xds_server::prelude::*;
//! use xds_server::proto::builders::{eds_cluster, endpoints, http_listener, route_to_cluster};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Resources live in a cache; this one keeps a whole snapshot per node id.
//!     let cache = SnapshotCache::by_node_id();
//!     let mut snapshot = Snapshot::builder();
//!     snapshot.add(&eds_cluster("backend"))?;
//!     snapshot.add(&endpoints("backend", &[("10.0.0.1", 8080), ("10.0.0.2", 8080)]))?;
//!     snapshot.add(&route_to_cluster("local_route", "*", "backend"))?;
//!     snapshot.add(&http_listener("http", "0.0.0.0", 10000, "local_route"))?;
//!     // `build` refuses a snapshot whose references dangle (rule O3).
//!     cache.set_snapshot("envoy-1", snapshot.build()?);
//!
//!     let server = XdsServer::builder(cache.clone())
//!         .control_plane_id("cp-1")
//!         .build();
//!     let stopping = server.clone();
//!     xds_server::tonic::transport::Server::builder()
//!         .add_routes(server.routes())
//!         .serve_with_shutdown("127.0.0.1:18000".parse()?, async move {
//!             let _ = tokio::signal::ctrl_c().await;
//!             stopping.drain().await; // streams end with UNAVAILABLE; clients go elsewhere
//!         })
//!         .await?;
//!     Ok(())
//! }
//! ```
//!
//! Routing by path to several clusters is a [`RouteTable`](proto::builders::RouteTable): virtual
//! hosts by domain, routes by prefix or exact path (and exact header values) to one cluster or
//! weighted clusters, each with an optional timeout, without writing the generated oneofs.
//!
//! ```
//! use xds_server::prelude::*;
//! use xds_server::proto::builders::{RouteRule, RouteTable, To, eds_cluster, endpoints};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let routes = RouteTable::new("local_route")
//!     .virtual_host("api", ["api.example.com"], |vh| {
//!         vh.prefix("/v1/", "api-v1")
//!             .weighted_prefix("/v2/", [("api-v2", 90), ("api-v2-canary", 10)])
//!             .route(
//!                 RouteRule::prefix("/", To::cluster("api-v1"))
//!                     .timeout(std::time::Duration::from_secs(5)),
//!             )
//!     })
//!     .build();
//! let mut snapshot = Snapshot::builder();
//! snapshot.add(&routes)?;
//! for cluster in ["api-v1", "api-v2", "api-v2-canary"] {
//!     snapshot.add(&eds_cluster(cluster))?;
//!     snapshot.add(&endpoints(cluster, &[("10.0.0.1", 8080)]))?;
//! }
//! // Every cluster the table names is in the snapshot, so the checked build passes.
//! let snapshot = snapshot.build()?;
//! assert_eq!(snapshot.len(), 7);
//! # Ok(()) }
//! ```
//!
//! Where to go next:
//! - Other caches: [`cache::LinearCache`] (one type, resource by resource, e.g. endpoints),
//!   [`cache::MuxCache`] (a cache per type), or your own [`cache::Cache`] over your inventory:
//!   keep its resources in [`cache::Tables`] and it is a few lines (`cache::prelude` has what
//!   a cache author uses).
//! - Hooks: [`Authorizer`] (the one way to refuse: who may read what, on every entry; ready
//!   ones in [`authz`]), [`Callbacks`] (observe streams and requests), [`ServerConfig`] and
//!   [`Limits`].
//! - Other transports: [`XdsServer::rest_router`] (REST-JSON), [`XdsServer::service_routes`]
//!   (one service, to layer it), [`FileWriter`] (Envoy filesystem subscriptions).
//! - Observing: [`XdsServer::status`] (what each node holds, ACKed, NACKed), CSDS,
//!   [`XdsServer::metrics`], and all of them over HTTP for an admin listener:
//!   [`XdsServer::admin_router`] (`/healthz`, `/ready`, `/metrics`, `/status`, CSDS), with
//!   hooks for the application's readiness, metrics and status in [`XdsServer::admin`].
//! - Logs: the server writes them through the `tracing` facade and never installs a subscriber
//!   itself, so nothing is printed until your program installs one (e.g. `tracing-subscriber`'s
//!   `fmt().init()`). At `info`: every NACK (node, group, type, rejected version, the client's
//!   text), every refused request, a stream ended for want of configuration; at `debug`: streams
//!   opening and closing; at `warn`/`error`: accept failures and file writes that failed.
//!
//! # What this crate does
//!
//! The protocol rules live in `xds-core`; the resources in an `xds-cache` [`Cache`]. This crate
//! connects them to the wire: it decodes requests, checks them (node, type URL, limits), feeds
//! them to the sub-stream state machines, waits for cache signals, and writes responses straight
//! from the resources' cached bytes.
//!
//! [`Cache`]: xds_cache::Cache

pub mod admin;
pub mod authz;
mod callbacks;
mod codec;
mod config;
pub mod console;
pub mod hds;
pub mod lrs;
mod metrics;
mod reporter;
mod server;
mod services;
mod status;
mod stream;
pub mod transport;

pub use admin::Admin;
pub use authz::{AllowAll, AllowList, Authorizer, NodeIdentity, Peer, UnauthenticatedSecrets};
pub use callbacks::{Callbacks, Nack, NoCallbacks, Refusal, StreamInfo, XdsRequest};
pub use codec::{DeltaWire, EncodedSet, SotwWire};
pub use config::{Limits, ServerConfig};
pub use metrics::Metrics;
pub use server::{Service, XdsServer, XdsServerBuilder};
pub use services::files::{FileFormat, FileWriter};
pub use status::{
    MAX_EVENT_TEXT, MAX_NACK_TEXT, NackStatus, ResourceErrorStatus, StatusRegistry, StreamEvent,
    StreamEventKind, StreamStatus, TypeStatus, TypeStatusIter, TypeStatuses,
};

/// The resource types, builders, encode-once resources and JSON/YAML (the `xds-proto` crate).
pub use xds_proto as proto;

/// The caches and the `Cache` trait (the `xds-cache` crate).
pub use xds_cache as cache;

/// The sans-IO protocol state machines and the `View` trait (the `xds-core` crate).
pub use xds_core as protocol;

/// The gRPC stack the server is built on, re-exported so that its version always matches.
pub use tonic;

/// The HTTP router of [`XdsServer::rest_router`] and [`XdsServer::service_routes`].
pub use axum;

/// The middleware crate of tonic and axum: its layers (concurrency limits, timeouts) wrap the
/// server's services, and a control plane reaches it here rather than adding a dependency whose
/// version must match.
pub use tower;

/// What most control planes use, in one `use xds_server::prelude::*;`.
pub mod prelude {
    pub use crate::authz::{self, Access};
    pub use crate::{
        AllowList, Authorizer, Callbacks, Limits, NodeIdentity, Refusal, ServerConfig, StreamInfo,
        XdsServer,
    };
    pub use xds_cache::{
        Cache, CacheError, DynView, LinearCache, MuxCache, Registration, ResourceTable, Signal,
        Snapshot, SnapshotCache, Tables, TypeVersion, Watch, WatchRequest, Watchers,
    };
    pub use xds_core::ErrorDetail;
    pub use xds_core::{ResourceSet, View};
    pub use xds_proto::pb::envoy::config::core::v3::Node;
    pub use xds_proto::{EncodeError, EncodedResource, ResourceType, TypeUrl, XdsResource};
}

/// The README's example, compiled as a doctest so that the first code a user copies keeps
/// building with `xds-server` alone.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
