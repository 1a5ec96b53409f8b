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
//! initial config and every update, and every client holds the final content of every updated
//! cluster at the end.
//!
//! Reliability runs (see `examples/xds-bench/reliability/`):
//!
//! - `--stuck N`: the last N clients stop reading once they hold the initial config; the server's
//!   RSS is sampled during the run (`/bench/stats`, or `/proc` with `--server-pid`).
//! - `--churn N --churn-concurrency C`: N connect / subscribe / disconnect cycles instead of the
//!   run above; fails unless the server's RSS, tasks and streams return to their baseline.
//! - `--reconnect`, `--restart-wait-s S`: clients reconnect and resume; with the latter, the run
//!   prints `READY FOR RESTART` after the storm and waits for every client to come back (the
//!   server is meant to be killed and restarted meanwhile), then runs the updates and fails if any
//!   resource the clients held was sent again.
//! - several `--server` addresses (comma-separated): replicas; clients spread over them and move
//!   to the next on a break. `--failover I` with `--restart-wait-s S`: after the storm the run
//!   prints `READY FOR FAILOVER`, server I is meant to be killed, and its clients must move to
//!   the others and be resent nothing (`reliability/replicas.sh`, with `--trigger-cmd` publishing
//!   into etcd).
//! - `--churn-rate F` (with `--updates N --interval-ms 1000`): during the updates, F of the
//!   clients every second drop their stream and connection and reconnect at once, resuming with
//!   what they hold (delta: `initial_resource_versions`); reports what resumed streams were sent
//!   again, how long the way back took, and both sides' CPU.
//! - `--burst N --burst-ms T`: instead of the updates, N changes within T ms (`/bench/burst`);
//!   reports responses per client and the time until every client holds every last version.
//! - `--rss-log FILE --sample-s SECS`: the server's RSS, CPU, tasks and streams every SECS, as CSV.

use std::time::Duration;

use clap::{Parser, ValueEnum};
use xds_bench::bench::{self, Options, Sampling};
use xds_bench::burst::Burst;
use xds_bench::churn::{self, ChurnOptions};
use xds_bench::client::Mode;
use xds_bench::http::Url;
use xds_bench::stats::StatsSource;
use xds_bench::sys;
use xds_bench::trigger::Trigger;

