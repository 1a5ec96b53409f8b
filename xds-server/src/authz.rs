//! The authorization point: every way into the server (streams, unary fetch, REST fetch and long
//! poll, CSDS) asks one [`Authorizer`] before it reads a configuration or a client's status.
//!
//! The decision is made on what selects the configuration: the peer (its certificate chain), the
//! whole [`Node`] the request carries (id, cluster, metadata, locality: whatever the cache's
//! grouping reads) and the type requested. A refusal ends the request with `PERMISSION_DENIED`
//! (gRPC) or `403` (REST), naming the node; no data is sent.
//!
//! **The one way to refuse.** Deciding who may read what belongs here, in the
//! [`Authorizer`] given to [`XdsServerBuilder::authorizer`](crate::XdsServerBuilder::authorizer):
//! it is the only hook every entry asks (streams, fetch, REST, CSDS, load and health reports)
//! and the only one asked per resource name. [`Callbacks`](crate::Callbacks) observe; the
//! [`Refusal`] some of them may return still ends a stream, for what only a stream's life shows
//! (say, a rate of your own), but a policy written there leaves the other entries open.
//!
//! Ready policies: [`AllowAll`] (the default), [`AllowList`] (nodes the operator names, by id,
//! cluster or certificate), [`NodeIdentity`] (the certificate must name the node, and the node
//! must not pick another node's configuration). Your own: implement [`Authorizer`], or wrap a
//! closure with [`from_fn`]; an `Arc` or `Box` of a policy is one too.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use xds_core::echo;

use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{ResourceType, TypeUrl};

use crate::callbacks::Refusal;

/// Who is on the other end of a connection, as the transport authenticated it.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    /// The client's address, when the transport knows it.
    pub remote_addr: Option<SocketAddr>,
    /// The client's TLS certificate chain (DER), leaf first; `None` without TLS or without a
    /// client certificate. Only a chain the TLS layer verified belongs here.
    pub certificates: Option<Arc<Vec<Vec<u8>>>>,
}

impl Peer {
    /// The peer of a tonic request: its address and the certificates tonic's TLS (or
    /// [`crate::transport`]) verified.
    pub fn of<T>(request: &tonic::Request<T>) -> Peer {
        Peer {
            remote_addr: request.remote_addr(),
            certificates: request
                .peer_certs()
                .map(|certs| Arc::new(certs.iter().map(|c| c.as_ref().to_vec()).collect())),
        }
    }

    /// The peer of an HTTP request: a [`Peer`] extension, or axum's `ConnectInfo<Peer>` (what
    /// [`crate::transport::Incoming`] gives `into_make_service_with_connect_info::<Peer>()`),
    /// else tonic's connection info (a gRPC request).
    pub fn of_http<B>(request: &http::Request<B>) -> Peer {
        let ext = request.extensions();
        if let Some(peer) = ext.get::<Peer>() {
            return peer.clone();
        }
        if let Some(axum::extract::ConnectInfo(peer)) =
            ext.get::<axum::extract::ConnectInfo<Peer>>()
        {
            return peer.clone();
        }
        if let Some(axum::extract::ConnectInfo(addr)) =
            ext.get::<axum::extract::ConnectInfo<SocketAddr>>()
        {
            return Peer { remote_addr: Some(*addr), certificates: None };
        }
        Peer::default()
    }

    /// Whether the peer presented a (verified) client certificate.
    pub fn is_authenticated(&self) -> bool {
        self.certificates.as_ref().is_some_and(|c| !c.is_empty())
    }
}

/// How a request came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Entry {
    /// A gRPC stream (ADS or per-type, SotW or delta).
    Stream,
    /// A unary gRPC `Fetch*`.
    Fetch,
    /// REST-JSON (fetch, long poll, or CSDS on [`rest_router`](crate::XdsServer::rest_router)).
    Rest,
    /// gRPC CSDS on the xDS port.
    Csds,
    /// The admin router ([`admin_router`](crate::XdsServer::admin_router)): trusted by where
    /// the operator binds it (localhost), not by who connects.
    Admin,
}

/// What a request wants to read.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum Access<'a> {
    /// Resources of one type, as `node` is served them.
    Resources {
        /// The node the request claims to be (everything the grouping can read).
        node: &'a Node,
        /// The type requested.
        type_url: &'a TypeUrl,
    },
    /// Every client's status (CSDS).
    ClientStatus,
    /// Reports sent as `node`: load (LRS) or endpoint health (HDS). What the server sends back
    /// (the clusters to report on, the health checks to run) is chosen by the node too.
    Report {
        /// The node the reporting stream claims to be.
        node: &'a Node,
    },
}

