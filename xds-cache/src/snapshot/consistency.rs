//! Rule O3: a snapshot whose clusters name endpoints, or whose listeners name routes, that it does
//! not contain is reported, with the missing names. So is a ClusterLoadAssignment whose locality
//! takes its endpoints from an LEDS glob collection (rule C2) that has no member in the snapshot:
//! the client would get a locality with no endpoints, the same outage as a missing assignment.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use xds_proto::{EncodedResource, Reference, ResourceType, TypeUrl, references_of_encoded};

use super::Snapshot;

/// A reference from one resource to another that the snapshot does not contain.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MissingReference {
    /// The type of the resource holding the reference.
    pub from_type: ResourceType,
    /// The name of the resource holding the reference.
    pub from: String,
    /// What it names.
    pub missing: Reference,
}

/// The references a snapshot is missing (rule O3), sorted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConsistencyError {
    /// Every missing reference.
    pub missing: Vec<MissingReference>,
}

impl fmt::Display for ConsistencyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "inconsistent snapshot: ")?;
        for (i, m) in self.missing.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            let (what, gone) = if xds_core::xdstp::is_glob_name(&m.missing.name) {
                ("the collection ", "which has no member")
            } else {
                ("", "which is missing")
            };
            write!(
                f,
                "{} {:?} references {what}{} {:?}, {gone}",
                m.from_type.label(),
                m.from,
                m.missing.resource_type.label(),
                m.missing.name
            )?;
        }
        Ok(())
    }
}

/// The references rule O3 checks, as (type of the referrer, type it names): what
/// [`Snapshot::check_consistency`] looks at, for a caller that checks only what changed.
pub const CHECKED_REFERENCES: [(ResourceType, ResourceType); 4] = [
    (ResourceType::Cluster, ResourceType::ClusterLoadAssignment),
    (ResourceType::ClusterLoadAssignment, ResourceType::LbEndpoint),
    (ResourceType::Listener, ResourceType::RouteConfiguration),
    (ResourceType::ScopedRouteConfiguration, ResourceType::RouteConfiguration),
];

impl Snapshot {
    /// Checks rule O3: every ClusterLoadAssignment an EDS cluster names and every
    /// RouteConfiguration a listener (or scoped route) names through RDS is in the snapshot, and
    /// every LEDS collection a ClusterLoadAssignment names has at least one `LbEndpoint` member
    /// in it (see [`Snapshot::resolves`]). An empty collection is an error, not a warning, for
    /// the same reason a missing assignment is: the client is left with a locality it cannot
    /// route to. To empty a locality, drop it from the assignment in the same snapshot. Serve the
    /// members from another cache (a `MuxCache` route for LEDS) and this check does not apply.
    ///
    /// Other references (routes to clusters, transport sockets to secrets) are not checked: those
    /// resources are often served from elsewhere (static clusters, file-based SDS).
    pub fn check_consistency(&self) -> Result<(), ConsistencyError> {
        self.check_where(|from_type| {
            Box::new(self.map(&TypeUrl::Builtin(from_type)).into_iter().flat_map(|m| m.values()))
        })
    }

    /// [`check_consistency`](Self::check_consistency) of the resources named in `touched` only:
    /// enough when everything else was checked before and nothing was removed since.
    pub(super) fn check_names(
        &self,
        touched: &BTreeMap<TypeUrl, BTreeSet<String>>,
    ) -> Result<(), ConsistencyError> {
        self.check_where(|from_type| {
            let type_url = TypeUrl::Builtin(from_type);
            let names = touched.get(&type_url).into_iter().flatten();
            Box::new(names.filter_map(move |name| self.get(&type_url, name)))
        })
    }

    /// Checks the references of the resources `referrers` gives for each type that makes one.
    fn check_where<'a>(
        &'a self,
        referrers: impl Fn(ResourceType) -> Box<dyn Iterator<Item = &'a EncodedResource> + 'a>,
    ) -> Result<(), ConsistencyError> {
        let mut missing = Vec::new();
        for (from_type, to_type) in CHECKED_REFERENCES {
            for resource in referrers(from_type) {
                // A resource that does not decode names nothing; the client will reject it.
                let refs = references_of_encoded(resource.type_url(), resource.value())
                    .unwrap_or_default();
                for r in refs.into_iter().filter(|r| r.resource_type == to_type) {
                    if !self.resolves(&r) {
                        missing.push(MissingReference {
                            from_type,
                            from: resource.name().to_owned(),
                            missing: r,
                        });
                    }
                }
            }
        }
        missing.sort();
        missing.dedup();
        if missing.is_empty() { Ok(()) } else { Err(ConsistencyError { missing }) }
    }
}
