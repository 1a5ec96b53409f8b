//! The endpoint health every open HDS stream reported last.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use xds_proto::pb::envoy::config::core::v3::address::Address as AddressKind;
use xds_proto::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use xds_proto::pb::envoy::config::core::v3::{HealthStatus, Node};
use xds_proto::pb::envoy::config::endpoint::v3::Endpoint;
use xds_proto::pb::envoy::service::health::v3::{
    EndpointHealth, EndpointHealthResponse, HealthCheckSpecifier,
};

use super::view::HealthSnapshot;
use crate::lrs::store::Labels;
use crate::reporter::{Budget, Charge, OverBudget, Reason, ReportLimits};
use crate::status::lock;

/// Limits of health discovery.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HdsConfig {
    /// Open HDS streams at most; more are refused with `RESOURCE_EXHAUSTED`. Default 10,000.
    pub max_streams: usize,
    /// Streams open at most that have not sent their first request; more are refused with
    /// `RESOURCE_EXHAUSTED` (`too_many_pending`). Default 1,024.
    pub max_pending_streams: usize,
    /// How long a stream may take to send its first request before it is ended with
    /// `DEADLINE_EXCEEDED` (`first_request_timeout`). Default 30 s.
    pub first_request_timeout: Duration,
    /// Endpoints one stream's response may report; the rest are rejected
    /// (`too_many_endpoints`). Default 10,000.
    pub max_endpoints_per_stream: usize,
    /// Longest cluster name or endpoint address, in bytes (`name_too_long`). Default 256.
    pub max_name_bytes: usize,
    /// Distinct cluster label values in the metrics, the rest under `other`. Default 256.
    pub max_cluster_labels: usize,
    /// The most bytes the last responses of every stream together may take (an estimate of
    /// the heap they use: a fixed size per endpoint plus its address and cluster names). A
    /// response that would pass it is not taken and its stream is ended with
    /// `RESOURCE_EXHAUSTED` (`over_budget`); what the stream held is given back. Default
    /// 64 MiB: about 500,000 endpoint reports with short names.
    pub max_total_bytes: usize,
    /// The most endpoint reports every stream's last response together may hold (an endpoint
    /// checked by two nodes counts twice); past it, as for `max_total_bytes`. Default 524,288.
    pub max_total_entries: usize,
    /// Messages per second one stream may send on average; a stream that sends faster is
    /// ended with `RESOURCE_EXHAUSTED` (`rate_limited`). Envoy sends one response per
    /// specifier interval. Default 10.
    pub max_reports_per_second: u32,
    /// Messages one stream may send at once above that average. Default 20.
    pub report_burst: u32,
}

/// Chainable setters, one per field: the struct is `#[non_exhaustive]` (a new knob is not a
/// breaking change), so code outside this crate builds one from `HdsConfig::default()`.
impl HdsConfig {
    /// Sets `max_streams` (see the field).
    #[must_use]
    pub fn max_streams(mut self, value: usize) -> Self {
        self.max_streams = value;
        self
    }

    /// Sets `max_pending_streams` (see the field).
    #[must_use]
    pub fn max_pending_streams(mut self, value: usize) -> Self {
        self.max_pending_streams = value;
        self
    }

    /// Sets `first_request_timeout` (see the field).
    #[must_use]
    pub fn first_request_timeout(mut self, value: Duration) -> Self {
        self.first_request_timeout = value;
        self
    }

    /// Sets `max_endpoints_per_stream` (see the field).
    #[must_use]
    pub fn max_endpoints_per_stream(mut self, value: usize) -> Self {
        self.max_endpoints_per_stream = value;
        self
    }

    /// Sets `max_name_bytes` (see the field).
    #[must_use]
    pub fn max_name_bytes(mut self, value: usize) -> Self {
        self.max_name_bytes = value;
        self
    }

    /// Sets `max_cluster_labels` (see the field).
    #[must_use]
    pub fn max_cluster_labels(mut self, value: usize) -> Self {
        self.max_cluster_labels = value;
        self
    }

