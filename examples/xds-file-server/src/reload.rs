//! Loading and reloading the configuration, and publishing each good version into the cache.
//!
//! Reloads run on a thread of their own, never on the async runtime: parsing a large file takes
//! seconds of CPU, and a file-system call that blocks (it should not, see
//! [`config::Loader`]) must not hold a runtime worker or keep the process from exiting on
//! SIGTERM. Serving never waits on a reload.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use xds_cache::SnapshotCache;

use crate::admin::ConfigState;
use crate::config::{self, LoadError, Loader, Stamp};
use crate::history::Changed;

/// Serves a loaded configuration: one snapshot per group; groups gone from the file are cleared.
///
/// A group whose snapshot is the very one the cache serves (the loader kept it: no changed file
/// touches the group) is not set again, so its streams hear nothing; a changed group's snapshot
/// was derived from the served one, so the cache compares only the resources that changed.
/// Streams are regrouped only when the set of groups changed.
pub(crate) fn publish(
    cache: &SnapshotCache,
    config: config::Config,
    names: &RwLock<Vec<String>>,
    state: &Mutex<ConfigState>,
    source: String,
) {
    let groups: Vec<String> = config.groups.keys().cloned().collect();
    let resources = count_by_type(&config);
    for old in cache.groups() {
        if !config.groups.contains_key(&old) && cache.snapshot(&old).is_some() {
            cache.clear_snapshot(&old);
        }
    }
    let regroup = {
        let mut names = names.write().unwrap_or_else(|e| e.into_inner());
        let differ = *names != groups;
        if differ {
            *names = groups.clone();
        }
        differ
    };
    let (mut changed, mut published) = (0, 0);
    for (group, snapshot) in config.groups {
        if cache.snapshot(&group).is_some_and(|served| served.is_same(&snapshot)) {
            continue;
        }
        published += 1;
        changed += cache.set_snapshot(&group, snapshot);
    }
    // The grouping reads `names`: streams whose node now maps to a group that appeared, or away
    // from one that vanished, move to it, without reconnecting. After the snapshots, so none waits.
    let moved = if regroup { cache.regroup() } else { 0 };
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    let mut changes = Changed::between(&state.groups, &groups, &state.resources, &resources);
    changes.groups_updated = published;
    changes.resources_changed = changed;
    state.history.applied(source, changes);
    state.loads += 1;
    state.groups = groups;
    state.error = None;
    state.reloads_ok += 1;
    state.last_success = Some(SystemTime::now());
    state.resources = resources;
    tracing::info!(published, changed, moved, "configuration published");
}

/// Resources served, by type label, over all groups. Labels come from [`xds_proto::ResourceType`]
/// (custom types count as `custom`), so the metric's label values are a known set.
fn count_by_type(config: &config::Config) -> BTreeMap<&'static str, u64> {
    let mut counts = BTreeMap::new();
    for snapshot in config.groups.values() {
        for t in snapshot.types() {
            let label = t.builtin().map_or("custom", |t| t.label());
            *counts.entry(label).or_default() += snapshot.count(t) as u64;
        }
    }
    counts
}

/// How the reload thread learns of changes and how long it waits for them to settle.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReloadTiming {
    /// A change is acted on once the files have been quiet this long: a file still being
    /// written is not read.
    pub(crate) quiet: Duration,
    /// How long the reload waits for files that keep changing (a log appended every 100 ms in
    /// the directory) before it gives up on them: each is then served as it was last parsed
    /// (or left out, if it never parsed), named on `/status` and in a metric and a log line,
    /// and every other file's edits are applied as soon as they are quiet.
    pub(crate) settle_limit: Duration,
    /// How often the files are polled: often without file-system notification, rarely (as a
    /// safety net) with it.
    pub(crate) poll: Duration,
    /// Poll even if notification is available.
    pub(crate) force_polling: bool,
}

/// What the reload thread works on.
pub(crate) struct Reloader {
    pub(crate) loader: Loader,
    /// The fingerprint of the files as they were before the last load.
    pub(crate) loaded: Vec<(PathBuf, Option<Stamp>)>,
    pub(crate) timing: ReloadTiming,
    pub(crate) cache: SnapshotCache,
    pub(crate) names: Arc<RwLock<Vec<String>>>,
    pub(crate) state: Arc<Mutex<ConfigState>>,
}

/// A fingerprint of the configuration's files: each file and its stamp (`None` when it cannot
/// be read, or, in [`Reloader::loaded`], when it was pinned rather than read).
type Fingerprint = Vec<(PathBuf, Option<Stamp>)>;

