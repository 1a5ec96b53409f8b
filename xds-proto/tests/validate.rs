//! Validation against Envoy's `validate.rules` (protoc-gen-validate), one test per rule kind on
//! real Envoy messages: what Envoy would NACK is refused here, with the field path.
#![allow(clippy::unwrap_used)]

use prost::{Message, Name};
use xds_proto::builders::{eds_cluster, endpoints, http_listener, route_to_cluster, tls_secret};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::common::matcher::v3::Matcher;
use xds_proto::pb::envoy::config::listener::v3::Listener;
use xds_proto::pb::envoy::config::route::v3::RouteConfiguration;
use xds_proto::pb::envoy::extensions::filters::network::http_connection_manager::v3::HttpConnectionManager;
use xds_proto::pb::google::protobuf::Any;
use xds_proto::{EncodedResource, ValidationErrors, validate, validate_any, validate_encoded};

/// The message parsed from Envoy-style YAML.
fn parse<M: Message + Name + Default>(yaml: &str) -> M {
    xds_proto::from_yaml_str(yaml).unwrap_or_else(|e| panic!("{yaml}: {e}"))
}

/// `(path, rule)` of every violation of the message `yaml` describes.
fn violations<M: Message + Name + Default>(yaml: &str) -> Vec<(String, String)> {
    pairs(validate(&parse::<M>(yaml)).expect_err("the message should be refused"))
}

fn pairs(errors: ValidationErrors) -> Vec<(String, String)> {
    errors.violations().iter().map(|v| (v.path().to_owned(), v.rule().to_owned())).collect()
}

fn v(path: &str, rule: &str) -> (String, String) {
    (path.to_owned(), rule.to_owned())
}

const CLUSTER: &str = "name: backend\ntype: EDS\neds_cluster_config: { eds_config: { ads: {} } }\n";

#[test]
fn port_value_above_65535_is_refused_with_its_path() {
    let found = violations::<Listener>(
        "name: l\naddress: { socket_address: { address: 0.0.0.0, port_value: 99999999 } }\n",
    );
    assert_eq!(
        found,
        [v("address.socket_address.port_value", "value must be less than or equal to 65535")]
    );
    let errors = validate(&parse::<Listener>(
        "name: l\naddress: { socket_address: { address: 0.0.0.0, port_value: 99999999 } }\n",
    ))
    .unwrap_err();
    assert_eq!(
        errors.to_string(),
        "address.socket_address.port_value: value must be less than or equal to 65535"
    );
}

#[test]
fn string_min_len_refuses_a_cluster_without_name() {
    let found = violations::<Cluster>("type: EDS\neds_cluster_config: { eds_config: { ads: {} } }");
    assert_eq!(found, [v("name", "value length must be at least 1 runes")]);
}

#[test]
fn repeated_min_items_refuses_a_virtual_host_without_domains() {
    let found = violations::<RouteConfiguration>(
        "name: r\nvirtual_hosts:\n- name: vh\n  routes: [{ match: { prefix: / }, route: { cluster: c } }]\n",
    );
    assert_eq!(found, [v("virtual_hosts[0].domains", "value must contain at least 1 item(s)")]);
}

#[test]
fn repeated_items_rules_apply_to_each_item() {
    // domains: items { string { well_known_regex: HTTP_HEADER_VALUE strict: false } }
    let found =
        violations::<RouteConfiguration>("virtual_hosts: [{ name: vh, domains: [ok, \"a\\nb\"] }]");
    assert_eq!(found, [v("virtual_hosts[0].domains[1]", "value must not contain NUL, CR or LF")]);
}

#[test]
fn header_name_rule_applies_to_header_matchers() {
    // HeaderMatcher.name: { min_len: 1, well_known_regex: HTTP_HEADER_NAME, strict: false }
    let found = violations::<RouteConfiguration>(
        "virtual_hosts:\n- name: vh\n  domains: ['*']\n  routes:\n  - match: { prefix: /, headers: [{ name: \"x\\r\", present_match: true }, { name: '' , present_match: true }] }\n    route: { cluster: c }\n",
    );
    assert_eq!(
        found,
        [
            v(
                "virtual_hosts[0].routes[0].match.headers[0].name",
                "value must not contain NUL, CR or LF"
            ),
            v(
                "virtual_hosts[0].routes[0].match.headers[1].name",
                "value length must be at least 1 runes"
            ),
        ]
    );
}

