//! The admin listener: `/healthz`, `/ready`, `/metrics`, `/status`, `/config_dump` and CSDS as
//! JSON (`/metrics` and `/status` include the load clients report over LRS, served on the gRPC
//! port). On loopback it asks no credentials; elsewhere it needs a token or mTLS
//! (`admin_access.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::Query;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::{Value, json};
use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{ResourceType, any_to_json_redacted};
use xds_server::XdsServer;

use crate::config::DEFAULT_GROUP;

/// The most streams one `/status` page shows (`?limit=` may ask for fewer).
const MAX_STATUS_PAGE: usize = 100;

/// The most clusters of reported load one `/status` page shows (`?load_limit=` may ask for
/// fewer), and the most bytes they take: the load of every LRS stream can hold hundreds of
/// thousands of entries, rendered a page at a time.
const MAX_LOAD_PAGE: usize = 100;
const MAX_LOAD_PAGE_BYTES: usize = 256 << 10;

/// What /status shows about the configuration.
#[derive(Default, serde::Serialize)]
pub(crate) struct ConfigState {
    pub(crate) path: String,
    pub(crate) loads: u64,
    pub(crate) groups: Vec<String>,
    pub(crate) error: Option<String>,
    /// Loads published and loads rejected (the initial load counts).
    pub(crate) reloads_ok: u64,
    pub(crate) reloads_error: u64,
    /// When a configuration was last published.
    #[serde(skip)]
    pub(crate) last_success: Option<std::time::SystemTime>,
    /// Resources served by type label, over all groups.
    pub(crate) resources: std::collections::BTreeMap<&'static str, u64>,
    /// Files parsed since start (unchanged files are not parsed again).
    pub(crate) files_parsed: u64,
    /// From etcd: why the served state may be behind the source (etcd does not answer, or the
    /// replica is behind by more than `--max-lag-ms`), or `None`. `/ready` answers 503 with it
    /// only under `--ready-when-stale unready`.
    pub(crate) stale: Option<String>,
    /// Since when `stale` has been set; `/status` shows its age as `stale_seconds`.
    #[serde(rename = "stale_seconds", serialize_with = "seconds_since")]
    pub(crate) stale_since: Option<std::time::Instant>,
    /// `stale` says the replica is behind (not that etcd is unreachable).
    #[serde(skip)]
    pub(crate) lagging: bool,
    /// What `/ready` answers while stale.
    #[serde(skip)]
    pub(crate) ready_when_stale: crate::cli::ReadyWhenStale,
    /// From etcd: the revision served.
    pub(crate) revision: Option<i64>,
    /// From etcd: the store's newest revision as the last probe read it, and how far behind it
    /// the served state is (revisions, seconds).
    pub(crate) store_revision: Option<i64>,
    pub(crate) lag_revisions: Option<i64>,
    pub(crate) lag_seconds: Option<f64>,
    /// Files that kept changing past the settle limit: served as last parsed (or left out)
    /// while every other file's edits are applied. Empty once they settle.
    pub(crate) unsettled: Vec<String>,
}

/// `/status` shows an instant as the seconds since it, at the time of the request.
fn seconds_since<S: serde::Serializer>(
    at: &Option<std::time::Instant>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => {
            serializer.serialize_some(&((at.elapsed().as_secs_f64() * 10.0).round() / 10.0))
        }
        None => serializer.serialize_none(),
    }
}

/// What `/config_dump` reads: the served snapshots and the function that picks a node's group
/// (the one the cache and the authorization policy use).
pub(crate) struct ConfigDump {
    pub(crate) cache: SnapshotCache,
    pub(crate) grouping: Arc<dyn Fn(&Node) -> String + Send + Sync>,
}

/// The longest node id or cluster `/config_dump` takes (the query is the operator's, but bounded
/// all the same).
const MAX_DUMP_NODE: usize = 256;

