//! The etcd source: a mirror of a key prefix, kept at one etcd revision, and the task that keeps
//! it current.
//!
//! The [`Mirror`] is sans-IO: it is fed a full read ([`Mirror::load`]) or one revision's events
//! ([`Mirror::apply`]) and answers with what to serve. [`EtcdSource::run`] drives it from etcd:
//! a consistent read of the prefix at one revision, then a watch from the next revision, each
//! revision applied whole (revisions received faster than they apply are applied together, at
//! the newest); a broken watch resumes from the revision after the last one applied; a compacted
//! one (the history it needs is gone) falls back to a full read. While the watch is open, etcd
//! is probed (see [`Probe`]): a hung etcd leaves a watch silent, not broken.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use xds_cache::{
    CHECKED_REFERENCES, ConsistencyError, MissingReference, Snapshot, SnapshotBuilder,
    SnapshotCache,
};
use xds_proto::{EncodedResource, TypeUrl, references_of_encoded};

use crate::layout::{Key, ResourceKey, decode_value};
use crate::wire::watch_request::RequestUnion;
use crate::wire::{
    EVENT_DELETE, EtcdClient, Event, KeyValue, Probed, WatchProgressRequest, WatchRequest,
    WatchResponse,
};

/// The group served to nodes no other group names.
pub const DEFAULT_GROUP: &str = "";

/// One stored key, read once when it changes.
type Entry = Result<Stored, String>;

/// A valid key.
#[derive(Debug)]
enum Stored {
    /// A resource of a group.
    Resource(ResourceKey, EncodedResource),
    /// A named group's marker: the group exists even with no resource.
    Group(String),
    /// The publisher's bookkeeping (the deployment marker, the publish guard): served by no
    /// group, but it makes the prefix not empty.
    Reserved,
}

/// What a revision changed in the served state.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Change {
    /// Groups whose snapshot is new (every group, after a full read).
    pub changed: BTreeSet<String>,
    /// Groups no key names any more.
    pub removed: BTreeSet<String>,
}

/// One resource added, changed or removed by a revision, in a group.
#[derive(Debug)]
struct Edit {
    type_url: TypeUrl,
    name: String,
    /// The new version; `None`: removed.
    resource: Option<EncodedResource>,
}

/// The prefix's keys as of one revision, and the last state that was valid as a whole.
///
/// Applying a revision costs O(keys it changed), not O(keys stored): the mirror keeps which keys
/// are invalid and how many keys name each group, and derives each touched group's snapshot from
/// the one it serves ([`Snapshot::to_builder`]), checking only the references the change can
/// break (rule O3): those of the resources it adds or changes, and, only when it removes a
/// resource that references name (an assignment, a route configuration, an LEDS member), the
/// whole group. After a rejected revision the next one rebuilds every group from the keys.
#[derive(Debug)]
pub struct Mirror {
    prefix: String,
    entries: BTreeMap<Vec<u8>, Entry>,
    /// The keys whose entry is invalid.
    invalid: BTreeSet<Vec<u8>>,
    /// How many valid keys name each group (resources and the group's marker).
    named: BTreeMap<String, usize>,
    /// What the revisions since the last evaluation did, by group, in order.
    edits: BTreeMap<String, Vec<Edit>>,
    revision: i64,
    served: Option<BTreeMap<String, Snapshot>>,
    /// The last evaluation failed: the next one rebuilds every group.
    failing: bool,
}

impl Mirror {
    /// An empty mirror of `prefix` (which ends with `/`, see
    /// [`normalize_prefix`](crate::layout::normalize_prefix)).
    pub fn new(prefix: &str) -> Mirror {
        Mirror {
            prefix: prefix.to_owned(),
            entries: BTreeMap::new(),
            invalid: BTreeSet::new(),
            named: BTreeMap::new(),
            edits: BTreeMap::new(),
            revision: 0,
            served: None,
            failing: false,
        }
    }

    /// The revision the mirror reflects (0 before the first read).
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// The snapshots served, by group: the last valid state (`None` before one was valid).
    pub fn served(&self) -> Option<&BTreeMap<String, Snapshot>> {
        self.served.as_ref()
    }

    fn read(&self, kv: &KeyValue) -> Entry {
        let shown = || String::from_utf8_lossy(&kv.key).into_owned();
        match Key::parse(&self.prefix, &kv.key)? {
            Key::Group(group) if kv.value.is_empty() => Ok(Stored::Group(group)),
            Key::Group(_) => Err(format!("{}: a group marker's value must be empty", shown())),
            Key::Reserved(_) => Ok(Stored::Reserved),
            Key::Resource(key) => {
                let resource =
                    decode_value(&key, &kv.value).map_err(|e| format!("{}: {e}", shown()))?;
                Ok(Stored::Resource(key, resource))
            }
        }
    }

