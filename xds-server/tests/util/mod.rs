//! The shared harness of the server's wire tests: a server on `127.0.0.1:0`, raw tonic clients
//! driven through channels, resource builders and decoders. Every receive has a timeout, so a test
//! fails instead of hanging.
#![allow(dead_code, unreachable_pub)]

pub mod raw_http;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status, Streaming};
use xds_cache::Cache;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, EdsClusterConfig,
};
use xds_proto::pb::envoy::config::core::v3::address::Address as AddressKind;
use xds_proto::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use xds_proto::pb::envoy::config::core::v3::{Address, Node, SocketAddress};
use xds_proto::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use xds_proto::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint as LbHost, LbEndpoint, LocalityLbEndpoints,
};
use xds_proto::pb::envoy::config::listener::v3::{Filter, FilterChain, Listener, filter};
use xds_proto::pb::envoy::config::route::v3::route::Action;
use xds_proto::pb::envoy::config::route::v3::route_action::ClusterSpecifier;
use xds_proto::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteConfiguration, VirtualHost,
};
use xds_proto::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, Rds, http_connection_manager::RouteSpecifier,
};
use xds_proto::pb::envoy::extensions::transport_sockets::tls::v3::Secret;
use xds_proto::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use xds_proto::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use xds_proto::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
    ResourceError,
};
use xds_proto::pb::envoy::service::endpoint::v3::endpoint_discovery_service_client::EndpointDiscoveryServiceClient;
use xds_proto::pb::envoy::service::route::v3::virtual_host_discovery_service_client::VirtualHostDiscoveryServiceClient;
use xds_proto::pb::google::protobuf::Any;
use xds_proto::pb::google::rpc::Status as RpcStatus;
use xds_proto::prost::{Message, Name};
use xds_proto::{ResourceType, XdsResource};
use xds_server::XdsServer;

/// How long a receive may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(5);
/// How long "no response" is watched for.
pub const QUIET: Duration = Duration::from_millis(300);

pub const CDS: ResourceType = ResourceType::Cluster;
pub const EDS: ResourceType = ResourceType::ClusterLoadAssignment;
pub const LDS: ResourceType = ResourceType::Listener;
pub const RDS: ResourceType = ResourceType::RouteConfiguration;
pub const SDS: ResourceType = ResourceType::Secret;
pub const VHDS: ResourceType = ResourceType::VirtualHost;

// ---- the server ----

/// A server serving on a free local port until dropped.
pub struct TestServer {
    pub server: XdsServer,
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// Starts `server` on `127.0.0.1:0`.
pub async fn start(server: XdsServer) -> TestServer {
    let routes = server.routes();
    start_routes(server, routes).await
}

/// Starts `routes` (of `server`) on `127.0.0.1:0`.
pub async fn start_routes(server: XdsServer, routes: tonic::service::Routes) -> TestServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            })
            .await;
    });
    TestServer { server, addr, stop: Some(stop), task }
}

/// Starts a default server over `cache`.
pub async fn serve(cache: impl Cache) -> TestServer {
    start(XdsServer::new(cache)).await
}

impl TestServer {
    /// A new HTTP/2 connection to the server (each client gets its own, so that one client's
    /// flow control never stalls another's).
    pub async fn channel(&self) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect")
    }

    pub async fn ads(&self) -> AggregatedDiscoveryServiceClient<Channel> {
        AggregatedDiscoveryServiceClient::new(self.channel().await)
    }

    pub async fn cds(&self) -> ClusterDiscoveryServiceClient<Channel> {
        ClusterDiscoveryServiceClient::new(self.channel().await)
    }

    pub async fn eds(&self) -> EndpointDiscoveryServiceClient<Channel> {
        EndpointDiscoveryServiceClient::new(self.channel().await)
    }

    pub async fn vhds(&self) -> VirtualHostDiscoveryServiceClient<Channel> {
        VirtualHostDiscoveryServiceClient::new(self.channel().await)
    }

    /// The Prometheus text of the server's metrics.
    pub fn metrics(&self) -> String {
        self.server.metrics().render()
    }

    /// One series' value, e.g. `metric("xds_responses_total", "sotw", "cluster")`.
    pub fn metric(&self, name: &str, variant: &str, type_label: &str) -> f64 {
        let prefix = format!("{name}{{variant=\"{variant}\",type=\"{type_label}\"}} ");
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0.0, |v| v.parse().expect("a number"))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

/// Waits until `cond` holds, polling; fails the test after [`WAIT`].
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---- clients ----

pub fn node(id: &str) -> Node {
    Node { id: id.into(), ..Default::default() }
}

