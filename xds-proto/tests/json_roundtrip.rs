//! proto3 JSON/YAML round trips of the xDS resources and their errors.

#![allow(clippy::unwrap_used)] // Test helpers outside #[test] functions unwrap too.

use prost::{Message, Name};
use serde_json::json;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use xds_proto::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use xds_proto::pb::envoy::config::core::v3::{ConfigSource, Metadata};
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_proto::pb::envoy::config::listener::v3::Listener;
use xds_proto::pb::envoy::config::listener::v3::filter::ConfigType as FilterConfigType;
use xds_proto::pb::envoy::config::route::v3::RouteConfiguration;
use xds_proto::pb::envoy::config::route::v3::route::Action;
use xds_proto::pb::envoy::config::route::v3::route_action::ClusterSpecifier;
use xds_proto::pb::envoy::extensions::filters::http::router::v3::Router;
use xds_proto::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use xds_proto::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_connection_manager::RouteSpecifier;
use xds_proto::pb::envoy::extensions::filters::network::http_connection_manager::v3::http_filter::ConfigType as HttpFilterConfigType;
use xds_proto::pb::envoy::extensions::transport_sockets::tls::v3::{
    DownstreamTlsContext, Secret, UpstreamTlsContext, secret,
};
use xds_proto::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use xds_proto::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use xds_proto::pb::google::protobuf::value::Kind;
use xds_proto::pb::google::protobuf::{Any, Struct};
use xds_proto::{
    JsonError, any_from_json, any_to_json, from_json, from_json_str, from_yaml_str, to_json,
    to_yaml_string,
};

const HCM_URL: &str = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager";

const LISTENER_RDS: &str = r#"
name: listener_0
address:
  socket_address: { address: 0.0.0.0, port_value: 10000 }
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: ingress_http
      codec_type: AUTO
      rds:
        route_config_name: local_route
        config_source:
          ads: {}
          resource_api_version: V3
      http_filters:
      - name: envoy.filters.http.router
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
          suppress_envoy_headers: true
  transport_socket:
    name: envoy.transport_sockets.tls
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
      require_client_certificate: true
      common_tls_context:
        tls_certificate_sds_secret_configs:
        - name: server_cert
          sds_config: { ads: {}, resource_api_version: V3 }
"#;

const LISTENER_INLINE: &str = r#"
name: listener_1
address:
  socket_address: { address: "::", port_value: 8443, ipv4_compat: true }
filter_chains:
- filter_chain_match: { server_names: [example.com] }
  filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: inline
      route_config:
        name: inline_route
        virtual_hosts:
        - name: backend
          domains: ["*"]
          routes:
          - match: { prefix: "/" }
            route: { cluster: backend, timeout: 5s }
      http_filters:
      - name: envoy.filters.http.router
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#;

const CLUSTER: &str = r#"
name: backend
type: EDS
connect_timeout: 0.25s
lb_policy: LEAST_REQUEST
eds_cluster_config:
  service_name: backend
  eds_config: { ads: {}, resource_api_version: V3 }
transport_socket:
  name: envoy.transport_sockets.tls
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
    sni: backend.example.com
    common_tls_context:
      tls_certificate_sds_secret_configs:
      - name: client_cert
        sds_config: { ads: {}, resource_api_version: V3 }
      validation_context_sds_secret_config:
        name: trusted_ca
        sds_config: { ads: {}, resource_api_version: V3 }
typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    common_http_protocol_options: { idle_timeout: 60s }
    explicit_http_config:
      http2_protocol_options: { max_concurrent_streams: 100 }
metadata:
  filter_metadata:
    envoy.lb: { canary: true, version: "1.2" }
    acme: { owners: [team-a, team-b], weight: 2.5, nothing: null }
"#;

const CLUSTER_LOAD_ASSIGNMENT: &str = r#"
cluster_name: backend
endpoints:
- locality: { region: us-east-1, zone: us-east-1a }
  lb_endpoints:
  - endpoint:
      address: { socket_address: { address: 10.0.0.1, port_value: 8080 } }
      hostname: backend-1
    health_status: HEALTHY
    load_balancing_weight: 3
  - endpoint:
      address: { socket_address: { address: 10.0.0.2, port_value: 8080 } }
    health_status: DRAINING
  load_balancing_weight: 10
- locality: { region: us-west-2 }
  priority: 1
  lb_endpoints:
  - endpoint:
      address: { socket_address: { address: 10.1.0.1, port_value: 8080 } }
policy:
  overprovisioning_factor: 140
  endpoint_stale_after: 30s
"#;