    /// Puts `entry` at `key` (or removes the key), keeping the indexes and recording the edit.
    fn set(&mut self, key: Vec<u8>, entry: Option<Entry>) {
        if let Some(old) = self.entries.remove(&key) {
            self.account(&key, &old, -1);
            if let Ok(Stored::Resource(k, r)) = old {
                let edit = Edit { type_url: r.type_url().clone(), name: k.name, resource: None };
                self.edits.entry(k.group).or_default().push(edit);
            }
        }
        let Some(entry) = entry else { return };
        self.account(&key, &entry, 1);
        match &entry {
            Ok(Stored::Resource(k, r)) => {
                let edit = Edit {
                    type_url: r.type_url().clone(),
                    name: r.name().to_owned(),
                    resource: Some(r.clone()),
                };
                self.edits.entry(k.group.clone()).or_default().push(edit);
            }
            Ok(Stored::Group(group)) => {
                self.edits.entry(group.clone()).or_default();
            }
            Ok(Stored::Reserved) | Err(_) => {}
        }
        self.entries.insert(key, entry);
    }

    fn account(&mut self, key: &[u8], entry: &Entry, delta: isize) {
        let group = match entry {
            Err(_) if delta > 0 => {
                self.invalid.insert(key.to_vec());
                return;
            }
            Err(_) => {
                self.invalid.remove(key);
                return;
            }
            Ok(Stored::Resource(k, _)) => &k.group,
            Ok(Stored::Group(group)) => group,
            Ok(Stored::Reserved) => return,
        };
        let count = self.named.entry(group.clone()).or_default();
        *count = count.saturating_add_signed(delta);
        if *count == 0 {
            self.named.remove(group);
            // The group's last key went: it is touched (removed).
            self.edits.entry(group.clone()).or_default();
        }
    }

    /// Replaces the mirror with a full read of the prefix at `revision`.
    ///
    /// # Errors
    ///
    /// The state at `revision` is invalid (a value that does not decode or validate, a group whose
    /// references are inconsistent, an empty prefix): the previous valid state stays served.
    pub fn load(&mut self, revision: i64, kvs: &[KeyValue]) -> Result<Change, String> {
        self.entries.clear();
        self.invalid.clear();
        self.named.clear();
        for kv in kvs {
            let entry = self.read(kv);
            self.set(kv.key.clone(), Some(entry));
        }
        self.revision = revision;
        self.failing = true;
        self.evaluate()
    }

    /// Applies the events of one revision, or of several consecutive ones in order (a whole
    /// transaction each: never part of one); the mirror is then at `revision`, the newest.
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load): the mirror moves to the revision, the served state does not.
    pub fn apply(&mut self, revision: i64, events: &[Event]) -> Result<Change, String> {
        for event in events {
            let Some(kv) = &event.kv else { continue };
            if event.r#type == EVENT_DELETE {
                self.set(kv.key.clone(), None);
            } else {
                let entry = self.read(kv);
                self.set(kv.key.clone(), Some(entry));
            }
        }
        self.revision = revision;
        self.evaluate()
    }

    /// Rebuilds the groups the edits touched (all of them after a failure or a full read);
    /// publishes the result only if every key is valid and every group consistent.
    fn evaluate(&mut self) -> Result<Change, String> {
        let result = self.check().and_then(|()| {
            if self.failing || self.served.is_none() {
                self.rebuild_all()
            } else {
                self.rebuild_touched()
            }
        });
        self.edits.clear();
        self.failing = result.is_err();
        result
    }

    fn check(&self) -> Result<(), String> {
        if let Some(first) = self.invalid.first() {
            let error = match self.entries.get(first) {
                Some(Err(e)) => e.clone(),
                _ => String::from_utf8_lossy(first).into_owned(),
            };
            let more = self.invalid.len() - 1;
            let tail =
                if more > 0 { format!(" (and {more} more invalid keys)") } else { String::new() };
            return Err(format!("{error}{tail}"));
        }
        if self.entries.is_empty() {
            // What another tool's `del --prefix` leaves (a publish always leaves its marker):
            // refused like an emptied configuration directory.
            return Err(format!(
                "the prefix {} is empty (not even the deployment marker a publish writes is \
                 left): refused like an emptied configuration directory; to serve no resources, \
                 publish an empty configuration",
                self.prefix
            ));
        }
        Ok(())
    }

    /// Every group from the keys: O(keys).
    fn rebuild_all(&mut self) -> Result<Change, String> {
        let mut builders: BTreeMap<String, SnapshotBuilder> = BTreeMap::new();
        builders.insert(DEFAULT_GROUP.to_owned(), SnapshotBuilder::default());
        for stored in self.entries.values().filter_map(|e| e.as_ref().ok()) {
            match stored {
                Stored::Resource(key, resource) => {
                    builders.entry(key.group.clone()).or_default().add_encoded(resource.clone());
                }
                Stored::Group(group) => {
                    builders.entry(group.clone()).or_default();
                }
                Stored::Reserved => {}
            }
        }
        let mut next = BTreeMap::new();
        let mut change = Change::default();
        for (group, builder) in builders {
            let snapshot = builder.build().map_err(|e| in_group(&group, &e))?;
            next.insert(group.clone(), snapshot);
            change.changed.insert(group);
        }
        for group in self.served.iter().flat_map(|s| s.keys()) {
            if !next.contains_key(group) {
                change.removed.insert(group.clone());
            }
        }
        self.served = Some(next);
        Ok(change)
    }

    /// The touched groups, each derived from the snapshot it serves: O(keys changed), plus one
    /// whole-group check where a referenced resource was removed.
    fn rebuild_touched(&mut self) -> Result<Change, String> {
        let served = self.served.as_ref().map_or_else(BTreeMap::new, Clone::clone);
        let mut next = served.clone();
        let mut change = Change::default();
        for (group, edits) in &self.edits {
            let present = group == DEFAULT_GROUP || self.named.contains_key(group);
            if !present {
                if next.remove(group).is_some() {
                    change.removed.insert(group.clone());
                }
                continue;
            }
            let mut builder =
                served.get(group).map_or_else(SnapshotBuilder::default, Snapshot::to_builder);
            let mut whole = false;
            let mut added = Vec::new();
            for edit in edits {
                match &edit.resource {
                    Some(resource) => {
                        builder.add_encoded(resource.clone());
                        added.push(resource.clone());
                    }
                    None => {
                        builder.remove(&edit.type_url, &edit.name);
                        whole |= is_referenced(&edit.type_url);
                    }
                }
            }
            let snapshot = builder.build_unchecked();
            if whole {
                snapshot.check_consistency().map_err(|e| in_group(group, &e))?;
            } else {
                check_references(&snapshot, &added).map_err(|e| in_group(group, &e))?;
            }
            next.insert(group.clone(), snapshot);
            change.changed.insert(group.clone());
        }
        self.served = Some(next);
        Ok(change)
    }
}

