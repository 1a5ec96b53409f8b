//! The command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use crate::config;

/// The configuration read when `--config` is not given: a file in the working directory, never a
/// path compiled into the binary (a release binary copied to another machine must not point at
/// the build machine's checkout).
pub const DEFAULT_CONFIG: &str = "xds-file-server.yaml";

/// The version line of `--version`: the package version and the commit it was built from.
pub const VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("XDS_BUILD_COMMIT"), ")");

/// Serve Envoy resources from YAML/JSON files over xDS (ADS and per-type, SotW and delta),
/// REST-JSON, CSDS; reload on change.
#[derive(Parser, Debug)]
#[command(name = "xds-file-server", version = VERSION)]
pub struct Args {
    /// A YAML or JSON file, or a directory of them. Default: `xds-file-server.yaml` in the working
    /// directory (the repository ships `examples/xds-file-server/config/default.yaml`).
    #[arg(long, default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// Where gRPC xDS (ADS, per-type services, CSDS) listens.
    #[arg(long, default_value = "127.0.0.1:18000")]
    pub grpc_addr: SocketAddr,
    /// Where REST-JSON xDS, /healthz, /metrics and /status listen.
    #[arg(long, default_value = "127.0.0.1:18001")]
    pub http_addr: SocketAddr,
    /// PEM certificate chain for TLS on the gRPC port.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for TLS.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: require client certificates signed by it (mTLS).
    #[arg(long, requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// Refuse a client whose node id its certificate does not name (DNS/URI SAN, or the last
    /// segment of a SPIFFE id). Needs --client-ca.
    #[arg(long, requires = "client_ca")]
    pub verify_node_id: bool,
    /// Also write the default group's resources as DiscoveryResponse files here (Envoy
    /// filesystem subscriptions), replaced atomically on every change.
    #[arg(long)]
    pub write_dir: Option<PathBuf>,
    /// The format of the files in --write-dir.
    #[arg(long, value_enum, default_value = "yaml")]
    pub write_format: Format,
    /// Serve clients whose first request carries no node.
    #[arg(long)]
    pub allow_anonymous: bool,
    /// Refuse a configuration file larger than this many bytes.
    #[arg(long, default_value_t = config::MAX_FILE_BYTES)]
    pub max_config_bytes: u64,
    /// Read a changed configuration once its files have been quiet this long (milliseconds): a
    /// file still being written is not read half-way.
    #[arg(long, default_value_t = 200)]
    pub reload_quiet_ms: u64,
    /// Poll the configuration every this many milliseconds instead of using file-system
    /// notification (which is used when available, with a slow poll as a safety net).
    #[arg(long)]
    pub reload_poll_ms: Option<u64>,
    /// Log filter (e.g. `info`, `debug`, `xds_server=debug`).
    #[arg(long, default_value = "info")]
    pub log: String,
}

/// The format of the files written to `--write-dir`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    /// YAML.
    Yaml,
    /// Proto3 JSON.
    Json,
    /// Binary protobuf.
    Pb,
}
