//! One simulated xDS client: its own HTTP/2 connection and ADS stream (SotW or delta), a wildcard
//! Cluster subscription and the ClusterLoadAssignments of (a subset of) the clusters it gets.
//! It ACKs every response as a real client would, and reports to the [`Tracker`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Endpoint;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{ADS_DELTA_METHOD, ADS_SERVICE, ADS_SOTW_METHOD, ResourceType, TypeUrl};

use super::codec::{Outgoing, RawCodec, push_name};
use super::proto::{self, DeltaEntry, Malformed};
use super::track::{Subset, Tracker};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The protocol variant the clients speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// State of the world over `StreamAggregatedResources`.
    Sotw,
    /// Incremental over `DeltaAggregatedResources`.
    Delta,
}

/// What every client shares.
#[derive(Debug)]
pub struct Config {
    /// The server's gRPC URI, e.g. `http://127.0.0.1:18000`.
    pub server: String,
    /// SotW or delta.
    pub mode: Mode,
    /// How many clusters' endpoints each client subscribes to (0: all).
    pub eds_per_client: usize,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// HTTP/2 stream and connection receive window.
    pub window: u32,
    /// Encoded name lists shared by clients with the same subset.
    pub names: NameCache,
    /// Bounds the connections being opened at once (`None`: all at once).
    pub connect_permits: Option<Arc<tokio::sync::Semaphore>>,
}

/// Encoded EDS name lists, shared by the clients that subscribe to the same subset (with every
/// client subscribing to all clusters, one list serves them all).
#[derive(Debug, Default)]
pub struct NameCache {
    lists: Mutex<std::collections::HashMap<NameKey, Bytes>>,
}

/// A subset of clusters and their names' prefix.
type NameKey = (Subset, Box<[u8]>);

impl NameCache {
    /// The encoded names `prefix{index}` of `subset`.
    pub fn get(&self, prefix: &[u8], subset: Subset) -> Bytes {
        let key = (subset, Box::<[u8]>::from(prefix));
        let mut lists = self.lists.lock().unwrap_or_else(PoisonError::into_inner);
        lists
            .entry(key)
            .or_insert_with(|| {
                let mut list = Vec::with_capacity(subset.count as usize * (prefix.len() + 8));
                let mut name = prefix.to_vec();
                for i in subset.indices() {
                    name.truncate(prefix.len());
                    name.extend_from_slice(i.to_string().as_bytes());
                    push_name(&mut list, &name);
                }
                Bytes::from(list)
            })
            .clone()
    }
}

/// Splits `cluster-42` into `(b"cluster-", 42)`.
pub fn split_index(name: &[u8]) -> Result<(&[u8], u32), Malformed> {
    let digits = name.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    let (prefix, index) = name.split_at(name.len() - digits);
    let index = std::str::from_utf8(index)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(Malformed("cluster names must end in their index (cluster-0, cluster-1, ...)"))?;
    Ok((prefix, index))
}

/// Runs client `id` until `stop` is set; a failure is reported to `tracker`.
pub async fn run(
    config: Arc<Config>,
    id: usize,
    tracker: Arc<Tracker>,
    mut stop: watch::Receiver<bool>,
) {
    let result = tokio::select! {
        r = session(&config, id, &tracker) => r,
        _ = stop.wait_for(|s| *s) => Ok(()),
    };
    if let Err(e) = result {
        tracker.client_failed(id, e.to_string());
    }
}

async fn session(config: &Config, id: usize, tracker: &Tracker) -> Result<(), Error> {
    let permit = match &config.connect_permits {
        Some(permits) => Some(permits.clone().acquire_owned().await?),
        None => None,
    };
    let channel = Endpoint::from_shared(config.server.clone())?
        .connect_timeout(config.connect_timeout)
        .initial_stream_window_size(config.window)
        .initial_connection_window_size(config.window)
        .tcp_nodelay(true)
        .connect()
        .await?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX);
    grpc.ready().await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let mut client = Client::new(config, id, tracker, tx);
    client.start()?;
    let method = match config.mode {
        Mode::Sotw => ADS_SOTW_METHOD,
        Mode::Delta => ADS_DELTA_METHOD,
    };
    let path = PathAndQuery::try_from(format!("/{ADS_SERVICE}/{method}"))?;
    let requests = tonic::Request::new(UnboundedReceiverStream::new(rx));
    let mut responses = grpc.streaming(requests, path, RawCodec).await?.into_inner();
    drop(permit);
    while let Some(message) = responses.message().await? {
        tracker.received(message.len());
        client.on_message(&message)?;
    }
    Err("the server ended the stream".into())
}