/// A group's consistency error, naming the group.
fn in_group(group: &str, error: &ConsistencyError) -> String {
    let shown = if group.is_empty() { "the default group" } else { group };
    format!("{shown}: {error}")
}

/// Whether resources of `type_url` are named by the references rule O3 checks.
fn is_referenced(type_url: &TypeUrl) -> bool {
    type_url.builtin().is_some_and(|t| CHECKED_REFERENCES.iter().any(|(_, to)| *to == t))
}

/// Rule O3 for the resources a change added or changed: each checked reference they make
/// resolves in `snapshot`. (What the change did not touch was consistent before it.)
fn check_references(
    snapshot: &Snapshot,
    added: &[EncodedResource],
) -> Result<(), ConsistencyError> {
    let mut missing = Vec::new();
    for resource in added {
        // The latest version only: a resource written twice in a batch is checked as it ends.
        if snapshot.get(resource.type_url(), resource.name()).map(EncodedResource::version)
            != Some(resource.version())
        {
            continue;
        }
        let Some(from) = resource.type_url().builtin() else { continue };
        if !CHECKED_REFERENCES.iter().any(|(f, _)| *f == from) {
            continue;
        }
        let references =
            references_of_encoded(resource.type_url(), resource.value()).unwrap_or_default();
        for reference in references {
            if CHECKED_REFERENCES.contains(&(from, reference.resource_type))
                && !snapshot.resolves(&reference)
            {
                let from_name = resource.name().to_owned();
                missing.push(MissingReference {
                    from_type: from,
                    from: from_name,
                    missing: reference,
                });
            }
        }
    }
    missing.sort();
    missing.dedup();
    if missing.is_empty() { Ok(()) } else { Err(ConsistencyError { missing }) }
}

/// What the source reports as it runs. The callback runs on the source's task with no lock held.
#[derive(Debug)]
pub enum SourceEvent<'a> {
    /// A valid revision is served: `groups` is the whole served state.
    Applied {
        /// The revision.
        revision: i64,
        /// Every group's snapshot.
        groups: &'a BTreeMap<String, Snapshot>,
        /// What changed.
        change: &'a Change,
    },
    /// A revision is invalid; the last valid state keeps serving.
    Rejected {
        /// The revision.
        revision: i64,
        /// Why.
        error: &'a str,
    },
    /// The watch is established (or etcd answers the probe again after it did not): every later
    /// revision will arrive. The replica is in sync.
    Synced {
        /// The revision the mirror reflects.
        revision: i64,
    },
    /// etcd cannot be reached, does not answer the probe in time, or the watch broke; the last
    /// valid state keeps serving and the source retries.
    Unreachable {
        /// The last revision applied.
        revision: i64,
        /// Why.
        error: String,
    },
    /// The watch's next revision was compacted away: a full read follows.
    Compacted {
        /// The revision the history now starts at.
        compact_revision: i64,
    },
    /// etcd answered the probe: how far behind it the served state is.
    Progress {
        /// The revision the mirror reflects.
        revision: i64,
        /// etcd's newest revision, as the probe read it.
        store_revision: i64,
        /// Revisions of etcd the watch has not yet shown to be applied (0 when caught up; it
        /// counts every revision of the store, other prefixes' included, until the watch
        /// confirms them).
        behind_revisions: i64,
        /// How long the oldest revision not yet confirmed applied has been in etcd (as seen by
        /// the probe: to within one probe interval).
        behind: Duration,
    },
}

