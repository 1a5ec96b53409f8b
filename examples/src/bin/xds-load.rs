//! The load generator: N simulated xDS clients (SotW or delta ADS, one HTTP/2 connection and node
//! each) that subscribe to every Cluster and to their ClusterLoadAssignments and ACK like real
//! clients. It measures the connection storm (until every client holds the initial config) and,
//! for each update it triggers over HTTP, the time until every client holds the new content.
//!
//! ```text
//! xds-bench-server --clusters 10000 &
//! xds-load --clients 1000 --mode delta --updates 100 --server-pid <pid>
//! ```
//!
//! Prints a report ending in `N passed, M failed` and exits non-zero unless every client got the
//! initial config and every update.

use std::time::Duration;

use clap::{Parser, ValueEnum};
use examples::load::bench::{self, Options};
use examples::load::client::Mode;
use examples::load::sys;
use examples::load::trigger::Trigger;

/// Simulated xDS clients that measure how fast a control plane reaches them.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The control plane's gRPC address.
    #[arg(long, default_value = "http://127.0.0.1:18000")]
    server: String,
    /// How many clients (each its own connection, stream and node id `load-{i}`).
    #[arg(long, default_value_t = 100)]
    clients: usize,
    /// The protocol variant.
    #[arg(long, value_enum, default_value = "delta")]
    mode: ModeArg,
    /// How many clusters' endpoints each client subscribes to (default: all).
    #[arg(long, default_value_t = 0)]
    eds_per_client: usize,
    /// The update trigger; `{k}` is replaced by the cluster index. It must answer 200 with the
    /// new endpoint port in its body once the update is published.
    #[arg(long, default_value = "http://127.0.0.1:18001/bench/update?i={k}")]
    trigger: String,
    /// How many updates (one cluster each, cycling over the clusters).
    #[arg(long, default_value_t = 100)]
    updates: usize,
    /// Milliseconds between two triggers (at least).
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// Seconds an update may take to reach every client.
    #[arg(long, default_value_t = 30)]
    timeout_s: u64,
    /// Seconds the initial configuration may take to reach every client.
    #[arg(long, default_value_t = 300)]
    storm_timeout_s: u64,
    /// Milliseconds to wait between the storm and the first update.
    #[arg(long, default_value_t = 1000)]
    settle_ms: u64,
    /// Connections opened at once (0: all at once).
    #[arg(long, default_value_t = 0)]
    connect_concurrency: usize,
    /// HTTP/2 stream and connection receive window of each client, in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    window: u32,
    /// The server's pid: sample its CPU time and RSS from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ModeArg {
    Sotw,
    Delta,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match sys::raise_fd_limit() {
        Ok(n) if (n as usize) < args.clients + 64 => eprintln!(
            "warning: the open-file limit is {n}; {} clients need more (ulimit -n {})",
            args.clients,
            2 * args.clients + 100
        ),
        Ok(_) => {}
        Err(e) => eprintln!("warning: cannot raise the open-file limit: {e}"),
    }
    let trigger = match Trigger::parse(&args.trigger) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let options = Options {
        server: args.server,
        mode: match args.mode {
            ModeArg::Sotw => Mode::Sotw,
            ModeArg::Delta => Mode::Delta,
        },
        clients: args.clients,
        eds_per_client: args.eds_per_client,
        trigger: Some(trigger),
        updates: args.updates,
        interval: Duration::from_millis(args.interval_ms),
        timeout: Duration::from_secs(args.timeout_s),
        storm_timeout: Duration::from_secs(args.storm_timeout_s),
        settle: Duration::from_millis(args.settle_ms),
        connect_concurrency: args.connect_concurrency,
        window: args.window,
        server_pid: args.server_pid,
    };
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        runtime.worker_threads(n.max(1));
    }
    let runtime = match runtime.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let ok = runtime.block_on(bench::run(options));
    // Clients still closing must not hold the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    if ok { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE }
}
