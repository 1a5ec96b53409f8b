//! The view of reported endpoint health.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;
use xds_proto::pb::envoy::config::core::v3::HealthStatus;

use super::store::HealthStore;

/// What the nodes that check one endpoint reported last.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointHealthView {
    /// Per node id, its last reported status.
    pub by_node: BTreeMap<String, HealthStatus>,
}

impl EndpointHealthView {
    /// Whether every node that checks the endpoint reported it `HEALTHY`.
    pub fn is_healthy(&self) -> bool {
        self.by_node.values().all(|s| *s == HealthStatus::Healthy)
    }
}

/// The endpoint health the connected clients reported last, per cluster and endpoint address
/// (`ip:port`). A client that disconnects leaves the view at once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HealthSnapshot {
    /// Open HDS streams.
    pub streams: usize,
    /// `EndpointHealthResponse`s received since the server started.
    pub responses: u64,
    /// Cluster name -> endpoint address -> health.
    pub clusters: BTreeMap<String, BTreeMap<String, EndpointHealthView>>,
}

/// A latest-wins subscription to the health view.
#[derive(Debug)]
pub struct HealthWatch {
    pub(crate) store: Arc<HealthStore>,
    pub(crate) rx: watch::Receiver<u64>,
}

impl HealthWatch {
    /// Waits for a change (a response, a stream opened or closed) and returns the view then.
    pub async fn changed(&mut self) -> HealthSnapshot {
        // The watch holds the store, and with it the sender: this cannot fail.
        let _ = self.rx.changed().await;
        self.store.snapshot()
    }

    /// The view now.
    pub fn latest(&self) -> HealthSnapshot {
        self.store.snapshot()
    }
}