impl ConfigDump {
    /// The group `node` maps to and every resource it would be served, by type in
    /// make-before-break order, as proto3 JSON. Secrets are listed with their name and version
    /// only, and every field Envoy's API marks `(udpa.annotations.sensitive)` (private keys,
    /// passwords, credentials, inside `typed_config`s too) is shown as `"[redacted]"`
    /// ([`xds_proto::redact_json`]): the admin port must not hand out secrets.
    fn dump(&self, query: &HashMap<String, String>) -> (StatusCode, Value) {
        let Some(id) = query.get("node").filter(|id| !id.is_empty()) else {
            return (
                StatusCode::BAD_REQUEST,
                json!({"error": "node=ID is required (and cluster=NAME, optional)"}),
            );
        };
        let cluster = query.get("cluster").cloned().unwrap_or_default();
        if id.len() > MAX_DUMP_NODE || cluster.len() > MAX_DUMP_NODE {
            let error = format!("node and cluster are at most {MAX_DUMP_NODE} bytes");
            return (StatusCode::BAD_REQUEST, json!({ "error": error }));
        }
        let node = Node { id: id.clone(), cluster: cluster.clone(), ..Default::default() };
        let group = (self.grouping)(&node);
        let shown_group = if group == DEFAULT_GROUP { "(default)" } else { group.as_str() };
        let mut body = json!({"node": {"id": id, "cluster": cluster}, "group": shown_group});
        let Some(snapshot) = self.cache.snapshot(&group) else {
            body["resources"] = json!({});
            body["note"] =
                json!("the group has no configuration: this node would be served nothing yet");
            return (StatusCode::OK, body);
        };
        let mut resources = serde_json::Map::new();
        for type_url in snapshot.types() {
            let listed: Vec<Value> = snapshot
                .resources(type_url)
                .map(|r| {
                    if type_url.builtin() == Some(ResourceType::Secret) {
                        return json!({"name": r.name(), "version": r.version(), "redacted": true});
                    }
                    let resource = any_to_json_redacted(&r.to_any())
                        .unwrap_or_else(|e| json!({"name": r.name(), "error": e.to_string()}));
                    json!({"name": r.name(), "version": r.version(), "resource": resource})
                })
                .collect();
            resources.insert(type_url.label().to_owned(), Value::Array(listed));
        }
        body["resources"] = Value::Object(resources);
        (StatusCode::OK, body)
    }
}

/// The admin routes. `/status` takes `?node=ID` (that node's streams and load only),
/// `?offset=N` and `?limit=N` (at most 100 streams a page; `next_offset` says where the next
/// page starts), and `?load_offset=N` and `?load_limit=N` for the reported load (at most 100
/// clusters and 256 KiB a page; `load.next_offset`).
///
/// `/config_dump?node=ID&cluster=NAME`: the group that node maps to and every resource it would
/// be served (secrets redacted); see [`ConfigDump`].
pub(crate) fn admin_router(
    server: &XdsServer,
    state: Arc<Mutex<ConfigState>>,
    dump: ConfigDump,
) -> axum::Router {
    let metrics = server.clone();
    let status = server.clone();
    let (ready, config_metrics) = (state.clone(), state.clone());
    let grouping = dump.grouping.clone();
    server
        .admin_router()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/config_dump", get({
            let dump = Arc::new(dump);
            move |Query(query): Query<HashMap<String, String>>| {
                let (code, body) = dump.dump(&query);
                async move { (code, axum::Json(body)) }
            }
        }))
        .route("/ready", get(move || {
            let answer = crate::etcd::stale(&ready).unwrap_or_else(|| crate::reload::ready(&ready));
            async move { answer }
        }))
        .route("/metrics", get(move || {
            let mut text = metrics.metrics().render();
            // Load reported over LRS, per cluster and locality (bounded labels).
            text.push_str(&metrics.load_reporting().render_metrics());
            text.push_str(&build_info());
            text.push_str(&crate::reload::config_metrics(&config_metrics));
            async move { ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
        }))
        .route("/status", get(move |Query(query): Query<HashMap<String, String>>| {
            let grouping = grouping.clone();
            let number = |key: &str| query.get(key).and_then(|v| v.parse::<usize>().ok());
            let limit = number("limit").unwrap_or(MAX_STATUS_PAGE).min(MAX_STATUS_PAGE);
            let offset = number("offset").unwrap_or(0);
            let node = query.get("node").map(String::as_str);
            let mut body = status.status().page_json(node, offset, limit);
            annotate_streams(&mut body, &*grouping);
            if let Ok(s) = serde_json::to_value(&*state.lock().unwrap_or_else(|e| e.into_inner())) {
                body["config"] = s;
            }
            let load_limit = number("load_limit").unwrap_or(MAX_LOAD_PAGE).clamp(1, MAX_LOAD_PAGE);
            let load_offset = number("load_offset").unwrap_or(0);
            body["load"] = status.load_reporting().snapshot().page_json(
                node,
                load_offset,
                load_limit,
                MAX_LOAD_PAGE_BYTES,
            );
            async move { axum::Json(body) }
        }))
}

