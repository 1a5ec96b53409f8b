//! The command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use xds_server::Limits;

use crate::config;

/// The configuration read when `--config` is not given: a file in the working directory, never a
/// path compiled into the binary (a release binary copied to another machine must not point at
/// the build machine's checkout).
pub const DEFAULT_CONFIG: &str = "xds-file-server.yaml";

/// The etcd key prefix used when `--prefix` is not given.
pub const DEFAULT_PREFIX: &str = "/xds";

/// The version line of `--version`: the package version and the commit it was built from.
pub const VERSION: &str =
    concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("XDS_BUILD_COMMIT"), ")");

/// Serve Envoy resources from YAML/JSON files over xDS (ADS and per-type, SotW and delta),
/// REST-JSON, CSDS; reload on change.
#[derive(Parser, Debug)]
#[command(name = "xds-file-server", version = VERSION)]
pub struct Args {
    /// What to do instead of serving.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// A YAML or JSON file, or a directory of them. Default: `xds-file-server.yaml` in the working
    /// directory (the repository ships `examples/xds-file-server/config/default.yaml`).
    #[arg(long, default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// Serve from etcd instead of files: the endpoint(s) (`http://host:2379`, comma-separated
    /// for a cluster). Every replica started on the same --prefix serves the same resources
    /// with the same versions; write them with `xds-file-server publish`. See docs/scaling.md.
    #[arg(long, value_delimiter = ',', conflicts_with = "config")]
    pub etcd: Vec<String>,
    /// The etcd key prefix the resources live under (`<prefix>/<group>/<type>/<name>`).
    #[arg(long, default_value = DEFAULT_PREFIX)]
    pub prefix: String,
    /// What `/ready` answers while the served state may be stale (etcd does not answer its
    /// probe, or the replica is behind by more than --max-lag-ms): `serve` (200: the last valid
    /// state keeps serving, the staleness is on /status and the metrics) or `unready` (503).
    #[arg(long, value_enum, default_value = "serve")]
    pub ready_when_stale: ReadyWhenStale,
    /// With --etcd: how far behind etcd (in milliseconds) the replica may be before it reports
    /// itself stale.
    #[arg(long, default_value_t = 5_000)]
    pub max_lag_ms: u64,
    /// Close each gRPC connection after this many seconds (plus or minus the jitter), so that
    /// clients rebalance over replicas after one returns; they reconnect and, holding the same
    /// versions, are resent nothing. 0: never.
    #[arg(long, default_value_t = 0)]
    pub max_connection_age_s: u64,
    /// The fraction of --max-connection-age-s by which each connection's age varies at random,
    /// so that connections opened together do not all close together.
    #[arg(long, default_value_t = 0.1)]
    pub max_connection_age_jitter: f64,
    /// Where gRPC xDS (ADS, per-type services, CSDS) listens.
    #[arg(long, default_value = "127.0.0.1:18000")]
    pub grpc_addr: SocketAddr,
    /// Where REST-JSON xDS (`POST /v3/discovery:*`) listens. With --tls-cert it is HTTPS, with
    /// --client-ca it requires client certificates, like the gRPC port.
    #[arg(long, default_value = "127.0.0.1:18001")]
    pub http_addr: SocketAddr,
    /// Where the admin endpoints listen: /healthz, /metrics, /status and CSDS
    /// (`POST /v3/discovery:client_status`). On a loopback address it needs no credentials;
    /// anywhere else the server refuses to start without --admin-token-file or
    /// --admin-client-ca (see docs/security.md).
    #[arg(long, default_value = "127.0.0.1:18002")]
    pub admin_addr: SocketAddr,
    /// A file holding the admin port's bearer token (read once, at start): every request but
    /// /healthz then needs `Authorization: Bearer <token>` (401 otherwise).
    #[arg(long)]
    pub admin_token_file: Option<PathBuf>,
    /// PEM CA bundle: serve the admin port over TLS (--tls-cert, --tls-key) and require a client
    /// certificate signed by it. Use a CA of operators, not the proxies' one.
    #[arg(long, requires = "tls_cert")]
    pub admin_client_ca: Option<PathBuf>,
    /// Connections the admin port keeps open at once; more wait in the kernel's backlog, so it
    /// never takes the file descriptors the xDS ports need. Default: 64, or a quarter of the
    /// connection budget if less (see --max-connections).
    #[arg(long, value_parser = cap)]
    pub admin_max_connections: Option<usize>,
    /// Connections one peer (an IPv4 address, an IPv6 /64) may hold open on the admin port; more
    /// are closed at once, so one peer never keeps the probes out. Default: a quarter of
    /// --admin-max-connections (at least 1).
    #[arg(long, value_parser = cap)]
    pub admin_max_connections_per_peer: Option<usize>,
    /// Close an admin connection on which nothing moved for this many seconds.
    #[arg(long, default_value_t = 30)]
    pub admin_idle_timeout_s: u64,
    /// PEM certificate chain for TLS on the gRPC and REST ports.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for TLS.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle: require client certificates signed by it (mTLS) on the gRPC and REST
    /// ports.
    #[arg(long, requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// Refuse a client whose certificate does not name its node id (DNS or URI SAN equal to
    /// the id, or a SPIFFE id in a --trust-domain whose last segment is the id), or whose
    /// cluster selects a group other than its id's (unless --shared-group). CSDS over gRPC is
    /// refused; use the admin port. Needs --client-ca.
    #[arg(long, requires = "client_ca")]
    pub verify_node_id: bool,
    /// A SPIFFE trust domain whose ids (`spiffe://DOMAIN/.../NODE-ID`) name nodes, for
    /// --verify-node-id. Repeatable.
    #[arg(long, requires = "verify_node_id")]
    pub trust_domain: Vec<String>,
    /// A group any verified node may be served through its cluster (with --verify-node-id a
    /// node is otherwise served only its own id's group or the default group). Repeatable.
    #[arg(long, requires = "verify_node_id")]
    pub shared_group: Vec<String>,
    /// Serve `Secret` resources (private keys) over REST to clients without a verified
    /// certificate, e.g. plain HTTP: anyone who reaches the REST port reads every group's keys.
    #[arg(long)]
    pub rest_serve_secrets_without_tls: bool,
    /// Close a connection that has not finished its TLS handshake and sent its first request
    /// bytes within this many seconds.
    #[arg(long, default_value_t = 10)]
    pub handshake_timeout_s: u64,
    /// Connections the gRPC port keeps open at once; more wait in the kernel's backlog. Every
    /// port has a cap, and the caps add up to less than the open-file limit (raised to the hard
    /// limit at start) less a reserve for files, etcd and the listeners (a sixteenth of the
    /// limit, at least 64): a flood of connections can never exhaust the process's descriptors.
    /// Default: three quarters of what that budget leaves after the admin port; caps given that
    /// do not fit refuse the start.
    #[arg(long, value_parser = cap)]
    pub max_connections: Option<usize>,
    /// Connections one peer (an IPv4 address, an IPv6 /64) may hold open on the gRPC port; more
    /// are closed at once. Peers behind one NAT or proxy count as one. Default: a quarter of
    /// --max-connections.
    #[arg(long, value_parser = cap)]
    pub max_connections_per_peer: Option<usize>,
    /// Connections the REST port keeps open at once (see --max-connections). Default: a quarter
    /// of what the budget leaves after the admin port.
    #[arg(long, value_parser = cap)]
    pub rest_max_connections: Option<usize>,
    /// Connections one peer may hold open on the REST port. Default: a quarter of
    /// --rest-max-connections.
    #[arg(long, value_parser = cap)]
    pub rest_max_connections_per_peer: Option<usize>,
    /// The HTTP/2 MAX_CONCURRENT_STREAMS the gRPC port advertises.
    #[arg(long, default_value_t = 256)]
    pub max_concurrent_streams: u32,
    /// Send an HTTP/2 PING on the gRPC port after this many idle seconds (0: never).
    #[arg(long, default_value_t = 30)]
    pub keepalive_interval_s: u64,
    /// Close a connection whose PING is not answered within this many seconds.
    #[arg(long, default_value_t = 10)]
    pub keepalive_timeout_s: u64,
    /// The largest request message accepted, in bytes (`RESOURCE_EXHAUSTED` beyond).
    #[arg(long, default_value_t = Limits::default().max_request_bytes)]
    pub max_request_bytes: usize,
    /// The most xDS streams open at once (`RESOURCE_EXHAUSTED` beyond).
    #[arg(long, default_value_t = Limits::default().max_streams)]
    pub max_streams: usize,
    /// How many names one stream may subscribe to for one type (`RESOURCE_EXHAUSTED` beyond):
    /// delta subscriptions add up across requests.
    #[arg(long, default_value_t = Limits::default().max_subscribed_names)]
    pub max_subscribed_names: usize,
    /// Requests per second one stream may send on average (`RESOURCE_EXHAUSTED` beyond).
    #[arg(long, default_value_t = Limits::default().max_requests_per_second)]
    pub max_requests_per_second: u32,
    /// Streams that may join at once (receive their first configuration) in a reconnection
    /// storm; the others wait their turn in arrival order (0: no gate). Default: twice the cores.
    #[arg(long)]
    pub join_permits: Option<usize>,
    /// Seconds a joining stream may keep its turn (a client that stops reading gives it up then).
    #[arg(long, default_value_t = 5)]
    pub join_timeout_s: u64,
    /// Seconds a stream may wait for its turn to join; then it is served ungated, whatever other
    /// streams do. Keep it above the time the largest reconnection storm takes.
    #[arg(long, default_value_t = 10)]
    pub join_max_wait_s: u64,
    /// `control_plane.identifier` on every response, so a proxy's config dump shows which
    /// replica answered (rule C5). Default: this host's name and the gRPC port (`host:18000`).
    #[arg(long)]
    pub control_plane_id: Option<String>,
    /// Also write the default group's resources as DiscoveryResponse files here (Envoy
    /// filesystem subscriptions), replaced atomically on every change, once the ports are
    /// bound. `sds.*` files (private keys) are mode 0600.
    #[arg(long)]
    pub write_dir: Option<PathBuf>,
    /// The format of the files in --write-dir.
    #[arg(long, value_enum, default_value = "yaml")]
    pub write_format: Format,
    /// How often load-reporting (LRS) clients are asked to report, in milliseconds (at least
    /// 100; gRPC clients report no more often than every second).
    #[arg(long, default_value_t = 10_000)]
    pub lrs_interval_ms: u64,
    /// The most memory (estimated, in bytes) the load of every LRS stream together may hold; a
    /// stream whose report would pass it is ended with RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = 64 << 20)]
    pub lrs_max_total_bytes: usize,
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
    /// Stop waiting for files that keep changing after this many milliseconds (at least twice
    /// the quiet period): each is then served as it was last parsed and named on `/status`,
    /// and the other files' edits are applied.
    #[arg(long, default_value_t = 10_000)]
    pub reload_settle_ms: u64,
    /// Poll the configuration every this many milliseconds instead of using file-system
    /// notification (which is used when available, with a slow poll as a safety net).
    #[arg(long)]
    pub reload_poll_ms: Option<u64>,
    /// Log lines as text (coloured only on a terminal) or as one JSON object per line.
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Log filter (e.g. `info`, `debug`, `xds_server=debug`).
    #[arg(long, default_value = "info")]
    pub log: String,
}

