//! What a run checks besides convergence: that every client came back after a server restart,
//! and that every client ends at the final version of every updated resource.

use std::io::Write as _;
use std::time::{Duration, Instant};

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
