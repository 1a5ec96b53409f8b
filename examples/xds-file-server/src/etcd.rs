//! Serving from etcd (`--etcd URL --prefix P`) and publishing into it (`publish`).
//!
//! The source is [`xds_etcd::EtcdSource`]: each valid revision is published exactly as a file
//! reload is (same group bookkeeping, same regroup), so the admin port, metrics and grouping work
//! unchanged.
//!
//! `/ready` means "serving a valid configuration": 503 only until the first valid revision is
//! served. An invalid revision in etcd is an alert, not a reason to leave rotation: every replica
//! refuses the same revision, and taking them all out of rotation at once (a readiness probe
//! does exactly that) turns one bad write into an outage while the last valid state is there to
//! serve. It shows on `/status` (`config.error`, naming the key), as `xds_config_error` and in
//! the log. Staleness (etcd does not answer its probe, or the replica is behind by more than
//! `--max-lag-ms`) follows `--ready-when-stale`: `serve` (the default) stays 200, `unready`
//! answers 503; either way `/status` shows it with its age (`stale`, `stale_seconds`) and the
//! metrics as `xds_etcd_stale`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use xds_cache::SnapshotCache;
use xds_etcd::{EtcdClient, EtcdSource, SourceEvent};

use crate::admin::ConfigState;
use crate::cli::ReadyWhenStale;
use crate::config;
use crate::reload;

/// How the configuration source is named in `/status` and the banner.
pub(crate) fn describe(endpoints: &[String], prefix: &str) -> String {
    format!("etcd {} prefix {}", endpoints.join(","), xds_etcd::normalize_prefix(prefix))
}

/// The `control_plane.identifier` used when none is configured: this host's name and the gRPC
/// port, so a proxy's config dump names the replica that answered.
pub fn default_id(grpc_addr: SocketAddr) -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let host = if ok && len > 0 {
        String::from_utf8_lossy(&buf[..len]).into_owned()
    } else {
        grpc_addr.ip().to_string()
    };
    format!("{host}:{}", grpc_addr.port())
}

/// `/ready`'s answer while the etcd source is stale, if it is and `--ready-when-stale unready`
/// says to leave rotation for it.
pub(crate) fn stale(state: &Mutex<ConfigState>) -> Option<(StatusCode, String)> {
    let state = state.lock().unwrap_or_else(|e| e.into_inner());
    if state.ready_when_stale != ReadyWhenStale::Unready {
        return None;
    }
    state.stale.as_ref().map(|why| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("stale: {why}; the last valid state keeps serving\n"),
        )
    })
}

/// The etcd source's metrics in the Prometheus text format (nothing when serving files).
pub(crate) fn metrics(state: &ConfigState) -> String {
    use std::fmt::Write;
    let Some(revision) = state.revision.or(state.store_revision) else { return String::new() };
    let mut out = String::new();
    let _ = write!(
        out,
        "# HELP xds_etcd_revision The etcd revision served.\n\
         # TYPE xds_etcd_revision gauge\n\
         xds_etcd_revision {revision}\n\
         # HELP xds_etcd_stale Whether the served state may be stale: etcd does not answer its probe, or the replica is behind by more than --max-lag-ms.\n\
         # TYPE xds_etcd_stale gauge\n\
         xds_etcd_stale {}\n\
         # HELP xds_etcd_stale_seconds How long the served state has been stale (0 when it is not).\n\
         # TYPE xds_etcd_stale_seconds gauge\n\
         xds_etcd_stale_seconds {:.3}\n\
         # HELP xds_etcd_lag_revisions etcd revisions not yet confirmed applied, as of the last probe.\n\
         # TYPE xds_etcd_lag_revisions gauge\n\
         xds_etcd_lag_revisions {}\n\
         # HELP xds_etcd_lag_seconds How long the oldest etcd revision not yet confirmed applied has been in etcd, as of the last probe.\n\
         # TYPE xds_etcd_lag_seconds gauge\n\
         xds_etcd_lag_seconds {:.3}\n",
        u8::from(state.stale.is_some()),
        state.stale_since.map_or(0.0, |at| at.elapsed().as_secs_f64()),
        state.lag_revisions.unwrap_or(0),
        state.lag_seconds.unwrap_or(0.0),
    );
    out
}

/// Starts the etcd source on the runtime: it runs until the process exits. A replica more than
/// `max_lag` behind etcd reports itself stale.
pub(crate) fn spawn(
    endpoints: &[String],
    prefix: &str,
    max_lag: Duration,
    cache: SnapshotCache,
    names: Arc<RwLock<Vec<String>>>,
    state: Arc<Mutex<ConfigState>>,
) -> Result<(), String> {
    let client = EtcdClient::new(endpoints).map_err(|e| format!("--etcd: {e}"))?;
    let source = EtcdSource::new(client, prefix);
    tokio::spawn(source.run(move |event| on_event(event, max_lag, &cache, &names, &state)));
    Ok(())
}

