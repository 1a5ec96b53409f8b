//! Resource builders and stream-side clients for the cache tests: a client reads a cache the way
//! a server stream does (watch, signal, read, poll a sub-stream, ACK).
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use xds_cache::{Cache, CacheError, Signal, Variant, Watch, WatchRequest};
use xds_core::{
    DeltaRequest, DeltaResource, DeltaResponse, DeltaSubStream, Handled, Nonces, SotwRequest,
    SotwResponse, SotwSubStream, TypeTraits,
};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, EdsClusterConfig,
};
use xds_proto::pb::envoy::config::core::v3::address::Address as AddressKind;
use xds_proto::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use xds_proto::pb::envoy::config::core::v3::{Address, Node, SocketAddress};
use xds_proto::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use xds_proto::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint, LbEndpoint, LocalityLbEndpoints,
};
use xds_proto::pb::envoy::config::listener::v3::{Filter, FilterChain, Listener, filter};
use xds_proto::pb::envoy::config::route::v3::{RouteConfiguration, VirtualHost};
use xds_proto::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, Rds, http_connection_manager::RouteSpecifier,
};
use xds_proto::pb::google::protobuf::Any;
use xds_proto::prost::{Message, Name};
use xds_proto::{EncodedResource, ResourceType, TypeUrl};

pub type Res = EncodedResource;

pub const CDS: ResourceType = ResourceType::Cluster;
pub const EDS: ResourceType = ResourceType::ClusterLoadAssignment;
pub const LDS: ResourceType = ResourceType::Listener;
pub const RDS: ResourceType = ResourceType::RouteConfiguration;
pub const VHDS: ResourceType = ResourceType::VirtualHost;

pub fn url(t: ResourceType) -> TypeUrl {
    TypeUrl::from(t)
}

/// The traits a server takes from the type URL.
pub fn traits(t: &TypeUrl) -> TypeTraits {
    TypeTraits {
        wildcard_capable: t.is_wildcard_capable(),
        full_state: t.is_full_state(),
        aliases: t.has_aliases(),
    }
}

pub fn node(id: &str) -> Node {
    Node { id: id.into(), ..Default::default() }
}

pub fn node_in(id: &str, cluster: &str) -> Node {
    Node { id: id.into(), cluster: cluster.into(), ..Default::default() }
}

pub fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

// ---- resources ----

/// A STATIC cluster; `tag` changes its content (and so its version).
pub fn cluster(name: &str, tag: &str) -> Cluster {
    Cluster { name: name.into(), alt_stat_name: tag.into(), ..Default::default() }
}

