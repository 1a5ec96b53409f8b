//! Hiding secrets in the JSON form of resources, decided by the API's own annotations.
//!
//! Envoy's protos mark every field that carries a secret with the field option
//! `(udpa.annotations.sensitive) = true`: a TLS certificate's private key, PKCS#12 bundle and
//! password, a private key provider's config, generic secrets, session ticket keys, Redis
//! passwords, AWS credentials, basic-auth users, API keys, ... Envoy's own `/config_dump` redacts
//! exactly those, and so does everything here. A list of field names would miss every secret
//! added to the API after it was written (and hide harmless fields that share a name); the
//! annotation travels with the API.
//!
//! On top of the annotation, some message types are secrets as a whole ([`SECRET_TYPES`]: the
//! SDS `Secret`): only their `name` is shown, wherever they appear.
//!
//! The walk works on the proto3 JSON of a message (as [`crate::to_json`] renders it, or as a
//! configuration file spells it: both `snake_case` and lowerCamelCase field names are matched),
//! following `Any` payloads by their `@type`. (`TypedStruct`, whose payload is a `Struct`, is
//! not in the pool: it is an unknown `@type` and hidden whole.) It
//! visits only the fields that can lead to a sensitive field (computed once for the whole
//! [`crate::descriptor_pool`]), so redacting a resource that holds no secret costs about one
//! pass over its few message-typed fields.
//!
//! A redacted value keeps its shape and loses its content, as in Envoy: every string, number and
//! boolean under it becomes `"[redacted]"`; object keys (a `DataSource`'s `inline_string`, a
//! map's keys) and an `Any`'s `@type` stay, so an operator can still see *where* a secret comes
//! from. What cannot be understood (an `@type` not in the pool, nesting past
//! [`MAX_REDACT_DEPTH`]) is hidden whole: the walk fails closed.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use prost::{Message, Name};
use prost_reflect::{
    DescriptorPool, ExtensionDescriptor, FieldDescriptor, Kind, MessageDescriptor,
};
use serde_json::Value;

use crate::json::JsonError;
use crate::pb::google::protobuf::Any;

/// The text every redacted string, number and boolean is replaced with (Envoy's spelling).
pub const REDACTED: &str = "[redacted]";

/// Message types that are secrets as a whole: wherever one appears (a resource of its own, or
/// packed in an `Any`), only its `name` is shown.
pub const SECRET_TYPES: &[&str] = &["envoy.extensions.transport_sockets.tls.v3.Secret"];

/// How deep the walk follows objects and arrays. JSON rendered from a decoded message stays far
/// below (prost refuses nesting past 100 messages); anything deeper is hidden whole rather than
/// walked (convention 18: what a peer controls is bounded).
pub const MAX_REDACT_DEPTH: usize = 256;

/// The field option that marks a secret.
const SENSITIVE: &str = "udpa.annotations.sensitive";

/// Well-known types whose JSON form is not an object of their fields: an `Any` packing one
/// writes `{"@type": ..., "value": <the special form>}`.
const SPECIAL_JSON: &[&str] = &[
    "google.protobuf.Any",
    "google.protobuf.Duration",
    "google.protobuf.Timestamp",
    "google.protobuf.FieldMask",
    "google.protobuf.Struct",
    "google.protobuf.Value",
    "google.protobuf.ListValue",
    "google.protobuf.NullValue",
    "google.protobuf.DoubleValue",
    "google.protobuf.FloatValue",
    "google.protobuf.Int64Value",
    "google.protobuf.UInt64Value",
    "google.protobuf.Int32Value",
    "google.protobuf.UInt32Value",
    "google.protobuf.BoolValue",
    "google.protobuf.StringValue",
    "google.protobuf.BytesValue",
];

/// The proto3 JSON of `msg` ([`crate::to_json`]) with every sensitive field redacted.
pub fn to_json_redacted<M: Message + Name>(msg: &M) -> Result<Value, JsonError> {
    let mut value = crate::json::to_json(msg)?;
    redact_json(&M::full_name(), &mut value);
    Ok(value)
}

