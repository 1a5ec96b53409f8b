//! A complete xDS management server: tonic services for ADS and every per-type service, SotW
//! and delta, unary fetch, REST-JSON, CSDS, load reporting ([`lrs`]), health discovery
//! ([`hds`]), per-node status, metrics and callbacks.
//!
//! The protocol rules live in `xds-core`; the resources in an `xds-cache` [`Cache`]. This crate
//! connects them to the wire: it decodes requests, checks them (node, type URL, limits), feeds
//! them to the sub-stream state machines, waits for cache signals, and writes responses straight
//! from the resources' cached bytes.
//!
//! [`Cache`]: xds_cache::Cache

mod body;
mod callbacks;
mod config;
mod csds;
mod fetch;
mod files;
pub mod hds;
mod identity;
pub mod lrs;
mod metrics;
mod reporter;
mod rest;
mod server;
mod status;
mod stream;
mod wire;

pub use callbacks::{Callbacks, NoCallbacks, Refusal, StreamInfo};
pub use config::{Limits, ServerConfig};
pub use files::{FileFormat, FileWriter};
pub use identity::{RequireNodeIdentity, check_node_identity};
pub use metrics::Metrics;
pub use server::{XdsServer, XdsServerBuilder};
pub use status::{NackStatus, StatusRegistry, StreamStatus, TypeStatus};
pub use wire::{DeltaWire, SotwWire};
