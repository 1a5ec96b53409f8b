//! A model of the resources of one type for the core targets: an in-memory [`View`] with a change
//! log, like the caches keep (the same idea as `xds-core/tests/util`).

use std::collections::BTreeMap;
use std::time::Duration;

use xds_core::{Resource, View};

/// The names resources may have. Requests name these, `*` and a few that never exist.
pub(crate) const POOL: [&str; 5] = ["a", "b", "c", "d", "e"];

/// A resource handle: a name, a version and perhaps a TTL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Res {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) ttl: Option<Duration>,
}

impl Resource for Res {
    fn name(&self) -> &str {
        &self.name
    }
    fn version(&self) -> &str {
        &self.version
    }
    fn ttl(&self) -> Option<Duration> {
        self.ttl
    }
}

/// The resources of one type, with a log of what changed at which revision.
#[derive(Clone, Debug, Default)]
pub(crate) struct MemView {
    pub(crate) resources: BTreeMap<String, (String, Option<Duration>)>,
    revision: u64,
    log: Vec<(u64, String)>,
    /// When set, `changed_since` answers "cannot tell" and the core compares everything.
    pub(crate) no_history: bool,
    /// When set, the view has no data yet: nothing is owed from it.
    pub(crate) not_ready: bool,
}

impl MemView {
    /// Creates or updates `name` at `version`.
    pub(crate) fn set(&mut self, name: &str, version: &str, ttl: Option<Duration>) {
        self.revision += 1;
        self.resources.insert(name.into(), (version.into(), ttl));
        self.log.push((self.revision, name.into()));
        self.trim();
    }

    /// Deletes `name` (a no-op that still bumps the revision when it does not exist, as a cache
    /// may report a name that in the end did not change).
    pub(crate) fn delete(&mut self, name: &str) {
        self.revision += 1;
        self.resources.remove(name);
        self.log.push((self.revision, name.into()));
        self.trim();
    }

    /// Keeps the log short: the core must cope with a view that forgot old revisions.
    fn trim(&mut self) {
        if self.log.len() > 16 {
            self.log.drain(..8);
        }
    }

    /// The resource named `name`, if it exists.
    pub(crate) fn res(&self, name: &str) -> Option<Res> {
        self.resources.get(name).map(|(version, ttl)| Res {
            name: name.into(),
            version: version.clone(),
            ttl: *ttl,
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

    /// A hash of the content: the same resources give the same version (rule S16).
    fn version(&self) -> xds_core::Text {
        let mut h = 0xcbf2_9ce4_8422_2325_u64;
        for (n, (v, _)) in &self.resources {
            for b in n.bytes().chain([0]).chain(v.bytes()).chain([1]) {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("v{h:x}").into()
    }

    fn get(&self, name: &str) -> Option<Res> {
        self.res(name)
    }

    fn for_each(&self, f: &mut dyn FnMut(&Res)) {
        for name in self.resources.keys() {
            if let Some(r) = self.res(name) {
                f(&r);
            }
        }
    }

    fn changed_since(&self, revision: u64, f: &mut dyn FnMut(&str)) -> bool {
        // The log no longer reaches back to `revision`: cannot tell.
        let oldest = self.log.first().map_or(self.revision, |(rev, _)| rev - 1);
        if self.no_history || revision < oldest {
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
