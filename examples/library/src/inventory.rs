//! A `Cache` over an inventory of your own types: services and their instance ports, served as
//! ClusterLoadAssignments (EDS) as they change. This is the whole extension point: a [`Cache`]
//! that hands out a [`Watch`] per stream, a [`View`] of the resources, the [`Watchers`] registry
//! so a stream's signal is released when the stream ends, a [`TypeVersion`] so the same
//! content has the same version on every replica, and a shared [`ResourceSet`] so that clients
//! holding the same endpoints cost no state per endpoint.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use xds_server::prelude::*;
use xds_server::proto::builders::endpoints;

/// The encoded endpoints of every service, and what identifies this state.
#[derive(Default)]
struct State {
    revision: u64,
    version: TypeVersion,
    endpoints: BTreeMap<String, EncodedResource>,
    /// Every resource as one set that all streams share (see [`View::resource_set`]): built by
    /// the first stream that asks after a change, reset by every change.
    shared: OnceLock<ResourceSet<EncodedResource>>,
}

/// The inventory: service name -> instance ports on 127.0.0.1. Clone it freely (a handle).
#[derive(Clone, Default)]
pub struct Inventory {
    state: Arc<RwLock<State>>,
    watchers: Arc<Watchers<()>>,
}

impl Inventory {
    /// Sets a service's instances, and wakes every stream.
    pub fn set_service(&self, name: &str, ports: &[u32]) -> Result<(), EncodeError> {
        let hosts: Vec<(&str, u32)> = ports.iter().map(|&p| ("127.0.0.1", p)).collect();
        let encoded = EncodedResource::new(&endpoints(name, &hosts))?;
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = state.endpoints.remove(name) {
            state.version.remove(name, old.version());
        }
        state.version.insert(name, encoded.version());
        state.endpoints.insert(name.to_owned(), encoded);
        state.revision += 1;
        state.shared = OnceLock::new();
        drop(state); // change first, then signal: a woken stream reads the new state
        self.watchers.notify(&());
        Ok(())
    }

    /// How many streams are watching: back to 0 when every stream has ended.
    pub fn watching(&self) -> usize {
        self.watchers.total()
    }
}

impl View for State {
    type Resource = EncodedResource;
    fn revision(&self) -> u64 {
        self.revision
    }
    fn version(&self) -> String {
        self.version.to_string()
    }
    fn get(&self, name: &str) -> Option<EncodedResource> {
        self.endpoints.get(name).cloned()
    }
    fn for_each(&self, f: &mut dyn FnMut(&EncodedResource)) {
        self.endpoints.values().for_each(f)
    }
    fn resource_set(&self) -> Option<ResourceSet<EncodedResource>> {
        let set = self
            .shared
            .get_or_init(|| ResourceSet::new(self.endpoints.values().cloned().collect()));
        Some(set.clone())
    }
}

/// One stream's watch; dropping it (the stream ended) drops the registration.
struct InventoryWatch {
    state: Arc<RwLock<State>>,
    _registration: Registration<()>,
}

impl Watch for InventoryWatch {
    fn read(&self, f: &mut dyn FnMut(&DynView<'_>)) {
        f(&*self.state.read().unwrap_or_else(PoisonError::into_inner));
    }
}

impl Cache for Inventory {
    fn watch(
        &self,
        request: WatchRequest<'_>,
        signal: Arc<Signal>,
    ) -> Result<Box<dyn Watch>, CacheError> {
        if request.type_url.builtin() != Some(ResourceType::ClusterLoadAssignment) {
            return Err(CacheError::UnknownType { type_url: request.type_url.to_string() });
        }
        let _registration = self.watchers.register((), signal);
        Ok(Box::new(InventoryWatch { state: self.state.clone(), _registration }))
    }
}