/// Simulated xDS clients that measure how fast a control plane reaches them.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The control plane's gRPC address; several (comma-separated) for replicas: client `i`
    /// starts on the `i % n`-th, and a client whose stream breaks reconnects to the next one.
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:18000")]
    server: Vec<String>,
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
    /// Trigger updates with this shell command instead of --trigger (`{k}`: the cluster index):
    /// it must exit 0 once the update is published and print the new endpoint port, e.g. a
    /// script that rewrites a file and runs `xds-file-server publish`.
    #[arg(long, value_name = "COMMAND")]
    trigger_cmd: Option<String>,
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
    /// The server's pid: sample its CPU time (user and system apart as well) and RSS from /proc.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Runtime worker threads (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
    /// The last N clients stop reading their stream (never poll it, never ACK) once they hold the
    /// initial config; they are left out of the update statistics.
    #[arg(long, default_value_t = 0)]
    stuck: usize,
    /// Instead of the run: N connect / subscribe (wildcard Cluster) / first response / disconnect
    /// cycles, then check that the server's RSS, tasks and streams returned to their baseline.
    #[arg(long, value_name = "N")]
    churn: Option<usize>,
    /// Churn cycles at once.
    #[arg(long, default_value_t = 10)]
    churn_concurrency: usize,
    /// Churn cycles before the baseline is read (the server's allocator reaches its working size
    /// only after several hundred cycles: with fewer, its growth looks like a leak).
    #[arg(long, default_value_t = 1000)]
    churn_warmup: usize,
    /// How much the server's RSS may grow over the churn cycles, in percent.
    #[arg(long, default_value_t = 5.0)]
    churn_max_rss_growth_pct: f64,
    /// The server's stats (JSON with tasks, streams, rss_bytes), as served by xds-bench-server.
    #[arg(long, default_value = "http://127.0.0.1:18001/bench/stats")]
    stats: String,
    /// A client whose stream or connection breaks reconnects with backoff (100 ms doubling to
    /// 2 s, jittered) and resumes with what it holds, instead of failing.
    #[arg(long)]
    reconnect: bool,
    /// After the storm, print `READY FOR RESTART` and wait at most S seconds until every client's
    /// stream broke and was re-established (restart the server meanwhile); then settle, run the
    /// updates, and fail if any resource a client held was sent again. Implies --reconnect.
    #[arg(long, value_name = "S")]
    restart_wait_s: Option<u64>,
    /// With --restart-wait-s and several servers: server I (0-based, in --server's order) is
    /// killed and not restarted. The run prints `READY FOR FAILOVER` instead, waits until every
    /// client of that server reconnected to another and got its first response there (reporting
    /// how long that took), then runs the updates, and fails if any resource a client held was
    /// sent again.
    #[arg(long, value_name = "I", requires = "restart_wait_s")]
    failover: Option<usize>,
    /// Append `elapsed_s,rss_bytes,cpu_s,tasks,streams` lines, sampled from --stats (and /proc
    /// with --server-pid) every --sample-s, to this file.
    #[arg(long, value_name = "FILE")]
    rss_log: Option<String>,
    /// Sample the server every SECS during the run (default 1 with --rss-log or --stuck; no
    /// sampling otherwise).
    #[arg(long, value_name = "SECS")]
    sample_s: Option<f64>,
    /// During the updates, this fraction of the clients (0 < F <= 1) drop their stream and
    /// connection every second, spread over the second and in turn, and reconnect at once
    /// resuming with what they hold; reports what resumed streams were sent again, the time from
    /// a drop to the new stream's first response, and both sides' CPU. Implies --reconnect.
    #[arg(long, value_name = "F", conflicts_with_all = ["churn", "burst", "restart_wait_s"])]
    churn_rate: Option<f64>,
    /// Leave the per-update table out of the report (failed updates are still listed).
    #[arg(long)]
    brief: bool,
    /// Instead of --updates: one burst of N changes (clusters 0..N, one update each, at most
    /// 5,000: the answer lists each port) spread over --burst-ms; reports the responses each
    /// client received meanwhile and when every client held every last version.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=5000))]
    burst: Option<u32>,
    /// The burst's spread, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    burst_ms: u64,
    /// The burst URL, where `n` and `ms` in braces stand for the figures: it must answer a
    /// `cluster port [published_us upsert_us]` line per change once all
    /// are published.
    #[arg(long, default_value = "http://127.0.0.1:18001/bench/burst?n={n}&ms={ms}")]
    burst_url: String,
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
    let trigger = match &args.trigger_cmd {
        Some(command) => Trigger::command(command),
        None => Trigger::parse(&args.trigger),
    };
    let parsed = trigger.and_then(|t| {
        let stats = Url::parse(&args.stats).map_err(|e| format!("--stats: {e}"))?;
        Ok((t, stats))
    });
    let parsed = parsed.and_then(|(t, stats)| {
        let burst = match args.burst {
            Some(n) => Some(Burst {
                url: Url::parse(&args.burst_url).map_err(|e| format!("--burst-url: {e}"))?,
                n,
                ms: args.burst_ms,
            }),
            None => None,
        };
        Ok((t, stats, burst))
    });
    let (trigger, stats_url, burst) = match parsed {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(i) = args.failover
        && (args.server.len() < 2 || i >= args.server.len())
    {
        eprintln!(
            "--failover needs at least two --server addresses and names one of them (0-based)"
        );
        return std::process::ExitCode::from(2);
    }
    if let Some(rate) = args.churn_rate
        && !(rate > 0.0 && rate <= 1.0)
    {
        eprintln!("--churn-rate is a fraction of the clients: more than 0, at most 1");
        return std::process::ExitCode::from(2);
    }
    if args.churn.is_none() && args.stuck >= args.clients.max(1) {
        eprintln!("--stuck must be less than --clients: some clients must read");
        return std::process::ExitCode::from(2);
    }
    let mode = match args.mode {
        ModeArg::Sotw => Mode::Sotw,
        ModeArg::Delta => Mode::Delta,
    };
    let source = StatsSource { url: Some(stats_url), pid: args.server_pid };
    let sample_every = match args.sample_s {
        Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
        Some(_) => {
            eprintln!("--sample-s must be a positive number of seconds");
            return std::process::ExitCode::from(2);
        }
        None => (args.rss_log.is_some() || args.stuck > 0).then_some(Duration::from_secs(1)),
    };
    let churn = args.churn.map(|cycles| ChurnOptions {
        server: args.server.first().cloned().unwrap_or_default(),
        mode,
        cycles,
        warmup: args.churn_warmup,
        concurrency: args.churn_concurrency.max(1),
        timeout: Duration::from_secs(args.timeout_s),
        window: args.window,
        stats: source.clone(),
        max_rss_growth_pct: args.churn_max_rss_growth_pct,
    });
    let options = Options {
        servers: args.server,
        mode,
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
        stuck: args.stuck,
        reconnect: args.reconnect,
        restart_wait: args.restart_wait_s.map(Duration::from_secs),
        failover: args.failover,
        sampling: sample_every.map(|every| Sampling { source, every, log: args.rss_log }),
        brief: args.brief,
        burst,
        churn_rate: args.churn_rate,
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
    let ok = match churn {
        Some(c) => runtime.block_on(churn::run(c)),
        None => runtime.block_on(bench::run(options)),
    };
    // Clients still closing must not hold the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    if ok { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE }
}