/// One decision to make.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// Who asks.
    pub peer: &'a Peer,
    /// How the request came in.
    pub entry: Entry,
    /// What it wants.
    pub access: Access<'a>,
}

impl Request<'_> {
    /// The node, for a resource request.
    pub fn node(&self) -> Option<&Node> {
        match self.access {
            Access::Resources { node, .. } | Access::Report { node } => Some(node),
            Access::ClientStatus => None,
        }
    }
}

/// Decides whether a request may read what it asks for. Called for every stream (once per type
/// it subscribes to), every unary and REST fetch, and every CSDS request, with no lock held.
///
/// Keep it quick and synchronous (it parses a certificate at most).
pub trait Authorizer: Send + Sync + 'static {
    /// `Ok` to serve, `Err` to refuse with the refusal's reason.
    fn authorize(&self, request: &Request<'_>) -> Result<(), Refusal>;

    /// Whether one resource, asked for by name, may be served to a request that
    /// [`authorize`](Self::authorize) let through (`request.access` is
    /// [`Access::Resources`]); `name` is in normal form (rule C1). Default: yes.
    ///
    /// Asked for every name a stream subscribes to (each name of a changed SotW list, each name
    /// a delta request subscribes, also when the server recognised the list as one another
    /// stream subscribed to) and every name a fetch asks for, unless
    /// [`checks_resources`](Self::checks_resources) says no name is refused on its own. A refused name is not
    /// subscribed, and a stream's client is told why once: `PERMISSION_DENIED` for that name in
    /// `resource_errors` (rule C4), while its other resources are served; a fetch leaves it out.
    /// Wildcard and glob subscriptions are decided by `authorize` for the whole type: to keep
    /// single resources from a node's wildcard, leave them out of the node's group in the cache.
    fn authorize_resource(&self, request: &Request<'_>, name: &str) -> Result<(), Refusal> {
        let _ = (request, name);
        Ok(())
    }

    /// Whether [`authorize_resource`](Self::authorize_resource) may refuse a name. When it
    /// cannot (it is the default, which allows every resource), return `false`: the server then
    /// does not hand it each name a stream subscribes to (10,000 per proxy joining a large mesh).
    /// Default: `true`, so that a policy that decides per resource is always asked.
    fn checks_resources(&self) -> bool {
        true
    }
}

/// Allows everything (the default: a server without TLS has nobody to tell apart).
#[derive(Clone, Copy, Debug, Default)]
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn authorize(&self, _: &Request<'_>) -> Result<(), Refusal> {
        Ok(())
    }

    fn checks_resources(&self) -> bool {
        false
    }
}

/// Shared policies: a control plane that also asks its policy itself (or a test that counts its
/// calls) keeps an `Arc` of it and hands the server a clone. Every method is forwarded.
impl<T: Authorizer + ?Sized> Authorizer for Arc<T> {
    fn authorize(&self, request: &Request<'_>) -> Result<(), Refusal> {
        (**self).authorize(request)
    }

    fn authorize_resource(&self, request: &Request<'_>, name: &str) -> Result<(), Refusal> {
        (**self).authorize_resource(request, name)
    }

    fn checks_resources(&self) -> bool {
        (**self).checks_resources()
    }
}

/// A boxed policy (e.g. one chosen at start-up from the command line, as a
/// `Box<dyn Authorizer>`). Every method is forwarded.
impl<T: Authorizer + ?Sized> Authorizer for Box<T> {
    fn authorize(&self, request: &Request<'_>) -> Result<(), Refusal> {
        (**self).authorize(request)
    }

    fn authorize_resource(&self, request: &Request<'_>, name: &str) -> Result<(), Refusal> {
        (**self).authorize_resource(request, name)
    }

    fn checks_resources(&self) -> bool {
        (**self).checks_resources()
    }
}

/// A policy written as a closure over the whole request: `authz::from_fn(|request| ...)`.
///
/// A wrapper rather than an implementation for every `Fn`: that one would keep `Arc<T>` and
/// `Box<T>` from being policies themselves. Only [`Authorizer::authorize`] is the closure's;
/// [`Authorizer::authorize_resource`] keeps its default (every name of an admitted request).
///
/// ```
/// use xds_server::authz::{self, Access};
/// use xds_server::{Refusal, XdsServer};
/// # let cache = xds_server::cache::SnapshotCache::by_node_id();
///
/// // Only nodes of the `edge` cluster read configuration.
/// let server = XdsServer::builder(cache)
///     .authorizer(authz::from_fn(|request: &authz::Request<'_>| match request.access {
///         Access::Resources { node, .. } if node.cluster != "edge" => {
///             Err(Refusal("only the edge cluster is served".to_owned()))
///         }
///         _ => Ok(()),
///     }))
///     .build();
/// ```
pub fn from_fn<F>(f: F) -> FromFn<F>
where
    F: Fn(&Request<'_>) -> Result<(), Refusal> + Send + Sync + 'static,
{
    FromFn(f)
}

/// The policy [`from_fn`] makes of a closure.
#[derive(Clone, Copy)]
pub struct FromFn<F>(F);

impl<F> std::fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FromFn")
    }
}

