//! The operator console on the admin router: its page and assets with their headers, and its
//! JSON computed from real streams (SYNCED, PENDING, NACKED, NOT SENT), filtered, paged and
//! refusing bad input; a client's text comes back as data, never as markup.
#![allow(clippy::unwrap_used)]

mod util;

use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::config::core::v3::Locality;
use xds_proto::pb::envoy::config::endpoint::v3::{ClusterStats, UpstreamLocalityStats};
use xds_proto::pb::envoy::service::load_stats::v3::LoadStatsRequest;
use xds_proto::pb::envoy::service::load_stats::v3::load_reporting_service_client::LoadReportingServiceClient;
use xds_proto::pb::google::protobuf::Duration as PbDuration;
use xds_server::XdsServer;

use util::raw_http::{Reply, get, serve_router};
use util::*;

const SCRIPT_NODE: &str = "<script>alert(1)</script><img src=x onerror=alert(2)>";
const NACK_TEXT: &str = "cluster c: \"</td><script>alert(3)</script>\" is not valid";

fn assert_guarded(reply: &Reply, content_type: &str) {
    let head = &reply.head;
    assert!(head.contains(&format!("content-type: {content_type}")), "{head}");
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    assert!(
        head.contains("content-security-policy: default-src 'none'; script-src 'self';"),
        "{head}"
    );
    assert!(!head.contains("unsafe-inline") && !head.contains("unsafe-eval"), "{head}");
    assert!(head.contains("cache-control: no-store"), "{head}");
}

#[tokio::test]
async fn the_page_and_its_assets_are_served_with_strict_headers() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let admin = serve_router(t.server.admin_router()).await;
    let page = get(admin, "/ui").await;
    assert_eq!(page.status, 200);
    assert_guarded(&page, "text/html; charset=utf-8");
    // No inline script or style: the policy would block them, and there is none to block.
    assert!(page.body.contains("<script src=\"ui/console.js\" defer></script>"), "{}", page.body);
    assert_eq!(page.body.matches("<script").count(), 1);
    assert!(!page.body.contains("<style") && !page.body.contains("style=\""));
    for handler in [" onclick", " onload", " onerror", " onchange", "javascript:"] {
        assert!(!page.body.contains(handler), "the page has {handler}");
    }
    let js = get(admin, "/ui/console.js").await;
    assert_eq!(js.status, 200);
    assert_guarded(&js, "text/javascript; charset=utf-8");
    // Data goes into the page as text only.
    for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
        assert!(!js.body.contains(sink), "console.js uses {sink}");
    }
    assert!(js.body.contains("textContent"));
    let css = get(admin, "/ui/console.css").await;
    assert_eq!(css.status, 200);
    assert_guarded(&css, "text/css; charset=utf-8");
}

