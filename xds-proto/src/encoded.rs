//! Encode-once resources: the bytes every stream shares, with a content-hash version.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;

use crate::canonical::canonical_bytes;
use crate::pb::google::protobuf::Any;
use crate::resource::XdsResource;
use crate::resource_type::{ResourceType, TypeUrl};

/// A resource encoded once, shared by every stream and node group that serves it.
///
/// Cloning is a reference-count increment. The bytes are the canonical encoding of the message
/// (map entries sorted, see [`canonical_bytes`]), so equal content gives equal bytes and an equal
/// version in every process and on every replica (rule S16), whatever order its maps were built in.
#[derive(Clone)]
pub struct EncodedResource(Arc<Inner>);

struct Inner {
    type_url: TypeUrl,
    name: Arc<str>,
    version: Box<str>,
    ttl: Option<Duration>,
    /// The resource as the body of the delta `Resource` message that carries it (see
    /// [`EncodedResource::delta_entry`]), its value among its bytes.
    entry: Bytes,
    /// Where the value is in `entry`: the bytes are kept once.
    value: std::ops::Range<usize>,
}

impl Inner {
    fn value_bytes(&self) -> &[u8] {
        &self.entry[self.value.clone()]
    }

    /// An `Inner` with its delta entry written: `version = 1`, `resource = 2` (an `Any` of
    /// `type_url = 1`, `value = 2`), `name = 3`, `ttl = 6`, the order a prost encoding has.
    fn new(
        type_url: TypeUrl,
        name: Arc<str>,
        version: Box<str>,
        value: &[u8],
        ttl: Option<Duration>,
    ) -> Inner {
        use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
        let url = type_url.as_str();
        let field = |tag: u32, len: usize| key_len(tag) + encoded_len_varint(len as u64) + len;
        let text = |tag: u32, s: &str| if s.is_empty() { 0 } else { field(tag, s.len()) };
        // `google.protobuf.Duration { seconds = 1, nanos = 2 }`, zero fields left out.
        let duration = ttl.map(|ttl| {
            let (seconds, nanos) = (ttl.as_secs(), u64::from(ttl.subsec_nanos()));
            let part = |n: u64| if n == 0 { 0 } else { 1 + encoded_len_varint(n) };
            (seconds, nanos, part(seconds) + part(nanos))
        });
        let any = text(1, url) + field(2, value.len());
        let len = text(1, &version)
            + field(2, any)
            + text(3, &name)
            + duration.map_or(0, |(_, _, len)| field(6, len));
        let mut entry = Vec::with_capacity(len);
        let put_len = |tag: u32, len: usize, entry: &mut Vec<u8>| {
            encode_key(tag, WireType::LengthDelimited, entry);
            encode_varint(len as u64, entry);
        };
        let put_text = |tag: u32, s: &str, entry: &mut Vec<u8>| {
            if !s.is_empty() {
                put_len(tag, s.len(), entry);
                entry.extend_from_slice(s.as_bytes());
            }
        };
        put_text(1, &version, &mut entry);
        put_len(2, any, &mut entry);
        put_text(1, url, &mut entry);
        put_len(2, value.len(), &mut entry);
        let value_at = entry.len();
        entry.extend_from_slice(value);
        put_text(3, &name, &mut entry);
        if let Some((seconds, nanos, len)) = duration {
            put_len(6, len, &mut entry);
            for (tag, n) in [(1, seconds), (2, nanos)] {
                if n != 0 {
                    encode_key(tag, WireType::Varint, &mut entry);
                    encode_varint(n, &mut entry);
                }
            }
        }
        debug_assert_eq!(entry.len(), len);
        let value = value_at..value_at + value.len();
        Inner { type_url, name, version, ttl, entry: Bytes::from(entry), value }
    }
}

