//! The floor: the resources of `xds-bench-server` (N EDS clusters with M endpoints each, the same
//! bytes) served to `xds-load` with the least work a server can do, over the same HTTP/2 stack
//! (tonic's server on hyper and h2), so that the project's figures can be reported as ratios to
//! it, measured in the same sitting.
//!
//! What it does, and nothing more: every response is encoded once and shared by every stream
//! (the Cluster set once; the ClusterLoadAssignment set once per revision; an update once,
//! carrying the one changed resource); nonces and versions are per response, not per stream. A
//! stream answers its first Cluster request with every Cluster and its first
//! ClusterLoadAssignment request with every ClusterLoadAssignment, then gets each update. It
//! reads every request (the ACKs too; a SotW ACK carries all 10,000 names, which it does not look
//! at) and keeps one response in flight, as the project's server does: changes made while a
//! response awaits its ACK go out together once the ACK comes (encoded for that stream), so the
//! floor sends no more responses, and reads no more ACKs, than the project would. There are no
//! per-node views, no subscriptions by name (every subscriber gets every cluster: a floor for
//! `xds-load --eds-per-client 0` only), no resumption and no NACK handling. A stream whose queue
//! of [`QUEUE`] responses is full is ended.
//!
//! `GET /bench/update?i=K` and `GET /bench/stats` answer as `xds-bench-server`'s do, so
//! `xds-load` runs against either unchanged.
//!
//! ```text
//! xds-floor-server --clusters 10000 --grpc-addr 127.0.0.1:18600 --http-addr 127.0.0.1:18601
//! ```

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use bytes::{Buf, Bytes, BytesMut};
use clap::Parser;
use http_body::Frame;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tonic::transport::server::TcpIncoming;
use xds_bench::client::Mode;
use xds_bench::floor::{self, TypeSet};
use xds_bench::{resources, sys};
use xds_proto::{ADS_DELTA_METHOD, ADS_SERVICE, ADS_SOTW_METHOD};

/// Serve N EDS clusters with M endpoints each, pre-encoded, to `xds-load`.
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
    /// Where /bench/update, /bench/stats and /healthz listen.
    #[arg(long, default_value = "127.0.0.1:18001")]
    http_addr: SocketAddr,
    /// Log filter, as `xds-bench-server`'s.
    #[arg(long, default_value = "warn")]
    log: String,
}

/// Responses a stream may have waiting; one more ends it.
const QUEUE: usize = 64;

/// The largest request read; a larger one ends its stream (a SotW ACK naming 10,000 clusters is
/// ~140 KB).
const MAX_REQUEST: usize = 16 << 20;

/// What every stream and the HTTP handlers share.
struct Floor {
    /// Every Cluster as one framed response, delta then SotW: they never change.
    clusters: [Bytes; 2],
    cluster_type: String,
    endpoint_type: String,
    cluster_count: u32,
    endpoints: u32,
    state: Mutex<Endpoints>,
    /// Open ADS streams.
    streams: AtomicUsize,
    /// Whether a subscription to some but not all clusters was seen (warned once).
    warned: AtomicBool,
}

/// The ClusterLoadAssignments and the streams that subscribed to them.
struct Endpoints {
    set: TypeSet,
    updates: u32,
    subscribers: BTreeMap<u64, Subscriber>,
    next_id: u64,
}

/// A stream subscribed to the endpoints. As the project's server does (one response in flight
/// per type), it is sent nothing more until it answers the last response; the changes that come
/// meanwhile go out together then, so the floor sends no more responses (and reads no more
/// ACKs) than the project would.
struct Subscriber {
    mode: Mode,
    tx: mpsc::Sender<Bytes>,
    in_flight: bool,
    /// The clusters changed while a response was in flight.
    pending: Vec<u32>,
}

impl Floor {
    fn lock(&self) -> std::sync::MutexGuard<'_, Endpoints> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn mode_slot(mode: Mode) -> usize {
    match mode {
        Mode::Delta => 0,
        Mode::Sotw => 1,
    }
}

/// The response body of a stream: the frames its queue yields, then `grpc-status: 0` once the
/// queue closes (the client half-closed, or the stream fell behind).
struct FloorBody {
    rx: mpsc::Receiver<Bytes>,
    done: bool,
}

impl http_body::Body for FloorBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(bytes)) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
            Poll::Ready(None) => {
                self.done = true;
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

/// Opens a stream: its requests are read by a task of their own, its responses come from a
/// bounded queue.
fn open(
    floor: Arc<Floor>,
    mode: Mode,
    request: axum::extract::Request,
) -> http::Response<FloorBody> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(read_requests(floor, mode, request.into_body(), tx));
    let mut response = http::Response::new(FloorBody { rx, done: false });
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    response
}