impl<F> Authorizer for FromFn<F>
where
    F: Fn(&Request<'_>) -> Result<(), Refusal> + Send + Sync + 'static,
{
    fn authorize(&self, request: &Request<'_>) -> Result<(), Refusal> {
        (self.0)(request)
    }

    /// A closure over the whole request refuses no name on its own.
    fn checks_resources(&self) -> bool {
        false
    }
}

/// When `Secret` resources (private keys) may go to a peer without a client certificate.
/// Checked before the [`Authorizer`], so it holds whatever policy is configured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnauthenticatedSecrets {
    /// Never: every entry refuses `Secret` to a peer without a client certificate.
    Refuse,
    /// Over gRPC only (the default, as before this check existed): REST refuses `Secret` to a
    /// peer without a client certificate, since REST is what `curl` from anywhere reaches.
    #[default]
    GrpcOnly,
    /// Everywhere (an explicit opt-in: anyone who can reach a port reads the keys).
    Serve,
}

/// Which group a node is served: the same function the cache groups by (e.g. the one given to
/// `SnapshotCache::new`).
pub type Grouping = Arc<dyn Fn(&Node) -> String + Send + Sync>;

/// The ready policy: the client certificate must name the node, and the node's other fields must
/// not select a configuration other than the one its id selects.
///
/// **Identity.** The leaf certificate must carry a DNS or URI subject alternative name equal to
/// the node id, or a SPIFFE id `spiffe://<trust-domain>/<path>` whose trust domain is one of
/// [`trust_domain`](Self::trust_domain) and whose last path segment is the node id
/// (`spiffe://mesh.example/ns/default/sa/envoy-1` for node `envoy-1`), or, with
/// [`spiffe_path`](Self::spiffe_path), whose whole path matches a template. A SPIFFE id in any
/// other trust domain names nobody.
///
/// **Grouping.** With [`grouping`](Self::grouping), the group the whole node selects must be
/// the group a node carrying only the certified id selects (or one of the
/// [`shared_groups`](Self::shared_groups)): a node cannot reach another group by setting its
/// `cluster`, metadata or locality.
///
/// **CSDS** (every client's status) is refused to every peer except on the admin router.
#[derive(Clone, Default)]
pub struct NodeIdentity {
    trust_domains: Vec<String>,
    /// The SPIFFE path's segments, if a template was set: literal, `*` or `{node}`.
    spiffe_path: Option<Vec<String>>,
    grouping: Option<Grouping>,
    shared_groups: Vec<String>,
}

impl std::fmt::Debug for NodeIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeIdentity")
            .field("trust_domains", &self.trust_domains)
            .field("spiffe_path", &self.spiffe_path)
            .field("grouping", &self.grouping.is_some())
            .field("shared_groups", &self.shared_groups)
            .finish()
    }
}

impl NodeIdentity {
    /// DNS/URI SANs equal to the node id; no SPIFFE trust domain; no grouping check.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts SPIFFE ids of `domain` (e.g. `mesh.example`).
    #[must_use]
    pub fn trust_domain(mut self, domain: impl Into<String>) -> Self {
        self.trust_domains.push(domain.into().to_ascii_lowercase());
        self
    }

    /// Matches a SPIFFE id's whole path against `template` instead of taking its last segment
    /// as the node id: segments separated by `/`, each literal, `*` (any one segment) or
    /// `{node}` (the node id), e.g. `/ns/prod/sa/{node}`. The last segment alone lets a workload
    /// of any namespace or kind that happens to end in a node's id speak as that node; a
    /// template pins where the id must sit and what surrounds it.
    ///
    /// A template without exactly one `{node}` segment matches no SPIFFE id (it fails closed):
    /// `/ns/prod/sa/*` would otherwise let every prod workload speak as any node.
    #[must_use]
    pub fn spiffe_path(mut self, template: &str) -> Self {
        let segments: Vec<String> =
            template.trim_start_matches('/').split('/').map(str::to_owned).collect();
        let places = segments.iter().filter(|s| *s == "{node}").count();
        // No segment list is empty, so an empty template never matches.
        self.spiffe_path = Some(if places == 1 { segments } else { Vec::new() });
        self
    }

    /// Checks that the node selects its own id's group (see the type's doc).
    #[must_use]
    pub fn grouping(mut self, grouping: impl Fn(&Node) -> String + Send + Sync + 'static) -> Self {
        self.grouping = Some(Arc::new(grouping));
        self
    }

