//! Where a resource lives in etcd, and how its value is read.
//!
//! ```text
//! <prefix>/<group>/<type>/<name>
//! ```
//!
//! `<group>` is the node group (the default group, served to nodes no other group names, is the
//! empty segment: `<prefix>//<type>/<name>`); it may not contain `/`. `<type>` is the resource's
//! full message name (`envoy.config.cluster.v3.Cluster`), `<name>` the resource's name (it may
//! contain `/`, as `xdstp://` names do: everything after the type's `/` is the name). The value is
//! the resource as a protobuf `google.protobuf.Any`, or as proto3 JSON with an `"@type"` (what the
//! file server's configuration lists); its type and name must match the key.
//!
//! A named group is also marked by a key of its own, `<prefix>/<group>` (no `/` after the group)
//! with an empty value: that is how a group with no resources exists (its nodes are served
//! nothing, not the default group). `publish` writes the marker of every named group it writes;
//! a group named only by resource keys exists too.
//!
//! Segments that start with `@` right under the prefix are the publisher's bookkeeping, never a
//! group: `<prefix>@deployment` marks the prefix as one deployment's (its value names the
//! prefix), so that a publish into a prefix nested inside another deployment's, or containing
//! one, is refused; `<prefix>@publish` is the guard every publish rewrites, so that a publish
//! that read the prefix before another one committed fails instead of interleaving. Replicas
//! ignore both. A group name may not start with `@`.

use xds_proto::pb::google::protobuf::Any;
use xds_proto::{EncodedResource, TYPE_URL_PREFIX};

/// A key split into its parts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceKey {
    /// The group ("" for the default group).
    pub group: String,
    /// The full message name of the resource's type.
    pub type_name: String,
    /// The resource name.
    pub name: String,
}

/// A key under the prefix: a resource, or the marker of a named group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// `<prefix>/<group>/<type>/<name>`.
    Resource(ResourceKey),
    /// `<prefix>/<group>`: the group exists, even with no resource.
    Group(String),
    /// `<prefix>@<name>`: the publisher's bookkeeping ([`DEPLOYMENT_MARKER`], [`PUBLISH_GUARD`]),
    /// not part of the configuration.
    Reserved(String),
}

/// The segment, right under a prefix, of the key that marks the prefix as one deployment's.
pub const DEPLOYMENT_MARKER: &str = "@deployment";

/// The segment, right under a prefix, of the key every publish rewrites.
pub const PUBLISH_GUARD: &str = "@publish";

/// The key marking `prefix` (which ends with `/`) as a deployment's.
pub fn deployment_key(prefix: &str) -> String {
    format!("{prefix}{DEPLOYMENT_MARKER}")
}

/// The key every publish into `prefix` (which ends with `/`) rewrites.
pub fn guard_key(prefix: &str) -> String {
    format!("{prefix}{PUBLISH_GUARD}")
}

impl Key {
    /// Parses `key` under `prefix` (which ends with `/`).
    ///
    /// # Errors
    ///
    /// As [`ResourceKey::parse`]; a group marker's group is not empty.
    pub fn parse(prefix: &str, key: &[u8]) -> Result<Key, String> {
        let text = std::str::from_utf8(key).map_err(|_| "the key is not UTF-8".to_owned())?;
        match text.strip_prefix(prefix) {
            Some(name) if name.starts_with('@') && !name.contains('/') => {
                Ok(Key::Reserved(name.to_owned()))
            }
            Some(group) if !group.is_empty() && !group.contains('/') => {
                Ok(Key::Group(group.to_owned()))
            }
            _ => ResourceKey::parse(prefix, key).map(Key::Resource),
        }
    }

    /// The group the key belongs to (`None` for a reserved key, which belongs to none).
    pub fn group(&self) -> Option<&str> {
        match self {
            Key::Resource(key) => Some(&key.group),
            Key::Group(group) => Some(group),
            Key::Reserved(_) => None,
        }
    }
}

/// The marker key of named group `group` under `prefix` (which ends with `/`).
pub fn group_key(prefix: &str, group: &str) -> String {
    format!("{prefix}{group}")
}

