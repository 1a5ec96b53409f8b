//! proto3 canonical JSON and YAML for every message in the [`descriptor_pool`].
//!
//! Messages are transcoded through `prost-reflect`'s `DynamicMessage` and its serde support:
//!
//! - output is [proto3 canonical JSON](https://protobuf.dev/programming-guides/json/):
//!   lowerCamelCase field names, default values left out, enums as names, 64-bit integers as
//!   strings, well-known types in their special forms (`"5s"` for a `Duration`, plain JSON for a
//!   `Struct`), and every `google.protobuf.Any` as an object whose `@type` names the packed type
//!   next to that type's own fields, as in Envoy's YAML;
//! - input accepts both the proto field names (`snake_case`, Envoy's YAML style) and the JSON
//!   names (lowerCamelCase), and rejects unknown fields: a typo fails with an error naming its
//!   path, such as `resources[0].filter_chains[0].filters[0].typed_config.route_config.
//!   virtual_hosts[0].domainz: unknown field`.
//!
//! YAML is read into JSON first (with `<<` merge keys applied), so both go through the same
//! path and give the same errors. A document of many resources (a control plane's configuration
//! file) is read one resource at a time by [`read_resource_document`], so that what it holds is one
//! resource, not a tree of the whole document.
//!
//! Messages decoded from JSON are passed through [`canonical_bytes`] before prost decodes them,
//! so the `value` bytes of every `Any` they contain do not depend on map iteration order: the
//! same document always gives the same message.

use prost::{Message, Name};
use prost_reflect::{DeserializeOptions, DynamicMessage, MessageDescriptor, SerializeOptions};
use serde::Serialize;
use serde_json::Value;

use crate::canonical::canonical_bytes;
use crate::descriptor::descriptor_pool;
use crate::pb::google::protobuf::Any;

mod stream;

pub use stream::{
    DocumentError, DocumentPart, TextFormat, read_resource_document, resource_location,
};

/// Why a message could not be read from or written to JSON or YAML.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// The text is not well-formed JSON or YAML.
    #[error("syntax error: {message}")]
    Syntax {
        /// The parser's message (which repeats the position when it has one).
        message: String,
        /// The line of the error (1-based), when known.
        line: Option<usize>,
        /// The column of the error (1-based), when known.
        column: Option<usize>,
    },
    /// The document does not fit the message's schema: an unknown field, a value of the wrong
    /// type, an out-of-range number, an unknown enum value, ...
    #[error("{}", located(.path, .message))]
    Schema {
        /// The path of the offending field, e.g. `virtual_hosts[0].domainz` (empty at the top).
        path: String,
        /// What is wrong with it, e.g. `unknown field`.
        message: String,
    },
    /// An `Any`'s `@type` (or `type_url`) names a type that is not in the descriptor pool.
    #[error("{}", located(.path, &format!("unknown @type `{}`", .type_name)))]
    UnknownType {
        /// The path of the `Any` (empty at the top).
        path: String,
        /// The type URL or message name that is not known.
        type_name: String,
    },
    /// An object standing for an `Any` has no `@type`.
    #[error("{}", located(.path, "missing @type"))]
    MissingType {
        /// The path of the `Any` (empty at the top).
        path: String,
    },
    /// The Rust message type has no descriptor in the pool (it is not an Envoy/xDS message).
    #[error("message type `{name}` is not in the descriptor pool")]
    NotInPool {
        /// The message's full name.
        name: String,
    },
    /// The message's bytes do not match its descriptor, or the JSON value cannot be written out
    /// as YAML. Not expected for the generated types.
    #[error("cannot transcode `{name}`: {message}")]
    Transcode {
        /// The message's full name (or `yaml`).
        name: String,
        /// The underlying error.
        message: String,
    },
}

/// `path: message`, or just `message` at the top level.
fn located(path: &str, message: &str) -> String {
    if path.is_empty() { message.to_owned() } else { format!("{path}: {message}") }
}

/// The proto3 canonical JSON of `msg` (`Any`s rendered with `@type`).
pub fn to_json<M: Message + Name>(msg: &M) -> Result<Value, JsonError> {
    let descriptor = message_descriptor(&M::full_name())?;
    encoded_to_json(descriptor, &msg.encode_to_vec())
}

/// Reads a message from its proto3 JSON form (field names in `snake_case` or lowerCamelCase,
/// `Any`s with `@type`). Unknown fields are errors.
pub fn from_json<M: Message + Name + Default>(value: &Value) -> Result<M, JsonError> {
    let name = M::full_name();
    let descriptor = message_descriptor(&name)?;
    let encoded = json_to_encoded(descriptor, value)?;
    let canonical = canonical_bytes(&name, &encoded);
    M::decode(canonical.as_ref()).map_err(|e| JsonError::Transcode { name, message: e.to_string() })
}

