//! What makes a protobuf message an xDS resource: its type and its name.

use crate::pb::envoy::config::cluster::v3::Cluster;
use crate::pb::envoy::config::core::v3::TypedExtensionConfig;
use crate::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, LbEndpoint};
use crate::pb::envoy::config::listener::v3::Listener;
use crate::pb::envoy::config::route::v3::{
    RouteConfiguration, ScopedRouteConfiguration, VirtualHost,
};
use crate::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
use crate::pb::envoy::service::runtime::v3::Runtime;

/// A protobuf message served as an xDS resource.
///
/// Implemented for every built-in type; implement it for a custom type to serve that type too
/// (any `prost::Name` message with a name field).
pub trait XdsResource: prost::Message + prost::Name + Default + Send + Sync + 'static {
    /// The resource's name: its `name` field, except `cluster_name` for a ClusterLoadAssignment.
    ///
    /// `None` for messages that carry no name of their own (an LEDS `LbEndpoint` is named by its
    /// collection entry); such resources are named by the caller.
    fn resource_name(&self) -> Option<&str>;
}

macro_rules! named_by {
    ($($ty:ty => $field:ident),* $(,)?) => {$(
        impl XdsResource for $ty {
            fn resource_name(&self) -> Option<&str> {
                Some(&self.$field)
            }
        }
    )*};
}

named_by! {
    Cluster => name,
    ClusterLoadAssignment => cluster_name,
    Listener => name,
    RouteConfiguration => name,
    ScopedRouteConfiguration => name,
    VirtualHost => name,
    Secret => name,
    Runtime => name,
    TypedExtensionConfig => name,
}

impl XdsResource for LbEndpoint {
    fn resource_name(&self) -> Option<&str> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_load_assignment_is_named_by_cluster_name() {
        let cla = ClusterLoadAssignment { cluster_name: "backend".into(), ..Default::default() };
        assert_eq!(cla.resource_name(), Some("backend"));
        let cluster = Cluster { name: "c1".into(), ..Default::default() };
        assert_eq!(cluster.resource_name(), Some("c1"));
        assert_eq!(LbEndpoint::default().resource_name(), None);
    }
}
