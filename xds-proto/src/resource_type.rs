//! The resource-type registry: the built-in xDS types and custom ones, keyed by type, not by string.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The prefix every xDS type URL carries.
pub const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// The built-in xDS resource types.
///
/// Declared in make-before-break order (rule O1): deriving `Ord` gives the order an ADS stream sends
/// one update's responses in, so that nothing arrives before what it references. Secrets come
/// first: clusters and listeners name them in their transport sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceType {
    /// SDS: `envoy.extensions.transport_sockets.tls.v3.Secret`.
    Secret,
    /// CDS: `envoy.config.cluster.v3.Cluster`.
    Cluster,
    /// EDS: `envoy.config.endpoint.v3.ClusterLoadAssignment` (named by `cluster_name`).
    ClusterLoadAssignment,
    /// LEDS (delta only): `envoy.config.endpoint.v3.LbEndpoint`, the members of the glob
    /// collection a ClusterLoadAssignment's `leds_cluster_locality_config` names (rule C2).
    /// Right after the ClusterLoadAssignment (rule O1): a client subscribes to the collection only
    /// once it has read the assignment that names it, and the endpoints come before the listeners
    /// and routes that send traffic to their cluster. Member removals are not put off: a member
    /// that leaves is an endpoint leaving its locality, which a client must hear of at once.
    LbEndpoint,
    /// LDS: `envoy.config.listener.v3.Listener`.
    Listener,
    /// RDS: `envoy.config.route.v3.RouteConfiguration`.
    RouteConfiguration,
    /// SRDS: `envoy.config.route.v3.ScopedRouteConfiguration`.
    ScopedRouteConfiguration,
    /// VHDS (delta only): `envoy.config.route.v3.VirtualHost`.
    VirtualHost,
    /// RTDS: `envoy.service.runtime.v3.Runtime`.
    Runtime,
    /// ECDS: `envoy.config.core.v3.TypedExtensionConfig`.
    TypedExtensionConfig,
}

impl ResourceType {
    /// Every built-in type, in make-before-break order.
    pub const ALL: [ResourceType; 10] = [
        ResourceType::Secret,
        ResourceType::Cluster,
        ResourceType::ClusterLoadAssignment,
        ResourceType::LbEndpoint,
        ResourceType::Listener,
        ResourceType::RouteConfiguration,
        ResourceType::ScopedRouteConfiguration,
        ResourceType::VirtualHost,
        ResourceType::Runtime,
        ResourceType::TypedExtensionConfig,
    ];

