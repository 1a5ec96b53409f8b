//! The load reports of every open LRS stream, aggregated over a sliding window.
//!
//! Each stream owns its state behind its own mutex (only that stream writes it, so ingesting a
//! report never contends with other streams); the registry of streams is touched only when a
//! stream opens or closes and when someone reads the view. The view is computed on read and
//! cached per revision, so ingesting costs O(report) and a reader pays for the aggregation
//! only when something changed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use xds_proto::pb::envoy::config::core::v3::Locality;
use xds_proto::pb::envoy::config::endpoint::v3::ClusterStats;

use super::view::{LoadCounts, LoadSnapshot, LocalityName};
use crate::reporter::{Budget, Charge, OverBudget, Reason, ReportLimits};
use crate::status::lock;

/// The sliding window is this many slots; a report counts in the slot of its arrival, and a
/// slot leaves the window whole.
const SLOTS: usize = 6;

/// The label of whatever does not fit the bounded label sets.
pub(crate) const OTHER: &str = "other";

/// Limits and the window of load reporting.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LrsConfig {
    /// How far back the view sums reports (in six slots: a report leaves the view between
    /// five and six sixths of this after it arrived). Default 60 s.
    pub window: Duration,
    /// Open LRS streams at most; more are refused with `RESOURCE_EXHAUSTED`. Default 10,000.
    pub max_streams: usize,
    /// Streams open at most that have not sent their first request; more are refused with
    /// `RESOURCE_EXHAUSTED` (`too_many_pending`). Default 1,024.
    pub max_pending_streams: usize,
    /// How long a stream may take to send its first request before it is ended with
    /// `DEADLINE_EXCEEDED` (`first_request_timeout`). Default 30 s.
    pub first_request_timeout: Duration,
    /// Distinct clusters one stream may report; reports of more are rejected
    /// (`too_many_clusters`). Default 1,024.
    pub max_clusters_per_stream: usize,
    /// Distinct localities one stream may report per cluster (`too_many_localities`).
    /// Default 64.
    pub max_localities_per_cluster: usize,
    /// Longest cluster name or locality (region + zone + sub-zone), in bytes
    /// (`name_too_long`). Default 256.
    pub max_name_bytes: usize,
    /// Longest `load_report_interval` a report may claim (`bad_interval`, as are negative
    /// ones). Default 1 hour.
    pub max_interval: Duration,
    /// Distinct cluster label values in the metrics. Which clusters get one is decided by
    /// [`LoadReportingServer::known_clusters`](super::LoadReportingServer::known_clusters)
    /// (by default every cluster); of those, the first this many reported keep their name and
    /// later ones are counted under `other`, as are unknown ones. Default 256.
    pub max_cluster_labels: usize,
    /// Distinct locality label values in the metrics: the first this many reported since the
    /// server started keep theirs (for good: a label never moves, so a series stays one
    /// series), later ones are counted under `other`. Localities come from the clients' EDS,
    /// which the control plane wrote, so the set is small in practice. Default 64.
    pub max_locality_labels: usize,
    /// The most bytes the load of every stream together may take (an estimate of the heap the
    /// aggregated state uses: a fixed size per cluster and locality plus their names). A
    /// report that would pass it is not taken and its stream is ended with
    /// `RESOURCE_EXHAUSTED` (`over_budget`); what the stream held is given back. Default
    /// 64 MiB: about 180,000 cluster-locality entries with short names, e.g. 10,000 proxies
    /// reporting 18 each.
    pub max_total_bytes: usize,
    /// The most clusters and localities every stream together may hold (each stream's cluster
    /// counts once, and each of its localities once); past it, as for `max_total_bytes`. It
    /// bounds the work of each view and metrics render. Default 262,144.
    pub max_total_entries: usize,
    /// Reports per second one stream may send on average; a stream that sends faster is ended
    /// with `RESOURCE_EXHAUSTED` (`rate_limited`). Clients report once per interval (100 ms
    /// at the shortest this server asks for). Default 10.
    pub max_reports_per_second: u32,
    /// Reports one stream may send at once above that average. Default 20.
    pub report_burst: u32,
}