/// Reads a message from JSON text; see [`from_json`].
pub fn from_json_str<M: Message + Name + Default>(json: &str) -> Result<M, JsonError> {
    from_json(&json_value_from_str(json)?)
}

/// Reads a message from YAML text (Envoy's configuration style); see [`from_json`]. The YAML is
/// converted to JSON first, applying `<<` merge keys.
pub fn from_yaml_str<M: Message + Name + Default>(yaml: &str) -> Result<M, JsonError> {
    from_json(&yaml_to_json(yaml)?)
}

/// The YAML form of [`to_json`]'s output.
pub fn to_yaml_string<M: Message + Name>(msg: &M) -> Result<String, JsonError> {
    let value = to_json(msg)?;
    serde_saphyr::to_string(&value)
        .map_err(|e| JsonError::Transcode { name: "yaml".to_owned(), message: e.to_string() })
}

/// Packs a JSON object with an `@type` (and the fields of that type) into an `Any`, as found in
/// Envoy's `typed_config`. The packed bytes are canonical ([`canonical_bytes`]).
pub fn any_from_json(value: &Value) -> Result<Any, JsonError> {
    from_json::<Any>(value)
}

/// The JSON form of an `Any`: `{"@type": <type URL>, ...fields of the packed message}` (a
/// well-known type packs as `{"@type": ..., "value": ...}`).
pub fn any_to_json(any: &Any) -> Result<Value, JsonError> {
    to_json(any)
}

/// The descriptor of the message named `name`.
fn message_descriptor(name: &str) -> Result<MessageDescriptor, JsonError> {
    descriptor_pool()
        .get_message_by_name(name)
        .ok_or_else(|| JsonError::NotInPool { name: name.to_owned() })
}

/// Serializes a message with the canonical proto3 JSON options.
struct Canonical<'a>(&'a DynamicMessage);

impl Serialize for Canonical<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        const OPTIONS: SerializeOptions = SerializeOptions::new()
            .stringify_64_bit_integers(true)
            .use_enum_numbers(false)
            .use_proto_field_name(false)
            .skip_default_fields(true);
        self.0.serialize_with_options(serializer, &OPTIONS)
    }
}

/// The JSON of `encoded`, a message of type `descriptor`.
fn encoded_to_json(descriptor: MessageDescriptor, encoded: &[u8]) -> Result<Value, JsonError> {
    let name = descriptor.full_name().to_owned();
    let message = DynamicMessage::decode(descriptor, encoded)
        .map_err(|e| JsonError::Transcode { name, message: e.to_string() })?;
    serde_path_to_error::serialize(&Canonical(&message), serde_json::value::Serializer)
        .map_err(|e| classify(e.path(), e.inner().to_string()))
}

/// The encoding of the message of type `descriptor` that `value` stands for.
fn json_to_encoded(descriptor: MessageDescriptor, value: &Value) -> Result<Vec<u8>, JsonError> {
    const OPTIONS: DeserializeOptions = DeserializeOptions::new().deny_unknown_fields(true);
    let mut track = serde_path_to_error::Track::new();
    let deserializer = serde_path_to_error::Deserializer::new(value, &mut track);
    match DynamicMessage::deserialize_with_options(descriptor, deserializer, &OPTIONS) {
        Ok(message) => Ok(message.encode_to_vec()),
        Err(e) => Err(classify(&track.path(), e.to_string())),
    }
}

/// Sorts a `prost-reflect` serde error into a [`JsonError`] variant.
fn classify(path: &serde_path_to_error::Path, message: String) -> JsonError {
    let path = match path.to_string() {
        root if root == "." => String::new(),
        path => path,
    };
    let quoted = |prefix: &str, suffix: &str| {
        message
            .strip_prefix(prefix)
            .and_then(|rest| rest.split_once(suffix))
            .map(|(name, _)| name.to_owned())
    };
    if let Some(field) = quoted("unrecognized field name '", "'") {
        let path = if path.is_empty() { field } else { format!("{path}.{field}") };
        return JsonError::Schema { path, message: "unknown field".to_owned() };
    }
    if let Some(type_name) =
        quoted("message '", "' not found").or_else(|| quoted("unsupported type url '", "'"))
    {
        return JsonError::UnknownType { path, type_name };
    }
    if message == "expected '@type' field" {
        return JsonError::MissingType { path };
    }
    JsonError::Schema { path, message }
}