/// Why a message could not become an [`EncodedResource`].
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// The message has no name field of its own and none was given (an LEDS `LbEndpoint`).
    #[error("a {type_url} resource carries no name: give one with `EncodedResource::named`")]
    MissingName {
        /// The resource's type URL.
        type_url: String,
    },
    /// The resource's name is empty.
    #[error("a {type_url} resource has an empty name")]
    EmptyName {
        /// The resource's type URL.
        type_url: String,
    },
    /// The resource's name is an `xdstp://` name that does not parse, or whose type segment is
    /// not the resource's type (rule C1).
    #[error("a {type_url} resource has an invalid xdstp name {name:?}: {error}")]
    InvalidName {
        /// The resource's type URL.
        type_url: String,
        /// The name as given.
        name: String,
        /// What is wrong with it.
        error: crate::xdstp::XdstpError,
    },
    /// The bytes of an `Any` are not a valid message of its type, or its type is unknown.
    #[error("cannot read a {type_url} resource: {message}")]
    Decode {
        /// The resource's type URL.
        type_url: String,
        /// What went wrong.
        message: String,
    },
}

impl EncodedResource {
    /// Encodes a resource named by its own name field (`cluster_name` for a ClusterLoadAssignment).
    pub fn new<M: XdsResource>(message: &M) -> Result<Self, EncodeError> {
        let name = message
            .resource_name()
            .ok_or_else(|| EncodeError::MissingName { type_url: M::type_url() })?;
        Self::named(name, message)
    }

    /// Encodes a resource under an explicit name (for messages without a name field).
    pub fn named<M: XdsResource>(name: &str, message: &M) -> Result<Self, EncodeError> {
        Self::from_encoded(TypeUrl::of::<M>(), name, &message.encode_to_vec())
    }

    /// Wraps bytes already encoded as a message of `type_url` (from an `Any`, a file, another
    /// cache). The bytes are canonicalized before hashing, so the version does not depend on how
    /// the producer ordered its map entries.
    pub fn from_encoded(
        type_url: TypeUrl,
        name: &str,
        encoded: &[u8],
    ) -> Result<Self, EncodeError> {
        if name.is_empty() {
            return Err(EncodeError::EmptyName { type_url: type_url.as_str().to_owned() });
        }
        let name = normal_name(&type_url, name)?;
        let canonical = canonical_bytes(type_url.message_name(), encoded);
        let version = content_version(&canonical);
        Ok(EncodedResource(Arc::new(Inner::new(
            type_url,
            Arc::from(&*name),
            version,
            &canonical,
            None,
        ))))
    }

    /// Wraps a resource packed in an `Any` (from a configuration file, another server, ...),
    /// named by its own name field. Built-in types are decoded to find the name; custom types are
    /// read through the descriptor pool (their name field is `name`).
    pub fn from_any(any: &Any) -> Result<Self, EncodeError> {
        let type_url = TypeUrl::parse(&any.type_url);
        let decode_error = |e: &dyn fmt::Display| EncodeError::Decode {
            type_url: any.type_url.clone(),
            message: e.to_string(),
        };
        let name = match type_url.builtin() {
            Some(t) => builtin_name(t, &any.value).map_err(|e| decode_error(&e))?,
            None => {
                let descriptor = crate::descriptor::descriptor_pool()
                    .get_message_by_name(type_url.message_name())
                    .ok_or_else(|| decode_error(&"the type is not in the descriptor pool"))?;
                let message =
                    prost_reflect::DynamicMessage::decode(descriptor, any.value.as_slice())
                        .map_err(|e| decode_error(&e))?;
                message.get_field_by_name("name").and_then(|v| v.as_str().map(str::to_owned))
            }
        };
        let name =
            name.ok_or_else(|| EncodeError::MissingName { type_url: any.type_url.clone() })?;
        Self::from_encoded(type_url, &name, &any.value)
    }

    /// The same resource with a time to live: clients drop it unless a response or a heartbeat
    /// renews it in time (`Resource.ttl`). The TTL does not change the version. The result
    /// keeps its own copy of the bytes (its [`delta_entry`](Self::delta_entry) carries the TTL).
    #[must_use]
    pub fn with_ttl(self, ttl: Duration) -> Self {
        let inner = &self.0;
        EncodedResource(Arc::new(Inner::new(
            inner.type_url.clone(),
            inner.name.clone(),
            inner.version.clone(),
            inner.value_bytes(),
            Some(ttl),
        )))
    }

