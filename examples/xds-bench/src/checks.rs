//! What a run checks besides convergence: that every client came back after a server restart
//! (or, with several servers, that the clients of a killed one moved to the others), and that
//! every client ends at the final version of every updated resource.

use std::io::Write as _;
use std::time::{Duration, Instant};

use super::sys::percentile;
use super::track::{Subset, Tracker};

/// Whether every client's stream broke and came back after `READY FOR RESTART`.
pub(super) struct Restart {
    /// How long until the last client was back.
    elapsed: Duration,
    /// The clients (not stuck) that did not come back in time.
    pub(super) missing: Vec<usize>,
    wait: Duration,
}

impl Restart {
    pub(super) fn line(&self, clients: usize) -> String {
        if self.missing.is_empty() {
            return format!(
                "restart: all {clients} clients reconnected {:.2} s after READY FOR RESTART",
                self.elapsed.as_secs_f64()
            );
        }
        let some: Vec<String> = self.missing.iter().take(5).map(|c| format!("load-{c}")).collect();
        format!(
            "FAILED restart: {} of {clients} clients never reconnected within {:?} (e.g. {})",
            self.missing.len(),
            self.wait,
            some.join(", ")
        )
    }
}

/// Prints `READY FOR RESTART` and waits, at most `wait`, until every client (but the stuck ones)
/// established a new stream.
pub(super) async fn restart(tracker: &Tracker, wait: Duration) -> Restart {
    let before = tracker.sessions();
    let clients: Vec<usize> = (0..tracker.clients()).filter(|&c| !tracker.is_stuck(c)).collect();
    println!("READY FOR RESTART");
    let _ = std::io::stdout().flush();
    let start = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let missing: Vec<usize> =
            clients.iter().copied().filter(|&c| !tracker.reconnected(c, before[c])).collect();
        if missing.is_empty() || start.elapsed() > wait {
            return Restart { elapsed: start.elapsed(), missing, wait };
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!(
                "  restart: {}/{} clients reconnected after {:?}",
                clients.len() - missing.len(),
                clients.len(),
                start.elapsed()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the clients of a killed server moved to the others after `READY FOR FAILOVER`.
pub(crate) struct Failover {
    /// The killed server's index.
    server: usize,
    /// How many clients were on it.
    clients: usize,
    /// Per client that moved: microseconds from its stream's break to its first response
    /// on another server, sorted.
    times: Vec<u32>,
    /// From the first of their streams breaking to the last of them synced elsewhere.
    all: Option<Duration>,
    /// Those (not stuck) that were not synced on another server in time.
    missing: Vec<usize>,
    /// Clients of the other servers whose stream broke meanwhile (none should).
    others_broken: usize,
    /// Clients per server at the end.
    spread: Vec<usize>,
    wait: Duration,
}

impl Failover {
    pub(crate) fn passed(&self) -> bool {
        self.missing.is_empty()
    }

    pub(super) fn lines(&self, servers: &[String]) -> Vec<String> {
        let name = servers.get(self.server).map_or("?", String::as_str);
        let s = |us: u32| f64::from(us) / 1e6;
        let mut lines = vec![if self.missing.is_empty() {
            format!(
                "failover: all {} clients of server {} ({name}) reconnected to another server and synced {:.2} s after the first of their streams broke (per client, break -> first response: p50 {:.2} s, p99 {:.2} s, max {:.2} s)",
                self.clients,
                self.server,
                self.all.unwrap_or_default().as_secs_f64(),
                s(percentile(&self.times, 50.0)),
                s(percentile(&self.times, 99.0)),
                s(self.times.last().copied().unwrap_or(0)),
            )
        } else {
            let some: Vec<String> =
                self.missing.iter().take(5).map(|c| format!("load-{c}")).collect();
            format!(
                "FAILED failover: {} of the {} clients of server {} ({name}) were not synced on another server within {:?} (e.g. {})",
                self.missing.len(),
                self.clients,
                self.server,
                self.wait,
                some.join(", ")
            )
        }];
        lines.push(format!(
            "failover: clients of the other servers whose stream broke meanwhile: {}; clients per server now: {:?}",
            self.others_broken, self.spread
        ));
        lines
    }
}

/// Prints `READY FOR FAILOVER` and waits, at most `wait`, until every client (but the stuck ones)
/// of server `server` (of `servers`) has a stream on another server that got its first response (the server is meant to be killed meanwhile, and not restarted).
pub(super) async fn failover(
    tracker: &Tracker,
    server: usize,
    servers: usize,
    wait: Duration,
) -> Failover {
    let before = tracker.sessions();
    let (clients, others): (Vec<usize>, Vec<usize>) = (0..tracker.clients())
        .filter(|&c| !tracker.is_stuck(c))
        .partition(|&c| tracker.server_of(c) == server);
    let ready_us = tracker.now_us();
    println!("READY FOR FAILOVER");
    let _ = std::io::stdout().flush();
    let start = Instant::now();
    let mut last_report = Instant::now();
    let moved =
        |c: usize| tracker.synced_since(c, before[c]).filter(|_| tracker.server_of(c) != server);
    let missing = loop {
        let missing: Vec<usize> = clients.iter().copied().filter(|&c| moved(c).is_none()).collect();
        if missing.is_empty() || start.elapsed() > wait {
            break missing;
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            eprintln!(
                "  failover: {}/{} clients moved after {:?}",
                clients.len() - missing.len(),
                clients.len(),
                start.elapsed()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut times = Vec::new();
    let (mut first_break, mut last_sync) = (u64::MAX, 0);
    for &c in &clients {
        let (Some(down), Some(synced)) = (tracker.down_at(c).filter(|&d| d >= ready_us), moved(c))
        else {
            continue;
        };
        first_break = first_break.min(down);
        last_sync = last_sync.max(synced);
        times.push(u32::try_from(synced.saturating_sub(down)).unwrap_or(u32::MAX));
    }
    times.sort_unstable();
    let all = (missing.is_empty() && !times.is_empty())
        .then(|| Duration::from_micros(last_sync.saturating_sub(first_break)));
    let now = tracker.sessions();
    let others_broken = others.iter().filter(|&&c| now[c] != before[c]).count();
    let mut spread = vec![0; servers];
    for c in 0..tracker.clients() {
        if let Some(n) = spread.get_mut(tracker.server_of(c)) {
            *n += 1;
        }
    }
    Failover { server, clients: clients.len(), times, all, missing, others_broken, spread, wait }
}

/// Whether every client holds the final content of every cluster an update changed.
pub(super) struct FinalState {
    clients: usize,
    clusters: usize,
    /// (client, cluster, port held, port expected).
    mismatches: Vec<(usize, u32, u32, u32)>,
}

impl FinalState {
    pub(super) fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }

    pub(super) fn line(&self) -> String {
        if self.mismatches.is_empty() {
            return format!(
                "final state: all {} clients at the final version of every resource ({} updated clusters checked)",
                self.clients, self.clusters
            );
        }
        let some: Vec<String> = self
            .mismatches
            .iter()
            .take(5)
            .map(|(c, k, held, want)| {
                format!("load-{c} cluster-{k} holds port {held}, expected {want}")
            })
            .collect();
        format!(
            "final state: FAILED: {} (client, cluster) pairs not at the final version (e.g. {})",
            self.mismatches.len(),
            some.join("; ")
        )
    }
}

/// Checks that every client that is not stuck holds, of every cluster an update changed, the
/// port of its last update; waits a little (bounded) for stragglers.
pub(super) async fn final_state(
    tracker: &Tracker,
    expected: &[(u32, u32)],
    eds_per_client: usize,
    clusters: usize,
    wait: Duration,
) -> FinalState {
    let clients: Vec<usize> = (0..tracker.clients()).filter(|&c| !tracker.is_stuck(c)).collect();
    let deadline = Instant::now() + wait;
    loop {
        let mut mismatches = Vec::new();
        for &(k, want) in expected {
            for &c in &clients {
                if !Subset::of(c, eds_per_client, clusters).contains(k) {
                    continue;
                }
                let held = tracker.held_port(c, k).unwrap_or(0);
                if held != want {
                    mismatches.push((c, k, held, want));
                }
            }
        }
        if mismatches.is_empty() || Instant::now() > deadline {
            return FinalState { clients: clients.len(), clusters: expected.len(), mismatches };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_state_names_the_clients_behind() {
        let t = Tracker::new(3, 1);
        t.plan(4, &[2, 3]);
        t.on_cla(0, 2, 10001);
        t.on_cla(1, 2, 10001);
        t.on_cla(0, 3, 10002);
        t.on_cla(1, 3, 9);
        let state = |expected: &[(u32, u32)]| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
            rt.block_on(final_state(&t, expected, 0, 4, Duration::ZERO))
        };
        let ok = state(&[(2, 10001)]);
        assert!(ok.passed(), "client 2 is stuck: not checked");
        assert!(ok.line().starts_with("final state: all 2 clients at the final version"));
        let behind = state(&[(2, 10001), (3, 10002)]);
        assert!(!behind.passed());
        assert!(behind.line().contains("load-1 cluster-3 holds port 9, expected 10002"));
    }
}
