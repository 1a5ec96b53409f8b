#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::Instant;

use serde_json::json;
use xds_proto::{ResourceType, TypeUrl};

use super::api::{CellState, ProxyQuery, proxies_page, proxy_detail};
use crate::status::{NackStatus, StreamStatus, TypeStatus};

const CDS: ResourceType = ResourceType::Cluster;
const LDS: ResourceType = ResourceType::Listener;

fn synced(version: &str) -> TypeStatus {
    TypeStatus {
        sent_version: Some(version.into()),
        sent_nonce: Some(format!("n-{version}").into()),
        acked_version: Some(version.into()),
        ..Default::default()
    }
}

/// Sent at 4,000 ms, not ACKed.
fn pending(sent: &str, acked: &str) -> TypeStatus {
    TypeStatus { acked_version: Some(acked.into()), sent_ms: 4_000, ..synced(sent) }
}

fn nacked(sent: &str, kept: &str, error: &str) -> TypeStatus {
    let nack = NackStatus::new(kept.into(), sent.into(), format!("n-{sent}"), error, 1_000);
    TypeStatus { nack: Some(Box::new(nack)), ..pending(sent, kept) }
}

fn stream(
    id: u64,
    node: &str,
    group: Option<&str>,
    types: Vec<(ResourceType, TypeStatus)>,
) -> StreamStatus {
    StreamStatus {
        stream: id,
        variant: "sotw",
        node_id: node.into(),
        node_cluster: String::new(),
        opened_ms: 100 + id,
        types: types.into_iter().map(|(t, s)| (TypeUrl::parse(t.type_url()), s)).collect(),
        group: group.map(str::to_owned),
        unserved_since_ms: None,
        unserved_types: Vec::new(),
        events: Vec::new(),
        node: None,
    }
}

fn query(pairs: &[(&str, &str)]) -> ProxyQuery {
    let map: HashMap<String, String> =
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    ProxyQuery::parse(&map).unwrap()
}

fn bad(pairs: &[(&str, &str)]) -> String {
    let map: HashMap<String, String> =
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    ProxyQuery::parse(&map).unwrap_err().parameter
}

fn fleet() -> Vec<StreamStatus> {
    vec![
        stream(1, "envoy-b", Some("blue"), vec![(LDS, synced("1")), (CDS, synced("7"))]),
        stream(2, "envoy-a", Some("green"), vec![(CDS, nacked("8", "7", "bad <b>lb</b>"))]),
        stream(3, "envoy-c", Some("blue"), vec![(CDS, pending("9", "8"))]),
        stream(4, "envoy-d", None, vec![(CDS, TypeStatus::default())]),
        stream(5, "", None, vec![]),
    ]
}

fn nodes(page: &serde_json::Value) -> Vec<String> {
    page["rows"].as_array().unwrap().iter().map(|r| r["node_id"].as_str().unwrap().into()).collect()
}

#[test]
fn a_cell_is_synced_pending_nacked_or_not_sent() {
    assert_eq!(CellState::of(&synced("1")), CellState::Synced);
    assert_eq!(CellState::of(&pending("2", "1")), CellState::Pending);
    assert_eq!(CellState::of(&nacked("2", "1", "no")), CellState::Nacked);
    assert_eq!(CellState::of(&TypeStatus::default()), CellState::NotSent);
    // A NACK of an older response: the newer one is what the client is working on.
    let overtaken = TypeStatus { sent_nonce: Some("n-3".into()), ..nacked("3", "1", "no") };
    let overtaken = TypeStatus { sent_version: Some("3".into()), ..overtaken };
    let mut older = overtaken.clone();
    older.nack.as_mut().unwrap().nonce = "n-2".into();
    assert_eq!(CellState::of(&older), CellState::Pending);
}