    /// The full protobuf message name, e.g. `envoy.config.cluster.v3.Cluster`.
    pub const fn message_name(self) -> &'static str {
        match self {
            ResourceType::Cluster => "envoy.config.cluster.v3.Cluster",
            ResourceType::ClusterLoadAssignment => "envoy.config.endpoint.v3.ClusterLoadAssignment",
            ResourceType::Listener => "envoy.config.listener.v3.Listener",
            ResourceType::RouteConfiguration => "envoy.config.route.v3.RouteConfiguration",
            ResourceType::ScopedRouteConfiguration => {
                "envoy.config.route.v3.ScopedRouteConfiguration"
            }
            ResourceType::VirtualHost => "envoy.config.route.v3.VirtualHost",
            ResourceType::Secret => "envoy.extensions.transport_sockets.tls.v3.Secret",
            ResourceType::Runtime => "envoy.service.runtime.v3.Runtime",
            ResourceType::TypedExtensionConfig => "envoy.config.core.v3.TypedExtensionConfig",
            ResourceType::LbEndpoint => "envoy.config.endpoint.v3.LbEndpoint",
        }
    }

    /// The type URL, e.g. `type.googleapis.com/envoy.config.cluster.v3.Cluster`.
    pub const fn type_url(self) -> &'static str {
        match self {
            ResourceType::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            ResourceType::ClusterLoadAssignment => {
                "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
            }
            ResourceType::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            ResourceType::RouteConfiguration => {
                "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
            }
            ResourceType::ScopedRouteConfiguration => {
                "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration"
            }
            ResourceType::VirtualHost => "type.googleapis.com/envoy.config.route.v3.VirtualHost",
            ResourceType::Secret => {
                "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
            }
            ResourceType::Runtime => "type.googleapis.com/envoy.service.runtime.v3.Runtime",
            ResourceType::TypedExtensionConfig => {
                "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
            }
            ResourceType::LbEndpoint => "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint",
        }
    }

    /// The built-in type with this type URL, if any.
    pub fn from_type_url(type_url: &str) -> Option<Self> {
        Self::from_type_url_bytes(type_url.as_bytes())
    }

    /// The built-in type whose type URL these bytes are, if any: read where a request arrived,
    /// with no UTF-8 check first (a built-in type URL is ASCII, so bytes that match one are
    /// its text).
    pub fn from_type_url_bytes(type_url: &[u8]) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.type_url().as_bytes() == type_url)
    }

    /// Whether a subscription may be a wildcard (rules S10, D8): Listener, Cluster and
    /// ScopedRouteConfiguration.
    pub const fn is_wildcard_capable(self) -> bool {
        matches!(
            self,
            ResourceType::Listener | ResourceType::Cluster | ResourceType::ScopedRouteConfiguration
        )
    }

    /// Whether a SotW response must carry every subscribed resource (rule S11): Listener and Cluster.
    pub const fn is_full_state(self) -> bool {
        matches!(self, ResourceType::Listener | ResourceType::Cluster)
    }

    /// Whether the type is only served over the incremental (delta) protocol: VHDS and LEDS.
    pub const fn is_delta_only(self) -> bool {
        matches!(self, ResourceType::VirtualHost | ResourceType::LbEndpoint)
    }

    /// Whether clients may subscribe by alias (rule D9): VHDS subscribes to
    /// `<route configuration>/<host>`.
    pub const fn has_aliases(self) -> bool {
        matches!(self, ResourceType::VirtualHost)
    }

    /// The per-type REST path segment (rule R1), e.g. `clusters` for
    /// `POST /v3/discovery:clusters`; `None` for the delta-only types.
    pub const fn rest_path(self) -> Option<&'static str> {
        Some(match self {
            ResourceType::Cluster => "clusters",
            ResourceType::ClusterLoadAssignment => "endpoints",
            ResourceType::Listener => "listeners",
            ResourceType::RouteConfiguration => "routes",
            ResourceType::ScopedRouteConfiguration => "scoped-routes",
            ResourceType::Secret => "secrets",
            ResourceType::Runtime => "runtime",
            ResourceType::TypedExtensionConfig => "extension_configs",
            ResourceType::VirtualHost | ResourceType::LbEndpoint => return None,
        })
    }

    /// The built-in type served at this REST path segment (rule R1).
    pub fn from_rest_path(path: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.rest_path() == Some(path))
    }

    /// A short lower-case label for logs and metrics, e.g. `cluster`.
    pub const fn label(self) -> &'static str {
        match self {
            ResourceType::Cluster => "cluster",
            ResourceType::ClusterLoadAssignment => "endpoint",
            ResourceType::Listener => "listener",
            ResourceType::RouteConfiguration => "route",
            ResourceType::ScopedRouteConfiguration => "scoped_route",
            ResourceType::VirtualHost => "virtual_host",
            ResourceType::Secret => "secret",
            ResourceType::Runtime => "runtime",
            ResourceType::TypedExtensionConfig => "extension_config",
            ResourceType::LbEndpoint => "lb_endpoint",
        }
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.type_url())
    }
}

/// Any resource type a server can serve: a built-in [`ResourceType`] or a custom one.
///
/// Ordered for make-before-break (rule O1): built-in types in their declared order, then custom
/// types by type URL. Equality and hashing look at the type URL only.
#[derive(Clone, Debug)]
pub enum TypeUrl {
    /// One of the built-in xDS types.
    Builtin(ResourceType),
    /// A custom type, served like a built-in one.
    Custom(CustomType),
}

