//! The life of streams: graceful shutdown and callbacks, over the wire.

mod util;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tonic::Code;
use xds_cache::SnapshotCache;
use xds_proto::TypeUrl;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_server::{
    Callbacks, Nack, Refusal, Service, StreamEventKind, StreamInfo, XdsRequest, XdsServer,
};

use util::*;

#[tokio::test]
async fn shutdown_ends_open_streams_with_unavailable_and_refuses_new_ones() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let t = serve(cache).await;
    let mut sotw = Sotw::ads(&t, "n1").await;
    sotw.subscribe(CDS, &[], None).await;
    let r = sotw.recv_type(CDS).await;
    sotw.ack(&r).await;
    let mut delta = Delta::clusters(&t, "n1").await;
    delta.subscribe(CDS, &[], &[]).await;
    let d = delta.recv_type(CDS).await;
    delta.ack(&d).await;
    let shutting_down = t.server.shutting_down();

    // drain() shuts down and returns once every stream ended: none is left.
    let left = tokio::time::timeout(WAIT, t.server.drain()).await.expect("drain resolves");
    assert_eq!(left, 0);
    tokio::time::timeout(WAIT, shutting_down).await.expect("shutting_down resolves");
    assert_status(&sotw.recv_err().await, Code::Unavailable, &[]);
    assert_status(&delta.recv_err().await, Code::Unavailable, &[]);
    eventually("every stream closed", || t.server.status().is_empty()).await;

    let mut client = t.ads().await;
    let refused = Sotw::open(None, |r| async move { client.stream_aggregated_resources(r).await })
        .await
        .err()
        .expect("a new stream is refused");
    assert_status(&refused, Code::Unavailable, &[]);
}

#[derive(Default)]
struct Counts {
    opened: AtomicUsize,
    closed: AtomicUsize,
    acks: AtomicUsize,
    nacks: AtomicUsize,
    /// Delta requests `on_request` saw that answer a response.
    delta_answers: AtomicUsize,
    /// The last NACK: node id, group, rejected version, kept version, nonce, text.
    last_nack: Mutex<Option<[String; 6]>>,
}

/// Refuses node "evil", refuses requests naming "forbidden", and counts what it sees.
struct Recorder(Arc<Counts>);

impl Callbacks for Recorder {
    fn on_stream_open(&self, _: &StreamInfo) -> Result<(), Refusal> {
        self.0.opened.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn on_node(&self, _: &StreamInfo, node: &Node) -> Result<(), Refusal> {
        if node.id == "evil" {
            return Err(Refusal(format!("node {} is not welcome", node.id)));
        }
        Ok(())
    }

    fn on_stream_closed(&self, _: &StreamInfo) {
        self.0.closed.fetch_add(1, Ordering::SeqCst);
    }

    fn on_request(
        &self,
        _: &StreamInfo,
        _: &TypeUrl,
        request: XdsRequest<'_>,
    ) -> Result<(), tonic::Status> {
        if matches!(request, XdsRequest::Delta(_)) && !request.response_nonce().is_empty() {
            self.0.delta_answers.fetch_add(1, Ordering::SeqCst);
        }
        if request.names().iter().any(|n| n == "forbidden") {
            return Err(tonic::Status::permission_denied("\"forbidden\" is not for you"));
        }
        Ok(())
    }

    fn on_ack(&self, _: &StreamInfo, _: &TypeUrl, _: &str, _: &str) {
        self.0.acks.fetch_add(1, Ordering::SeqCst);
    }

    fn on_nack(&self, stream: &StreamInfo, nack: &Nack<'_>) {
        self.0.nacks.fetch_add(1, Ordering::SeqCst);
        *self.0.last_nack.lock().expect("lock") = Some([
            stream.node_id().to_owned(),
            stream.group.as_deref().unwrap_or("(none)").to_owned(),
            nack.rejected_version.to_owned(),
            nack.kept_version.to_owned(),
            nack.nonce.to_owned(),
            nack.error.message.clone(),
        ]);
    }
}

async fn recorded() -> (TestServer, SnapshotCache, Arc<Counts>) {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cla("a", 1)]);
    let counts = Arc::new(Counts::default());
    let server = XdsServer::builder(cache.clone()).callbacks(Recorder(counts.clone())).build();
    (start(server).await, cache, counts)
}

