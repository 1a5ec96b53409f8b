//! The console's panels besides the proxies: the application's configuration history, the load
//! reported over LRS, the endpoint health reported over HDS and the ACK latency histogram. Each
//! list a peer can grow (clusters, localities, endpoints) is paged or cut, with the totals of
//! what was left out, so that a page stays small however many clients report.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::hds::HealthSnapshot;
use crate::lrs::{LoadCounts, LoadSnapshot};
use crate::metrics::AckHistogram;
use crate::status::bounded_owned;

/// The most clusters one page of the load or health panel shows (`offset` pages on).
pub const MAX_CONSOLE_CLUSTERS: usize = 20;

/// The most localities the load panel shows per cluster; the rest are counted.
pub const MAX_CONSOLE_LOCALITIES: usize = 16;

/// The most endpoints the health panel shows per cluster (those not healthy first); the rest
/// are counted.
pub const MAX_CONSOLE_ENDPOINTS: usize = 50;

/// The most entries of the application's configuration history the panel shows (newest first).
pub const MAX_CONFIG_HISTORY: usize = 50;

/// The most node reports listed per endpoint; the statuses of all are counted.
const MAX_NODES_PER_ENDPOINT: usize = 8;

/// The ACK latency histogram: finite bucket bounds in seconds and, per bucket, the ACKs that
/// fell in it (not cumulative), the last count being past the last bound.
pub(crate) fn ack_json(h: &AckHistogram) -> Value {
    let buckets: Vec<Value> = h
        .counts
        .iter()
        .enumerate()
        .map(|(i, n)| match h.bounds.get(i) {
            Some(le) => json!({ "le_seconds": le, "count": n }),
            None => json!({ "le_seconds": null, "count": n }),
        })
        .collect();
    let mean = if h.count == 0 { Value::Null } else { json!(h.sum_seconds / h.count as f64) };
    json!({ "buckets": buckets, "count": h.count, "mean_seconds": mean })
}

fn counts(c: &LoadCounts) -> Value {
    json!({
        "issued": c.issued, "succeeded": c.succeeded,
        "errors": c.errors, "in_progress": c.in_progress,
    })
}

/// One page of the reported load: the clusters in name order from `offset`, at most
/// [`MAX_CONSOLE_CLUSTERS`], each with its first [`MAX_CONSOLE_LOCALITIES`] localities.
pub(crate) fn load_json(snapshot: &LoadSnapshot, offset: usize) -> Value {
    let clusters: Vec<Value> = snapshot
        .clusters
        .iter()
        .skip(offset)
        .take(MAX_CONSOLE_CLUSTERS)
        .map(|(name, c)| {
            let localities: Vec<Value> = c
                .localities
                .iter()
                .take(MAX_CONSOLE_LOCALITIES)
                .map(|(l, n)| {
                    let mut v = counts(n);
                    v["locality"] = bounded_owned(&l.label()).into();
                    v
                })
                .collect();
            let mut v = counts(&c.total);
            v["name"] = bounded_owned(name).into();
            v["dropped"] = c.dropped.into();
            v["localities"] = localities.into();
            v["localities_total"] = c.localities.len().into();
            v
        })
        .collect();
    json!({
        "window_seconds": snapshot.window.as_secs_f64(),
        "streams": snapshot.streams,
        "reports": snapshot.reports,
        "clusters_total": snapshot.clusters.len(),
        "offset": offset,
        "limit": MAX_CONSOLE_CLUSTERS,
        "next_offset": next_offset(offset, clusters.len(), snapshot.clusters.len()),
        "clusters": clusters,
    })
}

