//! A burst: the server changes N clusters one at a time, spread over T milliseconds
//! (`xds-bench-server`'s `/bench/burst?n=N&ms=T`), and the run measures how many responses each
//! client received meanwhile (one per change, or fewer because the server coalesces the changes
//! made while a response awaits its ACK), and when every client held the last version of every
//! changed cluster.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::bench::Outcome;
use super::http::Url;
use super::sys::percentile;
use super::track::{Subset, Tracker};

/// The burst to trigger.
#[derive(Debug, Clone)]
pub struct Burst {
    /// The burst URL; `{n}` and `{ms}` are replaced by the figures below.
    pub url: Url,
    /// How many clusters change (`0..n`), one update each.
    pub n: u32,
    /// Over how many milliseconds.
    pub ms: u64,
}

/// What a burst measured.
#[derive(Debug, Clone)]
pub struct Figures {
    /// Changes made (clusters updated).
    pub changes: usize,
    /// The spread the server was asked for.
    pub spread: Duration,
    /// From the trigger to the server's answer (every change published).
    pub published: Duration,
    /// From the trigger to the last client holding the last change (`None`: some never did).
    pub converged: Option<Duration>,
    /// Messages and bytes the clients received from the trigger until convergence (or timeout).
    pub messages: u64,
    /// See `messages`.
    pub bytes: u64,
    /// The clients that read (not stuck).
    pub clients: usize,
    /// Per change and client: the time from the change's publication (as the server answered it,
    /// else as scheduled) to the client holding it, in microseconds, sorted.
    pub delays: Vec<u32>,
    /// Per change: how late the server published it after its scheduled time (a busy runtime
    /// runs the burst's task late), in microseconds, sorted; empty if the server did not say.
    pub lags: Vec<u32>,
    /// Per change: how long the cache's upsert took, in microseconds, sorted.
    pub upserts: Vec<u32>,
}

impl Figures {
    /// The report lines.
    pub fn lines(&self) -> Vec<String> {
        let per_client = self.messages as f64 / self.clients.max(1) as f64;
        let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
        let us = |v: u32| format!("{:.1} ms", f64::from(v) / 1000.0);
        vec![
            format!(
                "burst: {} changes over {} (published after {}); every client holds every last version after {}",
                self.changes,
                ms(self.spread),
                ms(self.published),
                self.converged.map_or("- (did not converge)".to_owned(), ms),
            ),
            format!(
                "burst: {} responses to {} clients: {per_client:.1} per client, {:.1} changes per response; {} received ({:.0} bytes per client)",
                self.messages,
                self.clients,
                self.changes as f64 / per_client.max(f64::MIN_POSITIVE),
                format_args!("{:.1} MiB", self.bytes as f64 / (1 << 20) as f64),
                self.bytes as f64 / self.clients.max(1) as f64,
            ),
            format!(
                "burst: a change's delay from its publication to a client holding it: p50 {} p99 {} max {}",
                us(percentile(&self.delays, 50.0)),
                us(percentile(&self.delays, 99.0)),
                us(self.delays.last().copied().unwrap_or(0)),
            ),
            format!(
                "burst: publication after its scheduled time p50 {} max {}; upsert p50 {} max {}, {} in all",
                us(percentile(&self.lags, 50.0)),
                us(self.lags.last().copied().unwrap_or(0)),
                us(percentile(&self.upserts, 50.0)),
                us(self.upserts.last().copied().unwrap_or(0)),
                us(
                    self.upserts
                        .iter()
                        .copied()
                        .map(u64::from)
                        .sum::<u64>()
                        .min(u64::from(u32::MAX)) as u32
                ),
            ),
        ]
    }
}

