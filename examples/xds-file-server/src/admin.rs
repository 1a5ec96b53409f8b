//! The HTTP side: REST-JSON xDS, `/healthz`, `/metrics` and `/status`.

use std::sync::{Arc, Mutex};

use axum::routing::get;
use xds_server::XdsServer;

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

/// The HTTP routes.
pub(crate) fn http_router(server: &XdsServer, state: Arc<Mutex<ConfigState>>) -> axum::Router {
    let metrics = server.clone();
    let status = server.clone();
    let (ready, config_metrics) = (state.clone(), state.clone());
    server
        .rest_router()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/ready", get(move || {
            let answer = crate::reload::ready(&ready);
            async move { answer }
        }))
        .route("/metrics", get(move || {
            let mut text = metrics.metrics().render();
            text.push_str(&build_info());
            text.push_str(&crate::reload::config_metrics(&config_metrics));
            async move { ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
        }))
        .route("/status", get(move || {
            let mut body = status.status().to_json();
            if let Ok(s) = serde_json::to_value(&*state.lock().unwrap_or_else(|e| e.into_inner())) {
                body["config"] = s;
            }
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