#[tokio::test]
async fn each_cell_shows_where_the_client_is() {
    // Groups by node id: each node its own cluster "c".
    let cache = SnapshotCache::by_node_id();
    for id in ["synced", "nacker", "waiting", SCRIPT_NODE] {
        cache.set_snapshot(id, snapshot![cluster("c", "1")]);
    }
    let t = serve(cache.clone()).await;
    let admin = serve_router(t.server.admin_router()).await;

    let mut synced = Sotw::ads(&t, "synced").await;
    synced.subscribe(CDS, &[], None).await;
    let r = synced.recv().await;
    synced.ack(&r).await;

    let mut nacker = Sotw::ads(&t, "nacker").await;
    nacker.subscribe(CDS, &[], None).await;
    let first = nacker.recv().await;
    nacker.ack(&first).await;
    cache.set_snapshot("nacker", snapshot![cluster("c", "2")]);
    let second = nacker.recv().await;
    nacker.nack(&second, &first.version_info, NACK_TEXT).await;

    // Receives and never answers.
    let mut waiting = Sotw::ads(&t, "waiting").await;
    waiting.subscribe(CDS, &[], None).await;
    let _ = waiting.recv().await;

    // Subscribed to a group with no configuration: sent nothing.
    let mut unserved = Sotw::ads(&t, "no-config").await;
    unserved.subscribe(CDS, &[], None).await;

    let mut script = Sotw::ads(&t, SCRIPT_NODE).await;
    script.subscribe(CDS, &[], None).await;
    let r = script.recv().await;
    script.ack(&r).await;

    let state_of = |page: &serde_json::Value, node: &str| {
        let rows = page["rows"].as_array().unwrap();
        let row = rows.iter().find(|r| r["node_id"] == node);
        row.map(|r| r["cells"]["cluster"].clone())
    };
    let mut page = serde_json::Value::Null;
    for _ in 0..100 {
        let reply = get(admin, "/ui/api/proxies").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_guarded(&reply, "application/json");
        page = reply.json();
        let states: Vec<_> = ["synced", "nacker", "waiting", "no-config", SCRIPT_NODE]
            .iter()
            .map(|n| state_of(&page, n).map(|c| c["state"].clone()))
            .collect();
        if states
            == ["synced", "nacked", "pending", "not_sent", "synced"]
                .map(|s| Some(serde_json::Value::from(s)))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let nack = state_of(&page, "nacker").unwrap();
    assert_eq!(nack["state"], "nacked", "{page}");
    assert_eq!(nack["error"], NACK_TEXT, "the client's text, as data");
    assert_eq!(nack["rejected_version"], second.version_info.as_str());
    assert_eq!(nack["kept_version"], first.version_info.as_str());
    assert_eq!(state_of(&page, "waiting").unwrap()["state"], "pending", "{page}");
    assert!(state_of(&page, "waiting").unwrap()["since_ms"].is_u64());
    assert_eq!(state_of(&page, "no-config").unwrap()["state"], "not_sent", "{page}");
    assert_eq!(state_of(&page, SCRIPT_NODE).unwrap()["state"], "synced", "{page}");
    assert_eq!(page["types"], serde_json::json!(["cluster"]));
    assert_eq!(page["total"], 5);

    // The NACKing client takes the next version: SYNCED again.
    cache.set_snapshot("nacker", snapshot![cluster("c", "3")]);
    let third = nacker.recv().await;
    nacker.ack(&third).await;
    let mut recovered = false;
    for _ in 0..100 {
        let page = get(admin, "/ui/api/proxies?q=nacker").await.json();
        if state_of(&page, "nacker").unwrap()["state"] == "synced" {
            recovered = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(recovered, "the NACK cleared");

    // Filters, paging.
    let nodes = |page: serde_json::Value| -> Vec<String> {
        page["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["node_id"].as_str().unwrap().into())
            .collect()
    };
    assert_eq!(nodes(get(admin, "/ui/api/proxies?state=pending").await.json()), ["waiting"]);
    assert_eq!(nodes(get(admin, "/ui/api/proxies?group=synced").await.json()), ["synced"]);
    assert_eq!(
        nodes(get(admin, "/ui/api/proxies?type=listener").await.json()),
        Vec::<String>::new()
    );
    let first_page = get(admin, "/ui/api/proxies?limit=2").await.json();
    assert_eq!(first_page["next_offset"], 2);
    assert_eq!(first_page["rows"].as_array().unwrap().len(), 2);
    let last = get(admin, "/ui/api/proxies?limit=2&offset=4").await.json();
    assert_eq!(last["rows"].as_array().unwrap().len(), 1);
    assert!(last.get("next_offset").is_none());

    // One node's streams, its types as a list with their states.
    let path = format!("/ui/api/proxy?node={}", "nacker");
    let detail = get(admin, &path).await;
    assert_guarded(&detail, "application/json");
    let detail = detail.json();
    assert_eq!(detail["streams"][0]["node_id"], "nacker");
    assert_eq!(detail["streams"][0]["types"][0]["type"], "cluster");
    assert_eq!(detail["streams"][0]["types"][0]["state"], "synced");
    assert!(detail["streams"][0]["types"][0]["resources"]["c"].is_string(), "{detail}");
    assert_eq!(detail["streams"][0]["types"][0]["acked_version"], third.version_info.as_str());
    // Its history: what it subscribed to, each response, its ACKs and its NACK with the text.
    let events = detail["streams"][0]["events"].as_array().unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["subscribed", "sent", "sent", "nacked", "sent"], "{detail}");
    assert!(events.iter().all(|e| e["type"] == "cluster" && e["at_ms"].is_u64()));
    assert_eq!(events[1]["version"], first.version_info.as_str());
    assert_eq!(events[1]["resources"], 1);
    assert_eq!(events[1]["acked"], true, "{detail}");
    assert_eq!(events[2]["version"], second.version_info.as_str());
    assert_eq!(events[2]["acked"], false, "NACKed: {detail}");
    assert_eq!(events[3]["rejected_version"], second.version_info.as_str());
    assert_eq!(events[3]["error"], NACK_TEXT, "the client's text, as data");
    assert_eq!(events[4]["version"], third.version_info.as_str());
    assert_eq!(events[4]["acked"], true, "{detail}");
    assert!(events[4]["latency_ms"].is_u64());
    // The table's rows carry no history: ten thousand of them are read every second.
    assert!(!get(admin, "/ui/api/proxies").await.body.contains("\"events\""));
    let script = get(admin, "/ui/api/proxy?node=%3Cscript%3Ealert(1)%3C%2Fscript%3E%3Cimg%20src%3Dx%20onerror%3Dalert(2)%3E").await;
    assert_eq!(script.json()["streams"][0]["node_id"], SCRIPT_NODE);
    drop((synced, nacker, waiting, unserved));
}

#[tokio::test]
async fn a_proxy_without_ads_is_one_row_of_its_streams() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("split", snapshot![cluster("c", "1"), cla("c", 80)]);
    let t = start(XdsServer::builder(cache.clone()).control_plane_id("replica-<2>").build()).await;
    let admin = serve_router(t.server.admin_router()).await;
    // A stream per type, as an Envoy configured without ADS opens them.
    let mut cds = Sotw::clusters(&t, "split").await;
    cds.subscribe(CDS, &[], None).await;
    let r = cds.recv().await;
    cds.ack(&r).await;
    let mut eds = Sotw::endpoints(&t, "split").await;
    eds.subscribe(EDS, &["c"], None).await;
    let _waits = eds.recv().await;
    let mut row = serde_json::Value::Null;
    for _ in 0..100 {
        let page = get(admin, "/ui/api/proxies").await.json();
        row = page["rows"][0].clone();
        if page["total_proxies"] == 1
            && page["total_streams"] == 2
            && row["cells"]["cluster"]["state"] == "synced"
            && row["cells"]["endpoint"]["state"] == "pending"
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(row["node_id"], "split", "{row}");
    let page = get(admin, "/ui/api/proxies").await.json();
    assert_eq!(page["control_plane_id"], "replica-<2>", "which replica serves these proxies");
    assert_eq!(row["streams_total"], 2, "{row}");
    assert_eq!(row["state"], "pending", "the worst of its cells: {row}");
    assert_eq!(row["cells"]["cluster"]["state"], "synced", "{row}");
    assert_eq!(row["cells"]["endpoint"]["state"], "pending", "{row}");
    // The detail view lists both streams.
    let detail = get(admin, "/ui/api/proxy?node=split").await.json();
    assert_eq!(detail["streams"].as_array().unwrap().len(), 2, "{detail}");
}

#[tokio::test]
async fn bad_input_is_a_400_with_its_reason() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let admin = serve_router(t.server.admin_router()).await;
    let long = "g".repeat(300);
    for (path, parameter) in [
        ("/ui/api/proxies?limit=-1".to_owned(), "limit"),
        ("/ui/api/proxies?offset=1e3".to_owned(), "offset"),
        ("/ui/api/proxies?state=%3Cscript%3E".to_owned(), "state"),
        ("/ui/api/proxies?sort=nodes".to_owned(), "sort"),
        ("/ui/api/proxies?order=sideways".to_owned(), "order"),
        ("/ui/api/proxies?stat=nacked".to_owned(), "stat"),
        (format!("/ui/api/proxies?group={long}"), "group"),
        ("/ui/api/proxy".to_owned(), "node"),
        ("/ui/api/proxy?node=a&x=1".to_owned(), "x"),
        (format!("/ui/api/proxy?node={}", "n".repeat(5000)), "node"),
    ] {
        let reply = get(admin, &path).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        assert_guarded(&reply, "application/json");
        let body = reply.json();
        assert_eq!(body["parameter"], parameter, "{path}: {body}");
        assert!(body["error"].as_str().unwrap().len() < 300, "{body}");
    }
    // The value echoed in an error is JSON data: a quote cannot end the string.
    let reply = get(admin, "/ui/api/proxies?state=%22%7D%3Cscript%3E").await;
    assert!(reply.json()["error"].as_str().unwrap().contains("\"}<script>"));
    let reply = get(admin, "/ui/api/proxies?limit=%ZZ").await;
    assert_eq!(reply.status, 400, "{}", reply.body);
}

/// One LRS report from `node_id` over a real stream: the stream is kept open (a closed stream
/// leaves the view).
async fn report_load(
    t: &TestServer,
    node_id: &str,
    cluster_name: &str,
) -> tokio::sync::mpsc::Sender<LoadStatsRequest> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut client = LoadReportingServiceClient::new(t.channel().await);
    let mut responses = client
        .stream_load_stats(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    tx.send(LoadStatsRequest { node: Some(node(node_id)), cluster_stats: vec![] }).await.unwrap();
    let _first = responses.message().await.unwrap();
    let locality = |zone: &str, issued: u64, errors: u64| UpstreamLocalityStats {
        locality: Some(Locality { region: "r".into(), zone: zone.into(), sub_zone: String::new() }),
        total_issued_requests: issued,
        total_successful_requests: issued - errors,
        total_error_requests: errors,
        ..Default::default()
    };
    let stats = ClusterStats {
        cluster_name: cluster_name.into(),
        upstream_locality_stats: vec![locality("a", 10, 1), locality("b", 5, 0)],
        total_dropped_requests: 2,
        load_report_interval: Some(PbDuration { seconds: 1, nanos: 0 }),
        ..Default::default()
    };
    tx.send(LoadStatsRequest { node: None, cluster_stats: vec![stats] }).await.unwrap();
    // The response stream stays open with the request stream.
    tokio::spawn(async move { while let Ok(Some(_)) = responses.message().await {} });
    tx
}

#[tokio::test]
async fn the_panels_show_reported_load_ack_latency_and_no_configuration_history() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("envoy-1", snapshot![cluster("c", "1")]);
    let t = serve(cache.clone()).await;
    let admin = serve_router(t.server.admin_router()).await;

    let mut ads = Sotw::ads(&t, "envoy-1").await;
    ads.subscribe(CDS, &[], None).await;
    let r = ads.recv().await;
    ads.ack(&r).await;
    let _lrs = report_load(&t, "envoy-1", SCRIPT_NODE).await;

    let mut load = serde_json::Value::Null;
    for _ in 0..100 {
        let reply = get(admin, "/ui/api/load").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_guarded(&reply, "application/json");
        load = reply.json();
        if load["clusters_total"] == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(load["streams"], 1, "{load}");
    let reported = &load["clusters"][0];
    assert_eq!(reported["name"], SCRIPT_NODE, "the client's cluster name, as data");
    assert_eq!(reported["issued"], 15, "{load}");
    assert_eq!(reported["errors"], 1);
    assert_eq!(reported["dropped"], 2);
    assert_eq!(reported["localities_total"], 2);
    assert_eq!(reported["localities"][0]["locality"], "r/a/");
    assert_eq!(reported["localities"][1]["issued"], 5);
    assert_eq!(load["next_offset"], serde_json::Value::Null);
    assert_eq!(get(admin, "/ui/api/load?offset=1").await.json()["clusters"], serde_json::json!([]));

    let mut ack = serde_json::Value::Null;
    for _ in 0..100 {
        ack = get(admin, "/ui/api/ack").await.json();
        if ack["count"] == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(ack["count"], 1, "{ack}");
    let buckets = ack["buckets"].as_array().unwrap();
    assert_eq!(buckets.iter().map(|b| b["count"].as_u64().unwrap()).sum::<u64>(), 1);
    assert_eq!(buckets.last().unwrap()["le_seconds"], serde_json::Value::Null, "the +Inf bucket");

    // This server runs no HDS and the plain admin router has no configuration hook.
    let health = get(admin, "/ui/api/health").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), serde_json::json!({ "enabled": false }));
    let config = get(admin, "/ui/api/config").await;
    assert_eq!(config.status, 200);
    assert_guarded(&config, "application/json");
    assert_eq!(config.json(), serde_json::json!({ "history": null }));

    // Bad input is refused, not read as the first page.
    for path in ["/ui/api/load?offset=-1", "/ui/api/health?offset=x", "/ui/api/load?page=2"] {
        let reply = get(admin, path).await;
        assert_eq!(reply.status, 400, "{path}: {}", reply.body);
        assert!(reply.json()["error"].is_string(), "{path}");
    }
}

#[tokio::test]
async fn the_configuration_panel_shows_what_the_application_gives() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let router = t
        .server
        .admin()
        .console_config(|| {
            serde_json::json!({
                "summary": {"source": "test"},
                "history": [{"at_ms": 1, "source": "files", "outcome": "refused", "error": NACK_TEXT}],
            })
        })
        .router();
    let admin = serve_router(router).await;
    let config = get(admin, "/ui/api/config").await.json();
    assert_eq!(config["summary"]["source"], "test");
    assert_eq!(config["history"][0]["error"], NACK_TEXT, "text, as data");
    assert_eq!(config["history_total"], 1);
    // The page links each panel.
    let page = get(admin, "/ui").await.body;
    for panel in ["config", "load", "health", "ack"] {
        assert!(page.contains(&format!("href=\"ui?panel={panel}\"")), "{panel}");
    }
}
