//! A client's streams: connecting, (re)subscribing, reading until the stream breaks, and
//! reconnecting with backoff (at once after a drop asked for by the churn).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Endpoint;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{ADS_DELTA_METHOD, ADS_SERVICE, ADS_SOTW_METHOD, ResourceType, TypeUrl};

use super::{Client, Config, Error, Mode};
use crate::codec::{Outgoing, RawCodec, push_name};
use crate::track::Tracker;

/// Runs client `id` until `stop` is set; a failure is reported to `tracker`.
pub async fn run(
    config: Arc<Config>,
    id: usize,
    tracker: Arc<Tracker>,
    mut stop: watch::Receiver<bool>,
) {
    let mut client = Client::new(&config, id, &tracker);
    let mut backoff = Backoff::new(id as u64);
    loop {
        let sessions = client.sessions;
        let ended = tokio::select! {
            ended = session(&config, &mut client) => ended,
            _ = stop.wait_for(|s| *s) => return,
        };
        tracker.stream_down(id);
        // The next stream goes to the next server (the same one when there is only one).
        client.server = (client.server + 1) % config.servers.len().max(1);
        let error = match ended {
            // A deliberate drop is no failure to back off from: the client comes back at once.
            Ended::Dropped => {
                backoff.reset();
                continue;
            }
            Ended::Broken(e) if config.reconnect => e,
            Ended::Broken(e) | Ended::Failed(e) => {
                tracker.client_failed(id, e.to_string());
                return;
            }
        };
        tracing::debug!("load-{id}: reconnecting: {error}");
        if client.sessions > sessions {
            backoff.reset();
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.next()) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// How a session ended.
enum Ended {
    /// The connection or the stream broke: a reconnection may resume.
    Broken(Error),
    /// The client cannot go on (a malformed response, a closed request channel).
    Failed(Error),
    /// The client dropped its stream and connection as the churn asked ([`Tracker::kick`]).
    Dropped,
}

/// Connects to `server` (a connection of its own) and opens an ADS stream, SotW or delta, that
/// sends what `requests` yields.
pub async fn open_ads(
    server: &str,
    mode: Mode,
    connect_timeout: Duration,
    window: u32,
    requests: mpsc::UnboundedReceiver<Outgoing>,
) -> Result<tonic::Streaming<Bytes>, Error> {
    let channel = Endpoint::from_shared(server.to_owned())?
        .connect_timeout(connect_timeout)
        .initial_stream_window_size(window)
        .initial_connection_window_size(window)
        .tcp_nodelay(true)
        .connect()
        .await?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX);
    grpc.ready().await?;
    let method = match mode {
        Mode::Sotw => ADS_SOTW_METHOD,
        Mode::Delta => ADS_DELTA_METHOD,
    };
    let path = PathAndQuery::try_from(format!("/{ADS_SERVICE}/{method}"))?;
    let requests = tonic::Request::new(UnboundedReceiverStream::new(requests));
    Ok(grpc.streaming(requests, path, RawCodec).await?.into_inner())
}

/// A first request: every Cluster (wildcard), with the node.
pub fn wildcard_clusters(mode: Mode, node: &Node) -> Outgoing {
    let cds = TypeUrl::from(ResourceType::Cluster);
    match mode {
        Mode::Sotw => Outgoing::sotw(Some(node), cds.as_str(), b"", b"", Bytes::new()),
        Mode::Delta => {
            let mut star = Vec::new();
            push_name(&mut star, b"*");
            Outgoing::delta(Some(node), cds.as_str(), b"", Bytes::from(star), Vec::new())
        }
    }
}

/// One stream: connects, (re)subscribes, then reads and ACKs until the stream ends.
async fn session(config: &Config, client: &mut Client<'_>) -> Ended {
    let permit = match &config.connect_permits {
        Some(permits) => match permits.clone().acquire_owned().await {
            Ok(p) => Some(p),
            Err(e) => return Ended::Failed(e.into()),
        },
        None => None,
    };
    let (tx, rx) = mpsc::unbounded_channel();
    client.tx = Some(tx);
    if let Err(e) = client.start() {
        return Ended::Failed(e);
    }
    let Some(server) = config.servers.get(client.server) else {
        return Ended::Failed("no server address".into());
    };
    client.tracker.on_server(client.id, client.server);
    let opened = open_ads(server, config.mode, config.connect_timeout, config.window, rx).await;
    drop(permit);
    let mut responses = match opened {
        Ok(r) => r,
        Err(e) => return Ended::Broken(e),
    };
    client.sessions += 1;
    client.tracker.stream_up(client.id);
    client.on_stream_up();
    let (tracker, id, number) = (client.tracker, client.id, client.sessions);
    // Without churn no drop is ever asked for: nothing to wait for.
    let mut kicked = std::pin::pin!(async move {
        if config.churn {
            tracker.kicked(id, number).await;
        } else {
            std::future::pending::<()>().await;
        }
    });
    loop {
        let received = tokio::select! {
            received = responses.message() => received,
            // Returning drops the response stream and, with it, the connection.
            () = &mut kicked => return Ended::Dropped,
        };
        let message = match received {
            Ok(Some(m)) => m,
            Ok(None) => return Ended::Broken("the server ended the stream".into()),
            Err(e) => return Ended::Broken(e.into()),
        };
        client.tracker.received(message.len());
        if let Err(e) = client.on_message(&message) {
            return Ended::Failed(e);
        }
        if client.stuck && client.ready {
            // Holds the connection and the stream (and its request side) open, never reads again.
            let _hold = (&responses, &client.tx);
            std::future::pending::<()>().await;
        }
    }
}

/// Exponential backoff between reconnections: 100 ms doubling to 2 s, each pause drawn uniformly
/// from its upper half so that clients broken at once do not come back at once.
#[derive(Debug)]
struct Backoff {
    next: Duration,
    /// xorshift64 state.
    rng: u64,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(2);

    fn new(seed: u64) -> Self {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let rng = (seed.wrapping_add(1)).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(time);
        Backoff { next: Self::FIRST, rng: rng.max(1) }
    }

    fn reset(&mut self) {
        self.next = Self::FIRST;
    }

    fn next(&mut self) -> Duration {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let ceiling = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        let fraction = (self.rng % 1024) as f64 / 2048.0;
        ceiling.mul_f64(0.5 + fraction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_two_seconds_with_jitter() {
        let mut b = Backoff::new(7);
        for ceiling in [100, 200, 400, 800, 1600, 2000, 2000] {
            let (p, ceiling) = (b.next(), Duration::from_millis(ceiling));
            assert!(p >= ceiling / 2 && p < ceiling, "{p:?} for {ceiling:?}");
        }
        b.reset();
        assert!(b.next() < Duration::from_millis(100));
    }
}
