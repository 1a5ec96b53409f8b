//! A node whose group has no snapshot waits; the cache says so in the log, once per node, so
//! that a misnamed group is found without a debugger.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use xds_cache::{Cache, Signal, SnapshotCache, Variant, WatchRequest};
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::{ResourceType, TypeUrl};

/// A log sink the test reads back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_node_whose_group_has_nothing_is_logged_once() {
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber =
        tracing_subscriber::fmt().with_ansi(false).with_writer(move || sink.clone()).finish();
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("served", xds_cache::Snapshot::builder().build_unchecked());
    let mut watches = Vec::new();
    tracing::subscriber::with_default(subscriber, || {
        for (id, t) in [
            ("lost", ResourceType::Cluster),
            ("lost", ResourceType::Listener),
            ("lost", ResourceType::Cluster),
            ("served", ResourceType::Cluster),
            ("also-lost", ResourceType::Cluster),
        ] {
            let node = Node { id: id.into(), ..Default::default() };
            let type_url = TypeUrl::from(t);
            let request = WatchRequest { node: &node, type_url: &type_url, variant: Variant::Sotw };
            watches.push(cache.watch(request, Arc::new(Signal::new())).unwrap());
        }
    });
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("no configuration yet")).collect();
    assert_eq!(warnings.len(), 2, "{log}");
    assert!(warnings[0].contains("node=lost") && warnings[0].contains("WARN"), "{log}");
    assert!(warnings[1].contains("node=also-lost"), "{log}");
    assert!(!log.contains("node=served"), "{log}");
}