#[test]
fn the_page_has_a_row_per_proxy_and_a_cell_per_type() {
    let page = proxies_page(fleet(), &query(&[]), 5_000);
    assert_eq!(page["total"], 5);
    assert_eq!(page["total_streams"], 5);
    assert_eq!(page["total_proxies"], 5);
    // Make-before-break order: clusters before listeners.
    assert_eq!(page["types"], json!(["cluster", "listener"]));
    assert_eq!(page["groups"], json!(["blue", "green"]));
    assert_eq!(nodes(&page), ["", "envoy-a", "envoy-b", "envoy-c", "envoy-d"]);
    let rows = page["rows"].as_array().unwrap();
    let a = &rows[1]["cells"]["cluster"];
    assert_eq!(a["state"], "nacked");
    assert_eq!(a["rejected_version"], "8");
    assert_eq!(a["kept_version"], "7");
    assert_eq!(
        a["error"], "bad <b>lb</b>",
        "the text as the client sent it: the page shows it as text"
    );
    assert_eq!(a["since_ms"], 1_000);
    assert_eq!(rows[1]["state"], "nacked");
    assert_eq!(rows[2]["cells"]["listener"]["state"], "synced");
    assert_eq!(rows[3]["cells"]["cluster"]["state"], "pending");
    assert_eq!(rows[3]["cells"]["cluster"]["since_ms"], 4_000, "when it was sent");
    assert_eq!(rows[4]["cells"]["cluster"]["state"], "not_sent");
    assert!(rows[4].get("group").is_none());
    assert!(rows[0]["state"].is_null(), "a stream with no type yet");
    assert_eq!(page["counts"], json!({"synced": 2, "pending": 1, "nacked": 1, "not_sent": 1}));
    // Serialized by serde: a quote or angle bracket in a client's text stays inside its string.
    let text = page.to_string();
    let back: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back, page);
}

#[test]
fn the_streams_of_one_node_are_one_row_showing_the_worst() {
    // A proxy without ADS: a stream per type, then a second CDS stream (a reconnect whose old
    // stream is not closed yet) that NACKs. Two anonymous streams stay two rows.
    let mut lds = stream(4, "envoy-x", Some("blue"), vec![(LDS, pending("2", "1"))]);
    lds.variant = "delta";
    lds.opened_ms = 50;
    let streams = vec![
        stream(2, "envoy-x", Some("blue"), vec![(CDS, synced("7"))]),
        stream(3, "", None, vec![]),
        lds,
        stream(6, "", None, vec![]),
        stream(7, "envoy-x", Some("green"), vec![(CDS, nacked("8", "7", "no"))]),
        stream(8, "envoy-y", Some("green"), vec![(CDS, synced("7"))]),
    ];
    // By node id, anonymous first; by stream, in the order of each row's first stream.
    assert_eq!(
        nodes(&proxies_page(streams.clone(), &query(&[]), 0)),
        ["", "", "envoy-x", "envoy-y"]
    );
    let page = proxies_page(streams.clone(), &query(&[("sort", "stream")]), 5_000);
    assert_eq!(page["total_streams"], 6);
    assert_eq!(page["total_proxies"], 4);
    assert_eq!(nodes(&page), ["envoy-x", "", "", "envoy-y"]);
    let x = &page["rows"][0];
    assert_eq!(x["streams"], json!([2, 4, 7]));
    assert_eq!(x["streams_total"], 3);
    assert_eq!(x["stream"], 2, "the first stream stands for the row");
    assert_eq!(x["variant"], "delta+sotw");
    assert_eq!(x["connected_ms"], 50, "the earliest stream");
    assert_eq!(x["group"], "blue", "the first stream's group");
    assert_eq!(x["state"], "nacked");
    assert_eq!(x["cells"]["cluster"]["state"], "nacked", "the worst of its two CDS streams");
    assert_eq!(x["cells"]["cluster"]["streams"], 2);
    assert_eq!(x["cells"]["cluster"]["rejected_version"], "8");
    assert_eq!(x["cells"]["listener"]["state"], "pending");
    assert!(x["cells"]["listener"].get("streams").is_none(), "one stream carries it");
    assert_eq!(page["counts"], json!({"synced": 1, "pending": 1, "nacked": 1, "not_sent": 0}));
    // A filter matches a row when any of its streams does.
    let look = |pairs: &[(&str, &str)]| nodes(&proxies_page(streams.clone(), &query(pairs), 0));
    assert_eq!(look(&[("group", "green")]), ["envoy-x", "envoy-y"]);
    assert_eq!(look(&[("state", "nacked")]), ["envoy-x"]);
    assert_eq!(look(&[("sort", "connected")]), ["envoy-x", "", "", "envoy-y"], "x since 50");
    // A node with more streams than a row lists.
    let many: Vec<StreamStatus> = (0..40).map(|i| stream(i, "busy", None, vec![])).collect();
    let page = proxies_page(many, &query(&[]), 0);
    assert_eq!(page["rows"][0]["streams"].as_array().unwrap().len(), 16);
    assert_eq!(page["rows"][0]["streams_total"], 40);
}

