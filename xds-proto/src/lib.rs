//! Envoy v3 xDS types for the control plane: the generated messages and services, the
//! resource-type registry, resource names and references, encode-once resources and proto3
//! JSON/YAML transcoding.
//!
//! [`redact_json`] hides every field the API marks `(udpa.annotations.sensitive)` (and whole
//! `Secret`s) in a resource's JSON, for anything that shows resources to people.
//!
//! [`validate`] checks a resource against the `validate.rules` annotations of Envoy's protos, as
//! Envoy will before accepting it.
//!
//! This crate holds no state and does no I/O. It is the only place in the workspace that spells
//! type URL strings: everything else speaks [`ResourceType`] and [`TypeUrl`].
//!
//! ```
//! use xds_proto::pb::envoy::config::cluster::v3::Cluster;
//! use xds_proto::{EncodedResource, ResourceType};
//!
//! // From Envoy-style YAML, with the field path named on error.
//! let cluster: Cluster = xds_proto::from_yaml_str("name: backend\nconnect_timeout: 1s\n")?;
//! let bad = xds_proto::from_yaml_str::<Cluster>("name: backend\nconect_timeout: 1s\n");
//! assert!(bad.unwrap_err().to_string().contains("conect_timeout"));
//!
//! // Encoded once; the version is a hash of the content, the same in every process.
//! let encoded = EncodedResource::new(&cluster)?;
//! assert_eq!(encoded.type_url().builtin(), Some(ResourceType::Cluster));
//! assert_eq!(encoded.version(), EncodedResource::new(&cluster)?.version());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod builders;
mod canonical;
mod descriptor;
mod encoded;
mod json;
mod redact;
mod refs;
mod resource;
mod resource_type;
mod services;
mod validate;

/// The generated Envoy v3 messages and tonic services, re-exported from the `envoy-types` crate
/// (the same types tonic's own `xds-client` uses).
pub use envoy_types::pb;

pub use canonical::canonical_bytes;
pub use descriptor::descriptor_pool;
pub use encoded::{EncodeError, EncodedResource};
pub use json::*;
pub use redact::{
    MAX_REDACT_DEPTH, REDACTED, SECRET_TYPES, any_to_json_redacted, is_sensitive, redact_json,
    to_json_redacted,
};
pub use refs::*;
pub use resource::XdsResource;
pub use resource_type::{CustomType, ResourceType, TYPE_URL_PREFIX, TypeUrl};
pub use services::{ADS_DELTA_METHOD, ADS_SERVICE, ADS_SOTW_METHOD, CSDS_SERVICE};
pub use validate::{
    MAX_DEPTH as MAX_VALIDATION_DEPTH, MAX_VIOLATIONS, ValidationErrors, Violation, validate,
    validate_any, validate_dynamic, validate_encoded,
};

/// `xdstp://` resource names (rule C1): parsing, the normal form, glob collections. The parser
/// lives in the protocol core, which normalizes every name a client sends; it is re-exported
/// here for code that builds or checks resource names.
pub use xds_core::xdstp;

pub use prost;
pub use prost_reflect;