/// An EDS cluster asking for the ClusterLoadAssignment `service` (its own name when empty).
pub fn eds_cluster(name: &str, service: &str) -> Cluster {
    Cluster {
        name: name.into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig {
            service_name: service.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn endpoint(ip: &str, port: u32) -> LbEndpoint {
    LbEndpoint {
        host_identifier: Some(HostIdentifier::Endpoint(Endpoint {
            address: Some(Address {
                address: Some(AddressKind::SocketAddress(SocketAddress {
                    address: ip.into(),
                    port_specifier: Some(PortSpecifier::PortValue(port)),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// A ClusterLoadAssignment with three endpoints; `gen` changes their port.
pub fn cla(name: &str, generation: u32) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: (1..=3)
                .map(|i| endpoint(&format!("10.0.0.{i}"), 8000 + generation))
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn pack<T: Message + Name>(message: &T) -> Any {
    Any { type_url: T::type_url(), value: message.encode_to_vec() }
}

/// A listener whose HTTP connection manager takes its routes from RDS `route`.
pub fn rds_listener(name: &str, route: &str) -> Listener {
    let hcm = HttpConnectionManager {
        stat_prefix: "ingress".into(),
        route_specifier: Some(RouteSpecifier::Rds(Rds {
            route_config_name: route.into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    Listener {
        name: name.into(),
        filter_chains: vec![FilterChain {
            filters: vec![Filter {
                name: "envoy.filters.network.http_connection_manager".into(),
                config_type: Some(filter::ConfigType::TypedConfig(pack(&hcm))),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A listener naming nothing; `tag` changes its content.
pub fn listener(name: &str, tag: &str) -> Listener {
    Listener { name: name.into(), stat_prefix: tag.into(), ..Default::default() }
}

pub fn route_config(name: &str) -> RouteConfiguration {
    RouteConfiguration { name: name.into(), ..Default::default() }
}

pub fn virtual_host(name: &str, domains: &[&str]) -> VirtualHost {
    VirtualHost { name: name.into(), domains: names(domains), ..Default::default() }
}

pub fn enc<M: xds_proto::XdsResource>(m: &M) -> EncodedResource {
    EncodedResource::new(m).unwrap()
}

// ---- signals ----

/// Whether the signal was raised since it was last taken, consuming the raise. Polls the wait once
/// with a no-op waker: no runtime, no sleeping, deterministic.
pub fn take_raised(signal: &Signal) -> bool {
    let mut wait = pin!(signal.raised());
    wait.as_mut().poll(&mut Context::from_waker(Waker::noop())) == Poll::Ready(())
}

// ---- stream-side clients ----

/// Opens a watch the way a server stream does.
pub fn open(
    cache: &dyn Cache,
    node: &Node,
    t: &TypeUrl,
    variant: Variant,
) -> Result<(Box<dyn Watch>, Arc<Signal>), CacheError> {
    let signal = Arc::new(Signal::new());
    let watch = cache.watch(WatchRequest { node, type_url: t, variant }, signal.clone())?;
    Ok((watch, signal))
}

/// One SotW sub-stream reading a cache.
pub struct SotwClient {
    pub watch: Box<dyn Watch>,
    pub signal: Arc<Signal>,
    pub sub: SotwSubStream<Res>,
    pub nonces: Nonces,
    /// The names the client currently asks for (resent with each ACK).
    pub names: Vec<String>,
}

impl SotwClient {
    pub fn open(cache: &dyn Cache, node: &Node, t: ResourceType) -> Self {
        let t = url(t);
        let (watch, signal) = open(cache, node, &t, Variant::Sotw).unwrap();
        SotwClient {
            watch,
            signal,
            sub: SotwSubStream::new(traits(&t)),
            nonces: Nonces::new(),
            names: Vec::new(),
        }
    }

    /// The first request: `names` (empty: legacy wildcard) at `version`.
    pub fn subscribe(&mut self, names_: &[&str], version: &str) -> Handled {
        self.names = names(names_);
        self.sub.handle_request(SotwRequest {
            version_info: version.into(),
            resource_names: self.names.clone().into(),
            ..Default::default()
        })
    }

    pub fn poll(&mut self) -> Option<SotwResponse<Res>> {
        let (sub, nonces) = (&mut self.sub, &mut self.nonces);
        let mut out = None;
        self.watch.read(&mut |view| out = sub.poll_response(view, nonces));
        out
    }

    pub fn poll_deferring_removals(&mut self) -> Option<SotwResponse<Res>> {
        let (sub, nonces) = (&mut self.sub, &mut self.nonces);
        let mut out = None;
        self.watch.read(&mut |view| out = sub.poll_response_deferring_removals(view, nonces));
        out
    }

    pub fn ack(&mut self, response: &SotwResponse<Res>) -> Handled {
        self.sub.handle_request(SotwRequest {
            version_info: response.version_info.clone(),
            resource_names: self.names.clone().into(),
            response_nonce: response.nonce.clone(),
            ..Default::default()
        })
    }

    /// Polls, expecting a response, and ACKs it.
    pub fn expect(&mut self) -> SotwResponse<Res> {
        let r = self.poll().expect("a response is owed");
        let _ = self.ack(&r);
        r
    }
}

/// One delta sub-stream reading a cache.
pub struct DeltaClient {
    pub watch: Box<dyn Watch>,
    pub signal: Arc<Signal>,
    pub sub: DeltaSubStream<Res>,
    pub nonces: Nonces,
}

impl DeltaClient {
    pub fn open(cache: &dyn Cache, node: &Node, t: ResourceType) -> Self {
        let t = url(t);
        let (watch, signal) = open(cache, node, &t, Variant::Delta).unwrap();
        DeltaClient { watch, signal, sub: DeltaSubStream::new(traits(&t)), nonces: Nonces::new() }
    }

    pub fn request(&mut self, subscribe: &[&str], unsubscribe: &[&str]) -> Handled {
        self.sub.handle_request(DeltaRequest {
            subscribe: names(subscribe),
            unsubscribe: names(unsubscribe),
            ..Default::default()
        })
    }

    /// A first request declaring what the client holds (rule D7).
    pub fn reconnect(&mut self, subscribe: &[&str], held: &[(&str, &str)]) -> Handled {
        self.sub.handle_request(DeltaRequest {
            subscribe: names(subscribe),
            initial_resource_versions: held
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        })
    }

    pub fn poll(&mut self) -> Option<DeltaResponse<Res>> {
        let (sub, nonces) = (&mut self.sub, &mut self.nonces);
        let mut out = None;
        self.watch.read(&mut |view| out = sub.poll_response(view, nonces));
        out
    }

    pub fn ack(&mut self, response: &DeltaResponse<Res>) -> Handled {
        self.sub.handle_request(DeltaRequest {
            response_nonce: response.nonce.clone(),
            ..Default::default()
        })
    }

    pub fn expect(&mut self) -> DeltaResponse<Res> {
        let r = self.poll().expect("a response is owed");
        let _ = self.ack(&r);
        r
    }
}

pub fn sotw_names(r: &SotwResponse<Res>) -> Vec<String> {
    r.resources.iter().map(|x| x.name().to_owned()).collect()
}

/// The entries of a delta response: (name, Some(version)) or (name, None) for "does not exist".
pub fn delta_items(r: &DeltaResponse<Res>) -> Vec<(String, Option<String>)> {
    r.resources
        .iter()
        .map(|e| match e {
            DeltaResource::Present { resource, .. } => {
                (resource.name().to_owned(), Some(resource.version().to_owned()))
            }
            DeltaResource::Absent { name, .. } => (name.clone(), None),
        })
        .collect()
}

pub fn delta_names(r: &DeltaResponse<Res>) -> Vec<String> {
    delta_items(r).into_iter().map(|(n, _)| n).collect()
}

/// What a delta client holds after applying a response: name -> version.
pub fn apply_delta(held: &mut BTreeMap<String, String>, r: &DeltaResponse<Res>) {
    for e in &r.resources {
        match e {
            DeltaResource::Present { resource, .. } => {
                held.insert(resource.name().to_owned(), resource.version().to_owned());
            }
            DeltaResource::Absent { name, .. } => {
                held.remove(name);
            }
        }
    }
    for name in &r.removed_resources {
        held.remove(name);
    }
}

/// name -> version of a list of resources.
pub fn versions<'a>(rs: impl IntoIterator<Item = &'a EncodedResource>) -> BTreeMap<String, String> {
    rs.into_iter().map(|r| (r.name().to_owned(), r.version().to_owned())).collect()
}