    /// The resource's name; an `xdstp://` name in its normal form (rule C1), so that caches
    /// keyed by it match a client's spelling however either ordered the context parameters.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The name as a shared string: caches index resources by it without copying it.
    pub fn shared_name(&self) -> Arc<str> {
        self.0.name.clone()
    }

    /// The content-hash version: 16 lower-case hex digits of the XXH3-64 of the canonical bytes.
    pub fn version(&self) -> &str {
        &self.0.version
    }

    /// The resource's type.
    pub fn type_url(&self) -> &TypeUrl {
        &self.0.type_url
    }

    /// The canonical encoding of the message (the `value` of its `Any`).
    pub fn value(&self) -> &[u8] {
        self.0.value_bytes()
    }

    /// The time to live, if any.
    pub fn ttl(&self) -> Option<Duration> {
        self.0.ttl
    }

    /// The body of the `envoy.service.discovery.v3.Resource` message that carries the resource
    /// in a delta response, under its own name, with no alias: `version`, `resource` (the
    /// [`any_field`](Self::any_field)), `name`, and `ttl` when it has one. Written once, when the
    /// resource is made, so that a response is a copy of these bytes per resource rather than
    /// five fields written (a joining client of a snapshot of its own is sent 20,000 of them).
    /// The resource's [`value`](Self::value) is a slice of it: the bytes are kept once.
    pub fn delta_entry(&self) -> &Bytes {
        &self.0.entry
    }

    /// The resource as an `Any` field of number 2, key and length included: an entry of a SotW
    /// `DiscoveryResponse.resources` as it is written for a resource without a TTL, and the
    /// `resource` field within [`delta_entry`](Self::delta_entry) (a slice of it).
    pub fn any_field(&self) -> &[u8] {
        let version = &self.0.version;
        let start = if version.is_empty() {
            0
        } else {
            1 + prost::encoding::encoded_len_varint(version.len() as u64) + version.len()
        };
        &self.0.entry[start..self.0.value.end]
    }

    /// The resource as a `google.protobuf.Any` (copies the bytes; the server's send path does not
    /// use this).
    pub fn to_any(&self) -> Any {
        Any { type_url: self.0.type_url.as_str().to_owned(), value: self.value().to_vec() }
    }

    /// Decodes the resource back into its message type.
    pub fn decode<M: Message + Default>(&self) -> Result<M, prost::DecodeError> {
        M::decode(self.value())
    }

    /// Whether two handles share the same allocation (no re-encode happened between them).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl PartialEq for EncodedResource {
    /// Equal when type, name, version and TTL are equal: the version is a hash of the content.
    fn eq(&self, other: &Self) -> bool {
        self.ptr_eq(other)
            || (self.0.type_url == other.0.type_url
                && self.0.name == other.0.name
                && self.0.version == other.0.version
                && self.0.ttl == other.0.ttl)
    }
}

impl Eq for EncodedResource {}

impl fmt::Debug for EncodedResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncodedResource")
            .field("type_url", &self.0.type_url.as_str())
            .field("name", &self.0.name)
            .field("version", &self.0.version)
            .field("bytes", &self.0.value.len())
            .field("ttl", &self.0.ttl)
            .finish()
    }
}

impl xds_core::Resource for EncodedResource {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn version(&self) -> &str {
        &self.0.version
    }

    fn ttl(&self) -> Option<Duration> {
        self.0.ttl
    }

    fn shared_name(&self) -> Arc<str> {
        self.0.name.clone()
    }
}

