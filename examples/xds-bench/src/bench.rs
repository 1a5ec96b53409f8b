//! A load-generator run: the connection storm, (a server restart,) the updates, the check of the
//! final state, the report.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::burst::{self, Burst};
use super::checks;
use super::client::{self, Mode};
use super::stats::{Sampler, Samples, StatsSource};
use super::sys::{self, ProcSample, percentile};
use super::track::{Subset, Tracker};
use super::trigger::Trigger;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The servers' gRPC URIs: clients are spread over them round-robin, and a client whose
    /// stream breaks reconnects to the next one.
    pub servers: Vec<String>,
    /// SotW or delta.
    pub mode: Mode,
    /// How many clients.
    pub clients: usize,
    /// How many clusters' endpoints each client subscribes to (0: all).
    pub eds_per_client: usize,
    /// Where updates are triggered (`{k}`: the cluster index); `None`: no updates.
    pub trigger: Option<Trigger>,
    /// How many updates.
    pub updates: usize,
    /// At least this long between two triggers.
    pub interval: Duration,
    /// How long an update may take to reach every client.
    pub timeout: Duration,
    /// How long the initial configuration may take to reach every client.
    pub storm_timeout: Duration,
    /// How long to wait after the storm before the first update.
    pub settle: Duration,
    /// Connections opened at once (0: all at once).
    pub connect_concurrency: usize,
    /// HTTP/2 receive windows of each client.
    pub window: u32,
    /// The server's pid, to sample its CPU time and memory.
    pub server_pid: Option<u32>,
    /// The last `stuck` clients stop reading their stream once they hold the initial config;
    /// they are left out of the update statistics and the final-state check.
    pub stuck: usize,
    /// Clients whose stream or connection breaks reconnect and resume instead of failing.
    pub reconnect: bool,
    /// After the storm, print `READY FOR RESTART` and wait (at most this long) until every
    /// client's stream broke and was re-established; implies `reconnect`.
    pub restart_wait: Option<Duration>,
    /// With `restart_wait`: the server (index in `servers`) that is killed and not restarted
    /// (`READY FOR FAILOVER` instead of `READY FOR RESTART`); only its clients are waited for,
    /// until each reconnected to another server and got its first response there.
    pub failover: Option<usize>,
    /// Where the server's figures are sampled from during the run (`None`: not sampled).
    pub sampling: Option<Sampling>,
    /// Leave the per-update table out of the report (failed updates are still listed).
    pub brief: bool,
    /// Instead of the updates: one burst of changes (see [`burst`]).
    pub burst: Option<Burst>,
    /// During the updates, this fraction of the clients drop their stream and connection every
    /// second and reconnect at once, resuming with what they hold (see [`crate::churn`]); implies
    /// `reconnect`.
    pub churn_rate: Option<f64>,
}

/// Sampling the server in the background during a run.
#[derive(Debug, Clone)]
pub struct Sampling {
    /// `/bench/stats` and/or the pid.
    pub source: StatsSource,
    /// How often.
    pub every: Duration,
    /// A CSV file to append the samples to.
    pub log: Option<String>,
}

/// The outcome of one update.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) cluster: u32,
    pub(crate) port: Option<u32>,
    pub(crate) expected: usize,
    /// Sorted latencies of the clients that converged, in microseconds.
    pub(crate) latencies: Vec<u32>,
    /// Why it failed, if it did.
    pub(crate) error: Option<String>,
}

impl Outcome {
    fn passed(&self) -> bool {
        self.error.is_none() && self.latencies.len() == self.expected
    }
}

/// An update on its way to the clients.
struct InFlight {
    u: usize,
    t0: Instant,
    expected: Vec<usize>,
    port: Option<u32>,
}

