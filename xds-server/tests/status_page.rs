//! A status page stays bounded in bytes however much its streams hold: a client subscribes to
//! up to 262,144 names per type, and a page of 100 such streams used to render them all.
#![allow(clippy::unwrap_used)]

mod util;

use xds_cache::SnapshotCache;

use util::*;

#[tokio::test]
async fn a_page_cuts_long_subscriptions_and_counts_them() {
    // Each node's group serves one cluster and none of the names asked for, so each stream is
    // answered and holds a NOT_FOUND per name (rule C4).
    let cache = SnapshotCache::by_node_id();
    for i in 0..3 {
        cache.set_snapshot(&format!("n{i}"), snapshot![cluster("other", "1")]);
    }
    let t = serve(cache).await;
    let many: Vec<String> =
        (0..5_000).map(|i| format!("cluster-{i:05}-{}", "x".repeat(100))).collect();
    let list: Vec<&str> = many.iter().map(String::as_str).collect();
    let mut clients = Vec::new();
    for i in 0..3 {
        let mut client = Sotw::ads(&t, &format!("n{i}")).await;
        client.subscribe(CDS, &list, None).await;
        clients.push(client);
    }
    eventually("three streams subscribed", || {
        let page = t.server.status().page_json(None, 0, 100);
        page["streams"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| !s["types"].as_object().unwrap().is_empty())
            .count()
            == 3
    })
    .await;
    // None of the names exists: each stream holds a standing NOT_FOUND per name (rule C4) once
    // its response is out, as many errors as names.
    eventually("every stream told NOT_FOUND for every name", || {
        let page = t.server.status().page_json(None, 0, 100);
        page["streams"].as_array().unwrap().iter().all(|s| {
            s["types"].as_object().unwrap().values().all(|cds| cds["errors_total"] == 5_000)
        })
    })
    .await;
    let page = t.server.status().page_json(None, 0, 100);
    let size = page.to_string().len();
    // 100 names, resources and errors of ~115 bytes a stream, and its latest events (its
    // subscription lists the first three names).
    assert!(size < 128 << 10, "a page of {size} bytes");
    for stream in page["streams"].as_array().unwrap() {
        let events = stream["events"].as_array().unwrap();
        assert!(events.len() <= 16, "{}", events.len());
        assert_eq!(events[0]["added"], 5_000, "{}", events[0]);
        assert_eq!(events[0]["names"].as_array().unwrap().len(), 3, "{}", events[0]);
        let (_, cds) = stream["types"].as_object().unwrap().iter().next().unwrap();
        assert_eq!(cds["names"].as_array().unwrap().len(), 100, "{cds}");
        assert_eq!(cds["names_total"], 5_000);
        assert_eq!(cds["resources"].as_object().unwrap().len(), 100, "{cds}");
        assert_eq!(cds["resources_total"], 5_000, "each name is held as absent");
        assert_eq!(cds["errors"].as_object().unwrap().len(), 100, "{cds}");
        assert_eq!(cds["errors_total"], 5_000);
    }
    assert_eq!(page["total"], 3);
    assert!(page.get("next_offset").is_none());
}
