//! The `config_parse` harness: text through the file server's configuration loader and through
//! the proto3 JSON/YAML readers of every resource type.

use std::path::Path;

use prost::{Message, Name};
use xds_proto::ResourceType;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::core::v3::TypedExtensionConfig;
use xds_proto::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, LbEndpoint};
use xds_proto::pb::envoy::config::listener::v3::Listener;
use xds_proto::pb::envoy::config::route::v3::{
    RouteConfiguration, ScopedRouteConfiguration, VirtualHost,
};
use xds_proto::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
use xds_proto::pb::envoy::service::runtime::v3::Runtime;

/// Reads `text` as a message of type `M` from YAML and from JSON. What reads must write back out
/// as JSON and read again to the same message.
fn message<M: Message + Name + Default + PartialEq>(text: &str) {
    for parsed in [xds_proto::from_yaml_str::<M>(text), xds_proto::from_json_str::<M>(text)] {
        match parsed {
            Ok(m) => {
                let json = xds_proto::to_json(&m)
                    .unwrap_or_else(|e| panic!("{}: read but cannot be written: {e}", M::NAME));
                let again: M = xds_proto::from_json(&json)
                    .unwrap_or_else(|e| panic!("{}: written {json} does not read: {e}", M::NAME));
                assert!(again == m, "{}: {json} reads back differently", M::NAME);
            }
            Err(e) => assert!(!e.to_string().is_empty(), "an error without a message"),
        }
    }
}

/// Reads `text` as a message of type `t`.
fn resource(t: ResourceType, text: &str) {
    match t {
        ResourceType::Secret => message::<Secret>(text),
        ResourceType::Cluster => message::<Cluster>(text),
        ResourceType::ClusterLoadAssignment => message::<ClusterLoadAssignment>(text),
        ResourceType::Listener => message::<Listener>(text),
        ResourceType::RouteConfiguration => message::<RouteConfiguration>(text),
        ResourceType::ScopedRouteConfiguration => message::<ScopedRouteConfiguration>(text),
        ResourceType::VirtualHost => message::<VirtualHost>(text),
        ResourceType::Runtime => message::<Runtime>(text),
        ResourceType::TypedExtensionConfig => message::<TypedExtensionConfig>(text),
        ResourceType::LbEndpoint => message::<LbEndpoint>(text),
    }
}

/// The `config_parse` harness; see [`crate::config_parse`].
pub(crate) fn config_parse(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    match selector % 4 {
        // The whole configuration loader, as YAML and as JSON.
        0 | 1 => {
            for file in ["fuzz.yaml", "fuzz.json"] {
                match xds_file_server::config::parse_str(Path::new(file), &text) {
                    Ok(config) => {
                        assert!(config.groups.contains_key(xds_file_server::config::DEFAULT_GROUP));
                    }
                    Err(e) => {
                        let shown = e.to_string();
                        assert!(shown.starts_with(file), "the error names the file: {shown}");
                        assert!(!e.reason.is_empty(), "an error without a reason: {shown}");
                    }
                }
            }
        }
        // One resource type, from YAML and JSON.
        2 => {
            let t = ResourceType::ALL[usize::from(selector / 4) % ResourceType::ALL.len()];
            resource(t, &text);
        }
        // YAML to JSON, and an `Any` from the result.
        _ => {
            if let Ok(value) = xds_proto::yaml_to_json(&text) {
                let _ = xds_proto::any_from_json(&value);
                assert!(serde_json::to_string(&value).is_ok(), "the JSON value serializes");
            }
        }
    }
}
