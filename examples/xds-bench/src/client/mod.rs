//! One simulated xDS client: its own HTTP/2 connection and ADS stream (SotW or delta), a wildcard
//! Cluster subscription and the ClusterLoadAssignments of (a subset of) the clusters it gets.
//! It ACKs every response as a real client would, and reports to the [`Tracker`].
//!
//! With [`Config::reconnect`] a client whose stream or connection breaks reconnects with backoff
//! and resumes: a delta client declares what it holds (`initial_resource_versions`), a SotW client
//! re-requests with the versions it last got. With [`Config::churn`] the coordinator also asks
//! clients to drop their stream and connection ([`Tracker::kick`]); they come back at once and
//! resume the same way. A stuck client ([`Tracker::is_stuck`]) stops reading its stream once it
//! holds the initial configuration.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{ResourceType, TypeUrl};

use super::codec::{Outgoing, push_name};
use super::proto::{self, DeltaEntry, Malformed};
use super::track::{Subset, Tracker};
use holdings::{Holdings, body_hash, hold};
pub use session::{open_ads, run, wildcard_clusters};

mod holdings;
mod session;

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
    /// The servers' gRPC URIs, e.g. `http://127.0.0.1:18000`: client `i` starts on server
    /// `i % n`, and a client whose stream breaks reconnects to the next one (replicas behind a
    /// load balancer, as a proxy that lost its replica meets another).
    pub servers: Vec<String>,
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
    /// Whether a client whose stream or connection breaks reconnects (with backoff) and resumes;
    /// otherwise it fails.
    pub reconnect: bool,
    /// Whether the coordinator drops streams (churn): each stream also waits for its
    /// [`Tracker::kick`]. Implies `reconnect`.
    pub churn: bool,
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