/// Chainable setters, one per field: the struct is `#[non_exhaustive]` (a new knob is not a
/// breaking change), so code outside this crate builds one from `LrsConfig::default()`.
impl LrsConfig {
    /// Sets `window` (see the field).
    #[must_use]
    pub fn window(mut self, value: Duration) -> Self {
        self.window = value;
        self
    }

    /// Sets `max_streams` (see the field).
    #[must_use]
    pub fn max_streams(mut self, value: usize) -> Self {
        self.max_streams = value;
        self
    }

    /// Sets `max_pending_streams` (see the field).
    #[must_use]
    pub fn max_pending_streams(mut self, value: usize) -> Self {
        self.max_pending_streams = value;
        self
    }

    /// Sets `first_request_timeout` (see the field).
    #[must_use]
    pub fn first_request_timeout(mut self, value: Duration) -> Self {
        self.first_request_timeout = value;
        self
    }

    /// Sets `max_clusters_per_stream` (see the field).
    #[must_use]
    pub fn max_clusters_per_stream(mut self, value: usize) -> Self {
        self.max_clusters_per_stream = value;
        self
    }

    /// Sets `max_localities_per_cluster` (see the field).
    #[must_use]
    pub fn max_localities_per_cluster(mut self, value: usize) -> Self {
        self.max_localities_per_cluster = value;
        self
    }

    /// Sets `max_name_bytes` (see the field).
    #[must_use]
    pub fn max_name_bytes(mut self, value: usize) -> Self {
        self.max_name_bytes = value;
        self
    }

    /// Sets `max_interval` (see the field).
    #[must_use]
    pub fn max_interval(mut self, value: Duration) -> Self {
        self.max_interval = value;
        self
    }

    /// Sets `max_cluster_labels` (see the field).
    #[must_use]
    pub fn max_cluster_labels(mut self, value: usize) -> Self {
        self.max_cluster_labels = value;
        self
    }

    /// Sets `max_locality_labels` (see the field).
    #[must_use]
    pub fn max_locality_labels(mut self, value: usize) -> Self {
        self.max_locality_labels = value;
        self
    }

    /// Sets `max_total_bytes` (see the field).
    #[must_use]
    pub fn max_total_bytes(mut self, value: usize) -> Self {
        self.max_total_bytes = value;
        self
    }

    /// Sets `max_total_entries` (see the field).
    #[must_use]
    pub fn max_total_entries(mut self, value: usize) -> Self {
        self.max_total_entries = value;
        self
    }

    /// Sets `max_reports_per_second` (see the field).
    #[must_use]
    pub fn max_reports_per_second(mut self, value: u32) -> Self {
        self.max_reports_per_second = value;
        self
    }

    /// Sets `report_burst` (see the field).
    #[must_use]
    pub fn report_burst(mut self, value: u32) -> Self {
        self.report_burst = value;
        self
    }
}

impl Default for LrsConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(60),
            max_streams: 10_000,
            max_pending_streams: 1024,
            first_request_timeout: Duration::from_secs(30),
            max_clusters_per_stream: 1024,
            max_localities_per_cluster: 64,
            max_name_bytes: 256,
            max_interval: Duration::from_secs(3600),
            max_cluster_labels: 256,
            max_locality_labels: 64,
            max_total_bytes: 64 << 20,
            max_total_entries: 1 << 18,
            max_reports_per_second: 10,
            report_burst: 20,
        }
    }
}

/// A bounded set of label values: the first `max` distinct values asked for keep their own
/// label, later ones get `other` (rule: metric label values from a bounded set).
#[derive(Debug)]
pub(crate) struct Labels {
    max: usize,
    known: Mutex<HashMap<Box<str>, Arc<str>>>,
    other: Arc<str>,
}

impl Labels {
    pub(crate) fn new(max: usize) -> Self {
        Self { max, known: Mutex::default(), other: Arc::from(OTHER) }
    }

