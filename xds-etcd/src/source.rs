//! The etcd source: a mirror of a key prefix, kept at one etcd revision, and the task that keeps
//! it current.
//!
//! The [`Mirror`] is sans-IO: it is fed a full read ([`Mirror::load`]) or one revision's events
//! ([`Mirror::apply`]) and answers with what to serve. [`EtcdSource::run`] drives it from etcd:
//! a consistent read of the prefix at one revision, then a watch from the next revision, one
//! revision applied at a time; a broken watch resumes from the revision after the last one
//! applied; a compacted one (the history it needs is gone) falls back to a full read.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use xds_cache::{Snapshot, SnapshotBuilder, SnapshotCache};
use xds_proto::EncodedResource;

use crate::layout::{Key, ResourceKey, decode_value};
use crate::wire::{EVENT_DELETE, EtcdClient, Event, KeyValue, WatchResponse};

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
}

/// What a revision changed in the served state.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Change {
    /// Groups whose snapshot is new (every group, after a full read).
    pub changed: BTreeSet<String>,
    /// Groups no key names any more.
    pub removed: BTreeSet<String>,
}

/// The prefix's keys as of one revision, and the last state that was valid as a whole.
#[derive(Debug)]
pub struct Mirror {
    prefix: String,
    entries: BTreeMap<Vec<u8>, Entry>,
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
            Key::Resource(key) => {
                let resource =
                    decode_value(&key, &kv.value).map_err(|e| format!("{}: {e}", shown()))?;
                Ok(Stored::Resource(key, resource))
            }
        }
    }

    /// Replaces the mirror with a full read of the prefix at `revision`.
    ///
    /// # Errors
    ///
    /// The state at `revision` is invalid (a value that does not decode or validate, a group whose
    /// references are inconsistent): the previous valid state stays served.
    pub fn load(&mut self, revision: i64, kvs: &[KeyValue]) -> Result<Change, String> {
        self.entries = kvs.iter().map(|kv| (kv.key.clone(), self.read(kv))).collect();
        self.revision = revision;
        self.failing = true;
        self.evaluate(&BTreeSet::new())
    }

    /// Applies one revision's events (a whole transaction: never part of one).
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load): the mirror moves to the revision, the served state does not.
    pub fn apply(&mut self, revision: i64, events: &[Event]) -> Result<Change, String> {
        let mut touched = BTreeSet::new();
        for event in events {
            let Some(kv) = &event.kv else { continue };
            if let Ok(key) = Key::parse(&self.prefix, &kv.key) {
                touched.insert(key.group().to_owned());
            }
            if event.r#type == EVENT_DELETE {
                self.entries.remove(&kv.key);
            } else {
                let entry = self.read(kv);
                self.entries.insert(kv.key.clone(), entry);
            }
        }
        self.revision = revision;
        self.evaluate(&touched)
    }

    /// Rebuilds the groups in `touched` (all of them after a failure or a full read); publishes
    /// the result only if every key is valid and every group consistent.
    fn evaluate(&mut self, touched: &BTreeSet<String>) -> Result<Change, String> {
        let result = self.rebuild(touched);
        self.failing = result.is_err();
        result
    }

    fn rebuild(&mut self, touched: &BTreeSet<String>) -> Result<Change, String> {
        let mut errors = self.entries.values().filter_map(|e| e.as_ref().err());
        if let Some(first) = errors.next() {
            let more = errors.count();
            let tail =
                if more > 0 { format!(" (and {more} more invalid keys)") } else { String::new() };
            return Err(format!("{first}{tail}"));
        }
        let all = self.failing || self.served.is_none();
        let mut builders: BTreeMap<String, SnapshotBuilder> = BTreeMap::new();
        builders.insert(DEFAULT_GROUP.to_owned(), SnapshotBuilder::default());
        let mut present = BTreeSet::from([DEFAULT_GROUP.to_owned()]);
        for stored in self.entries.values().filter_map(|e| e.as_ref().ok()) {
            let group = match stored {
                Stored::Resource(key, _) => &key.group,
                Stored::Group(group) => group,
            };
            present.insert(group.clone());
            if !all && !touched.contains(group) {
                continue;
            }
            let builder = builders.entry(group.clone()).or_default();
            if let Stored::Resource(_, resource) = stored {
                builder.add_encoded(resource.clone());
            }
        }
        let mut next = if all { BTreeMap::new() } else { self.served.clone().unwrap_or_default() };
        let mut change = Change::default();
        for (group, builder) in builders {
            if !all && !touched.contains(&group) {
                continue;
            }
            let snapshot = builder.build_consistent().map_err(|e| {
                let shown = if group.is_empty() { "the default group" } else { &group };
                format!("{shown}: {e}")
            })?;
            next.insert(group.clone(), snapshot);
            change.changed.insert(group);
        }
        for (group, _) in self.served.iter().flatten() {
            if !present.contains(group) {
                next.remove(group);
                change.removed.insert(group.clone());
            }
        }
        next.retain(|g, _| present.contains(g));
        self.served = Some(next);
        Ok(change)
    }
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
    /// The watch is established: every later revision will arrive. The replica is in sync.
    Synced {
        /// The revision the mirror reflects.
        revision: i64,
    },
    /// etcd cannot be reached (or the watch broke); the last valid state keeps serving and the
    /// source retries.
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
}