/// The state of one client.
struct Client<'a> {
    config: &'a Config,
    id: usize,
    tracker: &'a Tracker,
    tx: mpsc::UnboundedSender<Outgoing>,
    node: Node,
    cds: TypeUrl,
    eds: TypeUrl,
    /// The prefix of every cluster name (`cluster-`).
    prefix: Vec<u8>,
    /// Delta: which cluster indices the client holds.
    present: Vec<bool>,
    clusters: usize,
    cds_seen: bool,
    subset: Option<Subset>,
    /// By cluster index: the port of the first endpoint held, `NONE` for not held.
    ports: Vec<u32>,
    /// Subscribed ClusterLoadAssignments not held yet.
    missing: usize,
    ready: bool,
    /// SotW: the last EDS response's version and nonce, sent with a subscription change.
    eds_version: Vec<u8>,
    eds_nonce: Vec<u8>,
    /// Scratch for the indices of a SotW CDS response.
    scratch: Vec<u32>,
}

/// Not held.
const NONE: u32 = 0;
/// Held, without an endpoint port.
const NO_PORT: u32 = u32::MAX;

impl<'a> Client<'a> {
    fn new(
        config: &'a Config,
        id: usize,
        tracker: &'a Tracker,
        tx: mpsc::UnboundedSender<Outgoing>,
    ) -> Self {
        Client {
            config,
            id,
            tracker,
            tx,
            node: Node {
                id: format!("load-{id}"),
                cluster: "xds-load".into(),
                user_agent_name: "xds-load".into(),
                ..Default::default()
            },
            cds: TypeUrl::from(ResourceType::Cluster),
            eds: TypeUrl::from(ResourceType::ClusterLoadAssignment),
            prefix: Vec::new(),
            present: Vec::new(),
            clusters: 0,
            cds_seen: false,
            subset: None,
            ports: Vec::new(),
            missing: 0,
            ready: false,
            eds_version: Vec::new(),
            eds_nonce: Vec::new(),
            scratch: Vec::new(),
        }
    }

    fn send(&self, request: Outgoing) -> Result<(), Error> {
        self.tx.send(request).map_err(|_| "the request stream is closed".into())
    }

    /// The first request: every cluster (the node goes with it only).
    fn start(&mut self) -> Result<(), Error> {
        let node = Some(&self.node);
        let cds = self.cds.as_str();
        self.send(match self.config.mode {
            Mode::Sotw => Outgoing::sotw(node, cds, b"", b"", Bytes::new()),
            Mode::Delta => {
                let mut star = Vec::new();
                push_name(&mut star, b"*");
                Outgoing::delta(node, cds, b"", Bytes::from(star), Vec::new())
            }
        })
    }

    fn on_message(&mut self, message: &[u8]) -> Result<(), Error> {
        let header = match self.config.mode {
            Mode::Sotw => proto::sotw_header(message)?,
            Mode::Delta => proto::delta_header(message)?,
        };
        let (version, nonce) = (header.version, header.nonce);
        if header.type_url == self.cds.as_str().as_bytes() {
            match self.config.mode {
                Mode::Sotw => self.sotw_clusters(message)?,
                Mode::Delta => self.delta_clusters(message)?,
            }
            self.resubscribe()?;
        } else if header.type_url == self.eds.as_str().as_bytes() {
            match self.config.mode {
                Mode::Sotw => {
                    proto::sotw_resources(message, |body| {
                        let (name, port) = proto::cla_name_and_port(body)?;
                        self.on_cla(name, Some(port))
                    })?;
                    self.eds_version.clear();
                    self.eds_version.extend_from_slice(version);
                    self.eds_nonce.clear();
                    self.eds_nonce.extend_from_slice(nonce);
                }
                Mode::Delta => proto::delta_entries(message, |entry| match entry {
                    // A heartbeat carries no body: nothing changes.
                    DeltaEntry::Resource { body: [], .. } => Ok(()),
                    DeltaEntry::Resource { body, .. } => {
                        let (name, port) = proto::cla_name_and_port(body)?;
                        self.on_cla(name, Some(port))
                    }
                    DeltaEntry::Removed(name) => self.on_cla(name, None),
                })?,
            }
        }
        self.check_ready();
        // ACK: SotW names the version and (for EDS) every subscribed name again.
        let type_url = std::str::from_utf8(header.type_url).map_err(|_| "type URL not UTF-8")?;
        self.send(match self.config.mode {
            Mode::Sotw => {
                let names = match self.subset {
                    Some(s) if header.type_url == self.eds.as_str().as_bytes() => {
                        self.config.names.get(&self.prefix, s)
                    }
                    _ => Bytes::new(),
                };
                Outgoing::sotw(None, type_url, version, nonce, names)
            }
            Mode::Delta => Outgoing::delta(None, type_url, nonce, Bytes::new(), Vec::new()),
        })
    }