pub fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

pub fn url(t: ResourceType) -> String {
    t.type_url().to_owned()
}

/// A state-of-the-world stream: requests go through a channel, responses are read with timeouts.
/// It remembers the names it asks for per type, so that ACKs and NACKs repeat them.
pub struct Sotw {
    tx: mpsc::Sender<DiscoveryRequest>,
    rx: Streaming<DiscoveryResponse>,
    node: Option<Node>,
    sent_first: bool,
    subs: HashMap<String, Vec<String>>,
}

type SotwCall = Result<tonic::Response<Streaming<DiscoveryResponse>>, Status>;

impl Sotw {
    /// Opens a stream with `open` (which calls one RPC); its first request will carry `node`.
    pub async fn open<F, Fut>(node: Option<Node>, open: F) -> Result<Sotw, Status>
    where
        F: FnOnce(ReceiverStream<DiscoveryRequest>) -> Fut,
        Fut: Future<Output = SotwCall>,
    {
        let (tx, rx) = mpsc::channel(64);
        let response = tokio::time::timeout(WAIT, open(ReceiverStream::new(rx)))
            .await
            .expect("the stream did not open in time")?;
        Ok(Sotw { tx, rx: response.into_inner(), node, sent_first: false, subs: HashMap::new() })
    }

    /// A `StreamAggregatedResources` stream for `node_id`.
    pub async fn ads(server: &TestServer, node_id: &str) -> Sotw {
        let mut client = server.ads().await;
        Sotw::open(
            Some(node(node_id)),
            |r| async move { client.stream_aggregated_resources(r).await },
        )
        .await
        .expect("open ADS")
    }

    /// A `StreamAggregatedResources` stream for `node_id` on its own connection with the
    /// smallest HTTP/2 windows (64 KiB): a client that does not read blocks the server's writes to
    /// it after that much.
    pub async fn ads_small_windows(server: &TestServer, node_id: &str) -> Sotw {
        let channel = Endpoint::from_shared(format!("http://{}", server.addr))
            .expect("endpoint")
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .connect()
            .await
            .expect("connect");
        let mut client = AggregatedDiscoveryServiceClient::new(channel);
        Sotw::open(
            Some(node(node_id)),
            |r| async move { client.stream_aggregated_resources(r).await },
        )
        .await
        .expect("open ADS")
    }

    /// A `StreamClusters` stream for `node_id`.
    pub async fn clusters(server: &TestServer, node_id: &str) -> Sotw {
        let mut client = server.cds().await;
        Sotw::open(Some(node(node_id)), |r| async move { client.stream_clusters(r).await })
            .await
            .expect("open CDS")
    }

    /// A `StreamEndpoints` stream for `node_id`.
    pub async fn endpoints(server: &TestServer, node_id: &str) -> Sotw {
        let mut client = server.eds().await;
        Sotw::open(Some(node(node_id)), |r| async move { client.stream_endpoints(r).await })
            .await
            .expect("open EDS")
    }

    /// Closes the client's side of the stream: the server sees its request stream end.
    pub fn close_requests(&mut self) {
        self.tx = mpsc::channel(1).0;
    }

    /// Sends a request as it is (no node added).
    pub async fn send_raw(&self, request: DiscoveryRequest) {
        self.tx.send(request).await.expect("the request stream is closed");
    }

    /// Sends a request, adding the node to the stream's first request.
    pub async fn send(&mut self, mut request: DiscoveryRequest) {
        if !self.sent_first {
            self.sent_first = true;
            request.node = self.node.clone();
        }
        self.subs.insert(request.type_url.clone(), request.resource_names.clone());
        self.send_raw(request).await;
    }

    /// Subscribes to `list` of `t` (a first request, or a change with the latest nonce).
    pub async fn subscribe(
        &mut self,
        t: ResourceType,
        list: &[&str],
        last: Option<&DiscoveryResponse>,
    ) {
        let (version_info, response_nonce) = last
            .map_or((String::new(), String::new()), |r| (r.version_info.clone(), r.nonce.clone()));
        self.send(DiscoveryRequest {
            type_url: url(t),
            resource_names: names(list),
            version_info,
            response_nonce,
            ..Default::default()
        })
        .await;
    }

    /// The names last asked for `type_url` (on a per-type stream, perhaps without a type URL).
    fn names_for(&self, type_url: &str) -> Vec<String> {
        self.subs.get(type_url).or_else(|| self.subs.get("")).cloned().unwrap_or_default()
    }

