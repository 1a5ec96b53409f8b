//! Health checking delegated to the proxies (HDS), wired back into EDS: every connected Envoy
//! is asked to TCP-check the `backend` endpoints; whenever the reported health changes, the
//! ClusterLoadAssignment the LinearCache serves is rebuilt with the endpoints some node reports
//! not healthy marked `UNHEALTHY`, so every client stops sending them traffic.

use std::time::Duration;

use xds_cache::{LinearCache, MuxCache};
use xds_proto::ResourceType;
use xds_proto::builders::{eds_cluster, endpoints};
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::core::v3::health_check::{HealthChecker, TcpHealthCheck};
use xds_proto::pb::envoy::config::core::v3::{HealthCheck, HealthStatus, Node};
use xds_proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_proto::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use xds_proto::pb::envoy::service::health::v3::{
    ClusterHealthCheck, HealthCheckSpecifier, LocalityEndpoints,
};
use xds_proto::pb::google::protobuf::{Duration as PbDuration, UInt32Value};
use xds_server::hds::{HealthDiscoveryServer, HealthSnapshot};
use xds_server::{ServerConfig, XdsServer};

const HOSTS: [(&str, u32); 2] = [("127.0.0.1", 8080), ("127.0.0.1", 8081)];

/// What every node checks: the `backend` endpoints over TCP, every 5 s.
fn specifier(_: &Node) -> HealthCheckSpecifier {
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

/// The `backend` endpoints with those some node reports not healthy marked `UNHEALTHY`.
fn assignment(health: &HealthSnapshot) -> ClusterLoadAssignment {
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clusters = LinearCache::of::<Cluster>();
    let cla = LinearCache::of::<ClusterLoadAssignment>();
    clusters.upsert(&eds_cluster("backend"))?;
    cla.upsert(&endpoints("backend", &HOSTS))?;

    let mux = MuxCache::new()
        .route(ResourceType::Cluster, clusters.clone())
        .route(ResourceType::ClusterLoadAssignment, cla.clone());
    let config = ServerConfig { allow_anonymous: true, ..Default::default() };
    let server = XdsServer::builder(mux)
        .config(config)
        .health_discovery(HealthDiscoveryServer::new(specifier))
        .build();

    // Reported health -> EDS. Latest wins: a burst of reports is one rebuild; an unchanged
    // assignment is not sent again (same content, same version).
    let mut health = server.health_discovery().map(HealthDiscoveryServer::subscribe);
    tokio::spawn(async move {
        let Some(health) = health.as_mut() else { return };
        loop {
            let view = health.changed().await;
            if let Err(e) = cla.upsert(&assignment(&view)) {
                eprintln!("update refused: {e}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    println!("hds-to-eds: xDS and HDS on 127.0.0.1:18000");
    xds_examples::serve_until_ctrl_c(server.routes()).await?;
    Ok(())
}
