//! Counters in Prometheus text format.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use crate::status::lock;

/// One rendered series: name, kind, help and how to read it.
type Series = (&'static str, &'static str, &'static str, fn(&PerType) -> f64);

#[derive(Debug, Default)]
struct PerType {
    streams: i64,
    requests: u64,
    responses: u64,
    response_bytes: u64,
    acks: u64,
    nacks: u64,
    stale: u64,
    /// Time from a response to its ACK: sum, count, and how many fell in each of
    /// [`ACK_BUCKETS`] (not cumulative; rendering adds them up).
    ack_seconds_sum: f64,
    ack_count: u64,
    ack_buckets: [u64; ACK_BUCKETS.len()],
}

/// Upper bounds (seconds) of the ACK latency histogram's buckets: a proxy ACKs a small update in
/// a millisecond or two and a large or warming one in seconds; past 10 s only `+Inf` counts.
const ACK_BUCKETS: [f64; 12] =
    [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The server's counters. Render them with [`Metrics::render`] (served at `GET /metrics` by the
/// example binary).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Variant -> type label -> counters. Labels are `&'static str` from a bounded set (the
    /// built-in types, the configured custom types, `unknown`): nothing a peer sends becomes a
    /// series (conventions 18).
    per_type: Mutex<BTreeMap<&'static str, BTreeMap<&'static str, PerType>>>,
    refused: Mutex<BTreeMap<&'static str, u64>>,
    /// Streams that waited for a join permit for `join_max_wait` and went on ungated.
    join_gate_passed: std::sync::atomic::AtomicU64,
    /// Streams the cache serves nothing of some type they asked for (their group has none).
    unserved: std::sync::atomic::AtomicI64,
}

impl Metrics {
    fn with(&self, variant: &'static str, type_label: &'static str, f: impl FnOnce(&mut PerType)) {
        let mut map = lock(&self.per_type);
        f(map.entry(variant).or_default().entry(type_label).or_default());
    }

    pub(crate) fn stream_opened(&self, variant: &'static str, type_label: &'static str) {
        self.with(variant, type_label, |m| m.streams += 1);
    }

    pub(crate) fn stream_closed(&self, variant: &'static str, type_label: &'static str) {
        self.with(variant, type_label, |m| m.streams -= 1);
    }

    pub(crate) fn request(&self, variant: &'static str, type_label: &'static str) {
        self.with(variant, type_label, |m| m.requests += 1);
    }

    pub(crate) fn response(&self, variant: &'static str, type_label: &'static str, bytes: usize) {
        self.with(variant, type_label, |m| {
            m.responses += 1;
            m.response_bytes += bytes as u64;
        });
    }

    pub(crate) fn ack(
        &self,
        variant: &'static str,
        type_label: &'static str,
        latency: Option<Duration>,
    ) {
        self.with(variant, type_label, |m| {
            m.acks += 1;
            if let Some(l) = latency {
                let seconds = l.as_secs_f64();
                m.ack_seconds_sum += seconds;
                m.ack_count += 1;
                if let Some(i) = ACK_BUCKETS.iter().position(|&le| seconds <= le) {
                    m.ack_buckets[i] += 1;
                }
            }
        });
    }

    pub(crate) fn nack(&self, variant: &'static str, type_label: &'static str) {
        self.with(variant, type_label, |m| m.nacks += 1);
    }

    pub(crate) fn stale(&self, variant: &'static str, type_label: &'static str) {
        self.with(variant, type_label, |m| m.stale += 1);
    }

    pub(crate) fn refused(&self, reason: &'static str) {
        *lock(&self.refused).entry(reason).or_default() += 1;
    }

    /// A stream became unserved (`1`) or served again or ended (`-1`).
    pub(crate) fn unserved(&self, delta: i64) {
        self.unserved.fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn join_gate_passed(&self) {
        self.join_gate_passed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The counters in Prometheus text exposition format.
    pub fn render(&self) -> String {
        let map = lock(&self.per_type);
        let mut out = String::new();
        let series: [Series; 7] = [
            (
                "xds_streams",
                "gauge",
                "Streams open, by variant and type (ADS streams count once per type they use).",
                |m| m.streams as f64,
            ),
            ("xds_requests_total", "counter", "Requests received.", |m| m.requests as f64),
            ("xds_responses_total", "counter", "Responses sent.", |m| m.responses as f64),
            ("xds_response_bytes_total", "counter", "Bytes of resource bodies sent.", |m| {
                m.response_bytes as f64
            }),
            ("xds_acks_total", "counter", "Responses ACKed.", |m| m.acks as f64),
            ("xds_nacks_total", "counter", "Responses NACKed.", |m| m.nacks as f64),
            ("xds_stale_requests_total", "counter", "Requests with a stale nonce.", |m| {
                m.stale as f64
            }),
        ];
        for (name, kind, help, get) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (variant, types) in map.iter() {
                for (t, m) in types {
                    let t = escape(t);
                    let _ =
                        writeln!(out, "{name}{{variant=\"{variant}\",type=\"{t}\"}} {}", get(m));
                }
            }
        }
        let _ = writeln!(
            out,
            "# HELP xds_ack_latency_seconds Seconds from sending a response to its ACK.\n\
             # TYPE xds_ack_latency_seconds histogram"
        );
        for (variant, t, m) in
            map.iter().flat_map(|(v, types)| types.iter().map(move |(t, m)| (v, t, m)))
        {
            let labels = format!("variant=\"{variant}\",type=\"{}\"", escape(t));
            let mut cumulative = 0;
            for (le, n) in ACK_BUCKETS.iter().zip(m.ack_buckets) {
                cumulative += n;
                let _ = writeln!(
                    out,
                    "xds_ack_latency_seconds_bucket{{{labels},le=\"{le}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "xds_ack_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {}\n\
                 xds_ack_latency_seconds_sum{{{labels}}} {}\n\
                 xds_ack_latency_seconds_count{{{labels}}} {}",
                m.ack_count, m.ack_seconds_sum, m.ack_count
            );
        }
        let _ = writeln!(
            out,
            "# HELP xds_refused_total Streams or requests refused, by reason.\n# TYPE xds_refused_total counter"
        );
        for (reason, n) in lock(&self.refused).iter() {
            let _ = writeln!(out, "xds_refused_total{{reason=\"{reason}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP xds_join_gate_passed_total Streams that waited for a join permit for \
             join_max_wait and went on ungated.\n# TYPE xds_join_gate_passed_total counter\n\
             xds_join_gate_passed_total {}",
            self.join_gate_passed.load(std::sync::atomic::Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP xds_streams_unserved Streams whose node is served nothing of a type it asked \
             for (its group has no configuration): they wait, or end after unserved_timeout.\n\
             # TYPE xds_streams_unserved gauge\nxds_streams_unserved {}",
            self.unserved.load(std::sync::atomic::Ordering::Relaxed).max(0)
        );
        out
    }
}

/// A label value in Prometheus text: backslash, quote and newline escaped (the values come from
/// a bounded set already; this keeps a custom type's configured name from breaking the format).
fn escape(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return v.into();
    }
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.stream_opened("sotw", "cluster");
        m.response("sotw", "cluster", 120);
        m.ack("sotw", "cluster", Some(Duration::from_millis(5)));
        m.nack("sotw", "cluster");
        m.refused("rate_limit");
        let text = m.render();
        assert!(text.contains("xds_streams{variant=\"sotw\",type=\"cluster\"} 1"));
        // The ACK latency is a histogram: 5 ms falls in the 0.005 bucket and every one above.
        assert!(text.contains("# TYPE xds_ack_latency_seconds histogram"));
        let bucket = |le: &str| {
            format!(
                "xds_ack_latency_seconds_bucket{{variant=\"sotw\",type=\"cluster\",le=\"{le}\"}}"
            )
        };
        assert!(text.contains(&format!("{} 0", bucket("0.001"))), "{text}");
        assert!(text.contains(&format!("{} 1", bucket("0.005"))), "{text}");
        assert!(text.contains(&format!("{} 1", bucket("+Inf"))), "{text}");
        assert!(
            text.contains("xds_ack_latency_seconds_count{variant=\"sotw\",type=\"cluster\"} 1")
        );
        assert!(text.contains("xds_response_bytes_total{variant=\"sotw\",type=\"cluster\"} 120"));
        assert!(text.contains("xds_nacks_total{variant=\"sotw\",type=\"cluster\"} 1"));
        assert!(
            text.contains("xds_ack_latency_seconds_count{variant=\"sotw\",type=\"cluster\"} 1")
        );
        assert!(text.contains("xds_refused_total{reason=\"rate_limit\"} 1"));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape("cluster"), "cluster");
    }
}