const ROUTE_CONFIGURATION: &str = r#"
name: local_route
virtual_hosts:
- name: backend
  domains: ["example.com", "*.example.com"]
  routes:
  - match:
      prefix: /api
      headers:
      - name: x-canary
        string_match: { exact: "1" }
    route:
      weighted_clusters:
        clusters:
        - { name: backend-v1, weight: 90 }
        - { name: backend-v2, weight: 10 }
      retry_policy: { retry_on: 5xx, num_retries: 3 }
  - match: { path: /healthz }
    direct_response: { status: 200, body: { inline_string: ok } }
"#;

const SECRET: &str = r#"
name: server_cert
tls_certificate:
  certificate_chain: { inline_string: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n" }
  private_key: { inline_bytes: "AAECAwQ=" }
"#;

const DOWNSTREAM_TLS_CONTEXT: &str = r#"
require_client_certificate: true
common_tls_context:
  alpn_protocols: [h2, http/1.1]
  tls_params: { tls_minimum_protocol_version: TLSv1_2 }
  tls_certificate_sds_secret_configs:
  - name: server_cert
    sds_config: { ads: {}, resource_api_version: V3 }
  validation_context_sds_secret_config:
    name: trusted_ca
    sds_config: { ads: {}, resource_api_version: V3 }
"#;

const METADATA: &str = r#"
filter_metadata:
  envoy.filters.http.lua:
    string: text
    number: 42
    float: 1.5
    bool: false
    null: null
    list: [1, "two", { three: 3 }, [4]]
    nested: { a: { b: { c: deep } } }
"#;

/// Reads `yaml` as `M`, then checks JSON -> message and YAML -> message give it back.
fn round_trip<M>(yaml: &str) -> M
where
    M: Message + Name + Default + PartialEq + std::fmt::Debug,
{
    let message: M = from_yaml_str(yaml).unwrap();
    let json = to_json(&message).unwrap();
    assert_eq!(from_json::<M>(&json).unwrap(), message, "JSON round trip of {json}");
    let text = serde_json::to_string_pretty(&json).unwrap();
    assert_eq!(from_json_str::<M>(&text).unwrap(), message);
    let yaml_out = to_yaml_string(&message).unwrap();
    assert_eq!(from_yaml_str::<M>(&yaml_out).unwrap(), message, "YAML round trip of {yaml_out}");
    // The YAML written is the JSON written.
    let reread: serde_json::Value = serde_saphyr::from_str(&yaml_out).unwrap();
    assert_eq!(reread, json);
    message
}

fn hcm_of(listener: &Listener) -> HttpConnectionManager {
    let filter = &listener.filter_chains[0].filters[0];
    let Some(FilterConfigType::TypedConfig(any)) = &filter.config_type else {
        panic!("no typed_config");
    };
    assert_eq!(any.type_url, HCM_URL);
    HttpConnectionManager::decode(any.value.as_slice()).unwrap()
}

fn is_ads(source: &ConfigSource) -> bool {
    matches!(source.config_source_specifier, Some(ConfigSourceSpecifier::Ads(_)))
}

#[test]
fn listener_with_rds_over_ads() {
    let listener: Listener = round_trip(LISTENER_RDS);
    let hcm = hcm_of(&listener);
    assert_eq!(hcm.stat_prefix, "ingress_http");
    let Some(RouteSpecifier::Rds(rds)) = &hcm.route_specifier else {
        panic!("no rds");
    };
    assert_eq!(rds.route_config_name, "local_route");
    assert!(is_ads(rds.config_source.as_ref().unwrap()));

    let Some(HttpFilterConfigType::TypedConfig(router)) = &hcm.http_filters[0].config_type else {
        panic!("no router config");
    };
    assert_eq!(router.type_url, Router::type_url());
    assert!(Router::decode(router.value.as_slice()).unwrap().suppress_envoy_headers);

    let socket = listener.filter_chains[0].transport_socket.as_ref().unwrap();
    let Some(xds_proto::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(
        tls,
    )) = &socket.config_type
    else {
        panic!("no tls config");
    };
    let tls = DownstreamTlsContext::decode(tls.value.as_slice()).unwrap();
    let sds = &tls.common_tls_context.unwrap().tls_certificate_sds_secret_configs[0];
    assert_eq!(sds.name, "server_cert");
    assert!(is_ads(sds.sds_config.as_ref().unwrap()));

    // Canonical JSON output: lowerCamelCase, enums by name, `@type` on the Any.
    let json = to_json(&listener).unwrap();
    let config = &json["filterChains"][0]["filters"][0]["typedConfig"];
    assert_eq!(config["@type"], HCM_URL);
    assert_eq!(config["statPrefix"], "ingress_http");
    assert_eq!(config["codecType"], json!(null), "AUTO is the default and is skipped");
    assert_eq!(config["rds"]["configSource"]["resourceApiVersion"], "V3");
    assert_eq!(config["rds"]["configSource"]["ads"], json!({}));
    assert_eq!(json["address"]["socketAddress"]["portValue"], 10000);
}

#[test]
fn listener_with_inline_route_config() {
    let listener: Listener = round_trip(LISTENER_INLINE);
    let hcm = hcm_of(&listener);
    let Some(RouteSpecifier::RouteConfig(routes)) = &hcm.route_specifier else {
        panic!("no inline route_config");
    };
    let route = &routes.virtual_hosts[0].routes[0];
    let Some(Action::Route(action)) = &route.action else {
        panic!("no route action");
    };
    assert_eq!(action.cluster_specifier, Some(ClusterSpecifier::Cluster("backend".to_owned())));
    assert_eq!(action.timeout.unwrap().seconds, 5);
}

#[test]
fn eds_cluster_with_tls_and_protocol_options() {
    let cluster: Cluster = round_trip(CLUSTER);
    assert_eq!(
        cluster.cluster_discovery_type,
        Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32))
    );
    assert_eq!(cluster.connect_timeout.unwrap().nanos, 250_000_000);
    let eds = cluster.eds_cluster_config.as_ref().unwrap();
    assert!(is_ads(eds.eds_config.as_ref().unwrap()));

    let socket = cluster.transport_socket.as_ref().unwrap();
    let Some(xds_proto::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(
        tls,
    )) = &socket.config_type
    else {
        panic!("no tls config");
    };
    assert_eq!(tls.type_url, UpstreamTlsContext::type_url());
    let tls = UpstreamTlsContext::decode(tls.value.as_slice()).unwrap();
    assert_eq!(tls.sni, "backend.example.com");
    let common = tls.common_tls_context.unwrap();
    assert_eq!(common.tls_certificate_sds_secret_configs[0].name, "client_cert");

    let options = &cluster.typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
    let options = HttpProtocolOptions::decode(options.value.as_slice()).unwrap();
    assert_eq!(options.common_http_protocol_options.unwrap().idle_timeout.unwrap().seconds, 60);

    let metadata = cluster.metadata.as_ref().unwrap();
    assert_eq!(
        metadata.filter_metadata["envoy.lb"].fields["canary"].kind,
        Some(Kind::BoolValue(true))
    );
    assert_eq!(metadata.filter_metadata["acme"].fields["nothing"].kind, Some(Kind::NullValue(0)));

    let json = to_json(&cluster).unwrap();
    assert_eq!(json["type"], "EDS");
    assert_eq!(json["lbPolicy"], "LEAST_REQUEST");
    assert_eq!(json["connectTimeout"], "0.250s");
    assert_eq!(
        json["typedExtensionProtocolOptions"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
            ["@type"],
        HttpProtocolOptions::type_url()
    );
}