    /// The label for `value`. Called once per stream and name, when a stream first reports it.
    pub(crate) fn admit(&self, value: &str) -> Arc<str> {
        self.admit_if(value, true)
    }

    /// The label for `value`, which gets one of its own only if `eligible` (and the set has
    /// room): an ineligible value is counted under `other` and takes no slot.
    pub(crate) fn admit_if(&self, value: &str, eligible: bool) -> Arc<str> {
        let mut known = lock(&self.known);
        if let Some(label) = known.get(value) {
            return label.clone();
        }
        if !eligible || known.len() >= self.max || value == OTHER {
            return self.other.clone();
        }
        let label: Arc<str> = Arc::from(value);
        known.insert(Box::from(value), label.clone());
        label
    }
}

/// Request counts of one slot.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    issued: u64,
    succeeded: u64,
    errors: u64,
    dropped: u64,
}

impl Counts {
    fn add(&mut self, other: &Counts) {
        self.issued = self.issued.saturating_add(other.issued);
        self.succeeded = self.succeeded.saturating_add(other.succeeded);
        self.errors = self.errors.saturating_add(other.errors);
        self.dropped = self.dropped.saturating_add(other.dropped);
    }
}

/// Counts per slot; a slot is reused (zeroed) when its epoch comes round again.
#[derive(Clone, Debug, Default)]
struct Ring([(u64, Counts); SLOTS]);

impl Ring {
    fn slot(&mut self, epoch: u64) -> &mut Counts {
        let slot = &mut self.0[(epoch % SLOTS as u64) as usize];
        if slot.0 != epoch {
            *slot = (epoch, Counts::default());
        }
        &mut slot.1
    }

    /// The sum of the slots still in the window at `epoch`.
    fn sum(&self, epoch: u64) -> Counts {
        let mut total = Counts::default();
        for (e, c) in &self.0 {
            if *e <= epoch && epoch - *e < SLOTS as u64 {
                total.add(c);
            }
        }
        total
    }
}

#[derive(Debug)]
struct LocalityState {
    name: LocalityName,
    label: Arc<str>,
    counts: Ring,
    in_progress: u64,
}

#[derive(Debug)]
struct ClusterState {
    label: Arc<str>,
    dropped: Ring,
    localities: Vec<LocalityState>,
}

/// What one cluster of a stream is charged to the budget besides its name: the state and its
/// place in the stream's map (key, and about a word of the table's own).
const CLUSTER_BYTES: usize =
    size_of::<ClusterState>() + size_of::<Box<str>>() + size_of::<usize>() * 2;

/// What one locality of a stream's cluster is charged besides its names.
const LOCALITY_BYTES: usize = size_of::<LocalityState>();

/// One stream's reports.
#[derive(Debug)]
pub(crate) struct StreamLoad {
    node_id: Arc<str>,
    clusters: HashMap<Box<str>, ClusterState>,
    /// What the clusters and localities above drew from the store's budget.
    charge: Charge,
}

/// Every stream's reports, the bounded labels and the counters.
pub(crate) struct Store {
    pub(crate) config: LrsConfig,
    origin: Instant,
    slot: Duration,
    streams: Mutex<BTreeMap<u64, Arc<Mutex<StreamLoad>>>>,
    pub(crate) cluster_labels: Labels,
    locality_labels: Labels,
    pub(crate) gate: Arc<ReportLimits>,
    /// The allowance every stream's load draws from.
    pub(crate) budget: Budget,
    /// Which clusters may have a label of their own (the user's predicate; asked with no lock
    /// held).
    pub(crate) known: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    reports: AtomicU64,
    revision: watch::Sender<u64>,
    cached: Mutex<Option<(u64, u64, Arc<LoadSnapshot>)>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("config", &self.config).finish_non_exhaustive()
    }
}

/// Window counts per (cluster label, locality label).
pub(crate) type ByLabel = BTreeMap<(Arc<str>, Arc<str>), LoadCounts>;

/// A stream's place in the store; dropping it takes the stream's load out of the view.
#[derive(Debug)]
pub(crate) struct Registration {
    store: Arc<Store>,
    id: u64,
    load: Arc<Mutex<StreamLoad>>,
    /// The clusters the policy asked for; `None`: all.
    only: Option<HashSet<String>>,
}

