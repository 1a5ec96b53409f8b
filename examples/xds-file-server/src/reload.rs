//! Loading and reloading the configuration, and publishing each good version into the cache.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use xds_cache::SnapshotCache;

use crate::admin::ConfigState;
use crate::config;

/// Serves a loaded configuration: one snapshot per group; groups gone from the file are cleared.
pub(crate) fn publish(
    cache: &SnapshotCache,
    config: config::Config,
    names: &RwLock<Vec<String>>,
    state: &Mutex<ConfigState>,
) {
    let groups: Vec<String> = config.groups.keys().cloned().collect();
    for old in cache.groups() {
        if !config.groups.contains_key(&old) && cache.snapshot(&old).is_some() {
            cache.clear_snapshot(&old);
        }
    }
    *names.write().unwrap_or_else(|e| e.into_inner()) = groups.clone();
    let mut changed = 0;
    for (group, snapshot) in config.groups {
        changed += cache.set_snapshot(&group, snapshot);
    }
    // The grouping reads `names`: streams whose node now maps to a group that appeared, or away
    // from one that vanished, move to it (issue 12). After the snapshots, so none waits.
    let moved = cache.regroup();
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    state.loads += 1;
    state.groups = groups;
    state.error = None;
    tracing::info!(changed, moved, "configuration published");
}

/// Polls the configuration for changes (4 times a second) and publishes each good version; a
/// bad one is logged and shown in /status while the last good one keeps serving.
pub(crate) async fn watch_config(
    path: PathBuf,
    max_bytes: u64,
    cache: SnapshotCache,
    names: Arc<RwLock<Vec<String>>>,
    state: Arc<Mutex<ConfigState>>,
) {
    let mut seen = config::fingerprint(&path);
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = config::fingerprint(&path);
        if now == seen {
            continue;
        }
        seen = now;
        // What is served now: unchanged resources are reused, not held twice.
        let previous = config::Config {
            groups: cache
                .groups()
                .into_iter()
                .filter_map(|g| cache.snapshot(&g).map(|s| (g, s)))
                .collect(),
        };
        match load_blocking(&path, previous, max_bytes).await {
            Ok(config) => publish(&cache, config, &names, &state),
            Err(e) => {
                tracing::error!(error = %e, "configuration rejected; the last good one keeps serving");
                state.lock().unwrap_or_else(|e| e.into_inner()).error = Some(e.to_string());
            }
        }
    }
}

async fn load_blocking(
    path: &Path,
    previous: config::Config,
    max_bytes: u64,
) -> Result<config::Config, String> {
    let path = path.to_owned();
    match tokio::task::spawn_blocking(move || config::load_with(&path, &previous, max_bytes)).await
    {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(format!("the loader failed: {e}")),
    }
}