fn on_event(
    event: SourceEvent<'_>,
    max_lag: Duration,
    cache: &SnapshotCache,
    names: &RwLock<Vec<String>>,
    state: &Mutex<ConfigState>,
) {
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    match event {
        SourceEvent::Applied { revision, groups, .. } => {
            // `publish` sets every group; the cache signals only the types whose content changed.
            let source = format!("etcd revision {revision}");
            reload::publish(cache, config::Config { groups: groups.clone() }, names, state, source);
            lock().revision = Some(revision);
        }
        SourceEvent::Rejected { revision, error } => {
            // Logged (naming the key) by the source; an alert, not a readiness failure.
            let mut state = lock();
            state.error = Some(format!("etcd revision {revision}: {error}"));
            state.reloads_error += 1;
            state.history.refused(format!("etcd revision {revision}"), error);
        }
        SourceEvent::Synced { revision } => {
            tracing::info!(revision, "etcd answers; the watch is established");
            let mut state = lock();
            state.stale = None;
            state.stale_since = None;
            state.lagging = false;
        }
        SourceEvent::Unreachable { revision, error } => {
            tracing::warn!(revision, %error, "etcd unreachable; the last valid state keeps serving");
            let mut state = lock();
            state.stale = Some(format!("etcd unreachable ({error}); serving revision {revision}"));
            state.stale_since.get_or_insert_with(Instant::now);
            state.lagging = false;
        }
        SourceEvent::Compacted { compact_revision } => {
            tracing::warn!(
                compact_revision,
                "etcd history compacted past this replica; reading everything again"
            );
        }
        SourceEvent::Progress { revision, store_revision, behind_revisions, behind } => {
            let mut state = lock();
            state.store_revision = Some(store_revision);
            state.lag_revisions = Some(behind_revisions);
            state.lag_seconds = Some(behind.as_secs_f64());
            if behind > max_lag {
                if !state.lagging {
                    tracing::warn!(
                        revision,
                        store_revision,
                        behind_ms = behind.as_millis() as u64,
                        "this replica is behind etcd by more than --max-lag-ms"
                    );
                    state.stale_since = Some(Instant::now() - behind);
                }
                state.stale = Some(format!(
                    "behind etcd by {:.1} s ({behind_revisions} revisions): serving revision \
                     {revision} of {store_revision}",
                    behind.as_secs_f64()
                ));
                state.lagging = true;
            } else if state.lagging {
                state.stale = None;
                state.stale_since = None;
                state.lagging = false;
            }
        }
    }
}

/// `xds-file-server publish`: loads `path` as the server would (refusing it, with nothing
/// written, if it is invalid) and writes it under `prefix` in one transaction. Returns the line
/// to print.
///
/// # Errors
///
/// The configuration's error, or etcd's (nothing written in either case).
pub async fn publish(
    endpoints: &[String],
    prefix: &str,
    path: &Path,
    max_config_bytes: u64,
) -> Result<String, String> {
    let loaded = {
        let path = path.to_owned();
        // The loader does blocking file I/O and heavy parsing: off the runtime.
        tokio::task::spawn_blocking(move || config::Loader::new(&path, max_config_bytes).load())
            .await
            .map_err(|e| e.to_string())?
    };
    let config =
        loaded.map_err(|e| format!("refused, nothing published: {}", e.into_config_error()))?;
    let client = EtcdClient::new(endpoints).map_err(|e| format!("--etcd: {e}"))?;
    let done =
        xds_etcd::publish(&client, prefix, &config.groups).await.map_err(|e| e.to_string())?;
    Ok(format!(
        "published {} at etcd revision {}: {} keys written, {} deleted, {} unchanged",
        path.display(),
        done.revision,
        done.put,
        done.deleted,
        done.unchanged
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(behind: Duration) -> SourceEvent<'static> {
        SourceEvent::Progress { revision: 40, store_revision: 52, behind_revisions: 12, behind }
    }

    /// `--max-lag-ms`: a replica behind by more reports itself stale (with its lag), and not
    /// once it caught up; an unreachable store's staleness is not cleared by a lag reading.
    #[test]
    fn a_replica_behind_by_more_than_max_lag_is_stale_until_it_catches_up() {
        let cache =
            SnapshotCache::new(|_: &xds_proto::pb::envoy::config::core::v3::Node| String::new());
        let names = RwLock::new(Vec::new());
        let state = Mutex::new(ConfigState::default());
        let max_lag = Duration::from_millis(1000);
        let stale = || state.lock().unwrap_or_else(|e| e.into_inner()).stale.clone();

        on_event(progress(Duration::from_millis(900)), max_lag, &cache, &names, &state);
        assert_eq!(stale(), None, "within the bound");
        on_event(progress(Duration::from_millis(2500)), max_lag, &cache, &names, &state);
        let reason = stale().unwrap_or_default();
        assert!(reason.contains("behind etcd by 2.5 s (12 revisions)"), "{reason}");
        assert!(reason.contains("serving revision 40 of 52"), "{reason}");
        on_event(progress(Duration::ZERO), max_lag, &cache, &names, &state);
        assert_eq!(stale(), None, "caught up");

        let unreachable =
            SourceEvent::Unreachable { revision: 40, error: "probe timed out".into() };
        on_event(unreachable, max_lag, &cache, &names, &state);
        on_event(progress(Duration::ZERO), max_lag, &cache, &names, &state);
        let reason = stale().unwrap_or_default();
        assert!(reason.contains("probe timed out"), "still unreachable: {reason}");
    }
}
