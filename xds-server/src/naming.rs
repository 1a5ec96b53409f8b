//! What the server reads from a node about names and errors (rules C1, C4).

use xds_proto::pb::envoy::config::core::v3::Node;

/// Whether the node declared, in `client_features`, that it reads `resource_errors` (rule C4):
/// then a subscribed name that does not exist is answered `NOT_FOUND` there. Without it, delta
/// clients get the bodiless resource of rule D6 and SotW clients silence, as before.
pub(crate) fn reads_resource_errors(node: &Node) -> bool {
    node.client_features
        .iter()
        .any(|f| xds_core::RESOURCE_ERRORS_CLIENT_FEATURES.contains(&f.as_str()))
}
