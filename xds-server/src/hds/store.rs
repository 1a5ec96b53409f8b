//! The endpoint health every open HDS stream reported last.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use xds_proto::pb::envoy::config::core::v3::address::Address as AddressKind;
use xds_proto::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use xds_proto::pb::envoy::config::core::v3::{HealthStatus, Node};
use xds_proto::pb::envoy::config::endpoint::v3::Endpoint;
use xds_proto::pb::envoy::service::health::v3::{EndpointHealth, EndpointHealthResponse};

use super::view::HealthSnapshot;
use crate::lrs::store::{Labels, Reason, Rejections};
use crate::status::lock;

/// Limits of health discovery.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HdsConfig {
    /// Open HDS streams at most; more are refused with `RESOURCE_EXHAUSTED`. Default 10,000.
    pub max_streams: usize,
    /// Endpoints one stream's response may report; the rest are rejected
    /// (`too_many_endpoints`). Default 10,000.
    pub max_endpoints_per_stream: usize,
    /// Longest cluster name or endpoint address, in bytes (`name_too_long`). Default 256.
    pub max_name_bytes: usize,
    /// Distinct cluster label values in the metrics, the rest under `other`. Default 256.
    pub max_cluster_labels: usize,
}

impl Default for HdsConfig {
    fn default() -> Self {
        Self {
            max_streams: 10_000,
            max_endpoints_per_stream: 10_000,
            max_name_bytes: 256,
            max_cluster_labels: 256,
        }
    }
}

/// One stream's last response: (cluster, endpoint address) -> status.
#[derive(Debug)]
struct StreamHealth {
    node_id: Arc<str>,
    endpoints: BTreeMap<(Arc<str>, String), (Arc<str>, HealthStatus)>,
}

/// Every stream's reported health.
#[derive(Debug)]
pub(crate) struct HealthStore {
    pub(crate) config: HdsConfig,
    streams: Mutex<BTreeMap<u64, Arc<Mutex<StreamHealth>>>>,
    labels: Labels,
    pub(crate) rejected: Rejections,
    responses: AtomicU64,
    revision: watch::Sender<u64>,
}

/// A stream's place in the store; dropping it takes its reports out of the view.
#[derive(Debug)]
pub(crate) struct Registration {
    store: Arc<HealthStore>,
    id: u64,
    health: Arc<Mutex<StreamHealth>>,
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
            config,
            streams: Mutex::default(),
            rejected: Rejections::default(),
            responses: AtomicU64::new(0),
            revision: watch::Sender::new(0),
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

    pub(crate) fn register(self: &Arc<Self>, id: u64, node: &Node) -> Option<Registration> {
        let mut end = node.id.len().min(self.config.max_name_bytes);
        while !node.id.is_char_boundary(end) {
            end -= 1;
        }
        let health = Arc::new(Mutex::new(StreamHealth {
            node_id: Arc::from(&node.id[..end]),
            endpoints: BTreeMap::new(),
        }));
        {
            let mut streams = lock(&self.streams);
            if streams.len() >= self.config.max_streams {
                return None;
            }
            streams.insert(id, health.clone());
        }
        self.changed();
        Some(Registration { store: self.clone(), id, health })
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
    /// Replaces the stream's reported health with `response` (a client reports every endpoint
    /// it checks each time), bounded: names, endpoints per stream.
    pub(crate) fn ingest(&self, response: &EndpointHealthResponse) {
        let store = &*self.store;
        let config = &store.config;
        store.responses.fetch_add(1, Ordering::Relaxed);
        let mut endpoints = BTreeMap::new();
        let mut over = 0u64;
        let mut put = |cluster: &str, e: &EndpointHealth| {
            if endpoints.len() >= config.max_endpoints_per_stream {
                over += 1;
                return;
            }
            let address = endpoint_address(e.endpoint.as_ref());
            if cluster.len() > config.max_name_bytes || address.len() > config.max_name_bytes {
                store.rejected.add(Reason::NameTooLong, 1);
                return;
            }
            let status = HealthStatus::try_from(e.health_status).unwrap_or(HealthStatus::Unknown);
            endpoints.insert((Arc::from(cluster), address), (store.labels.admit(cluster), status));
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
            store.rejected.add(Reason::TooManyEndpoints, over);
        }
        lock(&self.health).endpoints = endpoints;
        store.changed();
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.store.streams).remove(&self.id);
        self.store.changed();
    }
}
