//! Loading and reloading the configuration, and publishing each good version into the cache.
//!
//! Reloads run on a thread of their own, never on the async runtime: parsing a large file takes
//! seconds of CPU, and a file-system call that blocks (it should not, see
//! [`config::Loader`]) must not hold a runtime worker or keep the process from exiting on
//! SIGTERM (finding 3). Serving never waits on a reload.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use xds_cache::SnapshotCache;

use crate::admin::ConfigState;
use crate::config::{self, LoadError, Loader, Stamp};

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
    // from one that vanished, move to it (issue 12). After the snapshots, so none waits.
    let moved = if regroup { cache.regroup() } else { 0 };
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
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
    /// A change is acted on once the files have been quiet this long (finding 2: a file still
    /// being written is not read).
    pub(crate) quiet: Duration,
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

impl Reloader {
    /// Starts the reload thread. It runs until the process exits: it holds nothing a clean
    /// shutdown must wait for.
    pub(crate) fn spawn(self) -> std::io::Result<()> {
        std::thread::Builder::new().name("config-reload".into()).spawn(move || self.run())?;
        Ok(())
    }

    fn run(mut self) {
        let path = self.loader.path().to_owned();
        let (events, watcher) =
            if self.timing.force_polling { (channel().1, None) } else { watch(&path) };
        let polling = watcher.is_none();
        let poll =
            if polling { self.timing.poll } else { self.timing.poll.max(Duration::from_secs(2)) };
        let mut seen = self.loaded.clone();
        let mut pending: Option<Instant> = None;
        loop {
            let wait =
                pending.map_or(poll, |last| self.timing.quiet.saturating_sub(last.elapsed()));
            if polling {
                std::thread::sleep(wait);
            } else if events.recv_timeout(wait).is_ok() {
                pending = Some(Instant::now());
                continue;
            }
            let now = config::fingerprint(&path);
            if now != seen {
                seen = now.clone();
                // Polling sees a change only now: wait for it to settle. (With notification,
                // the events already said so.)
                if polling || pending.is_none() {
                    pending = Some(Instant::now());
                    continue;
                }
            }
            match pending {
                Some(last) if last.elapsed() >= self.timing.quiet => pending = None,
                Some(_) => continue,
                None => continue,
            }
            if now == self.loaded {
                continue;
            }
            self.reload(now, &mut pending);
        }
    }

    /// Loads the settled files and publishes them, or records why not.
    fn reload(
        &mut self,
        fingerprint: Vec<(PathBuf, Option<Stamp>)>,
        pending: &mut Option<Instant>,
    ) {
        let started = Instant::now();
        let result = self.loader.load();
        let stats = self.loader.last_stats();
        self.state.lock().unwrap_or_else(|e| e.into_inner()).files_parsed =
            self.loader.parsed_total();
        match result {
            Ok(config) => {
                self.loaded = fingerprint;
                tracing::info!(
                    files = stats.files,
                    parsed = stats.parsed,
                    reused = stats.reused,
                    groups_rebuilt = stats.groups_rebuilt,
                    resources_changed = stats.resources_changed,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "configuration loaded"
                );
                publish(&self.cache, config, &self.names, &self.state);
            }
            Err(LoadError::Unstable(file)) => {
                // Still being written: read it again after another quiet period.
                tracing::debug!(file = %file.display(), "the file changed while it was read");
                *pending = Some(Instant::now());
            }
            Err(LoadError::Invalid(e)) => {
                self.loaded = fingerprint;
                tracing::error!(error = %e, "configuration rejected; the last good one keeps serving");
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.error = Some(e.to_string());
                state.reloads_error += 1;
            }
        }
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
         xds_config_files_parsed_total {}\n",
        state.reloads_ok,
        state.reloads_error,
        u8::from(state.error.is_some()),
        state.files_parsed,
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