/// How far a mirror is behind etcd. Sans-IO: time is a parameter. Three observations:
/// - the probe's readings: the store's newest revision, and the revision of this prefix's
///   publish guard key (every publish bumps it in its transaction), each at a time;
/// - each revision the mirror applied (a full read, or watch events);
/// - etcd's progress notifications: "every event up to this revision was sent".
///
/// A mirror is caught up to the revision it applied, and further to a progress notification's,
/// except while the probe has seen a publish the mirror has not applied. That exception is what
/// makes the lag honest against etcd before 3.4.24 and 3.5.8, which answers a progress request
/// at once with the store's revision, even while the watch still has events to send (etcd issue
/// 15220): there, a progress notification would report a replica minutes behind as caught up.
/// A publish is always seen; writes by other tools under the prefix without the guard count on
/// those old versions only once applied.
#[derive(Debug, Default)]
pub struct Lag {
    /// The newest revision the mirror applied.
    applied: i64,
    /// The newest revision a progress notification confirmed sent.
    progressed: i64,
    /// The newest revision of the publish guard the probe read.
    published: i64,
    /// The newest store revision the probe read.
    store: i64,
    /// Probe readings above the caught-up revision, oldest first: when etcd was first seen at a
    /// revision the mirror has not caught up to.
    pending: std::collections::VecDeque<(Instant, i64)>,
}

/// The most probe readings [`Lag`] keeps (the oldest decides the age; newer ones past the bound
/// replace the newest kept).
const MAX_LAG_READINGS: usize = 128;

impl Lag {
    /// The probe read, at `now`, store revision `store` and publish guard revision `published`.
    pub fn observed(&mut self, now: Instant, store: i64, published: i64) {
        self.store = self.store.max(store);
        self.published = self.published.max(published);
        self.settle();
        if store <= self.caught_up() || self.pending.back().is_some_and(|&(_, r)| r >= store) {
            return;
        }
        if self.pending.len() == MAX_LAG_READINGS {
            self.pending.pop_back();
        }
        self.pending.push_back((now, store));
    }

    /// The mirror holds every revision up to `revision` (a full read at it, or events through it).
    pub fn applied(&mut self, revision: i64) {
        self.applied = self.applied.max(revision);
        self.settle();
    }

    /// etcd says the watch was sent every event up to `revision`.
    pub fn progressed(&mut self, revision: i64) {
        self.progressed = self.progressed.max(revision);
        self.settle();
    }

    /// Every revision up to this one is applied, or concerned no key of the prefix.
    fn caught_up(&self) -> i64 {
        if self.published > self.applied { self.applied } else { self.applied.max(self.progressed) }
    }

    /// Drops the readings the mirror has caught up to.
    fn settle(&mut self) {
        let caught_up = self.caught_up();
        while self.pending.front().is_some_and(|&(_, r)| r <= caught_up) {
            self.pending.pop_front();
        }
    }

    /// Revisions and time behind, at `now`.
    pub fn behind(&self, now: Instant) -> (i64, Duration) {
        let caught_up = self.caught_up();
        let oldest = self.pending.iter().find(|&&(_, r)| r > caught_up);
        let age = oldest.map_or(Duration::ZERO, |&(at, _)| now.saturating_duration_since(at));
        ((self.store - caught_up).max(0), age)
    }
}

/// How the source probes etcd: a linearizable read of one key, keys only, every `interval`,
/// failing after `timeout`.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    /// Between two probes (at least 100 ms).
    pub interval: Duration,
    /// How long a probe may take before etcd counts as unreachable (at least 100 ms).
    pub timeout: Duration,
}

impl Default for Probe {
    /// Every 500 ms, 1 s timeout: a hung etcd shows within 1.5 s, its recovery within 0.5 s.
    fn default() -> Self {
        Probe { interval: Duration::from_millis(500), timeout: Duration::from_secs(1) }
    }
}

/// The most watch responses applied as one change: revisions that arrived faster than they
/// applied are applied together, at the newest one, but a bounded number at a time.
const MAX_BATCH_RESPONSES: usize = 1024;

/// Watches a prefix of an etcd cluster and reports each revision (see the module doc).
#[derive(Debug, Clone)]
pub struct EtcdSource {
    client: EtcdClient,
    prefix: String,
    max_backoff: Duration,
    probe: Probe,
}

impl EtcdSource {
    /// A source for `prefix` (normalized to end with `/`) read through `client`.
    pub fn new(client: EtcdClient, prefix: &str) -> EtcdSource {
        EtcdSource {
            client,
            prefix: crate::layout::normalize_prefix(prefix),
            max_backoff: Duration::from_secs(2),
            probe: Probe::default(),
        }
    }

    /// The longest pause between two attempts to reach etcd (default 2 s; the first is 100 ms,
    /// doubled each time).
    #[must_use]
    pub fn max_backoff(mut self, max: Duration) -> EtcdSource {
        self.max_backoff = max;
        self
    }

    /// How etcd is probed while the watch is open (see [`Probe`]; both bounds at least 100 ms).
    #[must_use]
    pub fn probe(mut self, probe: Probe) -> EtcdSource {
        let floor = Duration::from_millis(100);
        self.probe =
            Probe { interval: probe.interval.max(floor), timeout: probe.timeout.max(floor) };
        self
    }