/// What the reload loop knows about changes it has not acted on yet.
#[derive(Debug, Default)]
struct Changes {
    /// Per file that changed since the last load: when its current run of changes began and
    /// when it last changed (its stamp moved, or it changed while it was read).
    at: BTreeMap<PathBuf, (Instant, Instant)>,
    /// Files given up on: still changing after the settle limit, served as last parsed.
    pinned: BTreeSet<PathBuf>,
}

impl Changes {
    /// Records that `file` changed at `now`. A change less than two quiet periods after the
    /// previous one continues its run (a re-read that found the file changing again comes about
    /// one quiet period after the change before it).
    fn saw(&mut self, file: PathBuf, now: Instant, quiet: Duration) {
        let entry = self.at.entry(file).or_insert((now, now));
        if now.saturating_duration_since(entry.1) >= quiet.saturating_mul(2) {
            entry.0 = now;
        }
        entry.1 = now;
    }

    /// Files that changed less than `quiet` ago.
    fn busy(&self, now: Instant, quiet: Duration) -> BTreeSet<PathBuf> {
        self.at
            .iter()
            .filter(|(_, (_, last))| now.saturating_duration_since(*last) < quiet)
            .map(|(f, _)| f.clone())
            .collect()
    }

    /// Of the `busy` files, those that have kept changing for at least `limit`.
    fn unsettled(
        &self,
        busy: &BTreeSet<PathBuf>,
        now: Instant,
        limit: Duration,
    ) -> BTreeSet<PathBuf> {
        busy.iter()
            .filter(|f| {
                self.at
                    .get(*f)
                    .is_some_and(|(first, _)| now.saturating_duration_since(*first) >= limit)
            })
            .cloned()
            .collect()
    }

    /// How long to sleep before something may be due: a file turning quiet, or one reaching
    /// the settle limit; `idle` when nothing is pending.
    fn wait(&self, now: Instant, timing: &ReloadTiming, idle: Duration) -> Duration {
        let since = |t: &Instant| now.saturating_duration_since(*t);
        let due = self
            .at
            .values()
            .flat_map(|(first, last)| {
                [
                    timing.quiet.saturating_sub(since(last)),
                    timing.settle_limit.saturating_sub(since(first)),
                ]
            })
            .filter(|d| !d.is_zero())
            .min()
            .unwrap_or(idle);
        // Never spin: wake at least a millisecond later, and at most after `idle`.
        due.clamp(Duration::from_millis(1), idle.max(Duration::from_millis(1)))
    }
}

/// The paths whose entry differs between two fingerprints (added, removed or changed).
fn changed_paths(old: &Fingerprint, new: &Fingerprint) -> Vec<PathBuf> {
    let old: BTreeMap<&PathBuf, &Option<Stamp>> = old.iter().map(|(p, s)| (p, s)).collect();
    let new_map: BTreeMap<&PathBuf, &Option<Stamp>> = new.iter().map(|(p, s)| (p, s)).collect();
    let mut paths: Vec<PathBuf> =
        new.iter().filter(|(p, s)| old.get(p) != Some(&s)).map(|(p, _)| p.clone()).collect();
    paths.extend(old.keys().filter(|p| !new_map.contains_key(*p)).map(|p| (*p).clone()));
    paths
}

/// Whether `now` differs from `loaded` in any file outside `pinned`.
fn differs_outside(now: &Fingerprint, loaded: &Fingerprint, pinned: &BTreeSet<PathBuf>) -> bool {
    let outside = |f: &Fingerprint| -> Vec<(PathBuf, Option<Stamp>)> {
        f.iter().filter(|(p, _)| !pinned.contains(p)).cloned().collect()
    };
    outside(now) != outside(loaded)
}

impl Reloader {
    /// Starts the reload thread. It runs until the process exits: it holds nothing a clean
    /// shutdown must wait for.
    pub(crate) fn spawn(self) -> std::io::Result<()> {
        std::thread::Builder::new().name("config-reload".into()).spawn(move || self.run())?;
        Ok(())
    }