#[tokio::test]
async fn callbacks_on_node_refusal_is_permission_denied() {
    let (t, _, counts) = recorded().await;
    let mut evil = Sotw::ads(&t, "evil").await;
    evil.subscribe(CDS, &[], None).await;
    assert_status(&evil.recv_err().await, Code::PermissionDenied, &["evil", "not welcome"]);
    let mut delta = Delta::ads(&t, "evil").await;
    delta.subscribe(CDS, &[], &[]).await;
    assert_status(&delta.recv_err().await, Code::PermissionDenied, &["not welcome"]);
    // Other nodes are served.
    let mut good = Sotw::ads(&t, "n1").await;
    good.subscribe(CDS, &[], None).await;
    assert_eq!(sotw_names(&good.recv_type(CDS).await), ["a"]);
    assert_eq!(counts.opened.load(Ordering::SeqCst), 3);
    eventually("the refused streams closed", || counts.closed.load(Ordering::SeqCst) == 2).await;
}

#[tokio::test]
async fn callbacks_on_request_refusal_ends_the_stream_with_its_status_and_nothing_else() {
    let (t, _, counts) = recorded().await;
    let mut good = Delta::ads(&t, "n1").await;
    good.subscribe(CDS, &["a"], &[]).await;
    let first = good.recv_type(CDS).await;
    good.ack(&first).await;

    // A subscription the callback refuses: the stream ends with the callback's status, SotW and
    // delta alike, and the request changed nothing (no response was sent for it).
    let mut sotw = Sotw::ads(&t, "n1").await;
    sotw.subscribe(EDS, &["a", "forbidden"], None).await;
    assert_status(&sotw.recv_err().await, Code::PermissionDenied, &["forbidden", "not for you"]);
    let mut delta = Delta::ads(&t, "n1").await;
    delta.subscribe(EDS, &["forbidden"], &[]).await;
    assert_status(&delta.recv_err().await, Code::PermissionDenied, &["forbidden"]);
    eventually("the refused streams closed", || counts.closed.load(Ordering::SeqCst) == 2).await;

    // The other stream is untouched and keeps its subscription.
    good.subscribe(EDS, &["a"], &[]).await;
    assert_eq!(good.recv_type(EDS).await.resources.len(), 1);
}

// rules S4, S5: a NACK callback names the node, its group, the rejected version and the text.
#[tokio::test]
async fn callbacks_count_acks_and_nacks() {
    let (t, cache, counts) = recorded().await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    let cds = ads.recv_type(CDS).await;
    ads.ack(&cds).await;
    ads.subscribe(EDS, &["a"], None).await;
    let eds = ads.recv_type(EDS).await;
    ads.nack(&eds, "", "endpoints rejected").await;
    eventually("one ACK and one NACK", || {
        counts.acks.load(Ordering::SeqCst) == 1 && counts.nacks.load(Ordering::SeqCst) == 1
    })
    .await;
    let last = counts.last_nack.lock().expect("lock").clone();
    let expected = ["n1", "n1", &eds.version_info, "", &eds.nonce, "endpoints rejected"];
    assert_eq!(last, Some(expected.map(str::to_owned)), "node, group, rejected, kept, nonce, text");
    cache.set_snapshot("n1", snapshot![cluster("a", "1"), cla("a", 2)]);
    let eds2 = ads.recv_type(EDS).await;
    ads.ack(&eds2).await;
    eventually("a second ACK", || counts.acks.load(Ordering::SeqCst) == 2).await;
    assert_eq!(counts.nacks.load(Ordering::SeqCst), 1);
    drop(ads);
    eventually("the stream closed", || counts.closed.load(Ordering::SeqCst) == 1).await;
}

/// A stream whose client closed its side has let go of everything by the time the client sees
/// its end: its `on_stream_closed` was called and the status registry no longer lists it (the
/// driver drops itself in the poll that ends the stream; the transport drops the body just after
/// sending the end, so this holds either way here, and fails if the driver outlives its stream).
#[tokio::test]
async fn a_stream_is_closed_before_the_client_sees_it_end() {
    let (t, _, counts) = recorded().await;
    for round in 1..=20 {
        let mut ads = Sotw::ads(&t, "n1").await;
        ads.subscribe(CDS, &[], None).await;
        let cds = ads.recv_type(CDS).await;
        ads.ack(&cds).await;
        ads.close_requests();
        assert!(ads.recv_end().await.is_none(), "a clean end");
        assert_eq!(counts.closed.load(Ordering::SeqCst), round, "closed when its end is seen");
        assert!(t.server.status().is_empty(), "no stream left in the status registry");
    }
}