    /// Runs forever, reporting to `on_event`. Drop the future (abort its task) to stop.
    pub async fn run(self, mut on_event: impl FnMut(SourceEvent<'_>) + Send) {
        let mut mirror = Mirror::new(&self.prefix);
        let mut lag = Lag::default();
        let mut backoff = Duration::from_millis(100);
        // Whether the mirror must be read in full (first start, or after a compaction).
        let mut reload = true;
        loop {
            if reload {
                match self.client.range_prefix(self.prefix.as_bytes()).await {
                    Ok(read) => {
                        let revision = read.header.map_or(0, |h| h.revision);
                        let result = mirror.load(revision, &read.kvs);
                        lag.applied(revision);
                        report(&mut on_event, &mirror, revision, result);
                        reload = false;
                    }
                    Err(e) => {
                        on_event(SourceEvent::Unreachable {
                            revision: mirror.revision(),
                            error: e.message().to_owned(),
                        });
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(self.max_backoff);
                        continue;
                    }
                }
            }
            match self.watch(&mut mirror, &mut lag, &mut on_event, &mut backoff).await {
                WatchEnd::Compacted => reload = true,
                WatchEnd::Broken(error) => {
                    on_event(SourceEvent::Unreachable { revision: mirror.revision(), error });
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.max_backoff);
                }
            }
        }
    }

    /// One probe, after `delay`: etcd's newest revision, or why it did not answer in time.
    async fn probe_after(&self, delay: Duration) -> Result<Probed, String> {
        tokio::time::sleep(delay).await;
        let key = crate::layout::guard_key(&self.prefix);
        self.client.probe(key.as_bytes(), self.probe.timeout).await.map_err(|e| {
            format!(
                "etcd did not answer a probe within {} ms: {}",
                self.probe.timeout.as_millis(),
                e.message()
            )
        })
    }

