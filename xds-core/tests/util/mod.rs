//! Builders and an in-memory view for the core's tests.
#![allow(dead_code, unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};

use xds_core::{
    DeltaRequest, DeltaResource, DeltaResponse, ErrorDetail, Nonces, Resource, SotwRequest,
    SotwResponse, TypeTraits, View,
};

/// A resource: a name and a version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Res {
    pub name: String,
    pub version: String,
    pub ttl: Option<std::time::Duration>,
}

impl Resource for Res {
    fn name(&self) -> &str {
        &self.name
    }
    fn version(&self) -> &str {
        &self.version
    }
    fn ttl(&self) -> Option<std::time::Duration> {
        self.ttl
    }
}

/// An in-memory view with a change log, like the caches keep.
#[derive(Clone, Debug, Default)]
pub struct MemView {
    pub resources: BTreeMap<String, String>,
    pub aliases: BTreeMap<String, String>,
    pub revision: u64,
    pub log: Vec<(u64, String)>,
    /// When true, the view offers no shared `resource_set`: every client keeps a handle per
    /// resource, as with a custom view that does not implement it.
    pub no_set: bool,
    /// When false, `changed_since` answers "cannot tell", forcing full comparisons.
    pub no_history: bool,
    /// When true, the view has no data yet.
    pub not_ready: bool,
    /// Resources with a time to live.
    pub ttls: BTreeMap<String, std::time::Duration>,
    /// Errors attached to names (rule C4).
    pub errors: BTreeMap<String, ErrorDetail>,
}

impl MemView {
    pub fn with(items: &[(&str, &str)]) -> Self {
        let mut v = MemView::default();
        for (n, ver) in items {
            v.set(n, ver);
        }
        v
    }
    pub fn set(&mut self, name: &str, version: &str) {
        self.revision += 1;
        self.resources.insert(name.into(), version.into());
        self.log.push((self.revision, name.into()));
    }
    pub fn delete(&mut self, name: &str) {
        self.revision += 1;
        self.resources.remove(name);
        self.log.push((self.revision, name.into()));
    }
    pub fn alias(&mut self, alias: &str, target: &str) {
        self.revision += 1;
        self.aliases.insert(alias.into(), target.into());
        self.log.push((self.revision, target.into()));
    }
    pub fn set_error(&mut self, name: &str, code: i32, message: &str) {
        self.revision += 1;
        self.errors.insert(name.into(), ErrorDetail { code, message: message.into() });
        self.log.push((self.revision, name.into()));
    }
    fn res(&self, name: &str) -> Option<Res> {
        self.resources.get(name).map(|v| Res {
            name: name.into(),
            version: v.clone(),
            ttl: self.ttls.get(name).copied(),
        })
    }
}

impl View for MemView {
    type Resource = Res;
    fn is_ready(&self) -> bool {
        !self.not_ready
    }
    fn revision(&self) -> u64 {
        self.revision
    }
    fn version(&self) -> xds_core::Text {
        let mut h = 0u64;
        for (n, v) in &self.resources {
            for b in n.bytes().chain([0]).chain(v.bytes()).chain([1]) {
                h = h.wrapping_mul(1_099_511_628_211).wrapping_add(b as u64);
            }
        }
        format!("v{h:x}").into()
    }
    fn get(&self, name: &str) -> Option<Res> {
        self.res(name)
    }
    fn resource_error(&self, name: &str) -> Option<ErrorDetail> {
        self.errors.get(name).cloned()
    }
    fn resolve_alias(&self, alias: &str) -> Option<Res> {
        self.aliases.get(alias).and_then(|t| self.res(t))
    }
    fn for_each(&self, f: &mut dyn FnMut(&Res)) {
        for n in self.resources.keys() {
            if let Some(r) = self.res(n) {
                f(&r);
            }
        }
    }
    fn resource_set(&self) -> Option<xds_core::ResourceSet<Res>> {
        if self.no_set {
            return None;
        }
        let mut all = Vec::new();
        self.for_each(&mut |r| all.push(r.clone()));
        Some(xds_core::ResourceSet::new(all))
    }
    fn changed_since(&self, revision: u64, f: &mut dyn FnMut(&str)) -> bool {
        if self.no_history {
            return false;
        }
        for (rev, name) in &self.log {
            if *rev > revision {
                f(name);
            }
        }
        true
    }
}

pub const CDS: TypeTraits = TypeTraits { wildcard_capable: true, full_state: true, aliases: false };
pub const LDS: TypeTraits = CDS;
pub const EDS: TypeTraits =
    TypeTraits { wildcard_capable: false, full_state: false, aliases: false };
pub const RDS: TypeTraits = EDS;
pub const VHDS: TypeTraits =
    TypeTraits { wildcard_capable: false, full_state: false, aliases: true };

pub fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A SotW request.
pub fn sotw(names_: &[&str], version: &str, nonce: &str) -> SotwRequest {
    SotwRequest {
        version_info: version.into(),
        resource_names: names(names_).into(),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

/// A SotW NACK.
pub fn sotw_nack(names_: &[&str], version: &str, nonce: &str, why: &str) -> SotwRequest {
    SotwRequest {
        error_detail: Some(ErrorDetail { code: 3, message: why.into() }),
        ..sotw(names_, version, nonce)
    }
}

/// A delta request.
pub fn delta(sub: &[&str], unsub: &[&str], nonce: &str) -> DeltaRequest {
    DeltaRequest {
        subscribe: names(sub),
        unsubscribe: names(unsub),
        response_nonce: nonce.into(),
        ..Default::default()
    }
}

/// The (name, version) pairs of a SotW response.
pub fn sotw_items(r: &SotwResponse<Res>) -> Vec<(String, String)> {
    r.resources.iter().map(|x| (x.name.clone(), x.version.clone())).collect()
}

pub fn sotw_names(r: &SotwResponse<Res>) -> Vec<String> {
    r.resources.iter().map(|x| x.name.clone()).collect()
}

/// The entries of a delta response as (name, Some(version)) or (name, None) for "does not exist".
pub fn delta_items(r: &DeltaResponse<Res>) -> Vec<(String, Option<String>)> {
    r.resources
        .iter()
        .map(|e| match e {
            DeltaResource::Present { resource, .. } => {
                (resource.name.clone(), Some(resource.version.clone()))
            }
            DeltaResource::Absent { name, .. } => (name.clone(), None),
        })
        .collect()
}

pub fn delta_names(r: &DeltaResponse<Res>) -> Vec<String> {
    delta_items(r).into_iter().map(|(n, _)| n).collect()
}

pub fn set_of(v: &[String]) -> BTreeSet<String> {
    v.iter().cloned().collect()
}

pub fn nonces() -> Nonces {
    Nonces::new()
}
