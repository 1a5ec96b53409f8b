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

/// The most localities a status page shows per cluster; the rest are counted
/// (`localities_total`). A cluster's localities come from every stream that reports it, so the
/// page's size would otherwise grow with the number of streams.
pub const MAX_LOCALITIES_SHOWN: usize = 16;

impl LoadSnapshot {
    /// One page of the view as JSON, for a status page: the totals (window, streams, reports,
    /// nodes, clusters) and, of the clusters in name order (of `node` alone when given), those
    /// from `offset` on, at most `limit` of them and about `max_bytes` of JSON (at least one
    /// cluster, so paging always moves on), each with at most [`MAX_LOCALITIES_SHOWN`]
    /// localities. `next_offset` says where the next page starts, when there is one. The
    /// whole view can hold hundreds of thousands of entries; a page never renders them at once.
    pub fn page_json(
        &self,
        node: Option<&str>,
        offset: usize,
        limit: usize,
        max_bytes: usize,
    ) -> serde_json::Value {
        let counts = |c: &LoadCounts| {
            serde_json::json!({
                "issued": c.issued, "succeeded": c.succeeded,
                "errors": c.errors, "in_progress": c.in_progress,
            })
        };
        let empty = BTreeMap::new();
        let clusters = match node {
            Some(id) => self.nodes.get(id).map_or(&empty, |n| &n.clusters),
            None => &self.clusters,
        };
        let mut page = serde_json::Map::new();
        let mut bytes = 0;
        for (name, c) in clusters.iter().skip(offset).take(limit) {
            let localities: Vec<_> = c
                .localities
                .iter()
                .take(MAX_LOCALITIES_SHOWN)
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
            v["localities_total"] = c.localities.len().into();
            // The entry's size as rendered (its name quoted, a colon and a comma besides).
            let size = v.to_string().len() + name.len() + 4;
            if !page.is_empty() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            page.insert(name.clone(), v);
        }
        let shown = page.len();
        let mut body = serde_json::json!({
            "window_seconds": self.window.as_secs_f64(),
            "streams": self.streams,
            "reports": self.reports,
            "nodes": self.nodes.len(),
            "clusters_total": clusters.len(),
            "offset": offset,
            "clusters": page,
        });
        if let Some(id) = node {
            body["node"] = id.into();
            body["node_streams"] = self.nodes.get(id).map_or(0, |n| n.streams).into();
        }
        if offset.saturating_add(shown) < clusters.len() {
            body["next_offset"] = (offset + shown).into();
        }
        body
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A view of `clusters` clusters with `localities` localities each, names of ~200 bytes.
    fn view(clusters: usize, localities: usize) -> LoadSnapshot {
        let long = "x".repeat(200);
        let mut snapshot = LoadSnapshot { streams: 16, ..LoadSnapshot::default() };
        for c in 0..clusters {
            let cluster = snapshot.clusters.entry(format!("{c:05}-{long}")).or_default();
            for l in 0..localities {
                let name = LocalityName {
                    region: long.clone(),
                    zone: format!("{l:03}"),
                    sub_zone: String::new(),
                };
                cluster.localities.insert(name, LoadCounts { issued: 1, ..LoadCounts::default() });
            }
        }
        snapshot
    }

    #[test]
    fn a_page_is_bounded_in_bytes_and_paging_shows_every_cluster_once() {
        let view = view(300, 64);
        let max_bytes = 64 << 10;
        let mut offset = 0;
        let mut seen = Vec::new();
        loop {
            let page = view.page_json(None, offset, 100, max_bytes);
            let size = page.to_string().len();
            assert!(size <= max_bytes + 1024, "a page of {size} bytes");
            assert_eq!(page["clusters_total"], 300);
            let clusters = page["clusters"].as_object().unwrap();
            assert!(!clusters.is_empty(), "a page always moves on");
            for (name, c) in clusters {
                assert_eq!(c["localities"].as_array().unwrap().len(), MAX_LOCALITIES_SHOWN);
                assert_eq!(c["localities_total"], 64);
                seen.push(name.clone());
            }
            match page.get("next_offset") {
                Some(next) => offset = usize::try_from(next.as_u64().unwrap()).unwrap(),
                None => break,
            }
        }
        let all: Vec<_> = view.clusters.keys().cloned().collect();
        assert_eq!(seen, all);
    }

    #[test]
    fn a_page_counts_in_clusters_too_and_a_node_pages_its_own() {
        let mut view = view(5, 1);
        let node = NodeLoad { streams: 2, clusters: view.clusters.clone() };
        view.nodes.insert("n1".into(), node);
        let page = view.page_json(None, 3, 100, 1 << 20);
        assert_eq!(page["clusters"].as_object().unwrap().len(), 2);
        assert!(page.get("next_offset").is_none());
        let page = view.page_json(Some("n1"), 0, 2, 1 << 20);
        assert_eq!(page["next_offset"], 2);
        assert_eq!(page["node_streams"], 2);
        assert_eq!(page["nodes"], 1);
        let page = view.page_json(Some("nobody"), 0, 2, 1 << 20);
        assert_eq!(page["clusters_total"], 0);
    }
}
