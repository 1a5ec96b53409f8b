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
    /// The last reloads and etcd revisions, applied or refused, for the console.
    #[serde(skip)]
    pub(crate) history: crate::history::History,
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

/// The admin routes: the library's ([`XdsServer::admin`]: `/healthz`, `/metrics`, `/status`
/// with its paging, CSDS) with this server's readiness, configuration metrics and build, its
/// configuration state in `/status` (`config`), its reload history on the console's
/// Configuration panel, and `/config_dump`.
///
/// `/ready` means "serving a valid configuration" (`reload::ready`), or with etcd and
/// `--ready-when-stale unready`, also "not stale" (`etcd::stale`).
///
/// `/config_dump?node=ID&cluster=NAME`: the group that node maps to and every resource it would
/// be served (secrets redacted); see [`ConfigDump`].
pub(crate) fn admin_router(
    server: &XdsServer,
    state: Arc<Mutex<ConfigState>>,
    dump: ConfigDump,
) -> axum::Router {
    let (ready, config_metrics, history) = (state.clone(), state.clone(), state.clone());
    let status = state;
    let dump = Arc::new(dump);
    server
        .admin()
        .ready(move || {
            let (code, text) =
                crate::etcd::stale(&ready).unwrap_or_else(|| crate::reload::ready(&ready));
            if code.is_success() { Ok(text) } else { Err(text) }
        })
        .metrics(move |text| {
            text.push_str(&build_info());
            text.push_str(&crate::reload::config_metrics(&config_metrics));
        })
        .status(move |body| {
            show_default_group(body);
            let state = status.lock().unwrap_or_else(|e| e.into_inner());
            if let Ok(state) = serde_json::to_value(&*state) {
                body["config"] = state;
            }
        })
        .console_config(move || {
            let state = history.lock().unwrap_or_else(|e| e.into_inner());
            let mut body = state.history.to_json();
            body["summary"] = json!({
                "source": if state.revision.is_some() { "etcd" } else { "files" },
                "path": state.path,
                "reloads_applied": state.reloads_ok,
                "reloads_refused": state.reloads_error,
                "revision": state.revision,
                "current_error": state.error,
                "stale": state.stale,
            });
            body
        })
        .router()
        .route(
            "/config_dump",
            get(move |Query(query): Query<HashMap<String, String>>| {
                let (code, body) = dump.dump(&query);
                async move { (code, axum::Json(body)) }
            }),
        )
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

/// The default group's name is empty: `/status` shows it as `(default)`, as `/config_dump` and
/// `--check` do.
fn show_default_group(body: &mut Value) {
    let Some(streams) = body.get_mut("streams").and_then(Value::as_array_mut) else { return };
    for stream in streams {
        if stream.get("group").and_then(Value::as_str) == Some(DEFAULT_GROUP) {
            stream["group"] = json!("(default)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_group_is_shown_by_name() {
        let mut body = json!({"streams": [
            {"node_id": "envoy-2", "group": "envoy-2"},
            {"node_id": "envoy-9", "group": DEFAULT_GROUP},
            {"node_id": ""},
        ]});
        show_default_group(&mut body);
        assert_eq!(body["streams"][0]["group"], "envoy-2");
        assert_eq!(body["streams"][1]["group"], "(default)");
        assert!(body["streams"][2].get("group").is_none(), "no request, no group yet");
    }
}