#[test]
fn filters_narrow_the_rows() {
    let look = |pairs: &[(&str, &str)]| nodes(&proxies_page(fleet(), &query(pairs), 5_000));
    assert_eq!(look(&[("group", "blue")]), ["envoy-b", "envoy-c"]);
    assert_eq!(look(&[("state", "nacked")]), ["envoy-a"]);
    assert_eq!(look(&[("state", "synced")]), ["envoy-b"]);
    assert_eq!(look(&[("type", "listener")]), ["envoy-b"]);
    assert_eq!(look(&[("type", "listener"), ("state", "pending")]), Vec::<String>::new());
    assert_eq!(look(&[("type", "cluster"), ("state", "pending")]), ["envoy-c"]);
    assert_eq!(look(&[("q", "oy-d")]), ["envoy-d"]);
    assert_eq!(look(&[("group", "blue"), ("state", "pending")]), ["envoy-c"]);
    assert_eq!(look(&[("type", "secret")]), Vec::<String>::new());
    // Counts are of the filtered rows.
    let page = proxies_page(fleet(), &query(&[("group", "blue")]), 0);
    assert_eq!(page["counts"], json!({"synced": 2, "pending": 1, "nacked": 0, "not_sent": 0}));
    assert_eq!(page["total"], 2);
    assert_eq!(page["total_streams"], 5);
}

#[test]
fn rows_sort_by_each_key_with_the_stream_breaking_ties() {
    let look = |pairs: &[(&str, &str)]| nodes(&proxies_page(fleet(), &query(pairs), 5_000));
    assert_eq!(look(&[("sort", "state")]), ["envoy-a", "envoy-c", "envoy-d", "envoy-b", ""]);
    assert_eq!(
        look(&[("sort", "node"), ("order", "desc")]),
        ["envoy-d", "envoy-c", "envoy-b", "envoy-a", ""]
    );
    assert_eq!(look(&[("sort", "connected")]), ["envoy-b", "envoy-a", "envoy-c", "envoy-d", ""]);
    assert_eq!(
        look(&[("sort", "stream"), ("order", "desc")]),
        ["", "envoy-d", "envoy-c", "envoy-a", "envoy-b"]
    );
    // No group sorts first; streams 1 and 3 share "blue" and keep their ids' order.
    assert_eq!(look(&[("sort", "group")]), ["envoy-d", "", "envoy-b", "envoy-c", "envoy-a"]);
}

#[test]
fn bad_input_is_refused_with_the_parameter() {
    assert_eq!(bad(&[("limit", "-1")]), "limit");
    assert_eq!(bad(&[("offset", "ten")]), "offset");
    assert_eq!(bad(&[("state", "happy")]), "state");
    assert_eq!(bad(&[("sort", "<script>")]), "sort");
    assert_eq!(bad(&[("order", "up")]), "order");
    assert_eq!(bad(&[("grup", "blue")]), "grup");
    assert_eq!(bad(&[("group", &"g".repeat(257))]), "group");
    assert_eq!(bad(&[("q", &"n".repeat(257))]), "q");
    let map: HashMap<String, String> = [("x".repeat(10_000), String::new())].into_iter().collect();
    let error = ProxyQuery::parse(&map).unwrap_err();
    assert!(error.error.len() < 1_000 && error.parameter.len() <= 4096, "{}", error.error.len());
    // Empty filters are no filters; a limit is clamped.
    let page = proxies_page(fleet(), &query(&[("group", ""), ("limit", "0")]), 0);
    assert_eq!(page["limit"], 1);
    assert_eq!(page["rows"].as_array().unwrap().len(), 1);
    let page = proxies_page(fleet(), &query(&[("limit", "100000")]), 0);
    assert_eq!(page["limit"], super::MAX_CONSOLE_PAGE);
}

