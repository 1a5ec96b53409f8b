//! The operator console: a page on the admin listener with one row per connected proxy (the
//! streams of one node id) and one cell per resource type, SYNCED, PENDING, NACKED or NOT SENT,
//! that updates itself; and the JSON it polls. Part of [`Admin::router`](crate::Admin::router), so a custom
//! control plane has it too.
//!
//! The page is three files compiled into the binary (no JS toolchain, no network): an HTML
//! shell, a stylesheet and a script, served with a Content-Security-Policy that allows only
//! them (`script-src 'self'`, no inline script). The script builds every element with
//! `textContent`: node ids, NACK texts and resource names are the clients', and are shown as
//! text, never parsed as HTML.

mod api;
mod overview;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Value, json};

use crate::server::XdsServer;
use crate::status::now_ms;

pub use api::{DEFAULT_CONSOLE_PAGE, MAX_CONSOLE_PAGE, MAX_FILTER_BYTES, MAX_LISTED_GROUPS};
pub use overview::{
    MAX_CONFIG_HISTORY, MAX_CONSOLE_CLUSTERS, MAX_CONSOLE_ENDPOINTS, MAX_CONSOLE_LOCALITIES,
};

use api::ProxyQuery;

/// The path of the console page.
pub const CONSOLE_PATH: &str = "/ui";

const INDEX_HTML: &str = include_str!("assets/index.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");

/// Only the page's own files, no inline script or style, no frames, no plug-ins: whatever a
/// client managed to get into a node id could not run even if it reached the HTML.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The longest node id the detail endpoint takes (the longest a status page shows).
const MAX_NODE_BYTES: usize = crate::status::MAX_NACK_TEXT;

/// What the application says of its configuration, for the console's configuration panel.
pub(crate) type ConfigHook = Arc<dyn Fn() -> Value + Send + Sync>;

struct Console {
    server: XdsServer,
    config: Option<ConfigHook>,
}

type RawQuery = Result<Query<HashMap<String, String>>, QueryRejection>;

/// The console's routes: `/ui` (the page), `/ui/console.js`, `/ui/console.css`,
/// `/ui/api/proxies` (the table), `/ui/api/proxy?node=ID` (one node's streams), and the panels
/// `/ui/api/config`, `/ui/api/load?offset=N`, `/ui/api/health?offset=N` and `/ui/api/ack`.
pub(crate) fn routes(server: XdsServer, config: Option<ConfigHook>) -> Router {
    let console = Arc::new(Console { server, config });
    let (detail, panels) = (console.clone(), console.clone());
    let (load, health, ack) = (console.clone(), console.clone(), console.clone());
    Router::new()
        .route(CONSOLE_PATH, get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route(
            "/ui/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", CONSOLE_JS) }),
        )
        .route("/ui/console.css", get(|| async { asset("text/css; charset=utf-8", CONSOLE_CSS) }))
        .route(
            "/ui/api/proxies",
            get(move |query: Result<Query<HashMap<String, String>>, QueryRejection>| {
                std::future::ready(console.proxies(query))
            }),
        )
        .route(
            "/ui/api/proxy",
            get(move |query: Result<Query<HashMap<String, String>>, QueryRejection>| {
                std::future::ready(detail.proxy(query))
            }),
        )
        .route(
            "/ui/api/config",
            get(move || {
                let given = panels.config.as_ref().map(|hook| hook());
                std::future::ready(json_response(StatusCode::OK, overview::config_json(given)))
            }),
        )
        .route(
            "/ui/api/load",
            get(move |query: RawQuery| {
                std::future::ready(paged(query, |offset| {
                    overview::load_json(&load.server.load_reporting().snapshot(), offset)
                }))
            }),
        )
        .route(
            "/ui/api/health",
            get(move |query: RawQuery| {
                std::future::ready(paged(query, |offset| {
                    let snapshot = health.server.health_discovery().map(|h| h.snapshot());
                    overview::health_json(snapshot.as_ref(), offset)
                }))
            }),
        )
        .route(
            "/ui/api/ack",
            get(move || {
                let histogram = ack.server.metrics().ack_histogram();
                std::future::ready(json_response(StatusCode::OK, overview::ack_json(&histogram)))
            }),
        )
}