/// A custom resource type: any protobuf message with a name, served by type URL.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CustomType {
    type_url: Arc<str>,
    wildcard_capable: bool,
    full_state: bool,
}

impl CustomType {
    /// A custom type for the message `M`: not wildcard-capable, not full-state.
    pub fn of<M: prost::Name>() -> Self {
        Self::new(M::type_url())
    }

    /// A custom type by its type URL: not wildcard-capable, not full-state.
    pub fn new(type_url: impl Into<Arc<str>>) -> Self {
        CustomType { type_url: type_url.into(), wildcard_capable: false, full_state: false }
    }

    /// Lets clients subscribe to every resource of this type (rules S10, D8).
    pub fn wildcard_capable(mut self, yes: bool) -> Self {
        self.wildcard_capable = yes;
        self
    }

    /// Makes SotW responses carry every subscribed resource, as for Listener and Cluster (rule S11).
    pub fn full_state(mut self, yes: bool) -> Self {
        self.full_state = yes;
        self
    }
}

impl TypeUrl {
    /// The type of the message `M`: the built-in one when `M` is a built-in resource type.
    pub fn of<M: prost::Name>() -> Self {
        Self::parse(&M::type_url())
    }

    /// The type for a type URL: built-in when known, otherwise custom with default traits.
    pub fn parse(type_url: &str) -> Self {
        match ResourceType::from_type_url(type_url) {
            Some(t) => TypeUrl::Builtin(t),
            None => TypeUrl::Custom(CustomType::new(type_url)),
        }
    }

    /// The type URL string.
    pub fn as_str(&self) -> &str {
        match self {
            TypeUrl::Builtin(t) => t.type_url(),
            TypeUrl::Custom(c) => &c.type_url,
        }
    }

    /// The type URL string, borrowed for the life of the program when the type is built in (no
    /// copy: a response names its type, and most are of built-in types), copied otherwise.
    pub fn to_static_str(&self) -> std::borrow::Cow<'static, str> {
        match self {
            TypeUrl::Builtin(t) => std::borrow::Cow::Borrowed(t.type_url()),
            TypeUrl::Custom(c) => std::borrow::Cow::Owned(c.type_url.to_string()),
        }
    }

    /// The built-in type, if this is one.
    pub fn builtin(&self) -> Option<ResourceType> {
        match self {
            TypeUrl::Builtin(t) => Some(*t),
            TypeUrl::Custom(_) => None,
        }
    }

    /// The full message name: the type URL without its `type.googleapis.com/` prefix.
    pub fn message_name(&self) -> &str {
        let url = self.as_str();
        url.rsplit_once('/').map_or(url, |(_, name)| name)
    }

    /// Whether a subscription to this type may be a wildcard (rules S10, D8).
    pub fn is_wildcard_capable(&self) -> bool {
        match self {
            TypeUrl::Builtin(t) => t.is_wildcard_capable(),
            TypeUrl::Custom(c) => c.wildcard_capable,
        }
    }

    /// Whether SotW responses of this type carry the full state (rule S11).
    pub fn is_full_state(&self) -> bool {
        match self {
            TypeUrl::Builtin(t) => t.is_full_state(),
            TypeUrl::Custom(c) => c.full_state,
        }
    }

    /// Whether clients subscribe to this type by alias (rule D9).
    pub fn has_aliases(&self) -> bool {
        self.builtin().is_some_and(ResourceType::has_aliases)
    }

    /// Whether the type is served over delta only (VHDS, LEDS).
    pub fn is_delta_only(&self) -> bool {
        self.builtin().is_some_and(ResourceType::is_delta_only)
    }

    /// A short label for logs and metrics: the built-in label (`cluster`) or the message name.
    pub fn label(&self) -> &str {
        match self {
            TypeUrl::Builtin(t) => t.label(),
            TypeUrl::Custom(_) => self.message_name(),
        }
    }

    /// The columns of the protocol table the protocol core needs for this type.
    pub fn traits(&self) -> xds_core::TypeTraits {
        xds_core::TypeTraits {
            wildcard_capable: self.is_wildcard_capable(),
            full_state: self.is_full_state(),
            aliases: self.has_aliases(),
        }
    }
}