/// The JSON form of an `Any` ([`crate::any_to_json`]) with every sensitive field of the packed
/// message redacted (a [`SECRET_TYPES`] message shows its `name` only).
pub fn any_to_json_redacted(any: &Any) -> Result<Value, JsonError> {
    let mut value = crate::json::any_to_json(any)?;
    redact_json("google.protobuf.Any", &mut value);
    Ok(value)
}

/// Redacts, in place, every sensitive field of `value`, the JSON form of a message of type
/// `message` (a full name such as `envoy.config.listener.v3.Listener`, or `google.protobuf.Any`
/// for an object with an `@type`). A `message` not in the pool hides `value` whole.
pub fn redact_json(message: &str, value: &mut Value) {
    Plans::get().walk(message, value, 0);
}

/// Whether the pool marks `field` with `(udpa.annotations.sensitive) = true`.
pub fn is_sensitive(field: &FieldDescriptor) -> bool {
    static EXTENSION: OnceLock<Option<ExtensionDescriptor>> = OnceLock::new();
    EXTENSION
        .get_or_init(|| crate::descriptor_pool().get_extension_by_name(SENSITIVE))
        .as_ref()
        .is_some_and(|ext| flag(field, ext))
}

fn flag(field: &FieldDescriptor, ext: &ExtensionDescriptor) -> bool {
    let options = field.options();
    options.has_extension(ext) && options.get_extension(ext).as_bool() == Some(true)
}

/// What the walk does with one field.
#[derive(Debug)]
enum Action {
    /// A sensitive field: its whole value is redacted.
    Hide,
    /// A field whose values (items, map values) are messages of this type, which can hold a
    /// sensitive field.
    Walk { element: Box<str>, shape: Shape },
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    Singular,
    List,
    Map,
}

/// One field the walk must look at, under both of its JSON spellings.
#[derive(Debug)]
struct FieldPlan {
    json_name: Box<str>,
    name: Box<str>,
    action: Action,
}

/// Per message type (only those that can hold a sensitive field), the fields to look at.
struct Plans {
    by_name: HashMap<Box<str>, Vec<FieldPlan>>,
    /// Every message type in the pool, to tell "holds no secret" from "unknown".
    known: HashSet<Box<str>>,
}

