//! The admin router over a real socket, beside a gRPC server with real clients: every route
//! answers, `/status` pages and refuses bad parameters, `/ready` follows its hook, and the
//! per-group series of `/metrics` stay bounded and well-formed whatever the groups are named.
#![allow(clippy::unwrap_used)]

mod util;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use xds_cache::SnapshotCache;
use xds_server::admin::OTHER_GROUP_LABEL;

use util::raw_http::{get, request, serve_router};
use util::*;

/// A cache with one group per node id, each serving cluster `c`.
fn cache(nodes: &[&str]) -> SnapshotCache {
    let cache = SnapshotCache::by_node_id();
    for id in nodes {
        cache.set_snapshot(id, snapshot![cluster("c", "1")]);
    }
    cache
}

/// An ADS stream for `id` that subscribed to every cluster and got its response.
async fn subscribed(
    t: &TestServer,
    id: &str,
) -> (Sotw, xds_proto::pb::envoy::service::discovery::v3::DiscoveryResponse) {
    let mut client = Sotw::ads(t, id).await;
    client.subscribe(CDS, &[], None).await;
    let response = client.recv().await;
    (client, response)
}

/// The samples of `name` in Prometheus text: (labels, value).
fn samples<'a>(text: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    let prefix = format!("{name}{{");
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .filter_map(|l| l.rsplit_once("} "))
        .map(|(labels, v)| (labels, v.parse().unwrap()))
        .collect()
}

#[tokio::test]
async fn every_route_answers() {
    let t = serve(cache(&["n1"])).await;
    let (_client, _) = subscribed(&t, "n1").await;
    let admin = serve_router(t.server.admin_router()).await;

    let healthz = get(admin, "/healthz").await;
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok\n"));
    let ready = get(admin, "/ready").await;
    assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"), "no hook: always ready");

    let metrics = get(admin, "/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(metrics.head.contains("content-type: text/plain; version=0.0.4"), "{}", metrics.head);
    assert!(metrics.body.contains("xds_streams{variant=\"sotw\",type=\"cluster\"} 1"));
    assert!(metrics.body.contains("# TYPE xds_lrs_"), "the LRS series are there too");
    assert!(metrics.body.contains("xds_group_streams{group=\"n1\"} 1"), "{}", metrics.body);

    let status = get(admin, "/status").await;
    assert_eq!(status.status, 200);
    let status = status.json();
    assert_eq!(status["total"], 1);
    let stream = &status["streams"][0];
    assert_eq!(stream["node_id"], "n1");
    assert_eq!(stream["group"], "n1", "the group the server serves the stream from");
    let opened = stream["opened"].as_str().unwrap();
    assert!(opened.ends_with('Z') && opened.contains('T'), "RFC 3339 beside opened_ms: {opened}");
    assert!(stream["opened_ms"].is_u64());
    assert!(status["load"].is_object(), "{status}");

    let csds = request(admin, "POST", "/v3/discovery:client_status", "").await;
    assert_eq!(csds.status, 200);
    assert_eq!(csds.json()["config"][0]["node"]["id"], "n1", "{}", csds.body);
    assert_eq!(get(admin, "/v3/discovery:client_status").await.status, 405);
}

#[tokio::test]
async fn status_pages_clamp_and_say_where_the_next_starts() {
    let t = serve(cache(&["n0", "n1", "n2"])).await;
    let mut clients = Vec::new();
    for id in ["n0", "n1", "n2"] {
        clients.push(subscribed(&t, id).await);
    }
    let admin = serve_router(t.server.admin_router()).await;
    let page = |path: &'static str| async move {
        let reply = get(admin, path).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        reply.json()
    };
    let shown = |page: &Value| page["streams"].as_array().unwrap().len();

    let first = page("/status?limit=2").await;
    assert_eq!((shown(&first), &first["total"], &first["next_offset"]), (2, &3.into(), &2.into()));
    let last = page("/status?limit=2&offset=2").await;
    assert_eq!(shown(&last), 1);
    assert!(last.get("next_offset").is_none(), "the last page: {last}");
    // A limit of 0 would never move on; one above the maximum shows the maximum.
    let zero = page("/status?limit=0").await;
    assert_eq!((shown(&zero), &zero["next_offset"]), (1, &1.into()));
    let all = page("/status?limit=100000").await;
    assert_eq!(shown(&all), 3);
    assert!(all.get("next_offset").is_none());
    let past = page("/status?offset=50").await;
    assert_eq!((shown(&past), &past["total"]), (0, &3.into()));
    let one = page("/status?node=n1").await;
    assert_eq!((shown(&one), &one["streams"][0]["node_id"]), (1, &"n1".into()));
    let load = page("/status?load_limit=0&load_offset=3").await;
    assert!(load["load"].is_object(), "{load}");
}

