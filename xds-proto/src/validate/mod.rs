//! Validation against the `validate.rules` annotations of Envoy's protos (protoc-gen-validate).
//!
//! Envoy checks every resource it receives against these rules and NACKs the whole response
//! when one fails: a listener with `port_value: 99999999`, a virtual host without domains, an
//! HTTP connection manager with an unknown codec. Checking the same rules before serving turns
//! a fleet-wide NACK into an error at load time, with the field named.
//!
//! The rules are read from the options of the [`crate::descriptor_pool`] (the descriptors of the
//! protos `envoy-types` ships, `validate/validate.proto` included) and compiled once per message
//! type on first use (about 50 ms, once per process). The walk then looks only into the
//! fields that carry a rule or lead to one, and into the payload of every `Any` whose type the
//! pool knows (`typed_config` of filters, TLS contexts, ...); an `Any` of an unknown type is not
//! checked.
//!
//! The supported rules and an example are in [`validate`]'s documentation.

mod plan;
mod rules;
mod text;
mod walk;

use std::fmt;

use prost::{Message, Name};
use prost_reflect::{DynamicMessage, ReflectMessage};

use crate::descriptor::descriptor_pool;
use crate::encoded::EncodedResource;
use crate::pb::google::protobuf::Any;

/// At most this many violations are reported per validated message; the rest are counted as
/// [`ValidationErrors::is_truncated`].
pub const MAX_VIOLATIONS: usize = 20;

/// Messages nested deeper than this are refused (protobuf decoding stops at 100 too).
pub const MAX_DEPTH: usize = 100;

/// One broken rule: where, and which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    path: String,
    rule: String,
}

impl Violation {
    /// The field path from the validated message, in proto field names: `filter_chains[0].
    /// filters[0].typed_config.route_config.virtual_hosts[0].domains`. Inside an `Any`, the
    /// path goes on with the payload's fields. Empty for the message itself.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The broken rule, e.g. `value must be less than or equal to 65535`.
    pub fn rule(&self) -> &str {
        &self.rule
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.rule)
        } else {
            write!(f, "{}: {}", self.path, self.rule)
        }
    }
}

/// The rules a message breaks: at least one, at most [`MAX_VIOLATIONS`], in field order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationErrors {
    violations: Vec<Violation>,
    truncated: bool,
}