#[test]
fn a_pending_cell_is_dated_by_when_its_response_was_sent() {
    let at = |streams| {
        let page = proxies_page(streams, &query(&[]), 9_000);
        page["rows"][0]["cells"]["cluster"]["since_ms"].clone()
    };
    let sent = |ms| TypeStatus { sent_ms: ms, ..pending("2", "1") };
    assert_eq!(at(vec![stream(1, "n", None, vec![(CDS, sent(1_000))])]), 1_000);
    assert!(at(vec![stream(1, "n", None, vec![(CDS, sent(0))])]).is_null(), "no time recorded");
    let done = TypeStatus { sent_ms: 1_000, ..synced("3") };
    assert!(at(vec![stream(1, "n", None, vec![(CDS, done)])]).is_null(), "ACKed: no age");
}

#[test]
fn ten_thousand_proxies_page_quickly_and_boundedly() {
    let streams: Vec<StreamStatus> = (0..10_000u64)
        .map(|i| {
            let cds = match i % 3 {
                0 => synced("7"),
                1 => pending("8", "7"),
                _ => nacked("8", "7", &"e".repeat(10_000)),
            };
            let group = format!("g{}", i % 500);
            stream(
                i,
                &format!("node-{i:05}-{}", "x".repeat(50)),
                Some(&group),
                vec![(CDS, cds), (LDS, synced("1"))],
            )
        })
        .collect();
    let start = Instant::now();
    let page = proxies_page(
        streams.clone(),
        &query(&[("sort", "state"), ("offset", "9900"), ("limit", "500")]),
        0,
    );
    let took = start.elapsed();
    assert_eq!(page["total"], 10_000);
    assert_eq!(nodes(&page).len(), 100);
    assert!(page.get("next_offset").is_none());
    // Debug build, shared machine: generous, but an O(n^2) page would take seconds.
    assert!(took.as_millis() < 2_000, "{took:?}");
    let page = proxies_page(streams, &query(&[("state", "nacked"), ("limit", "500")]), 0);
    assert_eq!(page["total"], 3_333);
    let size = page.to_string().len();
    assert!(size <= (1 << 20) + 4_096, "{size} bytes");
    assert!(page["rows"][0]["cells"]["cluster"]["error"].as_str().unwrap().len() <= 1024);
    assert_eq!(page["rows"][0]["cells"]["cluster"]["error_bytes"], 10_000, "as the client sent it");
    assert_eq!(page["groups"].as_array().unwrap().len(), super::MAX_LISTED_GROUPS);
    let next = page["next_offset"].as_u64().unwrap() as usize;
    assert_eq!(next, page["rows"].as_array().unwrap().len());
}

#[test]
fn the_detail_lists_types_with_their_state() {
    let page = json!({"streams": [{"stream": 1, "types": {
        (ResourceType::Listener.type_url()): {"sent_version": "1", "sent_nonce": "a", "acked_version": "1"},
        (ResourceType::Cluster.type_url()): {"sent_version": "2", "sent_nonce": "b", "acked_version": "1",
            "nack": {"nonce": "b", "error": "no"}},
        (ResourceType::ClusterLoadAssignment.type_url()): {"sent_version": null},
    }}], "total": 1, "offset": 0});
    let detail = proxy_detail(page, 7);
    let types = detail["streams"][0]["types"].as_array().unwrap();
    let shown: Vec<(&str, &str)> =
        types.iter().map(|t| (t["type"].as_str().unwrap(), t["state"].as_str().unwrap())).collect();
    assert_eq!(shown, [("cluster", "nacked"), ("endpoint", "not_sent"), ("listener", "synced")]);
    assert_eq!(detail["now_ms"], 7);
}