/// What a stream of the protocol core needs to know about a type: its traits, and its part in the
/// ordering rules (O1, D10).
impl xds_core::TypeKey for TypeUrl {
    fn type_url(&self) -> &str {
        self.as_str()
    }

    fn traits(&self) -> xds_core::TypeTraits {
        TypeUrl::traits(self)
    }

    fn role(&self) -> xds_core::TypeRole {
        match self.builtin() {
            Some(ResourceType::Cluster | ResourceType::ClusterLoadAssignment) => {
                xds_core::TypeRole::RemovedLast
            }
            Some(ResourceType::RouteConfiguration) => xds_core::TypeRole::RouteConfiguration,
            Some(ResourceType::VirtualHost) => xds_core::TypeRole::VirtualHost,
            _ => xds_core::TypeRole::Other,
        }
    }
}

impl From<ResourceType> for TypeUrl {
    fn from(t: ResourceType) -> Self {
        TypeUrl::Builtin(t)
    }
}

impl From<CustomType> for TypeUrl {
    fn from(c: CustomType) -> Self {
        match ResourceType::from_type_url(&c.type_url) {
            Some(t) => TypeUrl::Builtin(t),
            None => TypeUrl::Custom(c),
        }
    }
}

impl PartialEq for TypeUrl {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            // Each built-in type has a type URL of its own: equal URLs are the same variant.
            // (A stream compares its types at every request and response: no string compared.)
            (TypeUrl::Builtin(a), TypeUrl::Builtin(b)) => a == b,
            _ => self.as_str() == other.as_str(),
        }
    }
}

impl Eq for TypeUrl {}

impl Hash for TypeUrl {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for TypeUrl {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TypeUrl {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (TypeUrl::Builtin(a), TypeUrl::Builtin(b)) => a.cmp(b),
            (TypeUrl::Builtin(_), TypeUrl::Custom(_)) => Ordering::Less,
            (TypeUrl::Custom(_), TypeUrl::Builtin(_)) => Ordering::Greater,
            (TypeUrl::Custom(a), TypeUrl::Custom(b)) => a.type_url.cmp(&b.type_url),
        }
    }
}

