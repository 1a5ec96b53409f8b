//! What the clients report and the coordinator measures: when each client first held the whole
//! configuration, and when each client held the new content of each updated resource.
//!
//! Clients write lock-free into per-client slots; the coordinator reads them. An update's expected
//! port is only known once the trigger answers, and a client may receive the new content before
//! that: each slot records the port and time the client got, and whichever side sees the match
//! second (client or coordinator) counts it, exactly once (compare-and-swap on the slot).
//!
//! It also keeps, per client, the port it holds of every cluster an update changes (to check the
//! final state), its stream sessions (to see reconnections), and counts what was sent again after
//! a reconnection. With churn, the coordinator asks clients to drop their stream ([`Tracker::kick`])
//! and the tracker times each one's way back.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

/// The clusters a client subscribes endpoints of: `count` cluster indices from `start`,
/// wrapping at the number of clusters (indices are `0..clusters`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Subset {
    /// The first index.
    pub start: u32,
    /// How many.
    pub count: u32,
    /// The number of clusters.
    pub clusters: u32,
}

impl Subset {
    /// Client `client`'s subset of `clusters` when each client takes `per_client` of them
    /// (0: all): consecutive blocks, so that the clients together cover as many as possible.
    pub fn of(client: usize, per_client: usize, clusters: usize) -> Self {
        let c = u32::try_from(clusters).unwrap_or(u32::MAX);
        if per_client == 0 || per_client >= clusters {
            return Subset { start: 0, count: c, clusters: c };
        }
        let start = (client as u64 * per_client as u64 % clusters as u64) as u32;
        Subset { start, count: per_client as u32, clusters: c }
    }

    /// Whether cluster `index` is in the subset.
    pub fn contains(&self, index: u32) -> bool {
        index < self.clusters
            && (u64::from(index) + u64::from(self.clusters) - u64::from(self.start))
                % u64::from(self.clusters)
                < u64::from(self.count)
    }

    /// The indices, in subscription order.
    pub fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.count).map(|j| {
            ((u64::from(self.start) + u64::from(j)) % u64::from(self.clusters.max(1))) as u32
        })
    }
}

/// Set in a slot once the client's content was counted as converged.
const COUNTED: u64 = 1 << 31;
/// The largest latency a slot stores, in microseconds (~35 minutes).
const MAX_MICROS: u64 = COUNTED - 1;

/// One update: cluster `cluster` gets new content (the port the trigger answers).
#[derive(Debug)]
pub struct Update {
    /// The cluster index.
    pub cluster: u32,
    /// When the trigger was sent, in microseconds since the tracker's start.
    t0: AtomicU64,
    /// The port the trigger answered (0 until then).
    port: AtomicU32,
    /// Clients counted as holding the new content.
    converged: AtomicUsize,
    /// Per client: `port << 32 | COUNTED? | micros after t0` of the content it got, 0 for none.
    seen: Box<[AtomicU64]>,
}

impl Update {
    fn try_count(&self, client: usize) {
        let target = u64::from(self.port.load(SeqCst));
        if target == 0 {
            return;
        }
        let slot = &self.seen[client];
        let mut old = slot.load(SeqCst);
        while old & COUNTED == 0 && old >> 32 == target {
            match slot.compare_exchange(old, old | COUNTED, SeqCst, SeqCst) {
                Ok(_) => {
                    self.converged.fetch_add(1, SeqCst);
                    return;
                }
                Err(now) => old = now,
            }
        }
    }

    /// The number of clients counted as converged.
    pub fn converged(&self) -> usize {
        self.converged.load(SeqCst)
    }

    /// The latency of each converged client, in microseconds, and the clients that did not
    /// converge among `expected`.
    pub fn latencies(&self, expected: impl Iterator<Item = usize>) -> (Vec<u32>, Vec<usize>) {
        let (mut done, mut missing) = (Vec::new(), Vec::new());
        for c in expected {
            let w = self.seen[c].load(SeqCst);
            if w & COUNTED != 0 {
                done.push((w & MAX_MICROS) as u32);
            } else {
                missing.push(c);
            }
        }
        (done, missing)
    }
}