/// Watches a prefix of an etcd cluster and reports each revision (see the module doc).
#[derive(Debug, Clone)]
pub struct EtcdSource {
    client: EtcdClient,
    prefix: String,
    max_backoff: Duration,
}

impl EtcdSource {
    /// A source for `prefix` (normalized to end with `/`) read through `client`.
    pub fn new(client: EtcdClient, prefix: &str) -> EtcdSource {
        EtcdSource {
            client,
            prefix: crate::layout::normalize_prefix(prefix),
            max_backoff: Duration::from_secs(2),
        }
    }

    /// The longest pause between two attempts to reach etcd (default 2 s; the first is 100 ms,
    /// doubled each time).
    #[must_use]
    pub fn max_backoff(mut self, max: Duration) -> EtcdSource {
        self.max_backoff = max;
        self
    }

    /// Runs forever, reporting to `on_event`. Drop the future (abort its task) to stop.
    pub async fn run(self, mut on_event: impl FnMut(SourceEvent<'_>) + Send) {
        let mut mirror = Mirror::new(&self.prefix);
        let mut backoff = Duration::from_millis(100);
        // Whether the mirror must be read in full (first start, or after a compaction).
        let mut reload = true;
        loop {
            if reload {
                match self.client.range_prefix(self.prefix.as_bytes()).await {
                    Ok(read) => {
                        let revision = read.header.map_or(0, |h| h.revision);
                        let result = mirror.load(revision, &read.kvs);
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
            match self.watch(&mut mirror, &mut on_event, &mut backoff).await {
                WatchEnd::Compacted => reload = true,
                WatchEnd::Broken(error) => {
                    on_event(SourceEvent::Unreachable { revision: mirror.revision(), error });
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.max_backoff);
                }
            }
        }
    }

    /// One watch stream, from the revision after the mirror's, until it breaks.
    async fn watch(
        &self,
        mirror: &mut Mirror,
        on_event: &mut (impl FnMut(SourceEvent<'_>) + Send),
        backoff: &mut Duration,
    ) -> WatchEnd {
        let (_keep_open, mut stream) =
            match self.client.watch_prefix(self.prefix.as_bytes(), mirror.revision() + 1).await {
                Ok(opened) => opened,
                Err(e) => return WatchEnd::Broken(e.message().to_owned()),
            };
        loop {
            let response: WatchResponse = match stream.message().await {
                Ok(Some(response)) => response,
                Ok(None) => return WatchEnd::Broken("etcd closed the watch".into()),
                Err(e) => return WatchEnd::Broken(e.message().to_owned()),
            };
            if response.compact_revision != 0 {
                on_event(SourceEvent::Compacted { compact_revision: response.compact_revision });
                return WatchEnd::Compacted;
            }
            if response.canceled {
                return WatchEnd::Broken(format!(
                    "etcd cancelled the watch: {}",
                    response.cancel_reason
                ));
            }
            if response.created {
                *backoff = Duration::from_millis(100);
                on_event(SourceEvent::Synced { revision: mirror.revision() });
            }
            // One response holds whole revisions, in order: apply each as one change.
            let mut events = response.events.as_slice();
            while let Some(first) = events.first() {
                let revision = first.kv.as_ref().map_or(0, |kv| kv.mod_revision);
                let n = events
                    .iter()
                    .take_while(|e| e.kv.as_ref().map_or(0, |kv| kv.mod_revision) == revision)
                    .count();
                let result = mirror.apply(revision, &events[..n]);
                report(on_event, mirror, revision, result);
                events = &events[n..];
            }
        }
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

    #[test]
    fn a_group_whose_keys_are_all_deleted_is_removed() {
        let mut m = Mirror::new("/p/");
        m.apply(2, &[put(&format!("/p/g/{CDS}/c"), cluster("c"), 2)]).expect("valid");
        let delete = Event {
            r#type: EVENT_DELETE,
            kv: Some(KeyValue { key: format!("/p/g/{CDS}/c").into(), ..Default::default() }),
        };
        let change = m.apply(3, &[delete]).expect("valid");
        assert_eq!(change.removed, BTreeSet::from(["g".to_owned()]));
        assert!(!m.served().expect("served").contains_key("g"));
    }

    #[test]
    fn a_group_marker_makes_an_empty_group_exist() {
        let mut m = Mirror::new("/p/");
        let change = m.apply(2, &[put("/p/empty", Vec::new(), 2)]).expect("valid");
        assert!(change.changed.contains("empty"));
        assert_eq!(m.served().expect("served")["empty"].len(), 0, "served, with no resource");
        // Resources join the group and leave it; the marker keeps it.
        m.apply(3, &[put(&format!("/p/empty/{CDS}/c"), cluster("c"), 3)]).expect("valid");
        assert_eq!(m.served().expect("served")["empty"].len(), 1);
        let delete = |key: &str| Event {
            r#type: EVENT_DELETE,
            kv: Some(KeyValue { key: key.into(), ..Default::default() }),
        };
        m.apply(4, &[delete(&format!("/p/empty/{CDS}/c"))]).expect("valid");
        assert_eq!(m.served().expect("served")["empty"].len(), 0);
        let change = m.apply(5, &[delete("/p/empty")]).expect("valid");
        assert_eq!(change.removed, BTreeSet::from(["empty".to_owned()]));
        // A marker with a value is a mistake, refused like any invalid key.
        let error = m.apply(6, &[put("/p/g", cluster("x"), 6)]).unwrap_err();
        assert!(error.contains("value must be empty"), "{error}");
    }
}
