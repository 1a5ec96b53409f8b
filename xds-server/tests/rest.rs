//! REST-JSON over a real socket (rules R1–R3), with a raw HTTP/1.1 client.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

mod util;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use xds_cache::{Snapshot, SnapshotCache};
use xds_proto::ResourceType;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_server::{ServerConfig, XdsServer};

use util::raw_http::{Reply, request};

const NODE: &str = "n1";

fn snapshot(names: &[&str]) -> Snapshot {
    let mut b = Snapshot::builder();
    for name in names {
        b.add(&Cluster { name: (*name).into(), ..Default::default() }).unwrap();
    }
    b.build_unchecked()
}

fn cluster_version(cache: &SnapshotCache) -> String {
    cache.status(NODE).unwrap().versions[ResourceType::Cluster.type_url()].clone()
}

/// Serves the REST router of a server over `cache` on a loopback port.
async fn serve(cache: &SnapshotCache, config: ServerConfig) -> SocketAddr {
    let server = XdsServer::builder(cache.clone()).config(config).build();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, server.rest_router()).await });
    addr
}

async fn post(addr: SocketAddr, path: &str, body: &str) -> Reply {
    request(addr, "POST", path, body).await
}

fn fetch_body(version: &str) -> String {
    format!(r#"{{"node": {{"id": "{NODE}"}}, "version_info": "{version}"}}"#)
}

fn config(fetch_timeout: Duration) -> ServerConfig {
    ServerConfig::default().fetch_timeout(fetch_timeout)
}

#[tokio::test]
async fn r1_fetch_clusters_as_json() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot(NODE, snapshot(&["b", "a"]));
    let addr = serve(&cache, ServerConfig::default()).await;

    let reply = post(addr, "/v3/discovery:clusters", &fetch_body("")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let json = reply.json();
    assert_eq!(json["versionInfo"], cluster_version(&cache));
    assert_eq!(json["typeUrl"], ResourceType::Cluster.type_url());
    assert!(json.get("nonce").is_none(), "{json}");
    let resources = json["resources"].as_array().unwrap();
    let got: Vec<(&str, &str)> = resources
        .iter()
        .map(|r| (r["@type"].as_str().unwrap(), r["name"].as_str().unwrap()))
        .collect();
    let cluster = ResourceType::Cluster.type_url();
    assert_eq!(got, [(cluster, "a"), (cluster, "b")]);

    // A fetch by name gets only what exists (rule S9); field names in camelCase work too.
    let body = format!(r#"{{"node": {{"id": "{NODE}"}}, "resourceNames": ["a", "zz"]}}"#);
    let reply = post(addr, "/v3/discovery:clusters", &body).await;
    assert_eq!(reply.json()["resources"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn r2_long_poll_returns_on_change() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot(NODE, snapshot(&["a"]));
    let addr = serve(&cache, config(Duration::from_secs(20))).await;
    let v1 = cluster_version(&cache);

    let poll =
        tokio::spawn(async move { post(addr, "/v3/discovery:clusters", &fetch_body(&v1)).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "a poll at the current version is held");

    let started = Instant::now();
    cache.set_snapshot(NODE, snapshot(&["a", "b"]));
    let reply = tokio::time::timeout(Duration::from_secs(5), poll).await.unwrap().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(started.elapsed() < Duration::from_secs(5));
    let json = reply.json();
    assert_eq!(json["versionInfo"], cluster_version(&cache));
    assert_eq!(json["resources"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn r2_long_poll_times_out_with_304() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot(NODE, snapshot(&["a"]));
    let timeout = Duration::from_millis(300);
    let addr = serve(&cache, config(timeout)).await;

    let started = Instant::now();
    let reply = post(addr, "/v3/discovery:clusters", &fetch_body(&cluster_version(&cache))).await;
    assert_eq!(reply.status, 304);
    assert_eq!(reply.body, "", "304 has no body");
    assert!(started.elapsed() >= timeout);
    // A poll at an older version is answered at once.
    let reply = post(addr, "/v3/discovery:clusters", &fetch_body("old")).await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn r3_bad_json_is_400_with_the_parse_error() {
    let cache = SnapshotCache::by_node_id();
    let addr = serve(&cache, ServerConfig::default()).await;

    let reply =
        post(addr, "/v3/discovery:clusters", r#"{"node": {"id": "n1"}, "resourceNamez": []}"#)
            .await;
    assert_eq!(reply.status, 400);
    assert!(reply.body.contains("resourceNamez: unknown field"), "{}", reply.body);

    let reply = post(addr, "/v3/discovery:clusters", r#"{"node": {"id": 5, "#).await;
    assert_eq!(reply.status, 400);
    assert!(reply.body.contains("syntax error"), "{}", reply.body);

    let reply =
        post(addr, "/v3/discovery:clusters", r#"{"node": {"locality": {"zonee": "z"}}}"#).await;
    assert_eq!(reply.status, 400);
    assert!(reply.body.contains("node.locality.zonee"), "{}", reply.body);
}

#[tokio::test]
async fn r3_unknown_path_is_404() {
    let cache = SnapshotCache::by_node_id();
    let addr = serve(&cache, ServerConfig::default()).await;
    for path in ["/v3/discovery:nope", "/v2/discovery:clusters", "/v3/discovery:aggregated", "/"] {
        let reply = post(addr, path, &fetch_body("")).await;
        assert_eq!(reply.status, 404, "{path}");
        assert!(reply.body.contains("no such path"), "{}", reply.body);
    }
    let reply = request(addr, "GET", "/v3/discovery:clusters", "").await;
    assert_eq!(reply.status, 405);
}

#[tokio::test]
async fn r3_bad_requests_do_not_disturb_a_concurrent_long_poll() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot(NODE, snapshot(&["a"]));
    let config = config(Duration::from_secs(20))
        .limits(xds_server::Limits::default().max_request_bytes(1024));
    let addr = serve(&cache, config).await;
    let v1 = cluster_version(&cache);
    let poll =
        tokio::spawn(async move { post(addr, "/v3/discovery:clusters", &fetch_body(&v1)).await });

    let mismatch = format!(
        r#"{{"node": {{"id": "{NODE}"}}, "typeUrl": "{}"}}"#,
        ResourceType::Listener.type_url()
    );
    let big = fetch_body(&"x".repeat(2048));
    let bad: [(&str, &str, u16); 5] = [
        ("/v3/discovery:clusters", "{not json", 400),
        ("/v3/discovery:clusters", &mismatch, 400),
        ("/v3/discovery:clusters", "{}", 400), // no node
        ("/v3/discovery:clusters", &big, 413),
        ("/v3/discovery:nope", "{}", 404),
    ];
    for (path, body, status) in bad {
        let reply = post(addr, path, body).await;
        assert_eq!(reply.status, status, "{path} {body}: {}", reply.body);
        assert!(!reply.body.is_empty());
    }
    assert!(!poll.is_finished(), "the good poll is still held");

    cache.set_snapshot(NODE, snapshot(&["a", "c"]));
    let reply = tokio::time::timeout(Duration::from_secs(5), poll).await.unwrap().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["versionInfo"], cluster_version(&cache));
}

#[tokio::test]
async fn held_long_polls_count_against_max_streams() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot(NODE, snapshot(&["a"]));
    let mut config = config(Duration::from_secs(20));
    config.limits.max_streams = 2;
    let addr = serve(&cache, config).await;
    let current = cluster_version(&cache);

    let polls: Vec<_> = (0..2)
        .map(|_| {
            let body = fetch_body(&current);
            tokio::spawn(async move { post(addr, "/v3/discovery:clusters", &body).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(polls.iter().all(|p| !p.is_finished()), "both polls are held");

    // A third fetch, even one that would be answered at once, is over the bound.
    let reply = post(addr, "/v3/discovery:clusters", &fetch_body("old")).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert!(reply.body.contains("at most 2 streams and fetches"), "{}", reply.body);

    // The held polls end with the change; their admissions go with them.
    cache.set_snapshot(NODE, snapshot(&["a", "b"]));
    for poll in polls {
        let reply = tokio::time::timeout(Duration::from_secs(5), poll).await.unwrap().unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let reply = post(addr, "/v3/discovery:clusters", &fetch_body("old")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test]
async fn an_oversized_node_is_refused_naming_the_limit() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot(NODE, snapshot(&["a"]));
    let addr = serve(&cache, ServerConfig::default()).await;

    let id = "n".repeat(5_000);
    let body = format!(r#"{{"node": {{"id": "{id}"}}}}"#);
    let reply = post(addr, "/v3/discovery:clusters", &body).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.body, "node.id is 5000 bytes, more than the limit of 4096");

    let metadata = "v".repeat(70_000);
    let body = format!(r#"{{"node": {{"id": "{NODE}", "metadata": {{"k": "{metadata}"}}}}}}"#);
    let reply = post(addr, "/v3/discovery:clusters", &body).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert!(reply.body.contains("more than the limit of 65536"), "{}", reply.body);

    // A node of everyday size is served.
    let reply = post(addr, "/v3/discovery:clusters", &fetch_body("")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}
