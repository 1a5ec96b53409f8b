//! The admin router: `/healthz`, `/ready`, `/metrics`, `/status` and CSDS as JSON, for an admin
//! listener an operator and a monitoring system reach. A control plane mounts it as is
//! ([`XdsServer::admin_router`]) or adds what only it knows through the hooks of [`Admin`].

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{StatusCode, header};
use serde_json::{Value, json};

use crate::authz::Entry;
use crate::server::XdsServer;
use crate::services::rest::{CLIENT_STATUS_PATH, client_status, post_only};

pub use crate::metrics::{
    MAX_GROUP_LABEL_BYTES, MAX_GROUP_LABELS, NO_GROUP_LABEL, OTHER_GROUP_LABEL,
};

pub use crate::status::MAX_STATUS_PAGE;

/// The most clusters of reported load one `/status` page shows (`?load_limit=` may ask for
/// fewer): the load of every LRS stream can hold hundreds of thousands of entries, rendered a
/// page at a time.
pub const MAX_LOAD_PAGE: usize = 100;

/// The most bytes of reported load one `/status` page shows (past its first cluster).
pub const MAX_LOAD_PAGE_BYTES: usize = 256 << 10;

/// How many groups get a `group` label of their own on `/metrics` unless
/// [`Admin::max_group_labels`] says otherwise.
pub const DEFAULT_MAX_GROUP_LABELS: usize = 100;

/// The content type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";

type ReadyHook = Arc<dyn Fn() -> Result<String, String> + Send + Sync>;
type MetricsHook = Arc<dyn Fn(&mut String) + Send + Sync>;
type StatusHook = Arc<dyn Fn(&mut Value) + Send + Sync>;