#[test]
fn string_pattern_is_matched() {
    // path_separated_prefix: { pattern: "^[^?#]+[^?#/]$" }
    let yaml = "virtual_hosts:\n- name: vh\n  domains: ['*']\n  routes:\n  - match: { path_separated_prefix: /api/ }\n    route: { cluster: c }\n";
    assert_eq!(
        violations::<RouteConfiguration>(yaml),
        [v(
            "virtual_hosts[0].routes[0].match.path_separated_prefix",
            "value does not match regex pattern \"^[^?#]+[^?#/]$\""
        )]
    );
    validate(&parse::<RouteConfiguration>(&yaml.replace("/api/", "/api"))).unwrap();
}

#[test]
fn required_oneof_refuses_a_route_without_action() {
    let found = violations::<RouteConfiguration>(
        "virtual_hosts: [{ name: vh, domains: ['*'], routes: [{ match: { prefix: / } }] }]",
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "virtual_hosts[0].routes[0].action");
    assert!(found[0].1.starts_with("value is required: set one of route, redirect"), "{found:?}");
}

#[test]
fn message_required_refuses_a_route_without_match() {
    let found = violations::<RouteConfiguration>(
        "virtual_hosts: [{ name: vh, domains: ['*'], routes: [{ route: { cluster: c } }] }]",
    );
    assert_eq!(found, [v("virtual_hosts[0].routes[0].match", "value is required")]);
}

#[test]
fn enum_defined_only_refuses_an_unknown_codec_inside_typed_config() {
    let hcm = HttpConnectionManager {
        stat_prefix: "in".into(),
        codec_type: 42,
        ..parse("rds: { route_config_name: r, config_source: { ads: {} } }")
    };
    let mut listener: Listener = parse(
        "name: l\naddress: { socket_address: { address: 0.0.0.0, port_value: 80 } }\nfilter_chains: [{ filters: [{ name: hcm }] }]\n",
    );
    listener.filter_chains[0].filters[0].config_type =
        Some(xds_proto::pb::envoy::config::listener::v3::filter::ConfigType::TypedConfig(Any {
            type_url: format!("type.googleapis.com/{}", HttpConnectionManager::full_name()),
            value: hcm.encode_to_vec(),
        }));
    let found = pairs(validate(&listener).unwrap_err());
    assert_eq!(
        found,
        [v(
            "filter_chains[0].filters[0].typed_config.codec_type",
            "value must be one of the defined enum values (got 42)"
        )]
    );
}

#[test]
fn typed_config_payloads_are_validated() {
    // The HCM of the filter chain has no stat_prefix (min_len 1); the router inside it is fine.
    let found = violations::<Listener>(
        r#"
name: l
address: { socket_address: { address: 0.0.0.0, port_value: 80 } }
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      rds: { route_config_name: r, config_source: { ads: {} } }
      http_filters:
      - name: envoy.filters.http.router
        typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
"#,
    );
    assert_eq!(
        found,
        [v(
            "filter_chains[0].filters[0].typed_config.stat_prefix",
            "value length must be at least 1 runes"
        )]
    );
}

#[test]
fn any_of_an_unknown_type_is_not_checked() {
    let mut listener: Listener = parse(
        "name: l\naddress: { socket_address: { address: 0.0.0.0, port_value: 80 } }\nfilter_chains: [{ filters: [{ name: custom }] }]\n",
    );
    listener.filter_chains[0].filters[0].config_type =
        Some(xds_proto::pb::envoy::config::listener::v3::filter::ConfigType::TypedConfig(Any {
            type_url: "type.googleapis.com/example.NotInThePool".into(),
            value: vec![0xff, 0xff, 0xff],
        }));
    validate(&listener).unwrap();
}

#[test]
fn any_of_a_known_type_that_does_not_decode_is_refused() {
    let any = Any {
        type_url: format!("type.googleapis.com/{}", Cluster::full_name()),
        value: vec![0x0a, 0xff],
    };
    let found = pairs(validate_any(&any).unwrap_err());
    assert_eq!(found.len(), 1);
    assert!(found[0].1.starts_with("cannot decode envoy.config.cluster.v3.Cluster"), "{found:?}");
}

