//! The descriptor pool of the Envoy xDS world, embedded at build time.

use prost_reflect::DescriptorPool;
use std::sync::OnceLock;

/// The encoded `FileDescriptorSet` written by `build.rs`.
static DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/envoy_descriptors.bin"));

/// The descriptor pool of every Envoy message shipped in `envoy-types`, decoded once.
///
/// The build script compiles (with `protox`, no `protoc`) the `.proto` sources that ship inside
/// the `envoy-types` package this crate links against: every file of `data-plane-api/envoy/**`
/// (config, extensions, service, type, data, admin, ...), `xds/**` and `udpa/**`, their imports
/// (googleapis, protoc-gen-validate, cel, opentelemetry, prometheus) and all the protobuf
/// well-known types. The descriptors therefore describe exactly the generated [`crate::pb`] types.
/// The pool drives proto3 JSON/YAML transcoding and [`crate::canonical_bytes`].
///
/// The set is embedded in the binary (about 0.7 MB) and decoded on first use (a few
/// milliseconds). An empty pool stands in if it cannot be decoded, which the build script's
/// output never causes (the crate's tests decode it).
pub fn descriptor_pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTOR_SET).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_set_decodes() {
        let pool = DescriptorPool::decode(DESCRIPTOR_SET).unwrap();
        assert!(pool.files().len() > 400);
    }

    #[test]
    fn the_pool_knows_the_xds_world() {
        let pool = descriptor_pool();
        for name in [
            "google.protobuf.Any",
            "google.protobuf.Struct",
            "google.protobuf.FieldMask",
            "envoy.config.listener.v3.Listener",
            "envoy.config.cluster.v3.Cluster",
            "envoy.config.endpoint.v3.ClusterLoadAssignment",
            "envoy.config.route.v3.RouteConfiguration",
            "envoy.extensions.transport_sockets.tls.v3.Secret",
            "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "envoy.extensions.filters.http.router.v3.Router",
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig",
            "envoy.service.discovery.v3.DiscoveryRequest",
            "envoy.service.discovery.v3.DeltaDiscoveryResponse",
            "envoy.admin.v3.ConfigDump",
            "xds.core.v3.ResourceLocator",
            "xds.type.matcher.v3.Matcher",
        ] {
            assert!(pool.get_message_by_name(name).is_some(), "{name} is missing");
        }
    }

    #[test]
    fn descriptors_come_from_the_locked_envoy_types() {
        // build.rs reruns only when it changes: after bumping envoy-types, this fails until
        // `cargo clean -p xds-proto` rebuilds the descriptors from the new sources.
        let lock =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock")).unwrap();
        let versions: Vec<&str> = lock
            .split("[[package]]")
            .filter(|p| p.contains("\nname = \"envoy-types\"\n"))
            .filter_map(|p| p.split("\nversion = \"").nth(1))
            .filter_map(|rest| rest.split('"').next())
            .collect();
        let dir = env!("XDS_PROTO_ENVOY_TYPES_DIR");
        assert!(
            versions.iter().any(|v| dir.ends_with(&format!("envoy-types-{v}"))),
            "descriptors from {dir}, but Cargo.lock has envoy-types {versions:?}"
        );
    }

    #[test]
    fn shadowed_relative_names_resolve_like_protoc() {
        // `common.dynamic_forward_proxy.v3.DnsCacheConfig` in package
        // `envoy.extensions.clusters.dynamic_forward_proxy.v3` (see build.rs).
        let message = descriptor_pool()
            .get_message_by_name("envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig")
            .unwrap();
        let field = message.get_field_by_name("dns_cache_config").unwrap();
        assert_eq!(
            field.kind().as_message().unwrap().full_name(),
            "envoy.extensions.common.dynamic_forward_proxy.v3.DnsCacheConfig"
        );
    }
}
