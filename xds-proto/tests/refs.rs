//! References between resources, as the snapshot cache's consistency check (rule O3) and
//! make-before-break ordering read them.

use prost::{Message, Name};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, CustomClusterType, DiscoveryType, EdsClusterConfig, TransportSocketMatch,
};
use xds_proto::pb::envoy::config::core::v3::{TransportSocket, transport_socket};
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_proto::pb::envoy::config::listener::v3::{
    ApiListener, Filter, FilterChain, Listener, filter,
};
use xds_proto::pb::envoy::config::route::v3::route_action::{
    ClusterSpecifier, RequestMirrorPolicy,
};
use xds_proto::pb::envoy::config::route::v3::weighted_cluster::ClusterWeight;
use xds_proto::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteConfiguration, ScopedRouteConfiguration, VirtualHost, WeightedCluster,
    route,
};
use xds_proto::pb::envoy::extensions::clusters::aggregate::v3::ClusterConfig;
use xds_proto::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, Rds, ScopedRds, ScopedRouteConfigurationsList, ScopedRoutes,
    http_connection_manager::RouteSpecifier, scoped_routes::ConfigSpecifier,
};
use xds_proto::pb::envoy::extensions::filters::network::tcp_proxy::v3::{TcpProxy, tcp_proxy};
use xds_proto::pb::envoy::extensions::transport_sockets::tls::v3::common_tls_context::{
    CombinedCertificateValidationContext, ValidationContextType,
};
use xds_proto::pb::envoy::extensions::transport_sockets::tls::v3::{
    CommonTlsContext, DownstreamTlsContext, SdsSecretConfig, Secret, UpstreamTlsContext,
};
use xds_proto::pb::google::protobuf::{Any, UInt32Value};
use xds_proto::{CustomType, Reference, ResourceType, TypeUrl, references, references_of_encoded};

fn pack<T: Message + Name>(message: &T) -> Any {
    Any { type_url: T::type_url(), value: message.encode_to_vec() }
}

fn r(resource_type: ResourceType, name: &str) -> Reference {
    Reference::new(resource_type, name)
}

fn network_filter(config: Any) -> Filter {
    Filter {
        name: "envoy.filters.network.http_connection_manager".into(),
        config_type: Some(filter::ConfigType::TypedConfig(config)),
    }
}