/// Triggers the burst and waits (at most the spread plus `timeout`) until every reading client
/// subscribed to a changed cluster holds its last version.
pub(crate) async fn run(
    burst: &Burst,
    tracker: &Tracker,
    clients: usize,
    eds_per_client: usize,
    clusters: usize,
    timeout: Duration,
) -> (Vec<Outcome>, Figures) {
    let n = (burst.n as usize).min(clusters);
    let plan: Vec<u32> = (0..n as u32).collect();
    tracker.plan(clusters, &plan);
    let expected: Vec<Vec<usize>> = plan
        .iter()
        .map(|&k| {
            (0..clients)
                .filter(|&c| {
                    !tracker.is_stuck(c) && Subset::of(c, eds_per_client, clusters).contains(k)
                })
                .collect()
        })
        .collect();
    let spread = Duration::from_millis(burst.ms);
    let deadline = spread + timeout;
    let (m0, b0) = tracker.traffic();
    for u in 0..n {
        tracker.begin(u);
    }
    let t0 = Instant::now();
    let path = burst.url.path.replace("{n}", &n.to_string()).replace("{ms}", &burst.ms.to_string());
    let answer = burst.url.get(&path, deadline).await.and_then(|body| ports_of(&body));
    let published = t0.elapsed();
    let mut error = None;
    match &answer {
        Ok(ports) => {
            for (u, &k) in plan.iter().enumerate() {
                match ports.get(&k) {
                    Some(p) => tracker.set_port(u, p.port),
                    None => error = Some(format!("the burst answer has no port for cluster {k}")),
                }
            }
        }
        Err(e) => error = Some(e.clone()),
    }
    // Latencies do not depend on this poll: the clients timestamp what they receive.
    while error.is_none() && t0.elapsed() < deadline {
        let done =
            (0..n).all(|u| tracker.update(u).is_some_and(|up| up.converged() >= expected[u].len()));
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (m1, b1) = tracker.traffic();
    let mut outcomes = Vec::with_capacity(n);
    let mut delays = Vec::new();
    let mut all_converged = error.is_none();
    let mut last = 0u32;
    let (mut lags, mut upserts) = (Vec::new(), Vec::new());
    for (u, &k) in plan.iter().enumerate() {
        tracker.end(u);
        let Some(up) = tracker.update(u) else { continue };
        let (mut latencies, missing) = up.latencies(expected[u].iter().copied());
        latencies.sort_unstable();
        // The `u`-th change is scheduled `u * spread / n` after the trigger.
        let scheduled =
            u32::try_from((spread * u as u32 / n as u32).as_micros()).unwrap_or(u32::MAX);
        let published = answer.as_ref().ok().and_then(|p| p.get(&k));
        let offset = match published {
            Some(&Published { at_us: Some(at), upsert_us, .. }) => {
                lags.push(at.saturating_sub(scheduled));
                upserts.extend(upsert_us);
                at
            }
            _ => scheduled,
        };
        delays.extend(latencies.iter().map(|l| l.saturating_sub(offset)));
        last = last.max(latencies.last().copied().unwrap_or(0));
        all_converged &= missing.is_empty();
        let error = error.clone().or_else(|| {
            (!missing.is_empty()).then(|| {
                format!("{} clients did not get the new content within {deadline:?}", missing.len())
            })
        });
        outcomes.push(Outcome {
            cluster: k,
            port: answer.as_ref().ok().and_then(|p| p.get(&k)).map(|p| p.port),
            expected: expected[u].len(),
            latencies,
            error,
        });
    }
    delays.sort_unstable();
    lags.sort_unstable();
    upserts.sort_unstable();
    let figures = Figures {
        changes: n,
        spread,
        published,
        converged: all_converged.then(|| Duration::from_micros(u64::from(last))),
        messages: m1 - m0,
        bytes: b1 - b0,
        clients: clients - tracker.stuck(),
        delays,
        lags,
        upserts,
    };
    (outcomes, figures)
}

/// One change as the server answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Published {
    port: u32,
    /// When it was published, in microseconds after the burst's start (if the server says).
    at_us: Option<u32>,
    /// How long the cache took (if the server says).
    upsert_us: Option<u32>,
}

/// The `cluster port [published_us upsert_us]` lines of the burst answer.
fn ports_of(body: &str) -> Result<BTreeMap<u32, Published>, String> {
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut words = l.split_whitespace().map(str::parse::<u32>);
            match (words.next(), words.next()) {
                (Some(Ok(k)), Some(Ok(port))) => {
                    let at_us = words.next().and_then(Result::ok);
                    let upsert_us = words.next().and_then(Result::ok);
                    Ok((k, Published { port, at_us, upsert_us }))
                }
                _ => Err(format!("burst: not a `cluster port` line: {l:?}")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_burst_answer() {
        let ports = ports_of("0 10000 15 3\n1 10001\n\n").unwrap();
        let p = |port, at_us, upsert_us| Published { port, at_us, upsert_us };
        assert_eq!(
            ports.into_iter().collect::<Vec<_>>(),
            vec![(0, p(10000, Some(15), Some(3))), (1, p(10001, None, None))]
        );
        assert!(ports_of("0\n").is_err());
    }
}
