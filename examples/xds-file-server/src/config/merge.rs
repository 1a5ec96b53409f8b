//! Merging parsed files into one snapshot per group, at the cost of the files that changed.
//!
//! The last good merge is kept: each group's snapshot, how many files name the group, and for
//! every resource a checked reference names (rule O3) who names it. A load that changed some
//! files starts each group those files touch from its current snapshot (`Snapshot::to_builder`,
//! which also lets the cache compare only what changed), applies the changed files' resources and
//! checks only what the change can break:
//!
//! - every added or changed resource's references must resolve in the group;
//! - every removed ClusterLoadAssignment or RouteConfiguration must be named by no resource that
//!   stays, in whatever file that resource is (the reverse index answers without a scan);
//! - every removed LEDS member (`LbEndpoint`) whose collection is left with no member must leave
//!   a collection no ClusterLoadAssignment that stays names: an assignment naming an empty
//!   collection is refused like an EDS cluster naming a missing assignment (rule O3; see
//!   `Snapshot::check_consistency`).
//!
//! The last good merge was consistent, so a reference these two checks do not look at still
//! resolves: the group is consistent exactly when the full check would say so. Groups no changed
//! file names keep their snapshot, untouched. Nothing is committed unless every touched group
//! passes, so a rejected load leaves the last good configuration as it was.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use xds_cache::{
    CHECKED_REFERENCES, ConsistencyError, MissingReference, Snapshot, SnapshotBuilder,
};
use xds_proto::{EncodedResource, Reference, ResourceType, TypeUrl, references_of_encoded};

use super::{Config, ConfigError, DEFAULT_GROUP, ParsedFile};

/// A reference's end: a resource type and a name.
type Key = (ResourceType, String);

/// One group of the last good merge.
#[derive(Debug, Default)]
struct Group {
    snapshot: Snapshot,
    /// How many files name the group (the default group exists with none).
    files: usize,
    /// For each resource named by a checked reference: the resources that name it.
    referrers: HashMap<Key, BTreeSet<Key>>,
}

/// What the last [`Merged::update`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MergeStats {
    /// Groups whose snapshot was rebuilt (created, changed or removed).
    pub(crate) groups: usize,
    /// Resources added, changed or removed over those groups.
    pub(crate) resources: usize,
}

/// The last good merge of a configuration's files.
#[derive(Debug)]
pub(crate) struct Merged {
    files: HashMap<PathBuf, Arc<ParsedFile>>,
    groups: BTreeMap<String, Group>,
}

impl Default for Merged {
    fn default() -> Self {
        let mut groups = BTreeMap::new();
        groups.insert(DEFAULT_GROUP.to_owned(), Group::default());
        Merged { files: HashMap::new(), groups }
    }
}

/// A touched group's pending change.
struct Work {
    builder: SnapshotBuilder,
    /// Resources of the changed files' previous versions not (yet) seen in their new versions.
    pending: HashMap<(TypeUrl, Arc<str>), EncodedResource>,
    /// Resources added or changed.
    added: Vec<EncodedResource>,
    /// Previous versions of the resources changed or removed.
    replaced: Vec<EncodedResource>,
    /// Names removed (no new version).
    removed: Vec<EncodedResource>,
    /// The group's file count after the change.
    files: usize,
    exists: bool,
}

/// The pending change of group `name`, started from its current snapshot on first touch.
fn touch<'a>(
    work: &'a mut BTreeMap<String, Work>,
    groups: &BTreeMap<String, Group>,
    name: &String,
) -> &'a mut Work {
    work.entry(name.clone()).or_insert_with(|| {
        let old = groups.get(name);
        Work {
            builder: old.map_or_else(SnapshotBuilder::default, |g| g.snapshot.to_builder()),
            pending: HashMap::new(),
            added: Vec::new(),
            replaced: Vec::new(),
            removed: Vec::new(),
            files: old.map_or(0, |g| g.files),
            exists: old.is_some(),
        }
    })
}

/// What a load does to a touched group, once every group passed.
enum Outcome {
    /// Serve this snapshot (and update the index with the change).
    Rebuild(Snapshot, Box<Work>),
    /// No file names the group any more.
    Remove,
    /// Same resources; only the number of files naming the group changed.
    Count(usize),
}

