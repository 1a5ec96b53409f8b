//! A control plane in bench mode: N EDS clusters (`cluster-{i}`, endpoints over ADS) with M
//! endpoints each, one listener and one route, served to every node; `GET /bench/update?i=K`
//! moves cluster K's endpoints to a new port and answers it once published; `GET /bench/stats`
//! `GET /bench/burst?n=N&ms=T` updates clusters `0..N`, one at a time through the same path,
//! spread evenly over T milliseconds (an inventory changing N resources within T ms), and answers
//! `cluster port published_us upsert_us` lines once the last one is published; `GET /bench/stats`
//! answers the server's own figures as JSON (`{"tasks":N,"streams":N,"rss_bytes":N,"cpu_s":F}`:
//! tasks alive in its runtime, open xDS streams, resident memory, CPU seconds), for the
//! reliability runs of `xds-load` (churn, stuck clients, soak).
//!
//! Each type lives in its own `LinearCache` (behind a `MuxCache`): one ClusterLoadAssignment
//! update encodes that one resource and costs O(log N) in the cache, whatever N. (A
//! `SnapshotCache` would copy the snapshot's map of N resources and compare them on every update:
//! O(N) per update.)
//!
//! ```text
//! xds-bench-server --clusters 10000 --endpoints 3
//! curl 'http://127.0.0.1:18001/bench/update?i=42'   # -> 10000
//! curl 'http://127.0.0.1:18001/bench/stats'          # -> {"tasks":7,"streams":0,...}
//! ```

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use clap::Parser;
use tonic::transport::server::TcpIncoming;
use xds_bench::{resources, sys};
use xds_cache::{LinearCache, MuxCache};
use xds_proto::builders::{http_listener, route_to_cluster};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_proto::pb::envoy::config::listener::v3::Listener;
use xds_proto::pb::envoy::config::route::v3::RouteConfiguration;
use xds_proto::{EncodedResource, ResourceType};
use xds_server::{ServerConfig, XdsServer};

/// Serve N EDS clusters with M endpoints each to every node, and update them on request.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// How many clusters (each with its own ClusterLoadAssignment).
    #[arg(long, default_value_t = 10_000)]
    clusters: u32,
    /// How many endpoints per cluster.
    #[arg(long, default_value_t = 3)]
    endpoints: u32,
    /// Where gRPC xDS listens.
    #[arg(long, default_value = "127.0.0.1:18000")]
    grpc_addr: SocketAddr,
    /// Where /bench/update, /bench/stats, /healthz, /metrics and REST-JSON listen.
    #[arg(long, default_value = "127.0.0.1:18001")]
    http_addr: SocketAddr,
    /// Seconds between HTTP/2 keepalive pings to each client, each answered within 10 s as
    /// `xds-file-server` requires (0: none). Off by default: a
    /// loopback benchmark has no dead peers to find, and during a storm that saturates the CPU
    /// (5,000 clients joining at once, 10,000 clusters each) a connection's task is polled too
    /// late to read the PONG before its timeout, and the server drops healthy clients.
    #[arg(long, default_value_t = 0)]
    keepalive_s: u64,
    /// The join gate: streams joining at once, the others waiting in arrival order (0: no gate;
    /// default: the server's, twice the cores). See `ServerConfig::join_permits`.
    #[arg(long)]
    join_permits: Option<usize>,
    /// Log filter.
    #[arg(long, default_value = "warn")]
    log: String,
}

/// What the update handler needs.
struct Bench {
    cla: LinearCache,
    clusters: u32,
    endpoints: u32,
    updates: AtomicU32,
}

impl Bench {
    /// Cluster `i`'s endpoints, all on `port`.
    fn cla(&self, i: u32, port: u32) -> ClusterLoadAssignment {
        resources::cla(i, self.endpoints, port)
    }
}

/// The query of `/bench/update`.
#[derive(serde::Deserialize)]
struct UpdateQuery {
    i: u32,
}

/// The query of `/bench/burst`: `n` single-cluster updates spread over `ms` milliseconds.
#[derive(serde::Deserialize)]
struct BurstQuery {
    n: u32,
    ms: u64,
}

/// The query of `/status`: one node, or every stream.
#[derive(serde::Deserialize)]
struct StatusQuery {
    node: Option<String>,
}

