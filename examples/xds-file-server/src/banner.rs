//! What the server prints when it starts: where it listens and how to point clients at it.

use xds_proto::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use xds_proto::prost;

use crate::cli::Args;
use crate::conn_caps::ConnectionCaps;

/// Prints the listening addresses, the connection caps and a bootstrap for Envoy and for a gRPC
/// client.
pub(crate) fn print_banner(args: &Args, tls: bool, caps: &ConnectionCaps) {
    let scheme = if tls { "https" } else { "http" };
    let (host, port) = (args.grpc_addr.ip(), args.grpc_addr.port());
    println!(
        r#"xds-file-server: serving {config}
  gRPC xDS (ADS + per-type, SotW + delta, CSDS): {scheme}://{grpc}
  REST-JSON xDS: {scheme}://{http}/v3/discovery:clusters
  admin (/healthz, /metrics, /status, CSDS): http://{admin}
  connections at most: {caps}

Point Envoy at it (bootstrap):
  node: {{ id: envoy-1, cluster: demo }}
  dynamic_resources:
    ads_config: {{ api_type: GRPC, transport_api_version: V3, grpc_services: [{{ envoy_grpc: {{ cluster_name: xds }} }}] }}
    cds_config: {{ ads: {{}}, resource_api_version: V3 }}
    lds_config: {{ ads: {{}}, resource_api_version: V3 }}
  static_resources:
    clusters:
      - name: xds
        type: STATIC
        typed_extension_protocol_options:
          envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
            "@type": {protocol_options}
            explicit_http_config: {{ http2_protocol_options: {{}} }}
        load_assignment:
          cluster_name: xds
          endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: {host}, port_value: {port} }} }} }} }}] }}]

Point a proxyless gRPC client at it (GRPC_XDS_BOOTSTRAP_CONFIG), then dial xds:///demo-service:
  {{"xds_servers": [{{"server_uri": "{host}:{port}", "channel_creds": [{{"type": "insecure"}}], "server_features": ["xds_v3"]}}],
   "node": {{"id": "grpc-client-1", "cluster": "grpc-clients"}}}}
"#,
        config = if args.etcd.is_empty() {
            args.config.display().to_string()
        } else {
            crate::etcd::describe(&args.etcd, &args.prefix)
        },
        protocol_options = <HttpProtocolOptions as prost::Name>::type_url(),
        grpc = args.grpc_addr,
        http = args.http_addr,
        admin = args.admin_addr,
    );
}
