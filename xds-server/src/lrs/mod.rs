//! Load reporting (LRS): `envoy.service.load_stats.v3.LoadReportingService`.
//!
//! A client (Envoy's `cluster_manager.load_stats_config`, a gRPC xDS client with
//! `lrs_server: {self: {}}`) opens `StreamLoadStats` and sends a first `LoadStatsRequest` with
//! its node. The server answers once with the clusters to report and the interval (from a
//! [`LoadReportPolicy`]), then takes the client's reports for the life of the stream. Reports
//! are aggregated per cluster, locality and node over a sliding window, handed out as a
//! latest-wins view ([`LoadReportingServer::snapshot`], [`LoadReportingServer::subscribe`])
//! and as Prometheus metrics with bounded labels ([`LoadReportingServer::render_metrics`]).

pub(crate) mod store;
mod view;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status, Streaming};
use xds_proto::TypeUrl;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::load_stats::v3::load_reporting_service_server::{
    LoadReportingService, LoadReportingServiceServer,
};
use xds_proto::pb::envoy::service::load_stats::v3::{LoadStatsRequest, LoadStatsResponse};
use xds_proto::prost::Name;

pub use crate::reporter::OverBudget;
pub use store::LrsConfig;
pub use view::{
    ClusterLoad, LoadCounts, LoadSnapshot, LoadWatch, LocalityName, MAX_LOCALITIES_SHOWN, NodeLoad,
};

use crate::reporter::{self, Hooks, Reason, ReportLimits, Reporting, escape_label};
use crate::status::truncate;
use crate::stream::ResponseStream;
use store::{Registration, Store};

/// The shortest reporting interval the server asks for, whatever the policy says.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Which clusters a client is asked to report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReportClusters {
    /// Every cluster the client has (`send_all_clusters`).
    All,
    /// Only these; reports of others are rejected (`unknown_cluster`).
    Only(Vec<String>),
}

/// What the server asks of one client in its `LoadStatsResponse`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReportRequest {
    /// The clusters to report.
    pub clusters: ReportClusters,
    /// How often to report; clamped to between 100 ms and [`LrsConfig::max_interval`].
    pub interval: Duration,
    /// Ask for per-endpoint stats too (`report_endpoint_granularity`); the server aggregates
    /// per locality either way.
    pub endpoint_granularity: bool,
}

/// Chainable setters, one per field: the struct is `#[non_exhaustive]` (a new knob is not a
/// breaking change), so code outside this crate builds one from `ReportRequest::default()`.
impl ReportRequest {
    /// Sets `clusters` (see the field).
    #[must_use]
    pub fn clusters(mut self, value: ReportClusters) -> Self {
        self.clusters = value;
        self
    }

    /// Sets `interval` (see the field).
    #[must_use]
    pub fn interval(mut self, value: Duration) -> Self {
        self.interval = value;
        self
    }

    /// Sets `endpoint_granularity` (see the field).
    #[must_use]
    pub fn endpoint_granularity(mut self, value: bool) -> Self {
        self.endpoint_granularity = value;
        self
    }
}

impl Default for ReportRequest {
    /// All clusters, every 10 seconds.
    fn default() -> Self {
        Self {
            clusters: ReportClusters::All,
            interval: Duration::from_secs(10),
            endpoint_granularity: false,
        }
    }
}

/// Decides, per client, what it is asked to report. Called when a stream opens and, after
/// [`LoadReportingServer::policy_changed`], for every open stream; with no lock held.
pub trait LoadReportPolicy: Send + Sync + 'static {
    /// The request for a client of `node`. Default: [`ReportRequest::default`].
    fn request(&self, node: &Node) -> ReportRequest {
        let _ = node;
        ReportRequest::default()
    }
}

/// The default policy: every cluster, every 10 seconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct SendAllClusters;

impl LoadReportPolicy for SendAllClusters {}

impl LoadReportPolicy for ReportRequest {
    /// The same request for every client.
    fn request(&self, _: &Node) -> ReportRequest {
        self.clone()
    }
}

/// The LRS service and the load it has received. Cloning is cheap; clones share the load.
///
/// [`XdsServer`](crate::XdsServer) serves one in its `routes()` (see
/// [`XdsServerBuilder::load_reporting`](crate::XdsServerBuilder::load_reporting)); on its own:
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use xds_server::lrs::{LoadReportingServer, ReportRequest};
///
/// let lrs = LoadReportingServer::new()
///     .policy(ReportRequest::default().interval(Duration::from_secs(5)));
/// let mut view = lrs.subscribe();
/// tokio::spawn(async move {
///     loop {
///         let load = view.changed().await;
///         for (cluster, l) in &load.clusters {
///             println!("{cluster}: {} requests in {:?}", l.total.issued, load.window);
///         }
///     }
/// });
/// xds_server::tonic::transport::Server::builder()
///     .add_routes(lrs.routes())
///     .serve("127.0.0.1:18000".parse()?)
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LoadReportingServer {
    store: Arc<Store>,
    policy: Arc<dyn LoadReportPolicy>,
    hooks: Hooks,
}