impl ValidationErrors {
    /// The violations found, in the order of the message's fields.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Whether more violations were found than [`MAX_VIOLATIONS`] (the walk stopped there).
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    fn single(rule: String) -> Self {
        ValidationErrors {
            violations: vec![Violation { path: String::new(), rule }],
            truncated: false,
        }
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, violation) in self.violations.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{violation}")?;
        }
        if self.truncated {
            f.write_str("; and more")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

/// Validates a generated message (any type of [`crate::pb`]) against its `validate.rules`.
///
/// A type the descriptor pool does not know (a custom type from elsewhere) has no rules here
/// and passes. [`validate_any`], [`validate_encoded`] and [`validate_dynamic`] do the same for
/// the other shapes a resource takes.
///
/// Envoy checks the same rules on every resource it receives and NACKs the whole response when
/// one fails; checking them before serving turns a fleet-wide NACK into an error where the
/// resource is built. The payload of every `Any` whose type the [`crate::descriptor_pool`]
/// knows (`typed_config` of filters, TLS contexts, ...) is validated too; an `Any` of an
/// unknown type is not. The rules of the whole pool are compiled on the first call (about
/// 50 ms, once per process).
///
/// Supported: `message` (`required`, `skip`), every numeric kind (`const`, `gt`, `gte`, `lt`,
/// `lte` with PGV's inside/outside ranges, `in`, `not_in`, `ignore_empty`), `bool.const`,
/// `string` (lengths in runes and bytes, `pattern`, `prefix`, `suffix`, `contains`,
/// `not_contains`, `in`, `not_in`, the well-known formats and the HTTP header regexes, strict or
/// not), `bytes`, `enum` (`defined_only`, `const`, `in`, `not_in`), `repeated` (`min_items`,
/// `max_items`, `unique`, `items`), `map` (`min_pairs`, `max_pairs`, `keys`, `values`),
/// `any` (`required`, `in`, `not_in`), `duration` and `timestamp` bounds, the wrapper types
/// (`UInt32Value`, ... take their scalar's rules), oneof `(validate.required)` and the message
/// options `(validate.disabled)` / `(validate.ignored)`. Not checked: the clock-dependent
/// timestamp rules (`lt_now`, `gt_now`, `within`) and `map.no_sparse`.
///
/// ```
/// use xds_proto::pb::envoy::config::core::v3::{address, socket_address, Address, SocketAddress};
///
/// let address = Address {
///     address: Some(address::Address::SocketAddress(SocketAddress {
///         address: "10.0.0.1".into(),
///         port_specifier: Some(socket_address::PortSpecifier::PortValue(99_999_999)),
///         ..Default::default()
///     })),
/// };
/// let errors = xds_proto::validate(&address).unwrap_err();
/// assert_eq!(errors.violations()[0].path(), "socket_address.port_value");
/// assert_eq!(errors.violations()[0].rule(), "value must be less than or equal to 65535");
/// ```
pub fn validate<M: Message + Name>(message: &M) -> Result<(), ValidationErrors> {
    let Some(descriptor) = descriptor_pool().get_message_by_name(&M::full_name()) else {
        return Ok(());
    };
    match DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice()) {
        Ok(dynamic) => walk(&dynamic),
        Err(error) => Err(ValidationErrors::single(format!("cannot decode: {error}"))),
    }
}

/// Validates a [`DynamicMessage`]. A message of another pool is looked up in the crate's pool
/// by name (and passes if it is not there).
pub fn validate_dynamic(message: &DynamicMessage) -> Result<(), ValidationErrors> {
    let descriptor = message.descriptor();
    if descriptor.parent_pool() == descriptor_pool() {
        return walk(message);
    }
    let Some(ours) = descriptor_pool().get_message_by_name(descriptor.full_name()) else {
        return Ok(());
    };
    match DynamicMessage::decode(ours, message.encode_to_vec().as_slice()) {
        Ok(dynamic) => walk(&dynamic),
        Err(error) => Err(ValidationErrors::single(format!("cannot decode: {error}"))),
    }
}

/// Validates the message packed in `any`; an unknown type passes.
pub fn validate_any(any: &Any) -> Result<(), ValidationErrors> {
    validate_bytes(
        any.type_url.rsplit_once('/').map_or(&*any.type_url, |(_, name)| name),
        &any.value,
    )
}

/// Validates an encoded resource (its type URL and bytes), as a loader does before
/// `set_snapshot`; an unknown type passes.
pub fn validate_encoded(resource: &EncodedResource) -> Result<(), ValidationErrors> {
    validate_bytes(resource.type_url().message_name(), resource.value())
}

/// Validates `bytes` as the message named `message_name` (`envoy.config.cluster.v3.Cluster`).
fn validate_bytes(message_name: &str, bytes: &[u8]) -> Result<(), ValidationErrors> {
    let Some(descriptor) = descriptor_pool().get_message_by_name(message_name) else {
        return Ok(());
    };
    match DynamicMessage::decode(descriptor, bytes) {
        Ok(dynamic) => walk(&dynamic),
        Err(error) => {
            Err(ValidationErrors::single(format!("cannot decode {message_name}: {error}")))
        }
    }
}

fn walk(message: &DynamicMessage) -> Result<(), ValidationErrors> {
    let mut walker = walk::Walker::new();
    walker.message(message);
    if walker.violations.is_empty() {
        Ok(())
    } else {
        Err(ValidationErrors { violations: walker.violations, truncated: walker.truncated })
    }
}