    /// Sets `max_total_bytes` (see the field).
    #[must_use]
    pub fn max_total_bytes(mut self, value: usize) -> Self {
        self.max_total_bytes = value;
        self
    }

    /// Sets `max_total_entries` (see the field).
    #[must_use]
    pub fn max_total_entries(mut self, value: usize) -> Self {
        self.max_total_entries = value;
        self
    }

    /// Sets `max_reports_per_second` (see the field).
    #[must_use]
    pub fn max_reports_per_second(mut self, value: u32) -> Self {
        self.max_reports_per_second = value;
        self
    }

    /// Sets `report_burst` (see the field).
    #[must_use]
    pub fn report_burst(mut self, value: u32) -> Self {
        self.report_burst = value;
        self
    }
}

impl Default for HdsConfig {
    fn default() -> Self {
        Self {
            max_streams: 10_000,
            max_pending_streams: 1024,
            first_request_timeout: Duration::from_secs(30),
            max_endpoints_per_stream: 10_000,
            max_name_bytes: 256,
            max_cluster_labels: 256,
            max_total_bytes: 64 << 20,
            max_total_entries: 1 << 19,
            max_reports_per_second: 10,
            report_burst: 20,
        }
    }
}

/// (cluster, endpoint address) -> (cluster label, status).
type Endpoints = BTreeMap<(Arc<str>, String), (Arc<str>, HealthStatus)>;

/// What one endpoint report is charged to the budget besides its address: the map's key and
/// value and about a quarter of them again for the tree's nodes.
const ENDPOINT_BYTES: usize =
    (size_of::<(Arc<str>, String)>() + size_of::<(Arc<str>, HealthStatus)>()) * 5 / 4;

/// What one cluster name of a response is charged besides its bytes (its `Arc`'s counts).
const CLUSTER_BYTES: usize = 2 * size_of::<usize>();

/// One stream's last response: (cluster, endpoint address) -> status.
#[derive(Debug)]
struct StreamHealth {
    node_id: Arc<str>,
    endpoints: Endpoints,
    /// What `endpoints` drew from the store's budget.
    charge: Charge,
}

/// Every stream's reported health.
#[derive(Debug)]
pub(crate) struct HealthStore {
    pub(crate) config: HdsConfig,
    streams: Mutex<BTreeMap<u64, Arc<Mutex<StreamHealth>>>>,
    labels: Labels,
    pub(crate) gate: Arc<ReportLimits>,
    /// The allowance every stream's last response draws from.
    pub(crate) budget: Budget,
    responses: AtomicU64,
    revision: watch::Sender<u64>,
}

/// A stream's place in the store; dropping it takes its reports out of the view.
#[derive(Debug)]
pub(crate) struct Registration {
    store: Arc<HealthStore>,
    id: u64,
    health: Arc<Mutex<StreamHealth>>,
    asked: Asked,
}

/// The endpoints a stream was asked to check: (cluster, address), and the addresses alone for
/// the older flat list, which names no cluster.
#[derive(Debug, Default)]
pub(crate) struct Asked {
    endpoints: HashSet<(String, String)>,
    addresses: HashSet<String>,
}

impl Asked {
    /// The endpoints `specifier` asks to check.
    pub(crate) fn of(specifier: &HealthCheckSpecifier) -> Self {
        let mut asked = Asked::default();
        for c in &specifier.cluster_health_checks {
            for l in &c.locality_endpoints {
                for e in &l.endpoints {
                    let address = endpoint_address(Some(e));
                    asked.addresses.insert(address.clone());
                    asked.endpoints.insert((c.cluster_name.clone(), address));
                }
            }
        }
        asked
    }

    fn contains(&self, cluster: &str, address: &str) -> bool {
        if cluster.is_empty() {
            return self.addresses.contains(address);
        }
        // A response's endpoints are bounded, and so are these copies.
        self.endpoints.contains(&(cluster.to_owned(), address.to_owned()))
    }
}