impl std::fmt::Debug for LoadReportingServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadReportingServer").field("config", &self.store.config).finish()
    }
}

impl Default for LoadReportingServer {
    fn default() -> Self {
        Self::new()
    }
}

impl LoadReportingServer {
    /// A server with the default limits and window, asking every client for every cluster
    /// every 10 seconds, with no callbacks.
    pub fn new() -> Self {
        Self {
            store: Arc::new(Store::new(LrsConfig::default())),
            policy: Arc::new(SendAllClusters),
            hooks: Hooks::default(),
        }
    }

    /// Sets the limits and window (starting from no load).
    #[must_use]
    pub fn config(mut self, config: LrsConfig) -> Self {
        let mut store = Store::new(config);
        store.known = self.store.known.clone();
        self.store = Arc::new(store);
        self
    }

    /// Sets what clients are asked to report.
    #[must_use]
    pub fn policy(mut self, policy: impl LoadReportPolicy) -> Self {
        self.policy = Arc::new(policy);
        self
    }

    /// Decides which clusters get a metric label of their own (up to
    /// [`LrsConfig::max_cluster_labels`]); the others are counted under `other`. Asked once
    /// per stream and cluster, when the stream first reports the cluster, with no lock held.
    /// By default every cluster is eligible, so the labels go to the first clusters reported;
    /// give the clusters your configuration serves to keep the set to those.
    #[must_use]
    pub fn known_clusters(mut self, known: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        let mut store = Store::new(self.store.config.clone());
        store.known = Arc::new(known);
        self.store = Arc::new(store);
        self
    }

    /// Tells open streams the [`LoadReportPolicy`]'s answer may have changed: each asks the
    /// policy again for its node and, if the answer differs from the one it was sent, sends
    /// the client a new `LoadStatsResponse` (the clusters to report, the interval), which
    /// Envoy and gRPC apply to the running stream.
    pub fn policy_changed(&self) {
        self.store.gate.policy_changed();
    }

    crate::reporter::reporting_methods!(LoadReportingServiceServer, "lrs");

    /// The load of the connected clients over the window (cached until something changes).
    pub fn snapshot(&self) -> Arc<LoadSnapshot> {
        self.store.snapshot(Instant::now())
    }

    /// What the load of every open stream holds now, in estimated bytes and in entries (a
    /// stream's cluster, or one of its localities): bounded by [`LrsConfig::max_total_bytes`]
    /// and [`LrsConfig::max_total_entries`], and back to 0 when every stream has ended.
    pub fn held(&self) -> (usize, usize) {
        let used = self.store.budget.used();
        (used.bytes, used.entries)
    }

    /// A latest-wins subscription to [`snapshot`](Self::snapshot).
    pub fn subscribe(&self) -> LoadWatch {
        LoadWatch { store: self.store.clone(), rx: self.store.subscribe() }
    }