impl Store {
    pub(crate) fn new(config: LrsConfig) -> Self {
        let slot = (config.window / SLOTS as u32).max(Duration::from_millis(1));
        let gate = Arc::new(ReportLimits::new(
            config.max_streams,
            config.max_pending_streams,
            config.first_request_timeout,
            (config.max_reports_per_second, config.report_burst),
        ));
        Self {
            budget: Budget::new(config.max_total_bytes, config.max_total_entries),
            cluster_labels: Labels::new(config.max_cluster_labels),
            locality_labels: Labels::new(config.max_locality_labels),
            config,
            origin: Instant::now(),
            slot,
            streams: Mutex::default(),
            gate,
            known: Arc::new(|_: &str| true),
            reports: AtomicU64::new(0),
            revision: watch::Sender::new(0),
            cached: Mutex::new(None),
        }
    }

    fn epoch(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.origin);
        (since.as_nanos() / self.slot.as_nanos()) as u64
    }

    fn changed(&self) {
        self.revision.send_modify(|r| *r += 1);
    }

    /// Adds a stream of `node_id`, or `None` when the store holds as many as it may.
    pub(crate) fn register(
        self: &Arc<Self>,
        id: u64,
        node_id: &str,
        only: Option<HashSet<String>>,
    ) -> Option<Registration> {
        let load = Arc::new(Mutex::new(StreamLoad {
            node_id: Arc::from(node_id),
            clusters: HashMap::new(),
            charge: Charge::default(),
        }));
        {
            let mut streams = lock(&self.streams);
            if streams.len() >= self.config.max_streams {
                return None;
            }
            streams.insert(id, load.clone());
        }
        self.changed();
        Some(Registration { store: self.clone(), id, load, only })
    }

    /// A receiver that changes whenever a report arrives or a stream comes or goes.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }

    /// Reports ingested since the server started.
    pub(crate) fn reports(&self) -> u64 {
        self.reports.load(Ordering::Relaxed)
    }

    fn stream_loads(&self) -> Vec<Arc<Mutex<StreamLoad>>> {
        lock(&self.streams).values().cloned().collect()
    }

    /// The view at `now`: computed when something changed since the last read or the window
    /// moved a slot, else the cached one.
    pub(crate) fn snapshot(&self, now: Instant) -> Arc<LoadSnapshot> {
        let revision = *self.revision.borrow();
        let epoch = self.epoch(now);
        if let Some((r, e, snapshot)) = &*lock(&self.cached)
            && *r == revision
            && *e == epoch
        {
            return snapshot.clone();
        }
        let loads = self.stream_loads();
        let mut snapshot = LoadSnapshot {
            window: self.config.window,
            streams: loads.len(),
            reports: self.reports(),
            ..LoadSnapshot::default()
        };
        for load in &loads {
            let load = lock(load);
            let node = snapshot.nodes.entry(load.node_id.to_string()).or_default();
            node.streams += 1;
            for (name, cluster) in &load.clusters {
                let dropped = cluster.dropped.sum(epoch).dropped;
                for target in [
                    snapshot.clusters.entry(name.to_string()).or_default(),
                    node.clusters.entry(name.to_string()).or_default(),
                ] {
                    target.dropped = target.dropped.saturating_add(dropped);
                    for l in &cluster.localities {
                        let c = l.counts.sum(epoch);
                        let add = LoadCounts {
                            issued: c.issued,
                            succeeded: c.succeeded,
                            errors: c.errors,
                            in_progress: l.in_progress,
                        };
                        target.total.add(&add);
                        target.localities.entry(l.name.clone()).or_default().add(&add);
                    }
                }
            }
        }
        let snapshot = Arc::new(snapshot);
        *lock(&self.cached) = Some((revision, epoch, snapshot.clone()));
        snapshot
    }

    /// Per (cluster label, locality label): window counts and in-progress; per cluster label:
    /// dropped. For the metrics.
    pub(crate) fn by_label(&self, now: Instant) -> (ByLabel, BTreeMap<Arc<str>, u64>) {
        let epoch = self.epoch(now);
        let mut counts: BTreeMap<(Arc<str>, Arc<str>), LoadCounts> = BTreeMap::new();
        let mut dropped: BTreeMap<Arc<str>, u64> = BTreeMap::new();
        for load in self.stream_loads() {
            let load = lock(&load);
            for cluster in load.clusters.values() {
                let d = dropped.entry(cluster.label.clone()).or_default();
                *d = d.saturating_add(cluster.dropped.sum(epoch).dropped);
                for l in &cluster.localities {
                    let c = l.counts.sum(epoch);
                    counts.entry((cluster.label.clone(), l.label.clone())).or_default().add(
                        &LoadCounts {
                            issued: c.issued,
                            succeeded: c.succeeded,
                            errors: c.errors,
                            in_progress: l.in_progress,
                        },
                    );
                }
            }
        }
        (counts, dropped)
    }
}

