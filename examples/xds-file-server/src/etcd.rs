//! Serving from etcd (`--etcd URL --prefix P`) and publishing into it (`publish`).
//!
//! The source is [`xds_etcd::EtcdSource`]: each valid revision is published exactly as a file
//! reload is (same group bookkeeping, same regroup), so the admin port, metrics and grouping work
//! unchanged. `/ready` is 503 until the first valid revision is served, while etcd is unreachable
//! (the replica keeps serving what it has, but may be behind its peers) and while the newest
//! revision is invalid.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use axum::http::StatusCode;
use xds_cache::SnapshotCache;
use xds_etcd::{EtcdClient, EtcdSource, SourceEvent};

use crate::admin::ConfigState;
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

/// `/ready`'s answer while the etcd source is behind (etcd unreachable), if it is.
pub(crate) fn stale(state: &Mutex<ConfigState>) -> Option<(StatusCode, String)> {
    let state = state.lock().unwrap_or_else(|e| e.into_inner());
    state.stale.as_ref().map(|why| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("stale: {why}; the last valid state keeps serving\n"),
        )
    })
}

/// Starts the etcd source on the runtime: it runs until the process exits.
pub(crate) fn spawn(
    endpoints: &[String],
    prefix: &str,
    cache: SnapshotCache,
    names: Arc<RwLock<Vec<String>>>,
    state: Arc<Mutex<ConfigState>>,
) -> Result<(), String> {
    let client = EtcdClient::new(endpoints).map_err(|e| format!("--etcd: {e}"))?;
    let source = EtcdSource::new(client, prefix);
    tokio::spawn(source.run(move |event| on_event(event, &cache, &names, &state)));
    Ok(())
}

fn on_event(
    event: SourceEvent<'_>,
    cache: &SnapshotCache,
    names: &RwLock<Vec<String>>,
    state: &Mutex<ConfigState>,
) {
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    match event {
        SourceEvent::Applied { revision, groups, .. } => {
            // `publish` sets every group; the cache signals only the types whose content changed.
            reload::publish(cache, config::Config { groups: groups.clone() }, names, state);
            lock().revision = Some(revision);
        }
        SourceEvent::Rejected { revision, error } => {
            let mut state = lock();
            state.error = Some(format!("etcd revision {revision}: {error}"));
            state.reloads_error += 1;
        }
        SourceEvent::Synced { revision } => {
            tracing::info!(revision, "etcd watch established");
            lock().stale = None;
        }
        SourceEvent::Unreachable { revision, error } => {
            tracing::warn!(revision, %error, "etcd unreachable; the last valid state keeps serving");
            lock().stale = Some(format!("etcd unreachable ({error}); serving revision {revision}"));
        }
        SourceEvent::Compacted { compact_revision } => {
            tracing::warn!(
                compact_revision,
                "etcd history compacted past this replica; reading everything again"
            );
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