    /// The metrics in Prometheus text format: open and pending streams, reports, rejections
    /// by reason,
    /// and per cluster and locality the window's requests (issued, succeeded, errors), the
    /// requests in flight and the dropped requests. Cluster and locality labels come from
    /// bounded sets ([`LrsConfig::max_cluster_labels`], [`LrsConfig::max_locality_labels`]),
    /// the rest under `other`.
    pub fn render_metrics(&self) -> String {
        let store = &*self.store;
        let (counts, dropped) = store.by_label(Instant::now());
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP xds_lrs_streams Open LRS streams.\n# TYPE xds_lrs_streams gauge\nxds_lrs_streams {}",
            self.snapshot().streams
        );
        let _ = writeln!(
            out,
            "# HELP xds_lrs_reports_total Load reports received.\n# TYPE xds_lrs_reports_total counter\nxds_lrs_reports_total {}",
            store.reports()
        );
        let (bytes, entries) = self.held();
        let _ = writeln!(
            out,
            "# HELP xds_lrs_held_bytes Estimated bytes the load of every open LRS stream holds (at most max_total_bytes).\n# TYPE xds_lrs_held_bytes gauge\nxds_lrs_held_bytes {bytes}\n# HELP xds_lrs_held_entries Clusters and localities the open LRS streams hold (at most max_total_entries).\n# TYPE xds_lrs_held_entries gauge\nxds_lrs_held_entries {entries}"
        );
        reporter::render_stream_metrics(
            &mut out,
            "lrs",
            &store.gate,
            &[
                Reason::UnknownCluster,
                Reason::TooManyClusters,
                Reason::TooManyLocalities,
                Reason::NameTooLong,
                Reason::BadInterval,
            ],
        );
        let _ = writeln!(
            out,
            "# HELP xds_lrs_window_requests Requests reported over the window, by result.\n# TYPE xds_lrs_window_requests gauge"
        );
        for ((cluster, locality), c) in &counts {
            let (cluster, locality) = (escape_label(cluster), escape_label(locality));
            for (result, n) in
                [("issued", c.issued), ("succeeded", c.succeeded), ("errors", c.errors)]
            {
                let _ = writeln!(
                    out,
                    "xds_lrs_window_requests{{cluster=\"{cluster}\",locality=\"{locality}\",result=\"{result}\"}} {n}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP xds_lrs_requests_in_progress Requests in flight at the last reports.\n# TYPE xds_lrs_requests_in_progress gauge"
        );
        for ((cluster, locality), c) in &counts {
            let _ = writeln!(
                out,
                "xds_lrs_requests_in_progress{{cluster=\"{}\",locality=\"{}\"}} {}",
                escape_label(cluster),
                escape_label(locality),
                c.in_progress
            );
        }
        let _ = writeln!(
            out,
            "# HELP xds_lrs_window_dropped_requests Requests dropped by clients over the window.\n# TYPE xds_lrs_window_dropped_requests gauge"
        );
        for (cluster, n) in &dropped {
            let _ = writeln!(
                out,
                "xds_lrs_window_dropped_requests{{cluster=\"{}\"}} {n}",
                escape_label(cluster)
            );
        }
        out
    }

    /// A reporter for load received some other way (a proxy's own LRS relay, a test): its
    /// reports count like a stream's of `node`, until it is dropped. No node check is made.
    /// `None` when the server holds [`LrsConfig::max_streams`] reporters and streams.
    pub fn reporter(&self, node: &Node) -> Option<LoadReporter> {
        let (_, only) = self.first_response(node);
        let id = reporter::next_id();
        let node_id = truncate(&node.id, self.store.config.max_name_bytes);
        self.store.register(id, node_id, only).map(|registration| LoadReporter { registration })
    }

    /// The response to a client's first request, and the clusters its reports may name.
    fn first_response(&self, node: &Node) -> (LoadStatsResponse, Option<HashSet<String>>) {
        let request = self.policy.request(node);
        let interval =
            request.interval.clamp(MIN_INTERVAL, self.store.config.max_interval.max(MIN_INTERVAL));
        let (clusters, send_all_clusters, only) = match request.clusters {
            ReportClusters::All => (Vec::new(), true, None),
            ReportClusters::Only(mut names) => {
                names.sort();
                names.dedup();
                let only = names.iter().cloned().collect();
                (names, false, Some(only))
            }
        };
        let response = LoadStatsResponse {
            clusters,
            send_all_clusters,
            load_reporting_interval: Some(xds_proto::pb::google::protobuf::Duration {
                seconds: interval.as_secs() as i64,
                nanos: interval.subsec_nanos() as i32,
            }),
            report_endpoint_granularity: request.endpoint_granularity,
        };
        (response, only)
    }
}

/// Feeds reports into a [`LoadReportingServer`]'s view as if they came over a stream; made by
/// [`LoadReportingServer::reporter`]. Dropping it takes its load out of the view.
#[derive(Debug)]
pub struct LoadReporter {
    registration: Registration,
}

impl LoadReporter {
    /// Adds one report's cluster stats (bounded and counted as a stream's are).
    ///
    /// # Errors
    ///
    /// [`OverBudget`] when the report's new clusters and localities do not fit the server's
    /// total budget ([`LrsConfig::max_total_bytes`], [`LrsConfig::max_total_entries`]): the
    /// rest of the report is not taken. A stream is ended then; a reporter is the caller's to
    /// drop.
    pub fn report(
        &self,
        stats: &[xds_proto::pb::envoy::config::endpoint::v3::ClusterStats],
    ) -> Result<(), OverBudget> {
        self.registration.ingest(stats, Instant::now())
    }
}

impl Reporting for LoadReportingServer {
    type Request = LoadStatsRequest;
    type Response = LoadStatsResponse;
    /// The clusters reports may name; `None`: all.
    type Scope = Option<HashSet<String>>;
    type Registration = Registration;
    const NAME: &'static str = "LRS";
    const NO_NODE: &'static str = "the first LoadStatsRequest must carry a node";

    fn parts(&self) -> (&Hooks, &Arc<ReportLimits>) {
        (&self.hooks, &self.store.gate)
    }

    fn node(first: &LoadStatsRequest) -> Option<&Node> {
        first.node.as_ref()
    }

    fn answer(&self, node: &Node) -> (LoadStatsResponse, Option<HashSet<String>>) {
        self.first_response(node)
    }

    fn register(
        &self,
        id: u64,
        node: &Node,
        only: Option<HashSet<String>>,
    ) -> Option<Registration> {
        let node_id = truncate(&node.id, self.store.config.max_name_bytes);
        self.store.register(id, node_id, only)
    }

    fn rescope(registration: &mut Registration, only: Option<HashSet<String>>) {
        registration.set_only(only);
    }

    fn take(registration: &Registration, report: LoadStatsRequest) -> Result<(), Status> {
        Ok(registration.ingest(&report.cluster_stats, Instant::now())?)
    }
}

#[tonic::async_trait]
impl LoadReportingService for LoadReportingServer {
    type StreamLoadStatsStream = ResponseStream<LoadStatsResponse>;

    async fn stream_load_stats(
        &self,
        request: Request<Streaming<LoadStatsRequest>>,
    ) -> Result<Response<Self::StreamLoadStatsStream>, Status> {
        reporter::serve(self, request, TypeUrl::parse(&LoadStatsRequest::type_url()))
    }
}
