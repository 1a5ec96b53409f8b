//! Redaction of sensitive fields: every field the descriptor pool marks
//! `(udpa.annotations.sensitive)` is hidden wherever it appears, `Any` payloads included.

#![allow(clippy::unwrap_used)] // Test helpers outside #[test] functions unwrap too.

use prost::{Message, Name};
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value,
};
use serde_json::json;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::listener::v3::Listener;
use xds_proto::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
use xds_proto::pb::google::protobuf::Any;
use xds_proto::{
    REDACTED, any_to_json, any_to_json_redacted, descriptor_pool, from_json, is_sensitive,
    redact_json, to_json, to_json_redacted,
};

/// Every field of the pool marked sensitive.
fn sensitive_fields() -> Vec<FieldDescriptor> {
    descriptor_pool()
        .all_messages()
        .flat_map(|m| m.fields().filter(is_sensitive).collect::<Vec<_>>())
        .collect()
}

/// Standard base64 (with padding), to find bytes fields in JSON.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A value of `kind` that carries `marker` in its JSON (3 bytes long markers keep base64
/// aligned, so the marker's base64 appears whole inside a longer base64 string).
fn element(kind: &Kind, marker: &str, depth: usize) -> Option<Value> {
    Some(match kind {
        Kind::String => Value::String(marker.to_owned()),
        Kind::Bytes => Value::Bytes(marker.as_bytes().to_vec().into()),
        Kind::Message(m) => Value::Message(filled(m, marker, depth + 1)?),
        _ => return None,
    })
}

/// A message of type `descriptor` with every string and bytes field (and the messages leading to
/// them, a few levels deep) set to carry `marker`; an `Any` packs a `DataSource` holding it.
fn filled(descriptor: &MessageDescriptor, marker: &str, depth: usize) -> Option<DynamicMessage> {
    let mut message = DynamicMessage::new(descriptor.clone());
    if descriptor.full_name() == "google.protobuf.Any" {
        let inner = descriptor_pool().get_message_by_name("envoy.config.core.v3.DataSource")?;
        let mut source = DynamicMessage::new(inner.clone());
        source.set_field_by_name("inline_string", Value::String(marker.to_owned()));
        message.set_field_by_name(
            "type_url",
            Value::String(format!("type.googleapis.com/{}", inner.full_name())),
        );
        message.set_field_by_name("value", Value::Bytes(source.encode_to_vec().into()));
        return Some(message);
    }
    if depth > 3 {
        return None;
    }
    let mut any = false;
    for field in descriptor.fields() {
        if let Some(value) = field_value(&field, marker, depth) {
            message.set_field(&field, value);
            any = true;
        }
    }
    any.then_some(message)
}

/// A value for `field` (a list of one item, a map of one entry) that carries `marker`.
fn field_value(field: &FieldDescriptor, marker: &str, depth: usize) -> Option<Value> {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else { return None };
        let key = match entry.map_entry_key_field().kind() {
            Kind::String => MapKey::String("key".to_owned()),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => MapKey::I32(1),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => MapKey::I64(1),
            Kind::Uint32 | Kind::Fixed32 => MapKey::U32(1),
            Kind::Uint64 | Kind::Fixed64 => MapKey::U64(1),
            Kind::Bool => MapKey::Bool(true),
            _ => return None,
        };
        let value = element(&entry.map_entry_value_field().kind(), marker, depth)?;
        return Some(Value::Map([(key, value)].into_iter().collect()));
    }
    let value = element(&field.kind(), marker, depth)?;
    Some(if field.is_list() { Value::List(vec![value]) } else { value })
}

/// A generated message packed in an `Any`.
fn any_of<M: Message + Name>(message: &M) -> Any {
    Any { type_url: M::type_url(), value: message.encode_to_vec() }
}

/// `message` packed in an `Any`.
fn pack(message: &DynamicMessage) -> Any {
    Any {
        type_url: format!("type.googleapis.com/{}", message.descriptor().full_name()),
        value: message.encode_to_vec(),
    }
}

/// Asserts the plain JSON of `any` shows `marker` (so the test sets what it means to) and the
/// redacted JSON does not.
fn assert_hidden(any: &Any, marker: &str, what: &str) {
    let plain = any_to_json(any).unwrap().to_string();
    let encoded = base64(marker.as_bytes());
    assert!(plain.contains(marker) || plain.contains(&encoded), "{what}: not set: {plain}");
    let redacted = any_to_json_redacted(any).unwrap().to_string();
    assert!(
        !redacted.contains(marker) && !redacted.contains(&encoded),
        "{what}: shown: {redacted}"
    );
    assert!(redacted.contains(REDACTED), "{what}: {redacted}");
}

