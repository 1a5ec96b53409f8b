//! What a reload of `xds-file-server --config DIR` costs, loader and cache together, for the
//! loading figures of `docs/benchmarks.md` ("Loading configuration"). Not a criterion benchmark: each case is
//! one large state change, timed once, with the process's peak memory.
//!
//! ```sh
//! cargo bench -p xds-file-server --bench reload            # every case, release profile
//! XDS_BENCH_CASE=dir cargo bench -p xds-file-server --bench reload --profile dev
//! ```
//!
//! Cases (`XDS_BENCH_CASE`, default all, one process each for a clean peak RSS):
//! - `group`: a directory whose file `group.yaml` holds a group of `XDS_BENCH_GROUP` (40,000)
//!   clusters; the file is removed, and the load plus the cache's removal of the group are timed.
//! - `dir`: `XDS_BENCH_FILES` (100) files of `XDS_BENCH_PER_FILE` (10,000) clusters, all in the
//!   default group; one file changed, then every file changed, each load plus publish timed.
//! - `big`: one file of `XDS_BENCH_BIG` (1,000,000) clusters replaced by as many others.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a measurement harness: failures are loud

use std::fmt::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use xds_cache::SnapshotCache;
use xds_file_server::config::{Config, Loader};

/// `cargo bench` passes `--bench`; `cargo test --benches` (CI) does not, and then every case runs
/// at 1/100 of its size: a smoke run that the harness still works, not a measurement (the full
/// sizes take minutes in a debug build).
fn smoke() -> bool {
    !std::env::args().any(|a| a == "--bench")
}

fn env(name: &str, default: usize) -> usize {
    let default = if smoke() { (default / 100).max(10) } else { default };
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `count` STATIC clusters named `{prefix}-{i}`, under `group` (the default group if empty).
fn clusters(prefix: &str, count: usize, generation: usize, group: &str) -> String {
    let (mut text, indent) = if group.is_empty() {
        (String::from("resources:\n"), "  ")
    } else {
        (format!("groups:\n  {group}:\n    resources:\n"), "      ")
    };
    for i in 0..count {
        let _ = write!(
            text,
            "{indent}- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n{indent}  name: {prefix}-{i}\n{indent}  type: STATIC\n{indent}  connect_timeout: {}s\n",
            1 + generation
        );
    }
    text
}

/// What the binary's `publish` does with the cache: clear the groups that are gone, set the
/// snapshot of each group the loader rebuilt (the others are the very snapshots served).
fn publish(cache: &SnapshotCache, config: &Config) -> (usize, usize) {
    for old in cache.groups() {
        if !config.groups.contains_key(&old) && cache.snapshot(&old).is_some() {
            cache.clear_snapshot(&old);
        }
    }
    let (mut groups, mut changed) = (0, 0);
    for (group, snapshot) in &config.groups {
        if cache.snapshot(group).is_some_and(|s| s.is_same(snapshot)) {
            continue;
        }
        groups += 1;
        changed += cache.set_snapshot(group, snapshot.clone());
    }
    (groups, changed)
}

/// Peak resident memory of this process (`VmHWM`), in MiB.
fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Loads and publishes, timing both.
fn reload(loader: &mut Loader, cache: &SnapshotCache, what: &str) -> Duration {
    let started = Instant::now();
    let config = loader.load().unwrap();
    let loaded = started.elapsed();
    let (groups, changed) = publish(cache, &config);
    let total = started.elapsed();
    let s = loader.last_stats();
    println!(
        "{what}: {total:.2?} (load {loaded:.2?}: {} of {} files parsed, {} groups rebuilt, {} \
         resources changed; publish {:.2?}: {groups} groups set, {changed} resources changed in \
         the cache); peak RSS {} MiB",
        s.parsed,
        s.files,
        s.groups_rebuilt,
        s.resources_changed,
        total - loaded,
        peak_rss_mib()
    );
    total
}

fn scratch(case: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("xds-reload-bench-{case}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn replace(path: &Path, text: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, path).unwrap();
}

fn group_case() {
    let n = env("XDS_BENCH_GROUP", 40_000);
    let dir = scratch("group");
    std::fs::write(dir.join("default.yaml"), clusters("d", 10, 0, "")).unwrap();
    std::fs::write(dir.join("group.yaml"), clusters("g", n, 0, "big")).unwrap();
    let mut loader = Loader::new(&dir, u64::MAX);
    let cache = SnapshotCache::by_node_id();
    reload(&mut loader, &cache, &format!("group: initial load of a {n}-cluster group"));
    std::fs::remove_file(dir.join("group.yaml")).unwrap();
    reload(&mut loader, &cache, &format!("group: remove the file of the {n}-cluster group"));
    assert!(cache.snapshot("big").is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

fn dir_case() {
    let (files, per_file) = (env("XDS_BENCH_FILES", 100), env("XDS_BENCH_PER_FILE", 10_000));
    let dir = scratch("dir");
    let path = |f: usize| dir.join(format!("f{f:04}.yaml"));
    for f in 0..files {
        std::fs::write(path(f), clusters(&format!("c{f}"), per_file, 0, "")).unwrap();
    }
    let mut loader = Loader::new(&dir, u64::MAX);
    let cache = SnapshotCache::by_node_id();
    reload(&mut loader, &cache, &format!("dir: initial load, {files} files x {per_file} clusters"));
    replace(&path(7), &clusters("c7", per_file, 1, ""));
    let one = reload(&mut loader, &cache, "dir: 1 file changed");
    for f in 0..files {
        replace(&path(f), &clusters(&format!("c{f}"), per_file, 2, ""));
    }
    let all = reload(&mut loader, &cache, &format!("dir: all {files} files changed"));
    println!(
        "dir: 1 changed file costs {:.1}% of {files} changed files ({:.2?} vs {:.2?})",
        100.0 * one.as_secs_f64() / all.as_secs_f64(),
        one,
        all
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn big_case() {
    let n = env("XDS_BENCH_BIG", 1_000_000);
    let dir = scratch("big");
    let file = dir.join("big.yaml");
    std::fs::write(&file, clusters("a", n, 0, "")).unwrap();
    let mut loader = Loader::new(&dir, u64::MAX);
    let cache = SnapshotCache::by_node_id();
    reload(&mut loader, &cache, &format!("big: initial load of {n} clusters in one file"));
    replace(&file, &clusters("b", n, 0, ""));
    reload(&mut loader, &cache, &format!("big: the file replaced by {n} other clusters"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    // A filter argument is ignored.
    let case = std::env::var("XDS_BENCH_CASE").unwrap_or_default();
    println!(
        "profile: {}{}",
        if cfg!(debug_assertions) { "debug assertions on (dev)" } else { "release" },
        if smoke() { ", smoke run at 1/100 size (no --bench)" } else { "" }
    );
    if case.is_empty() || case == "group" {
        group_case();
    }
    if case.is_empty() || case == "dir" {
        dir_case();
    }
    if case.is_empty() || case == "big" {
        big_case();
    }
}