    /// Groups any authenticated node may be served besides its own (e.g. a shared default).
    #[must_use]
    pub fn shared_groups(mut self, groups: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.shared_groups.extend(groups.into_iter().map(Into::into));
        self
    }

    fn names_node(&self, san: &str, id: &str) -> bool {
        if let Some(rest) = san.strip_prefix("spiffe://") {
            // spiffe://<trust-domain>/<path>: the domain must be ours, the last segment the id.
            let Some((domain, path)) = rest.split_once('/') else { return false };
            let path_names_id = match &self.spiffe_path {
                Some(template) => {
                    let segments: Vec<&str> = path.split('/').collect();
                    segments.len() == template.len()
                        && template.iter().zip(&segments).all(|(t, s)| match t.as_str() {
                            "*" => !s.is_empty(),
                            "{node}" => *s == id,
                            literal => literal == *s,
                        })
                }
                None => !path.is_empty() && path.rsplit('/').next() == Some(id),
            };
            return self.trust_domains.iter().any(|d| d.eq_ignore_ascii_case(domain))
                && path_names_id;
        }
        san == id
    }

    /// Checks the certificate chain names `node.id`.
    pub fn check_identity(&self, peer: &Peer, node: &Node) -> Result<(), Refusal> {
        let names = certificate_names(peer).map_err(|why| refusal(node, &why))?;
        if !node.id.is_empty() && names.iter().any(|n| self.names_node(n, &node.id)) {
            return Ok(());
        }
        Err(refusal(
            node,
            &format!("the client certificate does not name it (names: {})", shown(&names)),
        ))
    }

    fn check_group(&self, node: &Node) -> Result<(), Refusal> {
        let Some(grouping) = &self.grouping else { return Ok(()) };
        let selected = grouping(node);
        let own = grouping(&Node { id: node.id.clone(), ..Default::default() });
        if selected == own || self.shared_groups.contains(&selected) {
            return Ok(());
        }
        Err(refusal(
            node,
            &format!(
                "its cluster, metadata or locality selects group {:?}, not its own {:?}",
                echo(&selected).to_string(),
                echo(&own).to_string()
            ),
        ))
    }
}

impl Authorizer for NodeIdentity {
    fn authorize(&self, request: &Request<'_>) -> Result<(), Refusal> {
        match request.access {
            Access::Resources { node, .. } | Access::Report { node } => {
                self.check_identity(request.peer, node)?;
                self.check_group(node)
            }
            Access::ClientStatus => client_status_on_admin_only(request.entry),
        }
    }

    /// Decided per node for the whole type: no name is refused on its own.
    fn checks_resources(&self) -> bool {
        false
    }
}

/// The ready allow list: nodes the operator names, by node id, node cluster, the SPIFFE id of
/// the peer's certificate, or a certificate that names the node (as [`NodeIdentity`] checks);
/// every other request is refused with `PERMISSION_DENIED` and the reason.
///
/// Each list that was set must admit the request (they combine with *and*): `node_ids(["a",
/// "b"])` with [`verified`](Self::verified) admits nodes `a` and `b`, each only with a client
/// certificate that names it. A list set empty admits nobody, and an allow list with no list set
/// admits nobody either: it fails closed.
///
/// **CSDS** (every client's status, which no node list can scope) is refused except on the admin
/// router, as [`NodeIdentity`] does.
///
/// The lists are the operator's (configuration, flags), not a peer's: they are kept whole, and
/// a refusal quotes only what the peer sent (bounded with [`xds_server::protocol::echo`]), never
/// the list.
///
/// ```
/// use xds_server::authz::{AllowList, NodeIdentity};
/// use xds_server::XdsServer;
/// # let cache = xds_server::cache::SnapshotCache::by_node_id();
///
/// // Two proxies of the `edge` cluster, each proving its id with a client certificate.
/// let policy = AllowList::new()
///     .node_ids(["edge-1", "edge-2"])
///     .clusters(["edge"])
///     .verified(NodeIdentity::new().trust_domain("mesh.example"));
/// let server = XdsServer::builder(cache).authorizer(policy).build();
/// ```
///
/// [`xds_server::protocol::echo`]: crate::protocol::echo
#[derive(Clone, Debug, Default)]
pub struct AllowList {
    node_ids: Option<BTreeSet<String>>,
    clusters: Option<BTreeSet<String>>,
    spiffe_ids: Option<BTreeSet<String>>,
    identity: Option<NodeIdentity>,
}

impl AllowList {
    /// An allow list that admits nobody until a list is set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Admits only nodes whose id is one of `ids` (exactly, case included). Called again, adds
    /// to the list.
    #[must_use]
    pub fn node_ids(mut self, ids: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.node_ids.get_or_insert_default().extend(ids.into_iter().map(Into::into));
        self
    }