/// What a stream has been sent.
struct Stream {
    floor: Arc<Floor>,
    mode: Mode,
    /// The queue, until the stream subscribes to endpoints: then the subscribers hold it.
    tx: Option<mpsc::Sender<Bytes>>,
    clusters_sent: bool,
    /// The stream's key among the subscribers, once it subscribed.
    subscribed: Option<u64>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.floor.streams.fetch_sub(1, Ordering::Relaxed);
        if let Some(id) = self.subscribed {
            // Dropping the queue's sender ends the response body.
            let removed = self.floor.lock().subscribers.remove(&id);
            drop(removed);
        }
    }
}

impl Stream {
    /// One request: the first Cluster request is answered with every Cluster, the first
    /// subscription to endpoints with every ClusterLoadAssignment; the rest (ACKs) are read
    /// and ignored.
    fn on_request(&mut self, message: &[u8]) -> Result<(), &'static str> {
        let malformed = |_| "a malformed request";
        let type_url = floor::type_url(self.mode, message).map_err(malformed)?;
        let floor = &self.floor;
        if type_url == floor.cluster_type.as_bytes() && !self.clusters_sent {
            self.clusters_sent = true;
            let tx = self.tx.as_ref().ok_or("no queue")?;
            return tx.try_send(floor.clusters[mode_slot(self.mode)].clone()).map_err(|_| "full");
        }
        if type_url == floor.endpoint_type.as_bytes() && self.subscribed.is_none() {
            // The first request for endpoints subscribes (xds-load's does, in both variants);
            // its names are counted only to warn when they are not every cluster.
            let names = floor::names(message).map_err(malformed)?;
            if names != floor.cluster_count as usize && !floor.warned.swap(true, Ordering::Relaxed)
            {
                eprintln!(
                    "warning: a client subscribed to {names} of {} clusters; the floor sends \
                     every cluster to every subscriber",
                    floor.cluster_count
                );
            }
            let tx = self.tx.take().ok_or("no queue")?;
            // The whole set and the registration under one lock: no update is missed or comes
            // before the set it changes.
            let mut state = floor.lock();
            tx.try_send(state.set.full(self.mode)).map_err(|_| "full")?;
            let id = state.next_id;
            state.next_id += 1;
            let subscriber =
                Subscriber { mode: self.mode, tx, in_flight: true, pending: Vec::new() };
            state.subscribers.insert(id, subscriber);
            self.subscribed = Some(id);
        } else if type_url == floor.endpoint_type.as_bytes()
            && let Some(id) = self.subscribed
        {
            // An ACK (or a NACK: the floor does not tell them apart) of the response in flight:
            // what changed since goes out now, in one response.
            let mut state = floor.lock();
            let Endpoints { set, subscribers, .. } = &mut *state;
            let Some(subscriber) = subscribers.get_mut(&id) else { return Err("ended") };
            subscriber.in_flight = false;
            if !subscriber.pending.is_empty() {
                subscriber.pending.sort_unstable();
                let response = set.changes(subscriber.mode, &subscriber.pending);
                subscriber.pending.clear();
                subscriber.tx.try_send(response).map_err(|_| "full")?;
                subscriber.in_flight = true;
            }
        }
        Ok(())
    }
}

/// Reads a stream's requests (gRPC frames, uncompressed) until the client half-closes.
async fn read_requests(
    floor: Arc<Floor>,
    mode: Mode,
    body: axum::body::Body,
    tx: mpsc::Sender<Bytes>,
) {
    floor.streams.fetch_add(1, Ordering::Relaxed);
    let mut stream = Stream { floor, mode, tx: Some(tx), clusters_sent: false, subscribed: None };
    let mut data = body.into_data_stream();
    let mut buf = BytesMut::new();
    while let Some(Ok(chunk)) = data.next().await {
        buf.extend_from_slice(&chunk);
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf[0] != 0 || len > MAX_REQUEST {
                return;
            }
            if buf.len() < 5 + len {
                // Room for the whole message at once, not grown by doubling as it arrives.
                buf.reserve(5 + len - buf.len());
                break;
            }
            buf.advance(5);
            let message = buf.split_to(len);
            if stream.on_request(&message).is_err() {
                return;
            }
        }
        if buf.is_empty() {
            // Lets go of the last request's buffer rather than keeping its capacity.
            buf = BytesMut::new();
        }
    }
}