/// One page of the reported endpoint health, or `{"enabled": false}` when the server runs no
/// HDS: the clusters in name order from `offset`, at most [`MAX_CONSOLE_CLUSTERS`], each with
/// its endpoint counts and at most [`MAX_CONSOLE_ENDPOINTS`] endpoints, those some node
/// reports not healthy first.
pub(crate) fn health_json(snapshot: Option<&HealthSnapshot>, offset: usize) -> Value {
    let Some(snapshot) = snapshot else { return json!({ "enabled": false }) };
    let clusters: Vec<Value> = snapshot
        .clusters
        .iter()
        .skip(offset)
        .take(MAX_CONSOLE_CLUSTERS)
        .map(|(name, endpoints)| {
            let healthy = endpoints.values().filter(|e| e.is_healthy()).count();
            let mut listed: Vec<_> = endpoints.iter().collect();
            // Stable: by health (not healthy first), then by address as the map has them.
            listed.sort_by_key(|(_, e)| e.is_healthy());
            let listed: Vec<Value> = listed
                .into_iter()
                .take(MAX_CONSOLE_ENDPOINTS)
                .map(|(address, e)| {
                    let mut statuses = BTreeMap::<&str, usize>::new();
                    for s in e.by_node.values() {
                        *statuses.entry(crate::hds::status_label(*s)).or_default() += 1;
                    }
                    let nodes: Vec<Value> = e
                        .by_node
                        .iter()
                        .take(MAX_NODES_PER_ENDPOINT)
                        .map(|(node, s)| {
                            json!({ "node": bounded_owned(node), "status": crate::hds::status_label(*s) })
                        })
                        .collect();
                    json!({
                        "address": bounded_owned(address),
                        "healthy": e.is_healthy(),
                        "statuses": statuses,
                        "nodes": nodes,
                        "nodes_total": e.by_node.len(),
                    })
                })
                .collect();
            json!({
                "name": bounded_owned(name),
                "endpoints_total": endpoints.len(),
                "healthy": healthy,
                "endpoints": listed,
            })
        })
        .collect();
    json!({
        "enabled": true,
        "streams": snapshot.streams,
        "responses": snapshot.responses,
        "clusters_total": snapshot.clusters.len(),
        "offset": offset,
        "limit": MAX_CONSOLE_CLUSTERS,
        "limit": MAX_CONSOLE_CLUSTERS,
        "next_offset": next_offset(offset, clusters.len(), snapshot.clusters.len()),
        "clusters": clusters,
    })
}

/// The configuration panel: what the application's hook gave, its `history` cut to the newest
/// [`MAX_CONFIG_HISTORY`] entries (`history_total` counts them all), or `{"history": null}`
/// without a hook.
pub(crate) fn config_json(given: Option<Value>) -> Value {
    let Some(mut body) = given else { return json!({ "history": null }) };
    if !body.is_object() {
        body = json!({ "summary": body });
    }
    if let Some(Value::Array(history)) = body.get_mut("history") {
        let total = history.len();
        history.truncate(MAX_CONFIG_HISTORY);
        body["history_total"] = total.into();
    }
    body
}

