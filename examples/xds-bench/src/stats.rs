//! The server's own figures during a run: `GET /bench/stats` of `xds-bench-server` (live tasks,
//! open streams, RSS, CPU) and `/proc/<pid>` when the pid is known, sampled in the background for
//! the maximum RSS and, optionally, an RSS log (`elapsed_s,rss_bytes,cpu_s,tasks,streams`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::http::Url;
use super::sys;

/// One reading of the server. Each figure is `None` when no source had it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerStats {
    /// Tasks alive in the server's runtime.
    pub tasks: Option<u64>,
    /// Open xDS streams.
    pub streams: Option<u64>,
    /// Resident set size, in bytes.
    pub rss_bytes: Option<u64>,
    /// User + system CPU seconds.
    pub cpu_s: Option<f64>,
}

/// Where the server's figures come from: its `/bench/stats` URL, its pid, or both (`/proc` wins
/// for RSS and CPU).
#[derive(Debug, Clone, Default)]
pub struct StatsSource {
    /// `http://host:port/bench/stats`.
    pub url: Option<Url>,
    /// The server's pid.
    pub pid: Option<u32>,
}

impl StatsSource {
    /// Reads the server once; fails only when no source answered.
    pub async fn read(&self) -> Result<ServerStats, String> {
        let mut stats = ServerStats::default();
        let mut errors = Vec::new();
        if let Some(url) = &self.url {
            match url.get(&url.path, Duration::from_secs(5)).await.and_then(|b| parse(&b)) {
                Ok(s) => stats = s,
                Err(e) => errors.push(format!("{}{}: {e}", url.authority, url.path)),
            }
        }
        if let Some(pid) = self.pid {
            match sys::sample(&pid.to_string()) {
                Ok(p) => {
                    stats.rss_bytes = Some(p.rss_kib * 1024);
                    stats.cpu_s = Some(p.cpu_s);
                }
                Err(e) => errors.push(format!("/proc/{pid}: {e}")),
            }
        }
        if errors.len() == usize::from(self.url.is_some()) + usize::from(self.pid.is_some()) {
            return Err(if errors.is_empty() {
                "no stats source".to_owned()
            } else {
                errors.join("; ")
            });
        }
        Ok(stats)
    }
}

/// Reads the JSON of `/bench/stats`: `{"tasks":N,"streams":N,"rss_bytes":N,"cpu_s":F}`.
fn parse(body: &str) -> Result<ServerStats, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("not JSON ({e}): {body:.80}"))?;
    Ok(ServerStats {
        tasks: v["tasks"].as_u64(),
        streams: v["streams"].as_u64(),
        rss_bytes: v["rss_bytes"].as_u64(),
        cpu_s: v["cpu_s"].as_f64(),
    })
}

/// What the background sampler saw.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    /// Samples taken.
    pub count: usize,
    /// The first sample's RSS, in bytes.
    pub first_rss: Option<u64>,
    /// The largest RSS seen, in bytes.
    pub max_rss: Option<u64>,
    /// The last sample's RSS, in bytes.
    pub last_rss: Option<u64>,
    /// The RSS when [`Sampler::mark`] was called last (e.g. after the storm), in bytes.
    pub marked_rss: Option<u64>,
    /// The first error, if a sample failed.
    pub error: Option<String>,
}

/// Samples the server every period until dropped or [`finish`](Sampler::finish)ed.
#[derive(Debug)]
pub struct Sampler {
    samples: Arc<Mutex<Samples>>,
    task: tokio::task::JoinHandle<()>,
    source: StatsSource,
}

impl Sampler {
    /// Starts sampling `source` every `every`; with `log`, appends one CSV line per sample to that
    /// file (a header first when the file is new or empty).
    pub fn start(source: StatsSource, every: Duration, log: Option<&str>) -> Result<Self, String> {
        let mut log = match log {
            Some(path) => {
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| format!("cannot open {path}: {e}"))?;
                if file.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
                    writeln!(file, "elapsed_s,rss_bytes,cpu_s,tasks,streams")
                        .map_err(|e| format!("cannot write {path}: {e}"))?;
                }
                Some(file)
            }
            None => None,
        };
        let samples = Arc::new(Mutex::new(Samples::default()));
        let shared = samples.clone();
        let src = source.clone();
        let task = tokio::spawn(async move {
            let start = Instant::now();
            let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let reading = src.read().await;
                let elapsed = start.elapsed().as_secs_f64();
                let mut s = shared.lock().unwrap_or_else(PoisonError::into_inner);
                match reading {
                    Ok(r) => {
                        s.count += 1;
                        if let Some(rss) = r.rss_bytes {
                            s.first_rss.get_or_insert(rss);
                            s.max_rss = Some(s.max_rss.map_or(rss, |m| m.max(rss)));
                            s.last_rss = Some(rss);
                        }
                        if let Some(file) = &mut log {
                            let _ = writeln!(file, "{}", csv_line(elapsed, &r));
                        }
                    }
                    Err(e) => {
                        if s.error.is_none() {
                            eprintln!("warning: cannot sample the server: {e}");
                            s.error = Some(e);
                        }
                    }
                }
            }
        });
        Ok(Sampler { samples, task, source })
    }

    /// Takes a sample now and remembers its RSS as the marked one.
    pub async fn mark(&self) {
        if let Ok(ServerStats { rss_bytes: Some(rss), .. }) = self.source.read().await {
            self.samples.lock().unwrap_or_else(PoisonError::into_inner).marked_rss = Some(rss);
        }
    }

    /// Stops sampling; returns what was seen.
    pub fn finish(self) -> Samples {
        self.task.abort();
        self.samples.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `elapsed_s,rss_bytes,cpu_s,tasks,streams`, empty where unknown.
fn csv_line(elapsed: f64, r: &ServerStats) -> String {
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    let mut line = format!("{elapsed:.1},{},", opt(r.rss_bytes));
    if let Some(cpu) = r.cpu_s {
        let _ = write!(line, "{cpu:.2}");
    }
    let _ = write!(line, ",{},{}", opt(r.tasks), opt(r.streams));
    line
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_stats_json_and_writes_csv() {
        let s = parse(r#"{"tasks":12,"streams":3,"rss_bytes":1048576,"cpu_s":1.5}"#).unwrap();
        assert_eq!(
            s,
            ServerStats {
                tasks: Some(12),
                streams: Some(3),
                rss_bytes: Some(1 << 20),
                cpu_s: Some(1.5)
            }
        );
        assert_eq!(csv_line(2.0, &s), "2.0,1048576,1.50,12,3");
        assert_eq!(csv_line(0.3, &ServerStats::default()), "0.3,,,,");
        assert!(parse("<html>").is_err());
    }
}