/// A server with callbacks of its own sees every delta ACK in `on_request`, decoded (an ACK is
/// otherwise taken in without being decoded), and each is an ACK: `on_ack` follows.
#[tokio::test]
async fn callbacks_see_every_delta_ack_as_a_request_then_as_an_ack() {
    let (t, cache, counts) = recorded().await;
    let mut delta = Delta::ads(&t, "n1").await;
    delta.subscribe(CDS, &[], &[]).await;
    let r1 = delta.recv_type(CDS).await;
    delta.ack(&r1).await;
    cache.set_snapshot("n1", snapshot![cluster("a", "2"), cla("a", 1)]);
    let r2 = delta.recv_type(CDS).await;
    delta.ack(&r2).await;
    eventually("two ACKs", || counts.acks.load(Ordering::SeqCst) == 2).await;
    assert_eq!(counts.delta_answers.load(Ordering::SeqCst), 2, "each seen by on_request");
}

/// A regroup moves a live stream to another group: its next NACK names the group it now gets
/// its configuration from, not the one it joined.
#[tokio::test]
async fn a_nack_after_a_regroup_names_the_group_the_stream_moved_to() {
    let current = Arc::new(Mutex::new("blue".to_owned()));
    let cache = SnapshotCache::new({
        let current = current.clone();
        move |_: &Node| current.lock().expect("lock").clone()
    });
    cache.set_snapshot("blue", snapshot![cluster("a", "1")]);
    let counts = Arc::new(Counts::default());
    let server = XdsServer::builder(cache.clone()).callbacks(Recorder(counts.clone())).build();
    let t = start(server).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    let blue = ads.recv_type(CDS).await;
    ads.ack(&blue).await;

    cache.set_snapshot("green", snapshot![cluster("a", "2")]);
    *current.lock().expect("lock") = "green".to_owned();
    assert_eq!(cache.regroup(), 1, "the stream's one watch moves");
    let green = ads.recv_type(CDS).await;
    ads.nack(&green, &blue.version_info, "cluster rejected").await;
    eventually("the NACK", || counts.nacks.load(Ordering::SeqCst) == 1).await;
    let last = counts.last_nack.lock().expect("lock").clone().expect("a NACK");
    assert_eq!(
        [&last[0], &last[1], &last[2], &last[3]],
        ["n1", "green", &green.version_info, &blue.version_info]
    );
    let status = t.server.status().to_json();
    assert!(status.to_string().contains("\"group\":\"green\""), "{status}");
    // In the stream's history, the move comes just before the NACK it was found for.
    let events = t.server.status().node("n1").remove(0).events;
    let kinds: Vec<&StreamEventKind> = events.iter().map(|e| &e.what).collect();
    let regrouped =
        StreamEventKind::Regrouped { from: Some("blue".into()), to: Some("green".into()) };
    let at = kinds.iter().position(|k| **k == regrouped).expect("the move in the history");
    assert!(matches!(kinds.get(at + 1), Some(StreamEventKind::Nacked { .. })), "{kinds:?}");
}

#[tokio::test]
async fn service_routes_serve_one_service_alone() {
    let cache = SnapshotCache::by_node_id();
    cache.set_snapshot("n1", snapshot![cluster("a", "1")]);
    let server = XdsServer::new(cache);
    let routes = server.service_routes(Service::Aggregated);
    let t = start_routes(server, routes).await;
    let mut ads = Sotw::ads(&t, "n1").await;
    ads.subscribe(CDS, &[], None).await;
    assert_eq!(sotw_names(&ads.recv_type(CDS).await), ["a"]);
    // CDS's own service is not among the routes: UNIMPLEMENTED, as for any unknown method.
    let mut client = t.cds().await;
    let status = match Sotw::open(None, |r| async move { client.stream_clusters(r).await }).await {
        Err(status) => status,
        Ok(mut cds) => cds.recv_err().await,
    };
    assert_status(&status, Code::Unimplemented, &[]);
}
