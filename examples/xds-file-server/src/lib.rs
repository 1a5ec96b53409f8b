//! The ready-to-run control plane: serves Envoy resources from YAML or JSON files over every xDS
//! variant, and reloads them when they change.
//!
//! The binary is [`run`] over the parsed [`cli::Args`]; the configuration format is [`config`].

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{ResourceType, TypeUrl};
use xds_server::lrs::{LoadReportingServer, LrsConfig, ReportRequest};
use xds_server::{FileFormat, FileWriter, Limits, NodeIdentity, UnauthenticatedSecrets, XdsServer};

mod admin;
mod admin_access;
mod banner;
pub mod check;
pub mod cli;
pub mod config;
mod conn_caps;
pub mod etcd;
mod history;
mod ports;
mod reload;
pub mod status_cli;

use admin::{ConfigDump, ConfigState, admin_router};
use banner::print_banner;
use cli::{Args, Format};
use config::DEFAULT_GROUP;
use ports::Ports;
use reload::{ReloadTiming, Reloader, publish};

/// Runs the control plane until SIGINT or SIGTERM.
///
/// The stages, in order: the configuration source is read (files) or named (etcd); the cache
/// and the server are built; every port is bound; only then is anything served or written
/// (the source is followed, `--write-dir` is written, the ports serve) until a signal drains
/// the streams.
///
/// # Errors
///
/// Start-up failures: an unreadable or invalid initial configuration, a port that cannot be bound,
/// unreadable TLS files. Once serving, reload errors are reported, not returned.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let from_etcd = !args.etcd.is_empty();
    require_config(&args, from_etcd)?;
    // Before anything opens a descriptor that counts: caps that do not fit the limit stop here.
    let caps = conn_caps::plan(&args, conn_caps::open_file_limit())
        .map_err(|e| format!("cannot start: {e}"))?;
    // From etcd, nothing is served (and /ready says so) until the source's first valid read.
    let files = if from_etcd { None } else { Some(InitialFiles::load(&args)?) };
    let initial_names = files.as_ref().map(InitialFiles::group_names).unwrap_or_default();
    let group_names = Arc::new(RwLock::new(initial_names));
    let grouping = grouping(&args, group_names.clone());
    let cache = SnapshotCache::new(grouping.clone());
    let state = Arc::new(Mutex::new(ConfigState {
        path: if from_etcd {
            etcd::describe(&args.etcd, &args.prefix)
        } else {
            args.config.display().to_string()
        },
        ready_when_stale: args.ready_when_stale,
        ..Default::default()
    }));
    let files = files.map(|files| files.publish(&cache, &group_names, &state));

    // Decided before anything is served: a guarded admin port also closes CSDS elsewhere.
    let admin_access = admin_access::admin_access(
        args.admin_addr,
        args.admin_token_file.as_deref(),
        args.admin_client_ca.as_deref(),
        args.tls_cert.is_some() && args.tls_key.is_some(),
    )
    .map_err(|e| format!("cannot start: {e}"))?;
    let server = build_server(&args, &cache, grouping.clone(), &admin_access);
    let ports = Ports::bind(&args, &caps, &admin_access).await?;

    follow_source(&args, files, &cache, &group_names, &state)?;
    if let Some(dir) = &args.write_dir {
        let format = match args.write_format {
            Format::Yaml => FileFormat::Yaml,
            Format::Json => FileFormat::Json,
            Format::Pb => FileFormat::Binary,
        };
        let types = ResourceType::ALL
            .into_iter()
            .filter(|t| !t.is_delta_only())
            .map(TypeUrl::from)
            .collect();
        tokio::spawn(FileWriter::new(dir, format).follow(cache.clone(), Node::default(), types));
    }
    let dump = ConfigDump { cache: cache.clone(), grouping: Arc::new(grouping) };
    let mut admin = admin_router(&server, state.clone(), dump);
    if let admin_access::AdminAccess::Token(token) = admin_access {
        admin = admin_access::require_token(admin, token);
    }
    let tls = ports.tls.is_some();
    let grpc = ports.serve_http(&server, admin);
    announce(&args, tls, &caps, &state);
    grpc.serve(&args, &server, drain_on_signal(server.clone())).await
}

