//! A programmatic control plane: clusters and endpoints kept in `LinearCache`s and changed from
//! code, the way a service-discovery integration does. Every 5 seconds the `backend` endpoints
//! move between ports 8080 and 8081; connected clients get only the changed resource.

use std::time::Duration;

use xds_server::XdsServer;
use xds_server::cache::{LinearCache, MuxCache};
use xds_server::proto::ResourceType;
use xds_server::proto::builders::{eds_cluster, endpoints};
use xds_server::proto::pb::envoy::config::cluster::v3::Cluster;
use xds_server::proto::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let clusters = LinearCache::of::<Cluster>();
    let cla = LinearCache::of::<ClusterLoadAssignment>();
    clusters.upsert(&eds_cluster("backend"))?;
    cla.upsert(&endpoints("backend", &[("127.0.0.1", 8080)]))?;

    let mux = MuxCache::new()
        .route(ResourceType::Cluster, clusters.clone())
        .route(ResourceType::ClusterLoadAssignment, cla.clone());
    let server = XdsServer::builder(mux).allow_anonymous(true).build();

    // The "service registry": endpoints move every 5 seconds.
    tokio::spawn(async move {
        for port in [8081, 8080].into_iter().cycle() {
            tokio::time::sleep(Duration::from_secs(5)).await;
            match cla.upsert(&endpoints("backend", &[("127.0.0.1", port)])) {
                Ok(changed) => println!("backend -> 127.0.0.1:{port} (changed: {changed})"),
                Err(e) => eprintln!("update refused: {e}"),
            }
        }
    });

    println!("linear-endpoints: xDS on 127.0.0.1:18000 (CDS + EDS)");
    xds_examples::serve_until_ctrl_c(server.routes()).await?;
    Ok(())
}
