//! Connection churn: many short-lived clients, each connecting, subscribing (ADS, wildcard
//! Cluster), waiting for its first response and disconnecting, a few at a time. A server that
//! cleans up after a client that went away returns to the memory, task and stream counts it had
//! before (read from `/bench/stats`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use xds_proto::pb::envoy::config::core::v3::Node;

use super::client::{self, Mode};
use super::stats::{ServerStats, StatsSource, mib};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// What to run.
#[derive(Debug, Clone)]
pub struct ChurnOptions {
    /// The server's gRPC URI.
    pub server: String,
    /// SotW or delta.
    pub mode: Mode,
    /// Connect / subscribe / disconnect cycles measured.
    pub cycles: usize,
    /// Cycles run before the baseline is read (the server's allocator and pools warm up).
    pub warmup: usize,
    /// Cycles at once.
    pub concurrency: usize,
    /// How long one cycle may take.
    pub timeout: Duration,
    /// HTTP/2 receive windows of each client.
    pub window: u32,
    /// Where the server's tasks, streams and RSS are read.
    pub stats: StatsSource,
    /// How much the RSS may grow over the run, in percent of the baseline.
    pub max_rss_growth_pct: f64,
}

/// Errors and failure count, shared by the workers.
#[derive(Debug, Default)]
struct Failures {
    count: AtomicUsize,
    first: Mutex<Vec<String>>,
}

impl Failures {
    fn add(&self, cycle: usize, e: &str) {
        self.count.fetch_add(1, SeqCst);
        let mut first = self.first.lock().unwrap_or_else(PoisonError::into_inner);
        if first.len() < 5 {
            first.push(format!("cycle {cycle}: {e}"));
        }
    }
}

/// One cycle: its own connection and node `churn-{n}`, a wildcard Cluster subscription, the first
/// response, then everything is dropped (the stream is reset and the connection closed).
async fn cycle(o: &ChurnOptions, n: usize) -> Result<(), Error> {
    let node = Node {
        id: format!("churn-{n}"),
        cluster: "xds-load".into(),
        user_agent_name: "xds-load".into(),
        ..Default::default()
    };
    let (tx, rx) = mpsc::unbounded_channel();
    tx.send(client::wildcard_clusters(o.mode, &node)).map_err(|_| "the request stream closed")?;
    let mut responses = client::open_ads(&o.server, o.mode, o.timeout, o.window, rx).await?;
    match responses.message().await? {
        Some(_) => Ok(()),
        None => Err("the server ended the stream before its first response".into()),
    }
}