#[test]
fn the_pool_knows_the_sensitive_annotation() {
    let fields: Vec<String> = sensitive_fields().iter().map(|f| f.full_name().to_owned()).collect();
    for name in [
        "envoy.extensions.transport_sockets.tls.v3.TlsCertificate.private_key",
        "envoy.extensions.transport_sockets.tls.v3.TlsCertificate.pkcs12",
        "envoy.extensions.transport_sockets.tls.v3.TlsCertificate.password",
        "envoy.extensions.transport_sockets.tls.v3.GenericSecret.secret",
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProxy.downstream_auth_passwords",
        "envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions.auth_password",
        "envoy.extensions.common.aws.v3.InlineCredentialProvider.secret_access_key",
        "envoy.extensions.common.aws.v3.InlineCredentialProvider.session_token",
        "envoy.extensions.filters.http.basic_auth.v3.BasicAuth.users",
        "envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth.credentials",
    ] {
        assert!(fields.iter().any(|f| f == name), "{name} is not marked sensitive in {fields:?}");
    }
    // Envoy's API had 28 such fields when this was written; the walk covers however many.
    assert!(fields.len() >= 28, "{}: {fields:?}", fields.len());
}

#[test]
fn every_sensitive_field_in_the_pool_is_hidden_directly_and_one_level_down() {
    let fields = sensitive_fields();
    let pool = descriptor_pool();
    let mut nested = 0;
    for (n, field) in fields.iter().enumerate() {
        let marker = format!("S3CRET{n:03}X");
        let parent = field.parent_message();
        let mut message = DynamicMessage::new(parent.clone());
        let value = field_value(field, &marker, 0)
            .unwrap_or_else(|| panic!("cannot set {}", field.full_name()));
        message.set_field(field, value);
        assert_hidden(&pack(&message), &marker, field.full_name());

        // The same message inside another one of the pool (the first type, by name, with a field
        // of the parent's type), so the walk must find its way down to it.
        let holder = pool
            .all_messages()
            .filter(|m| !m.is_map_entry() && m.full_name() != parent.full_name())
            .flat_map(|m| m.fields().collect::<Vec<_>>())
            .filter(|f| !f.is_map() && f.kind().as_message() == Some(parent))
            .min_by(|a, b| a.full_name().cmp(b.full_name()));
        if let Some(holder) = holder {
            let mut outer = DynamicMessage::new(holder.parent_message().clone());
            let inner = Value::Message(message.clone());
            outer.set_field(
                &holder,
                if holder.is_list() { Value::List(vec![inner]) } else { inner },
            );
            assert_hidden(&pack(&outer), &marker, holder.full_name());
            nested += 1;
        }
    }
    assert!(nested > fields.len() / 2, "only {nested} of {} nested", fields.len());
}

/// A listener and a cluster carrying, in Envoy's own YAML shape, the seven secrets that a list of
/// field names let through: an inline PKCS#12 bundle, two Redis passwords, an AWS secret key and
/// session token, basic-auth users and API keys.
fn listener_and_cluster() -> (Listener, Cluster) {
    let listener = from_json::<Listener>(&json!({
        "name": "edge",
        "address": {"socket_address": {"address": "0.0.0.0", "port_value": 10000}},
        "filter_chains": [
            {
                "transport_socket": {"name": "envoy.transport_sockets.tls", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
                    "common_tls_context": {"tls_certificates": [{
                        "pkcs12": {"inline_bytes": base64(b"PKCS12-KEY-MATERIAL")},
                    }]},
                }},
                "filters": [{"name": "envoy.filters.network.redis_proxy", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProxy",
                    "stat_prefix": "redis",
                    "settings": {"op_timeout": "1s"},
                    "prefix_routes": {"catch_all_route": {"cluster": "redis"}},
                    "downstream_auth_passwords": [{"inline_string": "REDIS-DOWNSTREAM-PASSWORD"}],
                }}],
            },
            {
                "filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    "stat_prefix": "http",
                    "route_config": {"name": "local"},
                    "http_filters": [
                        {"name": "envoy.filters.http.aws_request_signing", "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.aws_request_signing.v3.AwsRequestSigning",
                            "service_name": "s3",
                            "region": "us-east-1",
                            "credential_provider": {"inline_credential": {
                                "access_key_id": "AKIDPUBLICID",
                                "secret_access_key": "AWS-SECRET-ACCESS-KEY",
                                "session_token": "AWS-SESSION-TOKEN",
                            }},
                        }},
                        {"name": "envoy.filters.http.basic_auth", "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuth",
                            "users": {"inline_string": "admin:{SHA}BASIC-AUTH-USERS"},
                        }},
                        {"name": "envoy.filters.http.api_key_auth", "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.api_key_auth.v3.ApiKeyAuth",
                            "credentials": [{"key": "API-KEY-VALUE", "client": "client-a"}],
                            "key_sources": [{"header": "x-api-key"}],
                        }},
                        {"name": "envoy.filters.http.router", "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
                        }},
                    ],
                }}],
            },
        ],
    }))
    .unwrap();
    let cluster = from_json::<Cluster>(&json!({
        "name": "redis",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {"envoy.filters.network.redis_proxy": {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.redis_proxy.v3.RedisProtocolOptions",
            "auth_password": {"inline_string": "REDIS-UPSTREAM-PASSWORD"},
        }},
    }))
    .unwrap();
    (listener, cluster)
}

