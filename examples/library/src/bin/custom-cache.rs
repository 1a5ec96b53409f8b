//! A `Cache` over an inventory of your own types: services and their instances, turned into
//! ClusterLoadAssignments as they change. Implementing `Cache`, `Watch` and `View` is all it takes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use xds_cache::{Cache, CacheError, DynView, Signal, Watch, WatchRequest};
use xds_core::View;
use xds_proto::builders::endpoints;
use xds_proto::{EncodedResource, ResourceType};

/// The user's own inventory: service name -> instance ports, encoded as endpoints on change.
#[derive(Default)]
struct Inventory {
    endpoints: RwLock<(u64, BTreeMap<String, EncodedResource>)>,
    signals: Mutex<Vec<Arc<Signal>>>,
}

impl Inventory {
    fn set_service(&self, name: &str, ports: &[u32]) -> Result<(), xds_proto::EncodeError> {
        let hosts: Vec<(&str, u32)> = ports.iter().map(|&p| ("127.0.0.1", p)).collect();
        let encoded = EncodedResource::new(&endpoints(name, &hosts))?;
        let mut guard = self.endpoints.write().unwrap_or_else(|e| e.into_inner());
        guard.0 += 1;
        guard.1.insert(name.to_owned(), encoded);
        drop(guard);
        self.signals.lock().unwrap_or_else(|e| e.into_inner()).iter().for_each(|s| s.raise());
        Ok(())
    }
}

/// The view a stream reads: the inventory's endpoints. No change history, so streams compare
/// their whole subscription on each change (fine for a small inventory).
struct Endpoints<'a>(&'a (u64, BTreeMap<String, EncodedResource>));

impl View for Endpoints<'_> {
    type Resource = EncodedResource;
    fn revision(&self) -> u64 {
        self.0.0
    }
    fn version(&self) -> String {
        self.0.1.values().map(|r| r.version()).collect::<Vec<_>>().join(".")
    }
    fn get(&self, name: &str) -> Option<EncodedResource> {
        self.0.1.get(name).cloned()
    }
    fn for_each(&self, f: &mut dyn FnMut(&EncodedResource)) {
        self.0.1.values().for_each(f)
    }
}

struct InventoryWatch(Arc<Inventory>);

impl Watch for InventoryWatch {
    fn read(&self, f: &mut dyn FnMut(&DynView<'_>)) {
        f(&Endpoints(&self.0.endpoints.read().unwrap_or_else(|e| e.into_inner())));
    }
}

#[derive(Clone, Default)]
struct InventoryCache(Arc<Inventory>);

impl Cache for InventoryCache {
    fn watch(
        &self,
        request: WatchRequest<'_>,
        signal: Arc<Signal>,
    ) -> Result<Box<dyn Watch>, CacheError> {
        if request.type_url.builtin() != Some(ResourceType::ClusterLoadAssignment) {
            return Err(CacheError::UnknownType { type_url: request.type_url.to_string() });
        }
        // A real implementation removes the signal when the watch is dropped.
        self.0.signals.lock().unwrap_or_else(|e| e.into_inner()).push(signal);
        Ok(Box::new(InventoryWatch(self.0.clone())))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cache = InventoryCache::default();
    cache.0.set_service("payments", &[9001, 9002])?;
    cache.0.set_service("search", &[9101])?;
    println!("custom-cache: EDS for `payments` and `search` on 127.0.0.1:18000");
    tonic::transport::Server::builder()
        .add_routes(xds_server::XdsServer::new(cache).routes())
        .serve_with_shutdown("127.0.0.1:18000".parse()?, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
