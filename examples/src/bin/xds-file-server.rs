//! The ready-to-run control plane: serves Envoy resources from YAML or JSON files over every xDS
//! variant, and reloads them when they change.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::routing::get;
use clap::{Parser, ValueEnum};
use examples::config::{self, DEFAULT_GROUP};
use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use xds_proto::prost;
use xds_proto::{ResourceType, TypeUrl};
use xds_server::{FileFormat, FileWriter, RequireNodeIdentity, ServerConfig, XdsServer};

/// Serve Envoy resources from YAML/JSON files over xDS (ADS and per-type, SotW and delta),
/// REST-JSON, CSDS; reload on change.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// A YAML or JSON file, or a directory of them.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/config/default.yaml"))]
    config: PathBuf,
    /// Where gRPC xDS (ADS, per-type services, CSDS) listens.
    #[arg(long, default_value = "127.0.0.1:18000")]
    grpc_addr: SocketAddr,
    /// Where REST-JSON xDS, /healthz, /metrics and /status listen.
    #[arg(long, default_value = "127.0.0.1:18001")]
    http_addr: SocketAddr,
    /// PEM certificate chain for TLS on the gRPC port.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for TLS.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// PEM CA bundle: require client certificates signed by it (mTLS).
    #[arg(long, requires = "tls_cert")]
    client_ca: Option<PathBuf>,
    /// Refuse a client whose node id its certificate does not name (DNS/URI SAN, or the last
    /// segment of a SPIFFE id). Needs --client-ca.
    #[arg(long, requires = "client_ca")]
    verify_node_id: bool,
    /// Also write the default group's resources as DiscoveryResponse files here (Envoy
    /// filesystem subscriptions), replaced atomically on every change.
    #[arg(long)]
    write_dir: Option<PathBuf>,
    /// The format of the files in --write-dir.
    #[arg(long, value_enum, default_value = "yaml")]
    write_format: Format,
    /// Serve clients whose first request carries no node.
    #[arg(long)]
    allow_anonymous: bool,
    /// Refuse a configuration file larger than this many bytes.
    #[arg(long, default_value_t = config::MAX_FILE_BYTES)]
    max_config_bytes: u64,
    /// Log filter (e.g. `info`, `debug`, `xds_server=debug`).
    #[arg(long, default_value = "info")]
    log: String,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Yaml,
    Json,
    Pb,
}

/// What /status shows about the configuration.
#[derive(Default, serde::Serialize)]
struct ConfigState {
    path: String,
    loads: u64,
    groups: Vec<String>,
    error: Option<String>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&args.log)?)
        .init();

    let initial =
        config::load_with(&args.config, &config::Config::default(), args.max_config_bytes)
            .map_err(|e| format!("cannot start: {e}"))?;
    let group_names = Arc::new(RwLock::new(initial.groups.keys().cloned().collect::<Vec<_>>()));
    let names = group_names.clone();
    // A node is served the group named by its id, else by its cluster, else the default group.
    let cache = SnapshotCache::new(move |node: &Node| {
        let names = names.read().unwrap_or_else(|e| e.into_inner());
        [&node.id, &node.cluster]
            .into_iter()
            .find(|k| !k.is_empty() && names.contains(k))
            .cloned()
            .unwrap_or_else(|| DEFAULT_GROUP.to_owned())
    });
    let state = Arc::new(Mutex::new(ConfigState {
        path: args.config.display().to_string(),
        ..Default::default()
    }));
    publish(&cache, initial, &group_names, &state);

    let mut builder = XdsServer::builder(cache.clone())
        .config(ServerConfig { allow_anonymous: args.allow_anonymous, ..Default::default() });
    if args.verify_node_id {
        builder = builder.callbacks(RequireNodeIdentity);
    }
    let server = builder.build();

    let reload = watch_config(
        args.config.clone(),
        args.max_config_bytes,
        cache.clone(),
        group_names.clone(),
        state.clone(),
    );
    tokio::spawn(reload);
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

    // Both ports listen before either serves: once /healthz answers, gRPC clients can connect.
    let grpc_incoming = tonic::transport::server::TcpIncoming::bind(args.grpc_addr)
        .map_err(|e| format!("cannot listen on {}: {e}", args.grpc_addr))?
        .with_nodelay(Some(true));
    let http = http_router(&server, state.clone());
    let listener = tokio::net::TcpListener::bind(args.http_addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.http_addr))?;
    let http_shutdown = server.shutting_down();
    tokio::spawn(async move {
        let served = axum::serve(listener, http).with_graceful_shutdown(http_shutdown).await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the HTTP server failed");
        }
    });

    let mut grpc = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)));
    let tls = args.tls_cert.is_some();
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let mut config = ServerTlsConfig::new()
            .identity(Identity::from_pem(std::fs::read(cert)?, std::fs::read(key)?));
        if let Some(ca) = &args.client_ca {
            config = config.client_ca_root(Certificate::from_pem(std::fs::read(ca)?));
        }
        grpc = grpc.tls_config(config)?;
    }
    print_banner(&args, tls);

    let stopping = server.clone();
    let grace = server.config().shutdown_grace;
    let shutdown = async move {
        wait_for_signal().await;
        tracing::info!("shutting down: open streams end with UNAVAILABLE");
        stopping.shutdown();
        // Let streams deliver their UNAVAILABLE before connections are closed.
        tokio::time::sleep(Duration::from_millis(200).min(grace)).await;
    };
    grpc.add_routes(server.routes()).serve_with_incoming_shutdown(grpc_incoming, shutdown).await?;
    Ok(())
}

