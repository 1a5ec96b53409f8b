//! Process facts from `/proc` (CPU time, RSS) and the open-file limit.

use std::io;

/// CPU time and resident memory of a process at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcSample {
    /// User + system CPU seconds since the process started.
    pub cpu_s: f64,
    /// Of which in user space: the process's own work. System time (the kernel's, mostly
    /// copying bytes to and from sockets) varies far more from run to run for the same bytes,
    /// so the user share is the steadier figure to compare servers by.
    pub user_s: f64,
    /// Resident set size, in KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Of which anonymous memory, in KiB (`RssAnon`): the heap and the stacks, what the process
    /// allocated. The rest of the RSS is mostly pages of the binary read from disk, and how many
    /// of them are resident moves by half a MiB between two builds of the same code.
    pub anon_kib: u64,
}

/// Samples process `pid` (`"self"` for this one) from `/proc/<pid>/stat` and `/proc/<pid>/status`.
pub fn sample(pid: &str) -> io::Result<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces), from field 3 (state).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    // utime is field 14 and stime field 15 of the file: 11 and 12 after the state.
    let (user_ticks, cpu_ticks) = (ticks(11), ticks(11) + ticks(12));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let seconds = |ticks: u64| ticks as f64 / clock_ticks() as f64;
    Ok(ProcSample {
        cpu_s: seconds(cpu_ticks),
        user_s: seconds(user_ticks),
        rss_kib: kib("VmRSS:"),
        anon_kib: kib("RssAnon:"),
    })
}

fn clock_ticks() -> i64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t } else { 100 }
}

/// Raises this process's soft open-file limit to its hard limit (each xDS connection is a file
/// descriptor; 5,000 clients need more than the usual 1,024). Returns the new soft limit.
pub use xds_server::transport::raise_fd_limit;

/// The `p`-th percentile (0..=100, nearest rank) of sorted `values`.
pub fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_this_process() {
        let s = sample("self").unwrap();
        assert!(s.rss_kib > 0);
        assert!(s.anon_kib > 0 && s.anon_kib <= s.rss_kib);
        assert!(s.cpu_s >= s.user_s && s.user_s >= 0.0);
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[7], 1.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
