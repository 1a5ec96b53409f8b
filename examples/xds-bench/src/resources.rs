//! The resources both bench servers serve (`xds-bench-server` through the library, and
//! `xds-floor-server` pre-encoded), defined once so that the two serve the same bytes.

use xds_proto::builders::{eds_cluster, endpoints};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;

/// The port of every cluster's endpoints before any update.
pub const INITIAL_PORT: u32 = 8080;

/// Cluster `i`: `cluster-{i}`, its endpoints over ADS.
pub fn cluster(i: u32) -> Cluster {
    eds_cluster(&format!("cluster-{i}"))
}

/// Cluster `i`'s `endpoints` endpoints, all on `port`: `10.x.y.z`, distinct across clusters.
pub fn cla(i: u32, endpoints_per_cluster: u32, port: u32) -> ClusterLoadAssignment {
    let hosts: Vec<String> = (0..endpoints_per_cluster)
        .map(|j| {
            let n = i.wrapping_mul(endpoints_per_cluster).wrapping_add(j);
            format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255)
        })
        .collect();
    let hosts: Vec<(&str, u32)> = hosts.iter().map(|h| (h.as_str(), port)).collect();
    endpoints(&format!("cluster-{i}"), &hosts)
}

/// The port the `n`-th update (0-based) moves its cluster's endpoints to: 10000 and up, never
/// [`INITIAL_PORT`].
pub fn update_port(n: u32) -> u32 {
    10_000 + n % 50_000
}