/// The deepest nesting of sequences and mappings (YAML) or arrays and objects (JSON) a document
/// may have. Envoy's own configurations stay far below (a route's weighted cluster inside a
/// listener's inline route configuration is about 20 levels); the bound makes a hostile or
/// generated document (`[[[[...]]]]` 100k deep) fail in time linear in its size, before any
/// recursive code runs (convention 18).
pub const MAX_NESTING: usize = 100;

/// Converts YAML text to a JSON value, applying `<<` merge keys (for documents that hold more
/// than one message, such as a control plane's configuration file).
///
/// Parsing is bounded: nesting deeper than [`MAX_NESTING`] and alias expansion beyond
/// `serde-saphyr`'s default budget are refused with a [`JsonError::Syntax`] giving the line.
pub fn yaml_to_json(yaml: &str) -> Result<Value, JsonError> {
    let value: Yaml =
        serde_saphyr::from_str_with_options(yaml, yaml_options(yaml.len())).map_err(yaml_error)?;
    yaml_value_to_json(value)
}

/// How YAML is read, the same for a whole value ([`yaml_to_json`]) and for a document read one
/// resource at a time ([`read_resource_document`]): the parser's bounds and YAML 1.2's scalars.
fn yaml_options(len: usize) -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_NESTING;
    budget.flow_nesting_limit = MAX_NESTING;
    // The document's size is bounded by whoever read it (the file server's --max-config-bytes):
    // node, event and scalar counts grow with it, so only alias expansion needs its own bound
    // (kept at the library's defaults).
    budget.max_events = usize::MAX;
    budget.max_nodes = usize::MAX;
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.max(len);
    options.budget = Some(budget);
    // YAML 1.2 as serde_yaml read it: `yes`/`on` are strings, `.nan` is a number.
    options.strict_booleans = true;
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::PassThrough;
    options.leading_zero_numbers_as_strings = true;
    options.underscored_numbers_as_strings = true;
    options.with_snippet = false;
    options
}

/// A YAML parser's error as a [`JsonError::Syntax`] with its position; any of the parser's
/// nesting limits is reported in the same words as JSON's.
fn yaml_error(e: serde_saphyr::Error) -> JsonError {
    let location = e.location();
    let line = location.map(|l| usize::try_from(l.line()).unwrap_or(usize::MAX));
    let column = location.map(|l| usize::try_from(l.column()).unwrap_or(usize::MAX));
    let message = e.without_snippet().to_string();
    if message.contains("recursion limit") || message.contains("depth") {
        return too_deep(line.unwrap_or(0), column.unwrap_or(0));
    }
    JsonError::Syntax { line, column, message }
}

/// Reads JSON text into a value, refusing nesting deeper than [`MAX_NESTING`] (with the line)
/// before parsing, so the refusal costs one linear scan.
pub fn json_value_from_str(json: &str) -> Result<Value, JsonError> {
    check_json_nesting(json)?;
    serde_json::from_str(json).map_err(json_error)
}

/// A JSON parser's error as a [`JsonError::Syntax`] with its position.
fn json_error(e: serde_json::Error) -> JsonError {
    JsonError::Syntax {
        message: e.to_string(),
        line: (e.line() > 0).then_some(e.line()),
        column: (e.column() > 0).then_some(e.column()),
    }
}

/// One pass over JSON text counting open brackets outside strings: the first one past
/// [`MAX_NESTING`] is an error naming its line and column.
fn check_json_nesting(json: &str) -> Result<(), JsonError> {
    let (mut depth, mut line, mut column) = (0usize, 1usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        column += 1;
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '[' | '{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(too_deep(line, column));
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            '\n' => {
                line += 1;
                column = 0;
            }
            _ => {}
        }
    }
    Ok(())
}

fn too_deep(line: usize, column: usize) -> JsonError {
    JsonError::Syntax {
        message: format!("nesting deeper than {MAX_NESTING} levels at line {line} column {column}"),
        line: Some(line),
        column: Some(column),
    }
}

/// A YAML node as read, before it becomes JSON: keys keep their scalar kind (`80:` is a number)
/// and non-finite floats survive (JSON has no room for them).
enum Yaml {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    String(String),
    Sequence(Vec<Yaml>),
    Mapping(Vec<(Yaml, Yaml)>),
}

impl<'de> serde::Deserialize<'de> for Yaml {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(YamlVisitor)
    }
}

struct YamlVisitor;