/// The admin router with the application's hooks: built by [`XdsServer::admin`], served by
/// [`router`](Admin::router). The server knows its streams, metrics and load; only the
/// application knows when it is ready, what else it counts and what else its status shows.
///
/// Routes:
/// - `GET /healthz`: `200 ok`, for as long as the process answers (liveness).
/// - `GET /ready`: the [`ready`](Admin::ready) hook's answer: `200` with its text, or `503` with
///   the reason (readiness). Without a hook, always `200 ready`.
/// - `GET /metrics`: Prometheus text (`text/plain; version=0.0.4`): the server's
///   [`Metrics`](crate::Metrics), the load reported over LRS
///   ([`LoadReportingServer::render_metrics`](crate::lrs::LoadReportingServer::render_metrics)),
///   the per-group series below, then what the [`metrics`](Admin::metrics) hook appends.
/// - `GET /status`: one page of the streams' status as JSON
///   ([`StatusRegistry::page_json`](crate::StatusRegistry::page_json): each stream with its node,
///   its `group` and per type what was sent, ACKed and NACKed), beside every `..._ms` time of a
///   stream the same instant in RFC 3339 (`opened_ms` gets `opened`, UTC), the reported load
///   under `load`
///   ([`LoadSnapshot::page_json`](crate::lrs::LoadSnapshot::page_json)), then what the
///   [`status`](Admin::status) hook adds. Query parameters: `node=ID` (that node's streams and
///   load only), `offset=N` and `limit=N` (at most [`MAX_STATUS_PAGE`] streams; `next_offset`
///   says where the next page starts), `load_offset=N` and `load_limit=N` (at most
///   [`MAX_LOAD_PAGE`] clusters and [`MAX_LOAD_PAGE_BYTES`]; `load.next_offset`). A limit is
///   clamped to 1 ..= its maximum, so that paging always moves on. A value that is not a
///   non-negative integer is answered `400` with `{"error": ..., "parameter": NAME}`: a typo in
///   a script must not quietly show the first page.
/// - `GET /ui`: the operator console ([`console`](crate::console)): a page with one row per
///   stream and one cell per type (SYNCED, PENDING, NACKED, NOT SENT) that polls
///   `GET /ui/api/proxies` (filters `group`, `type`, `state`, `q` (a part of the node id),
///   `sort`, `order`, `offset`, `limit` up to [`MAX_CONSOLE_PAGE`](crate::console::MAX_CONSOLE_PAGE))
///   every second; `/ui?node=ID` shows one node's streams from `GET /ui/api/proxy?node=ID`, and
///   what its group serves when the application serves `/config_dump?node=ID` (as
///   `xds-file-server` does). Beside the proxies, panels for the application's configuration
///   history (`GET /ui/api/config`, from the [`console_config`](Admin::console_config) hook),
///   the load reported over LRS (`GET /ui/api/load?offset=N`), the endpoint health reported
///   over HDS (`GET /ui/api/health?offset=N`) and the ACK latency histogram
///   (`GET /ui/api/ack`).
/// - `POST /v3/discovery:client_status`: CSDS as JSON, as on
///   [`rest_router`](XdsServer::rest_router), authorized as
///   [`Entry::Admin`].
///
/// Per-group series, from the group the cache serves each stream's node from
/// ([`StreamStatus::group`](crate::StreamStatus::group)):
/// - `xds_group_streams{group}`: streams open (gauge);
/// - `xds_group_nacks_total{group,type}`: responses NACKed (counter).
///
/// A group can be a node id (a cache that groups by node id), which clients choose, so the
/// labels are bounded: at most [`max_group_labels`](Admin::max_group_labels) groups get a label
/// of their own, the rest are summed under `group="(other)"`; streams of a cache that does not
/// group nodes (or that sent no request yet) are under `group="(none)"`. For streams the
/// groups with the most streams are shown (then by name); for NACKs the first groups that
/// NACKed keep their label for the life of the server (a counter that moved between labels
/// would look reset). A label value is the group name cut to
/// [`MAX_GROUP_LABEL_BYTES`] bytes and escaped per the
/// Prometheus text format (backslash, double quote, newline); a group named `(none)` or
/// `(other)` counts under `(other)`. Series are sorted by label.
///
/// # Security
///
/// Only CSDS goes through the server's [`Authorizer`](crate::Authorizer) (as
/// [`Entry::Admin`], which the ready policies allow); the other
/// routes show every client's node, subscriptions and NACK texts to whoever reaches them.
/// Bind the admin listener to localhost, or put it behind credentials (a bearer token, mTLS: a
/// `tower` layer around the router, e.g. with
/// [`transport::Incoming`](crate::transport::Incoming) and TLS).
///
/// Hooks are called on the request's task with no lock of the server held (they may call
/// anything on the server); keep them short, as they run on the async runtime.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use xds_server::XdsServer;
/// use xds_server::axum::routing::get;
/// use xds_server::cache::SnapshotCache;
///
/// let server = XdsServer::new(SnapshotCache::by_node_id());
/// let loaded = Arc::new(AtomicBool::new(false));
/// let ready = loaded.clone();
/// let admin = server
///     .admin()
///     .ready(move || match ready.load(Ordering::Relaxed) {
///         true => Ok("ready".into()),
///         false => Err("no configuration loaded yet".into()),
///     })
///     .metrics(|text| {
///         text.push_str("# TYPE my_app_up gauge\nmy_app_up 1\n");
///     })
///     .status(|body| body["app"] = "my-control-plane".into())
///     .router()
///     // The router merges with the application's own routes.
///     .route("/version", get(|| async { "1.0\n" }));
/// // Localhost only: the admin routes show every client's status.
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:18002").await?;
/// xds_server::axum::serve(listener, admin).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "an Admin does nothing until its router() is served"]
pub struct Admin {
    server: XdsServer,
    ready: Option<ReadyHook>,
    metrics: Option<MetricsHook>,
    status: Option<StatusHook>,
    console_config: Option<crate::console::ConfigHook>,
    max_group_labels: usize,
}

impl fmt::Debug for Admin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admin")
            .field("ready", &self.ready.is_some())
            .field("metrics", &self.metrics.is_some())
            .field("status", &self.status.is_some())
            .field("console_config", &self.console_config.is_some())
            .field("max_group_labels", &self.max_group_labels)
            .finish_non_exhaustive()
    }
}

