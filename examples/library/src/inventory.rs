//! A `Cache` over an inventory of your own types: services and their instance ports, served as
//! Clusters (CDS) and ClusterLoadAssignments (EDS) as they change.
//!
//! This is the whole extension point. [`Tables`] keeps a [`ResourceTable`] per type and the
//! streams watching each; a table owns what the protocol needs: a revision per change, the
//! content-hash type version (the same content has the same version on every replica, so a
//! client can reconnect anywhere without being resent what it holds), the names changed since a
//! stream last looked (deletions included: a change costs each stream O(changed), never a
//! comparison of everything it holds), and one shared set that every client holding the same
//! resources points to. The cache itself only says which table a stream reads.

use std::sync::Arc;

use ResourceType::{Cluster, ClusterLoadAssignment as Endpoints};
use xds_server::cache::prelude::*;
use xds_server::proto::builders::{eds_cluster, endpoints};

/// The inventory: service name -> instance ports on 127.0.0.1. Clone it freely (a handle).
///
/// A type has no table until the first service is set: clients wait for data rather than be
/// told that nothing exists while the inventory is still loading.
#[derive(Clone, Default)]
pub struct Inventory {
    tables: Tables<ResourceType>,
}

impl Inventory {
    /// Sets a service's instances. Only its two resources change, and only if their content
    /// did; the endpoints go first, so a client never holds a cluster without them.
    pub fn set_service(&self, name: &str, ports: &[u32]) -> Result<(), EncodeError> {
        let hosts: Vec<(&str, u32)> = ports.iter().map(|&p| ("127.0.0.1", p)).collect();
        let assignment = EncodedResource::new(&endpoints(name, &hosts))?;
        let cluster = EncodedResource::new(&eds_cluster(name))?;
        self.tables.update(&Endpoints, |t| t.upsert(assignment));
        self.tables.update(&Cluster, |t| t.upsert(cluster));
        Ok(())
    }

    /// Removes a service: its cluster first, then its endpoints.
    pub fn remove_service(&self, name: &str) {
        self.tables.update(&Cluster, |t| t.delete(name));
        self.tables.update(&Endpoints, |t| t.delete(name));
    }

    /// How many streams are watching: back to 0 when every stream has ended.
    pub fn watching(&self) -> usize {
        self.tables.watching_total()
    }
}

impl Cache for Inventory {
    /// A stream reads the table of its type.
    fn watch(&self, req: WatchRequest<'_>, s: Arc<Signal>) -> Result<Box<dyn Watch>, CacheError> {
        match req.type_url.builtin() {
            Some(t @ (Cluster | Endpoints)) => Ok(self.tables.watch(t, s)),
            _ => Err(CacheError::UnknownType { type_url: req.type_url.to_string() }),
        }
    }
}