fn key_of(r: &EncodedResource) -> (TypeUrl, Arc<str>) {
    (r.type_url().clone(), r.shared_name())
}

/// The checked references `r` makes: (the type it names, the name).
fn checked_references(r: &EncodedResource) -> Vec<Reference> {
    let Some(from) = r.type_url().builtin() else { return Vec::new() };
    if !CHECKED_REFERENCES.iter().any(|(f, _)| *f == from) {
        return Vec::new();
    }
    // A resource that does not decode names nothing; the client will reject it.
    let refs = references_of_encoded(r.type_url(), r.value()).unwrap_or_default();
    refs.into_iter().filter(|to| CHECKED_REFERENCES.contains(&(from, to.resource_type))).collect()
}

fn is_referrer(r: &EncodedResource) -> Option<ResourceType> {
    r.type_url().builtin().filter(|t| CHECKED_REFERENCES.iter().any(|(f, _)| f == t))
}

impl Merged {
    /// Merges `current` (every file of the configuration, in name order) over the last good
    /// merge, looking only at the files that are new, gone or re-parsed (by `Arc` identity).
    /// On success the result is committed and returned; on error nothing changes. Errors about
    /// a group's consistency name `path`.
    pub(crate) fn update(
        &mut self,
        path: &Path,
        current: &[(PathBuf, Arc<ParsedFile>)],
    ) -> Result<(Config, MergeStats), ConfigError> {
        let mut old_versions: Vec<Arc<ParsedFile>> = Vec::new();
        let mut new_versions: Vec<(&Path, &ParsedFile)> = Vec::new();
        let present: HashSet<&PathBuf> = current.iter().map(|(f, _)| f).collect();
        for (file, parsed) in current {
            match self.files.get(file) {
                Some(old) if Arc::ptr_eq(old, parsed) => {}
                Some(old) => {
                    old_versions.push(old.clone());
                    new_versions.push((file, parsed));
                }
                None => new_versions.push((file, parsed)),
            }
        }
        for (file, old) in &self.files {
            if !present.contains(file) {
                old_versions.push(old.clone());
            }
        }

        let mut work: BTreeMap<String, Work> = BTreeMap::new();
        for old in &old_versions {
            for (group, resources) in &old.groups {
                let w = touch(&mut work, &self.groups, group);
                w.files -= 1;
                for r in resources {
                    w.pending.insert(key_of(r), r.clone());
                }
            }
        }
        // In file order, each file's groups and resources in order: a name defined twice is
        // reported at its second definition, as a full load would.
        for (file, parsed) in &new_versions {
            for (group, resources) in &parsed.groups {
                let w = touch(&mut work, &self.groups, group);
                w.files += 1;
                for (i, r) in resources.iter().enumerate() {
                    let previous =
                        if w.pending.is_empty() { None } else { w.pending.remove(&key_of(r)) };
                    match previous {
                        Some(old) if old.ptr_eq(r) => {}
                        Some(old) => {
                            w.builder.add_encoded(r.clone());
                            w.added.push(r.clone());
                            w.replaced.push(old);
                        }
                        None if w.builder.contains(r.type_url(), r.name()) => {
                            return Err(ConfigError {
                                file: file.to_path_buf(),
                                location: xds_proto::resource_location(group, i),
                                reason: format!(
                                    "{} {:?} is defined twice",
                                    r.type_url().label(),
                                    r.name()
                                ),
                            });
                        }
                        None => {
                            w.builder.add_encoded(r.clone());
                            w.added.push(r.clone());
                        }
                    }
                }
            }
        }

        // Check each touched group; build what passes, commit only if all pass.
        let mut built: Vec<(String, Outcome)> = Vec::new();
        let mut stats = MergeStats::default();
        for (name, mut w) in work {
            let keep = name == DEFAULT_GROUP || w.files > 0;
            if !keep {
                // No file names the group any more, so it has no resource left: drop it whole.
                stats.groups += 1;
                stats.resources += w.pending.len();
                built.push((name, Outcome::Remove));
                continue;
            }
            for ((type_url, n), old) in std::mem::take(&mut w.pending) {
                w.builder.remove(&type_url, &n);
                w.removed.push(old);
            }
            let changes = w.added.len() + w.removed.len();
            if changes == 0 && keep == w.exists {
                // Same resources (a file rewritten as it was, or naming the group with none):
                // the snapshot stays the very same, so the cache neither compares nor signals.
                built.push((name, Outcome::Count(w.files)));
                continue;
            }
            stats.groups += 1;
            stats.resources += changes;
            let group = self.groups.get(&name);
            self.check(path, &name, group, &w)?;
            // Checked just above, incrementally (only what the change can break).
            let snapshot = w.builder.build_unchecked();
            built.push((name, Outcome::Rebuild(snapshot, Box::new(w))));
        }

        for (name, change) in built {
            let (snapshot, w) = match change {
                Outcome::Rebuild(snapshot, w) => (snapshot, w),
                Outcome::Remove => {
                    self.groups.remove(&name);
                    continue;
                }
                Outcome::Count(files) => {
                    if let Some(group) = self.groups.get_mut(&name) {
                        group.files = files;
                    }
                    continue;
                }
            };
            let group = self.groups.entry(name).or_default();
            group.snapshot = snapshot;
            group.files = w.files;
            for old in w.replaced.iter().chain(&w.removed) {
                let Some(from) = is_referrer(old) else { continue };
                let referrer = (from, old.name().to_owned());
                for to in checked_references(old) {
                    let target = (to.resource_type, to.name);
                    if let Some(set) = group.referrers.get_mut(&target) {
                        set.remove(&referrer);
                        if set.is_empty() {
                            group.referrers.remove(&target);
                        }
                    }
                }
            }
            for new in &w.added {
                let Some(from) = is_referrer(new) else { continue };
                for to in checked_references(new) {
                    group
                        .referrers
                        .entry((to.resource_type, to.name))
                        .or_default()
                        .insert((from, new.name().to_owned()));
                }
            }
        }
        self.files = current.iter().map(|(f, p)| (f.clone(), p.clone())).collect();
        Ok((self.config(), stats))
    }