fn ms(us: u32) -> String {
    format!("{:.1}ms", f64::from(us) / 1000.0)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn sample_server(pid: Option<u32>) -> Option<ProcSample> {
    sys::sample(&pid?.to_string()).ok()
}

/// Runs the load and prints the report; returns whether everything converged.
pub async fn run(o: Options) -> bool {
    let sampler = match &o.sampling {
        Some(s) => match Sampler::start(s.source.clone(), s.every, s.log.as_deref()) {
            Ok(sampler) => Some(sampler),
            Err(e) => {
                eprintln!("{e}");
                return false;
            }
        },
        None => None,
    };
    let idle = sample_server(o.server_pid);
    let me0 = sys::sample("self").unwrap_or_default();
    let tracker = Arc::new(Tracker::new(o.clients, o.stuck));
    let config = Arc::new(client::Config {
        servers: o.servers.clone(),
        mode: o.mode,
        eds_per_client: o.eds_per_client,
        connect_timeout: o.storm_timeout,
        window: o.window,
        names: client::NameCache::default(),
        connect_permits: (o.connect_concurrency > 0)
            .then(|| Arc::new(tokio::sync::Semaphore::new(o.connect_concurrency))),
        reconnect: o.reconnect || o.restart_wait.is_some() || o.churn_rate.is_some(),
        churn: o.churn_rate.is_some(),
    });
    let (stop, stopped) = watch::channel(false);
    let storm_start = Instant::now();
    let handles: Vec<_> = (0..o.clients)
        .map(|id| tokio::spawn(client::run(config.clone(), id, tracker.clone(), stopped.clone())))
        .collect();

    // The connection storm: until every client holds every cluster and its endpoints.
    let mut last_progress = Instant::now();
    let storm_ok = loop {
        let (ready, (failed, _)) = (tracker.ready(), tracker.failures());
        if ready == o.clients {
            break true;
        }
        if ready + failed >= o.clients || storm_start.elapsed() > o.storm_timeout {
            break false;
        }
        if last_progress.elapsed() > Duration::from_secs(5) {
            eprintln!(
                "  storm: {ready}/{} clients ready after {:?}",
                o.clients,
                storm_start.elapsed()
            );
            last_progress = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let storm_traffic = tracker.traffic();
    let sorted = |times: Vec<u64>| {
        let mut times: Vec<u32> =
            times.into_iter().map(|t| u32::try_from(t).unwrap_or(u32::MAX)).collect();
        times.sort_unstable();
        times
    };
    let ready_times = sorted(tracker.ready_times());
    let first_cds = sorted(tracker.first_cds_times());
    let (restart, failover) = match (o.restart_wait, o.failover) {
        (Some(wait), Some(server)) if storm_ok => {
            (None, Some(checks::failover(&tracker, server, o.servers.len(), wait).await))
        }
        (Some(wait), None) if storm_ok => (Some(checks::restart(&tracker, wait).await), None),
        _ => (None, None),
    };
    tokio::time::sleep(o.settle).await;
    if let Some(s) = &sampler {
        s.mark().await;
    }
    let after_storm = sample_server(o.server_pid);
    let me1 = sys::sample("self").unwrap_or_default();
    let updates_start = Instant::now();
    let clusters = tracker.clusters();
    let before_updates = tracker.traffic();

    let mut outcomes = Vec::new();
    let mut burst_figures = None;
    if storm_ok && let Some(b) = &o.burst {
        let (burst_outcomes, figures) =
            burst::run(b, &tracker, o.clients, o.eds_per_client, clusters, o.timeout).await;
        outcomes = burst_outcomes;
        burst_figures = Some(figures);
    } else if storm_ok
        && o.updates > 0
        && let Some(trigger) = &o.trigger
    {
        let updating = updates(&o, trigger, &tracker, clusters);
        outcomes = match o.churn_rate {
            Some(rate) => tokio::select! {
                outcomes = updating => outcomes,
                never = churn(rate, &tracker) => match never {},
            },
            None => updating.await,
        };
    }
    let final_state = if storm_ok {
        // The last update of each cluster wins; a cluster whose last trigger failed is unknown.
        let last: BTreeMap<u32, Option<u32>> =
            outcomes.iter().map(|r| (r.cluster, r.port)).collect();
        let expected: Vec<(u32, u32)> =
            last.into_iter().filter_map(|(k, p)| Some((k, p?))).collect();
        let wait = o.timeout.min(Duration::from_secs(10));
        Some(checks::final_state(&tracker, &expected, o.eds_per_client, clusters, wait).await)
    } else {
        None
    };
    let after_updates = sample_server(o.server_pid);
    let me2 = sys::sample("self").unwrap_or_default();
    let updates_wall = updates_start.elapsed();
    let total_traffic = tracker.traffic();
    let samples = sampler.map(Sampler::finish);

    let _ = stop.send(true);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    for h in handles {
        let abort = h.abort_handle();
        if tokio::time::timeout_at(deadline, h).await.is_err() {
            abort.abort();
        }
    }

    // The report.
    let mut out = String::new();
    let mode = match o.mode {
        Mode::Sotw => "SotW",
        Mode::Delta => "delta",
    };
    let eds = match o.eds_per_client {
        0 => "all".to_owned(),
        k => k.to_string(),
    };
    let _ = writeln!(
        out,
        "xds-load: {} {mode} ADS clients of {}, {clusters} clusters, EDS per client: {eds}",
        o.clients,
        o.servers.join(" ")
    );
    let storm_s = ready_times.last().map_or(0.0, |&t| f64::from(t) / 1e6);
    let _ = writeln!(
        out,
        "storm: {}/{} clients hold the initial config after {storm_s:.2} s (p50 {:.2} s, p99 {:.2} s); {} messages, {} received",
        ready_times.len(),
        o.clients,
        f64::from(percentile(&ready_times, 50.0)) / 1e6,
        f64::from(percentile(&ready_times, 99.0)) / 1e6,
        storm_traffic.0,
        mib(storm_traffic.1 / 1024),
    );
    let _ = writeln!(
        out,
        "storm: first Cluster response p50 {:.2} s, p99 {:.2} s ({} clients)",
        f64::from(percentile(&first_cds, 50.0)) / 1e6,
        f64::from(percentile(&first_cds, 99.0)) / 1e6,
        first_cds.len(),
    );
    let (failed_clients, errors) = tracker.failures();
    if failed_clients > 0 {
        let _ = writeln!(out, "FAILED clients: {failed_clients}");
    }
    for e in &errors {
        let _ = writeln!(out, "  {e}");
    }
    if !storm_ok && failed_clients == 0 {
        let _ = writeln!(
            out,
            "FAILED: {} clients did not get the initial config within {:?}",
            o.clients - ready_times.len(),
            o.storm_timeout
        );
    }
    if o.stuck > 0 {
        let _ = writeln!(
            out,
            "stuck: {} clients (load-{}..load-{}) stopped reading after the initial config; left out of the update statistics and the final-state check",
            tracker.stuck(),
            o.clients - tracker.stuck(),
            o.clients - 1,
        );
    }
    let restart_ok = restart.as_ref().is_none_or(|r| r.missing.is_empty())
        && failover.as_ref().is_none_or(checks::Failover::passed);
    let (m, b) = (before_updates.0 - storm_traffic.0, before_updates.1 - storm_traffic.1);
    if let Some(r) = &restart {
        let _ = writeln!(out, "{}", r.line(o.clients - tracker.stuck()));
        let _ = writeln!(out, "restart traffic: {m} messages, {} received", mib(b / 1024));
    }
    if let Some(f) = &failover {
        for line in f.lines(&o.servers) {
            let _ = writeln!(out, "{line}");
        }
        let _ = writeln!(out, "failover traffic: {m} messages, {} received", mib(b / 1024));
    }

    let burst_ok = burst_figures.as_ref().is_none_or(|f| f.converged.is_some());
    for line in burst_figures.iter().flat_map(burst::Figures::lines) {
        let _ = writeln!(out, "{line}");
    }
    let mut all = Vec::new();
    if !outcomes.is_empty() {
        let _ = match &o.burst {
            Some(_) => writeln!(
                out,
                "updates: {} (one burst), convergence = burst triggered -> client holds the new port",
                outcomes.len(),
            ),
            None => writeln!(
                out,
                "updates: {} (at least {:?} apart), convergence = trigger sent -> client holds the new port",
                outcomes.len(),
                o.interval
            ),
        };
        let _ = writeln!(
            out,
            "  {:>4} {:>7} {:>6} {:>11} {:>9} {:>9} {:>9} {:>9}",
            "#", "cluster", "port", "converged", "p50", "p90", "p99", "max"
        );
        let mut table = Vec::new();
        for (u, r) in outcomes.iter().enumerate() {
            let l = &r.latencies;
            table.push(format!(
                "  {u:>4} {:>7} {:>6} {:>11} {:>9} {:>9} {:>9} {:>9}{}",
                r.cluster,
                r.port.map_or("-".to_owned(), |p| p.to_string()),
                format!("{}/{}", l.len(), r.expected),
                ms(percentile(l, 50.0)),
                ms(percentile(l, 90.0)),
                ms(percentile(l, 99.0)),
                ms(l.last().copied().unwrap_or(0)),
                r.error.as_ref().map(|e| format!("  FAILED: {e}")).unwrap_or_default(),
            ));
            all.extend_from_slice(l);
        }
        if o.brief {
            table.retain(|line| line.contains("FAILED"));
            if table.is_empty() {
                table.push(format!(
                    "  (table left out: --brief; all {} updates passed)",
                    outcomes.len()
                ));
            }
        }
        for line in table {
            let _ = writeln!(out, "{line}");
        }
        all.sort_unstable();
        let _ = writeln!(
            out,
            "all updates ({} client receipts): p50 {} p90 {} p99 {} max {}",
            all.len(),
            ms(percentile(&all, 50.0)),
            ms(percentile(&all, 90.0)),
            ms(percentile(&all, 99.0)),
            ms(all.last().copied().unwrap_or(0)),
        );
        if let Some((u, worst)) =
            outcomes.iter().enumerate().max_by_key(|(_, r)| percentile(&r.latencies, 99.0))
        {
            let _ = writeln!(
                out,
                "worst update: #{u} p50 {} p99 {} max {}",
                ms(percentile(&worst.latencies, 50.0)),
                ms(percentile(&worst.latencies, 99.0)),
                ms(worst.latencies.last().copied().unwrap_or(0)),
            );
        }
        let (m, b) = (total_traffic.0 - before_updates.0, total_traffic.1 - before_updates.1);
        let _ = writeln!(
            out,
            "update traffic: {m} messages, {} received ({} bytes per client per update)",
            mib(b / 1024),
            b / ((o.clients - tracker.stuck()).max(1) * outcomes.len()) as u64,
        );
    }
    let resent = tracker.resent_total();
    if o.reconnect || o.restart_wait.is_some() || o.churn_rate.is_some() {
        let _ = writeln!(
            out,
            "reconnections: {} (streams re-established after a break)",
            tracker.reconnects()
        );
        let _ = writeln!(
            out,
            "resent after reconnect: {resent} ({} Clusters)",
            tracker.resent_clusters_total()
        );
    }
    if let Some(rate) = o.churn_rate {
        let server_cpu = after_updates.zip(after_storm).map(|(s2, s1)| s2.cpu_s - s1.cpu_s);
        for line in churn_lines(rate, &tracker, updates_wall, server_cpu, me2.cpu_s - me1.cpu_s) {
            let _ = writeln!(out, "{line}");
        }
    }
    let final_ok = final_state.as_ref().is_none_or(|f| f.passed());
    if let Some(f) = &final_state {
        let _ = writeln!(out, "{}", f.line());
    }
    if let (Some(idle), Some(s1), Some(s2)) = (idle, after_storm, after_updates) {
        let per_client = s1.rss_kib.saturating_sub(idle.rss_kib) as f64 / o.clients.max(1) as f64;
        let _ = writeln!(
            out,
            "server: RSS idle {}, with clients {} ({per_client:.1} KiB per client), after updates {}",
            mib(idle.rss_kib),
            mib(s1.rss_kib),
            mib(s2.rss_kib),
        );
        let anon_per_client =
            s1.anon_kib.saturating_sub(idle.anon_kib) as f64 / o.clients.max(1) as f64;
        let _ = writeln!(
            out,
            "server: anonymous memory idle {}, with clients {} ({anon_per_client:.1} KiB anonymous per client)",
            mib(idle.anon_kib),
            mib(s1.anon_kib),
        );
        let cpu_updates = s2.cpu_s - s1.cpu_s;
        let _ = writeln!(
            out,
            "server CPU: storm {:.2} s, updates {:.2} s ({:.1} ms per update)",
            s1.cpu_s - idle.cpu_s,
            cpu_updates,
            cpu_updates * 1000.0 / outcomes.len().max(1) as f64,
        );
        let (storm_user, updates_user) = (s1.user_s - idle.user_s, s2.user_s - s1.user_s);
        let _ = writeln!(
            out,
            "server CPU user/system: storm {storm_user:.2} / {:.2} s, updates {updates_user:.2} / {:.2} s ({:.1} ms user per update)",
            s1.cpu_s - idle.cpu_s - storm_user,
            cpu_updates - updates_user,
            updates_user * 1000.0 / outcomes.len().max(1) as f64,
        );
    }
    if let Some(s) = &samples {
        let _ = writeln!(out, "{}", samples_line(s, o.sampling.as_ref()));
    }
    let _ = writeln!(
        out,
        "xds-load itself: CPU storm {:.2} s, updates {:.2} s; RSS {}",
        me1.cpu_s - me0.cpu_s,
        me2.cpu_s - me1.cpu_s,
        mib(me2.rss_kib)
    );
    let passed = outcomes.iter().filter(|r| r.passed()).count();
    let planned = o.burst.as_ref().map_or(o.updates, |b| b.n as usize);
    let failed = outcomes.len() - passed + usize::from(!storm_ok) * planned;
    let _ = writeln!(out, "{passed} passed, {failed} failed");
    print!("{out}");
    // A resuming client is owed nothing it holds (delta: rule D7), except that a SotW client is
    // resent every name of its named subscriptions (EDS): its per-type version cannot say that
    // every name was answered at it (docs/scaling.md). Clusters are full-state: never resent.
    let resent_owed = match o.mode {
        Mode::Delta => resent,
        Mode::Sotw => tracker.resent_clusters_total(),
    };
    let restarted = (restart.is_none() && failover.is_none()) || (restart_ok && resent_owed == 0);
    storm_ok && failed == 0 && failed_clients == 0 && final_ok && restarted && burst_ok
}

/// Drops the stream of `rate` of the clients every second, spread evenly over the second, taking
/// the clients in turn (client 0, 1, ...: each is dropped every `1 / rate` seconds, and the run
/// is the same every time). A client still on its way back from its last drop, or stuck, is
/// passed over for the next. Runs until dropped.
async fn churn(rate: f64, tracker: &Tracker) -> std::convert::Infallible {
    let clients = tracker.clients().max(1);
    let per_second = (rate * clients as f64).round().max(1.0);
    // Half a period in: the first drop does not come with the first trigger (the updates start
    // now too), so that drops do not meet updates in step. Missed ticks are caught up: the rate
    // holds even when this runtime lags.
    let period = Duration::from_secs_f64(1.0 / per_second);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period / 2, period);
    let mut next = 0;
    loop {
        tick.tick().await;
        for _ in 0..clients {
            let client = next;
            next = (next + 1) % clients;
            if tracker.kick(client) {
                break;
            }
        }
    }
}

/// The churn's figures: drops, what resumed streams were sent, how long the way back took, and
/// the CPU of both sides over the update phase (`wall` long).
fn churn_lines(
    rate: f64,
    tracker: &Tracker,
    wall: Duration,
    server_cpu: Option<f64>,
    load_cpu: f64,
) -> Vec<String> {
    let wall_s = wall.as_secs_f64().max(1e-3);
    let times = tracker.resync_times();
    let cores = |cpu: f64| format!("{cpu:.2} s, {:.0} % of a core", cpu * 100.0 / wall_s);
    vec![
        format!(
            "churn: {:.0} % of the clients per second over {wall_s:.1} s: {} streams dropped by the clients, {} reconnections",
            rate * 100.0,
            tracker.kicks(),
            tracker.reconnects(),
        ),
        format!(
            "churn: resumed streams sent {} resources the client held at that version ({} Clusters) and {} it did not (new or changed while away)",
            tracker.resent_total(),
            tracker.resent_clusters_total(),
            tracker.resumed_new_total(),
        ),
        format!(
            "churn: drop -> first response on the new stream p50 {} p99 {} max {} ({} streams)",
            ms(percentile(&times, 50.0)),
            ms(percentile(&times, 99.0)),
            ms(times.last().copied().unwrap_or(0)),
            times.len(),
        ),
        format!(
            "churn: CPU over the update phase: server {}, xds-load {}",
            server_cpu.map_or("-".to_owned(), cores),
            cores(load_cpu),
        ),
    ]
}

/// `server RSS (N samples every S): first .., after the storm .., max .., last ..`.
fn samples_line(s: &Samples, sampling: Option<&Sampling>) -> String {
    let every = sampling.map_or(Duration::ZERO, |s| s.every);
    let m = |v: Option<u64>| v.map_or("-".to_owned(), |b| mib(b / 1024));
    let mut line = format!(
        "server RSS ({} samples every {every:?}): first {}, after the storm {}, max {}, last {}",
        s.count,
        m(s.first_rss),
        m(s.marked_rss),
        m(s.max_rss),
        m(s.last_rss),
    );
    if let Some(log) = sampling.and_then(|s| s.log.as_deref()) {
        let _ = write!(line, "; log: {log}");
    }
    if let Some(e) = &s.error {
        let _ = write!(line, " (a sample failed: {e})");
    }
    line
}

/// Triggers the updates, one cluster each, and waits (bounded) until each reached every client
/// that subscribes to its cluster.
async fn updates(
    o: &Options,
    trigger: &Trigger,
    tracker: &Tracker,
    clusters: usize,
) -> Vec<Outcome> {
    // The clusters some client subscribes to: all, or the blocks the clients cover.
    let covered = match o.eds_per_client {
        0 => clusters,
        k => clusters.min(k.saturating_mul(o.clients)),
    }
    .max(1);
    let plan: Vec<u32> = (0..o.updates).map(|u| (u % covered) as u32).collect();
    tracker.plan(clusters, &plan);
    let mut outcomes: Vec<Option<Outcome>> = vec![None; o.updates];
    let mut in_flight: Vec<InFlight> = Vec::new();
    let mut last_trigger: Option<Instant> = None;
    // How often in-flight updates are checked while waiting. Latencies do not depend on it: the
    // clients timestamp what they receive.
    let poll = Duration::from_millis(10);
    for (u, &k) in plan.iter().enumerate() {
        // At least `interval` after the previous trigger, and never two updates of one cluster
        // at once (each wait ends: updates in flight time out).
        loop {
            finish(o, tracker, &mut in_flight, &mut outcomes);
            let wait =
                last_trigger.map_or(Duration::ZERO, |t| o.interval.saturating_sub(t.elapsed()));
            if wait.is_zero() && !tracker.cluster_busy(k) {
                break;
            }
            tokio::time::sleep(if wait.is_zero() { poll } else { wait }).await;
        }
        let expected: Vec<usize> = (0..o.clients)
            .filter(|&c| {
                !tracker.is_stuck(c) && Subset::of(c, o.eds_per_client, clusters).contains(k)
            })
            .collect();
        tracker.begin(u);
        let t0 = Instant::now();
        last_trigger = Some(t0);
        match trigger.fire(k, o.timeout).await {
            Ok(port) => {
                tracker.set_port(u, port);
                in_flight.push(InFlight { u, t0, expected, port: Some(port) });
            }
            Err(e) => {
                tracker.end(u);
                outcomes[u] = Some(Outcome {
                    cluster: k,
                    port: None,
                    expected: expected.len(),
                    latencies: Vec::new(),
                    error: Some(e),
                });
            }
        }
    }
    while !in_flight.is_empty() {
        finish(o, tracker, &mut in_flight, &mut outcomes);
        tokio::time::sleep(poll).await;
    }
    outcomes.into_iter().flatten().collect()
}

/// Ends the updates in flight that converged or timed out.
fn finish(
    o: &Options,
    tracker: &Tracker,
    in_flight: &mut Vec<InFlight>,
    out: &mut [Option<Outcome>],
) {
    in_flight.retain(|f| {
        let Some(up) = tracker.update(f.u) else { return false };
        let converged = up.converged() >= f.expected.len();
        let timed_out = f.t0.elapsed() > o.timeout;
        if !converged && !timed_out {
            return true;
        }
        tracker.end(f.u);
        let (mut latencies, missing) = up.latencies(f.expected.iter().copied());
        latencies.sort_unstable();
        let error = (!missing.is_empty()).then(|| {
            let some: Vec<String> = missing.iter().take(5).map(|c| format!("load-{c}")).collect();
            format!(
                "{} clients did not get the new content within {:?} (e.g. {})",
                missing.len(),
                o.timeout,
                some.join(", ")
            )
        });
        out[f.u] = Some(Outcome {
            cluster: up.cluster,
            port: f.port,
            expected: f.expected.len(),
            latencies,
            error,
        });
        false
    });
}