    /// ACKs `response`, asking again for the names last asked for its type.
    pub async fn ack(&mut self, response: &DiscoveryResponse) {
        let resource_names = self.names_for(&response.type_url);
        self.send(DiscoveryRequest {
            type_url: response.type_url.clone(),
            version_info: response.version_info.clone(),
            response_nonce: response.nonce.clone(),
            resource_names,
            ..Default::default()
        })
        .await;
    }

    /// NACKs `response`, keeping `kept_version`.
    pub async fn nack(&mut self, response: &DiscoveryResponse, kept_version: &str, why: &str) {
        let resource_names = self.names_for(&response.type_url);
        self.send(DiscoveryRequest {
            type_url: response.type_url.clone(),
            version_info: kept_version.into(),
            response_nonce: response.nonce.clone(),
            resource_names,
            error_detail: Some(RpcStatus { code: 3, message: why.into(), details: vec![] }),
            ..Default::default()
        })
        .await;
    }

    /// The next response; fails the test on an error, the end of the stream or a timeout.
    pub async fn recv(&mut self) -> DiscoveryResponse {
        match tokio::time::timeout(WAIT, self.rx.message()).await {
            Ok(Ok(Some(r))) => r,
            Ok(Ok(None)) => panic!("the stream ended"),
            Ok(Err(status)) => panic!("the stream failed: {status:?}"),
            Err(_) => panic!("no response within {WAIT:?}"),
        }
    }

    /// The next response, which must be of type `t`.
    pub async fn recv_type(&mut self, t: ResourceType) -> DiscoveryResponse {
        let r = self.recv().await;
        assert_eq!(r.type_url, url(t), "expected a response of {t:?}");
        r
    }

    /// The status the stream ends with (responses before it are skipped); fails the test if the
    /// stream ends cleanly or stays open.
    pub async fn recv_err(&mut self) -> Status {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.message()).await {
                Ok(Ok(Some(_))) => continue,
                Ok(Ok(None)) => panic!("the stream ended without an error"),
                Ok(Err(status)) => return status,
                Err(_) => panic!("the stream did not fail within {WAIT:?}"),
            }
        }
    }

    /// How the stream ends (responses before are skipped): `Some(status)` for an error, `None`
    /// for a clean end; fails the test if the stream stays open.
    pub async fn recv_end(&mut self) -> Option<Status> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.message()).await {
                Ok(Ok(Some(_))) => continue,
                Ok(Ok(None)) => return None,
                Ok(Err(status)) => return Some(status),
                Err(_) => panic!("the stream did not end within {WAIT:?}"),
            }
        }
    }

    /// Asserts that nothing arrives for [`QUIET`].
    pub async fn expect_quiet(&mut self) {
        if let Ok(got) = tokio::time::timeout(QUIET, self.rx.message()).await {
            panic!("expected no response, got {got:?}");
        }
    }
}

/// An incremental stream.
pub struct Delta {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: Streaming<DeltaDiscoveryResponse>,
    node: Option<Node>,
    sent_first: bool,
}

type DeltaCall = Result<tonic::Response<Streaming<DeltaDiscoveryResponse>>, Status>;

impl Delta {
    pub async fn open<F, Fut>(node: Option<Node>, open: F) -> Result<Delta, Status>
    where
        F: FnOnce(ReceiverStream<DeltaDiscoveryRequest>) -> Fut,
        Fut: Future<Output = DeltaCall>,
    {
        let (tx, rx) = mpsc::channel(64);
        let response = tokio::time::timeout(WAIT, open(ReceiverStream::new(rx)))
            .await
            .expect("the stream did not open in time")?;
        Ok(Delta { tx, rx: response.into_inner(), node, sent_first: false })
    }

    /// A `DeltaAggregatedResources` stream for `node_id`.
    pub async fn ads(server: &TestServer, node_id: &str) -> Delta {
        let mut client = server.ads().await;
        Delta::open(
            Some(node(node_id)),
            |r| async move { client.delta_aggregated_resources(r).await },
        )
        .await
        .expect("open delta ADS")
    }

    /// A `DeltaClusters` stream for `node_id`.
    pub async fn clusters(server: &TestServer, node_id: &str) -> Delta {
        let mut client = server.cds().await;
        Delta::open(Some(node(node_id)), |r| async move { client.delta_clusters(r).await })
            .await
            .expect("open delta CDS")
    }

    /// A `DeltaVirtualHosts` stream for `node_id`.
    pub async fn virtual_hosts(server: &TestServer, node_id: &str) -> Delta {
        let mut client = server.vhds().await;
        Delta::open(Some(node(node_id)), |r| async move { client.delta_virtual_hosts(r).await })
            .await
            .expect("open VHDS")
    }