/// A connection cap: at least 1. A cap of 0 is refused, not read as "no cap": every port has a
/// cap so that together they fit the open-file limit, and a per-peer cap as large as its port's
/// is how to lift it.
fn cap(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(0) => Err("a connection cap is at least 1 (0 would refuse every connection; to lift a \
                      per-peer cap, give it the port's cap)"
            .into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
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

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Load a configuration as the server would, print what each group serves, and exit non-zero
    /// with the errors if it would be refused. Serves nothing.
    Check {
        /// A YAML or JSON file, or a directory of them.
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Refuse a configuration file larger than this many bytes.
        #[arg(long, default_value_t = config::MAX_FILE_BYTES)]
        max_config_bytes: u64,
    },
    /// Check a configuration as `check` does and, if it is valid, write it into etcd as one
    /// transaction: every replica on the prefix switches to it at once. Keys the configuration
    /// lacks are deleted. An invalid configuration changes nothing. The transaction has one
    /// operation per written or deleted key and is never split: etcd's --max-txn-ops (default
    /// 128) and --max-request-bytes must allow it (a refusal says which to raise).
    Publish {
        /// The etcd endpoint(s), comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        etcd: Vec<String>,
        /// The key prefix.
        #[arg(long, default_value = DEFAULT_PREFIX)]
        prefix: String,
        /// A YAML or JSON file, or a directory of them.
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Refuse a configuration file larger than this many bytes.
        #[arg(long, default_value_t = config::MAX_FILE_BYTES)]
        max_config_bytes: u64,
    },
    /// Print every connected proxy's state per resource type (SYNCED, PENDING, NACKED,
    /// NOT SENT) from a running server's admin port, or one node's streams with --node.
    Status {
        /// The admin port: `http://HOST:PORT`, or `https://HOST:PORT` for one with TLS (a path
        /// after it is the prefix the admin routes are mounted under).
        #[arg(long, default_value = "http://127.0.0.1:18002")]
        admin: String,
        /// A file holding the admin port's bearer token (its --admin-token-file).
        #[arg(long)]
        admin_token_file: Option<PathBuf>,
        /// For an https:// admin port: the CA that signed its certificate (PEM).
        #[arg(long)]
        admin_ca: Option<PathBuf>,
        /// For an admin port that asks for a client certificate (its --admin-client-ca): this
        /// client's certificate chain (PEM), with --admin-key.
        #[arg(long, requires = "admin_key")]
        admin_cert: Option<PathBuf>,
        /// The key of --admin-cert (PEM).
        #[arg(long, requires = "admin_cert")]
        admin_key: Option<PathBuf>,
        /// One node's streams: per type its state, versions and NACK text.
        #[arg(long)]
        node: Option<String>,
        /// Only the proxies of this group.
        #[arg(long)]
        group: Option<String>,
        /// Only the proxies with a type in this state: synced, pending, nacked, not_sent.
        #[arg(long)]
        state: Option<String>,
        /// Only the proxies subscribed to this type (its label: cluster, listener, ...).
        #[arg(long = "type")]
        type_label: Option<String>,
        /// `table` for people, `json` for scripts.
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: OutputFormat,
    },
}

/// How `status` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns.
    Table,
    /// The admin port's JSON (every page of the table merged).
    Json,
}