/// The largest value accepted for one resource: etcd's own request limit is 1.5 MiB by default;
/// anything past 4 MiB is not a resource a proxy should be sent.
pub const MAX_VALUE_BYTES: usize = 4 << 20;

impl ResourceKey {
    /// Parses `key` under `prefix` (which ends with `/`).
    ///
    /// # Errors
    ///
    /// A key outside the prefix, not UTF-8, or with fewer than three segments.
    pub fn parse(prefix: &str, key: &[u8]) -> Result<ResourceKey, String> {
        let key = std::str::from_utf8(key).map_err(|_| "the key is not UTF-8".to_owned())?;
        let rest =
            key.strip_prefix(prefix).ok_or_else(|| format!("{key:?} is outside {prefix:?}"))?;
        let mut parts = rest.splitn(3, '/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(group), Some(type_name), Some(name))
                if !type_name.is_empty() && !name.is_empty() =>
            {
                Ok(ResourceKey {
                    group: group.into(),
                    type_name: type_name.into(),
                    name: name.into(),
                })
            }
            _ => Err(format!("{key:?} is not laid out as <prefix>/<group>/<type>/<name>")),
        }
    }

    /// The key of a resource in `group` under `prefix` (which ends with `/`).
    pub fn of(prefix: &str, group: &str, resource: &EncodedResource) -> String {
        format!("{prefix}{group}/{}/{}", resource.type_url().message_name(), resource.name())
    }
}

/// Reads a value stored under `key`: `Any` bytes or proto3 JSON, checked against the resource's
/// schema and Envoy's validation rules, and against the key's type and name.
///
/// # Errors
///
/// Why the value cannot be served, naming the field at fault where there is one.
pub fn decode_value(key: &ResourceKey, value: &[u8]) -> Result<EncodedResource, String> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(format!("the value has {} bytes, more than {MAX_VALUE_BYTES}", value.len()));
    }
    // An encoded Any starts with field 1's tag (0x0a), never with `{`.
    let first = value.iter().find(|b| !b.is_ascii_whitespace());
    let any = if first == Some(&b'{') {
        let text = std::str::from_utf8(value).map_err(|_| "the JSON is not UTF-8".to_owned())?;
        let json = xds_proto::json_value_from_str(text).map_err(|e| e.to_string())?;
        xds_proto::any_from_json(&json).map_err(|e| e.to_string())?
    } else {
        <Any as prost::Message>::decode(value).map_err(|e| format!("not an Any: {e}"))?
    };
    let type_name = any.type_url.strip_prefix(TYPE_URL_PREFIX).unwrap_or(&any.type_url);
    if type_name != key.type_name {
        return Err(format!("the value is a {type_name}, the key says {}", key.type_name));
    }
    xds_proto::validate_any(&any).map_err(|e| e.to_string())?;
    let resource = EncodedResource::from_any(&any).map_err(|e| e.to_string())?;
    if resource.name() != key.name {
        return Err(format!("the value names {:?}, the key says {:?}", resource.name(), key.name));
    }
    Ok(resource)
}

/// Normalizes a prefix to end with exactly one `/`.
pub fn normalize_prefix(prefix: &str) -> String {
    format!("{}/", prefix.trim_end_matches('/'))
}

/// The longest prefix accepted (a key path, not a document).
pub const MAX_PREFIX_BYTES: usize = 512;

/// Checks that `prefix` can hold one deployment of its own: not empty, not the root `/` (whose
/// range is every key of the store, other applications' included) and not longer than
/// [`MAX_PREFIX_BYTES`]. Returns it normalized.
///
/// # Errors
///
/// Why the prefix cannot be published into.
pub fn deployment_prefix(prefix: &str) -> Result<String, String> {
    if prefix.trim_end_matches('/').is_empty() {
        return Err(format!(
            "the prefix {prefix:?} is the whole key space (every application's keys): name a \
             prefix of this deployment's own, e.g. /xds/prod"
        ));
    }
    if prefix.len() > MAX_PREFIX_BYTES {
        return Err(format!("the prefix has {} bytes, more than {MAX_PREFIX_BYTES}", prefix.len()));
    }
    Ok(normalize_prefix(prefix))
}