/// The state of one client; it outlives its streams.
struct Client<'a> {
    config: &'a Config,
    id: usize,
    tracker: &'a Tracker,
    /// The current stream's requests.
    tx: Option<mpsc::UnboundedSender<Outgoing>>,
    /// Whether the client stops reading once ready.
    stuck: bool,
    /// Streams established so far.
    sessions: u32,
    /// On a resumed stream: the number of updates begun when it was established. Until the next
    /// one begins, what the stream brings that the client did not hold is what it missed while
    /// away (counted apart from the updates).
    resuming_since: Option<u64>,
    /// The index in `Config::servers` of the server of the current (or next) stream.
    server: usize,
    /// With `--reconnect`: what it holds, to resume.
    held: Option<Holdings>,
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
    /// SotW: the last CDS response's version, sent again on a reconnection.
    cds_version: Vec<u8>,
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
    fn new(config: &'a Config, id: usize, tracker: &'a Tracker) -> Self {
        Client {
            config,
            id,
            tracker,
            tx: None,
            stuck: tracker.is_stuck(id),
            sessions: 0,
            resuming_since: None,
            server: id % config.servers.len().max(1),
            held: config.reconnect.then(Holdings::default),
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
            cds_version: Vec::new(),
            eds_version: Vec::new(),
            eds_nonce: Vec::new(),
            scratch: Vec::new(),
        }
    }

    fn send(&self, request: Outgoing) -> Result<(), Error> {
        let tx = self.tx.as_ref().ok_or("no stream")?;
        tx.send(request).map_err(|_| "the request stream is closed".into())
    }

    /// Whether this is a stream after the first: what arrives may be held already.
    fn resumed(&self) -> bool {
        self.sessions > 1
    }

    /// A stream was established.
    fn on_stream_up(&mut self) {
        self.resuming_since = self.resumed().then(|| self.tracker.updates_begun());
    }

    /// Counts a resource received on a resumed stream, before the next update began, that the
    /// client did not hold at that version (`same`: it did).
    fn count_resumed(&mut self, same: bool) {
        if same || self.held.is_none() {
            return;
        }
        match self.resuming_since {
            Some(since) if since == self.tracker.updates_begun() => self.tracker.resumed_new(1),
            Some(_) => self.resuming_since = None,
            None => {}
        }
    }

    /// The first requests of a stream: every cluster (the node goes with it only) and, on a
    /// reconnection, the endpoints it subscribed to, declaring what it holds (delta) or the
    /// versions it last got (SotW). The nonces of the old stream mean nothing on the new one.
    fn start(&mut self) -> Result<(), Error> {
        let (cds, eds) = (self.cds.as_str(), self.eds.as_str());
        let Some(held) = &self.held else {
            return self.send(wildcard_clusters(self.config.mode, &self.node));
        };
        let list = self.subset.map(|subset| (subset, self.config.names.get(&self.prefix, subset)));
        match self.config.mode {
            Mode::Sotw => {
                let node = Some(&self.node);
                self.send(Outgoing::sotw(node, cds, &self.cds_version, b"", Bytes::new()))?;
                if let Some((_, list)) = list {
                    self.send(Outgoing::sotw(None, eds, &self.eds_version, b"", list))?;
                }
            }
            Mode::Delta => {
                let clusters = self.named(&held.cds, |_| true);
                let first = wildcard_clusters(Mode::Delta, &self.node)
                    .with_initial_versions(clusters.iter().map(|(n, v)| (&n[..], *v)));
                self.send(first)?;
                if let Some((subset, list)) = list {
                    let endpoints = self.named(&held.eds, |i| subset.contains(i));
                    let request = Outgoing::delta(None, eds, b"", list, Vec::new())
                        .with_initial_versions(endpoints.iter().map(|(n, v)| (&n[..], *v)));
                    self.send(request)?;
                }
            }
        }
        // The nonces of the old stream mean nothing on the new one.
        self.eds_nonce.clear();
        Ok(())
    }

    /// The names (`prefix{index}`) and identities of what `held` holds among `include`.
    fn named<'h>(
        &self,
        held: &'h [Option<Box<[u8]>>],
        include: impl Fn(u32) -> bool,
    ) -> Vec<(Vec<u8>, &'h [u8])> {
        let prefix = String::from_utf8_lossy(&self.prefix);
        held.iter()
            .enumerate()
            .filter_map(|(i, v)| Some((i as u32, v.as_deref()?)))
            .filter(|&(i, _)| include(i))
            .map(|(i, v)| (format!("{prefix}{i}").into_bytes(), v))
            .collect()
    }

    fn on_message(&mut self, message: &[u8]) -> Result<(), Error> {
        let header = proto::header(message)?;
        let (version, nonce) = (header.version, header.nonce);
        self.tracker.answered(self.id);
        if header.type_url == self.cds.as_str().as_bytes() {
            self.tracker.cds_received(self.id);
            match self.config.mode {
                Mode::Sotw => self.sotw_clusters(message, version)?,
                Mode::Delta => self.delta_clusters(message)?,
            }
            self.resubscribe()?;
        } else if header.type_url == self.eds.as_str().as_bytes() {
            match self.config.mode {
                Mode::Sotw => {
                    proto::sotw_resources(message, |body| {
                        let (name, port) = proto::cla_name_and_port(body)?;
                        let identity = self.held.is_some().then(|| body_hash(body));
                        self.on_cla(name, Some(port), identity.as_ref().map(|h| &h[..]))
                    })?;
                    self.eds_version.clear();
                    self.eds_version.extend_from_slice(version);
                    self.eds_nonce.clear();
                    self.eds_nonce.extend_from_slice(nonce);
                }
                Mode::Delta => proto::delta_entries(message, |entry| match entry {
                    // A heartbeat carries no body: nothing changes.
                    DeltaEntry::Resource { body: [], .. } => Ok(()),
                    DeltaEntry::Resource { body, version, .. } => {
                        let (name, port) = proto::cla_name_and_port(body)?;
                        self.on_cla(name, Some(port), Some(version))
                    }
                    DeltaEntry::Removed(name) => self.on_cla(name, None, None),
                })?,
            }
        }
        self.check_ready();
        if self.stuck && self.ready {
            // A stuck client never ACKs again.
            return Ok(());
        }
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
    fn sotw_clusters(&mut self, message: &[u8], version: &[u8]) -> Result<(), Error> {
        let mut indices = std::mem::take(&mut self.scratch);
        indices.clear();
        // Full state: what the response does not name is gone, so the holdings are rebuilt.
        let old = self.held.as_mut().map(|h| std::mem::take(&mut h.cds));
        let mut next = Vec::new();
        let (mut resent, mut new) = (0, 0);
        proto::sotw_resources(message, |body| {
            let (prefix, index) = split_index(proto::cluster_name(body)?)?;
            self.check_prefix(prefix)?;
            indices.push(index);
            if let Some(old) = &old {
                let (i, identity) = (index as usize, body_hash(body));
                let before = old.get(i).and_then(|v| v.as_deref());
                let same = before == Some(&identity[..]);
                resent += u64::from(same);
                new += u32::from(!same);
                hold(&mut next, i, Some(&identity));
            }
            Ok(())
        })?;
        if let Some(held) = &mut self.held {
            held.cds = next;
            if self.resumed() {
                self.tracker.resent_clusters(resent);
            }
        }
        for _ in 0..new {
            self.count_resumed(false);
        }
        self.clusters = indices.len();
        self.scratch = indices;
        self.cds_seen = true;
        self.cds_version.clear();
        self.cds_version.extend_from_slice(version);
        Ok(())
    }

    /// A delta Cluster response: additions and removals.
    fn delta_clusters(&mut self, message: &[u8]) -> Result<(), Error> {
        proto::delta_entries(message, |entry| {
            let (name, version) = match entry {
                DeltaEntry::Resource { name, version, .. } => (name, Some(version)),
                DeltaEntry::Removed(name) => (name, None),
            };
            let add = version.is_some();
            let (prefix, index) = split_index(name)?;
            self.check_prefix(prefix)?;
            let i = index as usize;
            let resumed = self.resumed();
            let same = self.held.as_mut().map(|held| hold(&mut held.cds, i, version));
            if let Some(same) = same
                && resumed
            {
                if same {
                    self.tracker.resent_clusters(1);
                }
                if add {
                    self.count_resumed(same);
                }
            }
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

    /// A ClusterLoadAssignment arrived with the port of its first endpoint (0: none) and its
    /// identity (see [`Holdings`]), or was removed (`None`).
    fn on_cla(
        &mut self,
        name: &[u8],
        port: Option<u32>,
        identity: Option<&[u8]>,
    ) -> Result<(), Malformed> {
        let (_, index) = split_index(name)?;
        if !self.subset.is_some_and(|s| s.contains(index)) {
            return Ok(());
        }
        let resumed = self.resumed();
        let identity = identity.filter(|_| port.is_some());
        let same = self.held.as_mut().map(|held| hold(&mut held.eds, index as usize, identity));
        if let Some(same) = same
            && resumed
        {
            if same {
                self.tracker.resent(1);
            }
            if port.is_some() {
                self.count_resumed(same);
            }
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
