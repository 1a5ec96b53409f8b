//! The `xds-file-server` binary moves a connected node's streams when the config file gains or
//! loses the node's group: a delta client of node `envoy-2` gets its own
//! group's cluster and a removal of the default group's, then the reverse, without reconnecting.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fail loudly by design

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use xds_proto::ResourceType;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use xds_proto::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DeltaDiscoveryResponse};

mod common;
use common::*;

/// A delta ADS client subscribed to every cluster, tracking the names it holds.
struct DeltaClusters {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: Streaming<DeltaDiscoveryResponse>,
    held: BTreeSet<String>,
}

impl DeltaClusters {
    async fn open(server: &Running, node: &str) -> DeltaClusters {
        let channel = server.channel().await;
        let (tx, rx) = mpsc::channel(4);
        tx.send(DeltaDiscoveryRequest {
            node: Some(Node { id: node.into(), ..Default::default() }),
            type_url: ResourceType::Cluster.type_url().into(),
            ..Default::default()
        })
        .await
        .unwrap();
        let rx = AggregatedDiscoveryServiceClient::new(channel)
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        DeltaClusters { tx, rx, held: BTreeSet::new() }
    }

    /// Receives (and ACKs) the next response: the names it sends and the names it removes.
    async fn next(&mut self) -> (BTreeSet<String>, BTreeSet<String>) {
        let r = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
            .await
            .expect("a response within 10 s")
            .unwrap()
            .expect("the stream stays open");
        self.tx
            .send(DeltaDiscoveryRequest {
                type_url: r.type_url.clone(),
                response_nonce: r.nonce.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        let sent: BTreeSet<String> = r.resources.iter().map(|x| x.name.clone()).collect();
        let removed: BTreeSet<String> = r.removed_resources.into_iter().collect();
        self.held.extend(sent.iter().cloned());
        for name in &removed {
            self.held.remove(name);
        }
        (sent, removed)
    }

    /// Receives (and ACKs) until the client holds `expected`; returns the names removed meanwhile.
    async fn until(&mut self, expected: &[&str]) -> BTreeSet<String> {
        let mut removed = BTreeSet::new();
        while self.held.iter().map(String::as_str).collect::<Vec<_>>() != expected {
            let r = tokio::time::timeout(Duration::from_secs(10), self.rx.message())
                .await
                .unwrap_or_else(|_| {
                    panic!("holding {:?}, still waiting for {expected:?}", self.held)
                })
                .unwrap()
                .expect("the stream stays open");
            self.tx
                .send(DeltaDiscoveryRequest {
                    type_url: r.type_url.clone(),
                    response_nonce: r.nonce.clone(),
                    ..Default::default()
                })
                .await
                .unwrap();
            self.held.extend(r.resources.iter().map(|x| x.name.clone()));
            for name in r.removed_resources {
                self.held.remove(&name);
                removed.insert(name);
            }
        }
        removed
    }
}

fn config(default: &str, envoy2: Option<&str>) -> String {
    let cluster = |name: &str, indent: &str| {
        format!(
            "{indent}- \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n{indent}  name: {name}\n{indent}  type: STATIC\n"
        )
    };
    let mut text = format!("resources:\n{}", cluster(default, "  "));
    if let Some(own) = envoy2 {
        text.push_str(&format!("groups:\n  envoy-2:\n    resources:\n{}", cluster(own, "      ")));
    }
    text
}

/// Replaces the file the way the guide says to: write beside, then rename.
fn replace(path: &Path, contents: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, contents).unwrap();
    std::fs::rename(&next, path).unwrap();
}

#[tokio::test]
async fn a_connected_delta_client_moves_when_the_file_gains_and_loses_its_group() {
    let dir = temp_dir("regroup");
    let path = dir.join("config.yaml");
    std::fs::write(&path, config("backend", None)).unwrap();
    let server = Running::start(&path, &[]).await;
    let mut client = DeltaClusters::open(&server, "envoy-2").await;
    assert!(client.until(&["backend"]).await.is_empty());

    replace(&path, &config("backend", Some("own")));
    assert_eq!(client.until(&["own"]).await, BTreeSet::from(["backend".to_owned()]));

    replace(&path, &config("backend", None));
    assert_eq!(client.until(&["backend"]).await, BTreeSet::from(["own".to_owned()]));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

fn group_file(group: &str, cluster: &str) -> String {
    format!(
        "groups:\n  {group}:\n    resources:\n      - \"@type\": type.googleapis.com/envoy.config.cluster.v3.Cluster\n        name: {cluster}\n        type: STATIC\n"
    )
}

/// A reload costs what changed: an edit to the file of one group
/// publishes that group only. A connected client of another group hears nothing of it: the next
/// response it gets is the one for its own group's later edit, and nothing else came before it.
#[tokio::test]
async fn an_edit_to_one_groups_file_sends_nothing_to_another_group() {
    let dir = temp_dir("per-group-publish");
    std::fs::write(dir.join("default.yaml"), config("backend", None)).unwrap();
    std::fs::write(dir.join("a.yaml"), group_file("envoy-a", "a1")).unwrap();
    std::fs::write(dir.join("b.yaml"), group_file("envoy-b", "b1")).unwrap();
    let server = Running::start(&dir, &[]).await;
    let mut a = DeltaClusters::open(&server, "envoy-a").await;
    let mut b = DeltaClusters::open(&server, "envoy-b").await;
    assert!(a.until(&["a1"]).await.is_empty());
    assert!(b.until(&["b1"]).await.is_empty());

    replace(&dir.join("a.yaml"), &group_file("envoy-a", "a2"));
    assert_eq!(a.until(&["a2"]).await, BTreeSet::from(["a1".to_owned()]));
    replace(&dir.join("b.yaml"), &group_file("envoy-b", "b2"));
    // Every response envoy-b gets from here on is about its own edit (b2 sent, b1 removed).
    while b.held != BTreeSet::from(["b2".to_owned()]) {
        let (sent, removed) = b.next().await;
        assert!(
            sent.iter().all(|n| n == "b2") && removed.iter().all(|n| n == "b1"),
            "{sent:?} {removed:?}"
        );
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