/// Moves cluster `i`'s endpoints to a new port; answers the port once the cache has it.
async fn update(
    State(bench): State<Arc<Bench>>,
    Query(q): Query<UpdateQuery>,
) -> (StatusCode, String) {
    if q.i >= bench.clusters {
        return (StatusCode::NOT_FOUND, format!("no cluster {} (of {})\n", q.i, bench.clusters));
    }
    let n = bench.updates.fetch_add(1, Ordering::Relaxed);
    let port = resources::update_port(n);
    match bench.cla.upsert(&bench.cla(q.i, port)) {
        Ok(_) => (StatusCode::OK, format!("{port}\n")),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

/// Updates clusters `0..n` one at a time, each through the path of [`update`], the `j`-th at
/// `j * ms / n` after the start; answers a `cluster port published_us upsert_us` line per update
/// once all are published (when it was published after the start, and how long the cache took),
/// as a loaded runtime may run this task late and stretch the burst.
async fn burst(
    State(bench): State<Arc<Bench>>,
    Query(q): Query<BurstQuery>,
) -> (StatusCode, String) {
    if q.n == 0 || q.n > bench.clusters {
        return (StatusCode::NOT_FOUND, format!("n must be 1..={}\n", bench.clusters));
    }
    // The ports are reserved at once, so that updates triggered meanwhile get other ones.
    let first = bench.updates.fetch_add(q.n, Ordering::Relaxed);
    let start = tokio::time::Instant::now();
    let spread = Duration::from_millis(q.ms);
    let mut answer = String::with_capacity(q.n as usize * 12);
    for j in 0..q.n {
        // Scheduled from the start, not from the previous update: a slow upsert does not
        // stretch the burst.
        tokio::time::sleep_until(start + spread * j / q.n).await;
        let port = resources::update_port(first.wrapping_add(j));
        let before = tokio::time::Instant::now();
        if let Err(e) = bench.cla.upsert(&bench.cla(j, port)) {
            return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"));
        }
        let done = tokio::time::Instant::now();
        let _ = writeln!(
            answer,
            "{j} {port} {} {}",
            (done - start).as_micros(),
            (done - before).as_micros()
        );
    }
    (StatusCode::OK, answer)
}

/// `/bench/stats`: the live tasks of this runtime, the open xDS streams, RSS and CPU time.
fn stats(server: &XdsServer) -> serde_json::Value {
    let tasks = tokio::runtime::Handle::current().metrics().num_alive_tasks();
    let me = sys::sample("self").unwrap_or_default();
    serde_json::json!({
        "tasks": tasks,
        "streams": server.status().len(),
        "rss_bytes": me.rss_kib * 1024,
        "cpu_s": me.cpu_s,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&args.log)?)
        .init();
    let fd_limit = sys::raise_fd_limit()?;

    let clusters = LinearCache::of::<Cluster>();
    let cla = LinearCache::of::<ClusterLoadAssignment>();
    let listeners = LinearCache::of::<Listener>();
    let routes = LinearCache::of::<RouteConfiguration>();
    let bench = Arc::new(Bench {
        cla: cla.clone(),
        clusters: args.clusters,
        endpoints: args.endpoints,
        updates: AtomicU32::new(0),
    });
    let encoded = |r: Result<EncodedResource, _>| r.map_err(|e| format!("cannot encode: {e}"));
    clusters.set_all(
        (0..args.clusters)
            .map(|i| encoded(EncodedResource::new(&resources::cluster(i))))
            .collect::<Result<Vec<_>, _>>()?,
    )?;
    cla.set_all(
        (0..args.clusters)
            .map(|i| encoded(EncodedResource::new(&bench.cla(i, resources::INITIAL_PORT))))
            .collect::<Result<Vec<_>, _>>()?,
    )?;
    // A listener on port 10000 whose routes come from RDS `route-0`: everything to `cluster-0`.
    listeners.upsert(&http_listener("listener-0", "0.0.0.0", 10000, "route-0"))?;
    routes.upsert(&route_to_cluster("route-0", "*", "cluster-0"))?;

    let mux = MuxCache::new()
        .route(ResourceType::Cluster, clusters)
        .route(ResourceType::ClusterLoadAssignment, cla)
        .route(ResourceType::Listener, listeners)
        .route(ResourceType::RouteConfiguration, routes);
    let mut config = ServerConfig::default();
    config.join_permits = args.join_permits.unwrap_or(config.join_permits);
    let server = XdsServer::builder(mux).config(config).build();

    let metrics = server.clone();
    let status = server.clone();
    let observed = server.clone();
    let http =
        server
            .rest_router()
            .route("/healthz", get(|| async { "ok\n" }))
            .route(
                "/metrics",
                get(move || {
                    let text = metrics.metrics().render();
                    async move {
                        ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
                    }
                }),
            )
            .route(
                "/status",
                get(move |Query(q): Query<StatusQuery>| {
                    let body = match q.node {
                        Some(node) => serde_json::to_value(status.status().node(&node)),
                        None => Ok(status.status().to_json()),
                    };
                    async move { axum::Json(body.unwrap_or_default()) }
                }),
            )
            .route("/bench/update", get(update).with_state(bench.clone()))
            .route("/bench/burst", get(burst).with_state(bench))
            .route(
                "/bench/stats",
                get(move || {
                    let body = stats(&observed);
                    async move { axum::Json(body) }
                }),
            );
    let http_socket = tokio::net::TcpListener::bind(args.http_addr).await?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(http_socket, http).await {
            eprintln!("the HTTP server failed: {e}");
        }
    });

    // A deep accept backlog: thousands of clients connect at once in a storm.
    let socket = match args.grpc_addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(args.grpc_addr)?;
    let incoming = TcpIncoming::from(socket.listen(8192)?).with_nodelay(Some(true));

    println!(
        "xds-bench-server pid {}: {} clusters x {} endpoints, 1 listener, 1 route; gRPC {}, HTTP {} \
         (/bench/update?i=K, /bench/burst?n=N&ms=T, /bench/stats, /healthz, /metrics, /status?node=ID); open-file limit \
         {fd_limit}",
        std::process::id(),
        args.clusters,
        args.endpoints,
        args.grpc_addr,
        args.http_addr,
    );
    let keepalive = (args.keepalive_s > 0).then(|| Duration::from_secs(args.keepalive_s));
    // HTTP/2 windows and frame size stay hyper's (1 MiB stream and connection windows, 16 KiB
    // frames): a server's settings bound what the *client* sends (its largest request, 10,000
    // EDS names, is ~140 KB), while what the server sends is bounded by the client's windows and
    // frame size (docs/benchmarks.md, "Write path and join gate").
    tonic::transport::Server::builder()
        .http2_keepalive_interval(keepalive)
        .http2_keepalive_timeout(keepalive.map(|_| Duration::from_secs(10)))
        .add_routes(server.routes())
        .serve_with_incoming_shutdown(incoming, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
