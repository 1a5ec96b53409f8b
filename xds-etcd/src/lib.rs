//! An etcd source for xds-rs: many control-plane replicas serve one configuration.
//!
//! Resources live under a key prefix, one key per resource (see [`layout`]). [`EtcdSource`]
//! mirrors the prefix: it reads it at one revision, then applies each later revision whole (a
//! transaction is never served half-applied), resumes its watch after a disconnect from the
//! revision after the last it applied, reads everything again when that revision was compacted,
//! and keeps the last valid state while etcd is unreachable or a revision is invalid.
//! [`publish()`] writes a whole configuration as one transaction.
//!
//! Replicas agree because versions are content hashes: the same keys give the same
//! [`EncodedResource`](xds_proto::EncodedResource) versions and the same per-type versions in
//! every process (rule S16), so a delta client that moves to another replica is resent nothing
//! it holds (a SotW client: nothing of the full-state types, its named subscriptions once; see
//! `docs/scaling.md`).
//!
//! The crate speaks etcd's v3 gRPC API itself ([`wire`]): the `etcd-client` crate needs `protoc`
//! to build, and this workspace builds with the Rust toolchain alone.

pub mod layout;
pub mod publish;
pub mod source;
pub mod wire;

pub use layout::{Key, ResourceKey, decode_value, group_key, normalize_prefix};
pub use publish::{Plan, PublishError, Published, plan, publish};
pub use source::{
    Change, DEFAULT_GROUP, EtcdSource, Lag, Mirror, Probe, SourceEvent, publish_to_cache,
};
pub use wire::EtcdClient;