    /// One watch stream, from the revision after the mirror's, until it breaks. etcd is probed
    /// meanwhile: a watch of a hung etcd is silent, not broken, until the connection's keepalive
    /// gives up.
    async fn watch(
        &self,
        mirror: &mut Mirror,
        lag: &mut Lag,
        on_event: &mut (impl FnMut(SourceEvent<'_>) + Send),
        backoff: &mut Duration,
    ) -> WatchEnd {
        let (requests, mut stream) =
            match self.client.watch_prefix(self.prefix.as_bytes(), mirror.revision() + 1).await {
                Ok(opened) => opened,
                Err(e) => return WatchEnd::Broken(e.message().to_owned()),
            };
        let probe = self.probe_after(Duration::ZERO);
        tokio::pin!(probe);
        let mut answering = true;
        loop {
            let first = tokio::select! {
                message = stream.message() => message,
                result = &mut probe => {
                    match result {
                        Ok(Probed { store_revision, key_revision: published }) => {
                            if !answering {
                                answering = true;
                                on_event(SourceEvent::Synced { revision: mirror.revision() });
                            }
                            let now = Instant::now();
                            lag.observed(now, store_revision, published);
                            let (behind_revisions, behind) = lag.behind(now);
                            on_event(SourceEvent::Progress {
                                revision: mirror.revision(),
                                store_revision,
                                behind_revisions,
                                behind,
                            });
                        }
                        Err(error) => {
                            if answering {
                                answering = false;
                                on_event(SourceEvent::Unreachable {
                                    revision: mirror.revision(),
                                    error,
                                });
                            }
                        }
                    }
                    // Ask where the watch stands; etcd answers once it has sent everything. A
                    // request still queued is as good as a new one.
                    let progress = WatchRequest {
                        request_union: Some(RequestUnion::ProgressRequest(
                            WatchProgressRequest {},
                        )),
                    };
                    let _ = requests.try_send(progress);
                    probe.set(self.probe_after(self.probe.interval));
                    continue;
                }
            };
            let response: WatchResponse = match first {
                Ok(Some(response)) => response,
                Ok(None) => return WatchEnd::Broken("etcd closed the watch".into()),
                Err(e) => return WatchEnd::Broken(e.message().to_owned()),
            };
            // Responses already received are applied with this one, as one change at the newest
            // revision: a replica that fell behind catches up in one step, not one per revision.
            let mut batch = vec![response];
            while batch.len() < MAX_BATCH_RESPONSES && batch.last().is_some_and(|r| !r.created) {
                match tokio::time::timeout(Duration::ZERO, stream.message()).await {
                    Ok(Ok(Some(next))) => batch.push(next),
                    Ok(Ok(None)) | Ok(Err(_)) | Err(_) => break,
                }
            }
            if let Some(end) = self.apply(mirror, lag, on_event, backoff, batch) {
                return end;
            }
        }
    }

    /// Applies received watch responses as one change; `Some` when the watch ended.
    fn apply(
        &self,
        mirror: &mut Mirror,
        lag: &mut Lag,
        on_event: &mut (impl FnMut(SourceEvent<'_>) + Send),
        backoff: &mut Duration,
        batch: Vec<WatchResponse>,
    ) -> Option<WatchEnd> {
        let mut events: Vec<Event> = Vec::new();
        let mut end = None;
        for response in batch {
            if response.compact_revision != 0 {
                on_event(SourceEvent::Compacted { compact_revision: response.compact_revision });
                end = Some(WatchEnd::Compacted);
                break;
            }
            if response.canceled {
                end = Some(WatchEnd::Broken(format!(
                    "etcd cancelled the watch: {}",
                    response.cancel_reason
                )));
                break;
            }
            if response.created {
                *backoff = Duration::from_millis(100);
                on_event(SourceEvent::Synced { revision: mirror.revision() });
            } else if response.events.is_empty() {
                // A progress notification: every event up to its revision was sent (and the ones
                // before it in this batch are applied below, before anything else).
                if let Some(header) = &response.header {
                    lag.progressed(header.revision);
                }
            }
            events.extend(response.events);
        }
        // One response holds whole revisions, in order, and so does a run of responses: applied
        // together, they leave the mirror exactly at the newest revision.
        if let Some(revision) = events.last().and_then(|e| e.kv.as_ref()).map(|kv| kv.mod_revision)
        {
            let result = mirror.apply(revision, &events);
            lag.applied(revision);
            report(on_event, mirror, revision, result);
        }
        end
    }
}
enum WatchEnd {
    Compacted,
    Broken(String),
}

fn report(
    on_event: &mut (impl FnMut(SourceEvent<'_>) + Send),
    mirror: &Mirror,
    revision: i64,
    result: Result<Change, String>,
) {
    match (result, mirror.served()) {
        (Ok(change), Some(groups)) => {
            tracing::info!(revision, changed = change.changed.len(), "etcd revision applied");
            on_event(SourceEvent::Applied { revision, groups, change: &change });
        }
        (Ok(_), None) => {}
        (Err(error), _) => {
            tracing::error!(revision, %error, "etcd revision rejected; the last valid state keeps serving");
            on_event(SourceEvent::Rejected { revision, error: &error });
        }
    }
}

/// Serves an applied revision from `cache`: the changed groups' snapshots are set, removed
/// groups cleared. For a program whose grouping does not depend on which groups exist; the
/// file server also refreshes its group list and regroups.
pub fn publish_to_cache(
    cache: &SnapshotCache,
    groups: &BTreeMap<String, Snapshot>,
    change: &Change,
) {
    for group in &change.removed {
        cache.clear_snapshot(group);
    }
    for group in &change.changed {
        if let Some(snapshot) = groups.get(group) {
            cache.set_snapshot(group, snapshot.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use xds_proto::TypeUrl;
    use xds_proto::pb::envoy::config::cluster::v3::Cluster;

    fn put(key: &str, value: Vec<u8>, revision: i64) -> Event {
        Event {
            r#type: 0,
            kv: Some(KeyValue {
                key: key.into(),
                value,
                mod_revision: revision,
                ..Default::default()
            }),
        }
    }

    fn cluster(name: &str) -> Vec<u8> {
        EncodedResource::new(&Cluster { name: name.into(), ..Default::default() })
            .expect("encodes")
            .to_any()
            .encode_to_vec()
    }

    const CDS: &str = "envoy.config.cluster.v3.Cluster";

    #[test]
    fn an_invalid_revision_keeps_the_last_valid_state_and_a_fix_recovers() {
        let mut m = Mirror::new("/p/");
        let kv = KeyValue {
            key: format!("/p//{CDS}/a").into(),
            value: cluster("a"),
            ..Default::default()
        };
        let change = m.load(5, &[kv]).expect("valid");
        assert!(change.changed.contains(DEFAULT_GROUP));
        // Revision 6 writes a second key whose value names another resource: refused whole.
        let bad = [
            put(&format!("/p//{CDS}/b"), cluster("not-b"), 6),
            put(&format!("/p/g/{CDS}/c"), cluster("c"), 6),
        ];
        assert!(m.apply(6, &bad).unwrap_err().contains("names \"not-b\""));
        assert_eq!(m.revision(), 6);
        let served = m.served().expect("still served");
        assert_eq!(served.len(), 1, "group g of the refused revision is not served");
        assert_eq!(
            served[DEFAULT_GROUP]
                .resources(&TypeUrl::parse(&format!("type.googleapis.com/{CDS}")))
                .count(),
            1
        );
        // Revision 7 fixes the key: everything is served, group g included.
        let change = m.apply(7, &[put(&format!("/p//{CDS}/b"), cluster("b"), 7)]).expect("fixed");
        assert_eq!(change.changed, BTreeSet::from([String::new(), "g".to_owned()]));
        assert_eq!(m.served().expect("served")[DEFAULT_GROUP].len(), 2);
    }

    fn delete(key: &str) -> Event {
        Event { r#type: EVENT_DELETE, kv: Some(KeyValue { key: key.into(), ..Default::default() }) }
    }

    #[test]
    fn an_emptied_prefix_is_refused_and_the_last_state_kept() {
        let mut m = Mirror::new("/p/");
        assert!(m.load(1, &[]).unwrap_err().contains("is empty"), "never served: refused");
        assert!(m.served().is_none());
        m.apply(2, &[put(&format!("/p//{CDS}/a"), cluster("a"), 2)]).expect("valid");
        let error = m.apply(3, &[delete(&format!("/p//{CDS}/a"))]).unwrap_err();
        assert!(error.contains("/p/ is empty"), "{error}");
        assert_eq!(m.served().expect("kept")[DEFAULT_GROUP].len(), 1);
        // A prefix that holds only the publisher's marker is an empty configuration, served.
        let marker = crate::layout::deployment_key("/p/");
        m.apply(4, &[put(&marker, b"/p/".to_vec(), 4)]).expect("an empty configuration");
        assert_eq!(m.served().expect("served")[DEFAULT_GROUP].len(), 0);
        assert_eq!(m.served().expect("served").len(), 1, "the marker is no group");
    }

    fn eds(name: &str, service: &str) -> Vec<u8> {
        let mut cluster = xds_proto::builders::eds_cluster(name);
        cluster.eds_cluster_config.as_mut().expect("eds").service_name = service.into();
        EncodedResource::new(&cluster).expect("encodes").to_any().encode_to_vec()
    }

    fn assignment(name: &str) -> Vec<u8> {
        let cla = xds_proto::builders::endpoints(name, &[("10.0.0.1", 80)]);
        EncodedResource::new(&cla).expect("encodes").to_any().encode_to_vec()
    }

    const EDS: &str = "envoy.config.endpoint.v3.ClusterLoadAssignment";

    fn summary(groups: &BTreeMap<String, Snapshot>) -> BTreeMap<String, Vec<(String, String)>> {
        groups
            .iter()
            .map(|(g, s)| {
                let list = s
                    .types()
                    .flat_map(|t| s.resources(t))
                    .map(|r| (r.name().to_owned(), r.version().to_owned()))
                    .collect();
                (g.clone(), list)
            })
            .collect()
    }

    #[test]
    fn a_revision_is_applied_from_the_served_snapshot_and_agrees_with_a_full_read() {
        let mut m = Mirror::new("/p/");
        let mut kvs = vec![KeyValue {
            key: crate::layout::deployment_key("/p/").into(),
            value: b"/p/".to_vec(),
            ..Default::default()
        }];
        for i in 0..50 {
            let (c, a) = (format!("c{i}"), format!("a{i}"));
            kvs.push(KeyValue {
                key: format!("/p//{CDS}/{c}").into(),
                value: eds(&c, &a),
                ..Default::default()
            });
            kvs.push(KeyValue {
                key: format!("/p//{EDS}/{a}").into(),
                value: assignment(&a),
                ..Default::default()
            });
        }
        m.load(1, &kvs).expect("valid");
        let before = m.served().expect("served")[DEFAULT_GROUP].clone();
        // One assignment changes: the clusters' map is the served one, shared, not rebuilt.
        let change = m.apply(2, &[put(&format!("/p//{EDS}/a7"), assignment("a7"), 2)]);
        assert!(change.expect("valid").changed.contains(DEFAULT_GROUP));
        let after = &m.served().expect("served")[DEFAULT_GROUP];
        let cds = TypeUrl::parse(&format!("type.googleapis.com/{CDS}"));
        assert!(
            std::ptr::eq(
                before.get(&cds, "c3").expect("kept"),
                after.get(&cds, "c3").expect("kept")
            ),
            "an untouched type is shared with the served snapshot, not rebuilt"
        );

        // A cluster naming a missing assignment is refused (its own references are checked)...
        let error = m.apply(3, &[put(&format!("/p//{CDS}/x"), eds("x", "nope"), 3)]).unwrap_err();
        assert!(error.contains("\"nope\", which is missing"), "{error}");
        m.apply(4, &[delete(&format!("/p//{CDS}/x"))]).expect("fixed");
        // ...and so is removing an assignment a cluster still names (the whole group checked).
        let error = m.apply(5, &[delete(&format!("/p//{EDS}/a9"))]).unwrap_err();
        assert!(error.contains("\"a9\", which is missing"), "{error}");
        m.apply(6, &[delete(&format!("/p//{CDS}/c9"))]).expect("c9 gone too: consistent");

        // Many revisions applied as one batch end where a full read of the same keys does.
        let batch = [
            put(&format!("/p/g/{CDS}/c1"), eds("c1", "a1"), 7),
            put(&format!("/p/g/{EDS}/a1"), assignment("a1"), 7),
            delete(&format!("/p//{CDS}/c2")),
            put(&format!("/p//{CDS}/c2"), eds("c2", "a3"), 9),
            delete(&format!("/p//{CDS}/c4")),
        ];
        m.apply(9, &batch).expect("valid");
        let incremental = summary(m.served().expect("served"));
        let kvs: Vec<KeyValue> = m
            .entries
            .keys()
            .cloned()
            .map(|key| {
                let text = String::from_utf8(key.clone()).expect("utf-8");
                let value = if text.ends_with("@deployment") {
                    b"/p/".to_vec()
                } else if let Some(a) = text.strip_prefix(&format!("/p//{EDS}/")) {
                    assignment(a)
                } else if text == format!("/p//{CDS}/c2") {
                    eds("c2", "a3")
                } else if let Some(c) = text.strip_prefix(&format!("/p//{CDS}/")) {
                    eds(c, &format!("a{}", &c[1..]))
                } else if text == format!("/p/g/{CDS}/c1") {
                    eds("c1", "a1")
                } else {
                    assignment("a1")
                };
                KeyValue { key, value, ..Default::default() }
            })
            .collect();
        let mut full = Mirror::new("/p/");
        full.load(9, &kvs).expect("valid");
        assert_eq!(incremental, summary(full.served().expect("served")));
        assert_eq!(incremental["g"].len(), 2);
    }

    #[test]
    fn lag_is_the_age_of_the_oldest_revision_not_confirmed_applied() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut lag = Lag::default();
        lag.applied(10);
        lag.observed(at(0), 10, 10);
        assert_eq!(lag.behind(at(0)), (0, Duration::ZERO), "caught up");
        lag.observed(at(500), 12, 10);
        lag.observed(at(1000), 15, 10);
        assert_eq!(lag.behind(at(1200)), (5, Duration::from_millis(700)));
        // Revision 12 applied: the age is now that of the reading at 15.
        lag.applied(12);
        assert_eq!(lag.behind(at(1200)), (3, Duration::from_millis(200)));
        // Revisions 13 to 15 were other prefixes' writes: a progress notification says so.
        lag.progressed(15);
        assert_eq!(lag.behind(at(5000)), (0, Duration::ZERO));
        // Bounded: past MAX_LAG_READINGS the oldest is kept, the newest replaced.
        for i in 0..1000 {
            lag.observed(at(6000 + i), 16 + i as i64, 10);
        }
        assert_eq!(lag.pending.len(), MAX_LAG_READINGS);
        assert_eq!(lag.behind(at(7000)), (1000, Duration::from_millis(1000)));
    }

    /// etcd before 3.4.24 and 3.5.8 answers a progress request with the store's revision while
    /// the watch still has events to send: a publish the probe saw keeps the mirror behind until
    /// it is applied, whichever comes first.
    #[test]
    fn a_progress_notification_does_not_hide_a_publish_not_yet_applied() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // The probe first, then the premature notification.
        let mut lag = Lag::default();
        lag.applied(10);
        lag.observed(at(0), 20, 20);
        lag.progressed(20);
        assert_eq!(lag.behind(at(3000)), (10, Duration::from_millis(3000)));
        lag.applied(20);
        assert_eq!(lag.behind(at(3000)), (0, Duration::ZERO));
        // The notification first, then the probe: the reading is kept all the same.
        let mut lag = Lag::default();
        lag.applied(10);
        lag.progressed(20);
        lag.observed(at(0), 20, 18);
        assert_eq!(lag.behind(at(2000)), (10, Duration::from_millis(2000)));
        // The publish at 18 applied: 19 and 20 were other writers', as the notification said.
        lag.applied(18);
        assert_eq!(lag.behind(at(2000)), (0, Duration::ZERO));
    }

    #[test]
    fn a_group_whose_keys_are_all_deleted_is_removed() {
        let mut m = Mirror::new("/p/");
        m.apply(1, &[put(&format!("/p//{CDS}/a"), cluster("a"), 1)]).expect("valid");
        m.apply(2, &[put(&format!("/p/g/{CDS}/c"), cluster("c"), 2)]).expect("valid");
        let change = m.apply(3, &[delete(&format!("/p/g/{CDS}/c"))]).expect("valid");
        assert_eq!(change.removed, BTreeSet::from(["g".to_owned()]));
        assert!(!m.served().expect("served").contains_key("g"));
    }

    #[test]
    fn a_group_marker_makes_an_empty_group_exist() {
        let mut m = Mirror::new("/p/");
        m.apply(1, &[put(&format!("/p//{CDS}/a"), cluster("a"), 1)]).expect("valid");
        let change = m.apply(2, &[put("/p/empty", Vec::new(), 2)]).expect("valid");
        assert!(change.changed.contains("empty"));
        assert_eq!(m.served().expect("served")["empty"].len(), 0, "served, with no resource");
        // Resources join the group and leave it; the marker keeps it.
        m.apply(3, &[put(&format!("/p/empty/{CDS}/c"), cluster("c"), 3)]).expect("valid");
        assert_eq!(m.served().expect("served")["empty"].len(), 1);
        m.apply(4, &[delete(&format!("/p/empty/{CDS}/c"))]).expect("valid");
        assert_eq!(m.served().expect("served")["empty"].len(), 0);
        let change = m.apply(5, &[delete("/p/empty")]).expect("valid");
        assert_eq!(change.removed, BTreeSet::from(["empty".to_owned()]));
        // A marker with a value is a mistake, refused like any invalid key.
        let error = m.apply(6, &[put("/p/g", cluster("x"), 6)]).unwrap_err();
        assert!(error.contains("value must be empty"), "{error}");
    }
}