    /// Admits only nodes whose `cluster` is one of `clusters` (exactly). The cluster is the
    /// peer's claim: without [`verified`](Self::verified) or
    /// [`spiffe_ids`](Self::spiffe_ids), anyone who reaches the port can claim it.
    #[must_use]
    pub fn clusters(mut self, clusters: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.clusters.get_or_insert_default().extend(clusters.into_iter().map(Into::into));
        self
    }

    /// Admits only peers whose verified client certificate carries one of `ids` as a URI
    /// subject alternative name, whole (`spiffe://mesh.example/ns/prod/sa/edge`), whatever node
    /// they claim to be: a workload identity allowed to read, not tied to one node id (for
    /// that, use [`verified`](Self::verified)).
    #[must_use]
    pub fn spiffe_ids(mut self, ids: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.spiffe_ids.get_or_insert_default().extend(ids.into_iter().map(Into::into));
        self
    }

    /// Admits only peers that `identity` admits: a verified client certificate naming the node
    /// they claim to be ([`NodeIdentity::check_identity`]: a DNS or URI name equal to the id,
    /// or a SPIFFE id of its trust domains), and, when `identity` groups nodes, a node whose
    /// cluster, metadata or locality selects its own group or a shared one (a grouping given
    /// here is never dropped: a node could otherwise claim another tenant's group).
    #[must_use]
    pub fn verified(mut self, identity: NodeIdentity) -> Self {
        self.identity = Some(identity);
        self
    }

    fn check_node(&self, peer: &Peer, node: &Node) -> Result<(), Refusal> {
        if self.node_ids.is_none()
            && self.clusters.is_none()
            && self.spiffe_ids.is_none()
            && self.identity.is_none()
        {
            return Err(refusal(node, "the allow list is empty"));
        }
        if let Some(ids) = &self.node_ids
            && !ids.contains(&node.id)
        {
            return Err(refusal(node, "its id is not on the allow list"));
        }
        if let Some(clusters) = &self.clusters
            && !clusters.contains(&node.cluster)
        {
            return Err(refusal(
                node,
                &format!(
                    "its cluster {:?} is not on the allow list",
                    echo(&node.cluster).to_string()
                ),
            ));
        }
        if let Some(allowed) = &self.spiffe_ids {
            let names = certificate_names(peer).map_err(|why| refusal(node, &why))?;
            if !names.iter().any(|n| n.starts_with("spiffe://") && allowed.contains(n)) {
                return Err(refusal(
                    node,
                    &format!(
                        "the client certificate carries no SPIFFE id on the allow list (names: {})",
                        shown(&names)
                    ),
                ));
            }
        }
        if let Some(identity) = &self.identity {
            identity.check_identity(peer, node)?;
            identity.check_group(node)?;
        }
        Ok(())
    }
}

impl Authorizer for AllowList {
    fn authorize(&self, request: &Request<'_>) -> Result<(), Refusal> {
        match request.access {
            Access::Resources { node, .. } | Access::Report { node } => {
                self.check_node(request.peer, node)
            }
            Access::ClientStatus => client_status_on_admin_only(request.entry),
        }
    }

    /// Decided per node for the whole type: no name is refused on its own.
    fn checks_resources(&self) -> bool {
        false
    }
}

/// CSDS (every client's status) only on the admin router: no node's identity scopes it.
fn client_status_on_admin_only(entry: Entry) -> Result<(), Refusal> {
    if entry == Entry::Admin {
        return Ok(());
    }
    Err(Refusal("client status (CSDS) is served on the admin listener only".to_owned()))
}

/// The DNS and URI subject alternative names of the peer's leaf certificate; `Err` with the
/// reason when there is no certificate or it cannot be read.
fn certificate_names(peer: &Peer) -> Result<Vec<String>, String> {
    let Some(leaf) = peer.certificates.as_deref().and_then(|c| c.first()) else {
        return Err("a client certificate is required".to_owned());
    };
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("unreadable client certificate: {e}"))?;
    Ok(match cert.subject_alternative_name() {
        Ok(Some(san)) => san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                x509_parser::extensions::GeneralName::DNSName(d) => Some((*d).to_owned()),
                x509_parser::extensions::GeneralName::URI(u) => Some((*u).to_owned()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    })
}

/// A certificate's names for a refusal: the first four, each bounded with [`echo`], and how
/// many more.
fn shown(names: &[String]) -> String {
    let mut shown: Vec<String> = names.iter().take(4).map(|n| echo(n).to_string()).collect();
    if names.len() > 4 {
        shown.push(format!("and {} more", names.len() - 4));
    }
    if shown.is_empty() { "none".to_owned() } else { shown.join(", ") }
}

