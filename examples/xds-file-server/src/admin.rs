//! The admin listener: `/healthz`, `/ready`, `/metrics`, `/status` and CSDS as JSON (`/metrics`
//! and `/status` include the load clients report over LRS, served on the gRPC port). It has no
//! authentication: bind it to localhost (the default) or a management network only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::Query;
use axum::routing::get;
use xds_server::XdsServer;

/// The most streams one `/status` page shows (`?limit=` may ask for fewer).
const MAX_STATUS_PAGE: usize = 100;

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
}

/// The admin routes. `/status` takes `?node=ID` (that node's streams only), `?offset=N` and
/// `?limit=N` (at most 100 streams a page; `next_offset` says where the next page starts).
pub(crate) fn admin_router(server: &XdsServer, state: Arc<Mutex<ConfigState>>) -> axum::Router {
    let metrics = server.clone();
    let status = server.clone();
    let (ready, config_metrics) = (state.clone(), state.clone());
    server
        .admin_router()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/ready", get(move || {
            let answer = crate::reload::ready(&ready);
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
            let number = |key: &str| query.get(key).and_then(|v| v.parse::<usize>().ok());
            let limit = number("limit").unwrap_or(MAX_STATUS_PAGE).min(MAX_STATUS_PAGE);
            let offset = number("offset").unwrap_or(0);
            let node = query.get("node").map(String::as_str);
            let mut body = status.status().page_json(node, offset, limit);
            if let Ok(s) = serde_json::to_value(&*state.lock().unwrap_or_else(|e| e.into_inner())) {
                body["config"] = s;
            }
            body["load"] = status.load_reporting().snapshot().to_json();
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