fn locality_len(l: Option<&Locality>) -> usize {
    l.map_or(0, |l| l.region.len() + l.zone.len() + l.sub_zone.len())
}

fn same_locality(name: &LocalityName, l: Option<&Locality>) -> bool {
    match l {
        Some(l) => name.region == l.region && name.zone == l.zone && name.sub_zone == l.sub_zone,
        None => name.region.is_empty() && name.zone.is_empty() && name.sub_zone.is_empty(),
    }
}

impl Registration {
    /// Sets the clusters the stream's reports may name (after a policy change).
    pub(crate) fn set_only(&mut self, only: Option<HashSet<String>>) {
        self.only = only;
    }

    /// Why one cluster's stats are not taken, if they are not: a name too long, a negative or
    /// too long interval, a cluster the policy did not ask for.
    fn refusal(&self, cs: &ClusterStats) -> Option<Reason> {
        let config = &self.store.config;
        if cs.cluster_name.len() > config.max_name_bytes {
            return Some(Reason::NameTooLong);
        }
        if let Some(d) = &cs.load_report_interval
            && (d.seconds < 0 || d.nanos < 0 || d.seconds as u64 > config.max_interval.as_secs())
        {
            return Some(Reason::BadInterval);
        }
        if let Some(only) = &self.only
            && !only.contains(&cs.cluster_name)
        {
            return Some(Reason::UnknownCluster);
        }
        None
    }