/// Serves a loaded configuration: one snapshot per group; groups gone from the file are cleared.
fn publish(
    cache: &SnapshotCache,
    config: config::Config,
    names: &RwLock<Vec<String>>,
    state: &Mutex<ConfigState>,
) {
    let groups: Vec<String> = config.groups.keys().cloned().collect();
    for old in cache.groups() {
        if !config.groups.contains_key(&old) && cache.snapshot(&old).is_some() {
            cache.clear_snapshot(&old);
        }
    }
    *names.write().unwrap_or_else(|e| e.into_inner()) = groups.clone();
    let mut changed = 0;
    for (group, snapshot) in config.groups {
        changed += cache.set_snapshot(&group, snapshot);
    }
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    state.loads += 1;
    state.groups = groups;
    state.error = None;
    tracing::info!(changed, "configuration published");
}

/// Polls the configuration for changes (4 times a second) and publishes each good version; a
/// bad one is logged and shown in /status while the last good one keeps serving.
async fn watch_config(
    path: PathBuf,
    max_bytes: u64,
    cache: SnapshotCache,
    names: Arc<RwLock<Vec<String>>>,
    state: Arc<Mutex<ConfigState>>,
) {
    let mut seen = config::fingerprint(&path);
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = config::fingerprint(&path);
        if now == seen {
            continue;
        }
        seen = now;
        // What is served now: unchanged resources are reused, not held twice.
        let previous = config::Config {
            groups: cache
                .groups()
                .into_iter()
                .filter_map(|g| cache.snapshot(&g).map(|s| (g, s)))
                .collect(),
        };
        match load_blocking(&path, previous, max_bytes).await {
            Ok(config) => publish(&cache, config, &names, &state),
            Err(e) => {
                tracing::error!(error = %e, "configuration rejected; the last good one keeps serving");
                state.lock().unwrap_or_else(|e| e.into_inner()).error = Some(e.to_string());
            }
        }
    }
}

async fn load_blocking(
    path: &Path,
    previous: config::Config,
    max_bytes: u64,
) -> Result<config::Config, String> {
    let path = path.to_owned();
    match tokio::task::spawn_blocking(move || config::load_with(&path, &previous, max_bytes)).await
    {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(format!("the loader failed: {e}")),
    }
}

fn http_router(server: &XdsServer, state: Arc<Mutex<ConfigState>>) -> axum::Router {
    let metrics = server.clone();
    let status = server.clone();
    server
        .rest_router()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(move || {
            let text = metrics.metrics().render();
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

fn print_banner(args: &Args, tls: bool) {
    let scheme = if tls { "https" } else { "http" };
    let (host, port) = (args.grpc_addr.ip(), args.grpc_addr.port());
    println!(
        r#"xds-file-server: serving {config}
  gRPC xDS (ADS + per-type, SotW + delta, CSDS): {scheme}://{grpc}
  HTTP: REST-JSON http://{http}/v3/discovery:clusters, /healthz, /metrics, /status

Point Envoy at it (bootstrap):
  node: {{ id: envoy-1, cluster: demo }}
  dynamic_resources:
    ads_config: {{ api_type: GRPC, transport_api_version: V3, grpc_services: [{{ envoy_grpc: {{ cluster_name: xds }} }}] }}
    cds_config: {{ ads: {{}}, resource_api_version: V3 }}
    lds_config: {{ ads: {{}}, resource_api_version: V3 }}
  static_resources:
    clusters:
      - name: xds
        type: STATIC
        typed_extension_protocol_options:
          envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
            "@type": {protocol_options}
            explicit_http_config: {{ http2_protocol_options: {{}} }}
        load_assignment:
          cluster_name: xds
          endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: {host}, port_value: {port} }} }} }} }}] }}]

Point a proxyless gRPC client at it (GRPC_XDS_BOOTSTRAP_CONFIG), then dial xds:///demo-service:
  {{"xds_servers": [{{"server_uri": "{host}:{port}", "channel_creds": [{{"type": "insecure"}}], "server_features": ["xds_v3"]}}],
   "node": {{"id": "grpc-client-1", "cluster": "grpc-clients"}}}}
"#,
        config = args.config.display(),
        protocol_options = <HttpProtocolOptions as prost::Name>::type_url(),
        grpc = args.grpc_addr,
        http = args.http_addr,
    );
}