/// `ip:port` (or the pipe's path) of an endpoint; empty when it has no address.
pub(crate) fn endpoint_address(e: Option<&Endpoint>) -> String {
    match e.and_then(|e| e.address.as_ref()).and_then(|a| a.address.as_ref()) {
        Some(AddressKind::SocketAddress(s)) => match s.port_specifier {
            Some(PortSpecifier::PortValue(p)) => format!("{}:{p}", s.address),
            Some(PortSpecifier::NamedPort(ref n)) => format!("{}:{n}", s.address),
            None => s.address.clone(),
        },
        Some(AddressKind::Pipe(p)) => p.path.clone(),
        _ => String::new(),
    }
}

impl HealthStore {
    pub(crate) fn new(config: HdsConfig) -> Self {
        Self {
            labels: Labels::new(config.max_cluster_labels),
            streams: Mutex::default(),
            gate: Arc::new(ReportLimits::new(
                config.max_streams,
                config.max_pending_streams,
                config.first_request_timeout,
                (config.max_reports_per_second, config.report_burst),
            )),
            budget: Budget::new(config.max_total_bytes, config.max_total_entries),
            responses: AtomicU64::new(0),
            revision: watch::Sender::new(0),
            config,
        }
    }

    fn changed(&self) {
        self.revision.send_modify(|r| *r += 1);
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }

    pub(crate) fn responses(&self) -> u64 {
        self.responses.load(Ordering::Relaxed)
    }

    pub(crate) fn register(
        self: &Arc<Self>,
        id: u64,
        node: &Node,
        asked: Asked,
    ) -> Option<Registration> {
        let node_id = crate::status::truncate(&node.id, self.config.max_name_bytes);
        let health = Arc::new(Mutex::new(StreamHealth {
            node_id: Arc::from(node_id),
            endpoints: BTreeMap::new(),
            charge: Charge::default(),
        }));
        {
            let mut streams = lock(&self.streams);
            if streams.len() >= self.config.max_streams {
                return None;
            }
            streams.insert(id, health.clone());
        }
        self.changed();
        Some(Registration { store: self.clone(), id, health, asked })
    }

    fn streams(&self) -> Vec<Arc<Mutex<StreamHealth>>> {
        lock(&self.streams).values().cloned().collect()
    }

    /// The view now: per cluster and endpoint, what each node reported last.
    pub(crate) fn snapshot(&self) -> HealthSnapshot {
        let streams = self.streams();
        let mut snapshot = HealthSnapshot {
            streams: streams.len(),
            responses: self.responses(),
            ..HealthSnapshot::default()
        };
        for s in &streams {
            let s = lock(s);
            for ((cluster, address), (_, status)) in &s.endpoints {
                snapshot
                    .clusters
                    .entry(cluster.to_string())
                    .or_default()
                    .entry(address.clone())
                    .or_default()
                    .by_node
                    .insert(s.node_id.to_string(), *status);
            }
        }
        snapshot
    }

    /// Per (cluster label, status): endpoint reports. For the metrics.
    pub(crate) fn by_label(&self) -> BTreeMap<(Arc<str>, &'static str), u64> {
        let mut out = BTreeMap::new();
        for s in self.streams() {
            for (label, status) in lock(&s).endpoints.values() {
                *out.entry((label.clone(), status_label(*status))).or_default() += 1;
            }
        }
        out
    }
}

/// The metric label of a status.
pub(crate) fn status_label(s: HealthStatus) -> &'static str {
    match s {
        HealthStatus::Unknown => "unknown",
        HealthStatus::Healthy => "healthy",
        HealthStatus::Unhealthy => "unhealthy",
        HealthStatus::Draining => "draining",
        HealthStatus::Timeout => "timeout",
        HealthStatus::Degraded => "degraded",
    }
}