impl Plans {
    fn get() -> &'static Plans {
        static PLANS: OnceLock<Plans> = OnceLock::new();
        PLANS.get_or_init(|| Plans::compile(crate::descriptor_pool()))
    }

    fn compile(pool: &DescriptorPool) -> Plans {
        let ext = pool.get_extension_by_name(SENSITIVE);
        let known: HashSet<Box<str>> = pool.all_messages().map(|m| m.full_name().into()).collect();
        // A type is active when it has a sensitive field, is an `Any` (which can pack anything),
        // is a secret type, or has a field of an active type: a fixpoint.
        let mut active: HashSet<Box<str>> = pool
            .all_messages()
            .filter(|m| {
                m.full_name() == "google.protobuf.Any"
                    || SECRET_TYPES.contains(&m.full_name())
                    || ext.as_ref().is_some_and(|ext| m.fields().any(|f| flag(&f, ext)))
            })
            .map(|m| m.full_name().into())
            .collect();
        loop {
            let before = active.len();
            for message in pool.all_messages() {
                if active.contains(message.full_name()) {
                    continue;
                }
                if message
                    .fields()
                    .any(|f| element(&f).is_some_and(|m| active.contains(m.full_name())))
                {
                    active.insert(message.full_name().into());
                }
            }
            if active.len() == before {
                break;
            }
        }
        let mut by_name = HashMap::with_capacity(active.len());
        for message in pool.all_messages().filter(|m| active.contains(m.full_name())) {
            let fields = message
                .fields()
                .filter_map(|field| {
                    let action = if ext.as_ref().is_some_and(|ext| flag(&field, ext)) {
                        Action::Hide
                    } else {
                        let element = element(&field).filter(|m| active.contains(m.full_name()))?;
                        let shape = if field.is_map() {
                            Shape::Map
                        } else if field.is_list() {
                            Shape::List
                        } else {
                            Shape::Singular
                        };
                        Action::Walk { element: element.full_name().into(), shape }
                    };
                    Some(FieldPlan {
                        json_name: field.json_name().into(),
                        name: field.name().into(),
                        action,
                    })
                })
                .collect();
            by_name.insert(message.full_name().into(), fields);
        }
        Plans { by_name, known }
    }

    /// Redacts `value`, the JSON of a `message`.
    fn walk(&self, message: &str, value: &mut Value, depth: usize) {
        if depth >= MAX_REDACT_DEPTH {
            return hide(value);
        }
        if message == "google.protobuf.Any" {
            return self.any(value, depth);
        }
        if SECRET_TYPES.contains(&message) {
            return hide_all_but_name(value);
        }
        let Some(fields) = self.by_name.get(message) else {
            if !self.known.contains(message) {
                hide(value);
            }
            return;
        };
        // An active type's JSON is an object; anything else is not understood.
        let Value::Object(object) = value else { return hide(value) };
        for field in fields {
            for key in [&field.json_name, &field.name] {
                let Some(v) = object.get_mut(&**key) else { continue };
                match &field.action {
                    Action::Hide => hide(v),
                    Action::Walk { element, shape: Shape::Singular } => {
                        self.walk(element, v, depth + 1);
                    }
                    Action::Walk { element, shape: Shape::List } => {
                        if let Value::Array(items) = v {
                            for item in items {
                                self.walk(element, item, depth + 1);
                            }
                        }
                    }
                    Action::Walk { element, shape: Shape::Map } => {
                        if let Value::Object(entries) = v {
                            for item in entries.values_mut() {
                                self.walk(element, item, depth + 1);
                            }
                        }
                    }
                }
                if field.json_name == field.name {
                    break;
                }
            }
        }
    }

    /// `{"@type": URL, ...fields of the packed message}` (or `"value"` for a well-known type).
    fn any(&self, value: &mut Value, depth: usize) {
        if depth >= MAX_REDACT_DEPTH {
            return hide(value);
        }
        let Value::Object(object) = value else { return hide(value) };
        let Some(packed) =
            object.get("@type").and_then(Value::as_str).map(|url| type_name(url).to_owned())
        else {
            // No `@type`: an empty `Any` (`{}`) holds nothing; anything else is not understood.
            if !object.is_empty() {
                hide(value);
            }
            return;
        };
        if !self.known.contains(packed.as_str()) {
            return hide(value);
        }
        if packed == "google.protobuf.Any" {
            if let Some(inner) = object.get_mut("value") {
                self.any(inner, depth + 1);
            }
        } else if !SPECIAL_JSON.contains(&packed.as_str()) {
            self.walk(&packed, value, depth + 1);
        }
    }
}

/// The message type of a field's values: the field's own, a list's items', a map's values'.
fn element(field: &FieldDescriptor) -> Option<MessageDescriptor> {
    let Kind::Message(message) = field.kind() else { return None };
    if field.is_map() {
        return match message.map_entry_value_field().kind() {
            Kind::Message(value) => Some(value),
            _ => None,
        };
    }
    Some(message)
}

/// The message name of a type URL: what follows its last `/`.
fn type_name(url: &str) -> &str {
    url.rsplit_once('/').map_or(url, |(_, name)| name)
}

/// Replaces every string, number and boolean under `value` by [`REDACTED`], keeping object keys,
/// array lengths and `@type`s. Iterative, so no nesting can exhaust the stack.
fn hide(value: &mut Value) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::Null => {}
            Value::Bool(_) | Value::Number(_) | Value::String(_) => {
                *value = Value::String(REDACTED.to_owned());
            }
            Value::Array(items) => pending.extend(items.iter_mut()),
            Value::Object(object) => {
                pending.extend(object.iter_mut().filter(|(k, _)| *k != "@type").map(|(_, v)| v));
            }
        }
    }
}

/// A [`SECRET_TYPES`] message: everything but `name` (and `@type`) is hidden.
fn hide_all_but_name(value: &mut Value) {
    let Value::Object(object) = value else { return hide(value) };
    for (key, v) in object.iter_mut() {
        if key != "name" && key != "@type" {
            hide(v);
        }
    }
}
