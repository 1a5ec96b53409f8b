//! The operator console on the admin router: its page and assets with their headers, and its
//! JSON computed from real streams (SYNCED, PENDING, NACKED, NOT SENT), filtered, paged and
//! refusing bad input; a client's text comes back as data, never as markup.
#![allow(clippy::unwrap_used)]

mod util;

use std::net::SocketAddr;

use tokio::net::TcpListener;
use xds_cache::SnapshotCache;

use util::raw_http::{Reply, request};
use util::*;

async fn serve_admin(router: axum::Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, "").await
}

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
    let admin = serve_admin(t.server.admin_router()).await;
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
    let admin = serve_admin(t.server.admin_router()).await;

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
    let first = get(admin, "/ui/api/proxies?limit=2").await.json();
    assert_eq!(first["next_offset"], 2);
    assert_eq!(first["rows"].as_array().unwrap().len(), 2);
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
    let script = get(admin, "/ui/api/proxy?node=%3Cscript%3Ealert(1)%3C%2Fscript%3E%3Cimg%20src%3Dx%20onerror%3Dalert(2)%3E").await;
    assert_eq!(script.json()["streams"][0]["node_id"], SCRIPT_NODE);
    drop((synced, nacker, waiting, unserved));
}

#[tokio::test]
async fn bad_input_is_a_400_with_its_reason() {
    let t = serve(SnapshotCache::by_node_id()).await;
    let admin = serve_admin(t.server.admin_router()).await;
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