    pub async fn send_raw(&self, request: DeltaDiscoveryRequest) {
        self.tx.send(request).await.expect("the request stream is closed");
    }

    /// Sends a request, adding the node to the stream's first request.
    pub async fn send(&mut self, mut request: DeltaDiscoveryRequest) {
        if !self.sent_first {
            self.sent_first = true;
            request.node = self.node.clone();
        }
        self.send_raw(request).await;
    }

    /// Subscribes to and unsubscribes from names of `t` (no nonce: a spontaneous request).
    pub async fn subscribe(&mut self, t: ResourceType, subscribe: &[&str], unsubscribe: &[&str]) {
        self.send(DeltaDiscoveryRequest {
            type_url: url(t),
            resource_names_subscribe: names(subscribe),
            resource_names_unsubscribe: names(unsubscribe),
            ..Default::default()
        })
        .await;
    }

    pub async fn ack(&mut self, response: &DeltaDiscoveryResponse) {
        self.send(DeltaDiscoveryRequest {
            type_url: response.type_url.clone(),
            response_nonce: response.nonce.clone(),
            ..Default::default()
        })
        .await;
    }

    pub async fn nack(&mut self, response: &DeltaDiscoveryResponse, why: &str) {
        self.send(DeltaDiscoveryRequest {
            type_url: response.type_url.clone(),
            response_nonce: response.nonce.clone(),
            error_detail: Some(RpcStatus { code: 3, message: why.into(), details: vec![] }),
            ..Default::default()
        })
        .await;
    }

    pub async fn recv(&mut self) -> DeltaDiscoveryResponse {
        match tokio::time::timeout(WAIT, self.rx.message()).await {
            Ok(Ok(Some(r))) => r,
            Ok(Ok(None)) => panic!("the stream ended"),
            Ok(Err(status)) => panic!("the stream failed: {status:?}"),
            Err(_) => panic!("no response within {WAIT:?}"),
        }
    }

    pub async fn recv_type(&mut self, t: ResourceType) -> DeltaDiscoveryResponse {
        let r = self.recv().await;
        assert_eq!(r.type_url, url(t), "expected a response of {t:?}");
        r
    }

    pub async fn recv_err(&mut self) -> Status {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.message()).await {
                Ok(Ok(Some(_))) => continue,
                Ok(Ok(None)) => panic!("the stream ended without an error"),
                Ok(Err(status)) => return status,
                Err(_) => panic!("the stream did not fail within {WAIT:?}"),
            }
        }
    }

    pub async fn expect_quiet(&mut self) {
        if let Ok(got) = tokio::time::timeout(QUIET, self.rx.message()).await {
            panic!("expected no response, got {got:?}");
        }
    }
}

/// Asserts a status's code and that its message mentions each of `words`.
pub fn assert_status(status: &Status, code: Code, words: &[&str]) {
    assert_eq!(status.code(), code, "unexpected status {status:?}");
    for w in words {
        assert!(status.message().contains(w), "{:?} does not mention {w:?}", status.message());
    }
}

// ---- resources ----

/// An EDS cluster whose endpoints are the ClusterLoadAssignment of its own name; `tag` changes
/// its content.
pub fn cluster(name: &str, tag: &str) -> Cluster {
    Cluster {
        name: name.into(),
        alt_stat_name: tag.into(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32)),
        eds_cluster_config: Some(EdsClusterConfig::default()),
        ..Default::default()
    }
}