/// The `offset` of a panel's page (`0` without one), or the body of the `400` of a bad query:
/// a malformed query string, an unknown parameter, or an offset that is not a non-negative
/// integer.
fn offset_of(query: RawQuery) -> Result<usize, Value> {
    let Query(query) = query.map_err(|rejection| {
        json!({ "error": format!("the query string is malformed: {}", rejection.body_text()) })
    })?;
    if let Some(unknown) = query.keys().filter(|k| k.as_str() != "offset").min() {
        let error = format!("unknown parameter \"{}\" (known: offset)", xds_core::echo(unknown));
        let parameter = crate::status::bounded_owned(unknown);
        return Err(json!({ "error": error, "parameter": parameter }));
    }
    match query.get("offset") {
        None => Ok(0),
        Some(text) => text.parse().map_err(|_| {
            let error =
                format!("offset must be a non-negative integer, not \"{}\"", xds_core::echo(text));
            json!({ "error": error, "parameter": "offset" })
        }),
    }
}

/// A panel's page for the query's offset, or the `400` of a bad query.
fn paged(query: RawQuery, page: impl FnOnce(usize) -> Value) -> Response {
    match offset_of(query) {
        Ok(offset) => json_response(StatusCode::OK, page(offset)),
        Err(bad) => json_response(StatusCode::BAD_REQUEST, bad),
    }
}

impl Console {
    fn proxies(&self, query: Result<Query<HashMap<String, String>>, QueryRejection>) -> Response {
        let query = match query {
            Ok(Query(query)) => query,
            Err(rejection) => return malformed(&rejection),
        };
        match ProxyQuery::parse(&query) {
            Ok(query) => {
                let streams = self.server.status().summaries();
                let mut page = api::proxies_page(streams, &query, now_ms());
                // Each replica of a fleet serves its own proxies: the page says which it is.
                if let Some(id) = &self.server.config().control_plane_id {
                    page["control_plane_id"] = json!(crate::status::bounded_owned(id));
                }
                json_response(StatusCode::OK, page)
            }
            Err(bad) => json_response(StatusCode::BAD_REQUEST, bad.to_json()),
        }
    }

    fn proxy(&self, query: Result<Query<HashMap<String, String>>, QueryRejection>) -> Response {
        let query = match query {
            Ok(Query(query)) => query,
            Err(rejection) => return malformed(&rejection),
        };
        if let Some(unknown) = query.keys().filter(|k| k.as_str() != "node").min() {
            let error = format!("unknown parameter \"{}\" (known: node)", xds_core::echo(unknown));
            return json_response(
                StatusCode::BAD_REQUEST,
                json!({ "error": error, "parameter": crate::status::bounded_owned(unknown) }),
            );
        }
        let node = match query.get("node") {
            Some(node) if node.len() <= MAX_NODE_BYTES => node,
            Some(_) => {
                let error = format!("node is at most {MAX_NODE_BYTES} bytes");
                return json_response(
                    StatusCode::BAD_REQUEST,
                    json!({ "error": error, "parameter": "node" }),
                );
            }
            None => {
                return json_response(
                    StatusCode::BAD_REQUEST,
                    json!({ "error": "node=ID is required", "parameter": "node" }),
                );
            }
        };
        let page = self.server.status().page_json(Some(node), 0, crate::status::MAX_STATUS_PAGE);
        json_response(StatusCode::OK, api::proxy_detail(page, now_ms()))
    }
}

fn malformed(rejection: &QueryRejection) -> Response {
    let error = format!("the query string is malformed: {}", rejection.body_text());
    json_response(StatusCode::BAD_REQUEST, json!({ "error": error }))
}

/// The headers every console response carries.
fn guarded(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // Status changes every second, and the page shows who is connected: no cache keeps it.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    guarded(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

fn json_response(code: StatusCode, body: Value) -> Response {
    guarded((code, axum::Json(body)).into_response())
}

#[cfg(test)]
mod tests;