impl XdsServer {
    /// The admin router with hooks for what only the application knows (readiness, its own
    /// metrics and status fields): see [`Admin`].
    pub fn admin(&self) -> Admin {
        Admin {
            server: self.clone(),
            ready: None,
            metrics: None,
            status: None,
            console_config: None,
            max_group_labels: DEFAULT_MAX_GROUP_LABELS,
        }
    }

    /// The admin router with no hooks: `/healthz`, `/ready` (always ready), `/metrics`,
    /// `/status` and CSDS as JSON (`POST /v3/discovery:client_status`, authorized as
    /// [`Entry::Admin`], which the ready policies allow, because the operator controls who
    /// can reach that listener). See [`Admin`] for the routes, and bind it to localhost or put
    /// it behind credentials.
    pub fn admin_router(&self) -> Router {
        self.admin().router()
    }
}

impl Admin {
    /// What `/ready` answers: `Ok(text)` is `200` with the text (a note such as "the newest
    /// configuration is rejected; the last good one serves" belongs there: the server still
    /// serves), `Err(reason)` is `503` with the reason. A newline is added to a text without
    /// one. Without this hook `/ready` is always `200 ready`.
    pub fn ready(
        mut self,
        hook: impl Fn() -> Result<String, String> + Send + Sync + 'static,
    ) -> Self {
        self.ready = Some(Arc::new(hook));
        self
    }

    /// Appends the application's series to `/metrics` (Prometheus text, each line ending in a
    /// newline), after the server's: its configuration's state, its build, anything it counts.
    pub fn metrics(mut self, hook: impl Fn(&mut String) + Send + Sync + 'static) -> Self {
        self.metrics = Some(Arc::new(hook));
        self
    }

    /// Changes the `/status` body after the server filled it in (`streams`, `total`, `offset`,
    /// `next_offset`, `load`): to add fields of the application's (its configuration's state,
    /// say) or to show something the server's way does not (a group's display name).
    pub fn status(mut self, hook: impl Fn(&mut Value) + Send + Sync + 'static) -> Self {
        self.status = Some(Arc::new(hook));
        self
    }

    /// What the console's Configuration panel shows (`GET /ui/api/config`): the application's
    /// configuration history, as JSON of this shape (every field optional):
    ///
    /// ```json
    /// {"summary": {"source": "files", "reloads": 3},
    ///  "history": [{"at_ms": 1795930936123, "source": "reload", "outcome": "refused",
    ///               "changes": "2 clusters changed", "error": "cluster c: ..."}]}
    /// ```
    ///
    /// `summary` is shown as a list of fields, `history` (newest first) as a table, of which
    /// the console keeps the first [`MAX_CONFIG_HISTORY`](crate::console::MAX_CONFIG_HISTORY)
    /// entries; every value is shown as text. Keep the history bounded and its error texts
    /// short: the hook runs on every poll. Without this hook the panel says the server keeps no
    /// configuration history.
    pub fn console_config(mut self, hook: impl Fn() -> Value + Send + Sync + 'static) -> Self {
        self.console_config = Some(Arc::new(hook));
        self
    }

    /// How many groups get a `group` label of their own on `/metrics` (default
    /// [`DEFAULT_MAX_GROUP_LABELS`], at most [`MAX_GROUP_LABELS`],
    /// the number the server keeps NACK counts for); the rest are summed under `(other)`. A
    /// series per group costs the monitoring system as much as any other: keep it near the
    /// number of groups an operator can tell apart.
    pub fn max_group_labels(mut self, max: usize) -> Self {
        self.max_group_labels = max.min(MAX_GROUP_LABELS);
        self
    }

    /// The router: merge it with the application's own routes (it has no fallback, so it
    /// merges with one that has).
    pub fn router(self) -> Router {
        let admin = Arc::new(self);
        let csds = {
            let server = admin.server.clone();
            post(move |request: Request| client_status(server.clone(), Entry::Admin, request))
        };
        let server = admin.server.clone();
        let console_config = admin.console_config.clone();
        let (ready, metrics, status) = (admin.clone(), admin.clone(), admin);
        Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/ready", get(move || std::future::ready(ready.ready_response())))
            .route("/metrics", get(move || std::future::ready(metrics.metrics_response())))
            .route(
                "/status",
                get(move |query: Result<Query<HashMap<String, String>>, QueryRejection>| {
                    std::future::ready(status.status_response(query))
                }),
            )
            .route(CLIENT_STATUS_PATH, post_only(csds))
            .merge(crate::console::routes(server, console_config))
    }

