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
//! `--per-node-groups N` serves instead what most snapshot-per-node control planes serve: a
//! `SnapshotCache` with one group per node id, and a snapshot set for each of the node ids
//! `load-0` .. `load-{N-1}` (the ids `xds-load` gives its clients; other nodes wait). The first
//! `--node-share` of the clusters (90 % by default) are the same resources in every group, each
//! encoded once and shared (the snapshots are derived from one builder); the others carry each
//! node's own content (`resources::node_cluster`, `resources::node_cla`), encoded per node.
//! `/bench/update?i=K` (and each change of `/bench/burst`) then sets every group's snapshot,
//! derived from its current one with cluster K's new endpoints: one shared resource when K is
//! shared, the node's own otherwise; it answers once the last group is set.
//!
//! ```text
//! xds-bench-server --clusters 10000 --endpoints 3
//! xds-bench-server --clusters 10000 --per-node-groups 1000 --node-share 0.9
//! curl 'http://127.0.0.1:18001/bench/update?i=42'   # -> 10000
//! curl 'http://127.0.0.1:18001/bench/stats'          # -> {"tasks":7,"streams":0,...}
//! ```

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use clap::Parser;
use tonic::transport::server::TcpIncoming;
use xds_bench::{resources, sys};
use xds_cache::{Cache, LinearCache, MuxCache, Snapshot, SnapshotCache};
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
    /// Per-node snapshots: serve from a `SnapshotCache` with one group per node id, with a
    /// snapshot set for each of the N node ids `load-0` .. `load-{N-1}`, those of `xds-load
    /// --clients N` (0: one `LinearCache` per type, every node served the same resources).
    #[arg(long, default_value_t = 0, value_name = "N")]
    per_node_groups: u32,
    /// With --per-node-groups: the fraction of the clusters (and their endpoints) that every
    /// group shares, clusters `0..share × C` (each encoded once, the same resource in every
    /// snapshot); the others are the node's own (encoded per node).
    #[arg(long, default_value_t = 0.9, requires = "per_node_groups")]
    node_share: f64,
    /// How many of its latest events each stream keeps for its status (the server's default:
    /// 16; 0 keeps none). See `ServerConfig::stream_events`.
    #[arg(long)]
    stream_events: Option<usize>,
    /// Log filter.
    #[arg(long, default_value = "warn")]
    log: String,
}

/// Where the resources live, and so what an update does.
enum Store {
    /// One `LinearCache` of ClusterLoadAssignments, served to every node.
    Linear(LinearCache),
    /// A snapshot per node.
    PerNode(PerNode),
}

/// `--per-node-groups`: a `SnapshotCache` grouped by node id, a snapshot per node.
struct PerNode {
    cache: SnapshotCache,
    /// The groups (node ids) given a snapshot, in order.
    nodes: Vec<String>,
    /// Clusters `0..shared` are the same resources in every group.
    shared: u32,
    /// Held while the groups are updated: two updates interleaved group by group would each
    /// derive from a snapshot the other is about to replace, and one of them would be lost.
    updating: Mutex<()>,
}

/// What the update handler needs.
struct Bench {
    store: Store,
    clusters: u32,
    endpoints: u32,
    updates: AtomicU32,
}

impl Bench {
    /// Cluster `i`'s endpoints, all on `port`.
    fn cla(&self, i: u32, port: u32) -> ClusterLoadAssignment {
        resources::cla(i, self.endpoints, port)
    }

    /// Moves cluster `i`'s endpoints to `port`; returns once every client's view has it.
    async fn publish(self: &Arc<Self>, i: u32, port: u32) -> Result<(), String> {
        match &self.store {
            Store::Linear(cla) => {
                cla.upsert(&self.cla(i, port)).map(drop).map_err(|e| e.to_string())
            }
            // Setting a thousand snapshots takes a while: off the runtime's workers, which serve
            // the streams meanwhile.
            Store::PerNode(_) => {
                let bench = self.clone();
                tokio::task::spawn_blocking(move || bench.publish_per_node(i, port))
                    .await
                    .map_err(|e| format!("the update task failed: {e}"))?
            }
        }
    }

    /// [`publish`](Self::publish) with a snapshot per node: each group's snapshot derived from
    /// its current one with cluster `i`'s new endpoints (shared: one resource encoded once for
    /// every group; the node's own: encoded per group), as an application serving a snapshot
    /// per node must do for one change.
    fn publish_per_node(&self, i: u32, port: u32) -> Result<(), String> {
        let Store::PerNode(p) = &self.store else { return Err("not per node".into()) };
        let encoded = |cla: &ClusterLoadAssignment| {
            EncodedResource::new(cla).map_err(|e| format!("cannot encode: {e}"))
        };
        let shared = if i < p.shared { Some(encoded(&self.cla(i, port))?) } else { None };
        let _updating = p.updating.lock().unwrap_or_else(PoisonError::into_inner);
        for node in &p.nodes {
            let Some(current) = p.cache.snapshot(node) else { continue };
            let resource = match &shared {
                Some(r) => r.clone(),
                None => encoded(&resources::node_cla(i, self.endpoints, port, node))?,
            };
            let mut next = current.to_builder();
            next.add_encoded(resource);
            // Derived from a checked snapshot and only adding: `build` checks this one resource
            // and copies only the path to it, so an update costs the same whatever the group holds.
            let next = next.build().map_err(|e| e.to_string())?;
            p.cache.set_snapshot(node, next);
        }
        Ok(())
    }
}