/// The name of an encoded built-in resource (`None` for an LEDS `LbEndpoint`, which has none).
fn builtin_name(t: ResourceType, bytes: &[u8]) -> Result<Option<String>, prost::DecodeError> {
    use crate::pb::envoy::config::cluster::v3::Cluster;
    use crate::pb::envoy::config::core::v3::TypedExtensionConfig;
    use crate::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
    use crate::pb::envoy::config::listener::v3::Listener;
    use crate::pb::envoy::config::route::v3::{
        RouteConfiguration, ScopedRouteConfiguration, VirtualHost,
    };
    use crate::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
    use crate::pb::envoy::service::runtime::v3::Runtime;
    fn name_of<M: XdsResource>(bytes: &[u8]) -> Result<Option<String>, prost::DecodeError> {
        Ok(M::decode(bytes)?.resource_name().map(str::to_owned))
    }
    match t {
        ResourceType::Cluster => name_of::<Cluster>(bytes),
        ResourceType::ClusterLoadAssignment => name_of::<ClusterLoadAssignment>(bytes),
        ResourceType::Listener => name_of::<Listener>(bytes),
        ResourceType::RouteConfiguration => name_of::<RouteConfiguration>(bytes),
        ResourceType::ScopedRouteConfiguration => name_of::<ScopedRouteConfiguration>(bytes),
        ResourceType::VirtualHost => name_of::<VirtualHost>(bytes),
        ResourceType::Secret => name_of::<Secret>(bytes),
        ResourceType::Runtime => name_of::<Runtime>(bytes),
        ResourceType::TypedExtensionConfig => name_of::<TypedExtensionConfig>(bytes),
        ResourceType::LbEndpoint => Ok(None),
    }
}

/// The version string of canonical bytes: XXH3-64 is stable across processes, platforms and
/// releases of the `xxhash-rust` crate (it is a specified algorithm), unlike `std`'s hashers.
fn content_version(canonical: &[u8]) -> Box<str> {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(canonical)).into_boxed_str()
}