#[test]
fn duration_gt_refuses_a_zero_connect_timeout() {
    // connect_timeout: { gt: {} }
    let found = violations::<Cluster>(&format!("{CLUSTER}connect_timeout: 0s\n"));
    assert_eq!(found, [v("connect_timeout", "value must be greater than 0s")]);
    let found = violations::<Cluster>(&format!("{CLUSTER}connect_timeout: -1.5s\n"));
    assert_eq!(found, [v("connect_timeout", "value must be greater than 0s")]);
    validate(&parse::<Cluster>(&format!("{CLUSTER}connect_timeout: 0.001s\n"))).unwrap();
}

#[test]
fn wrapper_types_take_the_rules_of_their_scalar() {
    // OutlierDetection.max_ejection_percent: UInt32Value { lte: 100 }
    let found = violations::<Cluster>(&format!(
        "{CLUSTER}outlier_detection: {{ max_ejection_percent: 101 }}\n"
    ));
    assert_eq!(
        found,
        [v("outlier_detection.max_ejection_percent", "value must be less than or equal to 100")]
    );
    validate(&parse::<Cluster>(&format!(
        "{CLUSTER}outlier_detection: {{ max_ejection_percent: 100 }}\n"
    )))
    .unwrap();
    // Unset: no rule applies.
    validate(&parse::<Cluster>(&format!("{CLUSTER}outlier_detection: {{}}\n"))).unwrap();
}

#[test]
fn double_range_is_inside_the_bounds() {
    // envoy.type.v3.Percent.value: { gte: 0, lte: 100 }
    let found = violations::<Cluster>(&format!(
        "{CLUSTER}common_lb_config: {{ healthy_panic_threshold: {{ value: 150 }} }}\n"
    ));
    assert_eq!(
        found,
        [v(
            "common_lb_config.healthy_panic_threshold.value",
            "value must be inside range [0, 100]"
        )]
    );
}