/// What `/ready` answers while the served state may be stale (see `--ready-when-stale`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ReadyWhenStale {
    /// 200: a replica serving its last valid state stays in rotation (one etcd outage must not
    /// take every replica out at once).
    #[default]
    Serve,
    /// 503: leave rotation while stale (for fleets where another region can take the load).
    Unready,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; ANSI colours only when standard output is a terminal.
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_gate_flags_default_to_the_librarys_gate_and_can_turn_it_off() {
        let args = Args::try_parse_from(["xds-file-server"]).expect("defaults parse");
        assert_eq!((args.join_permits, args.join_timeout_s, args.join_max_wait_s), (None, 5, 10));
        let args = Args::try_parse_from(["xds-file-server", "--join-permits", "0"])
            .expect("a gate of 0 parses");
        assert_eq!(args.join_permits, Some(0));
        assert!(Args::try_parse_from(["xds-file-server", "--join-permits", "-1"]).is_err());
    }

    #[test]
    fn staleness_keeps_a_replica_ready_unless_told_otherwise() {
        let args = Args::try_parse_from(["xds-file-server"]).expect("defaults parse");
        assert_eq!((args.ready_when_stale, args.max_lag_ms), (ReadyWhenStale::Serve, 5_000));
        let args = Args::try_parse_from(["xds-file-server", "--ready-when-stale", "unready"])
            .expect("parses");
        assert_eq!(args.ready_when_stale, ReadyWhenStale::Unready);
        assert!(Args::try_parse_from(["xds-file-server", "--ready-when-stale", "x"]).is_err());
    }
}
