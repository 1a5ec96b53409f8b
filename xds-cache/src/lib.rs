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
//! - Your own: implement [`Cache`] (and [`Watch`]) over your inventory; views implement
//!   `xds_core::View`. [`Watchers`] keeps the streams' signals (registered by `watch`, released
//!   when the stream drops its watch) and [`TypeVersion`] gives the content-hash type version
//!   that lets a client reconnect to any replica without being resent what it holds (rule S16).
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
pub use version::TypeVersion;
pub use watchers::{Registration, Watchers};
