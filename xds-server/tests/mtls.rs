//! mTLS end to end: a client must present a certificate signed by the configured CA, and with
//! `RequireNodeIdentity` the node id it claims must be the one its certificate names.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tokio_stream::wrappers::TcpListenerStream;
use tonic::Code;
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
};
use xds_cache::LinearCache;
use xds_proto::ResourceType;
use xds_proto::pb::envoy::config::cluster::v3::Cluster;
use xds_proto::pb::envoy::config::core::v3::Node;
use xds_proto::pb::envoy::service::discovery::v3::DiscoveryRequest;
use xds_proto::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use xds_server::{RequireNodeIdentity, XdsServer};

struct Pki {
    ca_pem: String,
    server: (String, String),
    client: (String, String),
}

fn pki(client_name: &str) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    Pki { ca_pem, server: leaf("localhost"), client: leaf(client_name) }
}

async fn start(pki: &Pki) -> std::net::SocketAddr {
    let cache = LinearCache::of::<Cluster>();
    cache.upsert(&Cluster { name: "c1".into(), ..Default::default() }).unwrap();
    let server = XdsServer::builder(cache).callbacks(RequireNodeIdentity).build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(&pki.server.0, &pki.server.1))
        .client_ca_root(Certificate::from_pem(&pki.ca_pem));
    let router = Server::builder().tls_config(tls).unwrap().add_routes(server.routes());
    tokio::spawn(router.serve_with_incoming(TcpListenerStream::new(listener)));
    addr
}

async fn channel(
    addr: std::net::SocketAddr,
    pki: &Pki,
    with_cert: bool,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&pki.ca_pem))
        .domain_name("localhost");
    if with_cert {
        tls = tls.identity(Identity::from_pem(&pki.client.0, &pki.client.1));
    }
    Endpoint::from_shared(format!("https://{addr}"))?
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
}

/// Opens an ADS stream as `node_id` asking for clusters; the first response or the error.
async fn first_response(channel: Channel, node_id: &str) -> Result<usize, tonic::Status> {
    let request = DiscoveryRequest {
        node: Some(Node { id: node_id.into(), ..Default::default() }),
        type_url: ResourceType::Cluster.type_url().into(),
        ..Default::default()
    };
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(request).await.unwrap();
    let mut responses = client
        .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    let response = tokio::time::timeout(Duration::from_secs(5), responses.message())
        .await
        .expect("an answer in time")?;
    drop(tx);
    Ok(response.map_or(0, |r| r.resources.len()))
}

#[tokio::test]
async fn a_client_is_served_only_as_the_node_its_certificate_names() {
    let pki = pki("envoy-1");
    let addr = start(&pki).await;
    let served = first_response(channel(addr, &pki, true).await.unwrap(), "envoy-1").await;
    assert_eq!(served.unwrap(), 1);
    let refused =
        first_response(channel(addr, &pki, true).await.unwrap(), "evil").await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
    assert!(refused.message().contains("\"evil\" does not match"), "{}", refused.message());
}

#[tokio::test]
async fn a_client_without_a_certificate_cannot_get_anything() {
    let pki = pki("envoy-1");
    let addr = start(&pki).await;
    // The handshake may fail at connect or at the first RPC, depending on TLS 1.3 timing.
    let outcome = match channel(addr, &pki, false).await {
        Err(_) => None,
        Ok(channel) => Some(first_response(channel, "envoy-1").await),
    };
    assert!(!matches!(outcome, Some(Ok(_))), "served without a client certificate: {outcome:?}");
}