#[test]
fn cluster_load_assignment() {
    let cla: ClusterLoadAssignment = round_trip(CLUSTER_LOAD_ASSIGNMENT);
    assert_eq!(cla.endpoints.len(), 2);
    assert_eq!(cla.endpoints[0].lb_endpoints.len(), 2);
    assert_eq!(cla.endpoints[1].priority, 1);
    assert_eq!(cla.policy.unwrap().overprovisioning_factor.unwrap().value, 140);
}

#[test]
fn route_configuration_with_weighted_clusters() {
    let routes: RouteConfiguration = round_trip(ROUTE_CONFIGURATION);
    let Some(Action::Route(action)) = &routes.virtual_hosts[0].routes[0].action else {
        panic!("no route action");
    };
    let Some(ClusterSpecifier::WeightedClusters(weighted)) = &action.cluster_specifier else {
        panic!("no weighted clusters");
    };
    let weights: Vec<(&str, u32)> =
        weighted.clusters.iter().map(|c| (c.name.as_str(), c.weight.unwrap().value)).collect();
    assert_eq!(weights, [("backend-v1", 90), ("backend-v2", 10)]);
}

#[test]
fn secret_and_downstream_tls_context() {
    let secret: Secret = round_trip(SECRET);
    let Some(secret::Type::TlsCertificate(certificate)) = &secret.r#type else {
        panic!("no tls_certificate");
    };
    let key = certificate.private_key.as_ref().unwrap();
    assert_eq!(
        key.specifier,
        Some(xds_proto::pb::envoy::config::core::v3::data_source::Specifier::InlineBytes(vec![
            0, 1, 2, 3, 4
        ]))
    );
    let context: DownstreamTlsContext = round_trip(DOWNSTREAM_TLS_CONTEXT);
    assert_eq!(context.common_tls_context.unwrap().alpn_protocols, ["h2", "http/1.1"]);
}