/// A ClusterLoadAssignment with one endpoint on `port`.
pub fn cla(name: &str, port: u32) -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints {
            lb_endpoints: vec![LbEndpoint {
                host_identifier: Some(HostIdentifier::Endpoint(LbHost {
                    address: Some(Address {
                        address: Some(AddressKind::SocketAddress(SocketAddress {
                            address: "10.0.0.1".into(),
                            port_specifier: Some(PortSpecifier::PortValue(port)),
                            ..Default::default()
                        })),
                    }),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

pub fn pack<T: Message + Name>(message: &T) -> Any {
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

/// A route configuration sending everything to `cluster`.
pub fn route_to(name: &str, cluster: &str) -> RouteConfiguration {
    RouteConfiguration {
        name: name.into(),
        virtual_hosts: vec![VirtualHost {
            name: "all".into(),
            domains: names(&["*"]),
            routes: vec![Route {
                action: Some(Action::Route(RouteAction {
                    cluster_specifier: Some(ClusterSpecifier::Cluster(cluster.into())),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A route configuration for VHDS: its virtual hosts come on demand.
pub fn vhds_route(name: &str, tag: &str) -> RouteConfiguration {
    RouteConfiguration {
        name: name.into(),
        internal_only_headers: names(&[tag]),
        ..Default::default()
    }
}

pub fn virtual_host(name: &str, domains: &[&str]) -> VirtualHost {
    VirtualHost { name: name.into(), domains: names(domains), ..Default::default() }
}

pub fn secret(name: &str) -> Secret {
    Secret { name: name.into(), ..Default::default() }
}

/// Builds a snapshot from resources of any types.
#[macro_export]
macro_rules! snapshot {
    ($($r:expr),* $(,)?) => {{
        let mut b = xds_cache::Snapshot::builder();
        $( b.add(&$r).expect("encode"); )*
        b.build_unchecked()
    }};
}

// ---- decoding ----

fn decode<M: Message + Default>(any: &Any) -> M {
    M::decode(any.value.as_slice()).expect("a valid resource")
}

/// The resource name inside an `Any` of a built-in type, read with prost.
pub fn any_name(any: &Any) -> String {
    match ResourceType::from_type_url(&any.type_url) {
        Some(ResourceType::Cluster) => decode::<Cluster>(any).name,
        Some(ResourceType::ClusterLoadAssignment) => {
            decode::<ClusterLoadAssignment>(any).cluster_name
        }
        Some(ResourceType::Listener) => decode::<Listener>(any).name,
        Some(ResourceType::RouteConfiguration) => decode::<RouteConfiguration>(any).name,
        Some(ResourceType::VirtualHost) => decode::<VirtualHost>(any).name,
        Some(ResourceType::Secret) => decode::<Secret>(any).name,
        other => panic!("no decoder for {other:?} ({})", any.type_url),
    }
}

/// The names of a SotW response's resources, in order.
pub fn sotw_names(r: &DiscoveryResponse) -> Vec<String> {
    r.resources.iter().map(any_name).collect()
}

/// Resource errors (rule C4) as (name, `google.rpc.Code`), in order.
fn error_codes(errors: &[ResourceError]) -> Vec<(String, i32)> {
    errors
        .iter()
        .map(|e| {
            let name = e.resource_name.as_ref().map(|n| n.name.clone()).unwrap_or_default();
            (name, e.error_detail.as_ref().map_or(0, |s| s.code))
        })
        .collect()
}

/// A SotW response's resource errors: (name, `google.rpc.Code`), in order.
pub fn sotw_errors(r: &DiscoveryResponse) -> Vec<(String, i32)> {
    error_codes(&r.resource_errors)
}

/// A delta response's resource errors: (name, `google.rpc.Code`), in order.
pub fn delta_errors(r: &DeltaDiscoveryResponse) -> Vec<(String, i32)> {
    error_codes(&r.resource_errors)
}

/// The names of a delta response's resources that carry a body, in order.
pub fn delta_names(r: &DeltaDiscoveryResponse) -> Vec<String> {
    r.resources.iter().filter(|x| x.resource.is_some()).map(|x| x.name.clone()).collect()
}

/// The names of a delta response's bodiless resources ("does not exist", rule D6).
pub fn delta_absent(r: &DeltaDiscoveryResponse) -> Vec<String> {
    r.resources.iter().filter(|x| x.resource.is_none()).map(|x| x.name.clone()).collect()
}

/// The delta resource named `name`.
pub fn delta_resource<'a>(r: &'a DeltaDiscoveryResponse, name: &str) -> &'a Resource {
    r.resources.iter().find(|x| x.name == name).unwrap_or_else(|| panic!("no {name} in {r:?}"))
}

/// Decodes a resource of message type `M` from a SotW response.
pub fn decode_all<M: XdsResource>(r: &DiscoveryResponse) -> Vec<M> {
    r.resources.iter().map(decode::<M>).collect()
}

/// The route configuration's first route's cluster.
pub fn route_cluster(rc: &RouteConfiguration) -> String {
    match rc.virtual_hosts[0].routes[0].action.as_ref() {
        Some(Action::Route(RouteAction {
            cluster_specifier: Some(ClusterSpecifier::Cluster(c)),
            ..
        })) => c.clone(),
        other => panic!("unexpected action {other:?}"),
    }
}

/// The status of the only open stream of `node_id` for `t`.
pub fn type_status(
    server: &XdsServer,
    node_id: &str,
    t: ResourceType,
) -> Option<xds_server::TypeStatus> {
    server.status().node(node_id).first().and_then(|s| s.types.get(t.type_url()).cloned())
}
