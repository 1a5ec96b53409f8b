//! The `server_request` fuzz target's checks as a property test that runs in `cargo test`:
//! arbitrary bytes, framed as gRPC requests (or not framed at all), go through
//! `XdsServer::routes()` in process to the SotW, delta and fetch methods, and every answer must be
//! well-formed gRPC that ends in time. `cargo fuzz run server_request` searches much further.

mod util;

use std::collections::BTreeSet;
use std::time::Duration;

use http_body_util::BodyExt;
use proptest::prelude::*;
use tower::ServiceExt;
use xds_cache::SnapshotCache;
use xds_proto::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use xds_proto::prost::Message;
use xds_proto::{ADS_DELTA_METHOD, ADS_SERVICE, ADS_SOTW_METHOD, ResourceType};
use xds_server::{Limits, ServerConfig, XdsServer};

use util::*;

/// How long one call may take, after its request body ended, before it counts as a hang.
const DEADLINE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Sotw,
    Delta,
    Fetch,
}

/// ADS SotW, ADS delta, a per-type stream (SotW or delta) or a per-type fetch.
fn path(selector: u8, t: ResourceType) -> (String, Method) {
    match selector % 5 {
        0 => (format!("/{ADS_SERVICE}/{ADS_SOTW_METHOD}"), Method::Sotw),
        1 => (format!("/{ADS_SERVICE}/{ADS_DELTA_METHOD}"), Method::Delta),
        2 => t.sotw_path().map_or((t.delta_path(), Method::Delta), |p| (p, Method::Sotw)),
        3 => (t.delta_path(), Method::Delta),
        _ => t.fetch_path().map_or((t.delta_path(), Method::Delta), |p| (p, Method::Fetch)),
    }
}

/// How the body is made.
#[derive(Clone, Debug)]
enum Body {
    /// Each byte string is one framed message.
    Framed(Vec<Vec<u8>>),
    /// Well-formed requests (fields from small pools), framed.
    Requests(Vec<(u8, u8, Vec<u8>, u8)>),
    /// The bytes as they are: frame headers with any flag and length.
    Raw(Vec<u8>),
}

fn body() -> impl Strategy<Value = Body> {
    let bytes = proptest::collection::vec(any::<u8>(), 0..64);
    prop_oneof![
        proptest::collection::vec(bytes.clone(), 1..4).prop_map(Body::Framed),
        proptest::collection::vec((any::<u8>(), any::<u8>(), bytes.clone(), any::<u8>()), 1..4)
            .prop_map(Body::Requests),
        proptest::collection::vec(any::<u8>(), 0..128).prop_map(Body::Raw),
    ]
}

fn frame(out: &mut Vec<u8>, message: &[u8]) {
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
}

const NODES: [&str; 3] = ["n1", "", "nobody"];
const NAMES: [&str; 4] = ["a", "*", "missing", ""];

/// A request from pools: node, type, names, nonce; the byte string is appended as junk when its
/// first byte is odd.
fn request(method: Method, (n, t, junk, nonce): &(u8, u8, Vec<u8>, u8)) -> Vec<u8> {
    let node = (n % 4 < 3).then(|| node(NODES[usize::from(n % 4) % NODES.len()]));
    let type_url = match t % 12 {
        10 => String::new(),
        11 => "type.googleapis.com/no.Such".to_owned(),
        i => url(ResourceType::ALL[usize::from(i)]),
    };
    let names: Vec<String> =
        junk.iter().take(3).map(|b| NAMES[usize::from(*b) % NAMES.len()].to_owned()).collect();
    let nonce = ["", "1", "2", "x"][usize::from(nonce % 4)].to_owned();
    let mut bytes = match method {
        Method::Delta => DeltaDiscoveryRequest {
            node,
            type_url,
            resource_names_subscribe: names,
            response_nonce: nonce,
            ..Default::default()
        }
        .encode_to_vec(),
        Method::Sotw | Method::Fetch => DiscoveryRequest {
            node,
            type_url,
            resource_names: names,
            response_nonce: nonce,
            ..Default::default()
        }
        .encode_to_vec(),
    };
    if junk.first().is_some_and(|b| b % 2 == 1) {
        bytes.extend_from_slice(junk);
    }
    bytes
}

fn encode(method: Method, body: &Body) -> Vec<u8> {
    let mut out = Vec::new();
    match body {
        Body::Framed(messages) => messages.iter().for_each(|m| frame(&mut out, m)),
        Body::Requests(requests) => {
            requests.iter().for_each(|r| frame(&mut out, &request(method, r)));
        }
        Body::Raw(bytes) => out.extend_from_slice(bytes),
    }
    out
}

fn server(small: bool) -> XdsServer {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "0"), cla("a", 80)]);
    let mut config = ServerConfig::default().fetch_timeout(Duration::from_millis(5));
    if small {
        config.allow_anonymous = true;
        config.limits = Limits::default().max_request_bytes(64).max_names_per_request(2);
    }
    XdsServer::builder(cache).config(config).build()
}

fn grpc_status(value: &http::HeaderValue) -> u16 {
    match value.to_str().ok().and_then(|s| s.parse::<u16>().ok()) {
        Some(code) if code <= 16 => code,
        _ => panic!("invalid grpc-status {value:?}"),
    }
}