impl<'de> serde::de::Visitor<'de> for YamlVisitor {
    type Value = Yaml;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a YAML node")
    }
    fn visit_unit<E>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }
    fn visit_none<E>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Yaml, D::Error> {
        serde::Deserialize::deserialize(d)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Yaml, E> {
        Ok(Yaml::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Yaml, E> {
        Ok(Yaml::Int(i.into()))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Yaml, E> {
        Ok(Yaml::Int(u.into()))
    }
    fn visit_i128<E>(self, i: i128) -> Result<Yaml, E> {
        Ok(Yaml::Int(i))
    }
    fn visit_u128<E: serde::de::Error>(self, u: u128) -> Result<Yaml, E> {
        i128::try_from(u).map(Yaml::Int).map_err(|_| E::custom("integer out of range"))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Yaml, E> {
        Ok(Yaml::Float(f))
    }
    fn visit_str<E>(self, s: &str) -> Result<Yaml, E> {
        Ok(Yaml::String(s.to_owned()))
    }
    fn visit_string<E>(self, s: String) -> Result<Yaml, E> {
        Ok(Yaml::String(s))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Yaml, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Yaml::Sequence(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Yaml, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Yaml::Mapping(entries))
    }
}

/// Converts a YAML value to JSON. Scalar keys that are not strings (`80:`, `true:`, `null:`)
/// become their text, as in Envoy's own YAML loader; `.nan` and `.inf` become the proto3 JSON
/// strings `"NaN"` and `"Infinity"`; tags are dropped.
fn yaml_value_to_json(value: Yaml) -> Result<Value, JsonError> {
    Ok(match value {
        Yaml::Null => Value::Null,
        Yaml::Bool(b) => Value::Bool(b),
        Yaml::Int(i) => i64::try_from(i)
            .map(Value::from)
            .or_else(|_| u64::try_from(i).map(Value::from))
            .unwrap_or_else(|_| yaml_float_to_json(i as f64)),
        Yaml::Float(f) => yaml_float_to_json(f),
        Yaml::String(s) => Value::String(s),
        Yaml::Sequence(items) => {
            Value::Array(items.into_iter().map(yaml_value_to_json).collect::<Result<_, _>>()?)
        }
        Yaml::Mapping(entries) => {
            let mut object = serde_json::Map::with_capacity(entries.len());
            for (key, value) in entries {
                object.insert(yaml_key(key)?, yaml_value_to_json(value)?);
            }
            Value::Object(object)
        }
    })
}

/// A YAML mapping key as a JSON object's key: its text (`80:` is `"80"`); a collection is
/// refused.
fn yaml_key(key: Yaml) -> Result<String, JsonError> {
    Ok(match key {
        Yaml::String(s) => s,
        Yaml::Null => "null".to_owned(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Int(i) => i.to_string(),
        Yaml::Float(f) => f.to_string(),
        Yaml::Sequence(_) | Yaml::Mapping(_) => {
            return Err(JsonError::Syntax {
                message: "a mapping key must be a scalar, not a collection".into(),
                line: None,
                column: None,
            });
        }
    })
}

/// A YAML float as JSON (non-finite floats as their proto3 JSON strings).
fn yaml_float_to_json(f: f64) -> Value {
    serde_json::Number::from_f64(f).map_or_else(
        || {
            Value::String(
                if f.is_nan() {
                    "NaN"
                } else if f > 0.0 {
                    "Infinity"
                } else {
                    "-Infinity"
                }
                .to_owned(),
            )
        },
        Value::Number,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::config::core::v3::{Address, SocketAddress, socket_address};
    use crate::pb::google::protobuf::Duration;
    use serde_json::json;

    fn address(port: u32) -> Address {
        Address {
            address: Some(crate::pb::envoy::config::core::v3::address::Address::SocketAddress(
                SocketAddress {
                    address: "127.0.0.1".to_owned(),
                    port_specifier: Some(socket_address::PortSpecifier::PortValue(port)),
                    ..Default::default()
                },
            )),
        }
    }

    #[test]
    fn output_is_canonical_proto3_json() {
        let json = to_json(&address(8080)).unwrap();
        assert_eq!(json, json!({"socketAddress": {"address": "127.0.0.1", "portValue": 8080}}));
        let duration = Duration { seconds: 5, nanos: 0 };
        assert_eq!(to_json(&duration).unwrap(), json!("5s"));
    }

    #[test]
    fn input_accepts_both_field_name_styles() {
        let snake: Address =
            from_json(&json!({"socket_address": {"address": "127.0.0.1", "port_value": 8080}}))
                .unwrap();
        let camel: Address =
            from_json(&json!({"socketAddress": {"address": "127.0.0.1", "portValue": 8080}}))
                .unwrap();
        assert_eq!(snake, address(8080));
        assert_eq!(camel, address(8080));
    }

    #[test]
    fn errors_are_classified() {
        let err = from_json::<Address>(&json!({"socket_address": {"adress": "x"}})).unwrap_err();
        assert_eq!(
            err,
            JsonError::Schema {
                path: "socket_address.adress".to_owned(),
                message: "unknown field".to_owned()
            }
        );
        assert_eq!(err.to_string(), "socket_address.adress: unknown field");

        let err = from_json::<Address>(&json!({"bogus": 1})).unwrap_err();
        assert_eq!(err.to_string(), "bogus: unknown field");

        let err = any_from_json(&json!({"@type": "type.googleapis.com/no.Such"})).unwrap_err();
        assert_eq!(
            err,
            JsonError::UnknownType { path: String::new(), type_name: "no.Such".to_owned() }
        );
        let err = any_from_json(&json!({"address": "x"})).unwrap_err();
        assert_eq!(err, JsonError::MissingType { path: String::new() });
        assert_eq!(err.to_string(), "missing @type");

        let err = from_json_str::<Address>("{\"socket_address\": ").unwrap_err();
        assert!(matches!(err, JsonError::Syntax { line: Some(1), .. }), "{err:?}");
    }

    #[test]
    fn any_round_trips_with_type() {
        let any = Any { type_url: Address::type_url(), value: address(9000).encode_to_vec() };
        let json = any_to_json(&any).unwrap();
        assert_eq!(
            json,
            json!({
                "@type": "type.googleapis.com/envoy.config.core.v3.Address",
                "socketAddress": {"address": "127.0.0.1", "portValue": 9000}
            })
        );
        let back = any_from_json(&json).unwrap();
        assert_eq!(back.type_url, any.type_url);
        assert_eq!(Address::decode(back.value.as_slice()).unwrap(), address(9000));

        let unknown = Any { type_url: "type.googleapis.com/no.Such".to_owned(), value: vec![] };
        assert!(matches!(any_to_json(&unknown), Err(JsonError::UnknownType { .. })));
    }

    #[test]
    fn yaml_merge_keys_apply() {
        let yaml =
            "base: &base {address: 127.0.0.1}\nsocket_address:\n  <<: *base\n  port_value: 1\n";
        // `base` is not a field of Address: the error proves the document was read.
        let err = from_yaml_str::<Address>(yaml).unwrap_err();
        assert_eq!(err.to_string(), "base: unknown field");
        let yaml = "socket_address:\n  <<: {address: 127.0.0.1}\n  port_value: 1\n";
        assert_eq!(from_yaml_str::<Address>(yaml).unwrap(), address(1));
    }

    #[test]
    fn yaml_scalars_become_json() {
        let value =
            yaml_to_json("1: a\ntrue: b\nnull: c\nx: [.nan, .inf, -.inf, 1.5, -2, !tag 3]\n")
                .unwrap();
        assert_eq!(
            value,
            json!({"1": "a", "true": "b", "null": "c", "x": ["NaN", "Infinity", "-Infinity", 1.5, -2, 3]})
        );
        assert!(matches!(yaml_to_json("? [1, 2]\n: x\n"), Err(JsonError::Syntax { .. })));
    }

    #[test]
    fn deep_nesting_is_refused_with_its_line() {
        // 100k levels in flow style, then block style: refused at the first level past the bound.
        let flow = format!("resources:\n  - {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let err = yaml_to_json(&flow).unwrap_err();
        assert!(matches!(err, JsonError::Syntax { line: Some(2), .. }), "{err:?}");
        assert!(err.to_string().contains("nesting deeper than 100"), "{err}");
        let mut block = String::new();
        for level in 0..=MAX_NESTING {
            block.push_str(&format!("{}k{level}:\n", "  ".repeat(level)));
        }
        let err = yaml_to_json(&block).unwrap_err();
        assert!(err.to_string().contains("nesting deeper than 100"), "{err}");
        let err = json_value_from_str(&format!("{{\"a\":\n{}", "[".repeat(100_000))).unwrap_err();
        assert!(matches!(err, JsonError::Syntax { line: Some(2), .. }), "{err:?}");
        assert!(err.to_string().contains("nesting deeper than 100"), "{err}");
        // At the bound, both still parse.
        let ok = format!("{}{}", "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
        assert!(json_value_from_str(&ok).is_ok());
        assert!(yaml_to_json(&ok).is_ok());
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut yaml = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let p = i - 1;
            yaml.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert!(matches!(yaml_to_json(&yaml), Err(JsonError::Syntax { .. })));
    }
}