    /// Adds one report's cluster stats to the stream's load, at `now`. Everything the peer
    /// sent is bounded here: names, interval, clusters per stream, localities per cluster
    /// (rule: whatever a peer controls is bounded before it is stored); what does not fit is
    /// counted by reason and dropped. Each new cluster and locality is drawn from the store's
    /// budget first: when the budget cannot cover one, the rest of the report is not taken and
    /// the error says so (the stream is then ended; its state goes back when it is dropped).
    pub(crate) fn ingest(&self, stats: &[ClusterStats], now: Instant) -> Result<(), OverBudget> {
        let store = &*self.store;
        let config = &store.config;
        let epoch = store.epoch(now);
        store.reports.fetch_add(1, Ordering::Relaxed);
        let considered = stats.len().min(config.max_clusters_per_stream);
        // The labels of clusters this stream reports for the first time, decided before the
        // stream's lock is taken: the user's `known` predicate may read the view.
        let new: Vec<&str> = {
            let load = lock(&self.load);
            stats[..considered]
                .iter()
                .filter(|cs| self.refusal(cs).is_none())
                .map(|cs| cs.cluster_name.as_str())
                .filter(|n| !load.clusters.contains_key(*n))
                .collect()
        };
        let mut labels: HashMap<&str, Arc<str>> = HashMap::with_capacity(new.len());
        for name in new {
            if !labels.contains_key(name) {
                let eligible = (store.known)(name);
                labels.insert(name, store.cluster_labels.admit_if(name, eligible));
            }
        }
        let mut guard = lock(&self.load);
        let load = &mut *guard;
        if stats.len() > considered {
            store.gate.rejected.add(Reason::TooManyClusters, (stats.len() - considered) as u64);
        }
        for cs in &stats[..considered] {
            if let Some(reason) = self.refusal(cs) {
                store.gate.rejected.add(reason, 1);
                continue;
            }
            if !load.clusters.contains_key(cs.cluster_name.as_str()) {
                if load.clusters.len() >= config.max_clusters_per_stream {
                    store.gate.rejected.add(Reason::TooManyClusters, 1);
                    continue;
                }
                let charge = Charge { bytes: CLUSTER_BYTES + cs.cluster_name.len(), entries: 1 };
                if !store.budget.try_take(charge) {
                    drop(guard);
                    store.changed();
                    return Err(store.budget.over("LRS"));
                }
                load.charge.bytes += charge.bytes;
                load.charge.entries += charge.entries;
                let label = labels.get(cs.cluster_name.as_str()).cloned();
                let state = ClusterState {
                    label: label.unwrap_or_else(|| store.cluster_labels.admit_if(OTHER, false)),
                    dropped: Ring::default(),
                    localities: Vec::new(),
                };
                load.clusters.insert(Box::from(cs.cluster_name.as_str()), state);
            }
            let Some(cluster) = load.clusters.get_mut(cs.cluster_name.as_str()) else {
                continue;
            };
            let slot = cluster.dropped.slot(epoch);
            slot.dropped = slot.dropped.saturating_add(cs.total_dropped_requests);
            let localities = &cs.upstream_locality_stats;
            let considered = localities.len().min(config.max_localities_per_cluster);
            if localities.len() > considered {
                store
                    .gate
                    .rejected
                    .add(Reason::TooManyLocalities, (localities.len() - considered) as u64);
            }
            for ls in &localities[..considered] {
                let locality = ls.locality.as_ref();
                if locality_len(locality) > config.max_name_bytes {
                    store.gate.rejected.add(Reason::NameTooLong, 1);
                    continue;
                }
                let index = match cluster
                    .localities
                    .iter()
                    .position(|l| same_locality(&l.name, locality))
                {
                    Some(i) => i,
                    None if cluster.localities.len() >= config.max_localities_per_cluster => {
                        store.gate.rejected.add(Reason::TooManyLocalities, 1);
                        continue;
                    }
                    None => {
                        let charge =
                            Charge { bytes: LOCALITY_BYTES + locality_len(locality), entries: 1 };
                        if !store.budget.try_take(charge) {
                            drop(guard);
                            store.changed();
                            return Err(store.budget.over("LRS"));
                        }
                        load.charge.bytes += charge.bytes;
                        load.charge.entries += charge.entries;
                        let name = LocalityName::from(locality);
                        let label = store.locality_labels.admit(&name.label());
                        cluster.localities.push(LocalityState {
                            name,
                            label,
                            counts: Ring::default(),
                            in_progress: 0,
                        });
                        cluster.localities.len() - 1
                    }
                };
                let l = &mut cluster.localities[index];
                l.counts.slot(epoch).add(&Counts {
                    issued: ls.total_issued_requests,
                    succeeded: ls.total_successful_requests,
                    errors: ls.total_error_requests,
                    dropped: 0,
                });
                l.in_progress = ls.total_requests_in_progress;
            }
        }
        drop(guard);
        store.changed();
        Ok(())
    }
}

impl Drop for Registration {
    /// Takes the stream out of the view and gives its state and budget back at once: a reader
    /// may still hold the stream's entry for a moment, and the last cached view holds a copy
    /// of its load until the next read, so both are emptied here rather than left to them.
    fn drop(&mut self) {
        lock(&self.store.streams).remove(&self.id);
        let (clusters, charge) = {
            let mut load = lock(&self.load);
            (std::mem::take(&mut load.clusters), std::mem::take(&mut load.charge))
        };
        self.store.budget.give(charge);
        let cached = lock(&self.store.cached).take();
        // Freed with no lock held.
        drop((clusters, cached));
        self.store.changed();
    }
}