impl Registration {
    /// Sets the endpoints the stream was asked to check (after a new specifier).
    pub(crate) fn set_asked(&mut self, asked: Asked) {
        self.asked = asked;
    }

    /// Replaces the stream's reported health with `response` (a client reports every endpoint
    /// it checks each time), bounded: names, endpoints per stream. Endpoints the stream was
    /// not asked to check are left out and counted (`unknown_endpoint`): a client cannot put
    /// endpoints of its choosing into the view. The new response replaces the old one in the
    /// store's budget too; when it does not fit, the stream's reports leave the view and the
    /// error says why (the stream is then ended).
    pub(crate) fn ingest(&self, response: &EndpointHealthResponse) -> Result<(), OverBudget> {
        let store = &*self.store;
        let config = &store.config;
        store.responses.fetch_add(1, Ordering::Relaxed);
        let mut endpoints = BTreeMap::new();
        let mut charge = Charge::default();
        // One copy of each cluster's name per response, shared by its endpoints.
        let mut clusters: HashMap<Box<str>, Arc<str>> = HashMap::new();
        let (mut over, mut unknown) = (0u64, 0u64);
        let mut put = |cluster: &str, e: &EndpointHealth| {
            if endpoints.len() >= config.max_endpoints_per_stream {
                over += 1;
                return;
            }
            let address = endpoint_address(e.endpoint.as_ref());
            if cluster.len() > config.max_name_bytes || address.len() > config.max_name_bytes {
                store.gate.rejected.add(Reason::NameTooLong, 1);
                return;
            }
            if !self.asked.contains(cluster, &address) {
                unknown += 1;
                return;
            }
            let status = HealthStatus::try_from(e.health_status).unwrap_or(HealthStatus::Unknown);
            let name = match clusters.get(cluster) {
                Some(name) => name.clone(),
                None => {
                    charge.bytes += CLUSTER_BYTES + cluster.len();
                    let name: Arc<str> = Arc::from(cluster);
                    clusters.insert(Box::from(cluster), name.clone());
                    name
                }
            };
            let bytes = ENDPOINT_BYTES + address.len();
            let value = (store.labels.admit(cluster), status);
            if endpoints.insert((name, address), value).is_none() {
                charge.bytes += bytes;
                charge.entries += 1;
            }
        };
        // The older flat list (deprecated, still sent by older proxies) has no cluster:
        // reported under "".
        #[allow(deprecated)]
        let flat = &response.endpoints_health;
        for e in flat {
            put("", e);
        }
        for c in &response.cluster_endpoints_health {
            for l in &c.locality_endpoints_health {
                for e in &l.endpoints_health {
                    put(&c.cluster_name, e);
                }
            }
        }
        if over > 0 {
            store.gate.rejected.add(Reason::TooManyEndpoints, over);
        }
        if unknown > 0 {
            store.gate.rejected.add(Reason::UnknownEndpoint, unknown);
        }
        // The old response's charge goes back before the new one is taken, so a stream that
        // reports the same endpoints again never needs twice its share.
        let mut health = lock(&self.health);
        store.budget.give(std::mem::take(&mut health.charge));
        let taken = store.budget.try_take(charge);
        let old = if taken {
            health.charge = charge;
            std::mem::replace(&mut health.endpoints, endpoints)
        } else {
            std::mem::take(&mut health.endpoints)
        };
        drop(health);
        // Freed with no lock held.
        drop(old);
        store.changed();
        if taken { Ok(()) } else { Err(store.budget.over("HDS")) }
    }
}

impl Drop for Registration {
    /// Takes the stream out of the view and gives its reports and budget back at once (a
    /// reader may hold the stream's entry for a moment longer).
    fn drop(&mut self) {
        lock(&self.store.streams).remove(&self.id);
        let endpoints = {
            let mut health = lock(&self.health);
            self.store.budget.give(std::mem::take(&mut health.charge));
            std::mem::take(&mut health.endpoints)
        };
        drop(endpoints);
        self.store.changed();
    }
}