/// Refuses to start on the default `--config` when there is no such file: the likeliest
/// mistake is running from another directory, and the message says where the shipped one is.
fn require_config(args: &Args, from_etcd: bool) -> Result<(), String> {
    if from_etcd || args.config.as_os_str() != cli::DEFAULT_CONFIG || args.config.exists() {
        return Ok(());
    }
    Err(format!(
        "cannot start: no --config given and no {} in the working directory {}; pass \
         --config FILE|DIR (the repository ships examples/xds-file-server/config/default.yaml)",
        cli::DEFAULT_CONFIG,
        std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default(),
    ))
}

/// The configuration files as read at start, before anything is served.
struct InitialFiles {
    loader: config::Loader,
    loaded: Vec<(std::path::PathBuf, Option<config::Stamp>)>,
    initial: config::Config,
}

impl InitialFiles {
    /// Reads `--config`; an invalid or unreadable configuration stops the start.
    fn load(args: &Args) -> Result<InitialFiles, String> {
        let mut loader = config::Loader::new(&args.config, args.max_config_bytes);
        let loaded = config::fingerprint(&args.config);
        let initial =
            loader.load().map_err(|e| format!("cannot start: {}", e.into_config_error()))?;
        Ok(InitialFiles { loader, loaded, initial })
    }

    fn group_names(&self) -> Vec<String> {
        self.initial.groups.keys().cloned().collect()
    }

    /// Serves the initial configuration; what is left follows the files from there.
    fn publish(
        self,
        cache: &SnapshotCache,
        names: &RwLock<Vec<String>>,
        state: &Mutex<ConfigState>,
    ) -> FollowedFiles {
        publish(cache, self.initial, names, state, "files (initial load)".to_owned());
        FollowedFiles { loader: self.loader, loaded: self.loaded }
    }
}

/// The configuration files once served: what the reloader starts from.
struct FollowedFiles {
    loader: config::Loader,
    loaded: Vec<(std::path::PathBuf, Option<config::Stamp>)>,
}

/// Which group serves a node: the group named by its id, else by its cluster, else the default
/// group. The authorization policy groups with this same function, so that a stream is checked
/// against the group it is served.
///
/// Under --verify-node-id a cluster selects only a --shared-group: the cluster is the client's
/// claim, not its identity, and groups come and go with reloads. A stream admitted while a
/// cluster named no group would otherwise be moved by `regroup` into that group once it
/// appears, without the policy being asked again.
fn grouping(
    args: &Args,
    names: Arc<RwLock<Vec<String>>>,
) -> impl Fn(&Node) -> String + Clone + Send + Sync + 'static {
    let cluster_groups = args.verify_node_id.then(|| args.shared_group.clone());
    move |node: &Node| {
        let names = names.read().unwrap_or_else(|e| e.into_inner());
        let cluster_allowed =
            |c: &String| cluster_groups.as_ref().is_none_or(|shared| shared.contains(c));
        [&node.id, &node.cluster]
            .into_iter()
            .enumerate()
            .find(|(i, k)| !k.is_empty() && names.contains(k) && (*i == 0 || cluster_allowed(k)))
            .map(|(_, k)| k.clone())
            .unwrap_or_else(|| DEFAULT_GROUP.to_owned())
    }
}