fn next_offset(offset: usize, shown: usize, total: usize) -> Value {
    let next = offset.saturating_add(shown);
    if shown > 0 && next < total { next.into() } else { Value::Null }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use xds_proto::pb::envoy::config::core::v3::HealthStatus;

    use super::*;
    use crate::hds::EndpointHealthView;
    use crate::lrs::{ClusterLoad, LocalityName};

    const SCRIPT: &str = "<script>alert(1)</script>";

    fn zone(z: &str) -> LocalityName {
        LocalityName { region: "r".into(), zone: z.into(), sub_zone: String::new() }
    }

    fn load(issued: u64) -> LoadCounts {
        LoadCounts { issued, succeeded: issued - 1, errors: 1, in_progress: 0 }
    }

    #[test]
    fn the_ack_histogram_lists_each_bucket_and_the_overflow() {
        let h = AckHistogram {
            bounds: &[0.001, 0.01],
            counts: vec![3, 1, 2],
            count: 6,
            sum_seconds: 60.0,
        };
        let json = ack_json(&h);
        assert_eq!(
            json["buckets"],
            json!([
                {"le_seconds": 0.001, "count": 3},
                {"le_seconds": 0.01, "count": 1},
                {"le_seconds": null, "count": 2},
            ])
        );
        assert_eq!(json["count"], 6);
        assert_eq!(json["mean_seconds"], 10.0);
        let empty = AckHistogram { counts: vec![0; 3], count: 0, sum_seconds: 0.0, ..h };
        assert_eq!(ack_json(&empty)["mean_seconds"], Value::Null);
    }

    #[test]
    fn load_is_paged_by_cluster_and_cut_by_locality_with_totals() {
        let mut snapshot = LoadSnapshot {
            window: Duration::from_secs(60),
            streams: 2,
            reports: 9,
            ..LoadSnapshot::default()
        };
        for i in 0..MAX_CONSOLE_CLUSTERS + 5 {
            let mut c = ClusterLoad { dropped: 1, total: load(10), ..ClusterLoad::default() };
            let localities = if i == 0 { MAX_CONSOLE_LOCALITIES + 3 } else { 1 };
            for l in 0..localities {
                c.localities.insert(zone(&format!("z{l:02}")), load(5));
            }
            snapshot.clusters.insert(format!("c{i:02}"), c);
        }
        snapshot.clusters.insert(SCRIPT.into(), ClusterLoad::default());
        let first = load_json(&snapshot, 0);
        assert_eq!(first["window_seconds"], 60.0);
        assert_eq!(first["clusters_total"], MAX_CONSOLE_CLUSTERS + 6);
        assert_eq!(first["next_offset"], MAX_CONSOLE_CLUSTERS);
        let clusters = first["clusters"].as_array().unwrap();
        assert_eq!(clusters.len(), MAX_CONSOLE_CLUSTERS);
        // Names sort `<` before letters: the client's text comes back as data, unchanged.
        assert_eq!(clusters[0]["name"], SCRIPT);
        let c00 = &clusters[1];
        assert_eq!(c00["name"], "c00");
        assert_eq!(c00["issued"], 10);
        assert_eq!(c00["dropped"], 1);
        assert_eq!(c00["localities"].as_array().unwrap().len(), MAX_CONSOLE_LOCALITIES);
        assert_eq!(c00["localities_total"], MAX_CONSOLE_LOCALITIES + 3);
        assert_eq!(
            c00["localities"][0],
            json!({
                "locality": "r/z00/", "issued": 5, "succeeded": 4, "errors": 1, "in_progress": 0,
            })
        );
        let last = load_json(&snapshot, MAX_CONSOLE_CLUSTERS);
        assert_eq!(last["clusters"].as_array().unwrap().len(), 6);
        assert_eq!(last["next_offset"], Value::Null);
        let past = load_json(&snapshot, usize::MAX);
        assert_eq!(past["clusters"], json!([]));
        assert_eq!(past["next_offset"], Value::Null);
        let empty = load_json(&LoadSnapshot::default(), 0);
        assert_eq!(empty["clusters"], json!([]));
        assert_eq!(empty["clusters_total"], 0);
    }

    #[test]
    fn health_lists_endpoints_not_healthy_first_and_counts_the_rest() {
        assert_eq!(health_json(None, 0), json!({ "enabled": false }));
        let view = |statuses: &[(&str, HealthStatus)]| EndpointHealthView {
            by_node: statuses.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect(),
        };
        let mut endpoints = BTreeMap::new();
        for i in 0..MAX_CONSOLE_ENDPOINTS + 2 {
            endpoints.insert(format!("10.0.0.{i}:80"), view(&[("a", HealthStatus::Healthy)]));
        }
        endpoints.insert(
            "10.9.9.9:80".to_owned(),
            view(&[("a", HealthStatus::Healthy), (SCRIPT, HealthStatus::Unhealthy)]),
        );
        let snapshot = HealthSnapshot {
            streams: 2,
            responses: 7,
            clusters: BTreeMap::from([("web".to_owned(), endpoints)]),
        };
        let json = health_json(Some(&snapshot), 0);
        assert_eq!(json["enabled"], true);
        assert_eq!(json["clusters_total"], 1);
        assert_eq!(json["next_offset"], Value::Null);
        let web = &json["clusters"][0];
        assert_eq!(web["endpoints_total"], MAX_CONSOLE_ENDPOINTS + 3);
        assert_eq!(web["healthy"], MAX_CONSOLE_ENDPOINTS + 2);
        assert_eq!(web["endpoints"].as_array().unwrap().len(), MAX_CONSOLE_ENDPOINTS);
        let sick = &web["endpoints"][0];
        assert_eq!(sick["address"], "10.9.9.9:80");
        assert_eq!(sick["healthy"], false);
        assert_eq!(sick["statuses"], json!({"healthy": 1, "unhealthy": 1}));
        assert_eq!(sick["nodes"][0], json!({"node": SCRIPT, "status": "unhealthy"}));
        assert_eq!(health_json(Some(&HealthSnapshot::default()), 0)["clusters"], json!([]));
    }

    #[test]
    fn the_configuration_history_is_cut_and_absent_without_a_hook() {
        assert_eq!(config_json(None), json!({ "history": null }));
        let history: Vec<Value> =
            (0..MAX_CONFIG_HISTORY + 4).map(|i| json!({"source": i, "error": SCRIPT})).collect();
        let json = config_json(Some(json!({ "summary": {"path": "x"}, "history": history })));
        assert_eq!(json["history"].as_array().unwrap().len(), MAX_CONFIG_HISTORY);
        assert_eq!(json["history_total"], MAX_CONFIG_HISTORY + 4);
        assert_eq!(json["history"][0]["error"], SCRIPT);
        assert_eq!(json["summary"], json!({"path": "x"}));
        assert_eq!(config_json(Some(json!("plain"))), json!({ "summary": "plain" }));
    }
}
