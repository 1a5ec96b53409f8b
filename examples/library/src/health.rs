//! Health checking delegated to the proxies (HDS), wired back into EDS: what the `hds-to-eds`
//! binary serves, as a library so it can be tested.
//!
//! Reported health changes what *every* client is sent: an endpoint some reporter calls not
//! healthy is marked `UNHEALTHY` for all. So health is taken only from authorized reporters,
//! decided where the server decides everything else, its [`Authorizer`]: [`Reporters`] lets
//! anyone read configuration (the example serves anonymous clients) but lets a stream report
//! health only when its node id is one of the configured reporters *and* its verified client
//! certificate names that node (mutual TLS). Without TLS nobody can prove who they are, so
//! every report is refused with `PERMISSION_DENIED`.

use xds_server::authz::{Access, AllowList, Request};
use xds_server::hds::HealthSnapshot;
use xds_server::proto::builders::endpoints;
use xds_server::proto::pb::envoy::config::core::v3::health_check::{HealthChecker, TcpHealthCheck};
use xds_server::proto::pb::envoy::config::core::v3::{HealthCheck, HealthStatus, Node};
use xds_server::proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_server::proto::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use xds_server::proto::pb::envoy::service::health::v3::{
    ClusterHealthCheck, HealthCheckSpecifier, LocalityEndpoints,
};
use xds_server::proto::pb::google::protobuf::{Duration as PbDuration, UInt32Value};
use xds_server::{Authorizer, NodeIdentity, Refusal};

/// The endpoints of the `backend` cluster that the reporters check.
pub const HOSTS: [(&str, u32); 2] = [("127.0.0.1", 8080), ("127.0.0.1", 8081)];

/// Who may report health: the listed node ids, each proven by a client certificate that names
/// it (a DNS or URI subject alternative name equal to the id, as [`NodeIdentity`] checks): an
/// [`AllowList`] asked for reports only. Everything else (reading configuration, load reports)
/// is allowed, as in the rest of the example.
#[derive(Clone, Debug, Default)]
pub struct Reporters {
    list: AllowList,
}

impl Reporters {
    /// Reporters with these node ids (none: nobody may report).
    pub fn new(ids: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self { list: AllowList::new().node_ids(ids).verified(NodeIdentity::new()) }
    }
}

impl Authorizer for Reporters {
    fn authorize(&self, request: &Request<'_>) -> Result<(), Refusal> {
        // Load reports (LRS) are not served by this example; health reports are the ones that
        // change what others are sent.
        let Access::Report { .. } = request.access else { return Ok(()) };
        self.list.authorize(request)
    }
}

/// What every node checks: the `backend` endpoints over TCP, every 5 s.
pub fn specifier(_: &Node) -> HealthCheckSpecifier {
    let seconds = |s| Some(PbDuration { seconds: s, nanos: 0 });
    let endpoints = endpoints("backend", &HOSTS).endpoints[0]
        .lb_endpoints
        .iter()
        .filter_map(|e| match &e.host_identifier {
            Some(HostIdentifier::Endpoint(e)) => Some(e.clone()),
            _ => None,
        })
        .collect();
    HealthCheckSpecifier {
        cluster_health_checks: vec![ClusterHealthCheck {
            cluster_name: "backend".into(),
            health_checks: vec![HealthCheck {
                timeout: seconds(1),
                interval: seconds(5),
                unhealthy_threshold: Some(UInt32Value { value: 1 }),
                healthy_threshold: Some(UInt32Value { value: 1 }),
                health_checker: Some(HealthChecker::TcpHealthCheck(TcpHealthCheck::default())),
                ..Default::default()
            }],
            locality_endpoints: vec![LocalityEndpoints { locality: None, endpoints }],
            ..Default::default()
        }],
        interval: seconds(10),
    }
}

/// The `backend` endpoints with those some reporter reports not healthy marked `UNHEALTHY`.
pub fn assignment(health: &HealthSnapshot) -> ClusterLoadAssignment {
    let mut cla = endpoints("backend", &HOSTS);
    for (lb, (host, port)) in cla.endpoints[0].lb_endpoints.iter_mut().zip(HOSTS) {
        let reported =
            health.clusters.get("backend").and_then(|e| e.get(&format!("{host}:{port}")));
        if reported.is_some_and(|e| !e.is_healthy()) {
            lb.health_status = HealthStatus::Unhealthy as i32;
        }
    }
    cla
}
