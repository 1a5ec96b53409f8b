//! The HTTP side: REST-JSON xDS, `/healthz`, `/metrics` and `/status` (which include the load
//! clients report over LRS, served on the gRPC port).

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
}

/// The HTTP routes.
pub(crate) fn http_router(server: &XdsServer, state: Arc<Mutex<ConfigState>>) -> axum::Router {
    let metrics = server.clone();
    let status = server.clone();
    server
        .rest_router()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(move || {
            let mut text = metrics.metrics().render();
            // Load reported over LRS, per cluster and locality (bounded labels).
            text.push_str(&metrics.load_reporting().render_metrics());
            text.push_str(&build_info());
            async move { ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
        }))
        .route("/status", get(move || {
            let mut body = status.status().to_json();
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
