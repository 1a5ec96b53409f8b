//! The pieces of `xds-load`, the load generator: simulated xDS clients (SotW or delta ADS, one
//! HTTP/2 connection each), the measurement of connection-storm and update-convergence times, and
//! the report.
//!
//! - [`proto`]: reads responses in place (only the fields needed, no message decoding).
//! - [`codec`]: the gRPC codec (pre-encoded requests, raw responses).
//! - [`client`]: one client's protocol state: subscriptions, ACKs, what it holds.
//! - [`track`]: what clients report and the coordinator measures (lock-free slots).
//! - [`bench`](mod@bench): the run: storm, updates, report.
//! - [`trigger`]: the HTTP trigger of an update; [`sys`]: `/proc` samples and the open-file limit.

pub mod bench;
pub mod client;
pub mod codec;
pub mod proto;
pub mod sys;
pub mod track;
pub mod trigger;