    /// A SotW Cluster response: the full set.
    fn sotw_clusters(&mut self, message: &[u8]) -> Result<(), Error> {
        let mut indices = std::mem::take(&mut self.scratch);
        indices.clear();
        proto::sotw_resources(message, |body| {
            let (prefix, index) = split_index(proto::cluster_name(body)?)?;
            self.check_prefix(prefix)?;
            indices.push(index);
            Ok(())
        })?;
        self.clusters = indices.len();
        self.scratch = indices;
        self.cds_seen = true;
        Ok(())
    }

    /// A delta Cluster response: additions and removals.
    fn delta_clusters(&mut self, message: &[u8]) -> Result<(), Error> {
        proto::delta_entries(message, |entry| {
            let (name, add) = match entry {
                DeltaEntry::Resource { name, .. } => (name, true),
                DeltaEntry::Removed(name) => (name, false),
            };
            let (prefix, index) = split_index(name)?;
            self.check_prefix(prefix)?;
            let i = index as usize;
            if i >= self.present.len() {
                self.present.resize(i + 1, false);
            }
            match (self.present[i], add) {
                (false, true) => self.clusters += 1,
                (true, false) => self.clusters -= 1,
                _ => {}
            }
            self.present[i] = add;
            Ok(())
        })?;
        self.cds_seen = true;
        Ok(())
    }

    fn check_prefix(&mut self, prefix: &[u8]) -> Result<(), Malformed> {
        if self.prefix.is_empty() {
            self.prefix = prefix.to_vec();
        }
        if self.prefix != prefix {
            return Err(Malformed(
                "cluster names must share one prefix (cluster-0, cluster-1, ...)",
            ));
        }
        Ok(())
    }

    /// Subscribes to the endpoints of this client's subset of the clusters, if it changed.
    fn resubscribe(&mut self) -> Result<(), Error> {
        let next = Subset::of(self.id, self.config.eds_per_client, self.clusters);
        if self.subset == Some(next) || (next.count == 0 && self.subset.is_none()) {
            return Ok(());
        }
        let previous = self.subset.replace(next);
        if self.ports.len() < self.clusters {
            self.ports.resize(self.clusters, NONE);
        }
        self.missing = next.indices().filter(|&i| self.ports[i as usize] == NONE).count();
        let eds = self.eds.as_str();
        match self.config.mode {
            // SotW: the full set of names, with the last EDS version and nonce.
            Mode::Sotw => {
                let names = self.config.names.get(&self.prefix, next);
                self.send(Outgoing::sotw(None, eds, &self.eds_version, &self.eds_nonce, names))
            }
            // Delta: only what changed.
            Mode::Delta => {
                let (subscribe, unsubscribe) = match previous {
                    None => (self.config.names.get(&self.prefix, next), Vec::new()),
                    Some(old) => {
                        let mut add = Vec::new();
                        let mut name = self.prefix.clone();
                        for i in next.indices().filter(|&i| !old.contains(i)) {
                            name.truncate(self.prefix.len());
                            name.extend_from_slice(i.to_string().as_bytes());
                            push_name(&mut add, &name);
                        }
                        let prefix = String::from_utf8_lossy(&self.prefix);
                        let remove = old
                            .indices()
                            .filter(|&i| !next.contains(i))
                            .map(|i| format!("{prefix}{i}"))
                            .collect();
                        (Bytes::from(add), remove)
                    }
                };
                self.send(Outgoing::delta(None, eds, b"", subscribe, unsubscribe))
            }
        }
    }

    /// A ClusterLoadAssignment arrived with the port of its first endpoint (0: none), or was
    /// removed (`None`).
    fn on_cla(&mut self, name: &[u8], port: Option<u32>) -> Result<(), Malformed> {
        let (_, index) = split_index(name)?;
        if !self.subset.is_some_and(|s| s.contains(index)) {
            return Ok(());
        }
        let held = match port {
            None => NONE,
            Some(0) => NO_PORT,
            Some(p) => p,
        };
        let slot = &mut self.ports[index as usize];
        match (*slot == NONE, held == NONE) {
            (true, false) => self.missing -= 1,
            (false, true) => self.missing += 1,
            _ => {}
        }
        *slot = held;
        if let Some(port) = port {
            self.tracker.on_cla(self.id, index, port);
        }
        Ok(())
    }

    fn check_ready(&mut self) {
        if !self.ready && self.cds_seen && self.subset.is_some() && self.missing == 0 {
            self.ready = true;
            self.tracker.client_ready(self.id, self.clusters);
        }
    }
}