/// The name resources are keyed by: an `xdstp://` name in its normal form, after checking that
/// its type segment is the resource's type (rule C1); any other name as it is.
fn normal_name<'a>(
    type_url: &TypeUrl,
    name: &'a str,
) -> Result<std::borrow::Cow<'a, str>, EncodeError> {
    if !crate::xdstp::is_xdstp(name) {
        return Ok(std::borrow::Cow::Borrowed(name));
    }
    let invalid = |error| EncodeError::InvalidName {
        type_url: type_url.as_str().to_owned(),
        name: name.to_owned(),
        error,
    };
    let parsed = crate::xdstp::XdstpName::parse(name).map_err(invalid)?;
    parsed.check_type(type_url.message_name()).map_err(invalid)?;
    let normal = parsed.to_string();
    Ok(if normal == name {
        std::borrow::Cow::Borrowed(name)
    } else {
        std::borrow::Cow::Owned(normal)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::config::cluster::v3::Cluster;
    use crate::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, LbEndpoint};
    use crate::resource_type::ResourceType;

    #[test]
    fn c01_xdstp_resource_names_are_keyed_by_their_normal_form() {
        let t = "envoy.config.cluster.v3.Cluster";
        let named = |name: String| Cluster { name, ..Default::default() };
        let r = EncodedResource::new(&named(format!("xdstp://a/{t}/c?z=1&a=%41"))).unwrap();
        assert_eq!(r.name(), format!("xdstp://a/{t}/c?a=A&z=1"));
        // The body keeps the name as written: only the key is normalized.
        assert_eq!(Cluster::decode(r.value()).unwrap().name, format!("xdstp://a/{t}/c?z=1&a=%41"));
        let wrong = "xdstp://a/envoy.config.listener.v3.Listener/c".to_owned();
        let err = EncodedResource::new(&named(wrong.clone())).unwrap_err();
        assert!(matches!(&err, EncodeError::InvalidName { name, .. } if *name == wrong), "{err}");
        assert!(EncodedResource::new(&named(format!("xdstp://a/{t}/%zz"))).is_err());
        // Opaque names are untouched.
        assert_eq!(EncodedResource::new(&named("c?z=1&a=2".into())).unwrap().name(), "c?z=1&a=2");
    }

    #[test]
    fn s16_equal_content_gives_equal_version() {
        let a = EncodedResource::new(&Cluster { name: "c".into(), ..Default::default() }).unwrap();
        let b = EncodedResource::new(&Cluster { name: "c".into(), ..Default::default() }).unwrap();
        assert_eq!(a.version(), b.version());
        assert_eq!(a.version().len(), 16);
        assert!(!a.ptr_eq(&b));
        assert_eq!(a, b);
        let c = EncodedResource::new(&Cluster {
            name: "c".into(),
            alt_stat_name: "x".into(),
            ..Default::default()
        })
        .unwrap();
        assert_ne!(a.version(), c.version());
    }

    #[test]
    fn names_come_from_the_message_or_the_caller() {
        let cla = ClusterLoadAssignment { cluster_name: "backend".into(), ..Default::default() };
        let r = EncodedResource::new(&cla).unwrap();
        assert_eq!(r.name(), "backend");
        assert_eq!(r.type_url().builtin(), Some(ResourceType::ClusterLoadAssignment));
        assert_eq!(r.decode::<ClusterLoadAssignment>().unwrap(), cla);
        assert!(matches!(
            EncodedResource::new(&LbEndpoint::default()),
            Err(EncodeError::MissingName { .. })
        ));
        let ep = EncodedResource::named(
            "xdstp://x/envoy.config.endpoint.v3.LbEndpoint/ep/1",
            &LbEndpoint::default(),
        )
        .unwrap();
        assert_eq!(ep.name(), "xdstp://x/envoy.config.endpoint.v3.LbEndpoint/ep/1");
        assert!(matches!(
            EncodedResource::new(&Cluster::default()),
            Err(EncodeError::EmptyName { .. })
        ));
    }

    #[test]
    fn from_any_finds_the_name() {
        let cluster = Cluster { name: "c".into(), ..Default::default() };
        let r = EncodedResource::new(&cluster).unwrap();
        let back = EncodedResource::from_any(&r.to_any()).unwrap();
        assert_eq!((back.name(), back.version()), ("c", r.version()));
        let bad = Any { type_url: r.type_url().as_str().to_owned(), value: vec![0xff, 0xff] };
        assert!(matches!(EncodedResource::from_any(&bad), Err(EncodeError::Decode { .. })));
        let unknown = Any { type_url: "type.googleapis.com/acme.Nope".into(), value: vec![] };
        assert!(matches!(EncodedResource::from_any(&unknown), Err(EncodeError::Decode { .. })));
    }

    #[test]
    fn ttl_does_not_change_the_version() {
        let r = EncodedResource::new(&Cluster { name: "c".into(), ..Default::default() }).unwrap();
        let t = r.clone().with_ttl(Duration::from_secs(5));
        assert_eq!(r.version(), t.version());
        assert_eq!(t.ttl(), Some(Duration::from_secs(5)));
        assert_ne!(r, t);
    }

    /// The entry a resource keeps written reads as the delta `Resource` message it stands for,
    /// with or without a TTL, and its `Any` field as the `Any` of a SotW response; the value is
    /// a slice of it.
    #[test]
    fn the_kept_entry_reads_as_the_resource_message_and_its_any() {
        use crate::pb::envoy::service::discovery::v3::{DiscoveryResponse, Resource};
        let cluster =
            Cluster { name: "c".into(), alt_stat_name: "x".repeat(300), ..Default::default() };
        let plain = EncodedResource::new(&cluster).unwrap();
        let ttls = [Duration::from_secs(5), Duration::from_millis(1500), Duration::from_nanos(7)];
        for r in std::iter::once(plain.clone()).chain(ttls.map(|t| plain.clone().with_ttl(t))) {
            let entry = Resource::decode(&r.delta_entry()[..]).unwrap();
            assert_eq!(entry.name, "c");
            assert_eq!(entry.version, r.version());
            assert_eq!(entry.resource, Some(r.to_any()));
            assert!(entry.aliases.is_empty());
            let ttl = entry.ttl.map(|d| Duration::new(d.seconds as u64, d.nanos as u32));
            assert_eq!(ttl, r.ttl());
            assert_eq!(r.delta_entry().len(), entry.encoded_len(), "no byte beyond the fields");

            let any = DiscoveryResponse::decode(r.any_field()).unwrap();
            assert_eq!(any.resources, [r.to_any()]);
            assert!(r.delta_entry().as_ptr_range().contains(&r.value().as_ptr()));
            assert_eq!(r.decode::<Cluster>().unwrap(), cluster);
        }
    }
}