fn check_message(method: Method, bytes: &[u8], nonces: &mut BTreeSet<String>) {
    let (type_url, nonce) = match method {
        Method::Delta => {
            let r = DeltaDiscoveryResponse::decode(bytes).expect("a DeltaDiscoveryResponse");
            let mut names = BTreeSet::new();
            for name in r.resources.iter().map(|x| &x.name).chain(&r.removed_resources) {
                assert!(names.insert(name.clone()), "{name} twice in one response");
            }
            (r.type_url, r.nonce)
        }
        Method::Sotw | Method::Fetch => {
            let r = DiscoveryResponse::decode(bytes).expect("a DiscoveryResponse");
            (r.type_url, r.nonce)
        }
    };
    assert!(!type_url.is_empty(), "a response without type_url");
    if method != Method::Fetch {
        assert!(nonces.insert(nonce.clone()) && !nonce.is_empty(), "nonce {nonce:?} not fresh");
    }
}

/// Sends `body` to `path` and checks the answer: HTTP 200, messages that decode, one valid
/// `grpc-status` at the end (in trailers, or in the headers of a trailers-only answer). Returns
/// how many messages came and the status.
async fn call(
    server: &XdsServer,
    path: &str,
    method: Method,
    body: Vec<u8>,
    chunk: usize,
) -> (usize, u16) {
    let chunks: Vec<Result<bytes::Bytes, std::convert::Infallible>> =
        body.chunks(chunk.max(1)).map(|c| Ok(bytes::Bytes::copy_from_slice(c))).collect();
    let request = http::Request::builder()
        .method("POST")
        .uri(format!("http://test{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(axum::body::Body::from_stream(futures_util::stream::iter(chunks)))
        .expect("a valid request");
    let Ok(response) = server.routes().oneshot(request).await;
    assert_eq!(response.status(), http::StatusCode::OK);
    let mut status = response.headers().get("grpc-status").map(grpc_status);
    let mut body = response.into_body();
    let mut buf = Vec::new();
    let mut messages = 0;
    let mut nonces = BTreeSet::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("a response body that does not fail");
        match frame.into_data() {
            Ok(data) => {
                assert!(status.is_none(), "data after the status");
                buf.extend_from_slice(&data);
                while buf.len() >= 5 {
                    assert_eq!(buf[0], 0, "an uncompressed message");
                    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                    if buf.len() < 5 + len {
                        break;
                    }
                    check_message(method, &buf[5..5 + len], &mut nonces);
                    buf.drain(..5 + len);
                    messages += 1;
                }
            }
            Err(frame) => {
                let trailers = frame.into_trailers().expect("data or trailers");
                assert!(status.is_none(), "two statuses");
                status = Some(grpc_status(trailers.get("grpc-status").expect("grpc-status")));
                assert!(buf.is_empty(), "a message cut short");
            }
        }
    }
    let status = status.expect("the answer ends with a grpc-status");
    if method == Method::Fetch && status == 0 {
        assert_eq!(messages, 1, "a successful fetch answers one message");
    }
    (messages, status)
}

/// One case: returns how many messages the answer had and its `grpc-status`.
fn run(small: bool, selector: u8, t: usize, body: &Body, chunk: usize) -> (usize, u16) {
    let t = ResourceType::ALL[t % ResourceType::ALL.len()];
    let (path, method) = path(selector, t);
    let bytes = encode(method, body);
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
    rt.block_on(async {
        let server = server(small);
        let answered = tokio::time::timeout(DEADLINE, call(&server, &path, method, bytes, chunk));
        answered.await.unwrap_or_else(|_| panic!("{path}: no complete answer within {DEADLINE:?}"))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_requests_get_well_formed_grpc_answers(
        small in any::<bool>(),
        selector in any::<u8>(),
        t in any::<usize>(),
        body in body(),
        chunk in 1usize..48,
    ) {
        run(small, selector, t, &body, chunk);
    }
}

#[test]
fn a_valid_request_is_answered_through_the_harness() {
    // The harness is not vacuous: a well-formed cluster request from `n1` gets its clusters on
    // every method, then the stream ends cleanly when the request body does.
    let cds = Body::Requests(vec![(0, 1, vec![], 0)]);
    for selector in [0, 2, 4] {
        assert_eq!(run(false, selector, 1, &cds, 7), (1, 0), "selector {selector}");
    }
    let delta = Body::Requests(vec![(0, 1, vec![], 0)]);
    for selector in [1, 3] {
        assert_eq!(run(false, selector, 1, &delta, 7), (1, 0), "selector {selector}");
    }
}

#[test]
fn a_truncated_frame_ends_the_stream_with_a_status() {
    // A frame header that promises more bytes than the body has.
    for selector in 0..5 {
        let (_, status) = run(false, selector, 1, &Body::Raw(vec![0, 0, 0, 0, 9, 1, 2]), 3);
        assert_ne!(status, 0, "selector {selector}");
    }
}

#[test]
fn a_compressed_flag_without_encoding_is_refused_cleanly() {
    for selector in 0..5 {
        let (_, status) = run(true, selector, 1, &Body::Raw(vec![1, 0, 0, 0, 1, 0]), 64);
        assert_ne!(status, 0, "selector {selector}");
    }
}
