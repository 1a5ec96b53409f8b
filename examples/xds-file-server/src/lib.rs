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
use xds_server::transport::{Incoming, TransportConfig, serve_http, tls_config};
use xds_server::{FileFormat, FileWriter, Limits, NodeIdentity, UnauthenticatedSecrets, XdsServer};

mod admin;
mod admin_access;
mod banner;
pub mod check;
pub mod cli;
pub mod config;
mod conn_caps;
pub mod etcd;
mod reload;

use admin::{ConfigDump, ConfigState, admin_router};
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
    let from_etcd = !args.etcd.is_empty();
    if !from_etcd && args.config.as_os_str() == cli::DEFAULT_CONFIG && !args.config.exists() {
        return Err(format!(
            "cannot start: no --config given and no {} in the working directory {}; pass \
             --config FILE|DIR (the repository ships examples/xds-file-server/config/default.yaml)",
            cli::DEFAULT_CONFIG,
            std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default(),
        )
        .into());
    }
    // Before anything opens a descriptor that counts: caps that do not fit the limit stop here.
    let caps = conn_caps::plan(&args, conn_caps::open_file_limit())
        .map_err(|e| format!("cannot start: {e}"))?;
    // From etcd, nothing is served (and /ready says so) until the source's first valid read.
    let files = if from_etcd {
        None
    } else {
        let mut loader = config::Loader::new(&args.config, args.max_config_bytes);
        let loaded = config::fingerprint(&args.config);
        let initial =
            loader.load().map_err(|e| format!("cannot start: {}", e.into_config_error()))?;
        Some((loader, loaded, initial))
    };
    let initial_names = files
        .as_ref()
        .map(|(_, _, initial)| initial.groups.keys().cloned().collect::<Vec<_>>())
        .unwrap_or_default();
    let group_names = Arc::new(RwLock::new(initial_names));
    let names = group_names.clone();
    // A node is served the group named by its id, else by its cluster, else the default group.
    // The authorization policy groups with the same function (finding 3).
    //
    // Under --verify-node-id a cluster selects only a --shared-group: the cluster is the client's
    // claim, not its identity, and groups come and go with reloads. A stream admitted while a
    // cluster named no group would otherwise be moved by `regroup` into that group once it
    // appears, without the policy being asked again.
    let cluster_groups = args.verify_node_id.then(|| args.shared_group.clone());
    let grouping = move |node: &Node| {
        let names = names.read().unwrap_or_else(|e| e.into_inner());
        let cluster_allowed =
            |c: &String| cluster_groups.as_ref().is_none_or(|shared| shared.contains(c));
        [&node.id, &node.cluster]
            .into_iter()
            .enumerate()
            .find(|(i, k)| !k.is_empty() && names.contains(k) && (*i == 0 || cluster_allowed(k)))
            .map(|(_, k)| k.clone())
            .unwrap_or_else(|| DEFAULT_GROUP.to_owned())
    };
    let cache = SnapshotCache::new(grouping.clone());
    let grouping_for_dump = grouping.clone();
    let state = Arc::new(Mutex::new(ConfigState {
        path: if from_etcd {
            etcd::describe(&args.etcd, &args.prefix)
        } else {
            args.config.display().to_string()
        },
        ready_when_stale: args.ready_when_stale,
        ..Default::default()
    }));
    let files = files.map(|(loader, loaded, initial)| {
        publish(&cache, initial, &group_names, &state);
        (loader, loaded)
    });

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
    // Decided before anything is served: a guarded admin port also closes CSDS elsewhere.
    let admin_access = admin_access::admin_access(
        args.admin_addr,
        args.admin_token_file.as_deref(),
        args.admin_client_ca.as_deref(),
        args.tls_cert.is_some() && args.tls_key.is_some(),
    )
    .map_err(|e| format!("cannot start: {e}"))?;
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
    let server = builder.build();

    // Every port listens before anything is served or written: a second instance that cannot
    // bind stops here, without touching --write-dir (finding 8).
    let bind = |addr: std::net::SocketAddr| async move {
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))
    };
    let grpc_listener = bind(args.grpc_addr).await?;
    let http_listener = bind(args.http_addr).await?;
    let admin_listener = bind(args.admin_addr).await?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls_config(cert, key, args.client_ca.as_deref())?),
        _ => None,
    };
    // TLS on the admin port: with client certificates from --admin-client-ca, or to carry a
    // bearer token off loopback (admin_access refused to start without a certificate then).
    let admin_tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) if admin_access.needs_tls(args.admin_addr) => {
            Some(tls_config(cert, key, args.admin_client_ca.as_deref())?)
        }
        _ => None,
    };
    // A request's headers get as long as a connection's first bytes (HTTP ports).
    let transport = TransportConfig::default()
        .handshake_timeout(Duration::from_secs(args.handshake_timeout_s))
        .header_read_timeout(Duration::from_secs(args.handshake_timeout_s));
    // Only the gRPC port's connections age: REST requests are short-lived.
    let grpc_transport = caps.grpc.apply(
        transport
            .clone()
            .max_connection_age(
                Some(Duration::from_secs(args.max_connection_age_s)).filter(|d| !d.is_zero()),
            )
            .max_connection_age_jitter(args.max_connection_age_jitter.clamp(0.0, 1.0)),
    );
    let rest_transport = caps.rest.apply(transport.clone());

    match files {
        Some((loader, loaded)) => {
            state.lock().unwrap_or_else(|e| e.into_inner()).files_parsed = loader.parsed_total();
            Reloader {
                loader,
                loaded,
                timing: ReloadTiming {
                    quiet: Duration::from_millis(args.reload_quiet_ms),
                    settle_limit: Duration::from_millis(
                        args.reload_settle_ms.max(args.reload_quiet_ms.saturating_mul(2)),
                    ),
                    poll: Duration::from_millis(args.reload_poll_ms.unwrap_or(250)),
                    force_polling: args.reload_poll_ms.is_some(),
                },
                cache: cache.clone(),
                names: group_names.clone(),
                state: state.clone(),
            }
            .spawn()
            .map_err(|e| format!("cannot start the reload thread: {e}"))?;
        }
        None => etcd::spawn(
            &args.etcd,
            &args.prefix,
            Duration::from_millis(args.max_lag_ms),
            cache.clone(),
            group_names.clone(),
            state.clone(),
        )?,
    }
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

    let dump = ConfigDump { cache: cache.clone(), grouping: Arc::new(grouping_for_dump) };
    let mut admin = admin_router(&server, state.clone(), dump);
    if let admin_access::AdminAccess::Token(token) = admin_access {
        admin = admin_access::require_token(admin, token);
    }
    // The admin port has the xDS ports' guards and an idle timeout: its requests are short, so
    // idle or slow connections to it are closed.
    let admin_transport = caps
        .admin
        .apply(transport.idle_timeout(Some(Duration::from_secs(args.admin_idle_timeout_s.max(1)))));
    match admin_tls {
        Some(tls) => tokio::spawn(serve_http(
            Incoming::tls(admin_listener, admin_transport, tls),
            admin,
            server.shutting_down(),
        )),
        None => tokio::spawn(serve_http(
            Incoming::plain(admin_listener, admin_transport),
            admin,
            server.shutting_down(),
        )),
    };
    let rest = server.discovery_router();
    match &tls {
        Some(tls) => tokio::spawn(serve_http(
            Incoming::tls(http_listener, rest_transport, tls.clone()),
            rest,
            server.shutting_down(),
        )),
        None => tokio::spawn(serve_http(
            Incoming::plain(http_listener, rest_transport),
            rest,
            server.shutting_down(),
        )),
    };
    if args.log_format == cli::LogFormat::Text {
        print_banner(&args, tls.is_some(), &caps);
    } else {
        // A log pipeline reads one JSON object per line: no free text on stdout.
        tracing::info!(
            grpc = %args.grpc_addr,
            http = %args.http_addr,
            admin = %args.admin_addr,
            tls = tls.is_some(),
            connections = %caps,
            config = %state.lock().unwrap_or_else(|e| e.into_inner()).path,
            "serving"
        );
    }

    let stopping = server.clone();
    let shutdown = async move {
        wait_for_signal().await;
        tracing::info!("shutting down: open streams end with UNAVAILABLE");
        // Connections close only once streams have delivered their UNAVAILABLE (or the grace
        // period passed), so clients reconnect elsewhere at once.
        let left = stopping.drain().await;
        if left > 0 {
            tracing::warn!(streams = left, "shutdown grace passed with streams still open");
        }
    };
    // HTTP/2 windows and frame size stay hyper's (1 MiB stream and connection windows): they
    // bound what a client sends, which `max_request_bytes` bounds anyway; what the server sends
    // is paced by the client's windows (docs/benchmarks.md, "Write path and join gate").
    let grpc = tonic::transport::Server::builder()
        .http2_keepalive_interval(
            Some(Duration::from_secs(args.keepalive_interval_s)).filter(|d| !d.is_zero()),
        )
        .http2_keepalive_timeout(Some(Duration::from_secs(args.keepalive_timeout_s)))
        .max_concurrent_streams(Some(args.max_concurrent_streams))
        .add_routes(server.routes());
    match tls {
        Some(tls) => {
            let incoming = Incoming::tls(grpc_listener, grpc_transport, tls);
            grpc.serve_with_incoming_shutdown(incoming, shutdown).await?
        }
        None => {
            let incoming = Incoming::plain(grpc_listener, grpc_transport);
            grpc.serve_with_incoming_shutdown(incoming, shutdown).await?
        }
    }
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