/// The `xds_build_info` gauge: always 1, labelled with what was built (from compile-time
/// constants only, so nothing a peer sends reaches these labels).
fn build_info() -> String {
    format!(
        "# HELP xds_build_info The running build: package version and git commit.\n\
         # TYPE xds_build_info gauge\n\
         xds_build_info{{version=\"{}\",commit=\"{}\"}} 1\n",
        env!("CARGO_PKG_VERSION"),
        env!("XDS_BUILD_COMMIT"),
    )
}

/// Adds to each stream of a `/status` page the group its node maps to, and beside every
/// `..._ms` time (milliseconds since the epoch, kept for scripts) the same instant in RFC 3339
/// (`opened_ms` gets `opened`), for people reading it.
fn annotate_streams(body: &mut Value, grouping: &(dyn Fn(&Node) -> String + Send + Sync)) {
    let Some(streams) = body.get_mut("streams").and_then(Value::as_array_mut) else { return };
    for stream in streams {
        let text =
            |key: &str| stream.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        let node =
            Node { id: text("node_id"), cluster: text("node_cluster"), ..Default::default() };
        let group = grouping(&node);
        stream["group"] = json!(if group == DEFAULT_GROUP { "(default)" } else { group.as_str() });
        add_rfc3339(stream);
    }
}

fn add_rfc3339(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let times: Vec<(String, u64)> = map
                .iter()
                .filter_map(|(k, v)| Some((k.strip_suffix("_ms")?.to_owned(), v.as_u64()?)))
                .collect();
            for (key, ms) in times {
                map.insert(key, json!(rfc3339(ms)));
            }
            map.values_mut().for_each(add_rfc3339);
        }
        Value::Array(items) => items.iter_mut().for_each(add_rfc3339),
        _ => {}
    }
}

/// `ms` milliseconds after the Unix epoch as RFC 3339 in UTC, e.g. `2026-11-29T05:42:16.123Z`.
fn rfc3339(ms: u64) -> String {
    let (days, in_day) = (ms / 86_400_000, ms % 86_400_000);
    // Days to a civil date (proleptic Gregorian), by 400-year eras of 146,097 days.
    let z = days + 719_468;
    let (era, doe) = (z / 146_097, z % 146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    let (h, m, sec, milli) =
        (in_day / 3_600_000, in_day / 60_000 % 60, in_day / 1_000 % 60, in_day % 1_000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{sec:02}.{milli:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_of_epoch_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_930_936_123), "2026-11-29T05:42:16.123Z");
    }

    #[test]
    fn streams_get_their_group_and_readable_times() {
        let mut body = json!({"streams": [
            {"node_id": "envoy-2", "node_cluster": "", "opened_ms": 0,
             "types": {"cluster": {"last_request_ms": 951_782_400_000_u64, "nack": {"at_ms": 0}}}},
            {"node_id": "envoy-9", "node_cluster": "", "opened_ms": 0},
        ]});
        let grouping =
            |node: &Node| if node.id == "envoy-2" { node.id.clone() } else { String::new() };
        annotate_streams(&mut body, &grouping);
        let first = &body["streams"][0];
        assert_eq!(first["group"], "envoy-2");
        assert_eq!(first["opened"], "1970-01-01T00:00:00.000Z");
        assert_eq!(first["opened_ms"], 0);
        assert_eq!(first["types"]["cluster"]["last_request"], "2000-02-29T00:00:00.000Z");
        assert_eq!(first["types"]["cluster"]["nack"]["at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(body["streams"][1]["group"], "(default)");
    }
}
