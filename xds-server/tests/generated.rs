//! A cache that makes resources only when a client asks for them (`Tables::generated`): only the
//! names some client subscribed to are ever made, each once for every client; a name the
//! inventory does not know is `NOT_FOUND`, and one it cannot build now is told in
//! `resource_errors` (rule C4); a name the policy refuses is never made.
#![allow(clippy::unwrap_used)]

mod util;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use xds_cache::{Cache, CacheError, Signal, Tables, Watch, WatchRequest};
use xds_core::{ErrorDetail, code};
use xds_proto::{EncodedResource, ResourceType};
use xds_server::authz::Request;
use xds_server::{Authorizer, Refusal, XdsServer};

use util::*;

/// Endpoints for 10,000 services, made when asked; `svc-broken` cannot be made now.
#[derive(Clone)]
struct Inventory {
    tables: Tables<ResourceType>,
    made: Arc<AtomicUsize>,
}

impl Inventory {
    fn new() -> Self {
        let made = Arc::new(AtomicUsize::new(0));
        let counter = made.clone();
        let tables = Tables::generated(move |_: &ResourceType, name: &str| {
            counter.fetch_add(1, Ordering::SeqCst);
            if name == "svc-broken" {
                let message = "the inventory behind svc-broken is unreachable".to_owned();
                return Err(ErrorDetail { code: code::UNAVAILABLE, message });
            }
            let known = name.strip_prefix("svc-").and_then(|n| n.parse::<u32>().ok());
            Ok(known.filter(|&n| n < 10_000).map(|n| EncodedResource::new(&cla(name, n)).unwrap()))
        });
        // Loaded (empty): a key without a table is not ready, and nothing is made for it.
        tables.update(&ResourceType::ClusterLoadAssignment, |_| ());
        Inventory { tables, made }
    }
}

impl Cache for Inventory {
    fn watch(&self, req: WatchRequest<'_>, s: Arc<Signal>) -> Result<Box<dyn Watch>, CacheError> {
        match req.type_url.builtin() {
            Some(t @ ResourceType::ClusterLoadAssignment) => Ok(self.tables.watch(t, s)),
            _ => Err(CacheError::UnknownType { type_url: req.type_url.to_string() }),
        }
    }
}

fn errors(
    r: &xds_server::proto::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse,
) -> Vec<(String, i32, String)> {
    r.resource_errors
        .iter()
        .map(|e| {
            let name = e.resource_name.as_ref().map(|n| n.name.clone()).unwrap_or_default();
            let detail = e.error_detail.clone().unwrap_or_default();
            (name, detail.code, detail.message)
        })
        .collect()
}

#[tokio::test]
async fn only_subscribed_names_are_made_once_for_every_client_with_errors_per_name() {
    let inventory = Inventory::new();
    let t = serve(inventory.clone()).await;
    let mut first = Delta::ads(&t, "envoy-1").await;
    first.subscribe(EDS, &["svc-7", "svc-42", "svc-unknown", "svc-broken"], &[]).await;
    let r = first.recv_type(EDS).await;
    // Rule D6: the unknown name is also answered with a bodiless resource.
    let mut sent: Vec<&str> =
        r.resources.iter().filter(|r| r.resource.is_some()).map(|r| r.name.as_str()).collect();
    sent.sort();
    assert_eq!(sent, ["svc-42", "svc-7"]);
    let mut told = errors(&r);
    told.sort();
    assert_eq!(told.len(), 2, "{told:?}");
    assert_eq!((told[0].0.as_str(), told[0].1), ("svc-broken", code::UNAVAILABLE));
    assert!(told[0].2.contains("unreachable"), "{told:?}");
    assert_eq!((told[1].0.as_str(), told[1].1), ("svc-unknown", code::NOT_FOUND));
    assert_eq!(inventory.made.load(Ordering::SeqCst), 4, "one call per name, not 10,000");
    first.ack(&r).await;

    // Another client of the same names: served from what was made, nothing is made again
    // (but the unknown name, which is asked for again: nothing was kept for it).
    let mut second = Delta::ads(&t, "envoy-2").await;
    second.subscribe(EDS, &["svc-7", "svc-unknown"], &[]).await;
    let r = second.recv_type(EDS).await;
    assert_eq!(r.resources.iter().filter(|r| r.resource.is_some()).count(), 1);
    assert_eq!(inventory.made.load(Ordering::SeqCst), 5);

    // A name added later is made then, and only it is sent.
    first.subscribe(EDS, &["svc-9"], &[]).await;
    let r = first.recv_type(EDS).await;
    assert_eq!(r.resources.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["svc-9"]);
    assert_eq!(inventory.made.load(Ordering::SeqCst), 6);
}

/// Refuses `svc-secret` to everyone.
struct NoSecret;

impl Authorizer for NoSecret {
    fn authorize(&self, _: &Request<'_>) -> Result<(), Refusal> {
        Ok(())
    }
    fn authorize_resource(&self, _: &Request<'_>, name: &str) -> Result<(), Refusal> {
        if name == "svc-secret" { Err(Refusal("not for you".into())) } else { Ok(()) }
    }
}

#[tokio::test]
async fn a_name_the_policy_refuses_is_never_made() {
    let inventory = Inventory::new();
    let t = start(XdsServer::builder(inventory.clone()).authorizer(NoSecret).build()).await;
    let mut client = Delta::ads(&t, "envoy-1").await;
    client.subscribe(EDS, &["svc-1", "svc-secret"], &[]).await;
    let r = client.recv_type(EDS).await;
    assert_eq!(r.resources.len(), 1);
    let told = errors(&r);
    assert_eq!(told.len(), 1);
    assert_eq!((told[0].0.as_str(), told[0].1), ("svc-secret", code::PERMISSION_DENIED));
    assert_eq!(inventory.made.load(Ordering::SeqCst), 1, "svc-secret was never asked for");
}