#[test]
fn struct_metadata() {
    let metadata: Metadata = round_trip(METADATA);
    let lua = &metadata.filter_metadata["envoy.filters.http.lua"];
    assert_eq!(lua.fields.len(), 7);
    let json = to_json(&metadata).unwrap();
    assert_eq!(
        json["filterMetadata"]["envoy.filters.http.lua"]["list"],
        json!([1.0, "two", {"three": 3.0}, [4.0]])
    );
    let plain: Struct = from_json(&json!({"a": {"b": [true, null]}})).unwrap();
    assert_eq!(to_json(&plain).unwrap(), json!({"a": {"b": [true, null]}}));
}

#[test]
fn discovery_request_and_response() {
    let request_yaml = r#"
version_info: "3"
node:
  id: node-1
  cluster: edge
  user_agent_name: envoy
  metadata: { region: eu, shard: 7 }
resource_names: [backend, frontend]
type_url: type.googleapis.com/envoy.config.cluster.v3.Cluster
response_nonce: abc
error_detail:
  code: 3
  message: rejected
  details:
  - "@type": type.googleapis.com/google.protobuf.Struct
    value: { reason: bad }
"#;
    let request: DiscoveryRequest = round_trip(request_yaml);
    assert_eq!(request.node.as_ref().unwrap().id, "node-1");
    assert_eq!(request.resource_names, ["backend", "frontend"]);
    let json = to_json(&request).unwrap();
    assert_eq!(json["typeUrl"], Cluster::type_url());
    assert_eq!(
        json["errorDetail"]["details"][0],
        json!({"@type": "type.googleapis.com/google.protobuf.Struct", "value": {"reason": "bad"}})
    );

    let cluster: Cluster = from_yaml_str(CLUSTER).unwrap();
    let cla: ClusterLoadAssignment = from_yaml_str(CLUSTER_LOAD_ASSIGNMENT).unwrap();
    let listener: Listener = from_yaml_str(LISTENER_RDS).unwrap();
    let response = DiscoveryResponse {
        version_info: "7".to_owned(),
        resources: vec![
            Any { type_url: Cluster::type_url(), value: cluster.encode_to_vec() },
            Any { type_url: ClusterLoadAssignment::type_url(), value: cla.encode_to_vec() },
            Any { type_url: Listener::type_url(), value: listener.encode_to_vec() },
        ],
        type_url: Cluster::type_url(),
        nonce: "n-1".to_owned(),
        ..Default::default()
    };
    let json = to_json(&response).unwrap();
    assert_eq!(json["resources"][0]["@type"], Cluster::type_url());
    assert_eq!(json["resources"][0]["name"], "backend");
    assert_eq!(json["resources"][1]["clusterName"], "backend");
    let back: DiscoveryResponse = from_json(&json).unwrap();
    assert_eq!(back.version_info, "7");
    assert_eq!(back.nonce, "n-1");
    // The resources come back as the same messages.
    assert_eq!(Cluster::decode(back.resources[0].value.as_slice()).unwrap(), cluster);
    assert_eq!(ClusterLoadAssignment::decode(back.resources[1].value.as_slice()).unwrap(), cla);
    assert_eq!(Listener::decode(back.resources[2].value.as_slice()).unwrap(), listener);
    // And the response itself round-trips exactly.
    assert_eq!(from_json::<DiscoveryResponse>(&to_json(&back).unwrap()).unwrap(), back);
    let yaml = to_yaml_string(&back).unwrap();
    assert_eq!(from_yaml_str::<DiscoveryResponse>(&yaml).unwrap(), back);
}

#[test]
fn any_helpers() {
    let any = any_from_json(&json!({
        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
        "suppressEnvoyHeaders": true,
    }))
    .unwrap();
    assert_eq!(any.type_url, Router::type_url());
    assert!(Router::decode(any.value.as_slice()).unwrap().suppress_envoy_headers);
    assert_eq!(
        any_to_json(&any).unwrap(),
        json!({"@type": Router::type_url(), "suppressEnvoyHeaders": true})
    );
}

// ----- errors -----