#[test]
fn map_min_pairs_and_map_values_are_checked() {
    // MatchMap.map: { min_pairs: 1 }; each OnMatch value has a required oneof.
    let found = violations::<Matcher>(
        r#"
matcher_tree:
  input: { name: in, typed_config: { "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: x } }
  exact_match_map: { map: {} }
"#,
    );
    assert_eq!(
        found,
        [v("matcher_tree.exact_match_map.map", "value must contain at least 1 pair(s)")]
    );
    let found = violations::<Matcher>(
        r#"
matcher_tree:
  input: { name: in, typed_config: { "@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: x } }
  exact_match_map: { map: { "a-key": {} } }
"#,
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "matcher_tree.exact_match_map.map[\"a-key\"].on_match");
}

#[test]
fn many_violations_are_bounded() {
    let hosts: String = (0..30).map(|i| format!("- name: vh{i}\n")).collect();
    let errors =
        validate(&parse::<RouteConfiguration>(&format!("virtual_hosts:\n{hosts}"))).unwrap_err();
    assert_eq!(errors.violations().len(), xds_proto::MAX_VIOLATIONS);
    assert!(errors.is_truncated());
    assert!(errors.to_string().ends_with("; and more"));
}

#[test]
fn encoded_resources_and_anys_are_validated_by_type_url() {
    let bad: Cluster = parse("type: EDS\neds_cluster_config: { eds_config: { ads: {} } }");
    let encoded = EncodedResource::named("x", &bad).unwrap();
    assert_eq!(
        pairs(validate_encoded(&encoded).unwrap_err()),
        [v("name", "value length must be at least 1 runes")]
    );
    assert_eq!(
        pairs(validate_any(&encoded.to_any()).unwrap_err()),
        [v("name", "value length must be at least 1 runes")]
    );
    validate_encoded(&EncodedResource::new(&eds_cluster("ok")).unwrap()).unwrap();
}

#[test]
fn dynamic_messages_are_validated() {
    let pool = xds_proto::descriptor_pool();
    let descriptor = pool.get_message_by_name(Cluster::full_name().as_str()).unwrap();
    let message = prost_reflect::DynamicMessage::new(descriptor);
    let found = pairs(xds_proto::validate_dynamic(&message).unwrap_err());
    assert!(found.contains(&v("name", "value length must be at least 1 runes")), "{found:?}");
}

#[test]
fn the_builders_validate_clean() {
    validate(&eds_cluster("backend")).unwrap();
    validate(&endpoints("backend", &[("10.0.0.1", 8080), ("10.0.0.2", 65535)])).unwrap();
    validate(&http_listener("http", "0.0.0.0", 10000, "local_route")).unwrap();
    validate(&route_to_cluster("local_route", "*", "backend")).unwrap();
    validate(&tls_secret("cert", "-----BEGIN CERTIFICATE-----", "-----BEGIN PRIVATE KEY-----"))
        .unwrap();
    // A builder's output with a broken field is caught.
    let found = pairs(validate(&http_listener("http", "0.0.0.0", 70000, "r")).unwrap_err());
    assert_eq!(
        found,
        [v("address.socket_address.port_value", "value must be less than or equal to 65535")]
    );
}

#[test]
fn a_route_table_validates_clean_and_comes_out_as_written() {
    use xds_proto::builders::{RouteRule, RouteTable, To};
    use xds_proto::pb::envoy::config::route::v3::{route, route_action, route_match};
    let build = || {
        RouteTable::new("local_route")
            .virtual_host("api", ["api.example.com", "api.internal"], |vh| {
                vh.prefix("/v1/", "api-v1")
                    .weighted_prefix("/v2/", [("api-v2", 90), ("api-v2-canary", 10)])
                    .path("/exact", "exact")
                    .route(
                        RouteRule::prefix("/", To::cluster("canary"))
                            .header("x-canary", "1")
                            .timeout(std::time::Duration::from_millis(1500)),
                    )
            })
            .virtual_host("any", ["*"], |vh| vh.prefix("/", "web"))
            .build()
    };
    let table = build();
    validate(&table).unwrap();
    // The same table, the same bytes (and so the same version).
    assert_eq!(table.encode_to_vec(), build().encode_to_vec());
    assert_eq!(table.name, "local_route");
    let names: Vec<_> = table.virtual_hosts.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["api", "any"]);
    assert_eq!(table.virtual_hosts[0].domains, ["api.example.com", "api.internal"]);
    let api = &table.virtual_hosts[0].routes;
    assert_eq!(api.len(), 4);
    let action = |i: usize| match &api[i].action {
        Some(route::Action::Route(a)) => a.clone(),
        other => panic!("{other:?}"),
    };
    let path = |i: usize| api[i].r#match.as_ref().unwrap().path_specifier.clone().unwrap();
    assert_eq!(path(0), route_match::PathSpecifier::Prefix("/v1/".into()));
    assert_eq!(path(2), route_match::PathSpecifier::Path("/exact".into()));
    let Some(route_action::ClusterSpecifier::WeightedClusters(w)) = action(1).cluster_specifier
    else {
        panic!("weighted")
    };
    let weights: Vec<_> =
        w.clusters.iter().map(|c| (c.name.as_str(), c.weight.unwrap().value)).collect();
    assert_eq!(weights, [("api-v2", 90), ("api-v2-canary", 10)]);
    let timeout = action(3).timeout.unwrap();
    assert_eq!((timeout.seconds, timeout.nanos), (1, 500_000_000));
    assert_eq!(api[3].r#match.as_ref().unwrap().headers[0].name, "x-canary");
    assert!(action(0).timeout.is_none());
    // Every cluster it routes to is a reference the cache's consistency check follows.
    let refs = xds_proto::references(&table);
    for cluster in ["api-v1", "api-v2", "api-v2-canary", "exact", "canary", "web"] {
        assert!(
            refs.contains(&xds_proto::Reference::new(xds_proto::ResourceType::Cluster, cluster)),
            "{cluster}: {refs:?}"
        );
    }
    // A broken name is caught like any builder's output.
    let bad = RouteTable::new("r").virtual_host("", ["*"], |vh| vh.prefix("/", "")).build();
    assert!(validate(&bad).is_err());
}

#[test]
fn the_shipped_default_config_validates_clean() {
    let yaml = include_str!("../../examples/xds-file-server/config/default.yaml");
    let config = xds_proto::yaml_to_json(yaml).unwrap();
    let mut lists = vec![&config["resources"]];
    for group in config["groups"].as_object().unwrap().values() {
        lists.push(&group["resources"]);
    }
    let mut checked = 0;
    for item in lists.into_iter().flat_map(|l| l.as_array().unwrap()) {
        let any = xds_proto::any_from_json(item).unwrap();
        if let Err(errors) = validate_any(&any) {
            panic!("{}: {errors}", any.type_url);
        }
        checked += 1;
    }
    assert_eq!(checked, 8);
}

/// Validation cost for a 10k-cluster configuration (the rule plans compiled beforehand).
/// `cargo test -p xds-proto --test validate -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, not a check"]
fn measure_validating_10k_clusters() {
    let clusters: Vec<EncodedResource> = (0..10_000)
        .map(|i| {
            let mut cluster: Cluster = parse(&format!(
                "name: c{i}\ntype: EDS\nconnect_timeout: 1s\nlb_policy: ROUND_ROBIN\neds_cluster_config: {{ eds_config: {{ ads: {{}} }} }}\noutlier_detection: {{ max_ejection_percent: 50 }}\ncommon_lb_config: {{ healthy_panic_threshold: {{ value: 40 }} }}\n"
            ));
            cluster.alt_stat_name = format!("stat-{i}");
            EncodedResource::new(&cluster).unwrap()
        })
        .collect();
    let started = std::time::Instant::now();
    validate_encoded(&clusters[0]).unwrap();
    println!("first call (compiles the plans of the whole pool): {:?}", started.elapsed());
    let started = std::time::Instant::now();
    for cluster in &clusters {
        validate_encoded(cluster).unwrap();
    }
    let elapsed = started.elapsed();
    println!("10k clusters: {elapsed:?} ({:?} per cluster)", elapsed / 10_000);
    let listeners: Vec<EncodedResource> = (0..10_000)
        .map(|i| {
            EncodedResource::new(&http_listener(&format!("l{i}"), "0.0.0.0", 10000, "r")).unwrap()
        })
        .collect();
    let started = std::time::Instant::now();
    for listener in &listeners {
        validate_encoded(listener).unwrap();
    }
    println!("10k HCM listeners: {:?}", started.elapsed());
}

#[test]
fn nesting_is_bounded() {
    // RBAC permissions nest through `not_rule`; 150 levels, built without decoding (which has
    // its own limit).
    let pool = xds_proto::descriptor_pool();
    let permission = pool.get_message_by_name("envoy.config.rbac.v3.Permission").unwrap();
    let mut message = prost_reflect::DynamicMessage::new(permission.clone());
    message.set_field_by_name("any", prost_reflect::Value::Bool(true));
    for _ in 0..150 {
        let mut outer = prost_reflect::DynamicMessage::new(permission.clone());
        outer.set_field_by_name("not_rule", prost_reflect::Value::Message(message));
        message = outer;
    }
    let found = pairs(xds_proto::validate_dynamic(&message).unwrap_err());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].1, "message nesting deeper than 100 levels");
    assert_eq!(found[0].0, vec!["not_rule"; 100].join("."));
    // Within the bound, the same chain is valid (and a broken leaf is found).
    let mut message = prost_reflect::DynamicMessage::new(permission.clone());
    message.set_field_by_name("any", prost_reflect::Value::Bool(false));
    for _ in 0..50 {
        let mut outer = prost_reflect::DynamicMessage::new(permission.clone());
        outer.set_field_by_name("not_rule", prost_reflect::Value::Message(message));
        message = outer;
    }
    let found = pairs(xds_proto::validate_dynamic(&message).unwrap_err());
    assert_eq!(
        found,
        [v(&format!("{}.any", vec!["not_rule"; 50].join(".")), "value must equal true")]
    );
}

#[test]
fn message_skip_is_not_looked_into() {
    use xds_proto::pb::envoy::config::core::v3::KeyValueAppend;
    // `entry` is `message = {skip: true}`: its empty key is not checked; `record`'s is.
    validate(&parse::<KeyValueAppend>("entry: { key: '' }")).unwrap();
    let found = violations::<KeyValueAppend>("record: { key: '' }");
    assert_eq!(found, [v("record.key", "value length must be at least 1 runes")]);
}