fn rds_hcm(route_config_name: &str) -> HttpConnectionManager {
    HttpConnectionManager {
        stat_prefix: "ingress".into(),
        route_specifier: Some(RouteSpecifier::Rds(Rds {
            route_config_name: route_config_name.into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn sds(name: &str) -> SdsSecretConfig {
    SdsSecretConfig { name: name.into(), ..Default::default() }
}

fn tls_socket(config: Any) -> TransportSocket {
    TransportSocket {
        name: "envoy.transport_sockets.tls".into(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(config)),
    }
}

fn route_to(specifier: ClusterSpecifier, mirrors: &[&str]) -> Route {
    Route {
        action: Some(route::Action::Route(RouteAction {
            cluster_specifier: Some(specifier),
            request_mirror_policies: mirrors
                .iter()
                .map(|c| RequestMirrorPolicy { cluster: (*c).into(), ..Default::default() })
                .collect(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn weighted(names: &[&str]) -> ClusterSpecifier {
    ClusterSpecifier::WeightedClusters(WeightedCluster {
        clusters: names
            .iter()
            .map(|n| ClusterWeight {
                name: (*n).into(),
                weight: Some(UInt32Value { value: 50 }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

fn route_config(name: &str, routes: Vec<Route>) -> RouteConfiguration {
    RouteConfiguration {
        name: name.into(),
        virtual_hosts: vec![VirtualHost {
            name: "all".into(),
            domains: vec!["*".into()],
            routes,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn discovery(t: DiscoveryType) -> Option<ClusterDiscoveryType> {
    Some(ClusterDiscoveryType::Type(t as i32))
}

fn eds_cluster(name: &str, service_name: &str) -> Cluster {
    Cluster {
        name: name.into(),
        cluster_discovery_type: discovery(DiscoveryType::Eds),
        eds_cluster_config: Some(EdsClusterConfig {
            service_name: service_name.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Two filter chains (RDS, and inline routes behind downstream TLS with an SDS certificate), a
/// default chain and a gRPC API listener.
fn listener() -> Listener {
    let inline = HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::RouteConfig(route_config(
            "inline",
            vec![route_to(ClusterSpecifier::Cluster("inline-backend".into()), &[])],
        ))),
        ..Default::default()
    };
    let downstream_tls = DownstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_sds_secret_configs: vec![sds("server-cert")],
            ..Default::default()
        }),
        ..Default::default()
    };
    Listener {
        name: "ingress".into(),
        filter_chains: vec![
            FilterChain {
                filters: vec![network_filter(pack(&rds_hcm("routes-a")))],
                ..Default::default()
            },
            FilterChain {
                filters: vec![network_filter(pack(&inline))],
                transport_socket: Some(tls_socket(pack(&downstream_tls))),
                ..Default::default()
            },
        ],
        default_filter_chain: Some(FilterChain {
            filters: vec![network_filter(pack(&rds_hcm("routes-a")))],
            ..Default::default()
        }),
        api_listener: Some(ApiListener { api_listener: Some(pack(&rds_hcm("grpc-routes"))) }),
        ..Default::default()
    }
}

#[test]
fn o3_references_for_consistency_check() {
    assert_eq!(
        references(&listener()),
        [
            r(ResourceType::Secret, "server-cert"),
            r(ResourceType::Cluster, "inline-backend"),
            r(ResourceType::RouteConfiguration, "grpc-routes"),
            r(ResourceType::RouteConfiguration, "routes-a"),
        ]
    );
    assert_eq!(
        references(&eds_cluster("backend", "")),
        [r(ResourceType::ClusterLoadAssignment, "backend")]
    );
    assert_eq!(
        references(&eds_cluster("backend", "backend-endpoints")),
        [r(ResourceType::ClusterLoadAssignment, "backend-endpoints")]
    );
    let no_eds_config = Cluster {
        name: "plain-eds".into(),
        cluster_discovery_type: discovery(DiscoveryType::Eds),
        ..Default::default()
    };
    assert_eq!(references(&no_eds_config), [r(ResourceType::ClusterLoadAssignment, "plain-eds")]);
}

#[test]
fn static_and_dns_clusters_reference_nothing() {
    for t in [DiscoveryType::Static, DiscoveryType::StrictDns, DiscoveryType::LogicalDns] {
        let cluster = Cluster {
            name: "local".into(),
            cluster_discovery_type: discovery(t),
            // Only EDS reads it: a stray service name on a static cluster names nothing.
            eds_cluster_config: Some(EdsClusterConfig {
                service_name: "ignored".into(),
                ..Default::default()
            }),
            load_assignment: Some(ClusterLoadAssignment {
                cluster_name: "local".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(references(&cluster), []);
    }
}

#[test]
fn route_configuration_references_clusters_and_mirrors() {
    let mut config = route_config(
        "routes-a",
        vec![
            route_to(ClusterSpecifier::Cluster("web".into()), &["shadow"]),
            route_to(weighted(&["canary", "web"]), &[]),
            route_to(ClusterSpecifier::ClusterHeader("x-cluster".into()), &[]),
            Route {
                action: Some(route::Action::DirectResponse(Default::default())),
                ..Default::default()
            },
        ],
    );
    config.request_mirror_policies =
        vec![RequestMirrorPolicy { cluster: "audit".into(), ..Default::default() }];
    let expected = [
        r(ResourceType::Cluster, "audit"),
        r(ResourceType::Cluster, "canary"),
        r(ResourceType::Cluster, "shadow"),
        r(ResourceType::Cluster, "web"),
    ];
    assert_eq!(references(&config), expected);

    // A VHDS virtual host walks the same way, without the route configuration's own mirrors.
    assert_eq!(references(&config.virtual_hosts[0]), expected[1..]);
}

#[test]
fn upstream_tls_references_sds_secrets() {
    let validation_only = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            validation_context_type: Some(ValidationContextType::ValidationContextSdsSecretConfig(
                sds("ca"),
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    let combined = UpstreamTlsContext {
        common_tls_context: Some(CommonTlsContext {
            tls_certificate_sds_secret_configs: vec![sds("client-cert"), sds("")],
            validation_context_type: Some(ValidationContextType::CombinedValidationContext(
                CombinedCertificateValidationContext {
                    validation_context_sds_secret_config: Some(sds("combined-ca")),
                    ..Default::default()
                },
            )),
            ..Default::default()
        }),
        ..Default::default()
    };
    let cluster = Cluster {
        name: "secure".into(),
        cluster_discovery_type: discovery(DiscoveryType::StrictDns),
        transport_socket: Some(tls_socket(pack(&validation_only))),
        transport_socket_matches: vec![TransportSocketMatch {
            name: "mtls".into(),
            transport_socket: Some(tls_socket(pack(&combined))),
            ..Default::default()
        }],
        ..Default::default()
    };
    assert_eq!(
        references(&cluster),
        [
            r(ResourceType::Secret, "ca"),
            r(ResourceType::Secret, "client-cert"),
            r(ResourceType::Secret, "combined-ca"),
        ]
    );
}

#[test]
fn scoped_routes_reference_route_configurations() {
    let scoped = ScopedRouteConfiguration {
        name: "tenant-a".into(),
        route_configuration_name: "tenant-a-routes".into(),
        ..Default::default()
    };
    assert_eq!(references(&scoped), [r(ResourceType::RouteConfiguration, "tenant-a-routes")]);

    let inline_scope = ScopedRouteConfiguration {
        name: "tenant-b".into(),
        route_configuration: Some(route_config(
            "",
            vec![route_to(ClusterSpecifier::Cluster("tenant-b-backend".into()), &[])],
        )),
        ..Default::default()
    };
    let hcm_with_scopes = |config_specifier| HttpConnectionManager {
        route_specifier: Some(RouteSpecifier::ScopedRoutes(ScopedRoutes {
            name: "scopes".into(),
            config_specifier: Some(config_specifier),
            ..Default::default()
        })),
        ..Default::default()
    };
    let listener = |hcm: &HttpConnectionManager| Listener {
        name: "scoped".into(),
        filter_chains: vec![FilterChain {
            filters: vec![network_filter(pack(hcm))],
            ..Default::default()
        }],
        ..Default::default()
    };
    let inline = hcm_with_scopes(ConfigSpecifier::ScopedRouteConfigurationsList(
        ScopedRouteConfigurationsList { scoped_route_configurations: vec![scoped, inline_scope] },
    ));
    assert_eq!(
        references(&listener(&inline)),
        [
            r(ResourceType::Cluster, "tenant-b-backend"),
            r(ResourceType::RouteConfiguration, "tenant-a-routes"),
        ]
    );
    // SRDS subscribes to the collection of scoped route configurations, not to names.
    let srds = hcm_with_scopes(ConfigSpecifier::ScopedRds(ScopedRds::default()));
    assert_eq!(references(&listener(&srds)), []);
}

#[test]
fn tcp_proxy_and_aggregate_clusters_reference_clusters() {
    let proxy = TcpProxy {
        stat_prefix: "tcp".into(),
        cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster("db".into())),
        ..Default::default()
    };
    let listener = Listener {
        name: "tcp".into(),
        filter_chains: vec![FilterChain {
            filters: vec![network_filter(pack(&proxy))],
            ..Default::default()
        }],
        ..Default::default()
    };
    assert_eq!(references(&listener), [r(ResourceType::Cluster, "db")]);

    let aggregate = Cluster {
        name: "failover".into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::ClusterType(CustomClusterType {
            name: "envoy.clusters.aggregate".into(),
            typed_config: Some(pack(&ClusterConfig {
                clusters: vec!["primary".into(), "backup".into()],
            })),
        })),
        ..Default::default()
    };
    assert_eq!(
        references(&aggregate),
        [r(ResourceType::Cluster, "backup"), r(ResourceType::Cluster, "primary")]
    );
}

#[test]
fn corrupt_or_foreign_any_is_skipped() {
    let corrupt =
        Any { type_url: HttpConnectionManager::type_url(), value: vec![0xff, 0xff, 0xff] };
    let truncated = Any {
        type_url: HttpConnectionManager::type_url(),
        value: pack(&rds_hcm("x")).value[..3].to_vec(),
    };
    let foreign = pack(&Secret { name: "not-a-filter".into(), ..Default::default() });
    let corrupt_tls =
        Any { type_url: UpstreamTlsContext::type_url(), value: vec![0x0a, 0x05, 0x01] };
    let listener = Listener {
        name: "broken".into(),
        filter_chains: vec![FilterChain {
            filters: vec![
                network_filter(corrupt),
                network_filter(truncated),
                network_filter(foreign),
            ],
            transport_socket: Some(tls_socket(corrupt_tls)),
            ..Default::default()
        }],
        ..Default::default()
    };
    assert_eq!(references(&listener), []);

    // Another prefix than type.googleapis.com/ is still recognised, as Envoy does.
    let mut prefixed = pack(&rds_hcm("routes-b"));
    prefixed.type_url = format!("example.com/{}", HttpConnectionManager::full_name());
    let listener = Listener {
        api_listener: Some(ApiListener { api_listener: Some(prefixed) }),
        ..Default::default()
    };
    assert_eq!(references(&listener), [r(ResourceType::RouteConfiguration, "routes-b")]);
}

#[test]
fn types_without_references() {
    let cla = ClusterLoadAssignment { cluster_name: "backend".into(), ..Default::default() };
    assert_eq!(references(&cla), []);
    assert_eq!(references(&Secret { name: "cert".into(), ..Default::default() }), []);
}

/// Rule O3 for LEDS (rule C2): an assignment names the glob collection of each LEDS locality,
/// in its normal form (rule C1), so a check can find the collection's members by the names a
/// cache keys them by; a locality with its endpoints inline names nothing.
#[test]
fn o03_an_assignment_names_its_leds_collections_in_normal_form() {
    use xds_proto::pb::envoy::config::endpoint::v3::{
        LedsClusterLocalityConfig, LocalityLbEndpoints, locality_lb_endpoints::LbConfig,
    };
    let lb = "xdstp://auth/envoy.config.endpoint.v3.LbEndpoint";
    let leds = |glob: &str| LocalityLbEndpoints {
        lb_config: Some(LbConfig::LedsClusterLocalityConfig(LedsClusterLocalityConfig {
            leds_config: None,
            leds_collection_name: glob.into(),
        })),
        ..Default::default()
    };
    let cla = ClusterLoadAssignment {
        cluster_name: "backend".into(),
        endpoints: vec![
            leds(&format!("{lb}/svc/zone-b/*?z=1&a=2")),
            LocalityLbEndpoints::default(),
            leds(&format!("{lb}/svc/zone-a/*")),
            leds(&format!("{lb}/svc/zone-a/*")),
            leds(""),
        ],
        ..Default::default()
    };
    let expected = vec![
        r(ResourceType::LbEndpoint, &format!("{lb}/svc/zone-a/*")),
        r(ResourceType::LbEndpoint, &format!("{lb}/svc/zone-b/*?a=2&z=1")),
    ];
    assert_eq!(references(&cla), expected);
    let encoded = cla.encode_to_vec();
    assert_eq!(
        references_of_encoded(&ResourceType::ClusterLoadAssignment.into(), &encoded),
        Ok(expected)
    );
}

#[test]
fn references_of_encoded_decodes_built_in_types() {
    let encoded = listener().encode_to_vec();
    let listener_type = TypeUrl::of::<Listener>();
    assert_eq!(references_of_encoded(&listener_type, &encoded), Ok(references(&listener())));

    let cluster = eds_cluster("backend", "backend-endpoints").encode_to_vec();
    assert_eq!(
        references_of_encoded(&ResourceType::Cluster.into(), &cluster),
        Ok(vec![r(ResourceType::ClusterLoadAssignment, "backend-endpoints")])
    );

    // Bytes that are not a listener are the caller's error, unlike a bad Any inside one.
    assert!(references_of_encoded(&listener_type, &[0xff, 0xff, 0xff]).is_err());

    // Types that name nothing, and custom types, are not decoded at all.
    let custom = TypeUrl::from(CustomType::new("type.googleapis.com/acme.Thing"));
    assert_eq!(references_of_encoded(&custom, &[0xff]), Ok(vec![]));
    assert_eq!(references_of_encoded(&ResourceType::Secret.into(), &[0xff]), Ok(vec![]));
}

#[test]
fn references_sort_in_make_before_break_order_and_display() {
    let mut refs = [
        r(ResourceType::Secret, "s"),
        r(ResourceType::RouteConfiguration, "r"),
        r(ResourceType::Cluster, "b"),
        r(ResourceType::ClusterLoadAssignment, "a"),
        r(ResourceType::Cluster, "a"),
    ];
    refs.sort();
    let types: Vec<_> = refs.iter().map(|x| (x.resource_type, x.name.as_str())).collect();
    assert_eq!(
        types,
        [
            (ResourceType::Secret, "s"),
            (ResourceType::Cluster, "a"),
            (ResourceType::Cluster, "b"),
            (ResourceType::ClusterLoadAssignment, "a"),
            (ResourceType::RouteConfiguration, "r"),
        ]
    );
    assert_eq!(r(ResourceType::RouteConfiguration, "r1").to_string(), "route \"r1\"");
}
