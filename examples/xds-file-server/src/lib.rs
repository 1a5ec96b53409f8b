//! The ready-to-run control plane: serves Envoy resources from YAML or JSON files over every xDS
//! variant, and reloads them when they change.
//!
//! The binary is [`run`] over the parsed [`cli::Args`]; the configuration format is [`config`].

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{ResourceType, TypeUrl};
use xds_server::{FileFormat, FileWriter, RequireNodeIdentity, ServerConfig, XdsServer};

mod admin;
mod banner;
pub mod cli;
pub mod config;
mod reload;

use admin::{ConfigState, http_router};
use banner::print_banner;
use cli::{Args, Format};
use config::DEFAULT_GROUP;
use reload::{ReloadTiming, Reloader, publish};

/// Runs the control plane until SIGINT or SIGTERM.
///
/// # Errors
///
/// Start-up failures: an unreadable or invalid initial configuration, a port that cannot be bound,
/// unreadable TLS files. Once serving, reload errors are reported, not returned.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    if args.config.as_os_str() == cli::DEFAULT_CONFIG && !args.config.exists() {
        return Err(format!(
            "cannot start: no --config given and no {} in the working directory {}; pass \
             --config FILE|DIR (the repository ships examples/xds-file-server/config/default.yaml)",
            cli::DEFAULT_CONFIG,
            std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default(),
        )
        .into());
    }
    let mut loader = config::Loader::new(&args.config, args.max_config_bytes);
    let loaded = config::fingerprint(&args.config);
    let initial = loader.load().map_err(|e| format!("cannot start: {}", e.into_config_error()))?;
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

    state.lock().unwrap_or_else(|e| e.into_inner()).files_parsed = loader.parsed_total();
    Reloader {
        loader,
        loaded,
        timing: ReloadTiming {
            quiet: Duration::from_millis(args.reload_quiet_ms),
            poll: Duration::from_millis(args.reload_poll_ms.unwrap_or(250)),
            force_polling: args.reload_poll_ms.is_some(),
        },
        cache: cache.clone(),
        names: group_names.clone(),
        state: state.clone(),
    }
    .spawn()
    .map_err(|e| format!("cannot start the reload thread: {e}"))?;
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