/// Runs cycles `range`, `o.concurrency` at a time; returns how long they took.
async fn cycles(
    o: &Arc<ChurnOptions>,
    range: std::ops::Range<usize>,
    failures: &Arc<Failures>,
) -> Duration {
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(range.start));
    let workers: Vec<_> = (0..o.concurrency.max(1))
        .map(|_| {
            let (o, next, failures, end) = (o.clone(), next.clone(), failures.clone(), range.end);
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, SeqCst);
                    if n >= end {
                        return;
                    }
                    match tokio::time::timeout(o.timeout, cycle(&o, n)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => failures.add(n, &e.to_string()),
                        Err(_) => {
                            failures.add(n, &format!("no first response within {:?}", o.timeout))
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        if let Err(e) = w.await {
            failures.add(range.end, &format!("a worker panicked: {e}"));
        }
    }
    start.elapsed()
}

/// Reads the server's stats, or reports why not.
async fn read(o: &ChurnOptions, when: &str) -> Result<ServerStats, String> {
    o.stats.read().await.map_err(|e| format!("cannot read the server's stats {when}: {e}"))
}

/// Runs the warm-up, reads the baseline, runs the cycles, waits (bounded) for the server to
/// close every stream, reads the stats again and prints the report. Returns whether the server
/// came back to its baseline (RSS within the allowed growth, tasks and streams back) and every
/// cycle succeeded.
pub async fn run(o: ChurnOptions) -> bool {
    let o = Arc::new(o);
    let warmup_failures = Arc::new(Failures::default());
    cycles(&o, 0..o.warmup, &warmup_failures).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let base = match read(&o, "before the run").await {
        Ok(s) => s,
        Err(e) => {
            println!("FAILED: {e}");
            return false;
        }
    };
    let failures = Arc::new(Failures::default());
    let took = cycles(&o, o.warmup..o.warmup + o.cycles, &failures).await;

    // The server notices the resets and closes asynchronously: wait until it is back (bounded).
    let back = |s: &ServerStats| s.streams <= base.streams && s.tasks <= base.tasks;
    let waited = Instant::now();
    let mut last = None;
    while waited.elapsed() < Duration::from_secs(10) {
        if let Ok(s) = o.stats.read().await {
            let done = back(&s);
            last = Some(s);
            if done {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wait = waited.elapsed();
    // Let the allocator settle like before the baseline.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let end = match read(&o, "after the run").await {
        Ok(s) => s,
        Err(e) => {
            println!("FAILED: {e}");
            return false;
        }
    };
    if last.is_none() {
        last = Some(end);
    }

    let mut out = String::new();
    let mode = match o.mode {
        Mode::Sotw => "SotW",
        Mode::Delta => "delta",
    };
    let failed = failures.count.load(SeqCst);
    let _ = writeln!(
        out,
        "churn: {} {mode} connect / subscribe / first response / disconnect cycles against {}, {} at a time (after {} warm-up cycles, {} failed)",
        o.cycles,
        o.server,
        o.concurrency,
        o.warmup,
        warmup_failures.count.load(SeqCst),
    );
    let _ = writeln!(
        out,
        "cycles: {:.0} per second ({:.2} s); failures: {failed}",
        o.cycles as f64 / took.as_secs_f64().max(1e-9),
        took.as_secs_f64()
    );
    for e in failures.first.lock().unwrap_or_else(PoisonError::into_inner).iter() {
        let _ = writeln!(out, "  {e}");
    }
    let n = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    let growth = match (base.rss_bytes, end.rss_bytes) {
        (Some(b), Some(e)) if b > 0 => Some((e as f64 - b as f64) * 100.0 / b as f64),
        _ => None,
    };
    let m = |v: Option<u64>| v.map_or("-".to_owned(), mib);
    let _ = writeln!(
        out,
        "server RSS: baseline {}, final {} ({})",
        m(base.rss_bytes),
        m(end.rss_bytes),
        growth.map_or("-".to_owned(), |g| format!("{g:+.1}%")),
    );
    let _ = writeln!(out, "server tasks: before {}, after {}", n(base.tasks), n(end.tasks));
    let _ = writeln!(
        out,
        "server streams: before {}, after {} (back to the baseline after {:.1} s{})",
        n(base.streams),
        n(end.streams),
        wait.as_secs_f64(),
        if last.is_some_and(|s| back(&s)) { "" } else { ": NOT back within 10 s" },
    );
    let mut problems = Vec::new();
    match growth {
        Some(g) if g > o.max_rss_growth_pct => {
            problems.push(format!("RSS grew {g:.1}% (> {}%)", o.max_rss_growth_pct))
        }
        Some(_) => {}
        None => problems.push("no RSS reading".to_owned()),
    }
    match (base.tasks, end.tasks) {
        (Some(b), Some(e)) if e > b => problems.push(format!("{} tasks more than before", e - b)),
        (Some(_), Some(_)) => {}
        _ => problems.push("no task count (is the server xds-bench-server?)".to_owned()),
    }
    match (base.streams, end.streams) {
        (Some(b), Some(e)) if e > b => problems.push(format!("{} streams still open", e - b)),
        (Some(_), Some(_)) => {}
        _ => problems.push("no stream count (is the server xds-bench-server?)".to_owned()),
    }
    if failed > 0 {
        problems.push(format!("{failed} cycles failed"));
    }
    if problems.is_empty() {
        let _ = writeln!(out, "churn: passed");
    } else {
        let _ = writeln!(out, "churn: FAILED: {}", problems.join("; "));
    }
    print!("{out}");
    problems.is_empty()
}
