//! The pieces of `xds-load`, the load generator: simulated xDS clients (SotW or delta ADS, one
//! HTTP/2 connection each), the measurement of connection-storm and update-convergence times, and
//! the report.
//!
//! - [`proto`]: reads responses in place (only the fields needed, no message decoding).
//! - [`codec`]: the gRPC codec (pre-encoded requests, raw responses).
//! - [`client`]: one client's protocol state: subscriptions, ACKs, what it holds, reconnections.
//! - [`track`]: what clients report and the coordinator measures (lock-free slots).
//! - [`bench`](mod@bench): the run: storm, (restart,) updates, final state, report; `checks`:
//!   whether clients came back after a restart and hold the final state; [`burst`]: many
//!   changes within a second, and how many responses they cost each client.
//! - [`floor`]: the pre-encoded responses of `xds-floor-server`, the least a server can do to
//!   serve these clients; [`resources`]: the clusters and endpoints both bench servers serve.
//! - [`churn`]: connect / subscribe / disconnect cycles, and whether the server returns to its
//!   baseline.
//! - [`trigger`]: the trigger of an update (an HTTP GET or a command); [`stats`]: the server's
//!   `/bench/stats` and a background sampler; [`http`]: the HTTP GET both use; [`sys`]: `/proc`
//!   samples and the open-file limit.

pub mod bench;
pub mod burst;
mod checks;
pub mod churn;
pub mod client;
pub mod codec;
pub mod floor;
pub mod http;
pub mod proto;
pub mod resources;
pub mod stats;
pub mod sys;
pub mod track;
pub mod trigger;