#[test]
fn the_seven_secrets_of_a_listener_and_a_cluster_are_hidden() {
    let (listener, cluster) = listener_and_cluster();
    let secrets = [
        base64(b"PKCS12-KEY-MATERIAL"),
        "REDIS-DOWNSTREAM-PASSWORD".to_owned(),
        "REDIS-UPSTREAM-PASSWORD".to_owned(),
        "AWS-SECRET-ACCESS-KEY".to_owned(),
        "AWS-SESSION-TOKEN".to_owned(),
        "BASIC-AUTH-USERS".to_owned(),
        "API-KEY-VALUE".to_owned(),
    ];
    let plain = format!("{}{}", to_json(&listener).unwrap(), to_json(&cluster).unwrap());
    let redacted =
        format!("{}{}", to_json_redacted(&listener).unwrap(), to_json_redacted(&cluster).unwrap());
    let as_any = format!(
        "{}{}",
        any_to_json_redacted(&any_of(&listener)).unwrap(),
        any_to_json_redacted(&any_of(&cluster)).unwrap()
    );
    for secret in &secrets {
        assert!(plain.contains(secret.as_str()), "{secret} is not in the resources");
        assert!(!redacted.contains(secret.as_str()), "{secret} shown: {redacted}");
        assert!(!as_any.contains(secret.as_str()), "{secret} shown: {as_any}");
    }
    // Only what is marked goes: the access key id, the routes and names stay.
    for public in ["AKIDPUBLICID", "x-api-key", "edge", "redis", "us-east-1"] {
        assert!(redacted.contains(public), "{public} hidden: {redacted}");
    }
    // The redacted value keeps its shape: where the secret comes from stays visible.
    let json = to_json_redacted(&cluster).unwrap();
    let options = &json["typedExtensionProtocolOptions"]["envoy.filters.network.redis_proxy"];
    assert_eq!(options["authPassword"], json!({"inlineString": REDACTED}));
}

#[test]
fn secrets_show_their_name_only() {
    let certificate = from_json::<Secret>(&json!({
        "name": "server-cert",
        "tls_certificate": {
            "certificate_chain": {"inline_string": "PUBLIC-CERT"},
            "private_key": {"inline_string": "PRIVATE-KEY"},
        },
    }))
    .unwrap();
    let validation = from_json::<Secret>(&json!({
        "name": "trusted-ca",
        "validation_context": {"trusted_ca": {"inline_string": "TRUSTED-CA"}},
    }))
    .unwrap();
    for (secret, name) in [(&certificate, "server-cert"), (&validation, "trusted-ca")] {
        let json = to_json_redacted(secret).unwrap();
        let any = any_to_json_redacted(&any_of(secret)).unwrap();
        assert_eq!(json["name"], name);
        assert_eq!(any["name"], name);
        assert_eq!(any["@type"], Secret::type_url());
        for text in [json.to_string(), any.to_string()] {
            for hidden in ["PUBLIC-CERT", "PRIVATE-KEY", "TRUSTED-CA"] {
                assert!(!text.contains(hidden), "{hidden} shown: {text}");
            }
        }
    }
}

#[test]
fn configuration_spellings_are_redacted() {
    // As a configuration file writes it: snake_case field names.
    let mut value = json!({
        "name": "envoy.filters.http.basic_auth",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuth",
            "users": {"inline_string": "USERS-IN-SNAKE-CASE"},
            "forward_username_header": "x-user",
        },
    });
    redact_json(
        "envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter",
        &mut value,
    );
    let text = value.to_string();
    assert!(!text.contains("USERS-IN-SNAKE-CASE"), "{text}");
    assert!(text.contains("x-user"), "{text}");

    // A TypedStruct is not in the pool: its payload cannot be searched, so it is hidden whole.
    let mut value = json!({
        "@type": "type.googleapis.com/xds.type.v3.TypedStruct",
        "type_url": "type.googleapis.com/envoy.extensions.filters.http.basic_auth.v3.BasicAuth",
        "value": {"users": {"inline_string": "USERS-IN-A-STRUCT"}},
    });
    redact_json("google.protobuf.Any", &mut value);
    assert!(!value.to_string().contains("USERS-IN-A-STRUCT"), "{value}");
}

#[test]
fn what_cannot_be_understood_is_hidden() {
    let mut unknown = json!({"@type": "type.googleapis.com/example.Unknown", "token": "T0KEN"});
    redact_json("google.protobuf.Any", &mut unknown);
    assert_eq!(unknown, json!({"@type": "type.googleapis.com/example.Unknown", "token": REDACTED}));

    let mut deep = json!("SECRET");
    for _ in 0..xds_proto::MAX_REDACT_DEPTH + 10 {
        deep = json!({"@type": "type.googleapis.com/google.protobuf.Any", "value": deep});
    }
    redact_json("google.protobuf.Any", &mut deep);
    assert!(!deep.to_string().contains("SECRET"));

    // Messages that hold no secret are left as they are.
    let mut plain = json!({"name": "backend", "connectTimeout": "1s"});
    let before = plain.clone();
    redact_json(&Cluster::full_name(), &mut plain);
    assert_eq!(plain, before);
}