#[tokio::test]
async fn a_bad_status_parameter_is_refused_by_name() {
    let t = serve(cache(&[])).await;
    let admin = serve_router(t.server.admin_router()).await;
    for (query, parameter) in [
        ("limit=ten", "limit"),
        ("offset=-1", "offset"),
        ("load_limit=1.5", "load_limit"),
        ("load_offset=", "load_offset"),
    ] {
        let reply = get(admin, &format!("/status?{query}")).await;
        assert_eq!(reply.status, 400, "{query}");
        assert!(reply.head.contains("application/json"), "{}", reply.head);
        let error = reply.json();
        assert_eq!(error["parameter"], parameter, "{error}");
        assert!(error["error"].as_str().unwrap().contains(parameter), "{error}");
    }
    // A malformed query string is refused too, as JSON.
    let reply = get(admin, "/status?limit=%zz").await;
    assert_eq!(reply.status, 400);
    assert!(reply.json()["error"].is_string());
}

#[tokio::test]
async fn ready_and_the_other_hooks_are_the_applications() {
    let t = serve(cache(&[])).await;
    let loaded = Arc::new(AtomicBool::new(false));
    let ready = loaded.clone();
    let router = t
        .server
        .admin()
        .ready(move || {
            if ready.load(Ordering::SeqCst) {
                Ok("ready: serving the last good configuration\n".into())
            } else {
                Err("no configuration loaded".into())
            }
        })
        .metrics(|text| text.push_str("# TYPE app_up gauge\napp_up 1\n"))
        .status(|body| body["app"] = "test".into())
        .router();
    let admin = serve_router(router).await;

    let reply = get(admin, "/ready").await;
    assert_eq!((reply.status, reply.body.as_str()), (503, "no configuration loaded\n"));
    loaded.store(true, Ordering::SeqCst);
    let reply = get(admin, "/ready").await;
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (200, "ready: serving the last good configuration\n")
    );
    let metrics = get(admin, "/metrics").await.body;
    assert!(metrics.ends_with("app_up 1\n"), "the application's series come last: {metrics}");
    assert!(metrics.contains("xds_requests_total"), "after the server's");
    let status = get(admin, "/status").await.json();
    assert_eq!(status["app"], "test");
    assert_eq!(status["total"], 0);
}

#[tokio::test]
async fn group_labels_are_bounded_with_the_rest_under_other() {
    let nodes = ["n0", "n1", "n2", "n3", "n4"];
    let t = serve(cache(&nodes)).await;
    let mut clients = Vec::new();
    for id in nodes {
        clients.push(subscribed(&t, id).await);
    }
    // One more stream for n4: it has the most streams.
    let extra = subscribed(&t, "n4").await;
    // NACKs, in this order: the first two groups to NACK keep a label of their own.
    for i in [3, 1, 4, 0, 2] {
        let (client, response) = &mut clients[i];
        client.nack(response, "", "rejected").await;
    }
    eventually("five NACKs counted", || t.metric("xds_nacks_total", "sotw", "cluster") == 5.0)
        .await;
    let admin = serve_router(t.server.admin().max_group_labels(2).router()).await;
    let metrics = get(admin, "/metrics").await.body;

    let streams = samples(&metrics, "xds_group_streams");
    // n4 has two streams, then n0 comes first by name; the other three groups are summed.
    assert_eq!(
        streams,
        [("group=\"(other)\"", 3.0), ("group=\"n0\"", 1.0), ("group=\"n4\"", 2.0)],
        "{metrics}"
    );
    let nacks = samples(&metrics, "xds_group_nacks_total");
    assert_eq!(
        nacks,
        [
            ("group=\"(other)\",type=\"cluster\"", 3.0),
            ("group=\"n1\",type=\"cluster\"", 1.0),
            ("group=\"n3\",type=\"cluster\"", 1.0),
        ],
        "{metrics}"
    );
    // The default bound shows all five.
    let admin = serve_router(t.server.admin_router()).await;
    let metrics = get(admin, "/metrics").await.body;
    let groups: BTreeSet<&str> =
        samples(&metrics, "xds_group_streams").into_iter().map(|(l, _)| l).collect();
    assert_eq!(groups.len(), 5, "{metrics}");
    assert!(!groups.iter().any(|l| l.contains(OTHER_GROUP_LABEL)), "{metrics}");
    drop(extra);
}