/// The xDS server over `cache`: limits, join gate, authorization, load reporting.
fn build_server(
    args: &Args,
    cache: &SnapshotCache,
    grouping: impl Fn(&Node) -> String + Send + Sync + 'static,
    admin_access: &admin_access::AdminAccess,
) -> XdsServer {
    let limits = Limits::default()
        .max_request_bytes(args.max_request_bytes)
        .max_streams(args.max_streams)
        .max_subscribed_names(args.max_subscribed_names)
        .max_requests_per_second(args.max_requests_per_second);
    let mut builder = XdsServer::builder(cache.clone())
        .allow_anonymous(args.allow_anonymous)
        .control_plane_id(
            args.control_plane_id.clone().unwrap_or_else(|| etcd::default_id(args.grpc_addr)),
        )
        .limits(limits)
        .join_timeout(Duration::from_secs(args.join_timeout_s))
        .join_max_wait(Duration::from_secs(args.join_max_wait_s));
    if let Some(permits) = args.join_permits {
        builder = builder.join_permits(permits);
    }
    if args.verify_node_id {
        let mut policy =
            NodeIdentity::new().grouping(grouping).shared_groups(args.shared_group.clone());
        for domain in &args.trust_domain {
            policy = policy.trust_domain(domain);
        }
        // NodeIdentity serves CSDS on the admin port only already.
        builder = builder.authorizer(policy);
    } else if admin_access.guarded() {
        builder = builder.authorizer(admin_access::CsdsOnAdminOnly(xds_server::AllowAll));
    }
    // Load reporting is on by default (served on the gRPC port); clients are asked for every
    // cluster at --lrs-interval-ms, and the metrics label only the clusters the configuration
    // serves (in some group): a client cannot grow the label set with names of its own.
    let known = cache.clone();
    let lrs_config = LrsConfig::default().max_total_bytes(args.lrs_max_total_bytes);
    builder = builder.load_reporting(
        LoadReportingServer::new()
            .config(lrs_config)
            .policy(ReportRequest::default().interval(Duration::from_millis(args.lrs_interval_ms)))
            .known_clusters(move |name: &str| {
                let cluster = TypeUrl::from(ResourceType::Cluster);
                known.groups().iter().any(|g| known.get(g, &cluster, name).is_some())
            }),
    );
    if args.rest_serve_secrets_without_tls {
        builder = builder.unauthenticated_secrets(UnauthenticatedSecrets::Serve);
    }
    builder.build()
}

/// Follows the configuration source from here on: the files (a reload thread) or etcd.
fn follow_source(
    args: &Args,
    files: Option<FollowedFiles>,
    cache: &SnapshotCache,
    names: &Arc<RwLock<Vec<String>>>,
    state: &Arc<Mutex<ConfigState>>,
) -> Result<(), String> {
    let Some(FollowedFiles { loader, loaded }) = files else {
        let max_lag = Duration::from_millis(args.max_lag_ms);
        let (cache, names, state) = (cache.clone(), names.clone(), state.clone());
        return etcd::spawn(&args.etcd, &args.prefix, max_lag, cache, names, state);
    };
    state.lock().unwrap_or_else(|e| e.into_inner()).files_parsed = loader.parsed_total();
    let quiet = Duration::from_millis(args.reload_quiet_ms);
    Reloader {
        loader,
        loaded,
        timing: ReloadTiming {
            quiet,
            settle_limit: Duration::from_millis(
                args.reload_settle_ms.max(args.reload_quiet_ms.saturating_mul(2)),
            ),
            poll: Duration::from_millis(args.reload_poll_ms.unwrap_or(250)),
            force_polling: args.reload_poll_ms.is_some(),
        },
        cache: cache.clone(),
        names: names.clone(),
        state: state.clone(),
    }
    .spawn()
    .map_err(|e| format!("cannot start the reload thread: {e}"))
}

/// Says where the server listens: a banner for people, one JSON line for log pipelines (which
/// read one object per line, so no free text on stdout).
fn announce(args: &Args, tls: bool, caps: &conn_caps::ConnectionCaps, state: &Mutex<ConfigState>) {
    if args.log_format == cli::LogFormat::Text {
        print_banner(args, tls, caps);
        return;
    }
    tracing::info!(
        grpc = %args.grpc_addr,
        http = %args.http_addr,
        admin = %args.admin_addr,
        tls,
        connections = %caps,
        config = %state.lock().unwrap_or_else(|e| e.into_inner()).path,
        "serving"
    );
}

/// Completes at SIGINT or SIGTERM once the open streams have ended with UNAVAILABLE (or the
/// grace period passed): connections close only then, so clients reconnect elsewhere at once.
async fn drain_on_signal(server: XdsServer) {
    wait_for_signal().await;
    tracing::info!("shutting down: open streams end with UNAVAILABLE");
    let left = server.drain().await;
    if left > 0 {
        tracing::warn!(streams = left, "shutdown grace passed with streams still open");
    }
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
