//! The three ports: bound before anything is served, each with its transport guards and, when
//! configured, TLS; then served.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use xds_server::XdsServer;
use xds_server::transport::{Incoming, TransportConfig, rustls, serve_http, tls_config};

use crate::admin_access::AdminAccess;
use crate::cli::Args;
use crate::conn_caps::ConnectionCaps;

type Error = Box<dyn std::error::Error>;

/// Every port, listening, with the TLS each is served with.
pub(crate) struct Ports {
    grpc: TcpListener,
    http: TcpListener,
    admin: TcpListener,
    /// The xDS ports' TLS (`--tls-cert`, `--tls-key`, `--client-ca`).
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
    admin_tls: Option<Arc<rustls::ServerConfig>>,
    grpc_transport: TransportConfig,
    rest_transport: TransportConfig,
    admin_transport: TransportConfig,
}

impl Ports {
    /// Binds every port and reads the TLS files. A second instance that cannot bind stops here,
    /// before anything of the first is served or written over (`--write-dir`).
    pub(crate) async fn bind(
        args: &Args,
        caps: &ConnectionCaps,
        admin_access: &AdminAccess,
    ) -> Result<Ports, Error> {
        let grpc = bind(args.grpc_addr).await?;
        let http = bind(args.http_addr).await?;
        let admin = bind(args.admin_addr).await?;
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(tls_config(cert, key, args.client_ca.as_deref())?),
            _ => None,
        };
        // TLS on the admin port: with client certificates from --admin-client-ca, or to carry a
        // bearer token off loopback (admin_access refused to start without a certificate then).
        let admin_tls = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) if admin_access.needs_tls(args.admin_addr) => {
                Some(tls_config(cert, key, args.admin_client_ca.as_deref())?)
            }
            _ => None,
        };
        // A request's headers get as long as a connection's first bytes (HTTP ports).
        let handshake = Duration::from_secs(args.handshake_timeout_s);
        let transport =
            TransportConfig::default().handshake_timeout(handshake).header_read_timeout(handshake);
        // Only the gRPC port's connections age: REST requests are short-lived.
        let max_age = Some(Duration::from_secs(args.max_connection_age_s)).filter(|d| !d.is_zero());
        let grpc_transport = caps.grpc.apply(
            transport
                .clone()
                .max_connection_age(max_age)
                .max_connection_age_jitter(args.max_connection_age_jitter.clamp(0.0, 1.0)),
        );
        let rest_transport = caps.rest.apply(transport.clone());
        // The admin port's requests are short, so idle or slow connections to it are closed.
        let idle = Duration::from_secs(args.admin_idle_timeout_s.max(1));
        let admin_transport = caps.admin.apply(transport.idle_timeout(Some(idle)));
        Ok(Ports {
            grpc,
            http,
            admin,
            tls,
            admin_tls,
            grpc_transport,
            rest_transport,
            admin_transport,
        })
    }

    /// Serves the admin router and the REST-JSON port in the background, until `server` shuts
    /// down. Returns what serving gRPC needs.
    pub(crate) fn serve_http(self, server: &XdsServer, admin: axum::Router) -> GrpcPort {
        spawn_http(self.admin, self.admin_transport, self.admin_tls, admin, server);
        spawn_http(
            self.http,
            self.rest_transport,
            self.tls.clone(),
            server.discovery_router(),
            server,
        );
        GrpcPort { listener: self.grpc, transport: self.grpc_transport, tls: self.tls }
    }
}

/// The gRPC port, bound, not yet served.
pub(crate) struct GrpcPort {
    listener: TcpListener,
    transport: TransportConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl GrpcPort {
    /// Serves xDS, LRS and HDS until `shutdown` completes.
    pub(crate) async fn serve(
        self,
        args: &Args,
        server: &XdsServer,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), Error> {
        // HTTP/2 windows and frame size stay hyper's (1 MiB stream and connection windows):
        // they bound what a client sends, which `max_request_bytes` bounds anyway; what the
        // server sends is paced by the client's windows (docs/benchmarks.md, "Write path and
        // join gate").
        let keepalive =
            Some(Duration::from_secs(args.keepalive_interval_s)).filter(|d| !d.is_zero());
        let grpc = tonic::transport::Server::builder()
            .http2_keepalive_interval(keepalive)
            .http2_keepalive_timeout(Some(Duration::from_secs(args.keepalive_timeout_s)))
            .max_concurrent_streams(Some(args.max_concurrent_streams))
            .add_routes(server.routes());
        let GrpcPort { listener, transport, tls } = self;
        match tls {
            Some(tls) => {
                let incoming = Incoming::tls(listener, transport, tls);
                grpc.serve_with_incoming_shutdown(incoming, shutdown).await?
            }
            None => {
                let incoming = Incoming::plain(listener, transport);
                grpc.serve_with_incoming_shutdown(incoming, shutdown).await?
            }
        }
        Ok(())
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))
}

/// Serves `router` on `listener` in the background, over TLS when given.
fn spawn_http(
    listener: TcpListener,
    transport: TransportConfig,
    tls: Option<Arc<rustls::ServerConfig>>,
    router: axum::Router,
    server: &XdsServer,
) {
    let shutting_down = server.shutting_down();
    match tls {
        Some(tls) => {
            let incoming = Incoming::tls(listener, transport, tls);
            tokio::spawn(serve_http(incoming, router, shutting_down))
        }
        None => {
            tokio::spawn(serve_http(Incoming::plain(listener, transport), router, shutting_down))
        }
    };
}