    /// Watches the files, and loads them once every file is quiet; past the settle limit, it
    /// loads without the files that are still changing (see [`ReloadTiming::settle_limit`]).
    ///
    /// Which file changed is learnt from the files' stamps: a notification only says "look",
    /// and a stamp moves with every write (size, modification time), so a file still being
    /// written stays busy until it has been quiet for `quiet`.
    fn run(mut self) {
        let path = self.loader.path().to_owned();
        let (events, watcher) =
            if self.timing.force_polling { (channel().1, None) } else { watch(&path) };
        let polling = watcher.is_none();
        let idle =
            if polling { self.timing.poll } else { self.timing.poll.max(Duration::from_secs(2)) };
        let mut seen = self.loaded.clone();
        let mut changes = Changes::default();
        let quiet = self.timing.quiet;
        loop {
            let wait = changes.wait(Instant::now(), &self.timing, idle);
            if polling {
                std::thread::sleep(wait);
            } else if events.recv_timeout(wait).is_ok() {
                // Take every queued notification: one look at the files answers them all.
                while events.try_recv().is_ok() {}
            }
            let now = config::fingerprint(&path);
            let at = Instant::now();
            for file in changed_paths(&seen, &now) {
                changes.saw(file, at, quiet);
            }
            seen = now.clone();
            let busy = changes.busy(at, quiet);
            if busy.is_empty() {
                // Everything is quiet: a whole load, pinning nothing.
                if now != self.loaded || !changes.pinned.is_empty() {
                    self.reload(now, BTreeSet::new(), &mut changes);
                } else {
                    changes.at.clear();
                }
                continue;
            }
            // Files that kept changing for the whole settle limit are not waited for: once
            // every busy file is one of them, the others are loaded and they are pinned.
            let unsettled = changes.unsettled(&busy, at, self.timing.settle_limit);
            if unsettled == busy
                && (unsettled != changes.pinned || differs_outside(&now, &self.loaded, &unsettled))
            {
                self.reload(now, unsettled, &mut changes);
            }
        }
    }

    /// Loads the files (those in `pinned` as last parsed) and publishes them, or records why
    /// not.
    fn reload(
        &mut self,
        fingerprint: Fingerprint,
        pinned: BTreeSet<PathBuf>,
        changes: &mut Changes,
    ) {
        let started = Instant::now();
        let result = self.loader.load_pinned(&pinned);
        let stats = self.loader.last_stats();
        self.state.lock().unwrap_or_else(|e| e.into_inner()).files_parsed =
            self.loader.parsed_total();
        // A pinned file counts as not loaded, so that it is read once it settles.
        let loaded: Fingerprint = fingerprint
            .into_iter()
            .map(|(p, s)| if pinned.contains(&p) { (p, None) } else { (p, s) })
            .collect();
        match result {
            Ok(config) => {
                self.loaded = loaded;
                tracing::info!(
                    files = stats.files,
                    parsed = stats.parsed,
                    reused = stats.reused,
                    pinned = stats.pinned,
                    groups_rebuilt = stats.groups_rebuilt,
                    resources_changed = stats.resources_changed,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "configuration loaded"
                );
                publish(&self.cache, config, &self.names, &self.state, "files".to_owned());
                self.report_pinned(&pinned, changes);
                changes.at.retain(|file, _| pinned.contains(file));
            }
            Err(LoadError::Unstable(file)) => {
                // Changed while it was read: busy again; read after another quiet period, or
                // pinned if the settle limit has passed.
                tracing::debug!(file = %file.display(), "the file changed while it was read");
                changes.saw(file, Instant::now(), self.timing.quiet);
            }
            Err(LoadError::Invalid(e)) => {
                self.loaded = loaded;
                tracing::error!(error = %e, "configuration rejected; the last good one keeps serving");
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.error = Some(e.to_string());
                state.reloads_error += 1;
                state.history.refused("files".to_owned(), &e.to_string());
                drop(state);
                self.report_pinned(&pinned, changes);
                changes.at.retain(|file, _| pinned.contains(file));
            }
        }
    }

    /// Makes `pinned` the set of files given up on: logged when it changes, shown on
    /// `/status` (`config.unsettled`) and in `xds_config_unsettled_files`.
    fn report_pinned(&self, pinned: &BTreeSet<PathBuf>, changes: &mut Changes) {
        if *pinned == changes.pinned {
            return;
        }
        let names: Vec<String> = pinned.iter().map(|p| p.display().to_string()).collect();
        if names.is_empty() {
            tracing::info!("every configuration file has settled and is read again");
        } else {
            tracing::warn!(
                files = ?names,
                settle_limit_ms = self.timing.settle_limit.as_millis() as u64,
                "configuration files keep changing; serving them as last parsed and applying \
                 the other files' edits"
            );
        }
        self.state.lock().unwrap_or_else(|e| e.into_inner()).unsettled = names;
        changes.pinned = pinned.clone();
    }
}

