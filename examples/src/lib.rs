//! Runnable control planes built on the xds crates, and the pieces they share.
//!
//! - `xds-file-server`: serves Envoy resources from YAML/JSON files, reloading them on change.
//! - `linear-endpoints`: a programmatic control plane over a `LinearCache`.
//! - `custom-cache`: a `Cache` over an inventory of your own types.
//! - `xds-bench-server` and `xds-load`: a bench-mode control plane and a load generator
//!   ([`load`]); results in `docs/benchmarks.md`.

pub mod config;
pub mod load;
pub mod resources;