/// The updates of a run and which cluster each one is in flight for.
#[derive(Debug)]
struct Updates {
    /// Per cluster index: the number (+1) of the update in flight for it, 0 for none.
    active: Box<[AtomicU32]>,
    list: Box<[Update]>,
    /// Per cluster index: its row in `held` if an update changes it, `NOT_PLANNED` if none does.
    row_of: Box<[u32]>,
    /// Row by client: the port each client last got for each cluster an update changes (0: none).
    held: Box<[AtomicU32]>,
}

/// In `Updates::row_of`: no update changes the cluster.
const NOT_PLANNED: u32 = u32::MAX;

/// A client's stream sessions.
#[derive(Debug, Default)]
struct Sessions {
    /// Streams established so far.
    opened: AtomicU32,
    /// Whether the current one is up.
    up: AtomicBool,
    /// The stream (its number in `opened`) whose first response arrived last: the current
    /// stream is synced when this equals `opened`. Any type counts: a SotW client resuming at
    /// the Cluster version it holds is rightly sent no Cluster response (silence says it is
    /// current); the answer to its endpoint subscription is the stream's first.
    synced: AtomicU32,
    /// When the last stream broke / got its first response: microseconds from the
    /// tracker's start, +1 (0: never).
    down_at: AtomicU64,
    synced_at: AtomicU64,
    /// The index (in the server list) of the server of the current or last stream.
    server: AtomicU32,
    /// The stream (its number in `opened`) the coordinator asked the client to drop (0: none):
    /// a request that comes late, for a stream that broke meanwhile, drops nothing.
    kick: AtomicU32,
    /// When the coordinator asked for the drop: microseconds from the tracker's start, +1 (0: no
    /// drop awaits its new stream's first response).
    kicked_at: AtomicU64,
    /// Wakes the client's stream when a drop is asked for.
    wake: tokio::sync::Notify,
}

/// Shared by the clients and the coordinator.
#[derive(Debug)]
pub struct Tracker {
    start: Instant,
    clients: usize,
    /// The last `stuck` clients stop reading once they hold the initial configuration.
    stuck: usize,
    ready: AtomicUsize,
    /// When each client held everything.
    ready_at: FirstTimes,
    /// When each client got its first Cluster response (with the join gate, when its turn came).
    first_cds_at: FirstTimes,
    clusters: AtomicUsize,
    failed: AtomicUsize,
    errors: Mutex<Vec<String>>,
    messages: AtomicU64,
    bytes: AtomicU64,
    updates: OnceLock<Updates>,
    sessions: Box<[Sessions]>,
    /// Streams re-established after a broken one, by every client.
    reconnects: AtomicU64,
    /// Resources received after a reconnection that the client already held at that version.
    resent: AtomicU64,
    /// Of those, Clusters (a full-state type: never owed again to a client resuming at its
    /// version, SotW or delta).
    resent_clusters: AtomicU64,
    /// Resources received on a resumed stream before the next update began that the client did
    /// not hold at that version: what the client missed while away (legitimately sent).
    resumed_new: AtomicU64,
    /// Streams dropped on the coordinator's request (churn).
    kicks: AtomicU64,
    /// Per drop whose new stream got its first response: microseconds from the drop to it.
    resync_us: Mutex<Vec<u32>>,
    /// Updates begun so far: a resumed stream's first responses come before the next one.
    begun: AtomicU64,
}

/// Per client, the first time something happened: microseconds from the start, +1 (0: not yet).
#[derive(Debug)]
struct FirstTimes(Box<[AtomicU64]>);

impl FirstTimes {
    fn new(clients: usize) -> Self {
        FirstTimes((0..clients).map(|_| AtomicU64::new(0)).collect())
    }

    /// Records `now_us` for `client` unless a time is recorded already; whether it was first.
    fn record(&self, client: usize, now_us: u64) -> bool {
        self.0
            .get(client)
            .is_some_and(|t| t.compare_exchange(0, now_us + 1, SeqCst, SeqCst).is_ok())
    }

    /// The recorded times, in client order.
    fn times(&self) -> Vec<u64> {
        self.0.iter().map(|t| t.load(SeqCst)).filter(|&t| t > 0).map(|t| t - 1).collect()
    }
}

fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Tracker {
    /// A tracker for `clients` clients of which the last `stuck` stop reading once they hold the
    /// initial configuration; its clock starts now.
    pub fn new(clients: usize, stuck: usize) -> Self {
        Tracker {
            start: Instant::now(),
            clients,
            stuck: stuck.min(clients),
            ready: AtomicUsize::new(0),
            ready_at: FirstTimes::new(clients),
            first_cds_at: FirstTimes::new(clients),
            clusters: AtomicUsize::new(0),
            failed: AtomicUsize::new(0),
            errors: Mutex::new(Vec::new()),
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            updates: OnceLock::new(),
            sessions: (0..clients).map(|_| Sessions::default()).collect(),
            reconnects: AtomicU64::new(0),
            resent: AtomicU64::new(0),
            resent_clusters: AtomicU64::new(0),
            resumed_new: AtomicU64::new(0),
            kicks: AtomicU64::new(0),
            resync_us: Mutex::new(Vec::new()),
            begun: AtomicU64::new(0),
        }
    }

    /// Whether `client` is one of the stuck ones (the last `stuck` ids).
    pub fn is_stuck(&self, client: usize) -> bool {
        client >= self.clients - self.stuck
    }

    /// The number of stuck clients.
    pub fn stuck(&self) -> usize {
        self.stuck
    }

    /// A client's stream is established (the server answered its headers).
    pub fn stream_up(&self, client: usize) {
        let s = &self.sessions[client];
        if s.opened.fetch_add(1, SeqCst) > 0 {
            self.reconnects.fetch_add(1, SeqCst);
        }
        s.up.store(true, SeqCst);
    }

    /// A client's stream or connection broke (it may reconnect).
    pub fn stream_down(&self, client: usize) {
        let s = &self.sessions[client];
        if s.up.swap(false, SeqCst) {
            s.down_at.store(self.now_us() + 1, SeqCst);
        }
    }

    /// A client is about to open a stream to server `server` (an index in the server list).
    pub fn on_server(&self, client: usize, server: usize) {
        self.sessions[client].server.store(u32::try_from(server).unwrap_or(u32::MAX), SeqCst);
    }

    /// The server (index in the server list) of a client's current or last stream.
    pub fn server_of(&self, client: usize) -> usize {
        self.sessions[client].server.load(SeqCst) as usize
    }

    /// When `client`'s last stream broke, in microseconds since the start.
    pub fn down_at(&self, client: usize) -> Option<u64> {
        self.sessions[client].down_at.load(SeqCst).checked_sub(1)
    }

    /// If `client` established a stream after its `before`-th, that stream is up and it got its
    /// first response: when that response came, in microseconds since the start.
    pub fn synced_since(&self, client: usize, before: u32) -> Option<u64> {
        let s = &self.sessions[client];
        let opened = s.opened.load(SeqCst);
        let synced = s.up.load(SeqCst) && opened > before && s.synced.load(SeqCst) == opened;
        synced.then(|| s.synced_at.load(SeqCst).saturating_sub(1))
    }

    /// Per client: the number of streams established so far.
    pub fn sessions(&self) -> Vec<u32> {
        self.sessions.iter().map(|s| s.opened.load(SeqCst)).collect()
    }

    /// Whether `client` established a stream after its `before`-th and that stream is up.
    pub fn reconnected(&self, client: usize, before: u32) -> bool {
        let s = &self.sessions[client];
        s.up.load(SeqCst) && s.opened.load(SeqCst) > before
    }

    /// Streams re-established after a broken one, by every client.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(SeqCst)
    }

    /// A client received, after a reconnection, `n` resources it already held at that version.
    pub fn resent(&self, n: u64) {
        self.resent.fetch_add(n, SeqCst);
    }

    /// Resources sent again after reconnections, by every client.
    pub fn resent_total(&self) -> u64 {
        self.resent.load(SeqCst)
    }

    /// A client received, after a reconnection, `n` Clusters it already held at that version.
    pub fn resent_clusters(&self, n: u64) {
        self.resent(n);
        self.resent_clusters.fetch_add(n, SeqCst);
    }

    /// Clusters sent again after reconnections, by every client.
    pub fn resent_clusters_total(&self) -> u64 {
        self.resent_clusters.load(SeqCst)
    }

    /// A client received, on a resumed stream before the next update began, `n` resources it did
    /// not hold at that version.
    pub fn resumed_new(&self, n: u64) {
        self.resumed_new.fetch_add(n, SeqCst);
    }

    /// Resources sent new or changed on resumed streams, by every client.
    pub fn resumed_new_total(&self) -> u64 {
        self.resumed_new.load(SeqCst)
    }

    /// Updates begun so far.
    pub fn updates_begun(&self) -> u64 {
        self.begun.load(SeqCst)
    }

    /// Asks `client` to drop its stream and connection and reconnect at once (churn). Only a
    /// client whose stream is up and answered is asked (one still on its way back is left
    /// alone), and never a stuck one; whether it was asked.
    pub fn kick(&self, client: usize) -> bool {
        let Some(s) = self.sessions.get(client) else { return false };
        let opened = s.opened.load(SeqCst);
        if self.is_stuck(client)
            || !s.up.load(SeqCst)
            || opened == 0
            || s.synced.load(SeqCst) != opened
            || s.kick.load(SeqCst) == opened
        {
            return false;
        }
        s.kicked_at.store(self.now_us() + 1, SeqCst);
        s.kick.store(opened, SeqCst);
        s.wake.notify_one();
        self.kicks.fetch_add(1, SeqCst);
        true
    }

    /// Resolves once the coordinator asks `client` to drop its stream number `session`.
    pub async fn kicked(&self, client: usize, session: u32) {
        let s = &self.sessions[client];
        // A wake-up with no waiter is kept for the next wait: no request is missed between the
        // check and the wait. One meant for an earlier stream is skipped.
        while s.kick.load(SeqCst) != session {
            s.wake.notified().await;
        }
    }

    /// Streams dropped on the coordinator's request.
    pub fn kicks(&self) -> u64 {
        self.kicks.load(SeqCst)
    }

    /// Per drop whose new stream was answered: microseconds from the drop to its first
    /// response, sorted.
    pub fn resync_times(&self) -> Vec<u32> {
        let mut times = self.resync_us.lock().unwrap_or_else(PoisonError::into_inner).clone();
        times.sort_unstable();
        times
    }

    /// Microseconds since the tracker started.
    pub fn now_us(&self) -> u64 {
        micros(self.start.elapsed())
    }

    /// The number of clients.
    pub fn clients(&self) -> usize {
        self.clients
    }

    /// A client received a message of `len` bytes.
    pub fn received(&self, len: usize) {
        self.messages.fetch_add(1, SeqCst);
        self.bytes.fetch_add(len as u64, SeqCst);
    }

    /// Messages and bytes received so far, by every client.
    pub fn traffic(&self) -> (u64, u64) {
        (self.messages.load(SeqCst), self.bytes.load(SeqCst))
    }

    /// A client now holds every cluster and every subscribed ClusterLoadAssignment.
    pub fn client_ready(&self, client: usize, clusters: usize) {
        self.clusters.fetch_max(clusters, SeqCst);
        if self.ready_at.record(client, self.now_us()) {
            self.ready.fetch_add(1, SeqCst);
        }
    }

    /// A client got a Cluster response: its first one counts for the storm.
    pub fn cds_received(&self, client: usize) {
        self.first_cds_at.record(client, self.now_us());
    }

    /// A client got a response of any type: the first one of each stream marks that stream
    /// synced.
    pub fn answered(&self, client: usize) {
        let s = &self.sessions[client];
        let opened = s.opened.load(SeqCst);
        if s.synced.load(SeqCst) != opened {
            let now = self.now_us();
            s.synced_at.store(now + 1, SeqCst);
            s.synced.store(opened, SeqCst);
            if let Some(kicked) = s.kicked_at.swap(0, SeqCst).checked_sub(1) {
                let us = u32::try_from(now.saturating_sub(kicked)).unwrap_or(u32::MAX);
                self.resync_us.lock().unwrap_or_else(PoisonError::into_inner).push(us);
            }
        }
    }

    /// When each client got its first Cluster response, in microseconds since the start.
    pub fn first_cds_times(&self) -> Vec<u64> {
        self.first_cds_at.times()
    }

    /// How many clients hold everything.
    pub fn ready(&self) -> usize {
        self.ready.load(SeqCst)
    }

    /// When each ready client got ready, in microseconds since the start.
    pub fn ready_times(&self) -> Vec<u64> {
        self.ready_at.times()
    }

    /// The most clusters a client reported.
    pub fn clusters(&self) -> usize {
        self.clusters.load(SeqCst)
    }

    /// A client failed: its stream broke (without `--reconnect`) or it cannot go on.
    pub fn client_failed(&self, client: usize, error: String) {
        self.failed.fetch_add(1, SeqCst);
        let mut errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        if errors.len() < 5 {
            errors.push(format!("client load-{client}: {error}"));
        }
    }

    /// The number of failed clients and the first few errors.
    pub fn failures(&self) -> (usize, Vec<String>) {
        let errors = self.errors.lock().unwrap_or_else(PoisonError::into_inner).clone();
        (self.failed.load(SeqCst), errors)
    }

    /// Prepares the updates: update `u` changes cluster `clusters_of[u]`. Call once, before any
    /// [`begin`](Self::begin).
    pub fn plan(&self, clusters: usize, clusters_of: &[u32]) {
        let list = clusters_of
            .iter()
            .map(|&cluster| Update {
                cluster,
                t0: AtomicU64::new(0),
                port: AtomicU32::new(0),
                converged: AtomicUsize::new(0),
                seen: (0..self.clients).map(|_| AtomicU64::new(0)).collect(),
            })
            .collect();
        let active = (0..clusters).map(|_| AtomicU32::new(0)).collect();
        let mut row_of = vec![NOT_PLANNED; clusters].into_boxed_slice();
        let mut rows = 0;
        for &k in clusters_of {
            if let Some(row) = row_of.get_mut(k as usize)
                && *row == NOT_PLANNED
            {
                *row = rows;
                rows += 1;
            }
        }
        let held = (0..rows as usize * self.clients).map(|_| AtomicU32::new(0)).collect();
        let _ = self.updates.set(Updates { active, list, row_of, held });
    }

    /// The port `client` last got for `cluster`, if an update changes that cluster (0: none yet).
    pub fn held_port(&self, client: usize, cluster: u32) -> Option<u32> {
        let ups = self.updates.get()?;
        let row = *ups.row_of.get(cluster as usize)?;
        (row != NOT_PLANNED).then(|| ups.held[row as usize * self.clients + client].load(SeqCst))
    }

    /// Update `u`.
    pub fn update(&self, u: usize) -> Option<&Update> {
        self.updates.get()?.list.get(u)
    }

    /// Whether an update is in flight for `cluster`.
    pub fn cluster_busy(&self, cluster: u32) -> bool {
        self.updates
            .get()
            .and_then(|ups| ups.active.get(cluster as usize))
            .is_some_and(|a| a.load(SeqCst) != 0)
    }

    /// Update `u`'s trigger is about to be sent: from now on clients record its cluster.
    pub fn begin(&self, u: usize) {
        let Some(ups) = self.updates.get() else { return };
        let Some(up) = ups.list.get(u) else { return };
        up.t0.store(self.now_us(), SeqCst);
        if let Some(a) = ups.active.get(up.cluster as usize) {
            a.store(u as u32 + 1, SeqCst);
        }
        self.begun.fetch_add(1, SeqCst);
    }

    /// Update `u`'s trigger answered `port`: count the clients that already hold it.
    pub fn set_port(&self, u: usize, port: u32) {
        let Some(up) = self.update(u) else { return };
        up.port.store(port, SeqCst);
        for c in 0..self.clients {
            up.try_count(c);
        }
    }

    /// Update `u` is over (converged, failed or timed out): clients stop recording it.
    pub fn end(&self, u: usize) {
        let Some(ups) = self.updates.get() else { return };
        let Some(up) = ups.list.get(u) else { return };
        if let Some(a) = ups.active.get(up.cluster as usize) {
            let _ = a.compare_exchange(u as u32 + 1, 0, SeqCst, SeqCst);
        }
    }

    /// A client received ClusterLoadAssignment `cluster` with `port`.
    pub fn on_cla(&self, client: usize, cluster: u32, port: u32) {
        let Some(ups) = self.updates.get() else { return };
        if let Some(&row) = ups.row_of.get(cluster as usize)
            && row != NOT_PLANNED
        {
            ups.held[row as usize * self.clients + client].store(port, SeqCst);
        }
        let Some(active) = ups.active.get(cluster as usize) else { return };
        let u = active.load(SeqCst);
        if u == 0 {
            return;
        }
        let up = &ups.list[u as usize - 1];
        let elapsed = self.now_us().saturating_sub(up.t0.load(SeqCst)).min(MAX_MICROS);
        let word = u64::from(port) << 32 | elapsed;
        let slot = &up.seen[client];
        let mut old = slot.load(SeqCst);
        // The first receipt of a port keeps its time.
        while old >> 32 != u64::from(port) {
            match slot.compare_exchange(old, word, SeqCst, SeqCst) {
                Ok(_) => break,
                Err(now) => old = now,
            }
        }
        up.try_count(client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsets_cover_the_clusters_in_blocks() {
        let s = Subset::of(3, 4, 10);
        assert_eq!(s.indices().collect::<Vec<_>>(), [2, 3, 4, 5]);
        assert!(s.contains(2) && s.contains(5) && !s.contains(6) && !s.contains(1));
        let wrap = Subset::of(2, 4, 10);
        assert_eq!(wrap.indices().collect::<Vec<_>>(), [8, 9, 0, 1]);
        assert!(wrap.contains(0) && wrap.contains(9) && !wrap.contains(2));
        assert_eq!(Subset::of(7, 0, 5).indices().count(), 5);
        assert!(Subset::of(7, 0, 5).contains(4) && !Subset::of(7, 0, 5).contains(5));
    }

    #[test]
    fn a_port_is_counted_once_whoever_sees_it_first() {
        let t = Tracker::new(3, 0);
        t.plan(4, &[2]);
        t.begin(0);
        t.on_cla(0, 2, 10001); // before the trigger answered
        t.on_cla(1, 2, 9999); // other content
        t.set_port(0, 10001);
        let up = t.update(0).unwrap();
        assert_eq!(up.converged(), 1);
        t.on_cla(0, 2, 10001); // again: not counted twice
        t.on_cla(1, 2, 10001);
        t.on_cla(2, 3, 10001); // another cluster: ignored
        assert_eq!(up.converged(), 2);
        let (done, missing) = up.latencies(0..3);
        assert_eq!((done.len(), missing), (2, vec![2]));
        t.end(0);
        assert!(!t.cluster_busy(2));
        assert_eq!(t.held_port(1, 2), Some(10001));
        assert_eq!(t.held_port(2, 2), Some(0));
        assert_eq!(t.held_port(0, 3), None, "no update changes cluster 3");
    }

    #[test]
    fn sessions_count_reconnections() {
        let t = Tracker::new(2, 1);
        assert!(!t.is_stuck(0) && t.is_stuck(1));
        t.stream_up(0);
        let before = t.sessions();
        assert!(!t.reconnected(0, before[0]));
        t.stream_down(0);
        assert!(t.down_at(0).is_some());
        t.on_server(0, 2);
        t.stream_up(0);
        assert!(t.reconnected(0, before[0]));
        assert_eq!(t.reconnects(), 1);
        assert_eq!(t.server_of(0), 2);
        assert_eq!(t.synced_since(0, before[0]), None, "no response on the new stream");
        t.cds_received(0);
        assert_eq!(t.synced_since(0, before[0]), None, "the storm's count is not the stream's");
        t.answered(0);
        assert!(t.synced_since(0, before[0]).is_some());
        assert_eq!(t.synced_since(0, before[0] + 1), None, "no stream after that one");
    }

    #[tokio::test]
    async fn a_kick_drops_the_current_stream_only_and_times_the_way_back() {
        let t = Tracker::new(2, 1);
        assert!(!t.kick(0), "no stream yet");
        t.stream_up(0);
        assert!(!t.kick(0), "not answered yet");
        t.answered(0);
        assert!(!t.kick(1), "a stuck client is never dropped");
        assert!(t.kick(0));
        assert!(!t.kick(0), "asked once per stream");
        tokio::time::timeout(std::time::Duration::from_secs(1), t.kicked(0, 1))
            .await
            .expect("the stream asked to drop is woken");
        t.stream_down(0);
        t.stream_up(0);
        let later = tokio::time::timeout(std::time::Duration::from_millis(50), t.kicked(0, 2));
        assert!(later.await.is_err(), "the new stream is not dropped by the old request");
        assert!(t.resync_times().is_empty());
        t.answered(0);
        assert_eq!((t.kicks(), t.resync_times().len()), (1, 1));
    }
}