/// The query of `/bench/update`.
#[derive(serde::Deserialize)]
struct UpdateQuery {
    i: u32,
}

/// Moves cluster `i`'s endpoints to a new port, encodes the change once and queues it on every
/// subscribed stream with no response in flight (the others get it with their next response);
/// answers the port.
async fn update(
    State(floor): State<Arc<Floor>>,
    Query(q): Query<UpdateQuery>,
) -> (StatusCode, String) {
    if q.i >= floor.cluster_count {
        let body = format!("no cluster {} (of {})\n", q.i, floor.cluster_count);
        return (StatusCode::NOT_FOUND, body);
    }
    let mut state = floor.lock();
    let port = resources::update_port(state.updates);
    state.updates += 1;
    let cla = resources::cla(q.i, floor.endpoints, port);
    let messages = state.set.replace(q.i as usize, format!("cluster-{}", q.i), &cla);
    let mut behind = Vec::new();
    for (&id, subscriber) in &mut state.subscribers {
        if subscriber.in_flight {
            if !subscriber.pending.contains(&q.i) {
                subscriber.pending.push(q.i);
            }
        } else if subscriber.tx.try_send(messages[mode_slot(subscriber.mode)].clone()).is_ok() {
            subscriber.in_flight = true;
        } else {
            behind.push(id);
        }
    }
    for id in behind {
        // Gone, or too far behind: dropping its queue ends its stream.
        state.subscribers.remove(&id);
    }
    (StatusCode::OK, format!("{port}\n"))
}

/// `/bench/stats`, as `xds-bench-server` answers it.
fn stats(floor: &Floor) -> serde_json::Value {
    let tasks = tokio::runtime::Handle::current().metrics().num_alive_tasks();
    let me = sys::sample("self").unwrap_or_default();
    serde_json::json!({
        "tasks": tasks,
        "streams": floor.streams.load(Ordering::Relaxed),
        "rss_bytes": me.rss_kib * 1024,
        "cpu_s": me.cpu_s,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    // The subscriber the project's server has. Without one, the spans h2 opens for every frame
    // go through `tracing`'s `log` fallback: measured with callgrind, a fifth of the floor's
    // instructions per delta update, work the project's server does not do.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&args.log)?)
        .init();
    let fd_limit = sys::raise_fd_limit()?;
    let mut clusters =
        TypeSet::new((0..args.clusters).map(|i| (format!("cluster-{i}"), resources::cluster(i))));
    let set = TypeSet::new((0..args.clusters).map(|i| {
        (format!("cluster-{i}"), resources::cla(i, args.endpoints, resources::INITIAL_PORT))
    }));
    let floor = Arc::new(Floor {
        clusters: [clusters.full(Mode::Delta), clusters.full(Mode::Sotw)],
        cluster_type: clusters.type_url().to_owned(),
        endpoint_type: set.type_url().to_owned(),
        cluster_count: args.clusters,
        endpoints: args.endpoints,
        state: Mutex::new(Endpoints { set, updates: 0, subscribers: BTreeMap::new(), next_id: 0 }),
        streams: AtomicUsize::new(0),
        warned: AtomicBool::new(false),
    });

    let observed = floor.clone();
    let http = axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/bench/update", get(update).with_state(floor.clone()))
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

    let (sotw, delta) = (floor.clone(), floor);
    let grpc = axum::Router::new()
        .route(
            &format!("/{ADS_SERVICE}/{ADS_SOTW_METHOD}"),
            post(move |request: axum::extract::Request| {
                let floor = sotw.clone();
                async move { open(floor, Mode::Sotw, request) }
            }),
        )
        .route(
            &format!("/{ADS_SERVICE}/{ADS_DELTA_METHOD}"),
            post(move |request: axum::extract::Request| {
                let floor = delta.clone();
                async move { open(floor, Mode::Delta, request) }
            }),
        );

    // As xds-bench-server: a deep accept backlog (thousands of clients connect at once), no
    // keepalive, hyper's default windows and frame size.
    let socket = match args.grpc_addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(args.grpc_addr)?;
    let incoming = TcpIncoming::from(socket.listen(8192)?).with_nodelay(Some(true));
    println!(
        "xds-floor-server pid {}: {} clusters x {} endpoints, pre-encoded; gRPC {}, HTTP {} \
         (/bench/update?i=K, /bench/stats, /healthz); open-file limit {fd_limit}",
        std::process::id(),
        args.clusters,
        args.endpoints,
        args.grpc_addr,
        args.http_addr,
    );
    tonic::transport::Server::builder()
        .add_routes(tonic::service::Routes::from(grpc))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