/// The prefixes that contain `prefix` (which ends with `/`), outermost first, `prefix` excluded:
/// `/a/b/` gives `/` and `/a/`.
pub fn enclosing_prefixes(prefix: &str) -> Vec<&str> {
    let inner = &prefix[..prefix.len().saturating_sub(1)];
    inner.match_indices('/').map(|(i, _)| &prefix[..=i]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use xds_proto::pb::envoy::config::cluster::v3::Cluster;

    fn cluster(name: &str) -> EncodedResource {
        EncodedResource::new(&Cluster { name: name.into(), ..Default::default() })
            .expect("a named cluster encodes")
    }

    #[test]
    fn keys_round_trip_with_the_default_group_and_slashes_in_names() {
        let name = "xdstp://a/envoy.config.cluster.v3.Cluster/b/c";
        let r = cluster(name);
        let key = ResourceKey::of("/xds/", "", &r);
        assert_eq!(key, format!("/xds//envoy.config.cluster.v3.Cluster/{name}"));
        let parsed = ResourceKey::parse("/xds/", key.as_bytes()).expect("parses");
        assert_eq!(parsed.group, "");
        assert_eq!(parsed.name, name);
        assert!(ResourceKey::parse("/xds/", b"/xds/only-group").is_err());
        assert!(ResourceKey::parse("/xds/", b"/other/g/t/n").is_err());
    }

    #[test]
    fn a_key_without_type_and_name_marks_a_group() {
        assert_eq!(group_key("/xds/", "edge"), "/xds/edge");
        assert_eq!(Key::parse("/xds/", b"/xds/edge"), Ok(Key::Group("edge".into())));
        let resource = Key::parse("/xds/", b"/xds/edge/envoy.config.cluster.v3.Cluster/a");
        assert!(matches!(&resource, Ok(Key::Resource(k)) if k.group == "edge" && k.name == "a"));
        assert_eq!(resource.map(|k| k.group().map(str::to_owned)), Ok(Some("edge".into())));
        assert!(Key::parse("/xds/", b"/xds/").is_err(), "the default group needs no marker");
        assert!(Key::parse("/xds/", b"/xds/edge/").is_err());
    }

    #[test]
    fn a_deployment_prefix_is_neither_empty_nor_the_root() {
        for whole in ["", "/", "//"] {
            assert!(deployment_prefix(whole).unwrap_err().contains("whole key space"), "{whole:?}");
        }
        assert_eq!(deployment_prefix("/mesh//"), Ok("/mesh/".to_owned()));
        assert!(deployment_prefix(&"/a".repeat(300)).is_err(), "bounded");
        assert_eq!(enclosing_prefixes("/mesh/edge/"), ["/", "/mesh/"]);
        assert_eq!(enclosing_prefixes("mesh/"), Vec::<&str>::new());
    }

    #[test]
    fn the_publishers_bookkeeping_is_no_group() {
        let marker = Key::parse("/xds/", deployment_key("/xds/").as_bytes());
        assert_eq!(marker, Ok(Key::Reserved(DEPLOYMENT_MARKER.into())));
        let guard = Key::parse("/xds/", guard_key("/xds/").as_bytes()).expect("parses");
        assert_eq!(guard.group(), None);
    }

    #[test]
    fn values_are_any_bytes_or_json_and_must_match_their_key() {
        let r = cluster("backend");
        let key =
            ResourceKey::parse("/p/", ResourceKey::of("/p/", "g", &r).as_bytes()).expect("key");
        let any = r.to_any().encode_to_vec();
        assert_eq!(decode_value(&key, &any).expect("Any bytes").version(), r.version());
        let json =
            br#"{"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"backend"}"#;
        assert_eq!(decode_value(&key, json).expect("JSON").version(), r.version());
        let other = cluster("other").to_any().encode_to_vec();
        assert!(decode_value(&key, &other).unwrap_err().contains("names \"other\""));
        assert!(decode_value(&key, b"{\"@type\": 1}").is_err());
    }
}