/// File-system notification for `path` (the directory, or a file's directory so that a file
/// renamed over the watched one is seen), as a channel of "something changed". `None` when
/// notification cannot start (no inotify instances left, an unsupported file system): the
/// reload thread then polls.
fn watch(path: &Path) -> (Receiver<()>, Option<notify::RecommendedWatcher>) {
    use notify::{EventKind, RecursiveMode, Watcher};
    let (tx, rx) = channel();
    let target = if path.is_dir() {
        path.to_owned()
    } else {
        path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_owned()
    };
    let handler = move |event: notify::Result<notify::Event>| {
        let relevant = match event {
            Ok(event) => !matches!(event.kind, EventKind::Access(_)),
            Err(_) => true,
        };
        if relevant {
            // The reload thread gone means the process is exiting.
            let _ = tx.send(());
        }
    };
    match notify::recommended_watcher(handler)
        .and_then(|mut w| w.watch(&target, RecursiveMode::NonRecursive).map(|()| w))
    {
        Ok(watcher) => (rx, Some(watcher)),
        Err(e) => {
            tracing::warn!(error = %e, "file-system notification unavailable; polling the configuration");
            let (_, rx) = channel();
            (rx, None)
        }
    }
}

/// `/ready`: "serving a valid configuration". 503 only until one is served; a newer one that
/// is rejected keeps the replica ready (the last good one serves, and every replica reading the
/// same files or store rejects the same one: leaving rotation for it would take them all out at
/// once). The rejection is an alert: `/status`, `xds_config_error`, the log. `/healthz` stays
/// liveness.
pub(crate) fn ready(state: &Mutex<ConfigState>) -> (axum::http::StatusCode, String) {
    let state = state.lock().unwrap_or_else(|e| e.into_inner());
    match (&state.error, state.loads) {
        (None, 0) => {
            (axum::http::StatusCode::SERVICE_UNAVAILABLE, "no configuration loaded\n".into())
        }
        (Some(error), 0) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!("no valid configuration loaded: {error}\n"),
        ),
        (Some(error), _) => (
            axum::http::StatusCode::OK,
            format!("ready: the last good configuration serves; the newest is rejected: {error}\n"),
        ),
        (None, _) => (axum::http::StatusCode::OK, "ready\n".into()),
    }
}

/// The configuration's metrics in the Prometheus text format: loads by result, the time of the
/// last success, whether the files on disk are rejected, files parsed and resources served by
/// type (label values from [`xds_proto::ResourceType`], a known set).
pub(crate) fn config_metrics(state: &Mutex<ConfigState>) -> String {
    use std::fmt::Write;
    let state = state.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = String::new();
    let _ = write!(
        out,
        "# HELP xds_config_reloads_total Configuration loads, by result.\n\
         # TYPE xds_config_reloads_total counter\n\
         xds_config_reloads_total{{result=\"ok\"}} {}\n\
         xds_config_reloads_total{{result=\"error\"}} {}\n\
         # HELP xds_config_error Whether the newest configuration on disk is rejected (1) or served (0).\n\
         # TYPE xds_config_error gauge\n\
         xds_config_error {}\n\
         # HELP xds_config_files_parsed_total Configuration files parsed (unchanged files are reused).\n\
         # TYPE xds_config_files_parsed_total counter\n\
         xds_config_files_parsed_total {}\n\
         # HELP xds_config_unsettled_files Files that keep changing past the settle limit, served as last parsed.\n\
         # TYPE xds_config_unsettled_files gauge\n\
         xds_config_unsettled_files {}\n",
        state.reloads_ok,
        state.reloads_error,
        u8::from(state.error.is_some()),
        state.files_parsed,
        state.unsettled.len(),
    );
    if let Some(at) = state.last_success {
        let seconds = at.duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let _ = write!(
            out,
            "# HELP xds_config_last_success_timestamp_seconds When a configuration was last published.\n\
             # TYPE xds_config_last_success_timestamp_seconds gauge\n\
             xds_config_last_success_timestamp_seconds {seconds:.3}\n"
        );
    }
    out.push_str(
        "# HELP xds_config_resources Resources served, by type, over all groups.\n\
         # TYPE xds_config_resources gauge\n",
    );
    for (label, count) in &state.resources {
        let _ = writeln!(out, "xds_config_resources{{type=\"{label}\"}} {count}");
    }
    out.push_str(&crate::etcd::metrics(&state));
    out
}
