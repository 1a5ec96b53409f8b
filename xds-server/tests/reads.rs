//! A stream reads a type's view only when something can be owed from it (rule S6: nothing is
//! sent when nothing changed, and nothing is computed either): a stream woken by a change to one
//! of its types reads that type, and a synced client's lone ACK reads none. A cache whose
//! watches cannot tell what changed (`Watch::take_change` left at its default) has every type
//! read at every wake, as before.
#![allow(clippy::unwrap_used)]

mod util;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use xds_cache::{Cache, CacheError, DynView, Signal, Tables, Watch, WatchRequest};
use xds_proto::{EncodedResource, ResourceType};

use util::*;

/// Clusters and endpoints in `Tables`, behind watches that count the reads of each type.
#[derive(Clone)]
struct Counted {
    tables: Tables<ResourceType>,
    /// Reads of clusters, of endpoints.
    reads: Arc<[AtomicUsize; 2]>,
    /// Whether the watches answer `take_change` (as the built-in caches' do) or keep the
    /// default ("cannot tell").
    marks: bool,
}

impl Counted {
    fn new(marks: bool) -> Self {
        let tables = Tables::new();
        tables.update(&CDS, |t| {
            for name in ["a", "b"] {
                t.upsert(EncodedResource::new(&cluster(name, "1")).unwrap());
            }
        });
        tables.update(&EDS, |t| {
            for name in ["a", "b"] {
                t.upsert(EncodedResource::new(&cla(name, 1)).unwrap());
            }
        });
        Counted { tables, reads: Arc::default(), marks }
    }

    fn reads(&self) -> [usize; 2] {
        [0, 1].map(|i| self.reads[i].load(Ordering::SeqCst))
    }
}

struct CountedWatch {
    inner: Box<dyn Watch>,
    reads: Arc<[AtomicUsize; 2]>,
    index: usize,
    marks: bool,
}

impl Watch for CountedWatch {
    fn read(&self, f: &mut dyn FnMut(&DynView<'_>)) {
        self.reads[self.index].fetch_add(1, Ordering::SeqCst);
        self.inner.read(f);
    }

    fn take_change(&self) -> bool {
        !self.marks || self.inner.take_change()
    }
}

impl Cache for Counted {
    fn watch(&self, req: WatchRequest<'_>, s: Arc<Signal>) -> Result<Box<dyn Watch>, CacheError> {
        let (t, index) = match req.type_url.builtin() {
            Some(CDS) => (CDS, 0),
            Some(EDS) => (EDS, 1),
            _ => return Err(CacheError::UnknownType { type_url: req.type_url.to_string() }),
        };
        let (reads, marks) = (self.reads.clone(), self.marks);
        Ok(Box::new(CountedWatch { inner: self.tables.watch(t, s), reads, index, marks }))
    }
}

/// A delta ADS client of both types, synced: every response ACKed, and every ACK taken in.
async fn synced(t: &TestServer) -> Delta {
    let mut client = Delta::ads(t, "envoy-1").await;
    client.subscribe(CDS, &["a", "b"], &[]).await;
    let r = client.recv_type(CDS).await;
    client.ack(&r).await;
    client.subscribe(EDS, &["a", "b"], &[]).await;
    let r = client.recv_type(EDS).await;
    client.ack(&r).await;
    acked(t, 2).await;
    client
}

/// Waits until the server took in `n` ACKs in all: the reads an ACK's round makes are made
/// before its ACK is counted.
async fn acked(t: &TestServer, n: usize) {
    let count = || {
        (t.metric("xds_acks_total", "delta", "cluster")
            + t.metric("xds_acks_total", "delta", "endpoint")) as usize
    };
    eventually("the ACKs taken in", || count() == n).await;
}

/// Sets `resource` in the table of `t`, receives the change (asserting it names `resource`
/// alone), ACKs it, and waits until the server took in `acks` ACKs in all and sent nothing else.
async fn changed(
    cache: &Counted,
    t: &TestServer,
    client: &mut Delta,
    type_: ResourceType,
    resource: EncodedResource,
    acks: usize,
) {
    let name = resource.name().to_owned();
    cache.tables.update(&type_, |table| table.upsert(resource));
    let r = client.recv_type(type_).await;
    assert_eq!(delta_names(&r), [name]);
    client.ack(&r).await;
    acked(t, acks).await;
    client.expect_quiet().await;
}

/// An update of the endpoints reads the endpoints once, and the clusters not at all; its ACK
/// reads nothing. The clusters, changed next, are read once and sent.
#[tokio::test]
async fn s06_a_change_to_one_type_reads_that_type_and_its_ack_reads_none() {
    let cache = Counted::new(true);
    let t = serve(cache.clone()).await;
    let mut client = synced(&t).await;
    let before = cache.reads();
    let endpoints = EncodedResource::new(&cla("a", 2)).unwrap();
    changed(&cache, &t, &mut client, EDS, endpoints, 3).await;
    assert_eq!(cache.reads(), [before[0], before[1] + 1], "the endpoints, once");
    let clusters = EncodedResource::new(&cluster("b", "2")).unwrap();
    changed(&cache, &t, &mut client, CDS, clusters, 4).await;
    assert_eq!(cache.reads(), [before[0] + 1, before[1] + 1], "then the clusters, once");
}

/// Watches that cannot tell what changed are read at every wake: both types for an update of
/// one; the lone ACK still reads nothing (the round after it knows no view changed).
#[tokio::test]
async fn s06_watches_that_cannot_tell_are_read_at_every_wake() {
    let cache = Counted::new(false);
    let t = serve(cache.clone()).await;
    let mut client = synced(&t).await;
    let before = cache.reads();
    let endpoints = EncodedResource::new(&cla("a", 2)).unwrap();
    changed(&cache, &t, &mut client, EDS, endpoints, 3).await;
    assert_eq!(cache.reads(), [before[0] + 1, before[1] + 1], "both types, once each");
}