    /// The configuration of the last good merge.
    pub(crate) fn config(&self) -> Config {
        Config {
            groups: self.groups.iter().map(|(n, g)| (n.clone(), g.snapshot.clone())).collect(),
        }
    }

    /// Rule O3 over what `w` changes in group `name` (see the module's documentation).
    fn check(
        &self,
        path: &Path,
        name: &str,
        group: Option<&Group>,
        w: &Work,
    ) -> Result<(), ConfigError> {
        let resolves = |to: &Reference| w.builder.resolves(to);
        let mut missing = Vec::new();
        // Resources whose previous version the index holds and whose new version (if any) is
        // checked below: the index's word on them is stale.
        let mut changed: HashSet<Key> = HashSet::new();
        for r in w.added.iter().chain(&w.removed) {
            if let Some(from) = is_referrer(r) {
                changed.insert((from, r.name().to_owned()));
            }
        }
        for r in &w.added {
            let Some(from_type) = is_referrer(r) else { continue };
            for to in checked_references(r) {
                if !resolves(&to) {
                    missing.push(MissingReference {
                        from_type,
                        from: r.name().to_owned(),
                        missing: to,
                    });
                }
            }
        }
        if let Some(group) = group {
            for r in &w.removed {
                let Some(t) = r.type_url().builtin() else { continue };
                let mut targets = vec![Reference::new(t, r.name())];
                // An LEDS member is named through its collection, which is missing only once
                // its last member is gone.
                if let Some(glob) = xds_proto::xdstp::collection_of(r.name()) {
                    let collection = Reference::new(t, glob);
                    if !resolves(&collection) {
                        targets.push(collection);
                    }
                }
                for target in targets {
                    let key = (target.resource_type, target.name.clone());
                    let Some(referrers) = group.referrers.get(&key) else { continue };
                    for (from_type, from) in referrers {
                        if !changed.contains(&(*from_type, from.clone())) {
                            missing.push(MissingReference {
                                from_type: *from_type,
                                from: from.clone(),
                                missing: target.clone(),
                            });
                        }
                    }
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        missing.sort();
        missing.dedup();
        Err(ConfigError {
            file: path.to_owned(),
            location: if name.is_empty() { "resources".into() } else { format!("groups.{name}") },
            reason: ConsistencyError { missing }.to_string(),
        })
    }
}