#[tokio::test]
async fn many_groups_get_a_bounded_number_of_labels() {
    let nodes: Vec<String> = (0..40).map(|i| format!("node-{i:02}")).collect();
    let ids: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let t = serve(cache(&ids)).await;
    let mut clients = Vec::new();
    for id in &ids {
        let (mut client, response) = subscribed(&t, id).await;
        client.nack(&response, "", "no").await;
        clients.push(client);
    }
    eventually("every NACK counted", || t.metric("xds_nacks_total", "sotw", "cluster") == 40.0)
        .await;
    let admin = serve_router(t.server.admin().max_group_labels(10).router()).await;
    let metrics = get(admin, "/metrics").await.body;
    for name in ["xds_group_streams", "xds_group_nacks_total"] {
        let series = samples(&metrics, name);
        // Ten groups and (other): nothing lost, nothing more.
        assert_eq!(series.len(), 11, "{name}: {metrics}");
        assert_eq!(series.iter().map(|(_, v)| v).sum::<f64>(), 40.0, "{name}");
        let other = series.iter().find(|(l, _)| l.contains(OTHER_GROUP_LABEL)).unwrap();
        assert_eq!(other.1, 30.0, "{name}");
    }
}

#[tokio::test]
async fn group_names_are_escaped_and_cut() {
    let weird = "we\"ird\\group\nname";
    let long = "g".repeat(1000);
    let grouping = {
        let long = long.clone();
        move |node: &xds_proto::pb::envoy::config::core::v3::Node| match node.id.as_str() {
            "weird" => weird.to_owned(),
            "long" => long.clone(),
            other => other.to_owned(),
        }
    };
    let cache = SnapshotCache::new(grouping);
    cache.set_snapshot(weird, snapshot![cluster("c", "1")]);
    cache.set_snapshot(&long, snapshot![cluster("c", "1")]);
    let t = serve(cache).await;
    let (mut client, response) = subscribed(&t, "weird").await;
    client.nack(&response, "", "no").await;
    let _long = subscribed(&t, "long").await;
    eventually("the NACK counted", || t.metric("xds_nacks_total", "sotw", "cluster") == 1.0).await;
    let admin = serve_router(t.server.admin_router()).await;
    let metrics = get(admin, "/metrics").await.body;
    let escaped = "we\\\"ird\\\\group\\nname";
    assert!(metrics.contains(&format!("xds_group_streams{{group=\"{escaped}\"}} 1")), "{metrics}");
    assert!(
        metrics
            .contains(&format!("xds_group_nacks_total{{group=\"{escaped}\",type=\"cluster\"}} 1")),
        "{metrics}"
    );
    let cut = "g".repeat(xds_server::admin::MAX_GROUP_LABEL_BYTES);
    assert!(metrics.contains(&format!("xds_group_streams{{group=\"{cut}\"}} 1")), "{metrics}");
    // Every line is one sample or a comment: no label value broke the format.
    for line in metrics.lines() {
        assert!(line.starts_with('#') || line.ends_with(|c: char| c.is_ascii_digit()), "{line}");
    }
    // The status page shows the group as it is (JSON escapes it its own way).
    let status = get(admin, "/status?node=weird").await.json();
    assert_eq!(status["streams"][0]["group"], weird);
}