impl Borrow<str> for TypeUrl {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for TypeUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::envoy::config::cluster::v3::Cluster;
    use crate::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, LbEndpoint};
    use crate::pb::envoy::config::listener::v3::Listener;
    use crate::pb::envoy::config::route::v3::{
        RouteConfiguration, ScopedRouteConfiguration, VirtualHost,
    };
    use crate::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
    use crate::pb::envoy::service::runtime::v3::Runtime;
    use prost::Name;

    #[test]
    fn type_urls_match_the_generated_messages() {
        let generated = [
            Secret::type_url(),
            Cluster::type_url(),
            ClusterLoadAssignment::type_url(),
            LbEndpoint::type_url(),
            Listener::type_url(),
            RouteConfiguration::type_url(),
            ScopedRouteConfiguration::type_url(),
            VirtualHost::type_url(),
            Runtime::type_url(),
            crate::pb::envoy::config::core::v3::TypedExtensionConfig::type_url(),
        ];
        for (t, url) in ResourceType::ALL.into_iter().zip(generated) {
            assert_eq!(t.type_url(), url);
            assert_eq!(ResourceType::from_type_url(&url), Some(t));
            assert_eq!(ResourceType::from_type_url_bytes(url.as_bytes()), Some(t));
            // Its bytes and nothing else: not a prefix of it, not more.
            assert_eq!(ResourceType::from_type_url_bytes(&url.as_bytes()[..url.len() - 1]), None);
            assert_eq!(ResourceType::from_type_url_bytes(format!("{url}x").as_bytes()), None);
            assert_eq!(format!("{TYPE_URL_PREFIX}{}", t.message_name()), url);
            assert_eq!(TypeUrl::parse(&url).message_name(), t.message_name());
        }
    }

    /// A built-in type's URL is lent for the life of the program; a custom one is copied.
    #[test]
    fn a_builtin_type_url_is_lent_and_a_custom_one_copied() {
        let builtin = TypeUrl::from(ResourceType::Cluster);
        let lent = builtin.to_static_str();
        assert!(matches!(lent, std::borrow::Cow::Borrowed(_)));
        assert_eq!(lent, ResourceType::Cluster.type_url());
        let custom = TypeUrl::parse("type.googleapis.com/acme.v1.Widget");
        let copied = custom.to_static_str();
        assert!(matches!(copied, std::borrow::Cow::Owned(_)));
        assert_eq!(copied, custom.as_str());
    }

    #[test]
    fn o1_declared_order_is_make_before_break() {
        let mut sorted = ResourceType::ALL;
        sorted.sort();
        assert_eq!(sorted, ResourceType::ALL);
        assert!(ResourceType::Secret < ResourceType::Cluster);
        assert!(ResourceType::Cluster < ResourceType::ClusterLoadAssignment);
        // LEDS members right after the assignment that names their collection (rule C2).
        assert!(ResourceType::ClusterLoadAssignment < ResourceType::LbEndpoint);
        assert!(ResourceType::LbEndpoint < ResourceType::Listener);
        assert!(ResourceType::ClusterLoadAssignment < ResourceType::Listener);
        assert!(ResourceType::Listener < ResourceType::RouteConfiguration);
        assert!(ResourceType::RouteConfiguration < ResourceType::VirtualHost);
        let custom = TypeUrl::from(CustomType::new("type.googleapis.com/acme.Thing"));
        assert!(TypeUrl::from(ResourceType::LbEndpoint) < custom);
    }

    #[test]
    fn traits_follow_the_protocol_table() {
        let wildcard: Vec<_> =
            ResourceType::ALL.into_iter().filter(|t| t.is_wildcard_capable()).collect();
        assert_eq!(
            wildcard,
            [ResourceType::Cluster, ResourceType::Listener, ResourceType::ScopedRouteConfiguration]
        );
        let full: Vec<_> = ResourceType::ALL.into_iter().filter(|t| t.is_full_state()).collect();
        assert_eq!(full, [ResourceType::Cluster, ResourceType::Listener]);
        for t in ResourceType::ALL {
            match t.rest_path() {
                Some(p) => assert_eq!(ResourceType::from_rest_path(p), Some(t)),
                None => assert!(t.is_delta_only()),
            }
        }
    }

    #[test]
    fn custom_types_are_keyed_by_url() {
        let a = TypeUrl::from(CustomType::new("type.googleapis.com/acme.Thing").full_state(true));
        let b = TypeUrl::parse("type.googleapis.com/acme.Thing");
        assert_eq!(a, b);
        assert!(a.is_full_state() && !b.is_full_state());
        assert_eq!(
            TypeUrl::parse(ResourceType::Listener.type_url()).builtin(),
            Some(ResourceType::Listener)
        );
        assert_eq!(TypeUrl::of::<Cluster>(), TypeUrl::Builtin(ResourceType::Cluster));
        assert_eq!(b.message_name(), "acme.Thing");
        // Equality is by type URL, whichever way a type is held.
        for t in ResourceType::ALL {
            for u in ResourceType::ALL {
                assert_eq!(TypeUrl::from(t) == TypeUrl::from(u), t == u);
            }
            let spelled = TypeUrl::Custom(CustomType::new(t.type_url()));
            assert_eq!(spelled, TypeUrl::from(t), "{t:?} held as a custom type");
            assert_ne!(spelled, a);
        }
    }
}