/// The snapshot of each of `nodes` groups (`load-{n}`): clusters `0..shared` and their endpoints
/// the same resources in every group (one snapshot, checked once, from which each node's is
/// derived: its maps and resources stay shared but for the paths to a node's own), the others
/// each node's own.
fn per_node(
    clusters: u32,
    endpoints: u32,
    nodes: u32,
    shared: u32,
) -> Result<PerNode, Box<dyn std::error::Error>> {
    let cache = SnapshotCache::by_node_id();
    let mut base = Snapshot::builder();
    for i in 0..shared {
        base.add(&resources::cluster(i))?;
        base.add(&resources::cla(i, endpoints, resources::INITIAL_PORT))?;
    }
    base.add(&http_listener("listener-0", "0.0.0.0", 10000, "route-0"))?;
    base.add(&route_to_cluster("route-0", "*", "cluster-0"))?;
    let base = base.build()?;
    let nodes: Vec<String> = (0..nodes).map(|n| format!("load-{n}")).collect();
    for node in &nodes {
        let mut snapshot = base.to_builder();
        for i in shared..clusters {
            snapshot.add(&resources::node_cluster(i, node))?;
            snapshot.add(&resources::node_cla(i, endpoints, resources::INITIAL_PORT, node))?;
        }
        cache.set_snapshot(node, snapshot.build()?);
    }
    Ok(PerNode { cache, nodes, shared, updating: Mutex::new(()) })
}

/// The xDS server of `cache`, with `--join-permits` and `--stream-events`.
fn serve(cache: impl Cache, args: &Args) -> XdsServer {
    let mut config = ServerConfig::default();
    config.join_permits = args.join_permits.unwrap_or(config.join_permits);
    config.stream_events = args.stream_events.unwrap_or(config.stream_events);
    XdsServer::builder(cache).config(config).build()
}

/// The resources of the default mode: each type in its own `LinearCache` behind a `MuxCache`.
fn linear(
    clusters: u32,
    endpoints: u32,
) -> Result<(MuxCache, LinearCache), Box<dyn std::error::Error>> {
    let cds = LinearCache::of::<Cluster>();
    let cla = LinearCache::of::<ClusterLoadAssignment>();
    let listeners = LinearCache::of::<Listener>();
    let routes = LinearCache::of::<RouteConfiguration>();
    let encoded = |r: Result<EncodedResource, _>| r.map_err(|e| format!("cannot encode: {e}"));
    cds.set_all(
        (0..clusters)
            .map(|i| encoded(EncodedResource::new(&resources::cluster(i))))
            .collect::<Result<Vec<_>, _>>()?,
    )?;
    cla.set_all(
        (0..clusters)
            .map(|i| {
                encoded(EncodedResource::new(&resources::cla(
                    i,
                    endpoints,
                    resources::INITIAL_PORT,
                )))
            })
            .collect::<Result<Vec<_>, _>>()?,
    )?;
    // A listener on port 10000 whose routes come from RDS `route-0`: everything to `cluster-0`.
    listeners.upsert(&http_listener("listener-0", "0.0.0.0", 10000, "route-0"))?;
    routes.upsert(&route_to_cluster("route-0", "*", "cluster-0"))?;
    let mux = MuxCache::new()
        .route(ResourceType::Cluster, cds)
        .route(ResourceType::ClusterLoadAssignment, cla.clone())
        .route(ResourceType::Listener, listeners)
        .route(ResourceType::RouteConfiguration, routes);
    Ok((mux, cla))
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
    match bench.publish(q.i, port).await {
        Ok(()) => (StatusCode::OK, format!("{port}\n")),
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
        if let Err(e) = bench.publish(j, port).await {
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

    if !(0.0..=1.0).contains(&args.node_share) {
        return Err(format!("--node-share must be within 0..=1, not {}", args.node_share).into());
    }
    let started = Instant::now();
    let (server, store, layout) = if args.per_node_groups > 0 {
        // Rounded down: with 0.9 of 10,000, clusters 0..9000 are shared.
        let shared = (f64::from(args.clusters) * args.node_share) as u32;
        let p = per_node(args.clusters, args.endpoints, args.per_node_groups, shared)?;
        let layout = format!(
            "{} snapshot groups (load-0..load-{}), clusters 0..{shared} shared, {}..{} per node, \
             set in {:.1} s",
            args.per_node_groups,
            args.per_node_groups - 1,
            shared,
            args.clusters,
            started.elapsed().as_secs_f64(),
        );
        (serve(p.cache.clone(), &args), Store::PerNode(p), layout)
    } else {
        let (mux, cla) = linear(args.clusters, args.endpoints)?;
        (serve(mux, &args), Store::Linear(cla), "one LinearCache per type".to_owned())
    };
    let bench = Arc::new(Bench {
        store,
        clusters: args.clusters,
        endpoints: args.endpoints,
        updates: AtomicU32::new(0),
    });

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
        "xds-bench-server pid {}: {} clusters x {} endpoints, 1 listener, 1 route ({layout}); gRPC {}, HTTP {} \
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
