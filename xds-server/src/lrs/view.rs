//! The view of reported load handed to users: a snapshot, and a latest-wins subscription.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use xds_proto::pb::envoy::config::core::v3::Locality;

use super::store::Store;

/// Request counts over the window, plus requests in flight at the last report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadCounts {
    /// Requests issued (`total_issued_requests`).
    pub issued: u64,
    /// Requests that completed successfully (`total_successful_requests`).
    pub succeeded: u64,
    /// Requests that failed (`total_error_requests`).
    pub errors: u64,
    /// Requests in flight at each stream's last report, summed (`total_requests_in_progress`).
    pub in_progress: u64,
}

impl LoadCounts {
    pub(crate) fn add(&mut self, other: &LoadCounts) {
        self.issued = self.issued.saturating_add(other.issued);
        self.succeeded = self.succeeded.saturating_add(other.succeeded);
        self.errors = self.errors.saturating_add(other.errors);
        self.in_progress = self.in_progress.saturating_add(other.in_progress);
    }
}

/// A locality as reported: region, zone, sub-zone (empty when the report had none).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LocalityName {
    /// `Locality.region`.
    pub region: String,
    /// `Locality.zone`.
    pub zone: String,
    /// `Locality.sub_zone`.
    pub sub_zone: String,
}

impl LocalityName {
    /// `region/zone/sub_zone`: the locality's metric label.
    pub fn label(&self) -> String {
        format!("{}/{}/{}", self.region, self.zone, self.sub_zone)
    }
}

impl From<Option<&Locality>> for LocalityName {
    fn from(l: Option<&Locality>) -> Self {
        l.map_or_else(Self::default, |l| Self {
            region: l.region.clone(),
            zone: l.zone.clone(),
            sub_zone: l.sub_zone.clone(),
        })
    }
}

/// One cluster's load over the window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterLoad {
    /// Requests dropped by the clients (`total_dropped_requests`).
    pub dropped: u64,
    /// The sum over localities.
    pub total: LoadCounts,
    /// Per locality.
    pub localities: BTreeMap<LocalityName, LoadCounts>,
}

/// One node's load: what its open streams reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLoad {
    /// The node's open LRS streams.
    pub streams: usize,
    /// Per cluster.
    pub clusters: BTreeMap<String, ClusterLoad>,
}

/// The load the connected clients reported over the last window, per cluster and locality and
/// per node. A client that disconnects leaves the view at once: the view is the load of the
/// clients connected now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadSnapshot {
    /// How far back the counts reach.
    pub window: Duration,
    /// Open LRS streams.
    pub streams: usize,
    /// Reports received since the server started (including those of closed streams).
    pub reports: u64,
    /// Per cluster, over every node.
    pub clusters: BTreeMap<String, ClusterLoad>,
    /// Per node id.
    pub nodes: BTreeMap<String, NodeLoad>,
}

impl LoadSnapshot {
    /// The view as JSON, for a status page: per cluster, its totals and localities.
    pub fn to_json(&self) -> serde_json::Value {
        let counts = |c: &LoadCounts| {
            serde_json::json!({
                "issued": c.issued, "succeeded": c.succeeded,
                "errors": c.errors, "in_progress": c.in_progress,
            })
        };
        let clusters: serde_json::Map<String, serde_json::Value> = self
            .clusters
            .iter()
            .map(|(name, c)| {
                let localities: Vec<_> = c
                    .localities
                    .iter()
                    .map(|(l, n)| {
                        let mut v = counts(n);
                        v["region"] = l.region.clone().into();
                        v["zone"] = l.zone.clone().into();
                        v["sub_zone"] = l.sub_zone.clone().into();
                        v
                    })
                    .collect();
                let mut v = counts(&c.total);
                v["dropped"] = c.dropped.into();
                v["localities"] = localities.into();
                (name.clone(), v)
            })
            .collect();
        serde_json::json!({
            "window_seconds": self.window.as_secs_f64(),
            "streams": self.streams,
            "reports": self.reports,
            "clusters": clusters,
            "nodes": self.nodes.iter().map(|(id, n)| (id.clone(), n.streams.into()))
                .collect::<serde_json::Map<String, serde_json::Value>>(),
        })
    }
}

/// A latest-wins subscription to the load view: [`changed`](Self::changed) resolves when
/// reports arrived or streams came or went since the last call, and yields the newest view.
/// Nothing queues: a slow reader skips intermediate states.
#[derive(Debug)]
pub struct LoadWatch {
    pub(crate) store: Arc<Store>,
    pub(crate) rx: watch::Receiver<u64>,
}

impl LoadWatch {
    /// Waits for a change and returns the view then.
    pub async fn changed(&mut self) -> Arc<LoadSnapshot> {
        // The watch holds the store, and with it the sender: this cannot fail.
        let _ = self.rx.changed().await;
        self.store.snapshot(Instant::now())
    }

    /// The view now.
    pub fn latest(&self) -> Arc<LoadSnapshot> {
        self.store.snapshot(Instant::now())
    }
}
