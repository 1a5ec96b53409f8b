//! The resources both bench servers serve (`xds-bench-server` through the library, and
//! `xds-floor-server` pre-encoded), defined once so that the two serve the same bytes.

use xds_proto::builders::{eds_cluster, endpoints};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::core::v3::Locality;
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

/// Cluster `i` as node `node` alone is served it (`xds-bench-server --per-node-groups`): its
/// statistics under a name of the node's own (`alt_stat_name`), so that each node's copy is a
/// resource of its own content, encoded for that node.
pub fn node_cluster(i: u32, node: &str) -> Cluster {
    Cluster { alt_stat_name: format!("{node}/cluster-{i}"), ..cluster(i) }
}

/// Cluster `i`'s endpoints as node `node` alone is served them (`--per-node-groups`): those of
/// [`cla`], in a locality named after the node (`sub_zone`), as a control plane that orders
/// localities per node (its zone first) would serve them. The first endpoint's port is `port`,
/// as `xds-load` checks.
pub fn node_cla(
    i: u32,
    endpoints_per_cluster: u32,
    port: u32,
    node: &str,
) -> ClusterLoadAssignment {
    let mut cla = cla(i, endpoints_per_cluster, port);
    for locality in &mut cla.endpoints {
        locality.locality = Some(Locality { sub_zone: node.to_owned(), ..Default::default() });
    }
    cla
}

/// The port the `n`-th update (0-based) moves its cluster's endpoints to: 10000 and up, never
/// [`INITIAL_PORT`].
pub fn update_port(n: u32) -> u32 {
    10_000 + n % 50_000
}
