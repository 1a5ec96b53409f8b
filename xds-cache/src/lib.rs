//! Where an xDS control plane keeps its resources, and how streams learn that they changed.
//!
//! A [`Cache`] lends each stream a view of the resources of one type for its node and raises the
//! stream's [`Signal`] when that view may have changed (notify-then-pull). The cache never sends
//! to, waits for, or queues for a client: a slow stream simply reads the newest state later, and
//! the protocol core (`xds-core`) decides what to send from the view.
//!
//! - [`SnapshotCache`]: a whole configuration per node group, set at once.
//! - [`LinearCache`]: one type shared by every node, updated resource by resource.
//! - [`MuxCache`]: routes types to caches.
//! - Your own: implement [`Cache`] over your inventory and keep its resources in [`Tables`]
//!   (a [`ResourceTable`] per key you serve differently: a type, a tenant, a node group). They
//!   keep what the protocol needs (revisions, the content-hash type version of rule S16, what
//!   changed since a stream last looked, the streams' signals); your cache only says which key
//!   a stream reads. Lower-level pieces, for views of your own: [`Watchers`] (the streams'
//!   signals) and [`TypeVersion`].
//!
//! Resources are encoded once ([`xds_proto::EncodedResource`]) and shared by every stream and
//! group that serves them; versions are content hashes, the same in every process (rule S16).
//!
//! ```
//! use xds_cache::{Snapshot, SnapshotCache};
//! use xds_proto::pb::envoy::config::cluster::v3::Cluster;
//! use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
//!
//! let cache = SnapshotCache::by_node_id();
//! let mut snapshot = Snapshot::builder();
//! snapshot.add(&ClusterLoadAssignment { cluster_name: "web".into(), ..Default::default() })?;
//! snapshot.add(&Cluster { name: "web".into(), ..Default::default() })?;
//! cache.set_snapshot("node-1", snapshot.build()?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cache;
mod linear;
mod mux;
mod signal;
mod snapshot;
mod table;
mod tables;
mod unready;
mod version;
mod vhds;
mod watchers;

pub use cache::{Cache, CacheError, DynView, Variant, Watch, WatchRequest};
pub use linear::{LinearCache, LinearError};
pub use mux::MuxCache;
pub use signal::Signal;
pub use snapshot::{
    CHECKED_REFERENCES, ConsistencyError, GroupStatus, MissingReference, Snapshot, SnapshotBuilder,
    SnapshotCache,
};
/// What a cache of your own uses, in one `use xds_cache::prelude::*;` (from the server crate:
/// `use xds_server::cache::prelude::*;`).
pub mod prelude {
    pub use crate::{
        Cache, CacheError, DynView, Registration, ResourceTable, Signal, Tables, TypeVersion,
        Variant, Watch, WatchRequest, Watchers,
    };
    pub use xds_core::{ErrorDetail, ResourceSet, View};
    pub use xds_proto::pb::envoy::config::core::v3::Node;
    pub use xds_proto::{EncodeError, EncodedResource, ResourceType, TypeUrl, XdsResource};
}
pub use table::ResourceTable;
pub use tables::{MAX_GENERATED_ERRORS, Tables};
pub use version::TypeVersion;
pub use watchers::{Registration, Watchers};