/// A refusal that names the node (bounded with [`echo`]: the id is the peer's).
pub(crate) fn refusal(node: &Node, why: &str) -> Refusal {
    Refusal(format!("node {:?} refused: {why}", echo(&node.id).to_string()))
}

/// The server's authorization point: the secrets rule, then the configured policy.
pub(crate) fn authorize(
    policy: &dyn Authorizer,
    secrets: UnauthenticatedSecrets,
    request: &Request<'_>,
) -> Result<(), Refusal> {
    if let Access::Resources { node, type_url } = request.access
        && type_url.builtin() == Some(ResourceType::Secret)
        && !request.peer.is_authenticated()
    {
        let refuse = match secrets {
            UnauthenticatedSecrets::Refuse => true,
            UnauthenticatedSecrets::GrpcOnly => request.entry == Entry::Rest,
            UnauthenticatedSecrets::Serve => false,
        };
        if refuse {
            return Err(refusal(
                node,
                "Secret resources are served only to a client with a verified certificate",
            ));
        }
    }
    policy.authorize(request)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The server skips asking name by name only for a policy that says it refuses no name on
    /// its own: every built-in one, and whatever a wrapper wraps; a policy of the user's own is
    /// asked unless it says otherwise.
    #[test]
    fn only_a_policy_that_refuses_no_name_on_its_own_is_spared_the_names() {
        struct PerName;
        impl Authorizer for PerName {
            fn authorize(&self, _: &Request<'_>) -> Result<(), Refusal> {
                Ok(())
            }
            fn authorize_resource(&self, _: &Request<'_>, name: &str) -> Result<(), Refusal> {
                Err(Refusal(format!("not {name}")))
            }
        }
        assert!(PerName.checks_resources(), "asked by default");
        assert!(!AllowAll.checks_resources());
        assert!(!NodeIdentity::new().checks_resources());
        assert!(!AllowList::new().checks_resources());
        assert!(!from_fn(|_| Ok(())).checks_resources());
        assert!(Arc::new(PerName).checks_resources() && !Arc::new(AllowAll).checks_resources());
        let boxed: Box<dyn Authorizer> = Box::new(PerName);
        assert!(boxed.checks_resources());
    }

    fn peer(names: &[&str]) -> Peer {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let der = rcgen::generate_simple_self_signed(names).unwrap().cert.der().to_vec();
        Peer { remote_addr: None, certificates: Some(Arc::new(vec![der])) }
    }

    fn node(id: &str, cluster: &str) -> Node {
        Node { id: id.into(), cluster: cluster.into(), ..Default::default() }
    }

    fn ask(policy: &NodeIdentity, peer: &Peer, node: &Node) -> Result<(), Refusal> {
        let t = TypeUrl::from(ResourceType::Cluster);
        policy.authorize(&Request {
            peer,
            entry: Entry::Stream,
            access: Access::Resources { node, type_url: &t },
        })
    }

    #[test]
    fn the_node_id_must_be_named_by_the_certificate() {
        let p = NodeIdentity::new();
        let envoy1 = peer(&["envoy-1"]);
        assert_eq!(ask(&p, &envoy1, &node("envoy-1", "")), Ok(()));
        let refused = ask(&p, &envoy1, &node("evil", "")).unwrap_err();
        assert!(refused.0.contains("node \"evil\" refused") && refused.0.contains("envoy-1"));
        let none = ask(&p, &Peer::default(), &node("envoy-1", "")).unwrap_err();
        assert!(none.0.contains("certificate is required"));
        let garbage = Peer { remote_addr: None, certificates: Some(Arc::new(vec![vec![1, 2, 3]])) };
        assert!(ask(&p, &garbage, &node("envoy-1", "")).unwrap_err().0.contains("unreadable"));
    }

    #[test]
    fn spiffe_ids_match_only_in_a_configured_trust_domain() {
        let p = NodeIdentity::new().trust_domain("mesh.example");
        let ours = peer(&["spiffe://mesh.example/ns/default/sa/envoy-2"]);
        assert_eq!(ask(&p, &ours, &node("envoy-2", "")), Ok(()));
        assert!(ask(&p, &ours, &node("sa", "")).is_err());
        let theirs = peer(&["spiffe://other-domain/ns/evil/sa/envoy-2"]);
        assert!(ask(&p, &theirs, &node("envoy-2", "")).is_err());
        // Without a configured domain, no SPIFFE id names anyone.
        assert!(ask(&NodeIdentity::new(), &ours, &node("envoy-2", "")).is_err());
    }

    #[test]
    fn a_spiffe_path_template_pins_where_the_node_id_sits() {
        let last = NodeIdentity::new().trust_domain("mesh.example");
        let pinned = last.clone().spiffe_path("/ns/prod/sa/{node}");
        let prod = peer(&["spiffe://mesh.example/ns/prod/sa/envoy-2"]);
        let dev = peer(&["spiffe://mesh.example/ns/dev/sa/envoy-2"]);
        let deeper = peer(&["spiffe://mesh.example/x/ns/prod/sa/envoy-2"]);
        // The last segment alone: a workload of another namespace speaks as envoy-2.
        assert_eq!(ask(&last, &dev, &node("envoy-2", "")), Ok(()));
        // The template: only the prod service account of that name.
        assert_eq!(ask(&pinned, &prod, &node("envoy-2", "")), Ok(()));
        assert!(ask(&pinned, &dev, &node("envoy-2", "")).is_err());
        assert!(ask(&pinned, &deeper, &node("envoy-2", "")).is_err());
        assert!(ask(&pinned, &prod, &node("prod", "")).is_err());
        let any_ns = last.spiffe_path("/ns/*/sa/{node}");
        assert_eq!(ask(&any_ns, &dev, &node("envoy-2", "")), Ok(()));
        let empty_ns = peer(&["spiffe://mesh.example/ns//sa/envoy-2"]);
        assert!(ask(&any_ns, &empty_ns, &node("envoy-2", "")).is_err());
        // Without exactly one {node}, a template names no node at all: it fails closed.
        let nobody = NodeIdentity::new().trust_domain("mesh.example").spiffe_path("/ns/prod/sa/*");
        assert!(ask(&nobody, &prod, &node("envoy-2", "")).is_err());
        let twice = NodeIdentity::new().trust_domain("mesh.example").spiffe_path("/{node}/{node}");
        let both = peer(&["spiffe://mesh.example/envoy-2/envoy-2"]);
        assert!(ask(&twice, &both, &node("envoy-2", "")).is_err());
    }

    #[test]
    fn the_cluster_cannot_select_another_group() {
        let p = NodeIdentity::new().grouping(|n: &Node| {
            if n.cluster.is_empty() { n.id.clone() } else { n.cluster.clone() }
        });
        let envoy1 = peer(&["envoy-1"]);
        assert_eq!(ask(&p, &envoy1, &node("envoy-1", "envoy-1")), Ok(()));
        let refused = ask(&p, &envoy1, &node("envoy-1", "envoy-2")).unwrap_err();
        assert!(refused.0.contains("\"envoy-2\""), "{}", refused.0);
        let shared = p.shared_groups(["envoy-2"]);
        assert_eq!(ask(&shared, &envoy1, &node("envoy-1", "envoy-2")), Ok(()));
    }

    fn ask_as(
        policy: &dyn Authorizer,
        peer: &Peer,
        node: &Node,
        entry: Entry,
    ) -> Result<(), Refusal> {
        let t = TypeUrl::from(ResourceType::Cluster);
        policy.authorize(&Request { peer, entry, access: Access::Resources { node, type_url: &t } })
    }

    #[test]
    fn arcs_boxes_and_closures_are_authorizers() {
        fn given(policy: impl Authorizer) -> Box<dyn Authorizer> {
            Box::new(policy)
        }
        let only_a = from_fn(|r: &Request<'_>| match r.node() {
            Some(n) if n.id == "a" => Ok(()),
            _ => Err(Refusal("not a".to_owned())),
        });
        let shared = Arc::new(only_a);
        let anyone = Peer::default();
        for policy in [given(shared.clone()), given(Box::new(shared.clone())), given(only_a)] {
            assert_eq!(ask_as(&*policy, &anyone, &node("a", ""), Entry::Stream), Ok(()));
            assert!(ask_as(&*policy, &anyone, &node("b", ""), Entry::Stream).is_err());
        }
        // A boxed trait object is one as well (a policy picked at start-up).
        let picked: Box<dyn Authorizer> = Box::new(AllowAll);
        assert_eq!(ask_as(&given(picked), &anyone, &node("b", ""), Entry::Fetch), Ok(()));
    }

    #[test]
    fn an_allow_list_admits_listed_ids_and_clusters_only() {
        let anyone = Peer::default();
        let ids = AllowList::new().node_ids(["edge-1", "edge-2"]);
        assert_eq!(ask_as(&ids, &anyone, &node("edge-2", "x"), Entry::Stream), Ok(()));
        let refused = ask_as(&ids, &anyone, &node("edge-3", ""), Entry::Rest).unwrap_err();
        assert_eq!(refused.0, "node \"edge-3\" refused: its id is not on the allow list");
        // Lists combine with "and".
        let both = ids.clone().clusters(["edge"]);
        assert_eq!(ask_as(&both, &anyone, &node("edge-1", "edge"), Entry::Stream), Ok(()));
        let refused = ask_as(&both, &anyone, &node("edge-1", "core"), Entry::Stream).unwrap_err();
        assert!(
            refused.0.contains("its cluster \"core\" is not on the allow list"),
            "{}",
            refused.0
        );
        // Reports are admitted the same way.
        let report = Request {
            peer: &anyone,
            entry: Entry::Stream,
            access: Access::Report { node: &node("x", "") },
        };
        assert!(ids.authorize(&report).is_err());
    }

    #[test]
    fn an_allow_list_fails_closed_and_bounds_what_it_quotes() {
        let anyone = Peer::default();
        let none = AllowList::new();
        assert!(
            ask_as(&none, &anyone, &node("a", ""), Entry::Stream).unwrap_err().0.contains("empty")
        );
        let empty = AllowList::new().node_ids(Vec::<String>::new());
        assert!(ask_as(&empty, &anyone, &node("", ""), Entry::Stream).is_err());
        let long = "x".repeat(10_000);
        let refused =
            ask_as(&AllowList::new().clusters(["c"]), &anyone, &node(&long, &long), Entry::Stream)
                .unwrap_err();
        assert!(refused.0.len() < 1_000, "{} bytes", refused.0.len());
        assert!(refused.0.contains("(10000 bytes)"), "{}", refused.0);
        // CSDS only on the admin router.
        let csds =
            |entry| none.authorize(&Request { peer: &anyone, entry, access: Access::ClientStatus });
        assert!(csds(Entry::Csds).is_err());
        assert_eq!(csds(Entry::Admin), Ok(()));
    }

    #[test]
    fn an_allow_list_reads_spiffe_ids_and_verified_node_names() {
        let edge = peer(&["spiffe://mesh.example/ns/prod/sa/edge"]);
        let other = peer(&["spiffe://mesh.example/ns/dev/sa/edge"]);
        let workloads = AllowList::new().spiffe_ids(["spiffe://mesh.example/ns/prod/sa/edge"]);
        // The workload may speak as any node...
        assert_eq!(ask_as(&workloads, &edge, &node("edge-7", ""), Entry::Stream), Ok(()));
        let refused = ask_as(&workloads, &other, &node("edge-7", ""), Entry::Stream).unwrap_err();
        assert!(
            refused.0.contains("no SPIFFE id on the allow list") && refused.0.contains("ns/dev"),
            "{}",
            refused.0
        );
        assert!(
            ask_as(&workloads, &Peer::default(), &node("edge-7", ""), Entry::Stream)
                .unwrap_err()
                .0
                .contains("certificate is required")
        );
        // ... unless the certificate must name the node too.
        let verified =
            AllowList::new().node_ids(["envoy-1", "envoy-2"]).verified(NodeIdentity::new());
        let envoy1 = peer(&["envoy-1"]);
        assert_eq!(ask_as(&verified, &envoy1, &node("envoy-1", ""), Entry::Stream), Ok(()));
        assert!(ask_as(&verified, &envoy1, &node("envoy-2", ""), Entry::Stream).is_err());
        assert!(ask_as(&verified, &envoy1, &node("envoy-3", ""), Entry::Stream).is_err());
        // A grouping given with the identity is asked too: envoy-1, with its own certificate,
        // may not claim another tenant's group through its cluster.
        let by_cluster =
            |n: &Node| if n.cluster.is_empty() { n.id.clone() } else { n.cluster.clone() };
        let grouped = AllowList::new()
            .node_ids(["envoy-1"])
            .verified(NodeIdentity::new().grouping(by_cluster));
        assert_eq!(ask_as(&grouped, &envoy1, &node("envoy-1", ""), Entry::Stream), Ok(()));
        let other_tenant = ask_as(&grouped, &envoy1, &node("envoy-1", "tenant-b"), Entry::Stream);
        assert!(other_tenant.unwrap_err().0.contains("selects group"));
    }

    #[test]
    fn secrets_need_a_certificate_on_rest_by_default() {
        let t = TypeUrl::from(ResourceType::Secret);
        let n = node("n", "");
        let anonymous = Peer::default();
        let ask = |entry, secrets| {
            authorize(
                &AllowAll,
                secrets,
                &Request {
                    peer: &anonymous,
                    entry,
                    access: Access::Resources { node: &n, type_url: &t },
                },
            )
        };
        assert!(ask(Entry::Rest, UnauthenticatedSecrets::GrpcOnly).is_err());
        assert!(ask(Entry::Stream, UnauthenticatedSecrets::GrpcOnly).is_ok());
        assert!(ask(Entry::Stream, UnauthenticatedSecrets::Refuse).is_err());
        assert!(ask(Entry::Rest, UnauthenticatedSecrets::Serve).is_ok());
    }
}
