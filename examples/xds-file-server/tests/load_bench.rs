//! The loading figures of `docs/benchmarks.md` ("Loading configuration"): a full load of a
//! directory of files against a reload after one file changed. Ignored by default (it writes
//! and parses a large directory); run it with
//!
//! ```sh
//! XDS_BENCH_FILES=100 XDS_BENCH_PER_FILE=10000 \
//!   cargo test --release -p xds-file-server --test load_bench -- --ignored --nocapture
//! ```
#![allow(clippy::unwrap_used)] // a measurement harness: failures should be loud

use std::fmt::Write;
use std::time::Instant;

use xds_file_server::config::{Loader, MAX_FILE_BYTES};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn file_text(file: usize, per_file: usize, generation: usize) -> String {
    let mut text = String::from("resources:\n");
    for i in 0..per_file {
        let _ = write!(
            text,
            "  - \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n    name: c{file}-{i}\n    type: STATIC\n    connect_timeout: {}s\n",
            1 + generation
        );
    }
    text
}

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn reloading_one_changed_file_costs_that_file() {
    let (files, per_file) = (env("XDS_BENCH_FILES", 100), env("XDS_BENCH_PER_FILE", 1000));
    let dir = std::env::temp_dir().join(format!("xds-load-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in 0..files {
        std::fs::write(dir.join(format!("f{f:04}.yaml")), file_text(f, per_file, 0)).unwrap();
    }
    let mut loader = Loader::new(&dir, MAX_FILE_BYTES);
    let started = Instant::now();
    let config = loader.load().unwrap();
    let full = started.elapsed();
    assert_eq!(config.groups[""].len(), files * per_file);
    drop(config);

    std::fs::write(dir.join("f0007.yaml"), file_text(7, per_file, 1)).unwrap();
    let started = Instant::now();
    let config = loader.load().unwrap();
    let one = started.elapsed();
    let stats = loader.last_stats();
    assert_eq!((stats.parsed, stats.reused, stats.groups_rebuilt), (1, files - 1, 1));
    assert_eq!(config.groups[""].len(), files * per_file);

    let started = Instant::now();
    loader.load().unwrap();
    let none = started.elapsed();
    println!(
        "{files} files x {per_file} clusters: full load {full:.2?}, reload after one file changed \
         {one:.2?}, reload with nothing changed {none:.2?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