#[test]
fn bad_yaml_syntax_is_a_syntax_error() {
    let err = from_yaml_str::<Listener>("name: listener_0\naddress: [unclosed\n").unwrap_err();
    let JsonError::Syntax { line, .. } = &err else {
        panic!("not a syntax error: {err:?}");
    };
    assert!(line.is_some(), "{err:?}");
    assert!(err.to_string().starts_with("syntax error: "), "{err}");

    let err = from_json_str::<Listener>("{\"name\": \"l\",\n \"address\": }").unwrap_err();
    assert!(matches!(err, JsonError::Syntax { line: Some(2), column: Some(_), .. }), "{err:?}");
}

#[test]
fn unknown_field_deep_inside_an_any_names_its_path() {
    let yaml = r#"
version_info: "1"
type_url: type.googleapis.com/envoy.config.listener.v3.Listener
resources:
- "@type": type.googleapis.com/envoy.config.listener.v3.Listener
  name: listener_0
  filter_chains:
  - filters:
    - name: envoy.filters.network.http_connection_manager
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
        stat_prefix: x
        route_config:
          virtual_hosts:
          - name: vh
            domainz: ["*"]
"#;
    let err = from_yaml_str::<DiscoveryResponse>(yaml).unwrap_err();
    assert_eq!(
        err.to_string(),
        "resources[0].filter_chains[0].filters[0].typed_config.route_config.virtual_hosts[0].domainz: unknown field"
    );
    assert!(matches!(err, JsonError::Schema { .. }));

    // The same with lowerCamelCase JSON input: the path uses the names as written.
    let json = json!({
        "resources": [{
            "@type": Listener::type_url(),
            "filterChains": [{"filters": [{"typedConfig": {
                "@type": HCM_URL,
                "routeConfig": {"virtualHosts": [{"domainz": []}]}
            }}]}]
        }]
    });
    let err = from_json::<DiscoveryResponse>(&json).unwrap_err();
    assert_eq!(
        err.to_string(),
        "resources[0].filterChains[0].filters[0].typedConfig.routeConfig.virtualHosts[0].domainz: unknown field"
    );
}

#[test]
fn unknown_and_missing_type() {
    let yaml = r#"
name: listener_0
filter_chains:
- filters:
  - name: bogus
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.nope.v3.Nope
      x: 1
"#;
    let err = from_yaml_str::<Listener>(yaml).unwrap_err();
    assert_eq!(
        err,
        JsonError::UnknownType {
            path: "filter_chains[0].filters[0].typed_config".to_owned(),
            type_name: "envoy.extensions.filters.network.nope.v3.Nope".to_owned(),
        }
    );
    assert!(err.to_string().contains("envoy.extensions.filters.network.nope.v3.Nope"), "{err}");

    let yaml =
        "name: l\nfilter_chains:\n- filters:\n  - name: f\n    typed_config: { stat_prefix: x }\n";
    let err = from_yaml_str::<Listener>(yaml).unwrap_err();
    assert_eq!(
        err,
        JsonError::MissingType { path: "filter_chains[0].filters[0].typed_config".to_owned() }
    );

    let unknown =
        Any { type_url: "type.googleapis.com/acme.Unknown".to_owned(), value: vec![1, 2, 3] };
    assert!(matches!(
        any_to_json(&unknown),
        Err(JsonError::UnknownType { type_name, .. }) if type_name == "acme.Unknown"
    ));
}

#[test]
fn wrong_value_types_name_the_field() {
    let err = from_yaml_str::<Listener>("address: { socket_address: { port_value: not-a-port } }")
        .unwrap_err();
    let JsonError::Schema { path, .. } = &err else {
        panic!("not a schema error: {err:?}");
    };
    assert_eq!(path, "address.socket_address.port_value");

    let err = from_yaml_str::<Cluster>("name: c\nconnect_timeout: 5\n").unwrap_err();
    assert!(err.to_string().starts_with("connect_timeout: "), "{err}");

    let err = from_yaml_str::<Cluster>("name: c\ntype: EDSX\n").unwrap_err();
    assert!(err.to_string().starts_with("type: "), "{err}");
    assert!(err.to_string().contains("EDSX"), "{err}");

    let err = from_json::<Cluster>(&json!(["not", "an", "object"])).unwrap_err();
    assert!(matches!(err, JsonError::Schema { ref path, .. } if path.is_empty()), "{err:?}");
}

#[test]
fn foreign_messages_are_not_in_the_pool() {
    #[derive(Clone, PartialEq, Message)]
    struct Foreign {
        #[prost(string, tag = "1")]
        name: String,
    }
    impl Name for Foreign {
        const NAME: &'static str = "Foreign";
        const PACKAGE: &'static str = "acme.v1";
    }
    let err = to_json(&Foreign::default()).unwrap_err();
    assert_eq!(err, JsonError::NotInPool { name: "acme.v1.Foreign".to_owned() });
}
