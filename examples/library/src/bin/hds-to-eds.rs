//! Health checking delegated to the proxies (HDS), wired back into EDS: every connected Envoy
//! is asked to TCP-check the `backend` endpoints; whenever the reported health changes, the
//! ClusterLoadAssignment the LinearCache serves is rebuilt with the endpoints some reporter
//! reports not healthy marked `UNHEALTHY`, so every client stops sending them traffic.
//!
//! Since one report changes what every client is sent, only authorized reporters are heard
//! (see `xds_examples::health::Reporters`): the node ids in `HDS_REPORTERS` (comma-separated),
//! each proven by a client certificate naming it. Serve with mutual TLS by setting
//! `XDS_TLS_CERT`, `XDS_TLS_KEY` (the server's PEM chain and key) and `XDS_CLIENT_CA` (the CA
//! that signs reporters' certificates). Without them xDS is served in plain text and every
//! health report is refused with `PERMISSION_DENIED`.

use std::path::PathBuf;
use std::time::Duration;

use xds_examples::health::{HOSTS, Reporters, assignment, specifier};
use xds_server::XdsServer;
use xds_server::cache::{LinearCache, MuxCache};
use xds_server::hds::HealthDiscoveryServer;
use xds_server::proto::ResourceType;
use xds_server::proto::builders::{eds_cluster, endpoints};
use xds_server::proto::pb::envoy::config::cluster::v3::Cluster;
use xds_server::proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use xds_server::transport::{Incoming, TransportConfig, tls_config};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clusters = LinearCache::of::<Cluster>();
    let cla = LinearCache::of::<ClusterLoadAssignment>();
    clusters.upsert(&eds_cluster("backend"))?;
    cla.upsert(&endpoints("backend", &HOSTS))?;

    let reporters: Vec<String> = std::env::var("HDS_REPORTERS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .collect();
    let env = |key: &str| std::env::var_os(key).map(PathBuf::from);
    let tls = match (env("XDS_TLS_CERT"), env("XDS_TLS_KEY")) {
        (Some(cert), Some(key)) => Some(tls_config(&cert, &key, env("XDS_CLIENT_CA").as_deref())?),
        _ => None,
    };
    if tls.is_none() || env("XDS_CLIENT_CA").is_none() || reporters.is_empty() {
        eprintln!(
            "hds-to-eds: health reports need mutual TLS (XDS_TLS_CERT, XDS_TLS_KEY, \
             XDS_CLIENT_CA) and reporters (HDS_REPORTERS); without them every report is refused"
        );
    }

    let mux = MuxCache::new()
        .route(ResourceType::Cluster, clusters.clone())
        .route(ResourceType::ClusterLoadAssignment, cla.clone());
    let server = XdsServer::builder(mux)
        .allow_anonymous(true)
        .authorizer(Reporters::new(reporters))
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

    let listener = tokio::net::TcpListener::bind("127.0.0.1:18000").await?;
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let grpc = xds_server::tonic::transport::Server::builder().add_routes(server.routes());
    match tls {
        Some(tls) => {
            println!("hds-to-eds: xDS and HDS on 127.0.0.1:18000 (TLS)");
            let incoming = Incoming::tls(listener, TransportConfig::default(), tls);
            grpc.serve_with_incoming_shutdown(incoming, ctrl_c).await?;
        }
        None => {
            println!("hds-to-eds: xDS and HDS on 127.0.0.1:18000 (plain text: no reporter)");
            let incoming = Incoming::plain(listener, TransportConfig::default());
            grpc.serve_with_incoming_shutdown(incoming, ctrl_c).await?;
        }
    }
    Ok(())
}