    fn ready_response(&self) -> Response {
        let answer = match &self.ready {
            Some(hook) => hook(),
            None => Ok("ready".to_owned()),
        };
        let (code, mut text) = match answer {
            Ok(text) => (StatusCode::OK, text),
            Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
        };
        if !text.ends_with('\n') {
            text.push('\n');
        }
        (code, text).into_response()
    }

    fn metrics_response(&self) -> Response {
        let server = &self.server;
        let mut text = server.metrics().render();
        text.push_str(&server.load_reporting().render_metrics());
        let streams = server.status().group_counts(crate::metrics::group_label);
        text.push_str(&server.metrics().render_groups(streams, self.max_group_labels));
        if let Some(hook) = &self.metrics {
            hook(&mut text);
        }
        ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], text).into_response()
    }

    fn status_response(
        &self,
        query: Result<Query<HashMap<String, String>>, QueryRejection>,
    ) -> Response {
        let query = match query {
            Ok(Query(query)) => query,
            Err(rejection) => {
                let error = format!("the query string is malformed: {}", rejection.body_text());
                return bad_request(json!({ "error": error }));
            }
        };
        match self.status_page(&query) {
            Ok(body) => axum::Json(body).into_response(),
            Err(error) => bad_request(error),
        }
    }

    /// The `/status` body, or the JSON error of a bad parameter.
    fn status_page(&self, query: &HashMap<String, String>) -> Result<Value, Value> {
        let number = |key: &str| -> Result<Option<usize>, Value> {
            let Some(text) = query.get(key) else { return Ok(None) };
            text.parse::<usize>().map(Some).map_err(|_| {
                let error = format!(
                    "{key} must be a non-negative integer, not \"{}\"",
                    xds_core::echo(text)
                );
                json!({ "error": error, "parameter": key })
            })
        };
        let limit = number("limit")?.unwrap_or(MAX_STATUS_PAGE).clamp(1, MAX_STATUS_PAGE);
        let offset = number("offset")?.unwrap_or(0);
        let load_limit = number("load_limit")?.unwrap_or(MAX_LOAD_PAGE).clamp(1, MAX_LOAD_PAGE);
        let load_offset = number("load_offset")?.unwrap_or(0);
        let node = query.get("node").map(String::as_str);
        let server = &self.server;
        let mut body = server.status().page_json(node, offset, limit);
        if let Some(streams) = body.get_mut("streams") {
            add_rfc3339(streams);
        }
        body["load"] = server.load_reporting().snapshot().page_json(
            node,
            load_offset,
            load_limit,
            MAX_LOAD_PAGE_BYTES,
        );
        if let Some(hook) = &self.status {
            hook(&mut body);
        }
        Ok(body)
    }
}

fn bad_request(body: Value) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// Beside every `..._ms` field holding milliseconds since the epoch (kept for scripts), the same
/// instant in RFC 3339 for people reading it: `opened_ms` gets `opened`.
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
    fn every_ms_field_gets_its_readable_time() {
        let mut streams = json!([
            {"node_id": "envoy-2", "opened_ms": 0,
             "types": {"cluster": {"last_request_ms": 951_782_400_000_u64, "nack": {"at_ms": 0}}}},
        ]);
        add_rfc3339(&mut streams);
        let first = &streams[0];
        assert_eq!(first["opened"], "1970-01-01T00:00:00.000Z");
        assert_eq!(first["opened_ms"], 0);
        assert_eq!(first["types"]["cluster"]["last_request"], "2000-02-29T00:00:00.000Z");
        assert_eq!(first["types"]["cluster"]["nack"]["at"], "1970-01-01T00:00:00.000Z");
    }
}
